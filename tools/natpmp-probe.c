/*
 * natpmp-probe: drives common/natpmp on a loop, for the network lab.
 *
 * Binds a UDP socket and a TCP listener on 0.0.0.0 (port 0 = ephemeral, the
 * bound port is what gets mapped), maps both with natpmp_map() for
 * --lifetime seconds (default 3600; renewed at half-life), prints every
 * result, echoes what reaches the UDP port, and on a line on stdin or a
 * signal unmaps:
 *
 *   bound udp=PORT tcp=PORT
 *   map answered=1 gateway=IP external=IP udp=1 tcp=1 udp_ext=P tcp_ext=P lifetime=S error=""
 *   renew answered=1 ...                        (each renewal, same fields)
 *   udp-recv from=IP:PORT len=N data=TEXT       (each datagram, echoed back)
 *   unmap udp=0 tcp=0 error=""                  ("unmap": natpmp_unmap on the loop)
 *   unmap-sync ret=N                            ("quit", EOF, SIGINT, SIGTERM)
 *
 * Exit status 0 when the map worked and the last unmap left nothing, 1
 * otherwise, 2 for a usage error.
 *
 * Run it only inside a lab namespace (tests/lab): it talks to the default
 * gateway, which outside the lab is a real router.
 */
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "addr.h"
#include "ev.h"
#include "log.h"
#include "natpmp.h"

struct probe {
	struct ev_loop *loop;
	struct natpmp *natpmp;
	int udp_fd, tcp_fd;
	struct ev_io *udp_io, *stdin_io;
	uint16_t udp_port, tcp_port;
	bool mapped_ok, unmapped_ok, sync_unmap;
	char line[256];
	size_t line_len;
};

static void on_result(void *arg, const struct natpmp_result *r)
{
	struct probe *p = arg;

	printf("%s answered=%d gateway=%s external=%s udp=%d tcp=%d udp_ext=%u tcp_ext=%u "
	       "lifetime=%u error=\"%s\"\n",
	       r->renewal ? "renew" : "map", r->answered, r->gateway[0] ? r->gateway : "-",
	       r->external_ip[0] ? r->external_ip : "-", r->udp_mapped, r->tcp_mapped,
	       r->udp_external, r->tcp_external, r->lifetime_s, r->error);
	if (!r->renewal)
		p->mapped_ok =
			r->udp_mapped == (p->udp_port != 0) && r->tcp_mapped == (p->tcp_port != 0);
}

static void on_unmapped(void *arg, const struct natpmp_result *r)
{
	struct probe *p = arg;

	printf("unmap udp=%d tcp=%d error=\"%s\"\n", r->udp_mapped, r->tcp_mapped, r->error);
	p->unmapped_ok = !r->udp_mapped && !r->tcp_mapped;
}

static void on_udp(struct ev_io *io, uint32_t events, void *arg)
{
	struct probe *p = arg;
	uint8_t buf[1500];
	char from[ADDR_STRLEN];

	(void)events;
	for (int i = 0; i < 64; i++) {
		struct addr a = {.len = sizeof(a.ss)};
		ssize_t n = recvfrom(ev_io_fd(io), buf, sizeof(buf), 0, (struct sockaddr *)&a.ss,
				     &a.len);

		if (n < 0)
			return;
		printf("udp-recv from=%s len=%zd data=", addr_str(&a, from, sizeof(from)), n);
		for (ssize_t k = 0; k < n && k < 64; k++)
			putchar(buf[k] >= 0x20 && buf[k] < 0x7f ? buf[k] : '.');
		putchar('\n');
		(void)!sendto(p->udp_fd, buf, (size_t)n, 0, (struct sockaddr *)&a.ss, a.len);
	}
}

static void on_stdin(struct ev_io *io, uint32_t events, void *arg)
{
	struct probe *p = arg;
	char buf[256];
	ssize_t n = read(ev_io_fd(io), buf, sizeof(buf));

	(void)events;
	if (n <= 0) {
		ev_io_del(p->stdin_io, false);
		p->stdin_io = NULL;
		p->sync_unmap = true;
		ev_loop_stop(p->loop);
		return;
	}
	for (ssize_t i = 0; i < n; i++) {
		if (buf[i] != '\n') {
			if (p->line_len + 1 < sizeof(p->line))
				p->line[p->line_len++] = buf[i];
			continue;
		}
		p->line[p->line_len] = '\0';
		p->line_len = 0;
		if (strcmp(p->line, "unmap") == 0) {
			int r = natpmp_unmap(p->natpmp, on_unmapped, p);

			if (r < 0)
				printf("unmap-queue-fail err=%d\n", r);
		} else if (strcmp(p->line, "quit") == 0) {
			p->sync_unmap = true;
			ev_loop_stop(p->loop);
		} else {
			printf("unknown-command %s\n", p->line);
		}
	}
}

static void on_signal(int signo, void *arg)
{
	struct probe *p = arg;

	if (signo == SIGINT || signo == SIGTERM) {
		p->sync_unmap = true;
		ev_loop_stop(p->loop);
	}
}

static int bind_any(int type, uint16_t port, uint16_t *bound)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
	socklen_t len = sizeof(sin);
	int fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), on = 1;

	if (fd < 0)
		return -errno;
	if (type == SOCK_STREAM)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
	if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
	    (type == SOCK_STREAM && listen(fd, 16) < 0) ||
	    getsockname(fd, (struct sockaddr *)&sin, &len) < 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	*bound = ntohs(sin.sin_port);
	return fd;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: natpmp-probe [--udp PORT] [--tcp PORT] [--no-tcp] [--lifetime S] "
		   "[--debug]\n");
}

static long parse_long(const char *s, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
		usage(stderr);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"udp", required_argument, NULL, 'u'},
		{"tcp", required_argument, NULL, 't'},
		{"no-tcp", no_argument, NULL, 'T'},
		{"debug", no_argument, NULL, 'D'},
		{"lifetime", required_argument, NULL, 'l'},
		{"help", no_argument, NULL, 'H'},
		{NULL, 0, NULL, 0},
	};
	struct probe p = {.udp_fd = -1, .tcp_fd = -1};
	long udp_port = 0, tcp_port = 0, lifetime = NATPMP_LIFETIME_S;
	bool use_tcp = true, debug = false;
	int c, r, status = 1;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'u':
			udp_port = parse_long(optarg, 0, 65535);
			break;
		case 't':
			tcp_port = parse_long(optarg, 0, 65535);
			break;
		case 'T':
			use_tcp = false;
			break;
		case 'l':
			lifetime = parse_long(optarg, 1, 86400);
			break;
		case 'D':
			debug = true;
			break;
		case 'H':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	ev_block_signals();
	log_init(debug ? LOG_LEVEL_DEBUG : LOG_LEVEL_INFO, LOG_TARGET_PLAIN);
	p.loop = ev_loop_new();
	if (p.loop == NULL)
		log_fatal("ev_loop_new");
	ev_signal_set(p.loop, on_signal, &p);
	p.udp_fd = bind_any(SOCK_DGRAM, (uint16_t)udp_port, &p.udp_port);
	if (p.udp_fd < 0) {
		errno = -p.udp_fd;
		log_fatal("udp bind");
	}
	p.udp_io = ev_io_add(p.loop, p.udp_fd, EPOLLIN, on_udp, &p);
	if (use_tcp) {
		p.tcp_fd = bind_any(SOCK_STREAM, (uint16_t)tcp_port, &p.tcp_port);
		if (p.tcp_fd < 0) {
			errno = -p.tcp_fd;
			log_fatal("tcp bind");
		}
	}
	p.stdin_io = ev_io_add(p.loop, STDIN_FILENO, EPOLLIN, on_stdin, &p);
	printf("bound udp=%u tcp=%u\n", p.udp_port, p.tcp_port);
	p.natpmp = natpmp_new(p.loop);
	if (p.natpmp == NULL)
		log_fatal("natpmp_new");
	r = natpmp_map(p.natpmp, p.udp_port, p.tcp_port, (uint32_t)lifetime, on_result, &p);
	if (r < 0) {
		errno = -r;
		log_fatal("natpmp_map");
	}
	ev_loop_run(p.loop);
	if (p.sync_unmap) {
		r = natpmp_unmap_sync(p.natpmp, 5000);
		printf("unmap-sync ret=%d\n", r);
		p.unmapped_ok = r >= 0;
	}
	natpmp_free(p.natpmp);
	ev_io_del(p.udp_io, true);
	ev_io_del(p.stdin_io, false);
	if (p.tcp_fd >= 0)
		close(p.tcp_fd);
	ev_loop_free(p.loop);
	if (p.mapped_ok && p.unmapped_ok)
		status = 0;
	return status;
}
