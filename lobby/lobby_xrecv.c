/*
 * The joiner's receiver (netpunch-wire.md §11, as lobby.py's receiver
 * behaves): fbegin checked before anything is allocated or written, chunks
 * written where they belong in temporaries beside the final names, a fack
 * every 50 ms (base, up to 128 holes in the window, verifying, progress),
 * the check on the worker (fsync, SHA-256 per file and of the blob), a
 * mismatch re-requested from base 0 up to three times, the files renamed
 * into place, then save_ready and fdone (every 0.2 s forty times, then every
 * second, and at once for any chunk that still comes).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "lobby.h"
#include "lobby_bulk.h"
#include "lobby_save.h"
#include "lobby_xfer.h"
#include "log.h"

#define DONE_FAST    (40)
#define DONE_FAST_MS (200)
#define DONE_SLOW_MS (1000)

/* The check of a complete sink, on the worker. */
struct verify_job {
	struct lobby_xrecv *x; /* NULL once the receiver is gone */
	struct lobby_save *save;
	char io_dir[PATH_MAX];
	int r; /* 1 verified and in place, 0 mismatch, -errno */
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
	uint64_t tcp_off, tcp_mark;
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
	m.fbegin_ack = (struct lobby_msg_fbegin_ack){.sid = x->sid, .need = {false, 0, NULL}};
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
}

static void emit_state(struct lobby_xrecv *x, const char *state)
{
	struct lobby_event e = {.type = LOBBY_EV_TRANSFER};

	e.transfer.send = false;
	e.transfer.pct = -1;
	e.transfer.state = state;
	lobby_ipc_emit(x->l, &e);
}

static void emit_pct(struct lobby_xrecv *x, int pct)
{
	struct lobby_event e = {.type = LOBBY_EV_TRANSFER};

	e.transfer.send = false;
	e.transfer.pct = pct;
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

static void close_sink(struct lobby_xrecv *x)
{
	lobby_bulk_pull_free(x->pull);
	x->pull = NULL;
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
		ev_timer_start(x->l->loop, t, LOBBY_XFER_FEEDBACK_MS, on_tick, x);
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

	j->r = lobby_save_verify(j->save);
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
		memset(x->have, 0, (size_t)((x->total_chunks + 7) / 8));
		x->base = x->recv_count = 0;
		x->last_pct = -1;
		send_fack(x);
		return;
	}
	free(j);
	x->complete = true;
	log_info("xfer-recv-done sid=%u bytes=%llu files=%zu", x->sid,
		 (unsigned long long)x->total_bytes, x->nfiles);
	lobby_save_close(x->save);
	free(x->save);
	x->save = NULL;
	emit_pct(x, 100);
	save_ready(x);
	x->done_sends = 0;
	send_fdone(x, true);
	ev_timer_start(x->l->loop, &x->tick, DONE_FAST_MS, on_tick, x);
}

static void finalize(struct lobby_xrecv *x)
{
	struct verify_job *j = calloc(1, sizeof(*j));

	if (j == NULL) {
		fail(x, "out of memory");
		return;
	}
	j->x = x;
	j->save = x->save;
	snprintf(j->io_dir, sizeof(j->io_dir), "%s", x->io_dir);
	x->finalizing = true;
	x->job = j;
	if (ev_work_submit(x->l->loop, verify_work, verify_done, j) < 0) {
		x->job = NULL;
		x->finalizing = false;
		free(j);
		fail(x, "cannot start the check");
	}
}

/* ---- what the host sends ---- */

static void maybe_pull(struct lobby_xrecv *x, const struct lobby_msg_fbegin *fb);

void lobby_xrecv_on_begin(struct lobby_xrecv *x, const struct lobby_msg_fbegin *fb)
{
	char err[512];
	uint64_t chunk;
	int r;

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
	if (fb->kind != NULL && strcmp(fb->kind, "mods") == 0) {
		fail(x, "refused: this lobby does not take mod packs");
		return;
	}
	chunk = fb->chunk > 0 ? (uint64_t)fb->chunk : LOBBY_XFER_CHUNK_DATA;
	x->chunk = chunk;
	x->window = lobby_xfer_window((long long)chunk);
	x->total_bytes = fb->total_bytes > 0 ? (uint64_t)fb->total_bytes : 0;
	x->total_chunks = fb->total_chunks > 0 ? (uint64_t)fb->total_chunks : 0;
	{
		struct lobby_save_offer all[LOBBY_MSG_MAX_FILES];
		size_t n = fb->nfiles;

		for (size_t i = 0; i < n; i++)
			all[i] = (struct lobby_save_offer){fb->files[i].name, fb->files[i].size,
							   fb->files[i].sha256};
		x->save = calloc(1, sizeof(*x->save));
		if (x->save == NULL) {
			fail(x, "out of memory");
			return;
		}
		r = lobby_save_open_sink(x->save, x->io_dir, all, n, x->total_bytes, fb->sha256,
					 x->cap, err, sizeof(err));
		if (r < 0) {
			free(x->save);
			x->save = NULL;
			fail(x, err);
			return;
		}
		for (size_t i = 0; i < n; i++)
			snprintf(x->files[i], sizeof(x->files[i]), "%s", x->save->f[i].wire);
		x->nfiles = n;
	}
	/* The chunk count must be the one the sizes give, or some chunk could
	 * never land (netpunch does not check; a stranger's fbegin might). */
	if (chunk > NP1_MAX || x->total_chunks != (x->total_bytes + chunk - 1) / chunk) {
		snprintf(err, sizeof(err), "refused: %llu chunks of %llu bytes cannot hold %llu",
			 (unsigned long long)x->total_chunks, (unsigned long long)chunk,
			 (unsigned long long)x->total_bytes);
		fail(x, err);
		return;
	}
	x->have = calloc(1, (size_t)((x->total_chunks + 7) / 8) + 1);
	if (x->have == NULL) {
		snprintf(err, sizeof(err), "cannot allocate %llu chunks",
			 (unsigned long long)x->total_chunks);
		fail(x, err);
		return;
	}
	log_info("xfer-recv-begin sid=%u bytes=%llu chunks=%llu chunk=%llu files=%zu", x->sid,
		 (unsigned long long)x->total_bytes, (unsigned long long)x->total_chunks,
		 (unsigned long long)chunk, x->nfiles);
	maybe_pull(x, fb);
	send_ack(x);
	emit_pct(x, 0);
	x->last_pct = 0;
	if (x->total_chunks == 0) {
		finalize(x);
		return;
	}
	ev_timer_start(x->l->loop, &x->tick, LOBBY_XFER_FEEDBACK_MS, on_tick, x);
}

/* ---- the bulk stream: bytes from offset 0, cut into the chunks they fill ---- */

static void pull_claimed(void *arg)
{
	struct lobby_xrecv *x = arg;

	log_info("xfer-recv-tcp sid=%u", x->sid);
	emit_state(x, "tcp");
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
	x->tcp_off += n;
	/* Every chunk the stream now covers whole (the last when it ends). */
	while (x->tcp_mark < x->total_chunks &&
	       ((x->tcp_mark + 1) * x->chunk <= x->tcp_off || x->tcp_off == x->total_bytes)) {
		if (!held(x, x->tcp_mark)) {
			x->have[x->tcp_mark / 8] |= (uint8_t)(1u << (x->tcp_mark % 8));
			x->recv_count++;
		}
		x->tcp_mark++;
	}
	while (x->base < x->total_chunks && held(x, x->base))
		x->base++;
	progress(x);
	if (x->base == x->total_chunks) {
		finalize(x);
		return -1;
	}
	return 0;
}

static void pull_ended(void *arg, bool complete)
{
	struct lobby_xrecv *x = arg;

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

static const struct lobby_bulk_pull_ops pull_ops = {pull_claimed, pull_data, pull_ended,
						    pull_gave_up};

/* fbegin's tcp offer with a port: pull from the host's IP. */
static void maybe_pull(struct lobby_xrecv *x, const struct lobby_msg_fbegin *fb)
{
	const struct addr *host = x->ops.host(x->l);
	struct addr to;

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
	if (x->finalizing || x->failed || seq >= x->total_chunks || held(x, seq))
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
}

bool lobby_xrecv_complete(const struct lobby_xrecv *x)
{
	return x != NULL && x->has_sid && x->complete;
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
