#include "htab.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#define NIL          (UINT32_MAX)
#define HTAB_MAX_KEY (32)

struct ent {
	uint32_t hnext;      /* next in bucket chain, or in the free list */
	uint32_t prev, next; /* recency list */
	uint32_t bucket;
	uint8_t key[HTAB_MAX_KEY];
	/* value follows, 16-byte aligned */
};

struct htab {
	size_t cap, count, key_len, val_size, stride, val_off;
	uint32_t mask;
	uint32_t *buckets;
	uint8_t *pool;
	uint32_t free_head;
	uint32_t oldest, newest;
	uint8_t hkey[crypto_shorthash_KEYBYTES];
};

static struct ent *ent_at(const struct htab *t, uint32_t i)
{
	return (struct ent *)(void *)(t->pool + (size_t)i * t->stride);
}

static uint32_t ent_idx(const struct htab *t, const void *val)
{
	return (uint32_t)((size_t)((const uint8_t *)val - t->pool) / t->stride);
}

static void *ent_val(const struct htab *t, uint32_t i)
{
	return t->pool + (size_t)i * t->stride + t->val_off;
}

struct htab *htab_new(size_t capacity, size_t key_len, size_t val_size)
{
	struct htab *t;
	size_t nb = 16;

	if (capacity == 0 || capacity >= NIL || key_len == 0 || key_len > HTAB_MAX_KEY) {
		errno = EINVAL;
		return NULL;
	}
	if (sodium_init() < 0) {
		errno = EIO;
		return NULL;
	}
	t = calloc(1, sizeof(*t));
	if (t == NULL)
		return NULL;
	while (nb < capacity * 2)
		nb *= 2;
	t->cap = capacity;
	t->key_len = key_len;
	t->val_size = val_size;
	t->val_off = (sizeof(struct ent) + 15) & ~(size_t)15;
	/* At least one value byte: with val_size 0 the value pointer would
	 * be the next entry's start and ent_idx() would name that entry. */
	t->stride = (t->val_off + (val_size > 0 ? val_size : 1) + 15) & ~(size_t)15;
	t->mask = (uint32_t)(nb - 1);
	/* calloc leaves untouched pages unbacked, so a big idle table costs
	 * address space, not memory. */
	t->buckets = malloc(nb * sizeof(*t->buckets));
	t->pool = calloc(capacity, t->stride);
	if (t->buckets == NULL || t->pool == NULL) {
		htab_free(t);
		errno = ENOMEM;
		return NULL;
	}
	memset(t->buckets, 0xff, nb * sizeof(*t->buckets));
	/* The free list is threaded lazily: entries past `count` of a never
	 * full table are handed out in order (see take_free). */
	t->free_head = NIL;
	t->oldest = t->newest = NIL;
	randombytes_buf(t->hkey, sizeof(t->hkey));
	return t;
}

void htab_free(struct htab *t)
{
	if (t == NULL)
		return;
	free(t->buckets);
	free(t->pool);
	sodium_memzero(t->hkey, sizeof(t->hkey));
	free(t);
}

static uint32_t bucket_of(const struct htab *t, const void *key)
{
	uint8_t h[crypto_shorthash_BYTES];
	uint32_t v;

	crypto_shorthash(h, key, t->key_len, t->hkey);
	memcpy(&v, h, sizeof(v));
	return v & t->mask;
}

void *htab_get(const struct htab *t, const void *key)
{
	uint32_t i = t->buckets[bucket_of(t, key)];

	while (i != NIL) {
		struct ent *e = ent_at(t, i);

		if (memcmp(e->key, key, t->key_len) == 0)
			return ent_val(t, i);
		i = e->hnext;
	}
	return NULL;
}

static void lru_unlink(struct htab *t, uint32_t i)
{
	struct ent *e = ent_at(t, i);

	if (e->prev != NIL)
		ent_at(t, e->prev)->next = e->next;
	else
		t->oldest = e->next;
	if (e->next != NIL)
		ent_at(t, e->next)->prev = e->prev;
	else
		t->newest = e->prev;
}

static void lru_append(struct htab *t, uint32_t i)
{
	struct ent *e = ent_at(t, i);

	e->prev = t->newest;
	e->next = NIL;
	if (t->newest != NIL)
		ent_at(t, t->newest)->next = i;
	else
		t->oldest = i;
	t->newest = i;
}

static void remove_idx(struct htab *t, uint32_t i)
{
	struct ent *e = ent_at(t, i);
	uint32_t *pp = &t->buckets[e->bucket];

	while (*pp != i)
		pp = &ent_at(t, *pp)->hnext;
	*pp = e->hnext;
	lru_unlink(t, i);
	e->hnext = t->free_head;
	t->free_head = i;
	t->count--;
}

static uint32_t take_free(struct htab *t)
{
	uint32_t i;

	if (t->free_head != NIL) {
		i = t->free_head;
		t->free_head = ent_at(t, i)->hnext;
		return i;
	}
	/* Never-used slots: with an empty free list, count is also the
	 * number of slots ever handed out. */
	return (uint32_t)t->count;
}

void *htab_insert(struct htab *t, const void *key, bool evict, void *evicted)
{
	uint32_t b, i;
	struct ent *e;

	if (t->count == t->cap) {
		if (!evict || t->oldest == NIL) {
			errno = ENOSPC;
			return NULL;
		}
		if (evicted != NULL)
			memcpy(evicted, ent_val(t, t->oldest), t->val_size);
		remove_idx(t, t->oldest);
	}
	b = bucket_of(t, key);
	i = take_free(t);
	e = ent_at(t, i);
	memcpy(e->key, key, t->key_len);
	e->bucket = b;
	e->hnext = t->buckets[b];
	t->buckets[b] = i;
	lru_append(t, i);
	t->count++;
	memset(ent_val(t, i), 0, t->val_size);
	return ent_val(t, i);
}

void htab_move_after(struct htab *t, void *val, void *older)
{
	uint32_t i = ent_idx(t, val), o;
	struct ent *e;

	if (older == val)
		return;
	lru_unlink(t, i);
	e = ent_at(t, i);
	if (older == NULL) {
		e->prev = NIL;
		e->next = t->oldest;
		if (t->oldest != NIL)
			ent_at(t, t->oldest)->prev = i;
		else
			t->newest = i;
		t->oldest = i;
		return;
	}
	o = ent_idx(t, older);
	e->prev = o;
	e->next = ent_at(t, o)->next;
	if (e->next != NIL)
		ent_at(t, e->next)->prev = i;
	else
		t->newest = i;
	ent_at(t, o)->next = i;
}

void htab_touch(struct htab *t, void *val)
{
	uint32_t i = ent_idx(t, val);

	if (t->newest == i)
		return;
	lru_unlink(t, i);
	lru_append(t, i);
}

void htab_remove(struct htab *t, void *val)
{
	remove_idx(t, ent_idx(t, val));
}

const void *htab_key(const struct htab *t, const void *val)
{
	return ent_at(t, ent_idx(t, val))->key;
}

void *htab_oldest(const struct htab *t)
{
	return t->oldest == NIL ? NULL : ent_val(t, t->oldest);
}

void *htab_newer(const struct htab *t, const void *val)
{
	uint32_t n = ent_at(t, ent_idx(t, val))->next;

	return n == NIL ? NULL : ent_val(t, n);
}

void *htab_newest(const struct htab *t)
{
	return t->newest == NIL ? NULL : ent_val(t, t->newest);
}

void *htab_older(const struct htab *t, const void *val)
{
	uint32_t n = ent_at(t, ent_idx(t, val))->prev;

	return n == NIL ? NULL : ent_val(t, n);
}

size_t htab_count(const struct htab *t)
{
	return t->count;
}

size_t htab_capacity(const struct htab *t)
{
	return t->cap;
}
