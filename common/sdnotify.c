#include "sdnotify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "num.h"

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

long long sdnotify_watchdog_ms(void)
{
	const char *pid = getenv("WATCHDOG_PID");
	int64_t usec, who;

	/* Both in decimal (systemd.exec(5)); a malformed or zero value means
	 * no watchdog, and so does a WATCHDOG_PID that is not ours. */
	if (num_parse_str(getenv("WATCHDOG_USEC"), 1, INT64_MAX, 0, &usec) < 0)
		return 0;
	if (pid != NULL &&
	    (num_parse_str(pid, 0, INT64_MAX, 0, &who) < 0 || who != (int64_t)getpid()))
		return 0;
	return usec / 1000;
}
