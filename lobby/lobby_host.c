/*
 * The host's side of the lobby session (netpunch-wire.md §1.2, §7), the
 * role lobby_host_role.
 *
 * Observe (STUN + UPnP), make a code with a fresh 12-byte secret (locked
 * with --password), print CODE=..., answer every HELLO, and serve joiners:
 * join (version check, lobby full, names de-duplicated, a company as the
 * mode gives it), welcome, a roster to everyone on every change and every
 * 2 s, chat stamped and relayed three times, stage and company, the mode,
 * peers dropped after 10 s of silence, start with or without a save, bye
 * on quit. Game frames from the bridge go to every joiner; a joiner's
 * frames are delivered locally and forwarded to the others (star).
 *
 * The same session runs the dedicated relay lobby (lobby_relay_role,
 * --relay-only): no player of its own, the oldest player leads, and
 * lobby_relay.c has what else a relay does (lobby_relay.h). One session
 * with a relay's hooks rather than a copy of it: joins, rosters, chat,
 * envelopes and save rounds are the same code for both.
 *
 * The game beside us sees what netpunch's run_host shows it: a roster
 * event only when the players or their companies changed (or a stage
 * text), lobby_state.json rewritten with every roster event, statuses as
 * events only.
 */
#include <errno.h>
#include <json-c/json.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "frame.h"
#include "htab.h"
#include "lobby.h"
#include "lobby_bulk.h"
#include "lobby_dual.h"
#include "lobby_relay.h"
#include "lobby_logfwd.h"
#include "lobby_trav.h"
#include "lobby_xfer.h"
#include "log.h"
#include "num.h"
#include "pyjson.h"
#include "seal.h"
#include "strbuf.h"

#define STAGE_CHARS  (80)
#define CHAT_CHARS   (500)
#define REJECT_TRACK (4096)
#define HOST_COMPANY (1)
/* Names whose company a companies-mode host remembers for their return. */
#define REMEMBER_MAX (2 * LOBBY_CAP)
/* Saves refused for want of the mod: the chat says why once a minute per
 * path (lobby.py _mod_check); the least recently told path makes room. */
#define REFUSALS         (16)
#define REFUSAL_EVERY_MS (60000)
#define STAGE_RECEIVED   "save received, loading"
/* Rosters go out at most this often (ms), and at most ROSTER_BUDGET bytes
 * per second of them all told (a roster of 200 mesh players is ~320 KB, N^2
 * in their links: sent to 199 peers every 2 s as netpunch heals, 32 MB/s).
 * Up to ~100 mesh players the budget changes nothing. */
#define ROSTER_EVERY_MS (200)
#define ROSTER_BUDGET   (4 * 1000 * 1000)
/* A round of rosters goes out in slices of about this many bytes, one slice
 * per turn of the loop, so what arrives meanwhile (pings, game frames, the
 * keepalives that keep peers in) is read between them: a round to 199 mesh
 * players is 64 MB to seal and send, seconds of the loop under load. */
#define ROSTER_SLICE      (256 * 1024)
#define STAGE_LOADING_PRE "loading world"

struct peer {
	struct addr addr;
	char name[LOBBY_NAME_MAX * 4 + 1];
	long long last_ms;
	bool mesh;
	bool rally;  /* its join offered rally's transfer extension */
	bool sw;     /* its next save start is a world switch */
	bool sw_now; /* the start being sent to it is one */
	char profile[JOINCODE_MAX_TEXT];
	/* The players it reports direct links to (links), each NUL-ended in
	 * one allocation; linkv points into it. */
	char *links;
	const char **linkv;
	size_t nlinks;
	int company;
	char stage[STAGE_CHARS * 4 + 1];
	/* Its log messages: this second's window and count, the bytes taken. */
	long long log_win_ms, log_bytes;
	unsigned log_n;
	bool started;
	bool mark;                    /* the start being sent goes to it */
	enum lobby_metrics_path path; /* how it came in (its gauge in l->ctr.peers) */
};

struct remembered {
	char name[LOBBY_NAME_MAX * 4 + 1];
	int company;
	unsigned long long seq; /* 0: a free slot */
};

struct refusal {
	char path[PATH_MAX];
	long long told_ms;
	bool used;
};

struct lobby_host {
	struct lobby *l;
	struct htab *peers;   /* addr_key -> struct peer */
	struct htab *rejects; /* addr_key -> long long, last plain reject */
	char name[LOBBY_NAME_MAX * 4 + 1];
	char code[JOINCODE_MAX_TEXT];
	char transport_lobby[33];
	long long chat_cid;
	bool started, start_save;
	int company;
	char stage[STAGE_CHARS * 4 + 1];
	bool companies_mode;
	struct remembered remembered[REMEMBER_MAX];
	unsigned long long remember_seq;
	struct ev_timer heal, sweep, serve, reap, roster_soon, logs;
	struct lobby_peerslog *peerslog; /* lobby_peers.log (NULL: could not open) */
	/* A peer's log message, cleaned (peer_log). */
	char log_lines[LOBBY_LOG_LINES_MSG][LOBBY_LOG_LINE_MAX * 4 + 1];
	bool roster_soon_armed;
	long long last_roster_ms, last_alive_ms;
	uint8_t alive_token[NP1_TOKEN_LEN];
	unsigned long long roster_bytes; /* the last round of rosters, all peers */
	/* The round of rosters being sent, slice by slice: the two encodings
	 * (peers started or not), each made when first needed and kept for
	 * the round, and the addresses of the peers at its start (one that
	 * leaves meanwhile is still sent its copy; one that joins is sent its
	 * own at its join and is in the next round). */
	struct roster_round {
		struct strbuf enc[2];
		bool done[2], ok[2];
		struct addr to[LOBBY_CAP];
		bool started[LOBBY_CAP];
		size_t n, next;
		unsigned long long bytes;
		bool active, again;
	} round;
	struct ev_timer round_slice;
	/* The save transfer: the round running, the one asked for meanwhile,
	 * the last save shared (late players get it). */
	struct lobby_xsend *xfer;
	struct lobby_bulk *bulk; /* the TCP listener (NULL: UDP only) */
	bool xfer_over;
	char pending_save[PATH_MAX];
	bool pending_switch; /* the queued start is a world switch */
	char last_shared[PATH_MAX];
	/* What welcomes and rosters say of the save's mods: [] until a save is
	 * shared or advertised; then unknown (null, mods_unknown true), since
	 * we cannot read a save's mod list (lobby.py's "advertised"). */
	bool mods_unknown;
	struct refusal refusals[REFUSALS];
	/* The players and companies of the last roster event (lobby.py
	 * last_emitted_roster): an event only when they change. */
	char *last_key;
	bool ready;
	uint64_t joins, rejects_sent;
	/* The roster's lists, rebuilt for every roster (the codec borrows). */
	const char *names[LOBBY_CAP + 1];
	struct lobby_msg_entry companies[LOBBY_CAP + 1], stages[LOBBY_CAP + 1];
	struct lobby_msg_entry profiles[LOBBY_CAP];
	struct lobby_msg_link links[LOBBY_CAP];
	size_t nnames;
	/* The relay lobby's own state (NULL: a host), and the letters its
	 * rosters carry. */
	struct lobby_relay *relay;
	bool dedicated; /* --dedicated: the code's secret is kept */
	struct lobby_msg_entry letters[LOBBY_CAP];
	char letter_buf[LOBBY_CAP][LOBBY_RELAY_LETTER_SZ];
};

static struct lobby_host *host_of(const struct lobby *l)
{
	return l->role_data;
}

static long long unix_s(void)
{
	return (long long)time(NULL);
}

static const char *mode_name(const struct lobby_host *h)
{
	return h->companies_mode ? "companies" : "coop";
}

/* ---- peers ---- */

static struct peer *peer_get(struct lobby_host *h, const struct addr *a)
{
	struct addr_key k;

	addr_to_key(a, &k);
	return htab_get(h->peers, &k);
}

/* Peers oldest first: for (p = first(h); p != NULL; p = next(h, p)). */
static struct peer *first(const struct lobby_host *h)
{
	return htab_oldest(h->peers);
}

static struct peer *next(const struct lobby_host *h, const struct peer *p)
{
	return htab_newer(h->peers, p);
}

static bool name_taken(struct lobby_host *h, const char *name, const struct peer *except)
{
	if (strcmp(name, h->name) == 0)
		return true;
	for (struct peer *p = first(h); p != NULL; p = next(h, p)) {
		if (p != except && strcmp(p->name, name) == 0)
			return true;
	}
	return false;
}

/* name, else name#2, name#3, ... (empty: "player"). */
static void unique_name(struct lobby_host *h, const char *want, const struct peer *except,
			char *out, size_t size)
{
	char base[LOBBY_NAME_MAX * 4 + 1];

	lobby_msg_clean(want, LOBBY_NAME_MAX, base, sizeof(base));
	if (base[0] == '\0')
		snprintf(base, sizeof(base), "player");
	snprintf(out, size, "%s", base);
	for (int n = 2; name_taken(h, out, except) && n < 1000; n++)
		snprintf(out, size, "%.*s#%d", (int)(size - 8), base, n);
}

static bool company_taken(struct lobby_host *h, int id, const struct peer *except)
{
	/* A relay has no company of its own. */
	if (h->relay == NULL && id == h->company)
		return true;
	for (struct peer *p = first(h); p != NULL; p = next(h, p)) {
		if (p != except && p->company == id)
			return true;
	}
	return false;
}

static int free_company(struct lobby_host *h, const struct peer *except)
{
	for (int id = 1; id <= LOBBY_CAP; id++) {
		if (!company_taken(h, id, except))
			return id;
	}
	return LOBBY_CAP;
}

/* XXX: a linear scan of REMEMBER_MAX names; joins are rare. */
static struct remembered *remembered_get(struct lobby_host *h, const char *name)
{
	for (size_t i = 0; i < REMEMBER_MAX; i++) {
		if (h->remembered[i].seq != 0 && strcmp(h->remembered[i].name, name) == 0)
			return &h->remembered[i];
	}
	return NULL;
}

/* Remembers name's company; the longest unused name makes room. A relay
 * keeps them in relay_companies.json. */
static void remember(struct lobby_host *h, const char *name, int company)
{
	struct remembered *r;

	if (h->relay != NULL) {
		lobby_relay_remember_chip(h->relay, name, company);
		return;
	}
	r = remembered_get(h, name);
	if (r == NULL) {
		r = &h->remembered[0];
		for (size_t i = 0; i < REMEMBER_MAX && r->seq != 0; i++) {
			if (h->remembered[i].seq < r->seq)
				r = &h->remembered[i];
		}
		snprintf(r->name, sizeof(r->name), "%s", name);
	}
	r->company = company;
	r->seq = ++h->remember_seq;
}

/*
 * lobby.py do_join: in coop mode every player is company 1; in companies
 * mode a returning name gets its remembered company back when no one holds
 * it, else the lowest free id.
 */
static int assign_company(struct lobby_host *h, const struct peer *p)
{
	const struct remembered *r;

	if (!h->companies_mode)
		return HOST_COMPANY;
	if (h->relay != NULL) {
		int id = lobby_relay_chip(h->relay, p->name);

		return id > 0 && !company_taken(h, id, p) ? id : free_company(h, p);
	}
	r = remembered_get(h, p->name);
	if (r != NULL && !company_taken(h, r->company, p))
		return r->company;
	return free_company(h, p);
}

/* Names, sorted as Python sorts strings (code points = UTF-8 bytes). */
static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Players in the lobby: the joiners, and a host (a relay is none). */
static size_t players(const struct lobby_host *h)
{
	return htab_count(h->peers) + (h->relay == NULL ? 1 : 0);
}

/* The relay's leader: the oldest player. */
static struct peer *leader(const struct lobby_host *h)
{
	return h->relay != NULL ? first(h) : NULL;
}

/* The roster's host: ours, or on a relay the leader's ("" when empty). */
static const char *host_name(const struct lobby_host *h)
{
	const struct peer *p;

	if (h->relay == NULL)
		return h->name;
	p = leader(h);
	return p != NULL ? p->name : "";
}

/* ---- messages ---- */

/* The lists every roster carries, from the current peers. */
static void build_lists(struct lobby_host *h, struct lobby_msg_names *players,
			struct lobby_msg_dict *companies, struct lobby_msg_dict *stages)
{
	size_t nc = 0, ns = 0;

	/* lobby.py's orders: companies the host first, then the joiners in
	 * join order; stages the joiners, then the host; players sorted. */
	h->nnames = 0;
	/* A relay is no player: not in the lists (lobby.py relay_only). */
	if (h->relay == NULL) {
		h->names[h->nnames++] = h->name;
		h->companies[nc++] = (struct lobby_msg_entry){h->name, NULL, h->company};
	}
	for (struct peer *p = first(h); p != NULL; p = next(h, p)) {
		h->names[h->nnames++] = p->name;
		h->companies[nc++] = (struct lobby_msg_entry){p->name, NULL, p->company};
		if (p->stage[0] != '\0')
			h->stages[ns++] = (struct lobby_msg_entry){p->name, p->stage, 0};
	}
	if (h->stage[0] != '\0' && h->relay == NULL)
		h->stages[ns++] = (struct lobby_msg_entry){h->name, h->stage, 0};
	qsort(h->names, h->nnames, sizeof(h->names[0]), cmp_str);
	*players = (struct lobby_msg_names){false, h->nnames, h->names};
	*companies = (struct lobby_msg_dict){false, nc, h->companies};
	*stages = (struct lobby_msg_dict){false, ns, h->stages};
}

static void send_welcome(struct lobby_host *h, struct peer *p)
{
	struct lobby *l = h->l;
	struct lobby_msg m;

	lobby_msg_init(&m, LOBBY_MSG_WELCOME);
	m.welcome = (struct lobby_msg_welcome){
		.version = l->cfg.protocol_version,
		.transport_lobby = h->transport_lobby,
		.you = p->name,
		.host = host_name(h),
		.recovery = 0,
		.lobby = l->cfg.lobby_name,
		.relay = h->relay != NULL,
		.mods = h->mods_unknown ? NULL : "[]",
		.mods_unknown = h->mods_unknown,
	};
	lobby_net_send_msg(l, &p->addr, &m);
}

/* The roster as a peer whose started flag is started gets it, encoded
 * into b (0 or -errno). */
static int encode_roster(struct lobby_host *h, bool started, struct strbuf *b)
{
	struct lobby *l = h->l;
	struct lobby_msg m;
	struct lobby_msg_roster *r = &m.roster;
	size_t np = 0, nl = 0;

	lobby_msg_init(&m, LOBBY_MSG_ROSTER);
	build_lists(h, &r->players, &r->companies, &r->stages);
	for (struct peer *q = first(h); q != NULL; q = next(h, q)) {
		if (q->profile[0] != '\0')
			h->profiles[np++] = (struct lobby_msg_entry){q->name, q->profile, 0};
		/* Every joiner's links, [] for a star joiner (lobby.py). */
		h->links[nl++] = (struct lobby_msg_link){
			q->name, (struct lobby_msg_names){false, q->nlinks, q->linkv}};
	}
	r->version = l->cfg.protocol_version;
	r->transport_lobby = h->transport_lobby;
	r->recovery = 0;
	r->host = host_name(h);
	r->lobby = l->cfg.lobby_name;
	r->relay = h->relay != NULL;
	r->mods = h->mods_unknown ? NULL : "[]";
	r->mods_unknown = h->mods_unknown;
	r->stored_age = (struct lobby_msg_num){.present = true, .i = -1};
	r->stored_max = (struct lobby_msg_num){.present = true, .i = -1};
	r->letters.null = true;
	if (h->relay != NULL) {
		size_t n = 0;

		/* lobby.py: stored_age, stored_max 180 and every player's
		 * letter, in join order. */
		r->stored_age.i = lobby_relay_stored_age(h->relay);
		r->stored_max.i = LOBBY_RELAY_STORED_MAX_S;
		for (struct peer *q = first(h); q != NULL && n < LOBBY_CAP; q = next(h, q)) {
			h->letters[n] = (struct lobby_msg_entry){
				q->name, lobby_relay_letter(h->relay, q->name, h->letter_buf[n]),
				0};
			n++;
		}
		r->letters = (struct lobby_msg_dict){false, n, h->letters};
	}
	r->started = started;
	r->start_save = h->start_save;
	r->profiles = (struct lobby_msg_dict){false, np, h->profiles};
	r->links = (struct lobby_msg_links){false, nl, h->links};
	r->mode = mode_name(h);
	strbuf_init(b, LOBBY_MSG_MAX);
	return lobby_msg_encode(&m, b);
}

/* The roster event for the game beside us (lobby_out.jsonl), and the
 * state file's fields in lobby.py emit_roster's order. */
static void emit_roster(struct lobby_host *h)
{
	struct lobby *l = h->l;
	struct lobby_event e = {.type = LOBBY_EV_ROSTER_HOST};
	struct lobby_event_roster *r = &e.roster;
	struct json_object *st = json_object_new_object(), *arr = json_object_new_array(),
			   *comp = json_object_new_object();

	build_lists(h, &r->players, &r->companies, &r->stages);
	r->you = h->name;
	r->host = host_name(h);
	r->lobby = l->cfg.lobby_name;
	r->has_relay = true;
	r->relay = h->relay != NULL;
	r->mode = mode_name(h);
	r->join_freeze = false;
	lobby_ipc_emit(l, &e);
	for (size_t i = 0; i < h->nnames; i++)
		json_object_array_add(arr, json_object_new_string(h->names[i]));
	for (size_t i = 0; i < r->companies.n; i++)
		json_object_object_add(comp, r->companies.v[i].key,
				       json_object_new_int64(r->companies.v[i].num));
	json_object_object_add(st, "state", json_object_new_string("connected"));
	json_object_object_add(st, "code", json_object_new_string(h->code));
	json_object_object_add(st, "players", arr);
	json_object_object_add(st, "you", json_object_new_string(h->name));
	json_object_object_add(st, "host", json_object_new_string(host_name(h)));
	json_object_object_add(st, "started", json_object_new_boolean(h->started));
	json_object_object_add(st, "lobby", json_object_new_string(l->cfg.lobby_name));
	json_object_object_add(st, "companies", comp);
	json_object_object_add(st, "mode", json_object_new_string(mode_name(h)));
	lobby_ipc_state_merge(l, st);
}

/*
 * The roster to every peer (its started flag is its own): encoded once for
 * each value of that flag, not once per peer (a lobby of 200 mesh players
 * has a roster of some 400 KB, N^2 in their links).
 */
static void round_end(struct lobby_host *h)
{
	struct roster_round *r = &h->round;

	for (int k = 0; k < 2; k++) {
		if (r->done[k])
			strbuf_release(&r->enc[k]);
		r->done[k] = r->ok[k] = false;
	}
	r->active = false;
	ev_timer_stop(h->l->loop, &h->round_slice);
}

static void roster_soon(struct lobby_host *h);

/* One slice of the round: at least one peer, then up to ROSTER_SLICE bytes;
 * the rest on the next turn of the loop. */
static void on_round_slice(struct ev_timer *t, void *arg)
{
	struct lobby_host *h = arg;
	struct roster_round *r = &h->round;
	unsigned long long slice = 0;

	(void)t;
	while (r->next < r->n && (slice == 0 || slice < ROSTER_SLICE)) {
		int k = r->started[r->next] ? 1 : 0;

		if (!r->done[k]) {
			r->done[k] = true;
			r->ok[k] = encode_roster(h, k == 1, &r->enc[k]) == 0;
			if (!r->ok[k])
				log_warnx("roster-too-big players=%zu", players(h));
		}
		if (r->ok[k]) {
			lobby_net_send_app(h->l, &r->to[r->next], (const uint8_t *)r->enc[k].p,
					   r->enc[k].len);
			slice += r->enc[k].len;
		} else {
			slice += 1;
		}
		r->next++;
	}
	r->bytes += slice;
	if (r->next < r->n) {
		ev_timer_start(h->l->loop, &h->round_slice, 0, on_round_slice, h);
		return;
	}
	h->roster_bytes = r->bytes;
	round_end(h);
	/* What changed while the round went out goes in the next one. */
	if (r->again) {
		r->again = false;
		roster_soon(h);
	}
}

/*
 * A round of rosters to every peer, as of now: both encodings are made on
 * first use and kept for the round, which goes out a slice per turn of the
 * loop. A round asked for while one is going out follows it (roster_soon,
 * so within the budget).
 */
static void send_roster_packets(struct lobby_host *h)
{
	struct roster_round *r = &h->round;

	h->roster_soon_armed = false;
	ev_timer_stop(h->l->loop, &h->roster_soon);
	if (r->active) {
		r->again = true;
		return;
	}
	h->last_roster_ms = ev_now(h->l->loop);
	r->n = r->next = 0;
	r->bytes = 0;
	for (struct peer *p = first(h); p != NULL && r->n < LOBBY_CAP; p = next(h, p)) {
		r->to[r->n] = p->addr;
		r->started[r->n++] = p->started;
	}
	r->active = true;
	on_round_slice(&h->round_slice, h);
}

/* The pause after a round of rosters that keeps them within the budget,
 * and at least floor_ms. */
static long long roster_pause(const struct lobby_host *h, long long floor_ms)
{
	long long ms = (long long)(h->roster_bytes * 1000 / ROSTER_BUDGET);

	return ms > floor_ms ? ms : floor_ms;
}

/* The roster to one peer now (a newcomer need not wait for the budget). */
static void send_roster_to(struct lobby_host *h, struct peer *p)
{
	struct strbuf b;

	if (encode_roster(h, p->started, &b) == 0)
		lobby_net_send_app(h->l, &p->addr, (const uint8_t *)b.p, b.len);
	strbuf_release(&b);
}

static void on_roster_soon(struct ev_timer *t, void *arg)
{
	(void)t;
	send_roster_packets(arg);
}

/*
 * The roster changed (a join, a leave, a stage, links): to every peer now,
 * or - when the last one went less than ROSTER_EVERY_MS ago - once at the
 * end of that interval for all the changes meanwhile. netpunch sends one
 * per change: 200 players joining at once make 200 rosters to 200 peers,
 * N^3 bytes, and the welcomes drown in them; and a forming mesh sends N^2
 * links reports, each a roster of N^2 bytes to everyone.
 */
static void roster_soon(struct lobby_host *h)
{
	long long now = ev_now(h->l->loop),
		  wait = h->last_roster_ms + roster_pause(h, ROSTER_EVERY_MS) - now;

	if (h->roster_soon_armed)
		return;
	if (wait <= 0) {
		send_roster_packets(h);
		return;
	}
	h->roster_soon_armed = true;
	ev_timer_start(h->l->loop, &h->roster_soon, wait, on_roster_soon, h);
}

/* The players (sorted) and their companies, as one string. */
static char *roster_key(struct lobby_host *h)
{
	struct lobby_msg_names players;
	struct lobby_msg_dict companies, stages;
	struct strbuf b;
	char num[24];

	build_lists(h, &players, &companies, &stages);
	strbuf_init(&b, (size_t)(LOBBY_CAP + 1) * (sizeof(h->name) + sizeof(num)) + 1);
	/* On a relay a new leader is news too. */
	if (h->relay != NULL) {
		strbuf_append(&b, host_name(h), strlen(host_name(h)));
		strbuf_append(&b, "\x1d", 1);
	}
	/* Names have no control characters (lobby_msg_clean): \x1f and \x1e
	 * separate. Players are sorted and unique, so this is sorted too. */
	for (size_t i = 0; i < h->nnames; i++) {
		for (size_t k = 0; k < companies.n; k++) {
			if (strcmp(companies.v[k].key, h->names[i]) != 0)
				continue;
			strbuf_append(&b, h->names[i], strlen(h->names[i]));
			snprintf(num, sizeof(num), "\x1f%lld\x1e", companies.v[k].num);
			strbuf_append(&b, num, strlen(num));
		}
	}
	strbuf_append(&b, "", 0);
	return b.p;
}

/* lobby.py roster_changed: the roster to every peer; the event only when
 * the players or their companies differ from the last one emitted. */
static void roster_changed(struct lobby_host *h)
{
	char *key;

	roster_soon(h);
	key = roster_key(h);
	if (key != NULL && h->last_key != NULL && strcmp(key, h->last_key) == 0) {
		free(key);
		return;
	}
	free(h->last_key);
	h->last_key = key;
	emit_roster(h);
}

/* A stage text changed (a joiner's, ours, the sender's): the roster to
 * every peer and the event, whatever the key says. */
static void stage_changed(struct lobby_host *h)
{
	roster_soon(h);
	emit_roster(h);
}

/* A message several times to every peer, or to the marked ones (chat and
 * start: receivers de-duplicate), encoded once. */
static void burst_to(struct lobby_host *h, const struct lobby_msg *m, bool marked_only)
{
	struct strbuf b;

	strbuf_init(&b, LOBBY_MSG_MAX);
	if (lobby_msg_encode(m, &b) == 0) {
		for (int k = 0; k < LOBBY_CHAT_BURST; k++) {
			for (struct peer *p = first(h); p != NULL; p = next(h, p)) {
				if (!marked_only || p->mark)
					lobby_net_send_app(h->l, &p->addr, (const uint8_t *)b.p,
							   b.len);
			}
		}
	}
	strbuf_release(&b);
}

static void burst(struct lobby_host *h, const struct lobby_msg *m)
{
	burst_to(h, m, false);
}

static void send_chat(struct lobby_host *h, const char *from, const char *text)
{
	struct lobby *l = h->l;
	long long cid = ++h->chat_cid, ts = unix_s();
	struct lobby_msg m;
	struct lobby_event e = {.type = LOBBY_EV_CHAT, .chat = {from, text, true, ts}};

	lobby_msg_init(&m, LOBBY_MSG_CHAT);
	m.chat = (struct lobby_msg_chat){from, text, true, ts, true, cid};
	burst(h, &m);
	/* And the game beside us. */
	lobby_ipc_emit(l, &e);
	log_info("chat from=\"%s\" cid=%lld", from, cid);
}

static void send_reject(struct lobby *l, const struct addr *to, const char *reason, bool plain)
{
	struct lobby_msg m;

	lobby_msg_init(&m, LOBBY_MSG_REJECT);
	m.reject = reason;
	if (plain)
		lobby_net_send_plain_msg(l, to, &m);
	else
		lobby_net_send_msg(l, to, &m);
}

/* ---- requests ---- */

static void drop_peer(struct lobby_host *h, struct peer *p, enum lobby_metrics_left why);
static bool set_mode(struct lobby_host *h, const char *mode);

static void do_join(struct lobby_host *h, const struct addr *from, const struct lobby_msg_join *jm)
{
	struct lobby *l = h->l;
	struct peer *p = peer_get(h, from);
	char addr[ADDR_STRLEN];
	bool created = false;

	if (jm->version == NULL || strcmp(jm->version, l->cfg.protocol_version) != 0) {
		char reason[512];

		snprintf(reason, sizeof(reason),
			 "Multiplayer version mismatch: you have %s; the host has %s. Install the "
			 "same multiplayer version on both sides.",
			 jm->version != NULL ? jm->version : "unknown (older build)",
			 l->cfg.protocol_version);
		send_reject(l, from, reason, false);
		l->ctr.joins[LOBBY_JOIN_VERSION]++;
		log_info("reject peer=%s reason=version theirs=\"%s\"",
			 addr_str(from, addr, sizeof(addr)),
			 jm->version != NULL ? jm->version : "-");
		/* A player who was in (a rename from another build) is out. */
		if (p != NULL)
			drop_peer(h, p, LOBBY_LEFT_VERSION);
		return;
	}
	if (p == NULL) {
		struct addr_key k;

		if (htab_count(h->peers) + 1 >= l->cfg.max_players) {
			send_reject(l, from, "lobby full", false);
			l->ctr.joins[LOBBY_JOIN_FULL]++;
			log_info("reject peer=%s reason=full", addr_str(from, addr, sizeof(addr)));
			return;
		}
		addr_to_key(from, &k);
		p = htab_insert(h->peers, &k, false, NULL);
		if (p == NULL) {
			send_reject(l, from, "lobby full", false);
			l->ctr.joins[LOBBY_JOIN_FULL]++;
			return;
		}
		p->addr = *from;
		p->company = 0;
		p->started = false;
		created = true;
		h->joins++;
		l->ctr.joins[LOBBY_JOIN_ACCEPTED]++;
	}
	p->last_ms = ev_now(l->loop);
	if (created || jm->name == NULL || strcmp(jm->name, p->name) != 0) {
		char fresh[sizeof(p->name)];

		unique_name(h, jm->name != NULL ? jm->name : "", p, fresh, sizeof(fresh));
		snprintf(p->name, sizeof(p->name), "%s", fresh);
	}
	if (created) {
		p->company = assign_company(h, p);
		remember(h, p->name, p->company);
	}
	p->mesh = jm->mesh;
	p->rally = jm->rally >= LOBBY_XFER_RALLY_V && !l->cfg.fast_off;
	if (jm->profile != NULL)
		snprintf(p->profile, sizeof(p->profile), "%s", jm->profile);
	/* The dual TCP link: ours dialled now, the joiner's hello bound. */
	lobby_dual_peer_up(l, &p->addr, p->name, h->name);
	log_info("join peer=%s name=\"%s\" new=%d company=%d players=%zu",
		 addr_str(from, addr, sizeof(addr)), p->name, created, p->company, players(h));
	if (created) {
		p->path =
			(enum lobby_metrics_path)lobby_trav_host_join(l, p->name, from, p->profile);
		l->ctr.peers[p->path]++;
	}
	send_welcome(h, p);
	/* A relay's letter, and what a newcomer is told of the world (before
	 * the roster, as lobby.py do_join does). */
	if (h->relay != NULL)
		lobby_relay_joined(h->relay, &p->addr, p->name, created, p == leader(h));
	roster_changed(h);
	/* The budget may hold the others' rosters back; not the newcomer's. */
	if (created && h->roster_soon_armed)
		send_roster_to(h, p);
	lobby_rv_peer_seen(l, from);
	if (created && h->started && h->relay == NULL) {
		struct lobby_msg st;

		/* A late player: the host's game is already running. */
		lobby_msg_init(&st, LOBBY_MSG_STATUS);
		st.status.state = "connected";
		st.status.detail = "game already started -- ask the host to press START GAME again";
		lobby_net_send_msg(l, &p->addr, &st);
	}
}

static void drop_peer(struct lobby_host *h, struct peer *p, enum lobby_metrics_left why)
{
	char a[ADDR_STRLEN];
	struct addr gone = p->addr;
	bool led = p == leader(h);

	log_info("peer-gone peer=%s name=\"%s\" reason=%s", addr_str(&p->addr, a, sizeof(a)),
		 p->name, lobby_metrics_left_name(why));
	h->l->ctr.left[why]++;
	h->l->ctr.peers[p->path]--;
	/* Out of the table first: the round may resolve and start the others
	 * now, and what it sends must not list the one who left. */
	free(p->links);
	free(p->linkv);
	htab_remove(h->peers, p);
	lobby_dual_peer_gone(h->l, &gone);
	if (h->relay != NULL) {
		lobby_relay_left(h->relay, &gone, led, htab_count(h->peers) == 0);
		/* The last one out closes the session (the world stays). */
		if (htab_count(h->peers) == 0) {
			h->started = false;
			h->start_save = false;
		}
	}
	if (h->xfer != NULL)
		lobby_xsend_peer_gone(h->xfer, &gone);
	roster_changed(h);
}

static void xfer_received(struct lobby_host *h, struct peer *p);

static struct peer *peer_named(struct lobby_host *h, const char *name)
{
	for (struct peer *q = first(h); q != NULL; q = next(h, q)) {
		if (strcmp(q->name, name) == 0)
			return q;
	}
	return NULL;
}

/*
 * lobby.py's links: the names a joiner reaches directly, at most LOBBY_CAP.
 * We keep only the names of other players in the lobby (netpunch keeps any
 * string, which lets one joiner swell everyone's roster). True when they
 * changed.
 */
static bool set_links(struct lobby_host *h, struct peer *p, const struct lobby_msg_names *direct)
{
	size_t bytes = 0, n = 0, at = 0;
	char *blob;
	const char **v;
	bool same;

	for (size_t i = 0; i < direct->n && i < LOBBY_CAP; i++) {
		struct peer *q = peer_named(h, direct->v[i]);

		if (q != NULL && q != p)
			bytes += strlen(q->name) + 1;
	}
	blob = malloc(bytes + 1);
	v = malloc((LOBBY_CAP + 1) * sizeof(*v));
	if (blob == NULL || v == NULL) {
		free(blob);
		free(v);
		return false;
	}
	for (size_t i = 0; i < direct->n && i < LOBBY_CAP; i++) {
		struct peer *q = peer_named(h, direct->v[i]);
		size_t sl;

		if (q == NULL || q == p)
			continue;
		sl = strlen(q->name) + 1;
		memcpy(blob + at, q->name, sl);
		v[n++] = blob + at;
		at += sl;
	}
	same = n == p->nlinks;
	for (size_t i = 0; same && i < n; i++)
		same = strcmp(v[i], p->linkv[i]) == 0;
	if (same) {
		free(blob);
		free(v);
		return false;
	}
	free(p->links);
	free(p->linkv);
	p->links = blob;
	p->linkv = v;
	p->nlinks = n;
	return true;
}

/*
 * lobby.py's log branch: untrusted lines from a peer, written to our disk:
 * 8 messages a second and 20 MB a session per peer, 64 lines a message,
 * control characters blanked so a line cannot forge another's tag.
 */
static void peer_log(struct lobby_host *h, struct peer *p, const struct lobby_msg_names *lines)
{
	long long now = ev_now(h->l->loop);
	const char *v[LOBBY_LOG_LINES_MSG];
	size_t n = 0;

	if (now - p->log_win_ms >= 1000) {
		p->log_win_ms = now;
		p->log_n = 0;
	}
	if (++p->log_n > LOBBY_LOG_MSGS_PER_SEC || p->log_bytes > LOBBY_LOG_BYTES_PEER)
		return;
	for (size_t i = 0; i < lines->n && n < LOBBY_LOG_LINES_MSG; i++) {
		size_t len = lobby_log_clean(lines->v[i], h->log_lines[n], sizeof(h->log_lines[n]));

		p->log_bytes += (long long)len + 1;
		v[n] = h->log_lines[n];
		n++;
	}
	/* One write (and flush) for the message, not one per line. */
	lobby_peerslog_write(h->peerslog, p->name, v, n);
}

/* Our own lines (and --forward-log files) into the merged log. */
static void flush_own_logs(struct lobby_host *h, bool force)
{
	char buf[LOBBY_LOG_BATCH_BYTES * 4 + 256];
	const char *v[LOBBY_LOG_BATCH_BYTES];
	size_t n;

	lobby_logfwd_poll(h->l->logfwd);
	do {
		n = lobby_logfwd_drain(h->l->logfwd, ev_now(h->l->loop), force, buf, sizeof(buf), v,
				       sizeof(v) / sizeof(v[0]));
		lobby_peerslog_write(h->peerslog, h->name, v, n);
	} while (force && n > 0);
}

static void on_logs(struct ev_timer *t, void *arg)
{
	struct lobby_host *h = arg;

	flush_own_logs(h, false);
	ev_timer_start(h->l->loop, t, LOBBY_LOG_FLUSH_MS, on_logs, h);
}

static void on_msg(struct lobby *l, const struct addr *from, const struct lobby_msg *m, bool sealed)
{
	struct lobby_host *h = host_of(l);
	struct peer *p = peer_get(h, from);
	char clean[CHAT_CHARS * 4 + 1], stage[STAGE_CHARS * 4 + 1];

	(void)sealed;
	if (m->type == LOBBY_MSG_JOIN) {
		do_join(h, from, &m->join);
		return;
	}
	if (p == NULL)
		return; /* everything else needs a joined peer */
	if (h->relay != NULL && lobby_relay_on_msg(h->relay, from, p->name, p == leader(h), m))
		return;
	switch (m->type) {
	case LOBBY_MSG_PING:
		/* last_ms is refreshed by every authenticated payload */
		return;
	case LOBBY_MSG_CHAT:
		if (m->chat.text == NULL)
			return;
		lobby_msg_clean(m->chat.text, CHAT_CHARS, clean, sizeof(clean));
		if (clean[0] != '\0')
			send_chat(h, p->name, clean);
		return;
	case LOBBY_MSG_LEAVE:
		drop_peer(h, p, LOBBY_LEFT_LEFT);
		return;
	case LOBBY_MSG_STAGE:
		/* What a joiner is doing; "" clears it. Only a new text counts. */
		lobby_msg_clean(m->stage != NULL ? m->stage : "", STAGE_CHARS, stage,
				sizeof(stage));
		if (strcmp(stage, p->stage) != 0) {
			memcpy(p->stage, stage, sizeof(p->stage));
			stage_changed(h);
		}
		return;
	case LOBBY_MSG_FBEGIN_ACK:
	case LOBBY_MSG_FACK:
	case LOBBY_MSG_FDONE:
	case LOBBY_MSG_XSTAT:
		if (h->xfer != NULL) {
			enum lobby_xsend_state was = lobby_xsend_state_of(h->xfer, from);

			lobby_xsend_on_msg(h->xfer, from, m);
			/* The peer that verified shows so at once (lobby.py on_fdone). */
			if (was == LOBBY_XSEND_ACTIVE &&
			    lobby_xsend_state_of(h->xfer, from) == LOBBY_XSEND_DONE)
				xfer_received(h, p);
		}
		return;
	case LOBBY_MSG_COMPANY:
		/* A joiner may set its own company only (no player: its own);
		 * on a relay the leader stands in for the host: anyone's. */
		if (m->company.id < 1 || m->company.id > LOBBY_CAP)
			return;
		if (m->company.player == NULL || strcmp(m->company.player, p->name) == 0) {
			p->company = (int)m->company.id;
			remember(h, p->name, p->company);
			roster_changed(h);
		} else if (p == leader(h) && peer_named(h, m->company.player) != NULL) {
			struct peer *q = peer_named(h, m->company.player);

			q->company = (int)m->company.id;
			remember(h, q->name, q->company);
			log_info("company name=\"%s\" id=%d by-leader=\"%s\"", q->name, q->company,
				 p->name);
			roster_changed(h);
		} else {
			log_info("company-refused name=\"%s\" target=\"%s\" reason=\"only the "
				 "leader "
				 "may\"",
				 p->name, m->company.player);
		}
		return;
	case LOBBY_MSG_MODE:
		/* The lobby's mode: on a relay the leader's to set. */
		if (p == leader(h) && set_mode(h, m->mode)) {
			log_info("mode mode=%s by-leader=\"%s\"", mode_name(h), p->name);
			roster_changed(h);
		}
		return;
	case LOBBY_MSG_LINKS:
		/* A mesh joiner's direct links: into everyone's roster, so
		 * they can plan their relays (not an event of ours). */
		if (set_links(h, p, &m->links))
			roster_soon(h);
		return;
	case LOBBY_MSG_MESH_HI:
		return; /* names are the host's to give */
	case LOBBY_MSG_LOG:
		peer_log(h, p, &m->log);
		return;
	default:
		return;
	}
}

/* ---- the socket ---- */

static void on_ctl(struct lobby *l, const struct addr *from, uint8_t type, const uint8_t *payload,
		   size_t len)
{
	struct peer *p;

	switch (type) {
	case NP1_HELLO:
		/* Answer every HELLO with its own token: that is the punch. */
		lobby_net_send_ctl(l->net, from, NP1_ACK, payload, len);
		return;
	case NP1_KEEPALIVE:
		p = peer_get(host_of(l), from);
		if (p != NULL)
			p->last_ms = ev_now(l->loop);
		return;
	default:
		return; /* ACK, CONNECTED, KEYX: nothing for a host to do */
	}
}

static bool on_payload(struct lobby *l, const struct addr *from, bool sealed)
{
	struct lobby_host *h = host_of(l);
	struct peer *p;

	/* In a sealed session nothing plain is accepted from joiners, but on
	 * a relay the leader's upload: its chunks travel in clear (netpunch's
	 * BULK_PLAIN; their hashes guard them). Plain says nothing of who sent
	 * it, so it refreshes nobody. */
	if (l->sealer != NULL && !sealed)
		return h->relay != NULL && leader(h) != NULL && addr_equal(&leader(h)->addr, from);
	p = peer_get(h, from);
	if (p != NULL)
		p->last_ms = ev_now(l->loop);
	lobby_rv_peer_seen(l, from);
	return true;
}

/* A game frame to one player. */
static void frame_to(struct lobby_host *h, const struct peer *p, const uint8_t *frame, size_t len)
{
	int dlen = lobby_net_frame_build(h->l, frame, len);

	if (dlen > 0 && lobby_net_frame_send(h->l, &p->addr, (size_t)dlen) >= 0) {
		h->l->ctr.frames[LOBBY_DIR_TO_PEER]++;
		h->l->ctr.frame_bytes[LOBBY_DIR_TO_PEER] += len;
	}
}

/* A game frame to every joiner but one (NULL: all), sealed once. */
static void frame_to_joiners(struct lobby_host *h, const struct peer *except, const uint8_t *frame,
			     size_t len)
{
	int dlen = 0;

	for (struct peer *p = first(h); p != NULL; p = next(h, p)) {
		if (p == except)
			continue;
		if (dlen == 0 && (dlen = lobby_net_frame_build(h->l, frame, len)) < 0)
			return;
		if (lobby_net_frame_send(h->l, &p->addr, (size_t)dlen) >= 0) {
			h->l->ctr.frames[LOBBY_DIR_TO_PEER]++;
			h->l->ctr.frame_bytes[LOBBY_DIR_TO_PEER] += len;
		}
	}
}

static void on_game(struct lobby *l, const struct addr *from, const uint8_t *frame, size_t len,
		    bool sealed)
{
	struct lobby_host *h = host_of(l);
	struct peer *p = peer_get(h, from);

	(void)sealed;
	if (p == NULL)
		return;
	l->ctr.frames[LOBBY_DIR_FROM_PEER]++;
	l->ctr.frame_bytes[LOBBY_DIR_FROM_PEER] += len;
	if (h->relay != NULL) {
		struct peer *lead = leader(h);

		/* No game here. A mesh joiner sends its plain frame to "the
		 * host", which on a relay means the leader (lobby.py); a star
		 * joiner's goes to everyone else. */
		if (!p->mesh)
			frame_to_joiners(h, p, frame, len);
		else if (lead != NULL && lead != p)
			frame_to(h, lead, frame, len);
		return;
	}
	lobby_game_deliver(l, frame, len);
	/* A star joiner's frame goes on to every other joiner; a mesh
	 * joiner sends its own to each. */
	if (!p->mesh)
		frame_to_joiners(h, p, frame, len);
}

/* A save chunk: on a relay, the leader's upload (lobby_relay). */
static void on_chunk(struct lobby *l, const struct addr *from, const uint8_t *p, size_t len,
		     bool sealed)
{
	struct lobby_host *h = host_of(l);

	(void)sealed;
	if (h->relay != NULL && peer_get(h, from) != NULL)
		lobby_relay_on_chunk(h->relay, from, p, len);
}

/*
 * lobby.py handle_data's envelope: for us, the inner game frame to our
 * game; for another joiner, the envelope as it is to a mesh joiner, the
 * inner frame to a star joiner. Only a game frame is ever unwrapped
 * (netpunch passes any inner payload on, which would let one joiner speak
 * as the host to a star joiner).
 */
static void on_envelope(struct lobby *l, const struct addr *from, const uint8_t *env, size_t len,
			bool sealed)
{
	struct lobby_host *h = host_of(l);
	char to[256], frm[256];
	const uint8_t *inner;
	size_t ilen;
	struct peer *q;
	bool game;

	(void)sealed;
	if (peer_get(h, from) == NULL || mesh_env_parse(env, len, to, frm, &inner, &ilen) < 0)
		return;
	game = ilen >= 1 && inner[0] == 'g' && ilen - 1 <= NP1_GAME_MAX;
	if (strcmp(to, h->name) == 0 && h->relay != NULL)
		return; /* a relay is no player: nothing for it */
	if (strcmp(to, h->name) == 0) {
		if (game)
			lobby_game_deliver(l, inner + 1, ilen - 1);
		return;
	}
	q = peer_named(h, to);
	if (q == NULL)
		return;
	if (q->mesh)
		lobby_net_send_app(l, &q->addr, env, len);
	else if (game)
		lobby_net_send_app(l, &q->addr, inner, ilen);
	else
		return;
	l->ctr.envelopes++;
}

static void on_bad_seal(struct lobby *l, const struct addr *from, int why)
{
	struct lobby_host *h = host_of(l);
	struct addr_key k;
	long long *last, now = ev_now(l->loop);

	(void)why;
	if (peer_get(h, from) != NULL)
		return; /* a peer's tampered or replayed frame: dropped, counted */
	/* Someone with the wrong key: tell them, in clear, every 2 s at most. */
	addr_to_key(from, &k);
	last = htab_get(h->rejects, &k);
	if (last == NULL) {
		last = htab_insert(h->rejects, &k, true, NULL);
		*last = now - LOBBY_REJECT_EVERY_MS;
	}
	if (now - *last < LOBBY_REJECT_EVERY_MS)
		return;
	*last = now;
	htab_touch(h->rejects, last);
	h->rejects_sent++;
	l->ctr.joins[LOBBY_JOIN_WRONG_PASSWORD]++;
	send_reject(l, from, "wrong password", true);
}

/* ---- timers ---- */

static void send_keepalives(struct lobby_host *h, long long now)
{
	h->last_alive_ms = now;
	for (struct peer *p = first(h); p != NULL; p = next(h, p))
		lobby_net_send_ctl(h->l->net, &p->addr, NP1_KEEPALIVE, h->alive_token,
				   sizeof(h->alive_token));
}

static void on_heal(struct ev_timer *t, void *arg)
{
	struct lobby_host *h = arg;
	long long now = ev_now(h->l->loop);

	/* Every 2 s as netpunch heals, unless a roster went out since, or the
	 * budget says wait (a big mesh lobby heals every few seconds more);
	 * then a keepalive every 2 s says we are here (a joiner gives the host
	 * up after 12 s of silence). */
	if (h->round.active) {
		/* A round still going out may not reach the last peers for a
		 * while: the keepalive reaches them now. */
		if (now - h->last_alive_ms >= LOBBY_ROSTER_HEAL_MS - 50)
			send_keepalives(h, now);
	} else if (now - h->last_roster_ms < LOBBY_ROSTER_HEAL_MS - 50) {
		/* a roster went out lately */
	} else if (!h->roster_soon_armed &&
		   now - h->last_roster_ms >= roster_pause(h, LOBBY_ROSTER_HEAL_MS) - 50) {
		send_roster_packets(h);
	} else if (now - h->last_alive_ms >= LOBBY_ROSTER_HEAL_MS - 50) {
		send_keepalives(h, now);
	}
	ev_timer_start(h->l->loop, t, 500, on_heal, h);
}

static void on_sweep(struct ev_timer *t, void *arg)
{
	struct lobby_host *h = arg;
	long long now = ev_now(h->l->loop);
	struct peer *p = htab_oldest(h->peers);

	while (p != NULL) {
		struct peer *next = htab_newer(h->peers, p);

		/* A peer being sent the save is the transfer's to judge. */
		if (now - p->last_ms > LOBBY_DROP_AFTER_MS &&
		    !lobby_xsend_active(h->xfer, &p->addr))
			drop_peer(h, p, LOBBY_LEFT_SILENT);
		p = next;
	}
	ev_timer_start(h->l->loop, t, 1000, on_sweep, h);
}

/* ---- the game side ---- */

/* start to every peer (save false) or to the marked ones (save true: those
 * that verified the save), three times; they are started from now on. */
static void start_game(struct lobby_host *h, bool save)
{
	struct lobby *l = h->l;
	struct lobby_msg m;
	struct lobby_event e = {.type = LOBBY_EV_START, .start = {save, false}};
	size_t n = 0, switching = 0;

	h->started = true;
	h->start_save = save;
	lobby_msg_init(&m, LOBBY_MSG_START);
	m.start.save = save;
	/* A world switch is per peer (lobby.py broadcast_start): those that
	 * were playing are told they leave that world; one that came during
	 * the switch gets an ordinary start; one the round did not reach keeps
	 * its mark for the round that serves it. */
	for (struct peer *p = first(h); p != NULL; p = next(h, p)) {
		p->sw_now = save && p->mark && p->sw;
		switching += p->sw_now;
		if (p->sw_now)
			p->sw = false;
	}
	if (switching == 0) {
		burst_to(h, &m, save);
	} else {
		struct lobby_msg ms = m;
		struct strbuf plain, sw;

		ms.start.has_switch = true;
		strbuf_init(&plain, LOBBY_MSG_MAX);
		strbuf_init(&sw, LOBBY_MSG_MAX);
		if (lobby_msg_encode(&m, &plain) == 0 && lobby_msg_encode(&ms, &sw) == 0) {
			for (int k = 0; k < LOBBY_CHAT_BURST; k++) {
				for (struct peer *p = first(h); p != NULL; p = next(h, p)) {
					const struct strbuf *b = p->sw_now ? &sw : &plain;

					if (p->mark)
						lobby_net_send_app(l, &p->addr,
								   (const uint8_t *)b->p, b->len);
				}
			}
		}
		strbuf_release(&plain);
		strbuf_release(&sw);
	}
	e.start.has_switch = switching > 0;
	for (struct peer *p = first(h); p != NULL; p = next(h, p)) {
		if (!save || p->mark) {
			p->started = true;
			n++;
		}
		p->mark = false;
	}
	lobby_ipc_emit(l, &e);
	lobby_ipc_state(l, "started", json_object_new_boolean(true));
	/* The leader's upload is out now (lobby.py broadcast_start). */
	if (h->relay != NULL && save)
		lobby_relay_distributed(h->relay);
	log_info("start save=%s peers=%zu players=%zu", save ? "true" : "false", n, players(h));
	/* The started flags ride the rosters (the heal would in 2 s); the
	 * game beside us saw the start, not a roster. */
	send_roster_packets(h);
}

/* ---- the save transfer ---- */

static void start_with_save(struct lobby_host *h, const char *path, bool sw);

/* The round is over: freed from the loop, not from inside its callback. */
static void on_reap(struct ev_timer *t, void *arg)
{
	struct lobby_host *h = arg;
	char pending[PATH_MAX];

	(void)t;
	if (!h->xfer_over)
		return;
	lobby_xsend_free(h->xfer);
	h->xfer = NULL;
	h->xfer_over = false;
	if (h->pending_save[0] != '\0') {
		bool sw = h->pending_switch;

		snprintf(pending, sizeof(pending), "%s", h->pending_save);
		h->pending_save[0] = '\0';
		h->pending_switch = false;
		/* The queued START GAME, as if pressed now (lobby.py re-runs the
		 * command). */
		start_with_save(h, pending, sw);
	}
}

static void round_over(struct lobby_host *h)
{
	h->xfer_over = true;
	ev_timer_start(h->l->loop, &h->reap, 0, on_reap, h);
}

static void xfer_aborted(struct lobby *l, const char *detail)
{
	l->ctr.rounds[LOBBY_ROUND_ABORTED]++;
	lobby_ipc_status(l, "failed", detail);
	round_over(host_of(l));
}

/* N of "receiving save N%", or -1. */
static int stage_pct(const char *s)
{
	static const char pre[] = "receiving save ";
	uint64_t v;
	size_t n = strlen(s);
	int d;

	if (n < sizeof(pre) || strncmp(s, pre, sizeof(pre) - 1) != 0 || s[n - 1] != '%')
		return -1;
	d = num_prefix_u64(s + sizeof(pre) - 1, n - sizeof(pre), 100, &v);
	return d > 0 && (size_t)d == n - sizeof(pre) ? (int)v : -1;
}

/* A target's progress as its roster stage, unless its own says more. */
static void xfer_stage(struct lobby *l, const struct addr *peer, const char *text)
{
	struct lobby_host *h = host_of(l);
	struct peer *p = peer_get(h, peer);
	int theirs;

	if (p == NULL || strcmp(p->stage, text) == 0)
		return;
	if (strncmp(p->stage, STAGE_LOADING_PRE, strlen(STAGE_LOADING_PRE)) == 0)
		return;
	theirs = stage_pct(p->stage);
	if (theirs >= 0 && theirs >= stage_pct(text))
		return;
	snprintf(p->stage, sizeof(p->stage), "%s", text);
	stage_changed(h);
}

/* A target verified the save: its stage says so (lobby.py on_fdone's
 * stage, merged as _merge_sender_stage does: a load under way stays). */
static void xfer_received(struct lobby_host *h, struct peer *p)
{
	if (strcmp(p->stage, STAGE_RECEIVED) == 0 ||
	    strncmp(p->stage, STAGE_LOADING_PRE, strlen(STAGE_LOADING_PRE)) == 0)
		return;
	snprintf(p->stage, sizeof(p->stage), STAGE_RECEIVED);
	stage_changed(h);
}

/*
 * Every target done, failed or dropped (lobby.py's resolution): any
 * failure and nobody starts; nobody done and there was nobody to share
 * with; else start save:true to those that verified.
 */
static void xfer_resolved(struct lobby *l)
{
	struct lobby_host *h = host_of(l);
	struct lobby_xsend *x = h->xfer;
	char detail[1024], *o = detail;
	size_t failed = 0, done = 0;

	o += snprintf(detail, sizeof(detail), "save transfer failed for ");
	for (size_t i = 0; i < lobby_xsend_targets(x); i++) {
		enum lobby_xsend_state st = lobby_xsend_target_state(x, i);
		struct peer *p = peer_get(h, lobby_xsend_target_addr(x, i));

		if (st == LOBBY_XSEND_FAILED) {
			if (o < detail + sizeof(detail) - 1)
				o += snprintf(o, (size_t)(detail + sizeof(detail) - o), "%s%s",
					      failed > 0 ? ", " : "",
					      lobby_xsend_target_name(x, i));
			failed++;
		} else if (st == LOBBY_XSEND_DONE && p != NULL) {
			/* The last fdone resolves the round before on_msg sees
			 * it: its stage first, then the start. */
			p->mark = true;
			xfer_received(h, p);
			done++;
		}
	}
	l->ctr.targets_done += done;
	l->ctr.targets_failed += failed;
	if (failed > 0) {
		l->ctr.rounds[LOBBY_ROUND_FAILED]++;
		if (o < detail + sizeof(detail) - 1)
			snprintf(o, (size_t)(detail + sizeof(detail) - o),
				 " -- press START GAME to retry");
		for (struct peer *p = first(h); p != NULL; p = next(h, p))
			p->mark = false;
		lobby_ipc_status(l, "failed", detail);
	} else if (done == 0 && !(h->relay != NULL && lobby_relay_leader_holds(h->relay))) {
		l->ctr.rounds[LOBBY_ROUND_NOBODY]++;
		lobby_ipc_status(l, "connected",
				 "no players to share with -- wait for a player to join, then "
				 "press START GAME");
	} else {
		/* The leader that uploaded this save has it (lobby.py: "the
		 * uploader has the save it sent"). */
		if (h->relay != NULL && lobby_relay_leader_holds(h->relay) && leader(h) != NULL)
			leader(h)->mark = true;
		l->ctr.rounds[LOBBY_ROUND_OK]++;
		log_info("xfer-resolved starting=%zu", done);
		start_game(h, true);
	}
	round_over(h);
}

static const struct lobby_xsend_ops xsend_ops = {xfer_aborted, xfer_stage, xfer_resolved};

/* The save's mods cannot be read here (lobby.py mod_list_note): said
 * beside us, and the welcomes and rosters say "unknown" from now on. */
static void mods_unknown_note(struct lobby_host *h, const char *path)
{
	char text[PATH_MAX + 256];

	h->mods_unknown = true;
	snprintf(text, sizeof(text),
		 "Could not read which mods %s needs; players who lack them will not be offered a "
		 "download. If their game refuses the save, they must install your mods by hand.",
		 lobby_role_basename(path));
	lobby_ipc_notice(h->l, text);
}

/* lobby.py begin_save_transfer: to every peer not already started in a
 * started session; on a relay to every one not started, the leader only
 * with include_leader (the resume: the leader receives the stored world
 * like anyone; an upload: the leader has it). */
static void share(struct lobby_host *h, const char *path, bool include_leader)
{
	struct lobby *l = h->l;
	struct lobby_xsend_target t[LOBBY_CAP];
	char err[PATH_MAX + 64], detail[PATH_MAX + 256];
	struct peer *lead = leader(h);
	size_t n = 0;

	if (path != h->last_shared)
		snprintf(h->last_shared, sizeof(h->last_shared), "%s", path);
	if (h->xfer != NULL) {
		log_info("xfer-start-ignored reason=\"a transfer is already running\"");
		return;
	}
	if (htab_count(h->peers) == 0) {
		lobby_ipc_status(l, "connected",
				 "no players to share with -- wait for a player to join, then "
				 "press START GAME");
		return;
	}
	for (struct peer *p = first(h); p != NULL; p = next(h, p)) {
		if (h->relay != NULL ? p->started || (p == lead && !include_leader)
				     : h->started && p->started)
			continue;
		t[n].addr = p->addr;
		t[n].rally = p->rally;
		t[n++].name = p->name;
	}
	if (n == 0 && h->relay != NULL && h->started) {
		/* The leader's periodic upload: everyone plays already, the
		 * copy is just kept (a start again made every panel flash). */
		log_info("relay-stored reason=\"nobody is waiting for it\"");
		lobby_relay_distributed(h->relay);
		return;
	}
	if (n == 0 && h->relay != NULL) {
		/* The leader alone, with the save it uploaded: it starts. */
		log_info("relay-stored reason=\"nobody else is waiting\" then=start");
		if (lead != NULL)
			lead->mark = true;
		start_game(h, true);
		return;
	}
	if (n == 0) {
		log_info("xfer-nothing-to-push reason=\"everyone already has this save\"");
		return;
	}
	h->xfer = lobby_xsend_start(l, path, t, n, &xsend_ops, h->bulk, err, sizeof(err));
	if (h->xfer == NULL) {
		snprintf(detail, sizeof(detail), "save transfer failed: %s", err);
		lobby_ipc_status(l, "failed", detail);
		return;
	}
	/* netpunch's "could not read the mod list" path, every round: the
	 * note here, a chat to everyone (fbegin says mods_unknown too). */
	mods_unknown_note(h, path);
	snprintf(detail, sizeof(detail),
		 "The host could not read which mods %s needs: you will not be offered a download. "
		 "If your game refuses the save, install the host's mods by hand.",
		 lobby_role_basename(path));
	send_chat(h, "MULTIPLAYER", detail);
}

static void begin_save_transfer(struct lobby_host *h, const char *path)
{
	share(h, path, false);
}

/* lobby.py _mod_check: false (and said, the chat once a minute per path)
 * when the save's .sav.lua shows it was made without our mod; a save
 * without one is shared anyway. */
static bool mod_check(struct lobby_host *h, const char *path)
{
	struct lobby *l = h->l;
	long long now = ev_now(l->loop);
	char label[PATH_MAX], text[2 * PATH_MAX + 256];
	struct refusal *r = NULL, *oldest = &h->refusals[0];
	size_t n;
	int has = lobby_role_save_has_mp_mod(path);

	if (has < 0) {
		log_info("xfer-mod-unknown save=\"%s\" reason=\"no .sav.lua beside it\"", path);
		return true;
	}
	if (has > 0)
		return true;
	snprintf(label, sizeof(label), "%s", lobby_role_basename(path));
	n = strlen(label);
	if (n >= 4 && strcasecmp(label + n - 4, ".sav") == 0)
		label[n - 4] = '\0';
	log_info("xfer-refused save=\"%s\" reason=\"made without the %s mod\"", path,
		 LOBBY_MOD_DISPLAY_NAME);
	snprintf(text, sizeof(text), "Not shared: '%s' does not have the %s mod enabled (see chat)",
		 label, LOBBY_MOD_DISPLAY_NAME);
	lobby_ipc_status(l, "connected", text);
	for (size_t i = 0; i < REFUSALS; i++) {
		if (h->refusals[i].used && strcmp(h->refusals[i].path, path) == 0)
			r = &h->refusals[i];
		if (!h->refusals[i].used ||
		    (oldest->used && h->refusals[i].told_ms < oldest->told_ms))
			oldest = &h->refusals[i];
	}
	if (r != NULL && now - r->told_ms <= REFUSAL_EVERY_MS)
		return false;
	if (r == NULL) {
		r = oldest;
		r->used = true;
		snprintf(r->path, sizeof(r->path), "%s", path);
	}
	r->told_ms = now;
	snprintf(
		text, sizeof(text),
		"'%s' was saved without the %s mod, so nothing would sync. Load it, enable the mod "
		"in its Mods panel on the load screen, save, and press START GAME again.",
		label, LOBBY_MOD_DISPLAY_NAME);
	lobby_ipc_notice(l, text);
	return false;
}

/*
 * lobby.py begin_world_switch: the host loaded another world while the
 * session runs, so everyone leaves theirs for it. A new nonce (the bridges
 * start a new cohort), the new file the one served from now on (before
 * anyone is unstarted, so the serve-again loop can only push this one),
 * every peer unstarted and marked, then the round to all of them.
 */
static void begin_world_switch(struct lobby_host *h, const char *path)
{
	struct lobby_event tl_ev = {.type = LOBBY_EV_TRANSPORT_LOBBY};
	char detail[PATH_MAX + 32];
	uint8_t tl[16];
	size_t playing = 0;

	randombytes_buf(tl, sizeof(tl));
	sodium_bin2hex(h->transport_lobby, sizeof(h->transport_lobby), tl, sizeof(tl));
	tl_ev.epoch = h->transport_lobby;
	lobby_ipc_emit(h->l, &tl_ev);
	snprintf(h->last_shared, sizeof(h->last_shared), "%s", path);
	for (struct peer *p = first(h); p != NULL; p = next(h, p)) {
		playing += p->started;
		p->started = false;
		p->sw = true;
	}
	log_info("world-switch save=\"%s\" peers=%zu playing=%zu", lobby_role_basename(path),
		 htab_count(h->peers), playing);
	/* U+2026, as netpunch writes it. */
	snprintf(detail, sizeof(detail), "Switching everyone to %s\xe2\x80\xa6",
		 lobby_role_basename(path));
	lobby_ipc_status(h->l, "connected", detail);
	send_roster_packets(h); /* the new nonce rides it */
	begin_save_transfer(h, h->last_shared);
}

/* START GAME with a save (the command, or the one queued behind a round);
 * with switch, in a started session with players, a world switch. */
static void start_with_save(struct lobby_host *h, const char *path, bool sw)
{
	if (!mod_check(h, path))
		return;
	if (sw && h->started && htab_count(h->peers) > 0)
		begin_world_switch(h, path);
	else
		begin_save_transfer(h, path);
}

/* After the start, players who have not got the save (they joined late,
 * or their round failed) get the last one again, every second. */
static void on_serve(struct ev_timer *t, void *arg)
{
	struct lobby_host *h = arg;
	struct stat st;
	size_t waiting = 0;

	ev_timer_start(h->l->loop, t, 1000, on_serve, h);
	if (h->relay != NULL) {
		/* A relay serves its stored world, while it is fresh, and not
		 * while the leader itself waits (it uploads the next). */
		const char *stored = lobby_relay_stored_path(h->relay);
		struct peer *lead = leader(h);

		if (!h->started || h->xfer != NULL || stored == NULL || lead == NULL ||
		    !lobby_relay_may_serve(h->relay, !lead->started))
			return;
		snprintf(h->last_shared, sizeof(h->last_shared), "%s", stored);
	}
	if (!h->started || h->xfer != NULL || h->last_shared[0] == '\0')
		return;
	for (struct peer *p = first(h); p != NULL; p = next(h, p))
		waiting += !p->started;
	if (waiting == 0 || stat(h->last_shared, &st) < 0 || !S_ISREG(st.st_mode))
		return;
	log_info("xfer-serve-again waiting=%zu", waiting);
	begin_save_transfer(h, h->last_shared);
}

/* lobby.py run_host's finally: bye to every peer, then "lobby closed";
 * the roster and the players in the state file stay as they were. */
static void quit(struct lobby *l)
{
	struct lobby_host *h = host_of(l);
	struct lobby_msg m;

	if (l->stopping)
		return;
	lobby_msg_init(&m, LOBBY_MSG_BYE);
	for (struct peer *p = first(h); p != NULL; p = next(h, p))
		lobby_net_send_msg(l, &p->addr, &m);
	lobby_ipc_status(l, "failed", "lobby closed");
	lobby_ipc_state(l, "state", json_object_new_string("failed"));
	lobby_exit(l, 0);
}

/* The code event; without a Steam identity the classic code is the only
 * one, so cross-play is on and cross_code is that code (lobby.py
 * emit_code). */
static void emit_code(struct lobby_host *h)
{
	struct lobby_event e = {.type = LOBBY_EV_CODE};

	e.code.code = h->code;
	e.code.steam = "";
	e.code.crossplay = true;
	e.code.cross_code = h->code;
	lobby_ipc_emit(h->l, &e);
}

/* Whether a joiner before p (in join order) holds company id. */
static bool taken_before(struct lobby_host *h, const struct peer *p, int id)
{
	for (struct peer *q = first(h); q != NULL && q != p; q = next(h, q)) {
		if (q->company == id)
			return true;
	}
	return false;
}

/*
 * lobby.py set_mode and assign_by_mode: coop puts everyone on company 1;
 * companies keeps the host on 1 and gives each joiner, in join order, its
 * own id when it is free, else the lowest free one (a relay has no company
 * of its own: its leader may keep 1). False when the mode was already that
 * one.
 */
static bool set_mode(struct lobby_host *h, const char *mode)
{
	bool companies = mode != NULL && strcmp(mode, "companies") == 0;
	int own = h->relay != NULL ? 0 : HOST_COMPANY;

	if (companies == h->companies_mode)
		return false;
	h->companies_mode = companies;
	h->company = HOST_COMPANY;
	for (struct peer *p = first(h); p != NULL; p = next(h, p)) {
		int id = companies ? p->company : HOST_COMPANY;

		if (companies && (id == own || taken_before(h, p, id))) {
			for (id = 1; id < LOBBY_CAP; id++) {
				if (id != own && !taken_before(h, p, id))
					break;
			}
		}
		if (p->company != id) {
			p->company = id;
			remember(h, p->name, id);
		}
	}
	return true;
}

/* The advertised save's mods (lobby.py advertise_mods): unknown here, so
 * the note, "unknown" to every peer and to the game beside us. */
static void advertise_mods(struct lobby_host *h, const char *path)
{
	struct lobby *l = h->l;
	struct lobby_event e = {.type = LOBBY_EV_MODS_MANIFEST};
	struct lobby_msg m;

	mods_unknown_note(h, path != NULL ? path : "");
	lobby_msg_init(&m, LOBBY_MSG_MODS_MANIFEST);
	m.mods_manifest = (struct lobby_msg_mods_manifest){NULL, true};
	for (struct peer *p = first(h); p != NULL; p = next(h, p))
		lobby_net_send_msg(l, &p->addr, &m);
	e.mods_manifest.mods = NULL;
	e.mods_manifest.has_unknown = true;
	e.mods_manifest.unknown = true;
	lobby_ipc_emit(l, &e);
}

static void command(struct lobby *l, const struct lobby_cmd *c)
{
	struct lobby_host *h = host_of(l);
	char clean[CHAT_CHARS * 4 + 1], fresh[sizeof(h->name)], stage[STAGE_CHARS * 4 + 1];
	const char *player;

	if (c->type == LOBBY_CMD_QUIT) {
		quit(l);
		return;
	}
	if (!h->ready)
		return; /* before the code is made, only quit */
	switch (c->type) {
	case LOBBY_CMD_CHAT:
		lobby_msg_clean(c->text != NULL ? c->text : "", CHAT_CHARS, clean, sizeof(clean));
		if (clean[0] != '\0')
			send_chat(h, h->name, clean);
		return;
	case LOBBY_CMD_NAME:
		h->name[0] = '\0';
		unique_name(h, c->name != NULL ? c->name : "", NULL, fresh, sizeof(fresh));
		snprintf(h->name, sizeof(h->name), "%s", fresh);
		/* The event (and the state file's you and host) if it changed. */
		roster_changed(h);
		return;
	case LOBBY_CMD_STAGE:
		lobby_msg_clean(c->text != NULL ? c->text : "", STAGE_CHARS, stage, sizeof(stage));
		if (strcmp(stage, h->stage) != 0) {
			memcpy(h->stage, stage, sizeof(h->stage));
			stage_changed(h);
		}
		return;
	case LOBBY_CMD_COMPANY:
		/* No player: the host's own. */
		player = c->company.player != NULL ? c->company.player : h->name;
		if (c->company.id < 1 || c->company.id > LOBBY_CAP)
			return;
		if (strcmp(player, h->name) == 0) {
			h->company = (int)c->company.id;
		} else {
			for (struct peer *p = first(h); p != NULL; p = next(h, p)) {
				if (strcmp(p->name, player) == 0) {
					p->company = (int)c->company.id;
					remember(h, p->name, p->company);
				}
			}
		}
		roster_changed(h);
		return;
	case LOBBY_CMD_MODE:
		/* The event only if a company moved (roster_changed's key). */
		if (set_mode(h, c->mode)) {
			log_info("mode mode=%s", mode_name(h));
			roster_changed(h);
		}
		return;
	case LOBBY_CMD_CROSSPLAY:
		/* No Steam here: the classic code is the only one, said again. */
		log_info("crossplay-ignored reason=\"no Steam networking: the classic code is the "
			 "only one\"");
		emit_code(h);
		return;
	case LOBBY_CMD_PUBLISH:
		lobby_rv_publish(l, c->on);
		return;
	case LOBBY_CMD_ADVERTISE_MODS:
		advertise_mods(h, c->save);
		return;
	case LOBBY_CMD_NOTE:
		lobby_role_note(l, c->text);
		return;
	case LOBBY_CMD_START:
		if (h->relay != NULL) {
			log_info("ipc-command-ignored cmd=start reason=\"on a relay the leader "
				 "starts\"");
			return;
		}
		if (h->xfer != NULL) {
			/* A save start waits for the round to end (a later one
			 * replaces it); one without a save is dropped. */
			if (c->start.save != NULL) {
				snprintf(h->pending_save, sizeof(h->pending_save), "%s",
					 c->start.save);
				h->pending_switch = c->start.has_switch;
			}
			log_info("xfer-start-%s reason=\"a save transfer is in progress\"",
				 c->start.save != NULL ? "queued" : "ignored");
			return;
		}
		if (c->start.save != NULL)
			start_with_save(h, c->start.save, c->start.has_switch);
		else
			start_game(h, false);
		return;
	default:
		log_debug("ipc-command-ignored cmd=%s", c->cmd);
		return;
	}
}

static void game_frame(struct lobby *l, const uint8_t *frame, size_t len)
{
	struct lobby_host *h = host_of(l);

	/* A relay runs no game: a bridge beside it is nobody's. */
	if (h->relay == NULL)
		frame_to_joiners(h, NULL, frame, len);
}

/* ---- start ---- */

static void observed(struct lobby *l, void *arg)
{
	struct lobby_host *h = arg;
	struct joincode c = *lobby_observe_profile(l);
	char err[128], detail[64];
	uint8_t key[SEAL_KEY_LEN], tl[16];
	struct lobby_event tl_ev = {.type = LOBBY_EV_TRANSPORT_LOBBY};
	int r;

	c.has_secret = true;
	memcpy(c.secret, l->secret, sizeof(c.secret));
	c.ts = (uint32_t)unix_s();
	r = joincode_encode(&c, l->cfg.has_password ? l->cfg.password : NULL, h->code,
			    sizeof(h->code), err, sizeof(err));
	if (r < 0) {
		log_err("code-fail error=\"%s\"", err);
		lobby_ipc_status(l, "failed", err);
		lobby_ipc_state(l, "state", json_object_new_string("failed"));
		lobby_exit(l, 1);
		return;
	}
	seal_derive_key(l->secret, l->cfg.has_password ? l->cfg.password : "", key);
	l->sealer = seal_new(key);
	sodium_memzero(key, sizeof(key));
	if (l->sealer == NULL) {
		log_err("sealer-fail");
		lobby_exit(l, 1);
		return;
	}
	randombytes_buf(tl, sizeof(tl));
	sodium_bin2hex(h->transport_lobby, sizeof(h->transport_lobby), tl, sizeof(tl));
	h->ready = true;

	/* Only the host prints CODE= on stdout. */
	printf("CODE=%s\n", h->code);
	fflush(stdout);
	/* lobby.py run_host's order: the nonce, the code, ready, then the
	 * first roster (just us), which makes the state "connected". */
	tl_ev.epoch = h->transport_lobby;
	lobby_ipc_emit(l, &tl_ev);
	emit_code(h);
	snprintf(detail, sizeof(detail), "lobby ready on %u", lobby_net_port(l->net));
	lobby_ipc_status(l, "connected", detail);
	emit_roster(h);
	log_info("code code=%s locked=%d", h->code, l->cfg.has_password);

	/* netsim impairs what the host sends from here on, as netpunch's
	 * run_host wraps its socket. */
	lobby_net_netsim_start(l);
	/* The dual TCP link, before the listener it shares. */
	lobby_dual_start(l, true);
	/* The bulk TCP listener on our UDP port's number (netpunch's). */
	if (!l->cfg.bulk_off)
		h->bulk = lobby_bulk_listen(l, lobby_net_port(l->net));
	/* A relay's port is open by construction: no knocks to poll for
	 * (lobby.py cmd_host: no rendezvous for --relay-only). */
	if (h->relay == NULL)
		lobby_rv_host_start(l);
	if (l->cfg.public_)
		lobby_rv_publish(l, true);
	ev_timer_start(l->loop, &h->heal, LOBBY_ROSTER_HEAL_MS, on_heal, h);
	ev_timer_start(l->loop, &h->sweep, 1000, on_sweep, h);
	ev_timer_start(l->loop, &h->serve, 1000, on_serve, h);
}

static bool advert(const struct lobby *l, struct lobby_advert *out)
{
	const struct lobby_host *h = host_of(l);

	if (h == NULL || h->code[0] == '\0')
		return false;
	out->code = h->code;
	out->players = htab_count(h->peers) + (h->relay != NULL ? 0 : 1);
	out->type = h->relay != NULL ? "relay" : h->dedicated ? "dedicated" : "host";
	return true;
}

static void host_free(struct lobby *l)
{
	struct lobby_host *h = host_of(l);

	ev_timer_stop(l->loop, &h->heal);
	ev_timer_stop(l->loop, &h->roster_soon);
	round_end(h);
	ev_timer_stop(l->loop, &h->logs);
	if (h->peerslog != NULL) {
		flush_own_logs(h, true);
		lobby_peerslog_close(h->peerslog);
	}
	ev_timer_stop(l->loop, &h->sweep);
	ev_timer_stop(l->loop, &h->serve);
	ev_timer_stop(l->loop, &h->reap);
	lobby_xsend_free(h->xfer);
	lobby_bulk_free(h->bulk);
	h->bulk = NULL; /* the relay's receiver, freed below, asks for it */
	for (struct peer *p = h->peers != NULL ? first(h) : NULL; p != NULL; p = next(h, p)) {
		free(p->links);
		free(p->linkv);
	}
	htab_free(h->peers);
	htab_free(h->rejects);
	free(h->last_key);
	lobby_relay_free(h->relay);
}

/* Before anything can fail: free stops them all. */
static void init_timers(struct lobby_host *h)
{
	ev_timer_init(&h->heal);
	ev_timer_init(&h->roster_soon);
	ev_timer_init(&h->round_slice);
	ev_timer_init(&h->logs);
	ev_timer_init(&h->sweep);
	ev_timer_init(&h->serve);
	ev_timer_init(&h->reap);
}

/* The session, a host's or a relay's: with keep, the code's secret comes
 * from relay_secret.bin (the same code after a restart). */
static int begin(struct lobby *l, bool keep)
{
	struct lobby_host *h = host_of(l);
	uint16_t port = l->cfg.local_port_set ? l->cfg.local_port : 29471;
	int r;

	h->l = l;
	randombytes_buf(h->alive_token, sizeof(h->alive_token));
	init_timers(h);
	h->peerslog = lobby_peerslog_open(l->cfg.io_dir[0] != '\0' ? l->cfg.io_dir : ".");
	if (h->peerslog == NULL)
		log_warn("peers-log-unusable file=%s", LOBBY_PEERS_LOG);
	else
		ev_timer_start(l->loop, &h->logs, LOBBY_LOG_FLUSH_MS, on_logs, h);
	h->peers = htab_new(LOBBY_CAP, sizeof(struct addr_key), sizeof(struct peer));
	h->rejects = htab_new(REJECT_TRACK, sizeof(struct addr_key), sizeof(long long));
	if (h->peers == NULL || h->rejects == NULL)
		return -ENOMEM;
	lobby_msg_clean(l->cfg.name, LOBBY_NAME_MAX, h->name, sizeof(h->name));
	if (h->name[0] == '\0')
		snprintf(h->name, sizeof(h->name), "player");
	h->company = HOST_COMPANY;
	h->companies_mode = l->cfg.companies;
	l->has_secret = true;
	if (!keep)
		randombytes_buf(l->secret, sizeof(l->secret));
	else if ((r = lobby_relay_secret(l->cfg.io_dir[0] != '\0' ? l->cfg.io_dir : ".",
					 l->secret)) < 0)
		return r == -EBADMSG ? -EBADMSG : -EIO;
	/* lobby.py cmd_host: "observing NAT" and the state "waiting" first. */
	lobby_ipc_state(l, "state", json_object_new_string("waiting"));
	return lobby_observe_open(l, port, true, "waiting", observed, h);
}

static int start(struct lobby *l, const struct joincode *code)
{
	struct lobby_host *h = host_of(l);

	(void)code;
	h->dedicated = l->cfg.dedicated;
	return begin(l, l->cfg.dedicated);
}

/* The relay lobby: its state files first (a corrupt one stops us here,
 * named), then the session with the kept secret. */
static int relay_start(struct lobby *l, const struct joincode *code)
{
	struct lobby_host *h = host_of(l);

	(void)code;
	h->l = l;
	init_timers(h);
	h->relay = lobby_relay_new(l);
	if (h->relay == NULL)
		return -EBADMSG;
	log_info("relay-only reason=\"no game here; the oldest player leads\"");
	return begin(l, true);
}

/* ---- what the relay may ask of the session (lobby_relay.h) ---- */

struct lobby_relay *lobby_host_relay(struct lobby *l)
{
	return l->role_data != NULL ? host_of(l)->relay : NULL;
}

const struct addr *lobby_host_leader(struct lobby *l, const char **name)
{
	struct peer *p = leader(host_of(l));

	if (name != NULL)
		*name = p != NULL ? p->name : NULL;
	return p != NULL ? &p->addr : NULL;
}

bool lobby_host_present(struct lobby *l, const char *name)
{
	return peer_named(host_of(l), name) != NULL;
}

void lobby_host_tell(struct lobby *l, const struct addr *to, const char *detail)
{
	struct lobby_msg m;

	lobby_msg_init(&m, LOBBY_MSG_STATUS);
	m.status.state = "connected";
	m.status.detail = detail;
	lobby_net_send_msg(l, to, &m);
}

void lobby_host_each(struct lobby *l,
		     void (*fn)(void *arg, const struct addr *a, const char *name, bool started),
		     void *arg)
{
	struct lobby_host *h = host_of(l);

	for (struct peer *p = first(h); p != NULL; p = next(h, p))
		fn(arg, &p->addr, p->name, p->started);
}

bool lobby_host_started(struct lobby *l)
{
	return host_of(l)->started;
}

struct lobby_bulk *lobby_host_bulk(struct lobby *l)
{
	struct lobby_host *h = host_of(l);

	return h != NULL ? h->bulk : NULL;
}

bool lobby_host_sharing(struct lobby *l)
{
	return host_of(l)->xfer != NULL;
}

void lobby_host_share(struct lobby *l, const char *path, bool include_leader)
{
	struct lobby_host *h = host_of(l);

	if (path != h->last_shared)
		snprintf(h->last_shared, sizeof(h->last_shared), "%s", path);
	share(h, h->last_shared, include_leader);
}

void lobby_host_start_all(struct lobby *l)
{
	start_game(host_of(l), false);
}

const struct lobby_role lobby_host_role = {
	.name = "host",
	.state_size = sizeof(struct lobby_host),
	.bind_as = NP1_ROLE_HOST,
	.start = start,
	.free = host_free,
	.on_ctl = on_ctl,
	.on_payload = on_payload,
	.on_msg = on_msg,
	.on_game = on_game,
	.on_envelope = on_envelope,
	.on_bad_seal = on_bad_seal,
	.command = command,
	.game_frame = game_frame,
	.quit = quit,
	.advert = advert,
};

/* The dedicated relay lobby: the host's session and hooks, its own start
 * and the leader's save chunks (lobby_relay.h). */
const struct lobby_role lobby_relay_role = {
	.name = "relay",
	.state_size = sizeof(struct lobby_host),
	.bind_as = NP1_ROLE_HOST,
	.start = relay_start,
	.free = host_free,
	.on_ctl = on_ctl,
	.on_payload = on_payload,
	.on_msg = on_msg,
	.on_chunk = on_chunk,
	.on_game = on_game,
	.on_envelope = on_envelope,
	.on_bad_seal = on_bad_seal,
	.command = command,
	.game_frame = game_frame,
	.quit = quit,
	.advert = advert,
};
