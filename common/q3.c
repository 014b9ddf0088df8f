#include "q3.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "info.h"
#include "num.h"
#include "rd.h"

bool q3_is_oob(const uint8_t *buf, size_t len)
{
	return len >= Q3_OOB_PREFIX_LEN && buf[0] == 0xff && buf[1] == 0xff && buf[2] == 0xff &&
	       buf[3] == 0xff;
}

/*
 * MSG_ReadStringLine: bytes up to '\n', '\0' or the end of the packet, at most
 * 1023 of them; '%' becomes '.' ("translate all fmt spec to avoid crash
 * bugs") and so does anything above 127 ("don't allow higher ascii values").
 * line gets a NUL terminator; returns the line length.
 */
static size_t read_string_line(const uint8_t *p, size_t len, char *line, size_t *consumed)
{
	size_t l = 0, i = 0;

	while (i < len && l < Q3_MAX_STRING_CHARS - 1) {
		uint8_t c = p[i++];

		if (c == 0 || c == '\n')
			break;
		if (c == '%' || c > 127)
			c = '.';
		line[l++] = (char)c;
	}
	line[l] = '\0';
	*consumed = i;
	return l;
}

/*
 * Cmd_TokenizeString over a NUL-terminated line of bytes 1..127. When
 * only_first, it stops after the first token. Returns argc.
 */
static int tokenize(const char *text, struct q3_args *out, char *first, size_t first_size,
		    bool only_first)
{
	size_t o = 0;
	int argc = 0;

	for (;;) {
		size_t start;

		if (argc == Q3_MAX_TOKENS)
			return argc;
		/* Skip whitespace and comments. */
		for (;;) {
			while (*text != '\0' && *text <= ' ')
				text++;
			if (*text == '\0')
				return argc;
			if (text[0] == '/' && text[1] == '/')
				return argc;
			if (text[0] == '/' && text[1] == '*') {
				/* The engine starts matching "* /" at the
				 * opening '/', so "/ * /" closes itself. */
				while (*text != '\0' && (text[0] != '*' || text[1] != '/'))
					text++;
				if (*text == '\0')
					return argc;
				text += 2;
			} else {
				break;
			}
		}
		argc++;
		if (only_first) {
			size_t n = 0;

			if (*text == '"') {
				text++;
				while (*text != '\0' && *text != '"') {
					if (n + 1 < first_size)
						first[n++] = *text;
					text++;
				}
			} else {
				while (*text > ' ' && *text != '"' &&
				       !(text[0] == '/' && (text[1] == '/' || text[1] == '*'))) {
					if (n + 1 < first_size)
						first[n++] = *text;
					text++;
				}
			}
			first[n] = '\0';
			return argc;
		}
		start = o;
		out->argv[argc - 1] = (uint16_t)start;
		if (*text == '"') {
			text++;
			while (*text != '\0' && *text != '"')
				out->text[o++] = *text++;
			out->text[o++] = '\0';
			if (*text == '\0')
				return argc;
			text++;
			continue;
		}
		while (*text > ' ') {
			if (text[0] == '"')
				break;
			if (text[0] == '/' && (text[1] == '/' || text[1] == '*'))
				break;
			out->text[o++] = *text++;
		}
		out->text[o++] = '\0';
		if (*text == '\0')
			return argc;
	}
}

int q3_oob_tokenize(const uint8_t *buf, size_t len, struct q3_args *out)
{
	char line[Q3_MAX_STRING_CHARS];

	if (!q3_is_oob(buf, len))
		return -EBADMSG;
	read_string_line(buf + Q3_OOB_PREFIX_LEN, len - Q3_OOB_PREFIX_LEN, line, &out->consumed);
	out->argc = tokenize(line, out, NULL, 0, false);
	return out->argc;
}

const char *q3_argv(const struct q3_args *a, int i)
{
	if (i < 0 || i >= a->argc)
		return "";
	return a->text + a->argv[i];
}

int q3_oob_command(const uint8_t *buf, size_t len, char *tok, size_t size)
{
	char line[Q3_MAX_STRING_CHARS];
	size_t consumed;

	if (!q3_is_oob(buf, len))
		return -EBADMSG;
	tok[0] = '\0';
	read_string_line(buf + Q3_OOB_PREFIX_LEN, len - Q3_OOB_PREFIX_LEN, line, &consumed);
	if (tokenize(line, NULL, tok, size, true) == 0)
		return 0;
	return (int)strlen(tok);
}

bool q3_cmd_eq(const char *tok, const char *cmd)
{
	for (;; tok++, cmd++) {
		char a = *tok, b = *cmd;

		if (a >= 'A' && a <= 'Z')
			a = (char)(a - 'A' + 'a');
		if (b >= 'A' && b <= 'Z')
			b = (char)(b - 'A' + 'a');
		if (a != b)
			return false;
		if (a == '\0')
			return true;
	}
}

int q3_oob_build(uint8_t *buf, size_t size, const char *text, size_t text_len)
{
	if (size < Q3_OOB_PREFIX_LEN || text_len > size - Q3_OOB_PREFIX_LEN)
		return -EMSGSIZE;
	memset(buf, 0xff, Q3_OOB_PREFIX_LEN);
	memcpy(buf + Q3_OOB_PREFIX_LEN, text, text_len);
	return (int)(Q3_OOB_PREFIX_LEN + text_len);
}

/* ---- The master protocol ---- */

/*
 * dpmaster messages.c compares the bytes after the prefix with these
 * (strncmp, so case matters); "heartbeat", "getservers" and
 * "getserversExt" need the space that separates their arguments.
 */
static const struct {
	const char *text;
	enum q3_master_msg msg;
} master_cmds[] = {
	{"heartbeat ", Q3_MSG_HEARTBEAT},
	{"infoResponse\n", Q3_MSG_INFORESPONSE},
	{"getservers ", Q3_MSG_GETSERVERS},
	{"getserversExt ", Q3_MSG_GETSERVERSEXT},
};

static bool has_cmd(const uint8_t *buf, size_t len, const char *cmd)
{
	size_t n = strlen(cmd);

	return len - Q3_OOB_PREFIX_LEN >= n && memcmp(buf + Q3_OOB_PREFIX_LEN, cmd, n) == 0;
}

enum q3_master_msg q3_master_classify(const uint8_t *buf, size_t len)
{
	if (!q3_is_oob(buf, len))
		return Q3_MSG_NOT_OOB;
	for (size_t i = 0; i < sizeof(master_cmds) / sizeof(master_cmds[0]); i++) {
		if (has_cmd(buf, len, master_cmds[i].text))
			return master_cmds[i].msg;
	}
	return Q3_MSG_UNKNOWN;
}

/*
 * The arguments of a command line: from after the command text to '\n',
 * NUL or the end of the datagram.
 */
static struct rd args_of(const uint8_t *buf, size_t len, const char *cmd)
{
	size_t skip = Q3_OOB_PREFIX_LEN + strlen(cmd), n = 0;
	const uint8_t *p = buf + skip;

	while (n < len - skip && p[n] != '\n' && p[n] != '\0')
		n++;
	return rd_init(p, n);
}

/*
 * The next token (bytes > ' ') as a view. Returns 1, 0 at the end of the
 * line, -EBADMSG for a token with a byte above 126 (DEL, non-ASCII).
 */
static int next_tok(struct rd *r, const uint8_t **tok, size_t *tlen)
{
	size_t n = 0;

	while (r->left > 0 && r->p[0] <= ' ') {
		r->p++;
		r->left--;
	}
	if (r->left == 0)
		return 0;
	while (n < r->left && r->p[n] > ' ') {
		if (r->p[n] > 126)
			return -EBADMSG;
		n++;
	}
	*tok = rd_bytes(r, n);
	*tlen = n;
	return 1;
}

static bool tok_eq(const uint8_t *t, size_t tl, const char *s)
{
	return tl == strlen(s) && memcmp(t, s, tl) == 0;
}

/* Copies a token into a NUL-terminated buffer of size bytes; false if too long. */
static bool tok_copy(char *dst, size_t size, const uint8_t *t, size_t tl)
{
	if (tl >= size)
		return false;
	memcpy(dst, t, tl);
	dst[tl] = '\0';
	return true;
}

/*
 * A decimal number of 1-10 digits, nothing else (no sign, no spaces, no
 * 0x: dpmaster's strtol(..., 0) also took those), at most max. common/num
 * does the checking; the cap of 10 digits, leading zeros included, is this
 * codec's own rule.
 */
static int dec_u32(const uint8_t *s, size_t n, uint32_t max, uint32_t *out)
{
	int64_t v;
	int r;

	if (n > 10)
		return -EINVAL;
	r = num_parse((const char *)s, n, 0, max, 0, &v);
	if (r < 0)
		return r;
	*out = (uint32_t)v;
	return 0;
}

int q3_decode_heartbeat(const uint8_t *buf, size_t len, struct q3_heartbeat *out)
{
	struct rd r;
	const uint8_t *t;
	size_t tl;

	/* "heartbeat QuakeArena-1\n": the tag is the first token; dpmaster
	 * reads it with sscanf("%63s") and ignores the rest. */
	if (q3_master_classify(buf, len) != Q3_MSG_HEARTBEAT)
		return -EBADMSG;
	r = args_of(buf, len, "heartbeat ");
	if (next_tok(&r, &t, &tl) != 1 || !tok_copy(out->tag, sizeof(out->tag), t, tl))
		return -EBADMSG;
	return 0;
}

/* Q3A's shortcuts for gametype=X (techinfo 3.4). */
static const struct {
	const char *opt, *gametype;
} gametype_shortcuts[] = {
	{"ffa", "0"},
	{"tourney", "1"},
	{"team", "3"},
	{"ctf", "4"},
};

static int getservers_option(struct q3_getservers *out, const uint8_t *t, size_t tl)
{
	static const char gt[] = "gametype=";

	if (tok_eq(t, tl, "empty")) {
		out->flags |= Q3_GS_EMPTY;
		return 0;
	}
	if (tok_eq(t, tl, "full")) {
		out->flags |= Q3_GS_FULL;
		return 0;
	}
	for (size_t i = 0; i < sizeof(gametype_shortcuts) / sizeof(gametype_shortcuts[0]); i++) {
		if (tok_eq(t, tl, gametype_shortcuts[i].opt)) {
			snprintf(out->gametype, sizeof(out->gametype), "%s",
				 gametype_shortcuts[i].gametype);
			out->flags |= Q3_GS_GAMETYPE;
			return 0;
		}
	}
	if (tl >= sizeof(gt) - 1 && memcmp(t, gt, sizeof(gt) - 1) == 0) {
		/* dpmaster truncated a long one; a truncated filter would
		 * match the wrong servers, so we refuse it. */
		if (!tok_copy(out->gametype, sizeof(out->gametype), t + sizeof(gt) - 1,
			      tl - (sizeof(gt) - 1)))
			return -EBADMSG;
		out->flags |= Q3_GS_GAMETYPE;
		return 0;
	}
	if (out->flags & Q3_GS_EXT) {
		if (tok_eq(t, tl, "ipv4"))
			out->flags |= Q3_GS_IPV4;
		else if (tok_eq(t, tl, "ipv6"))
			out->flags |= Q3_GS_IPV6;
	}
	/* Anything else: an option of some other master; ignored. */
	return 0;
}

int q3_decode_getservers(const uint8_t *buf, size_t len, struct q3_getservers *out)
{
	enum q3_master_msg m = q3_master_classify(buf, len);
	const uint8_t *t;
	size_t tl;
	uint32_t proto;
	struct rd r;
	int k;

	memset(out, 0, sizeof(*out));
	if (m == Q3_MSG_GETSERVERS) {
		r = args_of(buf, len, "getservers ");
	} else if (m == Q3_MSG_GETSERVERSEXT) {
		r = args_of(buf, len, "getserversExt ");
		out->flags |= Q3_GS_EXT;
	} else {
		return -EBADMSG;
	}
	if (next_tok(&r, &t, &tl) != 1)
		return -EBADMSG;
	/*
	 * "getservers 68 empty full" (Q3, ET: anonymous) against
	 * "getservers Nexuiz 3 empty full" (DarkPlaces): a first argument
	 * that is a number is the protocol. getserversExt always names the
	 * game first.
	 */
	if ((out->flags & Q3_GS_EXT) || dec_u32(t, tl, INT32_MAX, &proto) < 0) {
		if (!tok_copy(out->gamename, sizeof(out->gamename), t, tl))
			return -EBADMSG;
		if (next_tok(&r, &t, &tl) != 1 || dec_u32(t, tl, INT32_MAX, &proto) < 0)
			return -EBADMSG;
	}
	out->protocol = (int32_t)proto;
	while ((k = next_tok(&r, &t, &tl)) == 1) {
		if (getservers_option(out, t, tl) < 0)
			return -EBADMSG;
	}
	if (k < 0)
		return -EBADMSG;
	/* getservers lists IPv4 only; getserversExt without ipv4/ipv6 both. */
	if (!(out->flags & Q3_GS_EXT))
		out->flags = (out->flags & ~(unsigned)Q3_GS_IPV6) | Q3_GS_IPV4;
	else if (!(out->flags & (Q3_GS_IPV4 | Q3_GS_IPV6)))
		out->flags |= Q3_GS_IPV4 | Q3_GS_IPV6;
	return 0;
}

static bool key_is(const char *k, size_t kl, const char *name)
{
	size_t n = strlen(name);

	if (kl != n)
		return false;
	for (size_t i = 0; i < n; i++) {
		char a = k[i];

		if (a >= 'A' && a <= 'Z')
			a = (char)(a - 'A' + 'a');
		if (a != name[i])
			return false;
	}
	return true;
}

/* A game name or type: printable ASCII, no whitespace ("must not contain
 * whitespaces", techinfo 3.3). */
static bool printable_word(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] > 126)
			return false;
	}
	return true;
}

enum info_field {
	F_CHALLENGE,
	F_PROTOCOL,
	F_MAXCLIENTS,
	F_CLIENTS,
	F_GAMENAME,
	F_GAMETYPE,
	F_HOSTNAME,
	F_MAPNAME,
	F_N
};

static const char *const info_keys[F_N] = {
	"challenge", "protocol", "sv_maxclients", "clients",
	"gamename",  "gametype", "hostname",      "mapname",
};

static bool is_alnum(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/*
 * A display copy of s[0..n): printable ASCII only (anything else becomes
 * '?'), ioquake3's colour codes ('^' and an alphanumeric) dropped, spaces
 * at either end trimmed, cut at size - 1.
 */
static void display_copy(char *dst, size_t size, const char *s, size_t n)
{
	size_t o = 0;

	for (size_t i = 0; i < n && o + 1 < size; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '^' && i + 1 < n && is_alnum((unsigned char)s[i + 1])) {
			i++;
			continue;
		}
		if (c == ' ' && o == 0)
			continue;
		dst[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	while (o > 0 && dst[o - 1] == ' ')
		o--;
	dst[o] = '\0';
}

int q3_decode_inforesponse(const uint8_t *buf, size_t len, struct q3_inforesponse *out)
{
	static const char cmd[] = "infoResponse\n";
	const char *s, *val[F_N] = {NULL}, *k, *v;
	size_t vlen[F_N] = {0}, kl, vl;
	struct info_iter it;
	uint32_t u;

	memset(out, 0, sizeof(*out));
	if (q3_master_classify(buf, len) != Q3_MSG_INFORESPONSE)
		return -EBADMSG;
	/*
	 * "infoResponse\n\\sv_maxclients\\8\\clients\\0\\...": the rest of
	 * the datagram is the infostring (to a NUL). One pass; the first
	 * occurrence of a key wins, keys compare case-insensitively
	 * (Info_ValueForKey).
	 */
	s = (const char *)buf + Q3_OOB_PREFIX_LEN + sizeof(cmd) - 1;
	if (info_iter_init(&it, s, len - (Q3_OOB_PREFIX_LEN + sizeof(cmd) - 1)) < 0) {
		out->error = Q3_INFO_TOO_LONG;
		return -EPROTO;
	}
	while (info_next(&it, &k, &kl, &v, &vl)) {
		for (int f = 0; f < F_N; f++) {
			if (val[f] == NULL && key_is(k, kl, info_keys[f])) {
				val[f] = v;
				vlen[f] = vl;
				break;
			}
		}
	}
	/* The checks in dpmaster's order (HandleInfoResponse). */
	if (val[F_CHALLENGE] == NULL) {
		out->error = Q3_INFO_NO_CHALLENGE;
		return -EPROTO;
	}
	out->challenge = val[F_CHALLENGE];
	out->challenge_len = vlen[F_CHALLENGE];
	if (val[F_PROTOCOL] == NULL ||
	    dec_u32((const uint8_t *)val[F_PROTOCOL], vlen[F_PROTOCOL], INT32_MAX, &u) < 0) {
		out->error = Q3_INFO_BAD_PROTOCOL;
		return -EPROTO;
	}
	out->protocol = (int32_t)u;
	/* No gametype: "0" (techinfo 3.3). */
	if (val[F_GAMETYPE] == NULL) {
		out->gametype[0] = '0';
	} else if (!printable_word(val[F_GAMETYPE], vlen[F_GAMETYPE]) ||
		   !tok_copy(out->gametype, sizeof(out->gametype), (const uint8_t *)val[F_GAMETYPE],
			     vlen[F_GAMETYPE])) {
		out->error = Q3_INFO_BAD_GAMETYPE;
		return -EPROTO;
	}
	/* "sv_maxclients ... must not be 0". */
	if (val[F_MAXCLIENTS] == NULL ||
	    dec_u32((const uint8_t *)val[F_MAXCLIENTS], vlen[F_MAXCLIENTS], INT32_MAX,
		    &out->maxclients) < 0 ||
	    out->maxclients == 0) {
		out->error = Q3_INFO_BAD_MAXCLIENTS;
		return -EPROTO;
	}
	if (val[F_CLIENTS] == NULL || dec_u32((const uint8_t *)val[F_CLIENTS], vlen[F_CLIENTS],
					      INT32_MAX, &out->clients) < 0) {
		out->error = Q3_INFO_BAD_CLIENTS;
		return -EPROTO;
	}
	if (val[F_GAMENAME] != NULL) {
		if (vlen[F_GAMENAME] == 0 || !printable_word(val[F_GAMENAME], vlen[F_GAMENAME]) ||
		    !tok_copy(out->gamename, sizeof(out->gamename),
			      (const uint8_t *)val[F_GAMENAME], vlen[F_GAMENAME])) {
			out->error = Q3_INFO_BAD_GAMENAME;
			return -EPROTO;
		}
		out->has_gamename = true;
	}
	if (val[F_HOSTNAME] != NULL)
		display_copy(out->hostname, sizeof(out->hostname), val[F_HOSTNAME],
			     vlen[F_HOSTNAME]);
	if (val[F_MAPNAME] != NULL)
		display_copy(out->mapname, sizeof(out->mapname), val[F_MAPNAME], vlen[F_MAPNAME]);
	return 0;
}

const char *q3_info_error_str(enum q3_info_error e)
{
	switch (e) {
	case Q3_INFO_OK:
		return "ok";
	case Q3_INFO_TOO_LONG:
		return "info_too_long";
	case Q3_INFO_NO_CHALLENGE:
		return "no_challenge";
	case Q3_INFO_BAD_PROTOCOL:
		return "bad_protocol";
	case Q3_INFO_BAD_MAXCLIENTS:
		return "bad_maxclients";
	case Q3_INFO_BAD_CLIENTS:
		return "bad_clients";
	case Q3_INFO_BAD_GAMENAME:
		return "bad_gamename";
	case Q3_INFO_BAD_GAMETYPE:
		return "bad_gametype";
	}
	return "unknown";
}

/* "All printable characters but 5 are allowed ... from ASCII code 33 to
 * 126. The 5 exceptions are characters '\', '/', ';', '"' and '%'." */
static bool challenge_char_ok(unsigned c)
{
	return c >= 33 && c <= 126 && c != '\\' && c != '/' && c != ';' && c != '"' && c != '%';
}

#define CHALLENGE_ALPHABET (94 - 5)

static char challenge_char(unsigned idx)
{
	for (unsigned c = 33;; c++) {
		if (challenge_char_ok(c) && idx-- == 0)
			return (char)c;
	}
}

size_t q3_challenge_make(const uint8_t rnd[static Q3_CHALLENGE_RND],
			 char out[static Q3_CHALLENGE_MAX + 1])
{
	size_t n = Q3_CHALLENGE_MIN + rnd[0] % (Q3_CHALLENGE_MAX - Q3_CHALLENGE_MIN + 1);

	/* 16 random bits per character: the modulo bias is 32/65536. */
	for (size_t i = 0; i < n; i++) {
		unsigned v = (unsigned)rnd[1 + 2 * i] << 8 | rnd[2 + 2 * i];

		out[i] = challenge_char(v % CHALLENGE_ALPHABET);
	}
	out[n] = '\0';
	return n;
}

bool q3_challenge_valid(const char *s, size_t len)
{
	if (len < Q3_CHALLENGE_MIN || len > Q3_CHALLENGE_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (!challenge_char_ok((unsigned char)s[i]))
			return false;
	}
	return true;
}

int q3_encode_getinfo(uint8_t *buf, size_t size, const char *challenge, size_t challenge_len)
{
	static const char cmd[] = "getinfo ";
	struct wr w = wr_init(buf, size);

	/* "\xff\xff\xff\xffgetinfo A_ch4Lleng3" - no newline, as dpmaster. */
	wr_be32(&w, 0xffffffffU);
	wr_bytes(&w, cmd, sizeof(cmd) - 1);
	wr_bytes(&w, challenge, challenge_len);
	if (w.bad)
		return -EMSGSIZE;
	return (int)w.len;
}

/* "\\EOT\0\0\0": a fake server that ends the list. */
static const uint8_t eot_mark[] = {'\\', 'E', 'O', 'T', 0, 0, 0};

#define ENTRY_V4 (1 + 4 + 2)
#define ENTRY_V6 (1 + 16 + 2)

ssize_t q3_encode_getservers_resp(uint8_t *buf, size_t cap, const struct q3_srvlist *in,
				  size_t *taken)
{
	const char *hdr = in->ext ? "getserversExtResponse" : "getserversResponse";
	size_t hlen = Q3_OOB_PREFIX_LEN + strlen(hdr);
	struct wr w;

	if (*taken > in->n)
		return -EINVAL;
	if (cap < hlen + ENTRY_V6)
		return -EMSGSIZE;
	w = wr_init(buf, cap);
	wr_be32(&w, 0xffffffffU);
	wr_str(&w, hdr);
	/* Room is checked before each entry (dpmaster HandleGetServers). */
	for (; *taken < in->n; (*taken)++) {
		const struct q3_srv *s = &in->v[*taken];

		if (s->v6 && !in->ext)
			return -EINVAL;
		if ((s->v6 ? ENTRY_V6 : ENTRY_V4) > wr_room(&w))
			return (ssize_t)w.len;
		wr_u8(&w, s->v6 ? '/' : '\\');
		wr_bytes(&w, s->ip, s->v6 ? 16 : 4);
		wr_be16(&w, s->port);
	}
	/* The mark only at the end of the last datagram; if it does not
	 * fit, it goes alone in one more. */
	if (sizeof(eot_mark) > wr_room(&w))
		return (ssize_t)w.len;
	wr_bytes(&w, eot_mark, sizeof(eot_mark));
	*taken = in->n + 1;
	return (ssize_t)w.len;
}

/* True when t[0..n) is digits only: a getservers would read it as the
 * protocol (q3_decode_getservers' rule). */
static bool all_digits(const char *t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (t[i] < '0' || t[i] > '9')
			return false;
	}
	return n > 0;
}

int q3_encode_getservers(uint8_t *buf, size_t size, const struct q3_getservers *req)
{
	bool ext = (req->flags & Q3_GS_EXT) != 0;
	size_t gl = strnlen(req->gamename, sizeof(req->gamename));
	size_t tl = strnlen(req->gametype, sizeof(req->gametype));
	char num[16];
	struct wr w = wr_init(buf, size);

	if (gl == sizeof(req->gamename) || !printable_word(req->gamename, gl) || (ext && gl == 0) ||
	    (!ext && all_digits(req->gamename, gl)) || req->protocol < 0)
		return -EINVAL;
	if ((req->flags & Q3_GS_GAMETYPE) &&
	    (tl == sizeof(req->gametype) || !printable_word(req->gametype, tl)))
		return -EINVAL;
	/* "getservers 71 empty full", "getservers Nexuiz 3 empty full",
	 * "getserversExt Quake3Arena 71 empty full ipv4 ipv6" (techinfo 3.4,
	 * 3.6; dpmaster messages.c samples). */
	wr_be32(&w, 0xffffffffU);
	wr_str(&w, ext ? "getserversExt " : "getservers ");
	if (gl > 0) {
		wr_bytes(&w, req->gamename, gl);
		wr_u8(&w, ' ');
	}
	snprintf(num, sizeof(num), "%ld", (long)req->protocol);
	wr_str(&w, num);
	if (req->flags & Q3_GS_EMPTY)
		wr_str(&w, " empty");
	if (req->flags & Q3_GS_FULL)
		wr_str(&w, " full");
	if (req->flags & Q3_GS_GAMETYPE) {
		wr_str(&w, " gametype=");
		wr_bytes(&w, req->gametype, tl);
	}
	/* Both flags are written out: a master that knows one option only
	 * still reads the other. */
	if (ext && (req->flags & Q3_GS_IPV4))
		wr_str(&w, " ipv4");
	if (ext && (req->flags & Q3_GS_IPV6))
		wr_str(&w, " ipv6");
	if (w.bad)
		return -EMSGSIZE;
	return (int)w.len;
}

int q3_decode_getservers_resp(const uint8_t *buf, size_t len, struct q3_getservers_resp *out)
{
	static const char hdr[] = "getserversResponse", hdr_ext[] = "getserversExtResponse";
	struct rd r;
	size_t skip;

	memset(out, 0, sizeof(*out));
	if (!q3_is_oob(buf, len))
		return -EBADMSG;
	if (has_cmd(buf, len, hdr_ext)) {
		out->ext = true;
		skip = Q3_OOB_PREFIX_LEN + sizeof(hdr_ext) - 1;
	} else if (has_cmd(buf, len, hdr)) {
		skip = Q3_OOB_PREFIX_LEN + sizeof(hdr) - 1;
	} else {
		return -EBADMSG;
	}
	r = rd_init(buf + skip, len - skip);
	out->entries = r.p;
	while (r.left > 0) {
		uint8_t c = r.p[0];

		/* The mark is a fake IPv4 server "EOT\0\0\0" (techinfo 3.5),
		 * taken as the mark only at the very end, as clients do. */
		if (r.left == sizeof(eot_mark) && memcmp(r.p, eot_mark, sizeof(eot_mark)) == 0) {
			out->eot = true;
			break;
		}
		if (c == '\\' && r.left >= ENTRY_V4) {
			(void)rd_bytes(&r, ENTRY_V4);
		} else if (c == '/' && out->ext && r.left >= ENTRY_V6) {
			(void)rd_bytes(&r, ENTRY_V6);
		} else {
			memset(out, 0, sizeof(*out));
			return -EBADMSG;
		}
		out->n++;
	}
	out->entries_len = (size_t)(r.p - out->entries);
	return 0;
}

bool q3_getservers_resp_next(const struct q3_getservers_resp *r, size_t *off, struct q3_srv *out)
{
	struct rd rd;
	const uint8_t *ip;
	size_t iplen;

	if (*off >= r->entries_len)
		return false;
	rd = rd_init(r->entries + *off, r->entries_len - *off);
	memset(out, 0, sizeof(*out));
	out->v6 = rd_u8(&rd) == '/';
	iplen = out->v6 ? 16 : 4;
	ip = rd_bytes(&rd, iplen);
	out->port = rd_be16(&rd);
	/* Only a decoded datagram gets here: its entries are whole. */
	if (rd.bad)
		return false;
	memcpy(out->ip, ip, iplen);
	*off = r->entries_len - rd.left;
	return true;
}

/* ---- Game declarations ---- */

/* A name or tag in a --q3-game spec. */
static bool spec_word_ok(const char *s, size_t n)
{
	if (n == 0 || n > Q3_TAG_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c <= ' ' || c > 126 || strchr("\\;\":,=/", c) != NULL)
			return false;
	}
	return true;
}

static int spec_fail(char *err, size_t errsize, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int spec_fail(char *err, size_t errsize, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errsize, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* A bounded "%.*s" length for error messages. */
static int shown(size_t n)
{
	return n > 64 ? 64 : (int)n;
}

static int spec_tag(char *dst, const char *v, size_t vl, const char *key, char *err, size_t errsize)
{
	if (!spec_word_ok(v, vl))
		return spec_fail(err, errsize, "%s: a tag is 1-63 printable characters", key);
	if (vl == strlen(Q3_HEARTBEAT_GENERIC) && memcmp(v, Q3_HEARTBEAT_GENERIC, vl) == 0)
		return spec_fail(err, errsize, "%s: DarkPlaces is the generic heartbeat", key);
	memcpy(dst, v, vl);
	dst[vl] = '\0';
	return 0;
}

static int spec_protocols(struct q3_game *g, const char *v, size_t vl, char *err, size_t errsize)
{
	size_t i = 0;

	while (i <= vl) {
		size_t j = i;
		uint32_t p;

		while (j < vl && v[j] != '/')
			j++;
		if (dec_u32((const uint8_t *)v + i, j - i, INT32_MAX, &p) < 0)
			return spec_fail(err, errsize, "protocols: '%.*s' is not a number",
					 shown(j - i), v + i);
		for (size_t k = 0; k < g->nprotocols; k++) {
			if (g->protocols[k] == (int32_t)p)
				return spec_fail(err, errsize, "protocols: %.*s given twice",
						 shown(j - i), v + i);
		}
		if (g->nprotocols == Q3_GAME_MAX_PROTOCOLS) {
			snprintf(err, errsize, "protocols: at most %d", Q3_GAME_MAX_PROTOCOLS);
			return -EINVAL;
		}
		g->protocols[g->nprotocols++] = (int32_t)p;
		i = j + 1;
	}
	return 0;
}

static int spec_options(struct q3_game *g, const char *v, size_t vl, char *err, size_t errsize)
{
	size_t i = 0;

	while (i <= vl) {
		size_t j = i;

		while (j < vl && v[j] != '/')
			j++;
		if (j - i == 18 && memcmp(v + i, "send-empty-servers", 18) == 0)
			g->options |= Q3_GAME_SEND_EMPTY;
		else if (j - i == 17 && memcmp(v + i, "send-full-servers", 17) == 0)
			g->options |= Q3_GAME_SEND_FULL;
		else
			return spec_fail(err, errsize,
					 "options: '%.*s' is not send-empty-servers or "
					 "send-full-servers",
					 shown(j - i), v + i);
		i = j + 1;
	}
	return 0;
}

int q3_parse_game_spec(const char *spec, struct q3_game *out, char *err, size_t errsize)
{
	const char *colon = strchr(spec, ':'), *p;
	bool seen[4] = {false};
	int r;

	memset(out, 0, sizeof(*out));
	if (colon == NULL) {
		snprintf(err, errsize, "expected NAME:heartbeat=TAG[,...]");
		return -EINVAL;
	}
	if (!spec_word_ok(spec, (size_t)(colon - spec))) {
		snprintf(err, errsize,
			 "the game name is 1-63 printable characters without spaces, "
			 "backslash, semicolon, double quote, colon, comma, = or /");
		return -EINVAL;
	}
	memcpy(out->name, spec, (size_t)(colon - spec));
	out->name[colon - spec] = '\0';
	p = colon + 1;
	for (;;) {
		static const char *const keys[4] = {"heartbeat", "flatline", "protocols",
						    "options"};
		const char *comma = strchr(p, ','), *eq;
		size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p), kl;
		int key = -1;

		eq = memchr(p, '=', n);
		if (eq == NULL || eq == p || (size_t)(eq - p) + 1 == n)
			return spec_fail(err, errsize, "'%.*s': expected KEY=VALUE", shown(n), p);
		kl = (size_t)(eq - p);
		for (int k = 0; k < 4; k++) {
			if (kl == strlen(keys[k]) && memcmp(p, keys[k], kl) == 0)
				key = k;
		}
		if (key < 0)
			return spec_fail(err, errsize,
					 "unknown property '%.*s' (heartbeat, flatline, "
					 "protocols, options)",
					 shown(kl), p);
		if (seen[key])
			return spec_fail(err, errsize, "%.*s given twice", shown(kl), p);
		seen[key] = true;
		switch (key) {
		case 0:
			r = spec_tag(out->heartbeat, eq + 1, n - kl - 1, "heartbeat", err, errsize);
			break;
		case 1:
			r = spec_tag(out->flatline, eq + 1, n - kl - 1, "flatline", err, errsize);
			break;
		case 2:
			r = spec_protocols(out, eq + 1, n - kl - 1, err, errsize);
			break;
		default:
			r = spec_options(out, eq + 1, n - kl - 1, err, errsize);
			break;
		}
		if (r < 0)
			return r;
		if (comma == NULL)
			break;
		p = comma + 1;
	}
	if (!seen[0]) {
		snprintf(err, errsize, "heartbeat=TAG is required");
		return -EINVAL;
	}
	if (strcmp(out->heartbeat, out->flatline) == 0) {
		snprintf(err, errsize, "the heartbeat and flatline tags must differ");
		return -EINVAL;
	}
	return 0;
}
