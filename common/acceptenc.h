/*
 * The Accept-Encoding request header (RFC 9110 §12.5.3), for the codings
 * we can send: gzip and identity.
 *
 *   Accept-Encoding: gzip, deflate;q=0.5, identity;q=0
 *   Accept-Encoding: *;q=0.1
 *   Accept-Encoding:                       (identity only)
 *
 * A pure codec: bytes in, struct out.
 */
#ifndef ACCEPTENC_H
#define ACCEPTENC_H

#include <stddef.h>

#define ACCEPTENC_MAX_ITEMS (64) /* codings in one header at most */

/* q-values in thousandths (0..1000); -1 where the header names none. */
struct acceptenc {
	int gzip; /* "gzip" or "x-gzip" (§8.4.1.3: equivalent) */
	int identity;
	int any; /* "*" */
};

enum acceptenc_coding {
	ACCEPTENC_NONE,     /* the header refuses both (identity;q=0 or *;q=0) */
	ACCEPTENC_IDENTITY, /* send the body as it is */
	ACCEPTENC_GZIP,
};

/*
 * Parses the header's value (buf, len; no NUL needed). Codings we do not
 * know are skipped; a coding named twice keeps its highest q. Returns 0, or
 * -EBADMSG when the value is not the RFC's grammar (out is then the "no
 * header" answer: every field -1), -E2BIG past ACCEPTENC_MAX_ITEMS.
 */
int acceptenc_parse(const char *buf, size_t len, struct acceptenc *out);
/* What to send: gzip when it is acceptable at least as much as identity;
 * identity, unless named or matched by "*", is acceptable at the lowest
 * preference (any gzip q above 0 wins). */
enum acceptenc_coding acceptenc_pick(const struct acceptenc *a);

#endif
