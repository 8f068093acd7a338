/* SPDX-License-Identifier: MIT */
/* stats_errors.c - ring-stat against no service, a stale, foreign, other-ABI, truncated or inconsistent region: a clear message, its exit code, no crash. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dp_stats.h"
#include "helpers.h"

enum { EX_NOSERVICE = 3, EX_ABI = 4, EX_TRUNC = 5 };

static char name[64];

static void teardown(void)
{
	svc_kill(&svc);
	if (name[0])
		shm_unlink(name);
	name[0] = 0;
}

/* Writes a region file of size bytes whose start is hdr (len bytes). */
static void make_region(const void *hdr, size_t len, size_t size)
{
	int fd;

	snprintf(name, sizeof(name), "%s", test_region_name());
	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	cr_assert_geq(fd, 0, "shm_open: %s", strerror(errno));
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	if (len)
		cr_assert_eq(pwrite(fd, hdr, len < size ? len : size, 0),
			     (ssize_t)(len < size ? len : size));
	close(fd);
}

/* A header as a live service of this ABI would write it. */
static struct dp_stats_header good_header(uint32_t nqueues)
{
	struct dp_stats_header h = {
		.magic = DP_STATS_MAGIC,
		.abi_version = DP_STATS_ABI_VERSION,
		.header_size = sizeof(struct dp_stats_header),
		.queue_size = sizeof(struct dp_stats_queue),
		.poller_size = (uint32_t)((sizeof(struct dp_stats_poller) + 63) & ~(size_t)63),
		.rail_info_size =
			(uint32_t)((sizeof(struct dp_stats_rail_info) + 63) & ~(size_t)63),
		.rail_size = sizeof(struct dp_stats_rail),
		.nqueues = nqueues,
		.npollers = 1,
		.nrails = DP_STATS_MAX_RAILS,
		.hist_buckets = DP_STATS_HIST_BUCKETS,
		.hist_sub_bits = DP_STATS_HIST_SUB_BITS,
		.pid = getpid(),
		.state = DP_STATS_RUNNING,
	};
	size_t off = sizeof(h);

	h.pollers_off = off;
	off += h.poller_size;
	h.rail_info_off = off;
	off += (size_t)h.nrails * h.rail_info_size;
	h.rails_off = off;
	off += (size_t)h.nrails * h.rail_size;
	h.queues_off = off;
	off += (size_t)nqueues * h.queue_size;
	h.region_size = off;
	return h;
}

/* ring-stat --stats NAME [--json]: wants `code` and `words` on stderr, and
 * nothing that looks like a crash. */
static void expect(int code, const char *words)
{
	const char *args[] = {"--stats", name, NULL};
	const char *json[] = {"--stats", name, "--json", NULL};
	const char *const *variants[] = {args, json};

	for (int i = 0; i < 2; i++) {
		struct tool_run r = ring_stat(variants[i]);

		cr_assert_eq(r.status, code, "exit %d, want %d; stderr: %s", r.status, code, r.err);
		cr_assert_not_null(strstr(r.err, words), "stderr '%s' does not say '%s'", r.err,
				   words);
		cr_assert(strncmp(r.err, "ring-stat: ", 11) == 0, "message names the tool: %s",
			  r.err);
		cr_assert_eq(r.out[0], 0, "nothing on stdout: %s", r.out);
		tool_run_free(&r);
	}
}

Test(stats_errors, no_service, .fini = teardown, .timeout = 30)
{
	snprintf(name, sizeof(name), "%s", test_region_name());
	expect(EX_NOSERVICE, "no stats region");
}

Test(stats_errors, no_service_by_socket, .fini = teardown, .timeout = 30)
{
	const char *args[] = {"--socket", "/nonexistent/dataplane.sock", NULL};
	struct tool_run r = ring_stat(args);

	cr_assert_eq(r.status, EX_NOSERVICE, "exit %d: %s", r.status, r.err);
	cr_assert_not_null(strstr(r.err, "is dataplaned running?"), "%s", r.err);
	tool_run_free(&r);
}

Test(stats_errors, service_with_no_stats, .fini = teardown, .timeout = 60)
{
	const char *flags[] = {"--provider", "none", "--no-stats", NULL};
	const char *args[] = {"--socket", NULL, NULL};
	struct tool_run r;

	cr_assert_eq(svc_start(&svc, flags), 0);
	args[1] = svc.sock;
	r = ring_stat(args);
	cr_assert_eq(r.status, EX_NOSERVICE, "exit %d: %s", r.status, r.err);
	tool_run_free(&r);
	cr_assert_eq(svc_stop(&svc), 0);
}

Test(stats_errors, wrong_abi_version, .fini = teardown, .timeout = 30)
{
	struct dp_stats_header h = good_header(4);

	h.abi_version = 99;
	make_region(&h, sizeof(h), h.region_size);
	expect(EX_ABI, "ABI version 99");
}

Test(stats_errors, not_a_stats_region, .fini = teardown, .timeout = 30)
{
	char junk[4096];

	memset(junk, 0x5a, sizeof(junk));
	make_region(junk, sizeof(junk), sizeof(junk));
	expect(EX_ABI, "not a dataplane stats region");
}

Test(stats_errors, empty_file, .fini = teardown, .timeout = 30)
{
	make_region(NULL, 0, 0);
	expect(EX_TRUNC, "truncated");
}

Test(stats_errors, truncated_region, .fini = teardown, .timeout = 30)
{
	struct dp_stats_header h = good_header(64);

	/* The header is whole, the blocks it describes are not there. */
	make_region(&h, sizeof(h), sizeof(h) + 4096);
	expect(EX_TRUNC, "truncated");
}

Test(stats_errors, truncated_header, .fini = teardown, .timeout = 30)
{
	struct dp_stats_header h = good_header(4);

	make_region(&h, 64, 64);
	expect(EX_TRUNC, "truncated");
}

Test(stats_errors, inconsistent_offsets, .fini = teardown, .timeout = 30)
{
	struct dp_stats_header h = good_header(4);

	h.queues_off = h.region_size - 8; /* the queue blocks would run past the end */
	make_region(&h, sizeof(h), h.region_size);
	expect(EX_TRUNC, "inconsistent");
}

Test(stats_errors, stale_region, .fini = teardown, .timeout = 30)
{
	struct dp_stats_header h = good_header(4);
	pid_t dead = fork();
	int status;

	if (dead == 0)
		_exit(0);
	waitpid(dead, &status, 0);
	h.pid = dead;
	make_region(&h, sizeof(h), h.region_size);
	expect(EX_NOSERVICE, "not running");
}

Test(stats_errors, name_in_use_by_live_service, .fini = teardown, .timeout = 60)
{
	struct svc other;
	const char *flags[] = {"--provider", "none", "--stats", NULL, NULL};
	int rc;

	snprintf(name, sizeof(name), "%s", test_region_name());
	flags[3] = name;
	cr_assert_eq(svc_start(&svc, flags), 0);
	/* A second service must not take over the first one's region. */
	rc = svc_start(&other, flags);
	if (rc == 0)
		svc_kill(&other);
	cr_assert_eq(rc, -ECHILD, "the second service started (%d)", rc);
	{
		const char *args[] = {"--stats", name, "--json", NULL};
		struct jv *s = ring_stat_json(args);

		cr_assert_eq(json_u64(s, "service.pid"), (uint64_t)svc.pid);
		json_free(s);
	}
	cr_assert_eq(svc_stop(&svc), 0);
}

/* A region left by a killed service whose pid now belongs to another live
 * dataplaned (pid reuse) is stale: that service does not map it, so a new
 * service started with the name replaces it instead of refusing. */
Test(stats_errors, stale_region_pid_reused_by_another_service, .fini = teardown, .timeout = 60)
{
	struct dp_stats_header h = good_header(4);
	const char *flags[] = {"--provider", "none", "--stats", NULL, NULL};
	struct svc other;

	/* svc is a live dataplaned that knows nothing of the region. */
	cr_assert_eq(
		svc_start(&svc, (const char *const[]){"--provider", "none", "--no-stats", NULL}),
		0);
	h.pid = svc.pid;
	make_region(&h, sizeof(h), h.region_size);
	flags[3] = name;
	cr_assert_eq(svc_start(&other, flags), 0, "a stale region named a live service's pid");
	{
		const char *args[] = {"--stats", name, "--json", NULL};
		struct jv *s = ring_stat_json(args);

		cr_assert_eq(json_u64(s, "service.pid"), (uint64_t)other.pid);
		json_free(s);
	}
	cr_assert_eq(svc_stop(&other), 0);
	cr_assert_eq(svc_stop(&svc), 0);
}
