/*
 * q3-bench: the client side of the getservers benchmark.
 *
 *   q3-bench register MASTER_IP:PORT COUNT
 *       lists COUNT Quake 3 servers (protocol 71, 3/8 players), each from its
 *       own loopback address 127.20.x.y: heartbeat, then the infoResponse
 *       echoing the master's getinfo challenge. Prints "registered N".
 *   q3-bench rate MASTER_IP:PORT SECONDS WINDOW REQUEST
 *       keeps WINDOW requests ("getservers 71 ...") in flight for SECONDS
 *       and prints "answers N rate R/s datagrams D".
 *
 * One socket for every address: the source of each datagram is set with
 * IP_PKTINFO (all of 127.0.0.0/8 is local), and answers come back to the
 * same socket. Requests cycle through 40,000 source addresses, more than
 * the master's throttle remembers (16,384), so none is throttled, for the
 * master under test and its base alike.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define OOB      "\xff\xff\xff\xff"
#define MAX_PKT  (2048)
#define RATE_IPS (40000)

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int parse_addr(const char *s, struct sockaddr_in *sa)
{
	char ip[64];
	const char *colon = strrchr(s, ':');
	size_t n;

	if (colon == NULL || (n = (size_t)(colon - s)) >= sizeof(ip))
		return -EINVAL;
	memcpy(ip, s, n);
	ip[n] = '\0';
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)atoi(colon + 1));
	return inet_pton(AF_INET, ip, &sa->sin_addr) == 1 ? 0 : -EINVAL;
}

static int open_socket(void)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), on = 1, big = 16 << 20;
	struct sockaddr_in any = {.sin_family = AF_INET};

	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &on, sizeof(on));
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	if (bind(fd, (struct sockaddr *)&any, sizeof(any)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Sends buf to dst from the local address src. */
static void send_from(int fd, struct in_addr src, const struct sockaddr_in *dst, const void *buf,
		      size_t len)
{
	char cbuf[CMSG_SPACE(sizeof(struct in_pktinfo))];
	struct iovec iov = {.iov_base = (void *)(uintptr_t)buf, .iov_len = len};
	struct msghdr mh = {
		.msg_name = (void *)(uintptr_t)dst,
		.msg_namelen = sizeof(*dst),
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = cbuf,
		.msg_controllen = sizeof(cbuf),
	};
	struct cmsghdr *c;
	struct in_pktinfo pi;

	memset(cbuf, 0, sizeof(cbuf));
	memset(&pi, 0, sizeof(pi));
	pi.ipi_spec_dst = src;
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = IPPROTO_IP;
	c->cmsg_type = IP_PKTINFO;
	c->cmsg_len = CMSG_LEN(sizeof(pi));
	memcpy(CMSG_DATA(c), &pi, sizeof(pi));
	while (sendmsg(fd, &mh, 0) < 0 && errno == ENOBUFS)
		usleep(100);
}

/* A datagram and the local address it was sent to; length or -1. */
static ssize_t recv_to(int fd, uint8_t *buf, size_t cap, struct in_addr *dst, int timeout_ms)
{
	char cbuf[CMSG_SPACE(sizeof(struct in_pktinfo))];
	struct iovec iov = {.iov_base = buf, .iov_len = cap};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf)};
	struct pollfd p = {.fd = fd, .events = POLLIN};
	ssize_t n;

	if (poll(&p, 1, timeout_ms) <= 0)
		return -1;
	n = recvmsg(fd, &mh, MSG_DONTWAIT);
	if (n < 0)
		return -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
			struct in_pktinfo pi;

			memcpy(&pi, CMSG_DATA(c), sizeof(pi));
			*dst = pi.ipi_addr;
		}
	}
	return n;
}

static struct in_addr ip_of(unsigned a, unsigned i)
{
	struct in_addr in;

	/* 127.a.x.y with y in 1..250 */
	in.s_addr = htonl((127U << 24) | (a << 16) | ((i / 250) << 8) | (1 + i % 250));
	return in;
}

/* The index of a 127.a.x.y address made by ip_of, or -1. */
static long index_of(struct in_addr in, unsigned a)
{
	uint32_t h = ntohl(in.s_addr);

	if ((h >> 24) != 127 || ((h >> 16) & 0xff) != a || (h & 0xff) < 1 || (h & 0xff) > 250)
		return -1;
	return (long)(((h >> 8) & 0xff) * 250 + (h & 0xff) - 1);
}

/*
 * Heartbeats in bursts of 64, answering challenges in between; a server
 * whose challenge did not come (a datagram lost under load) heartbeats
 * again in the next pass.
 */
static int do_register(const struct sockaddr_in *master, unsigned count)
{
	static const char hb[] = OOB "heartbeat QuakeArena-1\n";
	int fd = open_socket();
	unsigned answered = 0;
	uint8_t buf[MAX_PKT], *done = calloc(count, 1);

	if (fd < 0 || done == NULL) {
		perror("q3-bench");
		return 1;
	}
	for (int pass = 0; pass < 10 && answered < count; pass++) {
		unsigned i = 0;
		long long quiet;

		while (i < count) {
			struct in_addr dst = {0};
			ssize_t n;

			for (unsigned k = 0; k < 64 && i < count; i++) {
				if (!done[i]) {
					send_from(fd, ip_of(20, i), master, hb, sizeof(hb) - 1);
					k++;
				}
			}
			quiet = now_ms() + (i < count ? 2 : 500);
			while (now_ms() < quiet &&
			       (n = recv_to(fd, buf, sizeof(buf) - 1, &dst, 2)) >= 0) {
				char out[512];
				long idx = index_of(dst, 20);
				int m;

				if ((size_t)n < 12 || memcmp(buf, OOB "getinfo ", 12) != 0 ||
				    idx < 0 || (unsigned long)idx >= count)
					continue;
				buf[n] = '\0';
				m = snprintf(out, sizeof(out),
					     OOB "infoResponse\n\\challenge\\%s\\protocol\\71"
						 "\\sv_maxclients\\8\\clients\\3\\gametype\\0"
						 "\\hostname\\bench",
					     (const char *)buf + 12);
				send_from(fd, dst, master, out, (size_t)m);
				if (!done[idx]) {
					done[idx] = 1;
					answered++;
				}
			}
		}
	}
	close(fd);
	free(done);
	printf("registered %u\n", answered);
	return answered == count ? 0 : 1;
}

/*
 * The window is refilled per EOT; datagrams are read 64 at a time
 * (recvmmsg) so the client is not what limits the rate.
 */
static int do_rate(const struct sockaddr_in *master, double seconds, unsigned window,
		   const char *request)
{
	enum { RX = 64 };
	static uint8_t bufs[RX][MAX_PKT];
	struct mmsghdr msgs[RX];
	struct iovec iov[RX];
	char req[256];
	int fd = open_socket(), len;
	unsigned long long answers = 0, datagrams = 0, ip = 0;
	long long start, end, last_rx;

	if (fd < 0) {
		perror("socket");
		return 1;
	}
	len = snprintf(req, sizeof(req), OOB "%s", request);
	start = last_rx = now_ms();
	end = start + (long long)(seconds * 1000);
	for (unsigned k = 0; k < window; k++)
		send_from(fd, ip_of(21, (unsigned)(ip++ % RATE_IPS)), master, req, (size_t)len);
	while (now_ms() < end) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int n;

		for (unsigned i = 0; i < RX; i++) {
			iov[i].iov_base = bufs[i];
			iov[i].iov_len = MAX_PKT;
			memset(&msgs[i].msg_hdr, 0, sizeof(msgs[i].msg_hdr));
			msgs[i].msg_hdr.msg_iov = &iov[i];
			msgs[i].msg_hdr.msg_iovlen = 1;
		}
		n = recvmmsg(fd, msgs, RX, MSG_DONTWAIT, NULL);
		if (n <= 0) {
			if (poll(&p, 1, 20) > 0)
				continue;
			/* Lost datagrams: refill the window. */
			if (now_ms() - last_rx > 50) {
				for (unsigned k = 0; k < window; k++)
					send_from(fd, ip_of(21, (unsigned)(ip++ % RATE_IPS)),
						  master, req, (size_t)len);
				last_rx = now_ms();
			}
			continue;
		}
		last_rx = now_ms();
		for (int i = 0; i < n; i++) {
			size_t got = msgs[i].msg_len;

			datagrams++;
			if (got >= 7 && memcmp(bufs[i] + got - 7, "\\EOT\0\0\0", 7) == 0) {
				answers++;
				send_from(fd, ip_of(21, (unsigned)(ip++ % RATE_IPS)), master, req,
					  (size_t)len);
			}
		}
	}
	printf("answers %llu rate %.0f/s datagrams %llu\n", answers,
	       (double)answers * 1000.0 / (double)(now_ms() - start), datagrams);
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in master;

	if (argc >= 4 && strcmp(argv[1], "register") == 0 && parse_addr(argv[2], &master) == 0)
		return do_register(&master, (unsigned)atoi(argv[3]));
	if (argc >= 6 && strcmp(argv[1], "rate") == 0 && parse_addr(argv[2], &master) == 0)
		return do_rate(&master, atof(argv[3]), (unsigned)atoi(argv[4]), argv[5]);
	fprintf(stderr, "usage: q3-bench register MASTER_IP:PORT COUNT\n"
			"       q3-bench rate MASTER_IP:PORT SECONDS WINDOW REQUEST\n");
	return 2;
}
