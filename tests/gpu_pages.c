/* SPDX-License-Identifier: MIT */
/* gpu_pages.c - batches of small GPU -> GPU copies (the gpu engine's page
 * kernel): 1, 2, 33 and 256 pages of 1 B .. 256 KiB at scattered,
 * unaligned offsets, WRITE and READ, inside one service and into another
 * service's export of this host, every byte checked; a batch that mixes GPU
 * pages with a host page and a notification; a run with descriptors it
 * cannot take; a 4 KiB copy on another queue beside a big batch. Self-skipping without a GPU. */
#include <stdio.h>
#include <stdlib.h>

#include "helpers.h"

#ifdef DP_HAVE_CUDA

TestSuite(gpu_pages, .fini = fab_teardown, .timeout = 300);

#define STRIDE (256 * 1024 + 64) /* one page slot, room for a 256 KiB page and its shift */
#define MAXP 256
#define SPAN ((size_t)STRIDE * MAXP + 4096)

static const uint64_t lens[] = {1, 3, 4096, 4097, 16384 + 5, 65536, 262144, 100, 15, 8191, 16, 17};

/* Page k of a batch: its length, its offset in the source buffer, its
 * offset in the destination (slots in a fixed scattered order, starting at
 * addresses of every alignment, and shifted against each other). */
static uint64_t page_len(unsigned k)
{
	return lens[(k * 5 + 1) % (sizeof(lens) / sizeof(lens[0]))];
}

static uint64_t page_src(unsigned k)
{
	return (uint64_t)k * STRIDE + (k * 7) % 23;
}

static uint64_t page_dst(unsigned k, unsigned n)
{
	return (uint64_t)((k * 97 + 13) % n) * STRIDE + (k * 11) % 29;
}

/* Runs a batch of @n pages on @q (all submitted before any is reaped): a
 * WRITE copies @lreg's page k at page_src(k) to @seg's at page_dst(k), a
 * READ @seg's page_src(k) to @lreg's page_dst(k). Every completion is
 * checked: status, length, @flags. */
static void pages_run(struct dp_queue *q, bool write, int lreg, int seg, unsigned n, uint32_t flags)
{
	unsigned sent = 0, done = 0;
	bool *seen = calloc(n, 1);

	cr_assert(seen);
	while (done < n) {
		struct dp_cqe c[64];
		int k;

		while (sent < n) {
			struct dp_desc d;

			if (write)
				dp_prep_write(&d, lreg, page_src(sent), seg, page_dst(sent, n),
					      page_len(sent), sent);
			else
				dp_prep_read(&d, lreg, page_dst(sent, n), seg, page_src(sent),
					     page_len(sent), sent);
			if (dp_submit(q, &d, 1) != 1)
				break;
			sent++;
		}
		k = dp_poll(q, c, 64);
		cr_assert_geq(k, 0, "dp_poll: %s", dp_strerror(k));
		for (int i = 0; i < k; i++) {
			uint64_t p = c[i].user_data;

			cr_assert_lt(p, n, "user_data %llu", (unsigned long long)p);
			cr_assert(!seen[p], "page %llu completed twice", (unsigned long long)p);
			seen[p] = true;
			cr_assert_eq(c[i].status, 0, "page %llu: %s", (unsigned long long)p,
				     dp_strerror(c[i].status));
			cr_assert_eq(c[i].bytes, page_len((unsigned)p));
			cr_assert_eq(c[i].flags & flags, flags, "page %llu: flags %#x",
				     (unsigned long long)p, c[i].flags);
		}
		done += (unsigned)k;
	}
	free(seen);
}

/* The destination buffer @dst (all SPAN bytes) holds the @n pages of the
 * source pattern @seed at their places, and zeros everywhere else. */
static void check_batch(const void *dst, unsigned n, uint64_t seed, const char *what)
{
	uint8_t *h = malloc(SPAN), *want = calloc(SPAN, 1);

	cr_assert(h && want);
	for (unsigned k = 0; k < n; k++)
		for (uint64_t i = 0; i < page_len(k); i++)
			want[page_dst(k, n) + i] = pattern_byte(seed, page_src(k) + i);
	CK(cudaMemcpy(h, dst, SPAN, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < SPAN; i++)
		if (h[i] != want[i]) {
			uint8_t got = h[i], w = want[i];

			free(h);
			free(want);
			cr_assert_fail("%s, %u pages: byte %zu is 0x%02x, want 0x%02x", what, n, i,
				       got, w);
		}
	free(h);
	free(want);
}

/* Batches of 1, 2, 33 and 256 pages, WRITE then READ, between @ca's GPU
 * buffer and the GPU buffer @owner exports (@peer: NULL for this service). */
static void batches(struct dp_client *ca, struct dp_client *owner, const char *peer, uint32_t flags)
{
	static const unsigned ns[] = {1, 2, 33, 256};
	void *la, *tb;
	int lr = gpu_region(ca, SPAN, -1, &la), tr = gpu_region(owner, SPAN, -1, &tb), seg;
	struct dp_queue *q = make_queue(ca, 256);

	export_segment(owner, tr, "pages", DP_ACCESS_RW);
	seg = open_segment(ca, peer, "pages", DP_ACCESS_RW);
	for (unsigned i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		void *s = gpu_buf(SPAN, 40 + i);
		char what[64];

		/* WRITE: our pages -> the export. */
		CK(cudaMemcpy(la, s, SPAN, cudaMemcpyDeviceToDevice));
		gpu_memset(tb, 0, SPAN);
		pages_run(q, true, lr, seg, ns[i], flags);
		snprintf(what, sizeof(what), "WRITE batch %u", i);
		check_batch(tb, ns[i], 40 + i, what);
		/* READ: the export's pages -> ours. */
		CK(cudaMemcpy(tb, s, SPAN, cudaMemcpyDeviceToDevice));
		CK(cudaDeviceSynchronize());
		gpu_memset(la, 0, SPAN);
		pages_run(q, false, lr, seg, ns[i], flags);
		snprintf(what, sizeof(what), "READ batch %u", i);
		check_batch(la, ns[i], 40 + i, what);
		CK(cudaFree(s));
	}
	dp_queue_destroy(q);
	CK(cudaFree(la));
	CK(cudaFree(tb));
}

Test(gpu_pages, batches_in_one_service)
{
	struct dp_client *c;

	GPU_REQUIRE();
	start_svc(&fab_svc[0], local_only);
	c = connect_client(&fab_svc[0], "gpu-pages");
	batches(c, c, NULL, DP_CQE_F_LOCAL | DP_CQE_F_GPU);
	dp_close(c);
}

/* The export belongs to a second service of this host: mapped here through
 * its IPC handle (the same-host path), the same page kernel reads and
 * writes the other process's memory. */
Test(gpu_pages, batches_into_another_service)
{
	static char sa[96], sb[96];
	const char *a[] = {"--provider", "tcp", "--server-name", "127.0.0.1", "--same-host-socket",
			   sa,		 NULL};
	const char *b[] = {"--provider", "tcp", "--server-name", "127.0.0.1", "--same-host-socket",
			   sb,		 NULL};
	struct dp_client *ca, *cb;
	char peer[64];

	GPU_REQUIRE();
	snprintf(sa, sizeof(sa), "/tmp/dp-gpu-pg-a-%d.peer", (int)getpid());
	snprintf(sb, sizeof(sb), "/tmp/dp-gpu-pg-b-%d.peer", (int)getpid());
	start_svc(&fab_svc[1], b);
	start_svc(&fab_svc[0], a);
	snprintf(peer, sizeof(peer), "127.0.0.1:%d", fab_rpc_port(&fab_svc[1]));
	ca = connect_client(&fab_svc[0], "gpu-pages-a");
	cb = connect_client(&fab_svc[1], "gpu-pages-b");
	batches(ca, cb, peer, DP_CQE_F_SAME_HOST | DP_CQE_F_GPU);
	dp_close(ca);
	dp_close(cb);
}

/* One submit of 64 GPU pages, a host page among them and a notification on
 * a GPU page: the host page takes its own path, the notification arrives
 * once its page's bytes are in place, and every page lands. */
Test(gpu_pages, batch_with_a_host_page_and_a_notification)
{
	const unsigned n = 64, host_k = 17, note_k = 40;
	struct dp_client *owner, *writer;
	struct dp_desc d[64];
	struct dp_notification note;
	struct dp_queue *q;
	void *src, *dst, *hsrc;
	unsigned done = 0;
	int rs, rh, rd, seg;

	GPU_REQUIRE();
	start_svc(&fab_svc[0], local_only);
	owner = connect_client(&fab_svc[0], "decode");
	writer = connect_client(&fab_svc[0], "prefill");
	rd = gpu_region(owner, SPAN, -1, &dst);
	export_segment(owner, rd, "kv-pages", DP_ACCESS_RW);
	cr_assert_eq(dp_notify_open(owner, 64), 0, "%s", dp_last_error());
	rs = gpu_region(writer, SPAN, 50, &src);
	rh = alloc_region(writer, SPAN, &hsrc);
	pattern_fill(hsrc, SPAN, 50); /* the same bytes: one expected image */
	seg = open_segment(writer, NULL, "kv-pages", DP_ACCESS_RW);
	q = make_queue(writer, 256);
	for (unsigned k = 0; k < n; k++) {
		int r = k == host_k ? rh : rs;

		if (k == note_k)
			dp_prep_write_notify(&d[k], r, page_src(k), seg, page_dst(k, n),
					     page_len(k), k, 0xabc);
		else
			dp_prep_write(&d[k], r, page_src(k), seg, page_dst(k, n), page_len(k), k);
	}
	cr_assert_eq(dp_submit(q, d, n), (int)n);
	while (done < n) {
		struct dp_cqe c[64];
		int k = dp_poll(q, c, 64);

		cr_assert_geq(k, 0);
		for (int i = 0; i < k; i++) {
			cr_assert_eq(c[i].status, 0, "page %llu: %s",
				     (unsigned long long)c[i].user_data, dp_strerror(c[i].status));
			cr_assert_eq(c[i].flags & DP_CQE_F_GPU, DP_CQE_F_GPU);
		}
		done += (unsigned)k;
	}
	cr_assert_eq(dp_notify_wait(owner, &note, 1, 5000), 1, "no notification");
	cr_assert_eq(note.value, 0xabc);
	cr_assert_eq(note.offset, page_dst(note_k, n));
	cr_assert_eq(note.len, page_len(note_k));
	check_batch(dst, n, 50, "mixed batch");
	dp_close(writer);
	dp_close(owner);
	CK(cudaFree(src));
	CK(cudaFree(dst));
}

/* One submit of 64 GPU pages of one region and segment (one run of the
 * poller's fast path) with descriptors the run cannot take among them: one
 * past the segment's end (-EFAULT), one with a notify word but no flag
 * (-EINVAL), an empty one and one of 2 MiB (above the page size: the bulk
 * lane). Each gets its own answer; every other page lands. */
Test(gpu_pages, a_run_with_pages_it_cannot_take)
{
	const unsigned n = 64, bad_k = 20, notify_k = 40, empty_k = 50, big_k = 60;
	const uint64_t big = 2u << 20;
	struct dp_client *c;
	struct dp_desc d[64];
	struct dp_queue *q;
	void *src, *dst;
	uint8_t *h, *want;
	unsigned done = 0;
	int rs, rd, seg;

	GPU_REQUIRE();
	start_svc(&fab_svc[0], local_only);
	c = connect_client(&fab_svc[0], "gpu-pages-run");
	rs = gpu_region(c, SPAN, 70, &src);
	rd = gpu_region(c, SPAN, -1, &dst);
	export_segment(c, rd, "run-pages", DP_ACCESS_RW);
	seg = open_segment(c, NULL, "run-pages", DP_ACCESS_RW);
	q = make_queue(c, 256);
	for (unsigned k = 0; k < n; k++)
		dp_prep_write(&d[k], rs, page_src(k), seg, page_dst(k, n), page_len(k), k);
	d[bad_k].target_off = SPAN - page_len(bad_k) + 1;
	d[notify_k].notify = 7;
	d[empty_k].len = 0;
	d[big_k].local_off = 0;
	d[big_k].target_off = SPAN - big;
	d[big_k].len = big;
	cr_assert_eq(dp_submit(q, d, n), (int)n);
	while (done < n) {
		struct dp_cqe cq[64];
		int k = dp_poll(q, cq, 64);

		cr_assert_geq(k, 0);
		for (int i = 0; i < k; i++) {
			unsigned p = (unsigned)cq[i].user_data;
			int want_st = p == bad_k ? -EFAULT : p == notify_k ? -EINVAL : 0;
			uint64_t want_b = want_st ? 0 : d[p].len;

			cr_assert_eq(cq[i].status, want_st, "page %u: %s, want %s", p,
				     dp_strerror(cq[i].status), dp_strerror(want_st));
			cr_assert_eq(cq[i].bytes, want_b, "page %u: %llu bytes", p,
				     (unsigned long long)cq[i].bytes);
		}
		done += (unsigned)k;
	}
	h = malloc(SPAN);
	want = calloc(SPAN, 1);
	cr_assert(h && want);
	for (unsigned k = 0; k < n; k++) {
		if (k == bad_k || k == notify_k)
			continue;
		for (uint64_t i = 0; i < d[k].len; i++)
			want[d[k].target_off + i] = pattern_byte(70, d[k].local_off + i);
	}
	CK(cudaMemcpy(h, dst, SPAN, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < SPAN; i++)
		cr_assert_eq(h[i], want[i], "byte %zu is 0x%02x, want 0x%02x", i, h[i], want[i]);
	free(h);
	free(want);
	dp_close(c);
	CK(cudaFree(src));
	CK(cudaFree(dst));
}

/* 2048 pages of 256 KiB (512 MiB) on one queue; a 4 KiB GPU copy on another
 * queue while they run completes within gpu_fairness's bound of its time
 * alone (+ 100 us), and before the batch's last page. */
Test(gpu_pages, single_copy_beside_a_big_batch)
{
	const unsigned n = 2048;
	const uint64_t pg = 256 * 1024;
	struct dp_client *c;
	struct dp_queue *qa, *qb;
	void *bsrc, *bdst, *ssrc, *sdst;
	int rbs, rbd, rss, rsd, segb, segs;
	uint64_t alone[101], loaded[5];
	unsigned first = 0;

	GPU_REQUIRE();
	start_svc(&fab_svc[0], local_only);
	c = connect_client(&fab_svc[0], "gpu-pages-fair");
	qa = make_queue(c, 256);
	qb = make_queue(c, 0);
	rbs = gpu_region(c, n * pg, 60, &bsrc);
	rbd = gpu_region(c, n * pg, -1, &bdst);
	rss = gpu_region(c, 4096, 61, &ssrc);
	rsd = gpu_region(c, 4096, -1, &sdst);
	export_segment(c, rbd, "big-pages", DP_ACCESS_RW);
	export_segment(c, rsd, "small", DP_ACCESS_RW);
	segb = open_segment(c, NULL, "big-pages", DP_ACCESS_RW);
	segs = open_segment(c, NULL, "small", DP_ACCESS_RW);
	for (int i = 0; i < 101; i++) {
		struct dp_desc d;
		uint64_t t0 = now_ns();

		dp_prep_write(&d, rss, 0, segs, 0, 4096, 1);
		gpu_run_one_ok(qb, &d);
		alone[i] = now_ns() - t0;
	}
	qsort(alone, 101, sizeof(alone[0]), cmp_u64);
	for (int r = 0; r < 5; r++) {
		unsigned sent = 0, done = 0;
		uint64_t t0 = 0, small_done = 0;
		struct dp_desc d;
		struct dp_cqe cqe[64];

		while (done < n || !small_done) {
			while (sent < n) {
				dp_prep_write(&d, rbs, (uint64_t)sent * pg, segb,
					      (uint64_t)((sent * 97 + 13) % n) * pg, pg, sent);
				if (dp_submit(qa, &d, 1) != 1)
					break;
				sent++;
			}
			if (!t0 && sent >= 256) {
				dp_prep_write(&d, rss, 0, segs, 0, 4096, 2);
				t0 = now_ns();
				cr_assert_eq(dp_submit(qb, &d, 1), 1);
			}
			if (t0 && !small_done && dp_poll(qb, cqe, 1) == 1) {
				small_done = now_ns();
				cr_assert_eq(cqe[0].status, 0);
				if (done < n)
					first++;
			}
			int k = dp_poll(qa, cqe, 64);

			cr_assert_geq(k, 0);
			for (int i = 0; i < k; i++)
				cr_assert_eq(cqe[i].status, 0, "%s", dp_strerror(cqe[i].status));
			done += (unsigned)k;
		}
		loaded[r] = small_done - t0;
	}
	qsort(loaded, 5, sizeof(loaded[0]), cmp_u64);
	fprintf(stderr,
		"gpu_pages: 4 KiB copy alone p50 %.1f us; beside 2048 x 256 KiB pages p50 %.1f us, "
		"max %.1f us; finished before the batch %u/5\n",
		alone[50] / 1e3, loaded[2] / 1e3, loaded[4] / 1e3, first);
	cr_assert_leq(loaded[2], alone[50] + 100000ull,
		      "the 4 KiB copy took %.1f us beside the batch, alone %.1f us",
		      loaded[2] / 1e3, alone[50] / 1e3);
	cr_assert_geq(first, 4, "the 4 KiB copy finished before the batch %u of 5 times", first);
	gpu_expect(sdst, 4096, 61, 0, "the 4 KiB copy");
	dp_close(c);
	CK(cudaFree(bsrc));
	CK(cudaFree(bdst));
	CK(cudaFree(ssrc));
	CK(cudaFree(sdst));
}

#else

Test(gpu_pages, GpuPages)
{
	cr_skip_test("built without CUDA");
}

#endif /* DP_HAVE_CUDA */
