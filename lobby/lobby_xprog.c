/*
 * The transfer's progress for people: the events' rate and time left, and
 * the terminal's status lines.
 */
#include "lobby_xprog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ev.h"
#include "lobby.h"
#include "log.h"

#define DRAW_MS   (200)
#define LINGER_MS (3000) /* an ended row stays this long */
#define MiB       (1024.0 * 1024.0)

struct row {
	char name[LOBBY_NAME_MAX * 4 + 1];
	uint64_t bytes, total, mark_bytes;
	long long mark_ms, ended_ms;
	double rate;
	char state[16];
	bool used;
};

struct lobby_xprog {
	struct lobby *l;
	struct row rows[LOBBY_XPROG_ROWS];
	struct ev_timer draw;
	bool drawing;
};

void lobby_xfer_rate(struct lobby_event *e, uint64_t bytes, uint64_t total, long long *mark_ms,
		     uint64_t *mark_bytes, long long now_ms)
{
	long long rate = 0;

	if (*mark_ms > 0 && now_ms > *mark_ms && bytes >= *mark_bytes)
		rate = (long long)((bytes - *mark_bytes) * 1000ULL / (uint64_t)(now_ms - *mark_ms));
	e->transfer.has_bytes = true;
	e->transfer.bytes = (long long)bytes;
	e->transfer.total = (long long)total;
	e->transfer.rate = rate;
	e->transfer.eta =
		rate > 0 ? (long long)((total - (bytes < total ? bytes : total)) / (uint64_t)rate)
			 : (bytes >= total ? 0 : -1);
	*mark_ms = now_ms;
	*mark_bytes = bytes;
}

void lobby_xprog_format(char *out, size_t size, const char *name, uint64_t bytes, uint64_t total,
			double rate, const char *state)
{
	int pct = total == 0 ? 100 : (int)((bytes < total ? bytes : total) * 100 / total);
	char left[48] = "";

	if (state == NULL && rate > 0 && bytes < total) {
		unsigned long long s = (unsigned long long)((double)(total - bytes) / rate);

		if (s >= 3600)
			snprintf(left, sizeof(left), "%llu:%02llu:%02llu left", s / 3600,
				 s / 60 % 60, s % 60);
		else
			snprintf(left, sizeof(left), "%llu:%02llu left", s / 60, s % 60);
	}
	snprintf(out, size, "%-16.16s %3d%%  %8.1f of %.1f MiB  %8.1f MiB/s  %s", name, pct,
		 (double)bytes / MiB, (double)total / MiB, rate / MiB,
		 state != NULL ? state : left);
}

static void on_draw(struct ev_timer *t, void *arg)
{
	struct lobby_xprog *p = arg;
	long long now = ev_now(p->l->loop);
	char text[LOG_STATUS_MAX], line[160];
	size_t o = 0;
	bool any = false;

	for (size_t i = 0; i < LOBBY_XPROG_ROWS; i++) {
		struct row *r = &p->rows[i];

		if (!r->used)
			continue;
		if (r->ended_ms > 0 && now - r->ended_ms > LINGER_MS) {
			r->used = false;
			continue;
		}
		any = true;
		lobby_xprog_format(line, sizeof(line), r->name, r->bytes, r->total, r->rate,
				   r->state[0] != '\0' ? r->state : NULL);
		o += (size_t)snprintf(text + o, sizeof(text) - o, "%s%s", o > 0 ? "\n" : "", line);
		if (o >= sizeof(text))
			o = sizeof(text) - 1;
	}
	text[o] = '\0';
	log_status(text);
	p->drawing = any;
	if (any)
		ev_timer_start(p->l->loop, t, DRAW_MS, on_draw, p);
}

static struct row *find_row(struct lobby_xprog *p, const char *name, long long now)
{
	struct row *free_row = NULL, *oldest = NULL;

	for (size_t i = 0; i < LOBBY_XPROG_ROWS; i++) {
		struct row *r = &p->rows[i];

		if (r->used && strcmp(r->name, name) == 0)
			return r;
		if (!r->used && free_row == NULL)
			free_row = r;
		if (r->used && r->ended_ms > 0 &&
		    (oldest == NULL || r->ended_ms < oldest->ended_ms))
			oldest = r;
	}
	if (free_row == NULL)
		free_row = oldest; /* the longest ended goes; moving rows stay */
	if (free_row == NULL)
		return NULL;
	memset(free_row, 0, sizeof(*free_row));
	free_row->used = true;
	free_row->mark_ms = now;
	snprintf(free_row->name, sizeof(free_row->name), "%s", name);
	return free_row;
}

void lobby_xprog_row(struct lobby *l, const char *name, uint64_t bytes, uint64_t total,
		     const char *state)
{
	struct lobby_xprog *p = l->xprog;
	long long now = ev_now(l->loop);
	struct row *r;

	if (!log_status_on())
		return;
	if (p == NULL) {
		if ((p = calloc(1, sizeof(*p))) == NULL)
			return;
		p->l = l;
		ev_timer_init(&p->draw);
		l->xprog = p;
	}
	if ((r = find_row(p, name, now)) == NULL)
		return;
	if (now - r->mark_ms >= 100 && bytes >= r->mark_bytes) {
		double inst = (double)(bytes - r->mark_bytes) * 1000.0 / (double)(now - r->mark_ms);

		r->rate = r->rate == 0 ? inst : 0.7 * r->rate + 0.3 * inst;
		r->mark_ms = now;
		r->mark_bytes = bytes;
	}
	r->bytes = bytes;
	r->total = total;
	snprintf(r->state, sizeof(r->state), "%s", state != NULL ? state : "");
	r->ended_ms = state != NULL && strcmp(state, "tcp") != 0 ? now : 0;
	if (!p->drawing) {
		p->drawing = true;
		ev_timer_start(l->loop, &p->draw, DRAW_MS, on_draw, p);
	}
}

void lobby_xprog_free(struct lobby *l)
{
	if (l->xprog == NULL)
		return;
	ev_timer_stop(l->loop, &l->xprog->draw);
	log_status(NULL);
	free(l->xprog);
	l->xprog = NULL;
}
