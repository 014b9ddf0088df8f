#include "statefile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int dir_of(const char *path, char *dir, size_t size)
{
	char tmp[PATH_MAX];
	int n;

	n = snprintf(tmp, sizeof(tmp), "%s", path);
	if (n < 0 || (size_t)n >= sizeof(tmp))
		return -ENAMETOOLONG;
	n = snprintf(dir, size, "%s", dirname(tmp));
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	return 0;
}

static int write_all(int fd, const void *data, size_t len)
{
	const char *p = data;

	while (len > 0) {
		ssize_t w = write(fd, p, len);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/*
 * The temporary of "<path>" is "<path>.tmp.XXXXXX"; mkostemp(3) replaces
 * the six X's with letters and digits (glibc and musl both).
 */
#define TMP_SUFFIX     ".tmp."
#define TMP_SUFFIX_LEN (sizeof(TMP_SUFFIX) - 1)
#define TMP_RANDOM_LEN (6)

static bool is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* True if name is exactly "<base>.tmp.XXXXXX" with six letters or digits. */
static bool is_temp_of(const char *name, const char *base, size_t blen)
{
	if (strncmp(name, base, blen) != 0 || strncmp(name + blen, TMP_SUFFIX, TMP_SUFFIX_LEN) != 0)
		return false;
	name += blen + TMP_SUFFIX_LEN;
	for (size_t i = 0; i < TMP_RANDOM_LEN; i++) {
		if (!is_alnum(name[i]))
			return false;
	}
	return name[TMP_RANDOM_LEN] == '\0';
}

int statefile_remove_temps(const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/'), *base = slash != NULL ? slash + 1 : path;
	size_t blen = strlen(base);
	struct dirent *e;
	DIR *d;
	int r, n = 0;

	if (blen == 0)
		return -EINVAL;
	r = dir_of(path, dir, sizeof(dir));
	if (r < 0)
		return r;
	d = opendir(dir);
	if (d == NULL)
		return -errno;
	/*
	 * A temporary is only ever stale for us: each state file has one
	 * writer, the daemon that owns it, which writes from its loop and
	 * calls this at load, never during its own statefile_write(). Two
	 * daemons sharing one state file would be a configuration error
	 * anyway (each would overwrite the other's file).
	 */
	while ((e = readdir(d)) != NULL) {
		struct stat st;

		if (!is_temp_of(e->d_name, base, blen))
			continue;
		/* Regular files only: a directory or a symlink of that name
		 * is someone's, not ours. */
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		if (unlinkat(dirfd(d), e->d_name, 0) == 0)
			n++;
	}
	closedir(d);
	return n;
}

static int replace(const char *path, const void *data, size_t len, bool durable)
{
	char tmp[PATH_MAX], dir[PATH_MAX];
	int fd, dfd, r;

	r = dir_of(path, dir, sizeof(dir));
	if (r < 0)
		return r;
	r = snprintf(tmp, sizeof(tmp), "%s" TMP_SUFFIX "XXXXXX", path);
	if (r < 0 || (size_t)r >= sizeof(tmp))
		return -ENAMETOOLONG;
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fchmod(fd, 0640) < 0)
		goto fail;
	r = write_all(fd, data, len);
	if (r < 0) {
		errno = -r;
		goto fail;
	}
	if (durable && fsync(fd) < 0)
		goto fail;
	if (close(fd) < 0) {
		fd = -1;
		goto fail;
	}
	fd = -1;
	if (rename(tmp, path) < 0)
		goto fail;
	if (!durable)
		return 0;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	r = fsync(dfd) < 0 ? -errno : 0;
	close(dfd);
	return r;
fail:
	r = -errno;
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	return r;
}

int statefile_write(const char *path, const void *data, size_t len)
{
	return replace(path, data, len, true);
}

int statefile_replace(const char *path, const void *data, size_t len)
{
	return replace(path, data, len, false);
}

int statefile_read(const char *path, size_t max, char **out, size_t *len)
{
	struct stat st;
	char *buf = NULL;
	size_t got = 0;
	int fd, r;

	*out = NULL;
	*len = 0;
	/* Stale temporaries go even when the file itself is missing (a crash
	 * during the very first write). */
	(void)statefile_remove_temps(path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		goto fail;
	if (!S_ISREG(st.st_mode)) {
		errno = EINVAL;
		goto fail;
	}
	if ((unsigned long long)st.st_size > max) {
		errno = EFBIG;
		goto fail;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (buf == NULL)
		goto fail;
	/* Read to EOF with the cap in force, in case the file grows. */
	for (;;) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size + 1 - got);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			goto fail;
		}
		if (n == 0)
			break;
		got += (size_t)n;
		if (got > (size_t)st.st_size) {
			errno = EFBIG;
			goto fail;
		}
	}
	close(fd);
	buf[got] = '\0';
	*out = buf;
	*len = got;
	return 0;
fail:
	r = -errno;
	free(buf);
	close(fd);
	return r;
}

int statefile_quarantine(const char *path, char *newpath, size_t size)
{
	int n = snprintf(newpath, size, "%s.corrupt-%lld", path, (long long)time(NULL));

	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	if (rename(path, newpath) < 0)
		return -errno;
	return 0;
}

int statefile_mkdirs(const char *dir)
{
	char tmp[PATH_MAX];
	size_t len = strlen(dir);

	if (len == 0 || len >= sizeof(tmp))
		return -EINVAL;
	memcpy(tmp, dir, len + 1);
	for (size_t i = 1; i <= len; i++) {
		if (tmp[i] != '/' && tmp[i] != '\0')
			continue;
		tmp[i] = '\0';
		if (mkdir(tmp, 0750) < 0) {
			struct stat st;

			if (errno != EEXIST)
				return -errno;
			/* EEXIST also means a file is in the way: that is no
			 * directory to put state in. */
			if (stat(tmp, &st) < 0)
				return -errno;
			if (!S_ISDIR(st.st_mode))
				return -ENOTDIR;
		}
		tmp[i] = dir[i];
	}
	return 0;
}
