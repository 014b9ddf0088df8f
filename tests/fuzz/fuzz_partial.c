/*
 * The resume journal's parser (lobby/lobby_partial.c): any bytes through
 * lobby_partial_parse. Invariants: an accepted journal names one to three
 * whitelisted files whose sizes add up to its total, a chunk of 1..65535,
 * ranges non-empty, ascending, disjoint and within the chunk count; and it
 * formats to a text that parses again to the same journal and formats to
 * the same bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "lobby_partial.h"
#include "strbuf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lobby_partial *p = malloc(sizeof(*p)), *q = malloc(sizeof(*q));
	struct strbuf a, b;
	uint64_t sum = 0, nchunks;

	if (p == NULL || q == NULL)
		goto out;
	if (lobby_partial_parse((const char *)data, size, p) < 0)
		goto out;
	FUZZ_CHECK(p->n >= 1 && p->n <= LOBBY_SAVE_FILES);
	FUZZ_CHECK(p->chunk >= 1 && p->chunk <= 65535);
	for (size_t i = 0; i < p->n; i++) {
		FUZZ_CHECK(lobby_save_allowed(p->f[i].wire) >= 0);
		sum += p->f[i].size;
	}
	FUZZ_CHECK(sum == p->total);
	nchunks = p->total / p->chunk + (p->total % p->chunk != 0);
	for (size_t i = 0; i < p->nranges; i++) {
		FUZZ_CHECK(p->ranges[i][0] < p->ranges[i][1] && p->ranges[i][1] <= nchunks);
		FUZZ_CHECK(i == 0 || p->ranges[i][0] >= p->ranges[i - 1][1]);
	}
	strbuf_init(&a, 2 * LOBBY_PARTIAL_MAX_BYTES);
	lobby_partial_format(p, &a);
	FUZZ_CHECK(!a.bad);
	FUZZ_CHECK(lobby_partial_parse(a.p, a.len, q) == 0);
	FUZZ_CHECK(q->n == p->n && q->total == p->total && q->nranges == p->nranges);
	strbuf_init(&b, 2 * LOBBY_PARTIAL_MAX_BYTES);
	lobby_partial_format(q, &b);
	FUZZ_CHECK(b.len == a.len && memcmp(a.p, b.p, a.len) == 0);
	strbuf_release(&b);
	strbuf_release(&a);
out:
	free(q);
	free(p);
	return 0;
}
