#include "ws.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <wslay/wslay.h>

#include "addr.h"
#include "ev.h"
#include "log.h"
#include "strbuf.h"

#define RBUF_SIZE     ((size_t)256 * 1024)
#define WBUF_SIZE     ((size_t)256 * 1024)
#define HTTP_RESP_MAX (8192)
#define WS_GUID       "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

enum ws_state {
	WS_RESOLVING,
	WS_CONNECTING,
	WS_TLS,
	WS_UPGRADING, /* request sent or being sent, reading the 101 */
	WS_OPEN,
	WS_DONE,
};

struct resolve_job {
	struct ws *w; /* NULL once the ws is gone */
	char host[256];
	uint16_t port;
	struct addr out[8];
	int n, gai;
};

struct ws {
	struct ev_loop *loop;
	struct ev_io *io;
	int fd;
	bool client;
	enum ws_state state;
	wslay_event_context_ptr ctx;
	SSL_CTX *sslctx;
	SSL *ssl;
	struct ws_cfg cfg;
	char ca_file[512];
	const struct ws_ops *ops;
	void *arg;
	ws_release_fn *release;
	void *release_arg;
	/* read buffer: bytes [rpos, rlen) not yet given to wslay */
	uint8_t *rbuf;
	size_t rpos, rlen;
	bool read_once; /* one socket read per readiness event (fairness) */
	bool eof;
	/* write buffer: bytes [wpos, wlen) not yet on the socket */
	uint8_t *wbuf;
	size_t wpos, wlen;
	bool above_low;
	bool paused;
	uint16_t close_code; /* a close waiting for the queued messages */
	/* raw mode (cfg.raw_protocol): no WebSocket framing after the
	 * upgrade; bytes in, bytes out, through rawq */
	bool raw;
	char raw_protocol[64], extra_header[256];
	struct strbuf rawq;
	size_t rawq_off;
	struct ev_timer kick, deadline;
	/* client */
	bool tls;
	char host[256], path[256];
	uint16_t port;
	char key[WS_KEY_LEN + 1], accept[WS_ACCEPT_LEN + 1];
	char *req;
	size_t req_len, req_off;
	struct resolve_job *job;
	/* lifecycle */
	int err;
	unsigned depth;
	bool freed, closed_cb;
	uint64_t bytes_in, bytes_out;
};

static void pump(struct ws *w);
static void update_events(struct ws *w);
static void close_when_drained(struct ws *w);

int ws_accept_key(const char *key, char out[static WS_ACCEPT_LEN + 1])
{
	char buf[WS_KEY_LEN + sizeof(WS_GUID)];
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	size_t n = strlen(key);

	if (n != WS_KEY_LEN)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char c = key[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '+' || c == '/' || c == '='))
			return -EINVAL;
	}
	memcpy(buf, key, n);
	memcpy(buf + n, WS_GUID, sizeof(WS_GUID) - 1);
	if (EVP_Digest(buf, n + sizeof(WS_GUID) - 1, md, &mdlen, EVP_sha1(), NULL) != 1 ||
	    mdlen != 20)
		return -EIO;
	EVP_EncodeBlock((unsigned char *)out, md, 20);
	out[WS_ACCEPT_LEN] = '\0';
	return 0;
}

/* ---- raw socket I/O (plain or TLS) ---- */

/* > 0 bytes, 0 EOF, -EAGAIN, or -errno. */
static ssize_t raw_read(struct ws *w, void *buf, size_t len)
{
	if (w->ssl != NULL) {
		int n = SSL_read(w->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);

		if (n > 0)
			return n;
		switch (SSL_get_error(w->ssl, n)) {
		case SSL_ERROR_WANT_READ:
		case SSL_ERROR_WANT_WRITE:
			return -EAGAIN;
		case SSL_ERROR_ZERO_RETURN:
			return 0;
		default:
			ERR_clear_error();
			return -ECONNRESET;
		}
	}
	for (;;) {
		ssize_t n = recv(w->fd, buf, len, 0);

		if (n >= 0)
			return n;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return -EAGAIN;
		return -errno;
	}
}

static ssize_t raw_write(struct ws *w, const void *buf, size_t len)
{
	if (w->ssl != NULL) {
		int n = SSL_write(w->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);

		if (n > 0)
			return n;
		switch (SSL_get_error(w->ssl, n)) {
		case SSL_ERROR_WANT_READ:
		case SSL_ERROR_WANT_WRITE:
			return -EAGAIN;
		default:
			ERR_clear_error();
			return -EPIPE;
		}
	}
	for (;;) {
		ssize_t n = send(w->fd, buf, len, MSG_NOSIGNAL);

		if (n >= 0)
			return n;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return -EAGAIN;
		return -errno;
	}
}

/* Frames are gathered before each send already: Nagle would only hold the
 * last partial segment back for a delayed ACK (40 ms stalls). */
static void nodelay(int fd)
{
	int on = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

/* ---- lifecycle ---- */

static void finish(struct ws *w, int err)
{
	if (w->state == WS_DONE)
		return;
	w->state = WS_DONE;
	if (w->err == 0)
		w->err = err;
	ev_timer_stop(w->loop, &w->kick);
	ev_timer_stop(w->loop, &w->deadline);
	if (w->io != NULL)
		ev_io_mod(w->io, 0);
	if (!w->closed_cb && !w->freed) {
		w->closed_cb = true;
		w->depth++;
		w->ops->on_close(w, w->err, w->arg);
		w->depth--;
	}
}

static void destroy(struct ws *w)
{
	if (w->job != NULL)
		w->job->w = NULL;
	ev_timer_stop(w->loop, &w->kick);
	ev_timer_stop(w->loop, &w->deadline);
	if (w->ctx != NULL)
		wslay_event_context_free(w->ctx);
	if (w->ssl != NULL)
		SSL_free(w->ssl);
	if (w->sslctx != NULL)
		SSL_CTX_free(w->sslctx);
	if (w->release != NULL) {
		ev_io_del(w->io, false);
		w->release(w->release_arg);
	} else if (w->io != NULL) {
		ev_io_del(w->io, true);
	} else if (w->fd >= 0) {
		close(w->fd);
	}
	free(w->req);
	free(w->rbuf);
	free(w->wbuf);
	if (w->raw)
		strbuf_release(&w->rawq);
	free(w);
}

void ws_free(struct ws *w)
{
	if (w == NULL || w->freed)
		return;
	w->freed = true;
	if (w->depth > 0)
		return; /* the outermost callback frame destroys it */
	destroy(w);
}

/* Entered/left around every entry from the loop, so ws_free() from inside
 * an op only marks the ws and the frame that unwinds last frees it. */
static void enter(struct ws *w)
{
	w->depth++;
}

static bool leave(struct ws *w)
{
	if (--w->depth == 0 && w->freed) {
		destroy(w);
		return false;
	}
	return !w->freed;
}

/* ---- wslay callbacks ---- */

static ssize_t on_wslay_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags,
			     void *user)
{
	struct ws *w = user;
	size_t n;

	(void)flags;
	if (w->rpos == w->rlen) {
		ssize_t r;

		if (w->paused || w->read_once || w->freed) {
			wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
			return -1;
		}
		w->read_once = true;
		w->rpos = w->rlen = 0;
		r = raw_read(w, w->rbuf, RBUF_SIZE);
		if (r == -EAGAIN) {
			wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
			return -1;
		}
		if (r <= 0) {
			w->eof = true;
			if (w->err == 0)
				w->err = r == 0 ? -ECONNRESET : (int)r;
			wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
			return -1;
		}
		w->rlen = (size_t)r;
		w->bytes_in += (uint64_t)r;
	}
	if (w->paused) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	n = w->rlen - w->rpos;
	if (n > len)
		n = len;
	memcpy(buf, w->rbuf + w->rpos, n);
	w->rpos += n;
	return (ssize_t)n;
}

static ssize_t on_wslay_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len,
			     int flags, void *user)
{
	struct ws *w = user;
	size_t room;

	(void)flags;
	if (w->wpos > 0 && w->wpos == w->wlen)
		w->wpos = w->wlen = 0;
	room = WBUF_SIZE - w->wlen;
	if (room == 0) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	if (len > room)
		len = room;
	memcpy(w->wbuf + w->wlen, data, len);
	w->wlen += len;
	return (ssize_t)len;
}

static int on_wslay_genmask(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *user)
{
	(void)ctx;
	(void)user;
	randombytes_buf(buf, len);
	return 0;
}

static void on_wslay_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *a,
			 void *user)
{
	struct ws *w = user;

	(void)ctx;
	if (w->freed || w->state != WS_OPEN)
		return;
	if (a->opcode == WSLAY_TEXT_FRAME || a->opcode == WSLAY_BINARY_FRAME)
		w->ops->on_msg(w, a->opcode == WSLAY_BINARY_FRAME, a->msg, a->msg_length, w->arg);
}

static const struct wslay_event_callbacks wslay_cbs = {
	.recv_callback = on_wslay_recv,
	.send_callback = on_wslay_send,
	.genmask_callback = on_wslay_genmask,
	.on_msg_recv_callback = on_wslay_msg,
};

/* ---- the open connection ---- */

size_t ws_queued(const struct ws *w)
{
	size_t n = w->wlen - w->wpos;

	if (w->raw)
		return w->rawq.len - w->rawq_off;
	if (w->ctx != NULL)
		n += wslay_event_get_queued_msg_length(w->ctx);
	return n;
}

size_t ws_queued_msgs(const struct ws *w)
{
	return w->ctx != NULL ? wslay_event_get_queued_msg_count(w->ctx) : 0;
}

static void update_events(struct ws *w)
{
	uint32_t ev = 0;

	if (w->io == NULL || w->state == WS_DONE)
		return;
	if (w->state == WS_OPEN && w->raw) {
		if (!w->paused)
			ev |= EPOLLIN;
		if (w->rawq_off < w->rawq.len)
			ev |= EPOLLOUT;
	} else if (w->state == WS_OPEN) {
		if (!w->paused && wslay_event_want_read(w->ctx))
			ev |= EPOLLIN;
		if (w->wpos < w->wlen || wslay_event_want_write(w->ctx))
			ev |= EPOLLOUT;
	} else if (w->state == WS_CONNECTING) {
		ev = EPOLLOUT;
	} else {
		ev = EPOLLIN;
		if (w->state == WS_UPGRADING && w->req_off < w->req_len)
			ev |= EPOLLOUT;
	}
	if (ev != ev_io_events(w->io))
		ev_io_mod(w->io, ev);
}

/* The close code we sent tells why wslay stopped reading. */
static int close_reason(struct ws *w)
{
	uint16_t sent = wslay_event_get_status_code_sent(w->ctx);

	if (w->err != 0)
		return w->err;
	if (sent == WSLAY_CODE_MESSAGE_TOO_BIG)
		return -EMSGSIZE;
	if (sent == WSLAY_CODE_PROTOCOL_ERROR || sent == WSLAY_CODE_INVALID_FRAME_PAYLOAD_DATA)
		return -EPROTO;
	return 0;
}

/* Moves queued frames to the socket until it would block. */
static int flush_out(struct ws *w)
{
	for (;;) {
		if (w->wpos < w->wlen) {
			ssize_t n = raw_write(w, w->wbuf + w->wpos, w->wlen - w->wpos);

			if (n == -EAGAIN)
				return 0;
			if (n < 0)
				return (int)n;
			w->wpos += (size_t)n;
			w->bytes_out += (uint64_t)n;
			continue;
		}
		w->wpos = w->wlen = 0;
		if (!wslay_event_want_write(w->ctx))
			return 0;
		if (wslay_event_send(w->ctx) != 0)
			return -EIO;
		if (w->wlen == 0)
			return 0;
	}
}

/* on_drain once the queue fell to low water; false if the owner freed w. */
static bool notify_drain(struct ws *w)
{
	if (w->above_low && ws_queued(w) <= w->cfg.low_water) {
		w->above_low = false;
		if (w->ops->on_drain != NULL)
			w->ops->on_drain(w, w->arg);
	}
	return !w->freed;
}

/* Raw mode: bytes to the owner (one socket read per wakeup), the queue to
 * the socket. */
static void pump_raw(struct ws *w)
{
	while (w->rawq_off < w->rawq.len) {
		ssize_t n = raw_write(w, w->rawq.p + w->rawq_off, w->rawq.len - w->rawq_off);

		if (n == -EAGAIN)
			break;
		if (n < 0) {
			finish(w, (int)n);
			return;
		}
		w->rawq_off += (size_t)n;
		w->bytes_out += (uint64_t)n;
	}
	if (w->rawq_off == w->rawq.len)
		w->rawq.len = w->rawq_off = 0;
	if (!w->paused) {
		size_t n = w->rlen - w->rpos;

		if (n == 0) {
			ssize_t r = raw_read(w, w->rbuf, RBUF_SIZE);

			if (r == 0 || (r < 0 && r != -EAGAIN)) {
				finish(w, r == 0 ? 0 : (int)r);
				return;
			}
			w->rpos = 0;
			w->rlen = r > 0 ? (size_t)r : 0;
			if (r > 0)
				w->bytes_in += (uint64_t)r;
			n = w->rlen;
		}
		if (n > 0) {
			size_t at = w->rpos;

			w->rpos = w->rlen = 0;
			w->ops->on_msg(w, true, w->rbuf + at, n, w->arg);
			if (w->freed || w->state != WS_OPEN)
				return;
		}
	}
	if (!notify_drain(w))
		return;
	update_events(w);
}

/* Runs wslay both ways and reports what changed. */
static void pump(struct ws *w)
{
	int r;

	if (w->state != WS_OPEN)
		return;
	if (w->raw) {
		pump_raw(w);
		return;
	}
	if (!w->paused && wslay_event_want_read(w->ctx)) {
		w->read_once = false;
		r = wslay_event_recv(w->ctx);
		if (w->freed)
			return;
		if (r != 0 && !w->eof) {
			finish(w, r == WSLAY_ERR_NOMEM ? -ENOMEM : -EIO);
			return;
		}
	}
	r = flush_out(w);
	if (r == 0 && w->close_code != 0) {
		close_when_drained(w);
		r = flush_out(w);
	}
	if (r < 0 && w->err == 0)
		w->err = r;
	if (w->err != 0 && (w->eof || r < 0)) {
		finish(w, w->err);
		return;
	}
	if (!wslay_event_want_read(w->ctx) && !wslay_event_want_write(w->ctx) &&
	    w->wpos == w->wlen) {
		finish(w, close_reason(w));
		return;
	}
	if (!notify_drain(w))
		return;
	update_events(w);
}

static void on_kick(struct ev_timer *t, void *arg)
{
	struct ws *w = arg;

	(void)t;
	enter(w);
	pump(w);
	leave(w);
}

static void arm_kick(struct ws *w)
{
	if (!ev_timer_armed(&w->kick) && w->state != WS_DONE)
		ev_timer_start(w->loop, &w->kick, 0, on_kick, w);
}

int ws_send(struct ws *w, bool binary, const void *msg, size_t len)
{
	struct wslay_event_msg m = {
		.opcode = binary ? WSLAY_BINARY_FRAME : WSLAY_TEXT_FRAME,
		.msg = msg,
		.msg_length = len,
	};
	int r;

	if (w->state != WS_OPEN || w->freed || w->close_code != 0)
		return -EPIPE;
	if (w->raw) {
		strbuf_append(&w->rawq, msg, len);
		if (w->rawq.bad)
			return -ENOBUFS;
		if (ws_queued(w) > w->cfg.low_water)
			w->above_low = true;
		arm_kick(w);
		return 0;
	}
	r = wslay_event_queue_msg(w->ctx, &m);
	if (r == WSLAY_ERR_NOMEM)
		return -ENOMEM;
	if (r != 0)
		return -EPIPE;
	if (ws_queued(w) > w->cfg.low_water)
		w->above_low = true;
	arm_kick(w);
	return 0;
}

/* wslay sends a queued close before queued messages (control frames go
 * first), so the close waits in close_code until the queue is empty: a
 * refusal's last message must reach the peer before the close. */
static void close_when_drained(struct ws *w)
{
	if (w->close_code == 0 || wslay_event_get_queued_msg_count(w->ctx) > 0)
		return;
	wslay_event_queue_close(w->ctx, w->close_code, NULL, 0);
	w->close_code = 0;
}

int ws_close(struct ws *w, uint16_t code)
{
	if (w->state != WS_OPEN || w->freed || w->close_code != 0)
		return -EPIPE;
	if (w->raw) {
		finish(w, 0); /* a raw stream has no close handshake */
		return 0;
	}
	w->close_code = code != 0 ? code : WSLAY_CODE_NORMAL_CLOSURE;
	close_when_drained(w);
	arm_kick(w);
	return 0;
}

void ws_pause(struct ws *w, bool paused)
{
	if (w->paused == paused)
		return;
	w->paused = paused;
	if (!paused)
		arm_kick(w); /* bytes may wait in rbuf with nothing to wake us */
	else
		update_events(w);
}

int ws_peer(const struct ws *w, struct addr *a)
{
	a->len = sizeof(a->ss);
	if (w->fd < 0 || getpeername(w->fd, (struct sockaddr *)&a->ss, &a->len) < 0)
		return -errno;
	return 0;
}

bool ws_is_open(const struct ws *w)
{
	return w->state == WS_OPEN && !w->freed;
}

uint64_t ws_bytes_in(const struct ws *w)
{
	return w->bytes_in;
}

uint64_t ws_bytes_out(const struct ws *w)
{
	return w->bytes_out;
}

static int open_wslay(struct ws *w)
{
	int r;

	if (w->raw) {
		w->state = WS_OPEN;
		return 0;
	}
	r = w->client ? wslay_event_context_client_init(&w->ctx, &wslay_cbs, w)
		      : wslay_event_context_server_init(&w->ctx, &wslay_cbs, w);

	if (r != 0)
		return -ENOMEM;
	wslay_event_config_set_max_recv_msg_length(w->ctx, w->cfg.max_msg);
	w->state = WS_OPEN;
	return 0;
}

/* ---- client: connect, TLS, upgrade ---- */

static void client_fail(struct ws *w, int err)
{
	finish(w, err);
}

static int start_upgrade(struct ws *w)
{
	uint8_t raw[16];
	char hostport[300];
	int n;

	randombytes_buf(raw, sizeof(raw));
	EVP_EncodeBlock((unsigned char *)w->key, raw, sizeof(raw));
	if (ws_accept_key(w->key, w->accept) < 0)
		return -EIO;
	if ((w->tls && w->port == 443) || (!w->tls && w->port == 80))
		snprintf(hostport, sizeof(hostport), "%s", w->host);
	else if (strchr(w->host, ':') != NULL)
		snprintf(hostport, sizeof(hostport), "[%s]:%u", w->host, w->port);
	else
		snprintf(hostport, sizeof(hostport), "%s:%u", w->host, w->port);
	w->req = malloc(1024);
	if (w->req == NULL)
		return -ENOMEM;
	n = snprintf(w->req, 1024,
		     "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: %s\r\nConnection: Upgrade\r\n"
		     "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s%s"
		     "User-Agent: rally-relay/" RALLY_VERSION "\r\n\r\n",
		     w->path, hostport, w->raw ? w->raw_protocol : "websocket", w->key,
		     w->extra_header, w->extra_header[0] != '\0' ? "\r\n" : "");
	if (n < 0 || n >= 1024)
		return -ENAMETOOLONG;
	w->req_len = (size_t)n;
	w->req_off = 0;
	w->state = WS_UPGRADING;
	return 0;
}

/* Finds header name in an HTTP head (CRLF lines); copies its value. */
static bool head_value(const char *head, const char *name, char *out, size_t size)
{
	size_t nl = strlen(name);
	const char *p = strstr(head, "\r\n");

	while (p != NULL && p[2] != '\0') {
		const char *line = p + 2, *end = strstr(line, "\r\n");

		if (end == NULL)
			break;
		if ((size_t)(end - line) > nl && strncasecmp(line, name, nl) == 0 &&
		    line[nl] == ':') {
			const char *v = line + nl + 1;
			size_t len;

			while (v < end && (*v == ' ' || *v == '\t'))
				v++;
			len = (size_t)(end - v);
			while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t'))
				len--;
			if (len >= size)
				return false;
			memcpy(out, v, len);
			out[len] = '\0';
			return true;
		}
		p = end;
	}
	return false;
}

/* Reads the server's answer to the upgrade: 0 not yet, 1 open, < 0 fail. */
static int read_upgrade(struct ws *w)
{
	for (;;) {
		ssize_t n;
		char *end;
		char v[128];

		if (w->rlen >= HTTP_RESP_MAX)
			return -EPROTO;
		n = raw_read(w, w->rbuf + w->rlen, HTTP_RESP_MAX - w->rlen);
		if (n == -EAGAIN)
			return 0;
		if (n <= 0)
			return n == 0 ? -ECONNRESET : (int)n;
		w->bytes_in += (uint64_t)n;
		w->rlen += (size_t)n;
		w->rbuf[w->rlen] = '\0';
		end = strstr((char *)w->rbuf, "\r\n\r\n");
		if (end == NULL)
			continue;
		end[2] = '\0'; /* keep the last CRLF for head_value */
		if (strncmp((char *)w->rbuf, "HTTP/1.1 101", 12) != 0)
			return -ECONNREFUSED;
		if (w->raw) {
			if (!head_value((char *)w->rbuf, "Upgrade", v, sizeof(v)) ||
			    strcasecmp(v, w->raw_protocol) != 0)
				return -EPROTO;
		} else if (!head_value((char *)w->rbuf, "Sec-WebSocket-Accept", v, sizeof(v)) ||
			   strcmp(v, w->accept) != 0)
			return -EPROTO;
		w->rpos = (size_t)(end + 4 - (char *)w->rbuf);
		return 1;
	}
}

static int tls_start(struct ws *w)
{
	struct addr ip;

	w->sslctx = SSL_CTX_new(TLS_client_method());
	if (w->sslctx == NULL)
		return -ENOMEM;
	SSL_CTX_set_min_proto_version(w->sslctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(w->sslctx, SSL_VERIFY_PEER, NULL);
	if (w->ca_file[0] != '\0') {
		if (SSL_CTX_load_verify_locations(w->sslctx, w->ca_file, NULL) != 1)
			return -ENOENT;
	} else if (SSL_CTX_set_default_verify_paths(w->sslctx) != 1) {
		return -ENOENT;
	}
	w->ssl = SSL_new(w->sslctx);
	if (w->ssl == NULL)
		return -ENOMEM;
	SSL_set_mode(w->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_set_fd(w->ssl, w->fd);
	if (addr_parse_ip(&ip, w->host) == 0) {
		/* An IP literal: matched against the certificate's IP SANs, and
		 * never sent as SNI (RFC 6066 allows host names only). */
		if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(w->ssl), w->host) != 1)
			return -EINVAL;
	} else {
		SSL_set_tlsext_host_name(w->ssl, w->host);
		if (SSL_set1_host(w->ssl, w->host) != 1)
			return -EINVAL;
	}
	w->state = WS_TLS;
	return 0;
}

/* Drives the client through TCP, TLS and the upgrade. */
static void client_step(struct ws *w, uint32_t events)
{
	int r;

	if (w->state == WS_CONNECTING) {
		int soerr = 0;
		socklen_t sl = sizeof(soerr);

		if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		getsockopt(w->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
		if (soerr != 0) {
			client_fail(w, -soerr);
			return;
		}
		r = w->tls ? tls_start(w) : start_upgrade(w);
		if (r < 0) {
			client_fail(w, r);
			return;
		}
	}
	if (w->state == WS_TLS) {
		r = SSL_connect(w->ssl);
		if (r != 1) {
			int e = SSL_get_error(w->ssl, r);

			if (e == SSL_ERROR_WANT_READ) {
				ev_io_mod(w->io, EPOLLIN);
				return;
			}
			if (e == SSL_ERROR_WANT_WRITE) {
				ev_io_mod(w->io, EPOLLOUT);
				return;
			}
			log_warn("ws-tls-fail host=%s verify=\"%s\"", w->host,
				 X509_verify_cert_error_string(SSL_get_verify_result(w->ssl)));
			ERR_clear_error();
			client_fail(w, -EPROTO);
			return;
		}
		r = start_upgrade(w);
		if (r < 0) {
			client_fail(w, r);
			return;
		}
	}
	if (w->state == WS_UPGRADING) {
		while (w->req_off < w->req_len) {
			ssize_t n = raw_write(w, w->req + w->req_off, w->req_len - w->req_off);

			if (n == -EAGAIN) {
				update_events(w);
				return;
			}
			if (n < 0) {
				client_fail(w, (int)n);
				return;
			}
			w->req_off += (size_t)n;
			w->bytes_out += (uint64_t)n;
		}
		r = read_upgrade(w);
		if (r == 0) {
			update_events(w);
			return;
		}
		if (r < 0) {
			client_fail(w, r);
			return;
		}
		free(w->req);
		w->req = NULL;
		if (open_wslay(w) < 0) {
			client_fail(w, -ENOMEM);
			return;
		}
		ev_timer_stop(w->loop, &w->deadline);
		w->ops->on_open(w, w->arg);
		if (w->freed)
			return;
		pump(w); /* frames may have come with the 101 */
	}
}

static void on_io(struct ev_io *io, uint32_t events, void *arg)
{
	struct ws *w = arg;

	(void)io;
	enter(w);
	if (w->state == WS_OPEN)
		pump(w);
	else if (w->state != WS_DONE)
		client_step(w, events);
	leave(w);
}

static void on_deadline(struct ev_timer *t, void *arg)
{
	struct ws *w = arg;

	(void)t;
	enter(w);
	if (w->state != WS_OPEN)
		client_fail(w, -ETIMEDOUT);
	leave(w);
}

static void resolve_work(void *arg)
{
	struct resolve_job *j = arg;

	j->n = addr_resolve(j->host, j->port, j->out, 8, &j->gai);
}

static void resolve_done(void *arg, bool cancelled)
{
	struct resolve_job *j = arg;
	struct ws *w = j->w;
	struct addr to = j->out[0];
	int fd, n = j->n;

	free(j);
	if (w == NULL)
		return;
	w->job = NULL;
	enter(w);
	if (cancelled || n <= 0) {
		client_fail(w, -EHOSTUNREACH);
		goto out;
	}
	fd = socket(to.ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		client_fail(w, -errno);
		goto out;
	}
	w->fd = fd;
	nodelay(fd);
	if (connect(fd, (const struct sockaddr *)&to.ss, to.len) < 0 && errno != EINPROGRESS) {
		client_fail(w, -errno);
		goto out;
	}
	w->io = ev_io_add(w->loop, fd, EPOLLOUT, on_io, w);
	if (w->io == NULL) {
		client_fail(w, -errno);
		goto out;
	}
	w->state = WS_CONNECTING;
out:
	leave(w);
}

static struct ws *ws_alloc(struct ev_loop *loop, const struct ws_cfg *cfg, const struct ws_ops *ops,
			   void *arg)
{
	struct ws *w = calloc(1, sizeof(*w));

	if (w == NULL)
		return NULL;
	w->loop = loop;
	w->fd = -1;
	w->cfg = *cfg;
	if (cfg->ca_file != NULL)
		snprintf(w->ca_file, sizeof(w->ca_file), "%s", cfg->ca_file);
	w->cfg.ca_file = w->ca_file;
	if (cfg->raw_protocol != NULL && cfg->raw_protocol[0] != '\0') {
		w->raw = true;
		snprintf(w->raw_protocol, sizeof(w->raw_protocol), "%s", cfg->raw_protocol);
		strbuf_init(&w->rawq, cfg->raw_queue_max != 0 ? cfg->raw_queue_max : 16u << 20);
	}
	if (cfg->extra_header != NULL)
		snprintf(w->extra_header, sizeof(w->extra_header), "%s", cfg->extra_header);
	w->cfg.raw_protocol = NULL;
	w->cfg.extra_header = NULL;
	w->ops = ops;
	w->arg = arg;
	ev_timer_init(&w->kick);
	ev_timer_init(&w->deadline);
	w->rbuf = malloc(RBUF_SIZE + 1);
	w->wbuf = malloc(WBUF_SIZE);
	if (w->rbuf == NULL || w->wbuf == NULL) {
		free(w->rbuf);
		free(w->wbuf);
		free(w);
		errno = ENOMEM;
		return NULL;
	}
	return w;
}

/* ws://host[:port]/path, wss://..., [v6]:port. */
static int parse_url(struct ws *w, const char *url)
{
	const char *p, *slash, *hostend;
	size_t hl;

	if (strncmp(url, "ws://", 5) == 0) {
		p = url + 5;
		w->port = 80;
	} else if (strncmp(url, "wss://", 6) == 0) {
		p = url + 6;
		w->tls = true;
		w->port = 443;
	} else {
		return -EINVAL;
	}
	slash = strchr(p, '/');
	if (slash == NULL)
		slash = p + strlen(p);
	if (*p == '[') {
		hostend = memchr(p, ']', (size_t)(slash - p));
		if (hostend == NULL)
			return -EINVAL;
		hl = (size_t)(hostend - p - 1);
		if (hl == 0 || hl >= sizeof(w->host))
			return -EINVAL;
		memcpy(w->host, p + 1, hl);
		p = hostend + 1;
	} else {
		hostend = memchr(p, ':', (size_t)(slash - p));
		if (hostend == NULL)
			hostend = slash;
		hl = (size_t)(hostend - p);
		if (hl == 0 || hl >= sizeof(w->host))
			return -EINVAL;
		memcpy(w->host, p, hl);
		p = hostend;
	}
	w->host[hl] = '\0';
	if (*p == ':') {
		char *e;
		unsigned long v = strtoul(p + 1, &e, 10);

		if (e != slash || v == 0 || v > 65535)
			return -EINVAL;
		w->port = (uint16_t)v;
	} else if (p != slash) {
		return -EINVAL;
	}
	if (*slash == '\0')
		strcpy(w->path, "/");
	else if (strlen(slash) >= sizeof(w->path))
		return -EINVAL;
	else
		strcpy(w->path, slash);
	for (const char *c = w->path; *c != '\0'; c++)
		if ((unsigned char)*c <= ' ' || (unsigned char)*c >= 0x7f)
			return -EINVAL;
	return 0;
}

struct ws *ws_connect(struct ev_loop *loop, const char *url, const struct ws_cfg *cfg,
		      const struct ws_ops *ops, void *arg)
{
	struct ws *w = ws_alloc(loop, cfg, ops, arg);
	struct resolve_job *j;
	int r;

	if (w == NULL)
		return NULL;
	w->client = true;
	r = parse_url(w, url);
	if (r < 0)
		goto fail;
	j = calloc(1, sizeof(*j));
	if (j == NULL) {
		r = -ENOMEM;
		goto fail;
	}
	j->w = w;
	snprintf(j->host, sizeof(j->host), "%s", w->host);
	j->port = w->port;
	r = ev_work_submit(loop, resolve_work, resolve_done, j);
	if (r < 0) {
		free(j);
		goto fail;
	}
	w->job = j;
	w->state = WS_RESOLVING;
	if (cfg->connect_timeout_ms > 0)
		ev_timer_start(loop, &w->deadline, cfg->connect_timeout_ms, on_deadline, w);
	return w;
fail:
	destroy(w);
	errno = -r;
	return NULL;
}

struct ws *ws_new_server(struct ev_loop *loop, int fd, const uint8_t *extra, size_t extra_len,
			 const struct ws_cfg *cfg, const struct ws_ops *ops, void *arg,
			 ws_release_fn *release, void *release_arg)
{
	struct ws *w;

	if (extra_len > RBUF_SIZE) {
		errno = EMSGSIZE;
		return NULL;
	}
	w = ws_alloc(loop, cfg, ops, arg);
	if (w == NULL)
		return NULL;
	w->fd = fd;
	nodelay(fd);
	memcpy(w->rbuf, extra, extra_len);
	w->rlen = extra_len;
	if (open_wslay(w) < 0) {
		free(w->rbuf);
		free(w->wbuf);
		free(w);
		errno = ENOMEM;
		return NULL;
	}
	w->io = ev_io_add(loop, fd, EPOLLIN, on_io, w);
	if (w->io == NULL) {
		int e = errno;

		wslay_event_context_free(w->ctx);
		free(w->rbuf);
		free(w->wbuf);
		free(w);
		errno = e;
		return NULL;
	}
	w->release = release;
	w->release_arg = release_arg;
	if (extra_len > 0)
		arm_kick(w);
	return w;
}
