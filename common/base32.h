/*
 * RFC 4648 base32 as netpunch's join codes use it: encoded upper case
 * without '=' padding; decoded the way Python's base64.b32decode() does
 * after netpunch upper-cases the text and pads it to a multiple of 8
 * (netpunch-wire.md §4.3), including which of Python's two messages a bad
 * text gets. Pure functions over (buf, len).
 */
#ifndef BASE32_H
#define BASE32_H

#include <stddef.h>
#include <stdint.h>

/* Characters base32_encode() writes for len bytes (no padding, no NUL). */
size_t base32_encoded_len(size_t len);
/* Largest decoded size of a text of len characters. */
size_t base32_decoded_max(size_t len);

/*
 * Encodes len bytes of in as upper-case base32 without padding into out
 * (NUL-terminated). Returns the text length, or -ENOSPC when size is not
 * more than base32_encoded_len(len).
 */
int base32_encode(const uint8_t *in, size_t len, char *out, size_t size);

/*
 * Decodes len characters of text (case-insensitive; '=' padding optional,
 * as netpunch re-pads before Python decodes) into out. Returns the byte
 * count, or:
 *   -EILSEQ  a byte above 127 ("string argument should contain only ASCII
 *            characters", Python's check before decoding),
 *   -EINVAL  a character outside the alphabet, '=' inside the text
 *            included ("Non-base32 digit found"),
 *   -EBADMSG a padding count Python refuses ("Incorrect padding"),
 *   -ENOSPC  out is smaller than base32_decoded_max(len).
 * Like Python, the bits below the last whole byte are not checked.
 */
int base32_decode(const char *text, size_t len, uint8_t *out, size_t cap);

/* Python's message for a base32_decode() error ("" for anything else). */
const char *base32_strerror(int err);

#endif
