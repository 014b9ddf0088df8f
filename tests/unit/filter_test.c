/*
 * relay/relay_filter.c: relay_classify() against the seed's filter (etrelay
 * ENGINE v2, "Filter"): judged on the first word as the ET server tokenizes
 * it (see q3_test.c for the tokenizer itself), getstatus/getinfo are
 * queries, getchallenge/connect/PB_ pass, everything else is dropped.
 */
#include <string.h>

#include "q3.h"
#include "relay.h"
#include "tap.h"

static uint8_t pkt[4096];
static char cmd[64];

static enum relay_verdict classify_n(const char *s, size_t n, bool prefix)
{
	size_t len = 0;

	if (prefix) {
		memset(pkt, 0xff, 4);
		len = 4;
	}
	memcpy(pkt + len, s, n);
	len += n;
	memset(cmd, 'x', sizeof(cmd));
	return relay_classify(pkt, len, cmd, sizeof(cmd));
}

#define OOB(lit) classify_n((lit), sizeof(lit) - 1, true)
#define RAW(lit) classify_n((lit), sizeof(lit) - 1, false)

static void test_game_and_malformed(void)
{
	/* In-game packets start with a sequence number, not 0xffffffff. */
	CHECK_EQ_INT(RAW("\x01\x00\x00\x00rcon pw"), RELAY_VERDICT_GAME);
	CHECK_EQ_STR(cmd, "");
	CHECK_EQ_INT(RAW("\xff\xff\xff\xfegetstatus"), RELAY_VERDICT_GAME);
	CHECK_EQ_INT(RAW("\xfe\xff\xff\xff"), RELAY_VERDICT_GAME);
	/* Fewer than 4 bytes: not even a sequence number. */
	CHECK_EQ_INT(RAW(""), RELAY_VERDICT_MALFORMED);
	CHECK_EQ_INT(RAW("abc"), RELAY_VERDICT_MALFORMED);
	CHECK_EQ_INT(RAW("\xff\xff\xff"), RELAY_VERDICT_MALFORMED);
	CHECK_EQ_STR(cmd, "");
}

static void test_queries(void)
{
	CHECK_EQ_INT(OOB("getstatus"), RELAY_VERDICT_QUERY);
	CHECK_EQ_STR(cmd, "getstatus");
	CHECK_EQ_INT(OOB("getinfo xxx"), RELAY_VERDICT_QUERY);
	CHECK_EQ_STR(cmd, "getinfo");
	/* Q_stricmp: any case. */
	CHECK_EQ_INT(OOB("getInfo 123"), RELAY_VERDICT_QUERY);
	CHECK_EQ_STR(cmd, "getInfo");
	CHECK_EQ_INT(OOB("GETSTATUS"), RELAY_VERDICT_QUERY);
	/* What the engine still reads as getstatus is a query too, or it
	 * would slip past the limiter. */
	CHECK_EQ_INT(OOB("  getstatus"), RELAY_VERDICT_QUERY);
	CHECK_EQ_INT(OOB("\"getstatus\""), RELAY_VERDICT_QUERY);
	CHECK_EQ_INT(OOB("/*x*/getstatus"), RELAY_VERDICT_QUERY);
	CHECK_EQ_INT(OOB("/*/getstatus"), RELAY_VERDICT_QUERY);
	CHECK_EQ_INT(OOB("getstatus//x"), RELAY_VERDICT_QUERY);
	CHECK_EQ_INT(OOB("getstatus/*x"), RELAY_VERDICT_QUERY);
	CHECK_EQ_INT(OOB("getstatus\"x\""), RELAY_VERDICT_QUERY);
	CHECK_EQ_INT(OOB("getstatus\x01"), RELAY_VERDICT_QUERY);
	CHECK_EQ_INT(OOB("getstatus\nrcon"), RELAY_VERDICT_QUERY);
	CHECK_EQ_INT(OOB("getstatus\0rcon"), RELAY_VERDICT_QUERY);
}

static void test_pass(void)
{
	CHECK_EQ_INT(OOB("getchallenge"), RELAY_VERDICT_PASS);
	CHECK_EQ_INT(OOB("getChallenge 123 ET"), RELAY_VERDICT_PASS);
	CHECK_EQ_INT(OOB("connect \"\\name\\x\""), RELAY_VERDICT_PASS);
	CHECK_EQ_STR(cmd, "connect");
	/* ET's connect is Huffman-compressed after byte 12; the first word
	 * is still plain. */
	CHECK_EQ_INT(OOB("connect \x80\x13\xfe\x00\x25"), RELAY_VERDICT_PASS);
	/* PunkBuster: raw bytes "PB_" right after the marker,
	 * case-sensitive, before any tokenizing. */
	CHECK_EQ_INT(OOB("PB_Y\x01\x02\x80 stuff"), RELAY_VERDICT_PASS);
	CHECK_EQ_INT(OOB("PB_"), RELAY_VERDICT_PASS);
	CHECK_EQ_INT(OOB("pb_x"), RELAY_VERDICT_FILTERED);
	CHECK_EQ_INT(OOB("Pb_x"), RELAY_VERDICT_FILTERED);
	CHECK_EQ_INT(OOB(" PB_x"), RELAY_VERDICT_FILTERED);
	CHECK_EQ_INT(OOB("\"PB_x\""), RELAY_VERDICT_FILTERED);
	CHECK_EQ_INT(OOB("PB"), RELAY_VERDICT_FILTERED);
}

static void test_filtered(void)
{
	CHECK_EQ_INT(OOB("rcon secret status"), RELAY_VERDICT_FILTERED);
	CHECK_EQ_STR(cmd, "rcon");
	CHECK_EQ_INT(OOB("RCON secret status"), RELAY_VERDICT_FILTERED);
	/* The same command however the engine would still find it. */
	CHECK_EQ_INT(OOB("  rcon secret status"), RELAY_VERDICT_FILTERED);
	CHECK_EQ_INT(OOB("\"rcon\" secret status"), RELAY_VERDICT_FILTERED);
	CHECK_EQ_STR(cmd, "rcon");
	CHECK_EQ_INT(OOB("/**/rcon secret"), RELAY_VERDICT_FILTERED);
	CHECK_EQ_INT(OOB("\trcon\tsecret"), RELAY_VERDICT_FILTERED);
	/* Near misses of allowed commands. */
	CHECK_EQ_INT(OOB("getstatusX"), RELAY_VERDICT_FILTERED);
	CHECK_EQ_STR(cmd, "getstatusX");
	CHECK_EQ_INT(OOB("getstatu"), RELAY_VERDICT_FILTERED);
	CHECK_EQ_INT(OOB("getstatus%"), RELAY_VERDICT_FILTERED); /* "getstatus." */
	CHECK_EQ_INT(OOB("getstatus\xe9"), RELAY_VERDICT_FILTERED);
	CHECK_EQ_INT(OOB("get status"), RELAY_VERDICT_FILTERED);
	CHECK_EQ_INT(OOB("connected"), RELAY_VERDICT_FILTERED);
	/* Other server commands clients have no business sending. */
	CHECK_EQ_INT(OOB("getservers 84"), RELAY_VERDICT_FILTERED);
	CHECK_EQ_INT(OOB("ipAuthorize 1 accept"), RELAY_VERDICT_FILTERED);
	CHECK_EQ_INT(OOB("disconnect"), RELAY_VERDICT_FILTERED);
	/* Empty command lines. */
	CHECK_EQ_INT(OOB(""), RELAY_VERDICT_FILTERED);
	CHECK_EQ_STR(cmd, "");
	CHECK_EQ_INT(OOB("   "), RELAY_VERDICT_FILTERED);
	CHECK_EQ_INT(OOB("\"\" getstatus"), RELAY_VERDICT_FILTERED);
	/* "//" makes the whole line a comment for the engine. */
	CHECK_EQ_INT(OOB("//getstatus"), RELAY_VERDICT_FILTERED);
	CHECK_EQ_INT(OOB("/*getstatus"), RELAY_VERDICT_FILTERED);
	/* '\n' and NUL end the line first. */
	CHECK_EQ_INT(OOB("\ngetstatus"), RELAY_VERDICT_FILTERED);
	CHECK_EQ_INT(OOB("\0getstatus"), RELAY_VERDICT_FILTERED);
}

static void test_small_cmd_buffer(void)
{
	char small[10];

	/* The verdict is the engine's, whatever room the caller gives for
	 * the logged command: a 10-byte buffer holds "getstatus" but the
	 * word is "getstatusX", which the server rejects. */
	memset(pkt, 0xff, 4);
	memcpy(pkt + 4, "getstatusX", 10);
	CHECK_EQ_INT(relay_classify(pkt, 14, small, sizeof(small)), RELAY_VERDICT_FILTERED);
	CHECK_EQ_STR(small, "getstatus");
	memcpy(pkt + 4, "connectXYZ", 10);
	CHECK_EQ_INT(relay_classify(pkt, 14, small, 8), RELAY_VERDICT_FILTERED);
	/* And a real query stays one with a 1-byte buffer. */
	memcpy(pkt + 4, "getinfo", 7);
	CHECK_EQ_INT(relay_classify(pkt, 11, small, 1), RELAY_VERDICT_QUERY);
	CHECK_EQ_STR(small, "");
	memcpy(pkt + 4, "PB_abc", 6);
	CHECK_EQ_INT(relay_classify(pkt, 10, small, 3), RELAY_VERDICT_PASS);
	CHECK_EQ_STR(small, "PB");
}

static void test_long_line(void)
{
	/* A 3000-byte word that starts with getstatus is not getstatus. */
	memset(pkt, 0xff, 4);
	memcpy(pkt + 4, "getstatus", 9);
	memset(pkt + 13, 'A', 2991);
	CHECK_EQ_INT(relay_classify(pkt, 3004, cmd, sizeof(cmd)), RELAY_VERDICT_FILTERED);
	CHECK_EQ_INT(strlen(cmd), sizeof(cmd) - 1);
	/* Past 1023 characters the engine stops reading: whatever follows
	 * is not part of the line. */
	memset(pkt + 4, ' ', 1023);
	memcpy(pkt + 4 + 1023, "rcon", 4);
	CHECK_EQ_INT(relay_classify(pkt, 1031, cmd, sizeof(cmd)), RELAY_VERDICT_FILTERED);
	CHECK_EQ_STR(cmd, "");
	memcpy(pkt + 4 + 1014, "getinfo", 7);
	CHECK_EQ_INT(relay_classify(pkt, 1031, cmd, sizeof(cmd)), RELAY_VERDICT_QUERY);
}

static void test_drop_names(void)
{
	CHECK_EQ_STR(relay_drop_name(RELAY_DROP_FILTERED), "filtered");
	CHECK_EQ_STR(relay_drop_name(RELAY_DROP_RATE_LIMITED), "rate_limited");
	CHECK_EQ_STR(relay_drop_name(RELAY_DROP_SEND_ERROR), "send_error");
	CHECK_EQ_STR(relay_drop_name(RELAY_DROP_NREASONS), "unknown");
	for (int d = 0; d < RELAY_DROP_NREASONS; d++)
		CHECK(relay_drop_name((enum relay_drop)d) != NULL);
}

int main(void)
{
	test_game_and_malformed();
	test_queries();
	test_pass();
	test_filtered();
	test_small_cmd_buffer();
	test_long_line();
	test_drop_names();
	return tap_done("filter");
}
