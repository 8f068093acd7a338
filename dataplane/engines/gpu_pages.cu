// SPDX-License-Identifier: MIT
// gpu_pages.cu - the page-batch copy kernel (gpu_pages.h). Built by nvcc
// only in CUDA builds: SASS for sm_80 and sm_90, PTX for later devices.
#include "gpu_pages.h"

#define PAGE_THREADS 256

// Copies page blockIdx.x of tab (both kernels). Each thread moves four
// 16-byte words per round, loads first, so that four loads are in flight
// before the first store.
__device__ __forceinline__ void page_copy(const struct gpu_page *__restrict__ tab)
{
	const struct gpu_page pg = tab[blockIdx.x];
	const unsigned char *__restrict__ src = (const unsigned char *)pg.src;
	unsigned char *__restrict__ dst = (unsigned char *)pg.dst;
	uint64_t len = pg.len, head, nvec;

	if (((pg.src ^ pg.dst) & 15) != 0) {
		// Misaligned against each other: no common 16-byte grid.
		for (uint64_t i = threadIdx.x; i < len; i += PAGE_THREADS)
			dst[i] = src[i];
		return;
	}
	head = (16 - (pg.src & 15)) & 15;
	if (head > len)
		head = len;
	if (threadIdx.x < head)
		dst[threadIdx.x] = src[threadIdx.x];
	src += head;
	dst += head;
	len -= head;
	nvec = len >> 4;
	{
		const uint4 *__restrict__ s4 = (const uint4 *)src;
		uint4 *__restrict__ d4 = (uint4 *)dst;
		uint64_t i = threadIdx.x;

		for (; i + 3 * PAGE_THREADS < nvec; i += 4 * PAGE_THREADS) {
			uint4 a = s4[i], b = s4[i + PAGE_THREADS], c = s4[i + 2 * PAGE_THREADS],
			      d = s4[i + 3 * PAGE_THREADS];

			d4[i] = a;
			d4[i + PAGE_THREADS] = b;
			d4[i + 2 * PAGE_THREADS] = c;
			d4[i + 3 * PAGE_THREADS] = d;
		}
		for (; i < nvec; i += PAGE_THREADS)
			d4[i] = s4[i];
	}
	if (threadIdx.x < (len & 15))
		dst[(nvec << 4) + threadIdx.x] = src[(nvec << 4) + threadIdx.x];
}

__global__ void __launch_bounds__(PAGE_THREADS)
	gpu_pages_kernel(const struct gpu_page *__restrict__ tab)
{
	page_copy(tab);
}

// The copy, then the signal: each block's stores are made visible to the
// device (fence) before it counts itself done; the block that counts last
// sees every other block's stores, makes them visible to the system and
// stores the flag, after putting the count back to 0 for the next launch.
__global__ void __launch_bounds__(PAGE_THREADS)
	gpu_pages_kernel_signal(const struct gpu_page *__restrict__ tab, unsigned n,
				unsigned *count, volatile uint32_t *flag, uint32_t seq)
{
	page_copy(tab);
	__syncthreads();
	if (threadIdx.x == 0) {
		__threadfence();
		if (atomicAdd(count, 1u) == n - 1) {
			*count = 0;
			__threadfence_system();
			*flag = seq;
		}
	}
}

extern "C" cudaError_t gpu_pages_launch_signal(const struct gpu_page *tab, unsigned n,
					       unsigned *count, volatile uint32_t *flag,
					       uint32_t seq, cudaStream_t s)
{
	if (!n)
		return cudaSuccess;
	// An error an earlier call left pending is not this launch's.
	(void)cudaGetLastError();
	gpu_pages_kernel_signal<<<n, PAGE_THREADS, 0, s>>>(tab, n, count, flag, seq);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_pages_launch(const struct gpu_page *tab, unsigned n, cudaStream_t s)
{
	if (!n)
		return cudaSuccess;
	(void)cudaGetLastError();
	gpu_pages_kernel<<<n, PAGE_THREADS, 0, s>>>(tab);
	return cudaGetLastError();
}
