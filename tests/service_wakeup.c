/* SPDX-License-Identifier: MIT */
/* service_wakeup.c - the SQ's NEED_WAKEUP handshake between a real client and dataplaned (docs/ring.md, "Light producers"): where the kernel has membarrier the client's SQ is light (no fence after its commit) and the poller arms its sleep with membarrier; with --no-membarrier both fence. Either way a client that submits one WRITE at a time, with pauses around the poller's spin time and its gap between membarriers so that the poller is going to sleep or asleep when the descriptor comes, gets every completion, and none of the poller's sleeps in that time ends by its timeout (a lost doorbell would: the poller would sleep on to its 200 ms cap). */
#include <criterion/criterion.h>

#include "dp_client_pvt.h"
#include "dp_stats.h"
#include "helpers.h"

TestSuite(service_wakeup, .fini = svc_teardown, .timeout = 120);

#define CYCLES 2000

struct sleeps {
	uint64_t sleeps, wakeups;
};

static struct sleeps read_sleeps(void)
{
	const struct dp_stats_header *h = stats_map(&svc);
	const struct dp_stats_poller *p = poller_block(h, 0);
	struct sleeps s = {__atomic_load_n(&p->sleeps, __ATOMIC_RELAXED),
			   __atomic_load_n(&p->wakeups, __ATOMIC_RELAXED)};

	stats_unmap(h);
	return s;
}

/* The poller publishes its figures before it sleeps and once idle: after
 * a pause they are the ones of its last sleep. */
static struct sleeps settled_sleeps(void)
{
	sleep_ms(50);
	return read_sleeps();
}

static void sleep_wake(const char *const *args, bool want_light)
{
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_ring_pair *pair;
	struct sleeps a, b;
	int efd;
	uint64_t rnd = 0x5eed;
	uint8_t *src, *dst;
	int rs, rd, seg;

	start_svc(&svc, args);
	c = connect_client(&svc, "wakeup");
	rs = alloc_region(c, 4096, &src);
	rd = alloc_region(c, 4096, &dst);
	seg = export_open(c, rd, "wakeup-dst", DP_ACCESS_RW, DP_ACCESS_RW);
	q = make_queue(c, 8);
	cr_assert_eq(dp__queue_ring(q, &pair, &efd), 0);
	cr_assert_eq(pair->sq.light, want_light, "SQ light %u, want %d", pair->sq.light,
		     want_light);
	cr_assert_eq(pair->cq.light, 0, "a CQ is never light");
	a = settled_sleeps();
	for (uint64_t i = 0; i < CYCLES; i++) {
		uint64_t off = (i % 64) * 64;
		struct dp_cqe cqe;

		memset(src + off, (int)(i & 0xff), 64);
		cqe = run1(q, true, rs, off, seg, off, 64, i, 5000);
		cr_assert_eq(cqe.status, 0, "WRITE %llu: %s", (unsigned long long)i,
			     dp_strerror(cqe.status));
		cr_assert_eq(cqe.user_data, i);
		cr_assert_eq(memcmp(dst + off, src + off, 64), 0, "WRITE %llu's bytes",
			     (unsigned long long)i);
		/* 0-1.2 ms: around --spin-us 20 and the poller's gap
		 * between two membarriers (1 ms), so that the poller is
		 * spinning, arming its sleep or asleep. */
		usleep((useconds_t)(xorshift64(&rnd) % 1201));
	}
	b = settled_sleeps();
	cr_log_info("%d WRITEs: the poller slept %llu times, %llu ended by a doorbell", CYCLES,
		    (unsigned long long)(b.sleeps - a.sleeps),
		    (unsigned long long)(b.wakeups - a.wakeups));
	/* The sleep path must have been taken, and each sleep ended by the
	 * client's doorbell. */
	cr_assert_geq(b.sleeps - a.sleeps, CYCLES / 10, "the poller slept only %llu times",
		      (unsigned long long)(b.sleeps - a.sleeps));
	cr_assert_eq(b.sleeps - a.sleeps, b.wakeups - a.wakeups,
		     "%llu of the poller's sleeps timed out while WRITEs waited",
		     (unsigned long long)((b.sleeps - a.sleeps) - (b.wakeups - a.wakeups)));
	dp_close(c);
}

Test(service_wakeup, light_sq_where_membarrier)
{
	const char *args[] = {"--provider", "none", NULL};

	sleep_wake(args, dp_ring_asym_available());
}

Test(service_wakeup, fences_without_membarrier)
{
	const char *args[] = {"--provider", "none", "--no-membarrier", NULL};

	sleep_wake(args, false);
}
