/* SPDX-License-Identifier: MIT */
/* gpu_vm.c - memory a client registered with dp_register_mem (the vm
 * engine: process_vm_readv/writev) with GPU memory on the other side,
 * through the poller's pinned buffers: GPU -> registered memory and back,
 * WRITE and READ, in one service (either side the export) and into another
 * service's client of this host (checkpoint-engine's read of a peer's
 * pinned pool into a GPU tensor), 1 B to 8 MiB + 5 (several slices), 32 in
 * flight, every byte checked. Self-skipping without a GPU. */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#ifdef DP_HAVE_CUDA

TestSuite(gpu_vm, .fini = fab_teardown, .timeout = 300);

#define VM_LEN ((size_t)8 << 20)
#define VM_SPAN (VM_LEN + 4096)

static const uint64_t vm_lens[] = {1, 4097, 256 * 1024 + 3, VM_LEN + 5};

/* Host memory of this process, registered with dp_register_mem: zeros, or
 * the pattern of @seed. */
static int vm_region(struct dp_client *c, uint8_t **mem, int64_t seed)
{
	int r;

	cr_assert_eq(posix_memalign((void **)mem, 4096, VM_SPAN), 0);
	if (seed < 0)
		memset(*mem, 0, VM_SPAN);
	else
		pattern_fill(*mem, VM_SPAN, (uint64_t)seed);
	r = dp_register_mem(c, *mem, VM_SPAN);
	cr_assert_geq(r, 0, "dp_register_mem: %s", dp_strerror(r));
	return r;
}

static void vm_run_ok(struct dp_queue *q, const struct dp_desc *d, unsigned n, uint32_t flags,
		      const char *what)
{
	struct dp_cqe c[32];

	run_batch(q, d, n, c, 30000);
	for (unsigned i = 0; i < n; i++) {
		cr_assert_eq(c[i].status, 0, "%s: %s", what, dp_strerror(c[i].status));
		cr_assert_eq(c[i].bytes, d[i].len, "%s: %llu bytes", what,
			     (unsigned long long)c[i].bytes);
		cr_assert_eq(c[i].flags & (DP_CQE_F_LOCAL | DP_CQE_F_SAME_HOST | DP_CQE_F_GPU |
					   DP_CQE_F_FABRIC),
			     flags, "%s: flags %#x, want %#x", what, c[i].flags, flags);
	}
}

/* Host bytes [0, len) at @h hold the pattern of @seed from @off, the rest
 * of the span zeros. */
static void host_expect(const uint8_t *h, uint64_t len, uint64_t seed, uint64_t off,
			const char *what)
{
	for (uint64_t i = 0; i < VM_SPAN; i++) {
		uint8_t want = i < len ? pattern_byte(seed, off + i) : 0;

		cr_assert_eq(h[i], want, "%s, %llu B: byte %llu is %#x, want %#x", what,
			     (unsigned long long)len, (unsigned long long)i, h[i], want);
	}
}

/* @seg: an export of registered host memory @h (owned by a client of the
 * service @q's client is on, or of another one); @greg/@g: a GPU region of
 * @q's client. WRITE GPU -> @h, READ @h -> GPU, each length alone, then
 * 32 of 64 KiB in flight at scattered places. */
static void gpu_to_vm(struct dp_queue *q, int greg, void *g, int seg, uint8_t *h, uint32_t flags)
{
	struct dp_desc d[32];

	for (unsigned i = 0; i < sizeof(vm_lens) / sizeof(vm_lens[0]); i++) {
		uint64_t len = vm_lens[i];

		memset(h, 0, VM_SPAN);
		gpu_memset(g, 0, VM_SPAN);
		{
			void *src = gpu_buf(VM_SPAN, 70 + i);

			CK(cudaMemcpy(g, src, VM_SPAN, cudaMemcpyDeviceToDevice));
			CK(cudaDeviceSynchronize());
			CK(cudaFree(src));
		}
		dp_prep_write(&d[0], greg, 0, seg, 0, len, i);
		vm_run_ok(q, d, 1, flags, "WRITE GPU -> registered");
		host_expect(h, len, 70 + i, 0, "WRITE GPU -> registered");
		/* READ it back, 3 bytes in, into zeroed GPU memory; nothing
		 * around it written. */
		gpu_memset(g, 0, VM_SPAN);
		dp_prep_read(&d[0], greg, 3, seg, 0, len, i);
		vm_run_ok(q, d, 1, flags, "READ registered -> GPU");
		gpu_expect((uint8_t *)g + 3, len, 70 + i, 0, "READ registered -> GPU");
		gpu_expect(g, 3, -1, 0, "READ: the bytes before");
		gpu_expect((uint8_t *)g + 3 + len, VM_SPAN - 3 - len, -1, 0,
			   "READ: the bytes after");
	}
	/* 32 in flight: GPU page k to registered slot (k * 7) % 32, then READ
	 * back, slot (k * 7) % 32 to GPU page k of zeroed GPU memory. */
	pattern_fill(h, VM_SPAN, 99);
	{
		void *src = gpu_buf(VM_SPAN, 98);

		CK(cudaMemcpy(g, src, VM_SPAN, cudaMemcpyDeviceToDevice));
		CK(cudaDeviceSynchronize());
		CK(cudaFree(src));
	}
	for (unsigned k = 0; k < 32; k++)
		dp_prep_write(&d[k], greg, (uint64_t)k << 16, seg, (uint64_t)((k * 7) % 32) << 16,
			      65536, k);
	vm_run_ok(q, d, 32, flags, "32 WRITEs in flight");
	for (unsigned k = 0; k < 32; k++)
		for (uint64_t i = 0; i < 65536; i++)
			if (h[((uint64_t)((k * 7) % 32) << 16) + i] !=
			    pattern_byte(98, ((uint64_t)k << 16) + i))
				cr_assert_fail("32 in flight: page %u byte %llu", k,
					       (unsigned long long)i);
	gpu_memset(g, 0, VM_SPAN);
	for (unsigned k = 0; k < 32; k++)
		dp_prep_read(&d[k], greg, (uint64_t)k << 16, seg, (uint64_t)((k * 7) % 32) << 16,
			     65536, k);
	vm_run_ok(q, d, 32, flags, "32 READs in flight");
	gpu_expect(g, (size_t)32 << 16, 98, 0, "32 READs in flight");
}

/* One service: a GPU region and a registered export of the same client,
 * either way round (the export registered memory, or the export GPU
 * memory and the local region registered memory). */
Test(gpu_vm, registered_memory_and_gpu_in_one_service)
{
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	uint8_t *h;
	void *g;
	int hreg, greg, seg;

	GPU_REQUIRE();
	start_svc(&fab_svc[0], local_only);
	c = connect_client(&fab_svc[0], "gpu-vm");
	q = make_queue(c, 64);
	hreg = vm_region(c, &h, -1);
	greg = gpu_region(c, VM_SPAN, -1, &g);
	export_segment(c, hreg, "vm-host", DP_ACCESS_RW);
	seg = open_segment(c, NULL, "vm-host", DP_ACCESS_RW);
	gpu_to_vm(q, greg, g, seg, h, DP_CQE_F_LOCAL | DP_CQE_F_GPU);
	/* The other way round: the GPU region exported, registered memory
	 * local; WRITE registered -> GPU. */
	export_segment(c, greg, "vm-gpu", DP_ACCESS_RW);
	seg = open_segment(c, NULL, "vm-gpu", DP_ACCESS_RW);
	pattern_fill(h, VM_SPAN, 77);
	gpu_memset(g, 0, VM_SPAN);
	dp_prep_write(&d, hreg, 5, seg, 0, VM_LEN, 1);
	vm_run_ok(q, &d, 1, DP_CQE_F_LOCAL | DP_CQE_F_GPU, "WRITE registered -> GPU export");
	gpu_expect(g, VM_LEN, 77, 5, "WRITE registered -> GPU export");
	dp_close(c);
	CK(cudaFree(g));
	free(h);
}

/* Two services of this host: B's client registers its host memory (a
 * pinned pool, for checkpoint-engine) and exports it; A's client moves it
 * to and from its GPU memory (the same-host path: B's client's pidfd). */
Test(gpu_vm, registered_memory_of_another_service)
{
	struct fab_pair p;
	struct dp_queue *q;
	uint8_t *h;
	void *g;
	int hreg, greg, seg;

	GPU_REQUIRE();
	fab_pair_start(&p, "tcp", FAB_PAIR_SAME_A | FAB_PAIR_SAME_B, NULL, NULL);
	hreg = vm_region(p.cb, &h, -1);
	CK(cudaHostRegister(h, VM_SPAN, cudaHostRegisterDefault)); /* as a pinned pool is */
	export_segment(p.cb, hreg, "vm-peer", DP_ACCESS_RW);
	seg = open_segment(p.ca, p.peer_b, "vm-peer", DP_ACCESS_RW);
	q = make_queue(p.ca, 64);
	greg = gpu_region(p.ca, VM_SPAN, -1, &g);
	gpu_to_vm(q, greg, g, seg, h, DP_CQE_F_SAME_HOST | DP_CQE_F_GPU);
	dp_close(p.ca);
	dp_close(p.cb);
	CK(cudaHostUnregister(h));
	CK(cudaFree(g));
	free(h);
}

#else

Test(gpu_vm, GpuVm)
{
	cr_skip_test("built without CUDA");
}

#endif /* DP_HAVE_CUDA */
