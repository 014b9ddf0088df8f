/*
 * hiredis <-> ev glue; see redisev.h for the contract.
 *
 * The one trap: hiredis may free the context from inside
 * redisAsyncHandleRead (a reply callback called redisAsyncFree, or the peer
 * hung up), which calls our cleanup while our io callback is still on the
 * stack. cleanup then only marks the glue dead and the io callback frees it
 * on its way out, never touching the context again.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/epoll.h>

#include "ev.h"
#include "redisev.h"

struct redisev {
	redisAsyncContext *ac;
	struct ev_io *io;
	uint32_t want;
	bool in_cb; /* inside on_io: cleanup defers the free */
	bool dead;  /* cleanup ran */
};

static void apply(struct redisev *e, uint32_t want)
{
	if (e->dead || want == e->want)
		return;
	/* EPOLL_CTL_MOD on a watched fd fails only for a closed one, which
	 * hiredis never leaves us. */
	if (ev_io_mod(e->io, want) == 0)
		e->want = want;
}

static void add_read(void *p)
{
	struct redisev *e = p;

	apply(e, e->want | EPOLLIN);
}

static void del_read(void *p)
{
	struct redisev *e = p;

	apply(e, e->want & ~(uint32_t)EPOLLIN);
}

static void add_write(void *p)
{
	struct redisev *e = p;

	apply(e, e->want | EPOLLOUT);
}

static void del_write(void *p)
{
	struct redisev *e = p;

	apply(e, e->want & ~(uint32_t)EPOLLOUT);
}

/* hiredis closes the fd right after this: out of epoll first. */
static void cleanup(void *p)
{
	struct redisev *e = p;

	if (e->dead)
		return;
	e->dead = true;
	ev_io_del(e->io, false);
	e->io = NULL;
	e->ac = NULL;
	if (!e->in_cb)
		free(e);
}

static void on_io(struct ev_io *io, uint32_t events, void *arg)
{
	struct redisev *e = arg;

	(void)io;
	e->in_cb = true;
	/*
	 * An error or hang-up: the side hiredis is waiting on finds it (a
	 * connect in progress waits for writability) and disconnects; with
	 * level-triggered epoll nothing else may be left to wake us forever.
	 */
	if ((events & (EPOLLERR | EPOLLHUP)) != 0)
		events |= (e->want & EPOLLOUT) != 0 ? EPOLLOUT : EPOLLIN;
	if ((events & EPOLLIN) != 0)
		redisAsyncHandleRead(e->ac);
	if (!e->dead && (events & EPOLLOUT) != 0)
		redisAsyncHandleWrite(e->ac);
	e->in_cb = false;
	if (e->dead)
		free(e);
}

int redisev_attach(struct ev_loop *loop, redisAsyncContext *ac)
{
	struct redisev *e;

	if (ac == NULL || ac->err != 0 || ac->ev.data != NULL)
		return -EINVAL;
	e = calloc(1, sizeof(*e));
	if (e == NULL)
		return -ENOMEM;
	e->ac = ac;
	e->io = ev_io_add(loop, ac->c.fd, 0, on_io, e);
	if (e->io == NULL) {
		int r = -errno;

		free(e);
		return r;
	}
	ac->ev.data = e;
	ac->ev.addRead = add_read;
	ac->ev.delRead = del_read;
	ac->ev.addWrite = add_write;
	ac->ev.delWrite = del_write;
	ac->ev.cleanup = cleanup;
	/* A connecting socket says it is done by becoming writable. */
	add_write(e);
	return 0;
}
