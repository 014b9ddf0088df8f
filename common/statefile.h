/*
 * State files that survive crashes and full disks.
 *
 * statefile_write() writes a temporary file beside the target, fsyncs it,
 * renames it over the target and fsyncs the directory: a reader sees the old
 * file or the new one, never a mix. On any failure (ENOSPC, EACCES, ...)
 * the temporary is removed and the old file is left as it was.
 */
#ifndef STATEFILE_H
#define STATEFILE_H

#include <stddef.h>

/* Returns 0 or -errno. */
int statefile_write(const char *path, const void *data, size_t len);

/*
 * The same atomic replace without the two fsyncs, for files that are views
 * of live state another process polls (the lobby's lobby_state.json): a
 * reader still sees the old file or the new one, never a mix, but a crash
 * of the machine may lose the last versions, which nobody needs after it.
 * Nothing waits on the disk, so the event loop may call it on every change.
 * Returns 0 or -errno.
 */
int statefile_replace(const char *path, const void *data, size_t len);

/*
 * Reads a whole file of at most max bytes into a malloc'd, NUL-terminated
 * buffer (*out, owned by the caller). Returns 0, -ENOENT when missing,
 * -EFBIG when larger than max, or another -errno. This is the load, so it
 * first removes the temporaries a crashed statefile_write() left beside
 * path (statefile_remove_temps(), best effort: its errors are ignored).
 */
int statefile_read(const char *path, size_t max, char **out, size_t *len);

/*
 * Removes the stale temporaries of path: the regular files in its
 * directory named "<file name of path>.tmp.XXXXXX", six letters or digits,
 * as statefile_write() makes them; nothing else is touched. For a single
 * writer (our daemons) that is not writing at the time: another process
 * writing the same path now would lose its temporary. Returns how many
 * were removed, or -errno when the directory cannot be read.
 */
int statefile_remove_temps(const char *path);

/*
 * Moves a file that failed validation aside, to "<path>.corrupt-<unix
 * seconds>", so it is kept for a human but never loaded again. The new name
 * goes to newpath. Returns 0 or -errno.
 */
int statefile_quarantine(const char *path, char *newpath, size_t size);

/* Creates dir (and missing parents) with mode 0750. 0 or -errno. */
int statefile_mkdirs(const char *dir);

#endif
