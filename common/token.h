/*
 * common/token: a bearer token kept in a file (the relay's control API, the
 * lobby's /metrics). Only its hash is kept in memory; a request's
 * `Authorization: Bearer` header is hashed the same way and compared in
 * constant time.
 */
#ifndef RALLY_TOKEN_H
#define RALLY_TOKEN_H

#include <stdbool.h>
#include <stdint.h>

#include "httpd.h"

#define TOKEN_MIN_LEN  (32)   /* characters */
#define TOKEN_FILE_MAX (4096) /* bytes */
#define TOKEN_HASH     (32)   /* BLAKE2b (crypto_generichash) */

/*
 * The token in path, trailing white space cut, printable ASCII without
 * spaces, at least TOKEN_MIN_LEN characters: its hash into hash (may be NULL
 * to check only). 0 or -errno, with one log line saying why:
 * `<what>-unreadable file=...` or `<what>-refused file=... reason="..."`
 * (what: "token-file"/"token" for the relay, "metrics-token" for the lobby:
 * unreadable_what and refused_what).
 */
int token_load(const char *path, const char *unreadable_what, const char *refused_what,
	       uint8_t hash[TOKEN_HASH]);
/* True if req carries `Authorization: Bearer <token>` whose hash is hash. */
bool token_check(const uint8_t hash[static TOKEN_HASH], struct httpd_req *req);

#endif
