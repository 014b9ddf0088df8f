/*
 * relay/relay_known: the known players' table and its file. Loading keeps
 * what is valid and recent, names the first bad line otherwise and leaves
 * the table empty; format and parse round-trip; the least recently seen
 * make room, and entries expire after the TTL.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "relay_known.h"
#include "strbuf.h"
#include "tap.h"

#define NOW (1765000000LL)
#define TTL (72LL * 3600)

static struct addr_ip ip_of(const char *s)
{
	struct addr a;
	struct addr_ip ip;

	CHECK(addr_parse_ip(&a, s) == 0);
	addr_to_ip(&a, &ip);
	return ip;
}

static bool has(const struct relay_known *k, const char *s)
{
	struct addr_ip ip = ip_of(s);

	return relay_known_has(k, &ip);
}

static int parse(struct relay_known *k, const char *text, struct relay_known_err *err)
{
	return relay_known_parse(k, text, strlen(text), NOW, err);
}

static void test_load(void)
{
	struct relay_known *k = relay_known_new(16, TTL);
	struct relay_known_err err;
	char text[512];

	CHECK(k != NULL);
	snprintf(text, sizeof(text),
		 "# a comment\n\n" RELAY_KNOWN_HEADER "\r\n"
		 "203.0.113.7 %lld\n"
		 "2001:db8::5 %lld\n"
		 "# expired long ago:\n"
		 "198.51.100.1 %lld\n"
		 "192.0.2.9 %lld", /* in the future, no final newline */
		 NOW - 3600, NOW - 60, NOW - TTL - 1, NOW + 86400);
	CHECK_EQ_INT(parse(k, text, &err), 3);
	CHECK(has(k, "203.0.113.7") && has(k, "2001:db8::5") && has(k, "192.0.2.9"));
	CHECK(!has(k, "198.51.100.1"));
	CHECK(!has(k, "203.0.113.8"));
	/* The future time was taken as now: it expires with the others. */
	CHECK_EQ_INT(relay_known_expire(k, NOW + TTL - 3600), 1);
	CHECK(!has(k, "203.0.113.7"));
	CHECK_EQ_INT(relay_known_expire(k, NOW + TTL), 2);
	CHECK_EQ_INT(relay_known_count(k), 0);
	relay_known_free(k);
}

static void test_errors(void)
{
	static const struct {
		const char *text;
		int line;
		const char *msg;
	} bad[] = {
		{"", 0, "no header"},
		{"# only a comment\n", 0, "no header"},
		{"rally-relay-known-players 2\n", 1, "header"},
		{RELAY_KNOWN_HEADER "\n1.2.3.4 1765000000\nnot-an-ip 1765000000\n", 3, "IP"},
		{RELAY_KNOWN_HEADER "\n1.2.3.4 yesterday\n", 2, "Unix time"},
		{RELAY_KNOWN_HEADER "\n1.2.3.4 -5\n", 2, "Unix time"},
		{RELAY_KNOWN_HEADER "\n1.2.3.4  1765000000\n", 2, "Unix time"},
		{RELAY_KNOWN_HEADER "\n1.2.3.4\n", 2, "IP LAST_SEEN"},
		{RELAY_KNOWN_HEADER "\n 1.2.3.4 1765000000\n", 2, "IP LAST_SEEN"},
		{RELAY_KNOWN_HEADER "\n1.2.3.4 1765000000\n::ffff:1.2.3.4 1765000001\n", 3,
		 "twice"},
		{RELAY_KNOWN_HEADER "\n1.2.3.4 99999999999999999999\n", 2, "Unix time"},
		{RELAY_KNOWN_HEADER "\n1.2.3.4 1765000000 "
				    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n",
		 2, "too long"},
	};
	struct relay_known *k = relay_known_new(16, TTL);
	struct relay_known_err err;
	char nul[] = RELAY_KNOWN_HEADER "\n1.2.3.4 1765000000\n\0";

	CHECK(k != NULL);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int r = parse(k, bad[i].text, &err);

		CHECK_EQ_INT(r, -EBADMSG);
		CHECK_EQ_INT(err.line, bad[i].line);
		CHECK(strstr(err.msg, bad[i].msg) != NULL);
		if (strstr(err.msg, bad[i].msg) == NULL)
			fprintf(stderr, "  case %zu: \"%s\"\n", i, err.msg);
		/* All or nothing: what came before the bad line is gone. */
		CHECK_EQ_INT(relay_known_count(k), 0);
	}
	CHECK_EQ_INT(relay_known_parse(k, nul, sizeof(nul), NOW, &err), -EBADMSG);
	CHECK(strstr(err.msg, "NUL") != NULL);
	relay_known_free(k);
}

static void test_roundtrip_and_room(void)
{
	struct relay_known *k = relay_known_new(3, TTL), *back = relay_known_new(2, TTL);
	struct relay_known_err err;
	struct addr_ip a = ip_of("10.0.0.1"), b = ip_of("10.0.0.2"), c = ip_of("2001:db8::3"),
		       d = ip_of("10.0.0.4");
	struct strbuf sb;

	CHECK(k != NULL && back != NULL);
	CHECK_EQ_INT(relay_known_note(k, &a, NOW - 30), 1);
	CHECK_EQ_INT(relay_known_note(k, &b, NOW - 20), 1);
	CHECK_EQ_INT(relay_known_note(k, &c, NOW - 10), 1);
	/* Seen again: refreshed, the most recent now. */
	CHECK_EQ_INT(relay_known_note(k, &a, NOW), 0);
	/* Full: b, now the least recent, makes room. */
	CHECK_EQ_INT(relay_known_note(k, &d, NOW), 1);
	CHECK_EQ_INT(relay_known_evicted(k), 1);
	CHECK(relay_known_has(k, &a) && !relay_known_has(k, &b) && relay_known_has(k, &c) &&
	      relay_known_has(k, &d));

	strbuf_init(&sb, 4096);
	relay_known_format(k, &sb);
	CHECK(!sb.bad);
	/* Least recent first: c, a, d. */
	CHECK(strstr(sb.p, "2001:db8::3 1764999990\n10.0.0.1 1765000000\n10.0.0.4 1765000000\n") !=
	      NULL);
	/* Read into a smaller table: the most recent two stay. */
	CHECK_EQ_INT(relay_known_parse(back, sb.p, sb.len, NOW, &err), 2);
	CHECK(relay_known_has(back, &a) && relay_known_has(back, &d) && !relay_known_has(back, &c));
	CHECK_EQ_INT(relay_known_evicted(back), 0);
	strbuf_release(&sb);
	relay_known_free(k);
	relay_known_free(back);
}

int main(void)
{
	test_load();
	test_errors();
	test_roundtrip_and_room();
	return tap_done("relayknown");
}
