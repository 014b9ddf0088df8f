#include "master_py.h"

#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

#include "pyjson.h"
#include "strbuf.h"

/*
 * json.loads nests as deep as Python's recursion limit lets it: the
 * reference (3.11, in its handler thread) takes 985 levels and drops the
 * connection on the 986th (RecursionError); we answer that one 400.
 */
#define PY_DEPTH (985)

/* ---- json.loads ---- */

/*
 * The values are Python's, built as json-c objects with three conventions,
 * so the C strings and the printers downstream keep them:
 *   - U+0000 in a string or key is stored as C0 80 (modified UTF-8);
 *   - a lone surrogate escape (\ud800 not followed by a low one) is kept as
 *     its 3-byte form (ED A0..BF xx), as Python's str keeps it;
 *   - an integer beyond int64 is a double carrying its digits as userdata
 *     (master_py_str prints them; int() of it saturates, which the clamps
 *     absorb).
 * json-c's own parser would give \ufffd, cut at the NUL and saturate.
 */
struct scan {
	const unsigned char *p;
	size_t left;
	int depth;
	const char *why;
	struct strbuf str; /* the string just read, decoded */
};

static void ws(struct scan *s)
{
	while (s->left > 0 && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) {
		s->p++;
		s->left--;
	}
}

static bool lit(struct scan *s, const char *word)
{
	size_t n = strlen(word);

	if (s->left < n || memcmp(s->p, word, n) != 0)
		return false;
	s->p += n;
	s->left -= n;
	return true;
}

static bool hex4(const unsigned char *p)
{
	for (int i = 0; i < 4; i++) {
		unsigned char c = p[i];

		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
			return false;
	}
	return true;
}

static uint32_t hex4_value(const unsigned char *p)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++)
		v = v << 4 | (uint32_t)(p[i] <= '9' ? p[i] - '0' : (p[i] | 0x20) - 'a' + 10);
	return v;
}

/* Appends one code point: UTF-8, but U+0000 as C0 80 and surrogates as
 * their 3-byte form (see above). */
static void put_cp(struct strbuf *b, uint32_t cp)
{
	char u[4];
	size_t n;

	if (cp == 0) {
		u[0] = (char)0xc0;
		u[1] = (char)0x80;
		n = 2;
	} else if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xc0 | cp >> 6);
		u[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xe0 | cp >> 12);
		u[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		u[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		u[0] = (char)(0xf0 | cp >> 18);
		u[1] = (char)(0x80 | (cp >> 12 & 0x3f));
		u[2] = (char)(0x80 | (cp >> 6 & 0x3f));
		u[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	strbuf_append(b, u, n);
}

/*
 * A string into s->str: no raw control characters (json's strict mode),
 * known escapes; a high surrogate escape joins a low one right after it.
 */
static bool string(struct scan *s)
{
	s->str.len = 0;
	strbuf_append(&s->str, "", 0);
	s->p++;
	s->left--;
	while (s->left > 0) {
		unsigned char c = *s->p;

		if (c == '"') {
			s->p++;
			s->left--;
			if (s->str.bad)
				s->why = "out of memory";
			return !s->str.bad;
		}
		if (c < 0x20) {
			s->why = "invalid control character";
			return false;
		}
		if (c == '\\') {
			static const char names[] = "\"\\/bfnrt", chars[] = "\"\\/\b\f\n\r\t";
			const char *esc;

			if (s->left < 2)
				break;
			c = s->p[1];
			if (c == 'u') {
				uint32_t cp, lo;

				if (s->left < 6 || !hex4(s->p + 2)) {
					s->why = "invalid \\uXXXX escape";
					return false;
				}
				cp = hex4_value(s->p + 2);
				s->p += 6;
				s->left -= 6;
				if (cp >= 0xd800 && cp <= 0xdbff && s->left >= 6 &&
				    s->p[0] == '\\' && s->p[1] == 'u' && hex4(s->p + 2) &&
				    (lo = hex4_value(s->p + 2)) >= 0xdc00 && lo <= 0xdfff) {
					cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
					s->p += 6;
					s->left -= 6;
				}
				put_cp(&s->str, cp);
				continue;
			}
			esc = c == '\0' ? NULL : strchr(names, c);
			if (esc == NULL) {
				s->why = "invalid escape";
				return false;
			}
			strbuf_append(&s->str, &chars[esc - names], 1);
			s->p += 2;
			s->left -= 2;
			continue;
		}
		strbuf_append(&s->str, (const char *)s->p, 1);
		s->p++;
		s->left--;
	}
	s->why = "unterminated string";
	return false;
}

static bool digits(struct scan *s)
{
	size_t n = 0;

	while (s->left > 0 && *s->p >= '0' && *s->p <= '9') {
		s->p++;
		s->left--;
		n++;
	}
	return n > 0;
}

/*
 * -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?, or -Infinity: an int
 * without fraction and exponent (Python's ints have no limit), else a float
 * (strtod rounds correctly, as float() does).
 */
static bool number(struct scan *s, struct json_object **out)
{
	const unsigned char *start = s->p;
	bool is_float = false;
	char *text;
	size_t n;

	if (s->left > 0 && *s->p == '-') {
		s->p++;
		s->left--;
		if (lit(s, "Infinity")) {
			*out = json_object_new_double(-INFINITY);
			return *out != NULL;
		}
	}
	if (s->left == 0)
		return false;
	if (*s->p == '0') {
		s->p++;
		s->left--;
	} else if (!digits(s)) {
		return false;
	}
	if (s->left > 0 && *s->p == '.') {
		s->p++;
		s->left--;
		is_float = true;
		if (!digits(s))
			return false;
	}
	if (s->left > 0 && (*s->p == 'e' || *s->p == 'E')) {
		s->p++;
		s->left--;
		is_float = true;
		if (s->left > 0 && (*s->p == '+' || *s->p == '-')) {
			s->p++;
			s->left--;
		}
		if (!digits(s))
			return false;
	}
	n = (size_t)(s->p - start);
	text = malloc(n + 1);
	if (text == NULL) {
		s->why = "out of memory";
		return false;
	}
	memcpy(text, start, n);
	text[n] = '\0';
	if (is_float) {
		*out = json_object_new_double(strtod(text, NULL));
	} else {
		long long v;

		errno = 0;
		v = strtoll(text, NULL, 10);
		if (errno == ERANGE)
			*out = json_object_new_double_s(strtod(text, NULL), text);
		else
			*out = json_object_new_int64(v);
	}
	free(text);
	return *out != NULL;
}

static bool value(struct scan *s, struct json_object **out);

static bool container(struct scan *s, bool object, struct json_object **out)
{
	char close = object ? '}' : ']';
	struct json_object *c;

	if (++s->depth > PY_DEPTH) {
		s->why = "nested too deep";
		return false;
	}
	c = object ? json_object_new_object() : json_object_new_array();
	if (c == NULL)
		return false;
	s->p++;
	s->left--;
	ws(s);
	if (s->left > 0 && *s->p == (unsigned char)close) {
		s->p++;
		s->left--;
		s->depth--;
		*out = c;
		return true;
	}
	for (;;) {
		struct json_object *v = NULL;
		char *key = NULL;

		if (object) {
			ws(s);
			if (s->left == 0 || *s->p != '"' || !string(s))
				goto fail;
			key = strdup(s->str.p);
			if (key == NULL)
				goto fail;
			ws(s);
			if (s->left == 0 || *s->p != ':') {
				free(key);
				goto fail;
			}
			s->p++;
			s->left--;
		}
		if (!value(s, &v)) {
			free(key);
			goto fail;
		}
		/* A repeated key keeps its place and takes the last value, as
		 * a dict does. */
		if (object ? json_object_object_add(c, key, v) != 0
			   : json_object_array_add(c, v) != 0) {
			json_object_put(v);
			free(key);
			goto fail;
		}
		free(key);
		ws(s);
		if (s->left == 0)
			goto fail;
		if (*s->p == ',') {
			s->p++;
			s->left--;
			continue;
		}
		if (*s->p == (unsigned char)close) {
			s->p++;
			s->left--;
			s->depth--;
			*out = c;
			return true;
		}
		goto fail;
	}
fail:
	json_object_put(c);
	return false;
}

/* One value into *out (NULL for null). */
static bool value(struct scan *s, struct json_object **out)
{
	*out = NULL;
	ws(s);
	if (s->left == 0)
		return false;
	switch (*s->p) {
	case '{':
		return container(s, true, out);
	case '[':
		return container(s, false, out);
	case '"':
		if (!string(s))
			return false;
		*out = json_object_new_string_len(s->str.p, (int)s->str.len);
		return *out != NULL;
	case 't':
		return lit(s, "true") && (*out = json_object_new_boolean(1)) != NULL;
	case 'f':
		return lit(s, "false") && (*out = json_object_new_boolean(0)) != NULL;
	case 'n':
		return lit(s, "null");
	case 'N':
		return lit(s, "NaN") && (*out = json_object_new_double(NAN)) != NULL;
	case 'I':
		return lit(s, "Infinity") && (*out = json_object_new_double(INFINITY)) != NULL;
	default:
		return number(s, out);
	}
}

/*
 * bytes.decode("utf-8") before json.loads: well-formed UTF-8 only, no
 * overlong forms, no encoded surrogates, nothing above U+10FFFF (json-c's
 * check lets all three through).
 */
static bool utf8_strict(const unsigned char *p, size_t n, size_t *bad)
{
	size_t i = 0;

	while (i < n) {
		unsigned c = p[i];
		uint32_t cp, min;
		size_t k;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			k = 1;
			cp = c & 0x1f;
			min = 0x80;
		} else if ((c & 0xf0) == 0xe0) {
			k = 2;
			cp = c & 0x0f;
			min = 0x800;
		} else if (c >= 0xf0 && c <= 0xf4) {
			k = 3;
			cp = c & 0x07;
			min = 0x10000;
		} else {
			*bad = i;
			return false;
		}
		for (size_t j = 1; j <= k; j++) {
			if (i + j >= n || (p[i + j] & 0xc0) != 0x80) {
				*bad = i;
				return false;
			}
			cp = cp << 6 | (p[i + j] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
			*bad = i;
			return false;
		}
		i += k + 1;
	}
	return true;
}

int master_py_json_loads(const char *text, size_t len, struct json_object **out, char *err,
			 size_t errsize)
{
	struct scan s = {(const unsigned char *)text, len, 0, NULL, {0}};
	size_t bad;
	bool ok;

	*out = NULL;
	if (!utf8_strict(s.p, len, &bad)) {
		snprintf(err, errsize, "offset %zu: not UTF-8", bad);
		return -EBADMSG;
	}
	strbuf_init(&s.str, len + 8);
	ok = value(&s, out);
	strbuf_release(&s.str);
	if (!ok) {
		snprintf(err, errsize, "offset %zu: %s", len - s.left, s.why ? s.why : "not JSON");
		return -EBADMSG;
	}
	ws(&s);
	if (s.left != 0) {
		snprintf(err, errsize, "offset %zu: extra data", len - s.left);
		json_object_put(*out);
		*out = NULL;
		return -EBADMSG;
	}
	return 0;
}

/* ---- str() and repr() ---- */

static void put(struct strbuf *b, const char *s)
{
	strbuf_append(b, s, strlen(s));
}

static void py_float_text(double v, struct strbuf *out)
{
	char buf[40];

	if (isnan(v))
		put(out, "nan");
	else if (isinf(v))
		put(out, v < 0 ? "-inf" : "inf");
	else
		put(out, pyjson_repr_double(v, buf, sizeof(buf)));
}

/* Decodes one UTF-8 character; returns its length (1 for a bad byte). */
static size_t utf8_at(const unsigned char *s, size_t n, uint32_t *cp)
{
	if (s[0] < 0x80 || n < 2) {
		*cp = s[0];
		return 1;
	}
	if ((s[0] & 0xe0) == 0xc0) {
		*cp = (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
		return 2;
	}
	if ((s[0] & 0xf0) == 0xe0 && n >= 3) {
		*cp = (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
		return 3;
	}
	if ((s[0] & 0xf8) == 0xf0 && n >= 4) {
		*cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 |
		      (uint32_t)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
		return 4;
	}
	*cp = s[0];
	return 1;
}

/* str.isspace() beyond ASCII. */
static bool py_space_cp(uint32_t cp)
{
	return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
	       cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/*
 * str.isprintable() of one character: glibc's iswprint() in C.UTF-8 (glibc
 * 2.36 and Python 3.11 both read Unicode 14) less what Python also counts
 * as unprintable: format characters (Cf, below), private use (Co) and the
 * spaces other than ' ' (Zs). Checked against Python for every code point.
 */
static bool py_printable(uint32_t cp)
{
	static const uint32_t cf[][2] = {
		{0xad, 0xad},       {0x600, 0x605},     {0x61c, 0x61c},     {0x6dd, 0x6dd},
		{0x70f, 0x70f},     {0x890, 0x891},     {0x8e2, 0x8e2},     {0x180e, 0x180e},
		{0x200b, 0x200f},   {0x202a, 0x202e},   {0x2060, 0x2064},   {0x2066, 0x206f},
		{0xfeff, 0xfeff},   {0xfff9, 0xfffb},   {0x110bd, 0x110bd}, {0x110cd, 0x110cd},
		{0x13430, 0x13438}, {0x1bca0, 0x1bca3}, {0x1d173, 0x1d17a}, {0xe0001, 0xe0001},
		{0xe0020, 0xe007f},
	};
	static locale_t utf8;

	if (cp < 0x7f)
		return cp >= 0x20;
	if (py_space_cp(cp) || (cp >= 0xe000 && cp <= 0xf8ff) || cp >= 0xf0000)
		return false;
	for (size_t i = 0; i < sizeof(cf) / sizeof(cf[0]); i++) {
		if (cp >= cf[i][0] && cp <= cf[i][1])
			return false;
	}
	if (utf8 == (locale_t)0)
		utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
	if (utf8 == (locale_t)0)
		return cp > 0xa0; /* no C.UTF-8: C1 controls only */
	return iswprint_l((wint_t)cp, utf8) != 0;
}

/*
 * repr(str): single quotes unless the text has a single quote and no double
 * one; backslash escapes for the quote, backslash, \t \n \r and other
 * non-printable characters (\xhh, \uhhhh, \Uhhhhhhhh).
 */
static void py_repr_str(const char *str, size_t len, struct strbuf *out)
{
	const unsigned char *s = (const unsigned char *)str;
	bool has_sq = memchr(str, '\'', len) != NULL, has_dq = memchr(str, '"', len) != NULL;
	char q = has_sq && !has_dq ? '"' : '\'';
	size_t i = 0;

	strbuf_append(out, &q, 1);
	while (i < len) {
		uint32_t cp;
		size_t n = utf8_at(s + i, len - i, &cp);
		char esc[16];

		if (cp == '\\') {
			put(out, "\\\\");
		} else if (cp == (uint32_t)q) {
			esc[0] = '\\';
			esc[1] = q;
			strbuf_append(out, esc, 2);
		} else if (cp == '\t') {
			put(out, "\\t");
		} else if (cp == '\n') {
			put(out, "\\n");
		} else if (cp == '\r') {
			put(out, "\\r");
		} else if (py_printable(cp)) {
			strbuf_append(out, str + i, n);
		} else {
			if (cp < 0x100)
				snprintf(esc, sizeof(esc), "\\x%02x", cp);
			else if (cp < 0x10000)
				snprintf(esc, sizeof(esc), "\\u%04x", cp);
			else
				snprintf(esc, sizeof(esc), "\\U%08x", cp);
			put(out, esc);
		}
		i += n;
	}
	strbuf_append(out, &q, 1);
}

static void py_repr(struct json_object *v, struct strbuf *out)
{
	if (v == NULL) {
		put(out, "None");
		return;
	}
	switch (json_object_get_type(v)) {
	case json_type_string:
		py_repr_str(json_object_get_string(v), (size_t)json_object_get_string_len(v), out);
		break;
	case json_type_array: {
		size_t n = json_object_array_length(v);

		put(out, "[");
		for (size_t i = 0; i < n; i++) {
			if (i > 0)
				put(out, ", ");
			py_repr(json_object_array_get_idx(v, i), out);
		}
		put(out, "]");
		break;
	}
	case json_type_object: {
		bool first = true;

		put(out, "{");
		json_object_object_foreach(v, k, val)
		{
			if (!first)
				put(out, ", ");
			first = false;
			py_repr_str(k, strlen(k), out);
			put(out, ": ");
			py_repr(val, out);
		}
		put(out, "}");
		break;
	}
	default:
		master_py_str(v, out);
		break;
	}
}

void master_py_str(struct json_object *v, struct strbuf *out)
{
	char buf[32];

	if (v == NULL) {
		put(out, "None");
		return;
	}
	switch (json_object_get_type(v)) {
	case json_type_null:
		put(out, "None");
		break;
	case json_type_boolean:
		put(out, json_object_get_boolean(v) ? "True" : "False");
		break;
	case json_type_int:
		snprintf(buf, sizeof(buf), "%lld", (long long)json_object_get_int64(v));
		put(out, buf);
		break;
	case json_type_double:
		/* An integer beyond int64 carries its digits
		 * (master_py_json_loads). */
		if (json_object_get_userdata(v) != NULL)
			put(out, json_object_get_userdata(v));
		else
			py_float_text(json_object_get_double(v), out);
		break;
	case json_type_string:
		strbuf_append(out, json_object_get_string(v),
			      (size_t)json_object_get_string_len(v));
		break;
	case json_type_array:
	case json_type_object:
		py_repr(v, out);
		break;
	}
}

size_t master_py_utf8_chars(const char *s)
{
	size_t n = 0;

	for (; *s != '\0'; s++) {
		if (((unsigned char)*s & 0xc0) != 0x80)
			n++;
	}
	return n;
}

void master_py_cut(const char *s, size_t n, char *dst, size_t size)
{
	size_t i = 0, chars = 0;

	/* Walk whole characters while both limits allow. */
	while (s[i] != '\0') {
		size_t k = 1;

		while (s[i + k] != '\0' && ((unsigned char)s[i + k] & 0xc0) == 0x80)
			k++;
		if (chars == n || i + k >= size)
			break;
		i += k;
		chars++;
	}
	memcpy(dst, s, i);
	dst[i] = '\0';
}

void master_py_field_str(struct json_object *d, const char *key, size_t maxchars, char *dst,
			 size_t size)
{
	struct json_object *v = NULL;
	struct strbuf b;

	dst[0] = '\0';
	if (!json_object_object_get_ex(d, key, &v) || v == NULL)
		return;
	strbuf_init(&b, (maxchars + 1) * 64 + 4096);
	master_py_str(v, &b);
	if (b.p != NULL)
		master_py_cut(b.p, maxchars, dst, size);
	strbuf_release(&b);
}

/* ---- truthiness and numbers ---- */

bool master_py_truthy(struct json_object *v)
{
	if (v == NULL)
		return false;
	switch (json_object_get_type(v)) {
	case json_type_null:
		return false;
	case json_type_boolean:
		return json_object_get_boolean(v);
	case json_type_int:
		return json_object_get_int64(v) != 0;
	case json_type_double:
		return json_object_get_double(v) != 0.0;
	case json_type_string:
		return json_object_get_string_len(v) > 0;
	case json_type_array:
		return json_object_array_length(v) > 0;
	case json_type_object:
		return json_object_object_length(v) > 0;
	}
	return false;
}

bool master_py_truthy_field(struct json_object *d, const char *key)
{
	struct json_object *v = NULL;

	return json_object_object_get_ex(d, key, &v) && master_py_truthy(v);
}

static bool py_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Copies s without surrounding spaces and with digit-separating underscores
 * removed; false when an underscore is not between two digits. */
static bool strip_number(const char *s, char *out, size_t size)
{
	size_t len = strlen(s), o = 0;

	while (len > 0 && py_space(s[len - 1]))
		len--;
	while (len > 0 && py_space(*s)) {
		s++;
		len--;
	}
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '_') {
			if (i == 0 || i + 1 == len || !(s[i - 1] >= '0' && s[i - 1] <= '9') ||
			    !(s[i + 1] >= '0' && s[i + 1] <= '9'))
				return false;
			continue;
		}
		if (o + 1 >= size)
			return false;
		out[o++] = s[i];
	}
	out[o] = '\0';
	return o > 0;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/*
 * int() of ASCII text in base 10: spaces around, one sign, digits with
 * single underscores between two of them, at any length ("0" * 300 + "1"
 * is 1); past int64 the value saturates to +-LLONG_MAX.
 */
static bool int_ascii(const char *s, long long *out)
{
	size_t b = 0, e = strlen(s);
	unsigned long long v = 0;
	bool neg = false, over = false;

	while (e > 0 && py_space(s[e - 1]))
		e--;
	while (b < e && py_space(s[b]))
		b++;
	if (b < e && (s[b] == '+' || s[b] == '-'))
		neg = s[b++] == '-';
	if (b == e)
		return false;
	for (size_t i = b; i < e; i++) {
		unsigned d;

		if (s[i] == '_') {
			if (i == b || i + 1 == e || !is_digit(s[i - 1]) || !is_digit(s[i + 1]))
				return false;
			continue;
		}
		if (!is_digit(s[i]))
			return false;
		d = (unsigned)(s[i] - '0');
		if (over || v > ((unsigned long long)LLONG_MAX - d) / 10)
			over = true;
		else
			v = v * 10 + d;
	}
	if (over)
		*out = neg ? LLONG_MIN + 1 : LLONG_MAX;
	else
		*out = neg ? -(long long)v : (long long)v;
	return true;
}

/* float() of ASCII text, at any length ("9" * 700 is inf). */
static bool float_ascii(const char *s, double *out)
{
	size_t size = strlen(s) + 1;
	char *buf = malloc(size), *end;
	const char *p;
	bool ok = false;

	if (buf == NULL || !strip_number(s, buf, size))
		goto out;
	p = buf + (buf[0] == '+' || buf[0] == '-');
	if (strcasecmp(p, "inf") == 0 || strcasecmp(p, "infinity") == 0) {
		*out = buf[0] == '-' ? -INFINITY : INFINITY;
		ok = true;
		goto out;
	}
	if (strcasecmp(p, "nan") == 0) {
		*out = NAN;
		ok = true;
		goto out;
	}
	/* Decimal only: digits, one dot, an exponent (strtod would take hex). */
	for (const char *q = p; *q != '\0'; q++) {
		if (!(is_digit(*q) || *q == '.' || *q == 'e' || *q == 'E' || *q == '+' ||
		      *q == '-'))
			goto out;
	}
	errno = 0;
	*out = strtod(buf, &end);
	ok = end != buf && *end == '\0';
out:
	free(buf);
	return ok;
}

/*
 * int() and float() of a str first map each non-ASCII whitespace character
 * to ' ' and each Unicode decimal digit (category Nd) to its ASCII digit;
 * any other non-ASCII character makes them fail (CPython's
 * _PyUnicode_TransformDecimalAndSpaceToASCII). "\u0661\u0662" is 12.
 * The zeros of the Nd runs of Unicode 14 (Python 3.11), each followed by
 * its 1..9.
 */
static const uint32_t nd_zeros[] = {
	0x660,   0x6f0,   0x7c0,   0x966,   0x9e6,   0xa66,   0xae6,   0xb66,   0xbe6,   0xc66,
	0xce6,   0xd66,   0xde6,   0xe50,   0xed0,   0xf20,   0x1040,  0x1090,  0x17e0,  0x1810,
	0x1946,  0x19d0,  0x1a80,  0x1a90,  0x1b50,  0x1bb0,  0x1c40,  0x1c50,  0xa620,  0xa8d0,
	0xa900,  0xa9d0,  0xa9f0,  0xaa50,  0xabf0,  0xff10,  0x104a0, 0x10d30, 0x11066, 0x110f0,
	0x11136, 0x111d0, 0x112f0, 0x11450, 0x114d0, 0x11650, 0x116c0, 0x11730, 0x118e0, 0x11950,
	0x11c50, 0x11d50, 0x11da0, 0x16a60, 0x16ac0, 0x16b50, 0x1d7ce, 0x1d7d8, 0x1d7e2, 0x1d7ec,
	0x1d7f6, 0x1e140, 0x1e2f0, 0x1e950, 0x1fbf0,
};

/* The ASCII text int()/float() parse, malloc'd; NULL when it fails. */
static char *number_ascii(const char *s)
{
	size_t len = strlen(s), i = 0, o = 0;
	char *a = calloc(len + 1, 1);

	if (a == NULL)
		return NULL;
	while (i < len) {
		uint32_t cp;
		size_t n = utf8_at((const unsigned char *)s + i, len - i, &cp);
		size_t k;

		i += n;
		if (cp < 0x7f && n == 1) {
			a[o++] = (char)cp;
			continue;
		}
		if (py_space_cp(cp)) {
			a[o++] = ' ';
			continue;
		}
		for (k = 0; k < sizeof(nd_zeros) / sizeof(nd_zeros[0]); k++) {
			if (cp >= nd_zeros[k] && cp <= nd_zeros[k] + 9)
				break;
		}
		if (k == sizeof(nd_zeros) / sizeof(nd_zeros[0])) {
			free(a);
			return NULL;
		}
		a[o++] = (char)('0' + (cp - nd_zeros[k]));
	}
	a[o] = '\0';
	return a;
}

bool master_py_int_str(const char *s, long long *out)
{
	char *a = number_ascii(s);
	bool ok = a != NULL && int_ascii(a, out);

	free(a);
	return ok;
}

bool master_py_float_str(const char *s, double *out)
{
	char *a = number_ascii(s);
	bool ok = a != NULL && float_ascii(a, out);

	free(a);
	return ok;
}

/* int(v): false when Python raises. */
static bool py_int(struct json_object *v, long long *out)
{
	double d;

	switch (json_object_get_type(v)) {
	case json_type_boolean:
		*out = json_object_get_boolean(v) ? 1 : 0;
		return true;
	case json_type_int:
		*out = json_object_get_int64(v);
		return true;
	case json_type_double:
		d = json_object_get_double(v);
		if (isnan(d) || isinf(d))
			return false;
		*out = d >= 9.2e18 ? LLONG_MAX : d <= -9.2e18 ? LLONG_MIN + 1 : (long long)d;
		return true;
	case json_type_string:
		return master_py_int_str(json_object_get_string(v), out);
	default:
		return false;
	}
}

int master_py_field_int_or(struct json_object *d, const char *key, int alt, int dflt, int lo,
			   int hi)
{
	struct json_object *v = NULL;
	long long x;

	json_object_object_get_ex(d, key, &v);
	if (!master_py_truthy(v))
		x = alt;
	else if (!py_int(v, &x))
		return dflt;
	return x < lo ? lo : x > hi ? hi : (int)x;
}
