/* SPDX-License-Identifier: MIT */
/*
 * helpers_gpu.c - GPU buffers of the gpu_* suites (CUDA builds only):
 * filled with a pattern, checked, registered with a client; descriptors
 * that must take the GPU path.
 */
#include "helpers.h"

#ifdef DP_HAVE_CUDA
int gpu_count(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess)
		n = 0;
	return n;
}

void gpu_memset(void *d, int v, size_t len)
{
	CK(cudaMemset(d, v, len));
	CK(cudaDeviceSynchronize());
}

void *gpu_buf(size_t len, int64_t seed)
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

void gpu_expect(const void *d, size_t len, int64_t seed, uint64_t src_off, const char *what)
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

int gpu_register(struct dp_client *c, void *ptr, size_t len)
{
	int r = dp_register_cuda(c, ptr, len);

	cr_assert_geq(r, 0, "dp_register_cuda(%zu bytes): %s", len, dp_strerror(r));
	return r;
}

void gpu_run_one_ok(struct dp_queue *q, const struct dp_desc *d)
{
	struct dp_cqe cqe;

	run_batch(q, d, 1, &cqe, 30000);
	cr_assert_eq(cqe.status, 0, "status %d (%s)", cqe.status, dp_strerror(cqe.status));
	cr_assert_eq(cqe.bytes, d->len, "bytes %llu, want %llu", (unsigned long long)cqe.bytes,
		     (unsigned long long)d->len);
	cr_assert_eq(cqe.flags, GPU_FLAGS, "flags 0x%x, want LOCAL|GPU", cqe.flags);
}

void gpu_run_one_fails(struct dp_queue *q, const struct dp_desc *d, int status, int timeout_ms,
		       const char *what)
{
	struct dp_cqe cqe;

	run_batch(q, d, 1, &cqe, timeout_ms);
	cr_assert_eq(cqe.status, status, "%s: status %d (%s), want %d (%s)", what, cqe.status,
		     dp_strerror(cqe.status), status, dp_strerror(status));
}

int gpu_region(struct dp_client *c, size_t len, int64_t seed, void *addr)
{
	void *p = gpu_buf(len, seed);

	*(void **)addr = p;
	return gpu_register(c, p, len);
}
#endif /* DP_HAVE_CUDA */
