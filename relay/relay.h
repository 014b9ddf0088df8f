/*
 * rally-relay: the shared context of the relay's modules.
 *
 * main.c builds a struct relay from the command line and wires the modules:
 * relay_proxy.c (public socket, sessions, filter, limiter, ban check),
 * relay_qcache.c (query cache, reply budgets, attack mode, known players),
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
#include "relay_qcache.h"
#include "relay_srvfile.h"

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
#define RELAY_MIN_TOKEN            (32) /* TOKEN_MIN_LEN, common/token.h */
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

/* The process's configuration; each fronted server has its own
 * (struct relay_server_cfg, relay_srvfile.h). */
struct relay_cfg {
	bool control_on;
	struct addr control;
	char token_file[4096];
	char state_dir[4096];
	/* --servers FILE: the named servers; "" = the one server of the
	 * classic flags, in classic (when server_on). */
	char servers_file[4096];
	bool server_on; /* --server given (classic) */
	struct relay_server_cfg classic;
	/* The tunnel's public side (relay_tunnel.c), coa-relay's defaults. */
	bool tunnel_on;
	/* Its datagram path (UDP beside the listener): on when a server may
	 * be behind the tunnel (--server tunnel:REALM, or a servers file). */
	bool tunnel_udp;
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
	/* The query cache, reply budgets, attack mode (relay_qcache.h). */
	struct relay_qcache_cfg qcache;
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
	RELAY_DROP_ATTACK_MODE,
	RELAY_DROP_NREASONS
};

/* One server's counters. */
struct relay_stats {
	uint64_t pkts_to_server, bytes_to_server;
	uint64_t pkts_to_client, bytes_to_client;
	uint64_t drops[RELAY_DROP_NREASONS];
	uint64_t sessions_opened, sessions_closed, sessions_evicted;
};

struct relay_proxy;
struct relay_heartbeat;
struct relay_bans;
struct relay_control;
struct relay_tunnel;

struct relay_reload;

/*
 * One fronted game server: its configuration, its public sockets and
 * sessions (proxy), its heartbeats and its own bans. The classic flags
 * make one whose name is ""; --servers FILE makes one per [server NAME].
 */
struct relay_server {
	struct relay *r;
	struct relay_server_cfg cfg;
	struct addr server; /* cfg.server_host resolved (not for a tunnel) */
	uint8_t realm[16];  /* cfg.server_realm as bytes (tunnel) */
	/* Where each cfg.listen[i] is bound (port 0 made real). */
	struct addr bound[RELAY_MAX_LISTEN];
	/* Sockets bound (or handed over) before the start, for the proxy to
	 * take; -1: the proxy binds cfg.listen[i] itself. */
	int pre_fd[RELAY_MAX_LISTEN];
	struct relay_stats st;
	struct relay_proxy *proxy;
	struct relay_heartbeat *hb;
	struct relay_bans *bans; /* its own (named servers); NULL: none */
	long long started_ms;
	/* Removed or restarted: no traffic, its flatline on the way. */
	bool retiring;
	struct relay_server *next_retiring;
};

struct relay {
	struct relay_cfg cfg;
	struct ev_loop *loop;
	/* The servers fronted now, in the order configured. */
	struct relay_server *servers[RELAY_MAX_SERVERS];
	size_t nservers;
	struct relay_server *retiring; /* flatlining, then freed */
	struct relay_bans *bans;       /* global: checked for every server */
	struct relay_control *control;
	struct relay_tunnel *tunnel;
	struct relay_reload *reload; /* a servers-file reload in flight */
	bool reload_again;           /* SIGHUP during it: once more after */
	uint64_t reloads_ok, reloads_refused;
	uint64_t state_write_errors;
	void (*stopped)(void *); /* relay_servers_shutdown's done */
	void *stopped_arg;
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

/*
 * Opens srv's public sockets (srv->pre_fd[i] when given, else binding
 * srv->cfg.listen[i]), fills srv->bound and sets srv->proxy. 0 or -errno.
 */
int relay_proxy_new(struct relay_server *srv);
void relay_proxy_free(struct relay_proxy *p);
/* Retiring: closes every session and stops reading the public sockets,
 * which stay open for the flatline until relay_proxy_free. */
void relay_proxy_stop(struct relay_proxy *p);
/* A new descriptor of public socket i (dup), for the next incarnation of
 * a restarted server; -errno. */
int relay_proxy_dup_socket(const struct relay_proxy *p, size_t i);
/* Sends a datagram from the public socket of to's family (heartbeats); an
 * IPv4 to may leave a dual-stack socket. 0, -EAFNOSUPPORT (no socket of
 * that family) or -errno. */
int relay_proxy_send_public(struct relay_proxy *p, const struct addr *to, const void *buf,
			    size_t len);
/* True if the public side can send to family (AF_INET, AF_INET6). */
bool relay_proxy_can_send(const struct relay_proxy *p, int family);
/* Closes every session of ip; returns how many. */
size_t relay_proxy_close_ip(struct relay_proxy *p, const struct addr_ip *ip);
size_t relay_proxy_session_count(const struct relay_proxy *p);
size_t relay_proxy_ratelim_count(const struct relay_proxy *p);
/* A game datagram from the server for session sid, through the tunnel. */
void relay_proxy_deliver(struct relay_proxy *p, uint32_t sid, const uint8_t *buf, size_t len);
/* Datagrams the kernel dropped on the public socket, or -1 if unknown. */
long long relay_proxy_kernel_drops(const struct relay_proxy *p);
/* An answer of our own for the public sockets' batch: write at most *room
 * bytes into the slot, then push it with its length, destination and the
 * public socket it leaves from (the one the asker came in on). */
uint8_t *relay_proxy_out_slot(struct relay_proxy *p, size_t *room);
void relay_proxy_out_push(struct relay_proxy *p, uint8_t pub, const struct addr *to, size_t len);
/* The proxy's query cache (NULL: none). */
struct relay_qcache *relay_proxy_qcache(const struct relay_proxy *p);

struct relay_session_info {
	struct addr client;
	uint16_t upstream_port;
	bool tunnelled;   /* through the tunnel: no upstream socket here */
	bool transparent; /* its upstream socket carries the client's address */
	bool confirmed;   /* the client spoke again after the server's answer */
	long long age_ms, idle_ms;
	uint64_t pkts_in, bytes_in, pkts_out, bytes_out;
	unsigned queued;
};
/* Calls fn for each open session (p may be NULL: none). */
void relay_proxy_foreach(struct relay_proxy *p,
			 void (*fn)(const struct relay_session_info *, void *), void *arg);

/* ---- relay_heartbeat.c ---- */

/* Starts srv's heartbeats (the first cycle at once); sets srv->hb. */
int relay_heartbeat_new(struct relay_server *srv);
void relay_heartbeat_free(struct relay_heartbeat *hb);
/*
 * Sends the flatline to every master, then calls done (from the loop),
 * within about 2.5 s whatever DNS does. next, when not NULL, is the
 * configuration that heartbeats from the same public sockets right after
 * (a restarted server): the masters it lists are spared the flatline.
 */
void relay_heartbeat_shutdown(struct relay_heartbeat *hb, const struct relay_server_cfg *next,
			      void (*done)(void *), void *arg);
/* Appends the Prometheus lines of every server's heartbeats. */
struct strbuf;
void relay_heartbeat_metrics(const struct relay *r, struct strbuf *out);

enum relay_server_state {
	RELAY_SERVER_UNPROBED, /* no heartbeats, or the first probe under way */
	RELAY_SERVER_UP,       /* the last probe was answered */
	RELAY_SERVER_DOWN,     /* it was not */
};
const char *relay_server_state_name(enum relay_server_state s);
enum relay_server_state relay_heartbeat_state(const struct relay_heartbeat *hb);

/* What /servers shows of master i (i < cfg.nmasters). */
/* One master's heartbeats, for GET /status and /servers. */
struct relay_master_info {
	const struct relay_master *master; /* as configured (--master) */
	bool have4, have6;                 /* last resolved address of each family */
	struct addr addr4, addr6;
	long long last_attempt;   /* wall clock, s; 0 before the first */
	const char *last_outcome; /* "heartbeat", "flatline", "resolve_error",
				     "send_error"; NULL before the first */
	uint64_t heartbeats, flatlines, resolve_errors, send_errors;
	uint64_t queries;       /* getinfo/getstatus seen from its address */
	long long last_sent_ms; /* monotonic; 0: never */
};
void relay_heartbeat_master_info(const struct relay_heartbeat *hb, size_t i,
				 struct relay_master_info *out);
/* The server's answer to a probe that came through the tunnel. */
void relay_heartbeat_probe_answer(struct relay_heartbeat *hb, const uint8_t *buf, size_t len);
/* True if ip is the last resolved address of one of our masters. */
bool relay_heartbeat_is_master(const struct relay_heartbeat *hb, const struct addr_ip *ip);
/* A getinfo/getstatus from ip: counted for the master it comes from, if any
 * (the master checking the server it lists). */
void relay_heartbeat_note_query(struct relay_heartbeat *hb, const struct addr_ip *ip);
/* The probe's verdict in *up; false while the server was never probed. */
bool relay_heartbeat_server_up(const struct relay_heartbeat *hb, bool *up);

/* Where master i (--master order) was last resolved to in family
 * (AF_INET, AF_INET6), i.e. where that family's heartbeats went; false
 * before such a resolution. */
bool relay_heartbeat_master_addr(const struct relay_heartbeat *hb, size_t i, int family,
				 struct addr *out);
/* Starts a heartbeat cycle now (a master has lost the server). */
void relay_heartbeat_kick(struct relay_heartbeat *hb);
/* Its listing check (NULL when off). */
struct relay_listing *relay_heartbeat_listing(const struct relay_heartbeat *hb);

/* ---- relay_listing.c: is the server in each master's list? ---- */

struct relay_listing;
struct json_object;
struct q3_srv;

/* The checks of srv's masters (its heartbeat instance hb), every
 * listing-interval; hb keeps a pointer to it and frees it
 * (relay_heartbeat_new/free/shutdown call these). NULL, errno set, on
 * failure. */
struct relay_listing *relay_listing_new(struct relay_server *srv, struct relay_heartbeat *hb);
void relay_listing_free(struct relay_listing *l);
/* The server's own infoResponse to a probe: its protocol and game name
 * are what the requests ask for. */
void relay_listing_note_info(struct relay_listing *l, const uint8_t *buf, size_t len);
/* Heartbeats went out (alive: the heartbeat tag; else the flatline). The
 * first alive one, and the first after a flatline or a lost listing, bring
 * the next check forward to --listing-delay from now. */
void relay_listing_heartbeat_sent(struct relay_listing *l, bool alive);
/* Appends the Prometheus lines of every server's checks. */
void relay_listing_metrics(const struct relay *r, struct strbuf *out);
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
 * front of the master's family is bound to listen; pub is the
 * public-address of that family (NULL: none; port 0: the front port). A specific bind address in private space (RFC 1918,
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

/*
 * Loads a ban table: <state-dir>/bans.json for the whole relay (srv NULL)
 * or <state-dir>/servers/<name>/bans.json for one named server. A corrupt
 * file is an error (the message is logged, the file left untouched):
 * -EBADMSG. *out is set on success, NULL otherwise.
 */
int relay_bans_new(struct relay *r, struct relay_server *srv, struct relay_bans **out);
void relay_bans_free(struct relay_bans *b);
/* True if ip is banned now (expired bans are dropped and saved). */
bool relay_bans_check(struct relay_bans *b, const struct addr_ip *ip);
/* SIGHUP: reloads the file (the sessions of banned addresses close);
 * keeps the current bans if it is corrupt. */
int relay_bans_reload(struct relay_bans *b);
struct banlist *relay_bans_list(struct relay_bans *b);
/* Saves after a change; 0 or -errno (logged, counted). */
int relay_bans_save(struct relay_bans *b);
const char *relay_bans_path(const struct relay_bans *b);
/* Closes the sessions of ip where b applies (every server for the global
 * table, its server for a server's); returns how many. */
size_t relay_bans_close_sessions(struct relay_bans *b, const struct addr_ip *ip);

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
 * BLAKE2b hash, logged as the relay logs it (common/token.c; token_check
 * checks a request's Authorization header); the agent's control API uses
 * them too. */
#define RELAY_TOKEN_HASH (32)
int relay_token_load(const char *path, uint8_t hash[static RELAY_TOKEN_HASH]);
struct httpd_req;

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
/* Sends a game datagram of srv's session sid (0: the heartbeat probe) to
 * the agent of srv's realm: over UDP when its datagram path is up, else in
 * the tunnel. 0, or -ENOTCONN (no tunnel for that realm). */
int relay_tunnel_dgram(struct relay_tunnel *t, const struct relay_server *srv, uint32_t sid,
		       const uint8_t *buf, size_t len);
/* The same for a player's datagram: an agent that took TUNMSG_X_PEER also
 * gets client, the player's address (NULL: none). */
int relay_tunnel_dgram_from(struct relay_tunnel *t, const struct relay_server *srv, uint32_t sid,
			    const struct addr *client, const uint8_t *buf, size_t len);
/* True when the tunnel of srv's realm is up. */
bool relay_tunnel_server_up(const struct relay_tunnel *t, const struct relay_server *srv);

/* ---- relay_server.c: the fronted servers ---- */

/* A server for cfg (copied), not started: no socket, no bans yet. */
struct relay_server *relay_server_new(struct relay *r, const struct relay_server_cfg *cfg);
/* Loads its own bans (named servers); 0 or -errno (logged). */
int relay_server_load_bans(struct relay_server *srv);
/* Its proxy, then its heartbeats (none in --check-config). 0 or -errno,
 * logged with the server's name. */
int relay_server_start(struct relay_server *srv);
/* Closes every socket and frees; NULL is a no-op. */
void relay_server_free(struct relay_server *srv);
/* Takes srv out of service: its sessions close at once, its flatline goes
 * to the masters next does not list (all when next is NULL), then it is
 * freed. srv must no longer be in r->servers. */
void relay_server_retire(struct relay_server *srv, const struct relay_server_cfg *next);

/* The active server of that name ("" is the classic one), or NULL. */
struct relay_server *relay_server_find(const struct relay *r, const char *name);
/* The active server behind the tunnel of realm (16 bytes), or NULL. */
struct relay_server *relay_server_by_realm(const struct relay *r, const uint8_t realm[static 16]);
/* How the server is shown in logs: "" or " name=NAME" (with the space). */
const char *relay_server_logname(const struct relay_server *srv, char *buf, size_t size);
/*
 * The label set of one server's metric line: "" or {server="NAME"} for
 * none, {more} or {server="NAME",more} when more is not NULL. Returns buf.
 */
const char *relay_server_labels(const struct relay_server *srv, const char *more, char *buf,
				size_t size);

/* Checks the servers against the relay's own flags (a tunnel server needs
 * --tunnel-listen); 0 or -EINVAL with err. */
int relay_servers_check(const struct relay_cfg *c, const struct relay_server_cfg *s, size_t n,
			struct cfg_err *err);
/* SIGHUP: re-reads --servers FILE and applies it (see relay_server.c);
 * a bad file changes nothing and is logged. */
void relay_servers_reload(struct relay *r);
/* SIGTERM: every server flatlines, then done(arg) (from the loop). */
void relay_servers_shutdown(struct relay *r, void (*done)(void *), void *arg);
/* Frees every server, active or retiring, and a reload in flight. */
void relay_servers_free(struct relay *r);
/* The descriptors the relay needs (sessions, sockets, the tunnel's ports),
 * for RLIMIT_NOFILE. */
unsigned long long relay_nofile(const struct relay *r);

#endif
