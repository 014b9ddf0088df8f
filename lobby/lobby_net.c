/*
 * The lobby's one UDP socket (netpunch-wire.md §1): punch frames, sealed
 * application payloads, fragments, and on the side STUN answers and relay
 * acks, all on the same port so every NAT mapping we open is the one peers
 * reach us on.
 */
#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "frame.h"
#include "lobby.h"
#include "log.h"
#include "seal.h"
#include "stun.h"

#define RX_BATCH     (128) /* datagrams per wakeup, as the reference drains */
#define FRAG_SENDERS (256)

struct lobby_net {
	struct lobby *l;
	int fd;
	struct ev_io *io;
	uint16_t port;
	struct lobby_net_handlers h;
	void (*stun_cb)(struct lobby *l, const struct addr *from, const uint8_t *buf, size_t len);
	struct frag_reasm *reasm;
	uint32_t frag_id;
	struct lobby_net_stats st;
	uint8_t rx[NP1_MAX + 1];
	uint8_t plain[NP1_MAX + 1];
	uint8_t tx[NP1_MAX + 1];
	uint8_t sealed[NP1_MAX + 1];
	uint8_t frag[FRAG_HDR + FRAG_DATA];
};

int lobby_net_send_raw(struct lobby_net *n, const struct addr *to, const void *buf, size_t len)
{
	if (sendto(n->fd, buf, len, 0, (const struct sockaddr *)&to->ss, to->len) < 0)
		return -errno;
	n->st.tx++;
	return 0;
}

int lobby_net_send_ctl(struct lobby_net *n, const struct addr *to, uint8_t type,
		       const uint8_t *payload, size_t len)
{
	int r = np1_build(n->tx, sizeof(n->tx), type, payload, len);

	if (r < 0)
		return r;
	return lobby_net_send_raw(n, to, n->tx, (size_t)r);
}

int lobby_net_send_plain(struct lobby_net *n, const struct addr *to, const uint8_t *app, size_t len)
{
	return lobby_net_send_ctl(n, to, NP1_DATA, app, len);
}

/* One application piece (a whole payload or a fragment): E or D. */
static int send_piece(struct lobby *l, const struct addr *to, const uint8_t *p, size_t len)
{
	struct lobby_net *n = l->net;
	int r;

	if (l->sealer == NULL)
		return lobby_net_send_ctl(n, to, NP1_DATA, p, len);
	r = seal_seal(l->sealer, p, len, n->sealed, sizeof(n->sealed));
	if (r < 0)
		return r;
	return lobby_net_send_ctl(n, to, NP1_EDATA, n->sealed, (size_t)r);
}

int lobby_net_send_app(struct lobby *l, const struct addr *to, const uint8_t *app, size_t len)
{
	struct lobby_net *n = l->net;
	unsigned count;
	uint32_t id;

	/* Control messages over 1,300 bytes travel as fragments; game frames
	 * (at most 1,401 bytes) never do. */
	if (len <= FRAG_DATA || app[0] != '{')
		return send_piece(l, to, app, len);
	count = frag_count(len);
	id = n->frag_id++;
	for (unsigned i = 0; i < count; i++) {
		int r = frag_build(n->frag, sizeof(n->frag), id, i, app, len);

		if (r < 0)
			return r;
		r = send_piece(l, to, n->frag, (size_t)r);
		if (r < 0)
			return r;
	}
	return 0;
}

/* An application payload that arrived: fragments are put together first. */
static void deliver_app(struct lobby_net *n, const struct addr *from, const uint8_t *p, size_t len,
			bool sealed)
{
	uint8_t *msg;
	size_t mlen;
	int r;

	if (len > 0 && p[0] == 'F') {
		r = frag_reasm_feed(n->reasm, from, p, len, ev_now(n->l->loop), &msg, &mlen);
		if (r == 1) {
			n->st.frag_msgs++;
			n->h.on_app(n->l, from, msg, mlen, sealed);
			free(msg);
		}
		return;
	}
	n->h.on_app(n->l, from, p, len, sealed);
}

static void on_datagram(struct lobby_net *n, const struct addr *from, const uint8_t *buf,
			size_t len)
{
	struct lobby *l = n->l;
	const uint8_t *payload, *pt;
	size_t plen;
	uint8_t type;
	int r;

	if (stun_is_message(buf, len)) {
		if (n->stun_cb != NULL)
			n->stun_cb(l, from, buf, len);
		return;
	}
	if (len == 20 && memcmp(buf, "TRLA", 4) == 0) {
		lobby_rv_trla(l, from, buf, len);
		return;
	}
	if (np1_parse(buf, len, &type, &payload, &plen) < 0) {
		n->st.bad_np1++;
		return;
	}
	if (n->h.on_app == NULL)
		return; /* observe only: nothing but STUN is for us */
	switch (type) {
	case NP1_DATA:
		deliver_app(n, from, payload, plen, false);
		return;
	case NP1_EDATA:
		if (l->sealer == NULL) {
			n->st.bad_seal++;
			return;
		}
		r = seal_open(l->sealer, payload, plen, n->plain, sizeof(n->plain));
		if (r < 0) {
			if (r == -EALREADY)
				n->st.replayed++;
			else
				n->st.bad_seal++;
			n->h.on_bad_seal(l, from, r);
			return;
		}
		deliver_app(n, from, n->plain, (size_t)r, true);
		return;
	case NP1_ADATA:
		if (l->sealer == NULL) {
			n->st.bad_seal++;
			return;
		}
		r = seal_unsign(l->sealer, payload, plen, &pt);
		if (r < 0) {
			if (r == -EALREADY)
				n->st.replayed++;
			else
				n->st.bad_seal++;
			n->h.on_bad_seal(l, from, r);
			return;
		}
		deliver_app(n, from, pt, (size_t)r, true);
		return;
	default:
		n->h.on_frame(l, from, type, payload, plen);
		return;
	}
}

static void on_read(struct ev_io *io, uint32_t events, void *arg)
{
	struct lobby_net *n = arg;

	(void)events;
	for (int i = 0; i < RX_BATCH; i++) {
		struct addr from;
		ssize_t r;

		from.len = sizeof(from.ss);
		r = recvfrom(ev_io_fd(io), n->rx, sizeof(n->rx), MSG_DONTWAIT | MSG_TRUNC,
			     (struct sockaddr *)&from.ss, &from.len);
		if (r < 0)
			return;
		if ((size_t)r > NP1_MAX)
			continue;
		n->st.rx++;
		on_datagram(n, &from, n->rx, (size_t)r);
	}
	frag_reasm_expire(n->reasm, ev_now(n->l->loop));
}

void lobby_net_set_stun_cb(struct lobby_net *n, void (*cb)(struct lobby *l, const struct addr *from,
							   const uint8_t *buf, size_t len))
{
	n->stun_cb = cb;
}

void lobby_net_stats(const struct lobby_net *n, struct lobby_net_stats *out)
{
	*out = n->st;
}

uint16_t lobby_net_port(const struct lobby_net *n)
{
	return n->port;
}

int lobby_net_new(struct lobby *l, uint16_t port, const struct lobby_net_handlers *h)
{
	struct lobby_net *n = calloc(1, sizeof(*n));
	struct addr a;
	int r;

	if (n == NULL)
		return -ENOMEM;
	n->l = l;
	n->h = *h;
	n->fd = -1;
	randombytes_buf(&n->frag_id, sizeof(n->frag_id));
	n->reasm = frag_reasm_new(FRAG_SENDERS);
	if (n->reasm == NULL) {
		free(n);
		return -ENOMEM;
	}
	/* IPv4 only, as netpunch: its races run without v6. */
	addr_parse(&a, "0.0.0.0:0", -1);
	addr_set_port(&a, port);
	r = addr_udp_bind(&a);
	if (r < 0) {
		frag_reasm_free(n->reasm);
		free(n);
		return r;
	}
	n->fd = r;
	n->port = addr_port(&a);
	n->io = ev_io_add(l->loop, n->fd, EPOLLIN, on_read, n);
	if (n->io == NULL) {
		r = -errno;
		close(n->fd);
		frag_reasm_free(n->reasm);
		free(n);
		return r;
	}
	l->net = n;
	return 0;
}

void lobby_net_free(struct lobby_net *n)
{
	if (n == NULL)
		return;
	ev_io_del(n->io, true);
	frag_reasm_free(n->reasm);
	free(n);
}
