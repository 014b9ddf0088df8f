/*
 * The netpunch seal (netpunch-wire.md §3).
 *
 * Speed: the keystream is one SHA-256 of 44 bytes per 32 bytes of payload,
 * so the cost per call of the hash API decides the throughput. Measured on
 * the CI machine (OpenSSL 3.0, SHA-NI) per 44-byte hash: SHA256() 550 ns,
 * EVP_DigestInit_ex2/Update/Final on a reused context 140 ns, a copied
 * EVP context 128 ns, SHA256_Init/Update/Final 57 ns. A 1,200-byte frame
 * takes 38 of them plus the HMAC, so EVP caps a sealer near 200 MB/s (this
 * file measures about 400); the target is 300. So the hot path uses
 * OpenSSL's SHA256_CTX functions (deprecated in 3.0 in favour of EVP, still
 * shipped in every 3.x) on stack contexts copied from per-key midstates:
 * the enc_key prefix of every keystream block, and HMAC's inner and outer
 * pads. Everything else in the file follows from §3.
 */
#define OPENSSL_SUPPRESS_DEPRECATED
#include "seal.h"

#include <errno.h>
#include <limits.h>
#include <openssl/sha.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "htab.h"

#define WORDS (SEAL_WINDOW / 64)

static const char seal_prefix[] = "tpf2mp-seal-v1|";
static const char rv_prefix[] = "tpf2mp-rendezvous-v1|";
static const char sign_domain[] = "sign";

/* A replay window: the highest counter seen and a ring of SEAL_WINDOW
 * bits, bit (c % SEAL_WINDOW) standing for counter c in (high - 1024, high]. */
struct window {
	uint32_t high;
	uint64_t bits[WORDS];
};

struct sealer {
	SHA256_CTX ks_base; /* enc_key absorbed: a keystream block's prefix */
	SHA256_CTX mac_in;  /* HMAC(mac_key): ipad block absorbed */
	SHA256_CTX mac_out; /* opad block absorbed */
	SHA256_CTX sign_in; /* mac_in with "sign" absorbed */
	uint8_t salt[4], bulk_salt[4];
	uint32_t ctr, bulk_ctr;
	struct htab *windows; /* salt -> struct window, LRU */
};

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

void seal_derive_key(const uint8_t secret[static SEAL_SECRET_LEN], const char *password,
		     uint8_t key[static SEAL_KEY_LEN])
{
	SHA256_CTX c;

	SHA256_Init(&c);
	SHA256_Update(&c, seal_prefix, sizeof(seal_prefix) - 1);
	SHA256_Update(&c, secret, SEAL_SECRET_LEN);
	SHA256_Update(&c, "|", 1);
	if (password != NULL)
		SHA256_Update(&c, password, strlen(password));
	SHA256_Final(key, &c);
	sodium_memzero(&c, sizeof(c));
}

/* SHA256(key || suffix), for the sub-keys and the knock key. */
static void sub_key(const uint8_t key[static SEAL_KEY_LEN], const char *suffix,
		    uint8_t out[static SEAL_KEY_LEN])
{
	SHA256_CTX c;

	SHA256_Init(&c);
	SHA256_Update(&c, key, SEAL_KEY_LEN);
	SHA256_Update(&c, suffix, strlen(suffix));
	SHA256_Final(out, &c);
	sodium_memzero(&c, sizeof(c));
}

void seal_knock_key(const uint8_t secret[static SEAL_SECRET_LEN], const char *password,
		    uint8_t key[static SEAL_KEY_LEN])
{
	uint8_t k[SEAL_KEY_LEN];

	seal_derive_key(secret, password, k);
	sub_key(k, "|rendezvous", key);
	sodium_memzero(k, sizeof(k));
}

void seal_knock_tag(const uint8_t secret[static SEAL_SECRET_LEN], char tag[static 25])
{
	static const char hex[] = "0123456789abcdef";
	uint8_t d[SHA256_DIGEST_LENGTH];
	SHA256_CTX c;

	SHA256_Init(&c);
	SHA256_Update(&c, rv_prefix, sizeof(rv_prefix) - 1);
	SHA256_Update(&c, secret, SEAL_SECRET_LEN);
	SHA256_Final(d, &c);
	for (size_t i = 0; i < 12; i++) {
		tag[2 * i] = hex[d[i] >> 4];
		tag[2 * i + 1] = hex[d[i] & 15];
	}
	tag[24] = '\0';
}

struct sealer *seal_new(const uint8_t key[static SEAL_KEY_LEN])
{
	uint8_t enc[SEAL_KEY_LEN], mac[SEAL_KEY_LEN], pad[64];
	struct sealer *s;

	if (sodium_init() < 0) {
		errno = EIO;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return NULL;
	s->windows = htab_new(SEAL_MAX_SALTS, 4, sizeof(struct window));
	if (s->windows == NULL) {
		int e = errno;

		free(s);
		errno = e;
		return NULL;
	}
	sub_key(key, "|enc", enc);
	sub_key(key, "|mac", mac);
	SHA256_Init(&s->ks_base);
	SHA256_Update(&s->ks_base, enc, sizeof(enc));
	/* HMAC (RFC 2104) with a 32-byte key: key zero-padded to the block,
	 * XOR 0x36 inside, 0x5c outside. */
	memset(pad, 0x36, sizeof(pad));
	for (size_t i = 0; i < sizeof(mac); i++)
		pad[i] ^= mac[i];
	SHA256_Init(&s->mac_in);
	SHA256_Update(&s->mac_in, pad, sizeof(pad));
	memset(pad, 0x5c, sizeof(pad));
	for (size_t i = 0; i < sizeof(mac); i++)
		pad[i] ^= mac[i];
	SHA256_Init(&s->mac_out);
	SHA256_Update(&s->mac_out, pad, sizeof(pad));
	s->sign_in = s->mac_in;
	SHA256_Update(&s->sign_in, sign_domain, sizeof(sign_domain) - 1);
	sodium_memzero(enc, sizeof(enc));
	sodium_memzero(mac, sizeof(mac));
	sodium_memzero(pad, sizeof(pad));
	randombytes_buf(s->salt, sizeof(s->salt));
	randombytes_buf(s->bulk_salt, sizeof(s->bulk_salt));
	return s;
}

void seal_set_state(struct sealer *s, const uint8_t salt[4], uint32_t ctr,
		    const uint8_t bulk_salt[4], uint32_t bulk_ctr)
{
	memcpy(s->salt, salt, 4);
	s->ctr = ctr;
	memcpy(s->bulk_salt, bulk_salt, 4);
	s->bulk_ctr = bulk_ctr;
}

void seal_free(struct sealer *s)
{
	if (s == NULL)
		return;
	htab_free(s->windows);
	sodium_memzero(s, sizeof(*s));
	free(s);
}

/* out = in XOR SHA256(enc_key || nonce || u32be i) blocks; in == out is
 * fine. */
static void keystream_xor(const struct sealer *s, const uint8_t nonce[static SEAL_NONCE_LEN],
			  const uint8_t *in, uint8_t *out, size_t len)
{
	uint8_t blk[SEAL_NONCE_LEN + 4], ks[SHA256_DIGEST_LENGTH];
	uint32_t i = 0;

	memcpy(blk, nonce, SEAL_NONCE_LEN);
	for (size_t off = 0; off < len; off += sizeof(ks), i++) {
		size_t n = len - off < sizeof(ks) ? len - off : sizeof(ks);
		SHA256_CTX c = s->ks_base;

		put_be32(blk + SEAL_NONCE_LEN, i);
		SHA256_Update(&c, blk, sizeof(blk));
		SHA256_Final(ks, &c);
		for (size_t j = 0; j < n; j++)
			out[off + j] = in[off + j] ^ ks[j];
	}
}

/* HMAC-SHA256(mac_key, [domain] || nonce || body)[:16]; inner is mac_in
 * or sign_in. */
static void mac_tag(const struct sealer *s, const SHA256_CTX *inner,
		    const uint8_t nonce[static SEAL_NONCE_LEN], const uint8_t *body, size_t len,
		    uint8_t tag[static SEAL_TAG_LEN])
{
	uint8_t d[SHA256_DIGEST_LENGTH];
	SHA256_CTX c = *inner;

	SHA256_Update(&c, nonce, SEAL_NONCE_LEN);
	SHA256_Update(&c, body, len);
	SHA256_Final(d, &c);
	c = s->mac_out;
	SHA256_Update(&c, d, sizeof(d));
	SHA256_Final(d, &c);
	memcpy(tag, d, SEAL_TAG_LEN);
}

/* Counters are pre-incremented (the first frame uses 1); past 0xFFFFFFFF
 * a fresh salt is drawn and the counter restarts at 1, so a nonce never
 * repeats under one salt. */
static void next_nonce(uint8_t salt[static 4], uint32_t *ctr, uint8_t nonce[static 8])
{
	if (*ctr == UINT32_MAX) {
		randombytes_buf(salt, 4);
		*ctr = 1;
	} else {
		(*ctr)++;
	}
	memcpy(nonce, salt, 4);
	put_be32(nonce + 4, *ctr);
}

static bool bit_get(const struct window *w, uint32_t c)
{
	uint32_t b = c % SEAL_WINDOW;

	return (w->bits[b / 64] >> (b % 64) & 1) != 0;
}

static void bit_set(struct window *w, uint32_t c)
{
	uint32_t b = c % SEAL_WINDOW;

	w->bits[b / 64] |= (uint64_t)1 << (b % 64);
}

/*
 * seal.py _accept_nonce: the first frame of a salt opens its window; a
 * counter above the highest moves the window up; otherwise back = high -
 * ctr, refused when back >= 1024 or already seen. Windows are kept for
 * SEAL_MAX_SALTS salts, the least recently used forgotten first.
 * XXX: a forgotten salt's old frames would open again (netpunch never
 * forgets); only holders of the key can mint salts, and 512 live senders
 * is far above a lobby's.
 */
static int accept_nonce(struct sealer *s, const uint8_t nonce[static SEAL_NONCE_LEN])
{
	uint32_t ctr = (uint32_t)nonce[4] << 24 | (uint32_t)nonce[5] << 16 |
		       (uint32_t)nonce[6] << 8 | nonce[7];
	struct window *w = htab_get(s->windows, nonce);

	if (w == NULL) {
		w = htab_insert(s->windows, nonce, true, NULL);
		if (w == NULL)
			return -ENOMEM;
		w->high = ctr;
		bit_set(w, ctr);
		return 0;
	}
	if (ctr > w->high) {
		uint64_t shift = (uint64_t)ctr - w->high;

		if (shift >= SEAL_WINDOW) {
			memset(w->bits, 0, sizeof(w->bits));
		} else {
			/* The slots of high+1 .. ctr held counters that
			 * just fell out of the window. */
			for (uint64_t c = (uint64_t)w->high + 1; c <= ctr; c++) {
				uint32_t b = (uint32_t)(c % SEAL_WINDOW);

				if (b % 64 == 0 && ctr - c >= 63) {
					w->bits[b / 64] = 0;
					c += 63;
				} else {
					w->bits[b / 64] &= ~((uint64_t)1 << (b % 64));
				}
			}
		}
		w->high = ctr;
		bit_set(w, ctr);
		htab_touch(s->windows, w);
		return 0;
	}
	if (w->high - ctr >= SEAL_WINDOW || bit_get(w, ctr))
		return -EALREADY;
	bit_set(w, ctr);
	htab_touch(s->windows, w);
	return 0;
}

int seal_seal(struct sealer *s, const uint8_t *pt, size_t len, uint8_t *out, size_t cap)
{
	if (len > (size_t)INT_MAX - SEAL_OVERHEAD)
		return -EMSGSIZE;
	if (cap < len + SEAL_OVERHEAD)
		return -ENOSPC;
	next_nonce(s->salt, &s->ctr, out);
	keystream_xor(s, out, pt, out + SEAL_NONCE_LEN, len);
	mac_tag(s, &s->mac_in, out, out + SEAL_NONCE_LEN, len, out + SEAL_NONCE_LEN + len);
	return (int)(len + SEAL_OVERHEAD);
}

int seal_open(struct sealer *s, const uint8_t *in, size_t len, uint8_t *out, size_t cap)
{
	uint8_t tag[SEAL_TAG_LEN];
	size_t n;
	int ret;

	if (len < SEAL_MIN_FRAME)
		return -EBADMSG;
	if (len > INT_MAX)
		return -EMSGSIZE;
	n = len - SEAL_OVERHEAD;
	if (cap < n)
		return -ENOSPC;
	/* Encrypt-then-MAC: the tag first, in constant time, then the
	 * window, and only then the keystream. */
	mac_tag(s, &s->mac_in, in, in + SEAL_NONCE_LEN, n, tag);
	if (sodium_memcmp(tag, in + SEAL_NONCE_LEN + n, SEAL_TAG_LEN) != 0)
		return -EBADMSG;
	ret = accept_nonce(s, in);
	if (ret < 0)
		return ret;
	keystream_xor(s, in, in + SEAL_NONCE_LEN, out, n);
	return (int)n;
}

int seal_sign(struct sealer *s, const uint8_t *pt, size_t len, uint8_t *out, size_t cap)
{
	if (len > (size_t)INT_MAX - SEAL_OVERHEAD)
		return -EMSGSIZE;
	if (cap < len + SEAL_OVERHEAD)
		return -ENOSPC;
	next_nonce(s->bulk_salt, &s->bulk_ctr, out);
	if (len > 0)
		memmove(out + SEAL_NONCE_LEN, pt, len);
	mac_tag(s, &s->sign_in, out, out + SEAL_NONCE_LEN, len, out + SEAL_NONCE_LEN + len);
	return (int)(len + SEAL_OVERHEAD);
}

int seal_unsign(struct sealer *s, const uint8_t *in, size_t len, const uint8_t **pt)
{
	uint8_t tag[SEAL_TAG_LEN];
	size_t n;
	int ret;

	if (len < SEAL_MIN_FRAME)
		return -EBADMSG;
	if (len > INT_MAX)
		return -EMSGSIZE;
	n = len - SEAL_OVERHEAD;
	mac_tag(s, &s->sign_in, in, in + SEAL_NONCE_LEN, n, tag);
	if (sodium_memcmp(tag, in + SEAL_NONCE_LEN + n, SEAL_TAG_LEN) != 0)
		return -EBADMSG;
	ret = accept_nonce(s, in);
	if (ret < 0)
		return ret;
	*pt = in + SEAL_NONCE_LEN;
	return (int)n;
}
