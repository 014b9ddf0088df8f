#include "jsonp.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * RFC 3629 UTF-8: json-c's own check (JSON_TOKENER_VALIDATE_UTF8) lets
 * overlong forms and encoded surrogates through, which Python's strict
 * decoding (and so every peer we mirror) refuses. Returns the offset of
 * the first bad byte, or len.
 */
static size_t utf8_check(const unsigned char *s, size_t len)
{
	size_t i = 0;

	while (i < len) {
		unsigned c = s[i], n, cp, min;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			n = 1, cp = c & 0x1f, min = 0x80;
		} else if (c >= 0xe0 && c <= 0xef) {
			n = 2, cp = c & 0x0f, min = 0x800;
		} else if (c >= 0xf0 && c <= 0xf4) {
			n = 3, cp = c & 0x07, min = 0x10000;
		} else {
			return i;
		}
		if (n > len - i - 1)
			return i;
		for (unsigned k = 1; k <= n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return i;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return i;
		i += n + 1;
	}
	return len;
}

static int hex4(const char *s)
{
	int v = 0;

	for (int i = 0; i < 4; i++) {
		char c = s[i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			v |= (c | 0x20) - 'a' + 10;
		else
			return -1;
	}
	return v;
}

/* At text[i] (a backslash), an escaped surrogate pair: its code point, or 0. */
static unsigned pair_at(const char *t, size_t len, size_t i)
{
	int hi, lo;

	if (len - i < 12 || t[i + 1] != 'u' || t[i + 6] != '\\' || t[i + 7] != 'u')
		return 0;
	hi = hex4(t + i + 2);
	lo = hex4(t + i + 8);
	if (hi < 0xd800 || hi > 0xdbff || lo < 0xdc00 || lo > 0xdfff)
		return 0;
	return 0x10000 + (((unsigned)hi - 0xd800) << 10) + ((unsigned)lo - 0xdc00);
}

/*
 * What json-c 0.16 gets wrong, found by fuzzing the lobby's codec:
 *   - a raw control character (below 0x20) inside a string is taken,
 *     where Python's json.loads (strict) refuses the document: *bad is
 *     set to its offset;
 *   - an escaped surrogate pair whose high half has (hi & 0x3e) == 0x36
 *     (U+1D800-1DBFF, U+2D800-2DFFF: CJK Extension F, ...) decodes to
 *     U+FFFD: the count of pairs is returned, so the caller writes them
 *     as UTF-8 before json-c reads the text.
 */
static size_t scan_strings(const char *t, size_t len, size_t *bad)
{
	size_t pairs = 0;
	bool in_str = false;

	*bad = len;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)t[i];

		if (!in_str) {
			in_str = c == '"';
		} else if (c == '"') {
			in_str = false;
		} else if (c == '\\') {
			if (pair_at(t, len, i) != 0) {
				pairs++;
				i += 11;
			} else {
				i++; /* the escaped byte, whatever it is */
			}
		} else if (c < 0x20) {
			*bad = i;
			return pairs;
		}
	}
	return pairs;
}

/* text with every escaped surrogate pair as its UTF-8 (malloc'd, NUL-free:
 * the pairs are of code points >= U+10000). */
static char *decode_pairs(const char *t, size_t len, size_t *out_len)
{
	char *o = malloc(len), *p = o;

	if (o == NULL)
		return NULL;
	for (size_t i = 0; i < len; i++) {
		unsigned cp = t[i] == '\\' ? pair_at(t, len, i) : 0;

		if (cp == 0) {
			*p++ = t[i];
			/* Keep an escaped byte with its backslash. */
			if (t[i] == '\\' && i + 1 < len)
				*p++ = t[++i];
			continue;
		}
		*p++ = (char)(0xf0 | (cp >> 18));
		*p++ = (char)(0x80 | ((cp >> 12) & 0x3f));
		*p++ = (char)(0x80 | ((cp >> 6) & 0x3f));
		*p++ = (char)(0x80 | (cp & 0x3f));
		i += 11;
	}
	*out_len = (size_t)(p - o);
	return o;
}

int jsonp_parse(const char *text, size_t len, int depth, struct json_object **out, char *err,
		size_t errsize)
{
	size_t bad, pairs;
	char *fixed = NULL;
	struct json_tokener *tok;
	struct json_object *o;
	enum json_tokener_error je;
	size_t end;

	*out = NULL;
	if (len == 0) {
		snprintf(err, errsize, "empty document");
		return -EBADMSG;
	}
	if (memchr(text, '\0', len) != NULL) {
		snprintf(err, errsize, "NUL byte at offset %zu",
			 (size_t)((const char *)memchr(text, '\0', len) - text));
		return -EBADMSG;
	}
	if (len > (size_t)0x7fffffff) {
		snprintf(err, errsize, "document too large");
		return -EBADMSG;
	}
	bad = utf8_check((const unsigned char *)text, len);
	if (bad != len) {
		snprintf(err, errsize, "offset %zu: invalid UTF-8", bad);
		return -EBADMSG;
	}
	pairs = scan_strings(text, len, &bad);
	if (bad != len) {
		snprintf(err, errsize, "offset %zu: control character in a string", bad);
		return -EBADMSG;
	}
	if (pairs > 0) {
		/* Offsets in errors past this point are of the decoded text. */
		fixed = decode_pairs(text, len, &len);
		if (fixed == NULL) {
			snprintf(err, errsize, "out of memory");
			return -EBADMSG;
		}
		text = fixed;
	}
	tok = json_tokener_new_ex(depth);
	if (tok == NULL) {
		snprintf(err, errsize, "out of memory");
		free(fixed);
		return -EBADMSG;
	}
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, text, (int)len);
	je = json_tokener_get_error(tok);
	end = json_tokener_get_parse_end(tok);
	if (o == NULL) {
		if (je == json_tokener_continue)
			snprintf(err, errsize, "truncated document");
		else
			snprintf(err, errsize, "offset %zu: %s", end, json_tokener_error_desc(je));
		json_tokener_free(tok);
		free(fixed);
		return -EBADMSG;
	}
	json_tokener_free(tok);
	while (end < len &&
	       (text[end] == ' ' || text[end] == '\n' || text[end] == '\r' || text[end] == '\t'))
		end++;
	free(fixed);
	if (end != len) {
		snprintf(err, errsize, "offset %zu: trailing data", end);
		json_object_put(o);
		return -EBADMSG;
	}
	*out = o;
	return 0;
}

static struct json_object *field(struct json_object *o, const char *key)
{
	struct json_object *f = NULL;

	if (o == NULL || !json_object_object_get_ex(o, key, &f))
		return NULL;
	return f;
}

const char *jsonp_str(struct json_object *o, const char *key)
{
	struct json_object *f = field(o, key);

	return json_object_is_type(f, json_type_string) ? json_object_get_string(f) : NULL;
}

bool jsonp_bool(struct json_object *o, const char *key, bool dflt)
{
	struct json_object *f = field(o, key);

	if (json_object_is_type(f, json_type_boolean))
		return json_object_get_boolean(f);
	if (json_object_is_type(f, json_type_int))
		return json_object_get_int64(f) != 0;
	return dflt;
}

bool jsonp_int(struct json_object *o, const char *key, long long *v)
{
	struct json_object *f = field(o, key);

	if (!json_object_is_type(f, json_type_int))
		return false;
	*v = json_object_get_int64(f);
	return true;
}
