/*
 * The netpunch seal (netpunch-wire.md §3; vectors: seal.json).
 *
 * key     = SHA256("tpf2mp-seal-v1|" || secret(12) || "|" || password)
 * enc_key = SHA256(key || "|enc"), mac_key = SHA256(key || "|mac")
 * sealed  = nonce(8) || ct || tag(16); nonce = salt(4) || u32be counter;
 *           ct = plaintext XOR SHA256(enc_key || nonce || u32be i) blocks;
 *           tag = HMAC-SHA256(mac_key, nonce || ct)[:16]
 * signed  = nonce(8) || plaintext || HMAC-SHA256(mac_key, "sign" || nonce
 *           || plaintext)[:16], with a second salt and counter.
 * Receiving checks the tag (constant time) first, then a replay window of
 * 1,024 frames per 4-byte salt (shared by open and unsign).
 *
 * OpenSSL provides SHA-256 and HMAC; libsodium the randomness and the
 * constant-time compare. A sealer's memory is bounded: at most
 * SEAL_MAX_SALTS replay windows, the least recently used one forgotten.
 */
#ifndef SEAL_H
#define SEAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SEAL_KEY_LEN    (32)
#define SEAL_SECRET_LEN (12)
#define SEAL_NONCE_LEN  (8)
#define SEAL_TAG_LEN    (16)
#define SEAL_OVERHEAD   (SEAL_NONCE_LEN + SEAL_TAG_LEN)
#define SEAL_MIN_FRAME  (24)
#define SEAL_WINDOW     (1024)
#define SEAL_MAX_SALTS  (512)

/* key = SHA256("tpf2mp-seal-v1|" || secret || "|" || password ("" if NULL)). */
void seal_derive_key(const uint8_t secret[static SEAL_SECRET_LEN], const char *password,
		     uint8_t key[static SEAL_KEY_LEN]);
/* The rendezvous (knock) key: SHA256(derive_key(secret, password) || "|rendezvous"). */
void seal_knock_key(const uint8_t secret[static SEAL_SECRET_LEN], const char *password,
		    uint8_t key[static SEAL_KEY_LEN]);
/* The rendezvous tag: the first 24 hex of SHA256("tpf2mp-rendezvous-v1|" ||
 * secret), lower case, into tag (25 bytes with the NUL). */
void seal_knock_tag(const uint8_t secret[static SEAL_SECRET_LEN], char tag[static 25]);

struct sealer;

/* A sealer for key (copied) with fresh random salts. NULL, errno set. */
struct sealer *seal_new(const uint8_t key[static SEAL_KEY_LEN]);
/* For tests: fixed salts and counters (the next frame uses ctr + 1). */
void seal_set_state(struct sealer *s, const uint8_t salt[4], uint32_t ctr,
		    const uint8_t bulk_salt[4], uint32_t bulk_ctr);
/* Wipes the keys. NULL is a no-op. */
void seal_free(struct sealer *s);

/* Seals pt into out (len + SEAL_OVERHEAD bytes; pt may sit at
 * out + SEAL_NONCE_LEN, no other overlap). Returns the length, -ENOSPC,
 * or -EMSGSIZE (beyond INT_MAX). */
int seal_seal(struct sealer *s, const uint8_t *pt, size_t len, uint8_t *out, size_t cap);
/*
 * Opens a sealed payload into out (len - SEAL_OVERHEAD bytes; out may be
 * in + SEAL_NONCE_LEN). Returns the plaintext length, or -EBADMSG (short,
 * bad tag) / -EALREADY (replayed, or too old for the window) / -ENOSPC
 * (checked first: the window is not touched).
 */
int seal_open(struct sealer *s, const uint8_t *in, size_t len, uint8_t *out, size_t cap);
/* Signs pt (clear, authenticated): nonce || pt || tag, with the bulk salt
 * and counter. pt may overlap out. Returns the length as seal_seal. */
int seal_sign(struct sealer *s, const uint8_t *pt, size_t len, uint8_t *out, size_t cap);
/* Verifies a signed payload; on success *pt points into in. Returns the
 * plaintext length or a negative error as seal_open. */
int seal_unsign(struct sealer *s, const uint8_t *in, size_t len, const uint8_t **pt);

#endif
