/*
 * The pure half of the shared registry: the --redis URL, key names, channel
 * messages and values, as docs/master.md "Key layout" gives them. No
 * sockets, clock or logging: a decoder returns a reason and master_redis.c
 * counts and logs it. Whatever comes out of Redis is untrusted (another
 * deployment sharing the server by mistake, a hostile or corrupt writer):
 * every length is checked before a byte is copied and every field is
 * typed and bounded here or by the registry kind's own snapshot load.
 */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "jsonp.h"
#include "master_redis.h"
#include "num.h"
#include "strbuf.h"

#define MSG_MAX (256)

bool master_redis_name_ok(const char *s, size_t len)
{
	if (len == 0 || len > MASTER_REDIS_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return false;
	}
	return true;
}

static bool hex_ok(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	}
	return true;
}

static int nibble(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int master_redis_hex_decode(const char *hex, uint8_t *bin, size_t n)
{
	if (strlen(hex) != 2 * n)
		return -EBADMSG;
	for (size_t i = 0; i < n; i++) {
		int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -EBADMSG;
		bin[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

void master_redis_hex_encode(const uint8_t *bin, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[bin[i] >> 4];
		out[2 * i + 1] = digits[bin[i] & 15];
	}
	out[2 * n] = '\0';
}

/* ---- the URL ---- */

static int url_err(char *err, size_t errsize, const char *msg)
{
	snprintf(err, errsize, "%s", msg);
	return -EINVAL;
}

/* HOST[:PORT] (IPv6 in brackets); port stays as given when absent and
 * need_port is false. */
static int host_port(const char *s, size_t len, struct master_redis_url *u, bool need_port,
		     char *err, size_t errsize)
{
	const char *colon = NULL, *host = s;
	size_t hlen;
	int64_t port;

	if (len > 0 && s[0] == '[') {
		const char *close = memchr(s, ']', len);

		if (close == NULL)
			return url_err(err, errsize, "unclosed [ in the host");
		host = s + 1;
		hlen = (size_t)(close - host);
		if ((size_t)(close - s) + 1 < len) {
			if (close[1] != ':')
				return url_err(err, errsize, "junk after ]");
			colon = close + 1;
		}
	} else {
		colon = memchr(s, ':', len);
		hlen = colon != NULL ? (size_t)(colon - s) : len;
		if (colon != NULL && memchr(colon + 1, ':', len - hlen - 1) != NULL)
			return url_err(err, errsize, "an IPv6 host goes in brackets");
	}
	if (hlen == 0 || hlen >= sizeof(u->host))
		return url_err(err, errsize, "empty or too long host");
	for (size_t i = 0; i < hlen; i++) {
		char c = host[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '-' || c == ':' || c == '_'))
			return url_err(err, errsize, "bad character in the host");
	}
	memcpy(u->host, host, hlen);
	u->host[hlen] = '\0';
	if (colon == NULL) {
		if (need_port)
			return url_err(err, errsize, "expected HOST:PORT");
		return 0;
	}
	if (num_parse(colon + 1, (size_t)(s + len - colon - 1), 1, 65535, 0, &port) < 0)
		return url_err(err, errsize, "bad port");
	u->port = (uint16_t)port;
	return 0;
}

int master_redis_url_parse(const char *s, struct master_redis_url *out, char *err, size_t errsize)
{
	size_t len = strlen(s);

	memset(out, 0, sizeof(*out));
	out->db = -1;
	out->port = 6379;
	if (strncmp(s, "unix:", 5) == 0) {
		out->transport = MASTER_REDIS_UNIX;
		if (s[5] != '/' || len - 5 >= sizeof(out->path))
			return url_err(err, errsize,
				       "unix: needs an absolute path under 108 bytes");
		memcpy(out->path, s + 5, len - 4);
		return 0;
	}
	out->transport = MASTER_REDIS_TCP;
	if (strncmp(s, "redis://", 8) == 0) {
		const char *p = s + 8, *at, *slash, *end = s + len;

		slash = memchr(p, '/', (size_t)(end - p));
		if (slash == NULL)
			slash = end;
		at = memchr(p, '@', (size_t)(slash - p));
		if (at != NULL) {
			size_t ulen = (size_t)(at - p);

			if (memchr(p, ':', ulen) != NULL)
				return url_err(err, errsize,
					       "no password in the URL: use --redis-password-file");
			if (!master_redis_name_ok(p, ulen))
				return url_err(err, errsize, "bad user name");
			memcpy(out->user, p, ulen);
			out->user[ulen] = '\0';
			p = at + 1;
		}
		if (host_port(p, (size_t)(slash - p), out, false, err, errsize) < 0)
			return -EINVAL;
		if (slash < end && slash + 1 < end) {
			int64_t db;

			if (num_parse(slash + 1, (size_t)(end - slash - 1), 0, 65535, 0, &db) < 0)
				return url_err(err, errsize, "bad database number");
			out->db = (int)db;
		}
		return 0;
	}
	if (strstr(s, "://") != NULL)
		return url_err(err, errsize, "only redis:// and unix: URLs");
	return host_port(s, len, out, true, err, errsize);
}

/* ---- key names ---- */

int master_redis_key_parse(const char *prefix, const char *key, size_t len,
			   struct master_redis_key *out)
{
	size_t plen = strlen(prefix), rest;
	const char *p;

	memset(out, 0, sizeof(*out));
	if (len <= plen + 1 || memcmp(key, prefix, plen) != 0 || key[plen] != ':')
		return -EBADMSG;
	p = key + plen + 1;
	rest = len - plen - 1;
	if (rest > 4 && memcmp(p, "reg:", 4) == 0) {
		const char *colon = memchr(p + 4, ':', rest - 4);
		size_t klen, hlen;

		if (colon == NULL)
			return -EBADMSG;
		klen = (size_t)(colon - p - 4);
		hlen = rest - 4 - klen - 1;
		if (klen == 0 || klen > MASTER_REDIS_KIND_MAX || hlen == 0 ||
		    hlen > MASTER_REDIS_HEX_MAX || hlen % 2 != 0 || !hex_ok(colon + 1, hlen))
			return -EBADMSG;
		for (size_t i = 0; i < klen; i++) {
			char c = p[4 + i];

			if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
				return -EBADMSG;
		}
		out->type = MASTER_REDIS_KEY_REG;
		memcpy(out->kind, p + 4, klen);
		memcpy(out->hex, colon + 1, hlen);
		return 0;
	}
	if (rest == 6 + MASTER_REDIS_TAG_LEN && memcmp(p, "knock:", 6) == 0 &&
	    hex_ok(p + 6, MASTER_REDIS_TAG_LEN)) {
		out->type = MASTER_REDIS_KEY_KNOCK;
		memcpy(out->hex, p + 6, MASTER_REDIS_TAG_LEN);
		return 0;
	}
	if (rest == 6 + 64 && memcmp(p, "relay:", 6) == 0 && hex_ok(p + 6, 64)) {
		out->type = MASTER_REDIS_KEY_RELAY;
		memcpy(out->hex, p + 6, 64);
		return 0;
	}
	return -EBADMSG;
}

/* ---- channel messages ---- */

/* The next space-separated word of [*p, end): its start and length. */
static bool word(const char **p, const char *end, const char **w, size_t *wlen)
{
	const char *s = *p, *sp;

	if (s >= end)
		return false;
	sp = memchr(s, ' ', (size_t)(end - s));
	*w = s;
	*wlen = sp != NULL ? (size_t)(sp - s) : (size_t)(end - s);
	*p = sp != NULL ? sp + 1 : end;
	return *wlen > 0;
}

int master_redis_msg_parse(const char *buf, size_t len, struct master_redis_msg *out)
{
	const char *p = buf, *end = buf + len, *w;
	size_t wl;
	int64_t wall;

	memset(out, 0, sizeof(*out));
	if (len == 0 || len > MSG_MAX)
		return -EBADMSG;
	if (!word(&p, end, &w, &wl) || !master_redis_name_ok(w, wl))
		return -EBADMSG;
	memcpy(out->node, w, wl);
	if (!word(&p, end, &w, &wl) || wl != 1)
		return -EBADMSG;
	out->op = (enum master_redis_op)w[0];
	switch (out->op) {
	case MASTER_REDIS_OP_SET:
	case MASTER_REDIS_OP_DEL:
		if (!word(&p, end, &w, &wl) || wl > MASTER_REDIS_KIND_MAX)
			return -EBADMSG;
		for (size_t i = 0; i < wl; i++) {
			if (!((w[i] >= 'a' && w[i] <= 'z') || (w[i] >= '0' && w[i] <= '9')))
				return -EBADMSG;
		}
		memcpy(out->kind, w, wl);
		if (!word(&p, end, &w, &wl) || wl > MASTER_REDIS_HEX_MAX || wl % 2 != 0 ||
		    !hex_ok(w, wl))
			return -EBADMSG;
		memcpy(out->hex, w, wl);
		if (out->op == MASTER_REDIS_OP_DEL) {
			if (!word(&p, end, &w, &wl) ||
			    num_parse(w, wl, 0, (1LL << 53), 0, &wall) < 0)
				return -EBADMSG;
			out->wall_ms = wall;
		}
		break;
	case MASTER_REDIS_OP_KNOCK:
		if (!word(&p, end, &w, &wl) || wl != MASTER_REDIS_TAG_LEN || !hex_ok(w, wl))
			return -EBADMSG;
		memcpy(out->hex, w, wl);
		break;
	case MASTER_REDIS_OP_RELAY:
	case MASTER_REDIS_OP_RELAY_DEL:
		if (!word(&p, end, &w, &wl) || wl != 64 || !hex_ok(w, wl))
			return -EBADMSG;
		memcpy(out->hex, w, wl);
		break;
	default:
		return -EBADMSG;
	}
	/* Nothing after the last field, not even a space. */
	return p == end && buf[len - 1] != ' ' ? 0 : -EBADMSG;
}

/* ---- values ---- */

static int parse_object(const char *buf, size_t len, struct json_object **root, const char **why)
{
	char err[128];

	*root = NULL;
	if (len == 0 || len > MASTER_REDIS_VALUE_MAX) {
		*why = "size";
		return -EBADMSG;
	}
	if (jsonp_parse(buf, len, MASTER_REDIS_DEPTH, root, err, sizeof(err)) < 0) {
		*root = NULL;
		*why = "json";
		return -EBADMSG;
	}
	if (!json_object_is_type(*root, json_type_object)) {
		json_object_put(*root);
		*root = NULL;
		*why = "json";
		return -EBADMSG;
	}
	return 0;
}

static bool get_int(struct json_object *o, const char *k, long long lo, long long hi,
		    long long *out)
{
	struct json_object *f;

	if (!json_object_object_get_ex(o, k, &f) || !json_object_is_type(f, json_type_int))
		return false;
	*out = json_object_get_int64(f);
	return *out >= lo && *out <= hi;
}

/* A string field of at most max bytes, no NUL inside. */
static bool get_str(struct json_object *o, const char *k, size_t max, const char **s, size_t *len)
{
	struct json_object *f;

	if (!json_object_object_get_ex(o, k, &f) || !json_object_is_type(f, json_type_string))
		return false;
	*s = json_object_get_string(f);
	*len = (size_t)json_object_get_string_len(f);
	return *len <= max && strlen(*s) == *len;
}

/* {"v":1,"node":N,...}: the version and the node. */
static bool head_ok(struct json_object *o, char node[MASTER_REDIS_NAME_MAX + 1])
{
	long long v;
	const char *s;
	size_t n;

	if (!get_int(o, "v", 1, 1, &v) || !get_str(o, "node", MASTER_REDIS_NAME_MAX, &s, &n) ||
	    !master_redis_name_ok(s, n))
		return false;
	memcpy(node, s, n);
	node[n] = '\0';
	return true;
}

int master_redis_env_decode(const char *buf, size_t len, struct json_object **root,
			    struct master_redis_env *out, const char **why)
{
	long long seen;

	memset(out, 0, sizeof(*out));
	if (parse_object(buf, len, root, why) < 0)
		return -EBADMSG;
	if (!head_ok(*root, out->node) || !get_int(*root, "seen_ms", 1, (1LL << 53), &seen) ||
	    !json_object_object_get_ex(*root, "entry", &out->entry) ||
	    !json_object_is_type(out->entry, json_type_object)) {
		json_object_put(*root);
		*root = NULL;
		out->entry = NULL;
		*why = "envelope";
		return -EBADMSG;
	}
	out->seen_ms = seen;
	return 0;
}

/* ip (an IPv4 literal), port (1..65535) and id (32 lowercase hex) of o. */
static bool relay_fields(struct json_object *o, struct master_redis_relay *r)
{
	const char *s;
	size_t n;
	long long port;
	struct addr a;

	if (!get_str(o, "ip", sizeof(r->ip) - 1, &s, &n) || addr_parse_ip(&a, s) < 0 ||
	    !addr_is_v4(&a))
		return false;
	memcpy(r->ip, s, n + 1);
	if (!get_int(o, "port", 1, 65535, &port))
		return false;
	r->port = (uint16_t)port;
	if (!get_str(o, "id", 32, &s, &n) || n != 32 || !hex_ok(s, n))
		return false;
	memcpy(r->id, s, n + 1);
	return true;
}

int master_redis_relay_decode(const char *buf, size_t len, struct master_redis_relay *out,
			      const char **why)
{
	struct json_object *root;
	bool ok;

	memset(out, 0, sizeof(*out));
	if (parse_object(buf, len, &root, why) < 0)
		return -EBADMSG;
	ok = head_ok(root, out->node) && relay_fields(root, out);
	json_object_put(root);
	if (!ok) {
		*why = "relay";
		return -EBADMSG;
	}
	return 0;
}

static int put_json(struct json_object *o, struct strbuf *out)
{
	size_t len;
	const char *s = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &len);

	if (len > MASTER_REDIS_VALUE_MAX) {
		json_object_put(o);
		return -EMSGSIZE;
	}
	strbuf_append(out, s, len);
	json_object_put(o);
	return out->bad ? -EMSGSIZE : 0;
}

static struct json_object *relay_obj(const struct master_redis_relay *in, bool head)
{
	struct json_object *o = json_object_new_object();

	if (head) {
		json_object_object_add(o, "v", json_object_new_int(1));
		json_object_object_add(o, "node", json_object_new_string(in->node));
	}
	json_object_object_add(o, "ip", json_object_new_string(in->ip));
	json_object_object_add(o, "port", json_object_new_int(in->port));
	json_object_object_add(o, "id", json_object_new_string(in->id));
	return o;
}

int master_redis_relay_encode(const struct master_redis_relay *in, struct strbuf *out)
{
	return put_json(relay_obj(in, true), out);
}

/* re.match(r"^[A-Za-z0-9+/=]+$"), without the trailing newline the HTTP
 * door lets through (a stored blob never has one). */
static bool b64_ok(const char *s, size_t n)
{
	return n > 0 &&
	       strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") == n;
}

int master_redis_note_decode(const char *buf, size_t len, struct master_redis_note *out,
			     const char **why)
{
	struct json_object *root, *f;
	const char *s;
	size_t n;
	bool ok;

	memset(out, 0, sizeof(*out));
	if (parse_object(buf, len, &root, why) < 0)
		return -EBADMSG;
	ok = head_ok(root, out->node) && json_object_object_get_ex(root, "t", &f) &&
	     (json_object_is_type(f, json_type_double) || json_object_is_type(f, json_type_int));
	if (ok) {
		out->t = json_object_get_double(f);
		ok = isfinite(out->t) && out->t > 0 && out->t < 1e11;
	}
	ok = ok && get_str(root, "blob", MASTER_REDIS_BLOB_MAX, &s, &n) && b64_ok(s, n);
	if (ok)
		memcpy(out->blob, s, n + 1);
	if (ok && json_object_object_get_ex(root, "relay", &f)) {
		ok = json_object_is_type(f, json_type_object) && relay_fields(f, &out->relay);
		out->has_relay = ok;
	}
	json_object_put(root);
	if (!ok) {
		*why = "note";
		return -EBADMSG;
	}
	return 0;
}

int master_redis_note_encode(const struct master_redis_note *in, struct strbuf *out)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "v", json_object_new_int(1));
	json_object_object_add(o, "node", json_object_new_string(in->node));
	json_object_object_add(o, "t", json_object_new_double(in->t));
	json_object_object_add(o, "blob", json_object_new_string(in->blob));
	if (in->has_relay)
		json_object_object_add(o, "relay", relay_obj(&in->relay, false));
	return put_json(o, out);
}
