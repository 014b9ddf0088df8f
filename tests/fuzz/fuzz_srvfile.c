/*
 * Fuzz target for the servers file (relay/relay_srvfile): any bytes as
 * --servers FILE.
 *
 * Invariants checked:
 * - the result is -EINVAL with a non-empty message and a line within the
 *   file, or a count of servers within the cap;
 * - every server parsed is complete: a valid unique name, one or two
 *   listen addresses, a game server (HOST:PORT with a port, or a tunnel
 *   realm), no-heartbeat exactly when there is no master, at most 16
 *   masters with ports, tags that fit, every number in its key's range;
 * - round trip: relay_srvfile_format of the servers parses again to the
 *   same count of servers, each equal to the first parse's.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "relay.h"
#include "relay_srvfile.h"
#include "strbuf.h"

static struct relay_server_cfg a[RELAY_MAX_SERVERS], b[RELAY_MAX_SERVERS];

static void check_server(const struct relay_server_cfg *c)
{
	FUZZ_CHECK(relay_server_name_ok(c->name, strlen(c->name)));
	FUZZ_CHECK(c->nlisten >= 1 && c->nlisten <= RELAY_MAX_LISTEN);
	FUZZ_CHECK(c->server_set);
	if (c->server_tunnel)
		FUZZ_CHECK(strlen(c->server_realm) == 36);
	else
		FUZZ_CHECK(c->server_port != 0 && c->server_host[0] != '\0');
	FUZZ_CHECK(c->no_heartbeat == (c->nmasters == 0));
	FUZZ_CHECK(c->nmasters <= RELAY_MAX_MASTERS);
	for (size_t i = 0; i < c->nmasters; i++)
		FUZZ_CHECK(c->masters[i].port != 0);
	FUZZ_CHECK(c->heartbeat_tag[0] != '\0' && strlen(c->heartbeat_tag) < RELAY_TAG_MAX);
	FUZZ_CHECK(c->flatline_tag[0] != '\0' && strlen(c->flatline_tag) < RELAY_TAG_MAX);
	FUZZ_CHECK(c->heartbeat_interval_ms >= 1000 && c->heartbeat_interval_ms <= 86400000LL);
	FUZZ_CHECK(c->session_timeout_ms >= 1000 && c->session_timeout_ms <= 86400000LL);
	FUZZ_CHECK(c->unconfirmed_timeout_ms >= 1000 && c->unconfirmed_timeout_ms <= 86400000LL);
	FUZZ_CHECK(c->probe_timeout_ms >= 10 && c->probe_timeout_ms <= 60000);
	FUZZ_CHECK(c->max_sessions >= 1 && c->max_sessions <= 65536);
	FUZZ_CHECK(c->query_budget <= 1000000);
	FUZZ_CHECK(relay_server_cfg_equal(c, c));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cfg_err err;
	struct strbuf sb;
	size_t lines = 1;
	int n, m;

	for (size_t i = 0; i < size; i++)
		lines += data[i] == '\n';
	n = relay_srvfile_parse((const char *)data, size, a, RELAY_MAX_SERVERS, &err);
	if (n < 0) {
		FUZZ_CHECK(n == -EINVAL);
		FUZZ_CHECK(err.msg[0] != '\0' && strlen(err.msg) < sizeof(err.msg));
		FUZZ_CHECK(err.line >= 0 && (size_t)err.line <= lines);
		return 0;
	}
	FUZZ_CHECK(n <= RELAY_MAX_SERVERS);
	for (int i = 0; i < n; i++) {
		check_server(&a[i]);
		for (int k = 0; k < i; k++)
			FUZZ_CHECK(strcmp(a[i].name, a[k].name) != 0);
	}
	strbuf_init(&sb, 4 * RELAY_SRVFILE_MAX);
	relay_srvfile_format(a, (size_t)n, &sb);
	FUZZ_CHECK(!sb.bad);
	m = relay_srvfile_parse(sb.p != NULL ? sb.p : "", sb.len, b, RELAY_MAX_SERVERS, &err);
	if (m != n)
		fprintf(stderr, "reparse: %d (line %d: %s)\n%.*s\n", m, err.line, err.msg,
			(int)(sb.len < 4000 ? sb.len : 4000), sb.p != NULL ? sb.p : "");
	FUZZ_CHECK(m == n);
	for (int i = 0; i < n; i++)
		FUZZ_CHECK(relay_server_cfg_equal(&a[i], &b[i]));
	strbuf_release(&sb);
	return 0;
}
