/*
 * The server-browser page: one HTML page, its stylesheet and its script,
 * built into the binary from master/page/ by common/embed.cmake and served
 * by common/webpage, no external assets. The script fetches /list,
 * /q3/servers and /servers every 10 s and sets every piece of data with
 * textContent, so the Content-Security-Policy can forbid inline script and
 * style, and every origin but ours.
 *
 *   GET /            the page, to a client whose Accept names text/html (a
 *                    browser); any other GET / is still the netpunch
 *                    reference's list, as its clients expect
 *   GET /index.html  the page
 *   GET /page.css, GET /page.js
 */
#include <string.h>

#include "httpd.h"
#include "master.h"
#include "webpage.h"

extern const unsigned char master_page_html[], master_page_css[], master_page_js[];
extern const size_t master_page_html_len, master_page_css_len, master_page_js_len;

static const struct webpage_asset assets[] = {
	{"/index.html", "text/html; charset=utf-8", master_page_html, &master_page_html_len},
	{"/page.css", "text/css; charset=utf-8", master_page_css, &master_page_css_len},
	{"/page.js", "text/javascript; charset=utf-8", master_page_js, &master_page_js_len},
};
static const char *const endpoints[] = {"page", "page_css", "page_js"};

static void serve(struct master *m, struct httpd_req *req, const struct webpage_asset *a, bool vary)
{
	webpage_reply(req, a, vary);
	master_http_count(m, endpoints[a - assets], 200);
}

bool master_page_handle(struct master *m, struct httpd_req *req)
{
	const char *path = httpd_path(req), *method = httpd_method(req);
	const struct webpage_asset *a;

	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return false;
	if (strcmp(path, "/") == 0) {
		if (!webpage_wants_html(req))
			return false;
		serve(m, req, &assets[0], true);
		return true;
	}
	a = webpage_find(assets, sizeof(assets) / sizeof(assets[0]), path);
	if (a == NULL)
		return false;
	serve(m, req, a, false);
	return true;
}
