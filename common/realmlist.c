#include "realmlist.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "rd.h"

/*
 * Server-to-client auth commands (eAuthCmd in AzerothCore's and
 * TrinityCore's authserver AuthSession.cpp). XFER_* (0x30-0x34, patching)
 * are not framed: neither core sends them, and a stream that has them is
 * given up on.
 */
#define LOGON_CHALLENGE     (0x00)
#define LOGON_PROOF         (0x01)
#define RECONNECT_CHALLENGE (0x02)
#define RECONNECT_PROOF     (0x03)

/* LogonChallengeCallback's security flags and what each appends. */
#define SEC_PIN        (0x01) /* u32 grid seed + 16-byte salt */
#define SEC_MATRIX     (0x02) /* 4 x u8 + u64 */
#define SEC_TOKEN      (0x04) /* u8 */
#define SEC_KNOWN      (SEC_PIN | SEC_MATRIX | SEC_TOKEN)
#define SEC_PIN_LEN    (4 + 16)
#define SEC_MATRIX_LEN (4 + 8)
#define SEC_TOKEN_LEN  (1)

/* The challenge's fixed parts: cmd, 0x00, error, then B[32] before g_len;
 * s[32] and the version challenge[16] between N and the flags. */
#define CHALLENGE_HDR   (3)
#define CHALLENGE_B     (32)
#define CHALLENGE_S_VER (32 + 16)
/* The longest challenge: g and N of 255 bytes each and every flag. */
#define CHALLENGE_MAX                                                                              \
	(CHALLENGE_HDR + CHALLENGE_B + 1 + 255 + 1 + 255 + CHALLENGE_S_VER + 1 + SEC_PIN_LEN +     \
	 SEC_MATRIX_LEN + SEC_TOKEN_LEN)

/* sAuthLogonProof_S (2.x/3.x clients): cmd, error, M2[20], AccountFlags
 * u32, SurveyId u32, LoginFlags u16. */
#define LOGON_PROOF_LEN (1 + 1 + 20 + 4 + 4 + 2)
/* ReconnectChallengeCallback: cmd, 0x00, 16 random bytes, then 16 bytes
 * (AzerothCore's version challenge, TrinityCore's zeros). */
#define RECONNECT_CHALLENGE_LEN (1 + 1 + 16 + 16)
/* HandleReconnectProof's success: cmd, 0x00, u16 LoginFlags. */
#define RECONNECT_PROOF_LEN (1 + 1 + 2)

/*
 * REALM_LIST (RealmListCallback, 2.x/3.x clients):
 *   0x10 | body length u16 LE | u32 0 | realm count u16 LE | realms
 *   | 0x10 0x00
 * a realm: type u8 | lock u8 | flags u8 | name\0 | address\0
 *   | population float32 | characters u8 | timezone u8 | id u8
 *   | flags & REALM_FLAG_SPECIFYBUILD: major u8, minor u8, bugfix u8, build u16
 * The body length counts everything after the 3-byte header.
 */
#define LIST_HDR           (3)
#define LIST_BODY_MAX      (65535)
#define REALM_FIXED        (3)
#define REALM_TAIL         (4 + 1 + 1 + 1)
#define REALM_MIN          (REALM_FIXED + 1 + 1 + REALM_TAIL)
#define REALM_SPECIFYBUILD (0x04)
#define REALM_BUILD_LEN    (1 + 1 + 1 + 2)

enum mode {
	FRAMING,
	CLOSED, /* a failure answer ended the session: the rest goes as it comes */
	DESYNC, /* not understood: the rest goes as it comes */
};

enum verdict {
	NEED,    /* *size: the bytes needed to know more */
	WHOLE,   /* *size: the message's length */
	FAILURE, /* an answer with an error: the session ends here */
	UNKNOWN, /* an opcode or layout we do not know */
};

struct realmlist {
	char addr[REALMLIST_ADDR_MAX + 1];
	size_t addr_len;
	enum mode mode;
	/* The message being collected: in head until it is known to be a
	 * REALM_LIST, then all of it in list (allocated to its length). */
	uint8_t head[CHALLENGE_MAX];
	uint8_t *list;
	size_t have; /* bytes of it held */
	size_t need; /* its length once known, else 0 */
	struct realmlist_stats stats;
};

/* Where the first realm's address sits in a well-formed REALM_LIST. */
struct list_view {
	size_t body_len, count, addr_off, addr_len;
};

static enum verdict need(size_t *size, size_t n)
{
	*size = n;
	return NEED;
}

/*
 * Frames the message at p (n bytes of it so far). Failure answers are not
 * sized: their length depends on the core and the error (AzerothCore's
 * WOW_FAIL_VERSION_INVALID proof is 2 bytes, its UNKNOWN_ACCOUNT one 4;
 * TrinityCore 2017 sends a failed challenge with the whole success body),
 * and both cores set STATUS_CLOSED before answering, so nothing follows.
 */
static enum verdict judge(const uint8_t *p, size_t n, size_t *size)
{
	size_t off;
	unsigned flags;

	if (n < 1)
		return need(size, 1);
	switch (p[0]) {
	case LOGON_CHALLENGE:
		/* cmd | 0x00 | error: both cores write the 0x00. */
		if (n < CHALLENGE_HDR)
			return need(size, CHALLENGE_HDR);
		if (p[1] != 0)
			return UNKNOWN;
		if (p[2] != 0)
			return FAILURE;
		off = CHALLENGE_HDR + CHALLENGE_B; /* g_len */
		if (n <= off)
			return need(size, off + 1);
		off += 1 + (size_t)p[off]; /* N_len */
		if (n <= off)
			return need(size, off + 1);
		off += 1 + (size_t)p[off] + CHALLENGE_S_VER; /* security flags */
		if (n <= off)
			return need(size, off + 1);
		flags = p[off];
		if ((flags & ~(unsigned)SEC_KNOWN) != 0)
			return UNKNOWN;
		*size = off + 1;
		if (flags & SEC_PIN)
			*size += SEC_PIN_LEN;
		if (flags & SEC_MATRIX)
			*size += SEC_MATRIX_LEN;
		if (flags & SEC_TOKEN)
			*size += SEC_TOKEN_LEN;
		return WHOLE;
	case LOGON_PROOF:
		if (n < 2)
			return need(size, 2);
		if (p[1] != 0)
			return FAILURE;
		*size = LOGON_PROOF_LEN;
		return WHOLE;
	case RECONNECT_CHALLENGE:
		if (n < 2)
			return need(size, 2);
		if (p[1] != 0)
			return FAILURE;
		*size = RECONNECT_CHALLENGE_LEN;
		return WHOLE;
	case RECONNECT_PROOF:
		if (n < 2)
			return need(size, 2);
		if (p[1] != 0)
			return FAILURE;
		*size = RECONNECT_PROOF_LEN;
		return WHOLE;
	case REALMLIST_CMD:
		if (n < LIST_HDR)
			return need(size, LIST_HDR);
		*size = LIST_HDR + ((size_t)p[1] | (size_t)p[2] << 8);
		return WHOLE;
	default:
		return UNKNOWN;
	}
}

static uint16_t rd_le16(struct rd *r)
{
	const uint8_t *b = rd_bytes(r, 2);

	return b == NULL ? 0 : (uint16_t)((unsigned)b[0] | (unsigned)b[1] << 8);
}

/* Skips a NUL-terminated string; its length (without the NUL) in *n. */
static void rd_cstr(struct rd *r, size_t *n)
{
	const uint8_t *nul = r->left > 0 ? memchr(r->p, 0, r->left) : NULL;

	if (nul == NULL) {
		r->bad = true;
		r->left = 0;
		*n = 0;
		return;
	}
	*n = (size_t)(nul - r->p);
	rd_bytes(r, *n + 1);
}

/* Checks the layout above; 0 with *lv, or -EBADMSG. */
static int parse_list(const uint8_t *msg, size_t len, struct list_view *lv)
{
	struct rd r = rd_init(msg, len);
	uint8_t cmd = rd_u8(&r);
	size_t body = rd_le16(&r), count;

	if (r.bad || cmd != REALMLIST_CMD || body != r.left)
		return -EBADMSG;
	rd_bytes(&r, 4);
	count = rd_le16(&r);
	if (r.bad)
		return -EBADMSG;
	/* A count the body cannot hold is refused before the walk. */
	if (count > r.left / REALM_MIN)
		return -EBADMSG;
	lv->body_len = body;
	lv->count = count;
	lv->addr_off = lv->addr_len = 0;
	for (size_t i = 0; i < count; i++) {
		const uint8_t *fixed = rd_bytes(&r, REALM_FIXED);
		size_t name_len, addr_len, addr_off;

		if (fixed == NULL)
			return -EBADMSG;
		rd_cstr(&r, &name_len);
		addr_off = len - r.left;
		rd_cstr(&r, &addr_len);
		rd_bytes(&r, REALM_TAIL);
		if (fixed[2] & REALM_SPECIFYBUILD)
			rd_bytes(&r, REALM_BUILD_LEN);
		if (r.bad)
			return -EBADMSG;
		if (i == 0) {
			lv->addr_off = addr_off;
			lv->addr_len = addr_len;
		}
	}
	/* The footer, and nothing after it. */
	if (rd_u8(&r) != 0x10 || rd_u8(&r) != 0x00 || r.bad || r.left != 0)
		return -EBADMSG;
	return 0;
}

/*
 * Plans the rewrite of msg with an address of alen bytes: 0 with hdr (the
 * new 3-byte header) and *lv when there is an address to replace, 1 for a
 * list of 0 realms (nothing to change), -EBADMSG.
 */
static int plan(const uint8_t *msg, size_t len, size_t alen, struct list_view *lv,
		uint8_t hdr[static LIST_HDR])
{
	size_t body;

	if (parse_list(msg, len, lv) < 0)
		return -EBADMSG;
	if (lv->count == 0)
		return 1;
	/* The old address is part of the body, so this cannot wrap. */
	body = lv->body_len - lv->addr_len + alen;
	if (body > LIST_BODY_MAX)
		return -EBADMSG;
	hdr[0] = REALMLIST_CMD;
	hdr[1] = (uint8_t)body;
	hdr[2] = (uint8_t)(body >> 8);
	return 0;
}

static size_t addr_len(const char *addr)
{
	return addr == NULL ? 0 : strnlen(addr, REALMLIST_ADDR_MAX + 1);
}

int realmlist_rewrite(const uint8_t *msg, size_t len, const char *new_addr, uint8_t *out,
		      size_t size)
{
	size_t alen = addr_len(new_addr), tail;
	struct list_view lv;
	uint8_t hdr[LIST_HDR];
	struct wr w = wr_init(out, size);
	int ret;

	if (alen == 0 || alen > REALMLIST_ADDR_MAX)
		return -EINVAL;
	ret = plan(msg, len, alen, &lv, hdr);
	if (ret < 0)
		return ret;
	if (ret == 1) {
		wr_bytes(&w, msg, len);
		return w.bad ? -ENOSPC : (int)w.len;
	}
	tail = lv.addr_off + lv.addr_len;
	wr_bytes(&w, hdr, LIST_HDR);
	wr_bytes(&w, msg + LIST_HDR, lv.addr_off - LIST_HDR);
	wr_bytes(&w, new_addr, alen);
	wr_bytes(&w, msg + tail, len - tail);
	return w.bad ? -ENOSPC : (int)w.len;
}

static void append(struct strbuf *out, const uint8_t *p, size_t n)
{
	if (n > 0)
		strbuf_append(out, (const char *)p, n);
}

/* A whole REALM_LIST: rewritten in four appends, or forwarded untouched. */
static void emit_list(struct realmlist *rl, const uint8_t *msg, size_t len, struct strbuf *out)
{
	struct list_view lv;
	uint8_t hdr[LIST_HDR];
	size_t tail;
	int ret = plan(msg, len, rl->addr_len, &lv, hdr);

	if (ret != 0) {
		if (ret < 0)
			rl->stats.malformed++;
		append(out, msg, len);
		return;
	}
	tail = lv.addr_off + lv.addr_len;
	append(out, hdr, LIST_HDR);
	append(out, msg + LIST_HDR, lv.addr_off - LIST_HDR);
	append(out, (const uint8_t *)rl->addr, rl->addr_len);
	append(out, msg + tail, len - tail);
	rl->stats.rewritten++;
}

static void stop(struct realmlist *rl, enum verdict v)
{
	if (v == UNKNOWN) {
		rl->mode = DESYNC;
		rl->stats.desync++;
	} else {
		rl->mode = CLOSED;
	}
}

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

/*
 * Moves bytes of (p, n) into the held message until it is whole (then
 * emits it and holds nothing), framing ends, or p runs out. Returns the
 * bytes taken; the caller forwards the rest as the mode says.
 */
static size_t collect(struct realmlist *rl, const uint8_t *p, size_t n, struct strbuf *out)
{
	size_t took = 0, k, size;
	uint8_t *buf;

	while (rl->need == 0) {
		enum verdict v = judge(rl->head, rl->have, &size);

		if (v == NEED) {
			if (took == n)
				return took;
			k = min_size(size - rl->have, n - took);
			memcpy(rl->head + rl->have, p + took, k);
			rl->have += k;
			took += k;
			continue;
		}
		/* judge never sizes a non-REALM_LIST past CHALLENGE_MAX; were
		 * it to, the stream would be given up on, not overrun. */
		if (v == WHOLE && rl->head[0] != REALMLIST_CMD && size > sizeof(rl->head))
			v = UNKNOWN;
		if (v != WHOLE) {
			append(out, rl->head, rl->have);
			rl->have = 0;
			stop(rl, v);
			return took;
		}
		if (rl->head[0] == REALMLIST_CMD) {
			rl->list = malloc(size);
			if (rl->list == NULL) {
				out->bad = true;
				return took;
			}
			memcpy(rl->list, rl->head, rl->have);
		}
		rl->need = size;
	}
	buf = rl->list != NULL ? rl->list : rl->head;
	k = min_size(rl->need - rl->have, n - took);
	memcpy(buf + rl->have, p + took, k);
	rl->have += k;
	took += k;
	if (rl->have < rl->need)
		return took;
	if (rl->list != NULL) {
		emit_list(rl, rl->list, rl->have, out);
		free(rl->list);
		rl->list = NULL;
	} else {
		append(out, rl->head, rl->have);
	}
	rl->have = rl->need = 0;
	return took;
}

int realmlist_feed(struct realmlist *rl, const uint8_t *in, size_t len, struct strbuf *out)
{
	/* in[run, i): whole messages not yet appended, sent in one append. */
	size_t i = 0, run = 0, size;
	enum verdict v;

	while (i < len && rl->mode == FRAMING && !out->bad) {
		if (rl->have == 0) {
			v = judge(in + i, len - i, &size);
			if (v == WHOLE && size <= len - i) {
				if (in[i] == REALMLIST_CMD) {
					append(out, in + run, i - run);
					emit_list(rl, in + i, size, out);
					run = i + size;
				}
				i += size;
				continue;
			}
			append(out, in + run, i - run);
			run = i;
			if (v == FAILURE || v == UNKNOWN) {
				stop(rl, v);
				break;
			}
		}
		i += collect(rl, in + i, len - i, out);
		run = i;
	}
	/* What is left: whole messages, or everything once framing ended. */
	append(out, in + run, len - run);
	return out->bad ? -ENOMEM : 0;
}

size_t realmlist_pending(const struct realmlist *rl)
{
	return rl->have;
}

int realmlist_flush(struct realmlist *rl, struct strbuf *out)
{
	append(out, rl->list != NULL ? rl->list : rl->head, rl->have);
	free(rl->list);
	rl->list = NULL;
	rl->have = rl->need = 0;
	return out->bad ? -ENOMEM : 0;
}

const struct realmlist_stats *realmlist_stats(const struct realmlist *rl)
{
	return &rl->stats;
}

struct realmlist *realmlist_new(const char *new_addr)
{
	size_t alen = addr_len(new_addr);
	struct realmlist *rl;

	if (alen == 0 || alen > REALMLIST_ADDR_MAX) {
		errno = EINVAL;
		return NULL;
	}
	rl = calloc(1, sizeof(*rl));
	if (rl == NULL)
		return NULL;
	memcpy(rl->addr, new_addr, alen);
	rl->addr_len = alen;
	rl->mode = FRAMING;
	return rl;
}

void realmlist_free(struct realmlist *rl)
{
	if (rl == NULL)
		return;
	free(rl->list);
	free(rl);
}
