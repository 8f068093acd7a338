/* SPDX-License-Identifier: MIT */
/* gpu_samehost.c - GPU memory between two services of one host, both ways
 * it can go: without the fabric (the exporter's CUDA IPC handle goes to the
 * importer over the same-host socket, copies are cudaMemcpyAsync:
 * DP_CQE_F_SAME_HOST | DP_CQE_F_GPU), and with --no-same-host through the
 * shm provider with FI_HMEM (DP_CQE_F_FABRIC | DP_CQE_F_GPU; skipped where
 * libfabric cannot register CUDA memory). GPU <-> GPU and host <-> GPU,
 * WRITE and READ, 1 B to 1 GiB, 64 in flight, byte-accurate. */
#include "helpers.h"

#ifdef DP_HAVE_CUDA

TestSuite(gpu_samehost, .fini = fab_teardown, .timeout = 300);

/* The path under test: its completions' flags. */
static uint32_t SH_FLAGS = DP_CQE_F_SAME_HOST | DP_CQE_F_GPU;
static bool fabric_mode;

/* Service 0 (A, the initiator) and 1 (B, the exporter), same host: with
 * the same-host path, or (fabric_mode) through shm with FI_HMEM. */
static void start_pair(char *peer_b, size_t len)
{
	static char sa[96], sb[96];
	const char *a[] = {"--provider", "tcp", "--server-name", "127.0.0.1", "--same-host-socket",
			   sa,		 NULL};
	const char *b[] = {"--provider", "tcp", "--server-name", "127.0.0.1", "--same-host-socket",
			   sb,		 NULL};

	snprintf(sa, sizeof(sa), "/tmp/dp-gpu-sh-a-%d.peer", (int)getpid());
	snprintf(sb, sizeof(sb), "/tmp/dp-gpu-sh-b-%d.peer", (int)getpid());
	if (fabric_mode) {
		/* No --same-host-socket: the test helper adds --no-same-host. */
		a[1] = b[1] = "shm";
		a[4] = b[4] = NULL;
		SH_FLAGS = DP_CQE_F_FABRIC | DP_CQE_F_GPU;
	}
	start_svc(&fab_svc[1], b);
	start_svc(&fab_svc[0], a);
	if (fabric_mode && !svc_log_has(&fab_svc[1], "FI_HMEM"))
		cr_skip_test("this libfabric's shm provider does not offer FI_HMEM");
	snprintf(peer_b, len, "127.0.0.1:%d", fab_rpc_port(&fab_svc[1]));
}

/* Through the same-host path a GPU copy runs here whichever side the GPU
 * memory is on (DP_CQE_F_GPU); through the fabric DP_CQE_F_GPU says that
 * the local side was GPU memory (`local_gpu`). */
static void expect_sh_gpu(struct dp_cqe c, uint64_t len, const char *what, bool local_gpu)
{
	uint32_t want = fabric_mode && !local_gpu ? DP_CQE_F_FABRIC : SH_FLAGS;

	cr_assert_eq(c.status, 0, "%s of %llu B: %s", what, (unsigned long long)len,
		     dp_strerror(c.status));
	cr_assert_eq(c.bytes, len, "%s: %llu bytes", what, (unsigned long long)c.bytes);
	cr_assert_eq(c.flags &
			     (DP_CQE_F_SAME_HOST | DP_CQE_F_GPU | DP_CQE_F_LOCAL | DP_CQE_F_FABRIC),
		     want, "%s: flags %#x, want %#x", what, c.flags, want);
}

static void expect_sh(struct dp_cqe c, uint64_t len, const char *what)
{
	expect_sh_gpu(c, len, what, true);
}

/* A's GPU buffer <-> B's exported GPU buffer, sizes 1 B .. 1 GiB. */
static void GpuToGpuBothWays(void)
{
	static const uint64_t lens[] = {1, 4096, MiB + 3, 64 * MiB, 1024 * MiB};
	const size_t len = 1024 * MiB + 4096;
	struct dp_client *ca, *cb;
	struct dp_queue *q;
	char peer[64];
	void *da, *db;
	int ra, rb, seg;

	GPU_REQUIRE();
	start_pair(peer, sizeof(peer));
	ca = connect_client(&fab_svc[0], "gpu-initiator");
	cb = connect_client(&fab_svc[1], "gpu-exporter");
	ra = gpu_region(ca, len, -1, &da);
	rb = gpu_region(cb, len, -1, &db);
	cr_assert_eq(dp_segment_export(cb, rb, "gpu-sh", DP_ACCESS_RW), 0);
	seg = open_segment(ca, peer, "gpu-sh", DP_ACCESS_RW);
	q = make_queue(ca, 64);
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		uint64_t n = lens[i];

		/* WRITE: A -> B. */
		gpu_memset(db, 0, len);
		{
			void *src = gpu_buf(n, 30 + i);

			CK(cudaMemcpy(da, src, n, cudaMemcpyDeviceToDevice));
			CK(cudaFree(src));
		}
		expect_sh(run1(q, true, ra, 0, seg, 4096, n, 100 + i, 60000), n,
			  "WRITE GPU -> GPU");
		gpu_expect((uint8_t *)db + 4096, n, 30 + i, 0, "WRITE GPU -> GPU");
		/* READ: B -> A. */
		gpu_memset(da, 0, len);
		expect_sh(run1(q, false, ra, 7, seg, 4096, n, 200 + i, 60000), n,
			  "READ GPU <- GPU");
		gpu_expect((uint8_t *)da + 7, n, 30 + i, 0, "READ GPU <- GPU");
	}
	dp_queue_destroy(q);
	dp_close(ca);
	dp_close(cb);
	CK(cudaFree(da));
	CK(cudaFree(db));
}

/* Host memory on one side, GPU on the other, both ways. */
static void HostAndGpuBothWays(void)
{
	const size_t len = 64 * MiB;
	struct dp_client *ca, *cb;
	struct dp_queue *q;
	char peer[64];
	uint8_t *host;
	void *dg;
	int rg, rh, seg;

	GPU_REQUIRE();
	start_pair(peer, sizeof(peer));
	ca = connect_client(&fab_svc[0], "gpu-initiator");
	cb = connect_client(&fab_svc[1], "host-exporter");
	/* A's GPU memory -> B's exported host memory and back. */
	rg = gpu_region(ca, len, 41, &dg);
	rh = alloc_region(cb, len, &host);
	memset(host, 0, len);
	cr_assert_eq(dp_segment_export(cb, rh, "host-sh", DP_ACCESS_RW), 0);
	seg = open_segment(ca, peer, "host-sh", DP_ACCESS_RW);
	q = make_queue(ca, 8);
	expect_sh(run1(q, true, rg, 0, seg, 0, len, 1, 60000), len, "WRITE GPU -> host");
	cr_assert_eq(pattern_check(host, len, 41), -1, "GPU -> host: mismatch");
	pattern_fill(host, len, 42);
	expect_sh(run1(q, false, rg, 0, seg, 0, len, 2, 60000), len, "READ GPU <- host");
	gpu_expect(dg, len, 42, 0, "host -> GPU");
	dp_queue_destroy(q);
	dp_close(ca);
	CK(cudaFree(dg));

	/* B's exported GPU memory <- A's host memory, and back. */
	{
		struct dp_client *cc = connect_client(&fab_svc[0], "host-initiator");
		uint8_t *h2;
		void *dx;
		int r2 = alloc_region(cc, len, &h2);
		int rx = gpu_region(cb, len, -1, &dx);
		int s2;

		cr_assert_eq(dp_segment_export(cb, rx, "gpu-sh2", DP_ACCESS_RW), 0);
		s2 = open_segment(cc, peer, "gpu-sh2", DP_ACCESS_RW);
		q = make_queue(cc, 8);
		pattern_fill(h2, len, 43);
		expect_sh_gpu(run1(q, true, r2, 0, s2, 0, len, 3, 60000), len, "WRITE host -> GPU",
			      false);
		gpu_expect(dx, len, 43, 0, "host -> GPU");
		memset(h2, 0, len);
		expect_sh_gpu(run1(q, false, r2, 0, s2, 0, len, 4, 60000), len, "READ host <- GPU",
			      false);
		cr_assert_eq(pattern_check(h2, len, 43), -1, "GPU -> host: mismatch");
		dp_queue_destroy(q);
		dp_close(cc);
		dp_close(cb);
		CK(cudaFree(dx));
	}
}

/* 64 in flight, 4 MiB each, into distinct slots of the exported buffer. */
static void SixtyFourInFlight(void)
{
	enum { N = 64 };
	const size_t slot = 4 * MiB, len = N * slot;
	struct dp_desc d[N];
	struct dp_cqe c[N];
	struct dp_client *ca, *cb;
	struct dp_queue *q;
	char peer[64];
	void *da, *db;
	int ra, rb, seg;

	GPU_REQUIRE();
	start_pair(peer, sizeof(peer));
	ca = connect_client(&fab_svc[0], "gpu-initiator");
	cb = connect_client(&fab_svc[1], "gpu-exporter");
	ra = gpu_region(ca, len, 51, &da);
	rb = gpu_region(cb, len, -1, &db);
	cr_assert_eq(dp_segment_export(cb, rb, "gpu-many", DP_ACCESS_RW), 0);
	seg = open_segment(ca, peer, "gpu-many", DP_ACCESS_RW);
	q = make_queue(ca, N);
	for (unsigned i = 0; i < N; i++)
		dp_prep_write(&d[i], ra, i * slot, seg, (N - 1 - i) * slot, slot, i);
	run_batch(q, d, N, c, 60000);
	for (unsigned i = 0; i < N; i++) {
		expect_sh(c[i], slot, "WRITE");
		gpu_expect((uint8_t *)db + (N - 1 - i) * slot, slot, 51, i * slot, "64 in flight");
	}
	dp_queue_destroy(q);
	dp_close(ca);
	dp_close(cb);
	CK(cudaFree(da));
	CK(cudaFree(db));
}

Test(gpu_samehost, GpuToGpuBothWays)
{
	GpuToGpuBothWays();
}

Test(gpu_samehost, HostAndGpuBothWays)
{
	HostAndGpuBothWays();
}

Test(gpu_samehost, SixtyFourInFlight)
{
	SixtyFourInFlight();
}

/* The same through the fabric: shm with FI_HMEM, --no-same-host. A GPU
 * export whose registration failed (a libfabric without CUDA) would be
 * staged or -ENOTSUP: skipped then, by its log line. */
Test(gpu_samehost, ShmHmemGpuToGpuBothWays)
{
	fabric_mode = true;
	GpuToGpuBothWays();
}

Test(gpu_samehost, ShmHmemHostAndGpuBothWays)
{
	fabric_mode = true;
	HostAndGpuBothWays();
}

Test(gpu_samehost, ShmHmemSixtyFourInFlight)
{
	fabric_mode = true;
	SixtyFourInFlight();
}

#else

Test(gpu_samehost, GpuToGpuBothWays)
{
	cr_skip_test("built without CUDA");
}

#endif /* DP_HAVE_CUDA */
