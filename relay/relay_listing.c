/*
 * The listing check: is the server in each master's list?
 *
 * Heartbeats are fire and forget; a master that restarted empty, expired
 * the server, cannot reach the front address or refuses the game leaves
 * the server off the browser without a word. So every --listing-interval
 * (and --listing-delay after the first heartbeat, when the master has had
 * time to challenge the front and list it) each master is asked for its
 * list as a player's browser asks - "getservers <protocol> empty full", or
 * for an IPv6 master "getserversExt <game> <protocol> empty full ipv4
 * ipv6" (dpmaster 2.x messages.c, techinfo 3.4 and 3.6) - with the
 * protocol and game the server itself reports to the heartbeat probe, and
 * the answer is searched for the front address.
 *
 * Each attempt uses a fresh UDP socket (a new ephemeral port: an off-path
 * spoofer must guess it), takes only datagrams from the master's address
 * (others are dropped and counted as foreign), decodes each one whole
 * before using it (common/q3), and is bounded: RELAY_LISTING_MAX_DGRAMS
 * datagrams, RELAY_LISTING_MAX_BYTES, RELAY_LISTING_MAX_SERVERS servers,
 * --listing-timeout. A verdict needs the whole answer: "listed" only with
 * the EOT mark seen and the front address in it; "not listed" only when
 * the mark came and nothing more did for RELAY_LISTING_GRACE_MS (a
 * datagram that was overtaken still counts; masters before dpmaster 2.0
 * mark every datagram). Anything short of a verdict is an error outcome:
 * no answer, malformed, incomplete (no mark in time), too long. Up to
 * three attempts per check; a second identical answer settles it.
 *
 * A listing lost (or missing at the first check) is logged once, on the
 * change, and brings the next heartbeat forward; a check --listing-delay
 * later says whether it came back (and logs that once). While a master
 * still does not list the server, each round sends it one more heartbeat.
 *
 * Which entry is ours: the master sees the front's public address, which
 * behind a NAT is not the bind address (relay_listing_self_init has the
 * rules; /healthz says which one matched, and a match by the port alone
 * is flagged weak).
 */
#include <errno.h>
#include <ifaddrs.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "info.h"
#include "log.h"
#include "num.h"
#include "q3.h"
#include "relay.h"
#include "strbuf.h"

/* Bounds of one attempt: a master of 65,536 servers answers in ~335
 * datagrams of 1,400 bytes (dpmaster's default list holds 4,096). */
#define RELAY_LISTING_ATTEMPTS    (3)
#define RELAY_LISTING_MAX_DGRAMS  (1024)
#define RELAY_LISTING_MAX_BYTES   ((size_t)2 * 1024 * 1024)
#define RELAY_LISTING_MAX_SERVERS ((size_t)65536)
#define RELAY_LISTING_GRACE_MS    (250)
#define RELAY_LISTING_CANDIDATES  (4)
/* Receive buffer asked for per check socket: a whole large answer. */
#define RELAY_LISTING_RCVBUF (1 << 20)
/* Datagrams read per wakeup (fairness, STYLE 6). */
#define RELAY_LISTING_BATCH   (64)
#define RELAY_LISTING_REQ_MAX (128)

enum lo {
	LO_LISTED,
	LO_NOT_LISTED,
	LO_NO_ANSWER,
	LO_MALFORMED,
	LO_INCOMPLETE,
	LO_TOO_LONG,
	LO_SEND_ERROR,
	LO_RESOLVE_ERROR,
	LO_UNKNOWN_GAME,
	LO_N
};

static const char *const lo_names[LO_N] = {
	"listed",   "not_listed", "no_answer",     "malformed",    "incomplete",
	"too_long", "send_error", "resolve_error", "unknown_game",
};

enum ld { LD_FOREIGN, LD_MALFORMED, LD_N };

static const char *const ld_names[LD_N] = {"foreign", "malformed"};

/* What one attempt has read so far. */
struct attempt {
	unsigned dgrams;
	size_t bytes, servers;
	bool valid, eot, malformed;
	enum relay_listing_match best;
	struct q3_srv best_srv;
	unsigned ncand;
	struct q3_srv cand[RELAY_LISTING_CANDIDATES];
};

/* One master in one address family: the master lists the server under
 * the source of each family's heartbeat, so each is checked on its own. */
struct lmaster {
	struct relay_listing *l;
	size_t i;   /* --master order */
	int family; /* AF_INET, AF_INET6 */
	bool used;  /* checked at least once: shown in /healthz, /metrics */
		    /* The check under way. */
	bool running;
	unsigned attempt;
	enum lo prev; /* the previous attempt's outcome */
	int fd;
	struct ev_io *io;
	struct ev_timer timer;
	long long deadline_ms;
	struct addr to;
	bool ext;
	struct relay_listing_self self;
	struct attempt a;
	char request[RELAY_LISTING_REQ_MAX]; /* its text, for /healthz */

	/* The verdicts: listed is -1 before the first. Wall clock in s. */
	int listed;
	long long since, checked, error_at;
	long long since_ms; /* monotonic, for durations in log lines */
	bool have_outcome, have_error;
	enum lo outcome, error;
	enum relay_listing_match match, rule;
	struct q3_srv seen;
	unsigned ncand;
	struct q3_srv cand[RELAY_LISTING_CANDIDATES];
	size_t servers; /* in the last whole answer */
	bool have_servers;
	uint64_t checks[LO_N];
	uint64_t drops[LD_N];
	struct log_ratelimit warn_foreign, warn_malformed;
};

struct relay_listing {
	struct relay *r;
	struct relay_server *srv;
	const struct relay_server_cfg *c;
	struct relay_heartbeat *hb;
	struct ev_timer round;
	size_t nmasters;
	struct lmaster m[RELAY_MAX_MASTERS][2]; /* [i][0]: IPv4, [i][1]: IPv6 */
	size_t running;
	/* From the server's infoResponse. */
	bool have_protocol;
	int32_t protocol;
	char game[Q3_GAMENAME_MAX + 1]; /* "" when unknown */
	/* Heartbeats seen, and whether a lost listing waits for the next. */
	bool ever_alive, last_alive, recheck;
	bool lost_this_round;
	long long last_kick_ms;
	uint8_t buf[RELAY_MAX_PACKET + 1];
};

static void start_attempt(struct lmaster *m);

/* ---- who "we" are (pure) ---- */

const char *relay_listing_match_name(enum relay_listing_match m)
{
	switch (m) {
	case RELAY_MATCH_PUBLIC:
		return "public_address";
	case RELAY_MATCH_BIND:
		return "bind_address";
	case RELAY_MATCH_LOCAL:
		return "local_address";
	case RELAY_MATCH_PORT:
		return "port_only";
	case RELAY_MATCH_NONE:
		break;
	}
	return "none";
}

/* Address space a master on the internet never sees as a source. */
static bool is_private(const struct addr *a)
{
	struct addr_ip ip;
	const uint8_t *b;

	if (addr_family(a) == AF_INET6)
		return !addr_is_global_v6(a);
	addr_to_ip(a, &ip);
	b = ip.b + 12;
	/* RFC 1918, RFC 6598 (carrier-grade NAT), RFC 3927, loopback. */
	return b[0] == 10 || (b[0] == 172 && (b[1] & 0xf0) == 16) || (b[0] == 192 && b[1] == 168) ||
	       (b[0] == 100 && (b[1] & 0xc0) == 64) || (b[0] == 169 && b[1] == 254) || b[0] == 127;
}

static bool is_unspecified(const struct addr *a)
{
	static const uint8_t zero[16];
	struct addr_ip ip;

	addr_to_ip(a, &ip);
	if (addr_family(a) == AF_INET)
		return memcmp(ip.b + 12, zero, 4) == 0;
	return memcmp(ip.b, zero, 16) == 0;
}

void relay_listing_self_init(struct relay_listing_self *self, const struct addr *listen,
			     const struct addr *pub, const struct addr *master)
{
	memset(self, 0, sizeof(*self));
	self->port = addr_port(listen);
	if (pub != NULL) {
		self->rule = RELAY_MATCH_PUBLIC;
		addr_to_ip(pub, &self->ip);
		if (addr_port(pub) != 0)
			self->port = addr_port(pub);
		return;
	}
	if (!is_unspecified(listen) && (!is_private(listen) || is_private(master))) {
		self->rule = RELAY_MATCH_BIND;
		addr_to_ip(listen, &self->ip);
		return;
	}
	self->rule = RELAY_MATCH_LOCAL;
}

static void srv_ip(const struct q3_srv *s, struct addr_ip *ip)
{
	static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	if (s->v6) {
		memcpy(ip->b, s->ip, 16);
	} else {
		memcpy(ip->b, v4mapped, 12);
		memcpy(ip->b + 12, s->ip, 4);
	}
}

enum relay_listing_match relay_listing_match(const struct relay_listing_self *self,
					     const struct q3_srv *s)
{
	struct addr_ip ip;

	if (s->port != self->port)
		return RELAY_MATCH_NONE;
	srv_ip(s, &ip);
	switch (self->rule) {
	case RELAY_MATCH_PUBLIC:
	case RELAY_MATCH_BIND:
		if (memcmp(ip.b, self->ip.b, sizeof(ip.b)) == 0)
			return self->rule;
		break;
	case RELAY_MATCH_LOCAL:
		for (size_t i = 0; i < self->nlocal; i++) {
			if (memcmp(ip.b, self->local[i].b, sizeof(ip.b)) == 0)
				return RELAY_MATCH_LOCAL;
		}
		break;
	case RELAY_MATCH_PORT:
	case RELAY_MATCH_NONE:
		break;
	}
	return RELAY_MATCH_PORT;
}

bool relay_listing_enough(const struct relay_listing_self *self, enum relay_listing_match m)
{
	/* Without a public or usable bind address, the port alone is taken,
	 * and reported as weak. */
	if (self->rule == RELAY_MATCH_LOCAL)
		return m >= RELAY_MATCH_PORT;
	return m >= self->rule;
}

/* This host's addresses of one family (the LOCAL rule). getifaddrs reads
 * them over netlink at once; nothing waits on the network. */
static void local_addrs(struct relay_listing_self *self, int family)
{
	struct ifaddrs *all, *ifa;

	if (getifaddrs(&all) < 0)
		return;
	for (ifa = all; ifa != NULL && self->nlocal < RELAY_LISTING_MAX_LOCAL;
	     ifa = ifa->ifa_next) {
		struct addr a;

		if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != family)
			continue;
		memset(&a, 0, sizeof(a));
		a.len = family == AF_INET ? sizeof(struct sockaddr_in)
					  : sizeof(struct sockaddr_in6);
		memcpy(&a.ss, ifa->ifa_addr, a.len);
		addr_to_ip(&a, &self->local[self->nlocal++]);
	}
	freeifaddrs(all);
}

/* ---- the server's protocol and game ---- */

/* dpmaster games.c (and rally-master's table): the game a known heartbeat
 * tag stands for, when the infostring names none. */
static const struct {
	const char *tag, *game;
} tag_games[] = {
	{"QuakeArena-1", "Quake3Arena"},
	{"Wolfenstein-1", "wolfmp"},
	{"EnemyTerritory-1", "et"},
};

static bool word_ok(const char *s, size_t n)
{
	if (n == 0 || n > Q3_GAMENAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] > 126)
			return false;
	}
	return true;
}

void relay_listing_note_info(struct relay_listing *l, const uint8_t *buf, size_t n)
{
	struct q3_args args;
	const char *val, *info;
	size_t vlen, off, ilen;
	int64_t proto;

	if (l == NULL || q3_oob_tokenize(buf, n, &args) < 1)
		return;
	off = Q3_OOB_PREFIX_LEN + args.consumed;
	info = (const char *)buf + off;
	ilen = n - off;
	/* dpmaster lists the server under the protocol and game of this
	 * very infoResponse (HandleInfoResponse). */
	if (info_get(info, ilen, "protocol", &val, &vlen) == 0 &&
	    num_parse(val, vlen, 0, INT32_MAX, 0, &proto) == 0) {
		if (l->have_protocol && l->protocol != (int32_t)proto)
			log_info("listing-protocol protocol=%lld was=%ld", (long long)proto,
				 (long)l->protocol);
		l->protocol = (int32_t)proto;
		l->have_protocol = true;
	}
	if (info_get(info, ilen, "gamename", &val, &vlen) == 0 && word_ok(val, vlen)) {
		memcpy(l->game, val, vlen);
		l->game[vlen] = '\0';
		return;
	}
	for (size_t i = 0; i < sizeof(tag_games) / sizeof(tag_games[0]); i++) {
		if (strcmp(l->c->heartbeat_tag, tag_games[i].tag) == 0) {
			snprintf(l->game, sizeof(l->game), "%s", tag_games[i].game);
			return;
		}
	}
	l->game[0] = '\0';
}

/* ---- one master's check ---- */

static void srv_str(const struct q3_srv *s, char *buf, size_t size)
{
	struct addr_ip ip;
	struct addr a;

	srv_ip(s, &ip);
	addr_from_ip(&a, &ip, s->port);
	addr_str(&a, buf, size);
}

static void master_name(const struct lmaster *m, char *buf, size_t size)
{
	relay_master_str(&m->l->c->masters[m->i], buf, size);
}

static const char *family_name(int family)
{
	return family == AF_INET6 ? "ipv6" : "ipv4";
}

/* The public-address of family (NULL: none). */
static const struct addr *public_of(const struct relay_server_cfg *c, int family)
{
	for (size_t k = 0; k < c->npublic; k++) {
		if (addr_family(&c->public_addr[k]) == family)
			return &c->public_addr[k];
	}
	return NULL;
}

/*
 * The front address of family: the bound socket of that family, or for
 * IPv4 a dual-stack "[::]" socket, whose IPv4 side is the wildcard
 * 0.0.0.0 at its port. False when no socket sends to that family.
 */
static bool front_of(const struct relay_server *srv, int family, struct addr *out)
{
	for (size_t i = 0; i < srv->cfg.nlisten; i++) {
		if (addr_family(&srv->bound[i]) == family) {
			*out = srv->bound[i];
			return true;
		}
	}
	for (size_t i = 0; family == AF_INET && i < srv->cfg.nlisten; i++) {
		if (addr_family(&srv->bound[i]) == AF_INET6 && is_unspecified(&srv->bound[i]) &&
		    !relay_server_cfg_v6only(&srv->cfg, i)) {
			addr_parse_ip(out, "0.0.0.0");
			addr_set_port(out, addr_port(&srv->bound[i]));
			return true;
		}
	}
	return false;
}

static void close_attempt(struct lmaster *m)
{
	ev_timer_stop(m->l->r->loop, &m->timer);
	if (m->io != NULL)
		ev_io_del(m->io, true);
	else if (m->fd >= 0)
		close(m->fd);
	m->io = NULL;
	m->fd = -1;
}

/*
 * A listing lost brings the next heartbeat forward at once and a check
 * --listing-delay after it; while a master still does not list the server,
 * each round brings one more heartbeat, at most one per --listing-interval
 * (a master that was down at the first one gets another).
 */
static void round_done(struct relay_listing *l)
{
	long long now = ev_now(l->r->loop);
	bool down = false;
	for (size_t i = 0; i < l->nmasters; i++)
		down = down || l->m[i][0].listed == 0 || l->m[i][1].listed == 0;
	if (l->hb != NULL &&
	    (l->lost_this_round || (down && now - l->last_kick_ms >= l->c->listing_interval_ms))) {
		l->recheck = l->recheck || l->lost_this_round;
		l->last_kick_ms = now;
		relay_heartbeat_kick(l->hb);
	}
	l->lost_this_round = false;
}

/* The check's verdict. */
static void finish(struct lmaster *m, enum lo o)
{
	struct relay_listing *l = m->l;
	long long now_ms = ev_now(l->r->loop), wall = (long long)time(NULL);
	int listed = o == LO_LISTED;
	char name[RELAY_HOST_MAX + 32], seen[ADDR_STRLEN],
		cands[RELAY_LISTING_CANDIDATES * (ADDR_STRLEN + 1)];
	char sn[RELAY_NAME_MAX + 16];
	size_t cl = 0;
	close_attempt(m);
	m->running = false;
	m->checks[o]++;
	m->have_outcome = true;
	m->outcome = o;
	m->checked = wall;
	m->rule = m->self.rule;
	if (m->a.eot && o != LO_TOO_LONG) {
		m->servers = m->a.servers;
		m->have_servers = true;
	}
	m->match = listed ? m->a.best : RELAY_MATCH_NONE;
	m->seen = m->a.best_srv;
	/* Candidates (our port, another address) explain a miss or a weak
	 * match; a strong match needs none. */
	m->ncand = listed && m->match != RELAY_MATCH_PORT ? 0 : m->a.ncand;
	memcpy(m->cand, m->a.cand, sizeof(m->cand));
	if (!listed) {
		m->have_error = true;
		m->error = o;
		m->error_at = wall;
	}
	master_name(m, name, sizeof(name));
	snprintf(name + strlen(name), sizeof(name) - strlen(name), " family=%s",
		 family_name(m->family));
	relay_server_logname(l->srv, sn, sizeof(sn));
	seen[0] = '\0';
	if (listed)
		srv_str(&m->seen, seen, sizeof(seen));
	cands[0] = '\0';
	for (unsigned k = 0; k < m->ncand; k++) {
		char a[ADDR_STRLEN];

		srv_str(&m->cand[k], a, sizeof(a));
		cl += (size_t)snprintf(cands + cl, sizeof(cands) - cl, "%s%s", k ? "," : "", a);
	}
	if (m->listed == listed) {
		log_debug("listing-check master=%s outcome=%s servers=%zu match=%s%s", name,
			  lo_names[o], m->a.servers, relay_listing_match_name(m->match), sn);
	} else if (listed && m->listed < 0) {
		log_info("listing-confirmed master=%s match=%s seen-as=%s%s%s", name,
			 relay_listing_match_name(m->match), seen,
			 m->match == RELAY_MATCH_PORT ? " weak=port-only" : "", sn);
	} else if (listed) {
		log_info("listing-regained master=%s match=%s seen-as=%s after=%llds%s%s", name,
			 relay_listing_match_name(m->match), seen, (now_ms - m->since_ms) / 1000,
			 m->match == RELAY_MATCH_PORT ? " weak=port-only" : "", sn);
	} else if (m->listed < 0) {
		log_warnx("listing-missing master=%s reason=%s rule=%s candidates=%s%s", name,
			  lo_names[o], relay_listing_match_name(m->self.rule),
			  cands[0] ? cands : "none", sn);
		l->lost_this_round = true;
	} else {
		log_warnx("listing-lost master=%s reason=%s rule=%s listed-for=%llds "
			  "candidates=%s%s",
			  name, lo_names[o], relay_listing_match_name(m->self.rule),
			  (now_ms - m->since_ms) / 1000, cands[0] ? cands : "none", sn);
		l->lost_this_round = true;
	}
	if (m->listed != listed) {
		m->since = wall;
		m->since_ms = now_ms;
		m->listed = listed;
	}
	if (--l->running == 0)
		round_done(l);
}

/* The end of one attempt: a verdict, or another attempt. */
static void end_attempt(struct lmaster *m, enum lo o)
{
	bool settled = o == LO_LISTED || m->attempt >= RELAY_LISTING_ATTEMPTS ||
		       (m->attempt > 1 && o == m->prev &&
			(o == LO_NOT_LISTED || o == LO_MALFORMED || o == LO_TOO_LONG));

	close_attempt(m);
	if (settled) {
		finish(m, o);
		return;
	}
	m->prev = o;
	start_attempt(m);
}

/* What the attempt read adds up to, once the time is up. */
static enum lo attempt_outcome(const struct lmaster *m)
{
	if (m->a.eot)
		return relay_listing_enough(&m->self, m->a.best) ? LO_LISTED : LO_NOT_LISTED;
	if (m->a.valid)
		return LO_INCOMPLETE;
	return m->a.malformed ? LO_MALFORMED : LO_NO_ANSWER;
}

static void on_timer(struct ev_timer *t, void *arg)
{
	struct lmaster *m = arg;

	(void)t;
	end_attempt(m, attempt_outcome(m));
}

/* One datagram from the master's address. Returns false when it ended
 * the attempt (m may then be running a new one). */
static bool on_answer(struct lmaster *m, const uint8_t *buf, size_t n)
{
	struct relay_listing *l = m->l;
	struct q3_getservers_resp resp;
	struct q3_srv s;
	size_t off = 0;
	unsigned long sup;
	char name[RELAY_HOST_MAX + 8];

	if (q3_decode_getservers_resp(buf, n, &resp) < 0 || resp.ext != m->ext) {
		m->drops[LD_MALFORMED]++;
		m->a.malformed = true;
		if (log_ratelimit_ok(&m->warn_malformed, ev_now(l->r->loop), 60000, &sup)) {
			master_name(m, name, sizeof(name));
			log_warnx("listing-answer-malformed master=%s bytes=%zu suppressed=%lu",
				  name, n, sup);
		}
		return true;
	}
	m->a.dgrams++;
	m->a.bytes += n;
	m->a.servers += resp.n;
	if (m->a.dgrams > RELAY_LISTING_MAX_DGRAMS || m->a.bytes > RELAY_LISTING_MAX_BYTES ||
	    m->a.servers > RELAY_LISTING_MAX_SERVERS) {
		end_attempt(m, LO_TOO_LONG);
		return false;
	}
	m->a.valid = true;
	while (q3_getservers_resp_next(&resp, &off, &s)) {
		enum relay_listing_match k = relay_listing_match(&m->self, &s);

		if (k == RELAY_MATCH_NONE)
			continue;
		if (k > m->a.best) {
			m->a.best = k;
			m->a.best_srv = s;
		}
		if (k == RELAY_MATCH_PORT && m->a.ncand < RELAY_LISTING_CANDIDATES)
			m->a.cand[m->a.ncand++] = s;
	}
	if (resp.eot)
		m->a.eot = true;
	if (!m->a.eot)
		return true;
	/* A strong match in a whole answer settles it; otherwise wait a
	 * moment for datagrams the mark overtook. */
	if (m->a.best >= m->self.rule && m->a.best > RELAY_MATCH_PORT) {
		end_attempt(m, LO_LISTED);
		return false;
	}
	{
		long long now = ev_now(l->r->loop), left = m->deadline_ms - now;

		ev_timer_start(l->r->loop, &m->timer,
			       left < RELAY_LISTING_GRACE_MS ? (left > 0 ? left : 0)
							     : RELAY_LISTING_GRACE_MS,
			       on_timer, m);
	}
	return true;
}

static void on_readable(struct ev_io *io, uint32_t events, void *arg)
{
	struct lmaster *m = arg;
	struct relay_listing *l = m->l;

	(void)events;
	for (int k = 0; k < RELAY_LISTING_BATCH; k++) {
		struct addr from;
		ssize_t n = addr_udp_recv(ev_io_fd(io), l->buf, sizeof(l->buf), &from);
		unsigned long sup;

		if (n < 0)
			return;
		if ((size_t)n > sizeof(l->buf) - 1) {
			m->drops[LD_MALFORMED]++;
			m->a.malformed = true;
			continue;
		}
		/* Only the master's own address and port: anything else is
		 * someone trying to make us believe in a listing. */
		if (!addr_equal(&from, &m->to)) {
			char name[RELAY_HOST_MAX + 8], a[ADDR_STRLEN];

			m->drops[LD_FOREIGN]++;
			if (log_ratelimit_ok(&m->warn_foreign, ev_now(l->r->loop), 60000, &sup)) {
				master_name(m, name, sizeof(name));
				log_warnx("listing-answer-foreign master=%s from=%s "
					  "suppressed=%lu",
					  name, addr_str(&from, a, sizeof(a)), sup);
			}
			continue;
		}
		if (!on_answer(m, l->buf, (size_t)n))
			return;
	}
}

/* The request for this master: getserversExt for an IPv6 one (getservers
 * lists IPv4 servers only), the game name first for a DarkPlaces-tagged
 * server (an anonymous getservers never finds those, dpmaster
 * HandleGetServers). Returns its length, or -EINVAL without a game. */
static int build_request(const struct lmaster *m, uint8_t *buf, size_t size)
{
	const struct relay_listing *l = m->l;
	struct q3_getservers req = {
		.flags = Q3_GS_EMPTY | Q3_GS_FULL,
		.protocol = l->protocol,
	};

	if (m->ext) {
		req.flags |= Q3_GS_EXT | Q3_GS_IPV4 | Q3_GS_IPV6;
		if (l->game[0] == '\0')
			return -EINVAL;
		memcpy(req.gamename, l->game, sizeof(req.gamename));
	} else if (strcmp(l->c->heartbeat_tag, Q3_HEARTBEAT_GENERIC) == 0) {
		if (l->game[0] == '\0')
			return -EINVAL;
		memcpy(req.gamename, l->game, sizeof(req.gamename));
	}
	return q3_encode_getservers(buf, size, &req);
}

/* A fresh socket for each attempt, from the front's IP when it is a
 * specific one of the master's family (the master sees the checks come
 * from where the heartbeats do). */
static int open_socket(const struct lmaster *m, const struct addr *front)
{
	struct addr local;
	int fd;

	if (addr_family(front) == addr_family(&m->to) && !is_unspecified(front)) {
		local = *front;
	} else {
		memset(&local, 0, sizeof(local));
		if (addr_family(&m->to) == AF_INET6)
			addr_parse_ip(&local, "::");
		else
			addr_parse_ip(&local, "0.0.0.0");
	}
	addr_set_port(&local, 0);
	fd = addr_udp_bind(&local);
	if (fd >= 0)
		(void)addr_socket_buffers(fd, RELAY_LISTING_RCVBUF);
	return fd;
}

static void start_attempt(struct lmaster *m)
{
	struct relay_listing *l = m->l;
	const struct relay_server_cfg *c = l->c;
	uint8_t pkt[RELAY_LISTING_REQ_MAX + Q3_OOB_PREFIX_LEN];
	struct addr front;
	int len;
	ssize_t sent;

	m->attempt++;
	memset(&m->a, 0, sizeof(m->a));
	if (!front_of(l->srv, m->family, &front) ||
	    !relay_heartbeat_master_addr(l->hb, m->i, m->family, &m->to)) {
		finish(m, LO_RESOLVE_ERROR);
		return;
	}
	m->ext = m->family == AF_INET6;
	len = build_request(m, pkt, sizeof(pkt));
	if (len < 0) {
		m->request[0] = '\0';
		finish(m, LO_UNKNOWN_GAME);
		return;
	}
	snprintf(m->request, sizeof(m->request), "%.*s", len - Q3_OOB_PREFIX_LEN,
		 (const char *)pkt + Q3_OOB_PREFIX_LEN);
	relay_listing_self_init(&m->self, &front, public_of(c, m->family), &m->to);
	if (m->self.rule == RELAY_MATCH_LOCAL)
		local_addrs(&m->self, m->family);
	m->deadline_ms = ev_now(l->r->loop) + c->listing_timeout_ms;
	m->fd = open_socket(m, &front);
	if (m->fd < 0) {
		errno = -m->fd;
		m->fd = -1;
		log_warn("listing-socket-fail");
		end_attempt(m, LO_SEND_ERROR);
		return;
	}
	do {
		sent = sendto(m->fd, pkt, (size_t)len, 0, (const struct sockaddr *)&m->to.ss,
			      m->to.len);
	} while (sent < 0 && errno == EINTR);
	if (sent < 0) {
		char name[RELAY_HOST_MAX + 8];

		master_name(m, name, sizeof(name));
		log_debug("listing-send-fail master=%s error=\"%s\"", name, strerror(errno));
		end_attempt(m, LO_SEND_ERROR);
		return;
	}
	m->io = ev_io_add(l->r->loop, m->fd, EPOLLIN, on_readable, m);
	if (m->io == NULL) {
		end_attempt(m, LO_SEND_ERROR);
		return;
	}
	ev_timer_start(l->r->loop, &m->timer, c->listing_timeout_ms, on_timer, m);
}

/* ---- rounds ---- */

static void on_round(struct ev_timer *t, void *arg)
{
	struct relay_listing *l = arg;
	struct lmaster *go[RELAY_MAX_MASTERS * 2];
	size_t n = 0;

	ev_timer_start(l->r->loop, t, l->c->listing_interval_ms, on_round, l);
	/* Without the server's protocol there is nothing to ask for; the
	 * first answered probe brings the first check (heartbeat_sent). */
	if (!l->have_protocol || l->running > 0)
		return;
	l->lost_this_round = false;
	/* Each family a heartbeat went to; a master that never resolved in
	 * a family we send from is checked (resolve_error) in the first. */
	for (size_t i = 0; i < l->nmasters; i++) {
		struct addr a;
		bool any = false;

		for (int f = 0; f < 2; f++) {
			int fam = f == 0 ? AF_INET : AF_INET6;

			if (relay_proxy_can_send(l->srv->proxy, fam) &&
			    relay_heartbeat_master_addr(l->hb, i, fam, &a)) {
				go[n++] = &l->m[i][f];
				any = true;
			}
		}
		if (!any)
			go[n++] = &l->m[i][relay_proxy_can_send(l->srv->proxy, AF_INET) ? 0 : 1];
	}
	for (size_t k = 0; k < n; k++) {
		go[k]->running = true;
		go[k]->used = true;
		go[k]->attempt = 0;
		l->running++;
	}
	for (size_t k = 0; k < n; k++)
		start_attempt(go[k]);
}

void relay_listing_heartbeat_sent(struct relay_listing *l, bool alive)
{
	if (l == NULL)
		return;
	if (alive && (!l->ever_alive || !l->last_alive || l->recheck)) {
		long long at = ev_now(l->r->loop) + l->c->listing_delay_ms;

		if (!ev_timer_armed(&l->round) || l->round.deadline_ms > at)
			ev_timer_start(l->r->loop, &l->round, l->c->listing_delay_ms, on_round, l);
		l->recheck = false;
	}
	l->ever_alive = l->ever_alive || alive;
	l->last_alive = alive;
}

/* ---- reporting ---- */

/* A (master, family) shown in /healthz and /metrics: checked once, or a
 * heartbeat of that family went to the master (so its counters are there,
 * at zero, before the first check). */
static bool shown(const struct lmaster *m)
{
	struct addr a;

	return m->used || (relay_proxy_can_send(m->l->srv->proxy, m->family) &&
			   relay_heartbeat_master_addr(m->l->hb, m->i, m->family, &a));
}

/* Calls fn for every (master, family) shown of every server of r, with its
 * label set; with all, for every family the front sends in too (counters
 * start at zero, before any heartbeat resolved the master). */
static void each_unit(const struct relay *r, bool all,
		      void (*fn)(const struct lmaster *, const char *labels, void *), void *arg)
{
	for (size_t k = 0; k < r->nservers; k++) {
		const struct relay_listing *l = relay_heartbeat_listing(r->servers[k]->hb);

		for (size_t i = 0; l != NULL && i < l->nmasters; i++) {
			for (int f = 0; f < 2; f++) {
				const struct lmaster *m = &l->m[i][f];
				char name[RELAY_HOST_MAX + 8], more[RELAY_HOST_MAX + 48];
				char lb[RELAY_HOST_MAX + 128];

				if (!shown(m) &&
				    !(all && relay_proxy_can_send(l->srv->proxy, m->family)))
					continue;
				master_name(m, name, sizeof(name));
				snprintf(more, sizeof(more), "master=\"%s\",family=\"%s\"", name,
					 family_name(m->family));
				fn(m, relay_server_labels(l->srv, more, lb, sizeof(lb)), arg);
			}
		}
	}
}

enum { M_LISTED, M_WEAK, M_SINCE, M_CHECKED, M_SERVERS, M_CHECKS, M_DROPS, M_N };

struct metric_ctx {
	struct strbuf *out;
	const char *name;
	int what;
};

static void metric_line(const struct lmaster *m, const char *lb, void *arg)
{
	struct metric_ctx *x = arg;
	/* lb is "{...}": per-outcome and per-reason lines add inside it. */
	int inner = (int)strlen(lb) - 1;

	switch (x->what) {
	case M_LISTED:
		if (m->listed >= 0)
			strbuf_printf(x->out, "%s%s %d\n", x->name, lb, m->listed);
		break;
	case M_WEAK:
		if (m->listed >= 0)
			strbuf_printf(x->out, "%s%s %d\n", x->name, lb,
				      m->listed == 1 && m->match == RELAY_MATCH_PORT ? 1 : 0);
		break;
	case M_SINCE:
		if (m->listed >= 0)
			strbuf_printf(x->out, "%s%s %lld\n", x->name, lb, m->since);
		break;
	case M_CHECKED:
		if (m->have_outcome)
			strbuf_printf(x->out, "%s%s %lld\n", x->name, lb, m->checked);
		break;
	case M_SERVERS:
		if (m->have_servers)
			strbuf_printf(x->out, "%s%s %zu\n", x->name, lb, m->servers);
		break;
	case M_CHECKS:
		for (int o = 0; o < LO_N; o++)
			strbuf_printf(x->out, "%s%.*s,outcome=\"%s\"} %llu\n", x->name, inner, lb,
				      lo_names[o], (unsigned long long)m->checks[o]);
		break;
	case M_DROPS:
		for (int d = 0; d < LD_N; d++)
			strbuf_printf(x->out, "%s%.*s,reason=\"%s\"} %llu\n", x->name, inner, lb,
				      ld_names[d], (unsigned long long)m->drops[d]);
		break;
	}
}

void relay_listing_metrics(const struct relay *r, struct strbuf *out)
{
	static const struct {
		const char *name, *type, *help;
	} fams[M_N] = {
		[M_LISTED] = {"rally_relay_master_listed", "gauge",
			      "1 if the last check found the server in the master's list, 0 if "
			      "not (absent before the first)."},
		[M_WEAK] = {"rally_relay_master_listing_weak", "gauge",
			    "1 if the last listing was recognised by the front port alone."},
		[M_SINCE] = {"rally_relay_master_listing_since_timestamp_seconds", "gauge",
			     "When the listing last changed (listed or not), Unix time."},
		[M_CHECKED] = {"rally_relay_master_listing_checked_timestamp_seconds", "gauge",
			       "When the last check ended, Unix time."},
		[M_SERVERS] = {"rally_relay_master_listing_servers", "gauge",
			       "Servers in the master's last whole answer."},
		[M_CHECKS] = {"rally_relay_master_listing_checks_total", "counter",
			      "Listing checks by master, family and outcome."},
		[M_DROPS] = {"rally_relay_master_listing_drops_total", "counter",
			     "Datagrams the check sockets dropped: not from the master "
			     "(foreign), not an answer (malformed)."},
	};
	bool any = false;

	for (size_t k = 0; k < r->nservers; k++)
		any = any || relay_heartbeat_listing(r->servers[k]->hb) != NULL;
	if (!any)
		return;
	for (int w = 0; w < M_N; w++) {
		struct metric_ctx x = {.out = out, .name = fams[w].name, .what = w};

		strbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", fams[w].name, fams[w].help,
			      fams[w].name, fams[w].type);
		each_unit(r, w == M_CHECKS || w == M_DROPS, metric_line, &x);
	}
}

static struct json_object *wall_or_null(bool have, long long t)
{
	return have ? json_object_new_int64(t) : NULL;
}

static struct json_object *master_json(const struct lmaster *m)
{
	struct json_object *o = json_object_new_object(), *cands = json_object_new_array();
	char a[ADDR_STRLEN + RELAY_HOST_MAX];
	struct addr to;
	bool known = m->listed >= 0;
	uint64_t checks = 0;
	master_name(m, a, sizeof(a));
	json_object_object_add(o, "master", json_object_new_string(a));
	json_object_object_add(o, "family", json_object_new_string(family_name(m->family)));
	json_object_object_add(o, "address",
			       relay_heartbeat_master_addr(m->l->hb, m->i, m->family, &to)
				       ? json_object_new_string(addr_str(&to, a, sizeof(a)))
				       : NULL);
	json_object_object_add(o, "request",
			       m->request[0] ? json_object_new_string(m->request) : NULL);
	json_object_object_add(o, "listed", known ? json_object_new_boolean(m->listed) : NULL);
	json_object_object_add(o, "since", wall_or_null(known, m->since));
	json_object_object_add(o, "checked", wall_or_null(m->have_outcome, m->checked));
	json_object_object_add(o, "outcome",
			       m->have_outcome ? json_object_new_string(lo_names[m->outcome])
					       : NULL);
	json_object_object_add(o, "last_error",
			       m->have_error ? json_object_new_string(lo_names[m->error]) : NULL);
	json_object_object_add(o, "last_error_at", wall_or_null(m->have_error, m->error_at));
	json_object_object_add(
		o, "rule",
		m->have_outcome ? json_object_new_string(relay_listing_match_name(m->rule)) : NULL);
	json_object_object_add(
		o, "match",
		m->listed == 1 ? json_object_new_string(relay_listing_match_name(m->match)) : NULL);
	json_object_object_add(
		o, "weak", json_object_new_boolean(m->listed == 1 && m->match == RELAY_MATCH_PORT));
	if (m->listed == 1)
		srv_str(&m->seen, a, sizeof(a));
	json_object_object_add(o, "seen_as", m->listed == 1 ? json_object_new_string(a) : NULL);
	for (unsigned k = 0; k < m->ncand; k++) {
		srv_str(&m->cand[k], a, sizeof(a));
		json_object_array_add(cands, json_object_new_string(a));
	}
	json_object_object_add(o, "candidates", cands);
	json_object_object_add(o, "servers",
			       m->have_servers ? json_object_new_uint64(m->servers) : NULL);
	for (int k = 0; k < LO_N; k++)
		checks += m->checks[k];
	json_object_object_add(o, "checks", json_object_new_uint64(checks));
	return o;
}

struct json_object *relay_listing_json(const struct relay_listing *l)
{
	struct json_object *o = json_object_new_object(), *arr = json_object_new_array();
	struct json_object *pubs = json_object_new_array();
	const struct relay_server_cfg *c = l->c;
	char a[ADDR_STRLEN];

	json_object_object_add(o, "interval_s",
			       json_object_new_int64(c->listing_interval_ms / 1000));
	json_object_object_add(o, "protocol",
			       l->have_protocol ? json_object_new_int64(l->protocol) : NULL);
	json_object_object_add(o, "game", l->game[0] ? json_object_new_string(l->game) : NULL);
	/* With the front port filled in where none was given. */
	for (size_t k = 0; k < c->npublic; k++) {
		struct addr p = c->public_addr[k], front;

		if (addr_port(&p) == 0 && front_of(l->srv, addr_family(&p), &front))
			addr_set_port(&p, addr_port(&front));
		json_object_array_add(pubs, json_object_new_string(addr_str(&p, a, sizeof(a))));
	}
	json_object_object_add(o, "public_addresses", pubs);
	for (size_t i = 0; i < l->nmasters; i++) {
		for (int f = 0; f < 2; f++) {
			if (shown(&l->m[i][f]))
				json_object_array_add(arr, master_json(&l->m[i][f]));
		}
	}
	json_object_object_add(o, "masters", arr);
	return o;
}

/* ---- life ---- */

struct relay_listing *relay_listing_new(struct relay_server *srv, struct relay_heartbeat *hb)
{
	struct relay_listing *l = calloc(1, sizeof(*l));

	if (l == NULL)
		return NULL;
	l->r = srv->r;
	l->srv = srv;
	l->c = &srv->cfg;
	l->hb = hb;
	l->nmasters = srv->cfg.nmasters;
	l->last_kick_ms = -srv->cfg.listing_interval_ms;
	ev_timer_init(&l->round);
	for (size_t i = 0; i < l->nmasters; i++) {
		for (int f = 0; f < 2; f++) {
			struct lmaster *m = &l->m[i][f];

			m->l = l;
			m->i = i;
			m->family = f == 0 ? AF_INET : AF_INET6;
			m->fd = -1;
			m->listed = -1;
			ev_timer_init(&m->timer);
		}
	}
	/* The periodic round; the first heartbeat brings it forward. */
	ev_timer_start(l->r->loop, &l->round, srv->cfg.listing_interval_ms, on_round, l);
	return l;
}

void relay_listing_free(struct relay_listing *l)
{
	if (l == NULL)
		return;
	ev_timer_stop(l->r->loop, &l->round);
	for (size_t i = 0; i < l->nmasters; i++) {
		close_attempt(&l->m[i][0]);
		close_attempt(&l->m[i][1]);
	}
	free(l);
}
