/*
 * Fuzz target for the fragment reassembler (common/frame).
 *
 * The input is a script of steps, each
 *   sender (1 byte, 4 senders), time step (1 byte, x 100 ms),
 *   id (1 byte), index (1 byte), count (1 byte), slice length (1 byte),
 *   slice bytes
 * with a time step of 255 meaning "run expiry" instead of a fragment. Every
 * step goes to frag_reasm_feed and to a model of netpunch's _Reassembler
 * (lobby.py: pending[(addr, id)] = [count, {index: bytes}, last]; count 0
 * or index >= count dropped; a count differing from the first ignored; a
 * new message past 64 per sender drops the sender's least recently fed;
 * expire drops what is idle for more than 15 s).
 *
 * Invariants checked: every step returns what the model returns (nothing,
 * or the same complete message, byte for byte); the number of partial
 * messages matches the model's; the bytes charged stay under
 * FRAG_MAX_BYTES. A single fragment fed raw (the whole input) must not
 * crash either.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "fuzz.h"

#define SENDERS     (4)
#define MAX_PENDING (SENDERS * FRAG_MAX_PARTIAL)

struct mslice {
	bool set;
	uint8_t len;
	uint8_t b[255];
};

struct mmsg {
	bool used;
	unsigned sender;
	uint32_t id, count;
	long long last;
	unsigned long seq; /* insertion order, for min() ties */
	struct mslice *slices;
};

static struct mmsg pend[MAX_PENDING];
static unsigned long seqno;

static void m_drop(struct mmsg *m)
{
	free(m->slices);
	memset(m, 0, sizeof(*m));
}

static size_t m_pending(void)
{
	size_t n = 0;

	for (size_t i = 0; i < MAX_PENDING; i++)
		n += pend[i].used;
	return n;
}

/* Returns 1 with the message in out/outlen, 0 otherwise. */
static int m_feed(unsigned sender, uint32_t id, uint32_t index, uint32_t count, const uint8_t *b,
		  uint8_t len, long long now, uint8_t *out, size_t *outlen)
{
	struct mmsg *m = NULL, *free_slot = NULL;
	size_t mine = 0;

	if (count == 0 || index >= count)
		return 0;
	for (size_t i = 0; i < MAX_PENDING; i++) {
		if (!pend[i].used) {
			if (free_slot == NULL)
				free_slot = &pend[i];
			continue;
		}
		if (pend[i].sender == sender) {
			mine++;
			if (pend[i].id == id)
				m = &pend[i];
		}
	}
	if (m == NULL) {
		if (mine >= FRAG_MAX_PARTIAL) {
			struct mmsg *old = NULL;

			for (size_t i = 0; i < MAX_PENDING; i++) {
				struct mmsg *q = &pend[i];

				if (!q->used || q->sender != sender)
					continue;
				if (old == NULL || q->last < old->last ||
				    (q->last == old->last && q->seq < old->seq))
					old = q;
			}
			m_drop(old);
			if (free_slot == NULL)
				free_slot = old;
		}
		FUZZ_CHECK(free_slot != NULL);
		m = free_slot;
		m->used = true;
		m->sender = sender;
		m->id = id;
		m->count = count;
		m->seq = seqno++;
		m->slices = calloc(count, sizeof(*m->slices));
		FUZZ_CHECK(m->slices != NULL);
	} else if (m->count != count) {
		return 0;
	}
	m->slices[index].set = true;
	m->slices[index].len = len;
	memcpy(m->slices[index].b, b, len);
	m->last = now;
	for (uint32_t i = 0; i < m->count; i++) {
		if (!m->slices[i].set)
			return 0;
	}
	*outlen = 0;
	for (uint32_t i = 0; i < m->count; i++) {
		memcpy(out + *outlen, m->slices[i].b, m->slices[i].len);
		*outlen += m->slices[i].len;
	}
	m_drop(m);
	return 1;
}

static void m_expire(long long now)
{
	for (size_t i = 0; i < MAX_PENDING; i++) {
		if (pend[i].used && now - pend[i].last > FRAG_EXPIRE_MS)
			m_drop(&pend[i]);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t want[256 * 255];
	struct frag_reasm *r = frag_reasm_new(SENDERS);
	struct addr senders[SENDERS];
	long long now = 0;
	size_t i = 0;
	uint8_t *msg = NULL;
	size_t ml = 0;
	int ret;

	FUZZ_CHECK(r != NULL);
	for (unsigned k = 0; k < SENDERS; k++) {
		struct sockaddr_in *sin = (struct sockaddr_in *)&senders[k].ss;

		memset(&senders[k], 0, sizeof(senders[k]));
		sin->sin_family = AF_INET;
		sin->sin_addr.s_addr = htonl(0xc0000200u + k);
		sin->sin_port = htons(29471);
		senders[k].len = sizeof(*sin);
	}
	memset(pend, 0, sizeof(pend));
	seqno = 0;

	/* The whole input as one fragment. */
	ret = frag_reasm_feed(r, &senders[0], data, size, 0, &msg, &ml);
	FUZZ_CHECK(ret == 0 || ret == 1 || ret == -EBADMSG || ret == -EMSGSIZE);
	if (ret == 1)
		free(msg);
	frag_reasm_forget(r, &senders[0]);
	FUZZ_CHECK(frag_reasm_pending(r) == 0 && frag_reasm_bytes(r) == 0);

	while (i + 6 <= size) {
		unsigned sender = data[i] % SENDERS;
		uint8_t step = data[i + 1];
		uint32_t id = data[i + 2], index = data[i + 3] % 8, count = data[i + 4] % 8;
		uint8_t len = data[i + 5], f[FRAG_HDR + 255];
		size_t wl = 0;
		int mret;

		i += 6;
		if (step == 255) {
			frag_reasm_expire(r, now);
			m_expire(now);
			FUZZ_CHECK(frag_reasm_pending(r) == m_pending());
			continue;
		}
		now += (long long)step * 100;
		if (len > size - i)
			len = (uint8_t)(size - i);
		f[0] = 'F';
		for (int k = 0; k < 4; k++) {
			f[1 + k] = (uint8_t)(id >> (24 - 8 * k));
			f[5 + k] = (uint8_t)(index >> (24 - 8 * k));
			f[9 + k] = (uint8_t)(count >> (24 - 8 * k));
		}
		memcpy(f + FRAG_HDR, data + i, len);
		i += len;
		ret = frag_reasm_feed(r, &senders[sender], f, FRAG_HDR + len, now, &msg, &ml);
		mret = m_feed(sender, id, index, count, f + FRAG_HDR, len, now, want, &wl);
		if (count == 0 || index >= count)
			FUZZ_CHECK(ret == -EBADMSG);
		else
			FUZZ_CHECK(ret == mret);
		if (ret == 1) {
			FUZZ_CHECK(ml == wl && memcmp(msg, want, wl) == 0);
			free(msg);
		}
		FUZZ_CHECK(frag_reasm_pending(r) == m_pending());
		FUZZ_CHECK(frag_reasm_bytes(r) <= FRAG_MAX_BYTES);
	}
	frag_reasm_free(r);
	for (size_t k = 0; k < MAX_PENDING; k++)
		m_drop(&pend[k]);
	return 0;
}
