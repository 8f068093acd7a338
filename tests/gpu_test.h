/* SPDX-License-Identifier: MIT */
/*
 * gpu_test.h - helpers of the gpu_* suites: a service per test (local
 * transfers only), GPU buffers filled with the fixture's pattern, and
 * descriptors run to completion. Every GPU test starts with GPU_REQUIRE(),
 * which skips it when the build has no CUDA or the machine no device.
 *
 * A test that forks a process which uses CUDA must fork before its own
 * first CUDA call (a CUDA context does not survive fork): such tests check
 * for a device with gpu_count() only after forking.
 */
#ifndef DP_TEST_GPU_TEST_H
#define DP_TEST_GPU_TEST_H

#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dataplane.h"
#include "fixture.h"

#ifdef DP_HAVE_CUDA
#include <cuda_runtime_api.h>

#define MiB (1ull << 20)
#define GPU_FLAGS (DP_CQE_F_LOCAL | DP_CQE_F_GPU)

static struct svc gsvc;
static const char *const gpu_svc_args[] = {"--provider", "none", NULL};

/* .fini of every GPU test: no service outlives a failed test. */
static inline void gpu_teardown(void)
{
	svc_kill(&gsvc);
}

static inline int gpu_count(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess)
		n = 0;
	return n;
}

#define GPU_REQUIRE()                                                                              \
	do {                                                                                       \
		if (gpu_count() <= 0)                                                              \
			cr_skip_test("no CUDA device on this machine");                            \
	} while (0)

#define CK(call)                                                                                   \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		cr_assert_eq(e_, cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));            \
	} while (0)

static inline uint64_t gpu_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void gpu_start_service(void)
{
	int rc = svc_start(&gsvc, gpu_svc_args);

	cr_assert_eq(rc, 0, "svc_start: %s", strerror(-rc));
}

static inline void gpu_stop_service(void)
{
	int rc = svc_stop(&gsvc);

	cr_assert_eq(rc, 0, "dataplaned exit status %d, want 0", rc);
}

static inline struct dp_client *gpu_connect(const char *name)
{
	struct dp_client *c = NULL;
	int rc = dp_connect(gsvc.sock, name, &c);

	cr_assert_eq(rc, 0, "dp_connect: %s", dp_strerror(rc));
	return c;
}

static inline struct dp_queue *gpu_queue(struct dp_client *c, uint32_t depth)
{
	struct dp_queue *q = NULL;
	int rc = dp_queue_create(c, depth, &q);

	cr_assert_eq(rc, 0, "dp_queue_create: %s", dp_strerror(rc));
	return q;
}

/* cudaMemset, finished: the service's copies run in another process, so
 * GPU work of ours must be complete before a descriptor names its memory. */
static inline void gpu_memset(void *d, int v, size_t len)
{
	CK(cudaMemset(d, v, len));
	CK(cudaDeviceSynchronize());
}

/* cudaMalloc'ed and filled: the pattern of @seed, or zeros when seed < 0. */
static inline void *gpu_buf(size_t len, int64_t seed)
{
	void *d = NULL, *h;

	CK(cudaMalloc(&d, len));
	if (seed < 0) {
		gpu_memset(d, 0, len);
		return d;
	}
	h = malloc(len);
	cr_assert(h);
	pattern_fill(h, len, (uint64_t)seed);
	CK(cudaMemcpy(d, h, len, cudaMemcpyHostToDevice));
	/* From pageable memory the call may return before the DMA is done. */
	CK(cudaDeviceSynchronize());
	free(h);
	return d;
}

/* Reads @len bytes of GPU memory at @d and checks that byte i holds the
 * pattern byte (seed, src_off + i); zeros when seed < 0. */
static inline void gpu_expect(const void *d, size_t len, int64_t seed, uint64_t src_off,
			      const char *what)
{
	uint8_t *h = malloc(len);

	cr_assert(h);
	CK(cudaMemcpy(h, d, len, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < len; i++) {
		uint8_t want = seed < 0 ? 0 : pattern_byte((uint64_t)seed, src_off + i);

		if (h[i] != want) {
			uint8_t got = h[i];

			free(h);
			cr_assert_fail("%s: byte %zu is 0x%02x, want 0x%02x", what, i, got, want);
		}
	}
	free(h);
}

static inline int gpu_register(struct dp_client *c, void *ptr, size_t len)
{
	int r = dp_register_cuda(c, ptr, len);

	cr_assert_geq(r, 0, "dp_register_cuda(%zu bytes): %s", len, dp_strerror(r));
	return r;
}

/* Registers and exports @ptr as segment @name and opens it RW. */
static inline int gpu_segment(struct dp_client *c, int region, const char *name)
{
	int rc = dp_segment_export(c, region, name, DP_ACCESS_RW);

	cr_assert_eq(rc, 0, "dp_segment_export(%s): %s", name, dp_strerror(rc));
	rc = dp_segment_open(c, NULL, name, DP_ACCESS_RW);
	cr_assert_geq(rc, 0, "dp_segment_open(%s): %s", name, dp_strerror(rc));
	return rc;
}

/*
 * Submits @n descriptors (user_data must be 0..n-1) and reaps their
 * completions into out[user_data]; each must come exactly once, within
 * @timeout_ms overall.
 */
static inline void gpu_run(struct dp_queue *q, const struct dp_desc *d, unsigned n,
			   struct dp_cqe *out, int timeout_ms)
{
	unsigned sent = 0, got = 0;
	uint64_t deadline = gpu_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	unsigned char *seen = calloc(n, 1);
	struct dp_cqe cq[64];

	cr_assert(seen);
	while (got < n) {
		if (sent < n) {
			int k = dp_submit(q, d + sent, n - sent);

			cr_assert_geq(k, 0, "dp_submit: %s", dp_strerror(k));
			sent += (unsigned)k;
		}
		int k = dp_wait(q, cq, 64, 100);

		cr_assert_geq(k, 0, "dp_wait: %s", dp_strerror(k));
		for (int i = 0; i < k; i++) {
			uint64_t ud = cq[i].user_data;

			cr_assert_lt(ud, n, "unknown user_data %llu", (unsigned long long)ud);
			cr_assert(!seen[ud], "two completions for descriptor %llu",
				  (unsigned long long)ud);
			seen[ud] = 1;
			out[ud] = cq[i];
			got++;
		}
		cr_assert_lt(gpu_now_ns(), deadline, "%u of %u completions after %d ms", got, n,
			     timeout_ms);
	}
	free(seen);
}

/* One descriptor, which must succeed through the GPU path. */
static inline void gpu_run_one_ok(struct dp_queue *q, const struct dp_desc *d)
{
	struct dp_cqe cqe;

	gpu_run(q, d, 1, &cqe, 30000);
	cr_assert_eq(cqe.status, 0, "status %d (%s)", cqe.status, dp_strerror(cqe.status));
	cr_assert_eq(cqe.bytes, d->len, "bytes %llu, want %llu", (unsigned long long)cqe.bytes,
		     (unsigned long long)d->len);
	cr_assert_eq(cqe.flags, GPU_FLAGS, "flags 0x%x, want LOCAL|GPU", cqe.flags);
}

#endif /* DP_HAVE_CUDA */
#endif /* DP_TEST_GPU_TEST_H */
