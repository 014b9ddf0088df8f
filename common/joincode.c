#include "joincode.h"

#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base32.h"
#include "rd.h"

/* Byte 0 (netpunch-wire.md §4.1). */
#define F_OPEN         (0x01u)
#define F_SYM          (0x02u)
#define F_CGNAT        (0x04u)
#define P_LAN          (0x08u)
#define P_PUB          (0x10u)
#define P_V6           (0x20u)
#define V6_6TO4        (0x40u)
#define P_SEC          (0x80u)
#define LOCK_MAGIC     (0xffu)
#define LOCK_TAG       (16)
#define LOCK_KEY       (32)

#define STEAM_ID_BASE  (76561197960265728ull) /* SteamID64 of individual account 0 */
#define STEAM_CODE_LEN (17)

/* flags + ts + lan + public + v6 (port + 16) + secret + 2 vpn + steam. */
#define BODY_MAX (1 + 4 + 6 + 6 + 18 + JOINCODE_SECRET_LEN + 6 + 6 + 8)
/* What JOINCODE_MAX_TEXT characters of base32 can hold. */
#define BLOB_MAX (JOINCODE_MAX_TEXT / 8 * 5 + 5)

static const char lock_salt_prefix[] = "tpf2mp-code|";
static const char ks_sep[] = "|ks|";

__attribute__((format(printf, 3, 4))) static void set_err(char *err, size_t errsize,
							  const char *fmt, ...)
{
	va_list ap;

	if (err == NULL || errsize == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errsize, fmt, ap);
	va_end(ap);
}

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/*
 * Python's str.strip() whitespace, as UTF-8: the ASCII set (\t \n \v \f \r,
 * space, \x1c-\x1f) and the Unicode spaces U+0085, U+00A0, U+1680,
 * U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000. Returns the byte
 * length of such a character starting at p (n bytes left), else 0.
 */
static size_t space_at(const unsigned char *p, size_t n)
{
	if (n >= 1 &&
	    ((p[0] >= 0x09 && p[0] <= 0x0d) || p[0] == ' ' || (p[0] >= 0x1c && p[0] <= 0x1f)))
		return 1;
	if (n >= 2 && p[0] == 0xc2 && (p[1] == 0x85 || p[1] == 0xa0))
		return 2;
	if (n >= 3 && p[0] == 0xe1 && p[1] == 0x9a && p[2] == 0x80)
		return 3;
	if (n >= 3 && p[0] == 0xe2 && p[1] == 0x80 &&
	    ((p[2] >= 0x80 && p[2] <= 0x8a) || p[2] == 0xa8 || p[2] == 0xa9 || p[2] == 0xaf))
		return 3;
	if (n >= 3 && p[0] == 0xe2 && p[1] == 0x81 && p[2] == 0x9f)
		return 3;
	if (n >= 3 && p[0] == 0xe3 && p[1] == 0x80 && p[2] == 0x80)
		return 3;
	return 0;
}

/* The same, for a character ending at p + n. */
static size_t space_before(const unsigned char *p, size_t n)
{
	for (size_t k = 1; k <= 3 && k <= n; k++) {
		if (space_at(p + n - k, k) == k)
			return k;
	}
	return 0;
}

/* Python's text.strip(): the [*start, *start + *len) range without the
 * surrounding whitespace. */
static void strip(const char *text, const char **start, size_t *len)
{
	const unsigned char *p = (const unsigned char *)text;
	size_t n = strlen(text), k;

	while ((k = space_at(p, n)) > 0) {
		p += k;
		n -= k;
	}
	while ((k = space_before(p, n)) > 0)
		n -= k;
	*start = (const char *)p;
	*len = n;
}

static bool prefix_nocase(const char *s, size_t n, const char *prefix)
{
	size_t pl = strlen(prefix);

	if (n < pl)
		return false;
	for (size_t i = 0; i < pl; i++) {
		char c = s[i];

		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (c != prefix[i])
			return false;
	}
	return true;
}

/*
 * connect.steam_code_id: strip, drop trailing '/', drop the profile URL
 * prefixes (each tried once, in this order), drop spaces; then exactly 17
 * digits strictly between the base of individual accounts and base + 2^32.
 */
bool joincode_steam_id(const char *text, uint64_t *id)
{
	static const char *const prefixes[] = {
		"https://steamcommunity.com/profiles/",
		"http://steamcommunity.com/profiles/",
		"steamcommunity.com/profiles/",
	};
	const char *s;
	size_t n, digits = 0;
	uint64_t v = 0;

	strip(text, &s, &n);
	while (n > 0 && s[n - 1] == '/')
		n--;
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
		if (prefix_nocase(s, n, prefixes[i])) {
			s += strlen(prefixes[i]);
			n -= strlen(prefixes[i]);
		}
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] == ' ')
			continue;
		if (s[i] < '0' || s[i] > '9' || digits == STEAM_CODE_LEN)
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
		digits++;
	}
	/* 17 digits stay below 10^17 < 2^64: no overflow above. */
	if (digits != STEAM_CODE_LEN || v <= STEAM_ID_BASE || v >= STEAM_ID_BASE + (1ull << 32))
		return false;
	*id = v;
	return true;
}

int joincode_set_secret(struct joincode *c, const uint8_t *secret, size_t len, char *err,
			size_t errsize)
{
	/* connect.encode_profile: an empty secret is no secret. */
	if (len == 0) {
		c->has_secret = false;
		return 0;
	}
	if (len != JOINCODE_SECRET_LEN) {
		set_err(err, errsize, "secret must be 12 bytes");
		return -EINVAL;
	}
	memcpy(c->secret, secret, JOINCODE_SECRET_LEN);
	c->has_secret = true;
	return 0;
}

/* ---- the lock (§4.2) ---- */

/* key = PBKDF2-HMAC-SHA256(password, "tpf2mp-code|" || ts u32be, 600,000). */
static int lock_key(const char *password, uint32_t ts, uint8_t key[static LOCK_KEY])
{
	uint8_t salt[sizeof(lock_salt_prefix) - 1 + 4];
	size_t pl = strlen(password);

	if (pl > INT_MAX)
		return -EINVAL;
	memcpy(salt, lock_salt_prefix, sizeof(lock_salt_prefix) - 1);
	put_be32(salt + sizeof(lock_salt_prefix) - 1, ts);
	if (PKCS5_PBKDF2_HMAC(password, (int)pl, salt, (int)sizeof(salt), JOINCODE_LOCK_ITERS,
			      EVP_sha256(), LOCK_KEY, key) != 1)
		return -EIO;
	return 0;
}

/* buf ^= the lock keystream: SHA256(key || "|ks|" || u32be i) blocks. */
static int lock_xor(const uint8_t key[static LOCK_KEY], uint8_t *buf, size_t len)
{
	uint8_t in[LOCK_KEY + sizeof(ks_sep) - 1 + 4], block[SHA256_DIGEST_LENGTH];
	uint32_t i = 0;

	memcpy(in, key, LOCK_KEY);
	memcpy(in + LOCK_KEY, ks_sep, sizeof(ks_sep) - 1);
	for (size_t off = 0; off < len; off += sizeof(block), i++) {
		size_t n = len - off < sizeof(block) ? len - off : sizeof(block);

		put_be32(in + sizeof(in) - 4, i);
		if (SHA256(in, sizeof(in), block) == NULL) {
			sodium_memzero(in, sizeof(in));
			return -EIO;
		}
		for (size_t j = 0; j < n; j++)
			buf[off + j] ^= block[j];
	}
	sodium_memzero(in, sizeof(in));
	sodium_memzero(block, sizeof(block));
	return 0;
}

/* tag = HMAC-SHA256(key, ts u32be || ct)[:16]. */
static int lock_tag(const uint8_t key[static LOCK_KEY], const uint8_t ts_be[static 4],
		    const uint8_t *ct, size_t len, uint8_t tag[static LOCK_TAG])
{
	uint8_t in[4 + BLOB_MAX], mac[EVP_MAX_MD_SIZE];
	unsigned int maclen = 0;

	if (len > BLOB_MAX)
		return -EINVAL;
	memcpy(in, ts_be, 4);
	if (len > 0)
		memcpy(in + 4, ct, len);
	if (HMAC(EVP_sha256(), key, LOCK_KEY, in, 4 + len, mac, &maclen) == NULL ||
	    maclen < LOCK_TAG)
		return -EIO;
	memcpy(tag, mac, LOCK_TAG);
	return 0;
}

/* ---- encode (§4.1, §4.2) ---- */

static bool put_v4(struct wr *w, const struct addr *a)
{
	const struct sockaddr_in *sin = (const struct sockaddr_in *)&a->ss;

	if (a->ss.ss_family != AF_INET)
		return false;
	wr_bytes(w, &sin->sin_addr, 4);
	wr_be16(w, ntohs(sin->sin_port));
	return true;
}

int joincode_encode(const struct joincode *c, const char *password, char *text, size_t size,
		    char *err, size_t errsize)
{
	uint8_t blob[BODY_MAX + LOCK_TAG], body[BODY_MAX], key[LOCK_KEY];
	struct wr w = wr_init(blob, BODY_MAX);
	uint8_t b0 = 0;
	size_t blen;
	int ret;

	if (c->open)
		b0 |= F_OPEN;
	if (c->symmetric)
		b0 |= F_SYM;
	if (c->cgnat)
		b0 |= F_CGNAT;
	/* Byte 0 and the timestamp are written last, over these 5 bytes. */
	wr_bytes(&w, "\0\0\0\0\0", 5);
	if (c->has_lan) {
		b0 |= P_LAN;
		if (!put_v4(&w, &c->lan)) {
			set_err(err, errsize, "lan_v4 is not an IPv4 address");
			return -EINVAL;
		}
	}
	if (c->has_public) {
		b0 |= P_PUB;
		if (!put_v4(&w, &c->pub)) {
			set_err(err, errsize, "public_v4 is not an IPv4 address");
			return -EINVAL;
		}
	}
	if (c->has_v6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&c->v6addr.ss;
		const uint8_t *ip6 = s6->sin6_addr.s6_addr;

		if (c->v6addr.ss.ss_family != AF_INET6) {
			set_err(err, errsize, "v6 is not an IPv6 address");
			return -EINVAL;
		}
		b0 |= P_V6;
		wr_be16(&w, ntohs(s6->sin6_port));
		/* 6to4: 2002:VVVV:VVVV::/48 embedding public_v4 ships its low
		 * 80 bits only. */
		if (c->has_public && ip6[0] == 0x20 && ip6[1] == 0x02 &&
		    memcmp(ip6 + 2, &((const struct sockaddr_in *)&c->pub.ss)->sin_addr, 4) == 0) {
			b0 |= V6_6TO4;
			wr_bytes(&w, ip6 + 6, 10);
		} else {
			wr_bytes(&w, ip6, 16);
		}
	}
	if (c->has_secret) {
		b0 |= P_SEC;
		wr_bytes(&w, c->secret, JOINCODE_SECRET_LEN);
	}
	/* The tail: vpn_v4, vpn2_v4, then the SteamID, each only if set. */
	if (c->has_vpn && !put_v4(&w, &c->vpn)) {
		set_err(err, errsize, "vpn_v4 is not an IPv4 address");
		return -EINVAL;
	}
	if (c->has_vpn2 && !put_v4(&w, &c->vpn2)) {
		set_err(err, errsize, "vpn2_v4 is not an IPv4 address");
		return -EINVAL;
	}
	if (c->steam != 0) {
		wr_be32(&w, (uint32_t)(c->steam >> 32));
		wr_be32(&w, (uint32_t)c->steam);
	}
	if (w.bad)
		return -ENOSPC; /* cannot happen: BODY_MAX covers every field */
	blob[0] = b0;
	put_be32(blob + 1, c->ts);

	if (password == NULL || password[0] == '\0') {
		ret = base32_encode(blob, w.len, text, size);
		if (ret < 0)
			set_err(err, errsize, "code does not fit");
		return ret;
	}

	/* Locked: 0xFF | ts | E(b0 || fields) | tag16; ts stays in clear. */
	ret = lock_key(password, c->ts, key);
	if (ret < 0)
		goto out;
	blen = w.len - 4;
	body[0] = b0;
	memcpy(body + 1, blob + 5, w.len - 5);
	ret = lock_xor(key, body, blen);
	if (ret < 0)
		goto out;
	blob[0] = LOCK_MAGIC;
	memcpy(blob + 5, body, blen);
	ret = lock_tag(key, blob + 1, blob + 5, blen, blob + 5 + blen);
	if (ret < 0)
		goto out;
	ret = base32_encode(blob, 5 + blen + LOCK_TAG, text, size);
	if (ret < 0)
		set_err(err, errsize, "code does not fit");
out:
	if (ret == -EIO)
		set_err(err, errsize, "OpenSSL failed to lock the code");
	sodium_memzero(key, sizeof(key));
	sodium_memzero(body, sizeof(body));
	sodium_memzero(blob, sizeof(blob));
	return ret;
}

/* ---- decode (§4.3) ---- */

static void make_v4(struct addr *a, const uint8_t ip[static 4], uint16_t port)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)&a->ss;

	memset(a, 0, sizeof(*a));
	sin->sin_family = AF_INET;
	memcpy(&sin->sin_addr, ip, 4);
	sin->sin_port = htons(port);
	a->len = sizeof(*sin);
}

static void make_v6(struct addr *a, const uint8_t ip[static 16], uint16_t port)
{
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&a->ss;

	memset(a, 0, sizeof(*a));
	s6->sin6_family = AF_INET6;
	memcpy(&s6->sin6_addr, ip, 16);
	s6->sin6_port = htons(port);
	a->len = sizeof(*s6);
}

/* An IPv4 candidate: 4 address bytes, u16be port. False when short. */
static bool take_v4(struct rd *r, struct addr *a)
{
	const uint8_t *ip = rd_bytes(r, 4);
	uint16_t port = rd_be16(r);

	if (r->bad)
		return false;
	make_v4(a, ip, port);
	return true;
}

/*
 * The plain layout: b0 | ts | fields | tail. Errors are checked in
 * netpunch's order: a field running short is "truncated code" before the
 * 6to4 rule is looked at.
 */
static int parse_plain(const uint8_t *blob, size_t len, struct joincode *c, char *err,
		       size_t errsize)
{
	struct rd r = rd_init(blob, len);
	uint8_t b0 = rd_u8(&r);
	size_t tail;

	c->ts = rd_be32(&r);
	c->open = (b0 & F_OPEN) != 0;
	c->symmetric = (b0 & F_SYM) != 0;
	c->cgnat = (b0 & F_CGNAT) != 0;
	if ((b0 & P_LAN) != 0) {
		if (!take_v4(&r, &c->lan))
			goto truncated;
		c->has_lan = true;
	}
	if ((b0 & P_PUB) != 0) {
		if (!take_v4(&r, &c->pub))
			goto truncated;
		c->has_public = true;
	}
	if ((b0 & P_V6) != 0) {
		uint16_t port = rd_be16(&r);
		uint8_t ip6[16];
		const uint8_t *p;

		if (r.bad)
			goto truncated;
		if ((b0 & V6_6TO4) != 0) {
			if (!c->has_public) {
				set_err(err, errsize,
					"6to4-derived v6 but no public_v4 to rebuild");
				return -EINVAL;
			}
			ip6[0] = 0x20;
			ip6[1] = 0x02;
			memcpy(ip6 + 2, &((struct sockaddr_in *)&c->pub.ss)->sin_addr, 4);
			p = rd_bytes(&r, 10);
			if (p == NULL)
				goto truncated;
			memcpy(ip6 + 6, p, 10);
		} else {
			p = rd_bytes(&r, 16);
			if (p == NULL)
				goto truncated;
			memcpy(ip6, p, 16);
		}
		make_v6(&c->v6addr, ip6, port);
		c->has_v6 = true;
	}
	if ((b0 & P_SEC) != 0) {
		const uint8_t *p = rd_bytes(&r, JOINCODE_SECRET_LEN);

		if (p == NULL)
			goto truncated;
		memcpy(c->secret, p, JOINCODE_SECRET_LEN);
		c->has_secret = true;
	}
	/* The tail, told apart by its length alone: 8, 14 or 20 bytes end
	 * with a SteamID (0 = none); then 6 or 12 are one or two VPN
	 * candidates. Any other length is ignored (a newer writer). */
	tail = r.left;
	if (tail == 8 || tail == 14 || tail == 20) {
		const uint8_t *p = r.p + tail - 8;

		c->steam = (uint64_t)p[0] << 56 | (uint64_t)p[1] << 48 | (uint64_t)p[2] << 40 |
			   (uint64_t)p[3] << 32 | (uint64_t)p[4] << 24 | (uint64_t)p[5] << 16 |
			   (uint64_t)p[6] << 8 | p[7];
		tail -= 8;
	}
	if (tail == 6 || tail == 12) {
		c->has_vpn = take_v4(&r, &c->vpn);
		if (tail == 12)
			c->has_vpn2 = take_v4(&r, &c->vpn2);
	}
	c->v6 = c->has_v6;
	return 0;
truncated:
	set_err(err, errsize, "truncated code");
	return -EINVAL;
}

/* Base32 of the stripped text into blob; *len the byte count. */
static int text_to_blob(const char *text, uint8_t *blob, size_t cap, size_t *len, char *err,
			size_t errsize)
{
	const char *s;
	size_t n;
	int ret;

	strip(text, &s, &n);
	if (n > JOINCODE_MAX_TEXT) {
		set_err(err, errsize, "code too long");
		return -EMSGSIZE;
	}
	/* XXX: Python upper-cases with Unicode rules first ("ß" -> "SS"), so
	 * a few non-ASCII letters that become ASCII there are refused here. */
	ret = base32_decode(s, n, blob, cap);
	if (ret < 0) {
		set_err(err, errsize, "not valid base32: %s", base32_strerror(ret));
		return -EINVAL;
	}
	*len = (size_t)ret;
	return 0;
}

int joincode_decode(const char *text, const char *password, long long now, struct joincode *c,
		    char *err, size_t errsize)
{
	uint8_t blob[BLOB_MAX], key[LOCK_KEY], tag[LOCK_TAG];
	size_t len;
	uint64_t sid;
	int ret;

	memset(c, 0, sizeof(*c));
	if (err != NULL && errsize > 0)
		err[0] = '\0';
	if (joincode_steam_id(text, &sid)) {
		c->steam_only = true;
		c->steam = sid;
		c->ts = (uint32_t)now;
		return 0;
	}
	ret = text_to_blob(text, blob, sizeof(blob), &len, err, errsize);
	if (ret < 0)
		return ret;
	if (len < 5) {
		set_err(err, errsize, "code too short");
		return -EINVAL;
	}
	if (blob[0] == LOCK_MAGIC) {
		size_t clen;

		if (len < 1 + 4 + LOCK_TAG) {
			set_err(err, errsize, "locked code too short");
			return -EINVAL;
		}
		if (password == NULL || password[0] == '\0') {
			set_err(err, errsize, "this code is locked -- enter the lobby password");
			return -ENOKEY;
		}
		clen = len - 5 - LOCK_TAG;
		ret = lock_key(password,
			       (uint32_t)blob[1] << 24 | (uint32_t)blob[2] << 16 |
				       (uint32_t)blob[3] << 8 | blob[4],
			       key);
		if (ret == 0)
			ret = lock_tag(key, blob + 1, blob + 5, clen, tag);
		if (ret < 0) {
			set_err(err, errsize, "OpenSSL failed to unlock the code");
			goto out;
		}
		if (sodium_memcmp(tag, blob + 5 + clen, LOCK_TAG) != 0) {
			set_err(err, errsize, "wrong password for this code");
			ret = -EACCES;
			goto out;
		}
		ret = lock_xor(key, blob + 5, clen);
		if (ret < 0) {
			set_err(err, errsize, "OpenSSL failed to unlock the code");
			goto out;
		}
		/* The body is b0 || fields: put b0 back in front of ts. An
		 * empty body (a 21-byte code with a valid tag) has no b0;
		 * netpunch fails on it with an IndexError. */
		if (clen == 0) {
			set_err(err, errsize, "truncated code");
			ret = -EINVAL;
			goto out;
		}
		blob[0] = blob[5];
		memmove(blob + 5, blob + 6, clen - 1);
		len = 5 + clen - 1;
		c->locked = true;
	}
	ret = parse_plain(blob, len, c, err, errsize);
	if (ret == 0) {
		c->age = now - (long long)c->ts;
		c->stale = c->age > JOINCODE_TTL;
	}
out:
	sodium_memzero(key, sizeof(key));
	sodium_memzero(blob, sizeof(blob));
	if (ret < 0)
		memset(c, 0, sizeof(*c));
	return ret;
}

bool joincode_is_locked(const char *text)
{
	uint8_t blob[BLOB_MAX];
	size_t len;
	uint64_t sid;

	if (joincode_steam_id(text, &sid))
		return false;
	if (text_to_blob(text, blob, sizeof(blob), &len, NULL, 0) < 0)
		return false;
	return len >= 5 && blob[0] == LOCK_MAGIC;
}

int joincode_targets_for(const struct joincode *c, const struct addr *my_public, unsigned mine,
			 struct addr *out, int max)
{
	bool same_nat = false, v6 = c->has_v6 && (mine & JOINCODE_FAM_V6) != 0;
	int n = 0;

	if (v6 && (mine & JOINCODE_FAM_V4) == 0 && n < max)
		out[n++] = c->v6addr;
	/* Same NAT: our public IP is the peer's (ports aside) and the peer
	 * has a LAN address: dial LAN only, never the hairpin. */
	if (my_public != NULL && c->has_public && c->has_lan)
		same_nat = addr_same_ip(my_public, &c->pub);
	if (c->has_vpn && n < max)
		out[n++] = c->vpn;
	if (c->has_vpn2 && n < max)
		out[n++] = c->vpn2;
	if (c->has_lan && n < max)
		out[n++] = c->lan;
	if (c->has_public && !same_nat && n < max)
		out[n++] = c->pub;
	if (v6 && (mine & JOINCODE_FAM_V4) != 0 && n < max)
		out[n++] = c->v6addr;
	return n;
}

int joincode_targets(const struct joincode *c, const struct addr *my_public, struct addr *out,
		     int max)
{
	return joincode_targets_for(c, my_public, JOINCODE_FAM_V4, out, max);
}
