/*
 * UPnP IGD mappings through miniupnpc on the loop's worker thread.
 *
 * Every miniupnpc call runs in a work function; results travel back in the
 * job and reach the owner in the done callback, on the loop. The worker is
 * one thread running jobs in submission order, so the jobs of one upnp
 * never overlap and the router state below (urls, data, lan_ip) needs no
 * lock. What the loop thread may read while a job runs (the mapped ports,
 * the jobs in flight, closing) is under q.mu.
 *
 * Lifetime (common/workq): the owner holds one reference and every job one
 * more (loop thread only, no lock). upnp_free() marks the object closing
 * (queued maps are skipped, callbacks are no longer called), waits up to
 * 3 s for work in flight, and drops the owner's reference; the last done
 * callback - which ev_loop_free() runs too - frees what is left.
 */
#include "upnp.h"

#include <errno.h>
#include <miniupnpc/miniupnpc.h>
#include <miniupnpc/upnpcommands.h>
#include <miniupnpc/upnperrors.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ev.h"
#include "log.h"
#include "strbuf.h"
#include "workq.h"

#define UPNP_DISCOVER_MS  (2000) /* SSDP answers are awaited this long */
#define UPNP_FREE_WAIT_MS (3000)

struct upnp {
	struct ev_loop *loop;
	struct workq q;
	uint16_t udp_port; /* under q.mu: mapped now (0 = none) */
	uint16_t tcp_port; /* under q.mu */

	/* Worker only. */
	bool have_igd;
	int igd_status;
	struct UPNPUrls urls;
	struct IGDdatas data;
	char lan_ip[64];
	char external_ip[46];
};

enum job_kind {
	JOB_MAP,
	JOB_UNMAP,
};

struct job {
	struct workq_job w;
	struct upnp *u;
	enum job_kind kind;
	uint16_t udp_port, tcp_port;
	char desc[64];
	upnp_cb *cb;
	void *arg;
	struct upnp_result res;
};

static void destroy(void *owner)
{
	struct upnp *u = owner;

	if (u->have_igd)
		FreeUPNPUrls(&u->urls);
	workq_fini(&u->q);
	free(u);
}

/* ---- worker side ---- */

static void res_error(struct upnp_result *res, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void res_error(struct upnp_result *res, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	errtext_vappend(res->error, sizeof(res->error), fmt, ap);
	va_end(ap);
}

static void fill_router(const struct upnp *u, struct upnp_result *res)
{
	res->igd = u->have_igd;
	res->igd_status = u->igd_status;
	snprintf(res->lan_ip, sizeof(res->lan_ip), "%.45s", u->lan_ip);
	snprintf(res->external_ip, sizeof(res->external_ip), "%s", u->external_ip);
}

/*
 * What upnpDiscover() searches for, one type after the other, waiting
 * UPNP_DISCOVER_MS for each one nobody answers: 8 s on a network without
 * an IGD. Sent all at once (searchalltypes) the answers are awaited once,
 * 2 s either way, so a NAT-PMP attempt after a failed UPnP one still fits
 * in the lobby's observe time. Every device answers at least one of them.
 */
static const char *const search_types[] = {
	"urn:schemas-upnp-org:device:InternetGatewayDevice:1",
	"urn:schemas-upnp-org:service:WANIPConnection:1",
	"urn:schemas-upnp-org:service:WANPPPConnection:1",
	"upnp:rootdevice",
	NULL,
};

/* SSDP discovery and the IGD's description; false when none is usable. */
static bool discover(struct upnp *u, struct upnp_result *res)
{
	struct UPNPDev *devs;
	int err = 0, st;

	if (u->have_igd) {
		FreeUPNPUrls(&u->urls);
		u->have_igd = false;
	}
	memset(&u->urls, 0, sizeof(u->urls));
	memset(&u->data, 0, sizeof(u->data));
	u->lan_ip[0] = u->external_ip[0] = '\0';
	devs = upnpDiscoverDevices(search_types, UPNP_DISCOVER_MS, NULL, NULL, UPNP_LOCAL_PORT_ANY,
				   0, 2, &err, 1);
	if (devs == NULL) {
		u->igd_status = 0;
		res_error(res, "no UPnP device answered (discover error %d)", err);
		return false;
	}
	st = UPNP_GetValidIGD(devs, &u->urls, &u->data, u->lan_ip, (int)sizeof(u->lan_ip));
	freeUPNPDevlist(devs);
	u->igd_status = st;
	/*
	 * 1: a connected IGD. 2: an IGD that says it is not connected - what
	 * miniupnpc 2.2.4 reports for a router whose external address is a
	 * reserved one (a lab router on 198.18.x, a CGNAT router on 100.64.x);
	 * its mappings still work toward the next hop, so we use it.
	 */
	if (st != 1 && st != 2) {
		if (st != 0)
			FreeUPNPUrls(&u->urls);
		u->lan_ip[0] = '\0';
		res_error(res, "no usable IGD (UPNP_GetValidIGD=%d)", st);
		return false;
	}
	u->have_igd = true;
	return true;
}

static bool add_mapping(struct upnp *u, struct upnp_result *res, uint16_t port, const char *proto,
			const char *desc)
{
	char p[8];
	int r;

	snprintf(p, sizeof(p), "%u", port);
	r = UPNP_AddPortMapping(u->urls.controlURL, u->data.first.servicetype, p, p, u->lan_ip,
				desc, proto, NULL, "0");
	if (r != UPNPCOMMAND_SUCCESS) {
		const char *why = strupnperror(r);

		res_error(res, "AddPortMapping %s %u: %d %s", proto, port, r,
			  why != NULL ? why : "unknown error");
		return false;
	}
	return true;
}

/* true when the mapping is gone (or the router says there is none). */
static bool delete_mapping(struct upnp *u, struct upnp_result *res, uint16_t port,
			   const char *proto)
{
	char p[8];
	int r;

	snprintf(p, sizeof(p), "%u", port);
	r = UPNP_DeletePortMapping(u->urls.controlURL, u->data.first.servicetype, p, proto, NULL);
	/* 714 NoSuchEntryInArray: already gone. */
	if (r != UPNPCOMMAND_SUCCESS && r != 714) {
		const char *why = strupnperror(r);

		res_error(res, "DeletePortMapping %s %u: %d %s", proto, port, r,
			  why != NULL ? why : "unknown error");
		return false;
	}
	return true;
}

static void set_mapped(struct upnp *u, uint16_t udp_port, uint16_t tcp_port)
{
	pthread_mutex_lock(&u->q.mu);
	u->udp_port = udp_port;
	u->tcp_port = tcp_port;
	pthread_mutex_unlock(&u->q.mu);
}

static void get_mapped(struct upnp *u, uint16_t *udp_port, uint16_t *tcp_port, bool *closing)
{
	pthread_mutex_lock(&u->q.mu);
	*udp_port = u->udp_port;
	*tcp_port = u->tcp_port;
	if (closing != NULL)
		*closing = u->q.closing;
	pthread_mutex_unlock(&u->q.mu);
}

/* Removes what is mapped; the result says what is left. */
static void unmap_now(struct upnp *u, struct upnp_result *res)
{
	uint16_t udp, tcp;

	get_mapped(u, &udp, &tcp, NULL);
	if (udp != 0 && delete_mapping(u, res, udp, "UDP"))
		udp = 0;
	if (tcp != 0 && delete_mapping(u, res, tcp, "TCP"))
		tcp = 0;
	set_mapped(u, udp, tcp);
	res->udp_mapped = udp != 0;
	res->tcp_mapped = tcp != 0;
}

static void map_now(struct job *j)
{
	struct upnp *u = j->u;
	struct upnp_result *res = &j->res;
	uint16_t udp, tcp;
	bool closing;

	get_mapped(u, &udp, &tcp, &closing);
	if (closing) {
		res_error(res, "cancelled");
		return;
	}
	/* A second map replaces the first: old ports go first. */
	if (u->have_igd && ((udp != 0 && udp != j->udp_port) || (tcp != 0 && tcp != j->tcp_port)))
		unmap_now(u, res);
	if (!discover(u, res)) {
		fill_router(u, res);
		return;
	}
	if (UPNP_GetExternalIPAddress(u->urls.controlURL, u->data.first.servicetype,
				      u->external_ip) != UPNPCOMMAND_SUCCESS) {
		u->external_ip[0] = '\0';
		res_error(res, "GetExternalIPAddress failed");
	}
	fill_router(u, res);
	get_mapped(u, &udp, &tcp, NULL);
	if (j->udp_port != 0 && add_mapping(u, res, j->udp_port, "UDP", j->desc)) {
		udp = j->udp_port;
		res->udp_mapped = true;
	}
	if (j->tcp_port != 0 && add_mapping(u, res, j->tcp_port, "TCP", j->desc)) {
		tcp = j->tcp_port;
		res->tcp_mapped = true;
	}
	set_mapped(u, udp, tcp);
}

static void work(void *arg)
{
	struct job *j = arg;
	struct upnp *u = j->u;

	if (j->kind == JOB_MAP) {
		map_now(j);
	} else {
		if (u->have_igd)
			unmap_now(u, &j->res);
		fill_router(u, &j->res);
	}
	workq_work_ended(&j->w);
}

/* ---- loop side ---- */

static void done(void *arg, bool cancelled)
{
	struct job *j = arg;
	struct upnp *u = j->u;

	if (workq_done(&j->w, cancelled) && !j->w.sync && j->cb != NULL)
		j->cb(j->arg, &j->res);
	free(j);
	workq_unref(&u->q);
}

static struct job *submit(struct upnp *u, enum job_kind kind, upnp_cb *cb, void *arg, int *err)
{
	struct job *j = calloc(1, sizeof(*j));

	if (j == NULL) {
		*err = -ENOMEM;
		return NULL;
	}
	j->u = u;
	j->kind = kind;
	j->cb = cb;
	j->arg = arg;
	workq_job_start(&u->q, &j->w);
	return j;
}

static int queue(struct job *j)
{
	int r = workq_submit(&j->w, work, done, j);

	if (r < 0)
		free(j);
	return r;
}

int upnp_map(struct upnp *u, uint16_t udp_port, uint16_t tcp_port, const char *description,
	     upnp_cb *cb, void *arg)
{
	struct job *j;
	int err = 0;

	if (u == NULL || (udp_port == 0 && tcp_port == 0))
		return -EINVAL;
	j = submit(u, JOB_MAP, cb, arg, &err);
	if (j == NULL)
		return err;
	j->udp_port = udp_port;
	j->tcp_port = tcp_port;
	snprintf(j->desc, sizeof(j->desc), "%s", description != NULL ? description : "rallypoint");
	return queue(j);
}

int upnp_unmap(struct upnp *u, upnp_cb *cb, void *arg)
{
	struct job *j;
	int err = 0;

	if (u == NULL)
		return -EINVAL;
	j = submit(u, JOB_UNMAP, cb, arg, &err);
	if (j == NULL)
		return err;
	return queue(j);
}

int upnp_unmap_sync(struct upnp *u, long timeout_ms)
{
	struct job *j;
	int err = 0, ret;
	bool idle;

	if (u == NULL)
		return 0;
	pthread_mutex_lock(&u->q.mu);
	/* Nothing mapped and no map on its way: nothing to wait for. */
	idle = u->udp_port == 0 && u->tcp_port == 0 && u->q.inflight == 0;
	pthread_mutex_unlock(&u->q.mu);
	if (idle)
		return 0;
	j = submit(u, JOB_UNMAP, NULL, NULL, &err);
	if (j == NULL)
		return err;
	j->w.sync = true;
	ret = queue(j);
	if (ret < 0)
		return ret;
	/* j stays ours until its done callback, which runs on this thread
	 * (a later loop iteration or ev_loop_free), so reading it is safe. */
	if (!workq_wait(&j->w, timeout_ms))
		ret = -ETIMEDOUT;
	else if (j->res.udp_mapped || j->res.tcp_mapped)
		ret = -EIO;
	else
		ret = 0;
	if (ret == -EIO)
		log_warnx("upnp-unmap-fail error=\"%s\"", j->res.error);
	return ret;
}

struct upnp *upnp_new(struct ev_loop *loop)
{
	struct upnp *u = calloc(1, sizeof(*u));

	if (u == NULL)
		return NULL;
	u->loop = loop;
	workq_init(&u->q, loop, destroy, u);
	return u;
}

void upnp_free(struct upnp *u)
{
	if (u == NULL)
		return;
	workq_close(&u->q, UPNP_FREE_WAIT_MS);
}
