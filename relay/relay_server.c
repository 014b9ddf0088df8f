/*
 * The fronted servers: each one's life (start, retire, free), how they are
 * found (by name, by tunnel realm) and named (logs, metric labels), and the
 * SIGHUP reload of --servers FILE.
 *
 * A reload never half-applies a bad file. It goes:
 *   1. read and parse the file (relay_srvfile), check it against the
 *      relay's flags: any error is logged with file:line and nothing
 *      changes;
 *   2. sort the servers: kept (same name, same configuration: untouched,
 *      sessions and all), restarted (same name, something changed),
 *      added, removed;
 *   3. resolve the game servers of the added and restarted ones on the
 *      worker thread (DNS never runs on the loop);
 *   4. back on the loop, take everything that can fail before anything is
 *      torn down: every public socket the new servers need (a restarted or
 *      renamed server's address is handed over with dup(), so the port
 *      never closes and no bind can fail on it), every server's own
 *      bans.json. Any failure: logged, the reload refused, nothing changed;
 *   5. apply: removed and restarted servers close their sessions and send
 *      their flatline (a restarted one spares the masters its next self
 *      heartbeats from the same sockets), the new ones start.
 * A SIGHUP during a reload is taken once it is done.
 */
#include <errno.h>
#include <stdarg.h>
#include <netdb.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "log.h"
#include "relay.h"
#include "statefile.h"

/* ---- one server ---- */

struct relay_server *relay_server_new(struct relay *r, const struct relay_server_cfg *cfg)
{
	struct relay_server *srv = calloc(1, sizeof(*srv));

	if (srv == NULL)
		return NULL;
	srv->r = r;
	srv->cfg = *cfg;
	for (size_t i = 0; i < RELAY_MAX_LISTEN; i++)
		srv->pre_fd[i] = -1;
	if (cfg->server_tunnel) {
		size_t bin = 0;

		/* The canonical form was checked by the parser. */
		if (sodium_hex2bin(srv->realm, sizeof(srv->realm), cfg->server_realm,
				   strlen(cfg->server_realm), "-", &bin, NULL) != 0 ||
		    bin != sizeof(srv->realm)) {
			free(srv);
			errno = EINVAL;
			return NULL;
		}
	}
	return srv;
}

int relay_server_load_bans(struct relay_server *srv)
{
	if (srv->cfg.name[0] == '\0' || srv->bans != NULL)
		return 0;
	return relay_bans_new(srv->r, srv, &srv->bans);
}

int relay_server_start(struct relay_server *srv)
{
	char sn[RELAY_NAME_MAX + 16];
	int ret;

	relay_server_logname(srv, sn, sizeof(sn));
	srv->started_ms = ev_now(srv->r->loop);
	ret = relay_proxy_new(srv);
	if (ret < 0) {
		log_err("server-start-fail%s reason=\"%s\"", sn, strerror(-ret));
		return ret;
	}
	if (srv->cfg.nmasters > 0) {
		ret = relay_heartbeat_new(srv);
		if (ret < 0) {
			log_err("server-start-fail%s reason=\"heartbeats: %s\"", sn,
				strerror(-ret));
			return ret;
		}
	}
	return 0;
}

void relay_server_free(struct relay_server *srv)
{
	if (srv == NULL)
		return;
	relay_heartbeat_free(srv->hb);
	relay_proxy_free(srv->proxy);
	relay_bans_free(srv->bans);
	for (size_t i = 0; i < RELAY_MAX_LISTEN; i++) {
		if (srv->pre_fd[i] >= 0)
			close(srv->pre_fd[i]);
	}
	free(srv);
}

/* Its flatline went out: off the retiring list, and gone. */
static void retired(void *arg)
{
	struct relay_server *srv = arg, **pp;
	struct relay *r = srv->r;

	for (pp = &r->retiring; *pp != NULL; pp = &(*pp)->next_retiring) {
		if (*pp == srv) {
			*pp = srv->next_retiring;
			break;
		}
	}
	relay_server_free(srv);
	/* The last one out ends a shutdown. */
	if (r->stopping && r->retiring == NULL && r->stopped != NULL) {
		void (*done)(void *) = r->stopped;

		r->stopped = NULL;
		done(r->stopped_arg);
	}
}

void relay_server_retire(struct relay_server *srv, const struct relay_server_cfg *next)
{
	struct relay *r = srv->r;

	srv->retiring = true;
	srv->next_retiring = r->retiring;
	r->retiring = srv;
	relay_proxy_stop(srv->proxy);
	/* No traffic, no bans: and a restarted server's next self owns the
	 * file now, which this one must never write again. */
	relay_bans_free(srv->bans);
	srv->bans = NULL;
	if (srv->hb != NULL)
		relay_heartbeat_shutdown(srv->hb, next, retired, srv);
	else
		retired(srv);
}

struct relay_server *relay_server_find(const struct relay *r, const char *name)
{
	for (size_t i = 0; i < r->nservers; i++) {
		if (strcmp(r->servers[i]->cfg.name, name) == 0)
			return r->servers[i];
	}
	return NULL;
}

struct relay_server *relay_server_by_realm(const struct relay *r, const uint8_t realm[static 16])
{
	/* XXX: O(servers) per tunnelled datagram; fine for 64 servers. */
	for (size_t i = 0; i < r->nservers; i++) {
		struct relay_server *srv = r->servers[i];

		if (srv->cfg.server_tunnel && memcmp(srv->realm, realm, 16) == 0)
			return srv;
	}
	return NULL;
}

const char *relay_server_logname(const struct relay_server *srv, char *buf, size_t size)
{
	if (srv->cfg.name[0] == '\0')
		buf[0] = '\0';
	else
		snprintf(buf, size, " name=%s", srv->cfg.name);
	return buf;
}

const char *relay_server_labels(const struct relay_server *srv, const char *more, char *buf,
				size_t size)
{
	bool named = srv->cfg.name[0] != '\0';

	if (!named && more == NULL)
		buf[0] = '\0';
	else if (!named)
		snprintf(buf, size, "{%s}", more);
	else if (more == NULL)
		snprintf(buf, size, "{server=\"%s\"}", srv->cfg.name);
	else
		snprintf(buf, size, "{server=\"%s\",%s}", srv->cfg.name, more);
	return buf;
}

int relay_servers_check(const struct relay_cfg *c, const struct relay_server_cfg *s, size_t n,
			struct cfg_err *err)
{
	for (size_t i = 0; i < n; i++) {
		if (s[i].server_tunnel && !c->tunnel_on) {
			err->line = 0;
			snprintf(err->msg, sizeof(err->msg),
				 "[server %s]: server = tunnel:REALM needs --tunnel-listen",
				 s[i].name);
			return -EINVAL;
		}
	}
	return 0;
}

unsigned long long relay_nofile(const struct relay *r)
{
	const struct relay_cfg *c = &r->cfg;
	unsigned long long n = 256;

	/* Each session holds a socket (the seed runs with LimitNOFILE=4096);
	 * each tunnel port and stream one more. */
	for (size_t i = 0; i < r->nservers; i++)
		n += r->servers[i]->cfg.max_sessions + RELAY_MAX_LISTEN + 2;
	if (c->tunnel_on)
		n += 2ULL * (c->tunnel_port_max - c->tunnel_port_min + 1) + c->tunnel_max_hosts;
	return n;
}

/* ---- shutdown ---- */

void relay_servers_shutdown(struct relay *r, void (*done)(void *), void *arg)
{
	size_t n = r->nservers;

	/* done is armed once every server is on its way out: one that
	 * retires at once (no heartbeats) must not end the others'. */
	r->stopped = NULL;
	r->nservers = 0;
	for (size_t i = 0; i < n; i++) {
		relay_server_retire(r->servers[i], NULL);
		r->servers[i] = NULL;
	}
	if (r->retiring == NULL) {
		done(arg);
		return;
	}
	r->stopped = done;
	r->stopped_arg = arg;
}

/* ---- the reload ---- */

enum fate { F_KEEP, F_RESTART, F_ADD };

struct relay_reload {
	struct relay *r; /* NULL once the relay is gone */
	size_t n;
	struct relay_server_cfg cfg[RELAY_MAX_SERVERS];
	enum fate fate[RELAY_MAX_SERVERS];
	/* Resolved on the worker. */
	struct addr server[RELAY_MAX_SERVERS];
	int gai[RELAY_MAX_SERVERS];
	bool resolved[RELAY_MAX_SERVERS];
};

static void refuse(struct relay *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void refuse(struct relay *r, const char *fmt, ...)
{
	char why[320];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	r->reloads_refused++;
	log_err("servers-reload-refused file=%s %s kept=%zu", r->cfg.servers_file, why,
		r->nservers);
}

static void resolve_work(void *arg)
{
	struct relay_reload *rl = arg;

	for (size_t i = 0; i < rl->n; i++) {
		struct addr all[8];
		int n;

		rl->resolved[i] = false;
		if (rl->fate[i] == F_KEEP || rl->cfg[i].server_tunnel)
			continue;
		n = addr_resolve(rl->cfg[i].server_host, rl->cfg[i].server_port, all, 8,
				 &rl->gai[i]);
		if (n > 0) {
			rl->server[i] = all[0];
			rl->resolved[i] = true;
		}
	}
}

/* Whether old (an active server) goes away or restarts in this reload. */
static bool leaving(const struct relay_reload *rl, const struct relay_server *old)
{
	for (size_t i = 0; i < rl->n; i++) {
		if (strcmp(rl->cfg[i].name, old->cfg.name) == 0)
			return rl->fate[i] != F_KEEP;
	}
	return true;
}

/*
 * The socket new's listen address i needs: one of a leaving server's with
 * the same address and IPv6 mode (port 0 only from its own former self),
 * handed over with dup(), else a new one. taken[] marks what was handed
 * over already. The fd, or -errno with why.
 */
static int take_socket(struct relay *r, const struct relay_reload *rl, struct relay_server *new,
		       size_t i, bool taken[][RELAY_MAX_LISTEN], char *why, size_t size)
{
	const struct addr *want = &new->cfg.listen[i];
	bool v6only = relay_server_cfg_v6only(&new->cfg, i);
	char a[ADDR_STRLEN];
	struct addr b;
	int fd;

	for (size_t k = 0; k < r->nservers; k++) {
		struct relay_server *old = r->servers[k];

		if (!leaving(rl, old) || old->proxy == NULL)
			continue;
		for (size_t j = 0; j < old->cfg.nlisten; j++) {
			if (taken[k][j] || !addr_equal(&old->cfg.listen[j], want) ||
			    (addr_port(want) == 0 && strcmp(old->cfg.name, new->cfg.name) != 0))
				continue;
			if (relay_server_cfg_v6only(&old->cfg, j) != v6only) {
				snprintf(why, size,
					 "reason=\"listen %s changes between dual-stack and "
					 "IPv6-only: restart rally-relay to apply it\"",
					 addr_str(want, a, sizeof(a)));
				return -EADDRINUSE;
			}
			fd = relay_proxy_dup_socket(old->proxy, j);
			if (fd < 0) {
				snprintf(why, size, "reason=\"listen %s: %s\"",
					 addr_str(want, a, sizeof(a)), strerror(-fd));
				return fd;
			}
			taken[k][j] = true;
			return fd;
		}
	}
	b = *want;
	fd = addr_udp_bind_v6only(&b, v6only);
	if (fd < 0)
		snprintf(why, size, "reason=\"[server %s]: listen %s: %s\"", new->cfg.name,
			 addr_str(want, a, sizeof(a)), strerror(-fd));
	return fd;
}

/* A comma-separated list of server names, for the reload's log line. */
struct namelist {
	char s[RELAY_MAX_SERVERS * (RELAY_NAME_MAX + 1) + 1];
	size_t n;
};

static void names_add(struct namelist *b, const char *name)
{
	int k = snprintf(b->s + b->n, sizeof(b->s) - b->n, "%s%s", b->n > 0 ? "," : "", name);

	if (k > 0 && (size_t)k < sizeof(b->s) - b->n)
		b->n += (size_t)k;
}

static const char *names_str(const struct namelist *b)
{
	return b->n > 0 ? b->s : "-";
}

static void log_started(const struct relay_server *srv)
{
	char line[RELAY_MAX_LISTEN * (ADDR_STRLEN + 8)], a[ADDR_STRLEN];
	size_t n = 0;

	line[0] = '\0';
	for (size_t k = 0; k < srv->cfg.nlisten && n < sizeof(line); k++)
		n += (size_t)snprintf(line + n, sizeof(line) - n, " listen=%s",
				      addr_str(&srv->bound[k], a, sizeof(a)));
	log_info("server-started name=%s%s", srv->cfg.name, line);
}

static void apply(struct relay *r, struct relay_reload *rl)
{
	struct relay_server *made[RELAY_MAX_SERVERS] = {NULL}, *next[RELAY_MAX_SERVERS];
	bool taken[RELAY_MAX_SERVERS][RELAY_MAX_LISTEN] = {{false}};
	struct namelist added = {.n = 0}, removed = {.n = 0}, restarted = {.n = 0}, kept = {.n = 0};
	char why[300];
	size_t nnext = 0;

	/* Resolution first: a server that cannot be found refuses it all. */
	for (size_t i = 0; i < rl->n; i++) {
		if (rl->fate[i] != F_KEEP && !rl->cfg[i].server_tunnel && !rl->resolved[i]) {
			refuse(r, "reason=\"[server %s]: cannot resolve %s: %s\"", rl->cfg[i].name,
			       rl->cfg[i].server_host, gai_strerror(rl->gai[i]));
			return;
		}
	}
	/* Everything that can fail, before anything changes. */
	for (size_t i = 0; i < rl->n; i++) {
		struct relay_server *srv;
		int ret;

		if (rl->fate[i] == F_KEEP)
			continue;
		srv = made[i] = relay_server_new(r, &rl->cfg[i]);
		if (srv == NULL) {
			snprintf(why, sizeof(why), "reason=\"out of memory\"");
			goto fail;
		}
		srv->server = rl->server[i];
		for (size_t k = 0; k < srv->cfg.nlisten; k++) {
			ret = take_socket(r, rl, srv, k, taken, why, sizeof(why));
			if (ret < 0)
				goto fail;
			srv->pre_fd[k] = ret;
		}
		ret = relay_server_load_bans(srv);
		if (ret < 0) {
			snprintf(why, sizeof(why),
				 "reason=\"[server %s]: cannot load its bans.json (%s)\"",
				 srv->cfg.name, strerror(-ret));
			goto fail;
		}
	}
	/* The point of no return: the leaving ones go... */
	for (size_t k = 0; k < r->nservers; k++) {
		struct relay_server *old = r->servers[k];
		const struct relay_server_cfg *succ = NULL;

		if (!leaving(rl, old))
			continue;
		for (size_t i = 0; i < rl->n; i++) {
			if (strcmp(rl->cfg[i].name, old->cfg.name) == 0)
				succ = &rl->cfg[i];
		}
		names_add(succ != NULL ? &restarted : &removed, old->cfg.name);
		/* Off the list first: without heartbeats it is freed at once. */
		r->servers[k] = NULL;
		relay_server_retire(old, succ);
	}
	/* ...the kept ones stay as they are (their bans reload, as with the
	 * classic flags), the new ones start, in the file's order. A server
	 * that fails to start is left out (its error is logged). */
	for (size_t i = 0; i < rl->n; i++) {
		if (rl->fate[i] == F_KEEP) {
			for (size_t k = 0; k < r->nservers; k++) {
				if (r->servers[k] != NULL &&
				    strcmp(r->servers[k]->cfg.name, rl->cfg[i].name) == 0)
					next[nnext++] = r->servers[k];
			}
			continue;
		}
		next[nnext++] = made[i];
	}
	r->nservers = 0;
	for (size_t i = 0, k = 0; i < rl->n; i++) {
		struct relay_server *srv = next[k++];

		if (rl->fate[i] == F_KEEP) {
			if (srv->bans != NULL)
				relay_bans_reload(srv->bans);
			names_add(&kept, srv->cfg.name);
		} else {
			made[i] = NULL;
			if (relay_server_start(srv) < 0) {
				relay_server_free(srv);
				continue;
			}
			if (rl->fate[i] == F_ADD)
				names_add(&added, srv->cfg.name);
			log_started(srv);
		}
		r->servers[r->nservers++] = srv;
	}
	daemon_raise_nofile(relay_nofile(r), "sessions");
	r->reloads_ok++;
	log_info("servers-reloaded file=%s servers=%zu added=%s removed=%s restarted=%s kept=%s",
		 r->cfg.servers_file, r->nservers, names_str(&added), names_str(&removed),
		 names_str(&restarted), names_str(&kept));
	return;
fail:
	for (size_t i = 0; i < rl->n; i++)
		relay_server_free(made[i]);
	refuse(r, "%s", why);
}

static void resolve_done(void *arg, bool cancelled)
{
	struct relay_reload *rl = arg;
	struct relay *r = rl->r;

	if (r != NULL)
		r->reload = NULL;
	if (r != NULL && !cancelled && !r->stopping)
		apply(r, rl);
	free(rl);
	if (r != NULL && !cancelled && !r->stopping && r->reload_again) {
		r->reload_again = false;
		relay_servers_reload(r);
	}
}

void relay_servers_reload(struct relay *r)
{
	struct relay_reload *rl;
	struct cfg_err err;
	char *text = NULL;
	size_t len;
	int n, ret;

	if (r->cfg.servers_file[0] == '\0' || r->stopping)
		return;
	if (r->reload != NULL) {
		r->reload_again = true;
		return;
	}
	ret = statefile_read(r->cfg.servers_file, RELAY_SRVFILE_MAX, &text, &len);
	if (ret < 0) {
		refuse(r, "reason=\"cannot read it: %s\"", strerror(-ret));
		return;
	}
	rl = calloc(1, sizeof(*rl));
	if (rl == NULL) {
		free(text);
		refuse(r, "reason=\"out of memory\"");
		return;
	}
	n = relay_srvfile_parse(text, len, rl->cfg, RELAY_MAX_SERVERS, &err);
	free(text);
	if (n >= 0 && relay_servers_check(&r->cfg, rl->cfg, (size_t)n, &err) < 0)
		n = -EINVAL;
	if (n < 0) {
		refuse(r, "line=%d error=\"%s\"", err.line, err.msg);
		free(rl);
		return;
	}
	rl->r = r;
	rl->n = (size_t)n;
	for (size_t i = 0; i < rl->n; i++) {
		const struct relay_server *old = relay_server_find(r, rl->cfg[i].name);

		if (old == NULL)
			rl->fate[i] = F_ADD;
		else if (relay_server_cfg_equal(&old->cfg, &rl->cfg[i]))
			rl->fate[i] = F_KEEP;
		else
			rl->fate[i] = F_RESTART;
	}
	/* DNS for the new ones off the loop; apply() when it is done. */
	ret = ev_work_submit(r->loop, resolve_work, resolve_done, rl);
	if (ret < 0) {
		free(rl);
		refuse(r, "reason=\"cannot start the resolver: %s\"", strerror(-ret));
		return;
	}
	r->reload = rl;
}

void relay_servers_free(struct relay *r)
{
	for (size_t i = 0; i < r->nservers; i++)
		relay_server_free(r->servers[i]);
	r->nservers = 0;
	while (r->retiring != NULL) {
		struct relay_server *srv = r->retiring;

		r->retiring = srv->next_retiring;
		relay_server_free(srv);
	}
	if (r->reload != NULL)
		r->reload->r = NULL;
	r->reload = NULL;
}
