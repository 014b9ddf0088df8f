/*
 * common/workq: the bookkeeping of an object whose blocking calls run as
 * jobs on the loop's worker thread (ev_work_submit), shared by upnp and
 * natpmp.
 *
 * The owner embeds a struct workq and each job a struct workq_job. The
 * owner holds one reference and every job one more (loop thread only, no
 * lock); the last reference calls destroy(owner). mu guards inflight,
 * closing and each job's ended, and the owner may put its own
 * cross-thread state under it too; cond is signalled whenever a job's work
 * ends. workq_close() marks the object closing (owners skip queued work
 * and stop calling back), waits a bounded time for work in flight and
 * drops the owner's reference; the last done callback - which
 * ev_loop_free() runs too - then frees what is left.
 *
 * A job's life: workq_job_start (loop) -> workq_submit (loop) -> the work
 * function, which ends with workq_work_ended (worker) -> the done
 * callback, which starts with workq_done (loop: whether to deliver), frees
 * the job and ends with workq_unref.
 */
#ifndef RALLY_WORKQ_H
#define RALLY_WORKQ_H

#include <pthread.h>
#include <stdbool.h>

#include "ev.h"

typedef void workq_destroy_fn(void *owner);

struct workq {
	struct ev_loop *loop;
	int refs; /* loop thread only */
	workq_destroy_fn *destroy;
	void *owner;

	pthread_mutex_t mu;
	pthread_cond_t cond; /* signalled when a job's work ends */
	int inflight;        /* under mu: started, work not ended */
	bool closing;        /* under mu */
};

struct workq_job {
	struct workq *q;
	bool ended; /* under q->mu: the work function has returned */
	bool sync;  /* a caller waits for it (workq_wait): no callback */
};

/* One reference, the owner's; cond on CLOCK_MONOTONIC. */
void workq_init(struct workq *q, struct ev_loop *loop, workq_destroy_fn *destroy, void *owner);
/* The mutex and cond; for the owner's destroy function. */
void workq_fini(struct workq *q);
void workq_unref(struct workq *q);

/* Loop: counts j in flight and takes a reference for it. */
void workq_job_start(struct workq *q, struct workq_job *j);
/* Loop: ev_work_submit(work, done, arg); on failure undoes
 * workq_job_start (the reference dropped: the caller frees arg and must
 * not touch q after, as the owner may be gone if it held no other). */
int workq_submit(struct workq_job *j, ev_work_fn *work, ev_done_fn *done, void *arg);
/* Worker: the last thing a work function does. */
void workq_work_ended(struct workq_job *j);
/* Loop, first in the done callback: whether to deliver (not cancelled by
 * ev_loop_free, the owner not closing). */
bool workq_done(struct workq_job *j, bool cancelled);
/* Under mu (or not): the owner is closing. */
bool workq_closing(struct workq *q);

/* Loop: waits up to timeout_ms for j's work to end; true if it did (its
 * results may then be read: the worker is done with it). j stays the
 * caller's until its done callback, which runs on this thread later. */
bool workq_wait(struct workq_job *j, long timeout_ms);
/* Loop: marks the owner closing, waits up to timeout_ms for the jobs in
 * flight, drops the owner's reference. */
void workq_close(struct workq *q, long timeout_ms);

#endif
