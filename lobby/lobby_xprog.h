/*
 * A save transfer's progress as a person reads it: the bytes, rate and
 * time left that the transfer events carry, and on a terminal a status
 * line per peer under the log (log_status), redrawn five times a second:
 *   bob      42%   84.0 of 200.0 MiB   512.3 MiB/s   0:01 left
 */
#ifndef LOBBY_XPROG_H
#define LOBBY_XPROG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct lobby;
struct lobby_event;

#define LOBBY_XPROG_ROWS (16) /* peers shown at most */

/* Fills a pct event's bytes, total, rate (since the mark) and eta, and
 * moves the mark (*mark_ms, *mark_bytes) to now. */
void lobby_xfer_rate(struct lobby_event *e, uint64_t bytes, uint64_t total, long long *mark_ms,
		     uint64_t *mark_bytes, long long now_ms);

/* One row of the terminal's progress: name's bytes of total; state NULL
 * while it moves, else "done", "failed", "dropped", "tcp" (a row that
 * ended is drawn a few seconds more, then goes). No terminal: nothing. */
void lobby_xprog_row(struct lobby *l, const char *name, uint64_t bytes, uint64_t total,
		     const char *state);
void lobby_xprog_free(struct lobby *l);

/* The row's text, for the status line and the tests (pure). */
void lobby_xprog_format(char *out, size_t size, const char *name, uint64_t bytes, uint64_t total,
			double rate, const char *state);

#endif
