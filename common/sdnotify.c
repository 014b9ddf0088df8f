#include "sdnotify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int sdnotify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	size_t plen;
	socklen_t len;
	int fd, r = 1;

	if (path == NULL || path[0] == '\0')
		return 0;
	plen = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || plen >= sizeof(sun.sun_path))
		return -EINVAL;
	memcpy(sun.sun_path, path, plen);
	if (path[0] == '@')
		sun.sun_path[0] = '\0';
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sun, len) < 0)
		r = -errno;
	close(fd);
	return r;
}

static long long parse_ull(const char *s)
{
	long long v = 0;

	if (s == NULL || *s == '\0')
		return -1;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9' || v > 1000000000000000LL)
			return -1;
		v = v * 10 + (*s - '0');
	}
	return v;
}

long long sdnotify_watchdog_ms(void)
{
	long long usec = parse_ull(getenv("WATCHDOG_USEC"));
	const char *pid = getenv("WATCHDOG_PID");

	if (usec <= 0)
		return 0;
	if (pid != NULL && parse_ull(pid) != (long long)getpid())
		return 0;
	return usec / 1000;
}
