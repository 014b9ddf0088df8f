/*
 * The dual TCP backup link (lobby_dual.h): the links and their hellos, the
 * dialling, the queues, and which path brought each sealed frame first.
 */
#include "lobby_dual.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "frame.h"
#include "htab.h"
#include "lobby.h"
#include "log.h"
#include "seal.h"

/* Room for two whole records: what a wakeup reads at most. */
#define IN_BUF     (2 * (LINK_REC_HDR + LINK_FRAME_MAX))
#define FILE_MAX   (4096) /* bytes of tpf2mp_tcp_backup.txt read; a longer file is "on" */
#define TICK_MS    (500)  /* ages, stalls, the stats line (DualSocket.tick's pace) */
#define NAME_BYTES (LOBBY_NAME_MAX * 4 + 1)
#define SALT_LEN   (4)
#define SEEN_KEY   (SEAL_NONCE_LEN + sizeof(struct addr_key))

/* A record waiting for the socket (or for netsim's delay). */
struct qf {
	struct qf *next;
	long long due_ms;
	size_t len;
	uint8_t rec[];
};

enum link_state {
	LS_CONNECTING, /* our attempt, connect in flight */
	LS_HELLO,      /* accepted, its hello not read yet */
	LS_MATCHING,   /* host: the hello checked out, its joiner not joined yet */
	LS_UP,
};

struct dpeer;
struct lobby_dual;

struct link {
	struct lobby_dual *d;
	struct link *next; /* d->links, or d->dead once closed */
	struct ev_io *io;
	enum link_state state;
	bool dialed; /* we connected; else we accepted */
	bool closed;
	bool pending;    /* counted in d->pending (accepted, not up yet) */
	bool peer_hello; /* dialed: the peer's own hello may come first */
	bool holding;    /* dialed: our records wait (HOLD_MS, or the peer's first) */
	bool out_armed;
	struct dpeer *p; /* dialling for, or up with */
	struct addr tcp; /* the other end of the connection */
	struct ev_timer timer, due, kick;
	uint8_t salt[SALT_LEN]; /* the hello's sealer */
	char name[LINK_NAME_MAX + 1];
	uint8_t in[IN_BUF];
	size_t in_len;
	struct qf *qh, *qt;
	size_t qn, head_off;
	long long last_write_ms;
	uint64_t sent, received, dropped;
};

struct dpeer {
	struct lobby_dual *d;
	struct addr addr; /* its UDP address: where the lobby sends */
	char name[NAME_BYTES];
	char my_name[NAME_BYTES];
	struct link *link;    /* up */
	struct link *dialing; /* our attempt in flight */
	struct ev_io *lst;    /* joiner: the listener of the window */
	struct ev_timer dial;
	long long dial_until; /* 0: no window open */
	bool gone;
	bool salt_known;
	uint8_t salt[SALT_LEN]; /* of its sealed frames */
	uint64_t udp_first, tcp_first, tcp_only, udp_only, queue_drops;
	uint32_t tcp_late[LOBBY_DUAL_LAGS], udp_late[LOBBY_DUAL_LAGS]; /* us */
	size_t ntcp, nudp, itcp, iudp;
};

/* A sealed frame seen on one path, waiting for the other copy. */
struct seen {
	unsigned long long t_us;
	struct addr_key peer;
	bool via_link;
};

struct lobby_dual {
	struct lobby *l;
	bool host, stopping;
	struct htab *peers; /* addr_key -> struct dpeer * */
	struct htab *seen;  /* nonce | addr_key -> struct seen */
	struct link *links, *dead;
	size_t pending, matching, qbytes;
	struct ev_timer tick, reap;
	long long stats_ms;
	/* The sealed frame opened last: a peer_up during its dispatch is its
	 * sender's, and so is its salt. */
	struct addr last_from;
	uint8_t last_salt[SALT_LEN];
	bool last_known;
	struct lobby_dual_stats st;
	struct log_ratelimit warn;
};

static void consume(struct link *k);
static void on_link_timer(struct ev_timer *t, void *arg);
static void window_open(struct dpeer *p, long long first_ms);
static void window_close(struct dpeer *p);

/* ---- pure parts ---- */

static bool py_space(char c)
{
	/* str.strip()'s ASCII whitespace: \t..\r, \x1c..\x1f and space. */
	return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
}

bool lobby_dual_switch_on(const char *text, size_t len)
{
	static const char *const off[] = {"0", "off", "no"};

	while (len > 0 && py_space(text[0]))
		text++, len--;
	while (len > 0 && py_space(text[len - 1]))
		len--;
	for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++)
		if (len == strlen(off[i]) && memcmp(text, off[i], len) == 0)
			return false;
	return true;
}

uint32_t lobby_dual_pick(const uint32_t *sorted, size_t n, double f)
{
	size_t i;

	if (n == 0)
		return 0;
	i = (size_t)(f * (double)n);
	return sorted[i < n - 1 ? i : n - 1];
}

/* ---- helpers ---- */

static long long now_ms(const struct lobby_dual *d)
{
	return ev_now(d->l->loop);
}

static struct dpeer *peer_get(const struct lobby_dual *d, const struct addr *a)
{
	struct addr_key k;
	struct dpeer **pp;

	addr_to_key(a, &k);
	pp = htab_get(d->peers, &k);
	return pp != NULL ? *pp : NULL;
}

/* The joiner's one peer: the host. */
static struct dpeer *the_host(const struct lobby_dual *d)
{
	struct dpeer **pp = htab_oldest(d->peers);

	return pp != NULL ? *pp : NULL;
}

/* XXX: O(peers) per hello; fine below LOBBY_CAP. */
static struct dpeer *peer_by_salt(const struct lobby_dual *d, const uint8_t *salt)
{
	for (struct dpeer **pp = htab_oldest(d->peers); pp != NULL; pp = htab_newer(d->peers, pp))
		if ((*pp)->salt_known && memcmp((*pp)->salt, salt, SALT_LEN) == 0)
			return *pp;
	return NULL;
}

static bool salt_fits(const struct dpeer *p, const uint8_t *salt)
{
	return !p->salt_known || memcmp(p->salt, salt, SALT_LEN) == 0;
}

/*
 * Whether a hello's name is this peer's: the name itself, or the one the
 * host de-duplicated it from ("bob" for "bob#2": netpunch's joiners say
 * the name they asked for).
 */
static bool name_fits(const char *peer, const char *hello)
{
	size_t n = strlen(hello);

	if (strcmp(peer, hello) == 0)
		return true;
	if (strncmp(peer, hello, n) != 0 || peer[n] != '#' || peer[n + 1] == '\0')
		return false;
	for (const char *c = peer + n + 1; *c != '\0'; c++)
		if (*c < '0' || *c > '9')
			return false;
	return true;
}

/* "host connected" when the host's attempt made the link (dual_tcp's words). */
static const char *how(const struct lobby_dual *d, const struct link *k)
{
	return d->host == k->dialed ? "host connected" : "joiner connected";
}

/* ---- links ---- */

static void on_io(struct ev_io *io, uint32_t events, void *arg);

static void on_reap(struct ev_timer *t, void *arg)
{
	struct lobby_dual *d = arg;

	(void)t;
	while (d->dead != NULL) {
		struct link *k = d->dead;

		d->dead = k->next;
		free(k);
	}
}

static struct link *link_new(struct lobby_dual *d, int fd, const struct addr *tcp, bool dialed,
			     uint32_t events)
{
	struct link *k = calloc(1, sizeof(*k));

	if (k == NULL)
		return NULL;
	k->d = d;
	k->tcp = *tcp;
	k->dialed = dialed;
	ev_timer_init(&k->timer);
	ev_timer_init(&k->due);
	ev_timer_init(&k->kick);
	k->io = ev_io_add(d->l->loop, fd, events, on_io, k);
	if (k->io == NULL) {
		free(k);
		return NULL;
	}
	k->next = d->links;
	d->links = k;
	return k;
}

static void queue_free(struct link *k)
{
	while (k->qh != NULL) {
		struct qf *q = k->qh;

		k->qh = q->next;
		k->d->qbytes -= q->len;
		free(q);
	}
	k->qt = NULL;
	k->qn = 0;
	k->head_off = 0;
}

/*
 * Closes a link (the struct itself goes at the next loop turn, so callers
 * up the stack may still look at k->closed). A link that was up says so,
 * and its peer dials again for 30 s: UDP carries on meanwhile.
 */
static void link_close(struct link *k, const char *why)
{
	struct lobby_dual *d = k->d;
	struct dpeer *p = k->p;
	char a[ADDR_STRLEN];

	if (k->closed)
		return;
	k->closed = true;
	for (struct link **pp = &d->links; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == k) {
			*pp = k->next;
			break;
		}
	}
	if (k->pending)
		d->pending--;
	if (k->state == LS_MATCHING)
		d->matching--;
	ev_timer_stop(d->l->loop, &k->timer);
	ev_timer_stop(d->l->loop, &k->due);
	ev_timer_stop(d->l->loop, &k->kick);
	ev_io_del(k->io, true);
	k->io = NULL;
	queue_free(k);
	if (p != NULL && p->dialing == k)
		p->dialing = NULL;
	if (p != NULL && p->link == k) {
		p->link = NULL;
		log_info("dual-link-closed peer=%s name=\"%s\" sent=%llu received=%llu "
			 "queue_drops=%llu reason=\"%s\"",
			 addr_str(&p->addr, a, sizeof(a)), p->name, (unsigned long long)k->sent,
			 (unsigned long long)k->received, (unsigned long long)k->dropped, why);
		if (!p->gone && !d->stopping)
			window_open(p, LOBBY_DUAL_DIAL_EVERY_MS);
	} else {
		log_debug("dual-conn-closed tcp=%s reason=\"%s\"", addr_str(&k->tcp, a, sizeof(a)),
			  why);
	}
	k->p = NULL;
	k->next = d->dead;
	d->dead = k;
	if (!ev_timer_armed(&d->reap))
		ev_timer_start(d->l->loop, &d->reap, 0, on_reap, d);
}

/* Hostile or broken input: closed, counted, said (one line per 10 s). */
static bool refuse(struct link *k, const char *why)
{
	struct lobby_dual *d = k->d;
	char a[ADDR_STRLEN];
	unsigned long sup;

	d->st.refused++;
	if (log_ratelimit_ok(&d->warn, now_ms(d), 10000, &sup))
		log_info("dual-refused tcp=%s reason=\"%s\" suppressed=%lu",
			 addr_str(&k->tcp, a, sizeof(a)), why, sup);
	else
		log_debug("dual-refused tcp=%s reason=\"%s\"", addr_str(&k->tcp, a, sizeof(a)),
			  why);
	link_close(k, why);
	return false;
}

static void want_out(struct link *k, bool on)
{
	if (on == k->out_armed)
		return;
	/* The stall clock starts when the socket first says full. */
	if (on)
		k->last_write_ms = now_ms(k->d);
	k->out_armed = on;
	ev_io_mod(k->io, EPOLLIN | (on ? EPOLLOUT : 0));
}

static void on_due(struct ev_timer *t, void *arg);

/* Writes what is due, in order; what the socket does not take waits. */
static void flush(struct link *k)
{
	struct lobby_dual *d = k->d;
	long long now = now_ms(d);

	if (k->holding)
		return; /* release() flushes */
	while (k->qh != NULL && k->qh->due_ms <= now) {
		struct qf *q = k->qh;
		ssize_t n = send(ev_io_fd(k->io), q->rec + k->head_off, q->len - k->head_off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			want_out(k, true);
			return;
		}
		if (n <= 0) {
			link_close(k, n < 0 ? strerror(errno) : "write failed");
			return;
		}
		k->last_write_ms = now;
		k->head_off += (size_t)n;
		if (k->head_off < q->len)
			continue;
		k->head_off = 0;
		k->qh = q->next;
		if (k->qh == NULL)
			k->qt = NULL;
		k->qn--;
		d->qbytes -= q->len;
		free(q);
		k->sent++;
		d->st.frames_out++;
	}
	want_out(k, false);
	if (k->qh != NULL)
		ev_timer_start(d->l->loop, &k->due, k->qh->due_ms - now, on_due, k);
}

static void on_due(struct ev_timer *t, void *arg)
{
	(void)t;
	flush(arg);
}

/*
 * netpunch reads a hello with recv()s of up to 256 bytes until one ends in
 * a newline: a record that lands right behind our hello joins it in one
 * read, the line no longer ends in '\n', and the link is refused (seen
 * with netpunch 0.6.1.24's host: "hello ... (None) matches no joiner").
 * So after our hello our records wait until the peer's first record shows
 * it took the link, or LOBBY_DUAL_HOLD_MS, whichever comes first; UDP
 * carries them meanwhile.
 */
static void release(struct link *k)
{
	if (!k->holding)
		return;
	k->holding = false;
	ev_timer_stop(k->d->l->loop, &k->timer);
	flush(k);
}

/* Drops the oldest frame not partly written; false when there is none. */
static bool drop_oldest(struct link *k)
{
	struct qf *prev = NULL, *q = k->qh;

	if (q != NULL && k->head_off > 0) {
		prev = q;
		q = q->next;
	}
	if (q == NULL)
		return false;
	if (prev != NULL)
		prev->next = q->next;
	else
		k->qh = q->next;
	if (k->qt == q)
		k->qt = prev;
	k->qn--;
	k->d->qbytes -= q->len;
	free(q);
	k->dropped++;
	k->p->queue_drops++;
	k->d->st.queue_drops++;
	return true;
}

/*
 * One E frame onto a link: at once when nothing waits and netsim holds
 * nothing back (the usual case: no copy, no allocation), else queued
 * behind the others, 1,024 at most, the oldest dropped first.
 */
static void enqueue(struct link *k, const uint8_t *frame, size_t len)
{
	struct lobby_dual *d = k->d;
	long long delay = lobby_net_link_delay_ms(d->l), now = now_ms(d);
	size_t rlen = LINK_REC_HDR + len, written = 0;
	uint8_t hdr[LINK_REC_HDR] = {(uint8_t)(len >> 8), (uint8_t)len};
	struct qf *q;

	if (delay <= 0 && k->qh == NULL && !k->holding) {
		struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)(uintptr_t)frame, len}};
		struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
		ssize_t n = sendmsg(ev_io_fd(k->io), &mh, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n == (ssize_t)rlen) {
			k->last_write_ms = now;
			k->sent++;
			d->st.frames_out++;
			return;
		}
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			link_close(k, strerror(errno));
			return;
		}
		written = n > 0 ? (size_t)n : 0;
	}
	while (written == 0 &&
	       (k->qn >= LOBBY_DUAL_QUEUE_MAX || d->qbytes + rlen > LOBBY_DUAL_QUEUE_BYTES)) {
		if (!drop_oldest(k)) {
			/* Only a frame half written is left: the new one goes. */
			k->dropped++;
			k->p->queue_drops++;
			d->st.queue_drops++;
			return;
		}
	}
	q = malloc(sizeof(*q) + rlen);
	if (q == NULL) {
		if (written > 0)
			link_close(k, "out of memory mid-record");
		return;
	}
	q->next = NULL;
	q->len = rlen;
	memcpy(q->rec, hdr, sizeof(hdr));
	memcpy(q->rec + sizeof(hdr), frame, len);
	/* netsim: a pipeline delay, in order (TcpLink.send). */
	q->due_ms = now + (delay > 0 ? delay : 0);
	if (k->qt != NULL && q->due_ms < k->qt->due_ms)
		q->due_ms = k->qt->due_ms;
	if (k->qt != NULL)
		k->qt->next = q;
	else
		k->qh = q;
	k->qt = q;
	k->qn++;
	d->qbytes += rlen;
	if (written > 0) {
		k->head_off = written;
		k->last_write_ms = now;
	}
	flush(k);
}

static bool link_up(struct link *k, struct dpeer *p)
{
	struct lobby_dual *d = k->d;
	char a[ADDR_STRLEN], t[ADDR_STRLEN];
	int on = 1;

	if (p->link != NULL && p->link != k) {
		/* Our own attempt came through late: the first link stands
		 * (DualSocket.attach). A hello the peer sent on a connection
		 * it made says it has no link any more: its new one stands. */
		if (k->dialed) {
			link_close(k, "a link is up already");
			return false;
		}
		link_close(p->link, "the peer made a new link");
	}
	if (k->pending) {
		k->pending = false;
		d->pending--;
	}
	if (p->dialing == k)
		p->dialing = NULL;
	k->p = p;
	k->state = LS_UP;
	p->link = k;
	ev_timer_stop(d->l->loop, &k->timer);
	setsockopt(ev_io_fd(k->io), IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	ev_io_mod(k->io, EPOLLIN);
	k->out_armed = false;
	k->last_write_ms = now_ms(d);
	d->st.links_up++;
	log_info("dual-link-up peer=%s name=\"%s\" tcp=%s how=\"%s\"",
		 addr_str(&p->addr, a, sizeof(a)), p->name, addr_str(&k->tcp, t, sizeof(t)),
		 how(d, k));
	window_close(p);
	return true;
}

static void on_kick(struct ev_timer *t, void *arg)
{
	(void)t;
	consume(arg);
}

/* The host: the hello names a joined peer (by its sealer), or waits for
 * the join up to 10 s. False when the link was closed. */
static bool match(struct link *k)
{
	struct lobby_dual *d = k->d;
	struct dpeer *p = peer_by_salt(d, k->salt);

	if (p == NULL) {
		if (k->state != LS_MATCHING) {
			/* netpunch's joiner dials as its punch lands, often
			 * before its join is handled here. */
			k->state = LS_MATCHING;
			d->matching++;
			ev_io_mod(k->io, 0);
			ev_timer_start(d->l->loop, &k->timer, LOBBY_DUAL_MATCH_MS, on_link_timer,
				       k);
		}
		return true;
	}
	if (!name_fits(p->name, k->name)) {
		char why[64 + NAME_BYTES];

		snprintf(why, sizeof(why), "the name is not its sealer's (%s)", p->name);
		return refuse(k, why);
	}
	if (k->state == LS_MATCHING) {
		k->state = LS_HELLO;
		d->matching--;
	}
	return link_up(k, p);
}

/* Hellos waiting for their joiner try again (a peer came up, a salt
 * became known); what they buffered is read on the next loop turn. */
static void retry_matching(struct lobby_dual *d)
{
	bool again = true;

	while (again && d->matching > 0) {
		again = false;
		for (struct link *k = d->links; k != NULL; k = k->next) {
			if (k->state != LS_MATCHING || peer_by_salt(d, k->salt) == NULL)
				continue;
			if (match(k) && k->state == LS_UP && k->in_len > 0)
				ev_timer_start(d->l->loop, &k->kick, 0, on_kick, k);
			again = true;
			break;
		}
	}
}

/*
 * A hello line: it must parse, its seal open under the session key (the
 * replay window applies) to exactly its name. Then, by who we are: the
 * peer's own hello on a link we made (a simultaneous open), the host's
 * hello to a joiner, or a joiner's hello to the host. False: closed.
 */
static bool hello(struct link *k, const uint8_t *line, size_t len)
{
	struct lobby_dual *d = k->d;
	struct link_hello h;
	uint8_t plain[LINK_SEALED_MAX];
	struct dpeer *p;
	int r;

	if (link_hello_parse(line, len, &h) < 0)
		return refuse(k, "bad hello");
	r = seal_open(d->l->sealer, h.sealed, h.sealed_len, plain, sizeof(plain));
	if (r == -EALREADY)
		return refuse(k, "replayed hello");
	if (r < 0)
		return refuse(k, "bad seal");
	if ((size_t)r != h.name_len || memcmp(plain, h.name, h.name_len) != 0)
		return refuse(k, "the sealed name differs");
	memcpy(k->salt, h.sealed, SALT_LEN);
	memcpy(k->name, h.name, h.name_len);
	k->name[h.name_len] = '\0';
	if (k->state == LS_UP) {
		if (!salt_fits(k->p, k->salt))
			return refuse(k, "not the peer's sealer");
		k->peer_hello = false;
		return true;
	}
	ev_timer_stop(d->l->loop, &k->timer);
	if (!d->host) {
		p = the_host(d);
		if (p == NULL || !salt_fits(p, k->salt))
			return refuse(k, "not the host's sealer");
		return link_up(k, p);
	}
	return match(k);
}

static void shift(struct link *k, size_t off)
{
	if (off == 0)
		return;
	memmove(k->in, k->in + off, k->in_len - off);
	k->in_len -= off;
}

/*
 * What came in: the hello line, if one is due, then records, each handed
 * to lobby_net as a datagram from the peer's address.
 */
static void consume(struct link *k)
{
	struct lobby_dual *d = k->d;
	struct lobby *l = d->l;
	size_t off = 0;

	if (k->closed)
		return;
	/* A record starts with its length, 0x00..0x10; a hello with 'T'. */
	if (k->state == LS_UP && k->peer_hello && k->in_len > 0 && k->in[0] != 'T')
		k->peer_hello = false;
	if (k->state == LS_HELLO || (k->state == LS_UP && k->peer_hello)) {
		size_t look = k->in_len < LINK_HELLO_MAX ? k->in_len : LINK_HELLO_MAX;
		const uint8_t *nl = memchr(k->in, '\n', look);

		if (nl == NULL) {
			if (k->in_len >= LINK_HELLO_MAX)
				refuse(k, "hello over 256 bytes");
			return;
		}
		off = (size_t)(nl - k->in) + 1;
		if (!hello(k, k->in, off))
			return;
		shift(k, off);
		off = 0;
		if (k->state != LS_UP)
			return; /* matching: the rest waits for the join */
	}
	while (k->state == LS_UP && off < k->in_len) {
		const uint8_t *f = NULL;
		size_t flen = 0;
		int n = link_rec_next(k->in + off, k->in_len - off, &f, &flen);
		struct addr from;

		if (n == 0)
			break;
		if (n < 0) {
			refuse(k, n == -EMSGSIZE ? "a record's length is out of bounds"
						 : "a record that is not a sealed frame");
			return;
		}
		off += (size_t)n;
		k->received++;
		d->st.frames_in++;
		/* A copy: the handlers may end the peer (a leave). */
		from = k->p->addr;
		lobby_net_inject_datagram(l, &from, f, flen);
		if (k->closed || l->stopping)
			return;
	}
	shift(k, off);
	/* A record from the peer: it has taken the link. */
	if (k->holding && k->received > 0)
		release(k);
}

static void link_read(struct link *k, uint32_t events)
{
	ssize_t n;
	int e;

	if (k->state == LS_MATCHING) {
		/* Not read until its joiner is known; a hang-up ends it. */
		if (events & (EPOLLERR | EPOLLHUP))
			refuse(k, "closed while waiting for its join");
		return;
	}
	if (k->in_len == sizeof(k->in)) {
		/* Cannot happen (consume leaves less than a record), but a
		 * full buffer must not spin the loop. */
		refuse(k, "input buffer full");
		return;
	}
	n = recv(ev_io_fd(k->io), k->in + k->in_len, sizeof(k->in) - k->in_len, MSG_DONTWAIT);
	e = errno;
	if (n < 0 && (e == EAGAIN || e == EWOULDBLOCK || e == EINTR))
		return;
	if (n <= 0) {
		if (k->state == LS_HELLO)
			refuse(k, "closed before its hello");
		else
			link_close(k, n == 0 ? "closed by the peer" : strerror(e));
		return;
	}
	k->in_len += (size_t)n;
	consume(k);
}

static void connect_done(struct link *k)
{
	struct lobby_dual *d = k->d;
	struct dpeer *p = k->p;
	uint8_t line[LINK_HELLO_MAX], sealed[LINK_SEALED_MAX];
	int err = 0, n, s;
	socklen_t elen = sizeof(err);
	size_t cut;

	if (getsockopt(ev_io_fd(k->io), SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
		err = errno;
	if (err != 0) {
		link_close(k, strerror(err));
		return;
	}
	if (p->link != NULL) {
		link_close(k, "a link is up already");
		return;
	}
	/* Whoever connected says hello (dual_tcp.dial). */
	cut = link_name_cut(p->my_name, strlen(p->my_name));
	s = seal_seal(d->l->sealer, (const uint8_t *)p->my_name, cut, sealed, sizeof(sealed));
	n = s < 0 ? s
		  : link_hello_build(line, sizeof(line), (const uint8_t *)p->my_name, cut, sealed,
				     (size_t)s);
	if (n < 0 || send(ev_io_fd(k->io), line, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) != n) {
		link_close(k, n < 0 ? "no hello to say" : "hello not sent");
		return;
	}
	k->peer_hello = true;
	if (link_up(k, p)) {
		k->holding = true;
		ev_timer_start(d->l->loop, &k->timer, LOBBY_DUAL_HOLD_MS, on_link_timer, k);
	}
}

static void on_io(struct ev_io *io, uint32_t events, void *arg)
{
	struct link *k = arg;

	(void)io;
	if (k->closed)
		return;
	if (k->state == LS_CONNECTING) {
		connect_done(k);
		return;
	}
	if ((events & EPOLLOUT) && k->state == LS_UP) {
		flush(k);
		if (k->closed)
			return;
	}
	if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
		link_read(k, events);
}

static void on_link_timer(struct ev_timer *t, void *arg)
{
	struct link *k = arg;

	(void)t;
	if (k->state == LS_CONNECTING)
		link_close(k, "connect timed out");
	else if (k->state == LS_UP)
		release(k);
	else if (k->state == LS_MATCHING)
		refuse(k, "matches no joiner");
	else if (k->state == LS_HELLO)
		refuse(k, "no hello within 5 s");
}

/* ---- dialling ---- */

/* A TCP socket of the peer's family bound to our lobby port's number
 * (IPv6: v6-only, beside the v6 UDP socket and the bulk v6 listener). */
static int bound_socket(struct lobby_dual *d, const struct addr *peer)
{
	bool v6 = !addr_is_v4(peer);
	struct addr local;
	int fd, on = 1;

	fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* Linux wants both on the listener and on every socket bound beside
	 * it (dual_tcp.dial); the port is our UDP lobby port's number. */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
	setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on));
	if (v6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
	addr_parse(&local, v6 ? "[::]:0" : "0.0.0.0:0", -1);
	addr_set_port(&local, lobby_net_port(d->l->net));
	if (bind(fd, (const struct sockaddr *)&local.ss, local.len) < 0) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

static void dial_once(struct dpeer *p)
{
	struct lobby_dual *d = p->d;
	char a[ADDR_STRLEN];
	struct link *k;
	int fd = bound_socket(d, &p->addr);

	d->st.dials++;
	if (fd >= 0 && connect(fd, (const struct sockaddr *)&p->addr.ss, p->addr.len) < 0 &&
	    errno != EINPROGRESS) {
		int e = -errno;

		close(fd);
		fd = e;
	}
	if (fd < 0) {
		log_debug("dual-dial-fail peer=%s reason=\"%s\"", addr_str(&p->addr, a, sizeof(a)),
			  strerror(-fd));
		return;
	}
	k = link_new(d, fd, &p->addr, true, EPOLLOUT);
	if (k == NULL) {
		close(fd);
		return;
	}
	k->state = LS_CONNECTING;
	k->p = p;
	p->dialing = k;
	/* Each attempt has the second until the next (settimeout(DIAL_EVERY)). */
	ev_timer_start(d->l->loop, &k->timer, LOBBY_DUAL_DIAL_EVERY_MS, on_link_timer, k);
}

static void on_accept(struct ev_io *io, uint32_t events, void *arg)
{
	struct dpeer *p = arg;
	struct lobby_dual *d = p->d;

	(void)events;
	for (int i = 0; i < 8; i++) {
		struct addr from;
		struct link *k;
		int fd;

		from.len = sizeof(from.ss);
		fd = accept4(ev_io_fd(io), (struct sockaddr *)&from.ss, &from.len,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		if (d->pending >= LOBBY_DUAL_PENDING_MAX ||
		    (k = link_new(d, fd, &from, false, EPOLLIN)) == NULL) {
			char t[ADDR_STRLEN];

			d->st.too_many++;
			log_debug("dual-refused tcp=%s reason=\"%zu wait already\"",
				  addr_str(&from, t, sizeof(t)), d->pending);
			close(fd);
			continue;
		}
		k->state = LS_HELLO;
		k->pending = true;
		d->pending++;
		ev_timer_start(d->l->loop, &k->timer, LOBBY_DUAL_HELLO_MS, on_link_timer, k);
	}
}

/* The joiner's half of the simultaneous open: a listener on our port. */
static void listen_open(struct dpeer *p)
{
	struct lobby_dual *d = p->d;
	int fd = bound_socket(d, &p->addr);

	if (fd >= 0 && listen(fd, 4) < 0) {
		int e = -errno;

		close(fd);
		fd = e;
	}
	if (fd < 0) {
		log_info("dual-no-listener port=%u reason=\"%s\"", lobby_net_port(d->l->net),
			 strerror(-fd));
		return;
	}
	p->lst = ev_io_add(d->l->loop, fd, EPOLLIN, on_accept, p);
	if (p->lst == NULL)
		close(fd);
}

static void on_dial(struct ev_timer *t, void *arg)
{
	struct dpeer *p = arg;
	struct lobby_dual *d = p->d;
	char a[ADDR_STRLEN];

	if (p->link != NULL) {
		window_close(p);
		return;
	}
	if (now_ms(d) >= p->dial_until) {
		log_info("dual-dial-gave-up peer=%s name=\"%s\" after_ms=%d then=udp-only",
			 addr_str(&p->addr, a, sizeof(a)), p->name, LOBBY_DUAL_DIAL_FOR_MS);
		window_close(p);
		return;
	}
	if (p->dialing == NULL)
		dial_once(p);
	ev_timer_start(d->l->loop, t, LOBBY_DUAL_DIAL_EVERY_MS, on_dial, p);
}

/* 30 s of attempts, one a second (the joiner listening too). */
static void window_open(struct dpeer *p, long long first_ms)
{
	struct lobby_dual *d = p->d;

	if (p->dial_until != 0)
		return;
	p->dial_until = now_ms(d) + first_ms + LOBBY_DUAL_DIAL_FOR_MS;
	if (!d->host)
		listen_open(p);
	ev_timer_start(d->l->loop, &p->dial, first_ms, on_dial, p);
}

static void window_close(struct dpeer *p)
{
	ev_timer_stop(p->d->l->loop, &p->dial);
	if (p->dialing != NULL)
		link_close(p->dialing, "the window closed");
	ev_io_del(p->lst, true);
	p->lst = NULL;
	p->dial_until = 0;
}

/* ---- which path came first (dual_tcp.DualStats) ---- */

static void push_lag(uint32_t *ring, size_t *n, size_t *i, unsigned long long us)
{
	ring[*i] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
	*i = (*i + 1) % LOBBY_DUAL_LAGS;
	if (*n < LOBBY_DUAL_LAGS)
		(*n)++;
}

/* A frame seen on one path only, for 3 s (or pushed out of a full table). */
static void age_one(struct lobby_dual *d, struct seen *s)
{
	struct dpeer **pp = htab_get(d->peers, &s->peer);

	if (pp != NULL) {
		if (s->via_link)
			(*pp)->tcp_only++;
		else
			(*pp)->udp_only++;
	}
	htab_remove(d->seen, s);
}

static void note(struct lobby_dual *d, struct dpeer *p, const uint8_t *nonce, bool via_link)
{
	uint8_t key[SEEN_KEY];
	unsigned long long now = ev_monotonic_us();
	struct seen *s;

	memcpy(key, nonce, SEAL_NONCE_LEN);
	addr_to_key(&p->addr, (struct addr_key *)(void *)(key + SEAL_NONCE_LEN));
	s = htab_get(d->seen, key);
	if (s == NULL) {
		/* XXX: a full table ages its oldest early (counted one-path). */
		if (htab_count(d->seen) == htab_capacity(d->seen))
			age_one(d, htab_oldest(d->seen));
		s = htab_insert(d->seen, key, false, NULL);
		if (s == NULL)
			return;
		s->t_us = now;
		memcpy(&s->peer, key + SEAL_NONCE_LEN, sizeof(s->peer));
		s->via_link = via_link;
		if (via_link)
			p->tcp_first++;
		else
			p->udp_first++;
		return;
	}
	if (s->via_link == via_link)
		return; /* the same path again: a replay, not the other copy */
	if (via_link)
		push_lag(p->tcp_late, &p->ntcp, &p->itcp, now - s->t_us);
	else
		push_lag(p->udp_late, &p->nudp, &p->iudp, now - s->t_us);
	htab_remove(d->seen, s);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* "p50/p90/max" in ms, or "-" (DualStats._q). */
static void lag_text(const uint32_t *ring, size_t n, char *buf, size_t size)
{
	uint32_t v[LOBBY_DUAL_LAGS];

	if (n == 0) {
		snprintf(buf, size, "-");
		return;
	}
	memcpy(v, ring, n * sizeof(v[0]));
	qsort(v, n, sizeof(v[0]), cmp_u32);
	snprintf(buf, size, "%.1f/%.1f/%.1f", lobby_dual_pick(v, n, 0.5) / 1000.0,
		 lobby_dual_pick(v, n, 0.9) / 1000.0, v[n - 1] / 1000.0);
}

static void stats_lines(struct lobby_dual *d)
{
	for (struct dpeer **pp = htab_oldest(d->peers); pp != NULL; pp = htab_newer(d->peers, pp)) {
		struct dpeer *p = *pp;
		char a[ADDR_STRLEN], tl[64], ul[64];

		if (p->udp_first + p->tcp_first == 0)
			continue;
		lag_text(p->tcp_late, p->ntcp, tl, sizeof(tl));
		lag_text(p->udp_late, p->nudp, ul, sizeof(ul));
		log_info("dual-stats peer=%s name=\"%s\" link=%s udp_first=%llu tcp_first=%llu "
			 "tcp_only=%llu udp_only=%llu tcp_later_ms=%s tcp_later_n=%zu "
			 "udp_later_ms=%s udp_later_n=%zu queue_drops=%llu",
			 addr_str(&p->addr, a, sizeof(a)), p->name, p->link != NULL ? "up" : "down",
			 (unsigned long long)p->udp_first, (unsigned long long)p->tcp_first,
			 (unsigned long long)p->tcp_only, (unsigned long long)p->udp_only, tl,
			 p->ntcp, ul, p->nudp, (unsigned long long)p->queue_drops);
	}
}

static void on_tick(struct ev_timer *t, void *arg)
{
	struct lobby_dual *d = arg;
	unsigned long long us = ev_monotonic_us();
	long long now = now_ms(d);
	struct seen *s;

	while ((s = htab_oldest(d->seen)) != NULL &&
	       us - s->t_us >= LOBBY_DUAL_AGE_OUT_MS * 1000ULL)
		age_one(d, s);
	/* A link whose socket took nothing for 10 s is no backup. */
	for (struct link *k = d->links, *next; k != NULL; k = next) {
		next = k->next;
		if (k->state == LS_UP && k->out_armed &&
		    now - k->last_write_ms >= LOBBY_DUAL_STALL_MS)
			link_close(k, "stalled: the socket took nothing for 10 s");
	}
	if (now - d->stats_ms >= LOBBY_DUAL_STATS_MS) {
		d->stats_ms = now;
		stats_lines(d);
	}
	ev_timer_start(d->l->loop, t, TICK_MS, on_tick, d);
}

/* ---- the lobby's side ---- */

int lobby_dual_start(struct lobby *l, bool host)
{
	const char *dir = l->cfg.io_dir[0] != '\0' ? l->cfg.io_dir : ".";
	char path[PATH_MAX + 32];
	struct lobby_dual *d;
	int fd;

	if (l->dual != NULL)
		return 0;
	if (l->sealer == NULL) {
		log_info("dual-off reason=plaintext");
		return 0;
	}
	if (snprintf(path, sizeof(path), "%s/%s", dir, LOBBY_DUAL_FILE) < (int)sizeof(path) &&
	    (fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		char text[FILE_MAX];
		size_t got = 0;
		ssize_t n;

		while (got < sizeof(text) && (n = read(fd, text + got, sizeof(text) - got)) > 0)
			got += (size_t)n;
		close(fd);
		if (got < sizeof(text) && !lobby_dual_switch_on(text, got)) {
			log_info("dual-off reason=\"%s says so\"", LOBBY_DUAL_FILE);
			return 0;
		}
	}
	d = calloc(1, sizeof(*d));
	if (d == NULL)
		return -ENOMEM;
	d->l = l;
	d->host = host;
	d->peers = htab_new(LOBBY_CAP, sizeof(struct addr_key), sizeof(struct dpeer *));
	d->seen = htab_new(LOBBY_DUAL_SEEN_MAX, SEEN_KEY, sizeof(struct seen));
	if (d->peers == NULL || d->seen == NULL) {
		htab_free(d->peers);
		htab_free(d->seen);
		free(d);
		return -ENOMEM;
	}
	ev_timer_init(&d->tick);
	ev_timer_init(&d->reap);
	d->stats_ms = now_ms(d);
	ev_timer_start(l->loop, &d->tick, TICK_MS, on_tick, d);
	l->dual = d;
	log_info("dual-on side=%s", host ? "host" : "joiner");
	return 0;
}

static void peer_free(struct lobby_dual *d, struct dpeer *p, const char *why)
{
	struct addr_key k;

	p->gone = true;
	window_close(p);
	if (p->link != NULL)
		link_close(p->link, why);
	addr_to_key(&p->addr, &k);
	htab_remove(d->peers, htab_get(d->peers, &k));
	free(p);
}

/* Whether an up link still holds frames to write. */
static bool any_queued(const struct lobby_dual *d)
{
	for (const struct link *k = d->links; k != NULL; k = k->next) {
		if (k->state == LS_UP && !k->closed && k->qh != NULL)
			return true;
	}
	return false;
}

static void on_drain_poll(struct ev_timer *t, void *arg)
{
	struct lobby_dual *d = arg;

	if (!any_queued(d)) {
		ev_loop_stop(d->l->loop);
		return;
	}
	ev_timer_start(d->l->loop, t, 10, on_drain_poll, d);
}

static void on_drain_cap(struct ev_timer *t, void *arg)
{
	struct lobby_dual *d = arg;

	(void)t;
	ev_loop_stop(d->l->loop);
}

void lobby_dual_drain(struct lobby *l, long timeout_ms)
{
	struct lobby_dual *d = l->dual;
	struct ev_timer poll, cap;

	if (d == NULL || !any_queued(d))
		return;
	/* The loop has stopped: run it again until the links are written. */
	ev_timer_init(&poll);
	ev_timer_init(&cap);
	ev_timer_start(l->loop, &poll, 10, on_drain_poll, d);
	ev_timer_start(l->loop, &cap, timeout_ms, on_drain_cap, d);
	ev_loop_run(l->loop);
	ev_timer_stop(l->loop, &poll);
	ev_timer_stop(l->loop, &cap);
}

void lobby_dual_free(struct lobby_dual *d)
{
	struct dpeer **pp;

	if (d == NULL)
		return;
	d->stopping = true;
	stats_lines(d);
	while ((pp = htab_oldest(d->peers)) != NULL)
		peer_free(d, *pp, "exit");
	while (d->links != NULL)
		link_close(d->links, "exit");
	ev_timer_stop(d->l->loop, &d->tick);
	ev_timer_stop(d->l->loop, &d->reap);
	on_reap(NULL, d);
	log_info("dual-exit links_up=%llu refused=%llu too_many=%llu dials=%llu frames_out=%llu "
		 "frames_in=%llu queue_drops=%llu too_big=%llu",
		 (unsigned long long)d->st.links_up, (unsigned long long)d->st.refused,
		 (unsigned long long)d->st.too_many, (unsigned long long)d->st.dials,
		 (unsigned long long)d->st.frames_out, (unsigned long long)d->st.frames_in,
		 (unsigned long long)d->st.queue_drops, (unsigned long long)d->st.too_big);
	htab_free(d->peers);
	htab_free(d->seen);
	free(d);
}

/* The joiner's host answers from a new address: its record follows (or
 * the link's copies would come from where it no longer is). */
static void rekey(struct lobby_dual *d, struct dpeer *p, const struct addr *to)
{
	struct addr_key k;
	struct dpeer **pp;

	addr_to_key(&p->addr, &k);
	htab_remove(d->peers, htab_get(d->peers, &k));
	p->addr = *to;
	addr_to_key(to, &k);
	pp = htab_insert(d->peers, &k, false, NULL);
	if (pp != NULL)
		*pp = p;
}

void lobby_dual_peer_up(struct lobby *l, const struct addr *peer, const char *peer_name,
			const char *my_name)
{
	struct lobby_dual *d = l->dual;
	struct dpeer *p, **pp;
	struct addr_key k;

	if (d == NULL)
		return;
	p = peer_get(d, peer);
	if (p == NULL && !d->host && (p = the_host(d)) != NULL)
		rekey(d, p, peer);
	if (p != NULL) {
		snprintf(p->name, sizeof(p->name), "%s", peer_name != NULL ? peer_name : "");
		snprintf(p->my_name, sizeof(p->my_name), "%s", my_name);
		return;
	}
	addr_to_key(peer, &k);
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		return;
	pp = htab_insert(d->peers, &k, false, NULL);
	if (pp == NULL) {
		free(p);
		return;
	}
	*pp = p;
	p->d = d;
	p->addr = *peer;
	snprintf(p->name, sizeof(p->name), "%s", peer_name != NULL ? peer_name : "");
	snprintf(p->my_name, sizeof(p->my_name), "%s", my_name);
	ev_timer_init(&p->dial);
	if (d->last_known && addr_equal(&d->last_from, peer)) {
		memcpy(p->salt, d->last_salt, SALT_LEN);
		p->salt_known = true;
	}
	retry_matching(d);
	if (p->link == NULL)
		window_open(p, 0);
}

void lobby_dual_peer_gone(struct lobby *l, const struct addr *peer)
{
	struct lobby_dual *d = l->dual;
	struct dpeer *p;

	if (d != NULL && (p = peer_get(d, peer)) != NULL)
		peer_free(d, p, "the peer left");
}

bool lobby_dual_linked(const struct lobby *l, const struct addr *peer)
{
	const struct dpeer *p = l->dual != NULL ? peer_get(l->dual, peer) : NULL;

	return p != NULL && p->link != NULL;
}

void lobby_dual_copy(struct lobby *l, const struct addr *to, const uint8_t *dgram, size_t len)
{
	struct lobby_dual *d = l->dual;
	struct dpeer *p;

	/* Only sealed frames (DualSocket.sendto); hellos, chunks, STUN and
	 * relay binds never. */
	if (d == NULL || len < LINK_FRAME_MIN || memcmp(dgram, NP1_MAGIC, 4) != 0 ||
	    dgram[4] != NP1_EDATA)
		return;
	p = peer_get(d, to);
	if (p == NULL || p->link == NULL)
		return;
	if (len > LINK_FRAME_MAX) {
		d->st.too_big++;
		return;
	}
	enqueue(p->link, dgram, len);
}

void lobby_dual_arrival(struct lobby *l, const struct addr *from, const uint8_t *nonce,
			bool via_link)
{
	struct lobby_dual *d = l->dual;
	struct dpeer *p;

	if (d == NULL)
		return;
	d->last_from = *from;
	memcpy(d->last_salt, nonce, SALT_LEN);
	d->last_known = true;
	p = peer_get(d, from);
	if (p == NULL && !d->host && !via_link && (p = the_host(d)) != NULL) {
		if (p->salt_known && memcmp(p->salt, nonce, SALT_LEN) == 0)
			rekey(d, p, from);
		else
			p = NULL;
	}
	if (p == NULL)
		return;
	if (!p->salt_known || memcmp(p->salt, nonce, SALT_LEN) != 0) {
		memcpy(p->salt, nonce, SALT_LEN);
		p->salt_known = true;
		retry_matching(d);
	}
	note(d, p, nonce, via_link);
}

int lobby_dual_take(struct lobby *l, int fd, const struct addr *from, const uint8_t *buf,
		    size_t len)
{
	struct lobby_dual *d = l->dual;
	struct link *k;

	if (d == NULL)
		return -ENOTCONN;
	if (d->pending >= LOBBY_DUAL_PENDING_MAX || len > sizeof(k->in) ||
	    (k = link_new(d, fd, from, false, EPOLLIN)) == NULL) {
		char t[ADDR_STRLEN];

		d->st.too_many++;
		log_debug("dual-refused tcp=%s reason=\"%zu wait already\"",
			  addr_str(from, t, sizeof(t)), d->pending);
		close(fd);
		return 0;
	}
	k->state = LS_HELLO;
	k->pending = true;
	d->pending++;
	memcpy(k->in, buf, len);
	k->in_len = len;
	ev_timer_start(l->loop, &k->timer, LOBBY_DUAL_HELLO_MS, on_link_timer, k);
	/* Read on the next turn, outside the listener's callback. */
	ev_timer_start(l->loop, &k->kick, 0, on_kick, k);
	return 0;
}

void lobby_dual_stats(const struct lobby_dual *d, struct lobby_dual_stats *out)
{
	*out = d->st;
	out->links_open = 0;
	for (const struct link *k = d->links; k != NULL; k = k->next)
		out->links_open += k->state == LS_UP && !k->closed;
}
