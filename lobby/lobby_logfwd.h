/*
 * Log forwarding (netpunch-wire.md §7 log, §15 lobby_peers.log; lobby.py
 * LogForwarder and PeersLog): every joiner ships its log lines to the host,
 * which merges them, tagged per player, with its own into
 * <io dir>/lobby_peers.log. Files named by --forward-log are tailed into the
 * same stream (a file that exists is read from its end, one that appears
 * later from its start; a truncated one from its start again).
 *
 * The forwarder is a bounded queue (2,000 lines of at most 240 characters,
 * the oldest dropped and counted) filled from the log's tap on any thread,
 * drained every 0.5 s into one log message of at most 1,000 bytes. The
 * host accepts 8 log messages a second and 20 MB a session from each peer,
 * 64 lines a message, control characters blanked.
 */
#ifndef LOBBY_LOGFWD_H
#define LOBBY_LOGFWD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LOBBY_LOG_LINE_MAX     (240)
#define LOBBY_LOG_QUEUE_MAX    (2000)
#define LOBBY_LOG_BATCH_BYTES  (1000)
#define LOBBY_LOG_FLUSH_MS     (500)
#define LOBBY_LOG_MSGS_PER_SEC (8)
#define LOBBY_LOG_BYTES_PEER   (20LL * 1024 * 1024)
#define LOBBY_LOG_LINES_MSG    (64)
#define LOBBY_LOG_TAILS_MAX    (16)
#define LOBBY_PEERS_LOG        "lobby_peers.log"
#define LOBBY_KEEP_LOGS_FILE   "tpf2mp_keep_logs.txt"

struct lobby_logfwd;

/* A forwarder tailing paths (at most LOBBY_LOG_TAILS_MAX). NULL, errno set. */
struct lobby_logfwd *lobby_logfwd_new(const char *const *paths, size_t npaths);
void lobby_logfwd_free(struct lobby_logfwd *f);
/* One line (cut to LOBBY_LOG_LINE_MAX characters with "..."), tagged
 * "[tag] " when tag is not NULL. Any thread. */
void lobby_logfwd_add(struct lobby_logfwd *f, const char *line, size_t len, const char *tag);
/* Reads what the tailed files gained (64 KiB per file per call). */
void lobby_logfwd_poll(struct lobby_logfwd *f);
/*
 * The next batch, when LOBBY_LOG_FLUSH_MS passed since the last (force:
 * now, the last words): up to LOBBY_LOG_BATCH_BYTES, a "[log] N lines
 * dropped (queue full)" line first when some were. The lines are copied
 * into out (NUL-separated, outsize bytes) with pointers in v (at most max).
 * Returns how many.
 */
size_t lobby_logfwd_drain(struct lobby_logfwd *f, long long now_ms, bool force, char *out,
			  size_t outsize, const char **v, size_t max);

/* ---- the host's merged log ---- */

struct lobby_peerslog;

/* Opens <dir>/lobby_peers.log: truncated with a banner, or appended to
 * after one when <dir>/tpf2mp_keep_logs.txt exists. NULL, errno set. */
struct lobby_peerslog *lobby_peerslog_open(const char *dir);
void lobby_peerslog_close(struct lobby_peerslog *p);
/* "HH:MM:SS [who] line" for each line (local time, as netpunch). */
void lobby_peerslog_write(struct lobby_peerslog *p, const char *who, const char *const *lines,
			  size_t n);
/* A peer's line as the host keeps it: control characters blanked, cut
 * to LOBBY_LOG_LINE_MAX characters. Returns its length in out. */
size_t lobby_log_clean(const char *in, char *out, size_t size);

#endif
