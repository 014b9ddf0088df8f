/*
 * master_redis_codec (the --redis URL, key names, channel messages, value
 * envelopes, knock notes, relay values) and the registry's side of the
 * shared registry (merge by age, newer-wins against our own entries,
 * unmerge, unconfirmed entries after a sync, the per-turn publish queue).
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ev.h"
#include "master.h"
#include "master_redis.h"
#include "strbuf.h"
#include "tap.h"

static void test_url(void)
{
	struct master_redis_url u;
	char err[160];

	CHECK_EQ_INT(master_redis_url_parse("127.0.0.1:6379", &u, err, sizeof(err)), 0);
	CHECK(u.transport == MASTER_REDIS_TCP && u.port == 6379 && u.db == -1);
	CHECK_EQ_STR(u.host, "127.0.0.1");
	CHECK_EQ_INT(
		master_redis_url_parse("redis://rally@redis.example:6380/3", &u, err, sizeof(err)),
		0);
	CHECK_EQ_STR(u.host, "redis.example");
	CHECK_EQ_STR(u.user, "rally");
	CHECK(u.port == 6380 && u.db == 3);
	CHECK_EQ_INT(master_redis_url_parse("redis://[::1]/", &u, err, sizeof(err)), 0);
	CHECK_EQ_STR(u.host, "::1");
	CHECK(u.port == 6379 && u.db == -1);
	CHECK_EQ_INT(master_redis_url_parse("unix:/run/redis.sock", &u, err, sizeof(err)), 0);
	CHECK(u.transport == MASTER_REDIS_UNIX);
	CHECK_EQ_STR(u.path, "/run/redis.sock");
	/* Refused: a password in the URL, other schemes, bad ports, no port,
	 * IPv6 without brackets, a relative socket, junk. */
	CHECK_EQ_INT(master_redis_url_parse("redis://u:secret@h:1", &u, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "password-file") != NULL);
	CHECK_EQ_INT(master_redis_url_parse("rediss://h:1", &u, err, sizeof(err)), -EINVAL);
	CHECK_EQ_INT(master_redis_url_parse("h:0", &u, err, sizeof(err)), -EINVAL);
	CHECK_EQ_INT(master_redis_url_parse("h:65536", &u, err, sizeof(err)), -EINVAL);
	CHECK_EQ_INT(master_redis_url_parse("h", &u, err, sizeof(err)), -EINVAL);
	CHECK_EQ_INT(master_redis_url_parse("::1:6379", &u, err, sizeof(err)), -EINVAL);
	CHECK_EQ_INT(master_redis_url_parse("unix:run/redis.sock", &u, err, sizeof(err)), -EINVAL);
	CHECK_EQ_INT(master_redis_url_parse("redis://h:1/db", &u, err, sizeof(err)), -EINVAL);
	CHECK_EQ_INT(master_redis_url_parse("h o:1", &u, err, sizeof(err)), -EINVAL);
	CHECK_EQ_INT(master_redis_url_parse(":6379", &u, err, sizeof(err)), -EINVAL);
}

static void test_names_keys(void)
{
	struct master_redis_key k;
	uint8_t bin[3];
	char hex[7];
	const char *key;

	CHECK(master_redis_name_ok("rally-1.prod_x", 14));
	CHECK(!master_redis_name_ok("", 0));
	CHECK(!master_redis_name_ok("a b", 3));
	CHECK(!master_redis_name_ok("a:b", 3));
	CHECK(!master_redis_name_ok("0123456789abcdef0123456789abcdef0", 33));

	key = "rally:reg:lobbies:00ff";
	CHECK_EQ_INT(master_redis_key_parse("rally", key, strlen(key), &k), 0);
	CHECK(k.type == MASTER_REDIS_KEY_REG);
	CHECK_EQ_STR(k.kind, "lobbies");
	CHECK_EQ_STR(k.hex, "00ff");
	key = "rally:knock:0123456789abcdef01234567";
	CHECK_EQ_INT(master_redis_key_parse("rally", key, strlen(key), &k), 0);
	CHECK(k.type == MASTER_REDIS_KEY_KNOCK);
	key = "rally:relay:abababababababababababababababababababababababababababababababab";
	CHECK_EQ_INT(master_redis_key_parse("rally", key, strlen(key), &k), 0);
	CHECK(k.type == MASTER_REDIS_KEY_RELAY);
	static const char *const bad[] = {
		"other:reg:lobbies:00ff", "rally:reg:lobbies:0ff",
		"rally:reg:lobbies:00FF", "rally:reg::00",
		"rally:reg:Lobbies:00",   "rally:reg:lobbies:",
		"rally:knock:0123",       "rally:relay:ab",
		"rally:what:00",          "rally",
		"rallyx:reg:q3:00",       "rally:reg:q3:00:00",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK_EQ_INT(master_redis_key_parse("rally", bad[i], strlen(bad[i]), &k), -EBADMSG);

	CHECK_EQ_INT(master_redis_hex_decode("00a1ff", bin, 3), 0);
	CHECK(bin[0] == 0 && bin[1] == 0xa1 && bin[2] == 0xff);
	master_redis_hex_encode(bin, 3, hex);
	CHECK_EQ_STR(hex, "00a1ff");
	CHECK_EQ_INT(master_redis_hex_decode("00A1FF", bin, 3), -EBADMSG);
	CHECK_EQ_INT(master_redis_hex_decode("00a1f", bin, 3), -EBADMSG);
}

static int msg(const char *s, struct master_redis_msg *m)
{
	return master_redis_msg_parse(s, strlen(s), m);
}

static void test_messages(void)
{
	struct master_redis_msg m;

	CHECK_EQ_INT(msg("a s lobbies 00ff", &m), 0);
	CHECK(m.op == MASTER_REDIS_OP_SET);
	CHECK_EQ_STR(m.node, "a");
	CHECK_EQ_STR(m.kind, "lobbies");
	CHECK_EQ_STR(m.hex, "00ff");
	CHECK_EQ_INT(msg("node-2 d q3 0011 1796618469000", &m), 0);
	CHECK(m.op == MASTER_REDIS_OP_DEL && m.wall_ms == 1796618469000LL);
	CHECK_EQ_INT(msg("b k 0123456789abcdef01234567", &m), 0);
	CHECK(m.op == MASTER_REDIS_OP_KNOCK);
	CHECK_EQ_INT(
		msg("b x abababababababababababababababababababababababababababababababab", &m), 0);
	CHECK(m.op == MASTER_REDIS_OP_RELAY_DEL);
	static const char *const bad[] = {
		"",
		"a",
		"a s",
		"a s lobbies",
		"a s lobbies 0ff",
		"a s lobbies 00ff ",
		" a s lobbies 00ff",
		"a  s lobbies 00ff",
		"a s lobbies 00ff extra",
		"a d lobbies 00ff",
		"a d lobbies 00ff -1",
		"a d lobbies 00ff 1e3",
		"a z lobbies 00ff",
		"a ss lobbies 00ff",
		"a k 0123",
		"a r abab",
		"a:b s lobbies 00ff",
		"a s LOBBIES 00ff",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK_EQ_INT(msg(bad[i], &m), -EBADMSG);
}

static void test_values(void)
{
	struct master_redis_env env;
	struct master_redis_note n, n2;
	struct master_redis_relay r, r2;
	struct json_object *root;
	const char *why, *s;
	struct strbuf b;
	char big[MASTER_REDIS_VALUE_MAX + 8];

	s = "{\"v\":1,\"node\":\"a\",\"seen_ms\":5,\"entry\":{\"x\":1}}";
	CHECK_EQ_INT(master_redis_env_decode(s, strlen(s), &root, &env, &why), 0);
	CHECK(env.seen_ms == 5 && json_object_is_type(env.entry, json_type_object));
	json_object_put(root);
	s = "{\"v\":1,\"node\":\"a\",\"seen_ms\":5,\"entry\":[]}";
	CHECK_EQ_INT(master_redis_env_decode(s, strlen(s), &root, &env, &why), -EBADMSG);
	CHECK_EQ_STR(why, "envelope");
	CHECK(root == NULL);
	s = "{\"v\":1,\"node\":\"a\",\"seen_ms\":0,\"entry\":{}}";
	CHECK_EQ_INT(master_redis_env_decode(s, strlen(s), &root, &env, &why), -EBADMSG);
	s = "{\"v\":1,\"node\":\"a\",\"seen_ms\":5,\"entry\":{}";
	CHECK_EQ_INT(master_redis_env_decode(s, strlen(s), &root, &env, &why), -EBADMSG);
	CHECK_EQ_STR(why, "json");
	memset(big, ' ', sizeof(big));
	CHECK_EQ_INT(master_redis_env_decode(big, sizeof(big), &root, &env, &why), -EBADMSG);
	CHECK_EQ_STR(why, "size");
	s = "[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]";
	CHECK_EQ_INT(master_redis_env_decode(s, strlen(s), &root, &env, &why), -EBADMSG);
	CHECK_EQ_STR(why, "json");

	/* A note round-trips exactly (t as a double). */
	memset(&n, 0, sizeof(n));
	snprintf(n.node, sizeof(n.node), "node-a");
	n.t = 1796618469.123456;
	snprintf(n.blob, sizeof(n.blob), "C63wDQ==");
	n.has_relay = true;
	snprintf(n.relay.ip, sizeof(n.relay.ip), "203.0.113.5");
	n.relay.port = 29600;
	snprintf(n.relay.id, sizeof(n.relay.id), "00112233445566778899aabbccddeeff");
	strbuf_init(&b, MASTER_REDIS_VALUE_MAX);
	CHECK_EQ_INT(master_redis_note_encode(&n, &b), 0);
	CHECK_EQ_INT(master_redis_note_decode(b.p, b.len, &n2, &why), 0);
	CHECK(n2.t == n.t && n2.has_relay && n2.relay.port == 29600);
	CHECK_EQ_STR(n2.blob, n.blob);
	CHECK_EQ_STR(n2.relay.ip, "203.0.113.5");
	strbuf_release(&b);
	static const char *const bad_notes[] = {
		"{\"v\":1,\"node\":\"a\",\"t\":1.5,\"blob\":\"<b>\"}",
		"{\"v\":1,\"node\":\"a\",\"t\":1.5,\"blob\":\"\"}",
		"{\"v\":1,\"node\":\"a\",\"t\":-1,\"blob\":\"AAAA\"}",
		"{\"v\":1,\"node\":\"a\",\"t\":\"1\",\"blob\":\"AAAA\"}",
		"{\"v\":1,\"node\":\"a\",\"t\":1.5,\"blob\":\"AAAA\",\"relay\":1}",
		"{\"v\":1,\"node\":\"a\",\"t\":1.5,\"blob\":\"AAAA\",\"relay\":{\"ip\":\"::1\","
		"\"port\":1,\"id\":\"00112233445566778899aabbccddeeff\"}}",
		"{\"v\":1,\"t\":1.5,\"blob\":\"AAAA\"}",
	};
	for (size_t i = 0; i < sizeof(bad_notes) / sizeof(bad_notes[0]); i++)
		CHECK_EQ_INT(
			master_redis_note_decode(bad_notes[i], strlen(bad_notes[i]), &n2, &why),
			-EBADMSG);

	memset(&r, 0, sizeof(r));
	snprintf(r.node, sizeof(r.node), "a");
	snprintf(r.ip, sizeof(r.ip), "198.51.100.7");
	r.port = 29650;
	snprintf(r.id, sizeof(r.id), "ffeeddccbbaa99887766554433221100");
	strbuf_init(&b, MASTER_REDIS_VALUE_MAX);
	CHECK_EQ_INT(master_redis_relay_encode(&r, &b), 0);
	CHECK_EQ_INT(master_redis_relay_decode(b.p, b.len, &r2, &why), 0);
	CHECK(memcmp(&r, &r2, sizeof(r)) == 0);
	strbuf_release(&b);
	s = "{\"v\":1,\"node\":\"a\",\"ip\":\"198.51.100.7\",\"port\":0,\"id\":"
	    "\"ffeeddccbbaa99887766554433221100\"}";
	CHECK_EQ_INT(master_redis_relay_decode(s, strlen(s), &r2, &why), -EBADMSG);
	CHECK_EQ_STR(why, "relay");
}

/* ---- the registry's side, on a kind of our own ---- */

struct item {
	struct master_reg_head h;
	char name[16];
};

static void item_key(const void *val, uint8_t key[MASTER_REG_KEY_MAX])
{
	memcpy(key, ((const struct item *)val)->name, 16);
}

static void item_save(const void *val, struct json_object *o)
{
	json_object_object_add(o, "name", json_object_new_string(((const struct item *)val)->name));
}

static int item_load(struct json_object *o, void *val, char *err, size_t errsize)
{
	(void)o;
	(void)val;
	snprintf(err, errsize, "unused");
	return -EBADMSG;
}

struct sink {
	char published[16][16];
	size_t npub, ndel;
};

static void on_publish(void *arg, enum master_reg_kind kind, const uint8_t *key, const void *val)
{
	struct sink *s = arg;

	(void)kind;
	(void)key;
	if (s->npub < 16)
		snprintf(s->published[s->npub], 16, "%s", ((const struct item *)val)->name);
	s->npub++;
}

static void on_deleted(void *arg, enum master_reg_kind kind, const uint8_t *key, long long wall)
{
	(void)kind;
	(void)key;
	(void)wall;
	((struct sink *)arg)->ndel++;
}

static long long wall_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct item mk(const char *name, long long age_ms)
{
	struct item it;

	memset(&it, 0, sizeof(it));
	snprintf(it.name, sizeof(it.name), "%s", name);
	it.h.seen_wall_ms = wall_now() - age_ms;
	return it;
}

static const char *names(struct master_registry *reg, char *buf, size_t size)
{
	const struct item *it = NULL;
	size_t o = 0;

	buf[0] = '\0';
	while ((it = master_registry_next(reg, MASTER_REG_LOBBY, it)) != NULL && o < size)
		o += (size_t)snprintf(buf + o, size - o, "%s%s%s", o ? "," : "", it->name,
				      it->h.remote ? "*" : "");
	return buf;
}

static void test_registry(void)
{
	struct ev_loop *loop = ev_loop_new();
	struct master_registry *reg = master_registry_new(loop);
	const struct master_reg_kind_ops ops = {
		.name = "items",
		.val_size = sizeof(struct item),
		.key_len = 16,
		.capacity = 4,
		.ttl_ms = 10000,
		.key_of = item_key,
		.save = item_save,
		.load = item_load,
	};
	struct sink sink;
	struct master_reg_sync sync = {.publish = on_publish, .deleted = on_deleted, .arg = &sink};
	struct item it, *ours;
	uint8_t key[MASTER_REG_KEY_MAX];
	char buf[256];
	bool created;
	uint64_t gen;

	memset(&sink, 0, sizeof(sink));
	CHECK_EQ_INT(master_registry_add_kind(reg, MASTER_REG_LOBBY, &ops), 0);
	master_registry_set_sync(reg, &sync);
	CHECK_EQ_INT(master_registry_kind_by_name(reg, "items"), MASTER_REG_LOBBY);
	CHECK_EQ_INT(master_registry_kind_by_name(reg, "nope"), -ENOENT);

	/* Ours: queued, published once at the end of the turn. */
	memset(key, 0, sizeof(key));
	memcpy(key, "mine", 4);
	ours = master_registry_put(reg, MASTER_REG_LOBBY, key, &created);
	CHECK(ours != NULL && created);
	snprintf(ours->name, sizeof(ours->name), "mine");
	master_registry_refresh(reg, MASTER_REG_LOBBY, ours);
	master_registry_refresh(reg, MASTER_REG_LOBBY, ours);
	CHECK_EQ_INT(sink.npub, 0);
	ev_loop_run_once(loop, 0);
	CHECK_EQ_INT(sink.npub, 1);
	CHECK_EQ_STR(sink.published[0], "mine");

	/* Remote entries take their place by age, newest first in lists. */
	gen = master_registry_gen(reg, MASTER_REG_LOBBY);
	it = mk("old", 5000);
	CHECK_EQ_INT(master_registry_merge(reg, MASTER_REG_LOBBY, &it, 1), 1);
	it = mk("new", 0);
	CHECK_EQ_INT(master_registry_merge(reg, MASTER_REG_LOBBY, &it, 1), 1);
	CHECK_EQ_STR(names(reg, buf, sizeof(buf)), "new*,mine,old*");
	CHECK(master_registry_gen(reg, MASTER_REG_LOBBY) > gen);
	CHECK_EQ_INT(master_registry_remote_count(reg, MASTER_REG_LOBBY), 2);
	/* Past the TTL: not merged. */
	it = mk("stale", 20000);
	CHECK_EQ_INT(master_registry_merge(reg, MASTER_REG_LOBBY, &it, 1), -ESTALE);
	/* Ours is newer than a remote copy of it: kept; an even newer one
	 * replaces it (and it is no longer ours to publish). */
	it = mk("mine", 3000);
	CHECK_EQ_INT(master_registry_merge(reg, MASTER_REG_LOBBY, &it, 1), 0);
	CHECK_EQ_STR(names(reg, buf, sizeof(buf)), "new*,mine,old*");
	it = mk("mine", -1000);
	CHECK_EQ_INT(master_registry_merge(reg, MASTER_REG_LOBBY, &it, 1), 1);
	CHECK_EQ_INT(master_registry_remote_count(reg, MASTER_REG_LOBBY), 3);
	/* Full: a fourth remote fits, a fifth is refused. */
	it = mk("four", 100);
	CHECK_EQ_INT(master_registry_merge(reg, MASTER_REG_LOBBY, &it, 2), 1);
	it = mk("five", 100);
	CHECK_EQ_INT(master_registry_merge(reg, MASTER_REG_LOBBY, &it, 2), -ENOSPC);
	/* Remote copies are never in our snapshot and never published. */
	sink.npub = 0;
	master_registry_publish_all(reg);
	ev_loop_run_once(loop, 0);
	CHECK_EQ_INT(sink.npub, 0);

	/* A deletion elsewhere: an entry refreshed after it stays. */
	memset(key, 0, sizeof(key));
	memcpy(key, "new", 3);
	CHECK_EQ_INT(master_registry_unmerge(reg, MASTER_REG_LOBBY, key, wall_now() - 60000), 0);
	CHECK_EQ_INT(master_registry_unmerge(reg, MASTER_REG_LOBBY, key, wall_now()), 1);
	CHECK(master_registry_get(reg, MASTER_REG_LOBBY, key) == NULL);
	/* A sync that confirmed only epoch 2: the rest of the remote go. */
	CHECK_EQ_INT(master_registry_drop_unconfirmed(reg, 2), 2);
	CHECK_EQ_STR(names(reg, buf, sizeof(buf)), "four*");
	/* Taking a remote entry over (a local announce) makes it ours. */
	memset(key, 0, sizeof(key));
	memcpy(key, "four", 4);
	ours = master_registry_put(reg, MASTER_REG_LOBBY, key, &created);
	CHECK(ours != NULL && !created && ours->h.remote);
	master_registry_refresh(reg, MASTER_REG_LOBBY, ours);
	CHECK(!ours->h.remote);
	CHECK_EQ_INT(master_registry_remote_count(reg, MASTER_REG_LOBBY), 0);
	ev_loop_run_once(loop, 0);
	CHECK_EQ_INT(sink.npub, 1);
	/* Our own deletion is handed on at once; an unmerge_remote of ours
	 * leaves it. */
	CHECK_EQ_INT(master_registry_unmerge_remote(reg, MASTER_REG_LOBBY, key), 0);
	master_registry_del(reg, MASTER_REG_LOBBY, ours);
	CHECK_EQ_INT(sink.ndel, 1);
	CHECK_EQ_INT(master_registry_count(reg, MASTER_REG_LOBBY), 0);
	master_registry_free(reg);
	ev_loop_free(loop);
}

int main(void)
{
	test_url();
	test_names_keys();
	test_messages();
	test_values();
	test_registry();
	return tap_done("masterredis");
}
