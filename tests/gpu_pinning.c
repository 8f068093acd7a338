/* SPDX-License-Identifier: MIT */
/* gpu_pinning.c - host memory that GPU copies touch is pinned a 16 MiB window
 * at a time, off the control thread and the pollers (issue 15, item 4, for
 * GPU copies): registering a 4 GiB host region costs no pinning, a 4 KiB GPU
 * copy into it pins one window, and copies that cross windows, pinned or
 * not yet, move every byte. */
#include <criterion/logging.h>

#include "helpers.h"

#ifdef DP_HAVE_CUDA

TestSuite(gpu_pinning, .fini = svc_teardown, .timeout = 120);

/* VmPin of /proc/PID/status (the mm's pinned_vm, where cudaHostRegister's
 * long-term pins are accounted), in bytes. */
static uint64_t vm_pin(pid_t pid)
{
	char path[64], line[256];
	unsigned long long kib = 0;
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "VmPin: %llu kB", &kib) == 1;
	fclose(f);
	cr_assert(found, "%s has no VmPin line", path);
	return kib * 1024;
}

/* A 4 GiB host region: registered at once (it was pinned whole on the
 * control thread: seconds, 4 GiB pinned); a 4 KiB GPU -> host WRITE at
 * 3 GiB lands, and pins one window, not the region. */
Test(gpu_pinning, HugeHostRegionPinsWhatCopiesTouch)
{
	const uint64_t big = 4096 * MiB, off = 3072 * MiB + 12345;
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	uint8_t *host;
	uint64_t t0, ms, pin0, pin1;
	void *g;
	int rg, rh, seg;

	GPU_REQUIRE();
	start_svc(&svc, local_only);
	c = connect_client(&svc, "pin");
	q = make_queue(c, 8);
	rg = gpu_region(c, 4096, 61, &g);
	pin0 = vm_pin(svc.pid);
	t0 = now_ns();
	rh = alloc_region(c, big, &host);
	ms = (now_ns() - t0) / 1000000;
	cr_assert_lt(ms, 500, "registering 4 GiB of host memory took %llu ms",
		     (unsigned long long)ms);
	seg = export_open(c, rh, "pin-big", DP_ACCESS_RW, DP_ACCESS_RW);
	dp_prep_write(&d, rg, 0, seg, off, 4096, 0);
	gpu_run_one_ok(q, &d);
	cr_assert_eq(pattern_check(host + off, 4096, 61), -1, "GPU -> host at 3 GiB: mismatch");
	/* The pinner runs on its own: give it the time of one window. */
	for (unsigned i = 0; i < 100 && vm_pin(svc.pid) == pin0; i++)
		sleep_ms(10);
	pin1 = vm_pin(svc.pid);
	cr_log_info("gpu_pinning: 4 GiB registered in %llu ms; VmPin %llu -> %llu KiB",
		    (unsigned long long)ms, (unsigned long long)(pin0 >> 10),
		    (unsigned long long)(pin1 >> 10));
	cr_assert_leq(pin1 > pin0 ? pin1 - pin0 : 0, 2 * 16 * MiB, "a 4 KiB copy pinned %llu MiB",
		      (unsigned long long)((pin1 - pin0) / MiB));
	/* The same copy again, through the pinned window. */
	memset(host + off, 0, 4096);
	gpu_run_one_ok(q, &d);
	cr_assert_eq(pattern_check(host + off, 4096, 61), -1, "second copy: mismatch");
	dp_close(c);
	CK(cudaFree(g));
	stop_svc(&svc);
}

/* Copies that straddle 16 MiB windows, both ways, twice (first while the
 * windows are being pinned, then pinned): every byte. */
Test(gpu_pinning, CopiesAcrossWindowsMoveEveryByte)
{
	const uint64_t len = 64 * MiB, n = 40 * MiB + 7, hoff = 16 * MiB - 3;
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	uint8_t *host;
	void *g;
	int rg, rh, seg;

	GPU_REQUIRE();
	start_svc(&svc, local_only);
	c = connect_client(&svc, "pin-cross");
	q = make_queue(c, 8);
	rg = gpu_region(c, len, -1, &g);
	rh = alloc_region(c, len, &host);
	seg = export_open(c, rh, "pin-cross", DP_ACCESS_RW, DP_ACCESS_RW);
	for (unsigned round = 0; round < 2; round++) {
		pattern_fill(host + hoff, n, 70 + round);
		/* READ host -> GPU, then WRITE it back elsewhere. */
		dp_prep_read(&d, rg, 5, seg, hoff, n, 0);
		gpu_run_one_ok(q, &d);
		gpu_expect((uint8_t *)g + 5, n, 70 + round, 0, "host -> GPU across windows");
		memset(host, 0, len);
		dp_prep_write(&d, rg, 5, seg, 3, n, 0);
		gpu_run_one_ok(q, &d);
		cr_assert_eq(pattern_check(host + 3, n, 70 + round), -1,
			     "GPU -> host across windows, round %u", round);
		sleep_ms(200); /* the windows get pinned */
	}
	dp_close(c);
	CK(cudaFree(g));
	stop_svc(&svc);
}

#else

Test(gpu_pinning, HugeHostRegionPinsWhatCopiesTouch)
{
	cr_skip_test("built without CUDA");
}

#endif /* DP_HAVE_CUDA */
