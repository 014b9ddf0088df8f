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
 * a --trusted-proxy peer (master_http_client_ip). Entries are
 * MASTER_REG_FUGITIVE registry entries whose TTL is --stale; PUT refreshes
 * them.
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
 *
 * What needs no socket (the id, the body as encoding/json reads it, the
 * validation, the JSON written back) is master_fugitive_codec.c, declared
 * in master_fugitive.h; this file is the door around it.
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

/* ---- registry entries ---- */

struct fug_entry {
	struct master_reg_head head;
	uint8_t ip[4];
	uint16_t port;
	uint8_t name_len;
	bool is_joinable;
	char name[MASTER_FUGITIVE_NAME_MAX];
	long long game_version, current_players, max_players;
};

static void make_key(const uint8_t ip[static 4], uint16_t port, uint8_t key[static FUG_KEY_LEN])
{
	memcpy(key, ip, 4);
	key[4] = (uint8_t)(port >> 8);
	key[5] = (uint8_t)port;
}

static void key_of(const void *val, uint8_t key[MASTER_REG_KEY_MAX])
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
	if (!get_int64(o, "port", &port) || port < MASTER_FUGITIVE_PORT_MIN ||
	    port > MASTER_FUGITIVE_PORT_MAX) {
		snprintf(err, errsize, "port: not a number in %d-%d", MASTER_FUGITIVE_PORT_MIN,
			 MASTER_FUGITIVE_PORT_MAX);
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
	if (!master_fugitive_name_ok(name, nlen)) {
		snprintf(err, errsize, "name: not %d-%d bytes of trimmed UTF-8",
			 MASTER_FUGITIVE_NAME_MIN, MASTER_FUGITIVE_NAME_MAX);
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
	struct master_fugitive_id id;
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
	master_fugitive_json_string(&b, result, strlen(result));
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
	master_http_client_ip(m, req, "X-Forwarded-For", &a);
	addr_to_ip(&a, ip);
}

static const char *id_str(const struct master_fugitive_id *id, char *buf, size_t size)
{
	char ip[INET6_ADDRSTRLEN];

	if (!id->has_ip)
		snprintf(ip, sizeof(ip), "?");
	else
		addr_ip_fmt(&id->ip, ip, sizeof(ip));
	snprintf(buf, size, master_fugitive_ip_is_v4(&id->ip) ? "%s:%lld" : "[%s]:%lld", ip,
		 id->port);
	return buf;
}

static size_t count_ip(struct master_fugitive *f, const uint8_t ip[static 4])
{
	size_t n = 0;

	/* XXX: O(n) over the servers, only when a new one is added; fine
	 * at FUG_CAPACITY. */
	for (struct fug_entry *e = master_registry_next(f->m->reg, MASTER_REG_FUGITIVE, NULL);
	     e != NULL; e = master_registry_next(f->m->reg, MASTER_REG_FUGITIVE, e)) {
		if (memcmp(e->ip, ip, 4) == 0)
			n++;
	}
	return n;
}

/* srvrepo Register: an upsert. 0 (*created set) or -ENOSPC. */
static int store(struct master_fugitive *f, const struct master_fugitive_id *id,
		 const struct master_fugitive_body *b, bool *created)
{
	struct master_registry *reg = f->m->reg;
	uint8_t key[FUG_KEY_LEN];
	struct fug_entry *e;

	make_key(id->ip.b + 12, (uint16_t)id->port, key);
	e = master_registry_get(reg, MASTER_REG_FUGITIVE, key);
	*created = e == NULL;
	if (e != NULL) {
		master_registry_refresh(reg, MASTER_REG_FUGITIVE, e);
	} else {
		if (count_ip(f, id->ip.b + 12) >= FUG_PER_IP_MAX)
			return -ENOSPC;
		e = master_registry_put(reg, MASTER_REG_FUGITIVE, key, created);
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

/* GET /servers: the body, kept by master_list (rebuilt on a change). */
static int list_build(struct master *m, long long wall_ms, struct strbuf *b)
{
	bool first = true;

	(void)wall_ms; /* "lastSeen" is the entry's own time */
	strbuf_append(b, "[", 1);
	for (struct fug_entry *e = master_registry_next(m->reg, MASTER_REG_FUGITIVE, NULL);
	     e != NULL; e = master_registry_next(m->reg, MASTER_REG_FUGITIVE, e)) {
		struct master_fugitive_server s = {
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
			strbuf_append(b, ",", 1);
		master_fugitive_json_server(b, &s);
		first = false;
	}
	strbuf_append(b, "]", 1);
	return b->bad ? -EMSGSIZE : 0;
}

static void list(struct master *m, struct httpd_req *req)
{
	master_registry_expire(m->reg);
	if (master_list_reply(m->fug_list, req) < 0) {
		/* Cannot happen below FUG_LIST_MAX; say so if it does. */
		reply(m, req, "fugitive_list", 500, MSG_INTERNAL);
		return;
	}
	master_http_count(m, "fugitive_list", 200);
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
	struct master_fugitive_body b;
	struct master_fugitive_id id;
	struct addr_ip caller;
	const char *body, *msg;
	char who[ADDR_STRLEN + 24];
	size_t blen;
	bool created;

	body = httpd_body(req, &blen);
	if (httpd_body_too_big(req) || master_fugitive_parse_body(body, blen, &b) < 0) {
		count(f, O_PUT_INVALID);
		reply(m, req, "fugitive_update", 400, MSG_BAD_JSON);
		return;
	}
	if (master_fugitive_parse_id(idtext, strlen(idtext), &id) < 0) {
		count(f, O_PUT_INVALID);
		reply(m, req, "fugitive_update", 400, MSG_BAD_ID);
		return;
	}
	if ((msg = master_fugitive_validate(&id, &b)) != NULL) {
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
	struct master_fugitive_id id;
	struct addr_ip caller;
	uint8_t key[FUG_KEY_LEN];
	struct fug_entry *e = NULL;
	char who[ADDR_STRLEN + 24];

	if (master_fugitive_parse_id(idtext, strlen(idtext), &id) < 0) {
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
	if (master_fugitive_ip_is_v4(&id.ip) && id.port >= 0 && id.port <= 65535) {
		make_key(id.ip.b + 12, (uint16_t)id.port, key);
		e = master_registry_get(m->reg, MASTER_REG_FUGITIVE, key);
	}
	if (e == NULL) {
		count(f, O_DEL_UNKNOWN);
		reply(m, req, "fugitive_remove", 404, "failure");
		return;
	}
	master_registry_del(m->reg, MASTER_REG_FUGITIVE, e);
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
	struct master_fugitive_body b;
	const char *body, *msg;
	char who[ADDR_STRLEN + 24];
	size_t blen;
	bool created;

	body = httpd_body(p->req, &blen);
	if (httpd_body_too_big(p->req) || master_fugitive_parse_body(body, blen, &b) < 0) {
		ping_answer(p, O_POST_INVALID, 400, MSG_BAD_JSON);
		return;
	}
	if ((msg = master_fugitive_validate(&p->id, &b)) != NULL) {
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
	int fd = addr_udp_connect(to, NULL);

	*refused = false;
	if (fd < 0)
		return fd;
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
	struct master_fugitive_id id;
	struct addr_ip caller;
	struct addr to;
	char who[ADDR_STRLEN + 24];
	unsigned same = 0;
	bool refused;
	int fd;

	if (master_fugitive_parse_id(idtext, strlen(idtext), &id) < 0) {
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
	struct master_reg_kind_ops ops = {
		.name = "fugitive",
		.val_size = sizeof(struct fug_entry),
		.key_len = FUG_KEY_LEN,
		.capacity = FUG_CAPACITY,
		.ttl_ms = m->cfg.stale_ms,
		.key_of = key_of,
		.save = entry_save,
		.load = entry_load,
	};
	const struct master_list_def def = {
		.name = "servers",
		.kind = MASTER_REG_FUGITIVE,
		.content_type = JSON_TYPE,
		.max = FUG_LIST_MAX,
		.build = list_build,
	};
	int r;

	if (f == NULL)
		return -ENOMEM;
	f->m = m;
	for (size_t i = 0; i < FUG_PING_MAX; i++) {
		f->ping[i].f = f;
		ev_timer_init(&f->ping[i].timer);
	}
	r = master_registry_add_kind(m->reg, MASTER_REG_FUGITIVE, &ops);
	if (r < 0) {
		free(f);
		return r;
	}
	m->fug_list = master_list_new(m, &def);
	if (m->fug_list == NULL) {
		free(f);
		return -ENOMEM;
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
