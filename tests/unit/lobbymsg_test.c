/*
 * lobby/lobby_msg and lobby/lobby_ipcmsg, the lobby's two pure codecs: every
 * peer message encodes to the bytes Python's json.dumps writes in
 * netpunch's key order (netpunch-wire.md §7, §11) and decodes back; odd
 * input (unknown t, wrong types, duplicate keys, caps) reads as the spec
 * says; the game's commands decode and our events encode as §15 shows them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lobby_ipcmsg.h"
#include "lobby_msg.h"
#include "strbuf.h"
#include "tap.h"

static struct strbuf out;

static const char *enc(const struct lobby_msg *m)
{
	strbuf_release(&out);
	strbuf_init(&out, LOBBY_MSG_MAX);
	CHECK_EQ_INT(lobby_msg_encode(m, &out), 0);
	return out.p != NULL ? out.p : "";
}

static const char *enc_event(const struct lobby_event *e)
{
	strbuf_release(&out);
	strbuf_init(&out, LOBBY_MSG_MAX);
	CHECK_EQ_INT(lobby_event_encode(e, &out), 0);
	return out.p != NULL ? out.p : "";
}

static int dec(const char *s, struct lobby_msg *m)
{
	return lobby_msg_decode((const uint8_t *)s, strlen(s), m);
}

/* decode, then encode: the same bytes (for texts in netpunch's form). */
static void round_trip(const char *s)
{
	struct lobby_msg m;

	CHECK_EQ_INT(dec(s, &m), 0);
	CHECK_EQ_STR(enc(&m), s);
	lobby_msg_release(&m);
}

static void test_joiner_messages(void)
{
	struct lobby_msg m;

	lobby_msg_init(&m, LOBBY_MSG_JOIN);
	m.join = (struct lobby_msg_join){"0.6.1.24", "bob", false, 0, true, 1, "AEAQ", 0};
	CHECK_EQ_STR(enc(&m), "{\"t\": \"join\", \"version\": \"0.6.1.24\", \"name\": \"bob\", "
			      "\"mesh\": false, \"recovery\": 0, \"batches\": 1, \"profile\": "
			      "\"AEAQ\"}");
	/* A rename: no batches; no profile without one. */
	m.join.has_batches = false;
	m.join.profile = NULL;
	CHECK_EQ_STR(enc(&m), "{\"t\": \"join\", \"version\": \"0.6.1.24\", \"name\": \"bob\", "
			      "\"mesh\": false, \"recovery\": 0}");
	lobby_msg_init(&m, LOBBY_MSG_PING);
	CHECK_EQ_STR(enc(&m), "{\"t\": \"ping\"}");
	lobby_msg_init(&m, LOBBY_MSG_LEAVE);
	CHECK_EQ_STR(enc(&m), "{\"t\": \"leave\"}");
	lobby_msg_init(&m, LOBBY_MSG_CHAT);
	m.chat.text = "h\xc3\xa9 \xf0\x9f\x98\x80";
	CHECK_EQ_STR(enc(&m), "{\"t\": \"chat\", \"text\": \"h\\u00e9 \\ud83d\\ude00\"}");
	lobby_msg_init(&m, LOBBY_MSG_STAGE);
	m.stage = "receiving save 10%";
	CHECK_EQ_STR(enc(&m), "{\"t\": \"stage\", \"text\": \"receiving save 10%\"}");
	lobby_msg_init(&m, LOBBY_MSG_COMPANY);
	m.company.player = "bob";
	m.company.id = 7;
	CHECK_EQ_STR(enc(&m), "{\"t\": \"company\", \"player\": \"bob\", \"id\": 7}");
	round_trip("{\"t\": \"mode\", \"mode\": \"companies\"}");
	round_trip("{\"t\": \"links\", \"direct\": [\"alice\", \"carol\"]}");
	round_trip("{\"t\": \"log\", \"lines\": [\"a\", \"b\"]}");
	round_trip("{\"t\": \"mesh_hi\", \"name\": \"carol\"}");
}

static void test_host_messages(void)
{
	static const char *const players[] = {"alice", "bob"};
	static const struct lobby_msg_entry companies[] = {{"alice", NULL, 1}, {"bob", NULL, 1}};
	static const struct lobby_msg_entry stages[] = {{"bob", "loading", 0}};
	static const struct lobby_msg_entry profiles[] = {{"bob", "AEAQ", 0}};
	struct lobby_msg m;
	struct lobby_msg_roster *r = &m.roster;
	const char *tl = "00112233445566778899aabbccddeeff";

	lobby_msg_init(&m, LOBBY_MSG_WELCOME);
	m.welcome = (struct lobby_msg_welcome){"0.6.1.24", tl,    "bob", "alice", 0,
					       "L",        false, NULL,  false};
	CHECK_EQ_STR(enc(&m), "{\"t\": \"welcome\", \"version\": \"0.6.1.24\", "
			      "\"transport_lobby\": \"00112233445566778899aabbccddeeff\", \"you\": "
			      "\"bob\", \"host\": \"alice\", \"recovery\": 0, \"lobby\": \"L\", "
			      "\"relay\": false, \"mods\": null, \"mods_unknown\": false}");
	lobby_msg_init(&m, LOBBY_MSG_ROSTER);
	r->version = "0.6.1.24";
	r->transport_lobby = tl;
	r->players = (struct lobby_msg_names){false, 2, players};
	r->host = "alice";
	r->lobby = "L";
	r->stored_age = (struct lobby_msg_num){.present = true, .i = -1};
	r->stored_max = (struct lobby_msg_num){.present = true, .i = -1};
	r->letters.null = true;
	r->started = true;
	r->profiles = (struct lobby_msg_dict){false, 1, profiles};
	r->companies = (struct lobby_msg_dict){false, 2, companies};
	r->stages = (struct lobby_msg_dict){false, 1, stages};
	r->mode = "coop";
	CHECK_EQ_STR(
		enc(&m),
		"{\"t\": \"roster\", \"version\": \"0.6.1.24\", \"transport_lobby\": "
		"\"00112233445566778899aabbccddeeff\", \"players\": [\"alice\", \"bob\"], "
		"\"recovery\": 0, \"host\": \"alice\", \"lobby\": \"L\", \"relay\": false, "
		"\"mods\": null, \"mods_unknown\": false, \"stored_age\": -1, \"stored_max\": "
		"-1, \"letters\": null, \"started\": true, \"start_save\": false, \"profiles\": "
		"{\"bob\": \"AEAQ\"}, \"links\": {}, \"companies\": {\"alice\": 1, \"bob\": 1}, "
		"\"stages\": {\"bob\": \"loading\"}, \"mode\": \"coop\"}");
	lobby_msg_init(&m, LOBBY_MSG_CHAT);
	m.chat = (struct lobby_msg_chat){"alice", "hello", true, 1764600000, true, 3};
	CHECK_EQ_STR(enc(&m), "{\"t\": \"chat\", \"from\": \"alice\", \"text\": \"hello\", \"ts\": "
			      "1764600000, \"cid\": 3}");
	lobby_msg_init(&m, LOBBY_MSG_START);
	CHECK_EQ_STR(enc(&m), "{\"t\": \"start\", \"save\": false}");
	m.start = (struct lobby_msg_start){true, true};
	CHECK_EQ_STR(enc(&m), "{\"t\": \"start\", \"save\": true, \"switch\": true}");
	lobby_msg_init(&m, LOBBY_MSG_REJECT);
	m.reject = "wrong password";
	/* The plain reject a joiner's §1.3 check looks for, byte for byte. */
	CHECK_EQ_STR(enc(&m), "{\"t\": \"reject\", \"reason\": \"wrong password\"}");
	lobby_msg_init(&m, LOBBY_MSG_BYE);
	CHECK_EQ_STR(enc(&m), "{\"t\": \"bye\"}");
	round_trip("{\"t\": \"status\", \"state\": \"waiting\", \"detail\": \"a late joiner\"}");
	/* What a relay lobby sends: letters, a float age, mods and links. */
	round_trip(
		"{\"t\": \"roster\", \"version\": \"0.6.1.24\", \"transport_lobby\": \"x\", "
		"\"players\": [\"bob\"], \"recovery\": 4, \"host\": \"bob\", \"lobby\": \"R\", "
		"\"relay\": true, \"mods\": [[\"123\", \"1.0\"], [5, 2.5]], \"mods_unknown\": "
		"true, \"stored_age\": 12.5, \"stored_max\": 180, \"letters\": {\"bob\": \"B\"}, "
		"\"started\": false, \"start_save\": false, \"profiles\": {}, \"links\": "
		"{\"bob\": [\"carol\"], \"carol\": []}, \"companies\": {\"bob\": 2}, \"stages\": "
		"{}, \"mode\": \"companies\"}");
}

static void test_transfer_messages(void)
{
	static const struct lobby_msg_file files[] = {{"incoming_save.sav", 2000, "ab"},
						      {"incoming_save.jpg", 1000, "cd"}};
	static const long long nack[] = {13, 15};
	struct lobby_msg m;

	lobby_msg_init(&m, LOBBY_MSG_FBEGIN);
	m.fbegin = (struct lobby_msg_fbegin){.sid = 4294967295u,
					     .total_bytes = 3000,
					     .chunk = 1350,
					     .total_chunks = 3,
					     .nfiles = 2,
					     .files = files,
					     .sha256 = "ef",
					     .kind = "save",
					     .mods = "[]",
					     .has_tcp = true,
					     .tcp_port = 29471,
					     .tcp_token = "00ff"};
	CHECK_EQ_STR(
		enc(&m),
		"{\"t\": \"fbegin\", \"sid\": 4294967295, \"total_bytes\": 3000, \"chunk\": "
		"1350, \"total_chunks\": 3, \"files\": [{\"name\": \"incoming_save.sav\", "
		"\"size\": 2000, \"sha256\": \"ab\"}, {\"name\": \"incoming_save.jpg\", \"size\": "
		"1000, \"sha256\": \"cd\"}], \"sha256\": \"ef\", \"kind\": \"save\", \"mods\": [], "
		"\"mods_unknown\": false, \"tcp\": {\"port\": 29471, \"token\": \"00ff\"}}");
	m.fbegin.tcp_port = 0;
	m.fbegin.has_batch = true;
	m.fbegin.batch_k = 1;
	m.fbegin.batch_n = 2;
	CHECK(strstr(enc(&m), "\"mods_unknown\": false, \"batch\": [1, 2], \"tcp\": {\"token\": "
			      "\"00ff\"}}") != NULL);
	lobby_msg_init(&m, LOBBY_MSG_FACK);
	m.fack = (struct lobby_msg_fack){7, 12, 2, nack, true, true, 4096};
	CHECK_EQ_STR(enc(&m), "{\"t\": \"fack\", \"sid\": 7, \"base\": 12, \"nack\": [13, 15], "
			      "\"verifying\": true, \"progress\": 4096}");
	lobby_msg_init(&m, LOBBY_MSG_FDONE);
	m.fdone = (struct lobby_msg_fdone){7, true, true};
	CHECK_EQ_STR(enc(&m), "{\"t\": \"fdone\", \"sid\": 7, \"ok\": true}");
	m.fdone.ok = false;
	CHECK_EQ_STR(enc(&m), "{\"t\": \"fdone\", \"sid\": 7, \"ok\": false, \"final\": true}");
	round_trip("{\"t\": \"fbegin_ack\", \"sid\": 7, \"need\": [], \"ask\": false, "
		   "\"tcp_port\": 5000}");
}

/* mods_manifest (a host's advertise_mods), and netpunch's reading of a
 * welcome or roster without mods: [] (a manifest without them: null). */
static void test_mods_manifest(void)
{
	struct lobby_msg m;

	round_trip("{\"t\": \"mods_manifest\", \"mods\": [[\"123\", 2]], \"mods_unknown\": false}");
	round_trip("{\"t\": \"mods_manifest\", \"mods\": null, \"mods_unknown\": true}");
	CHECK_EQ_INT(dec("{\"t\": \"mods_manifest\"}", &m), 0);
	CHECK(m.type == LOBBY_MSG_MODS_MANIFEST && m.mods_manifest.mods == NULL &&
	      !m.mods_manifest.mods_unknown);
	lobby_msg_release(&m);
	CHECK_EQ_INT(dec("{\"t\": \"welcome\", \"version\": \"0.6.1.24\"}", &m), 0);
	CHECK(m.welcome.mods != NULL && strcmp(m.welcome.mods, "[]") == 0);
	lobby_msg_release(&m);
	CHECK_EQ_INT(dec("{\"t\": \"welcome\", \"mods\": null}", &m), 0);
	CHECK(m.welcome.mods == NULL);
	lobby_msg_release(&m);
	CHECK_EQ_INT(dec("{\"t\": \"roster\", \"players\": []}", &m), 0);
	CHECK(m.roster.mods != NULL && strcmp(m.roster.mods, "[]") == 0);
	lobby_msg_release(&m);
}

/* rally's extension: keys a netpunch peer never gets (docs/transfer.md). */
static void test_rally_extension(void)
{
	struct lobby_msg m;

	lobby_msg_init(&m, LOBBY_MSG_JOIN);
	m.join = (struct lobby_msg_join){"0.6.1.24", "bob", false, 0, true, 1, NULL, 1};
	CHECK_EQ_STR(enc(&m), "{\"t\": \"join\", \"version\": \"0.6.1.24\", \"name\": \"bob\", "
			      "\"mesh\": false, \"recovery\": 0, \"batches\": 1, \"rally\": 1}");
	CHECK_EQ_INT(dec(enc(&m), &m), 0);
	CHECK_EQ_INT(m.join.rally, 1);
	lobby_msg_release(&m);
	round_trip("{\"t\": \"fbegin\", \"sid\": 9, \"total_bytes\": 10, \"chunk\": 61440, "
		   "\"total_chunks\": 1, \"files\": [], \"sha256\": \"ab\", \"kind\": \"save\", "
		   "\"mods\": [], \"mods_unknown\": false, \"rally\": {\"v\": 1, \"window\": 8192, "
		   "\"fb_ms\": 10}}");
	CHECK_EQ_INT(dec("{\"t\": \"fbegin\", \"sid\": 9, \"rally\": {\"v\": 1, \"window\": 8192, "
			 "\"fb_ms\": 10}}",
			 &m),
		     0);
	CHECK(m.fbegin.has_rally && m.fbegin.rally_v == 1 && m.fbegin.rally_window == 8192 &&
	      m.fbegin.rally_fb_ms == 10);
	lobby_msg_release(&m);
	round_trip("{\"t\": \"fbegin_ack\", \"sid\": 7, \"need\": [], \"ask\": false, "
		   "\"rally\": {\"v\": 1, \"have\": [0, 10, 12, 20]}}");
	/* An odd count loses its last value; a non-integer ends the list. */
	CHECK_EQ_INT(dec("{\"t\": \"fbegin_ack\", \"sid\": 7, \"rally\": {\"v\": 1, \"have\": "
			 "[0, 10, 12]}}",
			 &m),
		     0);
	CHECK(m.fbegin_ack.has_rally && m.fbegin_ack.nhave == 2 && m.fbegin_ack.have[1] == 10);
	lobby_msg_release(&m);
	CHECK_EQ_INT(dec("{\"t\": \"fbegin_ack\", \"sid\": 7, \"rally\": {\"have\": "
			 "[0, 10, \"x\", 20, 30]}}",
			 &m),
		     0);
	CHECK(m.fbegin_ack.nhave == 2 && m.fbegin_ack.rally_v == 0);
	lobby_msg_release(&m);
	round_trip("{\"t\": \"xstat\", \"sid\": 7, \"got\": 100, \"hs\": 120, \"age_us\": 350, "
		   "\"lost\": 21, \"t_us\": 123456789}");
	CHECK_EQ_INT(dec("{\"t\": \"xstat\", \"sid\": 7}", &m), 0);
	CHECK(m.type == LOBBY_MSG_XSTAT && m.xstat.got == -1 && m.xstat.hs == -1);
	lobby_msg_release(&m);
	CHECK_EQ_INT(dec("{\"t\": \"xstat\"}", &m), -EBADMSG);
}

static void test_decode_rules(void)
{
	struct lobby_msg m;
	char *big;
	size_t n;

	/* Not messages at all. */
	CHECK_EQ_INT(dec("", &m), -EBADMSG);
	CHECK_EQ_INT(dec("[1]", &m), -EBADMSG);
	CHECK_EQ_INT(dec("{\"x\": 1}", &m), -EBADMSG);
	CHECK_EQ_INT(dec("{\"t\": 5}", &m), -EBADMSG);
	CHECK_EQ_INT(dec("{\"t\": \"ping\"} x", &m), -EBADMSG);
	CHECK_EQ_INT(dec(" {\"t\": \"ping\"}", &m), -EBADMSG); /* payload byte 0 is '{' */
	CHECK(m.mem == NULL);
	lobby_msg_release(&m); /* harmless after a failure */
	/* A t we do not know: a message, which does not encode. */
	CHECK_EQ_INT(dec("{\"t\": \"mods_request\", \"need\": []}", &m), 0);
	CHECK_EQ_INT(m.type, LOBBY_MSG_UNKNOWN);
	CHECK_EQ_STR(m.t, "mods_request");
	strbuf_release(&out);
	strbuf_init(&out, 1024);
	CHECK_EQ_INT(lobby_msg_encode(&m, &out), -EINVAL);
	lobby_msg_release(&m);
	/* The last of duplicate keys wins, as in Python. */
	CHECK_EQ_INT(dec("{\"t\": \"reject\", \"t\": \"start\"}", &m), 0);
	CHECK_EQ_INT(m.type, LOBBY_MSG_START);
	lobby_msg_release(&m);
	/* Wrong types read as absent; truthiness for flags. */
	CHECK_EQ_INT(dec("{\"t\": \"join\", \"version\": 6, \"name\": null, \"mesh\": 1, "
			 "\"batches\": \"1\"}",
			 &m),
		     0);
	CHECK(m.join.version == NULL && m.join.name == NULL && m.join.mesh);
	CHECK(!m.join.has_batches && m.join.profile == NULL);
	lobby_msg_release(&m);
	CHECK_EQ_INT(dec("{\"t\": \"company\", \"player\": \"bob\", \"id\": 2.0}", &m), 0);
	CHECK_EQ_INT(m.company.id, 0);
	lobby_msg_release(&m);
	/* Lists keep their strings; dicts the values of their kind. */
	CHECK_EQ_INT(dec("{\"t\": \"roster\", \"players\": [\"a\", 1, null, \"b\"], \"companies\": "
			 "{\"a\": 1, \"b\": \"x\"}, \"stages\": {\"a\": \"s\", \"b\": 2}, "
			 "\"letters\": 5}",
			 &m),
		     0);
	CHECK_EQ_INT(m.roster.players.n, 2);
	CHECK_EQ_STR(m.roster.players.v[1], "b");
	CHECK_EQ_INT(m.roster.companies.n, 1);
	CHECK_EQ_INT(m.roster.stages.n, 1);
	CHECK(m.roster.letters.null && m.roster.links.null && !m.roster.has_relay);
	CHECK(m.roster.host == NULL && !m.roster.stored_age.present);
	lobby_msg_release(&m);
	/* Transfer messages need a u32 sid. */
	CHECK_EQ_INT(dec("{\"t\": \"fack\", \"sid\": -1}", &m), -EBADMSG);
	CHECK_EQ_INT(dec("{\"t\": \"fdone\", \"sid\": 4294967296, \"ok\": true}", &m), -EBADMSG);
	CHECK_EQ_INT(dec("{\"t\": \"fbegin_ack\"}", &m), -EBADMSG);
	/* At most 128 NACKs are kept. */
	big = malloc(8192);
	n = (size_t)snprintf(big, 8192, "{\"t\": \"fack\", \"sid\": 1, \"base\": 0, \"nack\": [");
	for (int i = 0; i < 300; i++)
		n += (size_t)snprintf(big + n, 8192 - n, "%s%d", i ? ", " : "", i);
	snprintf(big + n, 8192 - n, "]}");
	CHECK_EQ_INT(dec(big, &m), 0);
	CHECK_EQ_INT(m.fack.nnack, LOBBY_MSG_MAX_NACK);
	CHECK_EQ_INT(m.fack.nack[127], 127);
	lobby_msg_release(&m);
	/* An fbegin with more files than we keep is refused whole: one name
	 * we did not look at could be the one to refuse. */
	n = (size_t)snprintf(big, 8192, "{\"t\": \"fbegin\", \"sid\": 1, \"files\": [");
	for (int i = 0; i <= LOBBY_MSG_MAX_FILES; i++)
		n += (size_t)snprintf(big + n, 8192 - n, "%s{\"name\": \"f%d\"}", i ? ", " : "", i);
	snprintf(big + n, 8192 - n, "]}");
	CHECK_EQ_INT(dec(big, &m), -EBADMSG);
	free(big);
	/* Files that are not objects keep their place, empty. */
	CHECK_EQ_INT(dec("{\"t\": \"fbegin\", \"sid\": 2, \"files\": [3, {\"name\": \"a\"}]}", &m),
		     0);
	CHECK_EQ_INT(m.fbegin.nfiles, 2);
	CHECK(m.fbegin.files[0].name == NULL && m.fbegin.files[0].size == -1);
	CHECK_EQ_STR(m.fbegin.files[1].name, "a");
	lobby_msg_release(&m);
	/* Nesting past the depth we parse. */
	CHECK_EQ_INT(
		dec("{\"t\": \"x\", \"a\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]"
		    "]]]]]]]]]]]]]]]]}",
		    &m),
		-EBADMSG);
}

static void test_clean(void)
{
	char o[16];

	lobby_msg_clean("a\tb\x7f"
			"c\xc3\xa9"
			"d",
			64, o, sizeof(o));
	CHECK_EQ_STR(o, "abc\xc3\xa9"
			"d");
	lobby_msg_clean("abcdef", 3, o, sizeof(o));
	CHECK_EQ_STR(o, "abc");
	/* Whole characters only when the buffer runs out. */
	lobby_msg_clean("ab\xc3\xa9", 64, o, 4);
	CHECK_EQ_STR(o, "ab");
}

static void test_commands(void)
{
	struct lobby_cmd c;
	char err[96];

#define CMD(s) lobby_cmd_decode(s, strlen(s), &c, err, sizeof(err))
	CHECK_EQ_INT(CMD("{\"cmd\": \"chat\", \"text\": \"hi\"}\r "), 0);
	CHECK_EQ_INT(c.type, LOBBY_CMD_CHAT);
	CHECK_EQ_STR(c.text, "hi");
	lobby_cmd_release(&c);
	CHECK_EQ_INT(CMD("{\"cmd\": \"company\", \"player\": \"bob\", \"id\": 3}"), 0);
	CHECK(c.type == LOBBY_CMD_COMPANY && c.company.id == 3);
	lobby_cmd_release(&c);
	CHECK_EQ_INT(CMD("{\"cmd\": \"start\", \"save\": \"/s/a.sav\", \"switch\": true}"), 0);
	CHECK(c.type == LOBBY_CMD_START && c.start.has_switch);
	CHECK_EQ_STR(c.start.save, "/s/a.sav");
	lobby_cmd_release(&c);
	CHECK_EQ_INT(CMD("{\"cmd\": \"start\"}"), 0);
	CHECK(c.type == LOBBY_CMD_START && c.start.save == NULL);
	lobby_cmd_release(&c);
	CHECK_EQ_INT(CMD("{\"cmd\": \"publish\", \"on\": 1}"), 0);
	CHECK(c.type == LOBBY_CMD_PUBLISH && c.on);
	lobby_cmd_release(&c);
	CHECK_EQ_INT(CMD("{\"cmd\": \"crossplay\", \"on\": true}"), 0);
	CHECK(c.type == LOBBY_CMD_CROSSPLAY && c.on);
	lobby_cmd_release(&c);
	CHECK_EQ_INT(CMD("{\"cmd\": \"advertise_mods\", \"save\": \"/s/a.sav\"}"), 0);
	CHECK_EQ_INT(c.type, LOBBY_CMD_ADVERTISE_MODS);
	CHECK_EQ_STR(c.save, "/s/a.sav");
	lobby_cmd_release(&c);
	CHECK_EQ_INT(CMD("{\"cmd\": \"note\", \"text\": \"n\"}"), 0);
	CHECK(c.type == LOBBY_CMD_NOTE && strcmp(c.text, "n") == 0);
	lobby_cmd_release(&c);
	CHECK_EQ_INT(CMD("{\"cmd\": \"sync_taking\"}"), 0);
	CHECK_EQ_INT(c.type, LOBBY_CMD_UNKNOWN);
	CHECK_EQ_STR(c.cmd, "sync_taking");
	lobby_cmd_release(&c);
	CHECK_EQ_INT(CMD("  \r"), -ENODATA);
	CHECK_EQ_INT(CMD("{\"cmd\": 5}"), -EBADMSG);
	CHECK_EQ_STR(err, "no cmd");
	CHECK_EQ_INT(CMD("{\"cmd\": "), -EBADMSG);
	CHECK(err[0] != '\0' && c.root == NULL);
#undef CMD
}

static void test_events(void)
{
	static const char *const players[] = {"alice", "bob"};
	static const struct lobby_msg_entry companies[] = {{"alice", NULL, 1}, {"bob", NULL, 2}};
	struct lobby_event e = {.type = LOBBY_EV_CODE};

	e.code.code = "ABC";
	CHECK_EQ_STR(enc_event(&e), "{\"type\": \"code\", \"code\": \"ABC\", \"steam\": \"\", "
				    "\"crossplay\": false, \"cross_code\": \"\"}");
	/* What a host without Steam says (lobby.py emit_code). */
	e.code.crossplay = true;
	e.code.cross_code = "ABC";
	CHECK_EQ_STR(enc_event(&e), "{\"type\": \"code\", \"code\": \"ABC\", \"steam\": \"\", "
				    "\"crossplay\": true, \"cross_code\": \"ABC\"}");
	e = (struct lobby_event){.type = LOBBY_EV_TRANSPORT_LOBBY, .epoch = "ab"};
	CHECK_EQ_STR(enc_event(&e), "{\"type\": \"transport_lobby\", \"epoch\": \"ab\"}");
	e = (struct lobby_event){.type = LOBBY_EV_STATUS, .status = {"failed", "lobby full"}};
	CHECK_EQ_STR(enc_event(&e),
		     "{\"type\": \"status\", \"state\": \"failed\", \"detail\": \"lobby full\"}");
	e = (struct lobby_event){.type = LOBBY_EV_CHAT, .chat = {"alice", "hi", true, 17}};
	CHECK_EQ_STR(enc_event(&e),
		     "{\"type\": \"chat\", \"from\": \"alice\", \"text\": \"hi\", \"ts\": 17}");
	e.chat.has_ts = false;
	CHECK_EQ_STR(enc_event(&e), "{\"type\": \"chat\", \"from\": \"alice\", \"text\": \"hi\"}");
	e = (struct lobby_event){.type = LOBBY_EV_START, .start = {false, false}};
	CHECK_EQ_STR(enc_event(&e), "{\"type\": \"start\", \"save\": false}");
	e = (struct lobby_event){.type = LOBBY_EV_ROSTER_HOST};
	e.roster.players = (struct lobby_msg_names){false, 2, players};
	e.roster.you = e.roster.host = "alice";
	e.roster.lobby = "L";
	e.roster.has_relay = true;
	e.roster.companies = (struct lobby_msg_dict){false, 2, companies};
	e.roster.mode = "companies";
	CHECK_EQ_STR(
		enc_event(&e),
		"{\"type\": \"roster\", \"players\": [\"alice\", \"bob\"], \"you\": \"alice\", "
		"\"host\": \"alice\", \"lobby\": \"L\", \"relay\": false, \"companies\": "
		"{\"alice\": 1, \"bob\": 2}, \"stages\": {}, \"mode\": \"companies\", "
		"\"join_freeze\": false}");
	/* The joiner's order; what the host did not send is null. */
	e.type = LOBBY_EV_ROSTER_JOIN;
	e.roster.you = "bob";
	e.roster.has_relay = false;
	e.roster.letters.null = true;
	e.roster.stored_age = (struct lobby_msg_num){.present = true, .i = -1};
	CHECK_EQ_STR(
		enc_event(&e),
		"{\"type\": \"roster\", \"players\": [\"alice\", \"bob\"], \"you\": \"bob\", "
		"\"host\": \"alice\", \"lobby\": \"L\", \"companies\": {\"alice\": 1, \"bob\": "
		"2}, \"stages\": {}, \"relay\": null, \"letters\": null, \"stored_age\": -1, "
		"\"stored_max\": null, \"mode\": \"companies\"}");

	/* The mods events: the host's manifest says mods_unknown, the
	 * joiner's does not. */
	e = (struct lobby_event){.type = LOBBY_EV_MODS_MANIFEST};
	e.mods_manifest.has_unknown = true;
	e.mods_manifest.unknown = true;
	CHECK_EQ_STR(enc_event(&e),
		     "{\"type\": \"mods_manifest\", \"mods\": null, \"mods_unknown\": true}");
	e = (struct lobby_event){.type = LOBBY_EV_MODS_MANIFEST};
	e.mods_manifest.mods = "[[\"1234\", 2]]";
	CHECK_EQ_STR(enc_event(&e), "{\"type\": \"mods_manifest\", \"mods\": [[\"1234\", 2]]}");
	e = (struct lobby_event){.type = LOBBY_EV_MODS_CLEAR};
	CHECK_EQ_STR(enc_event(&e), "{\"type\": \"mods_clear\"}");
	e = (struct lobby_event){.type = LOBBY_EV_MODS_CANCELLED, .mods_cancelled = "no"};
	CHECK_EQ_STR(enc_event(&e), "{\"type\": \"mods_cancelled\", \"text\": \"no\"}");
}

int main(void)
{
	test_joiner_messages();
	test_host_messages();
	test_transfer_messages();
	test_rally_extension();
	test_mods_manifest();
	test_decode_rules();
	test_clean();
	test_commands();
	test_events();
	strbuf_release(&out);
	return tap_done("lobbymsg");
}
