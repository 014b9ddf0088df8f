/*
 * Python's semantics for the JSON the netpunch reference reads, so our
 * answers match it value for value: json.loads() (RFC 8259 plus NaN and
 * Infinity, nothing else), str(v)[:n] (cut in characters, not bytes; str()
 * of numbers, booleans, lists and objects as Python writes them), int(v) as
 * the reference's _int() uses it, truthiness, float() of query strings.
 */
#ifndef MASTER_PY_H
#define MASTER_PY_H

#include <stdbool.h>
#include <stddef.h>

struct json_object;
struct strbuf;

/*
 * json.loads() of a body (bytes.decode("utf-8") first): 0 with *out
 * (caller's; NULL for null), or -EBADMSG with err. U+0000 comes out as
 * C0 80 and a lone surrogate as its 3-byte form, so C strings hold what a
 * Python str holds (pyjson writes both back as \u0000, \udxxx); an int
 * beyond int64 is a double whose userdata is its digits (see master_py.c).
 */
int master_py_json_loads(const char *text, size_t len, struct json_object **out, char *err,
			 size_t errsize);

/* str(v) appended to out (v not NULL). */
void master_py_str(struct json_object *v, struct strbuf *out);

/*
 * The reference's _s(d.get(key), n): str(v)[:n] in characters, or "" when
 * the key is absent or null. dst gets at most size - 1 bytes.
 */
void master_py_field_str(struct json_object *d, const char *key, size_t maxchars, char *dst,
			 size_t size);

/* bool(v); false for NULL. */
bool master_py_truthy(struct json_object *v);
bool master_py_truthy_field(struct json_object *d, const char *key);

/*
 * The reference's _int(d.get(key) or alt, dflt, lo, hi): a falsy value is
 * replaced by alt, int() of the result clamped to lo..hi, dflt when int()
 * raises (TypeError, ValueError, OverflowError).
 */
int master_py_field_int_or(struct json_object *d, const char *key, int alt, int dflt, int lo,
			   int hi);

/* int(s) for a string (Unicode digits and spaces too): true with the
 * value saturated to +-LLONG_MAX. */
bool master_py_int_str(const char *s, long long *out);

/* float(s) for a string (inf, nan, underscores, spaces, Unicode digits):
 * true if valid. */
bool master_py_float_str(const char *s, double *out);

/* Characters (code points) of a UTF-8 string. */
size_t master_py_utf8_chars(const char *s);

/* The first n characters of s, into dst (at most size - 1 bytes, whole
 * characters only). */
void master_py_cut(const char *s, size_t n, char *dst, size_t size);

#endif
