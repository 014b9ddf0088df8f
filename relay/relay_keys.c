/*
 * Realm public keys: the keys file and the PostgreSQL lookup (relay_keys.h).
 *
 * The file is parsed whole into a fresh table keyed by the UUID's 16 bytes;
 * a reload builds another one and swaps only when the whole file parsed,
 * so a half-edited file never replaces good keys.
 *
 * PostgreSQL runs on the loop through libpq's asynchronous API. The states:
 *
 *   DOWN --timer--> STARTING --worker done--> CONNECTING --poll OK--> READY
 *     ^                 |                         |                    |
 *     +---- failure, connect deadline, lost, stuck query --------------+
 *
 * STARTING is PQconnectStartParams on the loop's worker thread: it resolves
 * the first host name (getaddrinfo), which must not block the loop
 * (STYLE.md section 6). PQconnectPoll then runs on the loop, watching
 * PQsocket, which may change from one poll to the next (libpq's
 * PQconnectPoll docs), so the fd is registered afresh after every step.
 *
 * READY sends one query at a time from a FIFO of at most
 * RELAY_KEYS_MAX_PENDING lookups; each lookup has its own deadline from its
 * submission. A lookup whose deadline passes while its query runs is
 * answered ERROR and its query left to finish (the server's
 * statement_timeout ends it within 3 s); if that query stays unanswered
 * RELAY_KEYS_STUCK_MS longer, the connection is taken for dead. While DOWN,
 * lookups fail at once: a dead database must not make hosts wait.
 */
#include "relay_keys.h"

#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "htab.h"
#include "log.h"
#include "strbuf.h"

/* coa's least-privilege query (coa-relay-PROTOCOL.md section 1, "Database
 * Access Role"): only the four granted columns. $1 is sent as text and cast
 * by the server; the key comes back binary (resultFormat 1). */
#define KEYS_SQL                                                                                   \
	"SELECT public_key FROM realms WHERE realm_id = $1::text::uuid AND published AND "         \
	"advert_version = 2"
/* Appended to the conninfo's own options: a later -c wins. */
#define KEYS_PG_OPTIONS "-c statement_timeout=3000 -c default_transaction_read_only=on"
#define KEYS_APP_NAME   "rally-relay"
#define KEYS_UUID_BYTES (16)
#define KEYS_WARN_MS    (10000LL) /* one line per reason per 10 s */

enum keys_mode { MODE_FILE, MODE_PG };

enum db_state {
	DB_DOWN,       /* waiting for the reconnect timer */
	DB_STARTING,   /* PQconnectStartParams on the worker */
	DB_CONNECTING, /* PQconnectPoll steps */
	DB_READY,
};

enum req_state { REQ_FREE, REQ_QUEUED, REQ_INFLIGHT };

enum keys_err {
	ERR_DB_DOWN,
	ERR_QUEUE_FULL,
	ERR_TIMEOUT,
	ERR_QUERY,
	ERR_LOST,
	ERR_NO_MEMORY,
	ERR_NREASONS
};

static const char *const err_names[ERR_NREASONS] = {
	[ERR_DB_DOWN] = "db_down", [ERR_QUEUE_FULL] = "queue_full",
	[ERR_TIMEOUT] = "timeout", [ERR_QUERY] = "query",
	[ERR_LOST] = "lost",       [ERR_NO_MEMORY] = "no_memory",
};

static const char *const result_names[3] = {
	[RELAY_KEYS_FOUND] = "found",
	[RELAY_KEYS_UNKNOWN] = "unknown",
	[RELAY_KEYS_ERROR] = "error",
};

/* A keys-file entry: the key and the line it came from (for duplicates). */
struct keyent {
	uint8_t pk[RELAY_KEYS_PK_LEN];
	uint32_t line;
};

struct relay_keys_req {
	struct relay_keys *k;
	struct relay_keys_req *prev, *next; /* the queue, or the free list */
	enum req_state state;
	uint32_t gen;      /* bumped on release: tells a reused slot apart */
	relay_keys_cb *cb; /* NULL once cancelled or answered by its deadline */
	void *arg;
	char realm[RELAY_KEYS_UUID_LEN + 1];
	struct ev_timer deadline;
};

/* One PQconnectStartParams on the worker; outlives k if k is freed first. */
struct connect_job {
	struct relay_keys *k; /* NULL once k gave up on it */
	char *conninfo, *options;
	PGconn *conn;
};

struct relay_keys {
	struct ev_loop *loop;
	enum keys_mode mode;
	unsigned depth; /* callbacks on the stack */

	/* file */
	char *path;
	struct htab *tab;

	/* PostgreSQL */
	char *conninfo, *options; /* conninfo may hold a password: wiped */
	enum db_state state;
	PGconn *conn;
	struct ev_io *io;
	struct connect_job *job;
	struct ev_timer conn_timer; /* DOWN: retry; STARTING/CONNECTING: deadline; READY: stuck */
	long long backoff_ms;
	bool down_logged, ever_up;
	struct relay_keys_req *pool, *free_reqs, *qhead, *qtail, *inflight;
	size_t pending;
	/* The in-flight query's answer, delivered once libpq says it is done. */
	bool q_have;
	enum relay_keys_result q_res;
	enum keys_err q_err;
	uint8_t q_pk[RELAY_KEYS_PK_LEN];
	struct log_ratelimit rl_query, rl_row;

	/* counters */
	uint64_t lookups[3], errors[ERR_NREASONS];
	uint64_t cancelled, bad_rows, reloads_ok, reloads_refused, connects, disconnects;
};

static void set_err(struct relay_keys_err *err, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_err(struct relay_keys_err *err, int line, const char *fmt, ...)
{
	va_list ap;

	err->line = line;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
}

/* ---- codecs: UUIDs and keys ---- */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool is_dash_at(size_t i)
{
	return i == 8 || i == 13 || i == 18 || i == 23;
}

/*
 * RFC 9562 section 4's text form, "f81d4fae-7dec-11d0-a765-00a0c91e6bf6":
 * 8-4-4-4-12 hex digits, either case. PostgreSQL's uuid input takes more
 * (braces, no dashes); we take only this one, so each realm has one name.
 */
static int uuid_parse(const char *s, size_t len, uint8_t out[KEYS_UUID_BYTES])
{
	size_t n = 0;
	int hi = -1;

	if (len != RELAY_KEYS_UUID_LEN)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		int v;

		if (is_dash_at(i)) {
			if (s[i] != '-')
				return -EINVAL;
			continue;
		}
		v = hexval(s[i]);
		if (v < 0)
			return -EINVAL;
		if (hi < 0) {
			hi = v;
		} else {
			out[n++] = (uint8_t)(hi << 4 | v);
			hi = -1;
		}
	}
	return 0;
}

static void uuid_format(const uint8_t b[KEYS_UUID_BYTES], char out[RELAY_KEYS_UUID_LEN + 1])
{
	static const char digits[] = "0123456789abcdef";
	size_t o = 0;

	for (size_t i = 0; i < KEYS_UUID_BYTES; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out[o++] = '-';
		out[o++] = digits[b[i] >> 4];
		out[o++] = digits[b[i] & 15];
	}
	out[o] = '\0';
}

int relay_keys_canon_uuid(const char *s, char out[static 37])
{
	uint8_t b[KEYS_UUID_BYTES];

	out[0] = '\0';
	if (s == NULL || uuid_parse(s, strnlen(s, RELAY_KEYS_UUID_LEN + 1), b) < 0)
		return -EINVAL;
	uuid_format(b, out);
	return 0;
}

/* 2n hex digits, or padded standard base64 of n bytes (4 * ceil(n / 3)
 * characters); libsodium's decoders reject stray characters and, for
 * base64, non-zero bits past the last byte. */
static int decode_n(const char *s, size_t len, uint8_t *out, size_t n)
{
	size_t got = 0;
	const char *end = NULL;
	int r = -1;

	if (len == 2 * n)
		r = sodium_hex2bin(out, n, s, len, NULL, &got, &end);
	else if (len == 4 * ((n + 2) / 3))
		r = sodium_base642bin(out, n, s, len, NULL, &got, &end,
				      sodium_base64_VARIANT_ORIGINAL);
	if (r != 0 || got != n || end != s + len) {
		sodium_memzero(out, n);
		return -EINVAL;
	}
	return 0;
}

int relay_keys_decode(const char *s, uint8_t *out, size_t n)
{
	if (s == NULL || n == 0) {
		if (n > 0)
			sodium_memzero(out, n);
		return -EINVAL;
	}
	return decode_n(s, strnlen(s, 4 * ((n + 2) / 3) + 2 * n + 1), out, n);
}

int relay_keys_parse_key(const char *s, uint8_t pk[static 32])
{
	return relay_keys_decode(s, pk, RELAY_KEYS_PK_LEN);
}

/* ---- the keys file ---- */

static void table_free(struct htab *t)
{
	if (t == NULL)
		return;
	for (void *v = htab_oldest(t); v != NULL; v = htab_newer(t, v))
		sodium_memzero(v, sizeof(struct keyent));
	htab_free(t);
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* Lines that may hold a realm: an upper bound for the table's size. */
static size_t count_entries(const char *text, size_t len)
{
	size_t n = 0, i = 0;

	while (i < len) {
		while (i < len && is_blank(text[i]))
			i++;
		if (i < len && text[i] != '\n' && text[i] != '#')
			n++;
		while (i < len && text[i] != '\n')
			i++;
		i++;
	}
	return n;
}

/* One line, text[0..len) without its '\n': blank, a comment, or
 * "REALM_ID PUBLIC_KEY [# comment]". */
static int parse_line(struct htab *t, const char *p, size_t len, int lineno,
		      struct relay_keys_err *err)
{
	size_t i = 0, id_off, id_len, key_off, key_len;
	uint8_t id[KEYS_UUID_BYTES];
	struct keyent *e;
	char canon[RELAY_KEYS_UUID_LEN + 1];

	while (i < len && is_blank(p[i]))
		i++;
	if (i == len || p[i] == '#')
		return 0;
	id_off = i;
	while (i < len && !is_blank(p[i]))
		i++;
	id_len = i - id_off;
	while (i < len && is_blank(p[i]))
		i++;
	key_off = i;
	while (i < len && !is_blank(p[i]))
		i++;
	key_len = i - key_off;
	while (i < len && is_blank(p[i]))
		i++;

	if (uuid_parse(p + id_off, id_len, id) < 0) {
		set_err(err, lineno, "realm id is not a UUID (8-4-4-4-12 hex digits)");
		return -EBADMSG;
	}
	if (key_len == 0 || p[key_off] == '#') {
		set_err(err, lineno, "missing public key after the realm id");
		return -EBADMSG;
	}
	if (i < len && p[i] != '#') {
		set_err(err, lineno, "unexpected text after the public key");
		return -EBADMSG;
	}
	uuid_format(id, canon);
	e = htab_get(t, id);
	if (e != NULL) {
		set_err(err, lineno, "realm %s is already on line %u", canon, e->line);
		return -EBADMSG;
	}
	e = htab_insert(t, id, false, NULL);
	if (e == NULL) {
		set_err(err, lineno, "more than %d realms", RELAY_KEYS_MAX_REALMS);
		return -EBADMSG;
	}
	e->line = (uint32_t)lineno;
	if (decode_n(p + key_off, key_len, e->pk, RELAY_KEYS_PK_LEN) < 0) {
		/* The caller frees the whole table: no need to remove it. */
		set_err(err, lineno,
			"public key of realm %s is not 64 hex digits or 44 base64 characters of "
			"32 bytes",
			canon);
		return -EBADMSG;
	}
	return 0;
}

/* The keys file's text into a new table (*out), or -EBADMSG with err. */
static int parse_text(const char *text, size_t len, struct htab **out, struct relay_keys_err *err)
{
	size_t n = count_entries(text, len), pos = 0;
	struct htab *t;
	int lineno = 0;

	*out = NULL;
	if (n > RELAY_KEYS_MAX_REALMS)
		n = RELAY_KEYS_MAX_REALMS;
	t = htab_new(n > 0 ? n : 1, KEYS_UUID_BYTES, sizeof(struct keyent));
	if (t == NULL) {
		set_err(err, 0, "out of memory for %zu realms", n);
		return -ENOMEM;
	}
	while (pos < len) {
		size_t end = pos;
		int r;

		while (end < len && text[end] != '\n')
			end++;
		lineno++;
		r = parse_line(t, text + pos, end - pos, lineno, err);
		if (r < 0) {
			table_free(t);
			return r;
		}
		pos = end + 1;
	}
	*out = t;
	return 0;
}

/* The whole file, at most RELAY_KEYS_FILE_MAX bytes, into a malloc'd buffer. */
static int read_file(const char *path, char **out, size_t *outlen)
{
	size_t cap = 4096, len = 0;
	char *buf = NULL;
	int fd, r = 0;

	*out = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	buf = malloc(cap);
	if (buf == NULL) {
		r = -ENOMEM;
		goto out;
	}
	for (;;) {
		ssize_t n;

		if (len == cap) {
			char *nb;

			if (cap > RELAY_KEYS_FILE_MAX) {
				r = -EFBIG;
				goto out;
			}
			nb = realloc(buf, cap * 2);
			if (nb == NULL) {
				r = -ENOMEM;
				goto out;
			}
			buf = nb;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > RELAY_KEYS_FILE_MAX) {
			r = -EFBIG;
			goto out;
		}
	}
	*out = buf;
	*outlen = len;
	buf = NULL;
out:
	free(buf);
	close(fd);
	return r;
}

static int load_file(const char *path, struct htab **out, struct relay_keys_err *err)
{
	char *text = NULL;
	size_t len = 0;
	int r;

	*out = NULL;
	r = read_file(path, &text, &len);
	if (r == -EFBIG) {
		set_err(err, 0, "larger than %zu bytes", RELAY_KEYS_FILE_MAX);
		return -EBADMSG;
	}
	if (r < 0) {
		set_err(err, 0, "cannot read: %s", strerror(-r));
		return r;
	}
	r = parse_text(text, len, out, err);
	free(text);
	return r;
}

int relay_keys_check_file(const char *path, struct relay_keys_err *err)
{
	struct htab *t;
	size_t n;
	int r;

	err->line = 0;
	err->msg[0] = '\0';
	r = load_file(path, &t, err);
	if (r < 0)
		return r;
	n = htab_count(t);
	table_free(t);
	return (int)n;
}

/* One line naming file:line; kept >= 0 tells how many realms stay loaded. */
static void log_file_error(const char *path, int r, const struct relay_keys_err *err, long kept)
{
	const char *event = kept >= 0       ? "keys-reload-refused"
			    : r == -EBADMSG ? "keys-file-corrupt"
					    : "keys-file-unreadable";
	char keptbuf[32] = "";

	if (kept >= 0)
		snprintf(keptbuf, sizeof(keptbuf), " kept=%ld", kept);
	if (r == -EBADMSG && err->line > 0)
		log_err("%s at=%s:%d error=\"%s\"%s", event, path, err->line, err->msg, keptbuf);
	else
		log_err("%s file=%s error=\"%s\"%s", event, path, err->msg, keptbuf);
}

/* ---- PostgreSQL ---- */

static void deliver(struct relay_keys *k, relay_keys_cb *cb, void *arg, enum relay_keys_result res,
		    const uint8_t *pk, enum keys_err why)
{
	k->lookups[res]++;
	if (res == RELAY_KEYS_ERROR)
		k->errors[why]++;
	k->depth++;
	cb(arg, res, res == RELAY_KEYS_FOUND ? pk : NULL);
	k->depth--;
}

/* libpq's messages are multi-line; ours are one line with no '"'. */
static void one_line(const char *s, char *out, size_t size)
{
	size_t o = 0;

	for (; s != NULL && *s != '\0' && o + 1 < size; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '\n' || c == '\r' || c == '\t')
			c = ' ';
		else if (c == '"')
			c = '\'';
		else if (c < 0x20 || c == 0x7f)
			c = '?';
		if (c == ' ' && (o == 0 || out[o - 1] == ' '))
			continue;
		out[o++] = (char)c;
	}
	while (o > 0 && out[o - 1] == ' ')
		o--;
	out[o] = '\0';
}

static void req_release(struct relay_keys *k, struct relay_keys_req *req)
{
	ev_timer_stop(k->loop, &req->deadline);
	req->state = REQ_FREE;
	req->cb = NULL;
	req->arg = NULL;
	req->gen++;
	req->prev = NULL;
	req->next = k->free_reqs;
	k->free_reqs = req;
	k->pending--;
}

static void queue_unlink(struct relay_keys *k, struct relay_keys_req *req)
{
	if (req->prev != NULL)
		req->prev->next = req->next;
	else
		k->qhead = req->next;
	if (req->next != NULL)
		req->next->prev = req->prev;
	else
		k->qtail = req->prev;
	req->prev = req->next = NULL;
}

/* Every lookup in flight and queued gets ERROR. The state is not READY
 * by now, so lookups their callbacks start fail at once. */
static void fail_all(struct relay_keys *k, enum keys_err why)
{
	struct relay_keys_req *req = k->inflight;

	if (req != NULL) {
		relay_keys_cb *cb = req->cb;
		void *arg = req->arg;

		k->inflight = NULL;
		req_release(k, req);
		if (cb != NULL)
			deliver(k, cb, arg, RELAY_KEYS_ERROR, NULL, why);
	}
	while ((req = k->qhead) != NULL) {
		relay_keys_cb *cb = req->cb;
		void *arg = req->arg;

		queue_unlink(k, req);
		req_release(k, req);
		deliver(k, cb, arg, RELAY_KEYS_ERROR, NULL, why);
	}
}

/* Drops the connection (or the connect job) without a word. */
static void teardown(struct relay_keys *k)
{
	/* Out of epoll before libpq closes the socket (STYLE.md section 6). */
	ev_io_del(k->io, false);
	k->io = NULL;
	if (k->conn != NULL) {
		PQfinish(k->conn);
		k->conn = NULL;
	}
	if (k->job != NULL) {
		k->job->k = NULL;
		k->job = NULL;
	}
}

static void on_conn_timer(struct ev_timer *t, void *arg);
static void on_io(struct ev_io *io, uint32_t events, void *arg);

/*
 * The database is out of reach: a failed attempt, a lost connection, a
 * deadline. Logs once per outage, schedules the next attempt with backoff
 * and fails what waits. detail may point into k->conn: it is copied first.
 */
static void go_down(struct relay_keys *k, const char *why, const char *detail)
{
	bool was_up = k->state == DB_READY;
	char msg[256];

	one_line(detail, msg, sizeof(msg));
	teardown(k);
	ev_timer_stop(k->loop, &k->conn_timer);
	k->state = DB_DOWN;
	if (was_up)
		k->disconnects++;
	if (!k->down_logged) {
		log_warnx("keys-db-down reason=%s error=\"%s\" retry-ms=%lld", why, msg,
			  k->backoff_ms);
		k->down_logged = true;
	} else {
		log_debug("keys-db-retry-fail reason=%s error=\"%s\" retry-ms=%lld", why, msg,
			  k->backoff_ms);
	}
	ev_timer_start(k->loop, &k->conn_timer, k->backoff_ms, on_conn_timer, k);
	k->backoff_ms *= 2;
	if (k->backoff_ms > RELAY_KEYS_BACKOFF_MAX_MS)
		k->backoff_ms = RELAY_KEYS_BACKOFF_MAX_MS;
	fail_all(k, was_up ? ERR_LOST : ERR_DB_DOWN);
}

static void flush(struct relay_keys *k)
{
	int r = PQflush(k->conn);

	if (r < 0) {
		go_down(k, "send", PQerrorMessage(k->conn));
		return;
	}
	/* 1: more to send; wait for writable (and keep reading, libpq docs). */
	if (ev_io_mod(k->io, EPOLLIN | (r == 1 ? EPOLLOUT : 0)) < 0)
		go_down(k, "epoll", strerror(errno));
}

static void start_next(struct relay_keys *k)
{
	struct relay_keys_req *req = k->qhead;
	const char *vals[1];

	if (k->state != DB_READY || k->inflight != NULL || req == NULL)
		return;
	queue_unlink(k, req);
	req->state = REQ_INFLIGHT;
	k->inflight = req;
	k->q_have = false;
	vals[0] = req->realm;
	if (!PQsendQueryParams(k->conn, KEYS_SQL, 1, NULL, vals, NULL, NULL, 1)) {
		go_down(k, "send", PQerrorMessage(k->conn));
		return;
	}
	flush(k);
}

/* One PGresult of the in-flight query. Any error wins over rows. */
static void take_result(struct relay_keys *k, const PGresult *res)
{
	ExecStatusType st = PQresultStatus(res);
	unsigned long quiet;

	if (st == PGRES_TUPLES_OK) {
		int rows = PQntuples(res);

		if (k->q_have)
			return;
		k->q_have = true;
		k->q_res = RELAY_KEYS_UNKNOWN;
		if (rows == 0)
			return;
		if (rows == 1 && PQnfields(res) == 1 && PQfformat(res, 0) == 1 &&
		    !PQgetisnull(res, 0, 0) && PQgetlength(res, 0, 0) == RELAY_KEYS_PK_LEN) {
			memcpy(k->q_pk, PQgetvalue(res, 0, 0), RELAY_KEYS_PK_LEN);
			k->q_res = RELAY_KEYS_FOUND;
			return;
		}
		/* A realm whose key is not an Ed25519 key cannot sign in:
		 * unknown, as a host could never prove it owns it. */
		k->bad_rows++;
		if (log_ratelimit_ok(&k->rl_row, ev_now(k->loop), KEYS_WARN_MS, &quiet))
			log_warnx("keys-db-bad-row realm=%s rows=%d bytes=%d suppressed=%lu",
				  k->inflight->realm, rows,
				  rows >= 1 && PQnfields(res) >= 1 ? PQgetlength(res, 0, 0) : -1,
				  quiet);
		return;
	}
	k->q_have = true;
	k->q_res = RELAY_KEYS_ERROR;
	k->q_err = ERR_QUERY;
	if (log_ratelimit_ok(&k->rl_query, ev_now(k->loop), KEYS_WARN_MS, &quiet)) {
		const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		char msg[256];

		one_line(PQresultErrorMessage(res), msg, sizeof(msg));
		log_warnx("keys-db-query-fail status=%s sqlstate=%s error=\"%s\" suppressed=%lu",
			  PQresStatus(st), state != NULL ? state : "-", msg, quiet);
	}
}

/* libpq is done with the in-flight query: answer it, send the next. */
static void finish_inflight(struct relay_keys *k)
{
	struct relay_keys_req *req = k->inflight;
	relay_keys_cb *cb = req->cb;
	void *arg = req->arg;
	enum relay_keys_result res = k->q_have ? k->q_res : RELAY_KEYS_ERROR;
	enum keys_err why = k->q_have ? k->q_err : ERR_QUERY;
	uint8_t pk[RELAY_KEYS_PK_LEN];

	memcpy(pk, k->q_pk, sizeof(pk));
	sodium_memzero(k->q_pk, sizeof(k->q_pk));
	k->inflight = NULL;
	k->q_have = false;
	/* The stuck-query watch, if a deadline armed it. */
	ev_timer_stop(k->loop, &k->conn_timer);
	req_release(k, req);
	if (cb != NULL)
		deliver(k, cb, arg, res, pk, why);
	sodium_memzero(pk, sizeof(pk));
	start_next(k);
}

static void drain(struct relay_keys *k)
{
	while (k->state == DB_READY && k->inflight != NULL && !PQisBusy(k->conn)) {
		PGresult *res = PQgetResult(k->conn);

		if (res == NULL) {
			finish_inflight(k);
			continue;
		}
		take_result(k, res);
		PQclear(res);
	}
}

/* Registers the connection's current socket afresh for events. */
static int watch(struct relay_keys *k, uint32_t events)
{
	int fd = PQsocket(k->conn);

	ev_io_del(k->io, false);
	k->io = NULL;
	if (fd < 0) {
		errno = EBADF;
		return -EBADF;
	}
	k->io = ev_io_add(k->loop, fd, events, on_io, k);
	return k->io != NULL ? 0 : -errno;
}

static void connected(struct relay_keys *k)
{
	if (PQsetnonblocking(k->conn, 1) != 0) {
		go_down(k, "nonblocking", PQerrorMessage(k->conn));
		return;
	}
	if (watch(k, EPOLLIN) < 0) {
		go_down(k, "epoll", strerror(errno));
		return;
	}
	ev_timer_stop(k->loop, &k->conn_timer);
	k->state = DB_READY;
	k->backoff_ms = RELAY_KEYS_BACKOFF_MIN_MS;
	k->connects++;
	if (k->down_logged || !k->ever_up)
		log_info("keys-db-up server-version=%d", PQserverVersion(k->conn));
	k->down_logged = false;
	k->ever_up = true;
	start_next(k);
}

static void connect_step(struct relay_keys *k)
{
	switch (PQconnectPoll(k->conn)) {
	case PGRES_POLLING_READING:
		if (watch(k, EPOLLIN) < 0)
			go_down(k, "epoll", strerror(errno));
		break;
	case PGRES_POLLING_WRITING:
		if (watch(k, EPOLLOUT) < 0)
			go_down(k, "epoll", strerror(errno));
		break;
	case PGRES_POLLING_OK:
		connected(k);
		break;
	default:
		go_down(k, "connect", PQerrorMessage(k->conn));
		break;
	}
}

static void on_io(struct ev_io *io, uint32_t events, void *arg)
{
	struct relay_keys *k = arg;

	(void)io;
	if (k->state == DB_CONNECTING) {
		connect_step(k);
		return;
	}
	if (k->state != DB_READY)
		return;
	/* Reads whatever came, EOF included: an idle connection learns of a
	 * server shutdown here, not at the next lookup. */
	if (!PQconsumeInput(k->conn)) {
		go_down(k, "lost", PQerrorMessage(k->conn));
		return;
	}
	if ((events & EPOLLOUT) != 0) {
		flush(k);
		if (k->state != DB_READY)
			return;
	}
	drain(k);
	if (k->state == DB_READY && PQstatus(k->conn) == CONNECTION_BAD)
		go_down(k, "lost", PQerrorMessage(k->conn));
}

/* libpq prints notices on stderr by default; ours go to the log. */
static void on_notice(void *arg, const char *message)
{
	char msg[256];

	(void)arg;
	one_line(message, msg, sizeof(msg));
	log_debug("keys-db-notice msg=\"%s\"", msg);
}

static void job_free(struct connect_job *j)
{
	if (j == NULL)
		return;
	if (j->conninfo != NULL) {
		sodium_memzero(j->conninfo, strlen(j->conninfo));
		free(j->conninfo);
	}
	free(j->options);
	PQfinish(j->conn);
	free(j);
}

/* On the worker: libpq resolves the first host here (getaddrinfo). */
static void connect_work(void *arg)
{
	struct connect_job *j = arg;
	/* Keywords are applied in order and dbname expands the conninfo: it
	 * may rename the application, but our options come last and win. */
	const char *const kw[] = {"application_name", "dbname", "options", NULL};
	const char *const val[] = {KEYS_APP_NAME, j->conninfo, j->options, NULL};

	j->conn = PQconnectStartParams(kw, val, 1);
	if (j->conn != NULL)
		PQsetNoticeProcessor(j->conn, on_notice, NULL);
}

static void connect_done(void *arg, bool cancelled)
{
	struct connect_job *j = arg;
	struct relay_keys *k = j->k;

	if (k == NULL || cancelled) {
		if (k != NULL) {
			k->job = NULL;
			k->state = DB_DOWN;
		}
		job_free(j);
		return;
	}
	k->job = NULL;
	k->conn = j->conn;
	j->conn = NULL;
	job_free(j);
	if (k->conn == NULL) {
		go_down(k, "connect", "out of memory");
		return;
	}
	if (PQstatus(k->conn) == CONNECTION_BAD) {
		go_down(k, "connect", PQerrorMessage(k->conn));
		return;
	}
	/* Right after PQconnectStart, act as if polling said WRITING. */
	k->state = DB_CONNECTING;
	if (watch(k, EPOLLOUT) < 0)
		go_down(k, "epoll", strerror(errno));
}

static char *dup_str(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = malloc(n);

	if (d != NULL)
		memcpy(d, s, n);
	return d;
}

static void start_attempt(struct relay_keys *k)
{
	struct connect_job *j = calloc(1, sizeof(*j));
	int r;

	if (j == NULL || (j->conninfo = dup_str(k->conninfo)) == NULL ||
	    (j->options = dup_str(k->options)) == NULL) {
		job_free(j);
		go_down(k, "connect", "out of memory");
		return;
	}
	j->k = k;
	r = ev_work_submit(k->loop, connect_work, connect_done, j);
	if (r < 0) {
		job_free(j);
		go_down(k, "connect", strerror(-r));
		return;
	}
	k->job = j;
	k->state = DB_STARTING;
	ev_timer_start(k->loop, &k->conn_timer, RELAY_KEYS_CONNECT_TIMEOUT_MS, on_conn_timer, k);
}

static void on_conn_timer(struct ev_timer *t, void *arg)
{
	struct relay_keys *k = arg;

	(void)t;
	switch (k->state) {
	case DB_DOWN:
		start_attempt(k);
		break;
	case DB_STARTING:
	case DB_CONNECTING:
		go_down(k, "connect-timeout", "no connection within the deadline");
		break;
	case DB_READY:
		/* A query unanswered well past the statement timeout. */
		go_down(k, "stuck", "a query went unanswered past its deadline");
		break;
	}
}

static void on_deadline(struct ev_timer *t, void *arg)
{
	struct relay_keys_req *req = arg;
	struct relay_keys *k = req->k;
	relay_keys_cb *cb = req->cb;
	void *cb_arg = req->arg;

	(void)t;
	if (req->state == REQ_QUEUED) {
		queue_unlink(k, req);
		req_release(k, req);
		deliver(k, cb, cb_arg, RELAY_KEYS_ERROR, NULL, ERR_TIMEOUT);
		return;
	}
	/* In flight: answer now, let the query end on its own, and watch
	 * that it does. */
	req->cb = NULL;
	if (!ev_timer_armed(&k->conn_timer))
		ev_timer_start(k->loop, &k->conn_timer, RELAY_KEYS_STUCK_MS, on_conn_timer, k);
	if (cb != NULL)
		deliver(k, cb, cb_arg, RELAY_KEYS_ERROR, NULL, ERR_TIMEOUT);
}

/* What libpq itself would take as a conninfo rather than a database name
 * (its recognized_connection_string). */
static bool is_conninfo(const char *s)
{
	return strncmp(s, "postgresql://", 13) == 0 || strncmp(s, "postgres://", 11) == 0 ||
	       strchr(s, '=') != NULL;
}

/*
 * The conninfo's own "options" (or PGOPTIONS, which libpq would use when
 * the conninfo has none) followed by ours. NULL, errno set: EINVAL for a
 * conninfo libpq cannot parse (its message is not logged: it may quote
 * the password).
 * XXX: options set in a pg_service.conf service are replaced, not kept.
 */
static char *merged_options(const char *conninfo)
{
	PQconninfoOption *opts = NULL;
	const char *base = NULL;
	char *errmsg = NULL, *out;
	size_t n;

	if (is_conninfo(conninfo)) {
		opts = PQconninfoParse(conninfo, &errmsg);
		if (opts == NULL) {
			PQfreemem(errmsg);
			errno = EINVAL;
			return NULL;
		}
		for (PQconninfoOption *o = opts; o->keyword != NULL; o++)
			if (strcmp(o->keyword, "options") == 0 && o->val != NULL &&
			    o->val[0] != '\0')
				base = o->val;
	}
	if (base == NULL) {
		base = getenv("PGOPTIONS");
		if (base != NULL && base[0] == '\0')
			base = NULL;
	}
	n = (base != NULL ? strlen(base) + 1 : 0) + sizeof(KEYS_PG_OPTIONS);
	out = malloc(n);
	if (out != NULL)
		snprintf(out, n, "%s%s%s", base != NULL ? base : "", base != NULL ? " " : "",
			 KEYS_PG_OPTIONS);
	if (opts != NULL) {
		for (PQconninfoOption *o = opts; o->keyword != NULL; o++)
			if (strcmp(o->keyword, "password") == 0 && o->val != NULL)
				sodium_memzero(o->val, strlen(o->val));
		PQconninfoFree(opts);
	}
	if (out == NULL)
		errno = ENOMEM;
	return out;
}

static int pg_init(struct relay_keys *k, const char *conninfo)
{
	k->conninfo = dup_str(conninfo);
	if (k->conninfo == NULL)
		return -ENOMEM;
	k->options = merged_options(conninfo);
	if (k->options == NULL) {
		int e = errno;

		if (e == EINVAL)
			log_err("keys-db-conninfo-invalid error=\"libpq cannot parse it (not "
				"shown: "
				"it may hold a password)\"");
		return -e;
	}
	k->pool = calloc(RELAY_KEYS_MAX_PENDING, sizeof(*k->pool));
	if (k->pool == NULL)
		return -ENOMEM;
	for (size_t i = RELAY_KEYS_MAX_PENDING; i-- > 0;) {
		struct relay_keys_req *req = &k->pool[i];

		req->k = k;
		ev_timer_init(&req->deadline);
		req->next = k->free_reqs;
		k->free_reqs = req;
	}
	k->backoff_ms = RELAY_KEYS_BACKOFF_MIN_MS;
	k->state = DB_DOWN;
	start_attempt(k);
	return 0;
}

static struct relay_keys_req *lookup_pg(struct relay_keys *k, const char *realm_id,
					relay_keys_cb *cb, void *arg)
{
	struct relay_keys_req *req;
	uint32_t gen;

	if (k->state == DB_DOWN) {
		deliver(k, cb, arg, RELAY_KEYS_ERROR, NULL, ERR_DB_DOWN);
		return NULL;
	}
	req = k->free_reqs;
	if (req == NULL) {
		deliver(k, cb, arg, RELAY_KEYS_ERROR, NULL, ERR_QUEUE_FULL);
		return NULL;
	}
	k->free_reqs = req->next;
	k->pending++;
	req->state = REQ_QUEUED;
	req->cb = cb;
	req->arg = arg;
	relay_keys_canon_uuid(realm_id, req->realm);
	req->next = NULL;
	req->prev = k->qtail;
	if (k->qtail != NULL)
		k->qtail->next = req;
	else
		k->qhead = req;
	k->qtail = req;
	ev_timer_start(k->loop, &req->deadline, RELAY_KEYS_LOOKUP_TIMEOUT_MS, on_deadline, req);
	gen = req->gen;
	start_next(k);
	/* A send that failed at once took the connection down and answered
	 * this lookup already. */
	if (req->gen != gen)
		return NULL;
	return req;
}

/* ---- the object ---- */

struct relay_keys *relay_keys_new(struct ev_loop *loop, const char *file, const char *pg_conninfo)
{
	struct relay_keys *k;
	int r;

	if (loop == NULL || (file == NULL) == (pg_conninfo == NULL)) {
		errno = EINVAL;
		return NULL;
	}
	if (sodium_init() < 0) {
		errno = EIO;
		return NULL;
	}
	k = calloc(1, sizeof(*k));
	if (k == NULL)
		return NULL;
	k->loop = loop;
	ev_timer_init(&k->conn_timer);
	if (file != NULL) {
		struct relay_keys_err err = {0};

		k->mode = MODE_FILE;
		k->path = dup_str(file);
		if (k->path == NULL) {
			r = -ENOMEM;
			goto fail;
		}
		r = load_file(file, &k->tab, &err);
		if (r < 0) {
			log_file_error(file, r, &err, -1);
			goto fail;
		}
		log_info("keys-loaded file=%s realms=%zu", file, htab_count(k->tab));
		return k;
	}
	k->mode = MODE_PG;
	r = pg_init(k, pg_conninfo);
	if (r < 0)
		goto fail;
	return k;
fail:
	relay_keys_free(k);
	errno = -r;
	return NULL;
}

void relay_keys_free(struct relay_keys *k)
{
	if (k == NULL)
		return;
	if (k->depth > 0)
		log_fatalx("keys-free-in-callback (a relay_keys_cb must not free its relay_keys)");
	if (k->mode == MODE_PG) {
		teardown(k);
		ev_timer_stop(k->loop, &k->conn_timer);
		if (k->pool != NULL) {
			for (size_t i = 0; i < RELAY_KEYS_MAX_PENDING; i++)
				ev_timer_stop(k->loop, &k->pool[i].deadline);
			free(k->pool);
		}
		sodium_memzero(k->q_pk, sizeof(k->q_pk));
		if (k->conninfo != NULL) {
			sodium_memzero(k->conninfo, strlen(k->conninfo));
			free(k->conninfo);
		}
		free(k->options);
	}
	table_free(k->tab);
	free(k->path);
	free(k);
}

int relay_keys_reload(struct relay_keys *k)
{
	struct relay_keys_err err = {0};
	struct htab *fresh;
	int r;

	if (k->mode != MODE_FILE)
		return 0;
	r = load_file(k->path, &fresh, &err);
	if (r < 0) {
		k->reloads_refused++;
		log_file_error(k->path, r, &err, (long)htab_count(k->tab));
		return r;
	}
	table_free(k->tab);
	k->tab = fresh;
	k->reloads_ok++;
	log_info("keys-reloaded file=%s realms=%zu", k->path, htab_count(k->tab));
	return 0;
}

static void lookup_file(struct relay_keys *k, const char *realm_id, relay_keys_cb *cb, void *arg)
{
	uint8_t id[KEYS_UUID_BYTES];
	const struct keyent *e = NULL;

	if (uuid_parse(realm_id, strnlen(realm_id, RELAY_KEYS_UUID_LEN + 1), id) == 0)
		e = htab_get(k->tab, id);
	if (e == NULL)
		deliver(k, cb, arg, RELAY_KEYS_UNKNOWN, NULL, ERR_QUERY);
	else
		deliver(k, cb, arg, RELAY_KEYS_FOUND, e->pk, ERR_QUERY);
}

struct relay_keys_req *relay_keys_lookup(struct relay_keys *k, const char *realm_id,
					 relay_keys_cb *cb, void *arg)
{
	char canon[RELAY_KEYS_UUID_LEN + 1];

	/* Not a UUID: unknown, and never sent to the database. */
	if (realm_id == NULL || relay_keys_canon_uuid(realm_id, canon) < 0) {
		deliver(k, cb, arg, RELAY_KEYS_UNKNOWN, NULL, ERR_QUERY);
		return NULL;
	}
	if (k->mode == MODE_FILE) {
		lookup_file(k, canon, cb, arg);
		return NULL;
	}
	return lookup_pg(k, canon, cb, arg);
}

void relay_keys_cancel(struct relay_keys_req *req)
{
	struct relay_keys *k;

	if (req == NULL || req->state == REQ_FREE)
		return;
	k = req->k;
	k->cancelled++;
	if (req->state == REQ_QUEUED) {
		queue_unlink(k, req);
		req_release(k, req);
		return;
	}
	/* In flight: the slot stays until libpq is done with the query. */
	req->cb = NULL;
}

size_t relay_keys_count(const struct relay_keys *k)
{
	return k->mode == MODE_FILE ? htab_count(k->tab) : 0;
}

void relay_keys_metrics(const struct relay_keys *k, struct strbuf *out)
{
	strbuf_printf(out, "# HELP rally_relay_tunnel_keys_lookups_total Realm key lookups by "
			   "result.\n# TYPE rally_relay_tunnel_keys_lookups_total counter\n");
	for (int i = 0; i < 3; i++)
		strbuf_printf(out, "rally_relay_tunnel_keys_lookups_total{result=\"%s\"} %llu\n",
			      result_names[i], (unsigned long long)k->lookups[i]);
	strbuf_printf(out, "# HELP rally_relay_tunnel_keys_errors_total Lookups answered error, by "
			   "reason.\n# TYPE rally_relay_tunnel_keys_errors_total counter\n");
	for (int i = 0; i < ERR_NREASONS; i++)
		strbuf_printf(out, "rally_relay_tunnel_keys_errors_total{reason=\"%s\"} %llu\n",
			      err_names[i], (unsigned long long)k->errors[i]);
	strbuf_printf(out,
		      "# HELP rally_relay_tunnel_keys_cancelled_total Lookups cancelled by their "
		      "caller.\n# TYPE rally_relay_tunnel_keys_cancelled_total counter\n"
		      "rally_relay_tunnel_keys_cancelled_total %llu\n"
		      "# HELP rally_relay_tunnel_keys_realms Realms in the keys file (0 with "
		      "PostgreSQL).\n# TYPE rally_relay_tunnel_keys_realms gauge\n"
		      "rally_relay_tunnel_keys_realms %zu\n"
		      "# HELP rally_relay_tunnel_keys_pending PostgreSQL lookups queued or in "
		      "flight.\n# TYPE rally_relay_tunnel_keys_pending gauge\n"
		      "rally_relay_tunnel_keys_pending %zu\n",
		      (unsigned long long)k->cancelled, relay_keys_count(k), k->pending);
	if (k->mode == MODE_FILE) {
		strbuf_printf(out,
			      "# HELP rally_relay_tunnel_keys_reloads_total Keys file reloads by "
			      "result.\n# TYPE rally_relay_tunnel_keys_reloads_total counter\n"
			      "rally_relay_tunnel_keys_reloads_total{result=\"ok\"} %llu\n"
			      "rally_relay_tunnel_keys_reloads_total{result=\"refused\"} %llu\n",
			      (unsigned long long)k->reloads_ok,
			      (unsigned long long)k->reloads_refused);
		return;
	}
	strbuf_printf(out,
		      "# HELP rally_relay_tunnel_keys_db_up 1 while connected to PostgreSQL.\n"
		      "# TYPE rally_relay_tunnel_keys_db_up gauge\n"
		      "rally_relay_tunnel_keys_db_up %d\n"
		      "# HELP rally_relay_tunnel_keys_db_connects_total Connections made.\n"
		      "# TYPE rally_relay_tunnel_keys_db_connects_total counter\n"
		      "rally_relay_tunnel_keys_db_connects_total %llu\n"
		      "# HELP rally_relay_tunnel_keys_db_disconnects_total Connections lost.\n"
		      "# TYPE rally_relay_tunnel_keys_db_disconnects_total counter\n"
		      "rally_relay_tunnel_keys_db_disconnects_total %llu\n"
		      "# HELP rally_relay_tunnel_keys_db_bad_rows_total Realms whose key is not 32 "
		      "bytes.\n# TYPE rally_relay_tunnel_keys_db_bad_rows_total counter\n"
		      "rally_relay_tunnel_keys_db_bad_rows_total %llu\n",
		      k->state == DB_READY ? 1 : 0, (unsigned long long)k->connects,
		      (unsigned long long)k->disconnects, (unsigned long long)k->bad_rows);
}
