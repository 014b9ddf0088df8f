#include "workq.h"

#include <errno.h>
#include <time.h>

void workq_init(struct workq *q, struct ev_loop *loop, workq_destroy_fn *destroy, void *owner)
{
	pthread_condattr_t ca;

	q->loop = loop;
	q->refs = 1;
	q->destroy = destroy;
	q->owner = owner;
	q->inflight = 0;
	q->closing = false;
	pthread_mutex_init(&q->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&q->cond, &ca);
	pthread_condattr_destroy(&ca);
}

void workq_fini(struct workq *q)
{
	pthread_mutex_destroy(&q->mu);
	pthread_cond_destroy(&q->cond);
}

void workq_unref(struct workq *q)
{
	if (--q->refs == 0)
		q->destroy(q->owner);
}

void workq_job_start(struct workq *q, struct workq_job *j)
{
	j->q = q;
	j->ended = false;
	pthread_mutex_lock(&q->mu);
	q->inflight++;
	pthread_mutex_unlock(&q->mu);
	q->refs++;
}

int workq_submit(struct workq_job *j, ev_work_fn *work, ev_done_fn *done, void *arg)
{
	struct workq *q = j->q;
	int r = ev_work_submit(q->loop, work, done, arg);

	if (r < 0) {
		pthread_mutex_lock(&q->mu);
		q->inflight--;
		pthread_mutex_unlock(&q->mu);
		workq_unref(q);
	}
	return r;
}

void workq_work_ended(struct workq_job *j)
{
	struct workq *q = j->q;

	pthread_mutex_lock(&q->mu);
	j->ended = true;
	q->inflight--;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->mu);
}

bool workq_done(struct workq_job *j, bool cancelled)
{
	struct workq *q = j->q;
	bool closing;

	pthread_mutex_lock(&q->mu);
	if (cancelled) /* the loop was freed before the job ran */
		q->inflight--;
	closing = q->closing;
	pthread_mutex_unlock(&q->mu);
	return !cancelled && !closing;
}

bool workq_closing(struct workq *q)
{
	bool closing;

	pthread_mutex_lock(&q->mu);
	closing = q->closing;
	pthread_mutex_unlock(&q->mu);
	return closing;
}

static void deadline_in(struct timespec *ts, long ms)
{
	if (ms < 0)
		ms = 0;
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

bool workq_wait(struct workq_job *j, long timeout_ms)
{
	struct workq *q = j->q;
	struct timespec deadline;
	bool ended;

	deadline_in(&deadline, timeout_ms);
	pthread_mutex_lock(&q->mu);
	while (!j->ended) {
		if (pthread_cond_timedwait(&q->cond, &q->mu, &deadline) == ETIMEDOUT)
			break;
	}
	ended = j->ended;
	pthread_mutex_unlock(&q->mu);
	return ended;
}

void workq_close(struct workq *q, long timeout_ms)
{
	struct timespec deadline;

	deadline_in(&deadline, timeout_ms);
	pthread_mutex_lock(&q->mu);
	q->closing = true;
	while (q->inflight > 0) {
		if (pthread_cond_timedwait(&q->cond, &q->mu, &deadline) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&q->mu);
	workq_unref(q);
}
