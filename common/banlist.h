/*
 * Bans by source IP, with a reason and an optional expiry, in a bounded
 * table, and their JSON forms: the state file and the API request body.
 *
 * Expiry is wall-clock time (unix seconds) because bans outlive restarts;
 * lookups take it from the caller and only when a ban matched, so the packet
 * path reads no clock for clean addresses.
 *
 * State file:
 *   {"version":1,"bans":[{"ip":"203.0.113.7","reason":"aimbot",
 *     "created":1764500000,"expires":1764503600}, ...]}
 * ("expires": null or absent = permanent).
 * Request body (PUT /bans/{ip}): {"reason":"aimbot","duration":3600}
 * ("duration" optional, seconds, 1..BANLIST_MAX_DURATION).
 */
#ifndef BANLIST_H
#define BANLIST_H

#include <stdbool.h>
#include <stddef.h>

#include "addr.h"

#define BANLIST_REASON_MAX   (256)
#define BANLIST_MAX_DURATION (10LL * 365 * 24 * 3600)
/* Largest state file we accept: every ban at its longest, with room. */
#define BANLIST_FILE_MAX(cap) ((size_t)(cap) * (BANLIST_REASON_MAX * 6 + 160) + 64)

struct ban {
	struct addr_ip ip;
	char reason[BANLIST_REASON_MAX + 1];
	long long created; /* unix seconds */
	long long expires; /* unix seconds; 0 = never */
};

struct banlist;
struct strbuf;

struct banlist *banlist_new(size_t capacity);
void banlist_free(struct banlist *bl);

size_t banlist_count(const struct banlist *bl);

/*
 * The ban on ip, or NULL. A ban found expired at now_s is removed and NULL
 * returned, with *expired set (may be NULL) so the caller can save.
 */
const struct ban *banlist_find(struct banlist *bl, const struct addr_ip *ip, long long now_s,
			       bool *expired);

/*
 * Adds or replaces the ban on ip; duration_s 0 = permanent. Returns 1 when
 * created, 0 when replaced, -ENOSPC when full, -EINVAL for a bad reason.
 */
int banlist_put(struct banlist *bl, const struct addr_ip *ip, const char *reason,
		long long duration_s, long long now_s);

/* Removes the ban on ip: 0, or -ENOENT. */
int banlist_del(struct banlist *bl, const struct addr_ip *ip);

/* Drops bans expired at now_s; returns how many. */
size_t banlist_expire(struct banlist *bl, long long now_s);

/* Iteration in insertion order: start with prev = NULL. */
const struct ban *banlist_next(const struct banlist *bl, const struct ban *prev);

/* Appends the state file's JSON text for every ban. */
void banlist_to_json(const struct banlist *bl, struct strbuf *out);

/*
 * Replaces the contents of bl with the bans of a state file. Bans already
 * expired at now_s are skipped. On any error bl is left empty and err says
 * what is wrong ("bans[2].ip: not an IP address"); returns 0 or -EBADMSG
 * (-ENOSPC when there are more bans than the table holds).
 */
int banlist_load_json(struct banlist *bl, const char *text, size_t len, long long now_s, char *err,
		      size_t errsize);

/*
 * Parses a PUT body. Returns 0 with reason (NUL-terminated, at most
 * BANLIST_REASON_MAX bytes) and *duration_s (0 = permanent), or -EBADMSG with
 * err set.
 */
int banlist_parse_request(const char *body, size_t len, char reason[static BANLIST_REASON_MAX + 1],
			  long long *duration_s, char *err, size_t errsize);

#endif
