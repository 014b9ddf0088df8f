/*
 * The bulk TCP hello (common/frame bulk_hello_parse): any bytes as one line.
 * Invariants: what parses rebuilds into a line that parses to the same
 * fields, no longer than the cap; the name never exceeds 64 bytes.
 */
#include <string.h>

#include "frame.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct bulk_hello h, h2;
	uint8_t buf[BULK_HELLO_MAX + 1];
	int n;

	if (bulk_hello_parse(data, size, &h) < 0)
		return 0;
	FUZZ_CHECK(h.name_len >= 1 && h.name_len <= BULK_NAME_MAX);
	FUZZ_CHECK(strlen(h.token) == BULK_TOKEN_LEN);
	n = bulk_hello_build(buf, sizeof(buf), h.role, h.sid, h.token, h.name);
	FUZZ_CHECK(n > 0 && (size_t)n <= BULK_HELLO_MAX);
	FUZZ_CHECK(bulk_hello_parse(buf, (size_t)n, &h2) == 0);
	FUZZ_CHECK(h2.role == h.role && h2.sid == h.sid && strcmp(h2.token, h.token) == 0);
	FUZZ_CHECK(h2.name_len == h.name_len && memcmp(h2.name, h.name, h.name_len) == 0);
	return 0;
}
