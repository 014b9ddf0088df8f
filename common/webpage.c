#include "webpage.h"

#include <string.h>

#include "httpd.h"

const struct webpage_asset *webpage_find(const struct webpage_asset *assets, size_t n,
					 const char *path)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(path, assets[i].path) == 0)
			return &assets[i];
	}
	return NULL;
}

bool webpage_wants_html(const struct httpd_req *req)
{
	const char *accept = httpd_header(req, "Accept");

	return accept != NULL && strstr(accept, "text/html") != NULL;
}

int webpage_reply(struct httpd_req *req, const struct webpage_asset *a, bool vary_accept)
{
	static const struct httpd_header h[] = {
		{"Content-Security-Policy", WEBPAGE_CSP},
		{"X-Content-Type-Options", "nosniff"},
		{"Referrer-Policy", "no-referrer"},
		{"X-Frame-Options", "DENY"},
		{"Cross-Origin-Resource-Policy", "same-origin"},
	};
	int r;

	for (size_t i = 0; i < sizeof(h) / sizeof(h[0]); i++) {
		r = httpd_add_header(req, h[i].name, h[i].value);
		if (r < 0)
			return r;
	}
	if (vary_accept) {
		r = httpd_add_header(req, "Vary", "Accept");
		if (r < 0)
			return r;
	}
	return httpd_reply(req, 200, a->type, a->body, *a->len);
}
