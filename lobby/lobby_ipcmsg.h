/*
 * The messages between the lobby and the game beside it (netpunch-wire.md
 * §15): the commands the game appends to lobby_in.jsonl ({"cmd": ...}),
 * decoded into one struct, and the events we append to lobby_out.jsonl
 * ({"type": ...}), encoded as Python's json.dumps writes them in netpunch's
 * key orders. Pure: no I/O, clock or logging.
 */
#ifndef LOBBY_IPCMSG_H
#define LOBBY_IPCMSG_H

#include <stdbool.h>
#include <stddef.h>

#include "lobby_msg.h"

struct json_object;
struct strbuf;

#define LOBBY_CMD_DEPTH (16)

enum lobby_cmd_type {
	LOBBY_CMD_UNKNOWN = 0, /* a cmd we do not act on (logged, ignored) */
	LOBBY_CMD_QUIT,
	LOBBY_CMD_CHAT,
	LOBBY_CMD_NAME,
	LOBBY_CMD_STAGE,
	LOBBY_CMD_COMPANY,
	LOBBY_CMD_MODE,
	LOBBY_CMD_PUBLISH,
	LOBBY_CMD_START,
	LOBBY_CMD_NOTE,
	LOBBY_CMD_NETSIM, /* ours: read tpf2mp_netsim.txt again (tests, benchmarks) */
	LOBBY_CMD_CROSSPLAY,
	LOBBY_CMD_ADVERTISE_MODS,
	LOBBY_CMD_NTYPES
};

struct lobby_cmd {
	enum lobby_cmd_type type;
	const char *cmd; /* the "cmd" text as received */
	union {
		const char *text; /* chat, stage, note: "text" (NULL: absent) */
		const char *name; /* name: "name" */
		struct {
			const char *player;
			long long id; /* 0 when absent */
		} company;
		const char *mode; /* mode: "mode" */
		bool on;          /* publish, crossplay: "on" (false when absent) */
		struct {
			const char *save; /* the save's path; NULL: start without */
			bool has_switch;
		} start;
		const char *save; /* advertise_mods: "save" (NULL: absent) */
	};
	struct json_object *root; /* owned: the strings point into it */
};

/*
 * Decodes one lobby_in.jsonl line (without its newline; trailing \r and
 * spaces are ignored). Returns 0 with *c filled (lobby_cmd_release frees
 * it), -ENODATA for a blank line, -EBADMSG with err set ("no cmd", or
 * where the JSON broke).
 */
int lobby_cmd_decode(const char *line, size_t len, struct lobby_cmd *c, char *err, size_t errsize);
void lobby_cmd_release(struct lobby_cmd *c);

enum lobby_event_type {
	LOBBY_EV_CODE,
	LOBBY_EV_TRANSPORT_LOBBY,
	LOBBY_EV_STATUS,
	LOBBY_EV_ROSTER_HOST, /* the host's roster event */
	LOBBY_EV_ROSTER_JOIN, /* the joiner's: other fields, another order */
	LOBBY_EV_CHAT,
	LOBBY_EV_START,
	LOBBY_EV_TRANSFER,       /* a save transfer's progress or state */
	LOBBY_EV_SAVE_READY,     /* the joiner's save is verified and written */
	LOBBY_EV_MODS_MANIFEST,  /* the mods a save needs (host: advertised; joiner: told) */
	LOBBY_EV_MODS_CLEAR,     /* joiner: nothing to install for them */
	LOBBY_EV_MODS_CANCELLED, /* joiner: the host's mod list cannot be taken */
	LOBBY_EV_TRAVERSAL       /* ours: how the join got through (lobby_trav) */
};

struct lobby_event_roster {
	struct lobby_msg_names players;
	const char *you, *host, *lobby;
	bool has_relay; /* a joiner passes on what the host sent: null when not */
	bool relay;
	struct lobby_msg_dict companies, stages;
	const char *mode;
	bool join_freeze;                            /* host only */
	struct lobby_msg_dict letters;               /* joiner only */
	struct lobby_msg_num stored_age, stored_max; /* joiner only */
};

struct lobby_event {
	enum lobby_event_type type;
	union {
		struct {
			const char *code, *steam;
			bool crossplay;
			const char *cross_code;
		} code;
		const char *epoch; /* transport_lobby */
		struct {
			const char *state, *detail;
		} status;
		struct lobby_event_roster roster;
		struct {
			const char *from, *text;
			bool has_ts; /* local notices (from MULTIPLAYER) have none */
			long long ts;
		} chat;
		struct {
			bool save;
			bool has_switch;
		} start;
		/* {"type": "transfer", "role": "send"|"recv", ["peer": name,]
		 * then "pct": n, or "state": s[, "detail": d]}. Ours after
		 * pct: "bytes", "total", "rate" (bytes/s since the last pct
		 * event) and "eta" (seconds at that rate, -1: not known). */
		struct {
			bool send;        /* role send (host) or recv (joiner) */
			const char *peer; /* send only */
			int pct;          /* -1: a state event */
			const char *state, *detail;
			bool has_bytes;
			long long bytes, total, rate, eta;
		} transfer;
		struct {
			const char *name, *dir;
			struct lobby_msg_names files;
		} save_ready;
		/* {"type": "mods_manifest", "mods": <list or null>[, "mods_unknown":
		 * b]}: the host's event has mods_unknown, the joiner's not. */
		struct {
			lobby_msg_raw mods; /* the list as JSON text; NULL: null */
			bool has_unknown;
			bool unknown;
		} mods_manifest;
		const char *mods_cancelled; /* mods_cancelled: "text" */
		/* traversal: an object whose members follow "type" */
		struct json_object *traversal;
	};
};

/* Appends the event's JSON object to out (no newline). 0 or -EMSGSIZE. */
int lobby_event_encode(const struct lobby_event *e, struct strbuf *out);
struct pyjson;
/* Any JSON value as Python's json.dumps writes it (strings, numbers,
 * booleans, null, lists, objects in their key order). */
void lobby_json_put(struct pyjson *j, struct json_object *v);

#endif
