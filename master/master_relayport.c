/*
 * The UDP relay ports (--relay-ip): the fallback when two lobbies cannot
 * punch through (a host behind CGNAT, a joiner behind a symmetric NAT).
 *
 * A relayed knock gets one port of --relay-ports per (tag, nonce), with a
 * 16-byte random id. Each end binds by sending "TRLB" | id | 'H' or 'J'
 * (exactly 21 bytes) from its game socket and is answered "TRLA" | id
 * (common/frame: np1_trlb_parse, np1_trla_build); from then on every other
 * datagram from one learned address goes verbatim to the other. Wrong ids,
 * other roles and strangers are dropped. A port closes
 * after --relay-idle without any datagram (the reference counts every
 * datagram as activity) and --relay-life after it opened.
 */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "frame.h"
#include "htab.h"
#include "log.h"
#include "master.h"
#include "master_redis.h"
#include "strbuf.h"

#define BATCH    (64)
#define KEY_LEN  (32) /* BLAKE2b of "tag|nonce" */
#define SWEEP_MS (500)

struct alloc {
	struct master_relayport *r;
	uint16_t port;
	int fd;
	struct ev_io *io;
	uint8_t id[NP1_RELAY_ID_LEN];
	uint8_t key[KEY_LEN];
	char tag8[9];
	struct addr host, joiner;
	bool has_host, has_joiner;
	long long created_ms, last_ms;
	long long pub_ms; /* --redis: last written to Redis */
	uint64_t datagrams, bytes;
	bool used;
};

struct master_relayport {
	struct master *m;
	struct alloc *allocs; /* one slot per port of the range */
	size_t nports, inuse;
	struct htab *by_key; /* key -> slot index (uint32_t) */
	struct ev_timer sweep;
	uint8_t buf[65536];
	uint64_t opened, closed_idle, closed_life, binds, strangers, bad_binds, relayed_pkts,
		relayed_bytes, full;
};

void master_relay_key(const char *tag, const char *nonce, uint8_t key[32])
{
	crypto_generichash_state st;

	crypto_generichash_init(&st, NULL, 0, KEY_LEN);
	crypto_generichash_update(&st, (const uint8_t *)tag, strlen(tag));
	crypto_generichash_update(&st, (const uint8_t *)"|", 1);
	crypto_generichash_update(&st, (const uint8_t *)nonce, strlen(nonce));
	crypto_generichash_final(&st, key, KEY_LEN);
}

static void alloc_close(struct master_relayport *r, struct alloc *a, const char *why)
{
	uint32_t *slot = htab_get(r->by_key, a->key);

	if (slot != NULL)
		htab_remove(r->by_key, slot);
	master_redis_relay_closed(r->m->redis, a->key);
	ev_io_del(a->io, true);
	a->io = NULL;
	a->fd = -1;
	a->used = false;
	r->inuse--;
	log_info("relay-port-close port=%u reason=%s datagrams=%llu", a->port, why,
		 (unsigned long long)a->datagrams);
}

static void on_datagram(struct alloc *a, const uint8_t *d, size_t len, const struct addr *from)
{
	struct master_relayport *r = a->r;
	const struct addr *dst;
	uint8_t id[NP1_RELAY_ID_LEN], role;
	int b;

	/* The reference counts any datagram, even a stranger's, as activity. */
	a->last_ms = ev_now(r->m->loop);
	/* Any 21-byte "TRLB..." is a bind (-EPROTO: of another role), never
	 * relayed; only -EBADMSG, not a bind at all, goes on to forwarding. */
	b = np1_trlb_parse(d, len, id, &role);
	if (b != -EBADMSG) {
		uint8_t ack[NP1_TRLA_LEN];
		char fa[ADDR_STRLEN];

		if (b < 0 || sodium_memcmp(id, a->id, NP1_RELAY_ID_LEN) != 0) {
			r->bad_binds++;
			return;
		}
		if (role == NP1_ROLE_HOST) {
			if (!a->has_host || !addr_equal(&a->host, from))
				log_info("relay-bind port=%u role=host from=%s", a->port,
					 addr_str(from, fa, sizeof(fa)));
			a->host = *from;
			a->has_host = true;
		} else {
			if (!a->has_joiner || !addr_equal(&a->joiner, from))
				log_info("relay-bind port=%u role=joiner from=%s", a->port,
					 addr_str(from, fa, sizeof(fa)));
			a->joiner = *from;
			a->has_joiner = true;
		}
		r->binds++;
		if (np1_trla_build(ack, sizeof(ack), a->id) == NP1_TRLA_LEN)
			(void)!sendto(a->fd, ack, sizeof(ack), 0,
				      (const struct sockaddr *)&from->ss, from->len);
		return;
	}
	if (a->has_joiner && addr_equal(from, &a->joiner))
		dst = a->has_host ? &a->host : NULL;
	else if (a->has_host && addr_equal(from, &a->host))
		dst = a->has_joiner ? &a->joiner : NULL;
	else
		dst = NULL;
	if (dst == NULL) {
		r->strangers++;
		return;
	}
	if (sendto(a->fd, d, len, 0, (const struct sockaddr *)&dst->ss, dst->len) >= 0) {
		a->datagrams++;
		a->bytes += len;
		r->relayed_pkts++;
		r->relayed_bytes += len;
	}
}

static void on_io(struct ev_io *io, uint32_t events, void *arg)
{
	struct alloc *a = arg;
	struct master_relayport *r = a->r;

	(void)events;
	for (int i = 0; i < BATCH && a->used; i++) {
		struct addr from;
		ssize_t n;

		n = addr_udp_recv(ev_io_fd(io), r->buf, sizeof(r->buf), &from);
		if (n < 0)
			return;
		if ((size_t)n > sizeof(r->buf))
			continue; /* truncated: never forward a cut datagram */
		on_datagram(a, r->buf, (size_t)n, &from);
	}
}

static void publish(struct master_relayport *r, struct alloc *a, long long now)
{
	struct master_relayport_info info;

	if (r->m->redis == NULL)
		return;
	memset(&info, 0, sizeof(info));
	info.port = a->port;
	sodium_bin2hex(info.id_hex, sizeof(info.id_hex), a->id, NP1_RELAY_ID_LEN);
	master_redis_relay_put(r->m->redis, a->key, &info);
	a->pub_ms = now;
}

void master_relayport_republish(struct master_relayport *r)
{
	long long now = ev_now(r->m->loop);

	for (size_t i = 0; i < r->nports; i++) {
		if (r->allocs[i].used)
			publish(r, &r->allocs[i], now);
	}
}

static void on_sweep(struct ev_timer *t, void *arg)
{
	struct master_relayport *r = arg;
	long long now = ev_now(r->m->loop);

	for (size_t i = 0; i < r->nports; i++) {
		struct alloc *a = &r->allocs[i];

		if (!a->used)
			continue;
		if (now - a->last_ms > r->m->cfg.relay_idle_ms) {
			r->closed_idle++;
			alloc_close(r, a, "idle");
		} else if (now - a->created_ms > r->m->cfg.relay_life_ms) {
			r->closed_life++;
			alloc_close(r, a, "lifetime");
		} else if (a->last_ms > a->pub_ms &&
			   now - a->pub_ms >= r->m->cfg.relay_idle_ms / 3) {
			/* Used since it was last written: its Redis key lives on. */
			publish(r, a, now);
		}
	}
	ev_timer_start(r->m->loop, t, SWEEP_MS, on_sweep, r);
}

int master_relayport_alloc(struct master_relayport *r, const char *tag, const char *nonce,
			   struct master_relayport_info *out)
{
	uint8_t key[KEY_LEN];
	uint32_t *slot;
	struct alloc *a;
	long long now = ev_now(r->m->loop);

	master_relay_key(tag, nonce, key);
	slot = htab_get(r->by_key, key);
	if (slot != NULL) {
		a = &r->allocs[*slot];
		a->last_ms = now;
		goto found;
	}
	for (size_t i = 0; i < r->nports; i++) {
		struct addr b = r->m->cfg.relay_bind;
		int fd;

		a = &r->allocs[i];
		if (a->used)
			continue;
		addr_set_port(&b, (uint16_t)(r->m->cfg.relay_lo + i));
		fd = addr_udp_bind(&b);
		if (fd < 0)
			continue; /* taken by someone else: try the next */
		a->io = ev_io_add(r->m->loop, fd, EPOLLIN, on_io, a);
		if (a->io == NULL) {
			close(fd);
			continue;
		}
		slot = htab_insert(r->by_key, key, false, NULL);
		if (slot == NULL) {
			ev_io_del(a->io, true);
			a->io = NULL;
			break;
		}
		*slot = (uint32_t)i;
		a->r = r;
		a->fd = fd;
		a->port = (uint16_t)(r->m->cfg.relay_lo + i);
		randombytes_buf(a->id, NP1_RELAY_ID_LEN);
		memcpy(a->key, key, KEY_LEN);
		snprintf(a->tag8, sizeof(a->tag8), "%.8s", tag);
		a->has_host = a->has_joiner = false;
		a->created_ms = a->last_ms = now;
		a->datagrams = a->bytes = 0;
		a->used = true;
		r->inuse++;
		r->opened++;
		log_info("relay-port-open port=%u tag=%s..", a->port, a->tag8);
		publish(r, a, now);
		goto found;
	}
	r->full++;
	return -ENOSPC;
found:
	memset(out, 0, sizeof(*out));
	out->port = a->port;
	sodium_bin2hex(out->id_hex, sizeof(out->id_hex), a->id, NP1_RELAY_ID_LEN);
	return 0;
}

void master_relayport_metrics(const struct master_relayport *r, struct strbuf *out)
{
	strbuf_printf(
		out,
		"# HELP rally_master_relay_ports Relay ports in use, and in the range.\n"
		"# TYPE rally_master_relay_ports gauge\n"
		"rally_master_relay_ports{state=\"in_use\"} %zu\n"
		"rally_master_relay_ports{state=\"total\"} %zu\n"
		"# HELP rally_master_relay_events_total Relay port events.\n"
		"# TYPE rally_master_relay_events_total counter\n"
		"rally_master_relay_events_total{event=\"opened\"} %llu\n"
		"rally_master_relay_events_total{event=\"closed_idle\"} %llu\n"
		"rally_master_relay_events_total{event=\"closed_lifetime\"} %llu\n"
		"rally_master_relay_events_total{event=\"full\"} %llu\n"
		"rally_master_relay_events_total{event=\"bind\"} %llu\n"
		"rally_master_relay_events_total{event=\"bad_bind\"} %llu\n"
		"rally_master_relay_events_total{event=\"stranger\"} %llu\n"
		"# HELP rally_master_relayed_datagrams_total Datagrams relayed between ends.\n"
		"# TYPE rally_master_relayed_datagrams_total counter\n"
		"rally_master_relayed_datagrams_total %llu\n"
		"# HELP rally_master_relayed_bytes_total Bytes relayed between ends.\n"
		"# TYPE rally_master_relayed_bytes_total counter\n"
		"rally_master_relayed_bytes_total %llu\n",
		r->inuse, r->nports, (unsigned long long)r->opened,
		(unsigned long long)r->closed_idle, (unsigned long long)r->closed_life,
		(unsigned long long)r->full, (unsigned long long)r->binds,
		(unsigned long long)r->bad_binds, (unsigned long long)r->strangers,
		(unsigned long long)r->relayed_pkts, (unsigned long long)r->relayed_bytes);
}

int master_relayport_new(struct master *m)
{
	struct master_relayport *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return -ENOMEM;
	r->m = m;
	r->nports = (size_t)m->cfg.relay_hi - m->cfg.relay_lo + 1;
	r->allocs = calloc(r->nports, sizeof(*r->allocs));
	r->by_key = htab_new(r->nports, KEY_LEN, sizeof(uint32_t));
	if (r->allocs == NULL || r->by_key == NULL) {
		master_relayport_free(r);
		return -ENOMEM;
	}
	for (size_t i = 0; i < r->nports; i++)
		r->allocs[i].fd = -1;
	ev_timer_init(&r->sweep);
	ev_timer_start(m->loop, &r->sweep, SWEEP_MS, on_sweep, r);
	m->relay = r;
	log_info("relay-ports ip=%s ports=%u-%u", m->cfg.relay_ip, m->cfg.relay_lo,
		 m->cfg.relay_hi);
	return 0;
}

void master_relayport_free(struct master_relayport *r)
{
	if (r == NULL)
		return;
	ev_timer_stop(r->m->loop, &r->sweep);
	for (size_t i = 0; r->allocs != NULL && i < r->nports; i++) {
		if (r->allocs[i].used)
			ev_io_del(r->allocs[i].io, true);
	}
	free(r->allocs);
	htab_free(r->by_key);
	free(r);
}
