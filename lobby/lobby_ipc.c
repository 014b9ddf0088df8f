/*
 * The files the game talks to the lobby through (netpunch-wire.md §15), in
 * the io dir (--io-dir, else the working directory):
 *   lobby_out.jsonl   our events, one JSON object per line (truncated at
 *                     start, then appended);
 *   lobby_in.jsonl    the game's commands (truncated at start), tailed by
 *                     byte offset: only whole lines are taken;
 *   lobby_state.json  merged state fields, rewritten atomically, as
 *                     Python's json.dumps writes the dict (", " and ": ",
 *                     keys in the order they were first set);
 *   lobby_panel.txt   a display-only snapshot of that state for the
 *                     game's Lua UI, rewritten with every state write.
 * Statuses are events only: what lobby_state.json says is set by the
 * roles, field by field, where netpunch's lobby.py sets it.
 */
#include <ctype.h>
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
#include "pyjson.h"
#include "statefile.h"
#include "strbuf.h"

#define TAIL_EVERY_MS  (100)
#define LINE_MAX_BYTES (64 * 1024)
/* An event line: a roster of 200 players with their stages is ~60 KB. */
#define EVENT_MAX (256 * 1024)
/* lobby.py _write_lobby_panel: values cut to 160 characters, 200 players. */
#define PANEL_VALUE_CHARS (160)
#define PANEL_PLAYERS     (200)
#define PANEL_MAX         (256 * 1024)

struct lobby_ipc {
	struct lobby *l;
	char out_path[PATH_MAX], in_path[PATH_MAX], state_path[PATH_MAX], panel_path[PATH_MAX];
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

/* Python's str.split() separators (str.isspace). */
static bool is_space(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202f || c == 0x205f || c == 0x3000;
}

/* One UTF-8 character at s (n bytes left): its code point and length; a
 * byte that starts none counts as one character of its own. */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
	size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 1;
	uint32_t c = len == 1 ? s[0] : s[0] & (0x7fu >> len);

	if (len > n)
		len = 1;
	for (size_t k = 1; k < len; k++) {
		if ((s[k] & 0xc0) != 0x80) {
			*cp = s[0];
			return 1;
		}
		c = (c << 6) | (s[k] & 0x3fu);
	}
	*cp = len == 1 ? s[0] : c;
	return len;
}

/* lobby.py's clean(): the words of s joined by one space, at most 160
 * characters, appended to b. */
static void panel_clean(struct strbuf *b, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s), chars = 0;
	bool gap = false, any = false;

	while (n > 0 && chars < PANEL_VALUE_CHARS) {
		uint32_t cp;
		size_t len = utf8_next(p, n, &cp);

		if (is_space(cp)) {
			gap = any;
		} else {
			if (gap) {
				strbuf_append(b, " ", 1);
				if (++chars == PANEL_VALUE_CHARS)
					break;
				gap = false;
			}
			strbuf_append(b, (const char *)p, len);
			chars++;
			any = true;
		}
		p += len;
		n -= len;
	}
}

/* A state field as text: a string as it is, an integer in decimal, absent,
 * null, false, 0 and "" as "" (Python's str(value or "")). */
static void field_text(struct json_object *v, char *buf, size_t size)
{
	buf[0] = '\0';
	if (v == NULL)
		return;
	if (json_object_is_type(v, json_type_string))
		snprintf(buf, size, "%s", json_object_get_string(v));
	else if (json_object_is_type(v, json_type_int) && json_object_get_int64(v) != 0)
		snprintf(buf, size, "%lld", (long long)json_object_get_int64(v));
}

static struct json_object *get(struct json_object *o, const char *key)
{
	struct json_object *v;

	return json_object_object_get_ex(o, key, &v) ? v : NULL;
}

/*
 * lobby.py _write_lobby_panel: "Connected" or the state capitalised; the
 * lobby's name or "Multiplayer lobby"; "Host: <host>" or "Host: waiting";
 * while connected one line per player: "<name>[ (host[, you])] - company
 * <id or ->". No join secrets in it.
 */
static void panel_text(struct json_object *st, struct strbuf *b)
{
	struct json_object *players = get(st, "players"), *companies = get(st, "companies");
	const char *host = json_object_get_string(get(st, "host"));
	const char *you = json_object_get_string(get(st, "you"));
	char text[PANEL_VALUE_CHARS * 4 + 1];
	size_t start;
	bool connected;

	if (get(st, "state") == NULL)
		snprintf(text, sizeof(text), "connecting");
	else
		field_text(get(st, "state"), text, sizeof(text));
	connected = strcmp(text, "connected") == 0;
	if (connected) {
		strbuf_append(b, "Connected", 9);
	} else {
		/* str.capitalize(): the first character upper, the rest lower
		 * (the states are ASCII). */
		start = b->len;
		panel_clean(b, text);
		for (size_t k = start; b->p != NULL && k < b->len; k++) {
			unsigned char c = (unsigned char)b->p[k];

			if (c < 0x80)
				b->p[k] = (char)(k == start ? toupper(c) : tolower(c));
		}
	}
	strbuf_append(b, "\n", 1);
	field_text(get(st, "lobby"), text, sizeof(text));
	start = b->len;
	panel_clean(b, text);
	if (b->len == start)
		strbuf_append(b, "Multiplayer lobby", 17);
	strbuf_append(b, "\nHost: ", 7);
	field_text(get(st, "host"), text, sizeof(text));
	start = b->len;
	panel_clean(b, text);
	if (b->len == start)
		strbuf_append(b, "waiting", 7);
	strbuf_append(b, "\n", 1);
	if (!connected || players == NULL || !json_object_is_type(players, json_type_array))
		return;
	for (size_t k = 0; k < json_object_array_length(players) && k < PANEL_PLAYERS; k++) {
		struct json_object *p = json_object_array_get_idx(players, k), *c;
		const char *name = json_object_get_string(p);
		bool is_host, is_you;

		field_text(p, text, sizeof(text));
		panel_clean(b, text);
		is_host = json_object_is_type(p, json_type_string) && host != NULL &&
			  json_object_is_type(get(st, "host"), json_type_string) &&
			  strcmp(name, host) == 0;
		is_you = json_object_is_type(p, json_type_string) && you != NULL &&
			 json_object_is_type(get(st, "you"), json_type_string) &&
			 strcmp(name, you) == 0;
		if (is_host || is_you) {
			strbuf_append(b, " (", 2);
			if (is_host)
				strbuf_append(b, "host", 4);
			if (is_host && is_you)
				strbuf_append(b, ", ", 2);
			if (is_you)
				strbuf_append(b, "you", 3);
			strbuf_append(b, ")", 1);
		}
		strbuf_append(b, " - company ", 11);
		c = companies != NULL && json_object_is_type(companies, json_type_object) &&
				    json_object_is_type(p, json_type_string)
			    ? get(companies, name)
			    : NULL;
		if (c == NULL)
			snprintf(text, sizeof(text), "-");
		else
			field_text(c, text, sizeof(text));
		panel_clean(b, text);
		strbuf_append(b, "\n", 1);
	}
}

static void write_file(struct lobby_ipc *i, const char *path, const struct strbuf *b)
{
	unsigned long sup;
	int r = b->bad || b->p == NULL ? -EMSGSIZE : statefile_replace(path, b->p, b->len);

	if (r < 0 && log_ratelimit_ok(&i->warn, ev_now(i->l->loop), 10000, &sup)) {
		errno = -r;
		log_warn("ipc-state-write-fail file=%s suppressed=%lu", path, sup);
	}
}

/* lobby_state.json, then lobby_panel.txt from it (lobby.py write_state). */
static void write_state(struct lobby_ipc *i)
{
	struct strbuf b;
	struct pyjson j;

	strbuf_init(&b, EVENT_MAX);
	pyjson_init(&j, &b);
	lobby_json_put(&j, i->state);
	if (j.bad)
		b.bad = true;
	write_file(i, i->state_path, &b);
	strbuf_release(&b);
	strbuf_init(&b, PANEL_MAX);
	panel_text(i->state, &b);
	write_file(i, i->panel_path, &b);
	strbuf_release(&b);
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

void lobby_ipc_state_merge(struct lobby *l, struct json_object *fields)
{
	if (l->ipc != NULL && fields != NULL) {
		json_object_object_foreach(fields, key, val)
		{
			/* A key already set keeps its place (dict.update). */
			json_object_object_add(l->ipc->state, key, json_object_get(val));
		}
		write_state(l->ipc);
	}
	json_object_put(fields);
}

void lobby_ipc_status(struct lobby *l, const char *state, const char *detail)
{
	struct lobby_event e = {.type = LOBBY_EV_STATUS, .status = {state, detail}};

	log_info("status state=%s detail=\"%s\"", state, detail);
	lobby_ipc_emit(l, &e);
}

void lobby_ipc_notice(struct lobby *l, const char *text)
{
	struct lobby_event e = {.type = LOBBY_EV_CHAT, .chat = {"MULTIPLAYER", text, false, 0}};

	lobby_ipc_emit(l, &e);
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
	    make_path(i->state_path, dir, "lobby_state.json") < 0 ||
	    make_path(i->panel_path, dir, "lobby_panel.txt") < 0) {
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
