/*
 * The shared registry on Redis (--redis): the pure codec
 * (master_redis_codec.c) and the module's interface to the other doors
 * (master_redis.c). docs/master.md "Several masters on one Redis" has the
 * key layout; every value read back from Redis is untrusted input and goes
 * through a decoder here before anything of it is used.
 */
#ifndef MASTER_REDIS_H
#define MASTER_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_object;
struct master;
struct master_redis;
struct master_relayport_info;
struct strbuf;

/* The largest value we read or write; JSON nesting we accept. */
#define MASTER_REDIS_VALUE_MAX (16384)
#define MASTER_REDIS_DEPTH     (8)
/* Prefixes and node names: 1-32 of A-Za-z0-9_.- */
#define MASTER_REDIS_NAME_MAX (32)
/* Key hex: at most a 32-byte registry key. */
#define MASTER_REDIS_HEX_MAX  (64)
#define MASTER_REDIS_KIND_MAX (15)
/* A knock tag: 24 lowercase hex. */
#define MASTER_REDIS_TAG_LEN (24)
/* A knock note's blob (master_knock's KNOCK_BLOB_MAX). */
#define MASTER_REDIS_BLOB_MAX (1024)
/* A seen time more than this far in the future is refused. */
#define MASTER_REDIS_FUTURE_MS (10000)

/* ---- the --redis URL ---- */

enum master_redis_transport { MASTER_REDIS_TCP, MASTER_REDIS_UNIX };

struct master_redis_url {
	enum master_redis_transport transport;
	char host[256]; /* TCP: an IP literal or a name (resolved off the loop) */
	uint16_t port;
	char path[108]; /* UNIX: the socket (sun_path) */
	char user[128]; /* "" for none */
	int db;         /* -1: no SELECT */
};

/*
 * Parses "redis://[USER@]HOST[:PORT][/DB]", "HOST:PORT" or "unix:/PATH".
 * IPv6 hosts in brackets. A password ("USER:PASS@") is refused: it belongs
 * in --redis-password-file. 0, or -EINVAL with err set.
 */
int master_redis_url_parse(const char *s, struct master_redis_url *out, char *err, size_t errsize);

/* 1..MASTER_REDIS_NAME_MAX of [A-Za-z0-9_.-]: prefixes and node names. */
bool master_redis_name_ok(const char *s, size_t len);

/* ---- key names (SCAN answers) ---- */

enum master_redis_key_type { MASTER_REDIS_KEY_REG, MASTER_REDIS_KEY_KNOCK, MASTER_REDIS_KEY_RELAY };

struct master_redis_key {
	enum master_redis_key_type type;
	char kind[MASTER_REDIS_KIND_MAX + 1]; /* REG: the kind's name */
	char hex[MASTER_REDIS_HEX_MAX + 1];   /* REG, RELAY: the key; KNOCK: the tag */
};

/*
 * Parses "P:reg:KIND:HEX", "P:knock:TAG" or "P:relay:HEX" under prefix P
 * (HEX: an even number of lowercase hex digits, at most 64; KIND: 1-15 of
 * a-z0-9; TAG: 24 lowercase hex; RELAY HEX: 64). 0, or -EBADMSG.
 */
int master_redis_key_parse(const char *prefix, const char *key, size_t len,
			   struct master_redis_key *out);

/* Lowercase hex into bin[0..n); 0, or -EBADMSG unless exactly 2n digits. */
int master_redis_hex_decode(const char *hex, uint8_t *bin, size_t n);
/* bin[0..n) as lowercase hex into out (2n + 1 bytes). */
void master_redis_hex_encode(const uint8_t *bin, size_t n, char *out);

/* ---- channel messages (P:events) ---- */

enum master_redis_op {
	MASTER_REDIS_OP_SET = 's',       /* NODE s KIND HEX */
	MASTER_REDIS_OP_DEL = 'd',       /* NODE d KIND HEX WALL_MS */
	MASTER_REDIS_OP_KNOCK = 'k',     /* NODE k TAG */
	MASTER_REDIS_OP_RELAY = 'r',     /* NODE r HEX */
	MASTER_REDIS_OP_RELAY_DEL = 'x', /* NODE x HEX */
};

struct master_redis_msg {
	char node[MASTER_REDIS_NAME_MAX + 1];
	enum master_redis_op op;
	char kind[MASTER_REDIS_KIND_MAX + 1];
	char hex[MASTER_REDIS_HEX_MAX + 1];
	long long wall_ms; /* DEL */
};

/* One message, space separated, nothing more (at most 256 bytes).
 * 0, or -EBADMSG. */
int master_redis_msg_parse(const char *buf, size_t len, struct master_redis_msg *out);

/* ---- values ---- */

/*
 * A registry entry's envelope {"v":1,"node":N,"seen_ms":WALL,"entry":{}}:
 * *root is the parsed document (the caller puts it), entry a borrowed
 * child to hand to the kind's snapshot load. 0, or -EBADMSG with *why set
 * to a static reason ("size", "json", "envelope").
 */
struct master_redis_env {
	char node[MASTER_REDIS_NAME_MAX + 1];
	long long seen_ms;
	struct json_object *entry;
};
int master_redis_env_decode(const char *buf, size_t len, struct json_object **root,
			    struct master_redis_env *out, const char **why);

struct master_redis_relay {
	char node[MASTER_REDIS_NAME_MAX + 1];
	char ip[64]; /* an IPv4 literal: the allocating master's --relay-ip */
	uint16_t port;
	char id[33]; /* 32 lowercase hex */
};

struct master_redis_note {
	char node[MASTER_REDIS_NAME_MAX + 1];
	double t; /* unix seconds of the post, finite, > 0 */
	char blob[MASTER_REDIS_BLOB_MAX + 1];
	bool has_relay;
	struct master_redis_relay relay; /* node unused */
};

/* {"v":1,"node":N,"ip":IP,"port":P,"id":HEX}. 0, or -EBADMSG with *why. */
int master_redis_relay_decode(const char *buf, size_t len, struct master_redis_relay *out,
			      const char **why);
/* The value for out (JSON text, NUL-terminated); 0 or -EMSGSIZE. */
int master_redis_relay_encode(const struct master_redis_relay *in, struct strbuf *out);

/* {"v":1,"node":N,"t":T,"blob":B[,"relay":{"ip","port","id"}]}; the blob
 * is base64 characters only, 1..1024. 0, or -EBADMSG with *why. */
int master_redis_note_decode(const char *buf, size_t len, struct master_redis_note *out,
			     const char **why);
int master_redis_note_encode(const struct master_redis_note *in, struct strbuf *out);

/* ---- the module (master_redis.c) ---- */

struct master_redis_cfg {
	bool on;
	struct master_redis_url url;
	char prefix[MASTER_REDIS_NAME_MAX + 1];
	char node[MASTER_REDIS_NAME_MAX + 1]; /* "" = random */
	char password_file[4096];
	long long timeout_ms;
};

/* Starts connecting (the first attempt runs from the loop); 0 or -errno.
 * Reads the password file now. m->redis is set. */
int master_redis_new(struct master *m, const struct master_redis_cfg *cfg);
void master_redis_free(struct master_redis *r);
/* --check-config: the password file is readable and well-formed (it
 * says why otherwise); nothing connects. 0 or -errno. */
int master_redis_check_config(const struct master_redis_cfg *cfg);
/* Both connections up (for /healthz). */
bool master_redis_connected(const struct master_redis *r);
void master_redis_metrics(const struct master_redis *r, struct strbuf *out);

/* master_knock: notes of ours (1..MASTER_REDIS_KNOCK_BATCH) stored under
 * tag, written with one RPUSH. NULL r is a no-op. */
#define MASTER_REDIS_KNOCK_BATCH (16)
void master_redis_knock_posted(struct master_redis *r, const char *tag,
			       const struct master_redis_note *notes, size_t n);
/* master_knock: an allocation another master made for (tag, nonce), with
 * its relay address; true when one is known. */
bool master_redis_relay_find(struct master_redis *r, const uint8_t key[32],
			     struct master_relayport_info *out);
/* master_relayport: a port of ours opened or is still used (write it with
 * the relay idle time), or closed. */
void master_redis_relay_put(struct master_redis *r, const uint8_t key[32],
			    const struct master_relayport_info *info);
void master_redis_relay_closed(struct master_redis *r, const uint8_t key[32]);

#endif
