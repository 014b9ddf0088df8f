/*
 * The pure parts of the Fugitive3D repository door (master_fugitive.c),
 * implemented in master_fugitive_codec.c: the {ip:port} server id, the
 * request body and its validation, and the JSON the list is written in. No
 * I/O, clock or logging, so they are unit tested (tests/unit/fugitive_test.c)
 * and fuzzed (tests/fuzz/fuzz_fugitive.c, which links the codec alone).
 *
 * The reference is the Go service FugitiveTheGame/Fugitive3dServerRepository
 * (gin + encoding/json): what it accepts, we accept; what it refuses with a
 * 400, we refuse with the same message.
 */
#ifndef MASTER_FUGITIVE_H
#define MASTER_FUGITIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"

struct strbuf;

/* srvrepo/constraint.go. */
#define MASTER_FUGITIVE_PORT_MIN (1024)
#define MASTER_FUGITIVE_PORT_MAX (65535)
#define MASTER_FUGITIVE_NAME_MIN (3)
#define MASTER_FUGITIVE_NAME_MAX (32) /* bytes, after trimming */

/* encoding/json's scanner refuses deeper nesting ("exceeded max depth"). */
#define MASTER_FUGITIVE_JSON_MAX_DEPTH (10000)

/* A server id as ParseServerAddress reads it: net.SplitHostPort, then
 * net.ParseIP (which may fail without failing the parse) and strconv.Atoi. */
struct master_fugitive_id {
	bool has_ip;       /* the host part is an IP (Go: ParseIP != nil) */
	struct addr_ip ip; /* v4 mapped into v6 */
	long long port;    /* any int64, as Atoi read it */
};

/*
 * Parses s[0..len) ("203.0.113.4:45677", "[::1]:45677"). Returns 0, or
 * -EINVAL where ParseServerAddress returns an error (no colon, too many
 * colons, stray brackets, a port that is not a decimal int64).
 */
int master_fugitive_parse_id(const char *s, size_t len, struct master_fugitive_id *out);

/* net.IP.To4() != nil: an IPv4 address or one mapped into IPv6. */
bool master_fugitive_ip_is_v4(const struct addr_ip *ip);

/* The body of POST and PUT /servers/{id}: srvrepo.Server's fields. */
struct master_fugitive_body {
	/* Trimmed as strings.TrimSpace does; the bytes are only kept when
	 * name_len <= MASTER_FUGITIVE_NAME_MAX (longer names fail
	 * validation). */
	char name[MASTER_FUGITIVE_NAME_MAX];
	size_t name_len;
	long long game_version, current_players, max_players;
	bool is_joinable;
};

/*
 * Decodes a body as json.Unmarshal into srvrepo.Server does: the whole input
 * one JSON value as Go's scanner accepts it; null is an empty body; keys
 * matched case-insensitively, the last one winning; unknown keys skipped;
 * invalid UTF-8 in strings replaced with U+FFFD; the ints int64; "ip" an IP
 * or ""; "last_seen" an RFC 3339 string as time.Time reads it. Any value of
 * the wrong type is an error. Returns 0 (out filled), or -EBADMSG: the
 * service's 400 "invalid request JSON".
 */
int master_fugitive_parse_body(const char *buf, size_t len, struct master_fugitive_body *out);

/*
 * srvrepo.Server.Validate for the id and a decoded body: NULL when valid,
 * else the message the service answers with (a static string).
 */
const char *master_fugitive_validate(const struct master_fugitive_id *id,
				     const struct master_fugitive_body *b);

/*
 * Appends s[0..len) as a JSON string the way Go's json.Marshal writes it
 * (quotes, \" \\ \b \f \n \r \t, other controls and < > & as \u00XX,
 * U+2028/U+2029 escaped, invalid UTF-8 as \ufffd).
 */
void master_fugitive_json_string(struct strbuf *out, const char *s, size_t len);

/* One listed server, as the list's JSON object. */
struct master_fugitive_server {
	uint8_t ip[4];
	uint16_t port;
	const char *name;
	size_t name_len;
	long long game_version, current_players, max_players;
	bool is_joinable;
	long long seen_wall_ms; /* Unix time in ms */
};

/* Appends {"ip":...,"last_seen":"2006-01-02T15:04:05Z"} (field order and
 * RFC 3339 UTC seconds as the service writes them). */
void master_fugitive_json_server(struct strbuf *out, const struct master_fugitive_server *s);

/* True when s[0..len) is well-formed UTF-8 (no overlong forms, surrogates
 * or code points past U+10FFFF), as Go's utf8.Valid. */
bool master_fugitive_utf8_valid(const char *s, size_t len);

/* True when s[0..len) is a name validation lets through and the list
 * keeps: MASTER_FUGITIVE_NAME_MIN..MASTER_FUGITIVE_NAME_MAX bytes of UTF-8
 * without white space (unicode.IsSpace) at either end. For names read back
 * from a snapshot. */
bool master_fugitive_name_ok(const char *s, size_t len);

#endif
