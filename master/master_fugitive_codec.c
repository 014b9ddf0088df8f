/*
 * The pure half of the Fugitive3D door (master_fugitive.c): the {ip:port}
 * server id as ParseServerAddress reads it, the request body as Go's
 * encoding/json decodes it into srvrepo.Server, the service's validation,
 * and the JSON its list is written in (json.Marshal). No I/O, clock or
 * logging: bytes in, struct out and back, so tests/unit/fugitive_test.c
 * tests it and tests/fuzz/fuzz_fugitive.c links this file alone.
 */
#include "master_fugitive.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "num.h"
#include "strbuf.h"

/* ---- UTF-8, as Go's unicode/utf8 reads it ---- */

/* Length of the rune at s (n > 0 bytes left) with *r set, or 0 where Go's
 * utf8.DecodeRune gives (RuneError, 1). */
static size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *r)
{
	uint8_t c = s[0], lo = 0x80, hi = 0xbf;

	if (c < 0x80) {
		*r = c;
		return 1;
	}
	if (c < 0xc2 || c > 0xf4)
		return 0;
	if (c < 0xe0) {
		if (n < 2 || (s[1] & 0xc0) != 0x80)
			return 0;
		*r = (uint32_t)(c & 0x1f) << 6 | (s[1] & 0x3f);
		return 2;
	}
	if (c < 0xf0) {
		if (c == 0xe0)
			lo = 0xa0; /* overlong */
		else if (c == 0xed)
			hi = 0x9f; /* surrogates */
		if (n < 3 || s[1] < lo || s[1] > hi || (s[2] & 0xc0) != 0x80)
			return 0;
		*r = (uint32_t)(c & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
		return 3;
	}
	if (c == 0xf0)
		lo = 0x90; /* overlong */
	else if (c == 0xf4)
		hi = 0x8f; /* past U+10FFFF */
	if (n < 4 || s[1] < lo || s[1] > hi || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80)
		return 0;
	*r = (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 |
	     (uint32_t)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
	return 4;
}

static size_t utf8_encode(uint32_t r, uint8_t out[static 4])
{
	if (r < 0x80) {
		out[0] = (uint8_t)r;
		return 1;
	}
	if (r < 0x800) {
		out[0] = (uint8_t)(0xc0 | r >> 6);
		out[1] = (uint8_t)(0x80 | (r & 0x3f));
		return 2;
	}
	if (r < 0x10000) {
		out[0] = (uint8_t)(0xe0 | r >> 12);
		out[1] = (uint8_t)(0x80 | (r >> 6 & 0x3f));
		out[2] = (uint8_t)(0x80 | (r & 0x3f));
		return 3;
	}
	out[0] = (uint8_t)(0xf0 | r >> 18);
	out[1] = (uint8_t)(0x80 | (r >> 12 & 0x3f));
	out[2] = (uint8_t)(0x80 | (r >> 6 & 0x3f));
	out[3] = (uint8_t)(0x80 | (r & 0x3f));
	return 4;
}

bool master_fugitive_utf8_valid(const char *s, size_t len)
{
	const uint8_t *p = (const uint8_t *)s;
	uint32_t r;

	for (size_t i = 0; i < len;) {
		size_t l = utf8_decode(p + i, len - i, &r);

		if (l == 0)
			return false;
		i += l;
	}
	return true;
}

/* unicode.IsSpace, which strings.TrimSpace trims. */
static bool is_space(uint32_t r)
{
	switch (r) {
	case '\t':
	case '\n':
	case '\v':
	case '\f':
	case '\r':
	case ' ':
	case 0x85:
	case 0xa0:
	case 0x1680:
	case 0x2028:
	case 0x2029:
	case 0x202f:
	case 0x205f:
	case 0x3000:
		return true;
	default:
		return r >= 0x2000 && r <= 0x200a;
	}
}

/* ---- the server id ---- */

bool master_fugitive_ip_is_v4(const struct addr_ip *ip)
{
	static const uint8_t mapped[12] = {[10] = 0xff, [11] = 0xff};

	return memcmp(ip->b, mapped, sizeof(mapped)) == 0;
}

/* net.ParseIP: dotted IPv4 or IPv6 text, no zone. */
static bool parse_ip(const char *s, size_t len, struct addr_ip *out)
{
	char buf[INET6_ADDRSTRLEN];
	struct in_addr a4;

	if (len == 0 || len >= sizeof(buf) || memchr(s, '\0', len) != NULL)
		return false;
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (inet_pton(AF_INET, buf, &a4) == 1) {
		memset(out->b, 0, 10);
		out->b[10] = out->b[11] = 0xff;
		memcpy(out->b + 12, &a4, 4);
		return true;
	}
	return inet_pton(AF_INET6, buf, out->b) == 1;
}

int master_fugitive_parse_id(const char *s, size_t len, struct master_fugitive_id *out)
{
	const char *host, *colon = NULL;
	size_t hlen, j = 0, k = 0;
	int64_t port;

	memset(out, 0, sizeof(*out));
	/* net.SplitHostPort: the port starts after the last colon. */
	for (size_t i = len; i > 0; i--) {
		if (s[i - 1] == ':') {
			colon = s + i - 1;
			break;
		}
	}
	if (colon == NULL)
		return -EINVAL;
	if (s[0] == '[') {
		const char *end = memchr(s, ']', len);

		/* "]" must come right before the last colon. */
		if (end == NULL || end + 1 != colon)
			return -EINVAL;
		host = s + 1;
		hlen = (size_t)(end - host);
		j = 1;
		k = (size_t)(end - s) + 1;
	} else {
		host = s;
		hlen = (size_t)(colon - s);
		if (memchr(host, ':', hlen) != NULL)
			return -EINVAL; /* too many colons */
	}
	if (memchr(s + j, '[', len - j) != NULL || memchr(s + k, ']', len - k) != NULL)
		return -EINVAL;
	/* strconv.Atoi on 64-bit: an optional sign, then decimal digits only,
	 * within int64. */
	if (num_parse(colon + 1, len - (size_t)(colon + 1 - s), INT64_MIN, INT64_MAX, NUM_SIGN,
		      &port) < 0)
		return -EINVAL;
	out->port = port;
	out->has_ip = parse_ip(host, hlen, &out->ip);
	return 0;
}

/* ---- the body, as encoding/json reads it into srvrepo.Server ---- */

/*
 * We do not hand the body to json-c: the service's acceptance is Go's, and
 * json-c's differs where it shows in status codes (json-c takes single
 * quotes, NaN, raw control characters and "5.", refuses invalid UTF-8 that
 * Go replaces, and hides the raw text time.Time parses). So this is Go's
 * scanner (encoding/json/scanner.go) as a checker, then a walk over the
 * top-level object of a document known to be well formed.
 */

/* The whole input one JSON value, as Go's checkValid. */
static bool json_check(const uint8_t *s, size_t n)
{
	enum { S_VALUE, S_VALUE_OR_END, S_KEY, S_KEY_OR_END, S_COLON, S_AFTER } st = S_VALUE;
	uint8_t is_obj[(MASTER_FUGITIVE_JSON_MAX_DEPTH + 7) / 8] = {0};
	size_t depth = 0, i = 0;

	for (;;) {
		uint8_t c;

		while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
			i++;
		if (st == S_AFTER && depth == 0)
			return i == n;
		if (i == n)
			return false;
		c = s[i];
		switch (st) {
		case S_VALUE_OR_END:
			if (c == ']') {
				depth--;
				i++;
				st = S_AFTER;
				break;
			}
			/* fall through */
		case S_VALUE:
			if (c == '{' || c == '[') {
				if (depth == MASTER_FUGITIVE_JSON_MAX_DEPTH)
					return false;
				if (c == '{')
					is_obj[depth / 8] |= (uint8_t)(1U << (depth % 8));
				else
					is_obj[depth / 8] &= (uint8_t) ~(1U << (depth % 8));
				depth++;
				i++;
				st = c == '{' ? S_KEY_OR_END : S_VALUE_OR_END;
				break;
			}
			if (c == '"')
				goto string;
			if (c == '-' || (c >= '0' && c <= '9')) {
				if (c == '-' && ++i == n)
					return false;
				if (s[i] == '0') {
					i++;
				} else if (s[i] >= '1' && s[i] <= '9') {
					while (i < n && s[i] >= '0' && s[i] <= '9')
						i++;
				} else {
					return false;
				}
				if (i < n && s[i] == '.') {
					if (++i == n || s[i] < '0' || s[i] > '9')
						return false;
					while (i < n && s[i] >= '0' && s[i] <= '9')
						i++;
				}
				if (i < n && (s[i] == 'e' || s[i] == 'E')) {
					if (++i < n && (s[i] == '+' || s[i] == '-'))
						i++;
					if (i == n || s[i] < '0' || s[i] > '9')
						return false;
					while (i < n && s[i] >= '0' && s[i] <= '9')
						i++;
				}
				st = S_AFTER;
				break;
			}
			{
				const char *lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
				size_t l = strlen(lit);

				if (n - i < l || memcmp(s + i, lit, l) != 0)
					return false;
				i += l;
				st = S_AFTER;
			}
			break;
		case S_KEY_OR_END:
			if (c == '}') {
				depth--;
				i++;
				st = S_AFTER;
				break;
			}
			/* fall through */
		case S_KEY:
			if (c != '"')
				return false;
			goto string;
		case S_COLON:
			if (c != ':')
				return false;
			i++;
			st = S_VALUE;
			break;
		case S_AFTER:
			if (is_obj[(depth - 1) / 8] & (1U << ((depth - 1) % 8))) {
				if (c == ',')
					st = S_KEY;
				else if (c == '}')
					depth--;
				else
					return false;
			} else {
				if (c == ',')
					st = S_VALUE;
				else if (c == ']')
					depth--;
				else
					return false;
			}
			i++;
			break;
		}
		continue;
	string:
		/* Any byte >= 0x20 but " and \ (invalid UTF-8 included); the
		 * escapes of RFC 8259. A key is followed by a colon. */
		for (i++;; i++) {
			if (i == n || s[i] < 0x20)
				return false;
			if (s[i] == '"')
				break;
			if (s[i] != '\\')
				continue;
			if (++i == n)
				return false;
			if (s[i] == 'u') {
				for (int h = 0; h < 4; h++) {
					uint8_t x;

					if (++i == n)
						return false;
					x = s[i];
					if (!((x >= '0' && x <= '9') || (x >= 'a' && x <= 'f') ||
					      (x >= 'A' && x <= 'F')))
						return false;
				}
			} else if (strchr("\"\\/bfnrt", s[i]) == NULL || s[i] == '\0') {
				return false;
			}
		}
		i++;
		st = (st == S_KEY || st == S_KEY_OR_END) ? S_COLON : S_AFTER;
	}
}

static size_t skip_ws(const uint8_t *s, size_t n, size_t i)
{
	while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
		i++;
	return i;
}

/* In a checked document: the index after the string opening at i. */
static size_t string_end(const uint8_t *s, size_t i)
{
	for (i++; s[i] != '"'; i++) {
		if (s[i] == '\\')
			i++;
	}
	return i + 1;
}

/* In a checked document: the index after the value starting at i. */
static size_t value_end(const uint8_t *s, size_t n, size_t i)
{
	size_t depth = 0;

	if (s[i] == '"')
		return string_end(s, i);
	if (s[i] != '{' && s[i] != '[') {
		while (i < n && strchr(",}] \t\r\n", s[i]) == NULL)
			i++;
		return i;
	}
	do {
		if (s[i] == '"') {
			i = string_end(s, i);
			continue;
		}
		if (s[i] == '{' || s[i] == '[')
			depth++;
		else if (s[i] == '}' || s[i] == ']')
			depth--;
		i++;
	} while (depth > 0);
	return i;
}

static int hex4(const uint8_t *p)
{
	int v = 0;

	for (int k = 0; k < 4; k++) {
		uint8_t x = p[k];

		v = v * 16 + (x <= '9' ? x - '0' : (x | 0x20) - 'a' + 10);
	}
	return v;
}

typedef void rune_fn(void *arg, uint32_t r);

/*
 * The runes of a checked string's contents s[0..n), as Go's unquote gives
 * them: escapes decoded, a surrogate pair joined, a lone surrogate and each
 * byte that is not UTF-8 replaced with U+FFFD.
 */
static void unquote(const uint8_t *s, size_t n, rune_fn *put, void *arg)
{
	for (size_t i = 0; i < n;) {
		uint32_t r;
		size_t l;

		if (s[i] == '\\') {
			switch (s[i + 1]) {
			case 'b':
				r = '\b';
				break;
			case 'f':
				r = '\f';
				break;
			case 'n':
				r = '\n';
				break;
			case 'r':
				r = '\r';
				break;
			case 't':
				r = '\t';
				break;
			case 'u':
				r = (uint32_t)hex4(s + i + 2);
				i += 6;
				if (r >= 0xd800 && r < 0xe000) {
					uint32_t r2;

					if (r < 0xdc00 && n - i >= 6 && s[i] == '\\' &&
					    s[i + 1] == 'u' &&
					    (r2 = (uint32_t)hex4(s + i + 2)) >= 0xdc00 &&
					    r2 < 0xe000) {
						r = 0x10000 + ((r - 0xd800) << 10) + (r2 - 0xdc00);
						i += 6;
					} else {
						r = 0xfffd;
					}
				}
				put(arg, r);
				continue;
			default: /* " \ / */
				r = s[i + 1];
				break;
			}
			put(arg, r);
			i += 2;
			continue;
		}
		l = utf8_decode(s + i, n - i, &r);
		if (l == 0) {
			r = 0xfffd;
			l = 1;
		}
		put(arg, r);
		i += l;
	}
}

/* The name: trimmed on the fly, its bytes kept up to the maximum. */
struct name_acc {
	struct master_fugitive_body *b;
	size_t off, start, end; /* start == SIZE_MAX: only spaces so far */
};

static void name_put(void *arg, uint32_t r)
{
	struct name_acc *a = arg;
	uint8_t u[4];
	size_t l = utf8_encode(r, u);

	if (a->start == SIZE_MAX && !is_space(r))
		a->start = a->off;
	if (a->start != SIZE_MAX && a->off + l - a->start <= MASTER_FUGITIVE_NAME_MAX)
		memcpy(a->b->name + (a->off - a->start), u, l);
	a->off += l;
	if (!is_space(r))
		a->end = a->off;
}

/* Short strings (keys, "ip"): up to cap bytes kept, longer ones marked. */
struct short_acc {
	char buf[48];
	size_t len;
	bool too_long, fold, nomatch;
};

static void short_put(void *arg, uint32_t r)
{
	struct short_acc *a = arg;
	uint8_t u[4];
	size_t l;

	if (a->fold) {
		/*
		 * Keys meet the (ASCII) field names under bytes.EqualFold:
		 * ASCII letters fold, and so do U+017F (long s) and U+212A
		 * (Kelvin sign), whose case orbits hold 's' and 'k'.
		 */
		if (r >= 'A' && r <= 'Z')
			r += 'a' - 'A';
		else if (r == 0x17f)
			r = 's';
		else if (r == 0x212a)
			r = 'k';
		else if (r >= 0x80)
			a->nomatch = true;
	}
	l = utf8_encode(r, u);
	if (a->len + l > sizeof(a->buf)) {
		a->too_long = true;
		return;
	}
	memcpy(a->buf + a->len, u, l);
	a->len += l;
}

enum field {
	F_NONE,
	F_IP,
	F_PORT,
	F_NAME,
	F_GAME_VERSION,
	F_CURRENT_PLAYERS,
	F_MAX_PLAYERS,
	F_IS_JOINABLE,
	F_LAST_SEEN,
};

static const char *const field_names[] = {
	[F_IP] = "ip",
	[F_PORT] = "port",
	[F_NAME] = "name",
	[F_GAME_VERSION] = "game_version",
	[F_CURRENT_PLAYERS] = "current_players",
	[F_MAX_PLAYERS] = "max_players",
	[F_IS_JOINABLE] = "is_joinable",
	[F_LAST_SEEN] = "last_seen",
};

static enum field match_key(const uint8_t *s, size_t n)
{
	struct short_acc a = {.fold = true};

	unquote(s, n, short_put, &a);
	if (a.too_long || a.nomatch)
		return F_NONE;
	for (size_t f = F_IP; f <= F_LAST_SEEN; f++) {
		if (strlen(field_names[f]) == a.len && memcmp(field_names[f], a.buf, a.len) == 0)
			return (enum field)f;
	}
	return F_NONE;
}

/* A JSON number into a Go int: strconv.ParseInt(text, 10, 64). */
static bool number_int(const uint8_t *s, size_t n, long long *out)
{
	int64_t v;

	if (memchr(s, '.', n) != NULL || memchr(s, 'e', n) != NULL || memchr(s, 'E', n) != NULL)
		return false;
	if (num_parse((const char *)s, n, INT64_MIN, INT64_MAX, NUM_SIGN, &v) < 0)
		return false;
	*out = v;
	return true;
}

static unsigned digits(const uint8_t *s, size_t n, bool *ok)
{
	unsigned v = 0;

	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			*ok = false;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	return v;
}

/*
 * time.Time.UnmarshalJSON on the raw string (no unescaping): Go's strict
 * RFC 3339, "2006-01-02T15:04:05[.frac](Z|+07:00)", every field in range,
 * the day valid for the month and year.
 */
static bool rfc3339_ok(const uint8_t *s, size_t n)
{
	static const uint8_t mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	unsigned year, month, day;
	bool ok = true;
	size_t i = 19;

	if (n < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':')
		return false;
	year = digits(s, 4, &ok);
	month = digits(s + 5, 2, &ok);
	day = digits(s + 8, 2, &ok);
	if (!ok || month < 1 || month > 12 || day < 1)
		return false;
	if (day > (unsigned)mdays[month - 1] +
			  (month == 2 && year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)))
		return false;
	if (digits(s + 11, 2, &ok) > 23 || digits(s + 14, 2, &ok) > 59 ||
	    digits(s + 17, 2, &ok) > 59 || !ok)
		return false;
	if (n - i >= 2 && s[i] == '.' && s[i + 1] >= '0' && s[i + 1] <= '9') {
		for (i += 2; i < n && s[i] >= '0' && s[i] <= '9'; i++)
			;
	}
	if (n - i == 1)
		return s[i] == 'Z';
	if (n - i != 6 || (s[i] != '+' && s[i] != '-') || s[i + 3] != ':')
		return false;
	return digits(s + i + 1, 2, &ok) <= 23 && digits(s + i + 4, 2, &ok) <= 59 && ok;
}

/* One member's value v[0..n) into its field; false is a decoding error. */
static bool decode_field(enum field f, const uint8_t *v, size_t n, struct master_fugitive_body *b)
{
	long long x;

	/* null leaves every field of ours as it was. */
	if (f == F_NONE || v[0] == 'n')
		return true;
	switch (f) {
	case F_NAME: {
		struct name_acc a = {.b = b, .start = SIZE_MAX};

		if (v[0] != '"')
			return false;
		unquote(v + 1, n - 2, name_put, &a);
		b->name_len = a.start == SIZE_MAX ? 0 : a.end - a.start;
		return true;
	}
	case F_IP: {
		/* net.IP's UnmarshalText: "" is no IP, else ParseIP or fail. */
		struct short_acc a = {.fold = false};
		struct addr_ip ip;

		if (v[0] != '"')
			return false;
		unquote(v + 1, n - 2, short_put, &a);
		return a.len == 0 || (!a.too_long && parse_ip(a.buf, a.len, &ip));
	}
	case F_PORT:
	case F_GAME_VERSION:
	case F_CURRENT_PLAYERS:
	case F_MAX_PLAYERS:
		if (v[0] != '-' && (v[0] < '0' || v[0] > '9'))
			return false;
		if (!number_int(v, n, &x))
			return false;
		if (f == F_GAME_VERSION)
			b->game_version = x;
		else if (f == F_CURRENT_PLAYERS)
			b->current_players = x;
		else if (f == F_MAX_PLAYERS)
			b->max_players = x;
		return true;
	case F_IS_JOINABLE:
		if (v[0] != 't' && v[0] != 'f')
			return false;
		b->is_joinable = v[0] == 't';
		return true;
	case F_LAST_SEEN:
		return v[0] == '"' && rfc3339_ok(v + 1, n - 2);
	default:
		return true;
	}
}

int master_fugitive_parse_body(const char *buf, size_t len, struct master_fugitive_body *out)
{
	const uint8_t *s = (const uint8_t *)buf;
	size_t i;

	memset(out, 0, sizeof(*out));
	if (!json_check(s, len))
		return -EBADMSG;
	i = skip_ws(s, len, 0);
	if (s[i] == 'n')
		return 0; /* null: Unmarshal leaves the struct alone */
	if (s[i] != '{')
		return -EBADMSG; /* "cannot unmarshal array into Go value ..." */
	i = skip_ws(s, len, i + 1);
	if (s[i] == '}')
		return 0;
	for (;;) {
		size_t kend = string_end(s, i), vend;
		enum field f = match_key(s + i + 1, kend - i - 2);

		i = skip_ws(s, len, skip_ws(s, len, kend) + 1);
		vend = value_end(s, len, i);
		if (!decode_field(f, s + i, vend - i, out))
			return -EBADMSG;
		i = skip_ws(s, len, vend);
		if (s[i] == '}')
			return 0;
		i = skip_ws(s, len, i + 1);
	}
}

const char *master_fugitive_validate(const struct master_fugitive_id *id,
				     const struct master_fugitive_body *b)
{
	/* srvrepo: ServerAddress.Validate, then the trimmed name. */
	if (!id->has_ip || !master_fugitive_ip_is_v4(&id->ip))
		return "IP is not a valid IPv4 address";
	if (id->port < MASTER_FUGITIVE_PORT_MIN || id->port > MASTER_FUGITIVE_PORT_MAX)
		return "port is not within the valid port range of 1024-65535";
	if (b->name_len < MASTER_FUGITIVE_NAME_MIN || b->name_len > MASTER_FUGITIVE_NAME_MAX)
		return "name length must be within range of 3-32";
	return NULL;
}

/* ---- JSON out, as Go's json.Marshal writes it ---- */

void master_fugitive_json_string(struct strbuf *out, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const uint8_t *p = (const uint8_t *)s;
	size_t i = 0, run = 0;

	strbuf_append(out, "\"", 1);
	while (i < len) {
		uint8_t c = p[i];
		char esc[8];
		size_t l;
		uint32_t r;

		if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\' && c != '<' && c != '>' &&
		    c != '&') {
			i++;
			continue;
		}
		strbuf_append(out, s + run, i - run);
		if (c < 0x80) {
			const char *e = NULL;

			switch (c) {
			case '"':
				e = "\\\"";
				break;
			case '\\':
				e = "\\\\";
				break;
			case '\b':
				e = "\\b";
				break;
			case '\f':
				e = "\\f";
				break;
			case '\n':
				e = "\\n";
				break;
			case '\r':
				e = "\\r";
				break;
			case '\t':
				e = "\\t";
				break;
			default:
				snprintf(esc, sizeof(esc), "\\u00%c%c", hex[c >> 4], hex[c & 15]);
				e = esc;
			}
			strbuf_append(out, e, strlen(e));
			run = ++i;
			continue;
		}
		l = utf8_decode(p + i, len - i, &r);
		if (l == 0) {
			strbuf_append(out, "\\ufffd", 6);
			l = 1;
		} else if (r == 0x2028 || r == 0x2029) {
			strbuf_append(out, r == 0x2028 ? "\\u2028" : "\\u2029", 6);
		} else {
			strbuf_append(out, s + i, l);
		}
		i += l;
		run = i;
	}
	strbuf_append(out, s + run, i - run);
	strbuf_append(out, "\"", 1);
}

void master_fugitive_json_server(struct strbuf *out, const struct master_fugitive_server *s)
{
	time_t t = (time_t)(s->seen_wall_ms / 1000);
	struct tm tm;
	char when[32];

	if (gmtime_r(&t, &tm) == NULL ||
	    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(when, sizeof(when), "1970-01-01T00:00:00Z");
	strbuf_printf(out, "{\"ip\":\"%u.%u.%u.%u\",\"port\":%u,\"name\":", s->ip[0], s->ip[1],
		      s->ip[2], s->ip[3], s->port);
	master_fugitive_json_string(out, s->name, s->name_len);
	strbuf_printf(out,
		      ",\"game_version\":%lld,\"current_players\":%lld,\"max_players\":%lld,"
		      "\"is_joinable\":%s,\"last_seen\":\"%s\"}",
		      s->game_version, s->current_players, s->max_players,
		      s->is_joinable ? "true" : "false", when);
}

/* ---- stored names ---- */

bool master_fugitive_name_ok(const char *s, size_t len)
{
	const uint8_t *p = (const uint8_t *)s;
	uint32_t first, last;
	size_t i = len;

	if (len < MASTER_FUGITIVE_NAME_MIN || len > MASTER_FUGITIVE_NAME_MAX ||
	    !master_fugitive_utf8_valid(s, len))
		return false;
	utf8_decode(p, len, &first);
	while (i > 0 && (p[i - 1] & 0xc0) == 0x80)
		i--;
	utf8_decode(p + i - 1, len - i + 1, &last);
	return !is_space(first) && !is_space(last);
}
