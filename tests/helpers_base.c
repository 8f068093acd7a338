/* SPDX-License-Identifier: MIT */
/*
 * helpers_base.c - what the other helper files and the ring suites stand
 * on: the clock, patterned bytes and the checks of them (with the guard
 * bytes around a transfer), cheap deterministic numbers, removing a
 * scratch directory.
 */
#include <ftw.h>

#include "clock.h"
#include "helpers.h"

uint64_t now_ns(void)
{
	return dp_now_ns();
}

void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

uint8_t pattern_byte(uint64_t seed, uint64_t off)
{
	uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull ^ (off >> 3) * 0xbf58476d1ce4e5b9ull;

	return (uint8_t)((x >> 29) + off);
}

void pattern_fill(void *buf, uint64_t len, uint64_t seed)
{
	uint8_t *p = buf;

	for (uint64_t i = 0; i < len; i++)
		p[i] = pattern_byte(seed, i);
}

int64_t pattern_check(const void *buf, uint64_t len, uint64_t seed)
{
	const uint8_t *p = buf;

	for (uint64_t i = 0; i < len; i++)
		if (p[i] != pattern_byte(seed, i))
			return (int64_t)i;
	return -1;
}

void fab_check(const uint8_t *p, uint64_t len, uint64_t seed, const uint8_t *lo, const uint8_t *hi,
	       uint8_t guard, const char *what)
{
	int64_t bad = pattern_check(p, len, seed);

	cr_assert_eq(bad, -1, "%s of %llu B: first wrong byte at %lld", what,
		     (unsigned long long)len, (long long)bad);
	for (const uint8_t *g = p - 64; g < p; g++)
		if (g >= lo)
			cr_assert_eq(*g, guard, "%s: byte %lld before the range overwritten", what,
				     (long long)(g - p));
	for (const uint8_t *g = p + len; g < p + len + 64; g++)
		if (g < hi)
			cr_assert_eq(*g, guard, "%s: byte %lld after the range overwritten", what,
				     (long long)(g - p - len));
}

uint64_t xorshift64s(uint64_t *state)
{
	uint64_t x = *state;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545F4914F6CDD1Dull;
}

uint64_t xorshift64(uint64_t *state)
{
	*state ^= *state << 13;
	*state ^= *state >> 7;
	*state ^= *state << 17;
	return *state;
}

int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

void guard_fill(uint8_t *buf, uint64_t buf_len, uint64_t off, uint64_t len)
{
	uint64_t lo = off >= 64 ? off - 64 : 0, hi = off + len + 64;

	memset(buf + lo, 0x5a, (hi < buf_len ? hi : buf_len) - lo);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int remove_tree(const char *dir)
{
	return nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}
