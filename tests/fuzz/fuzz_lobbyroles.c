/*
 * The lobby's roles behind their interface: what a host and a joiner do
 * with any application payload a peer's frame may carry (JSON messages of
 * every kind, game frames, fragments, junk), fed through lobby_net's
 * dispatch exactly as a datagram that opened would be.
 *
 * Input: byte 0 picks the role (even: host, odd: joiner), the peer address
 * (bits 1-3: one of eight loopback ports), whether the payload came
 * sealed (bit 4) and whether it is an NP1 control frame instead (bit 5:
 * byte 1 its type, the rest its payload); the rest is the payload. The
 * joiner is connected and welcomed by the host at port 40000 before the
 * first input, with a roster naming a mesh peer at port 40001, so the
 * other ports reach its mesh (links, mesh_hi, envelopes, frames). Both lobbies are real: bound to
 * loopback, writing their IPC files into a temporary directory, so every
 * reply and event they produce is built and sent (to ports where nothing
 * listens). Invariants: the host never holds more players than its cap and
 * the joiner's state stays consistent.
 */
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "curlev.h"
#include "fuzz.h"
#include "joincode.h"
#include "lobby.h"
#include "log.h"
#include "seal.h"

static struct lobby host, joiner;
static char dir[] = "/tmp/rally-fuzz-lobby-XXXXXX";
static unsigned long runs;

void lobby_exit(struct lobby *l, int status)
{
	/* The fuzzer keeps going: a rejected or closed lobby is reset below. */
	l->exit_status = status;
}

static void setup(struct lobby *l, enum lobby_mode mode, const char *sub)
{
	memset(l, 0, sizeof(*l));
	l->cfg.mode = mode;
	l->role = mode == LOBBY_MODE_HOST ? &lobby_host_role : &lobby_join_role;
	snprintf(l->cfg.name, sizeof(l->cfg.name), "fuzz");
	snprintf(l->cfg.io_dir, sizeof(l->cfg.io_dir), "%s/%s", dir, sub);
	snprintf(l->cfg.protocol_version, sizeof(l->cfg.protocol_version), "0.6.1.24");
	l->cfg.stun_off = true;
	l->cfg.upnp_off = true;
	l->cfg.rendezvous_off = true;
	l->cfg.timeout_ms = 3600 * 1000;
	l->cfg.max_players = 8;
	l->cfg.game_relay_set = true;
	l->cfg.game_local_port = 9;
	addr_parse(&l->cfg.lan, "127.0.0.1:9", -1);
	l->cfg.lan_set = true;
	l->cfg.lan_port_set = true;
	snprintf(l->session, sizeof(l->session), "000000000000");
	l->loop = ev_loop_new();
	l->curl = curlev_new(l->loop);
	if (l->loop == NULL || l->curl == NULL || lobby_ipc_new(l) < 0 || lobby_game_new(l) < 0)
		abort();
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* The lobbies' IPC files go with the process. */
static void cleanup(void)
{
	nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

/* The host at 40000 welcomes the joiner (sealed: it connects), then a
 * roster names p1, a mesh peer whose profile points at port 40001. */
static void welcome_joiner(void)
{
	static const char welcome[] = "{\"t\": \"welcome\", \"version\": \"0.6.1.24\", "
				      "\"you\": \"fuzz\", \"host\": \"h\"}";
	struct joincode p1;
	struct addr hostaddr;
	char code[JOINCODE_MAX_TEXT], err[128], roster[1024];
	int n;

	memset(&p1, 0, sizeof(p1));
	p1.has_lan = true;
	addr_parse(&p1.lan, "127.0.0.1:40001", -1);
	p1.ts = 1700000000;
	if (joincode_encode(&p1, NULL, code, sizeof(code), err, sizeof(err)) < 0)
		abort();
	n = snprintf(
		roster, sizeof(roster),
		"{\"t\": \"roster\", \"version\": \"0.6.1.24\", \"players\": [\"fuzz\", \"h\", "
		"\"p1\"], \"host\": \"h\", \"profiles\": {\"p1\": \"%s\"}, \"links\": "
		"{\"p1\": [\"fuzz\"]}}",
		code);
	addr_parse(&hostaddr, "127.0.0.1:40000", -1);
	lobby_net_inject(&joiner, &hostaddr, (const uint8_t *)welcome, sizeof(welcome) - 1, true);
	lobby_net_inject(&joiner, &hostaddr, (const uint8_t *)roster, (size_t)n, true);
}

static void init(void)
{
	struct lobby_advert ad;
	struct joincode c;

	log_init(LOG_LEVEL_FATAL, LOG_TARGET_PLAIN);
	if (mkdtemp(dir) == NULL)
		abort();
	atexit(cleanup);
	setup(&host, LOBBY_MODE_HOST, "host");
	host.cfg.local_port_set = true;
	if (lobby_role_start(&host, NULL) < 0)
		abort();
	/* Let the observation finish (no STUN: at once) and the code be made. */
	while (!host.role->advert(&host, &ad))
		ev_loop_run_once(host.loop, 100);
	setup(&joiner, LOBBY_MODE_JOIN, "joiner");
	memset(&c, 0, sizeof(c));
	c.has_lan = true;
	addr_parse(&c.lan, "127.0.0.1:9", -1);
	c.has_secret = true;
	memset(c.secret, 7, sizeof(c.secret));
	if (lobby_role_start(&joiner, &c) < 0)
		abort();
	welcome_joiner();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lobby_advert ad;
	struct lobby *l;
	struct addr from;
	char a[32];

	if (host.loop == NULL)
		init();
	if (size < 1)
		return 0;
	l = (data[0] & 1) ? &joiner : &host;
	snprintf(a, sizeof(a), "127.0.0.1:%u", 40000u + ((data[0] >> 1) & 7u));
	addr_parse(&from, a, -1);
	if ((data[0] & 32) && size >= 2 && l->role->on_ctl != NULL)
		l->role->on_ctl(l, &from, data[1], data + 2, size - 2);
	else
		lobby_net_inject(l, &from, data + 1, size - 1, (data[0] & 16) != 0);
	FUZZ_CHECK(host.role->advert(&host, &ad) && ad.players <= host.cfg.max_players);
	/* Keep the event files small across millions of runs. */
	if (++runs % 4096 == 0) {
		char path[256];

		snprintf(path, sizeof(path), "%s/host/lobby_out.jsonl", dir);
		(void)!truncate(path, 0);
		snprintf(path, sizeof(path), "%s/joiner/lobby_out.jsonl", dir);
		(void)!truncate(path, 0);
		snprintf(path, sizeof(path), "%s/host/lobby_peers.log", dir);
		(void)!truncate(path, 0);
	}
	return 0;
}
