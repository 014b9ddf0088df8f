/*
 * pyjson: the output must be byte for byte Python's json.dumps() with its
 * defaults. The expected texts below were printed by Python 3.11's
 * json.dumps / repr on this machine.
 */
#include <math.h>
#include <string.h>

#include "pyjson.h"
#include "strbuf.h"
#include "tap.h"

static void check_float(double v, const char *want)
{
	char buf[40];

	CHECK_EQ_STR(pyjson_repr_double(v, buf, sizeof(buf)), want);
}

static void test_floats(void)
{
	check_float(0.0, "0.0");
	check_float(-0.0, "-0.0");
	check_float(1.0, "1.0");
	check_float(-1.5, "-1.5");
	check_float(0.1, "0.1");
	check_float(1.0 / 3, "0.3333333333333333");
	check_float(1796033233.3361585, "1796033233.3361585");
	check_float(1796033233.343872, "1796033233.343872");
	check_float(1e16, "1e+16");
	check_float(1.5e16, "1.5e+16");
	check_float(1e-5, "1e-05");
	check_float(0.0001, "0.0001");
	check_float(123456789012345.6, "123456789012345.6");
	check_float(1e22, "1e+22");
	check_float(5e-324, "5e-324");
	check_float(1.7976931348623157e308, "1.7976931348623157e+308");
	check_float(2.5, "2.5");
	check_float(100.0, "100.0");
	check_float(1e15, "1000000000000000.0");
	check_float(12345678901234567890.0, "1.2345678901234567e+19");
}

static void check_str(const char *in, size_t len, const char *want)
{
	struct strbuf b;
	struct pyjson j;

	strbuf_init(&b, 4096);
	pyjson_init(&j, &b);
	pyjson_str(&j, in, len);
	CHECK_EQ_STR(b.p, want);
	strbuf_release(&b);
}

static void test_strings(void)
{
	check_str("plain", 5, "\"plain\"");
	check_str("quote\"back\\slash", 16, "\"quote\\\"back\\\\slash\"");
	check_str("nl\ntab\tcr\r", 10, "\"nl\\ntab\\tcr\\r\"");
	check_str("\b\f\x01\x1f\x7f", 5, "\"\\b\\f\\u0001\\u001f\\u007f\"");
	check_str("\xc3\xa9", 2, "\"\\u00e9\"");
	check_str("\xe6\x97\xa5\xe6\x9c\xac", 6, "\"\\u65e5\\u672c\"");
	check_str("\xf0\x9f\x98\x80", 4, "\"\\ud83d\\ude00\"");
	check_str("mix \xc3\xa9 \xf0\x9f\x98\x80 \xe2\x80\xa8", 15,
		  "\"mix \\u00e9 \\ud83d\\ude00 \\u2028\"");
	/* Not UTF-8: each bad byte becomes U+FFFD rather than passing raw. */
	check_str("a\xff"
		  "b",
		  3, "\"a\\ufffdb\"");
	check_str("", 0, "\"\"");
}

static void test_structure(void)
{
	struct strbuf b;
	struct pyjson j;

	strbuf_init(&b, 4096);
	pyjson_init(&j, &b);
	pyjson_obj_begin(&j);
	pyjson_key(&j, "servers");
	pyjson_arr_begin(&j);
	pyjson_obj_begin(&j);
	pyjson_key(&j, "name");
	pyjson_cstr(&j, "a");
	pyjson_key(&j, "locked");
	pyjson_bool(&j, false);
	pyjson_key(&j, "age");
	pyjson_int(&j, 0);
	pyjson_obj_end(&j);
	pyjson_arr_end(&j);
	pyjson_key(&j, "now");
	pyjson_int(&j, 1);
	pyjson_key(&j, "ttl");
	pyjson_int(&j, 30);
	pyjson_obj_end(&j);
	CHECK_EQ_STR(b.p, "{\"servers\": [{\"name\": \"a\", \"locked\": false, \"age\": 0}], "
			  "\"now\": 1, \"ttl\": 30}");
	strbuf_release(&b);

	strbuf_init(&b, 4096);
	pyjson_init(&j, &b);
	pyjson_obj_begin(&j);
	pyjson_key(&j, "a");
	pyjson_arr_begin(&j);
	pyjson_arr_end(&j);
	pyjson_key(&j, "b");
	pyjson_obj_begin(&j);
	pyjson_obj_end(&j);
	pyjson_key(&j, "c");
	pyjson_null(&j);
	pyjson_key(&j, "d");
	pyjson_arr_begin(&j);
	pyjson_int(&j, 1);
	pyjson_arr_begin(&j);
	pyjson_int(&j, 2);
	pyjson_obj_begin(&j);
	pyjson_obj_end(&j);
	pyjson_arr_end(&j);
	pyjson_arr_end(&j);
	pyjson_obj_end(&j);
	CHECK_EQ_STR(b.p, "{\"a\": [], \"b\": {}, \"c\": null, \"d\": [1, [2, {}]]}");
	CHECK(!j.bad);
	strbuf_release(&b);
}

int main(void)
{
	test_floats();
	test_strings();
	test_structure();
	return tap_done("pyjson");
}
