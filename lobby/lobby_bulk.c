/*
 * The bulk TCP side channel: the host's listener and streams, the joiner's
 * pull (netpunch-wire.md §12; bulk_tcp.py's behaviour, in the loop).
 */
#include "lobby_bulk.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "frame.h"
#include "lobby.h"
#include "lobby_dual.h"
#include "lobby_save.h"
#include "lobby_xfer.h"
#include "log.h"

#define MAX_LISTEN  (2) /* IPv4 and IPv6 */
#define MAX_STREAMS (LOBBY_CAP)
#define SEND_SLICE  (4u << 20) /* bytes per sendfile call */
#define RECV_BUF    (1u << 20)
/* A stream that moves nothing this long is given up: UDP takes over
 * (netpunch's blocking sendall would wait forever while the pump skips
 * the peer, which then fails on its 30 s progress timeout). */
#define STALL_MS (3000)

/* ---- the host ---- */

struct conn {
	struct lobby_bulk *b;
	struct ev_io *io;
	struct addr peer;
	bool streaming;
	struct ev_timer hello_timer;
	uint8_t line[BULK_HELLO_MAX];
	size_t len;
	/* streaming */
	struct lobby_xsend *x;
	int target;
	uint64_t off, total;
	struct conn *next;
};

struct lobby_bulk {
	struct lobby *l;
	struct ev_io *lio[MAX_LISTEN];
	size_t nlisten;
	uint16_t port;
	struct conn *conns;
	size_t pending, streams;
	struct lobby_xsend *x;
	uint32_t sid;
	char token[BULK_TOKEN_LEN + 1];
	/* The push expected (lobby_bulk_expect_push). */
	void (*push_adopt)(void *arg, int fd);
	void *push_arg;
	uint32_t push_sid;
	char push_token[BULK_TOKEN_LEN + 1];
	struct lobby_bulk_stats st;
	struct log_ratelimit warn;
};

static void conn_close(struct conn *c)
{
	struct lobby_bulk *b = c->b;

	for (struct conn **p = &b->conns; *p != NULL; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			break;
		}
	}
	if (c->streaming)
		b->streams--;
	else
		b->pending--;
	ev_timer_stop(b->l->loop, &c->hello_timer);
	ev_io_del(c->io, true);
	free(c);
}

static void refuse(struct conn *c, const char *why)
{
	char a[ADDR_STRLEN];
	unsigned long sup;

	c->b->st.refused++;
	c->b->l->ctr.bulk_refused++;
	/* Strangers are a peer's doing: one line per 10 s, the rest at debug. */
	if (log_ratelimit_ok(&c->b->warn, ev_now(c->b->l->loop), 10000, &sup))
		log_info("bulk-refused peer=%s reason=\"%s\" suppressed=%lu",
			 addr_str(&c->peer, a, sizeof(a)), why, sup);
	else
		log_debug("bulk-refused peer=%s reason=\"%s\"", addr_str(&c->peer, a, sizeof(a)),
			  why);
	conn_close(c);
}

static void on_stall(struct ev_timer *t, void *arg)
{
	struct conn *c = arg;

	(void)t;
	log_info("bulk-stream-stalled sent=%llu total=%llu", (unsigned long long)c->off,
		 (unsigned long long)c->total);
	lobby_xsend_tcp_ended(c->x, c->target, false, c->off);
	conn_close(c);
}

/* sendfile from the save's files into sock from *off on, until total or
 * the socket is full: 1 all sent, 0 full (EPOLLOUT again), -1 broken. */
static int send_blob(int sock, struct lobby_save *s, uint64_t *off, uint64_t total)
{
	while (*off < total) {
		uint64_t want = total - *off;
		size_t i = 0;
		off_t in;
		ssize_t n;

		while (i + 1 < s->n && *off >= s->f[i].off + s->f[i].size)
			i++;
		in = (off_t)(*off - s->f[i].off);
		if (want > s->f[i].size - (uint64_t)in)
			want = s->f[i].size - (uint64_t)in;
		if (want > SEND_SLICE)
			want = SEND_SLICE;
		n = sendfile(sock, s->f[i].fd, &in, (size_t)want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n <= 0)
			return -1;
		*off += (uint64_t)n;
	}
	return 1;
}

/* The stream, as fast as the socket takes it, straight from the files. */
static void stream_more(struct conn *c)
{
	uint64_t before = c->off;
	int r = send_blob(ev_io_fd(c->io), lobby_xsend_source(c->x), &c->off, c->total);

	c->b->st.bytes += c->off - before;
	c->b->l->ctr.save_bytes_tcp += c->off - before;
	if (r == 0) {
		/* EPOLLOUT brings us back; silence this long, not. */
		if (c->off != before || !ev_timer_armed(&c->hello_timer))
			ev_timer_start(c->b->l->loop, &c->hello_timer, STALL_MS, on_stall, c);
		return;
	}
	if (r < 0) {
		lobby_xsend_tcp_ended(c->x, c->target, false, c->off);
		conn_close(c);
		return;
	}
	/* All of it: close (no shutdown, no trailer, as netpunch). */
	c->b->st.streams_ok++;
	lobby_xsend_tcp_ended(c->x, c->target, true, c->off);
	conn_close(c);
}

static void on_conn(struct ev_io *io, uint32_t events, void *arg);

static void hello(struct conn *c)
{
	struct lobby_bulk *b = c->b;
	struct bulk_hello h;
	int t;

	if (bulk_hello_parse(c->line, c->len, &h) < 0) {
		refuse(c, "bad hello");
		return;
	}
	if (h.role == BULK_SEND) {
		void (*adopt)(void *, int) = b->push_adopt;
		int fd = ev_io_fd(c->io);

		if (adopt == NULL || h.sid != b->push_sid ||
		    sodium_memcmp(h.token, b->push_token, BULK_TOKEN_LEN) != 0) {
			refuse(c, "no upload waits for that sid and token");
			return;
		}
		if (send(fd, BULK_OK, 3, MSG_NOSIGNAL) != 3) {
			conn_close(c);
			return;
		}
		/* One stream per round: the expectation is spent. */
		b->push_adopt = NULL;
		b->st.streams++;
		ev_io_del(c->io, false);
		c->io = NULL;
		conn_close(c);
		adopt(b->push_arg, fd);
		return;
	}
	if (b->x == NULL || h.role != BULK_RECV || h.sid != b->sid ||
	    sodium_memcmp(h.token, b->token, BULK_TOKEN_LEN) != 0) {
		refuse(c, "no round waits for that sid and token");
		return;
	}
	t = lobby_xsend_tcp_claim(b->x, h.name, h.name_len, &c->peer);
	if (t < 0) {
		refuse(c, "matches no waiting receiver");
		return;
	}
	if (send(ev_io_fd(c->io), BULK_OK, 3, MSG_NOSIGNAL) != 3) {
		lobby_xsend_tcp_ended(b->x, t, false, 0);
		conn_close(c);
		return;
	}
	ev_timer_stop(b->l->loop, &c->hello_timer);
	c->streaming = true;
	b->pending--;
	b->streams++;
	b->st.streams++;
	c->x = b->x;
	c->target = t;
	c->off = 0;
	c->total = lobby_xsend_source(b->x)->total;
	ev_io_mod(c->io, EPOLLOUT);
	stream_more(c);
}

/* The connection is the dual link's now (or, with no link in this
 * session, refused as any bad hello). */
static void hand_to_dual(struct conn *c)
{
	struct lobby *l = c->b->l;
	int fd = ev_io_fd(c->io);

	if (l->dual == NULL) {
		refuse(c, "a link hello, but no link in this session");
		return;
	}
	ev_io_del(c->io, false);
	c->io = NULL;
	lobby_dual_take(l, fd, &c->peer, c->line, c->len);
	conn_close(c);
}

static void on_conn(struct ev_io *io, uint32_t events, void *arg)
{
	struct conn *c = arg;
	ssize_t n;

	if (c->streaming) {
		if (events & (EPOLLERR | EPOLLHUP)) {
			lobby_xsend_tcp_ended(c->x, c->target, false, c->off);
			conn_close(c);
			return;
		}
		stream_more(c);
		return;
	}
	/* The hello: up to its newline, 256 bytes at most. */
	n = recv(ev_io_fd(io), c->line + c->len, sizeof(c->line) - c->len, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		refuse(c, "closed before its hello");
		return;
	}
	c->len += (size_t)n;
	if (memchr(c->line, '\n', c->len) != NULL) {
		/* A peer's dual TCP link shares the listener (lobby.py's
		 * link_handler); its frames may follow the hello. */
		if (link_hello_is(c->line, c->len)) {
			hand_to_dual(c);
			return;
		}
		/* Exactly one line, nothing after it. */
		if (c->line[c->len - 1] != '\n') {
			refuse(c, "bytes after the hello");
			return;
		}
		hello(c);
		return;
	}
	if (c->len == sizeof(c->line))
		refuse(c, "hello over 256 bytes");
}

static void on_hello_timeout(struct ev_timer *t, void *arg)
{
	struct conn *c = arg;

	(void)t;
	c->b->st.timeouts++;
	c->b->l->ctr.bulk_timeouts++;
	refuse(c, "no hello within 5 s");
}

static void on_accept(struct ev_io *io, uint32_t events, void *arg)
{
	struct lobby_bulk *b = arg;

	(void)events;
	for (int k = 0; k < 64; k++) {
		struct addr peer;
		struct conn *c;
		int fd;

		peer.len = sizeof(peer.ss);
		fd = accept4(ev_io_fd(io), (struct sockaddr *)&peer.ss, &peer.len,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		b->st.accepted++;
		b->l->ctr.bulk_accepted++;
		if (b->pending >= LOBBY_BULK_PENDING_MAX || b->streams >= MAX_STREAMS ||
		    (c = calloc(1, sizeof(*c))) == NULL) {
			b->st.too_many++;
			b->l->ctr.bulk_too_many++;
			close(fd);
			continue;
		}
		c->b = b;
		c->peer = peer;
		/* --max-rate holds for the stream too: the kernel paces it. */
		if (b->l->cfg.max_rate > 0) {
			uint64_t rate = b->l->cfg.max_rate;
			uint32_t rate32 = rate > UINT32_MAX ? UINT32_MAX : (uint32_t)rate;

			if (setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof(rate)) < 0)
				setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &rate32,
					   sizeof(rate32));
		}
		ev_timer_init(&c->hello_timer);
		c->io = ev_io_add(b->l->loop, fd, EPOLLIN, on_conn, c);
		if (c->io == NULL) {
			close(fd);
			free(c);
			continue;
		}
		c->next = b->conns;
		b->conns = c;
		b->pending++;
		ev_timer_start(b->l->loop, &c->hello_timer, LOBBY_BULK_HELLO_MS, on_hello_timeout,
			       c);
	}
}

static int listen_on(struct lobby_bulk *b, const char *ip, uint16_t port)
{
	struct addr a;
	int fd, on = 1;

	if (addr_parse_ip(&a, ip) < 0)
		return -EINVAL;
	addr_set_port(&a, port);
	fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
	/*
	 * The dual link's simultaneous open binds sockets to this port to
	 * dial joiners (lobby_dual); Linux lets them beside a listener only
	 * when both say SO_REUSEPORT (netpunch's listener does not, so its own
	 * host-side dial never binds there). An exception to "SO_REUSEADDR
	 * only": the port number is held exclusively by our UDP socket, so no
	 * second lobby can share it; another process of this user could.
	 */
	if (b->l->dual != NULL)
		setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on));
	if (a.ss.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
	if (bind(fd, (const struct sockaddr *)&a.ss, a.len) < 0 || listen(fd, 16) < 0) {
		int e = -errno;

		close(fd);
		return e;
	}
	b->lio[b->nlisten] = ev_io_add(b->l->loop, fd, EPOLLIN, on_accept, b);
	if (b->lio[b->nlisten] == NULL) {
		close(fd);
		return -ENOMEM;
	}
	b->nlisten++;
	return 0;
}

struct lobby_bulk *lobby_bulk_listen(struct lobby *l, uint16_t port)
{
	struct lobby_bulk *b = calloc(1, sizeof(*b));
	int r;

	if (b == NULL)
		return NULL;
	b->l = l;
	b->port = port;
	r = listen_on(b, "0.0.0.0", port);
	if (r < 0) {
		errno = -r;
		log_warn("bulk-listen-fail port=%u transfers=udp-only", port);
		free(b);
		return NULL;
	}
	/* IPv6 too, v6-only; without it the IPv4 listener serves alone. */
	if (listen_on(b, "::", port) < 0)
		log_debug("bulk-listen-v6-fail port=%u", port);
	log_info("bulk-listening port=%u", port);
	return b;
}

uint16_t lobby_bulk_port(const struct lobby_bulk *b)
{
	return b->port;
}

void lobby_bulk_expect(struct lobby_bulk *b, struct lobby_xsend *x, uint32_t sid, const char *token)
{
	b->x = x;
	b->sid = sid;
	snprintf(b->token, sizeof(b->token), "%s", token);
}

void lobby_bulk_forget(struct lobby_bulk *b, struct lobby_xsend *x)
{
	struct conn *c = b->conns;

	if (b->x == x) {
		b->x = NULL;
		sodium_memzero(b->token, sizeof(b->token));
	}
	while (c != NULL) {
		struct conn *next = c->next;

		if (c->streaming && c->x == x)
			conn_close(c);
		c = next;
	}
}

void lobby_bulk_expect_push(struct lobby_bulk *b, uint32_t sid, const char *token,
			    void (*adopt)(void *arg, int fd), void *arg)
{
	if (b == NULL)
		return;
	b->push_adopt = adopt;
	b->push_arg = arg;
	b->push_sid = sid;
	snprintf(b->push_token, sizeof(b->push_token), "%s", token != NULL ? token : "");
}

void lobby_bulk_stats(const struct lobby_bulk *b, struct lobby_bulk_stats *out)
{
	*out = b->st;
}

void lobby_bulk_free(struct lobby_bulk *b)
{
	if (b == NULL)
		return;
	while (b->conns != NULL)
		conn_close(b->conns);
	for (size_t i = 0; i < b->nlisten; i++)
		ev_io_del(b->lio[i], true);
	free(b);
}

/* ---- the joiner ---- */

enum pull_state { PULL_CONNECTING, PULL_HELLO, PULL_STREAM, PULL_OVER };

struct lobby_bulk_pull {
	struct lobby *l;
	struct lobby_bulk_pull_ops ops;
	void *arg;
	struct addr host;
	uint8_t hello[BULK_HELLO_MAX];
	size_t hello_len;
	uint64_t total, got;
	int tries;
	enum pull_state state;
	struct ev_io *io;
	struct ev_timer timer;
	uint8_t ok[3];
	size_t ok_len;
	uint8_t *buf;
	int pipe[2]; /* splice's (-1: recv and data) */
};

static void pull_try(struct lobby_bulk_pull *p);

static void pull_drop_socket(struct lobby_bulk_pull *p)
{
	ev_timer_stop(p->l->loop, &p->timer);
	ev_io_del(p->io, true);
	p->io = NULL;
}

static void on_retry(struct ev_timer *t, void *arg)
{
	(void)t;
	pull_try(arg);
}

/* A try failed before the stream was ours: again after 0.5 s, or UDP. */
static void pull_failed(struct lobby_bulk_pull *p, const char *why)
{
	char a[ADDR_STRLEN];

	pull_drop_socket(p);
	log_info("bulk-pull-fail host=%s try=%d reason=\"%s\"", addr_str(&p->host, a, sizeof(a)),
		 p->tries, why);
	if (p->tries >= LOBBY_BULK_TRIES) {
		p->state = PULL_OVER;
		log_info("bulk-pull-give-up tries=%d then=udp", p->tries);
		p->ops.gave_up(p->arg);
		return;
	}
	ev_timer_start(p->l->loop, &p->timer, LOBBY_BULK_RETRY_MS, on_retry, p);
}

static void pull_ended(struct lobby_bulk_pull *p, bool complete)
{
	pull_drop_socket(p);
	p->state = PULL_OVER;
	p->ops.ended(p->arg, complete);
}

static void on_pull_timeout(struct ev_timer *t, void *arg)
{
	struct lobby_bulk_pull *p = arg;

	(void)t;
	pull_failed(p, p->state == PULL_CONNECTING ? "connect timed out" : "no OK");
}

/*
 * The stream straight into the files: socket -> pipe -> file with
 * splice(2), the bytes never copied through us (a receiver's recv and
 * pwrite were two copies of every byte, the bound of the TCP channel).
 * 16 MiB per wakeup at most; what entered the pipe always leaves it.
 */
static void pull_splice(struct lobby_bulk_pull *p, int fd)
{
	for (int k = 0; k < 16; k++) {
		uint64_t want = p->total - p->got < RECV_BUF ? p->total - p->got : RECV_BUF;
		ssize_t in;
		size_t left;

		if (want == 0) {
			pull_ended(p, true);
			return;
		}
		in = splice(fd, NULL, p->pipe[1], NULL, (size_t)want,
			    SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (in < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (in <= 0) {
			pull_ended(p, p->got == p->total);
			return;
		}
		left = (size_t)in;
		while (left > 0) {
			uint64_t foff, room;
			loff_t off;
			ssize_t out;
			int ffd, err = 0;

			if (p->ops.locate(p->arg, p->got, &ffd, &foff, &room) < 0 || room == 0) {
				err = -EIO;
				out = 0;
			} else {
				off = (loff_t)foff;
				out = splice(p->pipe[0], NULL, ffd, &off,
					     left < room ? left : (size_t)room, SPLICE_F_MOVE);
				if (out < 0 && errno == EINTR)
					continue;
				if (out <= 0)
					err = out < 0 ? -errno : -EIO;
			}
			if (err == 0) {
				p->got += (uint64_t)out;
				left -= (size_t)out;
			}
			if (p->ops.spliced(p->arg, err == 0 ? (size_t)out : 0, err) < 0) {
				pull_drop_socket(p);
				p->state = PULL_OVER;
				return;
			}
		}
	}
}

static void on_pull(struct ev_io *io, uint32_t events, void *arg)
{
	struct lobby_bulk_pull *p = arg;
	int fd = ev_io_fd(io), err = 0;
	socklen_t elen = sizeof(err);
	ssize_t n;

	if (p->state == PULL_CONNECTING) {
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0 || err != 0) {
			pull_failed(p, strerror(err != 0 ? err : errno));
			return;
		}
		if (send(fd, p->hello, p->hello_len, MSG_NOSIGNAL) != (ssize_t)p->hello_len) {
			pull_failed(p, "hello not sent");
			return;
		}
		p->state = PULL_HELLO;
		ev_io_mod(io, EPOLLIN);
		return;
	}
	if (p->state == PULL_HELLO) {
		/* Exactly three bytes, "OK\n", else nothing is ours. */
		n = recv(fd, p->ok + p->ok_len, sizeof(p->ok) - p->ok_len, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) {
			pull_failed(p, "closed before OK");
			return;
		}
		p->ok_len += (size_t)n;
		if (p->ok_len < sizeof(p->ok))
			return;
		if (memcmp(p->ok, BULK_OK, 3) != 0) {
			pull_failed(p, "not OK");
			return;
		}
		ev_timer_stop(p->l->loop, &p->timer);
		p->state = PULL_STREAM;
		p->ops.claimed(p->arg);
		return;
	}
	if (p->state != PULL_STREAM)
		return;
	(void)events;
	if (p->pipe[0] >= 0) {
		pull_splice(p, fd);
		return;
	}
	for (int k = 0; k < 16; k++) {
		size_t want = p->total - p->got < RECV_BUF ? (size_t)(p->total - p->got) : RECV_BUF;

		if (want == 0) {
			pull_ended(p, true);
			return;
		}
		n = recv(fd, p->buf, want, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) {
			pull_ended(p, p->got == p->total);
			return;
		}
		p->got += (uint64_t)n;
		if (p->ops.data(p->arg, p->buf, (size_t)n) < 0) {
			pull_drop_socket(p);
			p->state = PULL_OVER;
			return;
		}
	}
}

static void pull_try(struct lobby_bulk_pull *p)
{
	int fd;

	p->tries++;
	p->ok_len = 0;
	fd = socket(p->host.ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		pull_failed(p, strerror(errno));
		return;
	}
	if (connect(fd, (const struct sockaddr *)&p->host.ss, p->host.len) < 0 &&
	    errno != EINPROGRESS) {
		int e = errno;

		close(fd);
		pull_failed(p, strerror(e));
		return;
	}
	p->io = ev_io_add(p->l->loop, fd, EPOLLOUT, on_pull, p);
	if (p->io == NULL) {
		close(fd);
		pull_failed(p, "out of memory");
		return;
	}
	p->state = PULL_CONNECTING;
	ev_timer_start(p->l->loop, &p->timer, LOBBY_BULK_CONNECT_MS, on_pull_timeout, p);
}

struct lobby_bulk_pull *lobby_bulk_pull_start(struct lobby *l, const struct addr *host,
					      uint32_t sid, const char *token, const char *name,
					      uint64_t total, const struct lobby_bulk_pull_ops *ops,
					      void *arg)
{
	struct lobby_bulk_pull *p = calloc(1, sizeof(*p));
	int n;

	if (p == NULL)
		return NULL;
	p->buf = malloc(RECV_BUF);
	n = bulk_hello_build(p->hello, sizeof(p->hello), BULK_RECV, sid, token, name);
	if (p->buf == NULL || n < 0) {
		free(p->buf);
		free(p);
		errno = n < 0 ? -n : ENOMEM;
		return NULL;
	}
	p->hello_len = (size_t)n;
	p->l = l;
	p->ops = *ops;
	p->pipe[0] = p->pipe[1] = -1;
	if (ops->locate != NULL && ops->spliced != NULL &&
	    pipe2(p->pipe, O_CLOEXEC | O_NONBLOCK) == 0) {
		/* As much as the pipe will take (1 MiB unless the system says
		 * less); a small one only means more calls. */
		(void)fcntl(p->pipe[1], F_SETPIPE_SZ, (int)RECV_BUF);
	} else {
		p->pipe[0] = p->pipe[1] = -1;
	}
	p->arg = arg;
	p->host = *host;
	p->total = total;
	ev_timer_init(&p->timer);
	pull_try(p);
	return p;
}

/* ---- the push ---- */

enum push_state { PUSH_CONNECTING, PUSH_HELLO, PUSH_STREAM, PUSH_OVER };

struct lobby_bulk_push {
	struct lobby *l;
	struct lobby_xsend *x;
	int target;
	struct addr to;
	uint8_t hello[BULK_HELLO_MAX];
	size_t hello_len;
	uint8_t ok[3];
	size_t ok_len;
	uint64_t off, total;
	int tries;
	enum push_state state;
	struct ev_io *io;
	struct ev_timer timer;
};

static void push_try(struct lobby_bulk_push *p);

static void push_drop(struct lobby_bulk_push *p)
{
	ev_timer_stop(p->l->loop, &p->timer);
	ev_io_del(p->io, true);
	p->io = NULL;
}

static void on_push_retry(struct ev_timer *t, void *arg)
{
	(void)t;
	push_try(arg);
}

static void push_failed(struct lobby_bulk_push *p, const char *why)
{
	char a[ADDR_STRLEN];

	push_drop(p);
	log_info("bulk-push-fail to=%s try=%d reason=\"%s\"", addr_str(&p->to, a, sizeof(a)),
		 p->tries, why);
	if (p->tries >= LOBBY_BULK_TRIES) {
		p->state = PUSH_OVER;
		log_info("bulk-push-give-up tries=%d then=udp", p->tries);
		return;
	}
	ev_timer_start(p->l->loop, &p->timer, LOBBY_BULK_RETRY_MS, on_push_retry, p);
}

/* The stream broke or ended: the round knows, the socket goes. */
static void push_ended(struct lobby_bulk_push *p, bool ok)
{
	push_drop(p);
	p->state = PUSH_OVER;
	lobby_xsend_tcp_ended(p->x, p->target, ok, p->off);
}

static void on_push_timer(struct ev_timer *t, void *arg)
{
	struct lobby_bulk_push *p = arg;

	(void)t;
	if (p->state == PUSH_STREAM) {
		log_info("bulk-stream-stalled sent=%llu total=%llu", (unsigned long long)p->off,
			 (unsigned long long)p->total);
		push_ended(p, false);
		return;
	}
	push_failed(p, p->state == PUSH_CONNECTING ? "connect timed out" : "no OK");
}

static void on_push(struct ev_io *io, uint32_t events, void *arg)
{
	struct lobby_bulk_push *p = arg;
	int fd = ev_io_fd(io), err = 0, r;
	socklen_t elen = sizeof(err);
	uint64_t before;
	ssize_t n;

	if (p->state == PUSH_CONNECTING) {
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0 || err != 0) {
			push_failed(p, strerror(err != 0 ? err : errno));
			return;
		}
		if (send(fd, p->hello, p->hello_len, MSG_NOSIGNAL) != (ssize_t)p->hello_len) {
			push_failed(p, "hello not sent");
			return;
		}
		p->state = PUSH_HELLO;
		ev_io_mod(io, EPOLLIN);
		return;
	}
	if (p->state == PUSH_HELLO) {
		n = recv(fd, p->ok + p->ok_len, sizeof(p->ok) - p->ok_len, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) {
			push_failed(p, "closed before OK");
			return;
		}
		p->ok_len += (size_t)n;
		if (p->ok_len < sizeof(p->ok))
			return;
		if (memcmp(p->ok, BULK_OK, 3) != 0) {
			push_failed(p, "not OK");
			return;
		}
		ev_timer_stop(p->l->loop, &p->timer);
		p->state = PUSH_STREAM;
		lobby_xsend_tcp_start(p->x, p->target);
		ev_io_mod(io, EPOLLOUT);
	}
	if (p->state != PUSH_STREAM)
		return;
	if (events & (EPOLLERR | EPOLLHUP)) {
		push_ended(p, false);
		return;
	}
	before = p->off;
	r = send_blob(fd, lobby_xsend_source(p->x), &p->off, p->total);
	if (r > 0) {
		/* All of it: close (no shutdown, no trailer, as netpunch). */
		push_ended(p, true);
		return;
	}
	if (r < 0) {
		push_ended(p, false);
		return;
	}
	if (p->off != before || !ev_timer_armed(&p->timer))
		ev_timer_start(p->l->loop, &p->timer, STALL_MS, on_push_timer, p);
}

static void push_try(struct lobby_bulk_push *p)
{
	int fd;

	p->tries++;
	p->ok_len = 0;
	fd = socket(p->to.ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		push_failed(p, strerror(errno));
		return;
	}
	if (connect(fd, (const struct sockaddr *)&p->to.ss, p->to.len) < 0 &&
	    errno != EINPROGRESS) {
		int e = errno;

		close(fd);
		push_failed(p, strerror(e));
		return;
	}
	p->io = ev_io_add(p->l->loop, fd, EPOLLOUT, on_push, p);
	if (p->io == NULL) {
		close(fd);
		push_failed(p, "out of memory");
		return;
	}
	p->state = PUSH_CONNECTING;
	ev_timer_start(p->l->loop, &p->timer, LOBBY_BULK_CONNECT_MS, on_push_timer, p);
}

struct lobby_bulk_push *lobby_bulk_push_start(struct lobby *l, const struct addr *to,
					      struct lobby_xsend *x, int target, uint32_t sid,
					      const char *token, const char *name)
{
	struct lobby_bulk_push *p = calloc(1, sizeof(*p));
	int n;

	if (p == NULL)
		return NULL;
	n = bulk_hello_build(p->hello, sizeof(p->hello), BULK_SEND, sid, token,
			     name != NULL && name[0] != '\0' ? name : "relay");
	if (n < 0) {
		free(p);
		errno = -n;
		return NULL;
	}
	p->hello_len = (size_t)n;
	p->l = l;
	p->x = x;
	p->target = target;
	p->to = *to;
	p->total = lobby_xsend_source(x)->total;
	ev_timer_init(&p->timer);
	push_try(p);
	return p;
}

void lobby_bulk_push_free(struct lobby_bulk_push *p)
{
	if (p == NULL)
		return;
	push_drop(p);
	free(p);
}

struct lobby_bulk_pull *lobby_bulk_pull_adopt(struct lobby *l, int fd, uint64_t total,
					      const struct lobby_bulk_pull_ops *ops, void *arg)
{
	struct lobby_bulk_pull *p = calloc(1, sizeof(*p));

	if (p == NULL || (p->buf = malloc(RECV_BUF)) == NULL) {
		free(p);
		close(fd);
		errno = ENOMEM;
		return NULL;
	}
	p->l = l;
	p->ops = *ops;
	p->arg = arg;
	p->total = total;
	p->tries = LOBBY_BULK_TRIES; /* nothing to try again: it came to us */
	p->pipe[0] = p->pipe[1] = -1;
	if (ops->locate != NULL && ops->spliced != NULL &&
	    pipe2(p->pipe, O_CLOEXEC | O_NONBLOCK) == 0)
		(void)fcntl(p->pipe[1], F_SETPIPE_SZ, (int)RECV_BUF);
	else
		p->pipe[0] = p->pipe[1] = -1;
	ev_timer_init(&p->timer);
	p->io = ev_io_add(l->loop, fd, EPOLLIN, on_pull, p);
	if (p->io == NULL) {
		close(fd);
		lobby_bulk_pull_free(p);
		errno = ENOMEM;
		return NULL;
	}
	p->state = PULL_STREAM;
	ops->claimed(arg);
	return p;
}

void lobby_bulk_pull_free(struct lobby_bulk_pull *p)
{
	if (p == NULL)
		return;
	pull_drop_socket(p);
	if (p->pipe[0] >= 0) {
		close(p->pipe[0]);
		close(p->pipe[1]);
	}
	free(p->buf);
	free(p);
}
