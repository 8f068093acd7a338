/* SPDX-License-Identifier: MIT */
/* gpu_file.c - file regions <-> GPU memory through the staging pipeline:
 * file -> GPU and GPU -> file, aligned (O_DIRECT into the staging buffers)
 * and unaligned, more slices than staging buffers, a file that ends before
 * its region. Self-skips without a GPU. */
#include <fcntl.h>
#include <unistd.h>

#include "helpers.h"

#ifdef DP_HAVE_CUDA

TestSuite(gpu_file, .fini = svc_teardown, .timeout = 120);

/* A scratch file in /var/tmp (often not tmpfs, so O_DIRECT works) holding
 * @len bytes of pattern @seed, or zeros when seed < 0; open O_RDWR. */
static int scratch_file(uint64_t len, int64_t seed)
{
	char path[] = "/var/tmp/dp-gpu-file-XXXXXX";
	int fd = mkstemp(path);
	uint8_t *buf = malloc(len);

	cr_assert_geq(fd, 0, "mkstemp: %s", strerror(errno));
	cr_assert(buf);
	unlink(path);
	if (seed < 0)
		memset(buf, 0, len);
	else
		pattern_fill(buf, len, (uint64_t)seed);
	for (uint64_t done = 0; done < len;) {
		ssize_t n = pwrite(fd, buf + done, len - done, (off_t)done);

		cr_assert_gt(n, 0, "pwrite: %s", strerror(errno));
		done += (uint64_t)n;
	}
	free(buf);
	return fd;
}

/* First byte of [off, off + len) of @fd that is not pattern (seed,
 * src_off + i), or -1. */
static int64_t file_differs(int fd, uint64_t off, uint64_t len, uint64_t seed, uint64_t src_off)
{
	uint8_t *buf = malloc(len);
	int64_t bad = -1;

	cr_assert(buf);
	cr_assert_eq(pread(fd, buf, len, (off_t)off), (ssize_t)len, "pread: %s", strerror(errno));
	for (uint64_t i = 0; i < len && bad < 0; i++)
		if (buf[i] != pattern_byte(seed, src_off + i))
			bad = (int64_t)i;
	free(buf);
	return bad;
}

static void start_with(const char *slice, const char *staging)
{
	const char *args[] = {"--provider", "none",  "--io-slice", slice,
			      "--staging",  staging, NULL};
	int rc = svc_start(&svc, args);

	cr_assert_eq(rc, 0, "svc_start: %s", strerror(-rc));
}

/* Registers @fd as a file region, exports it and opens the segment. */
static int file_segment(struct dp_client *c, int fd, uint64_t len, const char *name)
{
	int rf = dp_register_file(c, fd, 0, len, DP_ACCESS_RW), seg;

	cr_assert_geq(rf, 0, "dp_register_file: %s", dp_strerror(rf));
	seg = dp_segment_export(c, rf, name, DP_ACCESS_RW);
	cr_assert_eq(seg, 0, "dp_segment_export: %s", dp_strerror(seg));
	seg = dp_segment_open(c, NULL, name, DP_ACCESS_RW);
	cr_assert_geq(seg, 0, "dp_segment_open: %s", dp_strerror(seg));
	return seg;
}

static void run_file_ok(struct dp_queue *q, const struct dp_desc *d, unsigned n)
{
	struct dp_cqe *cqe = calloc(n, sizeof(*cqe));

	cr_assert(cqe);
	run_batch(q, d, n, cqe, 60000);
	for (unsigned i = 0; i < n; i++) {
		cr_assert_eq(cqe[i].status, 0, "descriptor %u: status %d (%s)", i, cqe[i].status,
			     dp_strerror(cqe[i].status));
		cr_assert_eq(cqe[i].bytes, d[i].len, "descriptor %u: bytes %llu, want %llu", i,
			     (unsigned long long)cqe[i].bytes, (unsigned long long)d[i].len);
		cr_assert(cqe[i].flags & DP_CQE_F_FILE, "descriptor %u: flags 0x%x", i,
			  cqe[i].flags);
	}
	free(cqe);
}

/* 64 MiB file -> GPU (READ), then GPU -> file (WRITE) at another place:
 * page-aligned, so the kernel reads and writes the staging buffers direct;
 * 1 MiB slices through a 16 MiB pool. */
Test(gpu_file, FileToGpuAndBack)
{
	const uint64_t len = 64 * MiB;
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	void *g, *src;
	int fd, seg, rg, rs;

	GPU_REQUIRE();
	start_with("1048576", "16777216");
	c = connect_client(&svc, "gpu-file");
	q = make_queue(c, 0);
	fd = scratch_file(2 * len, 31);
	seg = file_segment(c, fd, 2 * len, "gpu-file");
	rg = gpu_region(c, len, -1, &g);
	rs = gpu_region(c, len, 32, &src);

	dp_prep_read(&d, rg, 0, seg, 0, len, 0);
	run_file_ok(q, &d, 1);
	gpu_expect(g, len, 31, 0, "GPU after READ from the file");

	dp_prep_write(&d, rs, 0, seg, len, len, 0);
	run_file_ok(q, &d, 1);
	cr_assert_eq(file_differs(fd, len, len, 32, 0), -1, "file after WRITE from the GPU");
	cr_assert_eq(file_differs(fd, 0, len, 31, 0), -1, "the untouched half of the file");

	dp_close(c);
	CK(cudaFree(g));
	CK(cudaFree(src));
	close(fd);
	stop_svc(&svc);
}

/* Odd offsets and lengths (page-cache slices), 64 KiB slices through a
 * pool of only 4 buffers, many descriptors in flight in both directions:
 * the pipeline runs out of buffers and must wait for them, never mix
 * them up. */
Test(gpu_file, UnalignedManySlicesFewBuffers)
{
	const uint64_t flen = 32 * MiB, glen = 16 * MiB;
	enum { N = 24 };
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d[N];
	uint64_t foff[N], goff[N], n[N];
	void *g;
	int fd, seg, rg;

	GPU_REQUIRE();
	start_with("65536", "262144");
	c = connect_client(&svc, "gpu-file-unaligned");
	q = make_queue(c, 0);
	fd = scratch_file(flen, 41);
	seg = file_segment(c, fd, flen, "gpu-file-u");
	rg = gpu_region(c, glen, -1, &g);

	/* READs: file [foff, foff + n) -> GPU [goff, goff + n), disjoint. */
	for (unsigned i = 0; i < N; i++) {
		foff[i] = i * 600000ull + i * 7;
		goff[i] = i * 650000ull + 3 * i + 1;
		n[i] = 300000 + i * 10007;
		dp_prep_read(&d[i], rg, goff[i], seg, foff[i], n[i], i);
	}
	run_file_ok(q, d, N);
	for (unsigned i = 0; i < N; i++)
		gpu_expect((uint8_t *)g + goff[i], n[i], 41, foff[i], "GPU after unaligned READ");

	/* WRITEs back, each to the far end of the file: GPU -> file. */
	for (unsigned i = 0; i < N; i++)
		dp_prep_write(&d[i], rg, goff[i], seg, flen - (i + 1) * 700000ull - i, n[i], i);
	run_file_ok(q, d, N);
	for (unsigned i = 0; i < N; i++)
		cr_assert_eq(file_differs(fd, flen - (i + 1) * 700000ull - i, n[i], 41, foff[i]),
			     -1, "file after unaligned WRITE %u", i);

	dp_close(c);
	CK(cudaFree(g));
	close(fd);
	stop_svc(&svc);
}

/* A file cut short under its region: the READ of the missing part fails
 * with -EIO (docs/files.md), the part that exists still reads, and the
 * service goes on serving. */
Test(gpu_file, FileShorterThanRegion)
{
	const uint64_t len = 8 * MiB;
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	struct dp_cqe cqe;
	void *g;
	int fd, seg, rg;

	GPU_REQUIRE();
	start_with("1048576", "8388608");
	c = connect_client(&svc, "gpu-file-short");
	q = make_queue(c, 0);
	fd = scratch_file(len, 51);
	seg = file_segment(c, fd, len, "gpu-file-s");
	rg = gpu_region(c, len, -1, &g);
	cr_assert_eq(ftruncate(fd, (off_t)(len / 2)), 0);

	dp_prep_read(&d, rg, 0, seg, 0, len, 0);
	run_batch(q, &d, 1, &cqe, 60000);
	cr_assert_eq(cqe.status, -EIO, "READ past the end: status %d (%s), want -EIO", cqe.status,
		     dp_strerror(cqe.status));
	cr_assert_eq(cqe.bytes, 0);

	dp_prep_read(&d, rg, 0, seg, 0, len / 2, 0);
	run_file_ok(q, &d, 1);
	gpu_expect(g, len / 2, 51, 0, "GPU after READ of what is left");

	dp_close(c);
	CK(cudaFree(g));
	close(fd);
	stop_svc(&svc);
}

#else
Test(gpu_file, NoCuda)
{
	cr_skip_test("built without CUDA");
}
#endif
