#include "relay_tunmsg.h"

#include <errno.h>
#include <json-c/json.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "jsonp.h"
#include "relay_tundgram.h"
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

/* Standard base64, padded or not, into buf. libsodium's decoder is
 * constant-time and five times slower; stream bytes are not secrets to
 * hide from timing, so OpenSSL's table decoder does the bulk. */
static int b64_decode(const char *s, size_t n, uint8_t *buf, size_t size, size_t *out)
{
	size_t body, rem = n % 4, pad = 0, len;
	char tail[4];
	uint8_t last[3];

	*out = 0;
	if (n == 0)
		return 0;
	if (rem == 1)
		return -EBADMSG;
	if (rem == 0) {
		pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
		body = n / 4 - 1;
		memcpy(tail, s + n - 4, 4);
	} else {
		body = n / 4;
		memcpy(tail, s + body * 4, rem);
		memset(tail + rem, '=', 4 - rem);
		pad = 4 - rem;
	}
	len = body * 3 + 3 - pad;
	if (len > size)
		return -EMSGSIZE;
	if (body * 4 > INT32_MAX || memchr(s, '=', body * 4) != NULL)
		return -EBADMSG;
	if (body > 0 &&
	    EVP_DecodeBlock(buf, (const unsigned char *)s, (int)(body * 4)) != (int)(body * 3))
		return -EBADMSG;
	if ((pad == 2 && tail[2] != '=') || (pad >= 1 && tail[3] != '=') ||
	    (pad < 2 && tail[2] == '=') ||
	    EVP_DecodeBlock(last, (const unsigned char *)tail, 4) != 3)
		return -EBADMSG;
	memcpy(buf + body * 3, last, 3 - pad);
	*out = len;
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
	{
		int r = b64_decode(s, n, buf, size, &bin);

		if (r < 0)
			return r;
	}
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
		if (json_object_object_get_ex(o, "udp_id", &t) &&
		    get_uint(o, "udp_id", UINT64_MAX, &m->x_udp_id) < 0)
			return -EBADMSG;
		if (get_str(o, "data_token", m->x_data_token, TUNMSG_ID_MAX, false) < 0 ||
		    get_str(o, "udp_sig", m->x_udp_sig, TUNMSG_SIG_HEX, false) < 0)
			return -EBADMSG;
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

/*
 * Data messages are nearly all the traffic, and both coa (serde, fields in
 * declaration order) and we write them exactly as
 * {"cmd":"data","stream_id":N,"chunk":"BASE64"}: that shape is read
 * directly; anything else (spaces, other order, escapes) goes through
 * json-c like every other message. 1 read, 0 not that shape, < 0 bad.
 */
static int decode_data_fast(const char *json, size_t len, struct tunmsg *m, uint8_t *buf,
			    size_t size)
{
	static const char head[] = "{\"cmd\":\"data\",\"stream_id\":";
	static const char mid[] = ",\"chunk\":\"";
	const char *p = json, *end = json + len, *b;
	uint64_t id = 0;
	size_t n, digits = 0;

	if (len < sizeof(head) - 1 || memcmp(p, head, sizeof(head) - 1) != 0)
		return 0;
	p += sizeof(head) - 1;
	while (p < end && *p >= '0' && *p <= '9' && digits < 11) {
		id = id * 10 + (uint64_t)(*p++ - '0');
		digits++;
	}
	if (digits == 0 || id > UINT32_MAX || (digits > 1 && p[-(long)digits] == '0'))
		return 0;
	if ((size_t)(end - p) < sizeof(mid) - 1 + 2 || memcmp(p, mid, sizeof(mid) - 1) != 0)
		return 0;
	p += sizeof(mid) - 1;
	b = p;
	if (end - b < 2 || end[-2] != '"' || end[-1] != '}')
		return 0;
	n = (size_t)(end - 2 - b);
	for (size_t i = 0; i < n; i++) {
		char c = b[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '+' || c == '/' || c == '='))
			return 0; /* json-c decides (an escape, a quote inside) */
	}
	m->cmd = TUNMSG_DATA;
	m->stream_id = (uint32_t)id;
	{
		int r = b64_decode(b, n, buf, size, &m->chunk_len);

		if (r < 0) {
			m->cmd = TUNMSG_UNKNOWN;
			m->chunk_len = 0;
			return r;
		}
	}
	m->chunk = buf;
	return 1;
}

int tunmsg_decode(const char *json, size_t len, struct tunmsg *m, uint8_t *chunkbuf,
		  size_t chunksize)
{
	struct json_object *o;
	int r;

	memset(m, 0, sizeof(*m));
	r = decode_data_fast(json, len, m, chunkbuf, chunksize);
	if (r != 0)
		return r < 0 ? r : 0;
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
	{
		int len = EVP_EncodeBlock((unsigned char *)tmp, p, (int)n);

		strbuf_append(out, ",\"chunk\":\"", 10);
		strbuf_append(out, tmp, (size_t)len);
		strbuf_append(out, "\"", 1);
	}
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
		if (m->x_udp_id != 0)
			strbuf_printf(out, ",\"udp_id\":%llu", (unsigned long long)m->x_udp_id);
		if (m->x_udp_key[0] != '\0')
			put_str(out, "udp_key", m->x_udp_key);
		if (m->x_udp_sig[0] != '\0')
			put_str(out, "udp_sig", m->x_udp_sig);
		if (m->x_data_token[0] != '\0')
			put_str(out, "data_token", m->x_data_token);
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

int tunmsg_udp_key_message(const char *realm_id, const char *nonce, const char *relay_key,
			   const char *agent_key, char *buf, size_t size)
{
	int n = snprintf(buf, size, "rally-udp-key-v1\n%s\n%s\n%s\n%s", realm_id, nonce, relay_key,
			 agent_key);

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
	if (buf[0] < TUNMSG_BIN_DATA || buf[0] > TUNMSG_BIN_DGRAM_PEER)
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
	if (*type == TUNMSG_BIN_DGRAM && *payload_len > 65535)
		return -EBADMSG;
	if (*type == TUNMSG_BIN_DGRAM_PEER && *payload_len > 65535 + TUNDGRAM_PEER_MAX)
		return -EBADMSG;
	if ((*type == TUNMSG_BIN_CLOSE || *type == TUNMSG_BIN_RESET) && *payload_len != 0)
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
