/*
 * relay/relay_keys: the keys file (every error with its line, the cap,
 * reload swap-on-success), lookups, the UUID and key codecs, and the
 * PostgreSQL side's failures that need no server: a conninfo libpq refuses,
 * a server that is not there, one that never answers (queue cap, deadlines,
 * cancel). Lookups against a real PostgreSQL are tests/integ/relay_keys_pg.py.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ev.h"
#include "log.h"
#include "relay_keys.h"
#include "strbuf.h"
#include "tap.h"

#define CHECK_HAS(hay, needle)                                                                     \
	do {                                                                                       \
		tap_checks++;                                                                      \
		if (strstr((hay), (needle)) == NULL) {                                             \
			tap_failures++;                                                            \
			fprintf(stderr, "FAIL %s:%d: \"%s\" lacks \"%s\"\n", __FILE__, __LINE__,   \
				(hay), (needle));                                                  \
		}                                                                                  \
	} while (0)

/* Realm ids and keys of the fixtures. */
#define R1 "0f8fad5b-d9cb-469f-a165-70867728950e"
#define R2 "7c9e6679-7425-40de-944b-e07fc1f90ae7"
#define R3 "a8098c1a-f86e-11da-bd1a-00112444be1e"
/* bytes 0x00..0x1f */
#define K_HEX "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
#define K_B64 "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
/* bytes 0xff x 32 */
#define K_FF "FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF"

static char dir[64];

struct result {
	int calls;
	enum relay_keys_result res;
	uint8_t pk[32];
};

static void on_result(void *arg, enum relay_keys_result res, const uint8_t pk[32])
{
	struct result *r = arg;

	r->calls++;
	r->res = res;
	if (res == RELAY_KEYS_FOUND && pk != NULL)
		memcpy(r->pk, pk, 32);
	else
		memset(r->pk, 0, 32);
}

static const char *write_file(const char *name, const char *text)
{
	static char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (f == NULL) {
		perror(path);
		exit(1);
	}
	fputs(text, f);
	fclose(f);
	return path;
}

static void seq_key(uint8_t pk[32], uint8_t first)
{
	for (int i = 0; i < 32; i++)
		pk[i] = (uint8_t)(first + i);
}

static void test_canon_uuid(void)
{
	char out[37];

	CHECK_EQ_INT(relay_keys_canon_uuid(R1, out), 0);
	CHECK_EQ_STR(out, R1);
	CHECK_EQ_INT(relay_keys_canon_uuid("0F8FAD5B-D9CB-469F-A165-70867728950E", out), 0);
	CHECK_EQ_STR(out, R1);
	CHECK_EQ_INT(relay_keys_canon_uuid("0f8FAd5b-d9cB-469f-A165-70867728950e", out), 0);
	CHECK_EQ_STR(out, R1);
	/* Other spellings PostgreSQL would take, and plain junk. */
	CHECK_EQ_INT(relay_keys_canon_uuid("{0f8fad5b-d9cb-469f-a165-70867728950e}", out), -EINVAL);
	CHECK_EQ_STR(out, "");
	CHECK_EQ_INT(relay_keys_canon_uuid("0f8fad5bd9cb469fa16570867728950e", out), -EINVAL);
	CHECK_EQ_INT(relay_keys_canon_uuid("0f8fad5b-d9cb-469f-a165-70867728950", out), -EINVAL);
	CHECK_EQ_INT(relay_keys_canon_uuid("0f8fad5b-d9cb-469f-a165-70867728950e0", out), -EINVAL);
	CHECK_EQ_INT(relay_keys_canon_uuid("0f8fad5b-d9cb-469f-a165-70867728950g", out), -EINVAL);
	CHECK_EQ_INT(relay_keys_canon_uuid("0f8fad5b-d9cb-469fa-165-70867728950e", out), -EINVAL);
	CHECK_EQ_INT(relay_keys_canon_uuid("0f8fad5b d9cb-469f-a165-70867728950e", out), -EINVAL);
	CHECK_EQ_INT(relay_keys_canon_uuid("' OR 1=1 --", out), -EINVAL);
	CHECK_EQ_INT(relay_keys_canon_uuid("", out), -EINVAL);
	CHECK_EQ_INT(relay_keys_canon_uuid(NULL, out), -EINVAL);
}

static void test_parse_key(void)
{
	uint8_t pk[32], want[32], sig[64];
	char hex128[129];

	seq_key(want, 0);
	CHECK_EQ_INT(relay_keys_parse_key(K_HEX, pk), 0);
	CHECK(memcmp(pk, want, 32) == 0);
	CHECK_EQ_INT(relay_keys_parse_key(K_B64, pk), 0);
	CHECK(memcmp(pk, want, 32) == 0);
	CHECK_EQ_INT(relay_keys_parse_key(K_FF, pk), 0);
	memset(want, 0xff, 32);
	CHECK(memcmp(pk, want, 32) == 0);
	CHECK_EQ_INT(
		relay_keys_parse_key(
			"ffFFffFFffFFffFFffFFffFFffFFffFFffFFffFFffFFffFFffFFffFFffFFffFF", pk),
		0);
	CHECK(memcmp(pk, want, 32) == 0);

	/* 31 bytes, 33 bytes, odd length, a stray character. */
	CHECK_EQ_INT(relay_keys_parse_key(K_HEX + 2, pk), -EINVAL);
	CHECK_EQ_INT(relay_keys_parse_key(K_HEX "00", pk), -EINVAL);
	CHECK_EQ_INT(relay_keys_parse_key(K_HEX + 1, pk), -EINVAL);
	CHECK_EQ_INT(
		relay_keys_parse_key(
			"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1g", pk),
		-EINVAL);
	memset(want, 0, 32);
	CHECK(memcmp(pk, want, 32) == 0); /* zeroed on failure */
	/* base64: no padding, 31 bytes ("=="), URL alphabet, bits past the
	 * end, a space inside. */
	CHECK_EQ_INT(relay_keys_parse_key("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8", pk),
		     -EINVAL);
	CHECK_EQ_INT(relay_keys_parse_key("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHg==", pk),
		     -EINVAL);
	CHECK_EQ_INT(relay_keys_parse_key("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwd-_8=", pk),
		     -EINVAL);
	CHECK_EQ_INT(relay_keys_parse_key("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh9=", pk),
		     -EINVAL);
	CHECK_EQ_INT(relay_keys_parse_key("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGx dHh8=", pk),
		     -EINVAL);
	CHECK_EQ_INT(relay_keys_parse_key("", pk), -EINVAL);
	CHECK_EQ_INT(relay_keys_parse_key(NULL, pk), -EINVAL);

	/* A signature (64 bytes) decodes by the same rule. */
	for (int i = 0; i < 64; i++)
		snprintf(hex128 + 2 * i, 3, "%02x", i);
	CHECK_EQ_INT(relay_keys_decode(hex128, sig, 64), 0);
	CHECK(sig[0] == 0 && sig[63] == 63);
	CHECK_EQ_INT(
		relay_keys_decode("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKiss"
				  "LS4vMDEyMzQ1Njc4OTo7PD0+Pw==",
				  sig, 64),
		0);
	CHECK(sig[0] == 0 && sig[63] == 63);
	CHECK_EQ_INT(relay_keys_decode(K_HEX, sig, 64), -EINVAL);
}

static void test_file_good(void)
{
	struct ev_loop *loop = ev_loop_new();
	const char *path =
		write_file("good.keys", "# coa realms, exported 2024-05-01\n"
					"\n" R1 " " K_HEX "\n"
					"   # indented comment\n"
					"\t" R2 "\t\t" K_B64 "   # trailing comment\n"
					"0F8FAD5B-D9CB-469F-A165-70867728950F " K_FF "\r\n"
					"  \t \n" R3 " " K_HEX);
	struct relay_keys_err err;
	struct relay_keys *k;
	struct result r = {0};
	uint8_t want[32];
	struct strbuf sb;

	CHECK_EQ_INT(relay_keys_check_file(path, &err), 4);
	k = relay_keys_new(loop, path, NULL);
	CHECK(k != NULL);
	if (k == NULL)
		goto out;
	CHECK_EQ_INT(relay_keys_count(k), 4);

	/* Synchronous: the callback has run when lookup returns NULL. */
	seq_key(want, 0);
	CHECK(relay_keys_lookup(k, R1, on_result, &r) == NULL);
	CHECK_EQ_INT(r.calls, 1);
	CHECK_EQ_INT(r.res, RELAY_KEYS_FOUND);
	CHECK(memcmp(r.pk, want, 32) == 0);
	CHECK(relay_keys_lookup(k, R2, on_result, &r) == NULL);
	CHECK_EQ_INT(r.res, RELAY_KEYS_FOUND);
	CHECK(memcmp(r.pk, want, 32) == 0);
	/* Stored lower-case, found in any case. */
	CHECK(relay_keys_lookup(k, "0f8fad5b-d9cb-469f-a165-70867728950f", on_result, &r) == NULL);
	CHECK_EQ_INT(r.res, RELAY_KEYS_FOUND);
	CHECK(r.pk[0] == 0xff && r.pk[31] == 0xff);
	CHECK(relay_keys_lookup(k, "7C9E6679-7425-40DE-944B-E07FC1F90AE7", on_result, &r) == NULL);
	CHECK_EQ_INT(r.res, RELAY_KEYS_FOUND);
	/* The last line needs no newline. */
	CHECK(relay_keys_lookup(k, R3, on_result, &r) == NULL);
	CHECK_EQ_INT(r.res, RELAY_KEYS_FOUND);

	CHECK(relay_keys_lookup(k, "00000000-0000-0000-0000-000000000000", on_result, &r) == NULL);
	CHECK_EQ_INT(r.res, RELAY_KEYS_UNKNOWN);
	CHECK(relay_keys_lookup(k, "not-a-uuid", on_result, &r) == NULL);
	CHECK_EQ_INT(r.res, RELAY_KEYS_UNKNOWN);
	CHECK(relay_keys_lookup(k, NULL, on_result, &r) == NULL);
	CHECK_EQ_INT(r.res, RELAY_KEYS_UNKNOWN);
	CHECK_EQ_INT(r.calls, 8);

	strbuf_init(&sb, 1 << 16);
	relay_keys_metrics(k, &sb);
	CHECK(!sb.bad);
	CHECK_HAS(sb.p, "rally_relay_tunnel_keys_lookups_total{result=\"found\"} 5\n");
	CHECK_HAS(sb.p, "rally_relay_tunnel_keys_lookups_total{result=\"unknown\"} 3\n");
	CHECK_HAS(sb.p, "rally_relay_tunnel_keys_lookups_total{result=\"error\"} 0\n");
	CHECK_HAS(sb.p, "rally_relay_tunnel_keys_realms 4\n");
	CHECK(strstr(sb.p, "db_up") == NULL);
	strbuf_release(&sb);

	/* PostgreSQL's reload is a no-op; this is the file's. */
	CHECK_EQ_INT(relay_keys_reload(k), 0);
	CHECK_EQ_INT(relay_keys_count(k), 4);
	relay_keys_free(k);
out:
	relay_keys_free(NULL);
	ev_loop_free(loop);
}

static void test_empty_file(void)
{
	struct relay_keys_err err;

	CHECK_EQ_INT(relay_keys_check_file(write_file("empty.keys", ""), &err), 0);
	CHECK_EQ_INT(relay_keys_check_file(write_file("comments.keys", "# none yet\n\n"), &err), 0);
}

/* Each corrupt file: its error, on its line. */
static void bad_file(int line, const char *want, const char *text)
{
	struct relay_keys_err err;
	const char *path = write_file("bad.keys", text);
	int r = relay_keys_check_file(path, &err);

	CHECK_EQ_INT(r, -EBADMSG);
	CHECK_EQ_INT(err.line, line);
	CHECK_HAS(err.msg, want);
}

static void test_file_errors(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct relay_keys *k;

	bad_file(3, "not a UUID", "# x\n" R1 " " K_HEX "\nrealm-one " K_HEX "\n");
	bad_file(1, "not a UUID", "{" R1 "} " K_HEX "\n");
	bad_file(2, "not a UUID", "\n" R1 "x " K_HEX "\n");
	bad_file(1, "missing public key", R1 "\n");
	bad_file(1, "missing public key", R1 "   # no key\n");
	bad_file(2, "is not 64 hex digits or 44 base64", R2 " " K_HEX "\n" R1 " " K_HEX "0\n");
	/* A short key: 31 bytes, in hex and in base64. */
	bad_file(1, "public key of realm " R1,
		 R1 " 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e\n");
	bad_file(1, "44 base64", R1 " AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHg==\n");
	bad_file(1, "44 base64", R1 " AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8\n");
	bad_file(4, "unexpected text", "\n\n\n" R1 " " K_HEX " extra\n");
	/* Duplicates, in either case, name the first line. */
	bad_file(5, "realm " R1 " is already on line 2",
		 "# dup\n" R1 " " K_HEX "\n" R2 " " K_HEX "\n\n"
		 "0F8FAD5B-D9CB-469F-A165-70867728950E " K_B64 "\n");
	/* A NUL byte is no separator. */
	{
		struct relay_keys_err err;
		const char *path = write_file("nul.keys", "");
		FILE *f = fopen(path, "w");
		static const char text[] = R1 "\0" K_HEX "\n";

		fwrite(text, 1, sizeof(text) - 1, f);
		fclose(f);
		CHECK_EQ_INT(relay_keys_check_file(path, &err), -EBADMSG);
		CHECK_EQ_INT(err.line, 1);
	}

	/* A corrupt or missing file is a start-up error. */
	errno = 0;
	k = relay_keys_new(loop, write_file("bad.keys", R1 " " K_HEX "\nnope " K_HEX "\n"), NULL);
	CHECK(k == NULL);
	CHECK_EQ_INT(errno, EBADMSG);
	errno = 0;
	k = relay_keys_new(loop, "/nonexistent/relay.keys", NULL);
	CHECK(k == NULL);
	CHECK_EQ_INT(errno, ENOENT);
	{
		struct relay_keys_err err;

		CHECK_EQ_INT(relay_keys_check_file("/nonexistent/relay.keys", &err), -ENOENT);
		CHECK_EQ_INT(err.line, 0);
	}
	/* Exactly one source. */
	errno = 0;
	CHECK(relay_keys_new(loop, NULL, NULL) == NULL);
	CHECK_EQ_INT(errno, EINVAL);
	CHECK(relay_keys_new(loop, "/dev/null", "dbname=x") == NULL);
	CHECK_EQ_INT(errno, EINVAL);
	ev_loop_free(loop);
}

/* RELAY_KEYS_MAX_REALMS realms load; one more is refused on its line. */
static void test_cap(void)
{
	char path[128];
	struct relay_keys_err err;
	FILE *f;

	snprintf(path, sizeof(path), "%s/cap.keys", dir);
	f = fopen(path, "w");
	if (f == NULL)
		return;
	fputs("# the cap\n", f);
	for (unsigned i = 0; i < RELAY_KEYS_MAX_REALMS; i++)
		fprintf(f, "%08x-0000-4000-8000-%012x %s\n", i, i, K_HEX);
	fclose(f);
	CHECK_EQ_INT(relay_keys_check_file(path, &err), RELAY_KEYS_MAX_REALMS);

	f = fopen(path, "a");
	fprintf(f, "ffffffff-0000-4000-8000-000000000000 %s\n", K_HEX);
	fclose(f);
	CHECK_EQ_INT(relay_keys_check_file(path, &err), -EBADMSG);
	CHECK_EQ_INT(err.line, RELAY_KEYS_MAX_REALMS + 2);
	CHECK_HAS(err.msg, "more than 65536 realms");
}

static void test_reload(void)
{
	struct ev_loop *loop = ev_loop_new();
	const char *path = write_file("reload.keys", R1 " " K_HEX "\n" R2 " " K_HEX "\n");
	struct relay_keys *k = relay_keys_new(loop, path, NULL);
	struct result r = {0};
	struct strbuf sb;

	CHECK(k != NULL);
	if (k == NULL) {
		ev_loop_free(loop);
		return;
	}
	CHECK_EQ_INT(relay_keys_count(k), 2);

	/* A good file replaces the keys: R1's key changes, R2 goes, R3 comes. */
	write_file("reload.keys", R1 " " K_FF "\n" R3 " " K_B64 "\n");
	CHECK_EQ_INT(relay_keys_reload(k), 0);
	CHECK_EQ_INT(relay_keys_count(k), 2);
	relay_keys_lookup(k, R1, on_result, &r);
	CHECK(r.res == RELAY_KEYS_FOUND && r.pk[0] == 0xff);
	relay_keys_lookup(k, R2, on_result, &r);
	CHECK_EQ_INT(r.res, RELAY_KEYS_UNKNOWN);
	relay_keys_lookup(k, R3, on_result, &r);
	CHECK(r.res == RELAY_KEYS_FOUND && r.pk[31] == 0x1f);

	/* A corrupt one on its last line changes nothing, not even its
	 * good first lines. */
	write_file("reload.keys", R2 " " K_HEX "\n" R1 " " K_HEX "\n" R3 " short\n");
	CHECK_EQ_INT(relay_keys_reload(k), -EBADMSG);
	CHECK_EQ_INT(relay_keys_count(k), 2);
	relay_keys_lookup(k, R2, on_result, &r);
	CHECK_EQ_INT(r.res, RELAY_KEYS_UNKNOWN);
	relay_keys_lookup(k, R1, on_result, &r);
	CHECK(r.res == RELAY_KEYS_FOUND && r.pk[0] == 0xff);

	/* A vanished one neither. */
	unlink(path);
	CHECK_EQ_INT(relay_keys_reload(k), -ENOENT);
	relay_keys_lookup(k, R3, on_result, &r);
	CHECK_EQ_INT(r.res, RELAY_KEYS_FOUND);

	write_file("reload.keys", R2 " " K_HEX "\n");
	CHECK_EQ_INT(relay_keys_reload(k), 0);
	CHECK_EQ_INT(relay_keys_count(k), 1);
	relay_keys_lookup(k, R3, on_result, &r);
	CHECK_EQ_INT(r.res, RELAY_KEYS_UNKNOWN);

	strbuf_init(&sb, 1 << 16);
	relay_keys_metrics(k, &sb);
	CHECK_HAS(sb.p, "rally_relay_tunnel_keys_reloads_total{result=\"ok\"} 2\n");
	CHECK_HAS(sb.p, "rally_relay_tunnel_keys_reloads_total{result=\"refused\"} 2\n");
	strbuf_release(&sb);
	relay_keys_free(k);
	ev_loop_free(loop);
}

static void run_until(struct ev_loop *loop, const int *calls, int want, long long max_ms)
{
	long long end = ev_monotonic_ms() + max_ms;

	while (*calls < want && ev_monotonic_ms() < end)
		ev_loop_run_once(loop, 50);
}

/* No server behind the conninfo: lookups fail, at once once it is known. */
static void test_pg_no_server(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct relay_keys *k;
	struct result r = {0}, r2 = {0};
	long long t0;

	/* libpq's own parser refuses it (the text is not logged). */
	errno = 0;
	CHECK(relay_keys_new(loop, NULL, "host='unterminated") == NULL);
	CHECK_EQ_INT(errno, EINVAL);

	k = relay_keys_new(loop, NULL,
			   "host=/nonexistent/relaykeys-test port=5 dbname=coa_registry");
	CHECK(k != NULL);
	if (k == NULL) {
		ev_loop_free(loop);
		return;
	}
	CHECK_EQ_INT(relay_keys_count(k), 0);
	/* Not a UUID: unknown at once, no database involved. */
	CHECK(relay_keys_lookup(k, "x' OR '1'='1", on_result, &r) == NULL);
	CHECK_EQ_INT(r.calls, 1);
	CHECK_EQ_INT(r.res, RELAY_KEYS_UNKNOWN);

	/* Before the first attempt is over: queued, then failed with it. */
	t0 = ev_monotonic_ms();
	CHECK(relay_keys_lookup(k, R1, on_result, &r2) != NULL);
	CHECK_EQ_INT(r2.calls, 0);
	run_until(loop, &r2.calls, 1, 3000);
	CHECK_EQ_INT(r2.calls, 1);
	CHECK_EQ_INT(r2.res, RELAY_KEYS_ERROR);
	CHECK(ev_monotonic_ms() - t0 < 2000);
	/* Down: the next one fails before lookup returns. */
	CHECK(relay_keys_lookup(k, R2, on_result, &r2) == NULL);
	CHECK_EQ_INT(r2.calls, 2);
	CHECK_EQ_INT(r2.res, RELAY_KEYS_ERROR);
	{
		struct strbuf sb;

		strbuf_init(&sb, 1 << 16);
		relay_keys_metrics(k, &sb);
		CHECK_HAS(sb.p, "rally_relay_tunnel_keys_db_up 0\n");
		CHECK_HAS(sb.p, "rally_relay_tunnel_keys_errors_total{reason=\"db_down\"} 2\n");
		CHECK_HAS(sb.p, "rally_relay_tunnel_keys_lookups_total{result=\"unknown\"} 1\n");
		strbuf_release(&sb);
	}
	relay_keys_free(k);
	ev_loop_free(loop);
}

/*
 * A server that accepts TCP and never says a word: the connection stays
 * in its handshake, so lookups queue. The queue holds
 * RELAY_KEYS_MAX_PENDING; cancelled ones never call back; the rest end at
 * their deadline; then the connect deadline gives the attempt up; free
 * drops what is left without callbacks.
 */
static struct result silent[RELAY_KEYS_MAX_PENDING + 1];
static char tapped[512];

static void tap_line(const char *text, size_t len, void *arg)
{
	(void)arg;
	if (strstr(tapped, "keys-db-down") == NULL)
		snprintf(tapped, sizeof(tapped), "%.*s", (int)len, text);
}

static void test_pg_silent_server(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sin);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct relay_keys_req *reqs[RELAY_KEYS_MAX_PENDING + 1];
	struct relay_keys *k;
	char conninfo[128];
	int done = 0;
	long long t0;

	CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0 &&
	      listen(fd, 8) == 0 && getsockname(fd, (struct sockaddr *)&sin, &len) == 0);
	snprintf(conninfo, sizeof(conninfo),
		 "host=127.0.0.1 port=%u dbname=coa_registry user=coa_relay sslmode=disable",
		 ntohs(sin.sin_port));
	k = relay_keys_new(loop, NULL, conninfo);
	CHECK(k != NULL);
	if (k == NULL)
		goto out;
	t0 = ev_monotonic_ms();
	for (int i = 0; i < RELAY_KEYS_MAX_PENDING + 1; i++)
		reqs[i] = relay_keys_lookup(k, R1, on_result, &silent[i]);
	for (int i = 0; i < RELAY_KEYS_MAX_PENDING; i++)
		CHECK(reqs[i] != NULL && silent[i].calls == 0);
	/* One too many: refused before lookup returns. */
	CHECK(reqs[RELAY_KEYS_MAX_PENDING] == NULL);
	CHECK_EQ_INT(silent[RELAY_KEYS_MAX_PENDING].calls, 1);
	CHECK_EQ_INT(silent[RELAY_KEYS_MAX_PENDING].res, RELAY_KEYS_ERROR);
	/* A cancelled slot is free again. */
	relay_keys_cancel(reqs[0]);
	relay_keys_cancel(reqs[1]);
	reqs[0] = relay_keys_lookup(k, R2, on_result, &silent[0]);
	CHECK(reqs[0] != NULL);

	/* The deadline ends each one, none early. */
	for (int i = 2; i < RELAY_KEYS_MAX_PENDING; i++) {
		run_until(loop, &silent[i].calls, 1, RELAY_KEYS_LOOKUP_TIMEOUT_MS + 2000);
		done += silent[i].calls == 1 && silent[i].res == RELAY_KEYS_ERROR;
	}
	CHECK_EQ_INT(done, RELAY_KEYS_MAX_PENDING - 2);
	CHECK(ev_monotonic_ms() - t0 >= RELAY_KEYS_LOOKUP_TIMEOUT_MS);
	CHECK(ev_monotonic_ms() - t0 < RELAY_KEYS_LOOKUP_TIMEOUT_MS + 1500);
	run_until(loop, &silent[0].calls, 1, 1000);
	CHECK_EQ_INT(silent[0].calls, 1);
	CHECK_EQ_INT(silent[1].calls, 0);
	{
		struct strbuf sb;

		strbuf_init(&sb, 1 << 16);
		relay_keys_metrics(k, &sb);
		CHECK_HAS(sb.p, "rally_relay_tunnel_keys_errors_total{reason=\"timeout\"} 255\n");
		CHECK_HAS(sb.p, "rally_relay_tunnel_keys_errors_total{reason=\"queue_full\"} 1\n");
		CHECK_HAS(sb.p, "rally_relay_tunnel_keys_cancelled_total 2\n");
		CHECK_HAS(sb.p, "rally_relay_tunnel_keys_pending 0\n");
		strbuf_release(&sb);
	}
	/* The handshake never ends: the connect deadline gives up on it, and
	 * the database is down for lookups until the next attempt. */
	{
		struct result late = {0};

		tapped[0] = '\0';
		log_set_tap(tap_line, NULL);
		while (strstr(tapped, "keys-db-down") == NULL &&
		       ev_monotonic_ms() - t0 < RELAY_KEYS_CONNECT_TIMEOUT_MS + 2000)
			ev_loop_run_once(loop, 50);
		log_set_tap(NULL, NULL);
		CHECK_HAS(tapped, "keys-db-down reason=connect-timeout");
		CHECK(ev_monotonic_ms() - t0 >= RELAY_KEYS_CONNECT_TIMEOUT_MS);
		CHECK(relay_keys_lookup(k, R1, on_result, &late) == NULL);
		CHECK(late.calls == 1 && late.res == RELAY_KEYS_ERROR);
	}
	/* Free drops the waiting ones without their callbacks: the next
	 * attempt's, made as soon as the backoff allows. */
	run_until(loop, &(int){0}, 1, RELAY_KEYS_BACKOFF_MIN_MS + 200);
	memset(silent, 0, sizeof(silent));
	for (int i = 0; i < 3; i++)
		CHECK(relay_keys_lookup(k, R3, on_result, &silent[i]) != NULL);
	ev_loop_run_once(loop, 10);
	relay_keys_free(k);
	for (int i = 0; i < 3; i++)
		CHECK_EQ_INT(silent[i].calls, 0);
out:
	if (fd >= 0)
		close(fd);
	ev_loop_free(loop);
}

int main(void)
{
	ev_block_signals();
	log_init(LOG_LEVEL_WARN, LOG_TARGET_PLAIN);
	snprintf(dir, sizeof(dir), "/tmp/relaykeys-test-XXXXXX");
	if (mkdtemp(dir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	test_canon_uuid();
	test_parse_key();
	test_file_good();
	test_empty_file();
	test_file_errors();
	test_cap();
	test_reload();
	test_pg_no_server();
	test_pg_silent_server();
	{
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", dir);
	}
	return tap_done("relaykeys");
}
