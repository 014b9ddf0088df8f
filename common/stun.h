/*
 * STUN binding requests and responses (RFC 5389, with RFC 3489 servers'
 * MAPPED-ADDRESS as a fallback). Pure functions over (buf, len); the lobby
 * sends and receives on its own game socket.
 */
#ifndef STUN_H
#define STUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"

#define STUN_HDR      (20)
#define STUN_TXID_LEN (12)
#define STUN_MAGIC    (0x2112A442u)

/* True when buf looks like a STUN message (first two bits zero, the magic
 * cookie, a length that fits) - to tell it from NP1 on the same socket. */
bool stun_is_message(const uint8_t *buf, size_t len);
/* A Binding Request with txid (no attributes). Returns 20 or -ENOSPC. */
int stun_build_binding_request(uint8_t *buf, size_t cap, const uint8_t txid[static STUN_TXID_LEN]);
/*
 * Parses a Binding Success Response for txid: the XOR-MAPPED-ADDRESS, else
 * the MAPPED-ADDRESS (IPv4 or IPv6; the first of each counts; attributes
 * after MESSAGE-INTEGRITY or FINGERPRINT and unknown ones are skipped).
 * Returns 0 with *mapped, -EBADMSG for anything malformed (the header's
 * length must be the datagram's, every attribute length and its padding
 * are checked against what is left, an address of the wrong size or
 * family), -ENOENT when it is not the answer to txid (another txid, a
 * class other than a response) or has no address, -EPROTO for a Binding
 * Error Response to txid.
 */
int stun_parse_binding_response(const uint8_t *buf, size_t len,
				const uint8_t txid[static STUN_TXID_LEN], struct addr *mapped);

#endif
