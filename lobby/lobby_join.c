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
 *
 * What the game beside us sees follows netpunch's cmd_join and run_client:
 * "dialing host" first (main.c), "checking multiplayer version..." once
 * connected, "joined the host" with the first welcome, a roster event when
 * the players, companies, stages or mode changed, the mods the host's save
 * needs (we install none: an empty or known list is "clear"), and
 * lobby_state.json set field by field where lobby.py sets it.
 *
 * In a relay lobby (the welcome says relay) the leader - the player the
 * roster names as host - starts: its START GAME with a save uploads the
 * save to the relay (a lobby_xsend round with the relay as its one
 * target, as lobby.py's run_client drives a _HostSaveTransfer), and the
 * relay's start save:true is then ours to take because we uploaded it.
 */
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "frame.h"
#include "jsonp.h"
#include "lobby.h"
#include "lobby_dual.h"
#include "lobby_logfwd.h"
#include "lobby_mesh.h"
#include "lobby_save.h"
#include "lobby_trav.h"
#include "lobby_xfer.h"
#include "log.h"
#include "seal.h"
#include "strbuf.h"

#define MAX_TARGETS (16)
#define SEEN_CIDS   (64)
#define SEEN_NONCES (16)
#define MODS_DEPTH  (8)

/* How a failure leaves lobby_state.json (lobby.py sets it so). */
enum fail_state {
	FAIL_KEEP,   /* as it is (the host said bye) */
	FAIL_STATE,  /* state "failed" */
	FAIL_DETAIL, /* state "failed", the detail, started false */
};

struct lobby_join {
	struct lobby *l;
	struct joincode code;
	uint8_t token[NP1_TOKEN_LEN];
	struct addr targets[MAX_TARGETS];
	size_t ntargets;
	bool racing, connected, welcomed, done, started, is_relay;
	struct addr host;
	long long start_ms, last_host_ms, connected_ms;
	struct ev_timer hello, ping, keepalive, watch, logs;
	char you[LOBBY_NAME_MAX * 4 + 1];
	char host_name[LOBBY_NAME_MAX * 4 + 1];
	/* The nonces seen, oldest overwritten: one seen before is an old
	 * roster reordered, never a new world. */
	char seen_tl[SEEN_NONCES][33];
	unsigned nseen_tl;
	char profile[JOINCODE_MAX_TEXT];
	long long seen_cid[SEEN_CIDS];
	unsigned nseen;
	char *last_roster; /* the last roster event's key, to emit changes only */
	bool failed_state; /* lobby_state.json says "failed" */
	/* The host's mod list: the last one told (NULL: none yet), whether
	 * "unknown" was said since. */
	char *manifest_key;
	bool manifest_unknown;
	bool xfer_begun; /* an fbegin came: a round may be running */
	int switch_seen; /* for switch_sid: 1 ignored, 2 applied (lobby.py last_switch) */
	uint32_t switch_sid;
	uint32_t mods_checked_sid; /* the round whose save was checked for our mod */
	bool mods_checked;
	struct lobby_xrecv *xrecv;
	/* Our save going up to the relay (we lead), and whether one got
	 * there this session (a start save:true is then ours). */
	struct lobby_xsend *up;
	bool uploaded, up_over;
	struct ev_timer up_reap;
	/* The direct links to the other joiners (NULL: --no-mesh, or not
	 * connected yet). Once it runs, the host is the one address the race
	 * connected to; every other address is a mesh peer. */
	struct lobby_mesh *mesh;
	uint64_t hellos, frames_to_host;
};

static struct lobby_join *join_of(const struct lobby *l)
{
	return l->role_data;
}

/* ---- helpers ---- */

/*
 * The end: a failed status, the state file as how says. netpunch's exit
 * status is 0 for whatever ends a session once connected, 1 when the host
 * was never reached.
 */
static void fail(struct lobby *l, const char *detail, enum fail_state how, int status)
{
	struct lobby_join *j = join_of(l);
	struct json_object *st;

	if (j->done)
		return;
	j->done = true;
	lobby_ipc_status(l, "failed", detail);
	if (how != FAIL_KEEP) {
		st = json_object_new_object();
		json_object_object_add(st, "state", json_object_new_string("failed"));
		if (how == FAIL_DETAIL) {
			json_object_object_add(st, "detail", json_object_new_string(detail));
			json_object_object_add(st, "started", json_object_new_boolean(false));
		}
		lobby_ipc_state_merge(l, st);
		j->failed_state = true;
	}
	lobby_rv_knock_stop(l);
	lobby_trav_done(l->trav, false, detail);
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
		.mesh = !l->cfg.no_mesh,
		.recovery = 0,
		.has_batches = batches,
		.batches = 1,
		/* Our code, for the other joiners to dial (netpunch's star
		 * joiner, --no-mesh, sends none). */
		.profile = j->profile[0] != '\0' && !l->cfg.no_mesh ? j->profile : NULL,
		/* A rally host answers with its faster transfer; netpunch's
		 * ignores the key. */
		.rally = l->cfg.fast_off ? 0 : LOBBY_XFER_RALLY_V,
	};
	lobby_net_send_msg(l, &j->host, &m);
}

/* Our log lines (and --forward-log files) to the host, a batch every
 * 0.5 s once we are in (lobby.py run_client: fwd.drain); force: all that
 * is left, the last words before we leave. */
static void send_logs(struct lobby_join *j, bool force)
{
	struct lobby *l = j->l;
	char buf[LOBBY_LOG_BATCH_BYTES * 4 + 256];
	const char *v[LOBBY_LOG_BATCH_BYTES];
	struct lobby_msg m;
	size_t n;

	if (!j->welcomed)
		return;
	lobby_logfwd_poll(l->logfwd);
	do {
		n = lobby_logfwd_drain(l->logfwd, ev_now(l->loop), force, buf, sizeof(buf), v,
				       sizeof(v) / sizeof(v[0]));
		if (n == 0)
			break;
		lobby_msg_init(&m, LOBBY_MSG_LOG);
		m.log = (struct lobby_msg_names){false, n, v};
		lobby_net_send_msg(l, &j->host, &m);
	} while (force);
}

static void on_logs(struct ev_timer *t, void *arg)
{
	struct lobby_join *j = arg;

	send_logs(j, false);
	ev_timer_start(j->l->loop, t, LOBBY_LOG_FLUSH_MS, on_logs, j);
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
	lobby_trav_target(l->trav, LOBBY_TRAV_RELAY, a);
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

/* ---- the mesh's view of the host ---- */

static const struct addr *mesh_host(struct lobby *l)
{
	return &join_of(l)->host;
}

static long long mesh_host_heard(struct lobby *l)
{
	return join_of(l)->last_host_ms;
}

static void mesh_report(struct lobby *l, const char *const *names, size_t n)
{
	struct lobby_join *j = join_of(l);
	struct lobby_msg m;

	if (!j->welcomed)
		return;
	lobby_msg_init(&m, LOBBY_MSG_LINKS);
	m.links = (struct lobby_msg_names){false, n, names};
	lobby_net_send_msg(l, &j->host, &m);
}

static const struct lobby_mesh_ops mesh_ops = {mesh_host, mesh_host_heard, mesh_report};

/* An address other than the host's, once the mesh runs. */
static bool from_peer(const struct lobby_join *j, const struct addr *from)
{
	return j->mesh != NULL && !addr_equal(from, &j->host);
}

static void connected(struct lobby_join *j, const struct addr *from)
{
	struct lobby *l = j->l;
	struct json_object *st;
	char a[ADDR_STRLEN];

	j->connected = true;
	j->host = *from;
	j->connected_ms = j->last_host_ms = ev_now(l->loop);
	lobby_rv_knock_stop(l);
	lobby_trav_connected(l->trav, from);
	log_info("connected host=%s after_ms=%lld hellos=%llu", addr_str(from, a, sizeof(a)),
		 j->connected_ms - j->start_ms, (unsigned long long)j->hellos);
	/* netsim impairs what we send once connected, as netpunch's joiner
	 * wraps its socket after the punch. */
	lobby_net_netsim_start(l);
	/* The dual TCP link's switch is read now, as netpunch's joiner does. */
	lobby_dual_start(l, false);
	/* lobby.py run_client: the name we asked for until the welcome. */
	lobby_ipc_status(l, "connecting", "checking multiplayer version...");
	st = json_object_new_object();
	json_object_object_add(st, "state", json_object_new_string("connecting"));
	json_object_object_add(st, "you", json_object_new_string(l->cfg.name));
	json_object_object_add(st, "started", json_object_new_boolean(false));
	lobby_ipc_state_merge(l, st);
	if (!l->cfg.no_mesh && j->mesh == NULL) {
		j->mesh = lobby_mesh_new(l, j->token, &mesh_ops);
		if (j->mesh == NULL)
			log_warn("mesh-off reason=\"no memory\"");
	}
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
			fail(l, "could not reach host", FAIL_STATE, 1);
			return;
		}
	} else if (!j->welcomed) {
		if (now - j->connected_ms >= LOBBY_VERSION_WAIT_MS) {
			send_simple(j, LOBBY_MSG_LEAVE);
			fail(l,
			     "Host did not confirm a compatible multiplayer version. Install the "
			     "same version on both sides.",
			     FAIL_DETAIL, 0);
			return;
		}
	} else if (now - j->last_host_ms > LOBBY_HOST_GONE_AFTER_MS) {
		fail(l, "host unreachable", FAIL_STATE, 0);
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
	fail(l, msg, FAIL_DETAIL, 0);
	return false;
}

/* A nonce (32 lower-case hex) not seen before goes to the game. */
static void emit_transport_lobby(struct lobby_join *j, const char *tl)
{
	struct lobby_event e = {.type = LOBBY_EV_TRANSPORT_LOBBY};
	char *slot;

	if (tl == NULL || strlen(tl) != 32 || strspn(tl, "0123456789abcdef") != 32)
		return;
	for (unsigned i = 0; i < j->nseen_tl && i < SEEN_NONCES; i++) {
		if (strcmp(j->seen_tl[i], tl) == 0)
			return;
	}
	slot = j->seen_tl[j->nseen_tl++ % SEEN_NONCES];
	memcpy(slot, tl, 33);
	e.epoch = slot;
	lobby_ipc_emit(j->l, &e);
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct lobby_msg_entry *)a)->key,
		      ((const struct lobby_msg_entry *)b)->key);
}

/* A dict's entries sorted by name, length-prefixed into b. */
static void key_dict(struct strbuf *b, const struct lobby_msg_dict *d)
{
	struct lobby_msg_entry *v;

	if (d->n == 0) {
		strbuf_append(b, ";", 1);
		return;
	}
	v = malloc(d->n * sizeof(*v));
	if (v == NULL) {
		b->bad = true;
		return;
	}
	memcpy(v, d->v, d->n * sizeof(*v));
	qsort(v, d->n, sizeof(*v), cmp_entry);
	for (size_t i = 0; i < d->n; i++) {
		if (v[i].str != NULL)
			strbuf_printf(b, "%zu:%s=s%zu:%s,", strlen(v[i].key), v[i].key,
				      strlen(v[i].str), v[i].str);
		else
			strbuf_printf(b, "%zu:%s=i%lld,", strlen(v[i].key), v[i].key, v[i].num);
	}
	strbuf_append(b, ";", 1);
	free(v);
}

/* lobby.py's key: the players as sent, the companies and stages sorted,
 * the mode. NULL when it cannot be built. */
static char *roster_key(const struct lobby_msg_roster *r, const struct lobby_msg_dict *companies,
			const struct lobby_msg_dict *stages, const char *mode)
{
	struct strbuf b;

	strbuf_init(&b, LOBBY_MSG_MAX);
	for (size_t i = 0; i < r->players.n; i++)
		strbuf_printf(&b, "%zu:%s,", strlen(r->players.v[i]), r->players.v[i]);
	strbuf_append(&b, ";", 1);
	key_dict(&b, companies);
	key_dict(&b, stages);
	strbuf_printf(&b, "%s", mode);
	if (b.bad) {
		strbuf_release(&b);
		return NULL;
	}
	return b.p;
}

static struct json_object *names_json(const struct lobby_msg_names *n)
{
	struct json_object *a = json_object_new_array();

	for (size_t i = 0; i < n->n; i++)
		json_object_array_add(a, json_object_new_string(n->v[i]));
	return a;
}

static struct json_object *companies_json(const struct lobby_msg_dict *d)
{
	struct json_object *o = json_object_new_object();

	for (size_t i = 0; i < d->n; i++)
		json_object_object_add(o, d->v[i].key,
				       d->v[i].str != NULL ? json_object_new_string(d->v[i].str)
							   : json_object_new_int64(d->v[i].num));
	return o;
}

/* The roster event for the game beside us when its key changed, and the
 * state file's fields (lobby.py run_client's roster branch). */
static void roster_event(struct lobby_join *j, const struct lobby_msg_roster *r)
{
	static const struct lobby_msg_dict empty = {false, 0, NULL};
	static const struct lobby_msg_names none = {false, 0, NULL};
	struct lobby *l = j->l;
	struct lobby_event e = {.type = LOBBY_EV_ROSTER_JOIN};
	struct lobby_event_roster *er = &e.roster;
	const char *mode = r->mode != NULL && r->mode[0] != '\0' ? r->mode : "coop";
	struct json_object *st;
	char *key;

	er->players = r->players.null ? none : r->players;
	er->you = j->you;
	er->host = r->host;
	er->lobby = r->lobby != NULL ? r->lobby : "";
	er->companies = r->companies.null ? empty : r->companies;
	er->stages = r->stages.null ? empty : r->stages;
	if (r->has_relay)
		j->is_relay = r->relay;
	er->has_relay = true;
	er->relay = j->is_relay;
	/* The relay's letters, else {} (never null). */
	er->letters = r->letters.null ? empty : r->letters;
	er->stored_age = r->stored_age.present ? r->stored_age
					       : (struct lobby_msg_num){.present = true, .i = -1};
	er->stored_max = r->stored_max.present ? r->stored_max
					       : (struct lobby_msg_num){.present = true, .i = -1};
	er->mode = mode;
	key = roster_key(r, &er->companies, &er->stages, mode);
	if (key == NULL || (j->last_roster != NULL && strcmp(j->last_roster, key) == 0)) {
		free(key);
		return;
	}
	free(j->last_roster);
	j->last_roster = key;
	lobby_ipc_emit(l, &e);
	st = json_object_new_object();
	json_object_object_add(st, "state", json_object_new_string("connected"));
	json_object_object_add(st, "players", names_json(&er->players));
	json_object_object_add(st, "you", json_object_new_string(j->you));
	json_object_object_add(st, "host",
			       r->host != NULL ? json_object_new_string(r->host) : NULL);
	json_object_object_add(st, "started", json_object_new_boolean(j->started));
	json_object_object_add(st, "lobby", json_object_new_string(er->lobby));
	json_object_object_add(st, "companies", companies_json(&er->companies));
	json_object_object_add(st, "mode", json_object_new_string(mode));
	lobby_ipc_state_merge(l, st);
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
static void apply_start(struct lobby_join *j, bool save, bool sw)
{
	struct lobby *l = j->l;
	struct lobby_event e = {.type = LOBBY_EV_START, .start = {save, sw}};

	if (j->started || lobby_xrecv_failed(j->xrecv))
		return;
	if (save && !lobby_xrecv_complete(j->xrecv) && !j->uploaded) {
		log_info("start-ignored save=true reason=\"no verified save this session\"");
		return;
	}
	j->started = true;
	lobby_ipc_emit(l, &e);
	lobby_ipc_state(l, "started", json_object_new_boolean(true));
}

/*
 * lobby.py apply_switch_start: the host loaded another world and pushed it
 * here, the one start taken although we started already. Once per round
 * received (the host sends the start three times); a switch with no
 * verified save this session is ignored, logged once.
 */
static void apply_switch_start(struct lobby_join *j, bool save)
{
	struct lobby_msg m;
	uint32_t sid = lobby_xrecv_sid(j->xrecv);

	if (lobby_xrecv_failed(j->xrecv))
		return;
	if (!save || !lobby_xrecv_complete(j->xrecv)) {
		if (j->switch_seen != 1 || j->switch_sid != sid)
			log_info("start-switch-ignored reason=\"no verified save this session\"");
		j->switch_seen = 1;
		j->switch_sid = sid;
		return;
	}
	if (j->switch_seen == 2 && j->switch_sid == sid)
		return; /* another copy of the burst */
	j->switch_seen = 2;
	j->switch_sid = sid;
	j->started = false; /* this start replaces the world we are in */
	lobby_msg_init(&m, LOBBY_MSG_STAGE);
	m.stage = "loading the host's new world";
	lobby_net_send_msg(j->l, &j->host, &m);
	apply_start(j, true, true);
}

/* The host's mod list can no longer be taken (lobby.py: cancelled):
 * leave, say so, and end. */
static void mods_cancelled(struct lobby_join *j, const char *why)
{
	struct lobby *l = j->l;
	struct lobby_event e = {.type = LOBBY_EV_MODS_CANCELLED};
	struct json_object *st;

	if (j->done)
		return;
	log_warnx("mods-cancelled reason=\"%s\"", why);
	send_simple(j, LOBBY_MSG_LEAVE);
	e.mods_cancelled = "Required mods were cancelled or could not be installed.";
	lobby_ipc_emit(l, &e);
	st = json_object_new_object();
	json_object_object_add(st, "state", json_object_new_string("disconnected"));
	json_object_object_add(st, "started", json_object_new_boolean(false));
	lobby_ipc_state_merge(l, st);
	j->done = true;
	lobby_rv_knock_stop(l);
	lobby_exit(l, 0);
}

/* A [folder id, version] pair. XXX: netpunch's modshare.valid_mod was not
 * read; this is its loopback stand-in's rule (a non-empty folder name
 * without path separators, a version >= 0). */
static bool valid_mod(struct json_object *e)
{
	struct json_object *m, *v;
	const char *s;

	if (!json_object_is_type(e, json_type_array) || json_object_array_length(e) != 2)
		return false;
	m = json_object_array_get_idx(e, 0);
	v = json_object_array_get_idx(e, 1);
	if (!json_object_is_type(m, json_type_string))
		return false;
	s = json_object_get_string(m);
	if (s[0] == '\0' || strchr(s, '/') != NULL || strchr(s, '\\') != NULL)
		return false;
	if (json_object_is_type(v, json_type_int))
		return json_object_get_int64(v) >= 0;
	if (json_object_is_type(v, json_type_string)) {
		s = json_object_get_string(v);
		return s[0] != '\0' && strspn(s, "0123456789") == strlen(s);
	}
	return false;
}

/*
 * lobby.py _ClientSaveReceiver.on_manifest: what the host says its save
 * needs (a welcome, a roster). Unknown (null): the player is told once.
 * A list: every entry a [folder id, version] pair (else we leave); a new
 * one goes to the game, then - no transfer running - what to do about it.
 * We install no mods, so there is nothing to prompt for: "clear". False
 * when we left.
 */
static bool on_manifest(struct lobby_join *j, lobby_msg_raw mods, bool unknown)
{
	struct lobby *l = j->l;
	struct lobby_event e = {.type = LOBBY_EV_MODS_MANIFEST};
	struct json_object *o;
	char err[64];
	bool ok = true;

	if (mods == NULL || unknown) {
		if (j->manifest_unknown)
			return true;
		j->manifest_unknown = true;
		log_info("mods-unknown reason=\"the host cannot read which mods its save needs\"");
		lobby_ipc_notice(l,
				 "The host could not read which mods its save needs, so none can "
				 "be offered to you. If your game refuses the save, install the "
				 "host's mods by hand.");
		return true;
	}
	if (jsonp_parse(mods, strlen(mods), MODS_DEPTH, &o, err, sizeof(err)) < 0) {
		mods_cancelled(j, "the host's mod list does not parse");
		return false;
	}
	if (!json_object_is_type(o, json_type_array))
		ok = false;
	for (size_t i = 0; ok && i < json_object_array_length(o); i++)
		ok = valid_mod(json_object_array_get_idx(o, i));
	json_object_put(o);
	if (!ok) {
		mods_cancelled(j, "the host's mod list is not a list of [folder, version] pairs");
		return false;
	}
	j->manifest_unknown = false;
	if (j->manifest_key != NULL && strcmp(j->manifest_key, mods) == 0)
		return true;
	free(j->manifest_key);
	j->manifest_key = strdup(mods);
	e.mods_manifest.mods = mods;
	lobby_ipc_emit(l, &e);
	/* A round running has its own list (its fbegin). */
	if (j->xfer_begun && !lobby_xrecv_complete(j->xrecv) && !lobby_xrecv_failed(j->xrecv))
		return true;
	e = (struct lobby_event){.type = LOBBY_EV_MODS_CLEAR};
	lobby_ipc_emit(l, &e);
	return true;
}

/*
 * The first welcome or roster is the version check (lobby.py run_client):
 * false when it failed. Then "joined the host", then the nonce if new,
 * then the mods.
 */
static bool greeting(struct lobby_join *j, const char *version, const char *tl, lobby_msg_raw mods,
		     bool mods_unknown)
{
	struct lobby *l = j->l;

	if (!j->welcomed) {
		if (!version_ok(j, version))
			return false;
		j->welcomed = true;
		ev_timer_start(l->loop, &j->logs, LOBBY_LOG_FLUSH_MS, on_logs, j);
		lobby_ipc_status(l, "connected", "joined the host");
		lobby_ipc_state(l, "state", json_object_new_string("connected"));
		lobby_trav_done(l->trav, true, NULL);
	}
	emit_transport_lobby(j, tl);
	return on_manifest(j, mods, mods_unknown);
}

static void on_msg(struct lobby *l, const struct addr *from, const struct lobby_msg *m, bool sealed)
{
	struct lobby_join *j = join_of(l);
	struct lobby_event e;
	struct json_object *st;

	(void)sealed;
	/* From another joiner only its mesh_hi counts (run_client
	 * handle_peer), and only once we are in. */
	if (from_peer(j, from)) {
		if (j->welcomed && m->type == LOBBY_MSG_MESH_HI)
			lobby_mesh_hi(j->mesh, from, m->mesh_hi);
		return;
	}
	/* Before the version check only these four count. */
	if (!j->welcomed && m->type != LOBBY_MSG_WELCOME && m->type != LOBBY_MSG_ROSTER &&
	    m->type != LOBBY_MSG_REJECT && m->type != LOBBY_MSG_BYE)
		return;
	switch (m->type) {
	case LOBBY_MSG_WELCOME:
		if (!greeting(j, m->welcome.version, m->welcome.transport_lobby, m->welcome.mods,
			      m->welcome.mods_unknown))
			return;
		/* Every welcome (a rename is answered with one) says who we are. */
		if (m->welcome.you != NULL)
			snprintf(j->you, sizeof(j->you), "%s", m->welcome.you);
		if (m->welcome.host != NULL)
			snprintf(j->host_name, sizeof(j->host_name), "%s", m->welcome.host);
		j->is_relay = m->welcome.relay;
		if (j->mesh != NULL)
			lobby_mesh_set_me(j->mesh, j->you);
		/* The dual TCP link, dialled once the version is ours, with
		 * the name the host gave us (it matches its roster). */
		lobby_dual_peer_up(l, &j->host, j->host_name, j->you);
		st = json_object_new_object();
		json_object_object_add(st, "you", json_object_new_string(j->you));
		json_object_object_add(
			st, "host",
			m->welcome.host != NULL ? json_object_new_string(m->welcome.host) : NULL);
		lobby_ipc_state_merge(l, st);
		return;
	case LOBBY_MSG_ROSTER:
		if (!greeting(j, m->roster.version, m->roster.transport_lobby, m->roster.mods,
			      m->roster.mods_unknown))
			return;
		if (m->roster.host != NULL)
			snprintf(j->host_name, sizeof(j->host_name), "%s", m->roster.host);
		/* A roster passes the version check too when the welcome was lost. */
		lobby_dual_peer_up(l, &j->host, j->host_name, j->you);
		roster_event(j, &m->roster);
		if (j->mesh != NULL)
			lobby_mesh_roster(j->mesh, &m->roster);
		/* The roster heals a lost start burst. */
		if (m->roster.started)
			apply_start(j, m->roster.start_save, false);
		return;
	case LOBBY_MSG_REJECT:
		fail(l, m->reject != NULL ? m->reject : "rejected", FAIL_DETAIL, 0);
		return;
	case LOBBY_MSG_BYE:
		fail(l, "host closed the lobby", FAIL_KEEP, 0);
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
		if (m->start.has_switch)
			apply_switch_start(j, m->start.save);
		else
			apply_start(j, m->start.save, false);
		return;
	case LOBBY_MSG_FBEGIN:
		j->xfer_begun = true;
		lobby_xrecv_on_begin(j->xrecv, &m->fbegin);
		return;
	case LOBBY_MSG_FBEGIN_ACK:
	case LOBBY_MSG_FACK:
	case LOBBY_MSG_FDONE:
	case LOBBY_MSG_XSTAT:
		/* The relay's feedback on our upload. */
		if (j->up != NULL && !j->up_over)
			lobby_xsend_on_msg(j->up, from, m);
		return;
	case LOBBY_MSG_STATUS:
		/* Advisory (a late joiner: the game already started): an event. */
		lobby_ipc_status(l, m->status.state != NULL ? m->status.state : "connected",
				 m->status.detail != NULL ? m->status.detail : "");
		return;
	case LOBBY_MSG_MODS_MANIFEST:
		/* A host's advertise_mods (a missing list is null). */
		on_manifest(j, m->mods_manifest.mods, m->mods_manifest.mods_unknown);
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

	if (from_peer(j, from)) {
		lobby_mesh_ctl(j->mesh, from, type, payload, len);
		return;
	}
	switch (type) {
	case NP1_HELLO:
		/* A host punching toward our knock: answering opens our NAT. */
		lobby_trav_host_hello(l->trav, from);
		lobby_net_send_ctl(l->net, from, NP1_ACK, payload, len);
		/* Its NAT is open toward us now: our HELLO goes through at
		 * once instead of at the race's next tick (ours; netpunch waits
		 * up to 100 ms). From the host's punch address, which a host's
		 * symmetric NAT made for us, it may be the only way in. */
		if (j->racing && !j->connected && !l->cfg.netpunch_schedule) {
			lobby_net_send_ctl(l->net, from, NP1_HELLO, j->token, sizeof(j->token));
			j->hellos++;
		}
		/* And it stays a target (netpunch-wire.md §1.1: the peer is where
		 * its HELLO came from, before connect): a host behind a NAT
		 * inside ours punches from an address in no code. */
		if (j->racing && !j->connected && !l->cfg.netpunch_schedule) {
			lobby_trav_target(l->trav, LOBBY_TRAV_PUNCHED, from);
			relay_offered(l, from);
		}
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
	if (from_peer(j, from)) {
		lobby_mesh_heard(j->mesh, from);
		return true;
	}
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

	(void)sealed;
	/* Chunks are plain in any session: only the host's address counts. */
	if (j->connected && addr_equal(from, &j->host))
		lobby_xrecv_on_chunk(j->xrecv, p, len);
}

static void on_game(struct lobby *l, const struct addr *from, const uint8_t *frame, size_t len,
		    bool sealed)
{
	struct lobby_join *j = join_of(l);

	(void)sealed;
	if (!j->welcomed)
		return;
	/* A peer's frame counts once its link is up. */
	if (from_peer(j, from) && !lobby_mesh_accept_frame(j->mesh, from))
		return;
	lobby_game_deliver(l, frame, len);
}

/* An envelope: the mesh's (for us, or to pass on); a star joiner takes
 * only the host's, and only for itself. */
static void on_envelope(struct lobby *l, const struct addr *from, const uint8_t *p, size_t len,
			bool sealed)
{
	struct lobby_join *j = join_of(l);
	char to[256], frm[256];
	const uint8_t *inner;
	size_t ilen;

	(void)sealed;
	if (!j->welcomed)
		return;
	if (j->mesh != NULL) {
		lobby_mesh_envelope(j->mesh, from, p, len);
		return;
	}
	if (!addr_equal(from, &j->host) || mesh_env_parse(p, len, to, frm, &inner, &ilen) < 0)
		return;
	if (strcmp(to, j->you) == 0 && ilen >= 1 && inner[0] == 'g' && ilen - 1 <= NP1_GAME_MAX)
		lobby_game_deliver(l, inner + 1, ilen - 1);
}

/* ---- the game side ---- */

static void quit(struct lobby *l)
{
	struct lobby_join *j = join_of(l);

	if (j->done)
		return;
	/* The status first: its log line rides the last words. */
	lobby_ipc_status(l, "failed", "left lobby");
	if (j->connected) {
		send_logs(j, true);
		send_simple(j, LOBBY_MSG_LEAVE);
	}
	j->done = true;
	lobby_rv_knock_stop(l);
	lobby_exit(l, 0);
}

static void leader_start(struct lobby_join *j, const char *save);

static void command(struct lobby *l, const struct lobby_cmd *c)
{
	struct lobby_join *j = join_of(l);
	struct lobby_msg m;

	if (c->type == LOBBY_CMD_QUIT) {
		quit(l);
		return;
	}
	if (c->type == LOBBY_CMD_NAME) {
		/* The host answers with a welcome naming us: that sets you. */
		lobby_msg_clean(c->name != NULL ? c->name : "player", LOBBY_NAME_MAX, l->cfg.name,
				sizeof(l->cfg.name));
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
		m.company.player = c->company.player != NULL ? c->company.player : j->you;
		m.company.id = c->company.id;
		lobby_net_send_msg(l, &j->host, &m);
		return;
	case LOBBY_CMD_MODE:
		/* A relay's leader sets the mode; a host ignores it. */
		lobby_msg_init(&m, LOBBY_MSG_MODE);
		m.mode = c->mode != NULL ? c->mode : "";
		lobby_net_send_msg(l, &j->host, &m);
		return;
	case LOBBY_CMD_NOTE:
		lobby_role_note(l, c->text);
		return;
	case LOBBY_CMD_START:
		leader_start(j, c->start.save);
		return;
	default:
		log_debug("ipc-command-ignored cmd=%s", c->cmd);
		return;
	}
}

/* ---- the leader's upload to a relay ---- */

static void on_up_reap(struct ev_timer *t, void *arg)
{
	struct lobby_join *j = arg;

	(void)t;
	lobby_xsend_free(j->up);
	j->up = NULL;
	j->up_over = false;
}

static void up_over(struct lobby_join *j)
{
	j->up_over = true;
	ev_timer_start(j->l->loop, &j->up_reap, 0, on_up_reap, j);
}

static void up_aborted(struct lobby *l, const char *detail)
{
	lobby_ipc_status(l, "failed", detail);
	up_over(join_of(l));
}

/* lobby.py run_client: the upload's end, said to the game beside us. */
static void up_resolved(struct lobby *l)
{
	struct lobby_join *j = join_of(l);

	if (lobby_xsend_targets(j->up) == 1 &&
	    lobby_xsend_target_state(j->up, 0) == LOBBY_XSEND_DONE) {
		j->uploaded = true;
		log_info("upload-done then=\"the relay shares it\"");
		lobby_ipc_status(l, "connected", "save uploaded -- the relay is sharing it...");
	} else {
		log_info("upload-failed");
		lobby_ipc_status(l, "failed",
				 "upload to the relay failed -- press START GAME to retry");
	}
	up_over(j);
}

static const struct lobby_xsend_ops up_ops = {up_aborted, NULL, up_resolved};

/*
 * lobby.py run_client's start command: only the leader of a relay lobby
 * starts; without a save the relay is asked to start everyone, with one
 * the save goes up first (refused, as START refuses it, when it was made
 * without the mod).
 */
static void leader_start(struct lobby_join *j, const char *save)
{
	struct lobby *l = j->l;
	struct lobby_xsend_target t;
	char err[PATH_MAX + 64], detail[PATH_MAX + 128];

	if (!j->is_relay) {
		log_info("ipc-command-ignored cmd=start reason=\"only the host can start\"");
		return;
	}
	if (strcmp(j->host_name, j->you) != 0) {
		log_info("ipc-command-ignored cmd=start reason=\"the leader is %s\"", j->host_name);
		return;
	}
	if (save == NULL) {
		send_simple(j, LOBBY_MSG_START);
		return;
	}
	if (j->up != NULL) {
		log_info("ipc-command-ignored cmd=start reason=\"an upload is in progress\"");
		return;
	}
	if (lobby_role_save_has_mp_mod(save) == 0) {
		snprintf(detail, sizeof(detail),
			 "Not shared: '%s' does not have the %s mod enabled (see chat)",
			 lobby_role_basename(save), LOBBY_MOD_DISPLAY_NAME);
		lobby_ipc_status(l, "connected", detail);
		lobby_ipc_notice(l,
				 "That save was made without the " LOBBY_MOD_DISPLAY_NAME
				 " mod, so nothing would sync. Load it, enable the mod in its Mods "
				 "panel on the load screen, save, and press START GAME again.");
		return;
	}
	t = (struct lobby_xsend_target){j->host, "relay", false};
	j->up = lobby_xsend_start(l, save, &t, 1, &up_ops, NULL, err, sizeof(err));
	if (j->up == NULL) {
		snprintf(detail, sizeof(detail), "save read failed: %s", err);
		lobby_ipc_status(l, "failed", detail);
		return;
	}
	log_info("upload-begin save=\"%s\"", save);
	lobby_ipc_status(l, "connected", "uploading the save to the relay...");
}

static void game_frame(struct lobby *l, const uint8_t *frame, size_t len)
{
	struct lobby_join *j = join_of(l);
	int dlen;

	if (!j->welcomed)
		return;
	if (j->mesh != NULL) {
		lobby_mesh_send_frame(j->mesh, frame, len);
		return;
	}
	dlen = lobby_net_frame_build(l, frame, len);
	if (dlen > 0 && lobby_net_frame_send(l, &j->host, (size_t)dlen) == 0)
		j->frames_to_host++;
}

/* ---- start ---- */

/* Which of the code's candidates a target is. */
static enum lobby_trav_kind kind_of(const struct joincode *c, const struct addr *a)
{
	if (c->has_lan && addr_equal(a, &c->lan))
		return LOBBY_TRAV_LAN;
	if (c->has_v6 && addr_equal(a, &c->v6addr))
		return LOBBY_TRAV_V6;
	if ((c->has_vpn && addr_equal(a, &c->vpn)) || (c->has_vpn2 && addr_equal(a, &c->vpn2)))
		return LOBBY_TRAV_VPN;
	return LOBBY_TRAV_PUBLIC;
}

static void observed(struct lobby *l, void *arg)
{
	struct lobby_join *j = arg;
	const struct joincode *me = lobby_observe_profile(l);
	struct lobby_trav_plan plan;
	struct addr targets[JOINCODE_MAX_TARGETS];
	char err[128], a[ADDR_STRLEN];
	bool has_pub = false, can_knock;
	int n;

	/* Our own code (no secret, no password) rides in join and knocks. */
	if (me != NULL && (me->has_lan || me->has_public || me->has_v6)) {
		struct joincode c = *me;

		c.ts = (uint32_t)time(NULL);
		if (joincode_encode(&c, NULL, j->profile, sizeof(j->profile), err, sizeof(err)) < 0)
			j->profile[0] = '\0';
	}
	lobby_trav_plan(me, &j->code, l->cfg.netpunch_schedule, &plan);
	can_knock = j->code.has_secret && lobby_rv_url(l) != NULL && j->profile[0] != '\0';
	if (!can_knock) {
		plan.name = "race";
		snprintf(plan.why, sizeof(plan.why), "no knock (%s): the race alone",
			 !j->code.has_secret       ? "the code carries no secret to knock with"
			 : lobby_rv_url(l) == NULL ? "no master to knock at: --rendezvous off"
						   : "our own address is unknown: no STUN answer");
	}
	lobby_trav_observed(l->trav, me, &plan);
	n = lobby_observe_targets(l, &j->code, targets, JOINCODE_MAX_TARGETS);
	for (int i = 0; i < n; i++) {
		enum lobby_trav_kind k = kind_of(&j->code, &targets[i]);

		j->targets[j->ntargets++] = targets[i];
		has_pub = has_pub || k == LOBBY_TRAV_PUBLIC;
		lobby_trav_target(l->trav, k, &targets[i]);
		log_info("dial-target target=%s", addr_str(&targets[i], a, sizeof(a)));
	}
	if (j->code.has_public && !has_pub)
		lobby_trav_skipped(l->trav, LOBBY_TRAV_PUBLIC, &j->code.pub,
				   "our public address is the host's: same NAT, the LAN path "
				   "instead of the hairpin");
	if (n == 0)
		log_warnx("no-candidates reason=\"the code has no IPv4 address to dial\"");
	/* "dialing host" was said before the code was decoded (main.c). */
	j->racing = true;
	lobby_trav_race(l->trav);
	ev_timer_start(l->loop, &j->hello, 0, on_hello, j);
	/* Knock when the code carries a secret, a master is set and we know
	 * our own address: when the plan says, beside the race. */
	if (can_knock)
		lobby_rv_knock_start(l, plan.knock_after_ms, plan.relay_from_knock);
}

static void join_free(struct lobby *l)
{
	struct lobby_join *j = join_of(l);
	struct json_object *st;

	/* lobby.py run_client's finally: a session that was connected ends
	 * "disconnected" (unless it failed) and not started. */
	if (j->connected) {
		st = json_object_new_object();
		json_object_object_add(
			st, "state",
			json_object_new_string(j->failed_state ? "failed" : "disconnected"));
		json_object_object_add(st, "started", json_object_new_boolean(false));
		lobby_ipc_state_merge(l, st);
	}
	ev_timer_stop(l->loop, &j->hello);
	ev_timer_stop(l->loop, &j->ping);
	ev_timer_stop(l->loop, &j->keepalive);
	ev_timer_stop(l->loop, &j->watch);
	ev_timer_stop(l->loop, &j->logs);
	lobby_trav_free(l->trav);
	l->trav = NULL;
	free(j->last_roster);
	free(j->manifest_key);
	lobby_xrecv_free(j->xrecv);
	ev_timer_stop(l->loop, &j->up_reap);
	lobby_xsend_free(j->up);
	lobby_mesh_free(j->mesh);
}

/*
 * lobby.py _finish: a received save made without our mod is said once,
 * right after save_ready (which the receiver emits just before its first
 * fdone ok).
 */
static void check_received_save(struct lobby_join *j, uint32_t sid)
{
	struct lobby *l = j->l;
	char path[PATH_MAX];

	if (j->mods_checked && j->mods_checked_sid == sid)
		return;
	j->mods_checked = true;
	j->mods_checked_sid = sid;
	if (snprintf(path, sizeof(path), "%s/%s.sav",
		     l->cfg.io_dir[0] != '\0' ? l->cfg.io_dir : ".",
		     LOBBY_SAVE_BASENAME) >= (int)sizeof(path) ||
	    lobby_role_save_has_mp_mod(path) != 0)
		return;
	log_info("xfer-recv-no-mod reason=\"the received save was made without the %s mod\"",
		 LOBBY_MOD_DISPLAY_NAME);
	lobby_ipc_notice(l, "The host's save does not have the " LOBBY_MOD_DISPLAY_NAME
			    " mod enabled, so nothing will sync. Ask the host to enable it in that "
			    "save's Mods panel and share it again.");
}

static void xrecv_send(struct lobby *l, const struct lobby_msg *m)
{
	struct lobby_join *j = join_of(l);

	if (m->type == LOBBY_MSG_FDONE && m->fdone.ok && lobby_xrecv_complete(j->xrecv))
		check_received_save(j, m->fdone.sid);
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

static const struct lobby_xrecv_ops xrecv_ops = {xrecv_send, xrecv_host, xrecv_name, NULL};

static int start(struct lobby *l, const struct joincode *code)
{
	struct lobby_join *j = join_of(l);
	int n;
	uint16_t port = l->cfg.local_port_set ? l->cfg.local_port : 0;

	j->l = l;
	j->code = *code;
	snprintf(j->you, sizeof(j->you), "%s", l->cfg.name);
	ev_timer_init(&j->hello);
	ev_timer_init(&j->ping);
	ev_timer_init(&j->keepalive);
	ev_timer_init(&j->watch);
	ev_timer_init(&j->up_reap);
	ev_timer_init(&j->logs);
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
	l->trav = lobby_trav_new(l, code);
	if (l->trav == NULL)
		return -ENOMEM;
	ev_timer_start(l->loop, &j->watch, 250, on_watch, j);
	/* A joiner observes itself without a word (lobby.py cmd_join). */
	n = lobby_net_new(l, port);
	if (n < 0) {
		errno = -n;
		log_warn("bind-fail port=%u role=joiner", port);
		return n;
	}
	return lobby_observe_start(l, false, observed, j);
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
	.on_envelope = on_envelope,
	.command = command,
	.game_frame = game_frame,
	.quit = quit,
	.relay_offered = relay_offered,
};
