/*
 * The query cache, the reply budgets, attack mode and the known players.
 *
 * Queries: client -> public socket -> proxy (filter says getinfo/getstatus)
 * -> relay_qcache_query: the request read as the engine reads it, the kept
 * answer of that kind spliced with the asker's challenge (common/qsplice)
 * into the proxy's answer batch, after the bytes are taken from the
 * budgets. A kept answer older than --query-cache-refresh asks for a
 * refresh (and is served meanwhile); one older than --query-cache-max-age
 * is not served: the asker waits for the refresh (at most 1.5 s, 64 per
 * kind) and gets nothing if none comes.
 *
 * Refreshes: "getinfo <ours>" / "getstatus <ours>" from a socket of our
 * own connected to the server (through the tunnel as session 0 when the
 * server is there), ours being 12 fresh hex digits each time; only the
 * answer carrying them is kept. The engine answers one address a burst of
 * 10 queries, then one a second (ioquake3 and ET: Legacy
 * SVC_RateLimitAddress(from, 10, 1000), shared with getchallenge), and
 * every session of the relay comes from the relay's address: so refreshes
 * are also held back while a model of that bucket (fed with everything we
 * send that counts: refreshes and forwarded getchallenge) says they would
 * eat into the part kept for players' getchallenge.
 *
 * Attack mode: unverified datagrams (from neither a playing session nor a
 * known player) are counted per second; at --attack-threshold the mode
 * starts, and it ends after --attack-hold seconds below half of it.
 * Meanwhile only known players and playing sessions reach the server.
 *
 * The known players (relay_known.c) are saved to <state-dir>/known-players
 * every minute when changed, by the worker thread, and once more at exit.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
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
#include "qsplice.h"
#include "ratelim.h"
#include "relay.h"
#include "relay_known.h"
#include "relay_qcache.h"
#include "statefile.h"
#include "strbuf.h"

#define OURS_BYTES         (6) /* our refresh challenge: 12 hex digits */
#define REFRESH_TIMEOUT_MS (1000)
#define PENDING_MS         (1500)
#define TIMER_STEP_MS      (100)
#define UNUSABLE_AFTER     (3) /* answers without a challenge in a row */
#define UNUSABLE_RETRY_MS  (30000)
#define KNOWN_SAVE_MS      (60LL * 1000)
/* Budget tables forget a network idle this long (its bucket is full). */
#define BUDGET_FORGET_MS (RELAY_BUDGET_BURST * 1000LL + 1000)

static const char *const kind_names[2] = {"getinfo", "getstatus"};

enum refusal {
	R_SOURCE_BUDGET,
	R_KNOWN_BUDGET,
	R_GLOBAL_BUDGET,
	R_PENDING_FULL,
	R_PENDING_TIMEOUT,
	R_LONG_CHALLENGE,
	R_TOO_LONG,
	R_MALFORMED,
	R_N
};

static const char *const refusal_names[R_N] = {
	"source_budget", "known_budget",   "global_budget", "pending_full",
	"stale",         "long_challenge", "too_long",      "malformed",
};

enum refresh_result { F_SENT, F_ANSWERED, F_LOST, F_DEFERRED, F_MISMATCH, F_NO_CHALLENGE, F_N };

static const char *const refresh_names[F_N] = {"sent",     "answered", "lost",
					       "deferred", "mismatch", "no_challenge"};

struct pending {
	struct addr to;
	uint8_t pub;
	long long t_ms;
	size_t ch_len;
	char ch[QSPLICE_CHALLENGE_MAX + 1];
};

/* One kind's kept answer and its refreshes. */
struct kept {
	uint8_t *buf; /* QSPLICE_MAX_ANSWER bytes */
	struct qsplice_tmpl t;
	bool have;
	long long at_ms;
	char ours[2 * OURS_BYTES + 1];
	bool inflight, ever_sent, deferred, stale_logged;
	long long sent_ms;
	struct pending pend[RELAY_QCACHE_PENDING];
	unsigned npend;
	uint64_t answers;
	uint64_t refresh[F_N];
};

/* The known-players file, shared with the worker thread's save jobs. */
struct saver {
	pthread_mutex_t mu;
	unsigned refs;        /* under mu */
	uint64_t on_disk_gen; /* under mu: the newest generation written */
	char path[PATH_MAX];
};

struct save_job {
	struct saver *sv;
	struct relay_qcache *qc; /* NULL once the cache is gone */
	uint64_t gen;
	char *data;
	size_t len;
	int result;
};

struct relay_qcache {
	struct relay *r;
	struct relay_server *srv;
	struct relay_proxy *p;
	const struct relay_qcache_cfg *c;
	int fd;
	struct ev_io *io;
	uint8_t *rx; /* receive buffer, swapped with a kept one's */
	struct kept k[2];
	struct ev_timer refresh_timer, tick;

	bool unusable;
	unsigned no_challenge_run;
	uint64_t forwarded;

	/* The engine's per-address bucket, as SVC_RateLimit keeps it. */
	unsigned eng_level;
	long long eng_last_ms;

	/* Budgets: per unverified prefix, per known player, all unverified. */
	struct ratelim *unverified, *known_rl;
	/* The global budget (earned: allowance + bytes received) and its cap,
	 * in milli-bytes. */
	long long g_milli, g_max_milli, g_ms;

	/* Attack mode. */
	bool attack;
	long long win_ms, calm_ms, attack_since_ms;
	uint64_t win_count, last_pps;
	uint64_t attack_on, attack_off, attack_refused, episode_refused;

	/* Known players and their file. */
	struct relay_known *known;
	struct saver *saver;
	struct save_job *job;
	bool known_dirty;
	uint64_t gen;
	long long last_save_ms;
	uint64_t saves_ok, saves_err;

	uint64_t refusals[R_N], answer_bytes;
	char sn[RELAY_NAME_MAX + 16]; /* " name=NAME" in log lines; "" */
	struct log_ratelimit warn_stale, warn_save;
};

static long long now_ms(const struct relay_qcache *qc)
{
	return ev_now(qc->r->loop);
}

/* ---- the engine's per-address budget, modelled ---- */

/* ioquake3 SVC_RateLimit: a level that every request raises by one and
 * every period lowers by one; at burst the engine refuses. */
static void eng_decay(struct relay_qcache *qc, long long t)
{
	long long dt = t - qc->eng_last_ms, expired;

	if (dt < 0)
		dt = 0;
	expired = dt / qc->c->engine_period_ms;
	if (expired > (long long)qc->eng_level) {
		qc->eng_level = 0;
		qc->eng_last_ms = t;
	} else {
		qc->eng_level -= (unsigned)expired;
		qc->eng_last_ms = t - dt % qc->c->engine_period_ms;
	}
}

void relay_qcache_engine_note(struct relay_qcache *qc)
{
	if (qc == NULL || qc->c->engine_burst == 0)
		return;
	eng_decay(qc, now_ms(qc));
	if (qc->eng_level < qc->c->engine_burst)
		qc->eng_level++;
}

/* May a refresh go now? Routine ones leave the reserve to players; an
 * urgent one (nothing kept, or half the max age gone) takes any room. */
static bool eng_allows(struct relay_qcache *qc, bool urgent)
{
	unsigned limit;

	if (qc->c->engine_burst == 0)
		return true;
	eng_decay(qc, now_ms(qc));
	limit = urgent ? qc->c->engine_burst - 1 : qc->c->engine_burst - qc->c->engine_reserve - 1;
	return qc->eng_level <= limit;
}

/* ---- refreshes ---- */

static void arm_timer(struct relay_qcache *qc);

static void refresh(struct relay_qcache *qc, enum qsplice_kind kind)
{
	struct kept *e = &qc->k[kind];
	long long t = now_ms(qc);
	long long interval = qc->unusable ? UNUSABLE_RETRY_MS : qc->c->refresh_ms;
	uint8_t rnd[OURS_BYTES], pkt[64];
	char text[48];
	bool urgent;
	int n, len;

	if (e->inflight) {
		if (t - e->sent_ms < REFRESH_TIMEOUT_MS)
			return;
		e->inflight = false;
		e->refresh[F_LOST]++;
	}
	if (e->ever_sent && t - e->sent_ms < interval)
		return;
	urgent = !e->have || t - e->at_ms >= qc->c->max_age_ms / 2;
	if (!eng_allows(qc, urgent)) {
		if (!e->deferred)
			e->refresh[F_DEFERRED]++;
		e->deferred = true;
		arm_timer(qc);
		return;
	}
	e->deferred = false;
	randombytes_buf(rnd, sizeof(rnd));
	sodium_bin2hex(e->ours, sizeof(e->ours), rnd, sizeof(rnd));
	n = snprintf(text, sizeof(text), "%s %s", kind_names[kind], e->ours);
	len = q3_oob_build(pkt, sizeof(pkt), text, (size_t)n);
	/* A refused send (no server there, no tunnel) is a lost refresh. */
	if (qc->srv->cfg.server_tunnel)
		(void)!relay_tunnel_dgram(qc->r->tunnel, qc->srv, 0, pkt, (size_t)len);
	else
		(void)!send(qc->fd, pkt, (size_t)len, 0);
	relay_qcache_engine_note(qc);
	e->inflight = e->ever_sent = true;
	e->sent_ms = t;
	e->refresh[F_SENT]++;
	arm_timer(qc);
}

/* ---- budgets ---- */

static void refuse(struct relay_qcache *qc, enum refusal why)
{
	qc->refusals[why]++;
}

/* The source's network: the first prefix4 bits of an IPv4 address (kept
 * v4-mapped), prefix6 of an IPv6 one. */
static void mask_prefix(struct addr_ip *ip, unsigned p4, unsigned p6)
{
	static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	unsigned bits = memcmp(ip->b, v4mapped, sizeof(v4mapped)) == 0 ? 96 + p4 : p6;

	for (unsigned i = 0; i < 16; i++) {
		unsigned lo = i * 8;

		if (bits >= lo + 8)
			continue;
		ip->b[i] &= bits <= lo ? 0 : (uint8_t)(0xff << (8 - (bits - lo)));
	}
}

/*
 * The global budget for unverified askers: --reply-base bytes a second as
 * an allowance plus every byte they send us (counted in relay_qcache_query,
 * answered or not), and in any case no more than --reply-budget a second
 * (a bucket of its own). Beyond the allowance, strangers together never get
 * more bytes than they sent: a reflection spread over many networks draws
 * at most the allowance plus its own size, while a flood that hammers a
 * few hundred networks pays for far more than their budgets let it be
 * answered, so whoever else asks meanwhile is still answered. The earned
 * bucket holds one second of the allowance (16 KiB at least): what a flood
 * paid is spent while it lasts, never banked for a reflection after it.
 * The cap's bucket holds one second of --reply-budget.
 */
static long long earned_cap(const struct relay_qcache *qc)
{
	unsigned base = qc->c->reply_base > 16384 ? qc->c->reply_base : 16384;

	return (long long)base * 1000; /* milli-bytes */
}

static void global_refill(struct relay_qcache *qc, long long t)
{
	long long cap = (long long)qc->c->reply_budget * 1000; /* milli-bytes */

	if (t > qc->g_ms) {
		long long dt = t - qc->g_ms > 1000 ? 1000 : t - qc->g_ms;

		/* ms * bytes/s = milli-bytes */
		qc->g_milli += dt * qc->c->reply_base;
		qc->g_max_milli += dt * qc->c->reply_budget;
		qc->g_ms = t;
	}
	if (qc->g_milli > earned_cap(qc))
		qc->g_milli = earned_cap(qc);
	if (qc->g_max_milli > cap)
		qc->g_max_milli = cap;
}

static void global_credit(struct relay_qcache *qc, size_t len)
{
	if (qc->c->reply_budget == 0)
		return;
	global_refill(qc, now_ms(qc));
	qc->g_milli += (long long)len * 1000;
	if (qc->g_milli > earned_cap(qc))
		qc->g_milli = earned_cap(qc);
}

/* Takes the answer's bytes from the asker's budgets; false (counted) when
 * one of them cannot pay. Masters we heartbeat pay nothing. */
static bool take_budget(struct relay_qcache *qc, const struct addr_ip *ip, bool known, bool master,
			unsigned cost)
{
	long long t = now_ms(qc);
	struct addr_ip net;

	if (master)
		return true;
	if (known) {
		if (ratelim_take(qc->known_rl, ip, cost, t))
			return true;
		refuse(qc, R_KNOWN_BUDGET);
		return false;
	}
	if (qc->c->reply_budget > 0) {
		global_refill(qc, t);
		if (qc->g_milli < (long long)cost * 1000 ||
		    qc->g_max_milli < (long long)cost * 1000) {
			refuse(qc, R_GLOBAL_BUDGET);
			return false;
		}
	}
	net = *ip;
	mask_prefix(&net, qc->c->prefix4, qc->c->prefix6);
	if (!ratelim_take(qc->unverified, &net, cost, t)) {
		refuse(qc, R_SOURCE_BUDGET);
		return false;
	}
	if (qc->c->reply_budget > 0) {
		qc->g_milli -= (long long)cost * 1000;
		qc->g_max_milli -= (long long)cost * 1000;
	}
	return true;
}

static bool is_master(const struct relay_qcache *qc, const struct addr_ip *ip)
{
	return qc->srv->hb != NULL && relay_heartbeat_is_master(qc->srv->hb, ip);
}

/* The answer for to (ip, known player or master as the caller found),
 * from the kept one, into the proxy's batch. */
static void answer(struct relay_qcache *qc, enum qsplice_kind kind, uint8_t pub,
		   const struct addr *to, const struct addr_ip *ip, bool known, bool master,
		   const char *ch, size_t ch_len)
{
	struct kept *e = &qc->k[kind];
	size_t room;
	uint8_t *slot;
	int n = qsplice_size(&e->t, ch, ch_len);

	if (n < 0) {
		refuse(qc, R_TOO_LONG);
		return;
	}
	if (!take_budget(qc, ip, known, master, (unsigned)n))
		return;
	slot = relay_proxy_out_slot(qc->p, &room);
	n = qsplice_build(e->buf, &e->t, ch, ch_len, slot, room);
	if (n < 0) {
		refuse(qc, R_TOO_LONG);
		return;
	}
	relay_proxy_out_push(qc->p, pub, to, (size_t)n);
	e->answers++;
	qc->answer_bytes += (uint64_t)n;
}

/* ---- pending askers ---- */

static void expire_pending(struct relay_qcache *qc, struct kept *e, long long t)
{
	unsigned keep = 0;

	for (unsigned i = 0; i < e->npend; i++) {
		if (t - e->pend[i].t_ms >= PENDING_MS) {
			refuse(qc, R_PENDING_TIMEOUT);
			continue;
		}
		if (keep != i)
			e->pend[keep] = e->pend[i];
		keep++;
	}
	if (keep < e->npend && !e->stale_logged) {
		unsigned long sup;

		e->stale_logged = true;
		if (log_ratelimit_ok(&qc->warn_stale, t, 10000, &sup))
			log_warnx("query-cache-stale%s kind=%s age_ms=%lld refreshes_lost=%llu "
				  "action=silent suppressed=%lu",
				  qc->sn, kind_names[e - qc->k], e->have ? t - e->at_ms : -1LL,
				  (unsigned long long)e->refresh[F_LOST], sup);
	}
	e->npend = keep;
}

static void on_refresh_timer(struct ev_timer *tm, void *arg)
{
	struct relay_qcache *qc = arg;
	long long t = now_ms(qc);

	(void)tm;
	for (int k = 0; k < 2; k++) {
		struct kept *e = &qc->k[k];

		expire_pending(qc, e, t);
		if (e->npend > 0 || e->deferred ||
		    (e->inflight && t - e->sent_ms >= REFRESH_TIMEOUT_MS))
			refresh(qc, (enum qsplice_kind)k);
	}
	arm_timer(qc);
}

/* While anything waits (an asker, a refresh in flight or held back), look
 * again every 100 ms; otherwise the timer sleeps. */
static void arm_timer(struct relay_qcache *qc)
{
	bool need = false;

	if (ev_timer_armed(&qc->refresh_timer))
		return;
	for (int k = 0; k < 2; k++)
		need = need || qc->k[k].npend > 0 || qc->k[k].inflight || qc->k[k].deferred;
	if (need)
		ev_timer_start(qc->r->loop, &qc->refresh_timer, TIMER_STEP_MS, on_refresh_timer,
			       qc);
}

/* ---- answers from the server ---- */

static void infostring_of(const uint8_t *buf, size_t len, enum qsplice_kind kind, size_t *off,
			  size_t *n)
{
	size_t hl = strlen(kind == QSPLICE_INFO ? "\xff\xff\xff\xffinfoResponse\n"
						: "\xff\xff\xff\xffstatusResponse\n");
	const uint8_t *nl = kind == QSPLICE_STATUS ? memchr(buf + hl, '\n', len - hl) : NULL;

	*off = hl;
	*n = nl != NULL ? (size_t)(nl - (buf + hl)) : len - hl;
}

void relay_qcache_answer(struct relay_qcache *qc, const uint8_t *buf, size_t len)
{
	static const char ih[] = "\xff\xff\xff\xffinfoResponse\n";
	static const char sh[] = "\xff\xff\xff\xffstatusResponse\n";
	enum qsplice_kind kind;
	struct qsplice_tmpl t;
	struct kept *e;
	long long now;
	uint8_t *swap;
	int r;

	if (qc == NULL || len > QSPLICE_MAX_ANSWER)
		return;
	if (len >= sizeof(ih) - 1 && memcmp(buf, ih, sizeof(ih) - 1) == 0)
		kind = QSPLICE_INFO;
	else if (len >= sizeof(sh) - 1 && memcmp(buf, sh, sizeof(sh) - 1) == 0)
		kind = QSPLICE_STATUS;
	else
		return;
	e = &qc->k[kind];
	if (!e->inflight) {
		e->refresh[F_MISMATCH]++;
		return;
	}
	r = qsplice_parse(buf, len, kind, e->ours, strlen(e->ours), &t);
	if (r < 0) {
		size_t off, n;
		const char *v;
		size_t vl;

		infostring_of(buf, len, kind, &off, &n);
		if (info_get((const char *)buf + off, n, "challenge", &v, &vl) != -ENOENT) {
			e->refresh[F_MISMATCH]++; /* an answer to an older refresh */
			return;
		}
		e->refresh[F_NO_CHALLENGE]++;
		e->inflight = false;
		if (++qc->no_challenge_run >= UNUSABLE_AFTER && !qc->unusable) {
			qc->unusable = true;
			log_warnx("query-cache-unusable%s reason=\"the server's answers carry no "
				  "challenge\" action=forward",
				  qc->sn);
		}
		return;
	}
	now = now_ms(qc);
	if (buf == qc->rx) {
		/* Our socket's buffer becomes the kept one: no copy. */
		swap = e->buf;
		e->buf = qc->rx;
		qc->rx = swap;
	} else {
		memcpy(e->buf, buf, len); /* the tunnel's */
	}
	e->t = t;
	e->have = true;
	e->at_ms = now;
	e->inflight = false;
	e->refresh[F_ANSWERED]++;
	qc->no_challenge_run = 0;
	if (qc->unusable) {
		qc->unusable = false;
		log_info("query-cache-usable%s kind=%s", qc->sn, kind_names[kind]);
	}
	if (e->stale_logged) {
		e->stale_logged = false;
		log_info("query-cache-fresh%s kind=%s", qc->sn, kind_names[kind]);
	}
	for (unsigned i = 0; i < e->npend; i++) {
		struct pending *pd = &e->pend[i];

		if (now - pd->t_ms >= PENDING_MS)
			refuse(qc, R_PENDING_TIMEOUT);
		else {
			struct addr_ip ip;
			bool known;

			addr_to_ip(&pd->to, &ip);
			known = relay_known_has(qc->known, &ip);
			answer(qc, kind, pd->pub, &pd->to, &ip, known, !known && is_master(qc, &ip),
			       pd->ch, pd->ch_len);
		}
	}
	e->npend = 0;
}

static void on_sock(struct ev_io *io, uint32_t events, void *arg)
{
	struct relay_qcache *qc = arg;

	(void)events;
	for (int i = 0; i < 16; i++) {
		ssize_t n = recv(ev_io_fd(io), qc->rx, QSPLICE_MAX_ANSWER + 1, MSG_DONTWAIT);

		/* ECONNREFUSED: no server there (yet); the refresh is lost. */
		if (n < 0)
			return;
		relay_qcache_answer(qc, qc->rx, (size_t)n);
	}
}

/* ---- attack mode ---- */

static void attack_roll(struct relay_qcache *qc, long long t)
{
	long long el = t - qc->win_ms;
	unsigned th = qc->c->attack_threshold;

	if (el < 1000)
		return;
	qc->last_pps = qc->win_count * 1000 / (uint64_t)el;
	qc->win_ms = t;
	qc->win_count = 0;
	if (th == 0)
		return;
	if (!qc->attack) {
		if (qc->last_pps >= th) {
			qc->attack = true;
			qc->attack_since_ms = t;
			qc->calm_ms = 0;
			qc->episode_refused = 0;
			qc->attack_on++;
			log_warnx("attack-mode-on%s unverified_pps=%llu threshold=%u "
				  "known_players=%zu",
				  qc->sn, (unsigned long long)qc->last_pps, th,
				  relay_known_count(qc->known));
		}
		return;
	}
	if (qc->last_pps * 2 >= th) {
		qc->calm_ms = 0;
		return;
	}
	if (qc->calm_ms == 0)
		qc->calm_ms = t;
	if (t - qc->calm_ms >= qc->c->attack_hold_ms) {
		qc->attack = false;
		qc->attack_off++;
		log_info("attack-mode-off%s unverified_pps=%llu lasted_s=%lld refused=%llu", qc->sn,
			 (unsigned long long)qc->last_pps, (t - qc->attack_since_ms) / 1000,
			 (unsigned long long)qc->episode_refused);
	}
}

static void count_unverified(struct relay_qcache *qc)
{
	long long t = now_ms(qc);

	if (t - qc->win_ms >= 1000)
		attack_roll(qc, t);
	qc->win_count++;
}

bool relay_qcache_admit(struct relay_qcache *qc, const struct addr_ip *ip, bool in_session)
{
	if (qc == NULL || in_session || relay_known_has(qc->known, ip))
		return true;
	count_unverified(qc);
	if (!qc->attack)
		return true;
	qc->attack_refused++;
	qc->episode_refused++;
	return false;
}

/* ---- queries ---- */

enum relay_qc_verdict relay_qcache_query(struct relay_qcache *qc, uint8_t pub,
					 const struct addr *from, const uint8_t *buf, size_t len)
{
	char ch[QSPLICE_CHALLENGE_MAX + 1];
	enum qsplice_kind kind;
	struct addr_ip ip;
	struct kept *e;
	size_t ch_len;
	long long t, age;
	bool known, master;
	int r;

	if (qc == NULL)
		return RELAY_QC_FORWARD;
	addr_to_ip(from, &ip);
	known = relay_known_has(qc->known, &ip);
	master = !known && is_master(qc, &ip);
	if (!known && !master) {
		count_unverified(qc);
		global_credit(qc, len);
	}
	if (!qc->c->on || qc->unusable) {
		/* The server's own answers, as before the cache; in attack
		 * mode for known players and masters only. */
		if (qc->attack && !known && !master) {
			qc->attack_refused++;
			qc->episode_refused++;
			return RELAY_QC_ATTACK;
		}
		/* Does the server echo our challenge again? */
		if (qc->unusable && qsplice_request(buf, len, &kind, ch, &ch_len) == 0)
			refresh(qc, kind);
		qc->forwarded++;
		return RELAY_QC_FORWARD;
	}
	r = qsplice_request(buf, len, &kind, ch, &ch_len);
	if (r == -E2BIG) {
		refuse(qc, R_LONG_CHALLENGE); /* the engine answers nothing */
		return RELAY_QC_DONE;
	}
	if (r < 0) {
		refuse(qc, R_MALFORMED);
		return RELAY_QC_DONE;
	}
	e = &qc->k[kind];
	t = now_ms(qc);
	age = e->have ? t - e->at_ms : LLONG_MAX;
	if (age >= qc->c->refresh_ms)
		refresh(qc, kind);
	if (age < qc->c->max_age_ms) {
		answer(qc, kind, pub, from, &ip, known, master, ch, ch_len);
		return RELAY_QC_DONE;
	}
	/* Nothing fresh enough: the asker waits for the refresh. */
	if (e->npend == RELAY_QCACHE_PENDING) {
		refuse(qc, R_PENDING_FULL);
		return RELAY_QC_DONE;
	}
	e->pend[e->npend].to = *from;
	e->pend[e->npend].pub = pub;
	e->pend[e->npend].t_ms = t;
	e->pend[e->npend].ch_len = ch_len;
	memcpy(e->pend[e->npend].ch, ch, ch_len + 1);
	e->npend++;
	arm_timer(qc);
	return RELAY_QC_DONE;
}

/* ---- known players and their file ---- */

static void saver_put(struct saver *sv)
{
	unsigned left;

	pthread_mutex_lock(&sv->mu);
	left = --sv->refs;
	pthread_mutex_unlock(&sv->mu);
	if (left == 0) {
		pthread_mutex_destroy(&sv->mu);
		free(sv);
	}
}

/* Writes generation gen unless a newer one is on disk already (a save
 * that ran late must not undo a later one). Any thread. */
static int saver_write(struct saver *sv, uint64_t gen, const char *data, size_t len)
{
	int r = 0;

	pthread_mutex_lock(&sv->mu);
	if (gen > sv->on_disk_gen) {
		r = statefile_write(sv->path, data, len);
		if (r == 0)
			sv->on_disk_gen = gen;
	}
	pthread_mutex_unlock(&sv->mu);
	return r;
}

static void save_work(void *arg)
{
	struct save_job *j = arg;

	j->result = saver_write(j->sv, j->gen, j->data, j->len);
}

static void save_done(void *arg, bool cancelled)
{
	struct save_job *j = arg;
	struct relay_qcache *qc = j->qc;

	if (qc != NULL) {
		qc->job = NULL;
		if (cancelled || j->result < 0) {
			qc->known_dirty = true; /* again at the next tick */
			if (!cancelled) {
				unsigned long sup;

				qc->saves_err++;
				qc->r->state_write_errors++;
				errno = -j->result;
				if (log_ratelimit_ok(&qc->warn_save, now_ms(qc), 600000, &sup))
					log_warn("known-players-save-fail file=%s suppressed=%lu",
						 j->sv->path, sup);
			}
		} else {
			qc->saves_ok++;
		}
	}
	saver_put(j->sv);
	free(j->data);
	free(j);
}

static char *format_known(const struct relay_qcache *qc, size_t *len)
{
	struct strbuf sb;

	strbuf_init(&sb, RELAY_KNOWN_FILE_MAX(qc->c->known_max));
	relay_known_format(qc->known, &sb);
	if (sb.bad) {
		strbuf_release(&sb);
		return NULL;
	}
	*len = sb.len;
	return sb.p;
}

static void start_save(struct relay_qcache *qc)
{
	struct save_job *j;

	if (qc->job != NULL || !qc->known_dirty)
		return;
	j = calloc(1, sizeof(*j));
	if (j == NULL)
		return;
	j->data = format_known(qc, &j->len);
	if (j->data == NULL) {
		free(j);
		return;
	}
	j->sv = qc->saver;
	j->qc = qc;
	j->gen = ++qc->gen;
	pthread_mutex_lock(&qc->saver->mu);
	qc->saver->refs++;
	pthread_mutex_unlock(&qc->saver->mu);
	if (ev_work_submit(qc->r->loop, save_work, save_done, j) < 0) {
		saver_put(j->sv);
		free(j->data);
		free(j);
		return;
	}
	qc->job = j;
	qc->known_dirty = false;
	qc->last_save_ms = now_ms(qc);
}

void relay_qcache_player(struct relay_qcache *qc, const struct addr_ip *ip)
{
	if (qc == NULL)
		return;
	if (relay_known_note(qc->known, ip, (long long)time(NULL)) == 1 &&
	    log_enabled(LOG_LEVEL_DEBUG)) {
		char a[INET6_ADDRSTRLEN];

		log_debug("known-player-added%s ip=%s known=%zu", qc->sn,
			  addr_ip_fmt(ip, a, sizeof(a)), relay_known_count(qc->known));
	}
	qc->known_dirty = true;
}

static void on_tick(struct ev_timer *tm, void *arg)
{
	struct relay_qcache *qc = arg;
	long long t = now_ms(qc);

	attack_roll(qc, t);
	ratelim_expire(qc->unverified, t);
	ratelim_expire(qc->known_rl, t);
	if (t - qc->last_save_ms >= KNOWN_SAVE_MS) {
		if (relay_known_expire(qc->known, (long long)time(NULL)) > 0)
			qc->known_dirty = true;
		start_save(qc);
		qc->last_save_ms = t;
	}
	ev_timer_start(qc->r->loop, tm, 1000, on_tick, qc);
}

/* Reads the file into k; -ENOENT when there is none. err set on -EBADMSG. */
static int load_known(struct relay_known *k, const char *path, size_t max,
		      struct relay_known_err *err)
{
	char *text = NULL;
	size_t len;
	int r = statefile_read(path, RELAY_KNOWN_FILE_MAX(max), &text, &len);

	if (r == -EFBIG) {
		err->line = 0;
		snprintf(err->msg, sizeof(err->msg), "larger than %zu bytes",
			 RELAY_KNOWN_FILE_MAX(max));
		return -EBADMSG;
	}
	if (r < 0)
		return r;
	r = relay_known_parse(k, text, len, (long long)time(NULL), err);
	free(text);
	return r;
}

int relay_qcache_check_file(const struct relay_qcache_cfg *c, const char *path, size_t *count)
{
	struct relay_known *k = relay_known_new(c->known_max, c->known_ttl_s);
	struct relay_known_err err;
	int r;

	if (k == NULL)
		return -ENOMEM;
	r = load_known(k, path, c->known_max, &err);
	*count = relay_known_count(k);
	relay_known_free(k);
	if (r == -ENOENT || r == -ENOTDIR) {
		*count = 0;
		return 0;
	}
	if (r == -EBADMSG)
		log_err("known-players-corrupt file=%s line=%d error=\"%s\"", path, err.line,
			err.msg);
	else if (r < 0) {
		errno = -r;
		log_warn("known-players-unreadable file=%s", path);
	}
	return r < 0 ? r : 0;
}

int relay_qcache_path(const struct relay_server *srv, char *path, size_t size, char *dir,
		      size_t dir_size)
{
	const char *sd = srv->r->cfg.state_dir;
	int n;

	if (srv->cfg.name[0] == '\0')
		n = snprintf(path, size, "%s/known-players", sd);
	else
		n = snprintf(path, size, "%s/servers/%s/known-players", sd, srv->cfg.name);
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	if (dir_size > 0) {
		n = srv->cfg.name[0] == '\0'
			    ? snprintf(dir, dir_size, "%s", sd)
			    : snprintf(dir, dir_size, "%s/servers/%s", sd, srv->cfg.name);
		if (n < 0 || (size_t)n >= dir_size)
			return -ENAMETOOLONG;
	}
	return 0;
}

struct relay_qcache *relay_qcache_new(struct relay_server *srv, struct relay_proxy *p)
{
	struct relay_qcache *qc = calloc(1, sizeof(*qc));
	struct relay *r = srv->r;
	const struct relay_qcache_cfg *c = &srv->cfg.qcache;
	char path[PATH_MAX], dir[PATH_MAX];
	struct relay_known_err err;
	unsigned src_burst = c->source_budget * RELAY_BUDGET_BURST;
	unsigned known_burst = c->known_budget * RELAY_BUDGET_BURST;
	int e, lr;

	if (qc == NULL)
		return NULL;
	qc->r = r;
	qc->srv = srv;
	qc->p = p;
	relay_server_logname(srv, qc->sn, sizeof(qc->sn));
	qc->c = c;
	qc->fd = -1;
	ev_timer_init(&qc->refresh_timer);
	ev_timer_init(&qc->tick);
	qc->win_ms = qc->g_ms = qc->eng_last_ms = qc->last_save_ms = ev_now(r->loop);
	qc->g_milli = (long long)c->reply_base * 1000;
	qc->g_max_milli = (long long)c->reply_budget * 1000;
	qc->rx = malloc(QSPLICE_MAX_ANSWER + 1);
	qc->k[0].buf = malloc(QSPLICE_MAX_ANSWER);
	qc->k[1].buf = malloc(QSPLICE_MAX_ANSWER);
	qc->unverified =
		ratelim_new(c->reply_sources, src_burst, c->source_budget, BUDGET_FORGET_MS);
	qc->known_rl =
		ratelim_new(c->reply_sources, known_burst, c->known_budget, BUDGET_FORGET_MS);
	qc->known = relay_known_new(c->known_max, c->known_ttl_s);
	qc->saver = calloc(1, sizeof(*qc->saver));
	if (qc->rx == NULL || qc->k[0].buf == NULL || qc->k[1].buf == NULL ||
	    qc->unverified == NULL || qc->known_rl == NULL || qc->known == NULL ||
	    qc->saver == NULL)
		goto fail;
	pthread_mutex_init(&qc->saver->mu, NULL);
	qc->saver->refs = 1;
	if (relay_qcache_path(srv, path, sizeof(path), dir, sizeof(dir)) < 0 ||
	    snprintf(qc->saver->path, sizeof(qc->saver->path), "%s", path) >=
		    (int)sizeof(qc->saver->path)) {
		errno = ENAMETOOLONG;
		goto fail;
	}
	/* A named server's directory (its bans.json made it, unless the
	 * state dir is unusable: then saves fail and are counted). */
	(void)statefile_mkdirs(dir);

	lr = load_known(qc->known, path, c->known_max, &err);
	if (lr == -EBADMSG) {
		char moved[PATH_MAX + 32];

		if (statefile_quarantine(path, moved, sizeof(moved)) < 0)
			snprintf(moved, sizeof(moved), "(not moved: %s)", strerror(errno));
		log_err("known-players-corrupt file=%s line=%d error=\"%s\" moved-to=%s loaded=0",
			path, err.line, err.msg, moved);
	} else if (lr < 0 && lr != -ENOENT && lr != -ENOTDIR) {
		errno = -lr;
		log_warn("known-players-unreadable file=%s loaded=0", path);
	} else if (lr > 0) {
		log_info("known-players-loaded file=%s count=%d", path, lr);
	}

	if (!srv->cfg.server_tunnel) {
		qc->fd = addr_udp_connect(&srv->server, NULL);
		if (qc->fd < 0) {
			errno = -qc->fd;
			goto fail;
		}
		qc->io = ev_io_add(r->loop, qc->fd, EPOLLIN, on_sock, qc);
		if (qc->io == NULL)
			goto fail;
	}
	ev_timer_start(r->loop, &qc->tick, 1000, on_tick, qc);
	return qc;
fail:
	e = errno;
	relay_qcache_free(qc);
	errno = e;
	return NULL;
}

void relay_qcache_free(struct relay_qcache *qc)
{
	if (qc == NULL)
		return;
	ev_timer_stop(qc->r->loop, &qc->refresh_timer);
	ev_timer_stop(qc->r->loop, &qc->tick);
	if (qc->io != NULL)
		ev_io_del(qc->io, true);
	else if (qc->fd >= 0)
		close(qc->fd);
	if (qc->saver != NULL && qc->known != NULL && (qc->known_dirty || qc->job != NULL)) {
		size_t len;
		char *data = format_known(qc, &len);
		int r = data != NULL ? saver_write(qc->saver, ++qc->gen, data, len) : -ENOMEM;

		if (r < 0) {
			errno = -r;
			log_warn("known-players-save-fail file=%s", qc->saver->path);
		}
		free(data);
	}
	if (qc->job != NULL)
		qc->job->qc = NULL;
	if (qc->saver != NULL)
		saver_put(qc->saver);
	relay_known_free(qc->known);
	ratelim_free(qc->unverified);
	ratelim_free(qc->known_rl);
	free(qc->rx);
	free(qc->k[0].buf);
	free(qc->k[1].buf);
	free(qc);
}

/* ---- metrics ---- */

/* One line of qc's server: name{server="NAME",more} value. */
static void mline(struct strbuf *out, const struct relay_qcache *qc, const char *name,
		  const char *more, unsigned long long v)
{
	char lb[RELAY_NAME_MAX + 96];

	strbuf_printf(out, "%s%s %llu\n", name, relay_server_labels(qc->srv, more, lb, sizeof(lb)),
		      v);
}

static void mfamily(struct strbuf *out, const char *name, const char *type, const char *help)
{
	strbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Each family once, then every server's lines; a server without a cache
 * (its proxy failed to start) has none. */
#define EACH_QC(r, qc)                                                                             \
	for (size_t i_ = 0; i_ < (r)->nservers; i_++)                                              \
		for (const struct relay_qcache *qc = relay_proxy_qcache((r)->servers[i_]->proxy);  \
		     qc != NULL; qc = NULL)

void relay_qcache_metrics(const struct relay *r, struct strbuf *out)
{
	bool any = false;
	char more[96];

	for (size_t i = 0; i < r->nservers; i++)
		any = any || relay_proxy_qcache(r->servers[i]->proxy) != NULL;
	if (!any)
		return;
	mfamily(out, "rally_relay_query_cache_answers_total", "counter",
		"getinfo/getstatus answered from the cache.");
	EACH_QC(r, qc)
	{
		for (int k = 0; k < 2; k++) {
			snprintf(more, sizeof(more), "kind=\"%s\"", kind_names[k]);
			mline(out, qc, "rally_relay_query_cache_answers_total", more,
			      qc->k[k].answers);
		}
	}
	mfamily(out, "rally_relay_query_cache_answer_bytes_total", "counter",
		"Bytes of those answers.");
	EACH_QC(r, qc)
	{
		mline(out, qc, "rally_relay_query_cache_answer_bytes_total", NULL,
		      qc->answer_bytes);
	}
	mfamily(out, "rally_relay_query_cache_refusals_total", "counter",
		"Queries the cache did not answer, by reason.");
	EACH_QC(r, qc)
	{
		for (int i = 0; i < R_N; i++) {
			snprintf(more, sizeof(more), "reason=\"%s\"", refusal_names[i]);
			mline(out, qc, "rally_relay_query_cache_refusals_total", more,
			      qc->refusals[i]);
		}
	}
	mfamily(out, "rally_relay_query_cache_refreshes_total", "counter",
		"The relay's own queries to the server, by kind and outcome.");
	EACH_QC(r, qc)
	{
		for (int k = 0; k < 2; k++)
			for (int i = 0; i < F_N; i++) {
				snprintf(more, sizeof(more), "kind=\"%s\",result=\"%s\"",
					 kind_names[k], refresh_names[i]);
				mline(out, qc, "rally_relay_query_cache_refreshes_total", more,
				      qc->k[k].refresh[i]);
			}
	}
	mfamily(out, "rally_relay_query_cache_age_seconds", "gauge",
		"Age of the kept answer (-1: none).");
	EACH_QC(r, qc)
	{
		long long t = now_ms(qc);

		for (int k = 0; k < 2; k++) {
			char lb[RELAY_NAME_MAX + 96];

			snprintf(more, sizeof(more), "kind=\"%s\"", kind_names[k]);
			strbuf_printf(out, "rally_relay_query_cache_age_seconds%s %.3f\n",
				      relay_server_labels(qc->srv, more, lb, sizeof(lb)),
				      qc->k[k].have ? (double)(t - qc->k[k].at_ms) / 1000.0 : -1.0);
		}
	}
	mfamily(out, "rally_relay_query_cache_usable", "gauge",
		"0 when the server's answers carry no challenge and queries are forwarded.");
	EACH_QC(r, qc)
	{
		mline(out, qc, "rally_relay_query_cache_usable", NULL,
		      qc->c->on && !qc->unusable ? 1 : 0);
	}
	mfamily(out, "rally_relay_query_cache_forwarded_total", "counter",
		"Queries forwarded to the server (cache off or unusable).");
	EACH_QC(r, qc)
	{
		mline(out, qc, "rally_relay_query_cache_forwarded_total", NULL, qc->forwarded);
	}
	mfamily(out, "rally_relay_engine_query_level", "gauge",
		"The engine's per-address query bucket for the relay's address, as modelled.");
	EACH_QC(r, qc)
	{
		mline(out, qc, "rally_relay_engine_query_level", NULL, qc->eng_level);
	}
	mfamily(out, "rally_relay_reply_sources", "gauge", "Sources with a reply budget in hand.");
	EACH_QC(r, qc)
	{
		mline(out, qc, "rally_relay_reply_sources", "class=\"unverified\"",
		      ratelim_count(qc->unverified));
		mline(out, qc, "rally_relay_reply_sources", "class=\"known\"",
		      ratelim_count(qc->known_rl));
	}
	mfamily(out, "rally_relay_attack_mode", "gauge",
		"1 while attack mode lets only known players and playing sessions reach the "
		"server.");
	EACH_QC(r, qc)
	{
		mline(out, qc, "rally_relay_attack_mode", NULL, qc->attack ? 1 : 0);
	}
	mfamily(out, "rally_relay_attack_mode_changes_total", "counter",
		"Attack mode entered and left.");
	EACH_QC(r, qc)
	{
		mline(out, qc, "rally_relay_attack_mode_changes_total", "to=\"on\"", qc->attack_on);
		mline(out, qc, "rally_relay_attack_mode_changes_total", "to=\"off\"",
		      qc->attack_off);
	}
	mfamily(out, "rally_relay_unverified_pps", "gauge",
		"Datagrams per second from sources neither playing nor known, last full second.");
	EACH_QC(r, qc)
	{
		mline(out, qc, "rally_relay_unverified_pps", NULL, qc->last_pps);
	}
	mfamily(out, "rally_relay_known_players", "gauge",
		"Addresses that completed a connect in the last --known-hours.");
	EACH_QC(r, qc)
	{
		mline(out, qc, "rally_relay_known_players", NULL, relay_known_count(qc->known));
	}
	mfamily(out, "rally_relay_known_players_saves_total", "counter",
		"Writes of the known-players file.");
	EACH_QC(r, qc)
	{
		mline(out, qc, "rally_relay_known_players_saves_total", "result=\"ok\"",
		      qc->saves_ok);
		mline(out, qc, "rally_relay_known_players_saves_total", "result=\"error\"",
		      qc->saves_err);
	}
}

bool relay_qcache_state(const struct relay_qcache *qc, struct relay_qcache_state *st)
{
	long long t;

	if (qc == NULL)
		return false;
	t = now_ms(qc);
	st->on = qc->c->on;
	st->usable = qc->c->on && !qc->unusable;
	st->attack = qc->attack;
	for (int k = 0; k < 2; k++)
		st->age_ms[k] = qc->k[k].have ? t - qc->k[k].at_ms : -1;
	st->known = relay_known_count(qc->known);
	st->unverified_pps = qc->last_pps;
	return true;
}

void relay_qcache_defaults(struct relay_qcache_cfg *c)
{
	c->on = true;
	c->refresh_ms = RELAY_QCACHE_REFRESH_MS;
	c->max_age_ms = RELAY_QCACHE_MAX_AGE_MS;
	c->engine_burst = RELAY_ENGINE_BURST;
	c->engine_period_ms = RELAY_ENGINE_PERIOD_MS;
	c->engine_reserve = RELAY_ENGINE_RESERVE;
	c->reply_budget = RELAY_REPLY_BUDGET;
	c->reply_base = RELAY_REPLY_BASE;
	c->source_budget = RELAY_SOURCE_BUDGET;
	c->known_budget = RELAY_KNOWN_BUDGET;
	c->prefix4 = RELAY_SOURCE_PREFIX4;
	c->prefix6 = RELAY_SOURCE_PREFIX6;
	c->reply_sources = RELAY_REPLY_SOURCES;
	c->attack_threshold = RELAY_ATTACK_THRESHOLD;
	c->attack_hold_ms = RELAY_ATTACK_HOLD_S * 1000LL;
	c->known_ttl_s = RELAY_KNOWN_HOURS * 3600LL;
	c->known_max = RELAY_KNOWN_MAX;
}
