/*
 * Fuzz target for common/seal (open/unsign under a fixed key).
 *
 * The first byte picks one of two modes.
 *
 * Even: the rest is a received E or S payload, opened and unsigned by a
 * fresh receiver. Invariants: results are a length, -EBADMSG or
 * -EALREADY; a frame that opens re-seals byte for byte (a sender with the
 * same key, set to the frame's salt and counter - 1, seals the plaintext
 * to the same frame), and does not open a second time. Random bytes
 * practically never carry a valid tag, so the seeds hold real frames and
 * the mutations test everything around them.
 *
 * Odd: the rest is a script of 8-byte steps {salt 0..3, counter u32be,
 * flags, plaintext length, tamper bit} run through a sender and ONE
 * receiver, checked against a model of seal.py's replay window (first
 * frame of a salt opens it; above the highest moves it; otherwise back =
 * high - ctr, refused when >= 1024 or seen; one window per salt shared by
 * sealed and signed frames). A tampered frame must fail as -EBADMSG and
 * leave the window alone; an intact one must open exactly as the model
 * says, to its plaintext.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "seal.h"

#define MAX_STEPS (512)

static const uint8_t key[SEAL_KEY_LEN] = {0x0d, 0xda, 0xe2, 0x96, 0x8a, 0x48, 0x80, 0x74,
					  0xe4, 0x23, 0x3f, 0x3f, 0x2b, 0x67, 0x7d, 0xfc,
					  0x10, 0x07, 0x03, 0x16, 0x0d, 0xb0, 0x3e, 0x14,
					  0x3b, 0x51, 0x51, 0xbc, 0xf4, 0x15, 0xe2, 0x04};

struct model {
	bool open;
	uint32_t high;
	uint32_t seen[MAX_STEPS];
	size_t nseen;
};

static bool model_accept(struct model *m, uint32_t ctr)
{
	if (!m->open) {
		m->open = true;
		m->high = ctr;
	} else if (ctr > m->high) {
		m->high = ctr;
	} else {
		if (m->high - ctr >= SEAL_WINDOW)
			return false;
		for (size_t i = 0; i < m->nseen; i++) {
			if (m->seen[i] == ctr)
				return false;
		}
	}
	if (m->nseen < MAX_STEPS)
		m->seen[m->nseen++] = ctr;
	return true;
}

static uint32_t nonce_ctr(const uint8_t *f)
{
	return (uint32_t)f[4] << 24 | (uint32_t)f[5] << 16 | (uint32_t)f[6] << 8 | f[7];
}

static void frame_mode(const uint8_t *f, size_t n)
{
	static uint8_t out[4096], again[4096 + SEAL_OVERHEAD];
	struct sealer *rx = seal_new(key), *tx = seal_new(key);
	const uint8_t *pt;
	int r;

	FUZZ_CHECK(rx != NULL && tx != NULL);
	r = seal_open(rx, f, n, out, sizeof(out));
	FUZZ_CHECK(r >= 0 || r == -EBADMSG || r == -ENOSPC);
	if (r >= 0) {
		FUZZ_CHECK((size_t)r == n - SEAL_OVERHEAD);
		seal_set_state(tx, f, nonce_ctr(f) - 1, f, 0);
		/* Counter 0 cannot be produced by a sender (pre-increment). */
		if (nonce_ctr(f) != 0) {
			FUZZ_CHECK(seal_seal(tx, out, (size_t)r, again, sizeof(again)) == (int)n);
			FUZZ_CHECK(memcmp(again, f, n) == 0);
		}
		FUZZ_CHECK(seal_open(rx, f, n, out, sizeof(out)) == -EALREADY);
	}
	r = seal_unsign(rx, f, n, &pt);
	FUZZ_CHECK(r >= 0 || r == -EBADMSG || r == -EALREADY);
	if (r >= 0) {
		FUZZ_CHECK((size_t)r == n - SEAL_OVERHEAD && pt == f + SEAL_NONCE_LEN);
		if (nonce_ctr(f) != 0) {
			seal_set_state(tx, f, 0, f, nonce_ctr(f) - 1);
			FUZZ_CHECK(seal_sign(tx, pt, (size_t)r, again, sizeof(again)) == (int)n);
			FUZZ_CHECK(memcmp(again, f, n) == 0);
		}
		FUZZ_CHECK(seal_unsign(rx, f, n, &pt) == -EALREADY);
	}
	seal_free(rx);
	seal_free(tx);
}

static void script_mode(const uint8_t *s, size_t n)
{
	static const uint8_t salts[4][4] = {{0x5a, 0x17, 0xc0, 0xde},
					    {0xb0, 0xb0, 0xca, 0xfe},
					    {0, 0, 0, 0},
					    {0xff, 0xff, 0xff, 0xff}};
	static struct model model[4];
	struct sealer *rx = seal_new(key), *tx = seal_new(key);
	uint8_t pt[64], f[64 + SEAL_OVERHEAD], out[64];

	FUZZ_CHECK(rx != NULL && tx != NULL);
	memset(model, 0, sizeof(model));
	for (size_t i = 0; i + 8 <= n && i / 8 < MAX_STEPS; i += 8) {
		unsigned salt = s[i] % 4;
		uint32_t ctr = (uint32_t)s[i + 1] << 24 | (uint32_t)s[i + 2] << 16 |
			       (uint32_t)s[i + 3] << 8 | s[i + 4];
		bool sign = (s[i + 5] & 1) != 0, tamper = (s[i + 5] & 2) != 0;
		size_t len = s[i + 6] % sizeof(pt), fl = len + SEAL_OVERHEAD;
		const uint8_t *p;
		int r;

		if (ctr == 0)
			ctr = 1;
		for (size_t k = 0; k < len; k++)
			pt[k] = (uint8_t)(s[i + 7] + k);
		seal_set_state(tx, salts[salt], ctr - 1, salts[salt], ctr - 1);
		r = sign ? seal_sign(tx, pt, len, f, sizeof(f))
			 : seal_seal(tx, pt, len, f, sizeof(f));
		FUZZ_CHECK(r == (int)fl);
		FUZZ_CHECK(memcmp(f, salts[salt], 4) == 0 && nonce_ctr(f) == ctr);
		if (tamper)
			f[s[i + 7] % fl] ^= (uint8_t)(1u << (s[i + 5] >> 5));
		r = sign ? seal_unsign(rx, f, fl, &p) : seal_open(rx, f, fl, out, sizeof(out));
		if (tamper) {
			FUZZ_CHECK(r == -EBADMSG);
			continue;
		}
		if (model_accept(&model[salt], ctr)) {
			FUZZ_CHECK(r == (int)len);
			FUZZ_CHECK(memcmp(sign ? p : out, pt, len) == 0);
		} else {
			FUZZ_CHECK(r == -EALREADY);
		}
	}
	seal_free(rx);
	seal_free(tx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if ((data[0] & 1) == 0)
		frame_mode(data + 1, size - 1);
	else
		script_mode(data + 1, size - 1);
	return 0;
}
