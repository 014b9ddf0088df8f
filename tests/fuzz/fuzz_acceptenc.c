/*
 * Fuzz target for common/acceptenc: the Accept-Encoding header value.
 *
 * The whole input is the header's value (no NUL needed, NULs are bytes).
 *
 * Invariants checked:
 * - every q-value is -1 or 0..1000, and a refused parse leaves all three
 *   at -1 (the "no header" answer);
 * - a list may end in an empty element: the value with ", " appended
 *   parses to the same result (when it parsed and was below the item cap);
 * - acceptenc_pick returns one of the three codings and gzip only when its
 *   effective q is above 0.
 */
#include <errno.h>
#include <string.h>

#include "acceptenc.h"
#include "fuzz.h"

static int in_range(int q)
{
	return q == -1 || (q >= 0 && q <= 1000);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char buf[8192 + 2];
	struct acceptenc a, b;
	enum acceptenc_coding c;
	int r, r2;

	if (size > 8192)
		return 0;
	r = acceptenc_parse((const char *)data, size, &a);
	FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -E2BIG);
	FUZZ_CHECK(in_range(a.gzip) && in_range(a.identity) && in_range(a.any));
	if (r < 0) {
		FUZZ_CHECK(a.gzip == -1 && a.identity == -1 && a.any == -1);
		return 0;
	}
	memcpy(buf, data, size);
	memcpy(buf + size, ", ", 2);
	r2 = acceptenc_parse(buf, size + 2, &b);
	FUZZ_CHECK(r2 == 0);
	FUZZ_CHECK(a.gzip == b.gzip && a.identity == b.identity && a.any == b.any);
	c = acceptenc_pick(&a);
	FUZZ_CHECK(c == ACCEPTENC_NONE || c == ACCEPTENC_IDENTITY || c == ACCEPTENC_GZIP);
	if (c == ACCEPTENC_GZIP)
		FUZZ_CHECK(a.gzip > 0 || (a.gzip == -1 && a.any > 0));
	return 0;
}
