/*
 * Fuzz target for the tunnel's message codec (relay/relay_tunmsg): the
 * JSON messages a host sends (both the data fast path and json-c's path),
 * the handshake's objects, the signature decoder and the binary frames.
 *
 * Invariants checked:
 * - tunmsg_decode returns 0, -EBADMSG or -EMSGSIZE; a data chunk fits the
 *   buffer it was given;
 * - whatever decodes re-encodes to a message that decodes to the same
 *   command and fields (data: the same bytes);
 * - binary frames decode only with a known type and a sound length.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "relay_tunmsg.h"
#include "strbuf.h"

static uint8_t chunk[TUNMSG_CHUNK_MAX * 4], chunk2[TUNMSG_CHUNK_MAX * 4];

static void roundtrip(const struct tunmsg *m)
{
	struct strbuf b;
	struct tunmsg d;
	int r;

	if (m->cmd == TUNMSG_UNKNOWN || (m->cmd == TUNMSG_DATA && m->chunk_len > TUNMSG_CHUNK_MAX))
		return;
	strbuf_init(&b, 1 << 20);
	tunmsg_encode(m, &b);
	FUZZ_CHECK(!b.bad);
	r = tunmsg_decode(b.p, b.len, &d, chunk2, sizeof(chunk2));
	FUZZ_CHECK(r == 0);
	FUZZ_CHECK(d.cmd == m->cmd);
	FUZZ_CHECK(d.stream_id == m->stream_id && d.request_id == m->request_id);
	FUZZ_CHECK(strcmp(d.player_id, m->player_id) == 0 && strcmp(d.token, m->token) == 0);
	FUZZ_CHECK(strcmp(d.error, m->error) == 0 && strcmp(d.expected_ip, m->expected_ip) == 0);
	if (m->cmd == TUNMSG_DATA)
		FUZZ_CHECK(d.chunk_len == m->chunk_len &&
			   (m->chunk_len == 0 || memcmp(d.chunk, m->chunk, m->chunk_len) == 0));
	strbuf_release(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tunmsg m;
	struct tunmsg_hello h;
	char nonce[TUNMSG_ID_MAX + 1], why[64], sigs[TUNMSG_SIG_MAX + 1];
	uint8_t sig[64];
	enum tunmsg_bin type;
	uint32_t id;
	const uint8_t *p;
	size_t n;
	int r;

	/* A small chunk buffer too, so -EMSGSIZE gets exercised. */
	size_t csize = size > 0 && data[0] % 2 ? 16 : sizeof(chunk);

	r = tunmsg_decode((const char *)data, size, &m, chunk, csize);
	FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -EMSGSIZE);
	if (r == 0) {
		if (m.cmd == TUNMSG_DATA)
			FUZZ_CHECK(m.chunk_len <= csize);
		roundtrip(&m);
	}
	r = tunmsg_decode_hello((const char *)data, size, &h);
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	if (r == 0)
		FUZZ_CHECK(strlen(h.realm_id) <= TUNMSG_ID_MAX &&
			   strlen(h.signature) <= TUNMSG_SIG_MAX);
	r = tunmsg_decode_challenge((const char *)data, size, nonce);
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	r = tunmsg_decode_welcome((const char *)data, size, why, sizeof(why));
	FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -EACCES);
	n = size < TUNMSG_SIG_MAX ? size : TUNMSG_SIG_MAX;
	memcpy(sigs, data, n);
	sigs[n] = '\0';
	r = tunmsg_parse_sig(sigs, sig);
	FUZZ_CHECK(r == 0 || r == -EINVAL);
	r = tunmsg_bin_decode(data, size, &type, &id, &p, &n);
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	if (r == 0) {
		FUZZ_CHECK(type >= TUNMSG_BIN_DATA && type <= TUNMSG_BIN_DGRAM_PEER);
		FUZZ_CHECK(p == data + TUNMSG_BIN_HDR && n == size - TUNMSG_BIN_HDR);
		FUZZ_CHECK(type != TUNMSG_BIN_CREDIT || n == 4);
		FUZZ_CHECK((type != TUNMSG_BIN_CLOSE && type != TUNMSG_BIN_RESET) || n == 0);
	}
	return 0;
}
