/*
 * rally-lobby: the shared context of the lobby's modules.
 *
 * A drop-in for netpunch's lobby (0.6.1.24): the same command line, IPC
 * files and wire protocol (../shared/netpunch-wire.md). main.c picks a
 * role and wires the shared rooms around it:
 *   lobby_net.c      the one UDP socket: NP1 frames, sealing, fragments,
 *                    typed messages handed to the role
 *   lobby_observe.c  STUN on that socket, UPnP, the NAT profile, our code
 *   lobby_rv.c       knocks, the host's poll and punches, relay binds,
 *                    publishing to the master
 *   lobby_game.c     the game bridge's loopback socket
 *   lobby_dual.c     the dual TCP backup link: every sealed frame to a
 *                    peer also over a TCP connection (lobby_dual.h)
 *   lobby_ipc.c      lobby_out.jsonl, lobby_in.jsonl, lobby_state.json,
 *                    lobby_panel.txt
 *   lobby_logfwd.c   log lines to the host, its merged lobby_peers.log
 * and the roles, each behind struct lobby_role (nothing else names a
 * role's functions):
 *   lobby_host.c     the host's session: joins, roster, chat, start; also
 *                    the dedicated relay lobby's (lobby_relay_role)
 *   lobby_relay.c    what a relay lobby does beyond a host: the leader,
 *                    the stored world and its upload, the state files
 *   lobby_join.c     the joiner: the race, join, version check, session
 *   lobby_mesh.c     a mesh joiner's direct links to the other joiners
 * over the pure codecs lobby_msg.h (peer messages) and lobby_ipcmsg.h (the
 * game's commands and our events).
 */
#ifndef LOBBY_H
#define LOBBY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"
#include "ev.h"
#include "joincode.h"
#include "lobby_ipcmsg.h"
#include "lobby_metrics.h"
#include "lobby_msg.h"

struct json_object;
struct strbuf;

#define LOBBY_VERSION_DEFAULT "0.6.1.24"
#define LOBBY_NAME_MAX        (64)  /* bytes of a player name on the wire */
#define LOBBY_CAP             (200) /* players, the host included */
#define LOBBY_MAX_STUN        (8)
#define LOBBY_URL_MAX         (512)
#define LOBBY_PASSWORD_MAX    (256)

/* Timers of netpunch-wire.md §1, §5, §7 (milliseconds). */
#define LOBBY_HELLO_INTERVAL_MS   (100)
#define LOBBY_KEEPALIVE_MS        (15000)
#define LOBBY_PING_INTERVAL_MS    (3000)
#define LOBBY_DROP_AFTER_MS       (10000)
#define LOBBY_ROSTER_HEAL_MS      (2000)
#define LOBBY_HOST_GONE_AFTER_MS  (12000)
#define LOBBY_VERSION_WAIT_MS     (15000)
#define LOBBY_CHAT_BURST          (3)
#define LOBBY_REJECT_EVERY_MS     (2000)
#define LOBBY_RV_POLL_EVERY_MS    (1000)
#define LOBBY_RV_POLL_FAST_MS     (250)   /* ours: while a knock is likely */
#define LOBBY_RV_POLL_FAST_FOR_MS (30000) /* ours: that long after a knock */
#define LOBBY_RV_KNOCK_EVERY_MS   (2000)
#define LOBBY_RV_KNOCK_AFTER_MS   (4000)
#define LOBBY_RV_PUNCH_FOR_MS     (15000)
#define LOBBY_RV_PUNCH_EVERY_MS   (200)
#define LOBBY_RV_RELAY_FROM_KNOCK (2)
#define LOBBY_RV_HTTP_TIMEOUT_MS  (6000)
#define LOBBY_PUBLISH_EVERY_MS    (10000)

enum lobby_mode {
	LOBBY_MODE_HOST,
	LOBBY_MODE_JOIN,
	LOBBY_MODE_CODE,
	LOBBY_MODE_OBSERVE,
	LOBBY_MODE_PUT_SAVE
};

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
	/* --forward-log PATH (repeatable): files tailed into the log stream */
	const char *forward_log[16];
	size_t nforward_log;
	bool companies;       /* start in companies mode */
	bool relay_only;      /* --relay-only: the dedicated relay lobby */
	bool dedicated;       /* --dedicated: the code's secret kept across restarts */
	char put_save[4096];  /* put-save SAVE */
	unsigned max_players; /* LOBBY_CAP; tests lower it */
	uint64_t max_save;    /* bytes a joiner takes at most (--max-save) */
	bool bulk_off;        /* --bulk-tcp off: no TCP side channel offered */
	bool fast_off;        /* --fast-transfer off: netpunch's transfer alone */
	uint64_t max_rate;    /* --max-rate: bytes/s a save goes to one peer at most (0: any) */
	struct lobby_stun_server stun[LOBBY_MAX_STUN];
	size_t nstun;
	bool stun_off;
	bool upnp_off;
	bool netpunch_schedule;   /* --schedule netpunch: the reference's knock timings */
	bool observe_json;        /* observe --json */
	bool natpmp_off;          /* --natpmp off, or --upnp off without --natpmp on */
	uint64_t natpmp_lifetime; /* --natpmp-lifetime: seconds asked (renewed at half) */
	char protocol_version[64];
	struct addr lan; /* --lan-ip: the LAN candidate to advertise */
	bool lan_set;
	bool lan_port_set; /* --lan-ip IP:PORT: advertise that port too */
	bool ipv6_off;     /* --ipv6 off: no IPv6 socket, candidate or targets */
	struct addr v6;    /* --ipv6 IP: the v6 candidate to advertise (v6_set) */
	bool v6_set;
	struct addr metrics; /* --metrics ADDR:PORT: /metrics and /healthz (host) */
	bool metrics_set;
	char metrics_token_file[4096]; /* --metrics-token-file: a bearer token needed */
};

struct lobby_net;
struct lobby_observe;
struct lobby_rv;
struct lobby_game;
struct lobby_ipc;
struct lobby_dual;
struct lobby_trav;
struct lobby_metrics;
struct curlev;
struct sealer;
struct lobby;

/* What a role tells the master when the lobby is published (/announce). */
struct lobby_advert {
	const char *code; /* NULL: nothing to publish yet */
	size_t players;
	const char *type; /* "host" */
};

/*
 * A role of the lobby: what main, IPC, the game socket, the lobby socket
 * and the rendezvous call. main.c picks one (host, joiner, or the
 * dedicated relay lobby); nothing outside a role's own file names
 * its functions. Every hook gets the lobby; the role keeps its state in
 * l->role_data. Hooks a role has no use for may be NULL.
 */
struct lobby_role {
	const char *name;
	/* Its state, allocated zeroed by lobby_role_start before start and
	 * released by lobby_role_free after free (the role frees only what it
	 * allocated itself). */
	size_t state_size;
	/* 'H' or 'J': how we bind a relay port (TRLB, netpunch-wire.md §6). */
	uint8_t bind_as;
	/* Starts the role: binds the lobby socket, observes, begins. code is
	 * the host's decoded code for a joiner, NULL for a host. 0 or -errno;
	 * free runs even after a failed start (what start set up, it undoes). */
	int (*start)(struct lobby *l, const struct joincode *code);
	void (*free)(struct lobby *l);

	/* The lobby socket (lobby_net): an NP1 control frame (H/A/C/K/X). */
	void (*on_ctl)(struct lobby *l, const struct addr *from, uint8_t type,
		       const uint8_t *payload, size_t len);
	/* An application payload opened (sealed) or arrived plain, before it
	 * is looked at: false drops it. */
	bool (*on_payload)(struct lobby *l, const struct addr *from, bool sealed);
	/* A JSON message (decoded; any t). */
	void (*on_msg)(struct lobby *l, const struct addr *from, const struct lobby_msg *m,
		       bool sealed);
	/* A save chunk ("NPF1" | sid | seq | bytes), plain in any session. */
	void (*on_chunk)(struct lobby *l, const struct addr *from, const uint8_t *p, size_t len,
			 bool sealed);
	/* A game frame (the bridge's datagram, at most NP1_GAME_MAX). */
	void (*on_game)(struct lobby *l, const struct addr *from, const uint8_t *frame, size_t len,
			bool sealed);
	/* A mesh envelope ('r' | to | from | inner, netpunch-wire.md §10). */
	void (*on_envelope)(struct lobby *l, const struct addr *from, const uint8_t *p, size_t len,
			    bool sealed);
	/* An E/S frame that did not open (wrong key, tampered, replayed). */
	void (*on_bad_seal)(struct lobby *l, const struct addr *from, int why);

	/* The game side: a lobby_in.jsonl command, a frame from the bridge. */
	void (*command)(struct lobby *l, const struct lobby_cmd *c);
	void (*game_frame)(struct lobby *l, const uint8_t *frame, size_t len);
	/* quit (the command, SIGINT, SIGTERM): say goodbye, then lobby_exit. */
	void (*quit)(struct lobby *l);

	/* The master offered a relay port for this session (joiner: dial it). */
	void (*relay_offered)(struct lobby *l, const struct addr *relay);
	/* What to publish; false when there is nothing (yet). */
	bool (*advert)(const struct lobby *l, struct lobby_advert *out);
};

extern const struct lobby_role lobby_host_role;
extern const struct lobby_role lobby_join_role;
extern const struct lobby_role lobby_relay_role;

/* l->role's state and start (lobby_role.c); 0 or -errno. */
int lobby_role_start(struct lobby *l, const struct joincode *code);
/* Its free, then its state; a no-op without a role or before start. */
void lobby_role_free(struct lobby *l);

/* What both roles say the way netpunch does (lobby_role.c). */
#define LOBBY_MOD_DISPLAY_NAME "Transport Fever 2 Multiplayer"
/* Whether the save at save_path was made with the multiplayer mod on: its
 * <save_path>.lua names the game script ["lockstep.lua"] (lobby.py
 * _save_has_mp_mod). 1 yes, 0 no, -errno when that file cannot be read. */
int lobby_role_save_has_mp_mod(const char *save_path);
/* The last path component of path, as Python's os.path.basename. */
const char *lobby_role_basename(const char *path);
/* {"cmd": "note", "text": ...}: a MULTIPLAYER notice of the text's first
 * 400 characters for this player only (lobby.py _report_command). */
void lobby_role_note(struct lobby *l, const char *text);

struct lobby {
	struct lobby_cfg cfg;
	struct ev_loop *loop;
	struct curlev *curl;
	struct lobby_net *net;
	struct lobby_observe *obs;
	struct lobby_rv *rv;
	struct lobby_game *game;
	struct lobby_ipc *ipc;
	struct lobby_dual *dual;   /* the TCP backup link (NULL: none this session) */
	struct lobby_trav *trav;   /* the joiner's traversal record (lobby_trav; else NULL) */
	struct lobby_xprog *xprog; /* the terminal's transfer lines (lobby_xprog) */
	/* Our log lines (and --forward-log files) for the host's merged log
	 * (lobby_logfwd; NULL for code and observe). */
	struct lobby_logfwd *logfwd;
	/* The role (NULL for observe) and its state. */
	const struct lobby_role *role;
	void *role_data;
	/* The session: its secret (from our code or the host's), its sealer
	 * (NULL in a plaintext session). */
	bool has_secret;
	uint8_t secret[JOINCODE_SECRET_LEN];
	struct sealer *sealer;
	char session[13]; /* 12 hex, per run (lobby_state.json) */
	/* What happened, for /metrics (lobby_metrics.h), and its endpoint
	 * (NULL: no --metrics). */
	struct lobby_counters ctr;
	struct lobby_metrics *metrics;
	int exit_status;
	bool stopping;
};

/* ---- lobby_net.c ---- */

#define LOBBY_NET_BUF_BYTES (16 * 1024 * 1024)

/* Binds the lobby socket (0.0.0.0:port, port 0 = ephemeral) and, unless
 * --ipv6 off, a v6-only one on [::] with the same port number when the
 * machine lets us (best effort); datagrams from both go to l->role (STUN
 * answers only, when there is none). */
int lobby_net_new(struct lobby *l, uint16_t port);
void lobby_net_free(struct lobby_net *n);
uint16_t lobby_net_port(const struct lobby_net *n);
/* Whether the IPv6 socket is there (on lobby_net_port's port number). */
bool lobby_net_has_v6(const struct lobby_net *n);
/* Raw datagram from the game socket (HELLOs, STUN, TRLB), on the socket of
 * to's family (a v4-mapped to on the IPv4 one); -EAFNOSUPPORT for IPv6
 * without the IPv6 socket. */
int lobby_net_send_raw(struct lobby_net *n, const struct addr *to, const void *buf, size_t len);
/* An NP1 control frame (H/A/C/K) with payload. */
int lobby_net_send_ctl(struct lobby_net *n, const struct addr *to, uint8_t type,
		       const uint8_t *payload, size_t len);
/* An application payload: sealed (E) when the session has a sealer, else
 * plain (D); control messages over 1,300 bytes go as fragments. */
int lobby_net_send_app(struct lobby *l, const struct addr *to, const uint8_t *app, size_t len);
/* A message, encoded and sent as lobby_net_send_app does. */
int lobby_net_send_msg(struct lobby *l, const struct addr *to, const struct lobby_msg *m);
/* A message in clear whatever the session (the wrong-password reject). */
int lobby_net_send_plain_msg(struct lobby *l, const struct addr *to, const struct lobby_msg *m);
/*
 * One game frame (the bridge's datagram) for several peers: built into one
 * datagram - 'g' + frame, sealed once, each peer seeing the nonce once -
 * that stays until the next lobby_net_frame_build. Returns its length or
 * -errno; lobby_net_frame_send then sends it to one address.
 */
int lobby_net_frame_build(struct lobby *l, const uint8_t *frame, size_t len);
int lobby_net_frame_send(struct lobby *l, const struct addr *to, size_t dlen);
/* An application payload from `from` as if it had just arrived (sealed:
 * as if it had opened): fragments, the plain-frame rule, then the role.
 * For tests and the fuzzer: the path an opened datagram takes. */
void lobby_net_inject(struct lobby *l, const struct addr *from, const uint8_t *app, size_t len,
		      bool sealed);
/* A datagram from `from` as if the lobby socket had just read it (the dual
 * TCP link's copies: lobby_dual). -EMSGSIZE over NP1_MAX, else 0. */
int lobby_net_inject_datagram(struct lobby *l, const struct addr *from, const uint8_t *buf,
			      size_t len);
/* netsim's delay (ms) on what we send, 0 when off: the link's frames wait
 * as long, and are never dropped (netpunch-wire.md §14). */
long long lobby_net_link_delay_ms(const struct lobby *l);
/* Reads <io dir>/tpf2mp_netsim.txt once and, when it asks for loss or
 * delay, impairs everything the lobby socket sends from now on (netsim:
 * a host from its start, a joiner once connected, as netpunch does). */
void lobby_net_netsim_start(struct lobby *l);
/* {"cmd": "netsim"} (ours, for tests and benchmarks): the file again, now;
 * no file or all zero switches it off. */
void lobby_net_netsim_reload(struct lobby *l);
/* Hands STUN responses to whoever waits for them. */
void lobby_net_set_stun_cb(struct lobby_net *n, void (*cb)(struct lobby *l, const struct addr *from,
							   const uint8_t *buf, size_t len));
struct lobby_net_stats {
	uint64_t rx, tx, bad_np1, bad_seal, replayed, plain_dropped, frag_msgs, bad_msg;
};
void lobby_net_stats(const struct lobby_net *n, struct lobby_net_stats *out);

/* ---- lobby_observe.c: who we are on the network ---- */

typedef void lobby_observe_cb(struct lobby *l, void *arg);
/*
 * STUN on the game socket against every configured server (names resolved
 * on the worker), the router's mappings when upnp (a host): UPnP unless
 * --upnp off, then NAT-PMP unless --natpmp off when UPnP made none; the LAN
 * address; then the NAT class and our profile code. cb runs once, when all
 * answered or after at most 6 s.
 */
int lobby_observe_start(struct lobby *l, bool upnp, lobby_observe_cb *cb, void *arg);
/* What the host begins with: bind the lobby socket (port 0: any), say
 * status <state> "observing NAT", then lobby_observe_start. 0 or -errno.
 * (A joiner observes itself without a word, as netpunch's does.) */
int lobby_observe_open(struct lobby *l, uint16_t port, bool upnp, const char *state,
		       lobby_observe_cb *cb, void *arg);
void lobby_observe_free(struct lobby_observe *o);
/* Our profile (candidates and flags), once observed. */
const struct joincode *lobby_observe_profile(const struct lobby *l);
/* The public address STUN saw (NULL if none). */
const struct addr *lobby_observe_public(const struct lobby *l);
/* The JOINCODE_FAM_* we can dial from: IPv4 when our profile has a v4
 * candidate (or before it is known), IPv6 when it has a v6 one. */
unsigned lobby_observe_families(const struct lobby *l);
/* A peer's candidates in dial order for us (joincode_targets_for with our
 * public address and families); the count written to out. */
int lobby_observe_targets(const struct lobby *l, const struct joincode *peer, struct addr *out,
			  int max);
/* Prints the profile as key=value lines (rally-lobby observe's details). */
void lobby_observe_print(const struct lobby *l);
/* Removes the UPnP and NAT-PMP mappings (exit path). */
void lobby_observe_unmap(struct lobby *l, long timeout_ms);
/* Which port mapping the router made for us: "upnp", "natpmp", or NULL
 * when there is none (yet). */
const char *lobby_observe_mapping(const struct lobby *l);
/* Why there is no mapping, in a few words for a person ("off", "no UPnP
 * router answered; NAT-PMP: no gateway answered", "router refused the
 * mapping: ..."); NULL when mapped. Valid until the next call. */
const char *lobby_observe_mapping_error(const struct lobby *l);

/* ---- lobby_rv.c: the master's rendezvous and list ---- */

/* The master URL for knocks (--rendezvous, else --publish, else the
 * reference's), or NULL when off. */
const char *lobby_rv_url(const struct lobby *l);
int lobby_rv_new(struct lobby *l);
void lobby_rv_free(struct lobby_rv *r);
/* Host: poll our tag every second and punch toward each knock. */
int lobby_rv_host_start(struct lobby *l);
/* Joiner: knock every 2 s, the first after after_ms, asking for a relay
 * port from knock relay_from_knock on (1: the first), until stopped; each
 * relay port the master offers is bound and handed to role->relay_offered. */
int lobby_rv_knock_start(struct lobby *l, long long after_ms, int relay_from_knock);
void lobby_rv_knock_stop(struct lobby *l);
/* Host: whether a joiner at from came through a knock we answered: 2
 * through the relay port it brought, 1 on its public address (any port),
 * 0 not; *age_ms is then the time since that knock. */
int lobby_rv_knock_match(const struct lobby *l, const struct addr *from, long long *age_ms);
/* A datagram from addr made it: stop punching/binding toward it. */
void lobby_rv_peer_seen(struct lobby *l, const struct addr *addr);
/* Publishing (--publish URL --public): announce every 10 s; leave. */
void lobby_rv_publish(struct lobby *l, bool on);
/* Sends /leave and waits for it up to timeout_ms (exit path). */
void lobby_rv_leave_sync(struct lobby *l, long timeout_ms);
/* A relay port's TRLA ack (its id) arrived on the lobby socket. */
void lobby_rv_trla(struct lobby *l, const struct addr *from, const uint8_t *id);

/* ---- lobby_game.c: the bridge's loopback socket ---- */

int lobby_game_new(struct lobby *l);
void lobby_game_free(struct lobby_game *g);
/* Delivers a frame received from a peer to 127.0.0.1:--game-local-port. */
void lobby_game_deliver(struct lobby *l, const uint8_t *frame, size_t len);
uint16_t lobby_game_port(const struct lobby_game *g);

/* ---- lobby_ipc.c ---- */

int lobby_ipc_new(struct lobby *l);
void lobby_ipc_free(struct lobby_ipc *i);
/* Appends one event line to lobby_out.jsonl. */
void lobby_ipc_emit(struct lobby *l, const struct lobby_event *e);
/* {"type":"status","state":state,"detail":detail}: an event only, as in
 * netpunch (lobby_state.json is the roles' to set, with lobby_ipc_state). */
void lobby_ipc_status(struct lobby *l, const char *state, const char *detail);
/* A local notice: {"type":"chat","from":"MULTIPLAYER","text":text}, no ts. */
void lobby_ipc_notice(struct lobby *l, const char *text);
/* Sets one field of lobby_state.json (taking value) and rewrites it, with
 * lobby_panel.txt. A new key goes last; a known one keeps its place. */
void lobby_ipc_state(struct lobby *l, const char *key, struct json_object *value);
/* The same for every field of the object fields (taken), in its key order,
 * with one write. */
void lobby_ipc_state_merge(struct lobby *l, struct json_object *fields);

/* Stops the process with this exit status once the loop returns. */
void lobby_exit(struct lobby *l, int status);

#endif
