/*
 * common/ev: timer order, cancellation and re-arming from callbacks, io
 * removal inside a batch, before-sleep hooks, the worker thread and the
 * signalfd. Heap-allocated timers and ios let ASan catch any use after a
 * callback freed them. Every loop run has a guard timer, so a broken loop
 * fails a check instead of hanging.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "ev.h"
#include "tap.h"

static pthread_t main_thread;

/* ---- a guard: stop the loop and fail if it runs too long ---- */

static bool guard_fired;

static void on_guard(struct ev_timer *t, void *arg)
{
	(void)t;
	guard_fired = true;
	ev_loop_stop(arg);
}

static void run_guarded(struct ev_loop *loop, long long ms)
{
	struct ev_timer g;

	ev_timer_init(&g);
	guard_fired = false;
	ev_timer_start(loop, &g, ms, on_guard, loop);
	CHECK_EQ_INT(ev_loop_run(loop), 0);
	ev_timer_stop(loop, &g);
	CHECK(!guard_fired);
}

/* ---- timers ---- */

struct rec {
	struct ev_loop *loop;
	int log[32];
	int n;
	long long at[32];
};

struct tmr {
	struct ev_timer t;
	struct rec *rec;
	int id;
	struct tmr *victim; /* stopped and freed by this one's callback */
	bool stop_loop;
	bool free_self;
};

static void on_tmr(struct ev_timer *t, void *arg)
{
	struct tmr *x = arg;
	struct rec *r = x->rec;

	CHECK(t == &x->t);
	CHECK(!ev_timer_armed(t));
	if (r->n < 32) {
		r->at[r->n] = ev_now(r->loop);
		r->log[r->n++] = x->id;
	}
	if (x->victim != NULL) {
		ev_timer_stop(r->loop, &x->victim->t);
		free(x->victim);
		x->victim = NULL;
	}
	if (x->stop_loop)
		ev_loop_stop(r->loop);
	if (x->free_self) {
		/* Stopping an idle timer is a no-op; then it may go. */
		ev_timer_stop(r->loop, t);
		free(x);
	}
}

static struct tmr *tmr_new(struct rec *r, int id)
{
	struct tmr *x = calloc(1, sizeof(*x));

	ev_timer_init(&x->t);
	x->rec = r;
	x->id = id;
	return x;
}

static void test_timer_order(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct rec r = {.loop = loop};
	struct tmr *t30, *t10, *t20, *e1, *e2, *e3, *last;
	long long start = ev_now(loop);
	static const int want[] = {10, 1, 2, 3, 20, 30, 99};

	CHECK(loop != NULL);
	if (loop == NULL)
		return;
	/* Armed out of order; e1..e3 share one deadline (now_ms does not
	 * move between the calls), so they fire in arming order. */
	t30 = tmr_new(&r, 30);
	t10 = tmr_new(&r, 10);
	e1 = tmr_new(&r, 1);
	t20 = tmr_new(&r, 20);
	e2 = tmr_new(&r, 2);
	e3 = tmr_new(&r, 3);
	last = tmr_new(&r, 99);
	last->stop_loop = true;
	ev_timer_start(loop, &last->t, 60, on_tmr, last);
	ev_timer_start(loop, &t30->t, 30, on_tmr, t30);
	ev_timer_start(loop, &t10->t, 10, on_tmr, t10);
	ev_timer_start(loop, &e1->t, 15, on_tmr, e1);
	ev_timer_start(loop, &t20->t, 20, on_tmr, t20);
	ev_timer_start(loop, &e2->t, 15, on_tmr, e2);
	ev_timer_start(loop, &e3->t, 15, on_tmr, e3);
	CHECK(ev_timer_armed(&e3->t));
	run_guarded(loop, 5000);
	CHECK_EQ_INT(r.n, 7);
	CHECK(r.n == 7 && memcmp(r.log, want, sizeof(want)) == 0);
	/* No timer fires early. */
	for (int i = 0; i < r.n && i < 7; i++) {
		int delay = want[i] == 99 ? 60 : want[i] < 10 ? 15 : want[i];

		CHECK(r.at[i] - start >= delay);
	}
	CHECK(!ev_timer_armed(&last->t));

	/* Re-arming moves a timer: t10 armed for 10 ms, then re-armed for
	 * 40 ms, fires after t20 and once only. */
	r.n = 0;
	ev_timer_start(loop, &t10->t, 10, on_tmr, t10);
	ev_timer_start(loop, &t20->t, 20, on_tmr, t20);
	ev_timer_start(loop, &t10->t, 40, on_tmr, t10);
	ev_timer_start(loop, &last->t, 60, on_tmr, last);
	run_guarded(loop, 5000);
	CHECK_EQ_INT(r.n, 3);
	CHECK(r.log[0] == 20 && r.log[1] == 10 && r.log[2] == 99);

	free(t30);
	free(t10);
	free(t20);
	free(e1);
	free(e2);
	free(e3);
	free(last);
	ev_loop_free(loop);
}

static void test_timer_cancel_from_callback(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct rec r = {.loop = loop};
	struct tmr *a = tmr_new(&r, 1), *b = tmr_new(&r, 2), *c = tmr_new(&r, 3),
		   *d = tmr_new(&r, 4), *last = tmr_new(&r, 99);

	/* a fires first (same deadline, armed first), stops and frees b
	 * (due in the same pass) and frees itself; c still fires; d, armed
	 * later and stopped from c, never does. */
	a->victim = b;
	a->free_self = true;
	c->victim = d;
	last->stop_loop = true;
	ev_timer_start(loop, &a->t, 5, on_tmr, a);
	ev_timer_start(loop, &b->t, 5, on_tmr, b);
	ev_timer_start(loop, &c->t, 5, on_tmr, c);
	ev_timer_start(loop, &d->t, 20, on_tmr, d);
	ev_timer_start(loop, &last->t, 40, on_tmr, last);
	run_guarded(loop, 5000);
	CHECK_EQ_INT(r.n, 3);
	CHECK(r.log[0] == 1 && r.log[1] == 3 && r.log[2] == 99);
	free(c);
	free(last);
	ev_loop_free(loop);
}

/* ---- a 0 ms self-re-arming timer must not starve fds ---- */

struct spin {
	struct ev_loop *loop;
	struct ev_timer t;
	unsigned long fired;
	bool io_ran;
};

static void on_spin(struct ev_timer *t, void *arg)
{
	struct spin *s = arg;

	s->fired++;
	if (s->fired > 100000) {
		/* The fd has been waiting for 100k passes: starved. */
		ev_loop_stop(s->loop);
		return;
	}
	ev_timer_start(s->loop, t, 0, on_spin, s);
}

static void on_spin_io(struct ev_io *io, uint32_t events, void *arg)
{
	struct spin *s = arg;

	(void)events;
	s->io_ran = true;
	ev_timer_stop(s->loop, &s->t);
	ev_io_del(io, false);
	ev_loop_stop(s->loop);
}

static void test_rearm_zero(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct spin s = {.loop = loop};
	int p[2];

	CHECK_EQ_INT(pipe(p), 0);
	CHECK_EQ_INT(write(p[1], "x", 1), 1);
	ev_timer_init(&s.t);
	ev_timer_start(loop, &s.t, 0, on_spin, &s);
	CHECK(ev_io_add(loop, p[0], EPOLLIN, on_spin_io, &s) != NULL);
	run_guarded(loop, 5000);
	CHECK(s.io_ran);
	CHECK(s.fired >= 1 && s.fired <= 3);
	close(p[0]);
	close(p[1]);
	ev_loop_free(loop);
}

/* ---- io callbacks that delete ios and timers ---- */

struct pair {
	struct ev_loop *loop;
	struct ev_io *io[2];
	int fd[2][2];
	int calls[2];
	struct tmr *timer; /* freed from the first io callback */
};

static void on_pair(struct ev_io *io, uint32_t events, void *arg)
{
	struct pair *p = arg;
	int me = io == p->io[0] ? 0 : 1;
	int other = 1 - me;

	CHECK(events & EPOLLIN);
	p->calls[me]++;
	/* Delete the other one, which is in this same batch, closing its
	 * fd; it must not be called. */
	if (p->io[other] != NULL) {
		ev_io_del(p->io[other], true);
		p->io[other] = NULL;
	}
	if (p->timer != NULL) {
		ev_timer_stop(p->loop, &p->timer->t);
		free(p->timer);
		p->timer = NULL;
	}
	ev_loop_stop(p->loop);
}

static void test_io_del_in_batch(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct rec r = {.loop = loop};
	struct pair p = {.loop = loop};

	for (int i = 0; i < 2; i++) {
		CHECK_EQ_INT(pipe(p.fd[i]), 0);
		/* Both readable before the loop waits: one batch. */
		CHECK_EQ_INT(write(p.fd[i][1], "x", 1), 1);
		p.io[i] = ev_io_add(loop, p.fd[i][0], EPOLLIN, on_pair, &p);
		CHECK(p.io[i] != NULL);
	}
	CHECK_EQ_INT(ev_io_fd(p.io[0]), p.fd[0][0]);
	CHECK_EQ_INT(ev_io_events(p.io[1]), EPOLLIN);
	p.timer = tmr_new(&r, 7);
	ev_timer_start(loop, &p.timer->t, 50, on_tmr, p.timer);
	run_guarded(loop, 5000);
	CHECK_EQ_INT(p.calls[0] + p.calls[1], 1);
	CHECK(p.timer == NULL);
	/* Run on: the survivor stays readable (level-triggered) and is
	 * called again; the deleted one never; the freed timer never. */
	run_guarded(loop, 5000);
	CHECK_EQ_INT(p.calls[0] + p.calls[1], 2);
	CHECK(p.calls[0] == 2 || p.calls[1] == 2);
	CHECK_EQ_INT(r.n, 0);
	for (int i = 0; i < 2; i++) {
		if (p.io[i] != NULL) {
			ev_io_del(p.io[i], true);
			p.io[i] = NULL;
		}
		close(p.fd[i][1]);
	}
	ev_loop_free(loop);
}

struct selfdel {
	struct ev_loop *loop;
	int calls;
	int fd;
};

static void on_selfdel(struct ev_io *io, uint32_t events, void *arg)
{
	struct selfdel *s = arg;

	(void)events;
	s->calls++;
	ev_io_del(io, true);
	/* A second delete of the same io is harmless. */
	ev_io_del(io, true);
	ev_io_del(NULL, true);
}

static void on_stop_soon(struct ev_timer *t, void *arg)
{
	(void)t;
	ev_loop_stop(arg);
}

static void test_io_self_del(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct selfdel s = {.loop = loop};
	struct ev_timer stop;
	int p[2];

	CHECK_EQ_INT(pipe(p), 0);
	CHECK_EQ_INT(write(p[1], "xyz", 3), 3);
	CHECK(ev_io_add(loop, p[0], EPOLLIN, on_selfdel, &s) != NULL);
	ev_timer_init(&stop);
	ev_timer_start(loop, &stop, 30, on_stop_soon, loop);
	run_guarded(loop, 5000);
	/* Still readable, but deleted: called once. */
	CHECK_EQ_INT(s.calls, 1);
	/* And its fd was closed (the pipe's write end sees no reader). */
	{
		struct sigaction sa = {.sa_handler = SIG_IGN}, old;

		sigaction(SIGPIPE, &sa, &old);
		CHECK(write(p[1], "x", 1) < 0 && errno == EPIPE);
		sigaction(SIGPIPE, &old, NULL);
	}
	close(p[1]);
	/* Adding an fd twice is refused by epoll. */
	CHECK_EQ_INT(pipe(p), 0);
	{
		struct ev_io *io = ev_io_add(loop, p[0], EPOLLIN, on_selfdel, &s);

		CHECK(io != NULL);
		errno = 0;
		CHECK(ev_io_add(loop, p[0], EPOLLIN, on_selfdel, &s) == NULL);
		CHECK_EQ_INT(errno, EEXIST);
		ev_io_del(io, false);
	}
	close(p[1]);
	ev_loop_free(loop);
	/* ev_io_del(..., false) leaves the fd open. */
	CHECK_EQ_INT(close(p[0]), 0);
}

/* ---- before-sleep hooks ---- */

struct hook {
	int runs;
};

static void on_hook(void *arg)
{
	((struct hook *)arg)->runs++;
}

static void test_hooks(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct hook h1 = {0}, h2 = {0}, h[EV_MAX_HOOKS];
	struct ev_timer stop;
	int nhooks = 0;

	CHECK_EQ_INT(ev_before_sleep_add(loop, on_hook, &h1), 0);
	CHECK_EQ_INT(ev_before_sleep_add(loop, on_hook, &h2), 0);
	ev_timer_init(&stop);
	ev_timer_start(loop, &stop, 20, on_stop_soon, loop);
	run_guarded(loop, 5000);
	/* At least one sleep before the timer was due. */
	CHECK(h1.runs >= 1);
	CHECK_EQ_INT(h1.runs, h2.runs);
	/* A removed hook no longer runs; the other does. */
	ev_before_sleep_del(loop, on_hook, &h1);
	h1.runs = h2.runs = 0;
	ev_timer_start(loop, &stop, 20, on_stop_soon, loop);
	run_guarded(loop, 5000);
	CHECK_EQ_INT(h1.runs, 0);
	CHECK(h2.runs >= 1);
	/* At most EV_MAX_HOOKS. */
	memset(h, 0, sizeof(h));
	for (int i = 0; i < EV_MAX_HOOKS + 2; i++) {
		if (ev_before_sleep_add(loop, on_hook, &h[i % EV_MAX_HOOKS]) == 0)
			nhooks++;
		else
			CHECK_EQ_INT(ev_before_sleep_add(loop, on_hook, &h1), -ENOSPC);
	}
	CHECK_EQ_INT(nhooks, EV_MAX_HOOKS - 1);
	ev_loop_free(loop);
}

/* ---- the worker thread ---- */

#define NJOBS (20)

struct job {
	struct ev_loop *loop;
	int id;
	int *order; /* shared: next slot index at order[NJOBS] */
	bool worked, done_called, cancelled;
	bool work_off_loop, done_on_loop;
	int done_count;
	int *dones;
	sem_t *started;
	int sleep_ms;
};

static void job_work(void *arg)
{
	struct job *j = arg;

	j->work_off_loop = !pthread_equal(pthread_self(), main_thread);
	if (j->started != NULL)
		sem_post(j->started);
	if (j->sleep_ms > 0)
		usleep((useconds_t)j->sleep_ms * 1000);
	j->order[j->order[NJOBS]++] = j->id;
	j->worked = true;
}

static void job_done(void *arg, bool cancelled)
{
	struct job *j = arg;

	j->done_on_loop = pthread_equal(pthread_self(), main_thread);
	j->done_called = true;
	j->cancelled = cancelled;
	j->done_count++;
	if (j->dones != NULL && ++*j->dones == NJOBS && j->loop != NULL)
		ev_loop_stop(j->loop);
}

static void test_worker(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct job jobs[NJOBS];
	int order[NJOBS + 1] = {0};
	int dones = 0;
	bool ok = true;

	memset(jobs, 0, sizeof(jobs));
	for (int i = 0; i < NJOBS; i++) {
		jobs[i].loop = loop;
		jobs[i].id = i;
		jobs[i].order = order;
		jobs[i].dones = &dones;
		/* Early jobs are slow, so later ones queue up behind them. */
		jobs[i].sleep_ms = i < 3 ? 20 : 0;
		CHECK_EQ_INT(ev_work_submit(loop, job_work, job_done, &jobs[i]), 0);
	}
	run_guarded(loop, 10000);
	CHECK_EQ_INT(dones, NJOBS);
	CHECK_EQ_INT(order[NJOBS], NJOBS);
	for (int i = 0; i < NJOBS; i++) {
		if (order[i] != i || !jobs[i].worked || !jobs[i].work_off_loop ||
		    !jobs[i].done_on_loop || jobs[i].cancelled || jobs[i].done_count != 1)
			ok = false;
	}
	CHECK(ok);
	/* A NULL done is allowed. */
	memset(&jobs[0], 0, sizeof(jobs[0]));
	jobs[0].order = order;
	order[NJOBS] = 0;
	CHECK_EQ_INT(ev_work_submit(loop, job_work, NULL, &jobs[0]), 0);
	ev_loop_free(loop);
}

static void test_worker_cancel(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct job jobs[3];
	int order[NJOBS + 1] = {0};
	sem_t started;

	sem_init(&started, 0, 0);
	memset(jobs, 0, sizeof(jobs));
	for (int i = 0; i < 3; i++) {
		jobs[i].id = i;
		jobs[i].order = order;
	}
	/* Job 0 is running (and takes a while) when the loop is freed; jobs
	 * 1 and 2 are still queued. */
	jobs[0].started = &started;
	jobs[0].sleep_ms = 200;
	for (int i = 0; i < 3; i++)
		CHECK_EQ_INT(ev_work_submit(loop, job_work, job_done, &jobs[i]), 0);
	sem_wait(&started);
	ev_loop_free(loop);
	/* The running job finished and reported normally. */
	CHECK(jobs[0].worked);
	CHECK(jobs[0].done_called && !jobs[0].cancelled);
	/* The queued ones never ran, and were told so, on this thread. */
	for (int i = 1; i < 3; i++) {
		CHECK(!jobs[i].worked);
		CHECK(jobs[i].done_called && jobs[i].cancelled);
		CHECK(jobs[i].done_on_loop);
		CHECK_EQ_INT(jobs[i].done_count, 1);
	}
	CHECK_EQ_INT(jobs[0].done_count, 1);
	sem_destroy(&started);
	/* A loop that never had a worker frees cleanly. */
	ev_loop_free(ev_loop_new());
	ev_loop_free(NULL);
}

/*
 * A job stuck in a blocking call (a getaddrinfo that hangs) when the loop is
 * freed: ev_loop_free gives up on it after 2 s, and when the job ends later
 * the thread touches nothing freed (ASan would say so) and nobody calls its
 * done: it was neither delivered nor cancelled.
 */
static void test_worker_abandoned(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct job job;
	int order[NJOBS + 1] = {0};
	sem_t started;

	sem_init(&started, 0, 0);
	memset(&job, 0, sizeof(job));
	job.order = order;
	job.started = &started;
	job.sleep_ms = 5000; /* well past the 2 s ev_loop_free waits */
	CHECK_EQ_INT(ev_work_submit(loop, job_work, job_done, &job), 0);
	sem_wait(&started);
	ev_loop_free(loop);
	CHECK(!job.worked && !job.done_called); /* it did not wait for the job */
	/* Let the job end while this process still runs. */
	for (int i = 0; i < 1000 && !job.worked; i++)
		usleep(10000);
	usleep(50000);
	CHECK(job.worked);
	CHECK(!job.done_called);
	sem_destroy(&started);
}

/* ---- signals through the signalfd ---- */

struct sigs {
	struct ev_loop *loop;
	int hup, term, other;
};

static void on_sig(int signo, void *arg)
{
	struct sigs *s = arg;

	CHECK(pthread_equal(pthread_self(), main_thread));
	if (signo == SIGHUP)
		s->hup++;
	else if (signo == SIGTERM)
		s->term++;
	else
		s->other++;
	ev_loop_stop(s->loop);
}

static void test_signals(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct sigs s = {.loop = loop};
	struct ev_timer stop;

	ev_signal_set(loop, on_sig, &s);
	/* A process-directed signal. */
	CHECK_EQ_INT(kill(getpid(), SIGHUP), 0);
	run_guarded(loop, 5000);
	CHECK_EQ_INT(s.hup, 1);
	CHECK_EQ_INT(s.term, 0);
	/* A thread-directed one. */
	CHECK_EQ_INT(raise(SIGTERM), 0);
	run_guarded(loop, 5000);
	CHECK_EQ_INT(s.hup, 1);
	CHECK_EQ_INT(s.term, 1);
	/* Two different signals pending at once: both read in one go. */
	CHECK_EQ_INT(kill(getpid(), SIGHUP), 0);
	CHECK_EQ_INT(kill(getpid(), SIGTERM), 0);
	run_guarded(loop, 5000);
	CHECK_EQ_INT(s.hup, 2);
	CHECK_EQ_INT(s.term, 2);
	CHECK_EQ_INT(s.other, 0);

	/* Without a callback SIGHUP is consumed and the loop goes on (a
	 * timer ends this run), while SIGTERM stops the loop by itself. */
	ev_signal_set(loop, NULL, NULL);
	CHECK_EQ_INT(kill(getpid(), SIGHUP), 0);
	ev_timer_init(&stop);
	ev_timer_start(loop, &stop, 50, on_stop_soon, loop);
	run_guarded(loop, 5000);
	CHECK(!ev_timer_armed(&stop));
	CHECK_EQ_INT(kill(getpid(), SIGTERM), 0);
	ev_timer_start(loop, &stop, 3000, on_stop_soon, loop);
	run_guarded(loop, 5000);
	/* Stopped by the signal, well before the 3 s timer. */
	CHECK(ev_timer_armed(&stop));
	ev_timer_stop(loop, &stop);
	CHECK_EQ_INT(s.hup, 2);
	ev_loop_free(loop);
}

int main(void)
{
	/* First, before any thread: the worker inherits the mask. */
	ev_block_signals();
	main_thread = pthread_self();

	test_timer_order();
	test_timer_cancel_from_callback();
	test_rearm_zero();
	test_io_del_in_batch();
	test_io_self_del();
	test_hooks();
	test_worker();
	test_worker_cancel();
	test_worker_abandoned();
	test_signals();
	return tap_done("ev");
}
