/*
 * netpunch's NP1 datagrams and what rides in them (netpunch-wire.md §1, §2,
 * §10; vectors: frames.json).
 *
 * A datagram is "NP1:" + type + payload. Inside D/E/S payloads the first
 * byte says what follows: '{' a JSON lobby message, 'N' (NPF1) a save
 * chunk, 'g' a game frame, 'r' a mesh envelope, 'F' a fragment of a
 * control message longer than 1,300 bytes. Pure functions, plus the
 * fragment reassembler (bounded: 64 partial messages per sender, 15 s).
 */
#ifndef FRAME_H
#define FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"

#define NP1_MAGIC        "NP1:"
#define NP1_HDR          (5)
#define NP1_MAX          (65535)
#define NP1_TOKEN_LEN    (8)
#define FRAG_DATA        (1300)
#define FRAG_HDR         (13) /* 'F' + id + index + count */
#define FRAG_MAX_PARTIAL (64)
#define FRAG_EXPIRE_MS   (15000)
#define NP1_GAME_MAX     (1400)
/* Our bounds (netpunch has none): a reassembled message is at most
 * FRAG_MAX_MSG bytes in at most FRAG_MAX_COUNT fragments, and a
 * reassembler holds at most FRAG_MAX_BYTES of partial messages. */
#define FRAG_MAX_MSG   (1024 * 1024)
#define FRAG_MAX_COUNT ((FRAG_MAX_MSG + FRAG_DATA - 1) / FRAG_DATA)
#define FRAG_MAX_BYTES (16 * 1024 * 1024)
/* Relay port binding (§6): "TRLB" | id16 | 'H'/'J', answered "TRLA" | id16. */
#define NP1_RELAY_ID_LEN (16)
#define NP1_TRLB_LEN     (21)
#define NP1_TRLA_LEN     (20)
/* Save chunk (§11): "NPF1" | u32be sid | u32be seq | data. */
#define NPF1_HDR (12)

enum np1_type {
	NP1_HELLO = 'H',
	NP1_ACK = 'A',
	NP1_CONNECTED = 'C',
	NP1_KEEPALIVE = 'K',
	NP1_DATA = 'D',
	NP1_EDATA = 'E',
	NP1_ADATA = 'S',
	NP1_KEYX = 'X',
};

/* The last byte of a TRLB: which end of the relay port binds. */
enum np1_trlb_role {
	NP1_ROLE_HOST = 'H',
	NP1_ROLE_JOINER = 'J',
};

/* Parses a datagram. Returns 0 with the type and a view of the payload,
 * or -EBADMSG (shorter than 5 bytes, no "NP1:"). Unknown types parse. */
int np1_parse(const uint8_t *buf, size_t len, uint8_t *type, const uint8_t **payload, size_t *plen);
/* Writes "NP1:" + type + payload (payload may be NULL when plen is 0).
 * Returns the length, -ENOSPC, or -EMSGSIZE over NP1_MAX. */
int np1_build(uint8_t *buf, size_t cap, uint8_t type, const uint8_t *payload, size_t plen);

/* "TRLB" | id | role ('H' host, 'J' joiner). Returns 21 or -ENOSPC. */
int np1_trlb_build(uint8_t *buf, size_t cap, const uint8_t id[static NP1_RELAY_ID_LEN],
		   uint8_t role);
/*
 * A bind as the relay port reads it: exactly 21 bytes, "TRLB" | id | role.
 * Returns 0 with id and *role ('H' or 'J'); -EPROTO when the role byte is
 * neither (still a bind, a bad one: the port counts it and drops it, it is
 * never relayed); -EBADMSG for anything else (not a bind: any other length,
 * no "TRLB"). id and *role are written only on 0.
 */
int np1_trlb_parse(const uint8_t *buf, size_t len, uint8_t id[static NP1_RELAY_ID_LEN],
		   uint8_t *role);
/* The relay port's ack: "TRLA" | id. Returns 20 or -ENOSPC. */
int np1_trla_build(uint8_t *buf, size_t cap, const uint8_t id[static NP1_RELAY_ID_LEN]);
/* A relay port's ack: exactly "TRLA" | id. Returns 0 with id, or -EBADMSG. */
int np1_trla_parse(const uint8_t *buf, size_t len, uint8_t id[static NP1_RELAY_ID_LEN]);

/* A game frame payload: 'g' | the bridge's datagram. Returns the length,
 * -EMSGSIZE for a frame over NP1_GAME_MAX, -ENOSPC. */
int np1_game_build(uint8_t *buf, size_t cap, const uint8_t *frame, size_t len);

/* A save chunk payload: "NPF1" | sid | seq | data. Returns the length or
 * -ENOSPC. */
int npf1_build(uint8_t *buf, size_t cap, uint32_t sid, uint32_t seq, const uint8_t *data,
	       size_t len);
/* Parses a save chunk payload; data points into p. 0 or -EBADMSG. */
int npf1_parse(const uint8_t *p, size_t len, uint32_t *sid, uint32_t *seq, const uint8_t **data,
	       size_t *data_len);

/* The fragments of a message: count = ceil(len / FRAG_DATA). netpunch
 * fragments only messages longer than FRAG_DATA. */
unsigned frag_count(size_t len);
/* Writes fragment index of msg (F + id + index + count + slice). Returns
 * the length, -ENOSPC, -EINVAL (index >= count), -EMSGSIZE (len over
 * FRAG_MAX_MSG, which no reassembler of ours would take). */
int frag_build(uint8_t *buf, size_t cap, uint32_t id, unsigned index, const uint8_t *msg,
	       size_t len);

struct frag_reasm;
/* A reassembler for up to max_senders peers (bounded memory: the least
 * recently heard sender is forgotten for a new one). NULL, errno set. */
struct frag_reasm *frag_reasm_new(size_t max_senders);
void frag_reasm_free(struct frag_reasm *r);
/*
 * Feeds one fragment (payload starting with 'F') from sender at now_ms
 * (monotonic). Per (sender, id): a fragment whose count differs from the
 * first one seen is ignored; a repeated index replaces the slice; a new
 * message beyond FRAG_MAX_PARTIAL for the sender drops the sender's
 * least recently fed one; beyond FRAG_MAX_BYTES overall the least
 * recently fed anywhere go. Returns 1 with a malloc'd complete message in
 * *msg (caller frees), 0 when more fragments are needed (or the fragment
 * was ignored), -EBADMSG for a malformed one (short, not 'F', count 0,
 * index >= count), -EMSGSIZE for a message over our bounds (count above
 * FRAG_MAX_COUNT, or its slices over FRAG_MAX_MSG: the message is
 * dropped), -ENOMEM.
 */
int frag_reasm_feed(struct frag_reasm *r, const struct addr *sender, const uint8_t *p, size_t len,
		    long long now_ms, uint8_t **msg, size_t *msg_len);
/* Drops partial messages that got no fragment for more than
 * FRAG_EXPIRE_MS. */
void frag_reasm_expire(struct frag_reasm *r, long long now_ms);
/* Drops every partial message of sender (a peer that left). */
void frag_reasm_forget(struct frag_reasm *r, const struct addr *sender);
/* Partial messages held, and the bytes they are charged (for metrics). */
size_t frag_reasm_pending(const struct frag_reasm *r);
size_t frag_reasm_bytes(const struct frag_reasm *r);

/* Mesh envelope: 'r' | u8 len(to) | to | u8 len(from) | from | inner.
 * Build: names of at most 255 bytes (-EINVAL), -ENOSPC. */
int mesh_env_build(uint8_t *buf, size_t cap, const char *to, const char *from, const uint8_t *inner,
		   size_t len);
/* Parse: the names as NUL-terminated strings, inner pointing into p.
 * -EBADMSG when short, not 'r', or a name is not valid UTF-8 (as Python
 * decodes it) or holds a NUL. */
int mesh_env_parse(const uint8_t *p, size_t len, char to[static 256], char from[static 256],
		   const uint8_t **inner, size_t *inner_len);

/*
 * The bulk TCP side channel's hello (§12), one line:
 * "TPF2BULK1 <role> <sid decimal> <token> <name>\n", role "recv" (I receive)
 * or "send" (I push to your listener), token 32 lower-case hex digits, the
 * name's UTF-8 cut to 64 bytes (as netpunch cuts it, perhaps mid-character;
 * it is the last field and may hold spaces). The listener answers exactly
 * "OK\n", then the blob flows.
 */
#define BULK_HELLO_MAX (256) /* bytes of a hello line we read at most */
#define BULK_TOKEN_LEN (32)
#define BULK_NAME_MAX  (64)
#define BULK_OK        "OK\n"

enum bulk_role { BULK_RECV, BULK_SEND };

struct bulk_hello {
	enum bulk_role role;
	uint32_t sid;
	char token[BULK_TOKEN_LEN + 1];
	char name[BULK_NAME_MAX + 1]; /* bytes as received, NUL-terminated */
	size_t name_len;
};

/* Writes the hello; the name is cut to 64 bytes. Returns the length, or
 * -EINVAL for a token that is not 32 lower-case hex digits, -ENOSPC. */
int bulk_hello_build(uint8_t *buf, size_t cap, enum bulk_role role, uint32_t sid, const char *token,
		     const char *name);
/*
 * Parses one whole line (with its '\n'; at most BULK_HELLO_MAX bytes).
 * Returns 0, or -EBADMSG: no "TPF2BULK1 ", a role other than recv/send, a
 * sid that is not a u32 in decimal, a bad token, an empty or over-long
 * name, a NUL, or no newline at the end.
 */
int bulk_hello_parse(const uint8_t *buf, size_t len, struct bulk_hello *out);

/*
 * The dual TCP backup link (§13; dual_tcp.py). Its hello is one line,
 * "TPF2LINK1 <name> <hex(seal(name))>\n": the name's UTF-8 cut to 64 bytes
 * on a character boundary (it may hold spaces, so the sealed hex is the
 * LAST field), the seal under the session key of exactly those bytes.
 * Then the link carries records: u16be length | one NP1 E frame (the same
 * sealed bytes the UDP copy carries).
 */
#define LINK_HELLO_MAX  (256) /* bytes of a hello line, its newline included */
#define LINK_NAME_MAX   (64)
#define LINK_SEAL_EXTRA (24) /* a seal's nonce and tag (seal.h SEAL_OVERHEAD) */
#define LINK_SEALED_MAX (LINK_NAME_MAX + LINK_SEAL_EXTRA)
#define LINK_REC_HDR    (2)
#define LINK_FRAME_MIN  (NP1_HDR + LINK_SEAL_EXTRA)
/* The largest E frame netpunch 0.6.1.24 builds is 1,943 bytes (a mesh
 * envelope with two 255-byte names around a 1,401-byte game payload);
 * twice that leaves a newer peer room, and a stream out of step (hello
 * text read as a length: "TP" is 21,584) is caught at its first record. */
#define LINK_FRAME_MAX (4096)

struct link_hello {
	const uint8_t *name; /* a view into the line */
	size_t name_len;
	uint8_t sealed[LINK_SEALED_MAX];
	size_t sealed_len;
};

/* True when buf starts like a link hello ("TPF2LINK1 "): a bulk listener
 * hands such a connection to the link. */
bool link_hello_is(const uint8_t *buf, size_t len);
/* How many bytes of name (len bytes of UTF-8) a hello carries: at most 64,
 * never ending inside a character (dual_tcp.link_name); in bytes that are
 * not UTF-8, at most 3 fewer. */
size_t link_name_cut(const char *name, size_t len);
/* Writes the hello for name (already cut; 1..64 bytes) and its sealed copy
 * (24..88 bytes). Returns the length, -EINVAL, -ENOSPC. */
int link_hello_build(uint8_t *buf, size_t cap, const uint8_t *name, size_t name_len,
		     const uint8_t *sealed, size_t sealed_len);
/*
 * Parses one whole line (its '\n' last, at most LINK_HELLO_MAX bytes) as
 * dual_tcp.parse_hello does: trailing ASCII whitespace is stripped, the
 * name is everything between "TPF2LINK1 " and the last space, the rest is
 * hex (either case, whole bytes). Returns 0, or -EBADMSG: no prefix, no
 * newline at the end or one before it, a NUL, an empty or over-long name,
 * hex that is not hex or whose bytes are fewer than a seal's 24 or more
 * than a 64-byte name's seal.
 */
int link_hello_parse(const uint8_t *buf, size_t len, struct link_hello *out);
/* Writes one record: u16be len | frame. Returns 2 + len, -EMSGSIZE for a
 * frame outside [LINK_FRAME_MIN, LINK_FRAME_MAX], -ENOSPC. */
int link_rec_build(uint8_t *buf, size_t cap, const uint8_t *frame, size_t len);
/*
 * The stream decoder: the first record of buf. Returns the bytes it takes
 * (2 + *flen) with *frame pointing into buf, 0 when more bytes are needed,
 * -EMSGSIZE for a length outside [LINK_FRAME_MIN, LINK_FRAME_MAX] (checked
 * as soon as the two length bytes are there), -EBADMSG for a frame that is
 * not "NP1:E".
 */
int link_rec_next(const uint8_t *buf, size_t len, const uint8_t **frame, size_t *flen);

#endif
