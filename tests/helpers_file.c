/* SPDX-License-Identifier: MIT */
/*
 * helpers_file.c - the file suites: a scratch directory, files of
 * patterned bytes and their checks, whether O_DIRECT works there, and how
 * the service moved a file region's bytes (stats region and log).
 */
#include "dp_stats.h"
#include "helpers.h"

char fdir[64];

void file_dir_remove(void)
{
	if (fdir[0])
		remove_tree(fdir);
	fdir[0] = 0;
}

void file_teardown(void)
{
	svc_teardown();
	file_dir_remove();
}

const char *file_dir(void)
{
	snprintf(fdir, sizeof(fdir), "/var/tmp/dp-file-XXXXXX");
	cr_assert_not_null(mkdtemp(fdir), "mkdtemp: %s", strerror(errno));
	return fdir;
}

const char *fpath(const char *name)
{
	static char buf[4][256];
	static int next;
	char *p = buf[next++ & 3];

	snprintf(p, sizeof(buf[0]), "%s/%s", fdir, name);
	return p;
}

int file_make(const char *name, uint64_t len, uint64_t seed, int flags)
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

int64_t file_check(int fd, uint64_t off, uint64_t len, uint64_t seed)
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

bool odirect_works(const char *dir)
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

bool file_dir_direct(const char *unchecked)
{
	bool direct = odirect_works(file_dir());

	if (!direct && unchecked)
		cr_log_warn("%s does not take O_DIRECT: %s", fdir, unchecked);
	return direct;
}

void expect_cqe(struct dp_cqe cqe, int status, uint64_t bytes, const char *what)
{
	cr_assert_eq(cqe.status, status, "%s: status %d (%s), want %d (%s)", what, cqe.status,
		     dp_strerror(cqe.status), status, dp_strerror(status));
	cr_assert_eq(cqe.bytes, bytes, "%s: %llu bytes, want %llu", what,
		     (unsigned long long)cqe.bytes, (unsigned long long)bytes);
	cr_assert(cqe.flags & DP_CQE_F_FILE, "%s: flags %#x lack DP_CQE_F_FILE", what, cqe.flags);
}

/* The service's file totals: completions through the file path, then the
 * slice counts. In that order: the service publishes a poller's slices
 * before its completions, so a reader that sees a completion sees its
 * slices (dp_stats.h). */
static uint64_t file_totals(const struct dp_stats_header *h, struct io_counts *n)
{
	uint64_t ops = 0;

	for (unsigned i = 0; i < h->npollers; i++)
		ops += __atomic_load_n(&poller_block(h, i)->path_ops[DP_STATS_PATH_FILE],
				       __ATOMIC_ACQUIRE);
	memset(n, 0, sizeof(*n));
	for (unsigned i = 0; i < h->npollers; i++) {
		const struct dp_stats_poller *p = poller_block(h, i);

		n->direct += __atomic_load_n(&p->file_direct_ios, __ATOMIC_RELAXED);
		n->direct_bytes += __atomic_load_n(&p->file_direct_bytes, __ATOMIC_RELAXED);
		n->buffered += __atomic_load_n(&p->file_buffered_ios, __ATOMIC_RELAXED);
		n->buffered_bytes += __atomic_load_n(&p->file_buffered_bytes, __ATOMIC_RELAXED);
	}
	return ops;
}

/* Slices through fixed buffers of the `seen`-th closed file region, from
 * the line the service logs when one closes (before its reply to dp_free). */
static unsigned long long fixed_slices(unsigned seen)
{
	uint64_t deadline = now_ns() + 2000000000ull;

	for (;;) {
		FILE *f = fopen(svc.log, "r");
		unsigned long long fixed = 0;
		char line[512];
		unsigned k = 0;
		bool found = false;

		cr_assert_not_null(f, "%s: %s", svc.log, strerror(errno));
		while (fgets(line, sizeof(line), f)) {
			const char *p = strstr(line, "file region closed: ");
			struct io_counts n;

			if (!p || k++ != seen)
				continue;
			found = sscanf(p,
				       "file region closed: %llu direct I/Os (%llu bytes), %llu "
				       "buffered (%llu bytes), %llu through fixed buffers",
				       &n.direct, &n.direct_bytes, &n.buffered, &n.buffered_bytes,
				       &fixed) == 5;
			break;
		}
		fclose(f);
		if (found)
			return fixed;
		cr_assert_lt(now_ns(), deadline, "no 'file region closed' line in the log");
		sleep_ms(10);
	}
}

struct io_counts free_and_count(struct dp_client *c, int region, unsigned completions,
				struct io_tally *t)
{
	const struct dp_stats_header *h = stats_map(&svc);
	uint64_t deadline = now_ns() + 2000000000ull, ops;
	struct io_counts total, n;
	int rc = dp_free(c, region);

	cr_assert_eq(rc, 0, "dp_free: %s", dp_strerror(rc));
	/* The pollers publish their figures as they loop: wait until the
	 * region's completions show. */
	while ((ops = file_totals(h, &total)) < t->file_ops + completions) {
		cr_assert_lt(now_ns(), deadline,
			     "the stats region shows %llu file completions, want %llu",
			     (unsigned long long)(ops - t->file_ops),
			     (unsigned long long)completions);
		sleep_ms(1);
	}
	stats_unmap(h);
	n.direct = total.direct - t->total.direct;
	n.direct_bytes = total.direct_bytes - t->total.direct_bytes;
	n.buffered = total.buffered - t->total.buffered;
	n.buffered_bytes = total.buffered_bytes - t->total.buffered_bytes;
	n.fixed = fixed_slices(t->closed++);
	t->file_ops = ops;
	t->total = total;
	return n;
}
