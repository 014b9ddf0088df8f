/*
 * The servers file and the one-server keys the command line shares with it
 * (see relay_srvfile.h for the format). Pure: text in, configurations out.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "num.h"
#include "relay.h"
#include "relay_keys.h"
#include "relay_srvfile.h"
#include "strbuf.h"

enum key_kind {
	K_LISTEN,
	K_SERVER,
	K_MASTER,
	K_NOHB,
	K_TAG,
	K_MS,
	K_UINT,
	K_ONOFF,  /* query-cache */
	K_ENGINE, /* engine-query-limit BURST/PERIOD_MS or off */
	K_PREFIX, /* source-prefix V4/V6 */
	K_PUBLIC,
	K_BOOL, /* transparent */
};

struct key {
	const char *name;
	enum key_kind kind;
	size_t off;
	long long min, max, scale;
};

#define OFF(f) offsetof(struct relay_server_cfg, f)

/* The ranges are the command line's (main.c documents them in --help). */
static const struct key keys[] = {
	{"listen", K_LISTEN, 0, 0, 0, 0},
	{"server", K_SERVER, 0, 0, 0, 0},
	{"master", K_MASTER, 0, 0, 0, 0},
	{"no-heartbeat", K_NOHB, 0, 0, 0, 0},
	{"heartbeat-tag", K_TAG, OFF(heartbeat_tag), 0, 0, 0},
	{"flatline-tag", K_TAG, OFF(flatline_tag), 0, 0, 0},
	{"heartbeat-interval", K_MS, OFF(heartbeat_interval_ms), 1, 86400, 1000},
	{"query-budget", K_UINT, OFF(query_budget), 0, 1000000, 1},
	{"session-timeout", K_MS, OFF(session_timeout_ms), 1, 86400, 1000},
	{"probe-timeout", K_MS, OFF(probe_timeout_ms), 10, 60000, 1},
	{"max-sessions", K_UINT, OFF(max_sessions), 1, 65536, 1},
	{"unconfirmed-timeout", K_MS, OFF(unconfirmed_timeout_ms), 1, 86400, 1000},
	{"listing-interval", K_MS, OFF(listing_interval_ms), 0, 86400, 1000},
	{"listing-delay", K_MS, OFF(listing_delay_ms), 0, 3600000, 1},
	{"listing-timeout", K_MS, OFF(listing_timeout_ms), 10, 60000, 1},
	{"public-address", K_PUBLIC, 0, 0, 0, 0},
	/* the query cache, reply budgets, attack mode (relay_qcache.h) */
	{"query-cache", K_ONOFF, OFF(qcache.on), 0, 0, 0},
	{"query-cache-refresh", K_MS, OFF(qcache.refresh_ms), 50, 600000, 1},
	{"query-cache-max-age", K_MS, OFF(qcache.max_age_ms), 100, 3600000, 1},
	{"engine-query-limit", K_ENGINE, 0, 0, 0, 0},
	{"engine-query-reserve", K_UINT, OFF(qcache.engine_reserve), 0, 999, 1},
	{"reply-budget", K_UINT, OFF(qcache.reply_budget), 0, 1000000000, 1},
	{"reply-base", K_UINT, OFF(qcache.reply_base), 0, 1000000000, 1},
	{"source-budget", K_UINT, OFF(qcache.source_budget), 256, 100000000, 1},
	{"source-prefix", K_PREFIX, 0, 0, 0, 0},
	{"known-budget", K_UINT, OFF(qcache.known_budget), 512, 100000000, 1},
	{"reply-sources", K_UINT, OFF(qcache.reply_sources), 16, 1 << 22, 1},
	{"attack-threshold", K_UINT, OFF(qcache.attack_threshold), 0, 100000000, 1},
	{"attack-hold", K_MS, OFF(qcache.attack_hold_ms), 1, 86400, 1000},
	{"known-hours", K_MS, OFF(qcache.known_ttl_s), 1, 87600, 3600},
	{"known-max", K_UINT, OFF(qcache.known_max), 1, 1 << 20, 1},
	{"transparent", K_BOOL, OFF(transparent), 0, 0, 0},
};

/* Flags of the whole process: named in a file, they get a pointed answer. */
static const char *const global_flags[] = {
	"control", "token-file", "state-dir", "servers", "log", "debug", "check-config",
};

static void fail(char *err, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void fail(char *err, size_t size, const char *fmt, ...)
{
	va_list ap;

	if (size == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, size, fmt, ap);
	va_end(ap);
}

void relay_server_cfg_defaults(struct relay_server_cfg *c)
{
	memset(c, 0, sizeof(*c));
	addr_parse(&c->listen[0], "0.0.0.0:27960", -1);
	c->nlisten = 1;
	strcpy(c->heartbeat_tag, "EnemyTerritory-1");
	strcpy(c->flatline_tag, "ETFlatline-1");
	c->heartbeat_interval_ms = RELAY_HEARTBEAT_INTERVAL_S * 1000LL;
	c->session_timeout_ms = RELAY_SESSION_TIMEOUT_MS;
	c->probe_timeout_ms = RELAY_PROBE_TIMEOUT_MS;
	c->unconfirmed_timeout_ms = RELAY_UNCONFIRMED_TIMEOUT_MS;
	c->max_sessions = RELAY_MAX_SESSIONS;
	c->query_budget = RELAY_QUERY_BUDGET;
	relay_qcache_defaults(&c->qcache);
	c->listing_interval_ms = RELAY_LISTING_INTERVAL_S * 1000LL;
	c->listing_delay_ms = RELAY_LISTING_DELAY_MS;
	c->listing_timeout_ms = RELAY_LISTING_TIMEOUT_MS;
}

bool relay_server_name_ok(const char *s, size_t len)
{
	if (len == 0 || len > RELAY_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char ch = s[i];
		bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');

		if (!alnum && (i == 0 || (ch != '-' && ch != '_')))
			return false;
	}
	return true;
}

/* Heartbeat tags go into "heartbeat <tag>\n": one printable word. */
static int set_tag(char *dst, const char *v, char *err, size_t size)
{
	size_t n = strlen(v);

	if (n == 0 || n >= RELAY_TAG_MAX) {
		fail(err, size, "empty or longer than %d characters", RELAY_TAG_MAX - 1);
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)v[i];

		if (ch <= ' ' || ch == '"' || ch == '\\' || ch == ';' || ch >= 0x7f) {
			fail(err, size, "only printable characters, no spaces");
			return -EINVAL;
		}
	}
	memcpy(dst, v, n + 1);
	return 0;
}

/* A DNS name or an IP literal (an IPv6 one may carry a %scope): nothing
 * a resolver would not take, nothing that breaks HOST:PORT. */
static bool host_ok(const char *h)
{
	if (h[0] == '\0')
		return false;
	for (const char *p = h; *p != '\0'; p++) {
		char ch = *p;

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '_' ||
		      ch == ':' || ch == '%'))
			return false;
	}
	return true;
}

static int set_server(struct relay_server_cfg *c, const char *v, char *err, size_t size)
{
	if (strncmp(v, "tunnel:", 7) == 0) {
		char canon[37];

		if (relay_keys_canon_uuid(v + 7, canon) < 0) {
			fail(err, size, "expected tunnel:REALM_UUID");
			return -EINVAL;
		}
		c->server_tunnel = true;
		c->server_host[0] = '\0';
		c->server_port = 0;
		memcpy(c->server_realm, canon, sizeof(canon));
	} else {
		if (addr_split_hostport(v, c->server_host, sizeof(c->server_host),
					&c->server_port) < 0 ||
		    c->server_port == 0 || !host_ok(c->server_host)) {
			fail(err, size, "expected HOST:PORT or tunnel:REALM_UUID");
			return -EINVAL;
		}
		c->server_tunnel = false;
		c->server_realm[0] = '\0';
	}
	c->server_set = true;
	return 0;
}

static int set_bool(bool *dst, const char *v, char *err, size_t size)
{
	static const char *const yes[] = {"yes", "true", "on", "1"};
	static const char *const no[] = {"no", "false", "off", "0"};

	for (size_t i = 0; i < 4; i++) {
		if (strcmp(v, yes[i]) == 0) {
			*dst = true;
			return 0;
		}
		if (strcmp(v, no[i]) == 0) {
			*dst = false;
			return 0;
		}
	}
	fail(err, size, "expected yes or no");
	return -EINVAL;
}

/* "A/B", two whole numbers within their ranges. */
static int set_pair(const char *v, long long lo1, long long hi1, long long lo2, long long hi2,
		    long long *a, long long *b, char *err, size_t size)
{
	const char *slash = strchr(v, '/');
	int64_t x, y;

	if (slash == NULL || num_parse(v, (size_t)(slash - v), lo1, hi1, 0, &x) < 0 ||
	    num_parse_str(slash + 1, lo2, hi2, 0, &y) < 0) {
		fail(err, size, "expected N/N within %lld-%lld/%lld-%lld", lo1, hi1, lo2, hi2);
		return -EINVAL;
	}
	*a = x;
	*b = y;
	return 0;
}

static int set_onoff(bool *dst, const char *v, char *err, size_t size)
{
	if (strcmp(v, "on") == 0)
		*dst = true;
	else if (strcmp(v, "off") == 0)
		*dst = false;
	else {
		fail(err, size, "expected on or off");
		return -EINVAL;
	}
	return 0;
}

/* The address masters see for the front (a NAT's): IP or IP:PORT, not a
 * wildcard, one per family. */
static int set_public(struct relay_server_cfg *c, const char *v, char *err, size_t size)
{
	static const uint8_t zero[16];
	struct addr a;
	struct addr_ip ip;
	bool v4;

	if (addr_parse(&a, v, 0) < 0) {
		fail(err, size, "expected IP or IP:PORT");
		return -EINVAL;
	}
	v4 = addr_family(&a) == AF_INET;
	addr_to_ip(&a, &ip);
	if (memcmp(ip.b + (v4 ? 12 : 0), zero, v4 ? 4 : 16) == 0) {
		fail(err, size, "the address masters see, not a wildcard");
		return -EINVAL;
	}
	if (!c->public_here) {
		c->npublic = 0;
		c->public_here = true;
	}
	for (size_t i = 0; i < c->npublic; i++) {
		if (addr_family(&c->public_addr[i]) == addr_family(&a)) {
			fail(err, size, "one address per family");
			return -EINVAL;
		}
	}
	c->public_addr[c->npublic++] = a;
	return 0;
}

int relay_server_cfg_set(struct relay_server_cfg *c, const char *key, const char *val, char *err,
			 size_t err_size)
{
	long long x, y;
	const struct key *k = NULL;
	int64_t v;
	int r;

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		if (strcmp(keys[i].name, key) == 0)
			k = &keys[i];
	}
	if (k == NULL) {
		fail(err, err_size, "unknown key");
		return -ENOENT;
	}
	switch (k->kind) {
	case K_LISTEN: {
		struct addr a;

		if (addr_parse(&a, val, -1) < 0) {
			fail(err, err_size, "expected IP:PORT or [IPv6]:PORT");
			return -EINVAL;
		}
		if (!c->listen_here) {
			c->nlisten = 0;
			c->listen_here = true;
		}
		if (c->nlisten == RELAY_MAX_LISTEN) {
			fail(err, err_size, "at most %d addresses (one IPv4, one IPv6)",
			     RELAY_MAX_LISTEN);
			return -EINVAL;
		}
		c->listen[c->nlisten++] = a;
		return 0;
	}
	case K_SERVER:
		return set_server(c, val, err, err_size);
	case K_PUBLIC:
		return set_public(c, val, err, err_size);
	case K_MASTER: {
		struct relay_master m;

		if (addr_split_hostport(val, m.host, sizeof(m.host), &m.port) < 0 || m.port == 0) {
			fail(err, err_size, "expected HOST:PORT");
			return -EINVAL;
		}
		/* The name is a metrics label and shown on the admin page. */
		if (!host_ok(m.host)) {
			fail(err, err_size, "not a host name or an IP address");
			return -EINVAL;
		}
		if (!c->masters_here) {
			c->nmasters = 0;
			c->masters_here = true;
		}
		if (c->nmasters == RELAY_MAX_MASTERS) {
			fail(err, err_size, "at most %d masters", RELAY_MAX_MASTERS);
			return -EINVAL;
		}
		c->masters[c->nmasters++] = m;
		return 0;
	}
	case K_NOHB:
		r = set_bool(&c->no_heartbeat, val, err, err_size);
		if (r == 0)
			c->nohb_here = true;
		return r;
	case K_TAG:
		return set_tag((char *)c + k->off, val, err, err_size);
	case K_BOOL:
		return set_bool((bool *)(void *)((char *)c + k->off), val, err, err_size);
	case K_ONOFF:
		return set_onoff((bool *)(void *)((char *)c + k->off), val, err, err_size);
	case K_ENGINE:
		if (strcmp(val, "off") == 0) {
			c->qcache.engine_burst = 0;
			return 0;
		}
		r = set_pair(val, 1, 1000, 1, 60000, &x, &y, err, err_size);
		if (r == 0) {
			c->qcache.engine_burst = (unsigned)x;
			c->qcache.engine_period_ms = y;
		}
		return r;
	case K_PREFIX:
		r = set_pair(val, 8, 32, 16, 128, &x, &y, err, err_size);
		if (r == 0) {
			c->qcache.prefix4 = (unsigned)x;
			c->qcache.prefix6 = (unsigned)y;
		}
		return r;
	case K_MS:
	case K_UINT:
		r = num_parse_str(val, k->min, k->max, 0, &v);
		if (r < 0) {
			fail(err, err_size, "expected a whole number in %lld-%lld", k->min, k->max);
			return -EINVAL;
		}
		if (k->kind == K_MS)
			*(long long *)(void *)((char *)c + k->off) = (long long)v * k->scale;
		else
			*(unsigned *)(void *)((char *)c + k->off) = (unsigned)v;
		return 0;
	}
	return -EINVAL;
}

int relay_server_cfg_finish(struct relay_server_cfg *c, char *err, size_t err_size)
{
	static const struct relay_master defaults[] = {
		{"etmaster.net", 27950},
		{"etmaster.idsoftware.com", 27950},
	};

	if (!c->server_set) {
		fail(err, err_size, "no server (HOST:PORT or tunnel:REALM_UUID)");
		return -EINVAL;
	}
	if (c->transparent && c->server_tunnel) {
		fail(err, err_size,
		     "transparent: a server behind the tunnel takes it at home (rally-relay "
		     "agent --transparent)");
		return -EINVAL;
	}
	if (c->masters_here && c->nohb_here && c->no_heartbeat) {
		fail(err, err_size, "master and no-heartbeat exclude each other");
		return -EINVAL;
	}
	/* What is given here beats what was inherited. */
	if (c->masters_here)
		c->no_heartbeat = false;
	if (c->no_heartbeat) {
		c->nmasters = 0;
	} else if (c->nmasters == 0) {
		memcpy(c->masters, defaults, sizeof(defaults));
		c->nmasters = 2;
	}
	if (c->nlisten == 0) {
		fail(err, err_size, "no listen address");
		return -EINVAL;
	}
	if (c->nlisten == 2 && addr_equal(&c->listen[0], &c->listen[1])) {
		fail(err, err_size, "the same listen address twice");
		return -EINVAL;
	}
	if (c->qcache.engine_burst > 0 && c->qcache.engine_reserve >= c->qcache.engine_burst) {
		fail(err, err_size,
		     "engine-query-reserve %u: must be below the burst of engine-query-limit (%u)",
		     c->qcache.engine_reserve, c->qcache.engine_burst);
		return -EINVAL;
	}
	if (c->qcache.max_age_ms <= c->qcache.refresh_ms) {
		fail(err, err_size,
		     "query-cache-max-age %lld: must be above query-cache-refresh (%lld)",
		     c->qcache.max_age_ms, c->qcache.refresh_ms);
		return -EINVAL;
	}
	return 0;
}

static bool qcache_cfg_equal(const struct relay_qcache_cfg *a, const struct relay_qcache_cfg *b)
{
	return a->on == b->on && a->refresh_ms == b->refresh_ms && a->max_age_ms == b->max_age_ms &&
	       a->engine_burst == b->engine_burst &&
	       (a->engine_burst == 0 || a->engine_period_ms == b->engine_period_ms) &&
	       a->engine_reserve == b->engine_reserve && a->reply_budget == b->reply_budget &&
	       a->reply_base == b->reply_base && a->source_budget == b->source_budget &&
	       a->known_budget == b->known_budget && a->prefix4 == b->prefix4 &&
	       a->prefix6 == b->prefix6 && a->reply_sources == b->reply_sources &&
	       a->attack_threshold == b->attack_threshold &&
	       a->attack_hold_ms == b->attack_hold_ms && a->known_ttl_s == b->known_ttl_s &&
	       a->known_max == b->known_max;
}

bool relay_server_cfg_v6only(const struct relay_server_cfg *c, size_t i)
{
	if (i >= c->nlisten || addr_family(&c->listen[i]) != AF_INET6)
		return false;
	for (size_t k = 0; k < c->nlisten; k++) {
		if (k != i && addr_family(&c->listen[k]) == AF_INET)
			return true;
	}
	return false;
}

bool relay_server_cfg_equal(const struct relay_server_cfg *a, const struct relay_server_cfg *b)
{
	if (strcmp(a->name, b->name) != 0 || a->nlisten != b->nlisten ||
	    a->server_set != b->server_set || a->server_tunnel != b->server_tunnel ||
	    strcmp(a->server_host, b->server_host) != 0 || a->server_port != b->server_port ||
	    strcmp(a->server_realm, b->server_realm) != 0 || a->nmasters != b->nmasters ||
	    a->no_heartbeat != b->no_heartbeat || strcmp(a->heartbeat_tag, b->heartbeat_tag) != 0 ||
	    strcmp(a->flatline_tag, b->flatline_tag) != 0 ||
	    a->heartbeat_interval_ms != b->heartbeat_interval_ms ||
	    a->session_timeout_ms != b->session_timeout_ms ||
	    a->probe_timeout_ms != b->probe_timeout_ms ||
	    a->unconfirmed_timeout_ms != b->unconfirmed_timeout_ms ||
	    a->max_sessions != b->max_sessions || a->query_budget != b->query_budget ||
	    a->listing_interval_ms != b->listing_interval_ms ||
	    a->listing_delay_ms != b->listing_delay_ms ||
	    a->listing_timeout_ms != b->listing_timeout_ms || a->npublic != b->npublic ||
	    !qcache_cfg_equal(&a->qcache, &b->qcache) || a->transparent != b->transparent)
		return false;
	for (size_t i = 0; i < a->npublic; i++) {
		if (!addr_equal(&a->public_addr[i], &b->public_addr[i]))
			return false;
	}
	for (size_t i = 0; i < a->nlisten; i++) {
		if (!addr_equal(&a->listen[i], &b->listen[i]))
			return false;
	}
	for (size_t i = 0; i < a->nmasters; i++) {
		if (strcmp(a->masters[i].host, b->masters[i].host) != 0 ||
		    a->masters[i].port != b->masters[i].port)
			return false;
	}
	return true;
}

/* ---- the file ---- */

static bool is_any(const struct addr *a)
{
	static const uint8_t zero[16];
	struct addr_ip ip;

	if (addr_family(a) == AF_INET6) {
		addr_to_ip(a, &ip);
		return memcmp(ip.b, zero, 16) == 0;
	}
	addr_to_ip(a, &ip);
	return memcmp(ip.b + 12, zero, 4) == 0;
}

/* Whether listen address i of c takes datagrams sent to y (a wildcard of
 * y's family, or a dual-stack "[::]" for an IPv4 y). */
static bool covers(const struct relay_server_cfg *c, size_t i, const struct addr *y)
{
	const struct addr *x = &c->listen[i];

	if (!is_any(x))
		return false;
	if (addr_family(x) == addr_family(y))
		return true;
	return addr_family(x) == AF_INET6 && addr_family(y) == AF_INET &&
	       !relay_server_cfg_v6only(c, i);
}

/* Two listen addresses the kernel would not bind both (port 0 never
 * clashes: the kernel picks a free port). */
static bool clash(const struct relay_server_cfg *a, size_t i, const struct relay_server_cfg *b,
		  size_t j)
{
	const struct addr *x = &a->listen[i], *y = &b->listen[j];

	if (addr_port(x) == 0 || addr_port(x) != addr_port(y))
		return false;
	if (addr_family(x) == addr_family(y) && addr_same_ip(x, y))
		return true;
	return covers(a, i, y) || covers(b, j, x);
}

static bool global_flag(const char *key)
{
	if (strncmp(key, "tunnel-", 7) == 0)
		return true;
	for (size_t i = 0; i < sizeof(global_flags) / sizeof(global_flags[0]); i++) {
		if (strcmp(key, global_flags[i]) == 0)
			return true;
	}
	return false;
}

static bool blank(char ch)
{
	return ch == ' ' || ch == '\t';
}

/* Trims s[0..*len) in place of its ends; returns the new start. */
static char *trim(char *s, size_t *len)
{
	while (*len > 0 && blank(s[*len - 1]))
		(*len)--;
	while (*len > 0 && blank(*s)) {
		s++;
		(*len)--;
	}
	s[*len] = '\0';
	return s;
}

enum section { SEC_NONE, SEC_DEFAULTS, SEC_SERVER };

struct parse {
	struct relay_server_cfg *out;
	size_t max, n;
	enum section sec;
	struct relay_server_cfg defaults;
	bool defaults_seen;
	int header[RELAY_MAX_SERVERS]; /* the line of each server's [server] */
	struct cfg_err *err;
};

static int perr(struct parse *p, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int perr(struct parse *p, int line, const char *fmt, ...)
{
	va_list ap;

	p->err->line = line;
	va_start(ap, fmt);
	vsnprintf(p->err->msg, sizeof(p->err->msg), fmt, ap);
	va_end(ap);
	/* The message quotes the file's own bytes: it goes into a quoted log
	 * value, so no double quote, backslash or control byte. */
	for (char *c = p->err->msg; *c != '\0'; c++) {
		if (*c == '"' || *c == '\\' || (unsigned char)*c < ' ' || (unsigned char)*c >= 0x7f)
			*c = '?';
	}
	return -EINVAL;
}

/* The server section that just ended: complete and check it. */
static int end_server(struct parse *p)
{
	struct relay_server_cfg *c;
	char why[120];

	if (p->sec != SEC_SERVER)
		return 0;
	c = &p->out[p->n - 1];
	if (!c->listen_here)
		return perr(p, p->header[p->n - 1], "[server %s]: no listen address", c->name);
	if (relay_server_cfg_finish(c, why, sizeof(why)) < 0)
		return perr(p, p->header[p->n - 1], "[server %s]: %s", c->name, why);
	return 0;
}

static int section(struct parse *p, int line, char *s, size_t len)
{
	int r;

	if (len < 2 || s[len - 1] != ']')
		return perr(p, line, "expected [server NAME] or [defaults]");
	s++;
	len -= 2;
	s = trim(s, &len);
	r = end_server(p);
	if (r < 0)
		return r;
	if (strcmp(s, "defaults") == 0) {
		if (p->n > 0)
			return perr(p, line, "[defaults] must come before the first [server]");
		if (p->defaults_seen)
			return perr(p, line, "a second [defaults]");
		p->defaults_seen = true;
		p->sec = SEC_DEFAULTS;
		return 0;
	}
	if (len > 6 && strncmp(s, "server", 6) == 0 && blank(s[6])) {
		struct relay_server_cfg *c;
		size_t nlen = len - 7;
		char *name = trim(s + 7, &nlen);

		if (!relay_server_name_ok(name, nlen))
			return perr(p, line,
				    "bad server name %.40s: 1-32 of a-z 0-9 _ -, a letter "
				    "or digit first",
				    name);
		for (size_t i = 0; i < p->n; i++) {
			if (strcmp(p->out[i].name, name) == 0)
				return perr(p, line, "[server %s] again (first on line %d)", name,
					    p->header[i]);
		}
		if (p->n == p->max)
			return perr(p, line, "more than %zu servers", p->max);
		c = &p->out[p->n];
		*c = p->defaults;
		c->listen_here = c->masters_here = c->nohb_here = c->public_here = false;
		c->nlisten = 0;
		memcpy(c->name, name, nlen + 1);
		p->header[p->n++] = line;
		p->sec = SEC_SERVER;
		return 0;
	}
	return perr(p, line, "unknown section [%.40s]: expected [server NAME] or [defaults]", s);
}

static int keyval(struct parse *p, int line, char *s, size_t len)
{
	char *eq = memchr(s, '=', len), *key, *val, why[120];
	size_t klen, vlen;
	struct relay_server_cfg *c;
	int r;

	if (eq == NULL)
		return perr(p, line, "expected key = value");
	klen = (size_t)(eq - s);
	vlen = len - klen - 1;
	val = trim(eq + 1, &vlen);
	key = trim(s, &klen);
	if (klen == 0)
		return perr(p, line, "no key before '='");
	if (vlen == 0)
		return perr(p, line, "%.40s: no value", key);
	if (p->sec == SEC_NONE)
		return perr(p, line, "%.40s outside a section ([server NAME] or [defaults] first)",
			    key);
	if (p->sec == SEC_DEFAULTS && (strcmp(key, "listen") == 0 || strcmp(key, "server") == 0))
		return perr(p, line, "%s belongs in a [server NAME] section", key);
	c = p->sec == SEC_DEFAULTS ? &p->defaults : &p->out[p->n - 1];
	r = relay_server_cfg_set(c, key, val, why, sizeof(why));
	if (r == -ENOENT && global_flag(key))
		return perr(p, line, "%.40s is for the whole relay: give it on the command line",
			    key);
	if (r == -ENOENT)
		return perr(p, line, "unknown key %.40s", key);
	if (r < 0)
		return perr(p, line, "%s: %s", key, why);
	return 0;
}

static int one_line(struct parse *p, int line, const char *raw, size_t len)
{
	char buf[RELAY_SRVFILE_LINE_MAX + 1], *s;

	if (len > 0 && raw[len - 1] == '\r')
		len--;
	if (len > RELAY_SRVFILE_LINE_MAX)
		return perr(p, line, "longer than %d bytes", RELAY_SRVFILE_LINE_MAX);
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)raw[i];

		if ((ch < ' ' && ch != '\t') || ch == 0x7f)
			return perr(p, line, "control byte 0x%02x", ch);
	}
	memcpy(buf, raw, len);
	s = trim(buf, &len);
	if (len == 0 || s[0] == '#' || s[0] == ';')
		return 0;
	/* A comment at the end: '#' after white space. */
	for (size_t i = 1; i < len; i++) {
		if (s[i] == '#' && blank(s[i - 1])) {
			len = i;
			s = trim(s, &len);
			break;
		}
	}
	if (s[0] == '[')
		return section(p, line, s, len);
	return keyval(p, line, s, len);
}

int relay_srvfile_parse(const char *buf, size_t len, struct relay_server_cfg *out, size_t max,
			struct cfg_err *err)
{
	struct parse p = {.out = out, .max = max, .err = err};
	size_t off = 0;
	int line = 0, r;

	err->line = 0;
	err->msg[0] = '\0';
	if (p.max > RELAY_MAX_SERVERS)
		p.max = RELAY_MAX_SERVERS;
	if (len > RELAY_SRVFILE_MAX)
		return perr(&p, 0, "larger than %zu bytes", RELAY_SRVFILE_MAX);
	relay_server_cfg_defaults(&p.defaults);
	p.defaults.nlisten = 0;
	while (off < len) {
		const char *nl = memchr(buf + off, '\n', len - off);
		size_t n = nl != NULL ? (size_t)(nl - (buf + off)) : len - off;

		line++;
		r = one_line(&p, line, buf + off, n);
		if (r < 0)
			return r;
		off += n + (nl != NULL ? 1 : 0);
	}
	r = end_server(&p);
	if (r < 0)
		return r;
	/* What no one section can see: addresses and realms shared. */
	for (size_t a = 0; a < p.n; a++) {
		for (size_t b = 0; b < a; b++) {
			for (size_t i = 0; i < out[a].nlisten; i++) {
				for (size_t j = 0; j < out[b].nlisten; j++) {
					char s[ADDR_STRLEN];

					if (clash(&out[a], i, &out[b], j))
						return perr(
							&p, p.header[a],
							"[server %s]: listen %s clashes "
							"with [server %s]",
							out[a].name,
							addr_str(&out[a].listen[i], s, sizeof(s)),
							out[b].name);
				}
			}
			if (out[a].server_tunnel && out[b].server_tunnel &&
			    strcmp(out[a].server_realm, out[b].server_realm) == 0)
				return perr(&p, p.header[a],
					    "[server %s]: realm %s is [server %s]'s already (one "
					    "agent, one server)",
					    out[a].name, out[a].server_realm, out[b].name);
		}
	}
	return (int)p.n;
}

/* A host as HOST:PORT wants it: an IPv6 literal in brackets. */
static void hostport(struct strbuf *out, const char *host, uint16_t port)
{
	if (strchr(host, ':') != NULL)
		strbuf_printf(out, "[%s]:%u\n", host, port);
	else
		strbuf_printf(out, "%s:%u\n", host, port);
}

const char *relay_master_str(const struct relay_master *m, char *buf, size_t size)
{
	if (strchr(m->host, ':') != NULL)
		snprintf(buf, size, "[%s]:%u", m->host, m->port);
	else
		snprintf(buf, size, "%s:%u", m->host, m->port);
	return buf;
}

/* The query cache's keys, every one explicit. */
static void qcache_cfg_format(const struct relay_qcache_cfg *q, struct strbuf *out)
{
	strbuf_printf(out, "query-cache=%s\nquery-cache-refresh=%lld\nquery-cache-max-age=%lld\n",
		      q->on ? "on" : "off", q->refresh_ms, q->max_age_ms);
	if (q->engine_burst == 0)
		strbuf_printf(out, "engine-query-limit=off\n");
	else
		strbuf_printf(out, "engine-query-limit=%u/%lld\n", q->engine_burst,
			      q->engine_period_ms);
	strbuf_printf(out,
		      "engine-query-reserve=%u\nreply-budget=%u\nreply-base=%u\n"
		      "source-budget=%u\nsource-prefix=%u/%u\nknown-budget=%u\n"
		      "reply-sources=%u\nattack-threshold=%u\nattack-hold=%lld\n"
		      "known-hours=%lld\nknown-max=%u\n",
		      q->engine_reserve, q->reply_budget, q->reply_base, q->source_budget,
		      q->prefix4, q->prefix6, q->known_budget, q->reply_sources,
		      q->attack_threshold, q->attack_hold_ms / 1000, q->known_ttl_s / 3600,
		      q->known_max);
}

/* "key=value": a value may begin with '#' ("key=#x"), which after "= "
 * would read as a comment. */
void relay_srvfile_format(const struct relay_server_cfg *s, size_t n, struct strbuf *out)
{
	for (size_t i = 0; i < n; i++) {
		const struct relay_server_cfg *c = &s[i];
		char a[ADDR_STRLEN];

		strbuf_printf(out, "%s[server %s]\n", i > 0 ? "\n" : "", c->name);
		for (size_t k = 0; k < c->nlisten; k++)
			strbuf_printf(out, "listen=%s\n", addr_str(&c->listen[k], a, sizeof(a)));
		if (c->server_tunnel) {
			strbuf_printf(out, "server=tunnel:%s\n", c->server_realm);
		} else {
			strbuf_printf(out, "server=");
			hostport(out, c->server_host, c->server_port);
		}
		if (c->no_heartbeat)
			strbuf_printf(out, "no-heartbeat=yes\n");
		for (size_t k = 0; k < c->nmasters; k++) {
			strbuf_printf(out, "master=");
			hostport(out, c->masters[k].host, c->masters[k].port);
		}
		strbuf_printf(out,
			      "heartbeat-tag=%s\nflatline-tag=%s\nheartbeat-interval=%lld\n"
			      "query-budget=%u\nsession-timeout=%lld\nprobe-timeout=%lld\n"
			      "max-sessions=%u\nunconfirmed-timeout=%lld\n",
			      c->heartbeat_tag, c->flatline_tag, c->heartbeat_interval_ms / 1000,
			      c->query_budget, c->session_timeout_ms / 1000, c->probe_timeout_ms,
			      c->max_sessions, c->unconfirmed_timeout_ms / 1000);
		strbuf_printf(
			out, "listing-interval=%lld\nlisting-delay=%lld\nlisting-timeout=%lld\n",
			c->listing_interval_ms / 1000, c->listing_delay_ms, c->listing_timeout_ms);
		for (size_t k = 0; k < c->npublic; k++) {
			/* addr_str writes port 0 too; a bare IP reads back as it. */
			if (addr_port(&c->public_addr[k]) == 0)
				strbuf_printf(out, "public-address=%s\n",
					      addr_ip_str(&c->public_addr[k], a, sizeof(a)));
			else
				strbuf_printf(out, "public-address=%s\n",
					      addr_str(&c->public_addr[k], a, sizeof(a)));
		}
		qcache_cfg_format(&c->qcache, out);
		if (c->transparent)
			strbuf_printf(out, "transparent=yes\n");
	}
}
