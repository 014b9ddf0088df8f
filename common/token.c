#include "token.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "statefile.h"

_Static_assert(TOKEN_HASH == crypto_generichash_BYTES, "TOKEN_HASH is BLAKE2b's default");

int token_load(const char *path, const char *unreadable_what, const char *refused_what,
	       uint8_t hash[TOKEN_HASH])
{
	char *text = NULL;
	size_t len;
	int r = statefile_read(path, TOKEN_FILE_MAX, &text, &len);

	if (r < 0) {
		errno = -r;
		log_warn("%s-unreadable file=%s", unreadable_what, path);
		return r;
	}
	while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' ' ||
			   text[len - 1] == '\t'))
		text[--len] = '\0';
	r = 0;
	for (size_t i = 0; i < len && r == 0; i++) {
		unsigned char c = (unsigned char)text[i];

		if (c <= ' ' || c >= 0x7f) {
			log_err("%s-refused file=%s reason=\"not printable ASCII without spaces\"",
				refused_what, path);
			r = -EINVAL;
		}
	}
	if (r == 0 && len < TOKEN_MIN_LEN) {
		log_err("%s-refused file=%s reason=\"shorter than %d characters\"", refused_what,
			path, TOKEN_MIN_LEN);
		r = -EINVAL;
	}
	if (r == 0 && hash != NULL)
		crypto_generichash(hash, TOKEN_HASH, (const uint8_t *)text, len, NULL, 0);
	sodium_memzero(text, len);
	free(text);
	return r;
}

bool token_check(const uint8_t hash[static TOKEN_HASH], struct httpd_req *req)
{
	const char *h = httpd_header(req, "Authorization");
	uint8_t got[TOKEN_HASH];

	if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0)
		return false;
	h += 7;
	crypto_generichash(got, sizeof(got), (const uint8_t *)h, strlen(h), NULL, 0);
	return sodium_memcmp(got, hash, sizeof(got)) == 0;
}
