/*
 * common/q3: the command line of an out-of-band packet as the engine reads
 * it. Expected values come from ioquake3 code/qcommon/msg.c
 * (MSG_ReadStringLine) and code/qcommon/cmd.c (Cmd_TokenizeString), which
 * SV_ConnectionlessPacket runs on every "\xff\xff\xff\xff" datagram.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "q3.h"
#include "tap.h"

static uint8_t pkt[Q3_MAX_PACKET];

/* Builds "\xff\xff\xff\xff" + n bytes of s (s may hold NULs). */
static size_t oob(const char *s, size_t n)
{
	memset(pkt, 0xff, Q3_OOB_PREFIX_LEN);
	memcpy(pkt + Q3_OOB_PREFIX_LEN, s, n);
	return Q3_OOB_PREFIX_LEN + n;
}

#define OOB(lit) oob((lit), sizeof(lit) - 1)

static int tok(size_t len, struct q3_args *a)
{
	memset(a, 0x5a, sizeof(*a));
	return q3_oob_tokenize(pkt, len, a);
}

static void test_is_oob(void)
{
	static const uint8_t four[] = {0xff, 0xff, 0xff, 0xff};
	static const uint8_t seq[] = {0xff, 0xff, 0xff, 0xfe, 'g'};
	struct q3_args a;
	char t[16];

	CHECK(q3_is_oob(four, 4));
	CHECK(!q3_is_oob(four, 3));
	CHECK(!q3_is_oob(four, 0));
	CHECK(!q3_is_oob(seq, sizeof(seq)));

	/* Not out-of-band: in-game sequenced packets are not commands. */
	CHECK_EQ_INT(q3_oob_tokenize(seq, sizeof(seq), &a), -EBADMSG);
	CHECK_EQ_INT(q3_oob_tokenize(four, 3, &a), -EBADMSG);
	CHECK_EQ_INT(q3_oob_command(seq, sizeof(seq), t, sizeof(t)), -EBADMSG);
	CHECK_EQ_INT(q3_oob_command(four, 2, t, sizeof(t)), -EBADMSG);
}

static void test_basic(void)
{
	struct q3_args a;

	/* Only the prefix: an empty line, no tokens. */
	CHECK_EQ_INT(tok(OOB(""), &a), 0);
	CHECK_EQ_INT(a.consumed, 0);
	CHECK_EQ_STR(q3_argv(&a, 0), "");

	CHECK_EQ_INT(tok(OOB("getstatus"), &a), 1);
	CHECK_EQ_STR(q3_argv(&a, 0), "getstatus");
	CHECK_EQ_INT(a.consumed, 9);
	/* Cmd_Argv: "" beyond argc and for negative indexes. */
	CHECK_EQ_STR(q3_argv(&a, 1), "");
	CHECK_EQ_STR(q3_argv(&a, -1), "");

	CHECK_EQ_INT(tok(OOB("getservers 84 empty full"), &a), 4);
	CHECK_EQ_STR(q3_argv(&a, 0), "getservers");
	CHECK_EQ_STR(q3_argv(&a, 1), "84");
	CHECK_EQ_STR(q3_argv(&a, 2), "empty");
	CHECK_EQ_STR(q3_argv(&a, 3), "full");
}

static void test_read_string_line(void)
{
	struct q3_args a;
	char *big;
	size_t n;

	/* '%' becomes '.' ("translate all fmt spec to avoid crash bugs"). */
	CHECK_EQ_INT(tok(OOB("say 100%s%%"), &a), 2);
	CHECK_EQ_STR(q3_argv(&a, 1), "100.s..");
	/* Bytes > 127 become '.' ("don't allow higher ascii values"); 127
	 * itself stays and is not whitespace. */
	CHECK_EQ_INT(tok(OOB("\x80x\xff \x7f"), &a), 2);
	CHECK_EQ_STR(q3_argv(&a, 0), ".x.");
	CHECK_EQ_STR(q3_argv(&a, 1), "\x7f");
	/* ... so a high byte never acts as whitespace (as a signed char it
	 * would be <= ' '). */
	CHECK_EQ_INT(tok(OOB("get\xa0status"), &a), 1);
	CHECK_EQ_STR(q3_argv(&a, 0), "get.status");

	/* The line ends at '\n', which is consumed; the rest is not read. */
	CHECK_EQ_INT(tok(OOB("getinfo xxx\nrcon pw status"), &a), 2);
	CHECK_EQ_STR(q3_argv(&a, 0), "getinfo");
	CHECK_EQ_STR(q3_argv(&a, 1), "xxx");
	CHECK_EQ_INT(a.consumed, 12);
	/* And at NUL. */
	CHECK_EQ_INT(tok(OOB("getinfo\0rcon pw"), &a), 1);
	CHECK_EQ_STR(q3_argv(&a, 0), "getinfo");
	CHECK_EQ_INT(a.consumed, 8);
	/* A line that starts with the terminator is empty. */
	CHECK_EQ_INT(tok(OOB("\ngetstatus"), &a), 0);
	CHECK_EQ_INT(a.consumed, 1);
	CHECK_EQ_INT(tok(OOB("\0getstatus"), &a), 0);

	/*
	 * At most 1023 characters (MAX_STRING_CHARS - 1). With 1021 'a', a
	 * space and "b c", the 1023rd character is 'b': two tokens.
	 */
	big = malloc(4096);
	CHECK(big != NULL);
	if (big == NULL)
		return;
	memset(big, 'a', 1021);
	memcpy(big + 1021, " b c", 4);
	n = oob(big, 1025);
	CHECK_EQ_INT(tok(n, &a), 2);
	CHECK_EQ_INT(strlen(q3_argv(&a, 0)), 1021);
	CHECK_EQ_STR(q3_argv(&a, 1), "b");
	CHECK_EQ_INT(a.consumed, 1023);
	/* One more 'a' pushes 'b' to the 1024th character: cut. */
	memset(big, 'a', 1022);
	memcpy(big + 1022, " b", 2);
	n = oob(big, 1024);
	CHECK_EQ_INT(tok(n, &a), 1);
	CHECK_EQ_INT(strlen(q3_argv(&a, 0)), 1022);
	/* A 4000-byte word is cut to 1023 characters. */
	memset(big, 'z', 4000);
	n = oob(big, 4000);
	CHECK_EQ_INT(tok(n, &a), 1);
	CHECK_EQ_INT(strlen(q3_argv(&a, 0)), 1023);
	CHECK_EQ_INT(a.consumed, 1023);
	/* Hundreds of tokens: bare "a" and empty quoted tokens alternating
	 * ("a""a""..."), each NUL-terminated in the token buffer. */
	for (size_t i = 0; i < 1023; i++)
		big[i] = (char)(i % 3 == 0 ? 'a' : '"');
	n = oob(big, 1023);
	CHECK_EQ_INT(tok(n, &a), 682);
	CHECK_EQ_STR(q3_argv(&a, 0), "a");
	CHECK_EQ_STR(q3_argv(&a, 1), "");
	CHECK_EQ_STR(q3_argv(&a, 681), "");
	free(big);
}

static void test_whitespace_comments(void)
{
	struct q3_args a;

	/* Whitespace is any byte <= ' ' (1..32), not only space and tab. */
	CHECK_EQ_INT(tok(OOB("\x01getinfo\x1f\t\rabc\x0b"), &a), 2);
	CHECK_EQ_STR(q3_argv(&a, 0), "getinfo");
	CHECK_EQ_STR(q3_argv(&a, 1), "abc");
	CHECK_EQ_INT(tok(OOB("   \t "), &a), 0);

	/* "//" ends the line, between tokens or inside a bare one. */
	CHECK_EQ_INT(tok(OOB("getinfo // rcon"), &a), 1);
	CHECK_EQ_INT(tok(OOB("getinfo//rcon"), &a), 1);
	CHECK_EQ_STR(q3_argv(&a, 0), "getinfo");
	CHECK_EQ_INT(tok(OOB("//getinfo"), &a), 0);
	/* A single '/' is an ordinary character. */
	CHECK_EQ_INT(tok(OOB("/getinfo a/b"), &a), 2);
	CHECK_EQ_STR(q3_argv(&a, 0), "/getinfo");
	CHECK_EQ_STR(q3_argv(&a, 1), "a/b");

	/* Slash-star comments are skipped and split bare tokens. */
	CHECK_EQ_INT(tok(OOB("/* c */getinfo"), &a), 1);
	CHECK_EQ_STR(q3_argv(&a, 0), "getinfo");
	CHECK_EQ_INT(tok(OOB("get/*x*/info"), &a), 2);
	CHECK_EQ_STR(q3_argv(&a, 0), "get");
	CHECK_EQ_STR(q3_argv(&a, 1), "info");
	CHECK_EQ_INT(tok(OOB("/**/rcon"), &a), 1);
	CHECK_EQ_STR(q3_argv(&a, 0), "rcon");
	/* The engine looks for the closing star-slash from the opening slash
	 * on, so "/" "*" "/" is a whole comment. */
	CHECK_EQ_INT(tok(OOB("/*/getinfo"), &a), 1);
	CHECK_EQ_STR(q3_argv(&a, 0), "getinfo");
	/* Star-slash outside a comment is text; only "//" and slash-star
	 * end a bare token. */
	CHECK_EQ_INT(tok(OOB("/*/getinfo*/x"), &a), 1);
	CHECK_EQ_STR(q3_argv(&a, 0), "getinfo*/x");
	/* An unterminated comment ends the line. */
	CHECK_EQ_INT(tok(OOB("getinfo /* rcon"), &a), 1);
	CHECK_EQ_INT(tok(OOB("/*"), &a), 0);
	/* Comment markers inside quotes are text. */
	CHECK_EQ_INT(tok(OOB("\"a//b /*c*/\" d"), &a), 2);
	CHECK_EQ_STR(q3_argv(&a, 0), "a//b /*c*/");
	CHECK_EQ_STR(q3_argv(&a, 1), "d");
}

static void test_quotes(void)
{
	struct q3_args a;

	CHECK_EQ_INT(tok(OOB("connect \"\\name\\Player one\\rate\\25000\""), &a), 2);
	CHECK_EQ_STR(q3_argv(&a, 0), "connect");
	CHECK_EQ_STR(q3_argv(&a, 1), "\\name\\Player one\\rate\\25000");
	/* A quote ends a bare token; no backslash escapes. */
	CHECK_EQ_INT(tok(OOB("ab\"c d\"ef"), &a), 3);
	CHECK_EQ_STR(q3_argv(&a, 0), "ab");
	CHECK_EQ_STR(q3_argv(&a, 1), "c d");
	CHECK_EQ_STR(q3_argv(&a, 2), "ef");
	/* "a\" closes at the escaped-looking quote; b is bare; the last
	 * quote opens an empty token that runs to the end. */
	CHECK_EQ_INT(tok(OOB("\"a\\\"b\""), &a), 3);
	CHECK_EQ_STR(q3_argv(&a, 0), "a\\");
	CHECK_EQ_STR(q3_argv(&a, 1), "b");
	CHECK_EQ_STR(q3_argv(&a, 2), "");
	/* An empty quoted token is still a token. */
	CHECK_EQ_INT(tok(OOB("\"\" x"), &a), 2);
	CHECK_EQ_STR(q3_argv(&a, 0), "");
	CHECK_EQ_STR(q3_argv(&a, 1), "x");
	/* An unterminated quote runs to the end of the line. */
	CHECK_EQ_INT(tok(OOB("say \"hello there"), &a), 2);
	CHECK_EQ_STR(q3_argv(&a, 1), "hello there");
	CHECK_EQ_INT(tok(OOB("say \"hello\nrcon"), &a), 2);
	CHECK_EQ_STR(q3_argv(&a, 1), "hello");
	CHECK_EQ_INT(tok(OOB("\"rcon\" pw"), &a), 2);
	CHECK_EQ_STR(q3_argv(&a, 0), "rcon");
}

static void test_command(void)
{
	char t[32];

	CHECK_EQ_INT(q3_oob_command(pkt, OOB("  GetInfo xx"), t, sizeof(t)), 7);
	CHECK_EQ_STR(t, "GetInfo");
	CHECK_EQ_INT(q3_oob_command(pkt, OOB("/*/rcon pw"), t, sizeof(t)), 4);
	CHECK_EQ_STR(t, "rcon");
	CHECK_EQ_INT(q3_oob_command(pkt, OOB("\"get status\""), t, sizeof(t)), 10);
	CHECK_EQ_STR(t, "get status");
	CHECK_EQ_INT(q3_oob_command(pkt, OOB("getinfo\"x\""), t, sizeof(t)), 7);
	CHECK_EQ_STR(t, "getinfo");
	CHECK_EQ_INT(q3_oob_command(pkt, OOB("get%info"), t, sizeof(t)), 8);
	CHECK_EQ_STR(t, "get.info");
	/* Empty lines give 0 and an empty token. */
	memset(t, 'x', sizeof(t));
	CHECK_EQ_INT(q3_oob_command(pkt, OOB(""), t, sizeof(t)), 0);
	CHECK_EQ_STR(t, "");
	memset(t, 'x', sizeof(t));
	CHECK_EQ_INT(q3_oob_command(pkt, OOB("// getinfo"), t, sizeof(t)), 0);
	CHECK_EQ_STR(t, "");
	/* An empty quoted first token: there is a token, of length 0. */
	CHECK_EQ_INT(q3_oob_command(pkt, OOB("\"\"getinfo"), t, sizeof(t)), 0);
	CHECK_EQ_STR(t, "");
	/* Truncated to size - 1. */
	CHECK_EQ_INT(q3_oob_command(pkt, OOB("getchallenge"), t, 4), 3);
	CHECK_EQ_STR(t, "get");
	CHECK_EQ_INT(q3_oob_command(pkt, OOB("getchallenge"), t, 1), 0);
	CHECK_EQ_STR(t, "");
}

static void test_cmd_eq(void)
{
	/* Q_stricmp: ASCII letters only, whole strings. */
	CHECK(q3_cmd_eq("getInfo", "getinfo"));
	CHECK(q3_cmd_eq("GETSTATUS", "getstatus"));
	CHECK(q3_cmd_eq("getstatus", "GetStatus"));
	CHECK(q3_cmd_eq("", ""));
	CHECK(!q3_cmd_eq("getstatusX", "getstatus"));
	CHECK(!q3_cmd_eq("getstatu", "getstatus"));
	CHECK(!q3_cmd_eq("", "getstatus"));
	CHECK(!q3_cmd_eq("get.info", "getinfo"));
	/* '@' and '`' sit next to 'A' and 'a' but are not letters. */
	CHECK(!q3_cmd_eq("@", "`"));
	CHECK(!q3_cmd_eq("[", "{"));
}

static void test_build(void)
{
	uint8_t b[16];
	struct q3_args a;

	memset(b, 0, sizeof(b));
	CHECK_EQ_INT(q3_oob_build(b, sizeof(b), "getinfo xyz", 11), 15);
	CHECK(q3_is_oob(b, 15));
	CHECK(memcmp(b + 4, "getinfo xyz", 11) == 0);
	CHECK_EQ_INT(q3_oob_tokenize(b, 15, &a), 2);
	CHECK_EQ_STR(q3_argv(&a, 1), "xyz");
	/* Exactly full is fine; one byte more is not. */
	CHECK_EQ_INT(q3_oob_build(b, sizeof(b), "0123456789ab", 12), 16);
	memset(b, 0x11, sizeof(b));
	CHECK_EQ_INT(q3_oob_build(b, sizeof(b), "0123456789abc", 13), -EMSGSIZE);
	CHECK_EQ_INT(q3_oob_build(b, 3, "", 0), -EMSGSIZE);
	CHECK_EQ_INT(q3_oob_build(b, 0, "x", 1), -EMSGSIZE);
	/* A refused build writes nothing. */
	CHECK_EQ_INT(b[0], 0x11);
	CHECK_EQ_INT(q3_oob_build(b, 4, "", 0), 4);
	CHECK(q3_is_oob(b, 4));
}

/*
 * Numbers in the master protocol (protocol, sv_maxclients, clients, a game
 * spec's protocols): 1-10 decimal digits, leading zeros counted, no sign,
 * no spaces, no 0x, at most INT32_MAX. Anything else is not a number:
 * getservers then reads the token as a game name.
 */
static void test_numbers(void)
{
	struct q3_getservers gs;
	struct q3_inforesponse ir;
	struct q3_game g;
	char err[128];

	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 0000000071"), &gs), 0);
	CHECK_EQ_INT(gs.protocol, 71);
	CHECK_EQ_STR(gs.gamename, "");
	/* Eleven digits, a sign, hex: a name, which needs a protocol after it. */
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 00000000071"), &gs), -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 00000000071 0"), &gs), 0);
	CHECK_EQ_STR(gs.gamename, "00000000071");
	CHECK_EQ_INT(gs.protocol, 0);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers +71"), &gs), -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers -71 68"), &gs), 0);
	CHECK_EQ_STR(gs.gamename, "-71");
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 0x47"), &gs), -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 4294967367"), &gs), -EBADMSG);

	CHECK_EQ_INT(q3_decode_inforesponse(pkt,
					    OOB("infoResponse\n\\challenge\\c\\protocol\\0000000071"
						"\\sv_maxclients\\2147483647\\clients\\0"),
					    &ir),
		     0);
	CHECK_EQ_INT(ir.protocol, 71);
	CHECK_EQ_INT(ir.maxclients, INT32_MAX);
	CHECK_EQ_INT(ir.clients, 0);
	CHECK_EQ_INT(q3_decode_inforesponse(pkt,
					    OOB("infoResponse\n\\challenge\\c\\protocol\\71"
						"\\sv_maxclients\\2147483648\\clients\\0"),
					    &ir),
		     -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_MAXCLIENTS);
	CHECK_EQ_INT(q3_decode_inforesponse(pkt,
					    OOB("infoResponse\n\\challenge\\c\\protocol\\71"
						"\\sv_maxclients\\8\\clients\\ 1"),
					    &ir),
		     -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_CLIENTS);
	CHECK_EQ_INT(q3_decode_inforesponse(pkt,
					    OOB("infoResponse\n\\challenge\\c\\protocol\\"
						"\\sv_maxclients\\8\\clients\\1"),
					    &ir),
		     -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_PROTOCOL);

	CHECK_EQ_INT(q3_parse_game_spec("G:heartbeat=T,protocols=0000000001/2147483647", &g, err,
					sizeof(err)),
		     0);
	CHECK_EQ_INT(g.nprotocols, 2);
	CHECK_EQ_INT(g.protocols[0], 1);
	CHECK_EQ_INT(g.protocols[1], INT32_MAX);
	CHECK_EQ_INT(q3_parse_game_spec("G:heartbeat=T,protocols=1/+2", &g, err, sizeof(err)),
		     -EINVAL);
	CHECK_EQ_INT(q3_parse_game_spec("G:heartbeat=T,protocols=1//2", &g, err, sizeof(err)),
		     -EINVAL);
}

/*
 * hostname and mapname are for display: colour codes dropped, non-ASCII
 * and control bytes shown as '?', cut to fit, absent as "", and never a
 * reason to refuse the response.
 */
static void test_display_fields(void)
{
	struct q3_inforesponse ir;
	char longname[200];

	CHECK_EQ_INT(q3_decode_inforesponse(pkt,
					    OOB("infoResponse\n\\challenge\\c\\protocol\\71"
						"\\sv_maxclients\\8\\clients\\1\\hostname\\"
						"  ^1Red ^^7<b>\xe9\x01  \\mapname\\oa_dm1"),
					    &ir),
		     0);
	CHECK_EQ_STR(ir.hostname, "Red ^<b>??");
	CHECK_EQ_STR(ir.mapname, "oa_dm1");
	CHECK_EQ_INT(q3_decode_inforesponse(pkt,
					    OOB("infoResponse\n\\challenge\\c\\protocol\\71"
						"\\sv_maxclients\\8\\clients\\1"),
					    &ir),
		     0);
	CHECK_EQ_STR(ir.hostname, "");
	CHECK_EQ_STR(ir.mapname, "");
	{
		uint8_t buf[512];
		int n;

		memset(longname, 'x', sizeof(longname) - 1);
		longname[sizeof(longname) - 1] = '\0';
		n = snprintf((char *)buf, sizeof(buf),
			     "\xff\xff\xff\xffinfoResponse\n\\challenge\\c\\protocol\\71"
			     "\\sv_maxclients\\8\\clients\\1\\hostname\\%s",
			     longname);
		CHECK_EQ_INT(q3_decode_inforesponse(buf, (size_t)n, &ir), 0);
		CHECK_EQ_INT(strlen(ir.hostname), Q3_HOSTNAME_MAX);
	}
}

int main(void)
{
	test_is_oob();
	test_basic();
	test_read_string_line();
	test_whitespace_comments();
	test_quotes();
	test_command();
	test_cmd_eq();
	test_build();
	test_numbers();
	test_display_fields();
	return tap_done("q3");
}
