/*
 * The lobby's JSON messages between peers (netpunch-wire.md §7, §11): one
 * struct per message, a pure decode (bytes in, struct out) and encode
 * (struct in, bytes out). netpunch writes them with Python's json.dumps
 * (", " and ": " separators, ASCII escapes) in the key orders of §7;
 * lobby_msg_encode writes the same bytes (pyjson). Decoding accepts any
 * JSON object with a string "t": a t we do not know is LOBBY_MSG_UNKNOWN,
 * which the roles ignore, and a field of the wrong type reads as absent.
 * No I/O, clock or logging here.
 */
#ifndef LOBBY_MSG_H
#define LOBBY_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct strbuf;
struct pyjson;

/* A decoded message is at most what a fragmented control message carries
 * (frame.h's FRAG_MAX_MSG). */
#define LOBBY_MSG_MAX       (1024 * 1024)
#define LOBBY_MSG_DEPTH     (32)   /* JSON nesting we parse */
#define LOBBY_MSG_MAX_ITEMS (4096) /* entries of one list or dict we keep */
#define LOBBY_MSG_MAX_NACK  (128)  /* §11: at most 128 NACKs in a fack */
#define LOBBY_MSG_MAX_FILES (64)
#define LOBBY_MSG_MAX_HAVE  (256) /* resume ranges in a rally fbegin_ack */

enum lobby_msg_type {
	LOBBY_MSG_UNKNOWN = 0, /* a JSON object whose string t we do not know */
	/* joiner -> host (§7.1) */
	LOBBY_MSG_JOIN,
	LOBBY_MSG_PING,
	LOBBY_MSG_CHAT, /* both ways: from, ts and cid only host -> joiner */
	LOBBY_MSG_LEAVE,
	LOBBY_MSG_LINKS,
	LOBBY_MSG_STAGE,
	LOBBY_MSG_COMPANY,
	LOBBY_MSG_MODE,
	LOBBY_MSG_LOG,
	LOBBY_MSG_MESH_HI,
	/* host -> joiner (§7.2) */
	LOBBY_MSG_WELCOME,
	LOBBY_MSG_ROSTER,
	LOBBY_MSG_START,
	LOBBY_MSG_STATUS,
	LOBBY_MSG_REJECT,
	LOBBY_MSG_BYE,
	/* the save transfer (§11) */
	LOBBY_MSG_FBEGIN,
	LOBBY_MSG_FBEGIN_ACK,
	LOBBY_MSG_FACK,
	LOBBY_MSG_FDONE,
	LOBBY_MSG_XSTAT, /* rally's extension (docs/transfer.md) */
	LOBBY_MSG_MODS_MANIFEST,
	LOBBY_MSG_NTYPES
};

/* A list of strings: ["a", "b"] (null: absent, null, or not a list; items
 * that are not strings are skipped). */
struct lobby_msg_names {
	bool null;
	size_t n;
	const char *const *v;
};

/* One entry of a {name: value} dict; the value is a string or an integer. */
struct lobby_msg_entry {
	const char *key;
	const char *str; /* NULL: the value is the integer num */
	long long num;
};

/* A {name: value} dict in its key order (null as for names). Entries of
 * another value type are skipped. */
struct lobby_msg_dict {
	bool null;
	size_t n;
	const struct lobby_msg_entry *v;
};

/* {name: [names]}: the roster's links. */
struct lobby_msg_link {
	const char *name;
	struct lobby_msg_names direct;
};
struct lobby_msg_links {
	bool null;
	size_t n;
	const struct lobby_msg_link *v;
};

/* A JSON number kept as it came: an integer, or a float (Python repr). */
struct lobby_msg_num {
	bool present;
	bool is_float;
	long long i;
	double d;
};

/*
 * A value whose shape the suite does not interpret (the mods lists of §11,
 * whose entries modshare.py defines): kept as the JSON text Python would
 * write for it, NULL meaning null.
 */
typedef const char *lobby_msg_raw;

struct lobby_msg_join {
	const char *version; /* NULL: absent (an older build) */
	const char *name;
	bool mesh;
	long long recovery;
	bool has_batches; /* the first join has "batches": 1, a rename none */
	long long batches;
	const char *profile; /* the joiner's own code, NULL: absent */
	long long rally;     /* rally's transfer extension version, 0: absent */
};

struct lobby_msg_chat {
	const char *from; /* NULL in a joiner's chat */
	const char *text;
	bool has_ts;
	long long ts;
	bool has_cid;
	long long cid;
};

struct lobby_msg_company {
	const char *player;
	long long id; /* 0 when absent */
};

struct lobby_msg_welcome {
	const char *version, *transport_lobby, *you, *host;
	long long recovery;
	const char *lobby;
	bool relay;
	lobby_msg_raw mods;
	bool mods_unknown;
};

struct lobby_msg_roster {
	const char *version, *transport_lobby;
	struct lobby_msg_names players;
	long long recovery;
	const char *host, *lobby;
	bool has_relay;
	bool relay;
	lobby_msg_raw mods;
	bool mods_unknown;
	struct lobby_msg_num stored_age, stored_max;
	struct lobby_msg_dict letters; /* null outside a relay lobby */
	bool started, start_save;
	struct lobby_msg_dict profiles;
	struct lobby_msg_links links;
	struct lobby_msg_dict companies;
	struct lobby_msg_dict stages;
	const char *mode;
};

struct lobby_msg_start {
	bool save;
	bool has_switch; /* "switch": true is written only when set */
};

struct lobby_msg_file {
	const char *name;
	long long size;
	const char *sha256;
};

struct lobby_msg_fbegin {
	uint32_t sid;
	long long total_bytes, chunk, total_chunks;
	size_t nfiles;
	const struct lobby_msg_file *files;
	const char *sha256;
	const char *kind; /* "save" or "mods" */
	lobby_msg_raw mods;
	bool mods_unknown;
	bool has_batch;
	long long batch_k, batch_n;
	bool has_tcp; /* tcp: {port, token} ({token} alone when port is 0) */
	long long tcp_port;
	const char *tcp_token;
	/* rally: {v, window, fb_ms}, only to a joiner whose join had rally. */
	bool has_rally;
	long long rally_v, rally_window, rally_fb_ms;
};

struct lobby_msg_fbegin_ack {
	uint32_t sid;
	struct lobby_msg_names need;
	bool ask;
	bool has_tcp_port;
	long long tcp_port;
	/* rally: {v, have: [from, to, ...]}: the chunks [from, to) a resuming
	 * joiner already holds. */
	bool has_rally;
	long long rally_v;
	size_t nhave; /* values, pairs of them */
	const long long *have;
};

struct lobby_msg_fack {
	uint32_t sid;
	long long base;
	size_t nnack;
	const long long *nack;
	bool verifying;
	bool has_progress;
	long long progress;
};

struct lobby_msg_fdone {
	uint32_t sid;
	bool ok;
	bool final; /* written only with ok false */
};

/* A host's advertise_mods: {"t": "mods_manifest", "mods", "mods_unknown"}
 * (mods NULL: null, or absent, which netpunch reads as null). */
struct lobby_msg_mods_manifest {
	lobby_msg_raw mods;
	bool mods_unknown;
};

/* rally's receiver report, beside each fack in a rally round: chunks held
 * (got), the highest seq seen (hs, -1: none), how long ago it arrived
 * (age_us), the gaps seen below it so far (lost), its clock (t_us). */
struct lobby_msg_xstat {
	uint32_t sid;
	long long got, hs, age_us, lost, t_us;
};

struct lobby_msg_mem;

struct lobby_msg {
	enum lobby_msg_type type;
	const char *t; /* the "t" text as received (decode) */
	union {
		struct lobby_msg_join join;
		struct lobby_msg_chat chat;
		struct lobby_msg_names links; /* links: "direct" */
		const char *stage;            /* stage: "text" */
		struct lobby_msg_company company;
		const char *mode;           /* mode: "mode" */
		struct lobby_msg_names log; /* log: "lines" */
		const char *mesh_hi;        /* mesh_hi: "name" */
		struct lobby_msg_welcome welcome;
		struct lobby_msg_roster roster;
		struct lobby_msg_start start;
		struct {
			const char *state, *detail;
		} status;
		const char *reject; /* reject: "reason" */
		struct lobby_msg_fbegin fbegin;
		struct lobby_msg_fbegin_ack fbegin_ack;
		struct lobby_msg_fack fack;
		struct lobby_msg_fdone fdone;
		struct lobby_msg_xstat xstat;
		struct lobby_msg_mods_manifest mods_manifest;
	};
	struct lobby_msg_mem *mem; /* what decode allocated */
};

/*
 * Decodes one message from buf[0..len). Returns 0 with *m filled: its
 * strings and lists point into memory m owns until lobby_msg_release.
 * -EBADMSG when buf is not a JSON object with a string "t" (or nests
 * deeper than LOBBY_MSG_DEPTH, or exceeds LOBBY_MSG_MAX), -ENOMEM. On
 * failure m holds nothing to release (releasing it is harmless).
 */
int lobby_msg_decode(const uint8_t *buf, size_t len, struct lobby_msg *m);
void lobby_msg_release(struct lobby_msg *m);

/* A message with only its type set (the caller fills the fields). */
void lobby_msg_init(struct lobby_msg *m, enum lobby_msg_type type);

/*
 * Appends the message as netpunch writes it to out. Returns 0, -EINVAL for
 * LOBBY_MSG_UNKNOWN, -EMSGSIZE when out's cap was reached.
 */
int lobby_msg_encode(const struct lobby_msg *m, struct strbuf *out);

/* The "t" text of a type ("" for LOBBY_MSG_UNKNOWN). */
const char *lobby_msg_type_name(enum lobby_msg_type type);

/* Writes the shared value types (also used by the game-side events). */
void lobby_msg_put_names(struct pyjson *j, const struct lobby_msg_names *n);
void lobby_msg_put_dict(struct pyjson *j, const struct lobby_msg_dict *d);
void lobby_msg_put_num(struct pyjson *j, const struct lobby_msg_num *n);
/* A string, or null for NULL. */
void lobby_msg_put_str(struct pyjson *j, const char *s);

/*
 * Cuts a UTF-8 string to at most max characters and size-1 bytes, whole
 * characters, dropping control characters (names and texts end up in
 * rosters and logs).
 */
void lobby_msg_clean(const char *in, size_t max_chars, char *out, size_t size);

#endif
