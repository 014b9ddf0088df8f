/*
 * lobby/lobby_relaystate: the origin letters (netpunch's sequence), the
 * bounded letters table and its rule for reuse (1,000 distinct names
 * without a hang), the state files' codecs (netpunch's format both ways,
 * corrupt files refused with the reason), the company table, the secret.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lobby_relaystate.h"
#include "strbuf.h"
#include "tap.h"

static void letters_sequence(void)
{
	char s[LOBBY_RELAY_LETTER_SZ];

	CHECK(lobby_relay_letter_name(0, s) == 0 && strcmp(s, "a") == 0);
	CHECK(lobby_relay_letter_name(25, s) == 0 && strcmp(s, "z") == 0);
	CHECK(lobby_relay_letter_name(26, s) == 0 && strcmp(s, "aa") == 0);
	CHECK(lobby_relay_letter_name(27, s) == 0 && strcmp(s, "ab") == 0);
	CHECK(lobby_relay_letter_name(52, s) == 0 && strcmp(s, "ba") == 0);
	CHECK(lobby_relay_letter_name(701, s) == 0 && strcmp(s, "zz") == 0);
	CHECK(lobby_relay_letter_name(702, s) == -ERANGE);
	for (unsigned i = 0; i < LOBBY_RELAY_LETTERS; i++) {
		lobby_relay_letter_name(i, s);
		CHECK_EQ_INT(lobby_relay_letter_index(s, strlen(s)), i);
	}
	CHECK(lobby_relay_letter_index("A", 1) == -1);
	CHECK(lobby_relay_letter_index("aaa", 3) == -1);
	CHECK(lobby_relay_letter_index("", 0) == -1);
}

/* The names "p<i>" for i in [here_from, here_to) are in the lobby. */
struct here {
	int from, to;
};

static bool in_use(void *arg, const char *name)
{
	const struct here *h = arg;
	int i = atoi(name + 1);

	return name[0] == 'p' && i >= h->from && i < h->to;
}

static void letters_bounded(void)
{
	struct lobby_relay_names *t = lobby_relay_names_new(LOBBY_RELAY_KIND_LETTERS);
	struct here h = {0, 0};
	char name[32], s[LOBBY_RELAY_LETTER_SZ];
	bool changed;
	int first;

	CHECK(t != NULL);
	/* The lowest free letter, sticky per name. */
	CHECK_EQ_INT(lobby_relay_letter_for(t, "p0", in_use, &h, &changed), 0);
	CHECK(changed);
	CHECK_EQ_INT(lobby_relay_letter_for(t, "p1", in_use, &h, &changed), 1);
	CHECK_EQ_INT(lobby_relay_letter_for(t, "p0", in_use, &h, &changed), 0);
	CHECK(changed); /* p0 is seen now: the order moved */
	CHECK_EQ_INT(lobby_relay_letter_for(t, "p0", in_use, &h, &changed), 0);
	CHECK(!changed);
	/* 1,000 distinct names, 200 of them present at a time: never stuck,
	 * never two present names with one letter. */
	for (int i = 2; i < 1000; i++) {
		int got;

		snprintf(name, sizeof(name), "p%d", i);
		h.from = i >= 200 ? i - 199 : 0;
		h.to = i;
		got = lobby_relay_letter_for(t, name, in_use, &h, &changed);
		CHECK(got >= 0 && got < LOBBY_RELAY_LETTERS);
		CHECK(changed);
	}
	CHECK_EQ_INT(lobby_relay_names_count(t), LOBBY_RELAY_LETTERS);
	{
		bool seen[LOBBY_RELAY_LETTERS] = {false};

		for (int i = 800; i < 1000; i++) {
			int k;

			snprintf(name, sizeof(name), "p%d", i);
			CHECK(lobby_relay_letter_get(t, name, s) == 0);
			k = lobby_relay_letter_index(s, strlen(s));
			CHECK(k >= 0 && !seen[k]);
			if (k >= 0)
				seen[k] = true;
		}
	}
	/* The least recently seen name not present gave its letter up: p0
	 * was seen at the start, so it went long ago. */
	CHECK(lobby_relay_letter_get(t, "p0", s) == -ENOENT);
	/* A full table whose every name is present: no letter, no hang. */
	h.from = 0;
	h.to = 1000;
	first = lobby_relay_letter_for(t, "newcomer", in_use, &h, &changed);
	CHECK_EQ_INT(first, -ENOSPC);
	CHECK(!changed);
	CHECK(lobby_relay_letter_for(t, "", in_use, &h, &changed) == -EINVAL);
	lobby_relay_names_free(t);
}

static void letters_files(void)
{
	struct lobby_relay_names *t = lobby_relay_names_new(LOBBY_RELAY_KIND_LETTERS);
	struct here h = {0, 0};
	struct strbuf b;
	char err[160], s[LOBBY_RELAY_LETTER_SZ];
	bool changed;
	/* netpunch's own file, as json.dump writes it. */
	static const char np[] = "{\"alice\": \"a\", \"bob\": \"b\", \"caf\\u00e9\": \"aa\"}";

	CHECK(lobby_relay_names_decode(t, np, strlen(np), err, sizeof(err)) == 0);
	CHECK_EQ_INT(lobby_relay_names_count(t), 3);
	CHECK(lobby_relay_letter_get(t, "caf\xc3\xa9", s) == 0 && strcmp(s, "aa") == 0);
	strbuf_init(&b, LOBBY_RELAY_FILE_MAX);
	CHECK(lobby_relay_names_encode(t, &b) == 0);
	CHECK(b.len == strlen(np) && memcmp(b.p, np, b.len) == 0);
	strbuf_release(&b);
	/* A new name takes the lowest free letter (c), and goes last. */
	CHECK_EQ_INT(lobby_relay_letter_for(t, "carol", in_use, &h, &changed), 2);
	lobby_relay_letter_for(t, "alice", in_use, &h, &changed);
	strbuf_init(&b, LOBBY_RELAY_FILE_MAX);
	lobby_relay_names_encode(t, &b);
	CHECK_EQ_STR(
		b.p,
		"{\"bob\": \"b\", \"caf\\u00e9\": \"aa\", \"carol\": \"c\", \"alice\": \"a\"}");
	strbuf_release(&b);
	/* Corrupt files: refused with the reason, the table left empty. */
	{
		static const char *const badv[] = {
			"",
			"[]",
			"{\"a\": \"a\"",
			"{\"a\": 1}",
			"{\"a\": \"A\"}",
			"{\"a\": \"aaa\"}",
			"{\"a\": \"a\", \"b\": \"a\"}",
			"{\"\": \"a\"}",
			"{\"a\\u0001\": \"b\"}",
			"\"text\"",
			"{\"a\": \"a\"} x",
		};

		for (size_t i = 0; i < sizeof(badv) / sizeof(badv[0]); i++) {
			err[0] = '\0';
			CHECK(lobby_relay_names_decode(t, badv[i], strlen(badv[i]), err,
						       sizeof(err)) == -EBADMSG);
			CHECK(err[0] != '\0');
			CHECK_EQ_INT(lobby_relay_names_count(t), 0);
		}
	}
	/* More names than letters. */
	strbuf_init(&b, LOBBY_RELAY_FILE_MAX);
	strbuf_append(&b, "{", 1);
	for (int i = 0; i < LOBBY_RELAY_LETTERS + 1; i++)
		strbuf_printf(&b, "%s\"n%d\": \"a\"", i ? ", " : "", i);
	strbuf_append(&b, "}", 1);
	CHECK(lobby_relay_names_decode(t, b.p, b.len, err, sizeof(err)) == -EBADMSG);
	CHECK(strstr(err, "at most 702") != NULL);
	strbuf_release(&b);
	lobby_relay_names_free(t);
}

static void chips(void)
{
	struct lobby_relay_names *t = lobby_relay_names_new(LOBBY_RELAY_KIND_CHIPS);
	struct strbuf b;
	char err[160], name[32];
	static const char np[] = "{\"alice\": 1, \"bob\": 7}";

	CHECK(lobby_relay_names_decode(t, np, strlen(np), err, sizeof(err)) == 0);
	CHECK_EQ_INT(lobby_relay_chip_get(t, "bob"), 7);
	CHECK_EQ_INT(lobby_relay_chip_get(t, "carol"), 0);
	CHECK(!lobby_relay_chip_set(t, "bob", 7));
	CHECK(lobby_relay_chip_set(t, "alice", 3));
	CHECK(!lobby_relay_chip_set(t, "alice", 0));
	CHECK(!lobby_relay_chip_set(t, "alice", 201));
	strbuf_init(&b, LOBBY_RELAY_FILE_MAX);
	lobby_relay_names_encode(t, &b);
	CHECK_EQ_STR(b.p, "{\"bob\": 7, \"alice\": 3}");
	strbuf_release(&b);
	CHECK(lobby_relay_names_decode(t, "{\"a\": 0}", 8, err, sizeof(err)) == -EBADMSG);
	CHECK(lobby_relay_names_decode(t, "{\"a\": \"1\"}", 10, err, sizeof(err)) == -EBADMSG);
	CHECK(lobby_relay_names_decode(t, "{\"a\": true}", 11, err, sizeof(err)) == -EBADMSG);
	/* Bounded: the least recently seen makes room. */
	for (int i = 0; i < 2 * LOBBY_RELAY_CHIPS; i++) {
		snprintf(name, sizeof(name), "n%d", i);
		lobby_relay_chip_set(t, name, 1 + i % LOBBY_CAP);
	}
	CHECK_EQ_INT(lobby_relay_names_count(t), LOBBY_RELAY_CHIPS);
	CHECK_EQ_INT(lobby_relay_chip_get(t, "n0"), 0);
	CHECK_EQ_INT(lobby_relay_chip_get(t, "n2047"), 1 + 2047 % LOBBY_CAP);
	lobby_relay_names_free(t);
}

static void secret(void)
{
	uint8_t in[JOINCODE_SECRET_LEN + 1], out[JOINCODE_SECRET_LEN];

	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(i * 37);
	CHECK(lobby_relay_secret_decode(in, JOINCODE_SECRET_LEN, out) == 0);
	CHECK(memcmp(in, out, sizeof(out)) == 0);
	CHECK(lobby_relay_secret_decode(in, JOINCODE_SECRET_LEN - 1, out) == -EBADMSG);
	CHECK(lobby_relay_secret_decode(in, JOINCODE_SECRET_LEN + 1, out) == -EBADMSG);
	CHECK(lobby_relay_secret_decode(in, 0, out) == -EBADMSG);
}

int main(void)
{
	letters_sequence();
	letters_bounded();
	letters_files();
	chips();
	secret();
	return tap_done("lobbyrelay");
}
