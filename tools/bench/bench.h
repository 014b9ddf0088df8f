/*
 * Helpers shared by the benchmark programs in tools/bench/ (built, never
 * installed): number and address parsing for their flags, the clock, UDP
 * sockets on 127.0.0.0/8, and the CPU time of a process from /proc.
 *
 * The benchmark datagram ("in-game-looking": no 0xffffffff out-of-band
 * prefix, so a Q3 relay classifies it as game traffic):
 *
 *   0      4      12     16     20           size
 *   | seq  | t_ns | cli  | gen  | filler ... |
 *
 * all little-endian; seq never has its top bit set, so the first four bytes
 * are never ff ff ff ff.
 */
#ifndef BENCH_H
#define BENCH_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define BENCH_HDR_LEN   (20)
#define BENCH_MAX_DGRAM (65507)
#define BENCH_BATCH     (64)

struct bench_hdr {
	uint32_t seq;
	uint64_t t_ns;
	uint32_t cli;
	uint32_t gen;
};

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);

/* A decimal in [min, max] with nothing after it: 0, or -EINVAL/-ERANGE. */
int bench_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* "A.B.C.D:PORT" (IPv4 only, no DNS): 0 or -EINVAL. */
int bench_parse_addr(const char *s, struct sockaddr_in *out);

/* "A.B.C.D:PORT" into buf. */
const char *bench_addr_str(const struct sockaddr_in *a, char *buf, size_t size);

/*
 * A non-blocking UDP socket bound to bind_to (port 0: any), optionally
 * connected to peer (NULL: not connected), with buffers of at least
 * bufsize bytes when bufsize > 0 (SO_*BUFFORCE first, as root may).
 * Returns the fd, or -errno.
 */
int bench_udp_socket(const struct sockaddr_in *bind_to, const struct sockaddr_in *peer,
		     int bufsize);

/* utime + stime of pid in clock ticks (all its threads): 0 or -errno. */
int bench_proc_cpu_ticks(pid_t pid, uint64_t *ticks);

/* Clock ticks per second for bench_proc_cpu_ticks(). */
long bench_ticks_per_s(void);

/* Writes and reads the header above; bench_hdr_get returns false when len is
 * shorter than BENCH_HDR_LEN. */
void bench_hdr_put(uint8_t *buf, const struct bench_hdr *h);
bool bench_hdr_get(const uint8_t *buf, size_t len, struct bench_hdr *h);

#endif
