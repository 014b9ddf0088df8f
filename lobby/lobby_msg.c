/*
 * The lobby's JSON messages. netpunch writes them with Python's json.dumps
 * (", " and ": " separators, ASCII escapes) and the key orders of
 * netpunch-wire.md §7; pyjson writes the same bytes. Receiving, any JSON
 * object is accepted and unknown "t" values are ignored by the callers.
 */
#include <errno.h>
#include <json-c/json.h>
#include <string.h>

#include "jsonp.h"
#include "lobby.h"
#include "pyjson.h"
#include "strbuf.h"

/* A message is at most a fragmented control message (64 fragments' worth
 * is far beyond any roster of 200 players). */
#define MSG_MAX (64 * 1024)

void lobby_msg_begin(struct pyjson *j, struct strbuf *b, const char *t)
{
	strbuf_init(b, MSG_MAX);
	pyjson_init(j, b);
	pyjson_obj_begin(j);
	pyjson_key(j, "t");
	pyjson_cstr(j, t);
}

void lobby_msg_end(struct pyjson *j)
{
	pyjson_obj_end(j);
}

int lobby_msg_send(struct lobby *l, const struct addr *to, struct strbuf *b)
{
	if (b->bad || b->p == NULL)
		return -EMSGSIZE;
	return lobby_net_send_app(l, to, (const uint8_t *)b->p, b->len);
}

struct json_object *lobby_msg_parse(const uint8_t *app, size_t len, const char **t)
{
	struct json_object *o, *f;
	char err[64];

	*t = NULL;
	if (len == 0 || app[0] != '{')
		return NULL;
	if (jsonp_parse((const char *)app, len, 32, &o, err, sizeof(err)) < 0)
		return NULL;
	if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, "t", &f) ||
	    !json_object_is_type(f, json_type_string)) {
		json_object_put(o);
		return NULL;
	}
	*t = json_object_get_string(f);
	return o;
}

const char *lobby_msg_str(struct json_object *o, const char *key)
{
	struct json_object *f;

	if (!json_object_object_get_ex(o, key, &f) || !json_object_is_type(f, json_type_string))
		return NULL;
	return json_object_get_string(f);
}

bool lobby_msg_bool(struct json_object *o, const char *key, bool dflt)
{
	struct json_object *f;

	if (!json_object_object_get_ex(o, key, &f) || f == NULL)
		return dflt;
	if (json_object_is_type(f, json_type_boolean))
		return json_object_get_boolean(f);
	if (json_object_is_type(f, json_type_int))
		return json_object_get_int64(f) != 0;
	return dflt;
}

long long lobby_msg_int(struct json_object *o, const char *key, long long dflt)
{
	struct json_object *f;

	if (!json_object_object_get_ex(o, key, &f) || !json_object_is_type(f, json_type_int))
		return dflt;
	return json_object_get_int64(f);
}

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
		/* Names and texts end up in rosters and logs: no controls. */
		if (!(k == 1 && (c < 0x20 || c == 0x7f))) {
			memcpy(out + o, in + i, k);
			o += k;
			chars++;
		}
		i += k;
	}
	out[o] = '\0';
}
