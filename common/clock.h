/* SPDX-License-Identifier: MIT */
/*
 * clock.h - the one clock helper of the tree: CLOCK_MONOTONIC (or any
 * clock) as nanoseconds or milliseconds. Header-only and internal: the
 * service, libclient and the tools include it; nothing here is exported
 * from libdataplane.so.
 */
#ifndef DP_COMMON_CLOCK_H
#define DP_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* A clock as nanoseconds (CLOCK_MONOTONIC_COARSE where a cheap, coarse
 * reading is enough, CLOCK_REALTIME for wall-clock stamps). */
static inline uint64_t dp_clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC in nanoseconds: timestamps, intervals, deadlines. */
static inline uint64_t dp_now_ns(void)
{
	return dp_clock_ns(CLOCK_MONOTONIC);
}

/* CLOCK_MONOTONIC in milliseconds: timers and backoffs. */
static inline uint64_t dp_now_ms(void)
{
	return dp_now_ns() / 1000000u;
}

#endif /* DP_COMMON_CLOCK_H */
