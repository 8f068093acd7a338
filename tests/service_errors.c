/* service_errors.c - every invalid descriptor class completes with its documented errno, in the documented order, and the queue keeps working. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

TestSuite(service_errors, .fini = svc_teardown);

#define RLEN (64u * 1024)
#define LOCAL_SEED 6
#define TARGET_SEED 5
#define RO_SEED 9

/*
 * One client with: a local region L (pattern LOCAL_SEED), a region T
 * exported read-write as "rw" (pattern TARGET_SEED), a region R exported
 * read-only as "ro" (pattern RO_SEED), and a scratch pair (S -> "scratch")
 * for the transfers that must succeed. Invalid descriptors only ever point
 * at L, T and R, so env_check_untouched() can tell that none of them moved
 * a byte.
 */
struct env {
	struct dp_client *c;
	struct dp_queue *q;
	int local, target, ro, s_local, s_target;
	uint8_t *lp, *tp, *rp, *slp, *stp;
	int seg_rw, seg_ro, seg_wo, seg_scratch;
	uint64_t ud;
};

static void env_setup(struct env *e)
{
	memset(e, 0, sizeof(*e));
	start_svc(&svc, local_only);
	e->c = connect_client(&svc, "errors");
	e->local = alloc_region(e->c, RLEN, &e->lp);
	e->target = alloc_region(e->c, RLEN, &e->tp);
	e->ro = alloc_region(e->c, RLEN, &e->rp);
	e->s_local = alloc_region(e->c, RLEN, &e->slp);
	e->s_target = alloc_region(e->c, RLEN, &e->stp);
	pattern_fill(e->lp, RLEN, LOCAL_SEED);
	pattern_fill(e->tp, RLEN, TARGET_SEED);
	pattern_fill(e->rp, RLEN, RO_SEED);
	e->seg_rw = export_open(e->c, e->target, "rw", DP_ACCESS_RW, DP_ACCESS_RW);
	e->seg_ro = export_open(e->c, e->ro, "ro", DP_ACCESS_READ, DP_ACCESS_READ);
	e->seg_wo = dp_segment_open(e->c, NULL, "rw", DP_ACCESS_WRITE);
	cr_assert_geq(e->seg_wo, 0);
	e->seg_scratch = export_open(e->c, e->s_target, "scratch", DP_ACCESS_RW, DP_ACCESS_RW);
	e->q = make_queue(e->c, 64);
}

/* Submits `d` alone and checks its completion. */
static void expect(struct env *e, struct dp_desc d, int status, uint64_t bytes, const char *what)
{
	struct dp_cqe cqe;

	d.user_data = ++e->ud;
	cqe = run_wait(e->q, &d, 5000);
	cr_assert_eq(cqe.status, status, "%s: status %d (%s), want %d (%s)", what, cqe.status,
		     dp_strerror(cqe.status), status, dp_strerror(status));
	cr_assert_eq(cqe.bytes, bytes, "%s: %llu bytes, want %llu", what,
		     (unsigned long long)cqe.bytes, (unsigned long long)bytes);
}

static struct dp_desc desc(uint8_t op, uint32_t region, uint64_t local_off, uint32_t segment,
			   uint64_t target_off, uint64_t len)
{
	return (struct dp_desc){.opcode = op,
				.region = region,
				.local_off = local_off,
				.segment = segment,
				.target_off = target_off,
				.len = len};
}

/* A WRITE and a READ through the scratch pair move fresh bytes correctly. */
static void expect_queue_works(struct env *e)
{
	uint64_t seed = 1000 + e->ud;

	pattern_fill(e->slp, 4096, seed);
	memset(e->slp + 8192, 0, 4096);
	expect(e, desc(DP_OP_WRITE, e->s_local, 0, e->seg_scratch, 4096, 4096), 0, 4096,
	       "WRITE after errors");
	cr_assert_eq(pattern_check(e->stp + 4096, 4096, seed), -1);
	expect(e, desc(DP_OP_READ, e->s_local, 8192, e->seg_scratch, 4096, 4096), 0, 4096,
	       "READ after errors");
	cr_assert_eq(pattern_check(e->slp + 8192, 4096, seed), -1);
}

/* No rejected descriptor moved a byte of L, T or R. */
static void env_check_untouched(struct env *e)
{
	cr_assert_eq(pattern_check(e->lp, RLEN, LOCAL_SEED), -1, "a rejected READ wrote L");
	cr_assert_eq(pattern_check(e->tp, RLEN, TARGET_SEED), -1, "a rejected WRITE wrote T");
	cr_assert_eq(pattern_check(e->rp, RLEN, RO_SEED), -1, "the read-only export was written");
}

static void env_done(struct env *e)
{
	env_check_untouched(e);
	dp_close(e->c);
	stop_svc(&svc);
}

Test(service_errors, bad_opcode_is_einval, .timeout = 20)
{
	static const uint8_t ops[] = {0, 4, 99, 255};
	struct env e;

	env_setup(&e);
	for (unsigned i = 0; i < sizeof(ops); i++) {
		expect(&e, desc(ops[i], e.local, 0, e.seg_rw, 0, 64), -EINVAL, 0, "bad opcode");
		/* Even with every other field wrong: EINVAL comes first. */
		expect(&e, desc(ops[i], 0xffffffffu, ~0ull, 0xffffffffu, ~0ull, ~0ull), -EINVAL, 0,
		       "bad opcode, bad everything");
		expect_queue_works(&e);
	}
	env_done(&e);
}

Test(service_errors, nonzero_flags_or_reserved_is_einval, .timeout = 20)
{
	struct env e;
	struct dp_desc d;

	env_setup(&e);
	for (int op = DP_OP_WRITE; op <= DP_OP_NOP; op++) {
		d = desc((uint8_t)op, e.local, 0, e.seg_rw, 0, 64);
		/* DP_DESC_F_NOTIFY is a WRITE's only (tests/notify_local.c). */
		d.flags = DP_DESC_F_NOTIFY;
		if (op != DP_OP_WRITE)
			expect(&e, d, -EINVAL, 0, "DP_DESC_F_NOTIFY on a READ or NOP");
		/* DP_DESC_F_NOTIFY_MSG: a WRITE's or a READ's, never with
		 * DP_DESC_F_NOTIFY. */
		d.flags = DP_DESC_F_NOTIFY | DP_DESC_F_NOTIFY_MSG;
		expect(&e, d, -EINVAL, 0, "both notification flags");
		if (op == DP_OP_NOP) {
			d.flags = DP_DESC_F_NOTIFY_MSG;
			expect(&e, d, -EINVAL, 0, "DP_DESC_F_NOTIFY_MSG on a NOP");
		}
		d.flags = 4; /* the first flag no descriptor has */
		expect(&e, d, -EINVAL, 0, "flags 4");
		d.flags = 0x80;
		expect(&e, d, -EINVAL, 0, "flags 0x80");
		d.flags = 0;
		d.reserved0 = 1;
		expect(&e, d, -EINVAL, 0, "reserved0");
		d.reserved0 = 0;
		d.reserved1 = 0x80000000u;
		expect(&e, d, -EINVAL, 0, "reserved1");
		d.reserved1 = 0;
		d.notify = 1ull << 63; /* without DP_DESC_F_NOTIFY */
		expect(&e, d, -EINVAL, 0, "notify without its flag");
		expect_queue_works(&e);
	}
	env_done(&e);
}

Test(service_errors, unknown_region_or_segment_is_ebadf, .timeout = 20)
{
	static const uint32_t ids[] = {17, 1023, 1024, 4096, 0x7fffffffu, 0xffffffffu};
	struct env e;
	int freed, closed;
	uint8_t *fp;

	env_setup(&e);
	for (unsigned i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		expect(&e, desc(DP_OP_WRITE, ids[i], 0, e.seg_rw, 0, 64), -EBADF, 0, "region id");
		expect(&e, desc(DP_OP_READ, ids[i], 0, e.seg_rw, 0, 64), -EBADF, 0, "region id");
		expect(&e, desc(DP_OP_WRITE, e.local, 0, ids[i], 0, 64), -EBADF, 0, "segment id");
		expect(&e, desc(DP_OP_READ, e.local, 0, ids[i], 0, 64), -EBADF, 0, "segment id");
	}
	/* Handles that existed once are unknown after dp_free/dp_segment_close. */
	freed = alloc_region(e.c, RLEN, &fp);
	cr_assert_eq(dp_free(e.c, freed), 0);
	expect(&e, desc(DP_OP_WRITE, (uint32_t)freed, 0, e.seg_rw, 0, 64), -EBADF, 0,
	       "freed region");
	closed = dp_segment_open(e.c, NULL, "rw", DP_ACCESS_RW);
	cr_assert_geq(closed, 0);
	cr_assert_eq(dp_segment_close(e.c, closed), 0);
	expect(&e, desc(DP_OP_READ, e.local, 0, (uint32_t)closed, 0, 64), -EBADF, 0,
	       "closed segment");
	cr_assert_eq(dp_segment_close(e.c, closed), -EBADF, "a handle closes once");
	expect_queue_works(&e);
	env_done(&e);
}

Test(service_errors, out_of_bounds_and_overflow_is_efault, .timeout = 20)
{
	/* {offset, len}: past the end, straddling it, and sums that wrap. */
	static const uint64_t bad[][2] = {
		{RLEN, 1},
		{RLEN - 4095, 4096},
		{0, RLEN + 1},
		{1, RLEN},
		{~0ull, 1},
		{~0ull, 0},
		{0, ~0ull},
		{1, ~0ull},
		{-4096ull, 8192},	 /* off + len wraps to 4096 */
		{RLEN, -(uint64_t)RLEN}, /* off + len wraps to 0 */
		{1ull << 63, 1ull << 63},
	};
	struct env e;

	env_setup(&e);
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t off = bad[i][0], len = bad[i][1];

		expect(&e, desc(DP_OP_WRITE, e.local, off, e.seg_rw, 0, len), -EFAULT, 0,
		       "local side, WRITE");
		expect(&e, desc(DP_OP_READ, e.local, off, e.seg_rw, 0, len), -EFAULT, 0,
		       "local side, READ");
		expect(&e, desc(DP_OP_WRITE, e.local, 0, e.seg_rw, off, len), -EFAULT, 0,
		       "target side, WRITE");
		expect(&e, desc(DP_OP_READ, e.local, 0, e.seg_rw, off, len), -EFAULT, 0,
		       "target side, READ");
	}
	expect_queue_works(&e);
	/* The limits themselves are fine: the last 4 KiB, and the whole region. */
	pattern_fill(e.slp, RLEN, 77);
	expect(&e, desc(DP_OP_WRITE, e.s_local, RLEN - 4096, e.seg_scratch, RLEN - 4096, 4096), 0,
	       4096, "last 4 KiB");
	cr_assert_eq(memcmp(e.stp + RLEN - 4096, e.slp + RLEN - 4096, 4096), 0);
	expect(&e, desc(DP_OP_WRITE, e.s_local, 0, e.seg_scratch, 0, RLEN), 0, RLEN,
	       "whole region");
	cr_assert_eq(pattern_check(e.stp, RLEN, 77), -1);
	env_done(&e);
}

Test(service_errors, access_mode_is_eperm, .timeout = 20)
{
	struct env e;

	env_setup(&e);
	cr_assert_eq(dp_segment_open(e.c, NULL, "ro", DP_ACCESS_RW), -EPERM);
	cr_assert_eq(dp_segment_open(e.c, NULL, "ro", DP_ACCESS_WRITE), -EPERM);
	expect(&e, desc(DP_OP_WRITE, e.local, 0, e.seg_ro, 0, 64), -EPERM, 0,
	       "WRITE into a read-only export");
	expect(&e, desc(DP_OP_WRITE, e.local, 0, e.seg_ro, 0, RLEN), -EPERM, 0,
	       "WRITE of all of a read-only export");
	expect(&e, desc(DP_OP_READ, e.local, 0, e.seg_wo, 0, 64), -EPERM, 0,
	       "READ through a write-only handle");
	expect_queue_works(&e);
	/* What the handles do grant works. */
	expect(&e, desc(DP_OP_READ, e.s_local, 0, e.seg_ro, 100, 4096), 0, 4096, "READ from ro");
	cr_assert_eq(memcmp(e.slp, e.rp + 100, 4096), 0);
	pattern_fill(e.slp, 4096, 55);
	expect(&e, desc(DP_OP_WRITE, e.s_local, 0, e.seg_wo, 0, 4096), 0, 4096, "WRITE via wo");
	cr_assert_eq(pattern_check(e.tp, 4096, 55), -1);
	pattern_fill(e.tp, 4096, TARGET_SEED); /* restore for env_check_untouched() */
	env_done(&e);
}

Test(service_errors, nop_completes_with_zero_bytes, .timeout = 20)
{
	struct env e;
	struct dp_desc d = {.opcode = DP_OP_NOP};

	env_setup(&e);
	expect(&e, d, 0, 0, "NOP");
	/* A NOP moves nothing, whatever its transfer fields say. */
	d = desc(DP_OP_NOP, e.local, 0, e.seg_rw, 0, RLEN);
	expect(&e, d, 0, 0, "NOP with a valid transfer");
	d = desc(DP_OP_NOP, 0xffffffffu, ~0ull, 0xffffffffu, ~0ull, ~0ull);
	expect(&e, d, 0, 0, "NOP with nonsense handles");
	expect_queue_works(&e);
	env_done(&e);
}

/*
 * Forks a client that exports a region of its own as `name` (access
 * `access`) and then waits to be killed. Returns once the export exists.
 */
static void spawn_owner(const char *name, unsigned access)
{
	int p[2];
	char ok = 0;

	cr_assert_eq(pipe(p), 0);
	child_pid = fork();
	cr_assert_geq(child_pid, 0);
	if (child_pid == 0) {
		struct dp_client *c;
		void *a;
		int r;

		close(p[0]);
		ok = 'x';
		if (!dp_connect(svc.sock, "owner", &c)) {
			r = dp_alloc(c, RLEN, 0, &a);
			if (r >= 0 && !dp_segment_export(c, r, name, access))
				ok = 'k';
		}
		if (write(p[1], &ok, 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	cr_assert_eq(read(p[0], &ok, 1), 1);
	close(p[0]);
	cr_assert_eq(ok, 'k', "the owner could not export '%s'", name);
}

static void kill_owner(void)
{
	kill(child_pid, SIGKILL);
	wait_child(child_pid);
}

/* The service learns of the owner's death asynchronously: READs of its
 * segment succeed until then (a READ, so that a read-only segment works
 * too), and fail with -ECONNRESET from then on. */
static void wait_for_econnreset(struct env *e, int seg)
{
	uint64_t deadline = now_ns() + 3000000000ull;
	struct dp_cqe cqe;

	for (;;) {
		struct dp_desc d = desc(DP_OP_READ, e->s_local, 0, (uint32_t)seg, 0, 64);

		d.user_data = ++e->ud;
		cqe = run_wait(e->q, &d, 5000);
		if (cqe.status)
			break;
		cr_assert_lt(now_ns(), deadline, "the owner died 3 s ago, READs still succeed");
		sleep_ms(5);
	}
	cr_assert_eq(cqe.status, -ECONNRESET, "status %d (%s)", cqe.status,
		     dp_strerror(cqe.status));
	cr_assert_eq(cqe.bytes, 0);
}

Test(service_errors, segment_of_dead_owner_is_econnreset, .timeout = 20)
{
	struct env e;
	int seg;

	env_setup(&e);
	spawn_owner("victim", DP_ACCESS_RW);
	seg = dp_segment_open(e.c, NULL, "victim", DP_ACCESS_RW);
	cr_assert_geq(seg, 0);
	expect(&e, desc(DP_OP_WRITE, e.s_local, 0, (uint32_t)seg, 0, 4096), 0, 4096,
	       "WRITE while the owner lives");
	kill_owner();
	wait_for_econnreset(&e, seg);
	expect(&e, desc(DP_OP_READ, e.local, 0, (uint32_t)seg, 0, 64), -ECONNRESET, 0,
	       "READ after the owner died");
	expect(&e, desc(DP_OP_WRITE, e.local, 0, (uint32_t)seg, 0, RLEN), -ECONNRESET, 0,
	       "WRITE of the whole dead segment");
	expect_queue_works(&e);
	/* The name is gone; the stale handle still closes once. */
	cr_assert_eq(dp_segment_open(e.c, NULL, "victim", DP_ACCESS_RW), -ENOENT);
	cr_assert_eq(dp_segment_close(e.c, seg), 0);
	expect(&e, desc(DP_OP_WRITE, e.local, 0, (uint32_t)seg, 0, 64), -EBADF, 0,
	       "closed handle of a dead segment");
	env_done(&e);
}

/* With several faults at once, the first of EINVAL, EBADF, ECONNRESET,
 * EPERM, EFAULT is the one reported. */
Test(service_errors, check_order, .timeout = 20)
{
	struct env e;
	struct dp_desc d;
	int dead_ro;

	env_setup(&e);
	spawn_owner("dead-ro", DP_ACCESS_READ);
	dead_ro = dp_segment_open(e.c, NULL, "dead-ro", DP_ACCESS_READ);
	cr_assert_geq(dead_ro, 0);
	kill_owner();
	wait_for_econnreset(&e, dead_ro);

	/* EINVAL before EBADF. */
	d = desc(DP_OP_WRITE, 9999, 0, 9999, 0, 64);
	d.flags = 4;
	expect(&e, d, -EINVAL, 0, "flags + unknown handles");
	d = desc(0, 9999, 0, 9999, 0, 64);
	expect(&e, d, -EINVAL, 0, "opcode + unknown handles");
	/* EBADF before ECONNRESET, EPERM, EFAULT. */
	expect(&e, desc(DP_OP_WRITE, 9999, ~0ull, (uint32_t)dead_ro, ~0ull, 64), -EBADF, 0,
	       "unknown region + dead read-only segment + overflow");
	expect(&e, desc(DP_OP_WRITE, e.local, ~0ull, 9999, 0, 64), -EBADF, 0,
	       "unknown segment + overflow");
	/* ECONNRESET before EPERM and EFAULT. */
	expect(&e, desc(DP_OP_WRITE, e.local, ~0ull, (uint32_t)dead_ro, ~0ull, ~0ull), -ECONNRESET,
	       0, "dead read-only segment, WRITE, overflow");
	/* EPERM before EFAULT. */
	expect(&e, desc(DP_OP_WRITE, e.local, ~0ull, e.seg_ro, ~0ull, 64), -EPERM, 0,
	       "read-only WRITE + overflow");
	expect(&e, desc(DP_OP_READ, e.local, RLEN, e.seg_wo, RLEN, 64), -EPERM, 0,
	       "write-only READ + out of bounds");
	/* EFAULT: both sides out of bounds. */
	expect(&e, desc(DP_OP_READ, e.local, RLEN, e.seg_rw, RLEN, 64), -EFAULT, 0,
	       "both sides out of bounds");
	expect_queue_works(&e);
	env_done(&e);
}

/* One full queue mixing every class with valid transfers, submitted in one
 * call: each completion carries its own descriptor's status, exactly once,
 * and the client's counters agree. */
Test(service_errors, every_class_in_one_full_batch, .timeout = 20)
{
	enum { N = 64 };
	static struct dp_desc d[N];
	static struct dp_cqe cqe[N];
	int want[N], nfail = 0;
	uint64_t want_bytes[N];
	bool seen[N] = {false};
	struct dp_queue_stats st;
	struct env e;

	env_setup(&e);
	pattern_fill(e.slp, RLEN, 31);
	for (unsigned i = 0; i < N; i++) {
		want_bytes[i] = 0;
		switch (i % 8) {
		case 0:
			d[i] = desc(0, e.local, 0, e.seg_rw, 0, 64);
			want[i] = -EINVAL;
			break;
		case 1:
			d[i] = desc(DP_OP_READ, e.local, 0, e.seg_rw, 0, 64);
			d[i].notify = i;
			want[i] = -EINVAL;
			break;
		case 2:
			d[i] = desc(DP_OP_WRITE, 0xffffffffu - i, 0, e.seg_rw, 0, 64);
			want[i] = -EBADF;
			break;
		case 3:
			d[i] = desc(DP_OP_WRITE, e.local, 0, e.seg_ro, 0, 64);
			want[i] = -EPERM;
			break;
		case 4:
			d[i] = desc(DP_OP_WRITE, e.local, -(uint64_t)i, e.seg_rw, 0, 2 * i);
			want[i] = -EFAULT;
			break;
		case 5:
			d[i] = desc(DP_OP_READ, e.local, 0, e.seg_rw, RLEN - i, i + 1);
			want[i] = -EFAULT;
			break;
		case 6:
			d[i] = desc(DP_OP_NOP, 0, 0, 0, 0, 0);
			want[i] = 0;
			break;
		default: /* a real 1 KiB WRITE to its own slot of the scratch segment */
			d[i] = desc(DP_OP_WRITE, e.s_local, i * 1024, e.seg_scratch, i * 1024,
				    1024);
			want[i] = 0;
			want_bytes[i] = 1024;
			break;
		}
		d[i].user_data = i;
		nfail += want[i] != 0;
	}
	cr_assert_eq(dp_submit(e.q, d, N), N);
	reap(e.q, cqe, N, 5000);
	for (unsigned i = 0; i < N; i++) {
		uint64_t u = cqe[i].user_data;

		cr_assert_lt(u, N);
		cr_assert_not(seen[u], "descriptor %llu completed twice", (unsigned long long)u);
		seen[u] = true;
		cr_assert_eq(cqe[i].status, want[u], "descriptor %llu (class %llu): %d, want %d",
			     (unsigned long long)u, (unsigned long long)u % 8, cqe[i].status,
			     want[u]);
		cr_assert_eq(cqe[i].bytes, want_bytes[u]);
	}
	for (unsigned i = 7; i < N; i += 8)
		cr_assert_eq(memcmp(e.stp + i * 1024, e.slp + i * 1024, 1024), 0);
	cr_assert_eq(dp_queue_stats(e.q, &st), 0);
	cr_assert_eq(st.failed, (uint64_t)nfail);
	cr_assert_eq(st.completed, (uint64_t)(N - nfail));
	cr_assert_eq(st.in_flight, 0);
	expect_queue_works(&e);
	env_done(&e);
}
