/*
 * Fuzz target for the client side of the master protocol in common/q3:
 * q3_decode_getservers_resp (what rally-relay's listing check reads from a
 * master) and q3_encode_getservers (what it sends).
 *
 * Beyond "no crash", it checks:
 * - a datagram decodes whole or not at all (-EBADMSG, nothing counted);
 * - the entries iterate to exactly n servers, inside the input, IPv6 ones
 *   only in a getserversExtResponse;
 * - decoding is exact: the master's own encoder, given the servers read,
 *   writes the input back byte for byte (with the mark iff eot);
 * - a request built from the input either encodes to something the
 *   master's decoder reads back to the same request, or is refused.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "q3.h"

#define MAX_SRV (65536 / 7 + 1)

static void check_resp(const uint8_t *data, size_t size)
{
	static struct q3_srv v[MAX_SRV];
	static uint8_t again[65536 + 64];
	struct q3_getservers_resp r;
	struct q3_srvlist list = {.v = v};
	size_t off = 0, n = 0, taken = 0;
	ssize_t w;
	int ret = q3_decode_getservers_resp(data, size, &r);

	if (ret < 0) {
		FUZZ_CHECK(ret == -EBADMSG && r.n == 0 && r.entries == NULL);
		return;
	}
	FUZZ_CHECK(ret == 0);
	FUZZ_CHECK(r.entries >= data && r.entries_len <= size - (size_t)(r.entries - data));
	while (q3_getservers_resp_next(&r, &off, &v[n])) {
		FUZZ_CHECK(n < MAX_SRV && off <= r.entries_len);
		FUZZ_CHECK(r.ext || !v[n].v6);
		n++;
	}
	FUZZ_CHECK(n == r.n && off == r.entries_len);

	/* The encoder writes the same bytes back: one datagram holds it all
	 * when the cap is the input's size plus room for the mark. */
	list.ext = r.ext;
	list.n = n;
	w = q3_encode_getservers_resp(again, size + 7 > 64 ? size + 7 : 64, &list, &taken);
	FUZZ_CHECK(w > 0 && taken == n + 1);
	FUZZ_CHECK((size_t)w == size + (r.eot ? 0 : 7));
	FUZZ_CHECK(memcmp(again, data, size) == 0);
	if (!r.eot)
		FUZZ_CHECK(memcmp(again + size, "\\EOT\0\0\0", 7) == 0);
}

static void check_request(const uint8_t *data, size_t size)
{
	struct q3_getservers req, back;
	uint8_t buf[256];
	size_t gl, tl;
	int n;

	if (size < 6)
		return;
	memset(&req, 0, sizeof(req));
	req.flags = data[0] & (Q3_GS_EXT | Q3_GS_EMPTY | Q3_GS_FULL | Q3_GS_IPV4 | Q3_GS_IPV6 |
			       Q3_GS_GAMETYPE);
	req.protocol = (int32_t)((uint32_t)data[1] << 24 | (uint32_t)data[2] << 16 |
				 (uint32_t)data[3] << 8 | data[4]);
	gl = data[5] % (Q3_GAMENAME_MAX + 1);
	gl = gl < size - 6 ? gl : size - 6;
	memcpy(req.gamename, data + 6, gl);
	tl = size - 6 - gl;
	tl = tl < Q3_GAMETYPE_MAX ? tl : Q3_GAMETYPE_MAX;
	memcpy(req.gametype, data + 6 + gl, tl);
	n = q3_encode_getservers(buf, sizeof(buf), &req);
	if (n < 0) {
		FUZZ_CHECK(n == -EINVAL || n == -EMSGSIZE);
		return;
	}
	FUZZ_CHECK((size_t)n <= sizeof(buf));
	FUZZ_CHECK(q3_decode_getservers(buf, (size_t)n, &back) == 0);
	FUZZ_CHECK(back.protocol == req.protocol);
	FUZZ_CHECK(strcmp(back.gamename, req.gamename) == 0);
	FUZZ_CHECK((back.flags & (Q3_GS_EXT | Q3_GS_EMPTY | Q3_GS_FULL | Q3_GS_GAMETYPE)) ==
		   (req.flags & (Q3_GS_EXT | Q3_GS_EMPTY | Q3_GS_FULL | Q3_GS_GAMETYPE)));
	if (req.flags & Q3_GS_GAMETYPE)
		FUZZ_CHECK(strcmp(back.gametype, req.gametype) == 0);
	if ((req.flags & Q3_GS_EXT) && (req.flags & (Q3_GS_IPV4 | Q3_GS_IPV6)))
		FUZZ_CHECK((back.flags & (Q3_GS_IPV4 | Q3_GS_IPV6)) ==
			   (req.flags & (Q3_GS_IPV4 | Q3_GS_IPV6)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_resp(data, size);
	check_request(data, size);
	return 0;
}
