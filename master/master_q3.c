/*
 * The Quake 3 / ET master: heartbeat -> getinfo challenge -> infoResponse
 * lists a server; getservers / getserversExt list them back. dpmaster 2.x
 * is the reference for the behaviour (doc/techinfo.txt, src/messages.c,
 * games.c, servers.c, clients.c); the code is ours.
 *
 *   heartbeat <tag>        a known tag (or DarkPlaces) from a source that is
 *                          under its quota -> getinfo <fresh challenge>; the
 *                          challenge is valid for --q3-challenge (2 s)
 *   heartbeat <flatline>   from a listed server -> getinfo; if that goes
 *                          unanswered within the validity, the server is
 *                          delisted (a spoofed flatline cannot delist a
 *                          server that answers)
 *   infoResponse           from the challenged address, echoing the
 *                          challenge, with protocol, sv_maxclients != 0 and
 *                          clients -> listed (MASTER_REG_Q3) for --q3-ttl
 *                          (15 min) from now; only this refreshes a listing
 *   getservers(Ext)        throttled per client IP (dpmaster clients.c:
 *                          4 in a row, then one per 3 s) -> the matching
 *                          servers in datagrams of at most 1,400 bytes
 *
 * State: the listed servers live in the registry; pending challenges, the
 * per-IP quota counts, the client throttle and an index of listed servers
 * by (game name, protocol) are bounded htabs of ours (SipHash under a
 * random key). Every datagram costs O(1) table operations, and a
 * getservers walks only the servers of the game and protocol it asks for.
 */
#include <errno.h>
#include <json-c/json.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "htab.h"
#include "httpd.h"
#include "log.h"
#include "master.h"
#include "q3.h"
#include "strbuf.h"

/* dpmaster servers.h DEFAULT_MAX_NB_SERVERS(_PER_ADDRESS). */
#define MAX_SERVERS  (4096)
#define MAX_PER_ADDR (32)
/* Challenges waiting for an answer; the oldest makes room. */
#define MAX_PENDING (4096)
/* Client IPs the throttle remembers; the least recent makes room. */
#define MAX_CLIENTS (16384)
/* dpmaster clients.h: "Allow throttle - 1 queries in a row, then force a
 * throttle to one every decay time seconds". */
#define FP_THROTTLE (5)
#define FP_DECAY_MS (3000)
/* Datagrams per wakeup (fairness, STYLE §6). */
#define BATCH (64)
/* Built-in games plus --q3-game ones. */
#define MAX_GAMES (4 + 16)
#define GROUP_KEY (4 + 16)
/* Kept getservers answers: one per (ext, game, protocol, options); the
 * least recently asked one makes room. */
#define KEPT_MAX (32)
/* Datagrams per sendmmsg call; an answer of 4,096 IPv6 servers is 56. */
#define SEND_BATCH (128)

/* The built-in games, in --q3-game syntax (dpmaster games.c
 * Game_InitProperties), plus OpenArena's protocol 71 for Quake3Arena. */
static const char *const builtin_games[] = {
	"Quake3Arena:heartbeat=QuakeArena-1,protocols=66/67/68/71",
	"wolfmp:heartbeat=Wolfenstein-1,flatline=WolfFlatline-1,protocols=50/59/60",
	("et:heartbeat=EnemyTerritory-1,flatline=ETFlatline-1,protocols=72/80/83/84,"
	 "options=send-empty-servers/send-full-servers"),
};

enum sv_state { SV_EMPTY, SV_OCCUPIED, SV_FULL };

struct q3_group;

/* A listed server: the registry's MASTER_REG_Q3 value. */
struct q3_server {
	struct master_reg_head head;
	struct addr_key key; /* 16-byte IP (v4 mapped) + port */
	uint8_t state;       /* enum sv_state */
	/* Listed through a known game's heartbeat: it may name the game of
	 * an anonymous getservers (dpmaster's anon_properties). */
	bool anon;
	int32_t protocol;
	uint32_t clients, maxclients;
	char gamename[Q3_GAMENAME_MAX + 1];
	char gametype[Q3_GAMETYPE_MAX + 1];
	/* For the page (GET /q3/servers): as q3_decode_inforesponse cut them. */
	char hostname[Q3_HOSTNAME_MAX + 1];
	char mapname[Q3_MAPNAME_MAX + 1];
	/* The index; never in a snapshot (a restored entry starts unlinked). */
	bool linked;
	struct q3_group *group;
	struct q3_server *gprev, *gnext;
};

/* The listed servers of one (game name, protocol), in listing order. */
struct q3_group {
	char name[Q3_GAMENAME_MAX + 1];
	int32_t protocol;
	uint32_t n, nanon;
	struct q3_server *head, *tail;
};

/* A challenge sent, keyed by the heartbeat's source address. */
struct pending {
	long long deadline_ms;
	int game; /* index in games[], -1 for the generic heartbeat */
	bool flatline;
	bool answered;
	/* Holds one of its IP's MAX_PER_ADDR slots (the address is not
	 * listed; a listing holds the slot otherwise). */
	bool counted;
	uint8_t clen;
	char challenge[Q3_CHALLENGE_MAX + 1];
};

struct ipcount {
	uint32_t n;
};

struct client {
	long long last_ms;
	int count;
};

enum msg_type { T_HEARTBEAT, T_INFORESPONSE, T_GETSERVERS, T_GETSERVERSEXT, T_OTHER, T_N };
static const char *const type_names[T_N] = {"heartbeat", "inforesponse", "getservers",
					    "getserversext", "other"};

enum sent_type { S_GETINFO, S_RESPONSE, S_EXTRESPONSE, S_N };
static const char *const sent_names[S_N] = {"getinfo", "getserversresponse",
					    "getserversextresponse"};

enum drop {
	D_TOO_SHORT,
	D_TOO_LONG,
	D_NOT_OOB,
	D_UNKNOWN_COMMAND,
	D_BAD_HEARTBEAT,
	D_UNKNOWN_TAG,
	D_FLATLINE_UNLISTED,
	D_ADDRESS_CAP,
	D_NO_PENDING,
	D_BAD_CHALLENGE,
	D_INFO_TOO_LONG,
	D_NO_CHALLENGE,
	D_BAD_PROTOCOL,
	D_BAD_MAXCLIENTS,
	D_BAD_CLIENTS,
	D_BAD_GAMENAME,
	D_BAD_GAMETYPE,
	D_NO_GAMENAME,
	D_GAMENAME_MISMATCH,
	D_LIST_FULL,
	D_BAD_GETSERVERS,
	D_THROTTLED,
	D_N
};
static const char *const drop_names[D_N] = {
	"too_short",      "too_long",          "not_oob",      "unknown_command",   "bad_heartbeat",
	"unknown_tag",    "flatline_unlisted", "address_cap",  "no_pending",        "bad_challenge",
	"info_too_long",  "no_challenge",      "bad_protocol", "bad_maxclients",    "bad_clients",
	"bad_gamename",   "bad_gametype",      "no_gamename",  "gamename_mismatch", "list_full",
	"bad_getservers", "throttled",
};

/* The datagrams of one getservers answer, each at most Q3_MASTER_MAX_OUT. */
struct answer {
	uint8_t *data; /* packet i at data + i * Q3_MASTER_MAX_OUT */
	uint16_t *lens;
	size_t n, cap;
	size_t servers;
	char game[Q3_GAMENAME_MAX + 1]; /* the resolved game, "" when none */
	unsigned flags;                 /* the request's, with the game's options applied */
};

/*
 * A kept answer: valid while the Q3 kind's registry generation is the one
 * it was built at. The key is the decoded request, before the game's
 * options are applied (they and the game follow from the registry).
 */
struct kept {
	bool used, ext;
	uint64_t gen;
	long long asked_ms;
	struct q3_getservers gs;
	struct answer a;
};

struct master_q3 {
	struct master *m;
	struct addr bound;
	int fd;
	struct ev_io *io;

	struct q3_game games[MAX_GAMES];
	size_t ngames;

	struct htab *pending; /* addr_key -> struct pending, oldest first */
	struct htab *ips;     /* addr_ip -> struct ipcount */
	struct htab *groups;  /* protocol + BLAKE2b(name) -> struct q3_group */
	struct htab *clients; /* addr_ip -> struct client */
	struct ev_timer pending_timer;
	size_t nlinked;
	bool deleting; /* our own master_registry_del: not an expiry */

	uint64_t packets[T_N], sent[S_N], drops[D_N];
	uint64_t send_errors, pending_evicted, delisted_flatline, delisted_expired, listed_new;
	struct log_ratelimit warn_send;

	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	struct addr from[BATCH];
	uint8_t bufs[BATCH][Q3_MASTER_MAX_IN + 1];
	struct q3_srv out[MAX_SERVERS];
	uint8_t pkt[Q3_MASTER_MAX_OUT];

	struct kept kept[KEPT_MAX];
	struct answer fresh; /* --verify-lists scratch */
	uint64_t kept_hits, kept_builds;
	struct mmsghdr smsgs[SEND_BATCH];
	struct iovec siov[SEND_BATCH];
};

static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static bool key_is_v4(const struct addr_key *k)
{
	return memcmp(k->b, v4mapped, sizeof(v4mapped)) == 0;
}

static uint16_t key_port(const struct addr_key *k)
{
	return (uint16_t)(k->b[16] << 8 | k->b[17]);
}

static const struct addr_ip *key_ip(const struct addr_key *k)
{
	return (const struct addr_ip *)(const void *)k->b;
}

static const char *key_str(const struct addr_key *k, char *buf, size_t size)
{
	struct addr a;

	addr_from_ip(&a, key_ip(k), key_port(k));
	return addr_str(&a, buf, size);
}

static void drop(struct master_q3 *q, enum drop d, const struct addr *from, const char *msg)
{
	q->drops[d]++;
	if (log_enabled(LOG_LEVEL_DEBUG)) {
		char a[ADDR_STRLEN];

		log_debug("reject peer=%s msg=%s reason=%s", addr_str(from, a, sizeof(a)), msg,
			  drop_names[d]);
	}
}

static void send_to(struct master_q3 *q, const struct addr *to, const uint8_t *buf, size_t len,
		    enum sent_type t)
{
	unsigned long sup;

	if (sendto(q->fd, buf, len, MSG_DONTWAIT, (const struct sockaddr *)&to->ss, to->len) >= 0) {
		q->sent[t]++;
		return;
	}
	q->send_errors++;
	/* A full socket buffer (EAGAIN) is counted, not logged. */
	if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS &&
	    log_ratelimit_ok(&q->warn_send, ev_now(q->m->loop), 10000, &sup))
		log_warn("q3-send-fail msg=%s suppressed=%lu", sent_names[t], sup);
}

/* ---- games ---- */

static int game_by_name(const struct master_q3 *q, const char *name)
{
	for (size_t i = 0; i < q->ngames; i++) {
		if (strcmp(q->games[i].name, name) == 0)
			return (int)i;
	}
	return -1;
}

/* XXX: linear in the configured games (at most 20 x 16 protocols). */
static int game_by_protocol(const struct master_q3 *q, int32_t protocol)
{
	for (size_t i = 0; i < q->ngames; i++) {
		for (size_t k = 0; k < q->games[i].nprotocols; k++) {
			if (q->games[i].protocols[k] == protocol)
				return (int)i;
		}
	}
	return -1;
}

/* The game of a heartbeat tag: 0 and *game (-1 for DarkPlaces), or -ENOENT. */
static int game_by_tag(const struct master_q3 *q, const char *tag, int *game, bool *flatline)
{
	*flatline = false;
	if (strcmp(tag, Q3_HEARTBEAT_GENERIC) == 0) {
		*game = -1;
		return 0;
	}
	for (size_t i = 0; i < q->ngames; i++) {
		if (strcmp(q->games[i].heartbeat, tag) == 0) {
			*game = (int)i;
			return 0;
		}
		if (q->games[i].flatline[0] != '\0' && strcmp(q->games[i].flatline, tag) == 0) {
			*game = (int)i;
			*flatline = true;
			return 0;
		}
	}
	return -ENOENT;
}

/*
 * Adds a game (a spec with a known name replaces that game) and takes its
 * protocols from every other game, as dpmaster's Game_AddProtocol does.
 */
static int add_game(struct master_q3 *q, const char *spec, bool builtin)
{
	struct q3_game g;
	char err[160];
	int i;

	if (q3_parse_game_spec(spec, &g, err, sizeof(err)) < 0) {
		log_err("q3-game-invalid spec=\"%s\" error=\"%s\"", spec, err);
		return -EINVAL;
	}
	i = game_by_name(q, g.name);
	if (i < 0) {
		if (q->ngames == MAX_GAMES) {
			log_err("q3-game-invalid spec=\"%s\" error=\"too many games\"", spec);
			return -EINVAL;
		}
		i = (int)q->ngames++;
	} else if (!builtin) {
		log_info("q3-game-replaced game=%s", g.name);
	}
	q->games[i] = g;
	for (size_t o = 0; o < q->ngames; o++) {
		struct q3_game *og = &q->games[o];
		size_t w = 0;

		if ((int)o == i)
			continue;
		for (size_t k = 0; k < og->nprotocols; k++) {
			bool taken = false;

			for (size_t n = 0; n < g.nprotocols; n++)
				taken |= og->protocols[k] == g.protocols[n];
			if (!taken)
				og->protocols[w++] = og->protocols[k];
		}
		og->nprotocols = w;
	}
	return 0;
}

static bool tag_used_twice(const struct master_q3 *q, const char *tag, size_t *a, size_t *b)
{
	size_t first = SIZE_MAX;

	for (size_t i = 0; i < q->ngames; i++) {
		if (strcmp(q->games[i].heartbeat, tag) == 0 ||
		    strcmp(q->games[i].flatline, tag) == 0) {
			if (first != SIZE_MAX) {
				*a = first;
				*b = i;
				return true;
			}
			first = i;
		}
	}
	return false;
}

static int load_games(struct master_q3 *q)
{
	const struct master_cfg *c = &q->m->cfg;

	for (size_t i = 0; i < sizeof(builtin_games) / sizeof(builtin_games[0]); i++) {
		if (add_game(q, builtin_games[i], true) < 0)
			return -EINVAL;
	}
	for (size_t i = 0; i < c->nq3_games; i++) {
		if (add_game(q, c->q3_games[i], false) < 0)
			return -EINVAL;
	}
	/* A tag names one game: the heartbeat must say which. */
	for (size_t i = 0; i < q->ngames; i++) {
		const char *tags[2] = {q->games[i].heartbeat, q->games[i].flatline};

		for (int t = 0; t < 2; t++) {
			size_t a, b;

			if (tags[t][0] != '\0' && tag_used_twice(q, tags[t], &a, &b)) {
				log_err("q3-game-invalid error=\"tag %s is used by %s and %s\"",
					tags[t], q->games[a].name, q->games[b].name);
				return -EINVAL;
			}
		}
	}
	return 0;
}

/* ---- per-IP quota ---- */

static uint32_t ip_count(const struct master_q3 *q, const struct addr_ip *ip)
{
	const struct ipcount *c = htab_get(q->ips, ip);

	return c != NULL ? c->n : 0;
}

static void ip_inc(struct master_q3 *q, const struct addr_ip *ip)
{
	struct ipcount *c = htab_get(q->ips, ip);

	/* Sized for every listing and every pending challenge at once. */
	if (c == NULL && (c = htab_insert(q->ips, ip, false, NULL)) == NULL)
		return;
	c->n++;
}

static void ip_dec(struct master_q3 *q, const struct addr_ip *ip)
{
	struct ipcount *c = htab_get(q->ips, ip);

	if (c == NULL)
		return;
	if (--c->n == 0)
		htab_remove(q->ips, c);
}

/* ---- the (game, protocol) index ---- */

static void group_key(uint8_t key[GROUP_KEY], const char *name, int32_t protocol)
{
	uint32_t p = (uint32_t)protocol;

	key[0] = (uint8_t)(p >> 24);
	key[1] = (uint8_t)(p >> 16);
	key[2] = (uint8_t)(p >> 8);
	key[3] = (uint8_t)p;
	/* 128 bits of BLAKE2b: two names colliding is not a practical event. */
	crypto_generichash(key + 4, 16, (const unsigned char *)name, strlen(name), NULL, 0);
}

static struct q3_group *group_find(const struct master_q3 *q, const char *name, int32_t protocol)
{
	uint8_t key[GROUP_KEY];

	group_key(key, name, protocol);
	return htab_get(q->groups, key);
}

static void link_server(struct master_q3 *q, struct q3_server *s)
{
	uint8_t key[GROUP_KEY];
	struct q3_group *g;

	group_key(key, s->gamename, s->protocol);
	g = htab_get(q->groups, key);
	if (g == NULL) {
		/* At most one group per listing: never full. */
		g = htab_insert(q->groups, key, false, NULL);
		if (g == NULL)
			log_fatalx("q3-index-full groups=%zu", htab_count(q->groups));
		snprintf(g->name, sizeof(g->name), "%s", s->gamename);
		g->protocol = s->protocol;
	}
	s->group = g;
	s->gnext = NULL;
	s->gprev = g->tail;
	if (g->tail != NULL)
		g->tail->gnext = s;
	else
		g->head = s;
	g->tail = s;
	g->n++;
	if (s->anon)
		g->nanon++;
	s->linked = true;
	q->nlinked++;
}

static void unlink_server(struct master_q3 *q, struct q3_server *s)
{
	struct q3_group *g = s->group;

	if (s->gprev != NULL)
		s->gprev->gnext = s->gnext;
	else
		g->head = s->gnext;
	if (s->gnext != NULL)
		s->gnext->gprev = s->gprev;
	else
		g->tail = s->gprev;
	g->n--;
	if (s->anon)
		g->nanon--;
	if (g->n == 0)
		htab_remove(q->groups, g);
	s->group = NULL;
	s->gprev = s->gnext = NULL;
	s->linked = false;
	q->nlinked--;
}

/* An entry a snapshot restored: index it and count its slot. */
static void on_restore(void *arg, void *val)
{
	struct master_q3 *q = arg;
	struct q3_server *s = val;
	struct pending *p;

	/* The index is never in a snapshot; the game list may have changed. */
	s->linked = false;
	if (s->anon && game_by_name(q, s->gamename) < 0)
		s->anon = false;
	link_server(q, s);
	p = htab_get(q->pending, &s->key);
	if (p != NULL && p->counted)
		p->counted = false;
	else
		ip_inc(q, key_ip(&s->key));
}

/* The registry drops a listing (expiry, our delisting, a restore). */
static void on_drop(void *arg, void *val)
{
	struct master_q3 *q = arg;
	struct q3_server *s = val;
	struct pending *p;
	char a[ADDR_STRLEN];

	if (!s->linked)
		return;
	unlink_server(q, s);
	/* A challenge pending for the address now holds its slot. */
	p = htab_get(q->pending, &s->key);
	if (p != NULL && !p->counted)
		p->counted = true;
	else
		ip_dec(q, key_ip(&s->key));
	/* A remote listing is its own master's to expire; a merge replacing
	 * or dropping one is no expiry either. */
	if (!q->deleting && !s->head.remote && !master_registry_merging(q->m->reg)) {
		q->delisted_expired++;
		log_info("q3-delisted server=%s game=%s reason=expired",
			 key_str(&s->key, a, sizeof(a)), s->gamename);
	}
}

/* ---- registry kind: snapshot fields ---- */

static void sv_key_of(const void *val, uint8_t key[MASTER_REG_KEY_MAX])
{
	const struct q3_server *s = val;

	memcpy(key, s->key.b, sizeof(s->key.b));
}

static void sv_save(const void *val, struct json_object *obj)
{
	const struct q3_server *s = val;
	char a[ADDR_STRLEN];

	json_object_object_add(obj, "addr", json_object_new_string(key_str(&s->key, a, sizeof(a))));
	json_object_object_add(obj, "game", json_object_new_string(s->gamename));
	json_object_object_add(obj, "protocol", json_object_new_int64(s->protocol));
	json_object_object_add(obj, "gametype", json_object_new_string(s->gametype));
	json_object_object_add(obj, "clients", json_object_new_int64(s->clients));
	json_object_object_add(obj, "maxclients", json_object_new_int64(s->maxclients));
	json_object_object_add(obj, "anon", json_object_new_boolean(s->anon));
	json_object_object_add(obj, "hostname", json_object_new_string(s->hostname));
	json_object_object_add(obj, "map", json_object_new_string(s->mapname));
}

/* An optional display string (older snapshots have none): printable
 * ASCII, spaces allowed, cut to size. */
static void load_display(struct json_object *obj, const char *name, char *dst, size_t size)
{
	struct json_object *f;
	const char *v;
	size_t o = 0;

	dst[0] = '\0';
	if (!json_object_object_get_ex(obj, name, &f) || !json_object_is_type(f, json_type_string))
		return;
	for (v = json_object_get_string(f); *v != '\0' && o + 1 < size; v++)
		dst[o++] = *v >= 0x20 && *v < 0x7f ? *v : '?';
	dst[o] = '\0';
}

static bool word_ok(const char *s, size_t max, bool empty_ok)
{
	size_t n = strlen(s);

	if (n > max || (n == 0 && !empty_ok))
		return false;
	for (size_t i = 0; i < n; i++) {
		if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] > 126)
			return false;
	}
	return true;
}

static int load_int(struct json_object *obj, const char *name, long long min, long long max,
		    long long *out, char *err, size_t errsize)
{
	struct json_object *f;

	if (!json_object_object_get_ex(obj, name, &f) || !json_object_is_type(f, json_type_int)) {
		snprintf(err, errsize, "%s: missing or not an integer", name);
		return -EBADMSG;
	}
	*out = json_object_get_int64(f);
	if (*out < min || *out > max) {
		snprintf(err, errsize, "%s: %lld out of range", name, *out);
		return -EBADMSG;
	}
	return 0;
}

static int load_str(struct json_object *obj, const char *name, char *dst, size_t size,
		    bool empty_ok, char *err, size_t errsize)
{
	struct json_object *f;
	const char *v;

	if (!json_object_object_get_ex(obj, name, &f) ||
	    !json_object_is_type(f, json_type_string)) {
		snprintf(err, errsize, "%s: missing or not a string", name);
		return -EBADMSG;
	}
	v = json_object_get_string(f);
	if (!word_ok(v, size - 1, empty_ok)) {
		snprintf(err, errsize, "%s: not a word of at most %zu printable characters", name,
			 size - 1);
		return -EBADMSG;
	}
	snprintf(dst, size, "%s", v);
	return 0;
}

static int sv_load(struct json_object *obj, void *val, char *err, size_t errsize)
{
	struct q3_server *s = val;
	struct json_object *f;
	long long proto, clients, maxclients;
	struct addr a;

	if (!json_object_object_get_ex(obj, "addr", &f) ||
	    !json_object_is_type(f, json_type_string) ||
	    addr_parse(&a, json_object_get_string(f), -1) < 0 || addr_port(&a) == 0) {
		snprintf(err, errsize, "addr: missing or not IP:PORT");
		return -EBADMSG;
	}
	addr_to_key(&a, &s->key);
	if (load_str(obj, "game", s->gamename, sizeof(s->gamename), false, err, errsize) < 0 ||
	    load_str(obj, "gametype", s->gametype, sizeof(s->gametype), true, err, errsize) < 0 ||
	    load_int(obj, "protocol", 0, INT32_MAX, &proto, err, errsize) < 0 ||
	    load_int(obj, "clients", 0, INT32_MAX, &clients, err, errsize) < 0 ||
	    load_int(obj, "maxclients", 1, INT32_MAX, &maxclients, err, errsize) < 0)
		return -EBADMSG;
	if (!json_object_object_get_ex(obj, "anon", &f) ||
	    !json_object_is_type(f, json_type_boolean)) {
		snprintf(err, errsize, "anon: missing or not a boolean");
		return -EBADMSG;
	}
	s->anon = json_object_get_boolean(f);
	load_display(obj, "hostname", s->hostname, sizeof(s->hostname));
	load_display(obj, "map", s->mapname, sizeof(s->mapname));
	s->protocol = (int32_t)proto;
	s->clients = (uint32_t)clients;
	s->maxclients = (uint32_t)maxclients;
	s->state = s->clients == 0 ? SV_EMPTY : s->clients >= s->maxclients ? SV_FULL : SV_OCCUPIED;
	return 0;
}

/* ---- pending challenges ---- */

static void on_pending_timer(struct ev_timer *t, void *arg);

static void pending_arm(struct master_q3 *q)
{
	const struct pending *p = htab_oldest(q->pending);
	long long now = ev_now(q->m->loop);

	if (p == NULL)
		ev_timer_stop(q->m->loop, &q->pending_timer);
	else if (!ev_timer_armed(&q->pending_timer))
		ev_timer_start(q->m->loop, &q->pending_timer,
			       p->deadline_ms > now ? p->deadline_ms - now : 0, on_pending_timer,
			       q);
}

static void pending_remove(struct master_q3 *q, struct pending *p)
{
	const struct addr_key *k = htab_key(q->pending, p);

	if (p->counted)
		ip_dec(q, key_ip(k));
	htab_remove(q->pending, p);
}

static void delist(struct master_q3 *q, struct q3_server *s, const char *reason)
{
	char a[ADDR_STRLEN];

	log_info("q3-delisted server=%s game=%s reason=%s", key_str(&s->key, a, sizeof(a)),
		 s->gamename, reason);
	q->deleting = true;
	master_registry_del(q->m->reg, MASTER_REG_Q3, s);
	q->deleting = false;
}

/*
 * Challenges past their validity go, oldest first (every deadline is its
 * creation + the same validity, so table order is deadline order). An
 * unanswered flatline challenge delists its server.
 */
static void pending_expire(struct master_q3 *q)
{
	long long now = ev_now(q->m->loop);
	struct pending *p;

	while ((p = htab_oldest(q->pending)) != NULL && now >= p->deadline_ms) {
		if (p->flatline && !p->answered) {
			struct q3_server *s = master_registry_get(q->m->reg, MASTER_REG_Q3,
								  htab_key(q->pending, p));

			if (s != NULL) {
				q->delisted_flatline++;
				delist(q, s, "flatline");
			}
		}
		/* The delisting may have handed the slot to this entry. */
		p = htab_oldest(q->pending);
		pending_remove(q, p);
	}
}

static void on_pending_timer(struct ev_timer *t, void *arg)
{
	struct master_q3 *q = arg;

	(void)t;
	pending_expire(q);
	pending_arm(q);
}

static void new_challenge(struct master_q3 *q, struct pending *p)
{
	uint8_t rnd[Q3_CHALLENGE_RND];

	randombytes_buf(rnd, sizeof(rnd));
	p->clen = (uint8_t)q3_challenge_make(rnd, p->challenge);
	p->deadline_ms = ev_now(q->m->loop) + q->m->cfg.q3_challenge_ms;
	p->answered = false;
	sodium_memzero(rnd, sizeof(rnd));
}

/* A new pending entry for key, evicting the oldest when full. */
static struct pending *pending_new(struct master_q3 *q, const struct addr_key *key, bool counted)
{
	struct pending *p;

	if (htab_count(q->pending) == htab_capacity(q->pending)) {
		/* Its answer is late or never coming; a flatline it carried
		 * is forgotten, which leaves the listing alone. */
		pending_remove(q, htab_oldest(q->pending));
		q->pending_evicted++;
	}
	p = htab_insert(q->pending, key, false, NULL);
	if (p == NULL)
		return NULL;
	p->counted = counted;
	if (counted)
		ip_inc(q, key_ip(key));
	new_challenge(q, p);
	return p;
}

static void send_getinfo(struct master_q3 *q, const struct addr *to, const struct pending *p)
{
	uint8_t buf[64];
	int n = q3_encode_getinfo(buf, sizeof(buf), p->challenge, p->clen);

	if (n > 0)
		send_to(q, to, buf, (size_t)n, S_GETINFO);
}

/* ---- heartbeat ---- */

static void on_heartbeat(struct master_q3 *q, const struct addr *from, const uint8_t *buf,
			 size_t len)
{
	struct q3_heartbeat hb;
	struct addr_key key;
	struct q3_server *listed;
	struct pending *p;
	char a[ADDR_STRLEN];
	bool flatline, fresh = false;
	int game;

	if (q3_decode_heartbeat(buf, len, &hb) < 0) {
		drop(q, D_BAD_HEARTBEAT, from, "heartbeat");
		return;
	}
	/* dpmaster: "Rejecting heartbeat ... (heartbeat is unknown)". */
	if (game_by_tag(q, hb.tag, &game, &flatline) < 0) {
		drop(q, D_UNKNOWN_TAG, from, "heartbeat");
		return;
	}
	addr_to_key(from, &key);
	pending_expire(q);
	listed = master_registry_get(q->m->reg, MASTER_REG_Q3, &key);
	p = htab_get(q->pending, &key);
	if (flatline) {
		/* Nothing to delist; and no getinfo to an address that is not
		 * a server we know (no reflection for free). */
		if (listed == NULL) {
			drop(q, D_FLATLINE_UNLISTED, from, "heartbeat");
			return;
		}
		if (p == NULL) {
			p = pending_new(q, &key, false);
			if (p == NULL)
				return;
		} else {
			new_challenge(q, p);
			htab_touch(q->pending, p);
		}
		/* The answer must pass what the listing passed, whatever game
		 * the flatline tag belongs to. */
		p->game = listed->anon ? game_by_name(q, listed->gamename) : -1;
		p->flatline = true;
	} else if (p == NULL) {
		/* dpmaster servers.c: at most 32 per IP, pending ones
		 * included; an address already listed has its slot. */
		if (listed == NULL && ip_count(q, key_ip(&key)) >= MAX_PER_ADDR) {
			drop(q, D_ADDRESS_CAP, from, "heartbeat");
			return;
		}
		p = pending_new(q, &key, listed == NULL);
		if (p == NULL)
			return;
		p->game = game;
		p->flatline = false;
		fresh = true;
	} else if (p->game != game || p->flatline) {
		/* "Force a new challenge if the heartbeat tag has changed". */
		new_challenge(q, p);
		htab_touch(q->pending, p);
		p->game = game;
		p->flatline = false;
		fresh = true;
	}
	/* Otherwise the challenge still valid is sent again: its first
	 * getinfo may be answered yet. */
	send_getinfo(q, from, p);
	pending_arm(q);
	log_debug("heartbeat peer=%s tag=%s game=%s flatline=%d listed=%d challenge=%s%s",
		  addr_str(from, a, sizeof(a)), hb.tag, game >= 0 ? q->games[game].name : "(any)",
		  flatline, listed != NULL, p->challenge, fresh ? " new=1" : "");
}

/* ---- infoResponse ---- */

static const enum drop info_drops[] = {
	[Q3_INFO_OK] = D_N,
	[Q3_INFO_TOO_LONG] = D_INFO_TOO_LONG,
	[Q3_INFO_NO_CHALLENGE] = D_NO_CHALLENGE,
	[Q3_INFO_BAD_PROTOCOL] = D_BAD_PROTOCOL,
	[Q3_INFO_BAD_MAXCLIENTS] = D_BAD_MAXCLIENTS,
	[Q3_INFO_BAD_CLIENTS] = D_BAD_CLIENTS,
	[Q3_INFO_BAD_GAMENAME] = D_BAD_GAMENAME,
	[Q3_INFO_BAD_GAMETYPE] = D_BAD_GAMETYPE,
};

static void on_inforesponse(struct master_q3 *q, const struct addr *from, const uint8_t *buf,
			    size_t len)
{
	static const char msg[] = "infoResponse";
	struct q3_inforesponse ir;
	struct addr_key key;
	struct pending *p;
	struct q3_server *s;
	const char *gamename;
	char a[ADDR_STRLEN];
	bool created, anon;
	int r;

	addr_to_key(from, &key);
	pending_expire(q);
	/* "infoResponse from unknown server", or its challenge is over. */
	p = htab_get(q->pending, &key);
	if (p == NULL) {
		drop(q, D_NO_PENDING, from, msg);
		return;
	}
	r = q3_decode_inforesponse(buf, len, &ir);
	if (r < 0 && (ir.error == Q3_INFO_TOO_LONG || ir.error == Q3_INFO_NO_CHALLENGE)) {
		drop(q, info_drops[ir.error], from, msg);
		return;
	}
	/* The challenge first, as dpmaster checks it: a wrong one says
	 * nothing about the other fields. */
	if (ir.challenge_len != p->clen ||
	    sodium_memcmp(ir.challenge, p->challenge, ir.challenge_len) != 0) {
		drop(q, D_BAD_CHALLENGE, from, msg);
		return;
	}
	if (r < 0) {
		drop(q, info_drops[ir.error], from, msg);
		return;
	}
	/* No game name: the heartbeat's game; a name must be the
	 * heartbeat's game's (messages.c HandleInfoResponse). */
	if (!ir.has_gamename) {
		if (p->game < 0) {
			drop(q, D_NO_GAMENAME, from, msg);
			return;
		}
		gamename = q->games[p->game].name;
	} else {
		if (p->game >= 0 && strcmp(ir.gamename, q->games[p->game].name) != 0) {
			drop(q, D_GAMENAME_MISMATCH, from, msg);
			return;
		}
		gamename = ir.gamename;
	}
	s = master_registry_put(q->m->reg, MASTER_REG_Q3, &key, &created);
	if (s == NULL) {
		drop(q, D_LIST_FULL, from, msg);
		return;
	}
	anon = p->game >= 0;
	if (created) {
		s->key = key;
		/* The challenge's slot becomes the listing's. */
		if (p->counted)
			p->counted = false;
		else
			ip_inc(q, key_ip(&key));
	} else if (s->linked && (s->protocol != ir.protocol || s->anon != anon ||
				 strcmp(s->gamename, gamename) != 0)) {
		unlink_server(q, s);
	}
	snprintf(s->gamename, sizeof(s->gamename), "%s", gamename);
	snprintf(s->gametype, sizeof(s->gametype), "%s", ir.gametype);
	snprintf(s->hostname, sizeof(s->hostname), "%s", ir.hostname);
	snprintf(s->mapname, sizeof(s->mapname), "%s", ir.mapname);
	s->protocol = ir.protocol;
	s->anon = anon;
	s->clients = ir.clients;
	s->maxclients = ir.maxclients;
	s->state = ir.clients == 0 ? SV_EMPTY : ir.clients >= ir.maxclients ? SV_FULL : SV_OCCUPIED;
	if (!s->linked)
		link_server(q, s);
	master_registry_refresh(q->m->reg, MASTER_REG_Q3, s);
	p->answered = true;
	p->flatline = false;
	if (created) {
		q->listed_new++;
		log_info("q3-listed server=%s game=%s protocol=%d", addr_str(from, a, sizeof(a)),
			 s->gamename, (int)s->protocol);
	}
	log_debug("inforesponse peer=%s game=%s protocol=%d gametype=%s clients=%u/%u listed=%s",
		  addr_str(from, a, sizeof(a)), s->gamename, (int)s->protocol, s->gametype,
		  s->clients, s->maxclients, created ? "new" : "refresh");
}

/* ---- getservers / getserversExt ---- */

/*
 * dpmaster clients.c: a count per client IP that decays by one every
 * FP_DECAY_MS; a request that would bring it to FP_THROTTLE is refused
 * and changes nothing. We keep the remainder of a decay period (dpmaster
 * restarts it on every request), and a full table forgets the least
 * recent client instead of refusing newcomers.
 */
static bool throttled(struct master_q3 *q, const struct addr *from)
{
	long long now = ev_now(q->m->loop);
	struct addr_ip ip;
	struct client *c;

	addr_to_ip(from, &ip);
	c = htab_get(q->clients, &ip);
	if (c == NULL) {
		c = htab_insert(q->clients, &ip, true, NULL);
		c->count = 1;
		c->last_ms = now;
		return false;
	}
	if (now > c->last_ms) {
		long long k = (now - c->last_ms) / FP_DECAY_MS;

		if (k >= c->count) {
			c->count = 0;
			c->last_ms = now;
		} else {
			c->count -= (int)k;
			c->last_ms += k * FP_DECAY_MS;
		}
	}
	htab_touch(q->clients, c);
	if (c->count + 1 >= FP_THROTTLE)
		return true;
	c->count++;
	return false;
}

/*
 * The game a request is about, and its options. A named request names
 * it; an anonymous one (Q3, ET) maps its protocol to a game, else takes
 * the game of a server listed through a known heartbeat with that protocol
 * (dpmaster "use the 1st server we found with this protocol").
 */
static const char *resolve_game(const struct master_q3 *q, const struct q3_getservers *gs,
				unsigned *options)
{
	int g;

	*options = 0;
	if (gs->gamename[0] != '\0') {
		g = game_by_name(q, gs->gamename);
		if (g >= 0)
			*options = q->games[g].options;
		return gs->gamename;
	}
	g = game_by_protocol(q, gs->protocol);
	if (g >= 0) {
		*options = q->games[g].options;
		return q->games[g].name;
	}
	for (size_t i = 0; i < q->ngames; i++) {
		const struct q3_group *grp = group_find(q, q->games[i].name, gs->protocol);

		if (grp != NULL && grp->nanon > 0)
			return q->games[i].name;
	}
	return NULL;
}

static bool wanted(const struct master_q3 *q, const struct q3_server *s,
		   const struct q3_getservers *gs, long long now)
{
	bool v4 = key_is_v4(&s->key);

	/* Past its time but not swept yet (the registry sweeps each second). */
	if (now - s->head.seen_ms > q->m->cfg.q3_ttl_ms)
		return false;
	if ((s->state == SV_EMPTY && !(gs->flags & Q3_GS_EMPTY)) ||
	    (s->state == SV_FULL && !(gs->flags & Q3_GS_FULL)))
		return false;
	if ((v4 && !(gs->flags & Q3_GS_IPV4)) || (!v4 && !(gs->flags & Q3_GS_IPV6)))
		return false;
	return !(gs->flags & Q3_GS_GAMETYPE) || strcmp(s->gametype, gs->gametype) == 0;
}

static int answer_push(struct answer *a, const uint8_t *pkt, size_t len)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 8;
		uint8_t *d = realloc(a->data, cap * Q3_MASTER_MAX_OUT);
		uint16_t *l;

		if (d == NULL)
			return -ENOMEM;
		a->data = d;
		l = realloc(a->lens, cap * sizeof(*l));
		if (l == NULL)
			return -ENOMEM;
		a->lens = l;
		a->cap = cap;
	}
	memcpy(a->data + a->n * Q3_MASTER_MAX_OUT, pkt, len);
	a->lens[a->n++] = (uint16_t)len;
	return 0;
}

static void answer_free(struct answer *a)
{
	free(a->data);
	free(a->lens);
	memset(a, 0, sizeof(*a));
}

/*
 * The answer to gs as the registry stands: the servers of the game and
 * protocol asked for, encoded into datagrams (the serializer of before the
 * kept answers). 0 or -ENOMEM.
 */
static int answer_build(struct master_q3 *q, struct q3_getservers gs, bool ext, struct answer *out)
{
	struct q3_srvlist list = {.ext = ext, .v = q->out, .n = 0};
	const struct q3_group *g = NULL;
	long long now = ev_now(q->m->loop);
	size_t taken = 0;
	unsigned options;
	const char *game;

	out->n = 0;
	game = resolve_game(q, &gs, &options);
	/* ET clients get empty and full servers without asking. */
	if (options & Q3_GAME_SEND_EMPTY)
		gs.flags |= Q3_GS_EMPTY;
	if (options & Q3_GAME_SEND_FULL)
		gs.flags |= Q3_GS_FULL;
	if (game != NULL)
		g = group_find(q, game, gs.protocol);
	for (const struct q3_server *s = g != NULL ? g->head : NULL; s != NULL; s = s->gnext) {
		struct q3_srv *o;

		if (!wanted(q, s, &gs, now))
			continue;
		o = &q->out[list.n++];
		o->v6 = !key_is_v4(&s->key);
		memcpy(o->ip, o->v6 ? s->key.b : s->key.b + 12, o->v6 ? 16 : 4);
		o->port = key_port(&s->key);
	}
	/* Always at least one datagram: the EOT mark alone says "none". */
	while (taken <= list.n) {
		ssize_t n = q3_encode_getservers_resp(q->pkt, sizeof(q->pkt), &list, &taken);

		if (n < 0) {
			log_warnx("q3-encode-fail error=%zd", n);
			break;
		}
		if (answer_push(out, q->pkt, (size_t)n) < 0)
			return -ENOMEM;
	}
	out->servers = list.n;
	out->flags = gs.flags;
	snprintf(out->game, sizeof(out->game), "%s", game != NULL ? game : "");
	return 0;
}

static bool same_request(const struct kept *k, const struct q3_getservers *gs, bool ext)
{
	return k->used && k->ext == ext && k->gs.flags == gs->flags &&
	       k->gs.protocol == gs->protocol && strcmp(k->gs.gamename, gs->gamename) == 0 &&
	       (!(gs->flags & Q3_GS_GAMETYPE) || strcmp(k->gs.gametype, gs->gametype) == 0);
}

/* The kept answer to gs, rebuilt if the registry changed; NULL on ENOMEM. */
static const struct answer *kept_answer(struct master_q3 *q, const struct q3_getservers *gs,
					bool ext)
{
	uint64_t gen = master_registry_gen(q->m->reg, MASTER_REG_Q3);
	long long now = ev_now(q->m->loop);
	struct kept *k = NULL, *lru = &q->kept[0];

	for (size_t i = 0; i < KEPT_MAX; i++) {
		if (same_request(&q->kept[i], gs, ext)) {
			k = &q->kept[i];
			break;
		}
		if (!q->kept[i].used || (lru->used && q->kept[i].asked_ms < lru->asked_ms))
			lru = &q->kept[i];
	}
	if (k != NULL && k->gen == gen) {
		k->asked_ms = now;
		q->kept_hits++;
		if (q->m->cfg.verify_lists) {
			if (answer_build(q, *gs, ext, &q->fresh) < 0)
				log_fatalx("q3-verify-fail reason=nomem");
			if (q->fresh.n != k->a.n || q->fresh.servers != k->a.servers ||
			    memcmp(q->fresh.lens, k->a.lens, k->a.n * sizeof(*k->a.lens)) != 0)
				log_fatalx("q3-verify-mismatch packets=%zu/%zu servers=%zu/%zu",
					   k->a.n, q->fresh.n, k->a.servers, q->fresh.servers);
			for (size_t i = 0; i < k->a.n; i++) {
				if (memcmp(q->fresh.data + i * Q3_MASTER_MAX_OUT,
					   k->a.data + i * Q3_MASTER_MAX_OUT, k->a.lens[i]) != 0)
					log_fatalx("q3-verify-mismatch packet=%zu", i);
			}
		}
		return &k->a;
	}
	if (k == NULL) {
		k = lru;
		k->used = false;
	}
	if (answer_build(q, *gs, ext, &k->a) < 0) {
		answer_free(&k->a);
		k->used = false;
		return NULL;
	}
	k->used = true;
	k->ext = ext;
	k->gs = *gs;
	k->gen = gen;
	k->asked_ms = now;
	q->kept_builds++;
	return &k->a;
}

/* All datagrams of a in one sendmmsg (more only past SEND_BATCH or after
 * a failed one, which is counted and skipped as sendto's were). */
static void send_answer(struct master_q3 *q, const struct addr *to, const struct answer *a,
			enum sent_type t)
{
	size_t i = 0;

	while (i < a->n) {
		size_t n = a->n - i < SEND_BATCH ? a->n - i : SEND_BATCH;
		unsigned long sup;
		int r;

		for (size_t j = 0; j < n; j++) {
			q->siov[j].iov_base = a->data + (i + j) * Q3_MASTER_MAX_OUT;
			q->siov[j].iov_len = a->lens[i + j];
			memset(&q->smsgs[j].msg_hdr, 0, sizeof(q->smsgs[j].msg_hdr));
			q->smsgs[j].msg_hdr.msg_name = (void *)(uintptr_t)&to->ss; /* NOLINT */
			q->smsgs[j].msg_hdr.msg_namelen = to->len;
			q->smsgs[j].msg_hdr.msg_iov = &q->siov[j];
			q->smsgs[j].msg_hdr.msg_iovlen = 1;
		}
		r = sendmmsg(q->fd, q->smsgs, (unsigned)n, MSG_DONTWAIT);
		if (r > 0) {
			q->sent[t] += (uint64_t)r;
			i += (size_t)r;
			continue;
		}
		q->send_errors++;
		/* A full socket buffer (EAGAIN) is counted, not logged. */
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS &&
		    log_ratelimit_ok(&q->warn_send, ev_now(q->m->loop), 10000, &sup))
			log_warn("q3-send-fail msg=%s suppressed=%lu", sent_names[t], sup);
		i++;
	}
}

static void on_getservers(struct master_q3 *q, const struct addr *from, const uint8_t *buf,
			  size_t len, bool ext)
{
	const char *msg = ext ? "getserversExt" : "getservers";
	struct q3_getservers gs;
	const struct answer *ans;
	char a[ADDR_STRLEN];

	/* Limits before parsing. */
	if (throttled(q, from)) {
		drop(q, D_THROTTLED, from, msg);
		return;
	}
	if (q3_decode_getservers(buf, len, &gs) < 0) {
		drop(q, D_BAD_GETSERVERS, from, msg);
		return;
	}
	/* What is past its time goes now (a change of the generation), so a
	 * kept answer never lists it. */
	master_registry_expire(q->m->reg);
	ans = kept_answer(q, &gs, ext);
	if (ans == NULL) {
		log_warnx("q3-answer-fail error=nomem");
		return;
	}
	send_answer(q, from, ans, ext ? S_EXTRESPONSE : S_RESPONSE);
	log_debug("%s peer=%s game=%s protocol=%d empty=%d full=%d gametype=%s servers=%zu "
		  "packets=%zu",
		  ext ? "getserversext" : "getservers", addr_str(from, a, sizeof(a)),
		  ans->game[0] != '\0' ? ans->game : "(unknown)", (int)gs.protocol,
		  (ans->flags & Q3_GS_EMPTY) != 0, (ans->flags & Q3_GS_FULL) != 0,
		  (gs.flags & Q3_GS_GAMETYPE) ? gs.gametype : "(any)", ans->servers, ans->n);
}

/* ---- the socket ---- */

static void handle(struct master_q3 *q, const struct addr *from, const uint8_t *buf, size_t len)
{
	switch (q3_master_classify(buf, len)) {
	case Q3_MSG_HEARTBEAT:
		q->packets[T_HEARTBEAT]++;
		on_heartbeat(q, from, buf, len);
		break;
	case Q3_MSG_INFORESPONSE:
		q->packets[T_INFORESPONSE]++;
		on_inforesponse(q, from, buf, len);
		break;
	case Q3_MSG_GETSERVERS:
		q->packets[T_GETSERVERS]++;
		on_getservers(q, from, buf, len, false);
		break;
	case Q3_MSG_GETSERVERSEXT:
		q->packets[T_GETSERVERSEXT]++;
		on_getservers(q, from, buf, len, true);
		break;
	case Q3_MSG_NOT_OOB:
		q->packets[T_OTHER]++;
		drop(q, D_NOT_OOB, from, "-");
		break;
	case Q3_MSG_UNKNOWN:
		q->packets[T_OTHER]++;
		drop(q, D_UNKNOWN_COMMAND, from, "-");
		break;
	}
}

static void on_readable(struct ev_io *io, uint32_t events, void *arg)
{
	struct master_q3 *q = arg;
	int n;

	(void)events;
	/* Listings past their time go before anyone counts or lists them
	 * (the registry's own sweep runs once a second). */
	master_registry_expire(q->m->reg);
	for (unsigned i = 0; i < BATCH; i++) {
		q->msgs[i].msg_hdr.msg_namelen = sizeof(q->from[i].ss);
		q->msgs[i].msg_hdr.msg_flags = 0;
	}
	/* At most one batch per wakeup. */
	n = recvmmsg(ev_io_fd(io), q->msgs, BATCH, MSG_DONTWAIT, NULL);
	for (int i = 0; i < n; i++) {
		struct mmsghdr *mm = &q->msgs[i];

		q->from[i].len = mm->msg_hdr.msg_namelen;
		/* dpmaster MIN/MAX_PACKET_SIZE_IN; it truncated silently. */
		if ((mm->msg_hdr.msg_flags & MSG_TRUNC) || mm->msg_len > Q3_MASTER_MAX_IN) {
			q->packets[T_OTHER]++;
			drop(q, D_TOO_LONG, &q->from[i], "-");
			continue;
		}
		if (mm->msg_len < Q3_MASTER_MIN_IN) {
			q->packets[T_OTHER]++;
			drop(q, D_TOO_SHORT, &q->from[i], "-");
			continue;
		}
		handle(q, &q->from[i], q->bufs[i], mm->msg_len);
	}
}

/* ---- the module ---- */

/*
 * Heartbeats come in bursts (every server of a provider at a map change,
 * all of them after a master restart): 1 MiB of receive buffer, past
 * net.core.rmem_max when we have CAP_NET_ADMIN. Best effort.
 */
static void grow_rcvbuf(int fd)
{
	int size = 1 << 20;

	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
}

int master_q3_new(struct master *m)
{
	struct master_reg_kind_ops ops = {
		.name = "q3",
		.val_size = sizeof(struct q3_server),
		.key_len = sizeof(struct addr_key),
		.capacity = MAX_SERVERS,
		.ttl_ms = m->cfg.q3_ttl_ms,
		.key_of = sv_key_of,
		.save = sv_save,
		.load = sv_load,
		.on_drop = on_drop,
		.on_restore = on_restore,
	};
	struct master_q3 *q = calloc(1, sizeof(*q));
	char a[ADDR_STRLEN];
	int r;

	m->q3 = NULL;
	if (q == NULL)
		return -ENOMEM;
	q->m = m;
	q->fd = -1;
	ev_timer_init(&q->pending_timer);
	r = load_games(q);
	if (r < 0)
		goto fail;
	q->pending = htab_new(MAX_PENDING, sizeof(struct addr_key), sizeof(struct pending));
	q->ips =
		htab_new(MAX_SERVERS + MAX_PENDING, sizeof(struct addr_ip), sizeof(struct ipcount));
	q->groups = htab_new(MAX_SERVERS, GROUP_KEY, sizeof(struct q3_group));
	q->clients = htab_new(MAX_CLIENTS, sizeof(struct addr_ip), sizeof(struct client));
	if (q->pending == NULL || q->ips == NULL || q->groups == NULL || q->clients == NULL) {
		r = -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i < BATCH; i++) {
		q->iov[i].iov_base = q->bufs[i];
		q->iov[i].iov_len = sizeof(q->bufs[i]);
		q->msgs[i].msg_hdr.msg_iov = &q->iov[i];
		q->msgs[i].msg_hdr.msg_iovlen = 1;
		q->msgs[i].msg_hdr.msg_name = &q->from[i].ss;
	}
	q->bound = m->cfg.udp;
	q->fd = addr_udp_bind(&q->bound);
	if (q->fd < 0) {
		r = q->fd;
		errno = -r;
		log_warn("q3-bind-fail udp=%s", addr_str(&m->cfg.udp, a, sizeof(a)));
		goto fail;
	}
	grow_rcvbuf(q->fd);
	ops.arg = q;
	r = master_registry_add_kind(m->reg, MASTER_REG_Q3, &ops);
	if (r < 0)
		goto fail;
	q->io = ev_io_add(m->loop, q->fd, EPOLLIN, on_readable, q);
	if (q->io == NULL) {
		r = -errno;
		goto fail;
	}
	m->q3 = q;
	log_info("q3-master udp=%s games=%zu", addr_str(&q->bound, a, sizeof(a)), q->ngames);
	return 0;
fail:
	master_q3_free(q);
	return r;
}

void master_q3_free(struct master_q3 *q)
{
	if (q == NULL)
		return;
	ev_timer_stop(q->m->loop, &q->pending_timer);
	if (q->io != NULL)
		ev_io_del(q->io, true);
	else if (q->fd >= 0)
		close(q->fd);
	htab_free(q->pending);
	htab_free(q->ips);
	htab_free(q->groups);
	htab_free(q->clients);
	for (size_t i = 0; i < KEPT_MAX; i++)
		answer_free(&q->kept[i].a);
	answer_free(&q->fresh);
	if (q->m->q3 == q)
		q->m->q3 = NULL;
	free(q);
}

const struct addr *master_q3_addr(const struct master_q3 *q)
{
	return &q->bound;
}

/* ---- GET /q3/servers: the listed servers for the page ---- */

void master_q3_http_servers(struct master *m, struct httpd_req *req)
{
	struct json_object *top = json_object_new_object(), *arr = json_object_new_array();
	const struct q3_server *s = NULL;
	struct timespec ts;
	long long now_ms;
	char a[ADDR_STRLEN];

	if (top == NULL || arr == NULL) {
		json_object_put(top);
		json_object_put(arr);
		httpd_reply_error(req, 500, "out of memory");
		master_http_count(m, "q3_servers", 500);
		return;
	}
	master_registry_expire(m->reg);
	clock_gettime(CLOCK_REALTIME, &ts);
	now_ms = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	/* Bounded by the registry: at most MAX_SERVERS rows of ~300 bytes. */
	while ((s = master_registry_next(m->reg, MASTER_REG_Q3, s)) != NULL) {
		struct json_object *o = json_object_new_object();
		long long age = now_ms - s->head.seen_wall_ms;

		if (o == NULL)
			break;
		json_object_object_add(o, "address",
				       json_object_new_string(key_str(&s->key, a, sizeof(a))));
		json_object_object_add(o, "game", json_object_new_string(s->gamename));
		json_object_object_add(o, "protocol", json_object_new_int64(s->protocol));
		json_object_object_add(o, "hostname", json_object_new_string(s->hostname));
		json_object_object_add(o, "map", json_object_new_string(s->mapname));
		json_object_object_add(o, "clients", json_object_new_int64(s->clients));
		json_object_object_add(o, "maxclients", json_object_new_int64(s->maxclients));
		json_object_object_add(o, "gametype", json_object_new_string(s->gametype));
		json_object_object_add(o, "age", json_object_new_int64(age > 0 ? age / 1000 : 0));
		json_object_array_add(arr, o);
	}
	json_object_object_add(top, "servers", arr);
	json_object_object_add(top, "now", json_object_new_int64((long long)ts.tv_sec));
	json_object_object_add(top, "ttl", json_object_new_int64(m->cfg.q3_ttl_ms / 1000));
	httpd_reply_json(req, 200, top);
	json_object_put(top);
	master_http_count(m, "q3_servers", 200);
}

void master_q3_metrics(const struct master_q3 *q, struct strbuf *out)
{
	strbuf_printf(out, "# HELP rally_master_q3_packets_total Q3 master datagrams received, "
			   "by type.\n# TYPE rally_master_q3_packets_total counter\n");
	for (int t = 0; t < T_N; t++)
		strbuf_printf(out, "rally_master_q3_packets_total{type=\"%s\"} %llu\n",
			      type_names[t], (unsigned long long)q->packets[t]);
	strbuf_printf(out, "# HELP rally_master_q3_sent_total Q3 master datagrams sent, by type.\n"
			   "# TYPE rally_master_q3_sent_total counter\n");
	for (int t = 0; t < S_N; t++)
		strbuf_printf(out, "rally_master_q3_sent_total{type=\"%s\"} %llu\n", sent_names[t],
			      (unsigned long long)q->sent[t]);
	strbuf_printf(out, "# HELP rally_master_q3_drops_total Q3 master datagrams dropped, by "
			   "reason.\n# TYPE rally_master_q3_drops_total counter\n");
	for (int d = 0; d < D_N; d++)
		strbuf_printf(out, "rally_master_q3_drops_total{reason=\"%s\"} %llu\n",
			      drop_names[d], (unsigned long long)q->drops[d]);
	strbuf_printf(out,
		      "# HELP rally_master_q3_servers Q3 servers listed.\n"
		      "# TYPE rally_master_q3_servers gauge\n"
		      "rally_master_q3_servers %zu\n"
		      "# HELP rally_master_q3_challenges_pending getinfo challenges awaiting an "
		      "infoResponse.\n"
		      "# TYPE rally_master_q3_challenges_pending gauge\n"
		      "rally_master_q3_challenges_pending %zu\n"
		      "# HELP rally_master_q3_listed_total Q3 servers newly listed.\n"
		      "# TYPE rally_master_q3_listed_total counter\n"
		      "rally_master_q3_listed_total %llu\n"
		      "# HELP rally_master_q3_delisted_total Q3 servers delisted, by reason.\n"
		      "# TYPE rally_master_q3_delisted_total counter\n"
		      "rally_master_q3_delisted_total{reason=\"expired\"} %llu\n"
		      "rally_master_q3_delisted_total{reason=\"flatline\"} %llu\n"
		      "# HELP rally_master_q3_challenges_evicted_total Pending challenges dropped "
		      "for newer ones (table full).\n"
		      "# TYPE rally_master_q3_challenges_evicted_total counter\n"
		      "rally_master_q3_challenges_evicted_total %llu\n"
		      "# HELP rally_master_q3_answers_kept_total getservers answers sent from a "
		      "kept answer (hit) or built (build).\n"
		      "# TYPE rally_master_q3_answers_kept_total counter\n"
		      "rally_master_q3_answers_kept_total{result=\"hit\"} %llu\n"
		      "rally_master_q3_answers_kept_total{result=\"build\"} %llu\n"
		      "# HELP rally_master_q3_send_errors_total Q3 master sends that failed.\n"
		      "# TYPE rally_master_q3_send_errors_total counter\n"
		      "rally_master_q3_send_errors_total %llu\n",
		      master_registry_count(q->m->reg, MASTER_REG_Q3), htab_count(q->pending),
		      (unsigned long long)q->listed_new, (unsigned long long)q->delisted_expired,
		      (unsigned long long)q->delisted_flatline,
		      (unsigned long long)q->pending_evicted, (unsigned long long)q->kept_hits,
		      (unsigned long long)q->kept_builds, (unsigned long long)q->send_errors);
}
