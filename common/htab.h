/*
 * A bounded hash table keyed by attacker-chosen bytes.
 *
 * Fixed capacity, fixed key length, fixed value size, all allocated once.
 * Buckets are hashed with SipHash (libsodium crypto_shorthash) under a random
 * key, so remote peers cannot aim at one chain. Entries also sit on a
 * recency list, so callers can evict the least recently touched entry and
 * expire idle ones from the old end in O(1). Every operation is O(1)
 * expected; nothing allocates after htab_new().
 */
#ifndef HTAB_H
#define HTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct htab;

/* capacity entries of key_len bytes (<= 32) each with val_size bytes of
 * zeroed value. NULL, errno set, on failure. */
struct htab *htab_new(size_t capacity, size_t key_len, size_t val_size);
void htab_free(struct htab *t);

/* The value stored under key, or NULL. Does not change recency. */
void *htab_get(const struct htab *t, const void *key);

/*
 * Inserts key with a zeroed value (most recent) and returns it. When the
 * table is full: with evict, the least recent entry is dropped first (its
 * value is copied to *evicted if not NULL, so the caller can release what
 * it held); without, returns NULL with errno ENOSPC. The key must not be in
 * the table yet.
 */
void *htab_insert(struct htab *t, const void *key, bool evict, void *evicted);

/* Makes the entry the most recent. */
void htab_touch(struct htab *t, void *val);
/* Moves the entry to just after older in recency (more recent than it),
 * or to the least recent place when older is NULL. */
void htab_move_after(struct htab *t, void *val, void *older);
/* Removes the entry; val is invalid afterwards. */
void htab_remove(struct htab *t, void *val);

/* The key bytes of an entry. */
const void *htab_key(const struct htab *t, const void *val);

/* Least recent entry, or NULL when empty. */
void *htab_oldest(const struct htab *t);
/* The next more recent entry after val, or NULL (iteration oldest first;
 * removing the current entry is allowed if the next was fetched first). */
void *htab_newer(const struct htab *t, const void *val);

/* Most recent entry, or NULL; and the next less recent one (newest first). */
void *htab_newest(const struct htab *t);
void *htab_older(const struct htab *t, const void *val);

size_t htab_count(const struct htab *t);
size_t htab_capacity(const struct htab *t);

#endif
