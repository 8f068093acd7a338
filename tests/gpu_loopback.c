/* SPDX-License-Identifier: MIT */
/* gpu_loopback.c - GPU memory through one service: GPU <-> GPU and host <-> GPU
 * local copies, both opcodes, batches, interior pointers, bounds. */
#include "helpers.h"

#ifdef DP_HAVE_CUDA

TestSuite(gpu, .fini = svc_teardown, .timeout = 120);

/* Same-service GPU -> GPU WRITE of 4 MiB. */
Test(gpu, GpuLoopbackWrite)
{
	const size_t len = 4 * MiB;
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	void *src, *dst;
	int rs, rd, seg;

	GPU_REQUIRE();
	start_svc(&svc, local_only);
	c = connect_client(&svc, "gpu-write");
	q = make_queue(c, 0);
	rs = gpu_region(c, len, 1, &src);
	rd = gpu_region(c, len, -1, &dst);
	seg = export_open(c, rd, "gpu-dst", DP_ACCESS_RW, DP_ACCESS_RW);
	dp_prep_write(&d, rs, 0, seg, 0, len, 0);
	gpu_run_one_ok(q, &d);
	gpu_expect(dst, len, 1, 0, "destination after WRITE");
	gpu_expect(src, len, 1, 0, "source after WRITE");
	dp_close(c);
	CK(cudaFree(src));
	CK(cudaFree(dst));
	stop_svc(&svc);
}

/* WRITE A -> B, then READ B -> C: both directions of the engine, three
 * distinct GPU buffers, at offsets. */
Test(gpu, GpuLoopbackWriteThenRead)
{
	const size_t len = 8 * MiB, n = 3 * MiB + 4096 + 7;
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	void *a, *b, *cbuf;
	int ra, rb, rc_, seg;

	GPU_REQUIRE();
	start_svc(&svc, local_only);
	c = connect_client(&svc, "gpu-write-read");
	q = make_queue(c, 0);
	ra = gpu_region(c, len, 2, &a);
	rb = gpu_region(c, len, -1, &b);
	rc_ = gpu_region(c, len, -1, &cbuf);
	seg = export_open(c, rb, "gpu-b", DP_ACCESS_RW, DP_ACCESS_RW);

	dp_prep_write(&d, ra, 1000, seg, 2 * MiB, n, 0);
	gpu_run_one_ok(q, &d);
	gpu_expect((uint8_t *)b + 2 * MiB, n, 2, 1000, "B after WRITE");
	gpu_expect(b, 2 * MiB, -1, 0, "B before the written range");

	dp_prep_read(&d, rc_, 4 * MiB + 1, seg, 2 * MiB, n, 0);
	gpu_run_one_ok(q, &d);
	gpu_expect((uint8_t *)cbuf + 4 * MiB + 1, n, 2, 1000, "C after READ");
	gpu_expect(cbuf, 4 * MiB + 1, -1, 0, "C before the read range");
	dp_close(c);
	CK(cudaFree(a));
	CK(cudaFree(b));
	CK(cudaFree(cbuf));
	stop_svc(&svc);
}

/* 64 WRITEs of 4 KiB .. 4 MiB (both of the poller's streams) in one
 * dp_submit; every completion once, every byte in place. */
Test(gpu, GpuLoopbackMultiWrite)
{
	enum { N = 64 };
	struct dp_desc d[N];
	struct dp_cqe cqe[N];
	uint64_t off[N + 1];
	struct dp_client *c;
	struct dp_queue *q;
	void *src, *dst;
	int rs, rd, seg;

	GPU_REQUIRE();
	off[0] = 0;
	for (int i = 0; i < N; i++)
		off[i + 1] = off[i] + (4096ull << (i % 11)) + 64;
	start_svc(&svc, local_only);
	c = connect_client(&svc, "gpu-multi");
	q = make_queue(c, 128);
	rs = gpu_region(c, off[N], 3, &src);
	rd = gpu_region(c, off[N], -1, &dst);
	seg = export_open(c, rd, "gpu-multi", DP_ACCESS_RW, DP_ACCESS_RW);
	/* The 64-byte gaps between the ranges stay zero. */
	for (int i = 0; i < N; i++)
		dp_prep_write(&d[i], rs, off[i], seg, off[i], off[i + 1] - off[i] - 64,
			      (uint64_t)i);
	cr_assert_eq(dp_submit(q, d, N), N, "one dp_submit takes all 64");
	{
		unsigned got = 0;
		unsigned char seen[N] = {0};
		struct dp_cqe cq[N];
		uint64_t deadline = now_ns() + 30000000000ull;

		while (got < N) {
			int k = dp_wait(q, cq, N, 100);

			cr_assert_geq(k, 0, "dp_wait: %s", dp_strerror(k));
			for (int i = 0; i < k; i++) {
				cr_assert_lt(cq[i].user_data, (uint64_t)N);
				cr_assert(!seen[cq[i].user_data], "duplicate completion");
				seen[cq[i].user_data] = 1;
				cqe[cq[i].user_data] = cq[i];
			}
			got += (unsigned)k;
			cr_assert_lt(now_ns(), deadline, "%u of 64 completions", got);
		}
	}
	for (int i = 0; i < N; i++) {
		cr_assert_eq(cqe[i].status, 0, "descriptor %d: %s", i, dp_strerror(cqe[i].status));
		cr_assert_eq(cqe[i].bytes, d[i].len);
		cr_assert_eq(cqe[i].flags, GPU_FLAGS);
	}
	{
		uint8_t *h = malloc(off[N]);

		cr_assert(h);
		CK(cudaMemcpy(h, dst, off[N], cudaMemcpyDeviceToHost));
		for (int i = 0; i < N; i++) {
			int64_t bad = -1;

			for (uint64_t j = off[i]; bad == -1 && j < off[i + 1] - 64; j++)
				if (h[j] != pattern_byte(3, j))
					bad = (int64_t)j;
			cr_assert_eq(bad, -1, "write %d: byte %lld wrong", i, (long long)bad);
			for (uint64_t j = off[i + 1] - 64; j < off[i + 1]; j++)
				cr_assert_eq(h[j], 0, "gap after write %d touched", i);
		}
		free(h);
	}
	dp_close(c);
	CK(cudaFree(src));
	CK(cudaFree(dst));
	stop_svc(&svc);
}

/* Host <-> GPU, both directions, both opcodes: H2D and D2H WRITEs, H2D and
 * D2H READs, between dp_alloc memory (pinned by the service) and GPU
 * memory. */
Test(gpu, GpuHostDeviceBothDirections)
{
	const size_t len = 8 * MiB;
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	uint8_t *hsrc, *hdst;
	void *gsrc, *gdst;
	int rhs, rhd, rgs, rgd, seg_hd, seg_gd;

	GPU_REQUIRE();
	start_svc(&svc, local_only);
	c = connect_client(&svc, "gpu-host");
	q = make_queue(c, 0);
	rhs = dp_alloc(c, len, 0, (void **)&hsrc);
	rhd = dp_alloc(c, len, 0, (void **)&hdst);
	cr_assert_geq(rhs, 0);
	cr_assert_geq(rhd, 0);
	pattern_fill(hsrc, len, 4);
	memset(hdst, 0, len);
	rgs = gpu_region(c, len, 5, &gsrc);
	rgd = gpu_region(c, len, -1, &gdst);
	seg_hd = export_open(c, rhd, "host-dst", DP_ACCESS_RW, DP_ACCESS_RW);
	seg_gd = export_open(c, rgd, "gpu-dst", DP_ACCESS_RW, DP_ACCESS_RW);

	/* WRITE host -> GPU. */
	dp_prep_write(&d, rhs, 0, seg_gd, 0, len, 0);
	gpu_run_one_ok(q, &d);
	gpu_expect(gdst, len, 4, 0, "GPU after host -> GPU WRITE");

	/* WRITE GPU -> host. */
	dp_prep_write(&d, rgs, 0, seg_hd, 0, len, 0);
	gpu_run_one_ok(q, &d);
	cr_assert_eq(pattern_check(hdst, len, 5), -1, "host after GPU -> host WRITE");

	/* READ GPU segment -> host region. */
	memset(hsrc, 0, len);
	dp_prep_read(&d, rhs, 0, seg_gd, 0, len, 0);
	gpu_run_one_ok(q, &d);
	cr_assert_eq(pattern_check(hsrc, len, 4), -1, "host after READ from GPU");

	/* READ host segment -> GPU region. */
	gpu_memset(gsrc, 0, len);
	dp_prep_read(&d, rgs, 0, seg_hd, 0, len, 0);
	gpu_run_one_ok(q, &d);
	gpu_expect(gsrc, len, 5, 0, "GPU after READ from host");
	dp_close(c);
	CK(cudaFree(gsrc));
	CK(cudaFree(gdst));
	stop_svc(&svc);
}

/* A pointer inside an allocation: the service must honour its offset, and
 * bytes outside the registered range must stay untouched. */
Test(gpu, GpuInteriorPointer)
{
	const size_t len = 8 * MiB, off = MiB + 3, n = 2 * MiB;
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	uint8_t *src, *dst;
	int rs, rd, seg, r;

	GPU_REQUIRE();
	start_svc(&svc, local_only);
	c = connect_client(&svc, "gpu-interior");
	q = make_queue(c, 0);
	src = gpu_buf(len, 6);
	dst = gpu_buf(len, -1);
	rs = gpu_register(c, src + off, n);
	rd = gpu_register(c, dst + 2 * off, n);
	seg = export_open(c, rd, "gpu-interior", DP_ACCESS_RW, DP_ACCESS_RW);
	dp_prep_write(&d, rs, 0, seg, 0, n, 0);
	gpu_run_one_ok(q, &d);
	gpu_expect(dst + 2 * off, n, 6, off, "interior destination");
	gpu_expect(dst, 2 * off, -1, 0, "bytes before the registered range");
	gpu_expect(dst + 2 * off + n, len - 2 * off - n, -1, 0, "bytes after it");
	/* The region is n bytes: one byte more is out of bounds. */
	dp_prep_write(&d, rs, 0, seg, 1, n, 0);
	gpu_run_one_fails(q, &d, -EFAULT, 10000, "one byte past the region");
	/* A range that leaves the allocation is refused at registration. */
	r = dp_register_cuda(c, src + off, len - off + 1);
	cr_assert_eq(r, -EINVAL, "registration past the allocation: %d", r);
	dp_close(c);
	CK(cudaFree(src));
	CK(cudaFree(dst));
	stop_svc(&svc);
}

/* What dp_register_cuda refuses, and a freed GPU region's handle. */
Test(gpu, GpuRegisterErrors)
{
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	void *g, *managed, *pinned, *host;
	int r, rg, seg;

	GPU_REQUIRE();
	start_svc(&svc, local_only);
	c = connect_client(&svc, "gpu-errors");
	q = make_queue(c, 0);
	host = malloc(4096);
	CK(cudaMallocHost(&pinned, 4096));
	CK(cudaMallocManaged(&managed, 4096, cudaMemAttachGlobal));
	cr_assert_eq(dp_register_cuda(c, host, 4096), -EINVAL, "malloc memory");
	cr_assert_eq(dp_register_cuda(c, pinned, 4096), -EINVAL, "cudaMallocHost memory");
	cr_assert_eq(dp_register_cuda(c, managed, 4096), -EINVAL, "managed memory");
	cr_assert_eq(dp_register_cuda(c, NULL, 4096), -EINVAL, "NULL");
	g = gpu_buf(MiB, 7);
	cr_assert_eq(dp_register_cuda(c, g, 0), -EINVAL, "zero length");
	rg = gpu_register(c, g, MiB);
	seg = export_open(c, rg, "gpu-errors", DP_ACCESS_RW, DP_ACCESS_RW);
	/* Deregistered: the handle is gone and its export with it. */
	cr_assert_eq(dp_free(c, rg), 0);
	dp_prep_write(&d, rg, 0, seg, 0, 4096, 0);
	gpu_run_one_fails(q, &d, -EBADF, 10000, "a WRITE after dp_free");
	/* The same memory registers again. */
	r = gpu_register(c, g, MiB);
	cr_assert_geq(r, 0);
	dp_close(c);
	CK(cudaFree(g));
	CK(cudaFree(managed));
	CK(cudaFreeHost(pinned));
	free(host);
	stop_svc(&svc);
}

#else

Test(gpu, GpuLoopback)
{
	cr_skip_test("built without CUDA");
}

#endif /* DP_HAVE_CUDA */
