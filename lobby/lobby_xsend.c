/*
 * The host's save round (netpunch-wire.md §11, as lobby.py's host
 * transfer behaves): the save hashed on the worker first, then per target
 * fbegin every 0.2 s until an ack (or any fack), and a pump every
 * millisecond that sends at most 256 chunks to each: the holes the last
 * fack named first, then new chunks up to base + window; a rewind to base
 * after 0.5 s without feedback; the last chunk again every second to a
 * peer that holds everything but says nothing; failed after 30 s without
 * progress (300 s while it verifies with moving progress). A fack with a
 * lower base is a receiver starting over. Events at every 10 % of a
 * target's base, done on its fdone.
 *
 * A target whose join offered rally's extension (docs/transfer.md) gets its
 * own cut of the blob (61,440-byte chunks on loopback), an fbegin saying
 * so, and a paced pump: lobby_cc decides how many bytes may go, the holes
 * below the highest chunk it has seen go first (a retransmission again
 * only after a round trip), and its xstat reports feed the model. What it
 * already holds from a round it left (its fbegin_ack's have) is skipped.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <sodium.h>

#include "frame.h"
#include "lobby.h"
#include "lobby_bulk.h"
#include "lobby_cc.h"
#include "lobby_save.h"
#include "lobby_xfer.h"
#include "lobby_xprog.h"
#include "log.h"

#define PUMP_MS      (1)
#define DGRAM_HDR    (NP1_HDR + NPF1_HDR)
#define RALLY_BUDGET (512) /* datagrams per rally peer per pump */
#define RING         LOBBY_XFER_RALLY_RING
#define RETX_FLAG    (1ULL) /* the low bit of a send time: a retransmission */
#define HIST         (4)    /* reports a delivery-rate sample spans */

struct rep {
	long long got, hs, t_us;
};

struct tgt {
	struct addr addr;
	char name[LOBBY_NAME_MAX * 4 + 1];
	enum lobby_xsend_state state;
	bool ready, verifying, nudged;
	bool tcp;        /* a bulk stream carries it */
	bool push_tried; /* we dialled its listener (a relay taking our upload) */
	struct lobby_bulk_push *push;
	bool streamed;      /* one did, some time in this round */
	long long tcp_done; /* when the stream ended (0: not yet) */
	/* Its cut of the blob: the round's, or a rally joiner's own. */
	bool rally;
	uint64_t chunk, total_chunks;
	unsigned window, fb_ms;
	uint64_t base, next;
	uint64_t sent_max;                    /* one past the highest seq sent over UDP */
	unsigned rewinds;                     /* restarts from a lower base */
	uint32_t holes[LOBBY_XFER_MAX_HOLES]; /* ascending, >= base */
	size_t nholes;
	long long last_fack, last_resend, last_advance, last_begin, last_nudge;
	bool has_progress;
	long long progress;
	int last_pct;
	/* rally's pump. */
	struct lobby_cc cc;
	uint64_t *sent_us; /* RING send times, by seq % RING */
	uint8_t *held;     /* what a resuming receiver holds already */
	uint64_t resumed;  /* chunks it kept */
	long long hs;      /* the highest seq it has seen */
	bool x_have;
	long long x_got, x_lost, x_hs, x_t_us; /* its last xstat */
	struct rep hist[HIST];                 /* the ones before */
	unsigned nhist;
	uint64_t retx_out; /* retransmissions since */
	uint64_t srtt_us, rttvar_us;
	double loss; /* of first transmissions, smoothed */
	bool app_limited;
	uint64_t gone;               /* presumed lost below this (presume_lost) */
	uint64_t moved_us;           /* when its highest seen or base last moved */
	uint64_t x_at_us;            /* when its last report came */
	uint64_t begin_us;           /* the last fbegin sent */
	uint64_t dbg_at;             /* the last debug line */
	long long began_ms, mark_ms; /* for the events' rate */
	uint64_t mark_bytes;
	uint64_t dgrams, retx, tails; /* counters for the log */
	/* --max-rate on netpunch's pump: bytes it may send now. */
	double bucket;
	uint64_t bucket_at;
};

struct hash_job {
	struct lobby_xsend *x; /* NULL once the round is gone */
	struct lobby_save *src;
	int r;
};

struct lobby_xsend {
	struct lobby *l;
	struct lobby_xsend_ops ops;
	struct lobby_save *src;
	struct hash_job *job;
	uint32_t sid;
	uint64_t chunk; /* netpunch's rule, for every target without rally */
	bool started, resolved;
	struct lobby_bulk *bulk;
	char token[BULK_TOKEN_LEN + 1];
	size_t n;
	struct tgt *t;
	struct ev_timer pump;
	uint8_t dgram[DGRAM_HDR + LOBBY_XFER_CHUNK_RALLY_LO];
};

static long long now_ms(const struct lobby_xsend *x)
{
	return ev_now(x->l->loop);
}

static struct tgt *find(const struct lobby_xsend *x, const struct addr *a)
{
	for (size_t i = 0; i < x->n; i++) {
		if (addr_equal(&x->t[i].addr, a))
			return &x->t[i];
	}
	return NULL;
}

/* ---- events ---- */

static void emit(struct lobby_xsend *x, const struct tgt *t, int pct, const char *state,
		 const char *detail)
{
	struct lobby_event e = {.type = LOBBY_EV_TRANSFER};

	e.transfer.send = true;
	e.transfer.peer = t->name;
	e.transfer.pct = pct;
	e.transfer.state = state;
	e.transfer.detail = detail;
	lobby_ipc_emit(x->l, &e);
}

static void settle(struct lobby_xsend *x, struct tgt *t, enum lobby_xsend_state st,
		   const char *state, const char *detail)
{
	char a[ADDR_STRLEN];

	t->state = st;
	emit(x, t, -1, state, detail);
	lobby_xprog_row(
		x->l, t->name,
		st == LOBBY_XSEND_DONE
			? x->src->total
			: (t->base * t->chunk < x->src->total ? t->base * t->chunk : x->src->total),
		x->src->total, state);
	log_info("xfer-send-%s sid=%u peer=%s name=\"%s\"%s%s%s", state, x->sid,
		 addr_str(&t->addr, a, sizeof(a)), t->name, detail != NULL ? " detail=\"" : "",
		 detail != NULL ? detail : "", detail != NULL ? "\"" : "");
}

/* Each 10 % bucket of a target's base crossed. */
static void progress(struct lobby_xsend *x, struct tgt *t)
{
	uint64_t total = x->src->total, have = t->base * t->chunk;
	int pct = total == 0 ? 100 : (int)((have < total ? have : total) * 100 / total);
	char text[40];

	struct lobby_event e = {.type = LOBBY_EV_TRANSFER};

	lobby_xprog_row(x->l, t->name, have < total ? have : total, total, NULL);
	if (t->last_pct >= 0 && pct / 10 <= t->last_pct / 10)
		return;
	t->last_pct = pct;
	e.transfer.send = true;
	e.transfer.peer = t->name;
	e.transfer.pct = pct;
	if (t->mark_ms == 0)
		t->mark_ms = t->began_ms;
	lobby_xfer_rate(&e, have < total ? have : total, total, &t->mark_ms, &t->mark_bytes,
			now_ms(x));
	lobby_ipc_emit(x->l, &e);
	snprintf(text, sizeof(text), "receiving save %d%%", pct);
	if (x->ops.stage != NULL)
		x->ops.stage(x->l, &t->addr, text);
}

/* ---- the wire ---- */

static void send_begin(struct lobby_xsend *x, struct tgt *t)
{
	struct lobby_msg_file files[LOBBY_SAVE_FILES];
	struct lobby_msg m;

	for (size_t i = 0; i < x->src->n; i++)
		files[i] = (struct lobby_msg_file){x->src->f[i].wire, (long long)x->src->f[i].size,
						   x->src->f[i].sha256};
	lobby_msg_init(&m, LOBBY_MSG_FBEGIN);
	/* Our host cannot read which mods a save needs (modshare's catalogue
	 * is the game's): netpunch's "unknown" form, which its joiners take. */
	m.fbegin = (struct lobby_msg_fbegin){.sid = x->sid,
					     .total_bytes = (long long)x->src->total,
					     .chunk = (long long)t->chunk,
					     .total_chunks = (long long)t->total_chunks,
					     .nfiles = x->src->n,
					     .files = files,
					     .sha256 = x->src->sha256,
					     .kind = "save",
					     .mods = "[]",
					     .mods_unknown = true,
					     .has_tcp = !x->l->cfg.bulk_off,
					     .tcp_port =
						     x->bulk != NULL ? lobby_bulk_port(x->bulk) : 0,
					     .tcp_token = x->token,
					     .has_rally = t->rally,
					     .rally_v = LOBBY_XFER_RALLY_V,
					     .rally_window = t->window,
					     .rally_fb_ms = t->fb_ms};
	lobby_net_send_msg(x->l, &t->addr, &m);
	t->last_begin = now_ms(x);
	if (t->begin_us == 0)
		t->begin_us =
			ev_monotonic_us(); /* the first: a lost one makes the rtt longer, not shorter */
}

/* One chunk as a plain D frame: "NP1:D" "NPF1" sid seq bytes. */
static int send_chunk(struct lobby_xsend *x, struct tgt *t, uint64_t seq)
{
	uint64_t off = seq * t->chunk;
	size_t len = x->src->total - off < t->chunk ? (size_t)(x->src->total - off) : t->chunk;
	ssize_t r = lobby_save_read(x->src, off, x->dgram + DGRAM_HDR, len);

	if (r < 0)
		return (int)r;
	memcpy(x->dgram, NP1_MAGIC, 4);
	x->dgram[4] = NP1_DATA;
	npf1_build(x->dgram + NP1_HDR, NPF1_HDR, x->sid, (uint32_t)seq, NULL, 0);
	if (lobby_net_send_raw(x->l->net, &t->addr, x->dgram, DGRAM_HDR + len) >= 0)
		x->l->ctr.save_bytes_udp += len;
	if (seq + 1 > t->sent_max)
		t->sent_max = seq + 1;
	t->dgrams++;
	return 0;
}

/* ---- the pump ---- */

static bool all_settled(const struct lobby_xsend *x)
{
	for (size_t i = 0; i < x->n; i++) {
		if (x->t[i].state == LOBBY_XSEND_ACTIVE)
			return false;
	}
	return true;
}

static void check_resolved(struct lobby_xsend *x)
{
	if (x->resolved || !all_settled(x))
		return;
	x->resolved = true;
	ev_timer_stop(x->l->loop, &x->pump);
	if (x->ops.resolved != NULL)
		x->ops.resolved(x->l);
}

static bool is_held(const struct tgt *t, uint64_t seq)
{
	return t->held != NULL && ((t->held[seq / 8] >> (seq % 8)) & 1);
}

/* What is out: the chunks past the highest it has seen, and the
 * retransmissions since its last report. */
static uint64_t inflight(const struct tgt *t)
{
	uint64_t seen = (uint64_t)(t->hs + 1) > t->base ? (uint64_t)(t->hs + 1) : t->base;
	uint64_t out;

	if (t->gone > seen)
		seen = t->gone;
	out = t->next > seen ? t->next - seen : 0;

	return (out + t->retx_out) * t->chunk;
}

/* One rally chunk: its send time kept (the low bit: a retransmission). */
static int send_rally(struct lobby_xsend *x, struct tgt *t, uint64_t seq, bool retx,
		      uint64_t now_us)
{
	int r = send_chunk(x, t, seq);

	if (r == 0)
		t->sent_us[seq % RING] = (now_us & ~RETX_FLAG) | (retx ? RETX_FLAG : 0);
	return r;
}

/*
 * Holes are named only below the highest chunk the receiver has seen, so
 * the ones lost above it (the tail of a round, or a burst its socket
 * dropped) would never be, and would count as in flight for ever. A chunk
 * past the highest seen is presumed lost when a report came a round trip
 * and a feedback interval after it was sent and still had not seen it: it
 * goes to the holes (once: gone marks how far this went) and out of what
 * is in flight. The evidence is a report, not the clock: a receiver that
 * stalls (no reports) holds its chunks in its queue, and they stay in
 * flight, so the window holds the sender back instead of flooding it.
 */
static void presume_lost(struct tgt *t, uint64_t hold, uint64_t now_us)
{
	uint64_t q = (uint64_t)(t->hs + 1) > t->base ? (uint64_t)(t->hs + 1) : t->base;
	uint64_t seen_at = t->x_at_us;

	/* Nothing seen move for a while: what was presumed lost and resent
	 * may be lost again, so the scan starts over from the highest seen. */
	if (t->gone > q && now_us - t->moved_us > 2 * hold) {
		t->gone = q;
		t->moved_us = now_us;
	}
	if (t->gone > q)
		q = t->gone;
	if (seen_at == 0 || q >= t->next)
		return;
	for (; q < t->next && t->nholes < LOBBY_XFER_MAX_HOLES; q++) {
		uint64_t at = t->sent_us[q % RING] & ~RETX_FLAG;

		if (at + hold >= seen_at)
			break;
		if (!is_held(t, q))
			t->holes[t->nholes++] = (uint32_t)q;
	}
	if (q > t->gone) {
		t->gone = q;
		t->tails++;
	}
}

/*
 * rally's pump: as many bytes as lobby_cc allows now, the holes first (a
 * hole retransmitted less than a round trip and a feedback interval ago
 * waits: its copy may still be on the way), then new chunks up to base +
 * window, skipping what a resuming receiver holds.
 */
static void pump_rally(struct lobby_xsend *x, struct tgt *t, long long now)
{
	uint64_t now_us = ev_monotonic_us();
	uint64_t c = t->chunk, spent = 0, credit, end;
	/* How long a chunk may take before it is given up (RFC 6298's RTO,
	 * with the feedback interval on top and 2 ms at least for the
	 * variance): a retransmission is not repeated sooner, a chunk past
	 * the highest seen not presumed lost sooner. */
	uint64_t var = 4 * t->rttvar_us > 2000 ? 4 * t->rttvar_us : 2000;
	uint64_t hold = t->srtt_us + var + t->fb_ms * 1000ULL;
	size_t keep = 0;
	unsigned n = 0;

	if (now - t->last_fack > LOBBY_XFER_RESEND_MS &&
	    now - t->last_resend > LOBBY_XFER_RESEND_MS) {
		/* Nothing heard for 0.5 s: from base again, nothing counted
		 * as out. */
		t->next = t->base;
		t->last_resend = now;
		t->hs = (long long)t->base - 1;
		t->gone = t->base;
		t->retx_out = 0;
	}
	presume_lost(t, hold, now_us);
	credit = lobby_cc_credit(&t->cc, inflight(t), now_us);
	if (log_enabled(LOG_LEVEL_DEBUG) && now_us - t->dbg_at >= 100000) {
		t->dbg_at = now_us;
		log_debug("xfer-send-cc name=\"%s\" base=%llu next=%llu hs=%lld holes=%zu "
			  "inflight=%llu cwnd=%llu pace=%.0f btl=%.0f rtprop_us=%llu srtt_us=%llu "
			  "mode=%s",
			  t->name, (unsigned long long)t->base, (unsigned long long)t->next, t->hs,
			  t->nholes, (unsigned long long)inflight(t),
			  (unsigned long long)t->cc.cwnd, t->cc.pacing_rate, t->cc.btl_bw,
			  (unsigned long long)t->cc.rt_prop_us, (unsigned long long)t->srtt_us,
			  lobby_cc_mode_name(t->cc.mode));
	}
	for (size_t k = 0; k < t->nholes; k++) {
		uint64_t s = t->holes[k], at = t->sent_us[s % RING];

		if (s < t->base || s >= t->total_chunks || is_held(t, s))
			continue;
		if (((at & RETX_FLAG) && now_us - at < hold) || spent + c > credit ||
		    n >= RALLY_BUDGET) {
			t->holes[keep++] = (uint32_t)s;
			continue;
		}
		if (send_rally(x, t, s, true, now_us) < 0)
			goto broken;
		spent += c;
		n++;
		t->retx_out++;
		t->retx++;
	}
	t->nholes = keep;
	end = t->base + t->window < t->total_chunks ? t->base + t->window : t->total_chunks;
	if (t->next < t->base)
		t->next = t->base;
	while (t->next < end && spent + c <= credit && n < RALLY_BUDGET) {
		if (!is_held(t, t->next)) {
			if (send_rally(x, t, t->next, false, now_us) < 0)
				goto broken;
			spent += c;
			n++;
		}
		t->next++;
	}
	/* Credit left over: the sender, not the path, was the limit. */
	t->app_limited = spent + c <= credit;
	lobby_cc_sent(&t->cc, spent);
	return;
broken:
	settle(x, t, LOBBY_XSEND_FAILED, "failed", "the save changed while it was sent");
}

/* netpunch's budget of datagrams, under --max-rate: what the bucket holds
 * (refilled at the rate, at most 2 ms of it, at least one chunk). */
static int capped_budget(struct lobby_xsend *x, struct tgt *t)
{
	uint64_t rate = x->l->cfg.max_rate, now_us;
	double cap;
	int n;

	if (rate == 0)
		return LOBBY_XFER_BUDGET;
	now_us = ev_monotonic_us();
	cap = (double)rate * 0.002;
	if (cap < (double)t->chunk)
		cap = (double)t->chunk;
	if (t->bucket_at != 0)
		t->bucket += (double)rate * (double)(now_us - t->bucket_at) / 1e6;
	t->bucket_at = now_us;
	if (t->bucket > cap)
		t->bucket = cap;
	n = (int)(t->bucket / (double)t->chunk);
	return n < LOBBY_XFER_BUDGET ? n : LOBBY_XFER_BUDGET;
}

static void pump_one(struct lobby_xsend *x, struct tgt *t, long long now)
{
	int budget = LOBBY_XFER_BUDGET, start;
	uint64_t end;
	size_t k;

	if (now - t->last_advance > (t->verifying && t->base >= t->total_chunks
					     ? LOBBY_XFER_VERIFY_MS
					     : LOBBY_XFER_TIMEOUT_MS)) {
		settle(x, t, LOBBY_XSEND_FAILED, "failed", "timed out");
		return;
	}
	if (!t->ready || t->total_chunks == 0) {
		/* A rally joiner acks within a feedback interval: its fbegin
		 * goes again sooner than netpunch's 0.2 s. */
		if (now - t->last_begin >=
		    (t->rally ? 2 * (long long)t->fb_ms : LOBBY_XFER_BEGIN_MS))
			send_begin(x, t);
		return;
	}
	if (t->base >= t->total_chunks) {
		/* Holds everything, says nothing: the last chunk again. */
		if (!t->verifying && (!t->nudged || now - t->last_nudge >= LOBBY_XFER_NUDGE_MS)) {
			t->nudged = true;
			t->last_nudge = now;
			send_chunk(x, t, t->total_chunks - 1);
			t->retx++; /* a repeat, counted as one */
		}
		return;
	}
	if (t->tcp)
		return; /* the stream carries it */
	if (t->rally) {
		pump_rally(x, t, now);
		return;
	}
	if (now - t->last_fack > LOBBY_XFER_RESEND_MS &&
	    now - t->last_resend > LOBBY_XFER_RESEND_MS) {
		t->next = t->base;
		t->last_resend = now;
	}
	budget = start = capped_budget(x, t);
	/* The holes first, then new chunks. */
	for (k = 0; k < t->nholes && budget > 0; k++) {
		uint64_t s = t->holes[k];

		if (s < t->base || s >= t->total_chunks)
			continue;
		if (send_chunk(x, t, s) < 0)
			goto broken;
		budget--;
	}
	memmove(t->holes, t->holes + k, (t->nholes - k) * sizeof(t->holes[0]));
	t->nholes -= k;
	end = t->base + t->window < t->total_chunks ? t->base + t->window : t->total_chunks;
	if (t->next < t->base)
		t->next = t->base;
	while (t->next < end && budget > 0) {
		if (send_chunk(x, t, t->next) < 0)
			goto broken;
		t->next++;
		budget--;
	}
	t->bucket -= (double)(start - budget) * (double)t->chunk;
	return;
broken:
	/* The file is shorter than it was when hashed: nobody can verify. */
	settle(x, t, LOBBY_XSEND_FAILED, "failed", "the save changed while it was sent");
}

static void on_pump(struct ev_timer *timer, void *arg)
{
	struct lobby_xsend *x = arg;
	long long now = now_ms(x);

	for (size_t i = 0; i < x->n; i++) {
		if (x->t[i].state == LOBBY_XSEND_ACTIVE)
			pump_one(x, &x->t[i], now);
	}
	if (all_settled(x)) {
		check_resolved(x);
		return;
	}
	ev_timer_start(x->l->loop, timer, PUMP_MS, on_pump, x);
}

/* ---- feedback ---- */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* The fack's holes with base <= s < total, merged into the pending ones. */
static void merge_holes(struct tgt *t, const struct lobby_msg_fack *f)
{
	size_t n = 0;

	for (size_t i = 0; i < t->nholes; i++) {
		if (t->holes[i] >= t->base)
			t->holes[n++] = t->holes[i];
	}
	for (size_t i = 0; i < f->nnack && n < LOBBY_XFER_MAX_HOLES; i++) {
		if (f->nack[i] >= (long long)t->base && f->nack[i] < (long long)t->total_chunks)
			t->holes[n++] = (uint32_t)f->nack[i];
	}
	qsort(t->holes, n, sizeof(t->holes[0]), cmp_u32);
	t->nholes = 0;
	for (size_t i = 0; i < n; i++) {
		if (t->nholes == 0 || t->holes[t->nholes - 1] != t->holes[i])
			t->holes[t->nholes++] = t->holes[i];
	}
}

static void on_fack(struct lobby_xsend *x, struct tgt *t, const struct lobby_msg_fack *f)
{
	long long now = now_ms(x);
	uint64_t base;

	/* A base outside the round is not a receiver of ours; nor is one past
	 * what it could hold: what we sent it over UDP, what it kept from a
	 * round it left, anything while a stream runs. */
	if (f->base < 0 || f->base > (long long)t->total_chunks)
		return;
	base = (uint64_t)f->base;
	if (base > t->base && base > t->sent_max && !t->streamed &&
	    (t->held == NULL || !is_held(t, base - 1)))
		return;
	t->ready = true;
	t->last_fack = now;
	/* The stream is over and the receiver still lacks some: UDP fills the
	 * rest (after 5 s, with no advance for 2 s, as netpunch hands back). */
	if (t->tcp && t->tcp_done != 0 && base < t->total_chunks && now - t->tcp_done > 5000 &&
	    now - t->last_advance > 2000) {
		log_info("xfer-send-tcp-handback sid=%u name=\"%s\" base=%llu", x->sid, t->name,
			 (unsigned long long)base);
		t->tcp = false;
	}
	if (base > t->base) {
		t->base = base;
		if (t->next < base)
			t->next = base;
		t->last_advance = now;
	} else if (base >= t->total_chunks) {
		t->verifying = f->verifying;
		if (f->has_progress && (!t->has_progress || f->progress != t->progress))
			t->last_advance = now;
		t->has_progress = f->has_progress;
		t->progress = f->progress;
	} else if (base < t->base) {
		/* The receiver started over (a hash mismatch): it may do so
		 * three times; a receiver that keeps doing it is not honest. */
		if (++t->rewinds > LOBBY_XFER_MAX_REWINDS) {
			settle(x, t, LOBBY_XSEND_FAILED, "failed", "restarted too often");
			return;
		}
		log_info("xfer-send-rewind sid=%u name=\"%s\" from=%llu to=%llu", x->sid, t->name,
			 (unsigned long long)t->base, (unsigned long long)base);
		t->base = t->next = base;
		t->nholes = 0;
		t->last_advance = now;
		t->last_pct = -1;
		t->nudged = false;
		t->hs = (long long)base - 1;
		t->x_have = false;
		free(t->held);
		t->held = NULL;
	}
	merge_holes(t, f);
	progress(x, t);
}

/*
 * A rally receiver's report: a delivery-rate sample (chunks it got since
 * its last report, over its own clock's interval), a round trip (the send
 * time of the highest chunk it has seen, less how long it held it), the
 * share of first transmissions it found missing (for the log: lobby_cc
 * does not slow down for loss, docs/transfer.md says why).
 */
static void on_xstat(struct tgt *t, const struct lobby_msg_xstat *s)
{
	uint64_t now_us = ev_monotonic_us(), delivered = 0, lost = 0, interval = 0, rtt = 0;

	if (!t->rally || t->sent_us == NULL || s->t_us < 0 || s->got < 0 ||
	    s->got > (long long)t->total_chunks || s->hs < -1 || s->hs >= (long long)t->sent_max ||
	    s->lost < 0 || s->age_us < 0 || s->age_us > 10000000)
		return;
	if (t->x_have && s->t_us <= t->x_t_us)
		return; /* an old one, reordered */
	if (t->x_have) {
		/* The sample spans the last HIST reports: over one interval a
		 * slow link delivers a handful of chunks, and the max filter
		 * would take the noise for the rate. */
		const struct rep *b = &t->hist[t->nhist >= HIST ? t->nhist % HIST : 0];

		if (s->got > b->got)
			delivered = (uint64_t)(s->got - b->got) * t->chunk;
		interval = s->t_us > b->t_us ? (uint64_t)(s->t_us - b->t_us) : 0;
		/* BBR's rule: over the longer of the receiver's interval and the
		 * one these chunks were sent in, so a burst the receiver drains
		 * from its queue does not look like a faster path. */
		if (s->hs > b->hs && b->hs >= 0 && (uint64_t)b->hs + RING > t->next) {
			uint64_t a = t->sent_us[b->hs % RING] & ~RETX_FLAG;
			uint64_t z = t->sent_us[s->hs % RING] & ~RETX_FLAG;

			if (a != 0 && z > a && z - a > interval)
				interval = z - a;
		}
		if (s->lost > t->x_lost)
			lost = (uint64_t)(s->lost - t->x_lost) * t->chunk;
		if (s->hs > t->x_hs && s->lost >= t->x_lost) {
			double sample = (double)(s->lost - t->x_lost) / (double)(s->hs - t->x_hs);

			t->loss = 0.9 * t->loss + 0.1 * (sample < 1 ? sample : 1);
		}
	}
	t->hist[t->nhist % HIST] = (struct rep){s->got, s->hs, s->t_us};
	t->nhist++;
	/* Karn: a chunk sent more than once gives no round trip (which copy
	 * came is not known). */
	if (s->hs >= 0 && (uint64_t)s->hs + RING > t->next &&
	    !(t->sent_us[s->hs % RING] & RETX_FLAG)) {
		uint64_t at = t->sent_us[s->hs % RING];

		if (at != 0 && now_us > at + (uint64_t)s->age_us)
			rtt = now_us - at - (uint64_t)s->age_us;
	}
	if (rtt > 0 && t->srtt_us == 0) {
		t->srtt_us = rtt;
		t->rttvar_us = rtt / 2;
	} else if (rtt > 0) {
		/* RFC 6298's smoothing. */
		uint64_t d = rtt > t->srtt_us ? rtt - t->srtt_us : t->srtt_us - rtt;

		t->rttvar_us = (3 * t->rttvar_us + d) / 4;
		t->srtt_us = (7 * t->srtt_us + rtt) / 8;
	}
	if (s->hs > t->hs) {
		t->hs = s->hs;
		t->moved_us = now_us;
	}
	t->retx_out = 0;
	t->x_at_us = now_us;
	t->x_have = true;
	t->x_got = s->got;
	t->x_lost = s->lost;
	t->x_hs = s->hs;
	t->x_t_us = s->t_us;
	lobby_cc_on_ack(&t->cc, delivered, lost, interval, rtt, inflight(t), t->app_limited,
			now_us);
}

/* A resuming receiver's have: [from, to) pairs it holds already. */
static void take_have(struct lobby_xsend *x, struct tgt *t, const struct lobby_msg_fbegin_ack *a)
{
	uint64_t kept = 0;

	if (!t->rally || a->nhave == 0 || t->held != NULL || t->base > 0 || t->sent_max > 0)
		return;
	t->held = calloc(1, (size_t)(t->total_chunks / 8 + 1));
	if (t->held == NULL)
		return; /* it gets all of it again */
	for (size_t i = 0; i + 1 < a->nhave; i += 2) {
		long long from = a->have[i], to = a->have[i + 1];

		if (from < 0 || to > (long long)t->total_chunks || from >= to)
			continue;
		for (long long s = from; s < to; s++) {
			if (!is_held(t, (uint64_t)s)) {
				t->held[s / 8] |= (uint8_t)(1u << (s % 8));
				kept++;
			}
		}
	}
	t->resumed = kept;
	while (t->next < t->total_chunks && is_held(t, t->next))
		t->next++;
	t->hs = (long long)t->next - 1; /* what it holds is not in flight */
	log_info("xfer-send-resume sid=%u name=\"%s\" kept=%llu of=%llu", x->sid, t->name,
		 (unsigned long long)kept, (unsigned long long)t->total_chunks);
}

void lobby_xsend_on_msg(struct lobby_xsend *x, const struct addr *from, const struct lobby_msg *m)
{
	struct tgt *t = find(x, from);

	if (t == NULL || t->state != LOBBY_XSEND_ACTIVE || !x->started)
		return;
	switch (m->type) {
	case LOBBY_MSG_FBEGIN_ACK:
		if (m->fbegin_ack.sid != x->sid)
			return;
		if (m->fbegin_ack.has_rally)
			take_have(x, t, &m->fbegin_ack);
		/* A receiver with a listener (a relay taking our upload, netpunch's
		 * or ours): we dial it and push (lobby.py _tcp_push). Once. */
		if (m->fbegin_ack.has_tcp_port && m->fbegin_ack.tcp_port >= 1 &&
		    m->fbegin_ack.tcp_port <= 65535 && x->bulk == NULL && !x->l->cfg.bulk_off &&
		    !t->tcp && !t->push_tried && x->src->total > 0) {
			struct addr to = t->addr;

			t->push_tried = true;
			addr_set_port(&to, (uint16_t)m->fbegin_ack.tcp_port);
			t->push = lobby_bulk_push_start(x->l, &to, x, (int)(t - x->t), x->sid,
							x->token, t->name);
		}
		if (t->rally && !t->ready && t->begin_us != 0)
			lobby_cc_seed(&t->cc, ev_monotonic_us() - t->begin_us);
		t->ready = true;
		return;
	case LOBBY_MSG_XSTAT:
		if (m->xstat.sid == x->sid)
			on_xstat(t, &m->xstat);
		return;
	case LOBBY_MSG_FACK:
		if (m->fack.sid == x->sid)
			on_fack(x, t, &m->fack);
		return;
	case LOBBY_MSG_FDONE:
		if (m->fdone.sid != x->sid)
			return;
		if (m->fdone.ok) {
			if (t->rally)
				log_info(
					"xfer-send-stats sid=%u name=\"%s\" chunk=%llu dgrams=%llu "
					"retx=%llu tails=%llu resumed=%llu srtt_us=%llu rate=%.0f "
					"loss=%.3f mode=%s",
					x->sid, t->name, (unsigned long long)t->chunk,
					(unsigned long long)t->dgrams, (unsigned long long)t->retx,
					(unsigned long long)t->tails,
					(unsigned long long)t->resumed,
					(unsigned long long)t->srtt_us, t->cc.btl_bw, t->loss,
					lobby_cc_mode_name(t->cc.mode));
			settle(x, t, LOBBY_XSEND_DONE, "done", NULL);
		} else if (m->fdone.final)
			settle(x, t, LOBBY_XSEND_FAILED, "failed", "could not verify the file");
		check_resolved(x);
		return;
	default:
		return;
	}
}

void lobby_xsend_peer_gone(struct lobby_xsend *x, const struct addr *peer)
{
	struct tgt *t = find(x, peer);

	if (t == NULL || t->state != LOBBY_XSEND_ACTIVE)
		return;
	settle(x, t, LOBBY_XSEND_DROPPED, "dropped", "dropped mid-transfer");
	check_resolved(x);
}

bool lobby_xsend_active(const struct lobby_xsend *x, const struct addr *peer)
{
	const struct tgt *t = x != NULL ? find(x, peer) : NULL;

	return t != NULL && t->state == LOBBY_XSEND_ACTIVE;
}

enum lobby_xsend_state lobby_xsend_state_of(const struct lobby_xsend *x, const struct addr *peer)
{
	const struct tgt *t = find(x, peer);

	return t != NULL ? t->state : LOBBY_XSEND_DROPPED;
}

size_t lobby_xsend_targets(const struct lobby_xsend *x)
{
	return x->n;
}

const char *lobby_xsend_target_name(const struct lobby_xsend *x, size_t i)
{
	return x->t[i].name;
}

enum lobby_xsend_state lobby_xsend_target_state(const struct lobby_xsend *x, size_t i)
{
	return x->t[i].state;
}

const struct addr *lobby_xsend_target_addr(const struct lobby_xsend *x, size_t i)
{
	return &x->t[i].addr;
}

/* ---- the bulk stream ---- */

int lobby_xsend_tcp_claim(struct lobby_xsend *x, const char *name, size_t name_len,
			  const struct addr *src)
{
	struct addr_ip a, b;
	int by_ip = -1, n_ip = 0;

	if (!x->started)
		return -1;
	for (size_t i = 0; i < x->n; i++) {
		struct tgt *t = &x->t[i];

		if (t->state != LOBBY_XSEND_ACTIVE || t->tcp)
			continue;
		if (strlen(t->name) == name_len && memcmp(t->name, name, name_len) == 0) {
			by_ip = (int)i;
			n_ip = 1;
			break;
		}
		addr_to_ip(&t->addr, &a);
		addr_to_ip(src, &b);
		if (memcmp(&a, &b, sizeof(a)) == 0) {
			by_ip = (int)i;
			n_ip++;
		}
	}
	/* By name; else the one target at that IP, if there is just one. */
	if (n_ip != 1)
		return -1;
	x->t[by_ip].tcp = true;
	x->t[by_ip].streamed = true;
	x->t[by_ip].ready = true;
	x->t[by_ip].tcp_done = 0;
	emit(x, &x->t[by_ip], -1, "tcp", NULL);
	log_info("xfer-send-tcp sid=%u name=\"%s\"", x->sid, x->t[by_ip].name);
	return by_ip;
}

void lobby_xsend_tcp_start(struct lobby_xsend *x, int target)
{
	struct tgt *t = &x->t[target];

	t->tcp = true;
	t->streamed = true;
	t->ready = true;
	t->tcp_done = 0;
	emit(x, t, -1, "tcp", NULL);
	log_info("xfer-send-tcp sid=%u name=\"%s\" how=push", x->sid, t->name);
}

struct lobby_save *lobby_xsend_source(struct lobby_xsend *x)
{
	return x->src;
}

void lobby_xsend_tcp_ended(struct lobby_xsend *x, int target, bool ok, uint64_t bytes)
{
	struct tgt *t = &x->t[target];

	log_info("xfer-send-tcp-%s sid=%u name=\"%s\" bytes=%llu", ok ? "sent" : "broke", x->sid,
		 t->name, (unsigned long long)bytes);
	if (ok)
		t->tcp_done = now_ms(x);
	else
		t->tcp = false; /* the pump resumes from the receiver's base */
}

/* ---- the round ---- */

/* §11: 8,192-byte chunks when every target is on 127.x, else 1,350 (the
 * rally joiners have their own cut and do not count). */
static uint64_t pick_chunk(const struct lobby_xsend *x)
{
	for (size_t i = 0; i < x->n; i++) {
		if (x->t[i].rally)
			continue;
		if (!addr_is_loopback(&x->t[i].addr) || !addr_is_v4(&x->t[i].addr))
			return LOBBY_XFER_CHUNK_DATA;
	}
	return LOBBY_XFER_CHUNK_LOCAL;
}

/* A target's cut: a rally joiner on loopback takes 60 KiB chunks and a
 * wider window; anyone else the round's, by netpunch's rule. */
static void cut(struct lobby_xsend *x, struct tgt *t, uint64_t now_us)
{
	if (t->rally && addr_is_loopback(&t->addr))
		t->chunk = LOBBY_XFER_CHUNK_RALLY_LO;
	else if (t->rally)
		t->chunk = LOBBY_XFER_CHUNK_DATA;
	else
		t->chunk = x->chunk;
	t->total_chunks = (x->src->total + t->chunk - 1) / t->chunk;
	t->window = lobby_xfer_window((long long)t->chunk);
	t->hs = -1;
	if (!t->rally)
		return;
	t->sent_us = calloc(RING, sizeof(*t->sent_us));
	if (t->sent_us == NULL) {
		/* No memory for the pacer: netpunch's pump, netpunch's cut. */
		t->rally = false;
		t->chunk = x->chunk;
		t->total_chunks = (x->src->total + t->chunk - 1) / t->chunk;
		t->window = lobby_xfer_window((long long)t->chunk);
		return;
	}
	t->window = LOBBY_XFER_RALLY_WINDOW;
	/* On loopback rounds are as short as the feedback: more of it. */
	t->fb_ms = addr_is_loopback(&t->addr) ? LOBBY_XFER_RALLY_FB_LO_MS : LOBBY_XFER_RALLY_FB_MS;
	lobby_cc_init(&t->cc, t->chunk, t->fb_ms * 1000ULL, x->l->cfg.max_rate, now_us);
}

static void begin(struct lobby_xsend *x)
{
	long long now = now_ms(x);
	uint64_t now_us = ev_monotonic_us();

	x->started = true;
	x->chunk = pick_chunk(x);
	for (size_t i = 0; i < x->n; i++)
		cut(x, &x->t[i], now_us);
	log_info("xfer-send-begin sid=%u bytes=%llu chunk=%llu peers=%zu", x->sid,
		 (unsigned long long)x->src->total, (unsigned long long)x->chunk, x->n);
	for (size_t i = 0; i < x->n; i++) {
		x->t[i].began_ms = now;
		x->t[i].last_advance = x->t[i].last_fack = x->t[i].last_resend = now;
		x->t[i].last_begin = now - LOBBY_XFER_BEGIN_MS;
	}
	if (x->bulk != NULL)
		lobby_bulk_expect(x->bulk, x, x->sid, x->token);
	on_pump(&x->pump, x);
}

static void hash_work(void *arg)
{
	struct hash_job *j = arg;

	j->r = lobby_save_hash(j->src);
}

static void hash_done(void *arg, bool cancelled)
{
	struct hash_job *j = arg;
	struct lobby_xsend *x = j->x;
	char detail[160];

	if (x == NULL || cancelled) {
		lobby_save_close(j->src);
		free(j->src);
		free(j);
		return;
	}
	x->job = NULL;
	if (j->r < 0) {
		snprintf(detail, sizeof(detail), "save transfer failed: cannot read the save: %s",
			 strerror(-j->r));
		free(j);
		for (size_t i = 0; i < x->n; i++)
			x->t[i].state = LOBBY_XSEND_FAILED;
		x->resolved = true;
		if (x->ops.aborted != NULL)
			x->ops.aborted(x->l, detail);
		return;
	}
	free(j);
	begin(x);
}

/* lobby.py: the low 32 bits of unix milliseconds. */
static uint32_t new_sid(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (uint32_t)(((unsigned long long)tv.tv_sec * 1000ULL +
			   (unsigned long long)tv.tv_usec / 1000ULL) &
			  0xffffffffULL);
}

struct lobby_xsend *lobby_xsend_start(struct lobby *l, const char *save_path,
				      const struct lobby_xsend_target *targets, size_t n,
				      const struct lobby_xsend_ops *ops, struct lobby_bulk *bulk,
				      char *err, size_t errsize)
{
	struct lobby_xsend *x = calloc(1, sizeof(*x));
	uint8_t tok[BULK_TOKEN_LEN / 2];
	int r;

	if (x == NULL) {
		snprintf(err, errsize, "out of memory");
		return NULL;
	}
	x->l = l;
	ev_timer_init(&x->pump);
	if ((x->src = calloc(1, sizeof(*x->src))) == NULL ||
	    (x->t = calloc(n > 0 ? n : 1, sizeof(*x->t))) == NULL) {
		snprintf(err, errsize, "out of memory");
		goto fail;
	}
	x->ops = *ops;
	x->n = n;
	r = lobby_save_open_source(x->src, save_path, err, errsize);
	if (r < 0)
		goto fail;
	for (size_t i = 0; i < n; i++) {
		x->t[i].addr = targets[i].addr;
		snprintf(x->t[i].name, sizeof(x->t[i].name), "%s", targets[i].name);
		x->t[i].state = LOBBY_XSEND_ACTIVE;
		x->t[i].last_pct = -1;
		x->t[i].rally = targets[i].rally;
	}
	x->sid = new_sid();
	x->bulk = bulk;
	/* A fresh token every round (bulk_tcp.py: 16 random bytes). */
	randombytes_buf(tok, sizeof(tok));
	sodium_bin2hex(x->token, sizeof(x->token), tok, sizeof(tok));
	x->job = calloc(1, sizeof(*x->job));
	if (x->job == NULL) {
		snprintf(err, errsize, "out of memory");
		goto fail;
	}
	x->job->x = x;
	x->job->src = x->src;
	if (ev_work_submit(l->loop, hash_work, hash_done, x->job) < 0) {
		snprintf(err, errsize, "cannot start hashing the save");
		free(x->job);
		x->job = NULL;
		goto fail;
	}
	log_info("xfer-send-hashing sid=%u bytes=%llu files=%zu", x->sid,
		 (unsigned long long)x->src->total, x->src->n);
	return x;
fail:
	lobby_xsend_free(x);
	return NULL;
}

void lobby_xsend_free(struct lobby_xsend *x)
{
	if (x == NULL)
		return;
	ev_timer_stop(x->l->loop, &x->pump);
	if (x->bulk != NULL)
		lobby_bulk_forget(x->bulk, x);
	if (x->job != NULL) {
		/* Hashing: the job closes the files when it is done. */
		x->job->x = NULL;
	} else if (x->src != NULL) {
		lobby_save_close(x->src);
		free(x->src);
	}
	for (size_t i = 0; x->t != NULL && i < x->n; i++) {
		lobby_bulk_push_free(x->t[i].push);
		free(x->t[i].sent_us);
		free(x->t[i].held);
	}
	free(x->t);
	free(x);
}
