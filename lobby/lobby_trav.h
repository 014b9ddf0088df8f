/*
 * How a joiner got through, or why it did not (issue 11 §3): the plan it
 * chose from both NAT profiles, what each candidate did, the time to each
 * step, the path that won and, when relayed, why. Kept by the joiner,
 * written once the join ends (connected or failed) to lobby_state.json
 * ("traversal"), to lobby_out.jsonl (a {"type":"traversal"} event, which
 * netpunch's menu ignores) and to the log (one traversal line).
 *
 * The plan is the fast schedule on netpunch's wire (netpunch-wire.md §5):
 *   - a reachable host (open: no NAT, or a UPnP/NAT-PMP mapping): the
 *     direct race alone; a knock only if it has not won after 1 s;
 *   - either side symmetric or behind a CGNAT: knock at once and ask for
 *     a relay port with that first knock;
 *   - otherwise (cone x cone): knock at once, a relay port from the
 *     second knock (2 s later) if the punch has not won;
 * or, with --schedule netpunch, the reference's: the first knock after
 * 4 s, a relay port from the second. Knocks go every 2 s either way (30 a
 * minute, under the master's 40 per address).
 *
 * lobby_trav_describe and lobby_trav_profile_json say a profile in words
 * a player understands and as JSON (rally-lobby observe, the record's
 * "you" and "host").
 */
#ifndef LOBBY_TRAV_H
#define LOBBY_TRAV_H

#include <stdbool.h>
#include <stddef.h>

#include "addr.h"
#include "joincode.h"

struct lobby;
struct lobby_trav;
struct json_object;
struct strbuf;

#define LOBBY_TRAV_OPEN_KNOCK_MS (1000) /* a reachable host: knock if not in by then */
/* A host behind our own NAT: its LAN address answers in milliseconds if it
 * answers at all (a second NAT inside ours, or a LAN that does not reach
 * it, never does), so the knock comes sooner than for a reachable host. */
#define LOBBY_TRAV_LAN_KNOCK_MS (250)
#define LOBBY_TRAV_MAX_CAND     (24)

/* What a dial target is (the record's candidate "kind"). */
enum lobby_trav_kind {
	LOBBY_TRAV_LAN,
	LOBBY_TRAV_PUBLIC,
	LOBBY_TRAV_V6,
	LOBBY_TRAV_VPN,
	LOBBY_TRAV_RELAY,
	LOBBY_TRAV_PUNCHED, /* an address the host punched from, in no code */
};

/* When to knock and when to ask for a relay port. */
struct lobby_trav_plan {
	long long knock_after_ms; /* from the race's start */
	int relay_from_knock;     /* 1: the first knock asks for a relay port */
	const char *name;         /* "direct", "knock", "knock+relay", "netpunch" */
	char why[200];            /* in words */
};

/* The plan for reaching host from me (me NULL: not observed). */
void lobby_trav_plan(const struct joincode *me, const struct joincode *host, bool netpunch,
		     struct lobby_trav_plan *out);

/* "open", "cone", "symmetric", "cgnat" or "unknown" (no public address). */
const char *lobby_trav_nat(const struct joincode *p);

/* The profile as a JSON object (nat, lan, public, v6, mapping...), new
 * reference; mapping/mapping_error may be NULL. */
struct json_object *lobby_trav_profile_json(const struct joincode *p, const char *mapping,
					    const char *mapping_error);
/* The profile in a few sentences, for a player (rally-lobby observe). */
void lobby_trav_describe(const struct joincode *p, const char *mapping, const char *mapping_error,
			 struct strbuf *out);

/* ---- the joiner's record ---- */

struct lobby_trav *lobby_trav_new(struct lobby *l, const struct joincode *host);
void lobby_trav_free(struct lobby_trav *t);
/* Observed; the plan chosen (copied). */
void lobby_trav_observed(struct lobby_trav *t, const struct joincode *me,
			 const struct lobby_trav_plan *plan);
void lobby_trav_target(struct lobby_trav *t, enum lobby_trav_kind kind, const struct addr *a);
/* A candidate the code had but we leave out, and why. */
void lobby_trav_skipped(struct lobby_trav *t, enum lobby_trav_kind kind, const struct addr *a,
			const char *why);
void lobby_trav_race(struct lobby_trav *t);
void lobby_trav_knock(struct lobby_trav *t, int n, bool relay);
/* The master's answer to a knock: status, and whether a relay came. */
void lobby_trav_knock_reply(struct lobby_trav *t, long status, bool relay);
/* A HELLO from the host (its punch toward our knock). */
void lobby_trav_host_hello(struct lobby_trav *t, const struct addr *from);
void lobby_trav_connected(struct lobby_trav *t, const struct addr *from);
/* The join ended: ok (the welcome came) or failed with detail. Writes the
 * record (state, event, log) once. */
void lobby_trav_done(struct lobby_trav *t, bool ok, const char *detail);

/* ---- the host's side ---- */

/* A new player is in: how it came (lan, v6, relay, punched after a knock,
 * or public: straight to our address), from its own code (the join's
 * profile, may be NULL) and the knocks we answered; said like the
 * joiner's record (state, event, log). Returns that path
 * (enum lobby_metrics_path). */
int lobby_trav_host_join(struct lobby *l, const char *name, const struct addr *from,
			 const char *profile);

#endif
