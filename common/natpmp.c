/*
 * NAT-PMP mappings through libnatpmp on the loop's worker thread.
 *
 * The shape of upnp.c, over the same common/workq: every libnatpmp call
 * runs in a work function; results travel back in the job and reach the
 * owner in the done callback, on the loop. The worker is one thread running
 * jobs in submission order, so the jobs of one natpmp never overlap. What
 * both threads touch (the mapped ports, the jobs in flight, closing) is
 * under q.mu; the renewal timer and the references are the loop's.
 *
 * Each request gets a fresh libnatpmp object - a socket of its own, the
 * gateway found again - so a late answer to an earlier request (libnatpmp
 * retransmits: 250 ms, then doubling) can never be read as this one's.
 * libnatpmp's own retry count (9 tries, about 64 s) is cut short at
 * NATPMP_ANSWER_MS.
 *
 * Lifetime: the owner holds one reference and every job one more (loop
 * thread only, no lock). natpmp_free() stops renewing, marks the object
 * closing (queued maps are skipped, callbacks are no longer called), waits
 * up to 3 s for work in flight, and drops the owner's reference; the last
 * done callback - which ev_loop_free() runs too - frees what is left.
 */
#define ENABLE_STRNATPMPERR 1
#include "natpmp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <natpmp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ev.h"
#include "log.h"
#include "strbuf.h"
#include "workq.h"

#define NATPMP_FREE_WAIT_MS (3000)
#define NATPMP_NO_ANSWER    (NATPMP_TRYAGAIN) /* request(): nothing in NATPMP_ANSWER_MS */

struct mapping {
	uint16_t port;     /* internal port mapped now (0 = none) */
	uint16_t external; /* what the gateway granted */
};

struct natpmp {
	struct ev_loop *loop;
	struct workq q;

	/* Loop thread only: the renewal. */
	struct ev_timer renew;
	bool renewing; /* natpmp_map's cb stays in use */
	natpmp_cb *cb;
	void *arg;
	uint16_t want_udp, want_tcp;
	uint32_t want_lifetime_s;
	long long expires_ms; /* ev_now() when the last grant runs out */

	struct mapping udp; /* under q.mu */
	struct mapping tcp; /* under q.mu */
};

enum job_kind {
	JOB_MAP,
	JOB_UNMAP,
};

struct job {
	struct workq_job w;
	struct natpmp *n;
	enum job_kind kind;
	bool renewal;
	uint16_t udp_port, tcp_port;
	uint32_t lifetime_s;
	natpmp_cb *cb;
	void *arg;
	struct natpmp_result res;
	int removed; /* JOB_UNMAP: mappings removed */
};

static void destroy(void *owner)
{
	struct natpmp *n = owner;

	workq_fini(&n->q);
	free(n);
}

long long natpmp_renew_delay_ms(long long left_ms)
{
	if (left_ms <= 0)
		return NATPMP_RETRY_EXPIRED_MS;
	if (left_ms / 2 < NATPMP_RENEW_MIN_MS)
		return NATPMP_RENEW_MIN_MS;
	return left_ms / 2;
}

/* ---- worker side ---- */

static void res_error(struct natpmp_result *res, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void res_error(struct natpmp_result *res, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	errtext_vappend(res->error, sizeof(res->error), fmt, ap);
	va_end(ap);
}

static const char *why(int r)
{
	const char *s;

	if (r == NATPMP_NO_ANSWER)
		return "no answer";
	s = strnatpmperr(r);
	return s != NULL ? s : "unknown error";
}

/* An answer from the gateway itself, even a refusal: it speaks NAT-PMP.
 * (NOGATEWAYSUPPORT is libnatpmp's word for ICMP port unreachable and for
 * running out of retries.) */
static bool is_answer(int r)
{
	return r == 0 || r == NATPMP_ERR_UNSUPPORTEDVERSION || r == NATPMP_ERR_UNSUPPORTEDOPCODE ||
	       (r <= NATPMP_ERR_UNDEFINEDERROR && r >= NATPMP_ERR_OUTOFRESOURCES);
}

static long long mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * One request (public address when proto is 0, else a mapping) and its
 * answer, on a fresh libnatpmp object. 0 with *resp filled, a libnatpmp
 * error code, or NATPMP_NO_ANSWER when nothing came in NATPMP_ANSWER_MS.
 */
static int request(struct job *j, int proto, uint16_t priv, uint16_t pub, uint32_t lifetime,
		   natpmpresp_t *resp)
{
	natpmp_t p = {.s = -1};
	long long deadline;
	int r = initnatpmp(&p, 0, 0);

	/* initnatpmp leaves its socket open when it fails after socket(). */
	if (r < 0) {
		if (p.s >= 0)
			close(p.s);
		return r;
	}
	/* Its socket is not close-on-exec. */
	(void)fcntl(p.s, F_SETFD, FD_CLOEXEC);
	if (j->res.gateway[0] == '\0') {
		struct in_addr gw = {.s_addr = p.gateway};

		inet_ntop(AF_INET, &gw, j->res.gateway, sizeof(j->res.gateway));
	}
	if (proto == 0)
		r = sendpublicaddressrequest(&p);
	else
		r = sendnewportmappingrequest(&p, proto, priv, pub, lifetime);
	if (r < 0)
		goto out;
	deadline = mono_ms() + NATPMP_ANSWER_MS;
	for (;;) {
		struct pollfd pfd = {.fd = p.s, .events = POLLIN};
		struct timeval tv;
		long long left = deadline - mono_ms(), wait = 250;

		if (left <= 0) {
			r = NATPMP_NO_ANSWER;
			break;
		}
		/* Until libnatpmp's next retransmission is due, or our end. */
		if (getnatpmprequesttimeout(&p, &tv) == 0)
			wait = (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000 + 1;
		if (wait > left)
			wait = left;
		if (wait < 0)
			wait = 0;
		if (poll(&pfd, 1, (int)wait) < 0 && errno != EINTR) {
			r = NATPMP_ERR_RECVFROM;
			break;
		}
		r = readnatpmpresponseorretry(&p, resp);
		/* Someone else's datagram on our port: keep waiting. */
		if (r == NATPMP_TRYAGAIN || r == NATPMP_ERR_WRONGPACKETSOURCE)
			continue;
		break;
	}
	/* What answered must be the answer to what we asked. */
	if (r == 0 && proto == 0 && resp->type != NATPMP_RESPTYPE_PUBLICADDRESS)
		r = NATPMP_ERR_UNSUPPORTEDOPCODE;
	if (r == 0 && proto != 0 &&
	    (resp->type != (proto == NATPMP_PROTOCOL_UDP ? NATPMP_RESPTYPE_UDPPORTMAPPING
							 : NATPMP_RESPTYPE_TCPPORTMAPPING) ||
	     resp->pnu.newportmapping.privateport != priv))
		r = NATPMP_ERR_UNSUPPORTEDOPCODE;
out:
	closenatpmp(&p);
	return r;
}

static void get_state(struct natpmp *n, struct mapping *udp, struct mapping *tcp, bool *closing)
{
	pthread_mutex_lock(&n->q.mu);
	*udp = n->udp;
	*tcp = n->tcp;
	if (closing != NULL)
		*closing = n->q.closing;
	pthread_mutex_unlock(&n->q.mu);
}

static void set_state(struct natpmp *n, const struct mapping *udp, const struct mapping *tcp)
{
	pthread_mutex_lock(&n->q.mu);
	n->udp = *udp;
	n->tcp = *tcp;
	pthread_mutex_unlock(&n->q.mu);
}

static int proto_of(bool udp)
{
	return udp ? NATPMP_PROTOCOL_UDP : NATPMP_PROTOCOL_TCP;
}

/* Lifetime 0 and external port 0 delete a mapping (RFC 6886 §3.4). true
 * when it is gone; deleting one the gateway no longer has succeeds too. */
static bool delete_mapping(struct job *j, struct mapping *m, bool udp)
{
	natpmpresp_t resp;
	int r;

	if (m->port == 0)
		return true;
	r = request(j, proto_of(udp), m->port, 0, 0, &resp);
	if (r != 0) {
		res_error(&j->res, "delete %s %u: %s (%d)", udp ? "UDP" : "TCP", m->port, why(r),
			  r);
		return false;
	}
	m->port = m->external = 0;
	j->removed++;
	return true;
}

/* Maps (or renews) one protocol; true when granted. */
static bool add_mapping(struct job *j, struct mapping *m, bool udp, uint16_t port,
			uint32_t *lifetime)
{
	struct natpmp_result *res = &j->res;
	natpmpresp_t resp;
	/* A renewal asks for the external port it holds (§3.3), a new
	 * mapping for the internal port itself. */
	uint16_t suggest = m->port == port && m->external != 0 ? m->external : port;
	int r = request(j, proto_of(udp), port, suggest, j->lifetime_s, &resp);

	if (r != 0) {
		if (is_answer(r))
			res->answered = true;
		res_error(res, "%s %u: %s (%d)", udp ? "UDP" : "TCP", port, why(r), r);
		return false;
	}
	res->answered = true;
	if (resp.pnu.newportmapping.lifetime == 0 ||
	    resp.pnu.newportmapping.mappedpublicport == 0) {
		res_error(res, "%s %u: granted for 0 s", udp ? "UDP" : "TCP", port);
		return false;
	}
	m->port = port;
	m->external = resp.pnu.newportmapping.mappedpublicport;
	if (*lifetime == 0 || resp.pnu.newportmapping.lifetime < *lifetime)
		*lifetime = resp.pnu.newportmapping.lifetime;
	return true;
}

static void map_now(struct job *j)
{
	struct natpmp *n = j->n;
	struct natpmp_result *res = &j->res;
	struct mapping udp, tcp;
	natpmpresp_t resp;
	uint32_t lifetime = 0;
	bool closing;
	int r;

	get_state(n, &udp, &tcp, &closing);
	if (closing) {
		res_error(res, "cancelled");
		return;
	}
	/* A second map replaces the first: other ports go first. */
	if (udp.port != 0 && udp.port != j->udp_port)
		delete_mapping(j, &udp, true);
	if (tcp.port != 0 && tcp.port != j->tcp_port)
		delete_mapping(j, &tcp, false);
	r = request(j, 0, 0, 0, 0, &resp);
	if (r == NATPMP_ERR_CANNOTGETGATEWAY) {
		res_error(res, "no default gateway");
		goto out;
	}
	if (r == 0) {
		res->answered = true;
		inet_ntop(AF_INET, &resp.pnu.publicaddress.addr, res->external_ip,
			  sizeof(res->external_ip));
	} else if (is_answer(r)) {
		/* e.g. 3 Network Failure: the gateway has no public address
		 * (yet); the mappings may still be granted. */
		res->answered = true;
		res_error(res, "public address: %s (%d)", why(r), r);
	} else {
		res_error(res, "gateway %s: %s (%d)", res->gateway[0] ? res->gateway : "-", why(r),
			  r);
		goto out;
	}
	if (j->udp_port != 0 && add_mapping(j, &udp, true, j->udp_port, &lifetime)) {
		res->udp_mapped = true;
		res->udp_external = udp.external;
	}
	if (j->tcp_port != 0 && add_mapping(j, &tcp, false, j->tcp_port, &lifetime)) {
		res->tcp_mapped = true;
		res->tcp_external = tcp.external;
	}
	res->lifetime_s = lifetime;
out:
	set_state(n, &udp, &tcp);
}

static void unmap_now(struct job *j)
{
	struct mapping udp, tcp;

	get_state(j->n, &udp, &tcp, NULL);
	delete_mapping(j, &udp, true);
	delete_mapping(j, &tcp, false);
	set_state(j->n, &udp, &tcp);
	j->res.udp_mapped = udp.port != 0;
	j->res.tcp_mapped = tcp.port != 0;
	j->res.udp_external = udp.external;
	j->res.tcp_external = tcp.external;
}

static void work(void *arg)
{
	struct job *j = arg;

	if (j->kind == JOB_MAP)
		map_now(j);
	else
		unmap_now(j);
	workq_work_ended(&j->w);
}

/* ---- loop side ---- */

static int submit_map(struct natpmp *n, bool renewal);

static void on_renew(struct ev_timer *t, void *arg)
{
	struct natpmp *n = arg;

	(void)t;
	if (submit_map(n, true) < 0)
		ev_timer_start(n->loop, &n->renew, NATPMP_RETRY_EXPIRED_MS, on_renew, n);
}

/* After a map or renewal: when to renew next. */
static void schedule(struct natpmp *n, const struct job *j)
{
	long long now = ev_now(n->loop);

	if (!n->renewing)
		return;
	if (j->res.udp_mapped || j->res.tcp_mapped) {
		n->expires_ms = now + (long long)j->res.lifetime_s * 1000;
		ev_timer_start(n->loop, &n->renew, natpmp_renew_delay_ms(n->expires_ms - now),
			       on_renew, n);
	} else if (j->renewal) {
		/* Still ours until it expires: try again, sooner each time. */
		ev_timer_start(n->loop, &n->renew, natpmp_renew_delay_ms(n->expires_ms - now),
			       on_renew, n);
	} else {
		/* Nothing was granted: nothing to keep. */
		n->renewing = false;
	}
}

static void done(void *arg, bool cancelled)
{
	struct job *j = arg;
	struct natpmp *n = j->n;

	if (workq_done(&j->w, cancelled)) {
		if (j->kind == JOB_MAP)
			schedule(n, j);
		if (!j->w.sync && j->cb != NULL)
			j->cb(j->arg, &j->res);
	}
	free(j);
	workq_unref(&n->q);
}

static struct job *job_new(struct natpmp *n, enum job_kind kind, natpmp_cb *cb, void *arg)
{
	struct job *j = calloc(1, sizeof(*j));

	if (j == NULL)
		return NULL;
	j->n = n;
	j->kind = kind;
	j->cb = cb;
	j->arg = arg;
	workq_job_start(&n->q, &j->w);
	return j;
}

static int queue(struct job *j)
{
	int r = workq_submit(&j->w, work, done, j);

	if (r < 0)
		free(j);
	return r;
}

static int submit_map(struct natpmp *n, bool renewal)
{
	struct job *j = job_new(n, JOB_MAP, n->cb, n->arg);

	if (j == NULL)
		return -ENOMEM;
	j->renewal = renewal;
	j->res.renewal = renewal;
	j->udp_port = n->want_udp;
	j->tcp_port = n->want_tcp;
	j->lifetime_s = n->want_lifetime_s;
	return queue(j);
}

int natpmp_map(struct natpmp *n, uint16_t udp_port, uint16_t tcp_port, uint32_t lifetime_s,
	       natpmp_cb *cb, void *arg)
{
	int r;

	if (n == NULL || (udp_port == 0 && tcp_port == 0) || lifetime_s == 0)
		return -EINVAL;
	ev_timer_stop(n->loop, &n->renew);
	n->want_udp = udp_port;
	n->want_tcp = tcp_port;
	n->want_lifetime_s = lifetime_s;
	n->cb = cb;
	n->arg = arg;
	r = submit_map(n, false);
	n->renewing = r == 0;
	return r;
}

static void stop_renewing(struct natpmp *n)
{
	ev_timer_stop(n->loop, &n->renew);
	n->renewing = false;
}

int natpmp_unmap(struct natpmp *n, natpmp_cb *cb, void *arg)
{
	struct job *j;

	if (n == NULL)
		return -EINVAL;
	stop_renewing(n);
	j = job_new(n, JOB_UNMAP, cb, arg);
	if (j == NULL)
		return -ENOMEM;
	return queue(j);
}

int natpmp_unmap_sync(struct natpmp *n, long timeout_ms)
{
	struct job *j;
	bool idle;
	int ret;

	if (n == NULL)
		return 0;
	stop_renewing(n);
	pthread_mutex_lock(&n->q.mu);
	/* Nothing mapped and no map on its way: nothing to wait for. */
	idle = n->udp.port == 0 && n->tcp.port == 0 && n->q.inflight == 0;
	pthread_mutex_unlock(&n->q.mu);
	if (idle)
		return 0;
	j = job_new(n, JOB_UNMAP, NULL, NULL);
	if (j == NULL)
		return -ENOMEM;
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
		ret = j->removed;
	if (ret == -EIO)
		log_warnx("natpmp-unmap-fail error=\"%s\"", j->res.error);
	return ret;
}

struct natpmp *natpmp_new(struct ev_loop *loop)
{
	struct natpmp *n = calloc(1, sizeof(*n));

	if (n == NULL)
		return NULL;
	n->loop = loop;
	ev_timer_init(&n->renew);
	workq_init(&n->q, loop, destroy, n);
	return n;
}

void natpmp_free(struct natpmp *n)
{
	if (n == NULL)
		return;
	stop_renewing(n);
	workq_close(&n->q, NATPMP_FREE_WAIT_MS);
}
