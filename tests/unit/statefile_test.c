/*
 * common/statefile: atomic writes that keep the old file on any failure,
 * bounded reads, quarantine and mkdirs. Failures are real ones: a file size
 * limit (EFBIG, works as root too, where permissions do not bite), a rename
 * over a directory, and, when we are root and may unshare a mount
 * namespace, a full tmpfs (ENOSPC).
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "statefile.h"
#include "tap.h"

/* Short enough that every path built from it fits PATH_MAX. */
static char base[256];

static const char *at(const char *name)
{
	static char p[2][PATH_MAX];
	static int i;

	i ^= 1;
	snprintf(p[i], sizeof(p[i]), "%s/%s", base, name);
	return p[i];
}

/* Number of entries in dir (without . and ..) whose name contains sub. */
static int count_entries(const char *dir, const char *sub)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (strstr(e->d_name, sub) != NULL)
			n++;
	}
	closedir(d);
	return n;
}

/*
 * Read with stdio, not statefile_read(): that one removes stale temporaries,
 * and the checks that a failed write leaves none must not be helped by it.
 */
static bool file_is(const char *path, const char *want)
{
	char buf[4096];
	size_t len;
	FILE *f = fopen(path, "rb");

	if (f == NULL)
		return false;
	len = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	return len == strlen(want) && memcmp(buf, want, len) == 0;
}

static void touch(const char *path, const char *content)
{
	FILE *f = fopen(path, "wb");

	CHECK(f != NULL);
	if (f == NULL)
		return;
	fputs(content, f);
	fclose(f);
}

static bool exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

static void rm_rf(const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return;
	if (S_ISDIR(st.st_mode)) {
		DIR *d = opendir(path);
		struct dirent *e;

		while (d != NULL && (e = readdir(d)) != NULL) {
			char sub[PATH_MAX];

			if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
				continue;
			snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
			rm_rf(sub);
		}
		if (d != NULL)
			closedir(d);
		rmdir(path);
	} else {
		unlink(path);
	}
}

static void test_write_read(void)
{
	const char *p = at("state.json");
	struct stat st;
	char *buf = (char *)1;
	size_t len = 99;

	CHECK_EQ_INT(statefile_write(p, "{\"version\":1}\n", 14), 0);
	CHECK(file_is(p, "{\"version\":1}\n"));
	CHECK_EQ_INT(stat(p, &st), 0);
	CHECK_EQ_INT(st.st_mode & 0777, 0640);
	/* Shorter content replaces the file, no tail of the old one left. */
	CHECK_EQ_INT(statefile_write(p, "{}", 2), 0);
	CHECK(file_is(p, "{}"));
	/* Empty content. */
	CHECK_EQ_INT(statefile_write(p, "", 0), 0);
	CHECK_EQ_INT(statefile_read(p, 0, &buf, &len), 0);
	CHECK(buf != NULL && len == 0 && buf[0] == '\0');
	free(buf);
	/* Binary content, NULs included, comes back byte for byte. */
	{
		static const char bin[] = "a\0b\xff\n";

		CHECK_EQ_INT(statefile_write(p, bin, sizeof(bin)), 0);
		CHECK_EQ_INT(statefile_read(p, 64, &buf, &len), 0);
		CHECK_EQ_INT(len, sizeof(bin));
		CHECK(buf != NULL && memcmp(buf, bin, sizeof(bin)) == 0);
		free(buf);
	}
	/* Nothing but the file itself in the directory. */
	CHECK_EQ_INT(count_entries(base, ""), 1);
	CHECK_EQ_INT(count_entries(base, ".tmp"), 0);
	/* A directory that does not exist. */
	CHECK_EQ_INT(statefile_write(at("nodir/state.json"), "x", 1), -ENOENT);
	unlink(p);
}

static void test_read_errors(void)
{
	const char *p = at("big");
	char *buf = (char *)1;
	size_t len = 99;
	char data[1000];

	CHECK_EQ_INT(statefile_read(at("missing"), 100, &buf, &len), -ENOENT);
	CHECK(buf == NULL && len == 0);
	memset(data, 'd', sizeof(data));
	CHECK_EQ_INT(statefile_write(p, data, sizeof(data)), 0);
	/* Exactly max is fine, one byte over is not. */
	CHECK_EQ_INT(statefile_read(p, 1000, &buf, &len), 0);
	CHECK_EQ_INT(len, 1000);
	free(buf);
	buf = (char *)1;
	CHECK_EQ_INT(statefile_read(p, 999, &buf, &len), -EFBIG);
	CHECK(buf == NULL && len == 0);
	/* A directory is not a state file. */
	CHECK_EQ_INT(statefile_read(base, 1 << 20, &buf, &len), -EINVAL);
	CHECK(buf == NULL);
	unlink(p);
}

static void test_failed_write_keeps_old(void)
{
	const char *p = at("bans.json");
	struct rlimit old, lim;
	char *big = malloc(1 << 16);
	int r;

	CHECK(big != NULL);
	if (big == NULL)
		return;
	memset(big, 'n', 1 << 16);
	CHECK_EQ_INT(statefile_write(p, "old contents", 12), 0);

	/* A 4 KiB file size limit: write() fails with EFBIG once the temp
	 * file reaches it (SIGXFSZ ignored, or it would kill us). */
	signal(SIGXFSZ, SIG_IGN);
	CHECK_EQ_INT(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = 4096;
	CHECK_EQ_INT(setrlimit(RLIMIT_FSIZE, &lim), 0);
	r = statefile_write(p, big, 1 << 16);
	setrlimit(RLIMIT_FSIZE, &old);
	CHECK_EQ_INT(r, -EFBIG);
	CHECK(file_is(p, "old contents"));
	CHECK_EQ_INT(count_entries(base, ".tmp"), 0);
	CHECK_EQ_INT(count_entries(base, ""), 1);
	/* And the next write, with room, succeeds. */
	CHECK_EQ_INT(statefile_write(p, big, 1 << 16), 0);
	CHECK_EQ_INT(count_entries(base, ""), 1);
	unlink(p);

	/* A failure at the rename step (the target is a directory): the
	 * temp file is removed too. */
	CHECK_EQ_INT(mkdir(at("isdir"), 0700), 0);
	CHECK_EQ_INT(statefile_write(at("isdir"), "x", 1), -EISDIR);
	CHECK_EQ_INT(count_entries(base, ".tmp"), 0);
	rmdir(at("isdir"));
	free(big);
}

/*
 * statefile_replace(): the same replace without fsync; it must still leave
 * no temporary and keep the old file when the write fails.
 */
static void test_replace(void)
{
	const char *p = at("lobby_state.json");
	struct rlimit old, lim;
	char big[8192];

	memset(big, 'r', sizeof(big));
	CHECK_EQ_INT(statefile_replace(p, "{\"state\":\"waiting\"}", 19), 0);
	CHECK(file_is(p, "{\"state\":\"waiting\"}"));
	CHECK_EQ_INT(statefile_replace(p, "{}", 2), 0);
	CHECK(file_is(p, "{}"));
	signal(SIGXFSZ, SIG_IGN);
	CHECK_EQ_INT(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = 4096;
	CHECK_EQ_INT(setrlimit(RLIMIT_FSIZE, &lim), 0);
	CHECK_EQ_INT(statefile_replace(p, big, sizeof(big)), -EFBIG);
	setrlimit(RLIMIT_FSIZE, &old);
	CHECK(file_is(p, "{}"));
	CHECK_EQ_INT(count_entries(base, ".tmp"), 0);
	CHECK_EQ_INT(statefile_replace(at("nodir/x.json"), "x", 1), -ENOENT);
	unlink(p);
}

/*
 * A real ENOSPC: a 64 KiB tmpfs in a private mount namespace (the mount
 * dies with the process even if we crash). Root only; skipped elsewhere.
 */
static void test_enospc(void)
{
	char mnt[512], path[PATH_MAX];
	char *big;
	int r;

	if (geteuid() != 0) {
		printf("# skip enospc: not root\n");
		return;
	}
	if (unshare(CLONE_NEWNS) < 0) {
		printf("# skip enospc: unshare: %s\n", strerror(errno));
		return;
	}
	if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		printf("# skip enospc: make-rprivate: %s\n", strerror(errno));
		return;
	}
	snprintf(mnt, sizeof(mnt), "%s", at("tiny"));
	CHECK_EQ_INT(mkdir(mnt, 0700), 0);
	if (mount("tmpfs", mnt, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0700") < 0) {
		printf("# skip enospc: mount: %s\n", strerror(errno));
		rmdir(mnt);
		return;
	}
	big = malloc(1 << 20);
	if (big != NULL) {
		memset(big, 's', 1 << 20);
		snprintf(path, sizeof(path), "%s/state", mnt);
		CHECK_EQ_INT(statefile_write(path, "old", 3), 0);
		r = statefile_write(path, big, 1 << 20);
		CHECK_EQ_INT(r, -ENOSPC);
		CHECK(file_is(path, "old"));
		CHECK_EQ_INT(count_entries(mnt, ".tmp"), 0);
		/* Space is back once the temp file is gone. */
		CHECK_EQ_INT(statefile_write(path, big, 16 << 10), 0);
		free(big);
	}
	CHECK_EQ_INT(umount2(mnt, MNT_DETACH), 0);
	rmdir(mnt);
}

static void test_quarantine(void)
{
	const char *p = at("letters.json");
	char np[PATH_MAX], small[8];
	long long before = (long long)time(NULL), stamp;
	char *end;
	size_t plen = strlen(p);

	CHECK_EQ_INT(statefile_write(p, "garbage{", 8), 0);
	/* A name that does not fit: nothing moves. */
	CHECK_EQ_INT(statefile_quarantine(p, small, sizeof(small)), -ENAMETOOLONG);
	CHECK(file_is(p, "garbage{"));
	CHECK_EQ_INT(statefile_quarantine(p, np, sizeof(np)), 0);
	/* "<path>.corrupt-<unix seconds>" */
	CHECK(strncmp(np, p, plen) == 0);
	CHECK(strncmp(np + plen, ".corrupt-", 9) == 0);
	stamp = strtoll(np + plen + 9, &end, 10);
	CHECK(*end == '\0');
	CHECK(stamp >= before && stamp <= (long long)time(NULL));
	CHECK(file_is(np, "garbage{"));
	{
		char *buf;
		size_t len;

		CHECK_EQ_INT(statefile_read(p, 100, &buf, &len), -ENOENT);
	}
	CHECK_EQ_INT(statefile_quarantine(at("missing"), np, sizeof(np)), -ENOENT);
	unlink(np);
}

/*
 * What a crash in the middle of statefile_write() leaves: its temporary,
 * "<file>.tmp.XXXXXX". The load removes those of that file and nothing
 * else, whether the file itself is there or not.
 */
static void test_stale_temps(void)
{
	static const char *const stale[] = {"bans.json.tmp.AbC123", "bans.json.tmp.zzzzzz",
					    "bans.json.tmp.000000"};
	static const char *const kept[] = {
		"bans.json.tmp.AbC12",   /* five */
		"bans.json.tmp.AbC1234", /* seven */
		"bans.json.tmp.AbC-12",  /* not mkstemp's alphabet */
		"bans.json.tmp.",        "bans.json.tmpAbC123",   "bans.json.tmp.AbC123.bak",
		"bans.json2.tmp.AbC123", /* another file's */
		"xbans.json.tmp.AbC123", "other.json.tmp.AbC123", "bans.json.corrupt-1700000000",
	};
	char *buf;
	size_t len;

	CHECK_EQ_INT(mkdir(at("st"), 0700), 0);
	CHECK_EQ_INT(statefile_write(at("st/bans.json"), "{\"bans\":[]}", 11), 0);
	for (size_t i = 0; i < sizeof(stale) / sizeof(stale[0]); i++) {
		char p[64];

		snprintf(p, sizeof(p), "st/%s", stale[i]);
		touch(at(p), "{\"ba"); /* a write cut short */
	}
	for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++) {
		char p[64];

		snprintf(p, sizeof(p), "st/%s", kept[i]);
		touch(at(p), "someone else's");
	}
	/* Not regular files: left alone even with the exact name. */
	CHECK_EQ_INT(mkdir(at("st/bans.json.tmp.DIR000"), 0700), 0);
	CHECK_EQ_INT(symlink(at("st/other.json.tmp.AbC123"), at("st/bans.json.tmp.LINK00")), 0);

	CHECK_EQ_INT(statefile_read(at("st/bans.json"), 1024, &buf, &len), 0);
	CHECK(len == 11 && memcmp(buf, "{\"bans\":[]}", 11) == 0);
	free(buf);
	for (size_t i = 0; i < sizeof(stale) / sizeof(stale[0]); i++) {
		char p[64];

		snprintf(p, sizeof(p), "st/%s", stale[i]);
		CHECK(!exists(at(p)));
	}
	for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++) {
		char p[64];

		snprintf(p, sizeof(p), "st/%s", kept[i]);
		CHECK(file_is(at(p), "someone else's"));
	}
	CHECK(exists(at("st/bans.json.tmp.DIR000")));
	CHECK(exists(at("st/bans.json.tmp.LINK00")));
	CHECK(file_is(at("st/other.json.tmp.AbC123"), "someone else's"));
	/* 1 + 10 + 2: the file, the others' and the two that are no files. */
	CHECK_EQ_INT(count_entries(at("st"), ""), 13);

	/* The file is missing (the first write crashed): temps still go. */
	touch(at("st/fresh.json.tmp.Q1w2E3"), "");
	CHECK_EQ_INT(statefile_read(at("st/fresh.json"), 1024, &buf, &len), -ENOENT);
	CHECK(!exists(at("st/fresh.json.tmp.Q1w2E3")));
	/* Called directly: the count, then nothing more to do. */
	touch(at("st/bans.json.tmp.aaaaaa"), "");
	touch(at("st/bans.json.tmp.bbbbbb"), "");
	CHECK_EQ_INT(statefile_remove_temps(at("st/bans.json")), 2);
	CHECK_EQ_INT(statefile_remove_temps(at("st/bans.json")), 0);
	CHECK_EQ_INT(statefile_remove_temps(at("nodir/bans.json")), -ENOENT);
	CHECK_EQ_INT(statefile_remove_temps(at("st/")), -EINVAL);
	rm_rf(at("st"));
}

/*
 * The crash itself: a child rewrites the file in a loop and is killed with
 * SIGKILL at random moments, many times over. The file is always whole (one
 * of the versions written), and the next load leaves no temporary behind.
 */
static void test_kill_during_write(void)
{
	char p[PATH_MAX];
	unsigned seed = (unsigned)time(NULL);
	int left_behind = 0;
	char *buf;
	size_t len;

	snprintf(p, sizeof(p), "%s", at("k/state.json"));
	CHECK_EQ_INT(mkdir(at("k"), 0700), 0);
	CHECK_EQ_INT(statefile_write(p, "{\"n\":0000000000}", 16), 0);
	for (int round = 0; round < 60; round++) {
		struct timespec ts = {0, (long)(rand_r(&seed) % 3000) * 1000};
		int fds[2], status;
		char go;
		pid_t pid;

		CHECK_EQ_INT(pipe(fds), 0);
		pid = fork();
		if (pid == 0) {
			char text[32];

			/* Never outlives us, whatever happens to the parent. */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() == 1)
				_exit(1);
			close(fds[0]);
			for (unsigned n = 0;; n++) {
				snprintf(text, sizeof(text), "{\"n\":%010u}", n);
				if (statefile_write(p, text, 16) < 0)
					_exit(1); /* the parent's read() sees EOF */
				if (n == 0)
					(void)!write(fds[1], "g", 1);
			}
		}
		close(fds[1]);
		/* Killed while it writes, after its first complete write. */
		CHECK_EQ_INT(read(fds[0], &go, 1), 1);
		close(fds[0]);
		nanosleep(&ts, NULL);
		kill(pid, SIGKILL);
		CHECK_EQ_INT(waitpid(pid, &status, 0), pid);
		left_behind += count_entries(at("k"), ".tmp.");
		CHECK_EQ_INT(statefile_read(p, 1024, &buf, &len), 0);
		CHECK(len == 16 && memcmp(buf, "{\"n\":", 5) == 0 && buf[15] == '}');
		free(buf);
		CHECK_EQ_INT(count_entries(at("k"), ""), 1);
	}
	printf("# kill -9 during writes: %d temporaries left behind, all removed at load\n",
	       left_behind);
	rm_rf(at("k"));
}

static void test_mkdirs(void)
{
	struct stat st;
	char p[PATH_MAX];
	mode_t old = umask(022);

	snprintf(p, sizeof(p), "%s", at("a/b/c"));
	CHECK_EQ_INT(statefile_mkdirs(p), 0);
	CHECK(stat(p, &st) == 0 && S_ISDIR(st.st_mode));
	CHECK_EQ_INT(st.st_mode & 0777, 0750);
	CHECK(stat(at("a/b"), &st) == 0 && S_ISDIR(st.st_mode));
	/* Again: nothing to do. With a trailing slash and doubled ones. */
	CHECK_EQ_INT(statefile_mkdirs(p), 0);
	snprintf(p, sizeof(p), "%s", at("a//b/d/"));
	CHECK_EQ_INT(statefile_mkdirs(p), 0);
	CHECK(stat(at("a/b/d"), &st) == 0 && S_ISDIR(st.st_mode));
	/* A state file can go in there. */
	CHECK_EQ_INT(statefile_write(at("a/b/c/s.json"), "{}", 2), 0);
	CHECK(file_is(at("a/b/c/s.json"), "{}"));
	CHECK_EQ_INT(statefile_mkdirs(""), -EINVAL);
	/* A file in the way is an error, wherever it is. */
	CHECK_EQ_INT(statefile_write(at("file"), "x", 1), 0);
	snprintf(p, sizeof(p), "%s", at("file/sub"));
	CHECK_EQ_INT(statefile_mkdirs(p), -ENOTDIR);
	snprintf(p, sizeof(p), "%s", at("file"));
	CHECK(statefile_mkdirs(p) < 0);
	umask(old);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(base, sizeof(base), "%s/statefile_test.XXXXXX", tmp ? tmp : "/tmp");
	if (mkdtemp(base) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	test_write_read();
	test_read_errors();
	test_failed_write_keeps_old();
	test_replace();
	test_quarantine();
	test_mkdirs();
	test_stale_temps();
	test_kill_during_write();
	test_enospc();
	rm_rf(base);
	return tap_done("statefile");
}
