/*
 * Accept-Encoding, RFC 9110 §12.5.3:
 *
 *   Accept-Encoding  = #( codings [ weight ] )
 *   codings          = content-coding / "identity" / "*"
 *   weight           = OWS ";" OWS "q=" qvalue              (§12.4.2)
 *   qvalue           = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )
 *
 * "#" lists allow empty elements and OWS around commas (§5.6.1). Parameters
 * other than q are not in the grammar but are seen in the wild
 * ("gzip;level=1"): we skip token=token or token="quoted" ones.
 */
#include "acceptenc.h"

#include <errno.h>
#include <stdbool.h>
#include <strings.h>

/* tchar, §5.6.2. */
static bool is_tchar(char c)
{
	if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
		return true;
	switch (c) {
	case '!':
	case '#':
	case '$':
	case '%':
	case '&':
	case '\'':
	case '*':
	case '+':
	case '-':
	case '.':
	case '^':
	case '_':
	case '`':
	case '|':
	case '~':
		return true;
	default:
		return false;
	}
}

static void skip_ows(const char *buf, size_t len, size_t *i)
{
	while (*i < len && (buf[*i] == ' ' || buf[*i] == '\t'))
		(*i)++;
}

static size_t token(const char *buf, size_t len, size_t *i)
{
	size_t start = *i;

	while (*i < len && is_tchar(buf[*i]))
		(*i)++;
	return *i - start;
}

/* qvalue at buf[*i..]; thousandths or -1. */
static int qvalue(const char *buf, size_t len, size_t *i)
{
	int q, scale = 100;
	size_t digits = 0;

	if (*i >= len || (buf[*i] != '0' && buf[*i] != '1'))
		return -1;
	q = (buf[(*i)++] - '0') * 1000;
	if (*i < len && buf[*i] == '.') {
		(*i)++;
		while (*i < len && buf[*i] >= '0' && buf[*i] <= '9') {
			if (++digits > 3)
				return -1;
			q += (buf[(*i)++] - '0') * scale;
			scale /= 10;
		}
	}
	return q > 1000 ? -1 : q;
}

/* A quoted-string (§5.6.4) at buf[*i] == '"'; false when malformed. */
static bool quoted(const char *buf, size_t len, size_t *i)
{
	for ((*i)++; *i < len; (*i)++) {
		unsigned char c = (unsigned char)buf[*i];

		if (c == '"') {
			(*i)++;
			return true;
		}
		if (c == '\\') {
			if (++(*i) >= len)
				return false;
			continue;
		}
		if (c < 0x20 && c != '\t')
			return false;
		if (c == 0x7f)
			return false;
	}
	return false;
}

static void keep(int *slot, int q)
{
	if (q > *slot)
		*slot = q;
}

static int bad(struct acceptenc *out, int e)
{
	out->gzip = out->identity = out->any = -1;
	return e;
}

int acceptenc_parse(const char *buf, size_t len, struct acceptenc *out)
{
	size_t i = 0, items = 0;

	out->gzip = out->identity = out->any = -1;
	for (;;) {
		size_t start, n;
		int q = 1000;

		skip_ows(buf, len, &i);
		if (i == len)
			return 0;
		if (buf[i] == ',') { /* an empty list element */
			i++;
			continue;
		}
		if (++items > ACCEPTENC_MAX_ITEMS)
			return bad(out, -E2BIG);
		start = i;
		n = token(buf, len, &i);
		if (n == 0)
			return bad(out, -EBADMSG);
		for (;;) {
			size_t pstart, pn;

			skip_ows(buf, len, &i);
			if (i == len || buf[i] != ';')
				break;
			i++;
			skip_ows(buf, len, &i);
			pstart = i;
			pn = token(buf, len, &i);
			if (pn == 0 || i == len || buf[i] != '=')
				return bad(out, -EBADMSG);
			i++;
			if (pn == 1 && (buf[pstart] == 'q' || buf[pstart] == 'Q')) {
				q = qvalue(buf, len, &i);
				if (q < 0)
					return bad(out, -EBADMSG);
			} else if (i < len && buf[i] == '"') {
				if (!quoted(buf, len, &i))
					return bad(out, -EBADMSG);
			} else if (token(buf, len, &i) == 0) {
				return bad(out, -EBADMSG);
			}
		}
		if (i < len && buf[i] != ',')
			return bad(out, -EBADMSG);
		if (n == 1 && buf[start] == '*')
			keep(&out->any, q);
		else if ((n == 4 && strncasecmp(buf + start, "gzip", 4) == 0) ||
			 (n == 6 && strncasecmp(buf + start, "x-gzip", 6) == 0))
			keep(&out->gzip, q);
		else if (n == 8 && strncasecmp(buf + start, "identity", 8) == 0)
			keep(&out->identity, q);
	}
}

/*
 * Identity "is acceptable by default unless specifically excluded"
 * (§12.5.3): not named, and no "*", it stands at the lowest q above 0, so
 * any gzip above 0 wins.
 */
enum acceptenc_coding acceptenc_pick(const struct acceptenc *a)
{
	int gz = a->gzip >= 0 ? a->gzip : a->any >= 0 ? a->any : 0;
	int id = a->identity >= 0 ? a->identity : a->any >= 0 ? a->any : 1;

	if (gz > 0 && gz >= id)
		return ACCEPTENC_GZIP;
	if (id > 0)
		return ACCEPTENC_IDENTITY;
	return ACCEPTENC_NONE;
}
