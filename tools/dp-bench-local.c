/* SPDX-License-Identifier: MIT */
/*
 * dp-bench-local.c - 64 B local WRITEs (docs/benchmarks.md, "Targets"):
 *   latency   P3: one outstanding, vs fi_pingpong -p shm
 *   rate      P4: batches of 32, vs io_uring NOP, batch 32
 *   overhead  P3 and P4 against services with the stats region on and off
 *             (--no-stats), alternating, in one run (--dataplaned)
 *   notify    a WRITE with a notification (DP_DESC_F_NOTIFY), submit to the
 *             owner's dp_notify_poll seeing it, vs a plain WRITE, submit to
 *             its completion; one thread, the writer and the segment's
 *             owner, busy-polls both in alternating blocks
 * With --dataplaned, P3 and P4 run against a service of our own (poller on
 * --service-cpu), stopped before the peer runs on the same CPUs
 * (fi_pingpong's server on the poller's CPU, its client and the io_uring
 * NOPs on the client's); the check of dataplaned processes alive is printed
 * beside each peer.
 */
#include <errno.h>
#include <liburing.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "dp-bench.h"

/* n timed 64 B WRITEs, one outstanding, on a bench of their own: P3. */
static void latency_samples(unsigned n, uint64_t *lat, const char *what)
{
	struct bench b;

	bench_open(&b, 4096);
	latency_run(&b, b.src, n, -1, "WRITE", what, lat);
	verify(&b, 4096);
	bench_close(&b);
}

/* The percentiles of a percentile plot, as text and JSON ("percentiles_us"
 * in the current object). */
static const double pct_list[] = {50, 90, 99, 99.9, 99.99, 99.999};

static void print_percentiles(const char *who, const uint64_t *sorted, size_t n)
{
	printf("  %-10s", who);
	report_obj("percentiles_us");
	for (size_t i = 0; i < sizeof(pct_list) / sizeof(pct_list[0]); i++) {
		char key[16];
		double v = percentile_sorted(sorted, n, pct_list[i]) / 1e3;

		snprintf(key, sizeof(key), "%g", pct_list[i]);
		/* Fewer samples than the percentile needs: no figure. */
		if ((double)n * (1 - pct_list[i] / 100) < 1) {
			printf(" %s%% -", key);
			report_num(key, 0.0 / 0.0);
			continue;
		}
		printf(" %s%% %.2f", key, v);
		report_num(key, v);
	}
	report_end();
	printf(" us\n");
}

/* fi_pingpong between two processes on this host, its server on the
 * poller's CPU and its client on ours: usec per transfer (one-way: half of
 * its round trip), or a negative number when it cannot run. The check of
 * dataplaned processes runs while its server is up. */
static pid_t fi_pingpong_server(const char *prov, unsigned size, unsigned iters)
{
	char s[16], it[16];
	pid_t srv;

	fflush(stdout); /* the child's freopen would write our buffer again */
	srv = fork();
	/* Never kill(-1, ...) below: that is every process we may signal. */
	if (srv < 0)
		die("fork", -errno);
	if (srv)
		return srv;
	bench_pin(opt.service_cpu);
	snprintf(s, sizeof(s), "%u", size);
	snprintf(it, sizeof(it), "%u", iters);
	freopen("/dev/null", "w", stdout);
	freopen("/dev/null", "w", stderr);
	execlp("fi_pingpong", "fi_pingpong", "-p", prov, "-e", "rdm", "-S", s, "-I", it,
	       (char *)NULL);
	_exit(127);
}

static double run_fi_pingpong(const char *prov, unsigned size, unsigned iters)
{
	int cpus[2] = {opt.service_cpu, opt.cpu};
	char cmd[256], line[512];
	double usec = -1;
	pid_t srv = fi_pingpong_server(prov, size, iters);
	FILE *f;

	usleep(300000);
	printf("  CPUs: peer fi_pingpong server %d, client %d\n", opt.service_cpu, opt.cpu);
	peer_check(cpus, opt.service_cpu == opt.cpu ? 1 : 2);
	fflush(stdout);
	snprintf(cmd, sizeof(cmd),
		 "taskset -c %d fi_pingpong -p %s -e rdm -S %u -I %u 127.0.0.1 2>/dev/null",
		 opt.cpu, prov, size, iters);
	f = popen(cmd, "r");
	while (f && fgets(line, sizeof(line), f)) {
		double mbs, us;
		char sent[32], ack[32], total[32], tm[32];
		unsigned bytes;

		if (sscanf(line, "%u %31s %31s %31s %31s %lf %lf", &bytes, sent, ack, total, tm,
			   &mbs, &us) == 7)
			usec = us;
	}
	if (f)
		pclose(f);
	kill(srv, SIGTERM);
	waitpid(srv, NULL, 0);
	report_obj("peer_cpus");
	report_num("server", opt.service_cpu);
	report_num("client", opt.cpu);
	report_end();
	return usec;
}

/* P3's peer, fi_pingpong -p shm, beside our p50 (us). */
static void latency_peer(double p50)
{
	double peer = run_fi_pingpong("shm", 64, opt.quick ? 20000 : 100000);

	if (peer <= 0) {
		printf("  fi_pingpong: not available (install libfabric-bin)\n");
		return;
	}
	printf("  fi_pingpong -p shm -e rdm -S 64: %.2f us/xfer (one-way: half a "
	       "round trip; its round trip %.2f us)\n"
	       "  ratio p50/peer one-way %.2fx   target <= 1.0x   %s;   p50/peer "
	       "round trip %.2fx\n",
	       peer, 2 * peer, p50 / peer, verdict(p50 <= peer), p50 / (2 * peer));
	report_str("peer", "fi_pingpong -p shm -e rdm -S 64");
	report_str("peer_figure", "one-way (usec/xfer, half a round trip)");
	report_num("peer_us", peer);
	report_num("peer_round_trip_us", 2 * peer);
	report_num("ratio", p50 / peer);
	report_num("ratio_round_trip", p50 / (2 * peer));
	report_str("target", "<= 1.0x");
	report_bool("pass", p50 <= peer);
	printf("  %-10s %s   (fi_pingpong reports a mean only, no percentiles: its "
	       "round trip %.2f us is drawn as a flat line)\n",
	       "peer", "percentiles n/a", 2 * peer);
	plot_latency_line("fi_pingpong -p shm round trip (its mean; no percentiles)", 2 * peer);
}

void bench_latency(void)
{
	unsigned n = opt.quick ? 20000 : 200000;
	uint64_t *lat = malloc(sizeof(*lat) * n);
	double p50;

	if (!lat)
		die("malloc", -ENOMEM);
	ours_begin();
	latency_samples(n, lat, "P3 latency");
	ours_end();
	p50 = lat[n / 2] / 1e3;
	plot_latency("dataplane P3: 64 B local WRITE, one outstanding, round trip", lat, n);
	printf("P3 latency, 64 B local WRITE, one outstanding (%u samples)\n", n);
	report_obj("latency");
	report_str("what", "P3: 64 B local WRITE, one outstanding, submit to completion seen");
	print_ours_cpus();
	printf("  dataplane  p50 %.2f us  p99 %.2f us  p999 %.2f us  max %.2f us  (a round trip: "
	       "client -> poller -> client)\n",
	       p50, lat[n * 99 / 100] / 1e3, lat[n * 999 / 1000] / 1e3, lat[n - 1] / 1e3);
	print_percentiles("dataplane", lat, n);
	report_str("figure", "round trip");
	report_u64("samples", n);
	report_u64("p50_ns", lat[n / 2]);
	report_u64("p90_ns", lat[n * 9 / 10]);
	report_u64("p99_ns", lat[n * 99 / 100]);
	report_u64("p999_ns", lat[n * 999 / 1000]);
	report_u64("max_ns", lat[n - 1]);
	if (opt.peers)
		latency_peer(p50);
	report_end();
	free(lat);
}

static double uring_nop_rate(unsigned batch, uint64_t total)
{
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	uint64_t t0, done = 0;

	if (io_uring_queue_init(256, &ring, 0) < 0)
		return -1;
	t0 = dp_now_ns();
	while (done < total) {
		for (unsigned i = 0; i < batch; i++)
			io_uring_prep_nop(io_uring_get_sqe(&ring));
		io_uring_submit_and_wait(&ring, batch);
		for (unsigned i = 0; i < batch; i++) {
			io_uring_wait_cqe(&ring, &cqe);
			io_uring_cqe_seen(&ring, cqe);
		}
		done += batch;
	}
	t0 = dp_now_ns() - t0;
	io_uring_queue_exit(&ring);
	return (double)total / (double)t0 * 1e9;
}

/* P4's workload on a bench of its own: total 64 B WRITEs in batches of 32
 * after a tenth as many to warm up, desc/s; pg (unless NULL) counts them. */
static double rate_run(uint64_t total, struct progress *pg, const char *label)
{
	struct bench b;
	double rate;

	bench_open(&b, 4096);
	write_rate(&b, 32, total / 10, 0, NULL);
	if (pg)
		progress_start(pg, label, total);
	rate = write_rate(&b, 32, total, 0, pg);
	if (pg)
		progress_end(pg);
	verify(&b, 4096);
	bench_close(&b);
	return rate;
}

/* P4's peer: io_uring NOPs on our CPU, beside ours (desc/s). */
static void rate_peer(uint64_t total, double ours)
{
	int cpu = opt.cpu;
	double peer;

	printf("  CPUs: peer io_uring NOPs submitted and reaped on CPU %d (no SQPOLL)\n", opt.cpu);
	peer_check(&cpu, 1);
	uring_nop_rate(32, total / 10);
	peer = uring_nop_rate(32, total);
	printf("  dataplane %.2f M desc/s   io_uring NOP %.2f M ops/s   ratio %.2fx   target >= 3x "
	       "  %s\n",
	       ours / 1e6, peer / 1e6, ours / peer, verdict(ours >= 3 * peer));
	report_num("peer_cpu", opt.cpu);
	report_str("peer", "io_uring NOP submit+reap, batch 32");
	report_num("peer_ops_per_s", peer);
	report_num("ratio", ours / peer);
	report_str("target", ">= 3x");
	report_bool("pass", ours >= 3 * peer);
}

void bench_rate(void)
{
	uint64_t total = opt.quick ? 1000000 : 10000000;
	struct progress pg;
	double ours;

	ours_begin();
	ours = rate_run(total, &pg, "P4 rate");
	plot_throughput("P4: 64 B local WRITEs, batch 32", &pg);
	ours_end();
	printf("P4 rate, 64 B local WRITEs, batch 32, one poller (%llu descriptors, "
	       "queue depth %u)\n",
	       (unsigned long long)total, opt.depth);
	report_obj("rate");
	report_str("what", "P4: 64 B local WRITEs, batch 32, one poller");
	print_ours_cpus();
	report_u64("descriptors", total);
	report_u64("queue_depth", opt.depth);
	report_num("desc_per_s", ours);
	if (opt.peers)
		rate_peer(total, ours);
	else
		printf("  dataplane %.2f M desc/s\n", ours / 1e6);
	report_end();
}

/* ---- stats overhead: the same P3/P4 runs against a service with its stats
 * region and one without (--no-stats), alternating, medians of the rounds ---- */

enum { ON, OFF };

/* Each round's figures, [ON] and [OFF]: P3 p50 and p99 (ns), P4 desc/s. */
struct overhead_runs {
	unsigned rounds, n;
	uint64_t total;
	double p50[2][OVERHEAD_ROUNDS_MAX], p99[2][OVERHEAD_ROUNDS_MAX],
		rate[2][OVERHEAD_ROUNDS_MAX];
};

/* One round: a service with stats and one without, in the order the round
 * says, so that drift hits both. */
static void overhead_round(struct overhead_runs *o, unsigned r, uint64_t *lat)
{
	for (unsigned k = 0; k < 2; k++) {
		unsigned mode = (r + k) % 2 ? OFF : ON;
		struct service svc;

		service_start(&svc, mode == ON);
		latency_samples(o->n, lat,
				mode == ON ? "overhead: P3, stats on" : "overhead: P3, stats off");
		o->p50[mode][r] = (double)lat[o->n / 2];
		o->p99[mode][r] = (double)lat[o->n * 99 / 100];
		o->rate[mode][r] = rate_run(o->total, NULL, NULL);
		service_stop(&svc);
	}
}

static void overhead_print(struct overhead_runs *o)
{
	double m50[2], m99[2], mrate[2], lat_pct, rate_pct, pair[OVERHEAD_ROUNDS_MAX], pair_pct;
	unsigned rounds = o->rounds;

	/* Paired: each round's on and off ran back to back, so their ratio
	 * cancels the drift between rounds that the medians keep (bench_median()
	 * sorts: pair first). */
	for (unsigned r = 0; r < rounds; r++)
		pair[r] = 100 * (o->rate[OFF][r] - o->rate[ON][r]) / o->rate[OFF][r];
	for (unsigned m = 0; m < 2; m++) {
		m50[m] = bench_median(o->p50[m], rounds);
		m99[m] = bench_median(o->p99[m], rounds);
		mrate[m] = bench_median(o->rate[m], rounds);
	}
	lat_pct = 100 * (m50[ON] - m50[OFF]) / m50[OFF];
	rate_pct = 100 * (mrate[OFF] - mrate[ON]) / mrate[OFF];
	pair_pct = bench_median(pair, rounds);
	printf("Stats overhead: services started with the stats region on and off (--no-stats),\n"
	       "alternating, %u rounds each, medians; P3 %u samples, P4 %llu descriptors\n"
	       "  CPUs: poller %d, client %d\n",
	       rounds, o->n, (unsigned long long)o->total, opt.service_cpu, opt.cpu);
	printf("  P3 p50   on %.2f us   off %.2f us   overhead %+.1f%%   target < 3%%   %s\n",
	       m50[ON] / 1e3, m50[OFF] / 1e3, lat_pct, verdict(lat_pct < 3));
	printf("  P3 p99   on %.2f us   off %.2f us\n", m99[ON] / 1e3, m99[OFF] / 1e3);
	printf("  P4 rate  on %.3f M/s  off %.3f M/s  overhead %+.1f%%   target < 3%%   %s\n",
	       mrate[ON] / 1e6, mrate[OFF] / 1e6, rate_pct, verdict(rate_pct < 3));
	printf("  P4 paired: median of the rounds' own overheads %+.1f%% (rounds %+.1f%% .. "
	       "%+.1f%%)\n",
	       pair_pct, pair[0], pair[rounds - 1]);
	report_obj("overhead");
	report_obj("cpus");
	report_num("poller", opt.service_cpu);
	report_num("client", opt.cpu);
	report_end();
	report_u64("rounds", rounds);
	report_u64("latency_samples", o->n);
	report_u64("rate_descriptors", o->total);
	report_num("p50_ns_stats_on", m50[ON]);
	report_num("p50_ns_stats_off", m50[OFF]);
	report_num("p99_ns_stats_on", m99[ON]);
	report_num("p99_ns_stats_off", m99[OFF]);
	report_num("latency_overhead_pct", lat_pct);
	report_num("desc_per_s_stats_on", mrate[ON]);
	report_num("desc_per_s_stats_off", mrate[OFF]);
	report_num("rate_overhead_pct", rate_pct);
	report_num("rate_overhead_paired_pct", pair_pct);
	report_num("target_pct", 3);
	report_bool("pass", lat_pct < 3 && rate_pct < 3);
	report_end();
}

void bench_overhead(void)
{
	struct overhead_runs o;
	const char *saved = opt.socket;
	uint64_t *lat;

	need_dataplaned("overhead", "the services");
	o.rounds = opt.rounds ? opt.rounds : opt.quick ? 3 : 7;
	o.n = opt.quick ? 20000 : 100000;
	o.total = opt.quick ? 1000000 : 4000000;
	if (!(lat = malloc(sizeof(*lat) * o.n)))
		die("malloc", -ENOMEM);
	/* A service of someone else's (--socket) spins for a while after our
	 * last descriptor: let it go to sleep first. */
	if (saved)
		usleep(1500000);
	for (unsigned r = 0; r < o.rounds; r++)
		overhead_round(&o, r, lat);
	overhead_print(&o);
	free(lat);
	opt.socket = saved;
}

/* ---- notifications ---- */

/* One 64 B WRITE with a notification: submit -> the owner (this client)
 * sees it on its ring, busy-polled; the completion is reaped after. */
static uint64_t notify_one(struct bench *b, uint64_t off, uint64_t ud)
{
	struct dp_notification n;
	struct dp_cqe cqe;
	struct dp_desc d;
	uint64_t t0, ns;
	int rc;

	dp_prep_write_notify(&d, b->src, off, b->seg, off, 64, ud, ud);
	t0 = dp_now_ns();
	if ((rc = dp_submit(b->q, &d, 1)) != 1)
		die("notify WRITE", rc < 0 ? rc : -EAGAIN);
	while ((rc = dp_notify_poll(b->c, &n, 1)) == 0)
		;
	ns = dp_now_ns() - t0;
	if (rc < 0)
		die("dp_notify_poll", rc);
	if (n.value != ud || n.offset != off || n.len != 64 || n.dropped)
		die("notification", -EBADMSG);
	while ((rc = dp_poll(b->q, &cqe, 1)) == 0)
		;
	if (rc < 0 || cqe.status || cqe.user_data != ud)
		die("notify WRITE completion", rc < 0 ? rc : cqe.status ? cqe.status : -EBADMSG);
	return ns;
}

/* n of each, in alternating blocks: drift of the machine hits both alike.
 * lat_n and lat_w get them sorted (ns). */
static void notify_samples(unsigned n, uint64_t *lat_n, uint64_t *lat_w)
{
	const unsigned block = 1000;
	unsigned in = 0, iw = 0;
	struct progress pg;
	struct bench b;
	int rc;

	bench_open(&b, 4096);
	if ((rc = dp_notify_open(b.c, 256)) < 0)
		die("dp_notify_open", rc);
	for (unsigned i = 0; i < n / 10; i++) {
		one_write(&b, 0, 64, i);
		notify_one(&b, 0, i);
	}
	progress_start(&pg, "notify latency", 2 * n);
	while (in < n || iw < n) {
		for (unsigned k = 0; k < block && in < n; k++, in++)
			lat_n[in] = notify_one(&b, (in % 64) * 64, in);
		for (unsigned k = 0; k < block && iw < n; k++, iw++)
			lat_w[iw] = one_write(&b, (iw % 64) * 64, 64, iw);
		progress_update(&pg, in + iw);
	}
	progress_end(&pg);
	verify(&b, 4096);
	bench_close(&b);
	qsort(lat_n, n, sizeof(*lat_n), cmp_u64);
	qsort(lat_w, n, sizeof(*lat_w), cmp_u64);
}

void bench_notify(void)
{
	const unsigned n = opt.quick ? 20000 : 200000;
	uint64_t *lat_n = malloc(sizeof(uint64_t) * n), *lat_w = malloc(sizeof(uint64_t) * n);
	double p50n, p50w;

	if (!lat_n || !lat_w)
		die("malloc", -ENOMEM);
	ours_begin();
	notify_samples(n, lat_n, lat_w);
	ours_end();
	p50n = lat_n[n / 2] / 1e3;
	p50w = lat_w[n / 2] / 1e3;
	printf("notify latency, 64 B local WRITE + notification vs a plain 64 B WRITE, one "
	       "outstanding (%u samples each)\n",
	       n);
	report_obj("notify");
	report_str("what", "64 B local WRITE with DP_DESC_F_NOTIFY, submit to the owner's "
			   "dp_notify_poll, vs plain 64 B WRITE, submit to completion");
	print_ours_cpus();
	printf("  notify   p50 %.2f us  p99 %.2f us  max %.2f us  (submit -> owner sees the "
	       "notification)\n",
	       p50n, lat_n[n * 99 / 100] / 1e3, lat_n[n - 1] / 1e3);
	printf("  plain    p50 %.2f us  p99 %.2f us  max %.2f us  (submit -> completion)\n", p50w,
	       lat_w[n * 99 / 100] / 1e3, lat_w[n - 1] / 1e3);
	printf("  ratio notify/plain p50 %.2fx  p99 %.2fx\n", p50n / p50w,
	       (double)lat_n[n * 99 / 100] / (double)lat_w[n * 99 / 100]);
	report_u64("samples", n);
	report_u64("notify_p50_ns", lat_n[n / 2]);
	report_u64("notify_p99_ns", lat_n[n * 99 / 100]);
	report_u64("plain_p50_ns", lat_w[n / 2]);
	report_u64("plain_p99_ns", lat_w[n * 99 / 100]);
	report_num("ratio_p50", p50n / p50w);
	report_num("ratio_p99", (double)lat_n[n * 99 / 100] / (double)lat_w[n * 99 / 100]);
	report_end();
	free(lat_n);
	free(lat_w);
}
