/*
 * The proxy of one fronted server: its public UDP sockets (one, or one per
 * listen address: two at most), one connected upstream socket per client
 * address.
 *
 * client -> public socket (recvmmsg, up to 64 per wakeup) -> size check ->
 * v4-mapped source made plain IPv4 -> ban check (global, then the
 * server's) -> filter -> getinfo/getstatus: the query cache answers
 * (relay_qcache.c, the server's own; with it off, the query limiter and a
 * session) -> session lookup -> attack mode's gate -> session creation ->
 * send() on the session's upstream socket (or its queue when the kernel
 * says EAGAIN). server -> upstream socket (recvmmsg) -> a batch of answers
 * sent with sendmmsg from the public socket the client came in on, so they
 * come from the public port it knows; the cache's answers join the same
 * batch, from the socket their asker came in on.
 *
 * IPv6: a "[::]:p" socket is dual-stack (IPv4 clients arrive as
 * ::ffff:a.b.c.d and are turned into plain IPv4 at once, so bans, limits,
 * sessions, logs and /sessions only ever see 1.2.3.4), unless an IPv4
 * address is listed beside it. The upstream socket is the relay's own, of
 * the server's family: IPv6 clients reach an IPv4-only server.
 *
 * Sessions live in a bounded table ordered by last activity either way;
 * idle ones are closed from the old end after SESSION_TIMEOUT.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "banlist.h"
#include "htab.h"
#include "log.h"
#include "q3.h"
#include "ratelim.h"
#include "relay.h"
#include "relay_transparent.h"

#define BATCH    (64)
#define BUF_SIZE (RELAY_MAX_PACKET + 1) /* one more, to see oversize */
#define CMD_MAX  (64)

struct qpkt {
	uint32_t len;
	uint8_t data[];
};

struct session {
	struct addr client;
	struct relay_proxy *p;
	struct ev_io *io; /* NULL through the tunnel */
	uint16_t upstream_port;
	bool transparent; /* its socket carries the client's address */
	uint8_t pub;      /* the public socket it came in on */
	uint32_t sid;     /* through the tunnel: the session's id there */
	long long created_ms, last_ms;
	/*
	 * Unconfirmed until the client speaks again after the server's first
	 * answer: spoofed sources, one-shot queries and half-opened handshakes
	 * stay unconfirmed, players confirm within one round trip. Unconfirmed
	 * sessions sit on their own recency list, expire sooner and make room
	 * for new clients when the table is full.
	 */
	bool confirmed;
	/* The server answered connectResponse; then the client's game
	 * traffic made it a known player (relay_qcache.c). */
	bool connect_answered, known_noted;
	struct session *uprev, *unext;
	uint64_t pkts_in, bytes_in, pkts_out, bytes_out;
	/* Packets for the server that met a full socket buffer. */
	struct qpkt *q[RELAY_SESSION_QUEUE];
	unsigned qhead, qlen;
};

/* A public socket. */
struct pub {
	struct relay_proxy *p;
	int fd;
	struct ev_io *io;
	int family;
	bool dual; /* IPv6 socket taking IPv4 too */
	uint8_t idx;
};

struct relay_proxy {
	struct relay *r;
	struct relay_server *srv;
	struct pub pubs[RELAY_MAX_LISTEN];
	size_t npub;
	bool stopped; /* retiring: no traffic */
	bool hooked;
	struct htab *sessions;
	struct htab *by_sid; /* tunnel: sid -> struct session * */
	uint32_t next_sid;
	struct ratelim *queries;
	struct relay_qcache *qc;
	struct ev_timer sweep;
	size_t queued_bytes;
	struct session *unconf_old, *unconf_new; /* unconfirmed, by recency */
	/* Queries forwarded per second, all sources together. */
	long long qbudget_milli, qbudget_ms;

	/* Receive batch of the public socket. */
	struct mmsghdr in_msgs[BATCH];
	struct iovec in_iov[BATCH];
	struct addr in_addr[BATCH];
	uint8_t *in_bufs;

	/* Answers waiting to leave from the public socket. */
	struct mmsghdr out_msgs[BATCH];
	struct iovec out_iov[BATCH];
	struct addr out_addr[BATCH];
	uint8_t out_pub[BATCH]; /* the socket each answer leaves from */
	uint8_t *out_bufs;
	unsigned nout;

	struct log_ratelimit warn_send, warn_sock;
	/* --transparent: its counters (relay_transparent.c); off when NULL. */
	struct relay_transparent_stats tstats, *tp;
};

static void session_close(struct relay_proxy *p, struct session *s, const char *why);
static void session_touch(struct relay_proxy *p, struct session *s, long long now);

static void drop(struct relay_proxy *p, enum relay_drop why)
{
	p->srv->st.drops[why]++;
}

/* ---- answers: server -> public socket -> client ---- */

/* Makes answer slots [0, n) ready to receive into again. */
static void reset_out(struct relay_proxy *p, unsigned n)
{
	for (unsigned k = 0; k < n; k++) {
		p->out_iov[k].iov_len = BUF_SIZE;
		p->out_msgs[k].msg_hdr.msg_name = NULL;
		p->out_msgs[k].msg_hdr.msg_namelen = 0;
	}
}

static void flush_out(struct relay_proxy *p)
{
	unsigned sent = 0;

	while (sent < p->nout) {
		unsigned run = 1;
		int n;

		/* One sendmmsg per run of answers leaving the same socket. */
		while (sent + run < p->nout && p->out_pub[sent + run] == p->out_pub[sent])
			run++;
		n = sendmmsg(p->pubs[p->out_pub[sent]].fd, p->out_msgs + sent, run, 0);

		if (n < 0) {
			unsigned long sup;

			if (errno == EINTR)
				continue;
			/* The datagram at `sent` failed; count it, go on. */
			if (errno != EAGAIN && errno != ENOBUFS &&
			    log_ratelimit_ok(&p->warn_send, ev_now(p->r->loop), 10000, &sup))
				log_warn("send-fail dir=to-client suppressed=%lu", sup);
			drop(p, RELAY_DROP_SEND_ERROR);
			sent++;
			continue;
		}
		for (unsigned i = sent; i < sent + (unsigned)n; i++) {
			p->srv->st.pkts_to_client++;
			p->srv->st.bytes_to_client += p->out_msgs[i].msg_len;
		}
		sent += (unsigned)n;
	}
	reset_out(p, p->nout);
	p->nout = 0;
}

static void before_sleep(void *arg)
{
	struct relay_proxy *p = arg;

	if (p->nout > 0)
		flush_out(p);
}

static void log_oob(const struct session *s, const char *dir, const uint8_t *buf, size_t len)
{
	char a[ADDR_STRLEN], cmd[CMD_MAX];

	if (!q3_is_oob(buf, len))
		return;
	q3_oob_command(buf, len, cmd, sizeof(cmd));
	log_debug("oob peer=%s dir=%s cmd=%s len=%zu", addr_str(&s->client, a, sizeof(a)), dir, cmd,
		  len);
}

/* The answer in slot p->nout (len bytes) goes to s's client with the
 * batch. */
static void out_take(struct relay_proxy *p, struct session *s, size_t len)
{
	static const char cr[] = "\xff\xff\xff\xff"
				 "connectResponse";
	unsigned k = p->nout;

	/* The server took this client: once it sends game traffic it is a
	 * player (a game packet never starts with the OOB marker). */
	if (len >= sizeof(cr) - 1 &&
	    memcmp(p->out_bufs + (size_t)k * BUF_SIZE, cr, sizeof(cr) - 1) == 0)
		s->connect_answered = true;
	s->pkts_out++;
	s->bytes_out += len;
	if (log_enabled(LOG_LEVEL_DEBUG))
		log_oob(s, "to-client", p->out_bufs + (size_t)k * BUF_SIZE, len);
	/* A dual-stack socket sends to IPv4 clients by their v4-mapped form. */
	if (p->pubs[s->pub].family == AF_INET6)
		addr_map_v4(&s->client, &p->out_addr[k]);
	else
		p->out_addr[k] = s->client;
	p->out_pub[k] = s->pub;
	p->out_iov[k].iov_len = len;
	p->out_msgs[k].msg_hdr.msg_name = &p->out_addr[k].ss;
	p->out_msgs[k].msg_hdr.msg_namelen = p->out_addr[k].len;
	p->nout++;
}

static void on_upstream(struct ev_io *io, uint32_t events, void *arg)
{
	struct session *s = arg;
	struct relay_proxy *p = s->p;

	if (events & EPOLLOUT) {
		/* Drain the queue toward the server. */
		while (s->qlen > 0) {
			struct qpkt *q = s->q[s->qhead];

			if (send(ev_io_fd(io), q->data, q->len, 0) < 0) {
				if (errno == EAGAIN || errno == EWOULDBLOCK)
					break;
				drop(p, RELAY_DROP_SEND_ERROR);
			} else {
				s->pkts_in++;
				s->bytes_in += q->len;
				p->srv->st.pkts_to_server++;
				p->srv->st.bytes_to_server += q->len;
			}
			p->queued_bytes -= q->len;
			free(q);
			s->qhead = (s->qhead + 1) % RELAY_SESSION_QUEUE;
			s->qlen--;
		}
		if (s->qlen == 0)
			ev_io_mod(io, EPOLLIN);
	}
	if (events & (EPOLLIN | EPOLLERR)) {
		unsigned room, base;
		int n;

		if (p->nout == BATCH)
			flush_out(p);
		/* Slots from base on are clean: flush_out() resets what it sent. */
		base = p->nout;
		room = BATCH - base;
		/* One syscall takes what is there (up to the batch's room);
		 * epoll is level-triggered, so any rest wakes us again. */
		n = recvmmsg(ev_io_fd(io), p->out_msgs + base, room, MSG_DONTWAIT, NULL);
		if (n <= 0) {
			/* ECONNREFUSED: ICMP from a server that is not there
			 * (yet); transient on a connected UDP socket. */
			return;
		}
		for (unsigned i = base; i < base + (unsigned)n; i++) {
			unsigned k = p->nout;
			size_t len = p->out_msgs[i].msg_len;
			uint8_t *data = p->out_bufs + (size_t)i * BUF_SIZE;

			if (p->out_msgs[i].msg_hdr.msg_flags & MSG_TRUNC) {
				/* Cannot happen below 65,536 bytes of UDP
				 * payload; never forward a cut datagram. */
				drop(p, RELAY_DROP_MALFORMED);
				continue;
			}
			if (k != i)
				memmove(p->out_bufs + (size_t)k * BUF_SIZE, data, len);
			out_take(p, s, len);
		}
		session_touch(p, s, ev_now(p->r->loop));
	}
}

void relay_proxy_deliver(struct relay_proxy *p, uint32_t sid, const uint8_t *buf, size_t len)
{
	struct session **slot, *s;
	unsigned k;

	if (p == NULL || p->by_sid == NULL || len > BUF_SIZE)
		return;
	slot = htab_get(p->by_sid, &sid);
	if (slot == NULL)
		return; /* a session closed here meanwhile */
	s = *slot;
	if (p->nout == BATCH)
		flush_out(p);
	k = p->nout;
	memcpy(p->out_bufs + (size_t)k * BUF_SIZE, buf, len);
	out_take(p, s, len);
	session_touch(p, s, ev_now(p->r->loop));
}

/* ---- sessions ---- */

static void unconf_unlink(struct relay_proxy *p, struct session *s)
{
	if (s->uprev != NULL)
		s->uprev->unext = s->unext;
	else
		p->unconf_old = s->unext;
	if (s->unext != NULL)
		s->unext->uprev = s->uprev;
	else
		p->unconf_new = s->uprev;
	s->uprev = s->unext = NULL;
}

static void unconf_append(struct relay_proxy *p, struct session *s)
{
	s->unext = NULL;
	s->uprev = p->unconf_new;
	if (p->unconf_new != NULL)
		p->unconf_new->unext = s;
	else
		p->unconf_old = s;
	p->unconf_new = s;
}

/* Records activity: both recency lists, at most once per millisecond. */
static void session_touch(struct relay_proxy *p, struct session *s, long long now)
{
	if (s->last_ms == now)
		return;
	s->last_ms = now;
	htab_touch(p->sessions, s);
	if (!s->confirmed && p->unconf_new != s) {
		unconf_unlink(p, s);
		unconf_append(p, s);
	}
}

static void session_free_queue(struct relay_proxy *p, struct session *s)
{
	while (s->qlen > 0) {
		struct qpkt *q = s->q[s->qhead];

		p->queued_bytes -= q->len;
		free(q);
		s->qhead = (s->qhead + 1) % RELAY_SESSION_QUEUE;
		s->qlen--;
	}
}

static void session_close(struct relay_proxy *p, struct session *s, const char *why)
{
	char a[ADDR_STRLEN];

	ev_io_del(s->io, true);
	session_free_queue(p, s);
	if (p->by_sid != NULL) {
		struct session **slot = htab_get(p->by_sid, &s->sid);

		if (slot != NULL)
			htab_remove(p->by_sid, slot);
	}
	if (!s->confirmed)
		unconf_unlink(p, s);
	if (s->known_noted) {
		struct addr_ip ip;

		addr_to_ip(&s->client, &ip);
		relay_qcache_player(p->qc, &ip); /* last seen: now */
	}
	p->srv->st.sessions_closed++;
	if (s->transparent && p->tp != NULL)
		p->tp->active--;
	htab_remove(p->sessions, s);
	/* A player's session (confirmed) closes at info: with its open line,
	 * the log maps the port the server saw back to the real address. */
	if (log_enabled(s->confirmed ? LOG_LEVEL_INFO : LOG_LEVEL_DEBUG)) {
		char sn[RELAY_NAME_MAX + 16];

		log_emit(s->confirmed ? LOG_LEVEL_INFO : LOG_LEVEL_DEBUG, 0,
			 "session-close peer=%s active=%zu reason=%s pkts_in=%llu bytes_in=%llu "
			 "pkts_out=%llu bytes_out=%llu upstream_port=%u%s%s",
			 addr_str(&s->client, a, sizeof(a)), htab_count(p->sessions), why,
			 (unsigned long long)s->pkts_in, (unsigned long long)s->bytes_in,
			 (unsigned long long)s->pkts_out, (unsigned long long)s->bytes_out,
			 s->upstream_port, s->transparent ? " transparent=1" : "",
			 relay_server_logname(p->srv, sn, sizeof(sn)));
	}
}

/* Closes sessions idle for SESSION_TIMEOUT, oldest first. */
static void expire_sessions(struct relay_proxy *p, long long now)
{
	struct session *s;

	while ((s = htab_oldest(p->sessions)) != NULL &&
	       now - s->last_ms >= p->srv->cfg.session_timeout_ms)
		session_close(p, s, "idle");
	while ((s = p->unconf_old) != NULL &&
	       now - s->last_ms >= p->srv->cfg.unconfirmed_timeout_ms)
		session_close(p, s, "idle-unconfirmed");
}

static void on_sweep(struct ev_timer *t, void *arg)
{
	struct relay_proxy *p = arg;
	long long now;

	if (p == NULL)
		return;
	now = ev_now(p->r->loop);

	expire_sessions(p, now);
	ratelim_expire(p->queries, now);
	ev_timer_start(p->r->loop, t, 1000, on_sweep, p);
}

/* What every new session starts with, socket or not. */
static void session_init(struct relay_proxy *p, struct session *s, const struct addr *client,
			 uint16_t upstream_port, uint8_t pub)
{
	s->p = p;
	s->client = *client;
	s->upstream_port = upstream_port;
	s->transparent = false;
	s->pub = pub;
	s->created_ms = s->last_ms = ev_now(p->r->loop);
	s->confirmed = false;
	unconf_append(p, s);
	p->srv->st.sessions_opened++;
}

/* A session whose server is behind the tunnel: an id instead of a
 * socket (the agent opens the socket toward the server at home). */
static struct session *session_open_tunnel(struct relay_proxy *p, const struct addr *client,
					   const struct addr_key *key, uint8_t pub)
{
	struct session *s, **slot;
	uint32_t sid;

	do {
		sid = ++p->next_sid;
	} while (sid == 0 || htab_get(p->by_sid, &sid) != NULL);
	s = htab_insert(p->sessions, key, false, NULL);
	if (s == NULL) {
		drop(p, RELAY_DROP_SESSION_CAP);
		return NULL;
	}
	slot = htab_insert(p->by_sid, &sid, false, NULL);
	if (slot == NULL) {
		htab_remove(p->sessions, s);
		drop(p, RELAY_DROP_SESSION_CAP);
		return NULL;
	}
	*slot = s;
	s->io = NULL;
	s->sid = sid;
	session_init(p, s, client, 0, pub);
	if (log_enabled(LOG_LEVEL_DEBUG)) {
		char a[ADDR_STRLEN], sn[RELAY_NAME_MAX + 16];

		log_debug("session-open peer=%s active=%zu tunnel_sid=%u%s",
			  addr_str(client, a, sizeof(a)), htab_count(p->sessions), sid,
			  relay_server_logname(p->srv, sn, sizeof(sn)));
	}
	return s;
}

static struct session *session_open(struct relay_proxy *p, const struct addr *client,
				    const struct addr_key *key, uint8_t pub)
{
	struct relay *r = p->r;
	struct relay_server *srv = p->srv;
	struct session *s;
	struct addr local;
	bool transparent = false;
	int fd;

	expire_sessions(p, ev_now(r->loop));
	if (htab_count(p->sessions) >= srv->cfg.max_sessions) {
		struct session *old = p->unconf_old;

		/* Full: the oldest unconfirmed session makes room once it has
		 * had a second to confirm; confirmed ones are never evicted. */
		if (old == NULL || ev_now(r->loop) - old->last_ms < RELAY_UNCONFIRMED_GRACE_MS) {
			drop(p, RELAY_DROP_SESSION_CAP);
			return NULL;
		}
		session_close(p, old, "evicted");
		srv->st.sessions_evicted++;
	}
	if (srv->cfg.server_tunnel)
		return session_open_tunnel(p, client, key, pub);
	/* Its local port is the port the server sees for this client; in
	 * transparent mode its address is the client's too (a client of the
	 * other family keeps ours, counted). */
	fd = -EAFNOSUPPORT;
	if (p->tp != NULL)
		fd = relay_transparent_connect(&srv->server, client, &local, p->tp);
	transparent = fd >= 0;
	if (fd == -EAFNOSUPPORT)
		fd = addr_udp_connect(&srv->server, &local);
	if (fd < 0) {
		errno = -fd;
		goto fail;
	}
	s = htab_insert(p->sessions, key, false, NULL);
	if (s == NULL)
		goto fail_fd;
	s->io = ev_io_add(r->loop, fd, EPOLLIN, on_upstream, s);
	if (s->io == NULL) {
		htab_remove(p->sessions, s);
		goto fail_fd;
	}
	session_init(p, s, client, addr_port(&local), pub);
	s->transparent = transparent;
	if (log_enabled(LOG_LEVEL_DEBUG)) {
		char a[ADDR_STRLEN], sn[RELAY_NAME_MAX + 16];

		log_debug("session-open peer=%s active=%zu upstream_port=%u%s%s",
			  addr_str(client, a, sizeof(a)), htab_count(p->sessions), s->upstream_port,
			  transparent ? " transparent=1" : "",
			  relay_server_logname(p->srv, sn, sizeof(sn)));
	}
	return s;
fail_fd:
	if (transparent)
		p->tp->active--;
	close(fd);
fail : {
	unsigned long sup;

	/* EMFILE and friends: count as the cap, say it once in a while. */
	if (log_ratelimit_ok(&p->warn_sock, ev_now(r->loop), 10000, &sup))
		log_warn("session-fail suppressed=%lu", sup);
	drop(p, RELAY_DROP_SESSION_CAP);
}
	return NULL;
}

static void session_send(struct relay_proxy *p, struct session *s, const uint8_t *buf, size_t len)
{
	struct qpkt *q;

	if (s->io == NULL) {
		/* Through the tunnel: its queues are the tunnel's. */
		if (relay_tunnel_dgram_from(p->r->tunnel, p->srv, s->sid, &s->client, buf, len) <
		    0) {
			drop(p, RELAY_DROP_SEND_ERROR);
			return;
		}
		s->pkts_in++;
		s->bytes_in += len;
		p->srv->st.pkts_to_server++;
		p->srv->st.bytes_to_server += len;
		return;
	}
	if (s->qlen == 0) {
		if (send(ev_io_fd(s->io), buf, len, 0) >= 0) {
			s->pkts_in++;
			s->bytes_in += len;
			p->srv->st.pkts_to_server++;
			p->srv->st.bytes_to_server += len;
			return;
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			/* ECONNREFUSED (server down) and the like. */
			drop(p, RELAY_DROP_SEND_ERROR);
			return;
		}
	}
	if (s->qlen == RELAY_SESSION_QUEUE || len > RELAY_QUEUE_BYTES_MAX - p->queued_bytes) {
		drop(p, RELAY_DROP_QUEUE_FULL);
		return;
	}
	q = malloc(sizeof(*q) + len);
	if (q == NULL) {
		drop(p, RELAY_DROP_QUEUE_FULL);
		return;
	}
	q->len = (uint32_t)len;
	memcpy(q->data, buf, len);
	s->q[(s->qhead + s->qlen) % RELAY_SESSION_QUEUE] = q;
	s->qlen++;
	p->queued_bytes += len;
	ev_io_mod(s->io, EPOLLIN | EPOLLOUT);
}

/* ---- requests: client -> public socket -> session ---- */

/*
 * The per-IP buckets cannot stop a flood from many (spoofed) sources: each
 * new source comes with a full bucket. The budget caps the queries
 * forwarded per second from all sources together (the engine answers only
 * about that many anyway), and the masters we heartbeat are exempt so their
 * challenge still gets through under a flood.
 */
static bool query_budget_take(struct relay_proxy *p, const struct addr_ip *ip)
{
	long long now = ev_now(p->r->loop), rate = p->srv->cfg.query_budget;
	long long cap = rate * 1000;

	if (rate == 0)
		return true;
	if (now > p->qbudget_ms) {
		p->qbudget_milli += (now - p->qbudget_ms) * rate;
		if (p->qbudget_milli > cap)
			p->qbudget_milli = cap;
		p->qbudget_ms = now;
	}
	if (p->qbudget_milli >= 1000) {
		p->qbudget_milli -= 1000;
		return true;
	}
	return p->srv->hb != NULL && relay_heartbeat_is_master(p->srv->hb, ip);
}

/* The global bans, then the server's own. */
static bool banned(struct relay_proxy *p, const struct addr *from)
{
	struct relay_bans *g = p->r->bans, *own = p->srv->bans;
	bool any_g = g != NULL && banlist_count(relay_bans_list(g)) > 0;
	bool any_own = own != NULL && banlist_count(relay_bans_list(own)) > 0;
	struct addr_ip ip;

	if (!any_g && !any_own)
		return false;
	addr_to_ip(from, &ip);
	return (any_g && relay_bans_check(g, &ip)) || (any_own && relay_bans_check(own, &ip));
}

/*
 * A client spoke again after the server's answer: a player (spoofed
 * sources and one-shot queries never get here). One line at info maps the
 * port the server sees (its logs, its bans) back to the real address;
 * nothing of the traffic itself.
 */
static void log_confirmed(struct relay_proxy *p, const struct session *s)
{
	char a[ADDR_STRLEN], sn[RELAY_NAME_MAX + 16];

	if (!log_enabled(LOG_LEVEL_INFO))
		return;
	if (s->io == NULL)
		log_info("session-player peer=%s tunnel_sid=%u%s",
			 addr_str(&s->client, a, sizeof(a)), s->sid,
			 relay_server_logname(p->srv, sn, sizeof(sn)));
	else
		log_info("session-player peer=%s upstream_port=%u%s%s",
			 addr_str(&s->client, a, sizeof(a)), s->upstream_port,
			 s->transparent ? " transparent=1" : "",
			 relay_server_logname(p->srv, sn, sizeof(sn)));
}

static void handle_client(struct relay_proxy *p, uint8_t pub, const struct addr *from,
			  const uint8_t *buf, size_t len)
{
	struct relay *r = p->r;
	struct session *s;
	struct addr_key key;
	char cmd[CMD_MAX];
	enum relay_verdict v;

	/* Bans come first, before any parsing or lookup. */
	if (banned(p, from)) {
		drop(p, RELAY_DROP_BANNED);
		return;
	}
	v = relay_classify(buf, len, cmd, sizeof(cmd));
	switch (v) {
	case RELAY_VERDICT_MALFORMED:
		drop(p, RELAY_DROP_MALFORMED);
		return;
	case RELAY_VERDICT_FILTERED:
		drop(p, RELAY_DROP_FILTERED);
		if (log_enabled(LOG_LEVEL_DEBUG)) {
			char a[ADDR_STRLEN];

			log_debug("oob peer=%s dir=to-server cmd=%s len=%zu drop=filtered",
				  addr_str(from, a, sizeof(a)), cmd, len);
		}
		return;
	case RELAY_VERDICT_QUERY: {
		struct addr_ip ip;

		/* A master checking the server it lists, answered from the
		 * cache or not. */
		addr_to_ip(from, &ip);
		if (p->srv->hb != NULL)
			relay_heartbeat_note_query(p->srv->hb, &ip);
		switch (relay_qcache_query(p->qc, pub, from, buf, len)) {
		case RELAY_QC_DONE:
			return;
		case RELAY_QC_ATTACK:
			drop(p, RELAY_DROP_ATTACK_MODE);
			return;
		case RELAY_QC_FORWARD:
			break;
		}
		if (!ratelim_check(p->queries, &ip, ev_now(r->loop))) {
			drop(p, RELAY_DROP_RATE_LIMITED);
			if (log_enabled(LOG_LEVEL_DEBUG)) {
				char a[ADDR_STRLEN];

				log_debug("oob peer=%s dir=to-server cmd=%s len=%zu "
					  "drop=rate_limited",
					  addr_str(from, a, sizeof(a)), cmd, len);
			}
			return;
		}
		if (!query_budget_take(p, &ip)) {
			drop(p, RELAY_DROP_QUERY_BUDGET);
			return;
		}
		break;
	}
	case RELAY_VERDICT_GAME:
	case RELAY_VERDICT_PASS:
		break;
	}
	addr_to_key(from, &key);
	s = htab_get(p->sessions, &key);
	if (s != NULL && !s->confirmed && s->pkts_out > 0) {
		s->confirmed = true;
		unconf_unlink(p, s);
		log_confirmed(p, s);
	}
	if (v != RELAY_VERDICT_QUERY) {
		struct addr_ip ip;

		/* Attack mode: players (a session the server took) and known
		 * players only. Forwarded queries were judged above. */
		addr_to_ip(from, &ip);
		if (!relay_qcache_admit(p->qc, &ip, s != NULL && s->connect_answered)) {
			drop(p, RELAY_DROP_ATTACK_MODE);
			return;
		}
		if (v == RELAY_VERDICT_GAME && s != NULL && s->connect_answered &&
		    !s->known_noted) {
			s->known_noted = true;
			relay_qcache_player(p->qc, &ip);
		}
	}
	if (s == NULL) {
		s = session_open(p, from, &key, pub);
		if (s == NULL)
			return;
	} else {
		session_touch(p, s, ev_now(r->loop));
	}
	if (v != RELAY_VERDICT_GAME && log_enabled(LOG_LEVEL_DEBUG)) {
		char a[ADDR_STRLEN];

		log_debug("oob peer=%s dir=to-server cmd=%s len=%zu", addr_str(from, a, sizeof(a)),
			  cmd, len);
	}
	/* The engine's per-address query budget pays for these. */
	if (v == RELAY_VERDICT_QUERY || (v == RELAY_VERDICT_PASS && q3_cmd_eq(cmd, "getchallenge")))
		relay_qcache_engine_note(p->qc);
	session_send(p, s, buf, len);
}

static void on_public(struct ev_io *io, uint32_t events, void *arg)
{
	struct pub *pb = arg;
	struct relay_proxy *p = pb->p;
	int n;

	(void)events;
	for (unsigned i = 0; i < BATCH; i++) {
		p->in_msgs[i].msg_hdr.msg_namelen = sizeof(p->in_addr[i].ss);
		p->in_msgs[i].msg_hdr.msg_flags = 0;
	}
	/* At most one batch per wakeup: the sessions get their turn. */
	n = recvmmsg(ev_io_fd(io), p->in_msgs, BATCH, MSG_DONTWAIT, NULL);
	if (n <= 0)
		return;
	for (int i = 0; i < n; i++) {
		struct mmsghdr *m = &p->in_msgs[i];

		if (p->r->stopping)
			break;
		p->in_addr[i].len = m->msg_hdr.msg_namelen;
		if ((m->msg_hdr.msg_flags & MSG_TRUNC) || m->msg_len > RELAY_MAX_PACKET) {
			drop(p, RELAY_DROP_MALFORMED);
			continue;
		}
		/* An IPv4 client of a dual-stack socket: plain IPv4 from here. */
		if (pb->dual)
			addr_unmap_v4(&p->in_addr[i]);
		handle_client(p, pb->idx, &p->in_addr[i], p->in_bufs + (size_t)i * BUF_SIZE,
			      m->msg_len);
	}
}

/* ---- the module ---- */

/*
 * A burst of clients must not overflow the public socket before the loop
 * reads it: ask for 4 MiB each way (SO_*BUFFORCE passes net.core.*mem_max
 * when we have CAP_NET_ADMIN; otherwise the kernel caps the plain request).
 */
static void grow_buffers(int fd)
{
	int size = 4 << 20, got = addr_socket_buffers(fd, size);

	if (got < (1 << 20))
		log_warnx("socket-buffer-small rcvbuf=%d want=%d hint=\"raise net.core.rmem_max "
			  "and wmem_max (sysctl.d/50-rally-relay.conf)\"",
			  got, size);
}

/* The "drops" column of /proc/net/udp{,6} for the socket of inode ino. */
static long long proc_drops(unsigned long long ino)
{
	static const char *const tables[] = {"/proc/self/net/udp", "/proc/self/net/udp6"};
	char line[512];

	for (size_t t = 0; t < 2; t++) {
		FILE *f = fopen(tables[t], "re");

		if (f == NULL)
			continue;
		while (fgets(line, sizeof(line), f) != NULL) {
			/* sl local rem st tx:rx tr:when retr uid timeout inode ref ptr drops */
			char *tok[13], *save = NULL, *q = line;
			int n = 0;

			while (n < 13 && (tok[n] = strtok_r(q, " \t\n", &save)) != NULL) {
				q = NULL;
				n++;
			}
			if (n == 13 && strtoull(tok[9], NULL, 10) == ino) {
				fclose(f);
				return (long long)strtoull(tok[12], NULL, 10);
			}
		}
		fclose(f);
	}
	return -1;
}

/*
 * Datagrams the kernel dropped on the public sockets (receive buffer full),
 * read from /proc/net/udp{,6} for our sockets' inodes. Called for /metrics
 * only, never per packet. Returns -1 if unknown.
 */
long long relay_proxy_kernel_drops(const struct relay_proxy *p)
{
	long long sum = -1;

	if (p == NULL)
		return -1; /* tunnel-only relay: no game port */
	for (size_t i = 0; i < p->npub; i++) {
		struct stat st;
		long long d;

		if (fstat(p->pubs[i].fd, &st) < 0)
			continue;
		d = proc_drops((unsigned long long)st.st_ino);
		if (d >= 0)
			sum = (sum < 0 ? 0 : sum) + d;
	}
	return sum;
}

/* The public socket that sends to family: one of it, else a dual-stack
 * one for IPv4. */
static const struct pub *pub_for(const struct relay_proxy *p, int family)
{
	for (size_t i = 0; i < p->npub; i++) {
		if (p->pubs[i].family == family)
			return &p->pubs[i];
	}
	for (size_t i = 0; i < p->npub; i++) {
		if (family == AF_INET && p->pubs[i].dual)
			return &p->pubs[i];
	}
	return NULL;
}

bool relay_proxy_can_send(const struct relay_proxy *p, int family)
{
	return p != NULL && pub_for(p, family) != NULL;
}

uint8_t *relay_proxy_out_slot(struct relay_proxy *p, size_t *room)
{
	if (p->nout == BATCH)
		flush_out(p);
	*room = BUF_SIZE;
	return p->out_bufs + (size_t)p->nout * BUF_SIZE;
}

void relay_proxy_out_push(struct relay_proxy *p, uint8_t pub, const struct addr *to, size_t len)
{
	unsigned k = p->nout;

	/* A dual-stack socket sends to IPv4 askers by their v4-mapped form. */
	if (p->pubs[pub].family == AF_INET6)
		addr_map_v4(to, &p->out_addr[k]);
	else
		p->out_addr[k] = *to;
	p->out_pub[k] = pub;
	p->out_iov[k].iov_len = len;
	p->out_msgs[k].msg_hdr.msg_name = &p->out_addr[k].ss;
	p->out_msgs[k].msg_hdr.msg_namelen = p->out_addr[k].len;
	p->nout++;
}

struct relay_qcache *relay_proxy_qcache(const struct relay_proxy *p)
{
	return p != NULL ? p->qc : NULL;
}

int relay_proxy_send_public(struct relay_proxy *p, const struct addr *to, const void *buf,
			    size_t len)
{
	const struct pub *pb = pub_for(p, addr_family(to));
	struct addr dst;

	if (pb == NULL)
		return -EAFNOSUPPORT;
	if (pb->family == AF_INET6)
		addr_map_v4(to, &dst);
	else
		dst = *to;
	if (sendto(pb->fd, buf, len, 0, (const struct sockaddr *)&dst.ss, dst.len) < 0)
		return -errno;
	return 0;
}

size_t relay_proxy_close_ip(struct relay_proxy *p, const struct addr_ip *ip)
{
	struct session *s = p != NULL ? htab_oldest(p->sessions) : NULL;
	size_t n = 0;

	/* XXX: O(sessions); bans are rare and sessions at most 2048. */
	while (s != NULL) {
		struct session *next = htab_newer(p->sessions, s);
		struct addr_ip sip;

		addr_to_ip(&s->client, &sip);
		if (memcmp(sip.b, ip->b, sizeof(sip.b)) == 0) {
			session_close(p, s, "banned");
			n++;
		}
		s = next;
	}
	return n;
}

size_t relay_proxy_session_count(const struct relay_proxy *p)
{
	return p != NULL ? htab_count(p->sessions) : 0;
}

size_t relay_proxy_ratelim_count(const struct relay_proxy *p)
{
	return p != NULL ? ratelim_count(p->queries) : 0;
}

void relay_proxy_foreach(struct relay_proxy *p,
			 void (*fn)(const struct relay_session_info *, void *), void *arg)
{
	long long now;

	if (p == NULL)
		return; /* tunnel-only relay: no game port */
	now = ev_now(p->r->loop);

	for (struct session *s = htab_oldest(p->sessions); s != NULL;
	     s = htab_newer(p->sessions, s)) {
		struct relay_session_info si = {
			.client = s->client,
			.upstream_port = s->upstream_port,
			.tunnelled = s->io == NULL,
			.transparent = s->transparent,
			.confirmed = s->confirmed,
			.age_ms = now - s->created_ms,
			.idle_ms = now - s->last_ms,
			.pkts_in = s->pkts_in,
			.bytes_in = s->bytes_in,
			.pkts_out = s->pkts_out,
			.bytes_out = s->bytes_out,
			.queued = s->qlen,
		};

		fn(&si, arg);
	}
}

static bool takes_v4(const struct addr *a)
{
	static const uint8_t any[16];
	struct addr_ip ip;

	addr_to_ip(a, &ip);
	return memcmp(ip.b, any, 16) == 0 ||
	       (ip.b[10] == 0xff && ip.b[11] == 0xff && memcmp(ip.b, any, 10) == 0);
}

/* Opens public socket i: the one bound before the start, or a new one. */
static int pub_open(struct relay_proxy *p, size_t i)
{
	struct relay_server *srv = p->srv;
	struct pub *pb = &p->pubs[i];
	bool v6only = relay_server_cfg_v6only(&srv->cfg, i);
	int fd;

	if (srv->pre_fd[i] >= 0) {
		fd = srv->pre_fd[i];
		srv->pre_fd[i] = -1;
		srv->bound[i].len = sizeof(srv->bound[i].ss);
		if (getsockname(fd, (struct sockaddr *)&srv->bound[i].ss, &srv->bound[i].len) < 0) {
			int e = errno;

			close(fd);
			return -e;
		}
	} else {
		srv->bound[i] = srv->cfg.listen[i];
		fd = addr_udp_bind_v6only(&srv->bound[i], v6only);
		if (fd < 0)
			return fd;
	}
	pb->p = p;
	pb->fd = fd;
	pb->idx = (uint8_t)i;
	pb->family = addr_family(&srv->bound[i]);
	/* Only the wildcard "[::]" (or a v4-mapped address) takes IPv4: a
	 * socket bound to one IPv6 address can neither receive nor send it. */
	pb->dual = pb->family == AF_INET6 && !v6only && takes_v4(&srv->bound[i]);
	grow_buffers(fd);
	pb->io = ev_io_add(p->r->loop, fd, EPOLLIN, on_public, pb);
	if (pb->io == NULL)
		return -errno;
	return 0;
}

int relay_proxy_new(struct relay_server *srv)
{
	struct relay *r = srv->r;
	struct relay_proxy *p = calloc(1, sizeof(*p));
	int ret;

	if (p == NULL)
		return -ENOMEM;
	p->r = r;
	p->srv = srv;
	for (size_t i = 0; i < RELAY_MAX_LISTEN; i++)
		p->pubs[i].fd = -1;
	ev_timer_init(&p->sweep);
	p->qbudget_milli = (long long)srv->cfg.query_budget * 1000;
	p->qbudget_ms = ev_now(r->loop);
	p->sessions =
		htab_new(srv->cfg.max_sessions, sizeof(struct addr_key), sizeof(struct session));
	p->queries = ratelim_new(RELAY_MAX_QUERY_SOURCES, RELAY_QUERY_BURST, RELAY_QUERY_RATE,
				 RELAY_QUERY_FORGET_MS);
	if (srv->cfg.server_tunnel) {
		p->by_sid =
			htab_new(srv->cfg.max_sessions, sizeof(uint32_t), sizeof(struct session *));
		if (p->by_sid == NULL) {
			ret = -ENOMEM;
			goto fail;
		}
	}
	p->in_bufs = malloc((size_t)BATCH * BUF_SIZE);
	p->out_bufs = malloc((size_t)BATCH * BUF_SIZE);
	if (p->sessions == NULL || p->queries == NULL || p->in_bufs == NULL ||
	    p->out_bufs == NULL) {
		ret = -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i < BATCH; i++) {
		p->in_iov[i].iov_base = p->in_bufs + (size_t)i * BUF_SIZE;
		p->in_iov[i].iov_len = BUF_SIZE;
		p->in_msgs[i].msg_hdr.msg_iov = &p->in_iov[i];
		p->in_msgs[i].msg_hdr.msg_iovlen = 1;
		p->in_msgs[i].msg_hdr.msg_name = &p->in_addr[i].ss;
		p->out_iov[i].iov_base = p->out_bufs + (size_t)i * BUF_SIZE;
		p->out_msgs[i].msg_hdr.msg_iov = &p->out_iov[i];
		p->out_msgs[i].msg_hdr.msg_iovlen = 1;
	}
	reset_out(p, BATCH);
	if (srv->cfg.transparent) {
		char why[320], sn[RELAY_NAME_MAX + 16];

		/* Checked before anything listens: never a silent fallback. */
		ret = relay_transparent_check(&srv->server, why, sizeof(why));
		if (ret < 0) {
			char a[ADDR_STRLEN];

			log_err("transparent-unavailable server=%s %s%s",
				addr_str(&srv->server, a, sizeof(a)), why,
				relay_server_logname(srv, sn, sizeof(sn)));
			goto fail;
		}
		p->tp = &p->tstats;
	}
	for (size_t i = 0; i < srv->cfg.nlisten; i++) {
		ret = pub_open(p, i);
		if (p->pubs[i].fd >= 0)
			p->npub = i + 1;
		if (ret < 0) {
			char a[ADDR_STRLEN];

			errno = -ret;
			log_warn("listen-fail listen=%s",
				 addr_str(&srv->cfg.listen[i], a, sizeof(a)));
			goto fail;
		}
	}
	ret = ev_before_sleep_add(r->loop, before_sleep, p);
	if (ret < 0)
		goto fail;
	p->hooked = true;
	p->qc = relay_qcache_new(srv, p);
	if (p->qc == NULL) {
		ret = -errno;
		goto fail;
	}
	ev_timer_start(r->loop, &p->sweep, 1000, on_sweep, p);
	srv->proxy = p;
	return 0;
fail:
	relay_proxy_free(p);
	return ret;
}

void relay_proxy_stop(struct relay_proxy *p)
{
	struct session *s;

	if (p == NULL || p->stopped)
		return;
	p->stopped = true;
	if (p->nout > 0)
		flush_out(p);
	if (p->hooked)
		ev_before_sleep_del(p->r->loop, before_sleep, p);
	p->hooked = false;
	ev_timer_stop(p->r->loop, &p->sweep);
	while ((s = htab_oldest(p->sessions)) != NULL)
		session_close(p, s, "server-removed");
	/* Its players are saved now: a restarted server's next self loads
	 * them from the file as it starts, right after. */
	relay_qcache_free(p->qc);
	p->qc = NULL;
	/* The sockets stay open (the flatline leaves from them); nothing is
	 * read any more. */
	for (size_t i = 0; i < p->npub; i++) {
		if (p->pubs[i].io != NULL) {
			ev_io_del(p->pubs[i].io, false);
			p->pubs[i].io = NULL;
		}
	}
}

int relay_proxy_dup_socket(const struct relay_proxy *p, size_t i)
{
	int fd;

	if (p == NULL || i >= p->npub || p->pubs[i].fd < 0)
		return -EBADF;
	fd = fcntl(p->pubs[i].fd, F_DUPFD_CLOEXEC, 3);
	return fd < 0 ? -errno : fd;
}

void relay_proxy_free(struct relay_proxy *p)
{
	struct session *s;

	if (p == NULL)
		return;
	if (p->nout > 0)
		flush_out(p);
	if (p->hooked)
		ev_before_sleep_del(p->r->loop, before_sleep, p);
	ev_timer_stop(p->r->loop, &p->sweep);
	if (p->sessions != NULL) {
		while ((s = htab_oldest(p->sessions)) != NULL)
			session_close(p, s, "shutdown");
	}
	/* After the sessions: the players among them are seen now. */
	relay_qcache_free(p->qc);
	p->qc = NULL;
	for (size_t i = 0; i < p->npub; i++) {
		if (p->pubs[i].io != NULL)
			ev_io_del(p->pubs[i].io, true);
		else if (p->pubs[i].fd >= 0)
			close(p->pubs[i].fd);
	}
	if (p->srv->proxy == p)
		p->srv->proxy = NULL;
	htab_free(p->sessions);
	htab_free(p->by_sid);
	ratelim_free(p->queries);
	free(p->in_bufs);
	free(p->out_bufs);
	free(p);
}

const struct relay_transparent_stats *relay_proxy_transparent(const struct relay_proxy *p)
{
	return p != NULL ? p->tp : NULL;
}
