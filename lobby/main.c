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
#include <getopt.h>
#include <limits.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signal.h>
#include <time.h>
#include <unistd.h>

#include "curlev.h"
#include "joincode.h"
#include "lobby.h"
#include "log.h"
#include "seal.h"

static const char usage[] =
	"NAME\n"
	"    rally-lobby - find each other, get through NATs, play together\n"
	"\n"
	"SYNOPSIS\n"
	"    rally-lobby host [options]\n"
	"    rally-lobby join CODE [options]\n"
	"    rally-lobby code CODE [--password PW]\n"
	"    rally-lobby observe [--stun HOST:PORT ...]\n"
	"\n"
	"DESCRIPTION\n"
	"    The lobby beside the game, wire-compatible with netpunch 0.6.1.24: join\n"
	"    codes, STUN and UPnP, hole punching with the master's knock rendezvous\n"
	"    and relay fallback, sealed frames, the lobby session (roster, chat,\n"
	"    start) and the game's frames between machines. The game talks to it\n"
	"    through lobby_out.jsonl, lobby_in.jsonl and lobby_state.json in the io\n"
	"    dir, and through UDP on loopback.\n"
	"\n"
	"OPTIONS (netpunch's)\n"
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
	"    --forward-log PATH        accepted, repeatable (log forwarding is not\n"
	"                              built yet)\n"
	"    --no-mesh                 star only (this lobby never meshes yet)\n"
	"    --companies               start in companies mode\n"
	"\n"
	"OPTIONS (ours)\n"
	"    --stun HOST:PORT|off      STUN server, repeatable (default: netpunch's\n"
	"                              public ones)\n"
	"    --lan-ip IP[:PORT]        the LAN address to advertise (tests pass\n"
	"                              127.0.0.1 so nothing dials this host's\n"
	"                              interfaces; a port, to put a proxy between)\n"
	"    --upnp on|off             ask the router for a port mapping (host; on)\n"
	"    --protocol-version V      the version sent and required (default 0.6.1.24)\n"
	"    --max-players N           players at most, the host included (default 200)\n"
	"    --log auto|plain|journal, --debug, --help, --version\n"
	"\n"
	"OUTPUT\n"
	"    The host prints CODE=<code> on stdout; everything else goes to stderr,\n"
	"    starting with \"ready udp=IP:PORT game=IP:PORT\" once bound.\n"
	"\n"
	"EXIT STATUS\n"
	"    0 quit or lobby closed; 1 failed (unreachable, rejected, version);\n"
	"    2 bad usage or a bad code.\n";

enum {
	OPT_NAME = 256,
	OPT_LOCAL_PORT,
	OPT_TIMEOUT,
	OPT_IO_DIR,
	OPT_PASSWORD,
	OPT_LOBBY_NAME,
	OPT_PUBLISH,
	OPT_PUBLIC,
	OPT_RENDEZVOUS,
	OPT_GAME_RELAY,
	OPT_GAME_LOCAL,
	OPT_FORWARD_LOG,
	OPT_NO_MESH,
	OPT_COMPANIES,
	OPT_STUN,
	OPT_LAN_IP,
	OPT_UPNP,
	OPT_PROTOCOL,
	OPT_LOG,
	OPT_DEBUG,
	OPT_HELP,
	OPT_VERSION,
	OPT_MAX_PLAYERS,
	OPT_UNSUPPORTED,
	OPT_IGNORED_ARG,
	OPT_IGNORED,
};

static const struct option options[] = {
	{"name", required_argument, NULL, OPT_NAME},
	{"local-port", required_argument, NULL, OPT_LOCAL_PORT},
	{"timeout", required_argument, NULL, OPT_TIMEOUT},
	{"io-dir", required_argument, NULL, OPT_IO_DIR},
	{"password", required_argument, NULL, OPT_PASSWORD},
	{"lobby-name", required_argument, NULL, OPT_LOBBY_NAME},
	{"publish", required_argument, NULL, OPT_PUBLISH},
	{"public", no_argument, NULL, OPT_PUBLIC},
	{"rendezvous", required_argument, NULL, OPT_RENDEZVOUS},
	{"game-relay-port", required_argument, NULL, OPT_GAME_RELAY},
	{"game-local-port", required_argument, NULL, OPT_GAME_LOCAL},
	{"forward-log", required_argument, NULL, OPT_FORWARD_LOG},
	{"no-mesh", no_argument, NULL, OPT_NO_MESH},
	{"companies", no_argument, NULL, OPT_COMPANIES},
	{"stun", required_argument, NULL, OPT_STUN},
	{"lan-ip", required_argument, NULL, OPT_LAN_IP},
	{"upnp", required_argument, NULL, OPT_UPNP},
	{"protocol-version", required_argument, NULL, OPT_PROTOCOL},
	{"max-players", required_argument, NULL, OPT_MAX_PLAYERS},
	{"log", required_argument, NULL, OPT_LOG},
	{"debug", no_argument, NULL, OPT_DEBUG},
	{"help", no_argument, NULL, OPT_HELP},
	{"version", no_argument, NULL, OPT_VERSION},
	/* netpunch's flags for what comes later: refused clearly. */
	{"relay-only", no_argument, NULL, OPT_UNSUPPORTED},
	{"dedicated", no_argument, NULL, OPT_UNSUPPORTED},
	/* Accepted and without effect here. */
	{"crossplay", no_argument, NULL, OPT_IGNORED},
	{"share-mods", no_argument, NULL, OPT_IGNORED},
	{"no-share-mods", no_argument, NULL, OPT_IGNORED},
	{"sync-runtime-dir", required_argument, NULL, OPT_IGNORED_ARG},
	{"save-dir", required_argument, NULL, OPT_IGNORED_ARG},
	{"game-pid", required_argument, NULL, OPT_IGNORED_ARG},
	{NULL, 0, NULL, 0},
};

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void die_usage(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "rally-lobby: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'rally-lobby --help'.\n");
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

static void copy(char *dst, size_t size, const char *src, const char *what)
{
	if (strlen(src) >= size)
		die_usage("%s: too long", what);
	memcpy(dst, src, strlen(src) + 1);
}

/* netpunch's public STUN servers (NETWORKING.md, Ports). */
static const char *const default_stun[] = {
	"stun.l.google.com:19302",
	"stun.nextcloud.com:3478",
	"stun.cloudflare.com:3478",
	"stun.services.mozilla.com:3478",
};

static void add_stun(struct lobby_cfg *c, const char *s)
{
	struct lobby_stun_server *st;

	if (strcmp(s, "off") == 0) {
		c->stun_off = true;
		return;
	}
	if (c->nstun == LOBBY_MAX_STUN)
		die_usage("--stun: at most %d servers", LOBBY_MAX_STUN);
	st = &c->stun[c->nstun];
	if (addr_split_hostport(s, st->host, sizeof(st->host), &st->port) < 0 || st->port == 0)
		die_usage("--stun %s: expected HOST:PORT", s);
	c->nstun++;
}

static void parse_args(int argc, char **argv, struct lobby_cfg *c, enum log_target *lt)
{
	bool stun_given = false;
	int o;

	memset(c, 0, sizeof(*c));
	if (argc < 2)
		die_usage("a command is needed: host, join CODE, code CODE or observe");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		fputs(usage, stdout);
		exit(0);
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("rally-lobby %s (netpunch protocol %s)\n", RALLY_VERSION,
		       LOBBY_VERSION_DEFAULT);
		exit(0);
	}
	if (strcmp(argv[1], "host") == 0)
		c->mode = MODE_HOST;
	else if (strcmp(argv[1], "join") == 0)
		c->mode = MODE_JOIN;
	else if (strcmp(argv[1], "code") == 0)
		c->mode = MODE_CODE;
	else if (strcmp(argv[1], "observe") == 0)
		c->mode = MODE_OBSERVE;
	else
		die_usage("unknown command: %s", argv[1]);
	snprintf(c->name, sizeof(c->name), "player");
	c->timeout_ms = 40000;
	c->max_players = LOBBY_CAP;
	c->game_local_port = 7771;
	snprintf(c->protocol_version, sizeof(c->protocol_version), "%s", LOBBY_VERSION_DEFAULT);
	*lt = LOG_TARGET_AUTO;
	optind = 2;
	while ((o = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (o) {
		case OPT_NAME:
			copy(c->name, sizeof(c->name), optarg, "--name");
			break;
		case OPT_LOCAL_PORT:
			c->local_port = (uint16_t)parse_num(optarg, 0, 65535, "--local-port");
			c->local_port_set = true;
			break;
		case OPT_TIMEOUT:
			c->timeout_ms = parse_num(optarg, 1, 86400, "--timeout") * 1000;
			break;
		case OPT_IO_DIR:
			copy(c->io_dir, sizeof(c->io_dir), optarg, "--io-dir");
			break;
		case OPT_PASSWORD:
			copy(c->password, sizeof(c->password), optarg, "--password");
			c->has_password = optarg[0] != '\0';
			break;
		case OPT_LOBBY_NAME:
			copy(c->lobby_name, sizeof(c->lobby_name), optarg, "--lobby-name");
			break;
		case OPT_PUBLISH:
			copy(c->publish_url, sizeof(c->publish_url), optarg, "--publish");
			break;
		case OPT_PUBLIC:
			c->public_ = true;
			break;
		case OPT_RENDEZVOUS:
			if (strcmp(optarg, "off") == 0)
				c->rendezvous_off = true;
			else
				copy(c->rendezvous_url, sizeof(c->rendezvous_url), optarg,
				     "--rendezvous");
			break;
		case OPT_GAME_RELAY:
			c->game_relay_port =
				(uint16_t)parse_num(optarg, 0, 65535, "--game-relay-port");
			c->game_relay_set = true;
			break;
		case OPT_GAME_LOCAL:
			c->game_local_port =
				(uint16_t)parse_num(optarg, 1, 65535, "--game-local-port");
			break;
		case OPT_FORWARD_LOG:
		case OPT_IGNORED_ARG:
		case OPT_IGNORED:
			break;
		case OPT_NO_MESH:
			c->no_mesh = true;
			break;
		case OPT_COMPANIES:
			c->companies = true;
			break;
		case OPT_STUN:
			if (!stun_given)
				c->nstun = 0;
			stun_given = true;
			add_stun(c, optarg);
			break;
		case OPT_LAN_IP:
			if (addr_parse(&c->lan, optarg, -1) == 0) {
				c->lan_port_set = true;
			} else if (addr_parse_ip(&c->lan, optarg) < 0) {
				die_usage("--lan-ip %s: expected IP or IP:PORT", optarg);
			}
			if (!addr_is_v4(&c->lan))
				die_usage("--lan-ip %s: IPv4 only", optarg);
			c->lan_set = true;
			break;
		case OPT_UPNP:
			if (strcmp(optarg, "off") == 0)
				c->upnp_off = true;
			else if (strcmp(optarg, "on") != 0)
				die_usage("--upnp %s: on or off", optarg);
			break;
		case OPT_MAX_PLAYERS:
			c->max_players = (unsigned)parse_num(optarg, 1, LOBBY_CAP, "--max-players");
			break;
		case OPT_PROTOCOL:
			copy(c->protocol_version, sizeof(c->protocol_version), optarg,
			     "--protocol-version");
			break;
		case OPT_LOG:
			if (strcmp(optarg, "plain") == 0)
				*lt = LOG_TARGET_PLAIN;
			else if (strcmp(optarg, "journal") == 0)
				*lt = LOG_TARGET_JOURNAL;
			else if (strcmp(optarg, "auto") != 0)
				die_usage("--log %s: auto, plain or journal", optarg);
			break;
		case OPT_DEBUG:
			c->debug = true;
			break;
		case OPT_HELP:
			fputs(usage, stdout);
			exit(0);
		case OPT_VERSION:
			printf("rally-lobby %s (netpunch protocol %s)\n", RALLY_VERSION,
			       LOBBY_VERSION_DEFAULT);
			exit(0);
		case OPT_UNSUPPORTED:
			die_usage("%s: the dedicated relay lobby is not built yet",
				  argv[optind - 1]);
			break;
		default:
			fprintf(stderr, "Try 'rally-lobby --help'.\n");
			exit(2);
		}
	}
	if (c->mode == MODE_JOIN || c->mode == MODE_CODE) {
		if (optind >= argc)
			die_usage("%s needs a CODE", c->mode == MODE_JOIN ? "join" : "code");
		copy(c->code, sizeof(c->code), argv[optind++], "CODE");
	}
	if (optind < argc)
		die_usage("unexpected argument: %s", argv[optind]);
	if (!stun_given) {
		for (size_t i = 0; i < sizeof(default_stun) / sizeof(default_stun[0]); i++)
			add_stun(c, default_stun[i]);
	}
}

/* ---- running ---- */

static struct lobby app;

void lobby_exit(struct lobby *l, int status)
{
	if (l->stopping)
		return;
	l->stopping = true;
	l->exit_status = status;
	ev_loop_stop(l->loop);
}

static void on_signal(int signo, void *arg)
{
	struct lobby *l = arg;

	if (signo != SIGINT && signo != SIGTERM)
		return;
	if (l->stopping) {
		ev_loop_stop(l->loop);
		return;
	}
	log_info("stopping signal=%s", signo == SIGINT ? "SIGINT" : "SIGTERM");
	if (l->host != NULL)
		lobby_host_quit(l);
	else if (l->join != NULL)
		lobby_join_quit(l);
	else
		lobby_exit(l, 0);
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

/* Decoding a locked code runs PBKDF2: on the worker, never on the loop. */
struct decode_job {
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

static void ready_line(struct lobby *l);

static void start_join(struct lobby *l, const struct joincode *c)
{
	int r = lobby_join_start(l, c);

	if (r == 0)
		r = lobby_rv_new(l);
	if (r < 0) {
		lobby_ipc_status(l, "failed", "could not start the lobby");
		lobby_exit(l, 1);
		return;
	}
	ready_line(l);
}

static void decode_done(void *arg, bool cancelled)
{
	struct decode_job *d = arg;
	struct lobby *l = &app;

	if (!cancelled) {
		if (d->r < 0) {
			char detail[200];

			snprintf(detail, sizeof(detail), "bad code: %s", d->err);
			log_err("bad-code error=\"%s\"", d->err);
			lobby_ipc_status(l, "failed", detail);
			lobby_exit(l, 2);
		} else {
			if (d->c.stale)
				log_warnx("code-stale age=%lld", d->c.age);
			start_join(l, &d->c);
		}
	}
	sodium_memzero(d->password, sizeof(d->password));
	free(d);
}

static int begin_join(struct lobby *l)
{
	struct decode_job *d;
	uint64_t steam;

	if (joincode_steam_id(l->cfg.code, &steam)) {
		log_err("bad-code error=\"a Steam-ID code needs the Steam tunnel, which "
			"rally-lobby "
			"does not have\"");
		lobby_ipc_status(l, "failed", "bad code: Steam-ID codes need the Steam tunnel");
		return -EINVAL;
	}
	d = calloc(1, sizeof(*d));
	if (d == NULL)
		return -ENOMEM;
	snprintf(d->text, sizeof(d->text), "%s", l->cfg.code);
	snprintf(d->password, sizeof(d->password), "%s", l->cfg.password);
	d->has_password = l->cfg.has_password;
	d->now = (long long)time(NULL);
	if (!joincode_is_locked(d->text)) {
		/* Cheap: decode now and report a bad code at once. */
		decode_work(d);
		if (d->r < 0) {
			fprintf(stderr, "rally-lobby: bad code: %s\n", d->err);
			decode_done(d, false);
			return 0;
		}
		decode_done(d, false);
		return 0;
	}
	lobby_ipc_status(l, "connecting", "unlocking the code");
	return ev_work_submit(l->loop, decode_work, decode_done, d);
}

static void observed_print(struct lobby *l, void *arg)
{
	(void)arg;
	lobby_observe_print(l);
	lobby_exit(l, 0);
}

static void ready_line(struct lobby *l)
{
	log_bare("ready udp=0.0.0.0:%u game=127.0.0.1:%u", lobby_net_port(l->net),
		 l->game != NULL ? lobby_game_port(l->game) : 0);
}

int main(int argc, char **argv)
{
	struct lobby *l = &app;
	enum log_target lt;
	uint8_t sess[6];
	int r;

	ev_block_signals();
	parse_args(argc, argv, &l->cfg, &lt);
	log_init(l->cfg.debug ? LOG_LEVEL_DEBUG : LOG_LEVEL_INFO, lt);
	if (sodium_init() < 0)
		log_fatalx("sodium-init-fail");
	if (l->cfg.mode == MODE_CODE)
		return cmd_code(&l->cfg);
	randombytes_buf(sess, sizeof(sess));
	sodium_bin2hex(l->session, sizeof(l->session), sess, sizeof(sess));
	l->loop = ev_loop_new();
	if (l->loop == NULL)
		log_fatal("loop-init-fail");
	ev_signal_set(l->loop, on_signal, l);
	l->curl = curlev_new(l->loop);
	if (l->curl == NULL)
		log_fatal("curl-init-fail");

	if (l->cfg.mode == MODE_OBSERVE) {
		static const struct lobby_net_handlers none = {NULL, NULL, NULL};

		r = lobby_net_new(l, l->cfg.local_port_set ? l->cfg.local_port : 0, &none);
		if (r < 0 || lobby_observe_start(l, true, observed_print, NULL) < 0)
			log_fatalx("observe-fail");
		ev_loop_run(l->loop);
		r = 0;
		goto out;
	}
	r = lobby_ipc_new(l);
	if (r < 0) {
		errno = -r;
		log_warn("io-dir-unusable dir=%s", l->cfg.io_dir[0] ? l->cfg.io_dir : ".");
		r = 1;
		goto out;
	}
	r = lobby_game_new(l);
	if (r < 0) {
		errno = -r;
		log_warn("game-relay-port-fail");
		lobby_ipc_status(l, "failed", "the game relay port is taken");
		r = 1;
		goto out;
	}
	if (l->cfg.mode == MODE_HOST) {
		r = lobby_host_start(l);
		if (r == 0)
			r = lobby_rv_new(l);
		if (r < 0) {
			lobby_ipc_status(l, "failed", "could not open the lobby port");
			r = 1;
			goto out;
		}
		ready_line(l);
	} else {
		r = begin_join(l);
		if (r < 0) {
			r = 2;
			goto out;
		}
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
	/* Clean up what we left outside: the router's mappings, the list. */
	lobby_rv_leave_sync(l, 2000);
	lobby_observe_unmap(l, 3000);
out:
	lobby_rv_free(l->rv);
	lobby_host_free(l->host);
	lobby_join_free(l->join);
	lobby_observe_free(l->obs);
	lobby_game_free(l->game);
	lobby_net_free(l->net);
	lobby_ipc_free(l->ipc);
	seal_free(l->sealer);
	curlev_free(l->curl);
	ev_loop_free(l->loop);
	sodium_memzero(l->secret, sizeof(l->secret));
	sodium_memzero(l->cfg.password, sizeof(l->cfg.password));
	return r;
}
