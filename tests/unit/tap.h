/*
 * A tiny TAP-style harness for the unit tests: CHECK() records a failure
 * with file:line and goes on; main() returns tap_done() (0 = all passed).
 */
#ifndef TAP_H
#define TAP_H

#include <stdio.h>
#include <string.h>

static int tap_failures;
static int tap_checks;

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		tap_checks++;                                                                      \
		if (!(cond)) {                                                                     \
			tap_failures++;                                                            \
			fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);            \
		}                                                                                  \
	} while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
	do {                                                                                       \
		long long a_ = (long long)(a), b_ = (long long)(b);                                \
		tap_checks++;                                                                      \
		if (a_ != b_) {                                                                    \
			tap_failures++;                                                            \
			fprintf(stderr, "FAIL %s:%d: %s == %s (%lld != %lld)\n", __FILE__,         \
				__LINE__, #a, #b, a_, b_);                                         \
		}                                                                                  \
	} while (0)

#define CHECK_EQ_STR(a, b)                                                                         \
	do {                                                                                       \
		const char *a_ = (a), *b_ = (b);                                                   \
		tap_checks++;                                                                      \
		if (strcmp(a_, b_) != 0) {                                                         \
			tap_failures++;                                                            \
			fprintf(stderr, "FAIL %s:%d: %s == %s (\"%s\" != \"%s\")\n", __FILE__,     \
				__LINE__, #a, #b, a_, b_);                                         \
		}                                                                                  \
	} while (0)

static inline int tap_done(const char *name)
{
	printf("%s: %d checks, %d failures\n", name, tap_checks, tap_failures);
	return tap_failures == 0 ? 0 : 1;
}

#endif
