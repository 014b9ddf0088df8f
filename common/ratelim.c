#include "ratelim.h"

#include <stdlib.h>

#include "htab.h"

/* Tokens are kept in thousandths so refill needs no floating point. */
#define MILLI (1000)

struct bucket {
	long long last_ms;
	long long milli_tokens;
};

struct ratelim {
	struct htab *t;
	long long cap_milli;
	long long per_sec;
	long long forget_ms;
	struct ratelim_stats st;
};

struct ratelim *ratelim_new(size_t capacity, unsigned burst, unsigned per_sec, long long forget_ms)
{
	struct ratelim *rl = calloc(1, sizeof(*rl));

	if (rl == NULL)
		return NULL;
	rl->t = htab_new(capacity, sizeof(struct addr_ip), sizeof(struct bucket));
	if (rl->t == NULL) {
		free(rl);
		return NULL;
	}
	rl->cap_milli = (long long)burst * MILLI;
	rl->per_sec = per_sec;
	rl->forget_ms = forget_ms;
	return rl;
}

void ratelim_free(struct ratelim *rl)
{
	if (rl == NULL)
		return;
	htab_free(rl->t);
	free(rl);
}

size_t ratelim_expire(struct ratelim *rl, long long now_ms)
{
	size_t n = 0;
	struct bucket *b;

	while ((b = htab_oldest(rl->t)) != NULL && now_ms - b->last_ms >= rl->forget_ms) {
		htab_remove(rl->t, b);
		n++;
	}
	rl->st.forgotten += n;
	return n;
}

bool ratelim_check(struct ratelim *rl, const struct addr_ip *ip, long long now_ms)
{
	return ratelim_take(rl, ip, 1, now_ms);
}

bool ratelim_take(struct ratelim *rl, const struct addr_ip *ip, unsigned cost, long long now_ms)
{
	long long need = (long long)cost * MILLI;
	struct bucket *b = htab_get(rl->t, ip);

	if (b == NULL) {
		struct bucket *old = htab_oldest(rl->t);

		/* Reclaim one idle slot per new source: amortised O(1). */
		if (old != NULL && now_ms - old->last_ms >= rl->forget_ms) {
			htab_remove(rl->t, old);
			rl->st.forgotten++;
		} else if (htab_count(rl->t) == htab_capacity(rl->t)) {
			rl->st.evicted++;
		}
		b = htab_insert(rl->t, ip, true, NULL);
		b->milli_tokens = rl->cap_milli;
		b->last_ms = now_ms;
	} else {
		long long dt = now_ms - b->last_ms;

		if (dt > 0) {
			/* Long enough to fill any bucket: no product that could
			 * overflow with a rate in bytes. */
			long long add = rl->per_sec > 0 && dt > rl->cap_milli / rl->per_sec
						? rl->cap_milli
						: dt * rl->per_sec; /* ms * tokens/s = milli */

			b->milli_tokens = b->milli_tokens + add > rl->cap_milli
						  ? rl->cap_milli
						  : b->milli_tokens + add;
			b->last_ms = now_ms;
		}
		htab_touch(rl->t, b);
	}
	if (b->milli_tokens < need)
		return false;
	b->milli_tokens -= need;
	return true;
}

size_t ratelim_count(const struct ratelim *rl)
{
	return htab_count(rl->t);
}

void ratelim_stats(const struct ratelim *rl, struct ratelim_stats *out)
{
	*out = rl->st;
}
