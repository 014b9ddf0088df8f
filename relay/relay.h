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
 * relay_agent.c (its home side, `rally-relay agent`).
 */
#ifndef RELAY_H
#define RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"
#include "ev.h"
#include "relay_qcache.h"

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
	bool check_only; /* --check-config: load, check, listen nowhere */
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
/* An answer of our own for the public socket's batch: write at most *room
 * bytes into the slot, then push it with its length and destination. */
uint8_t *relay_proxy_out_slot(struct relay_proxy *p, size_t *room);
void relay_proxy_out_push(struct relay_proxy *p, const struct addr *to, size_t len);
/* The proxy's query cache (NULL: none). */
struct relay_qcache *relay_proxy_qcache(const struct relay_proxy *p);

struct relay_session_info {
	struct addr client;
	uint16_t upstream_port;
	bool tunnelled; /* through the tunnel: no upstream socket here */
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
