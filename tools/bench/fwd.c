/*
 * bench-fwd: the minimal UDP forwarder, the near-physical limit the relay is
 * measured against.
 *
 * It has the relay's shape and nothing else: one public socket read with
 * recvmmsg (one batch of 64 per wakeup), one connected upstream socket per
 * client address (an open-addressing table, never expired), send() toward
 * the server, recvmmsg on a ready upstream socket, and the answers of one
 * epoll round sent back from the public socket with one sendmmsg. No
 * filter, limiter, bans, queues, timers or statistics. The public socket
 * asks for 4 MiB buffers each way (--bufsize; SO_*BUFFORCE as root), as
 * rally-relay's does, so that neither loses a burst the other would hold;
 * upstream sockets keep the system's default, as the relay's do.
 *
 * Prints "ready listen=IP:PORT" on stderr once bound; runs until killed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench.h"

#define MAX_SESSIONS (65536)
#define TABLE_SIZE   (2 * MAX_SESSIONS) /* power of two */
#define PUBLIC_TAG   (UINT32_MAX)

static const char usage[] =
	"usage: bench-fwd --listen IP:PORT --server IP:PORT [--bufsize BYTES]\n"
	"  Forwards UDP, one upstream socket per client address. --bufsize: the\n"
	"  public socket's buffers (default 4194304; 0 = the system's default).\n";

struct session {
	struct sockaddr_in client; /* sin_family 0: free slot */
	int fd;
};

struct fwd {
	int pub, ep;
	struct sockaddr_in server;
	struct session *tab;
	size_t nsessions;
	uint8_t in_bufs[BENCH_BATCH][BENCH_MAX_DGRAM + 1];
	struct mmsghdr in_msgs[BENCH_BATCH];
	struct iovec in_iov[BENCH_BATCH];
	struct sockaddr_in in_addr[BENCH_BATCH];
	uint8_t out_bufs[BENCH_BATCH][BENCH_MAX_DGRAM + 1];
	struct mmsghdr out_msgs[BENCH_BATCH];
	struct iovec out_iov[BENCH_BATCH];
	struct sockaddr_in out_addr[BENCH_BATCH];
	unsigned nout;
};

static uint32_t slot_of(const struct sockaddr_in *a)
{
	/* Not keyed: a benchmark tool, not attacker-facing. */
	uint64_t k = (uint64_t)a->sin_addr.s_addr << 16 | a->sin_port;

	k *= 0x9e3779b97f4a7c15u;
	return (uint32_t)(k >> 40) & (TABLE_SIZE - 1);
}

static struct session *lookup(struct fwd *f, const struct sockaddr_in *a)
{
	uint32_t i = slot_of(a);

	for (;;) {
		struct session *s = &f->tab[i];

		if (s->client.sin_family == 0)
			break;
		if (s->client.sin_addr.s_addr == a->sin_addr.s_addr &&
		    s->client.sin_port == a->sin_port)
			return s;
		i = (i + 1) & (TABLE_SIZE - 1);
	}
	if (f->nsessions == MAX_SESSIONS)
		return NULL;
	{
		struct session *s = &f->tab[i];
		struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
		int fd = bench_udp_socket(NULL, &f->server, 0);

		if (fd < 0)
			return NULL;
		if (epoll_ctl(f->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
			close(fd);
			return NULL;
		}
		s->client = *a;
		s->fd = fd;
		f->nsessions++;
		return s;
	}
}

static void flush_out(struct fwd *f)
{
	unsigned sent = 0;

	while (sent < f->nout) {
		int n = sendmmsg(f->pub, f->out_msgs + sent, f->nout - sent, 0);

		if (n < 0) {
			if (errno != EINTR)
				sent++; /* drop the one that failed */
			continue;
		}
		sent += (unsigned)n;
	}
	f->nout = 0;
}

static void on_public(struct fwd *f)
{
	int n;

	for (unsigned i = 0; i < BENCH_BATCH; i++) {
		f->in_iov[i].iov_len = BENCH_MAX_DGRAM + 1;
		f->in_msgs[i].msg_hdr.msg_namelen = sizeof(f->in_addr[i]);
	}
	n = recvmmsg(f->pub, f->in_msgs, BENCH_BATCH, MSG_DONTWAIT, NULL);
	for (int i = 0; i < n; i++) {
		struct session *s = lookup(f, &f->in_addr[i]);

		if (s != NULL)
			(void)send(s->fd, f->in_bufs[i], f->in_msgs[i].msg_len, 0);
	}
}

static void on_upstream(struct fwd *f, struct session *s)
{
	unsigned base, room;
	int n;

	if (f->nout == BENCH_BATCH)
		flush_out(f);
	base = f->nout;
	room = BENCH_BATCH - base;
	for (unsigned k = base; k < BENCH_BATCH; k++) {
		f->out_iov[k].iov_len = BENCH_MAX_DGRAM + 1;
		f->out_msgs[k].msg_hdr.msg_name = NULL;
		f->out_msgs[k].msg_hdr.msg_namelen = 0;
	}
	n = recvmmsg(s->fd, f->out_msgs + base, room, MSG_DONTWAIT, NULL);
	for (int i = 0; i < n; i++) {
		unsigned k = base + (unsigned)i;

		f->out_addr[k] = s->client;
		f->out_iov[k].iov_len = f->out_msgs[k].msg_len;
		f->out_msgs[k].msg_hdr.msg_name = &f->out_addr[k];
		f->out_msgs[k].msg_hdr.msg_namelen = sizeof(f->out_addr[k]);
		f->nout++;
	}
}

int main(int argc, char **argv)
{
	static struct fwd f;
	struct sockaddr_in listen_at, bound;
	socklen_t blen = sizeof(bound);
	struct epoll_event evs[256];
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = PUBLIC_TAG};
	bool have_listen = false, have_server = false, bad = argc % 2 == 0;
	uint64_t bufsize = 4u << 20;
	struct rlimit rl;
	char a[64];

	for (int i = 1; i + 1 < argc && !bad; i += 2) {
		if (strcmp(argv[i], "--listen") == 0)
			have_listen = bench_parse_addr(argv[i + 1], &listen_at) == 0;
		else if (strcmp(argv[i], "--server") == 0)
			have_server = bench_parse_addr(argv[i + 1], &f.server) == 0;
		else if (strcmp(argv[i], "--bufsize") == 0)
			bad = bench_parse_u64(argv[i + 1], 0, 1u << 30, &bufsize) < 0;
		else
			bad = true;
	}
	if (!have_listen || !have_server || bad) {
		fputs(usage, stderr);
		return 2;
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < MAX_SESSIONS + 64) {
		rl.rlim_cur = rl.rlim_max < MAX_SESSIONS + 64 ? rl.rlim_max : MAX_SESSIONS + 64;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
	f.tab = calloc(TABLE_SIZE, sizeof(*f.tab));
	f.ep = epoll_create1(EPOLL_CLOEXEC);
	f.pub = bench_udp_socket(&listen_at, NULL, (int)bufsize);
	if (f.tab == NULL || f.ep < 0 || f.pub < 0) {
		fprintf(stderr, "bench-fwd: setup failed\n");
		return 1;
	}
	if (getsockname(f.pub, (struct sockaddr *)&bound, &blen) < 0 ||
	    epoll_ctl(f.ep, EPOLL_CTL_ADD, f.pub, &ev) < 0) {
		perror("bench-fwd");
		return 1;
	}
	for (unsigned i = 0; i < BENCH_BATCH; i++) {
		f.in_iov[i].iov_base = f.in_bufs[i];
		f.in_msgs[i].msg_hdr.msg_iov = &f.in_iov[i];
		f.in_msgs[i].msg_hdr.msg_iovlen = 1;
		f.in_msgs[i].msg_hdr.msg_name = &f.in_addr[i];
		f.out_iov[i].iov_base = f.out_bufs[i];
		f.out_msgs[i].msg_hdr.msg_iov = &f.out_iov[i];
		f.out_msgs[i].msg_hdr.msg_iovlen = 1;
	}
	fprintf(stderr, "ready listen=%s\n", bench_addr_str(&bound, a, sizeof(a)));

	for (;;) {
		int n;

		if (f.nout > 0)
			flush_out(&f);
		n = epoll_wait(f.ep, evs, (int)(sizeof(evs) / sizeof(evs[0])), -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			perror("bench-fwd: epoll_wait");
			return 1;
		}
		for (int i = 0; i < n; i++) {
			if (evs[i].data.u32 == PUBLIC_TAG)
				on_public(&f);
			else
				on_upstream(&f, &f.tab[evs[i].data.u32]);
		}
	}
}
