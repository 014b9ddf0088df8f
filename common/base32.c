#include "base32.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

size_t base32_encoded_len(size_t len)
{
	/* 8 characters per 5 bytes, the last group cut to its 5-bit digits. */
	return len / 5 * 8 + (len % 5 * 8 + 4) / 5;
}

size_t base32_decoded_max(size_t len)
{
	return len / 8 * 5 + (len % 8 != 0 ? 5 : 0);
}

int base32_encode(const uint8_t *in, size_t len, char *out, size_t size)
{
	size_t n = base32_encoded_len(len), o = 0;
	uint32_t acc = 0;
	unsigned bits = 0;

	if (len > (size_t)INT_MAX / 2 || n >= size)
		return -ENOSPC;
	for (size_t i = 0; i < len; i++) {
		acc = (acc << 8 | in[i]) & 0xfffu;
		bits += 8;
		while (bits >= 5) {
			bits -= 5;
			out[o++] = alphabet[acc >> bits & 31u];
		}
	}
	if (bits > 0)
		out[o++] = alphabet[acc << (5 - bits) & 31u];
	out[o] = '\0';
	return (int)o;
}

/* The digit value of c (either case), or -1. */
static int digit(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a';
	if (c >= '2' && c <= '7')
		return c - '2' + 26;
	return -1;
}

/*
 * Python 3.11 base64._b32decode on text + '=' * (-len % 8): the trailing
 * '=' run (typed or added) is the padding; every other character must be a
 * digit, checked before the padding count; a count other than 0, 1, 3, 4
 * or 6 is "Incorrect padding". The last, partial group yields
 * (43 - 5 * pad) / 8 bytes.
 */
int base32_decode(const char *text, size_t len, uint8_t *out, size_t cap)
{
	size_t padded, digits, pad, total, o = 0;

	if (len > (size_t)INT_MAX / 2)
		return -ENOSPC;
	for (size_t i = 0; i < len; i++) {
		if ((unsigned char)text[i] > 127)
			return -EILSEQ;
	}
	padded = len + (8 - len % 8) % 8;
	digits = len;
	while (digits > 0 && text[digits - 1] == '=')
		digits--;
	pad = padded - digits;
	for (size_t i = 0; i < digits; i++) {
		if (digit(text[i]) < 0)
			return -EINVAL;
	}
	if (pad != 0 && pad != 1 && pad != 3 && pad != 4 && pad != 6)
		return -EBADMSG;
	total = digits / 8 * 5 + (pad != 0 ? (43 - 5 * pad) / 8 : 0);
	if (total > cap)
		return -ENOSPC;
	for (size_t i = 0; i < digits; i += 8) {
		uint64_t acc = 0;
		size_t k = digits - i < 8 ? digits - i : 8;
		size_t nbytes = k == 8 ? 5 : (43 - 5 * (8 - k)) / 8;

		for (size_t j = 0; j < k; j++)
			acc = acc << 5 | (uint64_t)digit(text[i + j]);
		acc <<= 5 * (8 - k);
		for (size_t j = 0; j < nbytes; j++)
			out[o++] = (uint8_t)(acc >> (32 - 8 * j));
	}
	return (int)o;
}

const char *base32_strerror(int err)
{
	switch (err) {
	case -EILSEQ:
		return "string argument should contain only ASCII characters";
	case -EINVAL:
		return "Non-base32 digit found";
	case -EBADMSG:
		return "Incorrect padding";
	default:
		return "";
	}
}
