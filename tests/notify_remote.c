/* SPDX-License-Identifier: MIT */
/* notify_remote.c - notifications (DP_DESC_F_NOTIFY) for a segment of
 * another service: through the fabric (tcp, sockets) and to a service of
 * the same host that maps the export. The exporter's client sees each one
 * after its bytes, in the order of the writer's WRITEs, with the path's
 * flag; both services count them in their stats regions; an owner without
 * a ring loses them to the count, not to the writer. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "dp_stats.h"
#include "helpers.h"

TestSuite(notify_remote, .fini = fab_teardown, .timeout = 90);

/* The service block's notification counters of `s`, once `field` reaches
 * `want` or 10 s pass. */
static struct dp_stats_service svc_block(const struct svc *s, size_t field, uint64_t want)
{
	const struct dp_stats_header *h = stats_map(s);
	uint64_t deadline = now_ns() + 10000000000ull;
	struct dp_stats_service v;

	for (;;) {
		memcpy(&v, (const void *)&h->svc, sizeof(v));
		if (*(const uint64_t *)((const char *)&v + field) >= want || now_ns() > deadline)
			break;
		sleep_ms(5);
	}
	stats_unmap(h);
	return v;
}

#define SLOTS 24
#define SPAN (1u << 20)

static uint64_t slot_len(unsigned i)
{
	return i % 3 == 2 ? SPAN : 64u << (i % 3); /* 64 B, 128 B, 1 MiB */
}

/* The writer WRITEs every slot with a notification of its index, each
 * waited for before the next; the owner takes each notification as it
 * comes and checks the bytes then: all there, and in order. @a_more,
 * @b_more: the services' extra options (host staging). */
static void notify_run_ab(const char *prov, bool same, const char *const *a_more,
			  const char *const *b_more)
{
	const uint32_t path = same ? DP_CQE_F_SAME_HOST : DP_CQE_F_FABRIC;
	const uint32_t nflag = same ? DP_NOTIFY_F_SAME_HOST : DP_NOTIFY_F_FABRIC;
	struct dp_stats_service va, vb;
	struct dp_notification n;
	struct dp_queue *q;
	uint8_t *src, *tgt;
	struct fab_pair p;
	int sreg, treg, seg;

	fab_pair_start(&p, prov, same ? FAB_PAIR_SAME_A | FAB_PAIR_SAME_B : 0, a_more, b_more);
	treg = alloc_region(p.cb, (size_t)SLOTS * SPAN, &tgt);
	export_segment(p.cb, treg, "kv", DP_ACCESS_RW);
	cr_assert_eq(dp_notify_open(p.cb, 64), 0, "%s", dp_last_error());
	sreg = alloc_region(p.ca, (size_t)SLOTS * SPAN, &src);
	seg = open_segment(p.ca, p.peer_b, "kv", DP_ACCESS_RW);
	q = make_queue(p.ca, 8);
	for (unsigned i = 0; i < SLOTS; i++) {
		uint64_t off = (uint64_t)i * SPAN;
		struct dp_desc d;
		struct dp_cqe cqe;
		int k;

		pattern_fill(src + off, slot_len(i), 500 + i);
		dp_prep_write_notify(&d, sreg, off, seg, off, slot_len(i), i, 0x1000 + i);
		cqe = run_wait(q, &d, 10000);
		cr_assert_eq(cqe.status, 0, "WRITE %u: %s", i, dp_strerror(cqe.status));
		cr_assert_eq(cqe.flags, path, "WRITE %u took another path (flags %#x)", i,
			     cqe.flags);
		k = dp_notify_wait(p.cb, &n, 1, 10000);
		cr_assert_eq(k, 1, "notification %u: %s", i, k ? dp_last_error() : "timeout");
		cr_assert_eq(n.value, 0x1000 + i, "out of order: %llu for %u",
			     (unsigned long long)n.value, i);
		cr_assert_eq(n.offset, off);
		cr_assert_eq(n.len, slot_len(i));
		cr_assert_eq(n.flags, nflag);
		cr_assert_eq(n.dropped, 0);
		cr_assert_str_eq(n.segment, "kv");
		if (!same)
			cr_assert_eq(n.sender, 0);
		cr_assert_eq(pattern_check(tgt + off, slot_len(i), 500 + i), -1,
			     "slot %u: notified before its bytes", i);
	}
	cr_assert_eq(dp_notify_poll(p.cb, &n, 1), 0, "more notifications than WRITEs");
	va = svc_block(&fab_svc[0], offsetof(struct dp_stats_service, notify_sent), SLOTS);
	vb = svc_block(&fab_svc[1], offsetof(struct dp_stats_service, notify_received), SLOTS);
	cr_assert_eq(va.notify_sent, SLOTS);
	cr_assert_eq(va.notify_lost, 0);
	cr_assert_eq(vb.notify_received, SLOTS);
	cr_assert_eq(vb.notify_received_dropped, 0);
	fab_pair_stop(&p);
}

static void notify_run(const char *prov, bool same)
{
	notify_run_ab(prov, same, NULL, NULL);
}

/* Through host staging (--stage-host: host memory stands in for memory
 * the rails cannot register, GPU memory without FI_HMEM): the writer's
 * bounce buffers, or the owner's (owner staging). The owner hears of
 * each WRITE once its bytes are in place, as on the fabric. */
static const char *const staged[] = {"--stage-host", NULL};

Test(notify_remote, staged_by_the_writer)
{
	notify_run_ab("tcp", false, staged, NULL);
}

Test(notify_remote, staged_by_the_owner)
{
	notify_run_ab("tcp", false, NULL, staged);
}

Test(notify_remote, fabric_tcp)
{
	notify_run("tcp", false);
}

Test(notify_remote, fabric_sockets)
{
	notify_run("sockets", false);
}

Test(notify_remote, same_host)
{
	notify_run("tcp", true);
}

/* An owner that never opened a ring: the writer's WRITEs complete as
 * usual, the peer takes the notifications and counts them dropped. */
Test(notify_remote, owner_without_ring)
{
	struct dp_stats_service va, vb;
	struct dp_queue *q;
	uint8_t *src, *tgt;
	struct fab_pair p;
	int sreg, treg, seg;

	fab_pair_start(&p, "tcp", 0, NULL, NULL);
	treg = alloc_region(p.cb, 4096, &tgt);
	export_segment(p.cb, treg, "kv", DP_ACCESS_RW);
	sreg = alloc_region(p.ca, 4096, &src);
	seg = open_segment(p.ca, p.peer_b, "kv", DP_ACCESS_RW);
	q = make_queue(p.ca, 8);
	for (unsigned i = 0; i < 5; i++) {
		struct dp_desc d;

		dp_prep_write_notify(&d, sreg, 0, seg, 0, 64, i, i);
		run_ok(q, &d, DP_CQE_F_FABRIC, 10000);
	}
	va = svc_block(&fab_svc[0], offsetof(struct dp_stats_service, notify_sent), 5);
	vb = svc_block(&fab_svc[1], offsetof(struct dp_stats_service, notify_received_dropped), 5);
	cr_assert_eq(va.notify_sent, 5);
	cr_assert_eq(vb.notify_received, 0);
	cr_assert_eq(vb.notify_received_dropped, 5);
	fab_pair_stop(&p);
}
