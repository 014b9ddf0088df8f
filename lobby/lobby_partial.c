/*
 * The kept unfinished save (rally's resume): the journal's codec, and
 * keeping, finding and dropping the files it names.
 */
#include "lobby_partial.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "statefile.h"

#define MAGIC "rally-partial 1"

/* ---- the codec ---- */

/* The next line of [*p, end) without its newline; false at the end. */
static bool next_line(const char **p, const char *end, const char **line, size_t *len)
{
	const char *nl;

	if (*p >= end)
		return false;
	nl = memchr(*p, '\n', (size_t)(end - *p));
	if (nl == NULL)
		return false; /* a last line without its newline: cut short */
	*line = *p;
	*len = (size_t)(nl - *p);
	*p = nl + 1;
	return true;
}

/* A decimal of at most 20 digits, no sign, no leading zero but "0". */
static bool take_u64(const char **p, const char *end, uint64_t *out)
{
	uint64_t v = 0;
	const char *s = *p;

	if (s >= end || *s < '0' || *s > '9' ||
	    (*s == '0' && s + 1 < end && s[1] >= '0' && s[1] <= '9'))
		return false;
	for (; s < end && *s >= '0' && *s <= '9'; s++) {
		if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
			return false;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*p = s;
	*out = v;
	return true;
}

static bool take_word(const char **p, const char *end, char *out, size_t size)
{
	const char *s = *p;
	size_t n = 0;

	while (s + n < end && s[n] != ' ')
		n++;
	if (n == 0 || n >= size)
		return false;
	memcpy(out, s, n);
	out[n] = '\0';
	*p = s + n;
	return true;
}

static bool take_space(const char **p, const char *end)
{
	if (*p >= end || **p != ' ')
		return false;
	(*p)++;
	return true;
}

static bool hex64(const char *s)
{
	if (strlen(s) != 64)
		return false;
	for (size_t i = 0; i < 64; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	}
	return true;
}

static bool starts(const char *line, size_t len, const char *word, const char **rest)
{
	size_t w = strlen(word);

	if (len < w + 1 || memcmp(line, word, w) != 0 || line[w] != ' ')
		return false;
	*rest = line + w + 1;
	return true;
}

int lobby_partial_parse(const char *text, size_t len, struct lobby_partial *p)
{
	const char *at = text, *end = text + len, *line, *q, *le;
	uint64_t sum = 0, nchunks, prev_to = 0;
	size_t ll;

	memset(p, 0, sizeof(*p) - sizeof(p->ranges));
	if (!next_line(&at, end, &line, &ll) || ll != strlen(MAGIC) || memcmp(line, MAGIC, ll) != 0)
		return -EBADMSG;
	if (!next_line(&at, end, &line, &ll) || !starts(line, ll, "blob", &q))
		return -EBADMSG;
	le = line + ll;
	if (!take_word(&q, le, p->sha256, sizeof(p->sha256)) || !hex64(p->sha256) ||
	    !take_space(&q, le) || !take_u64(&q, le, &p->total) || !take_space(&q, le) ||
	    !take_u64(&q, le, &p->chunk) || q != le || p->chunk == 0 || p->chunk > 65535)
		return -EBADMSG;
	nchunks = p->total / p->chunk + (p->total % p->chunk != 0);
	for (;;) {
		if (!next_line(&at, end, &line, &ll))
			return -EBADMSG;
		le = line + ll;
		if (starts(line, ll, "file", &q)) {
			struct lobby_partial_file *f;

			if (p->n == LOBBY_SAVE_FILES || p->nranges > 0)
				return -EBADMSG;
			f = &p->f[p->n];
			if (!take_word(&q, le, f->wire, sizeof(f->wire)) ||
			    lobby_save_allowed(f->wire) < 0 || !take_space(&q, le) ||
			    !take_u64(&q, le, &f->size) || !take_space(&q, le) ||
			    !take_word(&q, le, f->sha256, sizeof(f->sha256)) || !hex64(f->sha256) ||
			    q != le)
				return -EBADMSG;
			for (size_t k = 0; k < p->n; k++) {
				if (strcmp(p->f[k].wire, f->wire) == 0)
					return -EBADMSG;
			}
			if (f->size > p->total - sum)
				return -EBADMSG;
			sum += f->size;
			p->n++;
		} else if (starts(line, ll, "have", &q)) {
			uint64_t from, to;

			if (p->n == 0 || p->nranges == LOBBY_PARTIAL_MAX_RANGES ||
			    !take_u64(&q, le, &from) || !take_space(&q, le) ||
			    !take_u64(&q, le, &to) || q != le || from >= to || to > nchunks ||
			    (p->nranges > 0 && from < prev_to))
				return -EBADMSG;
			p->ranges[p->nranges][0] = from;
			p->ranges[p->nranges][1] = to;
			p->nranges++;
			prev_to = to;
		} else if (ll == 3 && memcmp(line, "end", 3) == 0) {
			break;
		} else {
			return -EBADMSG;
		}
	}
	if (p->n == 0 || sum != p->total || at != end)
		return -EBADMSG;
	return 0;
}

void lobby_partial_format(const struct lobby_partial *p, struct strbuf *out)
{
	strbuf_printf(out, MAGIC "\nblob %s %llu %llu\n", p->sha256, (unsigned long long)p->total,
		      (unsigned long long)p->chunk);
	for (size_t i = 0; i < p->n; i++)
		strbuf_printf(out, "file %s %llu %s\n", p->f[i].wire,
			      (unsigned long long)p->f[i].size, p->f[i].sha256);
	for (size_t i = 0; i < p->nranges; i++)
		strbuf_printf(out, "have %llu %llu\n", (unsigned long long)p->ranges[i][0],
			      (unsigned long long)p->ranges[i][1]);
	strbuf_printf(out, "end\n");
}

/* ---- on disk ---- */

int lobby_partial_name(char *dst, size_t size, const char *io_dir, const char *wire)
{
	int r = snprintf(dst, size, "%s/" LOBBY_PARTIAL_FILE ".%s", io_dir, wire);

	return r < 0 || (size_t)r >= size ? -ENAMETOOLONG : 0;
}

static int journal_path(char *dst, size_t size, const char *io_dir)
{
	int r = snprintf(dst, size, "%s/" LOBBY_PARTIAL_FILE, io_dir);

	return r < 0 || (size_t)r >= size ? -ENAMETOOLONG : 0;
}

void lobby_partial_drop(const char *io_dir)
{
	char path[PATH_MAX];

	if (journal_path(path, sizeof(path), io_dir) == 0)
		unlink(path);
	for (int k = 0; k < LOBBY_SAVE_FILES; k++) {
		static const char *const names[LOBBY_SAVE_FILES] = {LOBBY_SAVE_BASENAME ".sav",
								    LOBBY_SAVE_BASENAME ".sav.lua",
								    LOBBY_SAVE_BASENAME ".jpg"};

		if (lobby_partial_name(path, sizeof(path), io_dir, names[k]) == 0)
			unlink(path);
	}
}

static bool bit(const uint8_t *have, uint64_t i)
{
	return (have[i / 8] >> (i % 8)) & 1;
}

long long lobby_partial_keep(struct lobby_save *s, const char *io_dir, uint64_t chunk,
			     const uint8_t *have, uint64_t nchunks)
{
	struct lobby_partial *p = calloc(1, sizeof(*p));
	char path[PATH_MAX];
	struct strbuf b;
	long long kept = 0;
	int r = 0;

	lobby_partial_drop(io_dir);
	if (p == NULL) {
		lobby_save_close(s);
		return -ENOMEM;
	}
	snprintf(p->sha256, sizeof(p->sha256), "%s", s->sha256);
	p->total = s->total;
	p->chunk = chunk;
	p->n = s->n;
	for (size_t i = 0; i < s->n; i++) {
		snprintf(p->f[i].wire, sizeof(p->f[i].wire), "%s", s->f[i].wire);
		p->f[i].size = s->f[i].size;
		snprintf(p->f[i].sha256, sizeof(p->f[i].sha256), "%s", s->f[i].sha256);
	}
	for (uint64_t i = 0; i < nchunks && p->nranges < LOBBY_PARTIAL_MAX_RANGES;) {
		uint64_t from;

		while (i < nchunks && !bit(have, i))
			i++;
		if (i == nchunks)
			break;
		from = i;
		while (i < nchunks && bit(have, i))
			i++;
		p->ranges[p->nranges][0] = from;
		p->ranges[p->nranges][1] = i;
		p->nranges++;
		kept += (long long)(i - from);
	}
	if (kept == 0 || !hex64(p->sha256) || chunk == 0 || chunk > 65535) {
		free(p);
		lobby_save_close(s);
		return 0;
	}
	/* The data first, under its kept names; then the journal naming it. */
	for (size_t i = 0; i < s->n && r == 0; i++) {
		if (lobby_partial_name(path, sizeof(path), io_dir, s->f[i].wire) < 0)
			r = -ENAMETOOLONG;
		else if (rename(s->tmp[i], path) < 0)
			r = -errno;
		else
			s->tmp[i][0] = '\0';
	}
	if (r == 0 && journal_path(path, sizeof(path), io_dir) < 0)
		r = -ENAMETOOLONG;
	if (r == 0) {
		strbuf_init(&b, LOBBY_PARTIAL_MAX_BYTES);
		lobby_partial_format(p, &b);
		r = b.bad ? -E2BIG : statefile_write(path, b.p, b.len);
		strbuf_release(&b);
	}
	free(p);
	lobby_save_close(s);
	if (r < 0) {
		lobby_partial_drop(io_dir);
		return r;
	}
	return kept;
}

int lobby_partial_load(const char *io_dir, struct lobby_partial *p)
{
	char path[PATH_MAX], *text = NULL;
	struct stat st;
	size_t len;
	int r;

	if (journal_path(path, sizeof(path), io_dir) < 0)
		return -ENOENT;
	r = statefile_read(path, LOBBY_PARTIAL_MAX_BYTES, &text, &len);
	if (r == -ENOENT)
		return -ENOENT;
	if (r == 0)
		r = lobby_partial_parse(text, len, p);
	free(text);
	for (size_t i = 0; r == 0 && i < p->n; i++) {
		if (lobby_partial_name(path, sizeof(path), io_dir, p->f[i].wire) < 0 ||
		    lstat(path, &st) < 0 || !S_ISREG(st.st_mode) ||
		    (uint64_t)st.st_size != p->f[i].size)
			r = -EBADMSG;
	}
	if (r < 0) {
		lobby_partial_drop(io_dir);
		return -EBADMSG;
	}
	return 0;
}

bool lobby_partial_matches(const struct lobby_partial *p, const char *sha256, uint64_t total,
			   uint64_t chunk, const struct lobby_save_offer *files, size_t n)
{
	if (sha256 == NULL || strcmp(p->sha256, sha256) != 0 || p->total != total ||
	    p->chunk != chunk || p->n != n)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (files[i].name == NULL || files[i].sha256 == NULL ||
		    strcmp(files[i].name, p->f[i].wire) != 0 || files[i].size < 0 ||
		    (uint64_t)files[i].size != p->f[i].size ||
		    strcmp(files[i].sha256, p->f[i].sha256) != 0)
			return false;
	}
	return true;
}
