/* hostile_vm.c - a client whose registered memory (dp_register_mem) the kernel must wait for: a userfaultfd range it never answers. Its copy waits inside process_vm_readv, on the poller's vm worker thread; the poller and every other client's transfers go on. Once the client dies its copy returns, and registered memory moves again. */
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

#define LEN (1u << 20)
#define PAGE 4096u

/* A range of ours whose untouched pages fault into a userfaultfd nobody
 * reads; NULL where this kernel gives us none. */
static uint8_t *unanswered_range(void)
{
	struct uffdio_api api = {.api = UFFD_API};
	struct uffdio_register reg = {.mode = UFFDIO_REGISTER_MODE_MISSING};
	uint8_t *m = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int uf = (int)syscall(SYS_userfaultfd, O_CLOEXEC);

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
	uint8_t *m = unanswered_range();
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
