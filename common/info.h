/*
 * Quake 3 infostrings: "\key\value\key\value", as q_shared.c reads and
 * writes them.
 *
 * Reading follows Info_ValueForKey: an optional leading '\', a key runs to
 * the next '\', its value to the next '\' or the end; a key without a value
 * separator ends the string; keys compare case-insensitively; the first
 * match wins. A NUL ends the string. Strings of BIG_INFO_STRING (8192) bytes
 * or more are refused, as the engine refuses them.
 *
 * Writing follows Info_SetValueForKey: keys and values may not contain '\',
 * ';' or '"'; an empty value only removes the key; the new pair goes in
 * front; the result must stay under MAX_INFO_STRING (1024) bytes.
 */
#ifndef INFO_H
#define INFO_H

#include <stdbool.h>
#include <stddef.h>

#define INFO_MAX_STRING (1024)
#define INFO_BIG_STRING (8192)

struct info_iter {
	const char *p;
	size_t left;
	bool bad;
};

/*
 * Starts iterating over s[0..len). Returns 0, or -EMSGSIZE when the string
 * (up to its first NUL) is BIG_INFO_STRING bytes or longer.
 */
int info_iter_init(struct info_iter *it, const char *s, size_t len);

/* Next pair as views into s; false at the end. */
bool info_next(struct info_iter *it, const char **key, size_t *key_len, const char **val,
	       size_t *val_len);

/*
 * Looks key up (case-insensitive). Returns 0 with a view of the value,
 * -ENOENT when absent, -EMSGSIZE for an oversize string.
 */
int info_get(const char *s, size_t len, const char *key, const char **val, size_t *val_len);

/*
 * Sets key to value in the NUL-terminated string s (buffer size bytes).
 * Returns 0; -EINVAL for a forbidden character or an empty key; -EMSGSIZE
 * when the result would reach MAX_INFO_STRING or not fit in size (s is then
 * unchanged).
 */
int info_set(char *s, size_t size, const char *key, const char *value);

/* Removes every pair whose key equals key (case-sensitive, as
 * Info_RemoveKey). */
void info_remove(char *s, const char *key);

/* True if s may be used as an infostring key or value. */
bool info_valid_token(const char *s);

#endif
