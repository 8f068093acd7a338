/* SPDX-License-Identifier: MIT */
/* notify_msg.c - notifications that carry bytes and the sender's name
 * (DP_DESC_F_NOTIFY_MSG on a WRITE or a READ, dp_notify_send alone): 0, 1
 * and 4096 bytes arrive intact with the sender's name, 4097 are refused
 * with -EMSGSIZE, 1000 from one sender keep their order across the paths,
 * a full ring drops and counts without touching the writer; on one
 * service, between two services of one host, over the fabric (tcp) and
 * between two network namespaces (skipped where they cannot be made). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

TestSuite(notify_msg, .fini = svc_teardown, .timeout = 60);
TestSuite(notify_msg_remote, .fini = fab_teardown, .timeout = 90);

/* The two ends: the owner exports `len` bytes as "kv" (its ring of
 * `entries`), the sender has a region as large, the segment and a queue. */
struct ends {
	struct dp_client *owner, *sender;
	struct dp_queue *q;
	uint8_t *tgt, *src;
	int treg, sreg, seg;
	uint32_t path;	      /* DP_NOTIFY_F_* the owner sees */
	uint32_t cqe_path;    /* DP_CQE_F_* of the sender's completions */
	char sender_name[64]; /* what the owner is told of the sender, up to the id */
};

static const size_t SIZES[] = {0, 1, 4096};

static void ends_regions(struct ends *e, size_t len, uint32_t entries, const char *peer)
{
	e->treg = alloc_region(e->owner, len, &e->tgt);
	export_segment(e->owner, e->treg, "kv", DP_ACCESS_RW);
	cr_assert_eq(dp_notify_open(e->owner, entries), 0, "%s", dp_last_error());
	e->sreg = alloc_region(e->sender, len, &e->src);
	e->seg = open_segment(e->sender, peer, "kv", DP_ACCESS_RW);
	e->q = make_queue(e->sender, 64);
	/* No session: "<its service's server name>/<client id>". */
	snprintf(e->sender_name, sizeof(e->sender_name), "%s/", dp_server_name(e->sender));
}

static void ends_local(struct ends *e, size_t len, uint32_t entries)
{
	e->owner = connect_client(&svc, "owner");
	e->sender = connect_client(&svc, "sender");
	e->path = DP_NOTIFY_F_LOCAL;
	e->cqe_path = DP_CQE_F_LOCAL;
	ends_regions(e, len, entries, NULL);
}

/* A message of `len` bytes, its pattern from `seed`. */
static void msg_fill(uint8_t *m, size_t len, uint64_t seed)
{
	pattern_fill(m, len, seed);
}

/* The next notification must carry `len` bytes of `seed`'s pattern, the
 * kind `kind` (DP_NOTIFY_F_READ, _ALONE or 0), and the sender's name. */
static void expect_msg(const struct ends *e, size_t len, uint64_t seed, uint32_t kind, uint64_t off,
		       uint64_t xlen)
{
	static uint8_t buf[DP_NOTIFY_MSG_MAX];
	char sender[DP_NOTIFY_SENDER_MAX];
	struct dp_notification n;
	int k;

	memset(buf, 0xee, sizeof(buf));
	k = dp_notify_recv(e->owner, &n, sender, buf, sizeof(buf), 10000);
	cr_assert_eq(k, 1, "no notification of %zu bytes: %s", len,
		     k ? dp_last_error() : "timeout");
	cr_assert_eq(n.flags, e->path | DP_NOTIFY_F_MSG | kind, "flags %#x", n.flags);
	cr_assert_eq(n.msg_len, len);
	cr_assert_eq(n.value, 0);
	cr_assert_eq(n.offset, off);
	cr_assert_eq(n.len, xlen);
	cr_assert_str_eq(n.segment, "kv");
	cr_assert(!strncmp(sender, e->sender_name, strlen(e->sender_name)),
		  "sender \"%s\", expected \"%s<id>\"", sender, e->sender_name);
	if (e->path != DP_NOTIFY_F_FABRIC) {
		char want[DP_NOTIFY_SENDER_MAX];

		snprintf(want, sizeof(want), "%s%u", e->sender_name, n.sender);
		cr_assert_str_eq(sender, want);
	}
	cr_assert_eq(pattern_check(buf, len, seed), -1, "the bytes of %zu changed", len);
	if (len < sizeof(buf))
		cr_assert_eq(buf[len], 0xee, "more than %zu bytes written", len);
}

/* For each size: a WRITE with bytes, then a READ with bytes, then the
 * bytes alone; each arrives whole, with its kind and the sender's name. */
static void sizes_run(struct ends *e)
{
	static uint8_t m[DP_NOTIFY_MSG_MAX];

	for (unsigned i = 0; i < sizeof(SIZES) / sizeof(SIZES[0]); i++) {
		size_t len = SIZES[i];
		struct dp_desc d;

		pattern_fill(e->src, 256, 70 + i);
		msg_fill(m, len, 10 + i);
		dp_prep_write_msg(&d, e->sreg, 0, e->seg, 512, 256, i, m, len);
		run_ok(e->q, &d, e->cqe_path, 10000);
		memset(m, 0, sizeof(m)); /* dp_submit copied them */
		expect_msg(e, len, 10 + i, 0, 512, 256);
		cr_assert_eq(pattern_check(e->tgt + 512, 256, 70 + i), -1);

		msg_fill(m, len, 20 + i);
		dp_prep_read_msg(&d, e->sreg, 1024, e->seg, 512, 256, i, m, len);
		run_ok(e->q, &d, e->cqe_path, 10000);
		expect_msg(e, len, 20 + i, DP_NOTIFY_F_READ, 512, 256);
		cr_assert_eq(pattern_check(e->src + 1024, 256, 70 + i), -1);

		msg_fill(m, len, 30 + i);
		cr_assert_eq(dp_notify_send(e->sender, e->seg, m, len), 0, "%s", dp_last_error());
		expect_msg(e, len, 30 + i, DP_NOTIFY_F_ALONE, 0, 0);
	}
}

/* 1000 notifications of one sender, each carrying its index: WRITEs with
 * bytes, and every fifth alone, each sent once the one before completed;
 * the owner takes them as they come and finds them in order. */
static void order_run(struct ends *e)
{
	unsigned next = 0;

	for (unsigned i = 0; i < 1000; i++) {
		char m[16], sender[DP_NOTIFY_SENDER_MAX], buf[DP_NOTIFY_MSG_MAX];
		struct dp_notification n;
		int len = snprintf(m, sizeof(m), "req-%u", i);

		if (i % 5 == 4) {
			cr_assert_eq(dp_notify_send(e->sender, e->seg, m, (size_t)len), 0, "%s",
				     dp_last_error());
		} else {
			struct dp_desc d;

			dp_prep_write_msg(&d, e->sreg, 0, e->seg, 0, 64, i, m, (size_t)len);
			run_ok(e->q, &d, e->cqe_path, 10000);
		}
		while (dp_notify_recv(e->owner, &n, sender, buf, sizeof(buf), 0) == 1) {
			int want = snprintf(m, sizeof(m), "req-%u", next);

			cr_assert_eq(n.msg_len, (uint32_t)want);
			cr_assert(!memcmp(buf, m, (size_t)want), "out of order: %.*s for %s",
				  (int)n.msg_len, buf, m);
			cr_assert_eq(n.dropped, 0);
			next++;
		}
	}
	while (next < 1000) {
		char m[16], sender[DP_NOTIFY_SENDER_MAX], buf[DP_NOTIFY_MSG_MAX];
		struct dp_notification n;
		int k = dp_notify_recv(e->owner, &n, sender, buf, sizeof(buf), 10000), want;

		cr_assert_eq(k, 1, "%u of 1000 arrived", next);
		want = snprintf(m, sizeof(m), "req-%u", next);
		cr_assert_eq(n.msg_len, (uint32_t)want);
		cr_assert(!memcmp(buf, m, (size_t)want), "out of order: %.*s for %s",
			  (int)n.msg_len, buf, m);
		next++;
	}
}

Test(notify_msg, sizes_on_write_read_and_alone)
{
	struct ends e;

	start_svc(&svc, local_only);
	ends_local(&e, 4096, 256);
	sizes_run(&e);
	dp_close(e.sender);
	dp_close(e.owner);
}

Test(notify_msg, order_of_1000)
{
	struct ends e;

	start_svc(&svc, local_only);
	ends_local(&e, 4096, 4096);
	order_run(&e);
	dp_close(e.sender);
	dp_close(e.owner);
}

/* 4097 bytes: refused where they are handed over, nothing submitted or
 * sent; a descriptor after a good one stays unsubmitted. A buffer too short
 * leaves the notification on the ring. */
Test(notify_msg, too_long_refused)
{
	static uint8_t m[DP_NOTIFY_MSG_MAX + 1];
	char sender[DP_NOTIFY_SENDER_MAX], small[8];
	struct dp_queue_stats st;
	struct dp_notification n;
	struct dp_desc d[2];
	struct dp_cqe cqe;
	struct ends e;

	start_svc(&svc, local_only);
	ends_local(&e, 4096, 256);
	dp_prep_write_msg(&d[0], e.sreg, 0, e.seg, 0, 64, 1, m, DP_NOTIFY_MSG_MAX + 1);
	cr_assert_eq(dp_submit(e.q, d, 1), -EMSGSIZE);
	cr_assert(strstr(dp_last_error(), "dp_submit") && strstr(dp_last_error(), "4096"), "%s",
		  dp_last_error());
	dp_prep_read_msg(&d[0], e.sreg, 0, e.seg, 0, 64, 1, m, DP_NOTIFY_MSG_MAX + 1);
	cr_assert_eq(dp_submit(e.q, d, 1), -EMSGSIZE);
	dp_prep_write_msg(&d[0], e.sreg, 0, e.seg, 0, 64, 1, m, 10);
	dp_prep_write_msg(&d[1], e.sreg, 0, e.seg, 0, 64, 2, m, DP_NOTIFY_MSG_MAX + 1);
	cr_assert_eq(dp_submit(e.q, d, 2), 1, "the good one, alone");
	reap(e.q, &cqe, 1, 5000);
	cr_assert_eq(cqe.status, 0);
	cr_assert_eq(dp_queue_stats(e.q, &st), 0);
	cr_assert_eq(st.submitted, 1);
	cr_assert_eq(dp_notify_send(e.sender, e.seg, m, DP_NOTIFY_MSG_MAX + 1), -EMSGSIZE);
	cr_assert(strstr(dp_last_error(), "dp_notify_send"), "%s", dp_last_error());
	cr_assert_eq(dp_notify_send(e.sender, 999, m, 1), -EBADF);
	/* The one of 10 bytes, and nothing else: 8 bytes are too few. */
	cr_assert_eq(dp_notify_recv(e.owner, &n, sender, small, sizeof(small), 5000), -EMSGSIZE);
	cr_assert_eq(n.msg_len, 10);
	cr_assert_eq(dp_notify_recv(e.owner, &n, sender, m, sizeof(m), 0), 1);
	cr_assert_eq(dp_notify_recv(e.owner, &n, sender, m, sizeof(m), 0), 0);
	dp_close(e.sender);
	dp_close(e.owner);
}

/* The two forms on one ring: dp_notify_poll returns the first entry of
 * each, in order, skipping a message's bytes; dp_notify_recv returns a
 * 64-bit one with an empty sender. */
Test(notify_msg, both_forms_on_one_ring)
{
	char sender[DP_NOTIFY_SENDER_MAX], buf[64];
	struct dp_notification n[4];
	struct dp_desc d;
	struct ends e;

	start_svc(&svc, local_only);
	ends_local(&e, 4096, 256);
	dp_prep_write_notify(&d, e.sreg, 0, e.seg, 0, 64, 1, 41);
	run_ok(e.q, &d, DP_CQE_F_LOCAL, 5000);
	dp_prep_write_msg(&d, e.sreg, 0, e.seg, 0, 64, 2, "hello", 5);
	run_ok(e.q, &d, DP_CQE_F_LOCAL, 5000);
	dp_prep_write_notify(&d, e.sreg, 0, e.seg, 0, 64, 3, 43);
	run_ok(e.q, &d, DP_CQE_F_LOCAL, 5000);
	cr_assert_eq(dp_notify_poll(e.owner, n, 4), 3);
	cr_assert_eq(n[0].value, 41);
	cr_assert_eq(n[1].flags, DP_NOTIFY_F_LOCAL | DP_NOTIFY_F_MSG);
	cr_assert_eq(n[1].msg_len, 5);
	cr_assert_eq(n[2].value, 43);
	dp_prep_write_notify(&d, e.sreg, 0, e.seg, 0, 64, 4, 44);
	run_ok(e.q, &d, DP_CQE_F_LOCAL, 5000);
	cr_assert_eq(dp_notify_recv(e.owner, &n[0], sender, buf, sizeof(buf), 5000), 1);
	cr_assert_eq(n[0].value, 44);
	cr_assert_eq(n[0].flags, DP_NOTIFY_F_LOCAL);
	cr_assert_str_eq(sender, "");
	dp_close(e.sender);
	dp_close(e.owner);
}

/* A ring of 16 entries: a 4096-byte record (34 entries) never fits and is
 * dropped; 100-byte ones (3 entries) fit five at a time. The writer's
 * completions are all status 0; the next notification counts the drops. */
Test(notify_msg, full_ring_drops_and_counts)
{
	static uint8_t m[DP_NOTIFY_MSG_MAX];
	char sender[DP_NOTIFY_SENDER_MAX];
	struct dp_notification n;
	struct dp_desc d;
	struct ends e;
	unsigned got = 0;

	start_svc(&svc, local_only);
	ends_local(&e, 4096, 16);
	dp_prep_write_msg(&d, e.sreg, 0, e.seg, 0, 64, 0, m, sizeof(m));
	run_ok(e.q, &d, DP_CQE_F_LOCAL, 5000);
	cr_assert_eq(dp_notify_send(e.sender, e.seg, m, sizeof(m)), 0, "dropped, not refused");
	for (unsigned i = 0; i < 8; i++) {
		msg_fill(m, 100, 300 + i);
		dp_prep_write_msg(&d, e.sreg, 0, e.seg, 0, 64, i, m, 100);
		run_ok(e.q, &d, DP_CQE_F_LOCAL, 5000);
	}
	while (dp_notify_recv(e.owner, &n, sender, m, sizeof(m), 0) == 1) {
		cr_assert_eq(pattern_check(m, 100, 300 + got), -1);
		cr_assert_eq(n.dropped, 2, "the two 4 KiB ones");
		got++;
	}
	cr_assert_eq(got, 5, "%u of 8 fit in 16 entries", got);
	dp_prep_write_msg(&d, e.sreg, 0, e.seg, 0, 64, 9, "x", 1);
	run_ok(e.q, &d, DP_CQE_F_LOCAL, 5000);
	cr_assert_eq(dp_notify_recv(e.owner, &n, sender, m, sizeof(m), 5000), 1);
	cr_assert_eq(n.dropped, 5, "2 + 3 dropped since dp_notify_open");
	dp_close(e.sender);
	dp_close(e.owner);
}

/* ---- another service: the fabric (tcp) or this host's mapped export ---- */

/* @a_more, @b_more: the services' extra options (host staging). */
static void ends_pair_ab(struct ends *e, struct fab_pair *p, bool same, uint32_t entries,
			 const char *const *a_more, const char *const *b_more)
{
	fab_pair_start(p, "tcp", same ? FAB_PAIR_SAME_A | FAB_PAIR_SAME_B : 0, a_more, b_more);
	e->owner = p->cb;
	e->sender = p->ca;
	e->path = same ? DP_NOTIFY_F_SAME_HOST : DP_NOTIFY_F_FABRIC;
	e->cqe_path = same ? 0 : DP_CQE_F_FABRIC; /* run_ok: neither fabric nor local */
	ends_regions(e, 4096, entries, p->peer_b);
}

static void ends_pair(struct ends *e, struct fab_pair *p, bool same, uint32_t entries)
{
	ends_pair_ab(e, p, same, entries, NULL, NULL);
}

/* Through host staging (--stage-host stands in for GPU memory the rails
 * cannot register): the writer's bounce buffers, then the owner's. */
static const char *const staged[] = {"--stage-host", NULL};

Test(notify_msg_remote, staged_sizes)
{
	struct fab_pair p;
	struct ends e;

	ends_pair_ab(&e, &p, false, 256, staged, NULL);
	sizes_run(&e);
	fab_pair_stop(&p);
}

Test(notify_msg_remote, owner_staged_sizes)
{
	struct fab_pair p;
	struct ends e;

	ends_pair_ab(&e, &p, false, 256, NULL, staged);
	sizes_run(&e);
	fab_pair_stop(&p);
}

Test(notify_msg_remote, fabric_sizes)
{
	struct fab_pair p;
	struct ends e;

	ends_pair(&e, &p, false, 256);
	sizes_run(&e);
	fab_pair_stop(&p);
}

Test(notify_msg_remote, fabric_order_of_1000)
{
	struct fab_pair p;
	struct ends e;

	ends_pair(&e, &p, false, 4096);
	order_run(&e);
	fab_pair_stop(&p);
}

Test(notify_msg_remote, same_host_sizes)
{
	struct fab_pair p;
	struct ends e;

	ends_pair(&e, &p, true, 256);
	sizes_run(&e);
	fab_pair_stop(&p);
}

Test(notify_msg_remote, same_host_order_of_1000)
{
	struct fab_pair p;
	struct ends e;

	ends_pair(&e, &p, true, 4096);
	order_run(&e);
	fab_pair_stop(&p);
}

/* ---- two network namespaces joined by a veth pair, tcp ---- */

TestSuite(notify_msg_netns, .fini = netns_teardown, .timeout = 90);

Test(notify_msg_netns, tcp_sizes_and_order)
{
	unsigned id = (unsigned)getpid() % 100000, x = (unsigned)getpid() % 250 + 1;
	char ns[2][32], veth[2][16], ip[2][16], peer[64];
	struct ends e;

	if (geteuid() != 0)
		cr_skip_test("notify_msg_netns: needs root to create network namespaces");
	if (run_sh("command -v ip"))
		cr_skip_test("notify_msg_netns: no 'ip' command (iproute2)");
	for (unsigned i = 0; i < 2; i++) {
		snprintf(ns[i], sizeof(ns[i]), "dpn%c-%u", "AB"[i], id);
		snprintf(veth[i], sizeof(veth[i]), "dpn%c-%u", "ab"[i], id);
		snprintf(ip[i], sizeof(ip[i]), "10.79.%u.%u", x, i + 1);
		if (netns_add(ns[i]))
			cr_skip_test("notify_msg_netns: cannot make a network namespace (the "
				     "reason is above)");
	}
	if (run_sh("ip link add %s type veth peer name %s", veth[0], veth[1]))
		cr_skip_test("notify_msg_netns: cannot create a veth pair");
	for (unsigned i = 0; i < 2; i++) {
		cr_assert_eq(run_sh("ip link set %s netns %s", veth[i], ns[i]), 0);
		cr_assert_eq(netns_sh(ns[i], "ip addr add %s/24 dev %s", ip[i], veth[i]), 0);
		cr_assert_eq(netns_sh(ns[i], "ip link set %s up", veth[i]), 0);
	}
	/* Both ends up first: tcp sees no domain on a link without carrier. */
	for (unsigned i = 0; i < 2; i++) {
		const char *args[] = {"--provider", "tcp", "--server-name", ip[i], "--nics",
				      veth[i],	    NULL};
		const char *prefix[3];
		char enter[64];

		netns_prefix(ns[i], enter, prefix);
		start_svc_in(&fab_svc[i], prefix, args);
	}
	e.sender = connect_client(&fab_svc[0], "ns-a");
	e.owner = connect_client(&fab_svc[1], "ns-b");
	e.path = DP_NOTIFY_F_FABRIC;
	e.cqe_path = DP_CQE_F_FABRIC;
	snprintf(peer, sizeof(peer), "%s:%d", ip[1], fab_rpc_port(&fab_svc[1]));
	ends_regions(&e, 4096, 4096, peer);
	sizes_run(&e);
	order_run(&e);
	dp_close(e.sender);
	dp_close(e.owner);
}
