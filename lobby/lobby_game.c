/*
 * The game bridge's side (netpunch-wire.md §8): a loopback socket the bridge
 * sends its lockstep frames to (--game-relay-port; 7773 for a host, the
 * first free of 7774-7805 for a joiner), and from which frames received
 * from peers are delivered to the bridge at 127.0.0.1:--game-local-port.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "frame.h"
#include "lobby.h"
#include "log.h"

struct lobby_game {
	struct lobby *l;
	int fd;
	struct ev_io *io;
	uint16_t port;
	struct addr bridge;
	uint64_t oversize;
	uint8_t buf[65536];
};

static void on_read(struct ev_io *io, uint32_t events, void *arg)
{
	struct lobby_game *g = arg;

	(void)events;
	for (int i = 0; i < 64; i++) {
		struct addr from;
		ssize_t n;

		n = addr_udp_recv(ev_io_fd(io), g->buf, sizeof(g->buf), &from);
		if (n < 0)
			return;
		/* Frames over 1,400 bytes are dropped, as netpunch does. */
		if (n > NP1_GAME_MAX) {
			g->oversize++;
			continue;
		}
		/* Only the local bridge talks to this socket. */
		if (!addr_is_loopback(&from))
			continue;
		g->l->ctr.frames[LOBBY_DIR_FROM_GAME]++;
		g->l->ctr.frame_bytes[LOBBY_DIR_FROM_GAME] += (uint64_t)n;
		if (g->l->role->game_frame != NULL)
			g->l->role->game_frame(g->l, g->buf, (size_t)n);
	}
}

void lobby_game_deliver(struct lobby *l, const uint8_t *frame, size_t len)
{
	struct lobby_game *g = l->game;

	if (g == NULL || len > NP1_GAME_MAX)
		return;
	if (sendto(g->fd, frame, len, 0, (const struct sockaddr *)&g->bridge.ss, g->bridge.len) >=
	    0) {
		l->ctr.frames[LOBBY_DIR_TO_GAME]++;
		l->ctr.frame_bytes[LOBBY_DIR_TO_GAME] += len;
	}
}

uint16_t lobby_game_port(const struct lobby_game *g)
{
	return g->port;
}

static int bind_port(uint16_t port)
{
	struct addr a;

	addr_parse(&a, "127.0.0.1:0", -1);
	addr_set_port(&a, port);
	return addr_udp_bind(&a);
}

int lobby_game_new(struct lobby *l)
{
	struct lobby_game *g = calloc(1, sizeof(*g));
	int fd = -EADDRINUSE;

	if (g == NULL)
		return -ENOMEM;
	g->l = l;
	if (l->cfg.game_relay_set) {
		fd = bind_port(l->cfg.game_relay_port);
	} else if (l->cfg.mode == LOBBY_MODE_HOST) {
		fd = bind_port(7773);
	} else {
		/* A joiner takes the first free port of 7774-7805, so several
		 * instances can run on one machine. */
		for (uint16_t p = 7774; p <= 7805 && fd < 0; p++)
			fd = bind_port(p);
	}
	if (fd < 0) {
		free(g);
		return fd;
	}
	g->fd = fd;
	{
		struct addr a;

		a.len = sizeof(a.ss);
		getsockname(fd, (struct sockaddr *)&a.ss, &a.len);
		g->port = addr_port(&a);
	}
	addr_parse(&g->bridge, "127.0.0.1:0", -1);
	addr_set_port(&g->bridge, l->cfg.game_local_port);
	g->io = ev_io_add(l->loop, fd, EPOLLIN, on_read, g);
	if (g->io == NULL) {
		int e = -errno;

		close(fd);
		free(g);
		return e;
	}
	l->game = g;
	log_info("game-relay port=%u bridge=127.0.0.1:%u", g->port, l->cfg.game_local_port);
	return 0;
}

void lobby_game_free(struct lobby_game *g)
{
	if (g == NULL)
		return;
	ev_io_del(g->io, true);
	free(g);
}
