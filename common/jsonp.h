/*
 * Strict JSON parsing on top of json-c, for bodies and state files: the
 * whole input must be one JSON value (trailing whitespace allowed), valid
 * UTF-8, without NUL bytes, nested at most `depth` deep.
 */
#ifndef JSONP_H
#define JSONP_H

#include <stddef.h>

struct json_object;

/* Returns 0 with *out owned by the caller (json_object_put), or -EBADMSG
 * with err set ("line 3: unexpected character"). */
int jsonp_parse(const char *text, size_t len, int depth, struct json_object **out, char *err,
		size_t errsize);

#endif
