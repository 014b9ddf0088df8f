/*
 * The one registry: every listed thing, whichever door it came through.
 *
 * One bounded htab per kind (lobbies, Q3 servers, Fugitive servers), each in
 * refresh order, so expiry takes entries from the old end in O(1) and lists
 * come newest first. The owning module defines a kind's value struct and its
 * snapshot fields (struct master_reg_kind_ops); the registry keeps the tables,
 * expiry, and the snapshot file: written atomically, loaded all or nothing.
 */
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "htab.h"
#include "jsonp.h"
#include "log.h"
#include "master.h"
#include "statefile.h"
#include "strbuf.h"

/* The largest snapshot we read back: every kind full, generously. */
#define SNAPSHOT_MAX ((size_t)64 << 20)

struct master_registry {
	struct ev_loop *loop;
	struct master_reg_kind_ops ops[MASTER_REG_NKINDS];
	struct htab *t[MASTER_REG_NKINDS];
	uint64_t expired[MASTER_REG_NKINDS];
	/* Bumped by every change of a kind: kept lists compare it. */
	uint64_t gen[MASTER_REG_NKINDS];
	struct ev_timer tick, save_timer;
	char save_path[PATH_MAX];
	long long save_every_ms;
	uint64_t saves, save_errors;

	/* --redis (master_registry_set_sync). */
	bool has_sync, merging;
	struct master_reg_sync sync;
	struct queued *queue; /* entries of ours to publish this turn */
	size_t nqueue, qcap;
	bool queue_all; /* the queue overflowed, or a reconnection: all of ours */
	size_t remote[MASTER_REG_NKINDS];
};

struct queued {
	enum master_reg_kind kind;
	uint8_t key[MASTER_REG_KEY_MAX];
};

static long long wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void flush_queue(void *arg);

static void on_tick(struct ev_timer *t, void *arg)
{
	struct master_registry *reg = arg;

	master_registry_expire(reg);
	ev_timer_start(reg->loop, t, 1000, on_tick, reg);
}

struct master_registry *master_registry_new(struct ev_loop *loop)
{
	struct master_registry *reg = calloc(1, sizeof(*reg));

	if (reg == NULL)
		return NULL;
	reg->loop = loop;
	ev_timer_init(&reg->tick);
	ev_timer_init(&reg->save_timer);
	ev_timer_start(loop, &reg->tick, 1000, on_tick, reg);
	return reg;
}

void master_registry_free(struct master_registry *reg)
{
	if (reg == NULL)
		return;
	ev_timer_stop(reg->loop, &reg->tick);
	ev_timer_stop(reg->loop, &reg->save_timer);
	if (reg->has_sync)
		ev_before_sleep_del(reg->loop, flush_queue, reg);
	for (int k = 0; k < MASTER_REG_NKINDS; k++)
		htab_free(reg->t[k]);
	free(reg->queue);
	free(reg);
}

int master_registry_add_kind(struct master_registry *reg, enum master_reg_kind kind,
			     const struct master_reg_kind_ops *ops)
{
	if ((unsigned)kind >= MASTER_REG_NKINDS || reg->t[kind] != NULL ||
	    ops->key_len > MASTER_REG_KEY_MAX || ops->val_size < sizeof(struct master_reg_head))
		return -EINVAL;
	reg->t[kind] = htab_new(ops->capacity, ops->key_len, ops->val_size);
	if (reg->t[kind] == NULL)
		return -errno;
	reg->ops[kind] = *ops;
	return 0;
}

static void drop(struct master_registry *reg, enum master_reg_kind kind, void *val)
{
	if (((struct master_reg_head *)val)->remote)
		reg->remote[kind]--;
	if (reg->ops[kind].on_drop != NULL)
		reg->ops[kind].on_drop(reg->ops[kind].arg, val);
	htab_remove(reg->t[kind], val);
	reg->gen[kind]++;
}

static void expire_kind(struct master_registry *reg, enum master_reg_kind kind, long long now)
{
	struct master_reg_head *h;

	if (reg->t[kind] == NULL || reg->ops[kind].ttl_ms <= 0)
		return;
	/* The reference drops an entry once now - at > TTL (strictly). */
	while ((h = htab_oldest(reg->t[kind])) != NULL &&
	       now - h->seen_ms > reg->ops[kind].ttl_ms) {
		drop(reg, kind, h);
		reg->expired[kind]++;
	}
}

void master_registry_expire(struct master_registry *reg)
{
	long long now = ev_now_update(reg->loop);

	for (int k = 0; k < MASTER_REG_NKINDS; k++)
		expire_kind(reg, (enum master_reg_kind)k, now);
}

void *master_registry_get(struct master_registry *reg, enum master_reg_kind kind, const void *key)
{
	struct master_reg_head *h;

	if (reg->t[kind] == NULL)
		return NULL;
	h = htab_get(reg->t[kind], key);
	/* An entry past its time is gone even if the sweep has not run. */
	if (h != NULL && reg->ops[kind].ttl_ms > 0 &&
	    ev_now(reg->loop) - h->seen_ms > reg->ops[kind].ttl_ms) {
		drop(reg, kind, h);
		reg->expired[kind]++;
		return NULL;
	}
	return h;
}

/* An entry of ours changed: write it to Redis at the end of this turn. */
static void enqueue(struct master_registry *reg, enum master_reg_kind kind,
		    struct master_reg_head *h)
{
	struct queued *q;

	if (!reg->has_sync || h->queued)
		return;
	if (reg->nqueue == reg->qcap) {
		/* Deleted entries still hold their slots: publish all of ours. */
		reg->queue_all = true;
		return;
	}
	q = &reg->queue[reg->nqueue++];
	q->kind = kind;
	memcpy(q->key, htab_key(reg->t[kind], h), reg->ops[kind].key_len);
	h->queued = true;
}

static void stamp(struct master_registry *reg, enum master_reg_kind kind, struct master_reg_head *h,
		  long long now, long long wall)
{
	h->seen_ms = now;
	h->seen_wall_ms = wall;
	if (h->remote) {
		/* Refreshed here: ours now. */
		h->remote = false;
		reg->remote[kind]--;
	}
	enqueue(reg, kind, h);
}

void *master_registry_put(struct master_registry *reg, enum master_reg_kind kind, const void *key,
			  bool *created)
{
	struct master_reg_head *h;

	if (reg->t[kind] == NULL) {
		errno = EINVAL;
		return NULL;
	}
	h = master_registry_get(reg, kind, key);
	if (h != NULL) {
		*created = false;
		return h;
	}
	expire_kind(reg, kind, ev_now(reg->loop));
	h = htab_insert(reg->t[kind], key, false, NULL);
	if (h == NULL) {
		errno = ENOSPC;
		return NULL;
	}
	*created = true;
	h->remote = h->queued = false;
	stamp(reg, kind, h, ev_now(reg->loop), wall_ms());
	reg->gen[kind]++;
	return h;
}

void master_registry_refresh(struct master_registry *reg, enum master_reg_kind kind, void *val)
{
	stamp(reg, kind, val, ev_now(reg->loop), wall_ms());
	htab_touch(reg->t[kind], val);
	reg->gen[kind]++;
}

void master_registry_changed(struct master_registry *reg, enum master_reg_kind kind)
{
	reg->gen[kind]++;
}

uint64_t master_registry_gen(const struct master_registry *reg, enum master_reg_kind kind)
{
	return reg->gen[kind];
}

void master_registry_del(struct master_registry *reg, enum master_reg_kind kind, void *val)
{
	uint8_t key[MASTER_REG_KEY_MAX];

	if (reg->has_sync)
		memcpy(key, htab_key(reg->t[kind], val), reg->ops[kind].key_len);
	drop(reg, kind, val);
	if (reg->has_sync)
		reg->sync.deleted(reg->sync.arg, kind, key, wall_ms());
}

void *master_registry_next(struct master_registry *reg, enum master_reg_kind kind, const void *prev)
{
	if (reg->t[kind] == NULL)
		return NULL;
	return prev == NULL ? htab_newest(reg->t[kind]) : htab_older(reg->t[kind], prev);
}

size_t master_registry_count(const struct master_registry *reg, enum master_reg_kind kind)
{
	return reg->t[kind] != NULL ? htab_count(reg->t[kind]) : 0;
}

size_t master_registry_capacity(const struct master_registry *reg, enum master_reg_kind kind)
{
	return reg->t[kind] != NULL ? htab_capacity(reg->t[kind]) : 0;
}

/* ---- snapshots ---- */

int master_registry_save(struct master_registry *reg, const char *path)
{
	struct json_object *root = json_object_new_object(), *kinds = json_object_new_object();
	const char *text;
	size_t len;
	int r;

	json_object_object_add(root, "version", json_object_new_int(1));
	json_object_object_add(root, "saved_ms", json_object_new_int64(wall_ms()));
	json_object_object_add(root, "kinds", kinds);
	for (int k = 0; k < MASTER_REG_NKINDS; k++) {
		struct json_object *arr;

		if (reg->t[k] == NULL)
			continue;
		arr = json_object_new_array();
		/* Oldest first, so a restore inserts in the same order. */
		for (struct master_reg_head *h = htab_oldest(reg->t[k]); h != NULL;
		     h = htab_newer(reg->t[k], h)) {
			struct json_object *o;

			/* Remote entries are their masters' to keep. */
			if (h->remote)
				continue;
			o = json_object_new_object();
			json_object_object_add(o, "seen_ms",
					       json_object_new_int64(h->seen_wall_ms));
			reg->ops[k].save(h, o);
			json_object_array_add(arr, o);
		}
		json_object_object_add(kinds, reg->ops[k].name, arr);
	}
	text = json_object_to_json_string_length(root, JSON_C_TO_STRING_PLAIN, &len);
	r = statefile_write(path, text, len);
	json_object_put(root);
	if (r < 0) {
		reg->save_errors++;
		return r;
	}
	reg->saves++;
	return 0;
}

struct pending {
	enum master_reg_kind kind;
	uint8_t key[MASTER_REG_KEY_MAX];
	void *val;
};

/*
 * Parses and validates the whole document into pending entries first; the
 * tables are touched only when all of it is good.
 */
static int parse_snapshot(struct master_registry *reg, const char *text, size_t len,
			  struct pending **out, size_t *nout, char *err, size_t errsize)
{
	struct json_object *root, *kinds, *f;
	long long now = ev_now(reg->loop), wall = wall_ms();
	struct pending *p = NULL;
	size_t n = 0, cap = 0;
	int ret = -EBADMSG;

	*out = NULL;
	*nout = 0;
	if (jsonp_parse(text, len, 16, &root, err, errsize) < 0)
		return -EBADMSG;
	if (!json_object_is_type(root, json_type_object) ||
	    !json_object_object_get_ex(root, "version", &f) ||
	    !json_object_is_type(f, json_type_int) || json_object_get_int64(f) != 1) {
		snprintf(err, errsize, "not a version 1 registry snapshot");
		goto out;
	}
	if (!json_object_object_get_ex(root, "kinds", &kinds) ||
	    !json_object_is_type(kinds, json_type_object)) {
		snprintf(err, errsize, "kinds: missing or not an object");
		goto out;
	}
	for (int k = 0; k < MASTER_REG_NKINDS; k++) {
		struct json_object *arr;
		size_t count;

		if (reg->t[k] == NULL || !json_object_object_get_ex(kinds, reg->ops[k].name, &arr))
			continue;
		if (!json_object_is_type(arr, json_type_array)) {
			snprintf(err, errsize, "kinds.%s: not an array", reg->ops[k].name);
			goto out;
		}
		count = json_object_array_length(arr);
		if (count > reg->ops[k].capacity) {
			snprintf(err, errsize, "kinds.%s: %zu entries, more than %zu",
				 reg->ops[k].name, count, reg->ops[k].capacity);
			goto out;
		}
		for (size_t i = 0; i < count; i++) {
			struct json_object *o = json_object_array_get_idx(arr, i), *s;
			char e2[160];
			struct master_reg_head *h;
			long long seen;

			if (!json_object_is_type(o, json_type_object) ||
			    !json_object_object_get_ex(o, "seen_ms", &s) ||
			    !json_object_is_type(s, json_type_int)) {
				snprintf(err, errsize, "kinds.%s[%zu]: not an object with seen_ms",
					 reg->ops[k].name, i);
				goto out;
			}
			seen = json_object_get_int64(s);
			if (n == cap) {
				size_t nc = cap ? cap * 2 : 64;
				struct pending *np = realloc(p, nc * sizeof(*np));

				if (np == NULL) {
					snprintf(err, errsize, "out of memory");
					goto out;
				}
				p = np;
				cap = nc;
			}
			p[n].kind = (enum master_reg_kind)k;
			p[n].val = calloc(1, reg->ops[k].val_size);
			if (p[n].val == NULL) {
				snprintf(err, errsize, "out of memory");
				goto out;
			}
			n++;
			if (reg->ops[k].load(o, p[n - 1].val, e2, sizeof(e2)) < 0) {
				snprintf(err, errsize, "kinds.%s[%zu]: %s", reg->ops[k].name, i,
					 e2);
				goto out;
			}
			h = p[n - 1].val;
			/* Its age carries over; the clock may have gone back. */
			h->seen_wall_ms = seen;
			h->seen_ms = now - (wall > seen ? wall - seen : 0);
			memset(p[n - 1].key, 0, sizeof(p[n - 1].key));
			reg->ops[k].key_of(h, p[n - 1].key);
		}
	}
	ret = 0;
out:
	json_object_put(root);
	*out = p;
	*nout = n;
	return ret;
}

int master_registry_load(struct master_registry *reg, const char *path)
{
	char *text = NULL, err[256], moved[PATH_MAX + 32];
	struct pending *p = NULL;
	size_t len, n = 0, loaded = 0;
	int r;

	r = statefile_read(path, SNAPSHOT_MAX, &text, &len);
	if (r == -ENOENT || r == -ENOTDIR)
		return 0;
	if (r < 0) {
		errno = -r;
		log_warn("snapshot-unreadable file=%s", path);
		snprintf(err, sizeof(err), "%s", strerror(-r));
	} else {
		r = parse_snapshot(reg, text, len, &p, &n, err, sizeof(err));
	}
	free(text);
	if (r < 0) {
		int q = statefile_quarantine(path, moved, sizeof(moved));

		log_err("snapshot-corrupt file=%s error=\"%s\" moved-to=%s loaded=0", path, err,
			q == 0 ? moved : "(could not move it)");
		for (size_t i = 0; i < n; i++)
			free(p[i].val);
		free(p);
		return -EBADMSG;
	}
	for (size_t i = 0; i < n; i++) {
		const struct master_reg_kind_ops *ops = &reg->ops[p[i].kind];
		struct master_reg_head *src = p[i].val, *dst;

		if (ops->ttl_ms > 0 && ev_now(reg->loop) - src->seen_ms > ops->ttl_ms) {
			free(p[i].val);
			continue;
		}
		dst = htab_get(reg->t[p[i].kind], p[i].key);
		if (dst != NULL)
			drop(reg, p[i].kind, dst);
		dst = htab_insert(reg->t[p[i].kind], p[i].key, false, NULL);
		if (dst != NULL) {
			memcpy(dst, src, ops->val_size);
			reg->gen[p[i].kind]++;
			loaded++;
			if (ops->on_restore != NULL)
				ops->on_restore(ops->arg, dst);
		}
		free(p[i].val);
	}
	free(p);
	log_info("snapshot-loaded file=%s entries=%zu", path, loaded);
	return 0;
}

static void on_save(struct ev_timer *t, void *arg)
{
	struct master_registry *reg = arg;
	int r = master_registry_save(reg, reg->save_path);

	if (r < 0 && (reg->save_errors == 1 || reg->save_errors % 60 == 0)) {
		errno = -r;
		log_warn("snapshot-save-fail file=%s failures=%llu", reg->save_path,
			 (unsigned long long)reg->save_errors);
	}
	ev_timer_start(reg->loop, t, reg->save_every_ms, on_save, reg);
}

void master_registry_autosave(struct master_registry *reg, const char *path, long long every_ms)
{
	snprintf(reg->save_path, sizeof(reg->save_path), "%s", path);
	reg->save_every_ms = every_ms;
	ev_timer_start(reg->loop, &reg->save_timer, every_ms, on_save, reg);
}

void master_registry_metrics(const struct master_registry *reg, struct strbuf *out)
{
	strbuf_printf(out, "# HELP rally_master_entries Registry entries by kind.\n"
			   "# TYPE rally_master_entries gauge\n");
	for (int k = 0; k < MASTER_REG_NKINDS; k++) {
		if (reg->t[k] != NULL)
			strbuf_printf(out, "rally_master_entries{kind=\"%s\"} %zu\n",
				      reg->ops[k].name, htab_count(reg->t[k]));
	}
	strbuf_printf(out, "# HELP rally_master_entries_expired_total Entries dropped by age.\n"
			   "# TYPE rally_master_entries_expired_total counter\n");
	for (int k = 0; k < MASTER_REG_NKINDS; k++) {
		if (reg->t[k] != NULL)
			strbuf_printf(out, "rally_master_entries_expired_total{kind=\"%s\"} %llu\n",
				      reg->ops[k].name, (unsigned long long)reg->expired[k]);
	}
	strbuf_printf(out,
		      "# HELP rally_master_snapshots_total Snapshots written, and failed.\n"
		      "# TYPE rally_master_snapshots_total counter\n"
		      "rally_master_snapshots_total{result=\"ok\"} %llu\n"
		      "rally_master_snapshots_total{result=\"error\"} %llu\n",
		      (unsigned long long)reg->saves, (unsigned long long)reg->save_errors);
}

/* ---- the shared registry (--redis) ---- */

static void publish_entry(struct master_registry *reg, enum master_reg_kind kind,
			  struct master_reg_head *h, long long now)
{
	h->queued = false;
	if (h->remote || (reg->ops[kind].ttl_ms > 0 && now - h->seen_ms > reg->ops[kind].ttl_ms))
		return;
	reg->sync.publish(reg->sync.arg, kind, htab_key(reg->t[kind], h), h);
}

/* Before the loop sleeps: the entries of ours that changed this turn. */
static void flush_queue(void *arg)
{
	struct master_registry *reg = arg;
	long long now = ev_now(reg->loop);

	if (reg->queue_all) {
		reg->queue_all = false;
		reg->nqueue = 0;
		for (int k = 0; k < MASTER_REG_NKINDS; k++) {
			if (reg->t[k] == NULL)
				continue;
			for (struct master_reg_head *h = htab_oldest(reg->t[k]); h != NULL;
			     h = htab_newer(reg->t[k], h))
				publish_entry(reg, (enum master_reg_kind)k, h, now);
		}
		return;
	}
	for (size_t i = 0; i < reg->nqueue; i++) {
		const struct queued *q = &reg->queue[i];
		struct master_reg_head *h = htab_get(reg->t[q->kind], q->key);

		if (h != NULL && h->queued)
			publish_entry(reg, q->kind, h, now);
	}
	reg->nqueue = 0;
}

void master_registry_set_sync(struct master_registry *reg, const struct master_reg_sync *sync)
{
	size_t cap = 0;

	for (int k = 0; k < MASTER_REG_NKINDS; k++)
		cap += reg->ops[k].capacity;
	reg->queue = calloc(cap > 0 ? cap : 1, sizeof(*reg->queue));
	if (reg->queue == NULL)
		log_fatalx("registry-sync-init-fail entries=%zu", cap);
	if (ev_before_sleep_add(reg->loop, flush_queue, reg) < 0)
		log_fatalx("registry-sync-init-fail hooks");
	reg->qcap = cap;
	reg->sync = *sync;
	reg->has_sync = true;
}

const struct master_reg_kind_ops *master_registry_ops(const struct master_registry *reg,
						      enum master_reg_kind kind)
{
	return (unsigned)kind < MASTER_REG_NKINDS && reg->t[kind] != NULL ? &reg->ops[kind] : NULL;
}

int master_registry_kind_by_name(const struct master_registry *reg, const char *name)
{
	for (int k = 0; k < MASTER_REG_NKINDS; k++) {
		if (reg->t[k] != NULL && strcmp(reg->ops[k].name, name) == 0)
			return k;
	}
	return -ENOENT;
}

int master_registry_merge(struct master_registry *reg, enum master_reg_kind kind, const void *val,
			  uint32_t epoch)
{
	const struct master_reg_kind_ops *ops = &reg->ops[kind];
	const struct master_reg_head *src = val;
	struct master_reg_head *h, *o;
	uint8_t key[MASTER_REG_KEY_MAX];
	long long now = ev_now(reg->loop), age = wall_ms() - src->seen_wall_ms;

	if (reg->t[kind] == NULL)
		return -EINVAL;
	if (age < 0)
		age = 0;
	if (ops->ttl_ms > 0 && age > ops->ttl_ms)
		return -ESTALE;
	memset(key, 0, sizeof(key));
	ops->key_of(val, key);
	h = htab_get(reg->t[kind], key);
	if (h != NULL && !h->remote && h->seen_wall_ms >= src->seen_wall_ms)
		return 0;
	reg->merging = true;
	if (h != NULL)
		drop(reg, kind, h);
	else
		expire_kind(reg, kind, now);
	h = htab_insert(reg->t[kind], key, false, NULL);
	if (h == NULL) {
		reg->merging = false;
		return -ENOSPC;
	}
	memcpy(h, val, ops->val_size);
	h->seen_ms = now - age;
	h->remote = true;
	h->queued = false;
	h->epoch = epoch;
	/* Its place by age, so expiry still takes from the old end. */
	o = htab_older(reg->t[kind], h);
	if (o != NULL && o->seen_ms > h->seen_ms) {
		while (o != NULL && o->seen_ms > h->seen_ms)
			o = htab_older(reg->t[kind], o);
		htab_move_after(reg->t[kind], h, o);
	}
	reg->remote[kind]++;
	reg->gen[kind]++;
	if (ops->on_restore != NULL)
		ops->on_restore(ops->arg, h);
	reg->merging = false;
	return 1;
}

int master_registry_unmerge(struct master_registry *reg, enum master_reg_kind kind,
			    const uint8_t *key, long long wall)
{
	uint8_t k[MASTER_REG_KEY_MAX];
	struct master_reg_head *h;

	if (reg->t[kind] == NULL)
		return 0;
	memset(k, 0, sizeof(k));
	memcpy(k, key, reg->ops[kind].key_len);
	h = htab_get(reg->t[kind], k);
	if (h == NULL || h->seen_wall_ms > wall)
		return 0;
	reg->merging = true;
	drop(reg, kind, h);
	reg->merging = false;
	return 1;
}

int master_registry_unmerge_remote(struct master_registry *reg, enum master_reg_kind kind,
				   const uint8_t *key)
{
	uint8_t k[MASTER_REG_KEY_MAX];
	struct master_reg_head *h;

	if (reg->t[kind] == NULL)
		return 0;
	memset(k, 0, sizeof(k));
	memcpy(k, key, reg->ops[kind].key_len);
	h = htab_get(reg->t[kind], k);
	if (h == NULL || !h->remote)
		return 0;
	reg->merging = true;
	drop(reg, kind, h);
	reg->merging = false;
	return 1;
}

size_t master_registry_drop_unconfirmed(struct master_registry *reg, uint32_t epoch)
{
	size_t n = 0;

	reg->merging = true;
	for (int k = 0; k < MASTER_REG_NKINDS; k++) {
		struct master_reg_head *h, *next;

		if (reg->t[k] == NULL)
			continue;
		for (h = htab_oldest(reg->t[k]); h != NULL; h = next) {
			next = htab_newer(reg->t[k], h);
			if (h->remote && h->epoch != epoch) {
				drop(reg, (enum master_reg_kind)k, h);
				n++;
			}
		}
	}
	reg->merging = false;
	return n;
}

void master_registry_publish_all(struct master_registry *reg)
{
	reg->queue_all = true;
}

size_t master_registry_remote_count(const struct master_registry *reg, enum master_reg_kind kind)
{
	return reg->remote[kind];
}

bool master_registry_merging(const struct master_registry *reg)
{
	return reg->merging;
}
