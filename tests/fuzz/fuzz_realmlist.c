/*
 * Fuzz target for the auth stream framer and REALM_LIST rewriter
 * (common/realmlist).
 *
 * Input: byte 0 picks the new address (bits 0-1: 3 bytes, 23 bytes, 255
 * bytes) and the largest chunk (bits 2-3: 1, 3, 64, 1500 bytes); byte 1
 * seeds the chunk lengths; the rest is what the auth server sends.
 *
 * Invariants checked:
 * - chunking does not matter: the stream fed in one piece and in chunks
 *   gives the same bytes and counters, and after each chunk the output so
 *   far is a prefix of the whole;
 * - nothing rewritten, the output is the input; otherwise it is at most
 *   the input plus the new address's length per rewrite;
 * - at most REALMLIST_MSG_MAX bytes are held, and the flush after the
 *   last feed hands over exactly realmlist_pending() bytes, then holds
 *   nothing; desync counts at most once;
 * - realmlist_rewrite() on the stream as one message returns its length
 *   or -EBADMSG; a rewrite reparses, rewriting it again changes nothing,
 *   and it is what the framer sends for the same message; a malformed
 *   message the framer can frame goes out untouched, counted.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "realmlist.h"
#include "strbuf.h"

#define OUT_MAX (16 * 1024 * 1024)

static const size_t chunk_max[] = {1, 3, 64, 1500};

struct run {
	struct strbuf out;
	struct realmlist_stats st;
};

static uint32_t next(uint32_t *x)
{
	/* xorshift32; never 0 from a nonzero seed. */
	*x ^= *x << 13;
	*x ^= *x >> 17;
	*x ^= *x << 5;
	return *x;
}

/* Feeds (in, len) in chunks of 1..max bytes (max 0: in one piece),
 * checking the held bytes and, when whole is given, that the output stays
 * a prefix of it. */
static void feed(struct run *r, const char *addr, const uint8_t *in, size_t len, size_t max,
		 uint32_t seed, const struct strbuf *whole)
{
	struct realmlist *rl = realmlist_new(addr);
	size_t at = 0, held, before;

	FUZZ_CHECK(rl != NULL);
	strbuf_init(&r->out, OUT_MAX);
	while (at < len) {
		size_t k = max == 0 ? len - at : 1 + next(&seed) % max;

		if (k > len - at)
			k = len - at;
		FUZZ_CHECK(realmlist_feed(rl, in + at, k, &r->out) == 0);
		at += k;
		FUZZ_CHECK(realmlist_pending(rl) <= REALMLIST_MSG_MAX);
		if (whole != NULL)
			FUZZ_CHECK(
				r->out.len <= whole->len &&
				(r->out.len == 0 || memcmp(r->out.p, whole->p, r->out.len) == 0));
	}
	held = realmlist_pending(rl);
	before = r->out.len;
	FUZZ_CHECK(realmlist_flush(rl, &r->out) == 0);
	FUZZ_CHECK(r->out.len == before + held);
	FUZZ_CHECK(realmlist_pending(rl) == 0);
	r->st = *realmlist_stats(rl);
	FUZZ_CHECK(r->st.desync <= 1);
	realmlist_free(rl);
}

static bool same(const struct strbuf *b, const uint8_t *p, size_t n)
{
	return b->len == n && (n == 0 || memcmp(b->p, p, n) == 0);
}

static void check_rewrite(const uint8_t *in, size_t len, const char *addr, size_t alen,
			  const struct run *one)
{
	size_t cap = len + REALMLIST_ADDR_MAX;
	uint8_t *out = malloc(cap + 1), *again = malloc(cap + REALMLIST_ADDR_MAX + 1);
	int ret, ret2;

	FUZZ_CHECK(out != NULL && again != NULL);
	ret = realmlist_rewrite(in, len, addr, out, cap);
	FUZZ_CHECK(ret >= 0 || ret == -EBADMSG);
	if (ret >= 0) {
		FUZZ_CHECK((size_t)ret <= len + alen);
		ret2 = realmlist_rewrite(out, (size_t)ret, addr, again, cap + REALMLIST_ADDR_MAX);
		FUZZ_CHECK(ret2 == ret && memcmp(again, out, (size_t)ret) == 0);
		/* The whole input is this one message, so it is all the framer
		 * sent: rewritten, or untouched for a list of 0 realms. */
		FUZZ_CHECK(same(&one->out, out, (size_t)ret));
		FUZZ_CHECK(one->st.malformed == 0 && one->st.desync == 0);
		if (ret > 0)
			FUZZ_CHECK(realmlist_rewrite(in, len, addr, out, (size_t)ret - 1) ==
				   -ENOSPC);
	} else if (len >= 3 && in[0] == REALMLIST_CMD && (size_t)(in[1] | in[2] << 8) + 3 == len) {
		FUZZ_CHECK(same(&one->out, in, len));
		FUZZ_CHECK(one->st.malformed == 1 && one->st.rewritten == 0);
	}
	free(out);
	free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char long_addr[REALMLIST_ADDR_MAX + 1];
	const char *addrs[] = {"a:1", "relay.example.net:40123", long_addr,
			       "relay.example.net:40123"};
	const uint8_t *in;
	const char *addr;
	size_t len, alen, max;
	uint32_t seed;
	struct run one, chunked;

	if (size < 2)
		return 0;
	memset(long_addr, 'r', REALMLIST_ADDR_MAX);
	long_addr[REALMLIST_ADDR_MAX] = '\0';
	addr = addrs[data[0] & 3];
	alen = strlen(addr);
	max = chunk_max[(data[0] >> 2) & 3];
	seed = 0x9e3779b9u ^ data[1];
	in = data + 2;
	len = size - 2;

	feed(&one, addr, in, len, 0, 0, NULL);
	feed(&chunked, addr, in, len, max, seed, &one.out);
	FUZZ_CHECK(same(&chunked.out, (const uint8_t *)one.out.p, one.out.len));
	FUZZ_CHECK(memcmp(&chunked.st, &one.st, sizeof(one.st)) == 0);
	if (one.st.rewritten == 0)
		FUZZ_CHECK(same(&one.out, in, len));
	else
		FUZZ_CHECK(one.out.len <= len + one.st.rewritten * alen);

	check_rewrite(in, len, addr, alen, &one);
	strbuf_release(&one.out);
	strbuf_release(&chunked.out);
	return 0;
}
