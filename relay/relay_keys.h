/*
 * Realm public keys for the coa-compatible tunnel (coa-relay-PROTOCOL.md
 * section 2, "Relay Verification"): a realm id in, its Ed25519 public key
 * (32 bytes) out.
 *
 * Two sources, one per relay:
 * - a keys file, one realm per line, "REALM_ID PUBLIC_KEY" ('#' starts a
 *   comment, blank lines are fine). REALM_ID is a UUID in its 8-4-4-4-12
 *   form, either case; PUBLIC_KEY is 64 hex digits or the 44 characters of
 *   standard base64 (with its '=') of exactly 32 bytes. At most
 *   RELAY_KEYS_MAX_REALMS realms, no realm twice. Loaded whole at start and
 *   on SIGHUP; answers at once from a hash table.
 * - PostgreSQL (coa_registry, role coa_relay), asynchronously on the loop:
 *   one connection, coa's own query, one lookup at a time from a bounded
 *   queue, each with its own deadline.
 *
 * A realm id that is not a UUID is unknown without further ado: it never
 * reaches the database. Keys are wiped when freed.
 */
#ifndef RELAY_KEYS_H
#define RELAY_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "ev.h"

#define RELAY_KEYS_PK_LEN             (32)
#define RELAY_KEYS_UUID_LEN           (36)                       /* without the NUL */
#define RELAY_KEYS_MAX_REALMS         (65536)                    /* per keys file */
#define RELAY_KEYS_FILE_MAX           ((size_t)32 * 1024 * 1024) /* bytes */
#define RELAY_KEYS_MAX_PENDING        (256)   /* PostgreSQL lookups queued or in flight */
#define RELAY_KEYS_LOOKUP_TIMEOUT_MS  (5000)  /* each lookup, from its submission */
#define RELAY_KEYS_CONNECT_TIMEOUT_MS (10000) /* one connection attempt */
#define RELAY_KEYS_BACKOFF_MIN_MS     (1000)  /* reconnect delays, doubling */
#define RELAY_KEYS_BACKOFF_MAX_MS     (30000)
/* The server's statement_timeout for our session (-c statement_timeout). */
#define RELAY_KEYS_STATEMENT_TIMEOUT_MS (3000)
/* A query still unanswered this long after its lookup's deadline means the
 * connection is dead (the statement timeout would have ended it). */
#define RELAY_KEYS_STUCK_MS (5000)

struct relay_keys;
struct relay_keys_req; /* one pending PostgreSQL lookup */
struct strbuf;

enum relay_keys_result {
	RELAY_KEYS_FOUND,   /* pk holds the realm's key */
	RELAY_KEYS_UNKNOWN, /* no such realm (or not published, not v2, bad id or key) */
	RELAY_KEYS_ERROR,   /* no answer now: database down, busy, timed out */
};

/* pk is valid for the call only and NULL unless res is RELAY_KEYS_FOUND. */
typedef void relay_keys_cb(void *arg, enum relay_keys_result res, const uint8_t pk[32]);

/* A keys file's first error: line 1-based, 0 for the file as a whole. */
struct relay_keys_err {
	int line;
	char msg[160];
};

/*
 * Exactly one of file and pg_conninfo (a libpq conninfo string or URI; the
 * password comes from it or from libpq's PGPASSFILE, and it is never
 * logged). The file is read now: a missing or corrupt one fails with its
 * error logged (EBADMSG for a corrupt one). PostgreSQL connects in the
 * background; the database being down is not an error here. Both strings
 * are copied. NULL, errno set, on failure.
 */
struct relay_keys *relay_keys_new(struct ev_loop *loop, const char *file, const char *pg_conninfo);
/* Pending lookups are cancelled without their callback. NULL is a no-op.
 * Not from inside a relay_keys_cb (that is fatal). */
void relay_keys_free(struct relay_keys *k);

/* SIGHUP: parses the file again completely and swaps only on success;
 * otherwise the old keys stay and the error is logged. 0 or -errno
 * (-EBADMSG for a corrupt file). With PostgreSQL there is nothing to
 * reload: 0. */
int relay_keys_reload(struct relay_keys *k);

/*
 * Checks a keys file as relay_keys_new would load it, for --check-config
 * and tests: the number of realms, or -errno with err filled (-EBADMSG:
 * the file's first error, err->line > 0 unless it is the size).
 */
int relay_keys_check_file(const char *path, struct relay_keys_err *err);

/*
 * Looks up realm_id. The file answers synchronously: cb runs before the
 * return, which is NULL. PostgreSQL answers later, from the loop, and a
 * handle is returned, valid until cb runs or relay_keys_cancel; on an
 * immediate failure (not a UUID, database down, queue full, no memory) cb
 * has already run and NULL is returned. cb may start lookups and cancel
 * others. realm_id is copied.
 */
struct relay_keys_req *relay_keys_lookup(struct relay_keys *k, const char *realm_id,
					 relay_keys_cb *cb, void *arg);
/* cb never runs after this; req is invalid afterwards. NULL is a no-op. */
void relay_keys_cancel(struct relay_keys_req *req);

/* File: realms loaded; PostgreSQL: 0. */
size_t relay_keys_count(const struct relay_keys *k);
/* Appends Prometheus lines: rally_relay_tunnel_keys_lookups_total{result=},
 * _errors_total{reason=}, _pending, _realms, and _db_up with PostgreSQL. */
void relay_keys_metrics(const struct relay_keys *k, struct strbuf *out);

/* Parses one key (64 hex digits, either case, or 44 characters of standard
 * padded base64) of exactly 32 bytes into pk. 0 or -EINVAL (pk zeroed). */
int relay_keys_parse_key(const char *s, uint8_t pk[static 32]);
/* The same rule for n bytes (2n hex digits, or padded base64 of n bytes),
 * e.g. a 64-byte Ed25519 signature. 0 or -EINVAL (out zeroed). */
int relay_keys_decode(const char *s, uint8_t *out, size_t n);
/* A UUID (8-4-4-4-12 hex digits, either case) in its canonical lower-case
 * form into out. 0 or -EINVAL (out = ""). */
int relay_keys_canon_uuid(const char *s, char out[static 37]);

#endif
