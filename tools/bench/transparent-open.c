/*
 * transparent-open: what a session's socket costs to open, the relay's
 * own way (socket + connect) against transparent mode's
 * (relay_transparent_connect: socket + IP_TRANSPARENT + bind to the
 * player's address + connect), for docs/PERFORMANCE.md.
 *
 *   transparent-open [SESSIONS [ROUNDS]]   (root: IP_TRANSPARENT needs
 *                                          CAP_NET_ADMIN)
 *
 * Opens SESSIONS sockets (default 2048, the relay's session cap) each way,
 * all kept open as a full relay keeps them, toward 127.0.0.1:9 (connect on
 * UDP sends nothing), players spread over 198.18.0.0/15 (benchmark space,
 * never routed); ROUNDS times (default 9), the two ways taking turns;
 * prints the median of the rounds' mean µs per open and per close. Run it in a
 * namespace of its own: `ip netns add tpb; ip -n tpb link set lo up; ip netns
 * exec tpb build/tools/bench/transparent-open; ip netns del tpb`.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "addr.h"
#include "relay_transparent.h"

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

#define MAX_ROUNDS (99)

int main(int argc, char **argv)
{
	long n = argc > 1 ? strtol(argv[1], NULL, 10) : 2048;
	long rounds = argc > 2 ? strtol(argv[2], NULL, 10) : 9;
	struct addr server, player, local;
	double open_us[2][MAX_ROUNDS], close_us[2][MAX_ROUNDS];
	int *fds, ret = 1;
	double t0, t1, t2;

	if (n < 1 || n > 60000 || rounds < 1 || rounds > MAX_ROUNDS) {
		fprintf(stderr, "usage: transparent-open [SESSIONS 1-60000 [ROUNDS 1-99]]\n");
		return 2;
	}
	fds = calloc((size_t)n, sizeof(*fds));
	if (fds == NULL)
		return 1;
	addr_parse(&server, "127.0.0.1:9", -1);
	for (long k = 0; k < 2 * rounds; k++) {
		int mode = (int)((k + k / 2) % 2); /* 0 1, 1 0, 0 1, ... */

		t0 = now_us();
		for (long i = 0; i < n; i++) {
			char s[64];

			snprintf(s, sizeof(s), "198.18.%ld.%ld:%ld", (i / 250) % 250, 1 + i % 250,
				 27960 + i % 1000);
			addr_parse(&player, s, -1);
			fds[i] = mode == 0 ? addr_udp_connect(&server, &local)
					   : relay_transparent_connect(&server, &player, &local,
								       NULL);
			if (fds[i] < 0) {
				fprintf(stderr, "open %ld: %s\n", i, strerror(-fds[i]));
				while (i-- > 0)
					close(fds[i]);
				goto out;
			}
		}
		t1 = now_us();
		for (long i = 0; i < n; i++)
			close(fds[i]);
		t2 = now_us();
		open_us[mode][k / 2] = (t1 - t0) / (double)n;
		close_us[mode][k / 2] = (t2 - t1) / (double)n;
	}
	for (int mode = 0; mode < 2; mode++) {
		qsort(open_us[mode], (size_t)rounds, sizeof(double), cmp);
		qsort(close_us[mode], (size_t)rounds, sizeof(double), cmp);
		printf("%-12s sessions=%ld rounds=%ld open_us=%.2f (min %.2f) close_us=%.2f\n",
		       mode == 0 ? "normal" : "transparent", n, rounds, open_us[mode][rounds / 2],
		       open_us[mode][0], close_us[mode][rounds / 2]);
	}
	ret = 0;
out:
	free(fds);
	return ret;
}
