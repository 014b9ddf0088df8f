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
#include <netdb.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signal.h>
#include <unistd.h>

#include "banlist.h"
#include "daemon.h"
#include "log.h"
#include "relay.h"

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

static void set_tag(char *dst, const char *src, const char *what)
{
	size_t n = strlen(src);

	if (n == 0 || n >= RELAY_TAG_MAX)
		daemon_die_usage("%s: empty or too long", what);
	for (size_t i = 0; i < n; i++) {
		if (src[i] <= ' ' || src[i] == '"' || src[i] == '\\' || src[i] == ';' ||
		    (unsigned char)src[i] >= 0x7f)
			daemon_die_usage("%s: only printable characters, no spaces", what);
	}
	memcpy(dst, src, n + 1);
}

static void add_master(void *ctx, const char *s)
{
	struct relay_cfg *c = ctx;
	struct relay_master *m;

	if (c->nmasters == RELAY_MAX_MASTERS)
		daemon_die_usage("--master: at most 16 (%s)", s);
	m = &c->masters[c->nmasters];
	if (addr_split_hostport(s, m->host, sizeof(m->host), &m->port) < 0 || m->port == 0)
		daemon_die_usage("--master %s: expected HOST:PORT", s);
	c->nmasters++;
}

static void set_server(void *ctx, const char *s)
{
	struct relay_cfg *c = ctx;

	if (addr_split_hostport(s, c->server_host, sizeof(c->server_host), &c->server_port) < 0 ||
	    c->server_port == 0)
		daemon_die_usage("--server %s: expected HOST:PORT", s);
}

static void set_hb_tag(void *ctx, const char *s)
{
	set_tag(((struct relay_cfg *)ctx)->heartbeat_tag, s, "--heartbeat-tag");
}

static void set_fl_tag(void *ctx, const char *s)
{
	set_tag(((struct relay_cfg *)ctx)->flatline_tag, s, "--flatline-tag");
}

/* The seed's values. */
static void relay_defaults(struct relay_cfg *c)
{
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
}

static void parse_args(struct daemon *d, int argc, char **argv, struct relay_cfg *c)
{
	bool no_hb = false;
	struct daemon_flag flags[] = {
		DAEMON_ADDR("listen", &c->listen),
		DAEMON_FN("server", set_server, c),
		DAEMON_FN("master", add_master, c),
		DAEMON_BOOL("no-heartbeat", &no_hb),
		DAEMON_FN("heartbeat-tag", set_hb_tag, c),
		DAEMON_FN("flatline-tag", set_fl_tag, c),
		DAEMON_NUM("heartbeat-interval", &c->heartbeat_interval_ms, 1, 86400, 1000),
		DAEMON_NUM("query-budget", &c->query_budget, 0, 1000000, 1),
		DAEMON_ADDR("control", &c->control),
		DAEMON_STR_SET("token-file", c->token_file),
		DAEMON_STR_SET("state-dir", c->state_dir),
		/* tuning (tests) */
		DAEMON_NUM("session-timeout", &c->session_timeout_ms, 1, 86400, 1000),
		DAEMON_NUM("probe-timeout", &c->probe_timeout_ms, 10, 60000, 1),
		DAEMON_NUM("max-sessions", &c->max_sessions, 1, 65536, 1),
		DAEMON_NUM("unconfirmed-timeout", &c->unconfirmed_timeout_ms, 1, 86400, 1000),
	};
	const size_t n = DAEMON_NFLAGS(flags);
	int pos;

	relay_defaults(c);
	pos = daemon_parse(d, argc, argv, flags, n);
	if (pos < argc)
		daemon_die_usage("unexpected argument: %s", argv[pos]);
	if (!daemon_flag_seen(flags, n, "server"))
		daemon_die_usage("%s", "--server HOST:PORT is required");
	if (no_hb && c->nmasters > 0)
		daemon_die_usage("%s", "--no-heartbeat and --master exclude each other");
	if (c->nmasters == 0 && !no_hb) {
		add_master(c, "etmaster.net:27950");
		add_master(c, "etmaster.idsoftware.com:27950");
	}
	c->control_on = daemon_flag_seen(flags, n, "control");
	if (c->control_on && c->token_file[0] == '\0')
		daemon_die_usage("%s", "--control needs --token-file");
}

/* ---- signals and shutdown ---- */

struct app {
	struct daemon d;
	struct relay r;
	bool flatlined;
};

static void shutdown_done(void *arg)
{
	struct app *app = arg;

	app->flatlined = true;
	ev_loop_stop(app->r.loop);
}

/* SIGTERM/SIGINT: the flatline first, then out. */
static void on_stop(struct daemon *d, void *arg)
{
	struct app *app = arg;

	app->r.stopping = true;
	if (app->r.hb != NULL)
		relay_heartbeat_shutdown(app->r.hb, shutdown_done, app);
	else
		ev_loop_stop(d->loop);
}

/* SIGHUP: bans.json and the token file. */
static void on_reload(struct daemon *d, void *arg)
{
	struct app *app = arg;

	(void)d;
	relay_bans_reload(app->r.bans);
	if (app->r.control != NULL)
		relay_control_reload(app->r.control);
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

int main(int argc, char **argv)
{
	static struct app app;
	struct daemon *d = &app.d;
	struct relay *r = &app.r;
	char la[ADDR_STRLEN], ca[ADDR_STRLEN];
	struct addr caddr;
	int ret;

	daemon_init(d, "rally-relay", usage);
	parse_args(d, argc, argv, &r->cfg);
	daemon_start(d);
	r->loop = d->loop;
	daemon_set_handlers(d, on_stop, on_reload, &app);
	/* Each session holds a socket (the seed runs with LimitNOFILE=4096). */
	daemon_raise_nofile((unsigned long long)r->cfg.max_sessions + 256, "sessions");
	ret = resolve_server(r);
	if (ret < 0)
		goto out;
	/* Bans first: a corrupt file must stop us before anything listens. */
	ret = relay_bans_new(r);
	if (ret < 0) {
		log_err("start-fail reason=\"cannot load %s/bans.json\"", r->cfg.state_dir);
		goto out;
	}
	if (d->check) {
		log_bare("config-ok server=%s bans=%zu", addr_str(&r->server, la, sizeof(la)),
			 banlist_count(relay_bans_list(r->bans)));
		goto out;
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
		daemon_ready(d, "listen=%s control=%s", la, addr_str(&caddr, ca, sizeof(ca)));
	else
		daemon_ready(d, "listen=%s", la);
	log_info("relay server=%s masters=%zu tag=%s", addr_str(&r->server, ca, sizeof(ca)),
		 r->cfg.nmasters, r->cfg.heartbeat_tag);

	ret = ev_loop_run(r->loop);
	if (ret < 0) {
		errno = -ret;
		log_warn("loop-fail");
	}
	log_info("stopped flatline=%s", app.flatlined ? "sent" : "no");
	ret = 0;
out:
	relay_control_free(r->control);
	relay_heartbeat_free(r->hb);
	relay_proxy_free(r->proxy);
	relay_bans_free(r->bans);
	daemon_free(d);
	return ret < 0 ? DAEMON_EXIT_FAIL : DAEMON_EXIT_OK;
}
