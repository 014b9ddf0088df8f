/*
 * rally-master: the list and rendezvous server.
 *
 * main() parses the command line, builds the registry and its three doors
 * (netpunch HTTP API with knocks and relay ports, the Quake 3 UDP master,
 * the Fugitive3D repository), restores the snapshot, starts the HTTP
 * listener and runs the loop. SIGINT/SIGTERM answer what is pending, save
 * the snapshot and exit.
 */
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

#include "log.h"
#include "master.h"
#include "sdnotify.h"
#include "statefile.h"

static const char usage[] =
	"NAME\n"
	"    rally-master - game list and rendezvous server\n"
	"\n"
	"SYNOPSIS\n"
	"    rally-master [options]\n"
	"\n"
	"DESCRIPTION\n"
	"    One registry behind three front doors:\n"
	"    - the netpunch master HTTP API: GET /list, POST /announce, POST /leave,\n"
	"      GET /health, POST /knock and GET /knock (rendezvous notes), and UDP\n"
	"      relay ports for lobbies that cannot punch through (with --relay-ip);\n"
	"    - the Quake 3 / Enemy Territory master protocol on UDP (heartbeat,\n"
	"      getinfo challenge, infoResponse, getservers, getserversExt), as\n"
	"      dpmaster implements it;\n"
	"    - the Fugitive3D server repository: GET/POST/PUT/DELETE /servers and\n"
	"      GET /reflection/ip, with a UDP ping-back on registration.\n"
	"    The registry is saved to the state directory every 10 s and at exit,\n"
	"    and restored at start.\n"
	"\n"
	"OPTIONS\n"
	"    --http ADDR:PORT          HTTP listener (default 127.0.0.1:8471)\n"
	"    --udp ADDR:PORT           Quake 3 master (default 0.0.0.0:27950)\n"
	"    --relay-ip IP             offer UDP relay ports; IP is what lobbies are\n"
	"                              told to send to (off without it)\n"
	"    --relay-ports A-B         relay port range (default 29600-29699)\n"
	"    --relay-bind ADDR         address relay ports bind (default 0.0.0.0)\n"
	"    --state-dir DIR           registry snapshot (default /var/lib/rally-master)\n"
	"    --stale SECONDS           Fugitive servers not seen for this long are\n"
	"                              dropped (default 30)\n"
	"    --trusted-proxy IP        believe X-Forwarded-For / X-Real-IP from this\n"
	"                              peer; repeatable (default 127.0.0.1 and ::1)\n"
	"    --q3-game SPEC            declare a Quake 3 engine game:\n"
	"                              NAME:heartbeat=TAG[,flatline=TAG][,protocols=N/N]\n"
	"                              [,options=send-empty-servers/send-full-servers]\n"
	"    --log auto|plain|journal  log format (auto: journal if stderr is it)\n"
	"    --debug                   log every request and datagram\n"
	"    --check-config            check the flags and the snapshot, then exit\n"
	"    --help, --version\n"
	"\n"
	"TUNING (tests; the references' values by default)\n"
	"    --lobby-ttl MS (30000)  --knock-ttl MS (60000)  --relay-idle MS (90000)\n"
	"    --relay-life MS (43200000)  --q3-ttl MS (900000)  --q3-challenge MS (2000)\n"
	"    --ping-timeout MS (5000)  --snapshot-interval MS (10000)\n"
	"\n"
	"OUTPUT\n"
	"    Once bound: \"ready http=IP:PORT udp=IP:PORT\" on stderr.\n";

enum {
	OPT_HTTP = 256,
	OPT_UDP,
	OPT_RELAY_IP,
	OPT_RELAY_PORTS,
	OPT_RELAY_BIND,
	OPT_STATE_DIR,
	OPT_STALE,
	OPT_TRUSTED,
	OPT_Q3_GAME,
	OPT_LOG,
	OPT_DEBUG,
	OPT_CHECK,
	OPT_HELP,
	OPT_VERSION,
	OPT_LOBBY_TTL,
	OPT_KNOCK_TTL,
	OPT_RELAY_IDLE,
	OPT_RELAY_LIFE,
	OPT_Q3_TTL,
	OPT_Q3_CHALLENGE,
	OPT_PING_TIMEOUT,
	OPT_SNAPSHOT,
};

static const struct option options[] = {
	{"http", required_argument, NULL, OPT_HTTP},
	{"udp", required_argument, NULL, OPT_UDP},
	{"relay-ip", required_argument, NULL, OPT_RELAY_IP},
	{"relay-ports", required_argument, NULL, OPT_RELAY_PORTS},
	{"relay-bind", required_argument, NULL, OPT_RELAY_BIND},
	{"state-dir", required_argument, NULL, OPT_STATE_DIR},
	{"stale", required_argument, NULL, OPT_STALE},
	{"trusted-proxy", required_argument, NULL, OPT_TRUSTED},
	{"q3-game", required_argument, NULL, OPT_Q3_GAME},
	{"log", required_argument, NULL, OPT_LOG},
	{"debug", no_argument, NULL, OPT_DEBUG},
	{"check-config", no_argument, NULL, OPT_CHECK},
	{"help", no_argument, NULL, OPT_HELP},
	{"version", no_argument, NULL, OPT_VERSION},
	{"lobby-ttl", required_argument, NULL, OPT_LOBBY_TTL},
	{"knock-ttl", required_argument, NULL, OPT_KNOCK_TTL},
	{"relay-idle", required_argument, NULL, OPT_RELAY_IDLE},
	{"relay-life", required_argument, NULL, OPT_RELAY_LIFE},
	{"q3-ttl", required_argument, NULL, OPT_Q3_TTL},
	{"q3-challenge", required_argument, NULL, OPT_Q3_CHALLENGE},
	{"ping-timeout", required_argument, NULL, OPT_PING_TIMEOUT},
	{"snapshot-interval", required_argument, NULL, OPT_SNAPSHOT},
	{NULL, 0, NULL, 0},
};

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void die_usage(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "rally-master: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'rally-master --help'.\n");
	exit(2);
}

static long long parse_num(const char *s, long long min, long long max, const char *what)
{
	long long v = 0;

	if (*s == '\0')
		die_usage("%s: not a number", what);
	for (const char *p = s; *p != '\0'; p++) {
		if (*p < '0' || *p > '9' || v > (LLONG_MAX - 9) / 10)
			die_usage("%s %s: not a number in range", what, s);
		v = v * 10 + (*p - '0');
	}
	if (v < min || v > max)
		die_usage("%s %s: out of range (%lld..%lld)", what, s, min, max);
	return v;
}

static void parse_ports(const char *s, uint16_t *lo, uint16_t *hi)
{
	const char *dash = strchr(s, '-');
	char a[8];
	size_t n;

	if (dash == NULL || (n = (size_t)(dash - s)) == 0 || n >= sizeof(a))
		die_usage("--relay-ports %s: expected A-B", s);
	memcpy(a, s, n);
	a[n] = '\0';
	*lo = (uint16_t)parse_num(a, 1, 65535, "--relay-ports");
	*hi = (uint16_t)parse_num(dash + 1, 1, 65535, "--relay-ports");
	if (*hi < *lo || *hi - *lo >= 4096)
		die_usage("--relay-ports %s: need A <= B and at most 4096 ports", s);
}

static void add_trusted(struct master_cfg *c, const char *s)
{
	struct addr a;

	if (c->ntrusted == MASTER_MAX_TRUSTED)
		die_usage("--trusted-proxy: at most %d", MASTER_MAX_TRUSTED);
	if (addr_parse_ip(&a, s) < 0)
		die_usage("--trusted-proxy %s: not an IP address", s);
	addr_to_ip(&a, &c->trusted[c->ntrusted++]);
}

static bool parse_args(int argc, char **argv, struct master_cfg *c, enum log_target *lt)
{
	bool check = false, trusted_given = false;
	int o;

	memset(c, 0, sizeof(*c));
	addr_parse(&c->http, "127.0.0.1:8471", -1);
	addr_parse(&c->udp, "0.0.0.0:27950", -1);
	c->relay_lo = 29600;
	c->relay_hi = 29699;
	addr_parse(&c->relay_bind, "0.0.0.0:0", -1);
	snprintf(c->state_dir, sizeof(c->state_dir), "/var/lib/rally-master");
	c->stale_ms = 30000;
	c->lobby_ttl_ms = 30000;
	c->knock_ttl_ms = 60000;
	c->relay_idle_ms = 90000;
	c->relay_life_ms = 12LL * 3600 * 1000;
	c->q3_ttl_ms = 15LL * 60 * 1000;
	c->q3_challenge_ms = 2000;
	c->ping_timeout_ms = 5000;
	c->snapshot_ms = 10000;
	*lt = LOG_TARGET_AUTO;

	while ((o = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (o) {
		case OPT_HTTP:
			if (addr_parse(&c->http, optarg, -1) < 0)
				die_usage("--http %s: expected IP:PORT", optarg);
			break;
		case OPT_UDP:
			if (addr_parse(&c->udp, optarg, -1) < 0)
				die_usage("--udp %s: expected IP:PORT", optarg);
			break;
		case OPT_RELAY_IP: {
			struct addr a;

			if (addr_parse_ip(&a, optarg) < 0 || !addr_is_v4(&a))
				die_usage("--relay-ip %s: expected an IPv4 address", optarg);
			snprintf(c->relay_ip, sizeof(c->relay_ip), "%s", optarg);
			c->relay_on = true;
			break;
		}
		case OPT_RELAY_PORTS:
			parse_ports(optarg, &c->relay_lo, &c->relay_hi);
			break;
		case OPT_RELAY_BIND:
			if (addr_parse_ip(&c->relay_bind, optarg) < 0 ||
			    !addr_is_v4(&c->relay_bind))
				die_usage("--relay-bind %s: expected an IPv4 address", optarg);
			break;
		case OPT_STATE_DIR:
			if (optarg[0] == '\0' || strlen(optarg) >= sizeof(c->state_dir) - 32)
				die_usage("--state-dir: empty or too long");
			snprintf(c->state_dir, sizeof(c->state_dir), "%s", optarg);
			break;
		case OPT_STALE:
			c->stale_ms = parse_num(optarg, 1, 86400, "--stale") * 1000;
			break;
		case OPT_TRUSTED:
			if (!trusted_given)
				c->ntrusted = 0;
			trusted_given = true;
			add_trusted(c, optarg);
			break;
		case OPT_Q3_GAME:
			if (c->nq3_games == sizeof(c->q3_games) / sizeof(c->q3_games[0]))
				die_usage("--q3-game: at most 16");
			c->q3_games[c->nq3_games++] = optarg;
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
			printf("rally-master %s\n", RALLY_VERSION);
			exit(0);
		case OPT_LOBBY_TTL:
			c->lobby_ttl_ms = parse_num(optarg, 1, 86400000, "--lobby-ttl");
			break;
		case OPT_KNOCK_TTL:
			c->knock_ttl_ms = parse_num(optarg, 1, 86400000, "--knock-ttl");
			break;
		case OPT_RELAY_IDLE:
			c->relay_idle_ms = parse_num(optarg, 1, 86400000, "--relay-idle");
			break;
		case OPT_RELAY_LIFE:
			c->relay_life_ms = parse_num(optarg, 1, 7 * 86400000LL, "--relay-life");
			break;
		case OPT_Q3_TTL:
			c->q3_ttl_ms = parse_num(optarg, 1, 86400000, "--q3-ttl");
			break;
		case OPT_Q3_CHALLENGE:
			c->q3_challenge_ms = parse_num(optarg, 1, 60000, "--q3-challenge");
			break;
		case OPT_PING_TIMEOUT:
			c->ping_timeout_ms = parse_num(optarg, 1, 60000, "--ping-timeout");
			break;
		case OPT_SNAPSHOT:
			c->snapshot_ms = parse_num(optarg, 10, 86400000, "--snapshot-interval");
			break;
		default:
			fprintf(stderr, "Try 'rally-master --help'.\n");
			exit(2);
		}
	}
	if (optind < argc)
		die_usage("unexpected argument: %s", argv[optind]);
	if (!trusted_given) {
		add_trusted(c, "127.0.0.1");
		add_trusted(c, "::1");
	}
	return check;
}

/* ---- running ---- */

struct app {
	struct master m;
	char snapshot[sizeof(((struct master_cfg *)0)->state_dir) + 16];
	struct ev_timer watchdog, drain;
	long long watchdog_ms;
};

static void on_drain(struct ev_timer *t, void *arg)
{
	struct app *app = arg;

	(void)t;
	ev_loop_stop(app->m.loop);
}

static void on_signal(int signo, void *arg)
{
	struct app *app = arg;

	if (signo == SIGINT || signo == SIGTERM) {
		log_info("stopping signal=%s", signo == SIGINT ? "SIGINT" : "SIGTERM");
		sdnotify("STOPPING=1");
		app->m.stopping = true;
		ev_loop_stop(app->m.loop);
	} else if (signo == SIGHUP) {
		/* Everything comes from the command line: nothing to reload. */
		log_info("reload signal=SIGHUP nothing-to-reload");
	}
}

static void on_watchdog(struct ev_timer *t, void *arg)
{
	struct app *app = arg;

	sdnotify("WATCHDOG=1");
	ev_timer_start(app->m.loop, t, app->watchdog_ms / 2, on_watchdog, app);
}

/* Each idle HTTP client and each relay port holds a descriptor. */
static void raise_nofile(void)
{
	struct rlimit rl;
	rlim_t want = 32768;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
		return;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < want)
		log_warnx("nofile-low limit=%llu want=%llu", (unsigned long long)rl.rlim_cur,
			  (unsigned long long)want);
}

int main(int argc, char **argv)
{
	static struct app app;
	struct master *m = &app.m;
	enum log_target lt;
	char ha[ADDR_STRLEN], ua[ADDR_STRLEN];
	bool check;
	int r, ret = 1;

	ev_block_signals();
	check = parse_args(argc, argv, &m->cfg, &lt);
	log_init(m->cfg.debug ? LOG_LEVEL_DEBUG : LOG_LEVEL_INFO, lt);
	if (sodium_init() < 0)
		log_fatalx("sodium-init-fail");
	raise_nofile();
	m->loop = ev_loop_new();
	if (m->loop == NULL)
		log_fatal("loop-init-fail");
	ev_signal_set(m->loop, on_signal, &app);
	ev_timer_init(&app.watchdog);
	ev_timer_init(&app.drain);
	m->reg = master_registry_new(m->loop);
	if (m->reg == NULL)
		log_fatal("registry-init-fail");
	snprintf(app.snapshot, sizeof(app.snapshot), "%s/registry.json", m->cfg.state_dir);
	r = statefile_mkdirs(m->cfg.state_dir);
	if (r < 0) {
		errno = -r;
		log_warn("state-dir-unusable dir=%s snapshots=off", m->cfg.state_dir);
	}

	if ((r = master_netpunch_init(m)) < 0 || (r = master_knock_new(m)) < 0)
		goto fail;
	if (m->cfg.relay_on && (r = master_relayport_new(m)) < 0)
		goto fail;
	if ((r = master_q3_new(m)) < 0)
		goto fail;
	if ((r = master_fugitive_new(m)) < 0)
		goto fail;
	/* A corrupt snapshot is moved aside and reported; we start empty. */
	master_registry_load(m->reg, app.snapshot);
	if (check) {
		log_bare("config-ok lobbies=%zu q3=%zu fugitive=%zu",
			 master_registry_count(m->reg, MASTER_REG_LOBBY),
			 master_registry_count(m->reg, MASTER_REG_Q3),
			 master_registry_count(m->reg, MASTER_REG_FUGITIVE));
		ret = 0;
		goto out;
	}
	if ((r = master_http_new(m)) < 0) {
		errno = -r;
		log_warn("http-listen-fail http=%s", addr_str(&m->cfg.http, ha, sizeof(ha)));
		goto out;
	}
	master_registry_autosave(m->reg, app.snapshot, m->cfg.snapshot_ms);
	log_bare("ready http=%s udp=%s", addr_str(master_http_addr(m->http), ha, sizeof(ha)),
		 addr_str(master_q3_addr(m->q3), ua, sizeof(ua)));
	sdnotify("READY=1");
	app.watchdog_ms = sdnotify_watchdog_ms();
	if (app.watchdog_ms > 0)
		ev_timer_start(m->loop, &app.watchdog, app.watchdog_ms / 2, on_watchdog, &app);

	r = ev_loop_run(m->loop);
	if (r < 0) {
		errno = -r;
		log_warn("loop-fail");
	}
	/* Answer what is pending (Fugitive ping-backs), and give the loop a
	 * moment to send it. */
	master_fugitive_shutdown(m->fug);
	ev_timer_start(m->loop, &app.drain, 200, on_drain, &app);
	ev_loop_run(m->loop);
	ev_timer_stop(m->loop, &app.drain);
	r = master_registry_save(m->reg, app.snapshot);
	if (r < 0) {
		errno = -r;
		log_warn("snapshot-save-fail file=%s", app.snapshot);
	}
	log_info("stopped entries=%zu", master_registry_count(m->reg, MASTER_REG_LOBBY) +
						master_registry_count(m->reg, MASTER_REG_Q3) +
						master_registry_count(m->reg, MASTER_REG_FUGITIVE));
	ret = 0;
	goto out;
fail:
	errno = -r;
	log_warn("start-fail");
out:
	ev_timer_stop(m->loop, &app.watchdog);
	master_http_free(m->http);
	master_fugitive_free(m->fug);
	master_q3_free(m->q3);
	master_relayport_free(m->relay);
	master_knock_free(m->knock);
	master_registry_free(m->reg);
	ev_loop_free(m->loop);
	return ret;
}
