/*
 * common/realmlist: the pure rewrite on the hand-written REALM_LISTs of
 * tests/data/realmlist.json (one realm, three with SPECIFYBUILD, none,
 * addresses shorter, longer and empty, and the malformed ones), each also
 * fed alone as a stream; then whole auth conversations (logon challenge
 * with security flags 0, 1, 2, 4 and 7, proof, two realm lists, an XFER
 * that ends framing; the reconnect pair) fed in 1-byte chunks and at every
 * 2-way split, one of them at every 3-way split, always giving the same
 * stream; failure answers of each kind and length; desyncs; a malformed
 * list between good ones; body lengths at and over 65535; held bytes,
 * flush, and an output cap.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "realmlist.h"
#include "strbuf.h"
#include "tap.h"
#include "vec.h"

#define NEW_ADDR "relay.example.net:40123"

struct bytes {
	uint8_t *p;
	size_t len, cap;
};

/* Appends; the buffer grows by doubling (a 64 KB list is built from
 * thousands of small appends: growing by each would be quadratic). */
static void bytes_put(struct bytes *b, const void *p, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap > 0 ? b->cap : 64;
		uint8_t *q;

		while (cap < b->len + n + 1)
			cap *= 2;
		q = realloc(b->p, cap);
		if (q == NULL) {
			CHECK(q != NULL);
			return;
		}
		b->p = q;
		b->cap = cap;
	}
	if (n > 0)
		memcpy(b->p + b->len, p, n);
	b->len += n;
}

static void bytes_hex(struct bytes *b, const char *hex)
{
	size_t n;
	uint8_t *p = vec_hex(hex, &n);

	CHECK(p != NULL);
	if (p != NULL)
		bytes_put(b, p, n);
	free(p);
}

/* n bytes counting up from first: stands for keys, salts and hashes. */
static void bytes_run(struct bytes *b, uint8_t first, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint8_t c = (uint8_t)(first + i);

		bytes_put(b, &c, 1);
	}
}

static void bytes_free(struct bytes *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

/* A vector message: hex rows, each up to '#', spaces ignored. */
static struct bytes rows(struct json_object *arr)
{
	struct bytes b = {NULL, 0, 0};

	CHECK(vec_len(arr) > 0);
	for (size_t i = 0; i < vec_len(arr); i++) {
		const char *row = json_object_get_string(vec_at(arr, i));
		char hex[512];
		size_t n = 0;

		for (; row != NULL && *row != '\0' && *row != '#'; row++)
			if (*row != ' ' && n + 1 < sizeof(hex))
				hex[n++] = *row;
		hex[n] = '\0';
		bytes_hex(&b, hex);
	}
	bytes_put(&b, "", 0);
	return b;
}

static bool same(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
	return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

static bool out_is(const struct strbuf *out, const struct bytes *want)
{
	return same((const uint8_t *)out->p, out->len, want->p, want->len);
}

/*
 * Feeds in cut at cuts[0..ncuts) (ascending), then flushes. After each
 * feed the output must be a prefix of want; at the end it must be want,
 * with nothing pending. Returns whether all of that held; *st gets the
 * counters.
 */
static bool run_cuts(const struct bytes *in, const size_t *cuts, size_t ncuts,
		     const struct bytes *want, struct realmlist_stats *st)
{
	struct realmlist *rl = realmlist_new(NEW_ADDR);
	struct strbuf out;
	size_t at = 0;
	bool ok = rl != NULL;

	strbuf_init(&out, 1 << 20);
	for (size_t i = 0; ok && i <= ncuts; i++) {
		size_t to = i < ncuts ? cuts[i] : in->len;

		ok = realmlist_feed(rl, in->p + at, to - at, &out) == 0 && out.len <= want->len &&
		     (out.len == 0 || memcmp(out.p, want->p, out.len) == 0);
		at = to;
	}
	if (ok) {
		ok = realmlist_flush(rl, &out) == 0 && realmlist_pending(rl) == 0 &&
		     out_is(&out, want);
		*st = *realmlist_stats(rl);
	}
	strbuf_release(&out);
	realmlist_free(rl);
	return ok;
}

static bool stats_are(const struct realmlist_stats *st, uint64_t rewritten, uint64_t malformed,
		      uint64_t desync)
{
	return st->rewritten == rewritten && st->malformed == malformed && st->desync == desync;
}

/* One chunk, 1-byte chunks, every 2-way split (and every 3-way split when
 * three_way): same output and counters each time. */
static void check_splits(const struct bytes *in, const struct bytes *want, uint64_t rewritten,
			 uint64_t malformed, uint64_t desync, bool three_way)
{
	struct realmlist_stats st;
	size_t *cuts = malloc((in->len + 1) * sizeof(*cuts));
	bool ok = true;

	CHECK(cuts != NULL);
	if (cuts == NULL)
		return;
	CHECK(run_cuts(in, NULL, 0, want, &st));
	CHECK(stats_are(&st, rewritten, malformed, desync));

	for (size_t i = 0; i < in->len; i++)
		cuts[i] = i + 1;
	CHECK(run_cuts(in, cuts, in->len > 0 ? in->len - 1 : 0, want, &st));
	CHECK(stats_are(&st, rewritten, malformed, desync));

	for (size_t k = 0; ok && k <= in->len; k++) {
		cuts[0] = k;
		ok = run_cuts(in, cuts, 1, want, &st) &&
		     stats_are(&st, rewritten, malformed, desync);
		if (!ok)
			fprintf(stderr, "  2-way split at %zu of %zu\n", k, in->len);
	}
	CHECK(ok);

	for (size_t a = 0; three_way && ok && a <= in->len; a++) {
		for (size_t b = a; ok && b <= in->len; b++) {
			cuts[0] = a;
			cuts[1] = b;
			ok = run_cuts(in, cuts, 2, want, &st) &&
			     stats_are(&st, rewritten, malformed, desync);
			if (!ok)
				fprintf(stderr, "  3-way split at %zu, %zu of %zu\n", a, b,
					in->len);
		}
	}
	if (three_way)
		CHECK(ok);
	free(cuts);
}

static void test_new(void)
{
	char addr[REALMLIST_ADDR_MAX + 2];
	struct realmlist *rl;

	errno = 0;
	CHECK(realmlist_new(NULL) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(realmlist_new("") == NULL && errno == EINVAL);
	memset(addr, 'a', sizeof(addr) - 1);
	addr[sizeof(addr) - 1] = '\0';
	errno = 0;
	CHECK(realmlist_new(addr) == NULL && errno == EINVAL);
	addr[REALMLIST_ADDR_MAX] = '\0';
	rl = realmlist_new(addr);
	CHECK(rl != NULL);
	CHECK(rl != NULL && realmlist_pending(rl) == 0);
	CHECK(rl != NULL && stats_are(realmlist_stats(rl), 0, 0, 0));
	realmlist_free(rl);
	realmlist_free(NULL);
}

static int errno_of(const char *name)
{
	if (name != NULL && strcmp(name, "EBADMSG") == 0)
		return EBADMSG;
	CHECK(!"known errno name");
	return 0;
}

/* One vector alone as a stream, in one chunk and byte by byte. */
static void vector_stream(const char *mode, const struct bytes *msg, const struct bytes *expect)
{
	struct realmlist_stats st;
	struct bytes none = {NULL, 0, 0};
	size_t *cuts = malloc(msg->len * sizeof(*cuts));

	CHECK(mode != NULL && cuts != NULL);
	if (mode == NULL || cuts == NULL) {
		free(cuts);
		return;
	}
	for (size_t i = 0; i + 1 < msg->len; i++)
		cuts[i] = i + 1;
	for (int pass = 0; pass < 2; pass++) {
		size_t ncuts = pass == 0 ? 0 : msg->len - 1;

		if (strcmp(mode, "rewritten") == 0) {
			CHECK(run_cuts(msg, cuts, ncuts, expect, &st));
			CHECK(stats_are(&st, 1, 0, 0));
		} else if (strcmp(mode, "forwarded") == 0) {
			CHECK(run_cuts(msg, cuts, ncuts, msg, &st));
			CHECK(stats_are(&st, 0, 0, 0));
		} else if (strcmp(mode, "malformed") == 0) {
			CHECK(run_cuts(msg, cuts, ncuts, msg, &st));
			CHECK(stats_are(&st, 0, 1, 0));
		} else if (strcmp(mode, "desync") == 0) {
			CHECK(run_cuts(msg, cuts, ncuts, msg, &st));
			CHECK(stats_are(&st, 0, 0, 1));
		} else if (strcmp(mode, "held") == 0) {
			/* Nothing out until the flush hands all of it over. */
			struct realmlist *rl = realmlist_new(NEW_ADDR);
			struct strbuf out;
			size_t at = 0;

			CHECK(rl != NULL);
			if (rl == NULL)
				break;
			strbuf_init(&out, 1 << 20);
			for (size_t i = 0; i <= ncuts; i++) {
				size_t to = i < ncuts ? cuts[i] : msg->len;

				CHECK_EQ_INT(realmlist_feed(rl, msg->p + at, to - at, &out), 0);
				at = to;
			}
			CHECK(out_is(&out, &none));
			CHECK_EQ_INT(realmlist_pending(rl), msg->len);
			CHECK_EQ_INT(realmlist_flush(rl, &out), 0);
			CHECK(out_is(&out, msg));
			CHECK_EQ_INT(realmlist_pending(rl), 0);
			CHECK(stats_are(realmlist_stats(rl), 0, 0, 0));
			strbuf_release(&out);
			realmlist_free(rl);
		} else {
			CHECK(!"known stream mode");
		}
	}
	free(cuts);
}

static void test_vectors(struct json_object *root)
{
	struct json_object *v = vec_get(root, "rewrite");
	const char *addr = vec_str(root, "new_addr");

	CHECK(addr != NULL && strcmp(addr, NEW_ADDR) == 0);
	CHECK_EQ_INT(vec_len(v), 16);
	for (size_t i = 0; i < vec_len(v); i++) {
		struct json_object *c = vec_at(v, i);
		struct bytes msg = rows(vec_get(c, "msg")), expect = {NULL, 0, 0};
		size_t cap = msg.len + REALMLIST_ADDR_MAX;
		uint8_t *out = malloc(cap), *again = malloc(cap + REALMLIST_ADDR_MAX);
		int ret;

		CHECK(out != NULL && again != NULL);
		if (out == NULL || again == NULL || msg.p == NULL) {
			free(out);
			free(again);
			bytes_free(&msg);
			continue;
		}
		ret = realmlist_rewrite(msg.p, msg.len, NEW_ADDR, out, cap);
		if (vec_get(c, "expect") != NULL) {
			expect = rows(vec_get(c, "expect"));
			CHECK_EQ_INT(ret, (long long)expect.len);
			CHECK(ret >= 0 && same(out, (size_t)ret, expect.p, expect.len));
			if (ret < 0 || !same(out, (size_t)ret, expect.p, expect.len))
				fprintf(stderr, "  vector: %s\n", vec_str(c, "name"));
			/* Exactly enough room, and one byte short. */
			CHECK_EQ_INT(realmlist_rewrite(msg.p, msg.len, NEW_ADDR, out, expect.len),
				     (long long)expect.len);
			CHECK_EQ_INT(
				realmlist_rewrite(msg.p, msg.len, NEW_ADDR, out, expect.len - 1),
				-ENOSPC);
			/* The result parses, and rewriting it again changes nothing. */
			CHECK_EQ_INT(realmlist_rewrite(expect.p, expect.len, NEW_ADDR, again,
						       cap + REALMLIST_ADDR_MAX),
				     (long long)expect.len);
			CHECK(same(again, expect.len, expect.p, expect.len));
		} else {
			CHECK_EQ_INT(ret, -errno_of(vec_str(c, "error")));
			if (ret != -EBADMSG)
				fprintf(stderr, "  vector: %s\n", vec_str(c, "name"));
		}
		/* An address of 0 or too many bytes is refused before parsing. */
		CHECK_EQ_INT(realmlist_rewrite(msg.p, msg.len, "", out, cap), -EINVAL);
		CHECK_EQ_INT(realmlist_rewrite(msg.p, msg.len, NULL, out, cap), -EINVAL);
		vector_stream(vec_str(c, "stream"), &msg, &expect);
		free(out);
		free(again);
		bytes_free(&msg);
		bytes_free(&expect);
	}
}

/* A vector's message by index, for the conversations. */
static struct bytes vector_msg(struct json_object *root, size_t i, const char *field)
{
	return rows(vec_get(vec_at(vec_get(root, "rewrite"), i), field));
}

/*
 * AUTH_LOGON_CHALLENGE success as LogonChallengeCallback sends it: cmd,
 * 0x00, WOW_SUCCESS, B[32], g_len 1, g = 7, N_len 32, N[32], s[32],
 * version challenge[16], security flags, then PIN (u32 + 16), matrix
 * (4 x u8 + u64), token (u8) as the flags say.
 */
static void put_challenge(struct bytes *b, uint8_t flags)
{
	bytes_hex(b, "000000");
	bytes_run(b, 0xb0, 32);
	bytes_hex(b, "0107");
	bytes_hex(b, "20");
	bytes_run(b, 0x89, 32);
	bytes_run(b, 0x51, 32);
	bytes_run(b, 0xba, 16);
	bytes_put(b, &flags, 1);
	if (flags & 0x01) {
		bytes_hex(b, "00000000");
		bytes_run(b, 0x10, 16);
	}
	if (flags & 0x02)
		bytes_hex(b, "00000000"
			     "0000000000000000");
	if (flags & 0x04)
		bytes_hex(b, "01");
}

/* sAuthLogonProof_S: cmd, error 0, M2[20], AccountFlags 0x00800000,
 * SurveyId 0, LoginFlags 0. */
static void put_proof(struct bytes *b)
{
	bytes_hex(b, "0100");
	bytes_run(b, 0x10, 20);
	bytes_hex(b, "00008000"
		     "00000000"
		     "0000");
}

/* An XFER_INITIATE ("Patch", size, md5): not framed, so the end of it. */
static const char xfer_hex[] = "30"
			       "055061746368"
			       "0010000000000000"
			       "00112233445566778899aabbccddeeff";

static void test_conversations(struct json_object *root)
{
	static const uint8_t flag_sets[] = {0x00, 0x01, 0x02, 0x04, 0x07};
	struct bytes l1 = vector_msg(root, 0, "msg"), l1x = vector_msg(root, 0, "expect");
	struct bytes l2 = vector_msg(root, 1, "msg"), l2x = vector_msg(root, 1, "expect");

	for (size_t i = 0; i < sizeof(flag_sets); i++) {
		struct bytes in = {NULL, 0, 0}, want = {NULL, 0, 0};

		put_challenge(&in, flag_sets[i]);
		put_challenge(&want, flag_sets[i]);
		put_proof(&in);
		put_proof(&want);
		bytes_put(&in, l1.p, l1.len);
		bytes_put(&want, l1x.p, l1x.len);
		/* The client asks again while on the realm screen. */
		bytes_put(&in, l2.p, l2.len);
		bytes_put(&want, l2x.p, l2x.len);
		bytes_hex(&in, xfer_hex);
		bytes_hex(&want, xfer_hex);
		/* After the desync a REALM_LIST is no longer looked at. */
		bytes_put(&in, l1.p, l1.len);
		bytes_put(&want, l1.p, l1.len);
		check_splits(&in, &want, 2, 0, 1, flag_sets[i] == 0x07);
		bytes_free(&in);
		bytes_free(&want);
	}

	/* Without the XFER the stream stays framed to its end. */
	{
		struct bytes in = {NULL, 0, 0}, want = {NULL, 0, 0};

		put_challenge(&in, 0);
		put_challenge(&want, 0);
		put_proof(&in);
		put_proof(&want);
		bytes_put(&in, l2.p, l2.len);
		bytes_put(&want, l2x.p, l2x.len);
		check_splits(&in, &want, 1, 0, 0, false);
		bytes_free(&in);
		bytes_free(&want);
	}

	/* The reconnect pair: challenge (cmd, 0, 16 random, 16 more), proof
	 * (cmd, 0, u16), then the realm list. */
	{
		struct bytes in = {NULL, 0, 0}, want = {NULL, 0, 0};

		bytes_hex(&in, "0200");
		bytes_run(&in, 0x40, 16);
		bytes_run(&in, 0xba, 16);
		bytes_hex(&in, "03000000");
		bytes_put(&want, in.p, in.len);
		bytes_put(&in, l1.p, l1.len);
		bytes_put(&want, l1x.p, l1x.len);
		check_splits(&in, &want, 1, 0, 0, false);
		bytes_free(&in);
		bytes_free(&want);
	}
	bytes_free(&l1);
	bytes_free(&l1x);
	bytes_free(&l2);
	bytes_free(&l2x);
}

/* A failure answer and then the close: forwarded as it is, nothing held,
 * nothing counted, and nothing after it looked at. */
static void check_failure(const struct bytes *in)
{
	struct realmlist_stats st;

	check_splits(in, in, 0, 0, 0, false);
	CHECK(run_cuts(in, NULL, 0, in, &st));
	CHECK(stats_are(&st, 0, 0, 0));
}

static void test_failures(struct json_object *root)
{
	struct bytes l1 = vector_msg(root, 0, "msg");
	static const char *const answers[] = {
		"000004",   /* challenge: WOW_FAIL_UNKNOWN_ACCOUNT */
		"000003",   /* challenge: WOW_FAIL_BANNED */
		"0104",     /* proof: AzerothCore's VERSION_INVALID (cmd, error) */
		"01040000", /* proof: UNKNOWN_ACCOUNT, LoginFlags u16 */
		"01040300", /* proof: TrinityCore 2017's UNKNOWN_ACCOUNT, 3, 0 */
		"0204",     /* reconnect challenge: UNKNOWN_ACCOUNT */
		"0309",     /* reconnect proof: VERSION_INVALID */
	};

	for (size_t i = 0; i < sizeof(answers) / sizeof(answers[0]); i++) {
		struct bytes in = {NULL, 0, 0};

		bytes_hex(&in, answers[i]);
		check_failure(&in);
		/* Bytes after a failure are not framed: a REALM_LIST there
		 * is not the session's and stays as it is. */
		bytes_put(&in, l1.p, l1.len);
		check_failure(&in);
		bytes_free(&in);
	}
	/* TrinityCore 2017's failed challenge carries the whole body. */
	{
		struct bytes in = {NULL, 0, 0};

		put_challenge(&in, 0);
		in.p[2] = 0x09; /* WOW_FAIL_VERSION_INVALID */
		check_failure(&in);
		bytes_free(&in);
	}
	/* A failed proof after a good challenge ends framing as well. */
	{
		struct bytes in = {NULL, 0, 0};

		put_challenge(&in, 0x04);
		bytes_hex(&in, "01040000");
		bytes_put(&in, l1.p, l1.len);
		check_failure(&in);
		bytes_free(&in);
	}
	bytes_free(&l1);
}

static void test_desync(struct json_object *root)
{
	struct bytes l1 = vector_msg(root, 0, "msg");
	static const char *const starts[] = {
		"30",   /* XFER_INITIATE */
		"31",   /* XFER_DATA */
		"34",   /* XFER_CANCEL */
		"ff",   /* nothing at all */
		"0001", /* a challenge whose second byte is not 0x00 */
	};

	for (size_t i = 0; i < sizeof(starts) / sizeof(starts[0]); i++) {
		struct bytes in = {NULL, 0, 0};

		put_challenge(&in, 0);
		bytes_hex(&in, starts[i]);
		bytes_put(&in, l1.p, l1.len);
		check_splits(&in, &in, 0, 0, 1, false);
		bytes_free(&in);
	}
	/* Unknown security flag bits: the challenge's length is unknown. */
	for (unsigned bit = 3; bit < 8; bit++) {
		struct bytes in = {NULL, 0, 0};

		put_challenge(&in, (uint8_t)(1U << bit));
		put_proof(&in);
		bytes_put(&in, l1.p, l1.len);
		check_splits(&in, &in, 0, 0, 1, false);
		bytes_free(&in);
	}
	/* Counted once per stream, however many feeds follow. */
	{
		struct realmlist *rl = realmlist_new(NEW_ADDR);
		struct strbuf out;

		CHECK(rl != NULL);
		strbuf_init(&out, 1 << 16);
		for (int i = 0; rl != NULL && i < 5; i++)
			CHECK_EQ_INT(realmlist_feed(rl, (const uint8_t *)"\x30\x10\x00", 3, &out),
				     0);
		CHECK(rl != NULL && stats_are(realmlist_stats(rl), 0, 0, 1));
		CHECK_EQ_INT(out.len, 15);
		CHECK(rl != NULL && realmlist_pending(rl) == 0);
		strbuf_release(&out);
		realmlist_free(rl);
	}
	bytes_free(&l1);
}

/* A malformed REALM_LIST is framed by its own length, forwarded as it is,
 * counted, and the next one is rewritten. */
static void test_malformed_between(struct json_object *root)
{
	struct bytes bad = vector_msg(root, 5, "msg"), nofoot = vector_msg(root, 8, "msg");
	struct bytes l1 = vector_msg(root, 0, "msg"), l1x = vector_msg(root, 0, "expect");
	struct bytes in = {NULL, 0, 0}, want = {NULL, 0, 0};

	put_challenge(&in, 0);
	put_proof(&in);
	bytes_put(&want, in.p, in.len);
	bytes_put(&in, bad.p, bad.len);
	bytes_put(&want, bad.p, bad.len);
	bytes_put(&in, l1.p, l1.len);
	bytes_put(&want, l1x.p, l1x.len);
	bytes_put(&in, nofoot.p, nofoot.len);
	bytes_put(&want, nofoot.p, nofoot.len);
	bytes_put(&in, l1.p, l1.len);
	bytes_put(&want, l1x.p, l1x.len);
	check_splits(&in, &want, 2, 2, 0, false);
	bytes_free(&in);
	bytes_free(&want);
	bytes_free(&bad);
	bytes_free(&nofoot);
	bytes_free(&l1);
	bytes_free(&l1x);
}

/*
 * One realm named with name_len 'n's at address 127.0.0.1:8085; the body
 * is 34 + name_len bytes (u32, count, 3 fixed, name NUL, 15 address,
 * 7 tail, footer).
 */
static struct bytes big_list(size_t name_len)
{
	struct bytes b = {NULL, 0, 0};
	size_t body = 34 + name_len;
	uint8_t hdr[3] = {0x10, (uint8_t)body, (uint8_t)(body >> 8)};

	bytes_put(&b, hdr, 3);
	bytes_hex(&b, "00000000"
		      "0100"
		      "010000");
	for (size_t i = 0; i < name_len; i++)
		bytes_put(&b, "n", 1);
	bytes_hex(&b, "00"
		      "3132372e302e302e313a3830383500"
		      "0000803f020101"
		      "1000");
	CHECK_EQ_INT(b.len, 3 + body);
	return b;
}

static void test_body_limits(void)
{
	char addr255[REALMLIST_ADDR_MAX + 1], addr14[] = "relay.ex:40123";
	uint8_t *out = malloc(REALMLIST_MSG_MAX + REALMLIST_ADDR_MAX);
	struct bytes in;
	int ret;

	CHECK(out != NULL);
	if (out == NULL)
		return;
	memset(addr255, 'r', REALMLIST_ADDR_MAX);
	addr255[REALMLIST_ADDR_MAX] = '\0';
	CHECK_EQ_INT(strlen(addr14), 14);

	/* Body 65535, address 14 -> 255: the new body would be 65776. */
	in = big_list(65535 - 34);
	CHECK_EQ_INT(in.len, REALMLIST_MSG_MAX);
	CHECK_EQ_INT(realmlist_rewrite(in.p, in.len, addr255, out, REALMLIST_MSG_MAX + 255),
		     -EBADMSG);
	/* ... but an address of the same length fits, at exactly 65535. */
	ret = realmlist_rewrite(in.p, in.len, addr14, out, REALMLIST_MSG_MAX);
	CHECK_EQ_INT(ret, REALMLIST_MSG_MAX);
	CHECK(ret > 0 && out[1] == 0xff && out[2] == 0xff);
	/* As a stream, after a proof, in 1000-byte chunks: held until whole,
	 * then forwarded untouched and counted. */
	{
		struct realmlist *rl = realmlist_new(addr255);
		struct bytes proof = {NULL, 0, 0};
		struct strbuf o;
		size_t at = 0;
		bool ok = true;

		CHECK(rl != NULL);
		strbuf_init(&o, 1 << 20);
		put_proof(&proof);
		CHECK_EQ_INT(realmlist_feed(rl, proof.p, proof.len, &o), 0);
		CHECK_EQ_INT(o.len, proof.len);
		while (rl != NULL && at < in.len) {
			size_t k = in.len - at < 1000 ? in.len - at : 1000;

			ok = ok && realmlist_feed(rl, in.p + at, k, &o) == 0;
			at += k;
			if (at < in.len)
				ok = ok && realmlist_pending(rl) == at && o.len == proof.len;
		}
		CHECK(ok);
		CHECK(rl != NULL && realmlist_pending(rl) == 0);
		CHECK_EQ_INT(o.len, proof.len + in.len);
		CHECK(o.len == proof.len + in.len && memcmp(o.p + proof.len, in.p, in.len) == 0);
		CHECK(rl != NULL && stats_are(realmlist_stats(rl), 0, 1, 0));
		strbuf_release(&o);
		realmlist_free(rl);
		bytes_free(&proof);
	}
	bytes_free(&in);

	/* Growth of 241 up to a body of exactly 65535 is rewritten. */
	in = big_list(65535 - 34 - (REALMLIST_ADDR_MAX - 14));
	ret = realmlist_rewrite(in.p, in.len, addr255, out, REALMLIST_MSG_MAX + 255);
	CHECK_EQ_INT(ret, REALMLIST_MSG_MAX);
	CHECK(ret > 0 && out[1] == 0xff && out[2] == 0xff);
	CHECK(ret > 0 && memcmp(out + ret - 7 - 2 - 256, addr255, 255) == 0 &&
	      out[ret - 7 - 2 - 1] == 0);
	{
		struct bytes want = {NULL, 0, 0};
		struct realmlist *rl = realmlist_new(addr255);
		struct strbuf o;

		bytes_put(&want, out, (size_t)(ret > 0 ? ret : 0));
		CHECK(rl != NULL);
		strbuf_init(&o, 1 << 20);
		CHECK(rl != NULL && realmlist_feed(rl, in.p, in.len, &o) == 0);
		CHECK(out_is(&o, &want));
		CHECK(rl != NULL && stats_are(realmlist_stats(rl), 1, 0, 0));
		strbuf_release(&o);
		realmlist_free(rl);
		bytes_free(&want);
	}
	/* One more byte of name and it no longer fits: untouched, counted. */
	bytes_free(&in);
	in = big_list(65535 - 34 - (REALMLIST_ADDR_MAX - 14) + 1);
	CHECK_EQ_INT(realmlist_rewrite(in.p, in.len, addr255, out, REALMLIST_MSG_MAX + 255),
		     -EBADMSG);
	{
		struct realmlist *rl = realmlist_new(addr255);
		struct strbuf o;

		CHECK(rl != NULL);
		strbuf_init(&o, 1 << 20);
		CHECK(rl != NULL && realmlist_feed(rl, in.p, in.len, &o) == 0);
		CHECK(out_is(&o, &in));
		CHECK(rl != NULL && stats_are(realmlist_stats(rl), 0, 1, 0));
		strbuf_release(&o);
		realmlist_free(rl);
	}
	bytes_free(&in);
	free(out);
}

static void test_pending_flush(struct json_object *root)
{
	struct bytes l1 = vector_msg(root, 0, "msg"), in = {NULL, 0, 0};
	struct realmlist *rl = realmlist_new(NEW_ADDR);
	struct strbuf out;

	CHECK(rl != NULL);
	if (rl == NULL)
		return;
	strbuf_init(&out, 1 << 16);
	/* Half a challenge is held: its length is not known yet. */
	put_challenge(&in, 0x01);
	CHECK_EQ_INT(realmlist_feed(rl, in.p, 50, &out), 0);
	CHECK_EQ_INT(out.len, 0);
	CHECK_EQ_INT(realmlist_pending(rl), 50);
	/* The rest of it, and the start of a realm list. */
	CHECK_EQ_INT(realmlist_feed(rl, in.p + 50, in.len - 50, &out), 0);
	CHECK_EQ_INT(out.len, in.len);
	CHECK_EQ_INT(realmlist_pending(rl), 0);
	CHECK_EQ_INT(realmlist_feed(rl, l1.p, 10, &out), 0);
	CHECK_EQ_INT(realmlist_pending(rl), 10);
	CHECK_EQ_INT(out.len, in.len);
	/* The server closes: flush hands over the 10 bytes untouched. */
	CHECK_EQ_INT(realmlist_flush(rl, &out), 0);
	CHECK_EQ_INT(realmlist_pending(rl), 0);
	CHECK_EQ_INT(out.len, in.len + 10);
	CHECK(out.len == in.len + 10 && memcmp(out.p + in.len, l1.p, 10) == 0);
	/* A second flush has nothing. */
	CHECK_EQ_INT(realmlist_flush(rl, &out), 0);
	CHECK_EQ_INT(out.len, in.len + 10);
	/* Freeing while holding a REALM_LIST buffer frees it (ASan). */
	CHECK_EQ_INT(realmlist_feed(rl, l1.p, 10, &out), 0);
	CHECK_EQ_INT(realmlist_pending(rl), 10);
	strbuf_release(&out);
	realmlist_free(rl);
	bytes_free(&in);
	bytes_free(&l1);
}

static void test_nomem(struct json_object *root)
{
	struct bytes l1 = vector_msg(root, 0, "msg"), in = {NULL, 0, 0};
	struct realmlist *rl = realmlist_new(NEW_ADDR);
	struct strbuf out;

	CHECK(rl != NULL);
	if (rl == NULL)
		return;
	put_proof(&in);
	bytes_put(&in, l1.p, l1.len);
	/* Room for the proof, not for the rewritten list. */
	strbuf_init(&out, 40);
	CHECK_EQ_INT(realmlist_feed(rl, in.p, in.len, &out), -ENOMEM);
	CHECK(out.bad);
	CHECK_EQ_INT(realmlist_flush(rl, &out), -ENOMEM);
	strbuf_release(&out);
	realmlist_free(rl);
	bytes_free(&in);
	bytes_free(&l1);
}

int main(void)
{
	struct json_object *root = vec_load("realmlist.json");

	test_new();
	if (root != NULL) {
		test_vectors(root);
		test_conversations(root);
		test_failures(root);
		test_desync(root);
		test_malformed_between(root);
		test_pending_flush(root);
		test_nomem(root);
	}
	test_body_limits();
	json_object_put(root);
	return tap_done("realmlist_test");
}
