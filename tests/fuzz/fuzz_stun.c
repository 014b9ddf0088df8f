/*
 * Fuzz target for the STUN binding response parser (common/stun).
 *
 * The transaction id expected is the one the input carries (bytes 8..19),
 * so mutations reach the attribute walk instead of stopping at "not our
 * transaction"; a second parse with another id must stop at -ENOENT for
 * any message whose header is sound (-EBADMSG otherwise), before the
 * attributes are looked at.
 *
 * Invariants checked:
 * - the result is 0, -EBADMSG, -ENOENT or -EPROTO;
 * - whatever parses (0, -ENOENT, -EPROTO) passes stun_is_message, and a
 *   parsed address is IPv4 or IPv6 with the matching length;
 * - *mapped is written only on success.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "stun.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t txid[STUN_TXID_LEN] = {0}, other[STUN_TXID_LEN];
	struct addr a, poison;
	int r, r2;

	if (size >= STUN_HDR)
		memcpy(txid, data + 8, STUN_TXID_LEN);
	memset(&poison, 0xa5, sizeof(poison));
	a = poison;
	r = stun_parse_binding_response(data, size, txid, &a);
	FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -ENOENT || r == -EPROTO);
	if (r != -EBADMSG)
		FUZZ_CHECK(stun_is_message(data, size));
	if (r == 0) {
		FUZZ_CHECK((a.ss.ss_family == AF_INET && a.len == sizeof(struct sockaddr_in)) ||
			   (a.ss.ss_family == AF_INET6 && a.len == sizeof(struct sockaddr_in6)));
	} else {
		FUZZ_CHECK(memcmp(&a, &poison, sizeof(a)) == 0);
	}

	memcpy(other, txid, sizeof(other));
	other[0] ^= 0x80;
	a = poison;
	r2 = stun_parse_binding_response(data, size, other, &a);
	FUZZ_CHECK(r2 == (stun_is_message(data, size) ? -ENOENT : -EBADMSG));
	FUZZ_CHECK(memcmp(&a, &poison, sizeof(a)) == 0);
	return 0;
}
