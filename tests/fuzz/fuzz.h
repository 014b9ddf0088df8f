/*
 * Shared by the fuzz targets and the replay driver.
 *
 * FUZZ_CHECK is for the invariants a target asserts beyond "no crash". It
 * does not use assert(): RelWithDebInfo defines NDEBUG, and a campaign must
 * not silently stop checking. abort() is what libFuzzer and the replay
 * driver both report as a failure, with the input saved by libFuzzer.
 */
#ifndef FUZZ_H
#define FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* libFuzzer's entry point; each fuzz_<codec>.c defines it. Returns 0. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__,       \
				#cond);                                                            \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

#endif
