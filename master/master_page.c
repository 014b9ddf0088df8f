/*
 * The server-browser page: one HTML page, its stylesheet and its script,
 * built into the binary from master/page/ (embed.cmake), no external
 * assets. The script fetches /list, /q3/servers and /servers every 10 s and
 * sets every piece of data with textContent, so the Content-Security-Policy
 * can forbid inline script and style, and every origin but ours.
 *
 *   GET /            the page, to a client whose Accept names text/html (a
 *                    browser); any other GET / is still the netpunch
 *                    reference's list, as its clients expect
 *   GET /index.html  the page
 *   GET /page.css, GET /page.js
 */
#include <stdio.h>
#include <string.h>

#include "httpd.h"
#include "master.h"

extern const unsigned char master_page_html[], master_page_css[], master_page_js[];
extern const size_t master_page_html_len, master_page_css_len, master_page_js_len;

#define PAGE_CSP                                                                                   \
	("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "           \
	 "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

struct asset {
	const char *path, *endpoint, *type;
	const unsigned char *body;
	const size_t *len;
};

static const struct asset assets[] = {
	{"/index.html", "page", "text/html; charset=utf-8", master_page_html,
	 &master_page_html_len},
	{"/page.css", "page_css", "text/css; charset=utf-8", master_page_css, &master_page_css_len},
	{"/page.js", "page_js", "text/javascript; charset=utf-8", master_page_js,
	 &master_page_js_len},
};

/* True when an Accept header asks for HTML (a browser navigating). */
static bool wants_html(const char *accept)
{
	return accept != NULL && strstr(accept, "text/html") != NULL;
}

static void serve(struct master *m, struct httpd_req *req, const struct asset *a, bool vary)
{
	httpd_add_header(req, "Content-Security-Policy", PAGE_CSP);
	httpd_add_header(req, "X-Content-Type-Options", "nosniff");
	httpd_add_header(req, "Referrer-Policy", "no-referrer");
	httpd_add_header(req, "X-Frame-Options", "DENY");
	httpd_add_header(req, "Cross-Origin-Resource-Policy", "same-origin");
	if (vary)
		httpd_add_header(req, "Vary", "Accept");
	httpd_reply(req, 200, a->type, a->body, *a->len);
	master_http_count(m, a->endpoint, 200);
}

bool master_page_handle(struct master *m, struct httpd_req *req)
{
	const char *path = httpd_path(req), *method = httpd_method(req);

	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return false;
	if (strcmp(path, "/") == 0) {
		if (!wants_html(httpd_header(req, "Accept")))
			return false;
		serve(m, req, &assets[0], true);
		return true;
	}
	for (size_t i = 0; i < sizeof(assets) / sizeof(assets[0]); i++) {
		if (strcmp(path, assets[i].path) == 0) {
			serve(m, req, &assets[i], false);
			return true;
		}
	}
	return false;
}
