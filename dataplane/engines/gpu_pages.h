/* SPDX-License-Identifier: MIT */
/*
 * gpu_pages.h - one kernel that copies a batch of pages between GPU memory
 * of one device (gpu_pages.cu, built only with CUDA): the gpu engine's
 * batches of small GPU <-> GPU copies (gpu_cuda.c), and gpu-bench's raw peer.
 * C and C++ alike.
 */
#ifndef DP_GPU_PAGES_H
#define DP_GPU_PAGES_H

#include <stdint.h>

#include <cuda_runtime_api.h>

/* One page of a batch: device addresses (a CUDA IPC or VMM mapping of
 * another process counts), any alignment, any length. 24 bytes. */
struct gpu_page {
	uint64_t src, dst, len;
};

#ifdef __cplusplus
extern "C" {
#endif

/* Launches the copy of the @n pages of @tab (memory the device can read:
 * pinned host memory mapped with cudaHostAlloc, or device memory; read by
 * the kernel, so it must stay until the stream passed it) on @s, one thread
 * block per page: 16-byte loads and stores where source and destination
 * agree modulo 16, bytes for the head and the tail, bytes throughout where
 * they do not. Returns the launch's error (cudaSuccess: queued). */
cudaError_t gpu_pages_launch(const struct gpu_page *tab, unsigned n, cudaStream_t s);

/*
 * The same, and once every page's bytes are in place for the whole device,
 * the kernel itself stores @seq into *@flag (pinned, mapped host memory:
 * the host polls it with a plain load, no CUDA call). @count is a word of
 * device memory, 0 before the launch and 0 again after it: each block
 * counts itself done there, and the last one stores the flag (the
 * threadfence-reduction pattern). One launch at a time may use @count.
 */
cudaError_t gpu_pages_launch_signal(const struct gpu_page *tab, unsigned n, unsigned *count,
				    volatile uint32_t *flag, uint32_t seq, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif /* DP_GPU_PAGES_H */
