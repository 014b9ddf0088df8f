#include "relay_tundgram.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "addr.h"

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--) {
		p[i] = (uint8_t)v;
		v >>= 8;
	}
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static void nonce_of(uint8_t nonce[static 12], uint64_t ctr)
{
	memset(nonce, 0, 4);
	put64(nonce + 4, ctr);
}

int tundgram_seal(uint8_t *out, size_t size, const struct tundgram_hdr *h,
		  const uint8_t key[static TUNDGRAM_KEY], const uint8_t *payload, size_t n)
{
	uint8_t nonce[12];
	unsigned long long clen = 0;

	if (n > TUNDGRAM_PAYLOAD || size < n + TUNDGRAM_OVER)
		return -EMSGSIZE;
	out[0] = (uint8_t)h->type;
	put64(out + 1, h->udp_id);
	out[9] = (uint8_t)(h->sid >> 24);
	out[10] = (uint8_t)(h->sid >> 16);
	out[11] = (uint8_t)(h->sid >> 8);
	out[12] = (uint8_t)h->sid;
	put64(out + 13, h->ctr);
	nonce_of(nonce, h->ctr);
	crypto_aead_chacha20poly1305_ietf_encrypt(out + TUNDGRAM_HDR, &clen, payload, n, out,
						  TUNDGRAM_HDR, NULL, nonce, key);
	return (int)(TUNDGRAM_HDR + clen);
}

int tundgram_peek(const uint8_t *in, size_t n, struct tundgram_hdr *h)
{
	if (n < TUNDGRAM_OVER || n > TUNDGRAM_PAYLOAD + TUNDGRAM_OVER)
		return -EBADMSG;
	if (in[0] < TUNDGRAM_DATA || in[0] > TUNDGRAM_DATA_PEER)
		return -EBADMSG;
	h->type = (enum tundgram_type)in[0];
	h->udp_id = get64(in + 1);
	h->sid = (uint32_t)in[9] << 24 | (uint32_t)in[10] << 16 | (uint32_t)in[11] << 8 |
		 (uint32_t)in[12];
	h->ctr = get64(in + 13);
	return 0;
}

/* 0 fresh, -EALREADY seen or too old; does not move the window. */
static int window_check(const struct tundgram_window *w, uint64_t ctr)
{
	if (ctr > w->top)
		return 0;
	if (w->top - ctr >= 64)
		return -EALREADY;
	return (w->bits >> (w->top - ctr)) & 1 ? -EALREADY : 0;
}

static void window_mark(struct tundgram_window *w, uint64_t ctr)
{
	if (ctr > w->top) {
		uint64_t shift = ctr - w->top;

		w->bits = shift >= 64 ? 0 : w->bits << shift;
		w->top = ctr;
	}
	w->bits |= 1ULL << (w->top - ctr);
}

int tundgram_open(const uint8_t *in, size_t n, const uint8_t key[static TUNDGRAM_KEY],
		  struct tundgram_window *w, uint8_t *out, size_t size)
{
	struct tundgram_hdr h;
	uint8_t nonce[12];
	unsigned long long mlen = 0;

	if (tundgram_peek(in, n, &h) < 0 || size < n - TUNDGRAM_OVER)
		return -EBADMSG;
	/* Counter 0 is never sent: the window starts there. */
	if (h.ctr == 0 || window_check(w, h.ctr) < 0)
		return h.ctr == 0 ? -EBADMSG : -EALREADY;
	nonce_of(nonce, h.ctr);
	if (crypto_aead_chacha20poly1305_ietf_decrypt(out, &mlen, NULL, in + TUNDGRAM_HDR,
						      n - TUNDGRAM_HDR, in, TUNDGRAM_HDR, nonce,
						      key) != 0)
		return -EBADMSG;
	window_mark(w, h.ctr);
	return (int)mlen;
}

unsigned tundgram_send_batch(int fd, struct mmsghdr *msgs, unsigned n)
{
	unsigned done = 0;

	while (done < n) {
		int r = sendmmsg(fd, msgs + done, n - done, MSG_DONTWAIT);

		if (r <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			break; /* a full buffer, ECONNREFUSED... */
		}
		done += (unsigned)r;
	}
	return done;
}

int tundgram_peer_encode(uint8_t out[static TUNDGRAM_PEER_MAX], const struct addr *a)
{
	uint16_t port = addr_port(a);
	size_t alen;

	if (addr_family(a) == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)&a->ss;

		out[0] = 4;
		memcpy(out + 1, &in->sin_addr, 4);
		alen = 4;
	} else if (addr_family(a) == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)&a->ss;

		out[0] = 6;
		memcpy(out + 1, &in6->sin6_addr, 16);
		alen = 16;
	} else {
		return -EAFNOSUPPORT;
	}
	out[1 + alen] = (uint8_t)(port >> 8);
	out[2 + alen] = (uint8_t)port;
	return (int)(alen + 3);
}

int tundgram_peer_decode(const uint8_t *in, size_t n, struct addr *a)
{
	size_t alen;
	uint16_t port;

	if (n < 1)
		return -EBADMSG;
	if (in[0] == 4)
		alen = 4;
	else if (in[0] == 6)
		alen = 16;
	else
		return -EBADMSG;
	if (n - 1 < alen + 2)
		return -EBADMSG;
	port = (uint16_t)(in[1 + alen] << 8 | in[2 + alen]);
	if (port == 0)
		return -EBADMSG;
	memset(a, 0, sizeof(*a));
	if (alen == 4) {
		struct sockaddr_in *in4 = (struct sockaddr_in *)(void *)&a->ss;

		in4->sin_family = AF_INET;
		memcpy(&in4->sin_addr, in + 1, 4);
		in4->sin_port = htons(port);
		a->len = sizeof(*in4);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)&a->ss;

		in6->sin6_family = AF_INET6;
		memcpy(&in6->sin6_addr, in + 1, 16);
		in6->sin6_port = htons(port);
		a->len = sizeof(*in6);
	}
	return (int)(alen + 3);
}
