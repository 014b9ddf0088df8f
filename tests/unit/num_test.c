/*
 * common/num: the one checked decimal parser - digits only, a sign only when
 * asked for, the range checked without overflow, nothing before or after.
 */
#include <errno.h>
#include <stdint.h>

#include "num.h"
#include "tap.h"

static int parse(const char *s, int64_t min, int64_t max, unsigned flags, int64_t *v)
{
	return num_parse_str(s, min, max, flags, v);
}

static void test_plain(void)
{
	int64_t v = -1;

	CHECK_EQ_INT(parse("0", 0, 10, 0, &v), 0);
	CHECK_EQ_INT(v, 0);
	CHECK_EQ_INT(parse("007", 0, 10, 0, &v), 0);
	CHECK_EQ_INT(v, 7);
	CHECK_EQ_INT(parse("65535", 0, 65535, 0, &v), 0);
	CHECK_EQ_INT(v, 65535);
	CHECK_EQ_INT(parse("65536", 0, 65535, 0, &v), -ERANGE);
	CHECK_EQ_INT(parse("5", 10, 20, 0, &v), -ERANGE);
	CHECK_EQ_INT(parse("9223372036854775807", 0, INT64_MAX, 0, &v), 0);
	CHECK(v == INT64_MAX);
	CHECK_EQ_INT(parse("9223372036854775808", 0, INT64_MAX, 0, &v), -ERANGE);
	CHECK_EQ_INT(parse("99999999999999999999999999", 0, INT64_MAX, 0, &v), -ERANGE);
	/* Not numbers at all. */
	v = 42;
	CHECK_EQ_INT(parse("", 0, 10, 0, &v), -EINVAL);
	CHECK_EQ_INT(parse(" 1", 0, 10, 0, &v), -EINVAL);
	CHECK_EQ_INT(parse("1 ", 0, 10, 0, &v), -EINVAL);
	CHECK_EQ_INT(parse("0x10", 0, 100, 0, &v), -EINVAL);
	CHECK_EQ_INT(parse("1e3", 0, 10000, 0, &v), -EINVAL);
	CHECK_EQ_INT(parse("+1", 0, 10, 0, &v), -EINVAL);
	CHECK_EQ_INT(parse("-1", -10, 10, 0, &v), -EINVAL);
	CHECK_EQ_INT(parse("99999999999999999999x", 0, INT64_MAX, 0, &v), -EINVAL);
	CHECK(num_parse_str(NULL, 0, 1, 0, &v) == -EINVAL);
	CHECK_EQ_INT(v, 42); /* untouched on failure */
}

static void test_sign(void)
{
	int64_t v = 0;

	CHECK_EQ_INT(parse("-1", -10, 10, NUM_SIGN, &v), 0);
	CHECK_EQ_INT(v, -1);
	CHECK_EQ_INT(parse("+12", -100, 100, NUM_SIGN, &v), 0);
	CHECK_EQ_INT(v, 12);
	CHECK_EQ_INT(parse("-", -10, 10, NUM_SIGN, &v), -EINVAL);
	CHECK_EQ_INT(parse("+", -10, 10, NUM_SIGN, &v), -EINVAL);
	CHECK_EQ_INT(parse("--1", -10, 10, NUM_SIGN, &v), -EINVAL);
	CHECK_EQ_INT(parse("-9223372036854775808", INT64_MIN, INT64_MAX, NUM_SIGN, &v), 0);
	CHECK(v == INT64_MIN);
	CHECK_EQ_INT(parse("-9223372036854775809", INT64_MIN, INT64_MAX, NUM_SIGN, &v), -ERANGE);
	CHECK_EQ_INT(parse("-11", -10, 10, NUM_SIGN, &v), -ERANGE);
}

static void test_len(void)
{
	int64_t v = 0;

	/* Only len bytes are read: no NUL needed. */
	CHECK_EQ_INT(num_parse("123456", 3, 0, 1000, 0, &v), 0);
	CHECK_EQ_INT(v, 123);
	CHECK_EQ_INT(num_parse("1\0002", 3, 0, 1000, 0, &v), -EINVAL);
}

static void test_prefix(void)
{
	uint64_t v = 0;

	CHECK_EQ_INT(num_prefix_u64("64:12", 5, UINT64_MAX, &v), 2);
	CHECK_EQ_INT(v, 64);
	CHECK_EQ_INT(num_prefix_u64(":12", 3, UINT64_MAX, &v), -EINVAL);
	CHECK_EQ_INT(num_prefix_u64("18446744073709551615", 20, UINT64_MAX, &v), 20);
	CHECK(v == UINT64_MAX);
	CHECK_EQ_INT(num_prefix_u64("18446744073709551616", 20, UINT64_MAX, &v), -ERANGE);
	CHECK_EQ_INT(num_prefix_u64("10", 2, 9, &v), -ERANGE);
	CHECK_EQ_INT(num_prefix_u64("9", 1, 9, &v), 1);
	CHECK_EQ_INT(num_prefix_u64("5", 1, 0, &v), -ERANGE);
}

int main(void)
{
	test_plain();
	test_sign();
	test_len();
	test_prefix();
	return tap_done("num");
}
