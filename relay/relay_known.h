/*
 * The known players: addresses that completed a connect (the server
 * answered connectResponse to them through the relay and they then sent
 * game traffic), remembered for --known-hours with their last-seen time,
 * at most --known-max of them (the least recently seen make room). Attack
 * mode lets them through; the query cache gives them a larger reply budget.
 *
 * The table and its file codec are pure (the clock comes from the caller);
 * relay_qcache.c keeps the file in <state-dir>/known-players:
 *
 *   # comment lines and blank lines are ignored
 *   rally-relay-known-players 1
 *   203.0.113.7 1765432100
 *   2001:db8::5 1765439999
 *
 * one "IP LAST_SEEN" per line (Unix seconds, least recent first), after the
 * header line. Loading is all or nothing: the first bad line is named.
 */
#ifndef RELAY_KNOWN_H
#define RELAY_KNOWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"

#define RELAY_KNOWN_MAX      (65536)
#define RELAY_KNOWN_HOURS    (72)
#define RELAY_KNOWN_LINE_MAX (64) /* longest entry line (comments aside) */
#define RELAY_KNOWN_HEADER   "rally-relay-known-players 1"
/* The file's cap: every entry at the longest line, plus room for comments. */
#define RELAY_KNOWN_FILE_MAX(n) ((size_t)(n)*RELAY_KNOWN_LINE_MAX + 65536)

struct relay_known;
struct strbuf;

/* max entries, forgotten ttl_s after they were last seen. NULL, errno set. */
struct relay_known *relay_known_new(size_t max, long long ttl_s);
void relay_known_free(struct relay_known *k);

bool relay_known_has(const struct relay_known *k, const struct addr_ip *ip);
/* ip seen now (Unix seconds): added (returns 1, the least recent entry
 * evicted when full) or refreshed (returns 0). */
int relay_known_note(struct relay_known *k, const struct addr_ip *ip, long long now_s);
/* Forgets entries last seen ttl_s or more before now_s; returns how many. */
size_t relay_known_expire(struct relay_known *k, long long now_s);
size_t relay_known_count(const struct relay_known *k);
/* Entries dropped to make room since creation. */
uint64_t relay_known_evicted(const struct relay_known *k);

/* A load error: the line (1-based, 0 for the file as a whole) and why. */
struct relay_known_err {
	int line;
	char msg[160];
};

/*
 * Reads a file's text[0..len) into k (which must be empty). Entries older
 * than the TTL are skipped, last-seen times in the future are taken as
 * now_s, and beyond max entries the least recent ones are left out.
 * Returns the number of entries kept, or -EBADMSG with err filled (no
 * header, a bad IP or time, the same IP twice, a NUL byte, a line over
 * RELAY_KNOWN_LINE_MAX); k is then left empty.
 */
int relay_known_parse(struct relay_known *k, const char *text, size_t len, long long now_s,
		      struct relay_known_err *err);

/* Appends the file's text (header, then entries least recent first). */
void relay_known_format(const struct relay_known *k, struct strbuf *out);

#endif
