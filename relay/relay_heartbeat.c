/*
 * Heartbeats on one fronted server's behalf.
 *
 * Every interval: probe the server with "getinfo <challenge>" from a socket
 * of our own (up to 3 attempts of 3 s; one lost packet must not flatline the
 * server) while the worker thread resolves every master again (DNS may
 * change). When both are done, send "heartbeat <tag>" - or the flatline tag
 * if the server never answered - to each master from the public socket, so
 * the master challenges the public address and lists it. The flatline also
 * goes out on a clean shutdown, and when the server is removed. Whether the
 * masters did list it is relay_listing.c's question: this module owns that
 * instance.
 *
 * One heartbeat per address family: a master whose name has both A and
 * AAAA records gets one over IPv4 and one over IPv6, each from the public
 * socket of that family (a dual-stack "[::]" one serves both), when the
 * server listens on both. A master lists a server under the source address
 * of its heartbeat and challenges that address (dpmaster messages.c
 * HandleHeartbeat -> SendGetInfo), so this is what makes it appear in
 * getserversExt's IPv6 answers ("/" + 16 bytes + port) as well as in the
 * IPv4 ones.
 */
#include <errno.h>
#include <netdb.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "info.h"
#include "log.h"
#include "q3.h"
#include "relay.h"
#include "strbuf.h"

#define SHUTDOWN_WAIT_MS (2500)

enum hb_outcome { HB_ALIVE, HB_FLATLINE, HB_RESOLVE_ERROR, HB_SEND_ERROR, HB_NOUTCOMES };

static const char *const outcome_names[HB_NOUTCOMES] = {"heartbeat", "flatline", "resolve_error",
							"send_error"};

/* Families, as indexes. */
enum { F4, F6, NFAM };

struct resolve_job {
	struct relay_heartbeat *hb; /* NULL once the module is gone */
	/* Its done callback ran: whoever holds it frees it (a cycle whose
	 * probe is still out keeps it in hb->job until then). */
	bool delivered;
	bool want[NFAM];
	size_t n;
	struct relay_master masters[RELAY_MAX_MASTERS];
	struct addr out[RELAY_MAX_MASTERS][NFAM];
	bool ok[RELAY_MAX_MASTERS][NFAM];
	int gai_err[RELAY_MAX_MASTERS];
};

struct relay_heartbeat {
	struct relay *r;
	struct relay_server *srv;
	const struct relay_server_cfg *c;
	int fd;
	struct ev_io *io;
	struct ev_timer cycle_timer, probe_timer, shutdown_timer;
	bool in_cycle, probe_done, resolve_done, alive, ever_probed;
	unsigned attempt;
	char challenge[16];
	struct resolve_job *job;

	/* Last good resolution of each master, for the shutdown flatline. */
	struct addr cache[RELAY_MAX_MASTERS][NFAM];
	bool cached[RELAY_MAX_MASTERS][NFAM];
	/* Masters spared the shutdown flatline (a restart keeps them). */
	bool spare[RELAY_MAX_MASTERS];

	uint64_t count[RELAY_MAX_MASTERS][HB_NOUTCOMES];
	/* The last attempt per master (wall clock, s; 0 = none yet) and its
	 * outcome, and the queries seen from its address: /status. */
	long long last_wall[RELAY_MAX_MASTERS];
	enum hb_outcome last[RELAY_MAX_MASTERS];
	uint64_t queries[RELAY_MAX_MASTERS];
	long long last_sent_ms[RELAY_MAX_MASTERS];
	struct log_ratelimit warn_send;

	bool shutting_down;
	void (*shutdown_done)(void *);
	void *shutdown_arg;

	struct relay_listing *listing; /* NULL: --listing-interval 0 */
};

static void start_cycle(struct relay_heartbeat *hb);

static const char *server_name(const struct relay_heartbeat *hb, char *buf, size_t size)
{
	if (hb->c->server_tunnel) {
		snprintf(buf, size, "tunnel:%s", hb->c->server_realm);
		return buf;
	}
	return addr_str(&hb->srv->server, buf, size);
}

const char *relay_server_state_name(enum relay_server_state s)
{
	switch (s) {
	case RELAY_SERVER_UP:
		return "up";
	case RELAY_SERVER_DOWN:
		return "down";
	case RELAY_SERVER_UNPROBED:
		break;
	}
	return "unprobed";
}

/* ---- sending ---- */

static void outcome(struct relay_heartbeat *hb, size_t i, enum hb_outcome o)
{
	hb->count[i][o]++;
	hb->last[i] = o;
	hb->last_wall[i] = (long long)time(NULL);
}

static bool any_fam(const bool have[static NFAM])
{
	return have[F4] || have[F6];
}

/* Sends tag to every master (those marked in skip aside), once per family
 * resolved. */
static void send_all(struct relay_heartbeat *hb, const char *tag, const struct addr addrs[][NFAM],
		     const bool have[][NFAM], const bool *skip)
{
	const struct relay_server_cfg *c = hb->c;
	uint8_t pkt[Q3_OOB_PREFIX_LEN + 16 + RELAY_TAG_MAX];
	char text[16 + RELAY_TAG_MAX], sn[RELAY_NAME_MAX + 16];
	enum hb_outcome good = strcmp(tag, c->heartbeat_tag) == 0 ? HB_ALIVE : HB_FLATLINE;
	int tn = snprintf(text, sizeof(text), "heartbeat %s\n", tag);
	int len = q3_oob_build(pkt, sizeof(pkt), text, (size_t)tn);

	relay_server_logname(hb->srv, sn, sizeof(sn));
	for (size_t i = 0; i < c->nmasters; i++) {
		if (skip != NULL && skip[i])
			continue;
		if (!any_fam(have[i])) {
			outcome(hb, i, HB_RESOLVE_ERROR);
			continue;
		}
		for (int f = 0; f < NFAM; f++) {
			char a[ADDR_STRLEN], ms[RELAY_HOST_MAX + 8];
			unsigned long sup;
			int r;

			if (!have[i][f])
				continue;
			r = relay_proxy_send_public(hb->srv->proxy, &addrs[i][f], pkt, (size_t)len);
			if (r < 0) {
				outcome(hb, i, HB_SEND_ERROR);
				if (log_ratelimit_ok(&hb->warn_send, ev_now(hb->r->loop), 60000,
						     &sup)) {
					errno = -r;
					log_warn("heartbeat-send-fail master=%s addr=%s%s "
						 "suppressed=%lu",
						 relay_master_str(&c->masters[i], ms, sizeof(ms)),
						 addr_str(&addrs[i][f], a, sizeof(a)), sn, sup);
				}
				continue;
			}
			outcome(hb, i, good);
			hb->last_sent_ms[i] = ev_now(hb->r->loop);
			log_debug("heartbeat-sent tag=%s master=%s addr=%s%s", tag,
				  relay_master_str(&c->masters[i], ms, sizeof(ms)),
				  addr_str(&addrs[i][f], a, sizeof(a)), sn);
		}
	}
}

static void finish_cycle(struct relay_heartbeat *hb)
{
	struct resolve_job *job = hb->job;
	const struct relay_server_cfg *c = hb->c;

	if (!hb->probe_done || !hb->resolve_done || hb->shutting_down)
		return;
	hb->job = NULL;
	hb->in_cycle = false;
	for (size_t i = 0; i < c->nmasters; i++) {
		if (any_fam(job->ok[i])) {
			memcpy(hb->cache[i], job->out[i], sizeof(hb->cache[i]));
			memcpy(hb->cached[i], job->ok[i], sizeof(hb->cached[i]));
		} else {
			char ms[RELAY_HOST_MAX + 8];

			log_warnx("master-resolve-fail master=%s error=\"%s\"",
				  relay_master_str(&c->masters[i], ms, sizeof(ms)),
				  gai_strerror(job->gai_err[i]));
		}
	}
	send_all(hb, hb->alive ? c->heartbeat_tag : c->flatline_tag,
		 (const struct addr(*)[NFAM])job->out, (const bool(*)[NFAM])job->ok, NULL);
	relay_listing_heartbeat_sent(hb->listing, hb->alive);
	free(job);
}

/* ---- resolving, on the worker thread ---- */

static void resolve_work(void *arg)
{
	struct resolve_job *job = arg;

	for (size_t i = 0; i < job->n; i++) {
		struct addr all[16];
		int n = addr_resolve_all(job->masters[i].host, job->masters[i].port, all, 16,
					 &job->gai_err[i]);

		job->ok[i][F4] = job->ok[i][F6] = false;
		/* The first address of each family we can send from. */
		for (int k = 0; k < n; k++) {
			int f = addr_family(&all[k]) == AF_INET ? F4 : F6;

			if (job->want[f] && !job->ok[i][f]) {
				job->out[i][f] = all[k];
				job->ok[i][f] = true;
			}
		}
		if (n > 0 && !any_fam(job->ok[i]))
			job->gai_err[i] = EAI_ADDRFAMILY;
	}
}

static void send_shutdown_flatline(struct relay_heartbeat *hb);

static void resolve_done(void *arg, bool cancelled)
{
	struct resolve_job *job = arg;
	struct relay_heartbeat *hb = job->hb;

	job->delivered = true;
	if (hb == NULL || cancelled) {
		if (hb != NULL)
			hb->job = NULL;
		free(job);
		return;
	}
	hb->resolve_done = true;
	if (hb->shutting_down) {
		for (size_t i = 0; i < job->n; i++) {
			if (any_fam(job->ok[i])) {
				memcpy(hb->cache[i], job->out[i], sizeof(hb->cache[i]));
				memcpy(hb->cached[i], job->ok[i], sizeof(hb->cached[i]));
			}
		}
		hb->job = NULL;
		free(job);
		send_shutdown_flatline(hb);
		return;
	}
	finish_cycle(hb);
}

static int submit_resolve(struct relay_heartbeat *hb)
{
	struct resolve_job *job = calloc(1, sizeof(*job));
	int r;

	if (job == NULL)
		return -ENOMEM;
	job->hb = hb;
	job->want[F4] = relay_proxy_can_send(hb->srv->proxy, AF_INET);
	job->want[F6] = relay_proxy_can_send(hb->srv->proxy, AF_INET6);
	job->n = hb->c->nmasters;
	memcpy(job->masters, hb->c->masters, sizeof(job->masters));
	r = ev_work_submit(hb->r->loop, resolve_work, resolve_done, job);
	if (r < 0) {
		free(job);
		return r;
	}
	hb->job = job;
	return 0;
}

/* ---- probing the server ---- */

static void probe_finish(struct relay_heartbeat *hb, bool alive)
{
	char a[ADDR_STRLEN];

	char sn[RELAY_NAME_MAX + 16];

	ev_timer_stop(hb->r->loop, &hb->probe_timer);
	relay_server_logname(hb->srv, sn, sizeof(sn));
	if (hb->ever_probed && alive != hb->alive) {
		if (alive)
			log_info("server-up server=%s%s", server_name(hb, a, sizeof(a)), sn);
		else
			log_warnx("server-down server=%s attempts=%u%s",
				  server_name(hb, a, sizeof(a)), hb->attempt, sn);
	} else if (!hb->ever_probed && !alive) {
		log_warnx("server-down server=%s attempts=%u%s", server_name(hb, a, sizeof(a)),
			  hb->attempt, sn);
	}
	hb->alive = alive;
	hb->ever_probed = true;
	hb->probe_done = true;
	finish_cycle(hb);
}

static void probe_send(struct relay_heartbeat *hb);

static void on_probe_timeout(struct ev_timer *t, void *arg)
{
	struct relay_heartbeat *hb = arg;

	(void)t;
	if (hb->attempt >= RELAY_PROBE_ATTEMPTS) {
		probe_finish(hb, false);
		return;
	}
	probe_send(hb);
}

static void probe_send(struct relay_heartbeat *hb)
{
	uint8_t pkt[64];
	char text[48];
	int n = snprintf(text, sizeof(text), "getinfo %s\n", hb->challenge);
	int len = q3_oob_build(pkt, sizeof(pkt), text, (size_t)n);

	hb->attempt++;
	/* A refused send (server port closed, no tunnel) counts as a lost
	 * attempt. */
	if (hb->c->server_tunnel)
		(void)!relay_tunnel_dgram(hb->r->tunnel, hb->srv, 0, pkt, (size_t)len);
	else
		(void)!send(hb->fd, pkt, (size_t)len, 0);
	ev_timer_start(hb->r->loop, &hb->probe_timer, hb->c->probe_timeout_ms, on_probe_timeout,
		       hb);
}

void relay_heartbeat_probe_answer(struct relay_heartbeat *hb, const uint8_t *buf, size_t n)
{
	struct q3_args args;
	const char *val;
	size_t vlen, off;

	if (hb == NULL || hb->probe_done || n > RELAY_MAX_PACKET ||
	    q3_oob_tokenize(buf, n, &args) < 1 || !q3_cmd_eq(q3_argv(&args, 0), "infoResponse"))
		return;
	off = Q3_OOB_PREFIX_LEN + args.consumed;
	/* Only the answer to this cycle's challenge proves it alive. */
	if (info_get((const char *)buf + off, n - off, "challenge", &val, &vlen) == 0 &&
	    vlen == strlen(hb->challenge) && memcmp(val, hb->challenge, vlen) == 0) {
		relay_listing_note_info(hb->listing, buf, n);
		probe_finish(hb, true);
	}
}

static void on_probe_reply(struct ev_io *io, uint32_t events, void *arg)
{
	struct relay_heartbeat *hb = arg;
	uint8_t buf[RELAY_MAX_PACKET + 1];

	(void)events;
	for (int i = 0; i < 16; i++) {
		ssize_t n = recv(ev_io_fd(io), buf, sizeof(buf), MSG_DONTWAIT);

		if (n < 0)
			return;
		relay_heartbeat_probe_answer(hb, buf, (size_t)n);
	}
}

/* ---- the cycle ---- */

static void on_cycle(struct ev_timer *t, void *arg)
{
	struct relay_heartbeat *hb = arg;

	(void)t;
	start_cycle(hb);
}

static void start_cycle(struct relay_heartbeat *hb)
{
	uint8_t rnd[6];

	ev_timer_start(hb->r->loop, &hb->cycle_timer, hb->c->heartbeat_interval_ms, on_cycle, hb);
	if (hb->in_cycle || hb->c->nmasters == 0)
		return;
	hb->in_cycle = true;
	hb->probe_done = hb->resolve_done = false;
	hb->attempt = 0;
	randombytes_buf(rnd, sizeof(rnd));
	sodium_bin2hex(hb->challenge, sizeof(hb->challenge), rnd, sizeof(rnd));
	if (submit_resolve(hb) < 0) {
		log_warnx("master-resolve-fail error=\"cannot start the resolver\"");
		hb->in_cycle = false;
		return;
	}
	probe_send(hb);
}

/* ---- shutdown ---- */

static void shutdown_complete(struct relay_heartbeat *hb)
{
	void (*done)(void *) = hb->shutdown_done;

	ev_timer_stop(hb->r->loop, &hb->shutdown_timer);
	hb->shutdown_done = NULL;
	if (done != NULL)
		done(hb->shutdown_arg);
}

static void send_shutdown_flatline(struct relay_heartbeat *hb)
{
	if (hb->shutdown_done == NULL)
		return;
	send_all(hb, hb->c->flatline_tag, (const struct addr(*)[NFAM])hb->cache,
		 (const bool(*)[NFAM])hb->cached, hb->spare);
	shutdown_complete(hb);
}

static void on_shutdown_timeout(struct ev_timer *t, void *arg)
{
	(void)t;
	/* DNS did not answer in time: use what we resolved before. */
	send_shutdown_flatline(arg);
}

/* Same sockets, same master: the next incarnation's heartbeat keeps the
 * listing, a flatline in between would only drop it. */
static void spare_kept(struct relay_heartbeat *hb, const struct relay_server_cfg *next)
{
	const struct relay_server_cfg *c = hb->c;

	if (next == NULL || next->nlisten != c->nlisten)
		return;
	for (size_t i = 0; i < c->nlisten; i++) {
		if (!addr_equal(&next->listen[i], &c->listen[i]))
			return;
	}
	for (size_t i = 0; i < c->nmasters; i++) {
		for (size_t k = 0; k < next->nmasters; k++) {
			if (strcmp(c->masters[i].host, next->masters[k].host) == 0 &&
			    c->masters[i].port == next->masters[k].port)
				hb->spare[i] = true;
		}
	}
}

void relay_heartbeat_shutdown(struct relay_heartbeat *hb, const struct relay_server_cfg *next,
			      void (*done)(void *), void *arg)
{
	bool all = true;

	hb->shutting_down = true;
	hb->shutdown_done = done;
	hb->shutdown_arg = arg;
	/* No more listing checks (nor early heartbeats) on the way out. */
	relay_listing_free(hb->listing);
	hb->listing = NULL;
	spare_kept(hb, next);
	ev_timer_stop(hb->r->loop, &hb->cycle_timer);
	ev_timer_stop(hb->r->loop, &hb->probe_timer);
	/* A cycle resolved but still probing: its addresses are the freshest. */
	if (hb->job != NULL && hb->job->delivered) {
		for (size_t i = 0; i < hb->job->n; i++) {
			if (any_fam(hb->job->ok[i])) {
				memcpy(hb->cache[i], hb->job->out[i], sizeof(hb->cache[i]));
				memcpy(hb->cached[i], hb->job->ok[i], sizeof(hb->cached[i]));
			}
		}
		free(hb->job);
		hb->job = NULL;
	}
	for (size_t i = 0; i < hb->c->nmasters; i++)
		all = all && (hb->spare[i] || any_fam(hb->cached[i]));
	if (all) {
		send_shutdown_flatline(hb);
		return;
	}
	ev_timer_start(hb->r->loop, &hb->shutdown_timer, SHUTDOWN_WAIT_MS, on_shutdown_timeout, hb);
	/* A cycle's resolution in flight will do; otherwise start one. */
	if (hb->job == NULL && submit_resolve(hb) < 0)
		send_shutdown_flatline(hb);
}

void relay_heartbeat_metrics(const struct relay *r, struct strbuf *out)
{
	bool any = false;

	for (size_t k = 0; k < r->nservers; k++)
		any = any || r->servers[k]->hb != NULL;
	if (!any)
		return;
	strbuf_printf(out, "# HELP rally_relay_heartbeats_total Heartbeats by master and outcome.\n"
			   "# TYPE rally_relay_heartbeats_total counter\n");
	for (size_t k = 0; k < r->nservers; k++) {
		const struct relay_heartbeat *hb = r->servers[k]->hb;

		for (size_t i = 0; hb != NULL && i < hb->c->nmasters; i++) {
			for (int o = 0; o < HB_NOUTCOMES; o++) {
				char more[RELAY_HOST_MAX + 64], lb[RELAY_HOST_MAX + 128];
				char ms[RELAY_HOST_MAX + 8];

				snprintf(more, sizeof(more), "master=\"%s\",outcome=\"%s\"",
					 relay_master_str(&hb->c->masters[i], ms, sizeof(ms)),
					 outcome_names[o]);
				strbuf_printf(out, "rally_relay_heartbeats_total%s %llu\n",
					      relay_server_labels(hb->srv, more, lb, sizeof(lb)),
					      (unsigned long long)hb->count[i][o]);
			}
		}
	}
	strbuf_printf(out,
		      "# HELP rally_relay_master_queries_total getinfo/getstatus received from "
		      "a master's address (the master checking the server it lists).\n"
		      "# TYPE rally_relay_master_queries_total counter\n");
	for (size_t k = 0; k < r->nservers; k++) {
		const struct relay_heartbeat *hb = r->servers[k]->hb;

		for (size_t i = 0; hb != NULL && i < hb->c->nmasters; i++) {
			char more[RELAY_HOST_MAX + 32], lb[RELAY_HOST_MAX + 96];
			char ms[RELAY_HOST_MAX + 8];

			snprintf(more, sizeof(more), "master=\"%s\"",
				 relay_master_str(&hb->c->masters[i], ms, sizeof(ms)));
			strbuf_printf(out, "rally_relay_master_queries_total%s %llu\n",
				      relay_server_labels(hb->srv, more, lb, sizeof(lb)),
				      (unsigned long long)hb->queries[i]);
		}
	}
	strbuf_printf(
		out,
		"# HELP rally_relay_server_up 1 if the last probe of the server was answered.\n"
		"# TYPE rally_relay_server_up gauge\n");
	for (size_t k = 0; k < r->nservers; k++) {
		const struct relay_heartbeat *hb = r->servers[k]->hb;
		char lb[RELAY_NAME_MAX + 32];

		if (hb != NULL)
			strbuf_printf(out, "rally_relay_server_up%s %d\n",
				      relay_server_labels(hb->srv, NULL, lb, sizeof(lb)),
				      hb->alive ? 1 : 0);
	}
	relay_listing_metrics(r, out);
}

enum relay_server_state relay_heartbeat_state(const struct relay_heartbeat *hb)
{
	if (hb == NULL || !hb->ever_probed)
		return RELAY_SERVER_UNPROBED;
	return hb->alive ? RELAY_SERVER_UP : RELAY_SERVER_DOWN;
}

void relay_heartbeat_master_info(const struct relay_heartbeat *hb, size_t i,
				 struct relay_master_info *out)
{
	memset(out, 0, sizeof(*out));
	if (hb == NULL || i >= hb->c->nmasters)
		return;
	out->have4 = hb->cached[i][F4];
	out->have6 = hb->cached[i][F6];
	out->addr4 = hb->cache[i][F4];
	out->addr6 = hb->cache[i][F6];
	out->heartbeats = hb->count[i][HB_ALIVE];
	out->flatlines = hb->count[i][HB_FLATLINE];
	out->resolve_errors = hb->count[i][HB_RESOLVE_ERROR];
	out->send_errors = hb->count[i][HB_SEND_ERROR];
	out->last_sent_ms = hb->last_sent_ms[i];
	out->master = &hb->c->masters[i];
	out->last_attempt = hb->last_wall[i];
	out->last_outcome = hb->last_wall[i] != 0 ? outcome_names[hb->last[i]] : NULL;
	out->queries = hb->queries[i];
}

/* The index of the master last resolved to ip, or -1. */
static int master_index(const struct relay_heartbeat *hb, const struct addr_ip *ip)
{
	for (size_t i = 0; i < hb->c->nmasters; i++) {
		for (int f = 0; f < NFAM; f++) {
			struct addr_ip m;

			if (!hb->cached[i][f])
				continue;
			addr_to_ip(&hb->cache[i][f], &m);
			if (memcmp(m.b, ip->b, sizeof(m.b)) == 0)
				return (int)i;
		}
	}
	return -1;
}

bool relay_heartbeat_is_master(const struct relay_heartbeat *hb, const struct addr_ip *ip)
{
	return master_index(hb, ip) >= 0;
}

void relay_heartbeat_note_query(struct relay_heartbeat *hb, const struct addr_ip *ip)
{
	/* O(masters x families) per query, at most 32 address compares, before
	 * the query cache's budgets: under a getstatus flood that is the
	 * relay's dearest per-packet step after the cache's own lookups
	 * (tools/bench/qcache's attack-mode figure includes it). */
	int i = master_index(hb, ip);

	if (i >= 0)
		hb->queries[i]++;
}

bool relay_heartbeat_master_addr(const struct relay_heartbeat *hb, size_t i, int family,
				 struct addr *out)
{
	int f = family == AF_INET ? F4 : F6;

	if (i >= hb->c->nmasters || !hb->cached[i][f])
		return false;
	*out = hb->cache[i][f];
	return true;
}

void relay_heartbeat_kick(struct relay_heartbeat *hb)
{
	if (hb->shutting_down)
		return;
	log_debug("heartbeat-early reason=not-listed");
	start_cycle(hb);
}

struct relay_listing *relay_heartbeat_listing(const struct relay_heartbeat *hb)
{
	return hb != NULL ? hb->listing : NULL;
}

bool relay_heartbeat_server_up(const struct relay_heartbeat *hb, bool *up)
{
	*up = hb->alive;
	return hb->ever_probed;
}

int relay_heartbeat_new(struct relay_server *srv)
{
	struct relay *r = srv->r;
	struct relay_heartbeat *hb = calloc(1, sizeof(*hb));
	int e;

	if (hb == NULL)
		return -ENOMEM;
	hb->r = r;
	hb->srv = srv;
	hb->c = &srv->cfg;
	ev_timer_init(&hb->cycle_timer);
	ev_timer_init(&hb->probe_timer);
	ev_timer_init(&hb->shutdown_timer);
	hb->fd = -1;
	if (!srv->cfg.server_tunnel) {
		/* Through the tunnel the probe goes as session 0 instead. */
		hb->fd = addr_udp_connect(&srv->server, NULL);
		if (hb->fd < 0) {
			errno = -hb->fd;
			goto fail;
		}
		hb->io = ev_io_add(r->loop, hb->fd, EPOLLIN, on_probe_reply, hb);
		if (hb->io == NULL)
			goto fail;
	}
	if (srv->cfg.listing_interval_ms > 0) {
		hb->listing = relay_listing_new(srv, hb);
		if (hb->listing == NULL)
			goto fail;
	}
	srv->hb = hb;
	/* The first cycle runs at once, so the server is listed quickly. */
	start_cycle(hb);
	return 0;
fail:
	e = errno;
	ev_io_del(hb->io, false);
	if (hb->fd >= 0)
		close(hb->fd);
	free(hb);
	return -e;
}

void relay_heartbeat_free(struct relay_heartbeat *hb)
{
	if (hb == NULL)
		return;
	ev_timer_stop(hb->r->loop, &hb->cycle_timer);
	ev_timer_stop(hb->r->loop, &hb->probe_timer);
	ev_timer_stop(hb->r->loop, &hb->shutdown_timer);
	if (hb->job != NULL && hb->job->delivered)
		free(hb->job);
	else if (hb->job != NULL)
		hb->job->hb = NULL;
	relay_listing_free(hb->listing);
	ev_io_del(hb->io, true);
	free(hb);
}
