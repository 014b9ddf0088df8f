/*
 * Fuzz target for the shared registry's codec (master/master_redis.h,
 * linked alone from master_redis_codec.c): the whole input as what a
 * hostile Redis can hand a master - a channel message, a registry
 * envelope, a knock note, a relay allocation, a key name from SCAN - and as
 * a --redis URL.
 *
 * Invariants checked:
 * - every decoder returns 0 or -EBADMSG (the URL 0 or -EINVAL);
 * - what a decoder accepts is within its bounds: node names pass
 *   master_redis_name_ok, hex fields are lowercase hex of even length,
 *   relay ports are 1..65535 and ids 32 hex digits, blobs 1..1024 bytes,
 *   note times finite and positive, envelope entries objects;
 * - round trip: an accepted note or relay value, encoded again, decodes
 *   to the same fields.
 */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "master_redis.h"
#include "strbuf.h"

static int hex_ok(const char *s)
{
	size_t n = strlen(s);

	return n % 2 == 0 && strspn(s, "0123456789abcdef") == n;
}

static void check_relay(const struct master_redis_relay *r)
{
	FUZZ_CHECK(r->port >= 1);
	FUZZ_CHECK(strlen(r->id) == 32 && hex_ok(r->id));
	FUZZ_CHECK(r->ip[0] != '\0');
}

static void check_msg(const uint8_t *data, size_t size)
{
	struct master_redis_msg m;
	int r = master_redis_msg_parse((const char *)data, size, &m);

	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	if (r < 0)
		return;
	FUZZ_CHECK(master_redis_name_ok(m.node, strlen(m.node)));
	FUZZ_CHECK(hex_ok(m.hex) && m.hex[0] != '\0');
	if (m.op == MASTER_REDIS_OP_SET || m.op == MASTER_REDIS_OP_DEL)
		FUZZ_CHECK(m.kind[0] != '\0');
	else
		FUZZ_CHECK(m.op == MASTER_REDIS_OP_KNOCK || m.op == MASTER_REDIS_OP_RELAY ||
			   m.op == MASTER_REDIS_OP_RELAY_DEL);
}

static void check_values(const uint8_t *data, size_t size)
{
	struct master_redis_env env;
	struct master_redis_note note, again;
	struct master_redis_relay rel, rel2;
	struct json_object *root;
	const char *why;
	struct strbuf b;
	int r;

	r = master_redis_env_decode((const char *)data, size, &root, &env, &why);
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	if (r == 0) {
		FUZZ_CHECK(json_object_is_type(env.entry, json_type_object));
		FUZZ_CHECK(master_redis_name_ok(env.node, strlen(env.node)));
		FUZZ_CHECK(env.seen_ms >= 1);
		json_object_put(root);
	} else {
		FUZZ_CHECK(root == NULL && why != NULL);
	}

	r = master_redis_note_decode((const char *)data, size, &note, &why);
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	if (r == 0) {
		size_t n = strlen(note.blob);

		FUZZ_CHECK(n >= 1 && n <= MASTER_REDIS_BLOB_MAX);
		FUZZ_CHECK(isfinite(note.t) && note.t > 0);
		if (note.has_relay)
			check_relay(&note.relay);
		strbuf_init(&b, MASTER_REDIS_VALUE_MAX);
		FUZZ_CHECK(master_redis_note_encode(&note, &b) == 0);
		FUZZ_CHECK(master_redis_note_decode(b.p, b.len, &again, &why) == 0);
		FUZZ_CHECK(again.t == note.t && strcmp(again.blob, note.blob) == 0 &&
			   again.has_relay == note.has_relay && strcmp(again.node, note.node) == 0);
		if (note.has_relay)
			FUZZ_CHECK(again.relay.port == note.relay.port &&
				   strcmp(again.relay.ip, note.relay.ip) == 0 &&
				   strcmp(again.relay.id, note.relay.id) == 0);
		strbuf_release(&b);
	}

	r = master_redis_relay_decode((const char *)data, size, &rel, &why);
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	if (r == 0) {
		check_relay(&rel);
		strbuf_init(&b, MASTER_REDIS_VALUE_MAX);
		FUZZ_CHECK(master_redis_relay_encode(&rel, &b) == 0);
		FUZZ_CHECK(master_redis_relay_decode(b.p, b.len, &rel2, &why) == 0);
		FUZZ_CHECK(memcmp(&rel, &rel2, sizeof(rel)) == 0);
		strbuf_release(&b);
	}
}

static void check_key(const uint8_t *data, size_t size)
{
	struct master_redis_key k;
	int r = master_redis_key_parse("rally", (const char *)data, size, &k);

	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	if (r < 0)
		return;
	FUZZ_CHECK(hex_ok(k.hex) && k.hex[0] != '\0');
	if (k.type == MASTER_REDIS_KEY_REG)
		FUZZ_CHECK(k.kind[0] != '\0');
	else if (k.type == MASTER_REDIS_KEY_KNOCK)
		FUZZ_CHECK(strlen(k.hex) == MASTER_REDIS_TAG_LEN);
	else
		FUZZ_CHECK(k.type == MASTER_REDIS_KEY_RELAY && strlen(k.hex) == 64);
}

static void check_url(const uint8_t *data, size_t size)
{
	char s[512], err[160];
	struct master_redis_url u;
	int r;

	if (size >= sizeof(s) || memchr(data, 0, size) != NULL)
		return;
	memcpy(s, data, size);
	s[size] = '\0';
	r = master_redis_url_parse(s, &u, err, sizeof(err));
	FUZZ_CHECK(r == 0 || r == -EINVAL);
	if (r < 0)
		return;
	if (u.transport == MASTER_REDIS_UNIX) {
		FUZZ_CHECK(u.path[0] == '/');
	} else {
		FUZZ_CHECK(u.host[0] != '\0' && u.port >= 1);
		FUZZ_CHECK(strchr(u.user, ':') == NULL);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_msg(data, size);
	check_values(data, size);
	check_key(data, size);
	check_url(data, size);
	return 0;
}
