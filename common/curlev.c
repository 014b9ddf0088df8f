/*
 * libcurl's multi-socket API driven by our loop (curl docs/examples/
 * ephiperfifo.c is the model; we differ where STYLE.md section 6 says so).
 *
 * Three kinds of callback come from libcurl, and none of them calls back
 * into it:
 * - the socket callback mirrors curl's view of its sockets into ev_io
 *   watchers (one struct sock per socket curl tells us about, reachable by
 *   curl_multi_assign);
 * - the timer callback only arms (or stops) one loop timer; the loop runs
 *   curl_multi_socket_action(CURL_SOCKET_TIMEOUT) when it falls due, a
 *   0 ms deadline included;
 * - the open/close socket callbacks make every connection socket ours, so
 *   an fd is always removed from epoll before it is closed, and a number
 *   reused by a new socket never hits a stale registration (curl/curl#14976).
 *
 * Each action is followed by a drain of curl_multi_info_read; that is the
 * only place where an owner's callback runs and where a request is freed
 * (besides curlev_cancel and curlev_free, which never call it).
 */
#include "curlev.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ev.h"
#include "log.h"

/* Defaults for the 0 / negative arguments of curlev_request. */
#define CURLEV_DEFAULT_TIMEOUT_MS (30000)
#define CURLEV_DEFAULT_MAX        (64 * 1024)

/* A socket curl asked us to watch. */
struct sock {
	struct curlev *c;
	curl_socket_t fd;
	struct ev_io *io; /* NULL while the fd is not registered */
	uint32_t want;    /* EPOLLIN/EPOLLOUT as curl last asked */
	struct sock *prev, *next;
};

struct curlev_req {
	struct curlev *c;
	CURL *easy;
	struct curl_slist *headers;
	char *buf; /* the response, NUL-terminated */
	size_t len, cap, max;
	bool too_big;
	bool finishing; /* its callback runs: the handle is no longer valid */
	curlev_done_cb *cb;
	void *arg;
	struct curlev_req *prev, *next;
	char errbuf[CURL_ERROR_SIZE];
};

struct curlev {
	struct ev_loop *loop;
	CURLM *multi;
	struct ev_timer timer;
	struct curlev_req *reqs;
	size_t pending;
	struct sock *socks;
	bool draining; /* an owner's callback may be on the stack */
	bool doomed;   /* curlev_free was called from such a callback */
};

static void destroy(struct curlev *c);

/* ---- sockets ---- */

static struct sock *sock_find(struct curlev *c, curl_socket_t fd)
{
	for (struct sock *s = c->socks; s != NULL; s = s->next)
		if (s->fd == fd)
			return s;
	return NULL;
}

static void sock_unlink(struct sock *s)
{
	if (s->prev != NULL)
		s->prev->next = s->next;
	else
		s->c->socks = s->next;
	if (s->next != NULL)
		s->next->prev = s->prev;
}

static void drain(struct curlev *c);

static void on_sock_io(struct ev_io *io, uint32_t events, void *arg)
{
	struct sock *s = arg;
	struct curlev *c = s->c;
	int flags = 0, running;

	(void)io;
	if (events & EPOLLIN)
		flags |= CURL_CSELECT_IN;
	if (events & EPOLLOUT)
		flags |= CURL_CSELECT_OUT;
	if (events & (EPOLLERR | EPOLLHUP))
		flags |= CURL_CSELECT_ERR;
	/* s may be freed inside the action: use only c and the fd after it. */
	curl_multi_socket_action(c->multi, s->fd, flags, &running);
	drain(c);
}

static int sock_register(struct sock *s)
{
	if (s->io != NULL)
		return ev_io_mod(s->io, s->want);
	s->io = ev_io_add(s->c->loop, s->fd, s->want, on_sock_io, s);
	return s->io != NULL ? 0 : -errno;
}

/* CURLMOPT_SOCKETFUNCTION: what curl wants to hear about fd. */
static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	struct curlev *c = userp;
	struct sock *s = socketp;
	int r;

	(void)easy;
	if (what == CURL_POLL_REMOVE) {
		if (s == NULL)
			return 0;
		/* The fd may already be closed (ENOENT/EBADF from DEL is
		 * harmless: ev_io_del ignores it). */
		ev_io_del(s->io, false);
		sock_unlink(s);
		free(s);
		return 0;
	}
	if (s == NULL) {
		s = calloc(1, sizeof(*s));
		if (s == NULL)
			return -1; /* fails the transfer, not the process */
		s->c = c;
		s->fd = fd;
		s->next = c->socks;
		if (c->socks != NULL)
			c->socks->prev = s;
		c->socks = s;
		curl_multi_assign(c->multi, fd, s);
	}
	s->want = 0;
	if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
		s->want |= EPOLLIN;
	if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
		s->want |= EPOLLOUT;
	r = sock_register(s);
	if (r < 0) {
		log_warnx("curlev-watch-fail fd=%d err=%d", (int)fd, r);
		return -1;
	}
	return 0;
}

/* CURLOPT_OPENSOCKETFUNCTION: every connection socket is created here. */
static curl_socket_t on_open_socket(void *clientp, curlsocktype purpose,
				    struct curl_sockaddr *address)
{
	struct curlev *c = clientp;
	struct sock *stale;
	int fd;

	(void)purpose;
	fd = socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
	if (fd < 0)
		return CURL_SOCKET_BAD;
	/*
	 * A watcher for this number can only be left from an fd that was
	 * closed without our close callback (the threaded resolver's socket
	 * pair), or closed before curl said REMOVE: the kernel dropped that
	 * registration with the file. curl keys its socket table by number
	 * and may not tell us again, so register the new socket the way curl
	 * believes the number is registered.
	 */
	stale = sock_find(c, fd);
	if (stale != NULL) {
		ev_io_del(stale->io, false);
		stale->io = NULL;
		if (sock_register(stale) < 0)
			log_warnx("curlev-watch-fail fd=%d", fd);
	}
	return fd;
}

/* CURLOPT_CLOSESOCKETFUNCTION: out of epoll first, then closed. */
static int on_close_socket(void *clientp, curl_socket_t fd)
{
	struct curlev *c = clientp;
	struct sock *s = sock_find(c, fd);

	if (s != NULL && s->io != NULL) {
		ev_io_del(s->io, true);
		s->io = NULL;
		return 0;
	}
	return close(fd) < 0 ? 1 : 0;
}

/* ---- the timer ---- */

static void on_timeout(struct ev_timer *t, void *arg)
{
	struct curlev *c = arg;
	int running;

	(void)t;
	curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	drain(c);
}

/* CURLMOPT_TIMERFUNCTION: records the deadline only (-1 = none). */
static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
	struct curlev *c = userp;

	(void)multi;
	if (timeout_ms < 0)
		ev_timer_stop(c->loop, &c->timer);
	else
		ev_timer_start(c->loop, &c->timer, timeout_ms, on_timeout, c);
	return 0;
}

/* ---- requests ---- */

static size_t on_write(char *data, size_t size, size_t nmemb, void *userp)
{
	struct curlev_req *r = userp;
	size_t n = size * nmemb;

	if (n > r->max - r->len) {
		r->too_big = true;
		return 0; /* CURLE_WRITE_ERROR ends the transfer */
	}
	if (r->len + n + 1 > r->cap) {
		size_t cap = r->cap != 0 ? r->cap : 1024;
		char *b;

		while (cap < r->len + n + 1)
			cap *= 2;
		if (cap > r->max + 1)
			cap = r->max + 1;
		b = realloc(r->buf, cap);
		if (b == NULL)
			return 0;
		r->buf = b;
		r->cap = cap;
	}
	memcpy(r->buf + r->len, data, n);
	r->len += n;
	r->buf[r->len] = '\0';
	return n;
}

static void req_unlink(struct curlev_req *r)
{
	struct curlev *c = r->c;

	if (r->prev != NULL)
		r->prev->next = r->next;
	else
		c->reqs = r->next;
	if (r->next != NULL)
		r->next->prev = r->prev;
	c->pending--;
}

/* Takes r out of the multi handle and frees it; no callback. */
static void req_free(struct curlev_req *r)
{
	if (r->easy != NULL) {
		curl_multi_remove_handle(r->c->multi, r->easy);
		curl_easy_cleanup(r->easy);
	}
	curl_slist_free_all(r->headers);
	free(r->buf);
	free(r);
}

static int map_result(struct curlev_req *r, CURLcode rc)
{
	long os_errno = 0;

	switch (rc) {
	case CURLE_OK:
		return 0;
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_FILESIZE_EXCEEDED:
		return -EMSGSIZE;
	case CURLE_WRITE_ERROR:
		return r->too_big ? -EMSGSIZE : -ENOMEM;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	case CURLE_COULDNT_CONNECT:
		/* The connect's own errno when it says more than "refused"
		 * (ENETUNREACH, EHOSTUNREACH). */
		curl_easy_getinfo(r->easy, CURLINFO_OS_ERRNO, &os_errno);
		if (os_errno == ENETUNREACH || os_errno == EHOSTUNREACH)
			return -(int)os_errno;
		return -ECONNREFUSED;
	default:
		return -EIO;
	}
}

static void finish(struct curlev *c, CURL *easy, CURLcode rc)
{
	struct curlev_req *r;
	void *priv = NULL;
	long status = 0;
	int result;

	curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
	if (priv == NULL)
		return;
	r = priv;
	result = map_result(r, rc);
	if (result == 0)
		curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
	else
		log_debug("curlev-fail result=%d curl=%d msg=\"%s\"", result, (int)rc,
			  r->errbuf[0] != '\0' ? r->errbuf : curl_easy_strerror(rc));
	req_unlink(r);
	curl_multi_remove_handle(c->multi, easy);
	curl_easy_cleanup(easy);
	r->easy = NULL;
	r->finishing = true;
	if (result == 0)
		r->cb(r->arg, 0, status, r->buf != NULL ? r->buf : "", r->len);
	else
		r->cb(r->arg, result, 0, "", 0);
	req_free(r);
}

/* Runs the owners' callbacks of every finished transfer. */
static void drain(struct curlev *c)
{
	CURLMsg *m;
	int left;

	if (c->draining)
		return;
	c->draining = true;
	while (!c->doomed && (m = curl_multi_info_read(c->multi, &left)) != NULL) {
		/* m dies with curl_multi_remove_handle: copy what we need. */
		CURL *easy = m->easy_handle;
		CURLcode rc = m->data.result;

		if (m->msg == CURLMSG_DONE)
			finish(c, easy, rc);
	}
	c->draining = false;
	if (c->doomed)
		destroy(c);
}

struct curlev_req *curlev_request(struct curlev *c, const char *url, const char *body,
				  size_t body_len, const char *user_agent, long timeout_ms,
				  size_t max_response, curlev_done_cb *cb, void *arg)
{
	struct curlev_req *r;
	CURL *e;
	CURLMcode mc;
	int err = ENOMEM;

	if (c == NULL || url == NULL || cb == NULL || c->doomed) {
		errno = EINVAL;
		return NULL;
	}
	r = calloc(1, sizeof(*r));
	if (r == NULL)
		return NULL;
	r->c = c;
	r->cb = cb;
	r->arg = arg;
	r->max = max_response != 0 ? max_response : CURLEV_DEFAULT_MAX;
	if (timeout_ms <= 0)
		timeout_ms = CURLEV_DEFAULT_TIMEOUT_MS;
	e = r->easy = curl_easy_init();
	if (e == NULL)
		goto fail;
	/* An option that cannot be set is a bug or an out-of-memory. */
	if (curl_easy_setopt(e, CURLOPT_URL, url) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_PRIVATE, r) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)r->max) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_WRITEDATA, r) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, on_open_socket) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, c) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, c) != CURLE_OK) {
		err = EINVAL;
		goto fail;
	}
	if (user_agent != NULL && curl_easy_setopt(e, CURLOPT_USERAGENT, user_agent) != CURLE_OK)
		goto fail;
	if (body != NULL) {
		struct curl_slist *h;

		h = curl_slist_append(NULL, "Content-Type: application/json");
		if (h == NULL)
			goto fail;
		r->headers = h;
		/* No "Expect: 100-continue" round trip before a larger body. */
		h = curl_slist_append(r->headers, "Expect:");
		if (h == NULL)
			goto fail;
		r->headers = h;
		if (curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers) != CURLE_OK ||
		    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len) !=
			    CURLE_OK ||
		    curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, body) != CURLE_OK)
			goto fail;
	}
	mc = curl_multi_add_handle(c->multi, e);
	if (mc != CURLM_OK) {
		err = mc == CURLM_OUT_OF_MEMORY ? ENOMEM : EIO;
		goto fail;
	}
	r->next = c->reqs;
	if (c->reqs != NULL)
		c->reqs->prev = r;
	c->reqs = r;
	c->pending++;
	return r;
fail:
	if (r->easy != NULL)
		curl_easy_cleanup(r->easy);
	curl_slist_free_all(r->headers);
	free(r);
	errno = err;
	return NULL;
}

void curlev_cancel(struct curlev_req *r)
{
	/* A cancel from the request's own callback comes too late: ignore. */
	if (r == NULL || r->finishing)
		return;
	req_unlink(r);
	req_free(r);
}

size_t curlev_pending(const struct curlev *c)
{
	return c->pending;
}

struct curlev *curlev_new(struct ev_loop *loop)
{
	struct curlev *c;

	/* Reference-counted by libcurl; thread-safe in 7.84 and later. */
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		errno = EIO;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		goto fail;
	c->loop = loop;
	ev_timer_init(&c->timer);
	c->multi = curl_multi_init();
	if (c->multi == NULL)
		goto fail;
	if (curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket) != CURLM_OK ||
	    curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c) != CURLM_OK ||
	    curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer) != CURLM_OK ||
	    curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c) != CURLM_OK)
		goto fail;
	return c;
fail:
	if (c != NULL && c->multi != NULL)
		curl_multi_cleanup(c->multi);
	free(c);
	curl_global_cleanup();
	errno = ENOMEM;
	return NULL;
}

static void destroy(struct curlev *c)
{
	while (c->reqs != NULL) {
		struct curlev_req *r = c->reqs;

		req_unlink(r);
		req_free(r);
	}
	/* Closes cached connections through on_close_socket. */
	curl_multi_cleanup(c->multi);
	while (c->socks != NULL) {
		struct sock *s = c->socks;

		ev_io_del(s->io, false);
		sock_unlink(s);
		free(s);
	}
	ev_timer_stop(c->loop, &c->timer);
	free(c);
	curl_global_cleanup();
}

void curlev_free(struct curlev *c)
{
	if (c == NULL)
		return;
	if (c->draining) {
		/* An owner's callback frees us: finish when drain unwinds. */
		c->doomed = true;
		return;
	}
	destroy(c);
}
