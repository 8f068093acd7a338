/* fabric_util.h - helpers shared by the fabric_* suites: real dataplaned processes that reach each other through libfabric, and transfers between them. */
#ifndef DP_TEST_FABRIC_UTIL_H
#define DP_TEST_FABRIC_UTIL_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dataplane.h"
#include "fixture.h"

#define MiB (1ull << 20)
#define FAB_NSVC 3

/*
 * The services of the running test. A test that fails half-way leaves them
 * to fab_teardown() (its .fini), so no dataplaned outlives the test.
 */
static struct svc fab_svc[FAB_NSVC];

static inline void fab_teardown(void)
{
	for (unsigned i = 0; i < FAB_NSVC; i++) {
		/* FAB_LOGS=1: the services' logs, for a test that failed. */
		if (fab_svc[i].pid > 0 && getenv("FAB_LOGS")) {
			char line[1024];
			FILE *f = fopen(fab_svc[i].log, "r");

			while (f && fgets(line, sizeof(line), f))
				fprintf(stderr, "  [service %u] %s", i, line);
			if (f)
				fclose(f);
		}
		svc_kill(&fab_svc[i]);
	}
}

static inline uint64_t fab_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void fab_sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

/* Starts a service (optionally under a command prefix) and fails the test
 * when it does not come up. */
static inline void fab_start_in(struct svc *s, const char *const *prefix, const char *const *args)
{
	int rc = svc_start_in(s, prefix, args);

	cr_assert_eq(rc, 0, "svc_start: %s", strerror(-rc));
}

static inline void fab_start(struct svc *s, const char *const *args)
{
	fab_start_in(s, NULL, args);
}

/* The TCP RPC port the service logged ("peer RPC on TCP port N; ..."). */
static inline int fab_rpc_port(const struct svc *s)
{
	char line[512];
	int port = -1;
	FILE *f;

	for (int tries = 0; tries < 200 && port < 0; tries++) {
		f = fopen(s->log, "r");
		cr_assert_not_null(f, "open %s", s->log);
		while (fgets(line, sizeof(line), f)) {
			const char *p = strstr(line, "peer RPC on TCP port ");

			if (p && sscanf(p, "peer RPC on TCP port %d", &port) == 1)
				break;
		}
		fclose(f);
		if (port < 0)
			fab_sleep_ms(10);
	}
	cr_assert_gt(port, 0, "no RPC port in %s", s->log);
	return port;
}

/* A TCP port nobody listens on now, for a service that must keep its port
 * across a restart. */
static inline int fab_free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

/* Does the service's log contain `what`? */
static inline bool fab_log_has(const struct svc *s, const char *what)
{
	return svc_log_has(s, what);
}

/* CPU time (user + system) the process has used, in clock ticks. */
static inline long fab_cpu_ticks(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	/* Fields after the command: state is 3rd; utime, stime are 14th, 15th. */
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (long)(ut + st);
}

/* Share of one CPU the process used over `ms`. */
static inline double fab_cpu_share(pid_t pid, unsigned ms)
{
	long t0 = fab_cpu_ticks(pid), t1;

	fab_sleep_ms(ms);
	t1 = fab_cpu_ticks(pid);
	return (double)(t1 - t0) / (double)sysconf(_SC_CLK_TCK) / (ms / 1000.0);
}

static inline struct dp_client *fab_connect(const struct svc *s, const char *name)
{
	struct dp_client *c = NULL;
	int rc = dp_connect(s->sock, name, &c);

	cr_assert_eq(rc, 0, "dp_connect(%s): %s", name, dp_strerror(rc));
	return c;
}

static inline struct dp_queue *fab_queue(struct dp_client *c, uint32_t depth)
{
	struct dp_queue *q = NULL;
	int rc = dp_queue_create(c, depth, &q);

	cr_assert_eq(rc, 0, "dp_queue_create(%u): %s", depth, dp_strerror(rc));
	return q;
}

static inline int fab_alloc(struct dp_client *c, size_t len, uint8_t **addr)
{
	int r = dp_alloc(c, len, 0, (void **)addr);

	cr_assert_geq(r, 0, "dp_alloc(%zu): %s", len, dp_strerror(r));
	return r;
}

static inline void fab_export(struct dp_client *c, int region, const char *name, unsigned access)
{
	int rc = dp_segment_export(c, region, name, access);

	cr_assert_eq(rc, 0, "dp_segment_export(%s): %s", name, dp_strerror(rc));
}

static inline int fab_open(struct dp_client *c, const char *peer, const char *name, unsigned access)
{
	int seg = dp_segment_open(c, peer, name, access);

	cr_assert_geq(seg, 0, "dp_segment_open(%s, %s): %s", peer ? peer : "(self)", name,
		      dp_strerror(seg));
	return seg;
}

/* Submits all n descriptors (the caller keeps within the queue's credit). */
static inline void fab_submit_all(struct dp_queue *q, const struct dp_desc *d, unsigned n)
{
	uint64_t deadline = fab_now_ns() + 10000000000ull;

	for (unsigned done = 0; done < n;) {
		int k = dp_submit(q, d + done, n - done);

		cr_assert_geq(k, 0, "dp_submit: %s", dp_strerror(k));
		done += (unsigned)k;
		if (!k) {
			cr_assert_lt(fab_now_ns(), deadline, "dp_submit accepted nothing for 10 s");
			sched_yield();
		}
	}
}

/* Reaps exactly n completions into out, in arrival order. */
static inline void fab_reap(struct dp_queue *q, struct dp_cqe *out, unsigned n, int timeout_ms)
{
	uint64_t deadline = fab_now_ns() + (uint64_t)timeout_ms * 1000000ull;

	for (unsigned got = 0; got < n;) {
		uint64_t t = fab_now_ns();
		int k;

		cr_assert_lt(t, deadline, "%u of %u completions after %d ms", got, n, timeout_ms);
		k = dp_wait(q, out + got, n - got, (int)((deadline - t) / 1000000ull) + 1);
		cr_assert_geq(k, 0, "dp_wait: %s", dp_strerror(k));
		got += (unsigned)k;
	}
}

/* One descriptor on an idle queue: it must succeed, move len bytes and
 * report the path `flag` (DP_CQE_F_FABRIC or DP_CQE_F_LOCAL). */
static inline void fab_run_ok(struct dp_queue *q, const struct dp_desc *d, uint32_t flag,
			      int timeout_ms)
{
	struct dp_cqe cqe;

	fab_submit_all(q, d, 1);
	fab_reap(q, &cqe, 1, timeout_ms);
	cr_assert_eq(cqe.user_data, d->user_data, "completion for %llu, want %llu",
		     (unsigned long long)cqe.user_data, (unsigned long long)d->user_data);
	cr_assert_eq(cqe.status, 0, "%s of %llu B: %s", d->opcode == DP_OP_WRITE ? "WRITE" : "READ",
		     (unsigned long long)d->len, dp_strerror(cqe.status));
	cr_assert_eq(cqe.bytes, d->len, "bytes %llu, want %llu", (unsigned long long)cqe.bytes,
		     (unsigned long long)d->len);
	cr_assert_eq(cqe.flags & (DP_CQE_F_FABRIC | DP_CQE_F_LOCAL), flag,
		     "completion flags 0x%x, want path 0x%x", cqe.flags, flag);
}

/* The pattern of `seed` must be at p[0..len), and the `guard` bytes just
 * outside it (where they exist) must be untouched. */
static inline void fab_check(const uint8_t *p, uint64_t len, uint64_t seed, const uint8_t *lo,
			     const uint8_t *hi, uint8_t guard, const char *what)
{
	int64_t bad = pattern_check(p, len, seed);

	cr_assert_eq(bad, -1, "%s of %llu B: first wrong byte at %lld", what,
		     (unsigned long long)len, (long long)bad);
	for (const uint8_t *g = p - 64; g < p; g++)
		if (g >= lo)
			cr_assert_eq(*g, guard, "%s: byte %lld before the range overwritten", what,
				     (long long)(g - p));
	for (const uint8_t *g = p + len; g < p + len + 64; g++)
		if (g < hi)
			cr_assert_eq(*g, guard, "%s: byte %lld after the range overwritten", what,
				     (long long)(g - p - len));
}

#endif
