/*
 * Reading the netpunch vector files (the tests/data JSON files, copied from
 * ../shared/vectors/) in the unit tests: load a file, fetch fields, turn
 * hex into bytes. A missing file or field is a test failure, never a
 * crash: the getters return NULL / 0 and the caller CHECKs.
 */
#ifndef VEC_H
#define VEC_H

#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"

/* Parses TEST_DATA_DIR/name; NULL (and a failed check) when unreadable. */
static inline struct json_object *vec_load(const char *name)
{
	char path[1024];
	struct json_object *o;

	snprintf(path, sizeof(path), "%s/%s", TEST_DATA_DIR, name);
	o = json_object_from_file(path);
	CHECK(o != NULL);
	if (o == NULL)
		fprintf(stderr, "cannot read %s: %s\n", path, json_util_get_last_err());
	return o;
}

/* A member (borrowed), or NULL when absent. */
static inline struct json_object *vec_get(struct json_object *o, const char *key)
{
	struct json_object *v = NULL;

	if (o == NULL || !json_object_object_get_ex(o, key, &v))
		return NULL;
	return v;
}

/* A string member; NULL when absent, JSON null or not a string. */
static inline const char *vec_str(struct json_object *o, const char *key)
{
	struct json_object *v = vec_get(o, key);

	if (v == NULL || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static inline long long vec_int(struct json_object *o, const char *key)
{
	return (long long)json_object_get_int64(vec_get(o, key));
}

static inline int vec_bool(struct json_object *o, const char *key)
{
	return json_object_get_boolean(vec_get(o, key));
}

static inline size_t vec_len(struct json_object *arr)
{
	return arr != NULL && json_object_is_type(arr, json_type_array)
		       ? json_object_array_length(arr)
		       : 0;
}

static inline struct json_object *vec_at(struct json_object *arr, size_t i)
{
	return json_object_array_get_idx(arr, i);
}

static inline int vec_nibble(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Hex text into a malloc'd buffer (never NULL on success; *n its
 * length). NULL for NULL or bad hex. */
static inline uint8_t *vec_hex(const char *hex, size_t *n)
{
	size_t len;
	uint8_t *out;

	*n = 0;
	if (hex == NULL)
		return NULL;
	len = strlen(hex);
	if (len % 2 != 0)
		return NULL;
	out = malloc(len / 2 + 1);
	if (out == NULL)
		return NULL;
	for (size_t i = 0; i < len / 2; i++) {
		int hi = vec_nibble(hex[2 * i]), lo = vec_nibble(hex[2 * i + 1]);

		if (hi < 0 || lo < 0) {
			free(out);
			return NULL;
		}
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	*n = len / 2;
	return out;
}

/* Lower-case hex of n bytes into a malloc'd string. */
static inline char *vec_tohex(const uint8_t *b, size_t n)
{
	char *s = malloc(2 * n + 1);

	if (s == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		snprintf(s + 2 * i, 3, "%02x", b[i]);
	s[2 * n] = '\0';
	return s;
}

/* True when the n bytes at b are exactly the hex text. */
static inline int vec_eq_hex(const uint8_t *b, size_t n, const char *hex)
{
	char *s = vec_tohex(b, n);
	int eq = s != NULL && hex != NULL && strcmp(s, hex) == 0;

	if (!eq && s != NULL && hex != NULL)
		fprintf(stderr, "  got  %s\n  want %s\n", s, hex);
	free(s);
	return eq;
}

#endif
