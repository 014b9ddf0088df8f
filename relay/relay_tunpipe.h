/*
 * One tunnel stream's socket side, the same on both ends: the relay's
 * player socket and the agent's local-server socket. A pipe reads its
 * socket one chunk at a time into data messages for the tunnel (JSON for
 * coa's wire, binary frames within the credit the other end granted),
 * buffers what the tunnel brings until the socket takes it, half-closes
 * once the other end closed and the buffer is written, and in binary mode
 * grants credit back for what it has taken.
 */
#ifndef RELAY_TUNPIPE_H
#define RELAY_TUNPIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "strbuf.h"

struct ws;
struct ev_io;

/* Where a pipe's frames go: the tunnel (JSON, credits), and the data
 * channel when one is up (binary DATA/CLOSE/RESET, in order). */
struct tunsink {
	struct ws *ws;
	struct ws *data;
	struct strbuf *msg; /* scratch for JSON */
};

/* A binary frame (type, id, payload) on the sink's data channel (length
 * prefixed) or, without one, on the tunnel. */
void tunsink_frame(const struct tunsink *k, const uint8_t *frame, size_t n);
/* close/reset of stream id: a binary frame in binary mode (so it stays
 * behind the stream's data), coa's JSON otherwise. */
void tunsink_end(const struct tunsink *k, bool bin, int cmd, uint32_t id);
/* Feeds bytes of a data channel: fn(arg, frame, len) for each whole frame;
 * asm keeps a partial one. 0, or -EBADMSG for a length of 0 or over
 * TUNMSG_WS_MAX (drop the channel). */
int tunsink_deframe(struct strbuf *asm, const uint8_t *in, size_t n,
		    void (*fn)(void *arg, const uint8_t *frame, size_t len), void *arg);

struct tunpipe {
	int fd;
	struct ev_io *io;
	uint32_t id;  /* the stream id on the tunnel */
	bool bin;     /* binary frames and credits */
	bool l_eof;   /* our socket ended: close sent */
	bool r_eof;   /* the other end closed: shut writes once written */
	bool wr_shut; /* shutdown(SHUT_WR) done */
	struct strbuf out;
	size_t out_off;
	uint32_t credit; /* binary: bytes we may still send */
	uint32_t owed;   /* binary: bytes taken from the tunnel, not credited */
};

/* fd is taken; the buffer holds at most buf_max bytes. */
void tunpipe_init(struct tunpipe *p, int fd, uint32_t id, size_t buf_max);
/* Stops watching and closes (abort: an RST instead of a FIN). */
void tunpipe_release(struct tunpipe *p, bool abort);
size_t tunpipe_pending(const struct tunpipe *p);
/* Writes what waits, shuts the write side when due, grants credit back;
 * the bytes written, or -1 when the socket failed. */
ssize_t tunpipe_flush(struct tunpipe *p, const struct tunsink *k);
/*
 * Reads one chunk (<= TUNMSG_CHUNK_MAX, and <= the credit in binary mode)
 * and sends it on ws as data (msg is scratch for the JSON, scratch holds
 * TUNMSG_BIN_HDR + TUNMSG_CHUNK_MAX bytes). Returns the bytes sent, 0 at
 * EOF (close sent, l_eof set), -EAGAIN, or another -errno (reset sent).
 */
ssize_t tunpipe_read(struct tunpipe *p, const struct tunsink *k, uint8_t *scratch);
/* Bytes from the tunnel for the socket: 0, or -ENOBUFS past buf_max. */
int tunpipe_take(struct tunpipe *p, const uint8_t *buf, size_t n);
/* A credit frame's 4 bytes; 0, or -EBADMSG beyond the window. */
int tunpipe_credit(struct tunpipe *p, const uint8_t c[static 4]);
/* The epoll events the pipe wants, given whether reading is allowed. */
uint32_t tunpipe_events(const struct tunpipe *p, bool may_read);
/* Both sides closed and nothing waits: the stream is over. */
bool tunpipe_done(const struct tunpipe *p);
/* Sends a JSON command (connect_ok, ...) of stream id on ws. */
void tunpipe_send_cmd(struct ws *ws, struct strbuf *msg, int cmd, uint32_t id);

#endif
