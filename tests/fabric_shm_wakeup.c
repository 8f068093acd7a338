/* fabric_shm_wakeup.c - two services over shm (one host, --no-same-host): the target's poller 0 serves each of a peer's WRITEs and READs in its progress, never after a sleep its cap ended (before, every 64 B WRITE over shm took a millisecond); told by the stats region, not by a clock. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dp_stats.h"
#include "helpers.h"

TestSuite(fabric_shm_wakeup, .fini = fab_teardown, .timeout = 60);

#define LEN (1 * MiB)
#define OPS 400

struct target_waits {
	uint64_t passes, late, sleeps;
};

/* Poller 0 of service @s (the one peers target): fabric progress passes
 * that served peers' RMA, those right after a capped sleep, its sleeps. */
static struct target_waits target_waits(const struct svc *s)
{
	const struct dp_stats_header *h;
	const struct dp_stats_poller *pb;
	struct target_waits w;

	sleep_ms(20); /* the poller publishes its block at its next loop */
	h = stats_map(s);
	pb = poller_block(h, 0);
	w.passes = __atomic_load_n(&pb->fabric_target_passes, __ATOMIC_RELAXED);
	w.late = __atomic_load_n(&pb->fabric_target_late, __ATOMIC_RELAXED);
	w.sleeps = __atomic_load_n(&pb->sleeps, __ATOMIC_RELAXED);
	stats_unmap(h);
	return w;
}

/*
 * B spins up to 200 ms after its last work (--spin-us), far longer than a
 * round trip here, so a B that counts a peer's RMA as work never sleeps
 * during the loop. Before the fix it counted none: it slept after 200 ms of
 * "idleness" whatever A wrote, and from then on each operation waited for
 * its 1 ms cap (a late pass each). One WRITE or READ at a time, every byte
 * checked the moment it completes.
 */
Test(fabric_shm_wakeup, peer_ops_served_without_timed_waits)
{
	static const char *const b_more[] = {"--spin-us", "200000", "--pollers", "1", NULL};
	static const char *const a_more[] = {"--pollers", "1", NULL};
	struct target_waits before, after;
	struct fab_pair p;

	fab_pair_start(&p, "shm", 0, a_more, b_more);
	fab_pair_seg(&p, "shm-wakeup", LEN, LEN, 8);
	/* Warm-up: the first operation may find B asleep (its cap wakes it). */
	for (unsigned i = 0; i < 16; i++) {
		struct dp_cqe c = run1(p.q, true, p.lreg, 0, p.seg, 0, 64, i, 10000);

		cr_assert_eq(c.status, 0, "warm-up WRITE %u: %s", i, dp_strerror(c.status));
	}
	before = target_waits(&fab_svc[1]);
	for (unsigned i = 0; i < OPS; i++) {
		uint64_t toff = 4096 + (i % 61) * 128 + (i % 3);
		bool write = i % 4 != 3;
		struct dp_cqe c;

		if (write) {
			guard_fill(p.tgt, LEN, toff, 64);
			pattern_fill(p.loc + 256, 64, i);
		} else {
			pattern_fill(p.tgt + toff, 64, i);
			guard_fill(p.loc, LEN, 256, 64);
		}
		c = run1(p.q, write, p.lreg, 256, p.seg, toff, 64, i, 10000);
		cr_assert_eq(c.status, 0, "64 B %s %u: %s", write ? "WRITE" : "READ", i,
			     dp_strerror(c.status));
		cr_assert_eq(c.flags & DP_CQE_F_FABRIC, DP_CQE_F_FABRIC, "not on the fabric path");
		if (write)
			fab_check(p.tgt + toff, 64, i, p.tgt, p.tgt + LEN, 0x5a, "WRITE");
		else
			fab_check(p.loc + 256, 64, i, p.loc, p.loc + LEN, 0x5a, "READ");
	}
	after = target_waits(&fab_svc[1]);
	cr_assert_gt(after.passes - before.passes, 0,
		     "B's poller 0 never saw the peer's RMA it served (fabric_target_passes "
		     "flat): shm's counters are not read");
	cr_assert_eq(after.late - before.late, 0,
		     "%llu of %u operations were served only after B's sleep cap ran out "
		     "(fabric_target_late; %llu sleeps)",
		     (unsigned long long)(after.late - before.late), OPS,
		     (unsigned long long)(after.sleeps - before.sleeps));
	fab_pair_stop(&p);
}
