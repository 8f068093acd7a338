/* SPDX-License-Identifier: MIT */
/*
 * dp-bench - load generator for a running dataplaned, measured side by side
 * with its peers in the same run (../shared/PERF.md):
 *   P3 latency of one 64 B local WRITE, one outstanding  vs fi_pingpong -p shm
 *   P4 rate of 64 B local WRITEs in batches of 32        vs io_uring NOP, batch 32
 *   P5 bandwidth of 1 MiB .. 1 GiB local WRITEs           vs single-thread memcpy
 * Every transfer's bytes are checked after the timed runs.
 *
 * usage: dp-bench [--socket PATH] [--cpu N] [--quick] [--max-size BYTES]
 *                 [--no-peers] [latency|rate|bandwidth|all]
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dataplane.h"

#define MiB (1ull << 20)

static const char *sock_path;
static int client_cpu = 0;
static bool quick, with_peers = true;
static uint64_t max_size = 1024 * MiB;

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

		if (sscanf(line, "%u %31s %31s %31s %31s %lf %lf", &bytes, sent, ack, total, tm, &mbs,
			   &us) == 7)
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

static void bench_latency(void)
{
	unsigned n = quick ? 20000 : 200000;
	uint64_t *lat = malloc(sizeof(*lat) * n);
	struct bench b;
	double peer = -1;

	bench_open(&b, 4096);
	for (unsigned i = 0; i < n / 10; i++)
		one_write(&b, 0, 64, i);
	for (unsigned i = 0; i < n; i++)
		lat[i] = one_write(&b, (i % 64) * 64, 64, i);
	verify(&b, 4096);
	bench_close(&b);
	qsort(lat, n, sizeof(*lat), cmp_u64);
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

static double local_write_rate(struct bench *b, unsigned batch, uint64_t total)
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
	}
	return (double)total / (double)(now_ns() - t0) * 1e9;
}

static void bench_rate(void)
{
	uint64_t total = quick ? 1000000 : 10000000;
	double ours, peer;
	struct bench b;

	bench_open(&b, 4096);
	local_write_rate(&b, 32, total / 10);
	ours = local_write_rate(&b, 32, total);
	verify(&b, 4096);
	bench_close(&b);
	uring_nop_rate(32, total / 10);
	peer = uring_nop_rate(32, total);
	printf("P4 rate, 64 B local WRITEs, batch 32, one poller (%llu descriptors)\n",
	       (unsigned long long)total);
	printf("  dataplane %.2f M desc/s   io_uring NOP %.2f M ops/s   ratio %.2fx   target >= 3x   %s\n",
	       ours / 1e6, peer / 1e6, ours / peer, verdict(ours >= 3 * peer));
}

static void bench_bandwidth(void)
{
	struct dp_desc d;
	struct dp_cqe cqe;
	struct bench b;

	bench_open(&b, max_size);
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
	}
	printf("  target >= 0.9x memcpy\n");
	bench_close(&b);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"socket", required_argument, 0, 's'}, {"cpu", required_argument, 0, 'c'},
		{"quick", no_argument, 0, 'q'},        {"max-size", required_argument, 0, 'm'},
		{"no-peers", no_argument, 0, 'n'},     {"help", no_argument, 0, 'h'},
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
		case 'h':
			printf("usage: dp-bench [--socket PATH] [--cpu N] [--quick] [--max-size BYTES] "
			       "[--no-peers] [latency|rate|bandwidth|all]\n");
			return 0;
		default:
			return 2;
		}
	}
	if (optind < argc)
		what = argv[optind];
	pin(client_cpu);
	if (!strcmp(what, "latency") || !strcmp(what, "all"))
		bench_latency();
	if (!strcmp(what, "rate") || !strcmp(what, "all"))
		bench_rate();
	if (!strcmp(what, "bandwidth") || !strcmp(what, "all"))
		bench_bandwidth();
	if (strcmp(what, "latency") && strcmp(what, "rate") && strcmp(what, "bandwidth") &&
	    strcmp(what, "all")) {
		fprintf(stderr, "dp-bench: unknown benchmark '%s'\n", what);
		return 2;
	}
	return 0;
}
