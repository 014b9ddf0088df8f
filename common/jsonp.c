#include "jsonp.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

int jsonp_parse(const char *text, size_t len, int depth, struct json_object **out, char *err,
		size_t errsize)
{
	struct json_tokener *tok;
	struct json_object *o;
	enum json_tokener_error je;
	size_t end;

	*out = NULL;
	if (len == 0) {
		snprintf(err, errsize, "empty document");
		return -EBADMSG;
	}
	if (memchr(text, '\0', len) != NULL) {
		snprintf(err, errsize, "NUL byte at offset %zu",
			 (size_t)((const char *)memchr(text, '\0', len) - text));
		return -EBADMSG;
	}
	if (len > (size_t)0x7fffffff) {
		snprintf(err, errsize, "document too large");
		return -EBADMSG;
	}
	tok = json_tokener_new_ex(depth);
	if (tok == NULL) {
		snprintf(err, errsize, "out of memory");
		return -EBADMSG;
	}
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, text, (int)len);
	je = json_tokener_get_error(tok);
	end = json_tokener_get_parse_end(tok);
	if (o == NULL) {
		if (je == json_tokener_continue)
			snprintf(err, errsize, "truncated document");
		else
			snprintf(err, errsize, "offset %zu: %s", end, json_tokener_error_desc(je));
		json_tokener_free(tok);
		return -EBADMSG;
	}
	json_tokener_free(tok);
	while (end < len &&
	       (text[end] == ' ' || text[end] == '\n' || text[end] == '\r' || text[end] == '\t'))
		end++;
	if (end != len) {
		snprintf(err, errsize, "offset %zu: trailing data", end);
		json_object_put(o);
		return -EBADMSG;
	}
	*out = o;
	return 0;
}
