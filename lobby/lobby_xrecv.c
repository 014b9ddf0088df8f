/*
 * The joiner's receiver (netpunch-wire.md §11, as lobby.py's receiver
 * behaves): fbegin checked before anything is allocated or written, chunks
 * written where they belong in temporaries beside the final names, a fack
 * every 50 ms (base, up to 128 holes in the window, verifying, progress),
 * the check on the worker (fsync, SHA-256 per file and of the blob), a
 * mismatch re-requested from base 0 up to three times, the files renamed
 * into place, then save_ready and fdone (every 0.2 s forty times, then every
 * second, and at once for any chunk that still comes).
 *
 * From a rally host (its fbegin carries rally, docs/transfer.md) the
 * feedback comes every 10 ms, its NACKs name only the holes below the
 * highest chunk seen (the rest are on their way, not lost), and an xstat
 * report follows each fack for the host's pacer. A round left unfinished
 * is kept (lobby_partial) and the next one of the same blob resumes it.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frame.h"
#include "lobby.h"
#include "lobby_bulk.h"
#include "lobby_partial.h"
#include "lobby_save.h"
#include "lobby_xfer.h"
#include "lobby_xprog.h"
#include "log.h"

#define DONE_FAST    (40)
#define DONE_FAST_MS (200)
#define DONE_SLOW_MS (1000)
#define HASH_STEP    (8u << 20) /* hash on below base once this much is new */

/* The check of a complete sink, on the worker. */
struct verify_job {
	struct lobby_xrecv *x; /* NULL once the receiver is gone */
	struct lobby_save *save;
	struct lobby_save_hasher *h; /* what was hashed on the way (NULL: all of it) */
	char io_dir[PATH_MAX];
	int r; /* 1 verified and in place, 0 mismatch, -errno */
};

/* Hashing on below base while the rest arrives, on the worker. */
struct hash_job {
	struct lobby_xrecv *x; /* NULL once the receiver is gone */
	struct lobby_save_hasher *h;
	uint64_t upto;
	int r;
};

struct lobby_xrecv {
	struct lobby *l;
	struct lobby_xrecv_ops ops;
	uint64_t cap;
	char io_dir[PATH_MAX];
	bool has_sid, failed, complete, finalizing;
	uint32_t sid, quiet_sid;
	struct lobby_save *save;
	struct verify_job *job;
	struct lobby_save_hasher *hasher; /* ours while no hash job has it */
	struct hash_job *hjob;
	bool verify_waits; /* complete, the hash job still running */
	uint64_t chunk, total_bytes, total_chunks, base, recv_count;
	unsigned window;
	uint8_t *have; /* a bit per chunk */
	int last_pct, retries;
	unsigned done_sends;
	long long last_done_ms;
	struct ev_timer tick;
	char files[LOBBY_SAVE_FILES][32];
	size_t nfiles;
	/* The bulk stream, while one is tried or flows. */
	struct lobby_bulk_pull *pull;
	uint16_t push_port; /* our listener, offered for this round's push (0: none) */
	uint64_t tcp_off, tcp_mark;
	bool streaming; /* a bulk stream is claimed and flows */
	/* rally's: the feedback interval, the highest seq seen and when, the
	 * gaps below it, what a resumed round kept (the have it acks). */
	bool rally;
	unsigned fb_ms;
	long long hs;
	unsigned long long hs_at_us;
	uint64_t lost, resumed;
	long long kept[2 * LOBBY_MSG_MAX_HAVE];
	size_t nkept;
	/* For the events' rate and time left. */
	long long began_ms, mark_ms;
	uint64_t mark_bytes;
};

unsigned lobby_xfer_window(long long chunk)
{
	/* lobby.py _window_for: 8192 -> 16384, 32000 -> 128, else 2048. */
	if (chunk == LOBBY_XFER_CHUNK_LOCAL)
		return LOBBY_XFER_WINDOW_LOCAL;
	if (chunk == 32000)
		return 128;
	return LOBBY_XFER_WINDOW_REMOTE;
}

static bool held(const struct lobby_xrecv *x, uint64_t seq)
{
	return (x->have[seq / 8] >> (seq % 8)) & 1;
}

static void send_fdone(struct lobby_xrecv *x, bool ok)
{
	struct lobby_msg m;

	lobby_msg_init(&m, LOBBY_MSG_FDONE);
	m.fdone = (struct lobby_msg_fdone){x->sid, ok, !ok};
	x->ops.send(x->l, &m);
	if (ok) {
		x->done_sends++;
		x->last_done_ms = ev_now(x->l->loop);
	}
}

static void send_ack(struct lobby_xrecv *x)
{
	struct lobby_msg m;

	/* We take every save as it is: no mods to fetch (mod rounds are not
	 * built), so need is empty and nobody is asked. */
	lobby_msg_init(&m, LOBBY_MSG_FBEGIN_ACK);
	m.fbegin_ack = (struct lobby_msg_fbegin_ack){.sid = x->sid,
						     .need = {false, 0, NULL},
						     .has_tcp_port = x->push_port != 0,
						     .tcp_port = x->push_port,
						     .has_rally = x->rally,
						     .rally_v = LOBBY_XFER_RALLY_V,
						     .nhave = x->nkept,
						     .have = x->kept};
	x->ops.send(x->l, &m);
}

static void send_fack(struct lobby_xrecv *x)
{
	long long nack[LOBBY_XFER_MAX_NACK];
	size_t n = 0;
	uint64_t end = x->base + x->window;
	struct lobby_msg m;

	if (end > x->total_chunks)
		end = x->total_chunks;
	/* rally: what lies past the highest chunk seen is on its way. */
	if (x->rally && x->hs + 1 < (long long)end)
		end = x->hs < 0 ? 0 : (uint64_t)x->hs;
	for (uint64_t s = x->base; s < end && n < LOBBY_XFER_MAX_NACK; s++) {
		if (!held(x, s))
			nack[n++] = (long long)s;
	}
	lobby_msg_init(&m, LOBBY_MSG_FACK);
	m.fack = (struct lobby_msg_fack){.sid = x->sid,
					 .base = (long long)x->base,
					 .nnack = n,
					 .nack = nack,
					 .verifying = x->finalizing,
					 .has_progress = x->finalizing};
	if (x->finalizing && x->save != NULL)
		m.fack.progress = (long long)atomic_load(&x->save->progress);
	x->ops.send(x->l, &m);
	if (!x->rally)
		return;
	lobby_msg_init(&m, LOBBY_MSG_XSTAT);
	m.xstat = (struct lobby_msg_xstat){
		.sid = x->sid,
		.got = (long long)x->recv_count,
		.hs = x->hs,
		.age_us = x->hs < 0 ? 0 : (long long)(ev_monotonic_us() - x->hs_at_us),
		.lost = (long long)x->lost,
		.t_us = (long long)ev_monotonic_us(),
	};
	x->ops.send(x->l, &m);
}

static void emit_state(struct lobby_xrecv *x, const char *state)
{
	struct lobby_event e = {.type = LOBBY_EV_TRANSFER};

	e.transfer.send = false;
	e.transfer.pct = -1;
	e.transfer.state = state;
	lobby_ipc_emit(x->l, &e);
}

/* A pct event with the bytes so far, the rate since the last one and the
 * time left at that rate. */
static void emit_pct(struct lobby_xrecv *x, int pct)
{
	struct lobby_event e = {.type = LOBBY_EV_TRANSFER};
	long long now = ev_now(x->l->loop);
	uint64_t bytes = x->recv_count * x->chunk;

	if (bytes > x->total_bytes || pct == 100)
		bytes = x->total_bytes;
	e.transfer.send = false;
	e.transfer.pct = pct;
	lobby_xfer_rate(&e, bytes, x->total_bytes, &x->mark_ms, &x->mark_bytes, now);
	lobby_ipc_emit(x->l, &e);
}

/* Each 10 % bucket crossed: an event and the stage text the host shows. */
static void progress(struct lobby_xrecv *x)
{
	int pct = x->total_chunks == 0 ? 100 : (int)(x->recv_count * 100 / x->total_chunks);
	char text[40];
	struct lobby_msg m;

	if (pct / 10 <= x->last_pct / 10 && x->last_pct >= 0)
		return;
	x->last_pct = pct;
	emit_pct(x, pct);
	snprintf(text, sizeof(text), "receiving save %d%%", pct);
	lobby_msg_init(&m, LOBBY_MSG_STAGE);
	m.stage = text;
	x->ops.send(x->l, &m);
}

/* The terminal's line for what we receive. */
static void row(struct lobby_xrecv *x, const char *state)
{
	uint64_t bytes = x->recv_count * x->chunk;

	if (x->tcp_off > bytes)
		bytes = x->tcp_off;
	lobby_xprog_row(x->l, "save", bytes < x->total_bytes ? bytes : x->total_bytes,
			x->total_bytes, state);
}

/* A rally round left unfinished: what it wrote is kept for the next. */
static void keep_sink(struct lobby_xrecv *x)
{
	long long kept;

	if (!x->rally || x->save == NULL || x->job != NULL || x->failed || x->complete ||
	    x->finalizing || x->recv_count == 0 || x->have == NULL)
		return;
	kept = lobby_partial_keep(x->save, x->io_dir, x->chunk, x->have, x->total_chunks);
	free(x->save);
	x->save = NULL;
	if (kept < 0)
		log_warnx("xfer-recv-keep-failed sid=%u error=\"%s\"", x->sid,
			  strerror((int)-kept));
	else
		log_info("xfer-recv-kept sid=%u chunks=%lld of=%llu", x->sid, kept,
			 (unsigned long long)x->total_chunks);
}

/* The push this round offered is not waited for any more. */
static void forget_push(struct lobby_xrecv *x)
{
	if (x->push_port != 0 && x->ops.listener != NULL)
		lobby_bulk_expect_push(x->ops.listener(x->l), 0, NULL, NULL, NULL);
	x->push_port = 0;
}

static void close_sink(struct lobby_xrecv *x)
{
	forget_push(x);
	lobby_bulk_pull_free(x->pull);
	x->pull = NULL;
	keep_sink(x);
	if (x->hjob != NULL) {
		/* The worker has the hasher: freed when the job is done. */
		x->hjob->x = NULL;
		x->hjob = NULL;
	}
	lobby_save_hasher_free(x->hasher);
	x->hasher = NULL;
	x->verify_waits = false;
	if (x->job != NULL) {
		/* The worker still has it: it is closed when the job is done. */
		x->job->x = NULL;
		x->job = NULL;
		x->save = NULL;
	}
	if (x->save != NULL) {
		lobby_save_close(x->save);
		free(x->save);
		x->save = NULL;
	}
	free(x->have);
	x->have = NULL;
}

static void fail(struct lobby_xrecv *x, const char *why)
{
	char detail[600];

	x->failed = true;
	x->finalizing = false;
	row(x, "failed");
	close_sink(x);
	snprintf(detail, sizeof(detail), "save transfer failed: %s", why);
	log_warnx("xfer-recv-fail sid=%u reason=\"%s\"", x->sid, why);
	lobby_ipc_status(x->l, "failed", detail);
	send_fdone(x, false);
}

static void on_tick(struct ev_timer *t, void *arg)
{
	struct lobby_xrecv *x = arg;
	long long now = ev_now(x->l->loop);

	if (!x->has_sid || x->failed)
		return;
	if (!x->complete) {
		send_fack(x);
		row(x, NULL);
		ev_timer_start(x->l->loop, t, x->rally ? x->fb_ms : LOBBY_XFER_FEEDBACK_MS, on_tick,
			       x);
		return;
	}
	/* fdone: every 0.2 s forty times, then every second until a new
	 * round replaces it (as netpunch does). */
	if (x->done_sends < DONE_FAST ? now - x->last_done_ms >= DONE_FAST_MS
				      : now - x->last_done_ms >= DONE_SLOW_MS)
		send_fdone(x, true);
	ev_timer_start(x->l->loop, t, x->done_sends < DONE_FAST ? DONE_FAST_MS : DONE_SLOW_MS,
		       on_tick, x);
}

/* ---- completion ---- */

static void verify_work(void *arg)
{
	struct verify_job *j = arg;

	j->r = j->h != NULL ? lobby_save_verify_with(j->save, j->h) : lobby_save_verify(j->save);
	if (j->r == 1) {
		int c = lobby_save_commit(j->save, j->io_dir);

		if (c < 0)
			j->r = c;
	}
}

static void save_ready(struct lobby_xrecv *x)
{
	const char *names[LOBBY_SAVE_FILES];
	struct lobby_event e = {.type = LOBBY_EV_SAVE_READY};

	for (size_t i = 0; i < x->nfiles; i++)
		names[i] = x->files[i];
	e.save_ready.name = LOBBY_SAVE_BASENAME;
	e.save_ready.dir = x->io_dir;
	e.save_ready.files = (struct lobby_msg_names){false, x->nfiles, names};
	lobby_ipc_emit(x->l, &e);
}

static void verify_done(void *arg, bool cancelled)
{
	struct verify_job *j = arg;
	struct lobby_xrecv *x = j->x;
	char why[128];

	lobby_save_hasher_free(j->h);
	j->h = NULL;
	if (x == NULL || cancelled) {
		lobby_save_close(j->save);
		free(j->save);
		free(j);
		return;
	}
	x->job = NULL;
	x->finalizing = false;
	if (j->r < 0) {
		snprintf(why, sizeof(why), "write error: %s", strerror(-j->r));
		free(j);
		fail(x, why);
		return;
	}
	if (j->r == 0) {
		free(j);
		if (++x->retries > LOBBY_XFER_MAX_RETRIES) {
			fail(x, "hash mismatch");
			return;
		}
		log_warnx("xfer-recv-mismatch sid=%u attempt=%d", x->sid, x->retries);
		x->hasher = lobby_save_hasher_new(x->save);
		memset(x->have, 0, (size_t)((x->total_chunks + 7) / 8));
		x->base = x->recv_count = 0;
		x->hs = -1;
		x->last_pct = -1;
		send_fack(x);
		return;
	}
	free(j);
	x->complete = true;
	log_info("xfer-recv-done sid=%u bytes=%llu files=%zu resumed=%llu ms=%lld", x->sid,
		 (unsigned long long)x->total_bytes, x->nfiles, (unsigned long long)x->resumed,
		 ev_now(x->l->loop) - x->began_ms);
	x->recv_count = x->total_chunks;
	row(x, "done");
	lobby_save_close(x->save);
	free(x->save);
	x->save = NULL;
	emit_pct(x, 100);
	save_ready(x);
	x->done_sends = 0;
	send_fdone(x, true);
	ev_timer_start(x->l->loop, &x->tick, DONE_FAST_MS, on_tick, x);
}

static void start_verify(struct lobby_xrecv *x)
{
	struct verify_job *j = calloc(1, sizeof(*j));

	if (j == NULL) {
		fail(x, "out of memory");
		return;
	}
	j->x = x;
	j->save = x->save;
	j->h = x->hasher;
	x->hasher = NULL;
	snprintf(j->io_dir, sizeof(j->io_dir), "%s", x->io_dir);
	x->job = j;
	if (ev_work_submit(x->l->loop, verify_work, verify_done, j) < 0) {
		x->job = NULL;
		x->finalizing = false;
		lobby_save_hasher_free(j->h);
		free(j);
		fail(x, "cannot start the check");
	}
}

/* Every chunk is here: the check (after the hash job running, if one is). */
static void finalize(struct lobby_xrecv *x)
{
	log_info("xfer-recv-complete sid=%u bytes=%llu ms=%lld lost=%llu hashed=%llu then=verify",
		 x->sid, (unsigned long long)x->total_bytes, ev_now(x->l->loop) - x->began_ms,
		 (unsigned long long)x->lost,
		 (unsigned long long)(x->hasher != NULL ? lobby_save_hasher_done(x->hasher) : 0));
	x->finalizing = true;
	if (x->hjob != NULL) {
		x->verify_waits = true;
		return;
	}
	start_verify(x);
}

static void hash_work(void *arg)
{
	struct hash_job *j = arg;

	j->r = lobby_save_hasher_run(j->h, j->upto, NULL);
}

static void maybe_hash(struct lobby_xrecv *x);

static void hash_done(void *arg, bool cancelled)
{
	struct hash_job *j = arg;
	struct lobby_xrecv *x = j->x;

	if (x == NULL || cancelled) {
		lobby_save_hasher_free(j->h);
		free(j);
		return;
	}
	x->hjob = NULL;
	if (j->r < 0) {
		/* The check reads it all again, from the start. */
		log_warnx("xfer-recv-hash-error sid=%u error=\"%s\"", x->sid, strerror(-j->r));
		lobby_save_hasher_free(j->h);
	} else {
		x->hasher = j->h;
	}
	free(j);
	if (x->verify_waits) {
		x->verify_waits = false;
		start_verify(x);
		return;
	}
	maybe_hash(x);
}

/* What lies below base is written for good: the worker hashes it now, so
 * the check at the end has only the rest to read. */
static void maybe_hash(struct lobby_xrecv *x)
{
	uint64_t upto = x->base * x->chunk;
	struct hash_job *j;

	if (upto > x->total_bytes)
		upto = x->total_bytes;
	/* Not while a bulk stream flows: it outruns the hash (1.5 GB/s and
	 * more here), and on two cores hashing beside it only slows it; the
	 * check after reads the file once either way. */
	if (x->streaming || x->hasher == NULL || x->hjob != NULL || x->finalizing || x->failed ||
	    upto < lobby_save_hasher_done(x->hasher) + HASH_STEP)
		return;
	if ((j = calloc(1, sizeof(*j))) == NULL)
		return;
	j->x = x;
	j->h = x->hasher;
	j->upto = upto;
	x->hasher = NULL;
	x->hjob = j;
	if (ev_work_submit(x->l->loop, hash_work, hash_done, j) < 0) {
		x->hasher = j->h;
		x->hjob = NULL;
		free(j);
	}
}

/* ---- what the host sends ---- */

static void maybe_pull(struct lobby_xrecv *x, const struct lobby_msg_fbegin *fb);

/* The chunks a kept partial holds, marked held and named in the ack's have
 * (its first LOBBY_MSG_MAX_HAVE runs; the rest are dropped, so both ends
 * agree on what is here). */
static void take_partial(struct lobby_xrecv *x, const struct lobby_partial *p)
{
	for (size_t i = 0; i < p->nranges && x->nkept + 2 <= 2 * LOBBY_MSG_MAX_HAVE; i++) {
		uint64_t from = p->ranges[i][0], to = p->ranges[i][1];

		for (uint64_t s = from; s < to; s++) {
			x->have[s / 8] |= (uint8_t)(1u << (s % 8));
			x->recv_count++;
		}
		x->kept[x->nkept++] = (long long)from;
		x->kept[x->nkept++] = (long long)to;
	}
	x->resumed = x->recv_count;
	while (x->base < x->total_chunks && held(x, x->base))
		x->base++;
}

/*
 * The sink for an fbegin: the whitelist and the cap checked by
 * lobby_save_open_sink before anything is written; in a rally round, the
 * files kept from an unfinished round of the same blob taken back (any
 * other kept partial is dropped).
 */
static int open_sink(struct lobby_xrecv *x, const struct lobby_msg_fbegin *fb, char *err,
		     size_t errsize)
{
	struct lobby_save_offer all[LOBBY_MSG_MAX_FILES];
	struct lobby_partial *p = NULL;
	size_t n = fb->nfiles;
	bool resume = false;
	int r;

	for (size_t i = 0; i < n; i++)
		all[i] = (struct lobby_save_offer){fb->files[i].name, fb->files[i].size,
						   fb->files[i].sha256};
	if (x->rally && (p = malloc(sizeof(*p))) != NULL) {
		r = lobby_partial_load(x->io_dir, p);
		if (r == 0 &&
		    lobby_partial_matches(p, fb->sha256, x->total_bytes, x->chunk, all, n))
			resume = true;
		else if (r == 0)
			log_info("xfer-recv-partial-other sid=%u (dropped)", x->sid);
		else if (r == -EBADMSG)
			log_warnx("xfer-recv-partial-corrupt sid=%u (dropped)", x->sid);
	}
	if (!resume)
		lobby_partial_drop(x->io_dir);
	x->save = calloc(1, sizeof(*x->save));
	x->have = calloc(1, (size_t)((x->total_chunks + 7) / 8) + 1);
	if (x->save == NULL || x->have == NULL) {
		snprintf(err, errsize, "cannot allocate %llu chunks",
			 (unsigned long long)x->total_chunks);
		r = -ENOMEM;
		goto out;
	}
	r = lobby_save_open_sink(x->save, x->io_dir, all, n, x->total_bytes, fb->sha256, x->cap,
				 resume, err, errsize);
	if (r < 0 && resume) {
		log_warnx("xfer-recv-resume-failed sid=%u error=\"%s\"", x->sid, err);
		lobby_partial_drop(x->io_dir);
		resume = false;
		r = lobby_save_open_sink(x->save, x->io_dir, all, n, x->total_bytes, fb->sha256,
					 x->cap, false, err, errsize);
	}
	if (r < 0)
		goto out;
	for (size_t i = 0; i < n; i++)
		snprintf(x->files[i], sizeof(x->files[i]), "%s", x->save->f[i].wire);
	x->nfiles = n;
	if (resume) {
		take_partial(x, p);
		lobby_partial_drop(x->io_dir); /* the files are ours again */
		log_info("xfer-recv-resume sid=%u kept=%llu of=%llu base=%llu", x->sid,
			 (unsigned long long)x->resumed, (unsigned long long)x->total_chunks,
			 (unsigned long long)x->base);
	}
out:
	free(p);
	if (r < 0) {
		free(x->save);
		x->save = NULL;
		free(x->have);
		x->have = NULL;
	}
	return r;
}

void lobby_xrecv_on_begin(struct lobby_xrecv *x, const struct lobby_msg_fbegin *fb)
{
	char err[512];
	uint64_t chunk;

	if (x->has_sid && fb->sid == x->sid) {
		/* A repeat: the verdict again, or the ack again. */
		if (x->failed)
			send_fdone(x, false);
		else
			send_ack(x);
		return;
	}
	if (x->finalizing) {
		/* The last round is still being checked: the host repeats. */
		if (x->quiet_sid != fb->sid)
			log_info("xfer-recv-busy sid=%u checking=%u", fb->sid, x->sid);
		x->quiet_sid = fb->sid;
		return;
	}
	close_sink(x);
	x->has_sid = true;
	x->sid = fb->sid;
	x->failed = x->complete = false;
	x->base = x->recv_count = 0;
	x->retries = 0;
	x->last_pct = -1;
	x->done_sends = 0;
	x->nfiles = 0;
	x->hs = -1;
	x->lost = x->resumed = 0;
	x->nkept = 0;
	x->tcp_off = x->tcp_mark = 0;
	x->streaming = false;
	x->began_ms = x->mark_ms = ev_now(x->l->loop);
	x->mark_bytes = 0;
	/* rally's extension, when the host offers it and we take it. */
	x->rally = fb->has_rally && fb->rally_v >= LOBBY_XFER_RALLY_V && !x->l->cfg.fast_off;
	if (fb->kind != NULL && strcmp(fb->kind, "mods") == 0) {
		fail(x, "refused: this lobby does not take mod packs");
		return;
	}
	chunk = fb->chunk > 0 ? (uint64_t)fb->chunk : LOBBY_XFER_CHUNK_DATA;
	x->chunk = chunk;
	x->window = lobby_xfer_window((long long)chunk);
	if (x->rally) {
		x->window = fb->rally_window >= 64 && fb->rally_window <= 65536
				    ? (unsigned)fb->rally_window
				    : LOBBY_XFER_RALLY_WINDOW;
		x->fb_ms = fb->rally_fb_ms >= 5 && fb->rally_fb_ms <= LOBBY_XFER_FEEDBACK_MS
				   ? (unsigned)fb->rally_fb_ms
				   : LOBBY_XFER_RALLY_FB_MS;
	}
	x->total_bytes = fb->total_bytes > 0 ? (uint64_t)fb->total_bytes : 0;
	x->total_chunks = fb->total_chunks > 0 ? (uint64_t)fb->total_chunks : 0;
	/* The chunk count must be the one the sizes give, or some chunk could
	 * never land (netpunch does not check; a stranger's fbegin might). */
	if (chunk > NP1_MAX || x->total_chunks != (x->total_bytes + chunk - 1) / chunk) {
		snprintf(err, sizeof(err), "refused: %llu chunks of %llu bytes cannot hold %llu",
			 (unsigned long long)x->total_chunks, (unsigned long long)chunk,
			 (unsigned long long)x->total_bytes);
		lobby_partial_drop(x->io_dir);
		fail(x, err);
		return;
	}
	if (open_sink(x, fb, err, sizeof(err)) < 0) {
		fail(x, err);
		return;
	}
	/* NULL (no memory): the check at the end hashes it all. */
	x->hasher = lobby_save_hasher_new(x->save);
	log_info("xfer-recv-begin sid=%u bytes=%llu chunks=%llu chunk=%llu files=%zu rally=%d "
		 "resumed=%llu",
		 x->sid, (unsigned long long)x->total_bytes, (unsigned long long)x->total_chunks,
		 (unsigned long long)chunk, x->nfiles, x->rally, (unsigned long long)x->resumed);
	/* What is kept goes by UDP: the stream would bring it all again. */
	if (x->resumed == 0)
		maybe_pull(x, fb);
	send_ack(x);
	/* netpunch: pct 0 at once, and again with the first chunk (last_pct
	 * stays -1); the first fack at once, not a feedback interval later. */
	emit_pct(x, x->total_chunks == 0 ? 0 : (int)(x->recv_count * 100 / x->total_chunks));
	row(x, NULL);
	if (x->base == x->total_chunks) {
		finalize(x);
		return;
	}
	send_fack(x);
	ev_timer_start(x->l->loop, &x->tick, x->rally ? x->fb_ms : LOBBY_XFER_FEEDBACK_MS, on_tick,
		       x);
}

/* ---- the bulk stream: bytes from offset 0, cut into the chunks they fill ---- */

static void pull_claimed(void *arg)
{
	struct lobby_xrecv *x = arg;

	log_info("xfer-recv-tcp sid=%u", x->sid);
	x->streaming = true;
	emit_state(x, "tcp");
}

/* n more bytes of the stream are in place at tcp_off: every chunk they
 * complete is held (the last when the stream ends). */
static int pull_advance(struct lobby_xrecv *x, size_t n)
{
	x->tcp_off += n;
	while (x->tcp_mark < x->total_chunks &&
	       ((x->tcp_mark + 1) * x->chunk <= x->tcp_off || x->tcp_off == x->total_bytes)) {
		if (!held(x, x->tcp_mark)) {
			x->have[x->tcp_mark / 8] |= (uint8_t)(1u << (x->tcp_mark % 8));
			x->recv_count++;
			/* netpunch feeds the stream chunk by chunk: its pct
			 * events come at each 10 % on the TCP path too. */
			progress(x);
		}
		x->tcp_mark++;
	}
	while (x->base < x->total_chunks && held(x, x->base))
		x->base++;
	if (x->base == x->total_chunks) {
		finalize(x);
		return -1;
	}
	maybe_hash(x);
	return 0;
}

static int pull_data(void *arg, const uint8_t *p, size_t n)
{
	struct lobby_xrecv *x = arg;
	char why[160];
	int r;

	if (x->failed || x->complete || x->finalizing || n > x->total_bytes - x->tcp_off)
		return -1;
	r = lobby_save_write(x->save, x->tcp_off, p, n);
	if (r < 0) {
		snprintf(why, sizeof(why), "write error: %s", strerror(-r));
		fail(x, why);
		return -1;
	}
	return pull_advance(x, n);
}

/* splice's side: where the stream's next byte goes, and what went. */
static int pull_locate(void *arg, uint64_t off, int *fd, uint64_t *file_off, uint64_t *left)
{
	struct lobby_xrecv *x = arg;

	if (x->failed || x->complete || x->finalizing || x->save == NULL || off != x->tcp_off)
		return -1;
	return lobby_save_locate(x->save, off, fd, file_off, left);
}

static int pull_spliced(void *arg, size_t n, int err)
{
	struct lobby_xrecv *x = arg;
	char why[160];

	if (x->failed || x->complete || x->finalizing)
		return -1;
	if (err < 0) {
		snprintf(why, sizeof(why), "write error: %s", strerror(-err));
		fail(x, why);
		return -1;
	}
	if (n > x->total_bytes - x->tcp_off)
		return -1;
	return pull_advance(x, n);
}

static void pull_ended(void *arg, bool complete)
{
	struct lobby_xrecv *x = arg;

	x->streaming = false;
	if (complete)
		log_info("xfer-recv-tcp-done sid=%u bytes=%llu", x->sid,
			 (unsigned long long)x->tcp_off);
	else
		log_info("xfer-recv-tcp-broke sid=%u bytes=%llu then=udp", x->sid,
			 (unsigned long long)x->tcp_off);
}

static void pull_gave_up(void *arg)
{
	struct lobby_xrecv *x = arg;

	log_info("xfer-recv-tcp-unreachable sid=%u then=udp", x->sid);
}

static const struct lobby_bulk_pull_ops pull_ops = {pull_claimed, pull_data,   pull_ended,
						    pull_gave_up, pull_locate, pull_spliced};

/* The leader dialled our listener for this round (lobby_bulk_expect_push). */
static void push_adopt(void *arg, int fd)
{
	struct lobby_xrecv *x = arg;

	x->push_port = 0; /* the expectation is spent */
	if (x->pull != NULL || x->complete || x->failed || x->finalizing) {
		close(fd);
		return;
	}
	log_info("xfer-recv-push sid=%u", x->sid);
	x->tcp_off = x->tcp_mark = 0;
	x->pull = lobby_bulk_pull_adopt(x->l, fd, x->total_bytes, &pull_ops, x);
}

/* fbegin's tcp offer with a port: pull from the host's IP. A token without
 * a port, to a receiver with a listener: the sender pushes to us. */
static void maybe_pull(struct lobby_xrecv *x, const struct lobby_msg_fbegin *fb)
{
	const struct addr *host = x->ops.host(x->l);
	struct lobby_bulk *b;
	struct addr to;

	if (fb->has_tcp && fb->tcp_token != NULL && strlen(fb->tcp_token) == BULK_TOKEN_LEN &&
	    fb->tcp_port == 0 && x->total_bytes > 0 && x->ops.listener != NULL &&
	    (b = x->ops.listener(x->l)) != NULL) {
		lobby_bulk_expect_push(b, x->sid, fb->tcp_token, push_adopt, x);
		x->push_port = lobby_bulk_port(b);
		return;
	}
	if (!fb->has_tcp || fb->tcp_token == NULL || strlen(fb->tcp_token) != BULK_TOKEN_LEN ||
	    fb->tcp_port < 1 || fb->tcp_port > 65535 || x->total_bytes == 0 || host == NULL)
		return;
	to = *host;
	addr_set_port(&to, (uint16_t)fb->tcp_port);
	x->tcp_off = x->tcp_mark = 0;
	x->pull = lobby_bulk_pull_start(x->l, &to, x->sid, fb->tcp_token, x->ops.name(x->l),
					x->total_bytes, &pull_ops, x);
}

void lobby_xrecv_on_chunk(struct lobby_xrecv *x, const uint8_t *p, size_t len)
{
	uint32_t sid, seq;
	const uint8_t *data;
	size_t dlen;
	uint64_t off;
	char why[160];
	int r;

	if (npf1_parse(p, len, &sid, &seq, &data, &dlen) < 0 || !x->has_sid || sid != x->sid)
		return;
	if (x->complete) {
		send_fdone(x, true); /* it still sends: tell it again */
		return;
	}
	if (x->finalizing || x->failed || seq >= x->total_chunks)
		return;
	if (x->rally && (long long)seq > x->hs) {
		/* The ones skipped on the way up, not held: lost once. */
		for (uint64_t s = (uint64_t)(x->hs + 1); s < seq; s++)
			x->lost += !held(x, s);
		x->hs = seq;
		x->hs_at_us = ev_monotonic_us();
	}
	if (held(x, seq))
		return;
	off = (uint64_t)seq * x->chunk;
	if (off > x->total_bytes || dlen > x->total_bytes - off) {
		snprintf(why, sizeof(why), "refused: chunk %u would write %llu..%llu past %llu",
			 seq, (unsigned long long)off, (unsigned long long)(off + dlen),
			 (unsigned long long)x->total_bytes);
		fail(x, why);
		return;
	}
	r = lobby_save_write(x->save, off, data, dlen);
	if (r < 0) {
		snprintf(why, sizeof(why), "write error: %s", strerror(-r));
		fail(x, why);
		return;
	}
	x->have[seq / 8] |= (uint8_t)(1u << (seq % 8));
	x->recv_count++;
	while (x->base < x->total_chunks && held(x, x->base))
		x->base++;
	progress(x);
	if (x->base == x->total_chunks)
		finalize(x);
	else
		maybe_hash(x);
}

bool lobby_xrecv_complete(const struct lobby_xrecv *x)
{
	return x != NULL && x->has_sid && x->complete;
}

uint32_t lobby_xrecv_sid(const struct lobby_xrecv *x)
{
	return x != NULL && x->has_sid ? x->sid : 0;
}

int lobby_xrecv_pct(const struct lobby_xrecv *x)
{
	return x != NULL && x->has_sid ? x->last_pct : -1;
}

bool lobby_xrecv_failed(const struct lobby_xrecv *x)
{
	return x != NULL && x->has_sid && x->failed;
}

struct lobby_xrecv *lobby_xrecv_new(struct lobby *l, const struct lobby_xrecv_ops *ops,
				    uint64_t cap)
{
	struct lobby_xrecv *x = calloc(1, sizeof(*x));
	const char *dir = l->cfg.io_dir[0] != '\0' ? l->cfg.io_dir : ".";

	if (x == NULL)
		return NULL;
	x->l = l;
	x->ops = *ops;
	x->cap = cap;
	x->last_pct = -1;
	/* save_ready names the directory absolutely, as netpunch does. */
	if (realpath(dir, x->io_dir) == NULL)
		snprintf(x->io_dir, sizeof(x->io_dir), "%s", dir);
	ev_timer_init(&x->tick);
	return x;
}

void lobby_xrecv_free(struct lobby_xrecv *x)
{
	if (x == NULL)
		return;
	ev_timer_stop(x->l->loop, &x->tick);
	close_sink(x);
	free(x);
}
