/*
 * Fuzz target for common/qsplice: kept answers, requests, and the answers
 * spliced from them.
 *
 * Input layout: byte 0 picks the kind (bit 0: getstatus) and byte 1 the
 * length L of the asker's challenge, bytes 2..2+L are that challenge, and
 * the rest is the kept answer, whose own challenge is "ours1" (the seeds
 * carry "\challenge\ours1"). The whole input is also read as a request.
 *
 * Invariants checked:
 * - qsplice_request returns 0, -EBADMSG or -E2BIG; on 0 the challenge is
 *   NUL-terminated, at most 128 bytes, without '%', '\n' or bytes over 127.
 * - qsplice_parse returns 0, -EBADMSG or -ENOENT; on 0 the parts lie in
 *   the datagram in order and the pair reads "\challenge\ours1".
 * - Built with our own challenge the answer is the kept one, byte for byte.
 * - Any answer has qsplice_size's length, the kept bytes before and after
 *   the pair unchanged, and the asker's pair (or none) in between; for a
 *   challenge that could be ours, it parses back with the same pair offset.
 * - A buffer one byte short gives -EMSGSIZE.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "qsplice.h"

static bool settable(const char *s, size_t n)
{
	return n > 0 && memchr(s, '\\', n) == NULL && memchr(s, ';', n) == NULL &&
	       memchr(s, '"', n) == NULL;
}

static bool could_be_ours(const char *s, size_t n)
{
	if (!settable(s, n) || n > QSPLICE_CHALLENGE_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] > 126 || s[i] == '%')
			return false;
	}
	return true;
}

static void check_request(const uint8_t *data, size_t size)
{
	char ch[QSPLICE_CHALLENGE_MAX + 1];
	enum qsplice_kind kind;
	size_t n = 999;
	int r = qsplice_request(data, size, &kind, ch, &n);

	FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -E2BIG);
	if (r != 0)
		return;
	FUZZ_CHECK(n <= QSPLICE_CHALLENGE_MAX && strlen(ch) == n);
	/* MSG_ReadStringLine turned '%' and bytes over 127 into '.'; a
	 * quoted token may hold spaces, never the line's end. */
	for (size_t i = 0; i < n; i++)
		FUZZ_CHECK((unsigned char)ch[i] <= 127 && ch[i] != '%' && ch[i] != '\n');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t out[QSPLICE_MAX_ANSWER + 256];
	enum qsplice_kind kind;
	const uint8_t *ans;
	char ch[256];
	size_t ch_len, ans_len, tail;
	struct qsplice_tmpl t;
	int r, n;

	check_request(data, size);
	if (size < 2)
		return 0;
	kind = (data[0] & 1) ? QSPLICE_STATUS : QSPLICE_INFO;
	ch_len = data[1];
	if (ch_len > size - 2)
		ch_len = size - 2;
	memcpy(ch, data + 2, ch_len);
	ch[ch_len] = '\0';
	ans = data + 2 + ch_len;
	ans_len = size - 2 - ch_len;

	r = qsplice_parse(ans, ans_len, kind, "ours1", 5, &t);
	FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -ENOENT);
	if (r != 0)
		return 0;
	FUZZ_CHECK(t.len == ans_len && t.kind == kind);
	FUZZ_CHECK(t.info_off <= t.pair_off && t.pair_off + t.pair_len <= t.info_off + t.info_len);
	FUZZ_CHECK(t.info_off + t.info_len <= ans_len && t.info_len < QSPLICE_INFO_BIG);
	FUZZ_CHECK(t.pair_len == 16 && memcmp(ans + t.pair_off, "\\challenge\\ours1", 16) == 0);

	n = qsplice_build(ans, &t, "ours1", 5, out, sizeof(out));
	FUZZ_CHECK(n >= 0 && (size_t)n == ans_len && memcmp(out, ans, ans_len) == 0);

	n = qsplice_build(ans, &t, ch, ch_len, out, sizeof(out));
	FUZZ_CHECK(n == qsplice_size(&t, ch, ch_len));
	if (ch_len > QSPLICE_CHALLENGE_MAX) {
		FUZZ_CHECK(n == -E2BIG);
		return 0;
	}
	if (n == -ERANGE) {
		FUZZ_CHECK(settable(ch, ch_len));
		return 0;
	}
	FUZZ_CHECK(n >= 0);
	tail = ans_len - t.pair_off - t.pair_len;
	FUZZ_CHECK(memcmp(out, ans, t.pair_off) == 0);
	FUZZ_CHECK(memcmp(out + (size_t)n - tail, ans + t.pair_off + t.pair_len, tail) == 0);
	if (settable(ch, ch_len)) {
		FUZZ_CHECK((size_t)n == ans_len - 5 + ch_len);
		FUZZ_CHECK(memcmp(out + t.pair_off, "\\challenge\\", 11) == 0);
		FUZZ_CHECK(memcmp(out + t.pair_off + 11, ch, ch_len) == 0);
	} else {
		FUZZ_CHECK((size_t)n == ans_len - 16);
	}
	if (could_be_ours(ch, ch_len) && (size_t)n <= QSPLICE_MAX_ANSWER) {
		struct qsplice_tmpl t2;

		FUZZ_CHECK(qsplice_parse(out, (size_t)n, kind, ch, ch_len, &t2) == 0);
		FUZZ_CHECK(t2.pair_off == t.pair_off && t2.pair_len == 11 + ch_len);
	}
	if (n > 0)
		FUZZ_CHECK(qsplice_build(ans, &t, ch, ch_len, out, (size_t)n - 1) == -EMSGSIZE);
	return 0;
}
