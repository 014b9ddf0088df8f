/*
 * Logging: one line per event on stderr.
 *
 * When stderr is the systemd journal (JOURNAL_STREAM names stderr's device and
 * inode, or log_init() is told so) each line starts with the syslog priority
 * "<N>" and carries no timestamp; otherwise it starts with an ISO-8601 UTC
 * stamp. Lines read "event key=value ...". The level is tested before any
 * formatting, so debug calls cost one branch when --debug is off.
 */
#ifndef LOG_H
#define LOG_H

#include <stdbool.h>
#include <stddef.h>

enum log_level {
	LOG_LEVEL_FATAL = 2, /* syslog LOG_CRIT */
	LOG_LEVEL_ERR = 3,
	LOG_LEVEL_WARN = 4,
	LOG_LEVEL_INFO = 6,
	LOG_LEVEL_DEBUG = 7,
};

enum log_target {
	LOG_TARGET_AUTO = 0, /* journal if JOURNAL_STREAM matches stderr */
	LOG_TARGET_PLAIN,
	LOG_TARGET_JOURNAL,
};

/* Process-wide settings; the only globals we allow. */
extern enum log_level log_max_level;

/* Sets the threshold and where lines go; safe to call again (SIGHUP). */
void log_init(enum log_level max, enum log_target target);
bool log_is_journal(void);

void log_emit(enum log_level lvl, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * A status line kept under the log when stderr is a terminal (not the
 * journal, not a file): redrawn in place by each call, and again after every
 * log line, so progress reads as one line per peer that moves. NULL or ""
 * clears it. log_status_on says whether there is a terminal to draw on.
 */
#define LOG_STATUS_MAX   (2048)
#define LOG_STATUS_LINES (16) /* lines at most; "\n" between them */
void log_status(const char *text);
bool log_status_on(void);

#define log_enabled(lvl) ((lvl) <= log_max_level)

/* log_warn appends ": strerror(errno)"; the x variants do not. */
#define log_warn(...)                                                                              \
	do {                                                                                       \
		if (log_enabled(LOG_LEVEL_WARN))                                                   \
			log_emit(LOG_LEVEL_WARN, errno, __VA_ARGS__);                              \
	} while (0)
#define log_warnx(...)                                                                             \
	do {                                                                                       \
		if (log_enabled(LOG_LEVEL_WARN))                                                   \
			log_emit(LOG_LEVEL_WARN, 0, __VA_ARGS__);                                  \
	} while (0)
#define log_err(...) log_emit(LOG_LEVEL_ERR, 0, __VA_ARGS__)
#define log_info(...)                                                                              \
	do {                                                                                       \
		if (log_enabled(LOG_LEVEL_INFO))                                                   \
			log_emit(LOG_LEVEL_INFO, 0, __VA_ARGS__);                                  \
	} while (0)
#define log_debug(...)                                                                             \
	do {                                                                                       \
		if (log_enabled(LOG_LEVEL_DEBUG))                                                  \
			log_emit(LOG_LEVEL_DEBUG, 0, __VA_ARGS__);                                 \
	} while (0)

/*
 * IPv4 addresses in every line from now on: the host part of a public one
 * masked ("203.0.113.47" -> "203.0.113.x"); loopback, 10/8, 172.16/12,
 * 192.168/16 and 169.254/16 left as they are (netpunch's lobby.py redact,
 * for logs players share), and 0/8 too (0.0.0.0 is nobody's). Global
 * IPv6 addresses (2000::/3) keep their /48, the rest masked
 * ("[2001:db8:1:2::5]:9" -> "[2001:db8:1::x]:9"); ::1, fe80::/10, fc00::/7
 * and the v4-mapped stay (the IPv4 rule masks a mapped public address's
 * tail). Off by default.
 */
void log_set_redact(bool on);
/* Masks text (len bytes) into out (size bytes, NUL-terminated); returns the
 * length written. The rule of log_set_redact, whether it is on or not. */
size_t log_redact(const char *text, size_t len, char *out, size_t size);

/*
 * A tap: fn sees every line emitted from now on (its text after the stamp,
 * redacted as the line is, without the newline), from whichever thread
 * logs it. NULL removes it. fn must not log.
 */
typedef void log_tap_fn(const char *text, size_t len, void *arg);
void log_set_tap(log_tap_fn *fn, void *arg);

/* An info line without the timestamp (a contract line such as "ready
 * listen=..." that tests and scripts match from the start). */
void log_bare(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Log at the fatal level, then exit(1). */
_Noreturn void log_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void log_fatalx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * A per-reason limiter for warnings caused by remote peers: at most one line
 * per interval, reporting how many were suppressed in between.
 */
struct log_ratelimit {
	long long next_ms;
	unsigned long suppressed;
};
/* True when a line may be printed now; *suppressed gets the skipped count. */
bool log_ratelimit_ok(struct log_ratelimit *rl, long long now_ms, long long interval_ms,
		      unsigned long *suppressed);

#endif
