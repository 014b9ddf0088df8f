/*
 * bench-load: a closed-loop UDP load generator.
 *
 * N clients (N distinct client addresses) keep W requests in flight each:
 * every answer is timed and replaced by a new request at once.
 *
 * --mode sockets (the default): one socket per client, each bound to its own
 * port on --bind-ip and connected to --target. One epoll set over all
 * sockets; a ready socket is drained with one recvmmsg and refilled with one
 * sendmmsg: about two syscalls per socket wakeup whatever W is, so at least
 * two per round trip when W is 1.
 *
 * --mode ips: one socket bound to 0.0.0.0 (it must receive what is sent to
 * any 127.0.0.0/8 address), and client i is the address --ip-base + i on that
 * socket's port: each request leaves with its client's source address set by
 * an IP_PKTINFO control message, and the answers of all clients are read and
 * refilled in batches of 64 (recvmmsg, sendmmsg). Much cheaper per round trip
 * than one socket per client, so the proxy under test rather than the
 * generator is the bottleneck; the proxy sees N client IPs instead of N ports.
 *
 * A client with requests out and no answer for --timeout-ms counts them as
 * lost and starts a new generation of W (answers of older generations are
 * counted as late and ignored), so a lost datagram never stalls the loop.
 *
 * It runs --warmup-ms, then measures for --duration-ms. With --watch PID
 * (repeatable) it reads utime+stime of PID from /proc at the start and end
 * of the measured window. Output: one line of key=value on stdout.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench.h"

#define MAX_CLIENTS (65536)
#define MAX_WINDOW  (BENCH_BATCH)
#define MAX_WATCH   (8)
#define HIST_US     (100000) /* 1 µs buckets up to 100 ms; above: overflow */
#define IPS_ROUNDS  (8)      /* batches read per wakeup in MODE_IPS */

static const char usage[] =
	"usage: bench-load --target IP:PORT [options]\n"
	"  --mode M           sockets (one per client, default) | ips (one socket,\n"
	"                     one source IP per client)\n"
	"  --clients N        client addresses (default 1)\n"
	"  --window W         requests in flight per client, 1..64 (default 1)\n"
	"  --size B           datagram size, 20..65507 (default 64)\n"
	"  --bind-ip IP       sockets mode: address of the clients (default 127.0.0.1)\n"
	"  --ip-base IP       ips mode: first client address (default 127.100.0.1)\n"
	"  --warmup-ms MS     unmeasured start (default 1000)\n"
	"  --duration-ms MS   measured window (default 5000)\n"
	"  --timeout-ms MS    a client silent this long restarts (default 200)\n"
	"  --watch PID        report CPU seconds of PID over the window (repeatable)\n"
	"Prints: rt= rt_per_s= p50_us= p90_us= p99_us= p999_us= max_us= lost= late=\n"
	"        bad= elapsed_s= cpu_self_s= [cpu_PID_s= ...]\n";

enum mode { MODE_SOCKETS, MODE_IPS };

struct client {
	int fd; /* MODE_SOCKETS */
	uint32_t gen;
	uint32_t seq;
	unsigned out;        /* requests in flight */
	uint64_t last_rx_ns; /* last answer or (re)start */
};

struct tx_ctl {
	_Alignas(struct cmsghdr) unsigned char buf[CMSG_SPACE(sizeof(struct in_pktinfo))];
};

struct load {
	enum mode mode;
	struct sockaddr_in target;
	uint32_t ip_base; /* MODE_IPS, host order */
	int fd;           /* MODE_IPS */
	struct client *c;
	uint64_t nclients, window, size;

	/* Requests waiting to leave: one socket's refill (MODE_SOCKETS) or
	 * the shared batch, each with its source address (MODE_IPS). */
	uint8_t *tx[BENCH_BATCH];
	struct mmsghdr tx_msgs[BENCH_BATCH];
	struct iovec tx_iov[BENCH_BATCH];
	struct tx_ctl tx_ctl[BENCH_BATCH];
	unsigned char *tx_pktinfo[BENCH_BATCH];
	unsigned ntx;
	int tx_fd;

	uint8_t *rx[BENCH_BATCH];
	struct mmsghdr rx_msgs[BENCH_BATCH];
	struct iovec rx_iov[BENCH_BATCH];

	bool measuring;
	uint64_t rt, lost, late, bad;
	uint64_t hist[HIST_US + 1];
	uint64_t max_ns;
};

static void flush_tx(struct load *L)
{
	unsigned sent = 0;

	while (sent < L->ntx) {
		int n = sendmmsg(L->tx_fd, L->tx_msgs + sent, L->ntx - sent, 0);

		if (n < 0) {
			/* EAGAIN, ECONNREFUSED (nothing listening yet): that
			 * request is lost and the timeout restarts its client. */
			if (errno != EINTR)
				sent++;
			continue;
		}
		sent += (unsigned)n;
	}
	L->ntx = 0;
}

/* Queues k requests of client idx; flushes when the batch is full or the
 * socket changes. */
static void queue_requests(struct load *L, uint32_t idx, unsigned k, uint64_t now)
{
	struct client *c = &L->c[idx];
	int fd = L->mode == MODE_IPS ? L->fd : c->fd;
	struct in_pktinfo pi;

	if (L->ntx > 0 && L->tx_fd != fd)
		flush_tx(L);
	L->tx_fd = fd;
	memset(&pi, 0, sizeof(pi));
	pi.ipi_spec_dst.s_addr = htonl(L->ip_base + idx);
	for (unsigned i = 0; i < k; i++) {
		struct bench_hdr h = {.seq = c->seq++, .t_ns = now, .cli = idx, .gen = c->gen};

		if (L->ntx == BENCH_BATCH)
			flush_tx(L);
		bench_hdr_put(L->tx[L->ntx], &h);
		if (L->mode == MODE_IPS)
			memcpy(L->tx_pktinfo[L->ntx], &pi, sizeof(pi));
		L->ntx++;
	}
	c->out += k;
}

static void record(struct load *L, uint64_t lat_ns)
{
	uint64_t us = lat_ns / 1000;

	L->rt++;
	L->hist[us > HIST_US ? HIST_US : us]++;
	if (lat_ns > L->max_ns)
		L->max_ns = lat_ns;
}

/* Reads one batch from fd and queues a new request per answer; returns how
 * many datagrams were read. sock_idx: the client owning fd (MODE_SOCKETS). */
static int read_batch(struct load *L, int fd, uint32_t sock_idx)
{
	uint64_t now;
	int n;

	for (unsigned i = 0; i < BENCH_BATCH; i++) {
		L->rx_iov[i].iov_len = BENCH_MAX_DGRAM;
		L->rx_msgs[i].msg_hdr.msg_flags = 0;
	}
	n = recvmmsg(fd, L->rx_msgs, BENCH_BATCH, MSG_DONTWAIT, NULL);
	if (n <= 0)
		return 0;
	now = bench_now_ns();
	for (int i = 0; i < n; i++) {
		size_t len = L->rx_msgs[i].msg_len;
		struct bench_hdr h;
		struct client *c;

		if (!bench_hdr_get(L->rx[i], len, &h) || h.cli >= L->nclients ||
		    (L->mode == MODE_SOCKETS && h.cli != sock_idx) || len != L->size) {
			L->bad++;
			continue;
		}
		c = &L->c[h.cli];
		if (h.gen != c->gen) {
			L->late++;
			continue;
		}
		if (c->out > 0)
			c->out--;
		c->last_rx_ns = now;
		if (L->measuring)
			record(L, now - h.t_ns);
		queue_requests(L, h.cli, 1, now);
	}
	return n;
}

static void check_timeouts(struct load *L, uint64_t now, uint64_t timeout_ns)
{
	for (uint32_t i = 0; i < L->nclients; i++) {
		struct client *c = &L->c[i];

		if (now - c->last_rx_ns < timeout_ns)
			continue;
		if (L->measuring)
			L->lost += c->out;
		c->gen++;
		c->out = 0;
		c->last_rx_ns = now;
		queue_requests(L, i, (unsigned)L->window, now);
	}
	flush_tx(L);
}

static uint64_t percentile(const struct load *L, double q)
{
	uint64_t want, acc = 0;

	if (L->rt == 0)
		return 0;
	want = (uint64_t)((double)L->rt * q);
	if (want >= L->rt)
		want = L->rt - 1;
	for (uint64_t us = 0; us <= HIST_US; us++) {
		acc += L->hist[us];
		if (acc > want)
			return us;
	}
	return HIST_US;
}

static double self_cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static int die_arg(const char *what)
{
	fprintf(stderr, "bench-load: bad %s\n%s", what, usage);
	return 2;
}

static int setup_buffers(struct load *L)
{
	for (unsigned i = 0; i < BENCH_BATCH; i++) {
		struct cmsghdr *cm;

		L->tx[i] = calloc(1, L->size);
		L->rx[i] = malloc(BENCH_MAX_DGRAM);
		if (L->tx[i] == NULL || L->rx[i] == NULL)
			return -ENOMEM;
		/* Filler that looks like game data, not like zeros. */
		for (size_t k = BENCH_HDR_LEN; k < L->size; k++)
			L->tx[i][k] = (uint8_t)(k * 131u + 7u);
		L->tx_iov[i].iov_base = L->tx[i];
		L->tx_iov[i].iov_len = L->size;
		L->tx_msgs[i].msg_hdr.msg_iov = &L->tx_iov[i];
		L->tx_msgs[i].msg_hdr.msg_iovlen = 1;
		if (L->mode == MODE_IPS) {
			L->tx_msgs[i].msg_hdr.msg_name = &L->target;
			L->tx_msgs[i].msg_hdr.msg_namelen = sizeof(L->target);
			L->tx_msgs[i].msg_hdr.msg_control = L->tx_ctl[i].buf;
			L->tx_msgs[i].msg_hdr.msg_controllen = sizeof(L->tx_ctl[i].buf);
			cm = CMSG_FIRSTHDR(&L->tx_msgs[i].msg_hdr);
			cm->cmsg_level = IPPROTO_IP;
			cm->cmsg_type = IP_PKTINFO;
			cm->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
			L->tx_pktinfo[i] = CMSG_DATA(cm);
		}
		L->rx_iov[i].iov_base = L->rx[i];
		L->rx_msgs[i].msg_hdr.msg_iov = &L->rx_iov[i];
		L->rx_msgs[i].msg_hdr.msg_iovlen = 1;
	}
	return 0;
}

static int setup_sockets(struct load *L, int ep, const struct sockaddr_in *local)
{
	if (L->mode == MODE_IPS) {
		struct sockaddr_in any = {.sin_family = AF_INET};
		struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 0};

		any.sin_addr.s_addr = htonl(INADDR_ANY);
		L->fd = bench_udp_socket(&any, NULL, 32 << 20);
		if (L->fd < 0)
			return L->fd;
		return epoll_ctl(ep, EPOLL_CTL_ADD, L->fd, &ev) < 0 ? -errno : 0;
	}
	for (uint32_t i = 0; i < L->nclients; i++) {
		struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
		/* Enough for a window of the largest datagrams. */
		int fd = bench_udp_socket(local, &L->target, 1 << 20);

		if (fd < 0)
			return fd;
		L->c[i].fd = fd;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
			return -errno;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct load L;
	struct sockaddr_in local;
	struct in_addr ipb;
	uint64_t warmup_ms = 1000, duration_ms = 5000, timeout_ms = 200, v;
	pid_t watch[MAX_WATCH];
	uint64_t watch_t0[MAX_WATCH], watch_t1[MAX_WATCH];
	size_t nwatch = 0;
	bool have_target = false;
	struct epoll_event evs[1024];
	uint64_t t_start, t_measure, t_end, next_check, elapsed_ns;
	double cpu0 = 0, cpu1;
	struct rlimit rl;
	int ep, r;

	L.nclients = 1;
	L.window = 1;
	L.size = 64;
	L.fd = -1;
	bench_parse_addr("127.0.0.1:0", &local);
	inet_pton(AF_INET, "127.100.0.1", &ipb);
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
			if (bench_parse_addr(val, &L.target) < 0)
				return die_arg(a);
			have_target = true;
		} else if (strcmp(a, "--mode") == 0) {
			if (strcmp(val, "sockets") == 0)
				L.mode = MODE_SOCKETS;
			else if (strcmp(val, "ips") == 0)
				L.mode = MODE_IPS;
			else
				return die_arg(a);
		} else if (strcmp(a, "--clients") == 0) {
			if (bench_parse_u64(val, 1, MAX_CLIENTS, &L.nclients) < 0)
				return die_arg(a);
		} else if (strcmp(a, "--window") == 0) {
			if (bench_parse_u64(val, 1, MAX_WINDOW, &L.window) < 0)
				return die_arg(a);
		} else if (strcmp(a, "--size") == 0) {
			if (bench_parse_u64(val, BENCH_HDR_LEN, BENCH_MAX_DGRAM, &L.size) < 0)
				return die_arg(a);
		} else if (strcmp(a, "--bind-ip") == 0) {
			char tmp[64];

			if (snprintf(tmp, sizeof(tmp), "%s:0", val) >= (int)sizeof(tmp) ||
			    bench_parse_addr(tmp, &local) < 0)
				return die_arg(a);
		} else if (strcmp(a, "--ip-base") == 0) {
			if (inet_pton(AF_INET, val, &ipb) != 1 || (ntohl(ipb.s_addr) >> 24) != 127)
				return die_arg(a);
		} else if (strcmp(a, "--warmup-ms") == 0) {
			if (bench_parse_u64(val, 0, 3600000, &warmup_ms) < 0)
				return die_arg(a);
		} else if (strcmp(a, "--duration-ms") == 0) {
			if (bench_parse_u64(val, 1, 3600000, &duration_ms) < 0)
				return die_arg(a);
		} else if (strcmp(a, "--timeout-ms") == 0) {
			if (bench_parse_u64(val, 1, 60000, &timeout_ms) < 0)
				return die_arg(a);
		} else if (strcmp(a, "--watch") == 0) {
			if (nwatch == MAX_WATCH || bench_parse_u64(val, 1, INT32_MAX, &v) < 0)
				return die_arg(a);
			watch[nwatch++] = (pid_t)v;
		} else {
			return die_arg(a);
		}
	}
	if (!have_target)
		return die_arg("--target (missing)");
	L.ip_base = ntohl(ipb.s_addr);
	if (L.mode == MODE_IPS && ((L.ip_base + (uint32_t)(L.nclients - 1)) >> 24) != 127)
		return die_arg("--ip-base/--clients (leaves 127.0.0.0/8)");

	/* One fd per client, plus a few. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < L.nclients + 64) {
		rl.rlim_cur = L.nclients + 64 > rl.rlim_max ? rl.rlim_max : L.nclients + 64;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
	L.c = calloc(L.nclients, sizeof(*L.c));
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (L.c == NULL || ep < 0 || setup_buffers(&L) < 0) {
		perror("bench-load: setup");
		return 1;
	}
	r = setup_sockets(&L, ep, &local);
	if (r < 0) {
		fprintf(stderr, "bench-load: sockets: %s\n", strerror(-r));
		return 1;
	}

	t_start = bench_now_ns();
	t_measure = t_start + warmup_ms * 1000000u;
	t_end = t_measure + duration_ms * 1000000u;
	next_check = t_start + timeout_ms * 1000000u / 4;
	for (uint32_t i = 0; i < L.nclients; i++) {
		L.c[i].last_rx_ns = t_start;
		queue_requests(&L, i, (unsigned)L.window, t_start);
	}
	flush_tx(&L);
	for (;;) {
		uint64_t now = bench_now_ns();
		int n;

		if (!L.measuring && now >= t_measure) {
			L.measuring = true;
			t_measure = now;
			cpu0 = self_cpu_s();
			for (size_t w = 0; w < nwatch; w++)
				if (bench_proc_cpu_ticks(watch[w], &watch_t0[w]) < 0)
					watch_t0[w] = UINT64_MAX;
		}
		if (now >= t_end)
			break;
		if (now >= next_check) {
			check_timeouts(&L, now, timeout_ms * 1000000u);
			next_check = now + timeout_ms * 1000000u / 4;
		}
		n = epoll_wait(ep, evs, (int)(sizeof(evs) / sizeof(evs[0])), 10);
		if (n < 0 && errno != EINTR) {
			perror("bench-load: epoll_wait");
			return 1;
		}
		for (int i = 0; i < n; i++) {
			if (L.mode == MODE_IPS) {
				/* Drain a few batches, sending as we go. */
				for (int k = 0; k < IPS_ROUNDS; k++) {
					int got = read_batch(&L, L.fd, 0);

					flush_tx(&L);
					if (got < BENCH_BATCH)
						break;
				}
			} else {
				read_batch(&L, L.c[evs[i].data.u32].fd, evs[i].data.u32);
				flush_tx(&L);
			}
		}
	}
	elapsed_ns = bench_now_ns() - t_measure;
	cpu1 = self_cpu_s();
	for (size_t w = 0; w < nwatch; w++)
		if (bench_proc_cpu_ticks(watch[w], &watch_t1[w]) < 0)
			watch_t1[w] = UINT64_MAX;

	printf("rt=%llu rt_per_s=%.0f p50_us=%llu p90_us=%llu p99_us=%llu p999_us=%llu "
	       "max_us=%llu lost=%llu late=%llu bad=%llu elapsed_s=%.3f cpu_self_s=%.3f",
	       (unsigned long long)L.rt, (double)L.rt * 1e9 / (double)elapsed_ns,
	       (unsigned long long)percentile(&L, 0.50), (unsigned long long)percentile(&L, 0.90),
	       (unsigned long long)percentile(&L, 0.99), (unsigned long long)percentile(&L, 0.999),
	       (unsigned long long)(L.max_ns / 1000), (unsigned long long)L.lost,
	       (unsigned long long)L.late, (unsigned long long)L.bad, (double)elapsed_ns / 1e9,
	       cpu1 - cpu0);
	for (size_t w = 0; w < nwatch; w++) {
		if (watch_t0[w] == UINT64_MAX || watch_t1[w] == UINT64_MAX)
			printf(" cpu_%ld_s=nan", (long)watch[w]);
		else
			printf(" cpu_%ld_s=%.3f", (long)watch[w],
			       (double)(watch_t1[w] - watch_t0[w]) / (double)bench_ticks_per_s());
	}
	printf("\n");
	return 0;
}
