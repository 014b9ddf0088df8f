/*
 * netsim (netpunch-wire.md §14): <io dir>/tpf2mp_netsim.txt impairs what
 * this lobby sends: each datagram is dropped with probability `loss`, else
 * held for `delay` plus a uniform [0, jitter) and sent in order. Read once at
 * start; all zero or no file: off. The tests and the benchmarks use it for
 * loss and delay, which this kernel's qdiscs cannot add (no netem).
 */
#ifndef LOBBY_NETSIM_H
#define LOBBY_NETSIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"

struct ev_loop;

#define LOBBY_NETSIM_FILE      "tpf2mp_netsim.txt"
#define LOBBY_NETSIM_MAX_LOSS  (0.99)
#define LOBBY_NETSIM_MAX_QUEUE (32u * 1024 * 1024) /* bytes held for delay */

struct lobby_netsim_cfg {
	double loss;     /* 0 .. 0.99 */
	double delay_s;  /* >= 0 */
	double jitter_s; /* >= 0 */
};

/*
 * Parses the file's text: lines `key=value` (keys loss, delay, jitter, any
 * case; spaces around both allowed); a negative value counts as 0, loss
 * above 0.99 as 0.99; other lines and unknown keys are ignored, as are
 * values that are not numbers. Pure. Returns 0.
 */
int lobby_netsim_parse(const char *text, size_t len, struct lobby_netsim_cfg *out);
bool lobby_netsim_enabled(const struct lobby_netsim_cfg *c);

struct lobby_netsim;
struct lobby_netsim_stats {
	uint64_t sent, dropped, delayed, overflow;
};

/* A delay line sending through fd (IPv4) and fd6 (IPv6, -1: none). NULL,
 * errno set. */
struct lobby_netsim *lobby_netsim_new(struct ev_loop *loop, const struct lobby_netsim_cfg *cfg,
				      int fd, int fd6);
void lobby_netsim_free(struct lobby_netsim *ns);
/*
 * One datagram through the impairment: dropped, sent at once (no delay),
 * or copied into the delay line (past LOBBY_NETSIM_MAX_QUEUE bytes held,
 * dropped and counted as overflow). Returns 0, or -errno of a send at once.
 */
int lobby_netsim_send(struct lobby_netsim *ns, const struct addr *to, const void *buf, size_t len);
void lobby_netsim_stats(const struct lobby_netsim *ns, struct lobby_netsim_stats *out);
/* The settings it runs with. */
void lobby_netsim_cfg_of(const struct lobby_netsim *ns, struct lobby_netsim_cfg *out);

#endif
