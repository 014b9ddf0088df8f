/*
 * The one checked decimal parser. Every number the suite reads from a
 * command line, an environment variable or the wire goes through it: digits
 * only (a sign only where the caller allows one), no spaces, no 0x, no
 * trailing bytes, the range checked without overflow. Pure.
 */
#ifndef NUM_H
#define NUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Flags for num_parse. */
enum num_flag {
	NUM_SIGN = 1U << 0, /* an optional leading '+' or '-' (Go's strconv.Atoi) */
};

/*
 * Reads s[0..len) as one decimal integer in [min, max]. Returns 0 with *out
 * set, -EINVAL when it is not a number (empty, a stray byte, a sign without
 * NUM_SIGN), -ERANGE when it is one but outside [min, max].
 */
int num_parse(const char *s, size_t len, int64_t min, int64_t max, unsigned flags, int64_t *out);

/* The same over a NUL-terminated string (NULL is -EINVAL). */
int num_parse_str(const char *s, int64_t min, int64_t max, unsigned flags, int64_t *out);

/*
 * An unsigned decimal run at the start of s[0..len), for fields followed by
 * a separator ("<dev>:<ino>"): returns the number of digits read (>= 1), or
 * -EINVAL for none, -ERANGE past max. *out is set on success.
 */
int num_prefix_u64(const char *s, size_t len, uint64_t max, uint64_t *out);

#endif
