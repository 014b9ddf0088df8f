/*
 * Fuzz target for the data channel's framing (relay_tunpipe's
 * tunsink_deframe): what a peer sends on GET /relay/v1/data.
 *
 * The first byte picks a split size; the rest is fed in pieces of that
 * size, and again in one piece. Invariants checked:
 * - both feedings give the same frames in the same order, or fail alike
 *   (-EBADMSG, the channel dropped), and never a frame of length 0 or
 *   over TUNMSG_WS_MAX;
 * - the partial frame kept between feeds never exceeds one frame.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "relay_tunmsg.h"
#include "relay_tunpipe.h"

struct rec {
	uint8_t buf[1 << 16];
	size_t len;
	unsigned frames;
};

static void on_frame(void *arg, const uint8_t *frame, size_t len)
{
	struct rec *r = arg;

	FUZZ_CHECK(len > 0 && len <= TUNMSG_WS_MAX);
	r->frames++;
	/* a digest of each frame: its length and first and last bytes */
	if (r->len + 6 <= sizeof(r->buf)) {
		r->buf[r->len++] = (uint8_t)(len >> 8);
		r->buf[r->len++] = (uint8_t)len;
		r->buf[r->len++] = frame[0];
		r->buf[r->len++] = frame[len - 1];
		r->buf[r->len++] = frame[len / 2];
		r->buf[r->len++] = 0xaa;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct rec a, b;
	struct strbuf asm1, asm2;
	size_t step;
	int ra = 0, rb;

	if (size < 1)
		return 0;
	step = (size_t)data[0] % 7 + 1;
	data++;
	size--;
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	strbuf_init(&asm1, TUNMSG_WS_MAX + 8);
	strbuf_init(&asm2, TUNMSG_WS_MAX + 8);
	for (size_t off = 0; off < size && ra == 0; off += step) {
		size_t n = size - off < step ? size - off : step;

		ra = tunsink_deframe(&asm1, data + off, n, on_frame, &a);
		FUZZ_CHECK(ra == 0 || ra == -EBADMSG);
		FUZZ_CHECK(asm1.len <= TUNMSG_WS_MAX + 4);
	}
	rb = tunsink_deframe(&asm2, data, size, on_frame, &b);
	FUZZ_CHECK(rb == 0 || rb == -EBADMSG);
	FUZZ_CHECK((ra == 0) == (rb == 0));
	if (ra == 0) {
		FUZZ_CHECK(a.frames == b.frames && a.len == b.len &&
			   memcmp(a.buf, b.buf, a.len) == 0);
		FUZZ_CHECK(asm1.len == asm2.len);
	}
	strbuf_release(&asm1);
	strbuf_release(&asm2);
	return 0;
}
