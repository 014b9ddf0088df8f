/*
 * The game side's messages: lobby_in.jsonl commands decoded, lobby_out.jsonl
 * events encoded (netpunch-wire.md §15). Pure.
 */
#include "lobby_ipcmsg.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "jsonp.h"
#include "pyjson.h"
#include "strbuf.h"

static const char *const cmd_names[LOBBY_CMD_NTYPES] = {
	[LOBBY_CMD_UNKNOWN] = "",
	[LOBBY_CMD_QUIT] = "quit",
	[LOBBY_CMD_CHAT] = "chat",
	[LOBBY_CMD_NAME] = "name",
	[LOBBY_CMD_STAGE] = "stage",
	[LOBBY_CMD_COMPANY] = "company",
	[LOBBY_CMD_MODE] = "mode",
	[LOBBY_CMD_PUBLISH] = "publish",
	[LOBBY_CMD_START] = "start",
	[LOBBY_CMD_NOTE] = "note",
	[LOBBY_CMD_NETSIM] = "netsim",
	[LOBBY_CMD_CROSSPLAY] = "crossplay",
	[LOBBY_CMD_ADVERTISE_MODS] = "advertise_mods",
};

static long long int_or_0(struct json_object *o, const char *key)
{
	long long v;

	return jsonp_int(o, key, &v) ? v : 0;
}

void lobby_cmd_release(struct lobby_cmd *c)
{
	json_object_put(c->root);
	c->root = NULL;
}

int lobby_cmd_decode(const char *line, size_t len, struct lobby_cmd *c, char *err, size_t errsize)
{
	struct json_object *o, *f;

	memset(c, 0, sizeof(*c));
	while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' '))
		len--;
	if (len == 0) {
		snprintf(err, errsize, "empty line");
		return -ENODATA;
	}
	if (jsonp_parse(line, len, LOBBY_CMD_DEPTH, &o, err, errsize) < 0)
		return -EBADMSG;
	if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, "cmd", &f) ||
	    !json_object_is_type(f, json_type_string)) {
		snprintf(err, errsize, "no cmd");
		json_object_put(o);
		return -EBADMSG;
	}
	c->root = o;
	c->cmd = json_object_get_string(f);
	for (unsigned i = 1; i < LOBBY_CMD_NTYPES; i++) {
		if (strcmp(c->cmd, cmd_names[i]) == 0)
			c->type = (enum lobby_cmd_type)i;
	}
	switch (c->type) {
	case LOBBY_CMD_CHAT:
	case LOBBY_CMD_STAGE:
	case LOBBY_CMD_NOTE:
		c->text = jsonp_str(o, "text");
		break;
	case LOBBY_CMD_NAME:
		c->name = jsonp_str(o, "name");
		break;
	case LOBBY_CMD_COMPANY:
		c->company.player = jsonp_str(o, "player");
		c->company.id = int_or_0(o, "id");
		break;
	case LOBBY_CMD_MODE:
		c->mode = jsonp_str(o, "mode");
		break;
	case LOBBY_CMD_PUBLISH:
	case LOBBY_CMD_CROSSPLAY:
		c->on = jsonp_bool(o, "on", false);
		break;
	case LOBBY_CMD_ADVERTISE_MODS:
		c->save = jsonp_str(o, "save");
		break;
	case LOBBY_CMD_START:
		c->start.save = jsonp_str(o, "save");
		c->start.has_switch = jsonp_bool(o, "switch", false);
		break;
	case LOBBY_CMD_UNKNOWN:
	case LOBBY_CMD_QUIT:
	case LOBBY_CMD_NETSIM:
	case LOBBY_CMD_NTYPES:
		break;
	}
	return 0;
}

/* ---- events ---- */

static void key_str(struct pyjson *j, const char *k, const char *v)
{
	pyjson_key(j, k);
	lobby_msg_put_str(j, v);
}

static void key_bool(struct pyjson *j, const char *k, bool v)
{
	pyjson_key(j, k);
	pyjson_bool(j, v);
}

static void put_relay(struct pyjson *j, const struct lobby_event_roster *r)
{
	pyjson_key(j, "relay");
	if (r->has_relay)
		pyjson_bool(j, r->relay);
	else
		pyjson_null(j);
}

/* The host's: players, you, host, lobby, relay, companies, stages, mode,
 * join_freeze. */
static void roster_host(struct pyjson *j, const struct lobby_event_roster *r)
{
	pyjson_key(j, "players");
	lobby_msg_put_names(j, &r->players);
	key_str(j, "you", r->you);
	key_str(j, "host", r->host);
	key_str(j, "lobby", r->lobby);
	put_relay(j, r);
	pyjson_key(j, "companies");
	lobby_msg_put_dict(j, &r->companies);
	pyjson_key(j, "stages");
	lobby_msg_put_dict(j, &r->stages);
	key_str(j, "mode", r->mode);
	key_bool(j, "join_freeze", r->join_freeze);
}

/* The joiner's: players, you, host, lobby, companies, stages, relay,
 * letters, stored_age, stored_max, mode. */
static void roster_join(struct pyjson *j, const struct lobby_event_roster *r)
{
	pyjson_key(j, "players");
	lobby_msg_put_names(j, &r->players);
	key_str(j, "you", r->you);
	key_str(j, "host", r->host);
	key_str(j, "lobby", r->lobby);
	pyjson_key(j, "companies");
	lobby_msg_put_dict(j, &r->companies);
	pyjson_key(j, "stages");
	lobby_msg_put_dict(j, &r->stages);
	put_relay(j, r);
	pyjson_key(j, "letters");
	lobby_msg_put_dict(j, &r->letters);
	pyjson_key(j, "stored_age");
	lobby_msg_put_num(j, &r->stored_age);
	pyjson_key(j, "stored_max");
	lobby_msg_put_num(j, &r->stored_max);
	key_str(j, "mode", r->mode);
}

/* Any JSON value as json.dumps writes it (the state holds strings,
 * numbers, booleans, lists of names and {name: id} maps). */
void lobby_json_put(struct pyjson *j, struct json_object *v)
{
	size_t n;

	switch (json_object_get_type(v)) {
	case json_type_null:
		pyjson_null(j);
		break;
	case json_type_boolean:
		pyjson_bool(j, json_object_get_boolean(v));
		break;
	case json_type_int:
		pyjson_int(j, (long long)json_object_get_int64(v));
		break;
	case json_type_double:
		pyjson_float(j, json_object_get_double(v));
		break;
	case json_type_string:
		pyjson_str(j, json_object_get_string(v), (size_t)json_object_get_string_len(v));
		break;
	case json_type_array:
		pyjson_arr_begin(j);
		n = json_object_array_length(v);
		for (size_t k = 0; k < n; k++)
			lobby_json_put(j, json_object_array_get_idx(v, k));
		pyjson_arr_end(j);
		break;
	case json_type_object:
		pyjson_obj_begin(j);
		json_object_object_foreach(v, key, val)
		{
			pyjson_key(j, key);
			lobby_json_put(j, val);
		}
		pyjson_obj_end(j);
		break;
	}
}

int lobby_event_encode(const struct lobby_event *e, struct strbuf *out)
{
	struct pyjson j;

	pyjson_init(&j, out);
	pyjson_obj_begin(&j);
	switch (e->type) {
	case LOBBY_EV_CODE:
		key_str(&j, "type", "code");
		key_str(&j, "code", e->code.code);
		key_str(&j, "steam", e->code.steam != NULL ? e->code.steam : "");
		key_bool(&j, "crossplay", e->code.crossplay);
		key_str(&j, "cross_code", e->code.cross_code != NULL ? e->code.cross_code : "");
		break;
	case LOBBY_EV_TRANSPORT_LOBBY:
		key_str(&j, "type", "transport_lobby");
		key_str(&j, "epoch", e->epoch);
		break;
	case LOBBY_EV_STATUS:
		key_str(&j, "type", "status");
		key_str(&j, "state", e->status.state);
		key_str(&j, "detail", e->status.detail);
		break;
	case LOBBY_EV_ROSTER_HOST:
		key_str(&j, "type", "roster");
		roster_host(&j, &e->roster);
		break;
	case LOBBY_EV_ROSTER_JOIN:
		key_str(&j, "type", "roster");
		roster_join(&j, &e->roster);
		break;
	case LOBBY_EV_CHAT:
		key_str(&j, "type", "chat");
		key_str(&j, "from", e->chat.from);
		key_str(&j, "text", e->chat.text);
		if (e->chat.has_ts) {
			pyjson_key(&j, "ts");
			pyjson_int(&j, e->chat.ts);
		}
		break;
	case LOBBY_EV_START:
		key_str(&j, "type", "start");
		key_bool(&j, "save", e->start.save);
		if (e->start.has_switch)
			key_bool(&j, "switch", true);
		break;
	case LOBBY_EV_TRANSFER:
		key_str(&j, "type", "transfer");
		key_str(&j, "role", e->transfer.send ? "send" : "recv");
		if (e->transfer.send)
			key_str(&j, "peer", e->transfer.peer);
		if (e->transfer.pct >= 0) {
			pyjson_key(&j, "pct");
			pyjson_int(&j, e->transfer.pct);
			if (e->transfer.has_bytes) {
				pyjson_key(&j, "bytes");
				pyjson_int(&j, e->transfer.bytes);
				pyjson_key(&j, "total");
				pyjson_int(&j, e->transfer.total);
				pyjson_key(&j, "rate");
				pyjson_int(&j, e->transfer.rate);
				pyjson_key(&j, "eta");
				pyjson_int(&j, e->transfer.eta);
			}
		} else {
			key_str(&j, "state", e->transfer.state);
			if (e->transfer.detail != NULL)
				key_str(&j, "detail", e->transfer.detail);
		}
		break;
	case LOBBY_EV_SAVE_READY:
		key_str(&j, "type", "save_ready");
		key_str(&j, "name", e->save_ready.name);
		key_str(&j, "dir", e->save_ready.dir);
		pyjson_key(&j, "files");
		lobby_msg_put_names(&j, &e->save_ready.files);
		break;
	case LOBBY_EV_MODS_MANIFEST:
		key_str(&j, "type", "mods_manifest");
		pyjson_key(&j, "mods");
		if (e->mods_manifest.mods == NULL)
			pyjson_null(&j);
		else
			pyjson_raw(&j, e->mods_manifest.mods, strlen(e->mods_manifest.mods));
		if (e->mods_manifest.has_unknown)
			key_bool(&j, "mods_unknown", e->mods_manifest.unknown);
		break;
	case LOBBY_EV_MODS_CLEAR:
		key_str(&j, "type", "mods_clear");
		break;
	case LOBBY_EV_MODS_CANCELLED:
		key_str(&j, "type", "mods_cancelled");
		key_str(&j, "text", e->mods_cancelled);
		break;
	case LOBBY_EV_TRAVERSAL:
		key_str(&j, "type", "traversal");
		json_object_object_foreach(e->traversal, key, val)
		{
			pyjson_key(&j, key);
			lobby_json_put(&j, val);
		}
		break;
	}
	pyjson_obj_end(&j);
	return out->bad || j.bad ? -EMSGSIZE : 0;
}
