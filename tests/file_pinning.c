/* file_pinning.c - file I/O pins only the host memory it touches: a 4 KiB read into a 4 GiB region pins one bounded window (16 MiB), not the region, while a bystander's control calls and transfers go on; --max-pinned-mb caps a client's fixed buffers, beyond it slices go by address, and freeing a region gives its share back. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "helpers.h"

TestSuite(file_pinning, .fini = file_teardown, .timeout = 120);

/* Memory pinned by the process (VmPin of /proc/PID/status, the mm's
 * pinned_vm, where io_uring accounts its registered buffers), in bytes. */
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

/* The file's bytes [pos, pos + len) (pattern `seed`) must be at p. */
static void expect_file_bytes(const uint8_t *p, uint64_t pos, uint64_t len, uint64_t seed,
			      const char *what)
{
	for (uint64_t i = 0; i < len; i++)
		cr_assert_eq(p[i], pattern_byte(seed, pos + i), "%s: byte %llu differs", what,
			     (unsigned long long)i);
}

/* Bystanders, each a client of its own in a thread of its own until told to
 * stop: one times a control call (dp_alloc and dp_free of 64 KiB, an mmap
 * and a munmap in the service), the other a 4 KiB copy through its queue
 * (served by the same poller as the file read: there is one). Each keeps
 * its slowest. */
struct watcher {
	pthread_t ctl_thread, xfer_thread;
	struct dp_client *ctl;
	struct probe p;
	atomic_int stop;
	atomic_ulong ctl_rounds, xfer_rounds;
	uint64_t max_ctl_ns, max_xfer_ns;
	int ctl_err, xfer_err;
};

static void *watch_ctl(void *arg)
{
	struct watcher *w = arg;

	while (!atomic_load(&w->stop)) {
		uint64_t t0 = now_ns(), t;
		void *mem = NULL;
		int r = dp_alloc(w->ctl, 64 * 1024, 0, &mem);

		if (r < 0 || dp_free(w->ctl, r)) {
			w->ctl_err = r < 0 ? r : -EIO;
			break;
		}
		t = now_ns() - t0;
		if (atomic_fetch_add(&w->ctl_rounds, 1) >= 5 && t > w->max_ctl_ns)
			w->max_ctl_ns = t;
		sleep_ms(1);
	}
	return NULL;
}

static void *watch_xfer(void *arg)
{
	struct watcher *w = arg;

	while (!atomic_load(&w->stop)) {
		uint64_t t0 = now_ns(), t;
		struct dp_desc d;
		struct dp_cqe cqe;

		dp_prep_write(&d, w->p.rs, 0, w->p.seg, 0, 4096, ++w->p.n);
		cqe = run_wait(w->p.q, &d, 60000);
		if (cqe.status) {
			w->xfer_err = cqe.status;
			break;
		}
		t = now_ns() - t0;
		if (atomic_fetch_add(&w->xfer_rounds, 1) >= 5 && t > w->max_xfer_ns)
			w->max_xfer_ns = t;
		sleep_ms(1);
	}
	return NULL;
}

static void watcher_start(struct watcher *w)
{
	memset(w, 0, sizeof(*w));
	probe_start(&w->p, &svc, 64 * 1024);
	w->ctl = connect_client(&svc, "pin-bystander-ctl");
	cr_assert_eq(pthread_create(&w->ctl_thread, NULL, watch_ctl, w), 0);
	cr_assert_eq(pthread_create(&w->xfer_thread, NULL, watch_xfer, w), 0);
	/* The first rounds are a warm-up, not counted. */
	while (atomic_load(&w->ctl_rounds) < 10 || atomic_load(&w->xfer_rounds) < 10)
		sleep_ms(1);
}

static void watcher_stop(struct watcher *w)
{
	atomic_store(&w->stop, 1);
	pthread_join(w->ctl_thread, NULL);
	pthread_join(w->xfer_thread, NULL);
	cr_assert_eq(w->ctl_err, 0, "bystander's control calls: %s", dp_strerror(w->ctl_err));
	cr_assert_eq(w->xfer_err, 0, "bystander's copies: %s", dp_strerror(w->xfer_err));
	dp_close(w->ctl);
	dp_close(w->p.c);
}

/*
 * The hostile case: a 4 KiB read into a 4 GiB region (memfd, never touched:
 * it costs nothing until pinned) near its end. Before the fix the service
 * registered the whole region as fixed buffers at its first file I/O:
 * VmPin 4 GiB, and seconds during which every other client stalled (the
 * pinning holds the service's mmap lock, so even dp_alloc waited).
 */
Test(file_pinning, small_read_into_huge_region)
{
	const uint64_t huge = 4096 * MiB, at = huge - 3 * MiB + 4096, pos = 8192;
	struct io_tally seen = {0};
	struct watcher w;
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	struct io_counts n;
	uint8_t *hp;
	uint64_t t0, read_ns, pinned;
	int rh, rf, fd, seg;

	file_dir();
	start_svc(&svc, local_only);
	c = connect_client(&svc, "pin-huge");
	q = make_queue(c, 16);
	rh = alloc_region(c, huge, &hp);
	fd = file_make("f", MiB, 7, O_RDONLY);
	rf = dp_register_file(c, fd, 0, 0, DP_ACCESS_READ);
	cr_assert_geq(rf, 0, "dp_register_file: %s", dp_strerror(rf));
	seg = export_open(c, rf, "f", DP_ACCESS_READ, DP_ACCESS_READ);
	watcher_start(&w);

	t0 = now_ns();
	dp_prep_read(&d, rh, at, seg, pos, 4096, 1);
	expect_cqe(run_wait(q, &d, 60000), 0, 4096, "4 KiB READ into a 4 GiB region");
	read_ns = now_ns() - t0;
	sleep_ms(20);
	watcher_stop(&w);
	pinned = vm_pin(svc.pid);
	cr_log_info("4 KiB read %.1f ms; bystanders at worst: control call %.1f ms, 4 KiB copy "
		    "%.1f ms; VmPin %llu KiB",
		    read_ns / 1e6, w.max_ctl_ns / 1e6, w.max_xfer_ns / 1e6,
		    (unsigned long long)pinned / 1024);
	expect_file_bytes(hp + at, pos, 4096, 7, "the 4 KiB read");

	cr_assert_lt(pinned, 128 * MiB, "the service pins %llu MiB for a 4 KiB read",
		     (unsigned long long)(pinned / MiB));
	cr_assert_lt(w.max_ctl_ns, 100000000ull,
		     "a bystander's dp_alloc/dp_free took %.1f ms during the read",
		     w.max_ctl_ns / 1e6);
	cr_assert_lt(w.max_xfer_ns, 100000000ull,
		     "a bystander's 4 KiB copy took %.1f ms during the read", w.max_xfer_ns / 1e6);
	cr_assert_lt(read_ns, 1000000000ull, "the 4 KiB read took %.1f ms", read_ns / 1e6);

	/* It still went through a fixed buffer: a window, not nothing. */
	n = free_and_count(c, rf, 1, &seen);
	cr_assert_eq(n.direct + n.buffered, 1, "%llu slices", n.direct + n.buffered);
	if (svc_log_has(&svc, "fixed buffers, file root"))
		cr_assert_eq(n.fixed, 1, "the slice did not go through a fixed buffer");
	close(fd);
	dp_close(c);
	stop_svc(&svc);
}

/*
 * --max-pinned-mb: a client's windows (16 MiB, plus one slice) stop at the
 * cap; slices beyond it go by address and still succeed. Freeing a region
 * unpins its windows, and a window refused before is registered then.
 */
Test(file_pinning, cap_per_client)
{
	static const char *const flags[] = {"--provider", "none", "--max-pinned-mb", "20", NULL};
	struct io_tally seen = {0};
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_desc d;
	struct io_counts n;
	uint8_t *a, *b;
	int ra, rb, rf, fd, seg;
	bool fixed;

	file_dir();
	start_svc(&svc, flags);
	fixed = svc_log_has(&svc, "fixed buffers, file root");
	c = connect_client(&svc, "pin-cap");
	q = make_queue(c, 16);
	ra = alloc_region(c, 512 * MiB, &a);
	rb = alloc_region(c, 512 * MiB, &b);
	fd = file_make("f", MiB, 9, O_RDONLY);
	rf = dp_register_file(c, fd, 0, 0, DP_ACCESS_READ);
	cr_assert_geq(rf, 0, "dp_register_file: %s", dp_strerror(rf));
	seg = export_open(c, rf, "f", DP_ACCESS_READ, DP_ACCESS_READ);

	/* A's first window: pinned (17 MiB of the 20). */
	dp_prep_read(&d, ra, 4096, seg, 0, 4096, 1);
	expect_cqe(run_wait(q, &d, 20000), 0, 4096, "READ into A, window 0");
	/* B's first window and A's second would pass the cap: by address. */
	dp_prep_read(&d, rb, 4096, seg, 4096, 4096, 2);
	expect_cqe(run_wait(q, &d, 20000), 0, 4096, "READ into B, window 0");
	dp_prep_read(&d, ra, 64 * MiB + 8192, seg, 8192, 4096, 3);
	expect_cqe(run_wait(q, &d, 20000), 0, 4096, "READ into A, window 1");
	cr_assert_leq(vm_pin(svc.pid), 20 * MiB, "VmPin %llu KiB over the cap",
		      (unsigned long long)vm_pin(svc.pid) / 1024);
	expect_file_bytes(a + 4096, 0, 4096, 9, "A, window 0");
	expect_file_bytes(b + 4096, 4096, 4096, 9, "B, window 0");
	expect_file_bytes(a + 64 * MiB + 8192, 8192, 4096, 9, "A, window 1");

	/* A freed: its window goes, and B's is registered at its next read. */
	cr_assert_eq(dp_free(c, ra), 0);
	dp_prep_read(&d, rb, 4096, seg, 12288, 4096, 4);
	expect_cqe(run_wait(q, &d, 20000), 0, 4096, "READ into B after A's free");
	expect_file_bytes(b + 4096, 12288, 4096, 9, "B, window 0 again");
	cr_assert_leq(vm_pin(svc.pid), 20 * MiB, "VmPin %llu KiB over the cap",
		      (unsigned long long)vm_pin(svc.pid) / 1024);

	n = free_and_count(c, rf, 4, &seen);
	cr_assert_eq(n.direct + n.buffered, 4, "%llu slices", n.direct + n.buffered);
	if (fixed) {
		cr_assert_eq(n.fixed, 2,
			     "%llu of 4 slices through fixed buffers, want 2 (A's "
			     "window 0, then B's once A was freed)",
			     n.fixed);
		cr_assert_gt(vm_pin(svc.pid), 0, "B's window is registered: VmPin 0");
	}
	cr_assert_eq(dp_free(c, rb), 0);
	close(fd);
	dp_close(c);
	stop_svc(&svc);
}
