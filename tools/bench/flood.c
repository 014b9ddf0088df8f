/*
 * bench-flood: a spoofed-source UDP flood on loopback.
 *
 * Every datagram leaves one socket with its own source address, chosen with
 * an IP_PKTINFO control message (ipi_spec_dst) per message of a sendmmsg
 * batch: Linux accepts any local address there, and all of 127.0.0.0/8 is
 * local. Sources are --base + i * --stride for i in 0 .. --sources - 1
 * (default 1,048,576 consecutive ones from 127.16.0.0, i.e. 127.16.0.0 -
 * 127.31.255.255; --stride 256 puts each in a /24 of its own), each sending --repeat
 * datagrams in a row before the next takes over, cycling until
 * --duration-ms is over.
 *
 * What is sent (--mix): "query" = \xff\xff\xff\xffgetstatus\n, "game" = an
 * in-game-looking datagram of --size bytes (4-byte sequence, no out-of-band
 * prefix), "both" = alternating, starting with a query for each source.
 *
 * The socket is bound to 0.0.0.0 (port from --port, default any) so that
 * answers sent to the spoofed sources come back to it; they are counted.
 * Only --target is ever sent to, and --target must be in 127.0.0.0/8.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

static const char usage[] =
	"usage: bench-flood --target 127.X.Y.Z:PORT [options]\n"
	"  --sources N        distinct source IPs (default 1048576)\n"
	"  --base IP          first source IP, in 127.0.0.0/8 (default 127.16.0.0)\n"
	"  --stride N         distance between two sources' IPs (default 1)\n"
	"  --repeat R         datagrams per source in a row (default 1)\n"
	"  --mix M            query | game | both (default both)\n"
	"  --size B           game datagram size (default 64)\n"
	"  --rate PPS         datagrams per second, 0 = as fast as possible (default 0)\n"
	"  --duration-ms MS   (default 5000)\n"
	"  --port P           source port (default: any)\n"
	"Prints: sent= send_errors= sources_used= answers= answer_bytes= elapsed_s= pps=\n";

static const char getstatus[] = "\xff\xff\xff\xffgetstatus\n";

enum mix { MIX_QUERY, MIX_GAME, MIX_BOTH };

struct ctl {
	_Alignas(struct cmsghdr) unsigned char buf[CMSG_SPACE(sizeof(struct in_pktinfo))];
};

static int die_arg(const char *what)
{
	fprintf(stderr, "bench-flood: bad %s\n%s", what, usage);
	return 2;
}

static bool is_loopback(const struct in_addr *a)
{
	return (ntohl(a->s_addr) >> 24) == 127;
}

/* Reads every answer waiting on fd; adds to the counters. */
static void drain(int fd, uint8_t (*bufs)[2048], uint64_t *answers, uint64_t *bytes)
{
	struct mmsghdr m[BENCH_BATCH];
	struct iovec iov[BENCH_BATCH];

	for (;;) {
		int n;

		memset(m, 0, sizeof(m));
		for (int i = 0; i < BENCH_BATCH; i++) {
			iov[i].iov_base = bufs[i];
			iov[i].iov_len = sizeof(bufs[i]);
			m[i].msg_hdr.msg_iov = &iov[i];
			m[i].msg_hdr.msg_iovlen = 1;
		}
		n = recvmmsg(fd, m, BENCH_BATCH, MSG_DONTWAIT, NULL);
		if (n <= 0)
			return;
		*answers += (uint64_t)n;
		for (int i = 0; i < n; i++)
			*bytes += m[i].msg_len;
	}
}

int main(int argc, char **argv)
{
	static uint8_t rxbufs[BENCH_BATCH][2048];
	static uint8_t game[BENCH_BATCH][BENCH_MAX_DGRAM];
	struct sockaddr_in target, local;
	struct in_addr base;
	uint64_t sources = 1u << 20, repeat = 1, size = 64, rate = 0, duration_ms = 5000, port = 0;
	uint64_t stride = 1;
	enum mix mix = MIX_BOTH;
	bool have_target = false;
	struct mmsghdr m[BENCH_BATCH];
	struct iovec iov[BENCH_BATCH];
	struct ctl ctl[BENCH_BATCH];
	unsigned char *pktinfo[BENCH_BATCH];
	uint64_t sent = 0, errors = 0, answers = 0, answer_bytes = 0, pkt = 0, max_src = 0;
	uint64_t t0, t_end, now;
	uint32_t base_h, seq = 1;
	int fd;

	inet_pton(AF_INET, "127.16.0.0", &base);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--help") == 0) {
			fputs(usage, stdout);
			return 0;
		}
		if (val == NULL)
			return die_arg(a);
		i++;
		if (strcmp(a, "--target") == 0) {
			if (bench_parse_addr(val, &target) < 0 || !is_loopback(&target.sin_addr))
				return die_arg(a);
			have_target = true;
		} else if (strcmp(a, "--sources") == 0) {
			if (bench_parse_u64(val, 1, 1u << 24, &sources) < 0)
				return die_arg(a);
		} else if (strcmp(a, "--base") == 0) {
			if (inet_pton(AF_INET, val, &base) != 1 || !is_loopback(&base))
				return die_arg(a);
		} else if (strcmp(a, "--stride") == 0) {
			if (bench_parse_u64(val, 1, 1u << 24, &stride) < 0)
				return die_arg(a);
		} else if (strcmp(a, "--repeat") == 0) {
			if (bench_parse_u64(val, 1, 1000000, &repeat) < 0)
				return die_arg(a);
		} else if (strcmp(a, "--mix") == 0) {
			if (strcmp(val, "query") == 0)
				mix = MIX_QUERY;
			else if (strcmp(val, "game") == 0)
				mix = MIX_GAME;
			else if (strcmp(val, "both") == 0)
				mix = MIX_BOTH;
			else
				return die_arg(a);
		} else if (strcmp(a, "--size") == 0) {
			if (bench_parse_u64(val, 8, BENCH_MAX_DGRAM, &size) < 0)
				return die_arg(a);
		} else if (strcmp(a, "--rate") == 0) {
			if (bench_parse_u64(val, 0, 100000000, &rate) < 0)
				return die_arg(a);
		} else if (strcmp(a, "--duration-ms") == 0) {
			if (bench_parse_u64(val, 1, 3600000, &duration_ms) < 0)
				return die_arg(a);
		} else if (strcmp(a, "--port") == 0) {
			if (bench_parse_u64(val, 0, 65535, &port) < 0)
				return die_arg(a);
		} else {
			return die_arg(a);
		}
	}
	if (!have_target)
		return die_arg("--target (missing)");
	base_h = ntohl(base.s_addr);
	/* Every source must stay inside 127.0.0.0/8. */
	if ((sources - 1) * stride > 0xffffffu ||
	    ((base_h + (sources - 1) * stride) >> 24) != 127 ||
	    base_h + (sources - 1) * stride < base_h)
		return die_arg("--base/--sources/--stride (leaves 127.0.0.0/8)");

	memset(&local, 0, sizeof(local));
	local.sin_family = AF_INET;
	local.sin_addr.s_addr = htonl(INADDR_ANY);
	local.sin_port = htons((uint16_t)port);
	fd = bench_udp_socket(&local, NULL, 8 << 20);
	if (fd < 0) {
		fprintf(stderr, "bench-flood: socket: %s\n", strerror(-fd));
		return 1;
	}

	memset(m, 0, sizeof(m));
	memset(ctl, 0, sizeof(ctl));
	for (int i = 0; i < BENCH_BATCH; i++) {
		struct cmsghdr *c;

		m[i].msg_hdr.msg_name = &target;
		m[i].msg_hdr.msg_namelen = sizeof(target);
		m[i].msg_hdr.msg_iov = &iov[i];
		m[i].msg_hdr.msg_iovlen = 1;
		m[i].msg_hdr.msg_control = ctl[i].buf;
		m[i].msg_hdr.msg_controllen = sizeof(ctl[i].buf);
		c = CMSG_FIRSTHDR(&m[i].msg_hdr);
		c->cmsg_level = IPPROTO_IP;
		c->cmsg_type = IP_PKTINFO;
		c->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
		pktinfo[i] = CMSG_DATA(c);
		for (size_t k = 4; k < size; k++)
			game[i][k] = (uint8_t)(k * 37u + 11u);
	}

	t0 = bench_now_ns();
	t_end = t0 + duration_ms * 1000000u;
	now = t0;
	while (now < t_end) {
		int done = 0;

		for (int i = 0; i < BENCH_BATCH; i++, pkt++) {
			uint64_t src = (pkt / repeat) % sources;
			uint64_t nth = pkt % repeat;
			bool query = mix == MIX_QUERY || (mix == MIX_BOTH && nth % 2 == 0);
			struct in_pktinfo pi;

			if (mix == MIX_BOTH && repeat == 1)
				query = src % 2 == 0;
			if (src > max_src)
				max_src = src;
			memset(&pi, 0, sizeof(pi));
			pi.ipi_spec_dst.s_addr = htonl(base_h + (uint32_t)(src * stride));
			memcpy(pktinfo[i], &pi, sizeof(pi));
			if (query) {
				iov[i].iov_base = (void *)(uintptr_t)getstatus;
				iov[i].iov_len = sizeof(getstatus) - 1;
			} else {
				/* A game packet starts with a sequence number
				 * whose top bit is clear: never ff ff ff ff. */
				uint32_t s = seq++ & 0x7fffffffu;

				memcpy(game[i], &s, sizeof(s));
				iov[i].iov_base = game[i];
				iov[i].iov_len = size;
			}
		}
		while (done < BENCH_BATCH) {
			int n = sendmmsg(fd, m + done, (unsigned)(BENCH_BATCH - done), 0);

			if (n < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN) {
					drain(fd, rxbufs, &answers, &answer_bytes);
					continue;
				}
				errors++;
				done++;
				continue;
			}
			done += n;
			sent += (uint64_t)n;
		}
		drain(fd, rxbufs, &answers, &answer_bytes);
		now = bench_now_ns();
		if (rate > 0) {
			/* Sleep until the schedule catches up with what was sent. */
			uint64_t due = t0 + sent * 1000000000u / rate;

			if (due > now) {
				struct timespec ts = {.tv_sec = (time_t)((due - now) / 1000000000u),
						      .tv_nsec = (long)((due - now) % 1000000000u)};

				nanosleep(&ts, NULL);
				now = bench_now_ns();
			}
		}
	}
	/* Answers still on their way. */
	usleep(100000);
	drain(fd, rxbufs, &answers, &answer_bytes);
	printf("sent=%llu send_errors=%llu sources_used=%llu answers=%llu answer_bytes=%llu "
	       "elapsed_s=%.3f pps=%.0f\n",
	       (unsigned long long)sent, (unsigned long long)errors,
	       (unsigned long long)(pkt / repeat >= sources ? sources : max_src + 1),
	       (unsigned long long)answers, (unsigned long long)answer_bytes,
	       (double)(now - t0) / 1e9, (double)sent * 1e9 / (double)(now - t0));
	return 0;
}
