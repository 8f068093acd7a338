/* SPDX-License-Identifier: MIT */
/*
 * failover-bench.c - the load and the clock of make bench-failover
 * (tools/bench-failover.sh): a client of service A keeps --depth WRITEs or
 * READs of --size bytes in flight into an export of service B's client
 * (bytes verified), while this program cuts one of A's rails (--cut, a shell
 * command) and restores it (--restore), --cuts times, or slows it (--slow,
 * with %u the rate in Mbit/s). Completed bytes are counted per millisecond;
 * A's stats region says when the rail was taken out and when it was back.
 *
 * Per cut it prints: when the rail was taken out (from the cut command's
 * start), when throughput was back to 90% of what the other rails carry
 * alone (the first 10 ms window from then on with at least 90% of the bytes
 * of the cut's second half, per ms), the longest a descriptor took that
 * completed during the cut, and when, after the restore, the stats showed
 * the rail back in the stripe. Then one SUMMARY line (bench-failover.sh
 * makes the table of them).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench-report.h"
#include "dataplane.h"
#include "dp_stats.h"

#define MAX_MS (15 * 60 * 1000)

static struct {
	const char *sock, *peer_sock, *peer, *rail, *cut, *restore, *slow;
	uint8_t op;
	uint64_t size;
	unsigned depth, cuts, cut_ms, gap_ms;
	int cpu;
} o = {.op = DP_OP_WRITE,
       .size = 1 << 20,
       .depth = 64,
       .cuts = 10,
       .cut_ms = 1000,
       .gap_ms = 1000,
       .cpu = -1};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

static _Noreturn void die(const char *what, int rc)
{
	fprintf(stderr, "failover-bench: %s: %s\n", what, rc < 0 ? dp_strerror(rc) : "failed");
	exit(1);
}

/* The bytes of slot k: a word pattern a slot never changes, so a slice
 * that lands twice lands the same bytes. */
static uint64_t word(unsigned k, uint64_t i)
{
	return ((uint64_t)k << 48) ^ (i * 0x9E3779B97F4A7C15ull);
}

static void fill(uint8_t *p, unsigned k, uint64_t len)
{
	for (uint64_t i = 0; i < len / 8; i++)
		((uint64_t *)p)[i] = word(k, i);
}

static bool check(const uint8_t *p, unsigned k, uint64_t len, bool whole)
{
	uint64_t n = len / 8;

	if (!whole) /* the first, a middle and the last word */
		return ((const uint64_t *)p)[0] == word(k, 0) &&
		       ((const uint64_t *)p)[n / 2] == word(k, n / 2) &&
		       ((const uint64_t *)p)[n - 1] == word(k, n - 1);
	for (uint64_t i = 0; i < n; i++)
		if (((const uint64_t *)p)[i] != word(k, i))
			return false;
	return true;
}

/* ---- the load (a thread) ---- */

static struct {
	struct dp_client *a, *b;
	struct dp_queue *q;
	uint8_t *loc, *tgt;
	int lreg, seg;
	unsigned slots;
	uint64_t t0;
	_Atomic uint64_t *bins;	  /* completed bytes per ms since t0 */
	_Atomic uint32_t *maxlat; /* longest descriptor (us) completing in that ms */
	atomic_bool stop;
	_Atomic uint64_t done, failed, bad;
	uint64_t *sub_ns; /* per slot: when its descriptor was submitted */
	uint8_t *busy;	  /* per slot: a descriptor in flight uses it */
} L;

static void *load(void *arg)
{
	uint64_t next = 0;
	unsigned inflight = 0, k = 0;
	struct dp_cqe c[256];

	(void)arg;
	if (o.cpu >= 0)
		bench_pin(o.cpu);
	while (!atomic_load(&L.stop) || inflight) {
		int got;

		while (!atomic_load(&L.stop) && inflight < o.depth) {
			struct dp_desc d;

			/* A free slot: a descriptor stuck on a cut rail may
			 * complete after many later ones. */
			while (L.busy[k])
				k = (k + 1) % L.slots;

			if (o.op == DP_OP_READ)
				memset(L.loc + k * o.size, 0, 64);
			dp_prep_write(&d, L.lreg, k * o.size, L.seg, k * o.size, o.size,
				      next * L.slots + k);
			d.opcode = o.op;
			L.sub_ns[k] = now_ns();
			if (dp_submit(L.q, &d, 1) != 1)
				break;
			L.busy[k] = 1;
			next++;
			inflight++;
		}
		got = dp_wait(L.q, c, 256, 100);
		for (int i = 0; i < got; i++) {
			unsigned slot = (unsigned)(c[i].user_data % L.slots);
			uint64_t t = now_ns(), ms = (t - L.t0) / 1000000;
			uint32_t lat = (uint32_t)((t - L.sub_ns[slot]) / 1000);

			L.busy[slot] = 0;

			if (c[i].status) {
				atomic_fetch_add(&L.failed, 1);
				fprintf(stderr, "failover-bench: descriptor %llu: %s\n",
					(unsigned long long)c[i].user_data,
					dp_strerror(c[i].status));
			} else if (!check(o.op == DP_OP_READ ? L.loc + slot * o.size
							     : L.tgt + slot * o.size,
					  slot, o.size, false)) {
				atomic_fetch_add(&L.bad, 1);
			}
			if (ms < MAX_MS) {
				atomic_fetch_add(&L.bins[ms], c[i].status ? 0 : o.size);
				if (lat > atomic_load(&L.maxlat[ms]))
					atomic_store(&L.maxlat[ms], lat);
			}
			atomic_fetch_add(&L.done, 1);
		}
		if (got > 0)
			inflight -= (unsigned)got;
	}
	return NULL;
}

/* ---- A's stats: the rail named --rail ---- */

static const struct dp_stats_header *stats;
static unsigned stats_rail = ~0u;

static void stats_open(void)
{
	char name[DP_STATS_NAME_MAX];
	struct stat st;
	int fd;

	dp_stats_default_name(o.sock, name, sizeof(name));
	fd = shm_open(name, O_RDONLY, 0);
	if (fd < 0 || fstat(fd, &st))
		die("A's stats region", -errno);
	stats = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (stats == MAP_FAILED || stats->magic != DP_STATS_MAGIC ||
	    stats->abi_version != DP_STATS_ABI_VERSION)
		die("A's stats region (another ABI?)", -EPROTO);
	for (unsigned r = 0; r < stats->nrails; r++) {
		const struct dp_stats_rail_info *ri =
			(const void *)((const uint8_t *)stats + stats->rail_info_off +
				       (size_t)r * stats->rail_info_size);

		if (ri->state && !strcmp(ri->domain, o.rail))
			stats_rail = r;
	}
	if (stats_rail == ~0u)
		die("no rail of A is on --rail", -ENODEV);
}

static struct dp_stats_rail rail_now(void)
{
	struct dp_stats_rail sum = {0};

	for (unsigned p = 0; p < stats->npollers; p++) {
		const struct dp_stats_rail *s =
			(const void *)((const uint8_t *)stats + stats->rails_off +
				       ((size_t)stats_rail * stats->npollers + p) *
					       stats->rail_size);
		uint64_t st = __atomic_load_n(&s->state, __ATOMIC_RELAXED);

		sum.outs += __atomic_load_n(&s->outs, __ATOMIC_RELAXED);
		sum.backs += __atomic_load_n(&s->backs, __ATOMIC_RELAXED);
		sum.reposted += __atomic_load_n(&s->reposted, __ATOMIC_RELAXED);
		sum.posted += __atomic_load_n(&s->posted, __ATOMIC_RELAXED);
		if (st > sum.state)
			sum.state = st;
	}
	return sum;
}

/* ---- figures from the bins ---- */

static uint64_t ms_of(uint64_t t)
{
	return (t - L.t0) / 1000000;
}

/* Bytes completed in ms [a, b). */
static uint64_t bytes(uint64_t a, uint64_t b)
{
	uint64_t s = 0;

	for (uint64_t m = a; m < b && m < MAX_MS; m++)
		s += atomic_load(&L.bins[m]);
	return s;
}

static double gbps(uint64_t a, uint64_t b)
{
	return b > a ? (double)bytes(a, b) / ((double)(b - a) * 1e6) : 0;
}

static void sh(const char *cmd)
{
	if (system(cmd))
		fprintf(stderr, "failover-bench: '%s' failed\n", cmd);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double pct(double *v, unsigned n, double p)
{
	qsort(v, n, sizeof(*v), cmp_d);
	return n ? v[(unsigned)(p * (n - 1) + 0.5)] : 0;
}

/* Waits until the stats show the rail taken out (@out) or back and healthy,
 * at most @ms; the time it happened, or 0. */
static uint64_t wait_rail(bool out, uint64_t outs0, uint64_t backs0, unsigned ms)
{
	uint64_t until = now_ns() + (uint64_t)ms * 1000000;

	while (now_ns() < until) {
		struct dp_stats_rail r = rail_now();

		if (out ? r.outs > outs0 : r.backs > backs0 && r.state == DP_STATS_RAIL_HEALTHY)
			return now_ns();
		usleep(500);
	}
	return 0;
}

static void cuts(void)
{
	double det[64], rec[64], lng[64], back[64], alone[64];
	unsigned n = o.cuts < 64 ? o.cuts : 64, nback = 0;
	uint64_t r0 = rail_now().reposted;

	for (unsigned i = 0; i < n; i++) {
		struct dp_stats_rail r = rail_now();
		uint64_t tc = now_ns(), to, tr, tb, b0, half, m0, rc = 0;
		uint32_t maxlat = 0;

		sh(o.cut);
		to = wait_rail(true, r.outs, 0, o.cut_ms);
		while (now_ns() < tc + (uint64_t)o.cut_ms * 1000000)
			usleep(1000);
		/* (counted before the restore: the rail may answer
		 * while the command still runs) */
		b0 = rail_now().backs;
		tr = now_ns();
		sh(o.restore);
		tb = wait_rail(false, 0, b0, 10000);
		/* The rails left carry alone in the cut's second half. */
		m0 = ms_of(tc);
		half = o.cut_ms / 2;
		alone[i] = gbps(m0 + half, m0 + o.cut_ms);
		rec[i] = -1;
		for (uint64_t m = m0; m + 10 <= m0 + o.cut_ms; m++)
			if ((double)bytes(m, m + 10) >= 0.9 * alone[i] * 1e6 * 10) {
				rec[i] = (double)(m - m0);
				rc = 1;
				break;
			}
		if (!rc)
			rec[i] = o.cut_ms;
		for (uint64_t m = m0; m < ms_of(tr); m++)
			if (atomic_load(&L.maxlat[m]) > maxlat)
				maxlat = atomic_load(&L.maxlat[m]);
		det[i] = to ? (double)(to - tc) / 1e6 : -1;
		lng[i] = maxlat / 1e3;
		if (tb)
			back[nback++] = (double)(tb - tr) / 1e6;
		printf("cut %u: taken out after %.1f ms; throughput back to 90%% of the other "
		       "rail's alone (%.2f GB/s) after %.0f ms; longest descriptor during the cut "
		       "%.1f ms; back in the stripe %s%.0f ms after the restore\n",
		       i + 1, det[i], alone[i], rec[i], lng[i], tb ? "" : "(not within 10 s) ",
		       tb ? (double)(tb - tr) / 1e6 : 10000.0);
		fflush(stdout);
		sleep_ms(o.gap_ms);
	}
	{
		double a = pct(alone, n, 0.5), d50 = pct(det, n, 0.5), dmax = pct(det, n, 1);
		double r50 = pct(rec, n, 0.5), rmax = pct(rec, n, 1);
		double l50 = pct(lng, n, 0.5), lmax = pct(lng, n, 1);
		double bmax = pct(back, nback, 1);
		unsigned in1s = 0;

		for (unsigned i = 0; i < nback; i++)
			in1s += back[i] <= 1000;

		printf("SUMMARY %s %llu cuts %u failed %llu bad %llu reposted %llu detect_p50 %.1f "
		       "detect_max %.1f recover_p50 %.0f recover_max %.0f longest_p50 %.1f "
		       "longest_max %.1f back %u back_1s %u back_max %.0f alone %.2f\n",
		       o.op == DP_OP_READ ? "READ" : "WRITE", (unsigned long long)o.size, n,
		       (unsigned long long)atomic_load(&L.failed),
		       (unsigned long long)atomic_load(&L.bad),
		       (unsigned long long)(rail_now().reposted - r0), d50, dmax, r50, rmax, l50,
		       lmax, nback, in1s, bmax, a);
	}
}

/* The rail slowed to a tenth of what it carries alone, against the other
 * rails alone (the rail cut). */
static void slow(void)
{
	char cmd[512];
	uint64_t t, m;
	double both, alone, slowed;
	unsigned mbit;
	struct dp_stats_rail r;

	t = now_ns();
	sleep_ms(2000);
	m = ms_of(t);
	both = gbps(m, m + 2000);
	r = rail_now();
	sh(o.cut);
	if (!wait_rail(true, r.outs, 0, 5000))
		fprintf(stderr, "failover-bench: the rail was not taken out\n");
	sleep_ms(500);
	t = now_ns();
	sleep_ms(2000);
	m = ms_of(t);
	alone = gbps(m, m + 2000);
	r = rail_now();
	sh(o.restore);
	wait_rail(false, 0, r.backs, 10000);
	mbit = (unsigned)(alone * 8000 / 10);
	snprintf(cmd, sizeof(cmd), o.slow, mbit);
	sh(cmd);
	sleep_ms(1000);
	t = now_ns();
	sleep_ms(3000);
	m = ms_of(t);
	slowed = gbps(m, m + 3000);
	printf("slow: both rails %.2f GB/s; the other alone %.2f GB/s; the rail shaped to %u "
	       "Mbit/s (a tenth of that): %.2f GB/s, %.2fx the other alone\n",
	       both, alone, mbit, slowed, slowed / alone);
	printf("SLOW %s %llu both %.2f alone %.2f slowed %.2f ratio %.2f mbit %u failed %llu bad "
	       "%llu\n",
	       o.op == DP_OP_READ ? "READ" : "WRITE", (unsigned long long)o.size, both, alone,
	       slowed, slowed / alone, mbit, (unsigned long long)atomic_load(&L.failed),
	       (unsigned long long)atomic_load(&L.bad));
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"socket", 1, 0, 's'}, {"peer-socket", 1, 0, 'S'}, {"peer", 1, 0, 'p'},
		{"rail", 1, 0, 'r'},   {"cut", 1, 0, 'c'},	   {"restore", 1, 0, 'R'},
		{"slow", 1, 0, 'w'},   {"op", 1, 0, 'o'},	   {"size", 1, 0, 'z'},
		{"depth", 1, 0, 'd'},  {"cuts", 1, 0, 'n'},	   {"cut-ms", 1, 0, 'm'},
		{"gap-ms", 1, 0, 'g'}, {"cpu", 1, 0, 'C'},	   {0, 0, 0, 0}};
	pthread_t th;
	int c, treg, rc;
	bool whole = true;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			o.sock = optarg;
			break;
		case 'S':
			o.peer_sock = optarg;
			break;
		case 'p':
			o.peer = optarg;
			break;
		case 'r':
			o.rail = optarg;
			break;
		case 'c':
			o.cut = optarg;
			break;
		case 'R':
			o.restore = optarg;
			break;
		case 'w':
			o.slow = optarg;
			break;
		case 'o':
			o.op = strcmp(optarg, "read") ? DP_OP_WRITE : DP_OP_READ;
			break;
		case 'z':
			o.size = strtoull(optarg, NULL, 0);
			break;
		case 'd':
			o.depth = (unsigned)atoi(optarg);
			break;
		case 'n':
			o.cuts = (unsigned)atoi(optarg);
			break;
		case 'm':
			o.cut_ms = (unsigned)atoi(optarg);
			break;
		case 'g':
			o.gap_ms = (unsigned)atoi(optarg);
			break;
		case 'C':
			o.cpu = atoi(optarg);
			break;
		default:
			return 2;
		}
	}
	if (!o.sock || !o.peer_sock || !o.peer || !o.rail || !o.cut || !o.restore || o.size % 8 ||
	    !o.size || !o.depth || o.depth > 256) {
		fprintf(stderr, "usage: failover-bench --socket A.sock --peer-socket B.sock --peer "
				"HOST:PORT --rail DOMAIN --cut CMD --restore CMD [--slow CMD(%%u "
				"Mbit/s)] [--op write|read] [--size N] [--depth N] [--cuts N] "
				"[--cut-ms N] [--gap-ms N] [--cpu N]\n");
		return 2;
	}
	L.slots = 2 * o.depth;
	L.bins = calloc(MAX_MS, sizeof(*L.bins));
	L.maxlat = calloc(MAX_MS, sizeof(*L.maxlat));
	L.sub_ns = calloc(L.slots, sizeof(*L.sub_ns));
	L.busy = calloc(L.slots, 1);
	if (!L.bins || !L.maxlat || !L.sub_ns || !L.busy)
		die("memory", -ENOMEM);
	if ((rc = dp_connect(o.sock, "failover-a", &L.a)) ||
	    (rc = dp_connect(o.peer_sock, "failover-b", &L.b)))
		die("dp_connect", rc);
	if ((rc = L.lreg = dp_alloc(L.a, L.slots * o.size, 0, (void **)&L.loc)) < 0 ||
	    (rc = treg = dp_alloc(L.b, L.slots * o.size, 0, (void **)&L.tgt)) < 0)
		die("dp_alloc", rc);
	for (unsigned k = 0; k < L.slots; k++)
		fill(o.op == DP_OP_READ ? L.tgt + k * o.size : L.loc + k * o.size, k, o.size);
	if ((rc = dp_segment_export(L.b, treg, "failover", DP_ACCESS_RW)) < 0)
		die("dp_segment_export", rc);
	if ((rc = L.seg = dp_segment_open(L.a, o.peer, "failover", DP_ACCESS_RW)) < 0)
		die("dp_segment_open", rc);
	if ((rc = dp_queue_create(L.a, 2 * o.depth, &L.q)))
		die("dp_queue_create", rc);
	stats_open();
	L.t0 = now_ns();
	if (pthread_create(&th, NULL, load, NULL))
		die("pthread_create", -EAGAIN);
	sleep_ms(1000);
	if (o.slow)
		slow();
	else
		cuts();
	atomic_store(&L.stop, true);
	pthread_join(th, NULL);
	for (unsigned k = 0; k < L.slots; k++)
		whole &= check(o.op == DP_OP_READ ? L.loc + k * o.size : L.tgt + k * o.size, k,
			       o.size, true);
	printf("descriptors %llu, failed %llu, bytes %s\n",
	       (unsigned long long)atomic_load(&L.done), (unsigned long long)atomic_load(&L.failed),
	       whole && !atomic_load(&L.bad) ? "verified" : "WRONG");
	dp_close(L.a);
	dp_close(L.b);
	return atomic_load(&L.failed) || atomic_load(&L.bad) || !whole;
}
