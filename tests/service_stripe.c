/* SPDX-License-Identifier: MIT */
/* service_stripe.c - large host copies shared out among pollers (--stripe-min; S4, S5): a WRITE or READ of --stripe-min bytes or more on a service with several pollers is copied in part by pollers that are idle (their stripe counters in the stats region grow), every byte lands exactly once where it should and nothing outside the range moves; a copy within one region whose ends overlap is still a memmove; --stripe-min 0 shares nothing; a small WRITE on another queue completes while a striped copy runs. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dp_stats.h"
#include "helpers.h"

TestSuite(service_stripe, .fini = svc_teardown, .timeout = 120);

#define BIG (96 * MiB)

/* Bytes the pollers copied for each other so far, summed. */
static uint64_t helped_bytes(void)
{
	const struct dp_stats_header *h = stats_map(&svc);
	uint64_t sum = 0;

	for (unsigned i = 0; i < h->npollers; i++)
		sum += __atomic_load_n(&poller_block(h, i)->stripe_bytes_helped, __ATOMIC_RELAXED);
	stats_unmap(h);
	return sum;
}

/* helped_bytes() once it is above `above`, or after 3 s (published by the
 * helpers when they next go idle). */
static uint64_t helped_bytes_above(uint64_t above)
{
	uint64_t deadline = now_ns() + 3000000000ull, v;

	while ((v = helped_bytes()) <= above && now_ns() < deadline)
		sleep_ms(5);
	return v;
}

struct big {
	struct dp_client *c;
	struct dp_queue *q;
	uint8_t *src, *dst;
	int rsrc, rdst, seg;
};

static void big_open(struct big *b, uint64_t len)
{
	b->c = connect_client(&svc, "stripe");
	b->q = make_queue(b->c, 16);
	b->rsrc = alloc_region(b->c, len, &b->src);
	b->rdst = alloc_region(b->c, len, &b->dst);
	b->seg = export_open(b->c, b->rdst, "stripe-dst", DP_ACCESS_RW, DP_ACCESS_RW);
}

Test(service_stripe, big_copies_are_shared_and_exact)
{
	const char *args[] = {"--provider", "none", "--pollers", "2", NULL};
	const uint64_t off = 4096 + 64, len = BIG - 2 * off;
	uint64_t before = 0, after = 0;
	struct big b;
	struct dp_cqe cqe;

	start_svc(&svc, args);
	big_open(&b, BIG);
	/* WRITE src -> dst, then READ dst -> src, each checked byte for byte
	 * with guards around it. The other poller may be slow to get a CPU
	 * on a loaded machine: up to five rounds for it to take a stripe. */
	for (unsigned round = 0; round < 5 && after == before; round++) {
		pattern_fill(b.src + off, len, 100 + round);
		guard_fill(b.dst, BIG, off, len);
		cqe = run1(b.q, true, b.rsrc, off, b.seg, off, len, round, 30000);
		cr_assert_eq(cqe.status, 0, "striped WRITE: %s", dp_strerror(cqe.status));
		cr_assert_eq(cqe.bytes, len);
		cr_assert(cqe.flags & DP_CQE_F_LOCAL);
		fab_check(b.dst + off, len, 100 + round, b.dst, b.dst + BIG, 0x5a, "striped WRITE");

		pattern_fill(b.dst + off, len, 200 + round);
		guard_fill(b.src, BIG, off, len);
		cqe = run1(b.q, false, b.rsrc, off, b.seg, off, len, 100 + round, 30000);
		cr_assert_eq(cqe.status, 0, "striped READ: %s", dp_strerror(cqe.status));
		cr_assert_eq(cqe.bytes, len);
		fab_check(b.src + off, len, 200 + round, b.src, b.src + BIG, 0x5a, "striped READ");
		after = helped_bytes_above(before);
	}
	cr_assert_gt(after, before, "no poller took a stripe of five 96 MiB copies");
	/* Exactly one completion each: nothing more is waiting. */
	cr_assert_eq(dp_poll(b.q, &cqe, 1), 0);
	dp_close(b.c);
}

/* Streamed copies (4 MiB and up) whose ends are on no 64 B boundary, from
 * and to different offsets in their pages, in a length that is no multiple
 * of the loop's eight pages: the head, the eight-page body and the tail all
 * land exactly, on one poller and on two (stripes offered). */
Test(service_stripe, unaligned_streamed_copy_is_exact)
{
	static const char *const one[] = {"--provider", "none", NULL};
	static const char *const two[] = {"--provider",	  "none",    "--pollers", "2",
					  "--stripe-min", "4194304", NULL};
	const uint64_t soff = 3, toff = 4096 + 1000 + 5, len = 9 * MiB + 4096 * 3 + 77;
	struct big b;
	struct dp_cqe cqe;

	for (int k = 0; k < 2; k++) {
		const char *const *args = k ? two : one;

		start_svc(&svc, args);
		big_open(&b, 10 * MiB);
		pattern_fill(b.src + soff, len, 300 + k);
		guard_fill(b.dst, 10 * MiB, toff, len);
		cqe = run1(b.q, true, b.rsrc, soff, b.seg, toff, len, k, 30000);
		cr_assert_eq(cqe.status, 0, "unaligned WRITE: %s", dp_strerror(cqe.status));
		cr_assert_eq(cqe.bytes, len);
		fab_check(b.dst + toff, len, 300 + k, b.dst, b.dst + 10 * MiB, 0x5a,
			  k ? "unaligned striped WRITE" : "unaligned streamed WRITE");
		dp_close(b.c);
		svc_teardown();
	}
}

/* Within one region, its ends overlapping: the result is memmove's, in
 * both directions (no stripe, no streaming store may run ahead). */
Test(service_stripe, overlapping_copy_is_a_memmove)
{
	const char *args[] = {"--provider",   "none",	 "--pollers", "2",
			      "--stripe-min", "4194304", NULL};
	const uint64_t len = 48 * MiB, shift = 3 * MiB + 192;
	uint8_t *want = malloc(BIG);
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_cqe cqe;
	uint8_t *mem;
	int r, seg;

	cr_assert_not_null(want);
	start_svc(&svc, args);
	c = connect_client(&svc, "overlap");
	q = make_queue(c, 4);
	r = alloc_region(c, BIG, &mem);
	seg = export_open(c, r, "self", DP_ACCESS_RW, DP_ACCESS_RW);
	for (int dir = 0; dir < 2; dir++) {
		uint64_t loff = dir ? shift : 0, toff = dir ? 0 : shift;

		pattern_fill(mem, BIG, 7 + dir);
		memcpy(want, mem, BIG);
		memmove(want + toff, want + loff, len);
		cqe = run1(q, true, r, loff, seg, toff, len, dir, 30000);
		cr_assert_eq(cqe.status, 0, "overlapping WRITE: %s", dp_strerror(cqe.status));
		cr_assert_eq(cqe.bytes, len);
		cr_assert(!memcmp(mem, want, BIG),
			  "an overlapping WRITE (%s) is not what memmove gives",
			  dir ? "backwards" : "forwards");
	}
	free(want);
	dp_close(c);
}

Test(service_stripe, stripe_min_zero_shares_nothing)
{
	const char *args[] = {"--provider", "none", "--pollers", "2", "--stripe-min", "0", NULL};
	struct big b;
	struct dp_cqe cqe;

	start_svc(&svc, args);
	big_open(&b, BIG);
	pattern_fill(b.src, BIG, 3);
	cqe = run1(b.q, true, b.rsrc, 0, b.seg, 0, BIG, 1, 30000);
	cr_assert_eq(cqe.status, 0);
	cr_assert_eq(pattern_check(b.dst, BIG, 3), -1);
	sleep_ms(50);
	cr_assert_eq(helped_bytes(), 0, "--stripe-min 0, and yet a poller took stripes");
	dp_close(b.c);
}

/* While a striped copy runs, a 64 B WRITE on a queue of the other poller
 * completes, and before the big one does. */
Test(service_stripe, small_write_beside_a_striped_copy)
{
	const char *args[] = {"--provider", "none", "--pollers", "2", NULL};
	const uint64_t len = 512 * MiB;
	struct dp_queue *small_q;
	struct dp_cqe cqe;
	struct dp_desc d;
	struct big b;
	uint64_t t0;
	int k;

	start_svc(&svc, args);
	big_open(&b, len);
	/* Queues go to the least loaded poller: the second one is the other
	 * poller's. */
	small_q = make_queue(b.c, 4);
	pattern_fill(b.src, len, 5);
	dp_prep_write(&d, b.rsrc, 0, b.seg, 0, len, 1);
	cr_assert_eq(dp_submit(b.q, &d, 1), 1);
	t0 = now_ns();
	cqe = run1(small_q, true, b.rsrc, 0, b.seg, len - 64, 64, 2, 10000);
	cr_assert_eq(cqe.status, 0);
	k = dp_poll(b.q, &cqe, 1);
	cr_assert_eq(k, 0, "the 512 MiB copy finished before a 64 B WRITE beside it (%.1f ms)",
		     (double)(now_ns() - t0) / 1e6);
	k = dp_wait(b.q, &cqe, 1, 30000);
	cr_assert_eq(k, 1);
	cr_assert_eq(cqe.status, 0);
	cr_assert_eq(pattern_check(b.dst, len - 64, 5), -1);
	dp_close(b.c);
}
