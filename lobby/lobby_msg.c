/*
 * The lobby's JSON messages between peers: decode into one struct per
 * message, encode in netpunch's key orders (netpunch-wire.md §7, §11).
 * Pure: no I/O, clock or logging.
 */
#include "lobby_msg.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "jsonp.h"
#include "pyjson.h"
#include "strbuf.h"

/* What decode allocated: the parsed tree (strings point into it) and the
 * arrays of the decoded lists, one block each. */
struct block {
	struct block *next;
	alignas(max_align_t) unsigned char data[];
};

struct lobby_msg_mem {
	struct json_object *root;
	struct block *blocks;
};

static const char *const type_names[LOBBY_MSG_NTYPES] = {
	[LOBBY_MSG_UNKNOWN] = "",
	[LOBBY_MSG_JOIN] = "join",
	[LOBBY_MSG_PING] = "ping",
	[LOBBY_MSG_CHAT] = "chat",
	[LOBBY_MSG_LEAVE] = "leave",
	[LOBBY_MSG_LINKS] = "links",
	[LOBBY_MSG_STAGE] = "stage",
	[LOBBY_MSG_COMPANY] = "company",
	[LOBBY_MSG_MODE] = "mode",
	[LOBBY_MSG_LOG] = "log",
	[LOBBY_MSG_MESH_HI] = "mesh_hi",
	[LOBBY_MSG_WELCOME] = "welcome",
	[LOBBY_MSG_ROSTER] = "roster",
	[LOBBY_MSG_START] = "start",
	[LOBBY_MSG_STATUS] = "status",
	[LOBBY_MSG_REJECT] = "reject",
	[LOBBY_MSG_BYE] = "bye",
	[LOBBY_MSG_FBEGIN] = "fbegin",
	[LOBBY_MSG_FBEGIN_ACK] = "fbegin_ack",
	[LOBBY_MSG_FACK] = "fack",
	[LOBBY_MSG_FDONE] = "fdone",
	[LOBBY_MSG_XSTAT] = "xstat",
	[LOBBY_MSG_MODS_MANIFEST] = "mods_manifest",
};

const char *lobby_msg_type_name(enum lobby_msg_type type)
{
	if ((unsigned)type >= LOBBY_MSG_NTYPES)
		return "";
	return type_names[type];
}

void lobby_msg_init(struct lobby_msg *m, enum lobby_msg_type type)
{
	memset(m, 0, sizeof(*m));
	m->type = type;
	m->t = lobby_msg_type_name(type);
}

/* ---- decoding: field readers ---- */

static void *mem_alloc(struct lobby_msg_mem *mm, size_t n, size_t size)
{
	struct block *b;

	if (n == 0)
		return NULL;
	/* n is capped by the callers (LOBBY_MSG_MAX_ITEMS): no overflow. */
	b = calloc(1, sizeof(*b) + n * size);
	if (b == NULL)
		return NULL;
	b->next = mm->blocks;
	mm->blocks = b;
	return b->data;
}

static struct json_object *field(struct json_object *o, const char *key)
{
	struct json_object *f = NULL;

	if (!json_object_object_get_ex(o, key, &f))
		return NULL;
	return f;
}

static long long int_or(struct json_object *o, const char *key, long long dflt)
{
	long long v;

	return jsonp_int(o, key, &v) ? v : dflt;
}

static int get_sid(struct json_object *o, uint32_t *sid)
{
	long long v;

	if (!jsonp_int(o, "sid", &v) || v < 0 || v > 0xffffffffLL)
		return -EBADMSG;
	*sid = (uint32_t)v;
	return 0;
}

/*
 * The room for a list or dict of f's kind (json_type_array or _object):
 * *len items at most LOBBY_MSG_MAX_ITEMS, *null when f is not of the kind.
 * Returns the array (NULL when empty), or sets *err to -ENOMEM.
 */
static void *room(struct lobby_msg_mem *mm, struct json_object *f, enum json_type kind, size_t size,
		  size_t *len, bool *null, int *err)
{
	void *v;

	*len = 0;
	*err = 0;
	*null = !json_object_is_type(f, kind);
	if (*null)
		return NULL;
	*len = kind == json_type_array ? json_object_array_length(f)
				       : (size_t)json_object_object_length(f);
	if (*len > LOBBY_MSG_MAX_ITEMS)
		*len = LOBBY_MSG_MAX_ITEMS;
	v = mem_alloc(mm, *len, size);
	if (*len > 0 && v == NULL)
		*err = -ENOMEM;
	return v;
}

static int get_names(struct lobby_msg_mem *mm, struct json_object *f, struct lobby_msg_names *out)
{
	size_t len, n = 0;
	int err;
	const char **v = room(mm, f, json_type_array, sizeof(*v), &len, &out->null, &err);

	for (size_t i = 0; err == 0 && i < len; i++) {
		struct json_object *e = json_object_array_get_idx(f, i);

		if (json_object_is_type(e, json_type_string))
			v[n++] = json_object_get_string(e);
	}
	out->n = n;
	out->v = v;
	return err;
}

enum dict_want { DICT_STR = 1U << 0, DICT_INT = 1U << 1 };

static int get_dict(struct lobby_msg_mem *mm, struct json_object *f, unsigned want,
		    struct lobby_msg_dict *out)
{
	size_t len, n = 0;
	int err;
	struct lobby_msg_entry *v =
		room(mm, f, json_type_object, sizeof(*v), &len, &out->null, &err);

	if (err == 0 && len > 0) {
		json_object_object_foreach(f, key, val)
		{
			if (n == len)
				break;
			if ((want & DICT_STR) && json_object_is_type(val, json_type_string)) {
				v[n].key = key;
				v[n++].str = json_object_get_string(val);
			} else if ((want & DICT_INT) && json_object_is_type(val, json_type_int)) {
				v[n].key = key;
				v[n++].num = json_object_get_int64(val);
			}
		}
	}
	out->n = n;
	out->v = v;
	return err;
}

static int get_links(struct lobby_msg_mem *mm, struct json_object *f, struct lobby_msg_links *out)
{
	size_t len, n = 0;
	int err;
	struct lobby_msg_link *v =
		room(mm, f, json_type_object, sizeof(*v), &len, &out->null, &err);

	if (err == 0 && len > 0) {
		json_object_object_foreach(f, key, val)
		{
			if (n == len || err < 0)
				break;
			if (!json_object_is_type(val, json_type_array))
				continue;
			v[n].name = key;
			err = get_names(mm, val, &v[n++].direct);
		}
	}
	out->n = n;
	out->v = v;
	return err;
}

static void get_num(struct json_object *o, const char *key, struct lobby_msg_num *out)
{
	struct json_object *f = field(o, key);

	memset(out, 0, sizeof(*out));
	if (json_object_is_type(f, json_type_int)) {
		out->present = true;
		out->i = json_object_get_int64(f);
	} else if (json_object_is_type(f, json_type_double)) {
		out->present = true;
		out->is_float = true;
		out->d = json_object_get_double(f);
	}
}

/* Any JSON value, written back as Python's json.dumps writes it. */
static void put_value(struct pyjson *pj, struct json_object *v)
{
	switch (json_object_get_type(v)) {
	case json_type_null:
		pyjson_null(pj);
		break;
	case json_type_boolean:
		pyjson_bool(pj, json_object_get_boolean(v));
		break;
	case json_type_int:
		pyjson_int(pj, json_object_get_int64(v));
		break;
	case json_type_double:
		pyjson_float(pj, json_object_get_double(v));
		break;
	case json_type_string:
		pyjson_str(pj, json_object_get_string(v), (size_t)json_object_get_string_len(v));
		break;
	case json_type_array:
		pyjson_arr_begin(pj);
		for (size_t i = 0; i < json_object_array_length(v); i++)
			put_value(pj, json_object_array_get_idx(v, i));
		pyjson_arr_end(pj);
		break;
	case json_type_object:
		pyjson_obj_begin(pj);
		json_object_object_foreach(v, k, val)
		{
			pyjson_key(pj, k);
			put_value(pj, val);
		}
		pyjson_obj_end(pj);
		break;
	}
}

/* A value kept as text: NULL for null or absent. */
static int get_raw(struct lobby_msg_mem *mm, struct json_object *o, const char *key,
		   lobby_msg_raw *out);

/* A welcome's or a roster's mods: netpunch reads an absent key as [] (and
 * null as null). */
static int get_mods(struct lobby_msg_mem *mm, struct json_object *o, lobby_msg_raw *out)
{
	struct json_object *f;

	if (!json_object_object_get_ex(o, "mods", &f)) {
		*out = "[]";
		return 0;
	}
	return get_raw(mm, o, "mods", out);
}

static int get_raw(struct lobby_msg_mem *mm, struct json_object *o, const char *key,
		   lobby_msg_raw *out)
{
	struct json_object *f = field(o, key);
	struct strbuf b;
	struct pyjson pj;
	char *copy;

	*out = NULL;
	if (f == NULL)
		return 0;
	strbuf_init(&b, LOBBY_MSG_MAX);
	pyjson_init(&pj, &b);
	put_value(&pj, f);
	if (b.bad || pj.bad || b.p == NULL) {
		/* Over the cap or nested past pyjson's depth: not a message of
		 * ours (a NULL buffer with neither flag is a failed malloc). */
		int e = b.bad || pj.bad ? -EBADMSG : -ENOMEM;

		strbuf_release(&b);
		return e;
	}
	copy = mem_alloc(mm, b.len + 1, 1);
	if (copy == NULL) {
		strbuf_release(&b);
		return -ENOMEM;
	}
	memcpy(copy, b.p, b.len + 1);
	strbuf_release(&b);
	*out = copy;
	return 0;
}

/* ---- decoding: the messages ---- */

static int decode_roster(struct lobby_msg_mem *mm, struct json_object *o,
			 struct lobby_msg_roster *r)
{
	struct json_object *rel = field(o, "relay");
	int e;

	r->version = jsonp_str(o, "version");
	r->transport_lobby = jsonp_str(o, "transport_lobby");
	r->recovery = int_or(o, "recovery", 0);
	r->host = jsonp_str(o, "host");
	r->lobby = jsonp_str(o, "lobby");
	r->has_relay = json_object_is_type(rel, json_type_boolean);
	r->relay = jsonp_bool(o, "relay", false);
	r->mods_unknown = jsonp_bool(o, "mods_unknown", false);
	get_num(o, "stored_age", &r->stored_age);
	get_num(o, "stored_max", &r->stored_max);
	r->started = jsonp_bool(o, "started", false);
	r->start_save = jsonp_bool(o, "start_save", false);
	r->mode = jsonp_str(o, "mode");
	if ((e = get_names(mm, field(o, "players"), &r->players)) < 0 ||
	    (e = get_mods(mm, o, &r->mods)) < 0 ||
	    (e = get_dict(mm, field(o, "letters"), DICT_STR, &r->letters)) < 0 ||
	    (e = get_dict(mm, field(o, "profiles"), DICT_STR, &r->profiles)) < 0 ||
	    (e = get_links(mm, field(o, "links"), &r->links)) < 0 ||
	    (e = get_dict(mm, field(o, "companies"), DICT_INT, &r->companies)) < 0 ||
	    (e = get_dict(mm, field(o, "stages"), DICT_STR, &r->stages)) < 0)
		return e;
	return 0;
}

static int decode_fbegin(struct lobby_msg_mem *mm, struct json_object *o,
			 struct lobby_msg_fbegin *f)
{
	struct json_object *files = field(o, "files"), *batch = field(o, "batch");
	struct json_object *tcp = field(o, "tcp"), *rally = field(o, "rally");
	struct lobby_msg_file *v;
	size_t n;
	int e;

	if (get_sid(o, &f->sid) < 0)
		return -EBADMSG;
	f->total_bytes = int_or(o, "total_bytes", -1);
	f->chunk = int_or(o, "chunk", -1);
	f->total_chunks = int_or(o, "total_chunks", -1);
	f->sha256 = jsonp_str(o, "sha256");
	f->kind = jsonp_str(o, "kind");
	f->mods_unknown = jsonp_bool(o, "mods_unknown", false);
	if ((e = get_raw(mm, o, "mods", &f->mods)) < 0)
		return e;
	/* Every proposed file counts (the receiver refuses the whole
	 * transfer for one bad name), so none may be dropped here. */
	if (json_object_is_type(files, json_type_array)) {
		n = json_object_array_length(files);
		if (n > LOBBY_MSG_MAX_FILES)
			return -EBADMSG;
		v = mem_alloc(mm, n, sizeof(*v));
		if (n > 0 && v == NULL)
			return -ENOMEM;
		for (size_t i = 0; i < n; i++) {
			struct json_object *e1 = json_object_array_get_idx(files, i);

			v[i].name = json_object_is_type(e1, json_type_object)
					    ? jsonp_str(e1, "name")
					    : NULL;
			v[i].size = json_object_is_type(e1, json_type_object)
					    ? int_or(e1, "size", -1)
					    : -1;
			v[i].sha256 = json_object_is_type(e1, json_type_object)
					      ? jsonp_str(e1, "sha256")
					      : NULL;
		}
		f->nfiles = n;
		f->files = v;
	}
	if (json_object_is_type(batch, json_type_array) && json_object_array_length(batch) == 2 &&
	    json_object_is_type(json_object_array_get_idx(batch, 0), json_type_int) &&
	    json_object_is_type(json_object_array_get_idx(batch, 1), json_type_int)) {
		f->has_batch = true;
		f->batch_k = json_object_get_int64(json_object_array_get_idx(batch, 0));
		f->batch_n = json_object_get_int64(json_object_array_get_idx(batch, 1));
	}
	if (json_object_is_type(tcp, json_type_object)) {
		f->has_tcp = true;
		f->tcp_port = int_or(tcp, "port", 0);
		f->tcp_token = jsonp_str(tcp, "token");
	}
	if (json_object_is_type(rally, json_type_object)) {
		f->has_rally = true;
		f->rally_v = int_or(rally, "v", 0);
		f->rally_window = int_or(rally, "window", 0);
		f->rally_fb_ms = int_or(rally, "fb_ms", 0);
	}
	return 0;
}

/* fbegin_ack's rally: {v, have: [ints]}, an even count of them kept. */
static int decode_fbegin_ack(struct lobby_msg_mem *mm, struct json_object *o,
			     struct lobby_msg_fbegin_ack *a)
{
	struct json_object *rally = field(o, "rally"), *have;
	long long *v;
	size_t len, n = 0;

	if (get_sid(o, &a->sid) < 0)
		return -EBADMSG;
	a->ask = jsonp_bool(o, "ask", false);
	a->has_tcp_port = jsonp_int(o, "tcp_port", &a->tcp_port);
	if (json_object_is_type(rally, json_type_object)) {
		a->has_rally = true;
		a->rally_v = int_or(rally, "v", 0);
		have = field(rally, "have");
		if (json_object_is_type(have, json_type_array)) {
			len = json_object_array_length(have);
			if (len > 2 * LOBBY_MSG_MAX_HAVE)
				len = 2 * LOBBY_MSG_MAX_HAVE;
			v = mem_alloc(mm, len, sizeof(*v));
			if (len > 0 && v == NULL)
				return -ENOMEM;
			for (size_t i = 0; i < len; i++) {
				struct json_object *e = json_object_array_get_idx(have, i);

				if (!json_object_is_type(e, json_type_int))
					break;
				v[n++] = json_object_get_int64(e);
			}
			a->nhave = n & ~(size_t)1;
			a->have = v;
		}
	}
	return get_names(mm, field(o, "need"), &a->need);
}

static int decode_fack(struct lobby_msg_mem *mm, struct json_object *o, struct lobby_msg_fack *f)
{
	struct json_object *nack = field(o, "nack");
	long long *v;
	size_t len, n = 0;

	if (get_sid(o, &f->sid) < 0)
		return -EBADMSG;
	f->base = int_or(o, "base", -1);
	f->verifying = jsonp_bool(o, "verifying", false);
	f->has_progress = jsonp_int(o, "progress", &f->progress);
	if (json_object_is_type(nack, json_type_array)) {
		len = json_object_array_length(nack);
		if (len > LOBBY_MSG_MAX_NACK)
			len = LOBBY_MSG_MAX_NACK;
		v = mem_alloc(mm, len, sizeof(*v));
		if (len > 0 && v == NULL)
			return -ENOMEM;
		for (size_t i = 0; i < len; i++) {
			struct json_object *e = json_object_array_get_idx(nack, i);

			if (json_object_is_type(e, json_type_int))
				v[n++] = json_object_get_int64(e);
		}
		f->nnack = n;
		f->nack = v;
	}
	return 0;
}

static enum lobby_msg_type type_of(const char *t)
{
	for (unsigned i = 1; i < LOBBY_MSG_NTYPES; i++) {
		if (strcmp(t, type_names[i]) == 0)
			return (enum lobby_msg_type)i;
	}
	return LOBBY_MSG_UNKNOWN;
}

static int decode_fields(struct lobby_msg *m, struct json_object *o)
{
	struct lobby_msg_mem *mm = m->mem;

	switch (m->type) {
	case LOBBY_MSG_UNKNOWN:
	case LOBBY_MSG_PING:
	case LOBBY_MSG_LEAVE:
	case LOBBY_MSG_BYE:
		return 0;
	case LOBBY_MSG_JOIN:
		m->join.version = jsonp_str(o, "version");
		m->join.name = jsonp_str(o, "name");
		m->join.mesh = jsonp_bool(o, "mesh", false);
		m->join.recovery = int_or(o, "recovery", 0);
		m->join.has_batches = jsonp_int(o, "batches", &m->join.batches);
		m->join.profile = jsonp_str(o, "profile");
		m->join.rally = int_or(o, "rally", 0);
		return 0;
	case LOBBY_MSG_CHAT:
		m->chat.from = jsonp_str(o, "from");
		m->chat.text = jsonp_str(o, "text");
		m->chat.has_ts = jsonp_int(o, "ts", &m->chat.ts);
		m->chat.has_cid = jsonp_int(o, "cid", &m->chat.cid);
		return 0;
	case LOBBY_MSG_LINKS:
		return get_names(mm, field(o, "direct"), &m->links);
	case LOBBY_MSG_STAGE:
		m->stage = jsonp_str(o, "text");
		return 0;
	case LOBBY_MSG_COMPANY:
		m->company.player = jsonp_str(o, "player");
		m->company.id = int_or(o, "id", 0);
		return 0;
	case LOBBY_MSG_MODE:
		m->mode = jsonp_str(o, "mode");
		return 0;
	case LOBBY_MSG_LOG:
		return get_names(mm, field(o, "lines"), &m->log);
	case LOBBY_MSG_MESH_HI:
		m->mesh_hi = jsonp_str(o, "name");
		return 0;
	case LOBBY_MSG_WELCOME:
		m->welcome.version = jsonp_str(o, "version");
		m->welcome.transport_lobby = jsonp_str(o, "transport_lobby");
		m->welcome.you = jsonp_str(o, "you");
		m->welcome.host = jsonp_str(o, "host");
		m->welcome.recovery = int_or(o, "recovery", 0);
		m->welcome.lobby = jsonp_str(o, "lobby");
		m->welcome.relay = jsonp_bool(o, "relay", false);
		m->welcome.mods_unknown = jsonp_bool(o, "mods_unknown", false);
		return get_mods(mm, o, &m->welcome.mods);
	case LOBBY_MSG_ROSTER:
		return decode_roster(mm, o, &m->roster);
	case LOBBY_MSG_START:
		m->start.save = jsonp_bool(o, "save", false);
		m->start.has_switch = jsonp_bool(o, "switch", false);
		return 0;
	case LOBBY_MSG_STATUS:
		m->status.state = jsonp_str(o, "state");
		m->status.detail = jsonp_str(o, "detail");
		return 0;
	case LOBBY_MSG_REJECT:
		m->reject = jsonp_str(o, "reason");
		return 0;
	case LOBBY_MSG_FBEGIN:
		return decode_fbegin(mm, o, &m->fbegin);
	case LOBBY_MSG_FBEGIN_ACK:
		return decode_fbegin_ack(mm, o, &m->fbegin_ack);
	case LOBBY_MSG_FACK:
		return decode_fack(mm, o, &m->fack);
	case LOBBY_MSG_FDONE:
		if (get_sid(o, &m->fdone.sid) < 0)
			return -EBADMSG;
		m->fdone.ok = jsonp_bool(o, "ok", false);
		m->fdone.final = jsonp_bool(o, "final", false);
		return 0;
	case LOBBY_MSG_MODS_MANIFEST:
		m->mods_manifest.mods_unknown = jsonp_bool(o, "mods_unknown", false);
		return get_raw(mm, o, "mods", &m->mods_manifest.mods);
	case LOBBY_MSG_XSTAT:
		if (get_sid(o, &m->xstat.sid) < 0)
			return -EBADMSG;
		m->xstat.got = int_or(o, "got", -1);
		m->xstat.hs = int_or(o, "hs", -1);
		m->xstat.age_us = int_or(o, "age_us", -1);
		m->xstat.lost = int_or(o, "lost", -1);
		m->xstat.t_us = int_or(o, "t_us", -1);
		return 0;
	case LOBBY_MSG_NTYPES:
		break;
	}
	return -EBADMSG;
}

void lobby_msg_release(struct lobby_msg *m)
{
	struct lobby_msg_mem *mm = m->mem;

	if (mm == NULL)
		return;
	while (mm->blocks != NULL) {
		struct block *b = mm->blocks;

		mm->blocks = b->next;
		free(b);
	}
	json_object_put(mm->root);
	free(mm);
	m->mem = NULL;
}

int lobby_msg_decode(const uint8_t *buf, size_t len, struct lobby_msg *m)
{
	struct json_object *o, *t;
	char err[64];
	int e;

	memset(m, 0, sizeof(*m));
	if (len == 0 || len > LOBBY_MSG_MAX || buf[0] != '{')
		return -EBADMSG;
	if (jsonp_parse((const char *)buf, len, LOBBY_MSG_DEPTH, &o, err, sizeof(err)) < 0)
		return -EBADMSG;
	if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, "t", &t) ||
	    !json_object_is_type(t, json_type_string)) {
		json_object_put(o);
		return -EBADMSG;
	}
	m->mem = calloc(1, sizeof(*m->mem));
	if (m->mem == NULL) {
		json_object_put(o);
		return -ENOMEM;
	}
	m->mem->root = o;
	m->t = json_object_get_string(t);
	m->type = type_of(m->t);
	e = decode_fields(m, o);
	if (e < 0) {
		lobby_msg_release(m);
		memset(m, 0, sizeof(*m));
		return e;
	}
	return 0;
}

/* ---- encoding ---- */

void lobby_msg_put_str(struct pyjson *j, const char *s)
{
	if (s == NULL)
		pyjson_null(j);
	else
		pyjson_cstr(j, s);
}

void lobby_msg_put_names(struct pyjson *j, const struct lobby_msg_names *n)
{
	if (n->null) {
		pyjson_null(j);
		return;
	}
	pyjson_arr_begin(j);
	for (size_t i = 0; i < n->n; i++)
		pyjson_cstr(j, n->v[i]);
	pyjson_arr_end(j);
}

void lobby_msg_put_dict(struct pyjson *j, const struct lobby_msg_dict *d)
{
	if (d->null) {
		pyjson_null(j);
		return;
	}
	pyjson_obj_begin(j);
	for (size_t i = 0; i < d->n; i++) {
		pyjson_key(j, d->v[i].key);
		if (d->v[i].str != NULL)
			pyjson_cstr(j, d->v[i].str);
		else
			pyjson_int(j, d->v[i].num);
	}
	pyjson_obj_end(j);
}

void lobby_msg_put_num(struct pyjson *j, const struct lobby_msg_num *n)
{
	if (!n->present)
		pyjson_null(j);
	else if (n->is_float)
		pyjson_float(j, n->d);
	else
		pyjson_int(j, n->i);
}

static void put_links(struct pyjson *j, const struct lobby_msg_links *l)
{
	if (l->null) {
		pyjson_null(j);
		return;
	}
	pyjson_obj_begin(j);
	for (size_t i = 0; i < l->n; i++) {
		pyjson_key(j, l->v[i].name);
		lobby_msg_put_names(j, &l->v[i].direct);
	}
	pyjson_obj_end(j);
}

static void put_raw(struct pyjson *j, lobby_msg_raw r)
{
	if (r == NULL)
		pyjson_null(j);
	else
		pyjson_raw(j, r, strlen(r));
}

static void key_str(struct pyjson *j, const char *k, const char *v)
{
	pyjson_key(j, k);
	lobby_msg_put_str(j, v);
}

static void key_int(struct pyjson *j, const char *k, long long v)
{
	pyjson_key(j, k);
	pyjson_int(j, v);
}

static void key_bool(struct pyjson *j, const char *k, bool v)
{
	pyjson_key(j, k);
	pyjson_bool(j, v);
}

static void encode_roster(struct pyjson *j, const struct lobby_msg_roster *r)
{
	key_str(j, "version", r->version);
	key_str(j, "transport_lobby", r->transport_lobby);
	pyjson_key(j, "players");
	lobby_msg_put_names(j, &r->players);
	key_int(j, "recovery", r->recovery);
	key_str(j, "host", r->host);
	key_str(j, "lobby", r->lobby);
	key_bool(j, "relay", r->relay);
	pyjson_key(j, "mods");
	put_raw(j, r->mods);
	key_bool(j, "mods_unknown", r->mods_unknown);
	pyjson_key(j, "stored_age");
	lobby_msg_put_num(j, &r->stored_age);
	pyjson_key(j, "stored_max");
	lobby_msg_put_num(j, &r->stored_max);
	pyjson_key(j, "letters");
	lobby_msg_put_dict(j, &r->letters);
	key_bool(j, "started", r->started);
	key_bool(j, "start_save", r->start_save);
	pyjson_key(j, "profiles");
	lobby_msg_put_dict(j, &r->profiles);
	pyjson_key(j, "links");
	put_links(j, &r->links);
	pyjson_key(j, "companies");
	lobby_msg_put_dict(j, &r->companies);
	pyjson_key(j, "stages");
	lobby_msg_put_dict(j, &r->stages);
	key_str(j, "mode", r->mode);
}

static void encode_fbegin(struct pyjson *j, const struct lobby_msg_fbegin *f)
{
	key_int(j, "sid", f->sid);
	key_int(j, "total_bytes", f->total_bytes);
	key_int(j, "chunk", f->chunk);
	key_int(j, "total_chunks", f->total_chunks);
	pyjson_key(j, "files");
	pyjson_arr_begin(j);
	for (size_t i = 0; i < f->nfiles; i++) {
		pyjson_obj_begin(j);
		key_str(j, "name", f->files[i].name);
		key_int(j, "size", f->files[i].size);
		key_str(j, "sha256", f->files[i].sha256);
		pyjson_obj_end(j);
	}
	pyjson_arr_end(j);
	key_str(j, "sha256", f->sha256);
	key_str(j, "kind", f->kind);
	pyjson_key(j, "mods");
	put_raw(j, f->mods);
	key_bool(j, "mods_unknown", f->mods_unknown);
	if (f->has_batch) {
		pyjson_key(j, "batch");
		pyjson_arr_begin(j);
		pyjson_int(j, f->batch_k);
		pyjson_int(j, f->batch_n);
		pyjson_arr_end(j);
	}
	if (f->has_tcp) {
		pyjson_key(j, "tcp");
		pyjson_obj_begin(j);
		if (f->tcp_port != 0)
			key_int(j, "port", f->tcp_port);
		key_str(j, "token", f->tcp_token);
		pyjson_obj_end(j);
	}
	if (f->has_rally) {
		pyjson_key(j, "rally");
		pyjson_obj_begin(j);
		key_int(j, "v", f->rally_v);
		key_int(j, "window", f->rally_window);
		key_int(j, "fb_ms", f->rally_fb_ms);
		pyjson_obj_end(j);
	}
}

static void encode_fields(struct pyjson *j, const struct lobby_msg *m)
{
	switch (m->type) {
	case LOBBY_MSG_UNKNOWN:
	case LOBBY_MSG_PING:
	case LOBBY_MSG_LEAVE:
	case LOBBY_MSG_BYE:
	case LOBBY_MSG_NTYPES:
		return;
	case LOBBY_MSG_JOIN:
		key_str(j, "version", m->join.version);
		key_str(j, "name", m->join.name);
		key_bool(j, "mesh", m->join.mesh);
		key_int(j, "recovery", m->join.recovery);
		if (m->join.has_batches)
			key_int(j, "batches", m->join.batches);
		if (m->join.profile != NULL)
			key_str(j, "profile", m->join.profile);
		if (m->join.rally != 0)
			key_int(j, "rally", m->join.rally);
		return;
	case LOBBY_MSG_CHAT:
		if (m->chat.from != NULL)
			key_str(j, "from", m->chat.from);
		key_str(j, "text", m->chat.text);
		if (m->chat.has_ts)
			key_int(j, "ts", m->chat.ts);
		if (m->chat.has_cid)
			key_int(j, "cid", m->chat.cid);
		return;
	case LOBBY_MSG_LINKS:
		pyjson_key(j, "direct");
		lobby_msg_put_names(j, &m->links);
		return;
	case LOBBY_MSG_STAGE:
		key_str(j, "text", m->stage);
		return;
	case LOBBY_MSG_COMPANY:
		key_str(j, "player", m->company.player);
		key_int(j, "id", m->company.id);
		return;
	case LOBBY_MSG_MODE:
		key_str(j, "mode", m->mode);
		return;
	case LOBBY_MSG_LOG:
		pyjson_key(j, "lines");
		lobby_msg_put_names(j, &m->log);
		return;
	case LOBBY_MSG_MESH_HI:
		key_str(j, "name", m->mesh_hi);
		return;
	case LOBBY_MSG_WELCOME:
		key_str(j, "version", m->welcome.version);
		key_str(j, "transport_lobby", m->welcome.transport_lobby);
		key_str(j, "you", m->welcome.you);
		key_str(j, "host", m->welcome.host);
		key_int(j, "recovery", m->welcome.recovery);
		key_str(j, "lobby", m->welcome.lobby);
		key_bool(j, "relay", m->welcome.relay);
		pyjson_key(j, "mods");
		put_raw(j, m->welcome.mods);
		key_bool(j, "mods_unknown", m->welcome.mods_unknown);
		return;
	case LOBBY_MSG_ROSTER:
		encode_roster(j, &m->roster);
		return;
	case LOBBY_MSG_START:
		key_bool(j, "save", m->start.save);
		if (m->start.has_switch)
			key_bool(j, "switch", true);
		return;
	case LOBBY_MSG_STATUS:
		key_str(j, "state", m->status.state);
		key_str(j, "detail", m->status.detail);
		return;
	case LOBBY_MSG_REJECT:
		key_str(j, "reason", m->reject);
		return;
	case LOBBY_MSG_FBEGIN:
		encode_fbegin(j, &m->fbegin);
		return;
	case LOBBY_MSG_FBEGIN_ACK:
		key_int(j, "sid", m->fbegin_ack.sid);
		pyjson_key(j, "need");
		lobby_msg_put_names(j, &m->fbegin_ack.need);
		key_bool(j, "ask", m->fbegin_ack.ask);
		if (m->fbegin_ack.has_tcp_port)
			key_int(j, "tcp_port", m->fbegin_ack.tcp_port);
		if (m->fbegin_ack.has_rally) {
			pyjson_key(j, "rally");
			pyjson_obj_begin(j);
			key_int(j, "v", m->fbegin_ack.rally_v);
			pyjson_key(j, "have");
			pyjson_arr_begin(j);
			for (size_t i = 0; i < m->fbegin_ack.nhave; i++)
				pyjson_int(j, m->fbegin_ack.have[i]);
			pyjson_arr_end(j);
			pyjson_obj_end(j);
		}
		return;
	case LOBBY_MSG_FACK:
		key_int(j, "sid", m->fack.sid);
		key_int(j, "base", m->fack.base);
		pyjson_key(j, "nack");
		pyjson_arr_begin(j);
		for (size_t i = 0; i < m->fack.nnack; i++)
			pyjson_int(j, m->fack.nack[i]);
		pyjson_arr_end(j);
		key_bool(j, "verifying", m->fack.verifying);
		if (m->fack.has_progress)
			key_int(j, "progress", m->fack.progress);
		return;
	case LOBBY_MSG_FDONE:
		key_int(j, "sid", m->fdone.sid);
		key_bool(j, "ok", m->fdone.ok);
		if (!m->fdone.ok && m->fdone.final)
			key_bool(j, "final", true);
		return;
	case LOBBY_MSG_MODS_MANIFEST:
		pyjson_key(j, "mods");
		put_raw(j, m->mods_manifest.mods);
		key_bool(j, "mods_unknown", m->mods_manifest.mods_unknown);
		return;
	case LOBBY_MSG_XSTAT:
		key_int(j, "sid", m->xstat.sid);
		key_int(j, "got", m->xstat.got);
		key_int(j, "hs", m->xstat.hs);
		key_int(j, "age_us", m->xstat.age_us);
		key_int(j, "lost", m->xstat.lost);
		key_int(j, "t_us", m->xstat.t_us);
		return;
	}
}

int lobby_msg_encode(const struct lobby_msg *m, struct strbuf *out)
{
	struct pyjson j;

	if (m->type == LOBBY_MSG_UNKNOWN || (unsigned)m->type >= LOBBY_MSG_NTYPES)
		return -EINVAL;
	pyjson_init(&j, out);
	pyjson_obj_begin(&j);
	key_str(&j, "t", type_names[m->type]);
	encode_fields(&j, m);
	pyjson_obj_end(&j);
	return out->bad || j.bad ? -EMSGSIZE : 0;
}

/* ---- text ---- */

void lobby_msg_clean(const char *in, size_t max_chars, char *out, size_t size)
{
	size_t o = 0, chars = 0;

	for (size_t i = 0; in[i] != '\0' && chars < max_chars;) {
		unsigned char c = (unsigned char)in[i];
		size_t k = 1;

		while (in[i + k] != '\0' && ((unsigned char)in[i + k] & 0xc0) == 0x80)
			k++;
		if (o + k >= size)
			break;
		if (!(k == 1 && (c < 0x20 || c == 0x7f))) {
			memcpy(out + o, in + i, k);
			o += k;
			chars++;
		}
		i += k;
	}
	out[o] = '\0';
}
