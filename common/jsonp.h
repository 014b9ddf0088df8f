/*
 * Strict JSON parsing on top of json-c, for bodies and state files: the
 * whole input must be one JSON value (trailing whitespace allowed), valid
 * UTF-8, without NUL bytes, nested at most `depth` deep.
 */
#ifndef JSONP_H
#define JSONP_H

#include <stdbool.h>
#include <stddef.h>

struct json_object;

/* Returns 0 with *out owned by the caller (json_object_put), or -EBADMSG
 * with err set ("line 3: unexpected character"). */
int jsonp_parse(const char *text, size_t len, int depth, struct json_object **out, char *err,
		size_t errsize);

/*
 * Borrowed field reads of an object (NULL o reads as empty): a string (NULL
 * when absent or not a string), a flag as Python's truthiness tests
 * netpunch's (a bool, or an int != 0; dflt otherwise), an integer (false
 * when absent or not an integer; json-c keeps booleans apart).
 */
const char *jsonp_str(struct json_object *o, const char *key);
bool jsonp_bool(struct json_object *o, const char *key, bool dflt);
bool jsonp_int(struct json_object *o, const char *key, long long *v);

#endif
