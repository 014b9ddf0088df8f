/*
 * Fuzz target for common/joincode and common/base32: the input is a code
 * as a human would paste it (any bytes; cut at the first NUL).
 *
 * PBKDF2 (600,000 iterations, about half a second) is kept out of the
 * loop: a password is only passed for texts joincode_is_locked() calls
 * unlocked (where it is ignored), so the expensive branch never runs.
 * Locked texts are decoded without a password and with "" (both must stop
 * at "locked code too short" or "this code is locked"). The code behind a
 * lock is the same parser as a plain code's, which this target covers.
 *
 * Invariants checked:
 * - decode returns 0 or one of the documented errors, with err set;
 * - a password changes nothing for an unlocked code;
 * - on success: a Steam-ID code has only its SteamID; candidates have
 *   their families (v4, v6); age and stale follow ts; the dial list has
 *   at most 4 entries, all IPv4;
 * - round trip: the decoded fields encode (unlocked) to a code that
 *   decodes to the same fields - unless the rebuilt first byte is 0xFF,
 *   netpunch's lock marker (all flags set and a 6to4 v6: a format quirk
 *   netpunch shares, see below);
 * - base32: whatever decodes re-encodes to text that decodes to the same
 *   bytes.
 */
#include <errno.h>
#include <string.h>

#include "addr.h"
#include "base32.h"
#include "fuzz.h"
#include "joincode.h"

#define NOW (1790000042LL)

static bool addr_same(const struct addr *a, const struct addr *b)
{
	return a->ss.ss_family == b->ss.ss_family && addr_equal(a, b);
}

static bool same_fields(const struct joincode *a, const struct joincode *b)
{
	if (a->open != b->open || a->symmetric != b->symmetric || a->cgnat != b->cgnat ||
	    a->v6 != b->v6 || a->has_lan != b->has_lan || a->has_public != b->has_public ||
	    a->has_v6 != b->has_v6 || a->has_vpn != b->has_vpn || a->has_vpn2 != b->has_vpn2 ||
	    a->has_secret != b->has_secret || a->steam != b->steam || a->ts != b->ts)
		return false;
	if ((a->has_lan && !addr_same(&a->lan, &b->lan)) ||
	    (a->has_public && !addr_same(&a->pub, &b->pub)) ||
	    (a->has_v6 && !addr_same(&a->v6addr, &b->v6addr)) ||
	    (a->has_vpn && !addr_same(&a->vpn, &b->vpn)) ||
	    (a->has_vpn2 && !addr_same(&a->vpn2, &b->vpn2)))
		return false;
	return !a->has_secret || memcmp(a->secret, b->secret, JOINCODE_SECRET_LEN) == 0;
}

static void check_decoded(const struct joincode *c)
{
	struct addr t[JOINCODE_MAX_TARGETS];
	int n;

	if (c->steam_only) {
		FUZZ_CHECK(c->steam != 0 && !c->has_lan && !c->has_public && !c->has_v6 &&
			   !c->has_vpn && !c->has_secret && c->age == 0 && c->ts == (uint32_t)NOW);
		return;
	}
	FUZZ_CHECK(!c->has_lan || addr_family(&c->lan) == AF_INET);
	FUZZ_CHECK(!c->has_public || addr_family(&c->pub) == AF_INET);
	FUZZ_CHECK(!c->has_vpn || addr_family(&c->vpn) == AF_INET);
	FUZZ_CHECK(!c->has_vpn2 || (c->has_vpn && addr_family(&c->vpn2) == AF_INET));
	FUZZ_CHECK(!c->has_v6 || addr_family(&c->v6addr) == AF_INET6);
	FUZZ_CHECK(c->v6 == c->has_v6);
	FUZZ_CHECK(c->age == NOW - (long long)c->ts);
	FUZZ_CHECK(c->stale == (c->age > JOINCODE_TTL));
	n = joincode_targets(c, c->has_public ? &c->pub : NULL, t, 4);
	FUZZ_CHECK(n >= 0 && n <= 4);
	for (int i = 0; i < n; i++)
		FUZZ_CHECK(addr_family(&t[i]) == AF_INET);
	/* With v6 of our own, exactly one more: the v6 candidate. */
	FUZZ_CHECK(joincode_targets_for(c, c->has_public ? &c->pub : NULL,
					JOINCODE_FAM_V4 | JOINCODE_FAM_V6, t,
					JOINCODE_MAX_TARGETS) == n + (c->has_v6 ? 1 : 0));
}

static void round_trip(const struct joincode *c)
{
	char text[JOINCODE_MAX_TEXT], err[160];
	uint8_t blob[128];
	struct joincode d;
	int n;

	n = joincode_encode(c, NULL, text, sizeof(text), err, sizeof(err));
	FUZZ_CHECK(n > 0);
	FUZZ_CHECK(base32_decode(text, (size_t)n, blob, sizeof(blob)) >= 5);
	/* All of open, symmetric, cgnat, lan, public, v6, 6to4 and secret
	 * make byte 0 0xFF, which every decoder (netpunch's too) reads as
	 * a lock. */
	if (blob[0] == 0xff) {
		FUZZ_CHECK(joincode_decode(text, NULL, NOW, &d, err, sizeof(err)) < 0);
		return;
	}
	FUZZ_CHECK(joincode_decode(text, NULL, NOW, &d, err, sizeof(err)) == 0);
	FUZZ_CHECK(same_fields(c, &d));
}

static void fuzz_base32(const char *text, size_t len)
{
	uint8_t out[256], again[256];
	char enc[512];
	int n, m, e;

	if (len > 300)
		return;
	n = base32_decode(text, len, out, sizeof(out));
	FUZZ_CHECK(n >= 0 || n == -EILSEQ || n == -EINVAL || n == -EBADMSG);
	if (n < 0) {
		FUZZ_CHECK(base32_strerror(n)[0] != '\0');
		return;
	}
	FUZZ_CHECK((size_t)n <= base32_decoded_max(len));
	e = base32_encode(out, (size_t)n, enc, sizeof(enc));
	FUZZ_CHECK(e >= 0 && (size_t)e == base32_encoded_len((size_t)n));
	m = base32_decode(enc, (size_t)e, again, sizeof(again));
	FUZZ_CHECK(m == n && memcmp(out, again, (size_t)n) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char text[1024], err[160], err2[160];
	struct joincode c, c2;
	size_t len = strnlen((const char *)data, size < sizeof(text) - 1 ? size : sizeof(text) - 1);
	bool locked;
	int r, r2;

	memcpy(text, data, len);
	text[len] = '\0';
	fuzz_base32(text, len);

	locked = joincode_is_locked(text);
	err[0] = '\0';
	r = joincode_decode(text, NULL, NOW, &c, err, sizeof(err));
	FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ENOKEY || r == -EMSGSIZE);
	FUZZ_CHECK(r == 0 || err[0] != '\0');
	FUZZ_CHECK(!locked || r < 0);
	if (locked) {
		/* Never PBKDF2 here: no password, or an empty one. */
		r2 = joincode_decode(text, "", NOW, &c2, err2, sizeof(err2));
		FUZZ_CHECK(r2 == r && strcmp(err, err2) == 0);
		FUZZ_CHECK(r == -ENOKEY || strcmp(err, "locked code too short") == 0 ||
			   r == -EMSGSIZE);
		return 0;
	}
	r2 = joincode_decode(text, "hunter2", NOW, &c2, err2, sizeof(err2));
	FUZZ_CHECK(r2 == r);
	if (r < 0) {
		FUZZ_CHECK(strcmp(err, err2) == 0);
		return 0;
	}
	FUZZ_CHECK(same_fields(&c, &c2) && c.steam_only == c2.steam_only);
	check_decoded(&c);
	if (!c.steam_only)
		round_trip(&c);
	return 0;
}
