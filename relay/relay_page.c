/*
 * The admin page on the control listener: one HTML page, its stylesheet and
 * its script, built into the binary from relay/page/ by common/embed.cmake
 * and served by common/webpage under its strict Content-Security-Policy.
 *
 *   GET /, GET /admin    the page
 *   GET /admin.css, GET /admin.js
 *
 * These need no token: they hold no data. The script asks for the token in
 * a form, keeps it in a variable only, and sends it as "Authorization:
 * Bearer" with every fetch() of /status, /sessions, /bans and /metrics,
 * which need it as they always did.
 */
#include <string.h>

#include "httpd.h"
#include "relay.h"
#include "webpage.h"

extern const unsigned char relay_page_html[], relay_page_css[], relay_page_js[];
extern const size_t relay_page_html_len, relay_page_css_len, relay_page_js_len;

static const struct webpage_asset assets[] = {
	{"/", "text/html; charset=utf-8", relay_page_html, &relay_page_html_len},
	{"/admin", "text/html; charset=utf-8", relay_page_html, &relay_page_html_len},
	{"/admin.css", "text/css; charset=utf-8", relay_page_css, &relay_page_css_len},
	{"/admin.js", "text/javascript; charset=utf-8", relay_page_js, &relay_page_js_len},
};

bool relay_page_handle(struct httpd_req *req)
{
	const char *m = httpd_method(req);
	const struct webpage_asset *a =
		webpage_find(assets, sizeof(assets) / sizeof(assets[0]), httpd_path(req));

	if (a == NULL)
		return false;
	if (strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0) {
		httpd_add_header(req, "Allow", "GET, HEAD");
		httpd_reply_error(req, 405, "method not allowed");
		return true;
	}
	webpage_reply(req, a, false);
	return true;
}
