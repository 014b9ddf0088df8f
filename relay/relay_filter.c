/*
 * The filter: only what clients and masters send a server gets through,
 * judged on the first word as the server tokenizes it (see common/q3.h).
 */
#include <string.h>

#include "q3.h"
#include "relay.h"

/* The token, cut to cmd_size - 1 bytes (cmd_size >= 1), for the caller. */
static void copy_token(char *cmd, size_t cmd_size, const char *tok)
{
	size_t n = strnlen(tok, cmd_size - 1);

	memcpy(cmd, tok, n);
	cmd[n] = '\0';
}

enum relay_verdict relay_classify(const uint8_t *buf, size_t len, char *cmd, size_t cmd_size)
{
	/*
	 * The verdict is taken on the whole first token, never on cmd: a
	 * short cmd buffer would cut "getinfoX" to "getinfo" (a query) or
	 * "getstatus" to "" (filtered), and the verdict must not depend on
	 * how much of the token the caller wants to log.
	 */
	char tok[Q3_MAX_STRING_CHARS];

	cmd[0] = '\0';
	/* The engine reads a 4-byte sequence (or the OOB marker) first; a
	 * shorter datagram is nothing a server can use. */
	if (len < Q3_OOB_PREFIX_LEN)
		return RELAY_VERDICT_MALFORMED;
	if (!q3_is_oob(buf, len))
		return RELAY_VERDICT_GAME;
	q3_oob_command(buf, len, tok, sizeof(tok));
	copy_token(cmd, cmd_size, tok);
	/*
	 * ET's SV_ConnectionlessPacket hands PunkBuster anything whose raw
	 * bytes after the marker start with "PB_" (a case-sensitive strncmp
	 * on msg->data[4], before tokenizing).
	 */
	if (len >= Q3_OOB_PREFIX_LEN + 3 && memcmp(buf + Q3_OOB_PREFIX_LEN, "PB_", 3) == 0)
		return RELAY_VERDICT_PASS;
	if (q3_cmd_eq(tok, "getstatus") || q3_cmd_eq(tok, "getinfo"))
		return RELAY_VERDICT_QUERY;
	if (q3_cmd_eq(tok, "getchallenge") || q3_cmd_eq(tok, "connect"))
		return RELAY_VERDICT_PASS;
	return RELAY_VERDICT_FILTERED;
}

const char *relay_drop_name(enum relay_drop d)
{
	static const char *const names[RELAY_DROP_NREASONS] = {
		[RELAY_DROP_FILTERED] = "filtered",
		[RELAY_DROP_MALFORMED] = "malformed",
		[RELAY_DROP_RATE_LIMITED] = "rate_limited",
		[RELAY_DROP_BANNED] = "banned",
		[RELAY_DROP_QUEUE_FULL] = "queue_full",
		[RELAY_DROP_SESSION_CAP] = "session_cap",
		[RELAY_DROP_SEND_ERROR] = "send_error",
		[RELAY_DROP_QUERY_BUDGET] = "query_budget",
		[RELAY_DROP_ATTACK_MODE] = "attack_mode",
	};

	return (unsigned)d < RELAY_DROP_NREASONS ? names[d] : "unknown";
}
