/* SPDX-License-Identifier: MIT */
/*
 * fault.h - fault injection inside the service, for tests (docs/reliability.md): fabric
 * posts that return -FI_EAGAIN or fail, fabric CQ entries read back as
 * errors, io_uring submissions that consume nothing, io_uring completions
 * that carry -EIO or -EAGAIN, CUDA calls that fail. Each site fails at the
 * rate $DP_FAULTS gives it (parsed once by fault_init at start-up).
 *
 * Compiled in only with -DDP_FAULT_INJECT (`make FAULTS=1`, `make faults`).
 * In any other build every hook is the constant 0 (DP_FAULT_CUDA(call) is
 * the call itself) and fault_init/fault_usage are empty: a release binary
 * has no trace of this module.
 *
 * A hook is an expression at the call site, in place of the real call:
 *
 *	if (DP_FAULT(FI_POST_EAGAIN))
 *		rc = -FI_EAGAIN;
 *	else
 *		rc = fi_write(...);
 *
 * and the caller then takes the path a real failure of that kind takes. A
 * hit is decided by a per-thread xorshift generator (no shared cache line
 * on the hot path, no lock) and counted; the counts are logged at exit as
 * "faults injected: fi_post_eagain=N ..." (tests/fault_inject.c reads it).
 * docs/reliability.md, "Fault injection", is the user's view.
 */
#ifndef DP_FAULT_H
#define DP_FAULT_H

#include <stdbool.h>
#include <stdio.h>

enum fault_site {
	FAULT_FI_POST_EAGAIN, /* fi_write/fi_read returns -FI_EAGAIN, nothing posted */
	FAULT_FI_POST_FAIL,   /* fi_write/fi_read returns -FI_EIO, nothing posted */
	FAULT_FI_CQ_ERR,      /* a completion is read back as an error entry (FI_EIO) */
	FAULT_URING_SUBMIT,   /* io_uring_submit* fails: the kernel consumes no SQE */
	FAULT_URING_EIO,      /* a CQE's res is -EIO */
	FAULT_URING_EAGAIN,   /* a CQE's res is -EAGAIN (the read/write is issued again) */
	FAULT_CUDA,	      /* a CUDA call returns cudaErrorUnknown */
	FAULT_NSITES
};

#ifdef DP_FAULT_INJECT
#include <stdatomic.h>
#include <stdint.h>

/* Written by fault_init before any other thread starts, read-only after. */
extern uint64_t fault_threshold[FAULT_NSITES]; /* rate * 2^53; 0: the site is off */
extern atomic_ullong fault_injected[FAULT_NSITES];
extern __thread uint64_t fault_rng;
uint64_t fault_rng_seed(void);

static inline bool fault_hit(enum fault_site site)
{
	uint64_t x;

	if (!fault_threshold[site])
		return false;
	x = fault_rng ? fault_rng : fault_rng_seed();
	/* xorshift64* (Marsaglia, Vigna): plenty for a coin flip. */
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	fault_rng = x;
	if ((x * 0x2545f4914f6cdd1dull) >> 11 >= fault_threshold[site])
		return false;
	atomic_fetch_add_explicit(&fault_injected[site], 1, memory_order_relaxed);
	return true;
}

/* True when this call at @site is to fail; SITE is FI_POST_EAGAIN etc. */
#define DP_FAULT(site) fault_hit(FAULT_##site)
/*
 * CUDA, for calls that start work (cudaMemcpyAsync, cudaEventRecord): on a
 * hit the call is not made and the expression is cudaErrorUnknown, as if
 * the runtime had refused it; otherwise it is the call's own result.
 */
#define DP_FAULT_CUDA(call) (DP_FAULT(CUDA) ? cudaErrorUnknown : (call))
/*
 * CUDA, for calls that report finished work (cudaEventQuery): the call is
 * made, and a cudaSuccess becomes cudaErrorUnknown on a hit. The work is
 * then really done, so failing it releases no memory a DMA still uses.
 */
#define DP_FAULT_CUDA_DONE(call)                                                                   \
	__extension__({                                                                            \
		cudaError_t fault_err_ = (call);                                                   \
		(fault_err_ == cudaSuccess && DP_FAULT(CUDA)) ? cudaErrorUnknown : fault_err_;     \
	})

/* Start-up, before any thread: parses $DP_FAULTS; a bad spec exits 2. */
void fault_init(void);
/* The --help lines of a fault-injection build. */
void fault_usage(FILE *f);
#else
#define DP_FAULT(site) 0
#define DP_FAULT_CUDA(call) (call)
#define DP_FAULT_CUDA_DONE(call) (call)
static inline void fault_init(void)
{
}
static inline void fault_usage(FILE *f)
{
	(void)f;
}
#endif

#endif /* DP_FAULT_H */
