/*
 * bench-seal: throughput of the netpunch seal (common/seal.c) on one core.
 *
 *   bench-seal [--size N]... [--mbytes M] [--rounds R]
 *
 * For each size (default 64, 512, 1200, 1400 bytes of plaintext) it seals
 * M MiB (default 256) worth of frames with one sealer, then opens every one
 * of them with a second sealer under the same key (so open pays for the
 * replay window and the salt table, as a receiving lobby does), and checks
 * that every frame opened to its plaintext. Likewise sign and unsign (the
 * clear, authenticated game-frame form). Each measurement is repeated R times
 * (default 5) and the median is printed; rates are MB/s (10^6 bytes) of
 * plaintext per CPU second of this thread (CLOCK_THREAD_CPUTIME_ID), beside
 * the wall-clock rate.
 *
 * Output: one JSON object per line:
 *   {"op":"seal","size":1200,"mb_per_cpu_s":...,"mb_per_wall_s":...,
 *    "ns_per_frame":...,"frames":...}
 */
#include "bench.h"

#include "seal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SIZES  (16)
#define MAX_ROUNDS (51)
#define MAX_FRAME  (4096)

struct sample {
	double cpu_s;
	double wall_s;
};

static double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

enum op { OP_SEAL, OP_OPEN, OP_SIGN, OP_UNSIGN };
static const char *const op_name[] = {"seal", "open", "sign", "unsign"};

/*
 * One round of one size: seal (or sign) `frames` frames into `wire`, then
 * open (or unsign) them all with a fresh receiver. Fills the two samples.
 * Returns 0, or -1 after printing what went wrong.
 */
static int one_round(const uint8_t key[static SEAL_KEY_LEN], bool sign, size_t size, size_t frames,
		     uint8_t *wire, struct sample *out_make, struct sample *out_check)
{
	struct sealer *tx = seal_new(key), *rx = seal_new(key);
	uint8_t pt[MAX_FRAME], back[MAX_FRAME];
	size_t stride = size + SEAL_OVERHEAD;
	double c0, w0;
	int rc = -1;

	if (!tx || !rx) {
		fprintf(stderr, "bench-seal: seal_new: %s\n", strerror(errno));
		goto out;
	}
	for (size_t i = 0; i < size; i++)
		pt[i] = (uint8_t)(i * 7 + 1);

	c0 = thread_cpu_s();
	w0 = (double)bench_now_ns();
	for (size_t f = 0; f < frames; f++) {
		int n;

		pt[0] = (uint8_t)f;
		n = sign ? seal_sign(tx, pt, size, wire + f * stride, stride)
			 : seal_seal(tx, pt, size, wire + f * stride, stride);
		if (n != (int)stride) {
			fprintf(stderr, "bench-seal: %s returned %d\n", sign ? "sign" : "seal", n);
			goto out;
		}
	}
	out_make->cpu_s = thread_cpu_s() - c0;
	out_make->wall_s = ((double)bench_now_ns() - w0) / 1e9;

	c0 = thread_cpu_s();
	w0 = (double)bench_now_ns();
	for (size_t f = 0; f < frames; f++) {
		const uint8_t *got;
		int n;

		if (sign) {
			n = seal_unsign(rx, wire + f * stride, stride, &got);
		} else {
			n = seal_open(rx, wire + f * stride, stride, back, sizeof(back));
			got = back;
		}
		if (n != (int)size || got[0] != (uint8_t)f || got[size - 1] != pt[size - 1]) {
			fprintf(stderr, "bench-seal: %s of frame %zu failed (%d)\n",
				sign ? "unsign" : "open", f, n);
			goto out;
		}
	}
	out_check->cpu_s = thread_cpu_s() - c0;
	out_check->wall_s = ((double)bench_now_ns() - w0) / 1e9;
	rc = 0;
out:
	seal_free(tx);
	seal_free(rx);
	return rc;
}

static void report(enum op op, size_t size, size_t frames, struct sample *s, size_t rounds)
{
	double cpu[MAX_ROUNDS], wall[MAX_ROUNDS], mb = (double)size * (double)frames / 1e6;

	for (size_t r = 0; r < rounds; r++) {
		cpu[r] = mb / s[r].cpu_s;
		wall[r] = mb / s[r].wall_s;
	}
	double mcpu = median(cpu, rounds);
	printf("{\"op\":\"%s\",\"size\":%zu,\"mb_per_cpu_s\":%.1f,\"mb_per_wall_s\":%.1f,"
	       "\"ns_per_frame\":%.1f,\"frames\":%zu,\"rounds\":%zu}\n",
	       op_name[op], size, mcpu, median(wall, rounds), (double)size * 1e3 / mcpu, frames,
	       rounds);
	fflush(stdout);
}

static void usage(void)
{
	fprintf(stderr, "usage: bench-seal [--size N]... [--mbytes M] [--rounds R]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	size_t sizes[MAX_SIZES] = {64, 512, 1200, 1400}, nsizes = 0, rounds = 5;
	uint64_t mbytes = 256, v;
	uint8_t key[SEAL_KEY_LEN], secret[SEAL_SECRET_LEN];

	for (int i = 1; i < argc; i++) {
		if (i + 1 >= argc)
			usage();
		if (!strcmp(argv[i], "--size")) {
			if (nsizes == MAX_SIZES || bench_parse_u64(argv[++i], 1, MAX_FRAME, &v))
				usage();
			sizes[nsizes++] = (size_t)v;
		} else if (!strcmp(argv[i], "--mbytes")) {
			if (bench_parse_u64(argv[++i], 1, 4096, &mbytes))
				usage();
		} else if (!strcmp(argv[i], "--rounds")) {
			if (bench_parse_u64(argv[++i], 1, MAX_ROUNDS, &v))
				usage();
			rounds = (size_t)v;
		} else {
			usage();
		}
	}
	if (!nsizes)
		nsizes = 4;

	memset(secret, 0x5a, sizeof(secret));
	seal_derive_key(secret, "bench", key);

	for (size_t si = 0; si < nsizes; si++) {
		size_t size = sizes[si], frames = (size_t)(mbytes << 20) / size;
		uint8_t *wire = malloc(frames * (size + SEAL_OVERHEAD));
		struct sample mk[2][MAX_ROUNDS], ck[2][MAX_ROUNDS];

		if (!wire) {
			fprintf(stderr, "bench-seal: out of memory for %zu frames\n", frames);
			return 1;
		}
		/* Rounds interleave sealing and signing so drift hits both. */
		for (size_t r = 0; r < rounds; r++)
			for (int sg = 0; sg < 2; sg++)
				if (one_round(key, sg, size, frames, wire, &mk[sg][r],
					      &ck[sg][r])) {
					free(wire);
					return 1;
				}
		report(OP_SEAL, size, frames, mk[0], rounds);
		report(OP_OPEN, size, frames, ck[0], rounds);
		report(OP_SIGN, size, frames, mk[1], rounds);
		report(OP_UNSIGN, size, frames, ck[1], rounds);
		free(wire);
	}
	return 0;
}
