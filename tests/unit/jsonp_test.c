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
	test_whole();
	test_fields();
	return tap_done("jsonp");
}
