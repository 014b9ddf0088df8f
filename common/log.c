#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "num.h"

enum log_level log_max_level = LOG_LEVEL_INFO;
static bool journal;

static bool stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM"), *p;
	struct stat st;
	uint64_t dev, ino;
	int n;

	if (js == NULL || fstat(STDERR_FILENO, &st) < 0)
		return false;
	/* JOURNAL_STREAM is "<device>:<inode>" in decimal (systemd.exec(5)). */
	n = num_prefix_u64(js, strlen(js), UINT64_MAX, &dev);
	if (n < 0 || js[n] != ':')
		return false;
	p = js + n + 1;
	n = num_prefix_u64(p, strlen(p), UINT64_MAX, &ino);
	if (n < 0 || p[n] != '\0')
		return false;
	return (uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino;
}

void log_init(enum log_level max, enum log_target target)
{
	log_max_level = max;
	if (target == LOG_TARGET_AUTO)
		journal = stderr_is_journal();
	else
		journal = target == LOG_TARGET_JOURNAL;
}

bool log_is_journal(void)
{
	return journal;
}

static void vemit_stamp(enum log_level lvl, int errnum, bool stamp, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));
static void vemit_stamp(enum log_level lvl, int errnum, bool stamp, const char *fmt, va_list ap)
{
	char line[2048];
	size_t n = 0;
	int r = 0;

	if (journal) {
		r = snprintf(line, sizeof(line), "<%d>", (int)lvl);
	} else if (stamp) {
		struct timespec ts;
		struct tm tm;

		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		r = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ ",
			     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
			     tm.tm_sec, ts.tv_nsec / 1000000);
	}
	if (r > 0)
		n = (size_t)r;
	r = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	if (r > 0)
		n += (size_t)r;
	if (n >= sizeof(line) - 1)
		n = sizeof(line) - 2;
	if (errnum != 0 && n < sizeof(line) - 2) {
		r = snprintf(line + n, sizeof(line) - n, ": %s", strerror(errnum));
		if (r > 0)
			n += (size_t)r;
		if (n >= sizeof(line) - 1)
			n = sizeof(line) - 2;
	}
	line[n++] = '\n';
	/* One write per line keeps lines whole when several processes share stderr. */
	(void)!write(STDERR_FILENO, line, n);
}

static void vemit(enum log_level lvl, int errnum, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));
static void vemit(enum log_level lvl, int errnum, const char *fmt, va_list ap)
{
	vemit_stamp(lvl, errnum, true, fmt, ap);
}

void log_bare(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vemit_stamp(LOG_LEVEL_INFO, 0, false, fmt, ap);
	va_end(ap);
}

void log_emit(enum log_level lvl, int errnum, const char *fmt, ...)
{
	va_list ap;
	int saved = errno;

	va_start(ap, fmt);
	vemit(lvl, errnum, fmt, ap);
	va_end(ap);
	errno = saved;
}

void log_fatal(const char *fmt, ...)
{
	va_list ap;
	int e = errno;

	va_start(ap, fmt);
	vemit(LOG_LEVEL_FATAL, e, fmt, ap);
	va_end(ap);
	exit(1);
}

void log_fatalx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vemit(LOG_LEVEL_FATAL, 0, fmt, ap);
	va_end(ap);
	exit(1);
}

bool log_ratelimit_ok(struct log_ratelimit *rl, long long now_ms, long long interval_ms,
		      unsigned long *suppressed)
{
	if (now_ms < rl->next_ms) {
		rl->suppressed++;
		return false;
	}
	*suppressed = rl->suppressed;
	rl->suppressed = 0;
	rl->next_ms = now_ms + interval_ms;
	return true;
}
