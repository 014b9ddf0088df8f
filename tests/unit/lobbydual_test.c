/*
 * lobby/lobby_dual's pure parts: the switch file's rule (lobby.py
 * _tcp_backup_on: the text stripped, anything but "0", "off" or "no" is
 * on, case counting) and netpunch's quantile (DualStats._q).
 */
#include <string.h>

#include "lobby_dual.h"
#include "tap.h"

static bool on(const char *s)
{
	return lobby_dual_switch_on(s, strlen(s));
}

static void test_switch(void)
{
	CHECK(on(""));
	CHECK(on("1"));
	CHECK(on("yes"));
	CHECK(on("on\n"));
	CHECK(!on("0"));
	CHECK(!on("off"));
	CHECK(!on("no"));
	CHECK(!on("  0\n"));
	CHECK(!on("\toff\r\n"));
	CHECK(!on("no\n\n"));
	CHECK(!on("\x1c"
		  "0\x1f")); /* str.strip() takes these too */
	/* Python compares exactly: these leave it on. */
	CHECK(on("OFF"));
	CHECK(on("No"));
	CHECK(on("00"));
	CHECK(on("0 0"));
	CHECK(on("false"));
	CHECK(on("off # not now"));
	/* A NUL is not whitespace. */
	CHECK(lobby_dual_switch_on("0\0", 2));
	CHECK(!lobby_dual_switch_on("0", 1));
}

static void test_pick(void)
{
	static const uint32_t v[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};

	CHECK_EQ_INT((int)lobby_dual_pick(v, 0, 0.5), 0);
	CHECK_EQ_INT((int)lobby_dual_pick(v, 1, 0.5), 1);
	CHECK_EQ_INT((int)lobby_dual_pick(v, 1, 0.9), 1);
	/* s[min(n - 1, int(f * n))]: n = 10 -> indexes 5 and 9. */
	CHECK_EQ_INT((int)lobby_dual_pick(v, 10, 0.5), 6);
	CHECK_EQ_INT((int)lobby_dual_pick(v, 10, 0.9), 10);
	CHECK_EQ_INT((int)lobby_dual_pick(v, 10, 1.0), 10);
	/* n = 3: int(1.5) = 1, int(2.7) = 2. */
	CHECK_EQ_INT((int)lobby_dual_pick(v, 3, 0.5), 2);
	CHECK_EQ_INT((int)lobby_dual_pick(v, 3, 0.9), 3);
	CHECK_EQ_INT((int)lobby_dual_pick(v, 2, 0.5), 2);
}

int main(void)
{
	test_switch();
	test_pick();
	return tap_done("lobbydual");
}
