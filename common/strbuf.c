#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void strbuf_init(struct strbuf *b, size_t max)
{
	b->p = NULL;
	b->len = b->cap = 0;
	b->max = max;
	b->bad = false;
}

void strbuf_release(struct strbuf *b)
{
	free(b->p);
	strbuf_init(b, b->max);
}

static bool reserve(struct strbuf *b, size_t n)
{
	size_t want, cap;
	char *p;

	if (b->bad || n > b->max - b->len) {
		b->bad = true;
		return false;
	}
	want = b->len + n + 1;
	if (want <= b->cap)
		return true;
	cap = b->cap ? b->cap : 256;
	while (cap < want)
		cap *= 2;
	p = realloc(b->p, cap);
	if (p == NULL) {
		b->bad = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void strbuf_append(struct strbuf *b, const char *s, size_t n)
{
	if (!reserve(b, n))
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void strbuf_printf(struct strbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !reserve(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void errtext_vappend(char *buf, size_t size, const char *fmt, va_list ap)
{
	size_t n = strnlen(buf, size);

	if (n != 0 && n + 2 < size) {
		memcpy(buf + n, "; ", 3);
		n += 2;
	}
	if (n + 1 >= size)
		return;
	vsnprintf(buf + n, size - n, fmt, ap);
}
