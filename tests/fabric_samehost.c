/* fabric_samehost.c - two dataplaned on one host: a segment of the other service is mapped (its memfd, passed over the same-host socket) and copied directly, DP_CQE_F_SAME_HOST; bytes checked 1 B..64 MiB and 64 in flight; --no-same-host on either side takes the fabric; an unexport, a new export of the name and the exporter's death are seen at once; read-only exports stay read-only; another fleet gets nothing. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dp_stats.h"
#include "helpers.h"

TestSuite(fabric_samehost, .fini = fab_teardown, .timeout = 90);

#define GUARD 0x5a

static void expect_same_host(struct dp_cqe c, uint64_t len, const char *what)
{
	cr_assert_eq(c.status, 0, "%s of %llu B: %s", what, (unsigned long long)len,
		     dp_strerror(c.status));
	cr_assert_eq(c.bytes, len, "%s: %llu bytes", what, (unsigned long long)c.bytes);
	cr_assert_eq(c.flags & (DP_CQE_F_SAME_HOST | DP_CQE_F_FABRIC | DP_CQE_F_LOCAL),
		     DP_CQE_F_SAME_HOST, "%s: flags %#x, want DP_CQE_F_SAME_HOST alone", what,
		     c.flags);
}

static uint64_t samehost_completions(const struct svc *s)
{
	const struct dp_stats_header *h = stats_map(s);
	uint64_t n = 0;

	for (unsigned i = 0; i < h->npollers; i++)
		n += __atomic_load_n(&poller_block(h, i)->path_ops[DP_STATS_PATH_SAMEHOST],
				     __ATOMIC_ACQUIRE);
	stats_unmap(h);
	return n;
}

Test(fabric_samehost, bytes_move_both_ways_without_the_fabric)
{
	static const struct xfer_shape xs[] = {{1, 5, 7},
					       {4096, 4096, 12345},
					       {65537, 3, 65536 + 3},
					       {MiB, 0, 1},
					       {64 * MiB, 0, 65536}};
	const uint64_t llen = 64 * MiB + 8192, tlen = 64 * MiB + 65536;
	uint64_t before;
	struct fab_pair p;

	fab_pair_start(&p, "tcp", FAB_PAIR_SAME_A | FAB_PAIR_SAME_B, NULL, NULL);
	/* Not page-aligned in its memfd's mapping? The region is; offsets are
	 * exercised by the descriptors. */
	fab_pair_seg(&p, "sh-sizes", llen, tlen, 64);
	before = samehost_completions(&fab_svc[0]);
	for (unsigned i = 0; i < sizeof(xs) / sizeof(xs[0]); i++) {
		uint64_t len = xs[i].len, lo = xs[i].loff, to = xs[i].toff;

		guard_fill(p.tgt, tlen, to, len);
		pattern_fill(p.loc + lo, len, 10 + i);
		expect_same_host(run1(p.q, true, p.lreg, lo, p.seg, to, len, 100 + i, 30000), len,
				 "WRITE");
		fab_check(p.tgt + to, len, 10 + i, p.tgt, p.tgt + tlen, GUARD, "WRITE");
		pattern_fill(p.tgt + to, len, 20 + i);
		guard_fill(p.loc, llen, lo, len);
		expect_same_host(run1(p.q, false, p.lreg, lo, p.seg, to, len, 200 + i, 30000), len,
				 "READ");
		fab_check(p.loc + lo, len, 20 + i, p.loc, p.loc + llen, GUARD, "READ");
	}
	/* The stats region counts them on the samehost path. */
	cr_assert_eq(samehost_completions(&fab_svc[0]) - before, 2 * sizeof(xs) / sizeof(xs[0]),
		     "samehost path completions");
	/* Beyond the segment: refused, nothing moved. */
	{
		struct dp_cqe c = run1(p.q, true, p.lreg, 0, p.seg, tlen - 10, 11, 900, 30000);

		cr_assert_eq(c.status, -EFAULT, "past the end: %s", dp_strerror(c.status));
	}
	dp_queue_destroy(p.q);
	fab_pair_stop(&p);
}

Test(fabric_samehost, many_in_flight_every_byte_checked)
{
	enum { N = 640, DEPTH = 64 };
	const uint64_t slot = 256 * 1024;
	struct dp_desc d[DEPTH];
	struct dp_cqe c[DEPTH];
	uint64_t rng = 42;
	struct fab_pair p;

	fab_pair_start(&p, "tcp", FAB_PAIR_SAME_A | FAB_PAIR_SAME_B, NULL, NULL);
	fab_pair_seg(&p, "sh-many", DEPTH * slot, DEPTH * slot, DEPTH);
	for (unsigned round = 0; round < N / DEPTH; round++) {
		uint64_t len[DEPTH];

		for (unsigned i = 0; i < DEPTH; i++) {
			len[i] = 1 + xorshift64(&rng) % slot;
			pattern_fill(p.loc + i * slot, len[i], round * DEPTH + i);
			dp_prep_write(&d[i], p.lreg, i * slot, p.seg, i * slot, len[i], i);
		}
		submit_all(p.q, d, DEPTH, 5000);
		reap(p.q, c, DEPTH, 30000);
		for (unsigned i = 0; i < DEPTH; i++) {
			expect_same_host(c[i], len[c[i].user_data], "WRITE");
			cr_assert_eq(pattern_check(p.tgt + c[i].user_data * slot,
						   len[c[i].user_data],
						   round * DEPTH + c[i].user_data),
				     -1, "round %u slot %llu: wrong bytes", round,
				     (unsigned long long)c[i].user_data);
		}
	}
	dp_queue_destroy(p.q);
	fab_pair_stop(&p);
}

/* --no-same-host on either end: the fabric, as between hosts. */
Test(fabric_samehost, no_same_host_on_either_side_takes_the_fabric)
{
	for (unsigned side = 0; side < 2; side++) {
		struct fab_pair p;
		struct dp_desc d;

		fab_pair_start(&p, "tcp",
			       (side != 0 ? FAB_PAIR_SAME_A : 0) |
				       (side != 1 ? FAB_PAIR_SAME_B : 0),
			       NULL, NULL);
		fab_pair_seg(&p, "sh-off", MiB, MiB, 8);
		pattern_fill(p.loc, MiB, 7);
		dp_prep_write(&d, p.lreg, 0, p.seg, 0, MiB, 1);
		run_ok(p.q, &d, DP_CQE_F_FABRIC, 30000);
		cr_assert_eq(pattern_check(p.tgt, MiB, 7), -1, "fabric WRITE (side %u)", side);
		dp_queue_destroy(p.q);
		fab_pair_stop(&p);
	}
}

/* An export that goes fails the next descriptor; a new export of the name
 * is opened anew, with its own memory. */
Test(fabric_samehost, unexport_and_reexport_are_seen_at_once)
{
	struct fab_pair p;
	uint8_t *loc, *t1, *t2;
	int lreg, r1, r2, seg;
	struct dp_queue *q;
	struct dp_cqe c;

	fab_pair_start(&p, "tcp", FAB_PAIR_SAME_A | FAB_PAIR_SAME_B, NULL, NULL);
	r1 = alloc_region(p.cb, MiB, &t1);
	export_segment(p.cb, r1, "sh-gone", DP_ACCESS_RW);
	lreg = alloc_region(p.ca, MiB, &loc);
	seg = open_segment(p.ca, p.peer_b, "sh-gone", DP_ACCESS_RW);
	q = make_queue(p.ca, 8);
	memset(loc, 0x11, 4096);
	expect_same_host(run1(q, true, lreg, 0, seg, 0, 4096, 1, 30000), 4096, "WRITE");
	cr_assert_eq(t1[4095], 0x11);
	cr_assert_eq(dp_segment_unexport(p.cb, "sh-gone"), 0);
	memset(t1, 0, 4096);
	c = run1(q, true, lreg, 0, seg, 0, 4096, 2, 30000);
	cr_assert_eq(c.status, -ECONNRESET, "WRITE after the unexport: %s", dp_strerror(c.status));
	cr_assert_eq(t1[0], 0, "a WRITE after the unexport landed");
	/* The same name again, another region: a new open maps it. */
	r2 = alloc_region(p.cb, MiB, &t2);
	export_segment(p.cb, r2, "sh-gone", DP_ACCESS_RW);
	c = run1(q, true, lreg, 0, seg, 0, 4096, 3, 30000);
	cr_assert_eq(c.status, -ECONNRESET, "the old handle reached the new export");
	dp_segment_close(p.ca, seg);
	seg = open_segment(p.ca, p.peer_b, "sh-gone", DP_ACCESS_RW);
	memset(loc, 0x22, 4096);
	expect_same_host(run1(q, true, lreg, 0, seg, 0, 4096, 4, 30000), 4096, "WRITE");
	cr_assert_eq(t2[0], 0x22, "the new export did not get the bytes");
	cr_assert_eq(t1[0], 0, "the old region got bytes");
	dp_queue_destroy(q);
	fab_pair_stop(&p);
}

/* The exporter dies: its segments fail at once (its pidfd), not after a
 * timeout, and the importer goes on serving. */
Test(fabric_samehost, exporter_death_fails_its_segments)
{
	struct fab_pair p;
	int status = 0;
	uint64_t t0;

	fab_pair_start(&p, "tcp", FAB_PAIR_SAME_A | FAB_PAIR_SAME_B, NULL, NULL);
	fab_pair_seg(&p, "sh-dies", MiB, MiB, 8);
	expect_same_host(run1(p.q, true, p.lreg, 0, p.seg, 0, 64, 1, 30000), 64, "WRITE");
	svc_kill(&fab_svc[1]);
	t0 = now_ns();
	for (unsigned i = 0; i < 200 && !status; i++) {
		status = run1(p.q, true, p.lreg, 0, p.seg, 0, 64, 10 + i, 30000).status;
		if (!status)
			sleep_ms(10);
	}
	cr_assert_eq(status, -ECONNRESET, "after the exporter's death: %s", dp_strerror(status));
	cr_assert_lt(now_ns() - t0, 1000000000ull, "took %llu ms",
		     (unsigned long long)((now_ns() - t0) / 1000000));
	/* The importer is fine: a local copy still runs. */
	{
		uint8_t *m2;
		int r2 = alloc_region(p.ca, 4096, &m2);
		int s2 = export_open(p.ca, r2, "sh-local", DP_ACCESS_RW, DP_ACCESS_RW);
		struct dp_desc d;

		dp_prep_write(&d, p.lreg, 0, s2, 0, 4096, 99);
		run_ok(p.q, &d, DP_CQE_F_LOCAL, 5000);
	}
	dp_queue_destroy(p.q);
	dp_close(p.ca);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
}

/* A read-only export is mapped read-only: WRITE refused, READ served. */
Test(fabric_samehost, read_only_stays_read_only)
{
	struct fab_pair p;
	uint8_t *loc, *tgt;
	int lreg, treg, seg, rc;
	struct dp_queue *q;
	struct dp_cqe c;

	fab_pair_start(&p, "tcp", FAB_PAIR_SAME_A | FAB_PAIR_SAME_B, NULL, NULL);
	treg = alloc_region(p.cb, MiB, &tgt);
	export_segment(p.cb, treg, "sh-ro", DP_ACCESS_READ);
	lreg = alloc_region(p.ca, MiB, &loc);
	rc = dp_segment_open(p.ca, p.peer_b, "sh-ro", DP_ACCESS_RW);
	cr_assert_eq(rc, -EPERM, "RW open of a read-only export: %d (%s)", rc, dp_strerror(rc));
	seg = open_segment(p.ca, p.peer_b, "sh-ro", DP_ACCESS_READ);
	q = make_queue(p.ca, 8);
	memset(tgt, 0x33, 4096);
	memset(loc, 0x44, 4096);
	c = run1(q, true, lreg, 0, seg, 0, 4096, 1, 30000);
	cr_assert_eq(c.status, -EPERM, "WRITE into a read-only export: %s", dp_strerror(c.status));
	cr_assert_eq(tgt[0], 0x33);
	expect_same_host(run1(q, false, lreg, 0, seg, 0, 4096, 2, 30000), 4096, "READ");
	cr_assert_eq(loc[4095], 0x33);
	dp_queue_destroy(q);
	fab_pair_stop(&p);
}

/* Another fleet's service on this host: no memory, no description. */
Test(fabric_samehost, another_fleet_gets_nothing)
{
	static const char *const other_key[] = {"--peer-key", "/tmp/dp-samehost-other.key", NULL};
	struct fab_pair p;
	int treg, rc;
	uint8_t *tgt;
	FILE *f = fopen("/tmp/dp-samehost-other.key", "w");

	cr_assert_not_null(f);
	fprintf(f, "another-fleet-fedcba9876543210\n");
	fclose(f);
	cr_assert_eq(chmod("/tmp/dp-samehost-other.key", 0600), 0);
	fab_pair_start(&p, "tcp", FAB_PAIR_SAME_A | FAB_PAIR_SAME_B, NULL, other_key);
	treg = alloc_region(p.cb, MiB, &tgt);
	export_segment(p.cb, treg, "sh-fleet", DP_ACCESS_RW);
	rc = dp_segment_open(p.ca, p.peer_b, "sh-fleet", DP_ACCESS_READ);
	cr_assert_eq(rc, -EACCES, "open from another fleet: %d (%s)", rc, dp_strerror(rc));
	unlink("/tmp/dp-samehost-other.key");
	fab_pair_stop(&p);
}

/* A file region's export reaches no other service, on this host either
 * (docs/files.md, "Not done"): the open is -ENOENT, as over the fabric,
 * not a handle whose transfers fail. */
Test(fabric_samehost, file_export_is_enoent)
{
	struct fab_pair p;
	int fd, reg, rc;

	file_dir();
	fd = file_make("samehost-file", MiB, 3, O_RDWR);
	fab_pair_start(&p, "tcp", FAB_PAIR_SAME_A | FAB_PAIR_SAME_B, NULL, NULL);
	reg = dp_register_file(p.cb, fd, 0, 0, DP_ACCESS_RW);
	cr_assert_geq(reg, 0, "dp_register_file: %s", dp_strerror(reg));
	export_segment(p.cb, reg, "sh-file", DP_ACCESS_RW);
	rc = dp_segment_open(p.ca, p.peer_b, "sh-file", DP_ACCESS_RW);
	cr_assert_eq(rc, -ENOENT, "open of a file export from this host: %d (%s)", rc,
		     dp_strerror(rc));
	close(fd);
	fab_pair_stop(&p);
	file_dir_remove();
}
