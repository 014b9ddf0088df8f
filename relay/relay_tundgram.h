/*
 * Game datagrams beside the tunnel: the UDP path between the relay and its
 * agent, keyed on the signed tunnel.
 *
 * Both ends exchange X25519 public keys in the x_rally messages (over the
 * WebSocket the agent's Ed25519 signature opened) and derive one key per
 * direction (libsodium crypto_kx). Each datagram is
 *     [type u8][udp_id u64][sid u32][ctr u64]  ChaCha20-Poly1305(payload)
 * with the 21-byte header as additional data and ctr, which never repeats
 * in a direction, as the nonce: forged, altered and replayed datagrams are
 * refused before anything looks at their payload. udp_id names the host's
 * tunnel (the relay chose it), sid the player's session (0: the relay's own
 * heartbeat probe).
 */
#ifndef RELAY_TUNDGRAM_H
#define RELAY_TUNDGRAM_H

#include <sodium.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TUNDGRAM_HDR     (21)
#define TUNDGRAM_TAG     (crypto_aead_chacha20poly1305_ietf_ABYTES)
#define TUNDGRAM_OVER    (TUNDGRAM_HDR + TUNDGRAM_TAG)
#define TUNDGRAM_KEY     (crypto_kx_SESSIONKEYBYTES)
#define TUNDGRAM_PAYLOAD (65535 - 8 - 20 - TUNDGRAM_OVER) /* what fits one IPv4 UDP datagram */

enum tundgram_type {
	TUNDGRAM_DATA = 1, /* a game datagram of session sid */
	TUNDGRAM_PING = 2, /* keepalive (keeps the agent's NAT mapping), payload empty */
	TUNDGRAM_PONG = 3, /* answer: the ping's ctr in 8 payload bytes */
	/* A game datagram of session sid with its player's address in front
	 * (tundgram_peer_encode), to an agent that took TUNMSG_X_PEER. */
	TUNDGRAM_DATA_PEER = 4,
};

struct tundgram_hdr {
	enum tundgram_type type;
	uint64_t udp_id;
	uint32_t sid;
	uint64_t ctr;
};

/* The receive side's replay window: the highest counter seen and the 64
 * below it. */
struct tundgram_window {
	uint64_t top;
	uint64_t bits;
};

/* Seals payload into out (size >= n + TUNDGRAM_OVER): its length, or
 * -EMSGSIZE. */
int tundgram_seal(uint8_t *out, size_t size, const struct tundgram_hdr *h,
		  const uint8_t key[static TUNDGRAM_KEY], const uint8_t *payload, size_t n);
/* Reads the header only (to find the key): 0 or -EBADMSG (short, unknown
 * type). */
int tundgram_peek(const uint8_t *in, size_t n, struct tundgram_hdr *h);
/* Opens a datagram whose header peeked fine into out (size >= n): the
 * payload length, -EBADMSG (forged or altered), or -EALREADY (replayed or
 * older than the window); the window moves only for a datagram that
 * opened. */
int tundgram_open(const uint8_t *in, size_t n, const uint8_t key[static TUNDGRAM_KEY],
		  struct tundgram_window *w, uint8_t *out, size_t size);

/*
 * The player's address in front of a DATA_PEER datagram (and of a
 * TUNMSG_BIN_DGRAM_PEER frame): [family u8: 4 or 6][address, 4 or 16
 * bytes][port u16 BE]. Only between our relay and our agent, which uses
 * it to give the session's socket at home the player's address
 * (--transparent) and to log it.
 */
#define TUNDGRAM_PEER_MAX (1 + 16 + 2)
struct addr;
/* Writes a's prefix into out: its length, or -EAFNOSUPPORT. */
int tundgram_peer_encode(uint8_t out[static TUNDGRAM_PEER_MAX], const struct addr *a);
/* Reads the prefix at in (n bytes): the bytes it took (the game datagram
 * follows), or -EBADMSG (short, unknown family, port 0). */
int tundgram_peer_decode(const uint8_t *in, size_t n, struct addr *a);

/* Sends n prepared datagrams with sendmmsg until done or the socket is
 * full (the rest is lost, as UDP may): how many went. */
struct mmsghdr;
unsigned tundgram_send_batch(int fd, struct mmsghdr *msgs, unsigned n);

#endif
