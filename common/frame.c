#include "frame.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "htab.h"
#include "num.h"
#include "rd.h"

/* ---- NP1 datagrams (§1) ---- */

/* "NP1:" + type + payload; "Anything shorter than 5 bytes or not starting
 * with NP1: is ignored." */
int np1_parse(const uint8_t *buf, size_t len, uint8_t *type, const uint8_t **payload, size_t *plen)
{
	if (len < NP1_HDR || memcmp(buf, NP1_MAGIC, 4) != 0)
		return -EBADMSG;
	*type = buf[4];
	*payload = buf + NP1_HDR;
	*plen = len - NP1_HDR;
	return 0;
}

int np1_build(uint8_t *buf, size_t cap, uint8_t type, const uint8_t *payload, size_t plen)
{
	if (plen > NP1_MAX - NP1_HDR)
		return -EMSGSIZE;
	if (cap < NP1_HDR + plen)
		return -ENOSPC;
	/* The payload may already sit at buf + 5. */
	if (plen > 0)
		memmove(buf + NP1_HDR, payload, plen);
	memcpy(buf, NP1_MAGIC, 4);
	buf[4] = type;
	return (int)(NP1_HDR + plen);
}

/* ---- relay port binding (§6), game frames (§8), save chunks (§11) ---- */

int np1_trlb_build(uint8_t *buf, size_t cap, const uint8_t id[static NP1_RELAY_ID_LEN],
		   uint8_t role)
{
	struct wr w = wr_init(buf, cap);

	wr_bytes(&w, "TRLB", 4);
	wr_bytes(&w, id, NP1_RELAY_ID_LEN);
	wr_u8(&w, role);
	return w.bad ? -ENOSPC : (int)w.len;
}

/*
 * "Bind packet: exactly 21 bytes "TRLB" | id(16) | role with role H (host)
 * or J (joiner) [...] Wrong id or other role: ignored, no answer. A 21-byte
 * datagram not starting with TRLB is forwarded like any other"
 * (master-api.md). So another role is a bad bind (-EPROTO), not a datagram
 * to relay (-EBADMSG).
 */
int np1_trlb_parse(const uint8_t *buf, size_t len, uint8_t id[static NP1_RELAY_ID_LEN],
		   uint8_t *role)
{
	uint8_t r;

	if (len != NP1_TRLB_LEN || memcmp(buf, "TRLB", 4) != 0)
		return -EBADMSG;
	r = buf[4 + NP1_RELAY_ID_LEN];
	if (r != NP1_ROLE_HOST && r != NP1_ROLE_JOINER)
		return -EPROTO;
	memcpy(id, buf + 4, NP1_RELAY_ID_LEN);
	*role = r;
	return 0;
}

/* "[...] and is answered to the sender with 20 bytes "TRLA" | id". */
int np1_trla_build(uint8_t *buf, size_t cap, const uint8_t id[static NP1_RELAY_ID_LEN])
{
	struct wr w = wr_init(buf, cap);

	wr_bytes(&w, "TRLA", 4);
	wr_bytes(&w, id, NP1_RELAY_ID_LEN);
	return w.bad ? -ENOSPC : (int)w.len;
}

/* The relay port answers a bind with exactly "TRLA" | id (20 bytes). */
int np1_trla_parse(const uint8_t *buf, size_t len, uint8_t id[static NP1_RELAY_ID_LEN])
{
	if (len != NP1_TRLA_LEN || memcmp(buf, "TRLA", 4) != 0)
		return -EBADMSG;
	memcpy(id, buf + 4, NP1_RELAY_ID_LEN);
	return 0;
}

/* "Bigger ones [than 1,400 bytes] dropped" (§8). */
int np1_game_build(uint8_t *buf, size_t cap, const uint8_t *frame, size_t len)
{
	if (len > NP1_GAME_MAX)
		return -EMSGSIZE;
	if (cap < 1 + len)
		return -ENOSPC;
	if (len > 0)
		memmove(buf + 1, frame, len);
	buf[0] = 'g';
	return (int)(1 + len);
}

int npf1_build(uint8_t *buf, size_t cap, uint32_t sid, uint32_t seq, const uint8_t *data,
	       size_t len)
{
	struct wr w = wr_init(buf, cap);

	if (len > INT_MAX - NPF1_HDR)
		return -EMSGSIZE;
	wr_bytes(&w, "NPF1", 4);
	wr_be32(&w, sid);
	wr_be32(&w, seq);
	wr_bytes(&w, data, len);
	return w.bad ? -ENOSPC : (int)w.len;
}

int npf1_parse(const uint8_t *p, size_t len, uint32_t *sid, uint32_t *seq, const uint8_t **data,
	       size_t *data_len)
{
	struct rd r = rd_init(p, len);
	const uint8_t *magic = rd_bytes(&r, 4);
	uint32_t s = rd_be32(&r), q = rd_be32(&r);

	if (r.bad || memcmp(magic, "NPF1", 4) != 0)
		return -EBADMSG;
	*sid = s;
	*seq = q;
	*data = r.p;
	*data_len = r.left;
	return 0;
}

/* ---- mesh envelope (§10) ---- */

int mesh_env_build(uint8_t *buf, size_t cap, const char *to, const char *from, const uint8_t *inner,
		   size_t len)
{
	size_t tl = strlen(to), fl = strlen(from);
	struct wr w = wr_init(buf, cap);

	if (tl > 255 || fl > 255)
		return -EINVAL;
	if (len > INT_MAX - 3 - tl - fl)
		return -EMSGSIZE;
	wr_u8(&w, 'r');
	wr_u8(&w, (uint8_t)tl);
	wr_bytes(&w, to, tl);
	wr_u8(&w, (uint8_t)fl);
	wr_bytes(&w, from, fl);
	wr_bytes(&w, inner, len);
	return w.bad ? -ENOSPC : (int)w.len;
}

/*
 * Strict UTF-8 as Python's bytes.decode("utf-8") takes it: no overlong
 * forms, no surrogates (U+D800-U+DFFF), nothing above U+10FFFF. NUL is
 * valid UTF-8 but refused here: the names become C strings.
 */
static bool utf8_name_ok(const uint8_t *p, size_t n)
{
	size_t i = 0;

	while (i < n) {
		uint8_t c = p[i];
		size_t k;
		uint8_t lo = 0x80, hi = 0xbf;

		if (c == 0)
			return false;
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			k = 1;
		} else if (c >= 0xe0 && c <= 0xef) {
			k = 2;
			if (c == 0xe0)
				lo = 0xa0; /* overlong */
			else if (c == 0xed)
				hi = 0x9f; /* surrogates */
		} else if (c >= 0xf0 && c <= 0xf4) {
			k = 3;
			if (c == 0xf0)
				lo = 0x90; /* overlong */
			else if (c == 0xf4)
				hi = 0x8f; /* above U+10FFFF */
		} else {
			return false;
		}
		if (k > n - i - 1)
			return false;
		if (p[i + 1] < lo || p[i + 1] > hi)
			return false;
		for (size_t j = 2; j <= k; j++) {
			if (p[i + j] < 0x80 || p[i + j] > 0xbf)
				return false;
		}
		i += k + 1;
	}
	return true;
}

static bool take_name(struct rd *r, char out[static 256])
{
	size_t n = rd_u8(r);
	const uint8_t *s = rd_bytes(r, n);

	if (r->bad || !utf8_name_ok(s, n))
		return false;
	if (n > 0)
		memcpy(out, s, n);
	out[n] = '\0';
	return true;
}

int mesh_env_parse(const uint8_t *p, size_t len, char to[static 256], char from[static 256],
		   const uint8_t **inner, size_t *inner_len)
{
	struct rd r = rd_init(p, len);

	if (rd_u8(&r) != 'r' || r.bad)
		return -EBADMSG;
	if (!take_name(&r, to) || !take_name(&r, from))
		return -EBADMSG;
	*inner = r.p;
	*inner_len = r.left;
	return 0;
}

/* ---- fragments (§2) ---- */

unsigned frag_count(size_t len)
{
	size_t n = len / FRAG_DATA + (len % FRAG_DATA != 0);

	return n > UINT_MAX ? UINT_MAX : (unsigned)n;
}

int frag_build(uint8_t *buf, size_t cap, uint32_t id, unsigned index, const uint8_t *msg,
	       size_t len)
{
	unsigned count = frag_count(len);
	size_t off, n;
	struct wr w = wr_init(buf, cap);

	if (len > FRAG_MAX_MSG)
		return -EMSGSIZE;
	if (index >= count)
		return -EINVAL;
	off = (size_t)index * FRAG_DATA;
	n = len - off < FRAG_DATA ? len - off : FRAG_DATA;
	wr_u8(&w, 'F');
	wr_be32(&w, id);
	wr_be32(&w, index);
	wr_be32(&w, count);
	wr_bytes(&w, msg + off, n);
	return w.bad ? -ENOSPC : (int)w.len;
}

struct slice {
	uint8_t *p; /* NULL until the fragment came */
	uint32_t len;
};

struct partial {
	struct partial *older, *newer; /* all partials, least recently fed first */
	struct partial *snext;         /* the sender's, in arrival order */
	struct sender *owner;
	uint32_t id, count, have;
	long long last_ms;
	size_t data;   /* slice bytes held */
	size_t charge; /* what it counts against FRAG_MAX_BYTES */
	struct slice slices[];
};

/* A sender's entry in the table (keyed by addr_key). */
struct sender {
	struct partial *head;
	unsigned n;
};

struct frag_reasm {
	struct htab *senders;
	struct partial *oldest, *newest;
	size_t pending, bytes;
};

struct frag_reasm *frag_reasm_new(size_t max_senders)
{
	struct frag_reasm *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	r->senders = htab_new(max_senders, sizeof(struct addr_key), sizeof(struct sender));
	if (r->senders == NULL) {
		int e = errno;

		free(r);
		errno = e;
		return NULL;
	}
	return r;
}

static void list_unlink(struct frag_reasm *r, struct partial *m)
{
	if (m->older != NULL)
		m->older->newer = m->newer;
	else
		r->oldest = m->newer;
	if (m->newer != NULL)
		m->newer->older = m->older;
	else
		r->newest = m->older;
	m->older = m->newer = NULL;
}

static void list_append(struct frag_reasm *r, struct partial *m)
{
	m->older = r->newest;
	m->newer = NULL;
	if (r->newest != NULL)
		r->newest->newer = m;
	else
		r->oldest = m;
	r->newest = m;
}

/* Unlinks m everywhere and frees it; a sender left with none goes too. */
static void drop(struct frag_reasm *r, struct partial *m)
{
	struct sender *s = m->owner;
	struct partial **pp = &s->head;

	while (*pp != m)
		pp = &(*pp)->snext;
	*pp = m->snext;
	s->n--;
	list_unlink(r, m);
	r->pending--;
	r->bytes -= m->charge;
	for (uint32_t i = 0; i < m->count; i++)
		free(m->slices[i].p);
	free(m);
	if (s->n == 0)
		htab_remove(r->senders, s);
}

void frag_reasm_free(struct frag_reasm *r)
{
	if (r == NULL)
		return;
	while (r->oldest != NULL)
		drop(r, r->oldest);
	htab_free(r->senders);
	free(r);
}

static struct sender *sender_get(struct frag_reasm *r, const struct addr *a, bool create)
{
	struct addr_key k;
	struct sender *s;

	addr_to_key(a, &k);
	s = htab_get(r->senders, k.b);
	if (s != NULL || !create)
		return s;
	/* Table full: forget the least recently heard sender first. */
	if (htab_count(r->senders) == htab_capacity(r->senders)) {
		struct sender *old = htab_oldest(r->senders);

		while (old->head != NULL && old->n > 1)
			drop(r, old->head);
		drop(r, old->head); /* the last one removes the entry */
	}
	return htab_insert(r->senders, k.b, false, NULL);
}

/* Assembles a complete message (slices in index order) and drops m. */
static int finish(struct frag_reasm *r, struct partial *m, uint8_t **msg, size_t *msg_len)
{
	uint8_t *out = malloc(m->data > 0 ? m->data : 1);
	size_t o = 0;

	if (out == NULL) {
		drop(r, m);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < m->count; i++) {
		if (m->slices[i].len > 0)
			memcpy(out + o, m->slices[i].p, m->slices[i].len);
		o += m->slices[i].len;
	}
	*msg = out;
	*msg_len = o;
	drop(r, m);
	return 1;
}

int frag_reasm_feed(struct frag_reasm *r, const struct addr *sender, const uint8_t *p, size_t len,
		    long long now_ms, uint8_t **msg, size_t *msg_len)
{
	struct rd rd = rd_init(p, len);
	uint8_t magic = rd_u8(&rd);
	uint32_t id = rd_be32(&rd), index = rd_be32(&rd), count = rd_be32(&rd);
	size_t n = rd.left;
	struct sender *s;
	struct partial *m;
	struct slice *sl;
	uint8_t *copy;

	*msg = NULL;
	*msg_len = 0;
	/* 'F' | id | index | count | bytes; "index >= count or count 0
	 * dropped". */
	if (rd.bad || magic != 'F' || count == 0 || index >= count)
		return -EBADMSG;
	if (count > FRAG_MAX_COUNT || n > FRAG_MAX_MSG)
		return -EMSGSIZE;

	s = sender_get(r, sender, true);
	if (s == NULL)
		return -ENOMEM;
	for (m = s->head; m != NULL; m = m->snext) {
		if (m->id == id)
			break;
	}
	if (m == NULL) {
		size_t charge = sizeof(*m) + (size_t)count * sizeof(struct slice);

		/* "At most 64 partial messages per sender (oldest
		 * dropped)": the one fed least recently, the first
		 * started on a tie. */
		if (s->n >= FRAG_MAX_PARTIAL) {
			struct partial *old = s->head;

			for (struct partial *q = s->head->snext; q != NULL; q = q->snext) {
				if (q->last_ms < old->last_ms)
					old = q;
			}
			drop(r, old); /* s keeps n - 1 >= 63 entries */
		}
		m = calloc(1, sizeof(*m) + (size_t)count * sizeof(struct slice));
		if (m == NULL) {
			if (s->n == 0)
				htab_remove(r->senders, s);
			return -ENOMEM;
		}
		m->owner = s;
		m->id = id;
		m->count = count;
		m->charge = charge;
		/* Appended to the sender's list: arrival order. */
		{
			struct partial **pp = &s->head;

			while (*pp != NULL)
				pp = &(*pp)->snext;
			*pp = m;
		}
		s->n++;
		list_append(r, m);
		r->pending++;
		r->bytes += charge;
	} else if (m->count != count) {
		/* "A fragment whose count differs from the first seen is
		 * ignored" (a different message reusing the id). */
		return 0;
	}

	sl = &m->slices[index];
	if (m->data - sl->len + n > FRAG_MAX_MSG) {
		drop(r, m);
		return -EMSGSIZE;
	}
	copy = malloc(n > 0 ? n : 1);
	if (copy == NULL) {
		if (m->have == 0)
			drop(r, m);
		return -ENOMEM;
	}
	if (n > 0)
		memcpy(copy, rd.p, n);
	/* A repeated index replaces the slice (netpunch keeps the last). */
	if (sl->p != NULL) {
		free(sl->p);
		m->data -= sl->len;
		m->charge -= sl->len;
		r->bytes -= sl->len;
	} else {
		m->have++;
	}
	sl->p = copy;
	sl->len = (uint32_t)n;
	m->data += n;
	m->charge += n;
	r->bytes += n;
	m->last_ms = now_ms;
	list_unlink(r, m);
	list_append(r, m);
	htab_touch(r->senders, s);

	if (m->have == m->count)
		return finish(r, m, msg, msg_len);
	/* Over the global budget: the least recently fed go first (never m
	 * itself: it is the newest and below FRAG_MAX_MSG). */
	while (r->bytes > FRAG_MAX_BYTES && r->oldest != m)
		drop(r, r->oldest);
	return 0;
}

void frag_reasm_expire(struct frag_reasm *r, long long now_ms)
{
	/* The list is in feeding order, so with a monotonic clock the idle
	 * ones are at its old end. */
	while (r->oldest != NULL && now_ms - r->oldest->last_ms > FRAG_EXPIRE_MS)
		drop(r, r->oldest);
}

void frag_reasm_forget(struct frag_reasm *r, const struct addr *sender)
{
	struct sender *s = sender_get(r, sender, false);

	while (s != NULL && s->n > 1)
		drop(r, s->head);
	if (s != NULL)
		drop(r, s->head);
}

size_t frag_reasm_pending(const struct frag_reasm *r)
{
	return r->pending;
}

size_t frag_reasm_bytes(const struct frag_reasm *r)
{
	return r->bytes;
}

/* ---- the bulk TCP hello (§12) ---- */

static bool token_ok(const char *t, size_t n)
{
	if (n != BULK_TOKEN_LEN)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (!((t[i] >= '0' && t[i] <= '9') || (t[i] >= 'a' && t[i] <= 'f')))
			return false;
	}
	return true;
}

int bulk_hello_build(uint8_t *buf, size_t cap, enum bulk_role role, uint32_t sid, const char *token,
		     const char *name)
{
	static const char magic[] = "TPF2BULK1 ";
	const char *r = role == BULK_SEND ? "send" : "recv";
	char num[16];
	size_t nl = strlen(name), n = 0;
	struct wr w = wr_init(buf, cap);
	int k;

	if (!token_ok(token, strlen(token)))
		return -EINVAL;
	if (nl > BULK_NAME_MAX)
		nl = BULK_NAME_MAX;
	k = snprintf(num, sizeof(num), "%u", (unsigned)sid);
	wr_bytes(&w, magic, sizeof(magic) - 1);
	wr_bytes(&w, r, 4);
	wr_u8(&w, ' ');
	wr_bytes(&w, num, (size_t)k);
	wr_u8(&w, ' ');
	wr_bytes(&w, token, BULK_TOKEN_LEN);
	wr_u8(&w, ' ');
	wr_bytes(&w, name, nl);
	wr_u8(&w, '\n');
	if (w.bad)
		return -ENOSPC;
	n = w.len;
	return (int)n;
}

/* The next space-separated field of [*p, end): its start and length. */
static bool field(const uint8_t **p, const uint8_t *end, const uint8_t **f, size_t *n)
{
	const uint8_t *q = *p;

	while (q < end && *q != ' ')
		q++;
	if (q == end)
		return false;
	*f = *p;
	*n = (size_t)(q - *p);
	*p = q + 1;
	return *n > 0;
}

int bulk_hello_parse(const uint8_t *buf, size_t len, struct bulk_hello *out)
{
	static const char magic[] = "TPF2BULK1 ";
	const uint8_t *p, *end, *f;
	size_t n;
	int64_t sid;

	memset(out, 0, sizeof(*out));
	if (len > BULK_HELLO_MAX || len < sizeof(magic) || buf[len - 1] != '\n' ||
	    memcmp(buf, magic, sizeof(magic) - 1) != 0 || memchr(buf, '\0', len) != NULL)
		return -EBADMSG;
	p = buf + sizeof(magic) - 1;
	end = buf + len - 1; /* the newline */
	if (memchr(p, '\n', (size_t)(end - p)) != NULL)
		return -EBADMSG;
	if (!field(&p, end, &f, &n))
		return -EBADMSG;
	if (n == 4 && memcmp(f, "recv", 4) == 0)
		out->role = BULK_RECV;
	else if (n == 4 && memcmp(f, "send", 4) == 0)
		out->role = BULK_SEND;
	else
		return -EBADMSG;
	if (!field(&p, end, &f, &n) || num_parse((const char *)f, n, 0, UINT32_MAX, 0, &sid) < 0)
		return -EBADMSG;
	out->sid = (uint32_t)sid;
	if (!field(&p, end, &f, &n) || !token_ok((const char *)f, n))
		return -EBADMSG;
	memcpy(out->token, f, n);
	/* The rest of the line is the name. */
	n = (size_t)(end - p);
	if (n == 0 || n > BULK_NAME_MAX)
		return -EBADMSG;
	memcpy(out->name, p, n);
	out->name_len = n;
	return 0;
}

/* ---- the dual TCP link (§13) ---- */

static const char link_magic[] = "TPF2LINK1 ";

bool link_hello_is(const uint8_t *buf, size_t len)
{
	return len >= sizeof(link_magic) - 1 &&
	       memcmp(buf, link_magic, sizeof(link_magic) - 1) == 0;
}

size_t link_name_cut(const char *name, size_t len)
{
	const uint8_t *p = (const uint8_t *)name;
	size_t n = len < LINK_NAME_MAX ? len : LINK_NAME_MAX;

	/* The first byte left out continues a character: that character
	 * goes whole (Python's decode("utf-8", "ignore") of the cut). A
	 * character is 4 bytes at most: past 3 steps back it is not UTF-8,
	 * and the cut stays there. */
	for (int back = 0; back < 3 && n > 0 && n < len && (p[n] & 0xc0) == 0x80; back++)
		n--;
	return n;
}

static int hex_nibble(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Python's bytes.strip() set: space, \t, \n, \v, \f, \r. */
static bool ascii_space(uint8_t c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

int link_hello_build(uint8_t *buf, size_t cap, const uint8_t *name, size_t name_len,
		     const uint8_t *sealed, size_t sealed_len)
{
	static const char hex[] = "0123456789abcdef";
	struct wr w = wr_init(buf, cap);

	if (name_len == 0 || name_len > LINK_NAME_MAX || sealed_len < LINK_SEAL_EXTRA ||
	    sealed_len > LINK_SEALED_MAX || memchr(name, '\n', name_len) != NULL ||
	    memchr(name, '\0', name_len) != NULL)
		return -EINVAL;
	wr_bytes(&w, link_magic, sizeof(link_magic) - 1);
	wr_bytes(&w, name, name_len);
	wr_u8(&w, ' ');
	for (size_t i = 0; i < sealed_len; i++) {
		wr_u8(&w, (uint8_t)hex[sealed[i] >> 4]);
		wr_u8(&w, (uint8_t)hex[sealed[i] & 0x0f]);
	}
	wr_u8(&w, '\n');
	if (w.bad)
		return -ENOSPC;
	return (int)w.len;
}

int link_hello_parse(const uint8_t *buf, size_t len, struct link_hello *out)
{
	const size_t mlen = sizeof(link_magic) - 1;
	size_t end, sp, hexlen;

	memset(out, 0, sizeof(*out));
	/* One whole line: "TPF2LINK1 " first, its only newline last. */
	if (len > LINK_HELLO_MAX || !link_hello_is(buf, len) || buf[len - 1] != '\n' ||
	    memchr(buf, '\n', len - 1) != NULL || memchr(buf, '\0', len) != NULL)
		return -EBADMSG;
	end = len;
	while (end > mlen && ascii_space(buf[end - 1]))
		end--;
	/* line[10:].rpartition(b" "): the name may hold spaces, the hex not. */
	sp = end;
	while (sp > mlen && buf[sp - 1] != ' ')
		sp--;
	if (sp == mlen)
		return -EBADMSG;
	sp--; /* the separating space */
	out->name = buf + mlen;
	out->name_len = sp - mlen;
	if (out->name_len == 0 || out->name_len > LINK_NAME_MAX)
		return -EBADMSG;
	hexlen = end - (sp + 1);
	if (hexlen % 2 != 0 || hexlen / 2 < LINK_SEAL_EXTRA || hexlen / 2 > LINK_SEALED_MAX)
		return -EBADMSG;
	for (size_t i = 0; i < hexlen / 2; i++) {
		int hi = hex_nibble(buf[sp + 1 + 2 * i]), lo = hex_nibble(buf[sp + 2 + 2 * i]);

		if (hi < 0 || lo < 0)
			return -EBADMSG;
		out->sealed[i] = (uint8_t)(hi << 4 | lo);
	}
	out->sealed_len = hexlen / 2;
	return 0;
}

int link_rec_build(uint8_t *buf, size_t cap, const uint8_t *frame, size_t len)
{
	struct wr w = wr_init(buf, cap);

	if (len < LINK_FRAME_MIN || len > LINK_FRAME_MAX)
		return -EMSGSIZE;
	wr_be16(&w, (uint16_t)len);
	wr_bytes(&w, frame, len);
	if (w.bad)
		return -ENOSPC;
	return (int)w.len;
}

int link_rec_next(const uint8_t *buf, size_t len, const uint8_t **frame, size_t *flen)
{
	struct rd r = rd_init(buf, len);
	size_t n;

	if (len < LINK_REC_HDR)
		return 0;
	n = rd_be16(&r);
	if (n < LINK_FRAME_MIN || n > LINK_FRAME_MAX)
		return -EMSGSIZE;
	if (n > r.left)
		return 0;
	/* Only sealed frames are copied to a link (DualSocket.sendto). */
	if (memcmp(r.p, NP1_MAGIC "E", NP1_HDR) != 0)
		return -EBADMSG;
	*frame = r.p;
	*flen = n;
	return (int)(LINK_REC_HDR + n);
}
