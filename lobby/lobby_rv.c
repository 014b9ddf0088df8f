/*
 * The master's rendezvous and list, over libcurl inside the loop
 * (netpunch-wire.md §5, §6; master-api.md).
 *
 * Joiner: POST <master>/knock every 2 s with our own code sealed under the
 * knock key, from when the joiner's plan says (lobby_trav_plan: at once
 * unless the host is reachable directly; netpunch's schedule waits 4 s);
 * from the knock the plan names on (the first when either side is
 * symmetric or behind a CGNAT, else the second) ask for a relay port too,
 * and bind each one we are given (TRLB|id|J from the game socket) and dial
 * it as one more candidate.
 * Host: GET <master>/knock?s=<tag>&since=<t>: every 250 ms while nobody
 * has joined or a knock came in the last 30 s (a knock is then answered
 * within a quarter second), else every second as netpunch polls (the
 * master does not limit polls; --schedule netpunch polls every second
 * always). Each note that opens names the joiner's addresses, which we
 * punch with HELLOs every 200 ms for 15 s (public first, then LAN) so our
 * NAT lets its HELLOs in; a note with a relay makes us bind that port
 * (TRLB|id|H) as long.
 * Publish: with --publish URL --public, POST /announce every 10 s and
 * /leave on exit.
 */
#include <errno.h>
#include <json-c/json.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "curlev.h"
#include "frame.h"
#include "jsonp.h"
#include "lobby.h"
#include "lobby_trav.h"
#include "log.h"
#include "pyjson.h"
#include "seal.h"
#include "strbuf.h"

#define DEFAULT_MASTER "https://srv1306562.hstgr.cloud/tpf2mp"
#define MAX_PUNCH      (32)
#define MAX_BIND       (32)
#define RESPONSE_MAX   (256 * 1024)

struct punch {
	bool used;
	struct addr to[3];
	int n;
	uint8_t token[NP1_TOKEN_LEN];
	long long until;
};

struct bind {
	bool used;
	struct addr relay;
	uint8_t id[NP1_RELAY_ID_LEN];
	long long until;
	bool acked;
	uint8_t token[NP1_TOKEN_LEN]; /* the host's HELLOs through it */
};

/* A knock the host answered, for saying later how its joiner came in. */
struct knock_seen {
	struct addr pub, relay;
	bool has_pub, has_relay;
	long long at;
};

#define KNOCKS_SEEN (32)

struct lobby_rv {
	struct lobby *l;
	char base[LOBBY_URL_MAX];
	char user_agent[96];
	char tag[25];
	struct sealer *knock_sealer;
	/* host */
	struct ev_timer poll_timer, punch_timer;
	struct curlev_req *poll_req;
	double since;
	struct punch punches[MAX_PUNCH];
	struct bind binds[MAX_BIND];
	long long last_note_ms; /* when the last knock opened (-1: none yet) */
	struct knock_seen seen[KNOCKS_SEEN];
	unsigned nseen;
	/* joiner */
	struct ev_timer knock_timer;
	struct curlev_req *knock_req;
	bool knocking;
	int knocks;
	int relay_from_knock;
	char nonce[13];
	char profile[JOINCODE_MAX_TEXT];
	bool relay_added;
	/* publish */
	bool publishing;
	struct ev_timer pub_timer;
	struct curlev_req *pub_req;
	char pub_id[17];
};

static long long now_ms(const struct lobby_rv *r)
{
	return ev_now(r->l->loop);
}

const char *lobby_rv_url(const struct lobby *l)
{
	if (l->cfg.rendezvous_off)
		return NULL;
	if (l->cfg.rendezvous_url[0] != '\0')
		return l->cfg.rendezvous_url;
	if (l->cfg.publish_url[0] != '\0')
		return l->cfg.publish_url;
	return DEFAULT_MASTER;
}

static void url_of(const char *base, const char *path, char *out, size_t size)
{
	size_t n = strlen(base);

	while (n > 0 && base[n - 1] == '/')
		n--;
	snprintf(out, size, "%.*s%s", (int)n, base, path);
}

/* ---- relay binds (both roles) ---- */

static void add_bind(struct lobby_rv *r, const struct addr *relay,
		     const uint8_t id[NP1_RELAY_ID_LEN])
{
	struct bind *free_slot = NULL;

	for (int i = 0; i < MAX_BIND; i++) {
		struct bind *b = &r->binds[i];

		if (b->used && addr_equal(&b->relay, relay) &&
		    memcmp(b->id, id, NP1_RELAY_ID_LEN) == 0) {
			b->until = now_ms(r) + LOBBY_RV_PUNCH_FOR_MS;
			return;
		}
		if (!b->used && free_slot == NULL)
			free_slot = b;
	}
	if (free_slot == NULL)
		return;
	free_slot->used = true;
	free_slot->relay = *relay;
	memcpy(free_slot->id, id, NP1_RELAY_ID_LEN);
	free_slot->until = now_ms(r) + LOBBY_RV_PUNCH_FOR_MS;
	free_slot->acked = false;
	randombytes_buf(free_slot->token, sizeof(free_slot->token));
}

static void send_bind(struct lobby_rv *r, const struct bind *b)
{
	uint8_t pkt[NP1_TRLB_LEN];
	int n = np1_trlb_build(pkt, sizeof(pkt), b->id, r->l->role->bind_as);

	if (n > 0)
		lobby_net_send_raw(r->l->net, &b->relay, pkt, (size_t)n);
	/* Ours: a host bound to the relay also says HELLO through it, so the
	 * joiner's answer (its own HELLO at once) connects us without
	 * waiting for its race's next tick. */
	if (b->acked && r->l->role->bind_as == NP1_ROLE_HOST && !r->l->cfg.netpunch_schedule)
		lobby_net_send_ctl(r->l->net, &b->relay, NP1_HELLO, b->token, sizeof(b->token));
}

void lobby_rv_trla(struct lobby *l, const struct addr *from, const uint8_t *id)
{
	struct lobby_rv *r = l->rv;
	char a[ADDR_STRLEN];

	if (r == NULL)
		return;
	for (int i = 0; i < MAX_BIND; i++) {
		struct bind *b = &r->binds[i];

		if (b->used && !b->acked && addr_equal(&b->relay, from) &&
		    memcmp(b->id, id, NP1_RELAY_ID_LEN) == 0) {
			b->acked = true;
			log_info("relay-bound relay=%s", addr_str(from, a, sizeof(a)));
			send_bind(r, b);
		}
	}
}

static bool parse_relay(struct lobby_rv *r, struct json_object *rel, struct addr *a,
			uint8_t id[NP1_RELAY_ID_LEN])
{
	struct json_object *f;
	const char *ip, *hex;
	size_t bin_len;
	long long port;

	(void)r;
	if (rel == NULL || !json_object_is_type(rel, json_type_object))
		return false;
	ip = jsonp_str(rel, "ip");
	hex = jsonp_str(rel, "id");
	if (!json_object_object_get_ex(rel, "port", &f) || !json_object_is_type(f, json_type_int))
		return false;
	port = json_object_get_int64(f);
	if (ip == NULL || hex == NULL || port < 1 || port > 65535 || addr_parse_ip(a, ip) < 0 ||
	    !addr_is_v4(a))
		return false;
	addr_set_port(a, (uint16_t)port);
	return sodium_hex2bin(id, NP1_RELAY_ID_LEN, hex, strlen(hex), NULL, &bin_len, NULL) == 0 &&
	       bin_len == NP1_RELAY_ID_LEN;
}

/* ---- host: the poll and the punches ---- */

static void on_punch(struct ev_timer *t, void *arg)
{
	struct lobby_rv *r = arg;
	long long now = now_ms(r);
	bool any = false;

	for (int i = 0; i < MAX_PUNCH; i++) {
		struct punch *p = &r->punches[i];

		if (!p->used)
			continue;
		if (now >= p->until) {
			p->used = false;
			continue;
		}
		any = true;
		for (int k = 0; k < p->n; k++)
			lobby_net_send_ctl(r->l->net, &p->to[k], NP1_HELLO, p->token,
					   sizeof(p->token));
	}
	for (int i = 0; i < MAX_BIND; i++) {
		struct bind *b = &r->binds[i];

		if (!b->used)
			continue;
		if (now >= b->until) {
			b->used = false;
			continue;
		}
		any = true;
		send_bind(r, b);
	}
	if (any)
		ev_timer_start(r->l->loop, t, LOBBY_RV_PUNCH_EVERY_MS, on_punch, r);
}

void lobby_rv_peer_seen(struct lobby *l, const struct addr *addr)
{
	struct lobby_rv *r = l->rv;

	if (r == NULL)
		return;
	/* That address answered: no need to keep opening the way to it. */
	for (int i = 0; i < MAX_PUNCH; i++) {
		struct punch *p = &r->punches[i];

		for (int k = 0; p->used && k < p->n; k++) {
			if (addr_equal(&p->to[k], addr))
				p->used = false;
		}
	}
	for (int i = 0; i < MAX_BIND; i++) {
		if (r->binds[i].used && addr_equal(&r->binds[i].relay, addr))
			r->binds[i].used = false;
	}
}

static void start_punch(struct lobby_rv *r, const struct joincode *c)
{
	struct punch *p = NULL;
	char a[ADDR_STRLEN], b[ADDR_STRLEN], c6[ADDR_STRLEN];

	for (int i = 0; i < MAX_PUNCH && p == NULL; i++) {
		if (!r->punches[i].used)
			p = &r->punches[i];
	}
	if (p == NULL)
		return;
	memset(p, 0, sizeof(*p));
	/* Public first, then LAN. */
	if (c->has_public)
		p->to[p->n++] = c->pub;
	if (c->has_lan)
		p->to[p->n++] = c->lan;
	if (c->has_v6)
		p->to[p->n++] = c->v6addr;
	if (p->n == 0)
		return;
	p->used = true;
	randombytes_buf(p->token, sizeof(p->token));
	p->until = now_ms(r) + LOBBY_RV_PUNCH_FOR_MS;
	log_info("punch to=%s%s%s%s%s for_ms=%d", addr_str(&p->to[0], a, sizeof(a)),
		 p->n > 1 ? "," : "", p->n > 1 ? addr_str(&p->to[1], b, sizeof(b)) : "",
		 p->n > 2 ? "," : "", p->n > 2 ? addr_str(&p->to[2], c6, sizeof(c6)) : "",
		 LOBBY_RV_PUNCH_FOR_MS);
	on_punch(&r->punch_timer, r);
}

static void handle_note(struct lobby_rv *r, struct json_object *note)
{
	struct lobby *l = r->l;
	const char *blob = jsonp_str(note, "blob");
	uint8_t sealed[1200], plain[1200];
	struct json_object *t, *rel;
	char code[JOINCODE_MAX_TEXT], err[128];
	struct joincode c;
	struct knock_seen *ks;
	size_t slen;
	int n;

	if (json_object_object_get_ex(note, "t", &t) &&
	    (json_object_is_type(t, json_type_double) || json_object_is_type(t, json_type_int)) &&
	    json_object_get_double(t) > r->since)
		r->since = json_object_get_double(t);
	if (blob == NULL || sodium_base642bin(sealed, sizeof(sealed), blob, strlen(blob), NULL,
					      &slen, NULL, sodium_base64_VARIANT_ORIGINAL) != 0) {
		l->ctr.knocks_bad++;
		return;
	}
	n = seal_open(r->knock_sealer, sealed, slen, plain, sizeof(plain) - 1);
	if (n < 0 || (size_t)n >= sizeof(code)) {
		l->ctr.knocks_bad++; /* not ours, tampered, or replayed */
		return;
	}
	memcpy(code, plain, (size_t)n);
	code[n] = '\0';
	if (joincode_decode(code, NULL, (long long)time(NULL), &c, err, sizeof(err)) < 0) {
		log_warnx("knock-bad-code error=\"%s\"", err);
		l->ctr.knocks_bad++;
		return;
	}
	l->ctr.knocks_answered++;
	r->last_note_ms = now_ms(r);
	ks = &r->seen[r->nseen++ % KNOCKS_SEEN];
	*ks = (struct knock_seen){.pub = c.pub, .has_pub = c.has_public, .at = r->last_note_ms};
	start_punch(r, &c);
	if (json_object_object_get_ex(note, "relay", &rel)) {
		struct addr relay;
		uint8_t id[NP1_RELAY_ID_LEN];
		char a[ADDR_STRLEN];

		if (parse_relay(r, rel, &relay, id)) {
			ks->relay = relay;
			ks->has_relay = true;
			log_info("relay-offered relay=%s role=host",
				 addr_str(&relay, a, sizeof(a)));
			add_bind(r, &relay, id);
			on_punch(&r->punch_timer, r);
		}
	}
	(void)l;
}

static void on_poll(struct ev_timer *t, void *arg);

/* Fast while a knock is likely (nobody in yet, or one just came), as
 * netpunch otherwise. */
static long long poll_every(const struct lobby_rv *r)
{
	const struct lobby *l = r->l;
	struct lobby_advert ad;

	if (l->cfg.netpunch_schedule)
		return LOBBY_RV_POLL_EVERY_MS;
	if (r->last_note_ms >= 0 && now_ms(r) - r->last_note_ms < LOBBY_RV_POLL_FAST_FOR_MS)
		return LOBBY_RV_POLL_FAST_MS;
	/* Nobody in yet (a relay lobby counts no player of its own). */
	if (l->role->advert != NULL && l->role->advert(l, &ad) &&
	    ad.players <= (strcmp(ad.type, "relay") == 0 ? 0u : 1u))
		return LOBBY_RV_POLL_FAST_MS;
	return LOBBY_RV_POLL_EVERY_MS;
}

static void on_poll_done(void *arg, int result, long status, const char *body, size_t len)
{
	struct lobby_rv *r = arg;
	struct json_object *o, *arr;
	char err[96];

	r->poll_req = NULL;
	ev_timer_start(r->l->loop, &r->poll_timer, poll_every(r), on_poll, r);
	if (result < 0 || status != 200) {
		r->l->ctr.polls_failed++;
		log_debug("knock-poll-fail result=%d status=%ld", result, status);
		return;
	}
	r->l->ctr.polls_ok++;
	if (jsonp_parse(body, len, 16, &o, err, sizeof(err)) < 0)
		return;
	if (json_object_object_get_ex(o, "knocks", &arr) &&
	    json_object_is_type(arr, json_type_array)) {
		for (size_t i = 0; i < json_object_array_length(arr) && i < 64; i++)
			handle_note(r, json_object_array_get_idx(arr, i));
	}
	json_object_put(o);
}

static void on_poll(struct ev_timer *t, void *arg)
{
	struct lobby_rv *r = arg;
	char url[LOBBY_URL_MAX + 96], path[96];

	(void)t;
	if (r->poll_req != NULL)
		return;
	snprintf(path, sizeof(path), "/knock?s=%s&since=%.3f", r->tag, r->since);
	url_of(r->base, path, url, sizeof(url));
	r->poll_req = curlev_request(r->l->curl, url, NULL, 0, r->user_agent,
				     LOBBY_RV_HTTP_TIMEOUT_MS, RESPONSE_MAX, on_poll_done, r);
	if (r->poll_req == NULL)
		ev_timer_start(r->l->loop, &r->poll_timer, poll_every(r), on_poll, r);
}

int lobby_rv_knock_match(const struct lobby *l, const struct addr *from, long long *age_ms)
{
	const struct lobby_rv *r = l->rv;
	unsigned n;

	if (r == NULL)
		return 0;
	n = r->nseen < KNOCKS_SEEN ? r->nseen : KNOCKS_SEEN;
	/* Newest first: the knock that brought this joiner. */
	for (unsigned k = 0; k < n; k++) {
		const struct knock_seen *ks = &r->seen[(r->nseen - 1 - k) % KNOCKS_SEEN];

		*age_ms = now_ms(r) - ks->at;
		if (ks->has_relay && addr_equal(&ks->relay, from))
			return 2;
		/* Its own public address, or another port of it (a symmetric
		 * NAT's for us). */
		if (ks->has_pub && addr_same_ip(&ks->pub, from))
			return 1;
	}
	return 0;
}

int lobby_rv_host_start(struct lobby *l)
{
	struct lobby_rv *r = l->rv;

	if (r == NULL || lobby_rv_url(l) == NULL)
		return 0;
	ev_timer_start(l->loop, &r->poll_timer, 0, on_poll, r);
	log_info("rendezvous master=%s tag=%.8s..", r->base, r->tag);
	return 0;
}

/* ---- joiner: knocks ---- */

static void on_knock_done(void *arg, int result, long status, const char *body, size_t len)
{
	struct lobby_rv *r = arg;
	struct json_object *o, *rel;
	char err[96];

	r->knock_req = NULL;
	if (result < 0 || status != 200) {
		log_info("knock-fail result=%d status=%ld", result, status);
		lobby_trav_knock_reply(r->l->trav, result < 0 ? -1 : status, false);
		return;
	}
	if (jsonp_parse(body, len, 8, &o, err, sizeof(err)) < 0) {
		lobby_trav_knock_reply(r->l->trav, -1, false);
		return;
	}
	lobby_trav_knock_reply(r->l->trav, status, json_object_object_get_ex(o, "relay", NULL));
	if (json_object_object_get_ex(o, "relay", &rel)) {
		struct addr relay;
		uint8_t id[NP1_RELAY_ID_LEN];
		char a[ADDR_STRLEN];

		if (parse_relay(r, rel, &relay, id) && r->knocking) {
			/* Bind (again every 200 ms until connected or 15 s
			 * pass: one bind may be lost) and dial it as a target. */
			add_bind(r, &relay, id);
			on_punch(&r->punch_timer, r);
			if (!r->relay_added)
				log_info("relay-offered relay=%s role=joiner",
					 addr_str(&relay, a, sizeof(a)));
			r->relay_added = true;
			if (r->l->role->relay_offered != NULL)
				r->l->role->relay_offered(r->l, &relay);
		}
	}
	json_object_put(o);
}

static void on_knock(struct ev_timer *t, void *arg)
{
	struct lobby_rv *r = arg;
	struct lobby *l = r->l;
	uint8_t sealed[JOINCODE_MAX_TEXT + SEAL_OVERHEAD];
	char b64[((JOINCODE_MAX_TEXT + SEAL_OVERHEAD + 2) / 3) * 4 + 1], url[LOBBY_URL_MAX + 16];
	struct strbuf b;
	struct pyjson j;
	int n;

	if (!r->knocking)
		return;
	ev_timer_start(l->loop, t, LOBBY_RV_KNOCK_EVERY_MS, on_knock, r);
	if (r->knock_req != NULL)
		return;
	/* A fresh seal each time (the host's window drops replays). */
	n = seal_seal(r->knock_sealer, (const uint8_t *)r->profile, strlen(r->profile), sealed,
		      sizeof(sealed));
	if (n < 0)
		return;
	sodium_bin2base64(b64, sizeof(b64), sealed, (size_t)n, sodium_base64_VARIANT_ORIGINAL);
	r->knocks++;
	strbuf_init(&b, 4096);
	pyjson_init(&j, &b);
	pyjson_obj_begin(&j);
	pyjson_key(&j, "s");
	pyjson_cstr(&j, r->tag);
	pyjson_key(&j, "blob");
	pyjson_cstr(&j, b64);
	if (r->knocks >= r->relay_from_knock) {
		pyjson_key(&j, "relay");
		pyjson_int(&j, 1);
		pyjson_key(&j, "j");
		pyjson_cstr(&j, r->nonce);
	}
	pyjson_obj_end(&j);
	url_of(r->base, "/knock", url, sizeof(url));
	r->knock_req = curlev_request(l->curl, url, b.p, b.len, r->user_agent,
				      LOBBY_RV_HTTP_TIMEOUT_MS, RESPONSE_MAX, on_knock_done, r);
	log_info("knock n=%d relay=%s", r->knocks, r->knocks >= r->relay_from_knock ? "yes" : "no");
	lobby_trav_knock(l->trav, r->knocks, r->knocks >= r->relay_from_knock);
	strbuf_release(&b);
}

int lobby_rv_knock_start(struct lobby *l, long long after_ms, int relay_from_knock)
{
	struct lobby_rv *r = l->rv;
	const struct joincode *me = lobby_observe_profile(l);
	uint8_t nonce[6];
	char err[96];
	struct joincode c;

	if (r == NULL || me == NULL)
		return -EINVAL;
	c = *me;
	c.ts = (uint32_t)time(NULL);
	c.has_secret = false;
	if (joincode_encode(&c, NULL, r->profile, sizeof(r->profile), err, sizeof(err)) < 0)
		return -EINVAL;
	randombytes_buf(nonce, sizeof(nonce));
	sodium_bin2hex(r->nonce, sizeof(r->nonce), nonce, sizeof(nonce));
	r->knocking = true;
	r->relay_from_knock = relay_from_knock;
	ev_timer_start(l->loop, &r->knock_timer, after_ms, on_knock, r);
	return 0;
}

void lobby_rv_knock_stop(struct lobby *l)
{
	struct lobby_rv *r = l->rv;

	if (r == NULL)
		return;
	r->knocking = false;
	ev_timer_stop(l->loop, &r->knock_timer);
	curlev_cancel(r->knock_req);
	r->knock_req = NULL;
	/* Connected: through the relay (so it knows us) or past it. */
	for (int i = 0; i < MAX_BIND; i++)
		r->binds[i].used = false;
}

/* ---- publish ---- */

static void on_pub_done(void *arg, int result, long status, const char *body, size_t len)
{
	struct lobby_rv *r = arg;

	(void)body;
	(void)len;
	r->pub_req = NULL;
	if (result < 0 || status != 200) {
		r->l->ctr.publish_failed++;
		log_info("announce-fail result=%d status=%ld", result, status);
		return;
	}
	r->l->ctr.publish_ok++;
	r->l->ctr.publish_last_ok_s = (long long)time(NULL);
}

static void on_publish(struct ev_timer *t, void *arg)
{
	struct lobby_rv *r = arg;
	struct lobby *l = r->l;
	char url[LOBBY_URL_MAX + 16];
	struct lobby_advert ad;
	struct strbuf b;
	struct pyjson j;

	if (!r->publishing)
		return;
	ev_timer_start(l->loop, t, LOBBY_PUBLISH_EVERY_MS, on_publish, r);
	if (r->pub_req != NULL || l->role->advert == NULL || !l->role->advert(l, &ad) ||
	    ad.code == NULL)
		return;
	strbuf_init(&b, 4096);
	pyjson_init(&j, &b);
	pyjson_obj_begin(&j);
	pyjson_key(&j, "id");
	pyjson_cstr(&j, r->pub_id);
	pyjson_key(&j, "name");
	pyjson_cstr(&j, l->cfg.lobby_name[0] != '\0' ? l->cfg.lobby_name : l->cfg.name);
	pyjson_key(&j, "code");
	pyjson_cstr(&j, ad.code);
	pyjson_key(&j, "players");
	pyjson_int(&j, (long long)ad.players);
	pyjson_key(&j, "max");
	pyjson_int(&j, LOBBY_CAP);
	pyjson_key(&j, "type");
	pyjson_cstr(&j, ad.type);
	pyjson_key(&j, "version");
	pyjson_cstr(&j, l->cfg.protocol_version);
	pyjson_key(&j, "locked");
	pyjson_bool(&j, l->cfg.has_password);
	pyjson_obj_end(&j);
	url_of(l->cfg.publish_url, "/announce", url, sizeof(url));
	r->pub_req = curlev_request(l->curl, url, b.p, b.len, r->user_agent,
				    LOBBY_RV_HTTP_TIMEOUT_MS, RESPONSE_MAX, on_pub_done, r);
	strbuf_release(&b);
}

static void post_leave(struct lobby_rv *r)
{
	struct lobby *l = r->l;
	char url[LOBBY_URL_MAX + 16], body[64];
	int n = snprintf(body, sizeof(body), "{\"id\": \"%s\"}", r->pub_id);

	url_of(l->cfg.publish_url, "/leave", url, sizeof(url));
	curlev_cancel(r->pub_req);
	r->pub_req = curlev_request(l->curl, url, body, (size_t)n, r->user_agent,
				    LOBBY_RV_HTTP_TIMEOUT_MS, RESPONSE_MAX, on_pub_done, r);
}

void lobby_rv_publish(struct lobby *l, bool on)
{
	struct lobby_rv *r = l->rv;

	if (r == NULL || l->cfg.publish_url[0] == '\0' || on == r->publishing)
		return;
	r->publishing = on;
	l->ctr.publishing = on;
	if (on) {
		ev_timer_start(l->loop, &r->pub_timer, 0, on_publish, r);
		log_info("publish master=%s", l->cfg.publish_url);
	} else {
		ev_timer_stop(l->loop, &r->pub_timer);
		post_leave(r);
	}
}

static void on_leave_wait(struct ev_timer *t, void *arg)
{
	struct lobby_rv *r = arg;

	/* Stop the nested run once /leave is answered. */
	if (r->pub_req == NULL) {
		ev_loop_stop(r->l->loop);
		return;
	}
	ev_timer_start(r->l->loop, t, 20, on_leave_wait, r);
}

static void on_leave_cap(struct ev_timer *t, void *arg)
{
	struct lobby_rv *r = arg;

	(void)t;
	ev_loop_stop(r->l->loop);
}

void lobby_rv_leave_sync(struct lobby *l, long timeout_ms)
{
	struct lobby_rv *r = l->rv;
	struct ev_timer poll, cap;

	if (r == NULL || !r->publishing)
		return;
	r->publishing = false;
	l->ctr.publishing = false;
	ev_timer_stop(l->loop, &r->pub_timer);
	post_leave(r);
	if (r->pub_req == NULL)
		return;
	/* The loop has stopped: run it again until /leave is answered. */
	ev_timer_init(&poll);
	ev_timer_init(&cap);
	ev_timer_start(l->loop, &poll, 20, on_leave_wait, r);
	ev_timer_start(l->loop, &cap, timeout_ms, on_leave_cap, r);
	ev_loop_run(l->loop);
	ev_timer_stop(l->loop, &poll);
	ev_timer_stop(l->loop, &cap);
}

/* ---- the module ---- */

int lobby_rv_new(struct lobby *l)
{
	struct lobby_rv *r = calloc(1, sizeof(*r));
	const char *url = lobby_rv_url(l);
	uint8_t key[SEAL_KEY_LEN], id[8];

	if (r == NULL)
		return -ENOMEM;
	r->l = l;
	r->last_note_ms = -1;
	ev_timer_init(&r->poll_timer);
	ev_timer_init(&r->punch_timer);
	ev_timer_init(&r->knock_timer);
	ev_timer_init(&r->pub_timer);
	snprintf(r->base, sizeof(r->base), "%s", url != NULL ? url : "");
	snprintf(r->user_agent, sizeof(r->user_agent), "tpf2mp-lobby/%s", l->cfg.protocol_version);
	randombytes_buf(id, sizeof(id));
	sodium_bin2hex(r->pub_id, sizeof(r->pub_id), id, sizeof(id));
	if (l->has_secret) {
		seal_knock_key(l->secret, l->cfg.has_password ? l->cfg.password : "", key);
		r->knock_sealer = seal_new(key);
		sodium_memzero(key, sizeof(key));
		seal_knock_tag(l->secret, r->tag);
		if (r->knock_sealer == NULL) {
			free(r);
			return -ENOMEM;
		}
	}
	l->rv = r;
	return 0;
}

void lobby_rv_free(struct lobby_rv *r)
{
	if (r == NULL)
		return;
	ev_timer_stop(r->l->loop, &r->poll_timer);
	ev_timer_stop(r->l->loop, &r->punch_timer);
	ev_timer_stop(r->l->loop, &r->knock_timer);
	ev_timer_stop(r->l->loop, &r->pub_timer);
	curlev_cancel(r->poll_req);
	curlev_cancel(r->knock_req);
	curlev_cancel(r->pub_req);
	seal_free(r->knock_sealer);
	free(r);
}
