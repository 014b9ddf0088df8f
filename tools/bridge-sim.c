/*
 * bridge-sim: a stand-in for the game's bridge DLL on loopback, for tests
 * and benchmarks of rally-lobby's game frames.
 *
 *   bridge-sim --port P --lobby GPORT --id N [--send COUNT] [--size B]
 *              [--rate PER_S] [--echo] [--duration-ms MS]
 *
 * It binds 127.0.0.1:P (0 = any; "ready port=N" on stderr), then (with
 * --lobby -) reads the lobby's game port as a line on stdin, so a test can
 * start the bridge first, give its port to the lobby, and the lobby's to
 * it; with --wait-go it then waits for a second line before sending, so the
 * frames start once the lobbies are connected. It sends COUNT
 * frames of B bytes to the lobby's game relay port 127.0.0.1:GPORT, each
 * "BSIM" | u32 id | u64 seq | u64 send time (ns, CLOCK_MONOTONIC) | filler,
 * and counts what it receives from the lobby. With --echo it sends every
 * frame of another id straight back (so a sender measures the round trip).
 * At the end it prints one line per sender id seen:
 *   "from=ID frames=N first=S last=S dup=D"
 * and for its own echoed frames "rtt_us p50=.. p99=.. n=..".
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_IDS (64)
#define MAX_RTT (1000000)

struct seen {
	uint32_t id;
	uint64_t frames, dup, first, last;
	uint8_t *bits; /* which seqs arrived, to count duplicates */
	size_t nbits;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get_u64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static struct seen *seen_of(struct seen *s, size_t *n, uint32_t id)
{
	for (size_t i = 0; i < *n; i++) {
		if (s[i].id == id)
			return &s[i];
	}
	if (*n == MAX_IDS)
		return NULL;
	memset(&s[*n], 0, sizeof(s[*n]));
	s[*n].id = id;
	return &s[(*n)++];
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"port", required_argument, NULL, 'p'},
		{"lobby", required_argument, NULL, 'l'},
		{"id", required_argument, NULL, 'i'},
		{"send", required_argument, NULL, 'n'},
		{"size", required_argument, NULL, 's'},
		{"rate", required_argument, NULL, 'r'},
		{"echo", no_argument, NULL, 'e'},
		{"wait-go", no_argument, NULL, 'g'},
		{"duration-ms", required_argument, NULL, 'd'},
		{NULL, 0, NULL, 0},
	};
	long port = 0, lobby = 0, id = 1, count = 0, size = 64, rate = 1000, duration = 3000;
	int echo = 0, wait_go = 0, o, fd;
	struct sockaddr_in me = {.sin_family = AF_INET}, to = {.sin_family = AF_INET};
	socklen_t len = sizeof(me);
	struct seen seen[MAX_IDS];
	size_t nseen = 0, nrtt = 0;
	uint64_t *rtt = calloc(MAX_RTT, sizeof(*rtt));
	uint8_t buf[65536];
	uint64_t start, next_send, sent = 0;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'p':
			port = strtol(optarg, NULL, 10);
			break;
		case 'l':
			lobby = strcmp(optarg, "-") == 0 ? -1 : strtol(optarg, NULL, 10);
			break;
		case 'i':
			id = strtol(optarg, NULL, 10);
			break;
		case 'n':
			count = strtol(optarg, NULL, 10);
			break;
		case 's':
			size = strtol(optarg, NULL, 10);
			break;
		case 'r':
			rate = strtol(optarg, NULL, 10);
			break;
		case 'e':
			echo = 1;
			break;
		case 'g':
			wait_go = 1;
			break;
		case 'd':
			duration = strtol(optarg, NULL, 10);
			break;
		default:
			fprintf(stderr, "usage: see the comment at the top of bridge-sim.c\n");
			return 2;
		}
	}
	if (rtt == NULL || size < 24 || size > 1400 || rate < 1 || port < 0 || port > 65535 ||
	    lobby < -1 || lobby > 65535) {
		fprintf(stderr, "bridge-sim: bad arguments\n");
		return 2;
	}
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	me.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	me.sin_port = htons((uint16_t)port);
	if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&me, &len) < 0) {
		perror("bridge-sim: bind");
		return 1;
	}
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fprintf(stderr, "ready port=%u\n", ntohs(me.sin_port));
	if (lobby == -1) {
		char line[32];

		if (fgets(line, sizeof(line), stdin) == NULL ||
		    (lobby = strtol(line, NULL, 10)) <= 0 || lobby > 65535) {
			fprintf(stderr, "bridge-sim: no lobby port on stdin\n");
			return 2;
		}
	}
	to.sin_port = htons((uint16_t)lobby);
	if (wait_go) {
		char line[32];

		if (fgets(line, sizeof(line), stdin) == NULL) {
			fprintf(stderr, "bridge-sim: no go on stdin\n");
			return 2;
		}
	}
	start = next_send = now_ns();
	while (now_ns() - start < (uint64_t)duration * 1000000u) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		uint64_t now = now_ns();
		int wait_ms = 1;

		while (sent < (uint64_t)count && now >= next_send && lobby != 0) {
			memset(buf, 0, (size_t)size);
			memcpy(buf, "BSIM", 4);
			put_u32(buf + 4, (uint32_t)id);
			put_u64(buf + 8, sent);
			put_u64(buf + 16, now_ns());
			if (sendto(fd, buf, (size_t)size, 0, (struct sockaddr *)&to, sizeof(to)) >=
			    0)
				sent++;
			next_send += 1000000000u / (uint64_t)rate;
			now = now_ns();
		}
		if (poll(&p, 1, wait_ms) <= 0)
			continue;
		for (;;) {
			ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
			struct seen *s;
			uint32_t from;
			uint64_t seq;

			if (n < 0)
				break;
			if (n < 24 || memcmp(buf, "BSIM", 4) != 0)
				continue;
			from = get_u32(buf + 4);
			seq = get_u64(buf + 8);
			if (from == (uint32_t)id) {
				if (nrtt < MAX_RTT)
					rtt[nrtt++] = (now_ns() - get_u64(buf + 16)) / 1000;
				continue;
			}
			if (echo && lobby != 0)
				sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&to, sizeof(to));
			s = seen_of(seen, &nseen, from);
			if (s == NULL)
				continue;
			if (seq >= s->nbits) {
				size_t nb = (size_t)seq + 1024;
				uint8_t *b = realloc(s->bits, nb);

				if (b == NULL)
					continue;
				memset(b + s->nbits, 0, nb - s->nbits);
				s->bits = b;
				s->nbits = nb;
			}
			if (s->bits[seq]) {
				s->dup++;
				continue;
			}
			s->bits[seq] = 1;
			if (s->frames == 0)
				s->first = seq;
			s->last = seq;
			s->frames++;
		}
	}
	printf("sent=%llu\n", (unsigned long long)sent);
	for (size_t i = 0; i < nseen; i++)
		printf("from=%u frames=%llu first=%llu last=%llu dup=%llu\n", seen[i].id,
		       (unsigned long long)seen[i].frames, (unsigned long long)seen[i].first,
		       (unsigned long long)seen[i].last, (unsigned long long)seen[i].dup);
	if (nrtt > 0) {
		qsort(rtt, nrtt, sizeof(*rtt), cmp_u64);
		printf("rtt_us p50=%llu p99=%llu n=%zu\n", (unsigned long long)rtt[nrtt / 2],
		       (unsigned long long)rtt[nrtt * 99 / 100], nrtt);
	}
	fflush(stdout);
	for (size_t i = 0; i < nseen; i++)
		free(seen[i].bits);
	free(rtt);
	return 0;
}
