/*
 * An operator's web page built into a daemon (rally-master's server browser,
 * rally-relay's admin page): its HTML, stylesheet and script are byte arrays
 * generated at build time by common/embed.cmake, served with headers that
 * let the browser run nothing else. The script sets data only through
 * textContent, so the policy forbids inline script and style and every
 * origin but the daemon's own.
 */
#ifndef WEBPAGE_H
#define WEBPAGE_H

#include <stdbool.h>
#include <stddef.h>

struct httpd_req;

/* The Content-Security-Policy of every page: nothing inline, nothing from
 * another origin, no forms submitted anywhere (the scripts use fetch), no
 * framing. img-src allows data: for the empty favicon. */
#define WEBPAGE_CSP                                                                                \
	("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "           \
	 "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

struct webpage_asset {
	const char *path;          /* "/page.js" */
	const char *type;          /* "text/javascript; charset=utf-8" */
	const unsigned char *body; /* embedded array (embed.cmake) */
	const size_t *len;         /* its length symbol */
};

/* The asset of assets[0..n) served at path, or NULL. */
const struct webpage_asset *webpage_find(const struct webpage_asset *assets, size_t n,
					 const char *path);
/* True when the request's Accept header names text/html (a browser
 * navigating), for a path shared with an API. */
bool webpage_wants_html(const struct httpd_req *req);
/* Queues the asset (200) with WEBPAGE_CSP, nosniff, Referrer-Policy
 * no-referrer, X-Frame-Options DENY and Cross-Origin-Resource-Policy
 * same-origin; vary_accept adds "Vary: Accept". 0 or -errno. */
int webpage_reply(struct httpd_req *req, const struct webpage_asset *a, bool vary_accept);

#endif
