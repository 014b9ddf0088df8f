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
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signal.h>

#include "daemon.h"
#include "log.h"
#include "master.h"
#include "master_redis.h"
#include "statefile.h"

static const char usage[] =
	"Usage: rally-master [OPTION]...\n"
	"Game list and rendezvous server.\n"
	"\n"
	"One registry behind three front doors: the netpunch master HTTP API\n"
	"(GET /list, POST /announce, POST /leave, GET /health, POST /knock and\n"
	"GET /knock for rendezvous notes, and UDP relay ports for lobbies that\n"
	"cannot punch through, with --relay-ip); the Quake 3 / Enemy Territory\n"
	"master protocol on UDP (heartbeat, getinfo challenge, infoResponse,\n"
	"getservers, getserversExt), as dpmaster implements it; and the\n"
	"Fugitive3D server repository (GET/POST/PUT/DELETE /servers and\n"
	"GET /reflection/ip, with a UDP ping-back on registration).\n"
	"\n"
	"The registry is saved to the state directory every 10 s and at exit,\n"
	"and restored at start. GET /metrics (Prometheus) and GET /healthz are\n"
	"served on the HTTP side too.\n"
	"\n"
	"Options:\n"
	"    --http ADDR:PORT          HTTP listener (default 127.0.0.1:8471); repeat\n"
	"                              it for more (0.0.0.0:8471 and [::]:8471)\n"
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
	"    --q3-game SPEC            declare a Quake 3 engine game: SPEC is\n"
	"                              NAME:heartbeat=TAG, then any of\n"
	"                              ,flatline=TAG ,protocols=N/N and\n"
	"                              ,options=send-empty-servers/send-full-servers\n"
	"    --log auto|plain|journal  log format (auto: journal if stderr is it)\n"
	"    --debug                   log every request and datagram\n"
	"    --check-config            check the flags and the snapshot, then exit\n"
	"    --help                    print this help, then exit\n"
	"    --version                 print the version, then exit\n"
	"\n"
	"Tuning (for tests; the references' values by default):\n"
	"    --lobby-ttl MS            a lobby not announced again (default 30000)\n"
	"    --knock-ttl MS            a knock not fetched (default 60000)\n"
	"    --relay-idle MS           a relay port with no traffic (default 90000)\n"
	"    --relay-life MS           a relay port at most (default 43200000, 12 h)\n"
	"    --q3-ttl MS               a Q3 server not heard from (default 900000,\n"
	"                              15 min)\n"
	"    --q3-challenge MS         a heartbeat's challenge (default 2000)\n"
	"    --ping-timeout MS         a Fugitive ping-back (default 5000)\n"
	"    --snapshot-interval MS    between snapshots (default 10000)\n"
	"    --verify-lists            check every kept listing against a fresh build\n"
	"                              on every request (exits on a difference)\n"
	"\n";

/* The rest of the page (C99 caps one literal at 4,095 bytes). */
static const char usage_rest[] =
	"Shared registry (several masters behind one name; off by default):\n"
	"    --redis URL               share lobbies, Q3 and Fugitive servers, knocks and\n"
	"                              relay allocations through Redis:\n"
	"                              redis://[USER@]HOST[:PORT][/DB], HOST:PORT or\n"
	"                              unix:/PATH (no password in the URL)\n"
	"    --redis-password-file F   Redis password (first line of F)\n"
	"    --redis-user NAME         Redis ACL user (or USER@ in the URL)\n"
	"    --redis-prefix P          key and channel prefix (default rally)\n"
	"    --redis-timeout MS        connect and command timeout (default 2000)\n"
	"    --redis-node NAME         this master's name in Redis (default random;\n"
	"                              unique per master)\n"
	"\n"
	"Signals:\n"
	"    SIGTERM, SIGINT           answer what is pending, save the snapshot,\n"
	"                              exit (a second one: exit at once)\n"
	"    SIGHUP                    nothing to reload (logged)\n"
	"\n"
	"Output:\n"
	"    Once bound: \"ready http=IP:PORT udp=IP:PORT\" on stderr.\n"
	"\n"
	"Exit status:\n"
	"    0                         stopped by SIGTERM or SIGINT, or --check-config\n"
	"                              found nothing wrong\n"
	"    1                         failed: a corrupt snapshot, a port that cannot\n"
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
	"    /var/lib/rally-master/registry.json\n"
	"                              the registry snapshot (--state-dir)\n"
	"    /etc/default/rally-master\n"
	"                              the flags rally-master.service adds\n";

static void parse_ports(void *ctx, const char *s)
{
	struct master_cfg *c = ctx;
	const char *dash = strchr(s, '-');
	char a[8];
	size_t n;

	if (dash == NULL || (n = (size_t)(dash - s)) == 0 || n >= sizeof(a))
		daemon_die_usage("--relay-ports %s: expected A-B", s);
	memcpy(a, s, n);
	a[n] = '\0';
	c->relay_lo = (uint16_t)daemon_parse_num(a, 1, 65535, "--relay-ports");
	c->relay_hi = (uint16_t)daemon_parse_num(dash + 1, 1, 65535, "--relay-ports");
	if (c->relay_hi < c->relay_lo || c->relay_hi - c->relay_lo >= 4096)
		daemon_die_usage("--relay-ports %s: need A <= B and at most 4096 ports", s);
}

static void add_http(void *ctx, const char *s)
{
	struct master_cfg *c = ctx;

	if (c->nhttp == MASTER_MAX_HTTP)
		daemon_die_usage("--http: at most %d listeners", MASTER_MAX_HTTP);
	if (addr_parse(&c->http[c->nhttp], s, -1) < 0)
		daemon_die_usage("--http %s: expected IP:PORT", s);
	c->nhttp++;
}

static void add_trusted(void *ctx, const char *s)
{
	struct master_cfg *c = ctx;
	struct addr a;

	if (c->ntrusted == MASTER_MAX_TRUSTED)
		daemon_die_usage("--trusted-proxy: at most %d", MASTER_MAX_TRUSTED);
	if (addr_parse_ip(&a, s) < 0)
		daemon_die_usage("--trusted-proxy %s: not an IP address", s);
	addr_to_ip(&a, &c->trusted[c->ntrusted++]);
}

static void set_relay_ip(void *ctx, const char *s)
{
	struct master_cfg *c = ctx;
	struct addr a;

	if (addr_parse_ip(&a, s) < 0 || !addr_is_v4(&a))
		daemon_die_usage("--relay-ip %s: expected an IPv4 address", s);
	daemon_copy(c->relay_ip, sizeof(c->relay_ip), s, "--relay-ip", true);
	c->relay_on = true;
}

static void set_relay_bind(void *ctx, const char *s)
{
	struct master_cfg *c = ctx;

	if (addr_parse_ip(&c->relay_bind, s) < 0 || !addr_is_v4(&c->relay_bind))
		daemon_die_usage("--relay-bind %s: expected an IPv4 address", s);
}

static void set_state_dir(void *ctx, const char *s)
{
	struct master_cfg *c = ctx;

	/* Room for "/registry.json" and the temp suffix after it. */
	if (s[0] == '\0' || strlen(s) >= sizeof(c->state_dir) - 32)
		daemon_die_usage("--state-dir: empty or too long");
	snprintf(c->state_dir, sizeof(c->state_dir), "%s", s);
}

static void set_redis(void *ctx, const char *s)
{
	struct master_redis_cfg *rc = ctx;
	char err[160];

	if (master_redis_url_parse(s, &rc->url, err, sizeof(err)) < 0)
		daemon_die_usage("--redis %s: %s", s, err);
	rc->on = true;
}

static void set_redis_name(char *dst, const char *s, const char *what)
{
	if (!master_redis_name_ok(s, strlen(s)))
		daemon_die_usage("--%s %s: 1-32 of A-Za-z0-9_.-", what, s);
	snprintf(dst, MASTER_REDIS_NAME_MAX + 1, "%s", s);
}

static void set_redis_prefix(void *ctx, const char *s)
{
	set_redis_name(((struct master_redis_cfg *)ctx)->prefix, s, "redis-prefix");
}

static void set_redis_node(void *ctx, const char *s)
{
	set_redis_name(((struct master_redis_cfg *)ctx)->node, s, "redis-node");
}

static void add_q3_game(void *ctx, const char *s)
{
	struct master_cfg *c = ctx;

	if (c->nq3_games == sizeof(c->q3_games) / sizeof(c->q3_games[0]))
		daemon_die_usage("--q3-game: at most 16");
	c->q3_games[c->nq3_games++] = s;
}

/* The references' values (the netpunch master, dpmaster, the Go service). */
static void master_defaults(struct master_cfg *c)
{
	memset(c, 0, sizeof(*c));
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
}

static void parse_args(struct daemon *d, int argc, char **argv, struct master_cfg *c,
		       struct master_redis_cfg *rc)
{
	char redis_user[sizeof(rc->url.user)] = "";
	struct daemon_flag flags[] = {
		DAEMON_FN("http", add_http, c),
		DAEMON_ADDR("udp", &c->udp),
		DAEMON_FN("relay-ip", set_relay_ip, c),
		DAEMON_FN("relay-ports", parse_ports, c),
		DAEMON_FN("relay-bind", set_relay_bind, c),
		DAEMON_FN("state-dir", set_state_dir, c),
		DAEMON_NUM("stale", &c->stale_ms, 1, 86400, 1000),
		DAEMON_FN("trusted-proxy", add_trusted, c),
		DAEMON_FN("q3-game", add_q3_game, c),
		DAEMON_FN("redis", set_redis, rc),
		DAEMON_STR_SET("redis-password-file", rc->password_file),
		DAEMON_STR_SET("redis-user", redis_user),
		DAEMON_FN("redis-prefix", set_redis_prefix, rc),
		DAEMON_NUM("redis-timeout", &rc->timeout_ms, 50, 600000, 1),
		DAEMON_FN("redis-node", set_redis_node, rc),
		/* tuning (tests) */
		DAEMON_NUM("lobby-ttl", &c->lobby_ttl_ms, 1, 86400000, 1),
		DAEMON_NUM("knock-ttl", &c->knock_ttl_ms, 1, 86400000, 1),
		DAEMON_NUM("relay-idle", &c->relay_idle_ms, 1, 86400000, 1),
		DAEMON_NUM("relay-life", &c->relay_life_ms, 1, 7 * 86400000LL, 1),
		DAEMON_NUM("q3-ttl", &c->q3_ttl_ms, 1, 86400000, 1),
		DAEMON_NUM("q3-challenge", &c->q3_challenge_ms, 1, 60000, 1),
		DAEMON_NUM("ping-timeout", &c->ping_timeout_ms, 1, 60000, 1),
		DAEMON_NUM("snapshot-interval", &c->snapshot_ms, 10, 86400000, 1),
		DAEMON_BOOL("verify-lists", &c->verify_lists),
	};
	const size_t n = DAEMON_NFLAGS(flags);
	int pos;

	master_defaults(c);
	memset(rc, 0, sizeof(*rc));
	snprintf(rc->prefix, sizeof(rc->prefix), "rally");
	rc->timeout_ms = 2000;
	pos = daemon_parse(d, argc, argv, flags, n);
	if (pos < argc)
		daemon_die_usage("unexpected argument: %s", argv[pos]);
	if (c->nhttp == 0)
		add_http(c, "127.0.0.1:8471");
	if (!rc->on && (daemon_flag_seen(flags, n, "redis-password-file") ||
			daemon_flag_seen(flags, n, "redis-user") ||
			daemon_flag_seen(flags, n, "redis-prefix") ||
			daemon_flag_seen(flags, n, "redis-timeout") ||
			daemon_flag_seen(flags, n, "redis-node")))
		daemon_die_usage("the --redis-* flags need --redis");
	if (redis_user[0] != '\0') {
		if (!master_redis_name_ok(redis_user, strlen(redis_user)))
			daemon_die_usage("--redis-user %s: 1-32 of A-Za-z0-9_.-", redis_user);
		if (rc->url.user[0] != '\0' && strcmp(rc->url.user, redis_user) != 0)
			daemon_die_usage("--redis-user %s: the URL names user %s", redis_user,
					 rc->url.user);
		snprintf(rc->url.user, sizeof(rc->url.user), "%s", redis_user);
	}
	if (rc->url.user[0] != '\0' && rc->password_file[0] == '\0')
		daemon_die_usage("a Redis user needs --redis-password-file");
	if (!daemon_flag_seen(flags, n, "trusted-proxy")) {
		add_trusted(c, "127.0.0.1");
		add_trusted(c, "::1");
	}
}

/* ---- running ---- */

struct app {
	struct daemon d;
	struct master m;
	struct master_redis_cfg redis;
	char snapshot[sizeof(((struct master_cfg *)0)->state_dir) + 16];
	struct ev_timer drain;
};

static void on_drain(struct ev_timer *t, void *arg)
{
	struct app *app = arg;

	(void)t;
	ev_loop_stop(app->m.loop);
}

static void on_stop(struct daemon *d, void *arg)
{
	struct app *app = arg;

	app->m.stopping = true;
	ev_loop_stop(d->loop);
}

int main(int argc, char **argv)
{
	static struct app app;
	struct daemon *d = &app.d;
	struct master *m = &app.m;
	char ha[ADDR_STRLEN], ua[ADDR_STRLEN];
	int r, ret = DAEMON_EXIT_FAIL;
	static char page[sizeof(usage) + sizeof(usage_rest)];

	snprintf(page, sizeof(page), "%s%s", usage, usage_rest);
	daemon_init(d, "rally-master", page);
	parse_args(d, argc, argv, &m->cfg, &app.redis);
	daemon_start(d);
	m->loop = d->loop;
	daemon_set_handlers(d, on_stop, NULL, &app);
	ev_timer_init(&app.drain);
	/* Each idle HTTP client and each relay port holds a descriptor. */
	daemon_raise_nofile(32768, "connections");
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
	if (d->check) {
		if (app.redis.on && master_redis_check_config(&app.redis) < 0)
			goto out;
		log_bare("config-ok lobbies=%zu q3=%zu fugitive=%zu",
			 master_registry_count(m->reg, MASTER_REG_LOBBY),
			 master_registry_count(m->reg, MASTER_REG_Q3),
			 master_registry_count(m->reg, MASTER_REG_FUGITIVE));
		ret = DAEMON_EXIT_OK;
		goto out;
	}
	if ((r = master_http_new(m)) < 0)
		goto out; /* it said which listener */
	/* After the snapshot: what it restored is published once connected. */
	if (app.redis.on && (r = master_redis_new(m, &app.redis)) < 0)
		goto fail;
	/* The ready line names the first listener; the others say so here. */
	for (size_t i = 1; master_http_addr(m->http, i) != NULL; i++)
		log_info("http-listening http=%s",
			 addr_str(master_http_addr(m->http, i), ha, sizeof(ha)));
	master_registry_autosave(m->reg, app.snapshot, m->cfg.snapshot_ms);
	daemon_ready(d, "http=%s udp=%s", addr_str(master_http_addr(m->http, 0), ha, sizeof(ha)),
		     addr_str(master_q3_addr(m->q3), ua, sizeof(ua)));

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
	ret = DAEMON_EXIT_OK;
	goto out;
fail:
	errno = -r;
	log_warn("start-fail");
out:
	master_http_free(m->http);
	master_fugitive_free(m->fug);
	master_list_free(m->fug_list);
	master_list_free(m->lobby_list);
	master_q3_free(m->q3);
	master_relayport_free(m->relay);
	master_knock_free(m->knock);
	master_redis_free(m->redis);
	master_registry_free(m->reg);
	daemon_free(d);
	return ret;
}
