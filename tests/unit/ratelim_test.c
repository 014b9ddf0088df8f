/*
 * common/ratelim: the getstatus/getinfo limiter. The seed (etrelay ENGINE
 * v2, "Filter"): a token bucket per source IP, a burst of 5 then 1/s, at
 * most 65 536 IPs remembered, idle ones forgotten after 60 s.
 */
#include <errno.h>
#include <string.h>

#include "ratelim.h"
#include "tap.h"

static struct addr_ip ip_n(uint32_t n)
{
	struct addr_ip ip;

	/* 10.x.y.z, v4-mapped, as addr_to_ip would store it. */
	memset(&ip, 0, sizeof(ip));
	ip.b[10] = 0xff;
	ip.b[11] = 0xff;
	ip.b[12] = 10;
	ip.b[13] = (uint8_t)(n >> 16);
	ip.b[14] = (uint8_t)(n >> 8);
	ip.b[15] = (uint8_t)n;
	return ip;
}

static struct addr_ip ip_v6(uint32_t n)
{
	struct addr_ip ip;

	/* 2001:db8::n */
	memset(&ip, 0, sizeof(ip));
	ip.b[0] = 0x20;
	ip.b[1] = 0x01;
	ip.b[2] = 0x0d;
	ip.b[3] = 0xb8;
	ip.b[12] = (uint8_t)(n >> 24);
	ip.b[13] = (uint8_t)(n >> 16);
	ip.b[14] = (uint8_t)(n >> 8);
	ip.b[15] = (uint8_t)n;
	return ip;
}

static void test_bucket(void)
{
	struct ratelim *rl = ratelim_new(16, 5, 1, 60000);
	struct addr_ip a = ip_n(1), b = ip_n(2);
	long long t0 = 1000000;

	CHECK(rl != NULL);
	if (rl == NULL)
		return;
	/* A burst of 5 within the same millisecond... */
	for (int i = 0; i < 5; i++)
		CHECK(ratelim_check(rl, &a, t0));
	/* ... then the 6th is refused, and so is anything within the next
	 * second. */
	CHECK(!ratelim_check(rl, &a, t0));
	CHECK(!ratelim_check(rl, &a, t0 + 1));
	CHECK(!ratelim_check(rl, &a, t0 + 999));
	/* Another IP has its own bucket. */
	for (int i = 0; i < 5; i++)
		CHECK(ratelim_check(rl, &b, t0 + 999));
	CHECK(!ratelim_check(rl, &b, t0 + 999));
	/* One token a second: at t0 + 1000 one more, then none. */
	CHECK(ratelim_check(rl, &a, t0 + 1000));
	CHECK(!ratelim_check(rl, &a, t0 + 1000));
	/* Partial refill accumulates across refused attempts: 0.5 token at
	 * +500 ms is not enough, the other half at +1000 ms is. */
	CHECK(!ratelim_check(rl, &a, t0 + 1500));
	CHECK(!ratelim_check(rl, &a, t0 + 1999));
	CHECK(ratelim_check(rl, &a, t0 + 2000));
	CHECK(!ratelim_check(rl, &a, t0 + 2000));
	/* A long pause refills to the burst, never beyond it. */
	for (int i = 0; i < 5; i++)
		CHECK(ratelim_check(rl, &a, t0 + 50000));
	CHECK(!ratelim_check(rl, &a, t0 + 50000));
	/* 2.5 s later: 2 tokens, half a token left over. */
	CHECK(ratelim_check(rl, &a, t0 + 52500));
	CHECK(ratelim_check(rl, &a, t0 + 52500));
	CHECK(!ratelim_check(rl, &a, t0 + 52500));
	CHECK(ratelim_check(rl, &a, t0 + 53000));
	/* A clock that goes back refills nothing. */
	CHECK(!ratelim_check(rl, &a, t0 + 52000));
	CHECK_EQ_INT(ratelim_count(rl), 2);
	ratelim_free(rl);
	ratelim_free(NULL);
}

static void test_rates(void)
{
	/* burst 1, 4/s: one every 250 ms. */
	struct ratelim *rl = ratelim_new(4, 1, 4, 60000);
	struct addr_ip a = ip_v6(7);
	int allowed = 0;

	for (long long t = 0; t < 10000; t += 10)
		allowed += ratelim_check(rl, &a, 5000 + t);
	/* 1 at the start, then one per 250 ms over 9.99 s: 40. */
	CHECK_EQ_INT(allowed, 40);
	ratelim_free(rl);
}

static void test_forget(void)
{
	struct ratelim *rl = ratelim_new(8, 5, 1, 60000);
	struct ratelim_stats st;
	struct addr_ip a = ip_n(1), b = ip_n(2), c = ip_n(3);

	for (int i = 0; i < 5; i++)
		CHECK(ratelim_check(rl, &a, 1000));
	CHECK(ratelim_check(rl, &b, 30000));
	CHECK_EQ_INT(ratelim_count(rl), 2);
	/* Not idle long enough yet. */
	CHECK_EQ_INT(ratelim_expire(rl, 60999), 0);
	CHECK_EQ_INT(ratelim_count(rl), 2);
	/* a idle for 60 s: forgotten; b seen at 30 s stays. */
	CHECK_EQ_INT(ratelim_expire(rl, 61000), 1);
	CHECK_EQ_INT(ratelim_count(rl), 1);
	ratelim_stats(rl, &st);
	CHECK_EQ_INT(st.forgotten, 1);
	CHECK_EQ_INT(st.evicted, 0);
	/* A forgotten IP starts over with a full bucket. */
	for (int i = 0; i < 5; i++)
		CHECK(ratelim_check(rl, &a, 61001));
	CHECK(!ratelim_check(rl, &a, 61001));

	/* A refused packet still counts as being seen: c keeps hammering
	 * and must not be forgotten, or it would get a fresh burst. Its
	 * arrival at 100 s also reclaims b's idle slot. */
	for (int i = 0; i < 5; i++)
		CHECK(ratelim_check(rl, &c, 100000));
	ratelim_stats(rl, &st);
	CHECK_EQ_INT(st.forgotten, 2);
	for (long long t = 100000; t < 300000; t += 200)
		(void)ratelim_check(rl, &c, t);
	CHECK_EQ_INT(ratelim_expire(rl, 300000), 1); /* a, idle since 61 s */
	CHECK_EQ_INT(ratelim_count(rl), 1);
	/* 200 ms after its last packet c has 1 token (0.8 + 0.2), not 5. */
	CHECK(ratelim_check(rl, &c, 300000));
	CHECK(!ratelim_check(rl, &c, 300000));
	/* A new source reclaims an idle slot on the way in. */
	CHECK(ratelim_check(rl, &a, 360001));
	ratelim_stats(rl, &st);
	CHECK_EQ_INT(st.forgotten, 4);
	CHECK_EQ_INT(st.evicted, 0);
	CHECK_EQ_INT(ratelim_count(rl), 1);
	ratelim_free(rl);
}

static void test_evict(void)
{
	struct ratelim *rl = ratelim_new(4, 5, 1, 60000);
	struct ratelim_stats st;
	struct addr_ip ip;

	for (uint32_t i = 0; i < 4; i++) {
		ip = ip_n(i);
		for (int j = 0; j < 5; j++)
			CHECK(ratelim_check(rl, &ip, 1000 + i));
	}
	CHECK_EQ_INT(ratelim_count(rl), 4);
	/* ip 0 is seen again, so ip 1 becomes the least recent. */
	ip = ip_n(0);
	CHECK(!ratelim_check(rl, &ip, 1010));
	ip = ip_n(100);
	CHECK(ratelim_check(rl, &ip, 1020));
	CHECK_EQ_INT(ratelim_count(rl), 4);
	ratelim_stats(rl, &st);
	CHECK_EQ_INT(st.evicted, 1);
	CHECK_EQ_INT(st.forgotten, 0);
	/* ip 0 kept its empty bucket; ip 1 was dropped and starts full. */
	ip = ip_n(0);
	CHECK(!ratelim_check(rl, &ip, 1030));
	ip = ip_n(1);
	CHECK(ratelim_check(rl, &ip, 1040));
	ratelim_stats(rl, &st);
	CHECK_EQ_INT(st.evicted, 2); /* ip 2 made room for ip 1 */
	ip = ip_n(2);
	CHECK(ratelim_check(rl, &ip, 1050));
	ratelim_free(rl);
}

static void test_flood(void)
{
	/* The seed's table size against a million spoofed sources, ten per
	 * millisecond: none is idle long enough to be forgotten, so every
	 * source past the first 65 536 evicts the least recent one. */
	struct ratelim *rl = ratelim_new(65536, 5, 1, 60000);
	struct ratelim_stats st;
	struct addr_ip ip;
	bool over = false, refused = false;
	long long now = 10000000;

	CHECK(rl != NULL);
	if (rl == NULL)
		return;
	for (uint32_t i = 0; i < 1000000; i++) {
		ip = ip_n(i);
		/* Every new source gets its first packet through. */
		if (!ratelim_check(rl, &ip, now + i / 10))
			refused = true;
		if (ratelim_count(rl) > 65536)
			over = true;
	}
	CHECK(!over);
	CHECK(!refused);
	CHECK_EQ_INT(ratelim_count(rl), 65536);
	ratelim_stats(rl, &st);
	CHECK_EQ_INT(st.evicted, 1000000 - 65536);
	CHECK_EQ_INT(st.forgotten, 0);
	/* The most recent sources are remembered with their bucket. */
	ip = ip_n(999999);
	for (int j = 0; j < 4; j++)
		CHECK(ratelim_check(rl, &ip, now + 99999));
	CHECK(!ratelim_check(rl, &ip, now + 99999));
	/* The oldest was evicted long ago: a fresh bucket. */
	ip = ip_n(0);
	for (int j = 0; j < 5; j++)
		CHECK(ratelim_check(rl, &ip, now + 99999));
	ratelim_stats(rl, &st);
	CHECK_EQ_INT(st.evicted, 1000000 - 65536 + 1);
	/* A minute later a new source takes an idle slot instead. */
	ip = ip_v6(1);
	CHECK(ratelim_check(rl, &ip, now + 99999 + 60000));
	ratelim_stats(rl, &st);
	CHECK_EQ_INT(st.forgotten, 1);
	CHECK_EQ_INT(st.evicted, 1000000 - 65536 + 1);
	CHECK_EQ_INT(ratelim_count(rl), 65536);
	/* Expiring everything empties the table. */
	CHECK_EQ_INT(ratelim_expire(rl, now + 10000000), 65536);
	CHECK_EQ_INT(ratelim_count(rl), 0);
	ratelim_free(rl);
}

/* A budget in bytes: burst 4096, 1024 per second, costs of any size. */
static void test_take(void)
{
	struct ratelim *rl = ratelim_new(16, 4096, 1024, 60000);
	struct addr_ip a = ip_n(7);
	long long t0 = 5000000;

	CHECK(rl != NULL);
	if (rl == NULL)
		return;
	CHECK(ratelim_take(rl, &a, 3000, t0));
	/* 1096 left: a 1200-byte answer is refused and takes nothing... */
	CHECK(!ratelim_take(rl, &a, 1200, t0));
	CHECK(ratelim_take(rl, &a, 1096, t0));
	CHECK(!ratelim_take(rl, &a, 1, t0));
	/* ... 1024 bytes a second come back: 512 after half a second. */
	CHECK(ratelim_take(rl, &a, 512, t0 + 500));
	CHECK(!ratelim_take(rl, &a, 1, t0 + 500));
	/* More than the burst is never granted. */
	CHECK(!ratelim_take(rl, &a, 4097, t0 + 3600 * 1000LL));
	/* A year idle fills the bucket without overflowing anything. */
	CHECK(ratelim_take(rl, &a, 4096, t0 + 365LL * 86400 * 1000));
	ratelim_free(rl);
	/* A rate in the hundreds of megabytes still refills exactly. */
	rl = ratelim_new(16, 1U << 30, 1U << 28, 60000);
	CHECK(rl != NULL);
	if (rl == NULL)
		return;
	CHECK(ratelim_take(rl, &a, 1U << 30, t0));
	CHECK(!ratelim_take(rl, &a, 1U << 28, t0 + 999));
	CHECK(ratelim_take(rl, &a, 1U << 28, t0 + 1000));
	ratelim_free(rl);
}

int main(void)
{
	test_take();
	test_bucket();
	test_rates();
	test_forget();
	test_evict();
	test_flood();
	return tap_done("ratelim");
}
