/*
 * common/jsonp: one whole JSON value, strict RFC 3629 UTF-8 (no overlong
 * forms, no encoded surrogates, nothing past U+10FFFF, as Python's strict
 * decoder), no NUL, bounded depth; and the borrowed field reads.
 */
#include <errno.h>
#include <json-c/json.h>
#include <string.h>

#include "jsonp.h"
#include "tap.h"

static int parse(const char *s, struct json_object **o)
{
	char err[96];

	return jsonp_parse(s, strlen(s), 8, o, err, sizeof(err));
}

static void test_utf8(void)
{
	static const char *const bad[] = {
		"\"\xc0\x80\"",         /* overlong NUL */
		"\"\xc1\xb0\"",         /* overlong 'p' */
		"\"\xe0\x80\xaf\"",     /* overlong '/' */
		"\"\xed\xa0\x80\"",     /* U+D800, a surrogate */
		"\"\xed\xbf\xbd\"",     /* U+DFFD */
		"\"\xf4\x90\x80\x80\"", /* past U+10FFFF */
		"\"\xf5\x80\x80\x80\"", "\"\xff\"", "\"\x80\"", "\"\xc3\"", "\"\xe2\x82\"",
	};
	static const char *const good[] = {
		"\"\xc3\xa9\"",         "\"\xe2\x82\xac\"", "\"\xf0\x9f\x98\x80\"",
		"\"\xf4\x8f\xbf\xbf\"", "\"\xed\x9f\xbf\"", "\"\xee\x80\x80\"",
		"\"\\udffd\"",
	};
	struct json_object *o;
	char err[96];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK_EQ_INT(parse(bad[i], &o), -EBADMSG);
		CHECK(o == NULL);
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		CHECK_EQ_INT(parse(good[i], &o), 0);
		json_object_put(o);
	}
	CHECK_EQ_INT(jsonp_parse("[\"ab\xc1\xb0\"]", 8, 8, &o, err, sizeof(err)), -EBADMSG);
	CHECK_EQ_STR(err, "offset 4: invalid UTF-8");
}

/* Where json-c 0.16 differs from Python, and jsonp follows Python. */
static void test_json_c_gaps(void)
{
	struct json_object *o;
	char err[96];

	/* A raw control character in a string: json.loads refuses it. */
	CHECK_EQ_INT(jsonp_parse("[\"a\x17\"]", 5, 8, &o, err, sizeof(err)), -EBADMSG);
	CHECK_EQ_STR(err, "offset 3: control character in a string");
	CHECK_EQ_INT(parse("[\"a\tb\"]", &o), -EBADMSG);
	/* ... but whitespace between values is fine, and escaped controls. */
	CHECK_EQ_INT(parse("[\n\t\"a\\tb\\u0017\"\r\n]", &o), 0);
	json_object_put(o);
	/* Every escaped surrogate pair decodes, those json-c gets wrong too:
	 * U+1D822 (high half D836) and U+2D800 (D876), beside an ordinary one. */
	CHECK_EQ_INT(parse("[\"x\\ud836\\udc22y\", \"\\ud876\\udc00\", \"\\ud83d\\ude00\"]", &o),
		     0);
	CHECK_EQ_STR(json_object_get_string(json_object_array_get_idx(o, 0)), "x\xf0\x9d\xa0\xa2y");
	CHECK_EQ_STR(json_object_get_string(json_object_array_get_idx(o, 1)), "\xf0\xad\xa0\x80");
	CHECK_EQ_STR(json_object_get_string(json_object_array_get_idx(o, 2)), "\xf0\x9f\x98\x80");
	json_object_put(o);
	/* An escaped backslash followed by "ud836" is text, not an escape. */
	CHECK_EQ_INT(parse("\"\\\\ud836\\u0041\"", &o), 0);
	CHECK_EQ_STR(json_object_get_string(o), "\\ud836A");
	json_object_put(o);
}

static void test_whole(void)
{
	struct json_object *o;
	char err[96];

	CHECK_EQ_INT(parse("{\"a\": 1} \n", &o), 0);
	json_object_put(o);
	CHECK_EQ_INT(parse("{\"a\": 1} x", &o), -EBADMSG);
	CHECK_EQ_INT(parse("", &o), -EBADMSG);
	CHECK_EQ_INT(parse("{\"a\": ", &o), -EBADMSG);
	CHECK_EQ_INT(jsonp_parse("\"a\0b\"", 5, 8, &o, err, sizeof(err)), -EBADMSG);
	CHECK_EQ_STR(err, "NUL byte at offset 2");
	CHECK_EQ_INT(parse("[[[[[[[[[[1]]]]]]]]]]", &o), -EBADMSG); /* deeper than 8 */
}

static void test_fields(void)
{
	struct json_object *o;
	long long v = 0;

	CHECK_EQ_INT(parse("{\"s\": \"x\", \"b\": true, \"i\": 0, \"n\": null, \"f\": 1.5}", &o),
		     0);
	CHECK_EQ_STR(jsonp_str(o, "s"), "x");
	CHECK(jsonp_str(o, "b") == NULL && jsonp_str(o, "missing") == NULL);
	CHECK(jsonp_bool(o, "b", false));
	CHECK(!jsonp_bool(o, "i", true)); /* an int: its truth */
	CHECK(jsonp_bool(o, "n", true));  /* neither: the default */
	CHECK(jsonp_int(o, "i", &v) && v == 0);
	CHECK(!jsonp_int(o, "b", &v) && !jsonp_int(o, "f", &v));
	CHECK(jsonp_str(NULL, "s") == NULL && !jsonp_bool(NULL, "b", false));
	json_object_put(o);
}

int main(void)
{
	test_utf8();
	test_json_c_gaps();
	test_whole();
	test_fields();
	return tap_done("jsonp");
}
