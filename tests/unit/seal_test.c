/*
 * common/seal against tests/data/seal.json and knock.json (netpunch
 * seal.py and lobby.py's rendezvous, run by the vector generator): every
 * key derivation, every sealed and signed frame byte for byte (salts and
 * counters fixed with seal_set_state), every negative case replayed into a
 * fresh receiver; the knock tags, keys and the knock body. Then the edges
 * netpunch-wire.md §3 describes: the window's edges, counter 0, the counter
 * wrap, the salt table's bound, in-place use.
 */
#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "joincode.h"
#include "pyjson.h"
#include "seal.h"
#include "strbuf.h"
#include "tap.h"
#include "vec.h"

static void key_from_hex(const char *hex, uint8_t key[static SEAL_KEY_LEN])
{
	size_t n;
	uint8_t *b = vec_hex(hex, &n);

	CHECK(b != NULL && n == SEAL_KEY_LEN);
	memset(key, 0, SEAL_KEY_LEN);
	if (b != NULL && n == SEAL_KEY_LEN)
		memcpy(key, b, SEAL_KEY_LEN);
	free(b);
}

static void secret_from_hex(const char *hex, uint8_t secret[static SEAL_SECRET_LEN])
{
	size_t n;
	uint8_t *b = vec_hex(hex, &n);

	CHECK(b != NULL && n == SEAL_SECRET_LEN);
	memset(secret, 0, SEAL_SECRET_LEN);
	if (b != NULL && n == SEAL_SECRET_LEN)
		memcpy(secret, b, SEAL_SECRET_LEN);
	free(b);
}

static void test_derive(struct json_object *root)
{
	struct json_object *v = vec_get(root, "derive_key");

	CHECK_EQ_INT(vec_len(v), 6);
	for (size_t i = 0; i < vec_len(v); i++) {
		struct json_object *c = vec_at(v, i);
		uint8_t secret[SEAL_SECRET_LEN], key[SEAL_KEY_LEN];

		secret_from_hex(vec_str(c, "secret_hex"), secret);
		seal_derive_key(secret, vec_str(c, "password"), key);
		CHECK(vec_eq_hex(key, sizeof(key), vec_str(c, "key_hex")));
	}
	/* A NULL password is the empty one. */
	{
		struct json_object *c = vec_at(v, 0);
		uint8_t secret[SEAL_SECRET_LEN], key[SEAL_KEY_LEN];

		secret_from_hex(vec_str(c, "secret_hex"), secret);
		seal_derive_key(secret, NULL, key);
		CHECK(vec_eq_hex(key, sizeof(key), vec_str(c, "key_hex")));
	}
}

/* The sealer of the vectors: stream_key (secret 00..0b, password "pw"). */
static struct sealer *stream_sealer(struct json_object *root)
{
	struct json_object *sk = vec_get(root, "stream_key");
	uint8_t secret[SEAL_SECRET_LEN], key[SEAL_KEY_LEN];
	struct sealer *s;

	secret_from_hex(vec_str(sk, "secret_hex"), secret);
	seal_derive_key(secret, vec_str(sk, "password"), key);
	CHECK(vec_eq_hex(key, sizeof(key), vec_str(sk, "key_hex")));
	s = seal_new(key);
	CHECK(s != NULL);
	return s;
}

static void set_salt(struct sealer *s, const char *salt_hex, uint32_t ctr, const char *bulk_hex,
		     uint32_t bulk_ctr)
{
	static const uint8_t zero[4];
	size_t n1 = 0, n2 = 0;
	uint8_t *a = vec_hex(salt_hex, &n1), *b = vec_hex(bulk_hex, &n2);

	seal_set_state(s, n1 == 4 ? a : zero, ctr, n2 == 4 ? b : zero, bulk_ctr);
	free(a);
	free(b);
}

static void test_sealed(struct json_object *root, bool signed_)
{
	struct json_object *v = vec_get(root, signed_ ? "signed" : "sealed");
	struct sealer *tx = stream_sealer(root), *rx = stream_sealer(root);

	CHECK_EQ_INT(vec_len(v), signed_ ? 4 : 7);
	for (size_t i = 0; tx != NULL && rx != NULL && i < vec_len(v); i++) {
		struct json_object *c = vec_at(v, i);
		size_t n, fl;
		uint8_t *pt = vec_hex(vec_str(c, "plaintext_hex"), &n);
		uint8_t *out = malloc(n + SEAL_OVERHEAD), *frame = malloc(n + 64);
		uint32_t ctr = (uint32_t)vec_int(c, "counter");
		int ret;

		CHECK_EQ_INT(n, vec_int(c, "plaintext_len"));
		if (signed_)
			set_salt(tx, "00000000", 0, vec_str(c, "bulk_salt_hex"), ctr - 1);
		else
			set_salt(tx, vec_str(c, "salt_hex"), ctr - 1, "00000000", 0);
		ret = signed_ ? seal_sign(tx, pt, n, out, n + SEAL_OVERHEAD)
			      : seal_seal(tx, pt, n, out, n + SEAL_OVERHEAD);
		CHECK_EQ_INT(ret, (long long)(n + SEAL_OVERHEAD));
		CHECK(vec_eq_hex(out, n + SEAL_OVERHEAD, vec_str(c, "payload_hex")));
		if (!signed_)
			CHECK(vec_eq_hex(out, SEAL_NONCE_LEN, vec_str(c, "nonce_hex")));
		fl = (size_t)np1_build(frame, n + 64, signed_ ? NP1_ADATA : NP1_EDATA, out,
				       n + SEAL_OVERHEAD);
		CHECK(vec_eq_hex(frame, fl, vec_str(c, "np1_frame_hex")));

		/* A receiver with the same key opens it to the plaintext. */
		if (signed_) {
			const uint8_t *p = NULL;

			CHECK_EQ_INT(seal_unsign(rx, out, n + SEAL_OVERHEAD, &p), (long long)n);
			CHECK(p == out + SEAL_NONCE_LEN && memcmp(p, pt, n) == 0);
		} else {
			uint8_t *back = malloc(n + 1);

			CHECK_EQ_INT(seal_open(rx, out, n + SEAL_OVERHEAD, back, n), (long long)n);
			CHECK(memcmp(back, pt, n) == 0);
			free(back);
		}
		free(pt);
		free(out);
		free(frame);
	}
	seal_free(tx);
	seal_free(rx);
}

static void test_negative(struct json_object *root)
{
	struct json_object *v = vec_get(root, "negative");

	CHECK_EQ_INT(vec_len(v), 15);
	for (size_t i = 0; i < vec_len(v); i++) {
		struct json_object *c = vec_at(v, i);
		struct json_object *seq = vec_get(c, "sequence");
		uint8_t key[SEAL_KEY_LEN];
		struct sealer *rx;

		key_from_hex(vec_str(c, "receiver_key_hex"), key);
		rx = seal_new(key);
		CHECK(rx != NULL);
		CHECK(vec_len(seq) > 0);
		for (size_t k = 0; rx != NULL && k < vec_len(seq); k++) {
			struct json_object *op = vec_at(seq, k);
			const char *name = vec_str(op, "op");
			bool accept = strcmp(vec_str(op, "expect"), "accept") == 0;
			size_t n;
			uint8_t *f = vec_hex(vec_str(op, "frame_hex"), &n);
			uint8_t out[256];
			const uint8_t *p = out;
			int ret;

			if (strcmp(name, "open") == 0)
				ret = seal_open(rx, f, n, out, sizeof(out));
			else
				ret = seal_unsign(rx, f, n, &p);
			CHECK_EQ_INT(ret >= 0, accept);
			if (ret >= 0 && accept) {
				CHECK(vec_eq_hex(p, (size_t)ret, vec_str(op, "plaintext_hex")));
			} else if (ret >= 0 || accept) {
				fprintf(stderr, "  case \"%s\" step %zu: %d\n", vec_str(c, "name"),
					k, ret);
			}
			/* Bad tags are -EBADMSG, replays -EALREADY. */
			if (!accept && strstr(vec_str(c, "name"), "replay") != NULL)
				CHECK_EQ_INT(ret, -EALREADY);
			if (!accept && strstr(vec_str(c, "name"), "tamper") != NULL)
				CHECK_EQ_INT(ret, -EBADMSG);
			free(f);
		}
		seal_free(rx);
	}
}

/* A frame of key k with this salt and counter. */
static size_t mk(struct sealer *tx, const char *salt, uint32_t ctr, uint8_t *out)
{
	static const uint8_t pt[] = "x";

	set_salt(tx, salt, ctr - 1, "00000000", 0);
	return (size_t)seal_seal(tx, pt, 1, out, 64);
}

static int try_open(struct sealer *rx, const uint8_t *f, size_t n)
{
	uint8_t out[64];

	return seal_open(rx, f, n, out, sizeof(out));
}

static void test_window(void)
{
	uint8_t key[SEAL_KEY_LEN] = {1, 2, 3};
	struct sealer *tx = seal_new(key), *rx = seal_new(key);
	uint8_t f[64], g[64], old[64];
	size_t n, m, on;

	CHECK(tx != NULL && rx != NULL);
	if (tx == NULL || rx == NULL)
		goto out;
	/* Counter 0 is legal on receive, and a new salt starts anywhere. */
	n = mk(tx, "aaaaaaaa", 0, f);
	CHECK_EQ_INT(try_open(rx, f, n), 1);
	CHECK_EQ_INT(try_open(rx, f, n), -EALREADY);
	/* Walk up by one 3,000 times: each accepted once. */
	for (uint32_t c = 1; c <= 3000; c++) {
		n = mk(tx, "aaaaaaaa", c, f);
		CHECK_EQ_INT(try_open(rx, f, n), 1);
	}
	n = mk(tx, "aaaaaaaa", 3000 - 1023, f);
	CHECK_EQ_INT(try_open(rx, f, n), -EALREADY); /* seen, inside */
	n = mk(tx, "aaaaaaaa", 3000 - 1024, f);
	CHECK_EQ_INT(try_open(rx, f, n), -EALREADY); /* too old */

	/* A jump of exactly 1024 forgets everything below the new edge,
	 * and the slots it reuses are clean. */
	on = mk(tx, "bbbbbbbb", 100, old);
	CHECK_EQ_INT(try_open(rx, old, on), 1);
	n = mk(tx, "bbbbbbbb", 1124, f);
	CHECK_EQ_INT(try_open(rx, f, n), 1);
	CHECK_EQ_INT(try_open(rx, old, on), -EALREADY); /* back = 1024 */
	m = mk(tx, "bbbbbbbb", 101, g);
	CHECK_EQ_INT(try_open(rx, g, m), 1); /* back = 1023, never seen */
	CHECK_EQ_INT(try_open(rx, g, m), -EALREADY);
	/* Shifts of 1 .. 1023 clear exactly the slots they pass. */
	for (uint32_t step = 1; step < SEAL_WINDOW; step += 37) {
		uint32_t base = 100000 + step * 4096;

		n = mk(tx, "cccccccc", base, f);
		CHECK_EQ_INT(try_open(rx, f, n), 1);
		n = mk(tx, "cccccccc", base - 1, f);
		CHECK_EQ_INT(try_open(rx, f, n), 1);
		n = mk(tx, "cccccccc", base + step, f);
		CHECK_EQ_INT(try_open(rx, f, n), 1);
		/* Everything between base and base + step is new. */
		for (uint32_t c = base + 1; c < base + step && c < base + 40; c++) {
			n = mk(tx, "cccccccc", c, f);
			CHECK_EQ_INT(try_open(rx, f, n), 1);
		}
		/* base - 1 is still remembered while inside the window. */
		n = mk(tx, "cccccccc", base - 1, f);
		CHECK_EQ_INT(try_open(rx, f, n), -EALREADY);
	}
	/* The top of the counter space. */
	n = mk(tx, "dddddddd", UINT32_MAX, f);
	CHECK_EQ_INT(try_open(rx, f, n), 1);
	CHECK_EQ_INT(try_open(rx, f, n), -EALREADY);
	n = mk(tx, "dddddddd", UINT32_MAX - 1023, f);
	CHECK_EQ_INT(try_open(rx, f, n), 1);
	n = mk(tx, "dddddddd", UINT32_MAX - 1024, f);
	CHECK_EQ_INT(try_open(rx, f, n), -EALREADY);
out:
	seal_free(tx);
	seal_free(rx);
}

/* Past 0xFFFFFFFF the sender draws a fresh salt and restarts at 1. */
static void test_wrap(void)
{
	uint8_t key[SEAL_KEY_LEN] = {9};
	struct sealer *tx = seal_new(key), *rx = seal_new(key);
	static const uint8_t salt[4] = {0x11, 0x22, 0x33, 0x44};
	uint8_t a[64], b[64], pt[4] = "wrap", back[8];
	const uint8_t *p;

	CHECK(tx != NULL && rx != NULL);
	if (tx == NULL || rx == NULL)
		goto out;
	seal_set_state(tx, salt, UINT32_MAX - 1, salt, UINT32_MAX);
	CHECK_EQ_INT(seal_seal(tx, pt, 4, a, sizeof(a)), 28);
	CHECK(memcmp(a, salt, 4) == 0 && vec_eq_hex(a + 4, 4, "ffffffff"));
	CHECK_EQ_INT(seal_seal(tx, pt, 4, b, sizeof(b)), 28);
	CHECK(memcmp(b, salt, 4) != 0 && vec_eq_hex(b + 4, 4, "00000001"));
	CHECK_EQ_INT(seal_open(rx, a, 28, back, sizeof(back)), 4);
	CHECK_EQ_INT(seal_open(rx, b, 28, back, sizeof(back)), 4);
	CHECK(memcmp(back, "wrap", 4) == 0);
	/* sign() has its own salt and counter, and wraps the same way. */
	CHECK_EQ_INT(seal_sign(tx, pt, 4, a, sizeof(a)), 28);
	CHECK(memcmp(a, salt, 4) != 0 && vec_eq_hex(a + 4, 4, "00000001"));
	CHECK_EQ_INT(seal_unsign(rx, a, 28, &p), 4);
	/* Fresh sealers draw random salts, seal and sign differently. */
	{
		struct sealer *t2 = seal_new(key);

		CHECK_EQ_INT(seal_seal(t2, pt, 4, a, sizeof(a)), 28);
		CHECK_EQ_INT(seal_sign(t2, pt, 4, b, sizeof(b)), 28);
		CHECK(memcmp(a, b, 4) != 0);
		CHECK(vec_eq_hex(a + 4, 4, "00000001"));
		CHECK(vec_eq_hex(b + 4, 4, "00000001"));
		seal_free(t2);
	}
out:
	seal_free(tx);
	seal_free(rx);
}

/* SEAL_MAX_SALTS windows, least recently used forgotten. */
static void test_salt_table(void)
{
	uint8_t key[SEAL_KEY_LEN] = {7};
	struct sealer *tx = seal_new(key), *rx = seal_new(key);
	uint8_t first[64], f[64];
	size_t fn, n;
	char salt[9];

	CHECK(tx != NULL && rx != NULL);
	if (tx == NULL || rx == NULL)
		goto out;
	fn = mk(tx, "00000000", 5, first);
	CHECK_EQ_INT(try_open(rx, first, fn), 1);
	for (unsigned i = 1; i < SEAL_MAX_SALTS; i++) {
		snprintf(salt, sizeof(salt), "%08x", i);
		n = mk(tx, salt, 5, f);
		CHECK_EQ_INT(try_open(rx, f, n), 1);
	}
	/* Full: salt 0 is still remembered (and touched by this). */
	CHECK_EQ_INT(try_open(rx, first, fn), -EALREADY);
	n = mk(tx, "00000000", 6, f);
	CHECK_EQ_INT(try_open(rx, f, n), 1);
	/* One more salt evicts the least recent: salt 1, not salt 0. */
	n = mk(tx, "ffffffff", 5, f);
	CHECK_EQ_INT(try_open(rx, f, n), 1);
	CHECK_EQ_INT(try_open(rx, first, fn), -EALREADY);
	n = mk(tx, "00000001", 5, f);
	CHECK_EQ_INT(try_open(rx, f, n), 1); /* forgotten: opens again */
out:
	seal_free(tx);
	seal_free(rx);
}

static void test_misc(void)
{
	uint8_t key[SEAL_KEY_LEN] = {5};
	struct sealer *tx = seal_new(key), *rx = seal_new(key), *other;
	uint8_t buf[128], out[128], k2[SEAL_KEY_LEN] = {6};
	const uint8_t *p;
	int n;

	CHECK(tx != NULL && rx != NULL);
	if (tx == NULL || rx == NULL)
		goto out;
	/* In place: the plaintext at out + 8, opened into in + 8. */
	memcpy(buf + SEAL_NONCE_LEN, "in place!", 9);
	n = seal_seal(tx, buf + SEAL_NONCE_LEN, 9, buf, sizeof(buf));
	CHECK_EQ_INT(n, 33);
	CHECK(memcmp(buf + SEAL_NONCE_LEN, "in place!", 9) != 0);
	memcpy(out, buf, 33);
	CHECK_EQ_INT(seal_open(rx, buf, 33, buf + SEAL_NONCE_LEN, 25), 9);
	CHECK(memcmp(buf + SEAL_NONCE_LEN, "in place!", 9) == 0);

	/* -ENOSPC comes before the window: the frame still opens later. */
	n = seal_seal(tx, (const uint8_t *)"abcdef", 6, buf, sizeof(buf));
	CHECK_EQ_INT(seal_open(rx, buf, (size_t)n, out, 5), -ENOSPC);
	CHECK_EQ_INT(seal_open(rx, buf, (size_t)n, out, 6), 6);
	CHECK_EQ_INT(seal_seal(tx, out, 6, buf, 29), -ENOSPC);
	CHECK_EQ_INT(seal_sign(tx, out, 6, buf, 29), -ENOSPC);

	/* Foreign key: every frame, sealed or signed, is refused as a bad
	 * tag, and leaves no window behind. */
	other = seal_new(k2);
	CHECK(other != NULL);
	n = seal_seal(other, (const uint8_t *)"x", 1, buf, sizeof(buf));
	CHECK_EQ_INT(seal_open(rx, buf, (size_t)n, out, sizeof(out)), -EBADMSG);
	n = seal_sign(other, (const uint8_t *)"x", 1, buf, sizeof(buf));
	CHECK_EQ_INT(seal_unsign(rx, buf, (size_t)n, &p), -EBADMSG);
	seal_free(other);

	/* Exactly 24 bytes: an empty message; 23: too short. */
	n = seal_seal(tx, NULL, 0, buf, sizeof(buf));
	CHECK_EQ_INT(n, 24);
	CHECK_EQ_INT(seal_open(rx, buf, 23, out, sizeof(out)), -EBADMSG);
	CHECK_EQ_INT(seal_open(rx, buf, 24, out, 0), 0);
	n = seal_sign(tx, NULL, 0, buf, sizeof(buf));
	CHECK_EQ_INT(seal_unsign(rx, buf, 23, &p), -EBADMSG);
	CHECK_EQ_INT(seal_unsign(rx, buf, 24, &p), 0);
	CHECK_EQ_INT(seal_unsign(rx, buf, 24, &p), -EALREADY);
	/* Every single-bit flip anywhere in a sealed frame is refused. */
	n = seal_seal(tx, (const uint8_t *)"flip me", 7, buf, sizeof(buf));
	for (int i = 0; i < n * 8; i++) {
		memcpy(out, buf, (size_t)n);
		out[i / 8] ^= (uint8_t)(1u << (i % 8));
		CHECK_EQ_INT(seal_open(rx, out, (size_t)n, out + 64, 64), -EBADMSG);
	}
	CHECK_EQ_INT(seal_open(rx, buf, (size_t)n, out, sizeof(out)), 7);
	seal_free(NULL);
out:
	seal_free(tx);
	seal_free(rx);
}

static void test_knock(struct json_object *root)
{
	struct json_object *tags = vec_get(root, "tags"), *keys = vec_get(root, "knock_keys");
	struct json_object *k = vec_get(root, "knock");
	struct json_object *prof = vec_get(k, "joiner_profile");
	struct json_object *cands = vec_get(prof, "candidates");
	uint8_t secret[SEAL_SECRET_LEN], key[SEAL_KEY_LEN];
	struct joincode c, d;
	char code[JOINCODE_MAX_TEXT], err[128], tag[25], b64[256];
	uint8_t sealed[128], opened[128];
	struct sealer *tx, *rx;
	int n;

	CHECK_EQ_INT(vec_len(tags), 4);
	for (size_t i = 0; i < vec_len(tags); i++) {
		secret_from_hex(vec_str(vec_at(tags, i), "secret_hex"), secret);
		seal_knock_tag(secret, tag);
		CHECK_EQ_STR(tag, vec_str(vec_at(tags, i), "tag"));
	}
	CHECK_EQ_INT(vec_len(keys), 6);
	for (size_t i = 0; i < vec_len(keys); i++) {
		struct json_object *e = vec_at(keys, i);

		secret_from_hex(vec_str(e, "secret_hex"), secret);
		seal_knock_key(secret, vec_str(e, "password"), key);
		CHECK(vec_eq_hex(key, sizeof(key), vec_str(e, "knock_key_hex")));
	}

	/* The joiner's profile code (unlocked, no secret, SteamID tail). */
	memset(&c, 0, sizeof(c));
	c.ts = 1790000000u;
	c.has_lan = addr_parse(&c.lan, vec_str(cands, "lan_v4"), -1) == 0;
	c.has_public = addr_parse(&c.pub, vec_str(cands, "public_v4"), -1) == 0;
	c.steam = strtoull(vec_str(cands, "steam"), NULL, 10);
	CHECK(joincode_encode(&c, NULL, code, sizeof(code), err, sizeof(err)) > 0);
	CHECK_EQ_STR(code, vec_str(k, "profile_code"));
	CHECK_EQ_STR(code, vec_str(k, "plaintext_ascii"));

	/* Sealed under the knock key, salt 0badf00d, counter 1. */
	secret_from_hex(vec_str(k, "secret_hex"), secret);
	seal_knock_key(secret, vec_str(k, "password"), key);
	tx = seal_new(key);
	rx = seal_new(key);
	CHECK(tx != NULL && rx != NULL);
	if (tx == NULL || rx == NULL)
		goto out;
	set_salt(tx, vec_str(k, "sealer_salt_hex"), (uint32_t)vec_int(k, "sealer_counter") - 1,
		 "00000000", 0);
	n = seal_seal(tx, (const uint8_t *)code, strlen(code), sealed, sizeof(sealed));
	CHECK_EQ_INT(n, (long long)strlen(code) + SEAL_OVERHEAD);
	CHECK(vec_eq_hex(sealed, (size_t)n, vec_str(k, "sealed_hex")));
	sodium_bin2base64(b64, sizeof(b64), sealed, (size_t)n, sodium_base64_VARIANT_ORIGINAL);
	CHECK_EQ_STR(b64, vec_str(k, "blob_base64"));

	/* The POST bodies, as json.dumps writes them. */
	seal_knock_tag(secret, tag);
	{
		struct strbuf sb;
		struct pyjson j;

		for (int relay = 0; relay < 2; relay++) {
			strbuf_init(&sb, 4096);
			pyjson_init(&j, &sb);
			pyjson_obj_begin(&j);
			pyjson_key(&j, "s");
			pyjson_cstr(&j, tag);
			pyjson_key(&j, "blob");
			pyjson_cstr(&j, b64);
			if (relay) {
				pyjson_key(&j, "relay");
				pyjson_int(&j, 1);
				pyjson_key(&j, "j");
				pyjson_cstr(&j, "0123456789ab");
			}
			pyjson_obj_end(&j);
			strbuf_append(&sb, "", 1);
			CHECK(!sb.bad && !j.bad);
			CHECK_EQ_STR(sb.p, vec_str(k, relay ? "post_body_with_relay_bytes"
							    : "post_body_bytes"));
			strbuf_release(&sb);
		}
	}

	/* The host opens it (once) and punches public_v4, then lan_v4. */
	n = seal_open(rx, sealed, strlen(code) + SEAL_OVERHEAD, opened, sizeof(opened) - 1);
	CHECK_EQ_INT(n, (long long)strlen(code));
	if (n >= 0) {
		struct json_object *t = vec_get(k, "host_punch_targets");
		char want[64], got[ADDR_STRLEN];

		opened[n] = '\0';
		CHECK_EQ_STR((char *)opened, vec_str(k, "host_opens_to"));
		CHECK_EQ_INT(
			joincode_decode((char *)opened, NULL, 1790000000LL, &d, err, sizeof(err)),
			0);
		CHECK_EQ_INT(vec_len(t), 2);
		snprintf(want, sizeof(want), "%s:%lld",
			 json_object_get_string(vec_at(vec_at(t, 0), 0)),
			 (long long)json_object_get_int(vec_at(vec_at(t, 0), 1)));
		CHECK_EQ_STR(addr_str(&d.pub, got, sizeof(got)), want);
		snprintf(want, sizeof(want), "%s:%lld",
			 json_object_get_string(vec_at(vec_at(t, 1), 0)),
			 (long long)json_object_get_int(vec_at(vec_at(t, 1), 1)));
		CHECK_EQ_STR(addr_str(&d.lan, got, sizeof(got)), want);
		CHECK_EQ_INT(d.steam, c.steam);
	}
	CHECK_EQ_INT(seal_open(rx, sealed, strlen(code) + SEAL_OVERHEAD, opened, sizeof(opened)),
		     -EALREADY);
	/* The session key does not open a knock. */
	{
		uint8_t sk[SEAL_KEY_LEN];
		struct sealer *sess;

		seal_derive_key(secret, vec_str(k, "password"), sk);
		sess = seal_new(sk);
		CHECK_EQ_INT(seal_open(sess, sealed, strlen(code) + SEAL_OVERHEAD, opened,
				       sizeof(opened)),
			     -EBADMSG);
		seal_free(sess);
	}
out:
	seal_free(tx);
	seal_free(rx);
}

int main(void)
{
	struct json_object *root = vec_load("seal.json");
	struct json_object *knock = vec_load("knock.json");

	if (sodium_init() < 0)
		return 1;
	if (root != NULL) {
		test_derive(root);
		test_sealed(root, false);
		test_sealed(root, true);
		test_negative(root);
		json_object_put(root);
	}
	test_window();
	test_wrap();
	test_salt_table();
	test_misc();
	if (knock != NULL) {
		test_knock(knock);
		json_object_put(knock);
	}
	return tap_done("seal");
}
