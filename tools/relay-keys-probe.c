/*
 * relay-keys-probe: drives relay/relay_keys on a loop, for
 * tests/integ/relay_keys_pg.py and for operators checking a keys source.
 *
 *   relay-keys-probe (--pg CONNINFO | --file PATH) [--stdin] [--debug] [REALM_ID...]
 *
 * Looks up each REALM_ID given, prints one line per answer and exits once
 * all are answered. With --stdin it also reads commands, one per line,
 * until EOF or "quit" (then waits for what is pending):
 *   REALM_ID           a lookup
 *   burst N REALM_ID   N lookups of it at once (the queue's cap)
 *   cancel REALM_ID    a lookup cancelled right after it was made
 *   reload             relay_keys_reload()
 *   metrics            relay_keys_metrics(), between two marker lines
 * Output on stdout, flushed per line (the log goes to stderr):
 *   ready mode=pg|file realms=N
 *   result id=ID res=found|unknown|error ms=N [pk=HEX]   ms since the lookup
 *   cancelled id=ID
 *   reload rc=N realms=N
 *   metrics-begin ... metrics-end
 * A public key is printed whole: it is public, and the test compares it.
 * Exit status 0, 1 when the keys source fails to open, 2 for bad usage.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "ev.h"
#include "log.h"
#include "num.h"
#include "relay_keys.h"
#include "strbuf.h"

#define PROBE_LINE_MAX (512)
#define PROBE_ID_MAX   (80)

struct probe {
	struct ev_loop *loop;
	struct relay_keys *keys;
	struct ev_io *stdin_io;
	bool eof;
	size_t outstanding;
	struct lookup *lookups; /* outstanding, freed at exit if cut short */
	char line[PROBE_LINE_MAX];
	size_t line_len;
	bool line_too_long;
};

struct lookup {
	struct probe *p;
	struct lookup *prev, *next;
	long long t0_ms;
	char id[PROBE_ID_MAX + 1];
};

/* The id as given, printable and space-free, cut to PROBE_ID_MAX. */
static void copy_id(char *out, const char *in)
{
	size_t i = 0;

	for (; in[i] != '\0' && i < PROBE_ID_MAX; i++)
		out[i] = in[i] > ' ' && in[i] < 0x7f ? in[i] : '?';
	out[i] = '\0';
}

/* Ends the run once input is over and every lookup answered (from a
 * callback: ev_loop_stop takes effect before the next wait). */
static void maybe_done(struct probe *p)
{
	if (p->eof && p->outstanding == 0)
		ev_loop_stop(p->loop);
}

static void lookup_free(struct lookup *l)
{
	if (l->prev != NULL)
		l->prev->next = l->next;
	else
		l->p->lookups = l->next;
	if (l->next != NULL)
		l->next->prev = l->prev;
	l->p->outstanding--;
	maybe_done(l->p);
	free(l);
}

static void on_result(void *arg, enum relay_keys_result res, const uint8_t pk[32])
{
	static const char *const names[] = {"found", "unknown", "error"};
	struct lookup *l = arg;
	char hex[65] = "";

	if (res == RELAY_KEYS_FOUND && pk != NULL)
		for (int i = 0; i < 32; i++)
			snprintf(hex + 2 * i, 3, "%02x", pk[i]);
	printf("result id=%s res=%s ms=%lld%s%s\n", l->id, names[res],
	       ev_now_update(l->p->loop) - l->t0_ms, hex[0] != '\0' ? " pk=" : "", hex);
	fflush(stdout);
	lookup_free(l);
}

/* A lookup of id; with cancel, cancelled at once if it did not end. */
static void lookup(struct probe *p, const char *id, bool cancel)
{
	struct lookup *l = calloc(1, sizeof(*l));
	struct relay_keys_req *req;

	if (l == NULL) {
		printf("error no-memory\n");
		return;
	}
	l->p = p;
	l->t0_ms = ev_now_update(p->loop);
	copy_id(l->id, id);
	p->outstanding++;
	l->next = p->lookups;
	if (p->lookups != NULL)
		p->lookups->prev = l;
	p->lookups = l;
	/* An immediate answer has run on_result, which freed l. */
	req = relay_keys_lookup(p->keys, id, on_result, l);
	if (req != NULL && cancel) {
		relay_keys_cancel(req);
		printf("cancelled id=%s\n", l->id);
		lookup_free(l);
	}
}

static void print_metrics(struct probe *p)
{
	struct strbuf sb;

	strbuf_init(&sb, 1 << 16);
	relay_keys_metrics(p->keys, &sb);
	printf("metrics-begin\n%.*smetrics-end\n", (int)sb.len, sb.p != NULL ? sb.p : "");
	strbuf_release(&sb);
}

static void command(struct probe *p, char *line)
{
	char *arg = strchr(line, ' ');

	if (arg != NULL)
		*arg++ = '\0';
	if (line[0] == '\0') {
		return;
	} else if (strcmp(line, "quit") == 0) {
		p->eof = true;
		maybe_done(p);
	} else if (strcmp(line, "reload") == 0) {
		int r = relay_keys_reload(p->keys);

		printf("reload rc=%d realms=%zu\n", r, relay_keys_count(p->keys));
	} else if (strcmp(line, "metrics") == 0) {
		print_metrics(p);
	} else if (strcmp(line, "cancel") == 0 && arg != NULL) {
		lookup(p, arg, true);
	} else if (strcmp(line, "burst") == 0 && arg != NULL) {
		char *id = strchr(arg, ' ');
		int64_t n = 0;

		if (id != NULL)
			*id++ = '\0';
		if (id == NULL || num_parse_str(arg, 1, 100000, 0, &n) < 0)
			printf("usage-error burst N REALM_ID\n");
		for (int64_t i = 0; id != NULL && i < n; i++)
			lookup(p, id, false);
	} else {
		if (arg != NULL)
			arg[-1] = ' '; /* an id with a space in it: looked up as is */
		lookup(p, line, false);
	}
	fflush(stdout);
}

static void on_stdin(struct ev_io *io, uint32_t events, void *arg)
{
	struct probe *p = arg;
	char buf[4096];
	ssize_t n = read(ev_io_fd(io), buf, sizeof(buf));

	(void)events;
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		ev_io_del(p->stdin_io, false);
		p->stdin_io = NULL;
		p->eof = true;
		maybe_done(p);
		return;
	}
	for (ssize_t i = 0; i < n; i++) {
		if (buf[i] != '\n') {
			if (p->line_len + 1 < sizeof(p->line))
				p->line[p->line_len++] = buf[i];
			else
				p->line_too_long = true;
			continue;
		}
		p->line[p->line_len] = '\0';
		if (p->line_too_long)
			printf("usage-error line-too-long\n");
		else
			command(p, p->line);
		p->line_len = 0;
		p->line_too_long = false;
	}
}

static void on_signal(int signo, void *arg)
{
	struct probe *p = arg;

	if (signo == SIGINT || signo == SIGTERM)
		ev_loop_stop(p->loop);
}

static void usage(void)
{
	fprintf(stderr, "usage: relay-keys-probe (--pg CONNINFO | --file PATH) [--stdin] "
			"[--debug] [REALM_ID...]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct probe p = {0};
	const char *file = NULL, *pg = NULL;
	bool use_stdin = false, debug = false;
	int i, status = 0;

	ev_block_signals();
	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--pg") == 0 && i + 1 < argc)
			pg = argv[++i];
		else if (strcmp(argv[i], "--file") == 0 && i + 1 < argc)
			file = argv[++i];
		else if (strcmp(argv[i], "--stdin") == 0)
			use_stdin = true;
		else if (strcmp(argv[i], "--debug") == 0)
			debug = true;
		else if (strcmp(argv[i], "--") == 0 || argv[i][0] != '-' || argv[i][1] == '\0')
			break;
		else
			usage();
	}
	if (i < argc && strcmp(argv[i], "--") == 0)
		i++;
	if ((file == NULL) == (pg == NULL))
		usage();
	log_init(debug ? LOG_LEVEL_DEBUG : LOG_LEVEL_INFO, LOG_TARGET_PLAIN);
	p.loop = ev_loop_new();
	if (p.loop == NULL)
		log_fatal("loop");
	p.keys = relay_keys_new(p.loop, file, pg);
	if (p.keys == NULL) {
		ev_loop_free(p.loop);
		return 1;
	}
	ev_signal_set(p.loop, on_signal, &p);
	printf("ready mode=%s realms=%zu\n", pg != NULL ? "pg" : "file", relay_keys_count(p.keys));
	fflush(stdout);
	for (; i < argc; i++)
		lookup(&p, argv[i], false);
	fflush(stdout);
	p.eof = !use_stdin;
	if (use_stdin) {
		p.stdin_io = ev_io_add(p.loop, STDIN_FILENO, EPOLLIN, on_stdin, &p);
		if (p.stdin_io == NULL) {
			log_warn("stdin");
			p.eof = true;
		}
	}
	if (!(p.eof && p.outstanding == 0) && ev_loop_run(p.loop) < 0)
		status = 1;
	ev_io_del(p.stdin_io, false);
	/* Cancels whatever is still pending (a signal): no callback runs. */
	relay_keys_free(p.keys);
	while (p.lookups != NULL)
		lookup_free(p.lookups);
	ev_loop_free(p.loop);
	return status;
}
