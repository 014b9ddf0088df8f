/*
 * The mesh joiner's links (lobby_mesh.h; netpunch's mesh.py MeshNode and
 * run_client's mesh_* functions).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "frame.h"
#include "htab.h"
#include "joincode.h"
#include "lobby.h"
#include "lobby_mesh.h"
#include "log.h"
#include "strbuf.h"

#define NAME_BYTES   (LOBBY_NAME_MAX * 4 + 1)
#define KEEPALIVE_MS (LOBBY_KEEPALIVE_MS)

struct mlink {
	struct addr addr;
	char name[NAME_BYTES]; /* "" until a mesh_hi names it */
	bool connected;
	long long last_seen, last_keepalive, last_hi;
};

struct dial {
	char name[NAME_BYTES];
	struct addr targets[LOBBY_MESH_MAX_TARGETS];
	int ntargets;
	long long started;
	bool used, done, failed;
};

/* A participant of the last roster, sorted by name. */
struct part {
	char *name;
	char *profile;      /* NULL: none */
	char *links;        /* the names it reports direct links to, each NUL-ended */
	size_t nlinks;      /* how many */
	struct mlink *link; /* its connected link (when links_ok) */
};

struct lobby_mesh {
	struct lobby *l;
	const struct lobby_mesh_ops *ops;
	uint8_t token[NP1_TOKEN_LEN];
	struct htab *links; /* addr_key -> struct mlink */
	struct dial dials[LOBBY_CAP];
	struct part *parts;
	size_t nparts;
	bool links_ok; /* parts[].link is current */
	char me[NAME_BYTES];
	char host_name[NAME_BYTES];
	bool is_relay;
	char *reported; /* the last links report, as a key */
	size_t reported_len;
	long long last_report, last_plan;
	bool plan_soon; /* a dial ended: the next tick starts another */
	struct ev_timer tick;
	uint8_t game[NP1_GAME_MAX + 1];
	uint8_t env[NP1_GAME_MAX + 1 + 2 * 256 + 2];
	struct lobby_mesh_stats st;
};

/* ---- the tables ---- */

static struct mlink *link_get(struct lobby_mesh *m, const struct addr *a)
{
	struct addr_key k;

	addr_to_key(a, &k);
	return htab_get(m->links, &k);
}

/* Makes room for one more by forgetting the least recent unnamed link;
 * false when every link is named. */
static bool make_room(struct lobby_mesh *m)
{
	for (struct mlink *k = htab_oldest(m->links); k != NULL; k = htab_newer(m->links, k)) {
		if (k->name[0] == '\0') {
			htab_remove(m->links, k);
			m->links_ok = false;
			return true;
		}
	}
	return false;
}

/* The link for a, made (unconnected) when new; NULL when there is no room. */
static struct mlink *link_make(struct lobby_mesh *m, const struct addr *a)
{
	struct mlink *k = link_get(m, a);
	struct addr_key key;

	if (k != NULL)
		return k;
	if (htab_count(m->links) == htab_capacity(m->links) && !make_room(m)) {
		m->st.strangers_refused++;
		return NULL;
	}
	addr_to_key(a, &key);
	k = htab_insert(m->links, &key, false, NULL);
	if (k == NULL) {
		m->st.strangers_refused++;
		return NULL;
	}
	k->addr = *a;
	k->last_keepalive = ev_now(m->l->loop);
	return k;
}

static int cmp_part(const void *a, const void *b)
{
	return strcmp(((const struct part *)a)->name, ((const struct part *)b)->name);
}

static int cmp_name_part(const void *key, const void *b)
{
	return strcmp(key, ((const struct part *)b)->name);
}

static struct part *part_get(const struct lobby_mesh *m, const char *name)
{
	if (m->nparts == 0)
		return NULL;
	return bsearch(name, m->parts, m->nparts, sizeof(*m->parts), cmp_name_part);
}

/* parts[].link again, from the links (after any change of either). */
static void resolve_links(struct lobby_mesh *m)
{
	if (m->links_ok)
		return;
	for (size_t i = 0; i < m->nparts; i++)
		m->parts[i].link = NULL;
	for (struct mlink *k = htab_oldest(m->links); k != NULL; k = htab_newer(m->links, k)) {
		struct part *p;

		if (!k->connected || k->name[0] == '\0' || (p = part_get(m, k->name)) == NULL)
			continue;
		if (p->link == NULL)
			p->link = k;
	}
	m->links_ok = true;
}

/* mesh.py by_name: a connected link of that name. */
static struct mlink *by_name(struct lobby_mesh *m, const char *name)
{
	struct part *p;

	resolve_links(m);
	p = part_get(m, name);
	if (p != NULL)
		return p->link;
	/* Not in the roster (yet): any link of that name. */
	for (struct mlink *k = htab_oldest(m->links); k != NULL; k = htab_newer(m->links, k)) {
		if (k->connected && strcmp(k->name, name) == 0)
			return k;
	}
	return NULL;
}

static struct dial *dial_get(struct lobby_mesh *m, const char *name)
{
	for (size_t i = 0; i < LOBBY_CAP; i++) {
		if (m->dials[i].used && strcmp(m->dials[i].name, name) == 0)
			return &m->dials[i];
	}
	return NULL;
}

static void forget_dial(struct lobby_mesh *m, const char *name)
{
	struct dial *d = dial_get(m, name);

	if (d != NULL)
		d->used = false;
}

/* ---- sending ---- */

static void send_ctl(struct lobby_mesh *m, const struct addr *to, uint8_t type,
		     const uint8_t *payload, size_t len)
{
	lobby_net_send_ctl(m->l->net, to, type, payload, len);
}

static void send_hi(struct lobby_mesh *m, struct mlink *k)
{
	struct lobby_msg msg;

	if (m->me[0] == '\0')
		return;
	lobby_msg_init(&msg, LOBBY_MSG_MESH_HI);
	msg.mesh_hi = m->me;
	lobby_net_send_msg(m->l, &k->addr, &msg);
	k->last_hi = ev_now(m->l->loop);
}

static void link_up(struct lobby_mesh *m, struct mlink *k, const char *how)
{
	char a[ADDR_STRLEN];

	k->connected = true;
	k->last_seen = ev_now(m->l->loop);
	m->links_ok = false;
	m->st.links_up++;
	log_info("mesh-connected addr=%s by=%s", addr_str(&k->addr, a, sizeof(a)), how);
}

/* ---- dials ---- */

/* A dial toward name at the candidates of its profile code; false when
 * there is none. */
static bool dial(struct lobby_mesh *m, const char *name, const char *code)
{
	struct joincode c;
	struct dial *d;
	char err[128];
	int n;

	if (joincode_decode(code, NULL, (long long)time(NULL), &c, err, sizeof(err)) < 0)
		return false;
	d = dial_get(m, name);
	for (size_t i = 0; d == NULL && i < LOBBY_CAP; i++) {
		if (!m->dials[i].used)
			d = &m->dials[i];
	}
	if (d == NULL)
		return false;
	n = lobby_observe_targets(m->l, &c, d->targets, LOBBY_MESH_MAX_TARGETS);
	if (n <= 0) {
		d->used = false;
		return false;
	}
	snprintf(d->name, sizeof(d->name), "%s", name);
	d->ntargets = n;
	d->started = ev_now(m->l->loop);
	d->used = true;
	d->done = d->failed = false;
	m->st.dials++;
	log_info("mesh-dial peer=\"%s\" targets=%d", name, n);
	return true;
}

static size_t dials_running(const struct lobby_mesh *m)
{
	size_t n = 0;

	for (size_t i = 0; i < LOBBY_CAP; i++)
		n += m->dials[i].used && !m->dials[i].done && !m->dials[i].failed;
	return n;
}

/* run_client mesh_plan_dials: every other joiner with a profile and no
 * link, no dial running and none failed lately - at most
 * LOBBY_MESH_DIALS_AT_ONCE at a time (netpunch dials them all at once:
 * 200 joiners, 40,000 dials of 10 HELLOs a second each). */
static void plan_dials(struct lobby_mesh *m)
{
	size_t running;

	if (m->me[0] == '\0')
		return;
	running = dials_running(m);
	for (size_t i = 0; i < m->nparts && running < LOBBY_MESH_DIALS_AT_ONCE; i++) {
		struct part *p = &m->parts[i];
		struct dial *d;

		if (p->profile == NULL || strcmp(p->name, m->me) == 0 ||
		    strcmp(p->name, m->host_name) == 0 || by_name(m, p->name) != NULL)
			continue;
		d = dial_get(m, p->name);
		if (d != NULL && (d->failed || !d->done))
			continue;
		if (dial(m, p->name, p->profile))
			running++;
	}
}

/* ---- the links report ---- */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

size_t lobby_mesh_direct(const struct lobby_mesh *m, const char **out, size_t max)
{
	size_t n = 0, u = 0;

	for (struct mlink *k = htab_oldest(m->links); k != NULL && n < max;
	     k = htab_newer(m->links, k)) {
		/* mesh.py direct_names, less the host's link (named "host"). */
		if (k->connected && k->name[0] != '\0' && strcmp(k->name, "host") != 0)
			out[n++] = k->name;
	}
	qsort(out, n, sizeof(*out), cmp_str);
	for (size_t i = 0; i < n; i++) {
		if (u == 0 || strcmp(out[u - 1], out[i]) != 0)
			out[u++] = out[i];
	}
	return u;
}

static void report(struct lobby_mesh *m, long long now)
{
	const char *names[LOBBY_CAP];
	size_t n;
	struct strbuf b;

	if (now - m->last_report < LOBBY_MESH_LINKS_MS)
		return;
	m->last_report = now;
	n = lobby_mesh_direct(m, names, LOBBY_CAP);
	strbuf_init(&b, (size_t)LOBBY_CAP * NAME_BYTES + 1);
	for (size_t i = 0; i < n; i++)
		strbuf_append(&b, names[i], strlen(names[i]) + 1);
	strbuf_append(&b, "", 0);
	if (b.bad || b.p == NULL) {
		strbuf_release(&b);
		return;
	}
	if (m->reported != NULL && m->reported_len == b.len &&
	    memcmp(m->reported, b.p, b.len) == 0) {
		strbuf_release(&b);
		return;
	}
	free(m->reported);
	m->reported = b.p; /* taken */
	m->reported_len = b.len;
	strbuf_init(&b, (size_t)LOBBY_CAP * NAME_BYTES + 1);
	for (size_t i = 0; i < n; i++)
		strbuf_printf(&b, "%s%s", i > 0 ? "," : "", names[i]);
	log_info("mesh-links direct=%zu names=\"%s\"", n, b.p != NULL ? b.p : "");
	strbuf_release(&b);
	m->ops->report(m->l, names, n);
}

/* ---- the clock ---- */

static void on_tick(struct ev_timer *t, void *arg)
{
	struct lobby_mesh *m = arg;
	long long now = ev_now(m->l->loop);
	char a[ADDR_STRLEN];
	struct mlink *k, *next;

	for (size_t i = 0; i < LOBBY_CAP; i++) {
		struct dial *d = &m->dials[i];

		if (!d->used)
			continue;
		if (d->failed) {
			/* A failed dial may work later (NAT state changes). */
			if (now - d->started > LOBBY_MESH_RETRY_MS)
				d->used = false;
			continue;
		}
		if (d->done)
			continue;
		if (now - d->started > LOBBY_MESH_DIAL_MS) {
			d->failed = true;
			m->plan_soon = true;
			m->st.dials_failed++;
			log_info("mesh-dial-failed peer=\"%s\" reason=timeout via=relay", d->name);
			continue;
		}
		for (int j = 0; j < d->ntargets; j++)
			send_ctl(m, &d->targets[j], NP1_HELLO, m->token, sizeof(m->token));
	}
	for (k = htab_oldest(m->links); k != NULL; k = next) {
		next = htab_newer(m->links, k);
		if (k->connected && now - k->last_keepalive >= KEEPALIVE_MS) {
			k->last_keepalive = now;
			send_ctl(m, &k->addr, NP1_KEEPALIVE, m->token, sizeof(m->token));
		}
		if (k->connected && now - k->last_seen > LOBBY_MESH_DEAD_MS) {
			k->connected = false;
			m->links_ok = false;
			m->st.links_dead++;
			log_info("mesh-link-dead peer=\"%s\" addr=%s", k->name,
				 addr_str(&k->addr, a, sizeof(a)));
		}
		if (!k->connected && k->name[0] == '\0' &&
		    now - k->last_seen > LOBBY_MESH_UNNAMED_MS) {
			htab_remove(m->links, k);
			m->links_ok = false;
			continue;
		}
		if (k->connected && k->name[0] == '\0' && now - k->last_hi >= LOBBY_MESH_HI_MS)
			send_hi(m, k);
	}
	/* New dials come with a roster (lobby_mesh_roster); the clock only
	 * retries the ones that failed or died, once a second. */
	if (now - m->last_plan >= 1000 || m->plan_soon) {
		m->plan_soon = false;
		m->last_plan = now;
		plan_dials(m);
	}
	report(m, now);
	ev_timer_start(m->l->loop, t, LOBBY_MESH_TICK_MS, on_tick, m);
}

/* ---- what arrives ---- */

void lobby_mesh_ctl(struct lobby_mesh *m, const struct addr *from, uint8_t type,
		    const uint8_t *payload, size_t len)
{
	long long now = ev_now(m->l->loop);
	struct mlink *k;
	bool dialing = false;

	switch (type) {
	case NP1_HELLO:
		/* Echo their token: their punch, and ours opened. */
		send_ctl(m, from, NP1_ACK, payload, len);
		if ((k = link_get(m, from)) != NULL)
			k->last_seen = now;
		return;
	case NP1_ACK:
		if (len != NP1_TOKEN_LEN || memcmp(payload, m->token, NP1_TOKEN_LEN) != 0)
			return;
		if ((k = link_make(m, from)) == NULL)
			return;
		k->last_seen = now;
		if (!k->connected) {
			send_ctl(m, from, NP1_CONNECTED, m->token, sizeof(m->token));
			link_up(m, k, "ack");
		}
		return;
	case NP1_CONNECTED:
		k = link_get(m, from);
		/* Anyone can say CONNECTED: a new address counts only while we
		 * dial someone (mesh.py takes every one). */
		for (size_t i = 0; k == NULL && !dialing && i < LOBBY_CAP; i++)
			dialing = m->dials[i].used && !m->dials[i].done && !m->dials[i].failed;
		if (k == NULL && !dialing) {
			m->st.strangers_refused++;
			return;
		}
		if (k == NULL && (k = link_make(m, from)) == NULL)
			return;
		k->last_seen = now;
		if (!k->connected)
			link_up(m, k, "peer");
		return;
	case NP1_KEEPALIVE:
		if ((k = link_get(m, from)) != NULL)
			k->last_seen = now;
		return;
	default:
		return;
	}
}

void lobby_mesh_heard(struct lobby_mesh *m, const struct addr *from)
{
	struct mlink *k = link_make(m, from);

	if (k != NULL) {
		k->last_seen = ev_now(m->l->loop);
		htab_touch(m->links, k);
	}
}

void lobby_mesh_hi(struct lobby_mesh *m, const struct addr *from, const char *name)
{
	struct mlink *k;
	struct dial *d;
	bool fresh;
	char a[ADDR_STRLEN];

	if (name == NULL || name[0] == '\0' || strcmp(name, m->me) == 0 ||
	    strlen(name) >= NAME_BYTES)
		return;
	k = link_get(m, from);
	fresh = k == NULL || strcmp(k->name, name) != 0;
	if (k == NULL && (k = link_make(m, from)) == NULL)
		return;
	/* mesh.py name_link: a named link is a connected one. */
	snprintf(k->name, sizeof(k->name), "%s", name);
	if (!k->connected)
		link_up(m, k, "hi");
	k->last_seen = ev_now(m->l->loop);
	m->links_ok = false;
	d = dial_get(m, name);
	if (d != NULL && !d->done && !d->failed)
		log_info("mesh-direct peer=\"%s\" addr=%s", name, addr_str(from, a, sizeof(a)));
	forget_dial(m, name);
	m->plan_soon = true;
	if (fresh) {
		send_hi(m, k);      /* make sure they can name us too */
		m->last_report = 0; /* and tell the host soon */
	}
}

bool lobby_mesh_accept_frame(struct lobby_mesh *m, const struct addr *from)
{
	struct mlink *k = link_get(m, from);

	if (k == NULL || !k->connected) {
		m->st.frames_refused++;
		return false;
	}
	m->st.frames_in++;
	return true;
}

void lobby_mesh_envelope(struct lobby_mesh *m, const struct addr *from, const uint8_t *p,
			 size_t len)
{
	char to[256], frm[256];
	const uint8_t *inner;
	size_t ilen;
	struct mlink *k;

	(void)from;
	if (mesh_env_parse(p, len, to, frm, &inner, &ilen) < 0) {
		m->st.env_dropped++;
		return;
	}
	if (strcmp(to, m->me) == 0) {
		if (ilen >= 1 && inner[0] == 'g' && ilen - 1 <= NP1_GAME_MAX) {
			m->st.env_delivered++;
			lobby_game_deliver(m->l, inner + 1, ilen - 1);
		} else {
			m->st.env_dropped++;
		}
		return;
	}
	/* We are the relay for this pair. */
	k = by_name(m, to);
	if (k == NULL) {
		m->st.env_dropped++;
		return;
	}
	m->st.env_forwarded++;
	lobby_net_send_app(m->l, &k->addr, p, len);
}

/* run_client mesh_relay_via: the host while it is heard, else a peer
 * whose roster links name dest. */
static const struct addr *relay_via(struct lobby_mesh *m, const char *dest, bool *via_host)
{
	long long now = ev_now(m->l->loop);

	*via_host = now - m->ops->host_heard(m->l) < LOBBY_MESH_HOST_ALIVE;
	if (*via_host)
		return m->ops->host(m->l);
	resolve_links(m);
	for (size_t i = 0; i < m->nparts; i++) {
		struct part *p = &m->parts[i];
		const char *s = p->links;

		if (p->link == NULL || strcmp(p->name, "host") == 0)
			continue;
		for (size_t j = 0; j < p->nlinks; j++, s += strlen(s) + 1) {
			if (strcmp(s, dest) == 0)
				return &p->link->addr;
		}
	}
	return NULL;
}

int lobby_mesh_send_frame(struct lobby_mesh *m, const uint8_t *frame, size_t len)
{
	struct lobby *l = m->l;
	int dlen = lobby_net_frame_build(l, frame, len), g, n = 0;

	if (dlen < 0)
		return dlen;
	/* No roster yet: the host, which delivers it to its game. */
	if (m->nparts == 0) {
		lobby_net_frame_send(l, m->ops->host(l), (size_t)dlen);
		return 1;
	}
	resolve_links(m);
	for (size_t i = 0; i < m->nparts; i++) {
		struct part *p = &m->parts[i];
		const struct addr *via;
		bool via_host;
		int e;

		if (strcmp(p->name, m->me) == 0)
			continue;
		/* The game host: its lobby is our transport peer (in a relay
		 * lobby the roster's host is the leader, a joiner like us). */
		if (!m->is_relay && strcmp(p->name, m->host_name) == 0) {
			if (lobby_net_frame_send(l, m->ops->host(l), (size_t)dlen) == 0)
				n++;
			continue;
		}
		if (p->link != NULL) {
			if (lobby_net_frame_send(l, &p->link->addr, (size_t)dlen) == 0) {
				n++;
				m->st.direct_sent++;
			}
			continue;
		}
		via = relay_via(m, p->name, &via_host);
		if (via == NULL) {
			m->st.unroutable++;
			continue;
		}
		g = np1_game_build(m->game, sizeof(m->game), frame, len);
		e = g < 0 ? g
			  : mesh_env_build(m->env, sizeof(m->env), p->name, m->me, m->game,
					   (size_t)g);
		if (e > 0 && lobby_net_send_app(l, via, m->env, (size_t)e) == 0) {
			n++;
			if (via_host)
				m->st.via_host++;
			else
				m->st.via_peer++;
		}
	}
	return n;
}

/* ---- the roster ---- */

static void parts_free(struct lobby_mesh *m)
{
	for (size_t i = 0; i < m->nparts; i++) {
		free(m->parts[i].name);
		free(m->parts[i].profile);
		free(m->parts[i].links);
	}
	free(m->parts);
	m->parts = NULL;
	m->nparts = 0;
	m->links_ok = false;
}

static const char *dict_str(const struct lobby_msg_dict *d, const char *key)
{
	for (size_t i = 0; i < d->n; i++) {
		if (d->v[i].str != NULL && strcmp(d->v[i].key, key) == 0)
			return d->v[i].str;
	}
	return NULL;
}

static const struct lobby_msg_names *links_of(const struct lobby_msg_links *ls, const char *key)
{
	for (size_t i = 0; i < ls->n; i++) {
		if (strcmp(ls->v[i].name, key) == 0)
			return &ls->v[i].direct;
	}
	return NULL;
}

void lobby_mesh_roster(struct lobby_mesh *m, const struct lobby_msg_roster *r)
{
	struct part *v;
	size_t n = 0;

	if (r->host != NULL)
		snprintf(m->host_name, sizeof(m->host_name), "%s", r->host);
	if (r->has_relay)
		m->is_relay = r->relay;
	if (r->players.null)
		return;
	v = calloc(r->players.n + 1, sizeof(*v));
	if (v == NULL)
		return;
	for (size_t i = 0; i < r->players.n; i++) {
		const char *code =
			r->profiles.null ? NULL : dict_str(&r->profiles, r->players.v[i]);
		const struct lobby_msg_names *ln =
			r->links.null ? NULL : links_of(&r->links, r->players.v[i]);
		struct part *p = &v[n];
		size_t bytes = 0;

		if (strlen(r->players.v[i]) >= NAME_BYTES)
			continue;
		p->name = strdup(r->players.v[i]);
		p->profile = code != NULL && code[0] != '\0' ? strdup(code) : NULL;
		for (size_t j = 0; ln != NULL && j < ln->n; j++)
			bytes += strlen(ln->v[j]) + 1;
		p->links = malloc(bytes + 1);
		if (p->name == NULL || p->links == NULL ||
		    (code != NULL && code[0] != '\0' && p->profile == NULL)) {
			free(p->name);
			free(p->profile);
			free(p->links);
			continue;
		}
		bytes = 0;
		for (size_t j = 0; ln != NULL && j < ln->n; j++) {
			size_t sl = strlen(ln->v[j]) + 1;

			memcpy(p->links + bytes, ln->v[j], sl);
			bytes += sl;
		}
		p->nlinks = ln != NULL ? ln->n : 0;
		n++;
	}
	parts_free(m);
	qsort(v, n, sizeof(*v), cmp_part);
	/* Unique names (a roster lists each once; a hostile one may not). */
	for (size_t i = 1, u = 1; i <= n; i++) {
		if (i == n) {
			n = u;
			break;
		}
		if (strcmp(v[u - 1].name, v[i].name) == 0) {
			free(v[i].name);
			free(v[i].profile);
			free(v[i].links);
			continue;
		}
		v[u++] = v[i];
	}
	m->parts = v;
	m->nparts = n;
	plan_dials(m);
}

void lobby_mesh_set_me(struct lobby_mesh *m, const char *you)
{
	if (you != NULL)
		snprintf(m->me, sizeof(m->me), "%s", you);
}

void lobby_mesh_stats(const struct lobby_mesh *m, struct lobby_mesh_stats *out)
{
	*out = m->st;
}

struct lobby_mesh *lobby_mesh_new(struct lobby *l, const uint8_t token[static NP1_TOKEN_LEN],
				  const struct lobby_mesh_ops *ops)
{
	struct lobby_mesh *m = calloc(1, sizeof(*m));

	if (m == NULL)
		return NULL;
	m->links = htab_new(LOBBY_MESH_MAX_LINKS, sizeof(struct addr_key), sizeof(struct mlink));
	if (m->links == NULL) {
		free(m);
		return NULL;
	}
	m->l = l;
	m->ops = ops;
	memcpy(m->token, token, NP1_TOKEN_LEN);
	m->last_report = ev_now(l->loop);
	ev_timer_init(&m->tick);
	ev_timer_start(l->loop, &m->tick, LOBBY_MESH_TICK_MS, on_tick, m);
	return m;
}

void lobby_mesh_free(struct lobby_mesh *m)
{
	struct lobby_mesh_stats *s;

	if (m == NULL)
		return;
	s = &m->st;
	log_info("mesh-stats dials=%llu failed=%llu up=%llu dead=%llu direct=%llu via_host=%llu "
		 "via_peer=%llu unroutable=%llu env_in=%llu env_fwd=%llu env_drop=%llu "
		 "frames_in=%llu refused=%llu strangers=%llu",
		 (unsigned long long)s->dials, (unsigned long long)s->dials_failed,
		 (unsigned long long)s->links_up, (unsigned long long)s->links_dead,
		 (unsigned long long)s->direct_sent, (unsigned long long)s->via_host,
		 (unsigned long long)s->via_peer, (unsigned long long)s->unroutable,
		 (unsigned long long)s->env_delivered, (unsigned long long)s->env_forwarded,
		 (unsigned long long)s->env_dropped, (unsigned long long)s->frames_in,
		 (unsigned long long)s->frames_refused, (unsigned long long)s->strangers_refused);
	ev_timer_stop(m->l->loop, &m->tick);
	parts_free(m);
	htab_free(m->links);
	free(m->reported);
	free(m);
}
