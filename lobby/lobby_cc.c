/*
 * The save sender's congestion controller, BBR-like (docs/transfer.md has
 * the equations and why). Pure.
 */
#include "lobby_cc.h"

#include <string.h>

#define STARTUP_GAIN    (2.885) /* 2 / ln 2: doubles the rate every round */
#define DRAIN_GAIN      (1.0 / STARTUP_GAIN)
#define CWND_GAIN       (2.0)
#define FULL_GROWTH     (1.25)
#define FULL_ROUNDS     (3)
#define PHASE_ROUNDS    (2)
#define BETA            (0.85)        /* the estimate after a round with a full queue */
#define QUEUE_US        (5000)        /* queueing delay that is not noise */
#define FULL_MIN_CHUNKS (8)           /* a round delivering fewer does not end startup */
#define RTPROP_US       (10000000ULL) /* the min RTT is trusted this long */
#define PROBE_RTT_US    (200000ULL)
#define ROUND_MIN_US    (1000ULL) /* a round lasts at least this */
#define INIT_RATE       (4e6)     /* bytes/s before any sample */
#define INIT_CWND       (16)      /* chunks before any RTT */
#define MIN_CWND        (4)
#define CREDIT_US       (2000.0)  /* the pacer's burst: 2 ms of its rate */
#define CREDIT_MAX_US   (10000.0) /* ... or as long as the pump was away, up to this */

static const double cycle_gain[8] = {1.25, 0.75, 1, 1, 1, 1, 1, 1};

const char *lobby_cc_mode_name(enum lobby_cc_mode m)
{
	switch (m) {
	case LOBBY_CC_STARTUP:
		return "startup";
	case LOBBY_CC_DRAIN:
		return "drain";
	case LOBBY_CC_PROBE_BW:
		return "probe_bw";
	case LOBBY_CC_PROBE_RTT:
		return "probe_rtt";
	}
	return "?";
}

/* What the path holds: rate x (RTT + the feedback interval), since the
 * sender hears of deliveries only that often. Before an RTT, INIT_CWND
 * chunks. */
static double bdp(const struct lobby_cc *c)
{
	if (c->rt_prop_us == 0 || c->btl_bw <= 0)
		return (double)(INIT_CWND * c->mss);
	/* The feedback interval counts as it was asked for (twice at most):
	 * a receiver that reports late because it is slow must not widen
	 * the window that keeps its own queue full. */
	uint64_t ack = c->ack_us < 2 * c->fb_us ? c->ack_us : 2 * c->fb_us;

	return c->btl_bw * (double)(c->rt_prop_us + ack) / 1e6;
}

static void outputs(struct lobby_cc *c)
{
	double rate = c->btl_bw > 0 ? c->btl_bw : c->init_rate;
	double w = c->cwnd_gain * bdp(c) + (double)(2 * c->mss);

	c->pacing_rate = c->pacing_gain * rate;
	if (c->max_rate > 0 && c->pacing_rate > c->max_rate)
		c->pacing_rate = c->max_rate;
	if (w < (double)(MIN_CWND * c->mss))
		w = (double)(MIN_CWND * c->mss);
	c->cwnd = c->mode == LOBBY_CC_PROBE_RTT ? MIN_CWND * c->mss : (uint64_t)w;
}

void lobby_cc_init(struct lobby_cc *c, uint64_t mss, uint64_t fb_us, uint64_t max_rate,
		   uint64_t now_us)
{
	memset(c, 0, sizeof(*c));
	c->mss = mss > 0 ? mss : 1;
	c->fb_us = fb_us > 0 ? fb_us : 10000;
	c->max_rate = (double)max_rate;
	c->mode = LOBBY_CC_STARTUP;
	c->pacing_gain = STARTUP_GAIN;
	c->cwnd_gain = STARTUP_GAIN;
	c->credit_at = now_us;
	c->rt_prop_at = now_us;
	c->round_at = now_us;
	c->init_rate = INIT_RATE;
	outputs(c);
}

void lobby_cc_seed(struct lobby_cc *c, uint64_t rtt_us)
{
	double rate;

	if (rtt_us == 0 || c->btl_bw > 0)
		return;
	/* BBR's start: the initial window over the round trip. */
	rate = (double)(INIT_CWND * c->mss) * 1e6 / (double)rtt_us;
	if (rate > c->init_rate)
		c->init_rate = rate;
	/* Not a sample of rt_prop: an ack of an earlier fbegin, or one that
	 * waited in the receiver's loop, would make it too small for 10 s
	 * and the window with it. */
	outputs(c);
}

static void enter_probe_bw(struct lobby_cc *c)
{
	c->mode = LOBBY_CC_PROBE_BW;
	c->cwnd_gain = CWND_GAIN;
	/* Start past the 0.75 phase (BBR picks a random phase but that). */
	c->cycle = 2;
	c->pacing_gain = cycle_gain[c->cycle];
}

/* A round is over (one RTT, or one feedback interval if that is longer):
 * the rate filter moves on, startup checks for a full pipe, probe_bw takes
 * its next gain. */
static void end_round(struct lobby_cc *c, bool app_limited, uint64_t now)
{
	uint64_t got = c->round_bytes, lost = c->round_lost;
	double max = 0;

	c->round++;
	c->round_at = now;
	c->round_bytes = c->round_lost = 0;
	/* Loss with a queue: more than 2 % of the round lost while the RTT
	 * stands well above its minimum means a full queue at the bottleneck,
	 * not a noisy link. The estimate goes down by BETA (BBRv2's answer),
	 * so the queue drains; probe_bw finds the rate again. */
	if (lost * 50 > got + lost && c->rt_prop_us > 0 &&
	    c->srtt_us >
		    c->rt_prop_us + (c->rt_prop_us / 4 > QUEUE_US ? c->rt_prop_us / 4 : QUEUE_US)) {
		for (unsigned i = 0; i < LOBBY_CC_ROUNDS; i++)
			c->round_max[i] *= BETA;
		c->btl_bw *= BETA;
		c->backoffs++;
		if (c->mode == LOBBY_CC_STARTUP) {
			c->mode = LOBBY_CC_DRAIN;
			c->pacing_gain = DRAIN_GAIN;
		}
		return;
	}
	c->round_max[c->round % LOBBY_CC_ROUNDS] = 0;
	for (unsigned i = 0; i < LOBBY_CC_ROUNDS; i++) {
		if (c->round_max[i] > max)
			max = c->round_max[i];
	}
	if (max > 0)
		c->btl_bw = max;
	switch (c->mode) {
	case LOBBY_CC_STARTUP:
		/* A round that delivered a handful of chunks says little
		 * (one lost report halves it): it does not count. */
		if (got < (uint64_t)FULL_MIN_CHUNKS * c->mss)
			break;
		if (c->btl_bw >= c->full_bw * FULL_GROWTH) {
			c->full_bw = c->btl_bw;
			c->full_bw_count = 0;
		} else if (!app_limited && ++c->full_bw_count >= FULL_ROUNDS) {
			c->mode = LOBBY_CC_DRAIN;
			c->pacing_gain = DRAIN_GAIN;
			c->cwnd_gain = STARTUP_GAIN;
		}
		break;
	case LOBBY_CC_PROBE_BW:
		/* Two rounds a phase: a delivery sample lags the send by a
		 * round trip and a report, so a one-round probe would be
		 * measured half at the old rate and never raise the max (with
		 * random loss the estimate would then only sink). */
		if (c->round % PHASE_ROUNDS == 0) {
			c->cycle = (c->cycle + 1) % 8;
			c->pacing_gain = cycle_gain[c->cycle];
		}
		break;
	case LOBBY_CC_DRAIN:
	case LOBBY_CC_PROBE_RTT:
		break;
	}
}

void lobby_cc_on_ack(struct lobby_cc *c, uint64_t delivered, uint64_t lost, uint64_t interval_us,
		     uint64_t rtt_us, uint64_t inflight, bool app_limited, uint64_t now_us)
{
	uint64_t round_len;
	double rate;

	c->round_bytes += delivered;
	c->round_lost += lost;
	if (rtt_us > 0)
		c->srtt_us = c->srtt_us == 0 ? rtt_us : (7 * c->srtt_us + rtt_us) / 8;
	if (interval_us > 0) {
		c->ack_us = c->ack_us == 0 ? interval_us : (7 * c->ack_us + interval_us) / 8;
		if (delivered > 0) {
			rate = (double)delivered * 1e6 / (double)interval_us;
			/* An app-limited sample says little about the path,
			 * unless it is larger than what we believe. */
			if ((!app_limited || rate > c->btl_bw) &&
			    rate > c->round_max[c->round % LOBBY_CC_ROUNDS]) {
				c->round_max[c->round % LOBBY_CC_ROUNDS] = rate;
				if (rate > c->btl_bw)
					c->btl_bw = rate;
			}
		}
	}
	if (rtt_us > 0 && (c->rt_prop_us == 0 || rtt_us <= c->rt_prop_us)) {
		c->rt_prop_us = rtt_us;
		c->rt_prop_at = now_us;
	}
	round_len = c->rt_prop_us > c->ack_us ? c->rt_prop_us : c->ack_us;
	if (round_len < ROUND_MIN_US)
		round_len = ROUND_MIN_US;
	if (now_us - c->round_at >= round_len)
		end_round(c, app_limited, now_us);
	/* Drain empties the queue startup built, then it cruises. */
	if (c->mode == LOBBY_CC_DRAIN && (double)inflight <= bdp(c))
		enter_probe_bw(c);
	if (c->mode == LOBBY_CC_PROBE_RTT && now_us >= c->probe_rtt_until) {
		c->rt_prop_at = now_us;
		enter_probe_bw(c);
	}
	/* The minimum RTT is stale: drain the queue a moment to see it. */
	if (c->mode != LOBBY_CC_PROBE_RTT && c->mode != LOBBY_CC_STARTUP &&
	    now_us - c->rt_prop_at > RTPROP_US) {
		c->mode = LOBBY_CC_PROBE_RTT;
		c->pacing_gain = 1;
		c->probe_rtt_until = now_us + PROBE_RTT_US;
		c->rt_prop_us = 0; /* the next sample is the new minimum */
	}
	outputs(c);
}

uint64_t lobby_cc_credit(struct lobby_cc *c, uint64_t inflight, uint64_t now_us)
{
	double dt = now_us > c->credit_at ? (double)(now_us - c->credit_at) : 0, cap, room;

	/* At most 2 ms of the rate, or as long as the pump was away (up to
	 * 10 ms): a loop that wakes late must not lose the rate. */
	cap = c->pacing_rate *
	      (dt > CREDIT_US ? (dt < CREDIT_MAX_US ? dt : CREDIT_MAX_US) : CREDIT_US) / 1e6;
	if (cap < (double)(2 * c->mss))
		cap = (double)(2 * c->mss);
	c->credit += c->pacing_rate * dt / 1e6;
	c->credit_at = now_us;
	if (c->credit > cap)
		c->credit = cap;
	if (c->credit < 0)
		return 0;
	room = inflight >= c->cwnd ? 0 : (double)(c->cwnd - inflight);
	return (uint64_t)(c->credit < room ? c->credit : room);
}

void lobby_cc_sent(struct lobby_cc *c, uint64_t bytes)
{
	c->credit -= (double)bytes;
}
