#include "pyjson.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"

void pyjson_init(struct pyjson *j, struct strbuf *out)
{
	memset(j, 0, sizeof(*j));
	j->out = out;
}

static void put(struct pyjson *j, const char *s, size_t n)
{
	strbuf_append(j->out, s, n);
}

static void puts_(struct pyjson *j, const char *s)
{
	put(j, s, strlen(s));
}

/* Before any value: the separator after a sibling, nothing after a key. */
static void before_value(struct pyjson *j)
{
	if (j->after_key) {
		j->after_key = false;
		return;
	}
	if (j->depth > 0) {
		if (!j->first[j->depth - 1])
			put(j, ", ", 2);
		j->first[j->depth - 1] = false;
	}
}

static void open_(struct pyjson *j, char c)
{
	before_value(j);
	put(j, &c, 1);
	if (j->depth == PYJSON_MAX_DEPTH) {
		j->bad = true;
		return;
	}
	j->first[j->depth++] = true;
}

static void close_(struct pyjson *j, char c)
{
	if (j->depth > 0)
		j->depth--;
	put(j, &c, 1);
}

void pyjson_obj_begin(struct pyjson *j)
{
	open_(j, '{');
}

void pyjson_obj_end(struct pyjson *j)
{
	close_(j, '}');
}

void pyjson_arr_begin(struct pyjson *j)
{
	open_(j, '[');
}

void pyjson_arr_end(struct pyjson *j)
{
	close_(j, ']');
}

static void put_u(struct pyjson *j, unsigned cp)
{
	char b[8];

	snprintf(b, sizeof(b), "\\u%04x", cp);
	put(j, b, 6);
}

/* Decodes one UTF-8 sequence at s (n bytes left); 0 for invalid. */
static size_t utf8_next(const unsigned char *s, size_t n, unsigned *cp)
{
	unsigned c = s[0], need, min;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if ((c & 0xe0) == 0xc0) {
		need = 1;
		min = 0x80;
		*cp = c & 0x1f;
	} else if ((c & 0xf0) == 0xe0) {
		need = 2;
		min = 0x800;
		*cp = c & 0x0f;
	} else if ((c & 0xf8) == 0xf0) {
		need = 3;
		min = 0x10000;
		*cp = c & 0x07;
	} else {
		return 0;
	}
	if (need >= n)
		return 0;
	for (unsigned i = 1; i <= need; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		*cp = (*cp << 6) | (s[i] & 0x3f);
	}
	if (*cp < min || *cp > 0x10ffff || (*cp >= 0xd800 && *cp <= 0xdfff))
		return 0;
	return need + 1;
}

static void put_string(struct pyjson *j, const char *str, size_t len)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0, run = 0;

	put(j, "\"", 1);
	while (i < len) {
		unsigned char c = s[i];
		unsigned cp;
		size_t n;

		/* Plain printable ASCII goes out in runs. */
		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
			run++;
			i++;
			continue;
		}
		if (run > 0) {
			put(j, str + i - run, run);
			run = 0;
		}
		switch (c) {
		case '"':
			put(j, "\\\"", 2);
			i++;
			continue;
		case '\\':
			put(j, "\\\\", 2);
			i++;
			continue;
		case '\n':
			put(j, "\\n", 2);
			i++;
			continue;
		case '\r':
			put(j, "\\r", 2);
			i++;
			continue;
		case '\t':
			put(j, "\\t", 2);
			i++;
			continue;
		case '\b':
			put(j, "\\b", 2);
			i++;
			continue;
		case '\f':
			put(j, "\\f", 2);
			i++;
			continue;
		default:
			break;
		}
		if (c < 0x80) { /* other control characters and DEL */
			put_u(j, c);
			i++;
			continue;
		}
		/* What a Python str holds and UTF-8 cannot (master_py's
		 * json.loads keeps them): U+0000 as C0 80, lone surrogates as
		 * ED A0..BF xx; json.dumps writes \u0000 and \udxxx. */
		if (c == 0xc0 && i + 1 < len && s[i + 1] == 0x80) {
			put_u(j, 0);
			i += 2;
			continue;
		}
		if (c == 0xed && i + 2 < len && (s[i + 1] & 0xe0) == 0xa0 &&
		    (s[i + 2] & 0xc0) == 0x80) {
			put_u(j, 0xd000 | (unsigned)(s[i + 1] & 0x3f) << 6 | (s[i + 2] & 0x3f));
			i += 3;
			continue;
		}
		n = utf8_next(s + i, len - i, &cp);
		if (n == 0) {
			put_u(j, 0xfffd);
			i++;
			continue;
		}
		if (cp >= 0x10000) {
			cp -= 0x10000;
			put_u(j, 0xd800 | (cp >> 10));
			put_u(j, 0xdc00 | (cp & 0x3ff));
		} else {
			put_u(j, cp);
		}
		i += n;
	}
	if (run > 0)
		put(j, str + i - run, run);
	put(j, "\"", 1);
}

void pyjson_key(struct pyjson *j, const char *k)
{
	before_value(j);
	put_string(j, k, strlen(k));
	put(j, ": ", 2);
	j->after_key = true;
}

void pyjson_str(struct pyjson *j, const char *s, size_t len)
{
	before_value(j);
	put_string(j, s, len);
}

void pyjson_cstr(struct pyjson *j, const char *s)
{
	pyjson_str(j, s, strlen(s));
}

void pyjson_int(struct pyjson *j, long long v)
{
	char b[24];

	before_value(j);
	snprintf(b, sizeof(b), "%lld", v);
	puts_(j, b);
}

void pyjson_bool(struct pyjson *j, bool v)
{
	before_value(j);
	puts_(j, v ? "true" : "false");
}

void pyjson_raw(struct pyjson *j, const char *json, size_t len)
{
	before_value(j);
	put(j, json, len);
}

void pyjson_null(struct pyjson *j)
{
	before_value(j);
	puts_(j, "null");
}

/*
 * repr(float): the shortest of %.{1..17}e that reads back as v gives the
 * digits and the decimal exponent; then Python's float_repr_style "short"
 * layout: fixed notation when -4 <= exp < 16 (always with a fractional part,
 * "1.0"), scientific otherwise ("1e+16", "1.5e-05": at least two exponent
 * digits, no trailing ".0").
 */
const char *pyjson_repr_double(double v, char *buf, size_t size)
{
	char e[40], digits[20];
	int prec, exp, nd = 0;
	char *p;
	bool neg;

	if (isnan(v)) {
		snprintf(buf, size, "NaN");
		return buf;
	}
	if (isinf(v)) {
		snprintf(buf, size, v < 0 ? "-Infinity" : "Infinity");
		return buf;
	}
	if (v == 0) {
		snprintf(buf, size, signbit(v) ? "-0.0" : "0.0");
		return buf;
	}
	for (prec = 0; prec < 17; prec++) {
		snprintf(e, sizeof(e), "%.*e", prec, v);
		if (strtod(e, NULL) == v)
			break;
	}
	/* e is "-d.ddde+XX": collect the digits and the exponent. */
	neg = e[0] == '-';
	for (p = e + (neg ? 1 : 0); *p != 'e'; p++) {
		if (*p >= '0' && *p <= '9')
			digits[nd++] = *p;
	}
	exp = atoi(p + 1);
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = '\0';

	if (exp >= -4 && exp < 16) {
		char out[48];
		size_t o = 0;

		if (neg)
			out[o++] = '-';
		if (exp < 0) {
			out[o++] = '0';
			out[o++] = '.';
			for (int i = 0; i < -exp - 1; i++)
				out[o++] = '0';
			for (int i = 0; i < nd; i++)
				out[o++] = digits[i];
		} else {
			for (int i = 0; i <= exp; i++)
				out[o++] = i < nd ? digits[i] : '0';
			out[o++] = '.';
			if (nd > exp + 1) {
				for (int i = exp + 1; i < nd; i++)
					out[o++] = digits[i];
			} else {
				out[o++] = '0';
			}
		}
		out[o] = '\0';
		snprintf(buf, size, "%s", out);
	} else {
		snprintf(buf, size, "%s%c%s%s%se%c%02d", neg ? "-" : "", digits[0],
			 nd > 1 ? "." : "", nd > 1 ? digits + 1 : "", "", exp < 0 ? '-' : '+',
			 exp < 0 ? -exp : exp);
	}
	return buf;
}

void pyjson_float(struct pyjson *j, double v)
{
	char b[40];

	before_value(j);
	puts_(j, pyjson_repr_double(v, b, sizeof(b)));
}
