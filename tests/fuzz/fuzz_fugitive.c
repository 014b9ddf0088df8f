/*
 * Fuzz target for the Fugitive3D codec (master/master_fugitive.h, linked
 * alone from master_fugitive_codec.c): the whole input as a request body
 * (master_fugitive_parse_body) and as a server id
 * (master_fugitive_parse_id), then validation and the JSON writer.
 *
 * Invariants checked:
 * - the results are 0 or -EBADMSG (body) and 0 or -EINVAL (id);
 * - an accepted id with an IPv4 address prints back ("a.b.c.d:port") to the
 *   same id;
 * - a kept name (<= MASTER_FUGITIVE_NAME_MAX bytes) is UTF-8 without white
 *   space at either end (invalid input bytes were replaced, spaces trimmed),
 *   and master_fugitive_name_ok agrees with validation about it;
 * - master_fugitive_validate returns NULL or one of the service's three
 *   messages;
 * - round trip: the decoded fields written back as JSON (the name through
 *   master_fugitive_json_string, as the list writes it) decode to the same
 *   values.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fuzz.h"
#include "master_fugitive.h"
#include "strbuf.h"

static void check_id(const uint8_t *data, size_t size)
{
	struct master_fugitive_id id, again;
	char text[64];
	int r, n;

	r = master_fugitive_parse_id((const char *)data, size, &id);
	FUZZ_CHECK(r == 0 || r == -EINVAL);
	if (r < 0 || !id.has_ip || !master_fugitive_ip_is_v4(&id.ip))
		return;
	n = snprintf(text, sizeof(text), "%u.%u.%u.%u:%lld", id.ip.b[12], id.ip.b[13], id.ip.b[14],
		     id.ip.b[15], id.port);
	FUZZ_CHECK(n > 0 && (size_t)n < sizeof(text));
	FUZZ_CHECK(master_fugitive_parse_id(text, (size_t)n, &again) == 0);
	FUZZ_CHECK(again.has_ip && memcmp(again.ip.b, id.ip.b, 16) == 0 && again.port == id.port);
}

static void check_body(const uint8_t *data, size_t size)
{
	struct master_fugitive_body b, b2;
	struct master_fugitive_id id;
	struct strbuf sb;
	const char *msg;
	int r;

	memset(&b, 0x5a, sizeof(b));
	r = master_fugitive_parse_body((const char *)data, size, &b);
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	if (r < 0)
		return;
	FUZZ_CHECK(master_fugitive_parse_id("203.0.113.4:45677", 17, &id) == 0);
	msg = master_fugitive_validate(&id, &b);
	FUZZ_CHECK(msg == NULL || strcmp(msg, "name length must be within range of 3-32") == 0);
	FUZZ_CHECK((msg == NULL) == (b.name_len >= MASTER_FUGITIVE_NAME_MIN &&
				     b.name_len <= MASTER_FUGITIVE_NAME_MAX));
	if (b.name_len > MASTER_FUGITIVE_NAME_MAX)
		b.name_len = 0; /* the bytes are not kept; round-trip the rest */
	FUZZ_CHECK(master_fugitive_utf8_valid(b.name, b.name_len));
	FUZZ_CHECK(
		master_fugitive_name_ok(b.name, b.name_len) ==
		(b.name_len >= MASTER_FUGITIVE_NAME_MIN && b.name_len <= MASTER_FUGITIVE_NAME_MAX));
	if (b.name_len > 0) {
		unsigned char first = (unsigned char)b.name[0];
		unsigned char last = (unsigned char)b.name[b.name_len - 1];

		FUZZ_CHECK(first != ' ' && first != '\t' && first != '\n' && first != '\r' &&
			   first != '\v' && first != '\f');
		FUZZ_CHECK(last != ' ' && last != '\t' && last != '\n' && last != '\r' &&
			   last != '\v' && last != '\f');
	}

	strbuf_init(&sb, 4096);
	strbuf_printf(&sb,
		      "{\"game_version\":%lld,\"current_players\":%lld,\"max_players\":%lld,"
		      "\"is_joinable\":%s,\"name\":",
		      b.game_version, b.current_players, b.max_players,
		      b.is_joinable ? "true" : "false");
	master_fugitive_json_string(&sb, b.name, b.name_len);
	strbuf_append(&sb, "}", 1);
	FUZZ_CHECK(!sb.bad);
	r = master_fugitive_parse_body(sb.p, sb.len, &b2);
	if (r != 0)
		fprintf(stderr, "reparse failed: %.*s\n", (int)sb.len, sb.p);
	FUZZ_CHECK(r == 0);
	FUZZ_CHECK(b2.name_len == b.name_len && memcmp(b2.name, b.name, b.name_len) == 0);
	FUZZ_CHECK(b2.game_version == b.game_version && b2.current_players == b.current_players &&
		   b2.max_players == b.max_players && b2.is_joinable == b.is_joinable);
	strbuf_release(&sb);
}

/* The input as a name read back from a snapshot. */
static void check_name(const uint8_t *data, size_t size)
{
	if (!master_fugitive_name_ok((const char *)data, size))
		return;
	FUZZ_CHECK(size >= MASTER_FUGITIVE_NAME_MIN && size <= MASTER_FUGITIVE_NAME_MAX);
	FUZZ_CHECK(master_fugitive_utf8_valid((const char *)data, size));
	FUZZ_CHECK(data[0] != ' ' && data[size - 1] != ' ');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_id(data, size);
	check_body(data, size);
	check_name(data, size);
	return 0;
}
