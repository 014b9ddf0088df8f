#include "info.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int info_iter_init(struct info_iter *it, const char *s, size_t len)
{
	const char *nul = memchr(s, '\0', len);

	if (nul != NULL)
		len = (size_t)(nul - s);
	if (len >= INFO_BIG_STRING)
		return -EMSGSIZE;
	it->p = s;
	it->left = len;
	it->bad = false;
	if (it->left > 0 && *it->p == '\\') {
		it->p++;
		it->left--;
	}
	return 0;
}

bool info_next(struct info_iter *it, const char **key, size_t *key_len, const char **val,
	       size_t *val_len)
{
	const char *sep, *end;

	if (it->bad || it->left == 0)
		return false;
	sep = memchr(it->p, '\\', it->left);
	if (sep == NULL) {
		/* "if (!*s) return """: a key without a value ends it. */
		it->bad = true;
		return false;
	}
	*key = it->p;
	*key_len = (size_t)(sep - it->p);
	it->left -= *key_len + 1;
	it->p = sep + 1;
	end = memchr(it->p, '\\', it->left);
	*val = it->p;
	if (end == NULL) {
		*val_len = it->left;
		it->p += it->left;
		it->left = 0;
	} else {
		*val_len = (size_t)(end - it->p);
		it->left -= *val_len + 1;
		it->p = end + 1;
		/* A trailing '\' is a separator followed by nothing. */
		if (it->left == 0)
			it->bad = true;
	}
	return true;
}

static bool key_eq_nocase(const char *k, size_t klen, const char *key)
{
	size_t i;

	for (i = 0; i < klen; i++) {
		char a = k[i], b = key[i];

		if (b == '\0')
			return false;
		if (a >= 'A' && a <= 'Z')
			a = (char)(a - 'A' + 'a');
		if (b >= 'A' && b <= 'Z')
			b = (char)(b - 'A' + 'a');
		if (a != b)
			return false;
	}
	return key[i] == '\0';
}

int info_get(const char *s, size_t len, const char *key, const char **val, size_t *val_len)
{
	struct info_iter it;
	const char *k;
	size_t klen;
	int r = info_iter_init(&it, s, len);

	if (r < 0)
		return r;
	while (info_next(&it, &k, &klen, val, val_len)) {
		if (key_eq_nocase(k, klen, key))
			return 0;
	}
	return -ENOENT;
}

bool info_valid_token(const char *s)
{
	return strpbrk(s, "\\;\"") == NULL;
}

void info_remove(char *s, const char *key)
{
	size_t keylen = strlen(key);
	char *p = s;

	/* Info_RemoveKey: scan "\k\v" pairs, cut the ones whose key matches. */
	while (*p != '\0') {
		char *start = p, *k, *v, *next;

		if (*p == '\\')
			p++;
		k = p;
		while (*p != '\\' && *p != '\0')
			p++;
		if (*p == '\0')
			return;
		v = ++p;
		while (*p != '\\' && *p != '\0')
			p++;
		next = p;
		(void)v;
		if ((size_t)(v - 1 - k) == keylen && memcmp(k, key, keylen) == 0) {
			memmove(start, next, strlen(next) + 1);
			p = start;
		}
	}
}

int info_set(char *s, size_t size, const char *key, const char *value)
{
	char tmp[INFO_MAX_STRING];
	size_t slen, klen = strlen(key), vlen = strlen(value), nlen;

	if (klen == 0 || !info_valid_token(key) || !info_valid_token(value))
		return -EINVAL;
	slen = strlen(s);
	if (slen >= INFO_MAX_STRING)
		return -EMSGSIZE;
	/* Measure against the string with the key removed, without changing
	 * it yet, so a refused set leaves s as it was. */
	memcpy(tmp, s, slen + 1);
	info_remove(tmp, key);
	if (vlen == 0) {
		memcpy(s, tmp, strlen(tmp) + 1);
		return 0;
	}
	slen = strlen(tmp);
	nlen = 2 + klen + vlen;
	if (nlen + slen >= INFO_MAX_STRING || nlen + slen >= size)
		return -EMSGSIZE;
	/* ioquake3: strcat(newi, s); strcpy(s, newi) - the new pair first. */
	memmove(s + nlen, tmp, slen + 1);
	s[0] = '\\';
	memcpy(s + 1, key, klen); /* NOLINT(bugprone-not-null-terminated-result) */
	s[1 + klen] = '\\';
	/* Not terminated here: the rest of the string, moved above, follows. */
	memcpy(s + 2 + klen, value, vlen); /* NOLINT(bugprone-not-null-terminated-result) */
	return 0;
}
