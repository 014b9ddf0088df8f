/*
 * The game's commands (lobby/lobby_ipcmsg.c, lobby_in.jsonl lines): any
 * bytes through lobby_cmd_decode. Invariants: a decoded command has its cmd
 * text and a type that names it (or UNKNOWN for a cmd we do not act on);
 * a failure leaves nothing to release and says why.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "lobby_ipcmsg.h"

static const char *const names[LOBBY_CMD_NTYPES] = {
	[LOBBY_CMD_QUIT] = "quit",           [LOBBY_CMD_CHAT] = "chat",
	[LOBBY_CMD_NAME] = "name",           [LOBBY_CMD_STAGE] = "stage",
	[LOBBY_CMD_COMPANY] = "company",     [LOBBY_CMD_MODE] = "mode",
	[LOBBY_CMD_PUBLISH] = "publish",     [LOBBY_CMD_START] = "start",
	[LOBBY_CMD_NOTE] = "note",           [LOBBY_CMD_NETSIM] = "netsim",
	[LOBBY_CMD_CROSSPLAY] = "crossplay", [LOBBY_CMD_ADVERTISE_MODS] = "advertise_mods",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lobby_cmd c;
	char err[96];
	int r;

	err[0] = '\0';
	r = lobby_cmd_decode((const char *)data, size, &c, err, sizeof(err));
	if (r < 0) {
		FUZZ_CHECK(r == -EBADMSG || r == -ENODATA);
		FUZZ_CHECK(err[0] != '\0' && c.root == NULL);
		return 0;
	}
	FUZZ_CHECK(c.cmd != NULL && (unsigned)c.type < LOBBY_CMD_NTYPES);
	if (c.type == LOBBY_CMD_UNKNOWN) {
		for (unsigned i = 1; i < LOBBY_CMD_NTYPES; i++)
			FUZZ_CHECK(strcmp(c.cmd, names[i]) != 0);
	} else {
		FUZZ_CHECK(strcmp(c.cmd, names[c.type]) == 0);
	}
	if (c.type == LOBBY_CMD_COMPANY)
		FUZZ_CHECK(c.company.player == NULL || strlen(c.company.player) < size);
	lobby_cmd_release(&c);
	return 0;
}
