/* SPDX-License-Identifier: MIT */
/* gpu_ipc.c - GPU memory of two client processes through one service (CUDA
 * IPC), and the IPC mappings closed on deregistration and on client death. */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

#ifdef DP_HAVE_CUDA

static pid_t peer_pid;

static void ipc_teardown(void)
{
	int status;

	if (peer_pid > 0) {
		kill(peer_pid, SIGKILL);
		waitpid(peer_pid, &status, 0);
		peer_pid = 0;
	}
	svc_teardown();
}

TestSuite(gpu_ipc, .fini = ipc_teardown, .timeout = 120);

static int read_byte(int fd)
{
	char b;

	return read(fd, &b, 1) == 1 ? b : -1;
}

static void write_byte(int fd, char b)
{
	cr_assert_eq(write(fd, &b, 1), 1);
}

#define CLOSED_LINE "gpu: closed the IPC mapping"

/*
 * The second process of a test: waits for 'g' (EOF: the test skipped),
 * exports @len bytes of zeroed GPU memory as @name, answers 'r', then waits
 * for the next byte: 'v' checks that the memory holds pattern @seed and
 * exits cleanly; 'x' exits at once, leaving everything to the service.
 * Exit codes above 0 say which step failed.
 */
static int peer_main(int go, int ready, size_t len, const char *name, uint64_t seed)
{
	struct dp_client *c;
	void *dst;
	int r, cmd;

	if (read_byte(go) != 'g')
		return 0;
	if (dp_connect(svc.sock, "gpu-peer", &c))
		return 10;
	if (cudaMalloc(&dst, len) != cudaSuccess || cudaMemset(dst, 0, len) != cudaSuccess ||
	    cudaDeviceSynchronize() != cudaSuccess)
		return 11;
	r = dp_register_cuda(c, dst, len);
	if (r < 0)
		return 12;
	if (dp_segment_export(c, r, name, DP_ACCESS_RW))
		return 13;
	if (write(ready, "r", 1) != 1)
		return 14;
	cmd = read_byte(go);
	if (cmd == 'x')
		_exit(0);
	if (cmd != 'v')
		return 15;
	{
		uint8_t *h = malloc(len);

		if (!h || cudaMemcpy(h, dst, len, cudaMemcpyDeviceToHost) != cudaSuccess)
			return 16;
		if (pattern_check(h, len, seed) != -1)
			return 17;
		free(h);
	}
	dp_close(c);
	cudaFree(dst);
	return 0;
}

/* Forks the peer before this process touches CUDA; returns the pipes' ends
 * the test keeps. Skips (after stopping the service) without a device. */
static void start_peer(size_t len, const char *name, uint64_t seed, int *go_w, int *ready_r)
{
	int go[2], ready[2];

	peer_pid = fork_piped(ready, go);
	if (peer_pid == 0)
		_exit(peer_main(go[0], ready[1], len, name, seed));
	*go_w = go[1];
	*ready_r = ready[0];
	if (gpu_count() <= 0) {
		int status;

		close(go[1]);
		waitpid(peer_pid, &status, 0);
		peer_pid = 0;
		stop_svc(&svc);
		cr_skip_test("no CUDA device on this machine");
	}
}

static int wait_peer(void)
{
	int status;

	cr_assert_eq(waitpid(peer_pid, &status, 0), peer_pid);
	peer_pid = 0;
	cr_assert(WIFEXITED(status), "peer died by signal %d", WTERMSIG(status));
	return WEXITSTATUS(status);
}

/* Two processes: the parent WRITEs its GPU memory into the peer's exported
 * GPU memory, READs it back into a second buffer; the peer checks its
 * copy itself. */
Test(gpu_ipc, GpuTwoProcesses)
{
	const size_t len = 32 * MiB;
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	void *src, *back;
	int go, ready, rs, rb, seg;

	start_svc(&svc, local_only);
	start_peer(len, "ipc-dst", 8, &go, &ready);
	write_byte(go, 'g');
	cr_assert_eq(read_byte(ready), 'r', "peer failed before exporting (exit %d)", wait_peer());
	c = connect_client(&svc, "gpu-ipc");
	q = make_queue(c, 0);
	rs = gpu_region(c, len, 8, &src);
	rb = gpu_region(c, len, -1, &back);
	seg = dp_segment_open(c, NULL, "ipc-dst", DP_ACCESS_RW);
	cr_assert_geq(seg, 0, "dp_segment_open: %s", dp_strerror(seg));
	dp_prep_write(&d, rs, 0, seg, 0, len, 0);
	gpu_run_one_ok(q, &d);
	dp_prep_read(&d, rb, 0, seg, 0, len, 0);
	gpu_run_one_ok(q, &d);
	gpu_expect(back, len, 8, 0, "READ back from the peer's GPU memory");
	write_byte(go, 'v');
	cr_assert_eq(wait_peer(), 0, "the peer's own check of its GPU memory");
	dp_close(c);
	CK(cudaFree(src));
	CK(cudaFree(back));
	stop_svc(&svc);
}

static size_t gpu_free_bytes(void)
{
	size_t free_b = 0, total = 0;

	CK(cudaMemGetInfo(&free_b, &total));
	return free_b;
}

/* A client dies holding 4 GiB of registered, exported GPU memory: the
 * service closes its IPC mapping (the memory returns to the device) and the
 * other client's handle to the export fails with ECONNRESET. */
Test(gpu_ipc, GpuClientDeathClosesHandles)
{
	const size_t len = 4096 * MiB;
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	size_t free0, free1, now = 0;
	void *src, *warm;
	int go, ready, rs, seg;
	uint64_t deadline;

	start_svc(&svc, local_only);
	start_peer(len, "doomed", 9, &go, &ready);
	/* The service's own context exists before the baseline. */
	c = connect_client(&svc, "gpu-survivor");
	q = make_queue(c, 0);
	rs = gpu_region(c, MiB, 9, &src);
	warm = gpu_buf(MiB, -1);
	seg = export_open(c, gpu_register(c, warm, MiB), "warm", DP_ACCESS_RW, DP_ACCESS_RW);
	dp_prep_write(&d, rs, 0, seg, 0, MiB, 0);
	gpu_run_one_ok(q, &d);
	free0 = gpu_free_bytes();

	write_byte(go, 'g');
	cr_assert_eq(read_byte(ready), 'r', "peer failed before exporting (exit %d)", wait_peer());
	free1 = gpu_free_bytes();
	cr_assert_lt(free1, free0 - len / 2, "the peer's 4 GiB is not visible as used");
	seg = dp_segment_open(c, NULL, "doomed", DP_ACCESS_RW);
	cr_assert_geq(seg, 0, "dp_segment_open: %s", dp_strerror(seg));
	dp_prep_write(&d, rs, 0, seg, len - MiB, MiB, 0);
	gpu_run_one_ok(q, &d);
	cr_assert_eq(svc_log_count(&svc, CLOSED_LINE), 0);

	write_byte(go, 'x');
	cr_assert_eq(wait_peer(), 0);
	deadline = now_ns() + 10000000000ull;
	while (now_ns() < deadline) {
		now = gpu_free_bytes();
		if (svc_log_count(&svc, CLOSED_LINE) == 1 && now + 256 * MiB >= free0)
			break;
		usleep(20000);
	}
	cr_assert_eq(svc_log_count(&svc, CLOSED_LINE), 1,
		     "the dead client's IPC mapping was not closed");
	cr_assert_geq(now + 256 * MiB, free0, "%zu MiB of GPU memory not returned",
		      (free0 - now) >> 20);
	dp_prep_write(&d, rs, 0, seg, 0, MiB, 0);
	gpu_run_one_fails(q, &d, -ECONNRESET, 10000, "a WRITE to the dead client's export");
	dp_close(c);
	CK(cudaFree(src));
	CK(cudaFree(warm));
	stop_svc(&svc);
}

/* Each dp_free closes its mapping; two regions of one allocation are two
 * references to one mapping: freeing one leaves the other usable. */
Test(gpu_ipc, GpuDeregisterClosesHandle)
{
	const size_t len = 64 * MiB;
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	uint8_t *src, *dst;
	int rs, rd, rd2, seg, seg2;

	GPU_REQUIRE();
	start_svc(&svc, local_only);
	c = connect_client(&svc, "gpu-dereg");
	q = make_queue(c, 0);
	rs = gpu_region(c, len, 10, &src);
	dst = gpu_buf(len, -1);
	for (int i = 0; i < 100; i++) {
		rd = gpu_register(c, dst, len);
		cr_assert_eq(dp_free(c, rd), 0);
	}
	cr_assert_eq(svc_log_count(&svc, CLOSED_LINE), 100, "100 registrations, %u closes",
		     svc_log_count(&svc, CLOSED_LINE));
	rd = gpu_register(c, dst, len / 2);
	rd2 = gpu_register(c, dst + len / 2, len / 2);
	seg = export_open(c, rd, "first-half", DP_ACCESS_RW, DP_ACCESS_RW);
	seg2 = export_open(c, rd2, "second-half", DP_ACCESS_RW, DP_ACCESS_RW);
	cr_assert_eq(dp_free(c, rd), 0);
	dp_prep_write(&d, rs, len / 2, seg2, 0, len / 2, 0);
	gpu_run_one_ok(q, &d);
	gpu_expect(dst + len / 2, len / 2, 10, len / 2, "second half after the first was freed");
	dp_prep_write(&d, rs, 0, seg, 0, MiB, 0);
	gpu_run_one_fails(q, &d, -ECONNRESET, 10000, "freed region's export");
	dp_close(c);
	CK(cudaFree(src));
	CK(cudaFree(dst));
	stop_svc(&svc);
}

#else

Test(gpu_ipc, GpuIpc)
{
	cr_skip_test("built without CUDA");
}

#endif /* DP_HAVE_CUDA */
