/*
 * lobby/lobby_trav: the plan for every pair of NAT profiles (when the first
 * knock goes, from which knock a relay port is asked), netpunch's schedule,
 * the NAT class names, the profile as JSON, and the profile in words.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "lobby.h"
#include "lobby_trav.h"
#include "strbuf.h"
#include "tap.h"

enum kind { CONE, SYM, CGNAT, OPEN, UNKNOWN };

static struct joincode profile(enum kind k, const char *pub)
{
	struct joincode c;

	memset(&c, 0, sizeof(c));
	if (k != UNKNOWN) {
		c.has_public = addr_parse(&c.pub, pub, -1) == 0;
		c.has_lan = addr_parse(&c.lan, "192.168.1.10:29471", -1) == 0;
	}
	c.symmetric = k == SYM;
	c.cgnat = k == CGNAT;
	c.open = k == OPEN;
	return c;
}

static void plan_is(enum kind me, enum kind host, bool netpunch, long long after, int relay,
		    const char *name)
{
	struct joincode m = profile(me, "203.0.113.5:40000");
	struct joincode h = profile(host, "198.51.100.7:29471");
	struct lobby_trav_plan p;

	lobby_trav_plan(&m, &h, netpunch, &p);
	CHECK_EQ_INT(p.knock_after_ms, after);
	CHECK_EQ_INT(p.relay_from_knock, relay);
	CHECK_EQ_STR(p.name, name);
	CHECK(p.why[0] != '\0');
}

static void plans(void)
{
	/* cone x cone: knock at once, relay from the 2nd knock. */
	plan_is(CONE, CONE, false, 0, 2, "knock");
	/* Either side symmetric or CGNAT: a relay with the first knock. */
	plan_is(SYM, CONE, false, 0, 1, "knock+relay");
	plan_is(CONE, SYM, false, 0, 1, "knock+relay");
	plan_is(SYM, SYM, false, 0, 1, "knock+relay");
	plan_is(CGNAT, CONE, false, 0, 1, "knock+relay");
	plan_is(CONE, CGNAT, false, 0, 1, "knock+relay");
	/* A reachable host: the race alone first; a hard joiner asks for the
	 * relay with its (late) first knock. */
	plan_is(CONE, OPEN, false, LOBBY_TRAV_OPEN_KNOCK_MS, 2, "direct");
	plan_is(SYM, OPEN, false, LOBBY_TRAV_OPEN_KNOCK_MS, 1, "direct");
	/* Not observed ourselves (no STUN answer): the host decides. */
	plan_is(UNKNOWN, CONE, false, 0, 2, "knock");
	plan_is(UNKNOWN, SYM, false, 0, 1, "knock+relay");
	/* netpunch's schedule whatever the pair. */
	plan_is(CONE, CONE, true, LOBBY_RV_KNOCK_AFTER_MS, LOBBY_RV_RELAY_FROM_KNOCK, "netpunch");
	plan_is(SYM, SYM, true, LOBBY_RV_KNOCK_AFTER_MS, LOBBY_RV_RELAY_FROM_KNOCK, "netpunch");
	plan_is(CONE, OPEN, true, LOBBY_RV_KNOCK_AFTER_MS, LOBBY_RV_RELAY_FROM_KNOCK, "netpunch");
}

static void same_nat(void)
{
	/* Our public address is the host's: the LAN path, knock late. */
	struct joincode m = profile(SYM, "198.51.100.7:40000");
	struct joincode h = profile(SYM, "198.51.100.7:29471");
	struct lobby_trav_plan p;

	lobby_trav_plan(&m, &h, false, &p);
	CHECK_EQ_STR(p.name, "lan");
	CHECK_EQ_INT(p.knock_after_ms, LOBBY_TRAV_LAN_KNOCK_MS);
	/* Without the host's LAN address there is no LAN path to wait for. */
	h.has_lan = false;
	lobby_trav_plan(&m, &h, false, &p);
	CHECK_EQ_STR(p.name, "knock+relay");
	/* No profile of ours at all. */
	lobby_trav_plan(NULL, &h, false, &p);
	CHECK_EQ_STR(p.name, "knock+relay");
	CHECK_EQ_INT(p.knock_after_ms, 0);
}

static void nat_names(void)
{
	struct joincode c = profile(CONE, "198.51.100.7:1");

	CHECK_EQ_STR(lobby_trav_nat(&c), "cone");
	c.symmetric = true;
	CHECK_EQ_STR(lobby_trav_nat(&c), "symmetric");
	c.cgnat = true;
	CHECK_EQ_STR(lobby_trav_nat(&c), "cgnat");
	c.open = true; /* a mapping beats what is behind it */
	CHECK_EQ_STR(lobby_trav_nat(&c), "open");
	c = profile(UNKNOWN, NULL);
	CHECK_EQ_STR(lobby_trav_nat(&c), "unknown");
	CHECK_EQ_STR(lobby_trav_nat(NULL), "unknown");
}

static void json_and_words(void)
{
	struct joincode c = profile(SYM, "198.51.100.7:29471");
	struct json_object *o = lobby_trav_profile_json(&c, NULL, "no UPnP router answered");
	struct strbuf b;

	CHECK_EQ_STR(json_object_get_string(json_object_object_get(o, "nat")), "symmetric");
	CHECK_EQ_STR(json_object_get_string(json_object_object_get(o, "public")),
		     "198.51.100.7:29471");
	CHECK_EQ_STR(json_object_get_string(json_object_object_get(o, "lan")),
		     "192.168.1.10:29471");
	CHECK(json_object_object_get(o, "v6") == NULL);
	CHECK(json_object_get_boolean(json_object_object_get(o, "symmetric")));
	CHECK(json_object_object_get(o, "mapping") == NULL);
	CHECK_EQ_STR(json_object_get_string(json_object_object_get(o, "mapping_error")),
		     "no UPnP router answered");
	json_object_put(o);
	o = lobby_trav_profile_json(NULL, NULL, NULL);
	CHECK_EQ_STR(json_object_get_string(json_object_object_get(o, "nat")), "unknown");
	json_object_put(o);

	strbuf_init(&b, 4096);
	lobby_trav_describe(&c, NULL, "no UPnP router answered", &b);
	CHECK(b.p != NULL && strstr(b.p, "a symmetric NAT") != NULL);
	CHECK(b.p != NULL && strstr(b.p, "The internet sees you as 198.51.100.7:29471") != NULL);
	CHECK(b.p != NULL && strstr(b.p, "No port forwarding from your router: no UPnP") != NULL);
	strbuf_release(&b);
	c = profile(OPEN, "198.51.100.7:29471");
	strbuf_init(&b, 4096);
	lobby_trav_describe(&c, "natpmp", NULL, &b);
	CHECK(b.p != NULL && strstr(b.p, "(NAT-PMP)") != NULL);
	CHECK(b.p != NULL && strstr(b.p, "reachable directly") != NULL);
	strbuf_release(&b);
}

int main(void)
{
	plans();
	same_nat();
	nat_names();
	json_and_words();
	return tap_done("lobbytrav");
}
