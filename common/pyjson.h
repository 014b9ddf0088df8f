/*
 * A JSON writer whose output is byte for byte what Python's json.dumps()
 * writes with its defaults: ", " and ": " separators, ensure_ascii (every
 * non-ASCII character as \uXXXX, surrogate pairs above U+FFFF), the short
 * escapes \" \\ \n \r \t \b \f and \u00XX for other control characters,
 * floats as repr() (the shortest text that reads back the same double;
 * fixed notation for exponents -4..15, else d.ddde+XX), True/False/None as
 * true/false/null. The netpunch master (Python) answers this way, and so
 * do we, so captured bodies compare equal.
 *
 * The writer appends to a strbuf; nesting is tracked up to 16 levels.
 */
#ifndef PYJSON_H
#define PYJSON_H

#include <stdbool.h>
#include <stddef.h>

struct strbuf;

#define PYJSON_MAX_DEPTH (16)

struct pyjson {
	struct strbuf *out;
	int depth;
	bool first[PYJSON_MAX_DEPTH];
	bool after_key;
	bool bad;
};

void pyjson_init(struct pyjson *j, struct strbuf *out);
void pyjson_obj_begin(struct pyjson *j);
void pyjson_obj_end(struct pyjson *j);
void pyjson_arr_begin(struct pyjson *j);
void pyjson_arr_end(struct pyjson *j);
/* An object key (UTF-8, escaped like a string). */
void pyjson_key(struct pyjson *j, const char *k);
/* A string from UTF-8 bytes; invalid UTF-8 bytes are written as U+FFFD,
 * except C0 80 (\u0000) and ED A0..BF xx (a lone surrogate, \udxxx): the
 * forms master_py gives what a Python str holds and UTF-8 cannot. */
void pyjson_str(struct pyjson *j, const char *s, size_t len);
void pyjson_cstr(struct pyjson *j, const char *s);
void pyjson_int(struct pyjson *j, long long v);
void pyjson_float(struct pyjson *j, double v);
void pyjson_bool(struct pyjson *j, bool v);
void pyjson_null(struct pyjson *j);
/* A value already written by a pyjson writer (its text is copied as is). */
void pyjson_raw(struct pyjson *j, const char *json, size_t len);

/* Python's repr() of a finite double into buf (>= 32 bytes); returns buf. */
const char *pyjson_repr_double(double v, char *buf, size_t size);

#endif
