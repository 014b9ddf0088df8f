/*
 * common/htab: the bounded, keyed, recency-ordered table under the rate
 * limiter, the ban list and the relay's sessions. Besides the contract
 * cases, a long random run is compared against a plain array model.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "htab.h"
#include "tap.h"

struct val {
	uint32_t a;
	uint64_t b;
};

static void key_of(uint32_t n, uint8_t k[4])
{
	k[0] = (uint8_t)(n >> 24);
	k[1] = (uint8_t)(n >> 16);
	k[2] = (uint8_t)(n >> 8);
	k[3] = (uint8_t)n;
}

static uint32_t key_num(const void *key)
{
	const uint8_t *k = key;

	return (uint32_t)k[0] << 24 | (uint32_t)k[1] << 16 | (uint32_t)k[2] << 8 | k[3];
}

static struct val *ins(struct htab *t, uint32_t n, bool evict, void *evicted)
{
	uint8_t k[4];

	key_of(n, k);
	return htab_insert(t, k, evict, evicted);
}

static struct val *get(const struct htab *t, uint32_t n)
{
	uint8_t k[4];

	key_of(n, k);
	return htab_get(t, k);
}

/* Writes the keys oldest first into out (up to max); returns the count. */
static size_t order(const struct htab *t, uint32_t *out, size_t max)
{
	size_t n = 0;

	for (void *v = htab_oldest(t); v != NULL; v = htab_newer(t, v)) {
		if (n < max)
			out[n] = key_num(htab_key(t, v));
		n++;
	}
	return n;
}

static bool order_is(const struct htab *t, const uint32_t *want, size_t n)
{
	uint32_t got[64];
	size_t back = 0;

	if (order(t, got, 64) != n)
		return false;
	/* Newest first must be the same list reversed. */
	for (void *v = htab_newest(t); v != NULL; v = htab_older(t, v)) {
		if (back >= n || key_num(htab_key(t, v)) != want[n - 1 - back])
			return false;
		back++;
	}
	return back == n && memcmp(got, want, n * sizeof(*want)) == 0;
}

static void test_new(void)
{
	struct htab *t;

	errno = 0;
	CHECK(htab_new(0, 4, 8) == NULL);
	CHECK_EQ_INT(errno, EINVAL);
	CHECK(htab_new(4, 0, 8) == NULL);
	CHECK(htab_new(4, 33, 8) == NULL);
	t = htab_new(4, 32, 8);
	CHECK(t != NULL);
	CHECK_EQ_INT(htab_capacity(t), 4);
	CHECK_EQ_INT(htab_count(t), 0);
	CHECK(htab_oldest(t) == NULL);
	htab_free(t);
	htab_free(NULL);
}

static void test_basic(void)
{
	struct htab *t = htab_new(8, 4, sizeof(struct val));
	struct val *a, *b, *c;

	a = ins(t, 1, false, NULL);
	CHECK(a != NULL);
	if (a == NULL)
		return;
	/* A new value is zeroed. */
	CHECK(a->a == 0 && a->b == 0);
	a->a = 11;
	a->b = 111;
	b = ins(t, 2, false, NULL);
	b->a = 22;
	c = ins(t, 3, false, NULL);
	c->a = 33;
	CHECK(a != b && b != c && a != c);
	CHECK_EQ_INT(htab_count(t), 3);
	CHECK(get(t, 1) == a);
	CHECK(get(t, 2) == b);
	CHECK(get(t, 3) == c);
	CHECK(get(t, 4) == NULL);
	CHECK(get(t, 0x01000000) == NULL);
	CHECK_EQ_INT(get(t, 1)->b, 111);
	CHECK_EQ_INT(key_num(htab_key(t, b)), 2);

	htab_remove(t, b);
	CHECK_EQ_INT(htab_count(t), 2);
	CHECK(get(t, 2) == NULL);
	CHECK(get(t, 1) == a && get(t, 3) == c);
	CHECK_EQ_INT(get(t, 3)->a, 33);
	/* The slot comes back zeroed for the next key. */
	b = ins(t, 4, false, NULL);
	CHECK(b != NULL && b->a == 0 && b->b == 0);
	CHECK(get(t, 4) == b);
	/* A removed key can come back. */
	b = ins(t, 2, false, NULL);
	CHECK(b != NULL && get(t, 2) == b);
	CHECK_EQ_INT(htab_count(t), 4);
	htab_remove(t, a);
	htab_remove(t, c);
	htab_remove(t, get(t, 2));
	htab_remove(t, get(t, 4));
	CHECK_EQ_INT(htab_count(t), 0);
	CHECK(htab_oldest(t) == NULL);
	htab_free(t);
}

static void test_recency(void)
{
	struct htab *t = htab_new(8, 4, sizeof(struct val));
	uint32_t w1[] = {1, 2, 3, 4}, w2[] = {2, 3, 4, 1}, w3[] = {2, 4, 1, 3}, w4[] = {2, 1, 3};

	for (uint32_t i = 1; i <= 4; i++)
		ins(t, i, false, NULL);
	CHECK(order_is(t, w1, 4));
	CHECK_EQ_INT(key_num(htab_key(t, htab_oldest(t))), 1);
	/* get does not change recency. */
	(void)get(t, 1);
	CHECK(order_is(t, w1, 4));
	htab_touch(t, get(t, 1));
	CHECK(order_is(t, w2, 4));
	/* Touching the newest changes nothing. */
	htab_touch(t, get(t, 1));
	CHECK(order_is(t, w2, 4));
	htab_touch(t, get(t, 3));
	CHECK(order_is(t, w3, 4));
	/* Removing from the middle keeps the order. */
	htab_remove(t, get(t, 4));
	CHECK(order_is(t, w4, 3));
	CHECK(htab_newer(t, get(t, 3)) == NULL);
	htab_free(t);
}

/* htab_move_after places an entry anywhere in the order (the master's
 * remote entries go where their origin's time puts them). */
static void test_move_after(void)
{
	struct htab *t = htab_new(8, 4, sizeof(struct val));
	uint32_t w1[] = {4, 1, 2, 3}, w2[] = {4, 1, 3, 2}, w3[] = {4, 3, 2, 1}, w4[] = {3, 2, 1, 4},
		 w5[] = {5};
	struct val *v;

	for (uint32_t i = 1; i <= 4; i++)
		ins(t, i, false, NULL);
	/* To the oldest place. */
	htab_move_after(t, get(t, 4), NULL);
	CHECK(order_is(t, w1, 4));
	CHECK_EQ_INT(key_num(htab_key(t, htab_oldest(t))), 4);
	CHECK_EQ_INT(key_num(htab_key(t, htab_newest(t))), 3);
	/* Into the middle, from the newest place. */
	htab_move_after(t, get(t, 3), get(t, 1));
	CHECK(order_is(t, w2, 4));
	CHECK_EQ_INT(key_num(htab_key(t, htab_newest(t))), 2);
	/* After the newest: becomes the newest. */
	htab_move_after(t, get(t, 1), get(t, 2));
	CHECK(order_is(t, w3, 4));
	CHECK_EQ_INT(key_num(htab_key(t, htab_newest(t))), 1);
	/* After itself: nothing moves. */
	htab_move_after(t, get(t, 3), get(t, 3));
	CHECK(order_is(t, w3, 4));
	/* The oldest after the newest; the links both ways stay right. */
	htab_move_after(t, get(t, 4), get(t, 1));
	CHECK(order_is(t, w4, 4));
	CHECK(htab_older(t, get(t, 4)) == get(t, 1));
	CHECK(htab_older(t, get(t, 3)) == NULL);
	for (uint32_t i = 1; i <= 4; i++)
		htab_remove(t, get(t, i));
	/* A single entry to the oldest place. */
	v = ins(t, 5, false, NULL);
	htab_move_after(t, v, NULL);
	CHECK(order_is(t, w5, 1));
	CHECK(htab_newest(t) == v && htab_oldest(t) == v);
	htab_free(t);
}

static void test_evict(void)
{
	struct htab *t = htab_new(3, 4, sizeof(struct val));
	struct val ev, *v;
	uint32_t w1[] = {1, 2, 3}, w2[] = {3, 1, 4}, w3[] = {1, 4, 5};

	for (uint32_t i = 1; i <= 3; i++)
		ins(t, i, false, NULL)->a = 100 + i;
	CHECK(order_is(t, w1, 3));

	/* Full, no eviction: ENOSPC, nothing changes. */
	errno = 0;
	CHECK(ins(t, 4, false, NULL) == NULL);
	CHECK_EQ_INT(errno, ENOSPC);
	CHECK(ins(t, 4, false, &ev) == NULL);
	CHECK_EQ_INT(htab_count(t), 3);
	CHECK(order_is(t, w1, 3));
	CHECK(get(t, 4) == NULL);

	/* With eviction the least recent goes, and the caller sees its
	 * value. Touch 1 first, so 2 is the least recent. */
	htab_touch(t, get(t, 1));
	memset(&ev, 0, sizeof(ev));
	v = ins(t, 4, true, &ev);
	CHECK(v != NULL);
	if (v == NULL)
		return;
	v->a = 104;
	CHECK_EQ_INT(ev.a, 102);
	CHECK(get(t, 2) == NULL);
	CHECK_EQ_INT(htab_count(t), 3);
	CHECK(order_is(t, w2, 3));
	/* evicted may be NULL. */
	v = ins(t, 5, true, NULL);
	CHECK(v != NULL && v->a == 0);
	CHECK(get(t, 3) == NULL);
	CHECK(order_is(t, w3, 3));
	CHECK_EQ_INT(get(t, 1)->a, 101);
	CHECK_EQ_INT(get(t, 4)->a, 104);
	/* Not full: evict has nothing to do. */
	htab_remove(t, get(t, 4));
	memset(&ev, 0x77, sizeof(ev));
	CHECK(ins(t, 6, true, &ev) != NULL);
	CHECK_EQ_INT(ev.a, 0x77777777);
	CHECK_EQ_INT(htab_count(t), 3);
	CHECK(get(t, 1) != NULL && get(t, 5) != NULL && get(t, 6) != NULL);
	htab_free(t);
}

static void test_iterate_remove(void)
{
	struct htab *t = htab_new(16, 4, sizeof(struct val));
	uint32_t want[] = {1, 3, 5, 7, 9};
	void *v, *next;

	for (uint32_t i = 0; i < 10; i++)
		ins(t, i, false, NULL);
	/* Remove the even keys while walking, fetching next first. */
	for (v = htab_oldest(t); v != NULL; v = next) {
		next = htab_newer(t, v);
		if (key_num(htab_key(t, v)) % 2 == 0)
			htab_remove(t, v);
	}
	CHECK_EQ_INT(htab_count(t), 5);
	CHECK(order_is(t, want, 5));
	/* Remove all of them, oldest first, as expiry does. */
	while ((v = htab_oldest(t)) != NULL)
		htab_remove(t, v);
	CHECK_EQ_INT(htab_count(t), 0);
	CHECK(get(t, 1) == NULL && get(t, 9) == NULL);
	htab_free(t);
}

static void test_reuse(void)
{
	struct htab *t = htab_new(8, 4, sizeof(struct val));
	bool ok = true;

	/* Fill, drain and refill many times, in varying orders: free slots
	 * must be reused, never a slot still in use, never past capacity. */
	for (uint32_t round = 0; round < 20000 && ok; round++) {
		uint32_t base = round * 8;
		size_t n = 1 + round % 8;

		for (uint32_t i = 0; i < n; i++) {
			struct val *v = ins(t, base + i, false, NULL);

			if (v == NULL || v->a != 0) {
				ok = false;
				break;
			}
			v->a = base + i;
		}
		if (htab_count(t) != n)
			ok = false;
		for (uint32_t i = 0; i < n && ok; i++) {
			struct val *v = get(t, base + i);

			if (v == NULL || v->a != base + i)
				ok = false;
		}
		/* Remove in an order that depends on the round. */
		for (uint32_t i = 0; i < n && ok; i++) {
			uint32_t j = (i * 3 + round) % (uint32_t)n;
			struct val *v = get(t, base + j);

			/* j repeats when 3 and n share a factor. */
			if (v != NULL)
				htab_remove(t, v);
		}
		while (htab_oldest(t) != NULL)
			htab_remove(t, htab_oldest(t));
		if (htab_count(t) != 0)
			ok = false;
	}
	CHECK(ok);
	/* Then a full table still works. */
	for (uint32_t i = 0; i < 8; i++)
		CHECK(ins(t, 1000000 + i, false, NULL) != NULL);
	CHECK(ins(t, 2000000, false, NULL) == NULL);
	CHECK_EQ_INT(htab_count(t), 8);
	htab_free(t);
}

/* A table of bare keys (val_size 0) is a set; entries must still be told
 * apart by their value pointers. */
static void test_zero_size_values(void)
{
	struct htab *t = htab_new(4, 4, 0);
	void *a, *b, *c;

	CHECK(t != NULL);
	if (t == NULL)
		return;
	a = ins(t, 1, false, NULL);
	b = ins(t, 2, false, NULL);
	c = ins(t, 3, false, NULL);
	CHECK(a != NULL && b != NULL && c != NULL);
	CHECK(a != b && b != c);
	CHECK_EQ_INT(key_num(htab_key(t, a)), 1);
	CHECK_EQ_INT(key_num(htab_key(t, c)), 3);
	htab_remove(t, b);
	CHECK(get(t, 2) == NULL);
	CHECK(get(t, 1) != NULL && get(t, 3) != NULL);
	CHECK_EQ_INT(htab_count(t), 2);
	CHECK_EQ_INT(key_num(htab_key(t, htab_oldest(t))), 1);
	htab_touch(t, get(t, 1));
	CHECK_EQ_INT(key_num(htab_key(t, htab_oldest(t))), 3);
	htab_free(t);
}

/* ---- randomized comparison with an array model ---- */

#define MODEL_KEYS (300)
#define MODEL_CAP  (64)

struct model {
	bool present[MODEL_KEYS];
	uint32_t val[MODEL_KEYS];
	uint64_t stamp[MODEL_KEYS];
	uint64_t clock;
	size_t count;
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint32_t rnd(uint32_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)((rng_state >> 16) % n);
}

static int model_oldest(const struct model *m)
{
	int best = -1;

	for (int i = 0; i < MODEL_KEYS; i++) {
		if (m->present[i] && (best < 0 || m->stamp[i] < m->stamp[best]))
			best = i;
	}
	return best;
}

static bool model_check_order(const struct htab *t, const struct model *m)
{
	uint64_t last = 0;
	size_t n = 0;

	for (void *v = htab_oldest(t); v != NULL; v = htab_newer(t, v)) {
		uint32_t k = key_num(htab_key(t, v));

		if (k >= MODEL_KEYS || !m->present[k] || m->stamp[k] <= last ||
		    ((struct val *)v)->a != m->val[k])
			return false;
		last = m->stamp[k];
		if (++n > MODEL_CAP)
			return false;
	}
	return n == m->count;
}

static void test_model(void)
{
	struct htab *t = htab_new(MODEL_CAP, 4, sizeof(struct val));
	struct model *m = calloc(1, sizeof(*m));
	unsigned long mismatches = 0, evictions = 0, refusals = 0;

	CHECK(t != NULL && m != NULL);
	if (t == NULL || m == NULL)
		return;
	for (uint32_t op = 1; op <= 100000; op++) {
		uint32_t k = rnd(MODEL_KEYS);
		uint32_t what = rnd(100);
		struct val *v = get(t, k);

		if ((v != NULL) != m->present[k] || (v != NULL && v->a != m->val[k])) {
			mismatches++;
			continue;
		}
		if (what < 45) {
			/* insert (or touch when present) */
			bool evict = rnd(4) != 0;
			struct val ev;

			if (v != NULL) {
				htab_touch(t, v);
				m->stamp[k] = ++m->clock;
				continue;
			}
			memset(&ev, 0, sizeof(ev));
			v = ins(t, k, evict, &ev);
			if (m->count == MODEL_CAP) {
				int old = model_oldest(m);

				if (!evict) {
					if (v != NULL || errno != ENOSPC)
						mismatches++;
					refusals++;
					continue;
				}
				if (v == NULL || ev.a != m->val[old]) {
					mismatches++;
					continue;
				}
				m->present[old] = false;
				m->count--;
				evictions++;
			} else if (v == NULL) {
				mismatches++;
				continue;
			}
			if (v->a != 0)
				mismatches++;
			v->a = op;
			m->present[k] = true;
			m->val[k] = op;
			m->stamp[k] = ++m->clock;
			m->count++;
		} else if (what < 75) {
			if (v != NULL) {
				htab_remove(t, v);
				m->present[k] = false;
				m->count--;
			}
		} else if (what < 85) {
			/* expire a few from the old end */
			uint32_t n = rnd(4);

			while (n-- > 0 && m->count > 0) {
				int old = model_oldest(m);
				void *o = htab_oldest(t);

				if (o == NULL || key_num(htab_key(t, o)) != (uint32_t)old) {
					mismatches++;
					break;
				}
				htab_remove(t, o);
				m->present[old] = false;
				m->count--;
			}
		} else if (v != NULL) {
			htab_touch(t, v);
			m->stamp[k] = ++m->clock;
		}
		if (htab_count(t) != m->count)
			mismatches++;
		if (op % 500 == 0 && !model_check_order(t, m))
			mismatches++;
	}
	CHECK_EQ_INT(mismatches, 0);
	CHECK(model_check_order(t, m));
	/* The run must have exercised the full-table paths. */
	CHECK(evictions > 100);
	CHECK(refusals > 10);
	htab_free(t);
	free(m);
}

int main(void)
{
	test_new();
	test_basic();
	test_recency();
	test_move_after();
	test_evict();
	test_iterate_remove();
	test_reuse();
	test_zero_size_values();
	test_model();
	return tap_done("htab");
}
