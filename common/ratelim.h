/*
 * Token buckets per source IP in a bounded table.
 *
 * Each IP gets `burst` tokens, refilled at `per_sec` per second; a packet
 * takes one. The table remembers at most `capacity` IPs: an IP idle for
 * `forget_ms` is dropped (its bucket would be full again anyway), and when
 * the table is full the least recently seen IP makes room. Cost per packet:
 * one keyed hash and a few pointer moves, whatever the number of sources.
 */
#ifndef RATELIM_H
#define RATELIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"

struct ratelim;

struct ratelim_stats {
	uint64_t evicted;   /* dropped while still fresh, table full */
	uint64_t forgotten; /* dropped after forget_ms idle */
};

/* NULL, errno set, on failure. */
struct ratelim *ratelim_new(size_t capacity, unsigned burst, unsigned per_sec, long long forget_ms);
void ratelim_free(struct ratelim *rl);

/* Takes a token for ip at now_ms; true if there was one. */
bool ratelim_check(struct ratelim *rl, const struct addr_ip *ip, long long now_ms);

/* Takes cost tokens at once (a budget in bytes: cost = the answer's
 * length); true if there were that many, else nothing is taken. */
bool ratelim_take(struct ratelim *rl, const struct addr_ip *ip, unsigned cost, long long now_ms);

/* Forgets IPs idle for forget_ms, oldest first; returns how many. */
size_t ratelim_expire(struct ratelim *rl, long long now_ms);

size_t ratelim_count(const struct ratelim *rl);
void ratelim_stats(const struct ratelim *rl, struct ratelim_stats *out);

#endif
