/*
 * rally-relay agent: the tunnel's home side.
 *
 * Dials the relay's /relay/v1/host (ws:// or wss://, reconnecting with
 * backoff), answers the nonce with the realm's Ed25519 signature, and then
 * serves the relay's "connect" requests by opening one of its two local
 * targets only (auth, world: coa's 127.0.0.1:3724 and :8085 by default);
 * any other request is refused. Allocations are asked for through the
 * agent's local control API (POST /allocate), which is what a launcher or
 * the game's own lobby calls for each player.
 *
 * With our relay the agent takes the x_rally offer: data then travels as
 * binary frames with per-stream credits both ways (no base64, and a player
 * who stops reading holds only its own stream). Against a coa relay the
 * offer never comes and the agent speaks coa's JSON, as a Host Manager.
 */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <netinet/tcp.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "htab.h"
#include "httpd.h"
#include "jsonp.h"
#include "log.h"
#include "relay.h"
#include "relay_keys.h"
#include "relay_transparent.h"
#include "relay_tundgram.h"
#include "relay_tunmsg.h"
#include "relay_tunpipe.h"
#include "statefile.h"
#include "token.h"
#include "strbuf.h"
#include "ws.h"

#define AG_HIGH       ((size_t)1024 * 1024)
#define AG_LOW        ((size_t)256 * 1024)
#define AG_STREAM_MAX ((size_t)4 * 1024 * 1024)
/* JSON framing has no credits: when a local server reads slower than the
 * relay sends, the agent stops reading the tunnel (TCP then holds the
 * relay back) rather than dropping the stream; a local server is ours. */
#define AG_STREAM_HIGH   ((size_t)1024 * 1024)
#define AG_MAX_STREAMS   (4096)
#define AG_MAX_PENDING   (256) /* allocation requests waiting for the relay */
#define AG_MAX_TOKENS    (8192)
#define AG_ALLOC_WAIT_MS (10000)
#define AG_CONNECT_MS    (5000)
#define AG_BACKOFF_MIN   (1000)
#define AG_BACKOFF_MAX   (60000)
#define AG_QUEUE_MAX     ((size_t)8 * 1024 * 1024) /* a relay that never reads */
#define AG_QUEUE_MSGS    ((size_t)16384)
#define AG_PING_MS       (30000) /* coa's Host Manager pings every 30 s too */
#define AG_UDP_PING_MS   (5000)
#define AG_UDP_FRESH_MS  (12000) /* UDP counts as working this long after a pong (2 pings) */
#define AG_MAX_USESS     (4096)
#define AG_USESS_IDLE_MS (130000) /* the relay forgets a session after 120 s */
/* Datagrams to the relay leave in batches (sendmmsg before the loop
 * sleeps) and come in with recvmmsg, as on the relay. */
#define AG_BATCH    (64)
#define AG_SLOT     ((size_t)16 * 1024 + TUNDGRAM_OVER)
#define AG_MAX_HELD (64) /* connects held while the data channel dials */

static const char usage[] =
	"Usage: rally-relay agent --relay URL --realm-id UUID --key FILE [OPTION]...\n"
	"  or:  rally-relay agent keygen FILE\n"
	"The home side of rally-relay's tunnel.\n"
	"\n"
	"Dials a rally-relay (or a coa-relay) on a public machine, proves the\n"
	"realm with its Ed25519 key and carries the players' TCP connections\n"
	"from the relay's ports to the local auth and world servers, so a\n"
	"server behind CGNAT needs no port forwarding. Only the two local\n"
	"targets can be reached; any other request is refused. keygen writes a\n"
	"new secret key to FILE and prints the public key to give the relay.\n"
	"\n"
	"Options:\n"
	"    --relay URL               ws://HOST:PORT/relay/v1/host or wss://...\n"
	"    --realm-id UUID           the realm this host serves\n"
	"    --key FILE                its Ed25519 secret key (keygen writes one)\n"
	"    --auth IP:PORT            local auth server (default 127.0.0.1:3724)\n"
	"    --world IP:PORT           local world server (default 127.0.0.1:8085)\n"
	"    --control ADDR:PORT       local API: POST /allocate, GET /status\n"
	"    --token-file PATH         its bearer token, >= 32 characters\n"
	"    --ca-file PEM             trust these CAs for wss:// (default: system)\n"
	"    --json-framing            keep coa's JSON framing even with our relay\n"
	"    --server IP:PORT          a UDP game server (Quake 3 engine) to carry:\n"
	"                              the relay runs --server tunnel:REALM_UUID\n"
	"    --no-udp                  game datagrams in the tunnel only (UDP blocked)\n"
	"    --transparent             each player's socket toward --server takes the\n"
	"                              player's own address (CAP_NET_ADMIN and\n"
	"                              tools/relay-transparent-setup; refused at start\n"
	"                              if either is missing)\n"
	"    --log auto|plain|journal  log format (auto: journal if stderr is it)\n"
	"    --debug                   log at debug level too\n"
	"    --check-config            check the flags, the key and the token, then exit\n"
	"    --help                    print this help, then exit\n"
	"    --version                 print the version, then exit\n"
	"\n"
	"Control API (--control):\n"
	"    POST /allocate            {\"player_id\":UUID,\"expected_client_ip\":IP}\n"
	"                              answers {\"token\",\"relay_host\",\"auth_port\",\n"
	"                              \"world_port\",\"expires_at\"} or {\"error\"} (503\n"
	"                              when the tunnel is down)\n"
	"    GET /status               the tunnel: connected, streams, bytes, the\n"
	"                              datagram path (udp, tunnel or off)\n"
	"    Every call needs \"Authorization: Bearer TOKEN\".\n"
	"\n"
	"Output:\n"
	"    \"ready [control=IP:PORT]\" once started; \"tunnel-up\" and\n"
	"    \"tunnel-down\" log lines as the tunnel comes and goes.\n"
	"\n"
	"Exit status:\n"
	"    0                         stopped by SIGTERM or SIGINT, or --check-config\n"
	"                              found nothing wrong\n"
	"    1                         failed: an unreadable key or token, a port that\n"
	"                              cannot be bound\n"
	"    2                         bad usage\n";

struct agent_cfg {
	char url[WS_URL_MAX];
	char realm[37];
	char key_file[4096];
	struct addr target[2];
	bool control_on;
	struct addr control;
	char token_file[4096];
	char ca_file[4096];
	bool json_only;
	bool server_on; /* --server: a UDP game server to carry */
	struct addr server;
	bool no_udp;      /* --no-udp: game datagrams in the tunnel only */
	bool transparent; /* --transparent: sessions take the players' addresses */
};

struct astream {
	struct agent *ag;
	uint32_t id;
	struct tunpipe p; /* the local server's socket */
	bool connecting, ok;
	bool full; /* counted in ag->full */
	long long opened_ms;
};

struct pending {
	uint64_t request_id;
	struct httpd_req *req;
	long long deadline_ms;
};

struct token {
	char token[TUNMSG_ID_MAX + 1];
	long long expires_unix;
};

enum ag_state { AG_IDLE, AG_DIALING, AG_CHALLENGE, AG_WELCOME, AG_OPEN };

struct agent {
	struct agent_cfg cfg;
	struct daemon d;
	struct ev_loop *loop;
	struct ws *ws;
	enum ag_state state;
	uint8_t sk[crypto_sign_SECRETKEYBYTES];
	char nonce[TUNMSG_ID_MAX + 1]; /* this tunnel's challenge (the udp_sig covers it) */
	bool bin, paused;
	unsigned full; /* streams over AG_STREAM_HIGH: the tunnel is not read */
	long long backoff_ms, up_ms, last_ping_ms;
	struct ev_timer retry, tick;
	struct htab *streams; /* id -> struct astream * */
	struct pending pend[AG_MAX_PENDING];
	size_t npend;
	uint64_t next_req;
	struct token *tokens;
	size_t ntokens;
	struct httpd *httpd;
	struct addr control_bound;
	uint8_t token_hash[RELAY_TOKEN_HASH];
	uint8_t chunk[TUNMSG_CHUNK_MAX * 4];
	struct strbuf msg;
	uint64_t tunnels, refused_targets, bad_msgs, bytes_up, bytes_down;
	/* the datagram path */
	bool udp_on, udp_was_ok;
	int udp_fd;
	struct ev_io *udp_io;
	uint64_t udp_id, udp_tx_ctr;
	uint8_t udp_rx[TUNDGRAM_KEY], udp_tx[TUNDGRAM_KEY];
	struct tundgram_window udp_win;
	long long udp_ping_ms, udp_pong_ms;
	struct htab *usess; /* sid -> struct usess * */
	uint64_t udp_in, udp_out, udp_bad, dgram_in, dgram_ws_in, dgram_ws_out, usess_opened;
	bool peer_taken;        /* the relay sends the players' addresses (X_PEER) */
	uint64_t usess_no_peer; /* sessions opened without the player's address */
	struct relay_transparent_stats tstats;
	uint8_t dgram[TUNDGRAM_PAYLOAD + TUNDGRAM_OVER + 64];
	uint8_t plain[TUNDGRAM_PAYLOAD + TUNMSG_BIN_HDR + 64];
	/* the data channel (x_rally TUNMSG_X_DATA) */
	struct ws *data;
	bool data_dialing;
	struct strbuf dasm;
	struct tunmsg *held; /* connects that came while it was dialing */
	size_t nheld;
	uint8_t *obufs, *ibufs;
	struct mmsghdr omsgs[AG_BATCH], imsgs[AG_BATCH];
	struct iovec oiov[AG_BATCH], iiov[AG_BATCH];
	unsigned nout;
};

/* ---- sending ---- */

static void send_msg(struct agent *ag, const struct tunmsg *m)
{
	if (ag->ws == NULL || ws_queued(ag->ws) > AG_QUEUE_MAX ||
	    ws_queued_msgs(ag->ws) > AG_QUEUE_MSGS)
		return; /* on_tick ends such a tunnel */
	ag->msg.len = 0;
	ag->msg.bad = false;
	tunmsg_encode(m, &ag->msg);
	if (!ag->msg.bad && ag->ws != NULL)
		ws_send(ag->ws, false, ag->msg.p, ag->msg.len);
}

static struct tunsink ag_sink(struct agent *ag)
{
	struct tunsink k = {.ws = ag->ws,
			    .data = ag->data != NULL && ws_is_open(ag->data) ? ag->data : NULL,
			    .msg = &ag->msg};

	return k;
}

/* close/reset follow the stream's data (see tunsink_end). */
static void send_cmd(struct agent *ag, enum tunmsg_cmd cmd, uint32_t id)
{
	struct tunsink k = ag_sink(ag);

	if (ag->ws == NULL)
		return;
	tunsink_end(&k, ag->bin, cmd, id);
}

/* ---- streams to the local targets ---- */

/* Keeps ag->full and the tunnel's read side in step with s's buffer. */
static void astream_fill(struct astream *s, bool gone)
{
	struct agent *ag = s->ag;
	bool full = !gone && tunpipe_pending(&s->p) > AG_STREAM_HIGH;

	if (full == s->full)
		return;
	s->full = full;
	if (full)
		ag->full++;
	else
		ag->full--;
	if (ag->ws != NULL)
		ws_pause(ag->ws, ag->full > 0);
}

static void astream_free(struct astream *s, bool abort_local)
{
	struct agent *ag = s->ag;
	struct astream **slot = htab_get(ag->streams, &s->id);

	astream_fill(s, true);
	if (slot != NULL)
		htab_remove(ag->streams, slot);
	tunpipe_release(&s->p, abort_local);
	free(s);
}

static void astream_update(struct astream *s)
{
	uint32_t ev = s->connecting ? EPOLLOUT : tunpipe_events(&s->p, s->ok && !s->ag->paused);

	if (ev != ev_io_events(s->p.io))
		ev_io_mod(s->p.io, ev);
}

static int astream_flush(struct astream *s)
{
	struct tunsink k = ag_sink(s->ag);
	ssize_t n = tunpipe_flush(&s->p, &k);

	if (n < 0)
		return -1;
	s->ag->bytes_down += (uint64_t)n;
	astream_fill(s, false);
	return 0;
}

static void astream_read(struct astream *s)
{
	struct agent *ag = s->ag;
	struct tunsink k = ag_sink(ag);
	ssize_t n = tunpipe_read(&s->p, &k, ag->chunk);

	if (n == -EAGAIN)
		return;
	if (n < 0) {
		astream_free(s, false);
		return;
	}
	if (n == 0) {
		if (tunpipe_done(&s->p))
			astream_free(s, false);
		else
			astream_update(s);
		return;
	}
	ag->bytes_up += (uint64_t)n;
	if (ws_queued(ag->ws) + (ag->data != NULL ? ws_queued(ag->data) : 0) > AG_HIGH &&
	    !ag->paused) {
		struct astream **slot;

		ag->paused = true;
		for (slot = htab_oldest(ag->streams); slot != NULL;
		     slot = htab_newer(ag->streams, slot))
			astream_update(*slot);
		return;
	}
	if (s->p.bin && s->p.credit == 0)
		astream_update(s);
}

static void on_astream_io(struct ev_io *io, uint32_t events, void *arg)
{
	struct astream *s = arg;
	struct agent *ag = s->ag;

	(void)io;
	if (s->connecting) {
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		struct tunmsg m = {.stream_id = s->id};

		getsockopt(s->p.fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
		s->connecting = false;
		if (soerr != 0) {
			m.cmd = TUNMSG_CONNECT_ERR;
			snprintf(m.error, sizeof(m.error), "%s", strerror(soerr));
			send_msg(ag, &m);
			astream_free(s, false);
			return;
		}
		s->ok = true;
		m.cmd = TUNMSG_CONNECT_OK;
		send_msg(ag, &m);
		events = EPOLLOUT; /* what came before the connect may wait */
	}
	if (events & EPOLLOUT) {
		if (astream_flush(s) < 0) {
			send_cmd(ag, TUNMSG_RESET, s->id);
			astream_free(s, false);
			return;
		}
		if (tunpipe_done(&s->p)) {
			astream_free(s, false);
			return;
		}
	}
	if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) &&
	    (tunpipe_events(&s->p, s->ok && !ag->paused) & EPOLLIN))
		astream_read(s);
	else if (events & EPOLLERR) {
		send_cmd(ag, TUNMSG_RESET, s->id);
		astream_free(s, false);
	} else
		astream_update(s);
}

static void astream_deliver(struct astream *s, const uint8_t *p, size_t n)
{
	if (s->p.r_eof)
		return;
	if (tunpipe_take(&s->p, p, n) < 0) {
		send_cmd(s->ag, TUNMSG_RESET, s->id);
		astream_free(s, true);
		return;
	}
	if (s->connecting) {
		astream_fill(s, false);
		return; /* written once connected */
	}
	if (astream_flush(s) < 0) {
		send_cmd(s->ag, TUNMSG_RESET, s->id);
		astream_free(s, false);
		return;
	}
	astream_update(s);
}

/* The relay finished sending on stream s. */
static void astream_remote_close(struct astream *s)
{
	if (s->p.r_eof)
		return;
	s->p.r_eof = true;
	if (s->connecting)
		return;
	if (astream_flush(s) < 0) {
		astream_free(s, false);
		return;
	}
	if (tunpipe_done(&s->p))
		astream_free(s, false);
	else
		astream_update(s);
}

static bool token_known(struct agent *ag, const char *token)
{
	long long now = (long long)time(NULL);

	for (size_t i = 0; i < ag->ntokens; i++)
		if (sodium_memcmp(ag->tokens[i].token, token, sizeof(ag->tokens[i].token)) == 0)
			return ag->tokens[i].expires_unix + 5 >= now;
	return false;
}

static void token_add(struct agent *ag, const char *token, long long expires)
{
	long long now = (long long)time(NULL);
	size_t j = 0;

	/* Drop the expired ones first; the table stays bounded. */
	for (size_t i = 0; i < ag->ntokens; i++)
		if (ag->tokens[i].expires_unix + 5 >= now)
			ag->tokens[j++] = ag->tokens[i];
	ag->ntokens = j;
	if (ag->ntokens == AG_MAX_TOKENS) {
		memmove(ag->tokens, ag->tokens + 1, (AG_MAX_TOKENS - 1) * sizeof(*ag->tokens));
		ag->ntokens--;
	}
	memset(&ag->tokens[ag->ntokens], 0, sizeof(ag->tokens[0]));
	snprintf(ag->tokens[ag->ntokens].token, sizeof(ag->tokens[0].token), "%s", token);
	ag->tokens[ag->ntokens].expires_unix = expires;
	ag->ntokens++;
}

static void on_connect(struct agent *ag, const struct tunmsg *m)
{
	struct tunmsg e = {.cmd = TUNMSG_CONNECT_ERR, .stream_id = m->stream_id};
	const struct addr *to = &ag->cfg.target[m->target == TUNMSG_AUTH ? 0 : 1];
	struct astream *s, **slot;
	int fd, on = 1;

	if (htab_get(ag->streams, &m->stream_id) != NULL) {
		ag->bad_msgs++;
		return;
	}
	if (!token_known(ag, m->token)) {
		/* Only the allocations this agent asked for reach a target. */
		ag->refused_targets++;
		snprintf(e.error, sizeof(e.error), "unknown allocation");
		send_msg(ag, &e);
		return;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		goto fail;
	fd = socket(to->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		free(s);
		goto fail;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	if (connect(fd, (const struct sockaddr *)&to->ss, to->len) < 0 && errno != EINPROGRESS) {
		snprintf(e.error, sizeof(e.error), "%s", strerror(errno));
		close(fd);
		free(s);
		send_msg(ag, &e);
		return;
	}
	slot = htab_insert(ag->streams, &m->stream_id, false, NULL);
	if (slot == NULL) {
		close(fd);
		free(s);
		goto fail;
	}
	tunpipe_init(&s->p, fd, m->stream_id, AG_STREAM_MAX);
	s->p.bin = ag->bin;
	s->p.io = ev_io_add(ag->loop, fd, EPOLLOUT, on_astream_io, s);
	if (s->p.io == NULL) {
		strbuf_release(&s->p.out);
		htab_remove(ag->streams, slot);
		close(fd);
		free(s);
		goto fail;
	}
	*slot = s;
	s->ag = ag;
	s->id = m->stream_id;
	s->connecting = true;
	s->opened_ms = ev_now(ag->loop);
	return;
fail:
	snprintf(e.error, sizeof(e.error), "agent out of resources");
	send_msg(ag, &e);
}

static struct astream *stream_of(struct agent *ag, uint32_t id)
{
	struct astream **slot = htab_get(ag->streams, &id);

	if (slot == NULL)
		ag->bad_msgs++;
	return slot != NULL ? *slot : NULL;
}

/* ---- game datagrams: the UDP path to the relay, sessions to --server ---- */

/* One player's session: a socket of its own toward the game server, so the
 * server sees one address per player, as without the tunnel. */
struct usess {
	struct agent *ag;
	uint32_t sid;
	struct ev_io *io;
	long long last_ms;
	bool transparent; /* its socket carries the player's address */
};

static bool udp_ok(const struct agent *ag)
{
	return ag->udp_fd >= 0 && ag->udp_pong_ms != 0 &&
	       ev_now(ag->loop) - ag->udp_pong_ms < AG_UDP_FRESH_MS;
}

static void udp_flush(struct agent *ag)
{
	if (ag->udp_fd >= 0)
		ag->udp_out += tundgram_send_batch(ag->udp_fd, ag->omsgs, ag->nout);
	ag->nout = 0;
}

static void udp_before_sleep(void *arg)
{
	struct agent *ag = arg;

	if (ag->nout > 0)
		udp_flush(ag);
}

static void udp_send(struct agent *ag, enum tundgram_type type, uint32_t sid, const uint8_t *p,
		     size_t n)
{
	struct tundgram_hdr h = {
		.type = type, .udp_id = ag->udp_id, .sid = sid, .ctr = ++ag->udp_tx_ctr};
	unsigned k = ag->nout;
	int len;

	if (ag->udp_fd < 0)
		return;
	if (n + TUNDGRAM_OVER > AG_SLOT) {
		len = tundgram_seal(ag->dgram, sizeof(ag->dgram), &h, ag->udp_tx, p, n);
		if (len > 0 && send(ag->udp_fd, ag->dgram, (size_t)len, MSG_DONTWAIT) >= 0)
			ag->udp_out++;
		return;
	}
	len = tundgram_seal(ag->obufs + (size_t)k * AG_SLOT, AG_SLOT, &h, ag->udp_tx, p, n);
	if (len < 0)
		return;
	ag->oiov[k].iov_base = ag->obufs + (size_t)k * AG_SLOT;
	ag->oiov[k].iov_len = (size_t)len;
	ag->omsgs[k].msg_hdr.msg_iov = &ag->oiov[k];
	ag->omsgs[k].msg_hdr.msg_iovlen = 1;
	ag->omsgs[k].msg_hdr.msg_name = NULL;
	ag->omsgs[k].msg_hdr.msg_namelen = 0;
	if (++ag->nout == AG_BATCH)
		udp_flush(ag);
}

/* A datagram from the game server for the relay: UDP when it gets
 * through, else in the tunnel. */
static void dgram_out(struct agent *ag, uint32_t sid, const uint8_t *p, size_t n)
{
	if (udp_ok(ag)) {
		udp_send(ag, TUNDGRAM_DATA, sid, p, n);
		return;
	}
	if (ag->ws == NULL || n > TUNDGRAM_PAYLOAD || ws_queued(ag->ws) > AG_QUEUE_MAX)
		return;
	tunmsg_bin_header(ag->plain, TUNMSG_BIN_DGRAM, sid);
	memmove(ag->plain + TUNMSG_BIN_HDR, p, n);
	ws_send(ag->ws, true, ag->plain, n + TUNMSG_BIN_HDR);
	ag->dgram_ws_out++;
}

static void usess_free(struct usess *u)
{
	struct agent *ag = u->ag;
	struct usess **slot = htab_get(ag->usess, &u->sid);

	if (u->transparent)
		ag->tstats.active--;
	ev_io_del(u->io, true);
	if (slot != NULL)
		htab_remove(ag->usess, slot);
	free(u);
}

static void on_usess(struct ev_io *io, uint32_t events, void *arg)
{
	struct usess *u = arg;
	struct agent *ag = u->ag;

	(void)events;
	for (int i = 0; i < 64; i++) {
		ssize_t n = recv(ev_io_fd(io), ag->plain + TUNMSG_BIN_HDR, TUNDGRAM_PAYLOAD,
				 MSG_DONTWAIT);

		if (n < 0)
			return; /* EAGAIN, or ECONNREFUSED: the server not up */
		dgram_out(ag, u->sid, ag->plain + TUNMSG_BIN_HDR, (size_t)n);
	}
	(void)ag;
}

/*
 * The socket of a new session toward the server: with --transparent and
 * the player's address from the relay, bound to it (the server sees the
 * player); else the agent's own. -errno when the transparent bind fails
 * (no session: never a silent fallback to our address).
 */
static int usess_socket(struct agent *ag, uint32_t sid, const struct addr *peer, bool *tp)
{
	struct addr local;
	char a[ADDR_STRLEN];
	int fd = -EAFNOSUPPORT;

	*tp = false;
	if (ag->cfg.transparent && peer != NULL) {
		fd = relay_transparent_connect(&ag->cfg.server, peer, &local, &ag->tstats);
		*tp = fd >= 0;
	}
	if (fd == -EAFNOSUPPORT) {
		if (ag->cfg.transparent && peer == NULL && sid != 0)
			ag->usess_no_peer++;
		fd = addr_udp_connect(&ag->cfg.server, &local);
	}
	if (fd < 0)
		return fd;
	/* The port the server sees for this player, and who it is. */
	if (peer != NULL && log_enabled(LOG_LEVEL_DEBUG))
		log_debug("game-session-open sid=%u peer=%s upstream_port=%u%s", sid,
			  addr_str(peer, a, sizeof(a)), addr_port(&local),
			  *tp ? " transparent=1" : "");
	return fd;
}

/* A game datagram from the relay for session sid (peer: the player's
 * address, when the relay sends it): to the server, from that session's
 * own socket (opened on its first datagram). */
static void dgram_in(struct agent *ag, uint32_t sid, const struct addr *peer, const uint8_t *p,
		     size_t n)
{
	struct usess **slot, *u;

	if (!ag->cfg.server_on) {
		ag->bad_msgs++;
		return;
	}
	slot = htab_get(ag->usess, &sid);
	if (slot == NULL && peer == NULL && sid != 0 && ag->cfg.transparent && ag->peer_taken) {
		/* Sent before the relay had our answer (a new tunnel's first
		 * round trip): a socket opened now would show the server our
		 * address for the whole session, and after a tunnel's restart
		 * change a playing client's address. The game resends; the next
		 * datagram carries the player's address. */
		ag->usess_no_peer++;
		return;
	}
	if (slot == NULL) {
		int fd;
		bool tp;
		struct usess *evicted = NULL;

		u = calloc(1, sizeof(*u));
		if (u == NULL)
			return;
		fd = usess_socket(ag, sid, peer, &tp);
		if (fd < 0) {
			free(u);
			return;
		}
		u->transparent = tp;
		/* Full: the session idle longest makes room (the relay's own
		 * table decides who plays; this one only follows it). */
		slot = htab_insert(ag->usess, &sid, true, &evicted);
		if (evicted != NULL) {
			if (evicted->transparent)
				ag->tstats.active--;
			ev_io_del(evicted->io, true);
			free(evicted);
		}
		u->ag = ag;
		u->sid = sid;
		u->io = ev_io_add(ag->loop, fd, EPOLLIN, on_usess, u);
		if (slot == NULL || u->io == NULL) {
			if (tp)
				ag->tstats.active--;
			if (slot != NULL)
				htab_remove(ag->usess, slot);
			if (u->io != NULL)
				ev_io_del(u->io, true);
			else
				close(fd);
			free(u);
			return;
		}
		*slot = u;
		ag->usess_opened++;
	} else {
		u = *slot;
		htab_touch(ag->usess, slot);
	}
	u->last_ms = ev_now(ag->loop);
	if (send(ev_io_fd(u->io), p, n, MSG_DONTWAIT) >= 0)
		ag->dgram_in++;
}

/* Sessions the relay forgot (it closes idle ones after 2 minutes) go
 * here a little later; oldest first, the table keeps recency. */
static void usess_expire(struct agent *ag)
{
	struct usess **slot;

	while ((slot = htab_oldest(ag->usess)) != NULL &&
	       ev_now(ag->loop) - (*slot)->last_ms >= AG_USESS_IDLE_MS)
		usess_free(*slot);
}

static void udp_close(struct agent *ag)
{
	struct usess **slot;

	while ((slot = htab_oldest(ag->usess)) != NULL)
		usess_free(*slot);
	if (ag->udp_io != NULL)
		ev_io_del(ag->udp_io, true);
	else if (ag->udp_fd >= 0)
		close(ag->udp_fd);
	ag->udp_io = NULL;
	ag->udp_fd = -1;
	ag->nout = 0;
	ag->udp_on = false;
	ag->udp_pong_ms = 0;
	sodium_memzero(ag->udp_rx, sizeof(ag->udp_rx));
	sodium_memzero(ag->udp_tx, sizeof(ag->udp_tx));
}

/* A datagram with the player's address in front (TUNMSG_X_PEER). */
static void peer_in(struct agent *ag, uint32_t sid, const uint8_t *p, size_t n)
{
	struct addr peer;
	int k = tundgram_peer_decode(p, n, &peer);

	if (k < 0) {
		ag->bad_msgs++;
		return;
	}
	dgram_in(ag, sid, &peer, p + k, n - (size_t)k);
}

static void on_udp(struct ev_io *io, uint32_t events, void *arg)
{
	struct agent *ag = arg;
	int got;

	(void)events;
	for (unsigned i = 0; i < AG_BATCH; i++) {
		ag->iiov[i].iov_base = ag->ibufs + (size_t)i * AG_SLOT;
		ag->iiov[i].iov_len = AG_SLOT;
		ag->imsgs[i].msg_hdr.msg_iov = &ag->iiov[i];
		ag->imsgs[i].msg_hdr.msg_iovlen = 1;
	}
	got = recvmmsg(ev_io_fd(io), ag->imsgs, AG_BATCH, MSG_DONTWAIT, NULL);
	for (int i = 0; i < got && ag->udp_fd >= 0; i++) {
		size_t n = ag->imsgs[i].msg_len;
		const uint8_t *d = ag->ibufs + (size_t)i * AG_SLOT;
		struct tundgram_hdr h;
		int m;

		if ((ag->imsgs[i].msg_hdr.msg_flags & MSG_TRUNC) || tundgram_peek(d, n, &h) < 0 ||
		    h.udp_id != ag->udp_id) {
			ag->udp_bad++;
			continue;
		}
		m = tundgram_open(d, n, ag->udp_rx, &ag->udp_win, ag->plain, sizeof(ag->plain));
		if (m < 0) {
			ag->udp_bad++;
			continue;
		}
		ag->udp_in++;
		if (h.type == TUNDGRAM_DATA) {
			dgram_in(ag, h.sid, NULL, ag->plain, (size_t)m);
		} else if (h.type == TUNDGRAM_DATA_PEER) {
			peer_in(ag, h.sid, ag->plain, (size_t)m);
		} else if (h.type == TUNDGRAM_PONG) {
			if (!udp_ok(ag))
				log_info("tunnel-udp-up relay=%s", ag->cfg.url);
			ag->udp_pong_ms = ev_now(ag->loop);
		} else {
			uint8_t c[8];

			for (int k = 0; k < 8; k++)
				c[k] = (uint8_t)(h.ctr >> (56 - 8 * k));
			udp_send(ag, TUNDGRAM_PONG, 0, c, sizeof(c));
		}
	}
}

/* Both X25519 halves signed with the realm's key, bound to this tunnel's
 * nonce (tunmsg_udp_key_message): the relay keys the path only then. */
static bool udp_sign(const struct agent *ag, const struct tunmsg *offer, struct tunmsg *x)
{
	char text[TUNMSG_ID_MAX * 4 + 64];
	uint8_t sig[crypto_sign_BYTES];
	int n = tunmsg_udp_key_message(ag->cfg.realm, ag->nonce, offer->x_udp_key, x->x_udp_key,
				       text, sizeof(text));

	if (n < 0)
		return false;
	crypto_sign_detached(sig, NULL, (const uint8_t *)text, (unsigned long long)n, ag->sk);
	sodium_bin2hex(x->x_udp_sig, sizeof(x->x_udp_sig), sig, sizeof(sig));
	return true;
}

/* The relay offered the datagram path: our half of the key exchange, and
 * a socket toward its UDP port (the address the tunnel reached). Fills
 * x's UDP fields for the answer; false when we do not take it. */
static bool udp_setup(struct agent *ag, const struct tunmsg *offer, struct tunmsg *x)
{
	uint8_t rpk[crypto_kx_PUBLICKEYBYTES], pk[crypto_kx_PUBLICKEYBYTES];
	uint8_t sk[crypto_kx_SECRETKEYBYTES];
	size_t n = 0;
	struct addr to;
	int fd;

	if (!ag->cfg.server_on || offer->x_udp_id == 0 || offer->x_udp_port == 0 ||
	    sodium_base642bin(rpk, sizeof(rpk), offer->x_udp_key, strlen(offer->x_udp_key), NULL,
			      &n, NULL, sodium_base64_VARIANT_ORIGINAL) != 0 ||
	    n != sizeof(rpk))
		return false;
	crypto_kx_keypair(pk, sk);
	if (crypto_kx_client_session_keys(ag->udp_rx, ag->udp_tx, pk, sk, rpk) != 0) {
		sodium_memzero(sk, sizeof(sk));
		return false;
	}
	sodium_memzero(sk, sizeof(sk));
	ag->udp_id = offer->x_udp_id;
	ag->udp_tx_ctr = 0;
	memset(&ag->udp_win, 0, sizeof(ag->udp_win));
	ag->udp_on = true;
	x->x_features |= TUNMSG_X_UDP;
	sodium_bin2base64(x->x_udp_key, sizeof(x->x_udp_key), pk, sizeof(pk),
			  sodium_base64_VARIANT_ORIGINAL);
	if (!udp_sign(ag, offer, x)) {
		x->x_features &= ~(unsigned)TUNMSG_X_UDP;
		x->x_udp_key[0] = '\0';
		ag->udp_on = false;
		return false;
	}
	/* --no-udp: keyed, but every datagram takes the tunnel (networks
	 * that drop UDP; the fallback's test). */
	if (ag->cfg.no_udp || ws_peer(ag->ws, &to) < 0)
		return true;
	addr_set_port(&to, offer->x_udp_port);
	fd = addr_udp_connect(&to, NULL);
	if (fd < 0)
		return true;
	ag->udp_fd = fd;
	addr_socket_buffers(fd, 4 << 20);
	ag->udp_io = ev_io_add(ag->loop, fd, EPOLLIN, on_udp, ag);
	if (ag->udp_io == NULL) {
		close(fd);
		ag->udp_fd = -1;
		return true;
	}
	ag->udp_ping_ms = 0; /* the first ping goes with the next tick */
	return true;
}

/* Once a second: pings (every second until the first pong, then every
 * 5 s: they also keep the NAT's mapping open), idle sessions. */
static void udp_tick(struct agent *ag)
{
	long long now = ev_now(ag->loop);

	usess_expire(ag);
	if (ag->udp_fd < 0 || ag->state != AG_OPEN)
		return;
	if (now - ag->udp_ping_ms >= (udp_ok(ag) ? AG_UDP_PING_MS : 1000)) {
		if (ag->udp_pong_ms != 0 && !udp_ok(ag) && ag->udp_was_ok) {
			log_warnx("tunnel-udp-lost relay=%s fallback=tunnel", ag->cfg.url);
			ag->udp_was_ok = false;
		}
		ag->udp_ping_ms = now;
		udp_send(ag, TUNDGRAM_PING, 0, NULL, 0);
	}
	if (udp_ok(ag))
		ag->udp_was_ok = true;
}

/* ---- allocation requests from the control API ---- */

static void pend_answer(struct agent *ag, size_t i, unsigned status, struct json_object *o)
{
	httpd_reply_json(ag->pend[i].req, status, o);
	ag->pend[i] = ag->pend[--ag->npend];
}

static void pend_fail_all(struct agent *ag, const char *why)
{
	while (ag->npend > 0) {
		httpd_reply_error(ag->pend[0].req, 503, why);
		ag->pend[0] = ag->pend[--ag->npend];
	}
}

static void on_alloc_answer(struct agent *ag, const struct tunmsg *m)
{
	struct json_object *o;

	for (size_t i = 0; i < ag->npend; i++) {
		if (ag->pend[i].request_id != m->request_id)
			continue;
		o = json_object_new_object();
		if (m->cmd == TUNMSG_ALLOCATE_OK) {
			token_add(ag, m->token, m->expires_at);
			json_object_object_add(o, "token", json_object_new_string(m->token));
			json_object_object_add(o, "relay_host",
					       json_object_new_string(m->relay_host));
			json_object_object_add(o, "auth_port", json_object_new_int(m->auth_port));
			json_object_object_add(o, "world_port", json_object_new_int(m->world_port));
			json_object_object_add(o, "expires_at",
					       json_object_new_int64(m->expires_at));
			pend_answer(ag, i, 200, o);
		} else {
			json_object_object_add(o, "error", json_object_new_string(m->error));
			pend_answer(ag, i, 409, o);
		}
		json_object_put(o);
		return;
	}
}

static void post_allocate(struct agent *ag, struct httpd_req *req)
{
	struct json_object *o = NULL;
	struct tunmsg m = {.cmd = TUNMSG_ALLOCATE};
	const char *player, *ip;
	char canon[37], err[64];
	size_t len;
	const char *body = httpd_body(req, &len);
	struct addr a;

	if (ag->state != AG_OPEN) {
		httpd_reply_error(req, 503, "tunnel down");
		return;
	}
	if (ag->npend == AG_MAX_PENDING) {
		httpd_reply_error(req, 429, "too many allocations in flight");
		return;
	}
	if (jsonp_parse(body, len, 4, &o, err, sizeof(err)) < 0) {
		httpd_reply_error(req, 400, err);
		return;
	}
	player = jsonp_str(o, "player_id");
	ip = jsonp_str(o, "expected_client_ip");
	if (player == NULL || relay_keys_canon_uuid(player, canon) < 0) {
		json_object_put(o);
		httpd_reply_error(req, 400, "player_id: a UUID");
		return;
	}
	if (ip != NULL && (strlen(ip) > TUNMSG_ID_MAX || addr_parse_ip(&a, ip) < 0)) {
		json_object_put(o);
		httpd_reply_error(req, 400, "expected_client_ip: an IP address");
		return;
	}
	m.request_id = ++ag->next_req;
	snprintf(m.player_id, sizeof(m.player_id), "%s", canon);
	if (ip != NULL)
		snprintf(m.expected_ip, sizeof(m.expected_ip), "%s", ip);
	json_object_put(o);
	send_msg(ag, &m);
	ag->pend[ag->npend].request_id = m.request_id;
	ag->pend[ag->npend].req = req;
	ag->pend[ag->npend].deadline_ms = ev_now(ag->loop) + AG_ALLOC_WAIT_MS;
	ag->npend++;
	httpd_suspend(req);
}

static void get_status(struct agent *ag, struct httpd_req *req)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "connected", json_object_new_boolean(ag->state == AG_OPEN));
	json_object_object_add(o, "realm_id", json_object_new_string(ag->cfg.realm));
	json_object_object_add(o, "framing", json_object_new_string(ag->bin ? "binary" : "json"));
	json_object_object_add(o, "streams",
			       json_object_new_int64((int64_t)htab_count(ag->streams)));
	json_object_object_add(o, "tunnels", json_object_new_int64((int64_t)ag->tunnels));
	json_object_object_add(o, "refused_targets",
			       json_object_new_int64((int64_t)ag->refused_targets));
	json_object_object_add(o, "bad_messages", json_object_new_int64((int64_t)ag->bad_msgs));
	json_object_object_add(o, "bytes_up", json_object_new_int64((int64_t)ag->bytes_up));
	json_object_object_add(o, "bytes_down", json_object_new_int64((int64_t)ag->bytes_down));
	json_object_object_add(o, "datagram_path",
			       json_object_new_string(!ag->udp_on  ? "off"
						      : udp_ok(ag) ? "udp"
								   : "tunnel"));
	json_object_object_add(o, "game_sessions",
			       json_object_new_int64((int64_t)htab_count(ag->usess)));
	json_object_object_add(o, "transparent", json_object_new_boolean(ag->cfg.transparent));
	json_object_object_add(o, "player_addresses", json_object_new_boolean(ag->peer_taken));
	json_object_object_add(o, "transparent_sessions",
			       json_object_new_int64((int64_t)ag->tstats.active));
	json_object_object_add(o, "transparent_sessions_total",
			       json_object_new_int64((int64_t)ag->tstats.opened));
	json_object_object_add(o, "transparent_port_taken",
			       json_object_new_int64((int64_t)ag->tstats.port_taken));
	json_object_object_add(
		o, "transparent_bind_fail",
		json_object_new_int64((int64_t)(ag->tstats.fail_error + ag->tstats.fail_family)));
	json_object_object_add(o, "sessions_without_address",
			       json_object_new_int64((int64_t)ag->usess_no_peer));
	json_object_object_add(o, "udp_in", json_object_new_int64((int64_t)ag->udp_in));
	json_object_object_add(o, "udp_out", json_object_new_int64((int64_t)ag->udp_out));
	json_object_object_add(o, "udp_bad", json_object_new_int64((int64_t)ag->udp_bad));
	json_object_object_add(o, "dgram_tunnel_in",
			       json_object_new_int64((int64_t)ag->dgram_ws_in));
	json_object_object_add(o, "dgram_tunnel_out",
			       json_object_new_int64((int64_t)ag->dgram_ws_out));
	httpd_reply_json(req, 200, o);
	json_object_put(o);
}

static void on_control(struct httpd_req *req, void *arg)
{
	struct agent *ag = arg;
	const char *m = httpd_method(req), *path = httpd_path(req);

	if (!token_check(ag->token_hash, req)) {
		httpd_add_header(req, "WWW-Authenticate", "Bearer realm=\"rally-relay agent\"");
		httpd_reply_error(req, 401, "missing or wrong bearer token");
		return;
	}
	if (strcmp(path, "/allocate") == 0 && strcmp(m, "POST") == 0)
		post_allocate(ag, req);
	else if (strcmp(path, "/status") == 0 && strcmp(m, "GET") == 0)
		get_status(ag, req);
	else
		httpd_reply_error(req, 404, "not found");
}

/* ---- the tunnel ---- */

static void dial(struct agent *ag);
static void on_retry(struct ev_timer *t, void *arg);

static void drop_streams(struct agent *ag)
{
	struct astream **slot;

	while ((slot = htab_oldest(ag->streams)) != NULL)
		astream_free(*slot, true);
}

static void tunnel_lost(struct agent *ag, const char *why)
{
	long long lived = ag->state == AG_OPEN ? ev_now(ag->loop) - ag->up_ms : 0;

	if (ag->state == AG_OPEN)
		log_info("tunnel-down realm=%s up_s=%lld reason=%s", ag->cfg.realm, lived / 1000,
			 why);
	else
		log_warnx("tunnel-fail relay=%s reason=%s", ag->cfg.url, why);
	drop_streams(ag);
	udp_close(ag);
	ws_free(ag->data);
	ag->data = NULL;
	ag->data_dialing = false;
	ag->nheld = 0;
	ag->dasm.len = 0;
	pend_fail_all(ag, "tunnel down");
	ag->ntokens = 0;
	ag->ws = NULL;
	ag->full = 0;
	ag->state = AG_IDLE;
	ag->bin = false;
	ag->paused = false;
	/* Backoff with jitter; a tunnel that lived a minute starts over. */
	if (lived >= 60000)
		ag->backoff_ms = AG_BACKOFF_MIN;
	ev_timer_start(ag->loop, &ag->retry,
		       ag->backoff_ms / 2 + randombytes_uniform((uint32_t)ag->backoff_ms / 2 + 1),
		       on_retry, ag);
}

static void on_ws_close(struct ws *w, int err, void *arg)
{
	struct agent *ag = arg;
	char why[64];

	snprintf(why, sizeof(why), "%s", err == 0 ? "closed" : strerror(-err));
	ws_free(w);
	tunnel_lost(ag, why);
}

static void on_ws_open(struct ws *w, void *arg)
{
	struct agent *ag = arg;

	(void)w;
	ag->state = AG_CHALLENGE;
}

static void on_challenge(struct agent *ag, const uint8_t *msg, size_t len)
{
	char nonce[TUNMSG_ID_MAX + 1], text[TUNMSG_ID_MAX * 2 + 64], hex[129], out[300];
	uint8_t sig[64];
	int n;

	if (tunmsg_decode_challenge((const char *)msg, len, nonce) < 0) {
		ws_close(ag->ws, 1002);
		return;
	}
	n = tunmsg_signed_message(ag->cfg.realm, nonce, text, sizeof(text));
	if (n < 0) {
		ws_close(ag->ws, 1002);
		return;
	}
	memcpy(ag->nonce, nonce, sizeof(ag->nonce));
	crypto_sign_detached(sig, NULL, (const uint8_t *)text, (unsigned long long)n, ag->sk);
	sodium_bin2hex(hex, sizeof(hex), sig, sizeof(sig));
	snprintf(out, sizeof(out), "{\"realm_id\":\"%s\",\"signature\":\"%s\"}", ag->cfg.realm,
		 hex);
	ws_send(ag->ws, false, out, strlen(out));
	ag->state = AG_WELCOME;
}

static void on_welcome(struct agent *ag, const uint8_t *msg, size_t len)
{
	char why[TUNMSG_TEXT_MAX + 1] = "";
	int r = tunmsg_decode_welcome((const char *)msg, len, why, sizeof(why));

	if (r < 0) {
		log_warnx("tunnel-refused relay=%s message=\"%s\"", ag->cfg.url,
			  r == -EACCES ? why : "bad welcome");
		ws_close(ag->ws, 1000);
		ag->state = AG_DIALING; /* messages ignored until the close */
		return;
	}
	ag->state = AG_OPEN;
	ag->up_ms = ag->last_ping_ms = ev_now(ag->loop);
	ag->tunnels++;
	log_info("tunnel-up realm=%s relay=%s", ag->cfg.realm, ag->cfg.url);
}

static void on_bin(struct agent *ag, const uint8_t *msg, size_t len)
{
	enum tunmsg_bin type;
	uint32_t id;
	const uint8_t *p;
	size_t n;
	struct astream *s;

	if (!ag->bin || tunmsg_bin_decode(msg, len, &type, &id, &p, &n) < 0) {
		ag->bad_msgs++;
		return;
	}
	if (type == TUNMSG_BIN_DGRAM) {
		ag->dgram_ws_in++;
		dgram_in(ag, id, NULL, p, n);
		return;
	}
	if (type == TUNMSG_BIN_DGRAM_PEER) {
		ag->dgram_ws_in++;
		peer_in(ag, id, p, n);
		return;
	}
	s = stream_of(ag, id);
	if (s == NULL)
		return;
	if (type == TUNMSG_BIN_CLOSE) {
		astream_remote_close(s);
		return;
	}
	if (type == TUNMSG_BIN_RESET) {
		astream_free(s, true);
		return;
	}
	if (type == TUNMSG_BIN_CREDIT) {
		if (tunpipe_credit(&s->p, p) < 0) {
			ag->bad_msgs++;
			return;
		}
		astream_update(s);
		return;
	}
	astream_deliver(s, p, n);
}

/* ---- the data channel ---- */

static void on_bin(struct agent *ag, const uint8_t *msg, size_t len);

/* The data channel's URL: the tunnel's, .../host -> .../data. */
static bool data_url(const struct agent *ag, char *out, size_t size)
{
	size_t n = strlen(ag->cfg.url);

	if (n < 5 || strcmp(ag->cfg.url + n - 5, "/host") != 0)
		return false;
	if (out != NULL)
		snprintf(out, size, "%.*s/data", (int)(n - 5), ag->cfg.url);
	return true;
}

static void release_held(struct agent *ag)
{
	size_t n = ag->nheld;

	ag->data_dialing = false;
	ag->nheld = 0;
	for (size_t i = 0; i < n; i++)
		on_connect(ag, &ag->held[i]);
}

static void on_data_frame(void *arg, const uint8_t *frame, size_t len)
{
	on_bin(arg, frame, len);
}

static void on_data_msg(struct ws *w, bool binary, const uint8_t *msg, size_t len, void *arg)
{
	struct agent *ag = arg;

	(void)w;
	(void)binary;
	if (tunsink_deframe(&ag->dasm, msg, len, on_data_frame, ag) < 0) {
		ag->bad_msgs++;
		ws_close(ag->ws, 1002); /* the tunnel ends, and starts over */
	}
}

static void on_data_open(struct ws *w, void *arg)
{
	struct agent *ag = arg;

	(void)w;
	log_info("tunnel-data-up relay=%s", ag->cfg.url);
	release_held(ag);
}

static void on_data_close(struct ws *w, int err, void *arg)
{
	struct agent *ag = arg;
	char why[64];

	snprintf(why, sizeof(why), "data channel: %s", err == 0 ? "closed" : strerror(-err));
	ws_free(w);
	ag->data = NULL;
	if (ag->data_dialing) {
		/* Never came up: the streams use the tunnel itself. */
		log_warnx("tunnel-data-fail relay=%s reason=\"%s\"", ag->cfg.url, why);
		release_held(ag);
		return;
	}
	/* Frames may have been lost with it: the whole tunnel starts over. */
	ws_close(ag->ws, 1011);
}

static void on_data_drain(struct ws *w, void *arg);

static const struct ws_ops data_ops = {
	.on_msg = on_data_msg,
	.on_open = on_data_open,
	.on_drain = on_data_drain,
	.on_close = on_data_close,
};

static void data_dial(struct agent *ag, const char *token)
{
	char url[WS_URL_MAX + 8], hdr[TUNMSG_ID_MAX + 32];
	struct ws_cfg wc = {.low_water = AG_LOW,
			    .ca_file = ag->cfg.ca_file,
			    .connect_timeout_ms = 5000,
			    .raw_protocol = "rally-data-1",
			    .raw_queue_max = AG_QUEUE_MAX,
			    .extra_header = hdr};

	if (!data_url(ag, url, sizeof(url)) || strlen(token) != 32)
		return;
	snprintf(hdr, sizeof(hdr), "X-Rally-Data: %s", token);
	ag->data = ws_connect(ag->loop, url, &wc, &data_ops, ag);
	ag->data_dialing = ag->data != NULL;
}

static void on_msg(struct agent *ag, const uint8_t *msg, size_t len)
{
	struct tunmsg m;
	struct astream *s;

	if (tunmsg_decode((const char *)msg, len, &m, ag->chunk, sizeof(ag->chunk)) < 0) {
		ag->bad_msgs++;
		return;
	}
	switch (m.cmd) {
	case TUNMSG_PING: {
		struct tunmsg pong = {.cmd = TUNMSG_PONG};

		send_msg(ag, &pong);
		return;
	}
	case TUNMSG_ALLOCATE_OK:
	case TUNMSG_ALLOCATE_ERR:
		on_alloc_answer(ag, &m);
		return;
	case TUNMSG_CONNECT:
		if (ag->data_dialing) {
			/* Streams start once the data channel is up (or given
			 * up), so no stream's frames ever take both ways. */
			if (ag->nheld < AG_MAX_HELD)
				ag->held[ag->nheld++] = m;
			return;
		}
		on_connect(ag, &m);
		return;
	case TUNMSG_DATA:
		s = stream_of(ag, m.stream_id);
		if (s != NULL && m.chunk_len > 0)
			astream_deliver(s, m.chunk, m.chunk_len);
		return;
	case TUNMSG_CLOSE:
		s = stream_of(ag, m.stream_id);
		if (s != NULL)
			astream_remote_close(s);
		return;
	case TUNMSG_RESET:
		s = stream_of(ag, m.stream_id);
		if (s != NULL)
			astream_free(s, true);
		return;
	case TUNMSG_X_RALLY:
		if (!ag->cfg.json_only && m.x_version >= 1 && (m.x_features & TUNMSG_X_BIN) &&
		    htab_count(ag->streams) == 0) {
			struct tunmsg x = {
				.cmd = TUNMSG_X_RALLY, .x_version = 1, .x_features = TUNMSG_X_BIN};

			if (m.x_features & TUNMSG_X_UDP)
				udp_setup(ag, &m, &x);
			if ((m.x_features & TUNMSG_X_DATA) && data_url(ag, NULL, 0))
				x.x_features |= TUNMSG_X_DATA;
			/* The players' addresses: for --transparent, and for the
			 * debug log's mapping otherwise. */
			ag->peer_taken = ag->cfg.server_on && (m.x_features & TUNMSG_X_PEER);
			if (ag->peer_taken)
				x.x_features |= TUNMSG_X_PEER;
			else if (ag->cfg.transparent)
				log_warnx("tunnel-no-peer relay=%s hint=\"the relay does not send "
					  "the players' addresses (upgrade it): the server sees "
					  "this agent's address\"",
					  ag->cfg.url);
			send_msg(ag, &x);
			ag->bin = true;
			if (x.x_features & TUNMSG_X_DATA)
				data_dial(ag, m.x_data_token);
		}
		return;
	default:
		return;
	}
}

static void on_ws_msg(struct ws *w, bool binary, const uint8_t *msg, size_t len, void *arg)
{
	struct agent *ag = arg;

	(void)w;
	switch (ag->state) {
	case AG_CHALLENGE:
		on_challenge(ag, msg, len);
		return;
	case AG_WELCOME:
		on_welcome(ag, msg, len);
		return;
	case AG_OPEN:
		if (binary)
			on_bin(ag, msg, len);
		else
			on_msg(ag, msg, len);
		return;
	default:
		return;
	}
}

static void on_ws_drain(struct ws *w, void *arg);

static void on_data_drain(struct ws *w, void *arg)
{
	on_ws_drain(w, arg);
}

static void on_ws_drain(struct ws *w, void *arg)
{
	struct agent *ag = arg;
	struct astream **slot;

	(void)w;
	if (!ag->paused)
		return;
	ag->paused = false;
	for (slot = htab_oldest(ag->streams); slot != NULL; slot = htab_newer(ag->streams, slot))
		astream_update(*slot);
}

static const struct ws_ops agent_ops = {
	.on_msg = on_ws_msg,
	.on_open = on_ws_open,
	.on_drain = on_ws_drain,
	.on_close = on_ws_close,
};

static void dial(struct agent *ag)
{
	struct ws_cfg wc = {.max_msg = TUNMSG_WS_MAX,
			    .low_water = AG_LOW,
			    .ca_file = ag->cfg.ca_file,
			    .connect_timeout_ms = 15000};

	ag->ws = ws_connect(ag->loop, ag->cfg.url, &wc, &agent_ops, ag);
	if (ag->ws == NULL) {
		tunnel_lost(ag, "dial failed");
		return;
	}
	ag->state = AG_DIALING;
	if (ag->backoff_ms < AG_BACKOFF_MAX)
		ag->backoff_ms *= 2;
	if (ag->backoff_ms > AG_BACKOFF_MAX)
		ag->backoff_ms = AG_BACKOFF_MAX;
}

static void on_retry(struct ev_timer *t, void *arg)
{
	(void)t;
	dial(arg);
}

/* Once a second: allocation requests the relay never answered, local
 * connects that hang, the keepalive. */
static void on_tick(struct ev_timer *t, void *arg)
{
	struct agent *ag = arg;
	long long now = ev_now(ag->loop);
	struct astream **slot, **next;

	(void)t;
	for (size_t i = 0; i < ag->npend;) {
		if (ag->pend[i].deadline_ms <= now) {
			httpd_reply_error(ag->pend[i].req, 504, "the relay did not answer");
			ag->pend[i] = ag->pend[--ag->npend];
		} else {
			i++;
		}
	}
	for (slot = htab_oldest(ag->streams); slot != NULL; slot = next) {
		next = htab_newer(ag->streams, slot);
		if ((*slot)->connecting && now - (*slot)->opened_ms >= AG_CONNECT_MS) {
			struct tunmsg e = {.cmd = TUNMSG_CONNECT_ERR, .stream_id = (*slot)->id};

			snprintf(e.error, sizeof(e.error), "local target timed out");
			send_msg(ag, &e);
			astream_free(*slot, false);
		}
	}
	if (ag->ws != NULL &&
	    (ws_queued(ag->ws) > AG_QUEUE_MAX || ws_queued_msgs(ag->ws) > AG_QUEUE_MSGS)) {
		struct ws *w = ag->ws;

		ws_free(w);
		tunnel_lost(ag, "relay not reading");
		ev_timer_start(ag->loop, &ag->tick, 1000, on_tick, ag);
		return;
	}
	udp_tick(ag);
	if (ag->state == AG_OPEN && now - ag->last_ping_ms >= AG_PING_MS) {
		struct tunmsg ping = {.cmd = TUNMSG_PING};

		send_msg(ag, &ping);
		ag->last_ping_ms = now;
	}
	ev_timer_start(ag->loop, &ag->tick, 1000, on_tick, ag);
}

/* ---- the key file and keygen ---- */

static int load_key(struct agent *ag)
{
	char *text = NULL;
	size_t len;
	uint8_t seed[32], pk[32];
	int r = statefile_read(ag->cfg.key_file, 4096, &text, &len);

	if (r < 0) {
		errno = -r;
		log_warn("key-unreadable file=%s", ag->cfg.key_file);
		return r;
	}
	while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
		text[--len] = '\0';
	r = relay_keys_parse_key(text, seed);
	sodium_memzero(text, len);
	free(text);
	if (r < 0) {
		log_err("key-refused file=%s reason=\"expected 32 bytes: 64 hex or base64\"",
			ag->cfg.key_file);
		return -EINVAL;
	}
	crypto_sign_seed_keypair(pk, ag->sk, seed);
	sodium_memzero(seed, sizeof(seed));
	return 0;
}

static int keygen(const char *path)
{
	uint8_t seed[32], pk[32], sk[64];
	char hex[65], pkhex[65];
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	ssize_t n;

	if (fd < 0) {
		fprintf(stderr, "rally-relay agent keygen: %s: %s\n", path, strerror(errno));
		return DAEMON_EXIT_FAIL;
	}
	randombytes_buf(seed, sizeof(seed));
	crypto_sign_seed_keypair(pk, sk, seed);
	sodium_bin2hex(hex, sizeof(hex), seed, sizeof(seed));
	hex[64] = '\n';
	n = write(fd, hex, 65);
	sodium_memzero(hex, sizeof(hex));
	sodium_memzero(seed, sizeof(seed));
	sodium_memzero(sk, sizeof(sk));
	if (n != 65 || fsync(fd) < 0 || close(fd) < 0) {
		fprintf(stderr, "rally-relay agent keygen: %s: write failed\n", path);
		unlink(path);
		return DAEMON_EXIT_FAIL;
	}
	sodium_bin2hex(pkhex, sizeof(pkhex), pk, sizeof(pk));
	printf("public_key=%s\n", pkhex);
	return DAEMON_EXIT_OK;
}

/* ---- main ---- */

static void set_target(struct addr *a, const char *s, const char *what)
{
	if (addr_parse(a, s, -1) < 0 || addr_port(a) == 0)
		daemon_die_usage("--%s %s: expected IP:PORT", what, s);
}

static void set_auth(void *ctx, const char *s)
{
	set_target(&((struct agent_cfg *)ctx)->target[0], s, "auth");
}

static void set_world(void *ctx, const char *s)
{
	set_target(&((struct agent_cfg *)ctx)->target[1], s, "world");
}

static void on_stop(struct daemon *d, void *arg)
{
	(void)arg;
	ev_loop_stop(d->loop);
}

static void on_reload(struct daemon *d, void *arg)
{
	(void)d;
	(void)arg;
}

int relay_agent_main(int argc, char **argv)
{
	static struct agent ag;
	struct agent_cfg *c = &ag.cfg;
	struct daemon *d = &ag.d;
	char canon[37], ca[ADDR_STRLEN];
	struct daemon_flag flags[] = {
		DAEMON_STR_SET("relay", c->url),
		DAEMON_STR_SET("realm-id", c->realm),
		DAEMON_STR_SET("key", c->key_file),
		DAEMON_FN("auth", set_auth, c),
		DAEMON_FN("world", set_world, c),
		DAEMON_ADDR("control", &c->control),
		DAEMON_STR_SET("token-file", c->token_file),
		DAEMON_STR_SET("ca-file", c->ca_file),
		DAEMON_BOOL("json-framing", &c->json_only),
		DAEMON_ADDR("server", &c->server),
		DAEMON_BOOL("no-udp", &c->no_udp),
		DAEMON_BOOL("transparent", &c->transparent),
	};
	const size_t n = DAEMON_NFLAGS(flags);
	int pos, ret = -EINVAL;

	if (argc >= 2 && strcmp(argv[1], "keygen") == 0) {
		if (argc != 3) {
			fprintf(stderr, "usage: rally-relay agent keygen FILE\n");
			return DAEMON_EXIT_USAGE;
		}
		if (sodium_init() < 0)
			return DAEMON_EXIT_FAIL;
		return keygen(argv[2]);
	}
	addr_parse(&c->target[0], "127.0.0.1:3724", -1);
	addr_parse(&c->target[1], "127.0.0.1:8085", -1);
	daemon_init(d, "rally-relay agent", usage);
	pos = daemon_parse(d, argc, argv, flags, n);
	if (pos < argc)
		daemon_die_usage("unexpected argument: %s", argv[pos]);
	if (!daemon_flag_seen(flags, n, "relay") || !daemon_flag_seen(flags, n, "realm-id") ||
	    !daemon_flag_seen(flags, n, "key"))
		daemon_die_usage("%s", "--relay, --realm-id and --key are required");
	if (strncmp(c->url, "ws://", 5) != 0 && strncmp(c->url, "wss://", 6) != 0)
		daemon_die_usage("--relay %s: expected ws://... or wss://...", c->url);
	if (relay_keys_canon_uuid(c->realm, canon) < 0)
		daemon_die_usage("--realm-id %s: expected a UUID", c->realm);
	memcpy(c->realm, canon, sizeof(canon));
	c->control_on = daemon_flag_seen(flags, n, "control");
	c->server_on = daemon_flag_seen(flags, n, "server");
	if (c->server_on && c->json_only)
		daemon_die_usage("%s", "--server (game datagrams) needs our framing, not "
				       "--json-framing");
	if (c->control_on && c->token_file[0] == '\0')
		daemon_die_usage("%s", "--control needs --token-file");
	if (c->transparent && !c->server_on)
		daemon_die_usage("%s", "--transparent needs --server (the game server's "
				       "sessions take the players' addresses)");
	daemon_start(d);
	ag.loop = d->loop;
	daemon_set_handlers(d, on_stop, on_reload, &ag);
	daemon_raise_nofile(AG_MAX_STREAMS + 256, "streams");
	ev_timer_init(&ag.retry);
	ev_timer_init(&ag.tick);
	strbuf_init(&ag.msg, TUNMSG_JSON_MAX);
	ag.backoff_ms = AG_BACKOFF_MIN;
	ag.streams = htab_new(AG_MAX_STREAMS, sizeof(uint32_t), sizeof(struct astream *));
	ag.tokens = calloc(AG_MAX_TOKENS, sizeof(*ag.tokens));
	ag.udp_fd = -1;
	ag.usess = htab_new(AG_MAX_USESS, sizeof(uint32_t), sizeof(struct usess *));
	ag.held = calloc(AG_MAX_HELD, sizeof(*ag.held));
	strbuf_init(&ag.dasm, TUNMSG_WS_MAX + 8);
	ag.obufs = malloc(AG_BATCH * AG_SLOT);
	ag.ibufs = malloc(AG_BATCH * AG_SLOT);
	if (ag.streams == NULL || ag.tokens == NULL || ag.usess == NULL || ag.obufs == NULL ||
	    ag.held == NULL || ag.ibufs == NULL ||
	    ev_before_sleep_add(ag.loop, udp_before_sleep, &ag) < 0) {
		ret = -ENOMEM;
		goto out;
	}
	ret = load_key(&ag);
	if (ret < 0)
		goto out;
	if (c->transparent) {
		char why[320];

		/* Before anything dials: never a silent fallback. */
		ret = relay_transparent_check(&c->server, why, sizeof(why));
		if (ret < 0) {
			log_err("transparent-unavailable server=%s %s",
				addr_str(&c->server, ca, sizeof(ca)), why);
			goto out;
		}
	}
	if (c->control_on) {
		struct httpd_cfg hc = {.max_body = 4096, .conn_limit = 256, .conn_timeout_s = 30};
		int fd;

		ret = relay_token_load(c->token_file, ag.token_hash);
		if (ret < 0)
			goto out;
		ag.control_bound = c->control;
		fd = httpd_listen(&ag.control_bound);
		if (fd < 0) {
			ret = fd;
			errno = -fd;
			log_warn("control-listen-fail listen=%s",
				 addr_str(&c->control, ca, sizeof(ca)));
			goto out;
		}
		ag.httpd = httpd_new_take(ag.loop, fd, &hc, on_control, &ag);
		if (ag.httpd == NULL) {
			ret = -errno;
			goto out;
		}
	}
	if (d->check) {
		log_bare("config-ok realm=%s relay=%s", c->realm, c->url);
		ret = 0;
		goto out;
	}
	if (ag.httpd != NULL)
		daemon_ready(d, "control=%s", addr_str(&ag.control_bound, ca, sizeof(ca)));
	else
		daemon_ready(d, "relay=%s", c->url);
	ev_timer_start(ag.loop, &ag.tick, 1000, on_tick, &ag);
	dial(&ag);
	ret = ev_loop_run(ag.loop);
	ret = ret < 0 ? ret : 0;
out:
	drop_streams(&ag);
	if (ag.usess != NULL)
		udp_close(&ag);
	htab_free(ag.usess);
	ev_before_sleep_del(ag.loop, udp_before_sleep, &ag);
	free(ag.obufs);
	free(ag.ibufs);
	ws_free(ag.data);
	strbuf_release(&ag.dasm);
	free(ag.held);
	pend_fail_all(&ag, "agent stopping");
	ws_free(ag.ws);
	ev_timer_stop(ag.loop, &ag.retry);
	ev_timer_stop(ag.loop, &ag.tick);
	httpd_free(ag.httpd);
	htab_free(ag.streams);
	free(ag.tokens);
	strbuf_release(&ag.msg);
	sodium_memzero(ag.sk, sizeof(ag.sk));
	daemon_free(d);
	return ret < 0 ? DAEMON_EXIT_FAIL : DAEMON_EXIT_OK;
}
