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
#include "num.h"
#include "relay.h"
#include "relay_keys.h"

static const char usage[] =
	"NAME\n"
	"    rally-relay - the front of a Quake 3 engine game server\n"
	"\n"
	"SYNOPSIS\n"
	"    rally-relay --server HOST:PORT [options]\n"
	"    rally-relay --tunnel-listen ADDR:PORT --tunnel-keys FILE [options]\n"
	"    rally-relay agent --relay URL --realm-id UUID --key FILE [options]\n"
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
	"    --server HOST:PORT        the game server (resolved once; required\n"
	"                              unless the relay is a tunnel only), or\n"
	"                              tunnel:REALM_UUID: at home behind that realm's\n"
	"                              agent (needs --tunnel-listen)\n"
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
	"\n";

/* The rest of the page (C99 caps one literal at 4,095 bytes). */
static const char usage_qcache[] =
	"QUERIES AND ATTACKS (docs/relay.md, \"Queries, budgets, attack mode\")\n"
	"    --query-cache on|off      answer getinfo/getstatus from the server's own\n"
	"                              latest answers (default on; off: forward them\n"
	"                              with --query-budget, as etrelay does)\n"
	"    --query-cache-refresh MS  ask the server again at most this often per\n"
	"                              kind, and only when asked (default 2000)\n"
	"    --query-cache-max-age MS  older answers are not served (default 10000)\n"
	"    --engine-query-limit B/P|off  the server's per-address query limit\n"
	"                              (ioquake3, ET: Legacy: 10/1000, a burst of 10\n"
	"                              then one per 1000 ms); refreshes keep\n"
	"    --engine-query-reserve N  N of that burst free for players' getchallenge\n"
	"                              (default 5)\n"
	"    --reply-base BYTES        answer bytes per second unverified askers\n"
	"                              together get beyond the bytes they send\n"
	"                              (default 16384)\n"
	"    --reply-budget BYTES      and never more than this (default 524288,\n"
	"                              0 = neither limit)\n"
	"    --source-budget BYTES     per unverified source network per second\n"
	"                              (default 512; 4 s worth in hand)\n"
	"    --source-prefix V4/V6     that network's prefix (default 24/64)\n"
	"    --known-budget BYTES      per known player per second (default 8192)\n"
	"    --reply-sources N         budget table size (default 65536)\n"
	"    --attack-threshold PPS    unverified datagrams per second that start\n"
	"                              attack mode (default 2000, 0 = never)\n"
	"    --attack-hold S           it ends after S seconds below half (default 30)\n"
	"    --known-hours H           known players are remembered H hours (72)\n"
	"    --known-max N             at most N of them (default 65536)\n"
	"\n";

static const char usage_tunnel[] =
	"TUNNEL (see rally-relay agent --help for the home side)\n"
	"    --tunnel-listen ADDR:PORT coa-relay's host tunnel (GET /relay/v1/host,\n"
	"                              /relay/v1/health); coa listens on 0.0.0.0:8082\n"
	"    --tunnel-keys FILE        realm keys: REALM_UUID PUBLIC_KEY per line\n"
	"    --tunnel-pg CONNINFO      or look keys up in PostgreSQL (coa's realms)\n"
	"    --tunnel-ports MIN-MAX    port pool (default 40000-43999)\n"
	"    --tunnel-bind IP          where allocated ports listen (default 0.0.0.0)\n"
	"    --tunnel-relay-host HOST  what hosts are told to give players\n"
	"    --tunnel-max-hosts N, --tunnel-max-allocs N, --tunnel-max-allocs-realm N,\n"
	"    --tunnel-max-allocs-player N, --tunnel-max-streams N (per realm)\n"
	"                              limits (2048, 4096, 2048, 4, 2048)\n"
	"\n"
	"TUNING (tests)\n"
	"    --session-timeout S       idle session lifetime (default 120)\n"
	"    --tunnel-alloc-timeout S, --tunnel-idle-timeout S, --tunnel-ping-interval S,\n"
	"    --tunnel-handshake-timeout S, --tunnel-connect-timeout S (120 60 30 10 15)\n"
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
	"    SIGHUP: reload bans.json, the token file and the tunnel's keys file.\n"
	"\n"
	"OUTPUT\n"
	"    Once bound: \"ready [listen=IP:PORT][ tunnel=IP:PORT][ control=IP:PORT]\"\n"
	"    on stderr.\n";

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

	if (strncmp(s, "tunnel:", 7) == 0) {
		char canon[37];

		if (relay_keys_canon_uuid(s + 7, canon) < 0)
			daemon_die_usage("--server %s: expected tunnel:REALM_UUID", s);
		c->server_tunnel = true;
		memcpy(c->server_realm, canon, sizeof(canon));
		return;
	}
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

static void set_ports(void *ctx, const char *s)
{
	struct relay_cfg *c = ctx;
	char *e;
	unsigned long lo = strtoul(s, &e, 10), hi;

	if (*e != '-')
		daemon_die_usage("--tunnel-ports %s: expected MIN-MAX", s);
	hi = strtoul(e + 1, &e, 10);
	if (*e != '\0' || lo == 0 || hi > 65535 || lo > hi)
		daemon_die_usage("--tunnel-ports %s: expected MIN-MAX within 1-65535", s);
	if (hi - lo + 1 < 2)
		daemon_die_usage("--tunnel-ports %s: an allocation takes two ports", s);
	c->tunnel_port_min = (uint16_t)lo;
	c->tunnel_port_max = (uint16_t)hi;
}

static void set_query_cache(void *ctx, const char *s)
{
	struct relay_cfg *c = ctx;

	if (strcmp(s, "on") == 0)
		c->qcache.on = true;
	else if (strcmp(s, "off") == 0)
		c->qcache.on = false;
	else
		daemon_die_usage("--query-cache %s: expected on or off", s);
}

/* "A/B" of two numbers in [lo, hi] each. */
static void two_nums(const char *flag, const char *s, long long lo1, long long hi1, long long lo2,
		     long long hi2, long long *a, long long *b)
{
	const char *slash = strchr(s, '/');
	int64_t x, y;

	if (slash == NULL || num_parse(s, (size_t)(slash - s), lo1, hi1, 0, &x) < 0 ||
	    num_parse_str(slash + 1, lo2, hi2, 0, &y) < 0)
		daemon_die_usage("%s %s: expected N/N within %lld-%lld/%lld-%lld", flag, s, lo1,
				 hi1, lo2, hi2);
	*a = x;
	*b = y;
}

static void set_engine_limit(void *ctx, const char *s)
{
	struct relay_cfg *c = ctx;
	long long burst, period;

	if (strcmp(s, "off") == 0) {
		c->qcache.engine_burst = 0;
		return;
	}
	two_nums("--engine-query-limit", s, 1, 1000, 1, 60000, &burst, &period);
	c->qcache.engine_burst = (unsigned)burst;
	c->qcache.engine_period_ms = period;
}

static void set_source_prefix(void *ctx, const char *s)
{
	struct relay_cfg *c = ctx;
	long long v4, v6;

	two_nums("--source-prefix", s, 8, 32, 16, 128, &v4, &v6);
	c->qcache.prefix4 = (unsigned)v4;
	c->qcache.prefix6 = (unsigned)v6;
}

static void set_tunnel_bind(void *ctx, const char *s)
{
	struct relay_cfg *c = ctx;

	if (addr_parse_ip(&c->tunnel_bind, s) < 0)
		daemon_die_usage("--tunnel-bind %s: expected an IP address", s);
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
	c->tunnel_port_min = RELAY_TUNNEL_PORT_MIN;
	c->tunnel_port_max = RELAY_TUNNEL_PORT_MAX;
	addr_parse_ip(&c->tunnel_bind, "0.0.0.0");
	c->tunnel_max_hosts = RELAY_TUNNEL_MAX_HOSTS;
	c->tunnel_max_allocs = RELAY_TUNNEL_MAX_ALLOCS;
	c->tunnel_max_allocs_realm = RELAY_TUNNEL_MAX_ALLOCS_REALM;
	c->tunnel_max_allocs_player = RELAY_TUNNEL_MAX_ALLOCS_PLAYER;
	c->tunnel_max_streams = RELAY_TUNNEL_MAX_STREAMS;
	c->tunnel_alloc_timeout_ms = RELAY_TUNNEL_ALLOC_TIMEOUT_S * 1000LL;
	c->tunnel_idle_timeout_ms = RELAY_TUNNEL_IDLE_TIMEOUT_S * 1000LL;
	c->tunnel_handshake_timeout_ms = RELAY_TUNNEL_HANDSHAKE_S * 1000LL;
	c->tunnel_ping_ms = RELAY_TUNNEL_PING_S * 1000LL;
	c->tunnel_connect_timeout_ms = RELAY_TUNNEL_CONNECT_S * 1000LL;
	relay_qcache_defaults(&c->qcache);
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
		/* the query cache, budgets, attack mode */
		DAEMON_FN("query-cache", set_query_cache, c),
		DAEMON_NUM("query-cache-refresh", &c->qcache.refresh_ms, 50, 600000, 1),
		DAEMON_NUM("query-cache-max-age", &c->qcache.max_age_ms, 100, 3600000, 1),
		DAEMON_FN("engine-query-limit", set_engine_limit, c),
		DAEMON_NUM("engine-query-reserve", &c->qcache.engine_reserve, 0, 999, 1),
		DAEMON_NUM("reply-budget", &c->qcache.reply_budget, 0, 1000000000, 1),
		DAEMON_NUM("reply-base", &c->qcache.reply_base, 0, 1000000000, 1),
		DAEMON_NUM("source-budget", &c->qcache.source_budget, 256, 100000000, 1),
		DAEMON_FN("source-prefix", set_source_prefix, c),
		DAEMON_NUM("known-budget", &c->qcache.known_budget, 512, 100000000, 1),
		DAEMON_NUM("reply-sources", &c->qcache.reply_sources, 16, 1 << 22, 1),
		DAEMON_NUM("attack-threshold", &c->qcache.attack_threshold, 0, 100000000, 1),
		DAEMON_NUM("attack-hold", &c->qcache.attack_hold_ms, 1, 86400, 1000),
		DAEMON_NUM("known-hours", &c->qcache.known_ttl_s, 1, 87600, 3600),
		DAEMON_NUM("known-max", &c->qcache.known_max, 1, 1 << 20, 1),
		DAEMON_ADDR("control", &c->control),
		DAEMON_STR_SET("token-file", c->token_file),
		DAEMON_STR_SET("state-dir", c->state_dir),
		/* tuning (tests) */
		DAEMON_NUM("session-timeout", &c->session_timeout_ms, 1, 86400, 1000),
		DAEMON_NUM("probe-timeout", &c->probe_timeout_ms, 10, 60000, 1),
		DAEMON_NUM("max-sessions", &c->max_sessions, 1, 65536, 1),
		DAEMON_NUM("unconfirmed-timeout", &c->unconfirmed_timeout_ms, 1, 86400, 1000),
		/* the tunnel */
		DAEMON_ADDR("tunnel-listen", &c->tunnel_listen),
		DAEMON_STR_SET("tunnel-keys", c->tunnel_keys),
		DAEMON_STR_SET("tunnel-pg", c->tunnel_pg),
		DAEMON_FN("tunnel-ports", set_ports, c),
		DAEMON_FN("tunnel-bind", set_tunnel_bind, c),
		DAEMON_STR_SET("tunnel-relay-host", c->tunnel_relay_host),
		DAEMON_NUM("tunnel-max-hosts", &c->tunnel_max_hosts, 1, 65536, 1),
		DAEMON_NUM("tunnel-max-allocs", &c->tunnel_max_allocs, 1, 65536, 1),
		DAEMON_NUM("tunnel-max-allocs-realm", &c->tunnel_max_allocs_realm, 1, 65536, 1),
		DAEMON_NUM("tunnel-max-allocs-player", &c->tunnel_max_allocs_player, 1, 65536, 1),
		DAEMON_NUM("tunnel-max-streams", &c->tunnel_max_streams, 1, 65536, 1),
		DAEMON_NUM("tunnel-alloc-timeout", &c->tunnel_alloc_timeout_ms, 1, 86400, 1000),
		DAEMON_NUM("tunnel-idle-timeout", &c->tunnel_idle_timeout_ms, 1, 86400, 1000),
		DAEMON_NUM("tunnel-handshake-timeout", &c->tunnel_handshake_timeout_ms, 1, 600,
			   1000),
		DAEMON_NUM("tunnel-ping-interval", &c->tunnel_ping_ms, 1, 3600, 1000),
		DAEMON_NUM("tunnel-connect-timeout", &c->tunnel_connect_timeout_ms, 1, 600, 1000),
	};
	const size_t n = DAEMON_NFLAGS(flags);
	int pos;

	relay_defaults(c);
	pos = daemon_parse(d, argc, argv, flags, n);
	if (pos < argc)
		daemon_die_usage("unexpected argument: %s", argv[pos]);
	c->tunnel_on = daemon_flag_seen(flags, n, "tunnel-listen");
	c->server_on = daemon_flag_seen(flags, n, "server");
	if (!daemon_flag_seen(flags, n, "server") && !c->tunnel_on)
		daemon_die_usage("%s", "--server HOST:PORT is required (or --tunnel-listen)");
	if (c->tunnel_on) {
		bool file = c->tunnel_keys[0] != '\0', pg = c->tunnel_pg[0] != '\0';

		if (file == pg)
			daemon_die_usage("%s", "--tunnel-listen needs one of --tunnel-keys and "
					       "--tunnel-pg");
		if (strlen(c->tunnel_relay_host) > 240)
			daemon_die_usage("%s", "--tunnel-relay-host: at most 240 characters (a "
					       "realm address holds it and a port)");
		if (c->tunnel_relay_host[0] == '\0') {
			/* Without it, the bind address if it names one. */
			addr_ip_str(&c->tunnel_bind, c->tunnel_relay_host,
				    sizeof(c->tunnel_relay_host));
			if (strcmp(c->tunnel_relay_host, "0.0.0.0") == 0 ||
			    strcmp(c->tunnel_relay_host, "::") == 0)
				daemon_die_usage("%s", "--tunnel-listen needs --tunnel-relay-host "
						       "HOST, the address players reach us at");
		}
	}
	if (c->server_tunnel && !c->tunnel_on)
		daemon_die_usage("%s", "--server tunnel:REALM needs --tunnel-listen");
	if (!c->server_on && c->nmasters > 0)
		daemon_die_usage("%s",
				 "--master needs --server (a tunnel alone heartbeats nothing)");
	if (!c->server_on)
		no_hb = true;
	if (no_hb && c->nmasters > 0 && c->server_on)
		daemon_die_usage("%s", "--no-heartbeat and --master exclude each other");
	if (c->nmasters == 0 && !no_hb) {
		add_master(c, "etmaster.net:27950");
		add_master(c, "etmaster.idsoftware.com:27950");
	}
	if (c->qcache.engine_burst > 0 && c->qcache.engine_reserve >= c->qcache.engine_burst)
		daemon_die_usage("--engine-query-reserve %u: must be below the burst of "
				 "--engine-query-limit (%u)",
				 c->qcache.engine_reserve, c->qcache.engine_burst);
	if (c->qcache.max_age_ms <= c->qcache.refresh_ms)
		daemon_die_usage("--query-cache-max-age %lld: must be above --query-cache-refresh "
				 "(%lld)",
				 c->qcache.max_age_ms, c->qcache.refresh_ms);
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
	if (app->r.tunnel != NULL)
		relay_tunnel_reload(app->r.tunnel);
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

/* The ready line names what listens. */
static void ready(struct daemon *d, struct relay *r)
{
	char line[3 * (ADDR_STRLEN + 12)], a[ADDR_STRLEN];
	struct addr caddr;
	size_t n = 0;

	line[0] = '\0';
	if (r->proxy != NULL)
		n += (size_t)snprintf(line + n, sizeof(line) - n, " listen=%s",
				      addr_str(&r->cfg.listen, a, sizeof(a)));
	if (relay_tunnel_bound(r->tunnel, &caddr))
		n += (size_t)snprintf(line + n, sizeof(line) - n, " tunnel=%s",
				      addr_str(&caddr, a, sizeof(a)));
	if (relay_control_bound(r->control, &caddr))
		snprintf(line + n, sizeof(line) - n, " control=%s", addr_str(&caddr, a, sizeof(a)));
	daemon_ready(d, "%s", line + 1);
}

int main(int argc, char **argv)
{
	static struct app app;
	struct daemon *d = &app.d;
	struct relay *r = &app.r;
	char la[ADDR_STRLEN];
	int ret;

	if (argc > 1 && strcmp(argv[1], "agent") == 0)
		return relay_agent_main(argc - 1, argv + 1);
	static char page[sizeof(usage) + sizeof(usage_qcache) + sizeof(usage_tunnel)];

	snprintf(page, sizeof(page), "%s%s%s", usage, usage_qcache, usage_tunnel);
	daemon_init(d, "rally-relay", page);
	parse_args(d, argc, argv, &r->cfg);
	daemon_start(d);
	r->loop = d->loop;
	r->check_only = d->check;
	daemon_set_handlers(d, on_stop, on_reload, &app);
	/* Each session holds a socket (the seed runs with LimitNOFILE=4096);
	 * each tunnel port and stream one more. */
	daemon_raise_nofile((unsigned long long)r->cfg.max_sessions + 256 +
				    (r->cfg.tunnel_on ? 2ULL * (r->cfg.tunnel_port_max -
								r->cfg.tunnel_port_min + 1) +
								r->cfg.tunnel_max_hosts
						      : 0),
			    "sessions");
	if (r->cfg.server_on && !r->cfg.server_tunnel) {
		ret = resolve_server(r);
		if (ret < 0)
			goto out;
	}
	/* Bans first: a corrupt file must stop us before anything listens. */
	ret = relay_bans_new(r);
	if (ret < 0) {
		log_err("start-fail reason=\"cannot load %s/bans.json\"", r->cfg.state_dir);
		goto out;
	}
	if (r->cfg.tunnel_on) {
		ret = relay_tunnel_new(r);
		if (ret < 0) {
			errno = -ret;
			log_warn("tunnel-start-fail");
			goto out;
		}
	}
	if (d->check) {
		if (r->cfg.server_tunnel)
			log_bare("config-ok server=tunnel:%s bans=%zu", r->cfg.server_realm,
				 banlist_count(relay_bans_list(r->bans)));
		else if (r->cfg.server_on)
			log_bare("config-ok server=%s bans=%zu",
				 addr_str(&r->server, la, sizeof(la)),
				 banlist_count(relay_bans_list(r->bans)));
		else
			log_bare("config-ok bans=%zu", banlist_count(relay_bans_list(r->bans)));
		if (r->tunnel != NULL)
			log_bare("config-ok tunnel-realms=%zu", relay_tunnel_keys_count(r->tunnel));
		if (r->cfg.server_on) {
			char path[sizeof(r->cfg.state_dir) + 16];
			size_t known = 0;

			snprintf(path, sizeof(path), "%s/known-players", r->cfg.state_dir);
			ret = relay_qcache_check_file(&r->cfg.qcache, path, &known);
			if (ret < 0)
				goto out;
			log_bare("config-ok known-players=%zu", known);
		}
		goto out;
	}
	if (r->cfg.server_on) {
		ret = relay_proxy_new(r);
		if (ret < 0) {
			errno = -ret;
			log_warn("listen-fail listen=%s", addr_str(&r->cfg.listen, la, sizeof(la)));
			goto out;
		}
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
	ready(d, r);
	if (r->cfg.server_tunnel)
		log_info("relay server=tunnel:%s masters=%zu tag=%s", r->cfg.server_realm,
			 r->cfg.nmasters, r->cfg.heartbeat_tag);
	else if (r->cfg.server_on)
		log_info("relay server=%s masters=%zu tag=%s", addr_str(&r->server, la, sizeof(la)),
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
	relay_tunnel_free(r->tunnel);
	relay_bans_free(r->bans);
	daemon_free(d);
	return ret < 0 ? DAEMON_EXIT_FAIL : DAEMON_EXIT_OK;
}
