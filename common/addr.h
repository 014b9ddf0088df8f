/*
 * Socket addresses: always the storage and its length together.
 */
#ifndef ADDR_H
#define ADDR_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

struct addr {
	struct sockaddr_storage ss;
	socklen_t len;
};

/* Longest text form: "[" v6 "]:" port, plus NUL. */
#define ADDR_STRLEN (INET6_ADDRSTRLEN + 9)

/* An IP in a fixed 16-byte form (IPv4 mapped into IPv6) for hashing and
 * comparing; the port is not part of it. */
struct addr_ip {
	uint8_t b[16];
};

/* A hash key for ip + port. */
struct addr_key {
	uint8_t b[18];
};

/*
 * Parses a numeric "IPv4:PORT", "[IPv6]:PORT" or, when default_port >= 0, a
 * bare IP. No DNS. Returns 0, or -EINVAL.
 */
int addr_parse(struct addr *a, const char *s, int default_port);
/* Parses a numeric IP without a port ("1.2.3.4", "::1"); 0 or -EINVAL. */
int addr_parse_ip(struct addr *a, const char *s);

/*
 * Splits "HOST:PORT" / "[HOST]:PORT" into host and port without resolving.
 * Returns 0, or -EINVAL for a missing/bad port, -ENAMETOOLONG for a host
 * longer than host_size - 1.
 */
int addr_split_hostport(const char *s, char *host, size_t host_size, uint16_t *port);

/* Writes "1.2.3.4:5" or "[::1]:5" into buf; returns buf. */
const char *addr_str(const struct addr *a, char *buf, size_t size);
/* Writes the IP alone ("1.2.3.4", "::1"); returns buf. */
const char *addr_ip_str(const struct addr *a, char *buf, size_t size);

uint16_t addr_port(const struct addr *a);
void addr_set_port(struct addr *a, uint16_t port);
int addr_family(const struct addr *a);

void addr_to_ip(const struct addr *a, struct addr_ip *ip);
void addr_to_key(const struct addr *a, struct addr_key *key);
/* Builds an address (v4 when the IP is v4-mapped) from ip + port. */
void addr_from_ip(struct addr *a, const struct addr_ip *ip, uint16_t port);
/* Formats an addr_ip as text. */
const char *addr_ip_fmt(const struct addr_ip *ip, char *buf, size_t size);

bool addr_equal(const struct addr *a, const struct addr *b);
/* The same IP, ports aside (a v4 address and its v4-mapped form match). */
bool addr_same_ip(const struct addr *a, const struct addr *b);
bool addr_is_v4(const struct addr *a);
/* True for 127.0.0.0/8, ::1 and v4-mapped loopback. */
bool addr_is_loopback(const struct addr *a);
/*
 * True for an IPv6 address peers elsewhere on the internet may reach: not
 * unspecified, loopback, v4-mapped or v4-compatible, link-local
 * (fe80::/10), site-local (fec0::/10), unique local (fc00::/7) or
 * multicast. The documentation prefix 2001:db8::/32 counts as global (the
 * lab's). False for IPv4.
 */
bool addr_is_global_v6(const struct addr *a);

/*
 * Blocking DNS: resolves host:port (numeric or a name) for UDP and fills up
 * to max addresses. Run it on the worker thread, never on the loop.
 * Returns the count (>= 1), or -EHOSTUNREACH with *gai_err set.
 */
int addr_resolve(const char *host, uint16_t port, struct addr *out, int max, int *gai_err);

/* Opens a non-blocking UDP socket bound to a (port 0 = ephemeral) and reads
 * the bound address back into a. Returns the fd or -errno. */
int addr_udp_bind(struct addr *a);
/*
 * The same, with IPV6_V6ONLY chosen for an IPv6 a: off makes "[::]:p" a
 * dual-stack socket where IPv4 peers appear v4-mapped (::ffff:a.b.c.d);
 * addr_udp_bind is this with v6only on. Ignored for IPv4.
 */
int addr_udp_bind_v6only(struct addr *a, bool v6only);

/* A v4-mapped IPv6 address (::ffff:a.b.c.d, as a dual-stack socket reports
 * IPv4 peers) becomes the plain IPv4 one, port kept; true if it was one. */
bool addr_unmap_v4(struct addr *a);
/* An IPv4 address as its v4-mapped IPv6 form (for sending from a dual-stack
 * socket); any other address is copied as it is. */
void addr_map_v4(const struct addr *a, struct addr *out);

/*
 * addr_resolve without AI_ADDRCONFIG: every A and AAAA record, whatever
 * addresses this host has (the caller knows which families its sockets can
 * send). Blocking: the worker thread only.
 */
int addr_resolve_all(const char *host, uint16_t port, struct addr *out, int max, int *gai_err);

/*
 * Opens a non-blocking UDP socket connected to `to` (so only its datagrams
 * arrive and an ICMP unreachable shows as ECONNREFUSED on the next call);
 * when local is not NULL, the kernel's choice of local address and port is
 * read back into it. Returns the fd or -errno.
 */
int addr_udp_connect(const struct addr *to, struct addr *local);

/*
 * One datagram from a non-blocking UDP socket into buf, its source in from.
 * Returns its real length (more than size when it was cut: MSG_TRUNC, the
 * caller drops it), or -errno (-EAGAIN: nothing there).
 */
ssize_t addr_udp_recv(int fd, void *buf, size_t size, struct addr *from);

/*
 * Asks for bytes of receive and send buffer on a socket, past the sysctl
 * caps when we may (SO_RCVBUFFORCE needs CAP_NET_ADMIN), else as far as
 * they allow. Returns the receive buffer granted, in bytes of payload (the
 * kernel reports twice what it grants, socket(7)).
 */
int addr_socket_buffers(int fd, int bytes);

#endif
