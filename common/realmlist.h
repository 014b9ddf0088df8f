/*
 * The WoW 3.3.5 (build 12340) auth server's answers, framed one message at
 * a time on their way to the client, so that each REALM_LIST (opcode 0x10)
 * gets its first realm's address replaced by the relay's "host:port" and its
 * uint16 LE body length fixed (coa-relay PROTOCOL.md §4). A REALM_LIST split
 * across reads, or sharing one with other answers, is rewritten all the
 * same; a malformed one goes out untouched and is counted. Anything the
 * framer does not understand ends framing for the rest of the stream
 * ("desync"): from there every byte is forwarded as it comes. Layouts are
 * those of AzerothCore's and TrinityCore's AuthSession.cpp; realmlist.c
 * cites them. The world stream never comes here.
 */
#ifndef REALMLIST_H
#define REALMLIST_H

#include <stddef.h>
#include <stdint.h>

#include "strbuf.h"

#define REALMLIST_CMD      (0x10)
#define REALMLIST_ADDR_MAX (255)
/* The largest REALM_LIST: the 3-byte header and a 65535-byte body. */
#define REALMLIST_MSG_MAX (3 + 65535)

struct realmlist_stats {
	uint64_t rewritten; /* REALM_LISTs whose first address was replaced */
	uint64_t malformed; /* REALM_LISTs forwarded untouched (bad layout, too long) */
	uint64_t desync;    /* streams given up on (0 or 1 per stream) */
};

/* One auth stream's framer (opaque). */
struct realmlist;

/* A framer for one stream; new_addr ("host:port", 1 to REALMLIST_ADDR_MAX
 * bytes) is copied. NULL with errno EINVAL (bad address) or ENOMEM. */
struct realmlist *realmlist_new(const char *new_addr);
/* Frees rl and what it holds (held bytes are dropped); NULL is a no-op. */
void realmlist_free(struct realmlist *rl);
/*
 * Feeds the next len bytes from the server and appends to out what may go
 * to the client now: every message framed so far, a REALM_LIST rewritten
 * or untouched once all of it is in (at most REALMLIST_MSG_MAX bytes held),
 * and after a desync or a failure answer everything as it comes. Returns 0,
 * or -ENOMEM when out->bad is set (its cap or memory ran out; some output is
 * lost, so the stream is to be closed).
 */
int realmlist_feed(struct realmlist *rl, const uint8_t *in, size_t len, struct strbuf *out);
/* Bytes held back, the start of a message not yet whole: for back-pressure,
 * and what realmlist_flush() would hand over.
 * XXX: a server that announces a longer REALM_LIST than it sends stalls
 * the client until the stream ends; an owner that minds can time out on
 * a pending count that does not move. */
size_t realmlist_pending(const struct realmlist *rl);
/* At the end of the stream: appends the held bytes untouched to out and
 * holds nothing after. Returns 0, or -ENOMEM when out->bad is set. */
int realmlist_flush(struct realmlist *rl, struct strbuf *out);
/* The counters of this stream (borrowed; live as long as rl). */
const struct realmlist_stats *realmlist_stats(const struct realmlist *rl);

/*
 * The pure rewrite of one whole REALM_LIST message (msg, len): writes it to
 * (out, size) with the first realm's address replaced by new_addr and the
 * body length fixed, and returns the length written. A list of 0 realms is
 * copied as it is. -EBADMSG when malformed (not opcode 0x10, body length
 * other than len - 3, a realm count the body does not hold, an unterminated
 * name or address, no 0x10 0x00 footer, bytes after it, or a new body
 * length over 65535), -EINVAL for a new_addr of 0 or more than
 * REALMLIST_ADDR_MAX bytes, -ENOSPC when size is too small.
 */
int realmlist_rewrite(const uint8_t *msg, size_t len, const char *new_addr, uint8_t *out,
		      size_t size);

#endif
