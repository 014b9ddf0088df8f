/*
 * common/redisev: hiredis's async API on our loop. The peer is a scripted
 * RESP speaker on loopback driven by the same loop (it answers "+PONG" to
 * each command, or hangs up), so the glue's hard cases run under ASan:
 * a context freed from inside its own reply callback (cleanup deferred
 * while hiredis is in our io callback), the peer hanging up (disconnect
 * callback, then cleanup), a refused connect (connect callback with an
 * error, the context freed by hiredis), and a free from a timer while a
 * command waits (its callback answered NULL). The real server is
 * exercised by tests/integ/master_redis_*.
 */
#include <errno.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "addr.h"
#include "ev.h"
#include "redisev.h"
#include "tap.h"

struct peer {
	struct ev_loop *loop;
	int lfd;
	struct ev_io *lio, *cio;
	bool hang_up; /* close the connection instead of answering */
	bool mute;    /* read, answer nothing */
	int commands;
};

static void on_client(struct ev_io *io, uint32_t events, void *arg)
{
	struct peer *p = arg;
	char buf[4096];
	ssize_t n;

	(void)events;
	n = recv(ev_io_fd(io), buf, sizeof(buf), 0);
	if (n <= 0 || p->hang_up) {
		ev_io_del(io, true);
		p->cio = NULL;
		return;
	}
	/* One "*N\r\n" array header per command. */
	for (ssize_t i = 0; i < n && !p->mute; i++) {
		if (buf[i] == '*' && (i == 0 || buf[i - 1] == '\n')) {
			p->commands++;
			(void)!send(ev_io_fd(io), "+PONG\r\n", 7, MSG_NOSIGNAL);
		}
	}
}

static void on_accept(struct ev_io *io, uint32_t events, void *arg)
{
	struct peer *p = arg;
	int fd = accept4(ev_io_fd(io), NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

	(void)events;
	if (fd < 0)
		return;
	if (p->cio != NULL) {
		close(fd);
		return;
	}
	p->cio = ev_io_add(p->loop, fd, EPOLLIN, on_client, p);
}

static int peer_start(struct peer *p, struct ev_loop *loop)
{
	struct sockaddr_in sin = {.sin_family = AF_INET};
	socklen_t len = sizeof(sin);

	memset(p, 0, sizeof(*p));
	p->loop = loop;
	p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	sin.sin_addr.s_addr = htonl(0x7f000001);
	if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
	    listen(p->lfd, 4) < 0 || getsockname(p->lfd, (struct sockaddr *)&sin, &len) < 0)
		return -1;
	p->lio = ev_io_add(loop, p->lfd, EPOLLIN, on_accept, p);
	return ntohs(sin.sin_port);
}

static void peer_stop(struct peer *p)
{
	ev_io_del(p->cio, true);
	ev_io_del(p->lio, true);
}

/* ---- the client side ---- */

struct state {
	int connected, connect_failed, disconnected, replies, null_replies;
	bool free_in_reply;
	redisAsyncContext *ac;
};

static struct state st;

static void on_connect(const redisAsyncContext *ac, int status)
{
	(void)ac;
	if (status == REDIS_OK)
		st.connected++;
	else
		st.connect_failed++;
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	(void)ac;
	(void)status;
	st.disconnected++;
}

static void on_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	const redisReply *r = reply;

	(void)priv;
	if (r == NULL) {
		st.null_replies++;
		return;
	}
	if (r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0)
		st.replies++;
	if (st.free_in_reply) {
		st.free_in_reply = false;
		redisAsyncFree(ac); /* deferred by hiredis until we return */
		st.ac = NULL;
	}
}

static redisAsyncContext *open_ctx(struct ev_loop *loop, int port)
{
	redisAsyncContext *ac = redisAsyncConnect("127.0.0.1", port);

	if (ac == NULL || ac->err != 0 || redisev_attach(loop, ac) < 0)
		return NULL;
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	return ac;
}

static void spin(struct ev_loop *loop, bool (*done)(void), int max_ms)
{
	long long end = ev_monotonic_ms() + max_ms;

	while (!done() && ev_monotonic_ms() < end)
		ev_loop_run_once(loop, 10);
}

static bool two_replies(void)
{
	return st.replies >= 2;
}

static bool one_reply(void)
{
	return st.replies >= 1;
}

static bool disconnected(void)
{
	return st.disconnected >= 1;
}

static bool connect_failed(void)
{
	return st.connect_failed >= 1;
}

static void test_replies_and_free_in_callback(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct peer p;
	int port = peer_start(&p, loop);

	CHECK(port > 0);
	memset(&st, 0, sizeof(st));
	st.ac = open_ctx(loop, port);
	CHECK(st.ac != NULL);
	CHECK_EQ_INT(redisev_attach(loop, st.ac), -EINVAL); /* once only */
	redisAsyncCommand(st.ac, on_reply, NULL, "PING");
	redisAsyncCommand(st.ac, on_reply, NULL, "PING");
	spin(loop, two_replies, 2000);
	CHECK_EQ_INT(st.connected, 1);
	CHECK_EQ_INT(st.replies, 2);
	/* Freed from inside its reply callback: hiredis finishes the free
	 * when the callback returns, our glue after the io callback. */
	st.free_in_reply = true;
	redisAsyncCommand(st.ac, on_reply, NULL, "PING");
	spin(loop, two_replies, 2000);
	st.replies = 0;
	spin(loop, one_reply, 50); /* a few turns more: nothing may fire */
	CHECK(st.ac == NULL);
	CHECK_EQ_INT(st.disconnected, 1); /* a clean disconnect reports too */
	CHECK_EQ_INT(p.commands, 3);
	peer_stop(&p);
	ev_loop_free(loop);
}

static void test_peer_hangs_up(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct peer p;
	int port = peer_start(&p, loop);

	memset(&st, 0, sizeof(st));
	st.ac = open_ctx(loop, port);
	redisAsyncCommand(st.ac, on_reply, NULL, "PING");
	spin(loop, one_reply, 2000);
	CHECK_EQ_INT(st.replies, 1);
	p.hang_up = true;
	redisAsyncCommand(st.ac, on_reply, NULL, "PING");
	spin(loop, disconnected, 2000);
	CHECK_EQ_INT(st.disconnected, 1);
	CHECK_EQ_INT(st.null_replies, 1); /* the command that got no answer */
	peer_stop(&p);
	ev_loop_free(loop);
}

static void test_refused(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct peer p;
	int port = peer_start(&p, loop);
	redisAsyncContext *ac;

	/* Nobody listens there once the peer is gone. */
	peer_stop(&p);
	ev_loop_run_once(loop, 0);
	memset(&st, 0, sizeof(st));
	ac = open_ctx(loop, port);
	if (ac != NULL) {
		redisAsyncCommand(ac, on_reply, NULL, "PING");
		spin(loop, connect_failed, 2000);
		CHECK_EQ_INT(st.connect_failed, 1);
		CHECK_EQ_INT(st.null_replies, 1);
		CHECK_EQ_INT(st.disconnected, 0);
	}
	ev_loop_free(loop);
}

static void on_timer_free(struct ev_timer *t, void *arg)
{
	(void)t;
	redisAsyncFree(arg);
	st.ac = NULL;
}

static bool freed(void)
{
	return st.ac == NULL;
}

static void test_free_from_timer(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct ev_timer t;
	struct peer p;
	int port = peer_start(&p, loop);

	memset(&st, 0, sizeof(st));
	st.ac = open_ctx(loop, port);
	redisAsyncCommand(st.ac, on_reply, NULL, "PING");
	spin(loop, one_reply, 2000);
	/* A command the peer will not answer, then a free from outside any
	 * callback. */
	p.mute = true;
	redisAsyncCommand(st.ac, on_reply, NULL, "PING");
	ev_timer_init(&t);
	ev_timer_start(loop, &t, 0, on_timer_free, st.ac);
	spin(loop, freed, 2000);
	CHECK(st.ac == NULL);
	CHECK_EQ_INT(st.null_replies, 1);
	spin(loop, disconnected, 50);
	peer_stop(&p);
	ev_loop_free(loop);
}

int main(void)
{
	test_replies_and_free_in_callback();
	test_peer_hangs_up();
	test_refused();
	test_free_from_timer();
	return tap_done("redisev");
}
