/*
 * The control API: sessions, bans, servers, metrics, health, over HTTP with
 * a bearer token.
 *
 *   GET    /healthz            no token needed; which masters list the servers
 *   GET    /sessions           open sessions: server, real client, upstream
 *                              port, ... (?server=NAME: that server's)
 *   GET    /bans               the global bans (every server)
 *   PUT    /bans/{ip}          {"reason": "...", "duration": seconds}
 *   DELETE /bans/{ip}
 *   GET    /status             version, uptime, server, masters' heartbeats
 *   GET    /servers            the fronted servers and their state
 *   GET    /servers/{name}
 *   GET    /servers/{name}/healthz       no token; 503 when it is down
 *   GET    /servers/{name}/bans          that server's own bans
 *   PUT    /servers/{name}/bans/{ip}
 *   DELETE /servers/{name}/bans/{ip}
 *   GET    /metrics            Prometheus text; per-server lines carry
 *                              server="NAME" (none for the classic one)
 *   GET    /, /admin, ...      the admin page (relay_page.c), no token needed
 *
 * The token comes from --token-file (at least 32 characters, refused at
 * start otherwise); only its BLAKE2b hash is kept, and the presented token
 * is hashed and compared in constant time. The listener is retried every
 * 10 s while its address cannot be bound (a tunnel may come up later).
 */
#include <errno.h>
#include <json-c/json.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "banlist.h"
#include "httpd.h"
#include "log.h"
#include "ratelim.h"
#include "relay.h"
#include "relay_transparent.h"
#include "statefile.h"
#include "token.h"
#include "strbuf.h"

#define BODY_MAX (4096)

struct relay_control {
	struct relay *r;
	struct httpd *httpd;
	struct addr bound;
	struct ev_timer retry;
	uint8_t token_hash[crypto_generichash_BYTES];
	unsigned bind_failures;
	struct log_ratelimit warn_auth;
	uint64_t requests, unauthorized;
};

static const struct httpd_header common_headers[] = {
	{"Cache-Control", "no-store"},
	{"X-Content-Type-Options", "nosniff"},
};

/* ---- the token ---- */

int relay_token_load(const char *path, uint8_t hash[static RELAY_TOKEN_HASH])
{
	return token_load(path, "token-file", "token", hash);
}

static bool authorized(struct relay_control *c, struct httpd_req *req)
{
	return token_check(c->token_hash, req);
}

/* ---- handlers ---- */

static void method_not_allowed(struct httpd_req *req, const char *allow);

struct sessions_ctx {
	struct json_object *arr;
	const struct relay_server *srv;
};

static void add_session(const struct relay_session_info *si, void *arg)
{
	struct sessions_ctx *x = arg;
	struct json_object *o = json_object_new_object(), *d;
	char a[ADDR_STRLEN];

	json_object_object_add(o, "server", json_object_new_string(x->srv->cfg.name));
	json_object_object_add(o, "client",
			       json_object_new_string(addr_str(&si->client, a, sizeof(a))));
	json_object_object_add(o, "client_ip",
			       json_object_new_string(addr_ip_str(&si->client, a, sizeof(a))));
	json_object_object_add(o, "client_port", json_object_new_int(addr_port(&si->client)));
	json_object_object_add(o, "upstream_port", json_object_new_int(si->upstream_port));
	json_object_object_add(o, "tunnelled", json_object_new_boolean(si->tunnelled));
	json_object_object_add(o, "transparent", json_object_new_boolean(si->transparent));
	json_object_object_add(o, "confirmed", json_object_new_boolean(si->confirmed));
	json_object_object_add(o, "age_ms", json_object_new_int64(si->age_ms));
	json_object_object_add(o, "idle_ms", json_object_new_int64(si->idle_ms));
	d = json_object_new_object();
	json_object_object_add(d, "packets", json_object_new_uint64(si->pkts_in));
	json_object_object_add(d, "bytes", json_object_new_uint64(si->bytes_in));
	json_object_object_add(o, "to_server", d);
	d = json_object_new_object();
	json_object_object_add(d, "packets", json_object_new_uint64(si->pkts_out));
	json_object_object_add(d, "bytes", json_object_new_uint64(si->bytes_out));
	json_object_object_add(o, "to_client", d);
	json_object_object_add(o, "queued", json_object_new_int((int)si->queued));
	json_object_array_add(x->arr, o);
}

static void get_sessions(struct relay_control *c, struct httpd_req *req)
{
	struct sessions_ctx x = {.arr = NULL};
	const char *only = httpd_query(req, "server");

	if (only != NULL && relay_server_find(c->r, only) == NULL) {
		httpd_reply_error(req, 404, "no such server");
		return;
	}
	x.arr = json_object_new_array();
	for (size_t i = 0; i < c->r->nservers; i++) {
		x.srv = c->r->servers[i];
		if (only == NULL || strcmp(only, x.srv->cfg.name) == 0)
			relay_proxy_foreach(x.srv->proxy, add_session, &x);
	}
	httpd_reply_json(req, 200, x.arr);
	json_object_put(x.arr);
}

/* srv's listing check (relay_listing.c), or null when it has none. */
static struct json_object *listing_json(const struct relay_server *srv)
{
	const struct relay_listing *l = srv != NULL ? relay_heartbeat_listing(srv->hb) : NULL;

	return l != NULL ? relay_listing_json(l) : NULL;
}

/* One master of srv's, as GET /status shows it. */
static struct json_object *status_master(const struct relay_server *srv, size_t i)
{
	struct json_object *o = json_object_new_object();
	struct relay_master_info mi;
	char a[ADDR_STRLEN + RELAY_HOST_MAX];

	relay_heartbeat_master_info(srv->hb, i, &mi);
	json_object_object_add(
		o, "master",
		json_object_new_string(relay_master_str(&srv->cfg.masters[i], a, sizeof(a))));
	json_object_object_add(o, "address",
			       mi.have4 ? json_object_new_string(addr_str(&mi.addr4, a, sizeof(a)))
			       : mi.have6
				       ? json_object_new_string(addr_str(&mi.addr6, a, sizeof(a)))
				       : NULL);
	json_object_object_add(o, "last_attempt",
			       mi.last_attempt ? json_object_new_int64(mi.last_attempt) : NULL);
	json_object_object_add(o, "last_outcome",
			       mi.last_outcome ? json_object_new_string(mi.last_outcome) : NULL);
	json_object_object_add(o, "heartbeats", json_object_new_uint64(mi.heartbeats));
	json_object_object_add(o, "flatlines", json_object_new_uint64(mi.flatlines));
	json_object_object_add(o, "resolve_errors", json_object_new_uint64(mi.resolve_errors));
	json_object_object_add(o, "send_errors", json_object_new_uint64(mi.send_errors));
	json_object_object_add(o, "queries", json_object_new_uint64(mi.queries));
	return o;
}

/* The query cache's state (relay_qcache.c); null when it has none. */
static struct json_object *qcache_json(const struct relay_server *srv)
{
	struct relay_qcache_state st;
	struct json_object *o, *age;

	if (!relay_qcache_state(relay_proxy_qcache(srv->proxy), &st))
		return NULL;
	o = json_object_new_object();
	age = json_object_new_object();
	json_object_object_add(o, "on", json_object_new_boolean(st.on));
	json_object_object_add(o, "usable", json_object_new_boolean(st.usable));
	json_object_object_add(o, "attack_mode", json_object_new_boolean(st.attack));
	json_object_object_add(o, "unverified_pps", json_object_new_uint64(st.unverified_pps));
	json_object_object_add(o, "known_players", json_object_new_uint64(st.known));
	json_object_object_add(age, "getinfo", json_object_new_int64(st.age_ms[0]));
	json_object_object_add(age, "getstatus", json_object_new_int64(st.age_ms[1]));
	json_object_object_add(o, "age_ms", age);
	return o;
}

/*
 * What the admin page shows above its tables: which relay this is, since
 * when, in front of what (the first server: the classic one, or the first
 * of a servers file; "servers" names them all, GET /servers has each),
 * and each master's last heartbeat.
 */
static void get_status(struct relay_control *c, struct httpd_req *req)
{
	struct relay *r = c->r;
	const struct relay_server *srv = r->nservers > 0 ? r->servers[0] : NULL;
	struct json_object *o = json_object_new_object(), *hb, *masters, *names;
	long long now = (long long)time(NULL);
	char a[ADDR_STRLEN + 48];
	bool up;

	json_object_object_add(o, "version", json_object_new_string(RALLY_VERSION));
	json_object_object_add(o, "started", json_object_new_int64(r->started));
	json_object_object_add(o, "now", json_object_new_int64(now));
	json_object_object_add(o, "uptime_s", json_object_new_int64(now - r->started));
	json_object_object_add(
		o, "listen",
		srv != NULL && srv->proxy != NULL && srv->cfg.nlisten > 0
			? json_object_new_string(addr_str(&srv->bound[0], a, sizeof(a)))
			: NULL);
	if (srv == NULL) {
		json_object_object_add(o, "server", NULL);
	} else if (srv->cfg.server_tunnel) {
		snprintf(a, sizeof(a), "tunnel:%s", srv->cfg.server_realm);
		json_object_object_add(o, "server", json_object_new_string(a));
	} else {
		json_object_object_add(
			o, "server", json_object_new_string(addr_str(&srv->server, a, sizeof(a))));
	}
	json_object_object_add(o, "server_up",
			       srv != NULL && srv->hb != NULL &&
					       relay_heartbeat_server_up(srv->hb, &up)
				       ? json_object_new_boolean(up)
				       : NULL);
	json_object_object_add(
		o, "sessions",
		json_object_new_uint64(srv != NULL ? relay_proxy_session_count(srv->proxy) : 0));
	json_object_object_add(o, "max_sessions",
			       json_object_new_uint64(srv != NULL ? srv->cfg.max_sessions : 0));
	json_object_object_add(o, "bans",
			       json_object_new_uint64(banlist_count(relay_bans_list(r->bans))));
	json_object_object_add(o, "max_bans", json_object_new_int(RELAY_MAX_BANS));
	json_object_object_add(o, "tunnel", json_object_new_boolean(r->tunnel != NULL));
	json_object_object_add(o, "query_cache", srv != NULL ? qcache_json(srv) : NULL);
	names = json_object_new_array();
	for (size_t i = 0; i < r->nservers; i++)
		json_object_array_add(names, json_object_new_string(r->servers[i]->cfg.name));
	json_object_object_add(o, "servers", names);
	hb = json_object_new_object();
	masters = json_object_new_array();
	if (srv != NULL) {
		json_object_object_add(hb, "tag", json_object_new_string(srv->cfg.heartbeat_tag));
		json_object_object_add(hb, "flatline_tag",
				       json_object_new_string(srv->cfg.flatline_tag));
		json_object_object_add(
			hb, "interval_s",
			json_object_new_int64(srv->cfg.heartbeat_interval_ms / 1000));
		for (size_t i = 0; srv->hb != NULL && i < srv->cfg.nmasters; i++)
			json_object_array_add(masters, status_master(srv, i));
	}
	json_object_object_add(hb, "masters", masters);
	json_object_object_add(o, "heartbeat", hb);
	json_object_object_add(o, "listing", listing_json(srv));
	httpd_reply_json(req, 200, o);
	json_object_put(o);
}

static struct json_object *ban_json(const struct ban *b)
{
	struct json_object *o = json_object_new_object();
	char ip[INET6_ADDRSTRLEN];

	json_object_object_add(o, "ip",
			       json_object_new_string(addr_ip_fmt(&b->ip, ip, sizeof(ip))));
	json_object_object_add(o, "reason", json_object_new_string(b->reason));
	json_object_object_add(o, "created", json_object_new_int64(b->created));
	json_object_object_add(o, "expires", b->expires ? json_object_new_int64(b->expires) : NULL);
	return o;
}

static void get_bans(struct httpd_req *req, struct relay_bans *bans)
{
	struct banlist *bl = relay_bans_list(bans);
	struct json_object *arr = json_object_new_array();
	const struct ban *b = NULL;

	banlist_expire(bl, (long long)time(NULL));
	while ((b = banlist_next(bl, b)) != NULL)
		json_object_array_add(arr, ban_json(b));
	httpd_reply_json(req, 200, arr);
	json_object_put(arr);
}

/* srv: whose own bans these are (NULL: the global ones), for the log. */
static void put_ban(struct httpd_req *req, struct relay_bans *bans, const struct relay_server *srv,
		    const struct addr_ip *ip, const char *ipstr)
{
	struct banlist *bl = relay_bans_list(bans);
	char reason[BANLIST_REASON_MAX + 1], err[160], sn[RELAY_NAME_MAX + 16];
	long long duration;
	size_t len, closed;
	const char *body = httpd_body(req, &len);
	const struct ban *b;
	struct json_object *o;
	int created, saved;

	if (banlist_parse_request(body, len, reason, &duration, err, sizeof(err)) < 0) {
		httpd_reply_error(req, 400, err);
		return;
	}
	created = banlist_put(bl, ip, reason, duration, (long long)time(NULL));
	if (created == -ENOSPC) {
		httpd_reply_error(req, 507, "ban table full");
		return;
	}
	if (created < 0) {
		httpd_reply_error(req, 400, "bad ban");
		return;
	}
	closed = relay_bans_close_sessions(bans, ip);
	saved = relay_bans_save(bans);
	log_info("ban-%s ip=%s duration=%lld sessions-closed=%zu%s", created ? "added" : "updated",
		 ipstr, duration, closed,
		 srv != NULL ? relay_server_logname(srv, sn, sizeof(sn)) : "");
	b = banlist_find(bl, ip, (long long)time(NULL), NULL);
	if (saved < 0) {
		char msg[256];

		snprintf(msg, sizeof(msg), "ban is active but was not saved to %s: %s",
			 relay_bans_path(bans), strerror(-saved));
		httpd_reply_error(req, 500, msg);
		return;
	}
	o = ban_json(b);
	json_object_object_add(o, "sessions_closed", json_object_new_int64((int64_t)closed));
	httpd_reply_json(req, created ? 201 : 200, o);
	json_object_put(o);
}

static void delete_ban(struct httpd_req *req, struct relay_bans *bans,
		       const struct relay_server *srv, const struct addr_ip *ip, const char *ipstr)
{
	char sn[RELAY_NAME_MAX + 16];
	int saved;

	if (banlist_del(relay_bans_list(bans), ip) < 0) {
		httpd_reply_error(req, 404, "no such ban");
		return;
	}
	saved = relay_bans_save(bans);
	log_info("ban-removed ip=%s%s", ipstr,
		 srv != NULL ? relay_server_logname(srv, sn, sizeof(sn)) : "");
	if (saved < 0) {
		char msg[256];

		snprintf(msg, sizeof(msg), "ban is lifted but the change was not saved to %s: %s",
			 relay_bans_path(bans), strerror(-saved));
		httpd_reply_error(req, 500, msg);
		return;
	}
	httpd_reply(req, 204, NULL, "", 0);
}

/* PUT or DELETE .../bans/{ip} on one table (srv: a server's own). */
static void ban_ip(struct httpd_req *req, const char *m, struct relay_bans *bans,
		   const struct relay_server *srv, const char *ipstr)
{
	struct addr a;
	struct addr_ip ip;
	char canon[INET6_ADDRSTRLEN];

	if (strcmp(m, "PUT") != 0 && strcmp(m, "DELETE") != 0) {
		method_not_allowed(req, "PUT, DELETE");
		return;
	}
	if (addr_parse_ip(&a, ipstr) < 0) {
		httpd_reply_error(req, 400, "not an IP address");
		return;
	}
	addr_to_ip(&a, &ip);
	addr_ip_fmt(&ip, canon, sizeof(canon));
	if (strcmp(m, "PUT") == 0)
		put_ban(req, bans, srv, &ip, canon);
	else
		delete_ban(req, bans, srv, &ip, canon);
}

/* ---- servers ---- */

static struct json_object *traffic_json(uint64_t pkts, uint64_t bytes)
{
	struct json_object *d = json_object_new_object();

	json_object_object_add(d, "packets", json_object_new_uint64(pkts));
	json_object_object_add(d, "bytes", json_object_new_uint64(bytes));
	return d;
}

static struct json_object *masters_json(const struct relay_server *srv, long long now)
{
	struct json_object *arr = json_object_new_array();
	char a[RELAY_HOST_MAX + 8];

	for (size_t i = 0; i < srv->cfg.nmasters; i++) {
		struct relay_master_info mi;
		struct json_object *m = json_object_new_object(), *addrs = json_object_new_array();

		relay_heartbeat_master_info(srv->hb, i, &mi);
		json_object_object_add(m, "master",
				       json_object_new_string(relay_master_str(&srv->cfg.masters[i],
									       a, sizeof(a))));
		if (mi.have4)
			json_object_array_add(
				addrs, json_object_new_string(addr_str(&mi.addr4, a, sizeof(a))));
		if (mi.have6)
			json_object_array_add(
				addrs, json_object_new_string(addr_str(&mi.addr6, a, sizeof(a))));
		json_object_object_add(m, "addresses", addrs);
		json_object_object_add(m, "heartbeat", json_object_new_uint64(mi.heartbeats));
		json_object_object_add(m, "flatline", json_object_new_uint64(mi.flatlines));
		json_object_object_add(m, "resolve_error",
				       json_object_new_uint64(mi.resolve_errors));
		json_object_object_add(m, "send_error", json_object_new_uint64(mi.send_errors));
		json_object_object_add(
			m, "last_sent_ago_ms",
			mi.last_sent_ms != 0 ? json_object_new_int64(now - mi.last_sent_ms) : NULL);
		json_object_array_add(arr, m);
	}
	return arr;
}

static struct json_object *server_json(const struct relay_control *c,
				       const struct relay_server *srv)
{
	struct json_object *o = json_object_new_object(), *arr, *d;
	long long now = ev_now(c->r->loop);
	char a[ADDR_STRLEN + 48];

	json_object_object_add(o, "name", json_object_new_string(srv->cfg.name));
	arr = json_object_new_array();
	for (size_t i = 0; i < srv->cfg.nlisten; i++) {
		const struct addr *la = srv->proxy != NULL ? &srv->bound[i] : &srv->cfg.listen[i];

		json_object_array_add(arr, json_object_new_string(addr_str(la, a, sizeof(a))));
	}
	json_object_object_add(o, "listen", arr);
	if (srv->cfg.server_tunnel)
		snprintf(a, sizeof(a), "tunnel:%s", srv->cfg.server_realm);
	else
		addr_str(&srv->server, a, sizeof(a));
	json_object_object_add(o, "server", json_object_new_string(a));
	json_object_object_add(
		o, "state",
		json_object_new_string(relay_server_state_name(relay_heartbeat_state(srv->hb))));
	json_object_object_add(o, "sessions",
			       json_object_new_uint64(relay_proxy_session_count(srv->proxy)));
	json_object_object_add(o, "max_sessions", json_object_new_uint64(srv->cfg.max_sessions));
	json_object_object_add(o, "query_budget", json_object_new_uint64(srv->cfg.query_budget));
	json_object_object_add(o, "transparent", json_object_new_boolean(srv->cfg.transparent));
	json_object_object_add(
		o, "bans",
		json_object_new_uint64(srv->bans != NULL ? banlist_count(relay_bans_list(srv->bans))
							 : 0));
	json_object_object_add(o, "up_ms", json_object_new_int64(now - srv->started_ms));
	json_object_object_add(o, "to_server",
			       traffic_json(srv->st.pkts_to_server, srv->st.bytes_to_server));
	json_object_object_add(o, "to_client",
			       traffic_json(srv->st.pkts_to_client, srv->st.bytes_to_client));
	d = json_object_new_object();
	for (int i = 0; i < RELAY_DROP_NREASONS; i++)
		json_object_object_add(d, relay_drop_name((enum relay_drop)i),
				       json_object_new_uint64(srv->st.drops[i]));
	json_object_object_add(o, "drops", d);
	json_object_object_add(o, "heartbeat_tag", json_object_new_string(srv->cfg.heartbeat_tag));
	json_object_object_add(o, "heartbeats", masters_json(srv, now));
	json_object_object_add(o, "listing", listing_json(srv));
	json_object_object_add(o, "query_cache", qcache_json(srv));
	return o;
}

static void get_servers(struct relay_control *c, struct httpd_req *req)
{
	struct json_object *arr = json_object_new_array();

	for (size_t i = 0; i < c->r->nservers; i++)
		json_object_array_add(arr, server_json(c, c->r->servers[i]));
	httpd_reply_json(req, 200, arr);
	json_object_put(arr);
}

/* GET /servers/{name}/healthz: for monitors, without a token. */
static void server_healthz(struct httpd_req *req, const struct relay_server *srv)
{
	enum relay_server_state st = relay_heartbeat_state(srv->hb);
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "status",
			       json_object_new_string(st == RELAY_SERVER_DOWN ? "down" : "ok"));
	json_object_object_add(o, "server", json_object_new_string(srv->cfg.name));
	json_object_object_add(o, "state", json_object_new_string(relay_server_state_name(st)));
	json_object_object_add(o, "sessions",
			       json_object_new_uint64(relay_proxy_session_count(srv->proxy)));
	json_object_object_add(o, "listing", listing_json(srv));
	httpd_reply_json(req, st == RELAY_SERVER_DOWN ? 503 : 200, o);
	json_object_put(o);
}

/*
 * Alive, and which masters list each server, since when and why not
 * (relay_listing.c). 200 either way: a process that runs is healthy; a
 * missing listing is for alerts, not for restarts. The classic relay's
 * answer is what it always was, {"status":"ok"}, plus "listing" when it
 * heartbeats.
 */
static void healthz(struct relay_control *c, struct httpd_req *req)
{
	struct json_object *o = json_object_new_object(), *d, *l;

	json_object_object_add(o, "status", json_object_new_string("ok"));
	if (c->r->cfg.servers_file[0] == '\0') {
		l = c->r->nservers > 0 ? listing_json(c->r->servers[0]) : NULL;
		if (l != NULL)
			json_object_object_add(o, "listing", l);
		httpd_reply_json(req, 200, o);
		json_object_put(o);
		return;
	}
	d = json_object_new_object();
	l = json_object_new_object();
	for (size_t i = 0; i < c->r->nservers; i++) {
		const struct relay_server *srv = c->r->servers[i];
		struct json_object *one = listing_json(srv);

		json_object_object_add(d, srv->cfg.name,
				       json_object_new_string(relay_server_state_name(
					       relay_heartbeat_state(srv->hb))));
		if (one != NULL)
			json_object_object_add(l, srv->cfg.name, one);
	}
	json_object_object_add(o, "servers", d);
	json_object_object_add(o, "listing", l);
	httpd_reply_json(req, 200, o);
	json_object_put(o);
}

/*
 * /servers/{name}[rest]: the server and rest ("" or "/..."), or NULL with
 * the 404 sent.
 */
static struct relay_server *path_server(struct relay_control *c, struct httpd_req *req,
					const char *path, const char **rest)
{
	const char *name = path + strlen("/servers/"), *slash = strchr(name, '/');
	size_t n = slash != NULL ? (size_t)(slash - name) : strlen(name);
	char buf[RELAY_NAME_MAX + 1];
	struct relay_server *srv = NULL;

	if (relay_server_name_ok(name, n)) {
		memcpy(buf, name, n);
		buf[n] = '\0';
		srv = relay_server_find(c->r, buf);
	}
	if (srv == NULL) {
		httpd_reply_error(req, 404, "no such server");
		return NULL;
	}
	*rest = name + n;
	return srv;
}

static void servers_route(struct relay_control *c, struct httpd_req *req, const char *m,
			  struct relay_server *srv, const char *rest)
{
	if (rest[0] == '\0') {
		struct json_object *o;

		if (strcmp(m, "GET") != 0) {
			method_not_allowed(req, "GET");
			return;
		}
		o = server_json(c, srv);
		httpd_reply_json(req, 200, o);
		json_object_put(o);
		return;
	}
	if (strcmp(rest, "/bans") == 0 || strncmp(rest, "/bans/", 6) == 0) {
		if (srv->bans == NULL) {
			httpd_reply_error(req, 404, "this server has only the global bans: /bans");
			return;
		}
		if (rest[5] == '\0') {
			if (strcmp(m, "GET") != 0) {
				method_not_allowed(req, "GET");
				return;
			}
			get_bans(req, srv->bans);
			return;
		}
		ban_ip(req, m, srv->bans, srv, rest + 6);
		return;
	}
	httpd_reply_error(req, 404, "no such endpoint");
}

/* ---- metrics ---- */

static void family(struct strbuf *b, const char *name, const char *type, const char *help)
{
	strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void metric(struct strbuf *b, const char *name, const char *type, const char *help,
		   unsigned long long v)
{
	strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, v);
}

/* One line per server: name{server="NAME",more} value. */
static void per_server(struct strbuf *b, struct relay_server *const *sv, size_t n, const char *name,
		       const char *more,
		       unsigned long long (*val)(const struct relay_server *, const void *),
		       const void *arg)
{
	for (size_t i = 0; i < n; i++) {
		char lb[RELAY_NAME_MAX + 96];

		strbuf_printf(b, "%s%s %llu\n", name,
			      relay_server_labels(sv[i], more, lb, sizeof(lb)), val(sv[i], arg));
	}
}

static unsigned long long v_sessions(const struct relay_server *s, const void *a)
{
	(void)a;
	return relay_proxy_session_count(s->proxy);
}

static unsigned long long v_opened(const struct relay_server *s, const void *a)
{
	(void)a;
	return s->st.sessions_opened;
}

static unsigned long long v_evicted(const struct relay_server *s, const void *a)
{
	(void)a;
	return s->st.sessions_evicted;
}

static unsigned long long v_pkts(const struct relay_server *s, const void *a)
{
	return *(const bool *)a ? s->st.pkts_to_server : s->st.pkts_to_client;
}

static unsigned long long v_bytes(const struct relay_server *s, const void *a)
{
	return *(const bool *)a ? s->st.bytes_to_server : s->st.bytes_to_client;
}

static unsigned long long v_drops(const struct relay_server *s, const void *a)
{
	return s->st.drops[*(const int *)a];
}

static unsigned long long v_sources(const struct relay_server *s, const void *a)
{
	(void)a;
	return relay_proxy_ratelim_count(s->proxy);
}

static unsigned long long v_own_bans(const struct relay_server *s, const void *a)
{
	(void)a;
	return s->bans != NULL ? banlist_count(relay_bans_list(s->bans)) : 0;
}

static void get_metrics(struct relay_control *c, struct httpd_req *req)
{
	static const bool up = true, down = false;
	struct relay *r = c->r;
	struct relay_server *const *sv = r->servers;
	struct relay_server zero = {.r = r}, *none[1] = {&zero};
	size_t n = r->nservers;
	bool classic = r->cfg.servers_file[0] == '\0', any_kernel = false;
	struct strbuf b;

	/* A classic relay without a game port (a tunnel alone) shows zeros,
	 * as it always did. */
	if (classic && n == 0) {
		sv = none;
		n = 1;
	}
	strbuf_init(&b, 1 << 20);
	family(&b, "rally_relay_sessions", "gauge", "Open sessions.");
	per_server(&b, sv, n, "rally_relay_sessions", NULL, v_sessions, NULL);
	family(&b, "rally_relay_sessions_opened_total", "counter", "Sessions opened.");
	per_server(&b, sv, n, "rally_relay_sessions_opened_total", NULL, v_opened, NULL);
	family(&b, "rally_relay_sessions_evicted_total", "counter",
	       "Unconfirmed sessions closed to make room for a new client.");
	per_server(&b, sv, n, "rally_relay_sessions_evicted_total", NULL, v_evicted, NULL);
	family(&b, "rally_relay_packets_total", "counter", "Datagrams forwarded.");
	for (size_t i = 0; i < n; i++) {
		per_server(&b, sv + i, 1, "rally_relay_packets_total", "direction=\"to_server\"",
			   v_pkts, &up);
		per_server(&b, sv + i, 1, "rally_relay_packets_total", "direction=\"to_client\"",
			   v_pkts, &down);
	}
	family(&b, "rally_relay_bytes_total", "counter", "Payload bytes forwarded.");
	for (size_t i = 0; i < n; i++) {
		per_server(&b, sv + i, 1, "rally_relay_bytes_total", "direction=\"to_server\"",
			   v_bytes, &up);
		per_server(&b, sv + i, 1, "rally_relay_bytes_total", "direction=\"to_client\"",
			   v_bytes, &down);
	}
	family(&b, "rally_relay_drops_total", "counter", "Datagrams dropped, by reason.");
	for (size_t i = 0; i < n; i++) {
		for (int k = 0; k < RELAY_DROP_NREASONS; k++) {
			char more[64];

			snprintf(more, sizeof(more), "reason=\"%s\"",
				 relay_drop_name((enum relay_drop)k));
			per_server(&b, sv + i, 1, "rally_relay_drops_total", more, v_drops, &k);
		}
	}
	for (size_t i = 0; i < n; i++)
		any_kernel = any_kernel || relay_proxy_kernel_drops(sv[i]->proxy) >= 0;
	if (any_kernel) {
		family(&b, "rally_relay_kernel_drops_total", "counter",
		       "Datagrams the kernel dropped on the public socket (receive buffer full).");
		for (size_t i = 0; i < n; i++) {
			long long d = relay_proxy_kernel_drops(sv[i]->proxy);
			char lb[RELAY_NAME_MAX + 32];

			if (d >= 0)
				strbuf_printf(&b, "rally_relay_kernel_drops_total%s %lld\n",
					      relay_server_labels(sv[i], NULL, lb, sizeof(lb)), d);
		}
	}
	relay_heartbeat_metrics(r, &b);
	relay_transparent_metrics(r, &b);
	metric(&b, "rally_relay_bans", "gauge", "Active bans.",
	       banlist_count(relay_bans_list(r->bans)));
	family(&b, "rally_relay_query_sources", "gauge",
	       "Source IPs remembered by the query limiter.");
	per_server(&b, sv, n, "rally_relay_query_sources", NULL, v_sources, NULL);
	metric(&b, "rally_relay_state_write_errors_total", "counter",
	       "Failed writes of the state file.", r->state_write_errors);
	metric(&b, "rally_relay_control_unauthorized_total", "counter",
	       "Control API requests refused for a missing or wrong token.", c->unauthorized);
	if (!classic) {
		metric(&b, "rally_relay_servers", "gauge", "Servers fronted.", r->nservers);
		family(&b, "rally_relay_server_bans", "gauge",
		       "Active bans of one server's own (the global ones aside).");
		per_server(&b, sv, n, "rally_relay_server_bans", NULL, v_own_bans, NULL);
		strbuf_printf(&b,
			      "# HELP rally_relay_server_reloads_total Servers file reloads "
			      "(SIGHUP), by outcome.\n"
			      "# TYPE rally_relay_server_reloads_total counter\n"
			      "rally_relay_server_reloads_total{outcome=\"ok\"} %llu\n"
			      "rally_relay_server_reloads_total{outcome=\"refused\"} %llu\n",
			      (unsigned long long)r->reloads_ok,
			      (unsigned long long)r->reloads_refused);
	}
	if (r->tunnel != NULL)
		relay_tunnel_metrics(r->tunnel, &b);
	relay_qcache_metrics(r, &b);
	(void)httpd_reply_metrics(req, &b);
}

static void method_not_allowed(struct httpd_req *req, const char *allow)
{
	httpd_add_header(req, "Allow", allow);
	httpd_reply_error(req, 405, "method not allowed");
}

static void on_request(struct httpd_req *req, void *arg)
{
	struct relay_control *c = arg;
	const char *m = httpd_method(req), *path = httpd_path(req);

	c->requests++;
	if (strcmp(path, "/healthz") == 0) {
		if (strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0) {
			method_not_allowed(req, "GET, HEAD");
			return;
		}
		healthz(c, req);
		return;
	}
	if (relay_page_handle(req))
		return;
	/* A server's health needs no token either (monitors). */
	if (strncmp(path, "/servers/", 9) == 0) {
		size_t n = strlen(path);

		if (n > 8 && strcmp(path + n - 8, "/healthz") == 0) {
			const char *rest;
			struct relay_server *srv = path_server(c, req, path, &rest);

			if (srv == NULL)
				return;
			if (strcmp(rest, "/healthz") != 0) {
				httpd_reply_error(req, 404, "no such endpoint");
				return;
			}
			if (strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0) {
				method_not_allowed(req, "GET, HEAD");
				return;
			}
			server_healthz(req, srv);
			return;
		}
	}
	if (!authorized(c, req)) {
		unsigned long sup;
		char a[ADDR_STRLEN];

		c->unauthorized++;
		if (log_ratelimit_ok(&c->warn_auth, ev_now(c->r->loop), 10000, &sup))
			log_warnx("control-unauthorized peer=%s path=%s suppressed=%lu",
				  addr_str(httpd_peer(req), a, sizeof(a)), path, sup);
		httpd_add_header(req, "WWW-Authenticate", "Bearer realm=\"rally-relay\"");
		httpd_reply_error(req, 401, "missing or wrong bearer token");
		return;
	}
	if (strcmp(path, "/sessions") == 0) {
		if (strcmp(m, "GET") != 0) {
			method_not_allowed(req, "GET");
			return;
		}
		get_sessions(c, req);
	} else if (strcmp(path, "/bans") == 0) {
		if (strcmp(m, "GET") != 0) {
			method_not_allowed(req, "GET");
			return;
		}
		get_bans(req, c->r->bans);
	} else if (strncmp(path, "/bans/", 6) == 0) {
		ban_ip(req, m, c->r->bans, NULL, path + 6);
	} else if (strcmp(path, "/servers") == 0) {
		if (strcmp(m, "GET") != 0) {
			method_not_allowed(req, "GET");
			return;
		}
		get_servers(c, req);
	} else if (strncmp(path, "/servers/", 9) == 0) {
		const char *rest;
		struct relay_server *srv = path_server(c, req, path, &rest);

		if (srv != NULL)
			servers_route(c, req, m, srv, rest);
	} else if (strcmp(path, "/status") == 0) {
		if (strcmp(m, "GET") != 0) {
			method_not_allowed(req, "GET");
			return;
		}
		get_status(c, req);
	} else if (strcmp(path, "/metrics") == 0) {
		if (strcmp(m, "GET") != 0) {
			method_not_allowed(req, "GET");
			return;
		}
		get_metrics(c, req);
	} else {
		httpd_reply_error(req, 404, "no such endpoint");
	}
}

/* ---- binding ---- */

static int try_bind(struct relay_control *c)
{
	struct httpd_cfg cfg = {
		.max_body = BODY_MAX,
		.conn_limit = 64,
		.per_ip_limit = 0,
		.conn_timeout_s = 10,
		.headers = common_headers,
		.nheaders = sizeof(common_headers) / sizeof(common_headers[0]),
	};
	struct addr a = c->r->cfg.control;
	int fd = httpd_listen(&a);

	if (fd < 0)
		return fd;
	c->httpd = httpd_new_take(c->r->loop, fd, &cfg, on_request, c);
	if (c->httpd == NULL)
		return -errno;
	c->bound = a;
	return 0;
}

static void on_retry(struct ev_timer *t, void *arg)
{
	struct relay_control *c = arg;
	char a[ADDR_STRLEN];
	int r = try_bind(c);

	if (r < 0) {
		c->bind_failures++;
		/* Say it every time for the first minute, then every 10 min. */
		if (c->bind_failures <= 6 || c->bind_failures % 60 == 0) {
			errno = -r;
			log_warn("control-bind-retry control=%s in=10s",
				 addr_str(&c->r->cfg.control, a, sizeof(a)));
		}
		ev_timer_start(c->r->loop, t, RELAY_CONTROL_RETRY_MS, on_retry, c);
		return;
	}
	log_info("control-listening control=%s", addr_str(&c->bound, a, sizeof(a)));
}

int relay_control_new(struct relay *r)
{
	struct relay_control *c = calloc(1, sizeof(*c));
	char a[ADDR_STRLEN];
	int ret;

	if (c == NULL)
		return -ENOMEM;
	c->r = r;
	ev_timer_init(&c->retry);
	if (r->cfg.token_file[0] == '\0') {
		log_err("token-missing reason=\"--control needs --token-file\"");
		free(c);
		return -EINVAL;
	}
	ret = relay_token_load(r->cfg.token_file, c->token_hash);
	if (ret < 0) {
		free(c);
		return ret;
	}
	r->control = c;
	ret = try_bind(c);
	if (ret < 0) {
		errno = -ret;
		log_warn("control-bind-fail control=%s retry-in=10s",
			 addr_str(&r->cfg.control, a, sizeof(a)));
		c->bind_failures = 1;
		ev_timer_start(r->loop, &c->retry, RELAY_CONTROL_RETRY_MS, on_retry, c);
	}
	return 0;
}

bool relay_control_bound(const struct relay_control *c, struct addr *addr)
{
	if (c == NULL || c->httpd == NULL)
		return false;
	*addr = c->bound;
	return true;
}

int relay_control_reload(struct relay_control *c)
{
	uint8_t h[crypto_generichash_BYTES];
	int r = relay_token_load(c->r->cfg.token_file, h);

	if (r < 0) {
		log_warnx("token-reload-refused file=%s kept=old", c->r->cfg.token_file);
		return r;
	}
	memcpy(c->token_hash, h, sizeof(h));
	sodium_memzero(h, sizeof(h));
	return 0;
}

void relay_control_free(struct relay_control *c)
{
	if (c == NULL)
		return;
	ev_timer_stop(c->r->loop, &c->retry);
	httpd_free(c->httpd);
	sodium_memzero(c->token_hash, sizeof(c->token_hash));
	free(c);
}
