/*
 * common/log: the IPv4 redaction players' logs get (netpunch's lobby.py
 * redact: \b(\d{1,3}\.\d{1,3}\.\d{1,3})\.(\d{1,3})\b, the host part of a
 * public address masked) and the tap that sees every line.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "tap.h"

static const char *red(const char *in)
{
	static char out[512];

	log_redact(in, strlen(in), out, sizeof(out));
	return out;
}

static void test_redact(void)
{
	CHECK_EQ_STR(red("JOIN 203.0.113.47:51299 ok"), "JOIN 203.0.113.x:51299 ok");
	CHECK_EQ_STR(red("a=8.8.8.8,b=1.2.3.4"), "a=8.8.8.x,b=1.2.3.x");
	/* Loopback and private ranges stay. */
	CHECK_EQ_STR(red("127.0.0.1 10.1.2.3 192.168.0.140 169.254.1.1"),
		     "127.0.0.1 10.1.2.3 192.168.0.140 169.254.1.1");
	CHECK_EQ_STR(red("172.16.0.1 172.31.9.9 172.15.0.1 172.32.0.1"),
		     "172.16.0.1 172.31.9.9 172.15.0.x 172.32.0.x");
	/* Not an address by the regex: 4-digit octets, a word character on
	 * either side, too few parts. */
	CHECK_EQ_STR(red("1234.5.6.7 x1.2.3.4 1.2.3.4y 1.2.3 1.2.3.4.5"),
		     "1234.5.6.7 x1.2.3.4 1.2.3.4y 1.2.3 1.2.3.x.5");
	CHECK_EQ_STR(red("v0.6.1.24"), "v0.6.1.24");
	/* 0/8 is kept (ours: netpunch masks it, the version string too). */
	CHECK_EQ_STR(red("version 0.6.1.24 at 0.0.0.0:1"), "version 0.6.1.24 at 0.0.0.0:1");
	CHECK_EQ_STR(red("version 1.6.1.24"), "version 1.6.1.x");
	CHECK_EQ_STR(red(""), "");
	/* IPv6: a global address keeps its /48, bracketed or not. */
	CHECK_EQ_STR(red("peer=[2001:db8:1:2::5]:29471 ok"), "peer=[2001:db8:1::x]:29471 ok");
	CHECK_EQ_STR(red("v6 2a01:4f8:c0c:e8a1:0:0:0:1 and 2001:db8::7"),
		     "v6 2a01:4f8:c0c::x and 2001:db8::x");
	CHECK_EQ_STR(red("2002:cb00:7105::1"), "2002:cb00:7105::x");
	/* A /48 alone names a site: kept. */
	CHECK_EQ_STR(red("prefix 2001:db8:1::/48"), "prefix 2001:db8:1::/48");
	/* Not public, or not an address: loopback, link-local, unique local,
	 * the unspecified, times, a word on either side, a bad address. */
	CHECK_EQ_STR(red("[::1]:5 fe80::1%eth0 fd00:1::2 :: 21:10:31"),
		     "[::1]:5 fe80::1%eth0 fd00:1::2 :: 21:10:31");
	CHECK_EQ_STR(red("x2001:db8::1 2001:db8::1y 2001:db8:::1 std::move"),
		     "x2001:db8::1 2001:db8::1y 2001:db8:::1 std::move");
	/* v4-mapped: the IPv4 rule masks the public tail. */
	CHECK_EQ_STR(red("::ffff:203.0.113.5 ::ffff:10.0.0.1"),
		     "::ffff:203.0.113.x ::ffff:10.0.0.1");
	/* The output is cut to its size, NUL-terminated. */
	{
		char small[8];

		CHECK_EQ_INT((int)log_redact("203.0.113.47", 12, small, sizeof(small)), 7);
		CHECK_EQ_STR(small, "203.0.1");
	}
}

static char tapped[4][256];
static int ntapped;

static void tap(const char *text, size_t len, void *arg)
{
	(void)arg;
	if (ntapped < 4)
		snprintf(tapped[ntapped++], sizeof(tapped[0]), "%.*s", (int)len, text);
}

static void test_tap(void)
{
	int devnull = open("/dev/null", O_WRONLY), saved = dup(2);

	/* The lines themselves go to /dev/null; the tap sees the text. */
	dup2(devnull, 2);
	log_init(LOG_LEVEL_INFO, LOG_TARGET_PLAIN);
	log_set_tap(tap, NULL);
	log_set_redact(true);
	log_info("join peer=%s name=\"%s\"", "198.51.100.7:1", "bob");
	log_debug("not at this level");
	log_bare("ready udp=0.0.0.0:1");
	log_set_redact(false);
	log_info("peer=198.51.100.7");
	log_set_tap(NULL, NULL);
	log_info("after the tap");
	dup2(saved, 2);
	CHECK_EQ_INT(ntapped, 3);
	CHECK_EQ_STR(tapped[0], "join peer=198.51.100.x:1 name=\"bob\"");
	CHECK_EQ_STR(tapped[1], "ready udp=0.0.0.0:1");
	CHECK_EQ_STR(tapped[2], "peer=198.51.100.7");
}

int main(void)
{
	test_redact();
	test_tap();
	return tap_done("log");
}
