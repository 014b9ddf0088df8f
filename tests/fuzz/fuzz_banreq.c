/*
 * Fuzz target for banlist_parse_request: the PUT /bans/{ip} body
 * {"reason":"...","duration":N}.
 *
 * Invariants checked:
 * - the result is 0 or -EBADMSG, and err is a non-empty message on error;
 * - on success the reason is NUL-terminated within BANLIST_REASON_MAX bytes
 *   without control characters, and the duration is 0 or
 *   1..BANLIST_MAX_DURATION;
 * - what the parser accepts, banlist_put accepts (the API handler relies
 *   on it: a 400 is the parser's job, not the table's);
 * - round trip: the body written back with json-c parses to the same
 *   reason and duration.
 */
#include <errno.h>
#include <json-c/json.h>
#include <string.h>

#include "banlist.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char reason[BANLIST_REASON_MAX + 1], reason2[BANLIST_REASON_MAX + 1], err[256];
	long long duration, duration2;
	struct json_object *o;
	struct banlist *bl;
	struct addr_ip ip = {.b = {[10] = 0xff, [11] = 0xff, 203, 0, 113, 7}};
	const char *body;
	size_t blen;
	int r;

	/* Poison the outputs so "set on success" is really checked. */
	memset(reason, 'X', sizeof(reason));
	duration = -1;
	err[0] = '\0';
	r = banlist_parse_request((const char *)data, size, reason, &duration, err, sizeof(err));
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	if (r < 0) {
		FUZZ_CHECK(err[0] != '\0' && strnlen(err, sizeof(err)) < sizeof(err));
		return 0;
	}
	FUZZ_CHECK(strnlen(reason, sizeof(reason)) <= BANLIST_REASON_MAX);
	for (size_t i = 0; reason[i] != '\0'; i++) {
		unsigned char c = (unsigned char)reason[i];

		FUZZ_CHECK(c >= 0x20 && c != 0x7f);
	}
	FUZZ_CHECK(duration == 0 || (duration >= 1 && duration <= BANLIST_MAX_DURATION));

	bl = banlist_new(1);
	FUZZ_CHECK(bl != NULL);
	FUZZ_CHECK(banlist_put(bl, &ip, reason, duration, 1764500000LL) == 1);
	banlist_free(bl);

	o = json_object_new_object();
	FUZZ_CHECK(o != NULL);
	json_object_object_add(o, "reason", json_object_new_string(reason));
	if (duration > 0)
		json_object_object_add(o, "duration", json_object_new_int64(duration));
	body = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &blen);
	FUZZ_CHECK(body != NULL);
	r = banlist_parse_request(body, blen, reason2, &duration2, err, sizeof(err));
	if (r != 0)
		fprintf(stderr, "reparse: %s\n%s\n", err, body);
	FUZZ_CHECK(r == 0);
	FUZZ_CHECK(strcmp(reason, reason2) == 0 && duration == duration2);
	json_object_put(o);
	return 0;
}
