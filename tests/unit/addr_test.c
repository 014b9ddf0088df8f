/*
 * common/addr: numeric parsing (no DNS), host:port splitting, text forms,
 * the 16-byte IP and 18-byte key forms, loopback detection.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "addr.h"
#include "tap.h"

static void test_parse(void)
{
	struct addr a;
	char buf[ADDR_STRLEN];

	CHECK_EQ_INT(addr_parse(&a, "203.0.113.7:27960", -1), 0);
	CHECK_EQ_INT(addr_family(&a), AF_INET);
	CHECK(addr_is_v4(&a));
	CHECK_EQ_INT(a.len, sizeof(struct sockaddr_in));
	CHECK_EQ_INT(addr_port(&a), 27960);
	CHECK_EQ_STR(addr_str(&a, buf, sizeof(buf)), "203.0.113.7:27960");
	CHECK_EQ_STR(addr_ip_str(&a, buf, sizeof(buf)), "203.0.113.7");
	CHECK(((struct sockaddr_in *)&a.ss)->sin_addr.s_addr == htonl(0xcb007107));

	CHECK_EQ_INT(addr_parse(&a, "[2001:db8::1]:27950", -1), 0);
	CHECK_EQ_INT(addr_family(&a), AF_INET6);
	CHECK(!addr_is_v4(&a));
	CHECK_EQ_INT(a.len, sizeof(struct sockaddr_in6));
	CHECK_EQ_INT(addr_port(&a), 27950);
	CHECK_EQ_STR(addr_str(&a, buf, sizeof(buf)), "[2001:db8::1]:27950");
	CHECK_EQ_STR(addr_ip_str(&a, buf, sizeof(buf)), "2001:db8::1");

	/* Ports at the edges. */
	CHECK_EQ_INT(addr_parse(&a, "127.0.0.1:0", -1), 0);
	CHECK_EQ_INT(addr_port(&a), 0);
	CHECK_EQ_INT(addr_parse(&a, "127.0.0.1:65535", -1), 0);
	CHECK_EQ_INT(addr_port(&a), 65535);
	CHECK_EQ_INT(addr_parse(&a, "[::]:00080", -1), 0);
	CHECK_EQ_INT(addr_port(&a), 80);

	/* A bare IP only with a default port. */
	CHECK_EQ_INT(addr_parse(&a, "192.0.2.1", 27960), 0);
	CHECK_EQ_INT(addr_port(&a), 27960);
	CHECK_EQ_INT(addr_parse(&a, "::1", 5), 0);
	CHECK_EQ_STR(addr_str(&a, buf, sizeof(buf)), "[::1]:5");
	CHECK_EQ_INT(addr_parse(&a, "2001:db8::2", 0), 0);
	CHECK_EQ_INT(addr_port(&a), 0);
	CHECK_EQ_INT(addr_parse(&a, "192.0.2.1", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "192.0.2.1", 65536), -EINVAL);
	/* A given port wins over the default. */
	CHECK_EQ_INT(addr_parse(&a, "192.0.2.1:1", 2), 0);
	CHECK_EQ_INT(addr_port(&a), 1);

	/* Bad inputs. */
	CHECK_EQ_INT(addr_parse(&a, "192.0.2.1:", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "192.0.2.1:", 27960), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "192.0.2.1:65536", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "192.0.2.1:99999999999999999999", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "192.0.2.1:-1", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "192.0.2.1:+1", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "192.0.2.1: 1", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "192.0.2.1:1x", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, ":27960", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, ":27960", 1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "[]:27960", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "", 1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "garbage", 1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "garbage:1", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "localhost:27960", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "256.0.0.1:1", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "1.2.3:1", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "[192.0.2.1:1", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "[::1]27960", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "[::1]", -1), -EINVAL);
	/* An unbracketed v6 address with a port is ambiguous. */
	CHECK_EQ_INT(addr_parse(&a, "2001:db8::1:27960", -1), -EINVAL);
	CHECK_EQ_INT(addr_parse(&a, "[nothex::1]:1", -1), -EINVAL);

	CHECK_EQ_INT(addr_parse_ip(&a, "10.1.2.3"), 0);
	CHECK_EQ_INT(addr_port(&a), 0);
	CHECK_EQ_INT(addr_parse_ip(&a, "fe80::1"), 0);
	CHECK_EQ_INT(addr_family(&a), AF_INET6);
	CHECK_EQ_INT(addr_parse_ip(&a, "10.1.2.3:4"), -EINVAL);
	CHECK_EQ_INT(addr_parse_ip(&a, "[::1]"), -EINVAL);
	CHECK_EQ_INT(addr_parse_ip(&a, ""), -EINVAL);
}

static void test_split(void)
{
	char host[64];
	uint16_t port = 0;

	CHECK_EQ_INT(addr_split_hostport("master.etlegacy.com:27950", host, sizeof(host), &port),
		     0);
	CHECK_EQ_STR(host, "master.etlegacy.com");
	CHECK_EQ_INT(port, 27950);
	CHECK_EQ_INT(addr_split_hostport("[2001:db8::7]:1", host, sizeof(host), &port), 0);
	CHECK_EQ_STR(host, "2001:db8::7");
	CHECK_EQ_INT(port, 1);
	CHECK_EQ_INT(addr_split_hostport("[name]:2", host, sizeof(host), &port), 0);
	CHECK_EQ_STR(host, "name");
	CHECK_EQ_INT(addr_split_hostport("a:65535", host, sizeof(host), &port), 0);
	CHECK_EQ_STR(host, "a");
	CHECK_EQ_INT(port, 65535);

	CHECK_EQ_INT(addr_split_hostport("name", host, sizeof(host), &port), -EINVAL);
	CHECK_EQ_INT(addr_split_hostport("name:", host, sizeof(host), &port), -EINVAL);
	CHECK_EQ_INT(addr_split_hostport("name:65536", host, sizeof(host), &port), -EINVAL);
	CHECK_EQ_INT(addr_split_hostport(":1", host, sizeof(host), &port), -EINVAL);
	CHECK_EQ_INT(addr_split_hostport("a:b:1", host, sizeof(host), &port), -EINVAL);
	CHECK_EQ_INT(addr_split_hostport("[a]b:1", host, sizeof(host), &port), -EINVAL);
	/* The host must fit with its NUL: 6 chars need 7 bytes. */
	CHECK_EQ_INT(addr_split_hostport("abcdef:1", host, 6, &port), -ENAMETOOLONG);
	CHECK_EQ_INT(addr_split_hostport("abcdef:1", host, 7, &port), 0);
	CHECK_EQ_STR(host, "abcdef");
	/* Both wrong: an error either way. */
	CHECK(addr_split_hostport("abcdef:x", host, 3, &port) < 0);
}

static void test_ip_key(void)
{
	struct addr a, b;
	struct addr_ip ip;
	struct addr_key key;
	char buf[ADDR_STRLEN];
	static const uint8_t v4ip[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 203, 0, 113, 7};

	/* IPv4 goes in v4-mapped. */
	addr_parse(&a, "203.0.113.7:27960", -1);
	addr_to_ip(&a, &ip);
	CHECK(memcmp(ip.b, v4ip, 16) == 0);
	addr_to_key(&a, &key);
	CHECK(memcmp(key.b, v4ip, 16) == 0);
	/* Port in network order after the IP. */
	CHECK(key.b[16] == 0x6d && key.b[17] == 0x38);
	CHECK_EQ_STR(addr_ip_fmt(&ip, buf, sizeof(buf)), "203.0.113.7");

	/* Back to an IPv4 sockaddr, with the port given. */
	addr_from_ip(&b, &ip, 27960);
	CHECK(addr_is_v4(&b));
	CHECK_EQ_INT(b.len, sizeof(struct sockaddr_in));
	CHECK(addr_equal(&a, &b));
	CHECK_EQ_STR(addr_str(&b, buf, sizeof(buf)), "203.0.113.7:27960");
	addr_from_ip(&b, &ip, 1);
	CHECK(!addr_equal(&a, &b));
	addr_set_port(&b, 27960);
	CHECK(addr_equal(&a, &b));

	/* A v4-mapped IPv6 sockaddr has the same IP, but is a different
	 * socket address family. */
	addr_parse(&b, "[::ffff:203.0.113.7]:27960", -1);
	CHECK_EQ_INT(addr_family(&b), AF_INET6);
	{
		struct addr_ip ip2;

		addr_to_ip(&b, &ip2);
		CHECK(memcmp(ip.b, ip2.b, 16) == 0);
	}
	CHECK(!addr_equal(&a, &b));

	/* IPv6 round trip. */
	addr_parse(&a, "[2001:db8::abcd]:65535", -1);
	addr_to_ip(&a, &ip);
	CHECK(ip.b[0] == 0x20 && ip.b[1] == 0x01 && ip.b[14] == 0xab && ip.b[15] == 0xcd);
	addr_to_key(&a, &key);
	CHECK(key.b[16] == 0xff && key.b[17] == 0xff);
	addr_from_ip(&b, &ip, 65535);
	CHECK_EQ_INT(addr_family(&b), AF_INET6);
	CHECK(addr_equal(&a, &b));
	CHECK_EQ_STR(addr_ip_fmt(&ip, buf, sizeof(buf)), "2001:db8::abcd");

	/* Different IPs, different keys. */
	{
		struct addr_key k1, k2;

		addr_parse(&a, "10.0.0.1:5", -1);
		addr_parse(&b, "10.0.0.2:5", -1);
		addr_to_key(&a, &k1);
		addr_to_key(&b, &k2);
		CHECK(memcmp(k1.b, k2.b, sizeof(k1.b)) != 0);
		CHECK(!addr_equal(&a, &b));
	}
}

static void test_loopback(void)
{
	struct addr a;

	addr_parse(&a, "127.0.0.1:1", -1);
	CHECK(addr_is_loopback(&a));
	addr_parse(&a, "127.255.1.2:1", -1);
	CHECK(addr_is_loopback(&a));
	addr_parse(&a, "[::1]:1", -1);
	CHECK(addr_is_loopback(&a));
	addr_parse(&a, "[::ffff:127.0.0.5]:1", -1);
	CHECK(addr_is_loopback(&a));

	addr_parse(&a, "128.0.0.1:1", -1);
	CHECK(!addr_is_loopback(&a));
	addr_parse(&a, "10.127.0.1:1", -1);
	CHECK(!addr_is_loopback(&a));
	addr_parse(&a, "0.0.0.0:1", -1);
	CHECK(!addr_is_loopback(&a));
	addr_parse(&a, "[::]:1", -1);
	CHECK(!addr_is_loopback(&a));
	addr_parse(&a, "[::2]:1", -1);
	CHECK(!addr_is_loopback(&a));
	/* ::127.0.0.1 (deprecated v4-compatible) is not v4-mapped. */
	addr_parse(&a, "[::127.0.0.1]:1", -1);
	CHECK(!addr_is_loopback(&a));
	addr_parse(&a, "[1::1]:1", -1);
	CHECK(!addr_is_loopback(&a));
}

/* Which IPv6 addresses a lobby may advertise (lobby_observe). */
static void test_global_v6(void)
{
	static const struct {
		const char *ip;
		bool global;
	} cases[] = {
		{"2001:db8:1::10", true}, /* documentation: the lab's */
		{"2a01:4f8::1", true},
		{"2002:c633:644d::1", true}, /* 6to4 */
		{"::", false},
		{"::1", false},
		{"::ffff:198.18.0.10", false},
		{"::198.18.0.10", false}, /* v4-compatible */
		{"fe80::1", false},
		{"febf::1", false},
		{"fec0::1", false},
		{"fc00::1", false},
		{"fd00::2", false},
		{"ff02::1", false},
		{"198.18.0.10", false},
	};
	struct addr a;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		CHECK_EQ_INT(addr_parse_ip(&a, cases[i].ip), 0);
		if (addr_is_global_v6(&a) != cases[i].global)
			fprintf(stderr, "addr_is_global_v6(%s) != %d\n", cases[i].ip,
				cases[i].global);
		CHECK(addr_is_global_v6(&a) == cases[i].global);
	}
}

static void test_str_small(void)
{
	struct addr a;
	char small[8];

	/* Output is truncated, never overflowed, always terminated. */
	addr_parse(&a, "[2001:db8::1]:27950", -1);
	memset(small, 'x', sizeof(small));
	addr_str(&a, small, sizeof(small));
	CHECK(memchr(small, '\0', sizeof(small)) != NULL);
	CHECK(strncmp(small, "[2001:d", 7) == 0);
}

static void test_udp_bind(void)
{
	struct addr a;
	int fd;

	/* Loopback only, port 0: the kernel picks. */
	addr_parse(&a, "127.0.0.1:0", -1);
	fd = addr_udp_bind(&a);
	CHECK(fd >= 0);
	CHECK(addr_port(&a) != 0);
	CHECK(addr_is_loopback(&a));
	if (fd >= 0) {
		struct addr b = a;

		/* The same port again is taken (no SO_REUSEADDR). */
		CHECK_EQ_INT(addr_udp_bind(&b), -EADDRINUSE);
		close(fd);
	}
}

/* A dual-stack socket's IPv4 peers are v4-mapped; the relay keeps them as
 * plain IPv4 and maps them back to send. */
static void test_v4_mapping(void)
{
	struct addr a, m, b;
	char buf[ADDR_STRLEN];
	struct addr_ip x, y;

	addr_parse(&a, "192.0.2.7:27960", -1);
	addr_map_v4(&a, &m);
	CHECK_EQ_INT(addr_family(&m), AF_INET6);
	CHECK_EQ_INT(m.len, sizeof(struct sockaddr_in6));
	CHECK_EQ_STR(addr_str(&m, buf, sizeof(buf)), "[::ffff:192.0.2.7]:27960");
	addr_to_ip(&a, &x);
	addr_to_ip(&m, &y);
	CHECK(memcmp(x.b, y.b, 16) == 0); /* one key for bans and limits */
	b = m;
	CHECK(addr_unmap_v4(&b));
	CHECK_EQ_INT(addr_family(&b), AF_INET);
	CHECK_EQ_INT(b.len, sizeof(struct sockaddr_in));
	CHECK(addr_equal(&a, &b));
	CHECK_EQ_STR(addr_str(&b, buf, sizeof(buf)), "192.0.2.7:27960");
	/* Neither touches anything else. */
	CHECK(!addr_unmap_v4(&b));
	addr_parse(&a, "[2001:db8::1]:5", -1);
	b = a;
	CHECK(!addr_unmap_v4(&b));
	CHECK(addr_equal(&a, &b));
	addr_map_v4(&a, &m);
	CHECK(addr_equal(&a, &m));
	addr_parse(&a, "[::1]:5", -1);
	CHECK(!addr_unmap_v4(&a));
}

/* "[::]" with v6only off takes IPv4 too; on, it leaves IPv4 to another
 * socket on the same port. */
static void test_udp_bind_dual(void)
{
	struct addr a, b;
	int fd6, fd4;

	addr_parse(&a, "[::1]:0", -1);
	fd6 = addr_udp_bind_v6only(&a, false);
	if (fd6 < 0)
		return; /* no IPv6 on this machine */
	CHECK(addr_port(&a) != 0);
	close(fd6);
	addr_parse(&a, "[::]:0", -1);
	fd6 = addr_udp_bind_v6only(&a, true);
	CHECK(fd6 >= 0);
	addr_parse(&b, "127.0.0.1:0", -1);
	addr_set_port(&b, addr_port(&a));
	fd4 = addr_udp_bind(&b);
	CHECK(fd4 >= 0);
	if (fd4 >= 0)
		close(fd4);
	close(fd6);
}

int main(void)
{
	test_v4_mapping();
	test_udp_bind_dual();
	test_parse();
	test_split();
	test_ip_key();
	test_loopback();
	test_global_v6();
	test_str_small();
	test_udp_bind();
	return tap_done("addr");
}
