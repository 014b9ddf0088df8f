/*
 * Fuzz target for common/frame's parsers: an NP1 datagram as it arrives
 * on the game socket, then its payload as the lobby dispatches it (save
 * chunk, mesh envelope), and the relay port's TRLA ack.
 *
 * Invariants checked:
 * - np1_parse accepts exactly the datagrams of at least 5 bytes that start
 *   with "NP1:", and the payload view is the rest of the input;
 * - round trips: np1_build, npf1_build, mesh_env_build and np1_trlb_build
 *   rebuild the very bytes that parsed;
 * - mesh names are NUL-terminated, at most 255 bytes, without NUL inside.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "fuzz.h"

static void payload(const uint8_t *p, size_t n)
{
	uint8_t *buf = malloc(n + 16);
	char to[256], from[256];
	const uint8_t *inner, *d;
	size_t il, dl;
	uint32_t sid, seq;
	int r;

	if (buf == NULL)
		return;
	r = npf1_parse(p, n, &sid, &seq, &d, &dl);
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	FUZZ_CHECK(r == -EBADMSG || (n >= NPF1_HDR && memcmp(p, "NPF1", 4) == 0));
	if (r == 0) {
		FUZZ_CHECK(d == p + NPF1_HDR && dl == n - NPF1_HDR);
		FUZZ_CHECK(npf1_build(buf, n + 16, sid, seq, d, dl) == (int)n);
		FUZZ_CHECK(memcmp(buf, p, n) == 0);
	}
	r = mesh_env_parse(p, n, to, from, &inner, &il);
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	if (r == 0) {
		size_t tl = strnlen(to, 256), fl = strnlen(from, 256);

		FUZZ_CHECK(tl < 256 && fl < 256);
		FUZZ_CHECK(2 + tl + 1 + fl + il == n && inner == p + n - il);
		FUZZ_CHECK(mesh_env_build(buf, n + 16, to, from, inner, il) == (int)n);
		FUZZ_CHECK(memcmp(buf, p, n) == 0);
	}
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = NULL;
	uint8_t type = 0, id[RELAY_ID_LEN], *buf;
	size_t pl = 0;
	int r;

	r = np1_trla_parse(data, size, id);
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	if (r == 0) {
		uint8_t b[TRLB_LEN];

		FUZZ_CHECK(size == TRLA_LEN && memcmp(id, data + 4, RELAY_ID_LEN) == 0);
		FUZZ_CHECK(np1_trlb_build(b, sizeof(b), id, 'J') == TRLB_LEN);
		FUZZ_CHECK(memcmp(b + 4, data + 4, RELAY_ID_LEN) == 0);
	}

	r = np1_parse(data, size, &type, &p, &pl);
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	FUZZ_CHECK((r == 0) == (size >= NP1_HDR && memcmp(data, "NP1:", 4) == 0));
	if (r < 0) {
		/* The payload dispatch also sees raw bytes (fragments and
		 * chunks arrive inside opened E frames). */
		payload(data, size);
		return 0;
	}
	FUZZ_CHECK(p == data + NP1_HDR && pl == size - NP1_HDR && type == data[4]);
	buf = malloc(size);
	if (buf == NULL)
		return 0;
	r = np1_build(buf, size, type, p, pl);
	if (size <= NP1_MAX) {
		FUZZ_CHECK(r == (int)size && memcmp(buf, data, size) == 0);
	} else {
		FUZZ_CHECK(r == -EMSGSIZE);
	}
	free(buf);
	payload(p, pl);
	return 0;
}
