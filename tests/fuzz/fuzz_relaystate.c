/*
 * The relay lobby's state files (lobby/lobby_relaystate.c): the first byte
 * picks relay_letters.json, relay_companies.json or relay_secret.bin, the
 * rest is the file. Invariants: an accepted file holds at most the table's
 * capacity, its letters are distinct, and it encodes to a text that
 * decodes to the same table and encodes to the same bytes; a refused one
 * says why and leaves the table empty. Then a join of a new name always
 * ends (a letter, or -ENOSPC only when everyone is present).
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "lobby_relaystate.h"
#include "strbuf.h"

static bool nobody(void *arg, const char *name)
{
	(void)arg;
	(void)name;
	return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum lobby_relay_kind kind;
	struct lobby_relay_names *t, *u;
	struct strbuf a, b;
	char err[160];
	bool changed;
	int r;

	if (size < 1)
		return 0;
	if (data[0] % 3 == 2) {
		uint8_t s[JOINCODE_SECRET_LEN];

		r = lobby_relay_secret_decode(data + 1, size - 1, s);
		FUZZ_CHECK((r == 0) == (size - 1 == JOINCODE_SECRET_LEN));
		FUZZ_CHECK(r != 0 || memcmp(s, data + 1, sizeof(s)) == 0);
		return 0;
	}
	kind = data[0] % 3 == 0 ? LOBBY_RELAY_KIND_LETTERS : LOBBY_RELAY_KIND_CHIPS;
	t = lobby_relay_names_new(kind);
	u = lobby_relay_names_new(kind);
	if (t == NULL || u == NULL)
		goto out;
	err[0] = '\0';
	r = lobby_relay_names_decode(t, (const char *)data + 1, size - 1, err, sizeof(err));
	if (r < 0) {
		FUZZ_CHECK(r == -EBADMSG && err[0] != '\0');
		FUZZ_CHECK(lobby_relay_names_count(t) == 0);
		goto out;
	}
	FUZZ_CHECK(lobby_relay_names_count(t) <=
		   (kind == LOBBY_RELAY_KIND_LETTERS ? LOBBY_RELAY_LETTERS : LOBBY_RELAY_CHIPS));
	strbuf_init(&a, 4 * LOBBY_RELAY_FILE_MAX);
	FUZZ_CHECK(lobby_relay_names_encode(t, &a) == 0);
	FUZZ_CHECK(lobby_relay_names_decode(u, a.p, a.len, err, sizeof(err)) == 0);
	FUZZ_CHECK(lobby_relay_names_count(u) == lobby_relay_names_count(t));
	strbuf_init(&b, 4 * LOBBY_RELAY_FILE_MAX);
	FUZZ_CHECK(lobby_relay_names_encode(u, &b) == 0);
	FUZZ_CHECK(a.len == b.len && memcmp(a.p, b.p, a.len) == 0);
	strbuf_release(&b);
	strbuf_release(&a);
	if (kind == LOBBY_RELAY_KIND_LETTERS) {
		/* Nobody present: a new name always gets a letter. */
		r = lobby_relay_letter_for(t, "a fresh name #9", nobody, NULL, &changed);
		FUZZ_CHECK(r >= 0 && r < LOBBY_RELAY_LETTERS && changed);
	} else {
		FUZZ_CHECK(lobby_relay_chip_set(t, "a fresh name #9", 5) ||
			   lobby_relay_chip_get(t, "a fresh name #9") == 5);
	}
out:
	lobby_relay_names_free(u);
	lobby_relay_names_free(t);
	return 0;
}
