/*
 * The joiner's traversal record and the plan behind it (lobby_trav.h).
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lobby.h"
#include "lobby_ipcmsg.h"
#include "lobby_trav.h"
#include "log.h"
#include "strbuf.h"

struct cand {
	enum lobby_trav_kind kind;
	struct addr a;
	const char *skipped; /* why it was left out; NULL: dialled */
};

struct lobby_trav {
	struct lobby *l;
	struct joincode host;
	struct joincode me;
	bool observed;
	struct lobby_trav_plan plan;
	long long t0;
	/* Milliseconds from t0; -1: not (yet). */
	long long t_observed, t_race, t_knock, t_knock_reply, t_relay, t_host_hello, t_connected,
		t_done;
	struct cand cand[LOBBY_TRAV_MAX_CAND];
	size_t ncand;
	int knocks, knocks_refused, relay_knock;
	long last_knock_status;
	struct addr host_hello_from, via;
	bool connected, done;
	enum lobby_trav_kind won;
};

static const char *const KIND[] = {
	[LOBBY_TRAV_LAN] = "lan", [LOBBY_TRAV_PUBLIC] = "public", [LOBBY_TRAV_V6] = "v6",
	[LOBBY_TRAV_VPN] = "vpn", [LOBBY_TRAV_RELAY] = "relay",   [LOBBY_TRAV_PUNCHED] = "punched",
};

const char *lobby_trav_nat(const struct joincode *p)
{
	if (p == NULL)
		return "unknown";
	if (p->open)
		return "open";
	if (p->cgnat)
		return "cgnat";
	if (p->symmetric)
		return "symmetric";
	return p->has_public ? "cone" : "unknown";
}

static bool hard(const struct joincode *p)
{
	return p != NULL && !p->open && (p->symmetric || p->cgnat);
}

static const char *hard_words(const struct joincode *p)
{
	return p->cgnat ? "behind a carrier-grade NAT (a public address shared with others)"
			: "behind a symmetric NAT (a new public port for every peer)";
}

void lobby_trav_plan(const struct joincode *me, const struct joincode *host, bool netpunch,
		     struct lobby_trav_plan *out)
{
	memset(out, 0, sizeof(*out));
	if (netpunch) {
		out->knock_after_ms = LOBBY_RV_KNOCK_AFTER_MS;
		out->relay_from_knock = LOBBY_RV_RELAY_FROM_KNOCK;
		out->name = "netpunch";
		snprintf(out->why, sizeof(out->why),
			 "netpunch's schedule: the first knock after %d s, a relay port from "
			 "knock %d",
			 LOBBY_RV_KNOCK_AFTER_MS / 1000, LOBBY_RV_RELAY_FROM_KNOCK);
		return;
	}
	if (me != NULL && me->has_public && host->has_public && host->has_lan &&
	    addr_same_ip(&me->pub, &host->pub)) {
		out->knock_after_ms = LOBBY_TRAV_LAN_KNOCK_MS;
		out->relay_from_knock = 2;
		out->name = "lan";
		snprintf(out->why, sizeof(out->why),
			 "the host is behind our own NAT (the same public address): its LAN "
			 "address should answer at once; a knock only after %d ms",
			 LOBBY_TRAV_LAN_KNOCK_MS);
		return;
	}
	if (host->open) {
		out->knock_after_ms = LOBBY_TRAV_OPEN_KNOCK_MS;
		out->relay_from_knock = hard(me) ? 1 : 2;
		out->name = "direct";
		snprintf(out->why, sizeof(out->why),
			 "the host is reachable (no NAT, or its router maps the port): the direct "
			 "race should win alone; a knock only after %d s",
			 LOBBY_TRAV_OPEN_KNOCK_MS / 1000);
		return;
	}
	out->knock_after_ms = 0;
	if (hard(host) || hard(me)) {
		const struct joincode *who = hard(host) ? host : me;

		out->relay_from_knock = 1;
		out->name = "knock+relay";
		snprintf(out->why, sizeof(out->why),
			 "%s %s: no punched path can be predicted, so the first knock asks for a "
			 "relay port",
			 who == host ? "the host is" : "you are", hard_words(who));
		return;
	}
	out->relay_from_knock = 2;
	out->name = "knock";
	snprintf(out->why, sizeof(out->why),
		 "the host is behind a NAT that keeps one port per socket (cone): knock at once "
		 "so it punches toward us; a relay port from the second knock if that fails");
}

/* ---- a profile in JSON and in words ---- */

static void add_addr(struct json_object *o, const char *key, bool has, const struct addr *a)
{
	char s[ADDR_STRLEN];

	json_object_object_add(o, key,
			       has ? json_object_new_string(addr_str(a, s, sizeof(s))) : NULL);
}

static void add_str(struct json_object *o, const char *key, const char *s)
{
	json_object_object_add(o, key, s != NULL ? json_object_new_string(s) : NULL);
}

struct json_object *lobby_trav_profile_json(const struct joincode *p, const char *mapping,
					    const char *mapping_error)
{
	struct json_object *o = json_object_new_object();

	add_str(o, "nat", lobby_trav_nat(p));
	add_addr(o, "lan", p != NULL && p->has_lan, p != NULL ? &p->lan : NULL);
	add_addr(o, "public", p != NULL && p->has_public, p != NULL ? &p->pub : NULL);
	add_addr(o, "v6", p != NULL && p->has_v6, p != NULL ? &p->v6addr : NULL);
	json_object_object_add(o, "open", json_object_new_boolean(p != NULL && p->open));
	json_object_object_add(o, "symmetric", json_object_new_boolean(p != NULL && p->symmetric));
	json_object_object_add(o, "cgnat", json_object_new_boolean(p != NULL && p->cgnat));
	add_str(o, "mapping", mapping);
	add_str(o, "mapping_error", mapping_error);
	return o;
}

void lobby_trav_describe(const struct joincode *p, const char *mapping, const char *mapping_error,
			 struct strbuf *out)
{
	const char *nat = lobby_trav_nat(p);
	char a[ADDR_STRLEN], line[512];
	int n;

#define SAY(...)                                                                                   \
	do {                                                                                       \
		n = snprintf(line, sizeof(line), __VA_ARGS__);                                     \
		if (n > 0)                                                                         \
			strbuf_append(out, line,                                                   \
				      (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);    \
	} while (0)

	if (p != NULL && p->has_lan)
		SAY("On your local network you are %s.\n", addr_str(&p->lan, a, sizeof(a)));
	if (p != NULL && p->has_public)
		SAY("The internet sees you as %s.\n", addr_str(&p->pub, a, sizeof(a)));
	if (p != NULL && p->has_v6)
		SAY("You also have IPv6: %s.\n", addr_str(&p->v6addr, a, sizeof(a)));
	if (mapping != NULL)
		SAY("Your router forwards the lobby's port to you (%s).\n",
		    strcmp(mapping, "natpmp") == 0 ? "NAT-PMP" : "UPnP");
	else if (mapping_error != NULL)
		SAY("No port forwarding from your router: %s.\n", mapping_error);
	if (strcmp(nat, "open") == 0)
		SAY("You are reachable directly: players join you at once, and you reach any "
		    "host without help.\n");
	else if (strcmp(nat, "cone") == 0)
		SAY("Your router keeps one public port for the lobby (a cone NAT): players reach "
		    "you after a knock through the master, usually within a second; two "
		    "players behind such routers connect directly.\n");
	else if (strcmp(nat, "symmetric") == 0)
		SAY("Your router picks a new public port for every peer (a symmetric NAT): a "
		    "direct path cannot be predicted, so you connect through the master's relay "
		    "port unless the other side is reachable directly.\n");
	else if (strcmp(nat, "cgnat") == 0)
		SAY("Your provider shares one public address among many customers (carrier-grade "
		    "NAT): you connect through the master's relay port unless the other side is "
		    "reachable directly.\n");
	else
		SAY("No STUN server answered, so your public address is unknown: only players "
		    "on your own network, or hosts reachable directly, can connect with you.\n");
#undef SAY
}

/* ---- the record ---- */

static long long since(const struct lobby_trav *t)
{
	return ev_now(t->l->loop) - t->t0;
}

struct lobby_trav *lobby_trav_new(struct lobby *l, const struct joincode *host)
{
	struct lobby_trav *t = calloc(1, sizeof(*t));

	if (t == NULL)
		return NULL;
	t->l = l;
	t->host = *host;
	t->t0 = ev_now(l->loop);
	t->t_observed = t->t_race = t->t_knock = t->t_knock_reply = t->t_relay = -1;
	t->t_host_hello = t->t_connected = t->t_done = -1;
	t->relay_knock = -1;
	t->plan.name = "none";
	return t;
}

void lobby_trav_free(struct lobby_trav *t)
{
	free(t);
}

void lobby_trav_observed(struct lobby_trav *t, const struct joincode *me,
			 const struct lobby_trav_plan *plan)
{
	if (t == NULL)
		return;
	t->t_observed = since(t);
	if (me != NULL) {
		t->me = *me;
		t->observed = true;
	}
	t->plan = *plan;
	log_info("traversal-plan plan=%s knock_after_ms=%lld relay_from_knock=%d why=\"%s\"",
		 plan->name, plan->knock_after_ms, plan->relay_from_knock, plan->why);
}

static struct cand *find(struct lobby_trav *t, const struct addr *a)
{
	for (size_t i = 0; i < t->ncand; i++) {
		if (t->cand[i].skipped == NULL && addr_equal(&t->cand[i].a, a))
			return &t->cand[i];
	}
	return NULL;
}

static void add(struct lobby_trav *t, enum lobby_trav_kind kind, const struct addr *a,
		const char *skipped)
{
	if (t == NULL || t->ncand == LOBBY_TRAV_MAX_CAND || (skipped == NULL && find(t, a)))
		return;
	t->cand[t->ncand++] = (struct cand){kind, *a, skipped};
	if (kind == LOBBY_TRAV_RELAY && t->t_relay < 0)
		t->t_relay = since(t);
}

void lobby_trav_target(struct lobby_trav *t, enum lobby_trav_kind kind, const struct addr *a)
{
	add(t, kind, a, NULL);
}

void lobby_trav_skipped(struct lobby_trav *t, enum lobby_trav_kind kind, const struct addr *a,
			const char *why)
{
	add(t, kind, a, why);
}

void lobby_trav_race(struct lobby_trav *t)
{
	if (t != NULL && t->t_race < 0)
		t->t_race = since(t);
}

void lobby_trav_knock(struct lobby_trav *t, int n, bool relay)
{
	if (t == NULL)
		return;
	t->knocks = n;
	if (t->t_knock < 0)
		t->t_knock = since(t);
	if (relay && t->relay_knock < 0)
		t->relay_knock = n;
}

void lobby_trav_knock_reply(struct lobby_trav *t, long status, bool relay)
{
	if (t == NULL)
		return;
	t->last_knock_status = status;
	if (status != 200)
		t->knocks_refused++;
	else if (t->t_knock_reply < 0)
		t->t_knock_reply = since(t);
	(void)relay;
}

void lobby_trav_host_hello(struct lobby_trav *t, const struct addr *from)
{
	if (t == NULL || t->t_host_hello >= 0 || t->connected)
		return;
	t->t_host_hello = since(t);
	t->host_hello_from = *from;
}

void lobby_trav_connected(struct lobby_trav *t, const struct addr *from)
{
	const struct cand *c;

	if (t == NULL || t->connected)
		return;
	t->connected = true;
	t->t_connected = since(t);
	t->via = *from;
	c = find(t, from);
	t->won = c != NULL ? c->kind : LOBBY_TRAV_PUNCHED;
}

/* What the path that won is called: a public candidate reached after the
 * host punched toward our knock is "punched", one reached without is
 * "public". */
static const char *path_name(const struct lobby_trav *t)
{
	if (!t->connected)
		return NULL;
	if (t->won == LOBBY_TRAV_PUBLIC && !t->host.open && t->t_host_hello >= 0)
		return "punched";
	return KIND[t->won];
}

static void why_relayed(const struct lobby_trav *t, char *buf, size_t size)
{
	const struct joincode *me = t->observed ? &t->me : NULL;

	if (hard(&t->host) && hard(me))
		snprintf(buf, size,
			 "both sides are behind NATs that give a new port per peer or "
			 "share one address (host %s, you %s)",
			 lobby_trav_nat(&t->host), lobby_trav_nat(me));
	else if (hard(&t->host))
		snprintf(buf, size, "the host is %s and has no port mapping", hard_words(&t->host));
	else if (hard(me))
		snprintf(buf, size, "you are %s and the host is not reachable directly",
			 hard_words(me));
	else if (t->t_host_hello < 0)
		snprintf(buf, size, "the host never punched toward our knock (%d knocks)",
			 t->knocks);
	else
		snprintf(buf, size, "the host's punch did not get through either NAT in time");
}

static void add_ms(struct json_object *o, const char *key, long long v)
{
	json_object_object_add(o, key, v >= 0 ? json_object_new_int64(v) : NULL);
}

static struct json_object *record(const struct lobby_trav *t, bool ok, const char *detail)
{
	struct json_object *o = json_object_new_object(), *ms, *cands;
	const char *path = path_name(t);
	char s[ADDR_STRLEN], why[256];

	json_object_object_add(o, "role", json_object_new_string("joiner"));
	json_object_object_add(o, "result", json_object_new_string(ok ? "connected" : "failed"));
	add_str(o, "detail", ok ? NULL : detail);
	add_str(o, "path", path);
	add_addr(o, "via", t->connected, &t->via);
	add_str(o, "plan", t->plan.name);
	add_str(o, "plan_why", t->plan.why[0] != '\0' ? t->plan.why : NULL);
	json_object_object_add(o, "you",
			       lobby_trav_profile_json(t->observed ? &t->me : NULL, NULL, NULL));
	json_object_object_add(o, "host", lobby_trav_profile_json(&t->host, NULL, NULL));
	cands = json_object_new_array();
	for (size_t i = 0; i < t->ncand; i++) {
		const struct cand *c = &t->cand[i];
		struct json_object *e = json_object_new_object();
		const char *res;

		if (c->skipped != NULL)
			res = "skipped";
		else if (t->connected && addr_equal(&c->a, &t->via))
			res = "won";
		else
			res = "no answer";
		json_object_object_add(e, "kind", json_object_new_string(KIND[c->kind]));
		json_object_object_add(e, "addr",
				       json_object_new_string(addr_str(&c->a, s, sizeof(s))));
		json_object_object_add(e, "result", json_object_new_string(res));
		add_str(e, "why", c->skipped);
		json_object_array_add(cands, e);
	}
	if (t->connected && t->won == LOBBY_TRAV_PUNCHED) {
		struct json_object *e = json_object_new_object();

		json_object_object_add(e, "kind", json_object_new_string("punched"));
		json_object_object_add(e, "addr",
				       json_object_new_string(addr_str(&t->via, s, sizeof(s))));
		json_object_object_add(e, "result", json_object_new_string("won"));
		json_object_object_add(
			e, "why",
			json_object_new_string("the host's punch came from an address in "
					       "no code (its NAT's port for us)"));
		json_object_array_add(cands, e);
	}
	json_object_object_add(o, "candidates", cands);
	json_object_object_add(o, "knocks", json_object_new_int(t->knocks));
	json_object_object_add(o, "knocks_refused", json_object_new_int(t->knocks_refused));
	json_object_object_add(o, "relay_asked_at_knock",
			       t->relay_knock > 0 ? json_object_new_int(t->relay_knock) : NULL);
	ms = json_object_new_object();
	add_ms(ms, "observed", t->t_observed);
	add_ms(ms, "race", t->t_race);
	add_ms(ms, "knock", t->t_knock);
	add_ms(ms, "knock_answered", t->t_knock_reply);
	add_ms(ms, "relay_offered", t->t_relay);
	add_ms(ms, "host_punched", t->t_host_hello);
	add_ms(ms, "connected", t->t_connected);
	add_ms(ms, ok ? "joined" : "failed", t->t_done);
	json_object_object_add(o, "ms", ms);
	if (path != NULL && strcmp(path, "relay") == 0) {
		why_relayed(t, why, sizeof(why));
		json_object_object_add(o, "why_relayed", json_object_new_string(why));
	} else {
		json_object_object_add(o, "why_relayed", NULL);
	}
	return o;
}

void lobby_trav_done(struct lobby_trav *t, bool ok, const char *detail)
{
	struct lobby_event e;
	struct json_object *o, *why;
	char s[ADDR_STRLEN];

	if (t == NULL || t->done)
		return;
	t->done = true;
	t->t_done = since(t);
	o = record(t, ok, detail);
	why = json_object_object_get(o, "why_relayed");
	log_info("traversal result=%s path=%s via=%s plan=%s knocks=%d relay_at_knock=%d "
		 "connected_ms=%lld total_ms=%lld%s%s%s",
		 ok ? "connected" : "failed", t->connected ? path_name(t) : "-",
		 t->connected ? addr_str(&t->via, s, sizeof(s)) : "-", t->plan.name, t->knocks,
		 t->relay_knock, t->t_connected, t->t_done, why != NULL ? " why=\"" : "",
		 why != NULL ? json_object_get_string(why) : "", why != NULL ? "\"" : "");
	e = (struct lobby_event){.type = LOBBY_EV_TRAVERSAL, .traversal = o};
	lobby_ipc_emit(t->l, &e);
	lobby_ipc_state(t->l, "traversal", o); /* takes o */
}

/* ---- the host's side ---- */

int lobby_trav_host_join(struct lobby *l, const char *name, const struct addr *from,
			 const char *profile)
{
	struct json_object *o, *peer;
	struct lobby_event e;
	struct joincode c;
	bool has_code = false;
	const char *path;
	long long age = -1;
	char s[ADDR_STRLEN], err[96];
	int m = lobby_rv_knock_match(l, from, &age), kind;

	if (profile != NULL && profile[0] != '\0' &&
	    joincode_decode(profile, NULL, (long long)time(NULL), &c, err, sizeof(err)) == 0)
		has_code = true;
	if (m == 2)
		kind = LOBBY_PATH_RELAY;
	else if (has_code && c.has_lan && addr_equal(from, &c.lan))
		kind = LOBBY_PATH_LAN;
	else if (has_code && c.has_v6 && addr_equal(from, &c.v6addr))
		kind = LOBBY_PATH_V6;
	else if (m == 1)
		kind = LOBBY_PATH_PUNCHED;
	else
		kind = LOBBY_PATH_PUBLIC;
	path = lobby_metrics_path_name((enum lobby_metrics_path)kind);
	o = json_object_new_object();
	json_object_object_add(o, "role", json_object_new_string("host"));
	json_object_object_add(o, "you",
			       lobby_trav_profile_json(lobby_observe_profile(l),
						       lobby_observe_mapping(l),
						       lobby_observe_mapping_error(l)));
	peer = has_code ? lobby_trav_profile_json(&c, NULL, NULL) : json_object_new_object();
	json_object_object_add(peer, "name", json_object_new_string(name));
	json_object_object_add(peer, "path", json_object_new_string(path));
	json_object_object_add(peer, "via", json_object_new_string(addr_str(from, s, sizeof(s))));
	json_object_object_add(peer, "knocked", json_object_new_boolean(m != 0));
	json_object_object_add(peer, "ms_since_knock", m != 0 ? json_object_new_int64(age) : NULL);
	json_object_object_add(o, "peer", peer);
	log_info("traversal role=host peer=\"%s\" path=%s via=%s nat=%s knocked=%d "
		 "ms_since_knock=%lld",
		 name, path, s, has_code ? lobby_trav_nat(&c) : "unknown", m != 0, age);
	e = (struct lobby_event){.type = LOBBY_EV_TRAVERSAL, .traversal = o};
	lobby_ipc_emit(l, &e);
	lobby_ipc_state(l, "traversal", o); /* the latest join's; takes o */
	return kind;
}
