/* fabric_small.c - small fabric WRITEs (tcp): posted with FI_INJECT yet completed only once the bytes are at the target, byte-accurate; no op or slice allocated per descriptor once the pools are warm (the rail counters of the stats region); a small WRITE to a peer that died still fails. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dp_stats.h"
#include "helpers.h"

TestSuite(fabric_small, .fini = fab_teardown, .timeout = 60);

#define LEN (4 * MiB)

/* A (fab_svc[0]) initiates, B (fab_svc[1]) exports "fab-small"; both
 * clients are ours, so B's memory is checked right here. */
static void pair_start(struct fab_pair *p)
{
	static const char *const timeout[] = {"--fabric-timeout-ms", "2000", NULL};

	fab_pair_start(p, "tcp", 0, timeout, timeout);
	fab_pair_seg(p, "fab-small", LEN, LEN, 64);
}

/* Rail 0's counters of service @s, summed over its pollers. */
static struct dp_stats_rail rail0(const struct svc *s)
{
	const struct dp_stats_header *h = stats_map(s);
	struct dp_stats_rail sum = {0};

	cr_assert(h, "no stats region");
	cr_assert_gt(h->nrails, 0, "no rail in the stats region");
	for (unsigned i = 0; i < h->npollers; i++) {
		const struct dp_stats_rail *r =
			(const void *)((const uint8_t *)h + h->rails_off + i * h->rail_size);

		sum.posted += __atomic_load_n(&r->posted, __ATOMIC_RELAXED);
		sum.completed += __atomic_load_n(&r->completed, __ATOMIC_RELAXED);
		sum.injected += __atomic_load_n(&r->injected, __ATOMIC_RELAXED);
		sum.allocs += __atomic_load_n(&r->allocs, __ATOMIC_RELAXED);
	}
	stats_unmap(h);
	return sum;
}

/* Small WRITEs go out with FI_INJECT (the counter moves by exactly their
 * number), yet each completes only once its bytes are in B's memory: they
 * are checked the moment the completion is seen, with guards either side.
 * A WRITE above the inject size (4 KiB) is posted plainly. */
Test(fabric_small, injected_writes_complete_after_delivery)
{
	static const uint64_t lens[] = {1, 8, 63, 64};
	struct dp_stats_rail before, after;
	struct fab_pair p;
	unsigned n = 0;

	pair_start(&p);
	before = rail0(&fab_svc[0]);
	for (unsigned i = 0; i < 400; i++) {
		uint64_t len = lens[i % 4], toff = 4096 + (i % 97) * 192 + (i % 5);
		struct dp_cqe c;

		guard_fill(p.tgt, LEN, toff, len);
		pattern_fill(p.loc + 128, len, i);
		c = run1(p.q, true, p.lreg, 128, p.seg, toff, len, i, 10000);
		cr_assert_eq(c.status, 0, "%llu B WRITE %u: %s", (unsigned long long)len, i,
			     dp_strerror(c.status));
		cr_assert_eq(c.flags & DP_CQE_F_FABRIC, DP_CQE_F_FABRIC, "not on the fabric path");
		/* Completed: the bytes are there now, not later. */
		fab_check(p.tgt + toff, len, i, p.tgt, p.tgt + LEN, 0x5a, "small WRITE");
		/* The source may change at once; the next WRITE's bytes are its own. */
		memset(p.loc + 128, 0xee, len);
		n++;
	}
	after = rail0(&fab_svc[0]);
	cr_assert_eq(after.injected - before.injected, n,
		     "%llu of %u small WRITEs were posted with FI_INJECT",
		     (unsigned long long)(after.injected - before.injected), n);
	cr_assert_geq(after.completed - before.completed, n);

	/* 4 KiB: above the inject size, posted as before. */
	guard_fill(p.tgt, LEN, 8192, 4096);
	pattern_fill(p.loc, 4096, 77);
	cr_assert_eq(run1(p.q, true, p.lreg, 0, p.seg, 8192, 4096, 9999, 10000).status, 0);
	fab_check(p.tgt + 8192, 4096, 77, p.tgt, p.tgt + LEN, 0x5a, "4 KiB WRITE");
	cr_assert_eq(rail0(&fab_svc[0]).injected, after.injected, "a 4 KiB WRITE was injected");
	/* READs are never injected, and still byte-accurate. */
	guard_fill(p.loc, LEN, 65536, 64);
	pattern_fill(p.tgt + 65536, 64, 78);
	cr_assert_eq(run1(p.q, false, p.lreg, 65536, p.seg, 65536, 64, 10000, 10000).status, 0);
	fab_check(p.loc + 65536, 64, 78, p.loc, p.loc + LEN, 0x5a, "64 B READ");
	cr_assert_eq(rail0(&fab_svc[0]).injected, after.injected, "a READ was injected");
}

/* @n WRITEs, up to 32 in flight: every 8th 2 MiB (two 1 MiB slices), the
 * others 64 B; all must succeed. */
static void stream(struct fab_pair *p, unsigned n)
{
	struct dp_cqe cqes[32];
	struct dp_desc d;
	unsigned sent = 0, done = 0;

	while (done < n) {
		while (sent < n && sent - done < 32) {
			uint64_t len = sent % 8 == 7 ? 2 * MiB : 64;
			uint64_t off = len > 64 ? 0 : 2 * MiB + (sent % 512) * 64;

			dp_prep_write(&d, p->lreg, off, p->seg, off, len, sent);
			submit_all(p->q, &d, 1, 10000);
			sent++;
		}
		int k = dp_wait(p->q, cqes, 32, 10000);

		cr_assert_gt(k, 0, "dp_wait: %s", dp_strerror(k));
		for (int i = 0; i < k; i++)
			cr_assert_eq(cqes[i].status, 0, "WRITE %llu: %s",
				     (unsigned long long)cqes[i].user_data,
				     dp_strerror(cqes[i].status));
		done += (unsigned)k;
	}
}

/* The pools are filled at start (the counter says so: it can fail) and then
 * grow no more: thousands of transfers, small and sliced, up to 32 in
 * flight, allocate no op and no slice. */
Test(fabric_small, no_allocation_per_descriptor)
{
	uint64_t warm, now;
	struct fab_pair p;

	pair_start(&p);
	cr_assert_geq(rail0(&fab_svc[0]).allocs, 2, "the pools were not filled at start");
	pattern_fill(p.loc, LEN, 5);
	stream(&p, 200);
	warm = rail0(&fab_svc[0]).allocs;
	stream(&p, 3000);
	now = rail0(&fab_svc[0]).allocs;
	cr_assert_eq(now, warm, "3000 transfers allocated %llu pool chunks",
		     (unsigned long long)(now - warm));
	cr_assert(!memcmp(p.tgt, p.loc, 2 * MiB), "2 MiB WRITEs: bytes differ");
	/* Slot r of the 64 B WRITEs is written when r % 8 != 7 (stream). */
	for (unsigned r = 0; r < 512; r++)
		cr_assert(r % 8 == 7 ||
				  !memcmp(p.tgt + 2 * MiB + r * 64, p.loc + 2 * MiB + r * 64, 64),
			  "64 B WRITE slot %u: bytes differ", r);
}

/* A small WRITE whose target died fails (it does not complete as if
 * delivered): the injected path reports errors as the plain one does. */
Test(fabric_small, injected_write_to_a_dead_peer_fails)
{
	struct dp_cqe c;
	struct fab_pair p;

	pair_start(&p);
	guard_fill(p.tgt, LEN, 0, 64);
	pattern_fill(p.loc, 64, 9);
	cr_assert_eq(run1(p.q, true, p.lreg, 0, p.seg, 0, 64, 1, 10000).status, 0);
	fab_check(p.tgt, 64, 9, p.tgt, p.tgt + LEN, 0x5a, "64 B WRITE");
	dp_close(p.cb);
	svc_kill(&fab_svc[1]);
	for (unsigned i = 0; i < 3; i++) {
		c = run1(p.q, true, p.lreg, 0, p.seg, 64 * i, 64, 2 + i, 10000);
		cr_assert(c.status == -EHOSTUNREACH || c.status == -ETIMEDOUT || c.status == -EIO ||
				  c.status == -ECONNRESET,
			  "a 64 B WRITE to a dead peer completed with %s", dp_strerror(c.status));
	}
	dp_close(p.ca);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0, "the initiator did not exit cleanly");
}
