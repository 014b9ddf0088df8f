/*
 * common/info: infostrings as ioquake3 code/qcommon/q_shared.c reads them
 * (Info_ValueForKey) and writes them (Info_SetValueForKey, Info_RemoveKey),
 * with the differences the header documents (a refused set leaves the
 * string as it was; remove drops every matching pair).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "info.h"
#include "tap.h"

/* info_get on a NUL-terminated string; the value copied out, or NULL. */
static const char *get(const char *s, const char *key)
{
	static char out[INFO_BIG_STRING];
	const char *v;
	size_t vlen;

	if (info_get(s, strlen(s), key, &v, &vlen) != 0)
		return NULL;
	memcpy(out, v, vlen);
	out[vlen] = '\0';
	return out;
}

#define CHECK_GET(s, key, want)                                                                    \
	do {                                                                                       \
		const char *got_ = get((s), (key));                                                \
		CHECK(got_ != NULL);                                                               \
		if (got_ != NULL)                                                                  \
			CHECK_EQ_STR(got_, (want));                                                \
	} while (0)

#define CHECK_ABSENT(s, key) CHECK(get((s), (key)) == NULL)

static void test_get(void)
{
	const char *s = "\\name\\Player\\rate\\25000\\g_gametype\\4";
	const char *v;
	size_t vlen;

	CHECK_GET(s, "name", "Player");
	CHECK_GET(s, "rate", "25000");
	CHECK_GET(s, "g_gametype", "4");
	/* Keys compare case-insensitively (Q_stricmp). */
	CHECK_GET(s, "RATE", "25000");
	CHECK_GET(s, "Name", "Player");
	/* Whole keys only. */
	CHECK_ABSENT(s, "nam");
	CHECK_ABSENT(s, "names");
	CHECK_ABSENT(s, "Player");
	CHECK_ABSENT(s, "");
	CHECK_EQ_INT(info_get(s, strlen(s), "nope", &v, &vlen), -ENOENT);

	/* The leading backslash is optional. */
	CHECK_GET("name\\Player\\rate\\1", "name", "Player");
	CHECK_GET("name\\Player\\rate\\1", "rate", "1");
	/* First match wins. */
	CHECK_GET("\\a\\1\\A\\2\\a\\3", "a", "1");
	CHECK_GET("\\a\\1\\A\\2\\a\\3", "A", "1");
	/* A key without a value separator ends the string. */
	CHECK_GET("\\a\\1\\b", "a", "1");
	CHECK_ABSENT("\\a\\1\\b", "b");
	CHECK_ABSENT("\\b", "b");
	CHECK_ABSENT("b", "b");
	CHECK_ABSENT("\\a\\1\\b\\2", "1");
	/* An empty value is a value. */
	CHECK_GET("\\a\\\\b\\2", "a", "");
	CHECK_GET("\\a\\\\b\\2", "b", "2");
	CHECK_GET("\\a\\", "a", "");
	/* A trailing backslash: the pair before it stands, nothing after. */
	CHECK_GET("\\a\\1\\", "a", "1");
	CHECK_ABSENT("\\a\\1\\", "");
	/* Two backslashes in a row make an empty key. */
	CHECK_GET("\\a\\1\\\\2", "", "2");
	/* Empty strings hold nothing. */
	CHECK_ABSENT("", "a");
	CHECK_ABSENT("\\", "a");

	/* A NUL ends the string even when len goes further. */
	{
		static const char nul[] = "\\a\\1\0\\b\\2";

		CHECK_EQ_INT(info_get(nul, sizeof(nul) - 1, "b", &v, &vlen), -ENOENT);
		CHECK_EQ_INT(info_get(nul, sizeof(nul) - 1, "a", &v, &vlen), 0);
		CHECK_EQ_INT(vlen, 1);
	}
	/* And len bounds the read when there is no NUL. */
	{
		static const char raw[] = "\\a\\12345\\b\\2";

		CHECK_EQ_INT(info_get(raw, 5, "a", &v, &vlen), 0);
		CHECK_EQ_INT(vlen, 2);
		CHECK(memcmp(v, "12", 2) == 0);
		CHECK_EQ_INT(info_get(raw, 5, "b", &v, &vlen), -ENOENT);
	}
}

static void test_get_big(void)
{
	char *s = malloc(INFO_BIG_STRING + 16);
	const char *v;
	size_t vlen;
	struct info_iter it;

	CHECK(s != NULL);
	if (s == NULL)
		return;
	/* "\k\vvv...": 8191 bytes is the largest string the engine reads. */
	memcpy(s, "\\k\\", 3);
	memset(s + 3, 'v', INFO_BIG_STRING - 1 - 3);
	s[INFO_BIG_STRING - 1] = '\0';
	CHECK_EQ_INT(info_get(s, INFO_BIG_STRING - 1, "k", &v, &vlen), 0);
	CHECK_EQ_INT(vlen, INFO_BIG_STRING - 1 - 3);
	/* The same with the buffer's NUL inside len. */
	CHECK_EQ_INT(info_get(s, INFO_BIG_STRING + 16, "k", &v, &vlen), 0);
	/* 8192 bytes: "oversize infostring". */
	s[INFO_BIG_STRING - 1] = 'v';
	s[INFO_BIG_STRING] = '\0';
	CHECK_EQ_INT(info_get(s, INFO_BIG_STRING, "k", &v, &vlen), -EMSGSIZE);
	CHECK_EQ_INT(info_get(s, INFO_BIG_STRING + 16, "k", &v, &vlen), -EMSGSIZE);
	CHECK_EQ_INT(info_iter_init(&it, s, INFO_BIG_STRING), -EMSGSIZE);
	CHECK_EQ_INT(info_iter_init(&it, s, INFO_BIG_STRING - 1), 0);
	free(s);
}

static void test_iter(void)
{
	static const char s[] = "\\a\\1\\bb\\\\ccc\\333";
	struct info_iter it;
	const char *k, *v;
	size_t kl, vl;

	CHECK_EQ_INT(info_iter_init(&it, s, sizeof(s) - 1), 0);
	CHECK(info_next(&it, &k, &kl, &v, &vl));
	CHECK(kl == 1 && memcmp(k, "a", 1) == 0 && vl == 1 && memcmp(v, "1", 1) == 0);
	CHECK(info_next(&it, &k, &kl, &v, &vl));
	CHECK(kl == 2 && memcmp(k, "bb", 2) == 0 && vl == 0);
	CHECK(info_next(&it, &k, &kl, &v, &vl));
	CHECK(kl == 3 && memcmp(k, "ccc", 3) == 0 && vl == 3 && memcmp(v, "333", 3) == 0);
	CHECK(!info_next(&it, &k, &kl, &v, &vl));
	CHECK(!info_next(&it, &k, &kl, &v, &vl));
}

static void test_set(void)
{
	char s[INFO_MAX_STRING * 2];

	s[0] = '\0';
	CHECK_EQ_INT(info_set(s, sizeof(s), "name", "Player"), 0);
	CHECK_EQ_STR(s, "\\name\\Player");
	/* The new pair goes in front. */
	CHECK_EQ_INT(info_set(s, sizeof(s), "rate", "25000"), 0);
	CHECK_EQ_STR(s, "\\rate\\25000\\name\\Player");
	/* Replacing removes the old pair and puts the new one in front. */
	CHECK_EQ_INT(info_set(s, sizeof(s), "name", "Bob"), 0);
	CHECK_EQ_STR(s, "\\name\\Bob\\rate\\25000");
	/* The removal is case-sensitive, as Info_RemoveKey's strcmp. */
	CHECK_EQ_INT(info_set(s, sizeof(s), "Name", "Eve"), 0);
	CHECK_EQ_STR(s, "\\Name\\Eve\\name\\Bob\\rate\\25000");
	CHECK_GET(s, "name", "Eve");

	/* An empty value only removes. */
	CHECK_EQ_INT(info_set(s, sizeof(s), "Name", ""), 0);
	CHECK_EQ_STR(s, "\\name\\Bob\\rate\\25000");
	CHECK_EQ_INT(info_set(s, sizeof(s), "absent", ""), 0);
	CHECK_EQ_STR(s, "\\name\\Bob\\rate\\25000");

	/* Forbidden characters in key or value: refused, s unchanged. */
	CHECK_EQ_INT(info_set(s, sizeof(s), "na\\me", "x"), -EINVAL);
	CHECK_EQ_INT(info_set(s, sizeof(s), "na;me", "x"), -EINVAL);
	CHECK_EQ_INT(info_set(s, sizeof(s), "na\"me", "x"), -EINVAL);
	CHECK_EQ_INT(info_set(s, sizeof(s), "name", "a\\b"), -EINVAL);
	CHECK_EQ_INT(info_set(s, sizeof(s), "name", "a;b"), -EINVAL);
	CHECK_EQ_INT(info_set(s, sizeof(s), "name", "\""), -EINVAL);
	CHECK_EQ_INT(info_set(s, sizeof(s), "rate", ";"), -EINVAL);
	CHECK_EQ_INT(info_set(s, sizeof(s), "", "x"), -EINVAL);
	CHECK_EQ_STR(s, "\\name\\Bob\\rate\\25000");
	CHECK(info_valid_token("Player one"));
	CHECK(info_valid_token(""));
	CHECK(!info_valid_token("a;b"));
	CHECK(!info_valid_token("\\"));
	CHECK(!info_valid_token("\""));
}

static void test_set_limits(void)
{
	char s[INFO_MAX_STRING * 2];
	char v[INFO_MAX_STRING * 2];
	char small[16];

	/* On an empty string, "\k\" + 1020 bytes is 1023: the largest. */
	s[0] = '\0';
	memset(v, 'v', 1021);
	v[1021] = '\0';
	CHECK_EQ_INT(info_set(s, sizeof(s), "k", v), -EMSGSIZE);
	CHECK_EQ_STR(s, "");
	v[1020] = '\0';
	CHECK_EQ_INT(info_set(s, sizeof(s), "k", v), 0);
	CHECK_EQ_INT(strlen(s), INFO_MAX_STRING - 1);
	/* Replacing a value is measured without the old pair. */
	memset(v, 'w', 1020);
	CHECK_EQ_INT(info_set(s, sizeof(s), "k", v), 0);
	CHECK_EQ_INT(strlen(s), INFO_MAX_STRING - 1);
	CHECK(s[3] == 'w');
	/* Adding a pair to a full string is refused and the string is left
	 * as it was (the engine would have dropped the old pair). */
	CHECK_EQ_INT(info_set(s, sizeof(s), "k", "wwww"), 0);
	CHECK_EQ_STR(s, "\\k\\wwww");
	memset(v, 'x', 1014);
	v[1014] = '\0';
	/* "\j\" + 1014 + "\k\wwww" (7) = 1024: refused. */
	CHECK_EQ_INT(info_set(s, sizeof(s), "j", v), -EMSGSIZE);
	CHECK_EQ_STR(s, "\\k\\wwww");
	/* And a refused replacement keeps the old value. */
	memset(v, 'y', 1021);
	v[1021] = '\0';
	CHECK_EQ_INT(info_set(s, sizeof(s), "k", v), -EMSGSIZE);
	CHECK_EQ_STR(s, "\\k\\wwww");
	v[1013] = '\0';
	CHECK_EQ_INT(info_set(s, sizeof(s), "j", v), 0);
	CHECK_EQ_INT(strlen(s), INFO_MAX_STRING - 1);
	CHECK_GET(s, "k", "wwww");

	/* The result must also fit the caller's buffer. */
	small[0] = '\0';
	CHECK_EQ_INT(info_set(small, sizeof(small), "k", "0123456789abc"), -EMSGSIZE);
	CHECK_EQ_STR(small, "");
	CHECK_EQ_INT(info_set(small, sizeof(small), "k", "0123456789ab"), 0);
	CHECK_EQ_STR(small, "\\k\\0123456789ab");
	CHECK_EQ_INT(info_set(small, sizeof(small), "j", "1"), -EMSGSIZE);
	CHECK_EQ_STR(small, "\\k\\0123456789ab");
	CHECK_EQ_INT(info_set(small, sizeof(small), "k", "1"), 0);
	CHECK_EQ_STR(small, "\\k\\1");

	/* An oversize string is refused as a whole. */
	memset(s, 'a', INFO_MAX_STRING);
	s[INFO_MAX_STRING] = '\0';
	CHECK_EQ_INT(info_set(s, sizeof(s), "k", "1"), -EMSGSIZE);
	CHECK_EQ_INT(strlen(s), INFO_MAX_STRING);
}

static void test_remove(void)
{
	char s[128];

	strcpy(s, "\\a\\1\\b\\2\\c\\3");
	info_remove(s, "b");
	CHECK_EQ_STR(s, "\\a\\1\\c\\3");
	/* Case-sensitive (strcmp in Info_RemoveKey). */
	info_remove(s, "A");
	CHECK_EQ_STR(s, "\\a\\1\\c\\3");
	/* Whole keys only. */
	info_remove(s, "");
	info_remove(s, "aa");
	info_remove(s, "1");
	CHECK_EQ_STR(s, "\\a\\1\\c\\3");
	info_remove(s, "a");
	CHECK_EQ_STR(s, "\\c\\3");
	info_remove(s, "c");
	CHECK_EQ_STR(s, "");
	info_remove(s, "c");
	CHECK_EQ_STR(s, "");

	/* Every pair with the key goes. */
	strcpy(s, "\\a\\1\\b\\2\\a\\3\\a\\4");
	info_remove(s, "a");
	CHECK_EQ_STR(s, "\\b\\2");
	/* Without the leading backslash. */
	strcpy(s, "a\\1\\b\\2");
	info_remove(s, "a");
	CHECK_EQ_STR(s, "\\b\\2");
	strcpy(s, "a\\1\\b\\2");
	info_remove(s, "b");
	CHECK_EQ_STR(s, "a\\1");
	/* Empty values. */
	strcpy(s, "\\a\\\\b\\2");
	info_remove(s, "a");
	CHECK_EQ_STR(s, "\\b\\2");
	/* A key without a value ends the scan: nothing to remove. */
	strcpy(s, "\\a\\1\\b");
	info_remove(s, "b");
	CHECK_EQ_STR(s, "\\a\\1\\b");
}

int main(void)
{
	test_get();
	test_get_big();
	test_iter();
	test_set();
	test_set_limits();
	test_remove();
	return tap_done("info");
}
