/*
 * The Fugitive3D repository door: the server browser API of the game
 * Fugitive 3D, as the Go service FugitiveTheGame/Fugitive3dServerRepository
 * answers it (internal/httpapi/server.go, reflection.go, router.go;
 * srvrepo/srvrepo.go). The shipped game may match on status codes, so they
 * and the bodies are the service's, inconsistencies included.
 *
 *   GET    /reflection/ip      200 {"ip":"203.0.113.4"}
 *   GET    /servers            200 [{"ip":..,"port":..,"name":..,...}]
 *   POST   /servers/{ip:port}  first registration, with a UDP ping-back
 *   PUT    /servers/{ip:port}  heartbeat; an upsert (202 updated, 201 registered)
 *   DELETE /servers/{ip:port}  deregistration
 *
 * A caller may only touch the server at its own IP (the service's only
 * authentication); the caller's IP is the TCP peer, or X-Forwarded-For from
 * a --trusted-proxy peer (master_client_ip). Entries are REG_FUGITIVE
 * registry entries whose TTL is --stale; PUT refreshes them.
 *
 * The ping-back runs in the loop: the POST handler opens a connected UDP
 * socket to the server, sends "ping" ten times, suspends the request and
 * answers it from the socket's callback (the first datagram: "pong" or not)
 * or from a timer (cfg.ping_timeout_ms, 5 s). At most FUG_PING_MAX run at
 * once, FUG_PING_PER_IP per caller. Where we differ from the service:
 *  - the caller's IP is checked before the ping-back, not after it, so
 *    nobody can make us send datagrams to an address that is not theirs
 *    (the service pings first: a foreign caller gets 403 only if the target
 *    answered, and can probe any UDP port);
 *  - too many ping-backs in flight, or too many servers on one IP, are
 *    refused with the statuses the service has for "could not ping" (412)
 *    and "registration failed" (500);
 *  - unrouted methods and paths get gin's 404 "404 page not found" without
 *    its trailing-slash redirects; responses are never gzipped.
 */
#include "master_fugitive.h"

#include <arpa/inet.h>
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "httpd.h"
#include "log.h"
#include "master.h"
#include "strbuf.h"

#define FUG_CAPACITY    (4096) /* servers listed at most */
#define FUG_PER_IP_MAX  (64)   /* servers registered from one IP */
#define FUG_PING_MAX    (64)   /* ping-backs in flight */
#define FUG_PING_PER_IP (4)    /* ping-backs in flight for one caller */
#define FUG_PINGS       (10)   /* "ping" datagrams per ping-back (server.go) */
#define FUG_KEY_LEN     (6)    /* IPv4 + port, big-endian */
#define FUG_LIST_MAX    ((size_t)8 << 20)

/* gin's c.JSON. */
#define JSON_TYPE "application/json; charset=utf-8"

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

bool fugitive_utf8_valid(const char *s, size_t len)
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

bool fugitive_ip_is_v4(const struct addr_ip *ip)
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

/* strconv.Atoi on 64-bit: an optional sign, then decimal digits only. */
static bool parse_atoi(const char *s, size_t len, long long *out)
{
	unsigned long long v = 0, lim;
	bool neg = false;
	size_t i = 0;

	if (len > 0 && (s[0] == '+' || s[0] == '-')) {
		neg = s[0] == '-';
		i = 1;
	}
	if (i == len)
		return false;
	lim = neg ? (unsigned long long)LLONG_MAX + 1 : (unsigned long long)LLONG_MAX;
	for (; i < len; i++) {
		unsigned d = (unsigned)(unsigned char)s[i] - '0';

		if (d > 9 || v > (lim - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = neg ? (v == (unsigned long long)LLONG_MAX + 1 ? LLONG_MIN : -(long long)v)
		   : (long long)v;
	return true;
}

int fugitive_parse_id(const char *s, size_t len, struct fugitive_id *out)
{
	const char *host, *colon = NULL;
	size_t hlen, j = 0, k = 0;

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
	if (!parse_atoi(colon + 1, len - (size_t)(colon + 1 - s), &out->port))
		return -EINVAL;
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
	uint8_t is_obj[(FUGITIVE_JSON_MAX_DEPTH + 7) / 8] = {0};
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
				if (depth == FUGITIVE_JSON_MAX_DEPTH)
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
	struct fugitive_body *b;
	size_t off, start, end; /* start == SIZE_MAX: only spaces so far */
};

static void name_put(void *arg, uint32_t r)
{
	struct name_acc *a = arg;
	uint8_t u[4];
	size_t l = utf8_encode(r, u);

	if (a->start == SIZE_MAX && !is_space(r))
		a->start = a->off;
	if (a->start != SIZE_MAX && a->off + l - a->start <= FUGITIVE_NAME_MAX)
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
	if (memchr(s, '.', n) != NULL || memchr(s, 'e', n) != NULL || memchr(s, 'E', n) != NULL)
		return false;
	return parse_atoi((const char *)s, n, out);
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
static bool decode_field(enum field f, const uint8_t *v, size_t n, struct fugitive_body *b)
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

int fugitive_parse_body(const char *buf, size_t len, struct fugitive_body *out)
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

const char *fugitive_validate(const struct fugitive_id *id, const struct fugitive_body *b)
{
	/* srvrepo: ServerAddress.Validate, then the trimmed name. */
	if (!id->has_ip || !fugitive_ip_is_v4(&id->ip))
		return "IP is not a valid IPv4 address";
	if (id->port < FUGITIVE_PORT_MIN || id->port > FUGITIVE_PORT_MAX)
		return "port is not within the valid port range of 1024-65535";
	if (b->name_len < FUGITIVE_NAME_MIN || b->name_len > FUGITIVE_NAME_MAX)
		return "name length must be within range of 3-32";
	return NULL;
}

/* ---- JSON out, as Go's json.Marshal writes it ---- */

void fugitive_json_string(struct strbuf *out, const char *s, size_t len)
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

void fugitive_json_server(struct strbuf *out, const struct fugitive_server *s)
{
	time_t t = (time_t)(s->seen_wall_ms / 1000);
	struct tm tm;
	char when[32];

	if (gmtime_r(&t, &tm) == NULL ||
	    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(when, sizeof(when), "1970-01-01T00:00:00Z");
	strbuf_printf(out, "{\"ip\":\"%u.%u.%u.%u\",\"port\":%u,\"name\":", s->ip[0], s->ip[1],
		      s->ip[2], s->ip[3], s->port);
	fugitive_json_string(out, s->name, s->name_len);
	strbuf_printf(out,
		      ",\"game_version\":%lld,\"current_players\":%lld,\"max_players\":%lld,"
		      "\"is_joinable\":%s,\"last_seen\":\"%s\"}",
		      s->game_version, s->current_players, s->max_players,
		      s->is_joinable ? "true" : "false", when);
}

/* ---- registry entries ---- */

struct fug_entry {
	struct reg_head head;
	uint8_t ip[4];
	uint16_t port;
	uint8_t name_len;
	bool is_joinable;
	char name[FUGITIVE_NAME_MAX];
	long long game_version, current_players, max_players;
};

static void make_key(const uint8_t ip[static 4], uint16_t port, uint8_t key[static FUG_KEY_LEN])
{
	memcpy(key, ip, 4);
	key[4] = (uint8_t)(port >> 8);
	key[5] = (uint8_t)port;
}

static void key_of(const void *val, uint8_t key[REG_KEY_MAX])
{
	const struct fug_entry *e = val;

	make_key(e->ip, e->port, key);
}

static void entry_save(const void *val, struct json_object *o)
{
	const struct fug_entry *e = val;
	char ip[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, e->ip, ip, sizeof(ip));
	json_object_object_add(o, "ip", json_object_new_string(ip));
	json_object_object_add(o, "port", json_object_new_int(e->port));
	json_object_object_add(o, "name", json_object_new_string_len(e->name, e->name_len));
	json_object_object_add(o, "game_version", json_object_new_int64(e->game_version));
	json_object_object_add(o, "current_players", json_object_new_int64(e->current_players));
	json_object_object_add(o, "max_players", json_object_new_int64(e->max_players));
	json_object_object_add(o, "is_joinable", json_object_new_boolean(e->is_joinable));
}

static bool get_int64(struct json_object *o, const char *key, long long *out)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return false;
	*out = json_object_get_int64(v);
	/* json-c keeps values past INT64_MAX as uint64 and clamps them here. */
	return *out != LLONG_MAX || json_object_get_uint64(v) == (uint64_t)LLONG_MAX;
}

/* A stored name is what validation let through: 3-32 bytes of UTF-8
 * without surrounding spaces. */
static bool name_ok(const char *s, size_t len)
{
	const uint8_t *p = (const uint8_t *)s;
	uint32_t first, last;
	size_t i = len;

	if (len < FUGITIVE_NAME_MIN || len > FUGITIVE_NAME_MAX || !fugitive_utf8_valid(s, len))
		return false;
	utf8_decode(p, len, &first);
	while (i > 0 && (p[i - 1] & 0xc0) == 0x80)
		i--;
	utf8_decode(p + i - 1, len - i + 1, &last);
	return !is_space(first) && !is_space(last);
}

static int entry_load(struct json_object *o, void *val, char *err, size_t errsize)
{
	struct fug_entry *e = val;
	struct json_object *v;
	struct in_addr a4;
	long long port;
	const char *name;
	size_t nlen;

	if (!json_object_object_get_ex(o, "ip", &v) || !json_object_is_type(v, json_type_string) ||
	    inet_pton(AF_INET, json_object_get_string(v), &a4) != 1) {
		snprintf(err, errsize, "ip: not an IPv4 address");
		return -EBADMSG;
	}
	memcpy(e->ip, &a4, 4);
	if (!get_int64(o, "port", &port) || port < FUGITIVE_PORT_MIN || port > FUGITIVE_PORT_MAX) {
		snprintf(err, errsize, "port: not a number in %d-%d", FUGITIVE_PORT_MIN,
			 FUGITIVE_PORT_MAX);
		return -EBADMSG;
	}
	e->port = (uint16_t)port;
	if (!json_object_object_get_ex(o, "name", &v) ||
	    !json_object_is_type(v, json_type_string)) {
		snprintf(err, errsize, "name: missing or not a string");
		return -EBADMSG;
	}
	name = json_object_get_string(v);
	nlen = (size_t)json_object_get_string_len(v);
	if (!name_ok(name, nlen)) {
		snprintf(err, errsize, "name: not %d-%d bytes of trimmed UTF-8", FUGITIVE_NAME_MIN,
			 FUGITIVE_NAME_MAX);
		return -EBADMSG;
	}
	memcpy(e->name, name, nlen);
	e->name_len = (uint8_t)nlen;
	if (!get_int64(o, "game_version", &e->game_version) ||
	    !get_int64(o, "current_players", &e->current_players) ||
	    !get_int64(o, "max_players", &e->max_players)) {
		snprintf(err, errsize, "game_version, current_players, max_players: not integers");
		return -EBADMSG;
	}
	if (!json_object_object_get_ex(o, "is_joinable", &v) ||
	    !json_object_is_type(v, json_type_boolean)) {
		snprintf(err, errsize, "is_joinable: missing or not a boolean");
		return -EBADMSG;
	}
	e->is_joinable = json_object_get_boolean(v);
	return 0;
}

/* ---- the door ---- */

/* What became of a POST or PUT, for /metrics. */
enum outcome {
	O_POST_REGISTERED, /* 200 registration complete */
	O_POST_BAD_ID,     /* 406 invalid server ID */
	O_POST_NO_SOCKET,  /* 412: the address cannot be dialled */
	O_POST_BUSY,       /* 412: too many ping-backs in flight */
	O_POST_FORBIDDEN,  /* 403 */
	O_POST_NO_PONG,    /* 504 */
	O_POST_BAD_PONG,   /* 406 Bad ping response */
	O_POST_INVALID,    /* 400 */
	O_POST_FULL,       /* 500: registry or per-IP cap full */
	O_POST_SHUTDOWN,   /* 503: the master stopped first */
	O_PUT_UPDATED,     /* 202 */
	O_PUT_REGISTERED,  /* 201 */
	O_PUT_INVALID,     /* 400 */
	O_PUT_FORBIDDEN,   /* 403 */
	O_PUT_FULL,        /* 500 */
	O_DEL_REMOVED,     /* 200 success */
	O_DEL_UNKNOWN,     /* 404 failure */
	O_DEL_BAD_ID,      /* 404 invalid server ID */
	O_DEL_FORBIDDEN,   /* 403 */
	O_N
};

static const struct {
	const char *method, *outcome;
} outcome_labels[O_N] = {
	[O_POST_REGISTERED] = {"POST", "registered"},
	[O_POST_BAD_ID] = {"POST", "bad_id"},
	[O_POST_NO_SOCKET] = {"POST", "cannot_ping"},
	[O_POST_BUSY] = {"POST", "busy"},
	[O_POST_FORBIDDEN] = {"POST", "forbidden"},
	[O_POST_NO_PONG] = {"POST", "no_pong"},
	[O_POST_BAD_PONG] = {"POST", "bad_pong"},
	[O_POST_INVALID] = {"POST", "invalid"},
	[O_POST_FULL] = {"POST", "full"},
	[O_POST_SHUTDOWN] = {"POST", "shutdown"},
	[O_PUT_UPDATED] = {"PUT", "updated"},
	[O_PUT_REGISTERED] = {"PUT", "registered"},
	[O_PUT_INVALID] = {"PUT", "invalid"},
	[O_PUT_FORBIDDEN] = {"PUT", "forbidden"},
	[O_PUT_FULL] = {"PUT", "full"},
	[O_DEL_REMOVED] = {"DELETE", "removed"},
	[O_DEL_UNKNOWN] = {"DELETE", "unknown"},
	[O_DEL_BAD_ID] = {"DELETE", "bad_id"},
	[O_DEL_FORBIDDEN] = {"DELETE", "forbidden"},
};

/* The service's messages (server.go), one per error. */
#define MSG_FORBIDDEN "request IP address does not match client IP address"
#define MSG_BAD_JSON  "invalid request JSON"
#define MSG_BAD_ID    "invalid server ID"
#define MSG_NO_PING   "Repository could not ping you."
#define MSG_NO_PONG   "no ping response received, is your port not properly forwarded?"
#define MSG_BAD_PONG  "Bad ping response"
#define MSG_INTERNAL  "internal server error"

struct pingback {
	struct master_fugitive *f;
	struct httpd_req *req; /* NULL: the slot is free */
	struct ev_io *io;
	struct ev_timer timer;
	struct fugitive_id id;
	long long started_ms;
};

struct master_fugitive {
	struct master *m;
	struct pingback ping[FUG_PING_MAX];
	unsigned inflight;
	uint64_t outcomes[O_N];
	uint64_t pings_sent, ping_send_errors;
	struct log_ratelimit rl_socket;
};

static void reply(struct master *m, struct httpd_req *req, const char *endpoint, unsigned status,
		  const char *result)
{
	struct strbuf b;

	/* gin.H{"result": ...}. */
	strbuf_init(&b, 1024);
	strbuf_append(&b, "{\"result\":", 10);
	fugitive_json_string(&b, result, strlen(result));
	strbuf_append(&b, "}", 1);
	httpd_reply(req, status, JSON_TYPE, b.p, b.len);
	strbuf_release(&b);
	master_http_count(m, endpoint, status);
}

static void caller_ip(struct master *m, struct httpd_req *req, struct addr_ip *ip)
{
	struct addr a;

	/*
	 * gin's ClientIP with SetTrustedProxies: the forwarded address only
	 * from a trusted peer, else the peer; a trusted proxy's unparsable
	 * header leaves the peer (which then fails the checks closed).
	 */
	master_client_ip(m, req, "X-Forwarded-For", &a);
	addr_to_ip(&a, ip);
}

static const char *id_str(const struct fugitive_id *id, char *buf, size_t size)
{
	char ip[INET6_ADDRSTRLEN];

	if (!id->has_ip)
		snprintf(ip, sizeof(ip), "?");
	else
		addr_ip_fmt(&id->ip, ip, sizeof(ip));
	snprintf(buf, size, fugitive_ip_is_v4(&id->ip) ? "%s:%lld" : "[%s]:%lld", ip, id->port);
	return buf;
}

static size_t count_ip(struct master_fugitive *f, const uint8_t ip[static 4])
{
	size_t n = 0;

	/* XXX: O(n) over the servers, only when a new one is added; fine
	 * at FUG_CAPACITY. */
	for (struct fug_entry *e = registry_next(f->m->reg, REG_FUGITIVE, NULL); e != NULL;
	     e = registry_next(f->m->reg, REG_FUGITIVE, e)) {
		if (memcmp(e->ip, ip, 4) == 0)
			n++;
	}
	return n;
}

/* srvrepo Register: an upsert. 0 (*created set) or -ENOSPC. */
static int store(struct master_fugitive *f, const struct fugitive_id *id,
		 const struct fugitive_body *b, bool *created)
{
	struct registry *reg = f->m->reg;
	uint8_t key[FUG_KEY_LEN];
	struct fug_entry *e;

	make_key(id->ip.b + 12, (uint16_t)id->port, key);
	e = registry_get(reg, REG_FUGITIVE, key);
	*created = e == NULL;
	if (e != NULL) {
		registry_refresh(reg, REG_FUGITIVE, e);
	} else {
		if (count_ip(f, id->ip.b + 12) >= FUG_PER_IP_MAX)
			return -ENOSPC;
		e = registry_put(reg, REG_FUGITIVE, key, created);
		if (e == NULL)
			return -ENOSPC;
		memcpy(e->ip, id->ip.b + 12, 4);
		e->port = (uint16_t)id->port;
	}
	memcpy(e->name, b->name, b->name_len);
	e->name_len = (uint8_t)b->name_len;
	e->game_version = b->game_version;
	e->current_players = b->current_players;
	e->max_players = b->max_players;
	e->is_joinable = b->is_joinable;
	return 0;
}

static void count(struct master_fugitive *f, enum outcome o)
{
	f->outcomes[o]++;
}

/* GET /servers */
static void list(struct master *m, struct httpd_req *req)
{
	struct strbuf b;
	bool first = true;

	registry_expire(m->reg);
	strbuf_init(&b, FUG_LIST_MAX);
	strbuf_append(&b, "[", 1);
	for (struct fug_entry *e = registry_next(m->reg, REG_FUGITIVE, NULL); e != NULL;
	     e = registry_next(m->reg, REG_FUGITIVE, e)) {
		struct fugitive_server s = {
			.port = e->port,
			.name = e->name,
			.name_len = e->name_len,
			.game_version = e->game_version,
			.current_players = e->current_players,
			.max_players = e->max_players,
			.is_joinable = e->is_joinable,
			.seen_wall_ms = e->head.seen_wall_ms,
		};

		memcpy(s.ip, e->ip, 4);
		if (!first)
			strbuf_append(&b, ",", 1);
		fugitive_json_server(&b, &s);
		first = false;
	}
	strbuf_append(&b, "]", 1);
	if (b.bad) {
		/* Cannot happen below FUG_LIST_MAX; say so if it does. */
		reply(m, req, "fugitive_list", 500, MSG_INTERNAL);
	} else {
		httpd_reply(req, 200, JSON_TYPE, b.p, b.len);
		master_http_count(m, "fugitive_list", 200);
	}
	strbuf_release(&b);
}

/* GET /reflection/ip */
static void reflect(struct master *m, struct httpd_req *req)
{
	struct addr_ip ip;
	char text[INET6_ADDRSTRLEN], body[INET6_ADDRSTRLEN + 16];
	int n;

	caller_ip(m, req, &ip);
	addr_ip_fmt(&ip, text, sizeof(text));
	n = snprintf(body, sizeof(body), "{\"ip\":\"%s\"}", text);
	httpd_reply(req, 200, JSON_TYPE, body, (size_t)n);
	master_http_count(m, "fugitive_reflection", 200);
}

/* PUT /servers/{id}: HandleUpdate. */
static void update(struct master *m, struct httpd_req *req, const char *idtext)
{
	struct master_fugitive *f = m->fug;
	struct fugitive_body b;
	struct fugitive_id id;
	struct addr_ip caller;
	const char *body, *msg;
	char who[ADDR_STRLEN + 24];
	size_t blen;
	bool created;

	body = httpd_body(req, &blen);
	if (httpd_body_too_big(req) || fugitive_parse_body(body, blen, &b) < 0) {
		count(f, O_PUT_INVALID);
		reply(m, req, "fugitive_update", 400, MSG_BAD_JSON);
		return;
	}
	if (fugitive_parse_id(idtext, strlen(idtext), &id) < 0) {
		count(f, O_PUT_INVALID);
		reply(m, req, "fugitive_update", 400, MSG_BAD_ID);
		return;
	}
	if ((msg = fugitive_validate(&id, &b)) != NULL) {
		count(f, O_PUT_INVALID);
		reply(m, req, "fugitive_update", 400, msg);
		return;
	}
	caller_ip(m, req, &caller);
	if (memcmp(caller.b, id.ip.b, 16) != 0) {
		count(f, O_PUT_FORBIDDEN);
		log_debug("fugitive-refused method=PUT server=%s reason=foreign-caller",
			  id_str(&id, who, sizeof(who)));
		reply(m, req, "fugitive_update", 403, MSG_FORBIDDEN);
		return;
	}
	if (store(f, &id, &b, &created) < 0) {
		count(f, O_PUT_FULL);
		log_debug("fugitive-refused method=PUT server=%s reason=full",
			  id_str(&id, who, sizeof(who)));
		reply(m, req, "fugitive_update", 500, MSG_INTERNAL);
		return;
	}
	if (created) {
		count(f, O_PUT_REGISTERED);
		log_info("fugitive-registered server=%s via=PUT", id_str(&id, who, sizeof(who)));
		reply(m, req, "fugitive_update", 201, "registered");
	} else {
		count(f, O_PUT_UPDATED);
		log_debug("fugitive-updated server=%s", id_str(&id, who, sizeof(who)));
		reply(m, req, "fugitive_update", 202, "updated");
	}
}

/* DELETE /servers/{id}: HandleRemove. */
static void removal(struct master *m, struct httpd_req *req, const char *idtext)
{
	struct master_fugitive *f = m->fug;
	struct fugitive_id id;
	struct addr_ip caller;
	uint8_t key[FUG_KEY_LEN];
	struct fug_entry *e = NULL;
	char who[ADDR_STRLEN + 24];

	if (fugitive_parse_id(idtext, strlen(idtext), &id) < 0) {
		count(f, O_DEL_BAD_ID);
		reply(m, req, "fugitive_remove", 404, MSG_BAD_ID);
		return;
	}
	caller_ip(m, req, &caller);
	if (!id.has_ip || memcmp(caller.b, id.ip.b, 16) != 0) {
		count(f, O_DEL_FORBIDDEN);
		reply(m, req, "fugitive_remove", 403, MSG_FORBIDDEN);
		return;
	}
	/* Only IPv4 ids with a 16-bit port can have been registered. */
	if (fugitive_ip_is_v4(&id.ip) && id.port >= 0 && id.port <= 65535) {
		make_key(id.ip.b + 12, (uint16_t)id.port, key);
		e = registry_get(m->reg, REG_FUGITIVE, key);
	}
	if (e == NULL) {
		count(f, O_DEL_UNKNOWN);
		reply(m, req, "fugitive_remove", 404, "failure");
		return;
	}
	registry_del(m->reg, REG_FUGITIVE, e);
	count(f, O_DEL_REMOVED);
	log_info("fugitive-removed server=%s", id_str(&id, who, sizeof(who)));
	reply(m, req, "fugitive_remove", 200, "success");
}

/* ---- POST and its ping-back ---- */

static void ping_release(struct pingback *p)
{
	struct master_fugitive *f = p->f;

	ev_timer_stop(f->m->loop, &p->timer);
	ev_io_del(p->io, true);
	p->io = NULL;
	p->req = NULL;
	f->inflight--;
}

static void ping_answer(struct pingback *p, enum outcome o, unsigned status, const char *result)
{
	char who[ADDR_STRLEN + 24];

	count(p->f, o);
	log_debug("fugitive-ping-done server=%s status=%u ms=%lld",
		  id_str(&p->id, who, sizeof(who)), status, ev_now(p->f->m->loop) - p->started_ms);
	reply(p->f->m, p->req, "fugitive_register", status, result);
	ping_release(p);
}

/* The pong came: the rest of HandleRegister. */
static void ping_passed(struct pingback *p)
{
	struct master_fugitive *f = p->f;
	struct fugitive_body b;
	const char *body, *msg;
	char who[ADDR_STRLEN + 24];
	size_t blen;
	bool created;

	body = httpd_body(p->req, &blen);
	if (httpd_body_too_big(p->req) || fugitive_parse_body(body, blen, &b) < 0) {
		ping_answer(p, O_POST_INVALID, 400, MSG_BAD_JSON);
		return;
	}
	if ((msg = fugitive_validate(&p->id, &b)) != NULL) {
		ping_answer(p, O_POST_INVALID, 400, msg);
		return;
	}
	/* The caller's IP was checked before the ping (see the top). */
	if (store(f, &p->id, &b, &created) < 0) {
		ping_answer(p, O_POST_FULL, 500, MSG_INTERNAL);
		return;
	}
	log_info("fugitive-registered server=%s via=POST%s", id_str(&p->id, who, sizeof(who)),
		 created ? "" : " again=1");
	ping_answer(p, O_POST_REGISTERED, 200, "registration complete");
}

static void on_pong(struct ev_io *io, uint32_t events, void *arg)
{
	struct pingback *p = arg;
	/* The service reads the first datagram into 8 zeroed bytes and
	 * compares the first 4 with "pong"; an empty one is a bad answer. */
	uint8_t buf[8] = {0};
	ssize_t n;

	(void)io;
	(void)events;
	n = recv(ev_io_fd(p->io), buf, sizeof(buf), MSG_DONTWAIT);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return;
		/*
		 * ECONNREFUSED (ICMP port unreachable) and the like: Go's
		 * Read fails at once and the service answers 504 then,
		 * without waiting for the deadline. So do we.
		 */
		ping_answer(p, O_POST_NO_PONG, 504, MSG_NO_PONG);
		return;
	}
	if (memcmp(buf, "pong", 4) != 0) {
		ping_answer(p, O_POST_BAD_PONG, 406, MSG_BAD_PONG);
		return;
	}
	ping_passed(p);
}

static void on_ping_timeout(struct ev_timer *t, void *arg)
{
	struct pingback *p = arg;

	(void)t;
	ping_answer(p, O_POST_NO_PONG, 504, MSG_NO_PONG);
}

/*
 * A connected UDP socket to the server with the pings sent; -errno.
 * *refused is set when the kernel reported the port closed (an ICMP port
 * unreachable fails the next send on a connected socket).
 */
static int ping_open(struct master_fugitive *f, const struct addr *to, bool *refused)
{
	int fd = socket(to->ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int e;

	*refused = false;
	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)&to->ss, to->len) < 0) {
		e = errno;
		close(fd);
		return -e;
	}
	/* "We're sending 10 of these because of UDP; only one actually needs
	 * to be received" (server.go). Send errors are ignored there too. */
	for (int i = 0; i < FUG_PINGS; i++) {
		if (send(fd, "ping", 4, MSG_DONTWAIT | MSG_NOSIGNAL) == 4) {
			f->pings_sent++;
		} else {
			f->ping_send_errors++;
			if (errno == ECONNREFUSED)
				*refused = true;
		}
	}
	return fd;
}

/* POST /servers/{id}: HandleRegister. */
static void registration(struct master *m, struct httpd_req *req, const char *idtext)
{
	struct master_fugitive *f = m->fug;
	struct pingback *p = NULL;
	struct fugitive_id id;
	struct addr_ip caller;
	struct addr to;
	char who[ADDR_STRLEN + 24];
	unsigned same = 0;
	bool refused;
	int fd;

	if (fugitive_parse_id(idtext, strlen(idtext), &id) < 0) {
		count(f, O_POST_BAD_ID);
		reply(m, req, "fugitive_register", 406, MSG_BAD_ID);
		return;
	}
	/* What net.ResolveUDPAddr + DialUDP refuse: no IP, a port past 16 bits. */
	if (!id.has_ip || id.port < 0 || id.port > 65535) {
		count(f, O_POST_NO_SOCKET);
		reply(m, req, "fugitive_register", 412, MSG_NO_PING);
		return;
	}
	caller_ip(m, req, &caller);
	if (memcmp(caller.b, id.ip.b, 16) != 0) {
		count(f, O_POST_FORBIDDEN);
		log_debug("fugitive-refused method=POST server=%s reason=foreign-caller",
			  id_str(&id, who, sizeof(who)));
		reply(m, req, "fugitive_register", 403, MSG_FORBIDDEN);
		return;
	}
	for (size_t i = 0; i < FUG_PING_MAX; i++) {
		if (f->ping[i].req == NULL) {
			if (p == NULL)
				p = &f->ping[i];
		} else if (memcmp(f->ping[i].id.ip.b, id.ip.b, 16) == 0) {
			same++;
		}
	}
	if (p == NULL || same >= FUG_PING_PER_IP) {
		count(f, O_POST_BUSY);
		log_debug("fugitive-refused method=POST server=%s reason=ping-backs-busy",
			  id_str(&id, who, sizeof(who)));
		reply(m, req, "fugitive_register", 412, MSG_NO_PING);
		return;
	}
	addr_from_ip(&to, &id.ip, (uint16_t)id.port);
	fd = ping_open(f, &to, &refused);
	if (fd >= 0 && refused) {
		/*
		 * The port is closed. The service waits for its read to fail
		 * (at once if the ICMP error is still pending, else after the
		 * deadline) and answers 504 either way; we answer now.
		 */
		close(fd);
		count(f, O_POST_NO_PONG);
		log_debug("fugitive-ping-done server=%s status=504 reason=refused",
			  id_str(&id, who, sizeof(who)));
		reply(m, req, "fugitive_register", 504, MSG_NO_PONG);
		return;
	}
	if (fd >= 0) {
		p->io = ev_io_add(m->loop, fd, EPOLLIN, on_pong, p);
		if (p->io == NULL) {
			int e = errno;

			close(fd);
			fd = -e;
		}
	}
	if (fd < 0) {
		long long now = ev_now(m->loop);
		unsigned long skipped;

		/* Remote-caused (no route) or ours (EMFILE): count, and warn
		 * once in a while. */
		if (log_ratelimit_ok(&f->rl_socket, now, 10000, &skipped)) {
			errno = -fd;
			log_warn("fugitive-ping-fail server=%s suppressed=%lu",
				 id_str(&id, who, sizeof(who)), skipped);
		}
		count(f, O_POST_NO_SOCKET);
		reply(m, req, "fugitive_register", 412, MSG_NO_PING);
		return;
	}
	p->req = req;
	p->id = id;
	p->started_ms = ev_now(m->loop);
	ev_timer_start(m->loop, &p->timer, m->cfg.ping_timeout_ms, on_ping_timeout, p);
	f->inflight++;
	log_debug("fugitive-ping server=%s inflight=%u", id_str(&id, who, sizeof(who)),
		  f->inflight);
	httpd_suspend(req);
}

void master_fugitive_handle(struct master *m, struct httpd_req *req)
{
	const char *path = httpd_path(req), *method = httpd_method(req);

	if (strcmp(path, "/servers") == 0 && strcmp(method, "GET") == 0) {
		list(m, req);
		return;
	}
	if (strcmp(path, "/reflection/ip") == 0 && strcmp(method, "GET") == 0) {
		reflect(m, req);
		return;
	}
	if (strncmp(path, "/servers/", 9) == 0 && path[9] != '\0' &&
	    strchr(path + 9, '/') == NULL) {
		if (strcmp(method, "POST") == 0) {
			registration(m, req, path + 9);
			return;
		}
		if (strcmp(method, "PUT") == 0) {
			update(m, req, path + 9);
			return;
		}
		if (strcmp(method, "DELETE") == 0) {
			removal(m, req, path + 9);
			return;
		}
	}
	/* gin without a route (HandleMethodNotAllowed is off). */
	httpd_reply(req, 404, "text/plain", "404 page not found", 18);
	master_http_count(m, "fugitive_unrouted", 404);
}

/* ---- life cycle and metrics ---- */

int master_fugitive_new(struct master *m)
{
	struct master_fugitive *f = calloc(1, sizeof(*f));
	struct reg_kind_ops ops = {
		.name = "fugitive",
		.val_size = sizeof(struct fug_entry),
		.key_len = FUG_KEY_LEN,
		.capacity = FUG_CAPACITY,
		.ttl_ms = m->cfg.stale_ms,
		.key_of = key_of,
		.save = entry_save,
		.load = entry_load,
	};
	int r;

	if (f == NULL)
		return -ENOMEM;
	f->m = m;
	for (size_t i = 0; i < FUG_PING_MAX; i++) {
		f->ping[i].f = f;
		ev_timer_init(&f->ping[i].timer);
	}
	r = registry_add_kind(m->reg, REG_FUGITIVE, &ops);
	if (r < 0) {
		free(f);
		return r;
	}
	m->fug = f;
	return 0;
}

void master_fugitive_shutdown(struct master_fugitive *f)
{
	if (f == NULL)
		return;
	for (size_t i = 0; i < FUG_PING_MAX; i++) {
		if (f->ping[i].req != NULL)
			ping_answer(&f->ping[i], O_POST_SHUTDOWN, 503,
				    "repository is shutting down");
	}
}

void master_fugitive_free(struct master_fugitive *f)
{
	if (f == NULL)
		return;
	/* Requests still pending here were never answered (no shutdown):
	 * only our own resources go. */
	for (size_t i = 0; i < FUG_PING_MAX; i++) {
		if (f->ping[i].req != NULL)
			ping_release(&f->ping[i]);
	}
	if (f->m->fug == f)
		f->m->fug = NULL;
	free(f);
}

void master_fugitive_metrics(const struct master_fugitive *f, struct strbuf *out)
{
	strbuf_printf(out, "# HELP rally_master_fugitive_requests_total Fugitive POST, PUT and "
			   "DELETE /servers/{id} by outcome.\n"
			   "# TYPE rally_master_fugitive_requests_total counter\n");
	for (int o = 0; o < O_N; o++)
		strbuf_printf(out,
			      "rally_master_fugitive_requests_total{method=\"%s\",outcome=\"%s\"} "
			      "%llu\n",
			      outcome_labels[o].method, outcome_labels[o].outcome,
			      (unsigned long long)f->outcomes[o]);
	strbuf_printf(out,
		      "# HELP rally_master_fugitive_pingbacks_in_flight Registrations waiting for "
		      "the server's pong.\n"
		      "# TYPE rally_master_fugitive_pingbacks_in_flight gauge\n"
		      "rally_master_fugitive_pingbacks_in_flight %u\n"
		      "# HELP rally_master_fugitive_pingbacks_max Ping-backs allowed in flight.\n"
		      "# TYPE rally_master_fugitive_pingbacks_max gauge\n"
		      "rally_master_fugitive_pingbacks_max %d\n"
		      "# HELP rally_master_fugitive_pings_total \"ping\" datagrams sent, and sends "
		      "that failed.\n"
		      "# TYPE rally_master_fugitive_pings_total counter\n"
		      "rally_master_fugitive_pings_total{result=\"sent\"} %llu\n"
		      "rally_master_fugitive_pings_total{result=\"error\"} %llu\n",
		      f->inflight, FUG_PING_MAX, (unsigned long long)f->pings_sent,
		      (unsigned long long)f->ping_send_errors);
}
