/* directory_outage.c - Redis goes away: transfers on open segments go on, exports and lookups by name fail at once with EHOSTUNREACH/ETIMEDOUT, and when Redis is back (a restart with nothing persisted) the services reconnect, republish their records and resolve names again; a service whose Redis is down at start-up comes up and catches up; a hung Redis (SIGSTOP) costs a 500 ms timeout, not a hang. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "helpers.h"

TestSuite(directory_outage, .fini = dir_teardown, .timeout = 90);

#define CHUNK (64 * 1024)

/* A load thread on B: WRITE a pattern into A's segment and READ it back,
 * again and again, counting what went right and what did not. */
struct load {
	struct dp_client *c;
	int seg;
	atomic_int stop;
	atomic_long ok, bad;
	int first_bad; /* status of the first failure, or 0 */
	pthread_t thread;
};

static int load_one(struct dp_queue *q, const struct dp_desc *d)
{
	struct dp_cqe cqe;
	int k;

	while ((k = dp_submit(q, d, 1)) == 0)
		;
	if (k < 0)
		return k;
	k = dp_wait(q, &cqe, 1, 10000);
	if (k <= 0)
		return k ? k : -ETIMEDOUT;
	return cqe.status ? cqe.status : cqe.bytes == d->len ? 0 : -EIO;
}

static void *load_run(void *arg)
{
	struct load *l = arg;
	struct dp_queue *q = NULL;
	uint8_t *buf;
	int reg = dp_alloc(l->c, 2 * CHUNK, 0, (void **)&buf);

	if (reg < 0 || dp_queue_create(l->c, 4, &q)) {
		l->first_bad = reg < 0 ? reg : -ENOMEM;
		atomic_fetch_add(&l->bad, 1);
		return NULL;
	}
	for (uint64_t i = 0; !atomic_load(&l->stop); i++) {
		struct dp_desc d;
		int st;

		pattern_fill(buf, CHUNK, i);
		memset(buf + CHUNK, 0, CHUNK);
		dp_prep_write(&d, reg, 0, l->seg, (i % 8) * CHUNK, CHUNK, i);
		st = load_one(q, &d);
		if (!st) {
			dp_prep_read(&d, reg, CHUNK, l->seg, (i % 8) * CHUNK, CHUNK, i);
			st = load_one(q, &d);
		}
		if (!st && pattern_check(buf + CHUNK, CHUNK, i) != -1)
			st = -EILSEQ;
		if (st) {
			if (!l->first_bad)
				l->first_bad = st;
			atomic_fetch_add(&l->bad, 1);
		} else {
			atomic_fetch_add(&l->ok, 1);
		}
	}
	dp_queue_destroy(q);
	return NULL;
}

/* A call that must fail with the directory down, and quickly. */
static void assert_prompt_failure(int rc, uint64_t t0, const char *what)
{
	uint64_t ms = dir_ms_since(t0);

	cr_assert(rc == -EHOSTUNREACH || rc == -ETIMEDOUT, "%s during the outage: %s", what,
		  dp_strerror(rc));
	cr_assert_lt(ms, 1000, "%s took %llu ms to fail", what, (unsigned long long)ms);
}

Test(directory_outage, redis_restart_under_load)
{
	struct dp_client *ca, *cb;
	struct load l = {0};
	uint8_t *ma, *mb;
	int ra, rb, rc, seg;
	long ok0, ok1;
	uint64_t t0;

	dir_redis_start(&dir_redis, 0, NULL);
	dir_svc_start(0, dir_redis.url, 2, NULL);
	dir_svc_start(1, dir_redis.url, 2, NULL);
	ca = connect_client(&fab_svc[0], "owner");
	cb = connect_client(&fab_svc[1], "opener");
	ra = alloc_region(ca, 8 * CHUNK, &ma);
	export_segment(ca, ra, "hot", DP_ACCESS_RW);
	rb = alloc_region(cb, MiB, &mb);
	l.c = connect_client(&fab_svc[1], "load");
	l.seg = open_segment(l.c, NULL, "hot", DP_ACCESS_RW);
	cr_assert_eq(pthread_create(&l.thread, NULL, load_run, &l), 0);
	sleep_ms(300);
	cr_assert_gt(atomic_load(&l.ok), 0, "no transfer before the outage");

	/* Redis dies. */
	dir_redis_kill(&dir_redis);
	ok0 = atomic_load(&l.ok);
	sleep_ms(100);
	t0 = now_ns();
	rc = dp_segment_open(cb, NULL, "not-cached", DP_ACCESS_READ);
	assert_prompt_failure(rc, t0, "a lookup");
	t0 = now_ns();
	rc = dp_segment_export(ca, ra, "new-name", DP_ACCESS_READ);
	assert_prompt_failure(rc, t0, "an export");
	cr_assert_eq(dp_segment_open(ca, NULL, "new-name", DP_ACCESS_READ), -EHOSTUNREACH,
		     "the failed export was left behind");
	sleep_ms(1500);
	ok1 = atomic_load(&l.ok);
	cr_assert_gt(ok1, ok0 + 10, "transfers stalled with Redis down (%ld -> %ld)", ok0, ok1);
	cr_assert(svc_log_has(&fab_svc[1], "exports and lookups by name fail until it is back"));

	/* Redis is back, empty: the owner republishes on its own. */
	dir_redis_start(&dir_redis, dir_redis.port, NULL);
	t0 = now_ns();
	while (dir_int(&dir_redis, "EXISTS %s", DIR_KEY("hot")) != 1) {
		cr_assert_lt(dir_ms_since(t0), 10000, "record not republished 10 s after restart");
		sleep_ms(50);
	}
	/* Both services reconnected: a new export, and lookups on B, work. */
	for (;;) {
		rc = dp_segment_export(ca, ra, "new-name", DP_ACCESS_READ);
		if (!rc)
			break;
		cr_assert_lt(dir_ms_since(t0), 10000, "export still failing after restart: %s",
			     dp_strerror(rc));
		sleep_ms(50);
	}
	for (;;) {
		seg = dp_segment_open(cb, NULL, "new-name", DP_ACCESS_READ);
		if (seg >= 0)
			break;
		cr_assert_lt(dir_ms_since(t0), 10000, "lookup still failing after restart: %s",
			     dp_strerror(seg));
		sleep_ms(50);
	}
	{
		struct dp_queue *q = make_queue(cb, 4);
		struct dp_desc d;

		atomic_store(&l.stop, 1); /* the load writes into ma too */
		pthread_join(l.thread, NULL);
		pattern_fill(ma, CHUNK, 99);
		dp_prep_read(&d, rb, 0, seg, 0, CHUNK, 1);
		run_ok(q, &d, DP_CQE_F_FABRIC, 15000);
		cr_assert_eq(pattern_check(mb, CHUNK, 99), -1, "READ after the restart");
	}
	cr_assert_eq(atomic_load(&l.bad), 0, "%ld transfer(s) failed, first: %s",
		     atomic_load(&l.bad), dp_strerror(l.first_bad));
	cr_assert_gt(atomic_load(&l.ok), ok1, "no transfer after the restart");
	cr_assert(svc_log_has(&fab_svc[0], "record(s) published"));

	dp_close(l.c);
	dp_close(cb);
	dp_close(ca);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
	cr_assert_eq(svc_stop(&fab_svc[1]), 0);
}

/* No Redis at start-up: the service starts anyway, exports fail at once,
 * and once Redis answers it connects by itself. */
Test(directory_outage, redis_down_at_start)
{
	struct dp_client *c;
	uint8_t *m;
	int reg, rc, port = fab_free_port();
	uint64_t t0;
	char url[64];

	if (!dir_have_redis())
		cr_skip_test("redis-server is not installed (make deps)");
	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
	dir_svc_start(0, url, 2, NULL);
	c = connect_client(&fab_svc[0], "a");
	reg = alloc_region(c, MiB, &m);
	t0 = now_ns();
	rc = dp_segment_export(c, reg, "early", DP_ACCESS_READ);
	assert_prompt_failure(rc, t0, "an export");

	dir_redis_start(&dir_redis, port, NULL);
	t0 = now_ns();
	while ((rc = dp_segment_export(c, reg, "early", DP_ACCESS_READ))) {
		cr_assert_lt(dir_ms_since(t0), 10000,
			     "export still failing 10 s after Redis came: %s", dp_strerror(rc));
		sleep_ms(50);
	}
	cr_assert_eq(dir_int(&dir_redis, "EXISTS %s", DIR_KEY("early")), 1);
	dp_close(c);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
}

/* A Redis that hangs (SIGSTOP: connections stay open, nothing answers):
 * the command timeout turns it into a clean failure within about 500 ms,
 * transfers go on, and the service recovers when it answers again. */
Test(directory_outage, hung_redis_times_out)
{
	struct seg_pair sp; /* the opener on B, the owner on A */
	struct dp_desc d;
	int rc;
	uint64_t t0, ms;

	dir_redis_start(&dir_redis, 0, NULL);
	dir_svc_start(0, dir_redis.url, 5, NULL);
	dir_svc_start(1, dir_redis.url, 5, NULL);
	seg_pair_open(&sp, &fab_svc[1], &fab_svc[0], NULL, "stuck", MiB, 4);

	kill(dir_redis.pid, SIGSTOP);
	t0 = now_ns();
	rc = dp_segment_export(sp.ct, sp.treg, "stuck-2", DP_ACCESS_READ);
	ms = dir_ms_since(t0);
	cr_assert(rc == -ETIMEDOUT || rc == -EHOSTUNREACH, "export: %s", dp_strerror(rc));
	cr_assert_lt(ms, 2000, "export took %llu ms to fail", (unsigned long long)ms);
	t0 = now_ns();
	rc = dp_segment_open(sp.ci, NULL, "not-cached", DP_ACCESS_READ);
	ms = dir_ms_since(t0);
	cr_assert(rc == -ETIMEDOUT || rc == -EHOSTUNREACH, "lookup: %s", dp_strerror(rc));
	cr_assert_lt(ms, 2000, "lookup took %llu ms to fail", (unsigned long long)ms);
	pattern_fill(sp.loc, MiB, 5);
	dp_prep_write(&d, sp.lreg, 0, sp.seg, 0, MiB, 1);
	run_ok(sp.q, &d, DP_CQE_F_FABRIC, 15000);
	cr_assert_eq(pattern_check(sp.tgt, MiB, 5), -1, "transfer while Redis hangs");
	cr_assert(svc_log_has(&fab_svc[0], "timed out"), "A did not log the timeout");

	kill(dir_redis.pid, SIGCONT);
	t0 = now_ns();
	while ((rc = dp_segment_export(sp.ct, sp.treg, "stuck-2", DP_ACCESS_READ))) {
		cr_assert_lt(dir_ms_since(t0), 10000, "export failing 10 s after SIGCONT: %s",
			     dp_strerror(rc));
		sleep_ms(50);
	}
	while ((sp.seg = dp_segment_open(sp.ci, NULL, "stuck-2", DP_ACCESS_READ)) < 0) {
		cr_assert_lt(dir_ms_since(t0), 10000, "lookup failing 10 s after SIGCONT: %s",
			     dp_strerror(sp.seg));
		sleep_ms(50);
	}
	dp_close(sp.ci);
	dp_close(sp.ct);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
	cr_assert_eq(svc_stop(&fab_svc[1]), 0);
}
