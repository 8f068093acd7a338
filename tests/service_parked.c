/* SPDX-License-Identifier: MIT */
/* service_parked.c - idle queues are parked (S2: a thousand open idle queues must not slow the poller): a queue idle long enough leaves the polled list (parked_queues in the stats region counts it); a descriptor submitted on a parked queue completes (its client rings, the poller takes it back), every byte in place; destroying a parked queue, or closing its client, retires it; threads that submit with pauses around the parking time, on many queues at once, lose no descriptor and get each completion once. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dp_stats.h"
#include "helpers.h"

TestSuite(service_parked, .fini = svc_teardown, .timeout = 120);

#define NQ 64

struct gauge {
	uint64_t parked, retired;
};

static struct gauge read_gauge(void)
{
	const struct dp_stats_header *h = stats_map(&svc);
	struct gauge g = {0};

	for (unsigned i = 0; i < h->npollers; i++) {
		const struct dp_stats_poller *p = poller_block(h, i);

		g.parked += __atomic_load_n(&p->parked_queues, __ATOMIC_RELAXED);
		g.retired += __atomic_load_n(&p->retired_queues, __ATOMIC_RELAXED);
	}
	stats_unmap(h);
	return g;
}

/* The gauge once parked == want_parked (and retired >= want_retired), or
 * after 5 s. */
static struct gauge wait_gauge(uint64_t want_parked, uint64_t want_retired)
{
	uint64_t deadline = now_ns() + 5000000000ull;
	struct gauge g;

	while (g = read_gauge(),
	       (g.parked != want_parked || g.retired < want_retired) && now_ns() < deadline)
		sleep_ms(5);
	return g;
}

Test(service_parked, idle_queues_park_and_wake_on_submit)
{
	const char *args[] = {"--provider", "none", NULL};
	struct dp_queue *q[NQ];
	struct dp_client *c;
	struct gauge g;
	uint8_t *src, *dst;
	int rs, rd, seg;

	start_svc(&svc, args);
	c = connect_client(&svc, "parked");
	rs = alloc_region(c, NQ * 4096, &src);
	rd = alloc_region(c, NQ * 4096, &dst);
	seg = export_open(c, rd, "parked-dst", DP_ACCESS_RW, DP_ACCESS_RW);
	for (unsigned i = 0; i < NQ; i++)
		q[i] = make_queue(c, 8);
	g = wait_gauge(NQ, 0);
	cr_assert_eq(g.parked, NQ, "%llu of %d idle queues parked", (unsigned long long)g.parked,
		     NQ);
	/* Each parked queue in turn: its WRITE completes, its bytes land. */
	pattern_fill(src, NQ * 4096, 9);
	for (unsigned i = 0; i < NQ; i++) {
		struct dp_cqe cqe = run1(q[i], true, rs, i * 4096, seg, i * 4096, 4096, i, 5000);

		cr_assert_eq(cqe.status, 0, "queue %u: %s", i, dp_strerror(cqe.status));
		cr_assert_eq(cqe.user_data, i);
		cr_assert_eq(cqe.bytes, 4096);
	}
	cr_assert_eq(pattern_check(dst, NQ * 4096, 9), -1);
	/* Idle again: parked again. */
	g = wait_gauge(NQ, 0);
	cr_assert_eq(g.parked, NQ);
	dp_close(c);
}

Test(service_parked, parked_queues_retire)
{
	const char *args[] = {"--provider", "none", NULL};
	struct dp_queue *q[NQ];
	struct dp_client *c;
	struct gauge g;

	start_svc(&svc, args);
	c = connect_client(&svc, "retire");
	for (unsigned i = 0; i < NQ; i++)
		q[i] = make_queue(c, 8);
	g = wait_gauge(NQ, 0);
	cr_assert_eq(g.parked, NQ);
	for (unsigned i = 0; i < NQ / 2; i++)
		cr_assert_eq(dp_queue_destroy(q[i]), 0);
	g = wait_gauge(NQ / 2, NQ / 2);
	cr_assert_eq(g.retired, NQ / 2, "%llu parked queues retired, want %d",
		     (unsigned long long)g.retired, NQ / 2);
	cr_assert_eq(g.parked, NQ / 2);
	dp_close(c);
	g = wait_gauge(0, NQ);
	cr_assert_eq(g.retired, NQ, "the client left: %llu of its %d queues retired",
		     (unsigned long long)g.retired, NQ);
	cr_assert_eq(g.parked, 0);
}

/* Submitters that pause around the parking time (a few hundred loops to a
 * few milliseconds), on many queues of two pollers at once. */
struct sub {
	pthread_t t;
	struct dp_client *c;
	int rs, seg;
	unsigned id, n, done;
	char what[160];
};

static void *sub_main(void *arg)
{
	struct sub *s = arg;
	uint64_t rnd = s->id * 7919 + 1;
	struct dp_queue *q[4];

	for (unsigned i = 0; i < 4; i++)
		if (dp_queue_create(s->c, 8, &q[i])) {
			snprintf(s->what, sizeof(s->what), "queue_create failed");
			return NULL;
		}
	for (unsigned k = 0; k < s->n && !s->what[0]; k++) {
		struct dp_queue *qq = q[xorshift64(&rnd) % 4];
		uint64_t off = (uint64_t)s->id * 4096;
		struct dp_desc d;
		struct dp_cqe cqe;
		int rc;

		dp_prep_write(&d, s->rs, off, s->seg, off, 512, k);
		rc = dp_submit(qq, &d, 1);
		if (rc == 1)
			rc = dp_wait(qq, &cqe, 1, 3000);
		if (rc != 1 || cqe.status || cqe.user_data != k)
			snprintf(s->what, sizeof(s->what),
				 "submitter %u, descriptor %u: %s (rc %d, status %d)", s->id, k,
				 rc == 0 ? "no completion in 3 s" : "wrong completion", rc,
				 rc == 1 ? cqe.status : 0);
		else
			s->done++;
		usleep((useconds_t)(xorshift64(&rnd) % 3000));
		if (rc == 1 && dp_poll(qq, &cqe, 1) != 0)
			snprintf(s->what, sizeof(s->what), "submitter %u: a second completion",
				 s->id);
	}
	return NULL;
}

Test(service_parked, sporadic_submitters_lose_nothing)
{
	const char *args[] = {"--provider", "none", "--pollers", "2", NULL};
	struct sub s[8];
	struct dp_client *c;
	uint8_t *src, *dst;
	int rd;

	start_svc(&svc, args);
	c = connect_client(&svc, "sporadic");
	s[0].rs = alloc_region(c, 8 * 4096, &src);
	rd = alloc_region(c, 8 * 4096, &dst);
	s[0].seg = export_open(c, rd, "sporadic-dst", DP_ACCESS_RW, DP_ACCESS_RW);
	for (unsigned i = 0; i < 8; i++) {
		s[i] = (struct sub){.c = c, .rs = s[0].rs, .seg = s[0].seg, .id = i, .n = 150};
		cr_assert_eq(pthread_create(&s[i].t, NULL, sub_main, &s[i]), 0);
	}
	for (unsigned i = 0; i < 8; i++) {
		pthread_join(s[i].t, NULL);
		cr_assert_eq(s[i].what[0], 0, "%s", s[i].what);
		cr_assert_eq(s[i].done, s[i].n);
	}
	dp_close(c);
}
