/* SPDX-License-Identifier: MIT */
/*
 * dp-bench - load generator for a running dataplaned, measured side by side
 * with its peers in the same run (../shared/PERF.md):
 *   P3 latency of one 64 B local WRITE, one outstanding  vs fi_pingpong -p shm
 *   P4 rate of 64 B local WRITEs in batches of 32        vs io_uring NOP, batch 32
 *   P5 bandwidth of 1 MiB .. 1 GiB local WRITEs           vs single-thread memcpy
 * Every transfer's bytes are checked after the timed runs.
 * overhead: P3 and P4 against services dp-bench starts itself with the stats
 * region on and off (--no-stats), alternating, in one run (--dataplaned).
 * fabric / bypass (--peer HOST:PORT --peer-socket PATH): P6 4 MiB WRITEs and
 * P7 64 B WRITEs to a segment of another service (tools/bench-fabric.sh runs
 * the peers), and the same to a segment of this service vs the other one.
 *
 * usage: dp-bench [--socket PATH] [--cpu N] [--quick] [--max-size BYTES]
 *                 [--no-peers] [--json] [--plot FILE.png]
 *                 [--dataplaned PATH [--service-cpu N] [--rounds N]]
 *                 [--peer HOST:PORT --peer-socket PATH]
 *                 [latency|rate|bandwidth|overhead|fabric|bypass|all]
 * Long runs show a progress line on stderr; --json prints the results as one
 * JSON document on stdout (the text goes to stderr); --plot draws the latency
 * CDF and throughput over time with gnuplot.
 * Exit: 0 when every run completed and verified, 1 on a failure, 2 on usage.
 */
#include <errno.h>
#include <getopt.h>
#include <liburing.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-report.h"
#include "dataplane.h"

#define MiB (1ull << 20)

static const char *sock_path;
static int client_cpu = 0;
static bool quick, with_peers = true;
static uint64_t max_size = 1024 * MiB;
static const char *plot_png, *dataplaned_path;
static int service_cpu = -1;
static unsigned overhead_rounds; /* 0: 3 with --quick, else 7 */

struct bench {
	struct dp_client *c;
	struct dp_queue *q;
	int src, dst, seg;
	uint8_t *srcp, *dstp;
	uint64_t len;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "dp-bench: %s: %s\n", what, dp_strerror(rc));
	exit(1);
}

static void bench_open(struct bench *b, uint64_t len)
{
	int rc;

	b->len = len;
	if ((rc = dp_connect(sock_path, "dp-bench", &b->c)) < 0)
		die("connect", rc);
	if ((rc = dp_queue_create(b->c, 256, &b->q)) < 0)
		die("queue", rc);
	if ((b->src = dp_alloc(b->c, len, DP_ALLOC_HUGE, (void **)&b->srcp)) < 0)
		die("alloc", b->src);
	if ((b->dst = dp_alloc(b->c, len, DP_ALLOC_HUGE, (void **)&b->dstp)) < 0)
		die("alloc", b->dst);
	if ((rc = dp_segment_export(b->c, b->dst, "dp-bench", DP_ACCESS_RW)) < 0)
		die("export", rc);
	if ((b->seg = dp_segment_open(b->c, NULL, "dp-bench", DP_ACCESS_RW)) < 0)
		die("open", b->seg);
	for (uint64_t i = 0; i < len; i++)
		b->srcp[i] = (uint8_t)(i * 131 + 7);
	memset(b->dstp, 0, len);
}

static void bench_close(struct bench *b)
{
	dp_close(b->c);
}

/* Runs one descriptor to completion by busy-polling; returns ns. */
static uint64_t one_write(struct bench *b, uint64_t off, uint64_t len, uint64_t ud)
{
	struct dp_desc d;
	struct dp_cqe cqe;
	uint64_t t0;
	int rc;

	dp_prep_write(&d, b->src, off, b->seg, off, len, ud);
	t0 = now_ns();
	if ((rc = dp_submit(b->q, &d, 1)) != 1)
		die("submit", rc < 0 ? rc : -EAGAIN);
	while ((rc = dp_poll(b->q, &cqe, 1)) == 0)
		;
	if (rc < 0 || cqe.status || cqe.user_data != ud)
		die("completion", rc < 0 ? rc : cqe.status ? cqe.status : -EBADMSG);
	return now_ns() - t0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void verify(const struct bench *b, uint64_t len)
{
	if (memcmp(b->srcp, b->dstp, len)) {
		fprintf(stderr, "dp-bench: DATA MISMATCH after the timed run\n");
		exit(1);
	}
}

/* fi_pingpong between two processes on this host: usec per transfer (its
 * one-way figure), or a negative number when it cannot run. */
static double run_fi_pingpong(const char *prov, unsigned size, unsigned iters)
{
	char cmd[256], line[512];
	double usec = -1;
	pid_t srv;
	FILE *f;

	srv = fork();
	if (srv == 0) {
		char s[16], it[16];

		pin(1);
		snprintf(s, sizeof(s), "%u", size);
		snprintf(it, sizeof(it), "%u", iters);
		freopen("/dev/null", "w", stdout);
		freopen("/dev/null", "w", stderr);
		execlp("fi_pingpong", "fi_pingpong", "-p", prov, "-e", "rdm", "-S", s, "-I", it,
		       (char *)NULL);
		_exit(127);
	}
	usleep(300000);
	snprintf(cmd, sizeof(cmd),
		 "taskset -c 0 fi_pingpong -p %s -e rdm -S %u -I %u 127.0.0.1 2>/dev/null", prov,
		 size, iters);
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
	return usec;
}

static const char *verdict(bool ok)
{
	return ok ? "PASS" : "MISS";
}

/* n timed 64 B WRITEs, one outstanding, after n / 10 to warm up; lat gets
 * them sorted (ns). */
static void latency_samples(unsigned n, uint64_t *lat, const char *what)
{
	struct progress pg;
	struct bench b;

	bench_open(&b, 4096);
	for (unsigned i = 0; i < n / 10; i++)
		one_write(&b, 0, 64, i);
	progress_start(&pg, what, n);
	for (unsigned i = 0; i < n; i++) {
		lat[i] = one_write(&b, (i % 64) * 64, 64, i);
		progress_update(&pg, i + 1);
	}
	progress_end(&pg);
	verify(&b, 4096);
	bench_close(&b);
	qsort(lat, n, sizeof(*lat), cmp_u64);
}

static void bench_latency(void)
{
	unsigned n = quick ? 20000 : 200000;
	uint64_t *lat = malloc(sizeof(*lat) * n);
	double peer = -1;

	if (!lat)
		die("malloc", -ENOMEM);
	latency_samples(n, lat, "P3 latency");
	plot_latency("P3: 64 B local WRITE, one outstanding", lat, n);
	report_obj("latency");
	report_str("what", "P3: 64 B local WRITE, one outstanding, submit to completion seen");
	report_u64("samples", n);
	report_u64("p50_ns", lat[n / 2]);
	report_u64("p90_ns", lat[n * 9 / 10]);
	report_u64("p99_ns", lat[n * 99 / 100]);
	report_u64("p999_ns", lat[n * 999 / 1000]);
	report_u64("max_ns", lat[n - 1]);
	if (with_peers)
		peer = run_fi_pingpong("shm", 64, quick ? 20000 : 100000);
	printf("P3 latency, 64 B local WRITE, one outstanding (%u samples)\n", n);
	printf("  dataplane  p50 %.2f us  p99 %.2f us  p999 %.2f us  max %.2f us\n",
	       lat[n / 2] / 1e3, lat[n * 99 / 100] / 1e3, lat[n * 999 / 1000] / 1e3,
	       lat[n - 1] / 1e3);
	if (peer > 0)
		printf("  fi_pingpong -p shm -e rdm -S 64: %.2f us/xfer\n"
		       "  ratio p50/peer %.2fx   target <= 1.0x   %s\n",
		       peer, lat[n / 2] / 1e3 / peer, verdict(lat[n / 2] / 1e3 <= peer));
	else
		printf("  fi_pingpong: not available (install libfabric-bin)\n");
	if (peer > 0) {
		report_str("peer", "fi_pingpong -p shm -e rdm -S 64");
		report_num("peer_us", peer);
		report_num("ratio", lat[n / 2] / 1e3 / peer);
		report_str("target", "<= 1.0x");
		report_bool("pass", lat[n / 2] / 1e3 <= peer);
	}
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
	t0 = now_ns();
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
	t0 = now_ns() - t0;
	io_uring_queue_exit(&ring);
	return (double)total / (double)t0 * 1e9;
}

static double local_write_rate(struct bench *b, unsigned batch, uint64_t total, struct progress *pg)
{
	struct dp_desc d[64];
	struct dp_cqe cqe[256];
	uint64_t t0, sent = 0, done = 0;

	t0 = now_ns();
	while (done < total) {
		if (sent < total) {
			unsigned n = total - sent < batch ? (unsigned)(total - sent) : batch;

			for (unsigned i = 0; i < n; i++)
				dp_prep_write(&d[i], b->src, ((sent + i) % 64) * 64, b->seg,
					      ((sent + i) % 64) * 64, 64, sent + i);
			int k = dp_submit(b->q, d, n);
			if (k < 0)
				die("submit", k);
			sent += (uint64_t)k;
		}
		int k = dp_poll(b->q, cqe, 256);
		if (k < 0)
			die("poll", k);
		for (int i = 0; i < k; i++)
			if (cqe[i].status)
				die("completion", cqe[i].status);
		done += (uint64_t)k;
		if (pg && k)
			progress_update(pg, done);
	}
	return (double)total / (double)(now_ns() - t0) * 1e9;
}

static void bench_rate(void)
{
	uint64_t total = quick ? 1000000 : 10000000;
	double ours, peer;
	struct progress pg;
	struct bench b;

	bench_open(&b, 4096);
	local_write_rate(&b, 32, total / 10, NULL);
	progress_start(&pg, "P4 rate", total);
	ours = local_write_rate(&b, 32, total, &pg);
	progress_end(&pg);
	plot_throughput("P4: 64 B local WRITEs, batch 32", &pg);
	verify(&b, 4096);
	bench_close(&b);
	uring_nop_rate(32, total / 10);
	peer = uring_nop_rate(32, total);
	printf("P4 rate, 64 B local WRITEs, batch 32, one poller (%llu descriptors)\n",
	       (unsigned long long)total);
	printf("  dataplane %.2f M desc/s   io_uring NOP %.2f M ops/s   ratio %.2fx   target >= 3x "
	       "  %s\n",
	       ours / 1e6, peer / 1e6, ours / peer, verdict(ours >= 3 * peer));
	report_obj("rate");
	report_str("what", "P4: 64 B local WRITEs, batch 32, one poller");
	report_u64("descriptors", total);
	report_num("desc_per_s", ours);
	report_str("peer", "io_uring NOP submit+reap, batch 32");
	report_num("peer_ops_per_s", peer);
	report_num("ratio", ours / peer);
	report_str("target", ">= 3x");
	report_bool("pass", ours >= 3 * peer);
	report_end();
}

static void bench_bandwidth(void)
{
	struct dp_desc d;
	struct dp_cqe cqe;
	struct progress pg;
	struct bench b;
	uint64_t total = 0, done = 0;

	bench_open(&b, max_size);
	for (uint64_t len = MiB; len <= max_size; len *= 4)
		total += 5 * len;
	progress_start(&pg, "P5 bandwidth (bytes)", total);
	report_arr("bandwidth");
	printf("P5 bandwidth, local host WRITE vs single-thread memcpy (GB/s, median of 5)\n");
	printf("  %10s %10s %10s %8s\n", "size", "dataplane", "memcpy", "ratio");
	for (uint64_t len = MiB; len <= max_size; len *= 4) {
		double ours[5], peer[5];
		unsigned reps = 5;

		for (unsigned r = 0; r < reps; r++) {
			uint64_t t0 = now_ns();
			int rc;

			dp_prep_write(&d, b.src, 0, b.seg, 0, len, r);
			if ((rc = dp_submit(b.q, &d, 1)) != 1)
				die("submit", rc);
			while ((rc = dp_poll(b.q, &cqe, 1)) == 0)
				;
			if (rc < 0 || cqe.status)
				die("completion", rc < 0 ? rc : cqe.status);
			ours[r] = (double)len / (double)(now_ns() - t0);
			t0 = now_ns();
			memcpy(b.dstp, b.srcp, len);
			peer[r] = (double)len / (double)(now_ns() - t0);
			done += len;
			progress_update(&pg, done);
		}
		memset(b.dstp, 0, len);
		dp_prep_write(&d, b.src, 0, b.seg, 0, len, 99);
		dp_submit(b.q, &d, 1);
		while (dp_poll(b.q, &cqe, 1) == 0)
			;
		verify(&b, len);
		qsort(ours, reps, sizeof(double), cmp_double);
		qsort(peer, reps, sizeof(double), cmp_double);
		printf("  %7llu MiB %10.2f %10.2f %7.2fx  %s\n", (unsigned long long)(len / MiB),
		       ours[reps / 2], peer[reps / 2], ours[reps / 2] / peer[reps / 2],
		       verdict(ours[reps / 2] >= 0.9 * peer[reps / 2]));
		report_obj(NULL);
		report_u64("size", len);
		report_num("gb_per_s", ours[reps / 2]);
		report_num("memcpy_gb_per_s", peer[reps / 2]);
		report_num("ratio", ours[reps / 2] / peer[reps / 2]);
		report_bool("pass", ours[reps / 2] >= 0.9 * peer[reps / 2]);
		report_end();
	}
	progress_end(&pg);
	report_end();
	printf("  target >= 0.9x memcpy\n");
	bench_close(&b);
}

/* ---- stats overhead: the same P3/P4 runs against a service with its stats
 * region and one without (--no-stats), alternating, medians of the rounds ---- */

struct service {
	pid_t pid;
	char dir[64], sock[108];
};

static bool can_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), ok;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

static void service_start(struct service *s, bool stats)
{
	char cpu[16], log[128];
	int status;

	snprintf(s->dir, sizeof(s->dir), "/tmp/dp-bench-svc-XXXXXX");
	if (!mkdtemp(s->dir))
		die("mkdtemp", -errno);
	snprintf(s->sock, sizeof(s->sock), "%s/dp.sock", s->dir);
	snprintf(log, sizeof(log), "%s/dataplaned.log", s->dir);
	snprintf(cpu, sizeof(cpu), "%d", service_cpu);
	s->pid = fork();
	if (s->pid < 0)
		die("fork", -errno);
	if (s->pid == 0) {
		/* We are pinned to the client's CPU; the service gets its own. */
		pin(service_cpu);
		if (!freopen(log, "w", stderr))
			_exit(127);
		execl(dataplaned_path, "dataplaned", "--socket", s->sock, "--cpus", cpu,
		      "--spin-us", "1000000", "--log-level", "warn", "--provider", "none",
		      stats ? NULL : "--no-stats", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 1000 && !can_connect(s->sock); i++) {
		if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
			fprintf(stderr, "dp-bench: %s exited at start (see %s)\n", dataplaned_path,
				log);
			exit(1);
		}
		usleep(10000);
	}
	sock_path = s->sock;
}

static void service_stop(struct service *s)
{
	char path[160];
	int status;

	kill(s->pid, SIGTERM);
	waitpid(s->pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		fprintf(stderr, "dp-bench: dataplaned exited with status %d\n", status);
	snprintf(path, sizeof(path), "%s/dataplaned.log", s->dir);
	unlink(path);
	rmdir(s->dir);
	sock_path = NULL;
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void bench_overhead(void)
{
	enum { ON, OFF };
	unsigned rounds = overhead_rounds ? overhead_rounds : quick ? 3 : 7;
	unsigned n = quick ? 20000 : 100000;
	uint64_t total = quick ? 1000000 : 4000000;
	double p50[2][32], p99[2][32], rate[2][32], m50[2], m99[2], mrate[2], lat_pct, rate_pct;
	double pair[32], pair_pct, pair_lo, pair_hi;
	uint64_t *lat = malloc(sizeof(*lat) * n);
	const char *saved = sock_path;

	if (!dataplaned_path) {
		fprintf(stderr,
			"dp-bench: overhead needs --dataplaned PATH (it starts the services)\n");
		exit(2);
	}
	if (!lat)
		die("malloc", -ENOMEM);
	if (service_cpu < 0)
		service_cpu = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? 1 : 0;
	/* A service started before us spins for a while after its last
	 * descriptor (bench-local.sh's): let it go to sleep first. */
	usleep(1500000);
	for (unsigned r = 0; r < rounds; r++) {
		for (unsigned k = 0; k < 2; k++) {
			/* Alternate which goes first, so drift hits both. */
			unsigned mode = (r + k) % 2 ? OFF : ON;
			struct service svc;
			struct bench b;

			service_start(&svc, mode == ON);
			latency_samples(n, lat,
					mode == ON ? "overhead: P3, stats on"
						   : "overhead: P3, stats off");
			p50[mode][r] = (double)lat[n / 2];
			p99[mode][r] = (double)lat[n * 99 / 100];
			bench_open(&b, 4096);
			local_write_rate(&b, 32, total / 10, NULL);
			rate[mode][r] = local_write_rate(&b, 32, total, NULL);
			verify(&b, 4096);
			bench_close(&b);
			service_stop(&svc);
		}
	}
	/* Paired: each round's on and off ran back to back, so their ratio
	 * cancels the drift between rounds that the medians keep (median()
	 * sorts: pair first). */
	for (unsigned r = 0; r < rounds; r++)
		pair[r] = 100 * (rate[OFF][r] - rate[ON][r]) / rate[OFF][r];
	for (unsigned m = 0; m < 2; m++) {
		m50[m] = median(p50[m], rounds);
		m99[m] = median(p99[m], rounds);
		mrate[m] = median(rate[m], rounds);
	}
	lat_pct = 100 * (m50[ON] - m50[OFF]) / m50[OFF];
	rate_pct = 100 * (mrate[OFF] - mrate[ON]) / mrate[OFF];
	pair_pct = median(pair, rounds);
	pair_lo = pair[0];
	pair_hi = pair[rounds - 1];
	printf("Stats overhead: services started with the stats region on and off (--no-stats),\n"
	       "alternating, %u rounds each, medians; P3 %u samples, P4 %llu descriptors\n",
	       rounds, n, (unsigned long long)total);
	printf("  P3 p50   on %.2f us   off %.2f us   overhead %+.1f%%   target < 3%%   %s\n",
	       m50[ON] / 1e3, m50[OFF] / 1e3, lat_pct, verdict(lat_pct < 3));
	printf("  P3 p99   on %.2f us   off %.2f us\n", m99[ON] / 1e3, m99[OFF] / 1e3);
	printf("  P4 rate  on %.3f M/s  off %.3f M/s  overhead %+.1f%%   target < 3%%   %s\n",
	       mrate[ON] / 1e6, mrate[OFF] / 1e6, rate_pct, verdict(rate_pct < 3));
	printf("  P4 paired: median of the rounds' own overheads %+.1f%% (rounds %+.1f%% .. "
	       "%+.1f%%)\n",
	       pair_pct, pair_lo, pair_hi);
	report_obj("overhead");
	report_u64("rounds", rounds);
	report_u64("latency_samples", n);
	report_u64("rate_descriptors", total);
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
	free(lat);
	sock_path = saved;
}

/* ---- fabric (P6, P7): WRITEs to a segment of another service ---- */

/* --peer HOST:PORT names the other service as ours reaches it; dp-bench is
 * a client of both (--peer-socket is the other's control socket), exports
 * the target there and checks the bytes in its own mapping. */
static const char *peer_addr, *peer_sock;

struct fabric_fig {
	double bw1, bwn; /* GB/s: 4 MiB WRITEs, one and FABRIC_DEPTH outstanding */
	double p50, p99; /* us: 64 B WRITE, one outstanding */
	uint32_t path;	 /* DP_CQE_F_* the completions reported */
};

#define FABRIC_LEN (64 * MiB)
#define FABRIC_XFER (4 * MiB)
#define FABRIC_DEPTH 8

/* The client sleeps on its doorbell (dp_wait) rather than spin: on a
 * 2-core machine it shares a CPU with the initiating service's poller. */
static uint64_t fabric_one(struct bench *b, uint64_t off, uint64_t len, uint64_t ud)
{
	struct dp_desc d;
	struct dp_cqe cqe;
	uint64_t t0;
	int rc;

	dp_prep_write(&d, b->src, off, b->seg, off, len, ud);
	t0 = now_ns();
	if ((rc = dp_submit(b->q, &d, 1)) != 1)
		die("submit", rc < 0 ? rc : -EAGAIN);
	rc = dp_wait(b->q, &cqe, 1, 10000);
	if (rc != 1 || cqe.status || cqe.user_data != ud)
		die("fabric WRITE", rc < 0	 ? rc
				    : rc == 0	 ? -ETIMEDOUT
				    : cqe.status ? cqe.status
						 : -EBADMSG);
	return now_ns() - t0;
}

/* Runs `total` 4 MiB WRITEs with up to `depth` in flight, rotating over the
 * region; returns GB/s. */
static double fabric_stream(struct bench *b, unsigned depth, unsigned total, uint32_t *path)
{
	struct dp_cqe cqe[FABRIC_DEPTH];
	unsigned sent = 0, done = 0;
	uint64_t t0 = now_ns();

	while (done < total) {
		while (sent < total && sent - done < depth) {
			uint64_t off = (sent % (FABRIC_LEN / FABRIC_XFER)) * FABRIC_XFER;
			struct dp_desc d;
			int rc;

			dp_prep_write(&d, b->src, off, b->seg, off, FABRIC_XFER, sent);
			if ((rc = dp_submit(b->q, &d, 1)) != 1)
				die("submit", rc < 0 ? rc : -EAGAIN);
			sent++;
		}
		int k = dp_wait(b->q, cqe, FABRIC_DEPTH, 10000);

		if (k <= 0)
			die("wait", k < 0 ? k : -ETIMEDOUT);
		for (int i = 0; i < k; i++) {
			if (cqe[i].status)
				die("fabric WRITE", cqe[i].status);
			*path = cqe[i].flags;
		}
		done += (unsigned)k;
	}
	return (double)total * FABRIC_XFER / (double)(now_ns() - t0);
}

/* One measurement: the target exported by the other service and opened
 * through --peer, or (local) exported by ours and opened as ours. */
static void fabric_measure(bool local, struct fabric_fig *f)
{
	unsigned n = quick ? 2000 : 20000, total = quick ? 64 : 256;
	uint64_t *lat = malloc(sizeof(*lat) * n);
	struct dp_client *pc = NULL;
	struct bench b;
	int rc;

	if (!lat)
		die("malloc", -ENOMEM);
	b.len = FABRIC_LEN;
	if ((rc = dp_connect(sock_path, "dp-bench", &b.c)) < 0)
		die("connect", rc);
	if (!local && (rc = dp_connect(peer_sock, "dp-bench-target", &pc)) < 0)
		die("connect to --peer-socket", rc);
	if ((rc = dp_queue_create(b.c, 256, &b.q)) < 0)
		die("queue", rc);
	if ((b.src = dp_alloc(b.c, FABRIC_LEN, 0, (void **)&b.srcp)) < 0)
		die("alloc", b.src);
	if ((b.dst = dp_alloc(local ? b.c : pc, FABRIC_LEN, 0, (void **)&b.dstp)) < 0)
		die("alloc", b.dst);
	if ((rc = dp_segment_export(local ? b.c : pc, b.dst, "dp-bench-fabric", DP_ACCESS_RW)) < 0)
		die("export", rc);
	b.seg = dp_segment_open(b.c, local ? NULL : peer_addr, "dp-bench-fabric", DP_ACCESS_RW);
	if (b.seg < 0)
		die(local ? "open (local)" : "open through --peer", b.seg);
	for (uint64_t i = 0; i < FABRIC_LEN; i++)
		b.srcp[i] = (uint8_t)(i * 131 + 7);

	fabric_stream(&b, FABRIC_DEPTH, total / 8, &f->path); /* warm-up */
	f->bw1 = fabric_stream(&b, 1, total / 2, &f->path);
	f->bwn = fabric_stream(&b, FABRIC_DEPTH, total, &f->path);
	for (unsigned i = 0; i < n / 10; i++)
		fabric_one(&b, 0, 64, i);
	for (unsigned i = 0; i < n; i++)
		lat[i] = fabric_one(&b, (i % 64) * 64, 64, i);
	qsort(lat, n, sizeof(*lat), cmp_u64);
	f->p50 = lat[n / 2] / 1e3;
	f->p99 = lat[n * 99 / 100] / 1e3;
	free(lat);

	/* The timed bytes are not checked one by one; a last full pass is. */
	memset(b.dstp, 0, FABRIC_LEN);
	for (uint64_t off = 0; off < FABRIC_LEN; off += FABRIC_XFER)
		fabric_one(&b, off, FABRIC_XFER, off);
	verify(&b, FABRIC_LEN);
	dp_close(b.c);
	if (pc)
		dp_close(pc);
}

static const char *path_name(uint32_t flags)
{
	return flags & DP_CQE_F_FABRIC ? "fabric" : flags & DP_CQE_F_LOCAL ? "local" : "?";
}

static void fabric_need_peer(void)
{
	if (!peer_addr || !peer_sock) {
		fprintf(stderr, "dp-bench: fabric and bypass need --peer HOST:PORT and "
				"--peer-socket PATH\n");
		exit(2);
	}
}

/* P6 and P7 through the fabric; the peers' figures come from the caller
 * (tools/bench-fabric.sh runs them between the same namespaces). */
static void bench_fabric(void)
{
	struct fabric_fig f;

	fabric_need_peer();
	fabric_measure(false, &f);
	printf("fabric: %s via %s, completions on the %s path\n", sock_path ? sock_path : "default",
	       peer_addr, path_name(f.path));
	printf("P6 dataplane 4 MiB WRITE: 1 outstanding %.3f GB/s, %u outstanding %.3f GB/s\n",
	       f.bw1, FABRIC_DEPTH, f.bwn);
	printf("P7 dataplane 64 B WRITE, one outstanding: p50 %.2f us, p99 %.2f us\n", f.p50,
	       f.p99);
}

/* The same transfers to a segment of this service (the self-loopback
 * bypass) and to one of another service on the same host. */
static void bench_bypass(void)
{
	struct fabric_fig l, r;

	fabric_need_peer();
	fabric_measure(true, &l);
	fabric_measure(false, &r);
	printf("bypass: same host, same transfers; local = a segment of this service, "
	       "fabric = of another service (%s)\n",
	       peer_addr);
	printf("  %-34s %12s %12s %8s\n", "", "local", "fabric", "saves");
	printf("  %-34s %12.3f %12.3f %7.1fx\n", "4 MiB WRITE, 1 outstanding, GB/s", l.bw1, r.bw1,
	       l.bw1 / r.bw1);
	printf("  %-34s %12.3f %12.3f %7.1fx\n", "4 MiB WRITE, 8 outstanding, GB/s", l.bwn, r.bwn,
	       l.bwn / r.bwn);
	printf("  %-34s %12.2f %12.2f %7.1fx\n", "64 B WRITE p50, us", l.p50, r.p50, r.p50 / l.p50);
	printf("  %-34s %12.2f %12.2f %7.1fx\n", "64 B WRITE p99, us", l.p99, r.p99, r.p99 / l.p99);
	printf("  paths reported: %s, %s\n", path_name(l.path), path_name(r.path));
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"socket", required_argument, 0, 's'},
					     {"cpu", required_argument, 0, 'c'},
					     {"quick", no_argument, 0, 'q'},
					     {"max-size", required_argument, 0, 'm'},
					     {"no-peers", no_argument, 0, 'n'},
					     {"help", no_argument, 0, 'h'},
					     {"json", no_argument, 0, 'j'},
					     {"plot", required_argument, 0, 'p'},
					     {"dataplaned", required_argument, 0, 'd'},
					     {"service-cpu", required_argument, 0, 'S'},
					     {"rounds", required_argument, 0, 'r'},
					     {"peer", required_argument, 0, 'P'},
					     {"peer-socket", required_argument, 0, 'T'},
					     {0, 0, 0, 0}};
	const char *what = "all";
	int o;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 's':
			sock_path = optarg;
			break;
		case 'c':
			client_cpu = atoi(optarg);
			break;
		case 'q':
			quick = true;
			break;
		case 'm':
			max_size = strtoull(optarg, NULL, 0);
			if (max_size < MiB) {
				fprintf(stderr, "dp-bench: --max-size below 1 MiB\n");
				return 2;
			}
			break;
		case 'n':
			with_peers = false;
			break;
		case 'j':
			report_json_begin();
			break;
		case 'p':
			plot_png = optarg;
			break;
		case 'd':
			dataplaned_path = optarg;
			break;
		case 'S':
			service_cpu = atoi(optarg);
			break;
		case 'r':
			overhead_rounds = (unsigned)atoi(optarg);
			if (overhead_rounds < 1 || overhead_rounds > 32) {
				fprintf(stderr, "dp-bench: --rounds wants 1..32\n");
				return 2;
			}
			break;
		case 'P':
			peer_addr = optarg;
			break;
		case 'T':
			peer_sock = optarg;
			break;
		case 'h':
			printf("usage: dp-bench [--socket PATH] [--cpu N] [--quick] [--max-size "
			       "BYTES] "
			       "[--no-peers] [--json] [--plot FILE.png]\n"
			       "                [--dataplaned PATH [--service-cpu N] [--rounds N]] "
			       "[latency|rate|bandwidth|overhead|all]\n"
			       "overhead (and all, with --dataplaned) starts services itself, "
			       "with\n"
			       "the stats region on and off.\n"
			       "fabric|bypass --peer HOST:PORT --peer-socket PATH: P6/P7 through\n"
			       "another service, and local vs fabric for the same transfers.\n");
			return 0;
		default:
			return 2;
		}
	}
	if (optind < argc)
		what = argv[optind];
	if (strcmp(what, "latency") && strcmp(what, "rate") && strcmp(what, "bandwidth") &&
	    strcmp(what, "overhead") && strcmp(what, "all") && strcmp(what, "fabric") &&
	    strcmp(what, "bypass")) {
		fprintf(stderr, "dp-bench: unknown benchmark '%s'\n", what);
		return 2;
	}
	pin(client_cpu);
	if (!strcmp(what, "latency") || !strcmp(what, "all"))
		bench_latency();
	if (!strcmp(what, "rate") || !strcmp(what, "all"))
		bench_rate();
	if (!strcmp(what, "bandwidth") || !strcmp(what, "all"))
		bench_bandwidth();
	if (!strcmp(what, "overhead") || (!strcmp(what, "all") && dataplaned_path))
		bench_overhead();
	if (!strcmp(what, "fabric"))
		bench_fabric();
	if (!strcmp(what, "bypass"))
		bench_bypass();
	report_close();
	if (plot_png && plot_write(plot_png))
		return 1;
	if (plot_png)
		fprintf(stderr, "dp-bench: wrote %s\n", plot_png);
	return 0;
}
