/*
 * common/qsplice: answers spliced from a kept one must be byte for byte
 * what the server answers. Vectors: tests/data/qsplice.json, captured from
 * a real OpenArena 0.8.8 server (ioquake3 1.36) by
 * tools/interop/capture-qsplice with one player connected: the answers to
 * our own challenge are the kept ones, and every other request (a short
 * challenge, none, one with ';' or '\', '%' and a byte above 127, a quoted
 * one with a space, extra arguments, a newline, a comment, 128 and 129
 * characters) must come out exactly as the server answered it, or not at
 * all where it did not answer. Then what the capture cannot show: an
 * ET-style pair in the middle, the 1024-byte limit and the BIG one, and
 * the kept answers the parser refuses.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "qsplice.h"
#include "tap.h"
#include "vec.h"

static uint8_t *tmpl_of(struct json_object *cases, const char *name, size_t *len)
{
	for (size_t i = 0; i < vec_len(cases); i++) {
		struct json_object *c = vec_at(cases, i);

		if (strcmp(vec_str(c, "name"), name) == 0)
			return vec_hex(vec_str(c, "answer"), len);
	}
	CHECK(!"kept answer missing");
	return NULL;
}

static void test_captured(void)
{
	struct json_object *root = vec_load("qsplice.json"), *cases = vec_get(root, "cases");
	const char *ours = vec_str(root, "ours");
	size_t info_len = 0, status_len = 0, checked = 0, silent = 0;
	uint8_t *info = tmpl_of(cases, "getinfo-ours", &info_len);
	uint8_t *status = tmpl_of(cases, "getstatus-ours", &status_len);
	struct qsplice_tmpl ti, ts;

	CHECK(ours != NULL && info != NULL && status != NULL);
	if (ours == NULL || info == NULL || status == NULL)
		goto out;
	CHECK_EQ_INT(qsplice_parse(info, info_len, QSPLICE_INFO, ours, strlen(ours), &ti), 0);
	CHECK_EQ_INT(qsplice_parse(status, status_len, QSPLICE_STATUS, ours, strlen(ours), &ts), 0);
	/* ioquake3: last in infoResponse, first in statusResponse. */
	CHECK_EQ_INT(ti.pair_off + ti.pair_len, info_len);
	CHECK_EQ_INT(ts.pair_off, strlen("\xff\xff\xff\xffstatusResponse\n"));
	/* The wrong kind is no answer of that kind. */
	CHECK_EQ_INT(qsplice_parse(info, info_len, QSPLICE_STATUS, ours, strlen(ours), &ts),
		     -EBADMSG);
	CHECK_EQ_INT(qsplice_parse(status, status_len, QSPLICE_STATUS, "other", 5, &ts), -ENOENT);
	CHECK_EQ_INT(qsplice_parse(status, status_len, QSPLICE_STATUS, ours, strlen(ours), &ts), 0);

	for (size_t i = 0; i < vec_len(cases); i++) {
		struct json_object *c = vec_at(cases, i);
		const char *hex_ans = vec_str(c, "answer");
		size_t req_len, ans_len = 0, ch_len;
		uint8_t *req = vec_hex(vec_str(c, "request"), &req_len), out[QSPLICE_MAX_ANSWER];
		uint8_t *ans = hex_ans != NULL ? vec_hex(hex_ans, &ans_len) : NULL;
		char ch[QSPLICE_CHALLENGE_MAX + 1];
		enum qsplice_kind kind;
		int r = qsplice_request(req, req_len, &kind, ch, &ch_len);

		if (ans == NULL) {
			/* The server did not answer: neither do we. */
			CHECK_EQ_INT(r, -E2BIG);
			silent++;
		} else {
			const struct qsplice_tmpl *t = kind == QSPLICE_INFO ? &ti : &ts;
			const uint8_t *tb = kind == QSPLICE_INFO ? info : status;
			int n;

			CHECK_EQ_INT(r, 0);
			n = qsplice_build(tb, t, ch, ch_len, out, sizeof(out));
			CHECK_EQ_INT(n, ans_len);
			CHECK_EQ_INT(qsplice_size(t, ch, ch_len), ans_len);
			if (n >= 0 && (size_t)n == ans_len) {
				CHECK(memcmp(out, ans, ans_len) == 0);
				if (memcmp(out, ans, ans_len) != 0)
					fprintf(stderr, "  case %s differs\n", vec_str(c, "name"));
				/* Too small a buffer by one byte. */
				CHECK_EQ_INT(qsplice_build(tb, t, ch, ch_len, out, ans_len - 1),
					     -EMSGSIZE);
			}
			checked++;
		}
		free(req);
		free(ans);
	}
	CHECK(checked >= 24);
	CHECK_EQ_INT(silent, 2);
out:
	free(info);
	free(status);
	json_object_put(root);
}

/* A kept answer made by hand. */
static int tmpl(struct qsplice_tmpl *t, enum qsplice_kind kind, const char *text, const char *ours)
{
	return qsplice_parse((const uint8_t *)text, strlen(text), kind, ours, strlen(ours), t);
}

static int build(const char *text, const struct qsplice_tmpl *t, const char *ch, char *out,
		 size_t size)
{
	int n = qsplice_build((const uint8_t *)text, t, ch, strlen(ch), (uint8_t *)out, size - 1);

	if (n >= 0)
		out[n] = '\0';
	return n;
}

static void test_et_style(void)
{
	/* ET: Legacy's SVC_Status appends: ...\challenge\C\version\V. */
	const char *k = "\xff\xff\xff\xffstatusResponse\n\\g_x\\1\\challenge\\ours1\\version\\ET "
			"2.83\n3 50 \"p\"\n";
	struct qsplice_tmpl t;
	char out[512];

	CHECK_EQ_INT(tmpl(&t, QSPLICE_STATUS, k, "ours1"), 0);
	CHECK_EQ_INT(build(k, &t, "xyz", out, sizeof(out)), strlen(k) - 2);
	CHECK_EQ_STR(out, "\xff\xff\xff\xffstatusResponse\n\\g_x\\1\\challenge\\xyz\\version\\ET "
			  "2.83\n3 50 \"p\"\n");
	CHECK(build(k, &t, "", out, sizeof(out)) > 0);
	CHECK_EQ_STR(out,
		     "\xff\xff\xff\xffstatusResponse\n\\g_x\\1\\version\\ET 2.83\n3 50 \"p\"\n");
	CHECK(build(k, &t, "a\"b", out, sizeof(out)) > 0);
	CHECK_EQ_STR(out,
		     "\xff\xff\xff\xffstatusResponse\n\\g_x\\1\\version\\ET 2.83\n3 50 \"p\"\n");
	/* ET's infoResponse: the challenge first. */
	k = "\xff\xff\xff\xffinfoResponse\n\\challenge\\ours1\\version\\ET\\protocol\\84";
	CHECK_EQ_INT(tmpl(&t, QSPLICE_INFO, k, "ours1"), 0);
	CHECK(build(k, &t, "Q", out, sizeof(out)) > 0);
	CHECK_EQ_STR(out,
		     "\xff\xff\xff\xffinfoResponse\n\\challenge\\Q\\version\\ET\\protocol\\84");
	/* The same key name in another case is another key. */
	k = "\xff\xff\xff\xffinfoResponse\n\\Challenge\\x\\challenge\\ours1";
	CHECK_EQ_INT(tmpl(&t, QSPLICE_INFO, k, "ours1"), 0);
	CHECK(build(k, &t, "", out, sizeof(out)) > 0);
	CHECK_EQ_STR(out, "\xff\xff\xff\xffinfoResponse\n\\Challenge\\x");
}

static void test_limits(void)
{
	/* An infostring of 1000 bytes with "\challenge\ours1" (16) in it. */
	static char k[2 * QSPLICE_INFO_BIG], out[2 * QSPLICE_INFO_BIG];
	char ch[QSPLICE_CHALLENGE_MAX + 2];
	struct qsplice_tmpl t;
	size_t hl = strlen("\xff\xff\xff\xffinfoResponse\n");

	strcpy(k, "\xff\xff\xff\xffinfoResponse\n\\k\\");
	memset(k + strlen(k), 'v', 1000 - 16 - 3);
	strcat(k, "\\challenge\\ours1");
	CHECK_EQ_INT(strlen(k) - hl, 1000);
	CHECK_EQ_INT(tmpl(&t, QSPLICE_INFO, k, "ours1"), 0);
	/* 1000 - 5 + 28 = 1023: still under MAX_INFO_STRING. */
	memset(ch, 'c', 28);
	ch[28] = '\0';
	CHECK_EQ_INT(build(k, &t, ch, out, sizeof(out)), hl + 1023);
	/* One more reaches 1024: the engine would drop something. */
	strcat(ch, "c");
	CHECK_EQ_INT(build(k, &t, ch, out, sizeof(out)), -ERANGE);
	CHECK_EQ_INT(qsplice_size(&t, ch, strlen(ch)), -ERANGE);
	/* Without a challenge the string only gets shorter. */
	CHECK_EQ_INT(build(k, &t, "", out, sizeof(out)), hl + 1000 - 16);
	/* Over 128: never answered. */
	memset(ch, 'c', 129);
	ch[129] = '\0';
	CHECK_EQ_INT(build(k, &t, ch, out, sizeof(out)), -E2BIG);

	/* A kept answer already past 1024: a BIG_INFO_STRING engine. */
	strcpy(k, "\xff\xff\xff\xffstatusResponse\n\\challenge\\ours1\\k\\");
	memset(k + strlen(k), 'v', 2000);
	strcat(k, "\n");
	CHECK_EQ_INT(tmpl(&t, QSPLICE_STATUS, k, "ours1"), 0);
	memset(ch, 'c', 128);
	ch[128] = '\0';
	CHECK(build(k, &t, ch, out, sizeof(out)) > 0);
	/* ... and one of 8192 or more is no answer at all. */
	strcpy(k, "\xff\xff\xff\xffstatusResponse\n\\challenge\\ours1\\k\\");
	memset(k + strlen(k), 'v', QSPLICE_INFO_BIG);
	strcat(k, "\n");
	CHECK_EQ_INT(tmpl(&t, QSPLICE_STATUS, k, "ours1"), -EBADMSG);
}

static void test_refused(void)
{
	struct qsplice_tmpl t;
	uint8_t nul[] = "\xff\xff\xff\xffinfoResponse\n\\challenge\\ours1\\a\0b";
	static uint8_t big[QSPLICE_MAX_ANSWER + 1];

	CHECK_EQ_INT(tmpl(&t, QSPLICE_INFO, "\xff\xff\xff\xffinfoResponse\n\\a\\b", "ours1"),
		     -ENOENT);
	CHECK_EQ_INT(tmpl(&t, QSPLICE_INFO,
			  "\xff\xff\xff\xffinfoResponse\n\\challenge\\ours1\\challenge\\ours1",
			  "ours1"),
		     -ENOENT);
	CHECK_EQ_INT(tmpl(&t, QSPLICE_INFO, "\xff\xff\xff\xffinfoResponse\n\\challenge\\ours12",
			  "ours1"),
		     -ENOENT);
	/* A pair that does not start with '\' (the string's first). */
	CHECK_EQ_INT(
		tmpl(&t, QSPLICE_INFO, "\xff\xff\xff\xffinfoResponse\nchallenge\\ours1", "ours1"),
		-ENOENT);
	CHECK_EQ_INT(tmpl(&t, QSPLICE_STATUS, "\xff\xff\xff\xffstatusResponse\n\\challenge\\ours1",
			  "ours1"),
		     -EBADMSG);
	CHECK_EQ_INT(tmpl(&t, QSPLICE_INFO, "\xff\xff\xff\xffinfoRespons", "ours1"), -EBADMSG);
	CHECK_EQ_INT(
		tmpl(&t, QSPLICE_INFO, "\xff\xff\xff\xfeinfoResponse\n\\challenge\\ours1", "ours1"),
		-EBADMSG);
	CHECK_EQ_INT(qsplice_parse(nul, sizeof(nul) - 1, QSPLICE_INFO, "ours1", 5, &t), -EBADMSG);
	memcpy(big, "\xff\xff\xff\xffinfoResponse\n\\challenge\\ours1\\k\\", 33);
	memset(big + 33, 'v', sizeof(big) - 33);
	CHECK_EQ_INT(qsplice_parse(big, sizeof(big), QSPLICE_INFO, "ours1", 5, &t), -EBADMSG);
	/* Our own challenge must be one the engine echoes unchanged. */
	CHECK_EQ_INT(
		tmpl(&t, QSPLICE_INFO, "\xff\xff\xff\xffinfoResponse\n\\challenge\\a;b", "a;b"),
		-EINVAL);
	CHECK_EQ_INT(tmpl(&t, QSPLICE_INFO, "\xff\xff\xff\xffinfoResponse\n", ""), -EINVAL);
	CHECK_EQ_INT(
		tmpl(&t, QSPLICE_INFO, "\xff\xff\xff\xffinfoResponse\n\\challenge\\a%b", "a%b"),
		-EINVAL);
}

static void test_request(void)
{
	char ch[QSPLICE_CHALLENGE_MAX + 1];
	enum qsplice_kind kind;
	size_t n;

	CHECK_EQ_INT(
		qsplice_request((const uint8_t *)"\xff\xff\xff\xffGetStatus", 13, &kind, ch, &n),
		0);
	CHECK(kind == QSPLICE_STATUS && n == 0 && ch[0] == '\0');
	CHECK_EQ_INT(qsplice_request((const uint8_t *)"\xff\xff\xff\xffgetinfo  x1 y", 16, &kind,
				     ch, &n),
		     0);
	CHECK(kind == QSPLICE_INFO && n == 2);
	CHECK_EQ_STR(ch, "x1");
	CHECK_EQ_INT(
		qsplice_request((const uint8_t *)"\xff\xff\xff\xffgetchallenge", 16, &kind, ch, &n),
		-EBADMSG);
	CHECK_EQ_INT(qsplice_request((const uint8_t *)"getinfo", 7, &kind, ch, &n), -EBADMSG);
	CHECK_EQ_INT(qsplice_request((const uint8_t *)"\xff\xff\xff\xff", 4, &kind, ch, &n),
		     -EBADMSG);
}

int main(void)
{
	test_captured();
	test_et_style();
	test_limits();
	test_refused();
	test_request();
	return tap_done("qsplice");
}
