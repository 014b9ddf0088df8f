#include "stun.h"

#include <errno.h>
#include <string.h>

#include "rd.h"

/* RFC 5389 §6: method Binding (0x001) in the classes request, success
 * response and error response. */
#define BINDING_REQUEST (0x0001)
#define BINDING_SUCCESS (0x0101)
#define BINDING_ERROR   (0x0111)
/* §15 attributes (and RFC 3489's MAPPED-ADDRESS). */
#define ATTR_MAPPED      (0x0001)
#define ATTR_INTEGRITY   (0x0008)
#define ATTR_XOR_MAPPED  (0x0020)
#define ATTR_FINGERPRINT (0x8028)
#define FAMILY_V4        (0x01)
#define FAMILY_V6        (0x02)
/* A cap on the attributes looked at; a binding response has a handful. */
#define MAX_ATTRS (64)

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/*
 * §6: "The most significant 2 bits of every STUN message MUST be zeroes",
 * the magic cookie 0x2112A442 follows the type and length, and "the
 * message length MUST contain the size, in bytes, of the message not
 * including the 20-byte STUN header. Since all STUN attributes are padded
 * to a multiple of 4 bytes, the last 2 bits of this field are always
 * zero." Over UDP the datagram is exactly one message.
 */
bool stun_is_message(const uint8_t *buf, size_t len)
{
	size_t mlen;

	if (len < STUN_HDR || (buf[0] & 0xc0) != 0 || be32(buf + 4) != STUN_MAGIC)
		return false;
	mlen = (size_t)buf[2] << 8 | buf[3];
	return mlen % 4 == 0 && mlen == len - STUN_HDR;
}

int stun_build_binding_request(uint8_t *buf, size_t cap, const uint8_t txid[static STUN_TXID_LEN])
{
	struct wr w = wr_init(buf, cap);

	wr_be16(&w, BINDING_REQUEST);
	wr_be16(&w, 0);
	wr_be32(&w, STUN_MAGIC);
	wr_bytes(&w, txid, STUN_TXID_LEN);
	return w.bad ? -ENOSPC : (int)w.len;
}

/*
 * MAPPED-ADDRESS / XOR-MAPPED-ADDRESS value (§15.1, §15.2):
 *   0x00 | family | port u16 | address (4 or 16 bytes)
 * For the XOR form the port is XORed with the cookie's top 16 bits, an
 * IPv4 address with the cookie, an IPv6 address with cookie || txid.
 * A family other than 1 or 2, or a length that does not match the
 * family, is malformed.
 */
static int read_address(const uint8_t *v, size_t n, bool xor, const uint8_t *hdr, struct addr *out)
{
	uint8_t family;
	uint16_t port;

	if (n < 4)
		return -EBADMSG;
	family = v[1];
	port = (uint16_t)((uint16_t)v[2] << 8 | v[3]);
	if (xor)
		port ^= (uint16_t)(STUN_MAGIC >> 16);
	memset(out, 0, sizeof(*out));
	if (family == FAMILY_V4 && n == 8) {
		struct sockaddr_in *sin = (struct sockaddr_in *)&out->ss;
		uint8_t ip[4];

		for (size_t i = 0; i < 4; i++)
			ip[i] = (uint8_t)(v[4 + i] ^ (xor? hdr[4 + i] : 0));
		sin->sin_family = AF_INET;
		memcpy(&sin->sin_addr, ip, 4);
		sin->sin_port = htons(port);
		out->len = sizeof(*sin);
		return 0;
	}
	if (family == FAMILY_V6 && n == 20) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&out->ss;
		uint8_t ip[16];

		/* hdr + 4 is the cookie followed by the transaction id. */
		for (size_t i = 0; i < 16; i++)
			ip[i] = (uint8_t)(v[4 + i] ^ (xor? hdr[4 + i] : 0));
		s6->sin6_family = AF_INET6;
		memcpy(&s6->sin6_addr, ip, 16);
		s6->sin6_port = htons(port);
		out->len = sizeof(*s6);
		return 0;
	}
	return -EBADMSG;
}

int stun_parse_binding_response(const uint8_t *buf, size_t len,
				const uint8_t txid[static STUN_TXID_LEN], struct addr *mapped)
{
	struct rd r = rd_init(buf, len);
	uint16_t type = rd_be16(&r), mlen = rd_be16(&r);
	uint32_t cookie = rd_be32(&r);
	const uint8_t *id = rd_bytes(&r, STUN_TXID_LEN);
	bool have_xor = false, have_plain = false, closed = false;
	struct addr xor_addr, plain_addr;

	if (r.bad || (type & 0xc000) != 0 || cookie != STUN_MAGIC)
		return -EBADMSG;
	/* The length is checked against what is actually there before any
	 * attribute is read: the datagram is the message, padded to 4. */
	if (mlen % 4 != 0 || mlen != r.left)
		return -EBADMSG;
	if (memcmp(id, txid, STUN_TXID_LEN) != 0)
		return -ENOENT;
	if (type == BINDING_ERROR)
		return -EPROTO;
	if (type != BINDING_SUCCESS)
		return -ENOENT;

	for (int n = 0; r.left > 0; n++) {
		uint16_t at, alen;
		const uint8_t *v;
		size_t pad;
		int ret;

		if (n == MAX_ATTRS)
			return -EBADMSG;
		/* §15: type u16 | length u16 | value | padding to 4. */
		at = rd_be16(&r);
		alen = rd_be16(&r);
		if (r.bad)
			return -EBADMSG;
		if (alen > r.left)
			return -EBADMSG;
		v = rd_bytes(&r, alen);
		pad = (4u - alen % 4u) % 4u;
		if (pad > r.left)
			return -EBADMSG;
		rd_bytes(&r, pad);
		/* §15.4: after MESSAGE-INTEGRITY only FINGERPRINT counts;
		 * §15.5: FINGERPRINT is the last. Later attributes are not
		 * trusted, only length-checked. */
		if (closed)
			continue;
		if (at == ATTR_INTEGRITY || at == ATTR_FINGERPRINT) {
			closed = true;
			continue;
		}
		/* §15: "if an attribute appears more than once, only the first
		 * occurrence needs to be processed". Unknown attributes,
		 * comprehension-required ones included, are skipped: this
		 * client asks nothing of the server it could fail to honour. */
		if (at == ATTR_XOR_MAPPED && !have_xor) {
			ret = read_address(v, alen, true, buf, &xor_addr);
			if (ret < 0)
				return ret;
			have_xor = true;
		} else if (at == ATTR_MAPPED && !have_plain) {
			ret = read_address(v, alen, false, buf, &plain_addr);
			if (ret < 0)
				return ret;
			have_plain = true;
		}
	}
	if (have_xor)
		*mapped = xor_addr;
	else if (have_plain)
		*mapped = plain_addr;
	else
		return -ENOENT;
	return 0;
}
