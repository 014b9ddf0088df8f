/*
 * lobby/lobby_metrics: the /metrics text (every sample's family has HELP and
 * TYPE, every label value present from the start, the counters where they
 * belong), the path and reason names the log and the labels share, and the
 * token file's checks (missing, short, not printable, good).
 */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lobby.h"
#include "lobby_metrics.h"
#include "strbuf.h"
#include "tap.h"

static struct lobby l;

/* The sample line for name (with its labels), or NULL. */
static const char *line(const char *text, const char *sample)
{
	size_t n = strlen(sample);

	for (const char *p = text; p != NULL && *p != '\0';) {
		if (strncmp(p, sample, n) == 0 && p[n] == ' ')
			return p;
		p = strchr(p, '\n');
		if (p != NULL)
			p++;
	}
	return NULL;
}

static long long value(const char *text, const char *sample)
{
	const char *p = line(text, sample);

	return p != NULL ? atoll(p + strlen(sample) + 1) : -1;
}

/* Every sample's family has # HELP and # TYPE before it. */
static void families_declared(const char *text)
{
	const char *p = text;

	while (*p != '\0') {
		const char *end = strchr(p, '\n');
		size_t n = strcspn(p, "{ ");
		char name[128], help[160], type[160];

		CHECK(end != NULL);
		if (end == NULL)
			return;
		if (*p != '#' && n < sizeof(name)) {
			memcpy(name, p, n);
			name[n] = '\0';
			CHECK(strncmp(name, "rally_lobby_", 12) == 0);
			snprintf(help, sizeof(help), "# HELP %s ", name);
			snprintf(type, sizeof(type), "# TYPE %s ", name);
			CHECK(strstr(text, help) != NULL && strstr(text, help) < p);
			CHECK(strstr(text, type) != NULL && strstr(text, type) < p);
		}
		p = end + 1;
	}
}

static void render(void)
{
	struct strbuf b;

	memset(&l, 0, sizeof(l));
	l.cfg.relay_only = true;
	l.cfg.max_players = 200;
	l.ctr.start_s = 1796626036;
	strbuf_init(&b, 1 << 20);
	lobby_metrics_render(&l, &b);
	CHECK(!b.bad && b.p != NULL);
	if (b.p == NULL)
		return;
	families_declared(b.p);
	/* Zeros are there from the first scrape: rules and panels have series. */
	CHECK_EQ_INT(value(b.p, "rally_lobby_peers{path=\"relay\"}"), 0);
	CHECK_EQ_INT(value(b.p, "rally_lobby_joins_total{outcome=\"wrong_password\"}"), 0);
	CHECK_EQ_INT(value(b.p, "rally_lobby_drops_total{reason=\"bad_seal\"}"), 0);
	CHECK_EQ_INT(value(b.p, "rally_lobby_dual_links"), 0);
	CHECK_EQ_INT(value(b.p, "rally_lobby_start_time_seconds"), 1796626036);
	CHECK_EQ_INT(value(b.p, "rally_lobby_publish_enabled"), 0);
	CHECK(strstr(b.p, "role=\"relay\"} 1\n") != NULL);
	strbuf_release(&b);

	l.cfg.relay_only = false;
	l.ctr.peers[LOBBY_PATH_PUNCHED] = 3;
	l.ctr.joins[LOBBY_JOIN_FULL] = 7;
	l.ctr.left[LOBBY_LEFT_SILENT] = 2;
	l.ctr.frames[LOBBY_DIR_TO_GAME] = 11;
	l.ctr.frame_bytes[LOBBY_DIR_TO_GAME] = 1100;
	l.ctr.rounds[LOBBY_ROUND_ABORTED] = 1;
	l.ctr.uploads[LOBBY_UPLOAD_DROPPED] = 4;
	l.ctr.publish_failed = 5;
	l.ctr.publish_last_ok_s = 1796626100;
	l.ctr.publishing = true;
	strbuf_init(&b, 1 << 20);
	lobby_metrics_render(&l, &b);
	CHECK(b.p != NULL);
	if (b.p == NULL)
		return;
	CHECK(strstr(b.p, "role=\"host\"} 1\n") != NULL);
	CHECK_EQ_INT(value(b.p, "rally_lobby_peers{path=\"punched\"}"), 3);
	CHECK_EQ_INT(value(b.p, "rally_lobby_peers{path=\"lan\"}"), 0);
	CHECK_EQ_INT(value(b.p, "rally_lobby_joins_total{outcome=\"full\"}"), 7);
	CHECK_EQ_INT(value(b.p, "rally_lobby_peers_left_total{reason=\"silent\"}"), 2);
	CHECK_EQ_INT(value(b.p, "rally_lobby_game_frames_total{direction=\"to_game\"}"), 11);
	CHECK_EQ_INT(value(b.p, "rally_lobby_game_bytes_total{direction=\"to_game\"}"), 1100);
	CHECK_EQ_INT(value(b.p, "rally_lobby_save_rounds_total{outcome=\"aborted\"}"), 1);
	CHECK_EQ_INT(value(b.p, "rally_lobby_uploads_total{outcome=\"dropped\"}"), 4);
	CHECK_EQ_INT(value(b.p, "rally_lobby_publish_total{outcome=\"failed\"}"), 5);
	CHECK_EQ_INT(value(b.p, "rally_lobby_publish_last_success_timestamp_seconds"), 1796626100);
	CHECK_EQ_INT(value(b.p, "rally_lobby_publish_enabled"), 1);
	CHECK_EQ_INT(value(b.p, "rally_lobby_metrics_unauthorized_total"), 0);
	strbuf_release(&b);
}

static void names(void)
{
	CHECK_EQ_STR(lobby_metrics_path_name(LOBBY_PATH_LAN), "lan");
	CHECK_EQ_STR(lobby_metrics_path_name(LOBBY_PATH_PUBLIC), "public");
	CHECK_EQ_STR(lobby_metrics_path_name(LOBBY_PATH_V6), "v6");
	CHECK_EQ_STR(lobby_metrics_path_name(LOBBY_PATH_PUNCHED), "punched");
	CHECK_EQ_STR(lobby_metrics_path_name(LOBBY_PATH_RELAY), "relay");
	CHECK_EQ_STR(lobby_metrics_left_name(LOBBY_LEFT_LEFT), "left");
	CHECK_EQ_STR(lobby_metrics_left_name(LOBBY_LEFT_SILENT), "silent");
	CHECK_EQ_STR(lobby_metrics_left_name(LOBBY_LEFT_VERSION), "version");
}

static int token_file(const char *text, char *path, size_t size)
{
	FILE *f;

	snprintf(path, size, "/tmp/lobbymetrics-test-%ld.token", (long)getpid());
	f = fopen(path, "w");
	if (f == NULL)
		return -1;
	fputs(text, f);
	fclose(f);
	return 0;
}

static void tokens(void)
{
	char path[128];

	CHECK_EQ_INT(lobby_metrics_check_token("/nonexistent/lobby.token"), -ENOENT);
	CHECK(token_file("short-token\n", path, sizeof(path)) == 0);
	CHECK_EQ_INT(lobby_metrics_check_token(path), -EINVAL);
	CHECK(token_file("0123456789abcdef 0123456789abcdef\n", path, sizeof(path)) == 0);
	CHECK_EQ_INT(lobby_metrics_check_token(path), -EINVAL);
	CHECK(token_file("0123456789abcdef\x01"
			 "0123456789abcdef\n",
			 path, sizeof(path)) == 0);
	CHECK_EQ_INT(lobby_metrics_check_token(path), -EINVAL);
	/* Trailing white space goes; 32 characters are enough. */
	CHECK(token_file("0123456789abcdef0123456789abcdef \r\n", path, sizeof(path)) == 0);
	CHECK_EQ_INT(lobby_metrics_check_token(path), 0);
	unlink(path);
}

int main(void)
{
	if (sodium_init() < 0)
		return 1;
	render();
	names();
	tokens();
	return tap_done("lobbymetrics");
}
