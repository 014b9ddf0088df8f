/*
 * WebSocket connections in the event loop, framed by libwslay.
 *
 * wslay does the framing (masking, fragments, control frames, close
 * handshake, the message size cap); this module gives it a socket in our
 * loop: reads go through a 256 KiB buffer (one recv for many frames),
 * writes are gathered into another and sent when wslay has nothing more or
 * the buffer is full, so a burst of small messages costs few syscalls.
 *
 * A server connection starts from a socket libmicrohttpd upgraded (see
 * httpd_reply_upgrade); a client connection dials a ws:// or wss:// URL
 * itself (DNS on the loop's worker, TLS with OpenSSL, the HTTP upgrade and
 * the Sec-WebSocket-Accept check). Either way the owner sees whole
 * messages, a close, and "the send queue drained below low water" for its
 * own back-pressure.
 */
#ifndef WS_H
#define WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ev_loop;
struct ws;

#define WS_KEY_LEN    (24) /* base64 of 16 random bytes */
#define WS_ACCEPT_LEN (28) /* base64 of a SHA-1 */
#define WS_URL_MAX    (512)

struct ws_ops {
	/* A whole text or binary message (borrowed for the call). */
	void (*on_msg)(struct ws *w, bool binary, const uint8_t *msg, size_t len, void *arg);
	/* Client only: the upgrade succeeded, messages may be sent. */
	void (*on_open)(struct ws *w, void *arg);
	/* The queue of bytes to send fell to low_water or below. */
	void (*on_drain)(struct ws *w, void *arg);
	/* The connection is gone (err 0: closed cleanly, else -errno:
	 * -EMSGSIZE a message over max_msg, -EPROTO bad framing or handshake,
	 * -ETIMEDOUT, -ECONNRESET...). Call ws_free() from here or later;
	 * nothing else is called after. */
	void (*on_close)(struct ws *w, int err, void *arg);
};

struct ws_cfg {
	size_t max_msg;   /* bytes; a bigger message closes with 1009 */
	size_t low_water; /* on_drain when the send queue falls to this */
	/* Client: PEM bundle to trust instead of the system's (tests);
	 * "" = system. */
	const char *ca_file;
	long long connect_timeout_ms; /* client: DNS + TCP + TLS + upgrade */
	/* Raw mode: the upgrade names this protocol instead of websocket and,
	 * once switched, bytes travel as they are (no framing): on_msg gets
	 * what each read brought, ws_send queues bytes (at most raw_queue_max,
	 * default 16 MiB). For a byte stream the owner frames itself. */
	const char *raw_protocol;
	size_t raw_queue_max;
	/* Client: one more request header line ("Name: value"), or NULL. */
	const char *extra_header;
};

/* Called to give the socket back to whoever owns it (libmicrohttpd's
 * upgrade handle); NULL: ws closes the fd itself. */
typedef void ws_release_fn(void *release_arg);

/*
 * A server-side connection on fd (already upgraded: the 101 is sent).
 * extra holds bytes read past the HTTP request. ws watches fd; on
 * ws_free it stops and calls release(release_arg) (or closes fd when
 * release is NULL). NULL, errno set, on failure (release not called).
 */
struct ws *ws_new_server(struct ev_loop *loop, int fd, const uint8_t *extra, size_t extra_len,
			 const struct ws_cfg *cfg, const struct ws_ops *ops, void *arg,
			 ws_release_fn *release, void *release_arg);

/*
 * Dials url (ws://HOST[:PORT]/PATH or wss://...). on_open or on_close
 * follows from the loop. NULL, errno set, on a bad URL or no memory.
 */
struct ws *ws_connect(struct ev_loop *loop, const char *url, const struct ws_cfg *cfg,
		      const struct ws_ops *ops, void *arg);

/* Stops watching, releases the socket, frees. NULL is a no-op. Safe from
 * inside any of the ops' callbacks of this ws. */
void ws_free(struct ws *w);

/* Queues a message (copied). 0, -EPIPE once closing, -ENOMEM. */
int ws_send(struct ws *w, bool binary, const void *msg, size_t len);
/* Queues a close frame with code (1000 normal, 1008 policy, 1011 ...);
 * on_close follows once the peer answers or the socket ends. */
int ws_close(struct ws *w, uint16_t code);
/* Bytes queued and not yet on the socket (wslay's queue + ours). */
size_t ws_queued(const struct ws *w);
/* Messages in wslay's queue (each costs an allocation beyond its bytes). */
size_t ws_queued_msgs(const struct ws *w);
/* Stops reading from the peer until ws_pause(w, false) (back-pressure). */
void ws_pause(struct ws *w, bool paused);
bool ws_is_open(const struct ws *w);
/* The peer's address (the relay a client dialled); 0 or -errno. */
struct addr;
int ws_peer(const struct ws *w, struct addr *a);
uint64_t ws_bytes_in(const struct ws *w);
uint64_t ws_bytes_out(const struct ws *w);

/* Sec-WebSocket-Accept for a Sec-WebSocket-Key: base64(SHA-1(key GUID)).
 * 0, or -EINVAL for a key that is not 24 base64 characters. */
int ws_accept_key(const char *key, char out[static WS_ACCEPT_LEN + 1]);

#endif
