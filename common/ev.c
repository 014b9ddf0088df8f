#include "ev.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define EV_BATCH (256)

struct ev_io {
	struct ev_loop *loop;
	int fd;
	uint32_t want;
	ev_io_cb *cb;
	void *arg;
	bool dead;
	struct ev_io *next_dead;
};

struct work_item {
	ev_work_fn *work;
	ev_done_fn *done;
	void *arg;
	struct work_item *next;
};

struct work_queue {
	struct work_item *head, *tail;
};

struct ev_loop {
	int epfd;
	bool stop;
	long long now_ms;
	uint64_t timer_seq;

	struct ev_timer **heap;
	size_t nheap, heap_cap;

	struct ev_io *graveyard;

	int sigfd;
	struct ev_io *sig_io;
	ev_signal_cb *sig_cb;
	void *sig_arg;

	struct {
		ev_hook_cb *cb;
		void *arg;
	} hooks[EV_MAX_HOOKS];
	size_t nhooks;

	/* Worker: jobs go in under mu; results come back under mu + efd. */
	pthread_t worker;
	bool worker_started;
	bool worker_quit;
	bool worker_busy;
	/* worker_stop left the thread in a blocking call: the loop is kept
	 * (orphans) so the thread never touches freed memory. */
	bool worker_orphaned;
	struct ev_loop *next_orphan;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct work_queue todo, finished;
	int efd;
	struct ev_io *efd_io;
};

long long ev_monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

unsigned long long ev_monotonic_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000ULL +
	       (unsigned long long)ts.tv_nsec / 1000ULL;
}

void ev_block_signals(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGCHLD);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* ---- timers: a binary min-heap ordered by (deadline, seq) ---- */

static bool timer_less(const struct ev_timer *a, const struct ev_timer *b)
{
	if (a->deadline_ms != b->deadline_ms)
		return a->deadline_ms < b->deadline_ms;
	return a->seq < b->seq;
}

static void heap_set(struct ev_loop *loop, size_t i, struct ev_timer *t)
{
	loop->heap[i] = t;
	t->heap_idx = i;
}

static void heap_up(struct ev_loop *loop, size_t i)
{
	struct ev_timer *t = loop->heap[i];

	while (i > 0) {
		size_t parent = (i - 1) / 2;

		if (!timer_less(t, loop->heap[parent]))
			break;
		heap_set(loop, i, loop->heap[parent]);
		i = parent;
	}
	heap_set(loop, i, t);
}

static void heap_down(struct ev_loop *loop, size_t i)
{
	struct ev_timer *t = loop->heap[i];

	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		struct ev_timer *best = t;

		if (l < loop->nheap && timer_less(loop->heap[l], best)) {
			m = l;
			best = loop->heap[l];
		}
		if (r < loop->nheap && timer_less(loop->heap[r], best))
			m = r;
		if (m == i)
			break;
		heap_set(loop, i, loop->heap[m]);
		i = m;
	}
	heap_set(loop, i, t);
}

void ev_timer_stop(struct ev_loop *loop, struct ev_timer *t)
{
	size_t i = t->heap_idx;
	struct ev_timer *last;

	if (i == EV_TIMER_IDLE)
		return;
	t->heap_idx = EV_TIMER_IDLE;
	last = loop->heap[--loop->nheap];
	if (i == loop->nheap)
		return;
	heap_set(loop, i, last);
	if (i > 0 && timer_less(last, loop->heap[(i - 1) / 2]))
		heap_up(loop, i);
	else
		heap_down(loop, i);
}

void ev_timer_start(struct ev_loop *loop, struct ev_timer *t, long long delay_ms, ev_timer_cb *cb,
		    void *arg)
{
	ev_timer_stop(loop, t);
	if (loop->nheap == loop->heap_cap) {
		size_t cap = loop->heap_cap ? loop->heap_cap * 2 : 64;
		struct ev_timer **h = realloc(loop->heap, cap * sizeof(struct ev_timer *));

		/* A timer that cannot be armed would silently stall its owner. */
		if (h == NULL)
			log_fatalx("ev: out of memory for timers");
		loop->heap = h;
		loop->heap_cap = cap;
	}
	if (delay_ms < 0)
		delay_ms = 0;
	t->deadline_ms = loop->now_ms + delay_ms;
	t->seq = loop->timer_seq++;
	t->cb = cb;
	t->arg = arg;
	loop->heap[loop->nheap] = t;
	t->heap_idx = loop->nheap++;
	heap_up(loop, t->heap_idx);
}

static void run_timers(struct ev_loop *loop)
{
	/* Timers armed while we run wait for the next iteration, so a callback
	 * re-arming itself with 0 ms cannot starve the fds. */
	uint64_t limit = loop->timer_seq;

	while (loop->nheap > 0) {
		struct ev_timer *t = loop->heap[0];

		if (t->deadline_ms > loop->now_ms || t->seq >= limit)
			break;
		ev_timer_stop(loop, t);
		t->cb(t, t->arg);
	}
}

static int next_timeout(const struct ev_loop *loop)
{
	long long d;

	if (loop->nheap == 0)
		return -1;
	d = loop->heap[0]->deadline_ms - ev_monotonic_ms();
	if (d <= 0)
		return 0;
	if (d > 60000)
		return 60000;
	return (int)d;
}

/* ---- fds ---- */

struct ev_io *ev_io_add(struct ev_loop *loop, int fd, uint32_t events, ev_io_cb *cb, void *arg)
{
	struct ev_io *io = calloc(1, sizeof(*io));
	struct epoll_event ee = {.events = events};

	if (io == NULL)
		return NULL;
	io->loop = loop;
	io->fd = fd;
	io->want = events;
	io->cb = cb;
	io->arg = arg;
	ee.data.ptr = io;
	if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, fd, &ee) < 0) {
		int e = errno;

		free(io);
		errno = e;
		return NULL;
	}
	return io;
}

int ev_io_mod(struct ev_io *io, uint32_t events)
{
	struct epoll_event ee = {.events = events, .data.ptr = io};

	if (io->want == events)
		return 0;
	if (epoll_ctl(io->loop->epfd, EPOLL_CTL_MOD, io->fd, &ee) < 0)
		return -errno;
	io->want = events;
	return 0;
}

uint32_t ev_io_events(const struct ev_io *io)
{
	return io->want;
}

int ev_io_fd(const struct ev_io *io)
{
	return io->fd;
}

void ev_io_del(struct ev_io *io, bool close_fd)
{
	if (io == NULL || io->dead)
		return;
	/* DEL before close: a closed fd may linger in epoll through a dup. */
	epoll_ctl(io->loop->epfd, EPOLL_CTL_DEL, io->fd, NULL);
	if (close_fd)
		close(io->fd);
	io->fd = -1;
	io->dead = true;
	io->next_dead = io->loop->graveyard;
	io->loop->graveyard = io;
}

static void bury(struct ev_loop *loop)
{
	while (loop->graveyard != NULL) {
		struct ev_io *io = loop->graveyard;

		loop->graveyard = io->next_dead;
		free(io);
	}
}

/* ---- signals ---- */

static void on_signal(struct ev_io *io, uint32_t events, void *arg)
{
	struct ev_loop *loop = arg;
	struct signalfd_siginfo si;

	(void)io;
	(void)events;
	/* Drain: the kernel coalesces pending instances of one signal. */
	while (read(loop->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (loop->sig_cb != NULL)
			loop->sig_cb((int)si.ssi_signo, loop->sig_arg);
		else if (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM)
			loop->stop = true;
	}
}

void ev_signal_set(struct ev_loop *loop, ev_signal_cb *cb, void *arg)
{
	loop->sig_cb = cb;
	loop->sig_arg = arg;
}

int ev_before_sleep_add(struct ev_loop *loop, ev_hook_cb *cb, void *arg)
{
	if (loop->nhooks == EV_MAX_HOOKS)
		return -ENOSPC;
	loop->hooks[loop->nhooks].cb = cb;
	loop->hooks[loop->nhooks].arg = arg;
	loop->nhooks++;
	return 0;
}

void ev_before_sleep_del(struct ev_loop *loop, ev_hook_cb *cb, void *arg)
{
	for (size_t i = 0; i < loop->nhooks; i++) {
		if (loop->hooks[i].cb == cb && loop->hooks[i].arg == arg) {
			memmove(&loop->hooks[i], &loop->hooks[i + 1],
				(loop->nhooks - i - 1) * sizeof(loop->hooks[0]));
			loop->nhooks--;
			return;
		}
	}
}

/* ---- worker thread ---- */

static void *worker_main(void *arg)
{
	struct ev_loop *loop = arg;
	uint64_t one = 1;

	pthread_mutex_lock(&loop->mu);
	for (;;) {
		struct work_item *w;

		while (loop->todo.head == NULL && !loop->worker_quit)
			pthread_cond_wait(&loop->cond, &loop->mu);
		if (loop->worker_quit)
			break;
		w = loop->todo.head;
		loop->todo.head = w->next;
		if (loop->todo.head == NULL)
			loop->todo.tail = NULL;
		loop->worker_busy = true;
		pthread_mutex_unlock(&loop->mu);

		w->work(w->arg);

		pthread_mutex_lock(&loop->mu);
		loop->worker_busy = false;
		w->next = NULL;
		if (loop->worker_orphaned) {
			/* Nobody will run done: the item stays on the kept
			 * loop's list, reachable, and efd may be closed. */
			w->next = loop->finished.head;
			loop->finished.head = w;
			break;
		}
		if (loop->finished.tail != NULL)
			loop->finished.tail->next = w;
		else
			loop->finished.head = w;
		loop->finished.tail = w;
		pthread_cond_broadcast(&loop->cond);
		(void)!write(loop->efd, &one, sizeof(one));
	}
	pthread_mutex_unlock(&loop->mu);
	return NULL;
}

static void on_work_done(struct ev_io *io, uint32_t events, void *arg)
{
	struct ev_loop *loop = arg;
	struct work_item *list;
	uint64_t n;

	(void)io;
	(void)events;
	(void)!read(loop->efd, &n, sizeof(n));
	pthread_mutex_lock(&loop->mu);
	list = loop->finished.head;
	loop->finished.head = loop->finished.tail = NULL;
	pthread_mutex_unlock(&loop->mu);
	while (list != NULL) {
		struct work_item *w = list;

		list = w->next;
		if (w->done != NULL)
			w->done(w->arg, false);
		free(w);
	}
}

int ev_work_submit(struct ev_loop *loop, ev_work_fn *work, ev_done_fn *done, void *arg)
{
	struct work_item *w = calloc(1, sizeof(*w));

	if (w == NULL)
		return -ENOMEM;
	w->work = work;
	w->done = done;
	w->arg = arg;
	pthread_mutex_lock(&loop->mu);
	if (!loop->worker_started) {
		/* The thread inherits the blocked signal mask set by main(). */
		int r = pthread_create(&loop->worker, NULL, worker_main, loop);

		if (r != 0) {
			pthread_mutex_unlock(&loop->mu);
			free(w);
			return -r;
		}
		loop->worker_started = true;
	}
	if (loop->todo.tail != NULL)
		loop->todo.tail->next = w;
	else
		loop->todo.head = w;
	loop->todo.tail = w;
	pthread_cond_signal(&loop->cond);
	pthread_mutex_unlock(&loop->mu);
	return 0;
}

static void worker_stop(struct ev_loop *loop)
{
	struct work_item *pending, *finished;
	struct timespec deadline;
	bool joined = true;

	if (!loop->worker_started)
		return;
	pthread_mutex_lock(&loop->mu);
	pending = loop->todo.head;
	loop->todo.head = loop->todo.tail = NULL;
	loop->worker_quit = true;
	pthread_cond_broadcast(&loop->cond);
	/* A blocking call (getaddrinfo) cannot be interrupted: wait a while,
	 * then leave the thread behind rather than hang the shutdown. */
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 2;
	while (loop->worker_busy) {
		if (pthread_cond_timedwait(&loop->cond, &loop->mu, &deadline) == ETIMEDOUT) {
			joined = false;
			loop->worker_orphaned = true;
			break;
		}
	}
	finished = loop->finished.head;
	loop->finished.head = loop->finished.tail = NULL;
	pthread_mutex_unlock(&loop->mu);
	if (joined)
		pthread_join(loop->worker, NULL);
	else
		pthread_detach(loop->worker);
	while (finished != NULL) {
		struct work_item *w = finished;

		finished = w->next;
		if (w->done != NULL)
			w->done(w->arg, false);
		free(w);
	}
	while (pending != NULL) {
		struct work_item *w = pending;

		pending = w->next;
		if (w->done != NULL)
			w->done(w->arg, true);
		free(w);
	}
}

/* Loops whose worker was left in a blocking call (worker_stop): kept, not
 * freed, because that thread still holds their lock and lists. Only a
 * process on its way out frees its loop, so this does not grow. */
static pthread_mutex_t orphans_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ev_loop *orphans;

/* ---- the loop ---- */

struct ev_loop *ev_loop_new(void)
{
	struct ev_loop *loop = calloc(1, sizeof(*loop));
	sigset_t set;
	int e;

	if (loop == NULL)
		return NULL;
	loop->epfd = loop->sigfd = loop->efd = -1;
	pthread_mutex_init(&loop->mu, NULL);
	pthread_cond_init(&loop->cond, NULL);
	loop->now_ms = ev_monotonic_ms();
	loop->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (loop->epfd < 0)
		goto fail;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGCHLD);
	loop->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (loop->sigfd < 0)
		goto fail;
	loop->sig_io = ev_io_add(loop, loop->sigfd, EPOLLIN, on_signal, loop);
	if (loop->sig_io == NULL)
		goto fail;
	loop->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (loop->efd < 0)
		goto fail;
	loop->efd_io = ev_io_add(loop, loop->efd, EPOLLIN, on_work_done, loop);
	if (loop->efd_io == NULL)
		goto fail;
	return loop;
fail:
	e = errno;
	ev_loop_free(loop);
	errno = e;
	return NULL;
}

void ev_loop_free(struct ev_loop *loop)
{
	if (loop == NULL)
		return;
	worker_stop(loop);
	ev_io_del(loop->sig_io, false);
	ev_io_del(loop->efd_io, false);
	bury(loop);
	if (loop->sigfd >= 0)
		close(loop->sigfd);
	if (loop->efd >= 0)
		close(loop->efd);
	if (loop->epfd >= 0)
		close(loop->epfd);
	for (size_t i = 0; i < loop->nheap; i++)
		loop->heap[i]->heap_idx = EV_TIMER_IDLE;
	free(loop->heap);
	loop->heap = NULL;
	if (loop->worker_orphaned) {
		pthread_mutex_lock(&orphans_mu);
		loop->next_orphan = orphans;
		orphans = loop;
		pthread_mutex_unlock(&orphans_mu);
		return;
	}
	pthread_mutex_destroy(&loop->mu);
	pthread_cond_destroy(&loop->cond);
	free(loop);
}

long long ev_now(const struct ev_loop *loop)
{
	return loop->now_ms;
}

long long ev_now_update(struct ev_loop *loop)
{
	loop->now_ms = ev_monotonic_ms();
	return loop->now_ms;
}

void ev_loop_stop(struct ev_loop *loop)
{
	loop->stop = true;
}

/* One iteration: timers, hooks, at most one epoll_wait of timeout_ms (-1 =
 * until the next timer), the ready callbacks. */
static int iterate(struct ev_loop *loop, int max_wait_ms)
{
	struct epoll_event evs[EV_BATCH];
	int n, wait;

	loop->now_ms = ev_monotonic_ms();
	run_timers(loop);
	bury(loop);
	if (loop->stop)
		return 0;
	for (size_t i = 0; i < loop->nhooks; i++)
		loop->hooks[i].cb(loop->hooks[i].arg);
	wait = next_timeout(loop);
	if (max_wait_ms >= 0 && (wait < 0 || wait > max_wait_ms))
		wait = max_wait_ms;
	n = epoll_wait(loop->epfd, evs, EV_BATCH, wait);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	loop->now_ms = ev_monotonic_ms();
	for (int i = 0; i < n; i++) {
		struct ev_io *io = evs[i].data.ptr;

		/* An earlier callback of this batch may have closed it. */
		if (io->dead)
			continue;
		io->cb(io, evs[i].events, io->arg);
	}
	bury(loop);
	return 0;
}

int ev_loop_run(struct ev_loop *loop)
{
	loop->stop = false;
	while (!loop->stop) {
		int r = iterate(loop, -1);

		if (r < 0)
			return r;
	}
	return 0;
}

int ev_loop_run_once(struct ev_loop *loop, int max_wait_ms)
{
	loop->stop = false;
	return iterate(loop, max_wait_ms);
}
