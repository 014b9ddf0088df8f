/*
 * lobby-peer: a scripted netpunch lobby joiner, for hostile tests of
 * rally-lobby's host (netpunch-wire.md §1, §3, §7, §11).
 *
 *   lobby-peer CODE [--password PW] [--target IP:PORT]
 *
 * It decodes the join code (its LAN candidate is the target unless
 * --target names one), derives the session's sealer from the code's secret
 * and the password as the lobby does, and sends HELLO(a random 8-byte
 * token) to the target every 100 ms until an ACK echoes the token; then
 * CONNECTED, and "connected" on stdout. From then on it reads a script on
 * stdin, one JSON object a line:
 *   {"send": VALUE}        VALUE written as Python's json.dumps writes it,
 *                          sent sealed (E), or plain (D) when the code has
 *                          no secret; over 1,300 bytes as F fragments
 *   {"send_text": "TEXT"}  the same with TEXT's bytes as they are (JSON
 *                          json-c would not keep: 10**30, duplicate keys)
 *   {"raw_hex": "HEX"}     those bytes as one datagram, nothing added
 *   {"sleep_ms": N}        the script waits (receiving goes on)
 *   {"link_hello": "NAME"} prints {"link_hello": HEX}: the dual TCP link's
 *                          hello line "TPF2LINK1 NAME hex(seal(NAME))\n"
 *                          sealed by our sealer (the salt our frames
 *                          carry), for a test to send over TCP; with
 *                          "sealed_as": "OTHER" the seal is of OTHER
 *   {"quit": true}         exit 0 (so does the end of stdin)
 * Every datagram received is one JSON line on stdout: {"ctl": "H"} (A, C,
 * K) for control frames; for a D/E/S payload that opens {"msg": OBJECT},
 * {"chunk": {"sid": S, "seq": N, "len": L}} (NPF1), {"game": L},
 * {"frag": {"id": I, "index": K, "count": C, "len": L}} (not reassembled),
 * {"mesh": L}, each with "via": "D"|"E"|"S"; {"bad": "why"} for anything
 * that does not open or parse. HELLOs are answered with ACK, as a joiner
 * does, and a KEEPALIVE(token) goes out every 5 s so the host keeps us.
 * It only ever sends to the target (its socket is connected to it).
 * Exit 0 done, 1 failed (no ACK within 40 s, a socket error), 2 bad usage,
 * code or script line.
 */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <limits.h>
#include <poll.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

#include "addr.h"
#include "frame.h"
#include "joincode.h"
#include "jsonp.h"
#include "pyjson.h"
#include "seal.h"
#include "strbuf.h"

#define HELLO_MS     (100)
#define KEEPALIVE_MS (5000)
#define GIVE_UP_MS   (40000)           /* netpunch's --timeout */
#define LINE_MAX_LEN (8 * 1024 * 1024) /* one script line */
#define SEND_MAX     (FRAG_MAX_MSG)    /* what frag_build takes */
#define SCRIPT_DEPTH (PYJSON_MAX_DEPTH - 1)
#define PRINT_DEPTH  (PYJSON_MAX_DEPTH - 1) /* inside {"msg": ...} */
#define RX_BATCH     (64)
#define SLEEP_MAX_MS (3600 * 1000)

struct peer {
	int fd;
	struct addr target;
	struct sealer *sealer;
	uint8_t token[NP1_TOKEN_LEN];
	bool connected;
	uint32_t frag_id;
	long long next_hello, next_keepalive, sleep_until, give_up;
	char *in; /* stdin bytes not yet run */
	size_t in_len, in_cap;
	bool in_eof;
	uint8_t rx[NP1_MAX + 1];
	uint8_t plain[NP1_MAX + 1];
	uint8_t sealed[NP1_MAX + 1];
	uint8_t dgram[NP1_MAX + 1];
	uint8_t frag[FRAG_HDR + FRAG_DATA];
};

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

__attribute__((noreturn)) static void usage(void)
{
	fprintf(stderr, "usage: lobby-peer CODE [--password PW] [--target IP:PORT]\n");
	exit(2);
}

__attribute__((noreturn, format(printf, 2, 3))) static void die(int status, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "lobby-peer: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(status);
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* ---- JSON out ---- */

/* A json-c value as Python's json.dumps writes it. */
static void put_value(struct pyjson *j, struct json_object *o)
{
	char num[32];

	switch (json_object_get_type(o)) {
	case json_type_null:
		pyjson_null(j);
		return;
	case json_type_boolean:
		pyjson_bool(j, json_object_get_boolean(o));
		return;
	case json_type_double:
		pyjson_float(j, json_object_get_double(o));
		return;
	case json_type_int:
		/* json-c keeps 2^63..2^64-1 as a uint64 (and saturates past). */
		if (json_object_get_int64(o) == INT64_MAX &&
		    json_object_get_uint64(o) > (uint64_t)INT64_MAX) {
			snprintf(num, sizeof(num), "%llu",
				 (unsigned long long)json_object_get_uint64(o));
			pyjson_raw(j, num, strlen(num));
		} else {
			pyjson_int(j, (long long)json_object_get_int64(o));
		}
		return;
	case json_type_string:
		pyjson_str(j, json_object_get_string(o), (size_t)json_object_get_string_len(o));
		return;
	case json_type_array:
		pyjson_arr_begin(j);
		for (size_t i = 0; i < json_object_array_length(o); i++)
			put_value(j, json_object_array_get_idx(o, i));
		pyjson_arr_end(j);
		return;
	case json_type_object:
		pyjson_obj_begin(j);
		json_object_object_foreach(o, k, v)
		{
			pyjson_key(j, k);
			put_value(j, v);
		}
		pyjson_obj_end(j);
		return;
	}
}

/* One line on stdout (line-buffered), or a "bad" line if it did not fit. */
static void print_line(struct strbuf *b, const struct pyjson *j)
{
	if (b->bad || j->bad || b->len == 0)
		fputs("{\"bad\": \"unprintable\"}\n", stdout);
	else
		printf("%s\n", b->p);
	strbuf_release(b);
}

static void print_bad(const char *why)
{
	struct strbuf b;
	struct pyjson j;

	strbuf_init(&b, 1024);
	pyjson_init(&j, &b);
	pyjson_obj_begin(&j);
	pyjson_key(&j, "bad");
	pyjson_cstr(&j, why);
	pyjson_obj_end(&j);
	print_line(&b, &j);
}

static void print_ctl(uint8_t type)
{
	char t[2] = {(char)type, '\0'};
	struct strbuf b;
	struct pyjson j;

	strbuf_init(&b, 64);
	pyjson_init(&j, &b);
	pyjson_obj_begin(&j);
	pyjson_key(&j, "ctl");
	pyjson_cstr(&j, t);
	pyjson_obj_end(&j);
	print_line(&b, &j);
}

/* {"KIND": ..., "via": "E"}: the caller writes the value after *j is open. */
static void open_line(struct strbuf *b, struct pyjson *j, const char *kind)
{
	strbuf_init(b, NP1_MAX * 8);
	pyjson_init(j, b);
	pyjson_obj_begin(j);
	pyjson_key(j, kind);
}

static void close_line(struct strbuf *b, struct pyjson *j, uint8_t via)
{
	char v[2] = {(char)via, '\0'};

	pyjson_key(j, "via");
	pyjson_cstr(j, v);
	pyjson_obj_end(j);
	print_line(b, j);
}

static void key_int(struct pyjson *j, const char *k, long long v)
{
	pyjson_key(j, k);
	pyjson_int(j, v);
}

/* An application payload that opened (or came plain): what it is. */
static void print_payload(uint8_t via, const uint8_t *p, size_t len)
{
	struct json_object *o;
	const uint8_t *data;
	struct strbuf b;
	struct pyjson j;
	uint32_t sid, seq;
	size_t dlen;
	char err[96], why[160];

	if (len == 0) {
		print_bad("empty payload");
		return;
	}
	switch (p[0]) {
	case '{':
		if (jsonp_parse((const char *)p, len, PRINT_DEPTH, &o, err, sizeof(err)) < 0) {
			snprintf(why, sizeof(why), "bad json: %s", err);
			print_bad(why);
			return;
		}
		open_line(&b, &j, "msg");
		put_value(&j, o);
		json_object_put(o);
		close_line(&b, &j, via);
		return;
	case 'N':
		if (npf1_parse(p, len, &sid, &seq, &data, &dlen) < 0) {
			print_bad("bad save chunk");
			return;
		}
		open_line(&b, &j, "chunk");
		pyjson_obj_begin(&j);
		key_int(&j, "sid", sid);
		key_int(&j, "seq", seq);
		key_int(&j, "len", (long long)dlen);
		pyjson_obj_end(&j);
		close_line(&b, &j, via);
		return;
	case 'g':
		open_line(&b, &j, "game");
		pyjson_int(&j, (long long)(len - 1));
		close_line(&b, &j, via);
		return;
	case 'r':
		open_line(&b, &j, "mesh");
		pyjson_int(&j, (long long)len);
		close_line(&b, &j, via);
		return;
	case 'F':
		if (len < FRAG_HDR) {
			print_bad("short fragment");
			return;
		}
		open_line(&b, &j, "frag");
		pyjson_obj_begin(&j);
		key_int(&j, "id", be32(p + 1));
		key_int(&j, "index", be32(p + 5));
		key_int(&j, "count", be32(p + 9));
		key_int(&j, "len", (long long)(len - FRAG_HDR));
		pyjson_obj_end(&j);
		close_line(&b, &j, via);
		return;
	default:
		snprintf(why, sizeof(why), "unknown payload 0x%02x", p[0]);
		print_bad(why);
		return;
	}
}

/* ---- the wire ---- */

/* One datagram to the target; a full send buffer is waited out (a tool's
 * pacing), an ICMP refusal (the host is not up yet) is not an error. */
static void send_dgram(struct peer *pr, const uint8_t *buf, size_t len)
{
	for (int tries = 0; tries < 50; tries++) {
		struct pollfd pfd = {.fd = pr->fd, .events = POLLOUT};

		if (send(pr->fd, buf, len, MSG_NOSIGNAL) >= 0)
			return;
		if (errno == ECONNREFUSED || errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != ENOBUFS)
			die(1, "send: %s", strerror(errno));
		poll(&pfd, 1, 100);
	}
	fprintf(stderr, "lobby-peer: send: gave up on a datagram of %zu bytes\n", len);
}

static void send_ctl(struct peer *pr, uint8_t type, const uint8_t *payload, size_t len)
{
	int n = np1_build(pr->dgram, sizeof(pr->dgram), type, payload, len);

	if (n < 0)
		die(1, "np1_build: %s", strerror(-n));
	send_dgram(pr, pr->dgram, (size_t)n);
}

/* One application piece: E under the session's sealer, else D. */
static int send_piece(struct peer *pr, const uint8_t *pt, size_t len)
{
	int n;

	if (pr->sealer == NULL) {
		n = np1_build(pr->dgram, sizeof(pr->dgram), NP1_DATA, pt, len);
	} else {
		n = seal_seal(pr->sealer, pt, len, pr->sealed, sizeof(pr->sealed));
		if (n < 0)
			return n;
		n = np1_build(pr->dgram, sizeof(pr->dgram), NP1_EDATA, pr->sealed, (size_t)n);
	}
	if (n < 0)
		return n;
	send_dgram(pr, pr->dgram, (size_t)n);
	return 0;
}

/* netpunch's sender: a payload over 1,300 bytes goes as F fragments. */
static int send_app(struct peer *pr, const uint8_t *app, size_t len)
{
	unsigned count;
	uint32_t id;

	if (len <= FRAG_DATA)
		return send_piece(pr, app, len);
	count = frag_count(len);
	id = pr->frag_id++;
	for (unsigned i = 0; i < count; i++) {
		int r = frag_build(pr->frag, sizeof(pr->frag), id, i, app, len);

		if (r < 0)
			return r;
		r = send_piece(pr, pr->frag, (size_t)r);
		if (r < 0)
			return r;
	}
	return 0;
}

static void on_datagram(struct peer *pr, const uint8_t *buf, size_t len)
{
	const uint8_t *payload, *pt;
	size_t plen;
	uint8_t type;
	int r;

	if (np1_parse(buf, len, &type, &payload, &plen) < 0) {
		print_bad("not NP1");
		return;
	}
	switch (type) {
	case NP1_HELLO:
		print_ctl(type);
		send_ctl(pr, NP1_ACK, payload, plen);
		return;
	case NP1_ACK:
		print_ctl(type);
		if (!pr->connected && plen == NP1_TOKEN_LEN &&
		    memcmp(payload, pr->token, NP1_TOKEN_LEN) == 0) {
			send_ctl(pr, NP1_CONNECTED, pr->token, sizeof(pr->token));
			pr->connected = true;
			pr->next_keepalive = now_ms() + KEEPALIVE_MS;
			printf("connected\n");
		}
		return;
	case NP1_CONNECTED:
	case NP1_KEEPALIVE:
		print_ctl(type);
		return;
	case NP1_DATA:
		print_payload(type, payload, plen);
		return;
	case NP1_EDATA:
		if (pr->sealer == NULL) {
			print_bad("sealed frame in a plaintext session");
			return;
		}
		r = seal_open(pr->sealer, payload, plen, pr->plain, sizeof(pr->plain));
		if (r < 0) {
			print_bad(r == -EALREADY ? "replayed" : "bad tag");
			return;
		}
		print_payload(type, pr->plain, (size_t)r);
		return;
	case NP1_ADATA:
		if (pr->sealer == NULL) {
			print_bad("signed frame in a plaintext session");
			return;
		}
		r = seal_unsign(pr->sealer, payload, plen, &pt);
		if (r < 0) {
			print_bad(r == -EALREADY ? "replayed" : "bad tag");
			return;
		}
		print_payload(type, pt, (size_t)r);
		return;
	default: {
		char why[32];

		snprintf(why, sizeof(why), "unknown type 0x%02x", type);
		print_bad(why);
		return;
	}
	}
}

static void drain(struct peer *pr)
{
	for (int i = 0; i < RX_BATCH; i++) {
		struct addr from;
		ssize_t n = addr_udp_recv(pr->fd, pr->rx, sizeof(pr->rx), &from);

		if (n == -ECONNREFUSED || n == -EINTR)
			continue;
		if (n < 0)
			return;
		if ((size_t)n > NP1_MAX) {
			print_bad("truncated");
			continue;
		}
		on_datagram(pr, pr->rx, (size_t)n);
	}
}

/* ---- the script ---- */

/* {"link_hello": ...}: the hello, as hex on stdout. */
static void print_link_hello(struct peer *pr, const char *name, const char *sealed_as)
{
	uint8_t line[LINK_HELLO_MAX], sealed[LINK_SEALED_MAX];
	char hex[2 * LINK_HELLO_MAX + 1];
	size_t cut = link_name_cut(name, strlen(name));
	size_t scut = link_name_cut(sealed_as, strlen(sealed_as));
	int s, n;

	if (pr->sealer == NULL)
		die(2, "script: link_hello needs a code with a secret");
	s = seal_seal(pr->sealer, (const uint8_t *)sealed_as, scut, sealed, sizeof(sealed));
	n = s < 0 ? s
		  : link_hello_build(line, sizeof(line), (const uint8_t *)name, cut, sealed,
				     (size_t)s);
	if (n < 0)
		die(2, "script: no link hello for that name: %s", strerror(-n));
	sodium_bin2hex(hex, sizeof(hex), line, (size_t)n);
	printf("{\"link_hello\": \"%s\"}\n", hex);
}

/* Runs one script line. Returns 1 to quit, 0 to go on. */
static int run_line(struct peer *pr, char *line, size_t len)
{
	struct json_object *o, *v;
	char err[96];
	int r = 0;

	while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' '))
		len--;
	if (len == 0)
		return 0;
	if (jsonp_parse(line, len, SCRIPT_DEPTH, &o, err, sizeof(err)) < 0)
		die(2, "script: %s", err);
	if (!json_object_is_type(o, json_type_object))
		die(2, "script: a line must be a JSON object");
	if (json_object_object_get_ex(o, "send", &v)) {
		struct strbuf b;
		struct pyjson j;

		strbuf_init(&b, SEND_MAX);
		pyjson_init(&j, &b);
		put_value(&j, v);
		if (b.bad || j.bad)
			die(2, "script: the value to send is over %d bytes or %d levels", SEND_MAX,
			    PYJSON_MAX_DEPTH);
		r = send_app(pr, (const uint8_t *)b.p, b.len);
		strbuf_release(&b);
	} else if (json_object_object_get_ex(o, "send_text", &v) &&
		   json_object_is_type(v, json_type_string)) {
		r = send_app(pr, (const uint8_t *)json_object_get_string(v),
			     (size_t)json_object_get_string_len(v));
	} else if (json_object_object_get_ex(o, "raw_hex", &v) &&
		   json_object_is_type(v, json_type_string)) {
		const char *hex = json_object_get_string(v);
		size_t n;

		if (sodium_hex2bin(pr->dgram, sizeof(pr->dgram), hex, strlen(hex), NULL, &n,
				   NULL) != 0 ||
		    n * 2 != strlen(hex))
			die(2, "script: raw_hex is not hex, or over %d bytes", NP1_MAX + 1);
		send_dgram(pr, pr->dgram, n);
	} else if (json_object_object_get_ex(o, "sleep_ms", &v) &&
		   json_object_is_type(v, json_type_int)) {
		int64_t ms = json_object_get_int64(v);

		if (ms < 0 || ms > SLEEP_MAX_MS)
			die(2, "script: sleep_ms out of range");
		pr->sleep_until = now_ms() + ms;
	} else if (json_object_object_get_ex(o, "link_hello", &v) &&
		   json_object_is_type(v, json_type_string)) {
		struct json_object *as = NULL;

		json_object_object_get_ex(o, "sealed_as", &as);
		print_link_hello(pr, json_object_get_string(v),
				 as != NULL && json_object_is_type(as, json_type_string)
					 ? json_object_get_string(as)
					 : json_object_get_string(v));
	} else if (json_object_object_get_ex(o, "quit", &v)) {
		r = 1;
	} else {
		die(2, "script: unknown line: %.*s", (int)(len < 200 ? len : 200), line);
	}
	json_object_put(o);
	if (r < 0)
		die(2, "script: cannot send that: %s", strerror(-r));
	return r;
}

/* Runs the complete lines read so far, until a sleep or the end. */
static int run_script(struct peer *pr)
{
	while (now_ms() >= pr->sleep_until) {
		char *nl = pr->in_len > 0 ? memchr(pr->in, '\n', pr->in_len) : NULL;
		size_t len;
		int r;

		if (nl == NULL) {
			if (!pr->in_eof)
				return 0;
			if (pr->in_len == 0)
				return 1;         /* stdin ended: done */
			nl = pr->in + pr->in_len; /* a last line without '\n' */
		}
		len = (size_t)(nl - pr->in);
		r = run_line(pr, pr->in, len);
		len = len < pr->in_len ? len + 1 : len;
		memmove(pr->in, pr->in + len, pr->in_len - len);
		pr->in_len -= len;
		if (r != 0)
			return r;
	}
	return 0;
}

static void read_stdin(struct peer *pr)
{
	ssize_t n;

	if (pr->in_cap - pr->in_len < 65536) {
		size_t cap = pr->in_cap == 0 ? 131072 : pr->in_cap * 2;
		char *p;

		if (cap > LINE_MAX_LEN + 65536)
			die(2, "script: a line over %d bytes", LINE_MAX_LEN);
		p = realloc(pr->in, cap);
		if (p == NULL)
			die(1, "out of memory");
		pr->in = p;
		pr->in_cap = cap;
	}
	n = read(STDIN_FILENO, pr->in + pr->in_len, pr->in_cap - pr->in_len);
	if (n < 0 && errno != EINTR && errno != EAGAIN)
		die(1, "stdin: %s", strerror(errno));
	if (n == 0)
		pr->in_eof = true;
	else if (n > 0)
		pr->in_len += (size_t)n;
}

/* ---- main ---- */

static int wait_ms(const struct peer *pr, long long now)
{
	long long next = pr->connected ? pr->next_keepalive : pr->next_hello;

	if (pr->connected && pr->sleep_until > now && pr->sleep_until < next)
		next = pr->sleep_until;
	if (next <= now)
		return 0;
	return next - now > INT_MAX ? INT_MAX : (int)(next - now);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"password", required_argument, NULL, 'p'},
		{"target", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *password = NULL, *target = NULL;
	struct peer *pr;
	struct joincode c;
	struct addr local;
	char err[160], a[ADDR_STRLEN], b[ADDR_STRLEN];
	uint8_t key[SEAL_KEY_LEN];
	int o, fd;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'p':
			password = optarg;
			break;
		case 't':
			target = optarg;
			break;
		default:
			usage();
		}
	}
	if (optind != argc - 1)
		usage();
	if (sodium_init() < 0)
		die(1, "sodium_init failed");
	setvbuf(stdout, NULL, _IOLBF, 0);
	pr = calloc(1, sizeof(*pr));
	if (pr == NULL)
		die(1, "out of memory");
	if (joincode_decode(argv[optind], password, (long long)time(NULL), &c, err, sizeof(err)) <
	    0)
		die(2, "bad code: %s", err);
	if (c.steam_only)
		die(2, "bad code: a Steam ID code has no address or secret");
	if (target != NULL) {
		if (addr_parse(&pr->target, target, -1) < 0)
			die(2, "bad --target: %s (want IP:PORT)", target);
	} else if (c.has_lan) {
		pr->target = c.lan;
	} else if (c.has_public) {
		pr->target = c.pub;
	} else {
		die(2, "the code has no IPv4 candidate: give --target");
	}
	if (c.has_secret) {
		seal_derive_key(c.secret, password != NULL ? password : "", key);
		pr->sealer = seal_new(key);
		sodium_memzero(key, sizeof(key));
		if (pr->sealer == NULL)
			die(1, "seal_new: %s", strerror(errno));
	}
	fd = addr_udp_connect(&pr->target, &local);
	if (fd < 0)
		die(1, "socket to %s: %s", addr_str(&pr->target, a, sizeof(a)), strerror(-fd));
	pr->fd = fd;
	randombytes_buf(pr->token, sizeof(pr->token));
	randombytes_buf(&pr->frag_id, sizeof(pr->frag_id));
	fprintf(stderr, "lobby-peer: local=%s target=%s sealed=%s\n",
		addr_str(&local, a, sizeof(a)), addr_str(&pr->target, b, sizeof(b)),
		pr->sealer != NULL ? "yes" : "no");
	pr->give_up = now_ms() + GIVE_UP_MS;

	for (;;) {
		struct pollfd pfd[2] = {{.fd = fd, .events = POLLIN}, {.fd = -1}};
		long long now = now_ms();
		nfds_t nfds = 1;

		if (!pr->connected && now >= pr->next_hello) {
			if (now >= pr->give_up)
				die(1, "no ACK from %s within %d ms",
				    addr_str(&pr->target, a, sizeof(a)), GIVE_UP_MS);
			send_ctl(pr, NP1_HELLO, pr->token, sizeof(pr->token));
			pr->next_hello = now + HELLO_MS;
		}
		if (pr->connected && now >= pr->next_keepalive) {
			send_ctl(pr, NP1_KEEPALIVE, pr->token, sizeof(pr->token));
			pr->next_keepalive = now + KEEPALIVE_MS;
		}
		if (pr->connected && run_script(pr) != 0)
			break;
		now = now_ms();
		/* stdin is read once connected, and not while a sleep runs. */
		if (pr->connected && !pr->in_eof && now >= pr->sleep_until) {
			pfd[1] = (struct pollfd){.fd = STDIN_FILENO, .events = POLLIN};
			nfds = 2;
		}
		if (poll(pfd, nfds, wait_ms(pr, now)) < 0) {
			if (errno == EINTR)
				continue;
			die(1, "poll: %s", strerror(errno));
		}
		if (pfd[0].revents & (POLLIN | POLLERR))
			drain(pr);
		if (nfds == 2 && (pfd[1].revents & (POLLIN | POLLHUP | POLLERR)))
			read_stdin(pr);
	}
	fflush(stdout);
	seal_free(pr->sealer);
	close(fd);
	free(pr->in);
	free(pr);
	return 0;
}
