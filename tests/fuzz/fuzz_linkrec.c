/*
 * The dual TCP link's record stream (common/frame link_rec_next), as the
 * lobby reads it: records one after another until one needs more bytes or
 * is refused. Invariants: a record taken is 2 + its frame, the frame an
 * "NP1:E" of LINK_FRAME_MIN..LINK_FRAME_MAX bytes inside the input, never
 * past its end; rebuilt, it is the same bytes; a refused length is refused
 * from its two bytes alone (any longer input is refused the same way).
 */
#include <errno.h>
#include <string.h>

#include "frame.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t buf[LINK_REC_HDR + LINK_FRAME_MAX];
	size_t off = 0;

	for (;;) {
		const uint8_t *f = NULL;
		size_t flen = 0;
		int n = link_rec_next(data + off, size - off, &f, &flen);

		if (n == 0)
			break;
		if (n < 0) {
			FUZZ_CHECK(n == -EMSGSIZE || n == -EBADMSG);
			if (n == -EMSGSIZE)
				FUZZ_CHECK(link_rec_next(data + off, 2, &f, &flen) == -EMSGSIZE);
			break;
		}
		FUZZ_CHECK((size_t)n == LINK_REC_HDR + flen && (size_t)n <= size - off);
		FUZZ_CHECK(flen >= LINK_FRAME_MIN && flen <= LINK_FRAME_MAX);
		FUZZ_CHECK(f == data + off + LINK_REC_HDR && memcmp(f, "NP1:E", 5) == 0);
		FUZZ_CHECK(link_rec_build(buf, sizeof(buf), f, flen) == n);
		FUZZ_CHECK(memcmp(buf, data + off, (size_t)n) == 0);
		off += (size_t)n;
	}
	return 0;
}
