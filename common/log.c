#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
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
/* The status line under the log on a terminal (log_status). */
static pthread_mutex_t status_lock = PTHREAD_MUTEX_INITIALIZER;
static char status[LOG_STATUS_MAX];
static size_t status_len;
static unsigned status_lines;
static int status_tty = -1; /* -1: not asked yet */
static bool redact_on;
static log_tap_fn *tap_fn;
static void *tap_arg;
static __thread bool in_tap; /* a tap's own logging is not tapped again */

void log_set_redact(bool on)
{
	redact_on = on;
}

void log_set_tap(log_tap_fn *fn, void *arg)
{
	pthread_mutex_lock(&status_lock);
	tap_fn = fn;
	tap_arg = arg;
	pthread_mutex_unlock(&status_lock);
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Python's \w for ASCII: what a \b needs on the other side. */
static bool is_word(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
	       (unsigned char)c >= 0x80;
}

/* A run of 1-3 digits at p (of at most n): its length, else 0. */
static size_t octet(const char *p, size_t n)
{
	size_t k = 0;

	while (k < n && is_digit(p[k]))
		k++;
	return k >= 1 && k <= 3 ? k : 0;
}

/* \b(\d{1,3}\.\d{1,3}\.\d{1,3})\.(\d{1,3})\b at text[i]: the length of the
 * match and of its first three octets, else 0. */
static size_t ipv4_at(const char *t, size_t len, size_t i, size_t *head)
{
	size_t at = i, k;

	if (i > 0 && is_word(t[i - 1]))
		return 0;
	for (int g = 0; g < 4; g++) {
		k = octet(t + at, len - at);
		if (k == 0)
			return 0;
		at += k;
		if (g == 2)
			*head = at - i;
		if (g < 3) {
			if (at >= len || t[at] != '.')
				return 0;
			at++;
		}
	}
	if (at < len && is_word(t[at]))
		return 0;
	return at - i;
}

/* The private and loopback ranges netpunch leaves alone. */
static bool keep_ip(const char *h, size_t hn)
{
	static const char *const keep[] = {"127.", "10.", "192.168.", "169.254.", "0."};
	unsigned second = 0;

	for (size_t k = 0; k < sizeof(keep) / sizeof(keep[0]); k++) {
		size_t kl = strlen(keep[k]);

		if (hn >= kl && memcmp(h, keep[k], kl) == 0)
			return true;
	}
	if (hn < 4 || memcmp(h, "172.", 4) != 0)
		return false;
	for (size_t k = 4; k < hn && is_digit(h[k]); k++)
		second = second * 10 + (unsigned)(h[k] - '0');
	return second >= 16 && second <= 31;
}

static bool is_hex(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/*
 * An IPv6 address at text[i] (a run of hex digits and colons with a colon
 * in it twice, nothing of a word or a dot on either side, that inet_pton
 * takes): the run's length and the address in *a, else 0.
 * A run followed by a dot is a v4-mapped address's head: the IPv4 rule
 * masks its tail.
 */
static size_t ipv6_at(const char *t, size_t len, size_t i, struct in6_addr *a)
{
	char buf[INET6_ADDRSTRLEN];
	size_t at = i, colons = 0;

	if (i > 0 && (is_word(t[i - 1]) || t[i - 1] == ':' || t[i - 1] == '.'))
		return 0;
	while (at < len && (is_hex(t[at]) || t[at] == ':') && at - i < sizeof(buf) - 1)
		colons += t[at++] == ':';
	if (colons < 2 || (at < len && (is_word(t[at]) || t[at] == '.' || t[at] == ':')))
		return 0;
	memcpy(buf, t + i, at - i);
	buf[at - i] = '\0';
	if (inet_pton(AF_INET6, buf, a) != 1)
		return 0;
	return at - i;
}

/* Global unicast (2000::/3) is masked; loopback, link-local, unique local
 * and the v4-mapped are not public addresses of a player, and a /48 with
 * nothing after it names a site, not a host. */
static bool keep_ip6(const struct in6_addr *a)
{
	static const uint8_t zero[10];

	return (a->s6_addr[0] & 0xe0) != 0x20 || memcmp(a->s6_addr + 6, zero, 10) == 0;
}

size_t log_redact(const char *t, size_t len, char *out, size_t size)
{
	size_t o = 0, i = 0;

	if (size == 0)
		return 0;
	while (i < len && o + 1 < size) {
		size_t head = 0, m = is_digit(t[i]) ? ipv4_at(t, len, i, &head) : 0;
		struct in6_addr a6;
		size_t m6 = m == 0 && (is_hex(t[i]) || t[i] == ':') ? ipv6_at(t, len, i, &a6) : 0;

		if (m6 > 0 && !keep_ip6(&a6)) {
			char p[INET6_ADDRSTRLEN + 2];
			size_t pl, c;

			memset(a6.s6_addr + 6, 0, 10);
			inet_ntop(AF_INET6, &a6, p, sizeof(p) - 2);
			pl = strlen(p);
			/* "2001:db8:1::" + "x"; a /48 with zeros ends "::" too. */
			p[pl++] = 'x';
			c = pl < size - 1 - o ? pl : size - 1 - o;
			memcpy(out + o, p, c);
			o += c;
			i += m6;
			continue;
		}
		if (m6 > 0) {
			size_t c = m6 < size - 1 - o ? m6 : size - 1 - o;

			memcpy(out + o, t + i, c);
			o += c;
			i += m6;
			continue;
		}
		if (m == 0) {
			out[o++] = t[i++];
			continue;
		}
		if (keep_ip(t + i, head)) {
			size_t c = m < size - 1 - o ? m : size - 1 - o;

			memcpy(out + o, t + i, c);
			o += c;
		} else {
			size_t c = head < size - 1 - o ? head : size - 1 - o;

			memcpy(out + o, t + i, c);
			o += c;
			if (o + 2 < size) {
				memcpy(out + o, ".x", 2);
				o += 2;
			}
		}
		i += m;
	}
	out[o] = '\0';
	return o;
}

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

/* The escapes that blank the status lines, the cursor left at the first. */
static size_t erase(char *out)
{
	size_t k = 0;

	memcpy(out, "\r\033[K", 4);
	k = 4;
	for (unsigned i = 1; i < status_lines; i++) {
		memcpy(out + k, "\033[A\033[K", 6);
		k += 6;
	}
	return k;
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
	if (redact_on) {
		char masked[sizeof(line)];
		size_t body = journal || stamp
				      ? (size_t)(strchr(line, journal ? '>' : ' ') - line) + 1
				      : 0;

		if (body > n)
			body = 0;
		memcpy(masked, line, body);
		n = body +
		    log_redact(line + body, n - body, masked + body, sizeof(masked) - body - 1);
		memcpy(line, masked, n);
	}
	line[n] = '\0';
	pthread_mutex_lock(&status_lock);
	if (tap_fn != NULL && !in_tap) {
		size_t body = journal || stamp
				      ? (size_t)(strchr(line, journal ? '>' : ' ') - line) + 1
				      : 0;

		in_tap = true;
		tap_fn(line + body, n - body, tap_arg);
		in_tap = false;
	}
	line[n++] = '\n';
	if (status_len > 0) {
		/* Over the status lines, then the status lines again. */
		char both[sizeof(line) + sizeof(status) + LOG_STATUS_LINES * 8];
		size_t k = erase(both);

		memcpy(both + k, line, n);
		memcpy(both + k + n, status, status_len);
		(void)!write(STDERR_FILENO, both, k + n + status_len);
	} else {
		/* One write per line keeps lines whole when several processes
		 * share stderr. */
		(void)!write(STDERR_FILENO, line, n);
	}
	pthread_mutex_unlock(&status_lock);
}

bool log_status_on(void)
{
	if (status_tty < 0)
		status_tty = !journal && isatty(STDERR_FILENO) ? 1 : 0;
	return status_tty == 1;
}

void log_status(const char *text)
{
	size_t n = text != NULL ? strlen(text) : 0, k;
	char out[LOG_STATUS_MAX + LOG_STATUS_LINES * 8];
	unsigned lines = n > 0 ? 1 : 0;

	if (!log_status_on())
		return;
	if (n >= sizeof(status))
		n = sizeof(status) - 1;
	for (size_t i = 0; i < n; i++) {
		if (text[i] == '\n' && ++lines > LOG_STATUS_LINES) {
			n = i;
			lines--;
			break;
		}
	}
	pthread_mutex_lock(&status_lock);
	k = erase(out);
	memcpy(status, text != NULL ? text : "", n);
	status_len = n;
	status_lines = lines;
	memcpy(out + k, status, n);
	(void)!write(STDERR_FILENO, out, k + n);
	pthread_mutex_unlock(&status_lock);
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
