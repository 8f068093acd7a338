/* SPDX-License-Identifier: MIT */
/*
 * dp-bench-bandwidth.c - large local WRITEs against one thread's memcpy
 * (docs/benchmarks.md, "Targets" and "Scaling"):
 *   bandwidth  P5: 1 MiB .. --max-size WRITEs on one poller, vs memcpy of
 *              the same sizes once the service has gone
 *   stripe     P5 beyond one thread (S4, S5): a 1 GiB WRITE on services of
 *              our own with N pollers, shared out in stripes with the
 *              pollers that have nothing of their own (dataplaned
 *              --stripe-min), vs one thread's memcpy run after every
 *              service has gone; then, on the largest N, 64 B WRITEs on
 *              another poller's queue while 1 GiB WRITEs run back to back,
 *              against the same without them
 * The memcpy's buffers are backed as ours are (peer_buf).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dp-bench.h"

enum { REPS = 5, SIZES = 16 };

/* Memory for the memcpy peer backed as dp_alloc(DP_ALLOC_HUGE) backs ours:
 * a hugetlb memfd where the host has huge pages, else a memfd with
 * MADV_HUGEPAGE. */
static uint64_t peer_maplen(uint64_t len)
{
	return (len + 2 * MiB - 1) & ~(2 * MiB - 1);
}

static uint8_t *peer_buf(uint64_t len)
{
	uint64_t maplen = peer_maplen(len);
	void *p = MAP_FAILED;

	for (int h = 1; h >= 0 && p == MAP_FAILED; h--) {
		int fd = memfd_create("dp-bench-peer", MFD_CLOEXEC | (h ? MFD_HUGETLB : 0));

		if (fd < 0)
			continue;
		if (ftruncate(fd, (off_t)maplen) == 0)
			p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
				 fd, 0);
		close(fd);
		if (p != MAP_FAILED && !h)
			madvise(p, maplen, MADV_HUGEPAGE);
	}
	if (p == MAP_FAILED)
		die("peer buffer", -ENOMEM);
	return p;
}

static void peer_free(uint8_t *p, uint64_t len)
{
	munmap(p, peer_maplen(len));
}

/* P5: GB/s of ours and of the memcpy peer at 1 MiB, 4 MiB, ... (n sizes,
 * the largest top), one progress line over both. */
struct bw_run {
	unsigned n;
	uint64_t top, done;
	double ours[SIZES], peer[SIZES];
	struct peer_check chk;
	struct progress pg;
};

static void bandwidth_ours(struct bw_run *w)
{
	double r[REPS];
	uint64_t len = MiB;
	struct bench b;

	ours_begin();
	bench_open(&b, opt.max_size);
	for (unsigned k = 0; k < w->n; k++, len *= 4) {
		for (unsigned i = 0; i < REPS; i++) {
			r[i] = (double)len / (double)write_from(&b, b.src, 0, len, i, -1, "WRITE");
			w->done += len;
			progress_update(&w->pg, w->done);
		}
		memset(b.dstp, 0, len);
		one_write(&b, 0, len, 99);
		verify(&b, len);
		w->ours[k] = bench_median(r, REPS);
	}
	bench_close(&b);
	ours_end();
}

/* The peer: the same sizes, once the service has gone. */
static void bandwidth_memcpy(struct bw_run *w)
{
	uint8_t *src = peer_buf(w->top), *dst = peer_buf(w->top);
	uint64_t len = MiB;
	int cpu = opt.cpu;

	peer_check_take(&w->chk, &cpu, 1);
	bench_fill(src, w->top);
	memset(dst, 0, w->top);
	for (unsigned k = 0; k < w->n; k++, len *= 4)
		w->peer[k] = memcpy_gbps(dst, src, len, REPS, &w->pg, &w->done);
	if (memcmp(src, dst, w->top))
		die("memcpy peer", -EBADMSG);
	peer_free(src, w->top);
	peer_free(dst, w->top);
}

static void bandwidth_print(const struct bw_run *w)
{
	uint64_t len = MiB;

	printf("P5 bandwidth, local host WRITE%s (GB/s, median of %u)\n",
	       opt.peers ? " vs single-thread memcpy" : "", REPS);
	report_obj("bandwidth_run");
	print_ours_cpus();
	if (opt.peers) {
		printf("  CPUs: peer memcpy on CPU %d, run after ours, same sizes, buffers backed "
		       "like ours\n",
		       opt.cpu);
		report_num("peer_cpu", opt.cpu);
		report_str("peer", "single-thread memcpy");
		peer_check_print(&w->chk);
	}
	report_end();
	if (opt.peers)
		printf("  %10s %10s %10s %8s\n", "size", "dataplane", "memcpy", "ratio");
	else
		printf("  %10s %10s\n", "size", "dataplane");
	report_arr("bandwidth");
	for (unsigned k = 0; k < w->n; k++, len *= 4) {
		double mo = w->ours[k], mp = w->peer[k];

		report_obj(NULL);
		report_u64("size", len);
		report_num("gb_per_s", mo);
		if (opt.peers) {
			printf("  %7llu MiB %10.2f %10.2f %7.2fx  %s\n",
			       (unsigned long long)(len / MiB), mo, mp, mo / mp,
			       verdict(mo >= 0.9 * mp));
			report_num("memcpy_gb_per_s", mp);
			report_num("ratio", mo / mp);
			report_bool("pass", mo >= 0.9 * mp);
		} else {
			printf("  %7llu MiB %10.2f\n", (unsigned long long)(len / MiB), mo);
		}
		report_end();
	}
	report_end();
	if (opt.peers)
		printf("  target >= 0.9x memcpy\n");
}

void bench_bandwidth(void)
{
	struct bw_run w = {0};
	uint64_t total = 0;

	for (uint64_t len = MiB; len <= opt.max_size && w.n < SIZES; len *= 4, w.n++) {
		total += REPS * len * (opt.peers ? 2 : 1);
		w.top = len;
	}
	progress_start(&w.pg, "P5 bandwidth (bytes)", total);
	bandwidth_ours(&w);
	if (opt.peers)
		bandwidth_memcpy(&w);
	progress_end(&w.pg);
	bandwidth_print(&w);
}

/* ---- stripe ---- */

#define STRIPE_MAXN 8

struct storm {
	struct bench *b;
	atomic_int stop;
	unsigned copies;
};

static void *storm_main(void *arg)
{
	struct storm *st = arg;
	struct bench *b = st->b;

	while (!atomic_load(&st->stop)) {
		write_from(b, b->src, 0, b->len, st->copies, -1, "storm WRITE");
		st->copies++;
	}
	return NULL;
}

/* n 64 B WRITEs on q, one at a time, busy-polled: p50 and p99 in ns. */
static void small_lat(struct bench *b, struct dp_queue *q, unsigned n, double *p50, double *p99)
{
	uint64_t *lat = malloc(n * sizeof(*lat));
	struct dp_desc d;

	if (!lat)
		die("malloc", -ENOMEM);
	for (unsigned i = 0; i < n; i++) {
		dp_prep_write(&d, b->src, 0, b->seg, b->len - 64, 64, i);
		lat[i] = run_desc(q, &d, -1, "64 B WRITE", NULL);
	}
	qsort(lat, n, sizeof(*lat), cmp_u64);
	*p50 = (double)lat[n / 2];
	*p99 = (double)lat[n * 99 / 100];
	free(lat);
}

/*
 * The storm of bench_stripe: the bench's queue (the first, on poller 0)
 * copies the whole region again and again from CPU @copy_cpu, while a second
 * queue (on poller 1, the least loaded) times 64 B WRITEs from @lat_cpu,
 * first alone: lat[] = alone p50, p99, storm p50, p99 (ns).
 */
static void stripe_storm(struct bench *b, struct storm *st, int copy_cpu, int lat_cpu,
			 unsigned nlat, double lat[4])
{
	struct dp_queue *q2 = bench_queue(b->c, 64);
	cpu_set_t set;
	pthread_t t;

	bench_pin(lat_cpu);
	small_lat(b, q2, nlat, &lat[0], &lat[1]);
	st->b = b;
	if (pthread_create(&t, NULL, storm_main, st))
		die("pthread_create", -EAGAIN);
	CPU_ZERO(&set);
	CPU_SET(copy_cpu, &set);
	pthread_setaffinity_np(t, sizeof(set), &set);
	usleep(20000);
	small_lat(b, q2, nlat, &lat[2], &lat[3]);
	atomic_store(&st->stop, 1);
	pthread_join(t, NULL);
	bench_pin(copy_cpu);
}

/* One thread's memcpy of @len bytes, median GB/s of @reps, on buffers
 * backed like ours (peer_buf), after one untimed copy. */
static double memcpy_rate(uint64_t len, unsigned reps)
{
	uint8_t *src = peer_buf(len), *dst = peer_buf(len);
	double r;

	memset(src, 7, len);
	memset(dst, 0, len);
	memcpy(dst, src, len);
	r = memcpy_gbps(dst, src, len, reps, NULL, NULL);
	peer_free(src, len);
	peer_free(dst, len);
	return r;
}

/* What bench_stripe measures: on the CPUs of scale_cpus, services of nn
 * sizes (ns[]), GB/s of each; the storm beside the largest. */
struct stripe_run {
	uint64_t len;
	unsigned nlat, ns[STRIPE_MAXN];
	int nn, svc[SCALE_MAX_CPUS], cli[SCALE_MAX_CPUS], nsvc, ncli;
	double gbs[STRIPE_MAXN], peer;
	double lat[4]; /* alone p50, p99; storm p50, p99 */
	struct storm st;
};

/* The poller counts: --pollers, else 1, 2, 4 as --service-cpus allows. */
static void stripe_counts(struct stripe_run *s)
{
	if (opt.pollers) {
		int v[STRIPE_MAXN];

		s->nn = parse_list(opt.pollers, v, STRIPE_MAXN);
		for (int i = 0; i < s->nn; i++)
			s->ns[i] = (unsigned)v[i];
	} else {
		for (unsigned n = 1; n <= (unsigned)s->nsvc && s->nn < 3; n *= 2)
			s->ns[s->nn++] = n;
	}
	/* A --pollers that does not parse, or is empty, leaves no N to run
	 * and none for the storm. */
	if (s->nn <= 0) {
		fprintf(stderr, "dp-bench: --pollers wants a list of 1..%d\n", s->nsvc);
		exit(2);
	}
	for (int i = 0; i < s->nn; i++)
		if (s->ns[i] < 1 || s->ns[i] > (unsigned)s->nsvc) {
			fprintf(stderr, "dp-bench: %u pollers, but --service-cpus has %d CPUs\n",
				s->ns[i], s->nsvc);
			exit(2);
		}
}

/* The run on services of ns[i] pollers, reported as one of "runs". */
static void stripe_step(struct stripe_run *s, int i, const char *stats)
{
	struct service svc;
	double r[REPS];
	struct bench b;

	service_start_on(&svc, s->svc, s->ns[i], stats);
	bench_open(&b, s->len);
	/* The first WRITE maps the pages in the service: not timed. */
	write_from(&b, b.src, 0, s->len, 0, -1, "warm-up WRITE");
	for (unsigned k = 0; k < REPS; k++)
		r[k] = (double)s->len /
		       (double)write_from(&b, b.src, 0, s->len, k + 1, -1, "WRITE");
	s->gbs[i] = bench_median(r, REPS);
	verify(&b, s->len);
	if (i == s->nn - 1 && s->ns[i] > 1)
		stripe_storm(&b, &s->st, s->cli[0], s->cli[s->ncli > 1 ? 1 : 0], s->nlat, s->lat);
	bench_close(&b);
	service_stop(&svc);
	report_obj(NULL);
	report_u64("pollers", s->ns[i]);
	report_num("gb_per_s", s->gbs[i]);
	report_end();
}

static void stripe_print(const struct stripe_run *s)
{
	unsigned top = s->ns[s->nn - 1];

	printf("  %8s %10s %10s\n", "pollers", "GB/s", "vs memcpy");
	for (int i = 0; i < s->nn; i++) {
		printf("  %8u %10.2f", s->ns[i], s->gbs[i]);
		if (s->peer > 0)
			printf(" %9.2fx%s", s->gbs[i] / s->peer,
			       s->ns[i] >= 4 ? (s->gbs[i] / s->peer >= 2 ? "  target >= 2x  PASS"
									 : "  target >= 2x  MISS")
					     : "");
		printf("\n");
	}
	if (top <= 1)
		return;
	printf("  64 B WRITE on poller 1 beside %u back-to-back %llu MiB WRITEs on poller "
	       "0 "
	       "(%u pollers): p50 %.2f us, p99 %.2f us; alone p50 %.2f us, p99 %.2f us; "
	       "p99 %.2fx alone  target <= 2x  %s\n",
	       s->st.copies, (unsigned long long)(s->len / MiB), top, s->lat[2] / 1e3,
	       s->lat[3] / 1e3, s->lat[0] / 1e3, s->lat[1] / 1e3, s->lat[3] / s->lat[1],
	       verdict(s->lat[3] <= 2 * s->lat[1]));
	report_num("storm_p50_ns", s->lat[2]);
	report_num("storm_p99_ns", s->lat[3]);
	report_num("alone_p50_ns", s->lat[0]);
	report_num("alone_p99_ns", s->lat[1]);
	report_u64("storm_copies", s->st.copies);
}

void bench_stripe(void)
{
	struct stripe_run s = {0};
	char list[512], stats[64];

	need_dataplaned("stripe", "the services");
	s.len = opt.max_size < 1024 * MiB ? opt.max_size : 1024 * MiB;
	s.nlat = opt.quick ? 5000 : 20000;
	scale_cpus(s.svc, &s.nsvc, s.cli, &s.ncli);
	stripe_counts(&s);
	snprintf(stats, sizeof(stats), "dp-bench-stripe-%d", (int)getpid());
	fmt_list(list, sizeof(list), s.svc, s.nsvc);
	bench_pin(s.cli[0]);
	printf("P5 beyond one thread: %llu MiB local WRITE vs single-thread memcpy (GB/s, median "
	       "of %u)\n",
	       (unsigned long long)(s.len / MiB), REPS);
	printf("  CPUs: pollers on %s (the first N), client on %d, 64 B latency client on %d%s\n",
	       list, s.cli[0], s.cli[s.ncli > 1 ? 1 : 0], s.ncli > 1 ? "" : " (shared: not fair)");
	report_obj("stripe");
	report_str("service_cpus", list);
	report_num("client_cpu", s.cli[0]);
	report_u64("size", s.len);
	report_arr("runs");
	for (int i = 0; i < s.nn; i++)
		stripe_step(&s, i, stats);
	report_end();
	if (opt.peers) {
		s.peer = memcpy_rate(s.len, REPS);
		printf("  memcpy: one thread on CPU %d, no dataplaned of ours alive, buffers "
		       "backed "
		       "like ours: %.2f GB/s\n",
		       s.cli[0], s.peer);
		report_num("memcpy_gb_per_s", s.peer);
	}
	stripe_print(&s);
	report_end();
}
