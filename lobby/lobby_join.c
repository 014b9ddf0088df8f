/*
 * The joiner (netpunch-wire.md §1.1, §1.3, §7), the role lobby_join_role.
 *
 * Decode the host's code (done by main, the locked kind on the worker),
 * derive the session's sealer, observe ourselves (STUN, no UPnP) so the
 * knock can carry our own code, then race: HELLO(token) every 100 ms to
 * every candidate (and to late ones: a relay port) until an ACK echoes the
 * token. Then join, re-sent with every ping until the host's welcome, whose
 * version must be ours exactly; afterwards pings every 3 s, keepalives
 * every 15 s, the host declared gone after 12 s of silence. In a sealed
 * session the only plain payload lobby_net lets through is a well-formed
 * reject.
 */
#include <errno.h>
#include <json-c/json.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "frame.h"
#include "lobby.h"
#include "lobby_save.h"
#include "lobby_xfer.h"
#include "log.h"
#include "seal.h"
#include "strbuf.h"

#define MAX_TARGETS (16)
#define SEEN_CIDS   (64)

struct lobby_join {
	struct lobby *l;
	struct joincode code;
	uint8_t token[NP1_TOKEN_LEN];
	struct addr targets[MAX_TARGETS];
	size_t ntargets;
	bool racing, connected, welcomed, done, started;
	struct addr host;
	long long start_ms, last_host_ms, connected_ms;
	struct ev_timer hello, ping, keepalive, watch;
	char you[LOBBY_NAME_MAX * 4 + 1];
	char host_name[LOBBY_NAME_MAX * 4 + 1];
	char transport_lobby[33];
	char profile[JOINCODE_MAX_TEXT];
	long long seen_cid[SEEN_CIDS];
	unsigned nseen;
	char *last_roster; /* the last roster event, to emit changes only */
	struct lobby_xrecv *xrecv;
	uint64_t hellos, frames_to_host;
};

static struct lobby_join *join_of(const struct lobby *l)
{
	return l->role_data;
}

/* ---- helpers ---- */

static void fail(struct lobby *l, const char *detail, int status)
{
	struct lobby_join *j = join_of(l);

	if (j->done)
		return;
	j->done = true;
	lobby_ipc_status(l, "failed", detail);
	lobby_rv_knock_stop(l);
	lobby_exit(l, status);
}

static void send_join(struct lobby_join *j, bool batches)
{
	struct lobby *l = j->l;
	struct lobby_msg m;

	lobby_msg_init(&m, LOBBY_MSG_JOIN);
	m.join = (struct lobby_msg_join){
		.version = l->cfg.protocol_version,
		.name = l->cfg.name,
		/* Mesh links are a later capability: we join as a star joiner. */
		.mesh = false,
		.recovery = 0,
		.has_batches = batches,
		.batches = 1,
		.profile = j->profile[0] != '\0' ? j->profile : NULL,
		/* A rally host answers with its faster transfer; netpunch's
		 * ignores the key. */
		.rally = l->cfg.fast_off ? 0 : LOBBY_XFER_RALLY_V,
	};
	lobby_net_send_msg(l, &j->host, &m);
}

static void send_simple(struct lobby_join *j, enum lobby_msg_type type)
{
	struct lobby_msg m;

	lobby_msg_init(&m, type);
	lobby_net_send_msg(j->l, &j->host, &m);
}

/* ---- the race ---- */

static void on_hello(struct ev_timer *t, void *arg)
{
	struct lobby_join *j = arg;
	struct lobby *l = j->l;

	if (j->connected)
		return;
	for (size_t i = 0; i < j->ntargets; i++) {
		lobby_net_send_ctl(l->net, &j->targets[i], NP1_HELLO, j->token, sizeof(j->token));
		j->hellos++;
	}
	ev_timer_start(l->loop, t, LOBBY_HELLO_INTERVAL_MS, on_hello, j);
}

/* A dial target found late: the relay port the master offered. */
static void relay_offered(struct lobby *l, const struct addr *a)
{
	struct lobby_join *j = join_of(l);
	char s[ADDR_STRLEN];

	if (j == NULL || j->connected)
		return;
	for (size_t i = 0; i < j->ntargets; i++) {
		if (addr_equal(&j->targets[i], a))
			return;
	}
	if (j->ntargets == MAX_TARGETS)
		return;
	j->targets[j->ntargets++] = *a;
	log_info("dial-target-added target=%s", addr_str(a, s, sizeof(s)));
}

static void on_keepalive(struct ev_timer *t, void *arg)
{
	struct lobby_join *j = arg;

	lobby_net_send_ctl(j->l->net, &j->host, NP1_KEEPALIVE, j->token, sizeof(j->token));
	ev_timer_start(j->l->loop, t, LOBBY_KEEPALIVE_MS, on_keepalive, j);
}

static void on_ping(struct ev_timer *t, void *arg)
{
	struct lobby_join *j = arg;

	/* join goes again with every ping until the welcome. */
	if (!j->welcomed)
		send_join(j, true);
	send_simple(j, LOBBY_MSG_PING);
	ev_timer_start(j->l->loop, t, LOBBY_PING_INTERVAL_MS, on_ping, j);
}

static void connected(struct lobby_join *j, const struct addr *from)
{
	struct lobby *l = j->l;
	char a[ADDR_STRLEN];

	j->connected = true;
	j->host = *from;
	j->connected_ms = j->last_host_ms = ev_now(l->loop);
	lobby_rv_knock_stop(l);
	log_info("connected host=%s after_ms=%lld hellos=%llu", addr_str(from, a, sizeof(a)),
		 j->connected_ms - j->start_ms, (unsigned long long)j->hellos);
	/* netsim impairs what we send once connected, as netpunch's joiner
	 * wraps its socket after the punch. */
	lobby_net_netsim_start(l);
	lobby_ipc_status(l, "connecting", "checking multiplayer version...");
	send_join(j, true);
	send_simple(j, LOBBY_MSG_PING);
	ev_timer_start(l->loop, &j->ping, LOBBY_PING_INTERVAL_MS, on_ping, j);
	ev_timer_start(l->loop, &j->keepalive, LOBBY_KEEPALIVE_MS, on_keepalive, j);
}

static void on_watch(struct ev_timer *t, void *arg)
{
	struct lobby_join *j = arg;
	struct lobby *l = j->l;
	long long now = ev_now(l->loop);

	if (!j->connected) {
		if (now - j->start_ms >= l->cfg.timeout_ms) {
			fail(l, "could not reach host", 1);
			return;
		}
	} else if (!j->welcomed) {
		if (now - j->connected_ms >= LOBBY_VERSION_WAIT_MS) {
			fail(l,
			     "Host did not confirm a compatible multiplayer version. Install the "
			     "same version on both sides.",
			     1);
			return;
		}
	} else if (now - j->last_host_ms > LOBBY_HOST_GONE_AFTER_MS) {
		fail(l, "host unreachable", 1);
		return;
	}
	ev_timer_start(l->loop, t, 250, on_watch, j);
}

/* ---- what comes from the host ---- */

static bool version_ok(struct lobby_join *j, const char *v)
{
	struct lobby *l = j->l;
	char msg[512];

	if (v != NULL && strcmp(v, l->cfg.protocol_version) == 0)
		return true;
	snprintf(msg, sizeof(msg),
		 "Multiplayer version mismatch: you have %s; the other side has %s. Install the "
		 "same multiplayer version on both sides.",
		 l->cfg.protocol_version, v != NULL ? v : "unknown (older build)");
	send_simple(j, LOBBY_MSG_LEAVE);
	fail(l, msg, 1);
	return false;
}

static void emit_transport_lobby(struct lobby_join *j, const char *tl)
{
	struct lobby_event e = {.type = LOBBY_EV_TRANSPORT_LOBBY};

	if (tl == NULL || strlen(tl) != 32 || strcmp(tl, j->transport_lobby) == 0)
		return;
	snprintf(j->transport_lobby, sizeof(j->transport_lobby), "%s", tl);
	e.epoch = j->transport_lobby;
	lobby_ipc_emit(j->l, &e);
}

/* The roster event for the game beside us, when it changed. */
static void roster_event(struct lobby_join *j, const struct lobby_msg_roster *r)
{
	struct lobby *l = j->l;
	struct lobby_event e = {.type = LOBBY_EV_ROSTER_JOIN};
	struct lobby_event_roster *er = &e.roster;
	struct json_object *players;
	struct strbuf b;

	er->players = r->players;
	er->you = j->you;
	er->host = r->host;
	er->lobby = r->lobby;
	er->companies = r->companies;
	er->stages = r->stages;
	er->has_relay = r->has_relay;
	er->relay = r->relay;
	er->letters = r->letters;
	er->stored_age = r->stored_age;
	er->stored_max = r->stored_max;
	er->mode = r->mode;
	strbuf_init(&b, 256 * 1024);
	if (lobby_event_encode(&e, &b) == 0 &&
	    (j->last_roster == NULL || strcmp(j->last_roster, b.p) != 0)) {
		free(j->last_roster);
		j->last_roster = strdup(b.p);
		lobby_ipc_emit(l, &e);
		if (!r->players.null) {
			players = json_object_new_array();
			for (size_t i = 0; i < r->players.n; i++)
				json_object_array_add(players,
						      json_object_new_string(r->players.v[i]));
			lobby_ipc_state(l, "players", players);
		}
	}
	strbuf_release(&b);
}

static bool cid_seen(struct lobby_join *j, long long cid)
{
	for (unsigned i = 0; i < j->nseen && i < SEEN_CIDS; i++) {
		if (j->seen_cid[i] == cid)
			return true;
	}
	j->seen_cid[j->nseen++ % SEEN_CIDS] = cid;
	return false;
}

/*
 * lobby.py apply_start: save:true needs this round's save verified here;
 * nothing applies while the round failed. Not applied is not latched, so a
 * later start (or the roster's heal) still works. Three copies come: the
 * first counts.
 */
static void apply_start(struct lobby_join *j, bool save)
{
	struct lobby *l = j->l;
	struct lobby_event e = {.type = LOBBY_EV_START, .start = {save, false}};

	if (j->started || lobby_xrecv_failed(j->xrecv))
		return;
	if (save && !lobby_xrecv_complete(j->xrecv)) {
		log_info("start-ignored save=true reason=\"no verified save this session\"");
		return;
	}
	j->started = true;
	lobby_ipc_emit(l, &e);
	lobby_ipc_state(l, "started", json_object_new_boolean(true));
}

/* welcome and roster: the version check (false: failed), who we are. */
static bool on_welcome(struct lobby_join *j, const char *version, const char *you, const char *host,
		       const char *tl)
{
	struct lobby *l = j->l;

	if (!version_ok(j, version))
		return false;
	if (you != NULL)
		snprintf(j->you, sizeof(j->you), "%s", you);
	if (host != NULL)
		snprintf(j->host_name, sizeof(j->host_name), "%s", host);
	emit_transport_lobby(j, tl);
	if (!j->welcomed) {
		j->welcomed = true;
		lobby_ipc_state(l, "you", json_object_new_string(j->you));
		lobby_ipc_state(l, "host", json_object_new_string(j->host_name));
		lobby_ipc_status(l, "connected", "joined the host");
	}
	return true;
}

static void on_msg(struct lobby *l, const struct addr *from, const struct lobby_msg *m, bool sealed)
{
	struct lobby_join *j = join_of(l);
	struct lobby_event e;

	(void)from;
	(void)sealed;
	/* Before the version check only these four count. */
	if (!j->welcomed && m->type != LOBBY_MSG_WELCOME && m->type != LOBBY_MSG_ROSTER &&
	    m->type != LOBBY_MSG_REJECT && m->type != LOBBY_MSG_BYE)
		return;
	switch (m->type) {
	case LOBBY_MSG_WELCOME:
		on_welcome(j, m->welcome.version, m->welcome.you, m->welcome.host,
			   m->welcome.transport_lobby);
		return;
	case LOBBY_MSG_ROSTER:
		/* A roster carries no "you": the welcome's stays. */
		if (on_welcome(j, m->roster.version, NULL, m->roster.host,
			       m->roster.transport_lobby)) {
			roster_event(j, &m->roster);
			/* The roster heals a lost start burst. */
			if (m->roster.started)
				apply_start(j, m->roster.start_save);
		}
		return;
	case LOBBY_MSG_REJECT:
		fail(l, m->reject != NULL ? m->reject : "rejected", 1);
		return;
	case LOBBY_MSG_BYE:
		fail(l, "host closed the lobby", 0);
		return;
	case LOBBY_MSG_CHAT:
		if (m->chat.from == NULL || m->chat.text == NULL ||
		    cid_seen(j, m->chat.has_cid ? m->chat.cid : -1))
			return;
		e = (struct lobby_event){.type = LOBBY_EV_CHAT,
					 .chat = {m->chat.from, m->chat.text, true,
						  m->chat.has_ts ? m->chat.ts : 0}};
		lobby_ipc_emit(l, &e);
		return;
	case LOBBY_MSG_START:
		apply_start(j, m->start.save);
		return;
	case LOBBY_MSG_FBEGIN:
		lobby_xrecv_on_begin(j->xrecv, &m->fbegin);
		return;
	case LOBBY_MSG_STATUS:
		if (m->status.state != NULL)
			lobby_ipc_status(l, m->status.state,
					 m->status.detail != NULL ? m->status.detail : "");
		return;
	default:
		return;
	}
}

/* ---- the socket ---- */

static void on_ctl(struct lobby *l, const struct addr *from, uint8_t type, const uint8_t *payload,
		   size_t len)
{
	struct lobby_join *j = join_of(l);
	bool mine = len == NP1_TOKEN_LEN && memcmp(payload, j->token, NP1_TOKEN_LEN) == 0;

	switch (type) {
	case NP1_HELLO:
		/* A host punching toward our knock: answering opens our NAT. */
		lobby_net_send_ctl(l->net, from, NP1_ACK, payload, len);
		return;
	case NP1_ACK:
		if (mine && !j->connected) {
			lobby_net_send_ctl(l->net, from, NP1_CONNECTED, j->token, sizeof(j->token));
			connected(j, from);
		}
		return;
	case NP1_CONNECTED:
		if (!j->connected)
			connected(j, from);
		return;
	case NP1_KEEPALIVE:
		if (j->connected && (mine || l->sealer == NULL || addr_equal(from, &j->host))) {
			j->host = *from;
			j->last_host_ms = ev_now(l->loop);
		}
		return;
	default:
		return;
	}
}

static bool on_payload(struct lobby *l, const struct addr *from, bool sealed)
{
	struct lobby_join *j = join_of(l);

	/* A plain reject in a sealed session (the only plain payload that
	 * gets here) says nothing about where the host is. */
	if (l->sealer != NULL && !sealed)
		return true;
	/* The host's address is wherever its authenticated frames come from. */
	if (j->connected) {
		j->host = *from;
		j->last_host_ms = ev_now(l->loop);
	} else if (sealed) {
		connected(j, from);
	}
	return true;
}

static void on_chunk(struct lobby *l, const struct addr *from, const uint8_t *p, size_t len,
		     bool sealed)
{
	struct lobby_join *j = join_of(l);

	(void)from;
	(void)sealed;
	if (j->connected)
		lobby_xrecv_on_chunk(j->xrecv, p, len);
}

static void on_game(struct lobby *l, const struct addr *from, const uint8_t *frame, size_t len,
		    bool sealed)
{
	(void)from;
	(void)sealed;
	if (join_of(l)->welcomed)
		lobby_game_deliver(l, frame, len);
}

/* ---- the game side ---- */

static void quit(struct lobby *l)
{
	struct lobby_join *j = join_of(l);

	if (j->done)
		return;
	if (j->connected)
		send_simple(j, LOBBY_MSG_LEAVE);
	j->done = true;
	lobby_rv_knock_stop(l);
	lobby_ipc_status(l, "waiting", "left lobby");
	lobby_exit(l, 0);
}

static void command(struct lobby *l, const struct lobby_cmd *c)
{
	struct lobby_join *j = join_of(l);
	struct lobby_msg m;

	if (c->type == LOBBY_CMD_QUIT) {
		quit(l);
		return;
	}
	if (c->type == LOBBY_CMD_NAME) {
		if (c->name == NULL)
			return;
		lobby_msg_clean(c->name, LOBBY_NAME_MAX, l->cfg.name, sizeof(l->cfg.name));
		if (j->connected)
			send_join(j, false); /* a rename: join without batches */
		return;
	}
	if (!j->welcomed)
		return; /* before the version check, only quit and name */
	switch (c->type) {
	case LOBBY_CMD_CHAT:
		lobby_msg_init(&m, LOBBY_MSG_CHAT);
		m.chat.text = c->text != NULL ? c->text : "";
		lobby_net_send_msg(l, &j->host, &m);
		return;
	case LOBBY_CMD_STAGE:
		lobby_msg_init(&m, LOBBY_MSG_STAGE);
		m.stage = c->text != NULL ? c->text : "";
		lobby_net_send_msg(l, &j->host, &m);
		return;
	case LOBBY_CMD_COMPANY:
		lobby_msg_init(&m, LOBBY_MSG_COMPANY);
		m.company.player = j->you;
		m.company.id = c->company.id;
		lobby_net_send_msg(l, &j->host, &m);
		return;
	case LOBBY_CMD_START:
		log_info("ipc-command-ignored cmd=start reason=\"only a relay leader starts\"");
		return;
	default:
		log_debug("ipc-command-ignored cmd=%s", c->cmd);
		return;
	}
}

static void game_frame(struct lobby *l, const uint8_t *frame, size_t len)
{
	struct lobby_join *j = join_of(l);
	int dlen;

	if (!j->welcomed)
		return;
	dlen = lobby_net_frame_build(l, frame, len);
	if (dlen > 0 && lobby_net_frame_send(l, &j->host, (size_t)dlen) == 0)
		j->frames_to_host++;
}

/* ---- start ---- */

static void observed(struct lobby *l, void *arg)
{
	struct lobby_join *j = arg;
	const struct joincode *me = lobby_observe_profile(l);
	struct addr targets[4];
	char err[128], a[ADDR_STRLEN];
	int n;

	/* Our own code (no secret, no password) rides in join and knocks. */
	if (me != NULL && (me->has_lan || me->has_public)) {
		struct joincode c = *me;

		c.ts = (uint32_t)time(NULL);
		if (joincode_encode(&c, NULL, j->profile, sizeof(j->profile), err, sizeof(err)) < 0)
			j->profile[0] = '\0';
	}
	n = joincode_targets(&j->code, lobby_observe_public(l), targets, 4);
	for (int i = 0; i < n; i++) {
		j->targets[j->ntargets++] = targets[i];
		log_info("dial-target target=%s", addr_str(&targets[i], a, sizeof(a)));
	}
	if (n == 0)
		log_warnx("no-candidates reason=\"the code has no IPv4 address to dial\"");
	j->racing = true;
	lobby_ipc_status(l, "connecting", "dialing host");
	ev_timer_start(l->loop, &j->hello, 0, on_hello, j);
	/* Knock when the code carries a secret, a master is set and we know
	 * our own address. */
	if (j->code.has_secret && lobby_rv_url(l) != NULL && j->profile[0] != '\0')
		lobby_rv_knock_start(l);
}

static void join_free(struct lobby *l)
{
	struct lobby_join *j = join_of(l);

	ev_timer_stop(l->loop, &j->hello);
	ev_timer_stop(l->loop, &j->ping);
	ev_timer_stop(l->loop, &j->keepalive);
	ev_timer_stop(l->loop, &j->watch);
	free(j->last_roster);
	lobby_xrecv_free(j->xrecv);
}

static void xrecv_send(struct lobby *l, const struct lobby_msg *m)
{
	struct lobby_join *j = join_of(l);

	if (j->connected)
		lobby_net_send_msg(l, &j->host, m);
}

static const struct addr *xrecv_host(struct lobby *l)
{
	struct lobby_join *j = join_of(l);

	return j->connected ? &j->host : NULL;
}

/* The name we asked for (netpunch's bulk hello says it, not the host's). */
static const char *xrecv_name(struct lobby *l)
{
	return l->cfg.name;
}

static const struct lobby_xrecv_ops xrecv_ops = {xrecv_send, xrecv_host, xrecv_name};

static int start(struct lobby *l, const struct joincode *code)
{
	struct lobby_join *j = join_of(l);
	int n;
	uint16_t port = l->cfg.local_port_set ? l->cfg.local_port : 0;

	j->l = l;
	j->code = *code;
	ev_timer_init(&j->hello);
	ev_timer_init(&j->ping);
	ev_timer_init(&j->keepalive);
	ev_timer_init(&j->watch);
	randombytes_buf(j->token, sizeof(j->token));
	if (code->has_secret) {
		uint8_t key[SEAL_KEY_LEN];

		l->has_secret = true;
		memcpy(l->secret, code->secret, sizeof(l->secret));
		seal_derive_key(code->secret, l->cfg.has_password ? l->cfg.password : "", key);
		l->sealer = seal_new(key);
		sodium_memzero(key, sizeof(key));
		if (l->sealer == NULL)
			return -ENOMEM;
	}
	/* A previous session's save is not this one's. */
	n = lobby_save_remove_stale(l->cfg.io_dir[0] != '\0' ? l->cfg.io_dir : ".");
	if (n > 0)
		log_info("xfer-stale-removed files=%d", n);
	j->xrecv = lobby_xrecv_new(l, &xrecv_ops, l->cfg.max_save);
	if (j->xrecv == NULL)
		return -ENOMEM;
	j->start_ms = ev_now(l->loop);
	ev_timer_start(l->loop, &j->watch, 250, on_watch, j);
	return lobby_observe_open(l, port, false, "connecting", observed, j);
}

const struct lobby_role lobby_join_role = {
	.name = "joiner",
	.state_size = sizeof(struct lobby_join),
	.bind_as = NP1_ROLE_JOINER,
	.start = start,
	.free = join_free,
	.on_ctl = on_ctl,
	.on_payload = on_payload,
	.on_msg = on_msg,
	.on_chunk = on_chunk,
	.on_game = on_game,
	.command = command,
	.game_frame = game_frame,
	.quit = quit,
	.relay_offered = relay_offered,
};
