/* SPDX-License-Identifier: MIT */
/* stats_file.c - file I/O slices in the stats region: an aligned transfer counted direct (where the file system takes O_DIRECT), a DP_FILE_BUFFERED one and an unaligned one counted buffered, exactly, in ring-stat's JSON, Prometheus and wide table. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "helpers.h"

TestSuite(stats_file, .fini = file_teardown, .timeout = 120);

#define KiB 1024ull
#define SLICE (64 * KiB) /* --io-slice */
#define ALIGNED_LEN (1024 * KiB)
#define CACHED_LEN (3 * SLICE + 100)
#define UNALIGNED_LEN (8 * KiB)

/* The file counters of every poller, summed, and the file path's figures. */
struct file_counts {
	uint64_t direct_ios, direct_bytes, buffered_ios, buffered_bytes;
	uint64_t completions, bytes;
};

static struct file_counts counts_of(const struct jv *s)
{
	const struct jv *ps = json_get(s, "pollers");
	struct file_counts n = {0};

	cr_assert(ps && ps->t == J_ARR && ps->n > 0, "no pollers array");
	for (size_t i = 0; i < ps->n; i++) {
		const struct jv *p = ps->items[i];

		n.direct_ios += json_u64(p, "file.direct_ios");
		n.direct_bytes += json_u64(p, "file.direct_bytes");
		n.buffered_ios += json_u64(p, "file.buffered_ios");
		n.buffered_bytes += json_u64(p, "file.buffered_bytes");
		n.completions += json_u64(p, "paths.file.completions");
		n.bytes += json_u64(p, "paths.file.bytes");
	}
	return n;
}

/* Samples ring-stat until the file path shows `completions` transfers and
 * the slices `bytes` bytes (5 s at most): a poller publishes once it has
 * been idle a moment, not at the completion. */
static struct file_counts wait_counts(const char *const *args, uint64_t completions, uint64_t bytes)
{
	struct file_counts n = {0};

	for (int i = 0; i < 100; i++) {
		struct jv *s = ring_stat_json(args);

		n = counts_of(s);
		json_free(s);
		if (n.completions >= completions && n.direct_bytes + n.buffered_bytes >= bytes)
			return n;
		usleep(50000);
	}
	cr_assert_fail("ring-stat shows %llu file completions and %llu slice bytes, want %llu "
		       "and %llu",
		       (unsigned long long)n.completions,
		       (unsigned long long)(n.direct_bytes + n.buffered_bytes),
		       (unsigned long long)completions, (unsigned long long)bytes);
	return n;
}

static void expect_counts(const struct file_counts *n, const struct file_counts *want,
			  const char *what)
{
	cr_assert_eq(n->completions, want->completions, "%s: %llu file completions, want %llu",
		     what, (unsigned long long)n->completions,
		     (unsigned long long)want->completions);
	cr_assert_eq(n->bytes, want->bytes, "%s: file path %llu bytes, want %llu", what,
		     (unsigned long long)n->bytes, (unsigned long long)want->bytes);
	cr_assert_eq(n->direct_ios, want->direct_ios, "%s: %llu direct slices, want %llu", what,
		     (unsigned long long)n->direct_ios, (unsigned long long)want->direct_ios);
	cr_assert_eq(n->direct_bytes, want->direct_bytes, "%s: %llu direct bytes, want %llu", what,
		     (unsigned long long)n->direct_bytes, (unsigned long long)want->direct_bytes);
	cr_assert_eq(n->buffered_ios, want->buffered_ios, "%s: %llu buffered slices, want %llu",
		     what, (unsigned long long)n->buffered_ios,
		     (unsigned long long)want->buffered_ios);
	cr_assert_eq(n->buffered_bytes, want->buffered_bytes, "%s: %llu buffered bytes, want %llu",
		     what, (unsigned long long)n->buffered_bytes,
		     (unsigned long long)want->buffered_bytes);
}

/* The sum of a Prometheus family's samples with mode="<mode>", checking
 * that its HELP and TYPE (counter) come before the first sample. */
static uint64_t prom_sum(const char *text, const char *family, const char *mode)
{
	char help[128], type[128], start[128], label[64];
	const char *h, *t, *p = text;
	uint64_t sum = 0;
	unsigned samples = 0;

	snprintf(help, sizeof(help), "# HELP %s ", family);
	snprintf(type, sizeof(type), "# TYPE %s counter\n", family);
	snprintf(start, sizeof(start), "\n%s{", family);
	snprintf(label, sizeof(label), ",mode=\"%s\"} ", mode);
	h = strstr(text, help);
	t = strstr(text, type);
	cr_assert(h && t, "%s: no HELP or TYPE counter line", family);
	while ((p = strstr(p, start))) {
		const char *end = strchr(p + 1, '\n'), *l = strstr(p, label);

		cr_assert(p > h && p > t, "%s: a sample before its HELP and TYPE", family);
		cr_assert(strstr(p, "service=\"") < end && strstr(p, "poller=\"") < end,
			  "%s: sample without service and poller labels", family);
		if (l && l < end) {
			char *num_end;

			sum += strtoull(l + strlen(label), &num_end, 10);
			cr_assert_eq(num_end, end, "%s: bad value: %.*s", family,
				     (int)(end - p - 1), p + 1);
			samples++;
		}
		p = end;
	}
	cr_assert_gt(samples, 0u, "%s: no sample with mode=\"%s\"", family, mode);
	return sum;
}

Test(stats_file, direct_and_buffered_slices)
{
	static const char *const flags[] = {"--provider", "none", "--io-slice", "65536", NULL};
	const char *json[] = {"--socket", NULL, "--json", NULL};
	const char *prom[] = {"--socket", NULL, "--prometheus", NULL};
	const char *wide[] = {"--socket", NULL, "--wide", NULL};
	struct file_counts n, want = {0};
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	struct tool_run r;
	struct jv *s;
	uint8_t *h, *h2;
	int fd, fdc, rf, rc, rh, rh2, seg, segc;
	bool direct;

	direct = file_dir_direct("only buffered counts are checked");
	start_svc(&svc, flags);
	json[1] = prom[1] = wide[1] = svc.sock;
	c = connect_client(&svc, "stats-file");
	q = make_queue(c, 16);
	rh = alloc_region(c, ALIGNED_LEN, &h);
	rh2 = alloc_region(c, 256 * KiB, &h2);
	cr_assert_eq((uintptr_t)h % 4096, 0, "host region not page-aligned");
	cr_assert_eq((uintptr_t)h2 % 4096, 0, "host region not page-aligned");

	/* Nothing yet: every counter is there, at 0. */
	s = ring_stat_json(json);
	n = counts_of(s);
	json_free(s);
	expect_counts(&n, &want, "before any transfer");

	/* Aligned: 16 slices of 64 KiB, direct where the file system takes
	 * O_DIRECT (all of them or none: the same slices either way). */
	fd = file_make("aligned", ALIGNED_LEN, 0, O_RDWR);
	rf = dp_register_file(c, fd, 0, ALIGNED_LEN, DP_ACCESS_RW);
	cr_assert_geq(rf, 0, "dp_register_file: %s", dp_strerror(rf));
	seg = export_open(c, rf, "aligned", DP_ACCESS_RW, DP_ACCESS_RW);
	pattern_fill(h, ALIGNED_LEN, 1);
	dp_prep_write(&d, rh, 0, seg, 0, ALIGNED_LEN, 1);
	expect_cqe(run_wait(q, &d, 20000), 0, ALIGNED_LEN, "aligned WRITE");
	cr_assert_eq(file_check(fd, 0, ALIGNED_LEN, 1), -1, "aligned WRITE: file differs");
	want.completions = 1;
	want.bytes = ALIGNED_LEN;
	if (direct) {
		want.direct_ios = ALIGNED_LEN / SLICE;
		want.direct_bytes = ALIGNED_LEN;
	} else {
		want.buffered_ios = ALIGNED_LEN / SLICE;
		want.buffered_bytes = ALIGNED_LEN;
	}
	n = wait_counts(json, want.completions, want.bytes);
	expect_counts(&n, &want, "aligned WRITE");

	/* DP_FILE_BUFFERED: aligned, yet through the page cache: 3 slices of
	 * 64 KiB and one of 100 bytes. */
	fdc = file_make("cached", CACHED_LEN, 2, O_RDONLY);
	rc = dp_register_file(c, fdc, 0, CACHED_LEN, DP_ACCESS_READ | DP_FILE_BUFFERED);
	cr_assert_geq(rc, 0, "dp_register_file: %s", dp_strerror(rc));
	segc = export_open(c, rc, "cached", DP_ACCESS_READ, DP_ACCESS_READ);
	dp_prep_read(&d, rh2, 0, segc, 0, CACHED_LEN, 2);
	expect_cqe(run_wait(q, &d, 20000), 0, CACHED_LEN, "DP_FILE_BUFFERED READ");
	cr_assert_eq(pattern_check(h2, CACHED_LEN, 2), -1, "DP_FILE_BUFFERED READ: bytes differ");
	want.completions++;
	want.bytes += CACHED_LEN;
	want.buffered_ios += 4;
	want.buffered_bytes += CACHED_LEN;
	n = wait_counts(json, want.completions, want.bytes);
	expect_counts(&n, &want, "DP_FILE_BUFFERED READ");

	/* Unaligned: 8 KiB from file offset 1 to host offset 1. With O_DIRECT,
	 * a 4095-byte head and a 1-byte tail through the page cache around
	 * one direct page; without, one buffered slice. */
	memset(h2, 0, 256 * KiB);
	dp_prep_read(&d, rh2, 1, seg, 1, UNALIGNED_LEN, 3);
	expect_cqe(run_wait(q, &d, 20000), 0, UNALIGNED_LEN, "unaligned READ");
	cr_assert_eq(memcmp(h2 + 1, h + 1, UNALIGNED_LEN), 0, "unaligned READ: bytes differ");
	want.completions++;
	want.bytes += UNALIGNED_LEN;
	if (direct) {
		want.direct_ios += 1;
		want.direct_bytes += 4096;
		want.buffered_ios += 2;
		want.buffered_bytes += UNALIGNED_LEN - 4096;
	} else {
		want.buffered_ios += 1;
		want.buffered_bytes += UNALIGNED_LEN;
	}
	n = wait_counts(json, want.completions, want.bytes);
	expect_counts(&n, &want, "unaligned READ");

	/* Rates: the first sample's cover the time since the start. */
	s = ring_stat_json(json);
	{
		const struct jv *p = json_get(s, "pollers")->items[0];
		const struct jv *dr = json_path(p, "rates.file.direct_bytes_per_s");
		const struct jv *br = json_path(p, "rates.file.buffered_bytes_per_s");

		cr_assert(dr && dr->t == J_NUM && br && br->t == J_NUM, "no rates.file");
		cr_assert(json_path(p, "rates.file.direct_ios_per_s") &&
				  json_path(p, "rates.file.buffered_ios_per_s"),
			  "no rates.file slice rates");
		cr_assert_eq(dr->num > 0, direct, "direct_bytes_per_s %f", dr->num);
		cr_assert_gt(br->num, 0, "buffered_bytes_per_s %f", br->num);
	}
	json_free(s);

	/* Prometheus: the same figures, with HELP and TYPE. */
	r = ring_stat(prom);
	cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
	cr_assert_eq(prom_sum(r.out, "dataplane_file_ios_total", "direct"), want.direct_ios);
	cr_assert_eq(prom_sum(r.out, "dataplane_file_ios_total", "buffered"), want.buffered_ios);
	cr_assert_eq(prom_sum(r.out, "dataplane_file_bytes_total", "direct"), want.direct_bytes);
	cr_assert_eq(prom_sum(r.out, "dataplane_file_bytes_total", "buffered"),
		     want.buffered_bytes);
	tool_run_free(&r);

	/* --wide: the share of file bytes that went direct. */
	r = ring_stat(wide);
	cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
	cr_assert_not_null(strstr(r.out, "DIRECT%"), "%s", r.out);
	tool_run_free(&r);

	close(fd);
	close(fdc);
	dp_close(c);
	stop_svc(&svc);
}
