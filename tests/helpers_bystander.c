/* SPDX-License-Identifier: MIT */
/*
 * helpers_bystander.c - the service's health while a test does something
 * hostile to it: a bystander moving verified bytes in a thread, a
 * bystander timing control calls, and the checks that the service still
 * serves, has hung up on a client, is back to its fds.
 */
#include "helpers.h"

static void bystander_fail(struct bystander *b, const char *what, int rc)
{
	if (atomic_fetch_add(&b->errors, 1) == 0)
		snprintf(b->what, sizeof(b->what), "%s: %d (%s)", what, rc, dp_strerror(rc));
}

/* One descriptor, its completion within 5 s; returns its status. */
static int bystander_one(struct dp_queue *q, struct dp_desc *d)
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

/* The bystander's own client, as a probe's but for its source region of
 * 2 * GOOD_LEN (what it writes, then what it reads back) and a queue of
 * 16: 0, or the error of the call that failed (told in b). No Criterion
 * in a thread, so no probe_start. */
static int bystander_setup(struct bystander *b, struct probe *k)
{
	int rd, rc = dp_connect(svc.sock, "bystander", &k->c);

	if (rc) {
		bystander_fail(b, "connect", rc);
		return rc;
	}
	k->rs = dp_alloc(k->c, 2 * GOOD_LEN, 0, (void **)&k->src);
	rd = dp_alloc(k->c, GOOD_LEN, 0, (void **)&k->dst);
	rc = k->rs < 0 ? k->rs : rd;
	if (rc >= 0)
		rc = dp_segment_export(k->c, rd, "bystander", DP_ACCESS_RW);
	if (rc >= 0)
		rc = k->seg = dp_segment_open(k->c, NULL, "bystander", DP_ACCESS_RW);
	if (rc >= 0)
		rc = dp_queue_create(k->c, 16, &k->q);
	if (rc < 0) {
		bystander_fail(b, "setup", rc);
		dp_close(k->c);
		return rc;
	}
	return 0;
}

/* Round i: pattern i WRITTEN into the export and READ back, each checked;
 * false once one fails (told in b). */
static bool bystander_round(struct bystander *b, const struct probe *k, uint64_t i)
{
	struct dp_desc d;
	int rc;

	pattern_fill(k->src, GOOD_LEN, i);
	dp_prep_write(&d, k->rs, 0, k->seg, 0, GOOD_LEN, 2 * i);
	if ((rc = bystander_one(k->q, &d))) {
		bystander_fail(b, "WRITE", rc);
		return false;
	}
	if (pattern_check(k->dst, GOOD_LEN, i) != -1) {
		bystander_fail(b, "WRITE moved the wrong bytes", 0);
		return false;
	}
	dp_prep_read(&d, k->rs, GOOD_LEN, k->seg, 0, GOOD_LEN, 2 * i + 1);
	if ((rc = bystander_one(k->q, &d))) {
		bystander_fail(b, "READ", rc);
		return false;
	}
	if (pattern_check(k->src + GOOD_LEN, GOOD_LEN, i) != -1) {
		bystander_fail(b, "READ moved the wrong bytes", 0);
		return false;
	}
	return true;
}

static void *bystander_main(void *arg)
{
	struct bystander *b = arg;
	struct probe k;
	int rc = bystander_setup(b, &k);

	atomic_store(&b->ready, 1);
	if (rc)
		return NULL;
	for (uint64_t i = 1; !atomic_load(&b->stop) && bystander_round(b, &k, i); i++)
		atomic_fetch_add(&b->ops, 1);
	dp_close(k.c);
	return NULL;
}

void bystander_start(struct bystander *b)
{
	memset(b, 0, sizeof(*b));
	cr_assert_eq(pthread_create(&b->thread, NULL, bystander_main, b), 0);
	while (!atomic_load(&b->ready))
		sleep_ms(1);
	cr_assert_eq(atomic_load(&b->errors), 0, "bystander: %s", b->what);
}

void bystander_finish(struct bystander *b)
{
	atomic_store(&b->stop, 1);
	pthread_join(b->thread, NULL);
	cr_assert_eq(atomic_load(&b->errors), 0, "bystander: %s", b->what);
	cr_assert_gt(atomic_load(&b->ops), 0, "the bystander made no progress");
}

#define CTL_BYSTANDER_MAX 20000

static void ctl_bystander_time(struct ctl_bystander *b, uint64_t t0, int rc, const char *what)
{
	if (rc < 0 && !b->what[0])
		snprintf(b->what, sizeof(b->what), "%s: %s", what, dp_strerror(rc));
	if (b->n < CTL_BYSTANDER_MAX)
		b->ms[b->n++] = (double)(now_ns() - t0) / 1e6;
}

static void *ctl_bystander_main(void *arg)
{
	struct ctl_bystander *b = arg;
	struct dp_client *c = NULL;
	int rc = dp_connect(b->s->sock, "ctl-bystander", &c);

	if (rc) {
		snprintf(b->what, sizeof(b->what), "dp_connect: %s", dp_strerror(rc));
		return NULL;
	}
	for (unsigned i = 0; !atomic_load(&b->stop) && !b->what[0]; i++) {
		struct dp_client *c2;
		uint64_t t0 = now_ns();
		void *mem;

		rc = dp_alloc(c, 64 * 1024, 0, &mem);
		ctl_bystander_time(b, t0, rc, "dp_alloc");
		if (rc >= 0) {
			t0 = now_ns();
			rc = dp_free(c, rc);
			ctl_bystander_time(b, t0, rc, "dp_free");
		}
		t0 = now_ns();
		rc = b->name[0] ? dp_segment_open(c, b->peer[0] ? b->peer : NULL, b->name,
						  DP_ACCESS_READ)
				: -1;
		if (b->name[0])
			ctl_bystander_time(b, t0, rc, "dp_segment_open");
		if (rc >= 0) {
			t0 = now_ns();
			rc = dp_segment_close(c, rc);
			ctl_bystander_time(b, t0, rc, "dp_segment_close");
		}
		if (i % 10 == 0) {
			t0 = now_ns();
			rc = dp_connect(b->s->sock, "ctl-bystander-2", &c2);
			ctl_bystander_time(b, t0, rc, "dp_connect");
			if (!rc)
				dp_close(c2);
		}
		sleep_ms(2);
	}
	dp_close(c);
	return NULL;
}

void ctl_bystander_start(struct ctl_bystander *b, const struct svc *s, const char *peer,
			 const char *name)
{
	memset(b, 0, sizeof(*b));
	b->s = s;
	snprintf(b->name, sizeof(b->name), "%s", name ? name : "");
	snprintf(b->peer, sizeof(b->peer), "%s", peer ? peer : "");
	b->ms = calloc(CTL_BYSTANDER_MAX, sizeof(*b->ms));
	cr_assert_not_null(b->ms);
	cr_assert_eq(pthread_create(&b->thread, NULL, ctl_bystander_main, b), 0);
}

static int cmp_ms(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

void ctl_bystander_stop(struct ctl_bystander *b)
{
	atomic_store(&b->stop, 1);
	pthread_join(b->thread, NULL);
	cr_assert_eq(b->what[0], 0, "bystander: %s", b->what);
	cr_assert_gt(b->n, 0, "the bystander made no call");
	qsort(b->ms, b->n, sizeof(*b->ms), cmp_ms);
}

double ctl_bystander_q(const struct ctl_bystander *b, double q)
{
	unsigned i = (unsigned)(q * (b->n - 1) + 0.5);

	return b->ms[i < b->n ? i : b->n - 1];
}

void ctl_bystander_free(struct ctl_bystander *b)
{
	free(b->ms);
	b->ms = NULL;
}

void service_still_serves(void)
{
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_cqe cqe;
	struct dp_desc d;
	uint8_t *a, *b;
	int ra, rb, seg;

	cr_assert_eq(kill(svc.pid, 0), 0, "the service died");
	c = connect_client(&svc, "fresh");
	q = make_queue(c, 8);
	ra = alloc_region(c, 4096, &a);
	rb = alloc_region(c, 4096, &b);
	seg = export_open(c, rb, "fresh", DP_ACCESS_RW, DP_ACCESS_RW);
	pattern_fill(a, 4096, 4242);
	dp_prep_write(&d, ra, 0, seg, 0, 4096, 77);
	cqe = run_wait(q, &d, 5000);
	cr_assert_eq(cqe.status, 0, "fresh client: %s", dp_strerror(cqe.status));
	cr_assert_eq(pattern_check(b, 4096, 4242), -1);
	dp_close(c);
	stop_svc(&svc);
}

void wait_disconnected(struct dp_client *c, int timeout_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int rc;

	while ((rc = dp_segment_close(c, 999)) != -ECONNRESET) {
		cr_assert_eq(rc, -EBADF, "probe: %s", dp_strerror(rc));
		cr_assert_lt(now_ns(), deadline, "still connected after %d ms", timeout_ms);
		sleep_ms(2);
	}
}

void wait_fds(int want, int timeout_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int n;

	while ((n = proc_fd_count(svc.pid)) != want) {
		cr_assert_lt(now_ns(), deadline, "service holds %d fds, baseline %d", n, want);
		sleep_ms(5);
	}
}
