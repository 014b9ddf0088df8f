/*
 * Transparent mode (see relay_transparent.h): the start-up check and the
 * sessions' sockets.
 *
 * Why policy routing: the server answers a player at 203.0.113.7, an
 * address that is not this host's. Without help the kernel routes that
 * answer out of the machine (or, for a server bound to 127.0.0.1, refuses
 * it with EINVAL: a loopback source may not leave through another
 * device). A rule that sends what the server's address and port emit to a
 * table whose one route is `local 0.0.0.0/0 dev lo` delivers it here, to
 * the transparent socket bound to 203.0.113.7 and connected to the server.
 * The rule matches the source address and port itself (`ip rule from ADDR
 * ipproto udp sport PORT`) rather than an nftables mark: marking in the
 * output hook comes after the first route lookup, which is the one that
 * fails for a loopback server (docs/relay.md shows the experiment).
 */
#include <errno.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "relay.h"
#include "relay_transparent.h"
#include "strbuf.h"

/* Addresses kept for documentation (RFC 5737, RFC 3849): nothing is ever
 * sent to them; they only stand for "some player's address". */
#define TEST_V4 "192.0.2.1:0"
#define TEST_V6 "[2001:db8::1]:0"

static int set_transparent(int fd, int family)
{
	int on = 1;

	if (family == AF_INET6)
		return setsockopt(fd, SOL_IPV6, IPV6_TRANSPARENT, &on, sizeof(on));
	return setsockopt(fd, SOL_IP, IP_TRANSPARENT, &on, sizeof(on));
}

static void nl_attr(uint8_t *buf, size_t *len, unsigned short type, const void *data, size_t n)
{
	struct rtattr *a = (struct rtattr *)(void *)(buf + *len);

	a->rta_type = type;
	a->rta_len = (unsigned short)RTA_LENGTH(n);
	memcpy(RTA_DATA(a), data, n);
	*len += RTA_SPACE(n);
}

/*
 * Asks the kernel which route it picks for a UDP datagram to dst, from src
 * (address and port; NULL: any source, plain `ip route get DST`), arriving
 * on interface iif (0: sent by this host), as `ip route get DST from SRC
 * [iif DEV] ipproto udp sport PORT` does. Returns the route's type
 * (RTN_LOCAL, RTN_UNICAST, ...) with its output interface in *oif when not
 * NULL, or -errno (EINVAL: the kernel refuses that source for this host's
 * own datagrams). *asked is false when no netlink socket could be opened.
 */
static int route_query(const struct addr *src, const struct addr *dst, int iif, int *oif,
		       bool *asked)
{
	uint8_t req[256] __attribute__((aligned(4))) = {0};
	uint8_t resp[4096] __attribute__((aligned(4)));
	struct nlmsghdr *nh = (struct nlmsghdr *)(void *)req;
	struct rtmsg *rt;
	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
	int family = addr_family(dst);
	size_t alen = family == AF_INET6 ? 16 : 4, len;
	uint8_t proto = IPPROTO_UDP;
	const void *da;
	ssize_t n;
	int fd, ret;

	if (family == AF_INET6)
		da = &((const struct sockaddr_in6 *)(const void *)&dst->ss)->sin6_addr;
	else
		da = &((const struct sockaddr_in *)(const void *)&dst->ss)->sin_addr;
	len = NLMSG_LENGTH(sizeof(struct rtmsg));
	nh->nlmsg_type = RTM_GETROUTE;
	nh->nlmsg_flags = NLM_F_REQUEST;
	nh->nlmsg_seq = 1;
	rt = NLMSG_DATA(nh);
	rt->rtm_family = (unsigned char)family;
	rt->rtm_dst_len = (unsigned char)(alen * 8);
	nl_attr(req, &len, RTA_DST, da, alen);
	if (src != NULL) {
		uint16_t sport = htons(addr_port(src));
		const void *sa =
			family == AF_INET6
				? (const void *)&(
					  (const struct sockaddr_in6 *)(const void *)&src->ss)
					  ->sin6_addr
				: (const void *)&(
					  (const struct sockaddr_in *)(const void *)&src->ss)
					  ->sin_addr;

		rt->rtm_src_len = (unsigned char)(alen * 8);
		nl_attr(req, &len, RTA_SRC, sa, alen);
		nl_attr(req, &len, RTA_IP_PROTO, &proto, sizeof(proto));
		nl_attr(req, &len, RTA_SPORT, &sport, sizeof(sport));
	}
	if (iif > 0)
		nl_attr(req, &len, RTA_IIF, &iif, sizeof(iif));
	nh->nlmsg_len = (unsigned)len;

	*asked = false;
	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0)
		return -errno;
	*asked = true;
	if (sendto(fd, req, len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
		ret = -errno;
		goto out;
	}
	/* One answer: the route, or an error. A blocking read of the kernel's
	 * answer, once at start. */
	do {
		n = recv(fd, resp, sizeof(resp), 0);
	} while (n < 0 && errno == EINTR);
	if (n < 0) {
		ret = -errno;
		goto out;
	}
	nh = (struct nlmsghdr *)(void *)resp;
	if ((size_t)n < sizeof(*nh) || !NLMSG_OK(nh, (unsigned)n)) {
		ret = -EPROTO;
	} else if (nh->nlmsg_type == NLMSG_ERROR) {
		const struct nlmsgerr *e = NLMSG_DATA(nh);

		ret = nh->nlmsg_len >= NLMSG_LENGTH(sizeof(*e)) && e->error < 0 ? e->error
										: -EPROTO;
	} else if (nh->nlmsg_type == RTM_NEWROUTE &&
		   nh->nlmsg_len >= NLMSG_LENGTH(sizeof(struct rtmsg))) {
		const struct rtmsg *r = NLMSG_DATA(nh);
		unsigned alen_left = nh->nlmsg_len - (unsigned)NLMSG_LENGTH(sizeof(*r));

		ret = r->rtm_type;
		for (const struct rtattr *a = RTM_RTA(r); RTA_OK(a, alen_left);
		     a = RTA_NEXT(a, alen_left)) {
			if (a->rta_type == RTA_OIF && oif != NULL && RTA_PAYLOAD(a) >= sizeof(int))
				memcpy(oif, RTA_DATA(a), sizeof(int));
		}
	} else {
		ret = -EPROTO;
	}
out:
	close(fd);
	return ret;
}

static const char *route_type_name(int t)
{
	switch (t) {
	case RTN_UNICAST:
		return "unicast (it would leave this host)";
	case RTN_LOCAL:
		return "local";
	case RTN_UNREACHABLE:
		return "unreachable";
	case RTN_BLACKHOLE:
		return "blackhole";
	case RTN_PROHIBIT:
		return "prohibit";
	default:
		return "other";
	}
}

int relay_transparent_check(const struct addr *server, char *why, size_t size)
{
	struct addr test, local;
	char sa[ADDR_STRLEN];
	int family = addr_family(server), fd, t, u, oif;
	bool asked;

	addr_str(server, sa, sizeof(sa));
	addr_parse(&test, family == AF_INET6 ? TEST_V6 : TEST_V4, -1);
	/* The capability: IP_TRANSPARENT asks for CAP_NET_ADMIN or
	 * CAP_NET_RAW, and the bind of an address this host does not have
	 * proves the option took. */
	fd = relay_transparent_connect(server, &test, &local, NULL);
	if (fd < 0) {
		snprintf(why, size,
			 "missing=capability error=\"%s\" hint=\"run as root or with "
			 "CAP_NET_ADMIN (systemd: AmbientCapabilities=CAP_NET_ADMIN)\"",
			 strerror(-fd));
		return fd == -EACCES ? -EPERM : fd;
	}
	close(fd);
	/* The routing: the server's answer to a player must stay here. A
	 * server on this host sends it; one reached through this host (a
	 * container, a LAN machine using it as gateway) sends it in through
	 * the interface that leads to it. */
	oif = 0;
	u = route_query(NULL, server, 0, &oif, &asked);
	if (u == RTN_LOCAL)
		t = route_query(server, &test, 0, NULL, &asked);
	else if (u == RTN_UNICAST && oif > 0)
		t = route_query(server, &test, oif, NULL, &asked);
	else
		t = u;
	if (!asked) {
		snprintf(why, size,
			 "missing=netlink error=\"%s\" hint=\"the routing check needs an "
			 "AF_NETLINK socket (systemd: RestrictAddressFamilies=AF_INET AF_INET6 "
			 "AF_UNIX AF_NETLINK)\"",
			 strerror(-t));
		return t;
	}
	if (t != RTN_LOCAL) {
		snprintf(why, size,
			 "missing=routing route=\"%s\" hint=\"run tools/relay-transparent-setup "
			 "up %s on this host%s\"",
			 t < 0 ? strerror(-t) : route_type_name(t), sa,
			 u == RTN_LOCAL ? ""
					: " (a server elsewhere must also route the players' "
					  "addresses through this host)");
		return -EHOSTUNREACH;
	}
	return 0;
}

int relay_transparent_check_servers(const struct relay *r)
{
	int ret = 0;

	for (size_t i = 0; i < r->nservers; i++) {
		const struct relay_server *srv = r->servers[i];
		char why[320], a[ADDR_STRLEN], sn[RELAY_NAME_MAX + 16];
		int e;

		if (!srv->cfg.transparent || srv->cfg.server_tunnel)
			continue;
		e = relay_transparent_check(&srv->server, why, sizeof(why));
		if (e < 0) {
			log_err("transparent-unavailable server=%s %s%s",
				addr_str(&srv->server, a, sizeof(a)), why,
				relay_server_logname(srv, sn, sizeof(sn)));
			ret = e;
		}
	}
	return ret;
}

/* Binds fd (transparent) to ip:port, or to ip and a port of the kernel's
 * choice when port is taken; 1 if it took another port, 0, or -errno. */
static int bind_player(int fd, const struct addr *client)
{
	struct addr a = *client;

	if (bind(fd, (const struct sockaddr *)&a.ss, a.len) == 0)
		return 0;
	if (errno != EADDRINUSE)
		return -errno;
	/* The same player (address and port) toward another of our servers
	 * has it; no SO_REUSEADDR on UDP: the server still sees the player's
	 * address, with another port. */
	addr_set_port(&a, 0);
	if (bind(fd, (const struct sockaddr *)&a.ss, a.len) == 0)
		return 1;
	return -errno;
}

int relay_transparent_connect(const struct addr *server, const struct addr *client,
			      struct addr *local, struct relay_transparent_stats *st)
{
	int family = addr_family(server), fd, b, e;

	if (addr_family(client) != family) {
		if (st != NULL)
			st->fail_family++;
		return -EAFNOSUPPORT;
	}
	fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		e = -errno;
		goto fail;
	}
	if (set_transparent(fd, family) < 0) {
		e = -errno;
		goto fail_fd;
	}
	b = bind_player(fd, client);
	if (b < 0) {
		e = b;
		goto fail_fd;
	}
	if (connect(fd, (const struct sockaddr *)&server->ss, server->len) < 0) {
		e = -errno;
		goto fail_fd;
	}
	local->len = sizeof(local->ss);
	if (getsockname(fd, (struct sockaddr *)&local->ss, &local->len) < 0) {
		e = -errno;
		goto fail_fd;
	}
	if (st != NULL) {
		st->opened++;
		st->active++;
		if (b == 1)
			st->port_taken++;
	}
	return fd;
fail_fd:
	close(fd);
fail:
	if (st != NULL)
		st->fail_error++;
	return e;
}

void relay_transparent_metrics(const struct relay *r, struct strbuf *out)
{
	static const struct {
		const char *name, *type, *help;
	} fam[] = {
		{"rally_relay_transparent_sessions", "gauge",
		 "Open sessions whose upstream socket carries the player's own address."},
		{"rally_relay_transparent_sessions_total", "counter",
		 "Sessions opened with the player's own address."},
		{"rally_relay_transparent_port_taken_total", "counter",
		 "Of those, with another port than the player's (it was taken)."},
		{"rally_relay_transparent_bind_fail_total", "counter",
		 "Sessions that could not take the player's address, by reason."},
	};
	bool any = false;

	for (size_t i = 0; i < r->nservers; i++)
		any = any || relay_proxy_transparent(r->servers[i]->proxy) != NULL;
	if (!any)
		return;
	for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
		strbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help,
			      fam[f].name, fam[f].type);
		for (size_t i = 0; i < r->nservers; i++) {
			const struct relay_transparent_stats *st =
				relay_proxy_transparent(r->servers[i]->proxy);
			char lb[RELAY_NAME_MAX + 64];

			if (st == NULL)
				continue;
			switch (f) {
			case 0:
			case 1:
			case 2:
				strbuf_printf(
					out, "%s%s %llu\n", fam[f].name,
					relay_server_labels(r->servers[i], NULL, lb, sizeof(lb)),
					(unsigned long long)(f == 0   ? st->active
							     : f == 1 ? st->opened
								      : st->port_taken));
				break;
			default:
				strbuf_printf(out, "%s%s %llu\n", fam[f].name,
					      relay_server_labels(r->servers[i],
								  "reason=\"family\"", lb,
								  sizeof(lb)),
					      (unsigned long long)st->fail_family);
				strbuf_printf(out, "%s%s %llu\n", fam[f].name,
					      relay_server_labels(r->servers[i], "reason=\"error\"",
								  lb, sizeof(lb)),
					      (unsigned long long)st->fail_error);
				break;
			}
		}
	}
}
