/*
 * libmicrohttpd glued into the event loop.
 *
 * The daemon runs in external-epoll mode: its epoll fd is one more fd in our
 * loop, MHD_run() is called when it is readable and when MHD's own timeout
 * falls due (a before-sleep hook rearms the timer). The handler sees a whole
 * request - method, path, headers, the peer and the body, already capped at
 * max_body bytes (a bigger body gets 413 without reaching the handler) - and
 * answers it with httpd_reply*() before returning.
 */
#ifndef HTTPD_H
#define HTTPD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"

struct ev_loop;
struct httpd;
struct httpd_req;
struct json_object;

typedef void httpd_handler(struct httpd_req *req, void *arg);

struct httpd_header {
	const char *name, *value;
};

struct httpd_cfg {
	size_t max_body; /* bytes; larger bodies: 413 (see pass_oversize) */
	/* Call the handler for a larger body too, without it: the handler
	 * sees httpd_body_too_big() and answers as its protocol wants. */
	bool pass_oversize;
	unsigned conn_limit;     /* concurrent connections */
	unsigned per_ip_limit;   /* concurrent connections per IP, 0 = off */
	unsigned conn_timeout_s; /* idle connections are closed after this */
	/* Lets handlers answer with httpd_reply_upgrade (WebSocket). */
	bool allow_upgrade;
	/* Sent with every response; the array must outlive the daemon. */
	const struct httpd_header *headers;
	size_t nheaders;
};

/*
 * Serves HTTP on listen_fd (bound and listening; the daemon takes it and
 * closes it in httpd_free). Returns NULL, errno set, on failure (listen_fd
 * is then closed too).
 */
struct httpd *httpd_new_take(struct ev_loop *loop, int listen_fd, const struct httpd_cfg *cfg,
			     httpd_handler *h, void *arg);
void httpd_free(struct httpd *d);

/* Opens a TCP listening socket on a (port 0 = ephemeral) and reads the bound
 * address back. Returns the fd or -errno. */
int httpd_listen(struct addr *a);

/* Request accessors; strings live until the reply is queued. */
const char *httpd_method(const struct httpd_req *r);
const char *httpd_path(const struct httpd_req *r);
/* A query-string argument, or NULL. */
const char *httpd_query(const struct httpd_req *r, const char *name);
/* A request header (case-insensitive name), or NULL. */
const char *httpd_header(const struct httpd_req *r, const char *name);
const struct addr *httpd_peer(const struct httpd_req *r);
/* True when the body was larger than max_body (and was dropped). */
bool httpd_body_too_big(const struct httpd_req *r);
/* The body, NUL-terminated ("" when none or too big); len may be NULL. */
const char *httpd_body(const struct httpd_req *r, size_t *len);

/* Adds a response header for this request (up to 8), before the reply; it
 * replaces a daemon header (httpd_cfg.headers) of the same name. name and
 * value must live until the reply is queued. */
int httpd_add_header(struct httpd_req *r, const char *name, const char *value);

/*
 * Keeps the request open after the handler returns without a reply (the
 * answer needs I/O: a UDP ping-back). Reply later, from any loop callback,
 * with httpd_reply*() on the same req, which stays valid until then. Every
 * suspended request must be answered before httpd_free().
 */
void httpd_suspend(struct httpd_req *r);
/* Open client connections. */
unsigned httpd_connections(const struct httpd *d);
/* Suspended requests not answered yet. */
unsigned httpd_suspended(const struct httpd *d);

/*
 * Protocol upgrades (WebSocket). httpd_reply_upgrade answers 101 with an
 * "Upgrade: upgrade" header (and the headers added with httpd_add_header);
 * once the 101 is on the wire fn(arg, fd, extra, n, u) runs from the loop:
 * fd is the connection's socket (non-blocking), extra the bytes read past
 * the request. The socket stays libmicrohttpd's: give it back with
 * httpd_upgrade_close(u), which closes it, before httpd_free().
 */
struct httpd_upgrade;
typedef void httpd_upgrade_fn(void *arg, int fd, const uint8_t *extra, size_t n,
			      struct httpd_upgrade *u);
int httpd_reply_upgrade(struct httpd_req *r, const char *upgrade, httpd_upgrade_fn *fn, void *arg);
void httpd_upgrade_close(struct httpd_upgrade *u);

/* Queues a response with a copy of body. Returns 0 or -errno. */
int httpd_reply(struct httpd_req *r, unsigned status, const char *content_type, const void *body,
		size_t len);
/*
 * A response kept across requests (a listing served thousands of times a
 * second): one libmicrohttpd response object over the body, queued on every
 * connection that asks, so a request costs no copy and no allocation.
 * httpd_shared_new_take takes body (malloc'ed) and copies content_type and
 * headers; the body is freed when the last queued response is sent, which
 * may be after httpd_shared_free (that only drops our reference). NULL, errno
 * set, on failure (body is freed then too).
 */
struct httpd_shared;
struct httpd_shared *httpd_shared_new_take(const char *content_type, void *body, size_t len,
					   const struct httpd_header *headers, size_t nheaders);
void httpd_shared_free(struct httpd_shared *s);
/* The kept body: valid while s is. */
const void *httpd_shared_body(const struct httpd_shared *s, size_t *len);
/*
 * Queues s for this request. The daemon's own headers (httpd_cfg.headers)
 * are added to s on its first use; a request on a daemon with other headers,
 * with headers added by httpd_add_header, or suspended, gets a copy instead.
 * Returns 0 or -errno.
 */
int httpd_reply_shared(struct httpd_req *r, unsigned status, struct httpd_shared *s);

/* Queues obj serialised as compact JSON (obj stays the caller's). */
int httpd_reply_json(struct httpd_req *r, unsigned status, struct json_object *obj);
/* Queues {"error": msg} with the status. */
int httpd_reply_error(struct httpd_req *r, unsigned status, const char *msg);
/* Queues b as Prometheus text (500 if it outgrew its cap) and releases b:
 * every daemon's /metrics. */
struct strbuf;
int httpd_reply_metrics(struct httpd_req *r, struct strbuf *b);

#endif
