/* service_util.h - helpers shared by the service_* integration suites. */
#ifndef DP_TEST_SERVICE_UTIL_H
#define DP_TEST_SERVICE_UTIL_H

#include <criterion/criterion.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dataplane.h"
#include "fixture.h"

/*
 * The service and the helper process of the running test. A test that fails
 * half-way leaves them to svc_teardown() (its .fini), so that no dataplaned
 * or child outlives the test process.
 */
static struct svc svc;
static pid_t child_pid;

static inline void svc_teardown(void)
{
	int status;

	if (child_pid > 0) {
		kill(child_pid, SIGKILL);
		waitpid(child_pid, &status, 0);
		child_pid = 0;
	}
	svc_kill(&svc);
}

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

/* Flags for suites that exercise the local path only: without a fabric
 * provider the service starts in a fraction of the time. */
static const char *const local_only[] __attribute__((unused)) = {"--provider", "none", NULL};

static inline void start_service(const char *const *extra)
{
	int rc = svc_start(&svc, extra);

	cr_assert_eq(rc, 0, "svc_start: %s", strerror(-rc));
}

/* SIGTERM, and the service must exit 0 (its log is printed otherwise). */
static inline void stop_service(void)
{
	int rc = svc_stop(&svc);

	cr_assert_eq(rc, 0, "dataplaned exit status %d, want 0", rc);
}

static inline struct dp_client *connect_client(const char *name)
{
	struct dp_client *c = NULL;
	int rc = dp_connect(svc.sock, name, &c);

	cr_assert_eq(rc, 0, "dp_connect(%s): %s", name, dp_strerror(rc));
	return c;
}

static inline struct dp_queue *make_queue(struct dp_client *c, uint32_t depth)
{
	struct dp_queue *q = NULL;
	int rc = dp_queue_create(c, depth, &q);

	cr_assert_eq(rc, 0, "dp_queue_create(%u): %s", depth, dp_strerror(rc));
	return q;
}

static inline int alloc_region(struct dp_client *c, size_t len, void *addr)
{
	int r = dp_alloc(c, len, 0, (void **)addr);

	cr_assert_geq(r, 0, "dp_alloc(%zu): %s", len, dp_strerror(r));
	return r;
}

/* Exports `region` as `name` with `access` and opens it with `open_access`. */
static inline int export_open(struct dp_client *c, int region, const char *name, unsigned access,
			      unsigned open_access)
{
	int rc = dp_segment_export(c, region, name, access), seg;

	cr_assert_eq(rc, 0, "dp_segment_export(%s): %s", name, dp_strerror(rc));
	seg = dp_segment_open(c, NULL, name, open_access);
	cr_assert_geq(seg, 0, "dp_segment_open(%s): %s", name, dp_strerror(seg));
	return seg;
}

/* Submits all `n` descriptors (the caller guarantees the credit), retrying
 * while the ring is short. */
static inline void submit_all(struct dp_queue *q, const struct dp_desc *d, unsigned n)
{
	uint64_t deadline = now_ns() + 5000000000ull;

	for (unsigned done = 0; done < n;) {
		int k = dp_submit(q, d + done, n - done);

		cr_assert_geq(k, 0, "dp_submit: %s", dp_strerror(k));
		done += (unsigned)k;
		if (!k) {
			cr_assert_lt(now_ns(), deadline, "dp_submit accepted nothing for 5 s");
			sched_yield();
		}
	}
}

/* Reaps exactly `n` completions into `out`, in arrival order. */
static inline void reap(struct dp_queue *q, struct dp_cqe *out, unsigned n, int timeout_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull;

	for (unsigned got = 0; got < n;) {
		uint64_t t = now_ns();
		int k;

		cr_assert_lt(t, deadline, "%u of %u completions after %d ms", got, n, timeout_ms);
		k = dp_wait(q, out + got, n - got, (int)((deadline - t) / 1000000ull) + 1);
		cr_assert_geq(k, 0, "dp_wait: %s", dp_strerror(k));
		got += (unsigned)k;
	}
}

/* One descriptor on an otherwise idle queue; returns its completion. */
static inline struct dp_cqe run_one(struct dp_queue *q, const struct dp_desc *d)
{
	struct dp_cqe cqe;

	submit_all(q, d, 1);
	reap(q, &cqe, 1, 5000);
	cr_assert_eq(cqe.user_data, d->user_data, "completion for user_data %llu, want %llu",
		     (unsigned long long)cqe.user_data, (unsigned long long)d->user_data);
	return cqe;
}

/* Child processes report through their exit status: 0, or the failed step. */
static inline int wait_child(pid_t pid)
{
	int status;

	cr_assert_eq(waitpid(pid, &status, 0), pid);
	if (pid == child_pid)
		child_pid = 0;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#endif
