/*
 * relay_listing.c's pure part: which address in a master's list is the
 * relay's front, under each rule (--public-address, a specific bind
 * address, this host's addresses, the port alone), and when a specific
 * bind address is one a master cannot see (private space behind a NAT).
 */
#include <string.h>

#include "addr.h"
#include "q3.h"
#include "relay.h"
#include "tap.h"

static struct addr A(const char *s) {
	struct addr a;

	if (addr_parse(&a, s, 0) < 0)
		memset(&a, 0, sizeof(a));
	return a;
}

/* A listed server from "IP:PORT". */
static struct q3_srv
S(const char *s) {
	struct addr a = A(s);
	struct addr_ip ip;
	struct q3_srv v;

	memset(&v, 0, sizeof(v));
	addr_to_ip(&a, &ip);
	v.v6 = !addr_is_v4(&a);
	memcpy(v.ip, v.v6 ? ip.b : ip.b + 12, v.v6 ? 16 : 4);
	v.port = addr_port(&a);
	return v;
}

static enum relay_listing_match
M(const struct relay_listing_self *self, const char *srv)
{
	struct q3_srv s = S(srv);

	return relay_listing_match(self, &s);
}

static void test_rules(void)
{
	struct relay_listing_self self;
	struct addr listen, pub, master;

	/* A specific public bind address, a master on the internet: BIND. */
	listen = A("198.51.100.7:27960");
	master = A("192.0.2.1:27950");
	relay_listing_self_init(&self, &listen, NULL, &master);
	CHECK_EQ_INT(self.rule, RELAY_MATCH_BIND);
	CHECK_EQ_INT(M(&self, "198.51.100.7:27960"), RELAY_MATCH_BIND);
	CHECK_EQ_INT(M(&self, "198.51.100.8:27960"), RELAY_MATCH_PORT);
	CHECK_EQ_INT(M(&self, "198.51.100.7:27961"), RELAY_MATCH_NONE);
	CHECK(relay_listing_enough(&self, RELAY_MATCH_BIND));
	/* Another server on our port is not us. */
	CHECK(!relay_listing_enough(&self, RELAY_MATCH_PORT));

	/* Loopback bind, loopback master (the tests): BIND. */
	listen = A("127.0.0.1:40000");
	master = A("127.0.0.1:27950");
	relay_listing_self_init(&self, &listen, NULL, &master);
	CHECK_EQ_INT(self.rule, RELAY_MATCH_BIND);
	CHECK_EQ_INT(M(&self, "127.0.0.1:40000"), RELAY_MATCH_BIND);

	/* A private bind address and a master on the internet: the master
	 * sees the NAT's address, so the bind address is no rule there. */
	listen = A("192.168.1.10:27960");
	relay_listing_self_init(&self, &listen, NULL, &master);
	CHECK_EQ_INT(self.rule, RELAY_MATCH_BIND); /* loopback master: same realm */
	master = A("192.0.2.1:27950");
	for (const char *p = "10.1.2.3:27960\0"
			     "172.16.0.1:27960\0"
			     "172.31.255.1:27960\0"
			     "100.64.0.9:27960\0"
			     "169.254.3.4:27960\0"
			     "192.168.1.10:27960\0";
	     *p; p += strlen(p) + 1) {
		listen = A(p);
		relay_listing_self_init(&self, &listen, NULL, &master);
		CHECK_EQ_INT(self.rule, RELAY_MATCH_LOCAL);
	}
	/* 172.32/12 and 100.128/10 are not private. */
	listen = A("172.32.0.1:27960");
	relay_listing_self_init(&self, &listen, NULL, &master);
	CHECK_EQ_INT(self.rule, RELAY_MATCH_BIND);
	listen = A("100.128.0.1:27960");
	relay_listing_self_init(&self, &listen, NULL, &master);
	CHECK_EQ_INT(self.rule, RELAY_MATCH_BIND);
	/* A private master (a LAN master) does see a private bind address. */
	listen = A("192.168.1.10:27960");
	master = A("192.168.1.2:27950");
	relay_listing_self_init(&self, &listen, NULL, &master);
	CHECK_EQ_INT(self.rule, RELAY_MATCH_BIND);

	/* The wildcard: this host's addresses (LOCAL), the port alone as a
	 * weak fallback. */
	listen = A("0.0.0.0:27960");
	master = A("192.0.2.1:27950");
	relay_listing_self_init(&self, &listen, NULL, &master);
	CHECK_EQ_INT(self.rule, RELAY_MATCH_LOCAL);
	CHECK_EQ_INT(self.port, 27960);
	{
		struct addr l1 = A("203.0.113.5:0"), l2 = A("127.0.0.1:0");

		addr_to_ip(&l1, &self.local[0]);
		addr_to_ip(&l2, &self.local[1]);
		self.nlocal = 2;
	}
	CHECK_EQ_INT(M(&self, "203.0.113.5:27960"), RELAY_MATCH_LOCAL);
	CHECK_EQ_INT(M(&self, "198.51.100.99:27960"), RELAY_MATCH_PORT);
	CHECK_EQ_INT(M(&self, "203.0.113.5:27961"), RELAY_MATCH_NONE);
	CHECK(relay_listing_enough(&self, RELAY_MATCH_LOCAL));
	CHECK(relay_listing_enough(&self, RELAY_MATCH_PORT)); /* weak, reported so */
	CHECK(!relay_listing_enough(&self, RELAY_MATCH_NONE));

	/* --public-address: only that address (and port) counts; the bind
	 * address is a candidate at most. */
	listen = A("192.168.1.10:27960");
	pub = A("203.0.113.5:0");
	relay_listing_self_init(&self, &listen, &pub, &master);
	CHECK_EQ_INT(self.rule, RELAY_MATCH_PUBLIC);
	CHECK_EQ_INT(self.port, 27960);
	CHECK_EQ_INT(M(&self, "203.0.113.5:27960"), RELAY_MATCH_PUBLIC);
	CHECK_EQ_INT(M(&self, "192.168.1.10:27960"), RELAY_MATCH_PORT);
	CHECK(!relay_listing_enough(&self, RELAY_MATCH_PORT));
	CHECK(relay_listing_enough(&self, RELAY_MATCH_PUBLIC));
	/* A NAT that maps another port: IP:PORT. */
	pub = A("203.0.113.5:27999");
	relay_listing_self_init(&self, &listen, &pub, &master);
	CHECK_EQ_INT(M(&self, "203.0.113.5:27999"), RELAY_MATCH_PUBLIC);
	CHECK_EQ_INT(M(&self, "203.0.113.5:27960"), RELAY_MATCH_NONE);

	/* IPv6: a global bind address is BIND; a ULA one behind a global
	 * master is not; '/' entries compare on all 16 bytes; an IPv4 entry
	 * never matches an IPv6 front. */
	listen = A("[2001:db8::7]:27960");
	master = A("[2001:db8:1::1]:27950");
	relay_listing_self_init(&self, &listen, NULL, &master);
	CHECK_EQ_INT(self.rule, RELAY_MATCH_BIND);
	CHECK_EQ_INT(M(&self, "[2001:db8::7]:27960"), RELAY_MATCH_BIND);
	CHECK_EQ_INT(M(&self, "[2001:db8::8]:27960"), RELAY_MATCH_PORT);
	CHECK_EQ_INT(M(&self, "0.0.0.7:27960"), RELAY_MATCH_PORT);
	listen = A("[fd00::7]:27960");
	relay_listing_self_init(&self, &listen, NULL, &master);
	CHECK_EQ_INT(self.rule, RELAY_MATCH_LOCAL);
	listen = A("[::1]:27960");
	master = A("[::1]:27950");
	relay_listing_self_init(&self, &listen, NULL, &master);
	CHECK_EQ_INT(self.rule, RELAY_MATCH_BIND);
	CHECK_EQ_INT(M(&self, "[::1]:27960"), RELAY_MATCH_BIND);
	listen = A("[::]:27960");
	relay_listing_self_init(&self, &listen, NULL, &master);
	CHECK_EQ_INT(self.rule, RELAY_MATCH_LOCAL);

	CHECK_EQ_STR(relay_listing_match_name(RELAY_MATCH_PUBLIC), "public_address");
	CHECK_EQ_STR(relay_listing_match_name(RELAY_MATCH_BIND), "bind_address");
	CHECK_EQ_STR(relay_listing_match_name(RELAY_MATCH_LOCAL), "local_address");
	CHECK_EQ_STR(relay_listing_match_name(RELAY_MATCH_PORT), "port_only");
	CHECK_EQ_STR(relay_listing_match_name(RELAY_MATCH_NONE), "none");
}

int main(void)
{
	test_rules();
	return tap_done("relaylisting");
}
