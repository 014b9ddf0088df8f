/*
 * Kept listings: the bodies of GET /list and GET /servers, serialized once
 * and served to every request until they change.
 *
 * A kept body belongs to a registry generation (master_registry_gen of its
 * kind) and, for a listing with ages in it (/list), to one wall-clock
 * second: it is built as of the start of that second, so "now" and every
 * "age" are those the old per-request path gives at that instant, and the
 * next second gets a new body. The builder is the old serializer; with
 * --verify-lists every request also builds a fresh body and a difference is
 * fatal (a change of the registry that did not bump the generation).
 *
 * Each kept body is one shared libmicrohttpd response (httpd_shared), so a
 * request costs neither a copy nor an allocation. The gzip form is made
 * lazily, on the first request that accepts it, once per kept body. zlib:
 * the reference implementation of the format, in Debian (zlib1g), stable
 * API, and one call with a bound on the output (deflateBound).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "acceptenc.h"
#include "httpd.h"
#include "log.h"
#include "master.h"
#include "strbuf.h"

struct master_list {
	struct master *m;
	struct master_list_def def;
	bool valid;
	uint64_t gen;
	long long sec; /* the wall-clock second of the kept body (per_second) */
	struct httpd_shared *plain, *gz;
	bool gz_failed; /* this body does not compress: send it plain */
	uint64_t builds, hits, gzips, verified;
};

static const struct httpd_header plain_headers[] = {
	{"Vary", "Accept-Encoding"},
};
static const struct httpd_header gz_headers[] = {
	{"Vary", "Accept-Encoding"},
	{"Content-Encoding", "gzip"},
};

struct master_list *master_list_new(struct master *m, const struct master_list_def *def)
{
	struct master_list *l = calloc(1, sizeof(*l));

	if (l == NULL)
		return NULL;
	l->m = m;
	l->def = *def;
	return l;
}

static void forget(struct master_list *l)
{
	/* Queued responses keep their bodies alive (httpd_shared). */
	httpd_shared_free(l->plain);
	httpd_shared_free(l->gz);
	l->plain = l->gz = NULL;
	l->gz_failed = false;
	l->valid = false;
}

void master_list_free(struct master_list *l)
{
	if (l == NULL)
		return;
	forget(l);
	free(l);
}

static long long wall_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The instant a body for now_ms is built as of. */
static long long build_time(const struct master_list *l, long long now_ms)
{
	return l->def.per_second ? now_ms - now_ms % 1000 : now_ms;
}

static int build(struct master_list *l, long long at_ms, struct strbuf *b)
{
	strbuf_init(b, l->def.max);
	if (l->def.build(l->m, at_ms, b) < 0 || b->bad) {
		strbuf_release(b);
		return -EMSGSIZE;
	}
	return 0;
}

static int rebuild(struct master_list *l, long long now_ms)
{
	struct strbuf b;
	int r;

	forget(l);
	r = build(l, build_time(l, now_ms), &b);
	if (r < 0)
		return r;
	if (b.p == NULL) /* an empty body: strbuf allocated nothing */
		strbuf_append(&b, "", 0);
	if (b.p == NULL)
		return -ENOMEM;
	l->plain = httpd_shared_new_take(l->def.content_type, b.p, b.len, plain_headers,
					 sizeof(plain_headers) / sizeof(plain_headers[0]));
	if (l->plain == NULL)
		return -ENOMEM;
	l->gen = master_registry_gen(l->m->reg, l->def.kind);
	l->sec = now_ms / 1000;
	l->valid = true;
	l->builds++;
	return 0;
}

/* The gzip form of the kept body, made once. */
static struct httpd_shared *gzipped(struct master_list *l)
{
	const void *in;
	size_t len;
	z_stream z;
	uLong cap;
	Bytef *out;
	int r;

	if (l->gz != NULL || l->gz_failed)
		return l->gz;
	in = httpd_shared_body(l->plain, &len);
	memset(&z, 0, sizeof(z));
	/* windowBits 15 + 16: a gzip header and trailer (RFC 1952). */
	if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
	    Z_OK)
		goto fail;
	cap = deflateBound(&z, (uLong)len);
	out = malloc(cap);
	if (out == NULL) {
		deflateEnd(&z);
		goto fail;
	}
	z.next_in = (Bytef *)(uintptr_t)in; /* NOLINT: zlib does not write it */
	z.avail_in = (uInt)len;
	z.next_out = out;
	z.avail_out = (uInt)cap;
	r = deflate(&z, Z_FINISH);
	deflateEnd(&z);
	if (r != Z_STREAM_END) {
		free(out);
		goto fail;
	}
	l->gz = httpd_shared_new_take(l->def.content_type, out, z.total_out, gz_headers,
				      sizeof(gz_headers) / sizeof(gz_headers[0]));
	if (l->gz == NULL)
		goto fail;
	l->gzips++;
	return l->gz;
fail:
	log_warnx("list-gzip-fail list=%s bytes=%zu", l->def.name, len);
	l->gz_failed = true;
	return NULL;
}

/* --verify-lists: the kept body must be what a fresh build gives. */
static void verify(struct master_list *l, long long now_ms)
{
	const void *kept;
	size_t len;
	struct strbuf b;

	if (build(l, build_time(l, now_ms), &b) < 0)
		log_fatalx("list-verify-fail list=%s reason=build", l->def.name);
	kept = httpd_shared_body(l->plain, &len);
	if (b.len != len || (len > 0 && memcmp(b.p, kept, len) != 0))
		log_fatalx("list-verify-mismatch list=%s kept-bytes=%zu fresh-bytes=%zu gen=%llu",
			   l->def.name, len, b.len, (unsigned long long)l->gen);
	strbuf_release(&b);
	l->verified++;
}

int master_list_reply(struct master_list *l, struct httpd_req *req)
{
	long long now_ms = wall_now_ms();
	struct httpd_shared *s;
	const char *ae;
	int r;

	if (l->valid && l->gen == master_registry_gen(l->m->reg, l->def.kind) &&
	    (!l->def.per_second || l->sec == now_ms / 1000)) {
		l->hits++;
		if (l->m->cfg.verify_lists)
			verify(l, now_ms);
	} else if ((r = rebuild(l, now_ms)) < 0) {
		return r;
	}
	s = l->plain;
	ae = httpd_header(req, "Accept-Encoding");
	if (ae != NULL) {
		struct acceptenc a;

		/* A malformed header counts as none; a refusal of both
		 * codings gets identity, as before (no 406). */
		if (acceptenc_parse(ae, strlen(ae), &a) == 0 &&
		    acceptenc_pick(&a) == ACCEPTENC_GZIP && gzipped(l) != NULL)
			s = l->gz;
	}
	return httpd_reply_shared(req, 200, s);
}

void master_list_metrics(const struct master_list *l, struct strbuf *out)
{
	strbuf_printf(out, "rally_master_list_builds_total{list=\"%s\"} %llu\n", l->def.name,
		      (unsigned long long)l->builds);
	strbuf_printf(out, "rally_master_list_hits_total{list=\"%s\"} %llu\n", l->def.name,
		      (unsigned long long)l->hits);
	strbuf_printf(out, "rally_master_list_gzips_total{list=\"%s\"} %llu\n", l->def.name,
		      (unsigned long long)l->gzips);
}
