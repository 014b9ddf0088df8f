/*
 * Fuzz target for common/info: infostrings as the engine reads and writes
 * them.
 *
 * Input layout: the whole input is read as an infostring (info_iter_init,
 * info_next, info_get stop at its first NUL); for the writers the input is
 * split at NULs into "string \0 key \0 value". Without a key segment the
 * first key of the string is reused, so plain infostring seeds exercise
 * both sides.
 *
 * Invariants checked:
 * - iteration only yields views inside the string, in order, without '\';
 *   info_get finds every key the iteration yields, at its first
 *   case-insensitive occurrence; a string of BIG_INFO_STRING bytes or more
 *   is refused by both;
 * - info_remove leaves exactly the pairs whose key differs (iterating the
 *   result gives the original's pairs minus the removed ones);
 * - info_set returns -EINVAL exactly for an empty key or a forbidden
 *   character, -EMSGSIZE exactly when the result would reach 1024 bytes or
 *   not fit, and then leaves s unchanged; on success the result is
 *   "\key\value" + the string with key removed, shorter than 1024 bytes,
 *   and info_get reads the value back. (Read-back holds when the rest
 *   starts with '\' or is empty: after a malformed rest such as "abc" the
 *   engine's own Info_SetValueForKey gives "\key\valueabc" too.)
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "info.h"

/* Pairs whose info_get result is cross-checked, to keep runs fast. */
#define MAX_CHECKED (64)

struct view {
	const char *p;
	size_t len;
};

static bool eq_nocase(struct view a, struct view b)
{
	if (a.len != b.len)
		return false;
	for (size_t i = 0; i < a.len; i++) {
		char x = a.p[i], y = b.p[i];

		if (x >= 'A' && x <= 'Z')
			x = (char)(x - 'A' + 'a');
		if (y >= 'A' && y <= 'Z')
			y = (char)(y - 'A' + 'a');
		if (x != y)
			return false;
	}
	return true;
}

static bool view_is(struct view v, const char *s)
{
	return v.len == strlen(s) && memcmp(v.p, s, v.len) == 0;
}

static void check_read(const char *s, size_t len)
{
	static char key[INFO_BIG_STRING];
	struct view keys[MAX_CHECKED], vals[MAX_CHECKED];
	struct info_iter it;
	struct view k, v;
	size_t slen = strnlen(s, len), n = 0;
	const char *prev_end = s;
	int r = info_iter_init(&it, s, len);

	if (slen >= INFO_BIG_STRING) {
		FUZZ_CHECK(r == -EMSGSIZE);
		FUZZ_CHECK(info_get(s, len, "x", &v.p, &v.len) == -EMSGSIZE);
		return;
	}
	FUZZ_CHECK(r == 0);
	while (info_next(&it, &k.p, &k.len, &v.p, &v.len)) {
		FUZZ_CHECK(k.p >= prev_end && k.p + k.len < v.p && v.p + v.len <= s + slen);
		FUZZ_CHECK(memchr(k.p, '\\', k.len) == NULL && memchr(v.p, '\\', v.len) == NULL);
		FUZZ_CHECK(k.p[k.len] == '\\');
		prev_end = v.p + v.len;
		if (n < MAX_CHECKED) {
			struct view got;
			size_t first = n;

			keys[n] = k;
			vals[n] = v;
			for (size_t j = 0; j < n; j++) {
				if (eq_nocase(keys[j], k)) {
					first = j;
					break;
				}
			}
			memcpy(key, k.p, k.len);
			key[k.len] = '\0';
			FUZZ_CHECK(info_get(s, len, key, &got.p, &got.len) == 0);
			FUZZ_CHECK(got.p == vals[first].p && got.len == vals[first].len);
			n++;
		}
	}
	/* A '\' can never be inside a key. */
	FUZZ_CHECK(info_get(s, len, "a\\b", &v.p, &v.len) == -ENOENT);
}

/* removed must be orig minus every pair whose key is exactly key. */
static void check_removed(const char *orig, const char *removed, const char *key)
{
	struct info_iter a, b;
	struct view ka, va, kb, vb;

	FUZZ_CHECK(strlen(removed) <= strlen(orig));
	FUZZ_CHECK(info_iter_init(&a, orig, strlen(orig)) == 0);
	FUZZ_CHECK(info_iter_init(&b, removed, strlen(removed)) == 0);
	for (;;) {
		bool more_a, more_b;

		do
			more_a = info_next(&a, &ka.p, &ka.len, &va.p, &va.len);
		while (more_a && view_is(ka, key));
		more_b = info_next(&b, &kb.p, &kb.len, &vb.p, &vb.len);
		FUZZ_CHECK(more_a == more_b);
		if (!more_a)
			break;
		FUZZ_CHECK(!view_is(kb, key));
		FUZZ_CHECK(ka.len == kb.len && memcmp(ka.p, kb.p, ka.len) == 0);
		FUZZ_CHECK(va.len == vb.len && memcmp(va.p, vb.p, va.len) == 0);
	}
}

static void check_set(const char *orig, const char *removed, const char *key, const char *value,
		      size_t size)
{
	static char s[INFO_BIG_STRING];
	size_t klen = strlen(key), vlen = strlen(value), slen = strlen(orig);
	size_t rlen = strlen(removed), nlen = 2 + klen + vlen;
	bool invalid =
		klen == 0 || strpbrk(key, "\\;\"") != NULL || strpbrk(value, "\\;\"") != NULL;
	int r;

	FUZZ_CHECK(size > slen && size <= sizeof(s));
	memcpy(s, orig, slen + 1);
	r = info_set(s, size, key, value);
	if (invalid) {
		FUZZ_CHECK(r == -EINVAL);
		FUZZ_CHECK(strcmp(s, orig) == 0);
		return;
	}
	if (slen >= INFO_MAX_STRING ||
	    (vlen > 0 && (nlen + rlen >= INFO_MAX_STRING || nlen + rlen >= size))) {
		FUZZ_CHECK(r == -EMSGSIZE);
		FUZZ_CHECK(strcmp(s, orig) == 0);
		return;
	}
	FUZZ_CHECK(r == 0);
	FUZZ_CHECK(strlen(s) < INFO_MAX_STRING && strlen(s) < size);
	if (vlen == 0) {
		FUZZ_CHECK(strcmp(s, removed) == 0);
		return;
	}
	FUZZ_CHECK(s[0] == '\\' && memcmp(s + 1, key, klen) == 0 && s[1 + klen] == '\\');
	FUZZ_CHECK(memcmp(s + 2 + klen, value, vlen) == 0);
	FUZZ_CHECK(strcmp(s + nlen, removed) == 0);
	if (removed[0] == '\0' || removed[0] == '\\') {
		struct view got;

		FUZZ_CHECK(info_get(s, strlen(s), key, &got.p, &got.len) == 0);
		FUZZ_CHECK(got.len == vlen && memcmp(got.p, value, vlen) == 0);
	}
}

/* The next NUL-separated segment of data after *off, copied into out. */
static bool segment(const uint8_t *data, size_t size, size_t *off, char *out, size_t outsize)
{
	size_t n;

	if (*off >= size)
		return false;
	n = strnlen((const char *)data + *off, size - *off);
	if (n >= outsize)
		n = outsize - 1;
	memcpy(out, data + *off, n);
	out[n] = '\0';
	*off += strnlen((const char *)data + *off, size - *off) + 1;
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char orig[INFO_BIG_STRING], removed[INFO_BIG_STRING];
	static char key[INFO_BIG_STRING], value[INFO_BIG_STRING];
	size_t off = 0, tight;

	check_read((const char *)data, size);

	segment(data, size, &off, orig, sizeof(orig));
	if (!segment(data, size, &off, key, sizeof(key))) {
		/* Reuse the string's first key, with a fresh value. */
		struct info_iter it;
		const char *k, *v;
		size_t kl, vl;

		strcpy(key, "sv_hostname");
		if (info_iter_init(&it, orig, strlen(orig)) == 0 &&
		    info_next(&it, &k, &kl, &v, &vl)) {
			memcpy(key, k, kl);
			key[kl] = '\0';
		}
		strcpy(value, "rally");
	} else if (!segment(data, size, &off, value, sizeof(value))) {
		value[0] = '\0';
	}

	memcpy(removed, orig, strlen(orig) + 1);
	info_remove(removed, key);
	check_removed(orig, removed, key);

	/* Room to spare, then just enough for the string itself, so both
	 * size limits are reached. */
	check_set(orig, removed, key, value, sizeof(orig));
	tight = strlen(orig) + 1 + (size & 31);
	check_set(orig, removed, key, value, tight < sizeof(orig) ? tight : sizeof(orig));
	return 0;
}
