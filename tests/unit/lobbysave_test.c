/*
 * lobby/lobby_save and lobby/lobby_netsim: a save's files found as
 * netpunch's START finds them, hashed and read by range; a receiver's sink
 * refusing what netpunch refuses (with its words) and more, before anything
 * is written; written, verified and renamed into place; a mismatch found;
 * the netsim file read as netsim.py reads it.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lobby_netsim.h"
#include "lobby_save.h"
#include "tap.h"

static char dir[] = "/tmp/lobbysave_test.XXXXXX";

static void put(const char *name, const char *data, size_t n)
{
	char p[512];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	f = fopen(p, "wb");
	if (f != NULL) {
		fwrite(data, 1, n, f);
		fclose(f);
	}
}

static bool exists(const char *name)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return access(p, F_OK) == 0;
}

/* SHA-256 of "abc" and of "": FIPS 180-2's vectors. */
#define SHA_ABC   "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define SHA_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static void test_source(void)
{
	struct lobby_save s;
	char err[512], path[512];
	uint8_t buf[16];

	put("world.sav", "abc", 3);
	put("world.sav.lua", "", 0);
	put("world.jpg", "xy", 2);
	put("other.jpg", "no", 2);
	snprintf(path, sizeof(path), "%s/world.sav", dir);
	CHECK_EQ_INT(lobby_save_open_source(&s, path, err, sizeof(err)), 0);
	CHECK_EQ_INT(s.n, 3);
	CHECK_EQ_STR(s.f[0].wire, "incoming_save.sav");
	CHECK_EQ_STR(s.f[1].wire, "incoming_save.sav.lua");
	CHECK_EQ_STR(s.f[2].wire, "incoming_save.jpg");
	CHECK(s.total == 5 && s.f[2].off == 3);
	CHECK_EQ_INT(lobby_save_hash(&s), 0);
	CHECK_EQ_STR(s.f[0].sha256, SHA_ABC);
	CHECK_EQ_STR(s.f[1].sha256, SHA_EMPTY);
	/* A range across the files (the empty .lua between them). */
	CHECK_EQ_INT(lobby_save_read(&s, 1, buf, 4), 4);
	CHECK(memcmp(buf, "bcxy", 4) == 0);
	CHECK_EQ_INT(lobby_save_read(&s, 4, buf, 2), -EINVAL);
	lobby_save_close(&s);
	/* No sidecars: only the .sav; a .SAV ending counts as .sav. */
	put("lone.SAV", "abc", 3);
	put("lone.jpg", "j", 1);
	snprintf(path, sizeof(path), "%s/lone.SAV", dir);
	CHECK_EQ_INT(lobby_save_open_source(&s, path, err, sizeof(err)), 0);
	CHECK(s.n == 2 && strcmp(s.f[1].wire, "incoming_save.jpg") == 0);
	lobby_save_close(&s);
	snprintf(path, sizeof(path), "%s/missing.sav", dir);
	CHECK_EQ_INT(lobby_save_open_source(&s, path, err, sizeof(err)), -ENOENT);
	CHECK(strncmp(err, "save not found: /", 17) == 0);
}

static int sink(struct lobby_save *s, const struct lobby_save_offer *o, size_t n, uint64_t total,
		uint64_t cap, char *err)
{
	return lobby_save_open_sink(s, dir, o, n, total, NULL, cap, false, err, 512);
}

static void test_refusals(void)
{
	struct lobby_save s;
	char err[512];
	const struct lobby_save_offer evil[] = {
		{"incoming_save.sav", 3, SHA_ABC},
		{"../evil.exe", 1, SHA_ABC},
		{NULL, 1, SHA_ABC},
		{"it's", 1, SHA_ABC},
	};
	const struct lobby_save_offer twice[] = {{"incoming_save.sav", 3, SHA_ABC},
						 {"incoming_save.sav", 3, SHA_ABC}};
	const struct lobby_save_offer one[] = {{"incoming_save.sav", 3, SHA_ABC}};
	const struct lobby_save_offer huge[] = {{"incoming_save.sav", 1LL << 40, SHA_ABC}};

	/* The names first, with netpunch's text (Python's repr of the list). */
	CHECK_EQ_INT(sink(&s, evil, 4, 6, 1 << 20, err), -EPERM);
	CHECK_EQ_STR(err, "refused: sender proposed unexpected filename(s) ['../evil.exe', None, "
			  "\"it's\"]");
	CHECK(!exists("incoming_save.sav.tmp") && !exists("evil.exe"));
	CHECK_EQ_INT(sink(&s, twice, 2, 6, 1 << 20, err), -EPERM);
	CHECK_EQ_STR(err, "refused: incoming_save.sav proposed twice");
	CHECK_EQ_INT(sink(&s, one, 1, 4, 1 << 20, err), -EPERM);
	CHECK_EQ_STR(err, "refused: the files add up to 3 bytes, not 4");
	/* 1 TB declared: over the cap, nothing reserved. */
	CHECK_EQ_INT(sink(&s, huge, 1, 1ULL << 40, LOBBY_SAVE_CAP_BYTES, err), -EFBIG);
	CHECK_EQ_STR(err, "refused: 1099511627776 bytes is over this lobby's cap of 4294967296");
	CHECK_EQ_INT(sink(&s, huge, 1, 3, LOBBY_SAVE_CAP_BYTES, err), -EFBIG);
	CHECK_EQ_STR(err,
		     "refused: incoming_save.sav is over this lobby's cap of 4294967296 bytes");
	CHECK_EQ_INT(sink(&s, one, 1, 3, 2, err), -EFBIG);
	CHECK(!exists("incoming_save.sav.tmp"));
}

static void test_sink(void)
{
	struct lobby_save s;
	char err[512];
	const struct lobby_save_offer two[] = {{"incoming_save.sav", 3, SHA_ABC},
					       {"incoming_save.jpg", 0, SHA_EMPTY}};

	/* An old round's .sav.lua goes when this round's files land. */
	put("incoming_save.sav.lua", "old", 3);
	CHECK_EQ_INT(sink(&s, two, 2, 3, 1 << 20, err), 0);
	CHECK(exists("incoming_save.sav.tmp") && exists("incoming_save.jpg.tmp"));
	CHECK_EQ_INT(lobby_save_write(&s, 1, (const uint8_t *)"bc", 2), 0);
	CHECK_EQ_INT(lobby_save_write(&s, 0, (const uint8_t *)"x", 1), 0);
	CHECK_EQ_INT(lobby_save_write(&s, 2, (const uint8_t *)"cd", 2), -EINVAL); /* past */
	CHECK_EQ_INT(lobby_save_verify(&s), 0); /* "xbc" is not "abc" */
	CHECK_EQ_INT(lobby_save_write(&s, 0, (const uint8_t *)"a", 1), 0);
	CHECK_EQ_INT(lobby_save_verify(&s), 1);
	CHECK(atomic_load(&s.progress) == 3);
	CHECK_EQ_INT(lobby_save_commit(&s, dir), 0);
	lobby_save_close(&s);
	CHECK(exists("incoming_save.sav") && exists("incoming_save.jpg"));
	CHECK(!exists("incoming_save.sav.lua") && !exists("incoming_save.sav.tmp"));
	/* An abandoned sink leaves nothing. */
	CHECK_EQ_INT(sink(&s, two, 2, 3, 1 << 20, err), 0);
	lobby_save_close(&s);
	CHECK(!exists("incoming_save.sav.tmp") && exists("incoming_save.sav"));
	/* And a joiner clears the last session's save before it joins. */
	CHECK_EQ_INT(lobby_save_remove_stale(dir), 2);
	CHECK(!exists("incoming_save.sav") && !exists("incoming_save.jpg"));
}

static void test_netsim(void)
{
	struct lobby_netsim_cfg c;
	const char *t = "LOSS = 0.05\r\ndelay=0.1\njitter=-3\n# loss=0.9\nloss=abc\nnoise\n";

	CHECK_EQ_INT(lobby_netsim_parse(t, strlen(t), &c), 0);
	CHECK(c.loss == 0.05 && c.delay_s == 0.1 && c.jitter_s == 0);
	CHECK(lobby_netsim_enabled(&c));
	t = "loss=5\n";
	lobby_netsim_parse(t, strlen(t), &c);
	CHECK(c.loss == LOBBY_NETSIM_MAX_LOSS);
	t = "loss=0.1 # a comment\ndelay=0\n";
	lobby_netsim_parse(t, strlen(t), &c);
	CHECK(c.loss == 0 && !lobby_netsim_enabled(&c));
	t = "loss=0.2\nloss=0.3";
	lobby_netsim_parse(t, strlen(t), &c);
	CHECK(c.loss == 0.3);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int main(void)
{
	if (mkdtemp(dir) == NULL)
		return 1;
	test_source();
	test_refusals();
	test_sink();
	test_netsim();
	nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
	return tap_done("lobbysave");
}
