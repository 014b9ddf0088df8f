#include "qsplice.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "q3.h"

static const char info_hdr[] = "\xff\xff\xff\xffinfoResponse\n";
static const char status_hdr[] = "\xff\xff\xff\xffstatusResponse\n";
/* "\challenge\" before the value. */
#define PAIR_HEAD     "\\challenge\\"
#define PAIR_HEAD_LEN (sizeof(PAIR_HEAD) - 1)

static size_t hdr_len(enum qsplice_kind kind)
{
	return kind == QSPLICE_INFO ? sizeof(info_hdr) - 1 : sizeof(status_hdr) - 1;
}

/* Info_SetValueForKey refuses values holding these (ioquake3's blacklist). */
static bool settable(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '\\' || s[i] == ';' || s[i] == '"')
			return false;
	}
	return len > 0;
}

int qsplice_parse(const uint8_t *buf, size_t len, enum qsplice_kind kind, const char *ours,
		  size_t ours_len, struct qsplice_tmpl *t)
{
	const char *hdr = kind == QSPLICE_INFO ? info_hdr : status_hdr;
	size_t hl = hdr_len(kind), info_off, info_len, p, found = 0;
	const char *s;

	if (ours_len == 0 || ours_len > QSPLICE_CHALLENGE_MAX || !settable(ours, ours_len))
		return -EINVAL;
	for (size_t i = 0; i < ours_len; i++) {
		/* Our own challenge must survive the tokenizer unchanged. */
		if ((unsigned char)ours[i] <= ' ' || (unsigned char)ours[i] > 126 || ours[i] == '%')
			return -EINVAL;
	}
	if (len > QSPLICE_MAX_ANSWER || len < hl || memcmp(buf, hdr, hl) != 0)
		return -EBADMSG;
	/* NET_OutOfBandPrint sends strlen() bytes: a NUL is no answer. */
	if (memchr(buf, '\0', len) != NULL)
		return -EBADMSG;
	s = (const char *)buf;
	info_off = hl;
	if (kind == QSPLICE_INFO) {
		info_len = len - hl;
	} else {
		/* "statusResponse\n%s\n%s": the infostring ends at the first
		 * newline, which the engine always writes. */
		const char *nl = memchr(s + hl, '\n', len - hl);

		if (nl == NULL)
			return -EBADMSG;
		info_len = (size_t)(nl - (s + hl));
	}
	if (info_len >= QSPLICE_INFO_BIG)
		return -EBADMSG;
	/*
	 * Pairs as Info_RemoveKey walks them: an optional '\', a key to the
	 * next '\', a value to the next '\' or the end. The challenge pair is
	 * the one whose key is exactly "challenge"; it must be there once,
	 * with our value.
	 */
	p = 0;
	while (p < info_len) {
		size_t start = p, key, key_len, val, val_len;
		const char *ks;

		if (s[info_off + p] == '\\')
			p++;
		key = p;
		ks = memchr(s + info_off + p, '\\', info_len - p);
		if (ks == NULL)
			break; /* a key without a value ends the string */
		key_len = (size_t)(ks - (s + info_off)) - key;
		p = key + key_len + 1;
		val = p;
		while (p < info_len && s[info_off + p] != '\\')
			p++;
		val_len = p - val;
		if (key_len == 9 && memcmp(s + info_off + key, "challenge", 9) == 0) {
			if (found++ > 0)
				return -ENOENT;
			if (s[info_off + start] != '\\' || val_len != ours_len ||
			    memcmp(s + info_off + val, ours, ours_len) != 0)
				return -ENOENT;
			t->pair_off = info_off + start;
			t->pair_len = p - start;
		}
	}
	if (found != 1)
		return -ENOENT;
	t->kind = kind;
	t->len = len;
	t->info_off = info_off;
	t->info_len = info_len;
	return 0;
}

int qsplice_request(const uint8_t *buf, size_t len, enum qsplice_kind *kind,
		    char ch[static QSPLICE_CHALLENGE_MAX + 1], size_t *ch_len)
{
	struct q3_args args;
	const char *cmd, *a1;
	size_t n;

	if (q3_oob_tokenize(buf, len, &args) < 1)
		return -EBADMSG;
	cmd = q3_argv(&args, 0);
	if (q3_cmd_eq(cmd, "getinfo"))
		*kind = QSPLICE_INFO;
	else if (q3_cmd_eq(cmd, "getstatus"))
		*kind = QSPLICE_STATUS;
	else
		return -EBADMSG;
	a1 = q3_argv(&args, 1);
	n = strlen(a1);
	if (n > QSPLICE_CHALLENGE_MAX)
		return -E2BIG;
	memcpy(ch, a1, n + 1);
	*ch_len = n;
	return 0;
}

int qsplice_size(const struct qsplice_tmpl *t, const char *ch, size_t ch_len)
{
	size_t pair = settable(ch, ch_len) ? PAIR_HEAD_LEN + ch_len : 0;
	size_t info = t->info_len - t->pair_len + pair;
	size_t limit = t->info_len >= QSPLICE_INFO_MAX ? QSPLICE_INFO_BIG : QSPLICE_INFO_MAX;

	if (ch_len > QSPLICE_CHALLENGE_MAX)
		return -E2BIG;
	/* Removing the pair only shortens it: nothing the engine drops. */
	if (pair > 0 && info >= limit)
		return -ERANGE;
	return (int)(t->len - t->pair_len + pair);
}

int qsplice_build(const uint8_t *tmpl, const struct qsplice_tmpl *t, const char *ch, size_t ch_len,
		  uint8_t *out, size_t size)
{
	int n = qsplice_size(t, ch, ch_len);
	size_t tail_off = t->pair_off + t->pair_len, o;

	if (n < 0)
		return n;
	if ((size_t)n > size)
		return -EMSGSIZE;
	memcpy(out, tmpl, t->pair_off);
	o = t->pair_off;
	if (settable(ch, ch_len)) {
		memcpy(out + o, PAIR_HEAD, PAIR_HEAD_LEN);
		memcpy(out + o + PAIR_HEAD_LEN, ch, ch_len);
		o += PAIR_HEAD_LEN + ch_len;
	}
	memcpy(out + o, tmpl + tail_off, t->len - tail_off);
	return n;
}
