/*
 * rally-relay: the front of a Quake 3 engine game server.
 *
 * main() parses the command line and wires the modules together: bans (the
 * state file must load before anything listens), the proxy (public socket),
 * the heartbeats, the control API; then it runs the loop until SIGINT or
 * SIGTERM, sends the flatline and exits. SIGHUP reloads bans.json and the
 * token file.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signal.h>
#include <unistd.h>

#include "banlist.h"
#include "log.h"
#include "relay.h"
#include "sdnotify.h"

static const char usage[] =
	"NAME\n"
	"    rally-relay - the front of a Quake 3 engine game server\n"
	"\n"
	"SYNOPSIS\n"
	"    rally-relay --server HOST:PORT [options]\n"
	"\n"
	"DESCRIPTION\n"
	"    Owns the public UDP port of a game server (Enemy Territory, ET: Legacy,\n"
	"    ioquake3, OpenArena) and proxies every client to it, one upstream socket\n"
	"    per client address. Drops what clients have no business sending (rcon\n"
	"    and any command but getstatus, getinfo, getchallenge, connect, PB_*),\n"
	"    limits getstatus/getinfo to a burst of 5 then 1/s per source IP, bans\n"
	"    addresses, and heartbeats the masters itself so the server is listed\n"
	"    under the relay's address.\n"
	"\n"
	"OPTIONS\n"
	"    --listen ADDR:PORT        public UDP address (default 0.0.0.0:27960)\n"
	"    --server HOST:PORT        the game server (required; resolved once)\n"
	"    --master HOST:PORT        a master to heartbeat; repeatable (default\n"
	"                              etmaster.net:27950, etmaster.idsoftware.com:27950)\n"
	"    --no-heartbeat            heartbeat no master at all\n"
	"    --heartbeat-tag TAG       default EnemyTerritory-1 (QuakeArena-1 for Q3/OA)\n"
	"    --flatline-tag TAG        default ETFlatline-1\n"
	"    --heartbeat-interval S    seconds between heartbeats (default 300)\n"
	"    --query-budget N          getstatus/getinfo forwarded per second from all\n"
	"                              sources together (default 100, 0 = no cap);\n"
	"                              the masters are exempt\n"
	"    --control ADDR:PORT       HTTP control API (off by default; bind it to\n"
	"                              127.0.0.1 or a tunnel address, never public)\n"
	"    --token-file PATH         bearer token for the control API, >= 32 chars\n"
	"    --state-dir DIR           where bans.json lives (default /var/lib/rally-relay)\n"
	"    --log auto|plain|journal  log format (auto: journal if stderr is it)\n"
	"    --debug                   log sessions, commands and heartbeats\n"
	"    --check-config            check flags, token and bans.json, then exit\n"
	"    --help, --version\n"
	"\n"
	"TUNING (tests)\n"
	"    --session-timeout S       idle session lifetime (default 120)\n"
	"    --probe-timeout MS        wait per server probe attempt (default 3000)\n"
	"    --max-sessions N          concurrent sessions (default 2048)\n"
	"    --unconfirmed-timeout S   idle lifetime of sessions the client never\n"
	"                              confirmed by speaking after the server's answer\n"
	"                              (default 10); when the table is full the oldest\n"
	"                              of them (idle >= 1 s) makes room for a new client\n"
	"\n"
	"CONTROL API\n"
	"    GET /healthz (no token), GET /sessions, GET /bans, PUT /bans/IP with\n"
	"    {\"reason\":\"...\",\"duration\":SECONDS}, DELETE /bans/IP, GET /metrics.\n"
	"    Send \"Authorization: Bearer TOKEN\".\n"
	"\n"
	"SIGNALS\n"
	"    SIGTERM, SIGINT: flatline to the masters, then exit (twice: at once).\n"
	"    SIGHUP: reload bans.json and the token file.\n"
	"\n"
	"OUTPUT\n"
	"    Once bound: \"ready listen=IP:PORT[ control=IP:PORT]\" on stderr.\n";

enum {
	OPT_LISTEN = 256,
	OPT_SERVER,
	OPT_MASTER,
	OPT_NO_HEARTBEAT,
	OPT_HB_TAG,
	OPT_FL_TAG,
	OPT_HB_INTERVAL,
	OPT_CONTROL,
	OPT_TOKEN_FILE,
	OPT_STATE_DIR,
	OPT_LOG,
	OPT_DEBUG,
	OPT_CHECK,
	OPT_HELP,
	OPT_VERSION,
	OPT_SESSION_TIMEOUT,
	OPT_PROBE_TIMEOUT,
	OPT_MAX_SESSIONS,
	OPT_QUERY_BUDGET,
	OPT_UNCONFIRMED_TIMEOUT,
};

static const struct option options[] = {
	{"listen", required_argument, NULL, OPT_LISTEN},
	{"server", required_argument, NULL, OPT_SERVER},
	{"master", required_argument, NULL, OPT_MASTER},
	{"no-heartbeat", no_argument, NULL, OPT_NO_HEARTBEAT},
	{"heartbeat-tag", required_argument, NULL, OPT_HB_TAG},
	{"flatline-tag", required_argument, NULL, OPT_FL_TAG},
	{"heartbeat-interval", required_argument, NULL, OPT_HB_INTERVAL},
	{"control", required_argument, NULL, OPT_CONTROL},
	{"token-file", required_argument, NULL, OPT_TOKEN_FILE},
	{"state-dir", required_argument, NULL, OPT_STATE_DIR},
	{"log", required_argument, NULL, OPT_LOG},
	{"debug", no_argument, NULL, OPT_DEBUG},
	{"check-config", no_argument, NULL, OPT_CHECK},
	{"help", no_argument, NULL, OPT_HELP},
	{"version", no_argument, NULL, OPT_VERSION},
	{"session-timeout", required_argument, NULL, OPT_SESSION_TIMEOUT},
	{"probe-timeout", required_argument, NULL, OPT_PROBE_TIMEOUT},
	{"max-sessions", required_argument, NULL, OPT_MAX_SESSIONS},
	{"query-budget", required_argument, NULL, OPT_QUERY_BUDGET},
	{"unconfirmed-timeout", required_argument, NULL, OPT_UNCONFIRMED_TIMEOUT},
	{NULL, 0, NULL, 0},
};

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void die_usage(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "rally-relay: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'rally-relay --help'.\n");
	exit(2);
}

/* A decimal in [min, max]; anything else is a usage error. */
static long long parse_num(const char *s, long long min, long long max, const char *what)
{
	long long v = 0;

	if (*s == '\0')
		die_usage("%s: not a number", what);
	for (const char *p = s; *p != '\0'; p++) {
		if (*p < '0' || *p > '9' || v > (LLONG_MAX - 9) / 10)
			die_usage("%s: not a number in range", what);
		v = v * 10 + (*p - '0');
	}
	if (v < min || v > max)
		die_usage("%s: out of range", what);
	return v;
}

static void set_tag(char *dst, const char *src, const char *what)
{
	size_t n = strlen(src);

	if (n == 0 || n >= RELAY_TAG_MAX)
		die_usage("%s: empty or too long", what);
	for (size_t i = 0; i < n; i++) {
		if (src[i] <= ' ' || src[i] == '"' || src[i] == '\\' || src[i] == ';' ||
		    (unsigned char)src[i] >= 0x7f)
			die_usage("%s: only printable characters, no spaces", what);
	}
	memcpy(dst, src, n + 1);
}

static void add_master(struct relay_cfg *c, const char *s)
{
	struct relay_master *m;

	if (c->nmasters == RELAY_MAX_MASTERS)
		die_usage("--master: at most 16 (%s)", s);
	m = &c->masters[c->nmasters];
	if (addr_split_hostport(s, m->host, sizeof(m->host), &m->port) < 0 || m->port == 0)
		die_usage("--master %s: expected HOST:PORT", s);
	c->nmasters++;
}

static void copy_path(char *dst, size_t size, const char *src, const char *what)
{
	if (strlen(src) >= size || src[0] == '\0')
		die_usage("%s: empty or too long", what);
	memcpy(dst, src, strlen(src) + 1);
}

static bool parse_args(int argc, char **argv, struct relay_cfg *c, enum log_target *lt)
{
	bool have_server = false, masters_given = false, no_hb = false, check = false;
	int o;

	memset(c, 0, sizeof(*c));
	addr_parse(&c->listen, "0.0.0.0:27960", -1);
	strcpy(c->heartbeat_tag, "EnemyTerritory-1");
	strcpy(c->flatline_tag, "ETFlatline-1");
	c->heartbeat_interval_ms = RELAY_HEARTBEAT_INTERVAL_S * 1000LL;
	strcpy(c->state_dir, "/var/lib/rally-relay");
	c->session_timeout_ms = RELAY_SESSION_TIMEOUT_MS;
	c->probe_timeout_ms = RELAY_PROBE_TIMEOUT_MS;
	c->max_sessions = RELAY_MAX_SESSIONS;
	c->query_budget = RELAY_QUERY_BUDGET;
	c->unconfirmed_timeout_ms = RELAY_UNCONFIRMED_TIMEOUT_MS;
	*lt = LOG_TARGET_AUTO;

	while ((o = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (o) {
		case OPT_LISTEN:
			if (addr_parse(&c->listen, optarg, -1) < 0)
				die_usage("--listen %s: expected IP:PORT", optarg);
			break;
		case OPT_SERVER:
			if (addr_split_hostport(optarg, c->server_host, sizeof(c->server_host),
						&c->server_port) < 0 ||
			    c->server_port == 0)
				die_usage("--server %s: expected HOST:PORT", optarg);
			have_server = true;
			break;
		case OPT_MASTER:
			masters_given = true;
			add_master(c, optarg);
			break;
		case OPT_NO_HEARTBEAT:
			no_hb = true;
			break;
		case OPT_HB_TAG:
			set_tag(c->heartbeat_tag, optarg, "--heartbeat-tag");
			break;
		case OPT_FL_TAG:
			set_tag(c->flatline_tag, optarg, "--flatline-tag");
			break;
		case OPT_HB_INTERVAL:
			c->heartbeat_interval_ms =
				parse_num(optarg, 1, 86400, "--heartbeat-interval") * 1000LL;
			break;
		case OPT_CONTROL:
			if (addr_parse(&c->control, optarg, -1) < 0)
				die_usage("--control %s: expected IP:PORT", optarg);
			c->control_on = true;
			break;
		case OPT_TOKEN_FILE:
			copy_path(c->token_file, sizeof(c->token_file), optarg, "--token-file");
			break;
		case OPT_STATE_DIR:
			copy_path(c->state_dir, sizeof(c->state_dir), optarg, "--state-dir");
			break;
		case OPT_LOG:
			if (strcmp(optarg, "auto") == 0)
				*lt = LOG_TARGET_AUTO;
			else if (strcmp(optarg, "plain") == 0)
				*lt = LOG_TARGET_PLAIN;
			else if (strcmp(optarg, "journal") == 0)
				*lt = LOG_TARGET_JOURNAL;
			else
				die_usage("--log %s: auto, plain or journal", optarg);
			break;
		case OPT_DEBUG:
			c->debug = true;
			break;
		case OPT_CHECK:
			check = true;
			break;
		case OPT_HELP:
			fputs(usage, stdout);
			exit(0);
		case OPT_VERSION:
			printf("rally-relay %s\n", RALLY_VERSION);
			exit(0);
		case OPT_SESSION_TIMEOUT:
			c->session_timeout_ms =
				parse_num(optarg, 1, 86400, "--session-timeout") * 1000;
			break;
		case OPT_PROBE_TIMEOUT:
			c->probe_timeout_ms = parse_num(optarg, 10, 60000, "--probe-timeout");
			break;
		case OPT_UNCONFIRMED_TIMEOUT:
			c->unconfirmed_timeout_ms =
				parse_num(optarg, 1, 86400, "--unconfirmed-timeout") * 1000;
			break;
		case OPT_QUERY_BUDGET:
			c->query_budget = (unsigned)parse_num(optarg, 0, 1000000, "--query-budget");
			break;
		case OPT_MAX_SESSIONS:
			c->max_sessions = (unsigned)parse_num(optarg, 1, 65536, "--max-sessions");
			break;
		default:
			fprintf(stderr, "Try 'rally-relay --help'.\n");
			exit(2);
		}
	}
	if (optind < argc)
		die_usage("unexpected argument: %s", argv[optind]);
	if (!have_server)
		die_usage("%s", "--server HOST:PORT is required");
	if (no_hb && masters_given)
		die_usage("%s", "--no-heartbeat and --master exclude each other");
	if (!masters_given && !no_hb) {
		add_master(c, "etmaster.net:27950");
		add_master(c, "etmaster.idsoftware.com:27950");
	}
	if (c->control_on && c->token_file[0] == '\0')
		die_usage("%s", "--control needs --token-file");
	return check;
}

/* ---- signals and shutdown ---- */

struct app {
	struct relay r;
	struct ev_timer watchdog;
	long long watchdog_ms;
	bool flatlined;
};

static void shutdown_done(void *arg)
{
	struct app *app = arg;

	app->flatlined = true;
	ev_loop_stop(app->r.loop);
}

static void on_signal(int signo, void *arg)
{
	struct app *app = arg;

	if (signo == SIGINT || signo == SIGTERM) {
		if (app->r.stopping) {
			ev_loop_stop(app->r.loop);
			return;
		}
		app->r.stopping = true;
		log_info("stopping signal=%s", signo == SIGINT ? "SIGINT" : "SIGTERM");
		sdnotify("STOPPING=1");
		if (app->r.hb != NULL)
			relay_heartbeat_shutdown(app->r.hb, shutdown_done, app);
		else
			ev_loop_stop(app->r.loop);
	} else if (signo == SIGHUP) {
		log_info("reloading signal=SIGHUP");
		relay_bans_reload(app->r.bans);
		if (app->r.control != NULL)
			relay_control_reload(app->r.control);
	}
}

static void on_watchdog(struct ev_timer *t, void *arg)
{
	struct app *app = arg;

	sdnotify("WATCHDOG=1");
	ev_timer_start(app->r.loop, t, app->watchdog_ms / 2, on_watchdog, app);
}

static int resolve_server(struct relay *r)
{
	struct addr all[8];
	int gai, n = addr_resolve(r->cfg.server_host, r->cfg.server_port, all, 8, &gai);

	if (n < 0) {
		log_err("server-resolve-fail server=%s:%u error=\"%s\"", r->cfg.server_host,
			r->cfg.server_port, gai_strerror(gai));
		return n;
	}
	r->server = all[0];
	return 0;
}

/*
 * Each session holds a socket: make sure max_sessions of them fit (the seed
 * runs with LimitNOFILE=4096). Raises the soft limit up to the hard one.
 */
static void raise_nofile(unsigned max_sessions)
{
	struct rlimit rl;
	rlim_t want = (rlim_t)max_sessions + 256;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
		return;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < want)
		log_warnx("nofile-low limit=%llu sessions=%u drop=session_cap",
			  (unsigned long long)rl.rlim_cur, max_sessions);
}

int main(int argc, char **argv)
{
	static struct app app;
	struct relay *r = &app.r;
	enum log_target lt;
	char la[ADDR_STRLEN], ca[ADDR_STRLEN];
	struct addr caddr;
	bool check;
	int ret;

	ev_block_signals();
	check = parse_args(argc, argv, &r->cfg, &lt);
	log_init(r->cfg.debug ? LOG_LEVEL_DEBUG : LOG_LEVEL_INFO, lt);
	if (sodium_init() < 0)
		log_fatalx("sodium-init-fail");
	raise_nofile(r->cfg.max_sessions);
	if (resolve_server(r) < 0)
		return 1;
	r->loop = ev_loop_new();
	if (r->loop == NULL)
		log_fatal("loop-init-fail");
	ev_signal_set(r->loop, on_signal, &app);
	ev_timer_init(&app.watchdog);

	/* Bans first: a corrupt file must stop us before anything listens. */
	ret = relay_bans_new(r);
	if (ret < 0) {
		log_err("start-fail reason=\"cannot load %s/bans.json\"", r->cfg.state_dir);
		ev_loop_free(r->loop);
		return 1;
	}
	if (check) {
		log_bare("config-ok server=%s bans=%zu", addr_str(&r->server, la, sizeof(la)),
			 banlist_count(relay_bans_list(r->bans)));
		relay_bans_free(r->bans);
		ev_loop_free(r->loop);
		return 0;
	}
	ret = relay_proxy_new(r);
	if (ret < 0) {
		errno = -ret;
		log_warn("listen-fail listen=%s", addr_str(&r->cfg.listen, la, sizeof(la)));
		goto out;
	}
	if (r->cfg.control_on) {
		ret = relay_control_new(r);
		if (ret < 0)
			goto out;
	}
	if (r->cfg.nmasters > 0) {
		ret = relay_heartbeat_new(r);
		if (ret < 0) {
			errno = -ret;
			log_warn("heartbeat-init-fail");
			goto out;
		}
	}
	addr_str(&r->cfg.listen, la, sizeof(la));
	if (relay_control_bound(r->control, &caddr))
		log_bare("ready listen=%s control=%s", la, addr_str(&caddr, ca, sizeof(ca)));
	else
		log_bare("ready listen=%s", la);
	log_info("relay server=%s masters=%zu tag=%s", addr_str(&r->server, ca, sizeof(ca)),
		 r->cfg.nmasters, r->cfg.heartbeat_tag);
	sdnotify("READY=1");
	app.watchdog_ms = sdnotify_watchdog_ms();
	if (app.watchdog_ms > 0)
		ev_timer_start(r->loop, &app.watchdog, app.watchdog_ms / 2, on_watchdog, &app);

	ret = ev_loop_run(r->loop);
	if (ret < 0) {
		errno = -ret;
		log_warn("loop-fail");
	}
	log_info("stopped flatline=%s", app.flatlined ? "sent" : "no");
	ret = 0;
out:
	ev_timer_stop(r->loop, &app.watchdog);
	relay_control_free(r->control);
	relay_heartbeat_free(r->hb);
	relay_proxy_free(r->proxy);
	relay_bans_free(r->bans);
	ev_loop_free(r->loop);
	return ret < 0 ? 1 : 0;
}
