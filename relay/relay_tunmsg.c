#include "relay_tunmsg.h"

#include <errno.h>
#include <json-c/json.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "jsonp.h"
#include "strbuf.h"

static const struct {
	const char *name;
	enum tunmsg_cmd cmd;
} cmds[] = {
	{"ping", TUNMSG_PING},
	{"pong", TUNMSG_PONG},
	{"allocate", TUNMSG_ALLOCATE},
	{"allocate_ok", TUNMSG_ALLOCATE_OK},
	{"allocate_err", TUNMSG_ALLOCATE_ERR},
	{"connect", TUNMSG_CONNECT},
	{"connect_ok", TUNMSG_CONNECT_OK},
	{"connect_err", TUNMSG_CONNECT_ERR},
	{"data", TUNMSG_DATA},
	{"close", TUNMSG_CLOSE},
	{"reset", TUNMSG_RESET},
	{"x_rally", TUNMSG_X_RALLY},
};

static const char *cmd_name(enum tunmsg_cmd c)
{
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (cmds[i].cmd == c)
			return cmds[i].name;
	return "unknown";
}

/* A required string field copied into dst (at most max bytes, printable
 * ASCII only: these are ids, hosts and error texts). */
static int get_str(struct json_object *o, const char *key, char *dst, size_t max, bool required)
{
	struct json_object *v;
	const char *s;
	size_t n;

	if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null)) {
		dst[0] = '\0';
		return required ? -EBADMSG : 0;
	}
	if (!json_object_is_type(v, json_type_string))
		return -EBADMSG;
	s = json_object_get_string(v);
	n = (size_t)json_object_get_string_len(v);
	if (n > max)
		return -EBADMSG;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] == 0x7f)
			return -EBADMSG;
	memcpy(dst, s, n);
	dst[n] = '\0';
	return 0;
}

static int get_uint(struct json_object *o, const char *key, uint64_t max, uint64_t *out)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return -EBADMSG;
	errno = 0;
	if (json_object_get_int64(v) < 0) {
		return -EBADMSG;
	}
	*out = json_object_get_uint64(v);
	if (errno != 0 || *out > max)
		return -EBADMSG;
	return 0;
}

static int get_stream(struct json_object *o, struct tunmsg *m)
{
	uint64_t v;

	if (get_uint(o, "stream_id", UINT32_MAX, &v) < 0)
		return -EBADMSG;
	m->stream_id = (uint32_t)v;
	return 0;
}

static int decode_chunk(struct json_object *o, struct tunmsg *m, uint8_t *buf, size_t size)
{
	struct json_object *v;
	const char *s;
	size_t n, bin = 0;

	if (!json_object_object_get_ex(o, "chunk", &v) || !json_object_is_type(v, json_type_string))
		return -EBADMSG;
	s = json_object_get_string(v);
	n = (size_t)json_object_get_string_len(v);
	if (n / 4 * 3 > size + 2)
		return -EMSGSIZE;
	if (sodium_base642bin(buf, size, s, n, NULL, &bin, NULL, sodium_base64_VARIANT_ORIGINAL) !=
		    0 &&
	    sodium_base642bin(buf, size, s, n, NULL, &bin, NULL,
			      sodium_base64_VARIANT_ORIGINAL_NO_PADDING) != 0)
		return n / 4 * 3 > size ? -EMSGSIZE : -EBADMSG;
	m->chunk = buf;
	m->chunk_len = bin;
	return 0;
}

static int decode_obj(struct json_object *o, struct tunmsg *m, uint8_t *buf, size_t size)
{
	char name[32];
	uint64_t v;
	struct json_object *t;
	int r = 0;

	if (get_str(o, "cmd", name, sizeof(name) - 1, true) < 0)
		return -EBADMSG;
	m->cmd = TUNMSG_UNKNOWN;
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (strcmp(cmds[i].name, name) == 0)
			m->cmd = cmds[i].cmd;
	switch (m->cmd) {
	case TUNMSG_UNKNOWN:
	case TUNMSG_PING:
	case TUNMSG_PONG:
		return 0;
	case TUNMSG_ALLOCATE:
		if (get_uint(o, "request_id", UINT64_MAX, &m->request_id) < 0 ||
		    get_str(o, "player_id", m->player_id, TUNMSG_ID_MAX, true) < 0 ||
		    get_str(o, "expected_client_ip", m->expected_ip, TUNMSG_ID_MAX, false) < 0)
			return -EBADMSG;
		return 0;
	case TUNMSG_ALLOCATE_OK:
		if (get_uint(o, "request_id", UINT64_MAX, &m->request_id) < 0 ||
		    get_str(o, "token", m->token, TUNMSG_ID_MAX, true) < 0 ||
		    get_str(o, "relay_host", m->relay_host, TUNMSG_TEXT_MAX, true) < 0)
			return -EBADMSG;
		if (get_uint(o, "auth_port", 65535, &v) < 0)
			return -EBADMSG;
		m->auth_port = (uint16_t)v;
		if (get_uint(o, "world_port", 65535, &v) < 0)
			return -EBADMSG;
		m->world_port = (uint16_t)v;
		if (!json_object_object_get_ex(o, "expires_at", &t) ||
		    !json_object_is_type(t, json_type_int))
			return -EBADMSG;
		m->expires_at = json_object_get_int64(t);
		return 0;
	case TUNMSG_ALLOCATE_ERR:
		if (get_uint(o, "request_id", UINT64_MAX, &m->request_id) < 0 ||
		    get_str(o, "error", m->error, TUNMSG_TEXT_MAX, true) < 0)
			return -EBADMSG;
		return 0;
	case TUNMSG_CONNECT:
		if (get_stream(o, m) < 0 ||
		    get_str(o, "token", m->token, TUNMSG_ID_MAX, true) < 0 ||
		    get_str(o, "target", name, sizeof(name) - 1, true) < 0)
			return -EBADMSG;
		if (strcmp(name, "auth") == 0)
			m->target = TUNMSG_AUTH;
		else if (strcmp(name, "world") == 0)
			m->target = TUNMSG_WORLD;
		else
			return -EBADMSG;
		return 0;
	case TUNMSG_CONNECT_ERR:
		if (get_str(o, "error", m->error, TUNMSG_TEXT_MAX, true) < 0)
			return -EBADMSG;
		return get_stream(o, m);
	case TUNMSG_CONNECT_OK:
	case TUNMSG_CLOSE:
	case TUNMSG_RESET:
		return get_stream(o, m);
	case TUNMSG_DATA:
		r = get_stream(o, m);
		if (r < 0)
			return r;
		return decode_chunk(o, m, buf, size);
	case TUNMSG_X_RALLY:
		if (get_uint(o, "version", 1000, &v) < 0)
			return -EBADMSG;
		m->x_version = (unsigned)v;
		if (get_uint(o, "features", UINT32_MAX, &v) < 0)
			return -EBADMSG;
		m->x_features = (unsigned)v;
		if (json_object_object_get_ex(o, "udp_port", &t)) {
			if (get_uint(o, "udp_port", 65535, &v) < 0)
				return -EBADMSG;
			m->x_udp_port = (uint16_t)v;
		}
		return get_str(o, "udp_key", m->x_udp_key, TUNMSG_ID_MAX, false);
	}
	return -EBADMSG;
}

static int parse(const char *json, size_t len, struct json_object **o)
{
	char err[64];

	if (jsonp_parse(json, len, 4, o, err, sizeof(err)) < 0)
		return -EBADMSG;
	if (!json_object_is_type(*o, json_type_object)) {
		json_object_put(*o);
		return -EBADMSG;
	}
	return 0;
}

int tunmsg_decode(const char *json, size_t len, struct tunmsg *m, uint8_t *chunkbuf,
		  size_t chunksize)
{
	struct json_object *o;
	int r;

	memset(m, 0, sizeof(*m));
	if (parse(json, len, &o) < 0)
		return -EBADMSG;
	r = decode_obj(o, m, chunkbuf, chunksize);
	json_object_put(o);
	if (r < 0)
		m->cmd = TUNMSG_UNKNOWN;
	return r;
}

/* Appends s as a JSON string; our strings are printable ASCII, but quote
 * and backslash still need escaping. */
static void put_str(struct strbuf *out, const char *key, const char *s)
{
	strbuf_printf(out, ",\"%s\":\"", key);
	for (; *s != '\0'; s++) {
		if (*s == '"' || *s == '\\')
			strbuf_append(out, "\\", 1);
		if ((unsigned char)*s < 0x20)
			strbuf_printf(out, "\\u%04x", (unsigned)(unsigned char)*s);
		else
			strbuf_append(out, s, 1);
	}
	strbuf_append(out, "\"", 1);
}

/* Data chunks are ours, at most TUNMSG_CHUNK_MAX bytes. */
static void put_chunk(struct strbuf *out, const uint8_t *p, size_t n)
{
	char tmp[TUNMSG_CHUNK_MAX / 3 * 4 + 8];

	if (n > TUNMSG_CHUNK_MAX) {
		out->bad = true;
		return;
	}
	sodium_bin2base64(tmp, sizeof(tmp), p, n, sodium_base64_VARIANT_ORIGINAL);
	strbuf_append(out, ",\"chunk\":\"", 10);
	strbuf_append(out, tmp, strlen(tmp));
	strbuf_append(out, "\"", 1);
}

void tunmsg_encode(const struct tunmsg *m, struct strbuf *out)
{
	strbuf_printf(out, "{\"cmd\":\"%s\"", cmd_name(m->cmd));
	switch (m->cmd) {
	case TUNMSG_UNKNOWN:
	case TUNMSG_PING:
	case TUNMSG_PONG:
		break;
	case TUNMSG_ALLOCATE:
		strbuf_printf(out, ",\"request_id\":%llu", (unsigned long long)m->request_id);
		put_str(out, "player_id", m->player_id);
		if (m->expected_ip[0] != '\0')
			put_str(out, "expected_client_ip", m->expected_ip);
		break;
	case TUNMSG_ALLOCATE_OK:
		strbuf_printf(out, ",\"request_id\":%llu", (unsigned long long)m->request_id);
		put_str(out, "token", m->token);
		put_str(out, "relay_host", m->relay_host);
		strbuf_printf(out, ",\"auth_port\":%u,\"world_port\":%u,\"expires_at\":%lld",
			      m->auth_port, m->world_port, m->expires_at);
		break;
	case TUNMSG_ALLOCATE_ERR:
		strbuf_printf(out, ",\"request_id\":%llu", (unsigned long long)m->request_id);
		put_str(out, "error", m->error);
		break;
	case TUNMSG_CONNECT:
		strbuf_printf(out, ",\"stream_id\":%u", m->stream_id);
		put_str(out, "target", m->target == TUNMSG_AUTH ? "auth" : "world");
		put_str(out, "token", m->token);
		break;
	case TUNMSG_CONNECT_ERR:
		strbuf_printf(out, ",\"stream_id\":%u", m->stream_id);
		put_str(out, "error", m->error);
		break;
	case TUNMSG_CONNECT_OK:
	case TUNMSG_CLOSE:
	case TUNMSG_RESET:
		strbuf_printf(out, ",\"stream_id\":%u", m->stream_id);
		break;
	case TUNMSG_DATA:
		strbuf_printf(out, ",\"stream_id\":%u", m->stream_id);
		put_chunk(out, m->chunk, m->chunk_len);
		break;
	case TUNMSG_X_RALLY:
		strbuf_printf(out, ",\"version\":%u,\"features\":%u", m->x_version, m->x_features);
		if (m->x_udp_port != 0)
			strbuf_printf(out, ",\"udp_port\":%u", m->x_udp_port);
		if (m->x_udp_key[0] != '\0')
			put_str(out, "udp_key", m->x_udp_key);
		break;
	}
	strbuf_append(out, "}", 1);
}

int tunmsg_decode_hello(const char *json, size_t len, struct tunmsg_hello *h)
{
	struct json_object *o;
	int r;

	memset(h, 0, sizeof(*h));
	if (parse(json, len, &o) < 0)
		return -EBADMSG;
	r = get_str(o, "realm_id", h->realm_id, TUNMSG_ID_MAX, true);
	if (r == 0)
		r = get_str(o, "signature", h->signature, TUNMSG_SIG_MAX, true);
	json_object_put(o);
	return r;
}

int tunmsg_decode_challenge(const char *json, size_t len, char nonce[static TUNMSG_ID_MAX + 1])
{
	struct json_object *o;
	int r;

	if (parse(json, len, &o) < 0)
		return -EBADMSG;
	r = get_str(o, "nonce", nonce, TUNMSG_ID_MAX, true);
	json_object_put(o);
	return r;
}

int tunmsg_decode_welcome(const char *json, size_t len, char *message, size_t size)
{
	struct json_object *o, *ok;
	char msg[TUNMSG_TEXT_MAX + 1];
	int r;

	if (parse(json, len, &o) < 0)
		return -EBADMSG;
	r = get_str(o, "message", msg, TUNMSG_TEXT_MAX, false);
	if (r == 0 && (!json_object_object_get_ex(o, "ok", &ok) ||
		       !json_object_is_type(ok, json_type_boolean)))
		r = -EBADMSG;
	if (r == 0) {
		snprintf(message, size, "%s", msg);
		r = json_object_get_boolean(ok) ? 0 : -EACCES;
	}
	json_object_put(o);
	return r;
}

int tunmsg_signed_message(const char *realm_id, const char *nonce, char *buf, size_t size)
{
	int n = snprintf(buf, size, "coa-relay-host-v1\n%d\n%s\n%s", TUNMSG_PROTO_V, realm_id,
			 nonce);

	if (n < 0 || (size_t)n >= size)
		return -ENOSPC;
	return n;
}

int tunmsg_parse_sig(const char *s, uint8_t sig[static 64])
{
	size_t n = strlen(s), bin = 0;

	if (n == 128 && sodium_hex2bin(sig, 64, s, n, NULL, &bin, NULL) == 0 && bin == 64)
		return 0;
	if (sodium_base642bin(sig, 64, s, n, NULL, &bin, NULL, sodium_base64_VARIANT_ORIGINAL) ==
		    0 &&
	    bin == 64)
		return 0;
	if (sodium_base642bin(sig, 64, s, n, NULL, &bin, NULL,
			      sodium_base64_VARIANT_ORIGINAL_NO_PADDING) == 0 &&
	    bin == 64)
		return 0;
	return -EINVAL;
}

int tunmsg_bin_decode(const uint8_t *buf, size_t len, enum tunmsg_bin *type, uint32_t *stream_id,
		      const uint8_t **payload, size_t *payload_len)
{
	if (len < TUNMSG_BIN_HDR)
		return -EBADMSG;
	if (buf[0] != TUNMSG_BIN_DATA && buf[0] != TUNMSG_BIN_CREDIT)
		return -EBADMSG;
	*type = (enum tunmsg_bin)buf[0];
	*stream_id = (uint32_t)buf[1] << 24 | (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 8 |
		     (uint32_t)buf[4];
	*payload = buf + TUNMSG_BIN_HDR;
	*payload_len = len - TUNMSG_BIN_HDR;
	if (*type == TUNMSG_BIN_CREDIT && *payload_len != 4)
		return -EBADMSG;
	if (*type == TUNMSG_BIN_DATA && (*payload_len == 0 || *payload_len > TUNMSG_CHUNK_MAX * 4))
		return -EBADMSG;
	return 0;
}

void tunmsg_bin_header(uint8_t hdr[static TUNMSG_BIN_HDR], enum tunmsg_bin type, uint32_t stream_id)
{
	hdr[0] = (uint8_t)type;
	hdr[1] = (uint8_t)(stream_id >> 24);
	hdr[2] = (uint8_t)(stream_id >> 16);
	hdr[3] = (uint8_t)(stream_id >> 8);
	hdr[4] = (uint8_t)stream_id;
}
