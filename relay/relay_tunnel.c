/*
 * The public side of the tunnel: coa-relay's wire, in our loop.
 *
 * A home host dials GET /relay/v1/host on the tunnel listener; libmicrohttpd
 * answers the upgrade and hands the socket to a ws (common/ws, wslay
 * framing). The host proves its realm with an Ed25519 signature over our
 * nonce (key from relay_keys: a file or PostgreSQL), then asks for
 * allocations: two ports from the pool (auth and world), each listening for
 * one TCP connection from the expected player IP within the allocation's
 * lifetime. An accepted connection becomes a stream: "connect" to the host,
 * bytes both ways as "data" messages (JSON + base64 for coa hosts, binary
 * frames with per-stream credits for our agent once it took x_rally), and
 * the auth stream's REALM_LIST rewritten on its way to the player
 * (common/realmlist).
 *
 * Back-pressure: a player's socket is read only while the host's send
 * queue is under TUN_HOST_HIGH (and, in binary mode, while the stream has
 * credit), so one tunnel never buffers without bound; bytes for a player
 * who stops reading wait in that stream's buffer only, up to
 * TUN_STREAM_BUF_MAX (coa hosts: the stream is then reset; our agent never
 * sends past the credit it got).
 *
 * Everything a host holds (allocations, ports, streams) is reclaimed the
 * moment its tunnel drops. Logs carry ids, addresses, times and byte
 * counts, never stream contents.
 */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <netinet/tcp.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "htab.h"
#include "httpd.h"
#include "log.h"
#include "realmlist.h"
#include "relay.h"
#include "relay_keys.h"
#include "relay_tundgram.h"
#include "relay_tunmsg.h"
#include "relay_tunpipe.h"
#include "strbuf.h"
#include "ws.h"

#define TUN_HOST_HIGH      ((size_t)1024 * 1024) /* stop reading players */
#define TUN_HOST_LOW       ((size_t)256 * 1024)  /* and start again */
#define TUN_STREAM_BUF_MAX ((size_t)2 * 1024 * 1024)
#define TUN_REAP_MS        (5000)
/* A host that sends but never reads (pings, allocate floods) would make us
 * queue answers without end: past these its messages are dropped and the
 * reaper drops the tunnel. */
#define TUN_HOST_QUEUE_MAX  ((size_t)8 * 1024 * 1024)
#define TUN_HOST_QUEUE_MSGS ((size_t)16384)
#define TUN_PENDING_HOSTS   (64)    /* handshakes at once beyond max_hosts */
#define TUN_UDP_FRESH_MS    (12000) /* the agent's UDP address counts this long (2 pings) */
#define TUN_UDP_PING_MS     (5000)
/* Datagrams to and from agents go in batches (sendmmsg before the loop
 * sleeps, recvmmsg): a game datagram costs a fraction of a syscall. */
#define TUN_BATCH (64)
#define TUN_SLOT  ((size_t)16 * 1024 + TUNDGRAM_OVER)

struct tun_host;
struct tun_alloc;

struct tun_stream {
	uint32_t id;
	struct tun_host *h;
	struct tun_alloc *a;
	int slot;             /* TUNMSG_AUTH or TUNMSG_WORLD */
	struct tunpipe p;     /* the player's socket */
	bool ok;              /* connect_ok came */
	struct realmlist *rl; /* auth stream only */
	long long opened_ms, last_ms;
	uint64_t bytes_up, bytes_down;
	struct tun_stream *next, *prev; /* the host's list */
};

struct tun_alloc {
	struct tun_host *h;
	char token[TUNMSG_ID_MAX + 1];
	char player[TUNMSG_ID_MAX + 1];
	bool has_expect;
	struct addr_ip expect;
	uint16_t port[2];
	struct ev_io *lio[2];
	struct tun_stream *st[2];
	bool done[2]; /* port back in the pool */
	long long expires_ms;
	long long expires_unix;
	struct tun_alloc *next, *prev;
};

enum host_state { H_CHALLENGE, H_LOOKUP, H_OPEN, H_CLOSING, H_GONE };

struct tun_host {
	struct relay_tunnel *t;
	struct ws *ws;
	enum host_state state;
	char nonce[TUNMSG_ID_MAX + 1];
	char realm[TUNMSG_ID_MAX + 1];
	uint8_t realm_key[16];
	struct tunmsg_hello hello;
	struct relay_keys_req *lookup;
	struct ev_timer hs_timer;
	struct addr peer;
	bool registered; /* in t->realms */
	bool bin;        /* our agent: binary data frames */
	bool x_peer;     /* our agent took TUNMSG_X_PEER: players' addresses */
	bool paused;     /* players not read: the tunnel is full */
	bool stuck;      /* its queue passed TUN_HOST_QUEUE_MAX: dropped soon */
	unsigned nallocs, nstreams;
	struct tun_alloc *allocs;
	struct tun_stream *streams;
	long long up_ms, last_rx_ms, last_ping_ms, ping_sent_ms;
	long long rtt_ms;
	/* the datagram path (relay_tundgram), once the agent took it */
	bool udp;
	uint64_t udp_id;
	uint8_t kx_pk[crypto_kx_PUBLICKEYBYTES], kx_sk[crypto_kx_SECRETKEYBYTES];
	char kx_pk_b64[TUNMSG_ID_MAX + 1];            /* as offered */
	uint8_t realm_pk[crypto_sign_PUBLICKEYBYTES]; /* verifies the agent's udp_sig */
	uint8_t rx[TUNDGRAM_KEY], tx[TUNDGRAM_KEY];
	uint64_t tx_ctr;
	struct tundgram_window win;
	struct addr udp_peer; /* where its last good datagram came from */
	long long udp_rx_ms;  /* when (0: never) */
	uint64_t udp_pings, udp_pongs, udp_ping_ctr;
	long long udp_ping_us, udp_rtt_us, udp_last_ping_ms;
	/* the data channel (x_rally TUNMSG_X_DATA): stream frames on a
	 * second connection, raw, so nothing has to be unmasked */
	char data_token[TUNMSG_ID_MAX + 1];
	bool data_ok;                 /* the agent took it and will dial */
	struct ws *data;              /* up */
	struct strbuf dasm;           /* a partial frame */
	struct tun_host *next, *prev; /* all hosts */
};

struct tun_stats {
	uint64_t hosts_accepted, hosts_refused[4], hosts_replaced, hosts_dropped, hosts_full;
	uint64_t allocs, alloc_refused[4], allocs_expired;
	uint64_t streams, stream_refused[3], stream_ends[6];
	uint64_t bytes_to_host, bytes_to_player;
	uint64_t msgs_bad, msgs_unknown, msgs_unknown_stream, msgs_early, binary_ignored;
	uint64_t udp_key_refused; /* an agent's udp_key without a good udp_sig */
	uint64_t ws_closed_oversize, ws_closed_proto;
	uint64_t rl_rewritten, rl_malformed, rl_desync;
	uint64_t targets_bad;
	uint64_t udp_in, udp_out, udp_bad, udp_replay, udp_unknown, dgram_ws_in, dgram_ws_out;
	uint64_t dgram_no_tunnel;
};

enum { REF_UNAUTHORIZED, REF_SIGNATURE, REF_HELLO, REF_TIMEOUT };
static const char *const ref_names[] = {"unauthorized", "invalid_signature", "bad_hello",
					"timeout"};
enum { AREF_EXHAUSTED, AREF_TOTAL, AREF_REALM, AREF_PLAYER };
static const char *const aref_names[] = {"ports_exhausted", "total_limit", "realm_limit",
					 "player_limit"};
static const char *const aref_text[] = {"relay ports exhausted", "too many allocations",
					"too many allocations for realm",
					"too many allocations for player"};
enum { SREF_IP, SREF_BANNED, SREF_LIMIT };
static const char *const sref_names[] = {"unexpected_ip", "banned", "stream_limit"};
enum { END_DONE, END_HOST_RESET, END_PLAYER_RESET, END_OVERFLOW, END_IDLE, END_CONNECT };
static const char *const end_names[] = {"done",     "host_reset", "player_reset",
					"overflow", "idle",       "connect_failed"};

struct relay_tunnel {
	struct relay *r;
	struct ev_loop *loop;
	struct httpd *httpd;
	struct addr bound;
	struct relay_keys *keys;
	struct htab *realms;  /* realm uuid (16 bytes) -> struct tun_host * */
	struct htab *streams; /* stream id -> struct tun_stream * */
	struct tun_host *hosts;
	unsigned nhosts_open, nhosts_all, nallocs, nstreams;
	uint32_t next_stream;
	/* the port pool: ports[0..nfree) are free; pos[p - min] is p's index */
	uint16_t *ports, *pos;
	size_t nports, nfree;
	struct ev_timer reaper;
	/* the datagram path: one UDP socket beside the tunnel listener */
	int udp_fd;
	struct ev_io *udp_io;
	struct htab *udp_ids; /* udp_id -> struct tun_host * */
	uint8_t dgram[TUNDGRAM_PAYLOAD + TUNDGRAM_OVER + 64];
	uint8_t plain[TUNDGRAM_PAYLOAD + 64];
	uint8_t *obufs, *ibufs; /* TUN_BATCH slots of TUN_SLOT bytes each */
	struct mmsghdr omsgs[TUN_BATCH], imsgs[TUN_BATCH];
	struct iovec oiov[TUN_BATCH], iiov[TUN_BATCH];
	struct addr oaddr[TUN_BATCH], iaddr[TUN_BATCH];
	unsigned nout;
	bool hooked;
	struct tun_stats st;
	uint8_t chunk[TUNMSG_CHUNK_MAX * 4];
	struct strbuf msg;
};

/* ---- the port pool: O(1) both ways ---- */

static int pool_new(struct relay_tunnel *t, uint16_t min, uint16_t max)
{
	t->nports = (size_t)max - min + 1;
	t->ports = calloc(t->nports, sizeof(*t->ports));
	t->pos = calloc(t->nports, sizeof(*t->pos));
	if (t->ports == NULL || t->pos == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < t->nports; i++) {
		t->ports[i] = (uint16_t)(min + i);
		t->pos[i] = (uint16_t)i;
	}
	t->nfree = t->nports;
	return 0;
}

static void pool_swap(struct relay_tunnel *t, size_t i, size_t j)
{
	uint16_t pi = t->ports[i], pj = t->ports[j];
	uint16_t min = t->r->cfg.tunnel_port_min;

	t->ports[i] = pj;
	t->ports[j] = pi;
	t->pos[pj - min] = (uint16_t)i;
	t->pos[pi - min] = (uint16_t)j;
}

/* A random free port (Fisher-Yates step), or 0. */
static uint16_t pool_take(struct relay_tunnel *t)
{
	size_t i;

	if (t->nfree == 0)
		return 0;
	i = randombytes_uniform((uint32_t)t->nfree);
	pool_swap(t, i, t->nfree - 1);
	t->nfree--;
	return t->ports[t->nfree];
}

static void pool_give(struct relay_tunnel *t, uint16_t port)
{
	size_t i = t->pos[port - t->r->cfg.tunnel_port_min];

	if (i < t->nfree)
		return; /* already free: an internal slip, never twice */
	pool_swap(t, i, t->nfree);
	t->nfree++;
}

/* ---- sending to a host ---- */

/* False (and the host marked) when h's queue is past the cap. */
static bool host_room(struct tun_host *h)
{
	if (h->ws == NULL || h->stuck)
		return false;
	if (ws_queued(h->ws) > TUN_HOST_QUEUE_MAX || ws_queued_msgs(h->ws) > TUN_HOST_QUEUE_MSGS) {
		h->stuck = true;
		return false;
	}
	return true;
}

static void host_send(struct tun_host *h, const struct tunmsg *m)
{
	struct relay_tunnel *t = h->t;

	if (!host_room(h))
		return;
	t->msg.len = 0;
	t->msg.bad = false;
	tunmsg_encode(m, &t->msg);
	if (!t->msg.bad && h->ws != NULL)
		ws_send(h->ws, false, t->msg.p, t->msg.len);
}

static void host_send_text(struct tun_host *h, const char *s)
{
	if (host_room(h))
		ws_send(h->ws, false, s, strlen(s));
}

static struct tunsink host_sink(struct tun_host *h)
{
	struct tunsink k = {.ws = h->ws, .data = h->data, .msg = &h->t->msg};

	return k;
}

/* Bytes waiting to go to h, on the tunnel and the data channel. */
static size_t host_queued(const struct tun_host *h)
{
	return (h->ws != NULL ? ws_queued(h->ws) : 0) + (h->data != NULL ? ws_queued(h->data) : 0);
}

/* close and reset follow the stream's data (the data channel when it is
 * up, so a close never overtakes the bytes before it). */
static void send_stream_cmd(struct tun_host *h, enum tunmsg_cmd cmd, uint32_t id)
{
	struct tunsink k = host_sink(h);

	if (!host_room(h))
		return;
	tunsink_end(&k, h->bin, cmd, id);
}

/* ---- streams ---- */

static void stream_update(struct tun_stream *s);
static void host_drop(struct tun_host *h, const char *why);

static void alloc_port_done(struct relay_tunnel *t, struct tun_alloc *a, int slot);

static void stream_free(struct tun_stream *s, int why, bool abort_player)
{
	struct tun_host *h = s->h;
	struct relay_tunnel *t = h->t;
	struct tun_stream **slot = htab_get(t->streams, &s->id);

	tunpipe_release(&s->p, abort_player);
	if (slot != NULL)
		htab_remove(t->streams, slot);
	if (s->prev != NULL)
		s->prev->next = s->next;
	else
		h->streams = s->next;
	if (s->next != NULL)
		s->next->prev = s->prev;
	h->nstreams--;
	t->nstreams--;
	t->st.stream_ends[why]++;
	if (s->rl != NULL) {
		const struct realmlist_stats *rs = realmlist_stats(s->rl);

		t->st.rl_rewritten += rs->rewritten;
		t->st.rl_malformed += rs->malformed;
		t->st.rl_desync += rs->desync;
		realmlist_free(s->rl);
	}
	log_info("tunnel-stream-end realm=%s stream=%u target=%s up=%llu down=%llu ms=%lld "
		 "reason=%s",
		 h->realm, s->id, s->slot == TUNMSG_AUTH ? "auth" : "world",
		 (unsigned long long)s->bytes_up, (unsigned long long)s->bytes_down,
		 ev_now(t->loop) - s->opened_ms, end_names[why]);
	s->a->st[s->slot] = NULL;
	alloc_port_done(t, s->a, s->slot);
	free(s);
}

/* Writes what waits for the player; -1 when the socket failed. */
static int stream_flush(struct tun_stream *s)
{
	struct tunsink k = host_sink(s->h);
	ssize_t n = tunpipe_flush(&s->p, &k);

	if (n < 0)
		return -1;
	s->bytes_down += (uint64_t)n;
	s->h->t->st.bytes_to_player += (uint64_t)n;
	return 0;
}

static void stream_update(struct tun_stream *s)
{
	uint32_t ev = tunpipe_events(&s->p, s->ok && !s->h->paused);

	if (ev != ev_io_events(s->p.io))
		ev_io_mod(s->p.io, ev);
}

/* Player -> host: one chunk per wakeup (fairness between streams). */
static void stream_read(struct tun_stream *s)
{
	struct tun_host *h = s->h;
	struct relay_tunnel *t = h->t;
	struct tunsink k = host_sink(h);
	ssize_t n = tunpipe_read(&s->p, &k, t->chunk);

	if (n == -EAGAIN)
		return;
	if (n < 0) {
		stream_free(s, END_PLAYER_RESET, false);
		return;
	}
	if (n == 0) {
		if (tunpipe_done(&s->p))
			stream_free(s, END_DONE, false);
		else
			stream_update(s);
		return;
	}
	s->last_ms = ev_now(t->loop);
	s->bytes_up += (uint64_t)n;
	t->st.bytes_to_host += (uint64_t)n;
	if (host_queued(h) > TUN_HOST_HIGH && !h->paused) {
		h->paused = true;
		for (struct tun_stream *o = h->streams; o != NULL; o = o->next)
			stream_update(o);
		return;
	}
	if (s->p.bin && s->p.credit == 0)
		stream_update(s);
}

static void on_stream_io(struct ev_io *io, uint32_t events, void *arg)
{
	struct tun_stream *s = arg;

	(void)io;
	if (events & EPOLLOUT) {
		if (stream_flush(s) < 0) {
			send_stream_cmd(s->h, TUNMSG_RESET, s->id);
			stream_free(s, END_PLAYER_RESET, false);
			return;
		}
		if (tunpipe_done(&s->p)) {
			stream_free(s, END_DONE, false);
			return;
		}
	}
	if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) &&
	    (tunpipe_events(&s->p, s->ok && !s->h->paused) & EPOLLIN))
		stream_read(s);
	else if (events & EPOLLERR) {
		send_stream_cmd(s->h, TUNMSG_RESET, s->id);
		stream_free(s, END_PLAYER_RESET, false);
		return;
	} else
		stream_update(s);
}

/* Host -> player bytes of stream s. */
static void stream_deliver(struct tun_stream *s, const uint8_t *p, size_t n)
{
	struct tun_host *h = s->h;
	int r;

	if (s->p.r_eof)
		return; /* data after close: dropped */
	s->last_ms = ev_now(h->t->loop);
	if (s->rl != NULL) {
		s->p.owed += (uint32_t)n; /* the host's bytes, whatever the rewrite makes */
		r = realmlist_feed(s->rl, p, n, &s->p.out);
	} else {
		r = tunpipe_take(&s->p, p, n);
	}
	if (r < 0 || s->p.out.bad) {
		/* The player does not read and the host (a coa host: no
		 * credits) keeps sending: this stream only gives way. */
		send_stream_cmd(h, TUNMSG_RESET, s->id);
		stream_free(s, END_OVERFLOW, true);
		return;
	}
	if (stream_flush(s) < 0) {
		send_stream_cmd(h, TUNMSG_RESET, s->id);
		stream_free(s, END_PLAYER_RESET, false);
		return;
	}
	stream_update(s);
}

/* The host finished sending on stream s. */
static void stream_host_close(struct tun_stream *s)
{
	if (s->p.r_eof)
		return;
	s->p.r_eof = true;
	if (s->rl != NULL)
		realmlist_flush(s->rl, &s->p.out);
	if (stream_flush(s) < 0) {
		stream_free(s, END_PLAYER_RESET, false);
		return;
	}
	if (tunpipe_done(&s->p))
		stream_free(s, END_DONE, false);
	else
		stream_update(s);
}

static struct tun_stream *host_stream(struct tun_host *h, uint32_t id)
{
	struct tun_stream **slot = htab_get(h->t->streams, &id);

	if (slot == NULL || (*slot)->h != h) {
		h->t->st.msgs_unknown_stream++;
		return NULL;
	}
	return *slot;
}

/* ---- allocations ---- */

static void alloc_free(struct relay_tunnel *t, struct tun_alloc *a)
{
	struct tun_host *h = a->h;

	/* Only once no stream of a is left (host_drop frees them first). */
	for (int i = 0; i < 2; i++) {
		if (a->lio[i] != NULL) {
			ev_io_del(a->lio[i], true);
			a->lio[i] = NULL;
		}
		if (!a->done[i]) {
			pool_give(t, a->port[i]);
			a->done[i] = true;
		}
	}
	if (a->prev != NULL)
		a->prev->next = a->next;
	else
		h->allocs = a->next;
	if (a->next != NULL)
		a->next->prev = a->prev;
	h->nallocs--;
	t->nallocs--;
	sodium_memzero(a->token, sizeof(a->token));
	free(a);
}

/* A port's listener or stream ended: the port goes back; the allocation
 * goes when both did. */
static void alloc_port_done(struct relay_tunnel *t, struct tun_alloc *a, int slot)
{
	if (a->lio[slot] != NULL) {
		ev_io_del(a->lio[slot], true);
		a->lio[slot] = NULL;
	}
	if (!a->done[slot]) {
		pool_give(t, a->port[slot]);
		a->done[slot] = true;
	}
	if (a->done[0] && a->done[1] && a->st[0] == NULL && a->st[1] == NULL)
		alloc_free(t, a);
}

static void on_listen(struct ev_io *io, uint32_t events, void *arg);

/* A listening socket on the port, or -errno. */
static int listen_port(struct relay_tunnel *t, uint16_t port)
{
	struct addr a = t->r->cfg.tunnel_bind;
	int fd, on = 1;

	addr_set_port(&a, port);
	fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
	if (bind(fd, (const struct sockaddr *)&a.ss, a.len) < 0 || listen(fd, 16) < 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	return fd;
}

/* Takes a port from the pool and listens on it, skipping ports another
 * program holds (they go back to the pool for later). */
static int take_port(struct relay_tunnel *t, uint16_t *port, int *fd)
{
	uint16_t busy[8];
	size_t nbusy = 0;
	int r = -EADDRINUSE;

	while (nbusy < sizeof(busy) / sizeof(busy[0])) {
		uint16_t p = pool_take(t);

		if (p == 0) {
			r = -ENOSPC;
			break;
		}
		*fd = listen_port(t, p);
		if (*fd >= 0) {
			*port = p;
			r = 0;
			break;
		}
		busy[nbusy++] = p;
	}
	for (size_t i = 0; i < nbusy; i++)
		pool_give(t, busy[i]);
	return r;
}

static void token_new(char out[static TUNMSG_ID_MAX + 1])
{
	uint8_t b[16];

	randombytes_buf(b, sizeof(b));
	sodium_bin2hex(out, TUNMSG_ID_MAX + 1, b, sizeof(b));
}

static void alloc_reply(struct tun_host *h, const struct tunmsg *req, const struct tun_alloc *a,
			int refused)
{
	struct relay_tunnel *t = h->t;
	struct tunmsg m = {.request_id = req->request_id};

	if (a == NULL) {
		m.cmd = TUNMSG_ALLOCATE_ERR;
		snprintf(m.error, sizeof(m.error), "%s", aref_text[refused]);
		t->st.alloc_refused[refused]++;
	} else {
		m.cmd = TUNMSG_ALLOCATE_OK;
		memcpy(m.token, a->token, sizeof(m.token));
		snprintf(m.relay_host, sizeof(m.relay_host), "%s", t->r->cfg.tunnel_relay_host);
		m.auth_port = a->port[TUNMSG_AUTH];
		m.world_port = a->port[TUNMSG_WORLD];
		m.expires_at = a->expires_unix;
	}
	host_send(h, &m);
}

static void do_allocate(struct tun_host *h, const struct tunmsg *m)
{
	struct relay_tunnel *t = h->t;
	const struct relay_cfg *c = &t->r->cfg;
	struct tun_alloc *a;
	struct addr ip;
	unsigned mine = 0;
	int fds[2] = {-1, -1};
	char player[37];

	/* coa's player_id is a UUID (serde refuses anything else): say so
	 * rather than allocate for garbage. */
	if (relay_keys_canon_uuid(m->player_id, player) < 0) {
		struct tunmsg e = {.cmd = TUNMSG_ALLOCATE_ERR, .request_id = m->request_id};

		snprintf(e.error, sizeof(e.error), "invalid player_id");
		t->st.msgs_bad++;
		host_send(h, &e);
		return;
	}

	for (a = h->allocs; a != NULL; a = a->next) {
		if (strcmp(a->player, player) != 0)
			continue;
		/* A retry of an allocation not used yet gets it again (coa
		 * answers any unexpired one the same way). */
		if (a->lio[0] != NULL && a->lio[1] != NULL) {
			if (!a->has_expect && m->expected_ip[0] != '\0' &&
			    addr_parse_ip(&ip, m->expected_ip) == 0) {
				addr_to_ip(&ip, &a->expect);
				a->has_expect = true;
			}
			alloc_reply(h, m, a, 0);
			return;
		}
		mine++;
	}
	if (t->nallocs >= c->tunnel_max_allocs) {
		alloc_reply(h, m, NULL, AREF_TOTAL);
		return;
	}
	if (h->nallocs >= c->tunnel_max_allocs_realm) {
		alloc_reply(h, m, NULL, AREF_REALM);
		return;
	}
	if (mine >= c->tunnel_max_allocs_player) {
		alloc_reply(h, m, NULL, AREF_PLAYER);
		return;
	}
	a = calloc(1, sizeof(*a));
	if (a == NULL) {
		alloc_reply(h, m, NULL, AREF_EXHAUSTED);
		return;
	}
	if (m->expected_ip[0] != '\0') {
		if (addr_parse_ip(&ip, m->expected_ip) < 0) {
			/* coa binds nothing then (an open port): we refuse. */
			struct tunmsg e = {.cmd = TUNMSG_ALLOCATE_ERR, .request_id = m->request_id};

			free(a);
			snprintf(e.error, sizeof(e.error), "invalid expected_client_ip");
			t->st.msgs_bad++;
			host_send(h, &e);
			return;
		}
		addr_to_ip(&ip, &a->expect);
		a->has_expect = true;
	}
	for (int i = 0; i < 2; i++) {
		if (take_port(t, &a->port[i], &fds[i]) < 0) {
			if (i == 1) {
				close(fds[0]);
				pool_give(t, a->port[0]);
			}
			free(a);
			alloc_reply(h, m, NULL, AREF_EXHAUSTED);
			return;
		}
	}
	a->h = h;
	snprintf(a->player, sizeof(a->player), "%s", player);
	token_new(a->token);
	a->expires_ms = ev_now(t->loop) + c->tunnel_alloc_timeout_ms;
	a->expires_unix = (long long)time(NULL) + c->tunnel_alloc_timeout_ms / 1000;
	for (int i = 0; i < 2; i++) {
		a->lio[i] = ev_io_add(t->loop, fds[i], EPOLLIN, on_listen, a);
		if (a->lio[i] == NULL) {
			close(fds[i]);
			if (i == 1) {
				ev_io_del(a->lio[0], true);
				a->lio[0] = NULL;
			}
			pool_give(t, a->port[0]);
			pool_give(t, a->port[1]);
			free(a);
			alloc_reply(h, m, NULL, AREF_EXHAUSTED);
			return;
		}
	}
	a->next = h->allocs;
	if (h->allocs != NULL)
		h->allocs->prev = a;
	h->allocs = a;
	h->nallocs++;
	t->nallocs++;
	t->st.allocs++;
	log_info("tunnel-alloc realm=%s auth_port=%u world_port=%u expect=%s", h->realm, a->port[0],
		 a->port[1], a->has_expect ? "yes" : "any");
	alloc_reply(h, m, a, 0);
}

static void on_listen(struct ev_io *io, uint32_t events, void *arg)
{
	struct tun_alloc *a = arg;
	struct tun_host *h = a->h;
	struct relay_tunnel *t = h->t;
	int slot = io == a->lio[0] ? 0 : 1;
	struct addr peer = {.len = sizeof(peer.ss)};
	struct addr_ip pip;
	struct tun_stream *s, **hslot;
	char ps[ADDR_STRLEN];
	int fd, on = 1;
	struct tunmsg m;

	(void)events;
	fd = accept4(ev_io_fd(io), (struct sockaddr *)&peer.ss, &peer.len,
		     SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return;
	/* One connection per port: the listener goes at once. */
	ev_io_del(a->lio[slot], true);
	a->lio[slot] = NULL;
	addr_to_ip(&peer, &pip);
	if (a->has_expect && memcmp(&pip, &a->expect, sizeof(pip)) != 0) {
		t->st.stream_refused[SREF_IP]++;
		log_warnx("tunnel-refuse realm=%s port=%u peer=%s reason=unexpected-ip", h->realm,
			  a->port[slot], addr_ip_str(&peer, ps, sizeof(ps)));
		close(fd);
		alloc_port_done(t, a, slot);
		return;
	}
	if (t->r->bans != NULL && relay_bans_check(t->r->bans, &pip)) {
		t->st.stream_refused[SREF_BANNED]++;
		close(fd);
		alloc_port_done(t, a, slot);
		return;
	}
	if (h->nstreams >= t->r->cfg.tunnel_max_streams) {
		t->st.stream_refused[SREF_LIMIT]++;
		close(fd);
		alloc_port_done(t, a, slot);
		return;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		close(fd);
		alloc_port_done(t, a, slot);
		return;
	}
	do {
		s->id = ++t->next_stream;
	} while (s->id == 0 || htab_get(t->streams, &s->id) != NULL);
	hslot = htab_insert(t->streams, &s->id, false, NULL);
	if (hslot == NULL) {
		free(s);
		close(fd);
		alloc_port_done(t, a, slot);
		return;
	}
	*hslot = s;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	tunpipe_init(&s->p, fd, s->id, TUN_STREAM_BUF_MAX);
	s->p.bin = h->bin;
	s->h = h;
	s->a = a;
	s->slot = slot;
	s->opened_ms = s->last_ms = ev_now(t->loop);
	if (slot == TUNMSG_AUTH) {
		char addr[RELAY_HOST_MAX + 8];

		snprintf(addr, sizeof(addr), "%s:%u", t->r->cfg.tunnel_relay_host,
			 a->port[TUNMSG_WORLD]);
		s->rl = realmlist_new(addr);
	}
	s->p.io = ev_io_add(t->loop, fd, 0, on_stream_io, s);
	if (s->p.io == NULL || (slot == TUNMSG_AUTH && s->rl == NULL)) {
		htab_remove(t->streams, hslot);
		realmlist_free(s->rl);
		tunpipe_release(&s->p, false);
		free(s);
		alloc_port_done(t, a, slot);
		return;
	}
	a->st[slot] = s;
	s->next = h->streams;
	if (h->streams != NULL)
		h->streams->prev = s;
	h->streams = s;
	h->nstreams++;
	t->nstreams++;
	t->st.streams++;
	memset(&m, 0, sizeof(m));
	m.cmd = TUNMSG_CONNECT;
	m.stream_id = s->id;
	m.target = slot == 0 ? TUNMSG_AUTH : TUNMSG_WORLD;
	memcpy(m.token, a->token, sizeof(m.token));
	host_send(h, &m);
	log_info("tunnel-stream realm=%s stream=%u target=%s port=%u peer=%s", h->realm, s->id,
		 slot == 0 ? "auth" : "world", a->port[slot], addr_ip_str(&peer, ps, sizeof(ps)));
}

/* ---- hosts ---- */

static void host_unlink(struct tun_host *h)
{
	struct relay_tunnel *t = h->t;

	if (h->prev != NULL)
		h->prev->next = h->next;
	else
		t->hosts = h->next;
	if (h->next != NULL)
		h->next->prev = h->prev;
	t->nhosts_all--;
}

/* Everything of h goes now: streams, ports, the tunnel. */
static void host_drop(struct tun_host *h, const char *why)
{
	struct relay_tunnel *t = h->t;

	if (h->state == H_GONE)
		return;
	if (h->state == H_OPEN)
		log_info("tunnel-host-down realm=%s allocations=%u streams=%u up_s=%lld reason=%s",
			 h->realm, h->nallocs, h->nstreams, (ev_now(t->loop) - h->up_ms) / 1000,
			 why);
	h->state = H_GONE;
	ev_timer_stop(t->loop, &h->hs_timer);
	relay_keys_cancel(h->lookup);
	h->lookup = NULL;
	/* Streams first (each gives its port back, and its allocation when
	 * that was the last port), then what is left of the allocations. */
	while (h->streams != NULL)
		stream_free(h->streams, END_HOST_RESET, true);
	while (h->allocs != NULL)
		alloc_free(t, h->allocs);
	if (h->udp_id != 0) {
		struct tun_host **u = htab_get(t->udp_ids, &h->udp_id);

		if (u != NULL && *u == h)
			htab_remove(t->udp_ids, u);
	}
	sodium_memzero(h->kx_sk, sizeof(h->kx_sk));
	sodium_memzero(h->rx, sizeof(h->rx));
	sodium_memzero(h->tx, sizeof(h->tx));
	if (h->registered) {
		struct tun_host **slot = htab_get(t->realms, h->realm_key);

		if (slot != NULL && *slot == h)
			htab_remove(t->realms, slot);
		h->registered = false;
		t->nhosts_open--;
	}
	host_unlink(h);
	ws_free(h->data);
	h->data = NULL;
	strbuf_release(&h->dasm);
	sodium_memzero(h->data_token, sizeof(h->data_token));
	ws_free(h->ws);
	h->ws = NULL;
	free(h);
}

/* A canonical UUID (relay_keys_canon_uuid) as its 16 bytes. */
static int uuid_bytes(const char *s, uint8_t out[static 16])
{
	size_t bin = 0;

	if (sodium_hex2bin(out, 16, s, strlen(s), "-", &bin, NULL) != 0 || bin != 16)
		return -EINVAL;
	return 0;
}

static void refuse(struct tun_host *h, int why, const char *message)
{
	char buf[96];

	h->t->st.hosts_refused[why]++;
	log_warnx("tunnel-refuse realm=%s reason=%s", h->realm[0] != '\0' ? h->realm : "-",
		  ref_names[why]);
	if (message != NULL) {
		snprintf(buf, sizeof(buf), "{\"ok\":false,\"message\":\"%s\"}", message);
		host_send_text(h, buf);
	}
	/* Messages are ignored from now on; the close ends it. */
	h->state = H_CLOSING;
	ws_close(h->ws, 1008);
}

static void host_welcome(struct tun_host *h)
{
	struct relay_tunnel *t = h->t;
	struct tun_host **slot;
	struct tunmsg x = {
		.cmd = TUNMSG_X_RALLY, .x_version = 1, .x_features = TUNMSG_X_BIN | TUNMSG_X_PEER};
	char ps[ADDR_STRLEN];
	struct tun_host **u;

	slot = htab_get(t->realms, h->realm_key);
	if (slot != NULL) {
		/* The same realm dialled again (its old link may be half dead):
		 * the new tunnel wins, the old one and all it held go. */
		struct tun_host *old = *slot;

		t->st.hosts_replaced++;
		host_drop(old, "replaced");
	}
	if (t->nhosts_open >= t->r->cfg.tunnel_max_hosts) {
		t->st.hosts_full++;
		host_send_text(h, "{\"ok\":false,\"message\":\"relay full\"}");
		h->state = H_CLOSING;
		ws_close(h->ws, 1013);
		return;
	}
	slot = htab_insert(t->realms, h->realm_key, false, NULL);
	if (slot == NULL) {
		t->st.hosts_full++;
		h->state = H_CLOSING;
		ws_close(h->ws, 1013);
		return;
	}
	*slot = h;
	h->registered = true;
	t->nhosts_open++;
	h->state = H_OPEN;
	h->up_ms = h->last_rx_ms = h->last_ping_ms = ev_now(t->loop);
	t->st.hosts_accepted++;
	host_send_text(h, "{\"ok\":true,\"message\":\"welcome\"}");
	/* The datagram path: a fresh X25519 pair and an id for this tunnel. */
	if (t->udp_fd >= 0) {
		do {
			randombytes_buf(&h->udp_id, sizeof(h->udp_id));
		} while (h->udp_id == 0 || htab_get(t->udp_ids, &h->udp_id) != NULL);
		u = htab_insert(t->udp_ids, &h->udp_id, false, NULL);
		if (u != NULL) {
			*u = h;
			crypto_kx_keypair(h->kx_pk, h->kx_sk);
			x.x_features |= TUNMSG_X_UDP;
			x.x_udp_port = addr_port(&t->bound);
			x.x_udp_id = h->udp_id;
			sodium_bin2base64(x.x_udp_key, sizeof(x.x_udp_key), h->kx_pk,
					  sizeof(h->kx_pk), sodium_base64_VARIANT_ORIGINAL);
			memcpy(h->kx_pk_b64, x.x_udp_key, sizeof(h->kx_pk_b64));
		} else {
			h->udp_id = 0;
		}
	}
	{
		uint8_t tok[16];

		randombytes_buf(tok, sizeof(tok));
		sodium_bin2hex(h->data_token, sizeof(h->data_token), tok, sizeof(tok));
		memcpy(x.x_data_token, h->data_token, sizeof(x.x_data_token));
		x.x_features |= TUNMSG_X_DATA;
	}
	host_send(h, &x);
	log_info("tunnel-host-up realm=%s peer=%s", h->realm,
		 addr_ip_str(&h->peer, ps, sizeof(ps)));
}

static void on_key(void *arg, enum relay_keys_result res, const uint8_t pk[32])
{
	struct tun_host *h = arg;
	char msg[TUNMSG_ID_MAX * 2 + 64];
	uint8_t sig[64];
	int n;

	h->lookup = NULL;
	if (h->state != H_LOOKUP)
		return;
	if (res != RELAY_KEYS_FOUND) {
		refuse(h, REF_UNAUTHORIZED, "unauthorized");
		return;
	}
	n = tunmsg_signed_message(h->hello.realm_id, h->nonce, msg, sizeof(msg));
	if (n < 0 || tunmsg_parse_sig(h->hello.signature, sig) < 0 ||
	    crypto_sign_verify_detached(sig, (const uint8_t *)msg, (unsigned long long)n, pk) !=
		    0) {
		refuse(h, REF_SIGNATURE, "invalid signature");
		return;
	}
	memcpy(h->realm_pk, pk, sizeof(h->realm_pk));
	host_welcome(h);
}

static void on_hello(struct tun_host *h, bool binary, const uint8_t *msg, size_t len)
{
	char canon[37];

	ev_timer_stop(h->t->loop, &h->hs_timer);
	if (binary || len > TUNMSG_CTRL_MAX ||
	    tunmsg_decode_hello((const char *)msg, len, &h->hello) < 0) {
		/* coa: bad JSON, just close */
		refuse(h, REF_HELLO, NULL);
		return;
	}
	h->state = H_LOOKUP;
	if (relay_keys_canon_uuid(h->hello.realm_id, canon) < 0 ||
	    uuid_bytes(canon, h->realm_key) < 0) {
		refuse(h, REF_UNAUTHORIZED, "unauthorized");
		return;
	}
	snprintf(h->realm, sizeof(h->realm), "%s", canon);
	h->lookup = relay_keys_lookup(h->t->keys, canon, on_key, h);
}

/* The host of srv's realm (--server tunnel:REALM), when its tunnel is
 * open. */
static struct tun_host *server_host(const struct relay_tunnel *t, const struct relay_server *srv)
{
	struct tun_host *const *slot;

	if (srv == NULL || !srv->cfg.server_tunnel)
		return NULL;
	slot = htab_get(t->realms, srv->realm);
	return slot != NULL && (*slot)->state == H_OPEN ? *slot : NULL;
}

/*
 * A datagram from the game server behind h, for session sid (0: our
 * probe): it goes to the server fronted for h's realm. False if none is
 * (the agent of a realm no server names, or of a server just removed).
 */
static bool dgram_in(struct relay_tunnel *t, const struct tun_host *h, uint32_t sid,
		     const uint8_t *p, size_t n)
{
	struct relay_server *srv = relay_server_by_realm(t->r, h->realm_key);

	if (srv == NULL)
		return false;
	if (sid == 0) {
		relay_heartbeat_probe_answer(srv->hb, p, n);
		relay_qcache_answer(relay_proxy_qcache(srv->proxy), p, n);
	} else
		relay_proxy_deliver(srv->proxy, sid, p, n);
	return true;
}

static bool udp_fresh(const struct tun_host *h, long long now)
{
	return h->udp && h->udp_rx_ms != 0 && now - h->udp_rx_ms < TUN_UDP_FRESH_MS;
}

static void udp_flush(struct relay_tunnel *t)
{
	t->st.udp_out += tundgram_send_batch(t->udp_fd, t->omsgs, t->nout);
	t->nout = 0;
}

static void udp_before_sleep(void *arg)
{
	struct relay_tunnel *t = arg;

	if (t->nout > 0)
		udp_flush(t);
}

static void udp_send(struct relay_tunnel *t, struct tun_host *h, enum tundgram_type type,
		     uint32_t sid, const uint8_t *p, size_t n)
{
	struct tundgram_hdr hd = {
		.type = type, .udp_id = h->udp_id, .sid = sid, .ctr = ++h->tx_ctr};
	unsigned k;
	int len;

	if (n + TUNDGRAM_OVER > TUN_SLOT) {
		/* Bigger than a slot (rare: game datagrams are ~1.4 KB): alone. */
		len = tundgram_seal(t->dgram, sizeof(t->dgram), &hd, h->tx, p, n);
		if (len > 0 &&
		    sendto(t->udp_fd, t->dgram, (size_t)len, MSG_DONTWAIT,
			   (const struct sockaddr *)&h->udp_peer.ss, h->udp_peer.len) >= 0)
			t->st.udp_out++;
		return;
	}
	k = t->nout;
	len = tundgram_seal(t->obufs + (size_t)k * TUN_SLOT, TUN_SLOT, &hd, h->tx, p, n);
	if (len < 0)
		return;
	t->oaddr[k] = h->udp_peer;
	t->oiov[k].iov_base = t->obufs + (size_t)k * TUN_SLOT;
	t->oiov[k].iov_len = (size_t)len;
	t->omsgs[k].msg_hdr.msg_iov = &t->oiov[k];
	t->omsgs[k].msg_hdr.msg_iovlen = 1;
	t->omsgs[k].msg_hdr.msg_name = &t->oaddr[k].ss;
	t->omsgs[k].msg_hdr.msg_namelen = t->oaddr[k].len;
	if (++t->nout == TUN_BATCH)
		udp_flush(t);
}

int relay_tunnel_dgram(struct relay_tunnel *t, const struct relay_server *srv, uint32_t sid,
		       const uint8_t *buf, size_t len)
{
	return relay_tunnel_dgram_from(t, srv, sid, NULL, buf, len);
}

int relay_tunnel_dgram_from(struct relay_tunnel *t, const struct relay_server *srv, uint32_t sid,
			    const struct addr *client, const uint8_t *buf, size_t len)
{
	struct tun_host *h = t != NULL ? server_host(t, srv) : NULL;
	uint8_t hdr[TUNMSG_BIN_HDR], peer[TUNDGRAM_PEER_MAX];
	int plen = 0;

	if (h == NULL) {
		if (t != NULL)
			t->st.dgram_no_tunnel++;
		return -ENOTCONN;
	}
	/* An agent that takes them gets the player's address in front of
	 * every datagram (7 bytes for IPv4): stateless, so a lost first
	 * datagram or a restarted agent changes nothing. */
	if (h->x_peer && client != NULL) {
		plen = tundgram_peer_encode(peer, client);
		if (plen < 0)
			plen = 0;
	}
	if (len + (size_t)plen > TUNDGRAM_PAYLOAD)
		return -EMSGSIZE;
	if (udp_fresh(h, ev_now(t->loop))) {
		if (plen == 0) {
			udp_send(t, h, TUNDGRAM_DATA, sid, buf, len);
		} else {
			memcpy(t->plain, peer, (size_t)plen);
			memcpy(t->plain + plen, buf, len);
			udp_send(t, h, TUNDGRAM_DATA_PEER, sid, t->plain, len + (size_t)plen);
		}
		return 0;
	}
	/* No UDP from the agent lately: the tunnel carries it (TCP: it may
	 * lag behind a loss, but it arrives). */
	if (!host_room(h))
		return -EMSGSIZE;
	tunmsg_bin_header(hdr, plen > 0 ? TUNMSG_BIN_DGRAM_PEER : TUNMSG_BIN_DGRAM, sid);
	memcpy(t->plain, hdr, sizeof(hdr));
	memcpy(t->plain + sizeof(hdr), peer, (size_t)plen);
	memcpy(t->plain + sizeof(hdr) + plen, buf, len);
	ws_send(h->ws, true, t->plain, len + sizeof(hdr) + (size_t)plen);
	t->st.dgram_ws_out++;
	return 0;
}

bool relay_tunnel_server_up(const struct relay_tunnel *t, const struct relay_server *srv)
{
	return t != NULL && server_host(t, srv) != NULL;
}

static void udp_pong(struct relay_tunnel *t, struct tun_host *h, const uint8_t *p, int m)
{
	uint64_t c = 0;

	if (m != 8 || h->udp_ping_us == 0)
		return;
	for (int k = 0; k < 8; k++)
		c = c << 8 | p[k];
	if (c != h->udp_ping_ctr)
		return;
	h->udp_pongs++;
	h->udp_rtt_us = (long long)ev_monotonic_us() - h->udp_ping_us;
	h->udp_ping_us = 0;
	(void)t;
}

static void on_udp(struct ev_io *io, uint32_t events, void *arg)
{
	struct relay_tunnel *t = arg;

	int got;

	(void)events;
	for (unsigned i = 0; i < TUN_BATCH; i++) {
		t->iiov[i].iov_base = t->ibufs + (size_t)i * TUN_SLOT;
		t->iiov[i].iov_len = TUN_SLOT;
		t->imsgs[i].msg_hdr.msg_iov = &t->iiov[i];
		t->imsgs[i].msg_hdr.msg_iovlen = 1;
		t->imsgs[i].msg_hdr.msg_name = &t->iaddr[i].ss;
		t->imsgs[i].msg_hdr.msg_namelen = sizeof(t->iaddr[i].ss);
	}
	got = recvmmsg(ev_io_fd(io), t->imsgs, TUN_BATCH, MSG_DONTWAIT, NULL);
	for (int i = 0; i < got; i++) {
		struct addr from;
		size_t n = t->imsgs[i].msg_len;
		const uint8_t *d = t->ibufs + (size_t)i * TUN_SLOT;
		struct tundgram_hdr hd;
		struct tun_host **slot, *h;
		int m;

		from.ss = t->iaddr[i].ss;
		from.len = t->imsgs[i].msg_hdr.msg_namelen;
		if ((t->imsgs[i].msg_hdr.msg_flags & MSG_TRUNC) || tundgram_peek(d, n, &hd) < 0) {
			t->st.udp_bad++;
			continue;
		}
		slot = htab_get(t->udp_ids, &hd.udp_id);
		if (slot == NULL || !(*slot)->udp) {
			t->st.udp_unknown++;
			continue;
		}
		h = *slot;
		m = tundgram_open(d, n, h->rx, &h->win, t->plain, sizeof(t->plain));
		if (m < 0) {
			if (m == -EALREADY)
				t->st.udp_replay++;
			else
				t->st.udp_bad++;
			continue;
		}
		/* Authentic: its source is where the agent is now (a NAT may
		 * have moved it). */
		t->st.udp_in++;
		h->udp_peer = from;
		h->udp_rx_ms = ev_now(t->loop);
		if (hd.type == TUNDGRAM_DATA) {
			(void)dgram_in(t, h, hd.sid, t->plain, (size_t)m);
		} else if (hd.type == TUNDGRAM_PING) {
			uint8_t c[8];

			for (int k = 0; k < 8; k++)
				c[k] = (uint8_t)(hd.ctr >> (56 - 8 * k));
			udp_send(t, h, TUNDGRAM_PONG, 0, c, sizeof(c));
		} else if (hd.type == TUNDGRAM_PONG) {
			udp_pong(t, h, t->plain, m);
		} else {
			t->st.udp_bad++; /* DATA_PEER goes only to the agent */
		}
	}
}

static void host_bin(struct tun_host *h, const uint8_t *msg, size_t len)
{
	struct relay_tunnel *t = h->t;
	enum tunmsg_bin type;
	uint32_t id;
	const uint8_t *p;
	size_t n;
	struct tun_stream *s;

	if (!h->bin) {
		t->st.binary_ignored++; /* coa: only text frames carry messages */
		return;
	}
	if (tunmsg_bin_decode(msg, len, &type, &id, &p, &n) < 0) {
		t->st.msgs_bad++;
		return;
	}
	if (type == TUNMSG_BIN_DGRAM) {
		/* A game datagram that could not take UDP. */
		if (!dgram_in(t, h, id, p, n)) {
			t->st.msgs_bad++;
			return;
		}
		t->st.dgram_ws_in++;
		return;
	}
	if (type == TUNMSG_BIN_DGRAM_PEER) {
		t->st.msgs_bad++; /* only toward the agent */
		return;
	}
	s = host_stream(h, id);
	if (s == NULL)
		return;
	if (type == TUNMSG_BIN_CLOSE) {
		stream_host_close(s);
		return;
	}
	if (type == TUNMSG_BIN_RESET) {
		stream_free(s, END_HOST_RESET, true);
		return;
	}
	if (type == TUNMSG_BIN_CREDIT) {
		if (tunpipe_credit(&s->p, p) < 0) {
			t->st.msgs_bad++;
			return;
		}
		stream_update(s);
		return;
	}
	stream_deliver(s, p, n);
}

/* Our agent's half of the key exchange, signed with the realm's key over
 * both halves (tunmsg_udp_key_message): keyed, or refused and counted
 * (its datagrams then take the tunnel). */
static void udp_key_answer(struct tun_host *h, const struct tunmsg *m)
{
	struct relay_tunnel *t = h->t;
	uint8_t pk[crypto_kx_PUBLICKEYBYTES], sig[crypto_sign_BYTES];
	char text[TUNMSG_ID_MAX * 4 + 64];
	size_t n = 0;
	int tn;

	tn = tunmsg_udp_key_message(h->hello.realm_id, h->nonce, h->kx_pk_b64, m->x_udp_key, text,
				    sizeof(text));
	if (tn < 0 || strlen(m->x_udp_sig) != TUNMSG_SIG_HEX ||
	    sodium_hex2bin(sig, sizeof(sig), m->x_udp_sig, TUNMSG_SIG_HEX, NULL, &n, NULL) != 0 ||
	    n != sizeof(sig) ||
	    crypto_sign_verify_detached(sig, (const uint8_t *)text, (unsigned long long)tn,
					h->realm_pk) != 0) {
		t->st.msgs_bad++;
		t->st.udp_key_refused++;
		log_warnx("tunnel-udp-key-refused realm=%s reason=\"%s\"", h->realm,
			  m->x_udp_sig[0] == '\0' ? "unsigned" : "bad signature");
		return;
	}
	if (sodium_base642bin(pk, sizeof(pk), m->x_udp_key, strlen(m->x_udp_key), NULL, &n, NULL,
			      sodium_base64_VARIANT_ORIGINAL) != 0 ||
	    n != sizeof(pk) ||
	    crypto_kx_server_session_keys(h->rx, h->tx, h->kx_pk, h->kx_sk, pk) != 0) {
		t->st.msgs_bad++;
		return;
	}
	h->udp = true;
	log_info("tunnel-udp-keyed realm=%s", h->realm);
}

static void host_msg(struct tun_host *h, const uint8_t *msg, size_t len)
{
	struct relay_tunnel *t = h->t;
	struct tunmsg m;
	struct tun_stream *s;
	int r = tunmsg_decode((const char *)msg, len, &m, t->chunk, sizeof(t->chunk));

	if (r < 0) {
		t->st.msgs_bad++;
		return;
	}
	if (m.cmd != TUNMSG_DATA && len > TUNMSG_CTRL_MAX) {
		t->st.msgs_bad++;
		return;
	}
	switch (m.cmd) {
	case TUNMSG_PING: {
		struct tunmsg pong = {.cmd = TUNMSG_PONG};

		host_send(h, &pong);
		return;
	}
	case TUNMSG_PONG:
		if (h->ping_sent_ms > 0) {
			h->rtt_ms = ev_now(t->loop) - h->ping_sent_ms;
			h->ping_sent_ms = 0;
		}
		return;
	case TUNMSG_ALLOCATE:
		do_allocate(h, &m);
		return;
	case TUNMSG_CONNECT_OK:
		s = host_stream(h, m.stream_id);
		if (s != NULL && !s->ok) {
			s->ok = true;
			stream_update(s);
		}
		return;
	case TUNMSG_CONNECT_ERR:
		s = host_stream(h, m.stream_id);
		if (s != NULL)
			stream_free(s, END_CONNECT, true);
		return;
	case TUNMSG_DATA:
		s = host_stream(h, m.stream_id);
		if (s != NULL && m.chunk_len > 0)
			stream_deliver(s, m.chunk, m.chunk_len);
		return;
	case TUNMSG_CLOSE:
		s = host_stream(h, m.stream_id);
		if (s != NULL)
			stream_host_close(s);
		return;
	case TUNMSG_RESET:
		s = host_stream(h, m.stream_id);
		if (s != NULL)
			stream_free(s, END_HOST_RESET, true);
		return;
	case TUNMSG_X_RALLY:
		/* Our agent's answer: binary data frames from now on. */
		if (m.x_version >= 1 && (m.x_features & TUNMSG_X_BIN) &&
		    (m.x_features & TUNMSG_X_DATA))
			h->data_ok = true; /* its data channel is on the way */
		if (m.x_version >= 1 && (m.x_features & TUNMSG_X_BIN)) {
			h->bin = true;
			for (s = h->streams; s != NULL; s = s->next)
				s->p.bin = true;
		}
		if (m.x_version >= 1 && (m.x_features & TUNMSG_X_PEER))
			h->x_peer = true;
		if (m.x_version >= 1 && (m.x_features & TUNMSG_X_UDP) && h->udp_id != 0 && !h->udp)
			udp_key_answer(h, &m);
		return;
	default:
		t->st.msgs_unknown++;
		return;
	}
}

static void on_ws_msg(struct ws *w, bool binary, const uint8_t *msg, size_t len, void *arg)
{
	struct tun_host *h = arg;

	(void)w;
	h->last_rx_ms = ev_now(h->t->loop);
	switch (h->state) {
	case H_CHALLENGE:
		on_hello(h, binary, msg, len);
		return;
	case H_LOOKUP:
		h->t->st.msgs_early++;
		return;
	case H_OPEN:
		if (binary)
			host_bin(h, msg, len);
		else
			host_msg(h, msg, len);
		return;
	case H_CLOSING:
	case H_GONE:
		return;
	}
}

static void on_ws_drain(struct ws *w, void *arg)
{
	struct tun_host *h = arg;

	(void)w;
	if (!h->paused)
		return;
	h->paused = false;
	for (struct tun_stream *s = h->streams; s != NULL; s = s->next)
		stream_update(s);
}

static void on_ws_close(struct ws *w, int err, void *arg)
{
	struct tun_host *h = arg;

	(void)w;
	if (err == -EMSGSIZE)
		h->t->st.ws_closed_oversize++;
	else if (err == -EPROTO)
		h->t->st.ws_closed_proto++;
	if (h->state == H_OPEN)
		h->t->st.hosts_dropped++;
	host_drop(h, err == -EMSGSIZE ? "oversize" : err == 0 ? "closed" : "lost");
}

static const struct ws_ops host_ops = {
	.on_msg = on_ws_msg,
	.on_drain = on_ws_drain,
	.on_close = on_ws_close,
};

static void release_upgrade(void *arg)
{
	httpd_upgrade_close(arg);
}

/* ---- the data channel ---- */

static void on_data_frame(void *arg, const uint8_t *frame, size_t len)
{
	host_bin(arg, frame, len);
}

static void on_data_msg(struct ws *w, bool binary, const uint8_t *msg, size_t len, void *arg)
{
	struct tun_host *h = arg;

	(void)w;
	(void)binary;
	h->last_rx_ms = ev_now(h->t->loop);
	if (tunsink_deframe(&h->dasm, msg, len, on_data_frame, h) < 0) {
		h->t->st.msgs_bad++;
		host_drop(h, "data-channel-garbage");
	}
}

static void on_data_close(struct ws *w, int err, void *arg)
{
	struct tun_host *h = arg;

	(void)w;
	(void)err;
	/* Frames may have been lost with it: the whole tunnel starts over. */
	h->t->st.hosts_dropped++;
	host_drop(h, "data-channel-lost");
}

static const struct ws_ops data_ops = {
	.on_msg = on_data_msg,
	.on_drain = on_ws_drain,
	.on_close = on_data_close,
};

static struct tun_host *host_by_data_token(struct relay_tunnel *t, const char *token)
{
	if (token == NULL || strlen(token) != 32)
		return NULL;
	for (struct tun_host *h = t->hosts; h != NULL; h = h->next)
		if (h->state == H_OPEN && h->data_token[0] != '\0' && h->data == NULL &&
		    sodium_memcmp(h->data_token, token, 32) == 0)
			return h;
	return NULL;
}

struct data_upgrade {
	struct relay_tunnel *t;
	char token[33];
};

static void on_data_upgraded(void *arg, int fd, const uint8_t *extra, size_t n,
			     struct httpd_upgrade *u)
{
	struct data_upgrade *d = arg;
	struct tun_host *h = host_by_data_token(d->t, d->token);
	struct ws_cfg wc = {.low_water = TUN_HOST_LOW,
			    .raw_protocol = "rally-data-1",
			    .raw_queue_max = TUN_HOST_QUEUE_MAX};

	sodium_memzero(d->token, sizeof(d->token));
	free(d);
	if (h == NULL) {
		httpd_upgrade_close(u);
		return;
	}
	strbuf_init(&h->dasm, TUNMSG_WS_MAX + 8);
	h->data = ws_new_server(h->t->loop, fd, extra, n, &wc, &data_ops, h, release_upgrade, u);
	if (h->data == NULL) {
		httpd_upgrade_close(u);
		return;
	}
	log_info("tunnel-data-up realm=%s", h->realm);
}

static void on_hs_timeout(struct ev_timer *tm, void *arg)
{
	struct tun_host *h = arg;

	(void)tm;
	if (h->state != H_CHALLENGE)
		return;
	h->t->st.hosts_refused[REF_TIMEOUT]++;
	log_warnx("tunnel-refuse realm=- reason=timeout");
	host_drop(h, "timeout");
}

static void on_upgraded(void *arg, int fd, const uint8_t *extra, size_t n, struct httpd_upgrade *u)
{
	struct relay_tunnel *t = arg;
	struct tun_host *h = calloc(1, sizeof(*h));
	struct ws_cfg wc = {.max_msg = TUNMSG_WS_MAX, .low_water = TUN_HOST_LOW};
	uint8_t raw[32];
	char buf[TUNMSG_ID_MAX + 32];
	socklen_t sl;

	if (h == NULL) {
		httpd_upgrade_close(u);
		return;
	}
	h->t = t;
	ev_timer_init(&h->hs_timer);
	sl = sizeof(h->peer.ss);
	if (getpeername(fd, (struct sockaddr *)&h->peer.ss, &sl) == 0)
		h->peer.len = sl;
	h->ws = ws_new_server(t->loop, fd, extra, n, &wc, &host_ops, h, release_upgrade, u);
	if (h->ws == NULL) {
		free(h);
		httpd_upgrade_close(u);
		return;
	}
	h->next = t->hosts;
	if (t->hosts != NULL)
		t->hosts->prev = h;
	t->hosts = h;
	t->nhosts_all++;
	/* The seed: a base64url nonce of 32 random bytes. */
	randombytes_buf(raw, sizeof(raw));
	sodium_bin2base64(h->nonce, sizeof(h->nonce), raw, sizeof(raw),
			  sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	snprintf(buf, sizeof(buf), "{\"nonce\":\"%s\"}", h->nonce);
	host_send_text(h, buf);
	ev_timer_start(t->loop, &h->hs_timer, t->r->cfg.tunnel_handshake_timeout_ms, on_hs_timeout,
		       h);
}

/* ---- HTTP: the upgrade and the health answer ---- */

static void health(struct relay_tunnel *t, struct httpd_req *req)
{
	char body[256];
	int n = snprintf(body, sizeof(body),
			 "{\"status\":\"ok\",\"service\":\"coa-relay\",\"version\":%d,"
			 "\"connected_hosts\":%u,\"active_allocations\":%u,"
			 "\"implementation\":\"rally-relay " RALLY_VERSION "\"}",
			 TUNMSG_PROTO_V, t->nhosts_open, t->nallocs);

	httpd_reply(req, 200, "application/json", body, (size_t)n);
}

static bool header_has(const char *v, const char *token)
{
	size_t n = strlen(token);

	for (const char *p = v; p != NULL && *p != '\0'; p++)
		if (strncasecmp(p, token, n) == 0)
			return true;
	return false;
}

static void on_http(struct httpd_req *req, void *arg)
{
	struct relay_tunnel *t = arg;
	const char *path = httpd_path(req), *up, *key, *ver;
	char accept[WS_ACCEPT_LEN + 1];

	if (strcmp(httpd_method(req), "GET") != 0) {
		httpd_reply_error(req, 405, "method not allowed");
		return;
	}
	if (strcmp(path, "/relay/v1/health") == 0) {
		health(t, req);
		return;
	}
	if (strcmp(path, "/relay/v1/data") == 0) {
		const char *tok = httpd_header(req, "X-Rally-Data");
		struct data_upgrade *d;

		up = httpd_header(req, "Upgrade");
		if (up == NULL || strcasecmp(up, "rally-data-1") != 0 ||
		    host_by_data_token(t, tok) == NULL) {
			httpd_reply_error(req, 403, "no such data channel");
			return;
		}
		d = calloc(1, sizeof(*d));
		if (d == NULL) {
			httpd_reply_error(req, 503, "out of memory");
			return;
		}
		d->t = t;
		snprintf(d->token, sizeof(d->token), "%s", tok);
		if (httpd_reply_upgrade(req, "rally-data-1", on_data_upgraded, d) < 0) {
			free(d);
			httpd_reply_error(req, 500, "upgrade failed");
		}
		return;
	}
	if (strcmp(path, "/relay/v1/host") != 0) {
		httpd_reply_error(req, 404, "not found");
		return;
	}
	up = httpd_header(req, "Upgrade");
	key = httpd_header(req, "Sec-WebSocket-Key");
	ver = httpd_header(req, "Sec-WebSocket-Version");
	if (up == NULL || !header_has(up, "websocket") || key == NULL ||
	    ws_accept_key(key, accept) < 0) {
		httpd_reply_error(req, 400, "expected a WebSocket upgrade");
		return;
	}
	if (ver == NULL || strcmp(ver, "13") != 0) {
		httpd_add_header(req, "Sec-WebSocket-Version", "13");
		httpd_reply_error(req, 426, "WebSocket version 13 only");
		return;
	}
	if (t->nhosts_all >= t->r->cfg.tunnel_max_hosts + TUN_PENDING_HOSTS) {
		t->st.hosts_full++;
		httpd_reply_error(req, 503, "relay full");
		return;
	}
	httpd_add_header(req, "Sec-WebSocket-Accept", accept);
	if (httpd_reply_upgrade(req, "websocket", on_upgraded, t) < 0)
		httpd_reply_error(req, 500, "upgrade failed");
}

/* ---- the reaper: expiry, idle, keepalive ---- */

/* coa's 5 s, or shorter when a tuning flag asks for pings or idle
 * checks faster than that. */
static long long reap_period(const struct relay_cfg *c)
{
	long long p = TUN_REAP_MS;

	if (c->tunnel_ping_ms < p)
		p = c->tunnel_ping_ms;
	if (c->tunnel_idle_timeout_ms / 2 < p)
		p = c->tunnel_idle_timeout_ms / 2;
	return p < 100 ? 100 : p;
}

static void on_reap(struct ev_timer *tm, void *arg)
{
	struct relay_tunnel *t = arg;
	const struct relay_cfg *c = &t->r->cfg;
	long long now = ev_now(t->loop);
	struct tun_host *h, *hn;

	(void)tm;
	for (h = t->hosts; h != NULL; h = hn) {
		struct tun_alloc *a, *an;
		struct tun_stream *s, *sn;

		hn = h->next;
		if (h->stuck) {
			t->st.hosts_dropped++;
			host_drop(h, "not-reading");
			continue;
		}
		if (h->state != H_OPEN)
			continue;
		if (now - h->last_rx_ms >= c->tunnel_idle_timeout_ms) {
			t->st.hosts_dropped++;
			host_drop(h, "idle");
			continue;
		}
		for (s = h->streams; s != NULL; s = sn) {
			sn = s->next;
			if (!s->ok && now - s->opened_ms >= c->tunnel_connect_timeout_ms) {
				send_stream_cmd(h, TUNMSG_RESET, s->id);
				stream_free(s, END_CONNECT, true);
			} else if (now - s->last_ms >= c->tunnel_idle_timeout_ms) {
				send_stream_cmd(h, TUNMSG_RESET, s->id);
				stream_free(s, END_IDLE, true);
			}
		}
		/* Listeners unused past the lifetime close; the allocation
		 * goes with them unless a stream still holds the other port. */
		for (a = h->allocs; a != NULL; a = an) {
			an = a->next;
			if (now < a->expires_ms || (a->lio[0] == NULL && a->lio[1] == NULL))
				continue;
			t->st.allocs_expired++;
			for (int i = 0; i < 2; i++) {
				if (a->lio[i] == NULL)
					continue;
				ev_io_del(a->lio[i], true);
				a->lio[i] = NULL;
				pool_give(t, a->port[i]);
				a->done[i] = true;
			}
			if (a->done[0] && a->done[1] && a->st[0] == NULL && a->st[1] == NULL)
				alloc_free(t, a);
		}
		if (udp_fresh(h, now) && now - h->udp_last_ping_ms >= TUN_UDP_PING_MS) {
			h->udp_last_ping_ms = now;
			h->udp_pings++;
			h->udp_ping_ctr = h->tx_ctr + 1;
			h->udp_ping_us = (long long)ev_monotonic_us();
			udp_send(t, h, TUNDGRAM_PING, 0, NULL, 0);
		}
		if (now - h->last_ping_ms >= c->tunnel_ping_ms) {
			struct tunmsg ping = {.cmd = TUNMSG_PING};

			host_send(h, &ping);
			h->last_ping_ms = now;
			if (h->ping_sent_ms == 0)
				h->ping_sent_ms = now;
		}
	}
	ev_timer_start(t->loop, &t->reaper, reap_period(c), on_reap, t);
}

/* ---- module ---- */

int relay_tunnel_new(struct relay *r)
{
	struct relay_tunnel *t = calloc(1, sizeof(*t));
	const struct relay_cfg *c = &r->cfg;
	struct httpd_cfg hc = {
		.max_body = 0,
		.conn_limit = c->tunnel_max_hosts + TUN_PENDING_HOSTS + 64,
		.per_ip_limit = 0,
		.conn_timeout_s = 10,
		.allow_upgrade = true,
	};
	int fd, ret;
	char la[ADDR_STRLEN];

	if (t == NULL)
		return -ENOMEM;
	t->r = r;
	t->loop = r->loop;
	t->udp_fd = -1;
	r->tunnel = t;
	ev_timer_init(&t->reaper);
	strbuf_init(&t->msg, TUNMSG_JSON_MAX);
	ret = pool_new(t, c->tunnel_port_min, c->tunnel_port_max);
	if (ret < 0)
		return ret;
	t->realms = htab_new(c->tunnel_max_hosts + 1, 16, sizeof(struct tun_host *));
	t->streams = htab_new(t->nports + 1, sizeof(uint32_t), sizeof(struct tun_stream *));
	if (t->realms == NULL || t->streams == NULL)
		return -ENOMEM;
	t->keys = relay_keys_new(r->loop, c->tunnel_keys[0] != '\0' ? c->tunnel_keys : NULL,
				 c->tunnel_pg[0] != '\0' ? c->tunnel_pg : NULL);
	if (t->keys == NULL)
		return errno != 0 ? -errno : -EINVAL;
	if (r->check_only)
		return 0;
	t->bound = c->tunnel_listen;
	fd = httpd_listen(&t->bound);
	if (fd < 0) {
		errno = -fd;
		log_warn("tunnel-listen-fail listen=%s", addr_str(&t->bound, la, sizeof(la)));
		return fd;
	}
	t->httpd = httpd_new_take(r->loop, fd, &hc, on_http, t);
	if (t->httpd == NULL)
		return -errno;
	if (c->tunnel_udp) {
		/* The datagram path listens on the tunnel's own address, UDP. */
		struct addr ua = t->bound;

		t->udp_ids = htab_new(c->tunnel_max_hosts + 1, sizeof(uint64_t),
				      sizeof(struct tun_host *));
		if (t->udp_ids == NULL)
			return -ENOMEM;
		fd = addr_udp_bind(&ua);
		if (fd < 0) {
			errno = -fd;
			log_warn("tunnel-udp-bind-fail listen=%s", addr_str(&ua, la, sizeof(la)));
			return fd;
		}
		t->udp_fd = fd;
		addr_socket_buffers(fd, 4 << 20);
		t->obufs = malloc(TUN_BATCH * TUN_SLOT);
		t->ibufs = malloc(TUN_BATCH * TUN_SLOT);
		if (t->obufs == NULL || t->ibufs == NULL)
			return -ENOMEM;
		t->udp_io = ev_io_add(r->loop, fd, EPOLLIN, on_udp, t);
		if (t->udp_io == NULL)
			return -errno;
		if (ev_before_sleep_add(r->loop, udp_before_sleep, t) < 0)
			return -ENOSPC;
		t->hooked = true;
	}
	ev_timer_start(t->loop, &t->reaper, reap_period(c), on_reap, t);
	return 0;
}

void relay_tunnel_free(struct relay_tunnel *t)
{
	if (t == NULL)
		return;
	while (t->hosts != NULL)
		host_drop(t->hosts, "shutdown");
	ev_timer_stop(t->loop, &t->reaper);
	httpd_free(t->httpd);
	if (t->udp_io != NULL)
		ev_io_del(t->udp_io, true);
	else if (t->udp_fd >= 0)
		close(t->udp_fd);
	if (t->hooked)
		ev_before_sleep_del(t->loop, udp_before_sleep, t);
	htab_free(t->udp_ids);
	free(t->obufs);
	free(t->ibufs);
	relay_keys_free(t->keys);
	htab_free(t->realms);
	htab_free(t->streams);
	free(t->ports);
	free(t->pos);
	strbuf_release(&t->msg);
	free(t);
}

int relay_tunnel_reload(struct relay_tunnel *t)
{
	return t->keys != NULL ? relay_keys_reload(t->keys) : 0;
}

bool relay_tunnel_bound(const struct relay_tunnel *t, struct addr *a)
{
	if (t == NULL || t->httpd == NULL)
		return false;
	*a = t->bound;
	return true;
}

size_t relay_tunnel_keys_count(const struct relay_tunnel *t)
{
	return relay_keys_count(t->keys);
}

#define C(name, help, v)                                                                           \
	strbuf_printf(out,                                                                         \
		      "# HELP rally_relay_tunnel_" name " " help                                   \
		      "\n# TYPE rally_relay_tunnel_" name " counter\nrally_relay_tunnel_" name     \
		      " %llu\n",                                                                   \
		      (unsigned long long)(v))
#define G(name, help, v)                                                                           \
	strbuf_printf(out,                                                                         \
		      "# HELP rally_relay_tunnel_" name " " help                                   \
		      "\n# TYPE rally_relay_tunnel_" name " gauge\nrally_relay_tunnel_" name       \
		      " %llu\n",                                                                   \
		      (unsigned long long)(v))

static void labelled(struct strbuf *out, const char *name, const char *help, const char *label,
		     const char *const *names, const uint64_t *v, size_t n)
{
	strbuf_printf(out,
		      "# HELP rally_relay_tunnel_%s %s\n# TYPE rally_relay_tunnel_%s counter\n",
		      name, help, name);
	for (size_t i = 0; i < n; i++)
		strbuf_printf(out, "rally_relay_tunnel_%s{%s=\"%s\"} %llu\n", name, label, names[i],
			      (unsigned long long)v[i]);
}

/* The datagram path to each tunnelled server's agent (labelled by server
 * when they have names). */
static void server_path_metrics(const struct relay_tunnel *t, const struct relay_server *const *ts,
				size_t nt, struct strbuf *out)
{
	static const char *const paths[] = {"udp", "tunnel", "down"};
	static const struct {
		const char *name, *help;
	} gauges[] = {
		{"udp_rtt_us", "Last UDP ping round trip to the --server realm's agent."},
		{"udp_pings", "UDP pings sent to the --server realm's agent (this tunnel)."},
		{"udp_pongs", "Of those, answered (loss = 1 - pongs / pings)."},
	};
	char lb[RELAY_NAME_MAX + 48], more[32];

	strbuf_printf(out, "# HELP rally_relay_tunnel_server_path How game datagrams reach the "
			   "--server realm's agent (1 for the path in use).\n"
			   "# TYPE rally_relay_tunnel_server_path gauge\n");
	for (size_t k = 0; k < nt; k++) {
		const struct tun_host *h = server_host(t, ts[k]);
		const char *path = h == NULL                       ? "down"
				   : udp_fresh(h, ev_now(t->loop)) ? "udp"
								   : "tunnel";

		for (size_t p = 0; p < 3; p++) {
			snprintf(more, sizeof(more), "path=\"%s\"", paths[p]);
			strbuf_printf(out, "rally_relay_tunnel_server_path%s %d\n",
				      relay_server_labels(ts[k], more, lb, sizeof(lb)),
				      strcmp(path, paths[p]) == 0);
		}
	}
	for (size_t g = 0; g < 3; g++) {
		strbuf_printf(
			out,
			"# HELP rally_relay_tunnel_%s %s\n# TYPE rally_relay_tunnel_%s gauge\n",
			gauges[g].name, gauges[g].help, gauges[g].name);
		for (size_t k = 0; k < nt; k++) {
			const struct tun_host *h = server_host(t, ts[k]);
			unsigned long long v = 0;

			if (h != NULL && g == 0)
				v = h->udp_rtt_us > 0 ? (unsigned long long)h->udp_rtt_us : 0;
			else if (h != NULL && g == 1)
				v = h->udp_pings;
			else if (h != NULL)
				v = h->udp_pongs;
			strbuf_printf(out, "rally_relay_tunnel_%s%s %llu\n", gauges[g].name,
				      relay_server_labels(ts[k], NULL, lb, sizeof(lb)), v);
		}
	}
}

void relay_tunnel_metrics(const struct relay_tunnel *t, struct strbuf *out)
{
	const struct tun_stats *s = &t->st;
	uint64_t rw = s->rl_rewritten, mal = s->rl_malformed, des = s->rl_desync;
	unsigned long long rtt_max = 0, held = 0;

	for (const struct tun_host *h = t->hosts; h != NULL; h = h->next) {
		held += host_queued(h);
		if (h->state != H_OPEN)
			continue;
		for (const struct tun_stream *st = h->streams; st != NULL; st = st->next) {
			held += tunpipe_pending(&st->p);
			if (st->rl != NULL) {
				const struct realmlist_stats *rs = realmlist_stats(st->rl);

				rw += rs->rewritten;
				mal += rs->malformed;
				des += rs->desync;
			}
		}
		if ((unsigned long long)h->rtt_ms > rtt_max)
			rtt_max = (unsigned long long)h->rtt_ms;
	}
	G("hosts", "Host tunnels authenticated and open.", t->nhosts_open);
	G("handshakes", "Host tunnels not authenticated yet.", t->nhosts_all - t->nhosts_open);
	G("allocations", "Allocations held.", t->nallocs);
	G("streams", "Player streams open.", t->nstreams);
	G("ports_free", "Ports of the pool free.", t->nfree);
	G("ports_total", "Ports in the pool.", t->nports);
	G("rtt_max_ms", "Largest ping round trip of the open tunnels.", rtt_max);
	G("buffered_bytes", "Bytes held for players and hosts (stream buffers, tunnel queues).",
	  held);
	C("hosts_accepted_total", "Hosts welcomed.", s->hosts_accepted);
	labelled(out, "hosts_refused_total", "Hosts refused at the handshake.", "reason", ref_names,
		 s->hosts_refused, 4);
	C("hosts_replaced_total", "Tunnels dropped for a newer one of their realm.",
	  s->hosts_replaced);
	C("hosts_dropped_total", "Open tunnels that ended.", s->hosts_dropped);
	C("hosts_full_total", "Hosts refused at the host limit.", s->hosts_full);
	C("allocations_total", "Allocations made.", s->allocs);
	labelled(out, "allocations_refused_total", "Allocations refused.", "reason", aref_names,
		 s->alloc_refused, 4);
	C("allocations_expired_total", "Allocations reaped unused.", s->allocs_expired);
	C("streams_total", "Player connections accepted.", s->streams);
	labelled(out, "streams_refused_total", "Player connections refused.", "reason", sref_names,
		 s->stream_refused, 3);
	labelled(out, "stream_ends_total", "Streams ended.", "reason", end_names, s->stream_ends,
		 6);
	C("bytes_to_host_total", "Player bytes sent into tunnels.", s->bytes_to_host);
	C("bytes_to_player_total", "Host bytes written to players.", s->bytes_to_player);
	C("msgs_bad_total", "Host messages that did not decode (dropped).", s->msgs_bad);
	C("msgs_unknown_total", "Host messages with an unknown cmd (ignored).", s->msgs_unknown);
	C("udp_key_refused_total",
	  "Datagram key answers refused: not signed with the realm's key over both keys.",
	  s->udp_key_refused);
	C("msgs_unknown_stream_total", "Host messages for a stream it does not have.",
	  s->msgs_unknown_stream);
	C("msgs_early_total", "Host messages before the welcome (dropped).", s->msgs_early);
	C("binary_ignored_total", "Binary frames from coa hosts (ignored).", s->binary_ignored);
	C("ws_oversize_total", "Tunnels closed for a message over the cap.", s->ws_closed_oversize);
	C("ws_protocol_total", "Tunnels closed for bad WebSocket framing.", s->ws_closed_proto);
	C("realmlist_rewritten_total", "REALM_LIST answers rewritten to the relay.", rw);
	C("realmlist_malformed_total", "REALM_LIST answers forwarded untouched.", mal);
	C("realmlist_desync_total", "Auth streams the framer gave up on.", des);
	if (t->udp_fd >= 0) {
		const struct relay_server *ts[RELAY_MAX_SERVERS];
		size_t nt = 0;

		for (size_t i = 0; i < t->r->nservers; i++) {
			if (t->r->servers[i]->cfg.server_tunnel)
				ts[nt++] = t->r->servers[i];
		}
		if (nt > 0)
			server_path_metrics(t, ts, nt, out);
		C("udp_in_total", "Authentic datagrams from agents.", s->udp_in);
		C("udp_out_total", "Datagrams sent to agents.", s->udp_out);
		C("udp_bad_total", "Datagrams refused: forged, altered or malformed.", s->udp_bad);
		C("udp_replay_total", "Datagrams refused as replays.", s->udp_replay);
		C("udp_unknown_total", "Datagrams for no tunnel we know.", s->udp_unknown);
		C("dgram_tunnel_in_total", "Game datagrams that came in the tunnel (no UDP).",
		  s->dgram_ws_in);
		C("dgram_tunnel_out_total", "Game datagrams sent in the tunnel (no UDP).",
		  s->dgram_ws_out);
		C("dgram_no_tunnel_total", "Game datagrams dropped: the realm's tunnel was down.",
		  s->dgram_no_tunnel);
	}
	relay_keys_metrics(t->keys, out);
}
