/*
 * The dual TCP link's hello (common/frame link_hello_parse): any bytes as
 * one line. Invariants: what parses has a 1..64-byte name inside the line
 * and a 24..88-byte seal; rebuilt, it parses to the same fields and fits
 * in 256 bytes; the name cut of any input is at most 64 bytes, ends on a
 * character boundary, and backs off 3 bytes at most (in bytes that are
 * not UTF-8).
 */
#include <string.h>

#include "frame.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct link_hello h, h2;
	uint8_t buf[LINK_HELLO_MAX + 1];
	size_t cut = link_name_cut((const char *)data, size);
	int n;

	FUZZ_CHECK(cut <= size && cut <= LINK_NAME_MAX);
	FUZZ_CHECK(size < LINK_NAME_MAX ? cut == size : cut + 3 >= LINK_NAME_MAX);
	/* A boundary, unless 3 steps back found none (not UTF-8). */
	FUZZ_CHECK(cut == size || (data[cut] & 0xc0) != 0x80 || cut + 3 == LINK_NAME_MAX);
	if (link_hello_parse(data, size, &h) < 0)
		return 0;
	FUZZ_CHECK(link_hello_is(data, size));
	FUZZ_CHECK(h.name_len >= 1 && h.name_len <= LINK_NAME_MAX);
	FUZZ_CHECK(h.name >= data && h.name + h.name_len <= data + size);
	FUZZ_CHECK(h.sealed_len >= LINK_SEAL_EXTRA && h.sealed_len <= LINK_SEALED_MAX);
	n = link_hello_build(buf, sizeof(buf), h.name, h.name_len, h.sealed, h.sealed_len);
	FUZZ_CHECK(n > 0 && (size_t)n <= LINK_HELLO_MAX);
	FUZZ_CHECK(link_hello_parse(buf, (size_t)n, &h2) == 0);
	FUZZ_CHECK(h2.name_len == h.name_len && memcmp(h2.name, h.name, h.name_len) == 0);
	FUZZ_CHECK(h2.sealed_len == h.sealed_len && memcmp(h2.sealed, h.sealed, h.sealed_len) == 0);
	return 0;
}
