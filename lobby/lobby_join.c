/*
 * The joiner (netpunch-wire.md §1.1, §1.3, §7).
 *
 * Decode the host's code (done by main, the locked kind on the worker),
 * derive the session's sealer, observe ourselves (STUN, no UPnP) so the
 * knock can carry our own code, then race: HELLO(token) every 100 ms to
 * every candidate (and to late ones: a relay port) until an ACK echoes the
 * token. Then join, re-sent with every ping until the host's welcome, whose
 * version must be ours exactly; afterwards pings every 3 s, keepalives
 * every 15 s, the host declared gone after 12 s of silence. Only three
 * kinds of plain frames are looked at in a sealed session: none but a
 * well-formed reject.
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
#include "log.h"
#include "pyjson.h"
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
	uint64_t hellos, frames_to_host;
};

/* ---- helpers ---- */

static void fail(struct lobby *l, const char *detail, int status)
{
	struct lobby_join *j = l->join;

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
	struct strbuf b;
	struct pyjson pj;

	lobby_msg_begin(&pj, &b, "join");
	pyjson_key(&pj, "version");
	pyjson_cstr(&pj, l->cfg.protocol_version);
	pyjson_key(&pj, "name");
	pyjson_cstr(&pj, l->cfg.name);
	/* Mesh links are a later capability: we join as a star joiner. */
	pyjson_key(&pj, "mesh");
	pyjson_bool(&pj, false);
	pyjson_key(&pj, "recovery");
	pyjson_int(&pj, 0);
	if (batches) {
		pyjson_key(&pj, "batches");
		pyjson_int(&pj, 1);
	}
	if (j->profile[0] != '\0') {
		pyjson_key(&pj, "profile");
		pyjson_cstr(&pj, j->profile);
	}
	lobby_msg_end(&pj);
	lobby_msg_send(l, &j->host, &b);
	strbuf_release(&b);
}

static void send_simple(struct lobby_join *j, const char *t)
{
	struct strbuf b;
	struct pyjson pj;

	lobby_msg_begin(&pj, &b, t);
	lobby_msg_end(&pj);
	lobby_msg_send(j->l, &j->host, &b);
	strbuf_release(&b);
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
	ev_timer_start(l->loop, t, HELLO_INTERVAL_MS, on_hello, j);
}

void lobby_join_add_target(struct lobby *l, const struct addr *a)
{
	struct lobby_join *j = l->join;
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
	ev_timer_start(j->l->loop, t, KEEPALIVE_MS, on_keepalive, j);
}

static void on_ping(struct ev_timer *t, void *arg)
{
	struct lobby_join *j = arg;

	/* join goes again with every ping until the welcome. */
	if (!j->welcomed)
		send_join(j, true);
	send_simple(j, "ping");
	ev_timer_start(j->l->loop, t, PING_INTERVAL_MS, on_ping, j);
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
	lobby_ipc_status(l, "connecting", "checking multiplayer version...");
	send_join(j, true);
	send_simple(j, "ping");
	ev_timer_start(l->loop, &j->ping, PING_INTERVAL_MS, on_ping, j);
	ev_timer_start(l->loop, &j->keepalive, KEEPALIVE_MS, on_keepalive, j);
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
		if (now - j->connected_ms >= VERSION_WAIT_MS) {
			fail(l,
			     "Host did not confirm a compatible multiplayer version. Install the "
			     "same version on both sides.",
			     1);
			return;
		}
	} else if (now - j->last_host_ms > HOST_GONE_AFTER_MS) {
		fail(l, "host unreachable", 1);
		return;
	}
	ev_timer_start(l->loop, t, 250, on_watch, j);
}

/* ---- what comes from the host ---- */

static bool version_ok(struct lobby_join *j, struct json_object *o)
{
	struct lobby *l = j->l;
	const char *v = lobby_msg_str(o, "version");
	char msg[512];

	if (v != NULL && strcmp(v, l->cfg.protocol_version) == 0)
		return true;
	snprintf(msg, sizeof(msg),
		 "Multiplayer version mismatch: you have %s; the other side has %s. Install the "
		 "same multiplayer version on both sides.",
		 l->cfg.protocol_version, v != NULL ? v : "unknown (older build)");
	send_simple(j, "leave");
	fail(l, msg, 1);
	return false;
}

static void emit_transport_lobby(struct lobby_join *j, const char *tl)
{
	struct strbuf b;
	struct pyjson pj;

	if (tl == NULL || strlen(tl) != 32 || strcmp(tl, j->transport_lobby) == 0)
		return;
	snprintf(j->transport_lobby, sizeof(j->transport_lobby), "%s", tl);
	strbuf_init(&b, 256);
	pyjson_init(&pj, &b);
	pyjson_obj_begin(&pj);
	pyjson_key(&pj, "type");
	pyjson_cstr(&pj, "transport_lobby");
	pyjson_key(&pj, "epoch");
	pyjson_cstr(&pj, tl);
	pyjson_obj_end(&pj);
	lobby_ipc_event(j->l, &b);
	strbuf_release(&b);
}

/* A JSON value re-written as Python would write it (for roster fields we
 * pass through). */
static void put_value(struct pyjson *pj, struct json_object *v)
{
	if (v == NULL) {
		pyjson_null(pj);
		return;
	}
	switch (json_object_get_type(v)) {
	case json_type_null:
		pyjson_null(pj);
		break;
	case json_type_boolean:
		pyjson_bool(pj, json_object_get_boolean(v));
		break;
	case json_type_int:
		pyjson_int(pj, json_object_get_int64(v));
		break;
	case json_type_double:
		pyjson_float(pj, json_object_get_double(v));
		break;
	case json_type_string:
		pyjson_str(pj, json_object_get_string(v), (size_t)json_object_get_string_len(v));
		break;
	case json_type_array:
		pyjson_arr_begin(pj);
		for (size_t i = 0; i < json_object_array_length(v); i++)
			put_value(pj, json_object_array_get_idx(v, i));
		pyjson_arr_end(pj);
		break;
	case json_type_object: {
		pyjson_obj_begin(pj);
		json_object_object_foreach(v, k, val)
		{
			pyjson_key(pj, k);
			put_value(pj, val);
		}
		pyjson_obj_end(pj);
		break;
	}
	}
}

static void put_field(struct pyjson *pj, struct json_object *o, const char *key)
{
	struct json_object *v = NULL;

	pyjson_key(pj, key);
	json_object_object_get_ex(o, key, &v);
	put_value(pj, v);
}

static void roster_event(struct lobby_join *j, struct json_object *o)
{
	struct lobby *l = j->l;
	struct strbuf b;
	struct pyjson pj;
	struct json_object *players;

	strbuf_init(&b, 256 * 1024);
	pyjson_init(&pj, &b);
	pyjson_obj_begin(&pj);
	pyjson_key(&pj, "type");
	pyjson_cstr(&pj, "roster");
	put_field(&pj, o, "players");
	pyjson_key(&pj, "you");
	pyjson_cstr(&pj, j->you);
	put_field(&pj, o, "host");
	put_field(&pj, o, "lobby");
	put_field(&pj, o, "companies");
	put_field(&pj, o, "stages");
	put_field(&pj, o, "relay");
	put_field(&pj, o, "letters");
	put_field(&pj, o, "stored_age");
	put_field(&pj, o, "stored_max");
	put_field(&pj, o, "mode");
	pyjson_obj_end(&pj);
	if (!b.bad && (j->last_roster == NULL || strcmp(j->last_roster, b.p) != 0)) {
		free(j->last_roster);
		j->last_roster = strdup(b.p);
		lobby_ipc_event(l, &b);
		if (json_object_object_get_ex(o, "players", &players))
			lobby_ipc_state(l, "players", json_object_get(players));
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

static void on_message(struct lobby_join *j, struct json_object *o, const char *t)
{
	struct lobby *l = j->l;

	/* Before the version check only these four count. */
	if (!j->welcomed && strcmp(t, "welcome") != 0 && strcmp(t, "roster") != 0 &&
	    strcmp(t, "reject") != 0 && strcmp(t, "bye") != 0)
		return;
	if (strcmp(t, "welcome") == 0 || strcmp(t, "roster") == 0) {
		const char *you = lobby_msg_str(o, "you"), *host = lobby_msg_str(o, "host");

		if (!version_ok(j, o))
			return;
		if (you != NULL)
			snprintf(j->you, sizeof(j->you), "%s", you);
		if (host != NULL)
			snprintf(j->host_name, sizeof(j->host_name), "%s", host);
		emit_transport_lobby(j, lobby_msg_str(o, "transport_lobby"));
		if (!j->welcomed) {
			j->welcomed = true;
			lobby_ipc_state(l, "you", json_object_new_string(j->you));
			lobby_ipc_state(l, "host", json_object_new_string(j->host_name));
			lobby_ipc_status(l, "connected", "joined the host");
		}
		if (strcmp(t, "roster") == 0)
			roster_event(j, o);
	} else if (strcmp(t, "reject") == 0) {
		const char *reason = lobby_msg_str(o, "reason");

		fail(l, reason != NULL ? reason : "rejected", 1);
	} else if (strcmp(t, "bye") == 0) {
		fail(l, "host closed the lobby", 0);
	} else if (strcmp(t, "chat") == 0) {
		const char *from = lobby_msg_str(o, "from"), *text = lobby_msg_str(o, "text");
		struct strbuf b;
		struct pyjson pj;

		if (from == NULL || text == NULL || cid_seen(j, lobby_msg_int(o, "cid", -1)))
			return;
		strbuf_init(&b, 8192);
		pyjson_init(&pj, &b);
		pyjson_obj_begin(&pj);
		pyjson_key(&pj, "type");
		pyjson_cstr(&pj, "chat");
		pyjson_key(&pj, "from");
		pyjson_cstr(&pj, from);
		pyjson_key(&pj, "text");
		pyjson_cstr(&pj, text);
		pyjson_key(&pj, "ts");
		pyjson_int(&pj, lobby_msg_int(o, "ts", 0));
		pyjson_obj_end(&pj);
		lobby_ipc_event(l, &b);
		strbuf_release(&b);
	} else if (strcmp(t, "start") == 0) {
		struct strbuf b;
		struct pyjson pj;

		/* save:true needs a save this session received: not yet. */
		if (lobby_msg_bool(o, "save", false))
			return;
		strbuf_init(&b, 256);
		pyjson_init(&pj, &b);
		pyjson_obj_begin(&pj);
		pyjson_key(&pj, "type");
		pyjson_cstr(&pj, "start");
		pyjson_key(&pj, "save");
		pyjson_bool(&pj, false);
		pyjson_obj_end(&pj);
		/* Three copies come: apply the first. */
		if (!j->started) {
			j->started = true;
			lobby_ipc_event(l, &b);
			lobby_ipc_state(l, "started", json_object_new_boolean(true));
		}
		strbuf_release(&b);
	} else if (strcmp(t, "status") == 0) {
		const char *state = lobby_msg_str(o, "state"), *detail = lobby_msg_str(o, "detail");

		if (state != NULL)
			lobby_ipc_status(l, state, detail != NULL ? detail : "");
	}
}

/* ---- the socket's handlers ---- */

static void on_frame(struct lobby *l, const struct addr *from, uint8_t type, const uint8_t *payload,
		     size_t len)
{
	struct lobby_join *j = l->join;
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

/*
 * netpunch-wire.md §1.3: a sealed joiner takes from plain D frames only save
 * chunks and a reject whose bytes start with {"t": "reject" and whose JSON
 * says t = reject (so {"t": "reject", "t": "start"} does not pass).
 */
static bool plain_reject(const uint8_t *app, size_t len)
{
	static const char prefix[] = "{\"t\": \"reject\"";

	return len >= sizeof(prefix) - 1 && memcmp(app, prefix, sizeof(prefix) - 1) == 0;
}

static void on_app(struct lobby *l, const struct addr *from, const uint8_t *app, size_t len,
		   bool sealed)
{
	struct lobby_join *j = l->join;
	struct json_object *o;
	const char *t;

	if (len == 0)
		return;
	if (l->sealer != NULL && !sealed) {
		if (!plain_reject(app, len))
			return;
		o = lobby_msg_parse(app, len, &t);
		if (o != NULL && strcmp(t, "reject") == 0)
			on_message(j, o, t);
		json_object_put(o);
		return;
	}
	/* The host's address is wherever its authenticated frames come from. */
	if (j->connected) {
		j->host = *from;
		j->last_host_ms = ev_now(l->loop);
	} else if (sealed) {
		connected(j, from);
	}
	if (app[0] == 'g') {
		if (j->welcomed && len <= GAME_FRAME_MAX + 1)
			lobby_game_deliver(l, app + 1, len - 1);
		return;
	}
	o = lobby_msg_parse(app, len, &t);
	if (o == NULL)
		return;
	on_message(j, o, t);
	json_object_put(o);
}

static void on_bad_seal(struct lobby *l, const struct addr *from, int why)
{
	(void)l;
	(void)from;
	(void)why; /* counted by lobby_net */
}

/* ---- commands, frames, quit ---- */

void lobby_join_command(struct lobby *l, const char *cmd, struct json_object *o)
{
	struct lobby_join *j = l->join;
	struct strbuf b;
	struct pyjson pj;

	if (strcmp(cmd, "quit") == 0) {
		lobby_join_quit(l);
		return;
	}
	if (strcmp(cmd, "name") == 0) {
		const char *name = lobby_msg_str(o, "name");

		if (name == NULL)
			return;
		lobby_msg_clean(name, LOBBY_NAME_MAX, l->cfg.name, sizeof(l->cfg.name));
		if (j->connected)
			send_join(j, false); /* a rename: join without batches */
		return;
	}
	if (!j->welcomed)
		return; /* before the version check, only quit and name */
	if (strcmp(cmd, "chat") == 0 || strcmp(cmd, "stage") == 0) {
		const char *text = lobby_msg_str(o, "text");

		lobby_msg_begin(&pj, &b, cmd);
		pyjson_key(&pj, "text");
		pyjson_cstr(&pj, text != NULL ? text : "");
		lobby_msg_end(&pj);
		lobby_msg_send(l, &j->host, &b);
		strbuf_release(&b);
	} else if (strcmp(cmd, "company") == 0) {
		long long id = lobby_msg_int(o, "id", 0);

		lobby_msg_begin(&pj, &b, "company");
		pyjson_key(&pj, "player");
		pyjson_cstr(&pj, j->you);
		pyjson_key(&pj, "id");
		pyjson_int(&pj, id);
		lobby_msg_end(&pj);
		lobby_msg_send(l, &j->host, &b);
		strbuf_release(&b);
	} else if (strcmp(cmd, "start") == 0) {
		log_info("ipc-command-ignored cmd=start reason=\"only a relay leader starts\"");
	} else {
		log_debug("ipc-command-ignored cmd=%s", cmd);
	}
}

void lobby_join_game_frame(struct lobby *l, const uint8_t *frame, size_t len)
{
	struct lobby_join *j = l->join;

	if (!j->welcomed)
		return;
	lobby_net_send_app(l, &j->host, frame, len);
	j->frames_to_host++;
}

void lobby_join_quit(struct lobby *l)
{
	struct lobby_join *j = l->join;

	if (j->done)
		return;
	if (j->connected)
		send_simple(j, "leave");
	j->done = true;
	lobby_rv_knock_stop(l);
	lobby_ipc_status(l, "waiting", "left lobby");
	lobby_exit(l, 0);
}

bool lobby_join_connected(const struct lobby *l)
{
	return l->join != NULL && l->join->connected;
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
		lobby_rv_knock_start(l, &j->code);
}

static const struct lobby_net_handlers handlers = {on_frame, on_app, on_bad_seal};

const struct lobby_net_handlers *lobby_join_handlers(void)
{
	return &handlers;
}

int lobby_join_start(struct lobby *l, const struct joincode *code)
{
	struct lobby_join *j = calloc(1, sizeof(*j));
	uint16_t port = l->cfg.local_port_set ? l->cfg.local_port : 0;
	int r;

	if (j == NULL)
		return -ENOMEM;
	j->l = l;
	j->code = *code;
	ev_timer_init(&j->hello);
	ev_timer_init(&j->ping);
	ev_timer_init(&j->keepalive);
	ev_timer_init(&j->watch);
	randombytes_buf(j->token, sizeof(j->token));
	l->join = j;
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
	r = lobby_net_new(l, port, &handlers);
	if (r < 0) {
		errno = -r;
		log_warn("bind-fail port=%u", port);
		return r;
	}
	j->start_ms = ev_now(l->loop);
	ev_timer_start(l->loop, &j->watch, 250, on_watch, j);
	lobby_ipc_status(l, "connecting", "observing NAT");
	return lobby_observe_start(l, false, observed, j);
}

void lobby_join_free(struct lobby_join *j)
{
	if (j == NULL)
		return;
	ev_timer_stop(j->l->loop, &j->hello);
	ev_timer_stop(j->l->loop, &j->ping);
	ev_timer_stop(j->l->loop, &j->keepalive);
	ev_timer_stop(j->l->loop, &j->watch);
	free(j->last_roster);
	free(j);
}
