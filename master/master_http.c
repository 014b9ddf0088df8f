/*
 * The master's HTTP side: a libmicrohttpd daemon per --http listener (one
 * by default; a second for IPv6, say), all routed to the three doors.
 *
 *   GET /metrics, GET /healthz                  ours
 *   GET / (browsers), /index.html, /page.*      the page (master_page.c)
 *   GET /q3/servers                             the Q3 servers as JSON
 *   /servers, /servers/{ip:port}, /reflection/ip the Fugitive3D repository
 *   everything else                             the netpunch API, matched by
 *                                               path suffix as the reference
 *                                               does (/tpf2mp/list = /list)
 *
 * Forwarding headers are believed only from --trusted-proxy peers (by
 * default loopback, where nginx runs).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "httpd.h"
#include "log.h"
#include "master.h"
#include "master_redis.h"
#include "strbuf.h"

/* Bodies: the netpunch API's MAX_BODY; larger ones reach the doors marked. */
#define BODY_MAX     (4096)
#define MAX_COUNTERS (96)

struct counter {
	const char *endpoint;
	unsigned status;
	uint64_t n;
};

struct master_http {
	struct master *m;
	struct httpd *httpd[MASTER_MAX_HTTP];
	struct addr bound[MASTER_MAX_HTTP];
	size_t n;
	struct counter counts[MAX_COUNTERS];
	size_t ncounts;
	uint64_t overflow;
};

static const struct httpd_header common_headers[] = {
	{"Cache-Control", "no-store"},
	{"Access-Control-Allow-Origin", "*"},
};

bool master_http_is_trusted(const struct master *m, const struct addr *a)
{
	struct addr_ip ip;

	addr_to_ip(a, &ip);
	for (size_t i = 0; i < m->cfg.ntrusted; i++) {
		if (memcmp(ip.b, m->cfg.trusted[i].b, sizeof(ip.b)) == 0)
			return true;
	}
	return false;
}

/* Parses s[0..len) as an IP (surrounding spaces allowed). */
static bool parse_ip_span(const char *s, size_t len, struct addr *out)
{
	char buf[INET6_ADDRSTRLEN + 1];

	while (len > 0 && (*s == ' ' || *s == '\t')) {
		s++;
		len--;
	}
	while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
		len--;
	if (len == 0 || len >= sizeof(buf))
		return false;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return addr_parse_ip(out, buf) == 0;
}

bool master_http_client_ip(const struct master *m, struct httpd_req *req, const char *header,
			   struct addr *out)
{
	const struct addr *peer = httpd_peer(req);
	const char *v;

	*out = *peer;
	if (header == NULL || !master_http_is_trusted(m, peer))
		return true;
	v = httpd_header(req, header);
	if (v == NULL)
		return true;
	if (strcasecmp(header, "X-Forwarded-For") == 0) {
		/*
		 * "client, proxy1, proxy2": walk from the right past our own
		 * proxies; the first other address is the client (an attacker
		 * can prepend anything, never append). All trusted: the
		 * leftmost. Anything unparsable: the peer.
		 */
		size_t end = strlen(v);

		while (end > 0) {
			const char *comma = NULL;
			struct addr a;
			size_t start = 0;

			for (size_t i = end; i > 0; i--) {
				if (v[i - 1] == ',') {
					comma = v + i - 1;
					start = i;
					break;
				}
			}
			if (!parse_ip_span(v + start, end - start, &a)) {
				*out = *peer;
				return false;
			}
			if (comma == NULL || !master_http_is_trusted(m, &a)) {
				*out = a;
				return true;
			}
			end = start - 1;
		}
		*out = *peer;
		return false;
	}
	if (!parse_ip_span(v, strlen(v), out)) {
		*out = *peer;
		return false;
	}
	return true;
}

/* ---- counting ---- */

void master_http_count(struct master *m, const char *endpoint, unsigned status)
{
	struct master_http *h = m->http;

	for (size_t i = 0; i < h->ncounts; i++) {
		if (h->counts[i].status == status && strcmp(h->counts[i].endpoint, endpoint) == 0) {
			h->counts[i].n++;
			return;
		}
	}
	if (h->ncounts == MAX_COUNTERS) {
		h->overflow++;
		return;
	}
	h->counts[h->ncounts].endpoint = endpoint;
	h->counts[h->ncounts].status = status;
	h->counts[h->ncounts].n = 1;
	h->ncounts++;
}

static void metrics(struct master *m, struct httpd_req *req)
{
	struct master_http *h = m->http;
	unsigned conns = 0;
	struct strbuf b;

	for (size_t i = 0; i < h->n; i++)
		conns += httpd_connections(h->httpd[i]);
	strbuf_init(&b, 1 << 20);
	master_registry_metrics(m->reg, &b);
	strbuf_printf(&b,
		      "# HELP rally_master_http_connections Open HTTP connections.\n# TYPE "
		      "rally_master_http_connections gauge\nrally_master_http_connections %u\n",
		      conns);
	strbuf_printf(&b, "# HELP rally_master_http_requests_total HTTP requests by endpoint and "
			  "status.\n# TYPE rally_master_http_requests_total counter\n");
	for (size_t i = 0; i < h->ncounts; i++)
		strbuf_printf(
			&b,
			"rally_master_http_requests_total{endpoint=\"%s\",status=\"%u\"} %llu\n",
			h->counts[i].endpoint, h->counts[i].status,
			(unsigned long long)h->counts[i].n);
	if (m->knock != NULL)
		master_knock_metrics(m->knock, &b);
	if (m->relay != NULL)
		master_relayport_metrics(m->relay, &b);
	if (m->q3 != NULL)
		master_q3_metrics(m->q3, &b);
	if (m->fug != NULL)
		master_fugitive_metrics(m->fug, &b);
	if (m->redis != NULL)
		master_redis_metrics(m->redis, &b);
	strbuf_printf(&b, "# HELP rally_master_list_builds_total Kept listings built, served "
			  "from the kept body, gzip-compressed.\n# TYPE "
			  "rally_master_list_builds_total counter\n");
	if (m->lobby_list != NULL)
		master_list_metrics(m->lobby_list, &b);
	if (m->fug_list != NULL)
		master_list_metrics(m->fug_list, &b);
	(void)httpd_reply_metrics(req, &b);
}

/* ---- routing ---- */

static bool is_fugitive_path(const char *path)
{
	return strcmp(path, "/servers") == 0 || strncmp(path, "/servers/", 9) == 0 ||
	       strcmp(path, "/reflection/ip") == 0;
}

static void on_request(struct httpd_req *req, void *arg)
{
	struct master *m = arg;
	const char *path = httpd_path(req), *method = httpd_method(req);

	if (strcmp(path, "/metrics") == 0 && strcmp(method, "GET") == 0) {
		master_http_count(m, "metrics", 200);
		metrics(m, req);
		return;
	}
	if (strcmp(path, "/healthz") == 0 && strcmp(method, "GET") == 0) {
		master_http_count(m, "healthz", 200);
		if (m->redis == NULL)
			httpd_reply(req, 200, "application/json", "{\"status\":\"ok\"}", 15);
		else if (master_redis_connected(m->redis))
			httpd_reply(req, 200, "application/json",
				    "{\"status\":\"ok\",\"redis\":\"connected\"}", 35);
		else
			httpd_reply(req, 200, "application/json",
				    "{\"status\":\"ok\",\"redis\":\"disconnected\"}", 38);
		return;
	}
	if (master_page_handle(m, req))
		return;
	if (strcmp(path, "/q3/servers") == 0 && strcmp(method, "GET") == 0 && m->q3 != NULL) {
		master_q3_http_servers(m, req);
		return;
	}
	if (m->fug != NULL && is_fugitive_path(path)) {
		master_fugitive_handle(m, req);
		return;
	}
	master_netpunch_handle(m, req);
}

int master_http_new(struct master *m)
{
	struct master_http *h = calloc(1, sizeof(*h));
	struct httpd_cfg cfg = {
		.max_body = BODY_MAX,
		.pass_oversize = true,
		/* Many idle clients must not starve the rest: a large pool,
		 * short idle timeout, a few per address. */
		.conn_limit = 16384,
		.per_ip_limit = 0,
		.conn_timeout_s = 15,
		.headers = common_headers,
		.nheaders = sizeof(common_headers) / sizeof(common_headers[0]),
	};

	if (h == NULL)
		return -ENOMEM;
	h->m = m;
	for (size_t i = 0; i < m->cfg.nhttp; i++) {
		struct addr a = m->cfg.http[i];
		char s[ADDR_STRLEN];
		int fd = httpd_listen(&a), e;

		if (fd >= 0) {
			h->httpd[i] = httpd_new_take(m->loop, fd, &cfg, on_request, m);
			fd = h->httpd[i] != NULL ? 0 : errno != 0 ? -errno : -ENOMEM;
		}
		if (fd < 0) {
			e = -fd;
			master_http_free(h);
			errno = e;
			log_warn("http-listen-fail http=%s",
				 addr_str(&m->cfg.http[i], s, sizeof(s)));
			return -e;
		}
		h->bound[i] = a;
		h->n++;
	}
	m->http = h;
	return 0;
}

const struct addr *master_http_addr(const struct master_http *h, size_t i)
{
	return i < h->n ? &h->bound[i] : NULL;
}

void master_http_free(struct master_http *h)
{
	if (h == NULL)
		return;
	for (size_t i = 0; i < h->n; i++)
		httpd_free(h->httpd[i]);
	free(h);
}
