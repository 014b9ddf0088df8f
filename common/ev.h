/*
 * The event loop: one per process, single-threaded, level-triggered epoll.
 *
 * It watches file descriptors, runs timers from a monotonic min-heap, turns
 * SIGINT/SIGTERM/SIGHUP/SIGCHLD into callbacks through a signalfd, calls
 * before-sleep hooks, and runs blocking calls (DNS, ...) on one worker thread
 * whose completions come back through an eventfd. Time is CLOCK_MONOTONIC in
 * milliseconds, read once per iteration.
 */
#ifndef EV_H
#define EV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ev_loop;
struct ev_io;

typedef void ev_io_cb(struct ev_io *io, uint32_t events, void *arg);

/*
 * A timer lives in the caller's memory. ev_timer_stop() takes it out of the
 * heap at once, so the owner may free it right after, also from inside any
 * timer or io callback, including the timer's own.
 */
struct ev_timer;
typedef void ev_timer_cb(struct ev_timer *t, void *arg);
struct ev_timer {
	long long deadline_ms;
	uint64_t seq;
	size_t heap_idx; /* EV_TIMER_IDLE when not armed */
	ev_timer_cb *cb;
	void *arg;
};
#define EV_TIMER_IDLE ((size_t)-1)

typedef void ev_signal_cb(int signo, void *arg);
typedef void ev_hook_cb(void *arg);

/* Blocks SIGINT, SIGTERM, SIGHUP, SIGCHLD and ignores SIGPIPE for the whole
 * process. Call first in main(), before any thread or library starts. */
void ev_block_signals(void);

/* Creates a loop with a signalfd for the blocked signals; NULL, errno set. */
struct ev_loop *ev_loop_new(void);
/* Stops the worker thread (waiting up to 2 s for a running job; pending
 * jobs get done(arg, true)) and frees the loop. fds still watched stay open:
 * their owners close them. NULL is a no-op. */
void ev_loop_free(struct ev_loop *loop);

/* Runs until ev_loop_stop(); returns 0, or -errno if epoll_wait fails. */
int ev_loop_run(struct ev_loop *loop);
void ev_loop_stop(struct ev_loop *loop);
/* One iteration, waiting at most max_wait_ms (-1: until the next timer)
 * for fds; for tests and tools that drive the loop themselves. */
int ev_loop_run_once(struct ev_loop *loop, int max_wait_ms);

/* Monotonic milliseconds, as read at the start of this iteration. */
long long ev_now(const struct ev_loop *loop);
/* Reads the clock again (for long callbacks). */
long long ev_now_update(struct ev_loop *loop);
/* CLOCK_MONOTONIC in ms, without a loop. */
long long ev_monotonic_ms(void);
/* CLOCK_MONOTONIC in microseconds (the save transfer's pacer). */
unsigned long long ev_monotonic_us(void);

/* Watches fd for events (EPOLLIN/EPOLLOUT). The loop does not own fd until
 * ev_io_del(..., true). Returns NULL, errno set, on failure. */
struct ev_io *ev_io_add(struct ev_loop *loop, int fd, uint32_t events, ev_io_cb *cb, void *arg);
int ev_io_mod(struct ev_io *io, uint32_t events);
uint32_t ev_io_events(const struct ev_io *io);
int ev_io_fd(const struct ev_io *io);
/* Removes from epoll, closes fd if close_fd, marks dead; the struct is freed
 * after the current batch and never called again. NULL is a no-op. */
void ev_io_del(struct ev_io *io, bool close_fd);

/* Arms (or re-arms) t to fire once after delay_ms. */
void ev_timer_start(struct ev_loop *loop, struct ev_timer *t, long long delay_ms, ev_timer_cb *cb,
		    void *arg);
void ev_timer_stop(struct ev_loop *loop, struct ev_timer *t);
static inline void ev_timer_init(struct ev_timer *t)
{
	t->heap_idx = EV_TIMER_IDLE;
}
static inline bool ev_timer_armed(const struct ev_timer *t)
{
	return t->heap_idx != EV_TIMER_IDLE;
}

/* Calls cb for every SIGINT, SIGTERM, SIGHUP and SIGCHLD delivered. */
void ev_signal_set(struct ev_loop *loop, ev_signal_cb *cb, void *arg);

/* Runs cb before every sleep in epoll_wait. At most EV_MAX_HOOKS; -ENOSPC.
 * rally-relay holds one per fronted server (up to 64) besides its own. */
#define EV_MAX_HOOKS (96)
int ev_before_sleep_add(struct ev_loop *loop, ev_hook_cb *cb, void *arg);
/* Removes a hook added with the same cb and arg. */
void ev_before_sleep_del(struct ev_loop *loop, ev_hook_cb *cb, void *arg);

/*
 * The worker thread. work(arg) runs on the worker, in submission order;
 * done(arg, cancelled) then runs on the loop. cancelled is true when the loop
 * is freed before the job ran. Returns 0 or -errno.
 */
typedef void ev_work_fn(void *arg);
typedef void ev_done_fn(void *arg, bool cancelled);
int ev_work_submit(struct ev_loop *loop, ev_work_fn *work, ev_done_fn *done, void *arg);

#endif
