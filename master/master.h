/*
 * rally-master: the shared context of the master's modules.
 *
 * One registry (master_registry.c) behind three front doors:
 *   - the netpunch HTTP API (master_netpunch.c: /announce /leave /list
 *     /health; master_knock.c: /knock and the UDP relay ports of
 *     master_relayport.c),
 *   - the Quake 3 / ET UDP master protocol (master_q3.c),
 *   - the Fugitive3D repository API (master_fugitive.c).
 * master_http.c owns the HTTP listener and routes requests to the doors;
 * main.c parses the command line and wires it all.
 */
#ifndef MASTER_H
#define MASTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"
#include "ev.h"

struct httpd_req;
struct strbuf;
struct json_object;

#define MASTER_MAX_TRUSTED (16)
#define MASTER_MAX_HTTP    (4)

struct master_cfg {
	/* --http, repeatable (e.g. 0.0.0.0:8471 and [::]:8471); default
	 * 127.0.0.1:8471 */
	struct addr http[MASTER_MAX_HTTP];
	size_t nhttp;
	struct addr udp;   /* --udp, default 0.0.0.0:27950 */
	bool relay_on;     /* --relay-ip given */
	char relay_ip[64]; /* what joiners and hosts are told to send to */
	uint16_t relay_lo, relay_hi;
	struct addr relay_bind; /* --relay-bind, port unused */
	char state_dir[4096];
	long long stale_ms; /* --stale: Fugitive entries */
	struct addr_ip trusted[MASTER_MAX_TRUSTED];
	size_t ntrusted;

	/* Timeouts tests shorten; the references' values by default. */
	long long lobby_ttl_ms;    /* 30 s */
	long long knock_ttl_ms;    /* 60 s */
	long long relay_idle_ms;   /* 90 s */
	long long relay_life_ms;   /* 12 h */
	long long q3_ttl_ms;       /* 15 min */
	long long q3_challenge_ms; /* 2 s */
	long long ping_timeout_ms; /* 5 s */
	long long snapshot_ms;     /* 10 s */

	/* --verify-lists (tests): every kept listing is checked against a
	 * fresh build on every request; a difference is fatal. */
	bool verify_lists;

	/* --q3-game specs, parsed by master_q3.c (see its header comment). */
	const char *q3_games[16];
	size_t nq3_games;
};

/* ---- master_registry.c: the one bounded registry ---- */

enum master_reg_kind {
	MASTER_REG_LOBBY,    /* a netpunch lobby (POST /announce) */
	MASTER_REG_Q3,       /* a Quake 3 engine server (heartbeat + infoResponse) */
	MASTER_REG_FUGITIVE, /* a Fugitive3D server (POST/PUT /servers/{ip:port}) */
	MASTER_REG_NKINDS
};

/* Every entry value starts with this. */
struct master_reg_head {
	long long seen_ms;      /* monotonic, last refresh */
	long long seen_wall_ms; /* wall clock, last refresh (snapshots, ages) */
	/* --redis: merged from another master (never in our snapshot, never
	 * written back by us); its seen times are its origin's. */
	bool remote;
	bool queued;    /* ours, waiting to be written to Redis */
	uint32_t epoch; /* remote: the sync that last confirmed it */
};

#define MASTER_REG_KEY_MAX (32)

/*
 * How the registry stores one kind. The module that owns a kind defines its
 * value struct (starting with struct master_reg_head) and how it goes to
 * and comes from the snapshot.
 */
struct master_reg_kind_ops {
	const char *name; /* the snapshot's array name: "lobbies", "q3", "fugitive" */
	size_t val_size;  /* sizeof the kind's struct */
	size_t key_len;   /* <= MASTER_REG_KEY_MAX */
	size_t capacity;  /* entries at most */
	long long ttl_ms; /* an entry not refreshed for this long is dropped */
	/* Fills key from a value (restoring a snapshot). */
	void (*key_of)(const void *val, uint8_t key[MASTER_REG_KEY_MAX]);
	/* Adds the kind's fields to a snapshot object (the head is saved by
	 * the registry). */
	void (*save)(const void *val, struct json_object *obj);
	/* Validates a snapshot object and fills val (zeroed, head excluded);
	 * 0, or -EBADMSG with err set. */
	int (*load)(struct json_object *obj, void *val, char *err, size_t errsize);
	/* Called before an entry goes (expiry, deletion, replacement by a
	 * restore), so the owner can release what it counts. May be NULL. */
	void (*on_drop)(void *arg, void *val);
	/* Called for each entry a snapshot restored, once it is in its table,
	 * so the owner can index and count it. May be NULL. */
	void (*on_restore)(void *arg, void *val);
	void *arg;
};

struct master_registry;

struct master_registry *master_registry_new(struct ev_loop *loop);
void master_registry_free(struct master_registry *reg);
/* Declares a kind; all kinds before master_registry_load(). 0 or -errno. */
int master_registry_add_kind(struct master_registry *reg, enum master_reg_kind kind,
			     const struct master_reg_kind_ops *ops);

/* The value under key, or NULL. */
void *master_registry_get(struct master_registry *reg, enum master_reg_kind kind, const void *key);
/*
 * The value under key, inserted (zeroed, fresh) when absent; *created says
 * which. NULL with errno ENOSPC when the kind is at capacity (after expiry).
 */
void *master_registry_put(struct master_registry *reg, enum master_reg_kind kind, const void *key,
			  bool *created);
/* Marks an entry refreshed now (it expires ttl_ms from now; newest first). */
void master_registry_refresh(struct master_registry *reg, enum master_reg_kind kind, void *val);
void master_registry_del(struct master_registry *reg, enum master_reg_kind kind, void *val);
/*
 * The kind's generation: it grows with every put that inserts, refresh,
 * delete, expiry and restore. A module that changes a listed value in any
 * other way calls master_registry_changed() (kept lists depend on it).
 */
uint64_t master_registry_gen(const struct master_registry *reg, enum master_reg_kind kind);
void master_registry_changed(struct master_registry *reg, enum master_reg_kind kind);
/* Drops what has expired; also runs every second on its own. */
void master_registry_expire(struct master_registry *reg);

/* Newest first: start with prev = NULL. */
void *master_registry_next(struct master_registry *reg, enum master_reg_kind kind,
			   const void *prev);
size_t master_registry_count(const struct master_registry *reg, enum master_reg_kind kind);
size_t master_registry_capacity(const struct master_registry *reg, enum master_reg_kind kind);

/*
 * Snapshots: <state-dir>/registry.json written atomically every
 * cfg.snapshot_ms and at shutdown; loaded at start. A corrupt snapshot is
 * moved aside (.corrupt-<time>), logged with the reason, and nothing of it
 * is loaded. Returns 0 or -errno (the file is then unchanged).
 */
int master_registry_save(struct master_registry *reg, const char *path);
int master_registry_load(struct master_registry *reg, const char *path);
/* Starts the periodic snapshot to path. */
void master_registry_autosave(struct master_registry *reg, const char *path, long long every_ms);

/* Prometheus lines for the registry. */
void master_registry_metrics(const struct master_registry *reg, struct strbuf *out);

/*
 * The shared registry (master_redis.c). With sync set, an entry of ours
 * that was inserted or refreshed is queued and handed to publish once, at
 * the end of the loop turn (its fields are final by then); one we delete
 * (master_registry_del, not expiry: Redis expires keys itself) goes to
 * deleted at once, with the wall time of the deletion.
 */
struct master_reg_sync {
	void (*publish)(void *arg, enum master_reg_kind kind, const uint8_t *key, const void *val);
	void (*deleted)(void *arg, enum master_reg_kind kind, const uint8_t *key,
			long long wall_ms);
	void *arg;
};
void master_registry_set_sync(struct master_registry *reg, const struct master_reg_sync *sync);
/* The kind's declaration (NULL when not declared). */
const struct master_reg_kind_ops *master_registry_ops(const struct master_registry *reg,
						      enum master_reg_kind kind);
/* The kind called name ("lobbies", "q3", "fugitive"), or -ENOENT. */
int master_registry_kind_by_name(const struct master_registry *reg, const char *name);
/*
 * Merges val (a whole value as the kind's load fills it, its head's
 * seen_wall_ms the origin's) as a remote entry confirmed by sync epoch.
 * It replaces a remote copy, or our own entry when newer than it; it takes
 * the place in the table its age gives it. Returns 1 merged, 0 when ours is
 * newer (kept), -ESTALE when already past the TTL, -ENOSPC when the kind is
 * full.
 */
int master_registry_merge(struct master_registry *reg, enum master_reg_kind kind, const void *val,
			  uint32_t epoch);
/* Another master deleted key at wall_ms: drops our copy, remote or ours,
 * unless ours was refreshed after. Returns 1 when something went. */
int master_registry_unmerge(struct master_registry *reg, enum master_reg_kind kind,
			    const uint8_t *key, long long wall_ms);
/* The key is gone from Redis: drops our copy if it is a remote one. */
int master_registry_unmerge_remote(struct master_registry *reg, enum master_reg_kind kind,
				   const uint8_t *key);
/* Drops remote entries a full sync did not confirm (epoch older); the
 * number dropped. */
size_t master_registry_drop_unconfirmed(struct master_registry *reg, uint32_t epoch);
/* Queues every entry of ours for publish (a reconnection). */
void master_registry_publish_all(struct master_registry *reg);
/* Remote entries held of a kind. */
size_t master_registry_remote_count(const struct master_registry *reg, enum master_reg_kind kind);
/* True while merge or unmerge drops an entry (on_drop callers that log
 * expiries tell them apart). */
bool master_registry_merging(const struct master_registry *reg);

/* ---- the daemon ---- */

struct master_http;
struct master_knock;
struct master_relayport;
struct master_q3;
struct master_fugitive;
struct master_list;
struct master_redis;

struct master {
	struct master_cfg cfg;
	struct ev_loop *loop;
	struct master_registry *reg;
	struct master_http *http;
	struct master_knock *knock;
	struct master_relayport *relay;
	struct master_q3 *q3;
	struct master_fugitive *fug;
	struct master_list *lobby_list; /* GET /list, kept */
	struct master_list *fug_list;   /* GET /servers, kept */
	struct master_redis *redis;     /* --redis, else NULL */
	bool stopping;
};

/* ---- master_http.c: the listener and the routing ---- */

/* One listener per --http, all on the same routes and counters; 0 or the
 * -errno of the first that failed (nothing is left listening then). */
int master_http_new(struct master *m);
void master_http_free(struct master_http *h);
/* The bound address of listener i (port 0 resolved), NULL past the last;
 * listener 0 is the first --http. */
const struct addr *master_http_addr(const struct master_http *h, size_t i);
/*
 * The client's IP for a request: the TCP peer, unless the peer is a
 * trusted proxy, in which case header (if given and present) names it:
 * for "X-Forwarded-For" the rightmost address that is not a trusted proxy,
 * for "X-Real-IP" its value. Returns false (and the peer) when a trusted
 * proxy sent a header that is not an address.
 */
bool master_http_client_ip(const struct master *m, struct httpd_req *req, const char *header,
			   struct addr *out);
bool master_http_is_trusted(const struct master *m, const struct addr *a);
/* Counts a request for /metrics (door, status). */
void master_http_count(struct master *m, const char *endpoint, unsigned status);

/* ---- master_netpunch.c: /announce /leave /list /health ---- */

int master_netpunch_init(struct master *m);
/* Handles a netpunch request (path already matched by suffix rules). */
void master_netpunch_handle(struct master *m, struct httpd_req *req);
/* The netpunch reference's response: JSON text with its headers. */
void master_netpunch_reply(struct httpd_req *req, unsigned status, const char *json, size_t len);
/* {"error": msg} with that status, counted under endpoint in the metrics. */
void master_netpunch_error(struct master *m, struct httpd_req *req, const char *endpoint,
			   unsigned status, const char *msg);

/* The body of GET /list as of wall_ms (wall clock): 0, or -EMSGSIZE past
 * out's cap. master_list keeps it. */
int master_netpunch_list_build(struct master *m, long long wall_ms, struct strbuf *out);

/* ---- master_list.c: kept listings ---- */

/*
 * A listing's body, kept between requests and rebuilt only when its
 * registry kind changed (master_registry_gen) or, for a per_second
 * listing, when the wall-clock second changed (it is then built as of the
 * start of that second). Served as one shared response, gzip-compressed
 * once for clients that accept it.
 */
struct master_list_def {
	const char *name; /* "list", "servers": logs and metrics */
	enum master_reg_kind kind;
	bool per_second; /* the body has ages or other times in it */
	const char *content_type;
	size_t max; /* bytes at most (the builder's strbuf cap) */
	/* The old per-request serializer: the body as of wall_ms into out;
	 * 0, or < 0 when it cannot (out->bad counts as failure too). */
	int (*build)(struct master *m, long long wall_ms, struct strbuf *out);
};

struct master_list;
/* NULL (errno set) on failure; def is copied, its strings must stay. */
struct master_list *master_list_new(struct master *m, const struct master_list_def *def);
void master_list_free(struct master_list *l);
/*
 * Answers req with status 200 and the kept body, identity or gzip as its
 * Accept-Encoding prefers (with Vary: Accept-Encoding). Returns 0, or
 * -errno when no body could be built: nothing is queued then and the caller
 * answers the request.
 */
int master_list_reply(struct master_list *l, struct httpd_req *req);
/* Prometheus lines: builds, hits and compressions. */
void master_list_metrics(const struct master_list *l, struct strbuf *out);

/* ---- master_knock.c: POST /knock, GET /knock ---- */

int master_knock_new(struct master *m);
void master_knock_free(struct master_knock *k);
void master_knock_post(struct master *m, struct httpd_req *req, struct json_object *body);
void master_knock_get(struct master *m, struct httpd_req *req);
void master_knock_metrics(const struct master_knock *k, struct strbuf *out);
/*
 * --redis: a note another master stored under tag (24 hex), validated by
 * the codec. Returns 1 merged, 0 already held or past its TTL, -ENOSPC
 * when the tag is new and the table full.
 */
struct master_redis_note;
int master_knock_merge(struct master *m, const char *tag, const struct master_redis_note *note);
/* --redis: every live note of ours, written again. */
void master_knock_republish(struct master *m);

/* ---- master_relayport.c: the UDP relay ports ---- */

struct master_relayport_info {
	uint16_t port;
	char id_hex[33];
	/* --redis: the --relay-ip of the master that allocated it; "" for
	 * one of ours. */
	char ip[64];
};

int master_relayport_new(struct master *m);
void master_relayport_free(struct master_relayport *r);
/*
 * The allocation for (tag, nonce): the existing one (its idle timer
 * refreshed) or a new port. 0, or -ENOSPC when every port is taken.
 */
int master_relayport_alloc(struct master_relayport *r, const char *tag, const char *nonce,
			   struct master_relayport_info *out);
void master_relayport_metrics(const struct master_relayport *r, struct strbuf *out);
/* The 32-byte key of (tag, nonce): BLAKE2b-256 of "tag|nonce". */
void master_relay_key(const char *tag, const char *nonce, uint8_t key[32]);
/* --redis: every open allocation of ours, written again. */
void master_relayport_republish(struct master_relayport *r);

/* ---- master_q3.c: the Quake 3 / ET UDP master ---- */

int master_q3_new(struct master *m);
void master_q3_free(struct master_q3 *q);
const struct addr *master_q3_addr(const struct master_q3 *q);
void master_q3_metrics(const struct master_q3 *q, struct strbuf *out);
/* GET /q3/servers: {"servers":[{address, game, protocol, hostname, map,
 * clients, maxclients, gametype, age}], "now", "ttl"}, newest first. */
void master_q3_http_servers(struct master *m, struct httpd_req *req);

/* ---- master_page.c: the server-browser page ---- */

/*
 * GET / (to a client that asks for text/html), /index.html, /page.js,
 * /page.css: the page and its assets, built into the binary, under a strict
 * Content-Security-Policy. Returns true when it answered the request.
 */
bool master_page_handle(struct master *m, struct httpd_req *req);

/* ---- master_fugitive.c: the Fugitive3D repository ---- */

int master_fugitive_new(struct master *m);
/* Answers every pending ping-back (503) so the HTTP side can stop. */
void master_fugitive_shutdown(struct master_fugitive *f);
void master_fugitive_free(struct master_fugitive *f);
/* Handles /servers, /servers/{ip:port}, /reflection/ip. */
void master_fugitive_handle(struct master *m, struct httpd_req *req);
void master_fugitive_metrics(const struct master_fugitive *f, struct strbuf *out);

#endif
