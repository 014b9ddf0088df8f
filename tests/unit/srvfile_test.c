/*
 * relay/relay_srvfile: the servers file and the one-server keys. A full
 * file with [defaults] (inheritance, the first master or listen line of a
 * section replacing the inherited list, no-heartbeat), comments at the
 * start and end of lines, CRLF; every key's range and unit; each refusal
 * with its line (unknown key or section, a global flag in the file, a
 * missing listen or server, bad names, names twice, listen addresses that
 * clash, dual-stack against IPv4 on one port, a realm twice, [defaults]
 * after a server, control bytes, an oversize line, too many servers);
 * equality and the IPv6-only rule.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "relay.h"
#include "relay_srvfile.h"
#include "strbuf.h"
#include "tap.h"

static struct relay_server_cfg out[RELAY_MAX_SERVERS];

static int parse(const char *text, struct cfg_err *err)
{
	return relay_srvfile_parse(text, strlen(text), out, RELAY_MAX_SERVERS, err);
}

/* The file must be refused at line with msg containing word. */
static void refused(const char *text, int line, const char *word)
{
	struct cfg_err err;
	int n = parse(text, &err);

	CHECK_EQ_INT(n, -EINVAL);
	CHECK_EQ_INT(err.line, line);
	if (strstr(err.msg, word) == NULL) {
		CHECK(strstr(err.msg, word) != NULL);
		fprintf(stderr, "  message: %s (wanted \"%s\")\n", err.msg, word);
	}
}

static const char *addr(const struct addr *a)
{
	static char buf[4][ADDR_STRLEN];
	static int k;

	k = (k + 1) % 4;
	return addr_str(a, buf[k], sizeof(buf[k]));
}

static void full_file(void)
{
	static const char text[] = "# rally-relay servers\n"
				   "; another comment\n"
				   "\n"
				   "[defaults]\n"
				   "master = master.example.net:27950\n"
				   "master = [2001:db8::1]:27950   # a second one\n"
				   "heartbeat-tag = QuakeArena-1\n"
				   "flatline-tag=QuakeArena-1\n"
				   "query-budget = 50\n"
				   "\n"
				   "[server ctf]\n"
				   "listen = [::]:27960\n"
				   "server = 10.0.0.2:27960\r\n"
				   "\n"
				   "  [ server  dm-2 ]  \n"
				   "\tlisten = 0.0.0.0:27961\n"
				   "listen = [::]:27961\n"
				   "server = game.example.net:27961\n"
				   "master = 127.0.0.1:27950\n"
				   "max-sessions = 64\n"
				   "session-timeout = 30\n"
				   "probe-timeout = 500\n"
				   "unconfirmed-timeout = 5\n"
				   "heartbeat-interval = 60\n"
				   "\n"
				   "[server quiet_1]\n"
				   "listen = 127.0.0.1:0\n"
				   "server = tunnel:01234567-89AB-CDEF-0123-456789abcdef\n"
				   "no-heartbeat = yes\n";
	struct cfg_err err;
	int n = parse(text, &err);

	CHECK_EQ_INT(n, 3);
	if (n != 3) {
		fprintf(stderr, "  line %d: %s\n", err.line, err.msg);
		return;
	}
	CHECK_EQ_STR(out[0].name, "ctf");
	CHECK_EQ_INT(out[0].nlisten, 1);
	CHECK_EQ_STR(addr(&out[0].listen[0]), "[::]:27960");
	CHECK(!relay_server_cfg_v6only(&out[0], 0)); /* alone: dual-stack */
	CHECK_EQ_STR(out[0].server_host, "10.0.0.2");
	CHECK_EQ_INT(out[0].server_port, 27960);
	CHECK(!out[0].server_tunnel);
	CHECK_EQ_INT(out[0].nmasters, 2);
	CHECK_EQ_STR(out[0].masters[0].host, "master.example.net");
	CHECK_EQ_STR(out[0].masters[1].host, "2001:db8::1");
	CHECK_EQ_INT(out[0].masters[1].port, 27950);
	CHECK_EQ_STR(out[0].heartbeat_tag, "QuakeArena-1");
	CHECK_EQ_STR(out[0].flatline_tag, "QuakeArena-1");
	CHECK_EQ_INT(out[0].query_budget, 50);
	CHECK_EQ_INT(out[0].max_sessions, RELAY_MAX_SESSIONS);
	CHECK_EQ_INT(out[0].session_timeout_ms, RELAY_SESSION_TIMEOUT_MS);
	CHECK_EQ_INT(out[0].heartbeat_interval_ms, RELAY_HEARTBEAT_INTERVAL_S * 1000LL);

	CHECK_EQ_STR(out[1].name, "dm-2");
	CHECK_EQ_INT(out[1].nlisten, 2);
	CHECK_EQ_STR(addr(&out[1].listen[0]), "0.0.0.0:27961");
	CHECK_EQ_STR(addr(&out[1].listen[1]), "[::]:27961");
	CHECK(!relay_server_cfg_v6only(&out[1], 0));
	CHECK(relay_server_cfg_v6only(&out[1], 1)); /* IPv4 beside it */
	CHECK_EQ_STR(out[1].server_host, "game.example.net");
	/* Its own master line replaced the inherited two. */
	CHECK_EQ_INT(out[1].nmasters, 1);
	CHECK_EQ_STR(out[1].masters[0].host, "127.0.0.1");
	CHECK_EQ_INT(out[1].max_sessions, 64);
	CHECK_EQ_INT(out[1].session_timeout_ms, 30000);
	CHECK_EQ_INT(out[1].probe_timeout_ms, 500);
	CHECK_EQ_INT(out[1].unconfirmed_timeout_ms, 5000);
	CHECK_EQ_INT(out[1].heartbeat_interval_ms, 60000);
	CHECK_EQ_INT(out[1].query_budget, 50);

	CHECK_EQ_STR(out[2].name, "quiet_1");
	CHECK(out[2].server_tunnel);
	CHECK_EQ_STR(out[2].server_realm, "01234567-89ab-cdef-0123-456789abcdef");
	CHECK(out[2].no_heartbeat);
	CHECK_EQ_INT(out[2].nmasters, 0);
	CHECK_EQ_INT(addr_port(&out[2].listen[0]), 0);

	/* Equality: the same text twice gives equal servers; one key
	 * changes one of them. */
	{
		static struct relay_server_cfg again[RELAY_MAX_SERVERS];
		char *t2 = strdup(text), *p;

		CHECK_EQ_INT(
			relay_srvfile_parse(text, strlen(text), again, RELAY_MAX_SERVERS, &err), 3);
		for (int i = 0; i < 3; i++)
			CHECK(relay_server_cfg_equal(&out[i], &again[i]));
		CHECK(!relay_server_cfg_equal(&out[0], &again[1]));
		p = strstr(t2, "max-sessions = 64");
		memcpy(p, "max-sessions = 65", 17);
		CHECK_EQ_INT(relay_srvfile_parse(t2, strlen(t2), again, RELAY_MAX_SERVERS, &err),
			     3);
		CHECK(relay_server_cfg_equal(&out[0], &again[0]));
		CHECK(!relay_server_cfg_equal(&out[1], &again[1]));
		free(t2);
	}
}

static void defaults_and_masters(void)
{
	struct cfg_err err;

	/* No master anywhere: the seed's two. */
	CHECK_EQ_INT(parse("[server a]\nlisten = 127.0.0.1:1\nserver = 127.0.0.1:2\n", &err), 1);
	CHECK_EQ_INT(out[0].nmasters, 2);
	CHECK_EQ_STR(out[0].masters[0].host, "etmaster.net");
	CHECK_EQ_STR(out[0].heartbeat_tag, "EnemyTerritory-1");
	/* no-heartbeat under [defaults], a master in a section turns it on
	 * there only. */
	CHECK_EQ_INT(parse("[defaults]\nno-heartbeat = yes\n"
			   "[server a]\nlisten = 127.0.0.1:1\nserver = 127.0.0.1:2\n"
			   "[server b]\nlisten = 127.0.0.1:3\nserver = 127.0.0.1:2\n"
			   "master = 127.0.0.1:9\n",
			   &err),
		     2);
	CHECK_EQ_INT(out[0].nmasters, 0);
	CHECK(out[0].no_heartbeat);
	CHECK_EQ_INT(out[1].nmasters, 1);
	CHECK(!out[1].no_heartbeat);
	/* Masters under [defaults], no-heartbeat in a section. */
	CHECK_EQ_INT(parse("[defaults]\nmaster = 127.0.0.1:9\n"
			   "[server a]\nlisten = 127.0.0.1:1\nserver = 127.0.0.1:2\n"
			   "no-heartbeat = true\n"
			   "[server b]\nlisten = 127.0.0.1:3\nserver = 127.0.0.1:2\n",
			   &err),
		     2);
	CHECK_EQ_INT(out[0].nmasters, 0);
	CHECK_EQ_INT(out[1].nmasters, 1);
	CHECK_EQ_INT(out[1].masters[0].port, 9);
	/* no-heartbeat = no keeps heartbeats. */
	CHECK_EQ_INT(parse("[server a]\nlisten = 127.0.0.1:1\nserver = 127.0.0.1:2\n"
			   "no-heartbeat = off\n",
			   &err),
		     1);
	CHECK_EQ_INT(out[0].nmasters, 2);
	/* 16 masters fit, 17 do not. */
	{
		char text[2048];
		size_t n = (size_t)snprintf(text, sizeof(text),
					    "[server a]\nlisten = 127.0.0.1:1\n"
					    "server = 127.0.0.1:2\n");

		for (int i = 0; i < 16; i++)
			n += (size_t)snprintf(text + n, sizeof(text) - n, "master = m%d:1\n", i);
		CHECK_EQ_INT(parse(text, &err), 1);
		CHECK_EQ_INT(out[0].nmasters, 16);
		snprintf(text + n, sizeof(text) - n, "master = m16:1\n");
		refused(text, 20, "at most 16");
	}
	/* A file without servers is valid (a tunnel alone, for a while). */
	CHECK_EQ_INT(parse("# nothing yet\n", &err), 0);
	CHECK_EQ_INT(parse("", &err), 0);
	/* The last line without its newline. */
	CHECK_EQ_INT(parse("[server a]\nlisten = 127.0.0.1:1\nserver = 127.0.0.1:2", &err), 1);
}

static void refusals(void)
{
	const char *ok = "[server a]\nlisten = 127.0.0.1:1\nserver = 127.0.0.1:2\n";
	char big[4096];

	refused("listen = 127.0.0.1:1\n", 1, "outside a section");
	refused("[server a]\nlisten 127.0.0.1:1\n", 2, "expected key = value");
	refused("[server a]\n= 1\n", 2, "no key");
	refused("[server a]\nlisten =\n", 2, "no value");
	refused("[server a]\nbogus = 1\n", 2, "unknown key");
	refused("[server a]\ncontrol = 127.0.0.1:1\n", 2, "whole relay");
	refused("[server a]\ntunnel-listen = 127.0.0.1:1\n", 2, "whole relay");
	refused("[server a]\nstate-dir = /tmp\n", 2, "whole relay");
	refused("[servers a]\n", 1, "unknown section");
	refused("[server a\n", 1, "expected [server NAME]");
	refused("[server]\n", 1, "unknown section");
	refused("[server A]\n", 1, "bad server name");
	refused("[server -a]\n", 1, "bad server name");
	refused("[server a/b]\n", 1, "bad server name");
	refused("[server ../x]\n", 1, "bad server name");
	refused("[server aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa]\n", 1, "bad server name"); /* 33 */
	refused("[server a]\nserver = 127.0.0.1:2\n", 1, "no listen");
	refused("[server a]\nlisten = 127.0.0.1:1\n", 1, "no server");
	refused("[server a]\nlisten = 127.0.0.1:1\nserver = 127.0.0.1:2\n[server b]\n", 4,
		"no listen");
	refused("[server a]\nlisten = localhost:1\n", 2, "listen: expected IP:PORT");
	refused("[server a]\nlisten = 127.0.0.1:1\nlisten = [::1]:1\nlisten = 127.0.0.2:1\n", 4,
		"at most 2");
	refused("[server a]\nlisten = 127.0.0.1:1\nlisten = 127.0.0.1:1\nserver = 127.0.0.1:2\n", 1,
		"same listen address twice");
	refused("[server a]\nserver = 127.0.0.1\n", 2, "server: expected HOST:PORT");
	refused("[server a]\nserver = 127.0.0.1:0\n", 2, "server: expected HOST:PORT");
	refused("[server a]\nserver = tunnel:nope\n", 2, "tunnel:REALM_UUID");
	refused("[server a]\nmaster = x\n", 2, "master: expected HOST:PORT");
	/* Hosts are names or literals: nothing that breaks HOST:PORT again
	 * (found by fuzz_srvfile: "[[1]:2" read as the host "[1"). */
	refused("[server a]\nserver = [[1]:2\n", 2, "server: expected HOST:PORT");
	refused("[server a]\nmaster=#h:1\n", 2, "master: not a host name or an IP address");
	refused("[server a]\nmaster = a b:1\n", 2, "master: not a host name or an IP address");
	CHECK_EQ_INT(parse("[server a]\nlisten = 127.0.0.1:1\nserver = [fe80::1%lo]:2\n"
			   "master = [::1]:3\nmaster = my_master-1.example:4\n",
			   &(struct cfg_err){0}),
		     1);
	CHECK_EQ_STR(out[0].server_host, "fe80::1%lo");
	refused("[server a]\nno-heartbeat = maybe\n", 2, "yes or no");
	refused("[server a]\nheartbeat-tag = two words\n", 2, "no spaces");
	refused("[server a]\nheartbeat-tag = a\"b\n", 2, "no spaces");
	refused("[server a]\nmax-sessions = 0\n", 2, "1-65536");
	refused("[server a]\nmax-sessions = 65537\n", 2, "1-65536");
	refused("[server a]\nmax-sessions = 12x\n", 2, "whole number");
	refused("[server a]\nquery-budget = -1\n", 2, "0-1000000");
	refused("[server a]\nheartbeat-interval = 86401\n", 2, "1-86400");
	refused("[server a]\nprobe-timeout = 9\n", 2, "10-60000");
	refused("[server a]\nsession-timeout = 0\n", 2, "1-86400");
	refused("[server a]\nlisten = 127.0.0.1:1\nserver = 127.0.0.1:2\nmaster = 127.0.0.1:3\n"
		"no-heartbeat = yes\n",
		1, "exclude each other");
	refused("[defaults]\nlisten = 127.0.0.1:1\n", 2, "belongs in a [server");
	refused("[defaults]\nserver = 127.0.0.1:1\n", 2, "belongs in a [server");
	snprintf(big, sizeof(big), "%s[defaults]\n", ok);
	refused(big, 4, "before the first");
	refused("[defaults]\n[defaults]\n", 2, "second [defaults]");
	snprintf(big, sizeof(big), "%s[server a]\n", ok);
	refused(big, 4, "again (first on line 1)");
	refused("[server a]\nlisten = 127.0.0.1:1\x01\n", 2, "control byte");
	{
		char nul[] = "[server a]\nlisten = 1\0\n";

		CHECK_EQ_INT(relay_srvfile_parse(nul, sizeof(nul) - 1, out, RELAY_MAX_SERVERS,
						 &(struct cfg_err){0}),
			     -EINVAL);
	}
	memset(big, 'x', sizeof(big));
	memcpy(big, "# ", 2);
	big[sizeof(big) - 1] = '\0';
	refused(big, 1, "longer than 1024");
	/* Shared addresses: exact, wildcard of the family, dual-stack. */
	refused("[server a]\nlisten = 127.0.0.1:5\nserver = 127.0.0.1:2\n"
		"[server b]\nlisten = 127.0.0.1:5\nserver = 127.0.0.1:2\n",
		4, "clashes with [server a]");
	refused("[server a]\nlisten = 0.0.0.0:5\nserver = 127.0.0.1:2\n"
		"[server b]\nlisten = 127.0.0.1:5\nserver = 127.0.0.1:2\n",
		4, "clashes");
	refused("[server a]\nlisten = [::]:5\nserver = 127.0.0.1:2\n"
		"[server b]\nlisten = 127.0.0.1:5\nserver = 127.0.0.1:2\n",
		4, "clashes");
	refused("[server a]\nlisten = [::1]:5\nserver = 127.0.0.1:2\n"
		"[server b]\nlisten = [::]:5\nlisten = 0.0.0.0:6\nserver = 127.0.0.1:2\n",
		4, "clashes");
	/* ...and what may share a port: two addresses, a v6-only "[::]" and
	 * an IPv4 address, port 0. */
	CHECK_EQ_INT(
		parse("[server a]\nlisten = 127.0.0.1:5\nserver = 127.0.0.1:2\n"
		      "[server b]\nlisten = 127.0.0.2:5\nserver = 127.0.0.1:2\n"
		      "[server c]\nlisten = [::]:5\nlisten = 127.0.0.3:6\nserver = 127.0.0.1:2\n"
		      "[server d]\nlisten = 127.0.0.1:0\nserver = 127.0.0.1:2\n"
		      "[server e]\nlisten = 127.0.0.1:0\nserver = 127.0.0.1:2\n",
		      &(struct cfg_err){0}),
		5);
	refused("[server a]\nlisten = 127.0.0.1:1\n"
		"server = tunnel:01234567-89ab-cdef-0123-456789abcdef\n"
		"[server b]\nlisten = 127.0.0.1:2\n"
		"server = tunnel:01234567-89AB-cdef-0123-456789ABCDEF\n",
		4, "realm");
	/* Too many servers. */
	{
		size_t cap = (size_t)(RELAY_MAX_SERVERS + 1) * 80, n = 0;
		char *text = malloc(cap);

		for (int i = 0; i <= RELAY_MAX_SERVERS; i++)
			n += (size_t)snprintf(text + n, cap - n,
					      "[server s%d]\nlisten = 127.0.0.1:0\nserver = "
					      "127.0.0.1:2\n",
					      i);
		refused(text, 3 * RELAY_MAX_SERVERS + 1, "more than 64");
		free(text);
	}
	/* Oversize file. */
	{
		char *text = calloc(1, RELAY_SRVFILE_MAX + 2);
		struct cfg_err err;

		memset(text, '\n', RELAY_SRVFILE_MAX + 1);
		CHECK_EQ_INT(relay_srvfile_parse(text, RELAY_SRVFILE_MAX + 1, out,
						 RELAY_MAX_SERVERS, &err),
			     -EINVAL);
		CHECK_EQ_INT(err.line, 0);
		free(text);
	}
}

/* The command line's path: one server, defaults, the same setter. */
static void flags(void)
{
	struct relay_server_cfg c;
	char err[120];

	relay_server_cfg_defaults(&c);
	CHECK_EQ_STR(addr(&c.listen[0]), "0.0.0.0:27960");
	CHECK_EQ_INT(relay_server_cfg_finish(&c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "no server") != NULL);
	CHECK_EQ_INT(relay_server_cfg_set(&c, "server", "127.0.0.1:27960", err, sizeof(err)), 0);
	CHECK_EQ_INT(relay_server_cfg_set(&c, "listen", "[::]:5", err, sizeof(err)), 0);
	CHECK_EQ_INT(c.nlisten, 1); /* the first replaced the default */
	CHECK_EQ_INT(relay_server_cfg_set(&c, "listen", "0.0.0.0:5", err, sizeof(err)), 0);
	CHECK_EQ_INT(relay_server_cfg_set(&c, "nope", "1", err, sizeof(err)), -ENOENT);
	CHECK_EQ_INT(relay_server_cfg_set(&c, "max-sessions", "0", err, sizeof(err)), -EINVAL);
	CHECK_EQ_INT(relay_server_cfg_finish(&c, err, sizeof(err)), 0);
	CHECK_EQ_INT(c.nmasters, 2);
	CHECK(relay_server_cfg_v6only(&c, 0));
	CHECK(!relay_server_cfg_v6only(&c, 1)); /* IPv4 */
	CHECK(relay_server_name_ok("a", 1));
	CHECK(relay_server_name_ok("0-z_9", 5));
	CHECK(!relay_server_name_ok("", 0));
	CHECK(!relay_server_name_ok("_a", 2));
	CHECK(!relay_server_name_ok("a.b", 3));
}

/* transparent = yes (--transparent): inherited from [defaults], turned off
 * per server, written back by the formatter, refused for a tunnel server
 * (the agent takes the player's address at home). */
static void transparent(void)
{
	struct relay_server_cfg again[4];
	struct cfg_err err;
	struct strbuf b;

	CHECK_EQ_INT(parse("[defaults]\ntransparent = yes\nno-heartbeat = yes\n"
			   "[server a]\nlisten = 127.0.0.1:1\nserver = 127.0.0.1:2\n"
			   "[server b]\nlisten = 127.0.0.1:3\nserver = 127.0.0.1:4\n"
			   "transparent = no\n",
			   &err),
		     2);
	CHECK(out[0].transparent);
	CHECK(!out[1].transparent);
	strbuf_init(&b, 1 << 16);
	relay_srvfile_format(out, 2, &b);
	CHECK(b.p != NULL && strstr(b.p, "transparent=yes") != NULL);
	CHECK_EQ_INT(relay_srvfile_parse(b.p, b.len, again, 4, &err), 2);
	CHECK(relay_server_cfg_equal(&out[0], &again[0]));
	CHECK(relay_server_cfg_equal(&out[1], &again[1]));
	/* The key counts in the comparison a reload makes. */
	again[0].transparent = false;
	CHECK(!relay_server_cfg_equal(&out[0], &again[0]));
	strbuf_release(&b);
	refused("[server a]\ntransparent = maybe\n", 2, "yes or no");
	refused("[server a]\nlisten = 127.0.0.1:1\n"
		"server = tunnel:01234567-89ab-cdef-0123-456789abcdef\ntransparent = yes\n",
		1, "rally-relay agent --transparent");
}

int main(void)
{
	full_file();
	transparent();
	defaults_and_masters();
	refusals();
	flags();
	return tap_done("srvfile");
}
