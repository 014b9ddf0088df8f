/*
 * master/master_list: kept listings through a real httpd on loopback. A
 * body is built once per registry generation (and per wall-clock second
 * when per_second), served byte-equal in between, gzip made once and
 * decompressing to the identity body, q=0 honoured, and --verify-lists
 * exiting on a kept body that a fresh build does not reproduce.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "ev.h"
#include "httpd.h"
#include "master.h"
#include "strbuf.h"
#include "tap.h"

struct row {
	struct master_reg_head h;
	char name[16];
};

static unsigned builds;
static bool unstable; /* the builder's output changes on every build */

static int build(struct master *m, long long wall_ms, struct strbuf *out)
{
	const struct row *r = NULL;

	builds++;
	strbuf_printf(out, "{\"now\":%lld,\"rows\":[", wall_ms / 1000);
	while ((r = master_registry_next(m->reg, MASTER_REG_LOBBY, r)) != NULL)
		strbuf_printf(out, "\"%s\",", r->name);
	/* Enough repetition that gzip has something to do. */
	for (int i = 0; i < 64; i++)
		strbuf_append(out, "\"padding padding padding\",", 26);
	if (unstable)
		strbuf_printf(out, "%u", builds);
	strbuf_append(out, "0]}", 3);
	return 0;
}

static void handler(struct httpd_req *req, void *arg)
{
	struct master_list *l = arg;

	if (master_list_reply(l, req) < 0)
		httpd_reply(req, 500, "text/plain", "x", 1);
}

struct answer {
	char head[2048];
	char *body;
	size_t len;
};

/* One GET over a fresh connection, the loop run until the answer is in. */
static int get(struct ev_loop *loop, const struct addr *a, const char *ae, struct answer *out)
{
	char req[256], *buf = malloc(1 << 20), *sep;
	size_t got = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), n;
	long long deadline = ev_monotonic_ms() + 5000;

	n = snprintf(req, sizeof(req),
		     "GET /l HTTP/1.1\r\nHost: t\r\n%s%s%sConnection: close\r\n\r\n",
		     ae != NULL ? "Accept-Encoding: " : "", ae != NULL ? ae : "",
		     ae != NULL ? "\r\n" : "");
	connect(fd, (const struct sockaddr *)&a->ss, a->len);
	while (ev_monotonic_ms() < deadline) {
		ssize_t r;

		ev_loop_run_once(loop, 5);
		if (n > 0 && send(fd, req, (size_t)n, MSG_NOSIGNAL) == n)
			n = 0;
		r = recv(fd, buf + got, (1 << 20) - got - 1, 0);
		if (r == 0)
			break;
		if (r > 0)
			got += (size_t)r;
	}
	close(fd);
	buf[got] = '\0';
	sep = strstr(buf, "\r\n\r\n");
	if (sep == NULL) {
		free(buf);
		return -EPROTO;
	}
	snprintf(out->head, sizeof(out->head), "%.*s", (int)(sep - buf), buf);
	out->len = got - (size_t)(sep + 4 - buf);
	out->body = malloc(out->len + 1);
	memcpy(out->body, sep + 4, out->len);
	free(buf);
	return 0;
}

static bool has_header(const struct answer *a, const char *line)
{
	return strstr(a->head, line) != NULL;
}

static bool gunzip_equal(const struct answer *z, const struct answer *plain)
{
	char *out = malloc(plain->len + 16);
	z_stream s;
	bool ok;

	memset(&s, 0, sizeof(s));
	inflateInit2(&s, 15 + 16);
	s.next_in = (Bytef *)z->body;
	s.avail_in = (uInt)z->len;
	s.next_out = (Bytef *)out;
	s.avail_out = (uInt)plain->len + 16;
	ok = inflate(&s, Z_FINISH) == Z_STREAM_END && s.total_out == plain->len &&
	     memcmp(out, plain->body, plain->len) == 0;
	inflateEnd(&s);
	free(out);
	return ok;
}

static void put(struct master *m, const char *name)
{
	uint8_t key[MASTER_REG_KEY_MAX] = {0};
	struct row *r;
	bool created;

	memcpy(key, name, strlen(name));
	r = master_registry_put(m->reg, MASTER_REG_LOBBY, key, &created);
	snprintf(r->name, sizeof(r->name), "%s", name);
	master_registry_refresh(m->reg, MASTER_REG_LOBBY, r);
}

static void wait_next_second(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	usleep((useconds_t)(1000000 - ts.tv_nsec / 1000) + 20000);
}

static void test_kept(struct ev_loop *loop, struct master *m, bool per_second)
{
	const struct master_list_def def = {
		.name = "t",
		.kind = MASTER_REG_LOBBY,
		.per_second = per_second,
		.content_type = "application/json",
		.max = 1 << 20,
		.build = build,
	};
	struct master_list *l = master_list_new(m, &def);
	struct addr a;
	struct httpd_cfg cfg = {.max_body = 1024, .conn_limit = 64, .conn_timeout_s = 5};
	struct httpd *d;
	struct answer x, y, z, q0;
	struct strbuf mt;

	addr_parse(&a, "127.0.0.1:0", -1);
	d = httpd_new_take(loop, httpd_listen(&a), &cfg, handler, l);
	CHECK(d != NULL);
	if (per_second)
		wait_next_second(); /* the next 3 requests in one second */
	builds = 0;
	CHECK_EQ_INT(get(loop, &a, NULL, &x), 0);
	CHECK_EQ_INT(get(loop, &a, NULL, &y), 0);
	CHECK_EQ_INT(get(loop, &a, "gzip, br", &z), 0);
	CHECK_EQ_INT(builds, 1);
	CHECK(x.len == y.len && memcmp(x.body, y.body, x.len) == 0);
	CHECK(has_header(&x, "Vary: Accept-Encoding"));
	CHECK(!has_header(&x, "Content-Encoding"));
	CHECK(has_header(&z, "Content-Encoding: gzip") && has_header(&z, "Vary: Accept-Encoding"));
	CHECK(z.len < x.len && gunzip_equal(&z, &x));
	CHECK_EQ_INT(get(loop, &a, "gzip;q=0", &q0), 0);
	CHECK(!has_header(&q0, "Content-Encoding") && q0.len == x.len);
	free(y.body);
	free(z.body);
	free(q0.body);

	/* A change of the kind: a new body, and a new gzip form. */
	put(m, per_second ? "second" : "first");
	CHECK_EQ_INT(get(loop, &a, NULL, &y), 0);
	CHECK_EQ_INT(get(loop, &a, "gzip", &z), 0);
	CHECK(builds == 2 || (per_second && builds == 3));
	CHECK(y.len > x.len);
	CHECK(gunzip_equal(&z, &y));
	free(x.body);
	free(z.body);

	/* Per second: the next second rebuilds, without a change. */
	if (per_second) {
		unsigned b = builds;

		wait_next_second();
		CHECK_EQ_INT(get(loop, &a, NULL, &x), 0);
		CHECK_EQ_INT(builds, b + 1);
		CHECK(x.len == y.len && memcmp(x.body, y.body, x.len) != 0); /* "now" */
		free(x.body);
	}
	free(y.body);
	strbuf_init(&mt, 4096);
	master_list_metrics(l, &mt);
	CHECK(strstr(mt.p, "rally_master_list_gzips_total{list=\"t\"} 2") != NULL);
	strbuf_release(&mt);
	httpd_free(d);
	master_list_free(l);
}

/* A kept body a fresh build does not reproduce ends the process. */
static void test_verify(struct ev_loop *loop, struct master *m)
{
	const struct master_list_def def = {
		.name = "v",
		.kind = MASTER_REG_LOBBY,
		.content_type = "application/json",
		.max = 1 << 20,
		.build = build,
	};
	int status = 0;
	pid_t pid = fork();

	if (pid == 0) {
		struct master_list *l = master_list_new(m, &def);
		struct addr a;
		struct httpd_cfg cfg = {.max_body = 1024, .conn_limit = 64, .conn_timeout_s = 5};
		struct answer x;

		m->cfg.verify_lists = true;
		unstable = true;
		addr_parse(&a, "127.0.0.1:0", -1);
		httpd_new_take(loop, httpd_listen(&a), &cfg, handler, l);
		get(loop, &a, NULL, &x); /* builds: kept */
		get(loop, &a, NULL, &x); /* verifies: differs, exits */
		_exit(0);
	}
	CHECK(pid > 0);
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1);
}

int main(void)
{
	struct master m;
	struct master_reg_kind_ops ops = {
		.name = "t",
		.val_size = sizeof(struct row),
		.key_len = MASTER_REG_KEY_MAX,
		.capacity = 16,
		.ttl_ms = 60000,
	};

	memset(&m, 0, sizeof(m));
	m.loop = ev_loop_new();
	m.reg = master_registry_new(m.loop);
	CHECK_EQ_INT(master_registry_add_kind(m.reg, MASTER_REG_LOBBY, &ops), 0);
	test_kept(m.loop, &m, false);
	test_kept(m.loop, &m, true);
	test_verify(m.loop, &m);
	master_registry_free(m.reg);
	ev_loop_free(m.loop);
	return tap_done("masterlist");
}
