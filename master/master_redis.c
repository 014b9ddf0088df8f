/*
 * The shared registry on Redis (--redis): several rally-masters behind one
 * name see the same lobbies, Q3 servers, Fugitive servers, knocks and relay
 * allocations. docs/master.md "Several masters on one Redis" is the
 * operator's view and the key layout.
 *
 * Two hiredis connections on our loop (common/redisev): "cmd" carries every
 * command, "sub" is SUBSCRIBEd to P:events. Each master is authoritative
 * for its own entries: the registry hands us those that changed once per
 * loop turn (master_reg_sync) and we SET them with the rest of their TTL
 * as the key's expiry, then PUBLISH; Redis expires them, nobody sweeps.
 * A notification from another master is answered by a GET on cmd, so the
 * reply - in order with everything else on that connection - carries
 * Redis's latest state, which is validated (master_redis_codec.c and the
 * kind's own snapshot load) and merged as a remote entry.
 *
 * Nothing here ever waits: a request to the master is answered from its
 * registry whether Redis is up, slow or gone. Losing Redis (a closed
 * connection, a connect or command timeout) logs once, frees both
 * contexts and retries with a jittered backoff; when both connections are
 * back, everything of ours is written again and the whole prefix is read
 * (SCAN), after which remote entries the scan did not confirm are dropped.
 *
 * Life of a context: hiredis frees it itself after a failed connect or a
 * disconnect (we forget it in those callbacks); we free it with
 * redisAsyncFree otherwise. Callbacks of a context we have forgotten
 * (pending replies answered NULL during its free) are recognised by
 * conn->ac != ac and only free their own data.
 */
#include <errno.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <json-c/json.h>
#include <netdb.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "htab.h"
#include "log.h"
#include "master.h"
#include "master_redis.h"
#include "redisev.h"
#include "strbuf.h"

/* Commands waiting for an answer at most; past it publications drop. */
/* Sized for a re-publish of everything at the caps (8,692 entries, 2,000
 * knock tags, 4,096 relay ports: about 34,000 commands) with room. */
#define MAX_INFLIGHT   (65536)
#define BACKOFF_MIN_MS (100)
#define BACKOFF_MAX_MS (5000)
#define SCAN_COUNT     (500)
/* Remote relay allocations remembered (the oldest makes room). */
#define RELAYS_MAX    (8192)
#define WATCHDOG_MS   (250)
#define KEEPALIVE_MS  (5000)
#define REFUSE_LOG_MS (60000)
#define PASSWORD_MAX  (512)
/* Metrics slots past the registry kinds. */
#define K_KNOCK (MASTER_REG_NKINDS)
#define K_RELAY (MASTER_REG_NKINDS + 1)
#define K_N     (MASTER_REG_NKINDS + 2)

enum state { ST_IDLE, ST_RESOLVING, ST_CONNECTING, ST_SYNCING, ST_UP };

enum refusal {
	R_SIZE,
	R_JSON,
	R_ENVELOPE,
	R_ENTRY,
	R_KEY,
	R_FUTURE,
	R_NOTE,
	R_RELAY,
	R_MESSAGE,
	R_KEY_NAME,
	R_FULL,
	R_TYPE,
	R_N
};

static const char *const refusal_names[R_N] = {
	"size", "json",  "envelope", "entry",    "key",  "future",
	"note", "relay", "message",  "key_name", "full", "type",
};

/* on_setup's privdata: the command, for the error line (not const: hiredis
 * takes a void *). */
static char what_auth[] = "AUTH", what_select[] = "SELECT", what_setname[] = "CLIENT SETNAME",
	    what_ping[] = "PING";

struct conn {
	struct master_redis *r;
	redisAsyncContext *ac;
	const char *name;
	bool ready;
};

/* DNS for a host name, on the worker thread. */
struct job {
	struct master_redis *r; /* NULL once the owner is gone */
	char host[256];
	uint16_t port;
	struct addr out;
	int res, gai;
};

/* What a read reply is for. */
enum rd_what { RD_REG, RD_KNOCK, RD_RELAY, RD_SCAN, RD_SYNC_END };

struct rd {
	enum rd_what what;
	int kind;
	char hex[MASTER_REDIS_HEX_MAX + 1];
};

/* A relay allocation of another master. */
struct rrelay {
	struct master_relayport_info info;
	long long expires_ms;
	uint32_t epoch;
};

struct master_redis {
	struct master *m;
	struct master_redis_cfg cfg;
	char node[MASTER_REDIS_NAME_MAX + 1];
	char password[PASSWORD_MAX + 1];
	bool has_password;
	char chan[MASTER_REDIS_NAME_MAX + 16];
	char where[300]; /* the --redis target, for logs */

	enum state st;
	struct conn cmd, sub;
	struct ev_timer retry, conn_timer, watchdog;
	unsigned failures;
	bool down_logged, ever_up;
	struct job *job;
	char ip[ADDR_STRLEN];

	uint32_t epoch;
	size_t inflight;
	long long busy_since_ms, last_reply_ms;
	bool republish_pending;

	struct htab *relays; /* 32-byte key -> struct rrelay */

	uint64_t reconnects, sent, failed, dropped;
	uint64_t published[K_N], merged[K_N], refused[R_N];
	long long refused_logged_ms[R_N];
};

static const char *kind_name(const struct master_redis *r, int k)
{
	const struct master_reg_kind_ops *ops;

	if (k == K_KNOCK)
		return "knock";
	if (k == K_RELAY)
		return "relay";
	ops = master_registry_ops(r->m->reg, (enum master_reg_kind)k);
	return ops != NULL ? ops->name : "?";
}

static long long wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Counted always, logged once a minute per reason at most. */
static void refuse(struct master_redis *r, enum refusal why, const char *what, const char *detail)
{
	long long now = ev_now(r->m->loop);

	r->refused[why]++;
	if (r->refused_logged_ms[why] != 0 && now - r->refused_logged_ms[why] < REFUSE_LOG_MS)
		return;
	r->refused_logged_ms[why] = now;
	log_warnx("redis-refused reason=%s what=%s%s%s refused=%llu", refusal_names[why], what,
		  detail != NULL ? " detail=" : "", detail != NULL ? detail : "",
		  (unsigned long long)r->refused[why]);
}

/* ---- connection life ---- */

static void fail(struct master_redis *r, const char *why);
static void start_attempt(struct master_redis *r);

static void close_conn(struct conn *c)
{
	redisAsyncContext *ac = c->ac;

	c->ac = NULL;
	c->ready = false;
	/* From inside one of its own callbacks hiredis defers this. */
	if (ac != NULL)
		redisAsyncFree(ac);
}

static void on_retry(struct ev_timer *t, void *arg)
{
	(void)t;
	start_attempt(arg);
}

static void fail(struct master_redis *r, const char *why)
{
	long long delay;

	if (r->st == ST_IDLE)
		return;
	if (!r->down_logged) {
		log_warnx("redis-down redis=%s error=\"%s\" serving=local retry=backoff", r->where,
			  why);
		r->down_logged = true;
	} else {
		log_debug("redis-retry-fail redis=%s error=\"%s\" attempt=%u", r->where, why,
			  r->failures + 1);
	}
	r->st = ST_IDLE;
	close_conn(&r->cmd);
	close_conn(&r->sub);
	r->inflight = 0;
	r->republish_pending = false;
	ev_timer_stop(r->m->loop, &r->conn_timer);
	ev_timer_stop(r->m->loop, &r->watchdog);
	delay = (long long)BACKOFF_MIN_MS << (r->failures < 6 ? r->failures : 6);
	if (delay > BACKOFF_MAX_MS)
		delay = BACKOFF_MAX_MS;
	delay += randombytes_uniform((uint32_t)(delay / 4 + 1));
	r->failures++;
	ev_timer_start(r->m->loop, &r->retry, delay, on_retry, r);
}

static void note_reply(struct master_redis *r, const redisReply *reply)
{
	if (r->inflight > 0)
		r->inflight--;
	r->last_reply_ms = ev_now(r->m->loop);
	if (reply == NULL || reply->type == REDIS_REPLY_ERROR)
		r->failed++;
}

/* Sends on cmd; false when not sent (not ready, or hiredis refused). */
static bool send_cmd(struct master_redis *r, redisCallbackFn *fn, void *priv, const char *fmt, ...)
{
	va_list ap;
	int rc;

	if (r->cmd.ac == NULL)
		return false;
	va_start(ap, fmt);
	rc = redisvAsyncCommand(r->cmd.ac, fn, priv, fmt, ap);
	va_end(ap);
	if (rc != REDIS_OK) {
		r->failed++;
		return false;
	}
	if (r->inflight++ == 0)
		r->busy_since_ms = ev_now(r->m->loop);
	r->sent++;
	return true;
}

static void republish_all(struct master_redis *r);
static void on_write(redisAsyncContext *ac, void *reply, void *priv);

/* send_cmd for an argument vector (binary-safe values). */
static bool send_argv(struct master_redis *r, int argc, const char **argv, const size_t *lens)
{
	if (r->cmd.ac == NULL)
		return false;
	if (redisAsyncCommandArgv(r->cmd.ac, on_write, NULL, argc, argv, lens) != REDIS_OK) {
		r->failed++;
		return false;
	}
	if (r->inflight++ == 0)
		r->busy_since_ms = ev_now(r->m->loop);
	r->sent++;
	return true;
}

/* A write's answer: counted, nothing else to do. */
static void on_write(redisAsyncContext *ac, void *reply, void *priv)
{
	struct conn *c = ac->data;
	struct master_redis *r = c->r;

	(void)priv;
	if (c->ac != ac)
		return;
	note_reply(r, reply);
	if (r->inflight == 0 && r->republish_pending) {
		r->republish_pending = false;
		republish_all(r);
	}
}

/* Room for n more commands; when there is none the publication is
 * dropped and everything of ours is written again once Redis catches up. */
static bool room(struct master_redis *r, size_t n)
{
	if (r->st != ST_SYNCING && r->st != ST_UP)
		return false;
	if (r->inflight + n <= MAX_INFLIGHT)
		return true;
	r->dropped++;
	r->republish_pending = true;
	return false;
}

/* ---- reading back ---- */

static void reg_deleted(void *arg, enum master_reg_kind kind, const uint8_t *key, long long wall);

static void merge_reg(struct master_redis *r, int kind, const char *hex, const redisReply *reply)
{
	const struct master_reg_kind_ops *ops = master_registry_ops(r->m->reg, kind);
	struct master_redis_env env;
	struct json_object *root;
	uint8_t want[MASTER_REG_KEY_MAX], got[MASTER_REG_KEY_MAX];
	struct master_reg_head *h;
	const char *why;
	char err[160];
	int rc;

	if (ops == NULL)
		return;
	if (reply->type == REDIS_REPLY_NIL) {
		/* Gone from Redis (expired or deleted since): a remote copy
		 * goes too; ours stays and is written again when refreshed. */
		if (master_redis_hex_decode(hex, want, ops->key_len) == 0 &&
		    master_registry_unmerge_remote(r->m->reg, kind, want) > 0)
			log_debug("redis-gone kind=%s key=%.16s", ops->name, hex);
		return;
	}
	if (reply->type != REDIS_REPLY_STRING) {
		refuse(r, R_TYPE, ops->name, hex);
		return;
	}
	if (master_redis_env_decode(reply->str, reply->len, &root, &env, &why) < 0) {
		refuse(r,
		       strcmp(why, "size") == 0   ? R_SIZE
		       : strcmp(why, "json") == 0 ? R_JSON
						  : R_ENVELOPE,
		       ops->name, hex);
		return;
	}
	if (strcmp(env.node, r->node) == 0) {
		/* Written by us. Held: ours is the truth. Not held: we deleted it
		 * while Redis was out of reach (or it expired here first); it
		 * must not come back as a remote entry. */
		json_object_put(root);
		if (master_redis_hex_decode(hex, want, ops->key_len) == 0 &&
		    master_registry_get(r->m->reg, kind, want) == NULL)
			reg_deleted(r, (enum master_reg_kind)kind, want, wall_ms());
		return;
	}
	if (env.seen_ms > wall_ms() + MASTER_REDIS_FUTURE_MS) {
		json_object_put(root);
		refuse(r, R_FUTURE, ops->name, hex);
		return;
	}
	h = calloc(1, ops->val_size);
	if (h == NULL) {
		json_object_put(root);
		return;
	}
	rc = ops->load(env.entry, h, err, sizeof(err));
	json_object_put(root);
	if (rc < 0) {
		free(h);
		refuse(r, R_ENTRY, ops->name, err);
		return;
	}
	h->seen_wall_ms = env.seen_ms;
	memset(got, 0, sizeof(got));
	ops->key_of(h, got);
	if (master_redis_hex_decode(hex, want, ops->key_len) < 0 ||
	    memcmp(want, got, ops->key_len) != 0) {
		free(h);
		refuse(r, R_KEY, ops->name, hex);
		return;
	}
	rc = master_registry_merge(r->m->reg, (enum master_reg_kind)kind, h, r->epoch);
	free(h);
	if (rc == -ENOSPC)
		refuse(r, R_FULL, ops->name, hex);
	else if (rc > 0)
		r->merged[kind]++;
}

static void merge_knock(struct master_redis *r, const char *tag, const redisReply *reply)
{
	if (reply->type != REDIS_REPLY_ARRAY) {
		if (reply->type != REDIS_REPLY_NIL)
			refuse(r, R_TYPE, "knock", tag);
		return;
	}
	for (size_t i = 0; i < reply->elements; i++) {
		const redisReply *e = reply->element[i];
		struct master_redis_note note;
		const char *why;
		int rc;

		if (e->type != REDIS_REPLY_STRING) {
			refuse(r, R_TYPE, "knock", tag);
			continue;
		}
		if (master_redis_note_decode(e->str, e->len, &note, &why) < 0) {
			refuse(r, strcmp(why, "size") == 0 ? R_SIZE : R_NOTE, "knock", tag);
			continue;
		}
		if (note.t * 1000 > (double)(wall_ms() + MASTER_REDIS_FUTURE_MS)) {
			refuse(r, R_FUTURE, "knock", tag);
			continue;
		}
		rc = master_knock_merge(r->m, tag, &note);
		if (rc == -ENOSPC)
			refuse(r, R_FULL, "knock", tag);
		else if (rc > 0)
			r->merged[K_KNOCK]++;
	}
}

static void merge_relay(struct master_redis *r, const char *hex, const redisReply *reply)
{
	struct master_redis_relay rel;
	uint8_t key[32];
	struct rrelay *e;
	const char *why;

	if (master_redis_hex_decode(hex, key, sizeof(key)) < 0)
		return;
	if (reply->type == REDIS_REPLY_NIL) {
		e = htab_get(r->relays, key);
		if (e != NULL)
			htab_remove(r->relays, e);
		return;
	}
	if (reply->type != REDIS_REPLY_STRING) {
		refuse(r, R_TYPE, "relay", hex);
		return;
	}
	if (master_redis_relay_decode(reply->str, reply->len, &rel, &why) < 0) {
		refuse(r, strcmp(why, "size") == 0 ? R_SIZE : R_RELAY, "relay", hex);
		return;
	}
	if (strcmp(rel.node, r->node) == 0)
		return; /* ours: master_relayport has it */
	e = htab_get(r->relays, key);
	if (e == NULL)
		e = htab_insert(r->relays, key, true, NULL);
	else
		htab_touch(r->relays, e);
	e->info.port = rel.port;
	memcpy(e->info.id_hex, rel.id, sizeof(e->info.id_hex));
	snprintf(e->info.ip, sizeof(e->info.ip), "%s", rel.ip);
	e->expires_ms = ev_now(r->m->loop) + r->m->cfg.relay_idle_ms;
	e->epoch = r->epoch;
	r->merged[K_RELAY]++;
}

static void read_key(struct master_redis *r, enum rd_what what, int kind, const char *hex);

static void sync_done(struct master_redis *r)
{
	size_t dropped = master_registry_drop_unconfirmed(r->m->reg, r->epoch), remote = 0;
	struct rrelay *e, *next;

	for (e = htab_oldest(r->relays); e != NULL; e = next) {
		next = htab_newer(r->relays, e);
		if (e->epoch != r->epoch) {
			htab_remove(r->relays, e);
			dropped++;
		}
	}
	for (int k = 0; k < MASTER_REG_NKINDS; k++)
		remote += master_registry_remote_count(r->m->reg, (enum master_reg_kind)k);
	r->st = ST_UP;
	log_info("redis-synced redis=%s remote=%zu dropped=%zu", r->where, remote, dropped);
}

static void scan_next(struct master_redis *r, const char *cursor);

static void on_scan(struct master_redis *r, const redisReply *reply)
{
	const redisReply *cur, *keys;
	char cursor[24];

	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
	    (cur = reply->element[0])->type != REDIS_REPLY_STRING || cur->len == 0 ||
	    cur->len >= sizeof(cursor) || strspn(cur->str, "0123456789") != cur->len ||
	    (keys = reply->element[1])->type != REDIS_REPLY_ARRAY) {
		fail(r, "SCAN: unexpected answer");
		return;
	}
	memcpy(cursor, cur->str, cur->len);
	cursor[cur->len] = '\0';
	for (size_t i = 0; i < keys->elements; i++) {
		const redisReply *k = keys->element[i];
		struct master_redis_key key;
		int kind = 0;

		if (k->type != REDIS_REPLY_STRING ||
		    master_redis_key_parse(r->cfg.prefix, k->str, k->len, &key) < 0) {
			refuse(r, R_KEY_NAME, "scan", NULL);
			continue;
		}
		if (key.type == MASTER_REDIS_KEY_REG) {
			kind = master_registry_kind_by_name(r->m->reg, key.kind);
			if (kind < 0) {
				refuse(r, R_KEY_NAME, "scan", key.kind);
				continue;
			}
		}
		read_key(r,
			 key.type == MASTER_REDIS_KEY_REG     ? RD_REG
			 : key.type == MASTER_REDIS_KEY_KNOCK ? RD_KNOCK
							      : RD_RELAY,
			 kind, key.hex);
	}
	if (strcmp(cursor, "0") != 0) {
		scan_next(r, cursor);
		return;
	}
	/* Every GET above is answered before this (one connection, in
	 * order): its answer ends the sync. */
	read_key(r, RD_SYNC_END, 0, "");
}

static void on_read(redisAsyncContext *ac, void *reply_, void *priv)
{
	struct conn *c = ac->data;
	struct master_redis *r = c->r;
	const redisReply *reply = reply_;
	struct rd *d = priv;

	if (c->ac != ac) {
		free(d);
		return;
	}
	note_reply(r, reply);
	if (reply == NULL) {
		free(d);
		return;
	}
	if (reply->type == REDIS_REPLY_ERROR && d->what != RD_REG && d->what != RD_RELAY &&
	    d->what != RD_KNOCK) {
		log_debug("redis-error what=%d error=\"%.*s\"", (int)d->what, (int)reply->len,
			  reply->str);
		free(d);
		fail(r, "command refused during sync");
		return;
	}
	switch (d->what) {
	case RD_REG:
		merge_reg(r, d->kind, d->hex, reply);
		break;
	case RD_KNOCK:
		merge_knock(r, d->hex, reply);
		break;
	case RD_RELAY:
		merge_relay(r, d->hex, reply);
		break;
	case RD_SCAN:
		free(d);
		on_scan(r, reply);
		return;
	case RD_SYNC_END:
		sync_done(r);
		break;
	}
	free(d);
}

static void read_key(struct master_redis *r, enum rd_what what, int kind, const char *hex)
{
	struct rd *d = calloc(1, sizeof(*d));
	bool ok;

	if (d == NULL)
		return;
	d->what = what;
	d->kind = kind;
	snprintf(d->hex, sizeof(d->hex), "%s", hex);
	switch (what) {
	case RD_REG:
		ok = send_cmd(r, on_read, d, "GET %s:reg:%s:%s", r->cfg.prefix, kind_name(r, kind),
			      hex);
		break;
	case RD_KNOCK:
		/* The newest 16, however long a list someone wrote there. */
		ok = send_cmd(r, on_read, d, "LRANGE %s:knock:%s -16 -1", r->cfg.prefix, hex);
		break;
	case RD_RELAY:
		ok = send_cmd(r, on_read, d, "GET %s:relay:%s", r->cfg.prefix, hex);
		break;
	default:
		ok = send_cmd(r, on_read, d, "PING");
		break;
	}
	if (!ok)
		free(d);
}

static void scan_next(struct master_redis *r, const char *cursor)
{
	struct rd *d = calloc(1, sizeof(*d));

	if (d == NULL) {
		fail(r, "out of memory");
		return;
	}
	d->what = RD_SCAN;
	if (!send_cmd(r, on_read, d, "SCAN %s MATCH %s:* COUNT %d", cursor, r->cfg.prefix,
		      SCAN_COUNT))
		free(d);
}

/* ---- notifications ---- */

static void on_message(struct master_redis *r, const char *buf, size_t len)
{
	const struct master_reg_kind_ops *ops;
	struct master_redis_msg msg;
	uint8_t key[MASTER_REG_KEY_MAX];
	int kind = 0;

	if (master_redis_msg_parse(buf, len, &msg) < 0) {
		refuse(r, R_MESSAGE, "event", NULL);
		return;
	}
	if (strcmp(msg.node, r->node) == 0 || !r->cmd.ready)
		return;
	/* A flood of notifications must not queue reads without bound. */
	if (r->inflight >= MAX_INFLIGHT) {
		r->dropped++;
		return;
	}
	if (msg.op == MASTER_REDIS_OP_SET || msg.op == MASTER_REDIS_OP_DEL) {
		kind = master_registry_kind_by_name(r->m->reg, msg.kind);
		ops = kind >= 0 ? master_registry_ops(r->m->reg, kind) : NULL;
		if (ops == NULL || strlen(msg.hex) != 2 * ops->key_len) {
			refuse(r, R_MESSAGE, "event", msg.kind);
			return;
		}
		if (msg.op == MASTER_REDIS_OP_DEL) {
			if (master_redis_hex_decode(msg.hex, key, ops->key_len) == 0)
				master_registry_unmerge(r->m->reg, (enum master_reg_kind)kind, key,
							msg.wall_ms);
			return;
		}
		read_key(r, RD_REG, kind, msg.hex);
		return;
	}
	if (msg.op == MASTER_REDIS_OP_KNOCK) {
		read_key(r, RD_KNOCK, 0, msg.hex);
	} else if (msg.op == MASTER_REDIS_OP_RELAY) {
		read_key(r, RD_RELAY, 0, msg.hex);
	} else if (msg.op == MASTER_REDIS_OP_RELAY_DEL) {
		struct rrelay *e;

		if (master_redis_hex_decode(msg.hex, key, 32) == 0 &&
		    (e = htab_get(r->relays, key)) != NULL)
			htab_remove(r->relays, e);
	}
}

/* ---- publishing ---- */

static void publish(struct master_redis *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void publish(struct master_redis *r, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	send_cmd(r, on_write, NULL, "PUBLISH %s %s", r->chan, msg);
}

static void reg_publish(void *arg, enum master_reg_kind kind, const uint8_t *key, const void *val)
{
	struct master_redis *r = arg;
	const struct master_reg_kind_ops *ops = master_registry_ops(r->m->reg, kind);
	const struct master_reg_head *h = val;
	struct json_object *root, *entry;
	char hex[2 * MASTER_REG_KEY_MAX + 1];
	long long rest = ops->ttl_ms - (ev_now(r->m->loop) - h->seen_ms);
	const char *text;
	size_t len;

	if (rest <= 0 || !room(r, 2))
		return;
	master_redis_hex_encode(key, ops->key_len, hex);
	root = json_object_new_object();
	entry = json_object_new_object();
	json_object_object_add(root, "v", json_object_new_int(1));
	json_object_object_add(root, "node", json_object_new_string(r->node));
	json_object_object_add(root, "seen_ms", json_object_new_int64(h->seen_wall_ms));
	ops->save(val, entry);
	json_object_object_add(root, "entry", entry);
	text = json_object_to_json_string_length(root, JSON_C_TO_STRING_PLAIN, &len);
	if (len <= MASTER_REDIS_VALUE_MAX &&
	    send_cmd(r, on_write, NULL, "SET %s:reg:%s:%s %b PX %lld", r->cfg.prefix, ops->name,
		     hex, text, len, rest)) {
		publish(r, "%s s %s %s", r->node, ops->name, hex);
		r->published[kind]++;
	}
	json_object_put(root);
}

static void reg_deleted(void *arg, enum master_reg_kind kind, const uint8_t *key, long long wall)
{
	struct master_redis *r = arg;
	const struct master_reg_kind_ops *ops = master_registry_ops(r->m->reg, kind);
	char hex[2 * MASTER_REG_KEY_MAX + 1];

	if (!room(r, 2))
		return;
	master_redis_hex_encode(key, ops->key_len, hex);
	if (send_cmd(r, on_write, NULL, "DEL %s:reg:%s:%s", r->cfg.prefix, ops->name, hex))
		publish(r, "%s d %s %s %lld", r->node, ops->name, hex, wall);
}

void master_redis_knock_posted(struct master_redis *r, const char *tag,
			       const struct master_redis_note *notes, size_t n)
{
	/* One RPUSH for all of them (a re-publish sends a tag's notes at once). */
	struct strbuf vals[MASTER_REDIS_KNOCK_BATCH];
	const char *argv[2 + MASTER_REDIS_KNOCK_BATCH];
	size_t lens[2 + MASTER_REDIS_KNOCK_BATCH], argc = 2, used = 0;
	char key[MASTER_REDIS_NAME_MAX + 8 + MASTER_REDIS_TAG_LEN + 1];

	if (r == NULL || n == 0 || n > MASTER_REDIS_KNOCK_BATCH ||
	    strlen(tag) != MASTER_REDIS_TAG_LEN || !room(r, 4))
		return;
	snprintf(key, sizeof(key), "%s:knock:%s", r->cfg.prefix, tag);
	argv[0] = "RPUSH";
	lens[0] = 5;
	argv[1] = key;
	lens[1] = strlen(key);
	for (size_t i = 0; i < n; i++) {
		struct master_redis_note one = notes[i];

		snprintf(one.node, sizeof(one.node), "%s", r->node);
		/* A blob may end in the newline Python's "$" lets through: not
		 * in Redis (readers take base64 characters only). */
		one.blob[strcspn(one.blob, "\n")] = '\0';
		strbuf_init(&vals[used], MASTER_REDIS_VALUE_MAX);
		if (one.blob[0] == '\0' || master_redis_note_encode(&one, &vals[used]) < 0) {
			strbuf_release(&vals[used]);
			continue;
		}
		argv[argc] = vals[used].p;
		lens[argc++] = vals[used].len;
		used++;
	}
	if (used > 0 && send_argv(r, (int)argc, argv, lens)) {
		send_cmd(r, on_write, NULL, "LTRIM %s -16 -1", key);
		send_cmd(r, on_write, NULL, "PEXPIRE %s %lld", key, r->m->cfg.knock_ttl_ms);
		publish(r, "%s k %s", r->node, tag);
		r->published[K_KNOCK] += used;
	}
	for (size_t i = 0; i < used; i++)
		strbuf_release(&vals[i]);
}

void master_redis_relay_put(struct master_redis *r, const uint8_t key[32],
			    const struct master_relayport_info *info)
{
	struct master_redis_relay rel;
	char hex[65];
	struct strbuf b;

	if (r == NULL || !room(r, 2))
		return;
	memset(&rel, 0, sizeof(rel));
	snprintf(rel.node, sizeof(rel.node), "%s", r->node);
	snprintf(rel.ip, sizeof(rel.ip), "%s", r->m->cfg.relay_ip);
	rel.port = info->port;
	memcpy(rel.id, info->id_hex, sizeof(rel.id));
	master_redis_hex_encode(key, 32, hex);
	strbuf_init(&b, MASTER_REDIS_VALUE_MAX);
	if (master_redis_relay_encode(&rel, &b) == 0 &&
	    send_cmd(r, on_write, NULL, "SET %s:relay:%s %b PX %lld", r->cfg.prefix, hex, b.p,
		     b.len, r->m->cfg.relay_idle_ms)) {
		publish(r, "%s r %s", r->node, hex);
		r->published[K_RELAY]++;
	}
	strbuf_release(&b);
}

void master_redis_relay_closed(struct master_redis *r, const uint8_t key[32])
{
	char hex[65];

	if (r == NULL || !room(r, 2))
		return;
	master_redis_hex_encode(key, 32, hex);
	if (send_cmd(r, on_write, NULL, "DEL %s:relay:%s", r->cfg.prefix, hex))
		publish(r, "%s x %s", r->node, hex);
}

bool master_redis_relay_find(struct master_redis *r, const uint8_t key[32],
			     struct master_relayport_info *out)
{
	struct rrelay *e;

	if (r == NULL || (e = htab_get(r->relays, key)) == NULL)
		return false;
	if (ev_now(r->m->loop) >= e->expires_ms) {
		htab_remove(r->relays, e);
		return false;
	}
	*out = e->info;
	return true;
}

/* Everything of ours, again: a reconnection, or publications dropped. */
static void republish_all(struct master_redis *r)
{
	master_registry_publish_all(r->m->reg);
	master_knock_republish(r->m);
	if (r->m->relay != NULL)
		master_relayport_republish(r->m->relay);
}

/* ---- connecting ---- */

static void both_ready(struct master_redis *r)
{
	if (!r->cmd.ready || !r->sub.ready || r->st != ST_CONNECTING)
		return;
	ev_timer_stop(r->m->loop, &r->conn_timer);
	if (r->ever_up)
		r->reconnects++;
	log_info("redis-up redis=%s node=%s prefix=%s%s", r->where, r->node, r->cfg.prefix,
		 r->ever_up ? " republish=yes" : "");
	r->ever_up = true;
	r->down_logged = false;
	r->failures = 0;
	r->st = ST_SYNCING;
	r->epoch++;
	republish_all(r);
	scan_next(r, "0");
}

static void on_setup(redisAsyncContext *ac, void *reply_, void *priv)
{
	struct conn *c = ac->data;
	const redisReply *reply = reply_;
	const char *what = priv;
	char why[200];

	if (c->ac != ac)
		return;
	if (c == &c->r->cmd)
		note_reply(c->r, reply);
	if (reply == NULL)
		return; /* the disconnect callback says why */
	if (reply->type == REDIS_REPLY_ERROR && what == what_setname) {
		/* Only a name in CLIENT LIST: an ACL may leave it out. */
		log_debug("redis-setname-refused error=\"%.*s\"", (int)reply->len, reply->str);
		return;
	}
	if (reply->type == REDIS_REPLY_ERROR) {
		snprintf(why, sizeof(why), "%s: %.*s", what, (int)reply->len, reply->str);
		fail(c->r, why);
		return;
	}
	if (what == what_ping) {
		c->ready = true;
		both_ready(c->r);
	}
}

static void on_sub(redisAsyncContext *ac, void *reply_, void *priv)
{
	struct conn *c = ac->data;
	struct master_redis *r = c->r;
	const redisReply *reply = reply_, *kind, *payload;

	(void)priv;
	if (c->ac != ac || reply == NULL)
		return;
	if (reply->type == REDIS_REPLY_ERROR) {
		char why[200];

		snprintf(why, sizeof(why), "SUBSCRIBE: %.*s", (int)reply->len, reply->str);
		fail(r, why);
		return;
	}
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
	    (kind = reply->element[0])->type != REDIS_REPLY_STRING)
		return;
	if (strcmp(kind->str, "subscribe") == 0) {
		c->ready = true;
		both_ready(r);
	} else if (strcmp(kind->str, "message") == 0) {
		payload = reply->element[2];
		if (payload->type == REDIS_REPLY_STRING)
			on_message(r, payload->str, payload->len);
	}
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct conn *c = ac->data;

	if (c->ac != ac || status == REDIS_OK)
		return;
	/* hiredis frees it after this callback. */
	c->ac = NULL;
	fail(c->r, ac->errstr[0] != '\0' ? ac->errstr : "connect failed");
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct conn *c = ac->data;

	if (c->ac != ac)
		return;
	c->ac = NULL;
	c->ready = false;
	fail(c->r, status == REDIS_OK ? "connection closed" : ac->errstr);
}

static int open_conn(struct master_redis *r, struct conn *c)
{
	const struct master_redis_url *u = &r->cfg.url;
	redisAsyncContext *ac;
	int rc;

	ac = u->transport == MASTER_REDIS_UNIX ? redisAsyncConnectUnix(u->path)
					       : redisAsyncConnect(r->ip, u->port);
	if (ac == NULL)
		return -ENOMEM;
	if (ac->err != 0) {
		log_debug("redis-connect-fail conn=%s error=\"%s\"", c->name, ac->errstr);
		redisAsyncFree(ac);
		return -ECONNREFUSED;
	}
	rc = redisev_attach(r->m->loop, ac);
	if (rc < 0) {
		redisAsyncFree(ac);
		return rc;
	}
	ac->data = c;
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	c->ac = ac;
	c->ready = false;
	/* Queued now, written once connected. */
	if (r->has_password) {
		if (r->cfg.url.user[0] != '\0')
			rc = redisAsyncCommand(ac, on_setup, what_auth, "AUTH %s %s",
					       r->cfg.url.user, r->password);
		else
			rc = redisAsyncCommand(ac, on_setup, what_auth, "AUTH %s", r->password);
		if (rc == REDIS_OK && c == &r->cmd)
			r->inflight++;
	}
	return 0;
}

static void on_conn_timeout(struct ev_timer *t, void *arg)
{
	(void)t;
	fail(arg, "connect timeout");
}

/* Commands unanswered for longer than the timeout: a stuck or paused
 * server; drop the connection and make it again. */
static void on_watchdog(struct ev_timer *t, void *arg)
{
	struct master_redis *r = arg;
	long long now = ev_now(r->m->loop), since;

	since = r->last_reply_ms > r->busy_since_ms ? r->last_reply_ms : r->busy_since_ms;
	/* Quiet for a while: a PING finds a server that went away without
	 * closing the connection. */
	if (r->inflight == 0 && r->st == ST_UP && now - r->last_reply_ms > KEEPALIVE_MS)
		send_cmd(r, on_write, NULL, "PING");
	if (r->inflight > 0 && now - since > r->cfg.timeout_ms) {
		char why[96];

		snprintf(why, sizeof(why), "no answer for %lld ms (%zu commands waiting)",
			 now - since, r->inflight);
		fail(r, why);
		return;
	}
	ev_timer_start(r->m->loop, t, WATCHDOG_MS, on_watchdog, r);
}

static void connect_now(struct master_redis *r)
{
	int rc;

	r->st = ST_CONNECTING;
	r->inflight = 0;
	r->last_reply_ms = r->busy_since_ms = ev_now(r->m->loop);
	ev_timer_start(r->m->loop, &r->conn_timer, r->cfg.timeout_ms, on_conn_timeout, r);
	ev_timer_start(r->m->loop, &r->watchdog, WATCHDOG_MS, on_watchdog, r);
	if ((rc = open_conn(r, &r->cmd)) < 0 || (rc = open_conn(r, &r->sub)) < 0) {
		fail(r, rc == -ECONNREFUSED ? "cannot connect" : strerror(-rc));
		return;
	}
	if (r->cfg.url.db >= 0) {
		redisAsyncCommand(r->cmd.ac, on_setup, what_select, "SELECT %d", r->cfg.url.db);
		r->inflight++;
	}
	redisAsyncCommand(r->cmd.ac, on_setup, what_setname, "CLIENT SETNAME rally-master.%s",
			  r->node);
	redisAsyncCommand(r->cmd.ac, on_setup, what_ping, "PING");
	r->inflight += 2;
	/* Channels are not per database: no SELECT on sub. */
	redisAsyncCommand(r->sub.ac, on_sub, NULL, "SUBSCRIBE %s", r->chan);
}

static void resolve_work(void *arg)
{
	struct job *j = arg;

	j->res = addr_resolve(j->host, j->port, &j->out, 1, &j->gai);
}

static void resolve_done(void *arg, bool cancelled)
{
	struct job *j = arg;
	struct master_redis *r = j->r;

	if (r == NULL || cancelled) {
		free(j);
		return;
	}
	r->job = NULL;
	if (j->res < 0) {
		char why[400];

		snprintf(why, sizeof(why), "resolving %s: %s", j->host, gai_strerror(j->gai));
		free(j);
		fail(r, why);
		return;
	}
	addr_ip_str(&j->out, r->ip, sizeof(r->ip));
	free(j);
	connect_now(r);
}

static void start_attempt(struct master_redis *r)
{
	const struct master_redis_url *u = &r->cfg.url;
	struct addr a;
	struct job *j;

	if (u->transport == MASTER_REDIS_UNIX || addr_parse_ip(&a, u->host) == 0) {
		if (u->transport == MASTER_REDIS_TCP)
			addr_ip_str(&a, r->ip, sizeof(r->ip));
		connect_now(r);
		return;
	}
	/* A name: resolved on the worker thread, never on the loop. */
	j = calloc(1, sizeof(*j));
	if (j == NULL) {
		r->st = ST_RESOLVING;
		fail(r, "out of memory");
		return;
	}
	j->r = r;
	snprintf(j->host, sizeof(j->host), "%s", u->host);
	j->port = u->port;
	r->st = ST_RESOLVING;
	if (ev_work_submit(r->m->loop, resolve_work, resolve_done, j) < 0) {
		free(j);
		fail(r, "cannot start the resolver");
		return;
	}
	r->job = j;
}

/* ---- life cycle ---- */

static int read_password(struct master_redis *r)
{
	FILE *f = fopen(r->cfg.password_file, "re");
	size_t n;
	int c;

	if (f == NULL) {
		log_warn("redis-password-file-unreadable file=%s", r->cfg.password_file);
		return -EINVAL;
	}
	n = fread(r->password, 1, sizeof(r->password) - 1, f);
	c = fgetc(f);
	fclose(f);
	r->password[n] = '\0';
	r->password[strcspn(r->password, "\r\n")] = '\0';
	if (c != EOF && strchr(r->password, '\n') == NULL && strlen(r->password) == n) {
		log_warnx("redis-password-file-bad file=%s reason=longer-than-%d-bytes",
			  r->cfg.password_file, PASSWORD_MAX);
		return -EINVAL;
	}
	if (r->password[0] == '\0') {
		log_warnx("redis-password-file-bad file=%s reason=empty", r->cfg.password_file);
		return -EINVAL;
	}
	r->has_password = true;
	return 0;
}

int master_redis_check_config(const struct master_redis_cfg *cfg)
{
	struct master_redis *r;
	int rc = 0;

	if (cfg->password_file[0] == '\0')
		return 0;
	r = calloc(1, sizeof(*r));
	if (r == NULL)
		return -ENOMEM;
	r->cfg = *cfg;
	rc = read_password(r);
	sodium_memzero(r->password, sizeof(r->password));
	free(r);
	return rc;
}

int master_redis_new(struct master *m, const struct master_redis_cfg *cfg)
{
	struct master_redis *r = calloc(1, sizeof(*r));
	const struct master_reg_sync sync = {
		.publish = reg_publish,
		.deleted = reg_deleted,
	};
	struct master_reg_sync s = sync;
	const struct master_redis_url *u;

	if (r == NULL)
		return -ENOMEM;
	r->m = m;
	r->cfg = *cfg;
	u = &r->cfg.url;
	if (cfg->node[0] != '\0') {
		snprintf(r->node, sizeof(r->node), "%s", cfg->node);
	} else {
		uint8_t rnd[8];

		randombytes_buf(rnd, sizeof(rnd));
		master_redis_hex_encode(rnd, sizeof(rnd), r->node);
	}
	if (cfg->password_file[0] != '\0' && read_password(r) < 0) {
		free(r);
		return -EINVAL;
	}
	snprintf(r->chan, sizeof(r->chan), "%s:events", cfg->prefix);
	if (u->transport == MASTER_REDIS_UNIX)
		snprintf(r->where, sizeof(r->where), "unix:%s", u->path);
	else if (strchr(u->host, ':') != NULL)
		snprintf(r->where, sizeof(r->where), "[%s]:%u", u->host, u->port);
	else
		snprintf(r->where, sizeof(r->where), "%s:%u", u->host, u->port);
	r->cmd.r = r->sub.r = r;
	r->cmd.name = "cmd";
	r->sub.name = "sub";
	r->relays = htab_new(RELAYS_MAX, 32, sizeof(struct rrelay));
	if (r->relays == NULL) {
		free(r);
		return -ENOMEM;
	}
	ev_timer_init(&r->retry);
	ev_timer_init(&r->conn_timer);
	ev_timer_init(&r->watchdog);
	s.arg = r;
	master_registry_set_sync(m->reg, &s);
	m->redis = r;
	/* The first attempt from the loop, like every retry. */
	r->st = ST_IDLE;
	ev_timer_start(m->loop, &r->retry, 0, on_retry, r);
	log_info("redis-shared redis=%s node=%s prefix=%s auth=%s", r->where, r->node, cfg->prefix,
		 r->has_password ? (u->user[0] != '\0' ? "user" : "password") : "none");
	return 0;
}

void master_redis_free(struct master_redis *r)
{
	if (r == NULL)
		return;
	ev_timer_stop(r->m->loop, &r->retry);
	ev_timer_stop(r->m->loop, &r->conn_timer);
	ev_timer_stop(r->m->loop, &r->watchdog);
	if (r->job != NULL)
		r->job->r = NULL; /* it frees itself when done */
	r->st = ST_IDLE;
	close_conn(&r->cmd);
	close_conn(&r->sub);
	htab_free(r->relays);
	sodium_memzero(r->password, sizeof(r->password));
	free(r);
}

bool master_redis_connected(const struct master_redis *r)
{
	return r != NULL && r->cmd.ready && r->sub.ready;
}

void master_redis_metrics(const struct master_redis *r, struct strbuf *out)
{
	strbuf_printf(out,
		      "# HELP rally_master_redis_connected 1 when both Redis connections are up.\n"
		      "# TYPE rally_master_redis_connected gauge\n"
		      "rally_master_redis_connected %d\n"
		      "# HELP rally_master_redis_synced 1 once the sync after connecting is done.\n"
		      "# TYPE rally_master_redis_synced gauge\n"
		      "rally_master_redis_synced %d\n"
		      "# HELP rally_master_redis_reconnects_total Connections made again after "
		      "losing Redis.\n"
		      "# TYPE rally_master_redis_reconnects_total counter\n"
		      "rally_master_redis_reconnects_total %llu\n"
		      "# HELP rally_master_redis_commands_total Redis commands sent, failed (error "
		      "or no answer), dropped (too many waiting).\n"
		      "# TYPE rally_master_redis_commands_total counter\n"
		      "rally_master_redis_commands_total{result=\"sent\"} %llu\n"
		      "rally_master_redis_commands_total{result=\"failed\"} %llu\n"
		      "rally_master_redis_commands_total{result=\"dropped\"} %llu\n"
		      "# HELP rally_master_redis_commands_waiting Redis commands waiting for an "
		      "answer.\n"
		      "# TYPE rally_master_redis_commands_waiting gauge\n"
		      "rally_master_redis_commands_waiting %zu\n",
		      master_redis_connected(r) ? 1 : 0, r->st == ST_UP ? 1 : 0,
		      (unsigned long long)r->reconnects, (unsigned long long)r->sent,
		      (unsigned long long)r->failed, (unsigned long long)r->dropped, r->inflight);
	strbuf_printf(out, "# HELP rally_master_redis_published_total Entries of ours written to "
			   "Redis, by kind.\n# TYPE rally_master_redis_published_total counter\n");
	for (int k = 0; k < K_N; k++) {
		if (k < MASTER_REG_NKINDS && master_registry_ops(r->m->reg, k) == NULL)
			continue;
		strbuf_printf(out, "rally_master_redis_published_total{kind=\"%s\"} %llu\n",
			      kind_name(r, k), (unsigned long long)r->published[k]);
	}
	strbuf_printf(out, "# HELP rally_master_redis_merged_total Remote entries merged from "
			   "Redis, by kind.\n# TYPE rally_master_redis_merged_total counter\n");
	for (int k = 0; k < K_N; k++) {
		if (k < MASTER_REG_NKINDS && master_registry_ops(r->m->reg, k) == NULL)
			continue;
		strbuf_printf(out, "rally_master_redis_merged_total{kind=\"%s\"} %llu\n",
			      kind_name(r, k), (unsigned long long)r->merged[k]);
	}
	strbuf_printf(out, "# HELP rally_master_redis_remote_entries Remote entries held, by "
			   "kind.\n# TYPE rally_master_redis_remote_entries gauge\n");
	for (int k = 0; k < MASTER_REG_NKINDS; k++) {
		if (master_registry_ops(r->m->reg, k) == NULL)
			continue;
		strbuf_printf(out, "rally_master_redis_remote_entries{kind=\"%s\"} %zu\n",
			      kind_name(r, k),
			      master_registry_remote_count(r->m->reg, (enum master_reg_kind)k));
	}
	strbuf_printf(out, "rally_master_redis_remote_entries{kind=\"relay\"} %zu\n",
		      htab_count(r->relays));
	strbuf_printf(out,
		      "# HELP rally_master_redis_refused_total Values read from Redis and "
		      "refused, by reason.\n# TYPE rally_master_redis_refused_total counter\n");
	for (int i = 0; i < R_N; i++)
		strbuf_printf(out, "rally_master_redis_refused_total{reason=\"%s\"} %llu\n",
			      refusal_names[i], (unsigned long long)r->refused[i]);
}
