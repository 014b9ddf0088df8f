/*
 * common/joincode against tests/data/joincode.json (netpunch connect.py,
 * run by the vector generator at ts 1790000000, decoded at 1790000042):
 * every plain and locked case encodes to the exact text and decodes back
 * to the exact fields; every error string; the Steam-ID codes. Then the
 * rules of netpunch-wire.md §4 the vectors do not spell out: every tail
 * length, staleness, stripping, the dial order of §4.4.
 */
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "base32.h"
#include "joincode.h"
#include "tap.h"
#include "vec.h"

#define TS  (1790000000u)
#define NOW (1790000042LL)

/* A candidate string of the vectors ("a.b.c.d:port", "[v6]:port") into
 * *a; false for null. */
static int cand(struct json_object *cands, const char *key, struct addr *a)
{
	const char *s = vec_str(cands, key);

	if (s == NULL)
		return 0;
	CHECK_EQ_INT(addr_parse(a, s, -1), 0);
	return 1;
}

/* The vector's input profile as a struct joincode. */
static void from_input(struct json_object *input, struct joincode *c)
{
	struct json_object *prof = vec_get(input, "profile");
	struct json_object *cands = vec_get(prof, "candidates");
	struct json_object *flags = vec_get(prof, "flags");
	const char *steam = vec_str(cands, "steam");
	const char *secret = vec_str(input, "secret_hex");
	char err[128];

	memset(c, 0, sizeof(*c));
	c->has_lan = cand(cands, "lan_v4", &c->lan);
	c->has_public = cand(cands, "public_v4", &c->pub);
	c->has_v6 = cand(cands, "v6", &c->v6addr);
	c->has_vpn = cand(cands, "vpn_v4", &c->vpn);
	c->has_vpn2 = cand(cands, "vpn2_v4", &c->vpn2);
	c->open = vec_bool(flags, "open");
	c->symmetric = vec_bool(flags, "symmetric");
	c->cgnat = vec_bool(flags, "cgnat");
	c->v6 = vec_bool(flags, "v6");
	c->steam = steam != NULL ? strtoull(steam, NULL, 10) : 0;
	c->ts = (uint32_t)vec_int(input, "timestamp");
	if (secret != NULL) {
		size_t n;
		uint8_t *b = vec_hex(secret, &n);

		CHECK_EQ_INT(joincode_set_secret(c, b, n, err, sizeof(err)), 0);
		free(b);
	}
}

static void check_cand(const char *name, int has, const struct addr *a, const char *want)
{
	char buf[ADDR_STRLEN];

	if (want == NULL) {
		CHECK(!has);
		if (has)
			fprintf(stderr, "  %s: unexpected %s\n", name,
				addr_str(a, buf, sizeof(buf)));
		return;
	}
	CHECK(has);
	if (has)
		CHECK_EQ_STR(addr_str(a, buf, sizeof(buf)), want);
}

/* Every field of a decoded code against the vector's "decoded" dict. */
static void check_decoded(const struct joincode *c, struct json_object *d)
{
	struct json_object *cands = vec_get(d, "candidates");
	struct json_object *flags = vec_get(d, "flags");
	const char *secret = vec_str(d, "secret");
	const char *steam = vec_str(cands, "steam");
	struct json_object *so = vec_get(d, "steam_only");

	check_cand("lan_v4", c->has_lan, &c->lan, vec_str(cands, "lan_v4"));
	check_cand("public_v4", c->has_public, &c->pub, vec_str(cands, "public_v4"));
	check_cand("v6", c->has_v6, &c->v6addr, vec_str(cands, "v6"));
	check_cand("vpn_v4", c->has_vpn, &c->vpn, vec_str(cands, "vpn_v4"));
	check_cand("vpn2_v4", c->has_vpn2, &c->vpn2, vec_str(cands, "vpn2_v4"));
	if (steam == NULL) {
		CHECK_EQ_INT(c->steam, 0);
	} else {
		char buf[24];

		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)c->steam);
		CHECK_EQ_STR(buf, steam);
	}
	if (secret == NULL) {
		CHECK(!c->has_secret);
	} else {
		CHECK(c->has_secret);
		CHECK(vec_eq_hex(c->secret, JOINCODE_SECRET_LEN, secret));
	}
	CHECK_EQ_INT(c->open, vec_bool(flags, "open"));
	CHECK_EQ_INT(c->symmetric, vec_bool(flags, "symmetric"));
	CHECK_EQ_INT(c->cgnat, vec_bool(flags, "cgnat"));
	CHECK_EQ_INT(c->v6, vec_bool(flags, "v6"));
	CHECK_EQ_INT(c->locked, vec_bool(d, "locked"));
	CHECK_EQ_INT(c->steam_only, so != NULL && json_object_get_boolean(so));
	CHECK_EQ_INT(c->ts, vec_int(d, "ts"));
	CHECK_EQ_INT(c->age, vec_int(d, "age"));
	CHECK_EQ_INT(c->stale, vec_bool(d, "stale"));
}

/* The binary blob behind a code text. */
static void check_blob(const char *code, const char *blob_hex)
{
	uint8_t blob[256];
	int n = base32_decode(code, strlen(code), blob, sizeof(blob));

	CHECK(n >= 0);
	if (n >= 0)
		CHECK(vec_eq_hex(blob, (size_t)n, blob_hex));
}

static void test_cases(struct json_object *root, const char *key, const char *decoded_key)
{
	struct json_object *cases = vec_get(root, key);

	CHECK(vec_len(cases) > 0);
	for (size_t i = 0; i < vec_len(cases); i++) {
		struct json_object *v = vec_at(cases, i);
		struct json_object *input = vec_get(v, "input");
		const char *want = vec_str(v, "code");
		const char *pw = vec_str(input, "password");
		struct joincode c, d;
		char text[JOINCODE_MAX_TEXT], err[128];
		int ret;

		from_input(input, &c);
		ret = joincode_encode(&c, pw, text, sizeof(text), err, sizeof(err));
		CHECK_EQ_INT(ret, (long long)strlen(want));
		CHECK_EQ_STR(text, want);
		check_blob(want, vec_str(v, "blob_hex"));

		ret = joincode_decode(want, pw, vec_int(v, "decode_now"), &d, err, sizeof(err));
		CHECK_EQ_INT(ret, 0);
		if (ret != 0) {
			fprintf(stderr, "  %s: %s\n", vec_str(v, "name"), err);
			continue;
		}
		check_decoded(&d, vec_get(v, decoded_key));
		CHECK_EQ_INT(joincode_is_locked(want), pw != NULL && pw[0] != '\0');
	}
}

static void test_errors(struct json_object *root)
{
	struct json_object *errs = vec_get(root, "errors");

	CHECK_EQ_INT(vec_len(errs), 9);
	for (size_t i = 0; i < vec_len(errs); i++) {
		struct json_object *v = vec_at(errs, i);
		const char *want = vec_str(v, "error");
		struct joincode c;
		char err[128] = "unset";
		int ret;

		ret = joincode_decode(vec_str(v, "code"), vec_str(v, "password"), NOW, &c, err,
				      sizeof(err));
		CHECK(ret < 0);
		CHECK_EQ_STR(err, want);
		/* LockedCode (a ValueError netpunch tells apart) has its own
		 * return values. */
		if (strcmp(want, "wrong password for this code") == 0)
			CHECK_EQ_INT(ret, -EACCES);
		else if (strncmp(want, "this code is locked", 19) == 0)
			CHECK_EQ_INT(ret, -ENOKEY);
		else
			CHECK_EQ_INT(ret, -EINVAL);
	}

	errs = vec_get(root, "encode_errors");
	CHECK_EQ_INT(vec_len(errs), 1);
	for (size_t i = 0; i < vec_len(errs); i++) {
		struct json_object *v = vec_at(errs, i);
		struct joincode c;
		size_t n;
		uint8_t *b = vec_hex(vec_str(v, "secret_hex"), &n);
		char err[128] = "";

		memset(&c, 0, sizeof(c));
		CHECK_EQ_INT(joincode_set_secret(&c, b, n, err, sizeof(err)), -EINVAL);
		CHECK_EQ_STR(err, vec_str(v, "error"));
		CHECK(!c.has_secret);
		free(b);
	}
}

static void test_steam(struct json_object *root)
{
	struct json_object *codes = vec_get(root, "steam_id_codes");
	struct json_object *dec = vec_get(root, "steam_id_code_decoded");
	struct joincode c;
	char err[128];

	CHECK_EQ_INT(vec_len(codes), 8);
	for (size_t i = 0; i < vec_len(codes); i++) {
		struct json_object *v = vec_at(codes, i);
		const char *want = vec_str(v, "steam_id");
		uint64_t id = 0;
		bool ok = joincode_steam_id(vec_str(v, "input"), &id);

		CHECK_EQ_INT(ok, want != NULL);
		if (ok && want != NULL)
			CHECK_EQ_INT(id, strtoull(want, NULL, 10));
	}
	CHECK_EQ_INT(joincode_decode(vec_str(dec, "code"), NULL, vec_int(dec, "decode_now"), &c,
				     err, sizeof(err)),
		     0);
	check_decoded(&c, vec_get(dec, "decoded"));
	CHECK(!joincode_is_locked(vec_str(dec, "code")));

	/* The rules around the vectors: URL prefixes in any case, each tried
	 * once in order, trailing slashes, spaces anywhere; the range is
	 * open at both ends. */
	{
		static const struct {
			const char *in;
			uint64_t id;
		} v[] = {
			{"HTTPS://SteamCommunity.com/profiles/76561198012345678",
			 76561198012345678ull},
			{"http://steamcommunity.com/profiles/76561198012345678//",
			 76561198012345678ull},
			{"steamcommunity.com/profiles/76561198012345678", 76561198012345678ull},
			{"https://steamcommunity.com/profiles/steamcommunity.com/profiles/"
			 "76561198012345678",
			 76561198012345678ull},
			{"\t76561197960265729\n", 76561197960265729ull},
			{"76561202255233023", 76561202255233023ull},
			{"76561197960265728", 0},
			{"76561202255233024", 0},
			{"765611980123456789", 0},
			{"7656119801234567a", 0},
			{"https://steamcommunity.com/id/76561198012345678", 0},
			{"", 0},
		};

		for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
			uint64_t id = 0;
			bool ok = joincode_steam_id(v[i].in, &id);

			CHECK_EQ_INT(ok, v[i].id != 0);
			if (ok)
				CHECK_EQ_INT(id, v[i].id);
		}
	}
}

static void test_lowercase(struct json_object *root)
{
	struct json_object *v = vec_get(root, "lowercase_input");
	struct joincode c;
	char err[128];

	CHECK_EQ_INT(joincode_decode(vec_str(v, "code"), NULL, NOW, &c, err, sizeof(err)), 0);
	check_decoded(&c, vec_get(v, "decoded"));
}

/* A code from raw blob bytes (b0 | ts | rest). */
static void blob_code(const uint8_t *blob, size_t n, char *text, size_t size)
{
	CHECK(base32_encode(blob, n, text, size) >= 0);
}

/* §4.1: the tail is recognised by its remaining length alone. */
static void test_tails(void)
{
	/* b0 = public_v4 only, ts, 203.0.113.9:1234, then the tail. */
	static const uint8_t head[] = {0x10, 0x6a, 0xb1, 0x3b, 0x80, 203, 0, 113, 9, 0x04, 0xd2};
	static const uint8_t vpn1[] = {25, 37, 84, 221, 0x73, 0x1f};
	static const uint8_t vpn2[] = {100, 92, 122, 123, 0x73, 0x1f};
	static const uint8_t steam[] = {0x01, 0x10, 0x00, 0x01, 0x03, 0x1a, 0xad, 0x4e};
	static const uint8_t zero[8] = {0};
	struct {
		const uint8_t *parts[3];
		size_t lens[3];
		int vpn, vpn2;
		uint64_t steam;
	} v[] = {
		{{NULL}, {0}, 0, 0, 0},
		{{vpn1}, {6}, 1, 0, 0},
		{{vpn1, vpn2}, {6, 6}, 1, 1, 0},
		{{steam}, {8}, 0, 0, 76561198012345678ull},
		{{vpn1, steam}, {6, 8}, 1, 0, 76561198012345678ull},
		{{vpn1, vpn2, steam}, {6, 6, 8}, 1, 1, 76561198012345678ull},
		/* SteamID 0 means none; the VPNs before it still count. */
		{{vpn1, zero}, {6, 8}, 1, 0, 0},
		/* By length alone: 20 bytes are two VPNs and a SteamID,
		 * whatever they hold. */
		{{vpn1, vpn2, steam}, {6, 6, 8}, 1, 1, 76561198012345678ull},
		/* Lengths netpunch does not know are ignored whole. */
		{{vpn1, vpn2, zero}, {6, 6, 1}, 0, 0, 0},
		{{steam, steam}, {8, 8}, 0, 0, 0},
		{{vpn1, zero}, {6, 1}, 0, 0, 0},
		{{zero}, {5}, 0, 0, 0},
	};

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		uint8_t blob[64];
		size_t n = sizeof(head);
		char text[128], err[128];
		struct joincode c;

		memcpy(blob, head, n);
		for (size_t k = 0; k < 3 && v[i].parts[k] != NULL; k++) {
			memcpy(blob + n, v[i].parts[k], v[i].lens[k]);
			n += v[i].lens[k];
		}
		blob_code(blob, n, text, sizeof(text));
		CHECK_EQ_INT(joincode_decode(text, NULL, NOW, &c, err, sizeof(err)), 0);
		CHECK(c.has_public);
		CHECK_EQ_INT(c.has_vpn, v[i].vpn);
		CHECK_EQ_INT(c.has_vpn2, v[i].vpn2);
		CHECK_EQ_INT(c.steam, v[i].steam);
		if (c.has_vpn)
			check_cand("vpn", 1, &c.vpn, "25.37.84.221:29471");
		if (c.has_vpn2)
			check_cand("vpn2", 1, &c.vpn2, "100.92.122.123:29471");
	}
}

/* Truncation is reported before the 6to4 rule; a secret running short. */
static void test_truncation(void)
{
	static const struct {
		uint8_t blob[24];
		size_t n;
		const char *err;
	} v[] = {
		/* v6 + 6to4 without public_v4, the port cut short. */
		{{0x60, 0x6a, 0xb1, 0x3b, 0x80, 0x73}, 6, "truncated code"},
		/* The same with the port: now the 6to4 rule speaks. */
		{{0x60, 0x6a, 0xb1, 0x3b, 0x80, 0x73, 0x1f},
		 7,
		 "6to4-derived v6 but no public_v4 to rebuild"},
		/* A secret of 11 bytes. */
		{{0x80, 0x6a, 0xb1, 0x3b, 0x80, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11},
		 16,
		 "truncated code"},
		/* public_v4 + 6to4 v6 with 9 of its 10 bytes. */
		{{0x70, 0x6a, 0xb1, 0x3b, 0x80, 1, 2, 3, 4, 0, 1, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9},
		 22,
		 "truncated code"},
		/* 4 bytes: too short even for the timestamp. */
		{{0x00, 0x6a, 0xb1, 0x3b}, 4, "code too short"},
	};

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		char text[64], err[128] = "";
		struct joincode c;

		blob_code(v[i].blob, v[i].n, text, sizeof(text));
		CHECK_EQ_INT(joincode_decode(text, NULL, NOW, &c, err, sizeof(err)), -EINVAL);
		CHECK_EQ_STR(err, v[i].err);
	}
}

static void test_stale_and_text(void)
{
	/* "lan + public + secret" of the vectors. */
	static const char code[] = "TFVLCO4AYCUACFDTD7DDGZCNOMPQAAICAMCAKBQHBAEQUCY";
	struct joincode c;
	char err[128], text[600];

	CHECK_EQ_INT(joincode_decode(code, NULL, TS + 600, &c, err, sizeof(err)), 0);
	CHECK_EQ_INT(c.age, 600);
	CHECK(!c.stale);
	CHECK_EQ_INT(joincode_decode(code, NULL, TS + 601, &c, err, sizeof(err)), 0);
	CHECK(c.stale);
	/* A code from the future has a negative age, and is not stale. */
	CHECK_EQ_INT(joincode_decode(code, NULL, TS - 5, &c, err, sizeof(err)), 0);
	CHECK_EQ_INT(c.age, -5);
	CHECK(!c.stale);

	/* Python's strip(): ASCII whitespace and Unicode spaces (NBSP,
	 * U+3000) at both ends; '=' padding may be typed. */
	snprintf(text, sizeof(text), " \t\xc2\xa0%s=\xe3\x80\x80\r\n", code);
	CHECK_EQ_INT(joincode_decode(text, NULL, NOW, &c, err, sizeof(err)), 0);
	CHECK(c.has_secret && c.has_lan && c.has_public);
	/* Inside the text a space is not base32. */
	CHECK_EQ_INT(joincode_decode("TFVLCO4A YCUACFDTD7", NULL, NOW, &c, err, sizeof(err)),
		     -EINVAL);
	CHECK_EQ_STR(err, "not valid base32: Non-base32 digit found");
	CHECK_EQ_INT(joincode_decode("T\xc3\xa9ST", NULL, NOW, &c, err, sizeof(err)), -EINVAL);
	CHECK_EQ_STR(err, "not valid base32: string argument should contain only ASCII characters");
	/* Empty and blank texts decode to nothing: "code too short". */
	CHECK_EQ_INT(joincode_decode("", NULL, NOW, &c, err, sizeof(err)), -EINVAL);
	CHECK_EQ_STR(err, "code too short");
	CHECK_EQ_INT(joincode_decode("  ", NULL, NOW, &c, err, sizeof(err)), -EINVAL);
	CHECK_EQ_STR(err, "code too short");
	/* Our bound on the text. */
	memset(text, 'A', sizeof(text) - 1);
	text[sizeof(text) - 1] = '\0';
	CHECK_EQ_INT(joincode_decode(text, NULL, NOW, &c, err, sizeof(err)), -EMSGSIZE);
	CHECK_EQ_STR(err, "code too long");
	CHECK(!joincode_is_locked(text));
	CHECK(!joincode_is_locked("garbage!"));
	CHECK(!joincode_is_locked(code));
	/* err may be NULL. */
	CHECK_EQ_INT(joincode_decode("A", NULL, NOW, &c, NULL, 0), -EINVAL);
}

/* A locked code whose body is empty: 0xFF | ts | tag over ts alone
 * (netpunch raises IndexError there; we call it truncated). */
static void test_locked_empty_body(void)
{
	static const uint8_t salt[] = "tpf2mp-code|\x6a\xb1\x3b\x80";
	uint8_t blob[21] = {0xff, 0x6a, 0xb1, 0x3b, 0x80};
	uint8_t key[32], mac[EVP_MAX_MD_SIZE];
	unsigned int ml = 0;
	char text[64], err[128] = "";
	struct joincode c;

	CHECK_EQ_INT(
		PKCS5_PBKDF2_HMAC("pw", 2, salt, 16, JOINCODE_LOCK_ITERS, EVP_sha256(), 32, key),
		1);
	CHECK(HMAC(EVP_sha256(), key, 32, blob + 1, 4, mac, &ml) != NULL);
	memcpy(blob + 5, mac, 16);
	blob_code(blob, sizeof(blob), text, sizeof(text));
	CHECK(joincode_is_locked(text));
	CHECK_EQ_INT(joincode_decode(text, "pw", NOW, &c, err, sizeof(err)), -EINVAL);
	CHECK_EQ_STR(err, "truncated code");
	/* Below 21 bytes the password is not even asked for. */
	blob_code(blob, 20, text, sizeof(text));
	CHECK_EQ_INT(joincode_decode(text, NULL, NOW, &c, err, sizeof(err)), -EINVAL);
	CHECK_EQ_STR(err, "locked code too short");
}

static void test_encode_rules(void)
{
	struct joincode c;
	char text[JOINCODE_MAX_TEXT], err[128] = "";
	struct joincode d;

	/* The 6to4 derivation needs 2002: followed by public_v4 exactly. */
	memset(&c, 0, sizeof(c));
	c.ts = TS;
	c.has_public = true;
	CHECK_EQ_INT(addr_parse(&c.pub, "198.51.100.77:29471", -1), 0);
	c.has_v6 = true;
	CHECK_EQ_INT(addr_parse(&c.v6addr, "[2003:c633:644d::1]:29471", -1), 0);
	CHECK(joincode_encode(&c, NULL, text, sizeof(text), err, sizeof(err)) > 0);
	CHECK_EQ_INT(joincode_decode(text, NULL, NOW, &d, err, sizeof(err)), 0);
	check_cand("v6", d.has_v6, &d.v6addr, "[2003:c633:644d::1]:29471");
	CHECK(d.v6);

	/* Wrong families are refused. */
	CHECK_EQ_INT(addr_parse(&c.v6addr, "1.2.3.4:5", -1), 0);
	CHECK_EQ_INT(joincode_encode(&c, NULL, text, sizeof(text), err, sizeof(err)), -EINVAL);
	CHECK_EQ_STR(err, "v6 is not an IPv6 address");
	c.has_v6 = false;
	c.has_lan = true;
	CHECK_EQ_INT(addr_parse(&c.lan, "[::1]:5", -1), 0);
	CHECK_EQ_INT(joincode_encode(&c, NULL, text, sizeof(text), err, sizeof(err)), -EINVAL);
	CHECK_EQ_STR(err, "lan_v4 is not an IPv4 address");
	c.has_lan = false;

	/* The text buffer: exactly long enough, one short. */
	{
		int n = joincode_encode(&c, NULL, text, sizeof(text), err, sizeof(err));

		CHECK(n > 0);
		CHECK_EQ_INT(joincode_encode(&c, NULL, text, (size_t)n + 1, err, sizeof(err)), n);
		CHECK_EQ_INT(joincode_encode(&c, NULL, text, (size_t)n, err, sizeof(err)), -ENOSPC);
	}

	/* vpn2 alone is written as the first tail field: it comes back as
	 * vpn_v4, as netpunch's decoder sees it. */
	c.has_vpn2 = true;
	CHECK_EQ_INT(addr_parse(&c.vpn2, "100.92.122.123:1", -1), 0);
	CHECK(joincode_encode(&c, NULL, text, sizeof(text), err, sizeof(err)) > 0);
	CHECK_EQ_INT(joincode_decode(text, NULL, NOW, &d, err, sizeof(err)), 0);
	CHECK(d.has_vpn && !d.has_vpn2);

	/* An empty secret is no secret. */
	CHECK_EQ_INT(joincode_set_secret(&c, (const uint8_t *)"", 0, err, sizeof(err)), 0);
	CHECK(!c.has_secret);
}

/* §4.4 and connect.py's own self-test orders. */
static void test_targets(void)
{
	struct joincode c;
	struct addr mine, out[4];
	char buf[ADDR_STRLEN];
	char err[128];
	/* "everything" of the vectors: lan, public, 6to4 v6, vpn, vpn2, steam. */
	static const char code[] = "7FVLCO4AYCUACFDTD7DDGZCNOMPXGHYAAEAAAAAAAAABAAFBWLB5JZPWA4MCSO"
				   "SLLQMSKVG5OMPWIXD2PNZR6AIQAAAQGGVNJY";

	CHECK_EQ_INT(joincode_decode(code, NULL, NOW, &c, err, sizeof(err)), 0);
	CHECK_EQ_INT(joincode_targets(&c, NULL, out, 4), 4);
	CHECK_EQ_STR(addr_str(&out[0], buf, sizeof(buf)), "25.37.84.221:29471");
	CHECK_EQ_STR(addr_str(&out[1], buf, sizeof(buf)), "100.92.122.123:29471");
	CHECK_EQ_STR(addr_str(&out[2], buf, sizeof(buf)), "192.168.1.20:29471");
	CHECK_EQ_STR(addr_str(&out[3], buf, sizeof(buf)), "198.51.100.77:29471");
	/* Same public IP (another port): same NAT, no hairpin. */
	CHECK_EQ_INT(addr_parse(&mine, "198.51.100.77:1", -1), 0);
	CHECK_EQ_INT(joincode_targets(&c, &mine, out, 4), 3);
	CHECK_EQ_STR(addr_str(&out[2], buf, sizeof(buf)), "192.168.1.20:29471");
	/* Another public IP: all four. */
	CHECK_EQ_INT(addr_parse(&mine, "198.51.100.78:29471", -1), 0);
	CHECK_EQ_INT(joincode_targets(&c, &mine, out, 4), 4);
	/* max bounds the output. */
	CHECK_EQ_INT(joincode_targets(&c, NULL, out, 2), 2);
	/* Same public IP but no LAN candidate: the public one stays. */
	c.has_lan = false;
	CHECK_EQ_INT(addr_parse(&mine, "198.51.100.77:1", -1), 0);
	CHECK_EQ_INT(joincode_targets(&c, &mine, out, 4), 3);
	CHECK_EQ_STR(addr_str(&out[2], buf, sizeof(buf)), "198.51.100.77:29471");
	/* A Steam-only code has nothing to dial over IPv4. */
	CHECK_EQ_INT(joincode_decode("76561198012345678", NULL, NOW, &c, err, sizeof(err)), 0);
	CHECK_EQ_INT(joincode_targets(&c, NULL, out, 4), 0);
}

/* The v6 candidate in the race: after netpunch's v4 order, first for a
 * v6-only dialer, never for a dialer without v6. */
static void test_targets_v6(void)
{
	struct joincode c, d;
	struct addr out[JOINCODE_MAX_TARGETS], mine;
	char buf[ADDR_STRLEN], text[JOINCODE_MAX_TEXT], err[128];
	static const char code[] = "7FVLCO4AYCUACFDTD7DDGZCNOMPXGHYAAEAAAAAAAAABAAFBWLB5JZPWA4MCSO"
				   "SLLQMSKVG5OMPWIXD2PNZR6AIQAAAQGGVNJY";
	const unsigned both = JOINCODE_FAM_V4 | JOINCODE_FAM_V6;

	CHECK_EQ_INT(joincode_decode(code, NULL, NOW, &c, err, sizeof(err)), 0);
	CHECK(c.has_v6);
	CHECK_EQ_INT(joincode_targets_for(&c, NULL, both, out, JOINCODE_MAX_TARGETS), 5);
	CHECK_EQ_STR(addr_str(&out[0], buf, sizeof(buf)), "25.37.84.221:29471");
	CHECK_EQ_STR(addr_str(&out[3], buf, sizeof(buf)), "198.51.100.77:29471");
	CHECK_EQ_STR(addr_str(&out[4], buf, sizeof(buf)), "[2002:c633:644d:1::1000]:29471");
	/* Without v6 of our own: netpunch's four. */
	CHECK_EQ_INT(joincode_targets_for(&c, NULL, JOINCODE_FAM_V4, out, JOINCODE_MAX_TARGETS), 4);
	CHECK_EQ_INT(joincode_targets(&c, NULL, out, JOINCODE_MAX_TARGETS), 4);
	/* v6 only: the v6 candidate first, then the rest in order. */
	CHECK_EQ_INT(joincode_targets_for(&c, NULL, JOINCODE_FAM_V6, out, JOINCODE_MAX_TARGETS), 5);
	CHECK_EQ_STR(addr_str(&out[0], buf, sizeof(buf)), "[2002:c633:644d:1::1000]:29471");
	CHECK_EQ_STR(addr_str(&out[1], buf, sizeof(buf)), "25.37.84.221:29471");
	/* max bounds it: the v6 one is the first to go for a dual-stack
	 * dialer, the last for a v6-only one. */
	CHECK_EQ_INT(joincode_targets_for(&c, NULL, both, out, 4), 4);
	CHECK_EQ_STR(addr_str(&out[3], buf, sizeof(buf)), "198.51.100.77:29471");
	CHECK_EQ_INT(joincode_targets_for(&c, NULL, JOINCODE_FAM_V6, out, 1), 1);
	CHECK_EQ_STR(addr_str(&out[0], buf, sizeof(buf)), "[2002:c633:644d:1::1000]:29471");
	/* Same NAT drops the public v4 candidate, never the v6 one. */
	CHECK_EQ_INT(addr_parse(&mine, "198.51.100.77:1", -1), 0);
	CHECK_EQ_INT(joincode_targets_for(&c, &mine, both, out, JOINCODE_MAX_TARGETS), 4);
	CHECK_EQ_STR(addr_str(&out[3], buf, sizeof(buf)), "[2002:c633:644d:1::1000]:29471");

	/* A v6-only profile (a joiner with no IPv4 at all) encodes, decodes
	 * to its one candidate, and is dialled over it alone. */
	memset(&c, 0, sizeof(c));
	c.ts = TS;
	c.has_v6 = c.v6 = true;
	CHECK_EQ_INT(addr_parse(&c.v6addr, "[2001:db8:3::10]:41000", -1), 0);
	CHECK(joincode_encode(&c, NULL, text, sizeof(text), err, sizeof(err)) > 0);
	CHECK_EQ_INT(joincode_decode(text, NULL, NOW, &d, err, sizeof(err)), 0);
	CHECK(d.has_v6 && d.v6 && !d.has_lan && !d.has_public && !d.has_secret);
	check_cand("v6", d.has_v6, &d.v6addr, "[2001:db8:3::10]:41000");
	CHECK_EQ_INT(joincode_targets(&d, NULL, out, JOINCODE_MAX_TARGETS), 0);
	CHECK_EQ_INT(joincode_targets_for(&d, NULL, both, out, JOINCODE_MAX_TARGETS), 1);
	CHECK_EQ_STR(addr_str(&out[0], buf, sizeof(buf)), "[2001:db8:3::10]:41000");
}

int main(void)
{
	struct json_object *root = vec_load("joincode.json");

	if (root != NULL) {
		CHECK_EQ_INT(vec_len(vec_get(root, "cases")), 16);
		CHECK_EQ_INT(vec_len(vec_get(root, "locked")), 3);
		test_cases(root, "cases", "decoded");
		test_cases(root, "locked", "decoded_with_password");
		test_errors(root);
		test_steam(root);
		test_lowercase(root);
		json_object_put(root);
	}
	test_tails();
	test_truncation();
	test_stale_and_text();
	test_locked_empty_body();
	test_encode_rules();
	test_targets();
	test_targets_v6();
	return tap_done("joincode");
}
