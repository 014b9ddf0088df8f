/*
 * Corpus replay without libFuzzer: runs LLVMFuzzerTestOneInput once over
 * every regular file in the directories (or files) named on the command
 * line, so the committed corpus is exercised by plain ctest under gcc and
 * ASan/UBSan. Each input is copied into a buffer of exactly its size, so
 * a read past the end is caught as it would be under libFuzzer.
 *
 * Exit status: 0 when every input ran, 1 when an argument could not be
 * read or no input was found (an empty corpus is a packaging mistake, not
 * a pass). A failed invariant aborts, naming the file first.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path, size_t *count)
{
	FILE *f = fopen(path, "rb");
	struct stat st;
	uint8_t *buf;
	size_t size, n;

	if (f == NULL) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return -1;
	}
	if (fstat(fileno(f), &st) < 0) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		fclose(f);
		return -1;
	}
	/* Exactly size bytes, so an over-read hits ASan's redzone; one byte
	 * for an empty file, since malloc(0) may return NULL. */
	size = (size_t)st.st_size;
	buf = malloc(size > 0 ? size : 1);
	if (buf == NULL) {
		fprintf(stderr, "%s: out of memory\n", path);
		fclose(f);
		return -1;
	}
	n = fread(buf, 1, size, f);
	fclose(f);
	if (n != size) {
		fprintf(stderr, "%s: short read\n", path);
		free(buf);
		return -1;
	}
	/* Named before the run, so an abort in the target says which input. */
	fprintf(stderr, "replay %s (%zu B)\n", path, size);
	LLVMFuzzerTestOneInput(buf, size);
	free(buf);
	(*count)++;
	return 0;
}

static int run_dir(const char *dir, size_t *count)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int ret = 0;

	if (d == NULL) {
		fprintf(stderr, "%s: %s\n", dir, strerror(errno));
		return -1;
	}
	while ((e = readdir(d)) != NULL) {
		char path[4096];
		struct stat st;

		if (e->d_name[0] == '.')
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= sizeof(path)) {
			fprintf(stderr, "%s/%s: path too long\n", dir, e->d_name);
			ret = -1;
			continue;
		}
		if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		if (run_file(path, count) < 0)
			ret = -1;
	}
	closedir(d);
	return ret;
}

int main(int argc, char **argv)
{
	size_t count = 0;
	int bad = 0;

	for (int i = 1; i < argc; i++) {
		struct stat st;

		/* libFuzzer flags (-runs=0 and the like) mean nothing here. */
		if (argv[i][0] == '-')
			continue;
		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
			bad = 1;
		} else if (S_ISDIR(st.st_mode)) {
			if (run_dir(argv[i], &count) < 0)
				bad = 1;
		} else if (run_file(argv[i], &count) < 0) {
			bad = 1;
		}
	}
	fprintf(stderr, "replayed %zu inputs\n", count);
	if (count == 0) {
		fprintf(stderr, "no inputs found\n");
		bad = 1;
	}
	return bad;
}
