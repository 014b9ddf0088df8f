/*
 * The control API: sessions, bans, metrics, health, over HTTP with a bearer
 * token.
 *
 *   GET    /healthz            no token needed
 *   GET    /sessions           open sessions: real client, upstream port, ...
 *   GET    /bans
 *   PUT    /bans/{ip}          {"reason": "...", "duration": seconds}
 *   DELETE /bans/{ip}
 *   GET    /metrics            Prometheus text
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
#include "statefile.h"
#include "strbuf.h"

#define TOKEN_FILE_MAX (4096)
#define BODY_MAX       (4096)

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
	char *text = NULL;
	size_t len;
	int r = statefile_read(path, TOKEN_FILE_MAX, &text, &len);

	if (r < 0) {
		errno = -r;
		log_warn("token-file-unreadable file=%s", path);
		return r;
	}
	while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' ' ||
			   text[len - 1] == '\t'))
		text[--len] = '\0';
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)text[i];

		if (c <= ' ' || c >= 0x7f) {
			log_err("token-refused file=%s reason=\"not printable ASCII without "
				"spaces\"",
				path);
			sodium_memzero(text, len);
			free(text);
			return -EINVAL;
		}
	}
	if (len < RELAY_MIN_TOKEN) {
		log_err("token-refused file=%s reason=\"shorter than %d characters\"", path,
			RELAY_MIN_TOKEN);
		sodium_memzero(text, len);
		free(text);
		return -EINVAL;
	}
	crypto_generichash(hash, crypto_generichash_BYTES, (const uint8_t *)text, len, NULL, 0);
	sodium_memzero(text, len);
	free(text);
	return 0;
}

bool relay_token_check(const uint8_t hash[static RELAY_TOKEN_HASH], struct httpd_req *req)
{
	const char *h = httpd_header(req, "Authorization");
	uint8_t got[crypto_generichash_BYTES];
	size_t len;

	if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0)
		return false;
	h += 7;
	len = strlen(h);
	crypto_generichash(got, sizeof(got), (const uint8_t *)h, len, NULL, 0);
	return sodium_memcmp(got, hash, sizeof(got)) == 0;
}

static bool authorized(struct relay_control *c, struct httpd_req *req)
{
	return relay_token_check(c->token_hash, req);
}

/* ---- handlers ---- */

static void add_session(const struct relay_session_info *si, void *arg)
{
	struct json_object *arr = arg, *o = json_object_new_object(), *d;
	char a[ADDR_STRLEN];

	json_object_object_add(o, "client",
			       json_object_new_string(addr_str(&si->client, a, sizeof(a))));
	json_object_object_add(o, "client_ip",
			       json_object_new_string(addr_ip_str(&si->client, a, sizeof(a))));
	json_object_object_add(o, "client_port", json_object_new_int(addr_port(&si->client)));
	json_object_object_add(o, "upstream_port", json_object_new_int(si->upstream_port));
	json_object_object_add(o, "tunnelled", json_object_new_boolean(si->tunnelled));
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
	json_object_array_add(arr, o);
}

static void get_sessions(struct relay_control *c, struct httpd_req *req)
{
	struct json_object *arr = json_object_new_array();

	relay_proxy_foreach(c->r->proxy, add_session, arr);
	httpd_reply_json(req, 200, arr);
	json_object_put(arr);
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

static void get_bans(struct relay_control *c, struct httpd_req *req)
{
	struct banlist *bl = relay_bans_list(c->r->bans);
	struct json_object *arr = json_object_new_array();
	const struct ban *b = NULL;

	banlist_expire(bl, (long long)time(NULL));
	while ((b = banlist_next(bl, b)) != NULL)
		json_object_array_add(arr, ban_json(b));
	httpd_reply_json(req, 200, arr);
	json_object_put(arr);
}

static void put_ban(struct relay_control *c, struct httpd_req *req, const struct addr_ip *ip,
		    const char *ipstr)
{
	struct banlist *bl = relay_bans_list(c->r->bans);
	char reason[BANLIST_REASON_MAX + 1], err[160];
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
	closed = relay_proxy_close_ip(c->r->proxy, ip);
	saved = relay_bans_save(c->r->bans);
	log_info("ban-%s ip=%s duration=%lld sessions-closed=%zu", created ? "added" : "updated",
		 ipstr, duration, closed);
	b = banlist_find(bl, ip, (long long)time(NULL), NULL);
	if (saved < 0) {
		char msg[256];

		snprintf(msg, sizeof(msg), "ban is active but was not saved to %s: %s",
			 relay_bans_path(c->r->bans), strerror(-saved));
		httpd_reply_error(req, 500, msg);
		return;
	}
	o = ban_json(b);
	json_object_object_add(o, "sessions_closed", json_object_new_int64((int64_t)closed));
	httpd_reply_json(req, created ? 201 : 200, o);
	json_object_put(o);
}

static void delete_ban(struct relay_control *c, struct httpd_req *req, const struct addr_ip *ip,
		       const char *ipstr)
{
	int saved;

	if (banlist_del(relay_bans_list(c->r->bans), ip) < 0) {
		httpd_reply_error(req, 404, "no such ban");
		return;
	}
	saved = relay_bans_save(c->r->bans);
	log_info("ban-removed ip=%s", ipstr);
	if (saved < 0) {
		char msg[256];

		snprintf(msg, sizeof(msg), "ban is lifted but the change was not saved to %s: %s",
			 relay_bans_path(c->r->bans), strerror(-saved));
		httpd_reply_error(req, 500, msg);
		return;
	}
	httpd_reply(req, 204, NULL, "", 0);
}

static void metric(struct strbuf *b, const char *name, const char *type, const char *help,
		   unsigned long long v)
{
	strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, v);
}

static void get_metrics(struct relay_control *c, struct httpd_req *req)
{
	struct relay *r = c->r;
	struct strbuf b;

	strbuf_init(&b, 1 << 20);
	metric(&b, "rally_relay_sessions", "gauge", "Open sessions.",
	       relay_proxy_session_count(r->proxy));
	metric(&b, "rally_relay_sessions_opened_total", "counter", "Sessions opened.",
	       r->st.sessions_opened);
	metric(&b, "rally_relay_sessions_evicted_total", "counter",
	       "Unconfirmed sessions closed to make room for a new client.",
	       r->st.sessions_evicted);
	strbuf_printf(&b,
		      "# HELP rally_relay_packets_total Datagrams forwarded.\n"
		      "# TYPE rally_relay_packets_total counter\n"
		      "rally_relay_packets_total{direction=\"to_server\"} %llu\n"
		      "rally_relay_packets_total{direction=\"to_client\"} %llu\n",
		      (unsigned long long)r->st.pkts_to_server,
		      (unsigned long long)r->st.pkts_to_client);
	strbuf_printf(&b,
		      "# HELP rally_relay_bytes_total Payload bytes forwarded.\n"
		      "# TYPE rally_relay_bytes_total counter\n"
		      "rally_relay_bytes_total{direction=\"to_server\"} %llu\n"
		      "rally_relay_bytes_total{direction=\"to_client\"} %llu\n",
		      (unsigned long long)r->st.bytes_to_server,
		      (unsigned long long)r->st.bytes_to_client);
	strbuf_printf(&b, "# HELP rally_relay_drops_total Datagrams dropped, by reason.\n"
			  "# TYPE rally_relay_drops_total counter\n");
	for (int i = 0; i < RELAY_DROP_NREASONS; i++)
		strbuf_printf(&b, "rally_relay_drops_total{reason=\"%s\"} %llu\n",
			      relay_drop_name((enum relay_drop)i),
			      (unsigned long long)r->st.drops[i]);
	if (relay_proxy_kernel_drops(r->proxy) >= 0)
		metric(&b, "rally_relay_kernel_drops_total", "counter",
		       "Datagrams the kernel dropped on the public socket (receive buffer full).",
		       (unsigned long long)relay_proxy_kernel_drops(r->proxy));
	if (r->hb != NULL)
		relay_heartbeat_metrics(r->hb, &b);
	metric(&b, "rally_relay_bans", "gauge", "Active bans.",
	       banlist_count(relay_bans_list(r->bans)));
	metric(&b, "rally_relay_query_sources", "gauge",
	       "Source IPs remembered by the query limiter.", relay_proxy_ratelim_count(r->proxy));
	metric(&b, "rally_relay_state_write_errors_total", "counter",
	       "Failed writes of the state file.", r->st.state_write_errors);
	metric(&b, "rally_relay_control_unauthorized_total", "counter",
	       "Control API requests refused for a missing or wrong token.", c->unauthorized);
	if (r->tunnel != NULL)
		relay_tunnel_metrics(r->tunnel, &b);
	relay_qcache_metrics(relay_proxy_qcache(r->proxy), &b);
	if (b.bad)
		httpd_reply_error(req, 500, "metrics too large");
	else
		httpd_reply(req, 200, "text/plain; version=0.0.4", b.p, b.len);
	strbuf_release(&b);
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
		httpd_reply(req, 200, "application/json", "{\"status\":\"ok\"}", 15);
		return;
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
		get_bans(c, req);
	} else if (strncmp(path, "/bans/", 6) == 0) {
		struct addr a;
		struct addr_ip ip;
		char canon[INET6_ADDRSTRLEN];

		if (strcmp(m, "PUT") != 0 && strcmp(m, "DELETE") != 0) {
			method_not_allowed(req, "PUT, DELETE");
			return;
		}
		if (addr_parse_ip(&a, path + 6) < 0) {
			httpd_reply_error(req, 400, "not an IP address");
			return;
		}
		addr_to_ip(&a, &ip);
		addr_ip_fmt(&ip, canon, sizeof(canon));
		if (strcmp(m, "PUT") == 0)
			put_ban(c, req, &ip, canon);
		else
			delete_ban(c, req, &ip, canon);
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
