/*
 * common/banlist: the ban table, its state file and the PUT /bans body, as
 * the header specifies them. Every refused input must say which field is
 * wrong, since operators read these messages.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "banlist.h"
#include "strbuf.h"
#include "tap.h"

static struct addr_ip ip_of(const char *s)
{
	struct addr a;
	struct addr_ip ip;

	memset(&ip, 0, sizeof(ip));
	if (addr_parse_ip(&a, s) == 0)
		addr_to_ip(&a, &ip);
	else
		fprintf(stderr, "bad test ip %s\n", s);
	return ip;
}

/* err must mention want (the field or the problem). */
#define CHECK_ERR(err, want)                                                                       \
	do {                                                                                       \
		tap_checks++;                                                                      \
		if (strstr((err), (want)) == NULL) {                                               \
			tap_failures++;                                                            \
			fprintf(stderr, "FAIL %s:%d: err \"%s\" lacks \"%s\"\n", __FILE__,         \
				__LINE__, (err), (want));                                          \
		}                                                                                  \
	} while (0)

static void test_put_find_del(void)
{
	struct banlist *bl = banlist_new(16);
	struct addr_ip a = ip_of("203.0.113.7"), b = ip_of("2001:db8::1");
	const struct ban *ban;
	bool expired = true;

	CHECK(bl != NULL);
	if (bl == NULL)
		return;
	CHECK(banlist_find(bl, &a, 1000, &expired) == NULL);
	CHECK(!expired);
	CHECK_EQ_INT(banlist_put(bl, &a, "aimbot", 0, 1000), 1);
	CHECK_EQ_INT(banlist_put(bl, &b, "spam", 3600, 1000), 1);
	CHECK_EQ_INT(banlist_count(bl), 2);

	ban = banlist_find(bl, &a, 2000, &expired);
	CHECK(ban != NULL && !expired);
	if (ban != NULL) {
		CHECK_EQ_STR(ban->reason, "aimbot");
		CHECK_EQ_INT(ban->created, 1000);
		CHECK_EQ_INT(ban->expires, 0);
		CHECK(memcmp(&ban->ip, &a, sizeof(a)) == 0);
	}
	ban = banlist_find(bl, &b, 2000, NULL);
	CHECK(ban != NULL && ban->expires == 4600);
	/* The v4-mapped form of an IPv4 address is the same address. */
	{
		struct addr_ip m = ip_of("::ffff:203.0.113.7");

		CHECK(banlist_find(bl, &m, 2000, NULL) != NULL);
	}
	CHECK(banlist_find(bl, &(struct addr_ip){{0}}, 2000, NULL) == NULL);

	/* Replacing returns 0 and takes the new reason, times and expiry. */
	CHECK_EQ_INT(banlist_put(bl, &a, "wallhack", 60, 1500), 0);
	CHECK_EQ_INT(banlist_count(bl), 2);
	ban = banlist_find(bl, &a, 1500, NULL);
	CHECK(ban != NULL);
	if (ban != NULL) {
		CHECK_EQ_STR(ban->reason, "wallhack");
		CHECK_EQ_INT(ban->created, 1500);
		CHECK_EQ_INT(ban->expires, 1560);
	}
	/* Back to permanent. */
	CHECK_EQ_INT(banlist_put(bl, &a, "wallhack", 0, 1600), 0);
	ban = banlist_find(bl, &a, 999999999, NULL);
	CHECK(ban != NULL && ban->expires == 0);

	CHECK_EQ_INT(banlist_del(bl, &a), 0);
	CHECK_EQ_INT(banlist_del(bl, &a), -ENOENT);
	CHECK(banlist_find(bl, &a, 2000, &expired) == NULL);
	CHECK(!expired);
	CHECK_EQ_INT(banlist_count(bl), 1);
	banlist_free(bl);
	banlist_free(NULL);
}

static void test_put_checks(void)
{
	struct banlist *bl = banlist_new(4);
	struct addr_ip a = ip_of("198.51.100.1");
	char reason[BANLIST_REASON_MAX + 2];

	CHECK_EQ_INT(banlist_put(bl, &a, "two\nlines", 0, 1), -EINVAL);
	CHECK_EQ_INT(banlist_put(bl, &a, "tab\there", 0, 1), -EINVAL);
	CHECK_EQ_INT(banlist_put(bl, &a, "del\x7f", 0, 1), -EINVAL);
	CHECK_EQ_INT(banlist_put(bl, &a, "x", -1, 1), -EINVAL);
	CHECK_EQ_INT(banlist_put(bl, &a, "x", BANLIST_MAX_DURATION + 1, 1), -EINVAL);
	memset(reason, 'r', BANLIST_REASON_MAX + 1);
	reason[BANLIST_REASON_MAX + 1] = '\0';
	CHECK_EQ_INT(banlist_put(bl, &a, reason, 0, 1), -EINVAL);
	CHECK_EQ_INT(banlist_count(bl), 0);
	/* The limits themselves are fine; UTF-8 is not a control char. */
	reason[BANLIST_REASON_MAX] = '\0';
	CHECK_EQ_INT(banlist_put(bl, &a, reason, BANLIST_MAX_DURATION, 1), 1);
	CHECK_EQ_INT(banlist_put(bl, &a, "caf\xc3\xa9", 0, 1), 0);
	CHECK_EQ_INT(banlist_put(bl, &a, "", 0, 1), 0);
	/* A refused replacement leaves the ban as it was. */
	CHECK_EQ_INT(banlist_put(bl, &a, "x\r", 0, 5), -EINVAL);
	CHECK(banlist_find(bl, &a, 2, NULL) != NULL);
	CHECK_EQ_STR(banlist_find(bl, &a, 2, NULL)->reason, "");
	banlist_free(bl);
}

static void test_expiry(void)
{
	struct banlist *bl = banlist_new(8);
	struct addr_ip a = ip_of("192.0.2.1"), b = ip_of("192.0.2.2"), c = ip_of("192.0.2.3");
	bool expired = false;
	const struct ban *ban;

	banlist_put(bl, &a, "forever", 0, 1000);
	banlist_put(bl, &b, "ten", 10, 1000);
	banlist_put(bl, &c, "twenty", 20, 1000);
	/* Still on one second before the end. */
	CHECK(banlist_find(bl, &b, 1009, &expired) != NULL);
	CHECK(!expired);
	/* At expires it is over: removed, and the caller told to save. */
	CHECK(banlist_find(bl, &b, 1010, &expired) == NULL);
	CHECK(expired);
	CHECK_EQ_INT(banlist_count(bl), 2);
	CHECK(banlist_find(bl, &b, 1010, &expired) == NULL);
	CHECK(!expired);

	CHECK_EQ_INT(banlist_expire(bl, 1019), 0);
	CHECK_EQ_INT(banlist_expire(bl, 1020), 1);
	CHECK_EQ_INT(banlist_count(bl), 1);
	CHECK_EQ_INT(banlist_expire(bl, 1LL << 40), 0);
	ban = banlist_find(bl, &a, 1LL << 40, &expired);
	CHECK(ban != NULL && !expired);

	/* expire() walks everything, not only a prefix of old entries. */
	banlist_put(bl, &b, "late", 5, 2000);
	banlist_put(bl, &c, "early", 1, 2000);
	banlist_put(bl, &b, "later", 500, 2000);
	CHECK_EQ_INT(banlist_expire(bl, 2001), 1);
	CHECK(banlist_find(bl, &c, 2001, NULL) == NULL);
	CHECK(banlist_find(bl, &b, 2001, NULL) != NULL);
	banlist_free(bl);
}

static void test_capacity_order(void)
{
	struct banlist *bl = banlist_new(3);
	struct addr_ip a = ip_of("10.0.0.1"), b = ip_of("10.0.0.2"), c = ip_of("10.0.0.3"),
		       d = ip_of("10.0.0.4");
	const struct ban *x;

	CHECK_EQ_INT(banlist_put(bl, &a, "a", 0, 1), 1);
	CHECK_EQ_INT(banlist_put(bl, &b, "b", 0, 1), 1);
	CHECK_EQ_INT(banlist_put(bl, &c, "c", 0, 1), 1);
	/* Full: a new ban is refused, no old ban is pushed out ... */
	CHECK_EQ_INT(banlist_put(bl, &d, "d", 0, 1), -ENOSPC);
	CHECK_EQ_INT(banlist_count(bl), 3);
	CHECK(banlist_find(bl, &a, 1, NULL) != NULL);
	/* ... but an existing one can still be replaced. */
	CHECK_EQ_INT(banlist_put(bl, &a, "a2", 0, 2), 0);
	/* Iteration is in insertion order; a replacement keeps its place. */
	x = banlist_next(bl, NULL);
	CHECK(x != NULL && strcmp(x->reason, "a2") == 0);
	x = x ? banlist_next(bl, x) : NULL;
	CHECK(x != NULL && strcmp(x->reason, "b") == 0);
	x = x ? banlist_next(bl, x) : NULL;
	CHECK(x != NULL && strcmp(x->reason, "c") == 0);
	CHECK(x == NULL || banlist_next(bl, x) == NULL);
	banlist_free(bl);
}

static void test_json_round_trip(void)
{
	struct banlist *bl = banlist_new(8), *bl2 = banlist_new(8);
	struct addr_ip ips[4] = {ip_of("203.0.113.7"), ip_of("2001:db8::42"),
				 ip_of("198.51.100.200"), ip_of("::1")};
	const char *reasons[4] = {"aimbot", "say \"hi\" \\ / caf\xc3\xa9", "", "x"};
	long long durs[4] = {0, 3600, BANLIST_MAX_DURATION, 0};
	struct strbuf sb;
	char err[160] = "";
	const struct ban *p, *q;

	for (int i = 0; i < 4; i++)
		CHECK_EQ_INT(banlist_put(bl, &ips[i], reasons[i], durs[i], 1764500000 + i), 1);
	strbuf_init(&sb, 1 << 20);
	banlist_to_json(bl, &sb);
	CHECK(!sb.bad);
	CHECK(strstr(sb.p, "\"version\":1") != NULL);
	CHECK(strstr(sb.p, "\"ip\":\"2001:db8::42\"") != NULL);
	CHECK(strstr(sb.p, "\"ip\":\"203.0.113.7\"") != NULL);
	CHECK(strstr(sb.p, "\"expires\":1764503601") != NULL);

	CHECK_EQ_INT(banlist_load_json(bl2, sb.p, sb.len, 1764500100, err, sizeof(err)), 0);
	CHECK_EQ_STR(err, "");
	CHECK_EQ_INT(banlist_count(bl2), 4);
	/* Same bans, same order, same fields. */
	for (p = banlist_next(bl, NULL), q = banlist_next(bl2, NULL); p != NULL && q != NULL;
	     p = banlist_next(bl, p), q = banlist_next(bl2, q)) {
		CHECK(memcmp(&p->ip, &q->ip, sizeof(p->ip)) == 0);
		CHECK_EQ_STR(p->reason, q->reason);
		CHECK_EQ_INT(p->created, q->created);
		CHECK_EQ_INT(p->expires, q->expires);
	}
	CHECK(p == NULL && q == NULL);

	/* Loading replaces the contents; an empty list empties the table. */
	CHECK_EQ_INT(
		banlist_load_json(bl2, "{\"version\":1,\"bans\":[]}\n", 24, 1, err, sizeof(err)),
		0);
	CHECK_EQ_INT(banlist_count(bl2), 0);
	/* An empty table writes a file that loads. */
	strbuf_release(&sb);
	banlist_to_json(bl2, &sb);
	CHECK(sb.p != NULL && !sb.bad);
	if (sb.p != NULL)
		CHECK_EQ_INT(banlist_load_json(bl, sb.p, sb.len, 1, err, sizeof(err)), 0);
	CHECK_EQ_INT(banlist_count(bl), 0);
	strbuf_release(&sb);
	banlist_free(bl);
	banlist_free(bl2);
}

/* Loads text (a C string) into a table that holds one ban beforehand;
 * returns the result and leaves err set. */
static int load(struct banlist *bl, const char *text, char *err, size_t errsize)
{
	struct addr_ip pre = ip_of("100.64.0.1");

	banlist_put(bl, &pre, "before", 0, 1);
	err[0] = '\0';
	return banlist_load_json(bl, text, strlen(text), 1000, err, errsize);
}

#define CHECK_LOAD_FAILS(bl, text, want)                                                           \
	do {                                                                                       \
		char err_[256];                                                                    \
		CHECK_EQ_INT(load((bl), (text), err_, sizeof(err_)), -EBADMSG);                    \
		CHECK_ERR(err_, (want));                                                           \
		CHECK_EQ_INT(banlist_count(bl), 0);                                                \
	} while (0)

#define HDR         "{\"version\":1,\"bans\":["
#define B(ip, more) "{\"ip\":\"" ip "\",\"reason\":\"r\",\"created\":900" more "}"

static void test_load_errors(void)
{
	struct banlist *bl = banlist_new(4);
	char err[256], *long_reason;
	size_t n;

	/* Valid shapes first, so the failures below fail for their reason. */
	CHECK_EQ_INT(load(bl,
			  HDR B("10.0.0.1", "") "," B("10.0.0.2", ",\"expires\":null") "," B(
				  "10.0.0.3", ",\"expires\":2000") "]}",
			  err, sizeof(err)),
		     0);
	CHECK_EQ_INT(banlist_count(bl), 3);
	{
		struct addr_ip a = ip_of("10.0.0.3");
		const struct ban *b = banlist_find(bl, &a, 1000, NULL);

		CHECK(b != NULL && b->expires == 2000 && b->created == 900);
		a = ip_of("10.0.0.2");
		b = banlist_find(bl, &a, 1000, NULL);
		CHECK(b != NULL && b->expires == 0);
	}
	/* No reason at all is an empty reason. */
	CHECK_EQ_INT(load(bl, HDR "{\"ip\":\"::2\",\"created\":1}]}", err, sizeof(err)), 0);
	CHECK_EQ_INT(banlist_count(bl), 1);

	/* The file as a whole. */
	CHECK_LOAD_FAILS(bl, "{\"version\":2,\"bans\":[]}", "version 2");
	CHECK_LOAD_FAILS(bl, "{\"bans\":[]}", "version");
	CHECK_LOAD_FAILS(bl, "{\"version\":\"1\",\"bans\":[]}", "version: not an integer");
	CHECK_LOAD_FAILS(bl, "{\"version\":1.0,\"bans\":[]}", "version: not an integer");
	CHECK_LOAD_FAILS(bl, "[]", "not a JSON object");
	CHECK_LOAD_FAILS(bl, "\"bans\"", "not a JSON object");
	CHECK_LOAD_FAILS(bl, "{\"version\":1}", "bans");
	CHECK_LOAD_FAILS(bl, "{\"version\":1,\"bans\":{}}", "bans");
	CHECK_LOAD_FAILS(bl, "", "empty");
	/* Trailing garbage: the message points just past the document. */
	CHECK_LOAD_FAILS(bl, HDR "]} x", "offset 24");
	CHECK_LOAD_FAILS(bl, HDR "]}{}", "offset 23");
	CHECK_LOAD_FAILS(bl, HDR B("10.0.0.1", ""), "truncated");
	CHECK_LOAD_FAILS(bl, "{\"version\":1,\"ba", "truncated");
	CHECK_LOAD_FAILS(bl, HDR "1,]}", "offset");
	CHECK_LOAD_FAILS(bl, HDR "'x']}", "offset");
	CHECK_LOAD_FAILS(bl, HDR "\"\xff\"]}", "offset");
	{
		static const char nul[] = "{\"version\":1,\"bans\":[]}\0";

		n = sizeof(nul) - 1;
		CHECK_EQ_INT(banlist_load_json(bl, nul, n, 1000, err, sizeof(err)), -EBADMSG);
		CHECK_ERR(err, "NUL byte at offset 23");
	}

	/* Each ban. */
	CHECK_LOAD_FAILS(bl, HDR B("10.0.0.1", "") ",5]}", "bans[1]: not an object");
	CHECK_LOAD_FAILS(bl, HDR B("1.2.3", "") "]}", "bans[0].ip");
	CHECK_LOAD_FAILS(bl, HDR B("1.2.3.4:27960", "") "]}", "bans[0].ip");
	CHECK_LOAD_FAILS(bl, HDR B("host.example", "") "]}", "bans[0].ip");
	CHECK_LOAD_FAILS(bl, HDR "{\"ip\":16909060,\"created\":1}]}", "bans[0].ip");
	CHECK_LOAD_FAILS(bl, HDR "{\"reason\":\"r\",\"created\":1}]}", "bans[0].ip");
	CHECK_LOAD_FAILS(bl, HDR B("10.0.0.1", "") "," B("10.0.0.2", "") "," B("10.0.0.1", "") "]}",
			 "bans[2].ip: duplicate");
	/* The same address in its v4-mapped spelling. */
	CHECK_LOAD_FAILS(bl, HDR B("10.0.0.1", "") "," B("::ffff:10.0.0.1", "") "]}",
			 "bans[1].ip: duplicate");
	CHECK_LOAD_FAILS(bl, HDR "{\"ip\":\"::1\",\"reason\":\"a\\nb\",\"created\":1}]}",
			 "bans[0].reason");
	CHECK_LOAD_FAILS(bl, HDR "{\"ip\":\"::1\",\"reason\":\"a\\u0000b\",\"created\":1}]}",
			 "bans[0].reason");
	CHECK_LOAD_FAILS(bl, HDR "{\"ip\":\"::1\",\"reason\":\"\\u001b[31m\",\"created\":1}]}",
			 "bans[0].reason");
	CHECK_LOAD_FAILS(bl, HDR "{\"ip\":\"::1\",\"reason\":7,\"created\":1}]}",
			 "bans[0].reason: not a string");
	n = strlen(HDR "{\"ip\":\"::1\",\"reason\":\"") + BANLIST_REASON_MAX + 1 +
	    strlen("\",\"created\":1}]}") + 1;
	long_reason = malloc(n);
	CHECK(long_reason != NULL);
	if (long_reason != NULL) {
		char *p = long_reason;

		p += sprintf(p, "%s", HDR "{\"ip\":\"::1\",\"reason\":\"");
		memset(p, 'r', BANLIST_REASON_MAX + 1);
		p += BANLIST_REASON_MAX + 1;
		strcpy(p, "\",\"created\":1}]}");
		CHECK_LOAD_FAILS(bl, long_reason, "bans[0].reason");
		/* One byte less is the limit and loads. */
		memmove(p - 1, p, strlen(p) + 1);
		CHECK_EQ_INT(load(bl, long_reason, err, sizeof(err)), 0);
		CHECK_EQ_INT(banlist_count(bl), 1);
		free(long_reason);
	}
	/* Times are whole seconds. */
	CHECK_LOAD_FAILS(bl, HDR "{\"ip\":\"::1\",\"created\":1.5}]}",
			 "bans[0].created: not an integer");
	CHECK_LOAD_FAILS(bl, HDR "{\"ip\":\"::1\",\"created\":1,\"expires\":2000.0}]}",
			 "bans[0].expires: not an integer");
	CHECK_LOAD_FAILS(bl, HDR "{\"ip\":\"::1\",\"created\":1e3}]}",
			 "bans[0].created: not an integer");
	CHECK_LOAD_FAILS(bl, HDR "{\"ip\":\"::1\",\"created\":\"1\"}]}",
			 "bans[0].created: not an integer");
	CHECK_LOAD_FAILS(bl, HDR "{\"ip\":\"::1\",\"created\":null}]}", "bans[0].created");
	CHECK_LOAD_FAILS(bl, HDR "{\"ip\":\"::1\"}]}", "bans[0].created: missing");
	CHECK_LOAD_FAILS(bl, HDR "{\"ip\":\"::1\",\"created\":-1}]}", "bans[0]: negative");
	CHECK_LOAD_FAILS(bl, HDR "{\"ip\":\"::1\",\"created\":1,\"expires\":-5}]}",
			 "bans[0]: negative");
	/* An error after good bans still leaves the table empty. */
	CHECK_LOAD_FAILS(bl,
			 HDR B("10.0.0.1", "") "," B("10.0.0.2", "") "," B("10.0.0.3",
									   ",\"expires\":1.5") "]}",
			 "bans[2].expires");
	/* Nesting deeper than a state file needs. */
	CHECK_LOAD_FAILS(bl, HDR "{\"ip\":\"::1\",\"created\":1,\"x\":[[[[[[[[1]]]]]]]]}]}",
			 "offset");
	banlist_free(bl);
}

static void test_load_expired_capacity(void)
{
	struct banlist *bl = banlist_new(2);
	char err[256];

	/* now = 1000: a ban that ended at 1000 or before is skipped, also
	 * when its address comes back later in the file. */
	CHECK_EQ_INT(load(bl,
			  HDR B("10.0.0.1", ",\"expires\":999") "," B(
				  "10.0.0.2",
				  ",\"expires\":1000") "," B("10.0.0.3",
							     ",\"expires\":1001") "," B("10.0.0.1",
											"") "]}",
			  err, sizeof(err)),
		     0);
	CHECK_EQ_INT(banlist_count(bl), 2);
	{
		struct addr_ip a = ip_of("10.0.0.2");

		CHECK(banlist_find(bl, &a, 1000, NULL) == NULL);
		a = ip_of("10.0.0.1");
		CHECK(banlist_find(bl, &a, 1000, NULL) != NULL);
	}
	/* More live bans than the table holds: -ENOSPC, table empty. */
	CHECK_EQ_INT(load(bl,
			  HDR B("10.0.0.1", "") "," B("10.0.0.2", "") "," B("10.0.0.3", "") "]}",
			  err, sizeof(err)),
		     -ENOSPC);
	CHECK_ERR(err, "more than 2 bans");
	CHECK_EQ_INT(banlist_count(bl), 0);
	banlist_free(bl);
}

static int req(const char *body, char *reason, long long *dur, char *err)
{
	err[0] = '\0';
	return banlist_parse_request(body, strlen(body), reason, dur, err, 256);
}

#define CHECK_REQ_FAILS(body, want)                                                                \
	do {                                                                                       \
		char r_[BANLIST_REASON_MAX + 1], e_[256];                                          \
		long long d_ = 77;                                                                 \
		CHECK_EQ_INT(req((body), r_, &d_, e_), -EBADMSG);                                  \
		CHECK_ERR(e_, (want));                                                             \
	} while (0)

static void test_parse_request(void)
{
	char reason[BANLIST_REASON_MAX + 1], err[256], body[BANLIST_REASON_MAX + 64];
	long long dur = -1;

	CHECK_EQ_INT(req("{\"reason\":\"aimbot\",\"duration\":3600}", reason, &dur, err), 0);
	CHECK_EQ_STR(reason, "aimbot");
	CHECK_EQ_INT(dur, 3600);
	/* No duration, or null: permanent. */
	CHECK_EQ_INT(req("{\"reason\":\"x\"}", reason, &dur, err), 0);
	CHECK_EQ_INT(dur, 0);
	dur = -1;
	CHECK_EQ_INT(req(" {\"duration\":null,\"reason\":\"\"} \n", reason, &dur, err), 0);
	CHECK_EQ_INT(dur, 0);
	CHECK_EQ_STR(reason, "");
	CHECK_EQ_INT(req("{\"reason\":\"x\",\"duration\":1}", reason, &dur, err), 0);
	CHECK_EQ_INT(dur, 1);
	snprintf(body, sizeof(body), "{\"reason\":\"x\",\"duration\":%lld}", BANLIST_MAX_DURATION);
	CHECK_EQ_INT(req(body, reason, &dur, err), 0);
	CHECK_EQ_INT(dur, BANLIST_MAX_DURATION);
	/* JSON escapes are decoded. */
	CHECK_EQ_INT(req("{\"reason\":\"caf\\u00e9 \\\"q\\\"\"}", reason, &dur, err), 0);
	CHECK_EQ_STR(reason, "caf\xc3\xa9 \"q\"");

	CHECK_REQ_FAILS("{\"duration\":60}", "reason");
	CHECK_REQ_FAILS("{\"reason\":5}", "reason");
	CHECK_REQ_FAILS("{\"reason\":null}", "reason");
	CHECK_REQ_FAILS("{\"reason\":\"a\\tb\"}", "reason");
	memset(body, 0, sizeof(body));
	strcpy(body, "{\"reason\":\"");
	memset(body + strlen(body), 'r', BANLIST_REASON_MAX + 1);
	strcat(body, "\"}");
	CHECK_REQ_FAILS(body, "reason");
	CHECK_REQ_FAILS("{\"reason\":\"x\",\"duration\":0}", "duration");
	CHECK_REQ_FAILS("{\"reason\":\"x\",\"duration\":-60}", "duration");
	CHECK_REQ_FAILS("{\"reason\":\"x\",\"duration\":1.5}", "duration");
	CHECK_REQ_FAILS("{\"reason\":\"x\",\"duration\":60.0}", "duration");
	CHECK_REQ_FAILS("{\"reason\":\"x\",\"duration\":\"60\"}", "duration");
	CHECK_REQ_FAILS("{\"reason\":\"x\",\"duration\":true}", "duration");
	snprintf(body, sizeof(body), "{\"reason\":\"x\",\"duration\":%lld}",
		 BANLIST_MAX_DURATION + 1);
	CHECK_REQ_FAILS(body, "duration");
	CHECK_REQ_FAILS("{\"reason\":\"x\",\"duration\":99999999999999999999}", "duration");
	CHECK_REQ_FAILS("{\"reason\":\"x\",\"duration\":9223372036854775807}", "duration");
	CHECK_REQ_FAILS("[\"reason\"]", "not a JSON object");
	CHECK_REQ_FAILS("\"aimbot\" ", "not a JSON object");
	CHECK_REQ_FAILS("", "empty");
	CHECK_REQ_FAILS("{\"reason\":\"x\"", "truncated");
	CHECK_REQ_FAILS("{\"reason\":\"x\"}}", "offset 14");
}

int main(void)
{
	test_put_find_del();
	test_put_checks();
	test_expiry();
	test_capacity_order();
	test_json_round_trip();
	test_load_errors();
	test_load_expired_capacity();
	test_parse_request();
	return tap_done("banlist");
}
