/*
 * Bans and their state file: <state-dir>/bans.json for the whole relay
 * (checked for every server), <state-dir>/servers/<name>/bans.json for one
 * named server (checked for it alone, after the global ones).
 *
 * Every change rewrites the file atomically (common/statefile); expired bans
 * are forgotten, in memory and in the file. At start a missing file means no
 * bans, and a corrupt one stops the relay with a message naming the file,
 * which is left untouched for the operator (so is an unreadable one:
 * starting without it would overwrite it at the next change). A save that fails (full disk,
 * read-only directory) keeps the ban active in memory, is logged and
 * counted, and is retried on the next change and every minute.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "banlist.h"
#include "log.h"
#include "relay.h"
#include "statefile.h"
#include "strbuf.h"

struct relay_bans {
	struct relay *r;
	struct relay_server *srv; /* NULL: the global table */
	struct banlist *list;
	char path[PATH_MAX];
	bool dirty;
	struct ev_timer retry;
};

static long long wall_s(void)
{
	return (long long)time(NULL);
}

const char *relay_bans_path(const struct relay_bans *b)
{
	return b->path;
}

struct banlist *relay_bans_list(struct relay_bans *b)
{
	return b->list;
}

int relay_bans_save(struct relay_bans *b)
{
	struct strbuf sb;
	int r;

	banlist_expire(b->list, wall_s());
	strbuf_init(&sb, BANLIST_FILE_MAX(RELAY_MAX_BANS));
	banlist_to_json(b->list, &sb);
	if (sb.bad) {
		strbuf_release(&sb);
		return -ENOMEM;
	}
	r = statefile_write(b->path, sb.p, sb.len);
	strbuf_release(&sb);
	if (r < 0) {
		b->dirty = true;
		b->r->state_write_errors++;
		errno = -r;
		log_warn("bans-save-fail file=%s", b->path);
		return r;
	}
	b->dirty = false;
	return 0;
}

bool relay_bans_check(struct relay_bans *b, const struct addr_ip *ip)
{
	bool expired;
	const struct ban *ban = banlist_find(b->list, ip, wall_s(), &expired);

	if (expired)
		relay_bans_save(b);
	return ban != NULL;
}

static int load(struct relay_bans *b, struct banlist *into)
{
	char *text = NULL, err[256];
	size_t len;
	int r;

	r = statefile_read(b->path, BANLIST_FILE_MAX(RELAY_MAX_BANS), &text, &len);
	/* No file, or no directory to hold one: no bans yet. */
	if (r == -ENOENT || r == -ENOTDIR)
		return 0;
	if (r < 0) {
		errno = -r;
		log_warn("bans-unreadable file=%s", b->path);
		return r;
	}
	r = banlist_load_json(into, text, len, wall_s(), err, sizeof(err));
	free(text);
	if (r < 0) {
		log_err("bans-corrupt file=%s error=\"%s\"", b->path, err);
		return -EBADMSG;
	}
	return 0;
}

/* Every minute: forget expired bans, retry a failed save. */
static void on_tick(struct ev_timer *t, void *arg)
{
	struct relay_bans *b = arg;

	if (banlist_expire(b->list, wall_s()) > 0 || b->dirty)
		relay_bans_save(b);
	ev_timer_start(b->r->loop, t, 60000, on_tick, b);
}

size_t relay_bans_close_sessions(struct relay_bans *b, const struct addr_ip *ip)
{
	size_t n = 0;

	if (b->srv != NULL)
		return relay_proxy_close_ip(b->srv->proxy, ip);
	for (size_t i = 0; i < b->r->nservers; i++)
		n += relay_proxy_close_ip(b->r->servers[i]->proxy, ip);
	return n;
}

int relay_bans_new(struct relay *r, struct relay_server *srv, struct relay_bans **out)
{
	struct relay_bans *b = calloc(1, sizeof(*b));
	char dir[PATH_MAX];
	int n, ret;

	*out = NULL;
	if (b == NULL)
		return -ENOMEM;
	b->r = r;
	b->srv = srv;
	ev_timer_init(&b->retry);
	if (srv != NULL)
		n = snprintf(dir, sizeof(dir), "%s/servers/%s", r->cfg.state_dir, srv->cfg.name);
	else
		n = snprintf(dir, sizeof(dir), "%s", r->cfg.state_dir);
	if (n < 0 || (size_t)n >= sizeof(dir)) {
		free(b);
		return -ENAMETOOLONG;
	}
	n = snprintf(b->path, sizeof(b->path), "%s/bans.json", dir);
	if (n < 0 || (size_t)n >= sizeof(b->path)) {
		free(b);
		return -ENAMETOOLONG;
	}
	b->list = banlist_new(RELAY_MAX_BANS);
	if (b->list == NULL) {
		free(b);
		return -ENOMEM;
	}
	ret = statefile_mkdirs(dir);
	if (ret < 0) {
		errno = -ret;
		log_warn("state-dir-unusable dir=%s bans=memory-only", dir);
	}
	/* Any failure but a missing file is fatal: starting without the bans
	 * would overwrite them at the next save. */
	ret = load(b, b->list);
	if (ret < 0) {
		banlist_free(b->list);
		free(b);
		return ret;
	}
	log_info("bans-loaded file=%s count=%zu", b->path, banlist_count(b->list));
	ev_timer_start(r->loop, &b->retry, 60000, on_tick, b);
	*out = b;
	return 0;
}

int relay_bans_reload(struct relay_bans *b)
{
	struct banlist *fresh = banlist_new(RELAY_MAX_BANS);
	const struct ban *ban = NULL;
	int r;

	if (fresh == NULL)
		return -ENOMEM;
	r = load(b, fresh);
	if (r < 0) {
		log_warnx("bans-reload-refused file=%s kept=%zu", b->path, banlist_count(b->list));
		banlist_free(fresh);
		return r;
	}
	banlist_free(b->list);
	b->list = fresh;
	/* New bans cut live sessions, as through the API. */
	while ((ban = banlist_next(b->list, ban)) != NULL)
		relay_bans_close_sessions(b, &ban->ip);
	log_info("bans-reloaded file=%s count=%zu", b->path, banlist_count(b->list));
	return 0;
}

void relay_bans_free(struct relay_bans *b)
{
	if (b == NULL)
		return;
	ev_timer_stop(b->r->loop, &b->retry);
	banlist_free(b->list);
	free(b);
}
