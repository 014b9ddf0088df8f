/*
 * The process frame every daemon's main() shares, written once: the command
 * line (a table of flags plus the common ones: --log, --debug,
 * --check-config, --help, --version), usage errors, the descriptor limit,
 * the loop with its signals (SIGINT/SIGTERM stop, twice at once; SIGHUP
 * reloads), the sd_notify READY/WATCHDOG/STOPPING protocol and the ready
 * line. The event names and exit codes are the same in every daemon:
 *   ready <what>=<addr> ...       once bound (a contract line, no stamp)
 *   stopping signal=SIGTERM       the first SIGINT/SIGTERM
 *   reload signal=SIGHUP          SIGHUP (nothing-to-reload when so)
 *   config-ok ...                 --check-config passed
 * and exit status 0 (done), 1 (failed), 2 (bad usage).
 * For main() only: every usage error here ends the process.
 */
#ifndef DAEMON_H
#define DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ev.h"
#include "log.h"

#define DAEMON_EXIT_OK    (0)
#define DAEMON_EXIT_FAIL  (1)
#define DAEMON_EXIT_USAGE (2)
#define DAEMON_MAX_FLAGS  (64)

enum daemon_flag_kind {
	DAEMON_FLAG_BOOL,       /* no argument: *(bool *)dst = true */
	DAEMON_FLAG_STR,        /* copied into the size-byte buffer dst */
	DAEMON_FLAG_STR_SET,    /* the same, nonempty */
	DAEMON_FLAG_NUM,        /* a decimal in [min, max], times scale, into an
			       * integer of size bytes (2, 4 or 8) at dst */
	DAEMON_FLAG_ADDR,       /* IP:PORT or [IP6]:PORT into a struct addr */
	DAEMON_FLAG_FN,         /* fn(ctx, argument) */
	DAEMON_FLAG_FN0,        /* fn(ctx, NULL): a flag without argument */
	DAEMON_FLAG_IGNORE,     /* accepted, no argument, no effect */
	DAEMON_FLAG_IGNORE_ARG, /* accepted with an argument, no effect */
};

/*
 * One command-line flag. dst is borrowed for daemon_parse; seen is set by it
 * when the flag was given (the table is not const for that reason).
 */
struct daemon_flag {
	const char *name; /* without the leading "--" */
	enum daemon_flag_kind kind;
	void *dst;
	size_t size;
	long long min, max, scale;
	void (*fn)(void *ctx, const char *arg);
	void *ctx;
	bool seen;
};

/* Table entries. STR needs dst to be an array (its size is the buffer's). */
#define DAEMON_BOOL(n, p)                                                                          \
	{                                                                                          \
		.name = (n), .kind = DAEMON_FLAG_BOOL, .dst = (p), .size = sizeof(*(p))            \
	}
#define DAEMON_STR(n, buf)                                                                         \
	{                                                                                          \
		.name = (n), .kind = DAEMON_FLAG_STR, .dst = (buf), .size = sizeof(buf)            \
	}
#define DAEMON_STR_SET(n, buf)                                                                     \
	{                                                                                          \
		.name = (n), .kind = DAEMON_FLAG_STR_SET, .dst = (buf), .size = sizeof(buf)        \
	}
#define DAEMON_NUM(n, p, lo, hi, sc)                                                               \
	{                                                                                          \
		.name = (n), .kind = DAEMON_FLAG_NUM, .dst = (p), .size = sizeof(*(p)),            \
		.min = (lo), .max = (hi), .scale = (sc)                                            \
	}
#define DAEMON_ADDR(n, p)                                                                          \
	{                                                                                          \
		.name = (n), .kind = DAEMON_FLAG_ADDR, .dst = (p)                                  \
	}
#define DAEMON_FN(n, f, c)                                                                         \
	{                                                                                          \
		.name = (n), .kind = DAEMON_FLAG_FN, .fn = (f), .ctx = (c)                         \
	}
#define DAEMON_FN0(n, f, c)                                                                        \
	{                                                                                          \
		.name = (n), .kind = DAEMON_FLAG_FN0, .fn = (f), .ctx = (c)                        \
	}
#define DAEMON_IGNORE(n)                                                                           \
	{                                                                                          \
		.name = (n), .kind = DAEMON_FLAG_IGNORE                                            \
	}
/* The number of entries of a flag table (an array, not a pointer). */
#define DAEMON_NFLAGS(a) (sizeof(a) / sizeof((a)[0]))
#define DAEMON_IGNORE_ARG(n)                                                                       \
	{                                                                                          \
		.name = (n), .kind = DAEMON_FLAG_IGNORE_ARG                                        \
	}

struct daemon;
/* What a signal asks of the daemon; arg is daemon_set_handlers' arg. */
typedef void daemon_signal_fn(struct daemon *d, void *arg);

struct daemon {
	/* Set by daemon_init. */
	const char *prog;
	const char *usage;
	const char *version_note; /* printed after the version, if set */
	/* Parsed from the common flags. */
	enum log_target log_target;
	bool debug;
	bool check; /* --check-config */
	/* Running (daemon_start). */
	struct ev_loop *loop;
	struct ev_timer watchdog;
	long long watchdog_ms;
	bool stopping; /* a stop signal came (or daemon_stop was called) */
	daemon_signal_fn *on_stop, *on_reload;
	void *arg;
};

/*
 * Names the program for messages, keeps its man-page usage text for
 * --help, and blocks the signals the loop takes (before any thread starts:
 * call it first thing in main).
 */
void daemon_init(struct daemon *d, const char *prog, const char *usage);

/*
 * Parses argv[1..] against flags[0..n) and the common flags. Returns the
 * index of the first positional argument (GNU getopt moves them to the end,
 * in their order). --help prints the usage and exits 0, --version prints
 * "PROG VERSION" and exits 0, an unknown flag or a bad value is a usage
 * error (exit 2).
 */
int daemon_parse(struct daemon *d, int argc, char **argv, struct daemon_flag *flags, size_t n);
/* Whether the flag named name was on the command line. */
bool daemon_flag_seen(const struct daemon_flag *flags, size_t n, const char *name);

/* "PROG: <message>\nTry 'PROG --help'." on stderr, then exit(2). */
_Noreturn void daemon_die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A decimal in [min, max] with nothing before or after it (common/num);
 * anything else is a usage error naming what. */
long long daemon_parse_num(const char *s, long long min, long long max, const char *what);
/* Copies src into dst (size bytes with the NUL); too long, or empty when
 * nonempty is set, is a usage error naming what. */
void daemon_copy(char *dst, size_t size, const char *src, const char *what, bool nonempty);

/*
 * Starts the process proper: the logger (--log, --debug), libsodium, the
 * loop and its signals. SIGINT/SIGTERM: the first logs "stopping", tells
 * systemd STOPPING=1 and calls on_stop (default: stop the loop); a second
 * stops the loop at once. SIGHUP logs "reload" and calls on_reload. Any
 * failure here is fatal (exit 1).
 */
void daemon_start(struct daemon *d);
void daemon_set_handlers(struct daemon *d, daemon_signal_fn *on_stop, daemon_signal_fn *on_reload,
			 void *arg);

/*
 * Raises RLIMIT_NOFILE's soft limit to want (as far as the hard limit
 * allows) and logs nofile-low with what when it could not.
 * Returns the soft limit now in force.
 */
unsigned long long daemon_raise_nofile(unsigned long long want, const char *what);

/* Prints "ready <fmt...>" (no stamp), tells systemd READY=1 and starts the
 * watchdog when systemd asked for one. */
void daemon_ready(struct daemon *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Stops the watchdog and frees the loop (after every module is freed). */
void daemon_free(struct daemon *d);

#endif
