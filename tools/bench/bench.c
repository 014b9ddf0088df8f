#include "bench.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int bench_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (*s == '\0')
		return -EINVAL;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		if (v > (UINT64_MAX - 9) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int bench_parse_addr(const char *s, struct sockaddr_in *out)
{
	char host[INET_ADDRSTRLEN];
	const char *colon = strrchr(s, ':');
	uint64_t port;
	size_t hlen;

	if (colon == NULL)
		return -EINVAL;
	hlen = (size_t)(colon - s);
	if (hlen == 0 || hlen >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, hlen);
	host[hlen] = '\0';
	memset(out, 0, sizeof(*out));
	out->sin_family = AF_INET;
	if (inet_pton(AF_INET, host, &out->sin_addr) != 1)
		return -EINVAL;
	if (bench_parse_u64(colon + 1, 0, 65535, &port) < 0)
		return -EINVAL;
	out->sin_port = htons((uint16_t)port);
	return 0;
}

const char *bench_addr_str(const struct sockaddr_in *a, char *buf, size_t size)
{
	char ip[INET_ADDRSTRLEN];

	if (inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip)) == NULL)
		strcpy(ip, "?");
	snprintf(buf, size, "%s:%u", ip, ntohs(a->sin_port));
	return buf;
}

static void set_buf(int fd, int force_opt, int opt, int size)
{
	/* FORCE ignores rmem_max/wmem_max but needs CAP_NET_ADMIN. */
	if (setsockopt(fd, SOL_SOCKET, force_opt, &size, sizeof(size)) < 0)
		(void)setsockopt(fd, SOL_SOCKET, opt, &size, sizeof(size));
}

int bench_udp_socket(const struct sockaddr_in *bind_to, const struct sockaddr_in *peer, int bufsize)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int e;

	if (fd < 0)
		return -errno;
	if (bufsize > 0) {
		set_buf(fd, SO_RCVBUFFORCE, SO_RCVBUF, bufsize);
		set_buf(fd, SO_SNDBUFFORCE, SO_SNDBUF, bufsize);
	}
	if (bind_to != NULL && bind(fd, (const struct sockaddr *)bind_to, sizeof(*bind_to)) < 0)
		goto fail;
	if (peer != NULL && connect(fd, (const struct sockaddr *)peer, sizeof(*peer)) < 0)
		goto fail;
	return fd;
fail:
	e = errno;
	close(fd);
	return -e;
}

int bench_proc_cpu_ticks(pid_t pid, uint64_t *ticks)
{
	char path[64], buf[1024];
	const char *p;
	uint64_t ut = 0, st = 0;
	ssize_t n;
	int fd, field;

	snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	if (n < 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	close(fd);
	buf[n] = '\0';
	/* "pid (comm) state ppid ..."; comm may hold spaces and parentheses,
	 * so count fields from the last ')'. utime is field 14, stime 15. */
	p = strrchr(buf, ')');
	if (p == NULL)
		return -EPROTO;
	field = 2;
	for (p++; *p != '\0' && field < 15; p++) {
		if (*p != ' ')
			continue;
		field++;
		if (field == 14 || field == 15) {
			uint64_t v = 0;

			for (p++; *p >= '0' && *p <= '9'; p++)
				v = v * 10 + (uint64_t)(*p - '0');
			if (field == 14)
				ut = v;
			else
				st = v;
			p--;
		}
	}
	if (field < 15)
		return -EPROTO;
	*ticks = ut + st;
	return 0;
}

long bench_ticks_per_s(void)
{
	long t = sysconf(_SC_CLK_TCK);

	return t > 0 ? t : 100;
}

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void bench_hdr_put(uint8_t *buf, const struct bench_hdr *h)
{
	put_le32(buf, h->seq & 0x7fffffffu);
	put_le32(buf + 4, (uint32_t)h->t_ns);
	put_le32(buf + 8, (uint32_t)(h->t_ns >> 32));
	put_le32(buf + 12, h->cli);
	put_le32(buf + 16, h->gen);
}

bool bench_hdr_get(const uint8_t *buf, size_t len, struct bench_hdr *h)
{
	if (len < BENCH_HDR_LEN)
		return false;
	h->seq = get_le32(buf);
	h->t_ns = (uint64_t)get_le32(buf + 4) | (uint64_t)get_le32(buf + 8) << 32;
	h->cli = get_le32(buf + 12);
	h->gen = get_le32(buf + 16);
	return true;
}
