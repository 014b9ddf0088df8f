/*
 * rally-lobby: a drop-in for netpunch's lobby (0.6.1.24), launched by the
 * game beside it or by a player.
 *
 *   rally-lobby host [options]          make a lobby, print CODE=...
 *   rally-lobby join CODE [options]     join one
 *   rally-lobby code CODE [--password]  decode a code and print it (exit 2
 *                                       on a bad one)
 *   rally-lobby observe [--stun ...]    print this machine's connectivity
 *
 * main() parses the command line (netpunch's flags plus ours), opens the
 * IPC files and the game's loopback socket, starts the host or the joiner
 * and runs the loop. A locked code is decoded on the worker thread (PBKDF2,
 * 600,000 iterations). SIGINT/SIGTERM quit as the "quit" command does.
 */
#include <errno.h>
#include <json-c/json.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signal.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "curlev.h"
#include "joincode.h"
#include "lobby.h"
#include "lobby_dual.h"
#include "lobby_relay.h"
#include "lobby_logfwd.h"
#include "lobby_metrics.h"
#include "lobby_xprog.h"
#include "lobby_save.h"
#include "lobby_trav.h"
#include "log.h"
#include "natpmp.h"
#include "strbuf.h"
#include "seal.h"

static const char usage[] =
	"Usage: rally-lobby host [OPTION]...\n"
	"  or:  rally-lobby host --relay-only [OPTION]...\n"
	"  or:  rally-lobby join CODE [OPTION]...\n"
	"  or:  rally-lobby put-save SAVE --io-dir DIR\n"
	"  or:  rally-lobby code CODE [--password PW]\n"
	"  or:  rally-lobby observe [--json] [--stun HOST:PORT]...\n"
	"Find each other, get through NATs, play together.\n"
	"\n"
	"The lobby beside the game, wire-compatible with netpunch 0.6.1.24\n"
	"(docs/lobby.md). The game talks to it through lobby_out.jsonl,\n"
	"lobby_in.jsonl and lobby_state.json in the io dir, and UDP on loopback.\n"
	"host opens a lobby and prints its join code; join CODE joins one;\n"
	"host --relay-only is the dedicated relay lobby of a server, no player\n"
	"of its own (rally-lobby-relay.service runs it); put-save replaces the\n"
	"stored world of the relay at --io-dir; code CODE says what a code\n"
	"holds; observe prints this machine's connectivity.\n"
	"\n"
	"Options:\n"
	"netpunch's options (the same flags and meaning as netpunch's):\n"
	"    --name NAME               player name (default player)\n"
	"    --local-port PORT         lobby UDP port (host default 29471; a joiner\n"
	"                              takes an ephemeral port unless given)\n"
	"    --timeout S               a joiner gives up after S seconds (default 40)\n"
	"    --io-dir DIR              where the IPC files live (default: cwd)\n"
	"    --password PW             lock the code / open a locked code\n"
	"    --lobby-name NAME         the lobby's name in lists\n"
	"    --publish URL --public    list the lobby on that master (announce every\n"
	"                              10 s, leave on exit)\n"
	"    --rendezvous URL|off      master for knocks (default: --publish, else\n"
	"                              netpunch's own)\n"
	"    --game-relay-port PORT    loopback port the game sends frames to (host\n"
	"                              7773, joiner the first free of 7774-7805;\n"
	"                              0 = any)\n"
	"    --game-local-port PORT    the game's own port (default 7771)\n"
	"    --forward-log PATH        also ship this file's new lines to the host's\n"
	"                              lobby_peers.log (repeatable, 16 at most)\n"
	"    --no-mesh                 a star joiner: no direct links to the others\n"
	"    --companies               start in companies mode\n"
	"    --relay-only              dedicated relay lobby: no player here, the\n"
	"                              oldest player leads (docs/lobby.md)\n"
	"    --dedicated               keep the code across restarts\n"
	"\n";

/* The rest of the page (one literal would pass C99's 4,095 bytes). */
static const char usage_ours[] =
	"Options of rally-lobby alone:\n"
	"    --stun HOST:PORT|off      STUN server, repeatable (default: netpunch's\n"
	"                              public ones)\n"
	"    --lan-ip IP[:PORT]        the LAN address (and port) to advertise\n"
	"    --upnp on|off             ask the router for a port mapping (host; on)\n"
	"    --schedule fast|netpunch  when a joiner knocks and asks for a relay port:\n"
	"                              at once where a direct race cannot win alone\n"
	"                              (fast), or netpunch's 4 s and 2nd knock; a\n"
	"                              host polls its knocks 4x a second while a\n"
	"                              knock is likely (fast) or every second\n"
	"    --json                    observe: the profile as JSON\n"
	"    --natpmp on|off           ask it by NAT-PMP when UPnP maps nothing (host;\n"
	"                              default: as --upnp)\n"
	"    --natpmp-lifetime S       the mapping's lifetime asked, renewed at half\n"
	"                              of it (default 3600, at least 4)\n"
	"    --ipv6 on|off|IP          IPv6 too: a global address of ours, or IP (on)\n"
	"    --protocol-version V      the version sent and required (default 0.6.1.24)\n"
	"    --max-players N           players at most, the host included (default 200)\n"
	"    --max-save BYTES          the largest save a joiner takes (default 4 GiB)\n"
	"    --bulk-tcp on|off         offer saves over TCP too (host; on), as netpunch\n"
	"    --fast-transfer on|off    rally's faster save transfer between two\n"
	"                              rally-lobbies (on; off: netpunch's alone)\n"
	"    --max-rate BYTES          bytes per second a save goes to each peer at\n"
	"                              most (host; default: what the path takes)\n"
	"    --metrics IP:PORT         serve /metrics (Prometheus) and /healthz there\n"
	"                              (host; off by default; loopback unless\n"
	"                              --metrics-token-file; port 0: any)\n"
	"    --metrics-token-file FILE /metrics needs this bearer token (32+ chars)\n"
	"    --log auto|plain|journal  log format (auto: journal if stderr is it)\n"
	"    --debug                   log every frame and message\n"
	"    --check-config            check the flags (and a join CODE), then exit\n"
	"    --help                    print this help, then exit\n"
	"    --version                 print the version, then exit\n";

/* The rest of the page (C99 caps one literal at 4,095 bytes). */
static const char usage_rest[] =
	"\n"
	"Output:\n"
	"    The host prints CODE=<code> on stdout; everything else goes to stderr,\n"
	"    starting with \"ready udp=IP:PORT game=IP:PORT\" once bound.\n"
	"\n"
	"Exit status (as netpunch's):\n"
	"    0                         quit, lobby closed, or a joiner's session\n"
	"                              ended once it reached the host (left, told\n"
	"                              bye, rejected, version mismatch, host gone)\n"
	"    1                         failed: the host never reached, the lobby\n"
	"                              could not start\n"
	"    2                         bad usage or a bad code\n"
	"\n"
	"Environment:\n"
	"    TPF2MP_LOG_IPS            1: log public addresses unmasked\n"
	"    NOTIFY_SOCKET, WATCHDOG_USEC\n"
	"                              set by systemd (Type=notify, WatchdogSec=):\n"
	"                              READY=1 once bound, WATCHDOG=1, STOPPING=1\n"
	"\n"
	"Files:\n"
	"    lobby_out.jsonl, lobby_in.jsonl, lobby_state.json\n"
	"                              the game's side, in the io dir (docs/lobby.md)\n"
	"    tpf2mp_netsim.txt         in the io dir, read once: loss=, delay=,\n"
	"                              jitter=: impair what we send (the netsim\n"
	"                              command reads it again)\n"
	"    tpf2mp_tcp_backup.txt     in the io dir, read once: 0, off or no: no\n"
	"                              dual TCP backup link (on by default in a\n"
	"                              sealed session: every sealed frame also goes\n"
	"                              over a TCP link, first copy wins)\n"
	"    /var/lib/rally-lobby-relay\n"
	"                              rally-lobby-relay.service's io dir: the\n"
	"                              relay's code secret, letters, companies and\n"
	"                              stored world\n"
	"    /etc/default/rally-lobby-relay\n"
	"                              the flags rally-lobby-relay.service adds\n";

/* netpunch's public STUN servers (NETWORKING.md, Ports). */
static const char *const default_stun[] = {
	"stun.l.google.com:19302",
	"stun1.l.google.com:19302",
	"stun.cloudflare.com:3478",
};

static void add_stun(void *ctx, const char *s)
{
	struct lobby_cfg *c = ctx;
	struct lobby_stun_server *st;

	if (strcmp(s, "off") == 0) {
		c->stun_off = true;
		c->nstun = 0;
		return;
	}
	if (c->nstun == LOBBY_MAX_STUN)
		daemon_die_usage("--stun: at most %d servers", LOBBY_MAX_STUN);
	st = &c->stun[c->nstun];
	if (addr_split_hostport(s, st->host, sizeof(st->host), &st->port) < 0 || st->port == 0)
		daemon_die_usage("--stun %s: expected HOST:PORT", s);
	c->nstun++;
}

static void set_password(void *ctx, const char *s)
{
	struct lobby_cfg *c = ctx;

	daemon_copy(c->password, sizeof(c->password), s, "--password", false);
	c->has_password = s[0] != '\0';
}

static void set_rendezvous(void *ctx, const char *s)
{
	struct lobby_cfg *c = ctx;

	if (strcmp(s, "off") == 0)
		c->rendezvous_off = true;
	else
		daemon_copy(c->rendezvous_url, sizeof(c->rendezvous_url), s, "--rendezvous", false);
}

static void set_lan(void *ctx, const char *s)
{
	struct lobby_cfg *c = ctx;

	if (addr_parse(&c->lan, s, -1) == 0)
		c->lan_port_set = true;
	else if (addr_parse_ip(&c->lan, s) < 0)
		daemon_die_usage("--lan-ip %s: expected IP or IP:PORT", s);
	if (!addr_is_v4(&c->lan))
		daemon_die_usage("--lan-ip %s: IPv4 only", s);
	c->lan_set = true;
}

/* An on|off flag's value: true for off (an off stays off), usage error
 * for anything else. */
static bool is_off(const char *flag, const char *s)
{
	if (strcmp(s, "off") == 0)
		return true;
	if (strcmp(s, "on") != 0)
		daemon_die_usage("--%s %s: on or off", flag, s);
	return false;
}

static void set_upnp(void *ctx, const char *s)
{
	struct lobby_cfg *c = ctx;

	c->upnp_off = c->upnp_off || is_off("upnp", s);
}

static void set_natpmp(void *ctx, const char *s)
{
	struct lobby_cfg *c = ctx;

	c->natpmp_off = c->natpmp_off || is_off("natpmp", s);
}

/* on: a v6 socket and our global address as the v6 candidate; IP: that
 * address instead (tests: ::1); off: IPv4 alone, as netpunch. */
static void set_ipv6(void *ctx, const char *s)
{
	struct lobby_cfg *c = ctx;
	struct addr_ip ip;
	struct addr plain;

	c->ipv6_off = strcmp(s, "off") == 0;
	c->v6_set = false;
	if (c->ipv6_off || strcmp(s, "on") == 0)
		return;
	if (addr_parse_ip(&c->v6, s) < 0 || addr_family(&c->v6) != AF_INET6)
		daemon_die_usage("--ipv6 %s: on, off or an IPv6 address", s);
	addr_to_ip(&c->v6, &ip);
	addr_from_ip(&plain, &ip, 0);
	if (addr_is_v4(&plain))
		daemon_die_usage("--ipv6 %s: a v4-mapped address is IPv4", s);
	c->v6_set = true;
}

static void set_bulk(void *ctx, const char *s)
{
	struct lobby_cfg *c = ctx;

	c->bulk_off = c->bulk_off || is_off("bulk-tcp", s);
}

static void set_schedule(void *ctx, const char *s)
{
	struct lobby_cfg *c = ctx;

	if (strcmp(s, "netpunch") == 0)
		c->netpunch_schedule = true;
	else if (strcmp(s, "fast") != 0)
		daemon_die_usage("--schedule %s: fast or netpunch", s);
}

static void set_fast(void *ctx, const char *s)
{
	struct lobby_cfg *c = ctx;

	c->fast_off = c->fast_off || is_off("fast-transfer", s);
}

/* --metrics IP:PORT: where /metrics and /healthz listen. */
static void set_metrics(void *ctx, const char *s)
{
	struct lobby_cfg *c = ctx;

	if (addr_parse(&c->metrics, s, -1) < 0)
		daemon_die_usage("--metrics %s: expected IP:PORT (127.0.0.1:29480)", s);
	c->metrics_set = true;
}

static void add_forward_log(void *ctx, const char *s)
{
	struct lobby_cfg *c = ctx;
	size_t max = sizeof(c->forward_log) / sizeof(c->forward_log[0]);

	if (c->nforward_log == max)
		daemon_die_usage("--forward-log %s: %zu files at most", s, max);
	if (s[0] == '\0')
		daemon_die_usage("--forward-log: a path is needed");
	c->forward_log[c->nforward_log++] = s;
}

/* Every log line into the forwarder (the tap runs on any thread). */
static void tap_line(const char *text, size_t len, void *arg)
{
	lobby_logfwd_add(arg, text, len, NULL);
}

static void parse_args(struct daemon *d, int argc, char **argv, struct lobby_cfg *c)
{
	struct daemon_flag flags[] = {
		/* netpunch's */
		DAEMON_STR("name", c->name),
		DAEMON_NUM("local-port", &c->local_port, 0, 65535, 1),
		DAEMON_NUM("timeout", &c->timeout_ms, 1, 86400, 1000),
		DAEMON_STR("io-dir", c->io_dir),
		DAEMON_FN("password", set_password, c),
		DAEMON_STR("lobby-name", c->lobby_name),
		DAEMON_STR("publish", c->publish_url),
		DAEMON_BOOL("public", &c->public_),
		DAEMON_FN("rendezvous", set_rendezvous, c),
		DAEMON_NUM("game-relay-port", &c->game_relay_port, 0, 65535, 1),
		DAEMON_NUM("game-local-port", &c->game_local_port, 1, 65535, 1),
		DAEMON_FN("forward-log", add_forward_log, c),
		DAEMON_BOOL("no-mesh", &c->no_mesh),
		DAEMON_BOOL("companies", &c->companies),
		/* netpunch's for what comes later: refused clearly */
		DAEMON_BOOL("relay-only", &c->relay_only),
		DAEMON_BOOL("dedicated", &c->dedicated),
		/* netpunch's, accepted and without effect here */
		DAEMON_IGNORE("crossplay"),
		DAEMON_IGNORE("share-mods"),
		DAEMON_IGNORE("no-share-mods"),
		DAEMON_IGNORE_ARG("sync-runtime-dir"),
		DAEMON_IGNORE_ARG("save-dir"),
		DAEMON_IGNORE_ARG("game-pid"),
		/* ours */
		DAEMON_FN("stun", add_stun, c),
		DAEMON_FN("lan-ip", set_lan, c),
		DAEMON_FN("upnp", set_upnp, c),
		DAEMON_FN("schedule", set_schedule, c),
		DAEMON_BOOL("json", &c->observe_json),
		DAEMON_FN("natpmp", set_natpmp, c),
		DAEMON_NUM("natpmp-lifetime", &c->natpmp_lifetime, 4, 86400, 1),
		DAEMON_FN("ipv6", set_ipv6, c),
		DAEMON_STR("protocol-version", c->protocol_version),
		DAEMON_NUM("max-players", &c->max_players, 1, LOBBY_CAP, 1),
		DAEMON_NUM("max-save", &c->max_save, 0, 1LL << 50, 1),
		DAEMON_FN("bulk-tcp", set_bulk, c),
		DAEMON_FN("fast-transfer", set_fast, c),
		DAEMON_NUM("max-rate", &c->max_rate, 0, 1LL << 40, 1),
		DAEMON_FN("metrics", set_metrics, c),
		DAEMON_STR("metrics-token-file", c->metrics_token_file),
	};
	const size_t n = DAEMON_NFLAGS(flags);
	const char *cmd;
	int pos;

	memset(c, 0, sizeof(*c));
	if (argc >= 2 && strcmp(argv[1], "-h") == 0) {
		fputs(usage, stdout);
		fputs(usage_ours, stdout);
		fputs(usage_rest, stdout);
		exit(DAEMON_EXIT_OK);
	}
	snprintf(c->name, sizeof(c->name), "player");
	c->timeout_ms = 40000;
	c->max_players = LOBBY_CAP;
	c->game_local_port = 7771;
	c->max_save = LOBBY_SAVE_CAP_BYTES;
	c->natpmp_lifetime = NATPMP_LIFETIME_S;
	snprintf(c->protocol_version, sizeof(c->protocol_version), "%s", LOBBY_VERSION_DEFAULT);

	pos = daemon_parse(d, argc, argv, flags, n);
	if (pos >= argc)
		daemon_die_usage("a command is needed: host, join CODE, code CODE or observe");
	cmd = argv[pos++];
	if (strcmp(cmd, "host") == 0)
		c->mode = LOBBY_MODE_HOST;
	else if (strcmp(cmd, "join") == 0)
		c->mode = LOBBY_MODE_JOIN;
	else if (strcmp(cmd, "code") == 0)
		c->mode = LOBBY_MODE_CODE;
	else if (strcmp(cmd, "observe") == 0)
		c->mode = LOBBY_MODE_OBSERVE;
	else if (strcmp(cmd, "put-save") == 0)
		c->mode = LOBBY_MODE_PUT_SAVE;
	else
		daemon_die_usage("unknown command: %s", cmd);
	if (c->mode == LOBBY_MODE_JOIN || c->mode == LOBBY_MODE_CODE) {
		if (pos >= argc)
			daemon_die_usage("%s needs a CODE", cmd);
		daemon_copy(c->code, sizeof(c->code), argv[pos++], "CODE", false);
	}
	if (c->mode == LOBBY_MODE_PUT_SAVE) {
		if (pos >= argc)
			daemon_die_usage("put-save needs a SAVE");
		daemon_copy(c->put_save, sizeof(c->put_save), argv[pos++], "SAVE", false);
	}
	if ((c->relay_only || c->dedicated) && c->mode != LOBBY_MODE_HOST)
		daemon_die_usage("--relay-only and --dedicated are for host");
	if (pos < argc)
		daemon_die_usage("unexpected argument: %s", argv[pos]);
	if ((c->metrics_set || c->metrics_token_file[0] != '\0') && c->mode != LOBBY_MODE_HOST)
		daemon_die_usage("--metrics and --metrics-token-file are for host");
	if (c->metrics_token_file[0] != '\0' && !c->metrics_set)
		daemon_die_usage("--metrics-token-file needs --metrics IP:PORT");
	/* Counters of who plays where are an operator's, not the internet's. */
	if (c->metrics_set && !addr_is_loopback(&c->metrics) && c->metrics_token_file[0] == '\0') {
		char a[ADDR_STRLEN];

		daemon_die_usage("--metrics %s: not a loopback address; keep /metrics on "
				 "127.0.0.1 (or behind a proxy), or give --metrics-token-file FILE "
				 "to require a bearer token",
				 addr_str(&c->metrics, a, sizeof(a)));
	}
	c->local_port_set = daemon_flag_seen(flags, n, "local-port");
	c->game_relay_set = daemon_flag_seen(flags, n, "game-relay-port");
	/* NAT-PMP is UPnP's fallback: --upnp off ("leave the router alone" in
	 * every script written before NAT-PMP) turns it off too, unless asked. */
	if (c->upnp_off && !daemon_flag_seen(flags, n, "natpmp"))
		c->natpmp_off = true;
	if (!daemon_flag_seen(flags, n, "stun")) {
		for (size_t i = 0; i < sizeof(default_stun) / sizeof(default_stun[0]); i++)
			add_stun(c, default_stun[i]);
	}
}

/* ---- running ---- */

struct app {
	struct daemon d;
	struct lobby l;
};

void lobby_exit(struct lobby *l, int status)
{
	if (l->stopping)
		return;
	l->stopping = true;
	l->exit_status = status;
	ev_loop_stop(l->loop);
}

/* SIGINT/SIGTERM act as the quit command; once stopping, they stop. */
static void on_stop(struct daemon *d, void *arg)
{
	struct lobby *l = arg;

	(void)d;
	if (l->stopping) {
		ev_loop_stop(l->loop);
		return;
	}
	if (l->role != NULL)
		l->role->quit(l);
	else
		lobby_exit(l, 0);
}

/* SIGHUP: the metrics token file again (the rest comes from the command
 * line). */
static void on_reload(struct daemon *d, void *arg)
{
	(void)d;
	lobby_metrics_reload(arg);
}

static void print_code(const struct joincode *c)
{
	char a[ADDR_STRLEN];

	printf("ts=%u\nage=%lld\nstale=%s\nlocked=%s\n", c->ts, c->age, c->stale ? "yes" : "no",
	       c->locked ? "yes" : "no");
	printf("flags=%s%s%s%s\n", c->open ? "open " : "", c->symmetric ? "symmetric " : "",
	       c->cgnat ? "cgnat " : "", c->v6 ? "v6" : "");
	if (c->has_lan)
		printf("lan_v4=%s\n", addr_str(&c->lan, a, sizeof(a)));
	if (c->has_public)
		printf("public_v4=%s\n", addr_str(&c->pub, a, sizeof(a)));
	if (c->has_v6)
		printf("v6=%s\n", addr_str(&c->v6addr, a, sizeof(a)));
	if (c->has_vpn)
		printf("vpn_v4=%s\n", addr_str(&c->vpn, a, sizeof(a)));
	if (c->has_vpn2)
		printf("vpn2_v4=%s\n", addr_str(&c->vpn2, a, sizeof(a)));
	if (c->steam != 0)
		printf("steam=%llu\n", (unsigned long long)c->steam);
	printf("secret=%s\n", c->has_secret ? "yes" : "no");
}

/* put-save: the stored world of a relay replaced from outside. */
static int cmd_put_save(const struct lobby_cfg *c)
{
	const char *dir = c->io_dir[0] != '\0' ? c->io_dir : ".";
	char err[PATH_MAX + 256];
	int r = lobby_relay_put_save(dir, c->put_save, c->max_save, err, sizeof(err));

	if (r < 0) {
		fprintf(stderr, "rally-lobby: put-save: %s\n", err);
		log_err("put-save-fail save=\"%s\" dir=\"%s\" error=\"%s\"", c->put_save, dir, err);
		return DAEMON_EXIT_FAIL;
	}
	log_info("put-save save=\"%s\" dir=\"%s\"", c->put_save, dir);
	return DAEMON_EXIT_OK;
}

static int cmd_code(struct lobby_cfg *c)
{
	struct joincode jc;
	char err[160];
	uint64_t steam;

	if (joincode_steam_id(c->code, &steam)) {
		printf("steam_only=%llu\n", (unsigned long long)steam);
		return 0;
	}
	/* A CLI tool, not the loop: PBKDF2 may block here. */
	if (joincode_decode(c->code, c->has_password ? c->password : NULL, (long long)time(NULL),
			    &jc, err, sizeof(err)) < 0) {
		fprintf(stderr, "rally-lobby: bad code: %s\n", err);
		return 2;
	}
	if (jc.stale)
		fprintf(stderr, "rally-lobby: warning: the code is %lld s old (over %d s)\n",
			jc.age, JOINCODE_TTL);
	print_code(&jc);
	return 0;
}

/* --check-config: the flags parsed; a join's code must decode too. */
static int check_config(const struct lobby_cfg *c)
{
	struct joincode jc;
	char err[160];
	uint64_t steam;

	if (c->mode == LOBBY_MODE_JOIN && !joincode_steam_id(c->code, &steam) &&
	    joincode_decode(c->code, c->has_password ? c->password : NULL, (long long)time(NULL),
			    &jc, err, sizeof(err)) < 0) {
		fprintf(stderr, "rally-lobby: bad code: %s\n", err);
		return DAEMON_EXIT_USAGE;
	}
	/* A relay's (or a dedicated host's) state files, as its start reads
	 * them. */
	if (c->mode == LOBBY_MODE_HOST && (c->relay_only || c->dedicated) &&
	    lobby_relay_check_files(c->io_dir[0] != '\0' ? c->io_dir : ".", c->relay_only) < 0)
		return DAEMON_EXIT_FAIL;
	if (c->metrics_token_file[0] != '\0' &&
	    lobby_metrics_check_token(c->metrics_token_file) < 0)
		return DAEMON_EXIT_FAIL;
	log_bare("config-ok mode=%s name=\"%s\" io_dir=%s",
		 c->mode == LOBBY_MODE_HOST && c->relay_only ? "relay"
		 : c->mode == LOBBY_MODE_HOST                ? "host"
		 : c->mode == LOBBY_MODE_JOIN                ? "join"
		 : c->mode == LOBBY_MODE_CODE                ? "code"
		 : c->mode == LOBBY_MODE_PUT_SAVE            ? "put-save"
							     : "observe",
		 c->name, c->io_dir[0] != '\0' ? c->io_dir : ".");
	return DAEMON_EXIT_OK;
}

/* Decoding a locked code runs PBKDF2: on the worker, never on the loop. */
struct decode_job {
	struct lobby *l;
	struct daemon *d;
	char text[JOINCODE_MAX_TEXT];
	char password[LOBBY_PASSWORD_MAX];
	bool has_password;
	long long now;
	struct joincode c;
	char err[160];
	int r;
};

static void decode_work(void *arg)
{
	struct decode_job *d = arg;

	d->r = joincode_decode(d->text, d->has_password ? d->password : NULL, d->now, &d->c, d->err,
			       sizeof(d->err));
}

static void ready_line(struct daemon *d, struct lobby *l)
{
	daemon_ready(d, "udp=0.0.0.0:%u game=127.0.0.1:%u", lobby_net_port(l->net),
		     l->game != NULL ? lobby_game_port(l->game) : 0);
}

/* The role's start, then the rendezvous: both roles alike. */
static int start_role(struct daemon *d, struct lobby *l, const struct joincode *code)
{
	int r = lobby_role_start(l, code);

	if (r == 0)
		r = lobby_rv_new(l);
	if (r < 0)
		return r;
	ready_line(d, l);
	return 0;
}

/* A failed status and the state "failed" (no detail: lobby.py cmd_join). */
static void fail_early(struct lobby *l, const char *detail, int status)
{
	lobby_ipc_status(l, "failed", detail);
	lobby_ipc_state(l, "state", json_object_new_string("failed"));
	lobby_exit(l, status);
}

static void decode_done(void *arg, bool cancelled)
{
	struct decode_job *d = arg;
	struct lobby *l = d->l;

	if (!cancelled) {
		if (d->r < 0) {
			char detail[200];

			snprintf(detail, sizeof(detail), "bad code: %s", d->err);
			log_err("bad-code error=\"%s\"", d->err);
			fail_early(l, detail, DAEMON_EXIT_USAGE);
		} else {
			if (d->c.stale)
				log_warnx("code-stale age=%lld", d->c.age);
			if (start_role(d->d, l, &d->c) < 0)
				fail_early(l, "could not start the lobby", DAEMON_EXIT_FAIL);
		}
	}
	sodium_memzero(d->password, sizeof(d->password));
	free(d);
}

/* lobby.py cmd_join: "dialing host" before the code is even decoded. */
static int begin_join(struct daemon *dm, struct lobby *l)
{
	struct decode_job *d;
	uint64_t steam;

	lobby_ipc_status(l, "waiting", "dialing host");
	lobby_ipc_state(l, "state", json_object_new_string("waiting"));
	if (joincode_steam_id(l->cfg.code, &steam)) {
		/* What netpunch says to a Steam-ID code without Steam. */
		log_err("bad-code error=\"a Steam-ID code needs the Steam tunnel, which "
			"rally-lobby does not have\"");
		fail_early(l,
			   "this host's code is a Steam ID, and this game has no Steam networking: "
			   "start the game through Steam, or ask the host to tick CROSS-PLAY and "
			   "send the long code",
			   DAEMON_EXIT_FAIL);
		return 0;
	}
	d = calloc(1, sizeof(*d));
	if (d == NULL)
		return -ENOMEM;
	d->l = l;
	d->d = dm;
	snprintf(d->text, sizeof(d->text), "%s", l->cfg.code);
	snprintf(d->password, sizeof(d->password), "%s", l->cfg.password);
	d->has_password = l->cfg.has_password;
	d->now = (long long)time(NULL);
	if (!joincode_is_locked(d->text)) {
		/* Cheap: decode now and report a bad code at once. */
		decode_work(d);
		if (d->r < 0)
			fprintf(stderr, "rally-lobby: bad code: %s\n", d->err);
		decode_done(d, false);
		return 0;
	}
	/* PBKDF2 on the worker; nothing more to say until it is done. */
	return ev_work_submit(l->loop, decode_work, decode_done, d);
}

/* rally-lobby observe: the profile in words and its details, or with
 * --json the object lobby_state.json's traversal calls "you". */
static void observed_print(struct lobby *l, void *arg)
{
	const struct joincode *p = lobby_observe_profile(l);
	const char *map = lobby_observe_mapping(l), *why = lobby_observe_mapping_error(l);
	struct json_object *o;
	struct strbuf b;

	(void)arg;
	if (l->cfg.observe_json) {
		o = lobby_trav_profile_json(p, map, why);
		puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_SPACED |
							       JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(o);
		fflush(stdout);
	} else {
		strbuf_init(&b, 4096);
		lobby_trav_describe(p, map, why, &b);
		if (b.p != NULL)
			fwrite(b.p, 1, b.len, stdout);
		strbuf_release(&b);
		printf("\n");
		lobby_observe_print(l);
	}
	lobby_exit(l, 0);
}

int main(int argc, char **argv)
{
	static struct app app;
	static char page[sizeof(usage) + sizeof(usage_ours) + sizeof(usage_rest)];
	struct daemon *d = &app.d;
	struct lobby *l = &app.l;
	uint8_t sess[6];
	int r;

	snprintf(page, sizeof(page), "%s%s%s", usage, usage_ours, usage_rest);
	daemon_init(d, "rally-lobby", page);
	d->version_note = "(netpunch protocol " LOBBY_VERSION_DEFAULT ")";
	parse_args(d, argc, argv, &l->cfg);
	if (d->check)
		return check_config(&l->cfg);
	daemon_start(d);
	/* Players share these logs: public IPv4 hosts masked, as netpunch's
	 * (TPF2MP_LOG_IPS=1 shows them). */
	log_set_redact(getenv("TPF2MP_LOG_IPS") == NULL ||
		       strcmp(getenv("TPF2MP_LOG_IPS"), "1") != 0);
	if (l->cfg.mode == LOBBY_MODE_CODE || l->cfg.mode == LOBBY_MODE_PUT_SAVE) {
		r = l->cfg.mode == LOBBY_MODE_CODE ? cmd_code(&l->cfg) : cmd_put_save(&l->cfg);
		daemon_free(d);
		return r;
	}
	l->loop = d->loop;
	l->ctr.start_s = (long long)time(NULL);
	daemon_set_handlers(d, on_stop, on_reload, l);
	randombytes_buf(sess, sizeof(sess));
	sodium_bin2hex(l->session, sizeof(l->session), sess, sizeof(sess));
	l->curl = curlev_new(l->loop);
	if (l->curl == NULL)
		log_fatal("curl-init-fail");

	if (l->cfg.mode == LOBBY_MODE_OBSERVE) {
		r = lobby_net_new(l, l->cfg.local_port_set ? l->cfg.local_port : 0);
		if (r < 0 || lobby_observe_start(l, true, observed_print, NULL) < 0)
			log_fatalx("observe-fail");
		ev_loop_run(l->loop);
		/* A look, not a lobby: leave the router as we found it. */
		lobby_observe_unmap(l, 3000);
		r = DAEMON_EXIT_OK;
		goto out;
	}
	l->logfwd = lobby_logfwd_new(l->cfg.forward_log, l->cfg.nforward_log);
	if (l->logfwd == NULL)
		log_fatal("logfwd-init-fail");
	log_set_tap(tap_line, l->logfwd);
	r = lobby_ipc_new(l);
	if (r < 0) {
		errno = -r;
		log_warn("io-dir-unusable dir=%s", l->cfg.io_dir[0] ? l->cfg.io_dir : ".");
		r = DAEMON_EXIT_FAIL;
		goto out;
	}
	r = lobby_game_new(l);
	if (r < 0) {
		errno = -r;
		log_warn("game-relay-port-fail");
		lobby_ipc_status(l, "failed", "the game relay port is taken");
		lobby_ipc_state(l, "state", json_object_new_string("failed"));
		r = DAEMON_EXIT_FAIL;
		goto out;
	}
	/* The one place a role is picked. */
	l->role = l->cfg.mode != LOBBY_MODE_HOST ? &lobby_join_role
		  : l->cfg.relay_only            ? &lobby_relay_role
						 : &lobby_host_role;
	/* Before the role, so that the ready line means /metrics answers. */
	r = lobby_metrics_start(l);
	if (r < 0) {
		fprintf(stderr, "rally-lobby: --metrics: %s (see the log)\n", strerror(-r));
		lobby_ipc_status(l, "failed", "could not serve --metrics (see the log)");
		lobby_ipc_state(l, "state", json_object_new_string("failed"));
		r = DAEMON_EXIT_FAIL;
		goto out;
	}
	if (l->cfg.mode == LOBBY_MODE_HOST) {
		r = start_role(d, l, NULL);
		if (r == -EBADMSG || r == -EIO) {
			/* A state file in the way (logged, named): nothing was
			 * started, the file is as it was. */
			lobby_ipc_status(l, "failed",
					 "a relay state file cannot be used (see the log)");
			lobby_ipc_state(l, "state", json_object_new_string("failed"));
			r = DAEMON_EXIT_FAIL;
			goto out;
		}
		if (r < 0) {
			lobby_ipc_status(l, "failed", "could not open the lobby port");
			lobby_ipc_state(l, "state", json_object_new_string("failed"));
			r = DAEMON_EXIT_FAIL;
			goto out;
		}
	} else if (begin_join(d, l) < 0) {
		r = DAEMON_EXIT_USAGE;
		goto out;
	}
	if (!l->stopping)
		ev_loop_run(l->loop);
	r = l->exit_status;
	if (l->net != NULL) {
		struct lobby_net_stats st;

		lobby_net_stats(l->net, &st);
		log_info("exit status=%d rx=%llu tx=%llu bad_seal=%llu replayed=%llu", r,
			 (unsigned long long)st.rx, (unsigned long long)st.tx,
			 (unsigned long long)st.bad_seal, (unsigned long long)st.replayed);
	}
	/* The last words over the TCP links too, then clean up what we left
	 * outside: the router's mappings, the list. */
	lobby_dual_drain(l, 500);
	lobby_rv_leave_sync(l, 2000);
	lobby_observe_unmap(l, 3000);
out:
	lobby_metrics_free(l);
	lobby_rv_free(l->rv);
	lobby_dual_free(l->dual);
	l->dual = NULL;
	lobby_role_free(l);
	log_set_tap(NULL, NULL);
	lobby_logfwd_free(l->logfwd);
	lobby_xprog_free(l);
	lobby_observe_free(l->obs);
	lobby_game_free(l->game);
	lobby_net_free(l->net);
	lobby_ipc_free(l->ipc);
	seal_free(l->sealer);
	curlev_free(l->curl);
	daemon_free(d);
	sodium_memzero(l->secret, sizeof(l->secret));
	sodium_memzero(l->cfg.password, sizeof(l->cfg.password));
	return r;
}
