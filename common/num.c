#include "num.h"

#include <errno.h>
#include <string.h>

int num_prefix_u64(const char *s, size_t len, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	size_t i = 0;
	bool over = false;

	for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
		uint64_t d = (uint64_t)(s[i] - '0');

		/* Keep reading past an overflow so the caller sees the whole
		 * run as one out-of-range number, not a number and junk. */
		if (over || max < d || v > (max - d) / 10) {
			over = true;
			continue;
		}
		v = v * 10 + d;
	}
	if (i == 0)
		return -EINVAL;
	if (over)
		return -ERANGE;
	*out = v;
	return (int)(i > (size_t)INT32_MAX ? INT32_MAX : i);
}

int num_parse(const char *s, size_t len, int64_t min, int64_t max, unsigned flags, int64_t *out)
{
	bool neg = false;
	uint64_t mag, lim;
	size_t i = 0;
	int r;

	if (s == NULL || min > max)
		return -EINVAL;
	if (len > 0 && (s[0] == '+' || s[0] == '-')) {
		if (!(flags & NUM_SIGN))
			return -EINVAL;
		neg = s[0] == '-';
		i = 1;
	}
	/* The magnitude may reach 2^63 for a negative number. */
	lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	r = num_prefix_u64(s + i, len - i, lim, &mag);
	if (r == -ERANGE) {
		/* All digits, just too big: out of range if the rest is clean. */
		for (size_t k = i; k < len; k++) {
			if (s[k] < '0' || s[k] > '9')
				return -EINVAL;
		}
		return -ERANGE;
	}
	if (r < 0 || (size_t)r != len - i)
		return -EINVAL;
	if (neg) {
		int64_t v = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;

		if (v < min || v > max)
			return -ERANGE;
		*out = v;
	} else {
		if (mag > (uint64_t)INT64_MAX || (int64_t)mag < min || (int64_t)mag > max)
			return -ERANGE;
		*out = (int64_t)mag;
	}
	return 0;
}

int num_parse_str(const char *s, int64_t min, int64_t max, unsigned flags, int64_t *out)
{
	if (s == NULL)
		return -EINVAL;
	return num_parse(s, strlen(s), min, max, flags, out);
}
