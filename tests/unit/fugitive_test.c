/*
 * master/master_fugitive.h: the pure parts of the Fugitive3D repository
 * door. The expectations are the Go service's (srvrepo/srvrepo_test.go,
 * internal/httpapi/server_test.go) and what encoding/json, net.ParseIP,
 * net.SplitHostPort, strconv.Atoi and time.Time do with the same input.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master_fugitive.h"
#include "strbuf.h"
#include "tap.h"

#define VALID_BODY                                                                                 \
	"{\"name\":\"a server\",\"game_version\":3,\"current_players\":2,\"max_players\":8,"       \
	"\"is_joinable\":true}"

static int parse(const char *s, struct master_fugitive_body *b)
{
	return master_fugitive_parse_body(s, strlen(s), b);
}

static int id(const char *s, struct master_fugitive_id *out)
{
	return master_fugitive_parse_id(s, strlen(s), out);
}

/* The body parses, and the trimmed name is want. */
static void check_name(const char *body, const char *want)
{
	struct master_fugitive_body b;
	int r = parse(body, &b);

	CHECK_EQ_INT(r, 0);
	CHECK_EQ_INT(b.name_len, strlen(want));
	tap_checks++;
	if (r != 0 || b.name_len != strlen(want) || memcmp(b.name, want, b.name_len) != 0) {
		tap_failures++;
		fprintf(stderr, "FAIL name of %s: got %zu bytes\n", body, b.name_len);
	}
}

static void test_id(void)
{
	struct master_fugitive_id i;

	/* srvrepo_test.go TestParseServerAddress. */
	CHECK_EQ_INT(id("203.0.113.4:45677", &i), 0);
	CHECK(i.has_ip && master_fugitive_ip_is_v4(&i.ip) && i.port == 45677);
	CHECK(i.ip.b[12] == 203 && i.ip.b[13] == 0 && i.ip.b[14] == 113 && i.ip.b[15] == 4);
	CHECK_EQ_INT(id("127.0.0.1:8080", &i), 0);
	CHECK(i.has_ip && master_fugitive_ip_is_v4(&i.ip) && i.port == 8080);
	CHECK_EQ_INT(id("[::1]:8080", &i), 0);
	CHECK(i.has_ip && !master_fugitive_ip_is_v4(&i.ip) && i.ip.b[15] == 1 && i.port == 8080);
	CHECK_EQ_INT(id("203.0.113.4", &i), -EINVAL);
	CHECK_EQ_INT(id("203.0.113.4:http", &i), -EINVAL);
	CHECK_EQ_INT(id("", &i), -EINVAL);
	/* server_test.go: "notanaddress". */
	CHECK_EQ_INT(id("notanaddress", &i), -EINVAL);

	/* SplitHostPort's refusals. */
	CHECK_EQ_INT(id("::1:80", &i), -EINVAL);      /* too many colons */
	CHECK_EQ_INT(id("[::1]80", &i), -EINVAL);     /* missing port */
	CHECK_EQ_INT(id("[::1]", &i), -EINVAL);       /* no colon after ] */
	CHECK_EQ_INT(id("[::1:80", &i), -EINVAL);     /* missing ] */
	CHECK_EQ_INT(id("[::1]:80]", &i), -EINVAL);   /* stray ] */
	CHECK_EQ_INT(id("1.2.3.4]:80", &i), -EINVAL); /* stray ] */
	CHECK_EQ_INT(id("a[b:80", &i), -EINVAL);      /* stray [ */
	CHECK_EQ_INT(id("[a]b]:80", &i), -EINVAL);

	/* Atoi: sign, leading zeros, the int64 range; nothing else. */
	CHECK(id("1.2.3.4:+80", &i) == 0 && i.port == 80);
	CHECK(id("1.2.3.4:-1", &i) == 0 && i.port == -1);
	CHECK(id("1.2.3.4:045677", &i) == 0 && i.port == 45677);
	CHECK(id("1.2.3.4:9223372036854775807", &i) == 0 && i.port == 9223372036854775807LL);
	CHECK(id("1.2.3.4:-9223372036854775808", &i) == 0 && i.port == -9223372036854775807LL - 1);
	CHECK(id("1.2.3.4:0000000000000000000000080", &i) == 0 && i.port == 80);
	CHECK_EQ_INT(id("1.2.3.4:9223372036854775808", &i), -EINVAL);
	CHECK_EQ_INT(id("1.2.3.4:", &i), -EINVAL);
	CHECK_EQ_INT(id("1.2.3.4:+", &i), -EINVAL);
	CHECK_EQ_INT(id("1.2.3.4:1_000", &i), -EINVAL);
	CHECK_EQ_INT(id("1.2.3.4: 80", &i), -EINVAL);
	CHECK_EQ_INT(id("1.2.3.4:0x50", &i), -EINVAL);

	/* ParseIP failing does not fail the parse (the handlers decide). */
	CHECK(id("foo:1234", &i) == 0 && !i.has_ip && i.port == 1234);
	CHECK(id(":80", &i) == 0 && !i.has_ip);
	CHECK(id("01.2.3.4:80", &i) == 0 && !i.has_ip);  /* leading zero */
	CHECK(id("1.2.3.256:80", &i) == 0 && !i.has_ip); /* out of range */
	CHECK(id("[fe80::1%eth0]:80", &i) == 0 && !i.has_ip);
	CHECK(id("[1.2.3.4]:80", &i) == 0 && i.has_ip && master_fugitive_ip_is_v4(&i.ip));
	CHECK(id("[::ffff:1.2.3.4]:80", &i) == 0 && i.has_ip && master_fugitive_ip_is_v4(&i.ip) &&
	      i.ip.b[12] == 1 && i.ip.b[15] == 4);
	CHECK(id("[::1.2.3.4]:80", &i) == 0 && i.has_ip && !master_fugitive_ip_is_v4(&i.ip));
	CHECK(master_fugitive_parse_id("1.2.3.4\0:80", 10, &i) == 0 && !i.has_ip);
}

static void test_body_fields(void)
{
	struct master_fugitive_body b;

	CHECK_EQ_INT(parse(VALID_BODY, &b), 0);
	CHECK(b.name_len == 8 && memcmp(b.name, "a server", 8) == 0);
	CHECK(b.game_version == 3 && b.current_players == 2 && b.max_players == 8 && b.is_joinable);

	/* Unknown fields are skipped whatever they hold; ip, port and
	 * last_seen are read (and must decode) but not kept. */
	CHECK_EQ_INT(parse("{\"x\":[1,{\"y\":[[],{}]},\"}\"],\"name\":\"abc\",\"z\":null}", &b), 0);
	CHECK(b.name_len == 3);
	CHECK_EQ_INT(parse("{\"ip\":\"1.2.3.4\",\"port\":45677,\"name\":\"abc\"}", &b), 0);
	CHECK_EQ_INT(parse("{\"port\":99999999}", &b), 0);

	/* Keys: unescaped, then matched ignoring case (bytes.EqualFold:
	 * U+017F folds to s, U+212A to k); the last one wins; null leaves a
	 * field as it was. */
	CHECK(parse("{\"NAME\":\"abc\"}", &b) == 0 && b.name_len == 3);
	CHECK(parse("{\"Name\":\"x\",\"nAmE\":\"abcd\"}", &b) == 0 && b.name_len == 4);
	CHECK(parse("{\"nam\\u0065\":\"abc\"}", &b) == 0 && b.name_len == 3);
	CHECK(parse("{\"i\xc5\xbf_joinable\":true}", &b) == 0 && b.is_joinable);
	CHECK(parse("{\"game_ver\xc5\xbfion\":7}", &b) == 0 && b.game_version == 7);
	CHECK(parse("{\"game_versio\xc3\xb1\":7}", &b) == 0 && b.game_version == 0);
	CHECK(parse("{\"name\":\"abcd\",\"name\":null}", &b) == 0 && b.name_len == 4);
	CHECK(parse("{\"is_joinable\":true,\"is_joinable\":false}", &b) == 0 && !b.is_joinable);
	CHECK(parse("{\"is_joinable\":null}", &b) == 0 && !b.is_joinable);
	CHECK(parse("{\"max_players\":8,\"MAX_PLAYERS\":null}", &b) == 0 && b.max_players == 8);
	CHECK(parse("{\"game_version\":1,\""
		    "game_version\":2}",
		    &b) == 0 &&
	      b.game_version == 2);

	/* Ints are int64, from a number without fraction or exponent. */
	CHECK(parse("{\"game_version\":-0}", &b) == 0 && b.game_version == 0);
	CHECK(parse("{\"game_version\":-5}", &b) == 0 && b.game_version == -5);
	CHECK(parse("{\"game_version\":9223372036854775807}", &b) == 0 &&
	      b.game_version == 9223372036854775807LL);
	CHECK(parse("{\"game_version\":-9223372036854775808}", &b) == 0);
	CHECK_EQ_INT(parse("{\"game_version\":9223372036854775808}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"game_version\":1.0}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"game_version\":1e2}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"game_version\":\"3\"}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"current_players\":true}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"max_players\":[1]}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"port\":\"45677\"}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"port\":{}}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"is_joinable\":1}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"is_joinable\":\"true\"}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"name\":5}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"name\":[\"abc\"]}", &b), -EBADMSG);
	/* A type error anywhere fails the whole body, even after good fields. */
	CHECK_EQ_INT(parse("{\"name\":\"abc\",\"game_version\":\"1\"}", &b), -EBADMSG);

	/* ip: net.IP's UnmarshalText. */
	CHECK_EQ_INT(parse("{\"ip\":\"\"}", &b), 0);
	CHECK_EQ_INT(parse("{\"ip\":null}", &b), 0);
	CHECK_EQ_INT(parse("{\"ip\":\"::1\"}", &b), 0);
	CHECK_EQ_INT(parse("{\"ip\":\"\\u0031.2.3.4\"}", &b), 0);
	CHECK_EQ_INT(parse("{\"ip\":\"garbage\"}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"ip\":\"1.2.3.4\\u0000\"}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"ip\":\" 1.2.3.4\"}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"ip\":5}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"ip\":[1,2,3,4]}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"ip\":\"1111:2222:3333:4444:5555:6666:7777:8888:9999\"}", &b),
		     -EBADMSG);
}

static void test_body_last_seen(void)
{
	static const char *const good[] = {
		"2021-01-19T12:34:56Z",
		"2021-01-19T12:34:56-08:00",
		"2021-01-19T12:34:56.123456789012+01:00",
		"2020-02-29T00:00:00Z",
		"2000-02-29T00:00:00Z",
		"0000-01-01T00:00:00Z",
		"9999-12-31T23:59:59+23:59",
	};
	static const char *const bad[] = {
		"2021-02-29T00:00:00Z",      "1900-02-29T00:00:00Z",   "2021-04-31T00:00:00Z",
		"2021-00-10T00:00:00Z",      "2021-13-10T00:00:00Z",   "2021-01-00T00:00:00Z",
		"2021-01-19t12:34:56Z",      "2021-01-19T12:34:56z",   "2021-01-19T24:00:00Z",
		"2021-01-19T12:60:00Z",      "2021-01-19T12:34:60Z",   "2021-01-19T12:34:56+24:00",
		"2021-01-19T12:34:56+01:60", "2021-01-19T12:34:56",    "2021-01-19T12:34:56.Z",
		"2021-01-19 12:34:56Z",      "2021-01-19T12:34:56,5Z", "2021-01-19T12:34:56\\u005a",
		"21-01-19T12:34:56Z",        "2021-1-19T12:34:56Z",    "2021-01-19T1:34:56Z",
		"2021-01-19T12:34:56+0100",  "+2021-01-19T12:34:56Z",  "",
	};
	struct master_fugitive_body b;
	char body[128];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		snprintf(body, sizeof(body), "{\"last_seen\":\"%s\"}", good[i]);
		if (parse(body, &b) != 0)
			fprintf(stderr, "refused: %s\n", body);
		CHECK_EQ_INT(parse(body, &b), 0);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(body, sizeof(body), "{\"last_seen\":\"%s\"}", bad[i]);
		if (parse(body, &b) != -EBADMSG)
			fprintf(stderr, "accepted: %s\n", body);
		CHECK_EQ_INT(parse(body, &b), -EBADMSG);
	}
	CHECK_EQ_INT(parse("{\"last_seen\":null}", &b), 0);
	CHECK_EQ_INT(parse("{\"LAST_SEEN\":5}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"last_seen\":{}}", &b), -EBADMSG);
	CHECK_EQ_INT(parse("{\"last_seen\":true}", &b), -EBADMSG);
}

static void test_body_syntax(void)
{
	static const char *const bad[] = {
		"",
		" ",
		"{not json",
		"{",
		"}",
		"{\"a\":1,}",
		"{'name':'abc'}",
		"{\"a\":NaN}",
		"{\"a\":Infinity}",
		"{\"a\":5.}",
		"{\"a\":.5}",
		"{\"a\":01}",
		"{\"a\":-}",
		"{\"a\":+5}",
		"{\"a\":1e}",
		"{\"a\":1e+}",
		"{\"name\":\"a\tb\"}",
		"{\"name\":\"a\nb\"}",
		"{\"a\":1}x",
		"{\"a\":1}{}",
		"\xef\xbb\xbf{}",
		"{\"a\":\"\\x\"}",
		"{\"a\":\"\\u12\"}",
		"{\"a\":\"\\u12g4\"}",
		"{\"a\" 1}",
		"{\"a\":1 \"b\":2}",
		"{a:1}",
		"{\"a\":tru}",
		"{\"a\":nul}",
		"{\"a\":True}",
		"[1,]",
		"[",
		"]",
		"{\"a\":[1 2]}",
		"{\"a\":[}",
		"{\"a\":{]}",
		"{\"a\":/*c*/1}",
		"{\"a\":1,\"a\"}",
		"\"unterminated",
		"{\"a\":\"x\\",
		"\x01",
		/* Valid JSON but not an object: Go's UnmarshalTypeError. */
		"[]",
		"\"x\"",
		"5",
		"true",
		"false",
		"[{\"name\":\"abc\"}]",
	};
	struct master_fugitive_body b;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int r = parse(bad[i], &b);

		if (r != -EBADMSG)
			fprintf(stderr, "accepted #%zu: %s\n", i, bad[i]);
		CHECK_EQ_INT(r, -EBADMSG);
	}
	CHECK_EQ_INT(master_fugitive_parse_body("{\"a\":1}\0", 8, &b), -EBADMSG);
	CHECK_EQ_INT(master_fugitive_parse_body("{\"a\":\"\0\"}", 8, &b), -EBADMSG);
	/* null is no error (Unmarshal leaves the struct zero); {} neither. */
	CHECK(parse("null", &b) == 0 && b.name_len == 0);
	CHECK(parse(" \r\n\tnull \n", &b) == 0);
	CHECK(parse("{}", &b) == 0 && b.name_len == 0 && !b.is_joinable);
	CHECK(parse(" { \"name\" : \"abc\" , \"x\" : [ ] } \n", &b) == 0 && b.name_len == 3);
	CHECK(parse("{\"a\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\uABCD\"}", &b) == 0);
	CHECK(parse("{\"a\":[-0.5e+10,0,1E-2,true,false,null,\"\xff\"]}", &b) == 0);
}

static void test_body_depth(void)
{
	/* encoding/json refuses nesting deeper than 10000 (the object
	 * itself counts). */
	size_t n = 10000;
	char *s = malloc(2 * n + 32);
	struct master_fugitive_body b;
	size_t len;

	for (size_t arrays = n - 1; arrays <= n; arrays++) {
		len = (size_t)sprintf(s, "{\"x\":");
		memset(s + len, '[', arrays);
		len += arrays;
		memset(s + len, ']', arrays);
		len += arrays;
		len += (size_t)sprintf(s + len, ",\"name\":\"abc\"}");
		CHECK_EQ_INT(master_fugitive_parse_body(s, len, &b),
			     arrays == n - 1 ? 0 : -EBADMSG);
	}
	free(s);
}

static void test_body_names(void)
{
	char body[256], want[64];
	struct master_fugitive_body b;

	/* srvrepo_test.go: trimmed, and 3-32 bytes after it. */
	check_name("{\"name\":\"  a server  \"}", "a server");
	check_name("{\"name\":\"     \"}", "");
	check_name("{\"name\":\"\\t\\n\\u000b\\f\\r a b \\r\"}", "a b");
	/* Unicode white space (NBSP, NEL, ideographic space, en quad) too;
	 * zero-width space and BOM are not space. */
	check_name("{\"name\":\"\xc2\xa0\xc2\x85\xe3\x80\x80\xe2\x80\x80"
		   "abc\xe2\x80\xa8\xe2\x80\x8a\"}",
		   "abc");
	check_name("{\"name\":\"\xe2\x80\x8b"
		   "abc\"}",
		   "\xe2\x80\x8b"
		   "abc");
	check_name("{\"name\":\"\\ufeffabc\"}", "\xef\xbb\xbf"
						"abc");
	/* Invalid UTF-8 and lone surrogates become U+FFFD, byte by byte. */
	check_name("{\"name\":\"\xff\xfe"
		   "a\"}",
		   "\xef\xbf\xbd\xef\xbf\xbd"
		   "a");
	check_name("{\"name\":\"\xe2\x82"
		   "a\"}",
		   "\xef\xbf\xbd\xef\xbf\xbd"
		   "a");
	check_name("{\"name\":\"\xc0\xaf"
		   "a\"}",
		   "\xef\xbf\xbd\xef\xbf\xbd"
		   "a");
	check_name("{\"name\":\"\xed\xa0\x80\"}", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
	check_name("{\"name\":\"\xf4\x90\x80\x80\"}",
		   "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
	check_name("{\"name\":\"\\ud800\"}", "\xef\xbf\xbd");
	check_name("{\"name\":\"\\udc00x\"}", "\xef\xbf\xbdx");
	check_name("{\"name\":\"\\ud83d\\ude00\"}", "\xf0\x9f\x98\x80");
	check_name("{\"name\":\"\\ud800\\u0041\"}", "\xef\xbf\xbd"
						    "A");
	check_name("{\"name\":\"\\ud800\\ud800\"}", "\xef\xbf\xbd\xef\xbf\xbd");
	check_name("{\"name\":\"\xef\xbf\xbd\"}", "\xef\xbf\xbd");
	CHECK(parse("{\"name\":\"a\\u0000b\"}", &b) == 0 && b.name_len == 3 && b.name[1] == '\0');
	check_name("{\"name\":\"\\\"<&>\\\\\"}", "\"<&>\\");

	/* The 32-byte edge, with spaces around that do not count. */
	memset(want, 'a', 32);
	want[32] = '\0';
	snprintf(body, sizeof(body), "{\"name\":\"          %s          \"}", want);
	check_name(body, want);
	snprintf(body, sizeof(body), "{\"name\":\"%sa\"}", want);
	CHECK(parse(body, &b) == 0 && b.name_len == 33);
	/* A long name with a space inside counts the inner bytes. */
	snprintf(body, sizeof(body), "{\"name\":\"%.16s          %.16s\"}", want, want);
	CHECK(parse(body, &b) == 0 && b.name_len == 42);
	/* Multi-byte runes count as bytes: 11 x 3 = 33. */
	CHECK(parse("{\"name\":\"\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9"
		    "\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9a\"}",
		    &b) == 0 &&
	      b.name_len == 33);
	check_name("{\"name\":\"\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9"
		   "\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\"}",
		   "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
		   "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9");
}

static void test_validate(void)
{
	struct master_fugitive_body b;
	struct master_fugitive_id i;
	const char *ip_msg = "IP is not a valid IPv4 address";
	const char *port_msg = "port is not within the valid port range of 1024-65535";
	const char *name_msg = "name length must be within range of 3-32";

	parse(VALID_BODY, &b);
	id("203.0.113.4:45677", &i);
	CHECK(master_fugitive_validate(&i, &b) == NULL);
	id("203.0.113.4:1024", &i);
	CHECK(master_fugitive_validate(&i, &b) == NULL);
	id("203.0.113.4:65535", &i);
	CHECK(master_fugitive_validate(&i, &b) == NULL);
	id("203.0.113.4:1023", &i);
	CHECK_EQ_STR(master_fugitive_validate(&i, &b), port_msg);
	id("203.0.113.4:80", &i);
	CHECK_EQ_STR(master_fugitive_validate(&i, &b), port_msg);
	id("203.0.113.4:65536", &i);
	CHECK_EQ_STR(master_fugitive_validate(&i, &b), port_msg);
	id("203.0.113.4:-1", &i);
	CHECK_EQ_STR(master_fugitive_validate(&i, &b), port_msg);
	id("[::1]:45677", &i);
	CHECK_EQ_STR(master_fugitive_validate(&i, &b), ip_msg);
	id("nohost:45677", &i);
	CHECK_EQ_STR(master_fugitive_validate(&i, &b), ip_msg);
	id("[::ffff:203.0.113.4]:45677", &i);
	CHECK(master_fugitive_validate(&i, &b) == NULL);

	/* The address is checked before the name. */
	parse("{\"name\":\"ab\"}", &b);
	id("[::1]:80", &i);
	CHECK_EQ_STR(master_fugitive_validate(&i, &b), ip_msg);
	id("1.2.3.4:80", &i);
	CHECK_EQ_STR(master_fugitive_validate(&i, &b), port_msg);
	id("1.2.3.4:45677", &i);
	CHECK_EQ_STR(master_fugitive_validate(&i, &b), name_msg);
	parse("{\"name\":\"abc\"}", &b);
	CHECK(master_fugitive_validate(&i, &b) == NULL);
	parse("{\"name\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}", &b);
	CHECK_EQ_STR(master_fugitive_validate(&i, &b), name_msg);
	parse("null", &b);
	CHECK_EQ_STR(master_fugitive_validate(&i, &b), name_msg);
}

static void check_json(const char *in, size_t len, const char *want)
{
	struct strbuf sb;

	strbuf_init(&sb, 4096);
	master_fugitive_json_string(&sb, in, len);
	strbuf_append(&sb, "", 0);
	tap_checks++;
	if (sb.p == NULL || strcmp(sb.p, want) != 0) {
		tap_failures++;
		fprintf(stderr, "FAIL json of \"%s\": got %s want %s\n", in, sb.p ? sb.p : "NULL",
			want);
	}
	strbuf_release(&sb);
}

static void test_json_out(void)
{
	struct master_fugitive_server s = {
		.ip = {203, 0, 113, 4},
		.port = 45677,
		.name = "special server",
		.name_len = 14,
		.game_version = 1,
		.current_players = 2,
		.max_players = 8,
		.is_joinable = true,
		.seen_wall_ms = 1611059696999LL,
	};
	struct strbuf sb;

	/* Go's json.Marshal (HTML-safe, as gin's c.JSON). */
	check_json("", 0, "\"\"");
	check_json("special server", 14, "\"special server\"");
	check_json("a\"b\\c/d", 7, "\"a\\\"b\\\\c/d\"");
	check_json("<a&b>", 5, "\"\\u003ca\\u0026b\\u003e\"");
	check_json("\b\f\n\r\t", 5, "\"\\b\\f\\n\\r\\t\"");
	check_json("\x01\x1f\x7f", 3, "\"\\u0001\\u001f\x7f\"");
	check_json("a\0b", 3, "\"a\\u0000b\"");
	check_json("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9,
		   "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
	check_json("\xe2\x80\xa8\xe2\x80\xa9", 6, "\"\\u2028\\u2029\"");
	check_json("\xff"
		   "a\xc0\xaf",
		   4, "\"\\ufffda\\ufffd\\ufffd\"");
	check_json("\xe2\x82", 2, "\"\\ufffd\\ufffd\"");

	/* README's example entry; seconds truncated, UTC. */
	strbuf_init(&sb, 4096);
	master_fugitive_json_server(&sb, &s);
	strbuf_append(&sb, "", 0);
	CHECK_EQ_STR(sb.p, "{\"ip\":\"203.0.113.4\",\"port\":45677,\"name\":\"special server\","
			   "\"game_version\":1,\"current_players\":2,\"max_players\":8,"
			   "\"is_joinable\":true,\"last_seen\":\"2021-01-19T12:34:56Z\"}");
	strbuf_release(&sb);
	s.is_joinable = false;
	s.name = "<x>";
	s.name_len = 3;
	s.game_version = -9223372036854775807LL - 1;
	s.seen_wall_ms = 0;
	strbuf_init(&sb, 4096);
	master_fugitive_json_server(&sb, &s);
	strbuf_append(&sb, "", 0);
	CHECK_EQ_STR(sb.p, "{\"ip\":\"203.0.113.4\",\"port\":45677,\"name\":\"\\u003cx\\u003e\","
			   "\"game_version\":-9223372036854775808,\"current_players\":2,"
			   "\"max_players\":8,\"is_joinable\":false,"
			   "\"last_seen\":\"1970-01-01T00:00:00Z\"}");
	strbuf_release(&sb);
}

static void test_utf8(void)
{
	CHECK(master_fugitive_utf8_valid("", 0));
	CHECK(master_fugitive_utf8_valid("abc", 3));
	CHECK(master_fugitive_utf8_valid("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf",
					 13));
	CHECK(master_fugitive_utf8_valid("\xef\xbf\xbd", 3));
	CHECK(!master_fugitive_utf8_valid("\xff", 1));
	CHECK(!master_fugitive_utf8_valid("\xc0\xaf", 2));         /* overlong */
	CHECK(!master_fugitive_utf8_valid("\xe0\x80\xaf", 3));     /* overlong */
	CHECK(!master_fugitive_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
	CHECK(!master_fugitive_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
	CHECK(!master_fugitive_utf8_valid("\xe2\x82", 2));         /* truncated */
	CHECK(!master_fugitive_utf8_valid("\x80", 1));
}

int main(void)
{
	test_id();
	test_body_fields();
	test_body_last_seen();
	test_body_syntax();
	test_body_depth();
	test_body_names();
	test_validate();
	test_json_out();
	test_utf8();
	return tap_done("fugitive");
}
