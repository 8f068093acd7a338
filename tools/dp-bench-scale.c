/* SPDX-License-Identifier: MIT */
/*
 * dp-bench-scale.c - scaling with pollers and clients, and the cost of idle
 * queues (S1-S5; docs/benchmarks.md, "Scaling"), on services of our own
 * (--dataplaned) read through their stats regions:
 *   scale        N pollers and N client processes, one queue each on its
 *                own poller: P4's workload, aggregate rate against N x the
 *                rate at N=1, then 64 B WRITE latency under all clients
 *   idle-queues  P4 on one poller with 0 and --idle-queues N idle queues
 *                open, the empty poller loop's cost, and the idle service's
 *                CPU use once its spin time has ended
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "dp-bench.h"
#include "dp_stats.h"

/* ---- the service's stats region (read-only): where queues landed and
 * what the pollers did ---- */

static const struct dp_stats_header *stats_map(const char *name, size_t *len)
{
	int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
	struct stat st;
	void *p;

	if (fd < 0 || fstat(fd, &st) < 0) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return NULL;
	*len = (size_t)st.st_size;
	if (((const struct dp_stats_header *)p)->magic != DP_STATS_MAGIC ||
	    ((const struct dp_stats_header *)p)->abi_version != DP_STATS_ABI_VERSION) {
		munmap(p, *len);
		return NULL;
	}
	return p;
}

static const struct dp_stats_queue *stats_queue(const struct dp_stats_header *h, uint32_t i)
{
	return (const void *)((const char *)h + h->queues_off + (size_t)i * h->queue_size);
}

static const struct dp_stats_poller *stats_poller(const struct dp_stats_header *h, uint32_t i)
{
	return (const void *)((const char *)h + h->pollers_off + (size_t)i * h->poller_size);
}

#define LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

/* The poller of pid's (first) open queue, or -1. */
static int stats_poller_of(const struct dp_stats_header *h, pid_t pid)
{
	for (uint32_t i = 0; i < h->nqueues; i++) {
		const struct dp_stats_queue *q = stats_queue(h, i);

		if (LD(q->state) == DP_STATS_Q_ACTIVE && LD(q->client_pid) == pid)
			return (int)LD(q->poller);
	}
	return -1;
}

/* CPU time (utime + stime) of a process, in seconds. */
static double proc_cpu_s(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	p = strrchr(buf, ')');
	/* After ")": state, then fields 4..13; utime and stime are 14, 15. */
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* P4's workload (64 B WRITEs, batches of 32) for `ns`: desc/s. */
static double timed_write_rate(struct bench *b, uint64_t ns)
{
	return write_rate(b, 32, UINT64_MAX, ns, NULL);
}

/* ---- scale ---- */

/* What the clients of one scale step share with the parent. */
struct scale_shm {
	int ready, go, lat_ready;
	struct {
		double rate;
		unsigned nlat; /* latency samples taken (at most --seconds of them) */
	} c[SCALE_MAX_N];
	uint64_t lat[]; /* nlat per client, sorted */
};

static void scale_client(struct scale_shm *sh, unsigned i, unsigned n, int cpu, uint64_t ns,
			 unsigned nlat)
{
	uint64_t *lat = sh->lat + (size_t)i * nlat;
	struct bench b;

	bench_pin(cpu);
	bench_open(&b, 4096);
	__atomic_add_fetch(&sh->ready, 1, __ATOMIC_ACQ_REL);
	while (!__atomic_load_n(&sh->go, __ATOMIC_ACQUIRE))
		usleep(100);
	timed_write_rate(&b, ns / 10); /* warm-up */
	sh->c[i].rate = timed_write_rate(&b, ns);
	/* The latency sample, all clients at once (each on its own poller). */
	__atomic_add_fetch(&sh->lat_ready, 1, __ATOMIC_ACQ_REL);
	while (__atomic_load_n(&sh->lat_ready, __ATOMIC_ACQUIRE) < (int)n)
		;
	for (unsigned k = 0; k < nlat / 10; k++)
		one_write(&b, 0, 64, k);
	/* At most nlat samples or --seconds, whichever ends first: on shared
	 * CPUs a round trip can take milliseconds. */
	uint64_t end = dp_now_ns() + ns, k = 0;

	for (; k < nlat && (k & 255 || dp_now_ns() < end); k++)
		lat[k] = one_write(&b, (k % 64) * 64, 64, k);
	sh->c[i].nlat = (unsigned)k;
	qsort(lat, k, sizeof(*lat), cmp_u64);
	verify(&b, 4096);
	bench_close(&b);
	_exit(0);
}

struct scale_fig {
	unsigned n;
	size_t samples;
	double rate, min_rate, max_rate, p50, p99, p999;
	bool shared, distinct;
	char pollers[128], clients[128], placed[128];
};

/* Own CPUs for every poller (pc[]) and every client (cc[]) when the lists
 * have them; else every CPU of the machine, a poller and a client each,
 * which is no fair placement: flagged. */
static void scale_place(struct scale_fig *f, const int *svc, int nsvc, const int *cli, int ncli,
			int *pc, int *cc)
{
	int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
	unsigned n = f->n;

	f->shared = (int)n > nsvc || (int)n > ncli;
	for (unsigned i = 0; i < n; i++) {
		pc[i] = f->shared ? (int)i % ncpu : svc[i];
		cc[i] = f->shared ? (int)(i + 1) % ncpu : cli[i];
		for (unsigned k = 0; k < n && !f->shared; k++)
			if (cc[i] == svc[k])
				f->shared = true;
	}
	fmt_list(f->pollers, sizeof(f->pollers), pc, (int)n);
	fmt_list(f->clients, sizeof(f->clients), cc, (int)n);
}

/* Where each client's queue landed: the stats region's queue blocks. */
static void scale_placed(struct scale_fig *f, const char *stats, const pid_t *kids)
{
	size_t hlen = 0, o = 0;
	const struct dp_stats_header *h = stats_map(stats, &hlen);
	bool seen[SCALE_MAX_N] = {false};

	f->distinct = h != NULL;
	for (unsigned i = 0; i < f->n; i++) {
		int p = h ? stats_poller_of(h, kids[i]) : -1;

		if (p < 0 || p >= (int)f->n || seen[p])
			f->distinct = false;
		else
			seen[p] = true;
		o += (size_t)snprintf(f->placed + o, sizeof(f->placed) - o, "%s%d", i ? "," : "",
				      p);
	}
	if (h)
		munmap((void *)h, hlen);
}

/* The n clients, each on its CPU of cc[], started together once all are
 * connected (their queues placed by then); true when all exited 0. */
static bool scale_clients(struct scale_fig *f, struct scale_shm *sh, const int *cc,
			  const char *stats, unsigned nlat)
{
	uint64_t ns = (uint64_t)(opt.seconds * 1e9);
	pid_t kids[SCALE_MAX_N];
	bool ok = true;

	for (unsigned i = 0; i < f->n; i++) {
		fflush(stdout);
		kids[i] = fork();
		if (kids[i] < 0)
			die("fork", -errno);
		if (kids[i] == 0)
			scale_client(sh, i, f->n, cc[i], ns, nlat);
	}
	for (int t = 0; __atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE) < (int)f->n; t++) {
		if (t > 3000) {
			fprintf(stderr, "dp-bench: scale: clients did not start\n");
			exit(1);
		}
		usleep(10000);
	}
	scale_placed(f, stats, kids);
	__atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < f->n; i++) {
		int st;

		waitpid(kids[i], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			ok = false;
	}
	return ok;
}

/* The clients' rates, and their latency samples all together. */
static void scale_gather(struct scale_fig *f, const struct scale_shm *sh, unsigned nlat)
{
	uint64_t *all = malloc((size_t)f->n * nlat * sizeof(uint64_t));

	if (!all)
		die("scale memory", -ENOMEM);
	f->min_rate = 1e30;
	for (unsigned i = 0; i < f->n; i++) {
		f->rate += sh->c[i].rate;
		f->min_rate = sh->c[i].rate < f->min_rate ? sh->c[i].rate : f->min_rate;
		f->max_rate = sh->c[i].rate > f->max_rate ? sh->c[i].rate : f->max_rate;
	}
	f->samples = 0;
	for (unsigned i = 0; i < f->n; i++) {
		memcpy(all + f->samples, sh->lat + (size_t)i * nlat,
		       sh->c[i].nlat * sizeof(uint64_t));
		f->samples += sh->c[i].nlat;
	}
	qsort(all, f->samples, sizeof(*all), cmp_u64);
	f->p50 = percentile_sorted(all, f->samples, 50) / 1e3;
	f->p99 = percentile_sorted(all, f->samples, 99) / 1e3;
	f->p999 = percentile_sorted(all, f->samples, 99.9) / 1e3;
	free(all);
}

static void scale_step(unsigned n, const int *svc, int nsvc, const int *cli, int ncli,
		       struct scale_fig *f)
{
	int pc[SCALE_MAX_N], cc[SCALE_MAX_N];
	unsigned nlat = opt.quick ? 20000 : 100000;
	size_t shlen = sizeof(struct scale_shm) + (size_t)n * nlat * sizeof(uint64_t);
	struct scale_shm *sh;
	struct service svc_;
	char stats[64];
	bool ok;

	memset(f, 0, sizeof(*f));
	f->n = n;
	scale_place(f, svc, nsvc, cli, ncli, pc, cc);
	sh = mmap(NULL, shlen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		die("scale memory", -ENOMEM);
	memset(sh, 0, sizeof(*sh));
	snprintf(stats, sizeof(stats), "dp-bench-scale-%d-%u", (int)getpid(), n);
	service_start_on(&svc_, pc, n, stats);
	ok = scale_clients(f, sh, cc, stats, nlat);
	service_stop(&svc_);
	if (!ok) {
		fprintf(stderr, "dp-bench: scale: a client failed (N=%u)\n", n);
		exit(1);
	}
	scale_gather(f, sh, nlat);
	munmap(sh, shlen);
}

/* The placement of each client and its poller (client i on cli[i], its
 * queue on poller i on svc[i], as the "queue->poller" column shows when it
 * reads 0,1,2,...): a far pair moves fewer descriptors whatever the
 * service does, so the spread of the per-client rates can be read against
 * it. Measured before any service starts. */
static void scale_pairs(const int *svc, int nsvc, const int *cli, int ncli, const unsigned *ns,
			int nn)
{
	unsigned maxn = 0;

	for (int i = 0; i < nn; i++)
		maxn = ns[i] > maxn ? ns[i] : maxn;
	printf("  placement of pair i (client CPU <-> poller CPU), ping-pong ns:");
	report_arr("pair_placement_ns");
	for (int i = 0; i < (int)maxn && i < nsvc && i < ncli; i++) {
		double pp = cli[i] == svc[i] ? -1 : bench_placement(cli[i], svc[i], 3);

		if (pp > 0)
			printf(" %d<->%d %.0f", cli[i], svc[i], pp);
		else
			printf(" %d<->%d n/a", cli[i], svc[i]);
		report_num(NULL, pp);
	}
	report_end();
	printf("\n");
}

/* The N to run: --pollers, else powers of two that fit both lists; where
 * only 1 does, 2 on shared CPUs. */
static int scale_counts(unsigned *ns, int nsvc, int ncli)
{
	int nn = 0;

	if (opt.pollers) {
		int v[SCALE_MAX_N];

		nn = parse_list(opt.pollers, v, SCALE_MAX_N);
		for (int i = 0; i < nn; i++)
			if (v[i] < 1 || v[i] > SCALE_MAX_N)
				nn = -1;
		if (nn <= 0) {
			fprintf(stderr, "dp-bench: --pollers wants a list of 1..%d\n", SCALE_MAX_N);
			exit(2);
		}
		for (int i = 0; i < nn; i++)
			ns[i] = (unsigned)v[i];
	} else {
		for (unsigned n = 1; n <= SCALE_MAX_N && (int)n <= nsvc && (int)n <= ncli; n *= 2)
			ns[nn++] = n;
		if (nn == 1)
			ns[nn++] = 2;
	}
	return nn;
}

/* One row of the table and of "steps"; sc: the scaling against r1, the
 * rate at N=1 (0: none). */
static void scale_row(const struct scale_fig *s, double r1, double sc)
{
	printf("  %3u %-14s %-14s %-13s %13.2f %5.2f-%-6.2f %8.2f %8.2f %8.2f %8.2f  "
	       "%s%s%s\n",
	       s->n, s->pollers, s->clients, s->placed, s->rate / 1e6, s->min_rate / 1e6,
	       s->max_rate / 1e6, sc, s->p50, s->p99, s->p999,
	       r1 > 0 ? verdict(sc >= 0.8) : "n/a (no N=1)",
	       s->shared ? "  SHARED CPUs: not a fair placement" : "",
	       s->distinct ? "" : "  WARNING: queues not on distinct pollers");
	report_obj(NULL);
	report_u64("n", s->n);
	report_str("poller_cpus", s->pollers);
	report_str("client_cpus", s->clients);
	report_str("queue_pollers", s->placed);
	report_bool("queues_on_distinct_pollers", s->distinct);
	report_bool("cpus_shared", s->shared);
	report_num("desc_per_s", s->rate);
	report_num("min_client_desc_per_s", s->min_rate);
	report_num("max_client_desc_per_s", s->max_rate);
	report_num("scaling", sc);
	report_str("target", ">= 0.8");
	report_bool("pass", r1 > 0 && sc >= 0.8);
	report_num("p50_us", s->p50);
	report_num("p99_us", s->p99);
	report_num("p999_us", s->p999);
	report_u64("latency_samples", s->samples);
	report_end();
}

static void scale_head(const int *svc, int nsvc, const int *cli, int ncli)
{
	char a[512], b[512];

	fmt_list(a, sizeof(a), svc, nsvc);
	fmt_list(b, sizeof(b), cli, ncli);
	printf("scale: N pollers (dataplaned --pollers N) and N client processes, each with its "
	       "own queue on its own poller, P4's workload (64 B WRITEs, batch 32) for %.1f s, "
	       "then 64 B WRITEs one outstanding (up to %u samples each, at most as long), all "
	       "clients at once\n",
	       opt.seconds, opt.quick ? 20000 : 100000);
	printf("  CPUs: pollers from %s, clients from %s (%ld online)\n", a, b,
	       sysconf(_SC_NPROCESSORS_ONLN));
	report_obj("scale");
	report_str("what", "N pollers, N client processes, P4 workload each; aggregate rate; "
			   "64 B WRITE latency under all clients");
	report_str("service_cpus", a);
	report_str("client_cpus", b);
	report_num("seconds", opt.seconds);
}

void bench_scale(void)
{
	int svc[SCALE_MAX_CPUS], cli[SCALE_MAX_CPUS], nsvc, ncli, nn;
	unsigned ns[SCALE_MAX_N];
	struct scale_fig f[SCALE_MAX_N];
	double r1 = 0, x[SCALE_MAX_N], rate[SCALE_MAX_N], p99[SCALE_MAX_N], ideal[SCALE_MAX_N];
	bool shared[SCALE_MAX_N];

	need_dataplaned("scale", "the services");
	scale_cpus(svc, &nsvc, cli, &ncli);
	nn = scale_counts(ns, nsvc, ncli);
	scale_head(svc, nsvc, cli, ncli);
	scale_pairs(svc, nsvc, cli, ncli, ns, nn);
	report_arr("steps");
	printf("  %3s %-14s %-14s %-13s %13s %12s %8s %8s %8s %8s  %s\n", "N", "poller CPUs",
	       "client CPUs", "queue->poller", "aggregate M/s", "per client", "scaling", "p50 us",
	       "p99 us", "p99.9 us", "verdict");
	for (int i = 0; i < nn; i++) {
		scale_step(ns[i], svc, nsvc, cli, ncli, &f[i]);
		if (ns[i] == 1 && !r1)
			r1 = f[i].rate;
		scale_row(&f[i], r1, r1 > 0 ? f[i].rate / (ns[i] * r1) : 0.0 / 0.0);
		x[i] = ns[i];
		rate[i] = f[i].rate;
		p99[i] = f[i].p99;
		ideal[i] = 0.8 * ns[i] * r1;
		shared[i] = f[i].shared;
	}
	report_end();
	report_end();
	printf("  scaling = aggregate / (N x aggregate at N=1), target >= 0.8; queue->poller: "
	       "the poller index of each client's queue (stats region); p50/p99: all clients' "
	       "samples together, submit to completion\n");
	plot_scale("scale", x, rate, p99, ideal, shared, (unsigned)nn);
}

/* ---- idle-queues ---- */

/* The idle-queues holder: opens `count` queues over as many clients as
 * the service's per-client limit asks (64 each), then waits for its pipe to
 * close. */
static void idle_holder(unsigned count, int cpu, int ready_fd, int wait_fd)
{
	struct dp_client *c = NULL;
	struct dp_queue *q;
	char ch = 0;
	int rc;

	bench_pin(cpu);
	for (unsigned i = 0; i < count; i++) {
		if (i % 64 == 0 && (rc = dp_connect(opt.socket, "dp-bench-idle", &c)) < 0)
			die("idle client connect", rc);
		if ((rc = dp_queue_create(c, 64, &q)) < 0)
			die("idle queue", rc);
	}
	if (write(ready_fd, &ch, 1) != 1)
		_exit(1);
	while (read(wait_fd, &ch, 1) > 0)
		;
	_exit(0);
}

/* The holder in a process of its own on `cpu`, once its queues are open;
 * closing *hold_fd lets it go. */
static pid_t idle_holder_start(int cpu, int *hold_fd)
{
	int ready[2], hold[2];
	pid_t holder;
	char ch;

	if (pipe(ready) || pipe(hold))
		die("pipe", -errno);
	fflush(stdout);
	holder = fork();
	if (holder == 0) {
		close(ready[0]);
		close(hold[1]);
		idle_holder(opt.idle_queues, cpu, ready[1], hold[0]);
	}
	close(ready[1]);
	close(hold[0]);
	if (read(ready[0], &ch, 1) != 1) {
		fprintf(stderr, "dp-bench: idle-queues: the holder of the idle queues failed\n");
		exit(1);
	}
	*hold_fd = hold[1];
	return holder;
}

/* The poller's empty loops over `ms` with no traffic: ns per loop. */
static double empty_loop_ns(const struct dp_stats_poller *p, unsigned ms)
{
	uint64_t l0 = LD(p->loops), i0 = LD(p->idle_ns), l1, i1;

	usleep(ms * 1000);
	l1 = LD(p->loops);
	i1 = LD(p->idle_ns);
	return l1 > l0 ? (double)(i1 - i0) / (double)(l1 - l0) : 0.0 / 0.0;
}

struct idle_cpu {
	double pct, sleep_pct, idle_pct;
	uint64_t sleeps, wakeups;
};

/* The service's CPU use over 2 s once its spin time has ended, and what its
 * poller did meanwhile. */
static void idle_cpu_use(pid_t pid, const struct dp_stats_poller *p, struct idle_cpu *r)
{
	uint64_t s0, w0, sl0, id0, t0;
	double c0;

	usleep(opt.spin_us + 500000);
	s0 = LD(p->sleeps);
	w0 = LD(p->wakeups);
	sl0 = LD(p->sleep_ns);
	id0 = LD(p->idle_ns);
	c0 = proc_cpu_s(pid);
	t0 = dp_now_ns();
	usleep(2000000);
	t0 = dp_now_ns() - t0;
	r->pct = 100 * (proc_cpu_s(pid) - c0) / ((double)t0 / 1e9);
	r->sleeps = LD(p->sleeps) - s0;
	r->wakeups = LD(p->wakeups) - w0;
	r->sleep_pct = 100.0 * (double)(LD(p->sleep_ns) - sl0) / (double)t0;
	r->idle_pct = 100.0 * (double)(LD(p->idle_ns) - id0) / (double)t0;
}

static void report_idle_cpu(const char *key, const char *what, const struct idle_cpu *r)
{
	printf("  idle service, %s: %.1f%% of a CPU (utime+stime over 2 s, %.1f s after the "
	       "last descriptor); poller asleep %.0f%%, spinning %.0f%% of it; %llu sleeps, "
	       "%llu ended by a doorbell\n",
	       what, r->pct, opt.spin_us / 1e6 + 0.5, r->sleep_pct, r->idle_pct,
	       (unsigned long long)r->sleeps, (unsigned long long)r->wakeups);
	report_obj(key);
	report_num("cpu_pct", r->pct);
	report_num("poller_asleep_pct", r->sleep_pct);
	report_num("poller_spinning_pct", r->idle_pct);
	report_u64("sleeps", r->sleeps);
	report_u64("doorbell_wakeups", r->wakeups);
	report_end();
}

/* What idle-queues measures: P4's rate with no idle queue before and after
 * (r0a, r0b) and with them (r1k), the empty loop with 1 queue and with
 * them, the idle service's CPU use with them and with one queue. */
struct idle_run {
	int poller_cpu, client_cpu, holder_cpu;
	double r0a, r0b, r1k, loop0, loop1k;
	struct idle_cpu cpu_q, cpu_0;
};

static void idle_measure(struct idle_run *r, const struct service *s,
			 const struct dp_stats_header *h)
{
	const struct dp_stats_poller *sp = stats_poller(h, 0);
	uint64_t ns = (uint64_t)(opt.seconds * 1e9);
	struct bench b;
	pid_t holder;
	int hold;

	bench_pin(r->client_cpu);
	bench_open(&b, 4096);
	timed_write_rate(&b, ns / 10);
	r->r0a = timed_write_rate(&b, ns);
	r->loop0 = empty_loop_ns(sp, 300);
	holder = idle_holder_start(r->holder_cpu, &hold);
	/* The poller takes new queues from its inbox at its next loop. */
	usleep(100000);
	r->loop1k = empty_loop_ns(sp, 300);
	timed_write_rate(&b, ns / 10);
	r->r1k = timed_write_rate(&b, ns);
	idle_cpu_use(s->pid, sp, &r->cpu_q);
	close(hold);
	waitpid(holder, NULL, 0);
	for (int i = 0; i < 500 && LD(h->svc.queues) > 1; i++)
		usleep(10000);
	timed_write_rate(&b, ns / 10);
	r->r0b = timed_write_rate(&b, ns);
	verify(&b, 4096);
	bench_close(&b);
	idle_cpu_use(s->pid, sp, &r->cpu_0);
}

static void idle_print(const struct idle_run *r)
{
	double base = (r->r0a + r->r0b) / 2, cost = 1 - r->r1k / base;
	unsigned nq = opt.idle_queues;

	printf("idle-queues: P4 (64 B WRITEs, batch 32, %.1f s) on one poller, with 0 and with "
	       "%u open idle queues (another process's, %u clients)\n",
	       opt.seconds, nq, (nq + 63) / 64);
	printf("  CPUs: poller %d, client %d, holder of the idle queues %d\n", r->poller_cpu,
	       r->client_cpu, r->holder_cpu);
	printf("  rate: 0 idle %.2f M/s (before) %.2f M/s (after); %u idle %.2f M/s; cost "
	       "%.1f%%  target < 5%%  %s\n",
	       r->r0a / 1e6, r->r0b / 1e6, nq, r->r1k / 1e6, 100 * cost, verdict(cost < 0.05));
	printf("  empty poller loop: %.0f ns with 1 queue, %.0f ns with %u more (%.2f ns per "
	       "idle queue)\n",
	       r->loop0, r->loop1k, nq, (r->loop1k - r->loop0) / nq);
	printf("  how the poller finds work: every loop drains the queues it polls; a queue "
	       "idle for 1024 loops (or when the poller sleeps) is parked: NEED_WAKEUP armed, "
	       "off the polled list, its client rings the SQ doorbell on its next submit. "
	       "Every 32 loops an epoll_wait(0) tells whether a doorbell rang; only then is "
	       "the parked list walked (dataplane/core/poller.c, docs/architecture.md \"Parked "
	       "queues\"). So idle queues cost a busy poller nearly nothing.\n");
	report_obj("idle_queues");
	report_u64("idle_queues", nq);
	report_num("poller_cpu", r->poller_cpu);
	report_num("client_cpu", r->client_cpu);
	report_num("desc_per_s_0_before", r->r0a);
	report_num("desc_per_s_0_after", r->r0b);
	report_num("desc_per_s_idle", r->r1k);
	report_num("cost", cost);
	report_str("target", "< 5%");
	report_bool("pass", cost < 0.05);
	report_num("empty_loop_ns_1_queue", r->loop0);
	report_num("empty_loop_ns_idle", r->loop1k);
	report_str("how_found",
		   "polled queues each loop; idle ones parked, woken by their doorbells");
	report_u64("spin_us", opt.spin_us);
	report_idle_cpu("idle_cpu_with_idle_queues", "with the idle queues open", &r->cpu_q);
	report_idle_cpu("idle_cpu_one_queue", "one queue open", &r->cpu_0);
	report_end();
}

void bench_idle_queues(void)
{
	int svc[SCALE_MAX_CPUS], cli[SCALE_MAX_CPUS], nsvc, ncli;
	const struct dp_stats_header *h;
	struct idle_run r;
	struct service s;
	char stats[64];
	size_t hlen;

	need_dataplaned("idle-queues", "the service");
	scale_cpus(svc, &nsvc, cli, &ncli);
	r.poller_cpu = svc[0];
	r.client_cpu = cli[0];
	r.holder_cpu = ncli > 1 ? cli[1] : cli[0];
	snprintf(stats, sizeof(stats), "dp-bench-idle-%d", (int)getpid());
	service_start_on(&s, svc, 1, stats);
	if (!(h = stats_map(stats, &hlen)))
		die("stats region", -ENOENT);
	idle_measure(&r, &s, h);
	munmap((void *)h, hlen);
	service_stop(&s);
	idle_print(&r);
}
