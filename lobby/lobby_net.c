/*
 * The lobby's one UDP socket (netpunch-wire.md §1): punch frames, sealed
 * application payloads, fragments, and on the side STUN answers and relay
 * acks, all on the same port so every NAT mapping we open is the one peers
 * reach us on.
 *
 * Beside it, when the machine has IPv6, a v6-only socket on the same port
 * number (ours: netpunch's lobby runs on IPv4 alone). Sends pick the socket
 * by the destination's family, receives from both take the same path, so
 * everything above sees one lobby socket with IPv4 and IPv6 peers.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "frame.h"
#include "lobby.h"
#include "lobby_dual.h"
#include "lobby_netsim.h"
#include "log.h"
#include "seal.h"
#include "strbuf.h"
#include "stun.h"

#define RX_BATCH     (128)      /* datagrams per wakeup, as the reference drains */
#define RX_BYTES     (1u << 20) /* and bytes: a save's 60 KiB chunks must not starve the timers */
#define RX_MMSG      (32)       /* datagrams per recvmmsg */
#define FRAG_SENDERS (256)

struct lobby_net {
	struct lobby *l;
	int fd;
	struct ev_io *io;
	int fd6; /* the IPv6 socket, -1 without one */
	struct ev_io *io6;
	uint16_t port;
	struct lobby_netsim *netsim;
	void (*stun_cb)(struct lobby *l, const struct addr *from, const uint8_t *buf, size_t len);
	struct frag_reasm *reasm;
	uint32_t frag_id;
	struct lobby_net_stats st;
	uint8_t (*rx)[NP1_MAX + 1]; /* RX_MMSG receive buffers */
	struct mmsghdr rxm[RX_MMSG];
	struct iovec rxv[RX_MMSG];
	struct addr rxa[RX_MMSG];
	uint8_t plain[NP1_MAX + 1];
	uint8_t tx[NP1_MAX + 1];
	uint8_t sealed[NP1_MAX + 1];
	uint8_t game[NP1_GAME_MAX + 1]; /* 'g' + a bridge datagram */
	uint8_t frame[NP1_MAX + 1];     /* lobby_net_frame_build's datagram */
	uint8_t frag[FRAG_HDR + FRAG_DATA];
	bool via_link; /* the datagram being handled came over the dual link */
};

/*
 * The socket for a destination that is not plain IPv4: the IPv6 one (-1
 * when we have none), or for a v4-mapped address the IPv4 one, *to then
 * pointing at the plain IPv4 form in v4 (our IPv6 socket is v6-only).
 */
static int v6_socket(const struct lobby_net *n, const struct addr **to, struct addr *v4)
{
	struct addr_ip ip;

	addr_to_ip(*to, &ip);
	addr_from_ip(v4, &ip, addr_port(*to));
	if (!addr_is_v4(v4))
		return n->fd6;
	*to = v4;
	return n->fd;
}

int lobby_net_send_raw(struct lobby_net *n, const struct addr *to, const void *buf, size_t len)
{
	struct addr v4;
	int r = 0, fd = n->fd;

	n->st.tx++;
	/* IPv4 (every save chunk of a v4 session) costs one compare more. */
	if (to->ss.ss_family != AF_INET)
		fd = v6_socket(n, &to, &v4);
	if (fd < 0)
		r = -EAFNOSUPPORT;
	else if (n->netsim != NULL)
		r = lobby_netsim_send(n->netsim, to, buf, len);
	else if (sendto(fd, buf, len, 0, (const struct sockaddr *)&to->ss, to->len) < 0)
		r = -errno;
	/* A sealed frame goes down the peer's dual TCP link too, whatever
	 * became of the UDP copy. */
	lobby_dual_copy(n->l, to, buf, len);
	return r;
}

long long lobby_net_link_delay_ms(const struct lobby *l)
{
	struct lobby_netsim_cfg cfg;

	if (l->net == NULL || l->net->netsim == NULL)
		return 0;
	lobby_netsim_cfg_of(l->net->netsim, &cfg);
	return (long long)(cfg.delay_s * 1000.0 + 0.5);
}

void lobby_net_netsim_reload(struct lobby *l)
{
	if (l->net == NULL)
		return;
	lobby_netsim_free(l->net->netsim);
	l->net->netsim = NULL;
	lobby_net_netsim_start(l);
	if (l->net->netsim == NULL)
		log_info("netsim off");
}

void lobby_net_netsim_start(struct lobby *l)
{
	struct lobby_net *n = l->net;
	const char *dir = l->cfg.io_dir[0] != '\0' ? l->cfg.io_dir : ".";
	struct lobby_netsim_cfg cfg;
	char path[PATH_MAX + 32], text[4096];
	ssize_t got;
	int fd;

	if (n == NULL || n->netsim != NULL ||
	    snprintf(path, sizeof(path), "%s/%s", dir, LOBBY_NETSIM_FILE) >= (int)sizeof(path))
		return;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	got = read(fd, text, sizeof(text));
	close(fd);
	if (got <= 0 || lobby_netsim_parse(text, (size_t)got, &cfg) < 0 ||
	    !lobby_netsim_enabled(&cfg))
		return;
	n->netsim = lobby_netsim_new(l->loop, &cfg, n->fd, n->fd6);
	if (n->netsim == NULL)
		return;
	log_info("netsim loss=%.3f delay_ms=%.0f jitter_ms=%.0f", cfg.loss, cfg.delay_s * 1000.0,
		 cfg.jitter_s * 1000.0);
}

int lobby_net_send_ctl(struct lobby_net *n, const struct addr *to, uint8_t type,
		       const uint8_t *payload, size_t len)
{
	int r = np1_build(n->tx, sizeof(n->tx), type, payload, len);

	if (r < 0)
		return r;
	return lobby_net_send_raw(n, to, n->tx, (size_t)r);
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

int lobby_net_frame_build(struct lobby *l, const uint8_t *frame, size_t len)
{
	struct lobby_net *n = l->net;
	int g = np1_game_build(n->game, sizeof(n->game), frame, len), r;

	if (g < 0)
		return g;
	if (l->sealer == NULL)
		return np1_build(n->frame, sizeof(n->frame), NP1_DATA, n->game, (size_t)g);
	r = seal_seal(l->sealer, n->game, (size_t)g, n->sealed, sizeof(n->sealed));
	if (r < 0)
		return r;
	return np1_build(n->frame, sizeof(n->frame), NP1_EDATA, n->sealed, (size_t)r);
}

int lobby_net_frame_send(struct lobby *l, const struct addr *to, size_t dlen)
{
	return lobby_net_send_raw(l->net, to, l->net->frame, dlen);
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

static int send_msg(struct lobby *l, const struct addr *to, const struct lobby_msg *m, bool plain)
{
	struct strbuf b;
	int r;

	strbuf_init(&b, LOBBY_MSG_MAX);
	r = lobby_msg_encode(m, &b);
	if (r == 0 && plain)
		r = lobby_net_send_ctl(l->net, to, NP1_DATA, (const uint8_t *)b.p, b.len);
	else if (r == 0)
		r = lobby_net_send_app(l, to, (const uint8_t *)b.p, b.len);
	strbuf_release(&b);
	return r;
}

int lobby_net_send_msg(struct lobby *l, const struct addr *to, const struct lobby_msg *m)
{
	return send_msg(l, to, m, false);
}

int lobby_net_send_plain_msg(struct lobby *l, const struct addr *to, const struct lobby_msg *m)
{
	return send_msg(l, to, m, true);
}

/*
 * netpunch-wire.md §1.3: in a sealed session the only plain payloads worth
 * a look are save chunks and a reject whose bytes start with
 * {"t": "reject" (its decoded t must then be reject too, so
 * {"t": "reject", "t": "start"} does not pass).
 */
static bool plain_allowed(const uint8_t *p, size_t len)
{
	static const char reject[] = "{\"t\": \"reject\"";

	if (len >= 4 && memcmp(p, "NPF1", 4) == 0)
		return true;
	return len >= sizeof(reject) - 1 && memcmp(p, reject, sizeof(reject) - 1) == 0;
}

/* A whole application payload: typed, then to the role. */
static void dispatch(struct lobby_net *n, const struct addr *from, const uint8_t *p, size_t len,
		     bool sealed)
{
	struct lobby *l = n->l;
	const struct lobby_role *role = l->role;
	struct lobby_msg m;

	if (len == 0) {
		n->st.bad_msg++;
		return;
	}
	if (l->sealer != NULL && !sealed && !plain_allowed(p, len)) {
		n->st.plain_dropped++;
		return;
	}
	if (role->on_payload != NULL && !role->on_payload(l, from, sealed))
		return;
	switch (p[0]) {
	case '{':
		if (lobby_msg_decode(p, len, &m) < 0) {
			n->st.bad_msg++;
			return;
		}
		if (l->sealer != NULL && !sealed && m.type != LOBBY_MSG_REJECT)
			n->st.plain_dropped++;
		else if (role->on_msg != NULL)
			role->on_msg(l, from, &m, sealed);
		lobby_msg_release(&m);
		return;
	case 'g':
		/* Frames over 1,400 bytes are dropped, as netpunch does. */
		if (len - 1 > NP1_GAME_MAX) {
			n->st.bad_msg++;
			return;
		}
		if (role->on_game != NULL)
			role->on_game(l, from, p + 1, len - 1, sealed);
		return;
	case 'N':
		if (role->on_chunk != NULL)
			role->on_chunk(l, from, p, len, sealed);
		return;
	case 'r':
		if (role->on_envelope != NULL)
			role->on_envelope(l, from, p, len, sealed);
		return;
	default:
		/* Anything else is not netpunch's. */
		return;
	}
}

/* An application payload that arrived: fragments are put together first. */
static void deliver_app(struct lobby_net *n, const struct addr *from, const uint8_t *p, size_t len,
			bool sealed)
{
	uint8_t *msg;
	size_t mlen;
	int r;

	if (len > 0 && p[0] == 'F') {
		/* Nobody sends a plain fragment in a sealed session (a reject
		 * is short): no reassembly memory for strangers. */
		if (n->l->sealer != NULL && !sealed) {
			n->st.plain_dropped++;
			return;
		}
		/* A fragment says its sender is alive as a whole payload does:
		 * a 300 KB roster is 270 of them, and under load its last may
		 * come seconds after its first. */
		if (n->l->role->on_payload != NULL && !n->l->role->on_payload(n->l, from, sealed))
			return;
		r = frag_reasm_feed(n->reasm, from, p, len, ev_now(n->l->loop), &msg, &mlen);
		if (r == 1) {
			n->st.frag_msgs++;
			dispatch(n, from, msg, mlen, sealed);
			free(msg);
		}
		return;
	}
	dispatch(n, from, p, len, sealed);
}

void lobby_net_inject(struct lobby *l, const struct addr *from, const uint8_t *app, size_t len,
		      bool sealed)
{
	deliver_app(l->net, from, app, len, sealed);
}

/* A sealed or signed payload that did not check out: counted, reported. */
static void refuse(struct lobby_net *n, const struct addr *from, int r)
{
	if (r == -EALREADY)
		n->st.replayed++;
	else
		n->st.bad_seal++;
	if (n->l->role->on_bad_seal != NULL)
		n->l->role->on_bad_seal(n->l, from, r);
}

static void on_datagram(struct lobby_net *n, const struct addr *from, const uint8_t *buf,
			size_t len)
{
	struct lobby *l = n->l;
	const uint8_t *payload, *pt;
	uint8_t id[NP1_RELAY_ID_LEN];
	size_t plen;
	uint8_t type;
	int r;

	if (stun_is_message(buf, len)) {
		if (n->stun_cb != NULL)
			n->stun_cb(l, from, buf, len);
		return;
	}
	if (np1_trla_parse(buf, len, id) == 0) {
		lobby_rv_trla(l, from, id);
		return;
	}
	if (np1_parse(buf, len, &type, &payload, &plen) < 0) {
		n->st.bad_np1++;
		return;
	}
	if (l->role == NULL)
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
		/* Which path brought it first (the tag held: opened or replayed). */
		if (r >= 0 || r == -EALREADY)
			lobby_dual_arrival(l, from, payload, n->via_link);
		if (r < 0) {
			refuse(n, from, r);
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
			refuse(n, from, r);
			return;
		}
		deliver_app(n, from, pt, (size_t)r, true);
		return;
	default:
		if (l->role->on_ctl != NULL)
			l->role->on_ctl(l, from, type, payload, plen);
		return;
	}
}

/* The link's copy takes the datagram's path from the top; the seal's
 * replay window then drops whichever copy comes second. */
int lobby_net_inject_datagram(struct lobby *l, const struct addr *from, const uint8_t *buf,
			      size_t len)
{
	struct lobby_net *n = l->net;

	if (n == NULL || len > NP1_MAX)
		return -EMSGSIZE;
	n->via_link = true;
	on_datagram(n, from, buf, len);
	n->via_link = false;
	return 0;
}

static void on_read(struct ev_io *io, uint32_t events, void *arg)
{
	struct lobby_net *n = arg;

	(void)events;
	size_t bytes = 0;

	/* A save round brings datagrams by the thousand: a batch per call,
	 * a few per wakeup, so the feedback timers still run on time. */
	for (int done = 0; done < RX_BATCH && bytes < RX_BYTES;) {
		int got;

		for (int i = 0; i < RX_MMSG; i++) {
			n->rxv[i] = (struct iovec){n->rx[i], sizeof(n->rx[i])};
			n->rxm[i].msg_hdr = (struct msghdr){.msg_name = &n->rxa[i].ss,
							    .msg_namelen = sizeof(n->rxa[i].ss),
							    .msg_iov = &n->rxv[i],
							    .msg_iovlen = 1};
		}
		got = recvmmsg(ev_io_fd(io), n->rxm, RX_MMSG, MSG_DONTWAIT, NULL);
		if (got <= 0)
			break;
		for (int i = 0; i < got; i++) {
			size_t len = n->rxm[i].msg_len;

			if ((n->rxm[i].msg_hdr.msg_flags & MSG_TRUNC) || len > NP1_MAX)
				continue;
			n->rxa[i].len = n->rxm[i].msg_hdr.msg_namelen;
			n->st.rx++;
			bytes += len;
			on_datagram(n, &n->rxa[i], n->rx[i], len);
			/* A callback may have ended the lobby (a quit, a reject). */
			if (n->l->stopping)
				return;
		}
		done += got;
		if (got < RX_MMSG)
			break;
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

bool lobby_net_has_v6(const struct lobby_net *n)
{
	return n != NULL && n->fd6 >= 0;
}

/*
 * The IPv6 socket: v6-only, bound to [::] on the IPv4 socket's port
 * number, so a code's v6 candidate has the port of its IPv4 ones. Best
 * effort: a machine without IPv6 runs the lobby on IPv4 alone, as today.
 */
static void open_v6(struct lobby_net *n)
{
	struct lobby *l = n->l;
	struct addr a;
	int fd;

	addr_parse(&a, "[::]:0", -1);
	addr_set_port(&a, n->port);
	fd = addr_udp_bind(&a);
	if (fd < 0) {
		log_info("udp6-off port=%u reason=\"%s\"", n->port, strerror(-fd));
		return;
	}
	addr_socket_buffers(fd, LOBBY_NET_BUF_BYTES);
	n->io6 = ev_io_add(l->loop, fd, EPOLLIN, on_read, n);
	if (n->io6 == NULL) {
		log_info("udp6-off port=%u reason=\"%s\"", n->port, strerror(errno));
		close(fd);
		return;
	}
	n->fd6 = fd;
	log_info("udp6-bound addr=[::]:%u", n->port);
}

int lobby_net_new(struct lobby *l, uint16_t port)
{
	struct lobby_net *n = calloc(1, sizeof(*n));
	struct addr a;
	int r = -ENOMEM;

	if (n == NULL)
		return -ENOMEM;
	n->l = l;
	n->fd = -1;
	n->fd6 = -1;
	n->rx = malloc(RX_MMSG * sizeof(*n->rx));
	n->reasm = frag_reasm_new(FRAG_SENDERS);
	if (n->rx == NULL || n->reasm == NULL)
		goto fail;
	randombytes_buf(&n->frag_id, sizeof(n->frag_id));
	/* IPv4 first, as netpunch's one socket; IPv6 beside it (open_v6). */
	addr_parse(&a, "0.0.0.0:0", -1);
	addr_set_port(&a, port);
	r = addr_udp_bind(&a);
	if (r < 0)
		goto fail;
	n->fd = r;
	n->port = addr_port(&a);
	/* A save round bursts 256 chunks per peer per millisecond: 16 MiB each
	 * way, as netpunch asks (XFER_BUF_BYTES), best effort. */
	addr_socket_buffers(n->fd, LOBBY_NET_BUF_BYTES);
	n->io = ev_io_add(l->loop, n->fd, EPOLLIN, on_read, n);
	if (n->io == NULL) {
		r = -errno;
		goto fail;
	}
	if (!l->cfg.ipv6_off)
		open_v6(n);
	l->net = n;
	return 0;
fail:
	if (n->fd >= 0)
		close(n->fd);
	frag_reasm_free(n->reasm);
	free(n->rx);
	free(n);
	return r;
}

void lobby_net_free(struct lobby_net *n)
{
	if (n == NULL)
		return;
	lobby_netsim_free(n->netsim);
	ev_io_del(n->io, true);
	ev_io_del(n->io6, true);
	frag_reasm_free(n->reasm);
	free(n->rx);
	free(n);
}
