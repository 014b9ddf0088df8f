/*
 * The tunnel's messages, as coa-relay puts them on its WebSocket: JSON
 * objects tagged by "cmd" (snake_case), plus the handshake's three
 * untagged objects, plus rallypoint's own binary frames, negotiated with
 * an "x_rally" message a coa host ignores (its parser skips unknown
 * commands) and never sent to a host that did not answer it.
 *
 * Pure codec: decode fills a struct whose strings are copied into it and
 * whose data chunk is decoded into a caller buffer; encode appends to a
 * strbuf. Nothing here touches a socket.
 */
#ifndef RELAY_TUNMSG_H
#define RELAY_TUNMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct strbuf;

#define TUNMSG_ID_MAX    (64)  /* realm_id, player_id, token, nonce */
#define TUNMSG_SIG_HEX   (128) /* an Ed25519 signature in hex */
#define TUNMSG_TEXT_MAX  (256) /* error, relay_host */
#define TUNMSG_SIG_MAX   (128) /* hex of 64 bytes; base64 is shorter */
#define TUNMSG_CHUNK_MAX ((size_t)16 * 1024)
/* A data message of a full chunk: base64 plus the JSON around it. */
#define TUNMSG_JSON_MAX ((size_t)64 * 1024)
#define TUNMSG_CTRL_MAX ((size_t)4 * 1024) /* every other message */
/* The WebSocket message cap: a JSON data message, or a binary frame with a
 * game datagram of up to 64 KiB. */
#define TUNMSG_WS_MAX  (TUNMSG_JSON_MAX + 16)
#define TUNMSG_PROTO_V (1)

enum tunmsg_cmd {
	TUNMSG_UNKNOWN, /* a cmd we do not know: ignored, as coa does */
	TUNMSG_PING,
	TUNMSG_PONG,
	TUNMSG_ALLOCATE,
	TUNMSG_ALLOCATE_OK,
	TUNMSG_ALLOCATE_ERR,
	TUNMSG_CONNECT,
	TUNMSG_CONNECT_OK,
	TUNMSG_CONNECT_ERR,
	TUNMSG_DATA,
	TUNMSG_CLOSE,
	TUNMSG_RESET,
	TUNMSG_X_RALLY, /* rallypoint's extension offer/answer */
};

enum tunmsg_target { TUNMSG_AUTH, TUNMSG_WORLD };

struct tunmsg {
	enum tunmsg_cmd cmd;
	uint64_t request_id;
	uint32_t stream_id;
	enum tunmsg_target target;
	char player_id[TUNMSG_ID_MAX + 1];
	char expected_ip[TUNMSG_ID_MAX + 1]; /* "" when absent or null */
	char token[TUNMSG_ID_MAX + 1];
	char relay_host[TUNMSG_TEXT_MAX + 1];
	uint16_t auth_port, world_port;
	long long expires_at;
	char error[TUNMSG_TEXT_MAX + 1];
	const uint8_t *chunk; /* DATA: into the caller's buffer */
	size_t chunk_len;
	/* X_RALLY: the version and the features (bit flags) offered or
	 * taken; udp_port/udp_key for the datagram path. */
	unsigned x_version;
	unsigned x_features;
	uint16_t x_udp_port;
	uint64_t x_udp_id;
	char x_udp_key[TUNMSG_ID_MAX + 1];
	/* The agent's answer: the realm key's signature (hex) over
	 * tunmsg_udp_key_message, binding both X25519 keys to the tunnel. */
	char x_udp_sig[TUNMSG_SIG_HEX + 1];
	char x_data_token[TUNMSG_ID_MAX + 1];
};

/* X_RALLY features. */
enum {
	TUNMSG_X_BIN = 1U << 0, /* binary data frames with credits */
	TUNMSG_X_UDP = 1U << 1, /* game datagrams beside the tunnel */
	/* stream bytes on a second connection of raw frames (no WebSocket
	 * masking to undo): GET /relay/v1/data, Upgrade: rally-data-1 */
	TUNMSG_X_DATA = 1U << 2,
	/* the relay puts each session's player address in front of its
	 * datagrams (TUNDGRAM_DATA_PEER, TUNMSG_BIN_DGRAM_PEER): taken by an
	 * agent that carries a game server */
	TUNMSG_X_PEER = 1U << 3,
};

/*
 * Decodes one tunnel message. chunkbuf (chunksize bytes) receives a data
 * chunk. 0, -EBADMSG (not JSON, not an object, no/bad cmd, a field of the
 * wrong type or size, bad base64), -EMSGSIZE (chunk larger than chunksize).
 * An unknown cmd decodes as TUNMSG_UNKNOWN (0).
 */
int tunmsg_decode(const char *json, size_t len, struct tunmsg *m, uint8_t *chunkbuf,
		  size_t chunksize);
/* Appends m as JSON (DATA takes m->chunk). */
void tunmsg_encode(const struct tunmsg *m, struct strbuf *out);

/* The handshake. */
struct tunmsg_hello {
	char realm_id[TUNMSG_ID_MAX + 1];
	char signature[TUNMSG_SIG_MAX + 1];
};
int tunmsg_decode_hello(const char *json, size_t len, struct tunmsg_hello *h);
int tunmsg_decode_challenge(const char *json, size_t len, char nonce[static TUNMSG_ID_MAX + 1]);
/* 0 welcome, -EACCES refused (message copied), -EBADMSG. */
int tunmsg_decode_welcome(const char *json, size_t len, char *message, size_t size);
/* "coa-relay-host-v1\n1\n<realm_id>\n<nonce>" into buf; its length or
 * -ENOSPC. */
int tunmsg_signed_message(const char *realm_id, const char *nonce, char *buf, size_t size);
/* A 64-byte signature from 128 hex digits or standard base64; 0/-EINVAL. */
int tunmsg_parse_sig(const char *s, uint8_t sig[static 64]);
/* What the agent signs with the realm's key when it takes the datagram
 * path: "rally-udp-key-v1\n<realm_id>\n<nonce>\n<relay's udp_key>\n<its
 * udp_key>" (the keys in base64 as sent). The signed hello covers neither
 * X25519 key; this binds both to the realm and this tunnel's nonce, so
 * nobody between the two ends can swap them. Its length or -ENOSPC. */
int tunmsg_udp_key_message(const char *realm_id, const char *nonce, const char *relay_key,
			   const char *agent_key, char *buf, size_t size);

/*
 * Binary frames (after both sides took TUNMSG_X_BIN): [type u8]
 * [stream_id u32 BE] then DATA: the bytes; CREDIT: u32 BE bytes granted;
 * DGRAM: a game datagram of session stream_id, when UDP cannot get through.
 */
enum tunmsg_bin {
	TUNMSG_BIN_DATA = 1,
	TUNMSG_BIN_CREDIT = 2,
	TUNMSG_BIN_DGRAM = 3,
	TUNMSG_BIN_CLOSE = 4, /* on the data channel, in order with its data */
	TUNMSG_BIN_RESET = 5,
	/* DGRAM with the player's address in front (tundgram_peer_encode) */
	TUNMSG_BIN_DGRAM_PEER = 6,
};
#define TUNMSG_BIN_HDR (5)
/* Each side may send this many data bytes of a stream before the other
 * credited them back (it does so once they reached the local socket). */
#define TUNMSG_BIN_WINDOW ((uint32_t)512 * 1024)
/* Splits a binary frame; 0 or -EBADMSG. */
int tunmsg_bin_decode(const uint8_t *buf, size_t len, enum tunmsg_bin *type, uint32_t *stream_id,
		      const uint8_t **payload, size_t *payload_len);
void tunmsg_bin_header(uint8_t hdr[static TUNMSG_BIN_HDR], enum tunmsg_bin type,
		       uint32_t stream_id);

#endif
