/*
 * A growable text buffer with a hard cap, for building responses (metrics,
 * listings). Appends past the cap set `bad` and are dropped.
 */
#ifndef STRBUF_H
#define STRBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

struct strbuf {
	char *p;
	size_t len, cap, max;
	bool bad;
};

void strbuf_init(struct strbuf *b, size_t max);
void strbuf_release(struct strbuf *b);
void strbuf_append(struct strbuf *b, const char *s, size_t n);
void strbuf_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An error text in a fixed buffer (size bytes, NUL-terminated): the first
 * failure kept, each later one appended after "; " while it fits (cut
 * where it does not). */
void errtext_vappend(char *buf, size_t size, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));

#endif
