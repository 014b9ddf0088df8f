/*
 * The save sender's congestion controller (docs/transfer.md): model-based,
 * after BBR (Cardwell et al., "BBR: Congestion-Based Congestion Control",
 * ACM Queue 2016). It estimates the path's bottleneck rate (the largest
 * delivery rate of the last ten rounds) and its round-trip time without a
 * queue (the smallest RTT of the last 10 s), paces chunks at gain x rate
 * and caps what is in flight at gain x rate x (RTT + the feedback
 * interval). Random loss does not slow it (a lossy link is not a congested
 * one: netsim's 15 % are noise, a full queue is not); a queue that builds
 * raises the RTT it sees but not its estimate of the minimum, so it backs
 * off to the bottleneck rate and keeps the queue near one bandwidth-delay
 * product: the game's frames and the lobby's messages on the same path are
 * not starved.
 *
 * Pure: times and sizes come in, rates and caps go out; no clock, no I/O.
 */
#ifndef LOBBY_CC_H
#define LOBBY_CC_H

#include <stdbool.h>
#include <stdint.h>

enum lobby_cc_mode { LOBBY_CC_STARTUP, LOBBY_CC_DRAIN, LOBBY_CC_PROBE_BW, LOBBY_CC_PROBE_RTT };

#define LOBBY_CC_ROUNDS (20) /* the bottleneck rate is the max of this many rounds */

struct lobby_cc {
	enum lobby_cc_mode mode;
	uint64_t mss; /* bytes of a chunk */
	/* The model. */
	double round_max[LOBBY_CC_ROUNDS]; /* the largest delivery rate of each round */
	unsigned round;                    /* rounds so far */
	uint64_t round_at;                 /* when this one began */
	uint64_t round_bytes;              /* delivered in it */
	uint64_t round_lost;               /* and found lost */
	uint64_t srtt_us;                  /* smoothed RTT (the queue: srtt - rt_prop) */
	unsigned backoffs;                 /* rounds it found the queue full */
	double init_rate;                  /* bytes/s before any sample */
	double btl_bw;                     /* max over round_max, bytes/s */
	uint64_t rt_prop_us;               /* min RTT over the last 10 s (0: none yet) */
	uint64_t rt_prop_at;               /* when it was last lowered or refreshed */
	uint64_t ack_us;                   /* the feedback interval, smoothed */
	uint64_t fb_us;                    /* the one the receiver was asked for */
	/* Startup's exit: the rate stopped growing by 25 % three rounds on. */
	double full_bw;
	unsigned full_bw_count;
	/* probe_bw's gain cycle, one step per round. */
	unsigned cycle;
	uint64_t probe_rtt_until;
	double max_rate; /* bytes/s the pacer never exceeds (0: none) */
	/* Outputs. */
	double pacing_gain, cwnd_gain;
	double pacing_rate; /* bytes/s */
	uint64_t cwnd;      /* bytes in flight at most */
	/* The pacer's credit (bytes), refilled by lobby_cc_credit. */
	double credit;
	uint64_t credit_at;
};

/* A fresh controller for chunks of mss bytes, feedback asked every fb_us,
 * at time now_us, pacing at max_rate bytes/s at most (0: no cap). */
void lobby_cc_init(struct lobby_cc *c, uint64_t mss, uint64_t fb_us, uint64_t max_rate,
		   uint64_t now_us);

/* A first round trip (the fbegin's, to its ack): the initial rate becomes
 * the initial window over it, as BBR starts, not a fixed guess. */
void lobby_cc_seed(struct lobby_cc *c, uint64_t rtt_us);

/*
 * One piece of feedback: delivered bytes arrived at the receiver over the
 * last interval_us (a delivery-rate sample), lost bytes it found missing
 * since the last feedback, rtt_us one round trip seen
 * now (0: none in this feedback), inflight bytes still out. app_limited:
 * the sender had less to send than it was allowed (the sample may only
 * raise the estimate).
 */
void lobby_cc_on_ack(struct lobby_cc *c, uint64_t delivered, uint64_t lost, uint64_t interval_us,
		     uint64_t rtt_us, uint64_t inflight, bool app_limited, uint64_t now_us);

/*
 * How many bytes may go now: the pacer's credit since the last call (at
 * most 2 ms' worth, so an idle sender does not burst), capped by the
 * window less what is in flight. lobby_cc_sent takes what was sent.
 */
uint64_t lobby_cc_credit(struct lobby_cc *c, uint64_t inflight, uint64_t now_us);
void lobby_cc_sent(struct lobby_cc *c, uint64_t bytes);

const char *lobby_cc_mode_name(enum lobby_cc_mode m);

#endif
