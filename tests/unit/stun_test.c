/*
 * common/stun: the binding request, and the response parser on RFC 5769's
 * sample responses (§2.2 IPv4 and §2.3 IPv6, byte for byte; their
 * FINGERPRINT and MESSAGE-INTEGRITY were checked against the RFC's
 * password when this file was written) and on hand-built responses:
 * MAPPED-ADDRESS only, both forms, the wrong transaction, error
 * responses, truncations and lengths that run past the end.
 */
#include <errno.h>
#include <string.h>

#include "addr.h"
#include "stun.h"
#include "tap.h"

/* RFC 5769 §2.2 / §2.3: transaction id of both samples. */
static const uint8_t txid[STUN_TXID_LEN] = {0xb7, 0xe7, 0xa7, 0x01, 0xbc, 0x34,
					    0xd6, 0x86, 0xfa, 0x87, 0xdf, 0xae};

/* RFC 5769 §2.2 Sample IPv4 Response: SOFTWARE "test vector",
 * XOR-MAPPED-ADDRESS 192.0.2.1:32853, MESSAGE-INTEGRITY, FINGERPRINT. */
static const uint8_t rfc_v4[] = {
	0x01, 0x01, 0x00, 0x3c, 0x21, 0x12, 0xa4, 0x42, 0xb7, 0xe7, 0xa7, 0x01, 0xbc, 0x34,
	0xd6, 0x86, 0xfa, 0x87, 0xdf, 0xae, 0x80, 0x22, 0x00, 0x0b, 0x74, 0x65, 0x73, 0x74,
	0x20, 0x76, 0x65, 0x63, 0x74, 0x6f, 0x72, 0x20, 0x00, 0x20, 0x00, 0x08, 0x00, 0x01,
	0xa1, 0x47, 0xe1, 0x12, 0xa6, 0x43, 0x00, 0x08, 0x00, 0x14, 0x2b, 0x91, 0xf5, 0x99,
	0xfd, 0x9e, 0x90, 0xc3, 0x8c, 0x74, 0x89, 0xf9, 0x2a, 0xf9, 0xba, 0x53, 0xf0, 0x6b,
	0xe7, 0xd7, 0x80, 0x28, 0x00, 0x04, 0xc0, 0x7d, 0x4c, 0x96,
};

/* RFC 5769 §2.3 Sample IPv6 Response: XOR-MAPPED-ADDRESS
 * [2001:db8:1234:5678:11:2233:4455:6677]:32853. */
static const uint8_t rfc_v6[] = {
	0x01, 0x01, 0x00, 0x48, 0x21, 0x12, 0xa4, 0x42, 0xb7, 0xe7, 0xa7, 0x01, 0xbc, 0x34,
	0xd6, 0x86, 0xfa, 0x87, 0xdf, 0xae, 0x80, 0x22, 0x00, 0x0b, 0x74, 0x65, 0x73, 0x74,
	0x20, 0x76, 0x65, 0x63, 0x74, 0x6f, 0x72, 0x20, 0x00, 0x20, 0x00, 0x14, 0x00, 0x02,
	0xa1, 0x47, 0x01, 0x13, 0xa9, 0xfa, 0xa5, 0xd3, 0xf1, 0x79, 0xbc, 0x25, 0xf4, 0xb5,
	0xbe, 0xd2, 0xb9, 0xd9, 0x00, 0x08, 0x00, 0x14, 0xa3, 0x82, 0x95, 0x4e, 0x4b, 0xe6,
	0x7b, 0xf1, 0x17, 0x84, 0xc9, 0x7c, 0x82, 0x92, 0xc2, 0x75, 0xbf, 0xe3, 0xed, 0x41,
	0x80, 0x28, 0x00, 0x04, 0xc8, 0xfb, 0x0b, 0x4c,
};

/* A message under construction: header + attributes. */
struct msg {
	uint8_t b[512];
	size_t len;
};

static void msg_start(struct msg *m, uint16_t type)
{
	m->b[0] = (uint8_t)(type >> 8);
	m->b[1] = (uint8_t)type;
	m->b[2] = m->b[3] = 0;
	m->b[4] = 0x21;
	m->b[5] = 0x12;
	m->b[6] = 0xa4;
	m->b[7] = 0x42;
	memcpy(m->b + 8, txid, STUN_TXID_LEN);
	m->len = STUN_HDR;
}

/* Appends an attribute with its padding and fixes the header length. */
static void msg_attr(struct msg *m, uint16_t type, const void *v, size_t n)
{
	size_t body;

	m->b[m->len++] = (uint8_t)(type >> 8);
	m->b[m->len++] = (uint8_t)type;
	m->b[m->len++] = (uint8_t)(n >> 8);
	m->b[m->len++] = (uint8_t)n;
	memcpy(m->b + m->len, v, n);
	m->len += n;
	while (m->len % 4 != 0)
		m->b[m->len++] = 0;
	body = m->len - STUN_HDR;
	m->b[2] = (uint8_t)(body >> 8);
	m->b[3] = (uint8_t)body;
}

static int parse(const uint8_t *b, size_t n, struct addr *a)
{
	memset(a, 0x5a, sizeof(*a));
	return stun_parse_binding_response(b, n, txid, a);
}

static void expect_addr(const struct addr *a, const char *want)
{
	char buf[ADDR_STRLEN];

	CHECK_EQ_STR(addr_str(a, buf, sizeof(buf)), want);
}

static void test_request(void)
{
	uint8_t b[32];

	CHECK_EQ_INT(stun_build_binding_request(b, sizeof(b), txid), STUN_HDR);
	CHECK(memcmp(b, "\x00\x01\x00\x00\x21\x12\xa4\x42", 8) == 0);
	CHECK(memcmp(b + 8, txid, STUN_TXID_LEN) == 0);
	CHECK(stun_is_message(b, STUN_HDR));
	CHECK_EQ_INT(stun_build_binding_request(b, STUN_HDR - 1, txid), -ENOSPC);
}

static void test_rfc5769(void)
{
	struct addr a;

	CHECK(stun_is_message(rfc_v4, sizeof(rfc_v4)));
	CHECK_EQ_INT(parse(rfc_v4, sizeof(rfc_v4), &a), 0);
	expect_addr(&a, "192.0.2.1:32853");
	CHECK_EQ_INT(a.len, sizeof(struct sockaddr_in));
	CHECK(stun_is_message(rfc_v6, sizeof(rfc_v6)));
	CHECK_EQ_INT(parse(rfc_v6, sizeof(rfc_v6), &a), 0);
	expect_addr(&a, "[2001:db8:1234:5678:11:2233:4455:6677]:32853");
	CHECK_EQ_INT(a.len, sizeof(struct sockaddr_in6));

	/* Every truncation of the samples is refused, never read past. */
	for (size_t n = 0; n < sizeof(rfc_v4); n++)
		CHECK(parse(rfc_v4, n, &a) < 0);
	for (size_t n = 0; n < sizeof(rfc_v6); n++)
		CHECK(parse(rfc_v6, n, &a) < 0);
	/* Another transaction's answer. */
	{
		uint8_t other[STUN_TXID_LEN];

		memcpy(other, txid, sizeof(other));
		other[11] ^= 1;
		CHECK_EQ_INT(stun_parse_binding_response(rfc_v4, sizeof(rfc_v4), other, &a),
			     -ENOENT);
	}
}

static void test_hand_built(void)
{
	/* MAPPED-ADDRESS 198.51.100.7:61000 in clear; XOR form of
	 * 203.0.113.9:1234: port ^ 0x2112, address ^ 2112a442. */
	static const uint8_t mapped[] = {0, 1, 0xee, 0x48, 198, 51, 100, 7};
	static const uint8_t xmapped[] = {0,          1,        0x04 ^ 0x21, 0xd2 ^ 0x12,
					  203 ^ 0x21, 0 ^ 0x12, 113 ^ 0xa4,  9 ^ 0x42};
	static const uint8_t mapped6[] = {0, 2, 0x73, 0x1f, 0x20, 0x01, 0x0d, 0xb8, 0, 0,
					  0, 0, 0,    0,    0,    0,    0,    0,    0, 1};
	static const uint8_t software[] = "rally";
	struct msg m;
	struct addr a;

	/* An RFC 3489 server: MAPPED-ADDRESS only. */
	msg_start(&m, 0x0101);
	msg_attr(&m, 0x8022, software, 5);
	msg_attr(&m, 0x0001, mapped, sizeof(mapped));
	CHECK_EQ_INT(parse(m.b, m.len, &a), 0);
	expect_addr(&a, "198.51.100.7:61000");
	/* Both: XOR-MAPPED wins, whatever the order. */
	msg_attr(&m, 0x0020, xmapped, sizeof(xmapped));
	CHECK_EQ_INT(parse(m.b, m.len, &a), 0);
	expect_addr(&a, "203.0.113.9:1234");
	/* MAPPED-ADDRESS in IPv6. */
	msg_start(&m, 0x0101);
	msg_attr(&m, 0x0001, mapped6, sizeof(mapped6));
	CHECK_EQ_INT(parse(m.b, m.len, &a), 0);
	expect_addr(&a, "[2001:db8::1]:29471");
	/* Only the first of a repeated attribute counts. */
	msg_start(&m, 0x0101);
	msg_attr(&m, 0x0020, xmapped, sizeof(xmapped));
	msg_attr(&m, 0x0020, mapped, sizeof(mapped));
	CHECK_EQ_INT(parse(m.b, m.len, &a), 0);
	expect_addr(&a, "203.0.113.9:1234");
	/* Unknown attributes, comprehension-required or not, with odd
	 * lengths and their padding, are skipped. */
	msg_start(&m, 0x0101);
	msg_attr(&m, 0x7777, "abc", 3);
	msg_attr(&m, 0xc001, "", 0);
	msg_attr(&m, 0x0020, xmapped, sizeof(xmapped));
	CHECK_EQ_INT(parse(m.b, m.len, &a), 0);
	expect_addr(&a, "203.0.113.9:1234");
	/* Nothing after MESSAGE-INTEGRITY or FINGERPRINT is taken. */
	msg_start(&m, 0x0101);
	msg_attr(&m, 0x0008, "01234567890123456789", 20);
	msg_attr(&m, 0x0020, xmapped, sizeof(xmapped));
	CHECK_EQ_INT(parse(m.b, m.len, &a), -ENOENT);
	msg_start(&m, 0x0101);
	msg_attr(&m, 0x8028, "\0\0\0\0", 4);
	msg_attr(&m, 0x0001, mapped, sizeof(mapped));
	CHECK_EQ_INT(parse(m.b, m.len, &a), -ENOENT);
	/* No address at all. */
	msg_start(&m, 0x0101);
	CHECK_EQ_INT(parse(m.b, m.len, &a), -ENOENT);
	msg_attr(&m, 0x8022, software, 5);
	CHECK_EQ_INT(parse(m.b, m.len, &a), -ENOENT);
}

static void test_classes(void)
{
	static const uint8_t xmapped[] = {0, 1, 0x25, 0xc0, 0xea, 0x12, 0xd5, 0x4b};
	static const uint8_t errcode[] = {0, 0, 4, 20, 'B', 'a', 'd'};
	struct msg m;
	struct addr a;

	/* A Binding Error Response to our transaction. */
	msg_start(&m, 0x0111);
	msg_attr(&m, 0x0009, errcode, sizeof(errcode));
	CHECK_EQ_INT(parse(m.b, m.len, &a), -EPROTO);
	/* A request, an indication, another method's success: not an
	 * answer to us, even with an address inside. */
	msg_start(&m, 0x0001);
	msg_attr(&m, 0x0020, xmapped, sizeof(xmapped));
	CHECK_EQ_INT(parse(m.b, m.len, &a), -ENOENT);
	m.b[1] = 0x11; /* 0x0011: indication */
	CHECK_EQ_INT(parse(m.b, m.len, &a), -ENOENT);
	m.b[0] = 0x01;
	m.b[1] = 0x03; /* 0x0103: Allocate success (TURN) */
	CHECK_EQ_INT(parse(m.b, m.len, &a), -ENOENT);
	m.b[1] = 0x01;
	CHECK_EQ_INT(parse(m.b, m.len, &a), 0);
	/* Not STUN: the top bits, the cookie. */
	m.b[0] = 0x41;
	CHECK_EQ_INT(parse(m.b, m.len, &a), -EBADMSG);
	CHECK(!stun_is_message(m.b, m.len));
	m.b[0] = 0x01;
	m.b[7] = 0x43;
	CHECK_EQ_INT(parse(m.b, m.len, &a), -EBADMSG);
	CHECK(!stun_is_message(m.b, m.len));
	CHECK(!stun_is_message((const uint8_t *)"NP1:H01234567890123456", 20));
	CHECK(!stun_is_message((const uint8_t *)"TRLA0123456789abcdef", 20));
}

static void test_lengths(void)
{
	static const uint8_t xmapped[] = {0, 1, 0x25, 0xc0, 0xea, 0x12, 0xd5, 0x4b};
	struct msg m;
	struct addr a;

	msg_start(&m, 0x0101);
	msg_attr(&m, 0x0020, xmapped, sizeof(xmapped));
	CHECK_EQ_INT(parse(m.b, m.len, &a), 0);
	/* Header length longer, shorter, not a multiple of 4, than the
	 * datagram; trailing bytes. */
	m.b[3] = 16;
	CHECK_EQ_INT(parse(m.b, m.len, &a), -EBADMSG);
	m.b[3] = 8;
	CHECK_EQ_INT(parse(m.b, m.len, &a), -EBADMSG);
	m.b[3] = 13;
	CHECK_EQ_INT(parse(m.b, m.len, &a), -EBADMSG);
	m.b[3] = 12;
	m.b[m.len] = 0;
	CHECK_EQ_INT(parse(m.b, m.len + 1, &a), -EBADMSG);
	CHECK(!stun_is_message(m.b, m.len + 1));
	/* An attribute length past the end of the message. */
	m.b[STUN_HDR + 3] = 9;
	CHECK_EQ_INT(parse(m.b, m.len, &a), -EBADMSG);
	m.b[STUN_HDR + 2] = 0xff;
	CHECK_EQ_INT(parse(m.b, m.len, &a), -EBADMSG);
	/* Length inside the message but its padding missing. */
	msg_start(&m, 0x0101);
	msg_attr(&m, 0x8022, "abcdefgh", 8);
	m.b[STUN_HDR + 3] = 5; /* 5 bytes + 3 padding = the 8 there: fine */
	CHECK_EQ_INT(parse(m.b, m.len, &a), -ENOENT);
	m.b[STUN_HDR + 3] = 7; /* 7 + 1 = 8: fine */
	CHECK_EQ_INT(parse(m.b, m.len, &a), -ENOENT);
	msg_start(&m, 0x0101);
	msg_attr(&m, 0x8022, "abcd", 4);
	msg_attr(&m, 0x8022, "", 0); /* 4 bytes of header, nothing after */
	m.b[STUN_HDR + 8 + 3] = 1;   /* claims 1 byte: there are none */
	CHECK_EQ_INT(parse(m.b, m.len, &a), -EBADMSG);
	/* A header whose value is not there. */
	msg_start(&m, 0x0101);
	msg_attr(&m, 0x8022, "abcd", 4);
	m.b[3] = 8 + 4;
	memset(m.b + m.len, 0, 4);
	m.len += 4;
	m.b[m.len - 4] = 0x80;
	m.b[m.len - 3] = 0x22;
	m.b[m.len - 2] = 0x00;
	m.b[m.len - 1] = 0x04; /* header of a 4-byte attribute, no value */
	CHECK_EQ_INT(parse(m.b, m.len, &a), -EBADMSG);
	/* Address values of the wrong size or family. */
	{
		static const uint8_t short4[] = {0, 1, 0x25, 0xc0, 0xea, 0x12, 0xd5};
		static const uint8_t long4[] = {0,    1,    0x25, 0xc0, 0xea, 0x12,
						0xd5, 0x4b, 0,    0,    0,    0};
		static const uint8_t fam3[] = {0, 3, 0x25, 0xc0, 0xea, 0x12, 0xd5, 0x4b};
		static const uint8_t v6short[] = {0, 2, 0x25, 0xc0, 0xea, 0x12, 0xd5, 0x4b};
		static const uint8_t tiny[] = {0, 1};

		msg_start(&m, 0x0101);
		msg_attr(&m, 0x0020, short4, sizeof(short4));
		CHECK_EQ_INT(parse(m.b, m.len, &a), -EBADMSG);
		msg_start(&m, 0x0101);
		msg_attr(&m, 0x0020, long4, sizeof(long4));
		CHECK_EQ_INT(parse(m.b, m.len, &a), -EBADMSG);
		msg_start(&m, 0x0101);
		msg_attr(&m, 0x0001, fam3, sizeof(fam3));
		CHECK_EQ_INT(parse(m.b, m.len, &a), -EBADMSG);
		msg_start(&m, 0x0101);
		msg_attr(&m, 0x0020, v6short, sizeof(v6short));
		CHECK_EQ_INT(parse(m.b, m.len, &a), -EBADMSG);
		msg_start(&m, 0x0101);
		msg_attr(&m, 0x0001, tiny, sizeof(tiny));
		CHECK_EQ_INT(parse(m.b, m.len, &a), -EBADMSG);
	}
	/* More attributes than we look at. */
	msg_start(&m, 0x0101);
	for (int i = 0; i < 70; i++)
		msg_attr(&m, 0x8022, "", 0);
	CHECK_EQ_INT(parse(m.b, m.len, &a), -EBADMSG);
}

int main(void)
{
	test_request();
	test_rfc5769();
	test_hand_built();
	test_classes();
	test_lengths();
	return tap_done("stun");
}
