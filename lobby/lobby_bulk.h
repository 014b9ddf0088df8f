/*
 * The bulk TCP side channel (netpunch-wire.md §12), in the loop: no thread
 * per connection, every socket non-blocking.
 *
 * Host: a listener on the TCP port of the lobby's UDP port number (IPv4,
 * and IPv6 v6-only). A connection has 5 s to say its hello
 * ("TPF2BULK1 recv <sid> <token> <name>\n", 256 bytes at most; at most 32
 * wait at once); one that names the round's sid and token and a target
 * that round can place (by name, else by a unique source IP) gets exactly
 * "OK\n" and the blob from byte 0 (sendfile from the save's files), then
 * the close. Anything else is closed without a word, and counted.
 *
 * Joiner: connects to the host's IP at the offered port (3 s, three tries
 * 0.5 s apart), says its hello, waits for "OK\n", and hands what flows to
 * the receiver in order; a broken stream leaves the rest to UDP.
 */
#ifndef LOBBY_BULK_H
#define LOBBY_BULK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"

struct lobby;
struct lobby_xsend;

#define LOBBY_BULK_PENDING_MAX (32)
#define LOBBY_BULK_HELLO_MS    (5000)
#define LOBBY_BULK_CONNECT_MS  (3000)
#define LOBBY_BULK_TRIES       (3)
#define LOBBY_BULK_RETRY_MS    (500)

/* ---- the host's listener ---- */

struct lobby_bulk;

struct lobby_bulk_stats {
	uint64_t accepted, refused, timeouts, too_many, streams, streams_ok, bytes;
};

/* Listens on port (TCP). NULL when it cannot (logged): fbegins then offer
 * a token without a port, and transfers run over UDP only. */
struct lobby_bulk *lobby_bulk_listen(struct lobby *l, uint16_t port);
void lobby_bulk_free(struct lobby_bulk *b);
uint16_t lobby_bulk_port(const struct lobby_bulk *b);
/* The round x takes connections for (sid, token); one round at a time. */
void lobby_bulk_expect(struct lobby_bulk *b, struct lobby_xsend *x, uint32_t sid,
		       const char *token);
/* x is over: its expectation goes, its streams are closed. */
void lobby_bulk_forget(struct lobby_bulk *b, struct lobby_xsend *x);
void lobby_bulk_stats(const struct lobby_bulk *b, struct lobby_bulk_stats *out);
/*
 * A sender that pushes (role send: a relay leader uploading) is expected
 * for round sid with token: its hello gets "OK\n" and adopt(arg, fd) its
 * socket (adopt owns it). One at a time; adopt NULL forgets it.
 */
void lobby_bulk_expect_push(struct lobby_bulk *b, uint32_t sid, const char *token,
			    void (*adopt)(void *arg, int fd), void *arg);

/* ---- the joiner's pull ---- */

struct lobby_bulk_pull;

struct lobby_bulk_pull_ops {
	/* "OK\n" came: the stream is ours. */
	void (*claimed)(void *arg);
	/* The next bytes of the blob, in order from byte 0. Return < 0 to stop
	 * (the connection is closed; ended is not called). */
	int (*data)(void *arg, const uint8_t *p, size_t n);
	/* The stream ended: complete when all total bytes came. */
	void (*ended)(void *arg, bool complete);
	/* Every try failed before an "OK\n": UDP it is. */
	void (*gave_up)(void *arg);
	/* Optional, for splice(2) straight from the socket into the files
	 * (no copy through us): where blob offset off lives (the file's fd,
	 * the offset in it, the bytes to its end); 0, or < 0 to use data. */
	int (*locate)(void *arg, uint64_t off, int *fd, uint64_t *file_off, uint64_t *left);
	/* n more bytes were spliced into place (err: the write failed, -errno).
	 * As data's return. */
	int (*spliced)(void *arg, size_t n, int err);
};

/* Starts pulling total bytes of round sid from host (IP and port). NULL,
 * errno set. The ops run from the loop; after ended or gave_up the pull
 * does nothing more (free it). */
struct lobby_bulk_pull *lobby_bulk_pull_start(struct lobby *l, const struct addr *host,
					      uint32_t sid, const char *token, const char *name,
					      uint64_t total, const struct lobby_bulk_pull_ops *ops,
					      void *arg);
void lobby_bulk_pull_free(struct lobby_bulk_pull *p);
/* ---- a sender's push (a relay leader's upload, role send) ---- */

struct lobby_bulk_push;

/*
 * Dials the receiver's listener at to (its IP, the tcp_port of its
 * fbegin_ack: 3 s, three tries 0.5 s apart), says
 * "TPF2BULK1 send <sid> <token> <name>\n", and on "OK\n" streams target's
 * blob of x from byte 0 (lobby_xsend_tcp_start, then _tcp_ended). Every
 * try failing leaves the round to UDP. NULL, errno set.
 */
struct lobby_bulk_push *lobby_bulk_push_start(struct lobby *l, const struct addr *to,
					      struct lobby_xsend *x, int target, uint32_t sid,
					      const char *token, const char *name);
void lobby_bulk_push_free(struct lobby_bulk_push *p);

/* The same reading of total bytes from a socket whose "OK\n" was said
 * (a pushed stream, lobby_bulk_expect_push): claimed runs at once. NULL,
 * errno set (fd is closed either way on failure). */
struct lobby_bulk_pull *lobby_bulk_pull_adopt(struct lobby *l, int fd, uint64_t total,
					      const struct lobby_bulk_pull_ops *ops, void *arg);

#endif
