/* SPDX-License-Identifier: MIT */
/* gpu_multi.c - several GPUs through one service: device i <-> device j both ways (1 B to 64 MiB, 64 in flight, bytes verified), a client whose current device is not its buffer's, and an all-to-all of up to eight ranks, one device each, by engine session and address (each rank reading every other's buffer and writing its own); self-skips below two devices. */
#include "helpers.h"

#ifdef DP_HAVE_CUDA

TestSuite(gpu_multi, .fini = svc_teardown, .timeout = 300);

static int ndev(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess)
		return 0;
	return n;
}

#define MULTI_REQUIRE()                                                                            \
	do {                                                                                       \
		if (ndev() < 2)                                                                    \
			cr_skip_test("fewer than two CUDA devices on this machine");               \
	} while (0)

/* @len bytes on device @dev: the pattern of @seed, or zeros (seed < 0). */
static void *buf_on(int dev, size_t len, int64_t seed)
{
	void *p;

	CK(cudaSetDevice(dev));
	p = gpu_buf(len, seed);
	CK(cudaSetDevice(0));
	return p;
}

static void expect_on(int dev, const void *p, size_t len, int64_t seed, const char *what)
{
	CK(cudaSetDevice(dev));
	gpu_expect(p, len, seed, 0, what);
	CK(cudaSetDevice(0));
}

static void memset_on(int dev, void *p, size_t len)
{
	CK(cudaSetDevice(dev));
	gpu_memset(p, 0, len);
	CK(cudaSetDevice(0));
}

/* DP_CQE_F_GPU_STAGED where devices a and b have no peer access either
 * way (the driver stages their copies through host memory), else 0. */
static uint32_t staged_flag(int a, int b)
{
	int ab = 0, ba = 0;

	if (a == b)
		return 0;
	CK(cudaDeviceCanAccessPeer(&ab, a, b));
	CK(cudaDeviceCanAccessPeer(&ba, b, a));
	return ab || ba ? 0 : DP_CQE_F_GPU_STAGED;
}

/* A GPU copy's completion, its peer path (@staged) said as it was. */
static void expect_gpu_path(struct dp_cqe c, uint64_t len, uint32_t staged, const char *what)
{
	cr_assert_eq(c.status, 0, "%s of %llu B: %s", what, (unsigned long long)len,
		     dp_strerror(c.status));
	cr_assert_eq(c.bytes, len, "%s: %llu bytes", what, (unsigned long long)c.bytes);
	cr_assert(c.flags & DP_CQE_F_GPU, "%s: flags %#x", what, c.flags);
	cr_assert_eq(c.flags & DP_CQE_F_GPU_STAGED, staged, "%s: flags %#x, peer path %s", what,
		     c.flags, staged ? "staged" : "direct");
}

static void expect_gpu(struct dp_cqe c, uint64_t len, const char *what)
{
	expect_gpu_path(c, len, staged_flag(0, 1), what);
}

/* Device 0's buffer of client A -> device 1's export of client B, and
 * back, each size; then 64 WRITEs of 1 MiB in flight. */
Test(gpu_multi, device_to_device_both_ways)
{
	static const uint64_t lens[] = {1, 4096, MiB + 3, 64 * MiB};
	const size_t len = 64 * MiB + 4096;
	struct dp_client *a, *b;
	struct dp_queue *q;
	void *s0, *d1;
	int r0, r1, seg;

	MULTI_REQUIRE();
	start_svc(&svc, local_only);
	a = connect_client(&svc, "dev0");
	b = connect_client(&svc, "dev1");
	s0 = buf_on(0, len, -1);
	d1 = buf_on(1, len, -1);
	r0 = gpu_register(a, s0, len);
	r1 = gpu_register(b, d1, len);
	cr_assert_eq(dp_segment_export(b, r1, "dev1", DP_ACCESS_RW), 0);
	seg = open_segment(a, NULL, "dev1", DP_ACCESS_RW);
	q = make_queue(a, 64);
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		uint64_t n = lens[i];

		CK(cudaFree(s0));
		s0 = buf_on(0, len, 10 + i);
		dp_free(a, r0);
		r0 = gpu_register(a, s0, len);
		memset_on(1, d1, len);
		expect_gpu(run1(q, true, r0, 0, seg, 0, n, 1, 60000), n, "WRITE dev 0 -> dev 1");
		expect_on(1, d1, n, 10 + i, "dev 0 -> dev 1");
		memset_on(0, s0, len);
		expect_gpu(run1(q, false, r0, 0, seg, 0, n, 2, 60000), n, "READ dev 0 <- dev 1");
		expect_on(0, s0, n, 10 + i, "dev 1 -> dev 0");
	}
	{
		struct dp_desc d[64];
		struct dp_cqe out[64];

		for (unsigned i = 0; i < 64; i++)
			dp_prep_write(&d[i], r0, i * MiB, seg, (63 - i) * MiB, MiB, 100 + i);
		run_batch(q, d, 64, out, 60000);
		for (unsigned i = 0; i < 64; i++)
			expect_gpu(out[i], MiB, "64 in flight");
	}
	dp_queue_destroy(q);
	dp_close(a);
	dp_close(b);
	CK(cudaFree(s0));
	CK(cudaFree(d1));
	stop_svc(&svc);
}

/* A client whose current device is 1 registers and moves a buffer of
 * device 0: the copy runs in device 0's context. */
Test(gpu_multi, current_device_is_not_the_buffers)
{
	struct dp_client *c;
	struct dp_queue *q;
	void *s0, *d0;
	int rs, rd, seg;

	MULTI_REQUIRE();
	start_svc(&svc, local_only);
	c = connect_client(&svc, "wrong-context");
	s0 = buf_on(0, MiB, 7);
	d0 = buf_on(0, MiB, -1);
	CK(cudaSetDevice(1));
	rs = gpu_register(c, s0, MiB);
	rd = gpu_register(c, d0, MiB);
	seg = export_open(c, rd, "ctx", DP_ACCESS_RW, DP_ACCESS_RW);
	q = make_queue(c, 8);
	expect_gpu_path(run1(q, true, rs, 0, seg, 0, MiB, 1, 30000), MiB, 0,
			"WRITE from device 1's context");
	CK(cudaSetDevice(0));
	gpu_expect(d0, MiB, 7, 0, "device 0 buffer written under device 1's context");
	dp_queue_destroy(q);
	dp_close(c);
	CK(cudaFree(s0));
	CK(cudaFree(d0));
	stop_svc(&svc);
}

/* Up to eight ranks, one device each, each a client with an engine
 * session of its own: every rank reads every other rank's buffer by
 * session and address, and writes into its own (the self-loopback: the
 * local engine). Every byte checked. */
Test(gpu_multi, all_to_all_by_session)
{
	enum { RANKS_MAX = 8 };
	const size_t len = 4 * MiB;
	int n = ndev() < RANKS_MAX ? ndev() : RANKS_MAX;
	struct dp_client *c[RANKS_MAX];
	struct dp_queue *q[RANKS_MAX];
	void *buf[RANKS_MAX], *in[RANKS_MAX];
	int rin[RANKS_MAX];

	MULTI_REQUIRE();
	start_svc(&svc, local_only);
	for (int r = 0; r < n; r++) {
		c[r] = connect_client(&svc, "rank");
		cr_assert_gt(dp_session_create(c[r], 0), 0);
		buf[r] = buf_on(r, len, 40 + r);
		in[r] = buf_on(r, len * (size_t)n, -1);
		gpu_register(c[r], buf[r], len); /* in its session: read by address */
		rin[r] = gpu_register(c[r], in[r], len * (size_t)n);
		q[r] = make_queue(c[r], 64);
	}
	for (int r = 0; r < n; r++)
		for (int p = 0; p < n; p++) {
			int seg = dp_session_open(c[r], dp_session_name(c[p]), DP_ACCESS_RW);

			cr_assert_geq(seg, 0, "rank %d opens rank %d: %s", r, p, dp_last_error());
			expect_gpu_path(run1(q[r], false, rin[r], (uint64_t)p * len, seg,
					     (uint64_t)(uintptr_t)buf[p], len, (uint64_t)p, 60000),
					len, staged_flag(r, p), p == r ? "self READ" : "peer READ");
			dp_segment_close(c[r], seg);
		}
	for (int r = 0; r < n; r++)
		for (int p = 0; p < n; p++)
			expect_on(r, (uint8_t *)in[r] + (size_t)p * len, len, 40 + p, "all-to-all");
	for (int r = 0; r < n; r++) {
		dp_queue_destroy(q[r]);
		dp_close(c[r]);
		CK(cudaSetDevice(r));
		CK(cudaFree(buf[r]));
		CK(cudaFree(in[r]));
	}
	CK(cudaSetDevice(0));
	stop_svc(&svc);
}

#endif /* DP_HAVE_CUDA */
