/*
 * The dual TCP backup link (netpunch-wire.md §13; netpunch's dual_tcp.py),
 * in the loop: no thread per connection, every socket non-blocking.
 *
 * In a sealed session (unless <io dir>/tpf2mp_tcp_backup.txt says 0, off
 * or no) each joiner and the host keep one TCP connection beside the UDP
 * path, and every sealed (E) frame the lobby sends a peer over UDP goes
 * down that peer's link too, as u16be length + the same bytes. A frame
 * read from a link goes into lobby_net's receive path as if it had come
 * over UDP from the peer's address, so the seal's replay window drops
 * whichever copy comes second: the first copy wins. (netpunch writes the
 * copy into its own UDP socket over 127.0.0.1 behind a "TPF2DUAL" header;
 * we are one loop and hand it over directly: no loopback datagram anyone
 * on the machine could forge.)
 *
 * How a link is made, as dual_tcp.py makes it:
 *   - the joiner, once the host's welcome came, connects from its own
 *     lobby port to the host's TCP lobby port and listens on its own, and
 *     the host, once the joiner joined, connects from its lobby port to the
 *     joiner's: an attempt every second for 30 s on both sides (a NAT that
 *     keeps ports lets the two meet in a simultaneous open);
 *   - whoever connected says "TPF2LINK1 <name> <hex(seal(name))>\n" (the
 *     joiner the name the host gave it, the host its own); whoever
 *     accepted reads it (5 s, 256 bytes at most) and checks that the seal
 *     opens under the session key to exactly that name. The host takes its
 *     joiners' hellos from the bulk listener (lobby_bulk hands them over)
 *     and binds each to the joined peer whose frames carry the same sealer
 *     salt, under that name (or the name it de-duplicated from it),
 *     waiting up to 10 s for the join; a joiner takes the host's hello
 *     only from the host's sealer. In a true simultaneous open both sides
 *     connected and both said hello: the peer's hello first on a link we
 *     made is checked the same way and read past. Whoever said hello holds
 *     its records until the peer's first one (or 250 ms): netpunch's
 *     hello reader breaks on a record in the same read as the hello.
 * Then 1,024 frames wait per link at most (the oldest dropped), netsim's
 * delay holds each one (never its loss), a socket that takes nothing for
 * 10 s closes the link. A link that breaks is closed and both sides dial
 * again for 30 s; UDP carries on meanwhile. Anything else (a stranger, a
 * wrong seal, a name that is no peer's, a silent or oversized hello, a
 * record that cannot be an E frame) is closed and counted; at most 32
 * connections wait for their hello or their joiner at once.
 *
 * Every 10 s a line per peer says which path brought each sealed frame
 * first, as dual_tcp.DualStats counts: udp_first / tcp_first, tcp_only
 * (UDP lost it, the link covered) and udp_only (no TCP copy within 3 s),
 * and how much later the second copy came (p50/p90/max).
 *
 * Not used toward Steam tunnel peers (netpunch skips them); rally-lobby
 * has none. IPv4 only, as netpunch's lobby.
 */
#ifndef LOBBY_DUAL_H
#define LOBBY_DUAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"

struct lobby;
struct lobby_dual;

#define LOBBY_DUAL_FILE          "tpf2mp_tcp_backup.txt"
#define LOBBY_DUAL_QUEUE_MAX     (1024)              /* frames per link */
#define LOBBY_DUAL_QUEUE_BYTES   (32u * 1024 * 1024) /* all links' queues together */
#define LOBBY_DUAL_DIAL_FOR_MS   (30000)
#define LOBBY_DUAL_DIAL_EVERY_MS (1000) /* also each attempt's connect time */
#define LOBBY_DUAL_HELLO_MS      (5000)
#define LOBBY_DUAL_HOLD_MS       (250)   /* our frames after our hello: see lobby_dual.c */
#define LOBBY_DUAL_MATCH_MS      (10000) /* a hello waits this long for its join */
#define LOBBY_DUAL_PENDING_MAX   (32)    /* as the bulk listener's */
#define LOBBY_DUAL_STALL_MS      (10000)
#define LOBBY_DUAL_AGE_OUT_MS    (3000) /* one copy only this long: *_only */
#define LOBBY_DUAL_STATS_MS      (10000)
#define LOBBY_DUAL_SEEN_MAX      (32768) /* frames waiting for their 2nd copy */
#define LOBBY_DUAL_LAGS          (2048)  /* gaps kept per peer and path */

/* Whether the text of tpf2mp_tcp_backup.txt leaves the link on: stripped
 * of whitespace, anything but "0", "off" or "no" (lobby.py _tcp_backup_on;
 * case counts, as there). Pure. */
bool lobby_dual_switch_on(const char *text, size_t len);
/* netpunch's quantile over n sorted values: v[min(n - 1, floor(f * n))]
 * (DualStats._q); 0 for n == 0. Pure. */
uint32_t lobby_dual_pick(const uint32_t *sorted, size_t n, double f);

/* Sets up l->dual when the session is sealed and the io dir's file does
 * not switch it off (said in the log either way). host: the host's side
 * (it dials without listening; it takes hellos from lobby_bulk). 0 or
 * -errno; no link is no error. */
int lobby_dual_start(struct lobby *l, bool host);
/* Closes every link, logs the totals. NULL is a no-op. */
void lobby_dual_free(struct lobby_dual *d);
/* At exit, after the loop stopped: runs it again until every up link has
 * written what it holds (the last words: a host's bye, a joiner's leave,
 * whose UDP copy a full socket may have dropped), at most timeout_ms. */
void lobby_dual_drain(struct lobby *l, long timeout_ms);

/* A role's hooks. A peer is up (host: it joined, or was renamed; joiner:
 * the host's welcome): the link to it is dialled the first time. Our hello
 * says my_name. Call it while the peer's join (or welcome) is being
 * handled: the sealer salt of that frame is the peer's. */
void lobby_dual_peer_up(struct lobby *l, const struct addr *peer, const char *peer_name,
			const char *my_name);
/* The peer left or was dropped: its link closes, nothing is redialled. */
void lobby_dual_peer_gone(struct lobby *l, const struct addr *peer);
/* True when a link to peer is up. */
bool lobby_dual_linked(const struct lobby *l, const struct addr *peer);

/* lobby_net's hooks. A datagram just sent to `to`: an E frame is copied to
 * to's link, if it has one. */
void lobby_dual_copy(struct lobby *l, const struct addr *to, const uint8_t *dgram, size_t len);
/* An E frame from `from` whose tag checked out (opened, or refused as a
 * replay): nonce is its first 8 bytes; via_link when the link brought it. */
void lobby_dual_arrival(struct lobby *l, const struct addr *from, const uint8_t *nonce,
			bool via_link);

/* lobby_bulk's hook: a connection whose first line (buf, len bytes read:
 * the line and what followed it) is a TPF2LINK1 hello. Takes fd and
 * returns 0 (it may close it at once), or -ENOTCONN when there is no link
 * in this session (fd stays the caller's). */
int lobby_dual_take(struct lobby *l, int fd, const struct addr *from, const uint8_t *buf,
		    size_t len);

struct lobby_dual_stats {
	uint64_t links_up, refused, too_many, dials, frames_out, frames_in, queue_drops, too_big;
	uint64_t links_open; /* up now */
};
void lobby_dual_stats(const struct lobby_dual *d, struct lobby_dual_stats *out);

#endif
