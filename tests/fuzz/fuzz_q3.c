/*
 * Fuzz target for common/q3: the out-of-band command line as the engine
 * reads it (q3_oob_tokenize, q3_oob_command, q3_argv).
 *
 * Beyond "no crash", it checks what callers rely on:
 * - a non-OOB buffer is refused by both entry points with -EBADMSG;
 * - argc is within 0..Q3_MAX_TOKENS; every argv offset lies in text and
 *   its token is NUL-terminated there, tokens do not overlap, and hold
 *   only bytes 1..127 other than '%' (MSG_ReadStringLine's translation);
 * - consumed <= len - 4 and <= 1023, and the line stopped for a reason
 *   (end of packet, '\n', NUL, or the 1023-character cap);
 * - q3_oob_command's token is q3_argv(&args, 0), truncated to the buffer,
 *   and its return value is the token's length;
 * - re-quoting every token and tokenizing again gives the same argv.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "q3.h"

/* Joins the tokens as "tok" "tok" ...; false when the line would not fit
 * in one engine line (1023 characters). */
static bool requote(const struct q3_args *a, uint8_t *pkt, size_t size, size_t *len)
{
	size_t o = Q3_OOB_PREFIX_LEN;

	memset(pkt, 0xff, Q3_OOB_PREFIX_LEN);
	for (int i = 0; i < a->argc; i++) {
		const char *t = q3_argv(a, i);
		size_t tl = strlen(t);

		/* Separator, two quotes, the token. */
		if (tl + 3 > size - o || o - Q3_OOB_PREFIX_LEN + tl + 3 > Q3_MAX_STRING_CHARS - 1)
			return false;
		if (i > 0)
			pkt[o++] = ' ';
		pkt[o++] = '"';
		memcpy(pkt + o, t, tl);
		o += tl;
		pkt[o++] = '"';
	}
	*len = o;
	return true;
}

static void check_args(const uint8_t *data, size_t size, const struct q3_args *a)
{
	size_t line = size - Q3_OOB_PREFIX_LEN;
	size_t next = 0;

	FUZZ_CHECK(a->argc >= 0 && a->argc <= Q3_MAX_TOKENS);
	FUZZ_CHECK(a->consumed <= line);
	FUZZ_CHECK(a->consumed <= Q3_MAX_STRING_CHARS - 1);
	if (a->consumed < line) {
		uint8_t last = a->consumed > 0 ? data[Q3_OOB_PREFIX_LEN + a->consumed - 1] : 0;

		FUZZ_CHECK(a->consumed == Q3_MAX_STRING_CHARS - 1 || last == '\n' || last == '\0');
	}
	for (int i = 0; i < a->argc; i++) {
		size_t off = a->argv[i];
		const char *nul;

		FUZZ_CHECK(off < sizeof(a->text));
		/* Tokens are laid out one after the other, never overlapping. */
		FUZZ_CHECK(off >= next);
		nul = memchr(a->text + off, '\0', sizeof(a->text) - off);
		FUZZ_CHECK(nul != NULL);
		FUZZ_CHECK(q3_argv(a, i) == a->text + off);
		for (const char *c = a->text + off; c < nul; c++) {
			unsigned char u = (unsigned char)*c;

			FUZZ_CHECK(u >= 1 && u <= 127 && u != '%' && u != '\n' && u != '"');
		}
		next = (size_t)(nul - a->text) + 1;
	}
	FUZZ_CHECK(strcmp(q3_argv(a, -1), "") == 0);
	FUZZ_CHECK(strcmp(q3_argv(a, a->argc), "") == 0);
}

static void check_command(const uint8_t *data, size_t size, const struct q3_args *a)
{
	/* Sizes around the interesting edges: nothing, one char, the relay's
	 * 64-byte buffer, a full line. */
	static const size_t sizes[] = {1, 2, 8, 64, Q3_MAX_STRING_CHARS};
	const char *first = q3_argv(a, 0);
	size_t flen = strlen(first);
	char tok[Q3_MAX_STRING_CHARS + 1];

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t want = flen < sizes[k] - 1 ? flen : sizes[k] - 1;
		int r;

		memset(tok, 'Z', sizeof(tok));
		r = q3_oob_command(data, size, tok, sizes[k]);
		FUZZ_CHECK(r >= 0);
		FUZZ_CHECK((size_t)r == want);
		FUZZ_CHECK(tok[want] == '\0');
		FUZZ_CHECK(memcmp(tok, first, want) == 0);
		/* Nothing written past the caller's buffer. */
		FUZZ_CHECK(tok[sizes[k]] == 'Z');
		if (flen < sizes[k]) {
			FUZZ_CHECK(strcmp(tok, first) == 0);
			FUZZ_CHECK(q3_cmd_eq(tok, first));
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct q3_args args, again;
	char tok[8];
	uint8_t pkt[Q3_OOB_PREFIX_LEN + Q3_MAX_STRING_CHARS];
	size_t plen;
	int r;

	r = q3_oob_tokenize(data, size, &args);
	if (!q3_is_oob(data, size)) {
		FUZZ_CHECK(r == -EBADMSG);
		FUZZ_CHECK(q3_oob_command(data, size, tok, sizeof(tok)) == -EBADMSG);
		return 0;
	}
	FUZZ_CHECK(r >= 0 && r == args.argc);
	check_args(data, size, &args);
	check_command(data, size, &args);

	if (requote(&args, pkt, sizeof(pkt), &plen)) {
		FUZZ_CHECK(q3_oob_tokenize(pkt, plen, &again) == args.argc);
		for (int i = 0; i < args.argc; i++)
			FUZZ_CHECK(strcmp(q3_argv(&args, i), q3_argv(&again, i)) == 0);
	}

	/* The builder and the recogniser agree. */
	if (size - Q3_OOB_PREFIX_LEN <= Q3_MAX_STRING_CHARS) {
		r = q3_oob_build(pkt, sizeof(pkt), (const char *)data + Q3_OOB_PREFIX_LEN,
				 size - Q3_OOB_PREFIX_LEN);
		FUZZ_CHECK(r == (int)size && memcmp(pkt, data, size) == 0);
		FUZZ_CHECK(q3_oob_build(pkt, (size_t)r - 1, (const char *)data + Q3_OOB_PREFIX_LEN,
					size - Q3_OOB_PREFIX_LEN) == -EMSGSIZE);
	}
	return 0;
}
