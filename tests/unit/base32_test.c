/*
 * common/base32: RFC 4648 §10's vectors, and the decoder against what
 * Python 3.11's base64.b32decode() answers for text that netpunch has
 * upper-cased and padded to a multiple of 8 (netpunch-wire.md §4.3). The
 * expected rows were produced by running exactly that in Python 3.11.7.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base32.h"
#include "tap.h"

static void hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
	out[2 * n] = '\0';
}

/* RFC 4648 §10: BASE32("foobar") and its prefixes. */
static void test_rfc4648(void)
{
	static const struct {
		const char *in, *out;
	} v[] = {
		{"", ""},
		{"f", "MY"},
		{"fo", "MZXQ"},
		{"foo", "MZXW6"},
		{"foob", "MZXW6YQ"},
		{"fooba", "MZXW6YTB"},
		{"foobar", "MZXW6YTBOI"},
	};
	char text[32];
	uint8_t back[16];

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		size_t n = strlen(v[i].in);
		int ret = base32_encode((const uint8_t *)v[i].in, n, text, sizeof(text));

		CHECK_EQ_INT(ret, (long long)strlen(v[i].out));
		CHECK_EQ_STR(text, v[i].out);
		CHECK_EQ_INT(base32_encoded_len(n), strlen(v[i].out));
		ret = base32_decode(text, strlen(text), back, sizeof(back));
		CHECK_EQ_INT(ret, (long long)n);
		CHECK(ret >= 0 && memcmp(back, v[i].in, n) == 0);
	}
	/* The text buffer must hold the NUL too. */
	CHECK_EQ_INT(base32_encode((const uint8_t *)"foobar", 6, text, 10), -ENOSPC);
	CHECK_EQ_INT(base32_encode((const uint8_t *)"foobar", 6, text, 11), 10);
}

/* Every byte value and length round-trips. */
static void test_roundtrip(void)
{
	uint8_t in[300], back[300];
	char text[512];

	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(i * 37 + 11);
	for (size_t n = 0; n <= sizeof(in); n++) {
		int t = base32_encode(in, n, text, sizeof(text));
		int d;

		CHECK(t >= 0);
		if (t < 0)
			continue;
		d = base32_decode(text, (size_t)t, back, sizeof(back));
		CHECK_EQ_INT(d, (long long)n);
		CHECK(d >= 0 && memcmp(back, in, n) == 0);
		CHECK((size_t)d <= base32_decoded_max((size_t)t));
	}
}

/* Python 3.11: base64.b32decode(text.upper() + "=" * (-len(text) % 8)). */
static void test_python(void)
{
	static const struct {
		const char *text;
		const char *hex; /* NULL: error */
		const char *err;
	} v[] = {
		{"", "", NULL},
		{"A", NULL, "Incorrect padding"},
		{"AB", "00", NULL},
		{"ABC", NULL, "Incorrect padding"},
		{"ABCD", "0044", NULL},
		{"ABCDE", "004432", NULL},
		{"ABCDEF", NULL, "Incorrect padding"},
		{"ABCDEFG", "00443214", NULL},
		{"ABCDEFGH", "00443214c7", NULL},
		{"MY", "66", NULL},
		{"MY======", "66", NULL},
		{"MZXQ", "666f", NULL},
		{"MZXQ====", "666f", NULL},
		{"mzxw6", "666f6f", NULL},
		{"MZXW6YQ", "666f6f62", NULL},
		{"MZXW6YQ=", "666f6f62", NULL},
		{"MZXW6YTB", "666f6f6261", NULL},
		{"MZXW6YTBOI", "666f6f626172", NULL},
		{"MZXW6YTBOI======", "666f6f626172", NULL},
		{"ABC1DEFG", NULL, "Non-base32 digit found"},
		{"AB=CDEFG", NULL, "Non-base32 digit found"},
		{"========", NULL, "Incorrect padding"},
		{"A=======", NULL, "Incorrect padding"},
		{"ABCDEFGH========", NULL, "Incorrect padding"},
		{"ABCDEFG==", NULL, "Incorrect padding"},
		{"7777777", "ffffffff", NULL},
		{"77", "ff", NULL},
		{"7Z", "fe", NULL},
		{"ZZZZZZZZ", "ce739ce739", NULL},
		{"AB CD", NULL, "Non-base32 digit found"},
		{"ABCDEFGHI", NULL, "Incorrect padding"},
		{"MZXW6YTBO=", NULL, "Incorrect padding"},
		{"MZXW6===", "666f6f", NULL},
		{"MZXW6YTBOI=====", "666f6f626172", NULL},
		{"ab0", NULL, "Non-base32 digit found"},
		{"A8", NULL, "Non-base32 digit found"},
		{"MZ======X", NULL, "Non-base32 digit found"},
		{"\xc3\xa9"
		 "A",
		 NULL, "string argument should contain only ASCII characters"},
		{"MZXW6YTBOI=", "666f6f626172", NULL},
		{"====ABCD", NULL, "Non-base32 digit found"},
	};
	uint8_t out[32];
	char h[80];

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		int ret = base32_decode(v[i].text, strlen(v[i].text), out, sizeof(out));

		if (v[i].hex != NULL) {
			CHECK(ret >= 0);
			if (ret < 0) {
				fprintf(stderr, "  text \"%s\": %d\n", v[i].text, ret);
				continue;
			}
			hex(out, (size_t)ret, h);
			CHECK_EQ_STR(h, v[i].hex);
		} else {
			CHECK(ret < 0);
			CHECK_EQ_STR(base32_strerror(ret), v[i].err);
		}
	}
	CHECK_EQ_STR(base32_strerror(-ENOSPC), "");
}

/* The output bound is checked before anything is written. */
static void test_bounds(void)
{
	uint8_t out[8];

	memset(out, 0xaa, sizeof(out));
	CHECK_EQ_INT(base32_decode("MZXW6YTBOI", 10, out, 5), -ENOSPC);
	CHECK_EQ_INT(out[0], 0xaa);
	CHECK_EQ_INT(base32_decode("MZXW6YTBOI", 10, out, 6), 6);
	/* Only len bytes are read: no NUL needed. */
	CHECK_EQ_INT(base32_decode("MZXW6YTBOIXXXX", 10, out, sizeof(out)), 6);
	CHECK_EQ_INT(base32_decoded_max(0), 0);
	CHECK_EQ_INT(base32_decoded_max(1), 5);
	CHECK_EQ_INT(base32_decoded_max(8), 5);
	CHECK_EQ_INT(base32_decoded_max(9), 10);
}

int main(void)
{
	test_rfc4648();
	test_roundtrip();
	test_python();
	test_bounds();
	return tap_done("base32");
}
