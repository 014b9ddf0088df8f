#include "addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static int parse_port(const char *s, uint16_t *port)
{
	unsigned long v = 0;

	if (*s == '\0')
		return -EINVAL;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		v = v * 10 + (unsigned long)(*s - '0');
		if (v > 65535)
			return -EINVAL;
	}
	*port = (uint16_t)v;
	return 0;
}

int addr_split_hostport(const char *s, char *host, size_t host_size, uint16_t *port)
{
	const char *colon, *hend;
	size_t hlen;

	if (s[0] == '[') {
		hend = strchr(s, ']');
		if (hend == NULL || hend[1] != ':')
			return -EINVAL;
		colon = hend + 1;
		s++;
	} else {
		colon = strrchr(s, ':');
		if (colon == NULL || memchr(s, ':', (size_t)(colon - s)) != NULL)
			return -EINVAL;
		hend = colon;
	}
	hlen = (size_t)(hend - s);
	if (hlen == 0)
		return -EINVAL;
	if (hlen >= host_size)
		return -ENAMETOOLONG;
	if (parse_port(colon + 1, port) < 0)
		return -EINVAL;
	memcpy(host, s, hlen);
	host[hlen] = '\0';
	return 0;
}

int addr_parse_ip(struct addr *a, const char *s)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)&a->ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&a->ss;

	memset(a, 0, sizeof(*a));
	if (inet_pton(AF_INET, s, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		a->len = sizeof(*sin);
		return 0;
	}
	if (inet_pton(AF_INET6, s, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		a->len = sizeof(*sin6);
		return 0;
	}
	return -EINVAL;
}

int addr_parse(struct addr *a, const char *s, int default_port)
{
	char host[INET6_ADDRSTRLEN];
	uint16_t port;

	if (addr_split_hostport(s, host, sizeof(host), &port) == 0) {
		if (addr_parse_ip(a, host) < 0)
			return -EINVAL;
		addr_set_port(a, port);
		return 0;
	}
	if (default_port < 0 || default_port > 65535)
		return -EINVAL;
	if (addr_parse_ip(a, s) < 0)
		return -EINVAL;
	addr_set_port(a, (uint16_t)default_port);
	return 0;
}

int addr_family(const struct addr *a)
{
	return a->ss.ss_family;
}

uint16_t addr_port(const struct addr *a)
{
	if (a->ss.ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
	if (a->ss.ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
	return 0;
}

void addr_set_port(struct addr *a, uint16_t port)
{
	if (a->ss.ss_family == AF_INET)
		((struct sockaddr_in *)&a->ss)->sin_port = htons(port);
	else if (a->ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&a->ss)->sin6_port = htons(port);
}

const char *addr_ip_str(const struct addr *a, char *buf, size_t size)
{
	const void *src;

	if (a->ss.ss_family == AF_INET)
		src = &((const struct sockaddr_in *)&a->ss)->sin_addr;
	else if (a->ss.ss_family == AF_INET6)
		src = &((const struct sockaddr_in6 *)&a->ss)->sin6_addr;
	else
		src = NULL;
	if (src == NULL || inet_ntop(a->ss.ss_family, src, buf, (socklen_t)size) == NULL)
		snprintf(buf, size, "?");
	return buf;
}

const char *addr_str(const struct addr *a, char *buf, size_t size)
{
	char ip[INET6_ADDRSTRLEN];

	addr_ip_str(a, ip, sizeof(ip));
	if (a->ss.ss_family == AF_INET6)
		snprintf(buf, size, "[%s]:%u", ip, addr_port(a));
	else
		snprintf(buf, size, "%s:%u", ip, addr_port(a));
	return buf;
}

void addr_to_ip(const struct addr *a, struct addr_ip *ip)
{
	if (a->ss.ss_family == AF_INET) {
		memcpy(ip->b, v4mapped, 12);
		memcpy(ip->b + 12, &((const struct sockaddr_in *)&a->ss)->sin_addr, 4);
	} else if (a->ss.ss_family == AF_INET6) {
		memcpy(ip->b, &((const struct sockaddr_in6 *)&a->ss)->sin6_addr, 16);
	} else {
		memset(ip->b, 0, 16);
	}
}

void addr_to_key(const struct addr *a, struct addr_key *key)
{
	struct addr_ip ip;
	uint16_t port = addr_port(a);

	addr_to_ip(a, &ip);
	memcpy(key->b, ip.b, 16);
	key->b[16] = (uint8_t)(port >> 8);
	key->b[17] = (uint8_t)port;
}

void addr_from_ip(struct addr *a, const struct addr_ip *ip, uint16_t port)
{
	memset(a, 0, sizeof(*a));
	if (memcmp(ip->b, v4mapped, 12) == 0) {
		struct sockaddr_in *sin = (struct sockaddr_in *)&a->ss;

		sin->sin_family = AF_INET;
		memcpy(&sin->sin_addr, ip->b + 12, 4);
		sin->sin_port = htons(port);
		a->len = sizeof(*sin);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&a->ss;

		sin6->sin6_family = AF_INET6;
		memcpy(&sin6->sin6_addr, ip->b, 16);
		sin6->sin6_port = htons(port);
		a->len = sizeof(*sin6);
	}
}

const char *addr_ip_fmt(const struct addr_ip *ip, char *buf, size_t size)
{
	struct addr a;

	addr_from_ip(&a, ip, 0);
	return addr_ip_str(&a, buf, size);
}

bool addr_is_v4(const struct addr *a)
{
	return a->ss.ss_family == AF_INET;
}

bool addr_equal(const struct addr *a, const struct addr *b)
{
	struct addr_key ka, kb;

	if (a->ss.ss_family != b->ss.ss_family)
		return false;
	addr_to_key(a, &ka);
	addr_to_key(b, &kb);
	return memcmp(ka.b, kb.b, sizeof(ka.b)) == 0;
}

bool addr_same_ip(const struct addr *a, const struct addr *b)
{
	struct addr_ip x, y;

	addr_to_ip(a, &x);
	addr_to_ip(b, &y);
	return memcmp(x.b, y.b, sizeof(x.b)) == 0;
}

bool addr_is_loopback(const struct addr *a)
{
	struct addr_ip ip;
	static const uint8_t v6lo[16] = {[15] = 1};

	addr_to_ip(a, &ip);
	if (memcmp(ip.b, v4mapped, 12) == 0)
		return ip.b[12] == 127;
	return memcmp(ip.b, v6lo, 16) == 0;
}

bool addr_is_global_v6(const struct addr *a)
{
	const uint8_t *b = ((const struct sockaddr_in6 *)&a->ss)->sin6_addr.s6_addr;
	static const uint8_t zero[12];

	if (a->ss.ss_family != AF_INET6)
		return false;
	/* ::/96 holds the unspecified, loopback and v4-compatible addresses,
	 * ::ffff:0:0/96 the v4-mapped ones (RFC 4291 2.5.5). */
	if (memcmp(b, zero, 12) == 0 || memcmp(b, v4mapped, 12) == 0)
		return false;
	/* ff00::/8 multicast, fc00::/7 ULA (RFC 4193), fe80::/10 link-local,
	 * fec0::/10 the deprecated site-local (RFC 3879). */
	if (b[0] == 0xff || (b[0] & 0xfe) == 0xfc || (b[0] == 0xfe && (b[1] & 0x80) == 0x80))
		return false;
	return true;
}

static int resolve(const char *host, uint16_t port, struct addr *out, int max, int *gai_err,
		   int flags)
{
	struct addrinfo hints = {.ai_socktype = SOCK_DGRAM, .ai_flags = flags};
	struct addrinfo *res, *ai;
	int n = 0, r;

	*gai_err = 0;
	r = getaddrinfo(host, NULL, &hints, &res);
	if (r != 0) {
		*gai_err = r;
		return -EHOSTUNREACH;
	}
	for (ai = res; ai != NULL && n < max; ai = ai->ai_next) {
		if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
		    ai->ai_addrlen > sizeof(out[n].ss))
			continue;
		memset(&out[n], 0, sizeof(out[n]));
		memcpy(&out[n].ss, ai->ai_addr, ai->ai_addrlen);
		out[n].len = ai->ai_addrlen;
		addr_set_port(&out[n], port);
		n++;
	}
	freeaddrinfo(res);
	if (n == 0) {
		*gai_err = EAI_NONAME;
		return -EHOSTUNREACH;
	}
	return n;
}

int addr_resolve(const char *host, uint16_t port, struct addr *out, int max, int *gai_err)
{
	return resolve(host, port, out, max, gai_err, AI_ADDRCONFIG);
}

int addr_resolve_all(const char *host, uint16_t port, struct addr *out, int max, int *gai_err)
{
	return resolve(host, port, out, max, gai_err, 0);
}

bool addr_unmap_v4(struct addr *a)
{
	const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&a->ss;
	struct sockaddr_in sin = {.sin_family = AF_INET};

	if (a->ss.ss_family != AF_INET6 || memcmp(sin6->sin6_addr.s6_addr, v4mapped, 12) != 0)
		return false;
	sin.sin_port = sin6->sin6_port;
	memcpy(&sin.sin_addr, sin6->sin6_addr.s6_addr + 12, 4);
	memset(&a->ss, 0, sizeof(a->ss));
	memcpy(&a->ss, &sin, sizeof(sin));
	a->len = sizeof(sin);
	return true;
}

void addr_map_v4(const struct addr *a, struct addr *out)
{
	const struct sockaddr_in *sin = (const struct sockaddr_in *)&a->ss;
	struct sockaddr_in6 sin6 = {.sin6_family = AF_INET6};

	if (a->ss.ss_family != AF_INET) {
		*out = *a;
		return;
	}
	memcpy(sin6.sin6_addr.s6_addr, v4mapped, 12);
	memcpy(sin6.sin6_addr.s6_addr + 12, &sin->sin_addr, 4);
	sin6.sin6_port = sin->sin_port;
	memset(out, 0, sizeof(*out));
	memcpy(&out->ss, &sin6, sizeof(sin6));
	out->len = sizeof(sin6);
}

int addr_udp_bind(struct addr *a)
{
	/* "[::]:p" means IPv6 only; bind 0.0.0.0 for IPv4. */
	return addr_udp_bind_v6only(a, true);
}

int addr_udp_bind_v6only(struct addr *a, bool v6only)
{
	int fd = socket(a->ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int e;

	if (fd < 0)
		return -errno;
	if (a->ss.ss_family == AF_INET6) {
		int on = v6only ? 1 : 0;

		if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on)) < 0)
			goto fail;
	}
	if (bind(fd, (const struct sockaddr *)&a->ss, a->len) < 0)
		goto fail;
	a->len = sizeof(a->ss);
	if (getsockname(fd, (struct sockaddr *)&a->ss, &a->len) < 0)
		goto fail;
	return fd;
fail:
	e = errno;
	close(fd);
	return -e;
}

int addr_udp_connect(const struct addr *to, struct addr *local)
{
	int fd = socket(to->ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int e;

	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)&to->ss, to->len) < 0)
		goto fail;
	if (local != NULL) {
		local->len = sizeof(local->ss);
		if (getsockname(fd, (struct sockaddr *)&local->ss, &local->len) < 0)
			goto fail;
	}
	return fd;
fail:
	e = errno;
	close(fd);
	return -e;
}

ssize_t addr_udp_recv(int fd, void *buf, size_t size, struct addr *from)
{
	ssize_t n;

	from->len = sizeof(from->ss);
	do {
		n = recvfrom(fd, buf, size, MSG_DONTWAIT | MSG_TRUNC, (struct sockaddr *)&from->ss,
			     &from->len);
	} while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n;
}

int addr_socket_buffers(int fd, int bytes)
{
	int got = 0;
	socklen_t len = sizeof(got);

	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
	if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &len) < 0)
		return 0;
	return got / 2;
}
