#include "httpd.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "ev.h"
#include "log.h"
#include "strbuf.h"

#define MAX_EXTRA_HEADERS (8)

struct httpd {
	struct ev_loop *loop;
	struct MHD_Daemon *mhd;
	struct ev_io *io;
	struct ev_timer timer;
	struct httpd_cfg cfg;
	httpd_handler *handler;
	void *arg;
	unsigned nsuspended;
	bool kick; /* a connection was resumed: MHD_run before sleeping */
};

struct httpd_req {
	struct httpd *d;
	struct MHD_Connection *conn;
	const char *method, *path;
	struct addr peer;
	char *body;
	size_t body_len;
	bool too_big;
	bool replied;
	bool want_suspend, suspended;
	struct MHD_Response *pending; /* answer of a suspended request */
	unsigned pending_status;
	struct httpd_header extra[MAX_EXTRA_HEADERS];
	size_t nextra;
};

/* MHD's own messages: the format comes from the library. */
static void mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	size_t n;

	(void)cls;
	if (!log_enabled(LOG_LEVEL_DEBUG))
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = '\0';
	log_debug("httpd msg=\"%s\"", msg);
}

static void on_mhd_timer(struct ev_timer *t, void *arg)
{
	struct httpd *d = arg;

	(void)t;
	MHD_run(d->mhd);
}

static void on_mhd_io(struct ev_io *io, uint32_t events, void *arg)
{
	struct httpd *d = arg;

	(void)io;
	(void)events;
	MHD_run(d->mhd);
}

static void before_sleep(void *arg)
{
	struct httpd *d = arg;
	MHD_UNSIGNED_LONG_LONG t;

	if (d->kick) {
		/* External mode: MHD notices a resumed connection only in
		 * MHD_run(), so run it now rather than after the timeout. */
		d->kick = false;
		ev_timer_start(d->loop, &d->timer, 0, on_mhd_timer, d);
		return;
	}
	if (MHD_get_timeout(d->mhd, &t) == MHD_YES)
		ev_timer_start(d->loop, &d->timer, t > 60000 ? 60000 : (long long)t, on_mhd_timer,
			       d);
	else
		ev_timer_stop(d->loop, &d->timer);
}

/* True when the request added a header of that name (it replaces the
 * daemon's). */
static bool overridden(const struct httpd_req *r, const char *name)
{
	for (size_t i = 0; i < r->nextra; i++) {
		if (strcasecmp(r->extra[i].name, name) == 0)
			return true;
	}
	return false;
}

int httpd_reply(struct httpd_req *r, unsigned status, const char *content_type, const void *body,
		size_t len)
{
	struct MHD_Response *resp;
	enum MHD_Result ok;

	if (r->replied)
		return -EALREADY;
	/* MHD takes void * but copies (MUST_COPY): the cast drops const only. */
	resp = MHD_create_response_from_buffer(len, (void *)(uintptr_t)body, /* NOLINT */
					       MHD_RESPMEM_MUST_COPY);
	if (resp == NULL)
		return -ENOMEM;
	if (content_type != NULL)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	for (size_t i = 0; i < r->d->cfg.nheaders; i++) {
		if (!overridden(r, r->d->cfg.headers[i].name))
			MHD_add_response_header(resp, r->d->cfg.headers[i].name,
						r->d->cfg.headers[i].value);
	}
	for (size_t i = 0; i < r->nextra; i++)
		MHD_add_response_header(resp, r->extra[i].name, r->extra[i].value);
	r->replied = true;
	if (r->suspended) {
		/* MHD calls on_request again once resumed; it queues this. */
		r->pending = resp;
		r->pending_status = status;
		r->suspended = false;
		r->d->nsuspended--;
		MHD_resume_connection(r->conn);
		r->d->kick = true;
		return 0;
	}
	ok = MHD_queue_response(r->conn, status, resp);
	MHD_destroy_response(resp);
	return ok == MHD_YES ? 0 : -EIO;
}

struct httpd_shared {
	struct MHD_Response *resp; /* our reference */
	const void *body;
	size_t len;
	char *content_type;
	struct httpd_header *headers; /* the creator's, copied */
	size_t nheaders;
	/* The headers of the daemon that used resp first, added to it then. */
	const struct httpd_header *daemon_headers;
	bool used;
};

static void free_body(void *cls)
{
	free(cls);
}

struct httpd_shared *httpd_shared_new_take(const char *content_type, void *body, size_t len,
					   const struct httpd_header *headers, size_t nheaders)
{
	struct httpd_shared *s = calloc(1, sizeof(*s));
	size_t i;

	if (s == NULL)
		goto fail;
	s->content_type = strdup(content_type);
	s->headers = calloc(nheaders + 1, sizeof(*s->headers));
	if (s->content_type == NULL || s->headers == NULL)
		goto fail;
	for (i = 0; i < nheaders; i++) {
		s->headers[i].name = strdup(headers[i].name);
		s->headers[i].value = strdup(headers[i].value);
		s->nheaders++;
		if (s->headers[i].name == NULL || s->headers[i].value == NULL)
			goto fail;
	}
	/* No copy: MHD sends from body and frees it (free_body) when the
	 * last connection it is queued on is done with it. */
	s->resp =
		MHD_create_response_from_buffer_with_free_callback_cls(len, body, free_body, body);
	if (s->resp == NULL) {
		errno = ENOMEM;
		goto fail;
	}
	s->body = body;
	s->len = len;
	MHD_add_response_header(s->resp, MHD_HTTP_HEADER_CONTENT_TYPE, s->content_type);
	for (i = 0; i < s->nheaders; i++)
		MHD_add_response_header(s->resp, s->headers[i].name, s->headers[i].value);
	return s;
fail:
	if (s == NULL || s->resp == NULL)
		free(body);
	httpd_shared_free(s);
	errno = ENOMEM;
	return NULL;
}

void httpd_shared_free(struct httpd_shared *s)
{
	if (s == NULL)
		return;
	if (s->resp != NULL)
		MHD_destroy_response(s->resp);
	for (size_t i = 0; i < s->nheaders; i++) {
		free((char *)(uintptr_t)s->headers[i].name);  /* NOLINT: strdup'ed */
		free((char *)(uintptr_t)s->headers[i].value); /* NOLINT: strdup'ed */
	}
	free(s->headers);
	free(s->content_type);
	free(s);
}

const void *httpd_shared_body(const struct httpd_shared *s, size_t *len)
{
	*len = s->len;
	return s->body;
}

int httpd_reply_shared(struct httpd_req *r, unsigned status, struct httpd_shared *s)
{
	const struct httpd_cfg *cfg = &r->d->cfg;
	enum MHD_Result ok;

	if (r->replied)
		return -EALREADY;
	if (!s->used) {
		/* Headers are added only before resp is first queued. */
		for (size_t i = 0; i < cfg->nheaders; i++)
			MHD_add_response_header(s->resp, cfg->headers[i].name,
						cfg->headers[i].value);
		s->daemon_headers = cfg->headers;
		s->used = true;
	}
	if (r->suspended || r->nextra > 0 || s->daemon_headers != cfg->headers) {
		for (size_t i = 0; i < s->nheaders; i++) {
			int e = httpd_add_header(r, s->headers[i].name, s->headers[i].value);

			if (e < 0)
				return e;
		}
		return httpd_reply(r, status, s->content_type, s->body, s->len);
	}
	r->replied = true;
	/* MHD counts this queueing; our reference stays ours. */
	ok = MHD_queue_response(r->conn, status, s->resp);
	return ok == MHD_YES ? 0 : -EIO;
}

struct httpd_upgrade {
	struct httpd *d;
	struct MHD_UpgradeResponseHandle *urh;
	httpd_upgrade_fn *fn;
	void *arg;
};

static void on_upgraded(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra,
			size_t extra_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	struct httpd_upgrade *u = cls;
	int fl = fcntl(sock, F_GETFL);

	(void)conn;
	(void)con_cls;
	u->urh = urh;
	if (fl >= 0)
		fcntl(sock, F_SETFL, fl | O_NONBLOCK);
	u->fn(u->arg, sock, (const uint8_t *)extra, extra_size, u);
}

int httpd_reply_upgrade(struct httpd_req *r, const char *upgrade, httpd_upgrade_fn *fn, void *arg)
{
	struct MHD_Response *resp;
	struct httpd_upgrade *u;
	enum MHD_Result ok;

	if (r->replied)
		return -EALREADY;
	if (!r->d->cfg.allow_upgrade || r->suspended)
		return -EINVAL;
	u = calloc(1, sizeof(*u));
	if (u == NULL)
		return -ENOMEM;
	u->d = r->d;
	u->fn = fn;
	u->arg = arg;
	resp = MHD_create_response_for_upgrade(on_upgraded, u);
	if (resp == NULL) {
		free(u);
		return -ENOMEM;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, upgrade);
	for (size_t i = 0; i < r->nextra; i++)
		MHD_add_response_header(resp, r->extra[i].name, r->extra[i].value);
	r->replied = true;
	ok = MHD_queue_response(r->conn, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
	MHD_destroy_response(resp);
	if (ok != MHD_YES) {
		/* MHD never calls on_upgraded then. */
		free(u);
		return -EIO;
	}
	return 0;
}

void httpd_upgrade_close(struct httpd_upgrade *u)
{
	if (u == NULL)
		return;
	if (u->urh != NULL)
		MHD_upgrade_action(u->urh, MHD_UPGRADE_ACTION_CLOSE);
	u->d->kick = true; /* MHD cleans the connection up in MHD_run */
	free(u);
}

int httpd_reply_json(struct httpd_req *r, unsigned status, struct json_object *obj)
{
	size_t len;
	const char *s = json_object_to_json_string_length(obj, JSON_C_TO_STRING_PLAIN, &len);

	return httpd_reply(r, status, "application/json", s, len);
}

int httpd_reply_metrics(struct httpd_req *r, struct strbuf *b)
{
	int ret = b->bad ? httpd_reply_error(r, 500, "metrics too large")
			 : httpd_reply(r, 200, "text/plain; version=0.0.4", b->p, b->len);

	strbuf_release(b);
	return ret;
}

int httpd_reply_error(struct httpd_req *r, unsigned status, const char *msg)
{
	struct json_object *o = json_object_new_object();
	int ret;

	if (o == NULL)
		return httpd_reply(r, 500, "text/plain", "out of memory\n", 14);
	json_object_object_add(o, "error", json_object_new_string(msg));
	ret = httpd_reply_json(r, status, o);
	json_object_put(o);
	return ret;
}

int httpd_add_header(struct httpd_req *r, const char *name, const char *value)
{
	if (r->nextra == MAX_EXTRA_HEADERS)
		return -ENOSPC;
	r->extra[r->nextra].name = name;
	r->extra[r->nextra].value = value;
	r->nextra++;
	return 0;
}

static void peer_of(struct MHD_Connection *conn, struct addr *a)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);

	memset(a, 0, sizeof(*a));
	if (ci == NULL || ci->client_addr == NULL)
		return;
	if (ci->client_addr->sa_family == AF_INET)
		a->len = sizeof(struct sockaddr_in);
	else if (ci->client_addr->sa_family == AF_INET6)
		a->len = sizeof(struct sockaddr_in6);
	else
		return;
	memcpy(&a->ss, ci->client_addr, a->len);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	struct httpd *d = cls;
	struct httpd_req *r = *con_cls;

	(void)version;
	if (r == NULL) {
		const char *cl;

		r = calloc(1, sizeof(*r));
		if (r == NULL)
			return MHD_NO;
		r->d = d;
		r->conn = conn;
		r->method = method;
		r->path = url;
		peer_of(conn, &r->peer);
		*con_cls = r;
		/* Refuse an announced oversize body before reading it. */
		cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
						 MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl != NULL && strtoull(cl, NULL, 10) > d->cfg.max_body)
			r->too_big = true;
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		size_t n = *upload_data_size;

		*upload_data_size = 0;
		if (r->too_big)
			return MHD_YES;
		if (n > d->cfg.max_body - r->body_len) {
			r->too_big = true;
			free(r->body);
			r->body = NULL;
			r->body_len = 0;
			return MHD_YES;
		}
		if (r->body == NULL) {
			r->body = malloc(d->cfg.max_body + 1);
			if (r->body == NULL)
				return MHD_NO;
		}
		memcpy(r->body + r->body_len, upload_data, n);
		r->body_len += n;
		return MHD_YES;
	}
	if (r->pending != NULL) {
		enum MHD_Result ok = MHD_queue_response(conn, r->pending_status, r->pending);

		MHD_destroy_response(r->pending);
		r->pending = NULL;
		return ok;
	}
	if (r->replied)
		return MHD_YES;
	if (r->too_big && !d->cfg.pass_oversize) {
		char msg[64];

		snprintf(msg, sizeof(msg), "body larger than %zu bytes", d->cfg.max_body);
		return httpd_reply_error(r, 413, msg) == 0 ? MHD_YES : MHD_NO;
	}
	if (r->body != NULL)
		r->body[r->body_len] = '\0';
	d->handler(r, d->arg);
	if (!r->replied && r->want_suspend) {
		r->suspended = true;
		d->nsuspended++;
		MHD_suspend_connection(conn);
		return MHD_YES;
	}
	if (!r->replied)
		httpd_reply_error(r, 500, "no response");
	return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct httpd_req *r = *con_cls;

	(void)cls;
	(void)conn;
	(void)toe;
	if (r == NULL)
		return;
	if (r->pending != NULL)
		MHD_destroy_response(r->pending);
	free(r->body);
	free(r);
	*con_cls = NULL;
}

void httpd_suspend(struct httpd_req *r)
{
	r->want_suspend = true;
}

unsigned httpd_connections(const struct httpd *d)
{
	const union MHD_DaemonInfo *i =
		MHD_get_daemon_info(d->mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);

	return i != NULL ? i->num_connections : 0;
}

unsigned httpd_suspended(const struct httpd *d)
{
	return d->nsuspended;
}

const char *httpd_method(const struct httpd_req *r)
{
	return r->method;
}

const char *httpd_path(const struct httpd_req *r)
{
	return r->path;
}

const char *httpd_query(const struct httpd_req *r, const char *name)
{
	return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *httpd_header(const struct httpd_req *r, const char *name)
{
	return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

bool httpd_body_too_big(const struct httpd_req *r)
{
	return r->too_big;
}

const struct addr *httpd_peer(const struct httpd_req *r)
{
	return &r->peer;
}

const char *httpd_body(const struct httpd_req *r, size_t *len)
{
	if (len != NULL)
		*len = r->body_len;
	return r->body != NULL ? r->body : "";
}

int httpd_listen(struct addr *a)
{
	int fd = socket(a->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int on = 1, e;

	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
	if (a->ss.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
	if (bind(fd, (const struct sockaddr *)&a->ss, a->len) < 0)
		goto fail;
	if (listen(fd, 1024) < 0)
		goto fail;
	a->len = sizeof(a->ss);
	if (getsockname(fd, (struct sockaddr *)&a->ss, &a->len) < 0)
		goto fail;
	return fd;
fail:
	e = errno;
	close(fd);
	return -e;
}

struct httpd *httpd_new_take(struct ev_loop *loop, int listen_fd, const struct httpd_cfg *cfg,
			     httpd_handler *h, void *arg)
{
	struct httpd *d = calloc(1, sizeof(*d));
	const union MHD_DaemonInfo *info;
	int e;

	if (d == NULL) {
		close(listen_fd);
		return NULL;
	}
	d->loop = loop;
	d->cfg = *cfg;
	d->handler = h;
	d->arg = arg;
	ev_timer_init(&d->timer);
	/* clang-format off */
	d->mhd = MHD_start_daemon(
		MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
			(cfg->allow_upgrade ? MHD_ALLOW_UPGRADE : 0), 0, NULL, NULL,
		on_request, d,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, d, /* first, to catch every message */
		MHD_OPTION_LISTEN_SOCKET, listen_fd,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned int)cfg->conn_limit,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)cfg->per_ip_limit,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)cfg->conn_timeout_s,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)16384,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, d,
		MHD_OPTION_END);
	/* clang-format on */
	if (d->mhd == NULL) {
		close(listen_fd);
		free(d);
		errno = EIO;
		return NULL;
	}
	info = MHD_get_daemon_info(d->mhd, MHD_DAEMON_INFO_EPOLL_FD);
	if (info == NULL)
		goto fail;
	d->io = ev_io_add(loop, info->epoll_fd, EPOLLIN, on_mhd_io, d);
	if (d->io == NULL)
		goto fail;
	if (ev_before_sleep_add(loop, before_sleep, d) < 0) {
		errno = ENOSPC;
		goto fail;
	}
	return d;
fail:
	e = errno;
	httpd_free(d);
	errno = e;
	return NULL;
}

void httpd_free(struct httpd *d)
{
	if (d == NULL)
		return;
	ev_timer_stop(d->loop, &d->timer);
	ev_io_del(d->io, false);
	if (d->mhd != NULL)
		MHD_stop_daemon(d->mhd);
	ev_before_sleep_del(d->loop, before_sleep, d);
	free(d);
}
