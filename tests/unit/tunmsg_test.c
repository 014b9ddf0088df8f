/*
 * relay_tunmsg: coa's tunnel messages as its code writes them (serde,
 * "cmd"-tagged, snake_case), the handshake, the data fast path against
 * json-c's, base64 against libsodium's decoder, and the binary frames.
 */
#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "relay_tunmsg.h"
#include "strbuf.h"
#include "tap.h"

static uint8_t chunk[TUNMSG_CHUNK_MAX * 4];

static int dec(const char *s, struct tunmsg *m)
{
	return tunmsg_decode(s, strlen(s), m, chunk, sizeof(chunk));
}

/* The messages exactly as coa's serde writes them. */
static void test_coa_shapes(void)
{
	struct tunmsg m;

	CHECK_EQ_INT(dec("{\"cmd\":\"ping\"}", &m), 0);
	CHECK_EQ_INT(m.cmd, TUNMSG_PING);
	CHECK_EQ_INT(dec("{\"cmd\":\"allocate\",\"request_id\":7,\"player_id\":"
			 "\"11111111-2222-3333-4444-555555555555\",\"expected_client_ip\":null}",
			 &m),
		     0);
	CHECK_EQ_INT(m.cmd, TUNMSG_ALLOCATE);
	CHECK_EQ_INT(m.request_id, 7);
	CHECK_EQ_STR(m.expected_ip, "");
	CHECK_EQ_INT(dec("{\"cmd\":\"allocate\",\"request_id\":18446744073709551615,\"player_id\":"
			 "\"p\",\"expected_client_ip\":\"10.0.0.1\"}",
			 &m),
		     0);
	CHECK(m.request_id == UINT64_MAX);
	CHECK_EQ_STR(m.expected_ip, "10.0.0.1");
	CHECK_EQ_INT(dec("{\"cmd\":\"connect_ok\",\"stream_id\":4294967295}", &m), 0);
	CHECK(m.stream_id == UINT32_MAX);
	CHECK_EQ_INT(dec("{\"cmd\":\"connect_ok\",\"stream_id\":4294967296}", &m), -EBADMSG);
	CHECK_EQ_INT(dec("{\"cmd\":\"connect_ok\",\"stream_id\":-1}", &m), -EBADMSG);
	CHECK_EQ_INT(dec("{\"cmd\":\"connect_ok\",\"stream_id\":\"1\"}", &m), -EBADMSG);
	CHECK_EQ_INT(
		dec("{\"cmd\":\"connect\",\"stream_id\":3,\"target\":\"world\",\"token\":\"t\"}",
		    &m),
		0);
	CHECK_EQ_INT(m.target, TUNMSG_WORLD);
	CHECK_EQ_INT(
		dec("{\"cmd\":\"connect\",\"stream_id\":3,\"target\":\"mysql\",\"token\":\"t\"}",
		    &m),
		-EBADMSG);
	CHECK_EQ_INT(
		dec("{\"cmd\":\"allocate_ok\",\"request_id\":1,\"token\":\"abc\",\"relay_host\":"
		    "\"relay.example\",\"auth_port\":40000,\"world_port\":40001,\"expires_at\":"
		    "1796185958}",
		    &m),
		0);
	CHECK_EQ_INT(m.world_port, 40001);
	CHECK(m.expires_at == 1796185958LL);
	/* unknown commands are ignored, not errors (coa skips them too) */
	CHECK_EQ_INT(dec("{\"cmd\":\"transfer_offer\",\"x\":1}", &m), 0);
	CHECK_EQ_INT(m.cmd, TUNMSG_UNKNOWN);
	CHECK_EQ_INT(dec("{\"nocmd\":1}", &m), -EBADMSG);
	CHECK_EQ_INT(dec("[1,2]", &m), -EBADMSG);
	CHECK_EQ_INT(dec("{\"cmd\":\"ping\"} trailing", &m), -EBADMSG);
	CHECK_EQ_INT(dec("{\"cmd\":\"ping\"", &m), -EBADMSG);
}

static void test_encode_roundtrip(void)
{
	struct strbuf b;
	struct tunmsg m = {.cmd = TUNMSG_ALLOCATE_ERR, .request_id = 9}, d;

	strbuf_init(&b, 1 << 20);
	strcpy(m.error, "relay ports \"exhausted\"");
	tunmsg_encode(&m, &b);
	CHECK_EQ_INT(tunmsg_decode(b.p, b.len, &d, chunk, sizeof(chunk)), 0);
	CHECK_EQ_INT(d.cmd, TUNMSG_ALLOCATE_ERR);
	CHECK_EQ_STR(d.error, m.error);
	b.len = 0;
	memset(&m, 0, sizeof(m));
	m.cmd = TUNMSG_CONNECT;
	m.stream_id = 5;
	m.target = TUNMSG_AUTH;
	strcpy(m.token, "tok");
	tunmsg_encode(&m, &b);
	CHECK(b.len == strlen("{\"cmd\":\"connect\",\"stream_id\":5,\"target\":\"auth\",\"token\":"
			      "\"tok\"}"));
	CHECK(memcmp(b.p,
		     "{\"cmd\":\"connect\",\"stream_id\":5,\"target\":\"auth\",\"token\":\"tok\"}",
		     b.len) == 0);
	strbuf_release(&b);
}

/* Every length 0..600 and a full chunk: the fast path, json-c's path (the
 * same message with a space) and libsodium agree. */
static void test_data_paths(void)
{
	static uint8_t raw[TUNMSG_CHUNK_MAX];
	struct strbuf b, spaced;
	struct tunmsg m = {.cmd = TUNMSG_DATA, .stream_id = 42}, d;
	int bad = 0;

	strbuf_init(&b, 1 << 20);
	strbuf_init(&spaced, 1 << 20);
	randombytes_buf(raw, sizeof(raw));
	for (size_t n = 0; n <= TUNMSG_CHUNK_MAX; n = n < 600 ? n + 1 : n * 2) {
		size_t len = n > TUNMSG_CHUNK_MAX ? TUNMSG_CHUNK_MAX : n;

		m.chunk = raw;
		m.chunk_len = len;
		b.len = 0;
		tunmsg_encode(&m, &b);
		if (tunmsg_decode(b.p, b.len, &d, chunk, sizeof(chunk)) != 0 ||
		    d.cmd != TUNMSG_DATA || d.stream_id != 42 || d.chunk_len != len ||
		    memcmp(d.chunk, raw, len) != 0)
			bad++;
		spaced.len = 0;
		strbuf_append(&spaced, "{ ", 2);
		strbuf_append(&spaced, b.p + 1, b.len - 1);
		if (tunmsg_decode(spaced.p, spaced.len, &d, chunk, sizeof(chunk)) != 0 ||
		    d.chunk_len != len || memcmp(d.chunk, raw, len) != 0)
			bad++;
		if (len == TUNMSG_CHUNK_MAX)
			break;
	}
	CHECK_EQ_INT(bad, 0);
	strbuf_release(&b);
	strbuf_release(&spaced);
}

/* Base64 edge cases: unpadded accepted, padding in the middle, a lone
 * character, foreign characters, too big for the buffer. */
static void test_base64(void)
{
	struct tunmsg d;
	uint8_t small[4];
	const char *big = "{\"cmd\":\"data\",\"stream_id\":1,\"chunk\":\"QUJDREVG\"}";
	static const char *const bad[] = {
		"{\"cmd\":\"data\",\"stream_id\":1,\"chunk\":\"QQ==QQ==\"}",
		"{\"cmd\":\"data\",\"stream_id\":1,\"chunk\":\"Q\"}",
		"{\"cmd\":\"data\",\"stream_id\":1,\"chunk\":\"QQ=A\"}",
		"{\"cmd\":\"data\",\"stream_id\":1,\"chunk\":\"Q Q=\"}",
		"{\"cmd\":\"data\",\"stream_id\":1,\"chunk\":\"QUJD\\u0000\"}",
		"{\"cmd\":\"data\",\"stream_id\":1,\"chunk\":7}",
		"{\"cmd\":\"data\",\"stream_id\":01,\"chunk\":\"QUJD\"}",
	};

	CHECK_EQ_INT(dec("{\"cmd\":\"data\",\"stream_id\":1,\"chunk\":\"QUI\"}", &d), 0);
	CHECK(d.chunk_len == 2 && memcmp(d.chunk, "AB", 2) == 0);
	CHECK_EQ_INT(dec("{\"cmd\":\"data\",\"stream_id\":1,\"chunk\":\"QUI=\"}", &d), 0);
	CHECK(d.chunk_len == 2 && memcmp(d.chunk, "AB", 2) == 0);
	CHECK_EQ_INT(dec("{\"cmd\":\"data\",\"stream_id\":1,\"chunk\":\"\"}", &d), 0);
	CHECK_EQ_INT(d.chunk_len, 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK_EQ_INT(dec(bad[i], &d), -EBADMSG);
	CHECK_EQ_INT(tunmsg_decode(big, strlen(big), &d, small, sizeof(small)), -EMSGSIZE);
}

static void test_handshake(void)
{
	struct tunmsg_hello h;
	char nonce[TUNMSG_ID_MAX + 1], msg[256], why[64];
	uint8_t pk[32], sk[64], sig[64];
	char hex[129], b64[100];
	int n;

	CHECK_EQ_INT(tunmsg_decode_challenge("{\"nonce\":\"abc\"}", strlen("{\"nonce\":\"abc\"}"),
					     nonce),
		     0);
	CHECK_EQ_STR(nonce, "abc");
	CHECK_EQ_INT(tunmsg_decode_hello("{\"realm_id\":\"r\",\"signature\":\"s\"}",
					 strlen("{\"realm_id\":\"r\",\"signature\":\"s\"}"), &h),
		     0);
	CHECK_EQ_INT(
		tunmsg_decode_hello("{\"realm_id\":\"r\"}", strlen("{\"realm_id\":\"r\"}"), &h),
		-EBADMSG);
	CHECK_EQ_INT(tunmsg_decode_welcome("{\"ok\":true,\"message\":\"welcome\"}",
					   strlen("{\"ok\":true,\"message\":\"welcome\"}"), why,
					   sizeof(why)),
		     0);
	CHECK_EQ_INT(tunmsg_decode_welcome("{\"ok\":false,\"message\":\"unauthorized\"}",
					   strlen("{\"ok\":false,\"message\":\"unauthorized\"}"),
					   why, sizeof(why)),
		     -EACCES);
	CHECK_EQ_STR(why, "unauthorized");
	n = tunmsg_signed_message("6f9619ff-8b86-d011-b42d-00cf4fc964ff", "N", msg, sizeof(msg));
	CHECK_EQ_STR(msg, "coa-relay-host-v1\n1\n6f9619ff-8b86-d011-b42d-00cf4fc964ff\nN");
	crypto_sign_keypair(pk, sk);
	crypto_sign_detached(sig, NULL, (const uint8_t *)msg, (unsigned long long)n, sk);
	sodium_bin2hex(hex, sizeof(hex), sig, 64);
	sodium_bin2base64(b64, sizeof(b64), sig, 64, sodium_base64_VARIANT_ORIGINAL);
	memset(sig, 0, sizeof(sig));
	CHECK_EQ_INT(tunmsg_parse_sig(hex, sig), 0);
	CHECK(crypto_sign_verify_detached(sig, (const uint8_t *)msg, (unsigned long long)n, pk) ==
	      0);
	memset(sig, 0, sizeof(sig));
	CHECK_EQ_INT(tunmsg_parse_sig(b64, sig), 0);
	CHECK(crypto_sign_verify_detached(sig, (const uint8_t *)msg, (unsigned long long)n, pk) ==
	      0);
	hex[127] = '\0';
	CHECK_EQ_INT(tunmsg_parse_sig(hex, sig), -EINVAL);
	CHECK_EQ_INT(tunmsg_parse_sig("", sig), -EINVAL);
}

/* x_rally's udp_sig travels both ways; the message it signs; a bad one. */
static void test_udp_key(void)
{
	struct strbuf b;
	struct tunmsg m = {.cmd = TUNMSG_X_RALLY, .x_version = 1, .x_features = TUNMSG_X_UDP}, d;
	char msg[256], big[400];

	strbuf_init(&b, 1 << 16);
	strcpy(m.x_udp_key, "QUJD");
	memset(m.x_udp_sig, 'a', TUNMSG_SIG_HEX);
	m.x_udp_sig[TUNMSG_SIG_HEX] = '\0';
	tunmsg_encode(&m, &b);
	CHECK_EQ_INT(tunmsg_decode(b.p, b.len, &d, chunk, sizeof(chunk)), 0);
	CHECK_EQ_STR(d.x_udp_key, "QUJD");
	CHECK_EQ_STR(d.x_udp_sig, m.x_udp_sig);
	/* Longer than a hex signature, or not a string: the message is bad. */
	snprintf(big, sizeof(big),
		 "{\"cmd\":\"x_rally\",\"version\":1,\"features\":2,\"udp_sig\":\"%0129d\"}", 0);
	CHECK_EQ_INT(tunmsg_decode(big, strlen(big), &d, chunk, sizeof(chunk)), -EBADMSG);
	snprintf(big, sizeof(big),
		 "{\"cmd\":\"x_rally\",\"version\":1,\"features\":2,\"udp_sig\":5}");
	CHECK_EQ_INT(tunmsg_decode(big, strlen(big), &d, chunk, sizeof(chunk)), -EBADMSG);
	CHECK_EQ_INT(tunmsg_udp_key_message("R", "N", "rk", "ak", msg, sizeof(msg)),
		     (int)strlen("rally-udp-key-v1\nR\nN\nrk\nak"));
	CHECK_EQ_STR(msg, "rally-udp-key-v1\nR\nN\nrk\nak");
	CHECK_EQ_INT(tunmsg_udp_key_message("R", "N", "rk", "ak", msg, 10), -ENOSPC);
	strbuf_release(&b);
}

static void test_binary(void)
{
	uint8_t f[TUNMSG_BIN_HDR + 4];
	enum tunmsg_bin type;
	uint32_t id;
	const uint8_t *p;
	size_t n;

	tunmsg_bin_header(f, TUNMSG_BIN_CREDIT, 0x01020304);
	memset(f + 5, 0, 4);
	CHECK_EQ_INT(tunmsg_bin_decode(f, sizeof(f), &type, &id, &p, &n), 0);
	CHECK(type == TUNMSG_BIN_CREDIT && id == 0x01020304 && n == 4);
	CHECK_EQ_INT(tunmsg_bin_decode(f, 8, &type, &id, &p, &n), -EBADMSG);
	CHECK_EQ_INT(tunmsg_bin_decode(f, 4, &type, &id, &p, &n), -EBADMSG);
	f[0] = 9;
	CHECK_EQ_INT(tunmsg_bin_decode(f, sizeof(f), &type, &id, &p, &n), -EBADMSG);
	f[0] = TUNMSG_BIN_DATA;
	CHECK_EQ_INT(tunmsg_bin_decode(f, TUNMSG_BIN_HDR, &type, &id, &p, &n), -EBADMSG);
	/* A datagram with the player's address in front (TUNMSG_X_PEER). */
	f[0] = TUNMSG_BIN_DGRAM_PEER;
	CHECK_EQ_INT(tunmsg_bin_decode(f, sizeof(f), &type, &id, &p, &n), 0);
	CHECK(type == TUNMSG_BIN_DGRAM_PEER && n == 4);
	f[0] = TUNMSG_BIN_DGRAM_PEER + 1;
	CHECK_EQ_INT(tunmsg_bin_decode(f, sizeof(f), &type, &id, &p, &n), -EBADMSG);
}

int main(void)
{
	if (sodium_init() < 0)
		return 1;
	test_coa_shapes();
	test_encode_roundtrip();
	test_data_paths();
	test_base64();
	test_handshake();
	test_udp_key();
	test_binary();
	return tap_done("tunmsg");
}
