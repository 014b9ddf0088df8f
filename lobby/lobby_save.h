/*
 * A save on disk, as the transfer sees it (netpunch-wire.md §11): up to
 * three files (the .sav, its .sav.lua, its .jpg) forming one blob, their
 * bytes concatenated in that order, with a SHA-256 per file and one of the
 * whole blob. Nothing here holds a file in memory: the sender reads ranges
 * with pread, the receiver writes them with pwrite into temporaries in the
 * io dir, and hashing streams through a 1 MiB buffer. The blocking calls
 * (hashing, fsync) are for the worker thread; opening, ranges and renames
 * are cheap enough for the loop.
 */
#ifndef LOBBY_SAVE_H
#define LOBBY_SAVE_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define LOBBY_SAVE_FILES     (3)
#define LOBBY_SAVE_BASENAME  "incoming_save"
#define LOBBY_SAVE_HEX       (65)                        /* 64 hex digits and the NUL */
#define LOBBY_SAVE_CAP_BYTES (4ULL * 1024 * 1024 * 1024) /* a receiver's default cap */

struct lobby_save_file {
	char wire[32];       /* incoming_save.sav, .sav.lua, .jpg */
	char path[PATH_MAX]; /* where it is read from, or written to (final name) */
	uint64_t size;
	uint64_t off; /* its first byte in the blob */
	char sha256[LOBBY_SAVE_HEX];
	int fd;
};

struct lobby_save {
	size_t n;
	struct lobby_save_file f[LOBBY_SAVE_FILES];
	uint64_t total;
	char sha256[LOBBY_SAVE_HEX]; /* of the whole blob */
	bool writing;                /* a sink: the files are temporaries */
	char tmp[LOBBY_SAVE_FILES][PATH_MAX];
	/* Bytes hashed or synced so far by the worker (fack's progress). */
	_Atomic uint64_t progress;
};

/*
 * Opens a host's save for sending, as netpunch's START does: path is the
 * .sav (made absolute against the working directory); its .sav.lua is
 * path + ".lua", its .jpg the path without ".sav" + ".jpg", each taken if
 * it is a regular file. Sizes are read, nothing is hashed. Returns 0, or
 * -errno with err set ("save not found: <path>").
 */
int lobby_save_open_source(struct lobby_save *s, const char *path, char *err, size_t errsize);

/* Hashes every file and the blob (blocking: the worker's). 0 or -errno. */
int lobby_save_hash(struct lobby_save *s);

/* Reads blob bytes [off, off + len) (across files). Returns len, or -errno
 * (-EIO when a file is shorter than it was: it changed under us). */
ssize_t lobby_save_read(struct lobby_save *s, uint64_t off, uint8_t *buf, size_t len);

/*
 * A receiver's sink in io_dir for the files an fbegin proposes. Refuses,
 * before anything is allocated or written: a name other than the three
 * allowed (err: "refused: sender proposed unexpected filename(s) [...]",
 * the list as Python's repr writes it), a name twice, sizes that do not add
 * up to total, a total over cap. Then opens a temporary per file beside
 * its final name and reserves its size (a full disk fails here); with
 * resume, the temporaries are the files lobby_partial kept (their data
 * stays). Returns 0 or -errno with err set.
 */
struct lobby_save_offer {
	const char *name; /* NULL: not a string */
	long long size;   /* -1: absent */
	const char *sha256;
};
int lobby_save_open_sink(struct lobby_save *s, const char *io_dir,
			 const struct lobby_save_offer *files, size_t n, uint64_t total,
			 const char *sha256, uint64_t cap, bool resume, char *err, size_t errsize);

/* Where blob offset off lives in a sink: the file's descriptor, the offset
 * in it and the bytes to its end (for splice). 0, or -EINVAL past the end. */
int lobby_save_locate(const struct lobby_save *s, uint64_t off, int *fd, uint64_t *file_off,
		      uint64_t *left);

/* Writes blob bytes [off, off + len). 0 or -errno (-ENOSPC: the disk). */
int lobby_save_write(struct lobby_save *s, uint64_t off, const uint8_t *data, size_t len);

/*
 * The worker's check of a complete sink: fsync, then the SHA-256 of each
 * file and of the blob against what the fbegin said. Returns 1 when all
 * match, 0 on a mismatch, -errno on an I/O error.
 */
int lobby_save_verify(struct lobby_save *s);

/*
 * A hasher over a sink's temporaries, for checking a save while it still
 * arrives (the receiver hashes what lies below its base on the worker, so
 * little is left to hash when the last chunk lands). It has its own
 * descriptors (dups): the sink may be closed or kept meanwhile. Blocking
 * calls, for the worker.
 */
struct lobby_save_hasher;
struct lobby_save_hasher *lobby_save_hasher_new(const struct lobby_save *s);
void lobby_save_hasher_free(struct lobby_save_hasher *h);
/* Blob bytes hashed so far. */
uint64_t lobby_save_hasher_done(const struct lobby_save_hasher *h);
/* Hashes on from where it is to blob offset upto; progress (may be NULL)
 * counts the bytes. 0 or -errno. */
int lobby_save_hasher_run(struct lobby_save_hasher *h, uint64_t upto, _Atomic uint64_t *progress);
/* lobby_save_verify, the bytes h has hashed already not read again. */
int lobby_save_verify_with(struct lobby_save *s, struct lobby_save_hasher *h);

/* A verified sink: each temporary renamed to its final name, the directory
 * synced, and any other incoming_save.* removed. 0 or -errno. */
int lobby_save_commit(struct lobby_save *s, const char *io_dir);

/* Closes the files; a sink's temporaries are removed. */
void lobby_save_close(struct lobby_save *s);

/* The whitelist's index of a file name (0 .sav, 1 .sav.lua, 2 .jpg), or -1. */
int lobby_save_allowed(const char *wire);

/* Removes io_dir/incoming_save.{sav,sav.lua,jpg} and our temporaries (what
 * a joiner does before joining). Returns how many went. */
int lobby_save_remove_stale(const char *io_dir);

#endif
