/*
 * rally-relay: the shared context of the relay's modules.
 *
 * main.c builds a struct relay from the command line and wires the modules:
 * relay_proxy.c (public socket, sessions, filter, limiter, ban check),
 * relay_heartbeat.c (server probe and master heartbeats), relay_bans.c (ban
 * table and its state file), relay_control.c (the HTTP control API),
 * relay_tunnel.c (the coa-compatible tunnel's public side, with
 * relay_tunmsg.c its messages and relay_keys.c the realms' keys),
 * relay_agent.c (its home side, `rally-relay agent`), relay_listing.c (is
 * the server in each master's list?).
 */
#ifndef RELAY_H
#define RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"
#include "ev.h"

#define RELAY_MAX_MASTERS (16)
#define RELAY_HOST_MAX    (256)
#define RELAY_TAG_MAX     (64)

/* The seed's constants (etrelay ENGINE v2, "Constants"). */
#define RELAY_SESSION_TIMEOUT_MS   (2LL * 60 * 1000)
#define RELAY_SESSION_QUEUE        (64)
#define RELAY_MAX_SESSIONS         (2048)
#define RELAY_MAX_PACKET           (65535)
#define RELAY_QUERY_BURST          (5)
#define RELAY_QUERY_RATE           (1)
#define RELAY_MAX_QUERY_SOURCES    (65536)
#define RELAY_QUERY_FORGET_MS      (60LL * 1000)
#define RELAY_PROBE_ATTEMPTS       (3)
#define RELAY_PROBE_TIMEOUT_MS     (3000)
#define RELAY_HEARTBEAT_INTERVAL_S (300)
#define RELAY_MIN_TOKEN            (32)
#define RELAY_MAX_BANS             (16384)
/* Bytes held by all session queues together: keeps the worst case bounded
 * (64 packets x 64 KiB x 2048 sessions would be 8 GiB). */
#define RELAY_QUEUE_BYTES_MAX ((size_t)32 * 1024 * 1024)
/* Unconfirmed sessions (see relay_proxy.c) idle this long are closed; when
 * the table is full, the oldest one idle for the grace period makes room. */
#define RELAY_UNCONFIRMED_TIMEOUT_MS (10LL * 1000) /* --unconfirmed-timeout */
#define RELAY_UNCONFIRMED_GRACE_MS   (1000LL)
/* Queries forwarded per second from all sources together (--query-budget). */
#define RELAY_QUERY_BUDGET     (100)
#define RELAY_CONTROL_RETRY_MS (10LL * 1000)
/* The listing check (relay_listing.c): how often, how soon after the first
 * heartbeat, how long one attempt waits for the whole answer. */
#define RELAY_LISTING_INTERVAL_S (300)   /* --listing-interval */
#define RELAY_LISTING_DELAY_MS   (10000) /* --listing-delay */
#define RELAY_LISTING_TIMEOUT_MS (3000)  /* --listing-timeout */

struct relay_master {
	char host[RELAY_HOST_MAX];
	uint16_t port;
};

struct relay_cfg {
	struct addr listen;
	char server_host[RELAY_HOST_MAX];
	uint16_t server_port;
	struct relay_master masters[RELAY_MAX_MASTERS];
	size_t nmasters;
	char heartbeat_tag[RELAY_TAG_MAX];
	char flatline_tag[RELAY_TAG_MAX];
	long long heartbeat_interval_ms;
	/* The listing check (relay_listing.c); interval 0 = off. */
	long long listing_interval_ms, listing_delay_ms, listing_timeout_ms;
	bool public_on;
	struct addr public_addr; /* --public-address; port 0: the front port */
	bool control_on;
	struct addr control;
	char token_file[4096];
	char state_dir[4096];
	/* Test knobs; the seed's values by default. */
	long long session_timeout_ms;
	long long probe_timeout_ms;
	unsigned max_sessions;
	unsigned query_budget; /* per second, all sources; 0 = off */
	long long unconfirmed_timeout_ms;
	bool server_on; /* --server: the game port is proxied */
	/* --server tunnel:REALM: the game server is at home, behind that
	 * realm's agent; sessions travel the tunnel's datagram path. */
	bool server_tunnel;
	char server_realm[40];
	/* The tunnel's public side (relay_tunnel.c), coa-relay's defaults. */
	bool tunnel_on;
	struct addr tunnel_listen;
	char tunnel_keys[4096];
	char tunnel_pg[1024];
	uint16_t tunnel_port_min, tunnel_port_max;
	struct addr tunnel_bind; /* where the allocated ports listen */
	char tunnel_relay_host[RELAY_HOST_MAX];
	unsigned tunnel_max_hosts, tunnel_max_allocs, tunnel_max_allocs_realm;
	unsigned tunnel_max_allocs_player, tunnel_max_streams;
	long long tunnel_alloc_timeout_ms, tunnel_idle_timeout_ms, tunnel_handshake_timeout_ms;
	long long tunnel_ping_ms, tunnel_connect_timeout_ms;
};

#define RELAY_TUNNEL_PORT_MIN          (40000)
#define RELAY_TUNNEL_PORT_MAX          (43999)
#define RELAY_TUNNEL_MAX_HOSTS         (2048)
#define RELAY_TUNNEL_MAX_ALLOCS        (4096)
#define RELAY_TUNNEL_MAX_ALLOCS_REALM  (2048)
#define RELAY_TUNNEL_MAX_ALLOCS_PLAYER (4)
#define RELAY_TUNNEL_MAX_STREAMS       (2048) /* per realm */
#define RELAY_TUNNEL_ALLOC_TIMEOUT_S   (120)
#define RELAY_TUNNEL_IDLE_TIMEOUT_S    (60)
#define RELAY_TUNNEL_HANDSHAKE_S       (10)
#define RELAY_TUNNEL_PING_S            (30)
#define RELAY_TUNNEL_CONNECT_S         (15)

enum relay_drop {
	RELAY_DROP_FILTERED,
	RELAY_DROP_MALFORMED,
	RELAY_DROP_RATE_LIMITED,
	RELAY_DROP_BANNED,
	RELAY_DROP_QUEUE_FULL,
	RELAY_DROP_SESSION_CAP,
	RELAY_DROP_SEND_ERROR,
	RELAY_DROP_QUERY_BUDGET,
	RELAY_DROP_NREASONS
};

struct relay_stats {
	uint64_t pkts_to_server, bytes_to_server;
	uint64_t pkts_to_client, bytes_to_client;
	uint64_t drops[RELAY_DROP_NREASONS];
	uint64_t sessions_opened, sessions_closed, sessions_evicted;
	uint64_t state_write_errors;
};

struct relay_proxy;
struct relay_heartbeat;
struct relay_bans;
struct relay_control;
struct relay_tunnel;

struct relay {
	struct relay_cfg cfg;
	struct ev_loop *loop;
	struct addr server; /* resolved --server */
	struct relay_stats st;
	struct relay_proxy *proxy;
	struct relay_heartbeat *hb;
	struct relay_bans *bans;
	struct relay_control *control;
	struct relay_tunnel *tunnel;
	long long started; /* wall clock, s: GET /status */
	bool check_only;   /* --check-config: load, check, listen nowhere */
	bool stopping;
};

/* ---- relay_filter.c: the filter, pure ---- */

enum relay_verdict {
	RELAY_VERDICT_GAME,     /* no out-of-band prefix: in-game traffic */
	RELAY_VERDICT_QUERY,    /* getstatus / getinfo: rate-limited */
	RELAY_VERDICT_PASS,     /* getchallenge, connect, PB_... */
	RELAY_VERDICT_FILTERED, /* any other command, rcon first */
	RELAY_VERDICT_MALFORMED /* shorter than the 4-byte prefix */
};

/* Classifies a client datagram; the first token goes to cmd when the packet
 * is out-of-band (cmd[0] = '\0' otherwise). */
enum relay_verdict relay_classify(const uint8_t *buf, size_t len, char *cmd, size_t cmd_size);
const char *relay_drop_name(enum relay_drop d);

/* ---- relay_proxy.c ---- */

/* Binds the public socket; fills r->cfg.listen with the bound address. */
int relay_proxy_new(struct relay *r);
void relay_proxy_free(struct relay_proxy *p);
/* Sends a datagram from the public socket (heartbeats). 0 or -errno. */
int relay_proxy_send_public(struct relay_proxy *p, const struct addr *to, const void *buf,
			    size_t len);
/* Closes every session of ip; returns how many. */
size_t relay_proxy_close_ip(struct relay_proxy *p, const struct addr_ip *ip);
size_t relay_proxy_session_count(const struct relay_proxy *p);
size_t relay_proxy_ratelim_count(const struct relay_proxy *p);
/* A game datagram from the server for session sid, through the tunnel. */
void relay_proxy_deliver(struct relay_proxy *p, uint32_t sid, const uint8_t *buf, size_t len);
/* Datagrams the kernel dropped on the public socket, or -1 if unknown. */
long long relay_proxy_kernel_drops(const struct relay_proxy *p);

struct relay_session_info {
	struct addr client;
	uint16_t upstream_port;
	bool tunnelled; /* through the tunnel: no upstream socket here */
	bool confirmed; /* the client spoke again after the server's answer */
	long long age_ms, idle_ms;
	uint64_t pkts_in, bytes_in, pkts_out, bytes_out;
	unsigned queued;
};
/* Calls fn for each open session. */
void relay_proxy_foreach(struct relay_proxy *p,
			 void (*fn)(const struct relay_session_info *, void *), void *arg);

/* ---- relay_heartbeat.c ---- */

int relay_heartbeat_new(struct relay *r);
void relay_heartbeat_free(struct relay_heartbeat *hb);
/* Sends the flatline to every master, then calls done (from the loop),
 * within about 2.5 s whatever DNS does. */
void relay_heartbeat_shutdown(struct relay_heartbeat *hb, void (*done)(void *), void *arg);
/* Appends Prometheus lines for heartbeats. */
struct strbuf;
void relay_heartbeat_metrics(const struct relay_heartbeat *hb, struct strbuf *out);
/* The server's answer to a probe that came through the tunnel. */
void relay_heartbeat_probe_answer(struct relay_heartbeat *hb, const uint8_t *buf, size_t len);
/* True if ip is the last resolved address of one of our masters. */
bool relay_heartbeat_is_master(const struct relay_heartbeat *hb, const struct addr_ip *ip);
/* A getinfo/getstatus from ip: counted for the master it comes from, if any
 * (the master checking the server it lists). */
void relay_heartbeat_note_query(struct relay_heartbeat *hb, const struct addr_ip *ip);
/* The probe's verdict in *up; false while the server was never probed. */
bool relay_heartbeat_server_up(const struct relay_heartbeat *hb, bool *up);

/* One master's heartbeats, for GET /status. */
struct relay_master_info {
	const struct relay_master *master; /* as configured (--master) */
	bool resolved;                     /* addr holds its last resolution */
	struct addr addr;
	long long last_attempt;   /* wall clock, s; 0 before the first */
	const char *last_outcome; /* "heartbeat", "flatline", "resolve_error",
				     "send_error"; NULL before the first */
	uint64_t heartbeats, flatlines, resolve_errors, send_errors;
	uint64_t queries; /* getinfo/getstatus seen from its address */
};
/* Calls fn for each master, in --master order. */
void relay_heartbeat_foreach(const struct relay_heartbeat *hb,
			     void (*fn)(const struct relay_master_info *, void *), void *arg);
/* Where master i (--master order) was last resolved to, i.e. where the
 * heartbeats went; false before its first resolution. */
bool relay_heartbeat_master_addr(const struct relay_heartbeat *hb, size_t i, struct addr *out);
/* Starts a heartbeat cycle now (a master has lost the server). */
void relay_heartbeat_kick(struct relay_heartbeat *hb);
/* Its listing check (NULL when off). */
struct relay_listing *relay_heartbeat_listing(const struct relay_heartbeat *hb);

/* ---- relay_listing.c: is the server in each master's list? ---- */

struct relay_listing;
struct json_object;
struct q3_srv;

/* The checks of hb's masters, every --listing-interval; hb keeps a
 * pointer to it and frees it (relay_heartbeat_new/free call these). NULL,
 * errno set, on failure. */
struct relay_listing *relay_listing_new(struct relay *r, struct relay_heartbeat *hb);
void relay_listing_free(struct relay_listing *l);
/* The server's own infoResponse to a probe: its protocol and game name
 * are what the requests ask for. */
void relay_listing_note_info(struct relay_listing *l, const uint8_t *buf, size_t len);
/* Heartbeats went out (alive: the heartbeat tag; else the flatline). The
 * first alive one, and the first after a flatline or a lost listing, bring
 * the next check forward to --listing-delay from now. */
void relay_listing_heartbeat_sent(struct relay_listing *l, bool alive);
/* Appends the Prometheus lines of the checks. */
void relay_listing_metrics(const struct relay_listing *l, struct strbuf *out);
/* The state of the checks, for /healthz and /status (a new object). */
struct json_object *relay_listing_json(const struct relay_listing *l);

/* How a listed address was recognised as ours, weakest first. */
enum relay_listing_match {
	RELAY_MATCH_NONE,
	RELAY_MATCH_PORT,   /* the front port at some address: weak */
	RELAY_MATCH_LOCAL,  /* the front port at one of this host's addresses */
	RELAY_MATCH_BIND,   /* the (specific) bind address and port */
	RELAY_MATCH_PUBLIC, /* --public-address */
};
#define RELAY_LISTING_MAX_LOCAL (32)
/* What "ours" is for one master: the rule is the match a listing needs
 * (PUBLIC with --public-address; BIND with a specific bind address the
 * master can see; else LOCAL, and a PORT match is taken, as weak). */
struct relay_listing_self {
	enum relay_listing_match rule;
	struct addr_ip ip; /* the public or bind address (PUBLIC, BIND) */
	uint16_t port;     /* the public or front port */
	struct addr_ip local[RELAY_LISTING_MAX_LOCAL];
	size_t nlocal;
};
/* Fills self for a master at `master` (all but the local addresses): the
 * front is bound to listen; pub is --public-address (NULL: none; port 0:
 * the front port). A specific bind address in private space (RFC 1918,
 * 100.64/10, link-local, ULA) is not what a master outside it sees, so
 * there it gives LOCAL, not BIND. */
void relay_listing_self_init(struct relay_listing_self *self, const struct addr *listen,
			     const struct addr *pub, const struct addr *master);
/* How one listed server matches self (pure). */
enum relay_listing_match relay_listing_match(const struct relay_listing_self *self,
					     const struct q3_srv *s);
/* Whether a best match of m means listed under self's rule. */
bool relay_listing_enough(const struct relay_listing_self *self, enum relay_listing_match m);
const char *relay_listing_match_name(enum relay_listing_match m);

/* ---- relay_bans.c ---- */

/* Loads <state-dir>/bans.json; a corrupt file is a start-up error (the
 * message is logged, the file left untouched): returns -EBADMSG. */
int relay_bans_new(struct relay *r);
void relay_bans_free(struct relay_bans *b);
/* True if ip is banned now (expired bans are dropped and saved). */
bool relay_bans_check(struct relay_bans *b, const struct addr_ip *ip);
/* SIGHUP: reloads the file; keeps the current bans if it is corrupt. */
int relay_bans_reload(struct relay_bans *b);
struct banlist *relay_bans_list(struct relay_bans *b);
/* Saves after a change; 0 or -errno (logged, counted). */
int relay_bans_save(struct relay_bans *b);
const char *relay_bans_path(const struct relay_bans *b);

/* ---- relay_control.c ---- */

/* Starts the control API (retrying the bind every 10 s while the address
 * is not available). Returns 0 or a fatal -errno (bad token file). */
int relay_control_new(struct relay *r);
void relay_control_free(struct relay_control *c);
/* True once listening; addr gets the bound address. */
bool relay_control_bound(const struct relay_control *c, struct addr *addr);
/* SIGHUP: re-reads the token file (keeps the old token on error). */
int relay_control_reload(struct relay_control *c);
/* A bearer token file (>= RELAY_MIN_TOKEN printable characters) into its
 * BLAKE2b hash, and the check of a request's Authorization header against
 * it; the agent's control API uses them too. */
#define RELAY_TOKEN_HASH (32)
int relay_token_load(const char *path, uint8_t hash[static RELAY_TOKEN_HASH]);
struct httpd_req;
bool relay_token_check(const uint8_t hash[static RELAY_TOKEN_HASH], struct httpd_req *req);

/* ---- relay_page.c: the admin page on the control listener ---- */

/* Answers a request for the page or its assets (no token needed: they hold
 * no data) and returns true; false for any other path. */
bool relay_page_handle(struct httpd_req *req);

/* ---- relay_agent.c: `rally-relay agent`, the tunnel's home side ---- */

/* The whole program for argv[0] == "agent"; returns the exit status. */
int relay_agent_main(int argc, char **argv);

/* ---- relay_tunnel.c: the tunnel's public side ---- */

/* Loads the realm keys and listens (r->tunnel set even on failure, so
 * relay_tunnel_free cleans up). 0 or -errno. */
int relay_tunnel_new(struct relay *r);
void relay_tunnel_free(struct relay_tunnel *t);
/* SIGHUP: the keys file. */
int relay_tunnel_reload(struct relay_tunnel *t);
bool relay_tunnel_bound(const struct relay_tunnel *t, struct addr *a);
size_t relay_tunnel_keys_count(const struct relay_tunnel *t);
void relay_tunnel_metrics(const struct relay_tunnel *t, struct strbuf *out);
/* Sends a game datagram of session sid (0: the heartbeat probe) to the
 * --server realm's agent: over UDP when its datagram path is up, else in
 * the tunnel. 0, or -ENOTCONN (no tunnel for that realm). */
int relay_tunnel_dgram(struct relay_tunnel *t, uint32_t sid, const uint8_t *buf, size_t len);
/* True when the --server realm's tunnel is up. */
bool relay_tunnel_server_up(const struct relay_tunnel *t);

#endif
