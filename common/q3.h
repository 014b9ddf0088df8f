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
#include <sys/types.h>

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

/* ---- The master protocol (dpmaster 2.x, doc/techinfo.txt) ----
 *
 * Servers:  heartbeat <tag>\n  ->  getinfo <challenge>  ->  infoResponse\n\infostring
 * Clients:  getservers [gamename] <protocol> [options]  ->  getserversResponse ...\EOT\0\0\0
 *           getserversExt <gamename> <protocol> [options] -> getserversExtResponse ...
 *
 * A message's line ends at '\n', NUL or the end of the datagram; its tokens
 * are separated by bytes <= ' ' and may hold only printable ASCII (33-126).
 * Commands compare case-sensitively, as dpmaster's strncmp does.
 */

/* dpmaster common.h MIN/MAX_PACKET_SIZE_IN and messages.c MAX_PACKET_SIZE_OUT. */
#define Q3_MASTER_MIN_IN  (5)
#define Q3_MASTER_MAX_IN  (2048)
#define Q3_MASTER_MAX_OUT (1400)

/* Longest heartbeat tag, game name and game type, in characters. */
#define Q3_TAG_MAX      (63)
#define Q3_GAMENAME_MAX (63)
#define Q3_GAMETYPE_MAX (31)
/* hostname and mapname, kept for display only (cut, never refused). */
#define Q3_HOSTNAME_MAX (63)
#define Q3_MAPNAME_MAX  (63)

/* The generic heartbeat: the game name comes from the infostring. */
#define Q3_HEARTBEAT_GENERIC "DarkPlaces"

/* Challenges: 9 to 12 characters from 33-126 except \ / ; " % (techinfo 3.2). */
#define Q3_CHALLENGE_MIN (9)
#define Q3_CHALLENGE_MAX (12)
/* Random bytes q3_challenge_make() consumes: one for the length, two per character. */
#define Q3_CHALLENGE_RND (1 + 2 * Q3_CHALLENGE_MAX)

enum q3_master_msg {
	Q3_MSG_NOT_OOB,       /* no 0xff x4 prefix */
	Q3_MSG_UNKNOWN,       /* out-of-band, not a master message */
	Q3_MSG_HEARTBEAT,     /* "heartbeat " */
	Q3_MSG_INFORESPONSE,  /* "infoResponse\n" */
	Q3_MSG_GETSERVERS,    /* "getservers " */
	Q3_MSG_GETSERVERSEXT, /* "getserversExt " */
};

/* What a datagram is, from its first bytes only. */
enum q3_master_msg q3_master_classify(const uint8_t *buf, size_t len);

struct q3_heartbeat {
	char tag[Q3_TAG_MAX + 1];
};

/*
 * "\xff\xff\xff\xffheartbeat QuakeArena-1\n": the first token after the
 * command. Returns 0, or -EBADMSG (not a heartbeat, no tag, a tag longer
 * than Q3_TAG_MAX or with bytes outside 33-126).
 */
int q3_decode_heartbeat(const uint8_t *buf, size_t len, struct q3_heartbeat *out);

enum q3_getservers_flag {
	Q3_GS_EXT = 1U << 0,      /* getserversExt */
	Q3_GS_EMPTY = 1U << 1,    /* "empty" */
	Q3_GS_FULL = 1U << 2,     /* "full" */
	Q3_GS_IPV4 = 1U << 3,     /* IPv4 servers wanted */
	Q3_GS_IPV6 = 1U << 4,     /* IPv6 servers wanted */
	Q3_GS_GAMETYPE = 1U << 5, /* gametype holds a filter */
};

struct q3_getservers {
	unsigned flags;
	int32_t protocol;
	char gamename[Q3_GAMENAME_MAX + 1]; /* "" for an anonymous getservers */
	char gametype[Q3_GAMETYPE_MAX + 1]; /* with Q3_GS_GAMETYPE */
};

/*
 * getservers / getserversExt. A getservers whose first argument is a number
 * is anonymous (Q3, ET: the protocol names the game); otherwise the game
 * name comes first. Options: empty, full, gametype=X and its shortcuts ffa
 * (0), tourney (1), team (3), ctf (4), the last one winning; ipv4 and ipv6
 * for getserversExt only. Unknown options are ignored. IPV4/IPV6 come out
 * resolved: getservers wants IPv4 only; getserversExt without either wants
 * both. Returns 0, or -EBADMSG (not one, no protocol, a bad number, an
 * over-long or non-printable token).
 */
int q3_decode_getservers(const uint8_t *buf, size_t len, struct q3_getservers *out);

enum q3_info_error {
	Q3_INFO_OK,
	Q3_INFO_TOO_LONG,       /* infostring of BIG_INFO_STRING bytes or more */
	Q3_INFO_NO_CHALLENGE,   /* no "challenge" key */
	Q3_INFO_BAD_PROTOCOL,   /* "protocol" missing or not a number */
	Q3_INFO_BAD_MAXCLIENTS, /* "sv_maxclients" missing, 0 or not a number */
	Q3_INFO_BAD_CLIENTS,    /* "clients" missing or not a number */
	Q3_INFO_BAD_GAMENAME,   /* "gamename" empty, too long or with spaces */
	Q3_INFO_BAD_GAMETYPE,   /* "gametype" too long or with spaces */
};

struct q3_inforesponse {
	const char *challenge; /* view into buf */
	size_t challenge_len;
	int32_t protocol;
	uint32_t maxclients, clients;
	bool has_gamename;
	char gamename[Q3_GAMENAME_MAX + 1];
	char gametype[Q3_GAMETYPE_MAX + 1]; /* "0" when absent, as dpmaster */
	/* For display: printable ASCII, Q3 colour codes (^N) removed, cut to
	 * fit; "" when absent. Never a reason to refuse the response. */
	char hostname[Q3_HOSTNAME_MAX + 1];
	char mapname[Q3_MAPNAME_MAX + 1];
	enum q3_info_error error;
};

/*
 * "\xff\xff\xff\xffinfoResponse\n\\key\\value...": the fields a master
 * needs (keys as Info_ValueForKey finds them). Returns 0; -EBADMSG when buf
 * is not an infoResponse; -EPROTO with out->error naming the bad field.
 */
int q3_decode_inforesponse(const uint8_t *buf, size_t len, struct q3_inforesponse *out);

/* A metrics/log label for an error: "no_challenge", ... */
const char *q3_info_error_str(enum q3_info_error e);

/*
 * Builds a challenge from Q3_CHALLENGE_RND random bytes (the caller draws
 * them): 9-12 characters of the allowed set, NUL-terminated. Returns its
 * length.
 */
size_t q3_challenge_make(const uint8_t rnd[static Q3_CHALLENGE_RND],
			 char out[static Q3_CHALLENGE_MAX + 1]);
/* True if s[0..len) could be a challenge we made. */
bool q3_challenge_valid(const char *s, size_t len);

/* "\xff\xff\xff\xffgetinfo <challenge>". Returns the length or -EMSGSIZE. */
int q3_encode_getinfo(uint8_t *buf, size_t size, const char *challenge, size_t challenge_len);

/* A listed server as the responses carry it. */
struct q3_srv {
	uint8_t ip[16]; /* IPv4 in ip[0..3] */
	uint16_t port;
	bool v6;
};

struct q3_srvlist {
	bool ext; /* getserversExtResponse (IPv6 allowed) */
	const struct q3_srv *v;
	size_t n;
};

/*
 * One response datagram of at most cap bytes: the header, then entries
 * from v[*taken] on ('\' + 4-byte IP + port, or '/' + 16-byte IP + port,
 * big-endian) while they fit, then the "\EOT\0\0\0" mark if it fits after
 * the last entry. *taken advances past each entry written, and to n + 1
 * once the mark is written: call again while *taken <= n. Returns the
 * datagram's length; -EMSGSIZE if cap cannot hold the header and one IPv6
 * entry; -EINVAL for an IPv6 entry in a getserversResponse or *taken > n.
 */
ssize_t q3_encode_getservers_resp(uint8_t *buf, size_t cap, const struct q3_srvlist *in,
				  size_t *taken);

/*
 * The request a client sends, from a struct q3_getservers: getserversExt
 * when flags has Q3_GS_EXT (game name required, then ipv4 / ipv6 as the
 * flags ask), getservers with the game name first when one is given
 * (DarkPlaces games), anonymous "getservers <protocol>" otherwise; then
 * empty, full and gametype=X as asked. q3_decode_getservers reads it back
 * to the same struct. Returns the length; -EINVAL for a missing or
 * non-printable game name, a game name of digits only in a getservers (it
 * would read as the protocol), a negative protocol or a bad game type;
 * -EMSGSIZE when it does not fit.
 */
int q3_encode_getservers(uint8_t *buf, size_t size, const struct q3_getservers *req);

/*
 * One datagram of an answer, checked whole before any entry is used:
 * "\xff\xff\xff\xffgetserversResponse" or "...getserversExtResponse", then
 * entries ('\\' + 4-byte IPv4 + port; '/' + 16-byte IPv6 + port in the Ext
 * answer only; big-endian), then optionally the mark "\\EOT\0\0\0" as the
 * datagram's last 7 bytes (dpmaster 2.x puts it on the last datagram of an
 * answer only; before 2.0, on every one).
 */
struct q3_getservers_resp {
	bool ext;               /* getserversExtResponse */
	bool eot;               /* the datagram ends with the mark */
	size_t n;               /* servers in it, the mark not counted */
	const uint8_t *entries; /* view into buf: the entries, mark excluded */
	size_t entries_len;
};

/*
 * Decodes one datagram of a getservers(Ext)Response. Returns 0; -EBADMSG
 * for anything else (no prefix or header, an entry cut short, a byte that
 * starts no entry, an IPv6 entry in a getserversResponse).
 */
int q3_decode_getservers_resp(const uint8_t *buf, size_t len, struct q3_getservers_resp *out);

/* The next server of a decoded datagram into *out; *off starts at 0 and is
 * advanced. Returns false after the last one. */
bool q3_getservers_resp_next(const struct q3_getservers_resp *r, size_t *off, struct q3_srv *out);

/* ---- Game declarations: --q3-game NAME:heartbeat=TAG[,...] ---- */

#define Q3_GAME_MAX_PROTOCOLS (16)

enum q3_game_option {
	Q3_GAME_SEND_EMPTY = 1U << 0, /* "send-empty-servers" */
	Q3_GAME_SEND_FULL = 1U << 1,  /* "send-full-servers" */
};

struct q3_game {
	char name[Q3_GAMENAME_MAX + 1];
	char heartbeat[Q3_TAG_MAX + 1];
	char flatline[Q3_TAG_MAX + 1]; /* "" when the game has none */
	int32_t protocols[Q3_GAME_MAX_PROTOCOLS];
	size_t nprotocols;
	unsigned options; /* enum q3_game_option */
};

/*
 * Parses NAME:heartbeat=TAG[,flatline=TAG][,protocols=N/N...]
 * [,options=send-empty-servers/send-full-servers]. The name and tags are
 * 1-63 printable characters without \ ; " : , = /; "DarkPlaces" is
 * reserved for the generic heartbeat. Returns 0, or -EINVAL with err set.
 */
int q3_parse_game_spec(const char *spec, struct q3_game *out, char *err, size_t errsize);

#endif
