/*
 * Fuzz target for relay_classify (relay/relay_filter.c): the verdict on
 * every client datagram.
 *
 * Invariants checked:
 * - shorter than 4 bytes is MALFORMED, no 0xff prefix is GAME, and cmd is
 *   "" for both;
 * - for out-of-band packets cmd is q3_oob_command's token (truncated to
 *   the caller's buffer, always NUL-terminated, nothing written past it);
 * - the verdict depends on the packet only, never on the size of the
 *   caller's cmd buffer;
 * - it agrees with the full tokenizer: PB_ prefix (raw, case-sensitive)
 *   passes; otherwise argv[0] of q3_oob_tokenize decides (getstatus and
 *   getinfo are queries, getchallenge and connect pass, the rest, rcon
 *   first, is filtered).
 */
#include <string.h>

#include "fuzz.h"
#include "q3.h"
#include "relay.h"

static enum relay_verdict expected(const uint8_t *data, size_t size)
{
	struct q3_args args;
	const char *c;

	if (size < Q3_OOB_PREFIX_LEN)
		return RELAY_VERDICT_MALFORMED;
	if (!q3_is_oob(data, size))
		return RELAY_VERDICT_GAME;
	if (size >= Q3_OOB_PREFIX_LEN + 3 && memcmp(data + Q3_OOB_PREFIX_LEN, "PB_", 3) == 0)
		return RELAY_VERDICT_PASS;
	FUZZ_CHECK(q3_oob_tokenize(data, size, &args) >= 0);
	c = q3_argv(&args, 0);
	if (q3_cmd_eq(c, "getstatus") || q3_cmd_eq(c, "getinfo"))
		return RELAY_VERDICT_QUERY;
	if (q3_cmd_eq(c, "getchallenge") || q3_cmd_eq(c, "connect"))
		return RELAY_VERDICT_PASS;
	return RELAY_VERDICT_FILTERED;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* 64 is the relay's own buffer; the others probe truncation. */
	static const size_t sizes[] = {1, 4, 8, 13, 64, Q3_MAX_STRING_CHARS};
	enum relay_verdict want = expected(data, size);
	char cmd[Q3_MAX_STRING_CHARS + 1], tok[Q3_MAX_STRING_CHARS + 1];

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k];
		enum relay_verdict v;

		memset(cmd, 'Z', sizeof(cmd));
		v = relay_classify(data, size, cmd, n);
		FUZZ_CHECK(v == want);
		FUZZ_CHECK(cmd[n] == 'Z');
		FUZZ_CHECK(strnlen(cmd, n) < n);
		if (v == RELAY_VERDICT_MALFORMED || v == RELAY_VERDICT_GAME) {
			FUZZ_CHECK(cmd[0] == '\0');
		} else {
			FUZZ_CHECK(q3_oob_command(data, size, tok, n) >= 0);
			FUZZ_CHECK(strcmp(cmd, tok) == 0);
		}
	}
	return 0;
}
