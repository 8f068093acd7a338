/* file_errors.c - file regions fail with their documented errno and nothing hangs: reads past the region, a file truncated before and during a READ, fd access modes, file types, paths out of --file-root, ENOSPC on a small tmpfs, file <-> file, shutdown and a client leaving mid-transfer. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <sys/mount.h>

#include "helpers.h"

static char mnt[128]; /* a tmpfs the test mounted, unmounted at teardown */

static void errors_teardown(void)
{
	svc_teardown();
	if (mnt[0]) {
		umount2(mnt, MNT_DETACH);
		rmdir(mnt);
		mnt[0] = 0;
	}
	file_dir_remove();
}

TestSuite(file_errors, .fini = errors_teardown, .timeout = 60);

struct env {
	struct dp_client *c;
	struct dp_queue *q;
	int host;
	uint8_t *hp;
	uint64_t ud;
};

static void env_start(struct env *e, const char *const *flags, uint64_t host_len)
{
	memset(e, 0, sizeof(*e));
	start_svc(&svc, flags ? flags : local_only);
	e->c = connect_client(&svc, "file-errors");
	e->q = make_queue(e->c, 16);
	e->host = alloc_region(e->c, host_len, &e->hp);
}

static struct dp_cqe env_run(struct env *e, struct dp_desc d)
{
	d.user_data = ++e->ud;
	return run_wait(e->q, &d, 20000);
}

/* The client leaves and the service must exit 0 (under ASan: no leak, no
 * error in the service either). */
static void env_finish(struct env *e)
{
	dp_close(e->c);
	stop_svc(&svc);
}

static int reg_file(struct dp_client *c, int fd, uint64_t off, uint64_t len, unsigned access)
{
	int r = dp_register_file(c, fd, off, len, access);

	cr_assert_geq(r, 0, "dp_register_file: %s", dp_strerror(r));
	return r;
}

static void expect_fail(struct dp_cqe cqe, int status, const char *what)
{
	cr_assert_eq(cqe.status, status, "%s: status %d (%s), want %d (%s)", what, cqe.status,
		     dp_strerror(cqe.status), status, dp_strerror(status));
	cr_assert_eq(cqe.bytes, 0, "%s: a failed completion reports %llu bytes", what,
		     (unsigned long long)cqe.bytes);
}

/* Validation: a range beyond the registered length is -EFAULT before any
 * I/O, however long the file is. */
Test(file_errors, beyond_registered_length_efault)
{
	struct env e;
	struct dp_desc d;
	int fd, rf, seg;

	file_dir();
	fd = file_make("f", 4 * MiB, 1, O_RDWR);
	env_start(&e, NULL, 2 * MiB);
	rf = reg_file(e.c, fd, MiB, MiB, DP_ACCESS_RW);
	seg = export_open(e.c, rf, "f", DP_ACCESS_RW, DP_ACCESS_RW);
	dp_prep_read(&d, e.host, 0, seg, 1, MiB, 0);
	expect_fail(env_run(&e, d), -EFAULT, "READ one byte past the region");
	dp_prep_write(&d, e.host, 0, seg, MiB, 1, 0);
	expect_fail(env_run(&e, d), -EFAULT, "WRITE at the region's end");
	dp_prep_write(&d, rf, 1, seg, 0, MiB, 0);
	expect_fail(env_run(&e, d), -EFAULT, "file as local region, one byte past");
	dp_prep_read(&d, e.host, 0, seg, 0, MiB, 0);
	expect_cqe(env_run(&e, d), 0, MiB, "READ of exactly the region");
	for (uint64_t i = 0; i < MiB; i++)
		if (e.hp[i] != pattern_byte(1, MiB + i))
			cr_assert_fail("byte %llu is not the file's byte %llu",
				       (unsigned long long)i, (unsigned long long)(MiB + i));
	close(fd);
	env_finish(&e);
}

/* The file shrank after registration: a READ of the part that is gone is
 * -EIO (a short read is never success), the part still there reads. */
Test(file_errors, truncated_before_read_eio)
{
	struct env e;
	struct dp_desc d;
	int fd, rf, seg;

	file_dir();
	fd = file_make("f", MiB, 2, O_RDWR);
	env_start(&e, NULL, MiB);
	rf = reg_file(e.c, fd, 0, MiB, DP_ACCESS_READ);
	seg = export_open(e.c, rf, "f", DP_ACCESS_READ, DP_ACCESS_READ);
	cr_assert_eq(ftruncate(fd, 100000), 0);
	dp_prep_read(&d, e.host, 0, seg, 0, MiB, 0);
	expect_fail(env_run(&e, d), -EIO, "READ of a region the file no longer holds");
	dp_prep_read(&d, e.host, 0, seg, 98304, 4096, 0);
	expect_fail(env_run(&e, d), -EIO, "READ across the new end of file");
	dp_prep_read(&d, e.host, 0, seg, 0, 65536, 0);
	expect_cqe(env_run(&e, d), 0, 65536, "READ before the new end of file");
	cr_assert_eq(pattern_check(e.hp, 65536, 2), -1);
	close(fd);
	env_finish(&e);
}

/*
 * Truncated while the READ is in flight: 4 KiB slices one at a time make a
 * 64 MiB READ take thousands of round trips, while the truncation is one
 * system call issued right after the submit.
 */
Test(file_errors, truncated_during_read_eio)
{
	static const char *const flags[] = {"--provider", "none", "--io-slice", "4096",
					    "--io-depth", "1",	  NULL};
	struct env e;
	struct dp_desc d;
	struct dp_cqe cqe;
	int fd, rf, seg;

	file_dir();
	fd = file_make("f", 64 * MiB, 3, O_RDWR);
	env_start(&e, flags, 64 * MiB);
	rf = reg_file(e.c, fd, 0, 64 * MiB, DP_ACCESS_READ);
	seg = export_open(e.c, rf, "f", DP_ACCESS_READ, DP_ACCESS_READ);
	dp_prep_read(&d, e.host, 0, seg, 0, 64 * MiB, 7);
	submit_all(e.q, &d, 1, 5000);
	cr_assert_eq(ftruncate(fd, 0), 0);
	reap(e.q, &cqe, 1, 30000);
	cr_assert_eq(cqe.user_data, 7);
	expect_fail(cqe, -EIO, "READ of a file truncated under it");
	cr_assert(cqe.flags & DP_CQE_F_FILE);
	close(fd);
	env_finish(&e);
}

/* The fd's open mode bounds the region's access, at registration, at
 * export and on the data path. */
Test(file_errors, fd_access_modes)
{
	struct env e;
	struct dp_desc d;
	int ro, wo, rf, seg, rc;

	file_dir();
	ro = file_make("f", MiB, 4, O_RDONLY);
	wo = open(fpath("f"), O_WRONLY | O_CLOEXEC);
	cr_assert_geq(wo, 0);
	env_start(&e, NULL, MiB);
	rc = dp_register_file(e.c, ro, 0, MiB, DP_ACCESS_RW);
	cr_assert_eq(rc, -EPERM, "read-only fd registered RW: %s", dp_strerror(rc));
	rc = dp_register_file(e.c, wo, 0, MiB, DP_ACCESS_READ);
	cr_assert_eq(rc, -EPERM, "write-only fd registered for READ: %s", dp_strerror(rc));
	rc = dp_register_file(e.c, wo, 0, MiB, DP_ACCESS_RW);
	cr_assert_eq(rc, -EPERM, "write-only fd registered RW: %s", dp_strerror(rc));

	rf = reg_file(e.c, ro, 0, MiB, DP_ACCESS_READ);
	rc = dp_segment_export(e.c, rf, "rw", DP_ACCESS_RW);
	cr_assert_eq(rc, -EPERM, "read-only file exported RW: %s", dp_strerror(rc));
	seg = export_open(e.c, rf, "ro", DP_ACCESS_READ, DP_ACCESS_READ);
	rc = dp_segment_open(e.c, NULL, "ro", DP_ACCESS_RW);
	cr_assert_eq(rc, -EPERM);

	/* As the local region: a READ writes into it. */
	{
		int hseg = export_open(e.c, e.host, "host", DP_ACCESS_RW, DP_ACCESS_RW);

		dp_prep_read(&d, rf, 0, hseg, 0, 4096, 0);
		expect_fail(env_run(&e, d), -EPERM, "READ into a read-only file region");
		dp_prep_write(&d, rf, 0, hseg, 0, MiB, 0);
		expect_cqe(env_run(&e, d), 0, MiB, "WRITE out of a read-only file region");
		cr_assert_eq(pattern_check(e.hp, MiB, 4), -1);
	}
	dp_prep_read(&d, e.host, 0, seg, 0, MiB, 0);
	expect_cqe(env_run(&e, d), 0, MiB, "READ through the read-only segment");
	cr_assert_eq(file_check(ro, 0, MiB, 4), -1, "the file changed");
	close(ro);
	close(wo);
	env_finish(&e);
}

/* Only regular files and block devices; sane flags and ranges. */
Test(file_errors, bad_registrations_einval)
{
	struct env e;
	int p[2], dir, null, app, f, rc;

	file_dir();
	f = file_make("f", MiB, 5, O_RDWR);
	app = open(fpath("f"), O_RDWR | O_APPEND | O_CLOEXEC);
	dir = open(fdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	null = open("/dev/null", O_RDWR | O_CLOEXEC);
	cr_assert_eq(pipe(p), 0);
	cr_assert(app >= 0 && dir >= 0 && null >= 0);
	env_start(&e, NULL, 4096);
	/* An fd that is not open: the argument is bad, the connection fine. */
	cr_assert_eq(dp_register_file(e.c, 1000, 0, 4096, DP_ACCESS_READ), -EINVAL, "closed fd");
	cr_assert_eq(dp_register_file(e.c, -1, 0, 4096, DP_ACCESS_READ), -EINVAL, "fd -1");
	cr_assert_eq(dp_register_file(e.c, p[0], 0, 4096, DP_ACCESS_READ), -EINVAL, "pipe");
	cr_assert_eq(dp_register_file(e.c, dir, 0, 4096, DP_ACCESS_READ), -EINVAL, "directory");
	cr_assert_eq(dp_register_file(e.c, null, 0, 4096, DP_ACCESS_READ), -EINVAL, "/dev/null");
	cr_assert_eq(dp_register_file(e.c, app, 0, 4096, DP_ACCESS_RW), -EINVAL, "O_APPEND, RW");
	rc = dp_register_file(e.c, app, 0, 4096, DP_ACCESS_READ);
	cr_assert_geq(rc, 0, "O_APPEND, READ: %s", dp_strerror(rc));
	for (unsigned a = 0; a < 5; a++)
		if (a != DP_ACCESS_READ && a != DP_ACCESS_RW)
			cr_assert_eq(dp_register_file(e.c, f, 0, 4096, a), -EINVAL, "access %u", a);
	cr_assert_eq(dp_register_file(e.c, f, 4096, MiB, DP_ACCESS_READ), -EINVAL,
		     "read-only region past the end of the file");
	cr_assert_eq(dp_register_file(e.c, f, MiB, 0, DP_ACCESS_READ), -EINVAL,
		     "length 0 (to the end) at the end");
	cr_assert_eq(dp_register_file(e.c, f, UINT64_MAX - 10, 100, DP_ACCESS_RW), -EINVAL,
		     "offset + length overflows");
	rc = dp_register_file(e.c, f, 4096, 16 * MiB, DP_ACCESS_RW);
	cr_assert_geq(rc, 0, "a writable region may extend past the end: %s", dp_strerror(rc));
	cr_assert_eq(dp_open_file(e.c, "f", 0, 0, DP_ACCESS_READ), -EPERM, "no --file-root");
	close(p[0]);
	close(p[1]);
	close(dir);
	close(null);
	close(app);
	close(f);
	env_finish(&e);
}

/* Paths are resolved beneath --file-root; every way out is -EPERM. */
Test(file_errors, path_escapes_file_root_eperm)
{
	const char *flags[] = {"--provider", "none", "--file-root", NULL, NULL};
	static const char *const escapes[] = {
		"../outside",	     "/etc/passwd", "abs_link",	 "rel_link",
		"sub/../../outside", "sub/up_link", "proc_link", "dir_link/outside",
	};
	char root[128], outside[160];
	struct env e;
	int rc, fd;

	file_dir();
	/* fdir/outside is the target; fdir/root is the root. */
	fd = file_make("outside", 4096, 6, O_RDONLY);
	close(fd);
	snprintf(root, sizeof(root), "%s/root", fdir);
	snprintf(outside, sizeof(outside), "%s/outside", fdir);
	cr_assert_eq(mkdir(root, 0700), 0);
	cr_assert_eq(mkdir(fpath("root/sub"), 0700), 0);
	fd = file_make("root/data", 4096, 7, O_RDONLY);
	close(fd);
	cr_assert_eq(symlink(outside, fpath("root/abs_link")), 0);
	cr_assert_eq(symlink("../outside", fpath("root/rel_link")), 0);
	cr_assert_eq(symlink("../../outside", fpath("root/sub/up_link")), 0);
	cr_assert_eq(symlink("/proc/self/fd/0", fpath("root/proc_link")), 0);
	cr_assert_eq(symlink("..", fpath("root/dir_link")), 0);
	cr_assert_eq(symlink("data", fpath("root/in_link")), 0);
	flags[3] = root;
	env_start(&e, flags, 4096);
	for (unsigned i = 0; i < sizeof(escapes) / sizeof(escapes[0]); i++) {
		rc = dp_open_file(e.c, escapes[i], 0, 0, DP_ACCESS_READ);
		cr_assert_eq(rc, -EPERM, "'%s': %d (%s), want -EPERM", escapes[i], rc,
			     dp_strerror(rc));
	}
	rc = dp_open_file(e.c, "missing", 0, 0, DP_ACCESS_READ);
	cr_assert_eq(rc, -ENOENT, "missing file: %s", dp_strerror(rc));
	rc = dp_open_file(e.c, "sub", 0, 0, DP_ACCESS_READ);
	cr_assert_eq(rc, -EINVAL, "a directory: %s", dp_strerror(rc));
	/* Inside the root, links and ".." that stay inside are fine. */
	rc = dp_open_file(e.c, "in_link", 0, 0, DP_ACCESS_READ);
	cr_assert_geq(rc, 0, "in_link: %s", dp_strerror(rc));
	rc = dp_open_file(e.c, "sub/../data", 0, 0, DP_ACCESS_RW);
	cr_assert_geq(rc, 0, "sub/../data: %s", dp_strerror(rc));
	{
		struct dp_desc d;
		int seg = export_open(e.c, rc, "data", DP_ACCESS_READ, DP_ACCESS_READ);

		dp_prep_read(&d, e.host, 0, seg, 0, 4096, 0);
		expect_cqe(env_run(&e, d), 0, 4096, "READ of root/data");
		cr_assert_eq(pattern_check(e.hp, 4096, 7), -1);
	}
	env_finish(&e);
}

/* A WRITE that does not fit the file system completes with -ENOSPC. */
Test(file_errors, enospc_small_tmpfs)
{
	struct env e;
	struct dp_desc d;
	int fd, rf, seg;

	file_dir();
	snprintf(mnt, sizeof(mnt), "%s/tmpfs", fdir);
	cr_assert_eq(mkdir(mnt, 0700), 0);
	if (mount("dp-test", mnt, "tmpfs", 0, "size=1m") != 0) {
		int err = errno;

		rmdir(mnt);
		mnt[0] = 0;
		cr_skip_test("cannot mount a tmpfs here (%s): ENOSPC not tested", strerror(err));
	}
	fd = open(fpath("tmpfs/full"), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	cr_assert_geq(fd, 0);
	env_start(&e, NULL, 4 * MiB);
	pattern_fill(e.hp, 4 * MiB, 8);
	rf = reg_file(e.c, fd, 0, 4 * MiB, DP_ACCESS_RW);
	seg = export_open(e.c, rf, "full", DP_ACCESS_RW, DP_ACCESS_RW);
	dp_prep_write(&d, e.host, 0, seg, 0, 4 * MiB, 0);
	expect_fail(env_run(&e, d), -ENOSPC, "WRITE of 4 MiB into a 1 MiB tmpfs");
	/* What fits still goes. */
	cr_assert_eq(ftruncate(fd, 0), 0);
	dp_prep_write(&d, e.host, 0, seg, 0, 256 * 1024, 0);
	expect_cqe(env_run(&e, d), 0, 256 * 1024, "WRITE of 256 KiB");
	cr_assert_eq(file_check(fd, 0, 256 * 1024, 8), -1);
	close(fd);
	env_finish(&e);
}

/* A file on both sides has no memory to go through: -ENOTSUP. */
Test(file_errors, file_to_file_enotsup)
{
	struct env e;
	struct dp_desc d;
	struct dp_cqe cqe;
	int a, b, ra, rb, seg;

	file_dir();
	a = file_make("a", MiB, 9, O_RDWR);
	b = file_make("b", MiB, 10, O_RDWR);
	env_start(&e, NULL, 4096);
	ra = reg_file(e.c, a, 0, MiB, DP_ACCESS_RW);
	rb = reg_file(e.c, b, 0, MiB, DP_ACCESS_RW);
	seg = export_open(e.c, rb, "b", DP_ACCESS_RW, DP_ACCESS_RW);
	dp_prep_write(&d, ra, 0, seg, 0, MiB, 0);
	cqe = env_run(&e, d);
	expect_fail(cqe, -ENOTSUP, "file -> file WRITE");
	cr_assert(cqe.flags & DP_CQE_F_FILE);
	cr_assert_eq(file_check(b, 0, MiB, 10), -1, "the target file changed");
	close(a);
	close(b);
	env_finish(&e);
}

/* SIGTERM with a long transfer in flight: the descriptor completes
 * (cancelled, or done if it was quick) and the service exits 0. */
Test(file_errors, shutdown_mid_transfer)
{
	static const char *const flags[] = {"--provider", "none", "--io-slice", "4096",
					    "--io-depth", "1",	  NULL};
	struct env e;
	struct dp_desc d;
	struct dp_cqe cqe;
	int fd, rf, seg, rc;

	file_dir();
	fd = file_make("f", 64 * MiB, 11, O_RDONLY);
	env_start(&e, flags, 64 * MiB);
	rf = reg_file(e.c, fd, 0, 64 * MiB, DP_ACCESS_READ);
	seg = export_open(e.c, rf, "f", DP_ACCESS_READ, DP_ACCESS_READ);
	dp_prep_read(&d, e.host, 0, seg, 0, 64 * MiB, 3);
	submit_all(e.q, &d, 1, 5000);
	sleep_ms(5);
	rc = svc_stop(&svc);
	cr_assert_eq(rc, 0, "dataplaned exit status %d", rc);
	cr_assert_eq(dp_poll(e.q, &cqe, 1), 1, "no completion for the descriptor in flight");
	cr_assert_eq(cqe.user_data, 3);
	cr_assert(cqe.status == -ECANCELED || (cqe.status == 0 && cqe.bytes == 64 * MiB),
		  "status %d (%s), %llu bytes", cqe.status, dp_strerror(cqe.status),
		  (unsigned long long)cqe.bytes);
	if (cqe.status == 0)
		cr_log_warn("the transfer finished before SIGTERM: cancellation not exercised");
	close(fd);
	dp_close(e.c);
}

/* A client that leaves mid-transfer: the service stops its I/O and gives
 * back every fd it held for it. */
Test(file_errors, client_leaves_mid_transfer)
{
	static const char *const flags[] = {"--provider", "none", "--io-slice", "4096",
					    "--io-depth", "1",	  NULL};
	struct dp_desc d;
	struct dp_client *c;
	struct dp_queue *q;
	uint8_t *h;
	int fd, rf, rh, seg, base, now = -1;
	uint64_t deadline;

	file_dir();
	fd = file_make("f", 64 * MiB, 12, O_RDONLY);
	start_svc(&svc, flags);
	/* The fixture's readiness probe was a connection too: count once the
	 * service has dropped it. */
	for (int same = 0, last = -1; same < 5; sleep_ms(20)) {
		base = proc_fd_count(svc.pid);
		same = base == last ? same + 1 : 0;
		last = base;
	}
	c = connect_client(&svc, "leaver");
	q = make_queue(c, 16);
	rh = alloc_region(c, 64 * MiB, &h);
	rf = reg_file(c, fd, 0, 64 * MiB, DP_ACCESS_READ);
	seg = export_open(c, rf, "f", DP_ACCESS_READ, DP_ACCESS_READ);
	cr_assert_gt(proc_fd_count(svc.pid), base);
	dp_prep_read(&d, rh, 0, seg, 0, 64 * MiB, 1);
	submit_all(q, &d, 1, 5000);
	sleep_ms(5);
	dp_close(c);
	deadline = now_ns() + 5000000000ull;
	while (now_ns() < deadline && (now = proc_fd_count(svc.pid)) != base)
		sleep_ms(10);
	cr_assert_eq(now, base, "service holds %d fds, %d before the client came", now, base);
	close(fd);
	stop_svc(&svc);
}
