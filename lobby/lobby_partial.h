/*
 * A receiver's unfinished save, kept for the next round (rally's resume,
 * docs/transfer.md): when a joiner leaves, quits or is handed a new round
 * in the middle of one, the chunks it wrote stay in the io dir as
 * .rally-partial.<file> beside a journal, .rally-partial, that says which
 * blob they belong to (its SHA-256, size, chunk size, files) and which
 * chunks [from, to) are in them. The next rally round of the same blob
 * takes them back and asks only for the rest; anything else discards them.
 * The data is not trusted for being kept: the blob's SHA-256 checks it all
 * at the end, and a mismatch starts over from nothing, as ever.
 *
 * The journal is text, one record a line, ending in "end" (a journal cut
 * short is refused):
 *   rally-partial 1
 *   blob <sha256> <total bytes> <chunk bytes>
 *   file <name> <bytes> <sha256>          (one to three)
 *   have <from> <to>                       (any number, ascending, disjoint)
 *   end
 */
#ifndef LOBBY_PARTIAL_H
#define LOBBY_PARTIAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lobby_save.h"
#include "strbuf.h"

#define LOBBY_PARTIAL_FILE       ".rally-partial"
#define LOBBY_PARTIAL_MAX_RANGES (4096)
#define LOBBY_PARTIAL_MAX_BYTES  (256 * 1024) /* a journal larger is refused */

struct lobby_partial_file {
	char wire[32];
	uint64_t size;
	char sha256[LOBBY_SAVE_HEX];
};

struct lobby_partial {
	char sha256[LOBBY_SAVE_HEX];
	uint64_t total, chunk;
	size_t n;
	struct lobby_partial_file f[LOBBY_SAVE_FILES];
	size_t nranges;
	uint64_t ranges[LOBBY_PARTIAL_MAX_RANGES][2];
};

/*
 * Parses a journal's text (pure). Refused (-EBADMSG): a wrong first line, a
 * record out of order or unknown, a number that is not one, a name outside
 * the three of the whitelist, a hash that is not 64 hex digits, sizes that
 * do not add up to the total, a chunk of 0 or over 65,535, a range empty,
 * past the chunk count, overlapping or out of order, more than
 * LOBBY_PARTIAL_MAX_RANGES, no "end". Returns 0.
 */
int lobby_partial_parse(const char *text, size_t len, struct lobby_partial *p);
/* The journal's text for p. */
void lobby_partial_format(const struct lobby_partial *p, struct strbuf *out);

/*
 * Keeps an unfinished sink: its temporaries renamed to .rally-partial.<file>
 * and the journal written for the chunks have marks (a bit each, nchunks of
 * chunk bytes; the first LOBBY_PARTIAL_MAX_RANGES runs). The sink is closed
 * either way; on failure nothing is kept. Returns the chunks kept or -errno.
 */
long long lobby_partial_keep(struct lobby_save *s, const char *io_dir, uint64_t chunk,
			     const uint8_t *have, uint64_t nchunks);

/*
 * Reads the kept partial of io_dir into p (heap: it is large): 0 when there
 * is one, whole, with every file at its size; -ENOENT when there is none;
 * -EBADMSG when it is corrupt or its files are not there (then it is
 * dropped).
 */
int lobby_partial_load(const char *io_dir, struct lobby_partial *p);

/* Whether p is the blob an fbegin proposes (same hash, size, chunk, files). */
bool lobby_partial_matches(const struct lobby_partial *p, const char *sha256, uint64_t total,
			   uint64_t chunk, const struct lobby_save_offer *files, size_t n);

/* Removes the journal and the kept files. */
void lobby_partial_drop(const char *io_dir);

/* The kept name of a file (io_dir/.rally-partial.<wire>). 0 or -ENAMETOOLONG. */
int lobby_partial_name(char *dst, size_t size, const char *io_dir, const char *wire);

#endif
