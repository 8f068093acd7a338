/* SPDX-License-Identifier: MIT */
/* fabric_unexport.c - an owner reached by host:port unexports one segment while a peer has it and another of the owner's open: WRITEs to it fail -ECONNRESET (the owner's provider refused them on the revoked key; tcp closed the connection, cancelling the other segment's slices too), the other handle keeps working without a re-open, one WRITE at a time and with 32 in flight over both (tcp, sockets). */
#include <criterion/criterion.h>
#include <string.h>

#include "helpers.h"

TestSuite(fabric_unexport, .fini = fab_teardown, .timeout = 60);

/* B exports "kept" beside p->seg's export; A opens it. */
static int open_kept(struct fab_pair *p, uint8_t **tgt)
{
	int r = alloc_region(p->cb, MiB, tgt);

	export_segment(p->cb, r, "kept", DP_ACCESS_RW);
	return open_segment(p->ca, p->peer_b, "kept", DP_ACCESS_RW);
}

static void one_at_a_time(const char *prov)
{
	struct fab_pair p;
	struct dp_desc d;
	struct dp_cqe c;
	uint8_t *kept;
	int sk;

	fab_pair_start(&p, prov, 0, NULL, NULL);
	fab_pair_seg(&p, "gone", MiB, MiB, 16);
	sk = open_kept(&p, &kept);
	pattern_fill(p.loc, MiB, 5);
	dp_prep_write(&d, p.lreg, 0, p.seg, 0, 4096, 1);
	run_ok(p.q, &d, DP_CQE_F_FABRIC, 5000);
	dp_prep_write(&d, p.lreg, 0, sk, 0, 4096, 2);
	run_ok(p.q, &d, DP_CQE_F_FABRIC, 5000);

	cr_assert_eq(dp_segment_unexport(p.cb, "gone"), 0);
	memset(p.tgt, 0, 8192);
	dp_prep_write(&d, p.lreg, 0, p.seg, 0, 4096, 3);
	c = run_wait(p.q, &d, 10000);
	cr_assert_eq(c.status, -ECONNRESET, "WRITE to the unexported segment: %s",
		     dp_strerror(c.status));
	cr_assert_eq(p.tgt[0], 0, "a WRITE after the unexport landed");
	/* The other export of the same peer: no re-open. */
	for (unsigned i = 0; i < 3; i++) {
		memset(kept, 0, MiB);
		dp_prep_write(&d, p.lreg, 0, sk, 4096 * i, 4096, 4 + i);
		c = run_wait(p.q, &d, 10000);
		cr_assert_eq(c.status, 0, "%s: WRITE %u to the other segment: %s", prov, i,
			     dp_strerror(c.status));
		cr_assert_eq(pattern_check(kept + 4096 * i, 4096, 5), -1);
	}
	/* The unexported one stays dead. */
	dp_prep_write(&d, p.lreg, 0, p.seg, 0, 64, 9);
	c = run_wait(p.q, &d, 10000);
	cr_assert_eq(c.status, -ECONNRESET, "%s", dp_strerror(c.status));
	fab_pair_stop(&p);
}

Test(fabric_unexport, tcp_one_at_a_time)
{
	one_at_a_time("tcp");
}

Test(fabric_unexport, sockets_one_at_a_time)
{
	one_at_a_time("sockets");
}

/* 32 WRITEs of 64 KiB in flight, to both segments in turn; "gone" is
 * unexported once 64 have completed, the stream goes on 300 ms more. */
static void in_flight(const char *prov)
{
	enum { DEPTH = 32, LEN = 64 * 1024 };
	unsigned sent = 0, reaped = 0, inflight = 0, kept_ok = 0, gone_ok = 0, gone_reset = 0;
	uint64_t t_unexport = 0;
	struct fab_pair p;
	struct dp_desc d;
	uint8_t *kept;
	int sk;

	fab_pair_start(&p, prov, 0, NULL, NULL);
	fab_pair_seg(&p, "gone", MiB, MiB, 2 * DEPTH);
	sk = open_kept(&p, &kept);
	pattern_fill(p.loc, MiB, 7);
	while (!t_unexport || now_ns() < t_unexport + 300000000ull || reaped < sent) {
		struct dp_cqe cqe[DEPTH];
		int k;

		if (!t_unexport && reaped >= 64) {
			cr_assert_eq(dp_segment_unexport(p.cb, "gone"), 0);
			t_unexport = now_ns();
		}
		while (inflight < DEPTH && (!t_unexport || now_ns() < t_unexport + 300000000ull)) {
			/* Even user_data: "gone"; odd: "kept". */
			int seg = sent % 2 ? sk : p.seg;

			dp_prep_write(&d, p.lreg, 0, seg, (sent / 2 % 16) * LEN, LEN, sent);
			if (dp_submit(p.q, &d, 1) != 1)
				break;
			sent++;
			inflight++;
		}
		k = dp_wait(p.q, cqe, DEPTH, 100);
		cr_assert_geq(k, 0, "dp_wait: %s", dp_strerror(k));
		for (int i = 0; i < k; i++) {
			int st = cqe[i].status;

			if (cqe[i].user_data % 2) {
				cr_assert_eq(st, 0, "%s: WRITE %llu to the kept segment: %s", prov,
					     (unsigned long long)cqe[i].user_data, dp_strerror(st));
				kept_ok++;
			} else if (st) {
				cr_assert(t_unexport, "WRITE %llu failed before the unexport: %s",
					  (unsigned long long)cqe[i].user_data, dp_strerror(st));
				cr_assert_eq(st, -ECONNRESET,
					     "%s: WRITE %llu to the unexported: %s", prov,
					     (unsigned long long)cqe[i].user_data, dp_strerror(st));
				gone_reset++;
			} else {
				gone_ok++;
			}
		}
		reaped += (unsigned)k;
		inflight -= (unsigned)k;
		cr_assert(!t_unexport || now_ns() < t_unexport + 20000000000ull,
			  "%u WRITEs unanswered 20 s after the unexport", sent - reaped);
	}
	cr_log_info("%s: %u WRITEs: kept %u ok; unexported %u ok, %u -ECONNRESET", prov, sent,
		    kept_ok, gone_ok, gone_reset);
	cr_assert_gt(gone_reset, 0, "no WRITE met the unexport");
	cr_assert_gt(kept_ok, 64, "the kept segment's stream stopped");
	cr_assert_eq(pattern_check(kept, LEN, 7), -1);
	fab_pair_stop(&p);
}

Test(fabric_unexport, tcp_in_flight)
{
	in_flight("tcp");
}

Test(fabric_unexport, sockets_in_flight)
{
	in_flight("sockets");
}
