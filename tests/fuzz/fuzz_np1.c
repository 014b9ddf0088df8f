/*
 * Fuzz target for common/frame's parsers: an NP1 datagram as it arrives
 * on the game socket, then its payload as the lobby dispatches it (save
 * chunk, mesh envelope), the relay port's TRLA ack as the lobby reads it
 * and a TRLB bind as the master's relay port reads it.
 *
 * Invariants checked:
 * - np1_parse accepts exactly the datagrams of at least 5 bytes that start
 *   with "NP1:", and the payload view is the rest of the input;
 * - np1_trlb_parse calls a bind exactly the 21-byte inputs that start with
 *   "TRLB" (anything else is -EBADMSG, relayed by the port), and accepts
 *   one (0) exactly when its role is 'H' or 'J' (else -EPROTO);
 * - round trips: np1_build, npf1_build, mesh_env_build, np1_trlb_build and
 *   np1_trla_build rebuild the very bytes that parsed;
 * - mesh names are NUL-terminated, at most 255 bytes, without NUL inside.
 */
#include <errno.h>
#include <stdbool.h>
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

static void relay_bind(const uint8_t *data, size_t size)
{
	uint8_t id[NP1_RELAY_ID_LEN], b[NP1_TRLB_LEN], role = 0;
	bool bind = size == NP1_TRLB_LEN && memcmp(data, "TRLB", 4) == 0;
	int r;

	r = np1_trla_parse(data, size, id);
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	FUZZ_CHECK((r == 0) == (size == NP1_TRLA_LEN && memcmp(data, "TRLA", 4) == 0));
	if (r == 0) {
		FUZZ_CHECK(memcmp(id, data + 4, NP1_RELAY_ID_LEN) == 0);
		FUZZ_CHECK(np1_trla_build(b, sizeof(b), id) == NP1_TRLA_LEN);
		FUZZ_CHECK(memcmp(b, data, NP1_TRLA_LEN) == 0);
		FUZZ_CHECK(np1_trlb_build(b, sizeof(b), id, NP1_ROLE_JOINER) == NP1_TRLB_LEN);
		FUZZ_CHECK(memcmp(b + 4, data + 4, NP1_RELAY_ID_LEN) == 0);
	}

	r = np1_trlb_parse(data, size, id, &role);
	FUZZ_CHECK(r == 0 || r == -EPROTO || r == -EBADMSG);
	FUZZ_CHECK((r != -EBADMSG) == bind);
	FUZZ_CHECK((r == 0) ==
		   (bind && (data[20] == NP1_ROLE_HOST || data[20] == NP1_ROLE_JOINER)));
	if (r == 0) {
		FUZZ_CHECK(role == data[20] && memcmp(id, data + 4, NP1_RELAY_ID_LEN) == 0);
		FUZZ_CHECK(np1_trlb_build(b, sizeof(b), id, role) == NP1_TRLB_LEN);
		FUZZ_CHECK(memcmp(b, data, NP1_TRLB_LEN) == 0);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = NULL;
	uint8_t type = 0, *buf;
	size_t pl = 0;
	int r;

	relay_bind(data, size);

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
