/*
 * Transparent mode: each session's socket toward the game server is bound
 * to its player's own address (IP_TRANSPARENT / IPV6_TRANSPARENT), so the
 * unmodified server, its bans, logs and stats see the real IP. The relay's
 * proxy uses it with --transparent (a servers file's `transparent = yes`),
 * and so does `rally-relay agent --transparent` at home.
 *
 * It needs CAP_NET_ADMIN (or CAP_NET_RAW) and policy routing that keeps
 * what the server sends from its port to those addresses on this host
 * (tools/relay-transparent-setup, docs/relay.md "The real player
 * address"). relay_transparent_check says at start which one is missing;
 * nothing ever falls back to the relay's own address in silence.
 */
#ifndef RELAY_TRANSPARENT_H
#define RELAY_TRANSPARENT_H

#include <stddef.h>
#include <stdint.h>

#include "addr.h"

struct relay;
struct relay_proxy;
struct strbuf;

/* What the sessions of one server (or one agent) did. */
struct relay_transparent_stats {
	uint64_t opened;      /* sockets bound to a player's address */
	uint64_t port_taken;  /* ... with another port: the player's was taken */
	uint64_t fail_family; /* a player of the other family: the relay's address */
	uint64_t fail_error;  /* the bind failed otherwise: no session */
	uint64_t active;      /* open now */
};

/*
 * Checks once, at start, that sessions toward server can take their
 * players' addresses: the capability (a test socket with IP_TRANSPARENT
 * bound to a documentation address, 192.0.2.1 or 2001:db8::1, nothing
 * sent) and the routing (the kernel, asked over rtnetlink, delivers on
 * this host what server sends from its port to such an address). Returns
 * 0, or -EPERM (no capability) / -EHOSTUNREACH (no routing) / -errno with
 * what is missing and how to fix it in why.
 */
int relay_transparent_check(const struct addr *server, char *why, size_t size);

/* --check-config: the same check for every transparent server of r, each
 * failure logged; 0 or the last -errno. */
int relay_transparent_check_servers(const struct relay *r);

/*
 * A non-blocking UDP socket connected to server from client's address:
 * its port, or an ephemeral port of that address when the port is taken
 * (the same player reaching two servers of this relay from one port).
 * local gets the bound address. Returns the fd, -EAFNOSUPPORT for a
 * client of the other family than server (no socket can carry it), or
 * -errno. st (may be NULL) counts the outcome.
 */
int relay_transparent_connect(const struct addr *server, const struct addr *client,
			      struct addr *local, struct relay_transparent_stats *st);

/* The proxy's counters, NULL when its server is not transparent
 * (relay_proxy.c). */
const struct relay_transparent_stats *relay_proxy_transparent(const struct relay_proxy *p);

/* Appends the rally_relay_transparent_* lines of every transparent server. */
void relay_transparent_metrics(const struct relay *r, struct strbuf *out);

#endif
