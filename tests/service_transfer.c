/* service_transfer.c - bytes arrive intact through a real dataplaned: two processes, 1 B..256 MiB, full queues, many queues, fairness. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

TestSuite(service_transfer, .fini = svc_teardown);

#define BIG (256ull << 20)
#define SEG_LEN (BIG + 65536)
#define GUARD 0xa5

/* Sizes, offsets and seeds of the two-process test. The last one ends
 * exactly at the segment's end; the offsets are deliberately unaligned. */
static const struct xfer {
	uint64_t len, local_off, target_off;
} xfers[] = {
	{1, 5, 7},
	{4096, 4096, 12345},
	{1u << 20, 3, 65536 + 3},
	{BIG, 0, 65536},
};
#define NXFERS (sizeof(xfers) / sizeof(xfers[0]))

static uint64_t write_seed(unsigned i)
{
	return 100 + i;
}

static uint64_t read_seed(unsigned i)
{
	return 200 + i;
}

/* Waits for one completion in a child (no Criterion there). */
static bool child_run(struct dp_queue *q, const struct dp_desc *d, uint64_t want_bytes)
{
	struct dp_cqe cqe;

	if (dp_submit(q, d, 1) != 1 || dp_wait(q, &cqe, 1, 10000) != 1)
		return false;
	return cqe.user_data == d->user_data && cqe.status == 0 && cqe.bytes == want_bytes;
}

/*
 * The writer: a separate process and client. For each size it WRITEs a
 * pattern into the segment, lets the exporter check it, then READs back what
 * the exporter wrote in its place. Each size starts when the exporter says
 * 'G' (its segment is all guard bytes again). Exit status: 0, or the failed step.
 */
static void writer_main(int to_parent, int from_parent)
{
	const size_t local_len = BIG + 4096;
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	uint8_t *local;
	int region, seg;

	if (dp_connect(svc.sock, "writer", &c))
		_exit(1);
	seg = dp_segment_open(c, NULL, "xfer", DP_ACCESS_RW);
	region = dp_alloc(c, local_len, 0, (void **)&local);
	if (seg < 0 || region < 0 || dp_queue_create(c, 16, &q))
		_exit(2);
	for (unsigned i = 0; i < NXFERS; i++) {
		const struct xfer *x = &xfers[i];

		if (!pipe_get(from_parent, 'G'))
			_exit(5);
		pattern_fill(local + x->local_off, x->len, write_seed(i));
		dp_prep_write(&d, region, x->local_off, seg, x->target_off, x->len, 10 + i);
		if (!child_run(q, &d, x->len))
			_exit(10 + (int)i);
		pipe_put(to_parent, 'W');
		if (!pipe_get(from_parent, 'F'))
			_exit(20 + (int)i);
		/* Guard bytes around the destination show a READ that spills. */
		memset(local, GUARD, local_len);
		dp_prep_read(&d, region, x->local_off, seg, x->target_off, x->len, 30 + i);
		if (!child_run(q, &d, x->len))
			_exit(30 + (int)i);
		if (pattern_check(local + x->local_off, x->len, read_seed(i)) != -1)
			_exit(40 + (int)i);
		if ((x->local_off && local[x->local_off - 1] != GUARD) ||
		    local[x->local_off + x->len] != GUARD)
			_exit(50 + (int)i);
		pipe_put(to_parent, 'R');
	}
	dp_close(c);
	_exit(0);
}

Test(service_transfer, two_processes_1b_4k_1m_256m, .timeout = 60)
{
	int to_parent[2], from_parent[2];
	struct dp_client *c;
	uint8_t *seg;
	int region;

	start_svc(&svc, local_only);
	c = connect_client(&svc, "exporter");
	region = alloc_region(c, SEG_LEN, &seg);
	memset(seg, GUARD, SEG_LEN);
	cr_assert_eq(dp_segment_export(c, region, "xfer", DP_ACCESS_RW), 0);
	child_pid = fork_piped(to_parent, from_parent);
	if (child_pid == 0)
		writer_main(to_parent[1], from_parent[0]);

	for (unsigned i = 0; i < NXFERS; i++) {
		const struct xfer *x = &xfers[i];
		uint64_t end = x->target_off + x->len;
		int64_t bad;

		pipe_put(from_parent[1], 'G');
		if (!pipe_get(to_parent[0], 'W'))
			cr_assert_fail("writer failed at size %llu (exit %d)",
				       (unsigned long long)x->len, wait_child(child_pid));
		/* The exporter sees the writer's bytes in its own mapping. */
		bad = pattern_check(seg + x->target_off, x->len, write_seed(i));
		cr_assert_eq(bad, -1, "size %llu: byte %lld differs", (unsigned long long)x->len,
			     (long long)bad);
		cr_assert_eq(seg[x->target_off - 1], GUARD, "size %llu: WRITE spilled before",
			     (unsigned long long)x->len);
		if (end < SEG_LEN)
			cr_assert_eq(seg[end], GUARD, "size %llu: WRITE spilled after",
				     (unsigned long long)x->len);
		pattern_fill(seg + x->target_off, x->len, read_seed(i));
		pipe_put(from_parent[1], 'F');
		if (!pipe_get(to_parent[0], 'R'))
			cr_assert_fail("writer's READ of %llu bytes failed (exit %d)",
				       (unsigned long long)x->len, wait_child(child_pid));
		memset(seg, GUARD, SEG_LEN);
	}
	cr_assert_eq(wait_child(child_pid), 0);
	dp_close(c);
	stop_svc(&svc);
}

/* A full queue of 4 KiB WRITEs, each slot its own pattern, then the same
 * number of READs back in reverse order: every completion arrives once. */
Test(service_transfer, full_queue_of_4k_writes, .timeout = 30)
{
	enum { DEPTH = 256, SZ = 4096 };
	static struct dp_desc d[DEPTH];
	static struct dp_cqe cqe[DEPTH];
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_queue_stats st;
	uint8_t *src, *dst, *back;
	int rs, rd, rb, seg;
	bool seen[2 * DEPTH] = {false};

	start_svc(&svc, local_only);
	c = connect_client(&svc, "full-queue");
	rs = alloc_region(c, DEPTH * SZ, &src);
	rd = alloc_region(c, DEPTH * SZ, &dst);
	rb = alloc_region(c, DEPTH * SZ, &back);
	seg = export_open(c, rd, "full", DP_ACCESS_RW, DP_ACCESS_RW);
	q = make_queue(c, DEPTH);

	for (unsigned i = 0; i < DEPTH; i++) {
		pattern_fill(src + i * SZ, SZ, i);
		dp_prep_write(&d[i], rs, i * SZ, seg, i * SZ, SZ, i);
	}
	cr_assert_eq(dp_submit(q, d, DEPTH), DEPTH, "a full queue is accepted in one call");
	cr_assert_eq(dp_submit(q, d, 1), 0, "no credit left: nothing more is accepted");
	reap(q, cqe, DEPTH, 10000);
	for (unsigned i = 0; i < DEPTH; i++) {
		cr_assert_lt(cqe[i].user_data, DEPTH);
		cr_assert_not(seen[cqe[i].user_data], "user_data %llu completed twice",
			      (unsigned long long)cqe[i].user_data);
		seen[cqe[i].user_data] = true;
		cr_assert_eq(cqe[i].status, 0, "%s", dp_strerror(cqe[i].status));
		cr_assert_eq(cqe[i].bytes, SZ);
		cr_assert(cqe[i].flags & DP_CQE_F_LOCAL);
	}
	for (unsigned i = 0; i < DEPTH; i++)
		cr_assert_eq(pattern_check(dst + i * SZ, SZ, i), -1, "slot %u", i);

	/* Slot i of the segment comes back into slot DEPTH-1-i. */
	for (unsigned i = 0; i < DEPTH; i++)
		dp_prep_read(&d[i], rb, (DEPTH - 1 - i) * SZ, seg, i * SZ, SZ, DEPTH + i);
	submit_all(q, d, DEPTH, 5000);
	reap(q, cqe, DEPTH, 10000);
	for (unsigned i = 0; i < DEPTH; i++) {
		uint64_t u = cqe[i].user_data;

		cr_assert(u >= DEPTH && u < 2 * DEPTH && !seen[u], "user_data %llu",
			  (unsigned long long)u);
		seen[u] = true;
		cr_assert_eq(cqe[i].status, 0);
		cr_assert_eq(cqe[i].bytes, SZ);
	}
	for (unsigned i = 0; i < DEPTH; i++)
		cr_assert_eq(pattern_check(back + (DEPTH - 1 - i) * SZ, SZ, i), -1, "slot %u", i);
	cr_assert_eq(dp_queue_stats(q, &st), 0);
	cr_assert_eq(st.submitted, 2 * DEPTH);
	cr_assert_eq(st.completed, 2 * DEPTH);
	cr_assert_eq(st.failed, 0);
	cr_assert_eq(st.bytes, 2ull * DEPTH * SZ);
	cr_assert_eq(st.in_flight, 0);
	dp_close(c);
	stop_svc(&svc);
}

/* Eight queues over two pollers, each filled to its depth with 16 KiB
 * WRITEs (some large enough for the chunked path) and reaped round robin:
 * every queue gets exactly its own completions. */
Test(service_transfer, several_queues_at_once, .timeout = 30)
{
	enum { NQ = 8, DEPTH = 64, SZ = 16384, BIGSZ = 192 * 1024 };
	static const char *const args[] = {"--pollers", "2", "--provider", "none", NULL};
	static struct dp_desc d[NQ][DEPTH];
	static bool seen[NQ][DEPTH];
	struct dp_queue *q[NQ];
	unsigned got[NQ] = {0}, total = 0;
	struct dp_client *c;
	uint8_t *src, *dst;
	const uint64_t slot = BIGSZ; /* room for the largest copy */
	int rs, rd, seg;
	uint64_t deadline;

	start_svc(&svc, args);
	c = connect_client(&svc, "queues");
	rs = alloc_region(c, NQ * DEPTH * slot, &src);
	rd = alloc_region(c, NQ * DEPTH * slot, &dst);
	seg = export_open(c, rd, "queues", DP_ACCESS_RW, DP_ACCESS_WRITE);
	for (unsigned i = 0; i < NQ; i++)
		q[i] = make_queue(c, DEPTH);
	for (unsigned i = 0; i < NQ; i++)
		for (unsigned j = 0; j < DEPTH; j++) {
			uint64_t off = (i * DEPTH + j) * slot, len = j % 8 == 7 ? BIGSZ : SZ;

			pattern_fill(src + off, len, i * DEPTH + j);
			dp_prep_write(&d[i][j], rs, off, seg, off, len, (uint64_t)i << 32 | j);
		}
	/* Interleaved submission: a burst of 8 on each queue in turn. */
	for (unsigned j = 0; j < DEPTH; j += 8)
		for (unsigned i = 0; i < NQ; i++)
			submit_all(q[i], &d[i][j], 8, 5000);
	deadline = now_ns() + 20000000000ull;
	while (total < NQ * DEPTH) {
		cr_assert_lt(now_ns(), deadline, "%u of %u completions", total, NQ * DEPTH);
		for (unsigned i = 0; i < NQ; i++) {
			struct dp_cqe cqe[DEPTH];
			int k = dp_poll(q[i], cqe, DEPTH);

			cr_assert_geq(k, 0, "dp_poll: %s", dp_strerror(k));
			for (int n = 0; n < k; n++) {
				unsigned qi = (unsigned)(cqe[n].user_data >> 32);
				unsigned j = (unsigned)(cqe[n].user_data & 0xffffffffu);

				cr_assert_eq(qi, i, "queue %u got a completion of queue %u", i, qi);
				cr_assert_lt(j, DEPTH);
				cr_assert_not(seen[i][j], "queue %u slot %u completed twice", i, j);
				seen[i][j] = true;
				cr_assert_eq(cqe[n].status, 0, "%s", dp_strerror(cqe[n].status));
				cr_assert_eq(cqe[n].bytes, d[i][j].len);
			}
			got[i] += (unsigned)k;
			total += (unsigned)k;
		}
	}
	for (unsigned i = 0; i < NQ; i++) {
		struct dp_queue_stats st;

		cr_assert_eq(got[i], DEPTH);
		cr_assert_eq(dp_queue_stats(q[i], &st), 0);
		cr_assert_eq(st.completed, DEPTH);
		cr_assert_eq(st.in_flight, 0);
		for (unsigned j = 0; j < DEPTH; j++) {
			uint64_t off = (i * DEPTH + j) * slot;

			cr_assert_eq(pattern_check(dst + off, d[i][j].len, i * DEPTH + j), -1,
				     "queue %u slot %u", i, j);
		}
	}
	dp_close(c);
	stop_svc(&svc);
}

/* Word i of the big buffers: position-dependent, so a misplaced chunk shows. */
static uint64_t big_word(uint64_t i)
{
	return (i + 1) * 0x9e3779b97f4a7c15ull;
}

/*
 * A region of `len` bytes in a memfd the test never maps: it is filled and
 * checked with pwrite/pread. Page faults are slow on some hosts (sandboxed
 * kernels), and the big buffers would otherwise cost seconds of faulting.
 */
static int unmapped_region(struct dp_client *c, uint64_t len, int *fd)
{
	int region;

	*fd = memfd_create("fairness", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	cr_assert_geq(*fd, 0);
	cr_assert_eq(ftruncate(*fd, (off_t)len), 0);
	region = dp_register_fd(c, *fd, 0, len);
	cr_assert_geq(region, 0, "dp_register_fd: %s", dp_strerror(region));
	return region;
}

#define BUFW (1u << 19) /* words per pwrite/pread: 4 MiB */

static void big_fill(int fd, uint64_t len)
{
	static uint64_t buf[BUFW];

	for (uint64_t w = 0; w < len / 8; w += BUFW) {
		for (uint64_t i = 0; i < BUFW; i++)
			buf[i] = big_word(w + i);
		cr_assert_eq(pwrite(fd, buf, sizeof(buf), (off_t)(w * 8)), (ssize_t)sizeof(buf));
	}
}

/* Index of the first wrong word, or -1. */
static int64_t big_check(int fd, uint64_t len)
{
	static uint64_t buf[BUFW];

	for (uint64_t w = 0; w < len / 8; w += BUFW) {
		cr_assert_eq(pread(fd, buf, sizeof(buf), (off_t)(w * 8)), (ssize_t)sizeof(buf));
		for (uint64_t i = 0; i < BUFW; i++)
			if (buf[i] != big_word(w + i))
				return (int64_t)(w + i);
	}
	return -1;
}

/*
 * A 1 GiB copy on one queue must not stall 64-byte WRITEs on another queue
 * of the same poller: the copy engine works in bounded chunks. Small writes
 * run back to back while the big copy is in flight; the first must finish
 * while the copy is still running, and their latency must be a small
 * fraction of the copy's duration.
 */
Test(service_transfer, small_write_not_stalled_by_1gib_copy, .timeout = 60)
{
	enum { SMALL = 64, MAXSMALL = 100000 };
	const uint64_t big = 1ull << 30;
	static uint64_t lat[MAXSMALL];
	struct dp_client *c;
	struct dp_queue *qbig, *qsmall;
	struct dp_desc d;
	struct dp_cqe cqe;
	uint64_t t0, tbig = 0, total;
	uint8_t *ssrc, *sdst;
	int rbs, rbd, rss, rsd, bseg, sseg, fsrc, fdst;
	int64_t bad;
	unsigned n = 0;

	start_svc(&svc, local_only);
	c = connect_client(&svc, "fairness");
	rbs = unmapped_region(c, big, &fsrc);
	rbd = unmapped_region(c, big, &fdst);
	rss = alloc_region(c, 1 << 20, &ssrc);
	rsd = alloc_region(c, 1 << 20, &sdst);
	bseg = export_open(c, rbd, "big", DP_ACCESS_RW, DP_ACCESS_RW);
	sseg = export_open(c, rsd, "small", DP_ACCESS_RW, DP_ACCESS_RW);
	qbig = make_queue(c, 4);
	qsmall = make_queue(c, 4);
	big_fill(fsrc, big);
	pattern_fill(ssrc, 1 << 20, 2);

	dp_prep_write(&d, rbs, 0, bseg, 0, big, 1);
	t0 = now_ns();
	submit_all(qbig, &d, 1, 5000);
	while (!tbig) {
		uint64_t off = (uint64_t)(n % 16384) * SMALL, t1;
		int k;

		cr_assert_lt(n, MAXSMALL);
		dp_prep_write(&d, rss, off, sseg, off, SMALL, 1000 + n);
		t1 = now_ns();
		cqe = run_wait(qsmall, &d, 5000);
		lat[n] = now_ns() - t1;
		cr_assert_eq(cqe.status, 0);
		cr_assert_eq(cqe.bytes, SMALL);
		cr_assert_eq(memcmp(sdst + off, ssrc + off, SMALL), 0, "small write %u", n);
		n++;
		k = dp_poll(qbig, &cqe, 1);
		cr_assert_geq(k, 0);
		if (k) {
			tbig = now_ns();
			cr_assert_gt(n, 1,
				     "the big copy completed before the first 64-byte write "
				     "(latency %.1f ms): it stalled the other queue",
				     lat[0] / 1e6);
			cr_assert_eq(cqe.status, 0);
			cr_assert_eq(cqe.bytes, big);
		}
	}
	total = tbig - t0;
	qsort(lat, n, sizeof(lat[0]), cmp_u64);
	cr_log_info("1 GiB copy %.1f ms; %u small writes meanwhile: median %.3f ms, max %.3f ms",
		    total / 1e6, n, lat[n / 2] / 1e6, lat[n - 1] / 1e6);
	cr_assert_geq(n, 10, "only %u small writes during a %.1f ms copy", n, total / 1e6);
	cr_assert_lt(lat[n / 2], total / 20, "median small-write latency %.3f ms vs copy %.1f ms",
		     lat[n / 2] / 1e6, total / 1e6);
	cr_assert_lt(lat[n - 1], total / 2, "worst small-write latency %.3f ms vs copy %.1f ms",
		     lat[n - 1] / 1e6, total / 1e6);
	bad = big_check(fdst, big);
	cr_assert_eq(bad, -1, "the 1 GiB copy differs at word %lld", (long long)bad);
	close(fsrc);
	close(fdst);
	dp_close(c);
	stop_svc(&svc);
}
