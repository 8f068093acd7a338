/* SPDX-License-Identifier: MIT */
/* gpu_stage.c - GPU memory over a fabric without FI_HMEM: two services over tcp, the
 * initiator's rails opened with --no-hmem, so its GPU regions go through host staging
 * (the stage engine): local GPU -> remote host segment and remote host -> local GPU,
 * 1 B .. 256 MiB and many in flight, byte-accurate; -ENOTSUP with staging off; a GPU
 * export its owner could not register, staged by its owner (owner staging), and
 * -ENOTSUP when the owner does not stage. Self-skips without a GPU. */
#include "helpers.h"

#ifdef DP_HAVE_CUDA

TestSuite(gpu_stage, .fini = fab_teardown, .timeout = 180);

#define STAGED (DP_CQE_F_FABRIC | DP_CQE_F_GPU)

/* One descriptor that must move all its bytes through staging. */
static void staged_ok(struct dp_queue *q, const struct dp_desc *d)
{
	struct dp_cqe cqe = run_wait(q, d, 60000);

	cr_assert_eq(cqe.status, 0, "%s of %llu B: %s", d->opcode == DP_OP_WRITE ? "WRITE" : "READ",
		     (unsigned long long)d->len, dp_strerror(cqe.status));
	cr_assert_eq(cqe.bytes, d->len);
	cr_assert_eq(cqe.flags & (STAGED | DP_CQE_F_LOCAL), STAGED, "flags 0x%x", cqe.flags);
}

static const char *const no_hmem[] = {"--no-hmem", NULL};

Test(gpu_stage, tcp_gpu_to_remote_host_and_back_1B_to_256MiB)
{
	static const struct xfer_shape xs[] = {
		{1, 5, 7},
		{4095, 1, 12345},
		{MiB + 3, 4096, 65536 + 3},
		{5 * MiB + 1, 3, 17},
		{64 * MiB, 0, 65536},
		{256 * MiB, 0, 4096},
	};
	const uint64_t max = 256 * MiB, glen = max + 8192, tlen = max + 65536;
	struct fab_pair p;
	struct dp_queue *q;
	uint8_t *tgt;
	void *gs, *gd;
	int gsrc, gdst, treg, seg;

	GPU_REQUIRE();
	fab_pair_start(&p, "tcp", 0, no_hmem, NULL);
	treg = alloc_region(p.cb, tlen, &tgt);
	export_segment(p.cb, treg, "host-kv", DP_ACCESS_RW);
	gsrc = gpu_region(p.ca, glen, 3, &gs);	/* WRITEs read it */
	gdst = gpu_region(p.ca, glen, -1, &gd); /* READs land here */
	seg = open_segment(p.ca, p.peer_b, "host-kv", DP_ACCESS_RW);
	q = make_queue(p.ca, 16);
	for (unsigned i = 0; i < sizeof(xs) / sizeof(xs[0]); i++) {
		uint64_t len = xs[i].len, lo = xs[i].loff, to = xs[i].toff;
		struct dp_desc d;

		/* WRITE: the GPU buffer's pattern (seed 3) -> B's host memory. */
		memset(tgt + to, 0, len);
		dp_prep_write(&d, gsrc, lo, seg, to, len, 100 + i);
		staged_ok(q, &d);
		for (uint64_t k = 0; k < len; k++)
			if (tgt[to + k] != pattern_byte(3, lo + k))
				cr_assert_fail("GPU -> host, %llu B: byte %llu wrong",
					       (unsigned long long)len, (unsigned long long)k);
		/* READ: B's host memory (seed 40 + i) -> the other GPU buffer. */
		pattern_fill(tgt + to, len, 40 + i);
		dp_prep_read(&d, gdst, lo, seg, to, len, 200 + i);
		staged_ok(q, &d);
		gpu_expect((uint8_t *)gd + lo, len, 40 + i, 0, "host -> GPU");
	}
	fab_pair_stop(&p);
	CK(cudaFree(gs));
	CK(cudaFree(gd));
}

Test(gpu_stage, tcp_64_in_flight)
{
	const unsigned n = 64;
	const uint64_t len = MiB + 77, stride = 2 * MiB;
	struct dp_desc d[64];
	struct dp_cqe out[64];
	struct fab_pair p;
	struct dp_queue *q;
	uint8_t *tgt;
	void *g;
	int greg, treg, seg;

	GPU_REQUIRE();
	fab_pair_start(&p, "tcp", 0, no_hmem, NULL);
	treg = alloc_region(p.cb, n * stride, &tgt);
	export_segment(p.cb, treg, "host-many", DP_ACCESS_RW);
	greg = gpu_region(p.ca, n * stride, 5, &g);
	seg = open_segment(p.ca, p.peer_b, "host-many", DP_ACCESS_RW);
	q = make_queue(p.ca, 64);
	for (unsigned i = 0; i < n; i++)
		dp_prep_write(&d[i], greg, i * stride, seg, i * stride, len, i);
	run_batch(q, d, n, out, 60000);
	for (unsigned i = 0; i < n; i++) {
		cr_assert_eq(out[i].status, 0, "WRITE %u: %s", i, dp_strerror(out[i].status));
		cr_assert_eq(out[i].flags & (STAGED | DP_CQE_F_LOCAL), STAGED);
		for (uint64_t k = 0; k < len; k += 997)
			cr_assert_eq(tgt[i * stride + k], pattern_byte(5, i * stride + k),
				     "WRITE %u byte %llu", i, (unsigned long long)k);
	}
	for (unsigned i = 0; i < n; i++) {
		pattern_fill(tgt + i * stride, len, 500 + i);
		dp_prep_read(&d[i], greg, i * stride, seg, i * stride, len, i);
	}
	run_batch(q, d, n, out, 60000);
	for (unsigned i = 0; i < n; i++) {
		cr_assert_eq(out[i].status, 0, "READ %u: %s", i, dp_strerror(out[i].status));
		gpu_expect((uint8_t *)g + i * stride, len, 500 + i, 0, "READ into the GPU");
	}
	fab_pair_stop(&p);
	CK(cudaFree(g));
}

/* --no-hmem and --stage-bufs 0: a GPU region has no way over: -ENOTSUP. */
Test(gpu_stage, tcp_staging_off_is_enotsup)
{
	static const char *const off[] = {"--no-hmem", "--stage-bufs", "0", NULL};
	struct fab_pair p;
	struct dp_queue *q;
	struct dp_desc d;
	uint8_t *tgt;
	void *g;
	int greg, treg, seg;

	GPU_REQUIRE();
	fab_pair_start(&p, "tcp", 0, off, NULL);
	treg = alloc_region(p.cb, MiB, &tgt);
	export_segment(p.cb, treg, "host-off", DP_ACCESS_RW);
	greg = gpu_region(p.ca, MiB, 1, &g);
	seg = open_segment(p.ca, p.peer_b, "host-off", DP_ACCESS_RW);
	q = make_queue(p.ca, 16);
	dp_prep_write(&d, greg, 0, seg, 0, MiB, 0);
	gpu_run_one_fails(q, &d, -ENOTSUP, 10000, "GPU WRITE, staging off");
	dp_prep_read(&d, greg, 0, seg, 0, MiB, 0);
	gpu_run_one_fails(q, &d, -ENOTSUP, 10000, "GPU READ, staging off");
	fab_pair_stop(&p);
	CK(cudaFree(g));
}

/* B exports GPU memory on rails without FI_HMEM (--no-hmem): the open
 * works, transfers to it fail with -ENOTSUP, never -ENOENT/-EHOSTUNREACH. */
/* B's GPU export, its rails without FI_HMEM (--no-hmem): B stages it for
 * its peers (owner staging), so A's host memory moves to and from it over
 * tcp, byte-accurately, at any size and offset. */
Test(gpu_stage, tcp_owner_stages_unregistered_gpu_export)
{
	static const struct xfer_shape xs[] = {
		{1, 3, 5}, {4097, 0, 12345}, {MiB + 17, 7, 65536}, {3 * MiB, 0, MiB}};
	const uint64_t glen = 4 * MiB + 65536;
	struct fab_pair p;
	struct dp_queue *q;
	struct dp_desc d;
	uint8_t *host;
	void *gb;
	int hreg, breg, seg, rc;

	GPU_REQUIRE();
	fab_pair_start(&p, "tcp", 0, NULL, no_hmem);
	breg = gpu_region(p.cb, glen, 2, &gb);
	rc = dp_segment_export(p.cb, breg, "gpu-owner-staged", DP_ACCESS_RW);
	cr_assert_eq(rc, 0, "export: %s", dp_strerror(rc));
	hreg = alloc_region(p.ca, glen, &host);
	seg = open_segment(p.ca, p.peer_b, "gpu-owner-staged", DP_ACCESS_RW);
	q = make_queue(p.ca, 16);
	for (unsigned i = 0; i < sizeof(xs) / sizeof(xs[0]); i++) {
		uint64_t len = xs[i].len, lo = xs[i].loff, to = xs[i].toff;
		struct dp_cqe cqe;

		pattern_fill(host + lo, len, 60 + i);
		dp_prep_write(&d, hreg, lo, seg, to, len, 10 + i);
		cqe = run_wait(q, &d, 60000);
		cr_assert_eq(cqe.status, 0, "WRITE of %llu B into the owner-staged GPU export: %s",
			     (unsigned long long)len, dp_strerror(cqe.status));
		cr_assert_eq(cqe.bytes, len);
		gpu_expect((uint8_t *)gb + to, len, 60 + i, 0, "host -> owner-staged GPU");
		memset(host, 0, glen);
		dp_prep_read(&d, hreg, 0, seg, to, len, 20 + i);
		cqe = run_wait(q, &d, 60000);
		cr_assert_eq(cqe.status, 0, "READ of %llu B from the owner-staged GPU export: %s",
			     (unsigned long long)len, dp_strerror(cqe.status));
		cr_assert_eq(pattern_check(host, len, 60 + i), -1, "owner-staged GPU -> host");
	}
	fab_pair_stop(&p);
	CK(cudaFree(gb));
}

/* The same export, its owner not staging (--stage-bufs 0): -ENOTSUP. */
Test(gpu_stage, tcp_unstaged_gpu_export_is_enotsup)
{
	static const char *const b_off[] = {"--no-hmem", "--stage-bufs", "0", NULL};
	struct fab_pair p;
	struct dp_queue *q;
	struct dp_desc d;
	uint8_t *host;
	void *gb;
	int hreg, breg, seg, rc;

	GPU_REQUIRE();
	fab_pair_start(&p, "tcp", 0, NULL, b_off);
	breg = gpu_region(p.cb, MiB, 2, &gb);
	rc = dp_segment_export(p.cb, breg, "gpu-unreg", DP_ACCESS_RW);
	cr_assert_eq(rc, 0, "export: %s", dp_strerror(rc));
	hreg = alloc_region(p.ca, MiB, &host);
	seg = open_segment(p.ca, p.peer_b, "gpu-unreg", DP_ACCESS_RW);
	q = make_queue(p.ca, 16);
	dp_prep_write(&d, hreg, 0, seg, 0, MiB, 0);
	gpu_run_one_fails(q, &d, -ENOTSUP, 10000, "WRITE to an unstaged GPU export");
	dp_prep_read(&d, hreg, 0, seg, 0, MiB, 0);
	gpu_run_one_fails(q, &d, -ENOTSUP, 10000, "READ of an unstaged GPU export");
	gpu_expect(gb, MiB, 2, 0, "the refused WRITE left the GPU export alone");
	fab_pair_stop(&p);
	CK(cudaFree(gb));
}

#else

Test(gpu_stage, tcp_gpu_to_remote_host_and_back_1B_to_256MiB)
{
	cr_skip_test("built without CUDA");
}

#endif /* DP_HAVE_CUDA */
