/* ring_test.h - helpers shared by the ring suites: private rings, pinning, scaling, spinning. */
#ifndef RING_TEST_H
#define RING_TEST_H

#include "dp_ring.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/*
 * A ring formatted in private heap memory, allocated exactly
 * dp_ring_bytes() long so that ASan reports any access past its end.
 * Binds a producer and a consumer view; returns the memory (free() it) or
 * NULL.
 */
static inline void *ring_test_new(uint32_t entries, uint32_t entry_size, uint32_t start,
				  struct dp_ring *prod, struct dp_ring *cons)
{
	size_t bytes = dp_ring_bytes(entries, entry_size);
	void *mem = aligned_alloc(DP_RING_ALIGN, bytes);

	if (!mem)
		return NULL;
	if (dp_ring_format(mem, bytes, entries, entry_size, start) ||
	    dp_ring_bind(prod, mem, DP_RING_PRODUCER) ||
	    dp_ring_bind(cons, mem, DP_RING_CONSUMER)) {
		free(mem);
		return NULL;
	}
	return mem;
}

/* DP_STRESS_SCALE divides the long runs (the TSan build uses 50). */
static inline uint64_t ring_test_scaled(uint64_t n)
{
	const char *s = getenv("DP_STRESS_SCALE");
	long div = s && *s ? strtol(s, NULL, 10) : 1;

	if (div < 1)
		div = 1;
	n /= (uint64_t)div;
	return n ? n : 1;
}

/*
 * Pins the calling thread to the `nth` CPU it may run on. With fewer than
 * two CPUs there is nothing to separate the threads with, so it leaves the
 * thread alone and returns 0; 1 when pinned, -errno on error.
 */
static inline int ring_test_pin(int nth)
{
	cpu_set_t allowed, one;
	int seen = 0;

	if (sched_getaffinity(0, sizeof(allowed), &allowed))
		return -1;
	if (CPU_COUNT(&allowed) < 2)
		return 0;
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &allowed) || seen++ != nth)
			continue;
		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		return pthread_setaffinity_np(pthread_self(), sizeof(one), &one) ? -1 : 1;
	}
	return 0;
}

static inline void ring_test_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/*
 * One round of a spin-wait. After many empty rounds it yields: on a noisy
 * two-core machine (or one core) the thread we wait for may need our CPU.
 */
static inline void ring_test_spin(uint32_t *rounds)
{
	if (++*rounds % 1024 == 0)
		sched_yield();
	else
		ring_test_relax();
}

static inline double ring_test_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* xorshift64*: cheap, deterministic burst sizes. */
static inline uint64_t ring_test_rand(uint64_t *state)
{
	uint64_t x = *state;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545F4914F6CDD1Dull;
}

#endif /* RING_TEST_H */
