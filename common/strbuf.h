/*
 * A growable text buffer with a hard cap, for building responses (metrics,
 * listings). Appends past the cap set `bad` and are dropped.
 */
#ifndef STRBUF_H
#define STRBUF_H

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

#endif
