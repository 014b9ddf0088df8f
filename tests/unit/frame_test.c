/*
 * common/frame against tests/data/frames.json (netpunch punch.py, lobby.py
 * and masterserver.py constructions): NP1 datagrams, the relay bind, the
 * save chunk header, the mesh envelope, game frames and fragments. Then
 * the reassembler's rules (netpunch-wire.md §2, lobby.py _Reassembler):
 * out of order, duplicates, a count mismatch, expiry 15 s after the last
 * fragment, 64 partial messages per sender, and our own bounds.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "seal.h"
#include "tap.h"
#include "vec.h"

static void test_np1(struct json_object *root)
{
	struct json_object *v = vec_get(root, "np1");
	uint8_t buf[256];

	CHECK_EQ_INT(vec_len(v), 6);
	for (size_t i = 0; i < vec_len(v); i++) {
		struct json_object *c = vec_at(v, i);
		size_t pn, bn;
		uint8_t *payload = vec_hex(vec_str(c, "payload_hex"), &pn);
		uint8_t *bytes = vec_hex(vec_str(c, "bytes_hex"), &bn);
		uint8_t type = (uint8_t)vec_str(c, "type_char")[0], t = 0;
		const uint8_t *p = NULL;
		size_t pl = 0;
		int n = np1_build(buf, sizeof(buf), type, payload, pn);

		CHECK_EQ_INT(n, (long long)bn);
		CHECK(vec_eq_hex(buf, (size_t)n, vec_str(c, "bytes_hex")));
		CHECK_EQ_INT(np1_parse(bytes, bn, &t, &p, &pl), 0);
		CHECK_EQ_INT(t, type);
		CHECK(pl == pn && memcmp(p, payload, pn) == 0);
		free(payload);
		free(bytes);
	}
	/* "Anything shorter than 5 bytes or not starting with NP1: is
	 * ignored"; 5 bytes is an empty payload; unknown types parse. */
	{
		uint8_t t;
		const uint8_t *p;
		size_t pl;

		CHECK_EQ_INT(np1_parse((const uint8_t *)"NP1:", 4, &t, &p, &pl), -EBADMSG);
		CHECK_EQ_INT(np1_parse((const uint8_t *)"NP2:H", 5, &t, &p, &pl), -EBADMSG);
		CHECK_EQ_INT(np1_parse((const uint8_t *)"np1:H", 5, &t, &p, &pl), -EBADMSG);
		CHECK_EQ_INT(np1_parse((const uint8_t *)"", 0, &t, &p, &pl), -EBADMSG);
		CHECK_EQ_INT(np1_parse((const uint8_t *)"NP1:Z", 5, &t, &p, &pl), 0);
		CHECK_EQ_INT(t, 'Z');
		CHECK_EQ_INT(pl, 0);
		CHECK_EQ_INT(np1_build(buf, 5, NP1_HELLO, NULL, 0), 5);
		CHECK_EQ_INT(np1_build(buf, 5, NP1_HELLO, (const uint8_t *)"x", 1), -ENOSPC);
		CHECK_EQ_INT(np1_build(buf, sizeof(buf), NP1_DATA, buf, NP1_MAX - 4), -EMSGSIZE);
		/* In place: the payload already at buf + 5. */
		memcpy(buf + NP1_HDR, "abc", 3);
		CHECK_EQ_INT(np1_build(buf, sizeof(buf), NP1_DATA, buf + NP1_HDR, 3), 8);
		CHECK(memcmp(buf, "NP1:Dabc", 8) == 0);
	}
}

static void test_relay_bind(struct json_object *root)
{
	struct json_object *rb = vec_get(root, "relay_bind");
	struct json_object *pk = vec_get(rb, "packets");
	size_t n, an;
	uint8_t *id = vec_hex(vec_str(rb, "alloc_id_hex"), &n);
	uint8_t buf[64], got[NP1_RELAY_ID_LEN];
	uint8_t *ack = vec_hex(vec_str(vec_at(pk, 2), "bytes_hex"), &an);

	CHECK(id != NULL && n == NP1_RELAY_ID_LEN && ack != NULL);
	if (id == NULL || ack == NULL || n != NP1_RELAY_ID_LEN)
		goto out;
	CHECK_EQ_INT(np1_trlb_build(buf, sizeof(buf), id, 'J'), NP1_TRLB_LEN);
	CHECK(vec_eq_hex(buf, NP1_TRLB_LEN, vec_str(vec_at(pk, 0), "bytes_hex")));
	CHECK_EQ_INT(np1_trlb_build(buf, sizeof(buf), id, 'H'), NP1_TRLB_LEN);
	CHECK(vec_eq_hex(buf, NP1_TRLB_LEN, vec_str(vec_at(pk, 1), "bytes_hex")));
	CHECK_EQ_INT(np1_trlb_build(buf, NP1_TRLB_LEN - 1, id, 'H'), -ENOSPC);
	CHECK_EQ_INT(an, NP1_TRLA_LEN);
	CHECK_EQ_INT(np1_trla_parse(ack, an, got), 0);
	CHECK(memcmp(got, id, NP1_RELAY_ID_LEN) == 0);
	CHECK_EQ_INT(np1_trla_parse(ack, an - 1, got), -EBADMSG);
	CHECK_EQ_INT(np1_trla_parse(buf, NP1_TRLB_LEN, got), -EBADMSG); /* a TRLB */
	memcpy(buf, ack, an);
	buf[an] = 0;
	CHECK_EQ_INT(np1_trla_parse(buf, an + 1, got), -EBADMSG);

	/* The relay port's side: the ack it writes is the captured one. */
	memset(buf, 0xee, sizeof(buf));
	CHECK_EQ_INT(np1_trla_build(buf, sizeof(buf), id), NP1_TRLA_LEN);
	CHECK(vec_eq_hex(buf, NP1_TRLA_LEN, vec_str(vec_at(pk, 2), "bytes_hex")));
	CHECK(buf[NP1_TRLA_LEN] == 0xee);
	CHECK_EQ_INT(np1_trla_build(buf, NP1_TRLA_LEN, id), NP1_TRLA_LEN);
	CHECK_EQ_INT(np1_trla_build(buf, NP1_TRLA_LEN - 1, id), -ENOSPC);
	CHECK_EQ_INT(np1_trla_build(buf, 0, id), -ENOSPC);
out:
	free(id);
	free(ack);
}

/* One vector packet through np1_trlb_parse: the id and role it carries. */
static void check_trlb_vec(struct json_object *pk, size_t i, const uint8_t *want_id,
			   uint8_t want_role)
{
	uint8_t got[NP1_RELAY_ID_LEN], role = 0;
	size_t n;
	uint8_t *b = vec_hex(vec_str(vec_at(pk, i), "bytes_hex"), &n);

	CHECK(b != NULL && n == NP1_TRLB_LEN);
	if (b == NULL)
		return;
	CHECK_EQ_INT(np1_trlb_parse(b, n, got, &role), 0);
	CHECK(memcmp(got, want_id, NP1_RELAY_ID_LEN) == 0);
	CHECK_EQ_INT(role, want_role);
	free(b);
}

/* TRLB as the master's relay port reads it (master-api.md, "Bind packet"). */
static void test_trlb_parse(struct json_object *root)
{
	struct json_object *rb = vec_get(root, "relay_bind");
	struct json_object *pk = vec_get(rb, "packets");
	uint8_t buf[64], got[NP1_RELAY_ID_LEN], role;
	size_t n;
	uint8_t *id = vec_hex(vec_str(rb, "alloc_id_hex"), &n);

	CHECK(id != NULL && n == NP1_RELAY_ID_LEN);
	if (id == NULL || n != NP1_RELAY_ID_LEN)
		goto out;
	check_trlb_vec(pk, 0, id, NP1_ROLE_JOINER);
	check_trlb_vec(pk, 1, id, NP1_ROLE_HOST);

	/* Round trip through the builder, both roles. */
	for (int k = 0; k < 2; k++) {
		uint8_t want = k == 0 ? NP1_ROLE_HOST : NP1_ROLE_JOINER;

		CHECK_EQ_INT(np1_trlb_build(buf, sizeof(buf), id, want), NP1_TRLB_LEN);
		role = 0;
		CHECK_EQ_INT(np1_trlb_parse(buf, NP1_TRLB_LEN, got, &role), 0);
		CHECK(memcmp(got, id, NP1_RELAY_ID_LEN) == 0 && role == want);
	}

	/* Not a bind at all (the port relays these): one byte short or long,
	 * another magic, the ack, the magic in another case, nothing. */
	CHECK_EQ_INT(np1_trlb_build(buf, sizeof(buf), id, 'J'), NP1_TRLB_LEN);
	CHECK_EQ_INT(np1_trlb_parse(buf, NP1_TRLB_LEN - 1, got, &role), -EBADMSG);
	buf[NP1_TRLB_LEN] = 'J';
	CHECK_EQ_INT(np1_trlb_parse(buf, NP1_TRLB_LEN + 1, got, &role), -EBADMSG);
	CHECK_EQ_INT(np1_trlb_parse(buf, 0, got, &role), -EBADMSG);
	buf[3] = 'A';
	CHECK_EQ_INT(np1_trlb_parse(buf, NP1_TRLB_LEN, got, &role), -EBADMSG);
	buf[3] = 'b';
	CHECK_EQ_INT(np1_trlb_parse(buf, NP1_TRLB_LEN, got, &role), -EBADMSG);
	memcpy(buf, "XRLB", 4);
	CHECK_EQ_INT(np1_trlb_parse(buf, NP1_TRLB_LEN, got, &role), -EBADMSG);
	CHECK_EQ_INT(np1_trla_build(buf, sizeof(buf), id), NP1_TRLA_LEN);
	buf[NP1_TRLA_LEN] = 'J';
	CHECK_EQ_INT(np1_trlb_parse(buf, NP1_TRLB_LEN, got, &role), -EBADMSG);

	/* A bind of another role (lower case, NUL, 'A'): -EPROTO, and the
	 * outputs are left alone. */
	{
		static const uint8_t roles[] = {'h', 'j', 0, 'A', 0xff, 'K'};

		for (size_t k = 0; k < sizeof(roles); k++) {
			CHECK_EQ_INT(np1_trlb_build(buf, sizeof(buf), id, roles[k]), NP1_TRLB_LEN);
			memset(got, 0x5a, sizeof(got));
			role = 0x5a;
			CHECK_EQ_INT(np1_trlb_parse(buf, NP1_TRLB_LEN, got, &role), -EPROTO);
			CHECK(got[0] == 0x5a && got[NP1_RELAY_ID_LEN - 1] == 0x5a && role == 0x5a);
		}
	}
out:
	free(id);
}

static void test_save_chunk(struct json_object *root)
{
	struct json_object *sc = vec_get(root, "save_chunk");
	size_t dn;
	uint8_t *data = vec_hex(vec_str(sc, "data_hex"), &dn);
	uint8_t buf[256], frame[300];
	uint32_t sid = 0, seq = 0;
	const uint8_t *d = NULL;
	size_t dl = 0;
	int n, fn;

	n = npf1_build(buf, sizeof(buf), (uint32_t)vec_int(sc, "sid"), (uint32_t)vec_int(sc, "seq"),
		       data, dn);
	CHECK_EQ_INT(n, (long long)(NPF1_HDR + dn));
	CHECK(vec_eq_hex(buf, (size_t)n, vec_str(sc, "payload_hex")));
	fn = np1_build(frame, sizeof(frame), NP1_DATA, buf, (size_t)n);
	CHECK(vec_eq_hex(frame, (size_t)fn, vec_str(sc, "np1_frame_hex")));
	CHECK_EQ_INT(npf1_parse(buf, (size_t)n, &sid, &seq, &d, &dl), 0);
	CHECK_EQ_INT(sid, vec_int(sc, "sid"));
	CHECK_EQ_INT(seq, vec_int(sc, "seq"));
	CHECK(dl == dn && memcmp(d, data, dn) == 0);
	CHECK_EQ_INT(npf1_parse(buf, NPF1_HDR, &sid, &seq, &d, &dl), 0);
	CHECK_EQ_INT(dl, 0);
	CHECK_EQ_INT(npf1_parse(buf, NPF1_HDR - 1, &sid, &seq, &d, &dl), -EBADMSG);
	CHECK_EQ_INT(npf1_parse((const uint8_t *)"NPF2\0\0\0\0\0\0\0\0", 12, &sid, &seq, &d, &dl),
		     -EBADMSG);
	CHECK_EQ_INT(npf1_build(buf, NPF1_HDR + dn - 1, 1, 2, data, dn), -ENOSPC);
	free(data);
}

static void test_mesh_and_game(struct json_object *root)
{
	struct json_object *me = vec_get(root, "mesh_envelope");
	struct json_object *gf = vec_get(root, "game_frame");
	uint8_t buf[2048];
	char to[256], from[256];
	const uint8_t *inner;
	size_t il, n;
	uint8_t *frame;
	int ret;

	CHECK_EQ_INT(vec_len(me), 2);
	for (size_t i = 0; i < vec_len(me); i++) {
		struct json_object *c = vec_at(me, i);
		uint8_t *in = vec_hex(vec_str(c, "inner_hex"), &n);

		ret = mesh_env_build(buf, sizeof(buf), vec_str(c, "to"), vec_str(c, "from"), in, n);
		CHECK(ret > 0);
		CHECK(vec_eq_hex(buf, (size_t)ret, vec_str(c, "payload_hex")));
		CHECK_EQ_INT(mesh_env_parse(buf, (size_t)ret, to, from, &inner, &il), 0);
		CHECK_EQ_STR(to, vec_str(c, "to"));
		CHECK_EQ_STR(from, vec_str(c, "from"));
		CHECK(il == n && memcmp(inner, in, n) == 0);
		/* Every truncation inside the names is refused. */
		for (size_t cut = 0; cut < (size_t)ret - n; cut++)
			CHECK_EQ_INT(mesh_env_parse(buf, cut, to, from, &inner, &il), -EBADMSG);
		free(in);
	}
	/* Names: up to 255 bytes, valid UTF-8 as Python decodes it, no NUL;
	 * an empty name and an empty inner frame are fine. */
	{
		char big[300];

		memset(big, 'a', sizeof(big));
		big[255] = '\0';
		ret = mesh_env_build(buf, sizeof(buf), big, "", NULL, 0);
		CHECK_EQ_INT(ret, 258);
		CHECK_EQ_INT(mesh_env_parse(buf, (size_t)ret, to, from, &inner, &il), 0);
		CHECK_EQ_INT(strlen(to), 255);
		CHECK_EQ_STR(from, "");
		CHECK_EQ_INT(il, 0);
		big[255] = 'a';
		big[256] = '\0';
		CHECK_EQ_INT(mesh_env_build(buf, sizeof(buf), big, "x", NULL, 0), -EINVAL);
		CHECK_EQ_INT(mesh_env_build(buf, 5, "ab", "cd", NULL, 0), -ENOSPC);
	}
	{
		static const struct {
			const char *env;
			size_t len;
			int ok;
		} v[] = {
			{"r\x02\xc3\xa9\x01x", 6, 1},         /* é */
			{"r\x02\xc3\x28\x01x", 6, 0},         /* bad continuation */
			{"r\x02\xc0\xaf\x01x", 6, 0},         /* overlong '/' */
			{"r\x03\xed\xa0\x80\x01x", 7, 0},     /* surrogate */
			{"r\x04\xf4\x90\x80\x80\x01x", 8, 0}, /* above U+10FFFF */
			{"r\x04\xf0\x9f\x9a\x80\x01x", 8, 1}, /* U+1F680 */
			{"r\x01\x00\x01x", 5, 0},             /* NUL */
			{"r\x01\xc3\x01x", 5, 0},             /* cut sequence */
			{"g\x01x\x01x", 5, 0},                /* not 'r' */
			{"r\x01x\x05xy", 6, 0},               /* from runs short */
		};

		for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
			CHECK_EQ_INT(mesh_env_parse((const uint8_t *)v[i].env, v[i].len, to, from,
						    &inner, &il),
				     v[i].ok ? 0 : -EBADMSG);
	}

	frame = vec_hex(vec_str(gf, "bridge_datagram_hex"), &n);
	ret = np1_game_build(buf, sizeof(buf), frame, n);
	CHECK(vec_eq_hex(buf, (size_t)ret, vec_str(gf, "payload_hex")));
	free(frame);
	memset(buf + 1, 0x42, NP1_GAME_MAX);
	CHECK_EQ_INT(np1_game_build(buf, sizeof(buf), buf + 1, NP1_GAME_MAX), NP1_GAME_MAX + 1);
	CHECK_EQ_INT(np1_game_build(buf, sizeof(buf), buf + 1, NP1_GAME_MAX + 1), -EMSGSIZE);
	CHECK_EQ_INT(np1_game_build(buf, 10, buf + 100, 10), -ENOSPC);
}

/* TPF2LINK1's sealed name (dual_tcp.py) is a seal of the session key. */
static void test_dual_tcp_seal(struct json_object *root)
{
	struct json_object *lh = vec_get(vec_get(root, "dual_tcp"), "link_hello");
	static const uint8_t secret[SEAL_SECRET_LEN] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
	static const uint8_t salt[4] = {0x5a, 0x17, 0xc0, 0xde};
	uint8_t key[SEAL_KEY_LEN], out[64];
	struct sealer *s;
	const char *name = vec_str(lh, "name");
	int n;

	seal_derive_key(secret, "pw", key);
	s = seal_new(key);
	CHECK(s != NULL && name != NULL);
	if (s == NULL || name == NULL)
		return;
	seal_set_state(s, salt, 0, salt, 0);
	n = seal_seal(s, (const uint8_t *)name, strlen(name), out, sizeof(out));
	CHECK(n > 0 && vec_eq_hex(out, (size_t)n, vec_str(lh, "sealed_name_hex")));
	seal_free(s);
}

/* The link hello and the record of frames.json (dual_tcp.py hello_bytes,
 * TcpLink._writer), then the parse rules of dual_tcp.parse_hello. */
static void test_link(struct json_object *root)
{
	struct json_object *dt = vec_get(root, "dual_tcp");
	struct json_object *lh = vec_get(dt, "link_hello");
	uint8_t buf[LINK_HELLO_MAX + 64], *want, *sealed, *rec, *frame;
	size_t n, sn, rn, fn, flen = 0;
	const uint8_t *fp = NULL;
	struct link_hello h;
	const char *name = vec_str(lh, "name");
	int r;

	want = vec_hex(vec_str(lh, "bytes_hex"), &n);
	sealed = vec_hex(vec_str(lh, "sealed_name_hex"), &sn);
	CHECK(want != NULL && sealed != NULL && name != NULL);
	if (want == NULL || sealed == NULL || name == NULL)
		return;
	r = link_hello_build(buf, sizeof(buf), (const uint8_t *)name, strlen(name), sealed, sn);
	CHECK(r == (int)n && memcmp(buf, want, n) == 0);
	CHECK(link_hello_is(want, n) && !link_hello_is((const uint8_t *)"TPF2BULK1 ", 10));
	CHECK_EQ_INT(link_hello_parse(want, n, &h), 0);
	CHECK(h.name_len == 3 && memcmp(h.name, "bob", 3) == 0 && h.sealed_len == sn &&
	      memcmp(h.sealed, sealed, sn) == 0);
	/* Upper-case hex and a CRLF end parse too (Python strips, fromhex). */
	{
		char line[LINK_HELLO_MAX];
		size_t k = (size_t)snprintf(line, sizeof(line), "TPF2LINK1 bob ");

		for (size_t i = 0; i < sn; i++)
			k += (size_t)snprintf(line + k, sizeof(line) - k, "%02X", sealed[i]);
		k += (size_t)snprintf(line + k, sizeof(line) - k, " \r\n");
		CHECK_EQ_INT(link_hello_parse((const uint8_t *)line, k, &h), 0);
		CHECK(h.sealed_len == sn && memcmp(h.sealed, sealed, sn) == 0);
	}
	/* A name with spaces: the hex is the last field. */
	r = link_hello_build(buf, sizeof(buf), (const uint8_t *)"Big Bad Wolf", 12, sealed, sn);
	CHECK(r > 0 && link_hello_parse(buf, (size_t)r, &h) == 0 && h.name_len == 12 &&
	      memcmp(h.name, "Big Bad Wolf", 12) == 0);
	/* The longest: a 64-byte name and its 88-byte seal fit in 256. */
	{
		uint8_t nm[LINK_NAME_MAX], sl[LINK_SEALED_MAX];

		memset(nm, 'n', sizeof(nm));
		memset(sl, 0xab, sizeof(sl));
		r = link_hello_build(buf, sizeof(buf), nm, sizeof(nm), sl, sizeof(sl));
		CHECK(r == 10 + 64 + 1 + 176 + 1 && r <= LINK_HELLO_MAX);
		CHECK_EQ_INT(link_hello_parse(buf, (size_t)r, &h), 0);
		CHECK_EQ_INT(link_hello_build(buf, sizeof(buf), nm, 65, sl, 24), -EINVAL);
		CHECK_EQ_INT(link_hello_build(buf, sizeof(buf), nm, 0, sl, 24), -EINVAL);
		CHECK_EQ_INT(link_hello_build(buf, sizeof(buf), nm, 1, sl, 23), -EINVAL);
		CHECK_EQ_INT(link_hello_build(buf, 40, nm, 1, sl, 24), -ENOSPC);
	}
#define BAD(s) CHECK_EQ_INT(link_hello_parse((const uint8_t *)(s), strlen(s), &h), -EBADMSG)
	BAD("TPF2LINK1 bob 5a17c0de0000000129d0f13e8e109d32e7c47a06654ed800d837f7"); /* no \n */
	BAD("TPF2LINK2 bob 5a17c0de0000000129d0f13e8e109d32e7c47a06654ed800d837f7\n");
	BAD(" TPF2LINK1 bob 5a17c0de0000000129d0f13e8e109d32e7c47a06654ed800d837f7\n");
	BAD("TPF2LINK1 5a17c0de0000000129d0f13e8e109d32e7c47a06654ed800d837f7\n"); /* no name */
	BAD("TPF2LINK1  5a17c0de0000000129d0f13e8e109d32e7c47a06654ed800d837f7\n");
	BAD("TPF2LINK1 bob 5a17c0de0000000129d0f13e8e109d32e7c47a06654ed800d837f\n"); /* odd */
	BAD("TPF2LINK1 bob 5a17c0de0000000129d0f13e8e109d32e7c47a06654ed800d837zz\n");
	BAD("TPF2LINK1 bob 5a17c0de0000000129d0f13e8e109d32e7c47a06654ed8\n"); /* 23 */
	BAD("TPF2LINK1 bob\n");
	BAD("TPF2LINK1 \n");
	BAD("TPF2LINK1 b\nb 5a17c0de0000000129d0f13e8e109d32e7c47a06654ed800d837f7\n");
	BAD("TPF2LINK1 bob 5a17c0de0000000129d0f13e8e109d32e7c47a06654ed800d837f7\n\n");
#undef BAD
	{
		/* A NUL in the name; a 65-byte name. */
		char line[LINK_HELLO_MAX];
		size_t k = (size_t)snprintf(
			line, sizeof(line),
			"TPF2LINK1 b_b 5a17c0de0000000129d0f13e8e109d32e7c47a06654ed800d837f7\n");

		line[11] = '\0';
		CHECK_EQ_INT(link_hello_parse((const uint8_t *)line, k, &h), -EBADMSG);
		k = (size_t)snprintf(line, sizeof(line), "TPF2LINK1 %065d %s\n", 0,
				     "5a17c0de0000000129d0f13e8e109d32e7c47a06654ed800d837f7");
		CHECK_EQ_INT(link_hello_parse((const uint8_t *)line, k, &h), -EBADMSG);
	}
	memset(buf, 'x', sizeof(buf));
	memcpy(buf, "TPF2LINK1 ", 10);
	buf[LINK_HELLO_MAX] = '\n';
	CHECK_EQ_INT(link_hello_parse(buf, LINK_HELLO_MAX + 1, &h), -EBADMSG); /* over 256 */

	/* The cut: 64 bytes, never inside a character. */
	CHECK_EQ_INT((int)link_name_cut("bob", 3), 3);
	{
		char nm[80];

		memset(nm, 'a', 63);
		memcpy(nm + 63, "\xc3\xa9zz", 4); /* an e-acute across byte 64 */
		CHECK_EQ_INT((int)link_name_cut(nm, 67), 63);
		memset(nm, 'a', 62);
		memcpy(nm + 62, "\xc3\xa9zz", 4); /* ends exactly at 64 */
		CHECK_EQ_INT((int)link_name_cut(nm, 66), 64);
		memset(nm, 'a', 80);
		CHECK_EQ_INT((int)link_name_cut(nm, 80), 64);
		memset(nm, 'a', 62);
		memcpy(nm + 62, "\xf0\x9f\x98\x80", 4); /* a 4-byte one from 62 */
		CHECK_EQ_INT((int)link_name_cut(nm, 66), 62);
		/* Not UTF-8 (continuation bytes only): 3 steps back at most. */
		memset(nm, 0xbc, 80);
		CHECK_EQ_INT((int)link_name_cut(nm, 80), 61);
	}

	/* The record: u16be length | the E frame. */
	rec = vec_hex(vec_str(vec_get(dt, "tcp_record"), "bytes_hex"), &rn);
	frame = vec_hex(vec_str(vec_get(dt, "inject_header"), "np1_frame_hex"), &fn);
	CHECK(rec != NULL && frame != NULL);
	if (rec != NULL && frame != NULL) {
		r = link_rec_build(buf, sizeof(buf), frame, fn);
		CHECK(r == (int)rn && memcmp(buf, rec, rn) == 0);
		CHECK_EQ_INT(link_rec_next(rec, rn, &fp, &flen), (int)rn);
		CHECK(fp == rec + 2 && flen == fn);
		/* Every cut short is "more, please". */
		for (size_t k = 0; k < rn; k++)
			CHECK_EQ_INT(link_rec_next(rec, k, &fp, &flen), 0);
		/* Two back to back: the first only. */
		memcpy(buf, rec, rn);
		memcpy(buf + rn, rec, rn);
		CHECK_EQ_INT(link_rec_next(buf, 2 * rn, &fp, &flen), (int)rn);
		/* Not E: a D frame of the same length. */
		memcpy(buf, rec, rn);
		buf[2 + 4] = 'D';
		CHECK_EQ_INT(link_rec_next(buf, rn, &fp, &flen), -EBADMSG);
		CHECK_EQ_INT(link_rec_build(buf, 10, frame, fn), -ENOSPC);
		CHECK_EQ_INT(link_rec_build(buf, sizeof(buf), frame, LINK_FRAME_MIN - 1),
			     -EMSGSIZE);
	}
	/* Lengths out of bounds are refused from the two length bytes alone. */
	CHECK_EQ_INT(link_rec_next((const uint8_t *)"\x00\x1c", 2, &fp, &flen), -EMSGSIZE);
	CHECK_EQ_INT(link_rec_next((const uint8_t *)"\x10\x01", 2, &fp, &flen), -EMSGSIZE);
	CHECK_EQ_INT(link_rec_next((const uint8_t *)"TP", 2, &fp, &flen), -EMSGSIZE);
	CHECK_EQ_INT(link_rec_next((const uint8_t *)"\x00\x00", 2, &fp, &flen), -EMSGSIZE);
	CHECK_EQ_INT(link_rec_next((const uint8_t *)"\x10\x00", 2, &fp, &flen), 0);
	CHECK_EQ_INT(link_rec_next((const uint8_t *)"\x00\x1d", 2, &fp, &flen), 0);
	CHECK_EQ_INT(link_rec_next((const uint8_t *)"\x00", 1, &fp, &flen), 0);
	free(want);
	free(sealed);
	free(rec);
	free(frame);
}

/* ---- fragments ---- */

struct frags {
	uint8_t *msg;
	size_t len;
	uint8_t *f[16];
	size_t fl[16];
	unsigned count;
};

static void make_frags(struct frags *fr, size_t len, uint32_t id, uint8_t seed)
{
	memset(fr, 0, sizeof(*fr));
	fr->msg = malloc(len);
	fr->len = len;
	for (size_t i = 0; i < len; i++)
		fr->msg[i] = (uint8_t)(seed + i * 7);
	fr->count = frag_count(len);
	CHECK(fr->count <= 16);
	for (unsigned i = 0; i < fr->count && i < 16; i++) {
		fr->f[i] = malloc(FRAG_HDR + FRAG_DATA);
		fr->fl[i] = (size_t)frag_build(fr->f[i], FRAG_HDR + FRAG_DATA, id, i, fr->msg, len);
	}
}

static void free_frags(struct frags *fr)
{
	for (unsigned i = 0; i < fr->count && i < 16; i++)
		free(fr->f[i]);
	free(fr->msg);
}

static struct addr A, B;

static int feed(struct frag_reasm *r, const struct addr *from, const uint8_t *p, size_t len,
		long long now, uint8_t **msg, size_t *ml)
{
	return frag_reasm_feed(r, from, p, len, now, msg, ml);
}

/* Feeds fragments in the order given; the last completes the message. */
static void check_order(const struct frags *fr, const unsigned *order, size_t n)
{
	struct frag_reasm *r = frag_reasm_new(8);
	uint8_t *msg = NULL;
	size_t ml = 0;

	for (size_t i = 0; i < n; i++) {
		int ret = feed(r, &A, fr->f[order[i]], fr->fl[order[i]], 1000, &msg, &ml);

		CHECK_EQ_INT(ret, i + 1 == n ? 1 : 0);
	}
	CHECK(msg != NULL && ml == fr->len && memcmp(msg, fr->msg, fr->len) == 0);
	CHECK_EQ_INT(frag_reasm_pending(r), 0);
	CHECK_EQ_INT(frag_reasm_bytes(r), 0);
	free(msg);
	frag_reasm_free(r);
}

static void test_fragment_vectors(struct json_object *root)
{
	struct json_object *fv = vec_get(root, "fragments");
	struct json_object *fh = vec_get(fv, "fragments_hex");
	size_t mn;
	uint8_t *msg = vec_hex(vec_str(fv, "message_hex"), &mn);
	uint32_t id = (uint32_t)vec_int(fv, "id");
	unsigned count = frag_count(mn);
	struct frag_reasm *r = frag_reasm_new(4);
	uint8_t buf[FRAG_HDR + FRAG_DATA], *out = NULL;
	size_t ol = 0;

	CHECK_EQ_INT(count, vec_int(fv, "count"));
	CHECK_EQ_INT(vec_len(fh), count);
	/* Sent in reverse: reassembled. */
	for (unsigned i = count; i-- > 0;) {
		int n = frag_build(buf, sizeof(buf), id, i, msg, mn);

		CHECK(n > 0 && vec_eq_hex(buf, (size_t)n, json_object_get_string(vec_at(fh, i))));
		CHECK_EQ_INT(feed(r, &A, buf, (size_t)n, 5, &out, &ol), i == 0 ? 1 : 0);
	}
	CHECK(out != NULL && ol == mn && memcmp(out, msg, mn) == 0);
	CHECK_EQ_INT(frag_build(buf, sizeof(buf), id, count, msg, mn), -EINVAL);
	CHECK_EQ_INT(frag_build(buf, 100, id, 0, msg, mn), -ENOSPC);
	free(out);
	free(msg);
	frag_reasm_free(r);
	/* netpunch fragments only above FRAG_DATA. */
	CHECK_EQ_INT(frag_count(FRAG_DATA), 1);
	CHECK_EQ_INT(frag_count(FRAG_DATA + 1), 2);
	CHECK_EQ_INT(frag_count(0), 0);
}

static void test_reassembly(void)
{
	struct frags fr;
	uint8_t *msg = NULL;
	size_t ml = 0;
	struct frag_reasm *r;

	make_frags(&fr, 5000, 77, 3); /* 4 fragments, the last 1,100 bytes */
	CHECK_EQ_INT(fr.count, 4);
	CHECK_EQ_INT(fr.fl[3], FRAG_HDR + 5000 - 3 * FRAG_DATA);
	{
		static const unsigned in_order[] = {0, 1, 2, 3};
		static const unsigned shuffled[] = {2, 0, 3, 1};

		check_order(&fr, in_order, 4);
		check_order(&fr, shuffled, 4);
	}

	r = frag_reasm_new(8);
	/* Duplicates: counted once; the message completes on the last new
	 * index and is delivered once. */
	CHECK_EQ_INT(feed(r, &A, fr.f[0], fr.fl[0], 0, &msg, &ml), 0);
	CHECK_EQ_INT(feed(r, &A, fr.f[0], fr.fl[0], 0, &msg, &ml), 0);
	CHECK_EQ_INT(feed(r, &A, fr.f[1], fr.fl[1], 0, &msg, &ml), 0);
	CHECK_EQ_INT(feed(r, &A, fr.f[1], fr.fl[1], 0, &msg, &ml), 0);
	CHECK_EQ_INT(feed(r, &A, fr.f[2], fr.fl[2], 0, &msg, &ml), 0);
	CHECK_EQ_INT(frag_reasm_pending(r), 1);
	CHECK_EQ_INT(feed(r, &A, fr.f[3], fr.fl[3], 0, &msg, &ml), 1);
	CHECK(ml == fr.len && memcmp(msg, fr.msg, ml) == 0);
	free(msg);
	/* After completion the id is free again: a late duplicate starts a
	 * new partial message (netpunch does the same). */
	CHECK_EQ_INT(feed(r, &A, fr.f[3], fr.fl[3], 0, &msg, &ml), 0);
	CHECK_EQ_INT(frag_reasm_pending(r), 1);
	frag_reasm_forget(r, &A);
	CHECK_EQ_INT(frag_reasm_pending(r), 0);
	CHECK_EQ_INT(frag_reasm_bytes(r), 0);

	/* A repeated index replaces the slice (the last one wins). */
	{
		uint8_t alt[FRAG_HDR + FRAG_DATA];

		memcpy(alt, fr.f[1], fr.fl[1]);
		alt[FRAG_HDR] ^= 0xff;
		CHECK_EQ_INT(feed(r, &A, alt, fr.fl[1], 0, &msg, &ml), 0);
		CHECK_EQ_INT(feed(r, &A, fr.f[0], fr.fl[0], 0, &msg, &ml), 0);
		CHECK_EQ_INT(feed(r, &A, fr.f[1], fr.fl[1], 0, &msg, &ml), 0);
		CHECK_EQ_INT(feed(r, &A, fr.f[2], fr.fl[2], 0, &msg, &ml), 0);
		CHECK_EQ_INT(feed(r, &A, fr.f[3], fr.fl[3], 0, &msg, &ml), 1);
		CHECK(ml == fr.len && memcmp(msg, fr.msg, ml) == 0);
		free(msg);
	}

	/* Count mismatch: "a fragment whose count differs from the first
	 * seen is ignored" - and does not refresh the message. */
	{
		uint8_t odd[FRAG_HDR + FRAG_DATA];

		CHECK_EQ_INT(feed(r, &A, fr.f[0], fr.fl[0], 1000, &msg, &ml), 0);
		memcpy(odd, fr.f[1], fr.fl[1]);
		odd[12] = 5; /* count 4 -> 5 */
		CHECK_EQ_INT(feed(r, &A, odd, fr.fl[1], 9000, &msg, &ml), 0);
		frag_reasm_expire(r, 16001); /* 15,001 ms after the first */
		CHECK_EQ_INT(frag_reasm_pending(r), 0);
	}

	/* Expiry: 15 s after the LAST fragment; exactly 15 s is kept. */
	CHECK_EQ_INT(feed(r, &A, fr.f[0], fr.fl[0], 1000, &msg, &ml), 0);
	CHECK_EQ_INT(feed(r, &A, fr.f[1], fr.fl[1], 10000, &msg, &ml), 0);
	frag_reasm_expire(r, 16001);
	CHECK_EQ_INT(frag_reasm_pending(r), 1);
	frag_reasm_expire(r, 25000);
	CHECK_EQ_INT(frag_reasm_pending(r), 1);
	frag_reasm_expire(r, 25001);
	CHECK_EQ_INT(frag_reasm_pending(r), 0);
	/* The rest of that message now starts over and never completes. */
	CHECK_EQ_INT(feed(r, &A, fr.f[2], fr.fl[2], 25002, &msg, &ml), 0);
	CHECK_EQ_INT(feed(r, &A, fr.f[3], fr.fl[3], 25003, &msg, &ml), 0);
	CHECK_EQ_INT(frag_reasm_pending(r), 1);
	frag_reasm_forget(r, &A);

	/* Per (sender, id): B's fragments do not complete A's message. */
	CHECK_EQ_INT(feed(r, &A, fr.f[0], fr.fl[0], 0, &msg, &ml), 0);
	CHECK_EQ_INT(feed(r, &B, fr.f[1], fr.fl[1], 0, &msg, &ml), 0);
	CHECK_EQ_INT(feed(r, &B, fr.f[2], fr.fl[2], 0, &msg, &ml), 0);
	CHECK_EQ_INT(feed(r, &B, fr.f[3], fr.fl[3], 0, &msg, &ml), 0);
	CHECK_EQ_INT(frag_reasm_pending(r), 2);
	CHECK_EQ_INT(feed(r, &B, fr.f[0], fr.fl[0], 0, &msg, &ml), 1);
	free(msg);
	frag_reasm_free(r);
	free_frags(&fr);
}

/* "At most 64 partial messages per sender (oldest dropped)". */
static void test_partial_cap(void)
{
	struct frag_reasm *r = frag_reasm_new(8);
	uint8_t f[FRAG_HDR + 4], *msg;
	size_t ml;

	for (uint32_t id = 0; id < FRAG_MAX_PARTIAL; id++) {
		size_t n = (size_t)frag_build(f, sizeof(f), id, 0, (const uint8_t *)"1234", 4);

		/* A one-fragment message completes at once: make it 2. */
		f[12] = 2;
		CHECK_EQ_INT(feed(r, &A, f, n, 1000 + id, &msg, &ml), 0);
	}
	CHECK_EQ_INT(frag_reasm_pending(r), FRAG_MAX_PARTIAL);
	/* Refresh id 0 so that id 1 is now the least recently fed. */
	f[1] = f[2] = f[3] = f[4] = 0;
	f[5] = f[6] = f[7] = 0;
	f[8] = 0; /* index 0 again */
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR + 4, 5000, &msg, &ml), 0);
	/* A 65th message drops id 1. */
	f[4] = 200;
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR + 4, 5001, &msg, &ml), 0);
	CHECK_EQ_INT(frag_reasm_pending(r), FRAG_MAX_PARTIAL);
	/* id 0 survived: its index 1 completes it. */
	f[4] = 0;
	f[8] = 1;
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR + 4, 5002, &msg, &ml), 1);
	free(msg);
	/* id 1 did not: its index 1 starts a new partial message. */
	f[4] = 1;
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR + 4, 5003, &msg, &ml), 0);
	CHECK_EQ_INT(frag_reasm_pending(r), FRAG_MAX_PARTIAL);
	/* Another sender has its own 64. */
	f[4] = 50;
	CHECK_EQ_INT(feed(r, &B, f, FRAG_HDR + 4, 5004, &msg, &ml), 0);
	CHECK_EQ_INT(frag_reasm_pending(r), FRAG_MAX_PARTIAL + 1);
	frag_reasm_free(r);
}

static void test_malformed_and_bounds(void)
{
	struct frag_reasm *r = frag_reasm_new(2);
	uint8_t f[FRAG_HDR + 8] = {'F', 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 'x'};
	uint8_t *msg = NULL;
	size_t ml = 0;
	struct addr c;

	/* Short, not 'F', count 0, index >= count. */
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR - 1, 0, &msg, &ml), -EBADMSG);
	f[0] = 'G';
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR + 1, 0, &msg, &ml), -EBADMSG);
	f[0] = 'F';
	f[12] = 0;
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR + 1, 0, &msg, &ml), -EBADMSG);
	f[12] = 1;
	f[8] = 1; /* index 1 of 1 */
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR + 1, 0, &msg, &ml), -EBADMSG);
	f[8] = 0;
	/* count 1: complete at once; an empty slice is a valid message. */
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR + 1, 0, &msg, &ml), 1);
	CHECK(ml == 1 && msg[0] == 'x');
	free(msg);
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR, 0, &msg, &ml), 1);
	CHECK_EQ_INT(ml, 0);
	free(msg);
	/* Our bound on the count. */
	f[9] = (uint8_t)((FRAG_MAX_COUNT + 1) >> 24);
	f[10] = (uint8_t)((FRAG_MAX_COUNT + 1) >> 16);
	f[11] = (uint8_t)((FRAG_MAX_COUNT + 1) >> 8);
	f[12] = (uint8_t)(FRAG_MAX_COUNT + 1);
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR + 1, 0, &msg, &ml), -EMSGSIZE);
	f[12] = 0xff;
	f[9] = 0xff; /* count 0xff00..: still index 0 < count */
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR + 1, 0, &msg, &ml), -EMSGSIZE);
	CHECK_EQ_INT(frag_reasm_pending(r), 0);

	/* The sender table holds 2: a third sender forgets the least
	 * recently heard one. */
	CHECK_EQ_INT(addr_parse(&c, "10.0.0.3:3", -1), 0);
	memset(f + 9, 0, 4);
	f[12] = 2;
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR + 1, 0, &msg, &ml), 0);
	CHECK_EQ_INT(feed(r, &B, f, FRAG_HDR + 1, 1, &msg, &ml), 0);
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR + 1, 2, &msg, &ml), 0); /* A is fresher */
	CHECK_EQ_INT(feed(r, &c, f, FRAG_HDR + 1, 3, &msg, &ml), 0);
	CHECK_EQ_INT(frag_reasm_pending(r), 2);
	f[8] = 1;
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR + 1, 4, &msg, &ml), 1); /* A kept */
	free(msg);
	CHECK_EQ_INT(feed(r, &B, f, FRAG_HDR + 1, 5, &msg, &ml), 0); /* B lost */
	frag_reasm_free(r);
	frag_reasm_free(NULL);
}

/* The global budget: FRAG_MAX_BYTES of partial messages at most, the
 * least recently fed dropped first; a message over FRAG_MAX_MSG is refused. */
static void test_budget(void)
{
	struct frag_reasm *r = frag_reasm_new(1024);
	uint8_t *f = malloc(FRAG_HDR + FRAG_DATA), *msg = NULL, src[FRAG_DATA * 2];
	size_t ml = 0, n;
	struct addr s;
	char text[32];

	memset(src, 0x33, sizeof(src));
	/* 40 senders x 64 messages x 1,300 bytes = 3.3 MB: under budget.
	 * Then bigger slices push it over. */
	for (int k = 0; k < 40; k++) {
		snprintf(text, sizeof(text), "10.1.0.%d:1", k);
		CHECK_EQ_INT(addr_parse(&s, text, -1), 0);
		for (uint32_t id = 0; id < 64; id++) {
			n = (size_t)frag_build(f, FRAG_HDR + FRAG_DATA, id, 0, src, sizeof(src));
			CHECK_EQ_INT(feed(r, &s, f, n, k * 64 + id, &msg, &ml), 0);
		}
	}
	CHECK_EQ_INT(frag_reasm_pending(r), 40 * 64);
	CHECK(frag_reasm_bytes(r) <= FRAG_MAX_BYTES);
	free(f);
	/* Slices of 60,000 bytes: after ~280 of them the oldest go. */
	f = malloc(FRAG_HDR + 60000);
	memset(f, 0x44, FRAG_HDR + 60000);
	f[0] = 'F';
	for (uint32_t id = 0; id < 400; id++) {
		f[1] = (uint8_t)(id >> 8);
		f[2] = (uint8_t)id;
		f[3] = 0x99;
		memset(f + 5, 0, 8);
		f[12] = 3;
		snprintf(text, sizeof(text), "10.2.%u.%u:1", id / 64, id % 64);
		CHECK_EQ_INT(addr_parse(&s, text, -1), 0);
		CHECK_EQ_INT(feed(r, &s, f, FRAG_HDR + 60000, 100000 + id, &msg, &ml), 0);
		CHECK(frag_reasm_bytes(r) <= FRAG_MAX_BYTES);
	}
	CHECK(frag_reasm_pending(r) < 40 * 64 + 400);
	/* Slices adding up past FRAG_MAX_MSG drop the message. */
	f = realloc(f, FRAG_HDR + FRAG_MAX_MSG + 1);
	memset(f + FRAG_HDR, 0x55, FRAG_MAX_MSG + 1);
	memset(f + 5, 0, 8);
	f[12] = 3;
	f[1] = 0x77;
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR + FRAG_MAX_MSG / 2, 1, &msg, &ml), 0);
	f[8] = 1;
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR + FRAG_MAX_MSG / 2, 2, &msg, &ml), 0);
	f[8] = 2;
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR + 1, 3, &msg, &ml), -EMSGSIZE);
	CHECK_EQ_INT(feed(r, &A, f, FRAG_HDR + FRAG_MAX_MSG + 1, 3, &msg, &ml), -EMSGSIZE);
	free(f);
	frag_reasm_expire(r, 1LL << 40);
	CHECK_EQ_INT(frag_reasm_pending(r), 0);
	CHECK_EQ_INT(frag_reasm_bytes(r), 0);
	frag_reasm_free(r);
}

/* The bulk hello of frames.json, captured from netpunch's bulk_connect. */
static void test_bulk_hello(struct json_object *root)
{
	struct json_object *v = vec_get(root, "bulk_hello");
	uint8_t buf[BULK_HELLO_MAX + 64];
	struct bulk_hello h;
	size_t n;
	uint8_t *want = vec_hex(vec_str(v, "bytes_hex"), &n);
	char long_name[200];
	int r;

	r = bulk_hello_build(buf, sizeof(buf), BULK_RECV, (uint32_t)vec_int(v, "sid"),
			     vec_str(v, "token"), vec_str(v, "name"));
	CHECK(want != NULL && r == (int)n && memcmp(buf, want, n) == 0);
	CHECK_EQ_INT(bulk_hello_parse(want, n, &h), 0);
	CHECK(h.role == BULK_RECV && h.sid == 1705000123u);
	CHECK_EQ_STR(h.token, "00112233445566778899aabbccddeeff");
	CHECK_EQ_STR(h.name, vec_str(v, "name")); /* spaces and all */
	CHECK(memcmp(vec_str(v, "reply_hex"), "4f4b0a", 6) == 0 && strcmp(BULK_OK, "OK\n") == 0);
	free(want);
	/* The name is cut to 64 bytes, as netpunch cuts it. */
	memset(long_name, 'x', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	r = bulk_hello_build(buf, sizeof(buf), BULK_SEND, 4294967295u,
			     "00112233445566778899aabbccddeeff", long_name);
	CHECK_EQ_INT(r, 10 + 5 + 11 + 33 + 64 + 1);
	CHECK_EQ_INT(bulk_hello_parse(buf, (size_t)r, &h), 0);
	CHECK(h.role == BULK_SEND && h.sid == 4294967295u && h.name_len == 64);
	CHECK_EQ_INT(bulk_hello_build(buf, sizeof(buf), BULK_RECV, 1, "0011", "a"), -EINVAL);
	CHECK_EQ_INT(
		bulk_hello_build(buf, 20, BULK_RECV, 1, "00112233445566778899aabbccddeeff", "a"),
		-ENOSPC);
#define BAD(s) CHECK_EQ_INT(bulk_hello_parse((const uint8_t *)(s), strlen(s), &h), -EBADMSG)
	BAD("TPF2BULK1 recv 1 00112233445566778899aabbccddeeff bob"); /* no newline */
	BAD("TPF2BULK2 recv 1 00112233445566778899aabbccddeeff bob\n");
	BAD("TPF2BULK1 take 1 00112233445566778899aabbccddeeff bob\n");
	BAD("TPF2BULK1 recv -1 00112233445566778899aabbccddeeff bob\n");
	BAD("TPF2BULK1 recv 4294967296 00112233445566778899aabbccddeeff bob\n");
	BAD("TPF2BULK1 recv 1 00112233445566778899AABBCCDDEEFF bob\n"); /* upper case */
	BAD("TPF2BULK1 recv 1 0011223344556677889 bob\n");
	BAD("TPF2BULK1 recv 1 00112233445566778899aabbccddeeff \n"); /* empty name */
	BAD("TPF2BULK1 recv 1 00112233445566778899aabbccddeeff\n");
	BAD("TPF2BULK1 recv  1 00112233445566778899aabbccddeeff bob\n");
	BAD("TPF2BULK1 recv 1 00112233445566778899aabbccddeeff b\nb\n");
#undef BAD
	memset(buf, 'x', sizeof(buf));
	memcpy(buf, "TPF2BULK1 recv 1 00112233445566778899aabbccddeeff ", 50);
	buf[BULK_HELLO_MAX] = '\n';
	CHECK_EQ_INT(bulk_hello_parse(buf, BULK_HELLO_MAX + 1, &h), -EBADMSG); /* over 256 */
}

int main(void)
{
	struct json_object *root = vec_load("frames.json");

	CHECK_EQ_INT(addr_parse(&A, "203.0.113.77:40001", -1), 0);
	CHECK_EQ_INT(addr_parse(&B, "[2001:db8::1]:40001", -1), 0);
	if (root != NULL) {
		test_np1(root);
		test_relay_bind(root);
		test_trlb_parse(root);
		test_save_chunk(root);
		test_mesh_and_game(root);
		test_dual_tcp_seal(root);
		test_fragment_vectors(root);
		test_bulk_hello(root);
		test_link(root);
		json_object_put(root);
	}
	test_reassembly();
	test_partial_cap();
	test_malformed_and_bounds();
	test_budget();
	return tap_done("frame");
}
