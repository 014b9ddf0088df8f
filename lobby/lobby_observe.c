/*
 * Who we are on the network: the lobby's profile (netpunch observe.py).
 *
 * STUN Binding requests go from the lobby's own socket to every configured
 * server (names resolved on the worker thread), so the mapping they report
 * is the one peers will reach; a host also asks the router for UPnP
 * mappings of its UDP and TCP port (on the worker thread). Then:
 *   - the public candidate is the UPnP mapping when there is one, else the
 *     STUN mapping;
 *   - symmetric: two servers saw two different mappings;
 *   - open: the mapping is our own address (no NAT);
 *   - cgnat: the mapping is in 100.64.0.0/10, or the router's external
 *     address is not the one STUN saw, or the router is up but has no
 *     external address to give (another NAT beyond the router).
 */
#include <errno.h>
#include <netdb.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lobby.h"
#include "log.h"
#include "stun.h"
#include "upnp.h"

#define STUN_TRIES     (3)
#define STUN_RETRY_MS  (500)
#define OBSERVE_CAP_MS (6000)

struct stun_slot {
	struct addr server;
	bool resolved, answered;
	uint8_t txid[STUN_TXID_LEN];
	struct addr mapped;
	int tries;
};

struct resolve_job {
	struct lobby_observe *o; /* NULL once the module is gone */
	size_t n;
	struct lobby_stun_server in[LOBBY_MAX_STUN];
	struct addr out[LOBBY_MAX_STUN];
	bool ok[LOBBY_MAX_STUN];
};

struct lobby_observe {
	struct lobby *l;
	lobby_observe_cb *cb;
	void *arg;
	struct stun_slot stun[LOBBY_MAX_STUN];
	size_t nstun;
	bool resolving;
	struct resolve_job *job;
	struct upnp *upnp;
	bool upnp_pending, upnp_done;
	struct upnp_result upnp_res;
	struct ev_timer retry, cap;
	bool done;
	struct joincode profile;
	bool has_public;
	struct addr public_addr;
};

static bool in_cgnat_range(const struct addr *a)
{
	struct addr_ip ip;

	addr_to_ip(a, &ip);
	/* 100.64.0.0/10 (RFC 6598), v4-mapped. */
	return ip.b[10] == 0xff && ip.b[12] == 100 && (ip.b[13] & 0xc0) == 64;
}

/* Our LAN address: --lan-ip, else the source address the kernel picks
 * toward the first STUN server (a connect() sends nothing). */
static bool lan_address(struct lobby_observe *o, struct addr *out)
{
	struct lobby *l = o->l;

	if (l->cfg.lan_set) {
		*out = l->cfg.lan;
		if (!l->cfg.lan_port_set)
			addr_set_port(out, lobby_net_port(l->net));
		return true;
	}
	for (size_t i = 0; i < o->nstun; i++) {
		int fd;

		if (!o->stun[i].resolved)
			continue;
		fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return false;
		if (connect(fd, (const struct sockaddr *)&o->stun[i].server.ss,
			    o->stun[i].server.len) == 0) {
			out->len = sizeof(out->ss);
			if (getsockname(fd, (struct sockaddr *)&out->ss, &out->len) == 0) {
				close(fd);
				addr_set_port(out, lobby_net_port(l->net));
				return true;
			}
		}
		close(fd);
	}
	return false;
}

static void finish(struct lobby_observe *o)
{
	struct lobby *l = o->l;
	struct joincode *p = &o->profile;
	struct addr lan, seen[LOBBY_MAX_STUN];
	size_t nseen = 0;
	char a[ADDR_STRLEN], b[ADDR_STRLEN];

	if (o->done)
		return;
	o->done = true;
	ev_timer_stop(l->loop, &o->retry);
	ev_timer_stop(l->loop, &o->cap);
	memset(p, 0, sizeof(*p));
	for (size_t i = 0; i < o->nstun; i++) {
		if (o->stun[i].answered)
			seen[nseen++] = o->stun[i].mapped;
	}
	if (lan_address(o, &lan)) {
		p->has_lan = true;
		p->lan = lan;
	}
	if (nseen > 0) {
		o->has_public = true;
		o->public_addr = seen[0];
		for (size_t i = 1; i < nseen; i++) {
			if (!addr_equal(&seen[i], &seen[0]))
				p->symmetric = true;
		}
		if (p->has_lan && addr_equal(&seen[0], &lan))
			p->open = true;
		if (in_cgnat_range(&seen[0]))
			p->cgnat = true;
	}
	if (o->upnp_done && o->upnp_res.udp_mapped && o->upnp_res.external_ip[0] != '\0') {
		struct addr ext;

		if (addr_parse_ip(&ext, o->upnp_res.external_ip) == 0 && addr_is_v4(&ext)) {
			addr_set_port(&ext, lobby_net_port(l->net));
			/* A router whose own WAN address is not what STUN saw sits
			 * behind another NAT. */
			if (o->has_public && !addr_same_ip(&ext, &o->public_addr))
				p->cgnat = true;
			if (!p->cgnat) {
				o->has_public = true;
				o->public_addr = ext;
				p->open = true;
			}
		}
	}
	/* A router that is up but has no external address to give (miniupnpd
	 * refuses a private or reserved WAN address) while STUN sees us on a
	 * public one: another NAT stands between it and the internet. */
	if (o->upnp_done && o->upnp_res.igd && o->has_public && !o->upnp_res.udp_mapped &&
	    o->upnp_res.external_ip[0] == '\0' &&
	    (o->upnp_res.igd_status == 1 || o->upnp_res.igd_status == 2))
		p->cgnat = true;
	if (o->has_public && addr_is_v4(&o->public_addr)) {
		p->has_public = true;
		p->pub = o->public_addr;
	}
	log_info("observed lan=%s public=%s stun=%zu/%zu open=%d symmetric=%d cgnat=%d upnp=%s",
		 p->has_lan ? addr_str(&p->lan, a, sizeof(a)) : "-",
		 p->has_public ? addr_str(&p->pub, b, sizeof(b)) : "-", nseen, o->nstun, p->open,
		 p->symmetric, p->cgnat,
		 !o->upnp_pending         ? "off"
		 : o->upnp_res.udp_mapped ? "mapped"
					  : "none");
	if (o->cb != NULL)
		o->cb(l, o->arg);
}

static bool all_answered(const struct lobby_observe *o)
{
	for (size_t i = 0; i < o->nstun; i++) {
		if (o->stun[i].resolved && !o->stun[i].answered && o->stun[i].tries < STUN_TRIES)
			return false;
	}
	return !o->resolving;
}

static void maybe_finish(struct lobby_observe *o)
{
	if (all_answered(o) && (!o->upnp_pending || o->upnp_done))
		finish(o);
}

static void send_requests(struct lobby_observe *o)
{
	uint8_t req[STUN_HDR];

	for (size_t i = 0; i < o->nstun; i++) {
		struct stun_slot *s = &o->stun[i];

		if (!s->resolved || s->answered || s->tries >= STUN_TRIES)
			continue;
		stun_build_binding_request(req, sizeof(req), s->txid);
		lobby_net_send_raw(o->l->net, &s->server, req, sizeof(req));
		s->tries++;
	}
}

static void on_retry(struct ev_timer *t, void *arg)
{
	struct lobby_observe *o = arg;

	send_requests(o);
	if (all_answered(o)) {
		maybe_finish(o);
		return;
	}
	ev_timer_start(o->l->loop, t, STUN_RETRY_MS, on_retry, o);
}

static void on_cap(struct ev_timer *t, void *arg)
{
	(void)t;
	/* UPnP or a STUN server that never answers must not hold us. */
	finish(arg);
}

static void on_stun(struct lobby *l, const struct addr *from, const uint8_t *buf, size_t len)
{
	struct lobby_observe *o = l->obs;

	(void)from;
	if (o == NULL)
		return;
	for (size_t i = 0; i < o->nstun; i++) {
		struct stun_slot *s = &o->stun[i];
		struct addr mapped;

		if (s->answered || !s->resolved)
			continue;
		if (stun_parse_binding_response(buf, len, s->txid, &mapped) == 0) {
			s->answered = true;
			s->mapped = mapped;
			if (!o->done)
				maybe_finish(o);
			return;
		}
	}
}

static void resolve_work(void *arg)
{
	struct resolve_job *job = arg;

	for (size_t i = 0; i < job->n; i++) {
		struct addr all[8];
		int gai, n = addr_resolve(job->in[i].host, job->in[i].port, all, 8, &gai);

		job->ok[i] = false;
		for (int k = 0; k < n; k++) {
			if (addr_is_v4(&all[k])) {
				job->out[i] = all[k];
				job->ok[i] = true;
				break;
			}
		}
	}
}

static void resolve_done(void *arg, bool cancelled)
{
	struct resolve_job *job = arg;
	struct lobby_observe *o = job->o;

	if (o == NULL || cancelled) {
		if (o != NULL)
			o->job = NULL;
		free(job);
		return;
	}
	o->job = NULL;
	o->resolving = false;
	for (size_t i = 0; i < job->n; i++) {
		if (!job->ok[i]) {
			log_warnx("stun-resolve-fail server=%s:%u", job->in[i].host,
				  job->in[i].port);
			continue;
		}
		o->stun[i].server = job->out[i];
		o->stun[i].resolved = true;
		randombytes_buf(o->stun[i].txid, STUN_TXID_LEN);
	}
	free(job);
	send_requests(o);
	if (all_answered(o))
		maybe_finish(o);
	else
		ev_timer_start(o->l->loop, &o->retry, STUN_RETRY_MS, on_retry, o);
}

static void on_upnp(void *arg, const struct upnp_result *res)
{
	struct lobby_observe *o = arg;

	o->upnp_res = *res;
	o->upnp_done = true;
	log_info("upnp igd=%d status=%d udp=%s tcp=%s external=%s error=\"%s\"", res->igd,
		 res->igd_status, res->udp_mapped ? "mapped" : "no",
		 res->tcp_mapped ? "mapped" : "no", res->external_ip[0] ? res->external_ip : "-",
		 res->error);
	if (!o->done)
		maybe_finish(o);
}

int lobby_observe_start(struct lobby *l, bool upnp, lobby_observe_cb *cb, void *arg)
{
	struct lobby_observe *o = calloc(1, sizeof(*o));
	int r;

	if (o == NULL)
		return -ENOMEM;
	o->l = l;
	o->cb = cb;
	o->arg = arg;
	ev_timer_init(&o->retry);
	ev_timer_init(&o->cap);
	l->obs = o;
	lobby_net_set_stun_cb(l->net, on_stun);
	if (!l->cfg.stun_off && l->cfg.nstun > 0) {
		struct resolve_job *job = calloc(1, sizeof(*job));

		if (job == NULL)
			return -ENOMEM;
		job->o = o;
		job->n = l->cfg.nstun;
		memcpy(job->in, l->cfg.stun, sizeof(job->in));
		o->nstun = l->cfg.nstun;
		o->resolving = true;
		r = ev_work_submit(l->loop, resolve_work, resolve_done, job);
		if (r < 0) {
			free(job);
			o->resolving = false;
		} else {
			o->job = job;
		}
	}
	if (upnp && !l->cfg.upnp_off) {
		o->upnp = upnp_new(l->loop);
		if (o->upnp != NULL &&
		    upnp_map(o->upnp, lobby_net_port(l->net), lobby_net_port(l->net), "rally-lobby",
			     on_upnp, o) == 0)
			o->upnp_pending = true;
	}
	ev_timer_start(l->loop, &o->cap, OBSERVE_CAP_MS, on_cap, o);
	/* Nothing to wait for: finish from the loop, not from here. */
	if (!o->resolving && !o->upnp_pending)
		ev_timer_start(l->loop, &o->retry, 0, on_retry, o);
	return 0;
}

int lobby_observe_open(struct lobby *l, uint16_t port, bool upnp, const char *state,
		       lobby_observe_cb *cb, void *arg)
{
	int r = lobby_net_new(l, port);

	if (r < 0) {
		errno = -r;
		log_warn("bind-fail port=%u role=%s", port, l->role != NULL ? l->role->name : "-");
		return r;
	}
	lobby_ipc_status(l, state, "observing NAT");
	return lobby_observe_start(l, upnp, cb, arg);
}

const struct joincode *lobby_observe_profile(const struct lobby *l)
{
	return l->obs != NULL && l->obs->done ? &l->obs->profile : NULL;
}

const struct addr *lobby_observe_public(const struct lobby *l)
{
	return l->obs != NULL && l->obs->done && l->obs->has_public ? &l->obs->public_addr : NULL;
}

const char *lobby_observe_mapping(const struct lobby *l)
{
	const struct lobby_observe *o = l->obs;

	return o != NULL && o->upnp_done && o->upnp_res.udp_mapped ? "upnp" : NULL;
}

const char *lobby_observe_mapping_error(const struct lobby *l)
{
	const struct lobby_observe *o = l->obs;

	if (o == NULL || lobby_observe_mapping(l) != NULL)
		return NULL;
	if (!o->upnp_pending)
		return "not asked (a joiner, or --upnp off)";
	if (!o->upnp_done)
		return "the router did not answer in time";
	if (!o->upnp_res.igd)
		return "no UPnP router answered";
	return o->upnp_res.error[0] != '\0' ? o->upnp_res.error : "the router refused the mapping";
}

void lobby_observe_print(const struct lobby *l)
{
	const struct lobby_observe *o = l->obs;
	const struct joincode *p = &o->profile;
	char a[ADDR_STRLEN];

	printf("lan=%s\n", p->has_lan ? addr_str(&p->lan, a, sizeof(a)) : "");
	printf("public=%s\n", p->has_public ? addr_str(&p->pub, a, sizeof(a)) : "");
	for (size_t i = 0; i < o->nstun; i++) {
		if (o->stun[i].resolved)
			printf("stun %s -> %s\n", addr_str(&o->stun[i].server, a, sizeof(a)),
			       o->stun[i].answered ? addr_str(&o->stun[i].mapped, a, sizeof(a))
						   : "no answer");
	}
	printf("nat=%s\n", p->open         ? "open"
			   : p->cgnat      ? "cgnat"
			   : p->symmetric  ? "symmetric"
			   : o->has_public ? "cone"
					   : "unknown");
	printf("upnp=%s%s%s\n",
	       !o->upnp_pending         ? "off"
	       : o->upnp_res.udp_mapped ? "mapped"
					: "none",
	       o->upnp_res.external_ip[0] ? " external=" : "", o->upnp_res.external_ip);
	fflush(stdout);
}

void lobby_observe_unmap(struct lobby *l, long timeout_ms)
{
	struct lobby_observe *o = l->obs;

	if (o == NULL || o->upnp == NULL || !o->upnp_res.udp_mapped)
		return;
	if (upnp_unmap_sync(o->upnp, timeout_ms) == 0)
		log_info("upnp-unmapped port=%u", lobby_net_port(l->net));
	else
		log_warnx("upnp-unmap-fail port=%u", lobby_net_port(l->net));
}

void lobby_observe_free(struct lobby_observe *o)
{
	if (o == NULL)
		return;
	ev_timer_stop(o->l->loop, &o->retry);
	ev_timer_stop(o->l->loop, &o->cap);
	if (o->job != NULL)
		o->job->o = NULL;
	upnp_free(o->upnp);
	free(o);
}
