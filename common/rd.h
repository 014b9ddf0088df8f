/*
 * Bounded byte reader and writer. A short read or a full buffer sets `bad`
 * and returns zeros; callers check `bad` once at the end.
 */
#ifndef RD_H
#define RD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct rd {
	const uint8_t *p;
	size_t left;
	bool bad;
};

struct wr {
	uint8_t *p;
	size_t cap;
	size_t len;
	bool bad;
};

static inline struct rd rd_init(const uint8_t *buf, size_t len)
{
	struct rd r = {buf, len, false};
	return r;
}

static inline uint8_t rd_u8(struct rd *r)
{
	if (r->left < 1) {
		r->bad = true;
		return 0;
	}
	r->left--;
	return *r->p++;
}

static inline uint16_t rd_be16(struct rd *r)
{
	uint16_t v;

	if (r->left < 2) {
		r->bad = true;
		r->left = 0;
		return 0;
	}
	v = (uint16_t)((uint16_t)r->p[0] << 8 | r->p[1]);
	r->p += 2;
	r->left -= 2;
	return v;
}

static inline uint32_t rd_be32(struct rd *r)
{
	uint32_t v;

	if (r->left < 4) {
		r->bad = true;
		r->left = 0;
		return 0;
	}
	v = (uint32_t)r->p[0] << 24 | (uint32_t)r->p[1] << 16 | (uint32_t)r->p[2] << 8 | r->p[3];
	r->p += 4;
	r->left -= 4;
	return v;
}

/* Returns a view of the next n bytes (NULL and bad when short). */
static inline const uint8_t *rd_bytes(struct rd *r, size_t n)
{
	const uint8_t *p = r->p;

	if (n > r->left) {
		r->bad = true;
		r->left = 0;
		return NULL;
	}
	r->p += n;
	r->left -= n;
	return p;
}

static inline struct wr wr_init(uint8_t *buf, size_t cap)
{
	struct wr w = {buf, cap, 0, false};
	return w;
}

static inline size_t wr_room(const struct wr *w)
{
	return w->cap - w->len;
}

static inline void wr_bytes(struct wr *w, const void *src, size_t n)
{
	if (n > w->cap - w->len) {
		w->bad = true;
		return;
	}
	if (n > 0)
		memcpy(w->p + w->len, src, n);
	w->len += n;
}

static inline void wr_u8(struct wr *w, uint8_t v)
{
	wr_bytes(w, &v, 1);
}

static inline void wr_be16(struct wr *w, uint16_t v)
{
	uint8_t b[2] = {(uint8_t)(v >> 8), (uint8_t)v};
	wr_bytes(w, b, 2);
}

static inline void wr_be32(struct wr *w, uint32_t v)
{
	uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
	wr_bytes(w, b, 4);
}

static inline void wr_str(struct wr *w, const char *s)
{
	wr_bytes(w, s, strlen(s));
}

#endif
