/*
 * common/strbuf: appends and printf into a growing buffer with a hard cap;
 * anything past the cap sets `bad` and is dropped, never half-written.
 */
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"
#include "tap.h"

static void test_append(void)
{
	struct strbuf b;
	char big[1000];

	strbuf_init(&b, 1 << 20);
	CHECK(b.p == NULL && b.len == 0 && !b.bad);
	strbuf_append(&b, "abc", 3);
	strbuf_append(&b, "", 0);
	strbuf_append(&b, "defg", 2);
	CHECK_EQ_INT(b.len, 5);
	CHECK_EQ_STR(b.p, "abcde");
	/* Growth keeps the contents and the terminator. */
	memset(big, 'z', sizeof(big));
	for (int i = 0; i < 10; i++)
		strbuf_append(&b, big, sizeof(big));
	CHECK_EQ_INT(b.len, 10005);
	CHECK(!b.bad);
	CHECK(strncmp(b.p, "abcdezzz", 8) == 0);
	CHECK_EQ_INT(strlen(b.p), 10005);
	CHECK(b.cap > b.len);
	/* Bytes are bytes, NULs included. */
	strbuf_append(&b, "\0x", 2);
	CHECK_EQ_INT(b.len, 10007);
	CHECK(b.p[10005] == '\0' && b.p[10006] == 'x' && b.p[10007] == '\0');
	strbuf_release(&b);
	CHECK(b.p == NULL && b.len == 0 && b.cap == 0 && !b.bad);
	CHECK_EQ_INT(b.max, 1 << 20);
	/* Usable again after release. */
	strbuf_append(&b, "again", 5);
	CHECK_EQ_STR(b.p, "again");
	strbuf_release(&b);
}

static void test_printf(void)
{
	struct strbuf b;

	strbuf_init(&b, 4096);
	strbuf_printf(&b, "rally_packets_total{dir=\"%s\"} %llu\n", "in", 18446744073709551615ULL);
	CHECK_EQ_STR(b.p, "rally_packets_total{dir=\"in\"} 18446744073709551615\n");
	strbuf_printf(&b, "%d%%", -5);
	CHECK_EQ_STR(b.p + strlen("rally_packets_total{dir=\"in\"} 18446744073709551615\n"), "-5%");
	/* An empty format is fine, even as the first call. */
	strbuf_release(&b);
	strbuf_printf(&b, "%s", "");
	CHECK(!b.bad);
	CHECK(b.p != NULL && b.len == 0 && b.p[0] == '\0');
	/* Longer than the initial allocation. */
	strbuf_printf(&b, "%0*d", 3000, 7);
	CHECK_EQ_INT(b.len, 3000);
	CHECK(b.p[0] == '0' && b.p[2999] == '7' && b.p[3000] == '\0');
	strbuf_release(&b);
}

static void test_cap(void)
{
	struct strbuf b;

	strbuf_init(&b, 10);
	strbuf_append(&b, "0123456789", 10);
	/* Exactly at the cap is fine. */
	CHECK(!b.bad);
	CHECK_EQ_INT(b.len, 10);
	/* One byte more is not, and nothing of it is kept. */
	strbuf_append(&b, "a", 1);
	CHECK(b.bad);
	CHECK_EQ_INT(b.len, 10);
	CHECK_EQ_STR(b.p, "0123456789");
	/* Once bad, everything after is dropped, even what would fit. */
	strbuf_release(&b);
	strbuf_append(&b, "01234", 5);
	strbuf_append(&b, "567890", 6);
	CHECK(b.bad);
	CHECK_EQ_STR(b.p, "01234");
	strbuf_append(&b, "5", 1);
	CHECK_EQ_INT(b.len, 5);
	strbuf_printf(&b, "%d", 5);
	CHECK_EQ_INT(b.len, 5);
	CHECK_EQ_STR(b.p, "01234");
	strbuf_release(&b);
	CHECK(!b.bad);

	/* printf past the cap: dropped whole. */
	strbuf_printf(&b, "%s", "12345678");
	strbuf_printf(&b, "%s", "abc");
	CHECK(b.bad);
	CHECK_EQ_STR(b.p, "12345678");
	strbuf_release(&b);

	/* A zero cap takes nothing. */
	strbuf_init(&b, 0);
	strbuf_append(&b, "", 0);
	CHECK(!b.bad);
	strbuf_append(&b, "x", 1);
	CHECK(b.bad);
	CHECK_EQ_INT(b.len, 0);
	strbuf_release(&b);
}

int main(void)
{
	test_append();
	test_printf();
	test_cap();
	return tap_done("strbuf");
}
