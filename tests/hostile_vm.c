/* hostile_vm.c - a client whose registered memory (dp_register_mem) the kernel must wait for: a userfaultfd range it never answers. Its copy waits inside process_vm_readv, on the poller's vm worker thread; the poller and every other client's transfers go on. Once the client dies its copy returns, and registered memory moves again. The same over the fabric: another service READs the range, its owner's service stages it (on its vm worker), and that service's poller goes on serving the fabric and its clients. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "helpers.h"

TestSuite(hostile_vm, .fini = svc_teardown);
TestSuite(hostile_vm_fabric, .fini = fab_teardown);

#define LEN (1u << 20)
#define PAGE 4096u

/* A range of ours whose untouched pages fault into a userfaultfd nobody
 * reads; NULL where this kernel gives us none. */
static uint8_t *unanswered_range(int *ufd)
{
	struct uffdio_api api = {.api = UFFD_API};
	struct uffdio_register reg = {.mode = UFFDIO_REGISTER_MODE_MISSING};
	uint8_t *m = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int uf = (int)syscall(SYS_userfaultfd, O_CLOEXEC);

	if (ufd)
		*ufd = uf;
	if (m == MAP_FAILED || uf < 0 || ioctl(uf, UFFDIO_API, &api))
		return NULL;
	/* dp_register_mem probes the first and the last byte: present. */
	m[0] = 1;
	m[LEN - 1] = 1;
	reg.range.start = (uintptr_t)m;
	reg.range.len = LEN;
	return ioctl(uf, UFFDIO_REGISTER, &reg) ? NULL : m;
}

/* The child: registers the range, WRITEs its middle (never touched) into
 * an export of its own, and tells the parent 'p' if the copy is still
 * pending 300 ms later ('c' completed, 's' no userfaultfd here, 'x' a
 * setup failure); then waits to be killed. */
static void hostile_main(int out)
{
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_cqe cqe;
	uint8_t *m = unanswered_range(NULL);
	char say = 'x';
	void *dst;
	int reg, dreg, seg;

	if (!m)
		say = 's';
	else if (!dp_connect(svc.sock, "uffd-hostile", &c) && !dp_queue_create(c, 8, &q) &&
		 (dreg = dp_alloc(c, LEN, 0, &dst)) >= 0 &&
		 !dp_segment_export(c, dreg, "uffd-dst", DP_ACCESS_RW) &&
		 (seg = dp_segment_open(c, NULL, "uffd-dst", DP_ACCESS_RW)) >= 0 &&
		 (reg = dp_register_mem(c, m, LEN)) >= 0) {
		struct dp_desc d = {.opcode = DP_OP_WRITE,
				    .region = (uint32_t)reg,
				    .local_off = 16 * PAGE,
				    .segment = (uint32_t)seg,
				    .len = 16 * PAGE,
				    .user_data = 1};

		if (dp_submit(q, &d, 1) == 1) {
			sleep_ms(300);
			say = dp_poll(q, &cqe, 1) ? 'c' : 'p';
		}
	}
	if (write(out, &say, 1) != 1)
		_exit(1);
	for (;;)
		pause();
}

/* Registered memory of this process, WRITEn into an export of its own:
 * the bytes arrive (the vm worker is free again). */
static void registered_copy_works(void)
{
	struct dp_client *c = connect_client(&svc, "vm-after");
	struct dp_queue *q = make_queue(c, 8);
	uint8_t *src = aligned_alloc(PAGE, LEN), *dst;
	int dreg = alloc_region(c, LEN, &dst);
	int seg = export_open(c, dreg, "vm-after-dst", DP_ACCESS_RW, DP_ACCESS_RW);
	int reg;
	struct dp_cqe cqe;

	cr_assert_not_null(src);
	pattern_fill(src, LEN, 77);
	reg = dp_register_mem(c, src, LEN);
	cr_assert_geq(reg, 0, "dp_register_mem: %s", dp_strerror(reg));
	cqe = run_wait(q,
		       &(struct dp_desc){.opcode = DP_OP_WRITE,
					 .region = (uint32_t)reg,
					 .segment = (uint32_t)seg,
					 .len = LEN,
					 .user_data = 9},
		       10000);
	cr_assert_eq(cqe.status, 0, "registered memory after the hostile died: %s",
		     dp_strerror(cqe.status));
	cr_assert_eq(pattern_check(dst, LEN, 77), -1);
	dp_close(c);
	free(src);
}

Test(hostile_vm, unanswered_userfaultfd_stalls_only_its_owner, .timeout = 60)
{
	struct bystander b = {0};
	unsigned long before;
	int pipefd[2];
	char said = 0;
	pid_t pid;

	start_svc(&svc, local_only);
	bystander_start(&b);
	cr_assert_eq(pipe(pipefd), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(pipefd[0]);
		hostile_main(pipefd[1]);
	}
	child_pid = pid; /* svc_teardown kills it if an assertion fails */
	close(pipefd[1]);
	cr_assert_eq(read(pipefd[0], &said, 1), 1);
	close(pipefd[0]);
	if (said == 's') {
		kill(pid, SIGKILL);
		wait_child(pid);
		child_pid = 0;
		bystander_finish(&b);
		cr_skip_test("no userfaultfd for this process here");
	}
	cr_assert_eq(said, 'p', "the hostile's copy did not stay in the kernel (said %c)", said);
	/* While it stays there, the bystander's round trips go on. */
	before = atomic_load(&b.ops);
	sleep_ms(500);
	cr_assert_gt(atomic_load(&b.ops), before,
		     "the bystander stalled behind the hostile's copy");
	kill(pid, SIGKILL);
	wait_child(pid);
	child_pid = 0;
	bystander_finish(&b);
	registered_copy_works();
	service_still_serves();
}

/* A client of service B (this process) registers an unanswered range and
 * exports it; a client of A READs its middle over tcp. B stages it: its
 * vm worker waits in the kernel. Meanwhile A WRITEs, through the fabric,
 * into an ordinary export of B's (B's poller progresses the provider) and
 * a client of B copies locally: both go on. Closing the userfaultfd lets
 * the held call go; the READ ends (0, or -ETIMEDOUT if A gave up first). */
Test(hostile_vm_fabric, unanswered_userfaultfd_holds_no_poller_of_its_service, .timeout = 90)
{
	struct fab_pair p;
	struct dp_queue *hq;
	struct dp_cqe c;
	int uf = -1, reg, seg, lreg;
	uint8_t *m = unanswered_range(&uf), *loc;

	if (!m) {
		if (uf >= 0)
			close(uf);
		cr_skip_test("no userfaultfd for this process here");
	}
	fab_pair_start(&p, "tcp", 0, NULL, NULL);
	fab_pair_seg(&p, "plain", LEN, LEN, 16);
	reg = dp_register_mem(p.cb, m, LEN);
	cr_assert_geq(reg, 0, "dp_register_mem: %s", dp_strerror(reg));
	export_segment(p.cb, reg, "held", DP_ACCESS_RW);
	seg = open_segment(p.ca, p.peer_b, "held", DP_ACCESS_RW);
	lreg = alloc_region(p.ca, LEN, &loc);
	hq = make_queue(p.ca, 8);
	cr_assert_eq(dp_submit(hq,
			       &(struct dp_desc){.opcode = DP_OP_READ,
						 .region = (uint32_t)lreg,
						 .segment = (uint32_t)seg,
						 .target_off = 16 * PAGE,
						 .len = 16 * PAGE,
						 .user_data = 1},
			       1),
		     1);
	sleep_ms(300);
	cr_assert_eq(dp_poll(hq, &c, 1), 0, "the held READ completed: %s", dp_strerror(c.status));
	/* A to B's ordinary export, through the fabric, and back. */
	for (unsigned i = 0; i < 8; i++) {
		pattern_fill(p.loc, 64 * 1024, 300 + i);
		c = run1(p.q, true, p.lreg, 0, p.seg, 4096, 64 * 1024, 10 + i, 3000);
		cr_assert_eq(c.status, 0, "WRITE %u beside the held READ: %s", i,
			     dp_strerror(c.status));
		cr_assert_eq(pattern_check(p.tgt + 4096, 64 * 1024, 300 + i), -1);
	}
	/* A client of B, locally: B's poller serves it. */
	{
		struct dp_queue *bq = make_queue(p.cb, 8);
		uint8_t *a, *b;
		int ra = alloc_region(p.cb, 65536, &a), rb = alloc_region(p.cb, 65536, &b);
		int bseg = export_open(p.cb, rb, "b-local", DP_ACCESS_RW, DP_ACCESS_RW);

		pattern_fill(a, 65536, 5);
		c = run_wait(bq,
			     &(struct dp_desc){.opcode = DP_OP_WRITE,
					       .region = (uint32_t)ra,
					       .segment = (uint32_t)bseg,
					       .len = 65536,
					       .user_data = 2},
			     3000);
		cr_assert_eq(c.status, 0, "B's local copy beside the held READ: %s",
			     dp_strerror(c.status));
		cr_assert_eq(pattern_check(b, 65536, 5), -1);
		dp_queue_destroy(bq);
	}
	close(uf);
	cr_assert_eq(dp_wait(hq, &c, 1, 20000), 1, "the held READ never ended");
	cr_assert(c.status == 0 || c.status == -ETIMEDOUT, "the held READ: %s",
		  dp_strerror(c.status));
	dp_queue_destroy(hq);
	fab_pair_stop(&p);
}

/* dp_register_mem of a range whose first byte faults into an unanswered
 * userfaultfd: the service's probe of it is held in the kernel, on a
 * thread of its own. The call fails -EAGAIN, and at once while that probe
 * is held; another client's control calls meanwhile are answered. Once
 * the userfaultfd is closed the probe returns, and the same process
 * registers again. */
Test(hostile_vm, unanswered_userfaultfd_at_registration_holds_no_control_thread, .timeout = 60)
{
	struct dp_client *c, *other;
	uint8_t *m, *a;
	int uf = -1, rc;

	start_svc(&svc, local_only);
	m = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(m, MAP_FAILED);
	uf = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
	{
		struct uffdio_api api = {.api = UFFD_API};
		struct uffdio_register reg = {.mode = UFFDIO_REGISTER_MODE_MISSING,
					      .range = {(uintptr_t)m, LEN}};

		if (uf < 0 || ioctl(uf, UFFDIO_API, &api) || ioctl(uf, UFFDIO_REGISTER, &reg)) {
			if (uf >= 0)
				close(uf);
			cr_skip_test("no userfaultfd for this process here");
		}
	}
	c = connect_client(&svc, "probe-held");
	rc = dp_register_mem(c, m, LEN);
	cr_assert_eq(rc, -EAGAIN, "registering a held range: %d (%s)", rc, dp_strerror(rc));
	cr_assert_not_null(strstr(dp_last_error(), "200 ms"), "dp_last_error: %s", dp_last_error());
	rc = dp_register_mem(c, m, LEN);
	cr_assert_eq(rc, -EAGAIN, "again while the probe is held: %d (%s)", rc, dp_strerror(rc));
	/* Another client is served meanwhile (a held control thread would
	 * answer nothing: -ETIMEDOUT after $DP_CTL_TIMEOUT_MS). */
	other = connect_client(&svc, "probe-bystander");
	cr_assert_geq(alloc_region(other, 65536, &a), 0);
	dp_close(other);
	close(uf);
	/* The probe returns; the process registers again (its range now
	 * plain memory). */
	for (unsigned i = 0; (rc = dp_register_mem(c, m, LEN)) == -EAGAIN && i < 200; i++)
		sleep_ms(10);
	cr_assert_geq(rc, 0, "after the userfaultfd closed: %d (%s)", rc, dp_strerror(rc));
	dp_close(c);
	munmap(m, LEN);
	service_still_serves();
}
