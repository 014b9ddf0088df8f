/*
 * The Quake 3 / ET master: the codec in common/q3 (classify, heartbeat,
 * getservers/getserversExt, infoResponse, challenges, getinfo, responses
 * split at 1,400 bytes, --q3-game specs), then master/master_q3.c driven
 * through a real loop over loopback sockets (challenge round trip, expiry,
 * flatlines, per-address cap, throttle, filters, IPv6, snapshots).
 * Expected values come from dpmaster's doc/techinfo.txt and its messages.c
 * behaviour, and from what ioquake3/OpenArena and qstat send.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "addr.h"
#include "ev.h"
#include "log.h"
#include "master.h"
#include "q3.h"
#include "strbuf.h"
#include "tap.h"

static uint8_t pkt[4096];

/* "\xff\xff\xff\xff" + n bytes of s. */
static size_t oob(const char *s, size_t n)
{
	memset(pkt, 0xff, Q3_OOB_PREFIX_LEN);
	memcpy(pkt + Q3_OOB_PREFIX_LEN, s, n);
	return Q3_OOB_PREFIX_LEN + n;
}

#define OOB(lit) oob((lit), sizeof(lit) - 1)

/* ---- codec ---- */

static void test_classify(void)
{
	CHECK_EQ_INT(q3_master_classify(pkt, OOB("heartbeat QuakeArena-1\n")), Q3_MSG_HEARTBEAT);
	CHECK_EQ_INT(q3_master_classify(pkt, OOB("infoResponse\n\\a\\b")), Q3_MSG_INFORESPONSE);
	CHECK_EQ_INT(q3_master_classify(pkt, OOB("getservers 68 empty full")), Q3_MSG_GETSERVERS);
	CHECK_EQ_INT(q3_master_classify(pkt, OOB("getserversExt et 84")), Q3_MSG_GETSERVERSEXT);
	/* The command needs its separator, and case matters (strncmp). */
	CHECK_EQ_INT(q3_master_classify(pkt, OOB("heartbeat")), Q3_MSG_UNKNOWN);
	CHECK_EQ_INT(q3_master_classify(pkt, OOB("getservers")), Q3_MSG_UNKNOWN);
	CHECK_EQ_INT(q3_master_classify(pkt, OOB("infoResponse \\a\\b")), Q3_MSG_UNKNOWN);
	CHECK_EQ_INT(q3_master_classify(pkt, OOB("HEARTBEAT x")), Q3_MSG_UNKNOWN);
	CHECK_EQ_INT(q3_master_classify(pkt, OOB("getserversResponse\\")), Q3_MSG_UNKNOWN);
	CHECK_EQ_INT(q3_master_classify(pkt, OOB("getinfo abc")), Q3_MSG_UNKNOWN);
	CHECK_EQ_INT(q3_master_classify(pkt, OOB("")), Q3_MSG_UNKNOWN);
	CHECK_EQ_INT(q3_master_classify((const uint8_t *)"heartbeat x", 11), Q3_MSG_NOT_OOB);
	CHECK_EQ_INT(q3_master_classify(pkt, 3), Q3_MSG_NOT_OOB);
}

static void test_heartbeat(void)
{
	struct q3_heartbeat hb;
	char big[128];

	CHECK_EQ_INT(q3_decode_heartbeat(pkt, OOB("heartbeat QuakeArena-1\n"), &hb), 0);
	CHECK_EQ_STR(hb.tag, "QuakeArena-1");
	CHECK_EQ_INT(q3_decode_heartbeat(pkt, OOB("heartbeat EnemyTerritory-1"), &hb), 0);
	CHECK_EQ_STR(hb.tag, "EnemyTerritory-1");
	/* Leading blanks skipped, the rest ignored (sscanf "%63s"). */
	CHECK_EQ_INT(q3_decode_heartbeat(pkt, OOB("heartbeat  \tDarkPlaces extra\n"), &hb), 0);
	CHECK_EQ_STR(hb.tag, "DarkPlaces");
	/* A NUL or a newline ends the line. */
	CHECK_EQ_INT(q3_decode_heartbeat(pkt, OOB("heartbeat ab\0cd"), &hb), 0);
	CHECK_EQ_STR(hb.tag, "ab");
	CHECK_EQ_INT(q3_decode_heartbeat(pkt, OOB("heartbeat \nQuakeArena-1"), &hb), -EBADMSG);
	CHECK_EQ_INT(q3_decode_heartbeat(pkt, OOB("heartbeat "), &hb), -EBADMSG);
	CHECK_EQ_INT(q3_decode_heartbeat(pkt, OOB("heartbeat    "), &hb), -EBADMSG);
	CHECK_EQ_INT(q3_decode_heartbeat(pkt, OOB("heartbeat Q\x80"), &hb), -EBADMSG);
	CHECK_EQ_INT(q3_decode_heartbeat(pkt, OOB("getservers 68"), &hb), -EBADMSG);
	/* 63 characters fit, 64 do not. */
	memcpy(big, "heartbeat ", 10);
	memset(big + 10, 'T', 63);
	CHECK_EQ_INT(q3_decode_heartbeat(pkt, oob(big, 10 + 63), &hb), 0);
	CHECK_EQ_INT(strlen(hb.tag), 63);
	memset(big + 10, 'T', 64);
	CHECK_EQ_INT(q3_decode_heartbeat(pkt, oob(big, 10 + 64), &hb), -EBADMSG);
}

static void test_getservers(void)
{
	struct q3_getservers gs;
	char big[256];

	/* qstat -q3m / -openarenam, with and without the trailing newline. */
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 68 empty full"), &gs), 0);
	CHECK_EQ_STR(gs.gamename, "");
	CHECK_EQ_INT(gs.protocol, 68);
	CHECK_EQ_INT(gs.flags, Q3_GS_EMPTY | Q3_GS_FULL | Q3_GS_IPV4);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 71 empty full\n"), &gs), 0);
	CHECK_EQ_INT(gs.protocol, 71);
	CHECK_EQ_INT(gs.flags, Q3_GS_EMPTY | Q3_GS_FULL | Q3_GS_IPV4);
	/* ET: the protocol alone. */
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 84"), &gs), 0);
	CHECK_EQ_INT(gs.protocol, 84);
	CHECK_EQ_INT(gs.flags, Q3_GS_IPV4);
	/* DarkPlaces: the game name first. */
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers Nexuiz 3 empty full"), &gs), 0);
	CHECK_EQ_STR(gs.gamename, "Nexuiz");
	CHECK_EQ_INT(gs.protocol, 3);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers qfusion 39 full"), &gs), 0);
	CHECK_EQ_STR(gs.gamename, "qfusion");
	CHECK_EQ_INT(gs.flags, Q3_GS_FULL | Q3_GS_IPV4);
	/* Gametype filters and Q3A's shortcuts; the last one wins. */
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 67 ffa empty full"), &gs), 0);
	CHECK((gs.flags & Q3_GS_GAMETYPE) && strcmp(gs.gametype, "0") == 0);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 67 tourney"), &gs), 0);
	CHECK_EQ_STR(gs.gametype, "1");
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 67 team"), &gs), 0);
	CHECK_EQ_STR(gs.gametype, "3");
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 67 ctf"), &gs), 0);
	CHECK_EQ_STR(gs.gametype, "4");
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 67 ctf gametype=elim"), &gs), 0);
	CHECK_EQ_STR(gs.gametype, "elim");
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 67 gametype= x"), &gs), 0);
	CHECK((gs.flags & Q3_GS_GAMETYPE) && gs.gametype[0] == '\0');
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 67 empty"), &gs), 0);
	CHECK(!(gs.flags & Q3_GS_GAMETYPE));
	/* A gametype longer than 31 characters is refused, not truncated. */
	snprintf(big, sizeof(big), "getservers 67 gametype=%032d", 7);
	CHECK_EQ_INT(q3_decode_getservers(pkt, oob(big, strlen(big)), &gs), -EBADMSG);
	snprintf(big, sizeof(big), "getservers 67 gametype=%031d", 7);
	CHECK_EQ_INT(q3_decode_getservers(pkt, oob(big, strlen(big)), &gs), 0);
	/* Unknown options are ignored; ipv4/ipv6 mean nothing to getservers. */
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 68 demo ipv6 empty"), &gs), 0);
	CHECK_EQ_INT(gs.flags, Q3_GS_EMPTY | Q3_GS_IPV4);
	/* getserversExt: both families unless asked. */
	CHECK_EQ_INT(
		q3_decode_getservers(pkt, OOB("getserversExt Quake3Arena 68 ipv4 empty ipv6"), &gs),
		0);
	CHECK_EQ_STR(gs.gamename, "Quake3Arena");
	CHECK_EQ_INT(gs.flags, Q3_GS_EXT | Q3_GS_EMPTY | Q3_GS_IPV4 | Q3_GS_IPV6);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getserversExt et 84"), &gs), 0);
	CHECK_EQ_INT(gs.flags, Q3_GS_EXT | Q3_GS_IPV4 | Q3_GS_IPV6);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getserversExt et 84 ipv6 full"), &gs), 0);
	CHECK_EQ_INT(gs.flags, Q3_GS_EXT | Q3_GS_IPV6 | Q3_GS_FULL);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getserversExt DarkPlaces-Quake 3 ipv4"), &gs),
		     0);
	CHECK_EQ_INT(gs.flags, Q3_GS_EXT | Q3_GS_IPV4);
	/* getserversExt always names the game: "68" is a name, "empty" no
	 * protocol (dpmaster rejects ioquake3's old nameless form too). */
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getserversExt 68 empty ipv6"), &gs), -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getserversExt 68 71"), &gs), 0);
	CHECK_EQ_STR(gs.gamename, "68");
	/* Malformed. */
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers "), &gs), -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers \n68"), &gs), -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers Nexuiz"), &gs), -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers Nexuiz x3"), &gs), -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers Nexuiz -3"), &gs), -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers Nexuiz 0x10"), &gs), -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 68 empty\x90"), &gs), -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getserversExt"), &gs), -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("heartbeat 68"), &gs), -EBADMSG);
	/* 2147483647 is a protocol; 2147483648 is not a number, so a name. */
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 2147483647"), &gs), 0);
	CHECK_EQ_INT(gs.protocol, INT32_MAX);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 2147483648"), &gs), -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers(pkt, OOB("getservers 2147483648 5"), &gs), 0);
	CHECK_EQ_STR(gs.gamename, "2147483648");
	/* A 63-character game name fits, 64 do not. */
	memcpy(big, "getservers ", 11);
	memset(big + 11, 'g', 63);
	memcpy(big + 11 + 63, " 3", 2);
	CHECK_EQ_INT(q3_decode_getservers(pkt, oob(big, 11 + 63 + 2), &gs), 0);
	memset(big + 11, 'g', 64);
	memcpy(big + 11 + 64, " 3", 2);
	CHECK_EQ_INT(q3_decode_getservers(pkt, oob(big, 11 + 64 + 2), &gs), -EBADMSG);
}

/* An infoResponse as OpenArena 0.8.8 sends it (ioquake3 SVC_Info). */
#define OA_INFO                                                                                    \
	"infoResponse\n\\challenge\\xyz123456\\version\\ioq3 1.36_GIT_ba68b99c-2018-01-23 "        \
	"linux-x86_64 Jan 23 2018\\g_needpass\\0\\pure\\1\\gametype\\0\\sv_maxclients\\8\\"        \
	"g_humanplayers\\0\\clients\\0\\mapname\\oa_dm1\\hostname\\rally-integ\\protocol\\71\\"    \
	"gamename\\Quake3Arena"

static int info(const char *body, struct q3_inforesponse *ir)
{
	char text[3000];
	int n = snprintf(text, sizeof(text), "infoResponse\n%s", body);

	return q3_decode_inforesponse(pkt, oob(text, (size_t)n), ir);
}

static void test_inforesponse(void)
{
	struct q3_inforesponse ir;
	char body[2048], k300[301], v300[301];

	CHECK_EQ_INT(q3_decode_inforesponse(pkt, OOB(OA_INFO), &ir), 0);
	CHECK_EQ_INT(ir.challenge_len, 9);
	CHECK(memcmp(ir.challenge, "xyz123456", 9) == 0);
	CHECK_EQ_INT(ir.protocol, 71);
	CHECK_EQ_INT(ir.maxclients, 8);
	CHECK_EQ_INT(ir.clients, 0);
	CHECK(ir.has_gamename);
	CHECK_EQ_STR(ir.gamename, "Quake3Arena");
	CHECK_EQ_STR(ir.gametype, "0");
	CHECK_EQ_INT(ir.error, Q3_INFO_OK);

	/* techinfo's sample; no gametype -> "0", no gamename. */
	CHECK_EQ_INT(info("\\sv_maxclients\\8\\clients\\0\\protocol\\5\\challenge\\pw", &ir), 0);
	CHECK(!ir.has_gamename);
	CHECK_EQ_STR(ir.gametype, "0");
	/* Without the leading backslash too; keys case-insensitively; the
	 * first occurrence wins. */
	CHECK_EQ_INT(info("Challenge\\c\\PROTOCOL\\68\\protocol\\99\\sv_maxclients\\16\\clients\\3",
			  &ir),
		     0);
	CHECK_EQ_INT(ir.protocol, 68);
	CHECK_EQ_INT(ir.clients, 3);
	CHECK_EQ_INT(ir.maxclients, 16);
	/* ET: a word gametype. */
	CHECK_EQ_INT(info("\\challenge\\c\\protocol\\84\\sv_maxclients\\20\\clients\\20\\gametype\\"
			  "campaign\\gamename\\et",
			  &ir),
		     0);
	CHECK_EQ_STR(ir.gametype, "campaign");
	CHECK_EQ_STR(ir.gamename, "et");

	/* Each required field, in dpmaster's order. */
	CHECK_EQ_INT(info("\\protocol\\71\\sv_maxclients\\8\\clients\\0", &ir), -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_NO_CHALLENGE);
	CHECK_EQ_INT(info("\\challenge\\c\\sv_maxclients\\8\\clients\\0", &ir), -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_PROTOCOL);
	CHECK(ir.challenge != NULL && ir.challenge_len == 1);
	CHECK_EQ_INT(info("\\challenge\\c\\protocol\\7a\\sv_maxclients\\8\\clients\\0", &ir),
		     -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_PROTOCOL);
	CHECK_EQ_INT(info("\\challenge\\c\\protocol\\\\sv_maxclients\\8\\clients\\0", &ir),
		     -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_PROTOCOL);
	CHECK_EQ_INT(info("\\challenge\\c\\protocol\\71\\clients\\0", &ir), -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_MAXCLIENTS);
	CHECK_EQ_INT(info("\\challenge\\c\\protocol\\71\\sv_maxclients\\0\\clients\\0", &ir),
		     -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_MAXCLIENTS);
	CHECK_EQ_INT(info("\\challenge\\c\\protocol\\71\\sv_maxclients\\-8\\clients\\0", &ir),
		     -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_MAXCLIENTS);
	CHECK_EQ_INT(info("\\challenge\\c\\protocol\\71\\sv_maxclients\\8", &ir), -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_CLIENTS);
	CHECK_EQ_INT(info("\\challenge\\c\\protocol\\71\\sv_maxclients\\8\\clients\\two", &ir),
		     -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_CLIENTS);
	CHECK_EQ_INT(
		info("\\challenge\\c\\protocol\\71\\sv_maxclients\\8\\clients\\0\\gamename\\", &ir),
		-EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_GAMENAME);
	CHECK_EQ_INT(info("\\challenge\\c\\protocol\\71\\sv_maxclients\\8\\clients\\0\\gamename\\"
			  "Quake 3",
			  &ir),
		     -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_GAMENAME);
	CHECK_EQ_INT(info("\\challenge\\c\\protocol\\71\\sv_maxclients\\8\\clients\\0\\gametype\\"
			  "capture the flag",
			  &ir),
		     -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_GAMETYPE);
	/* The infostring ends at a NUL: what follows is not read. */
	CHECK_EQ_INT(q3_decode_inforesponse(pkt,
					    OOB("infoResponse\n\\challenge\\c\\protocol\\71\\"
						"sv_maxclients\\8\0\\clients\\0"),
					    &ir),
		     -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_CLIENTS);
	CHECK_EQ_INT(q3_decode_inforesponse(pkt, OOB("infoResponse \\challenge\\c"), &ir),
		     -EBADMSG);

	/* 300-character keys and values around the real fields. */
	memset(k300, 'K', 300);
	k300[300] = '\0';
	memset(v300, 'V', 300);
	v300[300] = '\0';
	snprintf(body, sizeof(body),
		 "\\%s\\%s\\challenge\\c\\%s\\x\\protocol\\71\\y\\%s\\sv_maxclients\\8\\clients\\1",
		 k300, v300, k300, v300);
	CHECK_EQ_INT(info(body, &ir), 0);
	CHECK_EQ_INT(ir.clients, 1);
	/* A 300-character challenge is handed over (the module compares it). */
	snprintf(body, sizeof(body), "\\challenge\\%s\\protocol\\71\\sv_maxclients\\8\\clients\\1",
		 v300);
	CHECK_EQ_INT(info(body, &ir), 0);
	CHECK_EQ_INT(ir.challenge_len, 300);
	/* 300-character game name and type: refused. */
	snprintf(body, sizeof(body),
		 "\\challenge\\c\\protocol\\71\\sv_maxclients\\8\\clients\\1\\gamename\\%s", v300);
	CHECK_EQ_INT(info(body, &ir), -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_GAMENAME);
	snprintf(body, sizeof(body),
		 "\\challenge\\c\\protocol\\71\\sv_maxclients\\8\\clients\\1\\gametype\\%s", v300);
	CHECK_EQ_INT(info(body, &ir), -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_GAMETYPE);
	/* A 300-digit number. */
	memset(v300, '9', 300);
	snprintf(body, sizeof(body), "\\challenge\\c\\protocol\\%s\\sv_maxclients\\8\\clients\\1",
		 v300);
	CHECK_EQ_INT(info(body, &ir), -EPROTO);
	CHECK_EQ_INT(ir.error, Q3_INFO_BAD_PROTOCOL);

	/* BIG_INFO_STRING: 8192 bytes or more are refused. */
	{
		static uint8_t huge[9000];
		size_t n = Q3_OOB_PREFIX_LEN + 13 + 8192;

		memset(huge, 0xff, 4);
		memcpy(huge + 4, "infoResponse\n", 13);
		memset(huge + 17, 'a', n - 17);
		CHECK_EQ_INT(q3_decode_inforesponse(huge, n, &ir), -EPROTO);
		CHECK_EQ_INT(ir.error, Q3_INFO_TOO_LONG);
	}
	CHECK_EQ_STR(q3_info_error_str(Q3_INFO_BAD_GAMETYPE), "bad_gametype");
	CHECK_EQ_STR(q3_info_error_str(Q3_INFO_NO_CHALLENGE), "no_challenge");
}

static bool forbidden(int c)
{
	return c < 33 || c > 126 || c == '\\' || c == '/' || c == ';' || c == '"' || c == '%';
}

static void test_challenge(void)
{
	uint8_t rnd[Q3_CHALLENGE_RND];
	char ch[Q3_CHALLENGE_MAX + 1];
	bool seen_len[Q3_CHALLENGE_MAX + 1] = {false}, seen_char[128] = {false};
	size_t n;
	int allowed = 0, seen = 0;

	memset(rnd, 0, sizeof(rnd));
	CHECK_EQ_INT(q3_challenge_make(rnd, ch), 9);
	CHECK_EQ_STR(ch, "!!!!!!!!!");
	memset(rnd, 0xff, sizeof(rnd));
	/* rnd[0] = 255 -> 9 + 255 % 4 = 12; 65535 % 89 = 31 -> the 32nd
	 * allowed character: '!' '#'-'$' '&'-'.' '0'-':' '<'-'C' then 'D'. */
	CHECK_EQ_INT(q3_challenge_make(rnd, ch), 12);
	CHECK_EQ_STR(ch, "DDDDDDDDDDDD");
	for (int i = 0; i < 20000; i++) {
		randombytes_buf(rnd, sizeof(rnd));
		n = q3_challenge_make(rnd, ch);
		CHECK(n >= Q3_CHALLENGE_MIN && n <= Q3_CHALLENGE_MAX && strlen(ch) == n);
		CHECK(q3_challenge_valid(ch, n));
		seen_len[n] = true;
		for (size_t k = 0; k < n; k++) {
			CHECK(!forbidden((unsigned char)ch[k]));
			seen_char[(unsigned char)ch[k]] = true;
		}
	}
	for (int c = 0; c < 128; c++) {
		allowed += !forbidden(c);
		seen += seen_char[c];
	}
	CHECK_EQ_INT(allowed, 89);
	CHECK_EQ_INT(seen, 89);
	for (size_t l = Q3_CHALLENGE_MIN; l <= Q3_CHALLENGE_MAX; l++)
		CHECK(seen_len[l]);
	CHECK(!q3_challenge_valid("abcdefgh", 8));
	CHECK(!q3_challenge_valid("abcdefghijklm", 13));
	CHECK(!q3_challenge_valid("abcd%fghi", 9));
	CHECK(!q3_challenge_valid("abcd efghi", 10));
	CHECK(q3_challenge_valid("A_ch4Lleng3", 11));
}

static void test_getinfo(void)
{
	uint8_t buf[64];
	static const uint8_t want[] = "\xff\xff\xff\xffgetinfo A_ch4Lleng3";

	CHECK_EQ_INT(q3_encode_getinfo(buf, sizeof(buf), "A_ch4Lleng3", 11), sizeof(want) - 1);
	CHECK(memcmp(buf, want, sizeof(want) - 1) == 0);
	CHECK_EQ_INT(q3_encode_getinfo(buf, sizeof(want) - 2, "A_ch4Lleng3", 11), -EMSGSIZE);
}

/*
 * Splits a run of response datagrams back into servers, checking the
 * framing: every datagram has the header and is at most 1,400 bytes, the
 * EOT mark ends the last one and appears nowhere else.
 */
static int parse_resp(uint8_t dg[][Q3_MASTER_MAX_OUT], const size_t *len, size_t ndg, bool ext,
		      struct q3_srv *out, size_t max)
{
	const char *hdr = ext ? "\xff\xff\xff\xffgetserversExtResponse"
			      : "\xff\xff\xff\xffgetserversResponse";
	size_t hl = strlen(hdr), n = 0;

	for (size_t d = 0; d < ndg; d++) {
		size_t o = hl;

		if (len[d] > Q3_MASTER_MAX_OUT || len[d] < hl || memcmp(dg[d], hdr, hl) != 0)
			return -1;
		while (o < len[d]) {
			if (len[d] - o == 7 && memcmp(dg[d] + o, "\\EOT\0\0\0", 7) == 0) {
				if (d != ndg - 1)
					return -2;
				return (int)n;
			}
			if (n == max)
				return -3;
			memset(&out[n], 0, sizeof(out[n]));
			if (dg[d][o] == '\\' && len[d] - o >= 7) {
				memcpy(out[n].ip, dg[d] + o + 1, 4);
				out[n].port = (uint16_t)(dg[d][o + 5] << 8 | dg[d][o + 6]);
				o += 7;
			} else if (dg[d][o] == '/' && ext && len[d] - o >= 19) {
				out[n].v6 = true;
				memcpy(out[n].ip, dg[d] + o + 1, 16);
				out[n].port = (uint16_t)(dg[d][o + 17] << 8 | dg[d][o + 18]);
				o += 19;
			} else {
				return -4;
			}
			n++;
		}
	}
	return -5; /* no EOT */
}

/* Member by member: struct q3_srv has padding. */
static bool same_srvs(const struct q3_srv *a, const struct q3_srv *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (a[i].v6 != b[i].v6 || a[i].port != b[i].port ||
		    memcmp(a[i].ip, b[i].ip, a[i].v6 ? 16 : 4) != 0)
			return false;
	}
	return true;
}

static void test_encode(void)
{
	static struct q3_srv v[600], back[600];
	static uint8_t dg[16][Q3_MASTER_MAX_OUT];
	size_t len[16], taken, ndg;
	struct q3_srvlist list = {.ext = false, .v = v, .n = 0};
	ssize_t r;

	/* No servers: the header and the mark. */
	taken = 0;
	r = q3_encode_getservers_resp(dg[0], Q3_MASTER_MAX_OUT, &list, &taken);
	CHECK_EQ_INT(r, 22 + 7);
	CHECK(memcmp(dg[0], "\xff\xff\xff\xffgetserversResponse\\EOT\0\0\0", 29) == 0);
	CHECK_EQ_INT(taken, 1);
	/* techinfo: 1.2.3.4 port 2048 is "\x01\x02\x03\x04\x08\x00". */
	v[0] = (struct q3_srv){.ip = {1, 2, 3, 4}, .port = 2048};
	list.n = 1;
	taken = 0;
	r = q3_encode_getservers_resp(dg[0], Q3_MASTER_MAX_OUT, &list, &taken);
	CHECK_EQ_INT(r, 22 + 7 + 7);
	CHECK(memcmp(dg[0] + 22, "\\\x01\x02\x03\x04\x08\x00\\EOT\0\0\0", 14) == 0);
	CHECK_EQ_INT(taken, 2);
	CHECK_EQ_INT(q3_encode_getservers_resp(dg[0], Q3_MASTER_MAX_OUT, &list, &taken), -EINVAL);

	/* (1400 - 22) / 7 = 196 entries per datagram, 6 bytes left. */
	for (size_t sizes[] = {195, 196, 197, 392, 500}, k = 0; k < 5; k++) {
		list.n = sizes[k];
		for (size_t i = 0; i < list.n; i++)
			v[i] = (struct q3_srv){.ip = {10, (uint8_t)(i >> 8), (uint8_t)i, 1},
					       .port = (uint16_t)(27960 + i)};
		taken = 0;
		ndg = 0;
		while (taken <= list.n && ndg < 16) {
			r = q3_encode_getservers_resp(dg[ndg], Q3_MASTER_MAX_OUT, &list, &taken);
			CHECK(r > 0 && r <= Q3_MASTER_MAX_OUT);
			len[ndg++] = (size_t)r;
		}
		CHECK_EQ_INT(parse_resp(dg, len, ndg, false, back, 600), (int)list.n);
		CHECK(same_srvs(back, v, list.n));
		/* 195: one datagram; 196: the mark alone in a second one. */
		if (sizes[k] == 195)
			CHECK(ndg == 1 && len[0] == 22 + 195 * 7 + 7);
		if (sizes[k] == 196)
			CHECK(ndg == 2 && len[0] == 22 + 196 * 7 && len[1] == 22 + 7);
		if (sizes[k] == 500)
			CHECK(ndg == 3 && len[0] == 1394 && len[1] == 1394 &&
			      len[2] == 22 + 108 * 7 + 7);
	}

	/* getserversExtResponse: '\' IPv4 and '/' IPv6 entries mixed. */
	list.ext = true;
	list.n = 300;
	for (size_t i = 0; i < list.n; i++) {
		v[i] = (struct q3_srv){.port = (uint16_t)i, .v6 = i % 3 == 0};
		v[i].ip[0] = v[i].v6 ? 0x20 : 192;
		v[i].ip[1] = v[i].v6 ? 0x01 : 0;
		v[i].ip[3] = (uint8_t)i;
		if (v[i].v6)
			v[i].ip[15] = (uint8_t)(i >> 1);
	}
	taken = 0;
	ndg = 0;
	while (taken <= list.n && ndg < 16) {
		r = q3_encode_getservers_resp(dg[ndg], Q3_MASTER_MAX_OUT, &list, &taken);
		CHECK(r > 0 && r <= Q3_MASTER_MAX_OUT);
		len[ndg++] = (size_t)r;
	}
	CHECK_EQ_INT(parse_resp(dg, len, ndg, true, back, 600), 300);
	CHECK(same_srvs(back, v, 300));
	CHECK(memcmp(dg[0], "\xff\xff\xff\xffgetserversExtResponse/\x20\x01", 28) == 0);
	/* (100 v6 * 19 + 200 v4 * 7) = 3300 bytes of entries: 3 datagrams. */
	CHECK_EQ_INT(ndg, 3);

	/* An IPv6 entry cannot go in a getserversResponse; tiny buffers. */
	list.ext = false;
	taken = 0;
	CHECK_EQ_INT(q3_encode_getservers_resp(dg[0], Q3_MASTER_MAX_OUT, &list, &taken), -EINVAL);
	list.ext = true;
	taken = 0;
	CHECK_EQ_INT(q3_encode_getservers_resp(dg[0], 25 + 18, &list, &taken), -EMSGSIZE);
	/* The smallest buffer: one IPv6 entry per datagram, still progressing. */
	list.n = 3;
	taken = 0;
	ndg = 0;
	while (taken <= list.n && ndg < 16) {
		r = q3_encode_getservers_resp(dg[ndg], 25 + 19, &list, &taken);
		CHECK(r > 0 && r <= 25 + 19);
		len[ndg++] = (size_t)r;
	}
	CHECK_EQ_INT(parse_resp(dg, len, ndg, true, back, 600), 3);
}

/* The requests rally-relay's listing check sends (relay_listing.c), and
 * what q3_decode_getservers makes of them. */
static void test_encode_request(void)
{
	static const struct {
		struct q3_getservers req;
		const char *wire; /* after the 0xff x4 prefix */
	} ok[] = {
		/* qstat -q3m,71 and the relay's check of an OpenArena server. */
		{{.flags = Q3_GS_EMPTY | Q3_GS_FULL | Q3_GS_IPV4, .protocol = 71},
		 "getservers 71 empty full"},
		/* ET 2.60b: protocol 84. */
		{{.flags = Q3_GS_EMPTY | Q3_GS_FULL | Q3_GS_IPV4, .protocol = 84},
		 "getservers 84 empty full"},
		/* dpmaster messages.c: "getservers Nexuiz 3 empty full". */
		{{.flags = Q3_GS_EMPTY | Q3_GS_FULL | Q3_GS_IPV4,
		  .protocol = 3,
		  .gamename = "Nexuiz"},
		 "getservers Nexuiz 3 empty full"},
		/* An IPv6-capable master (dpmaster: "getserversExt DarkPlaces-Quake 3
		 * empty full ipv4 ipv6"). */
		{{.flags = Q3_GS_EXT | Q3_GS_EMPTY | Q3_GS_FULL | Q3_GS_IPV4 | Q3_GS_IPV6,
		  .protocol = 71,
		  .gamename = "Quake3Arena"},
		 "getserversExt Quake3Arena 71 empty full ipv4 ipv6"},
		{{.flags = Q3_GS_EXT | Q3_GS_IPV6, .protocol = 68, .gamename = "Quake3Arena"},
		 "getserversExt Quake3Arena 68 ipv6"},
		{{.flags = Q3_GS_EMPTY | Q3_GS_GAMETYPE | Q3_GS_IPV4,
		  .protocol = 68,
		  .gametype = "4"},
		 "getservers 68 empty gametype=4"},
		{{.flags = Q3_GS_IPV4, .protocol = 0}, "getservers 0"},
	};
	uint8_t buf[128];
	struct q3_getservers back, bad;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		int n = q3_encode_getservers(buf, sizeof(buf), &ok[i].req);
		size_t wl = strlen(ok[i].wire);

		CHECK_EQ_INT(n, 4 + (int)wl);
		CHECK(n > 4 && memcmp(buf, "\xff\xff\xff\xff", 4) == 0 &&
		      memcmp(buf + 4, ok[i].wire, wl) == 0);
		/* Round trip: the master reads the same request back. */
		CHECK_EQ_INT(q3_decode_getservers(buf, (size_t)n, &back), 0);
		CHECK_EQ_INT(back.flags, ok[i].req.flags);
		CHECK_EQ_INT(back.protocol, ok[i].req.protocol);
		CHECK_EQ_STR(back.gamename, ok[i].req.gamename);
		CHECK_EQ_STR(back.gametype, ok[i].req.gametype);
		/* One byte short: refused, nothing claimed. */
		CHECK_EQ_INT(q3_encode_getservers(buf, (size_t)n - 1, &ok[i].req), -EMSGSIZE);
	}

	/* getserversExt needs the game; a getservers game of digits would read
	 * as the protocol; words only; no negative protocol. */
	bad = (struct q3_getservers){.flags = Q3_GS_EXT, .protocol = 71};
	CHECK_EQ_INT(q3_encode_getservers(buf, sizeof(buf), &bad), -EINVAL);
	bad = (struct q3_getservers){.protocol = 71, .gamename = "123"};
	CHECK_EQ_INT(q3_encode_getservers(buf, sizeof(buf), &bad), -EINVAL);
	bad = (struct q3_getservers){.protocol = 71, .gamename = "Quake 3"};
	CHECK_EQ_INT(q3_encode_getservers(buf, sizeof(buf), &bad), -EINVAL);
	bad = (struct q3_getservers){.protocol = -1};
	CHECK_EQ_INT(q3_encode_getservers(buf, sizeof(buf), &bad), -EINVAL);
	bad = (struct q3_getservers){.flags = Q3_GS_GAMETYPE, .protocol = 1, .gametype = "a b"};
	CHECK_EQ_INT(q3_encode_getservers(buf, sizeof(buf), &bad), -EINVAL);
	/* A digits-only game is fine in getserversExt (the game always comes
	 * first there). */
	bad = (struct q3_getservers){
		.flags = Q3_GS_EXT | Q3_GS_IPV4, .protocol = 1, .gamename = "123"};
	CHECK_EQ_INT(q3_encode_getservers(buf, sizeof(buf), &bad), 4 + 24);
}

/* All servers of one decoded datagram. */
static size_t resp_servers(const struct q3_getservers_resp *r, struct q3_srv *out, size_t max)
{
	size_t off = 0, n = 0;

	while (n < max && q3_getservers_resp_next(r, &off, &out[n]))
		n++;
	return n;
}

static void test_decode_resp(void)
{
	static struct q3_srv v[600], back[600];
	static uint8_t dg[16][Q3_MASTER_MAX_OUT];
	struct q3_getservers_resp r;
	struct q3_srv s[4];
	size_t n, len;

	/* techinfo 3.5: one server, 1.2.3.4 port 2048, then the mark. */
	n = OOB("getserversResponse\\\x01\x02\x03\x04\x08\x00\\EOT\0\0\0");
	CHECK_EQ_INT(q3_decode_getservers_resp(pkt, n, &r), 0);
	CHECK(!r.ext && r.eot);
	CHECK_EQ_INT(r.n, 1);
	CHECK_EQ_INT(resp_servers(&r, s, 4), 1);
	CHECK(!s[0].v6 && memcmp(s[0].ip, "\x01\x02\x03\x04", 4) == 0 && s[0].port == 2048);

	/* No match: the header and the mark. */
	n = OOB("getserversResponse\\EOT\0\0\0");
	CHECK_EQ_INT(q3_decode_getservers_resp(pkt, n, &r), 0);
	CHECK(r.eot && r.n == 0 && resp_servers(&r, s, 4) == 0);
	/* A datagram before the last: entries, no mark (127.0.0.1:27960,
	 * 10.0.0.2:27961). */
	n = OOB("getserversResponse\\\x7f\x00\x00\x01\x6d\x38\\\x0a\x00\x00\x02\x6d\x39");
	CHECK_EQ_INT(q3_decode_getservers_resp(pkt, n, &r), 0);
	CHECK(!r.eot && r.n == 2);
	CHECK_EQ_INT(resp_servers(&r, s, 4), 2);
	CHECK(s[0].port == 27960 && s[1].port == 27961 && s[1].ip[0] == 10 && s[1].ip[3] == 2);
	/* The header alone. */
	n = OOB("getserversResponse");
	CHECK_EQ_INT(q3_decode_getservers_resp(pkt, n, &r), 0);
	CHECK(!r.eot && r.n == 0);

	/* getserversExtResponse: 192.0.2.7:27960, [2001:db8::1]:27960, mark. */
	n = OOB("getserversExtResponse\\\xc0\x00\x02\x07\x6d\x38"
		"/\x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x6d\x38"
		"\\EOT\0\0\0");
	CHECK_EQ_INT(q3_decode_getservers_resp(pkt, n, &r), 0);
	CHECK(r.ext && r.eot && r.n == 2);
	CHECK_EQ_INT(resp_servers(&r, s, 4), 2);
	CHECK(!s[0].v6 && s[0].ip[0] == 192 && s[0].ip[3] == 7 && s[0].port == 27960);
	CHECK(s[1].v6 && s[1].ip[0] == 0x20 && s[1].ip[1] == 0x01 && s[1].ip[15] == 1 &&
	      s[1].port == 27960);

	/* "EOT\0\0\0" before the end is a (fake) server 69.79.84.0:0, as a
	 * client reads it; only the last 7 bytes are the mark. */
	n = OOB("getserversResponse\\EOT\0\0\0\\\x01\x02\x03\x04\x08\x00");
	CHECK_EQ_INT(q3_decode_getservers_resp(pkt, n, &r), 0);
	CHECK(!r.eot && r.n == 2);
	CHECK_EQ_INT(resp_servers(&r, s, 4), 2);
	CHECK(s[0].ip[0] == 'E' && s[0].ip[1] == 'O' && s[0].ip[2] == 'T' && s[0].port == 0);

	/* Refused whole, no entry used: an IPv6 entry in a getserversResponse,
	 * an entry cut short, a stray byte, a stray byte after the mark, the
	 * wrong case, no prefix, another command. */
	CHECK_EQ_INT(
		q3_decode_getservers_resp(pkt,
					  OOB("getserversResponse/\x20\x01\x0d\xb8\x00\x00"
					      "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x6d\x38"),
					  &r),
		-EBADMSG);
	CHECK(r.n == 0 && r.entries == NULL);
	CHECK_EQ_INT(
		q3_decode_getservers_resp(pkt, OOB("getserversResponse\\\x01\x02\x03\x04\x08"), &r),
		-EBADMSG);
	CHECK_EQ_INT(
		q3_decode_getservers_resp(pkt, OOB("getserversExtResponse/\x20\x01\x0d\xb8"), &r),
		-EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers_resp(pkt,
					       OOB("getserversResponse\\\x01\x02\x03\x04\x08"
						   "\x00x"),
					       &r),
		     -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers_resp(pkt, OOB("getserversResponse\\EOT\0\0\0\0"), &r),
		     -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers_resp(pkt, OOB("getserversresponse\\EOT\0\0\0"), &r),
		     -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers_resp(pkt, OOB("getserversResponse\n\\EOT\0\0\0"), &r),
		     -EBADMSG);
	CHECK_EQ_INT(
		q3_decode_getservers_resp((const uint8_t *)"getserversResponse\\EOT\0\0\0", 25, &r),
		-EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers_resp(pkt, OOB("infoResponse\n\\EOT\0\0\0"), &r),
		     -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers_resp(pkt, OOB("getservers"), &r), -EBADMSG);
	CHECK_EQ_INT(q3_decode_getservers_resp(pkt, 3, &r), -EBADMSG);

	/* Round trip with the master's encoder: 500 mixed servers in
	 * 1,400-byte datagrams, decoded one by one, in order; the mark only
	 * on the last. */
	for (size_t i = 0; i < 500; i++) {
		v[i] = (struct q3_srv){.port = (uint16_t)(20000 + i), .v6 = i % 4 == 1};
		v[i].ip[0] = v[i].v6 ? 0x20 : 198;
		v[i].ip[1] = v[i].v6 ? 0x01 : 51;
		v[i].ip[2] = (uint8_t)(i >> 8);
		v[i].ip[3] = (uint8_t)i;
		if (v[i].v6)
			v[i].ip[15] = (uint8_t)i;
	}
	for (int ext = 0; ext < 2; ext++) {
		struct q3_srvlist list = {.ext = ext, .v = v, .n = 500};
		size_t taken = 0, ndg = 0, got = 0;

		/* getserversResponse carries IPv4 servers only. */
		if (!ext) {
			static struct q3_srv v4[500];

			list.n = 0;
			for (size_t i = 0; i < 500; i++) {
				if (!v[i].v6)
					v4[list.n++] = v[i];
			}
			list.v = v4;
		}
		while (taken <= list.n && ndg < 16) {
			ssize_t w = q3_encode_getservers_resp(dg[ndg], Q3_MASTER_MAX_OUT, &list,
							      &taken);

			CHECK(w > 0);
			len = w > 0 ? (size_t)w : 0;
			CHECK_EQ_INT(q3_decode_getservers_resp(dg[ndg], len, &r), 0);
			CHECK(r.ext == (bool)ext);
			CHECK(r.eot == (taken == list.n + 1));
			got += resp_servers(&r, back + got, 600 - got);
			ndg++;
		}
		CHECK_EQ_INT(got, list.n);
		CHECK(same_srvs(back, list.v, list.n));
	}
}

static void test_game_spec(void)
{
	struct q3_game g;
	char err[160];

	CHECK_EQ_INT(q3_parse_game_spec("et:heartbeat=EnemyTerritory-1,flatline=ETFlatline-1,"
					"protocols=72/80/83/84,"
					"options=send-empty-servers/send-full-servers",
					&g, err, sizeof(err)),
		     0);
	CHECK_EQ_STR(g.name, "et");
	CHECK_EQ_STR(g.heartbeat, "EnemyTerritory-1");
	CHECK_EQ_STR(g.flatline, "ETFlatline-1");
	CHECK_EQ_INT(g.nprotocols, 4);
	CHECK(g.protocols[0] == 72 && g.protocols[3] == 84);
	CHECK_EQ_INT(g.options, Q3_GAME_SEND_EMPTY | Q3_GAME_SEND_FULL);
	CHECK_EQ_INT(q3_parse_game_spec("Xonotic:heartbeat=Xon-1", &g, err, sizeof(err)), 0);
	CHECK(g.nprotocols == 0 && g.options == 0 && g.flatline[0] == '\0');
	CHECK_EQ_INT(q3_parse_game_spec("q:protocols=3,heartbeat=Q-1,options=send-full-servers", &g,
					err, sizeof(err)),
		     0);
	CHECK_EQ_INT(g.options, Q3_GAME_SEND_FULL);

	static const char *const bad[] = {
		"",
		"et",
		":heartbeat=X",
		"e t:heartbeat=X",
		"et:",
		"et:heartbeat",
		"et:heartbeat=",
		"et:=X",
		"et:heartbeat=X,",
		"et:heartbeat=X,color=red",
		"et:heartbeat=X,heartbeat=Y",
		"et:flatline=F",
		"et:heartbeat=X,flatline=X",
		"et:heartbeat=DarkPlaces",
		"et:heartbeat=X Y",
		"et:heartbeat=X,protocols=",
		"et:heartbeat=X,protocols=84/",
		"et:heartbeat=X,protocols=8a",
		"et:heartbeat=X,protocols=-1",
		"et:heartbeat=X,protocols=84/84",
		"et:heartbeat=X,protocols=1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/17",
		"et:heartbeat=X,options=send-everything",
		"et:heartbeat=X,options=send-empty-servers,",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		CHECK_EQ_INT(q3_parse_game_spec(bad[i], &g, err, sizeof(err)), -EINVAL);
		CHECK(err[0] != '\0');
	}
	q3_parse_game_spec("et:heartbeat=X,colour=red", &g, err, sizeof(err));
	CHECK(strstr(err, "colour") != NULL);
	q3_parse_game_spec("et:heartbeat=X,protocols=8a", &g, err, sizeof(err));
	CHECK(strstr(err, "8a") != NULL);
}

/* ---- the module, through a real loop ---- */

struct dgram {
	uint8_t b[2048];
	size_t len;
};

/*
 * Runs the loop for ms from now, and at least one turn that reads what is
 * already waiting: on a loaded machine the test may be descheduled longer
 * than ms, and a stop timer armed from a stale loop time would then fire
 * before the datagram just sent was read.
 */
static void pump(struct master *m, long long ms)
{
	long long end = ev_now_update(m->loop) + ms, left;

	do {
		left = end - ev_now_update(m->loop);
		ev_loop_run_once(m->loop, left > 0 ? (int)left : 0);
	} while (left > 0);
}

static int udp_sock(const char *ip, struct addr *a)
{
	char s[64];
	int fd;

	snprintf(s, sizeof(s), strchr(ip, ':') != NULL ? "[%s]:0" : "%s:0", ip);
	if (addr_parse(a, s, -1) < 0)
		return -1;
	fd = addr_udp_bind(a);
	return fd;
}

static void sendf(int fd, struct master *m, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void sendf(int fd, struct master *m, const char *fmt, ...)
{
	const struct addr *to = master_q3_addr(m->q3);
	char text[2100];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	sendto(fd, pkt, oob(text, (size_t)n), 0, (const struct sockaddr *)&to->ss, to->len);
}

/* Everything waiting on fd. */
static size_t recv_all(int fd, struct dgram *out, size_t max)
{
	size_t n = 0;

	while (n < max) {
		ssize_t r = recv(fd, out[n].b, sizeof(out[n].b), MSG_DONTWAIT);

		if (r < 0)
			break;
		out[n++].len = (size_t)r;
	}
	return n;
}

/* The challenge of the one getinfo waiting on fd, or "" (and the count). */
static size_t getinfo_challenge(int fd, char *ch, size_t size)
{
	struct dgram d[8];
	size_t n = recv_all(fd, d, 8);

	ch[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		if (d[i].len > 12 && memcmp(d[i].b, "\xff\xff\xff\xffgetinfo ", 12) == 0 &&
		    d[i].len - 12 < size) {
			memcpy(ch, d[i].b + 12, d[i].len - 12);
			ch[d[i].len - 12] = '\0';
		}
	}
	return n;
}

static double metric(struct master *m, const char *name)
{
	struct strbuf b;
	const char *p;
	double v = -1;

	strbuf_init(&b, 1 << 20);
	master_q3_metrics(m->q3, &b);
	strbuf_append(&b, "", 1);
	p = strstr(b.p, name);
	while (p != NULL && (p > b.p && p[-1] != '\n'))
		p = strstr(p + 1, name);
	if (p != NULL && p[strlen(name)] == ' ')
		v = strtod(p + strlen(name) + 1, NULL);
	strbuf_release(&b);
	return v;
}

static double drops(struct master *m, const char *reason)
{
	char name[128];

	snprintf(name, sizeof(name), "rally_master_q3_drops_total{reason=\"%s\"}", reason);
	return metric(m, name);
}

/* The listing TTL of the next fx_init (tests that list many servers one by
 * one raise it: on a loaded machine 32 listings took longer than 1.5 s). */
static long long fx_ttl_ms = 1500;

static int fx_init(struct master *m, const char *udp, const char *const *games, size_t ngames)
{
	memset(m, 0, sizeof(*m));
	if (addr_parse(&m->cfg.udp, udp, -1) < 0)
		return -EINVAL;
	m->cfg.q3_ttl_ms = fx_ttl_ms;
	m->cfg.q3_challenge_ms = 400;
	for (size_t i = 0; i < ngames; i++)
		m->cfg.q3_games[m->cfg.nq3_games++] = games[i];
	m->loop = ev_loop_new();
	m->reg = master_registry_new(m->loop);
	if (m->loop == NULL || m->reg == NULL)
		return -ENOMEM;
	return master_q3_new(m);
}

static void fx_free(struct master *m)
{
	master_q3_free(m->q3);
	master_registry_free(m->reg);
	ev_loop_free(m->loop);
}

/* Heartbeat, getinfo, infoResponse with `fields` after the challenge.
 * Returns the number of getinfo datagrams seen (1 when it went right). */
static size_t list_server(struct master *m, int fd, const char *tag, const char *fields)
{
	char ch[32];
	size_t n;

	sendf(fd, m, "heartbeat %s\n", tag);
	pump(m, 20);
	n = getinfo_challenge(fd, ch, sizeof(ch));
	if (n == 0)
		return 0;
	sendf(fd, m, "infoResponse\n\\challenge\\%s%s", ch, fields);
	pump(m, 20);
	return n;
}

/* The servers of a getservers(Ext) answer; -1 if it was malformed. */
static int ask(struct master *m, int fd, bool ext, struct q3_srv *out, size_t max, const char *fmt,
	       ...) __attribute__((format(printf, 6, 7)));

static int ask(struct master *m, int fd, bool ext, struct q3_srv *out, size_t max, const char *fmt,
	       ...)
{
	static uint8_t dg[64][Q3_MASTER_MAX_OUT];
	static struct dgram d[64];
	static unsigned next_ip;
	size_t len[64], n;
	char text[512];
	va_list ap;
	bool own = fd < 0;

	/* fd < 0: a socket of its own on an IP of its own, so the client
	 * throttle stays out of tests about something else. */
	if (own) {
		char ip[32];
		struct addr a;

		next_ip++;
		snprintf(ip, sizeof(ip), "127.0.%u.%u", 100 + next_ip / 250, 1 + next_ip % 250);
		fd = udp_sock(ip, &a);
	}
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	sendf(fd, m, "%s", text);
	pump(m, 30);
	n = recv_all(fd, d, 64);
	if (own)
		close(fd);
	if (n == 0)
		return -100;
	for (size_t i = 0; i < n; i++) {
		if (d[i].len > Q3_MASTER_MAX_OUT)
			return -101;
		memcpy(dg[i], d[i].b, d[i].len);
		len[i] = d[i].len;
	}
	return parse_resp(dg, len, n, ext, out, max);
}

/* Listed servers, after the registry's sweep (it runs once a second). */
static size_t listed(struct master *m)
{
	master_registry_expire(m->reg);
	return master_registry_count(m->reg, MASTER_REG_Q3);
}

static uint16_t port_of(const struct addr *a)
{
	return addr_port(a);
}

static bool has(const struct q3_srv *v, int n, const struct addr *a)
{
	for (int i = 0; i < n; i++) {
		if (v[i].port == port_of(a))
			return true;
	}
	return false;
}

#define OA_FIELDS "\\protocol\\71\\sv_maxclients\\8\\clients\\0\\gamename\\Quake3Arena"

static void test_module_basic(void)
{
	struct master m;
	struct addr sa, ca, oa;
	struct q3_srv v[64];
	int s, c, o, n;
	char ch[32];

	CHECK_EQ_INT(fx_init(&m, "127.0.0.1:0", NULL, 0), 0);
	CHECK(port_of(master_q3_addr(m.q3)) != 0);
	s = udp_sock("127.0.0.1", &sa);
	c = udp_sock("127.0.0.1", &ca);
	o = udp_sock("127.0.0.7", &oa);

	/* Heartbeat -> getinfo with a valid challenge; nothing listed yet. */
	sendf(s, &m, "heartbeat QuakeArena-1\n");
	pump(&m, 20);
	CHECK_EQ_INT(getinfo_challenge(s, ch, sizeof(ch)), 1);
	CHECK(q3_challenge_valid(ch, strlen(ch)));
	CHECK_EQ_INT(listed(&m), 0);
	CHECK_EQ_INT(metric(&m, "rally_master_q3_challenges_pending"), 1);
	n = ask(&m, c, false, v, 64, "getservers 71 empty full");
	CHECK_EQ_INT(n, 0);
	/* A repeated heartbeat gets the same challenge again. */
	{
		char ch2[32];

		sendf(s, &m, "heartbeat QuakeArena-1\n");
		pump(&m, 20);
		getinfo_challenge(s, ch2, sizeof(ch2));
		CHECK_EQ_STR(ch2, ch);
	}
	/* A wrong challenge, and the right one from another port: no. */
	sendf(s, &m, "infoResponse\n\\challenge\\%sX" OA_FIELDS, ch);
	sendf(o, &m, "infoResponse\n\\challenge\\%s" OA_FIELDS, ch);
	pump(&m, 20);
	CHECK_EQ_INT(listed(&m), 0);
	CHECK_EQ_INT(drops(&m, "bad_challenge"), 1);
	CHECK_EQ_INT(drops(&m, "no_pending"), 1);
	/* The right one: listed. */
	sendf(s, &m, "infoResponse\n\\challenge\\%s" OA_FIELDS, ch);
	pump(&m, 20);
	CHECK_EQ_INT(listed(&m), 1);
	CHECK_EQ_INT(metric(&m, "rally_master_q3_servers"), 1);
	CHECK_EQ_INT(metric(&m, "rally_master_q3_listed_total"), 1);

	/* qstat's requests; the server is empty. */
	n = ask(&m, c, false, v, 64, "getservers 71 empty full\n");
	CHECK_EQ_INT(n, 1);
	CHECK(n == 1 && v[0].port == port_of(&sa) && memcmp(v[0].ip, "\x7f\0\0\x01", 4) == 0);
	n = ask(&m, c, false, v, 64, "getservers 71 full");
	CHECK_EQ_INT(n, 0);
	n = ask(&m, c, false, v, 64, "getservers 68 empty full");
	CHECK_EQ_INT(n, 0);
	/* The 5th request in a row from one IP is throttled (4 allowed). */
	CHECK_EQ_INT(ask(&m, c, false, v, 64, "getservers 71 empty"), -100);
	CHECK_EQ_INT(drops(&m, "throttled"), 1);
	/* Another IP is not. */
	{
		struct addr c2a;
		int c2 = udp_sock("127.0.0.2", &c2a);

		n = ask(&m, c2, true, v, 64, "getserversExt Quake3Arena 71 empty");
		CHECK_EQ_INT(n, 1);
		n = ask(&m, c2, true, v, 64, "getserversExt Quake3Arena 71 empty ipv6");
		CHECK_EQ_INT(n, 0);
		n = ask(&m, c2, false, v, 64, "getservers Quake3Arena 71 empty ffa");
		CHECK_EQ_INT(n, 1);
		n = ask(&m, c2, false, v, 64, "getservers Quake3Arena 71 empty ctf");
		CHECK_EQ_INT(n, 0);
		close(c2);
	}
	CHECK_EQ_INT(metric(&m, "rally_master_q3_packets_total{type=\"getserversext\"}"), 2);
	CHECK_EQ_INT(metric(&m, "rally_master_q3_sent_total{type=\"getinfo\"}"), 2);

	/* A heartbeat alone does not refresh: listed at t, ttl 1500 ms. */
	pump(&m, 700);
	sendf(s, &m, "heartbeat QuakeArena-1\n");
	pump(&m, 900);
	CHECK_EQ_INT(listed(&m), 0);
	CHECK_EQ_INT(metric(&m, "rally_master_q3_delisted_total{reason=\"expired\"}"), 1);
	CHECK_EQ_INT(metric(&m, "rally_master_q3_challenges_pending"), 0);

	/* An answer after the challenge's validity (400 ms): not listed. */
	getinfo_challenge(s, ch, sizeof(ch));
	sendf(s, &m, "heartbeat QuakeArena-1\n");
	pump(&m, 20);
	getinfo_challenge(s, ch, sizeof(ch));
	pump(&m, 450);
	sendf(s, &m, "infoResponse\n\\challenge\\%s" OA_FIELDS, ch);
	pump(&m, 20);
	CHECK_EQ_INT(listed(&m), 0);
	CHECK_EQ_INT(drops(&m, "no_pending"), 2);

	/* Refreshes keep it: answer every 500 ms for 2 s. */
	CHECK_EQ_INT(list_server(&m, s, "QuakeArena-1", OA_FIELDS), 1);
	for (int i = 0; i < 4; i++) {
		pump(&m, 500);
		CHECK_EQ_INT(list_server(&m, s, "QuakeArena-1", OA_FIELDS), 1);
	}
	CHECK_EQ_INT(listed(&m), 1);
	CHECK_EQ_INT(metric(&m, "rally_master_q3_listed_total"), 2);

	/* Garbage of every kind: counted, no answer, still serving. */
	{
		uint8_t big[2100];
		struct dgram d[4];
		const struct addr *to = master_q3_addr(m.q3);

		memset(big, 0xff, sizeof(big));
		sendto(o, big, 4, 0, (const struct sockaddr *)&to->ss, to->len);
		sendto(o, big, 2049, 0, (const struct sockaddr *)&to->ss, to->len);
		sendto(o, big, 2048, 0, (const struct sockaddr *)&to->ss, to->len);
		sendto(o, "hello world", 11, 0, (const struct sockaddr *)&to->ss, to->len);
		sendf(o, &m, "getstatus");
		sendf(o, &m, "heartbeat Quake3-Unknown\n");
		sendf(o, &m, "heartbeat \x01\x02");
		sendf(o, &m, "getservers");
		sendf(o, &m, "getservers x");
		pump(&m, 30);
		CHECK_EQ_INT(recv_all(o, d, 4), 0);
		CHECK_EQ_INT(drops(&m, "too_short"), 1);
		CHECK_EQ_INT(drops(&m, "too_long"), 1);
		CHECK_EQ_INT(drops(&m, "not_oob"), 1);
		/* 2048 x 0xff, "getstatus", "getservers" (no space). */
		CHECK_EQ_INT(drops(&m, "unknown_command"), 3);
		CHECK_EQ_INT(drops(&m, "unknown_tag"), 1);
		CHECK_EQ_INT(drops(&m, "bad_heartbeat"), 1);
		CHECK_EQ_INT(drops(&m, "bad_getservers"), 1);
		CHECK_EQ_INT(metric(&m, "rally_master_q3_packets_total{type=\"other\"}"), 6);
	}
	close(s);
	close(c);
	close(o);
	fx_free(&m);
}

static void test_module_fields(void)
{
	struct master m;
	struct addr a[8];
	int fd[8], n;
	struct q3_srv v[16];

	CHECK_EQ_INT(fx_init(&m, "127.0.0.1:0", NULL, 0), 0);
	for (int i = 0; i < 8; i++)
		fd[i] = udp_sock("127.0.0.1", &a[i]);

	/* Missing fields, each refused. */
	list_server(&m, fd[0], "QuakeArena-1", "\\protocol\\71\\sv_maxclients\\0\\clients\\0");
	list_server(&m, fd[0], "QuakeArena-1", "\\protocol\\71\\sv_maxclients\\8");
	list_server(&m, fd[0], "QuakeArena-1", "\\sv_maxclients\\8\\clients\\0");
	list_server(&m, fd[0], "QuakeArena-1", OA_FIELDS "\\gametype\\a b");
	CHECK_EQ_INT(drops(&m, "bad_maxclients"), 1);
	CHECK_EQ_INT(drops(&m, "bad_clients"), 1);
	CHECK_EQ_INT(drops(&m, "bad_protocol"), 1);
	CHECK_EQ_INT(drops(&m, "bad_gametype"), 1);
	/* The heartbeat's game and the infostring's must agree. */
	list_server(&m, fd[0], "QuakeArena-1",
		    "\\protocol\\84\\sv_maxclients\\8\\clients\\0\\gamename\\et");
	CHECK_EQ_INT(drops(&m, "gamename_mismatch"), 1);
	/* DarkPlaces: the game name is required, and any is accepted. */
	list_server(&m, fd[1], "DarkPlaces", "\\protocol\\3\\sv_maxclients\\8\\clients\\1");
	CHECK_EQ_INT(drops(&m, "no_gamename"), 1);
	CHECK_EQ_INT(listed(&m), 0);
	list_server(&m, fd[1], "DarkPlaces",
		    "\\protocol\\3\\sv_maxclients\\8\\clients\\1\\gamename\\Xonotic");
	CHECK_EQ_INT(listed(&m), 1);
	n = ask(&m, -1, false, v, 16, "getservers Xonotic 3");
	CHECK(n == 1 && v[0].port == port_of(&a[1]));
	/* Anonymous queries never name a DarkPlaces game. */
	n = ask(&m, -1, false, v, 16, "getservers 3 empty full");
	CHECK_EQ_INT(n, 0);

	/* ET: no gamename in the infostring (the heartbeat says et), empty
	 * and full servers sent without asking; gametype filters. */
	list_server(&m, fd[2], "EnemyTerritory-1",
		    "\\protocol\\84\\sv_maxclients\\20\\clients\\0\\gametype\\2");
	list_server(&m, fd[3], "EnemyTerritory-1",
		    "\\protocol\\84\\sv_maxclients\\20\\clients\\20\\gametype\\4");
	list_server(&m, fd[4], "EnemyTerritory-1",
		    "\\protocol\\84\\sv_maxclients\\20\\clients\\5\\gametype\\4\\gamename\\et");
	CHECK_EQ_INT(listed(&m), 4);
	n = ask(&m, -1, false, v, 16, "getservers 84");
	CHECK_EQ_INT(n, 3);
	n = ask(&m, -1, false, v, 16, "getservers 84 ctf");
	CHECK(n == 2 && has(v, n, &a[3]) && has(v, n, &a[4]));
	n = ask(&m, -1, true, v, 16, "getserversExt et 84 gametype=2");
	CHECK(n == 1 && has(v, n, &a[2]));
	/* Quake 3 does not get empty or full ones unasked. */
	list_server(&m, fd[5], "QuakeArena-1", "\\protocol\\68\\sv_maxclients\\4\\clients\\4");
	list_server(&m, fd[6], "QuakeArena-1", "\\protocol\\68\\sv_maxclients\\4\\clients\\2");
	n = ask(&m, -1, false, v, 16, "getservers 68");
	CHECK(n == 1 && has(v, n, &a[6]));
	n = ask(&m, -1, false, v, 16, "getservers 68 full");
	CHECK(n == 2 && has(v, n, &a[5]) && has(v, n, &a[6]));
	/* An ET server with a protocol the table does not know: its game
	 * (from the heartbeat) names the anonymous request. */
	list_server(&m, fd[7], "EnemyTerritory-1", "\\protocol\\85\\sv_maxclients\\20\\clients\\1");
	n = ask(&m, -1, false, v, 16, "getservers 85");
	CHECK(n == 1 && has(v, n, &a[7]));
	n = ask(&m, -1, false, v, 16, "getservers 86");
	CHECK_EQ_INT(n, 0);
	/* A server that moves to another protocol moves in the index. */
	list_server(&m, fd[6], "QuakeArena-1", "\\protocol\\67\\sv_maxclients\\4\\clients\\2");
	n = ask(&m, -1, false, v, 16, "getservers 68 full");
	CHECK(n == 1 && has(v, n, &a[5]));
	n = ask(&m, -1, false, v, 16, "getservers 67");
	CHECK(n == 1 && has(v, n, &a[6]));
	CHECK_EQ_INT(listed(&m), 7);
	for (int i = 0; i < 8; i++)
		close(fd[i]);
	fx_free(&m);
}

static void test_module_flatline(void)
{
	struct master m;
	struct addr a, b;
	int s, t;
	char ch[32];

	CHECK_EQ_INT(fx_init(&m, "127.0.0.1:0", NULL, 0), 0);
	s = udp_sock("127.0.0.1", &a);
	t = udp_sock("127.0.0.1", &b);
	CHECK_EQ_INT(list_server(&m, s, "EnemyTerritory-1",
				 "\\protocol\\84\\sv_maxclients\\20\\clients\\3"),
		     1);
	CHECK_EQ_INT(listed(&m), 1);

	/* A flatline (say, spoofed) for a server that answers: kept. */
	sendf(s, &m, "heartbeat ETFlatline-1\n");
	pump(&m, 20);
	CHECK_EQ_INT(getinfo_challenge(s, ch, sizeof(ch)), 1);
	sendf(s, &m, "infoResponse\n\\challenge\\%s\\protocol\\84\\sv_maxclients\\20\\clients\\2",
	      ch);
	pump(&m, 500);
	CHECK_EQ_INT(listed(&m), 1);
	/* Even one for another game: the answer is judged as the listing. */
	sendf(s, &m, "heartbeat WolfFlatline-1\n");
	pump(&m, 20);
	CHECK_EQ_INT(getinfo_challenge(s, ch, sizeof(ch)), 1);
	sendf(s, &m, "infoResponse\n\\challenge\\%s\\protocol\\84\\sv_maxclients\\20\\clients\\2",
	      ch);
	pump(&m, 500);
	CHECK_EQ_INT(listed(&m), 1);
	CHECK_EQ_INT(metric(&m, "rally_master_q3_delisted_total{reason=\"flatline\"}"), 0);

	/* A flatline that goes unanswered: delisted within the validity. */
	sendf(s, &m, "heartbeat ETFlatline-1\n");
	pump(&m, 150);
	CHECK_EQ_INT(listed(&m), 1);
	pump(&m, 350);
	CHECK_EQ_INT(listed(&m), 0);
	CHECK_EQ_INT(metric(&m, "rally_master_q3_delisted_total{reason=\"flatline\"}"), 1);
	CHECK_EQ_INT(metric(&m, "rally_master_q3_challenges_pending"), 0);

	/* A flatline from an address that is not listed: no getinfo. */
	getinfo_challenge(s, ch, sizeof(ch));
	sendf(t, &m, "heartbeat ETFlatline-1\n");
	pump(&m, 20);
	CHECK_EQ_INT(getinfo_challenge(t, ch, sizeof(ch)), 0);
	CHECK_EQ_INT(drops(&m, "flatline_unlisted"), 1);
	close(s);
	close(t);
	fx_free(&m);
}

static void test_module_cap(void)
{
	struct master m;
	struct addr a[34], o;
	int fd[34], other;
	char ch[32];

	fx_ttl_ms = 10000;
	CHECK_EQ_INT(fx_init(&m, "127.0.0.1:0", NULL, 0), 0);
	fx_ttl_ms = 1500;
	for (int i = 0; i < 34; i++)
		fd[i] = udp_sock("127.0.0.3", &a[i]);
	other = udp_sock("127.0.0.4", &o);
	/* 32 pending challenges from one IP hold all its slots. */
	for (int i = 0; i < 33; i++)
		sendf(fd[i], &m, "heartbeat QuakeArena-1\n");
	pump(&m, 30);
	for (int i = 0; i < 32; i++)
		CHECK_EQ_INT(getinfo_challenge(fd[i], ch, sizeof(ch)), 1);
	CHECK_EQ_INT(getinfo_challenge(fd[32], ch, sizeof(ch)), 0);
	CHECK_EQ_INT(drops(&m, "address_cap"), 1);
	/* Once they expire, the slots are free again; list 32. */
	pump(&m, 450);
	CHECK_EQ_INT(metric(&m, "rally_master_q3_challenges_pending"), 0);
	for (int i = 0; i < 32; i++)
		CHECK_EQ_INT(list_server(&m, fd[i], "QuakeArena-1", OA_FIELDS), 1);
	CHECK_EQ_INT(listed(&m), 32);
	/* The 33rd server from that IP is refused; the listed ones may still
	 * refresh; another IP is not affected. */
	CHECK_EQ_INT(list_server(&m, fd[32], "QuakeArena-1", OA_FIELDS), 0);
	CHECK_EQ_INT(list_server(&m, fd[0], "QuakeArena-1", OA_FIELDS), 1);
	CHECK_EQ_INT(list_server(&m, other, "QuakeArena-1", OA_FIELDS), 1);
	CHECK_EQ_INT(listed(&m), 33);
	CHECK_EQ_INT(drops(&m, "address_cap"), 2);
	/* When the listings expire, the IP may list again. */
	pump(&m, 10200);
	CHECK_EQ_INT(listed(&m), 0);
	CHECK_EQ_INT(list_server(&m, fd[33], "QuakeArena-1", OA_FIELDS), 1);
	for (int i = 0; i < 34; i++)
		close(fd[i]);
	close(other);
	fx_free(&m);
}

static void test_module_ipv6(void)
{
	struct master m;
	struct addr a, ca;
	struct q3_srv v[4];
	int s, c, n;

	if (fx_init(&m, "[::1]:0", NULL, 0) < 0) {
		printf("# no IPv6 loopback: skipped\n");
		fx_free(&m);
		return;
	}
	s = udp_sock("::1", &a);
	c = udp_sock("::1", &ca);
	CHECK_EQ_INT(list_server(&m, s, "QuakeArena-1", OA_FIELDS), 1);
	n = ask(&m, c, true, v, 4, "getserversExt Quake3Arena 71 empty");
	CHECK(n == 1 && v[0].v6 && v[0].port == port_of(&a) && v[0].ip[15] == 1);
	n = ask(&m, c, true, v, 4, "getserversExt Quake3Arena 71 empty ipv4");
	CHECK_EQ_INT(n, 0);
	n = ask(&m, c, false, v, 4, "getservers 71 empty");
	CHECK_EQ_INT(n, 0);
	close(s);
	close(c);
	fx_free(&m);
}

static void test_module_games(void)
{
	static const char *const good[] = {
		"openarena:heartbeat=OA-1,flatline=OA-0,protocols=71,options=send-empty-servers",
		"et:heartbeat=ET-2,protocols=84",
	};
	static const char *const bad_tag[] = {"twin:heartbeat=QuakeArena-1"};
	static const char *const bad_spec[] = {"broken:protocols=1"};
	struct master m;
	struct addr a, b;
	struct q3_srv v[4];
	int s, t, n;

	CHECK_EQ_INT(fx_init(&m, "127.0.0.1:0", bad_tag, 1), -EINVAL);
	CHECK(m.q3 == NULL);
	fx_free(&m);
	CHECK_EQ_INT(fx_init(&m, "127.0.0.1:0", bad_spec, 1), -EINVAL);
	fx_free(&m);

	CHECK_EQ_INT(fx_init(&m, "127.0.0.1:0", good, 2), 0);
	s = udp_sock("127.0.0.1", &a);
	t = udp_sock("127.0.0.1", &b);
	/* Protocol 71 now belongs to openarena; its heartbeat is OA-1. */
	CHECK_EQ_INT(list_server(&m, s, "OA-1", "\\protocol\\71\\sv_maxclients\\8\\clients\\0"), 1);
	n = ask(&m, -1, false, v, 4, "getservers 71");
	CHECK(n == 1 && v[0].port == port_of(&a));
	/* The replaced et game: EnemyTerritory-1 is unknown now, ET-2 works,
	 * and its options are gone (empty servers not sent unasked). */
	sendf(t, &m, "heartbeat EnemyTerritory-1\n");
	pump(&m, 20);
	CHECK_EQ_INT(drops(&m, "unknown_tag"), 1);
	CHECK_EQ_INT(list_server(&m, t, "ET-2", "\\protocol\\84\\sv_maxclients\\8\\clients\\0"), 1);
	n = ask(&m, -1, false, v, 4, "getservers 84");
	CHECK_EQ_INT(n, 0);
	n = ask(&m, -1, false, v, 4, "getservers 84 empty");
	CHECK_EQ_INT(n, 1);
	close(s);
	close(t);
	fx_free(&m);
}

static void test_module_snapshot(void)
{
	char dir[] = "/tmp/q3master-test-XXXXXX", path[128];
	struct master m;
	struct addr a, b;
	struct q3_srv v[4];
	int s, t, n;

	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/registry.json", dir);
	CHECK_EQ_INT(fx_init(&m, "127.0.0.1:0", NULL, 0), 0);
	s = udp_sock("127.0.0.1", &a);
	t = udp_sock("127.0.0.1", &b);
	CHECK_EQ_INT(list_server(&m, s, "QuakeArena-1", OA_FIELDS), 1);
	CHECK_EQ_INT(list_server(&m, t, "EnemyTerritory-1",
				 "\\protocol\\84\\sv_maxclients\\20\\clients\\20\\gametype\\5"),
		     1);
	CHECK_EQ_INT(master_registry_save(m.reg, path), 0);
	fx_free(&m);

	/* A new master restores both; the index is rebuilt on first use. */
	CHECK_EQ_INT(fx_init(&m, "127.0.0.1:0", NULL, 0), 0);
	CHECK_EQ_INT(master_registry_load(m.reg, path), 0);
	CHECK_EQ_INT(listed(&m), 2);
	n = ask(&m, -1, false, v, 4, "getservers 84 gametype=5");
	CHECK(n == 1 && v[0].port == port_of(&b));
	n = ask(&m, -1, false, v, 4, "getservers 71 empty");
	CHECK(n == 1 && v[0].port == port_of(&a));
	/* The restored ones are refreshed and delisted as any other. */
	sendf(t, &m, "heartbeat ETFlatline-1\n");
	pump(&m, 500);
	CHECK_EQ_INT(listed(&m), 1);
	CHECK_EQ_INT(list_server(&m, s, "QuakeArena-1", OA_FIELDS), 1);
	fx_free(&m);

	/* A snapshot with a bad q3 entry is refused whole. */
	{
		FILE *f = fopen(path, "w");

		fprintf(f, "{\"version\":1,\"saved_ms\":1,\"kinds\":{\"q3\":[{\"seen_ms\":1,"
			   "\"addr\":\"1.2.3.4:5\",\"game\":\"et\",\"protocol\":84,\"gametype\":"
			   "\"0\",\"clients\":0,\"maxclients\":0,\"anon\":true}]}}");
		fclose(f);
	}
	CHECK_EQ_INT(fx_init(&m, "127.0.0.1:0", NULL, 0), 0);
	CHECK_EQ_INT(master_registry_load(m.reg, path), -EBADMSG);
	CHECK_EQ_INT(listed(&m), 0);
	fx_free(&m);
	{
		char cmd[256];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		CHECK_EQ_INT(system(cmd), 0);
	}
	close(s);
	close(t);
}

int main(void)
{
	if (sodium_init() < 0)
		return 1;
	log_init(getenv("Q3MASTER_DEBUG") != NULL ? LOG_LEVEL_DEBUG : LOG_LEVEL_ERR,
		 LOG_TARGET_PLAIN);
	test_classify();
	test_heartbeat();
	test_getservers();
	test_inforesponse();
	test_challenge();
	test_getinfo();
	test_encode();
	test_encode_request();
	test_decode_resp();
	test_game_spec();
	test_module_basic();
	test_module_fields();
	test_module_flatline();
	test_module_cap();
	test_module_ipv6();
	test_module_games();
	test_module_snapshot();
	return tap_done("q3master");
}
