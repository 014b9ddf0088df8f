#include "banlist.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "htab.h"
#include "jsonp.h"
#include "strbuf.h"

struct banlist {
	struct htab *t;
};

struct banlist *banlist_new(size_t capacity)
{
	struct banlist *bl = calloc(1, sizeof(*bl));

	if (bl == NULL)
		return NULL;
	bl->t = htab_new(capacity, sizeof(struct addr_ip), sizeof(struct ban));
	if (bl->t == NULL) {
		free(bl);
		return NULL;
	}
	return bl;
}

void banlist_free(struct banlist *bl)
{
	if (bl == NULL)
		return;
	htab_free(bl->t);
	free(bl);
}

size_t banlist_count(const struct banlist *bl)
{
	return htab_count(bl->t);
}

static bool is_expired(const struct ban *b, long long now_s)
{
	return b->expires != 0 && b->expires <= now_s;
}

const struct ban *banlist_find(struct banlist *bl, const struct addr_ip *ip, long long now_s,
			       bool *expired)
{
	struct ban *b;

	if (expired != NULL)
		*expired = false;
	if (htab_count(bl->t) == 0)
		return NULL;
	b = htab_get(bl->t, ip);
	if (b == NULL)
		return NULL;
	if (is_expired(b, now_s)) {
		htab_remove(bl->t, b);
		if (expired != NULL)
			*expired = true;
		return NULL;
	}
	return b;
}

static bool reason_ok(const char *reason, size_t len)
{
	if (len > BANLIST_REASON_MAX || memchr(reason, '\0', len) != NULL)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)reason[i];

		/* Reasons end up in logs: no control characters. */
		if (c < 0x20 || c == 0x7f)
			return false;
	}
	return true;
}

int banlist_put(struct banlist *bl, const struct addr_ip *ip, const char *reason,
		long long duration_s, long long now_s)
{
	struct ban *b = htab_get(bl->t, ip);
	size_t rlen = strlen(reason);
	int created = 0;

	if (!reason_ok(reason, rlen) || duration_s < 0 || duration_s > BANLIST_MAX_DURATION)
		return -EINVAL;
	if (b == NULL) {
		b = htab_insert(bl->t, ip, false, NULL);
		if (b == NULL)
			return -ENOSPC;
		b->ip = *ip;
		created = 1;
	}
	memcpy(b->reason, reason, rlen + 1);
	b->created = now_s;
	b->expires = duration_s > 0 ? now_s + duration_s : 0;
	return created;
}

int banlist_del(struct banlist *bl, const struct addr_ip *ip)
{
	struct ban *b = htab_get(bl->t, ip);

	if (b == NULL)
		return -ENOENT;
	htab_remove(bl->t, b);
	return 0;
}

size_t banlist_expire(struct banlist *bl, long long now_s)
{
	struct ban *b = htab_oldest(bl->t);
	size_t n = 0;

	while (b != NULL) {
		struct ban *next = htab_newer(bl->t, b);

		if (is_expired(b, now_s)) {
			htab_remove(bl->t, b);
			n++;
		}
		b = next;
	}
	return n;
}

const struct ban *banlist_next(const struct banlist *bl, const struct ban *prev)
{
	if (prev == NULL)
		return htab_oldest(bl->t);
	return htab_newer(bl->t, prev);
}

void banlist_to_json(const struct banlist *bl, struct strbuf *out)
{
	const struct ban *b = NULL;
	bool first = true;

	strbuf_printf(out, "{\"version\":1,\"bans\":[");
	while ((b = banlist_next(bl, b)) != NULL) {
		struct json_object *o = json_object_new_object();
		char ip[INET6_ADDRSTRLEN];
		size_t len;
		const char *s;

		json_object_object_add(o, "ip",
				       json_object_new_string(addr_ip_fmt(&b->ip, ip, sizeof(ip))));
		json_object_object_add(o, "reason", json_object_new_string(b->reason));
		json_object_object_add(o, "created", json_object_new_int64(b->created));
		json_object_object_add(o, "expires",
				       b->expires ? json_object_new_int64(b->expires) : NULL);
		s = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &len);
		if (!first)
			strbuf_append(out, ",\n", 2);
		else
			strbuf_append(out, "\n", 1);
		strbuf_append(out, s, len);
		first = false;
		json_object_put(o);
	}
	strbuf_printf(out, "\n]}\n");
}

static int get_int(struct json_object *o, const char *key, bool required, bool nullable,
		   long long *v, const char *where, char *err, size_t errsize)
{
	struct json_object *f;

	if (!json_object_object_get_ex(o, key, &f) || (nullable && f == NULL)) {
		if (required) {
			snprintf(err, errsize, "%s.%s: missing", where, key);
			return -EBADMSG;
		}
		*v = 0;
		return 0;
	}
	if (!json_object_is_type(f, json_type_int)) {
		snprintf(err, errsize, "%s.%s: not an integer", where, key);
		return -EBADMSG;
	}
	*v = json_object_get_int64(f);
	return 0;
}

int banlist_load_json(struct banlist *bl, const char *text, size_t len, long long now_s, char *err,
		      size_t errsize)
{
	struct json_object *root = NULL, *f, *arr;
	int ret = -EBADMSG;
	long long version;
	size_t n;

	/* Start empty: either all bans load or none do. */
	while (htab_oldest(bl->t) != NULL)
		htab_remove(bl->t, htab_oldest(bl->t));
	if (jsonp_parse(text, len, 8, &root, err, errsize) < 0)
		return -EBADMSG;
	if (!json_object_is_type(root, json_type_object)) {
		snprintf(err, errsize, "not a JSON object");
		goto out;
	}
	if (get_int(root, "version", true, false, &version, "file", err, errsize) < 0)
		goto out;
	if (version != 1) {
		snprintf(err, errsize, "version %lld not supported (expected 1)", version);
		goto out;
	}
	if (!json_object_object_get_ex(root, "bans", &arr) ||
	    !json_object_is_type(arr, json_type_array)) {
		snprintf(err, errsize, "bans: missing or not an array");
		goto out;
	}
	n = json_object_array_length(arr);
	for (size_t i = 0; i < n; i++) {
		struct json_object *e = json_object_array_get_idx(arr, i);
		char where[32];
		struct addr a;
		struct addr_ip ip;
		long long created, expires;
		const char *reason = "";
		size_t rlen = 0;
		struct ban *b;

		snprintf(where, sizeof(where), "bans[%zu]", i);
		if (!json_object_is_type(e, json_type_object)) {
			snprintf(err, errsize, "%s: not an object", where);
			goto fail;
		}
		if (!json_object_object_get_ex(e, "ip", &f) ||
		    !json_object_is_type(f, json_type_string) ||
		    addr_parse_ip(&a, json_object_get_string(f)) < 0) {
			snprintf(err, errsize, "%s.ip: missing or not an IP address", where);
			goto fail;
		}
		addr_to_ip(&a, &ip);
		if (json_object_object_get_ex(e, "reason", &f) && f != NULL) {
			if (!json_object_is_type(f, json_type_string)) {
				snprintf(err, errsize, "%s.reason: not a string", where);
				goto fail;
			}
			reason = json_object_get_string(f);
			rlen = (size_t)json_object_get_string_len(f);
		}
		if (!reason_ok(reason, rlen)) {
			snprintf(err, errsize,
				 "%s.reason: longer than %d bytes or control characters", where,
				 BANLIST_REASON_MAX);
			goto fail;
		}
		if (get_int(e, "created", true, false, &created, where, err, errsize) < 0 ||
		    get_int(e, "expires", false, true, &expires, where, err, errsize) < 0)
			goto fail;
		if (created < 0 || expires < 0) {
			snprintf(err, errsize, "%s: negative time", where);
			goto fail;
		}
		if (expires != 0 && expires <= now_s)
			continue; /* expired while we were down: forget it */
		if (htab_get(bl->t, &ip) != NULL) {
			snprintf(err, errsize, "%s.ip: duplicate ban", where);
			goto fail;
		}
		b = htab_insert(bl->t, &ip, false, NULL);
		if (b == NULL) {
			snprintf(err, errsize, "more than %zu bans", htab_capacity(bl->t));
			ret = -ENOSPC;
			goto fail;
		}
		b->ip = ip;
		memcpy(b->reason, reason, rlen);
		b->reason[rlen] = '\0';
		b->created = created;
		b->expires = expires;
	}
	ret = 0;
	goto out;
fail:
	while (htab_oldest(bl->t) != NULL)
		htab_remove(bl->t, htab_oldest(bl->t));
out:
	json_object_put(root);
	return ret;
}

int banlist_parse_request(const char *body, size_t len, char reason[static BANLIST_REASON_MAX + 1],
			  long long *duration_s, char *err, size_t errsize)
{
	struct json_object *root = NULL, *f;
	int ret = -EBADMSG;
	size_t rlen;

	reason[0] = '\0';
	*duration_s = 0;
	if (jsonp_parse(body, len, 4, &root, err, errsize) < 0)
		return -EBADMSG;
	if (!json_object_is_type(root, json_type_object)) {
		snprintf(err, errsize, "body is not a JSON object");
		goto out;
	}
	if (!json_object_object_get_ex(root, "reason", &f) ||
	    !json_object_is_type(f, json_type_string)) {
		snprintf(err, errsize, "reason: missing or not a string");
		goto out;
	}
	rlen = (size_t)json_object_get_string_len(f);
	if (!reason_ok(json_object_get_string(f), rlen)) {
		snprintf(err, errsize, "reason: longer than %d bytes or control characters",
			 BANLIST_REASON_MAX);
		goto out;
	}
	memcpy(reason, json_object_get_string(f), rlen);
	reason[rlen] = '\0';
	if (json_object_object_get_ex(root, "duration", &f) && f != NULL) {
		long long d;

		if (!json_object_is_type(f, json_type_int)) {
			snprintf(err, errsize, "duration: not an integer number of seconds");
			goto out;
		}
		d = json_object_get_int64(f);
		if (d < 1 || d > BANLIST_MAX_DURATION) {
			snprintf(err, errsize, "duration: must be 1..%lld seconds",
				 BANLIST_MAX_DURATION);
			goto out;
		}
		*duration_s = d;
	}
	ret = 0;
out:
	json_object_put(root);
	return ret;
}
