/*
 * The netpunch master's HTTP API: /announce, /leave, /list, /health (and the
 * routing of /knock to master_knock.c), exactly as the reference
 * masterserver.py answers them (../shared/vectors/master-api.md): paths
 * matched by suffix, every field cut and clamped as the reference's
 * str(v)[:n] and int() do, the same status codes and error strings, and
 * bodies written as Python's json.dumps writes them (common/pyjson).
 *
 * Lobbies are MASTER_REG_LOBBY entries of the registry: 500 at most, dropped
 * 30 s after their last announce.
 */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "httpd.h"
#include "jsonp.h"
#include "log.h"
#include "master.h"
#include "master_py.h"
#include "pyjson.h"
#include "strbuf.h"

#define MAX_ENTRIES (500)
#define BODY_MAX    (4096)

/* Field lengths in characters (code points), as the reference cuts them. */
#define ID_CHARS      (64)
#define NAME_CHARS    (40)
#define CODE_CHARS    (400)
#define TYPE_CHARS    (16)
#define GAME_CHARS    (60)
#define VERSION_CHARS (20)

/* A lobby row. Strings are UTF-8, up to 4 bytes per character. */
struct lobby {
	struct master_reg_head h;
	char id[ID_CHARS * 4 + 1];
	char name[NAME_CHARS * 4 + 1];
	char code[CODE_CHARS * 4 + 1];
	char type[16];
	char version[VERSION_CHARS * 4 + 1];
	int players, max;
	bool locked;
	struct addr from; /* the announcer; never listed */
};

/* "game" carries the type's label, for panels of 0.4.11 and older. */
static const char *type_label(const char *type)
{
	if (strcmp(type, "host") == 0)
		return "player hosted";
	return "dedicated server"; /* relay, dedicated */
}

/* The known types as static strings, or NULL. */
static const char *type_known(const char *t)
{
	static const char *const types[] = {"relay", "dedicated", "host"};

	for (size_t i = 0; i < 3; i++) {
		if (strcmp(t, types[i]) == 0)
			return types[i];
	}
	return NULL;
}

static void lobby_key(const char *id, uint8_t key[MASTER_REG_KEY_MAX])
{
	crypto_generichash(key, MASTER_REG_KEY_MAX, (const uint8_t *)id, strlen(id), NULL, 0);
}

/* ---- the reply ---- */

void master_netpunch_reply(struct httpd_req *req, unsigned status, const char *json, size_t len)
{
	httpd_reply(req, status, "application/json; charset=utf-8", json, len);
}

void master_netpunch_error(struct master *m, struct httpd_req *req, const char *endpoint,
			   unsigned status, const char *msg)
{
	struct strbuf b;
	struct pyjson j;

	strbuf_init(&b, 512);
	pyjson_init(&j, &b);
	pyjson_obj_begin(&j);
	pyjson_key(&j, "error");
	pyjson_cstr(&j, msg);
	pyjson_obj_end(&j);
	master_netpunch_reply(req, status, b.p, b.len);
	strbuf_release(&b);
	master_http_count(m, endpoint, status);
}

static void reply_ok(struct master *m, struct httpd_req *req, const char *endpoint, long long ttl)
{
	struct strbuf b;
	struct pyjson j;

	strbuf_init(&b, 128);
	pyjson_init(&j, &b);
	pyjson_obj_begin(&j);
	pyjson_key(&j, "ok");
	pyjson_bool(&j, true);
	if (ttl >= 0) {
		pyjson_key(&j, "ttl");
		pyjson_int(&j, ttl);
	}
	pyjson_obj_end(&j);
	master_netpunch_reply(req, 200, b.p, b.len);
	strbuf_release(&b);
	master_http_count(m, endpoint, 200);
}

/* ---- the body ---- */

/*
 * The reference's _body(): Content-Length must be 1..4096 and the body UTF-8
 * JSON, else the body counts as missing (NULL).
 */
static struct json_object *read_body(struct httpd_req *req)
{
	const char *cl = httpd_header(req, "Content-Length");
	struct json_object *o;
	size_t len;
	const char *body;
	char err[128];

	if (cl == NULL || httpd_body_too_big(req))
		return NULL;
	body = httpd_body(req, &len);
	if (len == 0 || len > BODY_MAX)
		return NULL;
	if (master_py_json_loads(body, len, &o, err, sizeof(err)) < 0)
		return NULL;
	return o;
}

/* ---- /announce, /leave ---- */

static void announce(struct master *m, struct httpd_req *req, struct json_object *d,
		     const char *sid)
{
	char code[sizeof(((struct lobby *)0)->code)], type[TYPE_CHARS * 4 + 1];
	char game[GAME_CHARS * 4 + 1];
	uint8_t key[MASTER_REG_KEY_MAX];
	const char *kind;
	struct lobby *e;
	bool created;

	master_py_field_str(d, "code", CODE_CHARS, code, sizeof(code));
	if (code[0] == '\0') {
		master_netpunch_error(m, req, "announce", 400, "code required");
		return;
	}
	master_py_field_str(d, "type", TYPE_CHARS, type, sizeof(type));
	kind = type_known(type);
	if (kind == NULL) {
		/* Lobbies from before the type field: the relay is known by the
		 * game string its service passes, anything else is a player. */
		master_py_field_str(d, "game", GAME_CHARS, game, sizeof(game));
		kind = strcmp(game, "dedicated relay") == 0 ? "relay" : "host";
	}
	lobby_key(sid, key);
	e = master_registry_put(m->reg, MASTER_REG_LOBBY, key, &created);
	if (e == NULL) {
		master_netpunch_error(m, req, "announce", 503, "full");
		return;
	}
	/* A re-announce replaces the whole row. */
	memset((char *)e + sizeof(e->h), 0, sizeof(*e) - sizeof(e->h));
	snprintf(e->id, sizeof(e->id), "%s", sid);
	master_py_field_str(d, "name", NAME_CHARS, e->name, sizeof(e->name));
	if (e->name[0] == '\0')
		snprintf(e->name, sizeof(e->name), "unnamed");
	snprintf(e->code, sizeof(e->code), "%s", code);
	e->players = master_py_field_int_or(d, "players", 0, 0, 0, 10000);
	e->max = master_py_field_int_or(d, "max", 8, 8, 0, 10000);
	snprintf(e->type, sizeof(e->type), "%s", kind);
	master_py_field_str(d, "version", VERSION_CHARS, e->version, sizeof(e->version));
	e->locked = master_py_truthy_field(d, "locked");
	e->from = *httpd_peer(req);
	master_registry_refresh(m->reg, MASTER_REG_LOBBY, e);
	if (log_enabled(LOG_LEVEL_DEBUG)) {
		char a[ADDR_STRLEN];

		log_debug("announce peer=%s new=%d players=%d max=%d type=%s",
			  addr_str(&e->from, a, sizeof(a)), created, e->players, e->max, e->type);
	}
	reply_ok(m, req, "announce", m->cfg.lobby_ttl_ms / 1000);
}

static void leave(struct master *m, struct httpd_req *req, const char *sid)
{
	uint8_t key[MASTER_REG_KEY_MAX];
	struct lobby *e;

	lobby_key(sid, key);
	e = master_registry_get(m->reg, MASTER_REG_LOBBY, key);
	if (e != NULL)
		master_registry_del(m->reg, MASTER_REG_LOBBY, e);
	reply_ok(m, req, "leave", -1);
}

/* ---- GET /list ---- */

int master_netpunch_list_build(struct master *m, long long now_ms, struct strbuf *out)
{
	struct pyjson j;
	const struct lobby *e = NULL;

	pyjson_init(&j, out);
	pyjson_obj_begin(&j);
	pyjson_key(&j, "servers");
	pyjson_arr_begin(&j);
	while ((e = master_registry_next(m->reg, MASTER_REG_LOBBY, e)) != NULL) {
		long long age = now_ms - e->h.seen_wall_ms;

		pyjson_obj_begin(&j);
		pyjson_key(&j, "name");
		pyjson_cstr(&j, e->name);
		pyjson_key(&j, "code");
		pyjson_cstr(&j, e->code);
		pyjson_key(&j, "players");
		pyjson_int(&j, e->players);
		pyjson_key(&j, "max");
		pyjson_int(&j, e->max);
		pyjson_key(&j, "game");
		pyjson_cstr(&j, type_label(e->type));
		pyjson_key(&j, "type");
		pyjson_cstr(&j, e->type);
		pyjson_key(&j, "version");
		pyjson_cstr(&j, e->version);
		pyjson_key(&j, "locked");
		pyjson_bool(&j, e->locked);
		pyjson_key(&j, "age");
		pyjson_int(&j, age > 0 ? age / 1000 : 0);
		pyjson_obj_end(&j);
	}
	pyjson_arr_end(&j);
	pyjson_key(&j, "now");
	pyjson_int(&j, now_ms / 1000);
	pyjson_key(&j, "ttl");
	pyjson_int(&j, m->cfg.lobby_ttl_ms / 1000);
	pyjson_obj_end(&j);
	return out->bad ? -EMSGSIZE : 0;
}

/* The body is kept by master_list (rebuilt on a change and each second). */
static void list(struct master *m, struct httpd_req *req)
{
	master_registry_expire(m->reg);
	if (master_list_reply(m->lobby_list, req) < 0) {
		master_netpunch_error(m, req, "list", 500, "list too large");
		return;
	}
	master_http_count(m, "list", 200);
}

/* ---- routing ---- */

static bool ends_with(const char *s, size_t len, const char *suffix)
{
	size_t n = strlen(suffix);

	return len >= n && memcmp(s + len - n, suffix, n) == 0;
}

void master_netpunch_handle(struct master *m, struct httpd_req *req)
{
	const char *method = httpd_method(req), *path = httpd_path(req);
	size_t len = strlen(path);

	/* The reference: path.split("?")[0].rstrip("/") (or "/" for GET). */
	while (len > 0 && path[len - 1] == '/')
		len--;
	if (strcmp(method, "GET") == 0) {
		if (ends_with(path, len, "/health")) {
			httpd_reply(req, 200, "text/plain", "ok", 2);
			master_http_count(m, "health", 200);
		} else if (ends_with(path, len, "/pipe")) {
			/* No TCP pipe here (a later capability): the reference's
			 * answer when it runs without --pipe-port. */
			master_netpunch_error(m, req, "pipe", 404, "no pipe");
		} else if (ends_with(path, len, "/knock")) {
			master_knock_get(m, req);
		} else if (ends_with(path, len, "/list") || len == 0) {
			list(m, req);
		} else {
			master_netpunch_error(m, req, "not_found", 404, "not found");
		}
		return;
	}
	if (strcmp(method, "POST") == 0) {
		struct json_object *d = read_body(req);
		char sid[ID_CHARS * 4 + 1];

		if (ends_with(path, len, "/knock")) {
			master_knock_post(m, req, d);
			json_object_put(d);
			return;
		}
		if (d == NULL || !json_object_is_type(d, json_type_object) ||
		    (master_py_field_str(d, "id", ID_CHARS, sid, sizeof(sid)), sid[0] == '\0')) {
			master_netpunch_error(m, req, "bad_request", 400, "bad request");
		} else if (ends_with(path, len, "/announce")) {
			announce(m, req, d, sid);
		} else if (ends_with(path, len, "/leave")) {
			leave(m, req, sid);
		} else {
			master_netpunch_error(m, req, "not_found", 404, "not found");
		}
		json_object_put(d);
		return;
	}
	/* BaseHTTPRequestHandler has no handler for other methods: 501. */
	master_netpunch_error(m, req, "unsupported", 501, "unsupported method");
}

/* ---- the registry kind ---- */

static void key_of(const void *val, uint8_t key[MASTER_REG_KEY_MAX])
{
	lobby_key(((const struct lobby *)val)->id, key);
}

static void save(const void *val, struct json_object *o)
{
	const struct lobby *e = val;
	char a[ADDR_STRLEN];

	json_object_object_add(o, "id", json_object_new_string(e->id));
	json_object_object_add(o, "name", json_object_new_string(e->name));
	json_object_object_add(o, "code", json_object_new_string(e->code));
	json_object_object_add(o, "players", json_object_new_int(e->players));
	json_object_object_add(o, "max", json_object_new_int(e->max));
	json_object_object_add(o, "type", json_object_new_string(e->type));
	json_object_object_add(o, "version", json_object_new_string(e->version));
	json_object_object_add(o, "locked", json_object_new_boolean(e->locked));
	json_object_object_add(o, "from", json_object_new_string(addr_str(&e->from, a, sizeof(a))));
}

static int load_str(struct json_object *o, const char *k, size_t maxchars, char *dst, size_t size,
		    bool need, char *err, size_t errsize)
{
	struct json_object *f;
	const char *s;

	if (!json_object_object_get_ex(o, k, &f) || !json_object_is_type(f, json_type_string)) {
		snprintf(err, errsize, "%s: missing or not a string", k);
		return -EBADMSG;
	}
	s = json_object_get_string(f);
	if (master_py_utf8_chars(s) > maxchars || strlen(s) >= size || (need && s[0] == '\0')) {
		snprintf(err, errsize, "%s: empty or longer than %zu characters", k, maxchars);
		return -EBADMSG;
	}
	memcpy(dst, s, strlen(s) + 1);
	return 0;
}

static int load_int(struct json_object *o, const char *k, int *v, char *err, size_t errsize)
{
	struct json_object *f;
	int64_t x;

	if (!json_object_object_get_ex(o, k, &f) || !json_object_is_type(f, json_type_int)) {
		snprintf(err, errsize, "%s: missing or not an integer", k);
		return -EBADMSG;
	}
	x = json_object_get_int64(f);
	if (x < 0 || x > 10000) {
		snprintf(err, errsize, "%s: outside 0..10000", k);
		return -EBADMSG;
	}
	*v = (int)x;
	return 0;
}

static int load(struct json_object *o, void *val, char *err, size_t errsize)
{
	struct lobby *e = val;
	struct json_object *f;

	if (load_str(o, "id", ID_CHARS, e->id, sizeof(e->id), true, err, errsize) < 0 ||
	    load_str(o, "name", NAME_CHARS, e->name, sizeof(e->name), true, err, errsize) < 0 ||
	    load_str(o, "code", CODE_CHARS, e->code, sizeof(e->code), true, err, errsize) < 0 ||
	    load_str(o, "type", TYPE_CHARS, e->type, sizeof(e->type), true, err, errsize) < 0 ||
	    load_str(o, "version", VERSION_CHARS, e->version, sizeof(e->version), false, err,
		     errsize) < 0 ||
	    load_int(o, "players", &e->players, err, errsize) < 0 ||
	    load_int(o, "max", &e->max, err, errsize) < 0)
		return -EBADMSG;
	if (type_known(e->type) == NULL) {
		snprintf(err, errsize, "type: not relay, dedicated or host");
		return -EBADMSG;
	}
	if (!json_object_object_get_ex(o, "locked", &f) ||
	    !json_object_is_type(f, json_type_boolean)) {
		snprintf(err, errsize, "locked: missing or not a boolean");
		return -EBADMSG;
	}
	e->locked = json_object_get_boolean(f);
	if (!json_object_object_get_ex(o, "from", &f) ||
	    !json_object_is_type(f, json_type_string) ||
	    addr_parse(&e->from, json_object_get_string(f), -1) < 0) {
		snprintf(err, errsize, "from: missing or not an address");
		return -EBADMSG;
	}
	return 0;
}

int master_netpunch_init(struct master *m)
{
	struct master_reg_kind_ops ops = {
		.name = "lobbies",
		.val_size = sizeof(struct lobby),
		.key_len = MASTER_REG_KEY_MAX,
		.capacity = MAX_ENTRIES,
		.ttl_ms = m->cfg.lobby_ttl_ms,
		.key_of = key_of,
		.save = save,
		.load = load,
	};

	const struct master_list_def def = {
		.name = "list",
		.kind = MASTER_REG_LOBBY,
		.per_second = true, /* "now" and "age" */
		.content_type = "application/json; charset=utf-8",
		.max = (size_t)8 << 20,
		.build = master_netpunch_list_build,
	};
	int r = master_registry_add_kind(m->reg, MASTER_REG_LOBBY, &ops);

	if (r < 0)
		return r;
	m->lobby_list = master_list_new(m, &def);
	return m->lobby_list != NULL ? 0 : -ENOMEM;
}
