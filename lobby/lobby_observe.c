/*
 * Who we are on the network: the lobby's profile (netpunch observe.py).
 *
 * STUN Binding requests go from the lobby's own socket to every configured
 * server (names resolved on the worker thread), so the mapping they report
 * is the one peers will reach; a host also asks the router for UPnP
 * mappings of its UDP and TCP port and, when UPnP finds no router or the
 * router does not map, for NAT-PMP ones (both on the worker thread, one
 * after the other: the worker runs its jobs in order anyway). Then:
 *   - the public candidate is the router's mapping when there is one (its
 *     external address, with the port NAT-PMP granted), else the STUN
 *     mapping;
 *   - symmetric: two servers saw two different mappings;
 *   - open: the mapping is our own address (no NAT);
 *   - cgnat: the mapping is in 100.64.0.0/10, or the router's external
 *     address is not the one STUN saw, or the router is up but has no
 *     external address to give (another NAT beyond the router);
 *   - v6 (ours; netpunch advertises none): a global IPv6 address of this
 *     machine with the lobby's IPv6 socket's port. No NAT stands in front
 *     of it, so no STUN: the address is the one the kernel sends from
 *     toward the internet, when it is global and usable.
 */
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/if_addr.h>
#include <net/if.h>
#include <netdb.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lobby.h"
#include "log.h"
#include "natpmp.h"
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
	bool map;              /* a host: the router is asked for mappings */
	struct natpmp *natpmp; /* NULL until tried */
	bool natpmp_pending, natpmp_done;
	struct natpmp_result natpmp_res;
	char why[408]; /* lobby_observe_mapping_error's answer */
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

/* ---- the router's mappings: UPnP first, NAT-PMP when UPnP does not map ---- */

static void maybe_finish(struct lobby_observe *o);

/* The router's mapping of our UDP port, UPnP's or else NAT-PMP's: its
 * external address and port (NAT-PMP's may differ from ours). */
static bool router_mapping(const struct lobby_observe *o, struct addr *ext)
{
	const char *ip;
	uint16_t port;

	if (o->upnp_done && o->upnp_res.udp_mapped && o->upnp_res.external_ip[0] != '\0') {
		ip = o->upnp_res.external_ip;
		port = lobby_net_port(o->l->net);
	} else if (o->natpmp_done && o->natpmp_res.udp_mapped &&
		   o->natpmp_res.external_ip[0] != '\0') {
		ip = o->natpmp_res.external_ip;
		port = o->natpmp_res.udp_external;
	} else {
		return false;
	}
	if (addr_parse_ip(ext, ip) < 0 || !addr_is_v4(ext))
		return false;
	addr_set_port(ext, port);
	return true;
}

/* A router that answered but has no external address to give. */
static bool router_without_address(const struct lobby_observe *o)
{
	if (o->upnp_done && o->upnp_res.igd && !o->upnp_res.udp_mapped &&
	    o->upnp_res.external_ip[0] == '\0' &&
	    (o->upnp_res.igd_status == 1 || o->upnp_res.igd_status == 2))
		return true;
	return o->natpmp_done && o->natpmp_res.answered && !o->natpmp_res.udp_mapped &&
	       o->natpmp_res.external_ip[0] == '\0';
}

/* For the observed line: off, unused (UPnP mapped), mapped or none. */
static const char *natpmp_state(const struct lobby_observe *o)
{
	if (o->natpmp_pending)
		return o->natpmp_done && o->natpmp_res.udp_mapped ? "mapped" : "none";
	return !o->map || o->l->cfg.natpmp_off ? "off" : "unused";
}

static void on_natpmp(void *arg, const struct natpmp_result *res)
{
	struct lobby_observe *o = arg;

	if (res->renewal) {
		if (!res->udp_mapped)
			log_warnx("natpmp-renew-fail error=\"%s\"", res->error);
		else if (res->udp_external != o->natpmp_res.udp_external)
			log_warnx("natpmp-renewed port=%u was=%u lifetime=%u", res->udp_external,
				  o->natpmp_res.udp_external, res->lifetime_s);
		else
			log_debug("natpmp-renewed port=%u lifetime=%u", res->udp_external,
				  res->lifetime_s);
		return;
	}
	o->natpmp_res = *res;
	o->natpmp_done = true;
	log_info("natpmp gateway=%s udp=%s tcp=%s external=%s port=%u lifetime=%u error=\"%s\"",
		 res->gateway[0] ? res->gateway : "-", res->udp_mapped ? "mapped" : "no",
		 res->tcp_mapped ? "mapped" : "no", res->external_ip[0] ? res->external_ip : "-",
		 res->udp_external, res->lifetime_s, res->error);
	if (!o->done)
		maybe_finish(o);
}

/* NAT-PMP, once, unless --natpmp off: the same ports UPnP asked for. */
static void start_natpmp(struct lobby_observe *o)
{
	struct lobby *l = o->l;
	uint16_t port = lobby_net_port(l->net);

	if (!o->map || l->cfg.natpmp_off || o->natpmp != NULL)
		return;
	o->natpmp = natpmp_new(l->loop);
	if (o->natpmp != NULL &&
	    natpmp_map(o->natpmp, port, port, (uint32_t)l->cfg.natpmp_lifetime, on_natpmp, o) == 0)
		o->natpmp_pending = true;
}

static void unmap_natpmp(struct lobby_observe *o, long timeout_ms)
{
	int r;

	if (o->natpmp == NULL)
		return;
	r = natpmp_unmap_sync(o->natpmp, timeout_ms);
	if (r > 0)
		log_info("natpmp-unmapped port=%u external=%u", lobby_net_port(o->l->net),
			 o->natpmp_res.udp_external);
	else if (r < 0)
		log_warnx("natpmp-unmap-fail port=%u external=%u", lobby_net_port(o->l->net),
			  o->natpmp_res.udp_external);
}

/* ---- IPv6: our global address ---- */

#define IF_INET6_PATH "/proc/net/if_inet6"
#define IF_INET6_MAX  (64 * 1024)

/*
 * The source address the kernel picks toward the internet (RFC 6724: a
 * temporary address when privacy extensions prefer one), which is also
 * what our IPv6 socket, bound to [::], sends from. connect() on a UDP
 * socket sends nothing; the destination is from the documentation prefix,
 * routed as any global one. False without an IPv6 route.
 */
static bool kernel_v6_source(struct addr *out)
{
	struct addr to;
	bool ok = false;
	int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return false;
	addr_parse(&to, "[2001:db8::1]:9", -1);
	if (connect(fd, (const struct sockaddr *)&to.ss, to.len) == 0) {
		out->len = sizeof(out->ss);
		ok = getsockname(fd, (struct sockaddr *)&out->ss, &out->len) == 0 &&
		     addr_family(out) == AF_INET6;
	}
	close(fd);
	return ok;
}

/* A hex field of /proc/net/if_inet6 (p, n bytes): its value, or -1. */
static long hex_field(const char *p, size_t n)
{
	long v = 0;

	if (n == 0 || n > 8)
		return -1;
	for (size_t i = 0; i < n; i++) {
		int d = p[i] >= '0' && p[i] <= '9'   ? p[i] - '0'
			: p[i] >= 'a' && p[i] <= 'f' ? p[i] - 'a' + 10
						     : -1;

		if (d < 0)
			return -1;
		v = v * 16 + d;
	}
	return v;
}

/*
 * The IFA_F_* flags of ip in the text of /proc/net/if_inet6, whose lines
 * are "<32 hex address> <ifindex> <prefix len> <scope> <flags> <name>"
 * (the flags' low 8 bits, all hex); -1 when ip is not there.
 */
static long inet6_flags(const char *text, size_t len, const struct addr *ip)
{
	const uint8_t *b = ((const struct sockaddr_in6 *)&ip->ss)->sin6_addr.s6_addr;
	char hex[33];

	sodium_bin2hex(hex, sizeof(hex), b, 16);
	for (size_t at = 0; at < len;) {
		const char *line = text + at, *nl = memchr(line, '\n', len - at);
		size_t n = nl != NULL ? (size_t)(nl - line) : len - at, field = 0, i = 0;

		at += n + 1;
		/* A line without its newline was cut by our buffer. */
		if (nl == NULL || n < 32 || memcmp(line, hex, 32) != 0)
			continue;
		while (i < n) {
			size_t start;

			while (i < n && line[i] == ' ')
				i++;
			start = i;
			while (i < n && line[i] != ' ')
				i++;
			if (i > start && field++ == 4)
				return hex_field(line + start, i - start);
		}
		return -1;
	}
	return -1;
}

/* Tentative (DAD not done), failed DAD or deprecated (going away):
 * not an address to hand out. Unknown flags (no procfs) pass. */
static bool v6_usable(const char *text, size_t len, const struct addr *ip)
{
	long f = inet6_flags(text, len, ip);

	return f < 0 || (f & (IFA_F_TENTATIVE | IFA_F_DADFAILED | IFA_F_DEPRECATED)) == 0;
}

/*
 * A global IPv6 address of an interface that is up (getifaddrs), usable
 * by its flags: the kernel's own pick when it is one of them, else the
 * first. XXX: a temporary address may be replaced while a lobby runs;
 * peers that have our code keep dialling the old one while it is valid.
 */
static bool global_v6(struct addr *out)
{
	struct ifaddrs *all, *ifa;
	struct addr pick, first;
	struct addr_ip ip;
	bool have_pick = kernel_v6_source(&pick), found = false;
	char text[IF_INET6_MAX];
	size_t tlen = 0;
	int fd;

	if (getifaddrs(&all) < 0)
		return false;
	/* procfs hands out whole lines, a page or so per read. */
	fd = open(IF_INET6_PATH, O_RDONLY | O_CLOEXEC);
	while (fd >= 0 && tlen < sizeof(text)) {
		ssize_t got = read(fd, text + tlen, sizeof(text) - tlen);

		if (got <= 0)
			break;
		tlen += (size_t)got;
	}
	if (fd >= 0)
		close(fd);
	for (ifa = all; ifa != NULL; ifa = ifa->ifa_next) {
		struct addr a;

		if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != AF_INET6 ||
		    (ifa->ifa_flags & IFF_UP) == 0 || (ifa->ifa_flags & IFF_LOOPBACK) != 0)
			continue;
		memset(&a, 0, sizeof(a));
		memcpy(&a.ss, ifa->ifa_addr, sizeof(struct sockaddr_in6));
		a.len = sizeof(struct sockaddr_in6);
		if (!addr_is_global_v6(&a) || !v6_usable(text, tlen, &a))
			continue;
		if (have_pick && memcmp(&((struct sockaddr_in6 *)&a.ss)->sin6_addr,
					&((struct sockaddr_in6 *)&pick.ss)->sin6_addr, 16) == 0) {
			first = a;
			found = true;
			break;
		}
		if (!found)
			first = a;
		found = true;
	}
	freeifaddrs(all);
	if (!found)
		return false;
	/* Only the address: no scope id (it is global), no flow label. */
	addr_to_ip(&first, &ip);
	addr_from_ip(out, &ip, 0);
	return true;
}

/* Our v6 candidate into p: --ipv6 IP, else our global address, with the
 * IPv6 socket's port; none without that socket. */
static void observe_v6(struct lobby_observe *o, struct joincode *p)
{
	struct lobby *l = o->l;

	if (l->cfg.ipv6_off || !lobby_net_has_v6(l->net))
		return;
	if (l->cfg.v6_set)
		p->v6addr = l->cfg.v6;
	else if (!global_v6(&p->v6addr))
		return;
	addr_set_port(&p->v6addr, lobby_net_port(l->net));
	p->has_v6 = p->v6 = true;
}

unsigned lobby_observe_families(const struct lobby *l)
{
	const struct joincode *me = lobby_observe_profile(l);

	if (me == NULL)
		return JOINCODE_FAM_V4;
	return (me->has_lan || me->has_public || me->has_vpn ? JOINCODE_FAM_V4 : 0u) |
	       (me->has_v6 ? JOINCODE_FAM_V6 : 0u);
}

int lobby_observe_targets(const struct lobby *l, const struct joincode *peer, struct addr *out,
			  int max)
{
	return joincode_targets_for(peer, lobby_observe_public(l), lobby_observe_families(l), out,
				    max);
}

static void finish(struct lobby_observe *o)
{
	struct lobby *l = o->l;
	struct joincode *p = &o->profile;
	struct addr lan, ext, seen[LOBBY_MAX_STUN];
	size_t nseen = 0;
	char a[ADDR_STRLEN], b[ADDR_STRLEN], c6[ADDR_STRLEN];

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
	if (router_mapping(o, &ext)) {
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
	/* A router that is up but has no external address to give (miniupnpd
	 * refuses a private or reserved WAN address) while STUN sees us on a
	 * public one: another NAT stands between it and the internet. */
	if (o->has_public && router_without_address(o))
		p->cgnat = true;
	if (o->has_public && addr_is_v4(&o->public_addr)) {
		p->has_public = true;
		p->pub = o->public_addr;
	}
	observe_v6(o, p);
	log_info("observed lan=%s public=%s stun=%zu/%zu open=%d symmetric=%d cgnat=%d upnp=%s "
		 "natpmp=%s v6=%s",
		 p->has_lan ? addr_str(&p->lan, a, sizeof(a)) : "-",
		 p->has_public ? addr_str(&p->pub, b, sizeof(b)) : "-", nseen, o->nstun, p->open,
		 p->symmetric, p->cgnat,
		 !o->upnp_pending         ? "off"
		 : o->upnp_res.udp_mapped ? "mapped"
					  : "none",
		 natpmp_state(o), p->has_v6 ? addr_str(&p->v6addr, c6, sizeof(c6)) : "-");
	/* Asked and got nothing: say why (a lobby told to ask nobody is not). */
	if (o->map && (!l->cfg.upnp_off || !l->cfg.natpmp_off) && lobby_observe_mapping(l) == NULL)
		log_info("mapping-none reason=\"%s\"", lobby_observe_mapping_error(l));
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
	if (all_answered(o) && (!o->upnp_pending || o->upnp_done) &&
	    (!o->natpmp_pending || o->natpmp_done))
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
	/* No router, or one that does not map: NAT-PMP may still. */
	if (!res->udp_mapped)
		start_natpmp(o);
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
	o->map = upnp;
	if (upnp && !l->cfg.upnp_off) {
		o->upnp = upnp_new(l->loop);
		if (o->upnp != NULL &&
		    upnp_map(o->upnp, lobby_net_port(l->net), lobby_net_port(l->net), "rally-lobby",
			     on_upnp, o) == 0)
			o->upnp_pending = true;
	}
	if (!o->upnp_pending)
		start_natpmp(o);
	ev_timer_start(l->loop, &o->cap, OBSERVE_CAP_MS, on_cap, o);
	/* Nothing to wait for: finish from the loop, not from here. */
	if (!o->resolving && !o->upnp_pending && !o->natpmp_pending)
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

void lobby_observe_print(const struct lobby *l)
{
	const struct lobby_observe *o = l->obs;
	const struct joincode *p = &o->profile;
	char a[ADDR_STRLEN], b[ADDR_STRLEN];

	printf("lan=%s\n", p->has_lan ? addr_str(&p->lan, a, sizeof(a)) : "");
	printf("public=%s\n", p->has_public ? addr_str(&p->pub, a, sizeof(a)) : "");
	printf("v6=%s\n", p->has_v6 ? addr_str(&p->v6addr, a, sizeof(a)) : "");
	for (size_t i = 0; i < o->nstun; i++) {
		if (o->stun[i].resolved)
			printf("stun %s -> %s\n", addr_str(&o->stun[i].server, a, sizeof(a)),
			       o->stun[i].answered ? addr_str(&o->stun[i].mapped, b, sizeof(b))
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
	if (o->natpmp_done && o->natpmp_res.udp_mapped)
		printf("natpmp=mapped external=%s:%u\n", o->natpmp_res.external_ip,
		       o->natpmp_res.udp_external);
	else
		printf("natpmp=%s\n", natpmp_state(o));
	fflush(stdout);
}

void lobby_observe_unmap(struct lobby *l, long timeout_ms)
{
	struct lobby_observe *o = l->obs;

	if (o == NULL)
		return;
	unmap_natpmp(o, timeout_ms);
	if (o->upnp == NULL || !o->upnp_res.udp_mapped)
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
	natpmp_free(o->natpmp);
	free(o);
}

const char *lobby_observe_mapping(const struct lobby *l)
{
	const struct lobby_observe *o = l->obs;

	if (o == NULL)
		return NULL;
	if (o->upnp_done && o->upnp_res.udp_mapped)
		return "upnp";
	if (o->natpmp_done && o->natpmp_res.udp_mapped)
		return "natpmp";
	return NULL;
}

/* Why UPnP made no mapping, for mapping_error. */
static void why_upnp(const struct lobby_observe *o, char *buf, size_t size)
{
	if (o->l->cfg.upnp_off)
		snprintf(buf, size, "UPnP off");
	else if (!o->upnp_pending)
		snprintf(buf, size, "UPnP could not start");
	else if (!o->upnp_done)
		snprintf(buf, size, "no UPnP answer yet");
	else if (!o->upnp_res.igd)
		snprintf(buf, size, "no UPnP router answered");
	else
		snprintf(buf, size, "router refused the mapping: %s",
			 o->upnp_res.error[0] ? o->upnp_res.error : "no reason given");
}

/* Why NAT-PMP made no mapping, for mapping_error. */
static void why_natpmp(const struct lobby_observe *o, char *buf, size_t size)
{
	const struct natpmp_result *r = &o->natpmp_res;

	if (o->l->cfg.natpmp_off)
		snprintf(buf, size, "NAT-PMP off");
	else if (o->natpmp == NULL)
		snprintf(buf, size, "NAT-PMP: not tried yet");
	else if (!o->natpmp_pending)
		snprintf(buf, size, "NAT-PMP: could not start");
	else if (!o->natpmp_done)
		snprintf(buf, size, "NAT-PMP: no answer yet");
	else if (r->gateway[0] == '\0')
		snprintf(buf, size, "NAT-PMP: no default gateway");
	else if (!r->answered)
		snprintf(buf, size, "NAT-PMP: no gateway answered");
	else
		snprintf(buf, size, "NAT-PMP: router refused the mapping: %s",
			 r->error[0] ? r->error : "no reason given");
}

const char *lobby_observe_mapping_error(const struct lobby *l)
{
	struct lobby_observe *o = l->obs;
	char u[200], n[200];

	if (lobby_observe_mapping(l) != NULL)
		return NULL;
	if (o == NULL)
		return "not observed yet";
	if (!o->map)
		return "a joiner asks for none";
	if (l->cfg.upnp_off && l->cfg.natpmp_off)
		return "off";
	why_upnp(o, u, sizeof(u));
	why_natpmp(o, n, sizeof(n));
	snprintf(o->why, sizeof(o->why), "%s; %s", u, n);
	return o->why;
}
