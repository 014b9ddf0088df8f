/*
 * The relay lobby's remembered names (letters, companies) and its secret:
 * codecs and bounded tables, no I/O (lobby_relaystate.h says the rules).
 */
#include "lobby_relaystate.h"

#include <errno.h>
#include <json-c/json.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "htab.h"
#include "jsonp.h"
#include "pyjson.h"
#include "strbuf.h"

/* The key of a name in the table: its BLAKE2b-256 (htab keys are at most
 * 32 bytes; htab hashes them again under its own random key). */
#define KEY_LEN (32)

struct entry {
	char name[LOBBY_RELAY_NAME_SZ];
	int value; /* a letter's index, or a company id */
};

struct lobby_relay_names {
	enum lobby_relay_kind kind;
	struct htab *h;
	bool used[LOBBY_RELAY_LETTERS]; /* letters: taken */
};

int lobby_relay_letter_name(unsigned idx, char out[static LOBBY_RELAY_LETTER_SZ])
{
	if (idx >= LOBBY_RELAY_LETTERS)
		return -ERANGE;
	/* lobby.py _origin_letter: a..z, then aa, ab, ... zz. */
	if (idx < 26) {
		out[0] = (char)('a' + idx);
		out[1] = '\0';
	} else {
		idx -= 26;
		out[0] = (char)('a' + idx / 26);
		out[1] = (char)('a' + idx % 26);
	}
	out[2] = '\0';
	return 0;
}

int lobby_relay_letter_index(const char *s, size_t len)
{
	if (len == 1 && s[0] >= 'a' && s[0] <= 'z')
		return s[0] - 'a';
	if (len == 2 && s[0] >= 'a' && s[0] <= 'z' && s[1] >= 'a' && s[1] <= 'z')
		return 26 + (s[0] - 'a') * 26 + (s[1] - 'a');
	return -1;
}

static void key_of(const char *name, uint8_t key[static KEY_LEN])
{
	crypto_generichash(key, KEY_LEN, (const unsigned char *)name, strlen(name), NULL, 0);
}

static struct entry *find(const struct lobby_relay_names *t, const char *name)
{
	uint8_t key[KEY_LEN];

	key_of(name, key);
	return htab_get(t->h, key);
}

struct lobby_relay_names *lobby_relay_names_new(enum lobby_relay_kind kind)
{
	struct lobby_relay_names *t = calloc(1, sizeof(*t));

	if (t == NULL)
		return NULL;
	t->kind = kind;
	t->h = htab_new(kind == LOBBY_RELAY_KIND_LETTERS ? LOBBY_RELAY_LETTERS : LOBBY_RELAY_CHIPS,
			KEY_LEN, sizeof(struct entry));
	if (t->h == NULL) {
		free(t);
		return NULL;
	}
	return t;
}

void lobby_relay_names_free(struct lobby_relay_names *t)
{
	if (t == NULL)
		return;
	htab_free(t->h);
	free(t);
}

size_t lobby_relay_names_count(const struct lobby_relay_names *t)
{
	return htab_count(t->h);
}

/* Inserts name (not there yet) as the most recently seen. NULL when full. */
static struct entry *insert(struct lobby_relay_names *t, const char *name, int value)
{
	uint8_t key[KEY_LEN];
	struct entry *e;

	key_of(name, key);
	e = htab_insert(t->h, key, false, NULL);
	if (e == NULL)
		return NULL;
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->value = value;
	if (t->kind == LOBBY_RELAY_KIND_LETTERS)
		t->used[value] = true;
	return e;
}

static void drop(struct lobby_relay_names *t, struct entry *e)
{
	if (t->kind == LOBBY_RELAY_KIND_LETTERS)
		t->used[e->value] = false;
	htab_remove(t->h, e);
}

static void clear(struct lobby_relay_names *t)
{
	struct entry *e;

	while ((e = htab_oldest(t->h)) != NULL)
		drop(t, e);
}

/*
 * A name as the host can have given it: 1..LOBBY_NAME_MAX characters of
 * valid UTF-8 (jsonp checked that), none of them a control character, and
 * a "#N" suffix at most (unique_name's), all within LOBBY_RELAY_NAME_SZ.
 */
static bool valid_name(const char *s, size_t len)
{
	size_t chars = 0;

	if (len == 0 || len >= LOBBY_RELAY_NAME_SZ || memchr(s, '\0', len) != NULL)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 || c == 0x7f)
			return false;
		chars += (c & 0xc0) != 0x80;
	}
	/* "name#NNN": the host may add up to 4 characters past the cap. */
	return chars <= LOBBY_NAME_MAX + 4;
}

/* A refused file: nothing of it is kept (err says why). */
static int refused(struct lobby_relay_names *t)
{
	clear(t);
	return -EBADMSG;
}

int lobby_relay_names_decode(struct lobby_relay_names *t, const char *text, size_t len, char *err,
			     size_t errsize)
{
	struct json_object *o;
	bool letters = t->kind == LOBBY_RELAY_KIND_LETTERS;
	size_t cap = letters ? LOBBY_RELAY_LETTERS : LOBBY_RELAY_CHIPS;
	int r = 0;

	clear(t);
	if (jsonp_parse(text, len, 4, &o, err, errsize) < 0)
		return -EBADMSG;
	if (!json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		snprintf(err, errsize, "not a JSON object");
		return -EBADMSG;
	}
	if ((size_t)json_object_object_length(o) > cap) {
		snprintf(err, errsize, "%d names, at most %zu are kept",
			 json_object_object_length(o), cap);
		json_object_put(o);
		return -EBADMSG;
	}
	json_object_object_foreach(o, k, v)
	{
		size_t klen = strlen(k);
		int value;

		if (!valid_name(k, klen)) {
			snprintf(err, errsize, "a name that is not one: \"%.40s\"", k);
			r = refused(t);
			break;
		}
		if (find(t, k) != NULL) {
			snprintf(err, errsize, "the name \"%.40s\" twice", k);
			r = refused(t);
			break;
		}
		if (letters) {
			const char *s = json_object_is_type(v, json_type_string)
						? json_object_get_string(v)
						: NULL;

			value = s != NULL ? lobby_relay_letter_index(
						    s, (size_t)json_object_get_string_len(v))
					  : -1;
			if (value < 0) {
				snprintf(err, errsize, "the letter of \"%.40s\" is not a..zz", k);
				r = refused(t);
				break;
			}
			if (t->used[value]) {
				snprintf(err, errsize, "the letter of \"%.40s\" is another's too",
					 k);
				r = refused(t);
				break;
			}
		} else {
			int64_t id;

			if (!json_object_is_type(v, json_type_int)) {
				snprintf(err, errsize, "the company of \"%.40s\" is not a number",
					 k);
				r = refused(t);
				break;
			}
			id = json_object_get_int64(v);
			if (id < 1 || id > LOBBY_CAP) {
				snprintf(err, errsize, "the company of \"%.40s\" is not 1..200", k);
				r = refused(t);
				break;
			}
			value = (int)id;
		}
		if (insert(t, k, value) == NULL) {
			snprintf(err, errsize, "%s", "out of room");
			r = refused(t);
			break;
		}
	}
	json_object_put(o);
	return r;
}

int lobby_relay_names_encode(const struct lobby_relay_names *t, struct strbuf *b)
{
	struct pyjson j;
	char letter[LOBBY_RELAY_LETTER_SZ];

	pyjson_init(&j, b);
	pyjson_obj_begin(&j);
	for (const struct entry *e = htab_oldest(t->h); e != NULL; e = htab_newer(t->h, e)) {
		pyjson_key(&j, e->name);
		if (t->kind == LOBBY_RELAY_KIND_LETTERS) {
			lobby_relay_letter_name((unsigned)e->value, letter);
			pyjson_cstr(&j, letter);
		} else {
			pyjson_int(&j, e->value);
		}
	}
	pyjson_obj_end(&j);
	return j.bad || b->bad ? -ENOMEM : 0;
}

int lobby_relay_letter_get(const struct lobby_relay_names *t, const char *name,
			   char out[static LOBBY_RELAY_LETTER_SZ])
{
	const struct entry *e = find(t, name);

	if (e == NULL)
		return -ENOENT;
	return lobby_relay_letter_name((unsigned)e->value, out);
}

int lobby_relay_letter_for(struct lobby_relay_names *t, const char *name,
			   bool (*in_use)(void *arg, const char *name), void *arg, bool *changed)
{
	struct entry *e = find(t, name);
	int idx = -1;

	*changed = false;
	if (e != NULL) {
		if (htab_newest(t->h) != e) {
			htab_touch(t->h, e);
			*changed = true;
		}
		return e->value;
	}
	if (!valid_name(name, strlen(name)))
		return -EINVAL;
	for (int i = 0; i < LOBBY_RELAY_LETTERS; i++) {
		if (!t->used[i]) {
			idx = i;
			break;
		}
	}
	if (idx < 0) {
		/* Every letter is someone's: the name seen least recently that
		 * is not here now gives its letter up. At most 200 are here. */
		for (e = htab_oldest(t->h); e != NULL; e = htab_newer(t->h, e)) {
			if (!in_use(arg, e->name))
				break;
		}
		if (e == NULL)
			return -ENOSPC;
		idx = e->value;
		drop(t, e);
	}
	if (insert(t, name, idx) == NULL)
		return -ENOSPC;
	*changed = true;
	return idx;
}

int lobby_relay_chip_get(const struct lobby_relay_names *t, const char *name)
{
	const struct entry *e = find(t, name);

	return e != NULL ? e->value : 0;
}

bool lobby_relay_chip_set(struct lobby_relay_names *t, const char *name, int id)
{
	struct entry *e = find(t, name);

	if (id < 1 || id > LOBBY_CAP || !valid_name(name, strlen(name)))
		return false;
	if (e != NULL) {
		bool moved = htab_newest(t->h) != e;

		htab_touch(t->h, e);
		if (e->value == id && !moved)
			return false;
		e->value = id;
		return true;
	}
	if (htab_count(t->h) == htab_capacity(t->h))
		drop(t, htab_oldest(t->h));
	return insert(t, name, id) != NULL;
}

int lobby_relay_secret_decode(const uint8_t *buf, size_t len,
			      uint8_t out[static JOINCODE_SECRET_LEN])
{
	if (len != JOINCODE_SECRET_LEN)
		return -EBADMSG;
	memcpy(out, buf, JOINCODE_SECRET_LEN);
	return 0;
}
