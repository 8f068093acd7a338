/* SPDX-License-Identifier: MIT */
/* service_fastpath.c - the poller's burst fast path (runs of host WRITEs/READs) gives, descriptor by descriptor, what the general path gives: in one burst whose runs change key (opcode, region, segment), are broken by invalid descriptors, by a length whose range check fails where the run's passed, and by copies above --inline-max, every completion has its status, bytes and flags and every byte lands where it should. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <string.h>

#include "helpers.h"

TestSuite(service_fastpath, .fini = svc_teardown);

#define RLEN (64u * 1024)
#define N 32 /* one burst (DP_BURST) */

enum { A_SEED = 11, B_SEED = 12, C_SEED = 13 };

static struct dp_desc mk(uint8_t op, int region, uint64_t loff, int seg, uint64_t toff,
			 uint64_t len)
{
	return (struct dp_desc){.opcode = op,
				.region = (uint32_t)region,
				.local_off = loff,
				.segment = (uint32_t)seg,
				.target_off = toff,
				.len = len};
}

Test(service_fastpath, mixed_runs_in_one_burst, .timeout = 30)
{
	/* --copy-chunk 4096 makes --inline-max 4096: an 8 KiB copy is queued. */
	const char *args[] = {"--provider", "none", "--copy-chunk", "4096", NULL};
	static struct dp_desc d[N];
	static struct dp_cqe cqe[N];
	static uint8_t want_a[RLEN], want_b[RLEN], want_c[RLEN];
	int want[N], a, b, c, sb, sc;
	uint64_t want_bytes[N], moved = 0;
	bool seen[N] = {false};
	struct dp_queue_stats st;
	struct dp_client *cl;
	struct dp_queue *q;
	uint8_t *ap, *bp, *cp;

	start_svc(&svc, args);
	cl = connect_client(&svc, "fastpath");
	a = alloc_region(cl, RLEN, &ap);
	b = alloc_region(cl, RLEN, &bp);
	c = alloc_region(cl, RLEN, &cp);
	pattern_fill(ap, RLEN, A_SEED);
	pattern_fill(bp, RLEN, B_SEED);
	pattern_fill(cp, RLEN, C_SEED);
	memcpy(want_a, ap, RLEN);
	memcpy(want_b, bp, RLEN);
	memcpy(want_c, cp, RLEN);
	sb = export_open(cl, b, "b", DP_ACCESS_RW, DP_ACCESS_RW);
	sc = export_open(cl, c, "c", DP_ACCESS_RW, DP_ACCESS_RW);
	q = make_queue(cl, 64);

	/* Every successful descriptor touches its own bytes: no two overlap,
	 * so the expected images do not depend on the order of execution. */
	for (unsigned i = 0; i < N; i++) {
		uint64_t off = i * 1024;

		want[i] = 0;
		switch (i) {
		case 5: /* past the target's end, in a run of the same key */
			d[i] = mk(DP_OP_WRITE, a, off, sb, RLEN - 32, 64);
			want[i] = -EFAULT;
			break;
		case 6: /* the same key, notify set without its flag */
			d[i] = mk(DP_OP_WRITE, a, off, sb, off, 64);
			d[i].notify = 1;
			want[i] = -EINVAL;
			break;
		case 8: /* the same key, a longer one: in range for 64 B only */
			d[i] = mk(DP_OP_WRITE, a, off, sb, RLEN - 1024, 4096);
			want[i] = -EFAULT;
			break;
		case 9: /* the same key, above --inline-max: queued */
			d[i] = mk(DP_OP_WRITE, a, 40 * 1024, sb, 40 * 1024, 8192);
			break;
		case 10: /* the same key, flags set */
			d[i] = mk(DP_OP_WRITE, a, off, sb, off, 64);
			d[i].flags = 0x80;
			want[i] = -EINVAL;
			break;
		case 11: /* a region that does not exist */
			d[i] = mk(DP_OP_WRITE, 77, off, sb, off, 64);
			want[i] = -EBADF;
			break;
		case 14: /* a NOP between runs */
			d[i] = mk(DP_OP_NOP, 0, 0, 0, 0, 0);
			break;
		case 20: /* the local region's end, in a READ run */
			d[i] = mk(DP_OP_READ, a, RLEN - 8, sc, off, 64);
			want[i] = -EFAULT;
			break;
		default:
			if (i < 12) /* WRITE a -> b, 64 B and other sizes */
				d[i] = mk(DP_OP_WRITE, a, off, sb, off, i == 3 ? 1000 : 64);
			else if (i < 18) /* READ b -> a */
				d[i] = mk(DP_OP_READ, a, off, sb, off, i == 16 ? 1 : 64);
			else if (i < 24) /* READ c -> a */
				d[i] = mk(DP_OP_READ, a, off, sc, off, 64);
			else if (i < 28) /* WRITE a -> c */
				d[i] = mk(DP_OP_WRITE, a, off, sc, off, i == 26 ? 0 : 128);
			else /* alternating segments: a new key every descriptor */
				d[i] = mk(DP_OP_WRITE, a, off, i % 2 ? sb : sc, off, 64);
		}
		d[i].user_data = i;
		want_bytes[i] = want[i] || d[i].opcode == DP_OP_NOP ? 0 : d[i].len;
		moved += want_bytes[i];
		if (want[i] || d[i].opcode == DP_OP_NOP)
			continue;
		if (d[i].opcode == DP_OP_WRITE)
			memcpy((d[i].segment == (uint32_t)sb ? want_b : want_c) + d[i].target_off,
			       want_a + d[i].local_off, d[i].len);
		else
			memcpy(want_a + d[i].local_off,
			       (d[i].segment == (uint32_t)sb ? want_b : want_c) + d[i].target_off,
			       d[i].len);
	}
	cr_assert_eq(dp_submit(q, d, N), N);
	reap(q, cqe, N, 5000);
	for (unsigned i = 0; i < N; i++) {
		uint64_t u = cqe[i].user_data;

		cr_assert_lt(u, N);
		cr_assert(!seen[u], "two completions for %llu", (unsigned long long)u);
		seen[u] = true;
		cr_assert_eq(cqe[i].status, want[u], "descriptor %llu: %d (%s), want %d",
			     (unsigned long long)u, cqe[i].status, dp_strerror(cqe[i].status),
			     want[u]);
		cr_assert_eq(cqe[i].bytes, want_bytes[u], "descriptor %llu: %llu bytes",
			     (unsigned long long)u, (unsigned long long)cqe[i].bytes);
		if (!want[u] && d[u].opcode != DP_OP_NOP)
			cr_assert_eq(cqe[i].flags, DP_CQE_F_LOCAL, "descriptor %llu: flags %#x",
				     (unsigned long long)u, cqe[i].flags);
	}
	cr_assert(!memcmp(ap, want_a, RLEN), "region a");
	cr_assert(!memcmp(bp, want_b, RLEN), "region b");
	cr_assert(!memcmp(cp, want_c, RLEN), "region c");
	cr_assert_eq(dp_queue_stats(q, &st), 0);
	cr_assert_eq(st.failed, 6);
	cr_assert_eq(st.completed, N - 6);
	cr_assert_eq(st.bytes, moved);
	dp_close(cl);
	stop_svc(&svc);
}
