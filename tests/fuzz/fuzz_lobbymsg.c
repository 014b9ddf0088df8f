/*
 * The lobby's peer-message codec alone (lobby/lobby_msg.c): any bytes
 * through lobby_msg_decode. Invariants: a decoded message names a known
 * type or UNKNOWN (which does not encode); a known one encodes, and what
 * it encodes to decodes again to the same type and encodes to the same
 * bytes (encode o decode is idempotent: nothing is lost or invented on a
 * second trip).
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "lobby_msg.h"
#include "strbuf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lobby_msg m, m2;
	struct strbuf a, b;
	int r;

	if (lobby_msg_decode(data, size, &m) < 0)
		return 0;
	FUZZ_CHECK((unsigned)m.type < LOBBY_MSG_NTYPES && m.t != NULL);
	strbuf_init(&a, 4 * LOBBY_MSG_MAX);
	r = lobby_msg_encode(&m, &a);
	if (m.type == LOBBY_MSG_UNKNOWN) {
		FUZZ_CHECK(r == -EINVAL);
		goto out;
	}
	FUZZ_CHECK(r == 0 && a.p != NULL);
	FUZZ_CHECK(strcmp(m.t, lobby_msg_type_name(m.type)) == 0);
	/* Escapes can make the text longer than a message we would take. */
	if (a.len > LOBBY_MSG_MAX)
		goto out;
	FUZZ_CHECK(lobby_msg_decode((const uint8_t *)a.p, a.len, &m2) == 0);
	FUZZ_CHECK(m2.type == m.type);
	strbuf_init(&b, 4 * LOBBY_MSG_MAX);
	FUZZ_CHECK(lobby_msg_encode(&m2, &b) == 0);
	FUZZ_CHECK(b.len == a.len && memcmp(a.p, b.p, a.len) == 0);
	strbuf_release(&b);
	lobby_msg_release(&m2);
out:
	strbuf_release(&a);
	lobby_msg_release(&m);
	return 0;
}
