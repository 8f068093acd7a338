/* SPDX-License-Identifier: MIT */
/* gpu_faults.c - CUDA calls failing inside dataplaned (a FAULTS=1 build with
 * DP_FAULTS=cuda=RATE): GPU copies and file <-> GPU staging copies whose
 * cudaMemcpyAsync is refused or whose event reports an error complete once,
 * with -EIO; the others with their bytes; the service goes on and exits 0.
 * Skips without a GPU or without a fault-injection build. */
#include <criterion/logging.h>
#include <fcntl.h>
#include <unistd.h>

#include "helpers.h"

#ifdef DP_HAVE_CUDA

static void gpu_faults_teardown(void)
{
	unsetenv("DP_FAULTS");
	svc_teardown();
}

TestSuite(gpu_faults, .fini = gpu_faults_teardown, .timeout = 120);

/* Counts a completion: 0 with every byte right, or -EIO. */
static void tally(const struct dp_cqe *c, uint64_t len, unsigned *ok, unsigned *eio)
{
	if (c->status == -EIO) {
		cr_assert_eq(c->bytes, 0, "-EIO with %llu bytes", (unsigned long long)c->bytes);
		(*eio)++;
		return;
	}
	cr_assert_eq(c->status, 0, "status %d (%s), want 0 or -EIO", c->status,
		     dp_strerror(c->status));
	cr_assert_eq(c->bytes, len);
	(*ok)++;
}

Test(gpu_faults, CudaFailuresEndAsEio)
{
	const char *args[] = {"--provider", "none",    "--io-slice", "262144",
			      "--staging",  "2097152", NULL};
	enum { NCOPY = 256, NFILE = 32 };
	const uint64_t piece = 256 * 1024, flen = NFILE * MiB;
	struct dp_desc d[NCOPY];
	struct dp_cqe cqe[NCOPY];
	unsigned ok = 0, eio = 0, fok = 0, feio = 0;
	struct dp_client *c;
	struct dp_queue *q;
	struct injected n;
	void *src, *dst, *g;
	uint8_t *buf;
	int rs, rd, rg, rf, seg_d, seg_f, fd, rc;
	char path[] = "/var/tmp/dp-gpu-faults-XXXXXX";

	need_fault_build();
	GPU_REQUIRE();
	setenv("DP_FAULTS", "cuda=0.1,seed=11", 1);
	rc = svc_start(&svc, args);
	unsetenv("DP_FAULTS");
	cr_assert_eq(rc, 0, "svc_start: %s", strerror(-rc));
	c = connect_client(&svc, "gpu-faults");
	q = make_queue(c, 0);

	/* GPU -> GPU: 256 copies of 256 KiB, each to its own place. */
	rs = gpu_region(c, NCOPY * piece, 61, &src);
	rd = gpu_region(c, NCOPY * piece, -1, &dst);
	seg_d = export_open(c, rd, "faults-dst", DP_ACCESS_RW, DP_ACCESS_RW);
	for (unsigned i = 0; i < NCOPY; i++)
		dp_prep_write(&d[i], rs, i * piece, seg_d, i * piece, piece, i);
	run_batch(q, d, NCOPY, cqe, 60000);
	for (unsigned i = 0; i < NCOPY; i++) {
		tally(&cqe[i], piece, &ok, &eio);
		if (!cqe[i].status)
			gpu_expect((uint8_t *)dst + i * piece, piece, 61, i * piece,
				   "GPU copy that succeeded");
	}

	/* File -> GPU through the staging buffers: 32 READs of 1 MiB. */
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	unlink(path);
	buf = malloc(flen);
	cr_assert(buf);
	pattern_fill(buf, flen, 62);
	cr_assert_eq(pwrite(fd, buf, flen, 0), (ssize_t)flen);
	free(buf);
	rf = dp_register_file(c, fd, 0, flen, DP_ACCESS_READ);
	cr_assert_geq(rf, 0, "dp_register_file: %s", dp_strerror(rf));
	cr_assert_eq(dp_segment_export(c, rf, "faults-file", DP_ACCESS_READ), 0);
	seg_f = dp_segment_open(c, NULL, "faults-file", DP_ACCESS_READ);
	cr_assert_geq(seg_f, 0);
	rg = gpu_region(c, flen, -1, &g);
	for (unsigned i = 0; i < NFILE; i++)
		dp_prep_read(&d[i], rg, i * MiB, seg_f, i * MiB, MiB, i);
	run_batch(q, d, NFILE, cqe, 60000);
	for (unsigned i = 0; i < NFILE; i++) {
		tally(&cqe[i], MiB, &fok, &feio);
		if (!cqe[i].status)
			gpu_expect((uint8_t *)g + i * MiB, MiB, 62, i * MiB,
				   "file -> GPU READ that succeeded");
	}

	dp_close(c);
	n = stop_and_count(&svc);
	cr_log_info("DP_FAULTS=cuda=0.1: %u GPU copies (%u ok, %u -EIO), %u file -> GPU (%u ok, "
		    "%u -EIO); %llu CUDA faults injected",
		    NCOPY, ok, eio, NFILE, fok, feio, n.cuda);
	cr_assert_gt(n.cuda, 0, "no CUDA fault was injected");
	cr_assert_gt(eio + feio, 0, "faults were injected but nothing failed");
	cr_assert_gt(ok, 0);
	CK(cudaFree(src));
	CK(cudaFree(dst));
	CK(cudaFree(g));
	close(fd);
}

#else
Test(gpu_faults, NoCuda)
{
	cr_skip_test("built without CUDA");
}
#endif
