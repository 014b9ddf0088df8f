/*
 * The query cache, the reply budgets and attack mode (relay_qcache.c),
 * one per proxy (per fronted server).
 *
 * getinfo and getstatus are answered from the server's own latest answers,
 * which the relay asks for itself from a socket of its own, on demand and
 * never more often than --query-cache-refresh per kind, spliced with each
 * asker's challenge (common/qsplice). Answers cost bytes from budgets: one
 * for all unverified askers together (an allowance plus what they send),
 * one per unverified source prefix (/24, /64 by default: a reflection
 * victim's network), one per known player. Attack mode lets only known players and sessions that are
 * playing reach the server while unverified traffic stays above
 * --attack-threshold. docs/relay.md has the operator's side of all this.
 */
#ifndef RELAY_QCACHE_H
#define RELAY_QCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"

/* Defaults (docs/relay.md explains each). */
#define RELAY_QCACHE_REFRESH_MS (2000)
#define RELAY_QCACHE_MAX_AGE_MS (10000)
#define RELAY_ENGINE_BURST      (10) /* ioquake3 SVC_RateLimitAddress(from, 10, 1000) */
#define RELAY_ENGINE_PERIOD_MS  (1000)
#define RELAY_ENGINE_RESERVE    (5)      /* of the burst, kept for players' getchallenge */
#define RELAY_REPLY_BUDGET      (524288) /* bytes/s at most, all unverified askers */
#define RELAY_REPLY_BASE        (16384)  /* bytes/s they get beyond what they send */
#define RELAY_SOURCE_BUDGET     (512)    /* bytes/s per unverified source prefix */
#define RELAY_KNOWN_BUDGET      (8192)   /* bytes/s per known player */
#define RELAY_BUDGET_BURST      (4)      /* a bucket holds this many seconds */
#define RELAY_SOURCE_PREFIX4    (24)
#define RELAY_SOURCE_PREFIX6    (64)
#define RELAY_REPLY_SOURCES     (65536)
#define RELAY_ATTACK_THRESHOLD  (2000) /* unverified datagrams per second */
#define RELAY_ATTACK_HOLD_S     (30)
#define RELAY_QCACHE_PENDING    (64) /* askers waiting for a first answer, per kind */

struct relay_qcache_cfg {
	bool on;               /* --query-cache on|off */
	long long refresh_ms;  /* --query-cache-refresh MS */
	long long max_age_ms;  /* --query-cache-max-age MS */
	unsigned engine_burst; /* --engine-query-limit BURST/PERIOD_MS, 0: no model */
	long long engine_period_ms;
	unsigned engine_reserve;   /* --engine-query-reserve N */
	unsigned reply_budget;     /* --reply-budget BYTES/s at most, 0: no cap */
	unsigned reply_base;       /* --reply-base BYTES/s beyond what askers send */
	unsigned source_budget;    /* --source-budget BYTES/s */
	unsigned known_budget;     /* --known-budget BYTES/s */
	unsigned prefix4, prefix6; /* --source-prefix V4/V6 */
	unsigned reply_sources;    /* --reply-sources N */
	unsigned attack_threshold; /* --attack-threshold PPS, 0: never */
	long long attack_hold_ms;  /* --attack-hold S */
	long long known_ttl_s;     /* --known-hours H */
	unsigned known_max;        /* --known-max N */
};

void relay_qcache_defaults(struct relay_qcache_cfg *c);

struct relay;
struct relay_server;
struct relay_proxy;
struct relay_qcache;
struct strbuf;

/*
 * Where srv's known players live: <state-dir>/known-players for the server
 * of the classic flags (""), <state-dir>/servers/NAME/known-players for a
 * named one (beside its bans.json); its directory into dir when dir_size
 * is not 0. 0, or -ENAMETOOLONG.
 */
int relay_qcache_path(const struct relay_server *srv, char *path, size_t size, char *dir,
		      size_t dir_size);

/*
 * The cache of srv's proxy p (which must have its public sockets), with
 * srv->cfg.qcache: loads srv's known players (a corrupt file is logged with
 * its line and moved aside to <path>.corrupt-<time>; the server starts
 * without it) and opens the refresh socket. NULL, errno set, on failure.
 */
struct relay_qcache *relay_qcache_new(struct relay_server *srv, struct relay_proxy *p);
/*
 * Saves the known players if they changed (synchronously: at exit, or when
 * the server retires, so that its restarted self loads them) and frees.
 */
void relay_qcache_free(struct relay_qcache *qc);

/*
 * --check-config: reads the known-players file at path without moving it.
 * 0 (missing is fine), or -EBADMSG / -errno, logged with the file's name.
 */
int relay_qcache_check_file(const struct relay_qcache_cfg *c, const char *path, size_t *count);

/* ---- the proxy's hooks, per datagram: O(1) ---- */

enum relay_qc_verdict {
	RELAY_QC_FORWARD, /* cache off, or unusable: the proxy forwards it */
	RELAY_QC_DONE,    /* answered, waiting for a refresh, or refused (counted) */
	RELAY_QC_ATTACK,  /* attack mode, cache off: dropped */
};

/*
 * A getinfo or getstatus from a client: answered from the cache now, or
 * queued for the refresh on its way, or refused (a budget, a challenge the
 * engine would not answer; counted here); forwarded when the cache is off
 * or unusable (the server does not echo our challenge).
 */
enum relay_qc_verdict relay_qcache_query(struct relay_qcache *qc, uint8_t pub,
					 const struct addr *from, const uint8_t *buf, size_t len);

/*
 * Any other datagram from a client (game traffic, getchallenge, connect,
 * PB_): counted toward attack mode unless it comes from a session that is
 * playing (in_session: confirmed) or a known player; false when attack mode
 * refuses it.
 */
bool relay_qcache_admit(struct relay_qcache *qc, const struct addr_ip *ip, bool in_session);

/* A getinfo, getstatus or getchallenge the proxy forwarded: it costs the
 * engine's per-address budget like our refreshes do. */
void relay_qcache_engine_note(struct relay_qcache *qc);

/* ip completed a connect (the server answered connectResponse, then ip
 * sent game traffic), or such a session ended: known, seen now. */
void relay_qcache_player(struct relay_qcache *qc, const struct addr_ip *ip);

/* A refresh answer that came through the tunnel (session 0). */
void relay_qcache_answer(struct relay_qcache *qc, const uint8_t *buf, size_t len);

/* Appends the Prometheus lines of every server's cache, budgets, attack
 * mode and known players (a named server's with server="NAME"). */
void relay_qcache_metrics(const struct relay *r, struct strbuf *out);

/* For GET /status and /servers: whether attack mode is on, the cache
 * usable, its answers' ages in ms (-1: none), the known players. */
struct relay_qcache_state {
	bool on, usable, attack;
	long long age_ms[2]; /* getinfo, getstatus */
	size_t known;
	unsigned long long unverified_pps;
};
bool relay_qcache_state(const struct relay_qcache *qc, struct relay_qcache_state *st);

#endif
