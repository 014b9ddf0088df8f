#include "relay_known.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "htab.h"
#include "num.h"
#include "strbuf.h"

/* Unix seconds a last-seen time may take: 0 .. year 9999. */
#define LAST_SEEN_MAX (253402300799LL)

struct seen {
	long long last_s;
};

struct relay_known {
	struct htab *t; /* addr_ip -> struct seen, least recently seen first */
	long long ttl_s;
	uint64_t evicted;
};

struct relay_known *relay_known_new(size_t max, long long ttl_s)
{
	struct relay_known *k = calloc(1, sizeof(*k));

	if (k == NULL)
		return NULL;
	k->t = htab_new(max, sizeof(struct addr_ip), sizeof(struct seen));
	if (k->t == NULL) {
		free(k);
		return NULL;
	}
	k->ttl_s = ttl_s;
	return k;
}

void relay_known_free(struct relay_known *k)
{
	if (k == NULL)
		return;
	htab_free(k->t);
	free(k);
}

bool relay_known_has(const struct relay_known *k, const struct addr_ip *ip)
{
	return htab_get(k->t, ip) != NULL;
}

static int put(struct relay_known *k, const struct addr_ip *ip, long long when_s)
{
	struct seen *s = htab_get(k->t, ip);

	if (s != NULL) {
		if (when_s > s->last_s)
			s->last_s = when_s;
		htab_touch(k->t, s);
		return 0;
	}
	if (htab_count(k->t) == htab_capacity(k->t))
		k->evicted++;
	s = htab_insert(k->t, ip, true, NULL);
	s->last_s = when_s;
	return 1;
}

int relay_known_note(struct relay_known *k, const struct addr_ip *ip, long long now_s)
{
	return put(k, ip, now_s);
}

size_t relay_known_expire(struct relay_known *k, long long now_s)
{
	struct seen *s;
	size_t n = 0;

	/* XXX: walks by recency, which is last-seen order for everything we
	 * wrote; a hand-edited file out of order expires a little late. */
	while ((s = htab_oldest(k->t)) != NULL && now_s - s->last_s >= k->ttl_s) {
		htab_remove(k->t, s);
		n++;
	}
	return n;
}

size_t relay_known_count(const struct relay_known *k)
{
	return htab_count(k->t);
}

uint64_t relay_known_evicted(const struct relay_known *k)
{
	return k->evicted;
}

static void clear(struct relay_known *k)
{
	struct seen *s;

	while ((s = htab_oldest(k->t)) != NULL)
		htab_remove(k->t, s);
}

static int fail(struct relay_known *k, struct relay_known_err *err, int line, const char *msg)
{
	clear(k);
	err->line = line;
	snprintf(err->msg, sizeof(err->msg), "%s", msg);
	return -EBADMSG;
}

int relay_known_parse(struct relay_known *k, const char *text, size_t len, long long now_s,
		      struct relay_known_err *err)
{
	size_t off = 0;
	int line = 0;
	bool header = false;
	uint64_t evicted0 = k->evicted;

	err->line = 0;
	err->msg[0] = '\0';
	if (memchr(text, '\0', len) != NULL)
		return fail(k, err, 0, "a NUL byte: not a text file");
	while (off < len) {
		const char *p = text + off, *nl = memchr(p, '\n', len - off), *sp;
		size_t n = nl != NULL ? (size_t)(nl - p) : len - off;
		char ipstr[INET6_ADDRSTRLEN];
		struct addr a;
		struct addr_ip ip;
		int64_t when;

		off += n + (nl != NULL ? 1 : 0);
		line++;
		if (n > 0 && p[n - 1] == '\r')
			n--;
		if (n == 0 || p[0] == '#')
			continue;
		if (n > RELAY_KNOWN_LINE_MAX)
			return fail(k, err, line, "line too long");
		if (!header) {
			if (n != strlen(RELAY_KNOWN_HEADER) ||
			    memcmp(p, RELAY_KNOWN_HEADER, n) != 0)
				return fail(k, err, line,
					    "expected the header \"" RELAY_KNOWN_HEADER "\"");
			header = true;
			continue;
		}
		sp = memchr(p, ' ', n);
		if (sp == NULL || sp == p || (size_t)(sp - p) >= sizeof(ipstr))
			return fail(k, err, line, "expected \"IP LAST_SEEN\"");
		memcpy(ipstr, p, (size_t)(sp - p));
		ipstr[sp - p] = '\0';
		if (addr_parse_ip(&a, ipstr) < 0)
			return fail(k, err, line, "not an IP address");
		if (num_parse(sp + 1, n - (size_t)(sp + 1 - p), 0, LAST_SEEN_MAX, 0, &when) < 0)
			return fail(k, err, line, "last-seen is not a Unix time in seconds");
		addr_to_ip(&a, &ip);
		if (relay_known_has(k, &ip))
			return fail(k, err, line, "the same IP twice");
		if (now_s - when >= k->ttl_s)
			continue; /* expired while we were down */
		put(k, &ip, when > now_s ? now_s : when);
	}
	if (!header)
		return fail(k, err, 0, "no header line: empty or not a known-players file");
	/* Left out for room while loading is not eviction of live entries. */
	k->evicted = evicted0;
	return (int)htab_count(k->t);
}

void relay_known_format(const struct relay_known *k, struct strbuf *out)
{
	strbuf_printf(out,
		      "# rally-relay known players: IP and last-seen Unix time, least recent "
		      "first\n%s\n",
		      RELAY_KNOWN_HEADER);
	for (const struct seen *s = htab_oldest(k->t); s != NULL; s = htab_newer(k->t, s)) {
		char ip[INET6_ADDRSTRLEN];

		addr_ip_fmt(htab_key(k->t, s), ip, sizeof(ip));
		strbuf_printf(out, "%s %lld\n", ip, s->last_s);
	}
}
