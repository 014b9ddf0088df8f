/*
 * What a dedicated relay lobby keeps across restarts, as netpunch's relay
 * keeps it in its io dir: relay_letters.json ({name: origin letter}),
 * relay_companies.json ({name: company id}) and relay_secret.bin (the 12
 * bytes of the code's secret). Pure codecs and bounded tables here; the
 * files themselves are read and written by lobby_relay.c (statefile).
 *
 * Letters are netpunch's origin letters, a..z then aa..zz (the menu DLL's
 * originName() sequence), sticky per name. netpunch keeps every name
 * forever and hangs when the 703rd distinct name needs a letter (its
 * search for an unused one never ends). Ours are bounded to the 702
 * letters there are: a new name takes the lowest free letter; when none is
 * free, it takes the letter of the name seen least recently that is not in
 * the lobby now (a name is seen when it joins). The file lists the names
 * least recently seen first, so that order survives a restart, and stays
 * netpunch's format ({name: letter}, Python's separators).
 */
#ifndef LOBBY_RELAYSTATE_H
#define LOBBY_RELAYSTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lobby.h"

struct strbuf;

#define LOBBY_RELAY_LETTERS   (702)  /* a..z, aa..zz */
#define LOBBY_RELAY_CHIPS     (1024) /* names whose company is remembered */
#define LOBBY_RELAY_FILE_MAX  (512 * 1024)
#define LOBBY_RELAY_LETTER_SZ (3) /* two letters and the NUL */
/* A name as the host keeps one (lobby_host's peer names). */
#define LOBBY_RELAY_NAME_SZ (LOBBY_NAME_MAX * 4 + 1)

enum lobby_relay_kind { LOBBY_RELAY_KIND_LETTERS, LOBBY_RELAY_KIND_CHIPS };

/* The idx-th origin letter into out ("a", ..., "zz"); 0, or -ERANGE when
 * idx >= LOBBY_RELAY_LETTERS. */
int lobby_relay_letter_name(unsigned idx, char out[static LOBBY_RELAY_LETTER_SZ]);
/* The index of a letter (len bytes), or -1 when it is none. */
int lobby_relay_letter_index(const char *s, size_t len);

/* A table of names in the order they were last seen. NULL, errno set. */
struct lobby_relay_names;
struct lobby_relay_names *lobby_relay_names_new(enum lobby_relay_kind kind);
void lobby_relay_names_free(struct lobby_relay_names *t);
size_t lobby_relay_names_count(const struct lobby_relay_names *t);

/*
 * Reads a file's text into the (empty) table: one JSON object, each key a
 * name (a non-empty string of at most LOBBY_NAME_MAX characters, no
 * control characters), each value a letter (letters: each letter once) or
 * a company id 1..LOBBY_CAP (chips), at most the table's capacity. Keys in
 * file order are least recently seen first. 0, or -EBADMSG with err saying
 * what is wrong; the table is left empty then.
 */
int lobby_relay_names_decode(struct lobby_relay_names *t, const char *text, size_t len, char *err,
			     size_t errsize);
/* The table as the file's text ({"name": "a", ...}, json.dumps's form),
 * least recently seen first. 0 or -ENOMEM. */
int lobby_relay_names_encode(const struct lobby_relay_names *t, struct strbuf *b);

/* A letters table: name's letter into out, 0; -ENOENT when it has none. */
int lobby_relay_letter_get(const struct lobby_relay_names *t, const char *name,
			   char out[static LOBBY_RELAY_LETTER_SZ]);
/*
 * The letter of name, which is seen now: its own, else the lowest free
 * one, else the letter of the least recently seen name for which in_use
 * says false (that name is forgotten). Returns the letter's index, or
 * -ENOSPC when every name is in use. *changed says whether the table (or
 * its order) changed, i.e. the file needs writing.
 */
int lobby_relay_letter_for(struct lobby_relay_names *t, const char *name,
			   bool (*in_use)(void *arg, const char *name), void *arg, bool *changed);

/* A chips table: name's company, or 0 when none is remembered. */
int lobby_relay_chip_get(const struct lobby_relay_names *t, const char *name);
/* Remembers name's company (seen now); the least recently seen name makes
 * room. True when the table changed. */
bool lobby_relay_chip_set(struct lobby_relay_names *t, const char *name, int id);

/* relay_secret.bin: exactly the secret's bytes. 0, or -EBADMSG. */
int lobby_relay_secret_decode(const uint8_t *buf, size_t len,
			      uint8_t out[static JOINCODE_SECRET_LEN]);

#endif
