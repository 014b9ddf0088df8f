/*
 * getinfo and getstatus answers spliced from a kept one: the server's own
 * answer to our challenge, with the asker's challenge put exactly where the
 * engine puts it.
 *
 * Every Quake 3 engine builds these answers the same way (ioquake3
 * code/server/sv_main.c SVC_Info and SVC_Status; ET 2.60b and ET: Legacy
 * alike): an infostring made with Info_SetValueForKey(info, "challenge",
 * Cmd_Argv(1)) among its other keys, sent as
 *
 *   "\xff\xff\xff\xffinfoResponse\n" infostring
 *   "\xff\xff\xff\xffstatusResponse\n" infostring "\n" players
 *
 * Where the pair lands depends on the engine, never on the challenge:
 * ioquake3 prepends every new pair, so the challenge, set first in
 * SVC_Info, ends last there and, set last in SVC_Status, comes first;
 * ET's Info_SetValueForKey appends instead. So an answer to our challenge
 * C0 found at some offset says where any other challenge goes: the same
 * bytes with C0 replaced. Captured from OpenArena 0.8.8 (ioquake3 1.36):
 *
 *   getinfo abc    -> infoResponse\n\voip\opus\...\gamename\Quake3Arena\challenge\abc
 *   getstatus abc  -> statusResponse\n\challenge\abc\com_protocol\71\...\n
 *
 * The engine's rules for the asker's challenge, applied here:
 * - Cmd_Argv(1) longer than 128 characters: no answer at all (ioquake3,
 *   ET: Legacy: "A maximum challenge length of 128");
 * - empty, or holding '\', ';' or '"': Info_SetValueForKey sets nothing,
 *   so the answer has no challenge pair ("getinfo a;b" is answered without
 *   one; '%' and bytes above 127 read as '.' by MSG_ReadStringLine);
 * - an infostring that would reach MAX_INFO_STRING (1024 bytes): the engine
 *   then drops the challenge or a later key, which one depending on the
 *   engine, so no answer is built (-ERANGE). An engine whose kept answer
 *   already passes 1024 evidently builds it in a BIG_INFO_STRING (8192),
 *   which becomes the limit.
 *
 * Pure functions over (buf, len): no I/O, clock or logging.
 */
#ifndef QSPLICE_H
#define QSPLICE_H

#include <stddef.h>
#include <stdint.h>

/* Longest Cmd_Argv(1) the engine answers. */
#define QSPLICE_CHALLENGE_MAX (128)
/* The engine's OOB print buffer is MAX_MSGLEN: no answer is longer. */
#define QSPLICE_MAX_ANSWER (16384)
#define QSPLICE_INFO_MAX   (1024) /* MAX_INFO_STRING */
#define QSPLICE_INFO_BIG   (8192) /* BIG_INFO_STRING */

enum qsplice_kind {
	QSPLICE_INFO,   /* getinfo -> infoResponse */
	QSPLICE_STATUS, /* getstatus -> statusResponse */
};

/* A checked kept answer: where its parts are, as offsets into it. */
struct qsplice_tmpl {
	enum qsplice_kind kind;
	size_t len;                /* the whole datagram */
	size_t info_off, info_len; /* the infostring */
	size_t pair_off, pair_len; /* "\challenge\C0" (inside the infostring) */
};

/*
 * Checks buf[0..len) as the kind of answer to a request whose challenge
 * was ours (1 to 128 characters, none of them '\', ';', '"' or below '!').
 * Returns 0 and fills t; -EBADMSG when buf is not such an answer (no
 * prefix or header, a NUL byte, longer than QSPLICE_MAX_ANSWER, an
 * infostring of BIG_INFO_STRING bytes or more); -ENOENT when its
 * infostring has no "challenge" key with our value, or that key twice
 * (Info_RemoveKey compares keys case-sensitively: "Challenge" is another
 * key); -EINVAL for an unusable ours.
 */
int qsplice_parse(const uint8_t *buf, size_t len, enum qsplice_kind kind, const char *ours,
		  size_t ours_len, struct qsplice_tmpl *t);

/*
 * Reads a request as the engine does (MSG_ReadStringLine, Cmd_TokenizeString;
 * common/q3): *kind from the command (case-insensitive), the challenge
 * Cmd_Argv(1) copied into ch (NUL-terminated; ch must hold
 * QSPLICE_CHALLENGE_MAX + 1 bytes) with its length in *ch_len. Returns 0;
 * -EBADMSG when buf is not getinfo or getstatus; -E2BIG when Cmd_Argv(1)
 * is longer than QSPLICE_CHALLENGE_MAX (the engine answers nothing).
 */
int qsplice_request(const uint8_t *buf, size_t len, enum qsplice_kind *kind,
		    char ch[static QSPLICE_CHALLENGE_MAX + 1], size_t *ch_len);

/*
 * The engine's answer to challenge ch (ch_len bytes, as qsplice_request
 * reads it) built from the kept answer tmpl checked by qsplice_parse into
 * t, written to out. Returns its length; -E2BIG for a challenge over 128
 * characters (no answer); -ERANGE when the infostring would reach the
 * engine's limit (see above); -EMSGSIZE when out is smaller than the
 * answer.
 */
int qsplice_build(const uint8_t *tmpl, const struct qsplice_tmpl *t, const char *ch, size_t ch_len,
		  uint8_t *out, size_t size);

/* The answer's length for challenge ch, or the same errors as
 * qsplice_build (but never -EMSGSIZE): what a budget check needs first. */
int qsplice_size(const struct qsplice_tmpl *t, const char *ch, size_t ch_len);

#endif
