/*
 * A save on disk: the host's three files read by range, a joiner's
 * temporaries written by range, hashing streamed (netpunch-wire.md §11).
 */
#include "lobby_save.h"
#include "lobby_partial.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define HASH_BUF (1024 * 1024)

static const char *const allowed[LOBBY_SAVE_FILES] = {
	LOBBY_SAVE_BASENAME ".sav",
	LOBBY_SAVE_BASENAME ".sav.lua",
	LOBBY_SAVE_BASENAME ".jpg",
};

int lobby_save_allowed(const char *wire)
{
	for (int k = 0; k < LOBBY_SAVE_FILES; k++) {
		if (strcmp(wire, allowed[k]) == 0)
			return k;
	}
	return -1;
}

static void init(struct lobby_save *s)
{
	memset(s, 0, sizeof(*s));
	for (size_t i = 0; i < LOBBY_SAVE_FILES; i++)
		s->f[i].fd = -1;
	atomic_init(&s->progress, 0);
}

static bool regular(const char *path, uint64_t *size)
{
	struct stat st;

	if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
		return false;
	*size = (uint64_t)st.st_size;
	return true;
}

static int add_source(struct lobby_save *s, const char *wire, const char *path)
{
	struct lobby_save_file *f = &s->f[s->n];
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		int e = S_ISREG(st.st_mode) ? -errno : -EINVAL;

		close(fd);
		return e;
	}
	snprintf(f->wire, sizeof(f->wire), "%s", wire);
	snprintf(f->path, sizeof(f->path), "%s", path);
	f->fd = fd;
	f->size = (uint64_t)st.st_size;
	f->off = s->total;
	s->total += f->size;
	s->n++;
	return 0;
}

int lobby_save_open_source(struct lobby_save *s, const char *path, char *err, size_t errsize)
{
	char abs[PATH_MAX], side[PATH_MAX + 8], cwd[PATH_MAX];
	size_t n = strlen(path), stem;
	uint64_t size;
	int r;

	init(s);
	/* abspath: against the working directory, not the io dir. */
	if (path[0] == '/') {
		r = snprintf(abs, sizeof(abs), "%s", path);
	} else {
		if (getcwd(cwd, sizeof(cwd)) == NULL) {
			snprintf(err, errsize, "save not found: %s", path);
			return -errno;
		}
		r = snprintf(abs, sizeof(abs), "%s/%s", cwd, path);
	}
	if (r < 0 || (size_t)r >= sizeof(abs) || n == 0) {
		snprintf(err, errsize, "save not found: %s", path);
		return -ENAMETOOLONG;
	}
	if (!regular(abs, &size)) {
		snprintf(err, errsize, "save not found: %s", abs);
		return -ENOENT;
	}
	r = add_source(s, allowed[0], abs);
	if (r < 0) {
		snprintf(err, errsize, "save not found: %s", abs);
		return r;
	}
	/* The .lua beside it: the full save path + ".lua". */
	snprintf(side, sizeof(side), "%s.lua", abs);
	if (regular(side, &size) && (r = add_source(s, allowed[1], side)) < 0)
		goto fail;
	/* The .jpg: the path without ".sav" (any case) + ".jpg"; without a
	 * .sav ending, the path without its extension. */
	n = strlen(abs);
	stem = n;
	if (n >= 4 && strcasecmp(abs + n - 4, ".sav") == 0) {
		stem = n - 4;
	} else {
		const char *dot = strrchr(abs, '.'), *slash = strrchr(abs, '/');

		if (dot != NULL && (slash == NULL || dot > slash + 1))
			stem = (size_t)(dot - abs);
	}
	snprintf(side, sizeof(side), "%.*s.jpg", (int)stem, abs);
	if (regular(side, &size) && (r = add_source(s, allowed[2], side)) < 0)
		goto fail;
	return 0;
fail:
	snprintf(err, errsize, "cannot read %s: %s", side, strerror(-r));
	lobby_save_close(s);
	return r;
}

/* SHA-256 of fd's first size bytes, also fed to the blob's context. */
static int hash_file(struct lobby_save *s, int fd, uint64_t size, EVP_MD_CTX *whole, char *hex,
		     uint8_t *buf)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	uint64_t off = 0;
	int r = 0;

	if (c == NULL || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
		r = -ENOMEM;
		goto out;
	}
	while (off < size) {
		size_t want = size - off < HASH_BUF ? (size_t)(size - off) : HASH_BUF;
		ssize_t got = pread(fd, buf, want, (off_t)off);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			r = got < 0 ? -errno : -EIO;
			goto out;
		}
		EVP_DigestUpdate(c, buf, (size_t)got);
		if (whole != NULL)
			EVP_DigestUpdate(whole, buf, (size_t)got);
		off += (uint64_t)got;
		atomic_fetch_add(&s->progress, (uint64_t)got);
	}
	EVP_DigestFinal_ex(c, md, &mdlen);
	for (unsigned i = 0; i < mdlen; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
out:
	EVP_MD_CTX_free(c);
	return r;
}

/* Every file's hash into got[i], the blob's into got_blob. */
static int hash_all(struct lobby_save *s, char got[][LOBBY_SAVE_HEX], char *got_blob)
{
	EVP_MD_CTX *whole = EVP_MD_CTX_new();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	uint8_t *buf = malloc(HASH_BUF);
	int r = 0;

	if (whole == NULL || buf == NULL || EVP_DigestInit_ex(whole, EVP_sha256(), NULL) != 1) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < s->n && r == 0; i++)
		r = hash_file(s, s->f[i].fd, s->f[i].size, whole, got[i], buf);
	if (r == 0) {
		EVP_DigestFinal_ex(whole, md, &mdlen);
		for (unsigned i = 0; i < mdlen; i++)
			snprintf(got_blob + 2 * i, 3, "%02x", md[i]);
	}
out:
	free(buf);
	EVP_MD_CTX_free(whole);
	return r;
}

int lobby_save_hash(struct lobby_save *s)
{
	char got[LOBBY_SAVE_FILES][LOBBY_SAVE_HEX];
	int r;

	atomic_store(&s->progress, 0);
	r = hash_all(s, got, s->sha256);
	for (size_t i = 0; r == 0 && i < s->n; i++)
		memcpy(s->f[i].sha256, got[i], LOBBY_SAVE_HEX);
	return r;
}

/* The file holding blob offset off (the one after the last for off ==
 * total), or n. */
static size_t file_at(const struct lobby_save *s, uint64_t off)
{
	for (size_t i = 0; i < s->n; i++) {
		if (off < s->f[i].off + s->f[i].size)
			return i;
	}
	return s->n;
}

ssize_t lobby_save_read(struct lobby_save *s, uint64_t off, uint8_t *buf, size_t len)
{
	size_t done = 0;

	if (off > s->total || len > s->total - off)
		return -EINVAL;
	while (done < len) {
		size_t i = file_at(s, off + done);
		uint64_t in, left;
		ssize_t got;

		if (i == s->n)
			return -EIO;
		in = off + done - s->f[i].off;
		left = s->f[i].size - in;
		got = pread(s->f[i].fd, buf + done, len - done < left ? len - done : (size_t)left,
			    (off_t)in);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return got < 0 ? -errno : -EIO;
		done += (size_t)got;
	}
	return (ssize_t)len;
}

/* ---- the receiver's sink ---- */

/* Python's repr() of a str, for the names of a refusal (ASCII escapes as
 * Python writes them; other bytes as they came). */
static void repr_str(char *out, size_t size, size_t *o, const char *s)
{
	char q = strchr(s, '\'') != NULL && strchr(s, '"') == NULL ? '"' : '\'';
	int r;

#define PUT(...)                                                                                   \
	do {                                                                                       \
		r = snprintf(out + *o, size - *o, __VA_ARGS__);                                    \
		if (r > 0)                                                                         \
			*o = *o + (size_t)r < size ? *o + (size_t)r : size - 1;                    \
	} while (0)
	PUT("%c", q);
	for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
		if (*p == '\\' || *p == (unsigned char)q)
			PUT("\\%c", *p);
		else if (*p == '\n')
			PUT("\\n");
		else if (*p == '\r')
			PUT("\\r");
		else if (*p == '\t')
			PUT("\\t");
		else if (*p < 0x20 || *p == 0x7f)
			PUT("\\x%02x", *p);
		else
			PUT("%c", *p);
	}
	PUT("%c", q);
#undef PUT
}

static int refuse_names(const struct lobby_save_offer *files, size_t n, char *err, size_t errsize)
{
	size_t o = 0, bad = 0;
	int r;

	r = snprintf(err, errsize, "refused: sender proposed unexpected filename(s) [");
	o = r > 0 ? (size_t)r : 0;
	for (size_t i = 0; i < n; i++) {
		bool ok = false;

		for (size_t k = 0; files[i].name != NULL && k < LOBBY_SAVE_FILES; k++)
			ok = ok || strcmp(files[i].name, allowed[k]) == 0;
		if (ok)
			continue;
		if (bad++ > 0 && o + 2 < errsize) {
			memcpy(err + o, ", ", 3);
			o += 2;
		}
		if (files[i].name == NULL) {
			r = snprintf(err + o, errsize - o, "None");
			o = r > 0 && o + (size_t)r < errsize ? o + (size_t)r : errsize - 1;
		} else {
			repr_str(err, errsize, &o, files[i].name);
		}
	}
	if (o + 2 <= errsize) {
		err[o] = ']';
		err[o + 1] = '\0';
	}
	return bad > 0 ? -EPERM : 0;
}

static int tmp_name(char *dst, size_t size, const char *io_dir, const char *wire)
{
	int r = snprintf(dst, size, "%s/%s.tmp", io_dir, wire);

	return r < 0 || (size_t)r >= size ? -ENAMETOOLONG : 0;
}

int lobby_save_open_sink(struct lobby_save *s, const char *io_dir,
			 const struct lobby_save_offer *files, size_t n, uint64_t total,
			 const char *sha256, uint64_t cap, bool resume, char *err, size_t errsize)
{
	char kept[PATH_MAX];
	uint64_t sum = 0;
	int r;

	init(s);
	s->writing = true;
	if (refuse_names(files, n, err, errsize) < 0)
		return -EPERM;
	if (n > LOBBY_SAVE_FILES) {
		snprintf(err, errsize, "refused: %zu files proposed, at most %d", n,
			 LOBBY_SAVE_FILES);
		return -EPERM;
	}
	if (total > cap) {
		snprintf(err, errsize, "refused: %llu bytes is over this lobby's cap of %llu",
			 (unsigned long long)total, (unsigned long long)cap);
		return -EFBIG;
	}
	for (size_t i = 0; i < n; i++) {
		for (size_t k = 0; k < i; k++) {
			if (strcmp(files[i].name, files[k].name) == 0) {
				snprintf(err, errsize, "refused: %s proposed twice", files[i].name);
				return -EPERM;
			}
		}
		if (files[i].size < 0 || files[i].sha256 == NULL || strlen(files[i].sha256) != 64) {
			snprintf(err, errsize, "refused: no size or hash for %s", files[i].name);
			return -EPERM;
		}
		if ((uint64_t)files[i].size > cap || sum + (uint64_t)files[i].size > cap) {
			snprintf(err, errsize, "refused: %s is over this lobby's cap of %llu bytes",
				 files[i].name, (unsigned long long)cap);
			return -EFBIG;
		}
		sum += (uint64_t)files[i].size;
	}
	if (sum != total) {
		snprintf(err, errsize, "refused: the files add up to %llu bytes, not %llu",
			 (unsigned long long)sum, (unsigned long long)total);
		return -EPERM;
	}
	s->total = total;
	if (sha256 != NULL)
		snprintf(s->sha256, sizeof(s->sha256), "%s", sha256);
	for (size_t i = 0; i < n; i++) {
		struct lobby_save_file *f = &s->f[i];

		snprintf(f->wire, sizeof(f->wire), "%s", files[i].name);
		snprintf(f->sha256, sizeof(f->sha256), "%s", files[i].sha256);
		f->size = (uint64_t)files[i].size;
		f->off = i == 0 ? 0 : s->f[i - 1].off + s->f[i - 1].size;
		r = snprintf(f->path, sizeof(f->path), "%s/%s", io_dir, f->wire);
		if (r < 0 || (size_t)r >= sizeof(f->path) ||
		    tmp_name(s->tmp[i], sizeof(s->tmp[i]), io_dir, f->wire) < 0) {
			snprintf(err, errsize, "io dir path too long");
			lobby_save_close(s);
			return -ENAMETOOLONG;
		}
		s->n++;
		/* Resuming: the kept file becomes the temporary again. */
		if (resume) {
			r = lobby_partial_name(kept, sizeof(kept), io_dir, f->wire);
			if (r == 0 && rename(kept, s->tmp[i]) < 0)
				r = -errno;
			if (r < 0) {
				snprintf(err, errsize, "cannot take back the kept %s: %s", f->wire,
					 strerror(-r));
				lobby_save_close(s);
				return r;
			}
		}
		f->fd = open(s->tmp[i],
			     O_RDWR | O_CREAT | (resume ? 0 : O_TRUNC) | O_CLOEXEC | O_NOFOLLOW,
			     0644);
		if (f->fd < 0) {
			r = -errno;
			snprintf(err, errsize, "write error: %s: %s", s->tmp[i], strerror(-r));
			lobby_save_close(s);
			return r;
		}
		/* Reserve the space now: a disk too small fails here, clearly,
		 * not half way through. */
		r = f->size == 0 ? 0 : posix_fallocate(f->fd, 0, (off_t)f->size);
		if (r == EOPNOTSUPP || r == EINVAL)
			r = ftruncate(f->fd, (off_t)f->size) < 0 ? errno : 0;
		if (r != 0) {
			snprintf(err, errsize, "write error: %s: %s", s->tmp[i], strerror(r));
			lobby_save_close(s);
			return -r;
		}
	}
	return 0;
}

int lobby_save_locate(const struct lobby_save *s, uint64_t off, int *fd, uint64_t *file_off,
		      uint64_t *left)
{
	size_t i = file_at(s, off);

	if (i == s->n)
		return -EINVAL;
	*fd = s->f[i].fd;
	*file_off = off - s->f[i].off;
	*left = s->f[i].size - *file_off;
	return 0;
}

int lobby_save_write(struct lobby_save *s, uint64_t off, const uint8_t *data, size_t len)
{
	size_t done = 0;

	if (off > s->total || len > s->total - off)
		return -EINVAL;
	while (done < len) {
		size_t i = file_at(s, off + done);
		uint64_t in, left;
		ssize_t w;

		if (i == s->n)
			return -EIO;
		in = off + done - s->f[i].off;
		left = s->f[i].size - in;
		w = pwrite(s->f[i].fd, data + done, len - done < left ? len - done : (size_t)left,
			   (off_t)in);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		done += (size_t)w;
	}
	return 0;
}

struct lobby_save_hasher {
	size_t n;
	int fd[LOBBY_SAVE_FILES];
	uint64_t off[LOBBY_SAVE_FILES], size[LOBBY_SAVE_FILES];
	EVP_MD_CTX *file[LOBBY_SAVE_FILES], *whole;
	uint64_t done, total;
	uint8_t *buf;
};

struct lobby_save_hasher *lobby_save_hasher_new(const struct lobby_save *s)
{
	struct lobby_save_hasher *h = calloc(1, sizeof(*h));
	bool ok;

	if (h == NULL)
		return NULL;
	for (size_t i = 0; i < LOBBY_SAVE_FILES; i++)
		h->fd[i] = -1;
	h->total = s->total;
	h->buf = malloc(HASH_BUF);
	h->whole = EVP_MD_CTX_new();
	ok = h->buf != NULL && h->whole != NULL &&
	     EVP_DigestInit_ex(h->whole, EVP_sha256(), NULL) == 1;
	for (size_t i = 0; ok && i < s->n; i++) {
		h->off[i] = s->f[i].off;
		h->size[i] = s->f[i].size;
		h->fd[i] = fcntl(s->f[i].fd, F_DUPFD_CLOEXEC, 0);
		h->file[i] = EVP_MD_CTX_new();
		h->n++;
		ok = h->fd[i] >= 0 && h->file[i] != NULL &&
		     EVP_DigestInit_ex(h->file[i], EVP_sha256(), NULL) == 1;
	}
	if (!ok) {
		lobby_save_hasher_free(h);
		return NULL;
	}
	return h;
}

void lobby_save_hasher_free(struct lobby_save_hasher *h)
{
	if (h == NULL)
		return;
	for (size_t i = 0; i < LOBBY_SAVE_FILES; i++) {
		if (h->fd[i] >= 0)
			close(h->fd[i]);
		EVP_MD_CTX_free(h->file[i]);
	}
	EVP_MD_CTX_free(h->whole);
	free(h->buf);
	free(h);
}

uint64_t lobby_save_hasher_done(const struct lobby_save_hasher *h)
{
	return h->done;
}

int lobby_save_hasher_run(struct lobby_save_hasher *h, uint64_t upto, _Atomic uint64_t *progress)
{
	if (upto > h->total)
		upto = h->total;
	while (h->done < upto) {
		size_t i = 0;
		uint64_t in, left;
		ssize_t got;

		while (i < h->n && h->done >= h->off[i] + h->size[i])
			i++;
		if (i == h->n)
			return -EIO;
		in = h->done - h->off[i];
		left = h->off[i] + h->size[i] < upto ? h->size[i] - in : upto - h->done;
		got = pread(h->fd[i], h->buf, left < HASH_BUF ? (size_t)left : HASH_BUF, (off_t)in);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return got < 0 ? -errno : -EIO;
		EVP_DigestUpdate(h->file[i], h->buf, (size_t)got);
		EVP_DigestUpdate(h->whole, h->buf, (size_t)got);
		h->done += (uint64_t)got;
		if (progress != NULL)
			atomic_fetch_add(progress, (uint64_t)got);
	}
	return 0;
}

static void hex_final(EVP_MD_CTX *c, char *hex)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;

	EVP_DigestFinal_ex(c, md, &mdlen);
	for (unsigned i = 0; i < mdlen; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

int lobby_save_verify_with(struct lobby_save *s, struct lobby_save_hasher *h)
{
	char got[LOBBY_SAVE_HEX], blob[LOBBY_SAVE_HEX];
	int r;

	atomic_store(&s->progress, 0);
	for (size_t i = 0; i < s->n; i++) {
		if (fsync(s->f[i].fd) < 0)
			return -errno;
	}
	r = lobby_save_hasher_run(h, s->total, &s->progress);
	if (r < 0)
		return r;
	for (size_t i = 0; i < s->n; i++) {
		hex_final(h->file[i], got);
		if (strcmp(got, s->f[i].sha256) != 0)
			return 0;
	}
	hex_final(h->whole, blob);
	/* The blob's hash is checked when the fbegin carried one. */
	return s->sha256[0] == '\0' || strcmp(blob, s->sha256) == 0;
}

int lobby_save_verify(struct lobby_save *s)
{
	char got[LOBBY_SAVE_FILES][LOBBY_SAVE_HEX], blob[LOBBY_SAVE_HEX] = "";
	int r;

	atomic_store(&s->progress, 0);
	for (size_t i = 0; i < s->n; i++) {
		if (fsync(s->f[i].fd) < 0)
			return -errno;
	}
	r = hash_all(s, got, blob);
	if (r < 0)
		return r;
	for (size_t i = 0; i < s->n; i++) {
		if (strcmp(got[i], s->f[i].sha256) != 0)
			return 0;
	}
	/* The blob's hash is checked when the fbegin carried one. */
	return s->sha256[0] == '\0' || strcmp(blob, s->sha256) == 0;
}

int lobby_save_commit(struct lobby_save *s, const char *io_dir)
{
	char path[PATH_MAX];
	int dfd;

	for (size_t i = 0; i < s->n; i++) {
		if (rename(s->tmp[i], s->f[i].path) < 0)
			return -errno;
		s->tmp[i][0] = '\0';
	}
	/* A previous round's file this one does not have goes. */
	for (size_t k = 0; k < LOBBY_SAVE_FILES; k++) {
		bool ours = false;

		for (size_t i = 0; i < s->n; i++)
			ours = ours || strcmp(s->f[i].wire, allowed[k]) == 0;
		if (!ours && snprintf(path, sizeof(path), "%s/%s", io_dir, allowed[k]) > 0)
			unlink(path);
	}
	dfd = open(io_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	s->writing = false;
	return 0;
}

void lobby_save_close(struct lobby_save *s)
{
	for (size_t i = 0; i < LOBBY_SAVE_FILES; i++) {
		if (s->f[i].fd >= 0)
			close(s->f[i].fd);
		s->f[i].fd = -1;
		if (s->writing && s->tmp[i][0] != '\0')
			unlink(s->tmp[i]);
		s->tmp[i][0] = '\0';
	}
	s->n = 0;
}

int lobby_save_remove_stale(const char *io_dir)
{
	char path[PATH_MAX];
	int n = 0;

	for (size_t k = 0; k < LOBBY_SAVE_FILES; k++) {
		if (snprintf(path, sizeof(path), "%s/%s", io_dir, allowed[k]) > 0 &&
		    unlink(path) == 0)
			n++;
		if (tmp_name(path, sizeof(path), io_dir, allowed[k]) == 0 && unlink(path) == 0)
			n++;
	}
	return n;
}
