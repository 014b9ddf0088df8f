/*
 * Fuzz target for relay/relay_known: the known-players file.
 *
 * The input is the file's text, loaded into a table of 64 entries at a
 * fixed "now".
 *
 * Invariants checked:
 * - relay_known_parse returns the entry count, or -EBADMSG with the table
 *   empty and the error's line within the input's lines;
 * - what loads formats into a file that loads back to the same entries
 *   (every key found again, the same count), and formats the same again.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "relay_known.h"
#include "strbuf.h"

#define NOW (1765000000LL)
#define TTL (72LL * 3600)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct relay_known *k = relay_known_new(64, TTL), *back = relay_known_new(64, TTL);
	struct relay_known_err err;
	struct strbuf a, b;
	size_t lines = 1;
	int n, m;

	FUZZ_CHECK(k != NULL && back != NULL);
	for (size_t i = 0; i < size; i++)
		lines += data[i] == '\n';
	n = relay_known_parse(k, (const char *)data, size, NOW, &err);
	if (n < 0) {
		FUZZ_CHECK(n == -EBADMSG && relay_known_count(k) == 0);
		FUZZ_CHECK(err.line >= 0 && (size_t)err.line <= lines && err.msg[0] != '\0');
		goto out;
	}
	FUZZ_CHECK((size_t)n == relay_known_count(k) && n <= 64);
	strbuf_init(&a, 1 << 20);
	strbuf_init(&b, 1 << 20);
	relay_known_format(k, &a);
	FUZZ_CHECK(!a.bad);
	m = relay_known_parse(back, a.p, a.len, NOW, &err);
	FUZZ_CHECK(m == n);
	relay_known_format(back, &b);
	FUZZ_CHECK(a.len == b.len && memcmp(a.p, b.p, a.len) == 0);
	strbuf_release(&a);
	strbuf_release(&b);
out:
	relay_known_free(k);
	relay_known_free(back);
	return 0;
}
