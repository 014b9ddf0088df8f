/*
 * rally-lobby: the shared context of the lobby's modules.
 *
 * A drop-in for netpunch's lobby (0.6.1.24): the same command line, IPC
 * files and wire protocol (../shared/netpunch-wire.md). main.c wires:
 *   lobby_net.c      the one UDP socket: NP1 frames, sealing, fragments
 *   lobby_observe.c  STUN on that socket, UPnP, the NAT profile, our code
 *   lobby_host.c     the host's session: joins, roster, chat, start
 *   lobby_join.c     the joiner: the race, join, version check, session
 *   lobby_rv.c       knocks, the host's poll and punches, relay binds,
 *                    publishing to the master
 *   lobby_game.c     the game bridge's loopback socket
 *   lobby_ipc.c      lobby_out.jsonl, lobby_in.jsonl, lobby_state.json
 *   lobby_msg.c      the JSON messages, key order as netpunch writes them
 */
#ifndef LOBBY_H
#define LOBBY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"
#include "ev.h"
#include "joincode.h"

struct json_object;
struct strbuf;

#define LOBBY_VERSION_DEFAULT "0.6.1.24"
#define LOBBY_NAME_MAX        (64)  /* bytes of a player name on the wire */
#define LOBBY_CAP             (200) /* players, the host included */
#define LOBBY_MAX_STUN        (8)
#define LOBBY_URL_MAX         (512)
#define LOBBY_PASSWORD_MAX    (256)

/* Timers of netpunch-wire.md §1, §5, §7 (milliseconds). */
#define HELLO_INTERVAL_MS   (100)
#define KEEPALIVE_MS        (15000)
#define PING_INTERVAL_MS    (3000)
#define DROP_AFTER_MS       (10000)
#define ROSTER_HEAL_MS      (2000)
#define HOST_GONE_AFTER_MS  (12000)
#define VERSION_WAIT_MS     (15000)
#define CHAT_BURST          (3)
#define REJECT_EVERY_MS     (2000)
#define RV_POLL_EVERY_MS    (1000)
#define RV_KNOCK_EVERY_MS   (2000)
#define RV_KNOCK_AFTER_MS   (4000)
#define RV_PUNCH_FOR_MS     (15000)
#define RV_PUNCH_EVERY_MS   (200)
#define RV_RELAY_FROM_KNOCK (2)
#define RV_HTTP_TIMEOUT_MS  (6000)
#define PUBLISH_EVERY_MS    (10000)

enum lobby_mode { MODE_HOST, MODE_JOIN, MODE_CODE, MODE_OBSERVE };

struct lobby_stun_server {
	char host[256];
	uint16_t port;
};

struct lobby_cfg {
	enum lobby_mode mode;
	char code[JOINCODE_MAX_TEXT]; /* join / code */
	char name[LOBBY_NAME_MAX * 4 + 1];
	uint16_t local_port;
	bool local_port_set;
	long long timeout_ms;
	char io_dir[4096];
	char password[LOBBY_PASSWORD_MAX];
	bool has_password;
	char lobby_name[LOBBY_NAME_MAX * 4 + 1];
	char publish_url[LOBBY_URL_MAX];
	bool public_;
	char rendezvous_url[LOBBY_URL_MAX];
	bool rendezvous_off;
	uint16_t game_relay_port; /* when game_relay_set; 0 = ephemeral */
	bool game_relay_set;      /* else host 7773, joiner the first free of 7774-7805 */
	uint16_t game_local_port;
	bool no_mesh;
	bool companies;       /* start in companies mode */
	unsigned max_players; /* LOBBY_CAP; tests lower it */
	struct lobby_stun_server stun[LOBBY_MAX_STUN];
	size_t nstun;
	bool stun_off;
	bool upnp_off;
	char protocol_version[64];
	struct addr lan; /* --lan-ip: the LAN candidate to advertise */
	bool lan_set;
	bool lan_port_set; /* --lan-ip IP:PORT: advertise that port too */
	bool debug;
};

struct lobby_net;
struct lobby_observe;
struct lobby_host;
struct lobby_join;
struct lobby_rv;
struct lobby_game;
struct lobby_ipc;
struct curlev;
struct sealer;

struct lobby {
	struct lobby_cfg cfg;
	struct ev_loop *loop;
	struct curlev *curl;
	struct lobby_net *net;
	struct lobby_observe *obs;
	struct lobby_host *host;
	struct lobby_join *join;
	struct lobby_rv *rv;
	struct lobby_game *game;
	struct lobby_ipc *ipc;
	/* The session: its secret (from our code or the host's), its sealer
	 * (NULL in a plaintext session). */
	bool has_secret;
	uint8_t secret[JOINCODE_SECRET_LEN];
	struct sealer *sealer;
	char session[13]; /* 12 hex, per run (lobby_state.json) */
	int exit_status;
	bool stopping;
};

/* ---- lobby_net.c ---- */

/* What a module wants from the socket. */
struct lobby_net_handlers {
	/* An NP1 frame (HELLO/ACK/... or an application payload that opened:
	 * app is then the plaintext and sealed says how it came). */
	void (*on_frame)(struct lobby *l, const struct addr *from, uint8_t type,
			 const uint8_t *payload, size_t len);
	/* An application payload (D opened as plain, E opened, S verified,
	 * fragments reassembled). */
	void (*on_app)(struct lobby *l, const struct addr *from, const uint8_t *app, size_t len,
		       bool sealed);
	/* An E/S frame that did not open (wrong key, tampered, replayed). */
	void (*on_bad_seal)(struct lobby *l, const struct addr *from, int why);
};

/* Binds the game socket (0.0.0.0:port, port 0 = ephemeral). */
int lobby_net_new(struct lobby *l, uint16_t port, const struct lobby_net_handlers *h);
void lobby_net_free(struct lobby_net *n);
uint16_t lobby_net_port(const struct lobby_net *n);
/* Raw datagram from the game socket (HELLOs, STUN, TRLB). */
int lobby_net_send_raw(struct lobby_net *n, const struct addr *to, const void *buf, size_t len);
/* An NP1 control frame (H/A/C/K) with payload. */
int lobby_net_send_ctl(struct lobby_net *n, const struct addr *to, uint8_t type,
		       const uint8_t *payload, size_t len);
/* An application payload: sealed (E) when the session has a sealer, else
 * plain (D); control messages over 1,300 bytes go as fragments. */
int lobby_net_send_app(struct lobby *l, const struct addr *to, const uint8_t *app, size_t len);
/* A plain D frame whatever the session (the wrong-password reject). */
int lobby_net_send_plain(struct lobby_net *n, const struct addr *to, const uint8_t *app,
			 size_t len);
/* Hands STUN responses and TRLA acks to whoever waits for them. */
void lobby_net_set_stun_cb(struct lobby_net *n, void (*cb)(struct lobby *l, const struct addr *from,
							   const uint8_t *buf, size_t len));
struct lobby_net_stats {
	uint64_t rx, tx, bad_np1, bad_seal, replayed, plain_dropped, frag_msgs;
};
void lobby_net_stats(const struct lobby_net *n, struct lobby_net_stats *out);

/* ---- lobby_msg.c: the JSON messages ---- */

/* Appends {"t": t, ...}: helpers that write netpunch's key order. */
struct pyjson;
void lobby_msg_begin(struct pyjson *j, struct strbuf *b, const char *t);
void lobby_msg_end(struct pyjson *j);
/* Sends a finished message buffer to addr (sealed/fragmented). */
int lobby_msg_send(struct lobby *l, const struct addr *to, struct strbuf *b);
/* Parses an application JSON message: the object and its "t" (borrowed),
 * or NULL for anything that is not a JSON object with a string t. */
struct json_object *lobby_msg_parse(const uint8_t *app, size_t len, const char **t);
/* A field as a string, or NULL when absent or not a string. */
const char *lobby_msg_str(struct json_object *o, const char *key);
bool lobby_msg_bool(struct json_object *o, const char *key, bool dflt);
long long lobby_msg_int(struct json_object *o, const char *key, long long dflt);
/* Cuts a UTF-8 string to at most max characters and bytes-1 bytes, whole
 * characters, dropping control characters. */
void lobby_msg_clean(const char *in, size_t max_chars, char *out, size_t size);

/* ---- lobby_observe.c: who we are on the network ---- */

typedef void lobby_observe_cb(struct lobby *l, void *arg);
/*
 * STUN on the game socket against every configured server (names resolved
 * on the worker), UPnP (host only, unless --upnp off), the LAN address;
 * then the NAT class and our profile code. cb runs once, when all answered
 * or after about 3 s.
 */
int lobby_observe_start(struct lobby *l, bool upnp, lobby_observe_cb *cb, void *arg);
void lobby_observe_free(struct lobby_observe *o);
/* Our profile (candidates and flags), once observed. */
const struct joincode *lobby_observe_profile(const struct lobby *l);
/* The public address STUN saw (NULL if none). */
const struct addr *lobby_observe_public(const struct lobby *l);
/* Prints the profile as JSON lines (rally-lobby observe). */
void lobby_observe_print(const struct lobby *l);
/* Removes the UPnP mappings (exit path). */
void lobby_observe_unmap(struct lobby *l, long timeout_ms);

/* ---- lobby_host.c ---- */

int lobby_host_start(struct lobby *l);
/* The host's socket handlers (the fuzzer feeds on_app directly). */
const struct lobby_net_handlers *lobby_host_handlers(void);
void lobby_host_free(struct lobby_host *h);
/* IPC commands (lobby_in.jsonl). */
void lobby_host_command(struct lobby *l, const char *cmd, struct json_object *o);
/* The host's code text ("" before it is made). */
const char *lobby_host_code(const struct lobby *l);
/* Ends the lobby: bye to everyone, status "lobby closed". */
void lobby_host_quit(struct lobby *l);
size_t lobby_host_players(const struct lobby *l);
/* Frames from the game bridge, and frames to deliver. */
void lobby_host_game_frame(struct lobby *l, const uint8_t *frame, size_t len);

/* ---- lobby_join.c ---- */

int lobby_join_start(struct lobby *l, const struct joincode *code);
const struct lobby_net_handlers *lobby_join_handlers(void);
void lobby_join_free(struct lobby_join *j);
void lobby_join_command(struct lobby *l, const char *cmd, struct json_object *o);
void lobby_join_quit(struct lobby *l);
void lobby_join_game_frame(struct lobby *l, const uint8_t *frame, size_t len);
/* A dial target found late (a relay port). */
void lobby_join_add_target(struct lobby *l, const struct addr *a);
bool lobby_join_connected(const struct lobby *l);

/* ---- lobby_rv.c: the master's rendezvous and list ---- */

/* The master URL for knocks (--rendezvous, else --publish, else the
 * reference's), or NULL when off. */
const char *lobby_rv_url(const struct lobby *l);
int lobby_rv_new(struct lobby *l);
void lobby_rv_free(struct lobby_rv *r);
/* Host: poll our tag every second and punch toward each knock. */
int lobby_rv_host_start(struct lobby *l);
/* Joiner: knock every 2 s (after 4 s unanswered) until stopped. */
int lobby_rv_knock_start(struct lobby *l, const struct joincode *host_code);
void lobby_rv_knock_stop(struct lobby *l);
/* A datagram from addr made it: stop punching/binding toward it. */
void lobby_rv_peer_seen(struct lobby *l, const struct addr *addr);
/* Publishing (--publish URL --public): announce every 10 s; leave. */
void lobby_rv_publish(struct lobby *l, bool on);
/* Sends /leave and waits for it up to timeout_ms (exit path). */
void lobby_rv_leave_sync(struct lobby *l, long timeout_ms);
/* A TRLA ack arrived on the game socket. */
void lobby_rv_trla(struct lobby *l, const struct addr *from, const uint8_t *buf, size_t len);

/* ---- lobby_game.c: the bridge's loopback socket ---- */

int lobby_game_new(struct lobby *l);
void lobby_game_free(struct lobby_game *g);
/* Delivers a frame received from a peer to 127.0.0.1:--game-local-port. */
void lobby_game_deliver(struct lobby *l, const uint8_t *frame, size_t len);
uint16_t lobby_game_port(const struct lobby_game *g);

/* ---- lobby_ipc.c ---- */

int lobby_ipc_new(struct lobby *l);
void lobby_ipc_free(struct lobby_ipc *i);
/* Appends one event line to lobby_out.jsonl (b holds a JSON object). */
void lobby_ipc_event(struct lobby *l, struct strbuf *b);
/* {"type":"status","state":state,"detail":detail}, and lobby_state.json. */
void lobby_ipc_status(struct lobby *l, const char *state, const char *detail);
/* Merges fields into lobby_state.json (a JSON object text) and rewrites it. */
void lobby_ipc_state(struct lobby *l, const char *key, struct json_object *value);

/* Stops the process with this exit status once the loop returns. */
void lobby_exit(struct lobby *l, int status);

#endif
