/*
 * A mesh joiner's direct links to the other joiners (netpunch-wire.md §10,
 * netpunch's mesh.py and run_client's mesh half), on the one lobby socket.
 *
 * A NAT mapping exists only for the socket it was observed on, so the
 * joiner punches every other joiner from its lobby socket and tells the
 * datagrams apart by source address: the host's address is the host, any
 * other is a mesh link. The handshake is the race's (HELLO with our token,
 * the ACK echoing it, CONNECTED); a link is named out of band by a sealed
 * {"t": "mesh_hi", "name"} both ends send every 0.5 s until named. A dial
 * (HELLO every 100 ms to every candidate of the peer's roster profile, in
 * §4.4's order) gives up after 8 s and is retried after 30 s; a link unheard
 * for 30 s is dead; keepalives every 15 s. The host hears our direct links
 * in a links message every 2 s when they changed.
 *
 * A bridge frame goes to every other participant exactly once: direct where
 * a link is up, else one envelope ('r' | to | from | frame) through the
 * host, or, when the host has been silent for 12 s, through a peer whose
 * roster links name the destination. An envelope for us is delivered; one
 * for a peer we reach directly is passed on as it is.
 *
 * Beyond mesh.py, memory is bounded against strangers: at most
 * LOBBY_MESH_MAX_LINKS addresses, an address becomes a link only by an ACK
 * echoing our token, a CONNECTED while we dial, or an authenticated
 * payload (sealed in a sealed session); unnamed links are forgotten after
 * LOBBY_MESH_UNNAMED_MS and make room for new ones, named links never do.
 */
#ifndef LOBBY_MESH_H
#define LOBBY_MESH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"
#include "frame.h"
#include "joincode.h"

struct lobby;
struct lobby_msg_roster;

#define LOBBY_MESH_TICK_MS       (100)   /* mesh.py HELLO_INTERVAL */
#define LOBBY_MESH_DIAL_MS       (8000)  /* DIAL_TIMEOUT */
#define LOBBY_MESH_RETRY_MS      (30000) /* a failed dial is forgotten after */
#define LOBBY_MESH_DEAD_MS       (30000) /* LINK_DEAD_AFTER */
#define LOBBY_MESH_HI_MS         (500)   /* MESH_HI_INTERVAL */
#define LOBBY_MESH_LINKS_MS      (2000)  /* MESH_LINKS_INTERVAL */
#define LOBBY_MESH_HOST_ALIVE    (12000) /* the host relays while heard within */
#define LOBBY_MESH_MAX_LINKS     (512)
#define LOBBY_MESH_UNNAMED_MS    (30000)
#define LOBBY_MESH_MAX_TARGETS   (JOINCODE_MAX_TARGETS)
#define LOBBY_MESH_DIALS_AT_ONCE (16)

struct lobby_mesh_ops {
	/* The host's address (where the race connected). */
	const struct addr *(*host)(struct lobby *l);
	/* When the host was last heard (ev_now milliseconds). */
	long long (*host_heard)(struct lobby *l);
	/* Our direct links changed: the names, sorted, for a links message. */
	void (*report)(struct lobby *l, const char *const *names, size_t n);
};

struct lobby_mesh_stats {
	uint64_t dials, dials_failed, links_up, links_dead, direct_sent, via_host, via_peer,
		unroutable, env_delivered, env_forwarded, env_dropped, frames_in, frames_refused,
		strangers_refused;
};

struct lobby_mesh;

/* A mesh node on the lobby socket, with our race token. NULL, errno set. */
struct lobby_mesh *lobby_mesh_new(struct lobby *l, const uint8_t token[static NP1_TOKEN_LEN],
				  const struct lobby_mesh_ops *ops);
void lobby_mesh_free(struct lobby_mesh *m);

/* The name the host gave us (welcome's you). */
void lobby_mesh_set_me(struct lobby_mesh *m, const char *you);
/* A roster: who takes part, the host's name, whether it is a relay lobby,
 * the profiles to dial and the links peers report (for relaying). */
void lobby_mesh_roster(struct lobby_mesh *m, const struct lobby_msg_roster *r);

/* An NP1 control frame (H/A/C/K) from an address that is not the host's:
 * the mesh's handshake. */
void lobby_mesh_ctl(struct lobby_mesh *m, const struct addr *from, uint8_t type,
		    const uint8_t *payload, size_t len);
/* An authenticated payload from an address that is not the host's: the
 * link is heard (and becomes one). */
void lobby_mesh_heard(struct lobby_mesh *m, const struct addr *from);
/* {"t": "mesh_hi", "name"} from an address that is not the host's. */
void lobby_mesh_hi(struct lobby_mesh *m, const struct addr *from, const char *name);
/* A game frame from a peer: true when its link is up (deliver it). */
bool lobby_mesh_accept_frame(struct lobby_mesh *m, const struct addr *from);
/* An envelope ('r' ...) from anyone (the host included): delivered to the
 * game when it is for us, passed on when we reach its destination. */
void lobby_mesh_envelope(struct lobby_mesh *m, const struct addr *from, const uint8_t *p,
			 size_t len);
/* A bridge frame for every other participant, once each. Returns how many
 * it was sent toward. */
int lobby_mesh_send_frame(struct lobby_mesh *m, const uint8_t *frame, size_t len);

/* The names we reach directly (sorted; at most max written). */
size_t lobby_mesh_direct(const struct lobby_mesh *m, const char **out, size_t max);
void lobby_mesh_stats(const struct lobby_mesh *m, struct lobby_mesh_stats *out);

#endif
