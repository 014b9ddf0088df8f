/*
 * The host's side of the lobby session (netpunch-wire.md §1.2, §7).
 *
 * Observe (STUN + UPnP), make a code with a fresh 12-byte secret (locked
 * with --password), print CODE=..., answer every HELLO, and serve joiners:
 * join (version check, lobby full, names de-duplicated), welcome, a roster
 * to everyone on every change and every 2 s, chat stamped and relayed three
 * times, stage and company, peers dropped after 10 s of silence, start
 * without a save, bye on quit. Game frames from the bridge go to every
 * joiner; a joiner's frames are delivered locally and forwarded to the
 * others (star).
 */
#include <errno.h>
#include <json-c/json.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "frame.h"
#include "htab.h"
#include "lobby.h"
#include "log.h"
#include "pyjson.h"
#include "seal.h"
#include "strbuf.h"

#define STAGE_CHARS  (80)
#define CHAT_CHARS   (500)
#define REJECT_TRACK (4096)
#define HOST_COMPANY (1)

struct peer {
	struct addr addr;
	char name[LOBBY_NAME_MAX * 4 + 1];
	long long last_ms;
	bool mesh;
	char profile[JOINCODE_MAX_TEXT];
	int company;
	char stage[STAGE_CHARS * 4 + 1];
	bool started;
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
	char mode[16];
	struct ev_timer heal, sweep;
	bool ready;
	uint64_t joins, rejects_sent;
};

static long long unix_s(void)
{
	return (long long)time(NULL);
}

/* ---- peers ---- */

static struct peer *peer_get(struct lobby_host *h, const struct addr *a)
{
	struct addr_key k;

	addr_to_key(a, &k);
	return htab_get(h->peers, &k);
}

static bool name_taken(struct lobby_host *h, const char *name, const struct peer *except)
{
	if (strcmp(name, h->name) == 0)
		return true;
	for (struct peer *p = htab_oldest(h->peers); p != NULL; p = htab_newer(h->peers, p)) {
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

static int free_company(struct lobby_host *h)
{
	for (int id = 1; id <= LOBBY_CAP; id++) {
		bool used = id == h->company;

		for (struct peer *p = htab_oldest(h->peers); p != NULL && !used;
		     p = htab_newer(h->peers, p))
			used = p->company == id;
		if (!used)
			return id;
	}
	return LOBBY_CAP;
}

/* Names, sorted as Python sorts strings (code points = UTF-8 bytes). */
static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static size_t sorted_names(struct lobby_host *h, const char **out)
{
	size_t n = 0;

	out[n++] = h->name;
	for (struct peer *p = htab_oldest(h->peers); p != NULL; p = htab_newer(h->peers, p))
		out[n++] = p->name;
	qsort(out, n, sizeof(*out), cmp_str);
	return n;
}

/* ---- messages ---- */

static void put_players(struct lobby_host *h, struct pyjson *j)
{
	const char *names[LOBBY_CAP + 1];
	size_t n = sorted_names(h, names);

	pyjson_arr_begin(j);
	for (size_t i = 0; i < n; i++)
		pyjson_cstr(j, names[i]);
	pyjson_arr_end(j);
}

static void put_companies(struct lobby_host *h, struct pyjson *j)
{
	pyjson_obj_begin(j);
	pyjson_key(j, h->name);
	pyjson_int(j, h->company);
	for (struct peer *p = htab_oldest(h->peers); p != NULL; p = htab_newer(h->peers, p)) {
		pyjson_key(j, p->name);
		pyjson_int(j, p->company);
	}
	pyjson_obj_end(j);
}

static void put_stages(struct lobby_host *h, struct pyjson *j)
{
	pyjson_obj_begin(j);
	if (h->stage[0] != '\0') {
		pyjson_key(j, h->name);
		pyjson_cstr(j, h->stage);
	}
	for (struct peer *p = htab_oldest(h->peers); p != NULL; p = htab_newer(h->peers, p)) {
		if (p->stage[0] != '\0') {
			pyjson_key(j, p->name);
			pyjson_cstr(j, p->stage);
		}
	}
	pyjson_obj_end(j);
}

static void send_welcome(struct lobby_host *h, struct peer *p)
{
	struct lobby *l = h->l;
	struct strbuf b;
	struct pyjson j;

	lobby_msg_begin(&j, &b, "welcome");
	pyjson_key(&j, "version");
	pyjson_cstr(&j, l->cfg.protocol_version);
	pyjson_key(&j, "transport_lobby");
	pyjson_cstr(&j, h->transport_lobby);
	pyjson_key(&j, "you");
	pyjson_cstr(&j, p->name);
	pyjson_key(&j, "host");
	pyjson_cstr(&j, h->name);
	pyjson_key(&j, "recovery");
	pyjson_int(&j, 0);
	pyjson_key(&j, "lobby");
	pyjson_cstr(&j, l->cfg.lobby_name);
	pyjson_key(&j, "relay");
	pyjson_bool(&j, false);
	pyjson_key(&j, "mods");
	pyjson_null(&j);
	pyjson_key(&j, "mods_unknown");
	pyjson_bool(&j, false);
	lobby_msg_end(&j);
	lobby_msg_send(l, &p->addr, &b);
	strbuf_release(&b);
}

static void send_roster_to(struct lobby_host *h, struct peer *p)
{
	struct lobby *l = h->l;
	struct strbuf b;
	struct pyjson j;

	lobby_msg_begin(&j, &b, "roster");
	pyjson_key(&j, "version");
	pyjson_cstr(&j, l->cfg.protocol_version);
	pyjson_key(&j, "transport_lobby");
	pyjson_cstr(&j, h->transport_lobby);
	pyjson_key(&j, "players");
	put_players(h, &j);
	pyjson_key(&j, "recovery");
	pyjson_int(&j, 0);
	pyjson_key(&j, "host");
	pyjson_cstr(&j, h->name);
	pyjson_key(&j, "lobby");
	pyjson_cstr(&j, l->cfg.lobby_name);
	pyjson_key(&j, "relay");
	pyjson_bool(&j, false);
	pyjson_key(&j, "mods");
	pyjson_null(&j);
	pyjson_key(&j, "mods_unknown");
	pyjson_bool(&j, false);
	pyjson_key(&j, "stored_age");
	pyjson_int(&j, -1);
	pyjson_key(&j, "stored_max");
	pyjson_int(&j, -1);
	pyjson_key(&j, "letters");
	pyjson_null(&j);
	pyjson_key(&j, "started");
	pyjson_bool(&j, p->started);
	pyjson_key(&j, "start_save");
	pyjson_bool(&j, h->start_save);
	pyjson_key(&j, "profiles");
	pyjson_obj_begin(&j);
	for (struct peer *q = htab_oldest(h->peers); q != NULL; q = htab_newer(h->peers, q)) {
		if (q->profile[0] != '\0') {
			pyjson_key(&j, q->name);
			pyjson_cstr(&j, q->profile);
		}
	}
	pyjson_obj_end(&j);
	pyjson_key(&j, "links");
	pyjson_obj_begin(&j);
	pyjson_obj_end(&j);
	pyjson_key(&j, "companies");
	put_companies(h, &j);
	pyjson_key(&j, "stages");
	put_stages(h, &j);
	pyjson_key(&j, "mode");
	pyjson_cstr(&j, h->mode);
	lobby_msg_end(&j);
	lobby_msg_send(l, &p->addr, &b);
	strbuf_release(&b);
}

/* The roster for the game beside us (lobby_out.jsonl) and the state file. */
static void roster_local(struct lobby_host *h)
{
	struct lobby *l = h->l;
	struct strbuf b;
	struct pyjson j;
	const char *names[LOBBY_CAP + 1];
	size_t n = sorted_names(h, names);
	struct json_object *arr = json_object_new_array();

	strbuf_init(&b, 64 * 1024);
	pyjson_init(&j, &b);
	pyjson_obj_begin(&j);
	pyjson_key(&j, "type");
	pyjson_cstr(&j, "roster");
	pyjson_key(&j, "players");
	put_players(h, &j);
	pyjson_key(&j, "you");
	pyjson_cstr(&j, h->name);
	pyjson_key(&j, "host");
	pyjson_cstr(&j, h->name);
	pyjson_key(&j, "lobby");
	pyjson_cstr(&j, l->cfg.lobby_name);
	pyjson_key(&j, "relay");
	pyjson_bool(&j, false);
	pyjson_key(&j, "companies");
	put_companies(h, &j);
	pyjson_key(&j, "stages");
	put_stages(h, &j);
	pyjson_key(&j, "mode");
	pyjson_cstr(&j, h->mode);
	pyjson_key(&j, "join_freeze");
	pyjson_bool(&j, false);
	pyjson_obj_end(&j);
	lobby_ipc_event(l, &b);
	strbuf_release(&b);
	for (size_t i = 0; i < n; i++)
		json_object_array_add(arr, json_object_new_string(names[i]));
	lobby_ipc_state(l, "players", arr);
}

static void roster_changed(struct lobby_host *h)
{
	for (struct peer *p = htab_oldest(h->peers); p != NULL; p = htab_newer(h->peers, p))
		send_roster_to(h, p);
	roster_local(h);
}

/* Chat and start go three times; receivers de-duplicate chat by cid. */
static void send_chat(struct lobby_host *h, const char *from, const char *text)
{
	struct lobby *l = h->l;
	long long cid = ++h->chat_cid, ts = unix_s();
	struct strbuf b;
	struct pyjson j;

	lobby_msg_begin(&j, &b, "chat");
	pyjson_key(&j, "from");
	pyjson_cstr(&j, from);
	pyjson_key(&j, "text");
	pyjson_cstr(&j, text);
	pyjson_key(&j, "ts");
	pyjson_int(&j, ts);
	pyjson_key(&j, "cid");
	pyjson_int(&j, cid);
	lobby_msg_end(&j);
	for (int k = 0; k < CHAT_BURST; k++) {
		for (struct peer *p = htab_oldest(h->peers); p != NULL; p = htab_newer(h->peers, p))
			lobby_msg_send(l, &p->addr, &b);
	}
	strbuf_release(&b);
	/* And the game beside us. */
	strbuf_init(&b, 8192);
	pyjson_init(&j, &b);
	pyjson_obj_begin(&j);
	pyjson_key(&j, "type");
	pyjson_cstr(&j, "chat");
	pyjson_key(&j, "from");
	pyjson_cstr(&j, from);
	pyjson_key(&j, "text");
	pyjson_cstr(&j, text);
	pyjson_key(&j, "ts");
	pyjson_int(&j, ts);
	pyjson_obj_end(&j);
	lobby_ipc_event(l, &b);
	strbuf_release(&b);
	log_info("chat from=\"%s\" cid=%lld", from, cid);
}

static void send_simple(struct lobby *l, const struct addr *to, const char *t)
{
	struct strbuf b;
	struct pyjson j;

	lobby_msg_begin(&j, &b, t);
	lobby_msg_end(&j);
	lobby_msg_send(l, to, &b);
	strbuf_release(&b);
}

static void send_reject(struct lobby *l, const struct addr *to, const char *reason, bool plain)
{
	struct strbuf b;
	struct pyjson j;

	lobby_msg_begin(&j, &b, "reject");
	pyjson_key(&j, "reason");
	pyjson_cstr(&j, reason);
	lobby_msg_end(&j);
	if (plain)
		lobby_net_send_plain(l->net, to, (const uint8_t *)b.p, b.len);
	else
		lobby_msg_send(l, to, &b);
	strbuf_release(&b);
}

/* ---- requests ---- */

static void do_join(struct lobby_host *h, const struct addr *from, struct json_object *o)
{
	struct lobby *l = h->l;
	const char *version = lobby_msg_str(o, "version"), *name = lobby_msg_str(o, "name");
	const char *profile = lobby_msg_str(o, "profile");
	struct peer *p = peer_get(h, from);
	char addr[ADDR_STRLEN];
	bool created = false;

	if (version == NULL || strcmp(version, l->cfg.protocol_version) != 0) {
		char reason[512];

		snprintf(reason, sizeof(reason),
			 "Multiplayer version mismatch: you have %s; the host has %s. Install the "
			 "same multiplayer version on both sides.",
			 version != NULL ? version : "unknown (older build)",
			 l->cfg.protocol_version);
		send_reject(l, from, reason, false);
		log_info("reject peer=%s reason=version theirs=\"%s\"",
			 addr_str(from, addr, sizeof(addr)), version != NULL ? version : "-");
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
		p->company = free_company(h);
		p->started = false;
		created = true;
		h->joins++;
	}
	p->last_ms = ev_now(l->loop);
	if (created || name == NULL || strcmp(name, p->name) != 0) {
		char fresh[sizeof(p->name)];

		unique_name(h, name != NULL ? name : "", p, fresh, sizeof(fresh));
		snprintf(p->name, sizeof(p->name), "%s", fresh);
	}
	p->mesh = lobby_msg_bool(o, "mesh", false);
	if (profile != NULL)
		snprintf(p->profile, sizeof(p->profile), "%s", profile);
	log_info("join peer=%s name=\"%s\" new=%d players=%zu", addr_str(from, addr, sizeof(addr)),
		 p->name, created, htab_count(h->peers) + 1);
	send_welcome(h, p);
	roster_changed(h);
	lobby_rv_peer_seen(l, from);
}

static void drop_peer(struct lobby_host *h, struct peer *p, const char *why)
{
	char a[ADDR_STRLEN];

	log_info("peer-gone peer=%s name=\"%s\" reason=%s", addr_str(&p->addr, a, sizeof(a)),
		 p->name, why);
	htab_remove(h->peers, p);
	roster_changed(h);
}

static void on_message(struct lobby_host *h, struct peer *p, const struct addr *from,
		       struct json_object *o, const char *t)
{
	struct lobby *l = h->l;

	if (strcmp(t, "join") == 0) {
		do_join(h, from, o);
		return;
	}
	if (p == NULL)
		return; /* everything else needs a joined peer */
	if (strcmp(t, "ping") == 0) {
		/* last_ms is refreshed by every authenticated frame */
	} else if (strcmp(t, "chat") == 0) {
		const char *text = lobby_msg_str(o, "text");
		char clean[CHAT_CHARS * 4 + 1];

		if (text == NULL)
			return;
		lobby_msg_clean(text, CHAT_CHARS, clean, sizeof(clean));
		if (clean[0] != '\0')
			send_chat(h, p->name, clean);
	} else if (strcmp(t, "leave") == 0) {
		drop_peer(h, p, "left");
	} else if (strcmp(t, "stage") == 0) {
		const char *text = lobby_msg_str(o, "text");

		lobby_msg_clean(text != NULL ? text : "", STAGE_CHARS, p->stage, sizeof(p->stage));
		roster_changed(h);
	} else if (strcmp(t, "company") == 0) {
		const char *who = lobby_msg_str(o, "player");
		long long id = lobby_msg_int(o, "id", 0);

		/* A joiner may set its own company only. */
		if (who != NULL && strcmp(who, p->name) == 0 && id >= 1 && id <= LOBBY_CAP) {
			p->company = (int)id;
			roster_changed(h);
		}
	}
	(void)l;
}

/* ---- the socket's handlers ---- */

static void on_frame(struct lobby *l, const struct addr *from, uint8_t type, const uint8_t *payload,
		     size_t len)
{
	struct lobby_host *h = l->host;
	struct peer *p;

	switch (type) {
	case NP1_HELLO:
		/* Answer every HELLO with its own token: that is the punch. */
		lobby_net_send_ctl(l->net, from, NP1_ACK, payload, len);
		return;
	case NP1_KEEPALIVE:
		p = peer_get(h, from);
		if (p != NULL)
			p->last_ms = ev_now(l->loop);
		return;
	default:
		return; /* ACK, CONNECTED, KEYX: nothing for a host to do */
	}
}

static void on_app(struct lobby *l, const struct addr *from, const uint8_t *app, size_t len,
		   bool sealed)
{
	struct lobby_host *h = l->host;
	struct peer *p = peer_get(h, from);
	struct json_object *o;
	const char *t;

	/* In a sealed session nothing plain is accepted from joiners. */
	if (l->sealer != NULL && !sealed)
		return;
	if (p != NULL)
		p->last_ms = ev_now(l->loop);
	lobby_rv_peer_seen(l, from);
	if (len == 0)
		return;
	if (app[0] == 'g') {
		if (p == NULL || len > GAME_FRAME_MAX + 1)
			return;
		lobby_game_deliver(l, app + 1, len - 1);
		/* A star joiner's frame goes on to every other joiner. */
		for (struct peer *q = htab_oldest(h->peers); q != NULL;
		     q = htab_newer(h->peers, q)) {
			if (q != p)
				lobby_net_send_app(l, &q->addr, app, len);
		}
		return;
	}
	o = lobby_msg_parse(app, len, &t);
	if (o == NULL)
		return;
	on_message(h, p, from, o, t);
	json_object_put(o);
}

static void on_bad_seal(struct lobby *l, const struct addr *from, int why)
{
	struct lobby_host *h = l->host;
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
		*last = now - REJECT_EVERY_MS;
	}
	if (now - *last < REJECT_EVERY_MS)
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

	for (struct peer *p = htab_oldest(h->peers); p != NULL; p = htab_newer(h->peers, p))
		send_roster_to(h, p);
	ev_timer_start(h->l->loop, t, ROSTER_HEAL_MS, on_heal, h);
}

static void on_sweep(struct ev_timer *t, void *arg)
{
	struct lobby_host *h = arg;
	long long now = ev_now(h->l->loop);
	struct peer *p = htab_oldest(h->peers);

	while (p != NULL) {
		struct peer *next = htab_newer(h->peers, p);

		if (now - p->last_ms > DROP_AFTER_MS)
			drop_peer(h, p, "silent");
		p = next;
	}
	ev_timer_start(h->l->loop, t, 1000, on_sweep, h);
}

/* ---- commands from the game (lobby_in.jsonl) ---- */

static void start_game(struct lobby_host *h)
{
	struct lobby *l = h->l;
	struct strbuf b;
	struct pyjson j;

	h->started = true;
	h->start_save = false;
	lobby_msg_begin(&j, &b, "start");
	pyjson_key(&j, "save");
	pyjson_bool(&j, false);
	lobby_msg_end(&j);
	for (int k = 0; k < CHAT_BURST; k++) {
		for (struct peer *p = htab_oldest(h->peers); p != NULL; p = htab_newer(h->peers, p))
			lobby_msg_send(l, &p->addr, &b);
	}
	strbuf_release(&b);
	for (struct peer *p = htab_oldest(h->peers); p != NULL; p = htab_newer(h->peers, p))
		p->started = true;
	strbuf_init(&b, 256);
	pyjson_init(&j, &b);
	pyjson_obj_begin(&j);
	pyjson_key(&j, "type");
	pyjson_cstr(&j, "start");
	pyjson_key(&j, "save");
	pyjson_bool(&j, false);
	pyjson_obj_end(&j);
	lobby_ipc_event(l, &b);
	strbuf_release(&b);
	lobby_ipc_state(l, "started", json_object_new_boolean(true));
	log_info("start save=false players=%zu", htab_count(h->peers) + 1);
}

void lobby_host_command(struct lobby *l, const char *cmd, struct json_object *o)
{
	struct lobby_host *h = l->host;

	if (strcmp(cmd, "quit") == 0) {
		lobby_host_quit(l);
	} else if (!h->ready) {
		return; /* before the code is made, only quit */
	} else if (strcmp(cmd, "chat") == 0) {
		const char *text = lobby_msg_str(o, "text");
		char clean[CHAT_CHARS * 4 + 1];

		lobby_msg_clean(text != NULL ? text : "", CHAT_CHARS, clean, sizeof(clean));
		if (clean[0] != '\0')
			send_chat(h, h->name, clean);
	} else if (strcmp(cmd, "name") == 0) {
		const char *name = lobby_msg_str(o, "name");
		char fresh[sizeof(h->name)];

		h->name[0] = '\0';
		unique_name(h, name != NULL ? name : "", NULL, fresh, sizeof(fresh));
		snprintf(h->name, sizeof(h->name), "%s", fresh);
		lobby_ipc_state(l, "you", json_object_new_string(h->name));
		roster_changed(h);
	} else if (strcmp(cmd, "stage") == 0) {
		const char *text = lobby_msg_str(o, "text");

		lobby_msg_clean(text != NULL ? text : "", STAGE_CHARS, h->stage, sizeof(h->stage));
		roster_changed(h);
	} else if (strcmp(cmd, "company") == 0) {
		const char *who = lobby_msg_str(o, "player");
		long long id = lobby_msg_int(o, "id", 0);

		if (who == NULL || id < 1 || id > LOBBY_CAP)
			return;
		if (strcmp(who, h->name) == 0) {
			h->company = (int)id;
		} else {
			for (struct peer *p = htab_oldest(h->peers); p != NULL;
			     p = htab_newer(h->peers, p)) {
				if (strcmp(p->name, who) == 0)
					p->company = (int)id;
			}
		}
		roster_changed(h);
	} else if (strcmp(cmd, "publish") == 0) {
		lobby_rv_publish(l, lobby_msg_bool(o, "on", false));
	} else if (strcmp(cmd, "start") == 0) {
		if (lobby_msg_str(o, "save") != NULL) {
			/* XXX: the save transfer is the next capability. */
			lobby_ipc_status(l, "failed",
					 "starting with a save needs the save transfer, which this "
					 "lobby does not have yet");
			return;
		}
		start_game(h);
	} else {
		log_debug("ipc-command-ignored cmd=%s", cmd);
	}
}

void lobby_host_game_frame(struct lobby *l, const uint8_t *frame, size_t len)
{
	struct lobby_host *h = l->host;

	for (struct peer *p = htab_oldest(h->peers); p != NULL; p = htab_newer(h->peers, p))
		lobby_net_send_app(l, &p->addr, frame, len);
}

void lobby_host_quit(struct lobby *l)
{
	struct lobby_host *h = l->host;

	if (l->stopping)
		return;
	for (struct peer *p = htab_oldest(h->peers); p != NULL; p = htab_newer(h->peers, p))
		send_simple(l, &p->addr, "bye");
	lobby_ipc_status(l, "waiting", "lobby closed");
	lobby_exit(l, 0);
}

/* ---- start ---- */

static void observed(struct lobby *l, void *arg)
{
	struct lobby_host *h = arg;
	struct joincode c = *lobby_observe_profile(l);
	char err[128], detail[64];
	uint8_t key[SEAL_KEY_LEN], tl[16];
	struct strbuf b;
	struct pyjson j;
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
	strbuf_init(&b, 1024);
	pyjson_init(&j, &b);
	pyjson_obj_begin(&j);
	pyjson_key(&j, "type");
	pyjson_cstr(&j, "code");
	pyjson_key(&j, "code");
	pyjson_cstr(&j, h->code);
	pyjson_key(&j, "steam");
	pyjson_cstr(&j, "");
	pyjson_key(&j, "crossplay");
	pyjson_bool(&j, false);
	pyjson_key(&j, "cross_code");
	pyjson_cstr(&j, "");
	pyjson_obj_end(&j);
	lobby_ipc_event(l, &b);
	strbuf_release(&b);
	strbuf_init(&b, 256);
	pyjson_init(&j, &b);
	pyjson_obj_begin(&j);
	pyjson_key(&j, "type");
	pyjson_cstr(&j, "transport_lobby");
	pyjson_key(&j, "epoch");
	pyjson_cstr(&j, h->transport_lobby);
	pyjson_obj_end(&j);
	lobby_ipc_event(l, &b);
	strbuf_release(&b);
	lobby_ipc_state(l, "code", json_object_new_string(h->code));
	lobby_ipc_state(l, "you", json_object_new_string(h->name));
	lobby_ipc_state(l, "host", json_object_new_string(h->name));
	lobby_ipc_state(l, "lobby", json_object_new_string(l->cfg.lobby_name));
	lobby_ipc_state(l, "mode", json_object_new_string(h->mode));
	lobby_ipc_state(l, "started", json_object_new_boolean(false));
	roster_local(h);
	snprintf(detail, sizeof(detail), "lobby ready on %u", lobby_net_port(l->net));
	lobby_ipc_status(l, "waiting", detail);
	log_info("code code=%s locked=%d", h->code, l->cfg.has_password);

	lobby_rv_host_start(l);
	if (l->cfg.public_)
		lobby_rv_publish(l, true);
	ev_timer_start(l->loop, &h->heal, ROSTER_HEAL_MS, on_heal, h);
	ev_timer_start(l->loop, &h->sweep, 1000, on_sweep, h);
}

const char *lobby_host_code(const struct lobby *l)
{
	return l->host != NULL ? l->host->code : "";
}

size_t lobby_host_players(const struct lobby *l)
{
	return l->host != NULL ? htab_count(l->host->peers) + 1 : 0;
}

static const struct lobby_net_handlers handlers = {on_frame, on_app, on_bad_seal};

const struct lobby_net_handlers *lobby_host_handlers(void)
{
	return &handlers;
}

int lobby_host_start(struct lobby *l)
{
	struct lobby_host *h = calloc(1, sizeof(*h));
	uint16_t port = l->cfg.local_port_set ? l->cfg.local_port : 29471;
	int r;

	if (h == NULL)
		return -ENOMEM;
	h->l = l;
	ev_timer_init(&h->heal);
	ev_timer_init(&h->sweep);
	h->peers = htab_new(LOBBY_CAP, sizeof(struct addr_key), sizeof(struct peer));
	h->rejects = htab_new(REJECT_TRACK, sizeof(struct addr_key), sizeof(long long));
	if (h->peers == NULL || h->rejects == NULL) {
		lobby_host_free(h);
		return -ENOMEM;
	}
	lobby_msg_clean(l->cfg.name, LOBBY_NAME_MAX, h->name, sizeof(h->name));
	if (h->name[0] == '\0')
		snprintf(h->name, sizeof(h->name), "player");
	h->company = HOST_COMPANY;
	snprintf(h->mode, sizeof(h->mode), "%s", l->cfg.companies ? "companies" : "coop");
	l->host = h;
	l->has_secret = true;
	randombytes_buf(l->secret, sizeof(l->secret));
	r = lobby_net_new(l, port, &handlers);
	if (r < 0) {
		errno = -r;
		log_warn("listen-fail port=%u", port);
		return r;
	}
	lobby_ipc_status(l, "waiting", "observing NAT");
	return lobby_observe_start(l, true, observed, h);
}

void lobby_host_free(struct lobby_host *h)
{
	if (h == NULL)
		return;
	ev_timer_stop(h->l->loop, &h->heal);
	ev_timer_stop(h->l->loop, &h->sweep);
	htab_free(h->peers);
	htab_free(h->rejects);
	free(h);
}
