/*
 * libcurl driven by our event loop (the multi-socket API), for the lobby's
 * HTTP calls to the master (knock, poll, announce, leave).
 *
 * curl's socket callback adds, changes and removes ev_io watchers; its
 * timer callback only records a deadline (it must not call back into
 * libcurl), which a loop timer honours - a 0 ms deadline included - with
 * curl_multi_socket_action(CURL_SOCKET_TIMEOUT). After every action the
 * finished transfers are read with curl_multi_info_read and their owner's
 * callback runs. A failed transfer is reported to its owner; nothing here
 * ever exits the process.
 */
#ifndef CURLEV_H
#define CURLEV_H

#include <stddef.h>

struct ev_loop;
struct curlev;
struct curlev_req;

/*
 * A finished request: result 0 (then status is the HTTP status and body the
 * response, NUL-terminated, at most max_response bytes) or -errno
 * (-ETIMEDOUT, -ECONNREFUSED, -EMSGSIZE for a response over the cap,
 * -EIO otherwise). Called once, from the loop, unless cancelled.
 */
typedef void curlev_done_cb(void *arg, int result, long status, const char *body, size_t len);

struct curlev *curlev_new(struct ev_loop *loop);
/* Cancels every pending request (their callbacks are not called). */
void curlev_free(struct curlev *c);

/*
 * Starts a request: GET when body is NULL, else POST with body as
 * application/json. user_agent may be NULL. Returns a handle (valid until
 * the callback runs or curlev_cancel), or NULL with errno set.
 */
struct curlev_req *curlev_request(struct curlev *c, const char *url, const char *body,
				  size_t body_len, const char *user_agent, long timeout_ms,
				  size_t max_response, curlev_done_cb *cb, void *arg);
/* Stops a request; its callback is not called. NULL is a no-op. */
void curlev_cancel(struct curlev_req *r);
/* Requests in flight. */
size_t curlev_pending(const struct curlev *c);

#endif
