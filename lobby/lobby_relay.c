/*
 * The dedicated relay lobby's own rules (lobby_relay.h; lobby.py run_host
 * with relay_only): the leader's upload, the stored world and when it goes
 * out, /new, and the state that outlives the process.
 */
#include "lobby_relay.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lobby_save.h"
#include "lobby_xfer.h"
#include "log.h"
#include "statefile.h"
#include "strbuf.h"

#define TICK_MS (1000) /* the upload's progress told to those waiting */
/* An upload that brings nothing this long is given up (a leader that
 * began one and sends no more would hold the relay's world for ever). */
#define UPLOAD_STALL_MS (LOBBY_XFER_TIMEOUT_MS)
#define U2026           "\xe2\x80\xa6"

struct lobby_relay {
	struct lobby *l;
	char dir[PATH_MAX];
	char letters_path[PATH_MAX], chips_path[PATH_MAX], stored[PATH_MAX];
	struct lobby_relay_names *letters, *chips;
	/* The leader's upload: one receiver for the relay's life, a round
	 * from up_from while uploading. */
	struct lobby_xrecv *up;
	struct addr up_from;
	bool uploading;
	int told_pct;
	long long up_moved_ms; /* its last fbegin or chunk */
	/* A completed upload not yet handed out (the leader holds it), and
	 * the round it was. */
	bool held, handed_any;
	uint32_t handed_sid;
	struct ev_timer resume, hand, tick;
	struct addr resume_for;
	/* When the running session's world left the relay (unix s; 0: it
	 * did not resume one). */
	long long session_epoch;
	struct log_ratelimit warn;
};

/* ---- files ---- */

static int join_path(char *out, size_t size, const char *dir, const char *name)
{
	if (snprintf(out, size, "%s/%s", dir, name) >= (int)size)
		return -ENAMETOOLONG;
	return 0;
}

/* A state file that cannot be used: said plainly, named, left alone. */
static void say_corrupt(const char *path, const char *why)
{
	log_err("relay-state-unusable file=%s error=\"%s\"", path, why);
	fprintf(stderr,
		"rally-lobby: %s: %s; the file was left as it is: fix it or move it away, "
		"then start again\n",
		path, why);
}

static int load_names(struct lobby_relay_names *t, const char *path)
{
	char *text = NULL, err[200];
	size_t len;
	int r = statefile_read(path, LOBBY_RELAY_FILE_MAX, &text, &len);

	if (r == -ENOENT)
		return 0;
	if (r < 0) {
		snprintf(err, sizeof(err), "cannot read it: %s",
			 r == -EFBIG ? "larger than 512 KiB" : strerror(-r));
		say_corrupt(path, err);
		return r;
	}
	r = lobby_relay_names_decode(t, text, len, err, sizeof(err));
	free(text);
	if (r < 0) {
		char why[260];

		snprintf(why, sizeof(why), "corrupt: %s", err);
		say_corrupt(path, why);
	}
	return r;
}

/* Written after every change; a failed write is logged and the next
 * change writes it all again (the table in memory is what counts). */
static void save_names(const struct lobby_relay_names *t, const char *path)
{
	struct strbuf b;
	int r;

	strbuf_init(&b, LOBBY_RELAY_FILE_MAX);
	r = lobby_relay_names_encode(t, &b);
	if (r == 0)
		r = statefile_write(path, b.p, b.len);
	if (r < 0)
		log_warnx("relay-state-write-fail file=%s error=\"%s\"", path, strerror(-r));
	strbuf_release(&b);
}

int lobby_relay_secret(const char *dir, uint8_t out[static JOINCODE_SECRET_LEN])
{
	char path[PATH_MAX], why[160], *buf = NULL;
	size_t len;
	int r;

	if ((r = join_path(path, sizeof(path), dir, LOBBY_RELAY_SECRET_FILE)) < 0)
		return r;
	r = statefile_read(path, 4096, &buf, &len);
	if (r == 0) {
		r = lobby_relay_secret_decode((const uint8_t *)buf, len, out);
		sodium_memzero(buf, len);
		free(buf);
		if (r < 0) {
			snprintf(why, sizeof(why), "corrupt: %zu bytes, a secret is %d", len,
				 JOINCODE_SECRET_LEN);
			say_corrupt(path, why);
		}
		return r;
	}
	if (r != -ENOENT) {
		snprintf(why, sizeof(why), "cannot read it: %s",
			 r == -EFBIG ? "larger than 4 KiB" : strerror(-r));
		say_corrupt(path, why);
		return r;
	}
	/* None yet: a new one, kept (the code stays the same from now on). */
	randombytes_buf(out, JOINCODE_SECRET_LEN);
	r = statefile_write(path, out, JOINCODE_SECRET_LEN);
	if (r == 0 && chmod(path, 0600) < 0)
		r = -errno;
	if (r < 0) {
		snprintf(why, sizeof(why), "cannot write it: %s", strerror(-r));
		say_corrupt(path, why);
		return r;
	}
	log_info("relay-secret-new file=%s", path);
	return 0;
}

int lobby_relay_check_files(const char *dir, bool letters)
{
	struct lobby_relay_names *t;
	char path[PATH_MAX], why[160], *buf = NULL;
	uint8_t secret[JOINCODE_SECRET_LEN];
	size_t len;
	int r = 0;

	if (letters) {
		const char *names[2] = {LOBBY_RELAY_LETTERS_FILE, LOBBY_RELAY_CHIPS_FILE};
		const enum lobby_relay_kind kinds[2] = {LOBBY_RELAY_KIND_LETTERS,
							LOBBY_RELAY_KIND_CHIPS};

		for (int i = 0; i < 2 && r == 0; i++) {
			if ((r = join_path(path, sizeof(path), dir, names[i])) < 0)
				return r;
			t = lobby_relay_names_new(kinds[i]);
			if (t == NULL)
				return -ENOMEM;
			r = load_names(t, path);
			lobby_relay_names_free(t);
		}
		if (r < 0)
			return r;
	}
	/* The secret as it is; none yet is fine (the start makes one). */
	if ((r = join_path(path, sizeof(path), dir, LOBBY_RELAY_SECRET_FILE)) < 0)
		return r;
	r = statefile_read(path, 4096, &buf, &len);
	if (r == -ENOENT)
		return 0;
	if (r < 0) {
		snprintf(why, sizeof(why), "cannot read it: %s",
			 r == -EFBIG ? "larger than 4 KiB" : strerror(-r));
		say_corrupt(path, why);
		return r;
	}
	r = lobby_relay_secret_decode((const uint8_t *)buf, len, secret);
	sodium_memzero(buf, len);
	sodium_memzero(secret, sizeof(secret));
	free(buf);
	if (r < 0) {
		snprintf(why, sizeof(why), "corrupt: %zu bytes, a secret is %d", len,
			 JOINCODE_SECRET_LEN);
		say_corrupt(path, why);
	}
	return r;
}

/* ---- the stored world ---- */

const char *lobby_relay_stored_path(struct lobby_relay *r)
{
	struct stat st;

	return stat(r->stored, &st) == 0 && S_ISREG(st.st_mode) ? r->stored : NULL;
}

/* The stored .sav's age in seconds (wall clock: it is a file's mtime),
 * or -1 when there is none. */
static long long file_age(struct lobby_relay *r, long long *mtime)
{
	struct stat st;
	long long age;

	if (stat(r->stored, &st) < 0 || !S_ISREG(st.st_mode))
		return -1;
	*mtime = (long long)st.st_mtim.tv_sec;
	age = (long long)time(NULL) - *mtime;
	return age < 0 ? 0 : age;
}

long long lobby_relay_stored_age(struct lobby_relay *r)
{
	long long mtime = 0, age = file_age(r, &mtime);

	/* lobby.py stored_age: the copy the running session resumed from is
	 * its starting state, current until a newer upload replaces it. */
	if (age >= 0 && r->session_epoch > 0 && mtime <= r->session_epoch)
		return 0;
	return age;
}

/* ---- names as netpunch writes them in its statuses ---- */

/* Python's repr() of a str, for "the leader ('bob')": single quotes
 * unless the name has one and no double quote. Names carry no control
 * characters (the host cleans them). */
static void repr(const char *s, char *out, size_t size)
{
	char q = strchr(s, '\'') != NULL && strchr(s, '"') == NULL ? '"' : '\'';
	size_t o = 0;

	if (size < 3) {
		out[0] = '\0';
		return;
	}
	out[o++] = q;
	for (; *s != '\0' && o + 3 < size; s++) {
		if (*s == '\\' || *s == q)
			out[o++] = '\\';
		out[o++] = *s;
	}
	out[o++] = q;
	out[o] = '\0';
}

/* ---- the letters and companies ---- */

static bool name_here(void *arg, const char *name)
{
	return lobby_host_present(arg, name);
}

const char *lobby_relay_letter(struct lobby_relay *r, const char *name,
			       char buf[static LOBBY_RELAY_LETTER_SZ])
{
	if (lobby_relay_letter_get(r->letters, name, buf) < 0)
		buf[0] = '\0';
	return buf;
}

int lobby_relay_chip(struct lobby_relay *r, const char *name)
{
	return lobby_relay_chip_get(r->chips, name);
}

void lobby_relay_remember_chip(struct lobby_relay *r, const char *name, int id)
{
	if (lobby_relay_chip_set(r->chips, name, id))
		save_names(r->chips, r->chips_path);
}

/* ---- the session ---- */

static void on_resume(struct ev_timer *t, void *arg)
{
	struct lobby_relay *r = arg;
	const struct addr *leader = lobby_host_leader(r->l, NULL);
	long long mtime = 0, age = file_age(r, &mtime);

	(void)t;
	if (leader == NULL || !addr_equal(leader, &r->resume_for) || age < 0 ||
	    lobby_host_started(r->l) || lobby_host_sharing(r->l) || r->uploading || r->held)
		return;
	log_info("relay-resume stored_age=%lld", age);
	/* This copy is the session from here on (stored_age 0 while it is). */
	r->session_epoch = (long long)time(NULL);
	lobby_host_share(r->l, r->stored, true);
}

void lobby_relay_joined(struct lobby_relay *r, const struct addr *a, const char *name, bool created,
			bool leader)
{
	char detail[1024], who[LOBBY_RELAY_NAME_SZ * 2 + 3];
	const char *lname = "";
	long long age;
	bool changed;
	int idx;

	idx = lobby_relay_letter_for(r->letters, name, name_here, r->l, &changed);
	if (changed)
		save_names(r->letters, r->letters_path);
	if (idx < 0)
		log_warnx("relay-no-letter name=\"%s\" error=\"%s\"", name, strerror(-idx));
	if (!created)
		return;
	lobby_host_leader(r->l, &lname);
	repr(lname != NULL ? lname : "", who, sizeof(who));
	if (lobby_host_started(r->l) && !leader) {
		/* A late joiner: the stored world while it is fresh, else the
		 * leader's next save. */
		age = lobby_relay_stored_age(r);
		if (age >= 0 && age <= LOBBY_RELAY_STORED_MAX_S) {
			snprintf(detail, sizeof(detail),
				 "joining the running game: the relay is sending you its world "
				 "(%lld s old)" U2026,
				 age);
			log_info("relay-late-joiner name=\"%s\" stored_age=%lld then=stored", name,
				 age);
		} else {
			snprintf(detail, sizeof(detail),
				 "joining the running game: waiting for the leader's save" U2026);
		}
		lobby_host_tell(r->l, a, detail);
	}
	if (lobby_host_started(r->l) || lobby_host_sharing(r->l) || r->uploading || r->held)
		return;
	/* A session that has not started: with a stored world everyone loads
	 * it (the leader receives it like any joiner); without, the leader's
	 * START GAME sends theirs. */
	age = file_age(r, &(long long){0});
	if (leader && age >= 0) {
		snprintf(detail, sizeof(detail),
			 "loading the relay's world (saved %lld min ago)" U2026, age / 60);
		lobby_host_tell(r->l, a, detail);
		log_info("relay-resume-soon name=\"%s\" stored_age=%lld in_ms=%d", name, age,
			 LOBBY_RELAY_RESUME_MS);
		r->resume_for = *a;
		ev_timer_start(r->l->loop, &r->resume, LOBBY_RELAY_RESUME_MS, on_resume, r);
	} else if (leader) {
		lobby_host_tell(
			r->l, a,
			"this relay has no saved world yet -- press START GAME to send your "
			"most recent save");
		log_info("relay-no-world name=\"%s\" then=\"wait for START GAME\"", name);
	} else if (age >= 0) {
		lobby_host_tell(r->l, a, "loading the relay's world" U2026);
	} else {
		snprintf(detail, sizeof(detail), "waiting for the leader (%s) to press START GAME",
			 who);
		lobby_host_tell(r->l, a, detail);
	}
}

struct tell_ctx {
	struct lobby_relay *r;
	const struct addr *except;
	const char *detail, *other; /* other: to everyone else (NULL: nobody) */
	bool unstarted_only;
};

static void tell_one(void *arg, const struct addr *a, const char *name, bool started)
{
	struct tell_ctx *c = arg;
	bool me = c->except != NULL && addr_equal(a, c->except);

	(void)name;
	if (c->unstarted_only && started)
		return;
	if (me && c->other != NULL)
		lobby_host_tell(c->r->l, a, c->detail);
	else if (!me)
		lobby_host_tell(c->r->l, a, c->other != NULL ? c->other : c->detail);
}

/* /new: the leader discards the stored world before the session starts
 * and shares its own with START GAME instead. */
static void relay_new(struct lobby_relay *r, const struct addr *from, const char *name, bool leader)
{
	static const char *const sfx[] = {".sav", ".sav.lua", ".jpg"};
	char detail[1024], who[LOBBY_RELAY_NAME_SZ * 2 + 3], path[PATH_MAX + 16];
	const char *lname = "";
	int removed = 0;

	lobby_host_leader(r->l, &lname);
	repr(lname != NULL ? lname : "", who, sizeof(who));
	if (!leader) {
		snprintf(detail, sizeof(detail), "only the leader (%s) can start a new world", who);
		lobby_host_tell(r->l, from, detail);
		log_info("relay-refused what=/new name=\"%s\" reason=\"not the leader\"", name);
		return;
	}
	if (lobby_host_started(r->l)) {
		lobby_host_tell(r->l, from,
				"the session is running -- /new only works before it starts");
		return;
	}
	if (lobby_host_sharing(r->l)) {
		lobby_host_tell(r->l, from,
				"the relay's world is already on its way -- /new only works before "
				"it is sent");
		return;
	}
	ev_timer_stop(r->l->loop, &r->resume);
	for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s%s", r->dir, LOBBY_SAVE_BASENAME, sfx[i]);
		removed += unlink(path) == 0;
	}
	r->session_epoch = 0;
	log_info("relay-new name=\"%s\" removed=%d then=\"wait for START GAME\"", name, removed);
	snprintf(detail, sizeof(detail),
		 "the relay's old world was discarded -- waiting for the leader (%s) to press "
		 "START GAME",
		 who);
	{
		struct tell_ctx c = {r, from,
				     "the relay's old world was discarded -- the leader's START "
				     "GAME sends a fresh one",
				     detail, false};

		lobby_host_each(r->l, tell_one, &c);
	}
}

/* Python's str.strip().lower() == "/new" for ASCII. */
static bool is_new(const char *text)
{
	size_t n;

	while (*text == ' ' || (*text >= '\t' && *text <= '\r'))
		text++;
	n = strlen(text);
	while (n > 0 && (text[n - 1] == ' ' || (text[n - 1] >= '\t' && text[n - 1] <= '\r')))
		n--;
	return n == 4 && strncasecmp(text, "/new", 4) == 0;
}

static void refused(struct lobby_relay *r, const char *what, const char *name, const char *why)
{
	unsigned long sup;

	/* A leader's fbegin repeats every 0.2 s: one line per 10 s. */
	if (log_ratelimit_ok(&r->warn, ev_now(r->l->loop), 10000, &sup))
		log_info("relay-refused what=%s name=\"%s\" reason=\"%s\" suppressed=%lu", what,
			 name, why, sup);
}

bool lobby_relay_on_msg(struct lobby_relay *r, const struct addr *from, const char *name,
			bool leader, const struct lobby_msg *m)
{
	switch (m->type) {
	case LOBBY_MSG_START:
	case LOBBY_MSG_FBEGIN:
		if (!leader) {
			refused(r, m->type == LOBBY_MSG_START ? "start" : "fbegin", name,
				"only the leader starts");
			return true;
		}
		if (m->type == LOBBY_MSG_START) {
			lobby_host_start_all(r->l);
			return true;
		}
		if (lobby_host_sharing(r->l)) {
			refused(r, "fbegin", name, "still pushing the previous save");
			return true;
		}
		if (r->held && r->handed_any && m->fbegin.sid == r->handed_sid)
			return true; /* a late copy of a finished upload */
		if (!r->uploading || !addr_equal(from, &r->up_from))
			log_info("relay-upload-begin name=\"%s\" sid=%u bytes=%lld", name,
				 m->fbegin.sid, m->fbegin.total_bytes);
		/* The stored world is not touched until the new one verified:
		 * the receiver writes temporaries and renames them at the end,
		 * so a failed upload leaves the previous world for next time. */
		r->up_from = *from;
		r->uploading = true;
		r->up_moved_ms = ev_now(r->l->loop);
		r->held = false;
		r->told_pct = -1;
		lobby_xrecv_on_begin(r->up, &m->fbegin);
		return true;
	case LOBBY_MSG_CHAT:
		if (m->chat.text == NULL || !is_new(m->chat.text))
			return false;
		relay_new(r, from, name, leader);
		return true;
	default:
		return false;
	}
}

void lobby_relay_on_chunk(struct lobby_relay *r, const struct addr *from, const uint8_t *p,
			  size_t len)
{
	if (r->uploading && addr_equal(from, &r->up_from)) {
		r->up_moved_ms = ev_now(r->l->loop);
		lobby_xrecv_on_chunk(r->up, p, len);
	}
}

/* The upload is in place: out to those waiting (from the loop, not from
 * inside the receiver's callback). */
static void on_hand(struct ev_timer *t, void *arg)
{
	struct lobby_relay *r = arg;

	(void)t;
	if (!r->held)
		return;
	log_info("relay-upload-stored sid=%u then=\"push to the waiting players\"", r->handed_sid);
	lobby_host_share(r->l, r->stored, false);
}

static void up_send(struct lobby *l, const struct lobby_msg *m)
{
	struct lobby_relay *r = lobby_host_relay(l);

	if (r == NULL || !r->uploading)
		return;
	lobby_net_send_msg(l, &r->up_from, m);
	if (m->type != LOBBY_MSG_FDONE)
		return;
	if (!m->fdone.ok) {
		log_info("relay-upload-failed sid=%u then=\"wait for a new START\"", m->fdone.sid);
		l->ctr.uploads[LOBBY_UPLOAD_FAILED]++;
		r->uploading = false;
		return;
	}
	if (lobby_xrecv_complete(r->up) && (!r->handed_any || r->handed_sid != m->fdone.sid)) {
		/* fdone ok goes again and again: the first hands it out. */
		r->handed_any = true;
		r->handed_sid = m->fdone.sid;
		l->ctr.uploads[LOBBY_UPLOAD_STORED]++;
		r->held = true;
		r->session_epoch = 0; /* a newer world than the one resumed from */
		ev_timer_start(l->loop, &r->hand, 0, on_hand, r);
	}
}

/* The relay listens, it never pulls: a leader's fbegin names no port. */
static const struct addr *up_host(struct lobby *l)
{
	(void)l;
	return NULL;
}

static const char *up_name(struct lobby *l)
{
	return l->cfg.name;
}

/* The leader's upload comes over TCP when it dials our listener (netpunch's
 * relay: BULK.expect(sid, "send", ...), tcp_port in the fbegin_ack). */
static struct lobby_bulk *up_listener(struct lobby *l)
{
	return l->cfg.bulk_off ? NULL : lobby_host_bulk(l);
}

static const struct lobby_xrecv_ops up_ops = {up_send, up_host, up_name, up_listener};

/* The upload's progress for those waiting, at each 10 %. */
static void tick_progress(struct lobby_relay *r)
{
	char detail[160];
	const struct addr *leader = lobby_host_leader(r->l, NULL);
	int pct = lobby_xrecv_pct(r->up);

	if (!r->uploading || r->held || pct < 0 || lobby_xrecv_failed(r->up) ||
	    pct / 10 == r->told_pct / 10)
		return;
	r->told_pct = pct;
	snprintf(detail, sizeof(detail),
		 "the leader is uploading the world to the relay" U2026 " %d%%", pct);
	{
		struct tell_ctx c = {r, leader, NULL, detail, true};

		lobby_host_each(r->l, tell_one, &c);
	}
}

/* A fresh receiver for the next upload (the round before is dropped). */
static void drop_upload(struct lobby_relay *r, const char *why)
{
	log_info("relay-upload-dropped reason=\"%s\"", why);
	r->l->ctr.uploads[LOBBY_UPLOAD_DROPPED]++;
	lobby_xrecv_free(r->up);
	r->up = lobby_xrecv_new(r->l, &up_ops, r->l->cfg.max_save);
	r->uploading = false;
	if (r->up == NULL)
		log_fatalx("relay-upload-nomem");
}

static void on_tick(struct ev_timer *t, void *arg)
{
	struct lobby_relay *r = arg;

	if (r->uploading && !r->held && !lobby_xrecv_failed(r->up) &&
	    ev_now(r->l->loop) - r->up_moved_ms > UPLOAD_STALL_MS)
		drop_upload(r, "nothing came for 30 s");
	tick_progress(r);
	ev_timer_start(r->l->loop, t, TICK_MS, on_tick, r);
}

void lobby_relay_left(struct lobby_relay *r, const struct addr *a, bool was_leader, bool empty)
{
	/* Its round goes with it. */
	if (r->uploading && addr_equal(a, &r->up_from) && !r->held)
		drop_upload(r, "the leader left");
	if (was_leader)
		r->held = false;
	if (!empty)
		return;
	/* lobby.py roster_changed: the last player left, the session is
	 * over; the next joiner is a fresh leader and the world is kept. */
	ev_timer_stop(r->l->loop, &r->resume);
	r->session_epoch = 0;
	r->held = false;
	r->uploading = false;
	log_info("relay-session-closed stored_age=%lld", lobby_relay_stored_age(r));
}

bool lobby_relay_may_serve(struct lobby_relay *r, bool leader_waiting)
{
	long long age = lobby_relay_stored_age(r);

	if (r->uploading || r->held || leader_waiting)
		return false;
	return age >= 0 && age <= LOBBY_RELAY_STORED_MAX_S;
}

bool lobby_relay_leader_holds(struct lobby_relay *r)
{
	return r->held;
}

void lobby_relay_distributed(struct lobby_relay *r)
{
	if (r->held)
		r->uploading = false;
	r->held = false;
}

struct lobby_relay *lobby_relay_new(struct lobby *l)
{
	struct lobby_relay *r = calloc(1, sizeof(*r));
	const char *dir = l->cfg.io_dir[0] != '\0' ? l->cfg.io_dir : ".";

	if (r == NULL)
		return NULL;
	r->l = l;
	ev_timer_init(&r->resume);
	ev_timer_init(&r->hand);
	ev_timer_init(&r->tick);
	if (realpath(dir, r->dir) == NULL)
		snprintf(r->dir, sizeof(r->dir), "%s", dir);
	if (join_path(r->letters_path, sizeof(r->letters_path), r->dir, LOBBY_RELAY_LETTERS_FILE) <
		    0 ||
	    join_path(r->chips_path, sizeof(r->chips_path), r->dir, LOBBY_RELAY_CHIPS_FILE) < 0 ||
	    snprintf(r->stored, sizeof(r->stored), "%s/%s.sav", r->dir, LOBBY_SAVE_BASENAME) >=
		    (int)sizeof(r->stored))
		goto fail;
	r->letters = lobby_relay_names_new(LOBBY_RELAY_KIND_LETTERS);
	r->chips = lobby_relay_names_new(LOBBY_RELAY_KIND_CHIPS);
	if (r->letters == NULL || r->chips == NULL)
		goto fail;
	if (load_names(r->letters, r->letters_path) < 0 || load_names(r->chips, r->chips_path) < 0)
		goto fail;
	r->up = lobby_xrecv_new(l, &up_ops, l->cfg.max_save);
	if (r->up == NULL)
		goto fail;
	r->told_pct = -1;
	ev_timer_start(l->loop, &r->tick, TICK_MS, on_tick, r);
	log_info("relay-state letters=%zu companies=%zu stored_age=%lld",
		 lobby_relay_names_count(r->letters), lobby_relay_names_count(r->chips),
		 lobby_relay_stored_age(r));
	return r;
fail:
	lobby_relay_free(r);
	return NULL;
}

void lobby_relay_free(struct lobby_relay *r)
{
	if (r == NULL)
		return;
	ev_timer_stop(r->l->loop, &r->resume);
	ev_timer_stop(r->l->loop, &r->hand);
	ev_timer_stop(r->l->loop, &r->tick);
	lobby_xrecv_free(r->up);
	lobby_relay_names_free(r->letters);
	lobby_relay_names_free(r->chips);
	free(r);
}

/* ---- put-save ---- */

/* Copies src into a new temporary beside dst (synced); its name in tmp.
 * Run as root (an operator beside a unit with a dynamic user), the copy
 * takes the owner of the directory, so the relay can read it. */
static int copy_to_temp(const char *src, const char *dst, const struct stat *dir, char *tmp,
			size_t tmpsize)
{
	int in, out, r = 0;
	struct stat st;
	off_t off = 0;

	if (snprintf(tmp, tmpsize, "%s.put.XXXXXX", dst) >= (int)tmpsize)
		return -ENAMETOOLONG;
	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	if (fstat(in, &st) < 0) {
		r = -errno;
		close(in);
		return r;
	}
	out = mkostemp(tmp, O_CLOEXEC);
	if (out < 0) {
		r = -errno;
		close(in);
		return r;
	}
	while (off < st.st_size) {
		ssize_t n = copy_file_range(in, &off, out, NULL, (size_t)(st.st_size - off), 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : -EIO;
			break;
		}
	}
	if (r == 0 && (fchmod(out, 0640) < 0 || fsync(out) < 0))
		r = -errno;
	if (r == 0 && geteuid() == 0 && fchown(out, dir->st_uid, dir->st_gid) < 0)
		r = -errno;
	close(out);
	close(in);
	if (r < 0)
		unlink(tmp);
	return r;
}

int lobby_relay_put_save(const char *io_dir, const char *save, uint64_t cap, char *err,
			 size_t errsize)
{
	static const char *const sfx[LOBBY_SAVE_FILES] = {".sav", ".sav.lua", ".jpg"};
	struct lobby_save src;
	char tmp[LOBBY_SAVE_FILES][PATH_MAX], dst[LOBBY_SAVE_FILES][PATH_MAX];
	bool have[LOBBY_SAVE_FILES] = {false};
	struct stat dir;
	int r, dfd, mod = lobby_role_save_has_mp_mod(save);

	if (stat(io_dir, &dir) < 0) {
		r = -errno;
		snprintf(err, errsize, "%s: %s", io_dir, strerror(-r));
		return r;
	}
	if (!S_ISDIR(dir.st_mode)) {
		snprintf(err, errsize, "%s is not a directory", io_dir);
		return -ENOTDIR;
	}

	if (mod == 0) {
		snprintf(err, errsize,
			 "%s was saved without the %s mod, so nothing would sync: enable the mod "
			 "in its Mods panel, save, and try again",
			 save, LOBBY_MOD_DISPLAY_NAME);
		return -EINVAL;
	}
	r = lobby_save_open_source(&src, save, err, errsize);
	if (r < 0)
		return r;
	if (src.total > cap) {
		snprintf(err, errsize, "%s is %llu bytes, over --max-save %llu", save,
			 (unsigned long long)src.total, (unsigned long long)cap);
		lobby_save_close(&src);
		return -EFBIG;
	}
	for (size_t i = 0; i < LOBBY_SAVE_FILES; i++)
		snprintf(dst[i], sizeof(dst[i]), "%s/%s%s", io_dir, LOBBY_SAVE_BASENAME, sfx[i]);
	for (size_t i = 0; i < src.n && r == 0; i++) {
		int k = lobby_save_allowed(src.f[i].wire);

		r = copy_to_temp(src.f[i].path, dst[k], &dir, tmp[k], sizeof(tmp[k]));
		if (r < 0)
			snprintf(err, errsize, "cannot copy %s into %s: %s", src.f[i].path, io_dir,
				 strerror(-r));
		else
			have[k] = true;
	}
	lobby_save_close(&src);
	/* The sidecars first, the .sav last: a round that starts meanwhile
	 * takes the old .sav or the whole new one. */
	for (int k = LOBBY_SAVE_FILES - 1; k >= 0 && r == 0; k--) {
		if (have[k] && rename(tmp[k], dst[k]) < 0) {
			r = -errno;
			snprintf(err, errsize, "cannot rename into %s: %s", dst[k], strerror(-r));
		} else if (have[k]) {
			have[k] = false;
		} else if (unlink(dst[k]) < 0 && errno != ENOENT) {
			r = -errno;
			snprintf(err, errsize, "cannot remove the old %s: %s", dst[k],
				 strerror(-r));
		}
	}
	for (size_t k = 0; k < LOBBY_SAVE_FILES; k++) {
		if (have[k])
			unlink(tmp[k]);
	}
	if (r < 0)
		return r;
	dfd = open(io_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) < 0) {
		r = -errno;
		snprintf(err, errsize, "cannot sync %s: %s", io_dir, strerror(-r));
	}
	if (dfd >= 0)
		close(dfd);
	return r;
}
