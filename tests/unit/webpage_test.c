/*
 * common/webpage and common/embed.cmake: a page served through a real httpd
 * on loopback carries the CSP and the security headers once each (a daemon
 * header of the same name is replaced, the others kept), its bytes as
 * embedded; the lookup finds exactly the listed paths; Accept decides
 * wants_html. The relay's embedded page equals its source file byte for
 * byte, NUL-terminated, its length without the NUL.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ev.h"
#include "httpd.h"
#include "tap.h"
#include "webpage.h"

extern const unsigned char relay_page_html[], relay_page_js[];
extern const size_t relay_page_html_len, relay_page_js_len;

static const unsigned char page[] = "<!DOCTYPE html><p>hi</p>";
static const size_t page_len = sizeof(page) - 1;
static const unsigned char script[] = "'use strict';";
static const size_t script_len = sizeof(script) - 1;

static const struct webpage_asset assets[] = {
	{"/", "text/html; charset=utf-8", page, &page_len},
	{"/p.js", "text/javascript; charset=utf-8", script, &script_len},
};

static int seen_html = -1;

static void handler(struct httpd_req *req, void *arg)
{
	const struct webpage_asset *a =
		webpage_find(assets, sizeof(assets) / sizeof(assets[0]), httpd_path(req));

	(void)arg;
	seen_html = webpage_wants_html(req);
	if (a == NULL) {
		httpd_reply_error(req, 404, "no such page");
		return;
	}
	CHECK_EQ_INT(webpage_reply(req, a, a == &assets[0]), 0);
}

struct answer {
	char head[4096];
	char body[4096];
	size_t len;
};

/* One GET over a fresh connection, the loop run until the answer is in. */
static int get(struct ev_loop *loop, const struct addr *a, const char *path, const char *accept,
	       struct answer *out)
{
	char req[512], buf[8192], *sep;
	size_t got = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), n;
	long long deadline = ev_monotonic_ms() + 5000;

	n = snprintf(req, sizeof(req),
		     "GET %s HTTP/1.1\r\nHost: t\r\n%s%s%sConnection: close\r\n\r\n", path,
		     accept != NULL ? "Accept: " : "", accept != NULL ? accept : "",
		     accept != NULL ? "\r\n" : "");
	connect(fd, (const struct sockaddr *)&a->ss, a->len);
	while (ev_monotonic_ms() < deadline) {
		ssize_t r;

		ev_loop_run_once(loop, 5);
		if (n > 0 && send(fd, req, (size_t)n, MSG_NOSIGNAL) == n)
			n = 0;
		r = recv(fd, buf + got, sizeof(buf) - got - 1, 0);
		if (r == 0)
			break;
		if (r > 0)
			got += (size_t)r;
	}
	close(fd);
	buf[got] = '\0';
	sep = strstr(buf, "\r\n\r\n");
	if (sep == NULL)
		return -EPROTO;
	snprintf(out->head, sizeof(out->head), "%.*s", (int)(sep - buf), buf);
	out->len = got - (size_t)(sep + 4 - buf);
	memcpy(out->body, sep + 4, out->len);
	out->body[out->len] = '\0';
	return 0;
}

/* How many header lines start with name (case as libmicrohttpd sends it). */
static int count(const struct answer *a, const char *name)
{
	int n = 0;

	for (const char *p = a->head; (p = strstr(p, "\r\n")) != NULL; p += 2) {
		if (strncmp(p + 2, name, strlen(name)) == 0 && p[2 + strlen(name)] == ':')
			n++;
	}
	return n;
}

static bool has(const struct answer *a, const char *line)
{
	return strstr(a->head, line) != NULL;
}

static void test_serve(void)
{
	static const struct httpd_header daemon_headers[] = {
		{"Cache-Control", "no-store"},
		{"X-Content-Type-Options", "nosniff"},
	};
	struct httpd_cfg cfg = {
		.max_body = 1024,
		.conn_limit = 8,
		.conn_timeout_s = 5,
		.headers = daemon_headers,
		.nheaders = 2,
	};
	struct ev_loop *loop = ev_loop_new();
	struct addr a;
	struct httpd *d;
	struct answer x;
	char csp[512];

	addr_parse(&a, "127.0.0.1:0", -1);
	d = httpd_new_take(loop, httpd_listen(&a), &cfg, handler, NULL);
	CHECK(d != NULL);

	CHECK_EQ_INT(get(loop, &a, "/", "text/html,*/*;q=0.8", &x), 0);
	CHECK(strncmp(x.head, "HTTP/1.1 200", 12) == 0);
	CHECK_EQ_INT(seen_html, 1);
	CHECK(x.len == page_len && memcmp(x.body, page, page_len) == 0);
	snprintf(csp, sizeof(csp), "\r\nContent-Security-Policy: %s\r\n", WEBPAGE_CSP);
	CHECK(has(&x, csp));
	CHECK(has(&x, "\r\nContent-Type: text/html; charset=utf-8"));
	CHECK(has(&x, "\r\nReferrer-Policy: no-referrer"));
	CHECK(has(&x, "\r\nX-Frame-Options: DENY"));
	CHECK(has(&x, "\r\nCross-Origin-Resource-Policy: same-origin"));
	CHECK(has(&x, "\r\nVary: Accept"));
	CHECK(has(&x, "\r\nCache-Control: no-store"));
	CHECK_EQ_INT(count(&x, "Content-Security-Policy"), 1);
	CHECK_EQ_INT(count(&x, "X-Content-Type-Options"), 1); /* the page's replaces the daemon's */
	CHECK_EQ_INT(count(&x, "Cache-Control"), 1);

	CHECK_EQ_INT(get(loop, &a, "/p.js", NULL, &x), 0);
	CHECK_EQ_INT(seen_html, 0);
	CHECK(x.len == script_len && memcmp(x.body, script, script_len) == 0);
	CHECK(has(&x, "\r\nContent-Type: text/javascript; charset=utf-8"));
	CHECK(!has(&x, "\r\nVary:"));
	CHECK_EQ_INT(count(&x, "X-Content-Type-Options"), 1);

	/* Not a page: the daemon's headers only, once. */
	CHECK_EQ_INT(get(loop, &a, "/p.js/", "application/json", &x), 0);
	CHECK(strncmp(x.head, "HTTP/1.1 404", 12) == 0);
	CHECK_EQ_INT(count(&x, "Content-Security-Policy"), 0);
	CHECK_EQ_INT(count(&x, "X-Content-Type-Options"), 1);

	httpd_free(d);
	ev_loop_free(loop);
}

static void test_find(void)
{
	CHECK(webpage_find(assets, 2, "/") == &assets[0]);
	CHECK(webpage_find(assets, 2, "/p.js") == &assets[1]);
	CHECK(webpage_find(assets, 2, "/P.JS") == NULL);
	CHECK(webpage_find(assets, 2, "/p.js?x") == NULL);
	CHECK(webpage_find(assets, 2, "") == NULL);
	CHECK(webpage_find(assets, 1, "/p.js") == NULL);
}

/* The embedded copy is the file, byte for byte. */
static void test_embedded(const char *path, const unsigned char *body, size_t len)
{
	FILE *f = fopen(path, "rb");
	char *want = malloc(1 << 20);
	size_t n = f != NULL ? fread(want, 1, 1 << 20, f) : 0;

	CHECK(f != NULL);
	CHECK(n > 0 && n == len && memcmp(want, body, len) == 0);
	CHECK(body[len] == '\0');
	if (f != NULL)
		fclose(f);
	free(want);
}

int main(void)
{
	test_find();
	test_serve();
	test_embedded(TEST_DATA_DIR "/../../relay/page/index.html", relay_page_html,
		      relay_page_html_len);
	test_embedded(TEST_DATA_DIR "/../../relay/page/admin.js", relay_page_js, relay_page_js_len);
	return tap_done("webpage");
}
