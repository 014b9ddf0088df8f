/*
 * The lobby's /metrics and /healthz (lobby_metrics.h).
 *
 *   GET /metrics   Prometheus text (version 0.0.4), every family with HELP
 *                  and TYPE and every label value always present (zeros
 *                  included), so a rule or a panel has series from the
 *                  first scrape; with --metrics-token-file a bearer token
 *   GET /healthz   {"status":"ok",...}, no token (monitors)
 *
 * common/httpd runs libmicrohttpd in our loop: requests never block it,
 * and its limits (16 KiB of request per connection, 16 connections, 4 per
 * IP, 10 s idle) keep garbage and floods at the door. The token is kept as
 * its BLAKE2b hash and compared in constant time, as rally-relay's control
 * API does.
 */
#include "lobby_metrics.h"

#include <errno.h>
#include <json-c/json.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "httpd.h"
#include "lobby.h"
#include "lobby_dual.h"
#include "log.h"
#include "strbuf.h"
#include "token.h"

#define METRICS_MAX (256 * 1024) /* bytes of /metrics at most (a few KiB in use) */

struct lobby_metrics {
	struct lobby *l;
	struct httpd *httpd;
	struct addr bound;
	bool has_token;
	uint8_t token_hash[TOKEN_HASH];
	uint64_t requests, unauthorized;
	struct log_ratelimit warn_auth;
};

static const struct httpd_header common_headers[] = {
	{"Cache-Control", "no-store"},
	{"X-Content-Type-Options", "nosniff"},
};

static const char *const path_names[LOBBY_PATH_N] = {"lan", "public", "v6", "punched", "relay"};
static const char *const join_names[LOBBY_JOIN_N] = {"accepted", "version", "full",
						     "wrong_password"};
static const char *const left_names[LOBBY_LEFT_N] = {"left", "silent", "version"};
static const char *const dir_names[LOBBY_DIR_N] = {"from_peer", "to_peer", "from_game", "to_game"};
static const char *const round_names[LOBBY_ROUND_N] = {"ok", "failed", "nobody", "aborted"};
static const char *const upload_names[LOBBY_UPLOAD_N] = {"stored", "failed", "dropped"};

const char *lobby_metrics_path_name(enum lobby_metrics_path p)
{
	return (unsigned)p < LOBBY_PATH_N ? path_names[p] : "public";
}

const char *lobby_metrics_left_name(enum lobby_metrics_left why)
{
	return (unsigned)why < LOBBY_LEFT_N ? left_names[why] : "left";
}

/* ---- the token ---- */

static int token_load_metrics(const char *path, uint8_t hash[static TOKEN_HASH])
{
	return token_load(path, "metrics-token", "metrics-token", hash);
}

int lobby_metrics_check_token(const char *path)
{
	uint8_t h[TOKEN_HASH];
	int r = token_load_metrics(path, h);

	sodium_memzero(h, sizeof(h));
	return r;
}

static bool authorized(const struct lobby_metrics *m, struct httpd_req *req)
{
	return !m->has_token || token_check(m->token_hash, req);
}

/* ---- the text ---- */

static void family(struct strbuf *b, const char *name, const char *type, const char *help)
{
	strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void one(struct strbuf *b, const char *name, const char *type, const char *help,
		unsigned long long v)
{
	family(b, name, type, help);
	strbuf_printf(b, "%s %llu\n", name, v);
}

/* name{label="names[i]"} v[i] for each i. */
static void labelled(struct strbuf *b, const char *name, const char *type, const char *help,
		     const char *label, const char *const *names, const uint64_t *v, size_t n)
{
	family(b, name, type, help);
	for (size_t i = 0; i < n; i++)
		strbuf_printf(b, "%s{%s=\"%s\"} %llu\n", name, label, names[i],
			      (unsigned long long)v[i]);
}

static uint64_t peers_now(const struct lobby *l)
{
	uint64_t n = 0;

	for (size_t i = 0; i < LOBBY_PATH_N; i++)
		n += l->ctr.peers[i];
	return n;
}

void lobby_metrics_render(const struct lobby *l, struct strbuf *b)
{
	const struct lobby_counters *c = &l->ctr;
	const struct lobby_metrics *m = l->metrics;
	struct lobby_net_stats ns = {0};
	struct lobby_dual_stats ds = {0};

	if (l->net != NULL)
		lobby_net_stats(l->net, &ns);
	if (l->dual != NULL)
		lobby_dual_stats(l->dual, &ds);

	family(b, "rally_lobby_info", "gauge",
	       "Always 1: the lobby's version, the netpunch protocol it speaks and its role "
	       "(relay: --relay-only; host: a player's lobby).");
	strbuf_printf(b, "rally_lobby_info{version=\"%s\",protocol=\"%s\",role=\"%s\"} 1\n",
		      RALLY_VERSION, LOBBY_VERSION_DEFAULT, l->cfg.relay_only ? "relay" : "host");
	one(b, "rally_lobby_start_time_seconds", "gauge",
	    "When the process started, in seconds since the Unix epoch.",
	    (unsigned long long)c->start_s);
	one(b, "rally_lobby_max_players", "gauge", "Players the lobby takes (--max-players).",
	    l->cfg.max_players);

	labelled(b, "rally_lobby_peers", "gauge",
		 "Joined peers now, by how they came in (the host's traversal record).", "path",
		 path_names, c->peers, LOBBY_PATH_N);
	labelled(b, "rally_lobby_joins_total", "counter",
		 "Joins at this lobby by outcome: accepted (a new player), refused for another "
		 "version or a full lobby (each join request refused: a joiner may ask again "
		 "every 3 s), or a frame under another key (wrong password, told every 2 s at "
		 "most per address).",
		 "outcome", join_names, c->joins, LOBBY_JOIN_N);
	labelled(b, "rally_lobby_peers_left_total", "counter",
		 "Peers gone from the lobby, by reason: left (said so), silent (nothing for 10 "
		 "s), version (rejoined from another build).",
		 "reason", left_names, c->left, LOBBY_LEFT_N);

	labelled(b, "rally_lobby_game_frames_total", "counter",
		 "Game frames: from peers, sent on to peers (a relay lobby forwards each to the "
		 "others), from and to the game beside this lobby.",
		 "direction", dir_names, c->frames, LOBBY_DIR_N);
	labelled(b, "rally_lobby_game_bytes_total", "counter",
		 "Bytes of those game frames (the frame alone, no NP1 header or seal).",
		 "direction", dir_names, c->frame_bytes, LOBBY_DIR_N);
	one(b, "rally_lobby_mesh_envelopes_total", "counter",
	    "Mesh envelopes passed on to another joiner.", c->envelopes);

	{
		static const char *const dirs[] = {"in", "out"};
		uint64_t v[] = {ns.rx, ns.tx};

		labelled(b, "rally_lobby_datagrams_total", "counter",
			 "Datagrams on the lobby socket, read and sent.", "direction", dirs, v, 2);
	}
	{
		static const char *const why[] = {"bad_np1", "bad_seal", "replayed", "plain",
						  "bad_msg"};
		uint64_t v[] = {ns.bad_np1, ns.bad_seal, ns.replayed, ns.plain_dropped, ns.bad_msg};

		labelled(b, "rally_lobby_drops_total", "counter",
			 "Datagrams dropped by the lobby socket: not NP1, a sealed frame that "
			 "did not open (wrong key, tampered), a replayed one, a plain frame in a "
			 "sealed session, a message that did not decode.",
			 "reason", why, v, 5);
	}

	{
		static const char *const out[] = {"ok", "failed"};
		uint64_t polls[] = {c->polls_ok, c->polls_failed};
		static const char *const kn[] = {"answered", "bad"};
		uint64_t knocks[] = {c->knocks_answered, c->knocks_bad};
		uint64_t pub[] = {c->publish_ok, c->publish_failed};

		labelled(b, "rally_lobby_knock_polls_total", "counter",
			 "Polls of the master's /knock (the rendezvous) by outcome.", "outcome",
			 out, polls, 2);
		labelled(b, "rally_lobby_knocks_total", "counter",
			 "Knocks the polls brought: answered (punched toward, a relay port "
			 "bound) or bad (not ours, tampered, replayed, a bad code).",
			 "outcome", kn, knocks, 2);
		labelled(b, "rally_lobby_publish_total", "counter",
			 "Announcements to the master's list (/announce, every 10 s while "
			 "published) by outcome.",
			 "outcome", out, pub, 2);
	}
	one(b, "rally_lobby_publish_last_success_timestamp_seconds", "gauge",
	    "When the master last took an announcement (Unix time; 0: never).",
	    (unsigned long long)c->publish_last_ok_s);
	one(b, "rally_lobby_publish_enabled", "gauge",
	    "1 while the lobby is to be listed (--publish URL --public, or the game's publish "
	    "command).",
	    c->publishing);

	labelled(b, "rally_lobby_save_rounds_total", "counter",
		 "Save transfer rounds by outcome: ok (the players that stayed verified the "
		 "save), failed (one did not), nobody (no player to share with), aborted (the "
		 "save could not be read).",
		 "outcome", round_names, c->rounds, LOBBY_ROUND_N);
	{
		static const char *const tg[] = {"done", "failed"};
		uint64_t v[] = {c->targets_done, c->targets_failed};
		static const char *const tr[] = {"udp", "tcp"};
		uint64_t bytes[] = {c->save_bytes_udp, c->save_bytes_tcp};

		labelled(b, "rally_lobby_save_targets_total", "counter",
			 "Players sent a save, by outcome.", "outcome", tg, v, 2);
		labelled(b, "rally_lobby_save_bytes_sent_total", "counter",
			 "Save bytes sent, by transport (UDP chunks, the bulk TCP stream).",
			 "transport", tr, bytes, 2);
	}
	labelled(b, "rally_lobby_uploads_total", "counter",
		 "A relay lobby's uploads of the world by its leader, by outcome: stored (verified "
		 "and kept), failed (the receiver gave up), dropped (the leader left, or nothing "
		 "came for 30 s).",
		 "outcome", upload_names, c->uploads, LOBBY_UPLOAD_N);
	{
		static const char *const ev[] = {"accepted", "refused", "timeout", "too_many"};
		uint64_t v[] = {c->bulk_accepted, c->bulk_refused, c->bulk_timeouts,
				c->bulk_too_many};

		labelled(b, "rally_lobby_bulk_connections_total", "counter",
			 "Connections to the bulk TCP listener (saves over TCP): accepted, "
			 "refused (a bad or late hello; timeouts are refused too), timeout (no "
			 "hello in 5 s), too_many (over the cap, closed at once).",
			 "event", ev, v, 4);
	}
	one(b, "rally_lobby_dual_links", "gauge",
	    "Dual TCP backup links up now (one per peer in a sealed session).", ds.links_open);
	{
		static const char *const ev[] = {"up", "refused", "too_many", "dial"};
		uint64_t v[] = {ds.links_up, ds.refused, ds.too_many, ds.dials};
		static const char *const dirs[] = {"in", "out"};
		uint64_t fr[] = {ds.frames_in, ds.frames_out};

		labelled(b, "rally_lobby_dual_link_events_total", "counter",
			 "Dual TCP backup link events: links up, refused, over the cap, dials.",
			 "event", ev, v, 4);
		labelled(b, "rally_lobby_dual_frames_total", "counter",
			 "Sealed frames copied over the dual TCP links.", "direction", dirs, fr, 2);
	}
	one(b, "rally_lobby_dual_queue_drops_total", "counter",
	    "Frames dropped from a full dual link queue.", ds.queue_drops);
	one(b, "rally_lobby_metrics_unauthorized_total", "counter",
	    "/metrics requests refused for a missing or wrong bearer token.",
	    m != NULL ? m->unauthorized : 0);
}

/* ---- the endpoint ---- */

static void healthz(struct lobby_metrics *m, struct httpd_req *req)
{
	const struct lobby *l = m->l;
	struct json_object *o = json_object_new_object();
	long long now = (long long)time(NULL);

	json_object_object_add(o, "status", json_object_new_string("ok"));
	json_object_object_add(o, "role",
			       json_object_new_string(l->cfg.relay_only ? "relay" : "host"));
	json_object_object_add(o, "peers", json_object_new_int64((int64_t)peers_now(l)));
	json_object_object_add(o, "uptime_s", json_object_new_int64(now - l->ctr.start_s));
	json_object_object_add(o, "publish_last_ok_age_s",
			       l->ctr.publish_last_ok_s > 0
				       ? json_object_new_int64(now - l->ctr.publish_last_ok_s)
				       : NULL);
	httpd_reply_json(req, 200, o);
	json_object_put(o);
}

static void metrics(struct lobby_metrics *m, struct httpd_req *req)
{
	struct strbuf b;

	strbuf_init(&b, METRICS_MAX);
	lobby_metrics_render(m->l, &b);
	(void)httpd_reply_metrics(req, &b);
}

static void on_request(struct httpd_req *req, void *arg)
{
	struct lobby_metrics *m = arg;
	const char *method = httpd_method(req), *path = httpd_path(req);
	bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;

	m->requests++;
	if (strcmp(path, "/healthz") != 0 && strcmp(path, "/metrics") != 0) {
		httpd_reply_error(req, 404, "no such endpoint (/metrics, /healthz)");
		return;
	}
	if (!get) {
		httpd_add_header(req, "Allow", "GET, HEAD");
		httpd_reply_error(req, 405, "method not allowed");
		return;
	}
	if (strcmp(path, "/healthz") == 0) {
		healthz(m, req);
		return;
	}
	if (!authorized(m, req)) {
		unsigned long sup;
		char a[ADDR_STRLEN];

		m->unauthorized++;
		if (log_ratelimit_ok(&m->warn_auth, ev_now(m->l->loop), 10000, &sup))
			log_warnx("metrics-unauthorized peer=%s suppressed=%lu",
				  addr_str(httpd_peer(req), a, sizeof(a)), sup);
		httpd_add_header(req, "WWW-Authenticate", "Bearer realm=\"rally-lobby\"");
		httpd_reply_error(req, 401, "missing or wrong bearer token");
		return;
	}
	metrics(m, req);
}

int lobby_metrics_start(struct lobby *l)
{
	struct httpd_cfg cfg = {
		.max_body = 1024,
		.conn_limit = 16,
		.per_ip_limit = 4,
		.conn_timeout_s = 10,
		.headers = common_headers,
		.nheaders = sizeof(common_headers) / sizeof(common_headers[0]),
	};
	struct lobby_metrics *m;
	struct addr a = l->cfg.metrics;
	char s[ADDR_STRLEN];
	int fd, r;

	if (!l->cfg.metrics_set)
		return 0;
	/* main refuses this at parse time; a second look costs nothing. */
	if (!addr_is_loopback(&a) && l->cfg.metrics_token_file[0] == '\0') {
		log_err("metrics-refused metrics=%s reason=\"not loopback: give "
			"--metrics-token-file\"",
			addr_str(&a, s, sizeof(s)));
		return -EPERM;
	}
	m = calloc(1, sizeof(*m));
	if (m == NULL)
		return -ENOMEM;
	m->l = l;
	if (l->cfg.metrics_token_file[0] != '\0') {
		r = token_load_metrics(l->cfg.metrics_token_file, m->token_hash);
		if (r < 0) {
			free(m);
			return r;
		}
		m->has_token = true;
	}
	fd = httpd_listen(&a);
	if (fd < 0) {
		errno = -fd;
		log_warn("metrics-bind-fail metrics=%s", addr_str(&l->cfg.metrics, s, sizeof(s)));
		sodium_memzero(m->token_hash, sizeof(m->token_hash));
		free(m);
		return fd;
	}
	m->httpd = httpd_new_take(l->loop, fd, &cfg, on_request, m);
	if (m->httpd == NULL) {
		r = -errno;
		log_warn("metrics-httpd-fail");
		sodium_memzero(m->token_hash, sizeof(m->token_hash));
		free(m);
		return r;
	}
	m->bound = a;
	l->metrics = m;
	log_info("metrics-listening metrics=%s token=%s", addr_str(&a, s, sizeof(s)),
		 m->has_token ? "yes" : "no");
	return 0;
}

void lobby_metrics_reload(struct lobby *l)
{
	struct lobby_metrics *m = l->metrics;
	uint8_t h[TOKEN_HASH];

	if (m == NULL || !m->has_token) {
		log_info("reload-nothing reason=\"no --metrics-token-file\"");
		return;
	}
	if (token_load_metrics(l->cfg.metrics_token_file, h) < 0) {
		log_warnx("metrics-token-reload-refused file=%s kept=old",
			  l->cfg.metrics_token_file);
		return;
	}
	memcpy(m->token_hash, h, sizeof(h));
	sodium_memzero(h, sizeof(h));
	log_info("metrics-token-reloaded file=%s", l->cfg.metrics_token_file);
}

void lobby_metrics_free(struct lobby *l)
{
	struct lobby_metrics *m = l->metrics;

	if (m == NULL)
		return;
	httpd_free(m->httpd);
	sodium_memzero(m->token_hash, sizeof(m->token_hash));
	free(m);
	l->metrics = NULL;
}
