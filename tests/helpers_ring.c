/* SPDX-License-Identifier: MIT */
/*
 * helpers_ring.c - private rings of the ring_* suites, in heap memory
 * with no service, and the threads that race on them: pinning, spinning,
 * the run length scaled for slow builds.
 */
#include "helpers.h"

void *ring_test_new(uint32_t entries, uint32_t entry_size, uint32_t start, struct dp_ring *prod,
		    struct dp_ring *cons)
{
	return ring_test_new_seq(entries, entry_size, DP_RING_NO_SEQ, start, prod, cons);
}

void *ring_test_new_seq(uint32_t entries, uint32_t entry_size, uint32_t seq_off, uint32_t start,
			struct dp_ring *prod, struct dp_ring *cons)
{
	size_t bytes = dp_ring_bytes(entries, entry_size);
	void *mem = aligned_alloc(DP_RING_ALIGN, bytes);

	if (!mem)
		return NULL;
	if (dp_ring_format_seq(mem, bytes, entries, entry_size, seq_off, start) ||
	    dp_ring_bind(prod, mem, DP_RING_PRODUCER) ||
	    dp_ring_bind(cons, mem, DP_RING_CONSUMER)) {
		free(mem);
		return NULL;
	}
	return mem;
}

uint64_t ring_test_scaled(uint64_t n)
{
	const char *s = getenv("DP_STRESS_SCALE");
	long div = s && *s ? strtol(s, NULL, 10) : 1;

	if (div < 1)
		div = 1;
	n /= (uint64_t)div;
	return n ? n : 1;
}

int ring_test_pin(int nth)
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

void ring_test_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

void ring_test_spin(uint32_t *rounds)
{
	if (++*rounds % 1024 == 0)
		sched_yield();
	else
		ring_test_relax();
}

double ring_test_now(void)
{
	return (double)now_ns() * 1e-9;
}
