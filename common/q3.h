/*
 * Quake 3 engine out-of-band packets: "\xff\xff\xff\xff" + a text command.
 *
 * The command line is read exactly as the engine's SV_ConnectionlessPacket
 * reads it (ioquake3 code/server/sv_main.c, ET 2.60b the same):
 * MSG_ReadStringLine takes bytes after the prefix up to '\n', '\0' or the
 * end, at most 1023 of them, turning '%' and bytes > 127 into '.'; then
 * Cmd_TokenizeString splits it on bytes <= ' ', honours "quoted strings" and
 * stops at "//" or skips slash-star ... star-slash comments. Commands are compared
 * case-insensitively by the engine (Q_stricmp), so "getInfo" is getinfo.
 *
 * Pure functions over (buf, len): no I/O, clock or logging.
 */
#ifndef Q3_H
#define Q3_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define Q3_OOB_PREFIX_LEN (4)
/* MSG_ReadStringLine's buffer: MAX_STRING_CHARS, so 1023 characters. */
#define Q3_MAX_STRING_CHARS (1024)
/* Cmd_TokenizeString's MAX_STRING_TOKENS. */
#define Q3_MAX_TOKENS (1024)
/* Largest UDP payload. */
#define Q3_MAX_PACKET (65535)

/* True when buf starts with the four 0xff bytes of an out-of-band packet. */
bool q3_is_oob(const uint8_t *buf, size_t len);

/* A tokenized command line; argv[i] are offsets into text. */
struct q3_args {
	int argc;
	uint16_t argv[Q3_MAX_TOKENS];
	/* Each token is NUL-terminated; 1023 characters yield at most 2046 bytes. */
	char text[2 * Q3_MAX_STRING_CHARS];
	/* Bytes after the prefix that the line consumed, terminator included. */
	size_t consumed;
};

/*
 * Tokenizes the command line of an out-of-band packet (buf includes the
 * prefix). Returns argc (0 for an empty line), or -EBADMSG when buf is not
 * out-of-band.
 */
int q3_oob_tokenize(const uint8_t *buf, size_t len, struct q3_args *out);

/* The i-th argument, or "" beyond argc (Cmd_Argv). */
const char *q3_argv(const struct q3_args *a, int i);

/*
 * The first token only, as the engine sees it, copied into tok (size >= 1,
 * truncated to size - 1). Returns its length (0 when the line has no token),
 * or -EBADMSG when buf is not out-of-band. Cheaper than q3_oob_tokenize.
 */
int q3_oob_command(const uint8_t *buf, size_t len, char *tok, size_t size);

/* ASCII case-insensitive equality of a token and a command name. */
bool q3_cmd_eq(const char *tok, const char *cmd);

/*
 * Writes "\xff\xff\xff\xff" + text into buf. Returns the length, or
 * -EMSGSIZE if it does not fit.
 */
int q3_oob_build(uint8_t *buf, size_t size, const char *text, size_t text_len);

#endif
