/*
 * The host's side of the lobby session (netpunch-wire.md §1.2, §7), the
 * role lobby_host_role.
 *
 * Observe (STUN + UPnP), make a code with a fresh 12-byte secret (locked
 * with --password), print CODE=..., answer every HELLO, and serve joiners:
 * join (version check, lobby full, names de-duplicated, a company as the
 * mode gives it), welcome, a roster to everyone on every change and every
 * 2 s, chat stamped and relayed three times, stage and company, peers
 * dropped after 10 s of silence, start without a save, bye on quit. Game
 * frames from the bridge go to every joiner; a joiner's frames are
 * delivered locally and forwarded to the others (star).
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
#include "lobby_xfer.h"
#include "log.h"
#include "num.h"
#include "seal.h"
#include "strbuf.h"

#define STAGE_CHARS  (80)
#define CHAT_CHARS   (500)
#define REJECT_TRACK (4096)
#define HOST_COMPANY (1)
/* Names whose company a companies-mode host remembers for their return. */
#define REMEMBER_MAX (2 * LOBBY_CAP)

struct peer {
	struct addr addr;
	char name[LOBBY_NAME_MAX * 4 + 1];
	long long last_ms;
	bool mesh;
	bool rally; /* its join offered rally's transfer extension */
	char profile[JOINCODE_MAX_TEXT];
	int company;
	char stage[STAGE_CHARS * 4 + 1];
	bool started;
	bool mark; /* the start being sent goes to it */
};

struct remembered {
	char name[LOBBY_NAME_MAX * 4 + 1];
	int company;
	unsigned long long seq; /* 0: a free slot */
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
	struct ev_timer heal, sweep, serve, reap;
	/* The save transfer: the round running, the one asked for meanwhile,
	 * the last save shared (late players get it). */
	struct lobby_xsend *xfer;
	struct lobby_bulk *bulk; /* the TCP listener (NULL: UDP only) */
	bool xfer_over;
	char pending_save[PATH_MAX];
	char last_shared[PATH_MAX];
	bool ready;
	uint64_t joins, rejects_sent;
	/* The roster's lists, rebuilt for every roster (the codec borrows). */
	const char *names[LOBBY_CAP + 1];
	struct lobby_msg_entry companies[LOBBY_CAP + 1], stages[LOBBY_CAP + 1];
	struct lobby_msg_entry profiles[LOBBY_CAP];
	size_t nnames;
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
	if (id == h->company)
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

/* Remembers name's company; the longest unused name makes room. */
static void remember(struct lobby_host *h, const char *name, int company)
{
	struct remembered *r = remembered_get(h, name);

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

/* ---- messages ---- */

/* The lists every roster carries, from the current peers. */
static void build_lists(struct lobby_host *h, struct lobby_msg_names *players,
			struct lobby_msg_dict *companies, struct lobby_msg_dict *stages)
{
	size_t nc = 0, ns = 0;

	h->nnames = 0;
	h->names[h->nnames++] = h->name;
	h->companies[nc++] = (struct lobby_msg_entry){h->name, NULL, h->company};
	if (h->stage[0] != '\0')
		h->stages[ns++] = (struct lobby_msg_entry){h->name, h->stage, 0};
	for (struct peer *p = first(h); p != NULL; p = next(h, p)) {
		h->names[h->nnames++] = p->name;
		h->companies[nc++] = (struct lobby_msg_entry){p->name, NULL, p->company};
		if (p->stage[0] != '\0')
			h->stages[ns++] = (struct lobby_msg_entry){p->name, p->stage, 0};
	}
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
		.host = h->name,
		.recovery = 0,
		.lobby = l->cfg.lobby_name,
		.relay = false,
		.mods = NULL,
		.mods_unknown = false,
	};
	lobby_net_send_msg(l, &p->addr, &m);
}

/* The roster for one peer (its started flag is its own). */
static void send_roster_to(struct lobby_host *h, struct peer *p)
{
	struct lobby *l = h->l;
	struct lobby_msg m;
	struct lobby_msg_roster *r = &m.roster;
	size_t np = 0;

	lobby_msg_init(&m, LOBBY_MSG_ROSTER);
	build_lists(h, &r->players, &r->companies, &r->stages);
	for (struct peer *q = first(h); q != NULL; q = next(h, q)) {
		if (q->profile[0] != '\0')
			h->profiles[np++] = (struct lobby_msg_entry){q->name, q->profile, 0};
	}
	r->version = l->cfg.protocol_version;
	r->transport_lobby = h->transport_lobby;
	r->recovery = 0;
	r->host = h->name;
	r->lobby = l->cfg.lobby_name;
	r->relay = false;
	r->mods = NULL;
	r->mods_unknown = false;
	r->stored_age = (struct lobby_msg_num){.present = true, .i = -1};
	r->stored_max = (struct lobby_msg_num){.present = true, .i = -1};
	r->letters.null = true;
	r->started = p->started;
	r->start_save = h->start_save;
	r->profiles = (struct lobby_msg_dict){false, np, h->profiles};
	r->links = (struct lobby_msg_links){false, 0, NULL};
	r->mode = mode_name(h);
	lobby_net_send_msg(l, &p->addr, &m);
}

/* The roster for the game beside us (lobby_out.jsonl) and the state file. */
static void roster_local(struct lobby_host *h)
{
	struct lobby *l = h->l;
	struct lobby_event e = {.type = LOBBY_EV_ROSTER_HOST};
	struct lobby_event_roster *r = &e.roster;
	struct json_object *arr = json_object_new_array();

	build_lists(h, &r->players, &r->companies, &r->stages);
	r->you = h->name;
	r->host = h->name;
	r->lobby = l->cfg.lobby_name;
	r->has_relay = true;
	r->relay = false;
	r->mode = mode_name(h);
	r->join_freeze = false;
	lobby_ipc_emit(l, &e);
	for (size_t i = 0; i < h->nnames; i++)
		json_object_array_add(arr, json_object_new_string(h->names[i]));
	lobby_ipc_state(l, "players", arr);
}

static void roster_changed(struct lobby_host *h)
{
	for (struct peer *p = first(h); p != NULL; p = next(h, p))
		send_roster_to(h, p);
	roster_local(h);
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
		log_info("reject peer=%s reason=version theirs=\"%s\"",
			 addr_str(from, addr, sizeof(addr)),
			 jm->version != NULL ? jm->version : "-");
		return;
	}
	if (p == NULL) {
		struct addr_key k;

		if (htab_count(h->peers) + 1 >= l->cfg.max_players) {
			send_reject(l, from, "lobby full", false);
			log_info("reject peer=%s reason=full", addr_str(from, addr, sizeof(addr)));
			return;
		}
		addr_to_key(from, &k);
		p = htab_insert(h->peers, &k, false, NULL);
		if (p == NULL) {
			send_reject(l, from, "lobby full", false);
			return;
		}
		p->addr = *from;
		p->company = 0;
		p->started = false;
		created = true;
		h->joins++;
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
	log_info("join peer=%s name=\"%s\" new=%d company=%d players=%zu",
		 addr_str(from, addr, sizeof(addr)), p->name, created, p->company,
		 htab_count(h->peers) + 1);
	send_welcome(h, p);
	roster_changed(h);
	lobby_rv_peer_seen(l, from);
	if (created && h->started) {
		struct lobby_msg st;

		/* A late player: the host's game is already running. */
		lobby_msg_init(&st, LOBBY_MSG_STATUS);
		st.status.state = "connected";
		st.status.detail = "game already started -- ask the host to press START GAME again";
		lobby_net_send_msg(l, &p->addr, &st);
	}
}

static void drop_peer(struct lobby_host *h, struct peer *p, const char *why)
{
	char a[ADDR_STRLEN];
	struct addr gone = p->addr;

	log_info("peer-gone peer=%s name=\"%s\" reason=%s", addr_str(&p->addr, a, sizeof(a)),
		 p->name, why);
	/* Out of the table first: the round may resolve and start the others
	 * now, and what it sends must not list the one who left. */
	htab_remove(h->peers, p);
	if (h->xfer != NULL)
		lobby_xsend_peer_gone(h->xfer, &gone);
	roster_changed(h);
}

static void on_msg(struct lobby *l, const struct addr *from, const struct lobby_msg *m, bool sealed)
{
	struct lobby_host *h = host_of(l);
	struct peer *p = peer_get(h, from);
	char clean[CHAT_CHARS * 4 + 1];

	(void)sealed;
	if (m->type == LOBBY_MSG_JOIN) {
		do_join(h, from, &m->join);
		return;
	}
	if (p == NULL)
		return; /* everything else needs a joined peer */
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
		drop_peer(h, p, "left");
		return;
	case LOBBY_MSG_STAGE:
		lobby_msg_clean(m->stage != NULL ? m->stage : "", STAGE_CHARS, p->stage,
				sizeof(p->stage));
		roster_changed(h);
		return;
	case LOBBY_MSG_FBEGIN_ACK:
	case LOBBY_MSG_FACK:
	case LOBBY_MSG_FDONE:
	case LOBBY_MSG_XSTAT:
		if (h->xfer != NULL)
			lobby_xsend_on_msg(h->xfer, from, m);
		return;
	case LOBBY_MSG_COMPANY:
		/* A joiner may set its own company only. */
		if (m->company.player != NULL && strcmp(m->company.player, p->name) == 0 &&
		    m->company.id >= 1 && m->company.id <= LOBBY_CAP) {
			p->company = (int)m->company.id;
			remember(h, p->name, p->company);
			roster_changed(h);
		}
		return;
	default:
		/* Mesh, log and transfer messages: later capabilities. */
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
	struct peer *p;

	/* In a sealed session nothing plain is accepted from joiners. */
	if (l->sealer != NULL && !sealed)
		return false;
	p = peer_get(host_of(l), from);
	if (p != NULL)
		p->last_ms = ev_now(l->loop);
	lobby_rv_peer_seen(l, from);
	return true;
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
		lobby_net_frame_send(h->l, &p->addr, (size_t)dlen);
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
	lobby_game_deliver(l, frame, len);
	/* A star joiner's frame goes on to every other joiner. */
	frame_to_joiners(h, p, frame, len);
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
	send_reject(l, from, "wrong password", true);
}

/* ---- timers ---- */

static void on_heal(struct ev_timer *t, void *arg)
{
	struct lobby_host *h = arg;

	for (struct peer *p = first(h); p != NULL; p = next(h, p))
		send_roster_to(h, p);
	ev_timer_start(h->l->loop, t, LOBBY_ROSTER_HEAL_MS, on_heal, h);
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
			drop_peer(h, p, "silent");
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
	size_t n = 0;

	h->started = true;
	h->start_save = save;
	lobby_msg_init(&m, LOBBY_MSG_START);
	m.start.save = save;
	burst_to(h, &m, save);
	for (struct peer *p = first(h); p != NULL; p = next(h, p)) {
		if (!save || p->mark) {
			p->started = true;
			n++;
		}
		p->mark = false;
	}
	lobby_ipc_emit(l, &e);
	lobby_ipc_state(l, "started", json_object_new_boolean(true));
	log_info("start save=%s peers=%zu players=%zu", save ? "true" : "false", n,
		 htab_count(h->peers) + 1);
	roster_changed(h);
}

/* ---- the save transfer ---- */

static void begin_save_transfer(struct lobby_host *h, const char *path);

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
		snprintf(pending, sizeof(pending), "%s", h->pending_save);
		h->pending_save[0] = '\0';
		begin_save_transfer(h, pending);
	}
}

static void round_over(struct lobby_host *h)
{
	h->xfer_over = true;
	ev_timer_start(h->l->loop, &h->reap, 0, on_reap, h);
}

static void xfer_aborted(struct lobby *l, const char *detail)
{
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
	if (strncmp(p->stage, "loading world", 13) == 0)
		return;
	theirs = stage_pct(p->stage);
	if (theirs >= 0 && theirs >= stage_pct(text))
		return;
	snprintf(p->stage, sizeof(p->stage), "%s", text);
	roster_changed(h);
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
			p->mark = true;
			snprintf(p->stage, sizeof(p->stage), "save received, loading");
			done++;
		}
	}
	if (failed > 0) {
		if (o < detail + sizeof(detail) - 1)
			snprintf(o, (size_t)(detail + sizeof(detail) - o),
				 " -- press START GAME to retry");
		for (struct peer *p = first(h); p != NULL; p = next(h, p))
			p->mark = false;
		lobby_ipc_status(l, "failed", detail);
	} else if (done == 0) {
		lobby_ipc_status(l, "connected",
				 "no players to share with -- wait for a player to join, then "
				 "press START GAME");
	} else {
		log_info("xfer-resolved starting=%zu", done);
		start_game(h, true);
	}
	round_over(h);
}

static const struct lobby_xsend_ops xsend_ops = {xfer_aborted, xfer_stage, xfer_resolved};

/* lobby.py begin_save_transfer: to every peer not already started in a
 * started session. */
static void begin_save_transfer(struct lobby_host *h, const char *path)
{
	struct lobby *l = h->l;
	struct lobby_xsend_target t[LOBBY_CAP];
	char err[PATH_MAX + 64], detail[PATH_MAX + 96];
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
		if (h->started && p->started)
			continue;
		t[n].addr = p->addr;
		t[n].rally = p->rally;
		t[n++].name = p->name;
	}
	if (n == 0) {
		log_info("xfer-nothing-to-push reason=\"everyone already has this save\"");
		return;
	}
	h->xfer = lobby_xsend_start(l, path, t, n, &xsend_ops, h->bulk, err, sizeof(err));
	if (h->xfer == NULL) {
		snprintf(detail, sizeof(detail), "save transfer failed: %s", err);
		lobby_ipc_status(l, "failed", detail);
	}
}

/* After the start, players who have not got the save (they joined late,
 * or their round failed) get the last one again, every second. */
static void on_serve(struct ev_timer *t, void *arg)
{
	struct lobby_host *h = arg;
	struct stat st;
	size_t waiting = 0;

	ev_timer_start(h->l->loop, t, 1000, on_serve, h);
	if (!h->started || h->xfer != NULL || h->last_shared[0] == '\0')
		return;
	for (struct peer *p = first(h); p != NULL; p = next(h, p))
		waiting += !p->started;
	if (waiting == 0 || stat(h->last_shared, &st) < 0 || !S_ISREG(st.st_mode))
		return;
	log_info("xfer-serve-again waiting=%zu", waiting);
	begin_save_transfer(h, h->last_shared);
}

static void quit(struct lobby *l)
{
	struct lobby_host *h = host_of(l);
	struct lobby_msg m;

	if (l->stopping)
		return;
	lobby_msg_init(&m, LOBBY_MSG_BYE);
	for (struct peer *p = first(h); p != NULL; p = next(h, p))
		lobby_net_send_msg(l, &p->addr, &m);
	lobby_ipc_status(l, "waiting", "lobby closed");
	lobby_exit(l, 0);
}

static void command(struct lobby *l, const struct lobby_cmd *c)
{
	struct lobby_host *h = host_of(l);
	char clean[CHAT_CHARS * 4 + 1], fresh[sizeof(h->name)];

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
		lobby_ipc_state(l, "you", json_object_new_string(h->name));
		roster_changed(h);
		return;
	case LOBBY_CMD_STAGE:
		lobby_msg_clean(c->text != NULL ? c->text : "", STAGE_CHARS, h->stage,
				sizeof(h->stage));
		roster_changed(h);
		return;
	case LOBBY_CMD_COMPANY:
		if (c->company.player == NULL || c->company.id < 1 || c->company.id > LOBBY_CAP)
			return;
		if (strcmp(c->company.player, h->name) == 0) {
			h->company = (int)c->company.id;
		} else {
			for (struct peer *p = first(h); p != NULL; p = next(h, p)) {
				if (strcmp(p->name, c->company.player) == 0) {
					p->company = (int)c->company.id;
					remember(h, p->name, p->company);
				}
			}
		}
		roster_changed(h);
		return;
	case LOBBY_CMD_PUBLISH:
		lobby_rv_publish(l, c->on);
		return;
	case LOBBY_CMD_START:
		if (h->xfer != NULL) {
			/* A save start waits for the round to end (a later one
			 * replaces it); one without a save is dropped. */
			if (c->start.save != NULL)
				snprintf(h->pending_save, sizeof(h->pending_save), "%s",
					 c->start.save);
			log_info("xfer-start-%s reason=\"a save transfer is in progress\"",
				 c->start.save != NULL ? "queued" : "ignored");
			return;
		}
		if (c->start.save != NULL)
			begin_save_transfer(h, c->start.save);
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
	frame_to_joiners(host_of(l), NULL, frame, len);
}

/* ---- start ---- */

static void observed(struct lobby *l, void *arg)
{
	struct lobby_host *h = arg;
	struct joincode c = *lobby_observe_profile(l);
	char err[128], detail[64];
	uint8_t key[SEAL_KEY_LEN], tl[16];
	struct lobby_event code_ev = {.type = LOBBY_EV_CODE},
			   tl_ev = {.type = LOBBY_EV_TRANSPORT_LOBBY};
	int r;

	c.has_secret = true;
	memcpy(c.secret, l->secret, sizeof(c.secret));
	c.ts = (uint32_t)unix_s();
	r = joincode_encode(&c, l->cfg.has_password ? l->cfg.password : NULL, h->code,
			    sizeof(h->code), err, sizeof(err));
	if (r < 0) {
		log_err("code-fail error=\"%s\"", err);
		lobby_ipc_status(l, "failed", err);
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
	code_ev.code.code = h->code;
	lobby_ipc_emit(l, &code_ev);
	tl_ev.epoch = h->transport_lobby;
	lobby_ipc_emit(l, &tl_ev);
	lobby_ipc_state(l, "code", json_object_new_string(h->code));
	lobby_ipc_state(l, "you", json_object_new_string(h->name));
	lobby_ipc_state(l, "host", json_object_new_string(h->name));
	lobby_ipc_state(l, "lobby", json_object_new_string(l->cfg.lobby_name));
	lobby_ipc_state(l, "mode", json_object_new_string(mode_name(h)));
	lobby_ipc_state(l, "started", json_object_new_boolean(false));
	roster_local(h);
	snprintf(detail, sizeof(detail), "lobby ready on %u", lobby_net_port(l->net));
	lobby_ipc_status(l, "waiting", detail);
	log_info("code code=%s locked=%d", h->code, l->cfg.has_password);

	/* netsim impairs what the host sends from here on, as netpunch's
	 * run_host wraps its socket. */
	lobby_net_netsim_start(l);
	/* The bulk TCP listener on our UDP port's number (netpunch's). */
	if (!l->cfg.bulk_off)
		h->bulk = lobby_bulk_listen(l, lobby_net_port(l->net));
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
	out->players = htab_count(h->peers) + 1;
	out->type = "host";
	return true;
}

static void host_free(struct lobby *l)
{
	struct lobby_host *h = host_of(l);

	ev_timer_stop(l->loop, &h->heal);
	ev_timer_stop(l->loop, &h->sweep);
	ev_timer_stop(l->loop, &h->serve);
	ev_timer_stop(l->loop, &h->reap);
	lobby_xsend_free(h->xfer);
	lobby_bulk_free(h->bulk);
	htab_free(h->peers);
	htab_free(h->rejects);
}

static int start(struct lobby *l, const struct joincode *code)
{
	struct lobby_host *h = host_of(l);
	uint16_t port = l->cfg.local_port_set ? l->cfg.local_port : 29471;

	(void)code;
	h->l = l;
	ev_timer_init(&h->heal);
	ev_timer_init(&h->sweep);
	ev_timer_init(&h->serve);
	ev_timer_init(&h->reap);
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
	randombytes_buf(l->secret, sizeof(l->secret));
	return lobby_observe_open(l, port, true, "waiting", observed, h);
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
	.on_bad_seal = on_bad_seal,
	.command = command,
	.game_frame = game_frame,
	.quit = quit,
	.advert = advert,
};
