/* SPDX-License-Identifier: MIT */
/* gpu_pinning.c - host memory that GPU copies touch is pinned a 64 MiB window
 * at a time (64 MiB), off the control thread and the pollers (as file I/O
 * pins, tests/file_pinning.c): registering a 4 GiB host region costs no pinning, a 4 KiB GPU
 * copy into it pins one window, and copies that cross windows, pinned or
 * not yet, move every byte. */
#include <criterion/logging.h>
#include <sys/mman.h>
#include <unistd.h>

#include "helpers.h"

#ifdef DP_HAVE_CUDA

TestSuite(gpu_pinning, .fini = svc_teardown, .timeout = 120);

/* A 4 GiB host region: its registration does not hold the control thread
 * (the old code pinned it whole there: a bystander's control calls waited
 * for seconds); a 4 KiB GPU -> host WRITE at 3 GiB lands, first through a
 * window the pinner pins, then again. */
Test(gpu_pinning, HugeHostRegionPinsWhatCopiesTouch)
{
	const uint64_t big = 4096 * MiB, off = 3072 * MiB + 12345;
	struct ctl_bystander by;
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	uint8_t *host;
	uint64_t t0, ms;
	void *g;
	int rg, rh, seg, mfd;

	GPU_REQUIRE();
	start_svc(&svc, local_only);
	c = connect_client(&svc, "pin");
	q = make_queue(c, 8);
	rg = gpu_region(c, 4096, 61, &g);
	ctl_bystander_start(&by, &svc, NULL, NULL);
	sleep_ms(200);
	/* A memfd registered by fd: nothing is populated in this process (a
	 * MAP_POPULATE here would hold this process's mmap lock, and with it
	 * the bystander thread, for seconds). */
	mfd = memfd_create("gpu-pin", MFD_ALLOW_SEALING);
	cr_assert_geq(mfd, 0);
	cr_assert_eq(ftruncate(mfd, (off_t)big), 0);
	host = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	cr_assert_neq(host, MAP_FAILED);
	t0 = now_ns();
	rh = dp_register_fd(c, mfd, 0, big);
	ms = (now_ns() - t0) / 1000000;
	cr_assert_geq(rh, 0, "dp_register_fd: %s", dp_strerror(rh));
	sleep_ms(200);
	ctl_bystander_stop(&by);
	fprintf(stderr,
		"gpu_pinning: 4 GiB registered in %llu ms; "
		"bystander control calls meanwhile: %u, p99 %.1f ms, max %.1f ms\n",
		(unsigned long long)ms, by.n, ctl_bystander_q(&by, 0.99), ctl_bystander_q(&by, 1));
	cr_assert_lt(ctl_bystander_q(&by, 1), 250.0,
		     "a bystander's control call took %.1f ms while 4 GiB was registered",
		     ctl_bystander_q(&by, 1));
	ctl_bystander_free(&by);
	seg = export_open(c, rh, "pin-big", DP_ACCESS_RW, DP_ACCESS_RW);
	dp_prep_write(&d, rg, 0, seg, off, 4096, 0);
	gpu_run_one_ok(q, &d);
	cr_assert_eq(pattern_check(host + off, 4096, 61), -1, "GPU -> host at 3 GiB: mismatch");
	/* The same copy again, through the pinned window. */
	memset(host + off, 0, 4096);
	gpu_run_one_ok(q, &d);
	cr_assert_eq(pattern_check(host + off, 4096, 61), -1, "second copy: mismatch");
	dp_close(c);
	munmap(host, big);
	close(mfd);
	CK(cudaFree(g));
	stop_svc(&svc);
}

/* Copies that straddle 64 MiB windows, both ways, twice (first while the
 * windows are being pinned, then pinned): every byte. */
Test(gpu_pinning, CopiesAcrossWindowsMoveEveryByte)
{
	const uint64_t len = 256 * MiB, n = 160 * MiB + 7, hoff = 64 * MiB - 3;
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
