/*
 * The frame every role runs in: its state allocated (zeroed) before its
 * start and released after its free, so a role only sets up and undoes
 * what is its own. Also what the host and the joiner both say or check
 * the way netpunch does.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lobby.h"

/* lobby.py _report_command: a note shows its first 400 characters. */
#define NOTE_CHARS (400)

/* The key the game writes into <save>.sav.lua for our game script. */
static const char mp_mod_key[] = "[\"lockstep.lua\"]";

int lobby_role_start(struct lobby *l, const struct joincode *code)
{
	l->role_data = calloc(1, l->role->state_size);
	if (l->role_data == NULL)
		return -ENOMEM;
	return l->role->start(l, code);
}

void lobby_role_free(struct lobby *l)
{
	if (l->role == NULL || l->role_data == NULL)
		return;
	if (l->role->free != NULL)
		l->role->free(l);
	free(l->role_data);
	l->role_data = NULL;
}

/*
 * The game writes a plain <name>.sav.lua beside the compressed save with
 * one entry per game script that ran, keyed by its file name; ours is
 * lockstep.lua, so the key is there exactly when the mod was on. The file
 * is read in pieces (a key may straddle two), never whole.
 * XXX: read on the loop thread, as netpunch does; these files are small.
 */
int lobby_role_save_has_mp_mod(const char *save_path)
{
	enum { KEY = sizeof(mp_mod_key) - 1 };
	char path[PATH_MAX], buf[64 * 1024 + KEY];
	size_t keep = 0;
	int fd, found = 0;

	if (snprintf(path, sizeof(path), "%s.lua", save_path) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t n = read(fd, buf + keep, sizeof(buf) - keep);
		size_t have;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			found = -errno;
			break;
		}
		if (n == 0)
			break;
		have = keep + (size_t)n;
		if (memmem(buf, have, mp_mod_key, KEY) != NULL) {
			found = 1;
			break;
		}
		/* The last KEY-1 bytes may begin the key. */
		keep = have < KEY - 1 ? have : KEY - 1;
		memmove(buf, buf + have - keep, keep);
	}
	close(fd);
	return found;
}

const char *lobby_role_basename(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash != NULL ? slash + 1 : path;
}

void lobby_role_note(struct lobby *l, const char *text)
{
	char cut[NOTE_CHARS * 4 + 1];
	size_t n = 0, chars = 0;

	text = text != NULL ? text : "";
	/* Whole characters (a lead byte and its continuation bytes). */
	while (text[n] != '\0' && chars < NOTE_CHARS) {
		size_t len = 1;

		while (((unsigned char)text[n + len] & 0xc0) == 0x80)
			len++;
		if (n + len > sizeof(cut) - 1)
			break;
		n += len;
		chars++;
	}
	memcpy(cut, text, n);
	cut[n] = '\0';
	lobby_ipc_notice(l, cut);
}
