/*
 * The save transfer (netpunch-wire.md §11): the host's rounds (xsend) and
 * the joiner's receiver (xrecv). Chunks travel as plain NP1 'D' frames
 * ("NPF1" | sid | seq | bytes of the blob), the control messages as lobby
 * messages (fbegin, fbegin_ack, fack, fdone) sealed like any other. Files
 * are streamed from and to disk (lobby_save); hashing and syncing run on
 * the worker thread.
 */
#ifndef LOBBY_XFER_H
#define LOBBY_XFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"
#include "lobby_msg.h"

struct lobby;
struct lobby_bulk;
struct lobby_save;

/* §11's numbers. */
#define LOBBY_XFER_CHUNK_LOCAL   (8192) /* every target on 127.x */
#define LOBBY_XFER_CHUNK_DATA    (1350) /* any other target */
#define LOBBY_XFER_WINDOW_LOCAL  (16384)
#define LOBBY_XFER_WINDOW_REMOTE (2048)
#define LOBBY_XFER_BUDGET        (256)   /* datagrams per peer per pump */
#define LOBBY_XFER_FEEDBACK_MS   (50)    /* a receiver's fack */
#define LOBBY_XFER_BEGIN_MS      (200)   /* fbegin until acked */
#define LOBBY_XFER_NUDGE_MS      (1000)  /* the last chunk to a silent complete peer */
#define LOBBY_XFER_RESEND_MS     (500)   /* rewind to base without feedback */
#define LOBBY_XFER_TIMEOUT_MS    (30000) /* no progress: the peer failed */
#define LOBBY_XFER_VERIFY_MS     (300000)
#define LOBBY_XFER_MAX_NACK      (128)
#define LOBBY_XFER_MAX_RETRIES   (3) /* a receiver's re-requests after a mismatch */
#define LOBBY_XFER_MAX_HOLES     (4096)

/* rally's extension between two rally-lobbies (docs/transfer.md): the
 * joiner offers it in its join, the host answers in its fbegin; chunks as
 * large as the path takes, feedback every 10 ms with an xstat report
 * beside each fack, a paced sender (lobby_cc), resume. */
#define LOBBY_XFER_RALLY_V        (1)
#define LOBBY_XFER_CHUNK_RALLY_LO (61440) /* to a rally joiner on loopback */
#define LOBBY_XFER_RALLY_WINDOW   (8192)  /* chunks past base */
#define LOBBY_XFER_RALLY_FB_MS    (10)
#define LOBBY_XFER_RALLY_FB_LO_MS (5)     /* to a joiner on loopback */
#define LOBBY_XFER_RALLY_RING     (16384) /* send times kept (> window) */
#define LOBBY_XFER_MAX_REWINDS    (LOBBY_XFER_MAX_RETRIES + 1)

/* The window a chunk size implies (both ends derive it the same way). */
unsigned lobby_xfer_window(long long chunk);

/* ---- the host: one round to a fixed set of targets ---- */

struct lobby_xsend;

enum lobby_xsend_state {
	LOBBY_XSEND_ACTIVE,
	LOBBY_XSEND_DONE,
	LOBBY_XSEND_FAILED,
	LOBBY_XSEND_DROPPED
};

struct lobby_xsend_target {
	struct addr addr;
	const char *name; /* copied */
	bool rally;       /* its join offered rally's extension */
};

struct lobby_xsend_ops {
	/* The round could not start after all (the files changed or could not
	 * be hashed): detail is the error. The round is over. */
	void (*aborted)(struct lobby *l, const char *detail);
	/* A peer's progress crossed a 10 % mark: "receiving save N%". */
	void (*stage)(struct lobby *l, const struct addr *peer, const char *text);
	/* Every target is done, failed or dropped. */
	void (*resolved)(struct lobby *l);
};

/*
 * Opens the save (path as netpunch's START gives it) and starts hashing it
 * on the worker; the round begins (fbegin to every target) when that is
 * done. Returns NULL with err set ("save not found: ...") when the files
 * cannot be opened.
 */
struct lobby_xsend *lobby_xsend_start(struct lobby *l, const char *save_path,
				      const struct lobby_xsend_target *targets, size_t n,
				      const struct lobby_xsend_ops *ops, struct lobby_bulk *bulk,
				      char *err, size_t errsize);
void lobby_xsend_free(struct lobby_xsend *x);
/* fbegin_ack, fack, fdone from a peer (others are ignored). */
void lobby_xsend_on_msg(struct lobby_xsend *x, const struct addr *from, const struct lobby_msg *m);
/* A peer left or was dropped. */
void lobby_xsend_peer_gone(struct lobby_xsend *x, const struct addr *peer);
/* Whether peer is a target still being served (exempt from the silence
 * sweep, as netpunch exempts it). */
bool lobby_xsend_active(const struct lobby_xsend *x, const struct addr *peer);
/* The bulk TCP listener's side (lobby_bulk): a hello naming this round
 * claims a target (by its name, else by a unique source IP): its index, or
 * -1; the save to stream; how the stream ended. */
int lobby_xsend_tcp_claim(struct lobby_xsend *x, const char *name, size_t name_len,
			  const struct addr *src);
struct lobby_save *lobby_xsend_source(struct lobby_xsend *x);
void lobby_xsend_tcp_ended(struct lobby_xsend *x, int target, bool ok, uint64_t bytes);
/* A push we dialled (lobby_bulk_push) was taken: target's stream runs. */
void lobby_xsend_tcp_start(struct lobby_xsend *x, int target);
/* After resolved: a target's outcome. */
enum lobby_xsend_state lobby_xsend_state_of(const struct lobby_xsend *x, const struct addr *peer);
size_t lobby_xsend_targets(const struct lobby_xsend *x);
const char *lobby_xsend_target_name(const struct lobby_xsend *x, size_t i);
enum lobby_xsend_state lobby_xsend_target_state(const struct lobby_xsend *x, size_t i);
const struct addr *lobby_xsend_target_addr(const struct lobby_xsend *x, size_t i);

/* ---- the joiner: what the host sends ---- */

struct lobby_xrecv;

struct lobby_xrecv_ops {
	/* A message to the host (fbegin_ack, fack, fdone, stage). */
	void (*send)(struct lobby *l, const struct lobby_msg *m);
	/* Where the host is (the bulk stream goes to its IP), and the name we
	 * asked for (the bulk hello carries it, as netpunch's does). */
	const struct addr *(*host)(struct lobby *l);
	const char *(*name)(struct lobby *l);
	/* Optional: our TCP listener, when the sender pushes to us (a relay
	 * taking its leader's upload: its fbegin offers a token and no port;
	 * our fbegin_ack names the listener's port and the leader dials it).
	 * NULL, or NULL returned: UDP only. */
	struct lobby_bulk *(*listener)(struct lobby *l);
};

/* A receiver writing into the io dir; caps a declared size at cap bytes. */
struct lobby_xrecv *lobby_xrecv_new(struct lobby *l, const struct lobby_xrecv_ops *ops,
				    uint64_t cap);
void lobby_xrecv_free(struct lobby_xrecv *x);
void lobby_xrecv_on_begin(struct lobby_xrecv *x, const struct lobby_msg_fbegin *fb);
/* An NPF1 payload (its first byte 'N'). */
void lobby_xrecv_on_chunk(struct lobby_xrecv *x, const uint8_t *p, size_t len);
/* The current round's save is verified and in place (start save:true may
 * apply); the current round failed (no start applies until a new one). */
bool lobby_xrecv_complete(const struct lobby_xrecv *x);
/* The sid of the round received last (0: none yet). */
uint32_t lobby_xrecv_sid(const struct lobby_xrecv *x);
/* The current round's progress in per cent (-1: none, or no chunk yet). */
int lobby_xrecv_pct(const struct lobby_xrecv *x);
bool lobby_xrecv_failed(const struct lobby_xrecv *x);

#endif
