/*
 * UPnP IGD port mappings through miniupnpc, always on the loop's worker
 * thread (discovery alone waits about 2 s for SSDP answers; no miniupnpc
 * call ever runs on the loop).
 *
 * upnp_map() discovers the router, accepts UPNP_GetValidIGD results 1
 * (connected IGD) and 2 (connected, reserved external address - what a lab
 * router with 198.18.x addresses reports), reads the external address and
 * maps the given UDP and TCP ports to this host (external port = internal
 * port). upnp_unmap() removes what was mapped. Each result is reported to
 * the caller's callback on the loop.
 */
#ifndef UPNP_H
#define UPNP_H

#include <stdbool.h>
#include <stdint.h>

struct ev_loop;
struct upnp;

struct upnp_result {
	bool igd;       /* a usable router was found */
	int igd_status; /* UPNP_GetValidIGD's return */
	bool udp_mapped, tcp_mapped;
	char external_ip[46]; /* "" when unknown */
	char lan_ip[46];      /* our address toward the router */
	char error[160];      /* what failed, for the log; "" if nothing */
};

typedef void upnp_cb(void *arg, const struct upnp_result *res);

/* NULL, errno set, on failure. */
struct upnp *upnp_new(struct ev_loop *loop);
/* Waits (up to 3 s) for a running job, then frees. NULL is a no-op. */
void upnp_free(struct upnp *u);

/* Discovers the router and maps udp_port/UDP and tcp_port/TCP (0 = skip).
 * 0, or -errno when the job cannot be queued. */
int upnp_map(struct upnp *u, uint16_t udp_port, uint16_t tcp_port, const char *description,
	     upnp_cb *cb, void *arg);
/* Removes the mappings made by upnp_map (cb may be NULL). */
int upnp_unmap(struct upnp *u, upnp_cb *cb, void *arg);
/* The same, blocking up to timeout_ms, for the exit path (after the loop
 * has stopped). Returns 0 when both mappings are gone or were never made. */
int upnp_unmap_sync(struct upnp *u, long timeout_ms);

#endif
