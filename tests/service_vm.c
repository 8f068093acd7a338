/* SPDX-License-Identifier: MIT */
/*
 * service_vm.c - memory the caller already has (dp_register_mem, the vm
 * engine): malloc'd memory to and from host regions and another process's
 * export, 1 B..256 MiB byte for byte; memory unmapped later (-EFAULT, the
 * service goes on); memory never mapped (-EFAULT at registration); a client
 * that exits with transfers in flight (no crash, no fd left); a connection
 * cannot name another process's memory; what the engine refuses
 * (-ENOTSUP); a memfd without MFD_ALLOW_SEALING (-EPERM, and its mapping
 * through dp_register_mem instead); an fd that is not open (-EINVAL, the
 * connection unharmed); a process that is not dumpable (-EPERM, even for a
 * service that runs as root and could read it).
 */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "dp_proto.h"
#include "helpers.h"

TestSuite(service_vm, .fini = svc_teardown, .timeout = 240);

#define BIG (256ull << 20)
#define GUARD 0x5a

/* Lengths and unaligned offsets: below and above --inline-max (64 KiB) and
 * --copy-chunk (256 KiB), up to 256 MiB. */
static const struct {
	uint64_t len, moff, toff;
} sizes[] = {
	{1, 3, 5},
	{63, 1, 4097},
	{4097, 4095, 1},
	{65536, 0, 7},
	{65537, 9, 0},
	{(1u << 20) + 3, 77, 3},
	{(5u << 20) + 1, 4096, 12345},
	{BIG, 0, 0},
};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void expect_ok(struct dp_cqe c, uint64_t len, const char *what)
{
	cr_assert_eq(c.status, 0, "%s: %s", what, dp_strerror(c.status));
	cr_assert_eq(c.bytes, len, "%s: %llu bytes", what, (unsigned long long)c.bytes);
	cr_assert_eq(c.flags, DP_CQE_F_LOCAL, "%s: flags %#x", what, c.flags);
}

/* Guard bytes around [off, off + len) of a buffer of buf_len (fab_check
 * looks 64 bytes either side). */
static void guard_window(uint8_t *buf, uint64_t buf_len, uint64_t off, uint64_t len)
{
	uint64_t lo = off > 64 ? off - 64 : 0, hi = off + len + 64;

	memset(buf + lo, GUARD, (hi < buf_len ? hi : buf_len) - lo);
}

/* Every size, WRITE from malloc'd memory into a host region's export and
 * READ back into it, checked byte for byte with the guards around. */
static void round_trips(struct dp_queue *q, int mreg, uint8_t *mem, int seg, uint8_t *tgt,
			uint64_t tgt_len)
{
	for (unsigned i = 0; i < NSIZES; i++) {
		uint64_t len = sizes[i].len, mo = sizes[i].moff, to = sizes[i].toff;
		char what[64];

		if (to + len > tgt_len)
			to = tgt_len - len;
		guard_window(tgt, tgt_len, to, len);
		pattern_fill(mem + mo, len, 1000 + i);
		snprintf(what, sizeof(what), "WRITE %llu B", (unsigned long long)len);
		expect_ok(run1(q, true, mreg, mo, seg, to, len, i, 60000), len, what);
		fab_check(tgt + to, len, 1000 + i, tgt, tgt + tgt_len, GUARD, what);

		guard_window(mem, BIG + 8192, mo, len);
		pattern_fill(tgt + to, len, 2000 + i);
		snprintf(what, sizeof(what), "READ %llu B", (unsigned long long)len);
		expect_ok(run1(q, false, mreg, mo, seg, to, len, 100 + i, 60000), len, what);
		fab_check(mem + mo, len, 2000 + i, mem, mem + BIG + 8192, GUARD, what);
	}
}

/* malloc'd memory of this process to and from its own host region. */
Test(service_vm, malloc_to_own_host_region)
{
	struct dp_client *c;
	struct dp_queue *q;
	uint8_t *mem, *tgt;
	int mreg, treg, seg;

	start_svc(&svc, local_only);
	c = connect_client(&svc, "vm");
	q = make_queue(c, 8);
	mem = malloc(BIG + 8192);
	cr_assert(mem);
	mreg = dp_register_mem(c, mem, BIG + 8192);
	cr_assert_geq(mreg, 0, "dp_register_mem: %s", dp_last_error());
	treg = alloc_region(c, BIG, &tgt);
	seg = export_open(c, treg, "vm/host", DP_ACCESS_RW, DP_ACCESS_RW);
	round_trips(q, mreg, mem, seg, tgt, BIG);
	/* The VM region exported: the host region WRITEs into it. */
	seg = export_open(c, mreg, "vm/mem", DP_ACCESS_RW, DP_ACCESS_RW);
	pattern_fill(tgt, 1 << 20, 31);
	expect_ok(run1(q, true, treg, 0, seg, 5, 1 << 20, 1, 60000), 1 << 20,
		  "host -> exported VM");
	cr_assert_eq(pattern_check(mem + 5, 1 << 20, 31), -1);
	cr_assert_eq(dp_free(c, mreg), 0);
	free(mem);
	dp_close(c);
	service_still_serves();
}

static bool child_ok(struct dp_queue *q, bool write, int region, uint64_t loff, int seg,
		     uint64_t toff, uint64_t len)
{
	struct dp_desc d;
	struct dp_cqe c;

	if (write)
		dp_prep_write(&d, region, loff, seg, toff, len, 9);
	else
		dp_prep_read(&d, region, loff, seg, toff, len, 9);
	return dp_submit(q, &d, 1) == 1 && dp_wait(q, &c, 1, 60000) == 1 && c.status == 0 &&
	       c.bytes == len && c.flags == DP_CQE_F_LOCAL;
}

/*
 * Another process, another client: its malloc'd memory WRITEs into our host
 * region's export and READs our pattern back (VM <-> host), then WRITEs
 * into our exported malloc'd memory (VM <-> VM, two processes).
 */
static void other_main(int to_parent, int from_parent)
{
	struct dp_client *c;
	struct dp_queue *q;
	uint64_t len = 64ull << 20;
	uint8_t *mem = malloc(len + 16);
	int mreg, seg_host, seg_mem;

	if (!mem || dp_connect(svc.sock, "vm-other", &c) || dp_queue_create(c, 8, &q))
		_exit(1);
	mreg = dp_register_mem(c, mem, len + 16);
	seg_host = dp_segment_open(c, NULL, "vm/parent-host", DP_ACCESS_RW);
	seg_mem = dp_segment_open(c, NULL, "vm/parent-mem", DP_ACCESS_RW);
	if (mreg < 0 || seg_host < 0 || seg_mem < 0)
		_exit(2);
	for (uint64_t n = 1; n <= len; n *= 8) {
		pattern_fill(mem + 3, n, 50 + n);
		if (!child_ok(q, true, mreg, 3, seg_host, 1, n))
			_exit(3);
		pipe_put(to_parent, 'W');
		if (!pipe_get(from_parent, 'R')) /* the parent checked and wrote 60 + n */
			_exit(4);
		if (!child_ok(q, false, mreg, 0, seg_host, 7, n))
			_exit(5);
		if (pattern_check(mem, n, 60 + n) != -1)
			_exit(6);
	}
	pattern_fill(mem, len, 77);
	if (!child_ok(q, true, mreg, 0, seg_mem, 11, len))
		_exit(7);
	pipe_put(to_parent, 'M');
	dp_close(c);
	_exit(0);
}

Test(service_vm, another_process_and_its_export)
{
	struct dp_client *c;
	uint64_t len = 64ull << 20;
	uint8_t *tgt, *mem = calloc(1, len + 64);
	int treg, mreg, up[2], down[2];
	pid_t pid;

	start_svc(&svc, local_only);
	c = connect_client(&svc, "vm-parent");
	treg = alloc_region(c, len + 64, &tgt);
	export_segment(c, treg, "vm/parent-host", DP_ACCESS_RW);
	cr_assert(mem);
	mreg = dp_register_mem(c, mem, len + 64);
	cr_assert_geq(mreg, 0, "%s", dp_last_error());
	export_segment(c, mreg, "vm/parent-mem", DP_ACCESS_RW);
	cr_assert_eq(pipe(up), 0);
	cr_assert_eq(pipe(down), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		other_main(up[1], down[0]);
	child_pid = pid;
	for (uint64_t n = 1; n <= len; n *= 8) {
		cr_assert(pipe_get(up[0], 'W'), "child: status %d", wait_child(pid));
		cr_assert_eq(pattern_check(tgt + 1, n, 50 + n), -1, "child's %llu B WRITE",
			     (unsigned long long)n);
		pattern_fill(tgt + 7, n, 60 + n);
		pipe_put(down[1], 'R');
	}
	cr_assert(pipe_get(up[0], 'M'), "child: status %d", wait_child(pid));
	cr_assert_eq(pattern_check(mem + 11, len, 77), -1, "VM -> VM between two processes");
	cr_assert_eq(mem[10], 0);
	cr_assert_eq(mem[11 + len], 0);
	cr_assert_eq(wait_child(pid), 0);
	child_pid = 0;
	dp_close(c);
	free(mem);
	service_still_serves();
}

/* Unmapped after registration: -EFAULT for every descriptor, small or
 * sliced, whole or partly gone; the service and the client go on. */
Test(service_vm, unmapped_later_is_efault)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t len = 4u << 20;
	struct dp_client *c;
	struct dp_queue *q;
	uint8_t *mem, *tgt;
	int mreg, treg, seg;
	struct dp_cqe e;

	start_svc(&svc, local_only);
	c = connect_client(&svc, "vm-unmap");
	q = make_queue(c, 8);
	treg = alloc_region(c, len, &tgt);
	seg = export_open(c, treg, "vm/unmap", DP_ACCESS_RW, DP_ACCESS_RW);
	mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(mem, MAP_FAILED);
	mreg = dp_register_mem(c, mem, len);
	cr_assert_geq(mreg, 0, "%s", dp_last_error());
	memset(mem, 1, len);
	expect_ok(run1(q, true, mreg, 0, seg, 0, len, 1, 60000), len, "mapped");
	/* The last page goes: a sliced copy faults at its end. */
	cr_assert_eq(munmap(mem + len - page, page), 0);
	e = run1(q, true, mreg, 0, seg, 0, len, 2, 60000);
	cr_assert_eq(e.status, -EFAULT, "partly unmapped WRITE: %d", e.status);
	e = run1(q, false, mreg, 0, seg, 0, len, 3, 60000);
	cr_assert_eq(e.status, -EFAULT, "partly unmapped READ: %d", e.status);
	expect_ok(run1(q, true, mreg, 0, seg, 0, 4096, 4, 60000), 4096, "the mapped part");
	/* All of it, then a PROT_NONE mapping in its place. */
	cr_assert_eq(munmap(mem, len - page), 0);
	e = run1(q, true, mreg, 0, seg, 0, 64, 5, 60000);
	cr_assert_eq(e.status, -EFAULT, "unmapped 64 B WRITE: %d", e.status);
	cr_assert_eq(mmap(mem, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
		     mem);
	e = run1(q, false, mreg, 0, seg, 0, len, 6, 60000);
	cr_assert_eq(e.status, -EFAULT, "PROT_NONE READ: %d", e.status);
	munmap(mem, len);
	/* The client is still served. */
	mem = malloc(4096);
	mreg = dp_register_mem(c, mem, 4096);
	cr_assert_geq(mreg, 0);
	expect_ok(run1(q, true, mreg, 0, seg, 0, 4096, 7, 60000), 4096, "after the faults");
	free(mem);
	dp_close(c);
	service_still_serves();
}

/*
 * Small copies of one batch between the same two sides go in one
 * process_vm_* call (the vm engine's gather): each still gets its own
 * status. NP pages of 16 KiB at scattered indices, two with a hole (a
 * 4 KiB page unmapped at the start of page 0, so that a gather's first
 * call fails outright, and in the middle of page HOLE, so that one comes
 * back short): those descriptors alone fail with -EFAULT and no bytes,
 * every other one moves its bytes.
 * WRITE registered -> host region, READ host region -> registered (the
 * hole on the target side of the call), and registered -> registered in
 * this process (through the poller's bounce buffer): the hole at the
 * source (WRITE) and at the destination (READ).
 */
#define NP 96
#define PG (16u << 10)
#define HOLE 37
#define HOLED(i) ((i) == 0 || (i) == HOLE)

static void gather_round(struct dp_queue *q, bool write, int lreg, uint8_t *lmem, int seg,
			 uint8_t *tmem, uint64_t seed, const char *what)
{
	struct dp_desc d[NP];
	struct dp_cqe e[NP];
	uint8_t *src = write ? lmem : tmem, *dst = write ? tmem : lmem;
	bool hole_in_src = write; /* the hole is in lmem's page HOLE */

	for (unsigned i = 0; i < NP; i++) {
		unsigned tp = (i * 7 + 3) % NP; /* the target's page: scattered */

		d[i] = (struct dp_desc){.opcode = write ? DP_OP_WRITE : DP_OP_READ,
					.region = (uint32_t)lreg,
					.local_off = (uint64_t)i * PG,
					.segment = (uint32_t)seg,
					.target_off = (uint64_t)tp * PG,
					.len = PG,
					.user_data = i};
		if (!HOLED(i) || !hole_in_src)
			pattern_fill(src + (write ? i : tp) * (uint64_t)PG, PG, seed + i);
		if (!HOLED(i) || hole_in_src)
			memset(dst + (write ? tp : i) * (uint64_t)PG, GUARD, PG);
	}
	run_batch(q, d, NP, e, 60000);
	for (unsigned i = 0; i < NP; i++) {
		unsigned tp = (i * 7 + 3) % NP;
		uint8_t *at = dst + (write ? tp : i) * (uint64_t)PG;

		if (HOLED(i)) {
			cr_assert_eq(e[i].status, -EFAULT, "%s: page %u, with a hole: %d", what, i,
				     e[i].status);
			cr_assert_eq(e[i].bytes, 0, "%s: page %u, with a hole", what, i);
			/* Its target range may hold what the kernel copied up
			 * to the hole (as for one call alone); its neighbours
			 * are checked as pages of their own. */
			continue;
		}
		cr_assert_eq(e[i].status, 0, "%s: page %u: %s", what, i, dp_strerror(e[i].status));
		cr_assert_eq(e[i].bytes, PG);
		cr_assert_eq(pattern_check(at, PG, seed + i), -1, "%s: page %u's bytes", what, i);
	}
}

Test(service_vm, gathered_small_copies_each_get_their_own_status)
{
	long page = sysconf(_SC_PAGESIZE);
	uint64_t len = (uint64_t)NP * PG;
	struct dp_client *c;
	struct dp_queue *q;
	uint8_t *mem, *mem2, *tgt;
	int mreg, mreg2, treg, seg, seg2;

	start_svc(&svc, local_only);
	c = connect_client(&svc, "vm-gather");
	q = make_queue(c, 128);
	treg = alloc_region(c, len, &tgt);
	seg = export_open(c, treg, "vm/gather-host", DP_ACCESS_RW, DP_ACCESS_RW);
	mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	mem2 = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert(mem != MAP_FAILED && mem2 != MAP_FAILED);
	memset(mem, 0, len);
	memset(mem2, 0, len);
	mreg = dp_register_mem(c, mem, len);
	mreg2 = dp_register_mem(c, mem2, len);
	cr_assert(mreg >= 0 && mreg2 >= 0, "dp_register_mem: %s", dp_last_error());
	seg2 = export_open(c, mreg2, "vm/gather-mem", DP_ACCESS_RW, DP_ACCESS_RW);
	cr_assert_eq(munmap(mem + (uint64_t)HOLE * PG + (uint64_t)page, (size_t)page), 0);
	cr_assert_eq(munmap(mem, (size_t)page), 0);

	gather_round(q, true, mreg, mem, seg, tgt, 100, "WRITE registered -> host");
	gather_round(q, false, mreg, mem, seg, tgt, 200, "READ host -> registered");
	gather_round(q, true, mreg, mem, seg2, mem2, 300, "WRITE registered -> registered");
	gather_round(q, false, mreg, mem, seg2, mem2, 400, "READ registered -> registered");
	munmap(mem + page, len - (uint64_t)page);
	munmap(mem2, len);
	dp_close(c);
	service_still_serves();
}

/* Registration probes the first and last byte: -EFAULT when either is not
 * mapped; NULL and empty ranges are -EINVAL in the library. */
Test(service_vm, register_unmapped_is_efault)
{
	long page = sysconf(_SC_PAGESIZE);
	struct dp_client *c;
	uint8_t *m;
	int rc;

	start_svc(&svc, local_only);
	c = connect_client(&svc, "vm-reg");
	m = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(m, MAP_FAILED);
	cr_assert_eq(munmap(m + 3 * page, page), 0);
	rc = dp_register_mem(c, m + 3 * page, 16);
	cr_assert_eq(rc, -EFAULT, "unmapped start: %d", rc);
	cr_assert(strstr(dp_last_error(), "dp_register_mem"), "%s", dp_last_error());
	cr_assert(strstr(dp_last_error(), "EFAULT"), "%s", dp_last_error());
	rc = dp_register_mem(c, m, 3 * page + 1);
	cr_assert_eq(rc, -EFAULT, "unmapped end: %d", rc);
	rc = dp_register_mem(c, m + page, page - 7);
	cr_assert_geq(rc, 0, "mapped: %s", dp_last_error());
	cr_assert_eq(dp_register_mem(c, NULL, 16), -EINVAL);
	cr_assert_eq(dp_register_mem(c, m, 0), -EINVAL);
	cr_assert_eq(dp_register_mem(c, (void *)-4096l, 8192), -EINVAL);
	cr_assert_eq(dp_register_mem(c, (void *)0x1000, 16), -EFAULT);
	munmap(m, 3 * page);
	dp_close(c);
	service_still_serves();
}

/* A client that exits with sliced VM transfers in flight: the service
 * finishes or fails them, frees everything (its fd count comes back), and
 * serves on. */
Test(service_vm, client_exits_in_flight)
{
	int base;
	pid_t pid;

	start_svc(&svc, local_only);
	/* The baseline once the start-up probe's connection is gone: the
	 * count holds still for 100 ms. */
	for (int prev = -1; (base = proc_fd_count(svc.pid)) != prev; prev = base)
		sleep_ms(100);
	for (int round = 0; round < 3; round++) {
		int up[2];

		cr_assert_eq(pipe(up), 0);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			uint64_t len = 64ull << 20;
			struct dp_client *c;
			struct dp_queue *q;
			struct dp_desc d[8];
			uint8_t *mem = malloc(len), *tgt;
			int mreg, treg, seg;

			if (!mem || dp_connect(svc.sock, "vm-exit", &c) ||
			    dp_queue_create(c, 8, &q))
				_exit(1);
			memset(mem, 3, len);
			mreg = dp_register_mem(c, mem, len);
			treg = dp_alloc(c, len, 0, (void **)&tgt);
			if (mreg < 0 || treg < 0 ||
			    dp_segment_export(c, treg, "vm/exit", DP_ACCESS_RW) ||
			    (seg = dp_segment_open(c, NULL, "vm/exit", DP_ACCESS_RW)) < 0)
				_exit(2);
			for (int i = 0; i < 8; i++)
				if (i & 1)
					dp_prep_read(&d[i], mreg, 0, seg, 0, len, i);
				else
					dp_prep_write(&d[i], mreg, 0, seg, 0, len, i);
			if (dp_submit(q, d, 8) != 8)
				_exit(3);
			pipe_put(up[1], 'S');
			/* Round 0 exits at once; the others unmap first. */
			if (round == 1)
				munmap(mem, len);
			_exit(0);
		}
		child_pid = pid;
		close(up[1]);
		cr_assert(pipe_get(up[0], 'S'), "child: %d", wait_child(pid));
		close(up[0]);
		cr_assert_eq(wait_child(pid), 0);
		child_pid = 0;
	}
	wait_fds(base, 10000);
	service_still_serves();
}

/*
 * Nothing in a message names the process: a connection that claims another
 * pid in its HELLO registers its own memory all the same. The child maps a
 * page only it has and fills a buffer both have with its own bytes; the
 * lying registration of the first is -EFAULT, of the second reads ours.
 */
Test(service_vm, pid_is_the_connections_not_the_messages)
{
	long page = sysconf(_SC_PAGESIZE);
	uint8_t *both = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	uint8_t *shared_addr =
		mmap(NULL, 64, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct dp_msg_region_register_mem mr;
	struct dp_msg_segment_export ex = {.access = DP_ACCESS_READ};
	struct dp_msg_hello h = {.abi_version = DP_ABI_VERSION};
	struct dp_client *c;
	struct dp_queue *q;
	uint8_t *dst;
	uint32_t id;
	int fd, up[2], dreg, seg, rc;
	pid_t pid;

	cr_assert_neq(both, MAP_FAILED);
	cr_assert_neq(shared_addr, MAP_FAILED);
	/* `both` becomes private to each process: remapped privately after fork. */
	start_svc(&svc, local_only);
	cr_assert_eq(pipe(up), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		uint8_t *only = mmap(NULL, page, PROT_READ | PROT_WRITE,
				     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (only == MAP_FAILED ||
		    mmap(both, page, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != both)
			_exit(1);
		memset(only, 0xc1, page);
		memset(both, 0xc2, page);
		memcpy(shared_addr, &only, sizeof(only));
		pipe_put(up[1], 'R');
		pause();
		_exit(0);
	}
	child_pid = pid;
	cr_assert_eq(mmap(both, page, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
		     both);
	memset(both, 0xa1, page);
	cr_assert(pipe_get(up[0], 'R'));

	fd = raw_connect(svc.sock, 10);
	h.pid = (uint32_t)pid; /* the lie */
	strcpy(h.name, "liar");
	cr_assert_eq(raw_call(fd, DP_MSG_HELLO, &h, sizeof(h), NULL), 0);
	{
		uint8_t *only;

		memcpy(&only, shared_addr, sizeof(only));
		mr = (struct dp_msg_region_register_mem){.addr = (uintptr_t)only, .len = 16};
		/* Mapped in the child only (if it happens to be mapped here,
		 * it is our memory, never the child's: checked below). */
		rc = raw_call(fd, DP_MSG_REGION_REGISTER_MEM, &mr, sizeof(mr), NULL);
		cr_assert(rc == -EFAULT || rc >= 0, "child-only page: %d", rc);
	}
	mr = (struct dp_msg_region_register_mem){.addr = (uintptr_t)both, .len = 64};
	cr_assert_eq(raw_call(fd, DP_MSG_REGION_REGISTER_MEM, &mr, sizeof(mr), &id), 0);
	ex.region = id;
	strcpy(ex.name, "vm/liar");
	cr_assert_eq(raw_call(fd, DP_MSG_SEGMENT_EXPORT, &ex, sizeof(ex), NULL), 0);
	/* What the registration names, read through it: our bytes. */
	c = connect_client(&svc, "vm-reader");
	q = make_queue(c, 8);
	dreg = alloc_region(c, 64, &dst);
	seg = open_segment(c, NULL, "vm/liar", DP_ACCESS_READ);
	expect_ok(run1(q, false, dreg, 0, seg, 0, 64, 1, 60000), 64, "READ of the liar's region");
	for (int i = 0; i < 64; i++)
		cr_assert_eq(dst[i], 0xa1, "byte %d is %#x: not the connecting process's", i,
			     dst[i]);
	close(fd);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	child_pid = 0;
	dp_close(c);
	service_still_serves();
}

/* What the vm engine does not do: a VM region with a file region is
 * -ENOTSUP, and the queue goes on. */
Test(service_vm, enotsup_with_files)
{
	struct dp_client *c;
	struct dp_queue *q;
	uint8_t *mem = malloc(8192);
	int mreg, freg, seg, fd;
	struct dp_cqe e;

	start_svc(&svc, local_only);
	c = connect_client(&svc, "vm-file");
	q = make_queue(c, 8);
	mreg = dp_register_mem(c, mem, 8192);
	cr_assert_geq(mreg, 0);
	fd = file_make("vm-file", 8192, 5, O_RDWR);
	freg = dp_register_file(c, fd, 0, 8192, DP_ACCESS_RW);
	close(fd);
	if (freg == -ENOTSUP)
		cr_skip_test("no io_uring here");
	cr_assert_geq(freg, 0, "%s", dp_last_error());
	seg = export_open(c, freg, "vm/file", DP_ACCESS_RW, DP_ACCESS_RW);
	e = run1(q, true, mreg, 0, seg, 0, 4096, 1, 60000);
	cr_assert_eq(e.status, -ENOTSUP, "VM -> file: %d", e.status);
	seg = export_open(c, mreg, "vm/mem", DP_ACCESS_RW, DP_ACCESS_RW);
	e = run1(q, false, freg, 0, seg, 0, 4096, 2, 60000);
	cr_assert_eq(e.status, -ENOTSUP, "file <- VM: %d", e.status);
	dp_close(c);
	free(mem);
	file_teardown();
}

/* A memfd made without MFD_ALLOW_SEALING: dp_register_fd says why and what
 * to do (-EPERM); its mapping registers through dp_register_mem. */
Test(service_vm, unsealable_memfd)
{
	size_t len = 1 << 20;
	struct dp_client *c;
	struct dp_queue *q;
	uint8_t *m, *tgt;
	int fd, rc, mreg, treg, seg;

	start_svc(&svc, local_only);
	c = connect_client(&svc, "vm-memfd");
	q = make_queue(c, 8);
	fd = memfd_create("plain", MFD_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)len), 0);
	rc = dp_register_fd(c, fd, 0, len);
	cr_assert_eq(rc, -EPERM, "unsealable memfd: %d", rc);
	cr_assert(strstr(dp_last_error(), "MFD_ALLOW_SEALING") &&
			  strstr(dp_last_error(), "dp_register_mem"),
		  "%s", dp_last_error());
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert_neq(m, MAP_FAILED);
	mreg = dp_register_mem(c, m, len);
	cr_assert_geq(mreg, 0, "%s", dp_last_error());
	treg = alloc_region(c, len, &tgt);
	seg = export_open(c, treg, "vm/memfd", DP_ACCESS_RW, DP_ACCESS_RW);
	pattern_fill(m, len, 8);
	expect_ok(run1(q, true, mreg, 0, seg, 0, len, 1, 60000), len, "memfd mapping -> host");
	cr_assert_eq(pattern_check(tgt, len, 8), -1);
	/* Shrunk under the service: -EFAULT, no SIGBUS anywhere. */
	cr_assert_eq(ftruncate(fd, 0), 0);
	cr_assert_eq(run1(q, true, mreg, 0, seg, 0, len, 2, 60000).status, -EFAULT);
	munmap(m, len);
	close(fd);
	dp_close(c);
	service_still_serves();
}

/* A process forked after dp_connect cannot register through its parent's
 * connection: its addresses would name the parent's bytes. */
Test(service_vm, forked_child_is_refused)
{
	struct dp_client *c;
	pid_t pid;
	char buf[64];

	start_svc(&svc, local_only);
	c = connect_client(&svc, "vm-fork");
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(dp_register_mem(c, buf, sizeof(buf)) == -EINVAL ? 0 : 1);
	cr_assert_eq(wait_child(pid), 0);
	cr_assert_geq(dp_register_mem(c, buf, sizeof(buf)), 0, "%s", dp_last_error());
	dp_close(c);
	stop_svc(&svc);
}

/* An fd number that is not open is a bad argument (-EINVAL), not a dead
 * service: the send that would carry it fails before anything is sent, and
 * the connection goes on. */
Test(service_vm, register_fd_of_a_closed_fd)
{
	struct dp_client *c;
	uint8_t *p;
	int fd;

	start_svc(&svc, local_only);
	c = connect_client(&svc, "vm-badfd");
	fd = memfd_create("closed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, 4096), 0);
	close(fd);
	cr_assert_eq(dp_register_fd(c, fd, 0, 4096), -EINVAL, "%s", dp_last_error());
	cr_assert(strstr(dp_last_error(), "dp_register_fd"), "%s", dp_last_error());
	cr_assert_geq(alloc_region(c, 4096, &p), 0, "the client goes on: %s", dp_last_error());
	dp_close(c);
	service_still_serves();
}

/* A process that made itself non-dumpable asked not to be read from
 * outside: dp_register_mem refuses it (-EPERM) whatever the service's
 * privileges (this service runs as root, which the kernel would let read
 * it), and registers once it is dumpable again. */
Test(service_vm, not_dumpable_is_eperm)
{
	struct dp_client *c;
	char buf[4096];
	int rc;

	start_svc(&svc, local_only);
	c = connect_client(&svc, "vm-dumpable");
	cr_assert_eq(prctl(PR_SET_DUMPABLE, 0), 0);
	rc = dp_register_mem(c, buf, sizeof(buf));
	cr_assert_eq(prctl(PR_SET_DUMPABLE, 1), 0);
	cr_assert_eq(rc, -EPERM, "not dumpable: %d", rc);
	cr_assert(strstr(dp_last_error(), "dumpable"), "%s", dp_last_error());
	rc = dp_register_mem(c, buf, sizeof(buf));
	cr_assert_geq(rc, 0, "dumpable again: %s", dp_last_error());
	dp_close(c);
	stop_svc(&svc);
}
