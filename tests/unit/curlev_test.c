/*
 * common/curlev: libcurl's multi-socket API inside our loop, against
 * servers in the same loop on 127.0.0.1 - our own httpd (libmicrohttpd)
 * for ordinary answers, a raw TCP responder for a close-delimited body with
 * no Content-Length, a listener that never accepts (timeouts) and a bound
 * socket that never listens (refused). Every run has a guard timer, so a
 * broken glue fails a check instead of hanging; ASan checks that every
 * owner struct is freed exactly once, also on cancel and curlev_free.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "addr.h"
#include "curlev.h"
#include "ev.h"
#include "httpd.h"
#include "log.h"
#include "tap.h"

#define BIG_LEN (100 * 1024)

static struct ev_loop *loop;
static struct curlev *cev;
static char base_url[64];   /* the httpd */
static char raw_url[64];    /* the raw responder */
static char mute_url[64];   /* accepts in the backlog, never answers */
static char closed_url[64]; /* nothing listens */

/* ---- the servers ---- */

static void handler(struct httpd_req *req, void *arg)
{
	const char *path = httpd_path(req);

	(void)arg;
	if (strcmp(path, "/hello") == 0) {
		const char *i = httpd_query(req, "i");
		char b[64];
		int n = snprintf(b, sizeof(b), "hello %s", i != NULL ? i : "world");

		httpd_reply(req, 200, "text/plain", b, (size_t)n);
	} else if (strcmp(path, "/echo") == 0 && strcmp(httpd_method(req), "POST") == 0) {
		const char *ct = httpd_header(req, "Content-Type");
		size_t len;
		const char *body = httpd_body(req, &len);
		char *b = malloc(len + 128);
		int n = snprintf(b, 128, "ct=%s ua=%s len=%zu:", ct != NULL ? ct : "-",
				 httpd_header(req, "User-Agent") != NULL
					 ? httpd_header(req, "User-Agent")
					 : "-",
				 len);

		memcpy(b + n, body, len);
		httpd_reply(req, 200, "text/plain", b, (size_t)n + len);
		free(b);
	} else if (strcmp(path, "/big") == 0) {
		char *b = malloc(BIG_LEN);

		memset(b, 'x', BIG_LEN);
		httpd_reply(req, 200, "text/plain", b, BIG_LEN);
		free(b);
	} else {
		httpd_reply_error(req, 404, "no such path");
	}
}

/* A raw HTTP/1.0 responder: a close-delimited body of BIG_LEN bytes, so
 * only the write callback can see that it is too big. */
struct raw_conn {
	struct ev_io *io;
	size_t sent;
	char *resp;
	size_t resp_len;
	bool got_request;
};

static void on_raw_conn(struct ev_io *io, uint32_t events, void *arg)
{
	struct raw_conn *rc = arg;
	int fd = ev_io_fd(io);

	if (events & (EPOLLHUP | EPOLLERR))
		goto close;
	if (!rc->got_request) {
		char buf[4096];

		if (read(fd, buf, sizeof(buf)) <= 0)
			goto close;
		rc->got_request = true; /* one read holds the whole GET */
		ev_io_mod(io, EPOLLOUT);
		return;
	}
	while (rc->sent < rc->resp_len) {
		ssize_t n = send(fd, rc->resp + rc->sent, rc->resp_len - rc->sent, MSG_NOSIGNAL);

		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0)
			goto close;
		rc->sent += (size_t)n;
	}
close:
	ev_io_del(io, true);
	free(rc->resp);
	free(rc);
}

static void on_raw_accept(struct ev_io *io, uint32_t events, void *arg)
{
	int fd;

	(void)events;
	(void)arg;
	while ((fd = accept4(ev_io_fd(io), NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		struct raw_conn *rc = calloc(1, sizeof(*rc));
		const char *hdr = "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n";
		size_t hl = strlen(hdr);

		rc->resp_len = hl + BIG_LEN;
		rc->resp = malloc(rc->resp_len);
		memcpy(rc->resp, hdr, hl);
		memset(rc->resp + hl, 'y', BIG_LEN);
		rc->io = ev_io_add(loop, fd, EPOLLIN, on_raw_conn, rc);
	}
}

static int tcp_socket(struct addr *a, bool do_listen)
{
	int fd;

	memset(a, 0, sizeof(*a));
	CHECK(addr_parse(a, "127.0.0.1:0", -1) == 0);
	if (do_listen)
		return httpd_listen(a);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0);
	CHECK(bind(fd, (struct sockaddr *)&a->ss, a->len) == 0);
	a->len = sizeof(a->ss);
	CHECK(getsockname(fd, (struct sockaddr *)&a->ss, &a->len) == 0);
	return fd;
}

/* ---- running the loop until enough callbacks came ---- */

static bool guard_fired;
static int done_count, done_target;

static void on_guard(struct ev_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	guard_fired = true;
	ev_loop_stop(loop);
}

static void run_until(int target, long long guard_ms)
{
	struct ev_timer g;

	done_target = target;
	ev_timer_init(&g);
	guard_fired = false;
	ev_timer_start(loop, &g, guard_ms, on_guard, NULL);
	if (done_count < done_target)
		CHECK_EQ_INT(ev_loop_run(loop), 0);
	ev_timer_stop(loop, &g);
}

/* Runs the loop for ms whatever happens (for "nothing must arrive"). */
static void run_for(long long ms)
{
	struct ev_timer g;

	done_target = 1 << 30;
	ev_timer_init(&g);
	ev_timer_start(loop, &g, ms, on_guard, NULL);
	CHECK_EQ_INT(ev_loop_run(loop), 0);
	guard_fired = false;
}

struct got {
	bool called;
	int calls;
	int result;
	long status;
	char body[256];
	size_t len;
};

static void on_done(void *arg, int result, long status, const char *body, size_t len)
{
	struct got *g = arg;

	g->called = true;
	g->calls++;
	g->result = result;
	g->status = status;
	g->len = len;
	snprintf(g->body, sizeof(g->body), "%s", body);
	CHECK(body[len] == '\0');
	if (++done_count >= done_target)
		ev_loop_stop(loop);
}

static struct got *request(const char *base, const char *path, const char *body, long timeout_ms,
			   size_t max)
{
	struct got *g = calloc(1, sizeof(*g));
	char url[128];

	snprintf(url, sizeof(url), "%s%s", base, path);
	CHECK(curlev_request(cev, url, body, body != NULL ? strlen(body) : 0, "curlev-test/1",
			     timeout_ms, max, on_done, g) != NULL);
	return g;
}

/* ---- the cases ---- */

static void test_get(void)
{
	struct got *g;

	done_count = 0;
	g = request(base_url, "/hello", NULL, 2000, 1024);
	CHECK_EQ_INT(curlev_pending(cev), 1);
	run_until(1, 3000);
	CHECK(!guard_fired);
	CHECK_EQ_INT(g->calls, 1);
	CHECK_EQ_INT(g->result, 0);
	CHECK_EQ_INT(g->status, 200);
	CHECK_EQ_STR(g->body, "hello world");
	CHECK_EQ_INT(g->len, 11);
	CHECK_EQ_INT(curlev_pending(cev), 0);
	free(g);
}

/* A name instead of an address: curl resolves it (its resolver may use a
 * socket pair of its own, closed behind our back) and, for localhost, may
 * try ::1 first and fall back to 127.0.0.1 where the server listens. */
static void test_localhost(void)
{
	struct got *g[3];
	char base[80];
	const char *port = strrchr(base_url, ':');

	snprintf(base, sizeof(base), "http://localhost%s", port);
	done_count = 0;
	for (int i = 0; i < 3; i++)
		g[i] = request(base, "/hello", NULL, 3000, 1024);
	run_until(3, 5000);
	CHECK(!guard_fired);
	for (int i = 0; i < 3; i++) {
		CHECK_EQ_INT(g[i]->result, 0);
		CHECK_EQ_INT(g[i]->status, 200);
		CHECK_EQ_STR(g[i]->body, "hello world");
		free(g[i]);
	}
}

static void test_post_json(void)
{
	struct got *g;

	done_count = 0;
	g = request(base_url, "/echo", "{\"id\":\"abc\",\"n\":1}", 2000, 1024);
	run_until(1, 3000);
	CHECK(!guard_fired);
	CHECK_EQ_INT(g->result, 0);
	CHECK_EQ_INT(g->status, 200);
	CHECK_EQ_STR(g->body,
		     "ct=application/json ua=curlev-test/1 len=18:{\"id\":\"abc\",\"n\":1}");
	free(g);
}

static void test_404(void)
{
	struct got *g;

	done_count = 0;
	g = request(base_url, "/nowhere", NULL, 2000, 1024);
	run_until(1, 3000);
	CHECK(!guard_fired);
	CHECK_EQ_INT(g->result, 0);
	CHECK_EQ_INT(g->status, 404);
	CHECK_EQ_STR(g->body, "{\"error\":\"no such path\"}");
	free(g);
}

static void test_too_big(void)
{
	struct got *a, *b, *c;

	done_count = 0;
	/* Content-Length known: refused before the body. */
	a = request(base_url, "/big", NULL, 2000, 1000);
	/* Close-delimited: the write callback stops it at the cap. */
	b = request(raw_url, "/big", NULL, 2000, 1000);
	/* Exactly at the cap is fine. */
	c = request(base_url, "/big", NULL, 2000, BIG_LEN);
	run_until(3, 5000);
	CHECK(!guard_fired);
	CHECK_EQ_INT(a->result, -EMSGSIZE);
	CHECK_EQ_INT(b->result, -EMSGSIZE);
	CHECK_EQ_INT(c->result, 0);
	CHECK_EQ_INT(c->len, BIG_LEN);
	CHECK_EQ_INT(c->status, 200);
	free(a);
	free(b);
	free(c);
}

static void test_timeout(void)
{
	struct got *g;
	long long t0 = ev_now_update(loop);

	done_count = 0;
	g = request(mute_url, "/", NULL, 300, 1024);
	run_until(1, 3000);
	CHECK(!guard_fired);
	CHECK_EQ_INT(g->result, -ETIMEDOUT);
	CHECK_EQ_INT(g->status, 0);
	CHECK(ev_now_update(loop) - t0 >= 290);
	CHECK(ev_now_update(loop) - t0 < 2000);
	free(g);
}

static void test_refused(void)
{
	struct got *g;

	done_count = 0;
	g = request(closed_url, "/", NULL, 2000, 1024);
	run_until(1, 3000);
	CHECK(!guard_fired);
	CHECK_EQ_INT(g->result, -ECONNREFUSED);
	free(g);
}

struct canceller {
	struct ev_timer t;
	struct curlev_req *r;
};

static void on_cancel_timer(struct ev_timer *t, void *arg)
{
	struct canceller *k = arg;

	size_t before = curlev_pending(cev);

	(void)t;
	CHECK(before >= 1);
	curlev_cancel(k->r);
	CHECK_EQ_INT(curlev_pending(cev), before - 1);
}

static void test_cancel(void)
{
	struct got g1 = {0}, g2 = {0}, g3 = {0};
	struct curlev_req *r;
	struct canceller k;
	char url[128];

	done_count = 0;
	/* Cancelled before the loop ever ran. */
	snprintf(url, sizeof(url), "%s/hello", base_url);
	r = curlev_request(cev, url, NULL, 0, NULL, 2000, 1024, on_done, &g1);
	CHECK(r != NULL);
	curlev_cancel(r);
	curlev_cancel(NULL);
	CHECK_EQ_INT(curlev_pending(cev), 0);
	/* Cancelled in flight (connected, waiting for an answer), from a
	 * timer, while another request goes on. */
	snprintf(url, sizeof(url), "%s/", mute_url);
	k.r = curlev_request(cev, url, NULL, 0, NULL, 2000, 1024, on_done, &g2);
	CHECK(k.r != NULL);
	snprintf(url, sizeof(url), "%s/hello?i=after", base_url);
	CHECK(curlev_request(cev, url, NULL, 0, NULL, 2000, 1024, on_done, &g3) != NULL);
	ev_timer_init(&k.t);
	ev_timer_start(loop, &k.t, 50, on_cancel_timer, &k);
	run_for(400);
	CHECK(!g1.called);
	CHECK(!g2.called);
	CHECK_EQ_INT(g3.calls, 1);
	CHECK_EQ_STR(g3.body, "hello after");
	CHECK_EQ_INT(curlev_pending(cev), 0);
}

#define NCONC (50)

static void test_concurrent(void)
{
	struct got *g[NCONC];
	char path[64], want[64];
	int ok = 0;

	done_count = 0;
	for (int i = 0; i < NCONC; i++) {
		snprintf(path, sizeof(path), "/hello?i=%d", i);
		if (i % 5 == 4) {
			snprintf(path, sizeof(path), "/echo");
			g[i] = request(base_url, path, "{\"n\":12345}", 5000, 1024);
		} else {
			g[i] = request(base_url, path, NULL, 5000, 1024);
		}
	}
	CHECK_EQ_INT(curlev_pending(cev), NCONC);
	run_until(NCONC, 10000);
	CHECK(!guard_fired);
	for (int i = 0; i < NCONC; i++) {
		if (i % 5 == 4)
			snprintf(want, sizeof(want),
				 "ct=application/json ua=curlev-test/1 len=11:{\"n\":12345}");
		else
			snprintf(want, sizeof(want), "hello %d", i);
		if (g[i]->calls == 1 && g[i]->result == 0 && g[i]->status == 200 &&
		    strcmp(g[i]->body, want) == 0)
			ok++;
		else
			fprintf(stderr, "request %d: calls=%d result=%d status=%ld body=%s\n", i,
				g[i]->calls, g[i]->result, g[i]->status, g[i]->body);
		free(g[i]);
	}
	CHECK_EQ_INT(ok, NCONC);
	CHECK_EQ_INT(curlev_pending(cev), 0);
}

/* curlev_free with requests in flight: no callback, nothing leaked. */
static void test_free_pending(void)
{
	struct got g[6];
	struct curlev *c2 = curlev_new(loop);
	char url[128];

	memset(g, 0, sizeof(g));
	CHECK(c2 != NULL);
	for (int i = 0; i < 6; i++) {
		snprintf(url, sizeof(url), "%s/%s", i % 2 ? mute_url : base_url,
			 i % 3 ? "hello" : "big");
		CHECK(curlev_request(c2, url, NULL, 0, NULL, 5000, 1024, on_done, &g[i]) != NULL);
	}
	CHECK_EQ_INT(curlev_pending(c2), 6);
	/* Let the transfers connect and send, then free mid-flight. */
	run_for(30);
	curlev_free(c2);
	run_for(100);
	for (int i = 0; i < 6; i++)
		CHECK(!g[i].called || i % 2 == 0);
	/* Freed before the loop ever ran. */
	c2 = curlev_new(loop);
	memset(g, 0, sizeof(g));
	snprintf(url, sizeof(url), "%s/hello", base_url);
	CHECK(curlev_request(c2, url, NULL, 0, NULL, 5000, 1024, on_done, &g[0]) != NULL);
	curlev_free(c2);
	curlev_free(NULL);
	run_for(100);
	CHECK(!g[0].called);
}

/* An owner's callback frees the whole curlev while other transfers are
 * pending or already finished in the same drain. */
static struct curlev *c3;
static int c3_calls;

static void on_done_free(void *arg, int result, long status, const char *body, size_t len)
{
	(void)arg;
	(void)result;
	(void)status;
	(void)body;
	(void)len;
	c3_calls++;
	curlev_free(c3);
}

static void test_free_from_callback(void)
{
	char url[128];

	c3 = curlev_new(loop);
	CHECK(c3 != NULL);
	snprintf(url, sizeof(url), "%s/hello", base_url);
	for (int i = 0; i < 4; i++)
		CHECK(curlev_request(c3, url, NULL, 0, NULL, 5000, 1024, on_done_free, NULL) !=
		      NULL);
	snprintf(url, sizeof(url), "%s/", mute_url);
	CHECK(curlev_request(c3, url, NULL, 0, NULL, 5000, 1024, on_done_free, NULL) != NULL);
	run_for(300);
	CHECK_EQ_INT(c3_calls, 1);
}

/* A new request from inside a callback (the lobby re-polls this way). */
static int chain_left;

static void on_chain(void *arg, int result, long status, const char *body, size_t len)
{
	char url[128];

	(void)arg;
	(void)body;
	(void)len;
	CHECK_EQ_INT(result, 0);
	CHECK_EQ_INT(status, 200);
	if (--chain_left == 0) {
		ev_loop_stop(loop);
		return;
	}
	snprintf(url, sizeof(url), "%s/hello", base_url);
	CHECK(curlev_request(cev, url, NULL, 0, NULL, 2000, 1024, on_chain, NULL) != NULL);
}

static void test_chain(void)
{
	char url[128];

	chain_left = 20;
	snprintf(url, sizeof(url), "%s/hello", base_url);
	CHECK(curlev_request(cev, url, NULL, 0, NULL, 2000, 1024, on_chain, NULL) != NULL);
	run_until(1 << 30, 5000);
	CHECK(!guard_fired);
	CHECK_EQ_INT(chain_left, 0);
}

static void test_bad_args(void)
{
	errno = 0;
	CHECK(curlev_request(cev, NULL, NULL, 0, NULL, 1000, 10, on_done, NULL) == NULL);
	CHECK_EQ_INT(errno, EINVAL);
	CHECK(curlev_request(cev, "http://127.0.0.1:1/", NULL, 0, NULL, 1000, 10, NULL, NULL) ==
	      NULL);
	/* Only http and https. */
	{
		struct got g = {0};

		done_count = 0;
		CHECK(curlev_request(cev, "file:///etc/passwd", NULL, 0, NULL, 1000, 4096, on_done,
				     &g) != NULL);
		run_until(1, 2000);
		CHECK(g.called);
		CHECK(g.result < 0);
		CHECK(strstr(g.body, "root") == NULL);
	}
}

int main(void)
{
	struct httpd_cfg cfg = {.max_body = 4096, .conn_limit = 256, .conn_timeout_s = 10};
	struct addr a;
	struct httpd *d;
	struct ev_io *raw_io;
	char s[ADDR_STRLEN];
	int fd, mute_fd, closed_fd;

	ev_block_signals();
	log_init(LOG_LEVEL_WARN, LOG_TARGET_PLAIN);
	loop = ev_loop_new();
	CHECK(loop != NULL);

	fd = tcp_socket(&a, true);
	CHECK(fd >= 0);
	d = httpd_new_take(loop, fd, &cfg, handler, NULL);
	CHECK(d != NULL);
	snprintf(base_url, sizeof(base_url), "http://%s", addr_str(&a, s, sizeof(s)));

	fd = tcp_socket(&a, true);
	raw_io = ev_io_add(loop, fd, EPOLLIN, on_raw_accept, NULL);
	snprintf(raw_url, sizeof(raw_url), "http://%s", addr_str(&a, s, sizeof(s)));

	mute_fd = tcp_socket(&a, true); /* never accepted: the backlog answers SYNs */
	snprintf(mute_url, sizeof(mute_url), "http://%s", addr_str(&a, s, sizeof(s)));
	closed_fd = tcp_socket(&a, false); /* bound, not listening: RST */
	snprintf(closed_url, sizeof(closed_url), "http://%s", addr_str(&a, s, sizeof(s)));

	cev = curlev_new(loop);
	CHECK(cev != NULL);

	test_get();
	test_localhost();
	test_post_json();
	test_404();
	test_too_big();
	test_timeout();
	test_refused();
	test_cancel();
	test_concurrent();
	test_chain();
	test_free_pending();
	test_free_from_callback();
	test_bad_args();

	curlev_free(cev);
	ev_io_del(raw_io, true);
	httpd_free(d);
	close(mute_fd);
	close(closed_fd);
	ev_loop_free(loop);
	return tap_done("curlev");
}
