/* fabric_stage.c - the stage engine (host staging of memory the rails cannot register) between two dataplaned over tcp and sockets, with host memory standing in for GPU memory (--stage-host): WRITE and READ 1 B..64 MiB byte-accurate, small slices through few buffers, many in flight, a peer SIGKILLed mid-transfer, and -ENOTSUP where staging is off or the owner could not register its export. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

TestSuite(fabric_stage, .fini = fab_teardown, .timeout = 90);

/* ---- WRITE and READ through the bounce buffers, byte-accurate ---- */

static void sizes_ab(const char *prov, const char *const *a_more, const char *const *b_more,
		     uint64_t max)
{
	static const struct xfer_shape xs[] = {
		{1, 5, 7},
		{4095, 1, 12345},
		{MiB + 12345, 3, 65536 + 3},
		{5 * MiB + 1, 4096, 17},
		{64 * MiB, 0, 65536},
	};
	const uint64_t llen = max + 8192, tlen = max + 65536;
	struct fab_pair p;

	fab_pair_start(&p, prov, 0, a_more, b_more);
	fab_pair_seg(&p, "stage-sizes", llen, tlen, 64);
	fab_pair_shapes(&p, xs, sizeof(xs) / sizeof(xs[0]), max, 60000, "staged ");
	fab_pair_stop(&p);
}

static void sizes(const char *prov, const char *const *a_more, uint64_t max)
{
	sizes_ab(prov, a_more, NULL, max);
}

static const char *const staged[] = {"--stage-host", NULL};
/* 64 KiB slices through 2 buffers: a 64 MiB transfer is 1024 slices, each
 * buffer reused 512 times. */
static const char *const staged_small[] = {"--stage-host", "--slice", "65536",
					   "--stage-bufs", "2",	      NULL};

Test(fabric_stage, tcp_sizes_1B_to_64MiB)
{
	sizes("tcp", staged, 64 * MiB);
}

Test(fabric_stage, sockets_sizes_1B_to_64MiB)
{
	sizes("sockets", staged, 64 * MiB);
}

Test(fabric_stage, tcp_small_slices_two_buffers)
{
	sizes("tcp", staged_small, 64 * MiB);
}

/* ---- many in flight over 4 queues on 2 pollers, sizes mixed ---- */

/* Op i's bytes: about 1 MiB, 3 MiB or 4 KiB, each a little off. */
static uint64_t op_len(unsigned i)
{
	return i % 3 == 0 ? MiB + i : i % 3 == 1 ? 3 * MiB - i : 4096 + i;
}

static void many_ab(const char *prov, const char *const *a_more, const char *const *b_more)
{
	struct fab_pair p;

	fab_pair_start(&p, prov, 0, a_more, b_more);
	fab_pair_many(&p, "stage-many", 4 * MiB, op_len, 60000);
	fab_pair_stop(&p);
}

static void many(const char *prov)
{
	static const char *const a_more[] = {"--stage-host", "--pollers", "2",
					     "--slice",	     "262144",	  NULL};

	many_ab(prov, a_more, NULL);
}

Test(fabric_stage, tcp_64_in_flight_4_queues)
{
	many("tcp");
}

Test(fabric_stage, sockets_64_in_flight_4_queues)
{
	many("sockets");
}

/* ---- a peer SIGKILLed mid-transfer: errors, never a hang ---- */

#define KILL_TIMEOUT_MS 2000
#define KILL_SLACK_MS 2000
#define KILL_SEG (64 * MiB)

/* Ends B, its client first. */
static void kill_b(void *arg)
{
	struct fab_pair *p = arg;

	dp_close(p->cb);
	p->cb = NULL;
	svc_kill(&fab_svc[1]);
}

static void peer_killed(const char *prov, const char *const *b_more)
{
	static const char *const a_more[] = {"--stage-host", "--fabric-timeout-ms", "2000", NULL};
	uint8_t *loc, *tgt;
	int lreg, treg, seg;
	struct dp_queue *q;
	struct dp_desc d;
	struct fab_pair p;

	fab_pair_start(&p, prov, 0, a_more, b_more);
	treg = alloc_region(p.cb, KILL_SEG, &tgt);
	export_segment(p.cb, treg, "victim", DP_ACCESS_RW);
	lreg = alloc_region(p.ca, KILL_SEG, &loc);
	pattern_fill(loc, KILL_SEG, 77);
	seg = open_segment(p.ca, p.peer_b, "victim", DP_ACCESS_RW);
	q = make_queue(p.ca, 128);
	/* Up to 32 x 2 MiB (WRITEs and READs) in flight; B dies once 16 are
	 * done, then 16 more are handed over for the dead peer. */
	fab_kill_run(&(struct kill_run){.q = q,
					.lreg = lreg,
					.seg = seg,
					.len = 2 * MiB,
					.inflight = 32,
					.mixed = true,
					.kill_after = 16,
					.answer_ms = KILL_TIMEOUT_MS + KILL_SLACK_MS,
					.kill = kill_b,
					.arg = &p});
	/* Nothing of the dead peer's transfers is left spinning, and the
	 * bounce buffers came back: a fresh peer is served through them. */
	{
		double cpu = cpu_share(fab_svc[0].pid, 500);

		cr_assert_lt(cpu, 0.5, "the idle survivor uses %.0f%% of a CPU", cpu * 100);
	}
	{
		const char *args[] = {"--provider", prov, "--server-name", "127.0.0.1", NULL};
		char peer[64];

		start_svc(&fab_svc[1], args);
		p.cb = connect_client(&fab_svc[1], "target2");
		treg = alloc_region(p.cb, 8 * MiB, &tgt);
		export_segment(p.cb, treg, "again", DP_ACCESS_RW);
		snprintf(peer, sizeof(peer), "127.0.0.1:%d", fab_rpc_port(&fab_svc[1]));
		seg = open_segment(p.ca, peer, "again", DP_ACCESS_RW);
		pattern_fill(loc, 8 * MiB, 99);
		dp_prep_write(&d, lreg, 0, seg, 0, 8 * MiB, 1u << 20);
		run_ok(q, &d, DP_CQE_F_FABRIC, 20000);
		cr_assert_eq(pattern_check(tgt, 8 * MiB, 99), -1, "WRITE after the kill");
	}
	fab_pair_stop(&p);
}

Test(fabric_stage, tcp_peer_killed_mid_transfer)
{
	peer_killed("tcp", NULL);
}

Test(fabric_stage, sockets_peer_killed_mid_transfer)
{
	peer_killed("sockets", NULL);
}

/* ---- -ENOTSUP: what cannot be done, said so ---- */

/* A descriptor that must fail with @status and report the fabric. */
static void fails(struct dp_queue *q, const struct dp_desc *d, int status, const char *what)
{
	struct dp_cqe cqe = run_wait(q, d, 10000);

	cr_assert_eq(cqe.status, status, "%s: %s, want %s", what, dp_strerror(cqe.status),
		     dp_strerror(status));
	cr_assert_eq(cqe.bytes, 0);
	cr_assert_eq(cqe.flags & DP_CQE_F_FABRIC, DP_CQE_F_FABRIC, "%s: flags 0x%x", what,
		     cqe.flags);
}

/* Memory the rails cannot register, with staging off: -ENOTSUP (not
 * -EHOSTUNREACH), while the same service still moves registered memory
 * and local copies. */
static void staging_off(const char *prov)
{
	static const char *const a_more[] = {"--stage-host", "--stage-bufs", "0", NULL};
	struct fab_pair p;
	uint8_t *home;
	int hreg, hseg;
	struct dp_desc d;

	fab_pair_start(&p, prov, 0, a_more, NULL);
	fab_pair_seg(&p, "stage-off", MiB, MiB, 16);
	memset(p.tgt, 0, MiB);
	pattern_fill(p.loc, MiB, 5);
	dp_prep_write(&d, p.lreg, 0, p.seg, 0, 4096, 1);
	fails(p.q, &d, -ENOTSUP, "WRITE, staging off");
	dp_prep_read(&d, p.lreg, 0, p.seg, 0, MiB, 2);
	fails(p.q, &d, -ENOTSUP, "READ, staging off");
	cr_assert_eq(pattern_check(p.loc, MiB, 5), -1, "a refused READ wrote bytes");
	for (unsigned i = 0; i < MiB; i++)
		cr_assert_eq(p.tgt[i], 0, "a refused WRITE wrote byte %u", i);
	/* Local copies are another engine's: unaffected. */
	hreg = alloc_region(p.ca, 4096, &home);
	hseg = export_open(p.ca, hreg, "home", DP_ACCESS_RW, DP_ACCESS_RW);
	dp_prep_write(&d, p.lreg, 0, hseg, 0, 4096, 3);
	run_ok(p.q, &d, DP_CQE_F_LOCAL, 5000);
	cr_assert_eq(pattern_check(home, 4096, 5), -1);
	fab_pair_stop(&p);
}

Test(fabric_stage, tcp_staging_off_is_enotsup)
{
	staging_off("tcp");
}

Test(fabric_stage, sockets_staging_off_is_enotsup)
{
	staging_off("sockets");
}

/* The owner could not register its export (it stands in for GPU memory on
 * rails without FI_HMEM) and does not stage it (--stage-bufs 0): the open
 * succeeds (not -ENOENT) and every transfer to it fails with -ENOTSUP (not
 * -EHOSTUNREACH), from registered and from staged memory alike; the
 * owner's peer stays usable. */
static const char *const unstaged[] = {"--stage-host", "--stage-bufs", "0", NULL};

static void owner_unregistered(const char *prov)
{
	const char *const *b_more = unstaged;
	static const char *const a_more[] = {"--pollers", "2", NULL};
	struct fab_pair p;
	uint8_t *loc, *tgt;
	int lreg, treg, seg, rc;
	struct dp_queue *q;
	struct dp_desc d;

	fab_pair_start(&p, prov, 0, a_more, b_more);
	treg = alloc_region(p.cb, MiB, &tgt);
	memset(tgt, 0, MiB);
	export_segment(p.cb, treg, "unreg", DP_ACCESS_RW);
	lreg = alloc_region(p.ca, MiB, &loc);
	rc = dp_segment_open(p.ca, p.peer_b, "unreg", DP_ACCESS_RW);
	cr_assert_geq(rc, 0,
		      "open of an unregistered export: %s (want it open, its "
		      "transfers ENOTSUP)",
		      dp_strerror(rc));
	seg = rc;
	q = make_queue(p.ca, 16);
	pattern_fill(loc, MiB, 9);
	for (unsigned i = 0; i < 3; i++) {
		dp_prep_write(&d, lreg, 0, seg, 0, 4096 << i, 10 + i);
		fails(q, &d, -ENOTSUP, "WRITE to an unregistered export");
		dp_prep_read(&d, lreg, 0, seg, 0, 4096 << i, 20 + i);
		fails(q, &d, -ENOTSUP, "READ of an unregistered export");
	}
	cr_assert_eq(pattern_check(loc, MiB, 9), -1, "a refused READ wrote bytes");
	for (unsigned i = 0; i < MiB; i++)
		cr_assert_eq(tgt[i], 0, "a refused WRITE wrote byte %u", i);
	fab_pair_stop(&p);
}

Test(fabric_stage, tcp_owner_not_staging_is_enotsup)
{
	owner_unregistered("tcp");
}

Test(fabric_stage, sockets_owner_not_staging_is_enotsup)
{
	owner_unregistered("sockets");
}

/* Staged memory (A) to an export its owner could not register and does
 * not stage (B, both with --stage-host): -ENOTSUP too, before any bounce
 * buffer is used. */
Test(fabric_stage, tcp_staged_to_unstaged_owner_is_enotsup)
{
	struct fab_pair p;
	struct dp_desc d;

	fab_pair_start(&p, "tcp", 0, staged, unstaged);
	fab_pair_seg(&p, "unreg2", MiB, MiB, 16);
	dp_prep_write(&d, p.lreg, 0, p.seg, 0, MiB, 1);
	fails(p.q, &d, -ENOTSUP, "staged WRITE to an unregistered export");
	dp_prep_read(&d, p.lreg, 0, p.seg, 0, MiB, 2);
	fails(p.q, &d, -ENOTSUP, "staged READ of an unregistered export");
	fab_pair_stop(&p);
}

/* ---- owner staging: the export's owner stages it for us ---- */

/* B's export is memory its rails do not register (--stage-host stands in
 * for GPU memory without FI_HMEM) and B stages it (its default
 * --stage-bufs): WRITE and READ succeed byte-accurately, from A's
 * registered host memory and from A's staged memory. */
static const char *const owner_stages[] = {"--stage-host", NULL};
static const char *const owner_small[] = {"--stage-host", "--slice", "65536",
					  "--stage-bufs", "2",	     NULL};

Test(fabric_stage, tcp_owner_staged_from_registered_1B_to_64MiB)
{
	sizes_ab("tcp", NULL, owner_stages, 64 * MiB);
}

Test(fabric_stage, tcp_owner_staged_from_staged_1B_to_64MiB)
{
	sizes_ab("tcp", staged, owner_stages, 64 * MiB);
}

/* The owner's slices (64 KiB, 2 buffers) smaller than the initiator's
 * (1 MiB): each request is served in 16 pieces. */
Test(fabric_stage, tcp_owner_staged_small_owner_slices)
{
	sizes_ab("tcp", NULL, owner_small, 5 * MiB + 1);
}

Test(fabric_stage, sockets_owner_staged_from_registered_1B_to_64MiB)
{
	sizes_ab("sockets", NULL, owner_stages, 64 * MiB);
}

Test(fabric_stage, tcp_owner_staged_64_in_flight_4_queues)
{
	static const char *const a_more[] = {"--pollers", "2", "--slice", "262144", NULL};

	many_ab("tcp", a_more, owner_stages);
}

Test(fabric_stage, tcp_owner_staged_owner_killed_mid_transfer)
{
	peer_killed("tcp", owner_stages);
}

/* The owner stages its export, but staging is off here (--stage-bufs 0):
 * nothing to carry the requests with, -ENOTSUP, bytes untouched. */
Test(fabric_stage, tcp_owner_staged_with_staging_off_here_is_enotsup)
{
	static const char *const a_off[] = {"--stage-bufs", "0", NULL};
	struct fab_pair p;
	uint8_t *loc, *tgt;
	int lreg, treg, seg;
	struct dp_queue *q;
	struct dp_desc d;

	fab_pair_start(&p, "tcp", 0, a_off, owner_stages);
	treg = alloc_region(p.cb, MiB, &tgt);
	memset(tgt, 0, MiB);
	export_segment(p.cb, treg, "staged-there", DP_ACCESS_RW);
	lreg = alloc_region(p.ca, MiB, &loc);
	pattern_fill(loc, MiB, 4);
	seg = open_segment(p.ca, p.peer_b, "staged-there", DP_ACCESS_RW);
	q = make_queue(p.ca, 16);
	dp_prep_write(&d, lreg, 0, seg, 0, MiB, 1);
	fails(q, &d, -ENOTSUP, "WRITE to an owner-staged export, staging off here");
	dp_prep_read(&d, lreg, 0, seg, 0, MiB, 2);
	fails(q, &d, -ENOTSUP, "READ of an owner-staged export, staging off here");
	cr_assert_eq(pattern_check(loc, MiB, 4), -1, "a refused READ wrote bytes");
	for (unsigned i = 0; i < MiB; i++)
		cr_assert_eq(tgt[i], 0, "a refused WRITE wrote byte %u", i);
	fab_pair_stop(&p);
}
