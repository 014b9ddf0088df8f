/*
 * master_py: Python's str(), int(), float(), truthiness and json.loads as
 * the netpunch reference applies them. Every expected value below was
 * printed by Python 3.11 on this machine (str(json.loads(x)), the
 * reference's _int(v or 8, 8), float(s), json.loads acceptance).
 */
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "master_py.h"
#include "strbuf.h"
#include "tap.h"

static struct json_object *loads(const char *text)
{
	struct json_object *o = NULL;
	char err[128];

	if (master_py_json_loads(text, strlen(text), &o, err, sizeof(err)) < 0)
		return NULL;
	return o;
}

static void check_str(const char *json, const char *want)
{
	struct json_object *d;
	char wrapped[512], got[1024];

	/* Through an object so null works the way d.get() sees it. */
	snprintf(wrapped, sizeof(wrapped), "{\"v\": %s}", json);
	d = loads(wrapped);
	CHECK(d != NULL);
	if (d == NULL)
		return;
	master_py_field_str(d, "v", 1000, got, sizeof(got));
	CHECK_EQ_STR(got, want);
	json_object_put(d);
}

static void test_str(void)
{
	check_str("\"abc\"", "abc");
	check_str("7", "7");
	check_str("7.0", "7.0");
	check_str("1e16", "1e+16");
	check_str("true", "True");
	check_str("false", "False");
	check_str("null", "");
	check_str("[1, \"a\", true, null]", "[1, 'a', True, None]");
	check_str("{\"k\": \"v\", \"n\": 1.5}", "{'k': 'v', 'n': 1.5}");
	check_str("\"it's\"", "it's");
	check_str("[\"it's \\\"q\\\"\"]", "['it\\'s \"q\"']");
	check_str("[1e400]", "[inf]");
	check_str("\"\\u00e9\"", "\xc3\xa9");
	check_str("[0.1, -0.0]", "[0.1, -0.0]");
	check_str("{\"a\": {\"b\": []}}", "{'a': {'b': []}}");
	check_str("[\"a\\nb\"]", "['a\\nb']");
	/* Python strings hold what C strings cannot: U+0000 is kept as the
	 * bytes C0 80, a lone surrogate in its 3-byte form, an integer past
	 * 64 bits with all its digits. */
	check_str("\"a\\u0000b\"", "a\xc0\x80"
				   "b");
	check_str("[\"\\ud800\"]", "['\\ud800']");
	check_str("123456789012345678901234567890", "123456789012345678901234567890");
	check_str("[\"\\u200b\"]", "['\\u200b']");
}

static void test_cut(void)
{
	char out[64];

	master_py_cut("h\xc3\xa9llo w\xc3\xb6rld", 5, out, sizeof(out));
	CHECK_EQ_STR(out, "h\xc3\xa9llo");
	master_py_cut("\xf0\x9f\x98\x80\xf0\x9f\x98\x80", 1, out, sizeof(out));
	CHECK_EQ_STR(out, "\xf0\x9f\x98\x80");
	/* The buffer limit cuts on a character boundary too. */
	master_py_cut("\xf0\x9f\x98\x80\xf0\x9f\x98\x80", 10, out, 6);
	CHECK_EQ_STR(out, "\xf0\x9f\x98\x80");
	CHECK_EQ_INT(master_py_utf8_chars("h\xc3\xa9llo \xf0\x9f\x98\x80"), 7);
}

static void check_int(const char *json, int want)
{
	struct json_object *d;
	char wrapped[256];

	snprintf(wrapped, sizeof(wrapped), "{\"v\": %s}", json);
	d = loads(wrapped);
	CHECK(d != NULL);
	if (d == NULL)
		return;
	/* The reference's max: _int(d.get("max") or 8, 8) clamped 0..10000. */
	CHECK_EQ_INT(master_py_field_int_or(d, "v", 8, 8, 0, 10000), want);
	json_object_put(d);
}

static void test_int(void)
{
	check_int("\"7\"", 7);
	check_int("\" 7 \"", 7);
	check_int("\"7.5\"", 8);
	check_int("7.9", 7);
	check_int("true", 1);
	check_int("\"1_000\"", 1000);
	check_int("\"+5\"", 5);
	check_int("\"-5\"", 0);
	check_int("\"0x10\"", 8);
	check_int("\"abc\"", 8);
	check_int("[1]", 8);
	check_int("1e400", 8);
	check_int("\"99999999999999999999\"", 10000);
	check_int("\"_1\"", 8);
	check_int("\"1__0\"", 8);
	check_int("\"0\"", 0);
	check_int("0", 8);
	check_int("\"\"", 8);
	check_int("\"007\"", 7);
	check_int("-7.9", 0);
	check_int("\"\\t42\\n\"", 42);
	check_int("\"\\u0661\\u0662\"", 12); /* int() reads Unicode digits */
}

static void check_float(const char *s, bool ok, double want)
{
	double v = -12345;
	bool got = master_py_float_str(s, &v);

	CHECK_EQ_INT(got, ok);
	if (ok && got) {
		if (isnan(want))
			CHECK(isnan(v));
		else
			CHECK(v == want);
	}
}

static void test_float(void)
{
	check_float("1.5", true, 1.5);
	check_float(" 2 ", true, 2.0);
	check_float("inf", true, INFINITY);
	check_float("-Infinity", true, -INFINITY);
	check_float("nan", true, NAN);
	check_float("1_0.5", true, 10.5);
	check_float("1e3", true, 1000.0);
	check_float("abc", false, 0);
	check_float("", false, 0);
	check_float("0x10", false, 0);
	check_float(".5", true, 0.5);
	check_float("5.", true, 5.0);
	check_float("1__0", false, 0);
	check_float("+1", true, 1.0);
	check_float("1.2.3", false, 0);
}

/* "c" * n + tail into buf (n + strlen(tail) < size). */
static const char *rep(char *buf, size_t size, char c, size_t n, const char *tail)
{
	snprintf(buf + n, size - n, "%s", tail);
	memset(buf, c, n);
	return buf;
}

/*
 * int() and float() have no length limit below Python's 4,300 digits (a
 * body is 4 KiB at most): long strings are read as a whole, not saturated
 * or refused for their length. Python 3.11 printed each value.
 */
static void test_long_numbers(void)
{
	char b[1024];
	long long v;
	double d;

	/* int(" " * 200): ValueError; it was once LLONG_MAX. */
	CHECK(!master_py_int_str(rep(b, sizeof(b), ' ', 200, ""), &v));
	CHECK(!master_py_int_str(rep(b, sizeof(b), ' ', 200, "+"), &v));
	/* int("0" * 300 + "1") == 1, not saturated. */
	v = 0;
	CHECK(master_py_int_str(rep(b, sizeof(b), '0', 300, "1"), &v) && v == 1);
	b[0] = '-';
	CHECK(master_py_int_str(b, &v) && v == -1);
	/* int(" " * 150 + "-7" + " " * 150) == -7. */
	rep(b, sizeof(b), ' ', 150, "-7");
	memset(b + 152, ' ', 150);
	b[302] = '\0';
	CHECK(master_py_int_str(b, &v) && v == -7);
	/* int("1" + " " * 130 + "2"): ValueError. */
	rep(b, sizeof(b), ' ', 131, "2");
	b[0] = '1';
	CHECK(!master_py_int_str(b, &v));
	/* int("1__0" + "0" * 200), int("_1" + "0" * 200): ValueError. */
	rep(b, sizeof(b), '0', 204, "");
	memcpy(b, "1__", 3);
	CHECK(!master_py_int_str(b, &v));
	memcpy(b, "_1", 2);
	CHECK(!master_py_int_str(b, &v));
	/* Past int64 at any length: saturated, as the clamps want it. */
	CHECK(master_py_int_str(rep(b, sizeof(b), '9', 700, ""), &v) && v == LLONG_MAX);
	b[0] = '-';
	CHECK(master_py_int_str(b, &v) && v == LLONG_MIN + 1);
	/* float("9" * 700) is inf, float("0" * 600 + "1") is 1.0. */
	CHECK(master_py_float_str(rep(b, sizeof(b), '9', 700, ""), &d) && isinf(d) && d > 0);
	CHECK(master_py_float_str(rep(b, sizeof(b), '0', 600, "1"), &d) && d == 1.0);
	CHECK(!master_py_float_str(rep(b, sizeof(b), ' ', 600, ""), &d));
	/* Through a body: {"v": " " * 200} is int()'s ValueError, the default. */
	{
		char body[300];
		struct json_object *o;

		snprintf(body, sizeof(body), "{\"v\": \"%s\"}", rep(b, sizeof(b), ' ', 200, ""));
		o = loads(body);
		CHECK(o != NULL && master_py_field_int_or(o, "v", 8, 8, 0, 10000) == 8);
		json_object_put(o);
	}
}

static void check_loads(const char *text, bool ok)
{
	struct json_object *o = NULL;
	char err[128];
	int r = master_py_json_loads(text, strlen(text), &o, err, sizeof(err));

	if ((r == 0) != ok)
		fprintf(stderr, "loads %s: got %d (%s)\n", text, r, r < 0 ? err : "ok");
	CHECK_EQ_INT(r == 0, ok);
	json_object_put(o);
}

static void test_loads(void)
{
	check_loads("{\"a\":1}", true);
	check_loads("{'a':1}", false);
	check_loads("[1,]", false);
	check_loads("{\"a\":1,}", false);
	check_loads("[NaN, -Infinity, Infinity]", true);
	check_loads("[1] x", false);
	check_loads(" {} ", true);
	check_loads("01", false);
	check_loads("\"\\x\"", false);
	check_loads("\"a\tb\"", false);
	check_loads("1.", false);
	check_loads(".5", false);
	check_loads("-", false);
	check_loads("{\"a\" 1}", false);
	check_loads("[]", true);
	check_loads("{\"a\": /* c */ 1}", false);
	check_loads("[\"\xff\"]", false);   /* not UTF-8: Python's decode fails */
	check_loads("\"\xc0\xaf\"", false); /* an overlong encoding is not UTF-8 either */
	{
		/* Python's recursion limit allows 985 levels of nesting here. */
		char deep[2 * 986 + 1];

		memset(deep, '[', 985);
		memset(deep + 985, ']', 985);
		deep[2 * 985] = '\0';
		check_loads(deep, true);
		memset(deep, '[', 986);
		memset(deep + 986, ']', 986);
		deep[2 * 986] = '\0';
		check_loads(deep, false);
	}
}

static void test_truthy(void)
{
	const char *falsy[] = {"0", "0.0", "\"\"", "[]", "{}", "false", "null"};
	const char *truthy[] = {"1", "-0.5", "\"0\"", "\"false\"", "[0]", "{\"a\":0}", "true"};

	for (size_t i = 0; i < 7; i++) {
		char w[64];
		struct json_object *d;

		snprintf(w, sizeof(w), "{\"v\": %s}", falsy[i]);
		d = loads(w);
		CHECK(d != NULL && !master_py_truthy_field(d, "v"));
		json_object_put(d);
		snprintf(w, sizeof(w), "{\"v\": %s}", truthy[i]);
		d = loads(w);
		CHECK(d != NULL && master_py_truthy_field(d, "v"));
		json_object_put(d);
	}
}

int main(void)
{
	test_str();
	test_cut();
	test_int();
	test_float();
	test_long_numbers();
	test_loads();
	test_truthy();
	return tap_done("masterpy");
}
