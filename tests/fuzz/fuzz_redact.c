/*
 * The log's address redaction (common/log log_redact) over any text.
 * Invariants: the output is NUL-terminated within its size; never longer
 * than the input (IPv4: "47" -> "x" never grows, "4" -> "x" keeps the
 * length; IPv6: a host address written out is never shorter than its /48
 * in canonical form plus "x"); a second pass changes nothing (nothing
 * masked makes a new address: "...::x" ends in a word character); text
 * without digits comes back as it was (a global IPv6 address starts with
 * 2 or 3).
 */
#include <string.h>

#include "fuzz.h"
#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char once[4096], twice[4096];
	const char *text = (const char *)data;
	size_t n, m;
	bool digits = false;

	if (size > 2048)
		return 0;
	n = log_redact(text, size, once, sizeof(once));
	FUZZ_CHECK(n <= size && once[n] == '\0');
	m = log_redact(once, n, twice, sizeof(twice));
	FUZZ_CHECK(m == n && memcmp(once, twice, n) == 0);
	for (size_t i = 0; i < size; i++)
		digits |= data[i] >= '0' && data[i] <= '9';
	if (!digits)
		FUZZ_CHECK(n == size && memcmp(once, data, size) == 0);
	return 0;
}
