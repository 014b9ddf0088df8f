/*
 * common/acceptenc: Accept-Encoding as RFC 9110 §12.5.3 writes it and as
 * browsers, curl and proxies send it; q-values, refusals, "*", identity.
 */
#include <errno.h>
#include <string.h>

#include "acceptenc.h"
#include "tap.h"

static int parse(const char *s, struct acceptenc *a)
{
	return acceptenc_parse(s, strlen(s), a);
}

/* The coding picked for a header value, or -1 when it does not parse. */
static int pick(const char *s)
{
	struct acceptenc a;

	if (parse(s, &a) < 0)
		return -1;
	return (int)acceptenc_pick(&a);
}

static void test_values(void)
{
	struct acceptenc a;

	CHECK_EQ_INT(parse("gzip, deflate, br", &a), 0);
	CHECK_EQ_INT(a.gzip, 1000);
	CHECK_EQ_INT(a.identity, -1);
	CHECK_EQ_INT(a.any, -1);
	CHECK_EQ_INT(parse("gzip;q=0.5, identity;q=0.25,*;q=0", &a), 0);
	CHECK_EQ_INT(a.gzip, 500);
	CHECK_EQ_INT(a.identity, 250);
	CHECK_EQ_INT(a.any, 0);
	CHECK_EQ_INT(parse("GZip ; Q=0.001", &a), 0);
	CHECK_EQ_INT(a.gzip, 1);
	CHECK_EQ_INT(parse("x-gzip;q=1.000", &a), 0);
	CHECK_EQ_INT(a.gzip, 1000);
	/* Named twice: the highest q. */
	CHECK_EQ_INT(parse("gzip;q=0.2, gzip;q=0.7, gzip;q=0.1", &a), 0);
	CHECK_EQ_INT(a.gzip, 700);
	/* Empty elements and OWS (§5.6.1). */
	CHECK_EQ_INT(parse(" ,, gzip ,\t, ", &a), 0);
	CHECK_EQ_INT(a.gzip, 1000);
	/* Parameters other than q are skipped. */
	CHECK_EQ_INT(parse("gzip;level=9;q=0.3, br;x=\"a,b\\\"c\"", &a), 0);
	CHECK_EQ_INT(a.gzip, 300);
	CHECK_EQ_INT(parse("", &a), 0);
	CHECK_EQ_INT(a.gzip, -1);
}

static void test_malformed(void)
{
	struct acceptenc a;

	CHECK_EQ_INT(parse("gzip;q=1.5", &a), -EBADMSG);
	CHECK_EQ_INT(a.gzip, -1);
	CHECK_EQ_INT(parse("gzip;q=1.001", &a), -EBADMSG);
	CHECK_EQ_INT(parse("gzip;q=0.0001", &a), -EBADMSG);
	CHECK_EQ_INT(parse("gzip;q=2", &a), -EBADMSG);
	CHECK_EQ_INT(parse("gzip;q=", &a), -EBADMSG);
	CHECK_EQ_INT(parse("gzip;q=.5", &a), -EBADMSG);
	CHECK_EQ_INT(parse("gzip;q", &a), -EBADMSG);
	CHECK_EQ_INT(parse("gzip;", &a), -EBADMSG);
	CHECK_EQ_INT(parse("gzip deflate", &a), -EBADMSG);
	CHECK_EQ_INT(parse("gzip;x=\"open", &a), -EBADMSG);
	CHECK_EQ_INT(parse(";q=1", &a), -EBADMSG);
	CHECK_EQ_INT(parse("gz\x01ip", &a), -EBADMSG);
	/* A NUL inside the length is not the end. */
	CHECK_EQ_INT(acceptenc_parse("gzip\0, br", 9, &a), -EBADMSG);
}

static void test_cap(void)
{
	char buf[ACCEPTENC_MAX_ITEMS * 3 + 8];
	struct acceptenc a;
	size_t n = 0;

	for (int i = 0; i < ACCEPTENC_MAX_ITEMS; i++) {
		memcpy(buf + n, "a, ", 3);
		n += 3;
	}
	CHECK_EQ_INT(acceptenc_parse(buf, n, &a), 0);
	memcpy(buf + n, "gzip", 4);
	CHECK_EQ_INT(acceptenc_parse(buf, n + 4, &a), -E2BIG);
}

static void test_pick(void)
{
	CHECK_EQ_INT(pick("gzip"), ACCEPTENC_GZIP);
	CHECK_EQ_INT(pick("gzip, deflate, br, zstd"), ACCEPTENC_GZIP);
	CHECK_EQ_INT(pick("deflate, br"), ACCEPTENC_IDENTITY);
	CHECK_EQ_INT(pick(""), ACCEPTENC_IDENTITY); /* identity only */
	CHECK_EQ_INT(pick("gzip;q=0"), ACCEPTENC_IDENTITY);
	CHECK_EQ_INT(pick("gzip;q=0.000"), ACCEPTENC_IDENTITY);
	CHECK_EQ_INT(pick("gzip;q=0.001"), ACCEPTENC_GZIP); /* identity unnamed */
	CHECK_EQ_INT(pick("*"), ACCEPTENC_GZIP);
	CHECK_EQ_INT(pick("*;q=0.5"), ACCEPTENC_GZIP); /* a tie: gzip */
	CHECK_EQ_INT(pick("*;q=0"), ACCEPTENC_NONE);
	CHECK_EQ_INT(pick("*;q=0, gzip"), ACCEPTENC_GZIP);
	CHECK_EQ_INT(pick("*;q=0, identity"), ACCEPTENC_IDENTITY);
	CHECK_EQ_INT(pick("gzip;q=0.5, identity"), ACCEPTENC_IDENTITY);
	CHECK_EQ_INT(pick("gzip, identity;q=0.5"), ACCEPTENC_GZIP);
	CHECK_EQ_INT(pick("gzip;q=0, identity;q=0"), ACCEPTENC_NONE);
	CHECK_EQ_INT(pick("identity;q=0"), ACCEPTENC_NONE);
	CHECK_EQ_INT(pick("identity;q=0, *;q=0.1"), ACCEPTENC_GZIP);
	CHECK_EQ_INT(pick("gzip;q=2"), -1);
}

int main(void)
{
	test_values();
	test_malformed();
	test_cap();
	test_pick();
	return tap_done("acceptenc");
}
