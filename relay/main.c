/*
 * rally-relay: the front of Quake 3 engine game servers.
 *
 * main() parses the command line (the classic flags make one unnamed
 * server; --servers FILE names several) and wires the modules together:
 * bans (the state files must load before anything listens), each server
 * (its public sockets, sessions and heartbeats: relay_server.c), the
 * tunnel, the control API; then it runs the loop until SIGINT or SIGTERM,
 * sends the flatlines and exits. SIGHUP reloads the bans, the token file,
 * the tunnel's keys and the servers file.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signal.h>
#include <time.h>
#include <unistd.h>

#include "banlist.h"
#include "daemon.h"
#include "log.h"
#include "num.h"
#include "relay.h"
#include "relay_keys.h"
#include "relay_transparent.h"
#include "statefile.h"

static const char usage[] =
	"Usage: rally-relay --server HOST:PORT [OPTION]...\n"
	"  or:  rally-relay --servers FILE [OPTION]...\n"
	"  or:  rally-relay --tunnel-listen ADDR:PORT --tunnel-keys FILE [OPTION]...\n"
	"  or:  rally-relay agent --relay URL --realm-id UUID --key FILE [OPTION]...\n"
	"The front of a Quake 3 engine game server.\n"
	"\n"
	"Owns the public UDP port of a game server (Enemy Territory, ET: Legacy,\n"
	"ioquake3, OpenArena) and proxies every client to it, one upstream socket\n"
	"per client address. Drops what clients have no business sending (rcon\n"
	"and any command but getstatus, getinfo, getchallenge, connect, PB_*),\n"
	"limits getstatus/getinfo to a burst of 5 then 1/s per source IP, bans\n"
	"addresses, and heartbeats the masters itself so the server is listed\n"
	"under the relay's address. One relay fronts one server (the flags below)\n"
	"or several (--servers FILE), each on its own public port. The home side\n"
	"of its tunnel is rally-relay agent (see rally-relay agent --help).\n"
	"\n"
	"Options:\n"
	"    --listen ADDR:PORT        public UDP address (default 0.0.0.0:27960);\n"
	"                              [::]:PORT takes IPv6 and IPv4 (dual-stack);\n"
	"                              twice for one IPv4 and one IPv6 address\n"
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
	"    --listing-interval S      ask each master for its list this often and\n"
	"                              check the server is in it (default 300,\n"
	"                              0 = off); see /healthz\n"
	"    --public-address ADDR     IP or IP:PORT, the front address the masters\n"
	"                              see (behind a NAT); without it the listing\n"
	"                              check matches the bind address, or this\n"
	"                              host's addresses, or the port alone (weak)\n"
	"    --query-budget N          getstatus/getinfo forwarded per second from all\n"
	"                              sources together (default 100, 0 = no cap);\n"
	"                              the masters are exempt\n"
	"    --transparent             the server sees each player's own address (the\n"
	"                              sessions' sockets take it: CAP_NET_ADMIN and\n"
	"                              tools/relay-transparent-setup; the server on\n"
	"                              this host); refused at start if either is missing\n"
	"    --servers FILE            several servers instead: [server NAME] sections\n"
	"                              of these flags as key = value (docs/relay.md);\n"
	"                              excludes the flags above and the tuning ones\n"
	"    --control ADDR:PORT       HTTP control API (off by default; bind it to\n"
	"                              127.0.0.1 or a tunnel address, never public)\n"
	"    --token-file PATH         bearer token for the control API, >= 32 chars\n"
	"    --state-dir DIR           where bans.json lives (default\n"
	"                              /var/lib/rally-relay; a named server's:\n"
	"                              servers/NAME/bans.json)\n"
	"    --log auto|plain|journal  log format (auto: journal if stderr is it)\n"
	"    --debug                   log sessions, commands and heartbeats\n"
	"    --check-config            check flags, servers file, token and bans, then\n"
	"                              exit\n"
	"    --help                    print this help, then exit\n"
	"    --version                 print the version, then exit\n"
	"\n";

/* The rest of the page (C99 caps one literal at 4,095 bytes). */
static const char usage_qcache[] =
	"QUERIES AND ATTACKS (docs/relay.md, \"Queries, budgets, attack mode\"; with\n"
	"--servers, the same keys per server in the file)\n"
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
	"Tunnel (the public side; rally-relay agent is the home side):\n"
	"    --tunnel-listen ADDR:PORT  coa-relay's host tunnel (GET /relay/v1/host,\n"
	"                              /relay/v1/health); coa listens on 0.0.0.0:8082\n"
	"    --tunnel-keys FILE        realm keys: REALM_UUID PUBLIC_KEY per line\n"
	"    --tunnel-pg CONNINFO      or look keys up in PostgreSQL (coa's realms)\n"
	"    --tunnel-ports MIN-MAX    port pool (default 40000-43999)\n"
	"    --tunnel-bind IP          where allocated ports listen (default 0.0.0.0)\n"
	"    --tunnel-relay-host HOST  what hosts are told to give players\n"
	"    --tunnel-max-hosts N      tunnels at once (default 2048)\n"
	"    --tunnel-max-allocs N     port allocations in all (default 4096)\n"
	"    --tunnel-max-allocs-realm N  allocations per realm (default 2048)\n"
	"    --tunnel-max-allocs-player N  allocations per player (default 4)\n"
	"    --tunnel-max-streams N    player connections per realm (default 2048)\n"
	"\n"
	"Tuning (for tests; the defaults are the design's values):\n"
	"    --session-timeout S       idle session lifetime (default 120)\n"
	"    --listing-delay MS        first listing check after the first heartbeat\n"
	"                              (default 10000)\n"
	"    --listing-timeout MS      wait for a master's whole list (default 3000)\n"
	"    --unconfirmed-timeout S   idle lifetime of sessions the client never\n"
	"                              confirmed by speaking after the server's answer\n"
	"                              (default 10); when the table is full the oldest\n"
	"                              of them (idle >= 1 s) makes room for a new client\n"
	"    --probe-timeout MS        wait per server probe attempt (default 3000)\n"
	"    --max-sessions N          concurrent sessions (default 2048)\n"
	"    --tunnel-alloc-timeout S  an allocation's ports close if nobody connects\n"
	"                              in time (default 120)\n"
	"    --tunnel-idle-timeout S   a tunnel or a stream with no traffic (default 60)\n"
	"    --tunnel-ping-interval S  pings on an idle tunnel (default 30)\n"
	"    --tunnel-handshake-timeout S  a host's handshake (default 10)\n"
	"    --tunnel-connect-timeout S  the host's answer to connect (default 15)\n"
	"\n";

static const char usage_api[] =
	"Control API (--control):\n"
	"    GET /healthz              liveness and which masters list the servers,\n"
	"                              the one call without the token\n"
	"    GET /status               version, addresses, limits, heartbeats\n"
	"    GET /sessions             the live sessions (?server=NAME: one server's)\n"
	"    GET /bans                 the bans of every server\n"
	"    PUT /bans/IP              ban IP: {\"reason\":\"...\",\"duration\":SECONDS}\n"
	"    DELETE /bans/IP           lift the ban\n"
	"    GET /servers[/NAME]       the servers and their state\n"
	"    GET /servers/NAME/healthz a server's liveness (no token)\n"
	"    GET, PUT, DELETE /servers/NAME/bans[/IP]\n"
	"                              a named server's own bans\n"
	"    GET /metrics              Prometheus metrics\n"
	"    Every other call needs \"Authorization: Bearer TOKEN\".\n"
	"    GET / (or /admin) in a browser: the admin page (it asks for the token).\n"
	"\n"
	"Signals:\n"
	"    SIGTERM, SIGINT           flatline to the masters, then exit (a second\n"
	"                              one: exit at once)\n"
	"    SIGHUP                    reload the bans, the token file, the tunnel's\n"
	"                              keys file and the servers file (added servers\n"
	"                              start, removed ones flatline, changed ones\n"
	"                              restart, the others keep their sessions; a bad\n"
	"                              file changes nothing)\n"
	"\n"
	"Output:\n"
	"    Once bound: \"ready [listen=IP:PORT]...[ tunnel=IP:PORT][ control=IP:PORT]\"\n"
	"    on stderr (listen.NAME=IP:PORT for the servers of a servers file).\n"
	"\n";

/* The end of the page. */
static const char usage_end[] =
	"Exit status:\n"
	"    0                         stopped by SIGTERM or SIGINT, or --check-config\n"
	"                              found nothing wrong\n"
	"    1                         failed: a corrupt bans file, a port that cannot\n"
	"                              be bound\n"
	"    2                         bad usage\n"
	"\n"
	"Environment:\n"
	"    NOTIFY_SOCKET, WATCHDOG_USEC\n"
	"                              set by systemd (Type=notify, WatchdogSec=):\n"
	"                              READY=1 once bound, WATCHDOG=1, STOPPING=1\n"
	"    JOURNAL_STREAM            set by systemd: with --log auto, lines carry\n"
	"                              <N> priorities and no timestamp\n"
	"\n"
	"Files:\n"
	"    /var/lib/rally-relay/bans.json\n"
	"                              the bans, kept across restarts (--state-dir)\n"
	"    /var/lib/rally-relay/servers/NAME/bans.json\n"
	"                              a named server's own bans\n"
	"    /etc/default/rally-relay  the flags rally-relay.service adds\n";

/* A flag of the one classic server, set as a servers file line would be. */
struct srvflag {
	const char *key;
	struct relay_cfg *c;
};

static void set_srvflag(void *ctx, const char *arg)
{
	struct srvflag *f = ctx;
	char err[120];

	if (relay_server_cfg_set(&f->c->classic, f->key, arg != NULL ? arg : "yes", err,
				 sizeof(err)) < 0)
		daemon_die_usage("--%s%s%s: %s", f->key, arg != NULL ? " " : "",
				 arg != NULL ? arg : "", err);
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
	relay_server_cfg_defaults(&c->classic);
	strcpy(c->state_dir, "/var/lib/rally-relay");
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
}

/* The flags of one server (relay_srvfile.c knows them). */
static const char *const server_keys[] = {
	"listen",
	"server",
	"master",
	"heartbeat-tag",
	"flatline-tag",
	"heartbeat-interval",
	"query-budget",
	"session-timeout",
	"probe-timeout",
	"max-sessions",
	"unconfirmed-timeout",
	"listing-interval",
	"public-address",
	"listing-delay",
	"listing-timeout",
	"query-cache",
	"query-cache-refresh",
	"query-cache-max-age",
	"engine-query-limit",
	"engine-query-reserve",
	"reply-budget",
	"reply-base",
	"source-budget",
	"source-prefix",
	"known-budget",
	"reply-sources",
	"attack-threshold",
	"attack-hold",
	"known-hours",
	"known-max",
	"transparent",
};
#define NSERVER_KEYS (sizeof(server_keys) / sizeof(server_keys[0]))

static void parse_args(struct daemon *d, int argc, char **argv, struct relay_cfg *c)
{
	struct srvflag sf[NSERVER_KEYS + 1];
	struct daemon_flag flags[] = {
		DAEMON_FN("listen", set_srvflag, &sf[0]),
		DAEMON_FN("server", set_srvflag, &sf[1]),
		DAEMON_FN("master", set_srvflag, &sf[2]),
		DAEMON_FN("heartbeat-tag", set_srvflag, &sf[3]),
		DAEMON_FN("flatline-tag", set_srvflag, &sf[4]),
		DAEMON_FN("heartbeat-interval", set_srvflag, &sf[5]),
		DAEMON_FN("query-budget", set_srvflag, &sf[6]),
		DAEMON_FN("listing-interval", set_srvflag, &sf[11]),
		DAEMON_FN("public-address", set_srvflag, &sf[12]),
		/* tuning (tests) */
		DAEMON_FN("session-timeout", set_srvflag, &sf[7]),
		DAEMON_FN("probe-timeout", set_srvflag, &sf[8]),
		DAEMON_FN("max-sessions", set_srvflag, &sf[9]),
		DAEMON_FN("unconfirmed-timeout", set_srvflag, &sf[10]),
		DAEMON_FN("listing-delay", set_srvflag, &sf[13]),
		DAEMON_FN("listing-timeout", set_srvflag, &sf[14]),
		/* the query cache, budgets, attack mode */
		DAEMON_FN("query-cache", set_srvflag, &sf[15]),
		DAEMON_FN("query-cache-refresh", set_srvflag, &sf[16]),
		DAEMON_FN("query-cache-max-age", set_srvflag, &sf[17]),
		DAEMON_FN("engine-query-limit", set_srvflag, &sf[18]),
		DAEMON_FN("engine-query-reserve", set_srvflag, &sf[19]),
		DAEMON_FN("reply-budget", set_srvflag, &sf[20]),
		DAEMON_FN("reply-base", set_srvflag, &sf[21]),
		DAEMON_FN("source-budget", set_srvflag, &sf[22]),
		DAEMON_FN("source-prefix", set_srvflag, &sf[23]),
		DAEMON_FN("known-budget", set_srvflag, &sf[24]),
		DAEMON_FN("reply-sources", set_srvflag, &sf[25]),
		DAEMON_FN("attack-threshold", set_srvflag, &sf[26]),
		DAEMON_FN("attack-hold", set_srvflag, &sf[27]),
		DAEMON_FN("known-hours", set_srvflag, &sf[28]),
		DAEMON_FN("known-max", set_srvflag, &sf[29]),
		DAEMON_FN0("transparent", set_srvflag, &sf[30]),
		DAEMON_FN0("no-heartbeat", set_srvflag, &sf[NSERVER_KEYS]),
		DAEMON_STR_SET("servers", c->servers_file),
		DAEMON_ADDR("control", &c->control),
		DAEMON_STR_SET("token-file", c->token_file),
		DAEMON_STR_SET("state-dir", c->state_dir),
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
	bool file;
	int pos;

	for (size_t i = 0; i < NSERVER_KEYS; i++)
		sf[i] = (struct srvflag){.key = server_keys[i], .c = c};
	sf[NSERVER_KEYS] = (struct srvflag){.key = "no-heartbeat", .c = c};
	relay_defaults(c);
	pos = daemon_parse(d, argc, argv, flags, n);
	if (pos < argc)
		daemon_die_usage("unexpected argument: %s", argv[pos]);
	c->tunnel_on = daemon_flag_seen(flags, n, "tunnel-listen");
	c->server_on = daemon_flag_seen(flags, n, "server");
	file = daemon_flag_seen(flags, n, "servers");
	if (file) {
		for (size_t i = 0; i <= NSERVER_KEYS; i++) {
			if (daemon_flag_seen(flags, n, sf[i].key))
				daemon_die_usage("--servers and --%s exclude each other (give it "
						 "in the file, per server or under [defaults])",
						 sf[i].key);
		}
	}
	if (!c->server_on && !file && !c->tunnel_on)
		daemon_die_usage("%s", "--server HOST:PORT is required (or --servers FILE, or "
				       "--tunnel-listen)");
	if (c->tunnel_on) {
		bool keys = c->tunnel_keys[0] != '\0', pg = c->tunnel_pg[0] != '\0';

		if (keys == pg)
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
	if (c->classic.server_tunnel && !c->tunnel_on)
		daemon_die_usage("%s", "--server tunnel:REALM needs --tunnel-listen");
	if (!file && !c->server_on && c->classic.masters_here)
		daemon_die_usage("%s",
				 "--master needs --server (a tunnel alone heartbeats nothing)");
	if (c->classic.no_heartbeat && c->classic.masters_here)
		daemon_die_usage("%s", "--no-heartbeat and --master exclude each other");
	if (c->server_on) {
		char err[120];

		if (relay_server_cfg_finish(&c->classic, err, sizeof(err)) < 0)
			daemon_die_usage("%s", err);
	}
	/* A server may come behind the tunnel: its datagram path opens. */
	c->tunnel_udp = c->tunnel_on && (file || c->classic.server_tunnel);
	c->control_on = daemon_flag_seen(flags, n, "control");
	if (c->control_on && c->token_file[0] == '\0')
		daemon_die_usage("%s", "--control needs --token-file");
}

/* ---- signals and shutdown ---- */

struct app {
	struct daemon d;
	struct relay r;
	bool heartbeats; /* some server heartbeats: a flatline is due */
	bool flatlined;
};

static void shutdown_done(void *arg)
{
	struct app *app = arg;

	app->flatlined = app->heartbeats;
	ev_loop_stop(app->r.loop);
}

/* SIGTERM/SIGINT: the flatlines first, then out. */
static void on_stop(struct daemon *d, void *arg)
{
	struct app *app = arg;

	(void)d;
	app->r.stopping = true;
	for (size_t i = 0; i < app->r.nservers; i++)
		app->heartbeats = app->heartbeats || app->r.servers[i]->hb != NULL;
	relay_servers_shutdown(&app->r, shutdown_done, app);
}

/* SIGHUP: the bans, the token file, the tunnel's keys, the servers file
 * (which reloads the servers' own bans). */
static void on_reload(struct daemon *d, void *arg)
{
	struct app *app = arg;

	(void)d;
	relay_bans_reload(app->r.bans);
	if (app->r.control != NULL)
		relay_control_reload(app->r.control);
	if (app->r.tunnel != NULL)
		relay_tunnel_reload(app->r.tunnel);
	relay_servers_reload(&app->r);
}

/* Start-up only (the loop is not running yet): DNS may block here. */
static int resolve_server(struct relay_server *srv)
{
	const struct relay_server_cfg *c = &srv->cfg;
	char sn[RELAY_NAME_MAX + 16];
	struct addr all[8];
	int gai, n;

	if (c->server_tunnel)
		return 0;
	n = addr_resolve(c->server_host, c->server_port, all, 8, &gai);
	if (n < 0) {
		log_err("server-resolve-fail server=%s:%u error=\"%s\"%s", c->server_host,
			c->server_port, gai_strerror(gai),
			relay_server_logname(srv, sn, sizeof(sn)));
		return n;
	}
	srv->server = all[0];
	return 0;
}

/* The servers of --servers FILE (or the one of the flags) into r->servers,
 * not started. 0, or -errno (logged, with file:line for the file). */
static int load_servers(struct relay *r)
{
	static struct relay_server_cfg cfgs[RELAY_MAX_SERVERS];
	struct cfg_err err;
	char *text = NULL;
	size_t len;
	int n;

	if (r->cfg.servers_file[0] == '\0') {
		if (!r->cfg.server_on)
			return 0;
		r->servers[0] = relay_server_new(r, &r->cfg.classic);
		if (r->servers[0] == NULL)
			return -ENOMEM;
		r->nservers = 1;
		return 0;
	}
	n = statefile_read(r->cfg.servers_file, RELAY_SRVFILE_MAX, &text, &len);
	if (n < 0) {
		errno = -n;
		log_warn("servers-file-unreadable file=%s", r->cfg.servers_file);
		return n;
	}
	n = relay_srvfile_parse(text, len, cfgs, RELAY_MAX_SERVERS, &err);
	free(text);
	if (n >= 0 && relay_servers_check(&r->cfg, cfgs, (size_t)n, &err) < 0)
		n = -EINVAL;
	if (n < 0) {
		if (err.line > 0)
			log_err("servers-file-bad at=%s:%d error=\"%s\"", r->cfg.servers_file,
				err.line, err.msg);
		else
			log_err("servers-file-bad at=%s error=\"%s\"", r->cfg.servers_file,
				err.msg);
		return n;
	}
	if (n == 0)
		log_warnx("servers-file-empty file=%s", r->cfg.servers_file);
	for (int i = 0; i < n; i++) {
		r->servers[i] = relay_server_new(r, &cfgs[i]);
		if (r->servers[i] == NULL)
			return -ENOMEM;
		r->nservers = (size_t)i + 1;
	}
	return 0;
}

/* The ready line names what listens. */
static void ready(struct daemon *d, struct relay *r)
{
	char line[RELAY_MAX_SERVERS * RELAY_MAX_LISTEN * (ADDR_STRLEN + RELAY_NAME_MAX + 12) +
		  2 * (ADDR_STRLEN + 12)],
		a[ADDR_STRLEN];
	struct addr caddr;
	size_t n = 0;

	line[0] = '\0';
	for (size_t i = 0; i < r->nservers; i++) {
		const struct relay_server *srv = r->servers[i];

		for (size_t k = 0; k < srv->cfg.nlisten; k++)
			n += (size_t)snprintf(line + n, sizeof(line) - n, " listen%s%s=%s",
					      srv->cfg.name[0] != '\0' ? "." : "", srv->cfg.name,
					      addr_str(&srv->bound[k], a, sizeof(a)));
	}
	if (relay_tunnel_bound(r->tunnel, &caddr))
		n += (size_t)snprintf(line + n, sizeof(line) - n, " tunnel=%s",
				      addr_str(&caddr, a, sizeof(a)));
	if (relay_control_bound(r->control, &caddr))
		snprintf(line + n, sizeof(line) - n, " control=%s", addr_str(&caddr, a, sizeof(a)));
	daemon_ready(d, "%s", line[0] != '\0' ? line + 1 : "");
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
	static char page[sizeof(usage) + sizeof(usage_qcache) + sizeof(usage_tunnel) +
			 sizeof(usage_api) + sizeof(usage_end)];

	snprintf(page, sizeof(page), "%s%s%s%s%s", usage, usage_qcache, usage_tunnel, usage_api,
		 usage_end);
	daemon_init(d, "rally-relay", page);
	parse_args(d, argc, argv, &r->cfg);
	daemon_start(d);
	r->loop = d->loop;
	r->check_only = d->check;
	r->started = (long long)time(NULL);
	daemon_set_handlers(d, on_stop, on_reload, &app);
	ret = load_servers(r);
	if (ret < 0)
		goto out;
	daemon_raise_nofile(relay_nofile(r), "sessions");
	for (size_t i = 0; i < r->nservers; i++) {
		ret = resolve_server(r->servers[i]);
		if (ret < 0)
			goto out;
	}
	/* Bans first: a corrupt file must stop us before anything listens. */
	ret = relay_bans_new(r, NULL, &r->bans);
	if (ret < 0) {
		log_err("start-fail reason=\"cannot load %s/bans.json\"", r->cfg.state_dir);
		goto out;
	}
	for (size_t i = 0; i < r->nservers; i++) {
		ret = relay_server_load_bans(r->servers[i]);
		if (ret < 0) {
			log_err("start-fail reason=\"cannot load the bans of server %s\"",
				r->servers[i]->cfg.name);
			goto out;
		}
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
		size_t nb = banlist_count(relay_bans_list(r->bans));

		ret = relay_transparent_check_servers(r);
		if (ret < 0)
			goto out;

		if (r->cfg.servers_file[0] != '\0') {
			log_bare("config-ok servers=%zu bans=%zu", r->nservers, nb);
			for (size_t i = 0; i < r->nservers; i++) {
				const struct relay_server *srv = r->servers[i];

				if (srv->cfg.server_tunnel)
					log_bare("config-ok server=%s upstream=tunnel:%s bans=%zu",
						 srv->cfg.name, srv->cfg.server_realm,
						 banlist_count(relay_bans_list(srv->bans)));
				else
					log_bare("config-ok server=%s upstream=%s bans=%zu",
						 srv->cfg.name,
						 addr_str(&srv->server, la, sizeof(la)),
						 banlist_count(relay_bans_list(srv->bans)));
			}
		} else if (r->cfg.classic.server_tunnel) {
			log_bare("config-ok server=tunnel:%s bans=%zu", r->cfg.classic.server_realm,
				 nb);
		} else if (r->cfg.server_on) {
			log_bare("config-ok server=%s bans=%zu",
				 addr_str(&r->servers[0]->server, la, sizeof(la)), nb);
		} else {
			log_bare("config-ok bans=%zu", nb);
		}
		if (r->tunnel != NULL)
			log_bare("config-ok tunnel-realms=%zu", relay_tunnel_keys_count(r->tunnel));
		for (size_t i = 0; i < r->nservers; i++) {
			const struct relay_server *srv = r->servers[i];
			char path[PATH_MAX], sn[RELAY_NAME_MAX + 16];
			size_t known = 0;

			if (relay_qcache_path(srv, path, sizeof(path), NULL, 0) < 0) {
				ret = -ENAMETOOLONG;
				goto out;
			}
			ret = relay_qcache_check_file(&srv->cfg.qcache, path, &known);
			if (ret < 0)
				goto out;
			log_bare("config-ok%s known-players=%zu",
				 relay_server_logname(srv, sn, sizeof(sn)), known);
		}
		goto out;
	}
	for (size_t i = 0; i < r->nservers; i++) {
		ret = relay_server_start(r->servers[i]);
		if (ret < 0)
			goto out;
	}
	if (r->cfg.control_on) {
		ret = relay_control_new(r);
		if (ret < 0)
			goto out;
	}
	ready(d, r);
	for (size_t i = 0; i < r->nservers; i++) {
		const struct relay_server *srv = r->servers[i];
		char sn[RELAY_NAME_MAX + 16];

		relay_server_logname(srv, sn, sizeof(sn));
		if (srv->cfg.server_tunnel)
			log_info("relay server=tunnel:%s masters=%zu tag=%s%s",
				 srv->cfg.server_realm, srv->cfg.nmasters, srv->cfg.heartbeat_tag,
				 sn);
		else
			log_info("relay server=%s masters=%zu tag=%s%s",
				 addr_str(&srv->server, la, sizeof(la)), srv->cfg.nmasters,
				 srv->cfg.heartbeat_tag, sn);
	}

	ret = ev_loop_run(r->loop);
	if (ret < 0) {
		errno = -ret;
		log_warn("loop-fail");
	}
	log_info("stopped flatline=%s", app.flatlined ? "sent" : "no");
	ret = 0;
out:
	relay_control_free(r->control);
	relay_servers_free(r);
	relay_tunnel_free(r->tunnel);
	relay_bans_free(r->bans);
	daemon_free(d);
	return ret < 0 ? DAEMON_EXIT_FAIL : DAEMON_EXIT_OK;
}
