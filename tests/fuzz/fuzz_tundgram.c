/*
 * Fuzz target for the tunnel's datagram codec (relay/relay_tundgram): what
 * anyone can send to the relay's UDP tunnel port, and the relay's answers
 * the agent reads.
 *
 * Invariants checked:
 * - peek accepts only a known type at a sound length; open never accepts
 *   what peek refused, and never accepts a forgery under a key the input
 *   could not know (a fixed random key here);
 * - the replay window moves only for a datagram that opened;
 * - a datagram sealed from the input's payload opens to the same bytes
 *   exactly once;
 * - the player's address prefix (DATA_PEER) decodes only to a sound
 *   address within the input, which encodes back to the same bytes.
 */
#include <errno.h>
#include <string.h>

#include "addr.h"
#include "fuzz.h"
#include "relay_tundgram.h"

static uint8_t out[TUNDGRAM_PAYLOAD + 64], sealed[TUNDGRAM_PAYLOAD + TUNDGRAM_OVER];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t key[TUNDGRAM_KEY];
	static int ready;
	struct tundgram_hdr h;
	struct tundgram_window w = {0}, w0;
	int r, n;

	if (!ready) {
		if (sodium_init() < 0)
			abort();
		randombytes_buf(key, sizeof(key));
		ready = 1;
	}
	r = tundgram_peek(data, size, &h);
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	if (r == 0)
		FUZZ_CHECK(h.type >= TUNDGRAM_DATA && h.type <= TUNDGRAM_DATA_PEER &&
			   size >= TUNDGRAM_OVER);
	{
		struct addr a;
		uint8_t back[TUNDGRAM_PEER_MAX];
		int k = tundgram_peer_decode(data, size, &a);

		FUZZ_CHECK(k == -EBADMSG || (k > 0 && (size_t)k <= size));
		if (k > 0) {
			FUZZ_CHECK(addr_port(&a) != 0);
			FUZZ_CHECK(tundgram_peer_encode(back, &a) == k &&
				   memcmp(back, data, (size_t)k) == 0);
		}
	}
	w0 = w;
	n = tundgram_open(data, size, key, &w, out, sizeof(out));
	FUZZ_CHECK(n == -EBADMSG || n == -EALREADY);
	FUZZ_CHECK(w.top == w0.top && w.bits == w0.bits);

	/* the input as a payload: sealed, it opens once, then is a replay */
	if (size <= TUNDGRAM_PAYLOAD) {
		struct tundgram_hdr s = {.type = TUNDGRAM_DATA,
					 .udp_id = 5,
					 .sid = 9,
					 .ctr = 1 + (size > 0 ? data[0] : 0)};

		n = tundgram_seal(sealed, sizeof(sealed), &s, key, data, size);
		FUZZ_CHECK(n == (int)(size + TUNDGRAM_OVER));
		r = tundgram_open(sealed, (size_t)n, key, &w, out, sizeof(out));
		FUZZ_CHECK(r == (int)size && (size == 0 || memcmp(out, data, size) == 0));
		FUZZ_CHECK(tundgram_open(sealed, (size_t)n, key, &w, out, sizeof(out)) ==
			   -EALREADY);
	}
	return 0;
}
