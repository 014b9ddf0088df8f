/*
 * relay_tundgram: seal/open round trips, every kind of tampering refused,
 * the replay window (duplicates, reordering within 64, too old), and the
 * keys of both ends agreeing through crypto_kx as the relay and the agent
 * derive them.
 */
#include <errno.h>
#include <sodium.h>
#include <string.h>

#include "addr.h"
#include "relay_tundgram.h"
#include "tap.h"

static uint8_t buf[TUNDGRAM_PAYLOAD + TUNDGRAM_OVER], out[TUNDGRAM_PAYLOAD + 16];

static int seal(const uint8_t key[static TUNDGRAM_KEY], uint64_t ctr, const char *p)
{
	struct tundgram_hdr h = {
		.type = TUNDGRAM_DATA, .udp_id = 0x1122334455667788ULL, .sid = 7, .ctr = ctr};

	return tundgram_seal(buf, sizeof(buf), &h, key, (const uint8_t *)p, strlen(p));
}

static void test_roundtrip_and_tamper(void)
{
	uint8_t key[TUNDGRAM_KEY], other[TUNDGRAM_KEY];
	struct tundgram_window w = {0};
	struct tundgram_hdr h;
	int n = 0, bad = 0;

	randombytes_buf(key, sizeof(key));
	randombytes_buf(other, sizeof(other));
	n = seal(key, 1, "getinfo xyz");
	CHECK_EQ_INT(n, 11 + TUNDGRAM_OVER);
	CHECK_EQ_INT(tundgram_peek(buf, (size_t)n, &h), 0);
	CHECK(h.type == TUNDGRAM_DATA && h.udp_id == 0x1122334455667788ULL && h.sid == 7 &&
	      h.ctr == 1);
	/* every single bit flipped: refused, and the window does not move */
	for (int i = 0; i < n * 8; i++) {
		struct tundgram_window w2 = {0};

		buf[i / 8] ^= (uint8_t)(1 << (i % 8));
		if (tundgram_open(buf, (size_t)n, key, &w2, out, sizeof(out)) >= 0 || w2.top != 0)
			bad++;
		buf[i / 8] ^= (uint8_t)(1 << (i % 8));
	}
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(tundgram_open(buf, (size_t)n, other, &w, out, sizeof(out)), -EBADMSG);
	CHECK_EQ_INT(tundgram_open(buf, (size_t)n - 1, key, &w, out, sizeof(out)), -EBADMSG);
	CHECK_EQ_INT(tundgram_open(buf, (size_t)n, key, &w, out, sizeof(out)), 11);
	CHECK(memcmp(out, "getinfo xyz", 11) == 0);
	/* counter 0 is never valid */
	n = seal(key, 0, "x");
	CHECK_EQ_INT(tundgram_open(buf, (size_t)n, key, &w, out, sizeof(out)), -EBADMSG);
	CHECK_EQ_INT(tundgram_peek(buf, TUNDGRAM_OVER - 1, &h), -EBADMSG);
	buf[0] = 9;
	CHECK_EQ_INT(tundgram_peek(buf, (size_t)n, &h), -EBADMSG);
}

static void test_window(void)
{
	uint8_t key[TUNDGRAM_KEY];
	struct tundgram_window w = {0};
	int n;

	randombytes_buf(key, sizeof(key));
	n = seal(key, 100, "a");
	CHECK_EQ_INT(tundgram_open(buf, (size_t)n, key, &w, out, sizeof(out)), 1);
	CHECK_EQ_INT(tundgram_open(buf, (size_t)n, key, &w, out, sizeof(out)), -EALREADY);
	n = seal(key, 90, "b"); /* late but within the window */
	CHECK_EQ_INT(tundgram_open(buf, (size_t)n, key, &w, out, sizeof(out)), 1);
	CHECK_EQ_INT(tundgram_open(buf, (size_t)n, key, &w, out, sizeof(out)), -EALREADY);
	n = seal(key, 36, "c"); /* 64 behind: too old */
	CHECK_EQ_INT(tundgram_open(buf, (size_t)n, key, &w, out, sizeof(out)), -EALREADY);
	n = seal(key, 37, "d"); /* 63 behind: still in */
	CHECK_EQ_INT(tundgram_open(buf, (size_t)n, key, &w, out, sizeof(out)), 1);
	n = seal(key, 1000, "e"); /* a jump clears the bits */
	CHECK_EQ_INT(tundgram_open(buf, (size_t)n, key, &w, out, sizeof(out)), 1);
	n = seal(key, 999, "f");
	CHECK_EQ_INT(tundgram_open(buf, (size_t)n, key, &w, out, sizeof(out)), 1);
	n = seal(key, 100, "g"); /* was seen, now far behind */
	CHECK_EQ_INT(tundgram_open(buf, (size_t)n, key, &w, out, sizeof(out)), -EALREADY);
}

/* The relay is crypto_kx's server, the agent its client: one's tx is the
 * other's rx, and the directions differ. */
static void test_kx(void)
{
	uint8_t spk[32], ssk[32], cpk[32], csk[32];
	uint8_t srx[32], stx[32], crx[32], ctx_[32];
	struct tundgram_window w = {0};
	int n;

	crypto_kx_keypair(spk, ssk);
	crypto_kx_keypair(cpk, csk);
	CHECK_EQ_INT(crypto_kx_server_session_keys(srx, stx, spk, ssk, cpk), 0);
	CHECK_EQ_INT(crypto_kx_client_session_keys(crx, ctx_, cpk, csk, spk), 0);
	CHECK(memcmp(stx, crx, 32) == 0 && memcmp(srx, ctx_, 32) == 0);
	CHECK(memcmp(stx, srx, 32) != 0);
	n = seal(ctx_, 1, "from the agent");
	CHECK_EQ_INT(tundgram_open(buf, (size_t)n, srx, &w, out, sizeof(out)), 14);
	/* a datagram reflected back at its sender does not open there */
	memset(&w, 0, sizeof(w));
	CHECK_EQ_INT(tundgram_open(buf, (size_t)n, crx, &w, out, sizeof(out)), -EBADMSG);
}

static void test_sizes(void)
{
	static uint8_t big[TUNDGRAM_PAYLOAD + 1];
	uint8_t key[TUNDGRAM_KEY];
	struct tundgram_hdr h = {.type = TUNDGRAM_DATA, .udp_id = 1, .sid = 1, .ctr = 1};
	struct tundgram_window w = {0};
	int n;

	randombytes_buf(key, sizeof(key));
	CHECK_EQ_INT(tundgram_seal(buf, sizeof(buf), &h, key, big, sizeof(big)), -EMSGSIZE);
	n = tundgram_seal(buf, sizeof(buf), &h, key, big, TUNDGRAM_PAYLOAD);
	CHECK_EQ_INT(n, TUNDGRAM_PAYLOAD + TUNDGRAM_OVER);
	CHECK_EQ_INT(tundgram_open(buf, (size_t)n, key, &w, out, sizeof(out)), TUNDGRAM_PAYLOAD);
	CHECK_EQ_INT(tundgram_seal(buf, 10, &h, key, big, 1), -EMSGSIZE);
	h.ctr = 2;
	n = tundgram_seal(buf, sizeof(buf), &h, key, NULL, 0); /* a ping */
	CHECK_EQ_INT(n, TUNDGRAM_OVER);
	CHECK_EQ_INT(tundgram_open(buf, (size_t)n, key, &w, out, sizeof(out)), 0);
}

/* The player's address in front of a DATA_PEER datagram: a wire sample
 * each way, round trips, and every malformed prefix refused. */
static void test_peer(void)
{
	static const uint8_t v4[] = {4, 10, 77, 1, 2, 0x6d, 0x37}; /* 10.77.1.2:27959 */
	uint8_t pb[TUNDGRAM_PEER_MAX + 4];
	struct addr a, b;
	char s[ADDR_STRLEN];
	int n;

	addr_parse(&a, "10.77.1.2:27959", -1);
	n = tundgram_peer_encode(pb, &a);
	CHECK_EQ_INT(n, 7);
	CHECK(memcmp(pb, v4, sizeof(v4)) == 0);
	pb[7] = 0xff; /* the game datagram follows */
	CHECK_EQ_INT(tundgram_peer_decode(pb, 8, &b), 7);
	CHECK_EQ_STR(addr_str(&b, s, sizeof(s)), "10.77.1.2:27959");
	addr_parse(&a, "[2001:db8::7]:1", -1);
	CHECK_EQ_INT(tundgram_peer_encode(pb, &a), 19);
	CHECK_EQ_INT(pb[0], 6);
	CHECK_EQ_INT(tundgram_peer_decode(pb, 19, &b), 19);
	CHECK_EQ_STR(addr_str(&b, s, sizeof(s)), "[2001:db8::7]:1");
	CHECK_EQ_INT(tundgram_peer_decode(pb, 18, &b), -EBADMSG); /* short */
	CHECK_EQ_INT(tundgram_peer_decode(v4, 6, &b), -EBADMSG);
	CHECK_EQ_INT(tundgram_peer_decode(v4, 0, &b), -EBADMSG);
	memcpy(pb, v4, sizeof(v4));
	pb[0] = 5; /* no such family */
	CHECK_EQ_INT(tundgram_peer_decode(pb, 7, &b), -EBADMSG);
	pb[0] = 4;
	pb[5] = pb[6] = 0; /* port 0 */
	CHECK_EQ_INT(tundgram_peer_decode(pb, 7, &b), -EBADMSG);
	/* DATA_PEER is a type peek knows. */
	{
		uint8_t key[TUNDGRAM_KEY] = {1}, d[64];
		struct tundgram_hdr h = {
			.type = TUNDGRAM_DATA_PEER, .udp_id = 1, .sid = 2, .ctr = 3};

		n = tundgram_seal(d, sizeof(d), &h, key, v4, sizeof(v4));
		CHECK(n > 0);
		CHECK_EQ_INT(tundgram_peek(d, (size_t)n, &h), 0);
		CHECK_EQ_INT(h.type, TUNDGRAM_DATA_PEER);
		d[0] = 5;
		CHECK_EQ_INT(tundgram_peek(d, (size_t)n, &h), -EBADMSG);
	}
}

int main(void)
{
	if (sodium_init() < 0)
		return 1;
	test_roundtrip_and_tamper();
	test_window();
	test_kx();
	test_sizes();
	test_peer();
	return tap_done("tundgram");
}
