/*
 * common/workq: references, jobs in flight, the closing flag, a wait for one
 * job and the close that waits for all; and errtext_vappend (strbuf), the
 * error text upnp and natpmp build on the worker.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ev.h"
#include "strbuf.h"
#include "tap.h"
#include "workq.h"

struct owner {
	struct workq q;
	int destroyed;
};

struct job {
	struct workq_job w;
	struct owner *o;
	int sleep_ms;
	bool closing_seen, delivered, cancelled;
	int *done_count;
};

static int destroyed;

static void destroy(void *arg)
{
	(void)arg;
	destroyed++;
}

static void work(void *arg)
{
	struct job *j = arg;

	usleep((useconds_t)j->sleep_ms * 1000);
	j->closing_seen = workq_closing(&j->o->q);
	workq_work_ended(&j->w);
}

static void done(void *arg, bool cancelled)
{
	struct job *j = arg;

	j->delivered = workq_done(&j->w, cancelled);
	j->cancelled = cancelled;
	(*j->done_count)++;
	workq_unref(&j->o->q);
}

static void test_jobs(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct owner o = {0};
	struct job a = {0}, b = {0};
	int count = 0;

	workq_init(&o.q, loop, destroy, &o);
	CHECK_EQ_INT(o.q.refs, 1);
	a.o = b.o = &o;
	a.done_count = b.done_count = &count;
	b.sleep_ms = 50;
	workq_job_start(&o.q, &a.w);
	workq_job_start(&o.q, &b.w);
	CHECK_EQ_INT(o.q.refs, 3);
	CHECK_EQ_INT(o.q.inflight, 2);
	CHECK_EQ_INT(workq_submit(&a.w, work, done, &a), 0);
	CHECK_EQ_INT(workq_submit(&b.w, work, done, &b), 0);
	/* a ends first (submission order); b is still asleep at first. */
	CHECK(workq_wait(&a.w, 2000));
	CHECK(workq_wait(&b.w, 2000));
	CHECK_EQ_INT(o.q.inflight, 0);
	for (int i = 0; i < 100 && count < 2; i++)
		ev_loop_run_once(loop, 20);
	CHECK_EQ_INT(count, 2);
	CHECK(a.delivered && b.delivered && !a.cancelled && !a.closing_seen);
	CHECK_EQ_INT(o.q.refs, 1);
	CHECK_EQ_INT(destroyed, 0);

	/* Closing with a job in flight: the close waits for its work, the
	 * work sees closing, the done callback does not deliver, and the last
	 * reference (the job's) destroys the owner. */
	b.sleep_ms = 100;
	workq_job_start(&o.q, &b.w);
	CHECK_EQ_INT(workq_submit(&b.w, work, done, &b), 0);
	usleep(20 * 1000);
	workq_close(&o.q, 2000);
	CHECK(b.w.ended && b.closing_seen);
	CHECK_EQ_INT(destroyed, 0);
	for (int i = 0; i < 100 && count < 3; i++)
		ev_loop_run_once(loop, 20);
	CHECK_EQ_INT(count, 3);
	CHECK(!b.delivered && !b.cancelled);
	CHECK_EQ_INT(destroyed, 1);
	workq_fini(&o.q);
	ev_loop_free(loop);
}

static void test_wait_times_out(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct owner o = {0};
	struct job j = {0};
	int count = 0;

	destroyed = 0;
	workq_init(&o.q, loop, destroy, &o);
	j.o = &o;
	j.done_count = &count;
	j.sleep_ms = 300;
	workq_job_start(&o.q, &j.w);
	CHECK_EQ_INT(workq_submit(&j.w, work, done, &j), 0);
	CHECK(!workq_wait(&j.w, 10));
	CHECK(workq_wait(&j.w, 2000));
	workq_close(&o.q, 2000);
	/* ev_loop_free runs the pending done callback: the last reference. */
	ev_loop_free(loop);
	CHECK_EQ_INT(count, 1);
	CHECK_EQ_INT(destroyed, 1);
	workq_fini(&o.q);
}

static void append(char *buf, size_t size, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	errtext_vappend(buf, size, fmt, ap);
	va_end(ap);
}

static void test_errtext(void)
{
	char e[17] = "";
	char tiny[4] = "";

	append(e, sizeof(e), "no %s", "igd");
	CHECK_EQ_STR(e, "no igd");
	append(e, sizeof(e), "code %d", 501);
	CHECK_EQ_STR(e, "no igd; code 501");
	/* Full: later ones dropped, still terminated. */
	append(e, sizeof(e), "more");
	CHECK_EQ_STR(e, "no igd; code 501");
	append(tiny, sizeof(tiny), "abcdef");
	CHECK_EQ_STR(tiny, "abc");
	append(tiny, sizeof(tiny), "x");
	CHECK_EQ_STR(tiny, "abc");
}

int main(void)
{
	ev_block_signals();
	test_jobs();
	test_wait_times_out();
	test_errtext();
	return tap_done("workq");
}
