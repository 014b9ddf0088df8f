/*
 * Fuzz target for master/master_py.h, Python's semantics as the netpunch
 * door applies them: the whole input as an HTTP body through
 * master_py_json_loads (json.loads), each member of a top-level object
 * through str()[:n] and the reference's _int(), and the input up to its
 * first NUL as a query value through int() and float().
 *
 * Invariants checked:
 * - loads returns 0 or -EBADMSG; on -EBADMSG *out is NULL and err reads
 *   "offset N: ..." with N at most the input's length;
 * - input that is not strict UTF-8 (checked here on its own: no overlong
 *   forms, no encoded surrogates, nothing past U+10FFFF) is refused, as
 *   bytes.decode("utf-8") refuses it;
 * - round trip: a loaded value written back as json.dumps would (U+0000 as
 *   \u0000, a lone surrogate as \udxxx, an integer past 64 bits with its
 *   digits, NaN and Infinity) loads again and writes back to the same
 *   text, and str() of both loads is the same text;
 * - master_py_field_str gives whole characters, at most n of them and
 *   size - 1 bytes, a prefix of str(v), and the longest such prefix;
 * - master_py_field_int_or is _int(): alt for a falsy value, int() clamped
 *   to [lo, hi], the default where int() raises (containers, NaN, inf, a
 *   string int() refuses); for a string, what master_py_int_str says;
 * - master_py_int_str agrees over ASCII text with the int() grammar
 *   written out here (spaces around, one sign, digits with single
 *   underscores between them, saturated past 64 bits); whatever int()
 *   takes, float() takes too, with the same value below 2^53.
 */
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "master_py.h"
#include "pyjson.h"
#include "strbuf.h"

#define BIG      ((size_t)64 << 20) /* strbuf cap for what we write back */
#define FIELDS   (8)                /* members of an object looked at */
#define EXACT_53 (9007199254740992LL)

/* Strict UTF-8 (Unicode 15, table 3-7), written apart from master_py's. */
static bool utf8_ok(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint8_t c = s[i], lo = 0x80, hi = 0xbf;
		size_t k;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			k = 1;
		else if (c >= 0xe0 && c <= 0xef)
			k = 2;
		else if (c >= 0xf0 && c <= 0xf4)
			k = 3;
		else
			return false;
		if (c == 0xe0)
			lo = 0xa0;
		else if (c == 0xed)
			hi = 0x9f;
		else if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;
		if (n - i <= k || s[i + 1] < lo || s[i + 1] > hi)
			return false;
		for (size_t j = 2; j <= k; j++) {
			if ((s[i + j] & 0xc0) != 0x80)
				return false;
		}
		i += k + 1;
	}
	return true;
}

static void put(struct strbuf *b, const char *s)
{
	strbuf_append(b, s, strlen(s));
}

/* json.dumps(v) (separators and ensure_ascii as pyjson writes them). */
static void dump(struct json_object *v, struct strbuf *out)
{
	struct pyjson j;
	char buf[40];

	if (v == NULL) {
		put(out, "null");
		return;
	}
	switch (json_object_get_type(v)) {
	case json_type_null:
		put(out, "null");
		break;
	case json_type_boolean:
		put(out, json_object_get_boolean(v) ? "true" : "false");
		break;
	case json_type_int:
		snprintf(buf, sizeof(buf), "%lld", (long long)json_object_get_int64(v));
		put(out, buf);
		break;
	case json_type_double: {
		double d = json_object_get_double(v);

		if (json_object_get_userdata(v) != NULL)
			put(out, json_object_get_userdata(v));
		else if (isnan(d))
			put(out, "NaN");
		else if (isinf(d))
			put(out, d < 0 ? "-Infinity" : "Infinity");
		else
			put(out, pyjson_repr_double(d, buf, sizeof(buf)));
		break;
	}
	case json_type_string:
		pyjson_init(&j, out);
		pyjson_str(&j, json_object_get_string(v), (size_t)json_object_get_string_len(v));
		break;
	case json_type_array: {
		size_t n = json_object_array_length(v);

		put(out, "[");
		for (size_t i = 0; i < n; i++) {
			if (i > 0)
				put(out, ", ");
			dump(json_object_array_get_idx(v, i), out);
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
			pyjson_init(&j, out);
			pyjson_cstr(&j, k);
			put(out, ": ");
			dump(val, out);
		}
		put(out, "}");
		break;
	}
	}
}

static struct json_object *load(const char *text, size_t len, int *r)
{
	struct json_object *v = (struct json_object *)&v; /* poisoned */
	char err[128];

	memset(err, 'X', sizeof(err));
	*r = master_py_json_loads(text, len, &v, err, sizeof(err));
	FUZZ_CHECK(*r == 0 || *r == -EBADMSG);
	if (*r < 0) {
		char *end;
		unsigned long long off;

		FUZZ_CHECK(v == NULL);
		FUZZ_CHECK(memchr(err, '\0', sizeof(err)) != NULL);
		FUZZ_CHECK(strncmp(err, "offset ", 7) == 0 && err[7] >= '0' && err[7] <= '9');
		off = strtoull(err + 7, &end, 10);
		FUZZ_CHECK(off <= len && end[0] == ':' && end[1] == ' ' && end[2] != '\0');
		return NULL;
	}
	return v;
}

/* Bytes of the UTF-8 character that starts with lead byte c. */
static size_t char_len(unsigned char c)
{
	return c < 0xc0 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
}

static void check_field_str(struct json_object *d, const char *key, struct json_object *v,
			    size_t maxchars, size_t size)
{
	struct strbuf full;
	char *dst = malloc(size);
	size_t dl;

	if (dst == NULL)
		return;
	strbuf_init(&full, BIG);
	if (v != NULL)
		master_py_str(v, &full);
	strbuf_append(&full, "", 0);
	FUZZ_CHECK(!full.bad);
	memset(dst, 'X', size);
	master_py_field_str(d, key, maxchars, dst, size);
	dl = strnlen(dst, size);
	FUZZ_CHECK(dl < size);
	FUZZ_CHECK(master_py_utf8_chars(dst) <= maxchars);
	FUZZ_CHECK(dl <= full.len && memcmp(dst, full.p, dl) == 0);
	if (dl < full.len) {
		/* Cut on a character boundary, and only where a limit says. */
		FUZZ_CHECK(((unsigned char)full.p[dl] & 0xc0) != 0x80);
		if (full.len <= 4096)
			FUZZ_CHECK(master_py_utf8_chars(dst) == maxchars ||
				   dl + char_len((unsigned char)full.p[dl]) >= size);
	}
	strbuf_release(&full);
	free(dst);
}

static long long clamp(long long x, long long lo, long long hi)
{
	return x < lo ? lo : x > hi ? hi : x;
}

static void check_field_int(struct json_object *d, const char *key, struct json_object *v)
{
	const int alt = 8, dflt = -7777, lo = -1000, hi = 1000;
	int got = master_py_field_int_or(d, key, alt, dflt, lo, hi);
	long long want;

	if (!master_py_truthy(v)) {
		want = alt;
	} else {
		switch (json_object_get_type(v)) {
		case json_type_boolean:
			want = 1;
			break;
		case json_type_int:
			want = clamp(json_object_get_int64(v), lo, hi);
			break;
		case json_type_double: {
			double x = json_object_get_double(v);

			if (isnan(x) || isinf(x))
				want = dflt;
			else
				want = x >= hi ? hi : x <= lo ? lo : (long long)x;
			break;
		}
		case json_type_string: {
			long long x;

			want = master_py_int_str(json_object_get_string(v), &x) ? clamp(x, lo, hi)
										: dflt;
			break;
		}
		default: /* int() of a list or dict: TypeError */
			want = dflt;
			break;
		}
	}
	FUZZ_CHECK(got == want);
}

static void check_body(const uint8_t *data, size_t size)
{
	struct json_object *v, *v2;
	struct strbuf t1, t2, s1, s2;
	unsigned sum = 0;
	size_t k = 0;
	int r;

	v = load((const char *)data, size, &r);
	if (!utf8_ok(data, size))
		FUZZ_CHECK(r == -EBADMSG);
	if (r < 0)
		return;

	strbuf_init(&t1, BIG);
	strbuf_init(&t2, BIG);
	strbuf_init(&s1, BIG);
	strbuf_init(&s2, BIG);
	dump(v, &t1);
	FUZZ_CHECK(!t1.bad);
	v2 = load(t1.p, t1.len, &r);
	if (r != 0)
		fprintf(stderr, "reload failed: %.*s\n", (int)(t1.len > 512 ? 512 : t1.len), t1.p);
	FUZZ_CHECK(r == 0);
	dump(v2, &t2);
	FUZZ_CHECK(t1.len == t2.len && memcmp(t1.p, t2.p, t1.len) == 0);
	master_py_str(v, &s1);
	master_py_str(v2, &s2);
	FUZZ_CHECK(!s1.bad && !s2.bad);
	FUZZ_CHECK(s1.len == s2.len && (s1.len == 0 || memcmp(s1.p, s2.p, s1.len) == 0));
	json_object_put(v2);
	strbuf_release(&t1);
	strbuf_release(&t2);
	strbuf_release(&s1);
	strbuf_release(&s2);

	/* The handlers' view: fields of an object, with limits that vary
	 * with the input (the door's are 16 to 4,096 characters). */
	if (v != NULL && json_object_is_type(v, json_type_object)) {
		for (size_t i = 0; i < size; i++)
			sum = sum * 31 + data[i];
		json_object_object_foreach(v, key, val)
		{
			if (k++ == FIELDS)
				break;
			check_field_str(v, key, val, (sum >> (k * 3)) % 80, 1 + (sum >> k) % 300);
			check_field_int(v, key, val);
		}
		check_field_str(v, "no such key\x01", NULL, 10, 10);
		check_field_int(v, "no such key\x01", NULL);
	}
	json_object_put(v);
}

static bool ascii_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* int(s) of ASCII text, base 10, saturated to +-LLONG_MAX as the door
 * wants it (its clamps absorb the rest). */
static bool ref_int(const char *s, long long *out)
{
	size_t b = 0, e = strlen(s), digits = 0;
	bool neg = false, over = false;
	unsigned long long v = 0;

	while (b < e && ascii_space(s[b]))
		b++;
	while (e > b && ascii_space(s[e - 1]))
		e--;
	if (b < e && (s[b] == '+' || s[b] == '-'))
		neg = s[b++] == '-';
	for (size_t i = b; i < e; i++) {
		bool digit = s[i] >= '0' && s[i] <= '9';

		if (s[i] == '_' && i > b && i + 1 < e && s[i - 1] != '_' && s[i + 1] != '_')
			continue; /* between two digits: both sides are checked as digits */
		if (!digit)
			return false;
		digits++;
		if (!over && v > ((unsigned long long)LLONG_MAX - (unsigned)(s[i] - '0')) / 10)
			over = true;
		else if (!over)
			v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (digits == 0)
		return false;
	*out = over ? (neg ? -LLONG_MAX : LLONG_MAX) : neg ? -(long long)v : (long long)v;
	return true;
}

static void check_query(const uint8_t *data, size_t size)
{
	size_t n = strnlen((const char *)data, size);
	char *q = malloc(n + 1);
	bool int_ok, float_ok, ascii = true;
	long long iv = 0, rv = 0;
	double fv = 0;

	if (q == NULL)
		return;
	memcpy(q, data, n);
	q[n] = '\0';
	for (size_t i = 0; i < n; i++)
		ascii = ascii && data[i] < 0x80;
	int_ok = master_py_int_str(q, &iv);
	float_ok = master_py_float_str(q, &fv);
	if (ascii) {
		bool ref_ok = ref_int(q, &rv);

		if (ref_ok != int_ok || (ref_ok && rv != iv))
			fprintf(stderr, "int(%.*s): ours %d %lld, reference %d %lld\n",
				(int)(n > 200 ? 200 : n), q, int_ok, iv, ref_ok, rv);
		FUZZ_CHECK(ref_ok == int_ok && (!ref_ok || rv == iv));
	}
	if (int_ok) {
		FUZZ_CHECK(float_ok);
		if (iv > -EXACT_53 && iv < EXACT_53)
			FUZZ_CHECK(fv == (double)iv);
	}
	free(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_body(data, size);
	check_query(data, size);
	return 0;
}
