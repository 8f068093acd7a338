/* fabric_vm.c - memory a client registered with dp_register_mem (malloc'd, and a file-backed MAP_SHARED mmap), exported by a client of service B, is a target for a client of service A: on the same host (B's client's pidfd passed, A's vm engine reads and writes the process, DP_CQE_F_SAME_HOST) and over the fabric (B stages it, process_vm_readv/writev into its bounce buffers, DP_CQE_F_FABRIC); WRITE then READ 1 B..64 MiB and 64 in flight, bytes checked; registered memory as A's local region too (process to process; staged on both sides); a notification reaches the owner; the owner unmapping it mid-transfer fails those descriptors -EFAULT and both services go on. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "helpers.h"

TestSuite(fabric_vm, .fini = fab_teardown, .timeout = 120);

#define GUARD 0x5a
#define DEPTH 64

/* B's client's memory: malloc'd, or a MAP_SHARED mapping of a temp file. */
enum mem_kind { MEM_MALLOC, MEM_FILE };

struct vm_target {
	struct fab_pair p;
	enum mem_kind kind;
	uint8_t *tgt; /* B's client's memory, registered */
	uint64_t tlen;
	int treg, seg, lreg;
	uint8_t *loc;
	uint64_t llen;
	struct dp_queue *q;
	uint32_t path; /* what the completions must say */
};

static uint8_t *mem_get(enum mem_kind kind, uint64_t len)
{
	void *m;

	if (kind == MEM_MALLOC) {
		m = malloc(len);
		cr_assert_not_null(m);
		return m;
	}
	char path[] = "/var/tmp/dp-fabric-vm-XXXXXX";
	int fd = mkstemp(path);

	cr_assert_geq(fd, 0, "mkstemp: %s", strerror(errno));
	unlink(path);
	cr_assert_eq(ftruncate(fd, (off_t)len), 0);
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert_neq(m, MAP_FAILED, "mmap of the file: %s", strerror(errno));
	close(fd);
	return m;
}

static void mem_put(enum mem_kind kind, uint8_t *m, uint64_t len)
{
	if (kind == MEM_MALLOC)
		free(m);
	else
		munmap(m, len);
}

/*
 * Services A and B (same host: both with their same-host socket; else
 * --no-same-host on both, so A reaches B through tcp and B stages the
 * export), B's client registers `tlen` bytes of `kind` memory and exports
 * it as `name`, A's client opens it with a region of `llen` and a queue.
 */
static void vt_open(struct vm_target *v, bool same, enum mem_kind kind, const char *name,
		    uint64_t llen, uint64_t tlen)
{
	memset(v, 0, sizeof(*v));
	fab_pair_start(&v->p, "tcp", same ? FAB_PAIR_SAME_A | FAB_PAIR_SAME_B : 0, NULL, NULL);
	v->kind = kind;
	v->tlen = tlen;
	v->tgt = mem_get(kind, tlen);
	memset(v->tgt, 0, tlen);
	v->treg = dp_register_mem(v->p.cb, v->tgt, tlen);
	cr_assert_geq(v->treg, 0, "dp_register_mem: %s (%s)", dp_strerror(v->treg),
		      dp_last_error());
	export_segment(v->p.cb, v->treg, name, DP_ACCESS_RW);
	v->llen = llen;
	v->lreg = alloc_region(v->p.ca, llen, &v->loc);
	v->seg = open_segment(v->p.ca, v->p.peer_b, name, DP_ACCESS_RW);
	v->q = make_queue(v->p.ca, DEPTH);
	v->path = same ? DP_CQE_F_SAME_HOST : DP_CQE_F_FABRIC;
}

static void vt_close(struct vm_target *v)
{
	dp_queue_destroy(v->q);
	fab_pair_stop(&v->p);
	mem_put(v->kind, v->tgt, v->tlen);
}

static void expect_ok(const struct vm_target *v, struct dp_cqe c, uint64_t len, const char *what)
{
	cr_assert_eq(c.status, 0, "%s of %llu B: %s", what, (unsigned long long)len,
		     dp_strerror(c.status));
	cr_assert_eq(c.bytes, len, "%s: %llu bytes", what, (unsigned long long)c.bytes);
	cr_assert_eq(c.flags & (DP_CQE_F_SAME_HOST | DP_CQE_F_FABRIC | DP_CQE_F_LOCAL), v->path,
		     "%s: flags %#x, want %#x", what, c.flags, v->path);
}

/* WRITE then READ 1 B, 4 KiB, 1 MiB and 64 MiB at odd offsets, the guard
 * bytes around each untouched. */
static void sizes(struct vm_target *v)
{
	static const struct xfer_shape xs[] = {
		{1, 5, 7}, {4096, 4096, 12345}, {MiB, 3, 65536 + 3}, {64 * MiB, 0, 65536}};

	for (unsigned i = 0; i < sizeof(xs) / sizeof(xs[0]); i++) {
		uint64_t len = xs[i].len, lo = xs[i].loff, to = xs[i].toff;

		guard_fill(v->tgt, v->tlen, to, len);
		pattern_fill(v->loc + lo, len, 10 + i);
		expect_ok(v, run1(v->q, true, v->lreg, lo, v->seg, to, len, 100 + i, 60000), len,
			  "WRITE");
		fab_check(v->tgt + to, len, 10 + i, v->tgt, v->tgt + v->tlen, GUARD, "WRITE");
		pattern_fill(v->tgt + to, len, 20 + i);
		guard_fill(v->loc, v->llen, lo, len);
		expect_ok(v, run1(v->q, false, v->lreg, lo, v->seg, to, len, 200 + i, 60000), len,
			  "READ");
		fab_check(v->loc + lo, len, 20 + i, v->loc, v->loc + v->llen, GUARD, "READ");
	}
	/* Beyond the export: refused, nothing moved. */
	struct dp_cqe c = run1(v->q, true, v->lreg, 0, v->seg, v->tlen - 10, 11, 900, 30000);

	cr_assert_eq(c.status, -EFAULT, "past the end: %s", dp_strerror(c.status));
}

/* 64 WRITEs in flight (lengths 1 .. 256 KiB + 1, one slot each), every
 * byte checked, then 64 READs of other bytes back. */
static void in_flight(struct vm_target *v)
{
	const uint64_t slot = 256 * 1024 + 64;
	struct dp_desc d[DEPTH];
	struct dp_cqe c[DEPTH];
	uint64_t len[DEPTH], rng = 7;

	cr_assert_leq(DEPTH * slot, v->tlen);
	cr_assert_leq(DEPTH * slot, v->llen);
	for (unsigned i = 0; i < DEPTH; i++) {
		len[i] = 1 + xorshift64(&rng) % (slot - 63);
		pattern_fill(v->loc + i * slot, len[i], 1000 + i);
		dp_prep_write(&d[i], v->lreg, i * slot, v->seg, i * slot + 17, len[i], i);
	}
	submit_all(v->q, d, DEPTH, 5000);
	reap(v->q, c, DEPTH, 60000);
	for (unsigned i = 0; i < DEPTH; i++) {
		uint64_t k = c[i].user_data;

		cr_assert_lt(k, DEPTH);
		expect_ok(v, c[i], len[k], "WRITE in flight");
		cr_assert_eq(pattern_check(v->tgt + k * slot + 17, len[k], 1000 + k), -1,
			     "WRITE %llu: wrong bytes", (unsigned long long)k);
	}
	for (unsigned i = 0; i < DEPTH; i++) {
		pattern_fill(v->tgt + i * slot + 17, len[i], 2000 + i);
		memset(v->loc + i * slot, 0, len[i]);
		dp_prep_read(&d[i], v->lreg, i * slot, v->seg, i * slot + 17, len[i], i);
	}
	submit_all(v->q, d, DEPTH, 5000);
	reap(v->q, c, DEPTH, 60000);
	for (unsigned i = 0; i < DEPTH; i++) {
		uint64_t k = c[i].user_data;

		expect_ok(v, c[i], len[k], "READ in flight");
		cr_assert_eq(pattern_check(v->loc + k * slot, len[k], 2000 + k), -1,
			     "READ %llu: wrong bytes", (unsigned long long)k);
	}
}

static void sizes_and_in_flight(bool same, enum mem_kind kind)
{
	struct vm_target v;

	vt_open(&v, same, kind, "vm-sizes", 64 * MiB + 8192, 64 * MiB + 65536);
	sizes(&v);
	in_flight(&v);
	vt_close(&v);
}

Test(fabric_vm, same_host_malloc_1B_to_64MiB_and_64_in_flight)
{
	sizes_and_in_flight(true, MEM_MALLOC);
}

Test(fabric_vm, same_host_file_mmap_1B_to_64MiB_and_64_in_flight)
{
	sizes_and_in_flight(true, MEM_FILE);
}

Test(fabric_vm, fabric_malloc_1B_to_64MiB_and_64_in_flight)
{
	sizes_and_in_flight(false, MEM_MALLOC);
}

Test(fabric_vm, fabric_file_mmap_1B_to_64MiB_and_64_in_flight)
{
	sizes_and_in_flight(false, MEM_FILE);
}

/* A's local region is registered memory too (malloc'd in this process):
 * same host, process to process through the vm engine's bounce buffer;
 * over the fabric, staged on both sides. */
static void registered_both_ends(bool same)
{
	const uint64_t len = 8 * MiB + 3;
	struct vm_target v;
	uint8_t *mine = malloc(len + 64);
	int r;

	cr_assert_not_null(mine);
	vt_open(&v, same, MEM_MALLOC, "vm-both", MiB, len + 64);
	r = dp_register_mem(v.p.ca, mine, len + 64);
	cr_assert_geq(r, 0, "dp_register_mem: %s", dp_strerror(r));
	for (unsigned i = 0; i < 2; i++) {
		uint64_t n = i ? len : 4096;

		pattern_fill(mine + 1, n, 40 + i);
		guard_fill(v.tgt, v.tlen, 9, n);
		expect_ok(&v, run1(v.q, true, r, 1, v.seg, 9, n, 10 + i, 60000), n, "WRITE");
		fab_check(v.tgt + 9, n, 40 + i, v.tgt, v.tgt + v.tlen, GUARD, "WRITE");
		pattern_fill(v.tgt + 9, n, 50 + i);
		guard_fill(mine, len + 64, 1, n);
		expect_ok(&v, run1(v.q, false, r, 1, v.seg, 9, n, 20 + i, 60000), n, "READ");
		fab_check(mine + 1, n, 50 + i, mine, mine + len + 64, GUARD, "READ");
	}
	vt_close(&v);
	free(mine);
}

Test(fabric_vm, same_host_registered_on_both_ends)
{
	registered_both_ends(true);
}

Test(fabric_vm, fabric_registered_on_both_ends)
{
	registered_both_ends(false);
}

/* A WRITE with a notification into the mapped export: the owner (B's
 * client) hears of it once the bytes are there. */
Test(fabric_vm, same_host_notification_reaches_the_owner)
{
	struct dp_notification n;
	struct vm_target v;
	struct dp_desc d;
	int rc = 0;

	vt_open(&v, true, MEM_MALLOC, "vm-notify", MiB, MiB);
	cr_assert_eq(dp_notify_open(v.p.cb, 64), 0);
	pattern_fill(v.loc, 300000, 77);
	dp_prep_write_notify(&d, v.lreg, 0, v.seg, 4096, 300000, 1, 0xabcdef);
	expect_ok(&v, run_wait(v.q, &d, 30000), 300000, "WRITE with a notification");
	cr_assert_eq(pattern_check(v.tgt + 4096, 300000, 77), -1);
	for (unsigned i = 0; i < 500 && (rc = dp_notify_poll(v.p.cb, &n, 1)) == 0; i++)
		sleep_ms(10);
	cr_assert_eq(rc, 1, "the owner's notification: %d", rc);
	cr_assert_eq(n.value, 0xabcdef);
	cr_assert_eq(n.offset, 4096);
	cr_assert_eq(n.len, 300000);
	cr_assert_eq(n.flags, DP_NOTIFY_F_SAME_HOST, "flags %#x", n.flags);
	cr_assert_str_eq(n.segment, "vm-notify");
	vt_close(&v);
}

/*
 * The owner unmaps its memory while 64 WRITEs of 1 MiB are in flight: the
 * ones not done by then fail -EFAULT (a reservation with no access takes
 * the range at once, so nothing else is mapped there meanwhile), every
 * descriptor completes once, and both services go on: a new registration
 * is written and read back.
 */
static void unmapped_in_flight(bool same)
{
	struct vm_target v;
	struct dp_desc d[DEPTH];
	struct dp_cqe c[DEPTH];
	unsigned failed = 0;
	uint8_t *m2;
	int r2, s2;

	vt_open(&v, same, MEM_FILE, "vm-unmap", DEPTH * MiB, DEPTH * MiB);
	pattern_fill(v.loc, DEPTH * MiB, 5);
	for (unsigned i = 0; i < DEPTH; i++)
		dp_prep_write(&d[i], v.lreg, i * MiB, v.seg, i * MiB, MiB, i);
	submit_all(v.q, d, DEPTH, 5000);
	cr_assert_neq(
		mmap(v.tgt, v.tlen, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
		MAP_FAILED);
	reap(v.q, c, DEPTH, 60000);
	for (unsigned i = 0; i < DEPTH; i++) {
		if (c[i].status == 0) {
			cr_assert_eq(c[i].bytes, MiB);
			continue;
		}
		cr_assert_eq(c[i].status, -EFAULT, "WRITE %llu: %s, want EFAULT or success",
			     (unsigned long long)c[i].user_data, dp_strerror(c[i].status));
		failed++;
	}
	cr_assert_gt(failed, 0, "no WRITE was in flight when the memory went");
	/* Later transfers to it fail the same way; the services are fine. */
	{
		struct dp_cqe e = run1(v.q, false, v.lreg, 0, v.seg, 0, 4096, 500, 30000);

		cr_assert_eq(e.status, -EFAULT, "READ of unmapped memory: %s",
			     dp_strerror(e.status));
	}
	munmap(v.tgt, v.tlen);
	v.kind = MEM_MALLOC;
	v.tlen = 4 * MiB;
	v.tgt = m2 = mem_get(MEM_MALLOC, v.tlen);
	r2 = dp_register_mem(v.p.cb, m2, v.tlen);
	cr_assert_geq(r2, 0, "dp_register_mem: %s", dp_strerror(r2));
	export_segment(v.p.cb, r2, "vm-unmap-2", DP_ACCESS_RW);
	s2 = open_segment(v.p.ca, v.p.peer_b, "vm-unmap-2", DP_ACCESS_RW);
	pattern_fill(v.loc, v.tlen, 9);
	expect_ok(&v, run1(v.q, true, v.lreg, 0, s2, 0, v.tlen, 501, 30000), v.tlen, "WRITE");
	cr_assert_eq(pattern_check(m2, v.tlen, 9), -1);
	pattern_fill(m2, v.tlen, 11);
	expect_ok(&v, run1(v.q, false, v.lreg, 0, s2, 0, v.tlen, 502, 30000), v.tlen, "READ");
	cr_assert_eq(pattern_check(v.loc, v.tlen, 11), -1);
	vt_close(&v);
}

Test(fabric_vm, same_host_unmapped_in_flight_is_efault)
{
	unmapped_in_flight(true);
}

Test(fabric_vm, fabric_unmapped_in_flight_is_efault)
{
	unmapped_in_flight(false);
}
