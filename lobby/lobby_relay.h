/*
 * The dedicated relay lobby (--relay-only, netpunch's relay-only host):
 * the host's session without a player of its own. lobby_host.c runs it as
 * the role lobby_relay_role (the joins, rosters, chat, companies, mesh
 * envelopes and save rounds are the host's) and calls lobby_relay_* where
 * a relay differs; what is the relay's alone lives in lobby_relay.c:
 *
 *   - the leader (the oldest player) and its rights: start, the mode,
 *     anyone's company, /new in chat;
 *   - the stored world (<io dir>/incoming_save.*): the leader's upload,
 *     received by a lobby_xrecv as a joiner receives a save, and kept;
 *     pushed to everyone 3 s after a leader arrives at a relay that holds
 *     one and runs no session; served to late joiners while it is at most
 *     180 s old or is the copy the session resumed from; /new discards it;
 *     the last player leaving closes the session and keeps it;
 *   - the letters and companies that outlive the process and the secret
 *     that keeps the code (lobby_relaystate), written atomically and
 *     loaded with validation: a corrupt file stops the start, named.
 *
 * The host's side of this interface (lobby_host_*) is what the relay may
 * ask of the session; nothing else in lobby/ calls either half.
 */
#ifndef LOBBY_RELAY_H
#define LOBBY_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"
#include "lobby.h"
#include "lobby_relaystate.h"

struct lobby_relay;
struct lobby_bulk;

#define LOBBY_RELAY_STORED_MAX_S (180)  /* lobby.py HOTJOIN_STORED_MAX */
#define LOBBY_RELAY_RESUME_MS    (3000) /* lobby.py RESUME_GRACE */
#define LOBBY_RELAY_SECRET_FILE  "relay_secret.bin"
#define LOBBY_RELAY_LETTERS_FILE "relay_letters.json"
#define LOBBY_RELAY_CHIPS_FILE   "relay_companies.json"

/* ---- what the host's session gives the relay (lobby_host.c) ---- */

/* The relay's state (NULL: not a relay). */
struct lobby_relay *lobby_host_relay(struct lobby *l);

/* The leader: the oldest player, and its name (NULL when the lobby is
 * empty). */
const struct addr *lobby_host_leader(struct lobby *l, const char **name);
/* Whether a player of that name is in the lobby. */
bool lobby_host_present(struct lobby *l, const char *name);
/* {"t": "status", "state": "connected", "detail": detail} to one player. */
void lobby_host_tell(struct lobby *l, const struct addr *to, const char *detail);
/* fn for every player, oldest first. */
void lobby_host_each(struct lobby *l,
		     void (*fn)(void *arg, const struct addr *a, const char *name, bool started),
		     void *arg);
/* The host's TCP listener (NULL: none): the leader pushes its upload to it. */
struct lobby_bulk *lobby_host_bulk(struct lobby *l);
/* The session runs (a start went out); a save round is out. */
bool lobby_host_started(struct lobby *l);
bool lobby_host_sharing(struct lobby *l);
/* A round of the save at path to the players not started (the leader too
 * with include_leader), as the relay's rules have it (lobby.py
 * begin_save_transfer with relay_only). */
void lobby_host_share(struct lobby *l, const char *path, bool include_leader);
/* start to every player (save false), as the leader's start asks. */
void lobby_host_start_all(struct lobby *l);

/* ---- the relay's side (lobby_relay.c) ---- */

/*
 * Loads the relay's state from the io dir (the letters, the companies; a
 * missing file is an empty table) and creates its receiver. NULL when a
 * file cannot be used: the error, naming the file, is logged and said on
 * stderr, and the file is left as it is.
 */
struct lobby_relay *lobby_relay_new(struct lobby *l);
void lobby_relay_free(struct lobby_relay *r);

/*
 * The code's secret kept in <dir>/relay_secret.bin (a relay, and a
 * --dedicated host): read, or made and written (mode 0600) when there is
 * none. 0, or -errno with the error logged naming the file (a file of
 * another size than 12 bytes is -EBADMSG and is not touched).
 */
int lobby_relay_secret(const char *dir, uint8_t out[static JOINCODE_SECRET_LEN]);
/* --check-config: the state files in dir load (letters and companies when
 * letters, the secret always), nothing written; 0 or the error of the first
 * that does not, said as a start would say it. */
int lobby_relay_check_files(const char *dir, bool letters);

/* A player's letter for the roster ("" when it has none). */
const char *lobby_relay_letter(struct lobby_relay *r, const char *name,
			       char buf[static LOBBY_RELAY_LETTER_SZ]);
/* The remembered company of a name (0: none); remember one. */
int lobby_relay_chip(struct lobby_relay *r, const char *name);
void lobby_relay_remember_chip(struct lobby_relay *r, const char *name, int id);

/* The stored world's age for the rosters' stored_age (-1: none; 0 while
 * it is the copy the running session resumed from). */
long long lobby_relay_stored_age(struct lobby_relay *r);
/* Its .sav, or NULL when there is none. */
const char *lobby_relay_stored_path(struct lobby_relay *r);

/* A player joined (created) or renamed: its letter, and for a newcomer
 * what it is told about the world, and the resume when it leads. */
void lobby_relay_joined(struct lobby_relay *r, const struct addr *a, const char *name, bool created,
			bool leader);
/* A message from a player the relay handles itself (fbegin, start, /new):
 * true when it did. */
bool lobby_relay_on_msg(struct lobby_relay *r, const struct addr *from, const char *name,
			bool leader, const struct lobby_msg *m);
/* A save chunk from a player (only the uploading leader's count). */
void lobby_relay_on_chunk(struct lobby_relay *r, const struct addr *from, const uint8_t *p,
			  size_t len);
/* A player is gone (it led; the lobby is empty now). */
void lobby_relay_left(struct lobby_relay *r, const struct addr *a, bool was_leader, bool empty);
/* Whether waiting players may be served the stored world now. */
bool lobby_relay_may_serve(struct lobby_relay *r, bool leader_waiting);
/* The leader holds the save being shared (it uploaded it): it starts with
 * those that received it; and that upload has been handed out. */
bool lobby_relay_leader_holds(struct lobby_relay *r);
void lobby_relay_distributed(struct lobby_relay *r);

/*
 * rally-lobby put-save: the operator's one command to replace the stored
 * world from outside (netpunch's relay_put_save.sh). save is a .sav (its
 * .sav.lua and .jpg beside it go too, as a START would take them); each is
 * copied into a temporary in io_dir, synced, and renamed over
 * incoming_save.*, the directory synced, a sidecar the new save lacks
 * removed. A running relay takes it from its next round on. Refuses a save
 * made without the mod, and one over cap bytes. 0 or -errno with err set.
 */
int lobby_relay_put_save(const char *io_dir, const char *save, uint64_t cap, char *err,
			 size_t errsize);

#endif
