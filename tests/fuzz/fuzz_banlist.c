/*
 * Fuzz target for common/banlist: the bans.json state file
 * (banlist_load_json) into a table of 64.
 *
 * Invariants checked:
 * - the result is 0, -EBADMSG or -ENOSPC; on error the table is empty
 *   (it held a ban before the load, so "left empty" is really checked)
 *   and err is a non-empty message;
 * - after a successful load every ban is well-formed (reason within
 *   BANLIST_REASON_MAX without control characters, times not negative, not
 *   expired) and banlist_find returns it;
 * - round trip: banlist_to_json of the loaded table loads again into a
 *   second table, which held another ban before, with exactly the same
 *   bans in the same order; writing that table gives the same text.
 */
#include <errno.h>
#include <string.h>

#include "banlist.h"
#include "fuzz.h"
#include "strbuf.h"

#define CAPACITY (64)
/* The clock at load time: 2025-11-30, as in the seeds. */
#define NOW_S (1764500000LL)

/* A ban already in a table before a load, which the load must drop. */
static void put_stale(struct banlist *bl, uint8_t last)
{
	struct addr_ip ip = {.b = {[10] = 0xff, [11] = 0xff, 198, 18, 0, last}};

	FUZZ_CHECK(banlist_put(bl, &ip, "stale", 0, NOW_S) == 1);
}

static void check_ban(struct banlist *bl, const struct ban *b)
{
	size_t rlen = strnlen(b->reason, sizeof(b->reason));

	FUZZ_CHECK(rlen <= BANLIST_REASON_MAX);
	for (size_t i = 0; i < rlen; i++) {
		unsigned char c = (unsigned char)b->reason[i];

		FUZZ_CHECK(c >= 0x20 && c != 0x7f);
	}
	FUZZ_CHECK(b->created >= 0);
	FUZZ_CHECK(b->expires == 0 || b->expires > NOW_S);
	FUZZ_CHECK(banlist_find(bl, &b->ip, NOW_S, NULL) == b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct banlist *bl = banlist_new(CAPACITY), *again = banlist_new(CAPACITY);
	struct strbuf out1, out2;
	const struct ban *a = NULL, *b = NULL;
	char err[256];
	int r;

	FUZZ_CHECK(bl != NULL && again != NULL);
	strbuf_init(&out1, BANLIST_FILE_MAX(CAPACITY));
	strbuf_init(&out2, BANLIST_FILE_MAX(CAPACITY));
	put_stale(bl, 1);
	put_stale(again, 2);
	err[0] = '\0';
	r = banlist_load_json(bl, (const char *)data, size, NOW_S, err, sizeof(err));
	FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -ENOSPC);
	if (r < 0) {
		FUZZ_CHECK(banlist_count(bl) == 0);
		FUZZ_CHECK(err[0] != '\0' && strnlen(err, sizeof(err)) < sizeof(err));
		goto out;
	}
	FUZZ_CHECK(banlist_count(bl) <= CAPACITY);
	while ((a = banlist_next(bl, a)) != NULL)
		check_ban(bl, a);

	banlist_to_json(bl, &out1);
	FUZZ_CHECK(!out1.bad && out1.p != NULL);
	err[0] = '\0';
	r = banlist_load_json(again, out1.p, out1.len, NOW_S, err, sizeof(err));
	if (r != 0)
		fprintf(stderr, "reload: %s\n%s", err, out1.p);
	FUZZ_CHECK(r == 0);
	FUZZ_CHECK(banlist_count(again) == banlist_count(bl));
	for (a = banlist_next(bl, NULL), b = banlist_next(again, NULL); a != NULL && b != NULL;
	     a = banlist_next(bl, a), b = banlist_next(again, b)) {
		FUZZ_CHECK(memcmp(&a->ip, &b->ip, sizeof(a->ip)) == 0);
		FUZZ_CHECK(strcmp(a->reason, b->reason) == 0);
		FUZZ_CHECK(a->created == b->created && a->expires == b->expires);
	}
	FUZZ_CHECK(a == NULL && b == NULL);
	banlist_to_json(again, &out2);
	FUZZ_CHECK(!out2.bad && out2.len == out1.len && memcmp(out1.p, out2.p, out1.len) == 0);
out:
	strbuf_release(&out1);
	strbuf_release(&out2);
	banlist_free(bl);
	banlist_free(again);
	return 0;
}
