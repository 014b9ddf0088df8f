#include "daemon.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signal.h>

#include "addr.h"
#include "num.h"
#include "sdnotify.h"

/* The program name for usage errors: set once by daemon_init, read by
 * daemon_die_usage (a logger-like setting, not state). */
static const char *daemon_prog = "rally";

enum {
	OPT_LOG = 1,
	OPT_DEBUG,
	OPT_CHECK,
	OPT_HELP,
	OPT_VERSION,
	OPT_TABLE = 256, /* + the index in the caller's table */
};

void daemon_init(struct daemon *d, const char *prog, const char *usage)
{
	memset(d, 0, sizeof(*d));
	d->prog = prog;
	d->usage = usage;
	d->log_target = LOG_TARGET_AUTO;
	ev_timer_init(&d->watchdog);
	daemon_prog = prog;
	ev_block_signals();
}

void daemon_die_usage(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", daemon_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help'.\n", daemon_prog);
	exit(DAEMON_EXIT_USAGE);
}

long long daemon_parse_num(const char *s, long long min, long long max, const char *what)
{
	int64_t v;
	int r = num_parse_str(s, min, max, 0, &v);

	if (r == -ERANGE)
		daemon_die_usage("%s %s: out of range (%lld..%lld)", what, s, min, max);
	if (r < 0)
		daemon_die_usage("%s %s: not a number", what, s);
	return (long long)v;
}

void daemon_copy(char *dst, size_t size, const char *src, const char *what, bool nonempty)
{
	size_t n = strlen(src);

	if (n >= size || (nonempty && n == 0))
		daemon_die_usage("%s: %s", what, nonempty ? "empty or too long" : "too long");
	memcpy(dst, src, n + 1);
}

static void set_num(const struct daemon_flag *f, const char *arg)
{
	char what[64];
	long long v;

	snprintf(what, sizeof(what), "--%s", f->name);
	v = daemon_parse_num(arg, f->min, f->max, what);
	if (f->scale > 1) {
		if (v > LLONG_MAX / f->scale)
			daemon_die_usage("%s %s: out of range", what, arg);
		v *= f->scale;
	}
	switch (f->size) {
	case 2:
		*(uint16_t *)f->dst = (uint16_t)v;
		break;
	case 4:
		*(uint32_t *)f->dst = (uint32_t)v;
		break;
	case 8:
		*(int64_t *)f->dst = (int64_t)v;
		break;
	default:
		/* A table bug, not an operator's mistake. */
		fprintf(stderr, "%s: --%s: unsupported integer size %zu\n", daemon_prog, f->name,
			f->size);
		abort();
	}
}

static void apply(struct daemon_flag *f, const char *arg)
{
	char what[64];

	snprintf(what, sizeof(what), "--%s", f->name);
	f->seen = true;
	switch (f->kind) {
	case DAEMON_FLAG_BOOL:
		*(bool *)f->dst = true;
		break;
	case DAEMON_FLAG_STR:
	case DAEMON_FLAG_STR_SET:
		daemon_copy(f->dst, f->size, arg, what, f->kind == DAEMON_FLAG_STR_SET);
		break;
	case DAEMON_FLAG_NUM:
		set_num(f, arg);
		break;
	case DAEMON_FLAG_ADDR:
		if (addr_parse(f->dst, arg, -1) < 0)
			daemon_die_usage("%s %s: expected IP:PORT", what, arg);
		break;
	case DAEMON_FLAG_FN:
	case DAEMON_FLAG_FN0:
		f->fn(f->ctx, arg);
		break;
	case DAEMON_FLAG_IGNORE:
	case DAEMON_FLAG_IGNORE_ARG:
		break;
	}
}

static bool takes_arg(enum daemon_flag_kind k)
{
	return k != DAEMON_FLAG_BOOL && k != DAEMON_FLAG_FN0 && k != DAEMON_FLAG_IGNORE;
}

int daemon_parse(struct daemon *d, int argc, char **argv, struct daemon_flag *flags, size_t n)
{
	static const struct option common[] = {
		{"log", required_argument, NULL, OPT_LOG},
		{"debug", no_argument, NULL, OPT_DEBUG},
		{"check-config", no_argument, NULL, OPT_CHECK},
		{"help", no_argument, NULL, OPT_HELP},
		{"version", no_argument, NULL, OPT_VERSION},
	};
	const size_t ncommon = sizeof(common) / sizeof(common[0]);
	struct option opts[DAEMON_MAX_FLAGS + sizeof(common) / sizeof(common[0]) + 1];
	int o;

	if (n > DAEMON_MAX_FLAGS) {
		fprintf(stderr, "%s: %zu flags, at most %d\n", d->prog, n, DAEMON_MAX_FLAGS);
		abort();
	}
	memset(opts, 0, sizeof(opts));
	for (size_t i = 0; i < n; i++) {
		opts[i].name = flags[i].name;
		opts[i].has_arg = takes_arg(flags[i].kind) ? required_argument : no_argument;
		opts[i].val = OPT_TABLE + (int)i;
		flags[i].seen = false;
	}
	memcpy(opts + n, common, sizeof(common));
	(void)ncommon;
	optind = 0; /* GNU getopt: start over, argv[0] is the name */
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case OPT_LOG:
			if (strcmp(optarg, "auto") == 0)
				d->log_target = LOG_TARGET_AUTO;
			else if (strcmp(optarg, "plain") == 0)
				d->log_target = LOG_TARGET_PLAIN;
			else if (strcmp(optarg, "journal") == 0)
				d->log_target = LOG_TARGET_JOURNAL;
			else
				daemon_die_usage("--log %s: auto, plain or journal", optarg);
			break;
		case OPT_DEBUG:
			d->debug = true;
			break;
		case OPT_CHECK:
			d->check = true;
			break;
		case OPT_HELP:
			fputs(d->usage, stdout);
			exit(DAEMON_EXIT_OK);
		case OPT_VERSION:
			if (d->version_note != NULL)
				printf("%s %s %s\n", d->prog, RALLY_VERSION, d->version_note);
			else
				printf("%s %s\n", d->prog, RALLY_VERSION);
			exit(DAEMON_EXIT_OK);
		default:
			if (o >= OPT_TABLE && (size_t)(o - OPT_TABLE) < n) {
				apply(&flags[o - OPT_TABLE], optarg);
				break;
			}
			/* getopt has said what was wrong. */
			fprintf(stderr, "Try '%s --help'.\n", d->prog);
			exit(DAEMON_EXIT_USAGE);
		}
	}
	return optind;
}

bool daemon_flag_seen(const struct daemon_flag *flags, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(flags[i].name, name) == 0)
			return flags[i].seen;
	}
	return false;
}

unsigned long long daemon_raise_nofile(unsigned long long want, const char *what)
{
	struct rlimit rl;
	unsigned long long got = 0;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		got = rl.rlim_cur;
		if (rl.rlim_cur < want) {
			rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want
					      ? want
					      : rl.rlim_max;
			if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
				got = rl.rlim_cur;
		}
	}
	if (got < want)
		log_warnx("nofile-low limit=%llu want=%llu for=%s", got, want, what);
	return got;
}

/* ---- signals ---- */

static const char *signame(int signo)
{
	switch (signo) {
	case SIGINT:
		return "SIGINT";
	case SIGTERM:
		return "SIGTERM";
	case SIGHUP:
		return "SIGHUP";
	default:
		return "other";
	}
}

static void on_signal(int signo, void *arg)
{
	struct daemon *d = arg;

	if (signo == SIGINT || signo == SIGTERM) {
		if (d->stopping) {
			/* The second one: no more waiting. */
			ev_loop_stop(d->loop);
			return;
		}
		d->stopping = true;
		log_info("stopping signal=%s", signame(signo));
		sdnotify("STOPPING=1");
		if (d->on_stop != NULL)
			d->on_stop(d, d->arg);
		else
			ev_loop_stop(d->loop);
	} else if (signo == SIGHUP) {
		if (d->on_reload != NULL) {
			log_info("reload signal=%s", signame(signo));
			d->on_reload(d, d->arg);
		} else {
			log_info("reload signal=%s nothing-to-reload", signame(signo));
		}
	}
}

void daemon_set_handlers(struct daemon *d, daemon_signal_fn *on_stop, daemon_signal_fn *on_reload,
			 void *arg)
{
	d->on_stop = on_stop;
	d->on_reload = on_reload;
	d->arg = arg;
}

void daemon_start(struct daemon *d)
{
	log_init(d->debug ? LOG_LEVEL_DEBUG : LOG_LEVEL_INFO, d->log_target);
	if (sodium_init() < 0)
		log_fatalx("sodium-init-fail");
	d->loop = ev_loop_new();
	if (d->loop == NULL)
		log_fatal("loop-init-fail");
	ev_signal_set(d->loop, on_signal, d);
}

/* ---- ready, watchdog ---- */

static void on_watchdog(struct ev_timer *t, void *arg)
{
	struct daemon *d = arg;

	sdnotify("WATCHDOG=1");
	ev_timer_start(d->loop, t, d->watchdog_ms / 2, on_watchdog, d);
}

void daemon_ready(struct daemon *d, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	log_bare("ready %s", line);
	sdnotify("READY=1");
	d->watchdog_ms = sdnotify_watchdog_ms();
	if (d->watchdog_ms > 0)
		ev_timer_start(d->loop, &d->watchdog, d->watchdog_ms / 2, on_watchdog, d);
}

void daemon_free(struct daemon *d)
{
	if (d->loop == NULL)
		return;
	ev_timer_stop(d->loop, &d->watchdog);
	ev_loop_free(d->loop);
	d->loop = NULL;
}
