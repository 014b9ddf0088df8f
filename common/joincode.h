/*
 * netpunch join codes (netpunch-wire.md §4; vectors: joincode.json).
 *
 * A code is RFC 4648 base32 (upper case, no padding) of
 *   flags | ts u32be | [lan_v4] | [public_v4] | [v6] | [secret 12] | tail
 * and a locked code is 0xFF | ts | ct | tag16 with the body (everything but
 * ts) encrypted under PBKDF2-HMAC-SHA256(password, "tpf2mp-code|" || ts,
 * 600,000 iterations). Decoding a locked code is therefore slow (about a
 * second): the lobby runs it on its worker thread, never on the loop.
 *
 * Pure functions: no I/O, no clock (the caller passes now), no logging.
 * Errors carry netpunch's exact strings in err.
 */
#ifndef JOINCODE_H
#define JOINCODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"

#define JOINCODE_SECRET_LEN (12)
#define JOINCODE_TTL        (600) /* seconds; an older code only warns */
#define JOINCODE_MAX_TEXT   (256) /* longest code text we produce or accept */
#define JOINCODE_LOCK_ITERS (600000)

struct joincode {
	/* NAT profile flags. */
	bool open, symmetric, cgnat, v6;
	/* Candidates (has_* says which are present). v6 is an IPv6 address
	 * with its port. */
	bool has_lan, has_public, has_v6, has_vpn, has_vpn2;
	struct addr lan, pub, v6addr, vpn, vpn2;
	bool has_secret;
	uint8_t secret[JOINCODE_SECRET_LEN];
	uint64_t steam; /* SteamID64, 0 = none */
	/* Filled by decoding (v6 above too: true when a v6 candidate came). */
	uint32_t ts;
	bool locked;
	bool steam_only; /* the code was a Steam ID: steam set, no secret */
	long long age;   /* now - ts */
	bool stale;      /* age > JOINCODE_TTL */
};

/*
 * Sets c's secret from len bytes, as netpunch's encoder takes one: len 0
 * means no secret; any length but JOINCODE_SECRET_LEN is -EINVAL with err
 * "secret must be 12 bytes".
 */
int joincode_set_secret(struct joincode *c, const uint8_t *secret, size_t len, char *err,
			size_t errsize);

/*
 * Encodes c (ts taken from c->ts; the flags open, symmetric, cgnat and the
 * candidates, not c->v6) as a code, locked when password is a non-empty
 * string (PBKDF2: slow, run it off the loop). Returns the text length, or
 * -EINVAL with err set when a candidate has the wrong address family,
 * -ENOSPC when text is too small, -EIO when OpenSSL fails.
 */
int joincode_encode(const struct joincode *c, const char *password, char *text, size_t size,
		    char *err, size_t errsize);

/*
 * Decodes a code typed by a human (stripped, case-insensitive). password may
 * be NULL. A Steam-ID code (joincode_steam_id) decodes to steam_only with
 * ts = now. Returns 0, or a negative value with err set to netpunch's
 * message:
 *   -EINVAL  "not valid base32: <Python's message>", "code too short",
 *            "locked code too short", "truncated code",
 *            "6to4-derived v6 but no public_v4 to rebuild";
 *   -ENOKEY  "this code is locked -- enter the lobby password" (no or an
 *            empty password);
 *   -EACCES  "wrong password for this code";
 *   -EMSGSIZE "code too long" (over JOINCODE_MAX_TEXT characters; ours);
 *   -EIO     OpenSSL failed.
 */
int joincode_decode(const char *text, const char *password, long long now, struct joincode *c,
		    char *err, size_t errsize);

/* True (and the binary blob's first byte checked) when text decodes to a
 * locked code; cheap (no PBKDF2). */
bool joincode_is_locked(const char *text);

/*
 * A Steam-ID code: 17 digits in the individual-account range, optionally
 * as a steamcommunity.com/profiles/ URL. Returns true with *id.
 */
bool joincode_steam_id(const char *text, uint64_t *id);

/*
 * The dial order of netpunch-wire.md §4.4: vpn_v4, vpn2_v4, lan_v4,
 * public_v4 - without public_v4 when my_public equals the peer's public
 * address and the peer has a LAN candidate (same NAT). my_public may be
 * NULL. Returns the count written to out (at most 4). IPv4 only, as
 * netpunch dials (my_has_v6=False): joincode_targets_for with
 * JOINCODE_FAM_V4.
 */
int joincode_targets(const struct joincode *c, const struct addr *my_public, struct addr *out,
		     int max);

/* The address families a dialer has (joincode_targets_for). */
enum joincode_family {
	JOINCODE_FAM_V4 = 1U << 0,
	JOINCODE_FAM_V6 = 1U << 1,
};

#define JOINCODE_MAX_TARGETS (5) /* vpn, vpn2, lan, public, v6 */

/*
 * joincode_targets for a dialer with the families in mine: the peer's v6
 * candidate joins the list when mine has JOINCODE_FAM_V6 - after the IPv4
 * ones, or first when mine has no JOINCODE_FAM_V4 (a v6-only dialer, whose
 * IPv4 sends cannot leave). Returns the count written to out (at most
 * JOINCODE_MAX_TARGETS).
 */
int joincode_targets_for(const struct joincode *c, const struct addr *my_public, unsigned mine,
			 struct addr *out, int max);

#endif
