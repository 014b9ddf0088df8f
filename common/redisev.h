/*
 * hiredis's asynchronous API driven by our event loop (Debian's
 * libhiredis 0.14): the glue hiredis's adapters/ directory has for other
 * loops, for common/ev.
 *
 * hiredis asks for read and write interest through the context's ev hooks;
 * they set the events of one ev_io on the context's socket. When the socket
 * is ready the loop calls redisAsyncHandleRead/Write. hiredis calls cleanup
 * just before it closes the socket (the context is being freed): the ev_io
 * leaves epoll then. hiredis 0.14 has no timer hook: connect and command
 * timeouts are the owner's timers (master_redis keeps them), which free the
 * context with redisAsyncFree from outside any hiredis callback.
 */
#ifndef REDISEV_H
#define REDISEV_H

#include <hiredis/async.h>

struct ev_loop;

/*
 * Attaches ac (just returned by redisAsyncConnect*, ac->err == 0) to loop.
 * The glue lives until hiredis calls cleanup (redisAsyncFree, a failed
 * connect, a disconnect). Returns 0, or -errno (then the caller frees ac).
 */
int redisev_attach(struct ev_loop *loop, redisAsyncContext *ac);

#endif
