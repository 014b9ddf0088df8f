/*
 * The files the game talks to the lobby through (netpunch-wire.md §15), in
 * the io dir (--io-dir, else the working directory):
 *   lobby_out.jsonl   our events, one JSON object per line (truncated at
 *                     start, then appended);
 *   lobby_in.jsonl    the game's commands (truncated at start), tailed by
 *                     byte offset: only whole lines are taken;
 *   lobby_state.json  merged state fields, rewritten atomically.
 */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lobby.h"
#include "log.h"
#include "statefile.h"
#include "strbuf.h"

#define TAIL_EVERY_MS  (100)
#define LINE_MAX_BYTES (64 * 1024)
/* An event line: a roster of 200 players with their stages is ~60 KB. */
#define EVENT_MAX (256 * 1024)

struct lobby_ipc {
	struct lobby *l;
	char out_path[PATH_MAX], in_path[PATH_MAX], state_path[PATH_MAX];
	int out_fd;
	off_t in_off;
	char line[LINE_MAX_BYTES];
	size_t line_len;
	bool skipping; /* a line longer than LINE_MAX_BYTES: drop to its end */
	struct json_object *state;
	struct ev_timer tail;
	struct log_ratelimit warn;
};

void lobby_ipc_emit(struct lobby *l, const struct lobby_event *e)
{
	struct lobby_ipc *i = l->ipc;
	struct strbuf b;
	unsigned long sup;

	if (i == NULL)
		return;
	strbuf_init(&b, EVENT_MAX);
	if (lobby_event_encode(e, &b) < 0 || b.p == NULL) {
		if (log_ratelimit_ok(&i->warn, ev_now(l->loop), 10000, &sup))
			log_warnx("ipc-event-too-big file=%s limit=%d suppressed=%lu", i->out_path,
				  EVENT_MAX, sup);
		strbuf_release(&b);
		return;
	}
	strbuf_append(&b, "\n", 1);
	if (write(i->out_fd, b.p, b.len) != (ssize_t)b.len &&
	    log_ratelimit_ok(&i->warn, ev_now(l->loop), 10000, &sup))
		log_warn("ipc-write-fail file=%s suppressed=%lu", i->out_path, sup);
	strbuf_release(&b);
}

static void write_state(struct lobby_ipc *i)
{
	size_t len;
	const char *s = json_object_to_json_string_length(i->state, JSON_C_TO_STRING_PLAIN, &len);
	int r = statefile_write(i->state_path, s, len);
	unsigned long sup;

	if (r < 0 && log_ratelimit_ok(&i->warn, ev_now(i->l->loop), 10000, &sup)) {
		errno = -r;
		log_warn("ipc-state-write-fail file=%s suppressed=%lu", i->state_path, sup);
	}
}

void lobby_ipc_state(struct lobby *l, const char *key, struct json_object *value)
{
	if (l->ipc == NULL) {
		json_object_put(value);
		return;
	}
	json_object_object_add(l->ipc->state, key, value);
	write_state(l->ipc);
}

void lobby_ipc_status(struct lobby *l, const char *state, const char *detail)
{
	struct lobby_event e = {.type = LOBBY_EV_STATUS, .status = {state, detail}};

	log_info("status state=%s detail=\"%s\"", state, detail);
	lobby_ipc_emit(l, &e);
	if (l->ipc != NULL) {
		json_object_object_add(l->ipc->state, "state", json_object_new_string(state));
		json_object_object_add(l->ipc->state, "detail", json_object_new_string(detail));
		write_state(l->ipc);
	}
}

static void command(struct lobby_ipc *i, const char *line, size_t len)
{
	struct lobby *l = i->l;
	struct lobby_cmd c;
	char err[96];
	int r = lobby_cmd_decode(line, len, &c, err, sizeof(err));

	if (r == -ENODATA)
		return; /* a blank line */
	if (r < 0) {
		log_warnx("ipc-bad-command file=%s error=\"%s\"", i->in_path, err);
		return;
	}
	log_debug("ipc-command cmd=%s", c.cmd);
	if (c.type == LOBBY_CMD_NETSIM)
		lobby_net_netsim_reload(l);
	else if (l->role != NULL && l->role->command != NULL)
		l->role->command(l, &c);
	lobby_cmd_release(&c);
}

static void on_tail(struct ev_timer *t, void *arg)
{
	struct lobby_ipc *i = arg;
	char buf[8192];
	struct stat st;
	int fd;

	ev_timer_start(i->l->loop, t, TAIL_EVERY_MS, on_tail, i);
	if (stat(i->in_path, &st) < 0)
		return;
	if (st.st_size < i->in_off) {
		/* Truncated under us: start over. */
		i->in_off = 0;
		i->line_len = 0;
		i->skipping = false;
	}
	if (st.st_size == i->in_off)
		return;
	fd = open(i->in_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	for (;;) {
		ssize_t n = pread(fd, buf, sizeof(buf), i->in_off);

		if (n <= 0)
			break;
		i->in_off += n;
		for (ssize_t k = 0; k < n; k++) {
			char c = buf[k];

			if (c == '\n') {
				if (!i->skipping)
					command(i, i->line, i->line_len);
				i->line_len = 0;
				i->skipping = false;
				/* A quit may have ended the lobby. */
				if (i->l->stopping)
					goto out;
				continue;
			}
			if (i->skipping)
				continue;
			if (i->line_len == sizeof(i->line)) {
				log_warnx("ipc-line-too-long file=%s limit=%d", i->in_path,
					  LINE_MAX_BYTES);
				i->skipping = true;
				i->line_len = 0;
				continue;
			}
			i->line[i->line_len++] = c;
		}
	}
out:
	close(fd);
}

static int make_path(char *dst, const char *dir, const char *name)
{
	int n = snprintf(dst, PATH_MAX, "%s/%s", dir, name);

	return n < 0 || n >= PATH_MAX ? -ENAMETOOLONG : 0;
}

int lobby_ipc_new(struct lobby *l)
{
	struct lobby_ipc *i = calloc(1, sizeof(*i));
	const char *dir = l->cfg.io_dir[0] != '\0' ? l->cfg.io_dir : ".";
	int fd, r;

	if (i == NULL)
		return -ENOMEM;
	i->l = l;
	i->out_fd = -1;
	ev_timer_init(&i->tail);
	if (make_path(i->out_path, dir, "lobby_out.jsonl") < 0 ||
	    make_path(i->in_path, dir, "lobby_in.jsonl") < 0 ||
	    make_path(i->state_path, dir, "lobby_state.json") < 0) {
		free(i);
		return -ENAMETOOLONG;
	}
	r = statefile_mkdirs(dir);
	if (r < 0) {
		free(i);
		return r;
	}
	i->out_fd = open(i->out_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
	if (i->out_fd < 0) {
		r = -errno;
		free(i);
		return r;
	}
	fd = open(i->in_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd >= 0)
		close(fd);
	i->state = json_object_new_object();
	json_object_object_add(i->state, "session", json_object_new_string(l->session));
	l->ipc = i;
	write_state(i);
	ev_timer_start(l->loop, &i->tail, TAIL_EVERY_MS, on_tail, i);
	return 0;
}

void lobby_ipc_free(struct lobby_ipc *i)
{
	if (i == NULL)
		return;
	ev_timer_stop(i->l->loop, &i->tail);
	if (i->out_fd >= 0)
		close(i->out_fd);
	json_object_put(i->state);
	free(i);
}
