/* file_util.h - helpers shared by the file_* suites: scratch directories,
 * patterned files, an O_DIRECT probe, and the service's per-region I/O
 * counts (logged when a file region closes). */
#ifndef DP_TEST_FILE_UTIL_H
#define DP_TEST_FILE_UTIL_H

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "service_util.h"

/* The scratch directory of the running test (removed by file_teardown).
 * /var/tmp rather than /tmp: the latter is often tmpfs, which may refuse
 * O_DIRECT. */
static char fdir[64];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static inline void file_dir_remove(void)
{
	if (fdir[0])
		nftw(fdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	fdir[0] = 0;
}

static inline void file_teardown(void)
{
	svc_teardown();
	file_dir_remove();
}

static inline const char *file_dir(void)
{
	snprintf(fdir, sizeof(fdir), "/var/tmp/dp-file-XXXXXX");
	cr_assert_not_null(mkdtemp(fdir), "mkdtemp: %s", strerror(errno));
	return fdir;
}

/* fdir/name, in one of a few rotating buffers. */
static inline const char *fpath(const char *name)
{
	static char buf[4][256];
	static int next;
	char *p = buf[next++ & 3];

	snprintf(p, sizeof(buf[0]), "%s/%s", fdir, name);
	return p;
}

/* Creates fdir/name with `len` bytes of pattern `seed` (empty when len is
 * 0); returns it open with `flags`. */
static inline int file_make(const char *name, uint64_t len, uint64_t seed, int flags)
{
	int fd = open(fpath(name), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	uint8_t *buf;

	cr_assert_geq(fd, 0, "create %s: %s", name, strerror(errno));
	if (len) {
		buf = malloc(len);
		cr_assert_not_null(buf);
		pattern_fill(buf, len, seed);
		for (uint64_t done = 0; done < len;) {
			ssize_t n = pwrite(fd, buf + done, len - done, (off_t)done);

			cr_assert_gt(n, 0, "write %s: %s", name, strerror(errno));
			done += (uint64_t)n;
		}
		free(buf);
	}
	close(fd);
	fd = open(fpath(name), flags | O_CLOEXEC);
	cr_assert_geq(fd, 0, "open %s: %s", name, strerror(errno));
	return fd;
}

/* Offset of the first byte of [off, off + len) of fd that is not
 * pattern `seed` (counted from off), or -1. */
static inline int64_t file_check(int fd, uint64_t off, uint64_t len, uint64_t seed)
{
	uint8_t *buf = malloc(len ? len : 1);
	int64_t bad;

	cr_assert_not_null(buf);
	for (uint64_t done = 0; done < len;) {
		ssize_t n = pread(fd, buf + done, len - done, (off_t)(off + done));

		cr_assert_gt(n, 0, "pread at %llu: %s", (unsigned long long)(off + done),
			     n ? strerror(errno) : "end of file");
		done += (uint64_t)n;
	}
	bad = pattern_check(buf, len, seed);
	free(buf);
	return bad;
}

/* Whether files in `dir` take O_DIRECT: an aligned 4 KiB write and read. */
static inline bool odirect_works(const char *dir)
{
	char path[128];
	void *buf;
	bool ok;
	int fd;

	snprintf(path, sizeof(path), "%s/.odirect-probe", dir);
	fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0)
		return false;
	if (posix_memalign(&buf, 4096, 4096)) {
		close(fd);
		return false;
	}
	memset(buf, 1, 4096);
	ok = pwrite(fd, buf, 4096, 0) == 4096 && pread(fd, buf, 4096, 0) == 4096;
	free(buf);
	close(fd);
	unlink(path);
	return ok;
}

/* A submitted descriptor's completion, waited for up to `ms`. */
static inline struct dp_cqe run_wait(struct dp_queue *q, const struct dp_desc *d, int ms)
{
	struct dp_cqe cqe;

	submit_all(q, d, 1);
	reap(q, &cqe, 1, ms);
	cr_assert_eq(cqe.user_data, d->user_data, "completion for %llu, want %llu",
		     (unsigned long long)cqe.user_data, (unsigned long long)d->user_data);
	return cqe;
}

static inline void expect_cqe(struct dp_cqe cqe, int status, uint64_t bytes, const char *what)
{
	cr_assert_eq(cqe.status, status, "%s: status %d (%s), want %d (%s)", what, cqe.status,
		     dp_strerror(cqe.status), status, dp_strerror(status));
	cr_assert_eq(cqe.bytes, bytes, "%s: %llu bytes, want %llu", what,
		     (unsigned long long)cqe.bytes, (unsigned long long)bytes);
	cr_assert(cqe.flags & DP_CQE_F_FILE, "%s: flags %#x lack DP_CQE_F_FILE", what, cqe.flags);
}

/* How the service moved a file region's bytes: from the line it logs when
 * the region closes. */
struct io_counts {
	unsigned long long direct, direct_bytes, buffered, buffered_bytes;
	unsigned long long fixed; /* slices through a fixed buffer */
};

/* Frees `region` and returns the counts of the first close line after the
 * `seen`-th one (callers count the regions they closed so far). */
static inline struct io_counts free_and_count(struct dp_client *c, int region, unsigned *seen)
{
	struct io_counts n = {0};
	uint64_t deadline;
	int rc = dp_free(c, region);

	cr_assert_eq(rc, 0, "dp_free: %s", dp_strerror(rc));
	/* The line is written before the reply to dp_free: no wait needed
	 * but for the file system. */
	deadline = now_ns() + 2000000000ull;
	for (;;) {
		FILE *f = fopen(svc.log, "r");
		char line[512];
		unsigned k = 0;
		bool found = false;

		cr_assert_not_null(f, "%s: %s", svc.log, strerror(errno));
		while (fgets(line, sizeof(line), f)) {
			const char *p = strstr(line, "file region closed: ");

			if (!p || k++ != *seen)
				continue;
			found = sscanf(p,
				       "file region closed: %llu direct I/Os (%llu bytes), %llu "
				       "buffered (%llu bytes), %llu through fixed buffers",
				       &n.direct, &n.direct_bytes, &n.buffered, &n.buffered_bytes,
				       &n.fixed) == 5;
			break;
		}
		fclose(f);
		if (found) {
			++*seen;
			return n;
		}
		cr_assert_lt(now_ns(), deadline, "no 'file region closed' line in the log");
		sleep_ms(10);
	}
}

#endif
