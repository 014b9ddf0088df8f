/*
 * bench-echo: a UDP echo server for the proxy benchmarks.
 *
 * Every datagram goes back, unchanged, to the address it came from: a batch
 * read with recvmmsg (blocking until at least one is there), the same batch
 * written back with sendmmsg. Prints "ready port=N" on stderr once bound and
 * runs until killed.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench.h"

static const char usage[] = "usage: bench-echo [--listen IP:PORT] [--bufsize BYTES]\n"
			    "  Echoes every UDP datagram back to its sender. Default 127.0.0.1:0,\n"
			    "  buffers of 16 MiB. Prints \"ready port=N\" on stderr once bound.\n";

int main(int argc, char **argv)
{
	static uint8_t bufs[BENCH_BATCH][BENCH_MAX_DGRAM];
	struct mmsghdr msgs[BENCH_BATCH];
	struct iovec iov[BENCH_BATCH];
	struct sockaddr_in from[BENCH_BATCH], bound;
	struct sockaddr_in listen_at;
	socklen_t blen = sizeof(bound);
	uint64_t bufsize = 16u << 20;
	int fd;

	bench_parse_addr("127.0.0.1:0", &listen_at);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) {
			if (bench_parse_addr(argv[++i], &listen_at) < 0) {
				fprintf(stderr, "bench-echo: --listen: expected IP:PORT\n");
				return 2;
			}
		} else if (strcmp(argv[i], "--bufsize") == 0 && i + 1 < argc) {
			if (bench_parse_u64(argv[++i], 0, 1u << 30, &bufsize) < 0) {
				fprintf(stderr, "bench-echo: --bufsize: 0..2^30\n");
				return 2;
			}
		} else {
			fputs(usage, strcmp(argv[i], "--help") == 0 ? stdout : stderr);
			return strcmp(argv[i], "--help") == 0 ? 0 : 2;
		}
	}
	fd = bench_udp_socket(&listen_at, NULL, (int)bufsize);
	if (fd < 0) {
		fprintf(stderr, "bench-echo: bind: %s\n", strerror(-fd));
		return 1;
	}
	if (getsockname(fd, (struct sockaddr *)&bound, &blen) < 0) {
		perror("bench-echo: getsockname");
		return 1;
	}
	fprintf(stderr, "ready port=%u\n", ntohs(bound.sin_port));

	memset(msgs, 0, sizeof(msgs));
	for (int i = 0; i < BENCH_BATCH; i++) {
		iov[i].iov_base = bufs[i];
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
		msgs[i].msg_hdr.msg_name = &from[i];
	}
	for (;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int n, sent = 0;

		for (int i = 0; i < BENCH_BATCH; i++) {
			iov[i].iov_len = BENCH_MAX_DGRAM;
			msgs[i].msg_hdr.msg_namelen = sizeof(from[i]);
		}
		n = recvmmsg(fd, msgs, BENCH_BATCH, MSG_DONTWAIT, NULL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR) {
				(void)poll(&pfd, 1, -1);
				continue;
			}
			perror("bench-echo: recvmmsg");
			return 1;
		}
		for (int i = 0; i < n; i++)
			iov[i].iov_len = msgs[i].msg_len;
		while (sent < n) {
			int k = sendmmsg(fd, msgs + sent, (unsigned)(n - sent), 0);

			if (k < 0) {
				if (errno == EINTR)
					continue;
				/* ECONNREFUSED, EAGAIN: skip the one that failed. */
				sent++;
				continue;
			}
			sent += k;
		}
	}
}
