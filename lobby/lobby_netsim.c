/*
 * netsim: the file's parse (pure) and the delay line in the loop.
 */
#include "lobby_netsim.h"

#include <errno.h>
#include <math.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "ev.h"

/* A delay beyond a minute is a typo, not a network. */
#define DELAY_CAP_S (60.0)

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* A number as Python's float() of a short value; false when it is not. */
static bool parse_float(const char *s, size_t n, double *out)
{
	char buf[64], *end;
	double v;

	while (n > 0 && is_space(*s))
		s++, n--;
	while (n > 0 && is_space(s[n - 1]))
		n--;
	if (n == 0 || n >= sizeof(buf))
		return false;
	memcpy(buf, s, n);
	buf[n] = '\0';
	v = strtod(buf, &end);
	if (*end != '\0' || isnan(v))
		return false;
	*out = v;
	return true;
}

int lobby_netsim_parse(const char *text, size_t len, struct lobby_netsim_cfg *out)
{
	size_t i = 0;

	memset(out, 0, sizeof(*out));
	while (i < len) {
		size_t e = i, eq;
		const char *k;
		size_t kn;
		double v;

		while (e < len && text[e] != '\n')
			e++;
		for (eq = i; eq < e && text[eq] != '='; eq++)
			;
		if (eq < e) {
			k = text + i;
			kn = eq - i;
			while (kn > 0 && is_space(*k))
				k++, kn--;
			while (kn > 0 && is_space(k[kn - 1]))
				kn--;
			if (parse_float(text + eq + 1, e - eq - 1, &v)) {
				if (v < 0)
					v = 0;
				if (kn == 4 && strncasecmp(k, "loss", 4) == 0)
					out->loss = v > LOBBY_NETSIM_MAX_LOSS
							    ? LOBBY_NETSIM_MAX_LOSS
							    : v;
				else if (kn == 5 && strncasecmp(k, "delay", 5) == 0)
					out->delay_s = v > DELAY_CAP_S ? DELAY_CAP_S : v;
				else if (kn == 6 && strncasecmp(k, "jitter", 6) == 0)
					out->jitter_s = v > DELAY_CAP_S ? DELAY_CAP_S : v;
			}
		}
		i = e + 1;
	}
	return 0;
}

bool lobby_netsim_enabled(const struct lobby_netsim_cfg *c)
{
	return c->loss > 0 || c->delay_s > 0 || c->jitter_s > 0;
}

/* ---- the delay line ---- */

struct held {
	struct held *next;
	long long due_ms;
	struct addr to;
	size_t len;
	uint8_t data[];
};

struct lobby_netsim {
	struct ev_loop *loop;
	struct lobby_netsim_cfg cfg;
	int fd, fd6; /* the IPv4 socket, the IPv6 one (-1: none) */
	struct held *head, *tail;
	size_t held_bytes;
	long long last_due_ms;
	struct ev_timer timer;
	struct lobby_netsim_stats st;
};

/* The socket for to's family (the caller maps v4-mapped addresses). */
static int fd_for(const struct lobby_netsim *ns, const struct addr *to)
{
	return to->ss.ss_family == AF_INET6 ? ns->fd6 : ns->fd;
}

static void send_now(struct lobby_netsim *ns, const struct addr *to, const void *buf, size_t len)
{
	if (sendto(fd_for(ns, to), buf, len, MSG_DONTWAIT, (const struct sockaddr *)&to->ss,
		   to->len) >= 0)
		ns->st.sent++;
}

static void on_due(struct ev_timer *t, void *arg)
{
	struct lobby_netsim *ns = arg;
	long long now = ev_now(ns->loop);

	while (ns->head != NULL && ns->head->due_ms <= now) {
		struct held *h = ns->head;

		ns->head = h->next;
		if (ns->head == NULL)
			ns->tail = NULL;
		send_now(ns, &h->to, h->data, h->len);
		ns->held_bytes -= h->len;
		free(h);
	}
	if (ns->head != NULL)
		ev_timer_start(ns->loop, t, ns->head->due_ms - now, on_due, ns);
}

/* A uniform double in [0, 1). */
static double uniform(void)
{
	return (double)randombytes_random() / 4294967296.0;
}

int lobby_netsim_send(struct lobby_netsim *ns, const struct addr *to, const void *buf, size_t len)
{
	long long now = ev_now(ns->loop), due;
	struct held *h;

	if (ns->cfg.loss > 0 && uniform() < ns->cfg.loss) {
		ns->st.dropped++;
		return 0;
	}
	if (ns->cfg.delay_s <= 0 && ns->cfg.jitter_s <= 0) {
		if (sendto(fd_for(ns, to), buf, len, 0, (const struct sockaddr *)&to->ss, to->len) <
		    0)
			return -errno;
		ns->st.sent++;
		return 0;
	}
	if (ns->held_bytes + len > LOBBY_NETSIM_MAX_QUEUE) {
		ns->st.overflow++;
		return 0;
	}
	h = malloc(sizeof(*h) + len);
	if (h == NULL)
		return -ENOMEM;
	due = now + (long long)((ns->cfg.delay_s + ns->cfg.jitter_s * uniform()) * 1000.0 + 0.5);
	/* Order preserved: never before the one queued last. */
	if (due < ns->last_due_ms)
		due = ns->last_due_ms;
	ns->last_due_ms = due;
	h->next = NULL;
	h->due_ms = due;
	h->to = *to;
	h->len = len;
	memcpy(h->data, buf, len);
	if (ns->tail != NULL)
		ns->tail->next = h;
	else
		ns->head = h;
	ns->tail = h;
	ns->held_bytes += len;
	ns->st.delayed++;
	if (!ev_timer_armed(&ns->timer))
		ev_timer_start(ns->loop, &ns->timer, due - now, on_due, ns);
	return 0;
}

struct lobby_netsim *lobby_netsim_new(struct ev_loop *loop, const struct lobby_netsim_cfg *cfg,
				      int fd, int fd6)
{
	struct lobby_netsim *ns = calloc(1, sizeof(*ns));

	if (ns == NULL)
		return NULL;
	ns->loop = loop;
	ns->cfg = *cfg;
	ns->fd = fd;
	ns->fd6 = fd6;
	ev_timer_init(&ns->timer);
	return ns;
}

void lobby_netsim_free(struct lobby_netsim *ns)
{
	if (ns == NULL)
		return;
	ev_timer_stop(ns->loop, &ns->timer);
	while (ns->head != NULL) {
		struct held *h = ns->head;

		ns->head = h->next;
		free(h);
	}
	free(ns);
}

void lobby_netsim_stats(const struct lobby_netsim *ns, struct lobby_netsim_stats *out)
{
	*out = ns->st;
}

void lobby_netsim_cfg_of(const struct lobby_netsim *ns, struct lobby_netsim_cfg *out)
{
	*out = ns->cfg;
}
