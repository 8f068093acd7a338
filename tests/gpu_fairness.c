/* SPDX-License-Identifier: MIT */
/* gpu_fairness.c - a 1 GiB GPU copy on one queue does not hold up a 4 KiB
 * GPU copy on another queue of the same poller. */
#include <stdio.h>

#include "helpers.h"

#ifdef DP_HAVE_CUDA

TestSuite(gpu_fair, .fini = svc_teardown, .timeout = 180);

#define SMALL 4096u
#define ROUNDS 7
/* Slack over the 4 KiB copy's own median latency: generous, and still far
 * below the ~0.5 ms (device to device) or ~20 ms (host to device) that the
 * 1 GiB copy takes, which is what a 4 KiB copy queued behind it would see. */
#define SLACK_NS 100000ull

static struct dp_cqe poll_one(struct dp_queue *q)
{
	struct dp_cqe cqe;
	int k;

	while ((k = dp_poll(q, &cqe, 1)) == 0)
		;
	cr_assert_eq(k, 1, "dp_poll: %s", dp_strerror(k));
	return cqe;
}

static void spin_ns(uint64_t ns)
{
	uint64_t end = now_ns() + ns;

	while (now_ns() < end)
		;
}

/*
 * @big: a WRITE descriptor of 1 GiB to run on @qa; the 4 KiB WRITE goes
 * from region @rs to segment @seg on @qb. Measures the 4 KiB copy alone,
 * then while the big one runs, and asserts the bound.
 */
static void fairness(const char *what, struct dp_queue *qa, const struct dp_desc *big,
		     struct dp_queue *qb, int rs, int seg)
{
	uint64_t alone[201], loaded[ROUNDS], big_ns[ROUNDS], t0;
	unsigned small_first = 0;
	struct dp_desc d;
	struct dp_cqe cqe;

	dp_prep_write(&d, rs, 0, seg, 0, SMALL, 1);
	for (int i = 0; i < 201; i++) {
		t0 = now_ns();
		cr_assert_eq(dp_submit(qb, &d, 1), 1);
		cqe = poll_one(qb);
		alone[i] = now_ns() - t0;
		cr_assert_eq(cqe.status, 0, "4 KiB copy: %s", dp_strerror(cqe.status));
	}
	qsort(alone, 201, sizeof(alone[0]), cmp_u64);

	/* Warm-up of the big copy (first use of its stream). */
	cr_assert_eq(dp_submit(qa, big, 1), 1);
	cqe = poll_one(qa);
	cr_assert_eq(cqe.status, 0, "1 GiB copy: %s", dp_strerror(cqe.status));

	for (int r = 0; r < ROUNDS; r++) {
		uint64_t tb = now_ns(), small_done = 0, big_done = 0;

		cr_assert_eq(dp_submit(qa, big, 1), 1);
		/* Let the poller start the big copy first. */
		spin_ns(50000);
		t0 = now_ns();
		cr_assert_eq(dp_submit(qb, &d, 1), 1);
		while (!small_done || !big_done) {
			if (!small_done && dp_poll(qb, &cqe, 1) == 1) {
				small_done = now_ns();
				cr_assert_eq(cqe.status, 0);
				if (!big_done)
					small_first++;
			}
			if (!big_done && dp_poll(qa, &cqe, 1) == 1) {
				big_done = now_ns();
				cr_assert_eq(cqe.status, 0);
				cr_assert_eq(cqe.bytes, big->len);
			}
		}
		loaded[r] = small_done - t0;
		big_ns[r] = big_done - tb;
	}
	qsort(loaded, ROUNDS, sizeof(loaded[0]), cmp_u64);
	qsort(big_ns, ROUNDS, sizeof(big_ns[0]), cmp_u64);
	fprintf(stderr,
		"%s: 4 KiB copy alone p50 %.1f us; beside a 1 GiB copy (%.1f us) p50 %.1f us, "
		"max %.1f us; finished first %u/%u\n",
		what, alone[100] / 1e3, big_ns[ROUNDS / 2] / 1e3, loaded[ROUNDS / 2] / 1e3,
		loaded[ROUNDS - 1] / 1e3, small_first, ROUNDS);
	cr_assert_gt(big_ns[ROUNDS / 2], alone[100] + 2 * SLACK_NS,
		     "the 1 GiB copy is too fast for this test to tell anything");
	cr_assert_leq(loaded[ROUNDS / 2], alone[100] + SLACK_NS,
		      "%s: the 4 KiB copy took %.1f us beside the 1 GiB one, alone %.1f us", what,
		      loaded[ROUNDS / 2] / 1e3, alone[100] / 1e3);
	cr_assert_geq(small_first, ROUNDS - 1, "the 4 KiB copy finished first %u of %u times",
		      small_first, ROUNDS);
}

/* Both copies device to device, on one GPU. */
Test(gpu_fair, GpuBigCopyDoesNotDelaySmall)
{
	const size_t big = 1024 * MiB;
	struct dp_client *c;
	struct dp_queue *qa, *qb;
	struct dp_desc d;
	void *bsrc, *bdst, *ssrc, *sdst;
	int rbs, rbd, rss, rsd, segb, segs;

	GPU_REQUIRE();
	start_svc(&svc, local_only);
	c = connect_client(&svc, "gpu-fair");
	qa = make_queue(c, 0);
	qb = make_queue(c, 0);
	CK(cudaMalloc(&bsrc, big));
	CK(cudaMalloc(&bdst, big));
	gpu_memset(bsrc, 0x5a, big);
	gpu_memset(bdst, 0, big);
	rss = gpu_region(c, SMALL, 11, &ssrc);
	rsd = gpu_region(c, SMALL, -1, &sdst);
	rbs = gpu_register(c, bsrc, big);
	rbd = gpu_register(c, bdst, big);
	segb = export_open(c, rbd, "big", DP_ACCESS_RW, DP_ACCESS_RW);
	segs = export_open(c, rsd, "small", DP_ACCESS_RW, DP_ACCESS_RW);
	dp_prep_write(&d, rbs, 0, segb, 0, big, 2);
	fairness("device to device", qa, &d, qb, rss, segs);
	gpu_expect(sdst, SMALL, 11, 0, "4 KiB destination");
	{
		uint8_t *h = malloc(MiB);

		cr_assert(h);
		for (size_t off = 0; off < big; off += 255 * MiB) {
			CK(cudaMemcpy(h, (uint8_t *)bdst + off, MiB, cudaMemcpyDeviceToHost));
			for (size_t i = 0; i < MiB; i++)
				if (h[i] != 0x5a)
					cr_assert_fail("1 GiB destination: byte %zu", off + i);
		}
		free(h);
	}
	dp_close(c);
	CK(cudaFree(bsrc));
	CK(cudaFree(bdst));
	CK(cudaFree(ssrc));
	CK(cudaFree(sdst));
	stop_svc(&svc);
}

/* The big copy host to device (pinned host memory), the small one device to
 * device. */
Test(gpu_fair, GpuBigHostCopyDoesNotDelaySmall)
{
	const size_t big = 1024 * MiB;
	struct dp_client *c;
	struct dp_queue *qa, *qb;
	struct dp_desc d;
	uint8_t *hsrc;
	void *bdst, *ssrc, *sdst;
	int rbs, rbd, rss, rsd, segb, segs;

	GPU_REQUIRE();
	start_svc(&svc, local_only);
	c = connect_client(&svc, "gpu-fair-host");
	qa = make_queue(c, 0);
	qb = make_queue(c, 0);
	rbs = dp_alloc(c, big, DP_ALLOC_HUGE, (void **)&hsrc);
	cr_assert_geq(rbs, 0, "dp_alloc: %s", dp_strerror(rbs));
	memset(hsrc, 0xa5, big);
	CK(cudaMalloc(&bdst, big));
	gpu_memset(bdst, 0, big);
	rss = gpu_region(c, SMALL, 12, &ssrc);
	rsd = gpu_region(c, SMALL, -1, &sdst);
	rbd = gpu_register(c, bdst, big);
	segb = export_open(c, rbd, "big", DP_ACCESS_RW, DP_ACCESS_RW);
	segs = export_open(c, rsd, "small", DP_ACCESS_RW, DP_ACCESS_RW);
	dp_prep_write(&d, rbs, 0, segb, 0, big, 2);
	fairness("host to device", qa, &d, qb, rss, segs);
	gpu_expect(sdst, SMALL, 12, 0, "4 KiB destination");
	{
		uint8_t *h = malloc(MiB);

		cr_assert(h);
		CK(cudaMemcpy(h, (uint8_t *)bdst + big - MiB, MiB, cudaMemcpyDeviceToHost));
		for (size_t i = 0; i < MiB; i++)
			if (h[i] != 0xa5)
				cr_assert_fail("1 GiB destination: byte %zu", big - MiB + i);
		free(h);
	}
	dp_close(c);
	CK(cudaFree(bdst));
	CK(cudaFree(ssrc));
	CK(cudaFree(sdst));
	stop_svc(&svc);
}

#else

Test(gpu_fair, GpuFairness)
{
	cr_skip_test("built without CUDA");
}

#endif /* DP_HAVE_CUDA */
