/*
 * Log forwarding and the host's merged log (lobby_logfwd.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lobby_logfwd.h"

/* A line's bytes at most: 240 characters of up to 4 bytes. */
#define LINE_BYTES (LOBBY_LOG_LINE_MAX * 4 + 1)
#define TAIL_READ  (64 * 1024)

struct tail {
	char path[PATH_MAX];
	char tag[256];
	long long off;
};

struct lobby_logfwd {
	pthread_mutex_t lock;
	char (*q)[LINE_BYTES];
	size_t head, n; /* the oldest line, how many */
	unsigned long long dropped;
	struct tail tails[LOBBY_LOG_TAILS_MAX];
	size_t ntails;
	long long last_flush;
	bool flushed; /* last_flush is set */
	char buf[TAIL_READ + 1];
};

/* The byte length of the first max characters of s (n bytes). */
static size_t chars_prefix(const char *s, size_t n, size_t max, size_t *chars)
{
	size_t c = 0, i = 0;

	while (i < n) {
		if (((unsigned char)s[i] & 0xc0) != 0x80) {
			if (c == max)
				break;
			c++;
		}
		i++;
	}
	if (chars != NULL)
		*chars = c;
	return i;
}

void lobby_logfwd_add(struct lobby_logfwd *f, const char *line, size_t len, const char *tag)
{
	char tmp[LINE_BYTES * 2];
	size_t n = 0, chars, cut;
	char *slot;

	if (f == NULL)
		return;
	if (tag != NULL)
		n = (size_t)snprintf(tmp, sizeof(tmp), "[%s] ", tag);
	if (n >= sizeof(tmp))
		n = 0;
	if (len > sizeof(tmp) - n - 1)
		len = sizeof(tmp) - n - 1;
	memcpy(tmp + n, line, len);
	n += len;
	/* lobby.py: line[:LOG_LINE_MAX - 3] + "..." when longer. */
	cut = chars_prefix(tmp, n, LOBBY_LOG_LINE_MAX, &chars);
	if (cut < n) {
		cut = chars_prefix(tmp, n, LOBBY_LOG_LINE_MAX - 3, NULL);
		memcpy(tmp + cut, "...", 3);
		cut += 3;
	}
	pthread_mutex_lock(&f->lock);
	if (f->n == LOBBY_LOG_QUEUE_MAX) {
		f->head = (f->head + 1) % LOBBY_LOG_QUEUE_MAX;
		f->n--;
		f->dropped++;
	}
	slot = f->q[(f->head + f->n) % LOBBY_LOG_QUEUE_MAX];
	memcpy(slot, tmp, cut < LINE_BYTES ? cut : LINE_BYTES - 1);
	slot[cut < LINE_BYTES ? cut : LINE_BYTES - 1] = '\0';
	f->n++;
	pthread_mutex_unlock(&f->lock);
}

static void poll_one(struct lobby_logfwd *f, struct tail *t)
{
	struct stat st;
	ssize_t got;
	size_t start = 0;
	int fd;

	if (stat(t->path, &st) < 0)
		return;
	if (st.st_size < t->off)
		t->off = 0; /* truncated or rotated: from the start */
	if (st.st_size == t->off)
		return;
	fd = open(t->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	got = pread(fd, f->buf, TAIL_READ, t->off);
	close(fd);
	if (got <= 0)
		return;
	t->off += got;
	/* lobby.py splitlines + rstrip, empty lines skipped. */
	for (size_t i = 0; i <= (size_t)got; i++) {
		if (i < (size_t)got && f->buf[i] != '\n' && f->buf[i] != '\r')
			continue;
		size_t end = i;

		while (end > start && (f->buf[end - 1] == ' ' || f->buf[end - 1] == '\t'))
			end--;
		if (end > start)
			lobby_logfwd_add(f, f->buf + start, end - start, t->tag);
		start = i + 1;
	}
}

void lobby_logfwd_poll(struct lobby_logfwd *f)
{
	for (size_t i = 0; f != NULL && i < f->ntails; i++)
		poll_one(f, &f->tails[i]);
}

size_t lobby_logfwd_drain(struct lobby_logfwd *f, long long now_ms, bool force, char *out,
			  size_t outsize, const char **v, size_t max)
{
	size_t n = 0, at = 0, size = 0;

	if (f == NULL || max == 0)
		return 0;
	if (!force && f->flushed && now_ms - f->last_flush < LOBBY_LOG_FLUSH_MS)
		return 0;
	f->flushed = true;
	f->last_flush = now_ms;
	pthread_mutex_lock(&f->lock);
	if (f->dropped > 0) {
		int r = snprintf(out, outsize, "[log] %llu lines dropped (queue full)", f->dropped);

		if (r > 0 && (size_t)r < outsize) {
			v[n++] = out;
			at = (size_t)r + 1;
			f->dropped = 0;
		}
	}
	while (f->n > 0 && n < max) {
		const char *line = f->q[f->head];
		size_t len = strlen(line), chars;

		chars_prefix(line, len, LOBBY_LOG_LINE_MAX, &chars);
		/* lobby.py counts characters plus 4 (the JSON quotes and ", "). */
		if (size + chars + 4 > LOBBY_LOG_BATCH_BYTES || at + len + 1 > outsize)
			break;
		memcpy(out + at, line, len + 1);
		v[n++] = out + at;
		at += len + 1;
		size += chars + 4;
		f->head = (f->head + 1) % LOBBY_LOG_QUEUE_MAX;
		f->n--;
	}
	pthread_mutex_unlock(&f->lock);
	return n;
}

struct lobby_logfwd *lobby_logfwd_new(const char *const *paths, size_t npaths)
{
	struct lobby_logfwd *f = calloc(1, sizeof(*f));

	if (f == NULL)
		return NULL;
	f->q = calloc(LOBBY_LOG_QUEUE_MAX, sizeof(*f->q));
	if (f->q == NULL) {
		free(f);
		return NULL;
	}
	pthread_mutex_init(&f->lock, NULL);
	for (size_t i = 0; i < npaths && f->ntails < LOBBY_LOG_TAILS_MAX; i++) {
		struct tail *t = &f->tails[f->ntails];
		const char *base = strrchr(paths[i], '/');
		struct stat st;

		if (snprintf(t->path, sizeof(t->path), "%s", paths[i]) >= (int)sizeof(t->path))
			continue;
		snprintf(t->tag, sizeof(t->tag), "%s", base != NULL ? base + 1 : paths[i]);
		/* One that exists: this session's lines only. */
		t->off = stat(t->path, &st) == 0 ? (long long)st.st_size : 0;
		f->ntails++;
	}
	return f;
}

void lobby_logfwd_free(struct lobby_logfwd *f)
{
	if (f == NULL)
		return;
	pthread_mutex_destroy(&f->lock);
	free(f->q);
	free(f);
}

/* ---- the merged log ---- */

struct lobby_peerslog {
	FILE *fp;
};

struct lobby_peerslog *lobby_peerslog_open(const char *dir)
{
	struct lobby_peerslog *p;
	char path[PATH_MAX], keep[PATH_MAX], stamp[32];
	struct stat st;
	time_t now = time(NULL);
	struct tm tm;
	bool append;

	if (snprintf(path, sizeof(path), "%s/%s", dir, LOBBY_PEERS_LOG) >= (int)sizeof(path) ||
	    snprintf(keep, sizeof(keep), "%s/%s", dir, LOBBY_KEEP_LOGS_FILE) >= (int)sizeof(keep)) {
		errno = ENAMETOOLONG;
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		return NULL;
	append = stat(keep, &st) == 0 && S_ISREG(st.st_mode);
	p->fp = fopen(path, append ? "ae" : "we");
	if (p->fp == NULL) {
		free(p);
		return NULL;
	}
	localtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
	fprintf(p->fp, "%s# merged lobby log, started %s%s\n", append ? "\n" : "", stamp,
		append ? " (tpf2mp_keep_logs.txt present: appending)" : "");
	fflush(p->fp);
	return p;
}

void lobby_peerslog_close(struct lobby_peerslog *p)
{
	if (p == NULL)
		return;
	fclose(p->fp);
	free(p);
}

void lobby_peerslog_write(struct lobby_peerslog *p, const char *who, const char *const *lines,
			  size_t n)
{
	char stamp[16];
	time_t now = time(NULL);
	struct tm tm;

	if (p == NULL || n == 0)
		return;
	localtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
	for (size_t i = 0; i < n; i++)
		fprintf(p->fp, "%s [%s] %s\n", stamp, who, lines[i]);
	fflush(p->fp);
}

size_t lobby_log_clean(const char *in, char *out, size_t size)
{
	size_t len = strlen(in), cut = chars_prefix(in, len, LOBBY_LOG_LINE_MAX, NULL);

	if (size == 0)
		return 0;
	if (cut > size - 1)
		cut = size - 1;
	for (size_t i = 0; i < cut; i++)
		out[i] = (unsigned char)in[i] < 0x20 ? ' ' : in[i];
	out[cut] = '\0';
	return cut;
}
