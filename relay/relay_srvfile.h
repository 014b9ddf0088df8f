/*
 * One fronted game server's configuration, and the servers file that lists
 * several (--servers FILE). A pure codec: text in, configurations out, a
 * file:line error otherwise; no I/O, DNS, clock or logging.
 *
 *   # rally-relay servers file
 *   [defaults]                       optional; before the first server
 *   master = dpmaster.deathmask.net:27950
 *   heartbeat-tag = QuakeArena-1
 *
 *   [server ctf]                     NAME: a-z 0-9 _ -, up to 32
 *   listen = [::]:27960              1 or 2; required in a section
 *   server = 10.0.0.2:27960          HOST:PORT or tunnel:REALM_UUID
 *
 *   [server dm]
 *   listen = 0.0.0.0:27961
 *   listen = [2001:db8::5]:27961
 *   server = 10.0.0.3:27960
 *   master = 127.0.0.1:27950         the first master line of a section
 *   query-budget = 50                replaces the list it inherited
 *
 * The keys are the long flags of one server: listen, server, master,
 * no-heartbeat (yes/no), heartbeat-tag, flatline-tag, heartbeat-interval,
 * query-budget, listing-interval, public-address, session-timeout,
 * probe-timeout, max-sessions, unconfirmed-timeout, listing-delay,
 * listing-timeout, and the query cache's (query-cache,
 * query-cache-refresh, query-cache-max-age, engine-query-limit,
 * engine-query-reserve, reply-budget, reply-base, source-budget,
 * source-prefix, known-budget, reply-sources, attack-threshold,
 * attack-hold, known-hours, known-max), transparent (yes/no); the same words, ranges and units as on the command
 * line, where main.c sets the one unnamed server through the same
 * relay_server_cfg_set. A '#' or ';' starts a comment at the start of a
 * line, a '#' after white space one at its end.
 */
#ifndef RELAY_SRVFILE_H
#define RELAY_SRVFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"
#include "relay_qcache.h"

#define RELAY_MAX_MASTERS (16)
#define RELAY_HOST_MAX    (256)
#define RELAY_TAG_MAX     (64)
#define RELAY_NAME_MAX    (32)
#define RELAY_MAX_LISTEN  (2)
#define RELAY_MAX_SERVERS (64)
#define RELAY_REALM_MAX   (40)
/* The servers file and one of its lines, in bytes. */
#define RELAY_SRVFILE_MAX      ((size_t)1024 * 1024)
#define RELAY_SRVFILE_LINE_MAX (1024)

/* A configuration error for operators: the line (0: the file as a whole)
 * and what is wrong with it. */
struct cfg_err {
	int line;
	char msg[160];
};

struct relay_master {
	char host[RELAY_HOST_MAX];
	uint16_t port;
};

struct relay_server_cfg {
	/* "" for the server of the classic flags (no metric label). */
	char name[RELAY_NAME_MAX + 1];
	/*
	 * Public addresses, as configured (port 0: any). An IPv6 socket is
	 * dual-stack unless an IPv4 address is listed beside it, so "[::]:p"
	 * alone takes both families and "0.0.0.0:p" + "[::]:p" are two
	 * sockets.
	 */
	struct addr listen[RELAY_MAX_LISTEN];
	size_t nlisten;
	bool server_set;
	char server_host[RELAY_HOST_MAX];
	uint16_t server_port;
	/* tunnel:REALM: the game server is at home behind that realm's
	 * agent; server_realm is the canonical UUID. */
	bool server_tunnel;
	char server_realm[RELAY_REALM_MAX];
	struct relay_master masters[RELAY_MAX_MASTERS];
	size_t nmasters;
	bool no_heartbeat;
	char heartbeat_tag[RELAY_TAG_MAX];
	char flatline_tag[RELAY_TAG_MAX];
	long long heartbeat_interval_ms;
	long long session_timeout_ms;
	long long probe_timeout_ms;
	long long unconfirmed_timeout_ms;
	unsigned max_sessions;
	unsigned query_budget; /* per second, all sources; 0 = off */
	/* The listing check (relay_listing.c): interval 0 = off. */
	long long listing_interval_ms, listing_delay_ms, listing_timeout_ms;
	/* public-address: the front address the masters see, at most one
	 * per family (port 0: the front port of that family). */
	struct addr public_addr[RELAY_MAX_LISTEN];
	size_t npublic;
	/* The query cache, reply budgets, attack mode, known players. */
	struct relay_qcache_cfg qcache;
	/* Upstream sockets bound to the players' addresses
	 * (relay_transparent.h). */
	bool transparent;
	/* Parsing state: whether this section (or the command line) gave a
	 * listen / master / no-heartbeat line yet; the first listen or master
	 * line replaces the inherited list. */
	bool listen_here, masters_here, nohb_here, public_here;
};

/* The seed's values for one server (listen 0.0.0.0:27960, etrelay's tags,
 * limits and timeouts; the default masters come with _finish). */
void relay_server_cfg_defaults(struct relay_server_cfg *c);

/*
 * Sets key (a long flag's name without "--") to val, as the command line
 * or a servers file line gives it. 0, or -EINVAL with the reason in err
 * (-ENOENT: no such key).
 */
int relay_server_cfg_set(struct relay_server_cfg *c, const char *key, const char *val, char *err,
			 size_t err_size);

/*
 * Completes a server once all its keys are in: the default masters
 * (etmaster.net, etmaster.idsoftware.com) unless no-heartbeat or some
 * master was given; refuses a server without `server`, both master and
 * no-heartbeat in one place, and two listen addresses that are the same.
 * 0 or -EINVAL with err.
 */
int relay_server_cfg_finish(struct relay_server_cfg *c, char *err, size_t err_size);

/* True when a and b configure the same server (the parsing state aside). */
bool relay_server_cfg_equal(const struct relay_server_cfg *a, const struct relay_server_cfg *b);

/* Whether an IPv6 listen address i of c is IPv6-only (an IPv4 one beside it). */
bool relay_server_cfg_v6only(const struct relay_server_cfg *c, size_t i);

/*
 * Parses a servers file: up to max servers into out[] (the caller's array),
 * each completed with relay_server_cfg_finish. Returns how many (0 is a
 * file without servers), or -EINVAL with err->line and err->msg: a bad
 * line, an unknown key or section, a server without listen or server, two
 * servers with one name, one listen address, or one tunnel realm.
 */
int relay_srvfile_parse(const char *buf, size_t len, struct relay_server_cfg *out, size_t max,
			struct cfg_err *err);

/*
 * Writes servers as a servers file that parses back to equal
 * configurations: one section each, every key explicit (the masters
 * resolved, the defaults written out).
 */
struct strbuf;
void relay_srvfile_format(const struct relay_server_cfg *s, size_t n, struct strbuf *out);

/* A master as HOST:PORT ("[::1]:27950" for an IPv6 literal); returns buf. */
const char *relay_master_str(const struct relay_master *m, char *buf, size_t size);

/* True for a valid server name: 1-32 of a-z 0-9 _ -, starting with a
 * letter or digit (names are paths, URL segments and metric labels). */
bool relay_server_name_ok(const char *s, size_t len);

#endif
