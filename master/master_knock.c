/*
 * Knocks: the rendezvous notes of netpunch (POST /knock, GET /knock).
 *
 * A joiner posts a sealed note under a 24-hex tag; the host polls its tag
 * every second. The master cannot read a note nor tell which lobby a tag is.
 * As the reference: notes live 60 s, the newest 16 per tag are kept, 2,000
 * tags at most, 40 stored posts per client address per minute, and a relay
 * port is allocated only after the rate check (a refused knock must not hold
 * a port). Bounded tables (common/htab), O(1) per request but for the
 * 16 notes of one tag.
 */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "htab.h"
#include "httpd.h"
#include "log.h"
#include "master.h"
#include "master_redis.h"
#include "master_py.h"
#include "pyjson.h"
#include "strbuf.h"

#define KNOCK_PER_TAG    (16)
#define KNOCK_MAX_TAGS   (2000)
#define KNOCK_BLOB_MAX   (1024)
#define KNOCK_PER_IP_MIN (40)
#define KNOCK_WINDOW_MS  (60000)
/* Client addresses remembered for the rate limit; the least recent goes. */
#define KNOCK_MAX_IPS (65536)
/* A tag is 24 hex; Python's "$" also lets one trailing newline through. */
#define TAG_MAX (25)

struct note {
	double t;        /* unix seconds of the post, as time.time() */
	long long at_ms; /* monotonic */
	char blob[KNOCK_BLOB_MAX + 2];
	bool has_relay;
	bool remote; /* --redis: posted to another master */
	struct master_relayport_info relay;
};

struct tag {
	char tag[TAG_MAX + 1];
	unsigned head, n; /* ring of the newest notes, oldest at head */
	long long newest_ms;
	struct note notes[KNOCK_PER_TAG];
};

struct ipwin {
	unsigned head, n; /* ring of post times in the last minute */
	long long t[KNOCK_PER_IP_MIN];
};

struct master_knock {
	struct master *m;
	struct htab *tags; /* key: tag bytes, zero-padded to TAG_MAX */
	struct htab *ips;  /* key: struct addr_ip */
	uint64_t posted, polled, refused_rate, refused_full, relays;
};

static double unix_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * re.match(r"^[0-9a-f]{lo,hi}$", s) as Python runs it: "$" matches at the
 * end or before one final newline.
 */
static bool hex_match(const char *s, size_t lo, size_t hi)
{
	size_t n = strspn(s, "0123456789abcdef");

	if (n < lo || n > hi)
		return false;
	return s[n] == '\0' || (s[n] == '\n' && s[n + 1] == '\0');
}

/* re.match(r"^[A-Za-z0-9+/=]+$", blob), same "$". */
static bool b64_match(const char *s)
{
	size_t n = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=");

	return n > 0 && (s[n] == '\0' || (s[n] == '\n' && s[n + 1] == '\0'));
}

static void tag_key(const char *tag, uint8_t key[TAG_MAX])
{
	memset(key, 0, TAG_MAX);
	memcpy(key, tag, strlen(tag));
}

/* Drops a tag's notes older than the TTL (they are kept oldest first). */
static void prune_tag(struct master_knock *k, struct tag *t, long long now)
{
	while (t->n > 0 && now - t->notes[t->head].at_ms >= k->m->cfg.knock_ttl_ms) {
		t->head = (t->head + 1) % KNOCK_PER_TAG;
		t->n--;
	}
}

/* Tags whose newest note has expired go, oldest first. */
static void expire_tags(struct master_knock *k, long long now)
{
	struct tag *t;

	while ((t = htab_oldest(k->tags)) != NULL && now - t->newest_ms >= k->m->cfg.knock_ttl_ms)
		htab_remove(k->tags, t);
}

static struct ipwin *ipwin_of(struct master_knock *k, const struct addr_ip *ip, long long now,
			      bool create)
{
	struct ipwin *w = htab_get(k->ips, ip);

	if (w == NULL && create)
		w = htab_insert(k->ips, ip, true, NULL);
	if (w == NULL)
		return NULL;
	while (w->n > 0 && now - w->t[w->head] >= KNOCK_WINDOW_MS) {
		w->head = (w->head + 1) % KNOCK_PER_IP_MIN;
		w->n--;
	}
	return w;
}

/*
 * The reference's _knock_refusal: 429 when this address stored 40 posts in
 * the last minute, 503 when the tag is new and 2,000 tags are live.
 */
static int refusal(struct master_knock *k, const char *tag, const struct addr_ip *ip, long long now,
		   const char **why)
{
	uint8_t key[TAG_MAX];
	struct ipwin *w;

	expire_tags(k, now);
	w = ipwin_of(k, ip, now, false);
	if (w != NULL && w->n >= KNOCK_PER_IP_MIN) {
		k->refused_rate++;
		*why = "too many knocks";
		return 429;
	}
	tag_key(tag, key);
	if (htab_get(k->tags, key) == NULL && htab_count(k->tags) >= KNOCK_MAX_TAGS) {
		k->refused_full++;
		*why = "full";
		return 503;
	}
	return 0;
}

static void reply_error(struct master *m, struct httpd_req *req, unsigned status, const char *msg)
{
	master_netpunch_error(m, req,
			      strcmp(httpd_method(req), "GET") == 0 ? "knock_get" : "knock_post",
			      status, msg);
}

static void put_relay(struct master *m, struct pyjson *j, const struct master_relayport_info *r)
{
	pyjson_obj_begin(j);
	pyjson_key(j, "ip");
	/* Another master's allocation is served by its own address. */
	pyjson_cstr(j, r->ip[0] != '\0' ? r->ip : m->cfg.relay_ip);
	pyjson_key(j, "port");
	pyjson_int(j, r->port);
	pyjson_key(j, "id");
	pyjson_cstr(j, r->id_hex);
	pyjson_obj_end(j);
}

/* --redis: a note of ours as the other masters read it. */
static void note_out(struct master *m, const struct note *nt, struct master_redis_note *n)
{
	size_t len = strcspn(nt->blob, "\n");

	memset(n, 0, sizeof(*n));
	n->t = nt->t;
	/* A stored blob is at most KNOCK_BLOB_MAX characters (the post's
	 * check), plus Python's one trailing newline, which Redis never gets. */
	memcpy(n->blob, nt->blob, len < sizeof(n->blob) - 1 ? len : sizeof(n->blob) - 1);
	n->has_relay = nt->has_relay;
	if (nt->has_relay) {
		snprintf(n->relay.ip, sizeof(n->relay.ip), "%s",
			 nt->relay.ip[0] != '\0' ? nt->relay.ip : m->cfg.relay_ip);
		n->relay.port = nt->relay.port;
		memcpy(n->relay.id, nt->relay.id_hex, sizeof(n->relay.id));
	}
}

static void publish_note(struct master *m, const char *tag, const struct note *nt)
{
	struct master_redis_note n;

	note_out(m, nt, &n);
	master_redis_knock_posted(m->redis, tag, &n, 1);
}

_Static_assert(KNOCK_PER_TAG <= MASTER_REDIS_KNOCK_BATCH, "a tag's notes in one RPUSH");

/* Every tag's notes of ours in one write each (readers drop the copies
 * Redis may still hold). */
void master_knock_republish(struct master *m)
{
	struct master_redis_note out[KNOCK_PER_TAG];
	struct master_knock *k = m->knock;
	long long now = ev_now(m->loop);

	expire_tags(k, now);
	for (struct tag *t = htab_oldest(k->tags); t != NULL; t = htab_newer(k->tags, t)) {
		size_t n = 0;

		prune_tag(k, t, now);
		for (unsigned i = 0; i < t->n; i++) {
			const struct note *nt = &t->notes[(t->head + i) % KNOCK_PER_TAG];

			if (!nt->remote)
				note_out(m, nt, &out[n++]);
		}
		if (n > 0)
			master_redis_knock_posted(m->redis, t->tag, out, n);
	}
}

int master_knock_merge(struct master *m, const char *tag, const struct master_redis_note *in)
{
	struct master_knock *k = m->knock;
	long long now = ev_now(m->loop), at;
	double age_s = unix_now() - in->t;
	struct note all[KNOCK_PER_TAG + 1], *nt;
	uint8_t key[TAG_MAX];
	unsigned n = 0, skip;
	struct tag *t;

	/* Its age by the poster's clock; a note from the future is now. */
	at = now - (age_s > 0 ? (long long)(age_s * 1000) : 0);
	if (now - at >= m->cfg.knock_ttl_ms)
		return 0;
	expire_tags(k, now);
	tag_key(tag, key);
	t = htab_get(k->tags, key);
	if (t == NULL) {
		if (htab_count(k->tags) >= KNOCK_MAX_TAGS ||
		    (t = htab_insert(k->tags, key, false, NULL)) == NULL)
			return -ENOSPC;
		snprintf(t->tag, sizeof(t->tag), "%s", tag);
		t->head = t->n = 0;
		t->newest_ms = at;
	}
	prune_tag(k, t, now);
	for (unsigned i = 0; i < t->n; i++) {
		const struct note *o = &t->notes[(t->head + i) % KNOCK_PER_TAG];

		if (o->t == in->t && strcmp(o->blob, in->blob) == 0)
			return 0; /* held already (ours, or merged before) */
		all[n++] = *o;
	}
	/* In time order with the rest, the newest 16 kept. */
	nt = &all[n];
	memset(nt, 0, sizeof(*nt));
	nt->t = in->t;
	nt->at_ms = at;
	snprintf(nt->blob, sizeof(nt->blob), "%s", in->blob);
	nt->remote = true;
	nt->has_relay = in->has_relay;
	if (in->has_relay) {
		nt->relay.port = in->relay.port;
		memcpy(nt->relay.id_hex, in->relay.id, sizeof(nt->relay.id_hex));
		snprintf(nt->relay.ip, sizeof(nt->relay.ip), "%s", in->relay.ip);
	}
	for (unsigned i = n; i > 0 && all[i - 1].t > all[i].t; i--) {
		struct note tmp = all[i - 1];

		all[i - 1] = all[i];
		all[i] = tmp;
	}
	n++;
	skip = n > KNOCK_PER_TAG ? n - KNOCK_PER_TAG : 0;
	t->head = 0;
	t->n = n - skip;
	for (unsigned i = 0; i < t->n; i++)
		t->notes[i] = all[skip + i];
	if (at > t->newest_ms)
		t->newest_ms = at;
	htab_touch(k->tags, t);
	return 1;
}

void master_knock_post(struct master *m, struct httpd_req *req, struct json_object *d)
{
	struct master_knock *k = m->knock;
	char tag[64], blob[KNOCK_BLOB_MAX + 64], nonce[64];
	struct master_relayport_info ra;
	bool want_relay = false;
	long long now = ev_now_update(m->loop);
	const char *why;
	struct addr client;
	struct addr_ip ip;
	uint8_t key[TAG_MAX];
	struct tag *t;
	struct ipwin *w;
	struct note *nt;
	struct strbuf b;
	struct pyjson j;
	int st;

	if (d == NULL || !json_object_is_type(d, json_type_object)) {
		reply_error(m, req, 400, "bad request");
		return;
	}
	/* tag, blob = str(d.get("s") or ""), str(d.get("blob") or "") */
	tag[0] = blob[0] = '\0';
	if (master_py_truthy_field(d, "s"))
		master_py_field_str(d, "s", sizeof(tag) - 1, tag, sizeof(tag));
	if (master_py_truthy_field(d, "blob"))
		master_py_field_str(d, "blob", KNOCK_BLOB_MAX + 1, blob, sizeof(blob));
	if (!hex_match(tag, 24, 24) || blob[0] == '\0' ||
	    master_py_utf8_chars(blob) > KNOCK_BLOB_MAX || !b64_match(blob)) {
		reply_error(m, req, 400, "bad knock");
		return;
	}
	/* X-Real-IP, from a trusted proxy only (the reference trusts anyone). */
	master_http_client_ip(m, req, "X-Real-IP", &client);
	addr_to_ip(&client, &ip);
	if (master_py_truthy_field(d, "relay") && (m->relay != NULL || m->redis != NULL)) {
		uint8_t rkey[32];

		nonce[0] = '\0';
		if (master_py_truthy_field(d, "j"))
			master_py_field_str(d, "j", sizeof(nonce) - 1, nonce, sizeof(nonce));
		if (!hex_match(nonce, 8, 16)) {
			reply_error(m, req, 400, "bad nonce");
			return;
		}
		/* The rate check before a port is taken. */
		st = refusal(k, tag, &ip, now, &why);
		if (st != 0) {
			reply_error(m, req, (unsigned)st, why);
			return;
		}
		/* --redis: another master may hold the allocation already (the
		 * same knock posted there first); it stays the one port. */
		master_relay_key(tag, nonce, rkey);
		if (master_redis_relay_find(m->redis, rkey, &ra)) {
			want_relay = true;
		} else if (m->relay != NULL) {
			if (master_relayport_alloc(m->relay, tag, nonce, &ra) < 0) {
				reply_error(m, req, 503, "relay full");
				return;
			}
			want_relay = true;
		}
		if (want_relay)
			k->relays++;
	}
	st = refusal(k, tag, &ip, now, &why);
	if (st != 0) {
		reply_error(m, req, (unsigned)st, why);
		return;
	}
	w = ipwin_of(k, &ip, now, true);
	if (w != NULL) {
		w->t[(w->head + w->n) % KNOCK_PER_IP_MIN] = now;
		w->n++;
	}
	tag_key(tag, key);
	t = htab_get(k->tags, key);
	if (t == NULL) {
		t = htab_insert(k->tags, key, false, NULL);
		if (t == NULL) { /* cannot happen after refusal(); be safe */
			reply_error(m, req, 503, "full");
			return;
		}
		snprintf(t->tag, sizeof(t->tag), "%s", tag);
	}
	prune_tag(k, t, now);
	if (t->n == KNOCK_PER_TAG) { /* keep the newest 16 */
		t->head = (t->head + 1) % KNOCK_PER_TAG;
		t->n--;
	}
	nt = &t->notes[(t->head + t->n) % KNOCK_PER_TAG];
	t->n++;
	nt->t = unix_now();
	nt->at_ms = now;
	snprintf(nt->blob, sizeof(nt->blob), "%s", blob);
	nt->has_relay = want_relay;
	nt->remote = false;
	if (want_relay)
		nt->relay = ra;
	if (m->redis != NULL)
		publish_note(m, t->tag, nt);
	t->newest_ms = now;
	htab_touch(k->tags, t);
	k->posted++;
	if (log_enabled(LOG_LEVEL_DEBUG)) {
		char a[ADDR_STRLEN];

		log_debug("knock tag=%.8s.. from=%s relay=%s", tag,
			  addr_ip_str(&client, a, sizeof(a)), want_relay ? "yes" : "no");
	}

	strbuf_init(&b, 512);
	pyjson_init(&j, &b);
	pyjson_obj_begin(&j);
	pyjson_key(&j, "ok");
	pyjson_bool(&j, true);
	pyjson_key(&j, "ttl");
	pyjson_int(&j, m->cfg.knock_ttl_ms / 1000);
	if (want_relay) {
		pyjson_key(&j, "relay");
		put_relay(m, &j, &ra);
	}
	pyjson_obj_end(&j);
	master_netpunch_reply(req, 200, b.p, b.len);
	strbuf_release(&b);
	master_http_count(m, "knock_post", 200);
}

void master_knock_get(struct master *m, struct httpd_req *req)
{
	struct master_knock *k = m->knock;
	const char *s = httpd_query(req, "s"), *since_s = httpd_query(req, "since");
	long long now = ev_now_update(m->loop);
	double since = 0, wall;
	uint8_t key[TAG_MAX];
	struct tag *t;
	struct strbuf b;
	struct pyjson j;

	if (s == NULL || !hex_match(s, 24, 24)) {
		reply_error(m, req, 400, "bad tag");
		return;
	}
	/* float(since), 0 when it is not a number. */
	if (since_s != NULL && since_s[0] != '\0' && !master_py_float_str(since_s, &since))
		since = 0;
	wall = unix_now();
	k->polled++;
	tag_key(s, key);
	t = htab_get(k->tags, key);
	strbuf_init(&b, (size_t)64 << 10);
	pyjson_init(&j, &b);
	pyjson_obj_begin(&j);
	pyjson_key(&j, "knocks");
	pyjson_arr_begin(&j);
	if (t != NULL) {
		prune_tag(k, t, now);
		for (unsigned i = 0; i < t->n; i++) {
			const struct note *nt = &t->notes[(t->head + i) % KNOCK_PER_TAG];

			if (!(nt->t > since))
				continue;
			pyjson_obj_begin(&j);
			pyjson_key(&j, "t");
			pyjson_float(&j, nt->t);
			pyjson_key(&j, "blob");
			pyjson_cstr(&j, nt->blob);
			if (nt->has_relay) {
				pyjson_key(&j, "relay");
				put_relay(m, &j, &nt->relay);
			}
			pyjson_obj_end(&j);
		}
	}
	pyjson_arr_end(&j);
	pyjson_key(&j, "now");
	pyjson_float(&j, wall);
	pyjson_obj_end(&j);
	master_netpunch_reply(req, 200, b.p, b.len);
	strbuf_release(&b);
	master_http_count(m, "knock_get", 200);
}

void master_knock_metrics(const struct master_knock *k, struct strbuf *out)
{
	strbuf_printf(out,
		      "# HELP rally_master_knocks_total Knocks stored, polls, and refusals.\n"
		      "# TYPE rally_master_knocks_total counter\n"
		      "rally_master_knocks_total{event=\"posted\"} %llu\n"
		      "rally_master_knocks_total{event=\"polled\"} %llu\n"
		      "rally_master_knocks_total{event=\"refused_rate\"} %llu\n"
		      "rally_master_knocks_total{event=\"refused_full\"} %llu\n"
		      "rally_master_knocks_total{event=\"relay_requested\"} %llu\n"
		      "# HELP rally_master_knock_tags Tags with live notes.\n"
		      "# TYPE rally_master_knock_tags gauge\nrally_master_knock_tags %zu\n",
		      (unsigned long long)k->posted, (unsigned long long)k->polled,
		      (unsigned long long)k->refused_rate, (unsigned long long)k->refused_full,
		      (unsigned long long)k->relays, htab_count(k->tags));
}

int master_knock_new(struct master *m)
{
	struct master_knock *k = calloc(1, sizeof(*k));

	if (k == NULL)
		return -ENOMEM;
	k->m = m;
	k->tags = htab_new(KNOCK_MAX_TAGS, TAG_MAX, sizeof(struct tag));
	k->ips = htab_new(KNOCK_MAX_IPS, sizeof(struct addr_ip), sizeof(struct ipwin));
	if (k->tags == NULL || k->ips == NULL) {
		master_knock_free(k);
		return -ENOMEM;
	}
	m->knock = k;
	return 0;
}

void master_knock_free(struct master_knock *k)
{
	if (k == NULL)
		return;
	htab_free(k->tags);
	htab_free(k->ips);
	free(k);
}
