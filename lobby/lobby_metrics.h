/*
 * The lobby's counters and its metrics endpoint (rally-lobby host
 * --metrics ADDR:PORT): GET /metrics in the Prometheus text format and
 * GET /healthz, served by common/httpd inside the loop.
 *
 * The counters are plain numbers in struct lobby (l->ctr), bumped with one
 * increment where the thing happens (a join, a peer gone, a frame relayed,
 * a poll answered...); lobby_metrics.c alone prints them, with what the
 * modules already count (lobby_net, lobby_dual). The endpoint is for an
 * operator's Prometheus on the same machine: it binds loopback unless a
 * --metrics-token-file is given, and then every /metrics needs that bearer
 * token (as rally-relay's control API does).
 */
#ifndef LOBBY_METRICS_H
#define LOBBY_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "token.h"

struct lobby;
struct strbuf;

/* How a peer came in: lobby_trav_host_join's "path". */
enum lobby_metrics_path {
	LOBBY_PATH_LAN,
	LOBBY_PATH_PUBLIC,
	LOBBY_PATH_V6,
	LOBBY_PATH_PUNCHED,
	LOBBY_PATH_RELAY,
	LOBBY_PATH_N
};

/* "lan", "public", "v6", "punched", "relay" (the record's and the label's). */
const char *lobby_metrics_path_name(enum lobby_metrics_path p);

/* A join's outcome at the host. */
enum lobby_metrics_join {
	LOBBY_JOIN_ACCEPTED,       /* a new player is in */
	LOBBY_JOIN_VERSION,        /* refused: another protocol version */
	LOBBY_JOIN_FULL,           /* refused: --max-players reached */
	LOBBY_JOIN_WRONG_PASSWORD, /* a frame under another key: told so (every 2 s at most) */
	LOBBY_JOIN_N
};

/* Why a peer left the host's table. */
enum lobby_metrics_left {
	LOBBY_LEFT_LEFT,    /* it said leave */
	LOBBY_LEFT_SILENT,  /* nothing from it for 10 s */
	LOBBY_LEFT_VERSION, /* a rejoin from another build */
	LOBBY_LEFT_N
};

/* "left", "silent", "version" (the log's and the label's). */
const char *lobby_metrics_left_name(enum lobby_metrics_left why);

/* Game frames (the bridge's datagrams). */
enum lobby_metrics_dir {
	LOBBY_DIR_FROM_PEER, /* a peer's frame that reached the host's session */
	LOBBY_DIR_TO_PEER,   /* one sent on to a peer (relayed or the host's own) */
	LOBBY_DIR_FROM_GAME, /* from the game beside us (loopback) */
	LOBBY_DIR_TO_GAME,   /* delivered to the game beside us */
	LOBBY_DIR_N
};

/* A save round's end at the host. */
enum lobby_metrics_round {
	LOBBY_ROUND_OK,      /* every target that stayed verified it */
	LOBBY_ROUND_FAILED,  /* a target failed */
	LOBBY_ROUND_NOBODY,  /* nobody to share with */
	LOBBY_ROUND_ABORTED, /* the files could not be read after all */
	LOBBY_ROUND_N
};

/* A leader's upload of the world to a relay lobby. */
enum lobby_metrics_upload {
	LOBBY_UPLOAD_STORED,  /* verified and kept as the stored world */
	LOBBY_UPLOAD_FAILED,  /* the receiver gave up (hashes, size, retries) */
	LOBBY_UPLOAD_DROPPED, /* the leader left, or nothing came for 30 s */
	LOBBY_UPLOAD_N
};

struct lobby_counters {
	uint64_t peers[LOBBY_PATH_N]; /* a gauge: in the host's table now */
	uint64_t joins[LOBBY_JOIN_N];
	uint64_t left[LOBBY_LEFT_N];
	uint64_t frames[LOBBY_DIR_N], frame_bytes[LOBBY_DIR_N];
	uint64_t envelopes; /* mesh envelopes passed on to another joiner */
	/* the rendezvous (host): /knock polls and the notes they brought */
	uint64_t polls_ok, polls_failed, knocks_answered, knocks_bad;
	/* the master's list: /announce (every 10 s while published) */
	uint64_t publish_ok, publish_failed;
	long long publish_last_ok_s; /* Unix time, 0: never */
	bool publishing;             /* announcing now (--public, the publish command) */
	uint64_t rounds[LOBBY_ROUND_N];
	uint64_t targets_done, targets_failed;
	uint64_t save_bytes_udp, save_bytes_tcp; /* chunk bytes sent */
	uint64_t uploads[LOBBY_UPLOAD_N];        /* a relay lobby's */
	/* the bulk TCP listener (lobby_bulk) */
	uint64_t bulk_accepted, bulk_refused, bulk_timeouts, bulk_too_many;
	long long start_s; /* Unix time the process started */
};

#define LOBBY_METRICS_MIN_TOKEN TOKEN_MIN_LEN /* characters, as rally-relay's --token-file */

/* Checks --metrics-token-file (readable, printable ASCII, at least 32
 * characters) without keeping it: 0 or -errno, the reason logged naming
 * the file (--check-config and the start). */
int lobby_metrics_check_token(const char *path);

/*
 * Serves /metrics and /healthz on l->cfg.metrics when l->cfg.metrics_set.
 * The bound address is logged ("metrics-listening metrics=IP:PORT"). 0 (also
 * when not asked for) or -errno with the reason logged; the caller stops.
 */
int lobby_metrics_start(struct lobby *l);
void lobby_metrics_free(struct lobby *l);
/* SIGHUP: reads --metrics-token-file again; a file that fails its checks
 * keeps the old token (logged). */
void lobby_metrics_reload(struct lobby *l);

/* The /metrics text of l into b (for the endpoint and the tests). */
void lobby_metrics_render(const struct lobby *l, struct strbuf *b);

#endif
