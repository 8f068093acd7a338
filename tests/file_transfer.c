/* file_transfer.c - bytes move intact between host and file regions through a real dataplaned: 256 MiB round trip, aligned and unaligned offsets and lengths (O_DIRECT vs page cache per slice), a file as the local region, many descriptors at once. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "helpers.h"

TestSuite(file_transfer, .fini = file_teardown, .timeout = 120);

#define BIG (256 * MiB)
#define GUARD 0x5a

/* 256 MiB of pattern: host -> file region (exported as a segment), then
 * file -> another host region. Aligned throughout, so every slice goes
 * direct where the file system takes O_DIRECT. */
Test(file_transfer, round_trip_256m)
{
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	struct io_counts n;
	uint8_t *src, *dst;
	struct io_tally seen = {0};
	int rs, rd, rf, seg, fd;
	int64_t bad;
	bool direct;

	direct = file_dir_direct(NULL);
	start_svc(&svc, local_only);
	c = connect_client(&svc, "file-256m");
	q = make_queue(c, 16);
	rs = alloc_region(c, BIG, &src);
	rd = alloc_region(c, BIG, &dst);
	pattern_fill(src, BIG, 11);
	memset(dst, 0, BIG);
	fd = file_make("big", 0, 0, O_RDWR);
	rf = dp_register_file(c, fd, 0, BIG, DP_ACCESS_RW);
	cr_assert_geq(rf, 0, "dp_register_file: %s", dp_strerror(rf));
	seg = export_open(c, rf, "big", DP_ACCESS_RW, DP_ACCESS_RW);

	dp_prep_write(&d, rs, 0, seg, 0, BIG, 1);
	expect_cqe(run_wait(q, &d, 60000), 0, BIG, "WRITE host -> file");
	bad = file_check(fd, 0, BIG, 11);
	cr_assert_eq(bad, -1, "file differs from the source at byte %lld", (long long)bad);
	dp_prep_read(&d, rd, 0, seg, 0, BIG, 2);
	expect_cqe(run_wait(q, &d, 60000), 0, BIG, "READ file -> host");
	bad = pattern_check(dst, BIG, 11);
	cr_assert_eq(bad, -1, "read back differs at byte %lld", (long long)bad);

	n = free_and_count(c, rf, 2, &seen);
	cr_assert_eq(n.direct_bytes + n.buffered_bytes, 2 * BIG, "%llu + %llu bytes counted",
		     n.direct_bytes, n.buffered_bytes);
	if (direct)
		cr_assert_eq(n.direct_bytes, 2 * BIG,
			     "aligned transfers: %llu bytes direct, %llu buffered", n.direct_bytes,
			     n.buffered_bytes);
	else
		cr_log_warn("%s does not take O_DIRECT: the direct path was not exercised", fdir);
	/* Host regions are fixed buffers of the rings where the kernel has
	 * sparse buffer tables (5.19+; the service logs which). */
	if (svc_log_has(&svc, "fixed buffers, file root"))
		cr_assert_eq(n.fixed, n.direct + n.buffered,
			     "%llu of %llu slices through fixed buffers", n.fixed,
			     n.direct + n.buffered);
	else
		cr_log_warn("this kernel has no sparse buffer tables: fixed buffers not exercised");
	close(fd);
	dp_close(c);
	stop_svc(&svc);
}

/*
 * Offsets: where the region starts in the file, where the transfer starts
 * in the region and in host memory, and its length. Slices are 64 KiB so
 * that every transfer has a head, a middle and a tail.
 */
static const struct shape {
	uint64_t file_off, target_off, local_off, len;
	bool all_direct; /* page-aligned in the file and in memory */
} shapes[] = {
	{0, 0, 0, 4 * MiB, true},
	{0, 4096, 8192, MiB + 4096, true},
	{8192, 4096, 0, 3 * MiB, true},
	{0, 512, 0, MiB, false},
	{0, 0, 0, 12345, false},
	{0, 1, 3, MiB + 5, false},
	{100, 7, 0, 3 * MiB + 123, false},
	{4096, 0, 1, 2 * MiB, false},
	{0, 5, 9, 1, false},
};

/* Bytes of a transfer at file offset pos that must go through the page
 * cache: the part before the first page boundary and after the last. */
static uint64_t unaligned_bytes(uint64_t pos, uint64_t len)
{
	uint64_t head = pos % 4096 ? 4096 - pos % 4096 : 0;

	if (head >= len)
		return len;
	return head + (len - head) % 4096;
}

Test(file_transfer, aligned_and_unaligned_shapes)
{
	static const char *const flags[] = {"--provider", "none", "--io-slice", "65536", NULL};
	struct dp_client *c;
	struct dp_queue *q;
	struct io_tally seen = {0};
	bool direct;

	direct = file_dir_direct("only the page-cache path is checked");
	start_svc(&svc, flags);
	c = connect_client(&svc, "file-shapes");
	q = make_queue(c, 16);
	for (unsigned i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		const struct shape *s = &shapes[i];
		uint64_t flen = s->target_off + s->len + 4096, hlen = s->local_off + s->len + 4096;
		uint64_t pos = s->file_off + s->target_off, gseed = 500 + i, seed = 600 + i;
		char name[32], what[64];
		struct io_counts n;
		struct dp_desc d;
		uint8_t *h;
		int fd, rf, rh, seg;
		int64_t bad;

		snprintf(name, sizeof(name), "shape%u", i);
		/* The file starts as pattern gseed everywhere: bytes around
		 * the transfer must keep it. */
		fd = file_make(name, s->file_off + flen, gseed, O_RDWR);
		rf = dp_register_file(c, fd, s->file_off, flen, DP_ACCESS_RW);
		cr_assert_geq(rf, 0, "shape %u: dp_register_file: %s", i, dp_strerror(rf));
		snprintf(name, sizeof(name), "seg%u", i);
		seg = export_open(c, rf, name, DP_ACCESS_RW, DP_ACCESS_RW);
		rh = alloc_region(c, hlen, &h);

		pattern_fill(h + s->local_off, s->len, seed);
		dp_prep_write(&d, rh, s->local_off, seg, s->target_off, s->len, 10 + i);
		snprintf(what, sizeof(what), "shape %u WRITE", i);
		expect_cqe(run_wait(q, &d, 20000), 0, s->len, what);
		bad = file_check(fd, pos, s->len, seed);
		cr_assert_eq(bad, -1, "shape %u: file wrong at +%lld", i, (long long)bad);
		{
			uint8_t b;

			if (pos) {
				cr_assert_eq(pread(fd, &b, 1, (off_t)pos - 1), 1);
				cr_assert_eq(b, pattern_byte(gseed, pos - 1),
					     "shape %u: byte before the transfer changed", i);
			}
			cr_assert_eq(pread(fd, &b, 1, (off_t)(pos + s->len)), 1);
			cr_assert_eq(b, pattern_byte(gseed, pos + s->len),
				     "shape %u: byte after the transfer changed", i);
		}

		memset(h, GUARD, hlen);
		dp_prep_read(&d, rh, s->local_off, seg, s->target_off, s->len, 20 + i);
		snprintf(what, sizeof(what), "shape %u READ", i);
		expect_cqe(run_wait(q, &d, 20000), 0, s->len, what);
		bad = pattern_check(h + s->local_off, s->len, seed);
		cr_assert_eq(bad, -1, "shape %u: read back wrong at +%lld", i, (long long)bad);
		if (s->local_off)
			cr_assert_eq(h[s->local_off - 1], GUARD, "shape %u: READ wrote before", i);
		cr_assert_eq(h[s->local_off + s->len], GUARD, "shape %u: READ wrote past", i);

		n = free_and_count(c, rf, 2, &seen);
		cr_assert_eq(n.direct_bytes + n.buffered_bytes, 2 * s->len,
			     "shape %u: %llu + %llu bytes counted", i, n.direct_bytes,
			     n.buffered_bytes);
		if (direct) {
			cr_assert_geq(n.buffered_bytes, 2 * unaligned_bytes(pos, s->len),
				      "shape %u: only %llu bytes buffered", i, n.buffered_bytes);
			if (s->all_direct)
				cr_assert_eq(n.direct_bytes, 2 * s->len,
					     "shape %u: %llu bytes direct, %llu buffered", i,
					     n.direct_bytes, n.buffered_bytes);
		}
		cr_assert_eq(dp_free(c, rh), 0);
		close(fd);
	}
	dp_close(c);
	stop_svc(&svc);
}

/* A file region as the local region, opened by path beneath --file-root
 * (length 0: the whole file), with a host region as the segment target:
 * WRITE reads the file, READ writes it. */
Test(file_transfer, file_as_local_region)
{
	const char *flags[] = {"--provider", "none", "--file-root", NULL, NULL};
	const uint64_t len = 8 * MiB;
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	uint8_t *h;
	int fd, rf, rh, seg;
	int64_t bad;

	flags[3] = file_dir();
	fd = file_make("local.bin", len, 21, O_RDONLY);
	start_svc(&svc, flags);
	c = connect_client(&svc, "file-local");
	q = make_queue(c, 16);
	rf = dp_open_file(c, "local.bin", 0, 0, DP_ACCESS_RW);
	cr_assert_geq(rf, 0, "dp_open_file: %s", dp_strerror(rf));
	rh = alloc_region(c, len, &h);
	seg = export_open(c, rh, "host", DP_ACCESS_RW, DP_ACCESS_RW);

	dp_prep_write(&d, rf, 0, seg, 0, len, 1);
	expect_cqe(run_wait(q, &d, 20000), 0, len, "WRITE file -> host");
	bad = pattern_check(h, len, 21);
	cr_assert_eq(bad, -1, "host region wrong at %lld", (long long)bad);

	pattern_fill(h, len, 22);
	dp_prep_read(&d, rf, 4096, seg, 4096, len - 8192, 2);
	expect_cqe(run_wait(q, &d, 20000), 0, len - 8192, "READ host -> file");
	{
		uint8_t *buf = malloc(len);

		uint64_t i;

		cr_assert_eq(pread(fd, buf, len, 0), (ssize_t)len);
		for (i = 0; i < len; i++)
			if (buf[i] != pattern_byte(i < 4096 || i >= len - 4096 ? 21 : 22, i))
				break;
		free(buf);
		cr_assert_eq(i, len, "file wrong at byte %llu", (unsigned long long)i);
	}
	close(fd);
	dp_close(c);
	stop_svc(&svc);
}

/* 64 descriptors of 1 MiB in flight at once against an io-depth of 8: the
 * file engine queues, round-robins and completes every one exactly once. */
Test(file_transfer, many_descriptors_at_once)
{
	static const char *const flags[] = {"--provider", "none",   "--io-depth", "8",
					    "--io-slice", "262144", NULL};
	enum { N = 64 };
	struct dp_desc d[N];
	struct dp_cqe cqe[N];
	struct dp_client *c;
	struct dp_queue *q;
	uint8_t *src, *dst;
	bool seen[N] = {0};
	int fd, rf, rs, rd, seg;
	int64_t bad;

	file_dir();
	start_svc(&svc, flags);
	c = connect_client(&svc, "file-many");
	q = make_queue(c, N);
	rs = alloc_region(c, N * MiB, &src);
	rd = alloc_region(c, N * MiB, &dst);
	pattern_fill(src, N * MiB, 31);
	fd = file_make("many", 0, 0, O_RDWR);
	rf = dp_register_file(c, fd, 0, N * MiB, DP_ACCESS_RW);
	cr_assert_geq(rf, 0, "dp_register_file: %s", dp_strerror(rf));
	seg = export_open(c, rf, "many", DP_ACCESS_RW, DP_ACCESS_RW);

	for (int pass = 0; pass < 2; pass++) {
		for (unsigned i = 0; i < N; i++) {
			/* Out of order in the file, to mix the slices up. */
			uint64_t off = (uint64_t)((i * 37) % N) * MiB;

			if (!pass)
				dp_prep_write(&d[i], rs, off, seg, off, MiB, i);
			else
				dp_prep_read(&d[i], rd, off, seg, off, MiB, i);
		}
		submit_all(q, d, N, 5000);
		reap(q, cqe, N, 30000);
		memset(seen, 0, sizeof(seen));
		for (unsigned i = 0; i < N; i++) {
			cr_assert_lt(cqe[i].user_data, N);
			cr_assert_not(seen[cqe[i].user_data], "user_data %llu completed twice",
				      (unsigned long long)cqe[i].user_data);
			seen[cqe[i].user_data] = true;
			expect_cqe(cqe[i], 0, MiB, pass ? "READ" : "WRITE");
		}
	}
	bad = pattern_check(dst, N * MiB, 31);
	cr_assert_eq(bad, -1, "read back wrong at %lld", (long long)bad);
	close(fd);
	dp_close(c);
	stop_svc(&svc);
}

/* DP_FILE_BUFFERED: aligned transfers too go through the page cache. */
Test(file_transfer, buffered_flag_never_direct)
{
	const uint64_t len = 4 * MiB;
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	struct io_counts n;
	struct io_tally seen = {0};
	uint8_t *h;
	int fd, rf, rh, seg;

	file_dir();
	fd = file_make("cached", len, 41, O_RDWR);
	start_svc(&svc, local_only);
	c = connect_client(&svc, "file-buffered");
	q = make_queue(c, 16);
	rh = alloc_region(c, len, &h);
	rf = dp_register_file(c, fd, 0, len, DP_ACCESS_RW | DP_FILE_BUFFERED);
	cr_assert_geq(rf, 0, "dp_register_file: %s", dp_strerror(rf));
	seg = export_open(c, rf, "cached", DP_ACCESS_RW, DP_ACCESS_RW);
	dp_prep_read(&d, rh, 0, seg, 0, len, 1);
	expect_cqe(run_wait(q, &d, 20000), 0, len, "READ");
	cr_assert_eq(pattern_check(h, len, 41), -1);
	pattern_fill(h, len, 42);
	dp_prep_write(&d, rh, 0, seg, 0, len, 2);
	expect_cqe(run_wait(q, &d, 20000), 0, len, "WRITE");
	cr_assert_eq(file_check(fd, 0, len, 42), -1);
	n = free_and_count(c, rf, 2, &seen);
	cr_assert_eq(n.direct_bytes, 0, "%llu bytes went direct", n.direct_bytes);
	cr_assert_eq(n.buffered_bytes, 2 * len);
	close(fd);
	dp_close(c);
	stop_svc(&svc);
}
