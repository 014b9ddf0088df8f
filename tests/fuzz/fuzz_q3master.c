/*
 * Fuzz target for the master side of common/q3: q3_master_classify,
 * q3_decode_heartbeat, q3_decode_getservers, q3_decode_inforesponse, the
 * response encoder and the --q3-game spec parser, all over every input.
 *
 * Beyond "no crash", it checks what master_q3.c relies on:
 * - each decoder accepts exactly what the classifier calls its message;
 * - a heartbeat tag is 1-63 characters of 33-126;
 * - a decoded getservers has printable names within their caps, a family
 *   wanted (IPv4 only for getservers), and re-encoding it canonically and
 *   decoding again gives the same request;
 * - an infoResponse that decodes has sv_maxclients > 0, a challenge view
 *   inside the input, printable game name and type within their caps; a
 *   refused one names its error;
 * - the encoder, fed servers and a datagram size made from the input,
 *   never writes more than asked, always progresses, puts the EOT mark only
 *   at the end of the last datagram, and the datagrams decode back to the
 *   servers given;
 * - a spec that parses has valid names, tags and at most 16 protocols.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fuzz.h"
#include "q3.h"

static bool printable(const char *s, size_t max, bool empty_ok)
{
	size_t n = strlen(s);

	if (n > max || (n == 0 && !empty_ok))
		return false;
	for (size_t i = 0; i < n; i++) {
		if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] > 126)
			return false;
	}
	return true;
}

static void check_heartbeat(const uint8_t *data, size_t size, enum q3_master_msg m)
{
	struct q3_heartbeat hb;
	int r = q3_decode_heartbeat(data, size, &hb);

	if (m != Q3_MSG_HEARTBEAT) {
		FUZZ_CHECK(r == -EBADMSG);
		return;
	}
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	if (r == 0)
		FUZZ_CHECK(printable(hb.tag, Q3_TAG_MAX, false));
}

static void check_getservers(const uint8_t *data, size_t size, enum q3_master_msg m)
{
	struct q3_getservers gs, again;
	char text[256];
	uint8_t pkt[300];
	int n, r = q3_decode_getservers(data, size, &gs);
	bool ext;

	if (m != Q3_MSG_GETSERVERS && m != Q3_MSG_GETSERVERSEXT) {
		FUZZ_CHECK(r == -EBADMSG);
		return;
	}
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	if (r < 0)
		return;
	ext = (gs.flags & Q3_GS_EXT) != 0;
	FUZZ_CHECK(ext == (m == Q3_MSG_GETSERVERSEXT));
	FUZZ_CHECK(gs.protocol >= 0);
	FUZZ_CHECK(printable(gs.gamename, Q3_GAMENAME_MAX, !ext));
	if (gs.flags & Q3_GS_GAMETYPE)
		FUZZ_CHECK(printable(gs.gametype, Q3_GAMETYPE_MAX, true));
	if (!ext)
		FUZZ_CHECK((gs.flags & Q3_GS_IPV4) && !(gs.flags & Q3_GS_IPV6));
	else
		FUZZ_CHECK(gs.flags & (Q3_GS_IPV4 | Q3_GS_IPV6));

	/* The canonical form decodes to the same request. */
	n = snprintf(
		text, sizeof(text), "%s %s%s%d%s%s%s%s%s%s", ext ? "getserversExt" : "getservers",
		gs.gamename, gs.gamename[0] != '\0' ? " " : "", (int)gs.protocol,
		(gs.flags & Q3_GS_EMPTY) ? " empty" : "", (gs.flags & Q3_GS_FULL) ? " full" : "",
		(gs.flags & Q3_GS_GAMETYPE) ? " gametype=" : "",
		(gs.flags & Q3_GS_GAMETYPE) ? gs.gametype : "",
		ext && (gs.flags & Q3_GS_IPV4) ? " ipv4" : "",
		ext && (gs.flags & Q3_GS_IPV6) ? " ipv6" : "");
	FUZZ_CHECK(n > 0 && (size_t)n < sizeof(text));
	n = q3_oob_build(pkt, sizeof(pkt), text, (size_t)n);
	FUZZ_CHECK(n > 0);
	FUZZ_CHECK(q3_decode_getservers(pkt, (size_t)n, &again) == 0);
	FUZZ_CHECK(again.flags == gs.flags && again.protocol == gs.protocol);
	FUZZ_CHECK(strcmp(again.gamename, gs.gamename) == 0);
	if (gs.flags & Q3_GS_GAMETYPE)
		FUZZ_CHECK(strcmp(again.gametype, gs.gametype) == 0);
}

static void check_inforesponse(const uint8_t *data, size_t size, enum q3_master_msg m)
{
	struct q3_inforesponse ir;
	int r = q3_decode_inforesponse(data, size, &ir);

	if (m != Q3_MSG_INFORESPONSE) {
		FUZZ_CHECK(r == -EBADMSG);
		return;
	}
	FUZZ_CHECK(r == 0 || r == -EPROTO);
	if (r < 0) {
		FUZZ_CHECK(ir.error != Q3_INFO_OK);
		FUZZ_CHECK(strcmp(q3_info_error_str(ir.error), "unknown") != 0);
		return;
	}
	FUZZ_CHECK(ir.error == Q3_INFO_OK);
	FUZZ_CHECK(ir.challenge != NULL);
	FUZZ_CHECK((const uint8_t *)ir.challenge >= data &&
		   ir.challenge_len <= size - (size_t)((const uint8_t *)ir.challenge - data));
	FUZZ_CHECK(ir.maxclients > 0 && ir.maxclients <= INT32_MAX);
	FUZZ_CHECK(ir.clients <= INT32_MAX && ir.protocol >= 0);
	FUZZ_CHECK(printable(ir.gametype, Q3_GAMETYPE_MAX, true));
	if (ir.has_gamename)
		FUZZ_CHECK(printable(ir.gamename, Q3_GAMENAME_MAX, false));
	else
		FUZZ_CHECK(ir.gamename[0] == '\0');
}

#define MAX_SRV (512)
#define ENTRY   (19)

static void check_encoder(const uint8_t *data, size_t size)
{
	static struct q3_srv v[MAX_SRV];
	static uint8_t dg[Q3_MASTER_MAX_OUT + 16];
	struct q3_srvlist list = {.v = v};
	size_t cap, taken = 0, seen = 0, rounds = 0;
	bool eot = false;

	if (size < 3)
		return;
	/* A datagram size from the smallest allowed (header + one IPv6
	 * entry) to 1,400; the family mix and ports from the rest. */
	list.ext = data[2] & 1;
	cap = 25 + ENTRY + ((size_t)data[0] << 8 | data[1]) % (Q3_MASTER_MAX_OUT - 25 - ENTRY + 1);
	for (size_t o = 3; o + ENTRY <= size && list.n < MAX_SRV; o += ENTRY) {
		struct q3_srv *s = &v[list.n++];

		memset(s, 0, sizeof(*s));
		s->v6 = list.ext && (data[o] & 1);
		memcpy(s->ip, data + o + 1, s->v6 ? 16 : 4);
		s->port = (uint16_t)(data[o + 17] << 8 | data[o + 18]);
	}
	while (taken <= list.n) {
		const char *hdr = list.ext ? "getserversExtResponse" : "getserversResponse";
		size_t hl = 4 + strlen(hdr), before = taken, p;
		ssize_t n;

		FUZZ_CHECK(!eot);
		memset(dg, 0xa5, sizeof(dg));
		n = q3_encode_getservers_resp(dg, cap, &list, &taken);
		FUZZ_CHECK(n > 0 && (size_t)n <= cap);
		FUZZ_CHECK(dg[cap] == 0xa5);
		FUZZ_CHECK(taken > before);
		FUZZ_CHECK(memcmp(dg + 4, hdr, hl - 4) == 0);
		for (p = hl; p < (size_t)n;) {
			if ((size_t)n - p == 7 && memcmp(dg + p, "\\EOT\0\0\0", 7) == 0 &&
			    taken == list.n + 1) {
				eot = true;
				break;
			}
			FUZZ_CHECK(seen < list.n);
			if (v[seen].v6) {
				FUZZ_CHECK(dg[p] == '/' && (size_t)n - p >= 19);
				FUZZ_CHECK(memcmp(dg + p + 1, v[seen].ip, 16) == 0);
				FUZZ_CHECK((dg[p + 17] << 8 | dg[p + 18]) == v[seen].port);
				p += 19;
			} else {
				FUZZ_CHECK(dg[p] == '\\' && (size_t)n - p >= 7);
				FUZZ_CHECK(memcmp(dg + p + 1, v[seen].ip, 4) == 0);
				FUZZ_CHECK((dg[p + 5] << 8 | dg[p + 6]) == v[seen].port);
				p += 7;
			}
			seen++;
		}
		FUZZ_CHECK(++rounds <= list.n + 2);
	}
	FUZZ_CHECK(eot && seen == list.n);
}

static void check_spec(const uint8_t *data, size_t size)
{
	char spec[512], err[160];
	struct q3_game g;
	size_t n = size < sizeof(spec) - 1 ? size : sizeof(spec) - 1;

	memcpy(spec, data, n);
	spec[n] = '\0';
	err[0] = '\0';
	if (q3_parse_game_spec(spec, &g, err, sizeof(err)) < 0) {
		FUZZ_CHECK(err[0] != '\0' && memchr(err, '\0', sizeof(err)) != NULL);
		return;
	}
	FUZZ_CHECK(printable(g.name, Q3_GAMENAME_MAX, false));
	FUZZ_CHECK(printable(g.heartbeat, Q3_TAG_MAX, false));
	FUZZ_CHECK(printable(g.flatline, Q3_TAG_MAX, true));
	FUZZ_CHECK(strcmp(g.heartbeat, g.flatline) != 0);
	FUZZ_CHECK(strcmp(g.heartbeat, Q3_HEARTBEAT_GENERIC) != 0);
	FUZZ_CHECK(g.nprotocols <= Q3_GAME_MAX_PROTOCOLS);
	FUZZ_CHECK((g.options & ~(unsigned)(Q3_GAME_SEND_EMPTY | Q3_GAME_SEND_FULL)) == 0);
	for (size_t i = 0; i < g.nprotocols; i++)
		FUZZ_CHECK(g.protocols[i] >= 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum q3_master_msg m = q3_master_classify(data, size);
	uint8_t rnd[Q3_CHALLENGE_RND];
	char ch[Q3_CHALLENGE_MAX + 1];

	FUZZ_CHECK(m == Q3_MSG_NOT_OOB || q3_is_oob(data, size));
	check_heartbeat(data, size, m);
	check_getservers(data, size, m);
	check_inforesponse(data, size, m);
	check_encoder(data, size);
	check_spec(data, size);
	if (size >= sizeof(rnd)) {
		size_t n;

		memcpy(rnd, data, sizeof(rnd));
		n = q3_challenge_make(rnd, ch);
		FUZZ_CHECK(q3_challenge_valid(ch, n) && strlen(ch) == n);
	}
	return 0;
}
