/*
 * NAT-PMP (RFC 6886) port mappings through libnatpmp (Debian's, the
 * reference implementation by miniupnp's author), always on the loop's
 * worker thread: a gateway that never answers holds a request for up to
 * NATPMP_ANSWER_MS, and no libnatpmp call ever runs on the loop.
 *
 * natpmp_map() finds the default gateway (libnatpmp's detection, the
 * kernel's routing table), asks it for its public address, then maps the
 * given UDP and TCP ports to this host, suggesting external port =
 * internal port; the result says which external ports the gateway
 * granted. A mapping is renewed at half-life (natpmp_renew_delay_ms) for
 * as long as the object lives; each renewal is reported as well.
 * natpmp_unmap() removes what was mapped (lifetime 0). Every result
 * reaches the caller's callback on the loop.
 */
#ifndef NATPMP_H
#define NATPMP_H

#include <stdbool.h>
#include <stdint.h>

struct ev_loop;
struct natpmp;

#define NATPMP_ANSWER_MS        (2000) /* one request: sends at 0, 250, 500, 1000 ms */
#define NATPMP_LIFETIME_S       (3600)
#define NATPMP_RENEW_MIN_MS     (1000)  /* never renew sooner */
#define NATPMP_RETRY_EXPIRED_MS (60000) /* a mapping already expired */

struct natpmp_result {
	bool renewal;                /* a renewal's result, not natpmp_map's */
	bool answered;               /* the gateway speaks NAT-PMP */
	char gateway[46];            /* "" when no default gateway was found */
	char external_ip[46];        /* the gateway's public address; "" if unknown */
	bool udp_mapped, tcp_mapped; /* map: granted now; unmap: still there */
	uint16_t udp_external;       /* the external ports granted (0: none) */
	uint16_t tcp_external;
	uint32_t lifetime_s; /* granted, the shorter of the two; 0 when none */
	char error[160];     /* what failed, for the log; "" if nothing */
};

typedef void natpmp_cb(void *arg, const struct natpmp_result *res);

/* NULL, errno set, on failure. */
struct natpmp *natpmp_new(struct ev_loop *loop);
/* Stops renewing, waits (up to 3 s) for a running job, then frees. The
 * mappings stay (natpmp_unmap_sync first to remove them). NULL is a no-op. */
void natpmp_free(struct natpmp *n);

/* Maps udp_port/UDP and tcp_port/TCP (0 = skip) for lifetime_s seconds and
 * keeps them renewed; cb (kept, with arg, for the renewals) gets each
 * result. 0, or -errno when the job cannot be queued. */
int natpmp_map(struct natpmp *n, uint16_t udp_port, uint16_t tcp_port, uint32_t lifetime_s,
	       natpmp_cb *cb, void *arg);
/* Stops renewing and removes the mappings (cb may be NULL). */
int natpmp_unmap(struct natpmp *n, natpmp_cb *cb, void *arg);
/* The same, blocking up to timeout_ms, for the exit path (after the loop
 * has stopped). Returns how many mappings it removed (0 when none was
 * made), -ETIMEDOUT or -EIO when some are left. */
int natpmp_unmap_sync(struct natpmp *n, long timeout_ms);

/* When to renew a mapping that expires in left_ms (ms from now): halfway
 * to expiry (RFC 6886 §3.3, as DHCP does), so a failed renewal is retried
 * at half the time left again; never sooner than NATPMP_RENEW_MIN_MS, and
 * every NATPMP_RETRY_EXPIRED_MS once it has expired. */
long long natpmp_renew_delay_ms(long long left_ms);

#endif
