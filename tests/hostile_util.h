/* hostile_util.h - a well-behaved client in a thread, and probes of the service's health, for the hostile_* suites. */
#ifndef DP_TEST_HOSTILE_UTIL_H
#define DP_TEST_HOSTILE_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "service_util.h"

#define GOOD_LEN (64u * 1024)

/* A bystander: WRITEs a fresh pattern into its own export, READs it back,
 * checks both, over and over, until told to stop. */
struct bystander {
	pthread_t thread;
	atomic_int stop, ready;
	atomic_ulong ops; /* verified round trips */
	atomic_ulong errors;
	char what[160]; /* the first error */
};

static inline void bystander_fail(struct bystander *b, const char *what, int rc)
{
	if (atomic_fetch_add(&b->errors, 1) == 0)
		snprintf(b->what, sizeof(b->what), "%s: %d (%s)", what, rc, dp_strerror(rc));
}

/* One descriptor, its completion within 5 s; returns its status. */
static inline int bystander_one(struct dp_queue *q, struct dp_desc *d)
{
	struct dp_cqe cqe;
	int k;

	for (int tries = 0; (k = dp_submit(q, d, 1)) == 0 && tries < 100000; tries++)
		sched_yield();
	if (k != 1)
		return k < 0 ? k : -EAGAIN;
	k = dp_wait(q, &cqe, 1, 5000);
	if (k != 1)
		return k < 0 ? k : -ETIMEDOUT;
	if (cqe.user_data != d->user_data)
		return -EBADMSG;
	if (!cqe.status && cqe.bytes != d->len)
		return -EIO;
	return cqe.status;
}

static inline void *bystander_main(void *arg)
{
	struct bystander *b = arg;
	struct dp_client *c;
	struct dp_queue *q;
	uint8_t *src, *dst;
	int rs, rd, seg, rc;
	struct dp_desc d;

	if ((rc = dp_connect(svc.sock, "bystander", &c))) {
		bystander_fail(b, "connect", rc);
		atomic_store(&b->ready, 1);
		return NULL;
	}
	rs = dp_alloc(c, 2 * GOOD_LEN, 0, (void **)&src);
	rd = dp_alloc(c, GOOD_LEN, 0, (void **)&dst);
	rc = rs < 0 ? rs : rd < 0 ? rd : dp_segment_export(c, rd, "bystander", DP_ACCESS_RW);
	seg = rc ? rc : dp_segment_open(c, NULL, "bystander", DP_ACCESS_RW);
	rc = seg < 0 ? seg : dp_queue_create(c, 16, &q);
	if (rc < 0) {
		bystander_fail(b, "setup", rc);
		atomic_store(&b->ready, 1);
		dp_close(c);
		return NULL;
	}
	atomic_store(&b->ready, 1);
	for (uint64_t i = 1; !atomic_load(&b->stop); i++) {
		pattern_fill(src, GOOD_LEN, i);
		dp_prep_write(&d, rs, 0, seg, 0, GOOD_LEN, 2 * i);
		if ((rc = bystander_one(q, &d))) {
			bystander_fail(b, "WRITE", rc);
			break;
		}
		if (pattern_check(dst, GOOD_LEN, i) != -1) {
			bystander_fail(b, "WRITE moved the wrong bytes", 0);
			break;
		}
		dp_prep_read(&d, rs, GOOD_LEN, seg, 0, GOOD_LEN, 2 * i + 1);
		if ((rc = bystander_one(q, &d))) {
			bystander_fail(b, "READ", rc);
			break;
		}
		if (pattern_check(src + GOOD_LEN, GOOD_LEN, i) != -1) {
			bystander_fail(b, "READ moved the wrong bytes", 0);
			break;
		}
		atomic_fetch_add(&b->ops, 1);
	}
	dp_close(c);
	return NULL;
}

static inline void bystander_start(struct bystander *b)
{
	memset(b, 0, sizeof(*b));
	cr_assert_eq(pthread_create(&b->thread, NULL, bystander_main, b), 0);
	while (!atomic_load(&b->ready))
		sleep_ms(1);
	cr_assert_eq(atomic_load(&b->errors), 0, "bystander: %s", b->what);
}

/* Stops it; it must have kept moving verified bytes the whole time. */
static inline void bystander_finish(struct bystander *b)
{
	atomic_store(&b->stop, 1);
	pthread_join(b->thread, NULL);
	cr_assert_eq(atomic_load(&b->errors), 0, "bystander: %s", b->what);
	cr_assert_gt(atomic_load(&b->ops), 0, "the bystander made no progress");
}

/* The service lives, a new client moves bytes through it, and SIGTERM
 * still ends it with status 0. */
static inline void service_still_serves(void)
{
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_cqe cqe;
	struct dp_desc d;
	uint8_t *a, *b;
	int ra, rb, seg;

	cr_assert_eq(kill(svc.pid, 0), 0, "the service died");
	c = connect_client("fresh");
	q = make_queue(c, 8);
	ra = alloc_region(c, 4096, &a);
	rb = alloc_region(c, 4096, &b);
	seg = export_open(c, rb, "fresh", DP_ACCESS_RW, DP_ACCESS_RW);
	pattern_fill(a, 4096, 4242);
	dp_prep_write(&d, ra, 0, seg, 0, 4096, 77);
	cqe = run_one(q, &d);
	cr_assert_eq(cqe.status, 0, "fresh client: %s", dp_strerror(cqe.status));
	cr_assert_eq(pattern_check(b, 4096, 4242), -1);
	dp_close(c);
	stop_service();
}

/* Waits until the service has hung up on `c`: its control calls then fail
 * with -ECONNRESET (a probe that is harmless while it is connected). */
static inline void wait_disconnected(struct dp_client *c, int timeout_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int rc;

	while ((rc = dp_segment_close(c, 999)) != -ECONNRESET) {
		cr_assert_eq(rc, -EBADF, "probe: %s", dp_strerror(rc));
		cr_assert_lt(now_ns(), deadline, "still connected after %d ms", timeout_ms);
		sleep_ms(2);
	}
}

/* Waits until the service holds `want` fds (back to a baseline). */
static inline void wait_fds(int want, int timeout_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int n;

	while ((n = proc_fd_count(svc.pid)) != want) {
		cr_assert_lt(now_ns(), deadline, "service holds %d fds, baseline %d", n, want);
		sleep_ms(5);
	}
}

/* True when the service's log contains `s`. */
static inline bool log_has(const char *s)
{
	char line[512];
	bool found = false;
	FILE *f = fopen(svc.log, "r");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, s) != NULL;
	fclose(f);
	return found;
}

#endif
