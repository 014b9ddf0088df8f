/*
 * common/natpmp: the renewal schedule (RFC 6886 §3.3: renew halfway to
 * expiry; a failed renewal is retried at half the time left, like DHCP's
 * T1/T2), and the calls that must not send anything: bad arguments, an
 * unmap with nothing mapped. Nothing here talks to a gateway; the lab
 * (tests/lab/lab_selftest.py, lab_lobby_natpmp.py) does that against
 * miniupnpd.
 */
#include <errno.h>

#include "ev.h"
#include "natpmp.h"
#include "tap.h"

static void test_schedule(void)
{
	long long left = (long long)NATPMP_LIFETIME_S * 1000, at = 0;
	int tries = 0;

	/* The first renewal at half-life: 30 min of the hour. */
	CHECK_EQ_INT(natpmp_renew_delay_ms(3600000), 1800000);
	CHECK_EQ_INT(natpmp_renew_delay_ms(120000), 60000);
	/* A short grant is renewed no sooner than the floor. */
	CHECK_EQ_INT(natpmp_renew_delay_ms(1999), NATPMP_RENEW_MIN_MS);
	CHECK_EQ_INT(natpmp_renew_delay_ms(2000), 1000);
	CHECK_EQ_INT(natpmp_renew_delay_ms(1), NATPMP_RENEW_MIN_MS);
	/* Expired (or never known): the slow retry. */
	CHECK_EQ_INT(natpmp_renew_delay_ms(0), NATPMP_RETRY_EXPIRED_MS);
	CHECK_EQ_INT(natpmp_renew_delay_ms(-5000), NATPMP_RETRY_EXPIRED_MS);

	/* A gateway that stops answering: every retry halves the time left,
	 * so the tries bunch up toward expiry (30 min, 15, 7.5, ...), and the
	 * mapping is tried about a dozen times before it runs out. */
	while (left > 0 && tries < 100) {
		long long d = natpmp_renew_delay_ms(left);

		CHECK(d > 0);
		CHECK(d <= left || d == NATPMP_RENEW_MIN_MS);
		at += d;
		left -= d;
		tries++;
	}
	CHECK(tries >= 10 && tries <= 30);
	/* The last try comes within the floor of expiry. */
	CHECK(left > -NATPMP_RENEW_MIN_MS);
	CHECK(at < (long long)NATPMP_LIFETIME_S * 1000 + NATPMP_RENEW_MIN_MS);
}

static void test_args(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct natpmp *n;

	CHECK(loop != NULL);
	n = natpmp_new(loop);
	CHECK(n != NULL);
	/* Nothing to map, no lifetime, no object: refused before any work. */
	CHECK_EQ_INT(natpmp_map(n, 0, 0, 3600, NULL, NULL), -EINVAL);
	CHECK_EQ_INT(natpmp_map(n, 29471, 29471, 0, NULL, NULL), -EINVAL);
	CHECK_EQ_INT(natpmp_map(NULL, 29471, 29471, 3600, NULL, NULL), -EINVAL);
	CHECK_EQ_INT(natpmp_unmap(NULL, NULL, NULL), -EINVAL);
	/* Nothing mapped, nothing in flight: returns at once, sends nothing. */
	CHECK_EQ_INT(natpmp_unmap_sync(n, 1000), 0);
	CHECK_EQ_INT(natpmp_unmap_sync(NULL, 1000), 0);
	natpmp_free(n);
	natpmp_free(NULL);
	ev_loop_free(loop);
}

int main(void)
{
	test_schedule();
	test_args();
	return tap_done("natpmp");
}
