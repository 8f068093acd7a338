/* SPDX-License-Identifier: MIT */
/*
 * dp-bench - load generator for a running dataplaned, measured side by side
 * with its peers in the same run (docs/benchmarks.md, "Targets"):
 *   P3 latency of one 64 B local WRITE, one outstanding  vs fi_pingpong -p shm
 *   P4 rate of 64 B local WRITEs in batches of 32        vs io_uring NOP, batch 32
 *   P5 bandwidth of 1 MiB .. 1 GiB local WRITEs           vs single-thread memcpy
 * Every transfer's bytes are checked after the timed runs.
 *
 * Peers run with no service of ours alive: with --dataplaned, each of P3..P5
 * starts its own service (poller pinned to --service-cpu), runs ours, stops
 * the service, then runs its peer on the same CPUs (fi_pingpong's server on
 * the poller's CPU, its client, the io_uring NOPs and memcpy on the client's
 * CPU). Before each peer, /proc is checked for dataplaned processes and
 * their pollers' CPUs and the result printed; against a service of someone
 * else's (--socket without --dataplaned) the check says whether its pollers
 * sat on the peer's CPUs. Every run prints the placement: a cache-line
 * ping-pong between --cpu and --service-cpu.
 * overhead: P3 and P4 against services dp-bench starts itself with the stats
 * region on and off (--no-stats), alternating, in one run (--dataplaned).
 * notify: a 64 B WRITE with a notification (DP_DESC_F_NOTIFY), from submit
 * to the owner's dp_notify_poll seeing it, vs a plain 64 B WRITE from
 * submit to its completion; both busy-polled by one thread that is the
 * writer and the segment's owner, in alternating blocks.
 * fabric / bypass (--peer HOST:PORT --peer-socket PATH): P6 4 MiB WRITEs and
 * P7 64 B WRITEs to a segment of another service (tools/bench-fabric.sh runs
 * the peers), and the same to a segment of this service vs the other one.
 * vm: WRITEs from memory the caller already has (dp_register_mem, read by
 * the service with process_vm_readv) vs from a dp_alloc region (memcpy),
 * into the same export: 64 KiB .. 256 MiB and 64 B latency, and the ratio.
 * vm-target (--peer, --peer-socket): WRITEs into another service's export
 * of dp_register_mem memory vs of a dp_alloc region, 1 .. 64 MiB, and the
 * ratio (tools/bench-vmtarget.sh: same host, and tcp between namespaces).
 * session ([--peer, --peer-socket]): first contact with a fresh engine
 * session (dp_session_open + the first 4 KiB WRITE) vs the same memory's
 * named export (dp_segment_open + first WRITE), and a warm WRITE
 * (tools/bench-session.sh: one service, two of one host, two namespaces).
 *
 * usage: dp-bench [--socket PATH | --dataplaned PATH] [--cpu N] [--service-cpu N]
 *                 [--quick] [--max-size BYTES] [--no-peers] [--json]
 *                 [--plot FILE.png] [--rounds N] [--depth N]
 *                 [--peer HOST:PORT --peer-socket PATH]
 *                 [latency|rate|bandwidth|overhead|notify|fabric|bypass|vm|vm-target|session|
 *                  scale|idle-queues|stripe|placement|check|all]
 * Long runs show a progress line on stderr; --json prints the results as one
 * JSON document on stdout (the text goes to stderr); --no-peers runs and
 * prints nothing of the peers; --plot draws the latency CDF and throughput
 * over time with gnuplot.
 * Exit: 0 when every run completed and verified, 1 on a failure, 2 on usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-report.h"
#include "clock.h"
#include "dataplane.h"
#include "dp_stats.h"
#include "dp_tool.h"

#define MiB (1ull << 20)

static const char *sock_path;
static int client_cpu = 0;
static bool quick, with_peers = true;
static uint64_t max_size = 1024 * MiB;
static const char *plot_png, *dataplaned_path;
static int service_cpu = -1;
/* P3..P5 against services of our own (--dataplaned, no --socket): stopped
 * before each peer runs. */
static bool own_service;
static unsigned overhead_rounds; /* 0: 3 with --quick, else 7 */
#define OVERHEAD_ROUNDS_MAX 64
/* The depth of the queue each benchmark measures through (--depth; fabric
 * and bypass keep 256). */
static uint32_t queue_depth = 256;

struct bench {
	struct dp_client *c;
	struct dp_queue *q;
	int src, dst, seg;
	uint8_t *srcp, *dstp;
	uint64_t len;
};

static void die(const char *what, int rc)
{
	fprintf(stderr, "dp-bench: %s: %s\n", what, dp_strerror(rc));
	exit(1);
}

/* A dp_connect that failed: which socket, and why (dp_tool.h), exit 1. */
static void die_connect(const char *path, int rc)
{
	dp_tool_connect_error("dp-bench", path, rc);
	exit(1);
}

/* Segment names unique per process and per call: two dp-bench clients of
 * one service, or two benches in one process, never collide. */
static const char *segment_name(const char *what)
{
	static char name[64];
	static unsigned n;

	snprintf(name, sizeof(name), "%s-%d-%u", what, (int)getpid(), n++);
	return name;
}

static void bench_open(struct bench *b, uint64_t len)
{
	const char *name = segment_name("dp-bench");
	int rc;

	b->len = len;
	if ((rc = dp_connect(sock_path, "dp-bench", &b->c)) < 0)
		die_connect(sock_path, rc);
	if ((rc = dp_queue_create(b->c, queue_depth, &b->q)) < 0)
		die("queue", rc);
	if ((b->src = dp_alloc(b->c, len, DP_ALLOC_HUGE, (void **)&b->srcp)) < 0)
		die("alloc", b->src);
	if ((b->dst = dp_alloc(b->c, len, DP_ALLOC_HUGE, (void **)&b->dstp)) < 0)
		die("alloc", b->dst);
	if ((rc = dp_segment_export(b->c, b->dst, name, DP_ACCESS_RW)) < 0)
		die("export", rc);
	if ((b->seg = dp_segment_open(b->c, NULL, name, DP_ACCESS_RW)) < 0)
		die("open", b->seg);
	for (uint64_t i = 0; i < len; i++)
		b->srcp[i] = (uint8_t)(i * 131 + 7);
	memset(b->dstp, 0, len);
}

static void bench_close(struct bench *b)
{
	dp_close(b->c);
}

/* One WRITE of b's source into its segment, to its completion: busy-polled
 * (wait_ms < 0) or waited for up to wait_ms; returns ns. */
static uint64_t write_wait(struct bench *b, uint64_t off, uint64_t len, uint64_t ud, int wait_ms,
			   const char *what)
{
	struct dp_desc d;
	struct dp_cqe cqe;
	uint64_t ns;
	int rc;

	dp_prep_write(&d, b->src, off, b->seg, off, len, ud);
	if ((rc = dp_tool_run_one(b->q, &d, wait_ms, &cqe, &ns)))
		die(what, rc);
	return ns;
}

/* Runs one descriptor to completion by busy-polling; returns ns. */
static uint64_t one_write(struct bench *b, uint64_t off, uint64_t len, uint64_t ud)
{
	return write_wait(b, off, len, ud, -1, "WRITE");
}

static void verify(const struct bench *b, uint64_t len)
{
	if (memcmp(b->srcp, b->dstp, len)) {
		fprintf(stderr, "dp-bench: DATA MISMATCH after the timed run\n");
		exit(1);
	}
}

/* ---- services of our own (--dataplaned) ---- */

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

static unsigned svc_spin_us = 1000000;

static void fmt_list(char *buf, size_t len, const int *v, int n)
{
	size_t o = 0;

	buf[0] = 0;
	for (int i = 0; i < n && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%d", i ? "," : "", v[i]);
}

static void pin_set(const int *cpus, int n)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	for (int i = 0; i < n; i++)
		CPU_SET(cpus[i], &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/* A service of our own with npollers pollers on cpus[] (the process pinned
 * to them: its control thread never sits on a client's CPU), spinning
 * --spin-us (default 1 s, so it never sleeps during a run), no fabric; its
 * stats region named `stats`, or none (NULL); extra: more dataplaned
 * arguments (NULL-ended). */
static void service_start_on(struct service *s, const int *cpus, unsigned npollers,
			     const char *stats, const char *const *extra)
{
	char list[512], np[16], spin[16], log[128];
	const char *argv[32];
	int status, k = 0;
	pid_t parent;

	fmt_list(list, sizeof(list), cpus, (int)npollers);
	snprintf(np, sizeof(np), "%u", npollers);
	snprintf(spin, sizeof(spin), "%u", svc_spin_us);
	snprintf(s->dir, sizeof(s->dir), "/tmp/dp-bench-svc-XXXXXX");
	if (!mkdtemp(s->dir))
		die("mkdtemp", -errno);
	snprintf(s->sock, sizeof(s->sock), "%s/dp.sock", s->dir);
	snprintf(log, sizeof(log), "%s/dataplaned.log", s->dir);
	argv[k++] = "dataplaned";
	argv[k++] = "--socket";
	argv[k++] = s->sock;
	argv[k++] = "--pollers";
	argv[k++] = np;
	argv[k++] = "--cpus";
	argv[k++] = list;
	argv[k++] = "--spin-us";
	argv[k++] = spin;
	argv[k++] = "--log-level";
	argv[k++] = "warn";
	argv[k++] = "--provider";
	argv[k++] = "none";
	argv[k++] = stats ? "--stats" : "--no-stats";
	if (stats)
		argv[k++] = stats;
	for (; extra && *extra && k < 30; extra++)
		argv[k++] = *extra;
	argv[k] = NULL;
	fflush(stdout);
	parent = getpid();
	s->pid = fork();
	if (s->pid < 0)
		die("fork", -errno);
	if (s->pid == 0) {
		/* A dp-bench that dies (die(), a signal) takes its service
		 * along instead of leaving it spinning on --service-cpu. */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) || getppid() != parent)
			_exit(127);
		pin_set(cpus, (int)npollers);
		if (!freopen(log, "w", stderr))
			_exit(127);
		execv(dataplaned_path, (char *const *)argv);
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

/* P3..P5's service: one poller on --service-cpu; with stats, its region
 * named after us. */
static void service_start(struct service *s, bool stats)
{
	static unsigned n;
	char name[64];

	snprintf(name, sizeof(name), "dp-bench-%d-%u", (int)getpid(), n++);
	service_start_on(s, &service_cpu, 1, stats ? name : NULL, NULL);
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

/* The service side of P3..P5: a service of our own with --dataplaned (its
 * poller pinned to service_cpu, spinning), stopped before the peer runs; or
 * the one at --socket, which we cannot stop. */
static struct service local_svc;

static void ours_begin(void)
{
	if (own_service)
		service_start(&local_svc, true);
}

static void ours_end(void)
{
	if (own_service)
		service_stop(&local_svc);
}

static void print_ours_cpus(void)
{
	if (own_service)
		printf("  CPUs: dataplane poller %d, client %d (a dataplaned of dp-bench's "
		       "own%s)\n",
		       service_cpu, client_cpu, with_peers ? ", stopped before the peer ran" : "");
	else
		printf("  CPUs: dataplane: the service at %s (pollers on its own CPUs), client "
		       "%d\n",
		       sock_path ? sock_path : "the default socket", client_cpu);
	report_obj("cpus");
	report_num("poller", own_service ? service_cpu : -1);
	report_num("client", client_cpu);
	report_end();
	if (with_peers)
		report_bool("service_stopped_before_peer", own_service);
}

/* fi_pingpong between two processes on this host, its server on the
 * poller's CPU and its client on ours: usec per transfer (one-way: half of
 * its round trip), or a negative number when it cannot run. The check of
 * dataplaned processes runs while its server is up. */
static double run_fi_pingpong(const char *prov, unsigned size, unsigned iters)
{
	int cpus[2] = {service_cpu, client_cpu};
	char cmd[256], line[512];
	double usec = -1;
	pid_t srv;
	FILE *f;

	fflush(stdout); /* the child's freopen would write our buffer again */
	srv = fork();
	if (srv == 0) {
		char s[16], it[16];

		bench_pin(service_cpu);
		snprintf(s, sizeof(s), "%u", size);
		snprintf(it, sizeof(it), "%u", iters);
		freopen("/dev/null", "w", stdout);
		freopen("/dev/null", "w", stderr);
		execlp("fi_pingpong", "fi_pingpong", "-p", prov, "-e", "rdm", "-S", s, "-I", it,
		       (char *)NULL);
		_exit(127);
	}
	usleep(300000);
	printf("  CPUs: peer fi_pingpong server %d, client %d\n", service_cpu, client_cpu);
	peer_check(cpus, service_cpu == client_cpu ? 1 : 2);
	fflush(stdout);
	snprintf(cmd, sizeof(cmd),
		 "taskset -c %d fi_pingpong -p %s -e rdm -S %u -I %u 127.0.0.1 2>/dev/null",
		 client_cpu, prov, size, iters);
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
	report_num("server", service_cpu);
	report_num("client", client_cpu);
	report_end();
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

static void bench_latency(void)
{
	unsigned n = quick ? 20000 : 200000;
	uint64_t *lat = malloc(sizeof(*lat) * n);
	double peer = -1, p50;

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
	if (with_peers) {
		peer = run_fi_pingpong("shm", 64, quick ? 20000 : 100000);
		if (peer > 0) {
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
			plot_latency_line(
				"fi_pingpong -p shm round trip (its mean; no percentiles)",
				2 * peer);
		} else {
			printf("  fi_pingpong: not available (install libfabric-bin)\n");
		}
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

/* 64 B WRITEs in batches of `batch`, `total` of them or, with ns, as many
 * as `ns` allows (then the rest drained): desc/s. */
static double write_rate(struct bench *b, unsigned batch, uint64_t total, uint64_t ns,
			 struct progress *pg)
{
	struct dp_desc d[64];
	struct dp_cqe cqe[256];
	uint64_t t0 = dp_now_ns(), end = t0 + ns, sent = 0, done = 0;
	bool open = true;

	while (open || done < sent) {
		if (open) {
			unsigned n = total - sent < batch ? (unsigned)(total - sent) : batch;

			for (unsigned i = 0; i < n; i++)
				dp_prep_write(&d[i], b->src, ((sent + i) % 64) * 64, b->seg,
					      ((sent + i) % 64) * 64, 64, sent + i);
			int k = dp_submit(b->q, d, n);
			if (k < 0)
				die("submit", k);
			sent += (uint64_t)k;
			if (sent == total || (ns && !(sent & 1023) && dp_now_ns() >= end))
				open = false;
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
	return (double)done / (double)(dp_now_ns() - t0) * 1e9;
}

static double local_write_rate(struct bench *b, unsigned batch, uint64_t total, struct progress *pg)
{
	return write_rate(b, batch, total, 0, pg);
}

static void bench_rate(void)
{
	uint64_t total = quick ? 1000000 : 10000000;
	double ours, peer;
	struct progress pg;
	struct bench b;
	int cpu = client_cpu;

	ours_begin();
	bench_open(&b, 4096);
	local_write_rate(&b, 32, total / 10, NULL);
	progress_start(&pg, "P4 rate", total);
	ours = local_write_rate(&b, 32, total, &pg);
	progress_end(&pg);
	plot_throughput("P4: 64 B local WRITEs, batch 32", &pg);
	verify(&b, 4096);
	bench_close(&b);
	ours_end();
	printf("P4 rate, 64 B local WRITEs, batch 32, one poller (%llu descriptors, "
	       "queue depth %u)\n",
	       (unsigned long long)total, queue_depth);
	report_obj("rate");
	report_str("what", "P4: 64 B local WRITEs, batch 32, one poller");
	print_ours_cpus();
	report_u64("descriptors", total);
	report_u64("queue_depth", queue_depth);
	report_num("desc_per_s", ours);
	if (!with_peers) {
		printf("  dataplane %.2f M desc/s\n", ours / 1e6);
		report_end();
		return;
	}
	printf("  CPUs: peer io_uring NOPs submitted and reaped on CPU %d (no SQPOLL)\n",
	       client_cpu);
	peer_check(&cpu, 1);
	uring_nop_rate(32, total / 10);
	peer = uring_nop_rate(32, total);
	printf("  dataplane %.2f M desc/s   io_uring NOP %.2f M ops/s   ratio %.2fx   target >= 3x "
	       "  %s\n",
	       ours / 1e6, peer / 1e6, ours / peer, verdict(ours >= 3 * peer));
	report_num("peer_cpu", client_cpu);
	report_str("peer", "io_uring NOP submit+reap, batch 32");
	report_num("peer_ops_per_s", peer);
	report_num("ratio", ours / peer);
	report_str("target", ">= 3x");
	report_bool("pass", ours >= 3 * peer);
	report_end();
}

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

static void bench_bandwidth(void)
{
	enum { REPS = 5, SIZES = 16 };
	double ours[SIZES][REPS], peer[SIZES][REPS], mo[SIZES], mp[SIZES];
	struct dp_desc d;
	struct dp_cqe cqe;
	struct progress pg;
	struct bench b;
	uint64_t total = 0, done = 0, len, top = MiB;
	unsigned nsz = 0, k;
	int cpu = client_cpu;
	struct peer_check chk;

	for (len = MiB; len <= max_size && nsz < SIZES; len *= 4, nsz++) {
		total += REPS * len * (with_peers ? 2 : 1);
		top = len;
	}
	progress_start(&pg, "P5 bandwidth (bytes)", total);
	ours_begin();
	bench_open(&b, max_size);
	for (k = 0, len = MiB; k < nsz; k++, len *= 4) {
		for (unsigned r = 0; r < REPS; r++) {
			uint64_t t0 = dp_now_ns();
			int rc;

			dp_prep_write(&d, b.src, 0, b.seg, 0, len, r);
			if ((rc = dp_submit(b.q, &d, 1)) != 1)
				die("submit", rc);
			while ((rc = dp_poll(b.q, &cqe, 1)) == 0)
				;
			if (rc < 0 || cqe.status)
				die("completion", rc < 0 ? rc : cqe.status);
			ours[k][r] = (double)len / (double)(dp_now_ns() - t0);
			done += len;
			progress_update(&pg, done);
		}
		memset(b.dstp, 0, len);
		dp_prep_write(&d, b.src, 0, b.seg, 0, len, 99);
		dp_submit(b.q, &d, 1);
		while (dp_poll(b.q, &cqe, 1) == 0)
			;
		verify(&b, len);
		qsort(ours[k], REPS, sizeof(double), cmp_dbl);
		mo[k] = ours[k][REPS / 2];
	}
	bench_close(&b);
	ours_end();
	if (with_peers) {
		/* The peer: the same sizes, once the service has gone. */
		uint8_t *src = peer_buf(top), *dst = peer_buf(top);

		peer_check_take(&chk, &cpu, 1);
		for (uint64_t i = 0; i < top; i++)
			src[i] = (uint8_t)(i * 131 + 7);
		memset(dst, 0, top);
		for (k = 0, len = MiB; k < nsz; k++, len *= 4) {
			for (unsigned r = 0; r < REPS; r++) {
				uint64_t t0 = dp_now_ns();

				memcpy(dst, src, len);
				peer[k][r] = (double)len / (double)(dp_now_ns() - t0);
				done += len;
				progress_update(&pg, done);
			}
			qsort(peer[k], REPS, sizeof(double), cmp_dbl);
			mp[k] = peer[k][REPS / 2];
		}
		if (memcmp(src, dst, top))
			die("memcpy peer", -EBADMSG);
		munmap(src, peer_maplen(top));
		munmap(dst, peer_maplen(top));
	}
	progress_end(&pg);

	printf("P5 bandwidth, local host WRITE%s (GB/s, median of %u)\n",
	       with_peers ? " vs single-thread memcpy" : "", REPS);
	report_obj("bandwidth_run");
	print_ours_cpus();
	if (with_peers) {
		printf("  CPUs: peer memcpy on CPU %d, run after ours, same sizes, buffers backed "
		       "like ours\n",
		       client_cpu);
		report_num("peer_cpu", client_cpu);
		report_str("peer", "single-thread memcpy");
		peer_check_print(&chk);
	}
	report_end();
	if (with_peers)
		printf("  %10s %10s %10s %8s\n", "size", "dataplane", "memcpy", "ratio");
	else
		printf("  %10s %10s\n", "size", "dataplane");
	report_arr("bandwidth");
	for (k = 0, len = MiB; k < nsz; k++, len *= 4) {
		report_obj(NULL);
		report_u64("size", len);
		report_num("gb_per_s", mo[k]);
		if (with_peers) {
			printf("  %7llu MiB %10.2f %10.2f %7.2fx  %s\n",
			       (unsigned long long)(len / MiB), mo[k], mp[k], mo[k] / mp[k],
			       verdict(mo[k] >= 0.9 * mp[k]));
			report_num("memcpy_gb_per_s", mp[k]);
			report_num("ratio", mo[k] / mp[k]);
			report_bool("pass", mo[k] >= 0.9 * mp[k]);
		} else {
			printf("  %7llu MiB %10.2f\n", (unsigned long long)(len / MiB), mo[k]);
		}
		report_end();
	}
	report_end();
	if (with_peers)
		printf("  target >= 0.9x memcpy\n");
}

/* ---- vm: memory the caller already has (dp_register_mem) vs shared
 * regions (dp_alloc), the same WRITEs into the same export ---- */

/* One WRITE of `len` bytes from `region` into b's segment, busy-polled: ns. */
static uint64_t vm_write(struct bench *b, int region, uint64_t off, uint64_t len, uint64_t ud)
{
	struct dp_desc d;
	struct dp_cqe cqe;
	uint64_t ns;
	int rc;

	dp_prep_write(&d, region, off, b->seg, off, len, ud);
	if ((rc = dp_tool_run_one(b->q, &d, -1, &cqe, &ns)))
		die("vm WRITE", rc);
	return ns;
}

static void bench_vm(void)
{
	enum { REPS = 5, SIZES = 16, SHARED = 0, VM = 1 };
	uint64_t top = max_size < 256 * MiB ? max_size : 256 * MiB, len, done = 0, total = 0;
	unsigned n = quick ? 20000 : 100000, nsz = 0, k;
	double bw[2][SIZES][REPS], med[2][SIZES], mc[SIZES], p50[2], p99[2];
	uint64_t *lat = malloc(sizeof(*lat) * n);
	struct progress pg;
	struct bench b;
	uint8_t *vm, *copy;
	int vreg;

	for (len = 64 * 1024; len <= top && nsz < SIZES; len *= 4, nsz++)
		total += 2 * REPS * len;
	vm = malloc(top);
	copy = malloc(top);
	if (!lat || !vm || !copy)
		die("malloc", -ENOMEM);
	ours_begin();
	bench_open(&b, top);
	memcpy(vm, b.srcp, top); /* the same bytes as the shared source */
	memset(copy, 0, top);
	if ((vreg = dp_register_mem(b.c, vm, top)) < 0) {
		fprintf(stderr, "dp-bench: dp_register_mem: %s\n", dp_last_error());
		exit(1);
	}
	progress_start(&pg, "vm bandwidth (bytes)", total);
	for (k = 0, len = 64 * 1024; k < nsz; k++, len *= 4) {
		/* Alternating, so that drift hurts both alike. */
		for (unsigned r = 0; r < REPS; r++)
			for (int w = 0; w < 2; w++) {
				int from = (r + w) % 2 ? VM : SHARED;
				uint64_t ns = vm_write(&b, from == VM ? vreg : b.src, 0, len, r);

				bw[from][k][r] = (double)len / (double)ns;
				done += len;
				progress_update(&pg, done);
			}
		for (int w = 0; w < 2; w++) {
			qsort(bw[w][k], REPS, sizeof(double), cmp_dbl);
			med[w][k] = bw[w][k][REPS / 2];
		}
		memset(b.dstp, 0, len);
		vm_write(&b, vreg, 0, len, 99);
		if (memcmp(vm, b.dstp, len))
			die("vm: DATA MISMATCH", -EBADMSG);
		/* The client's own single-thread memcpy of the same bytes. */
		{
			double best[REPS];

			for (unsigned r = 0; r < REPS; r++) {
				uint64_t t0 = dp_now_ns();

				memcpy(copy, vm, len);
				best[r] = (double)len / (double)(dp_now_ns() - t0);
			}
			qsort(best, REPS, sizeof(double), cmp_dbl);
			mc[k] = best[REPS / 2];
		}
	}
	progress_end(&pg);
	/* 64 B, one outstanding: shared and registered in alternating blocks. */
	for (int w = 0; w < 2; w++) {
		int region = w == VM ? vreg : b.src;

		for (unsigned i = 0; i < n / 10; i++)
			vm_write(&b, region, 0, 64, i);
		for (unsigned i = 0; i < n; i++)
			lat[i] = vm_write(&b, region, (i % 64) * 64, 64, i);
		qsort(lat, n, sizeof(*lat), cmp_u64);
		p50[w] = lat[n / 2] / 1e3;
		p99[w] = lat[n * 99 / 100] / 1e3;
	}
	if (memcmp(vm, b.dstp, 4096))
		die("vm: DATA MISMATCH (64 B)", -EBADMSG);
	bench_close(&b);
	ours_end();

	printf("vm: WRITEs from memory the caller already has (dp_register_mem: "
	       "process_vm_readv in the service) vs from a shared region (dp_alloc: memcpy), "
	       "into the same host export (GB/s, median of %u)\n",
	       REPS);
	report_obj("vm_run");
	print_ours_cpus();
	report_end();
	printf("  %10s %10s %10s %8s %12s\n", "size", "shared", "registered", "ratio",
	       "client memcpy");
	report_arr("vm_bandwidth");
	for (k = 0, len = 64 * 1024; k < nsz; k++, len *= 4) {
		printf("  %6llu KiB %10.2f %10.2f %7.2fx %12.2f\n", (unsigned long long)(len >> 10),
		       med[SHARED][k], med[VM][k], med[VM][k] / med[SHARED][k], mc[k]);
		report_obj(NULL);
		report_u64("size", len);
		report_num("shared_gb_per_s", med[SHARED][k]);
		report_num("registered_gb_per_s", med[VM][k]);
		report_num("ratio", med[VM][k] / med[SHARED][k]);
		report_num("client_memcpy_gb_per_s", mc[k]);
		report_end();
	}
	report_end();
	printf("  64 B WRITE, one outstanding (%u samples each): shared p50 %.2f us p99 %.2f us; "
	       "registered p50 %.2f us p99 %.2f us; ratio p50 %.2fx\n",
	       n, p50[SHARED], p99[SHARED], p50[VM], p99[VM], p50[VM] / p50[SHARED]);
	report_obj("vm_latency");
	report_u64("samples", n);
	report_num("shared_p50_us", p50[SHARED]);
	report_num("shared_p99_us", p99[SHARED]);
	report_num("registered_p50_us", p50[VM]);
	report_num("registered_p99_us", p99[VM]);
	report_num("ratio_p50", p50[VM] / p50[SHARED]);
	report_end();
	free(lat);
	free(vm);
	free(copy);
}

/* ---- stats overhead: the same P3/P4 runs against a service with its stats
 * region and one without (--no-stats), alternating, medians of the rounds ---- */

static void bench_overhead(void)
{
	enum { ON, OFF };
	unsigned rounds = overhead_rounds ? overhead_rounds : quick ? 3 : 7;
	unsigned n = quick ? 20000 : 100000;
	uint64_t total = quick ? 1000000 : 4000000;
	double p50[2][OVERHEAD_ROUNDS_MAX], p99[2][OVERHEAD_ROUNDS_MAX],
		rate[2][OVERHEAD_ROUNDS_MAX];
	double m50[2], m99[2], mrate[2], lat_pct, rate_pct;
	double pair[OVERHEAD_ROUNDS_MAX], pair_pct, pair_lo, pair_hi;
	uint64_t *lat = malloc(sizeof(*lat) * n);
	const char *saved = sock_path;

	if (!dataplaned_path) {
		fprintf(stderr,
			"dp-bench: overhead needs --dataplaned PATH (it starts the services)\n");
		exit(2);
	}
	if (!lat)
		die("malloc", -ENOMEM);
	/* A service of someone else's (--socket) spins for a while after our
	 * last descriptor: let it go to sleep first. */
	if (saved)
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
	 * cancels the drift between rounds that the medians keep (bench_median()
	 * sorts: pair first). */
	for (unsigned r = 0; r < rounds; r++)
		pair[r] = 100 * (rate[OFF][r] - rate[ON][r]) / rate[OFF][r];
	for (unsigned m = 0; m < 2; m++) {
		m50[m] = bench_median(p50[m], rounds);
		m99[m] = bench_median(p99[m], rounds);
		mrate[m] = bench_median(rate[m], rounds);
	}
	lat_pct = 100 * (m50[ON] - m50[OFF]) / m50[OFF];
	rate_pct = 100 * (mrate[OFF] - mrate[ON]) / mrate[OFF];
	pair_pct = bench_median(pair, rounds);
	pair_lo = pair[0];
	pair_hi = pair[rounds - 1];
	printf("Stats overhead: services started with the stats region on and off (--no-stats),\n"
	       "alternating, %u rounds each, medians; P3 %u samples, P4 %llu descriptors\n"
	       "  CPUs: poller %d, client %d\n",
	       rounds, n, (unsigned long long)total, service_cpu, client_cpu);
	printf("  P3 p50   on %.2f us   off %.2f us   overhead %+.1f%%   target < 3%%   %s\n",
	       m50[ON] / 1e3, m50[OFF] / 1e3, lat_pct, verdict(lat_pct < 3));
	printf("  P3 p99   on %.2f us   off %.2f us\n", m99[ON] / 1e3, m99[OFF] / 1e3);
	printf("  P4 rate  on %.3f M/s  off %.3f M/s  overhead %+.1f%%   target < 3%%   %s\n",
	       mrate[ON] / 1e6, mrate[OFF] / 1e6, rate_pct, verdict(rate_pct < 3));
	printf("  P4 paired: median of the rounds' own overheads %+.1f%% (rounds %+.1f%% .. "
	       "%+.1f%%)\n",
	       pair_pct, pair_lo, pair_hi);
	report_obj("overhead");
	report_obj("cpus");
	report_num("poller", service_cpu);
	report_num("client", client_cpu);
	report_end();
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
/* --busy-poll: the client spins on its CQ instead of sleeping in dp_wait. */
static bool fabric_busy;

struct fabric_fig {
	double bw1, bwn; /* GB/s: 4 MiB WRITEs, one and FABRIC_DEPTH outstanding */
	double p50, p99; /* us: 64 B WRITE, one outstanding */
	uint32_t path;	 /* DP_CQE_F_* the completions reported */
};

#define FABRIC_LEN (64 * MiB)
#define FABRIC_XFER (4 * MiB)
#define FABRIC_DEPTH 8

/* The client sleeps on its doorbell (dp_wait): on a 2-core machine it
 * shares a CPU with the initiating service's poller. With a CPU of its own
 * (--busy-poll) it spins as fi_pingpong does. */
static uint64_t fabric_one(struct bench *b, uint64_t off, uint64_t len, uint64_t ud)
{
	return write_wait(b, off, len, ud, fabric_busy ? -1 : 10000, "fabric WRITE");
}

/* Runs `total` 4 MiB WRITEs with up to `depth` in flight, rotating over the
 * region; returns GB/s. */
static double fabric_stream(struct bench *b, unsigned depth, unsigned total, uint32_t *path)
{
	const char *what = "fabric WRITE";
	double gbps;
	int rc = dp_tool_write_stream(b->q, b->src, b->seg, FABRIC_XFER, FABRIC_LEN, total, depth,
				      10000, &gbps, path, &what);

	if (rc)
		die(what, rc);
	return gbps;
}

/* One measurement: the target exported by the other service and opened
 * through --peer, or (local) exported by ours and opened as ours. */
static void fabric_measure(bool local, struct fabric_fig *f)
{
	unsigned n = quick ? 2000 : 20000, total = quick ? 64 : 256;
	uint64_t *lat = malloc(sizeof(*lat) * n);
	struct dp_client *pc = NULL;
	const char *name = segment_name("dp-bench-fabric");
	struct bench b;
	int rc;

	if (!lat)
		die("malloc", -ENOMEM);
	b.len = FABRIC_LEN;
	if ((rc = dp_connect(sock_path, "dp-bench", &b.c)) < 0)
		die_connect(sock_path, rc);
	if (!local && (rc = dp_connect(peer_sock, "dp-bench-target", &pc)) < 0)
		die_connect(peer_sock, rc);
	if ((rc = dp_queue_create(b.c, 256, &b.q)) < 0)
		die("queue", rc);
	if ((b.src = dp_alloc(b.c, FABRIC_LEN, 0, (void **)&b.srcp)) < 0)
		die("alloc", b.src);
	if ((b.dst = dp_alloc(local ? b.c : pc, FABRIC_LEN, 0, (void **)&b.dstp)) < 0)
		die("alloc", b.dst);
	if ((rc = dp_segment_export(local ? b.c : pc, b.dst, name, DP_ACCESS_RW)) < 0)
		die("export", rc);
	b.seg = dp_segment_open(b.c, local ? NULL : peer_addr, name, DP_ACCESS_RW);
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
	printf("fabric: %s via %s, completions on the %s path; the client on CPU %d %s\n",
	       sock_path ? sock_path : "default", peer_addr, path_name(f.path), client_cpu,
	       fabric_busy ? "busy-polls its CQ" : "sleeps in dp_wait");
	printf("P6 dataplane 4 MiB WRITE: 1 outstanding %.3f GB/s, %u outstanding %.3f GB/s\n",
	       f.bw1, FABRIC_DEPTH, f.bwn);
	printf("P7 dataplane 64 B WRITE, one outstanding: p50 %.2f us, p99 %.2f us (a full round "
	       "trip: complete once the target holds the bytes)\n",
	       f.p50, f.p99);
	report_obj("fabric");
	report_str("peer_addr", peer_addr);
	report_str("path", path_name(f.path));
	report_num("gb_per_s_1_outstanding", f.bw1);
	report_num("gb_per_s_8_outstanding", f.bwn);
	report_num("p50_us", f.p50);
	report_num("p99_us", f.p99);
	report_str("latency_figure", "round trip");
	report_bool("client_busy_polls", fabric_busy);
	report_end();
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
	report_obj("bypass");
	report_str("peer_addr", peer_addr);
	for (int i = 0; i < 2; i++) {
		const struct fabric_fig *f = i ? &r : &l;

		report_obj(i ? "fabric" : "local");
		report_str("path", path_name(f->path));
		report_num("gb_per_s_1_outstanding", f->bw1);
		report_num("gb_per_s_8_outstanding", f->bwn);
		report_num("p50_us", f->p50);
		report_num("p99_us", f->p99);
		report_end();
	}
	report_end();
}

/* ---- session: first contact with an engine session ---- */

/* One 4 KiB WRITE through handle `seg` at address `va`, submit to
 * completion (busy-polled), in ns; its completion's flags in *flags. */
static uint64_t session_write_ns(struct dp_queue *q, int src, int seg, uint64_t va, uint32_t *flags)
{
	struct dp_desc d;
	struct dp_cqe c;
	uint64_t t0;
	int rc;

	dp_prep_write(&d, src, 0, seg, va, 4096, 1);
	t0 = dp_now_ns();
	while ((rc = dp_submit(q, &d, 1)) == 0)
		;
	if (rc < 0)
		die("submit", rc);
	while ((rc = dp_poll(q, &c, 1)) == 0)
		;
	t0 = dp_now_ns() - t0;
	if (rc < 0)
		die("poll", rc);
	if (c.status)
		die("session WRITE", c.status);
	*flags = c.flags;
	return t0;
}

/*
 * First contact with an engine session: a client of --peer-socket's service (or of
 * --socket's, without a peer) makes a fresh session with 1 MiB of its own
 * memory; a client of --socket's service opens it (dp_session_open: one
 * question to the session's port) and writes 4 KiB into it (the first
 * WRITE to a registration). Side by side, the same through a named export
 * (dp_segment_open of the peer's server name + the first WRITE), and a
 * WRITE once warm. Medians and maxima of REPS fresh sessions.
 */
static void bench_session(void)
{
	enum {
		REPS = 21,
		OPEN = 0,
		FIRST = 1,
		TOTAL = 2,
		WARM = 3,
		WARM_MEM = 4,
		NAMED = 5,
		NAMED_FIRST = 6,
		N = 7
	};
	const char *tsock = peer_sock ? peer_sock : sock_path;
	const char *names[N] = {"session open",	    "first WRITE",     "open + first WRITE",
				"warm WRITE",	    "warm WRITE, mem", "named open + first",
				"named first WRITE"};
	double v[N][REPS];
	struct dp_client *c;
	struct dp_queue *q;
	uint32_t flags = 0, mflags = 0, nflags = 0;
	uint8_t *srcp;
	int src, rc;

	if ((rc = dp_connect(sock_path, "dp-bench", &c)) < 0)
		die_connect(sock_path, rc);
	if ((rc = dp_queue_create(c, 64, &q)) < 0)
		die("queue", rc);
	if ((src = dp_alloc(c, 4096, 0, (void **)&srcp)) < 0)
		die("alloc", src);
	memset(srcp, 0x5a, 4096);
	for (unsigned r = 0; r < REPS; r++) {
		struct dp_client *t;
		uint8_t *shm, *mem;
		uint64_t t0, warm = ~0ull, warm_mem = ~0ull;
		const char *exp = segment_name("dp-bench-first");
		int sreg, mreg, seg, nseg;

		if ((rc = dp_connect(tsock, "dp-bench-session", &t)) < 0)
			die_connect(tsock, rc);
		if ((rc = dp_session_create(t, 0)) < 0)
			die("dp_session_create", rc);
		/* The session's memory: a dp_alloc region (mapped, or registered
		 * with the fabric) and memory of the process's own. */
		if ((sreg = dp_alloc(t, MiB, 0, (void **)&shm)) < 0)
			die("alloc (session)", sreg);
		mem = aligned_alloc(4096, MiB);
		if (!mem)
			die("malloc", -ENOMEM);
		memset(mem, 0, MiB);
		if ((mreg = dp_register_mem(t, mem, MiB)) < 0)
			die("dp_register_mem", mreg);
		if ((rc = dp_segment_export(t, sreg, exp, DP_ACCESS_RW)) < 0)
			die("export", rc);
		t0 = dp_now_ns();
		seg = dp_session_open(c, dp_session_name(t), DP_ACCESS_RW);
		if (seg < 0) {
			fprintf(stderr, "dp-bench: %s\n", dp_last_error());
			exit(1);
		}
		v[OPEN][r] = (double)(dp_now_ns() - t0);
		v[FIRST][r] = (double)session_write_ns(q, src, seg, (uintptr_t)shm + 8192, &flags);
		v[TOTAL][r] = v[OPEN][r] + v[FIRST][r];
		for (unsigned k = 0; k < 32; k++) {
			uint64_t off = 4096 * (k % 200);
			uint64_t a = session_write_ns(q, src, seg, (uintptr_t)shm + off, &flags);
			uint64_t m = session_write_ns(q, src, seg, (uintptr_t)mem + off, &mflags);

			warm = a < warm ? a : warm;
			warm_mem = m < warm_mem ? m : warm_mem;
		}
		v[WARM][r] = (double)warm;
		v[WARM_MEM][r] = (double)warm_mem;
		/* The named path: the same dp_alloc region, exported by name. */
		t0 = dp_now_ns();
		nseg = dp_segment_open(c, peer_sock ? peer_addr : NULL, exp, DP_ACCESS_RW);
		if (nseg < 0) {
			fprintf(stderr, "dp-bench: open by name: %s\n", dp_last_error());
			exit(1);
		}
		v[NAMED][r] = (double)(dp_now_ns() - t0);
		v[NAMED_FIRST][r] = (double)session_write_ns(q, src, nseg, 0, &nflags);
		v[NAMED][r] += v[NAMED_FIRST][r];
		if (shm[8192] != 0x5a || shm[0] != 0x5a || mem[0] != 0x5a)
			die("session: DATA MISMATCH", -EBADMSG);
		dp_segment_close(c, seg);
		dp_segment_close(c, nseg);
		dp_close(t);
		free(mem);
	}
	dp_close(c);
	printf("session: first contact with a fresh engine session (%s), 4 KiB WRITEs into its "
	       "dp_alloc memory, busy-polled, %u sessions (us)\n",
	       peer_sock ? peer_addr : "this service", REPS);
	printf("  paths: session %s (its dp_register_mem memory: %s), named export %s; "
	       "CPUs: client %d\n",
	       flags & DP_CQE_F_SAME_HOST ? "same host" : path_name(flags),
	       mflags & DP_CQE_F_SAME_HOST ? "same host" : path_name(mflags),
	       nflags & DP_CQE_F_SAME_HOST ? "same host" : path_name(nflags), client_cpu);
	report_obj("session");
	report_str("target", peer_sock ? peer_addr : "this service");
	report_str("path", flags & DP_CQE_F_SAME_HOST ? "same host" : path_name(flags));
	report_num("client_cpu", client_cpu);
	printf("  %-22s %10s %10s\n", "", "p50", "max");
	for (unsigned k = 0; k < N; k++) {
		char key[64];

		qsort(v[k], REPS, sizeof(double), cmp_dbl);
		printf("  %-22s %10.1f %10.1f\n", names[k], v[k][REPS / 2] / 1e3,
		       v[k][REPS - 1] / 1e3);
		snprintf(key, sizeof(key), "%s_p50_us", names[k]);
		for (char *p = key; *p; p++)
			if (*p == ' ' || *p == '+' || *p == ',')
				*p = '_';
		report_num(key, v[k][REPS / 2] / 1e3);
	}
	printf("  first contact (open + first WRITE) / named open + first: %.2fx\n",
	       v[TOTAL][REPS / 2] / v[NAMED][REPS / 2]);
	report_num("ratio_to_named", v[TOTAL][REPS / 2] / v[NAMED][REPS / 2]);
	report_end();
}

/* ---- serving: KV pages the way serving engines move them ---- */

/*
 * An SGLang-shaped transfer: LAYERS x (K, V) x PAGES pages of PAGE bytes,
 * from a prefill's KV buffers (one registration per layer and K/V) to a
 * decode's, at scattered page indices (a fixed permutation), by the
 * decode's addresses through its engine session (--peer-socket: the decode
 * is a client of that service, else of this one), all pages in one batch of
 * descriptors kept within the queue's depth; beside it, the same pages
 * memcpy'd in this process. Prints the time, GB/s, and ns per descriptor
 * (--json for tools/bench-serving.py).
 */
static bool serving_alloc; /* --serving-alloc */
#define SRV_LAYERS 32
#define SRV_PAGES 512
#define SRV_PAGE (16 * 1024)

static void bench_serving(void)
{
	enum { REPS = 5, NBUF = 2 * SRV_LAYERS };
	const char *tsock = peer_sock ? peer_sock : sock_path;
	const uint64_t blen = (uint64_t)SRV_PAGES * SRV_PAGE;
	const unsigned n = NBUF * SRV_PAGES;
	struct dp_desc *d = malloc(sizeof(*d) * n);
	struct dp_cqe cqe[256];
	uint8_t *src[NBUF], *dst[NBUF];
	unsigned *perm = malloc(sizeof(unsigned) * SRV_PAGES);
	double ours[REPS], peer[REPS];
	struct dp_client *c, *t;
	struct dp_queue *q;
	uint32_t flags = 0;
	int reg[NBUF], seg, rc;
	uint64_t seed = 42;

	if (!d || !perm)
		die("malloc", -ENOMEM);
	if ((rc = dp_connect(sock_path, "dp-bench-prefill", &c)) < 0)
		die_connect(sock_path, rc);
	if ((rc = dp_connect(tsock, "dp-bench-decode", &t)) < 0)
		die_connect(tsock, rc);
	if ((rc = dp_session_create(t, 0)) < 0)
		die("dp_session_create", rc);
	if ((rc = dp_queue_create(c, 256, &q)) < 0)
		die("queue", rc);
	for (unsigned b = 0; b < NBUF; b++) {
		/* The engines' own memory (as serving engines register their
		 * KV buffers), or shared regions with --serving-alloc. */
		if (serving_alloc) {
			void *p;

			if ((reg[b] = dp_alloc(c, blen, 0, (void **)&src[b])) < 0)
				die("alloc (prefill)", reg[b]);
			if ((rc = dp_alloc(t, blen, 0, &p)) < 0)
				die("alloc (decode)", rc);
			dst[b] = p;
		} else {
			if (posix_memalign((void **)&src[b], 4096, blen) ||
			    posix_memalign((void **)&dst[b], 4096, blen))
				die("malloc", -ENOMEM);
			if ((reg[b] = dp_register_mem(c, src[b], blen)) < 0)
				die("dp_register_mem (prefill)", reg[b]);
			if ((rc = dp_register_mem(t, dst[b], blen)) < 0)
				die("dp_register_mem (decode)", rc);
		}
		for (uint64_t i = 0; i < blen; i += 4096)
			src[b][i] = (uint8_t)(b * 7 + i / 4096);
		memset(dst[b], 0, blen);
	}
	for (unsigned i = 0; i < SRV_PAGES; i++)
		perm[i] = i;
	for (unsigned i = SRV_PAGES - 1; i > 0; i--) {
		unsigned j;

		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		j = (unsigned)(seed >> 33) % (i + 1);
		unsigned x = perm[i];
		perm[i] = perm[j];
		perm[j] = x;
	}
	seg = dp_session_open(c, dp_session_name(t), DP_ACCESS_RW);
	if (seg < 0) {
		fprintf(stderr, "dp-bench: dp_session_open: %s\n", dp_last_error());
		exit(1);
	}
	/* Page i of buffer b goes to page perm[i] of the decode's buffer b. */
	for (unsigned b = 0, k = 0; b < NBUF; b++)
		for (unsigned i = 0; i < SRV_PAGES; i++, k++)
			dp_prep_write(&d[k], reg[b], (uint64_t)i * SRV_PAGE, seg,
				      (uint64_t)(uintptr_t)dst[b] + (uint64_t)perm[i] * SRV_PAGE,
				      SRV_PAGE, k);
	for (unsigned r = 0; r <= REPS; r++) {
		unsigned sent = 0, done = 0;
		uint64_t t0 = dp_now_ns();

		while (done < n) {
			int k;

			if (sent < n) {
				k = dp_submit(q, d + sent, n - sent);
				if (k < 0)
					die("submit", k);
				sent += (unsigned)k;
			}
			k = dp_poll(q, cqe, 256);
			if (k < 0)
				die("poll", k);
			for (int i = 0; i < k; i++) {
				if (cqe[i].status)
					die("serving WRITE", cqe[i].status);
				flags = cqe[i].flags;
			}
			done += (unsigned)k;
		}
		/* The first pass finds the session's registrations: not timed. */
		if (r)
			ours[r - 1] = (double)(dp_now_ns() - t0);
	}
	for (unsigned b = 0; b < NBUF; b++)
		for (unsigned i = 0; i < SRV_PAGES; i++)
			if (dst[b][(uint64_t)perm[i] * SRV_PAGE] != src[b][(uint64_t)i * SRV_PAGE])
				die("serving: DATA MISMATCH", -EBADMSG);
	for (unsigned r = 0; r < REPS; r++) {
		uint64_t t0 = dp_now_ns();

		for (unsigned b = 0; b < NBUF; b++)
			for (unsigned i = 0; i < SRV_PAGES; i++)
				memcpy(dst[b] + (uint64_t)perm[i] * SRV_PAGE,
				       src[b] + (uint64_t)i * SRV_PAGE, SRV_PAGE);
		peer[r] = (double)(dp_now_ns() - t0);
	}
	qsort(ours, REPS, sizeof(double), cmp_dbl);
	qsort(peer, REPS, sizeof(double), cmp_dbl);
	printf("serving: %u layers x K,V x %u pages of %u KiB at scattered indices (%u "
	       "descriptors, "
	       "%llu MiB), one batch by the decode's addresses (%s; %s; %s), median of %u\n",
	       SRV_LAYERS, SRV_PAGES, SRV_PAGE / 1024, n,
	       (unsigned long long)(n * (uint64_t)SRV_PAGE >> 20),
	       peer_sock ? peer_addr : "this service",
	       flags & DP_CQE_F_SAME_HOST ? "same host" : path_name(flags),
	       serving_alloc ? "dp_alloc regions" : "memory of the engines' own, dp_register_mem",
	       REPS);
	printf("  C API %.2f ms (%.2f GB/s, %.0f ns/descriptor); memcpy in one process %.2f ms "
	       "(%.2f GB/s): %.2fx; CPU %d\n",
	       ours[REPS / 2] / 1e6, n * (double)SRV_PAGE / ours[REPS / 2], ours[REPS / 2] / n,
	       peer[REPS / 2] / 1e6, n * (double)SRV_PAGE / peer[REPS / 2],
	       peer[REPS / 2] / ours[REPS / 2], client_cpu);
	report_obj("serving");
	report_num("descriptors", n);
	report_num("page_bytes", SRV_PAGE);
	report_num("c_api_ms", ours[REPS / 2] / 1e6);
	report_num("memcpy_ms", peer[REPS / 2] / 1e6);
	report_str("path", flags & DP_CQE_F_SAME_HOST ? "same host" : path_name(flags));
	report_end();
	dp_close(c);
	dp_close(t);
	if (!serving_alloc)
		for (unsigned b = 0; b < NBUF; b++) {
			free(src[b]);
			free(dst[b]);
		}
	free(d);
	free(perm);
}

/* ---- vm-target: another service's export of dp_register_mem memory vs
 * of a dp_alloc region ---- */

#define VMT_LEN (64 * MiB)
#define VMT_DEPTH 8

/*
 * The same WRITEs from a dp_alloc region of ours (--socket) into two exports
 * of the other service (--peer, --peer-socket), both made by a client of
 * ours there and both VMT_LEN bytes: memory it registered with
 * dp_register_mem (the other service reaches it through the client's
 * process: same host, its pidfd; over the fabric, the owner's staging) and
 * a dp_alloc region (mapped, or registered with the fabric). Sizes 1 MiB ..
 * 64 MiB, VMT_DEPTH in flight, the two alternating, median of REPS.
 */
static void bench_vm_target(void)
{
	enum { REPS = 5, SIZES = 4, ALLOC = 0, VM = 1 };
	uint64_t bytes = quick ? 128 * MiB : 512 * MiB;
	double bw[2][SIZES][REPS], med[2][SIZES];
	uint32_t path[2] = {0, 0};
	const char *names[2] = {NULL, NULL};
	struct dp_client *pc;
	struct peer_check chk;
	struct bench b;
	uint8_t *tgt[2];
	int reg[2], seg[2], rc;
	unsigned k;

	fabric_need_peer();
	if ((rc = dp_connect(sock_path, "dp-bench", &b.c)) < 0)
		die_connect(sock_path, rc);
	if ((rc = dp_connect(peer_sock, "dp-bench-target", &pc)) < 0)
		die_connect(peer_sock, rc);
	if ((rc = dp_queue_create(b.c, 256, &b.q)) < 0)
		die("queue", rc);
	if ((b.src = dp_alloc(b.c, VMT_LEN, 0, (void **)&b.srcp)) < 0)
		die("alloc", b.src);
	for (uint64_t i = 0; i < VMT_LEN; i++)
		b.srcp[i] = (uint8_t)(i * 131 + 7);
	if ((reg[ALLOC] = dp_alloc(pc, VMT_LEN, 0, (void **)&tgt[ALLOC])) < 0)
		die("alloc (target)", reg[ALLOC]);
	if (posix_memalign((void **)&tgt[VM], 4096, VMT_LEN))
		die("malloc", -ENOMEM);
	memset(tgt[VM], 0, VMT_LEN);
	if ((reg[VM] = dp_register_mem(pc, tgt[VM], VMT_LEN)) < 0) {
		fprintf(stderr, "dp-bench: dp_register_mem: %s\n", dp_last_error());
		exit(1);
	}
	for (int w = 0; w < 2; w++) {
		char *n = strdup(segment_name(w == VM ? "dp-bench-vmt-mem" : "dp-bench-vmt-alloc"));

		if (!n)
			die("strdup", -ENOMEM);
		names[w] = n;
		if ((rc = dp_segment_export(pc, reg[w], n, DP_ACCESS_RW)) < 0)
			die("export", rc);
		seg[w] = dp_segment_open(b.c, peer_addr, n, DP_ACCESS_RW);
		if (seg[w] < 0) {
			fprintf(stderr, "dp-bench: open through --peer: %s\n", dp_last_error());
			exit(1);
		}
	}
	for (k = 0; k < SIZES; k++) {
		uint64_t len = MiB << (2 * k);
		unsigned total = (unsigned)(bytes / len) < 8 ? 8 : (unsigned)(bytes / len);

		for (unsigned r = 0; r < REPS; r++)
			for (int i = 0; i < 2; i++) {
				int w = (r + i) % 2 ? VM : ALLOC;
				const char *what = "vm-target WRITE";
				double gbps;

				rc = dp_tool_write_stream(b.q, b.src, seg[w], len, VMT_LEN, total,
							  VMT_DEPTH, 30000, &gbps, &path[w], &what);
				if (rc)
					die(what, rc);
				bw[w][k][r] = gbps;
			}
		for (int w = 0; w < 2; w++) {
			qsort(bw[w][k], REPS, sizeof(double), cmp_dbl);
			med[w][k] = bw[w][k][REPS / 2];
		}
	}
	/* The bytes of a last full pass, in both. */
	for (int w = 0; w < 2; w++) {
		const char *what = "vm-target WRITE";
		double gbps;

		memset(tgt[w], 0, VMT_LEN);
		rc = dp_tool_write_stream(b.q, b.src, seg[w], 4 * MiB, VMT_LEN, VMT_LEN / (4 * MiB),
					  VMT_DEPTH, 30000, &gbps, &path[w], &what);
		if (rc)
			die(what, rc);
		if (memcmp(tgt[w], b.srcp, VMT_LEN))
			die(w == VM ? "vm-target: DATA MISMATCH (registered)"
				    : "vm-target: DATA MISMATCH (dp_alloc)",
			    -EBADMSG);
	}
	peer_check_take(&chk, &client_cpu, 1);
	dp_close(b.c);
	dp_close(pc);
	free(tgt[VM]);

	printf("vm-target: WRITEs from a dp_alloc region into another service's export (%s) of "
	       "dp_register_mem memory vs of a dp_alloc region, %u in flight (GB/s, median of "
	       "%u)\n",
	       peer_addr, VMT_DEPTH, REPS);
	printf("  paths: registered %s, dp_alloc %s\n",
	       path[VM] & DP_CQE_F_SAME_HOST ? "same host" : path_name(path[VM]),
	       path[ALLOC] & DP_CQE_F_SAME_HOST ? "same host" : path_name(path[ALLOC]));
	printf("  CPUs: client %d; services: %s\n", client_cpu, chk.desc);
	report_obj("vm_target");
	report_str("peer_addr", peer_addr);
	report_str("registered_path",
		   path[VM] & DP_CQE_F_SAME_HOST ? "same host" : path_name(path[VM]));
	report_str("alloc_path",
		   path[ALLOC] & DP_CQE_F_SAME_HOST ? "same host" : path_name(path[ALLOC]));
	report_num("client_cpu", client_cpu);
	report_str("services", chk.desc);
	printf("  %10s %10s %10s %8s\n", "size", "dp_alloc", "registered", "ratio");
	report_arr("bandwidth");
	for (k = 0; k < SIZES; k++) {
		uint64_t len = MiB << (2 * k);
		double ratio = med[VM][k] / med[ALLOC][k];

		printf("  %6llu MiB %10.3f %10.3f %7.2fx%s\n", (unsigned long long)(len >> 20),
		       med[ALLOC][k], med[VM][k], ratio,
		       ratio >= 0.8 ? "" : "   (target >= 0.8x: MISS)");
		report_obj(NULL);
		report_u64("size", len);
		report_num("alloc_gb_per_s", med[ALLOC][k]);
		report_num("registered_gb_per_s", med[VM][k]);
		report_num("ratio", ratio);
		report_end();
	}
	report_end();
	report_end();
	free((void *)names[0]);
	free((void *)names[1]);
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

static void bench_notify(void)
{
	const unsigned n = quick ? 20000 : 200000, block = 1000;
	uint64_t *lat_n = malloc(sizeof(uint64_t) * n), *lat_w = malloc(sizeof(uint64_t) * n);
	struct progress pg;
	struct bench b;
	unsigned in = 0, iw = 0;
	double p50n, p50w;
	int rc;

	if (!lat_n || !lat_w)
		die("malloc", -ENOMEM);
	ours_begin();
	bench_open(&b, 4096);
	if ((rc = dp_notify_open(b.c, 256)) < 0)
		die("dp_notify_open", rc);
	for (unsigned i = 0; i < n / 10; i++) {
		one_write(&b, 0, 64, i);
		notify_one(&b, 0, i);
	}
	/* Alternating blocks: drift of the machine hits both alike. */
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
	ours_end();
	qsort(lat_n, n, sizeof(*lat_n), cmp_u64);
	qsort(lat_w, n, sizeof(*lat_w), cmp_u64);
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

/* ---- scale: N pollers and N client processes; idle-queues: the cost of
 * open idle queues to a poller, and an idle service's CPU use ---- */

#define SCALE_MAX_N 16
#define SCALE_MAX_CPUS 256

/* --pollers, --service-cpus, --client-cpus, --seconds, --idle-queues */
static const char *scale_pollers_arg, *service_cpus_arg, *client_cpus_arg;
static double scale_secs;
static unsigned idle_queues = 1000;

/* "0-3,8,10" into cpus[]; returns how many, or -1 when malformed. */
static int parse_list(const char *s, int *out, int max)
{
	int n = 0;

	while (s && *s) {
		char *end;
		long a = strtol(s, &end, 10), b = a;

		if (end == s || a < 0)
			return -1;
		if (*end == '-') {
			s = end + 1;
			b = strtol(s, &end, 10);
			if (end == s || b < a)
				return -1;
		}
		for (long c = a; c <= b && n < max; c++)
			out[n++] = (int)c;
		if (*end == ',')
			end++;
		else if (*end)
			return -1;
		s = end;
	}
	return n;
}

/* The service's stats region (read-only), for where queues landed and what
 * the pollers did. */
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

static void scale_step(unsigned n, const int *svc, int nsvc, const int *cli, int ncli,
		       struct scale_fig *f)
{
	int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN), pc[SCALE_MAX_N], cc[SCALE_MAX_N];
	unsigned nlat = quick ? 20000 : 100000;
	uint64_t ns = (uint64_t)(scale_secs * 1e9);
	size_t shlen = sizeof(struct scale_shm) + (size_t)n * nlat * sizeof(uint64_t), hlen = 0;
	struct scale_shm *sh;
	const struct dp_stats_header *h = NULL;
	pid_t kids[SCALE_MAX_N];
	uint64_t *all;
	char stats[64];
	struct service svc_;
	bool bad = false;

	memset(f, 0, sizeof(*f));
	f->n = n;
	/* Own CPUs for every poller and every client when the lists have
	 * them; else every CPU of the machine, a poller and a client each,
	 * which is no fair placement: flagged. */
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
	sh = mmap(NULL, shlen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	all = malloc((size_t)n * nlat * sizeof(uint64_t));
	if (sh == MAP_FAILED || !all)
		die("scale memory", -ENOMEM);
	memset(sh, 0, sizeof(*sh));
	snprintf(stats, sizeof(stats), "dp-bench-scale-%d-%u", (int)getpid(), n);
	service_start_on(&svc_, pc, n, stats, NULL);
	for (unsigned i = 0; i < n; i++) {
		fflush(stdout);
		kids[i] = fork();
		if (kids[i] < 0)
			die("fork", -errno);
		if (kids[i] == 0)
			scale_client(sh, i, n, cc[i], ns, nlat);
	}
	for (int t = 0; __atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE) < (int)n; t++) {
		if (t > 3000) {
			fprintf(stderr, "dp-bench: scale: clients did not start\n");
			exit(1);
		}
		usleep(10000);
	}
	/* Where each client's queue landed: the stats region's queue blocks. */
	h = stats_map(stats, &hlen);
	f->distinct = h != NULL;
	{
		size_t o = 0;
		bool seen[SCALE_MAX_N] = {false};

		for (unsigned i = 0; i < n; i++) {
			int p = h ? stats_poller_of(h, kids[i]) : -1;

			if (p < 0 || p >= (int)n || seen[p])
				f->distinct = false;
			else
				seen[p] = true;
			o += (size_t)snprintf(f->placed + o, sizeof(f->placed) - o, "%s%d",
					      i ? "," : "", p);
		}
	}
	__atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < n; i++) {
		int st;

		waitpid(kids[i], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			bad = true;
	}
	if (h)
		munmap((void *)h, hlen);
	service_stop(&svc_);
	if (bad) {
		fprintf(stderr, "dp-bench: scale: a client failed (N=%u)\n", n);
		exit(1);
	}
	f->min_rate = 1e30;
	for (unsigned i = 0; i < n; i++) {
		f->rate += sh->c[i].rate;
		f->min_rate = sh->c[i].rate < f->min_rate ? sh->c[i].rate : f->min_rate;
		f->max_rate = sh->c[i].rate > f->max_rate ? sh->c[i].rate : f->max_rate;
	}
	f->samples = 0;
	for (unsigned i = 0; i < n; i++) {
		memcpy(all + f->samples, sh->lat + (size_t)i * nlat,
		       sh->c[i].nlat * sizeof(uint64_t));
		f->samples += sh->c[i].nlat;
	}
	qsort(all, f->samples, sizeof(*all), cmp_u64);
	f->p50 = percentile_sorted(all, f->samples, 50) / 1e3;
	f->p99 = percentile_sorted(all, f->samples, 99) / 1e3;
	f->p999 = percentile_sorted(all, f->samples, 99.9) / 1e3;
	free(all);
	munmap(sh, shlen);
}

/* The CPU lists of scale and idle-queues: given, or half the machine for
 * the pollers (the upper half) and half for the clients (the lower). */
static void scale_cpus(int *svc, int *nsvc, int *cli, int *ncli)
{
	int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN), half = ncpu / 2 ? ncpu / 2 : 1;

	*nsvc = service_cpus_arg ? parse_list(service_cpus_arg, svc, SCALE_MAX_CPUS) : 0;
	*ncli = client_cpus_arg ? parse_list(client_cpus_arg, cli, SCALE_MAX_CPUS) : 0;
	if (*nsvc < 0 || *ncli < 0) {
		fprintf(stderr, "dp-bench: bad CPU list (want e.g. 8-15 or 1,3,5)\n");
		exit(2);
	}
	if (!service_cpus_arg)
		for (*nsvc = 0; *nsvc < half; (*nsvc)++)
			svc[*nsvc] = ncpu > 1 ? ncpu - half + *nsvc : 0;
	if (!client_cpus_arg)
		for (*ncli = 0; *ncli < half; (*ncli)++)
			cli[*ncli] = *ncli;
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

static void bench_scale(void)
{
	int svc[SCALE_MAX_CPUS], cli[SCALE_MAX_CPUS], nsvc, ncli, nn = 0;
	unsigned ns[SCALE_MAX_N];
	struct scale_fig f[SCALE_MAX_N];
	double r1 = 0, x[SCALE_MAX_N], rate[SCALE_MAX_N], p99[SCALE_MAX_N], ideal[SCALE_MAX_N];
	bool shared[SCALE_MAX_N];
	char a[512], b[512];

	if (!dataplaned_path) {
		fprintf(stderr,
			"dp-bench: scale needs --dataplaned PATH (it starts the services)\n");
		exit(2);
	}
	scale_cpus(svc, &nsvc, cli, &ncli);
	if (scale_pollers_arg) {
		int v[SCALE_MAX_N];

		nn = parse_list(scale_pollers_arg, v, SCALE_MAX_N);
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
		/* Powers of two that fit; where only 1 does, 2 on shared CPUs. */
		for (unsigned n = 1; n <= SCALE_MAX_N && (int)n <= nsvc && (int)n <= ncli; n *= 2)
			ns[nn++] = n;
		if (nn == 1)
			ns[nn++] = 2;
	}
	fmt_list(a, sizeof(a), svc, nsvc);
	fmt_list(b, sizeof(b), cli, ncli);
	printf("scale: N pollers (dataplaned --pollers N) and N client processes, each with its "
	       "own queue on its own poller, P4's workload (64 B WRITEs, batch 32) for %.1f s, "
	       "then 64 B WRITEs one outstanding (up to %u samples each, at most as long), all "
	       "clients at once\n",
	       scale_secs, quick ? 20000 : 100000);
	printf("  CPUs: pollers from %s, clients from %s (%ld online)\n", a, b,
	       sysconf(_SC_NPROCESSORS_ONLN));
	report_obj("scale");
	report_str("what", "N pollers, N client processes, P4 workload each; aggregate rate; "
			   "64 B WRITE latency under all clients");
	report_str("service_cpus", a);
	report_str("client_cpus", b);
	report_num("seconds", scale_secs);
	scale_pairs(svc, nsvc, cli, ncli, ns, nn);
	report_arr("steps");
	printf("  %3s %-14s %-14s %-13s %13s %12s %8s %8s %8s %8s  %s\n", "N", "poller CPUs",
	       "client CPUs", "queue->poller", "aggregate M/s", "per client", "scaling", "p50 us",
	       "p99 us", "p99.9 us", "verdict");
	for (int i = 0; i < nn; i++) {
		struct scale_fig *s = &f[i];
		double sc;

		scale_step(ns[i], svc, nsvc, cli, ncli, s);
		if (ns[i] == 1 && !r1)
			r1 = s->rate;
		sc = r1 > 0 ? s->rate / (ns[i] * r1) : 0.0 / 0.0;
		printf("  %3u %-14s %-14s %-13s %13.2f %5.2f-%-6.2f %8.2f %8.2f %8.2f %8.2f  "
		       "%s%s%s\n",
		       ns[i], s->pollers, s->clients, s->placed, s->rate / 1e6, s->min_rate / 1e6,
		       s->max_rate / 1e6, sc, s->p50, s->p99, s->p999,
		       r1 > 0 ? verdict(sc >= 0.8) : "n/a (no N=1)",
		       s->shared ? "  SHARED CPUs: not a fair placement" : "",
		       s->distinct ? "" : "  WARNING: queues not on distinct pollers");
		report_obj(NULL);
		report_u64("n", ns[i]);
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
		x[i] = ns[i];
		rate[i] = s->rate;
		p99[i] = s->p99;
		ideal[i] = 0.8 * ns[i] * r1;
		shared[i] = s->shared;
	}
	report_end();
	report_end();
	printf("  scaling = aggregate / (N x aggregate at N=1), target >= 0.8; queue->poller: "
	       "the poller index of each client's queue (stats region); p50/p99: all clients' "
	       "samples together, submit to completion\n");
	plot_scale("scale", x, rate, p99, ideal, shared, (unsigned)nn);
}

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
		if (i % 64 == 0 && (rc = dp_connect(sock_path, "dp-bench-idle", &c)) < 0)
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

	usleep(svc_spin_us + 500000);
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
	       what, r->pct, svc_spin_us / 1e6 + 0.5, r->sleep_pct, r->idle_pct,
	       (unsigned long long)r->sleeps, (unsigned long long)r->wakeups);
	report_obj(key);
	report_num("cpu_pct", r->pct);
	report_num("poller_asleep_pct", r->sleep_pct);
	report_num("poller_spinning_pct", r->idle_pct);
	report_u64("sleeps", r->sleeps);
	report_u64("doorbell_wakeups", r->wakeups);
	report_end();
}

static void bench_idle_queues(void)
{
	int svc[SCALE_MAX_CPUS], cli[SCALE_MAX_CPUS], nsvc, ncli, ready[2], hold[2];
	uint64_t ns = (uint64_t)(scale_secs * 1e9);
	const struct dp_stats_header *h;
	const struct dp_stats_poller *sp;
	struct idle_cpu cpu_q, cpu_0;
	double r0a, r0b, r1k, loop0, loop1k, base, cost;
	size_t hlen;
	char stats[64], ch;
	struct service s;
	struct bench b;
	pid_t holder;

	if (!dataplaned_path) {
		fprintf(stderr,
			"dp-bench: idle-queues needs --dataplaned PATH (it starts the service)\n");
		exit(2);
	}
	scale_cpus(svc, &nsvc, cli, &ncli);
	snprintf(stats, sizeof(stats), "dp-bench-idle-%d", (int)getpid());
	service_start_on(&s, svc, 1, stats, NULL);
	if (!(h = stats_map(stats, &hlen)))
		die("stats region", -ENOENT);
	sp = stats_poller(h, 0);
	bench_pin(cli[0]);
	bench_open(&b, 4096);
	timed_write_rate(&b, ns / 10);
	r0a = timed_write_rate(&b, ns);
	loop0 = empty_loop_ns(sp, 300);

	if (pipe(ready) || pipe(hold))
		die("pipe", -errno);
	fflush(stdout);
	holder = fork();
	if (holder == 0) {
		close(ready[0]);
		close(hold[1]);
		idle_holder(idle_queues, ncli > 1 ? cli[1] : cli[0], ready[1], hold[0]);
	}
	close(ready[1]);
	close(hold[0]);
	if (read(ready[0], &ch, 1) != 1) {
		fprintf(stderr, "dp-bench: idle-queues: the holder of the idle queues failed\n");
		exit(1);
	}
	/* The poller takes new queues from its inbox at its next loop. */
	usleep(100000);
	loop1k = empty_loop_ns(sp, 300);
	timed_write_rate(&b, ns / 10);
	r1k = timed_write_rate(&b, ns);
	idle_cpu_use(s.pid, sp, &cpu_q);
	close(hold[1]);
	waitpid(holder, NULL, 0);
	for (int i = 0; i < 500 && LD(h->svc.queues) > 1; i++)
		usleep(10000);
	timed_write_rate(&b, ns / 10);
	r0b = timed_write_rate(&b, ns);
	verify(&b, 4096);
	bench_close(&b);
	idle_cpu_use(s.pid, sp, &cpu_0);
	munmap((void *)h, hlen);
	service_stop(&s);

	base = (r0a + r0b) / 2;
	cost = 1 - r1k / base;
	printf("idle-queues: P4 (64 B WRITEs, batch 32, %.1f s) on one poller, with 0 and with "
	       "%u open idle queues (another process's, %u clients)\n",
	       scale_secs, idle_queues, (idle_queues + 63) / 64);
	printf("  CPUs: poller %d, client %d, holder of the idle queues %d\n", svc[0], cli[0],
	       ncli > 1 ? cli[1] : cli[0]);
	printf("  rate: 0 idle %.2f M/s (before) %.2f M/s (after); %u idle %.2f M/s; cost "
	       "%.1f%%  target < 5%%  %s\n",
	       r0a / 1e6, r0b / 1e6, idle_queues, r1k / 1e6, 100 * cost, verdict(cost < 0.05));
	printf("  empty poller loop: %.0f ns with 1 queue, %.0f ns with %u more (%.2f ns per "
	       "idle queue)\n",
	       loop0, loop1k, idle_queues, (loop1k - loop0) / idle_queues);
	printf("  how the poller finds work: every loop drains the queues it polls; a queue "
	       "idle for 1024 loops (or when the poller sleeps) is parked: NEED_WAKEUP armed, "
	       "off the polled list, its client rings the SQ doorbell on its next submit. "
	       "Every 32 loops an epoll_wait(0) tells whether a doorbell rang; only then is "
	       "the parked list walked (dataplane/core/poller.c, docs/architecture.md \"Parked "
	       "queues\"). So idle queues cost a busy poller nearly nothing.\n");
	report_obj("idle_queues");
	report_u64("idle_queues", idle_queues);
	report_num("poller_cpu", svc[0]);
	report_num("client_cpu", cli[0]);
	report_num("desc_per_s_0_before", r0a);
	report_num("desc_per_s_0_after", r0b);
	report_num("desc_per_s_idle", r1k);
	report_num("cost", cost);
	report_str("target", "< 5%");
	report_bool("pass", cost < 0.05);
	report_num("empty_loop_ns_1_queue", loop0);
	report_num("empty_loop_ns_idle", loop1k);
	report_str("how_found",
		   "polled queues each loop; idle ones parked, woken by their doorbells");
	report_u64("spin_us", svc_spin_us);
	report_idle_cpu("idle_cpu_with_idle_queues", "with the idle queues open", &cpu_q);
	report_idle_cpu("idle_cpu_one_queue", "one queue open", &cpu_0);
	report_end();
}

/*
 * P5 beyond one thread (S4, S5): a 1 GiB local WRITE on services with N
 * pollers (--pollers, default 1,2,4 as --service-cpus allows), shared out
 * in stripes with the pollers that have nothing of their own (dataplaned
 * --stripe-min), against one thread's memcpy run after every service has
 * gone; then, on the largest N, 64 B WRITEs on another poller's queue while
 * 1 GiB WRITEs run back to back, against the same without them.
 */
struct storm {
	struct bench *b;
	atomic_int stop;
	unsigned copies;
};

static void *storm_main(void *arg)
{
	struct storm *st = arg;
	struct dp_desc d;
	struct dp_cqe cqe;
	uint64_t ns;
	int rc;

	while (!atomic_load(&st->stop)) {
		dp_prep_write(&d, st->b->src, 0, st->b->seg, 0, st->b->len, st->copies);
		if ((rc = dp_tool_run_one(st->b->q, &d, -1, &cqe, &ns)))
			die("storm WRITE", rc);
		st->copies++;
	}
	return NULL;
}

/* n 64 B WRITEs on q, one at a time, busy-polled: p50 and p99 in ns. */
static void small_lat(struct bench *b, struct dp_queue *q, unsigned n, double *p50, double *p99)
{
	uint64_t *lat = malloc(n * sizeof(*lat));
	struct dp_desc d;
	struct dp_cqe cqe;
	int rc;

	if (!lat)
		die("malloc", -ENOMEM);
	for (unsigned i = 0; i < n; i++) {
		dp_prep_write(&d, b->src, 0, b->seg, b->len - 64, 64, i);
		if ((rc = dp_tool_run_one(q, &d, -1, &cqe, &lat[i])))
			die("64 B WRITE", rc);
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
	struct dp_queue *q2;
	cpu_set_t set;
	pthread_t t;
	int rc;

	if ((rc = dp_queue_create(b->c, 64, &q2)) < 0)
		die("queue", rc);
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
	double r[16];

	if (reps > 16)
		reps = 16;
	memset(src, 7, len);
	memset(dst, 0, len);
	memcpy(dst, src, len);
	for (unsigned k = 0; k < reps; k++) {
		uint64_t t0 = dp_now_ns();

		memcpy(dst, src, len);
		r[k] = (double)len / (double)(dp_now_ns() - t0);
	}
	qsort(r, reps, sizeof(double), cmp_dbl);
	munmap(src, peer_maplen(len));
	munmap(dst, peer_maplen(len));
	return r[reps / 2];
}

static void bench_stripe(void)
{
	enum { REPS = 5, MAXN = 8 };
	const uint64_t len = max_size < 1024 * MiB ? max_size : 1024 * MiB;
	const unsigned nlat = quick ? 5000 : 20000;
	int svc[SCALE_MAX_CPUS], cli[SCALE_MAX_CPUS], nsvc, ncli, nn = 0;
	unsigned ns[MAXN];
	double gbs[MAXN], peer = 0, r[REPS], lat[4] = {0}; /* alone p50, p99; storm p50, p99 */
	char list[512], stats[64];
	struct service s;
	struct bench b;
	struct storm st = {0};

	if (!dataplaned_path) {
		fprintf(stderr,
			"dp-bench: stripe needs --dataplaned PATH (it starts the services)\n");
		exit(2);
	}
	scale_cpus(svc, &nsvc, cli, &ncli);
	if (scale_pollers_arg) {
		int v[MAXN];

		nn = parse_list(scale_pollers_arg, v, MAXN);
		for (int i = 0; i < nn; i++)
			ns[i] = (unsigned)v[i];
	} else {
		for (unsigned n = 1; n <= (unsigned)nsvc && nn < 3; n *= 2)
			ns[nn++] = n;
	}
	for (int i = 0; i < nn; i++)
		if (ns[i] < 1 || ns[i] > (unsigned)nsvc) {
			fprintf(stderr, "dp-bench: %u pollers, but --service-cpus has %d CPUs\n",
				ns[i], nsvc);
			exit(2);
		}
	snprintf(stats, sizeof(stats), "dp-bench-stripe-%d", (int)getpid());
	fmt_list(list, sizeof(list), svc, nsvc);
	bench_pin(cli[0]);
	printf("P5 beyond one thread: %llu MiB local WRITE vs single-thread memcpy (GB/s, median "
	       "of %u)\n",
	       (unsigned long long)(len / MiB), REPS);
	printf("  CPUs: pollers on %s (the first N), client on %d, 64 B latency client on %d%s\n",
	       list, cli[0], cli[ncli > 1 ? 1 : 0], ncli > 1 ? "" : " (shared: not fair)");
	report_obj("stripe");
	report_str("service_cpus", list);
	report_num("client_cpu", cli[0]);
	report_u64("size", len);
	report_arr("runs");
	for (int i = 0; i < nn; i++) {
		service_start_on(&s, svc, ns[i], stats, NULL);
		bench_open(&b, len);
		/* The first WRITE maps the pages in the service: not timed. */
		write_wait(&b, 0, len, 0, -1, "warm-up WRITE");
		for (unsigned k = 0; k < REPS; k++)
			r[k] = (double)len / (double)write_wait(&b, 0, len, k + 1, -1, "WRITE");
		qsort(r, REPS, sizeof(double), cmp_dbl);
		gbs[i] = r[REPS / 2];
		verify(&b, len);
		if (i == nn - 1 && ns[i] > 1)
			stripe_storm(&b, &st, cli[0], cli[ncli > 1 ? 1 : 0], nlat, lat);
		bench_close(&b);
		service_stop(&s);
		report_obj(NULL);
		report_u64("pollers", ns[i]);
		report_num("gb_per_s", gbs[i]);
		report_end();
	}
	report_end();
	if (with_peers) {
		peer = memcpy_rate(len, REPS);
		printf("  memcpy: one thread on CPU %d, no dataplaned of ours alive, buffers "
		       "backed "
		       "like ours: %.2f GB/s\n",
		       cli[0], peer);
		report_num("memcpy_gb_per_s", peer);
	}
	printf("  %8s %10s %10s\n", "pollers", "GB/s", "vs memcpy");
	for (int i = 0; i < nn; i++) {
		printf("  %8u %10.2f", ns[i], gbs[i]);
		if (peer > 0)
			printf(" %9.2fx%s", gbs[i] / peer,
			       ns[i] >= 4 ? (gbs[i] / peer >= 2 ? "  target >= 2x  PASS"
								: "  target >= 2x  MISS")
					  : "");
		printf("\n");
	}
	if (ns[nn - 1] > 1) {
		printf("  64 B WRITE on poller 1 beside %u back-to-back %llu MiB WRITEs on poller "
		       "0 "
		       "(%u pollers): p50 %.2f us, p99 %.2f us; alone p50 %.2f us, p99 %.2f us; "
		       "p99 %.2fx alone  target <= 2x  %s\n",
		       st.copies, (unsigned long long)(len / MiB), ns[nn - 1], lat[2] / 1e3,
		       lat[3] / 1e3, lat[0] / 1e3, lat[1] / 1e3, lat[3] / lat[1],
		       verdict(lat[3] <= 2 * lat[1]));
		report_num("storm_p50_ns", lat[2]);
		report_num("storm_p99_ns", lat[3]);
		report_num("alone_p50_ns", lat[0]);
		report_num("alone_p99_ns", lat[1]);
		report_u64("storm_copies", st.copies);
	}
	report_end();
}

static void usage(void)
{
	printf("usage: dp-bench [--socket PATH | --dataplaned PATH] [--cpu N] [--service-cpu N] "
	       "[--quick]\n"
	       "                [--max-size BYTES] [--no-peers] [--json] [--plot FILE.png] "
	       "[--rounds N]\n"
	       "                [--depth N] [--peer HOST:PORT --peer-socket PATH [--busy-poll]] "
	       "[--help] [--version]\n"
	       "                "
	       "[latency|rate|bandwidth|overhead|notify|fabric|bypass|vm|vm-target|session|scale|\n"
	       "                 idle-queues|stripe|placement|check|all]\n"
	       "                scale, idle-queues, stripe: [--pollers LIST] [--service-cpus "
	       "LIST]\n"
	       "                [--client-cpus LIST] [--seconds S] [--idle-queues N] "
	       "[--spin-us N]\n"
	       "  latency, rate, bandwidth: P3, P4, P5 and their peers (fi_pingpong shm, io_uring "
	       "NOP,\n"
	       "    memcpy). With --dataplaned PATH (and no --socket) dp-bench starts a service "
	       "for\n"
	       "    each (poller on --service-cpu, default 1), stops it, then runs the peer on "
	       "the\n"
	       "    same CPUs with no dataplaned of ours alive; a check of the dataplaned "
	       "processes\n"
	       "    alive and their pollers' CPUs is printed beside each peer.\n"
	       "  overhead (and all, with --dataplaned): P3/P4 against services with the stats\n"
	       "    region on and off, --rounds N rounds.\n"
	       "  --depth N: the depth of the queue each benchmark measures through, fabric\n"
	       "    and bypass aside (256): a power of two, 32 .. the service's --max-depth\n"
	       "    (default 256). rate prints it.\n"
	       "  notify: 64 B WRITE + notification (submit -> owner sees it) vs a plain 64 B\n"
	       "    WRITE (submit -> completion), p50/p99 and their ratio.\n"
	       "  fabric|bypass --peer HOST:PORT --peer-socket PATH: P6/P7 through another "
	       "service,\n"
	       "    and local vs fabric for the same transfers. The client sleeps in dp_wait;\n"
	       "    --busy-poll: it spins on its CQ (give it a CPU of its own, --cpu).\n"
	       "  vm: WRITEs from memory registered with dp_register_mem vs from dp_alloc "
	       "regions,\n"
	       "    64 KiB .. 256 MiB (--max-size) and 64 B latency, with the ratio.\n"
	       "  vm-target --peer HOST:PORT --peer-socket PATH: WRITEs of 1 .. 64 MiB into\n"
	       "    another service's export of dp_register_mem memory vs of a dp_alloc region\n"
	       "    (same host, or over the fabric), both GB/s and the ratio (target >= 0.8x).\n"
	       "  session [--peer HOST:PORT --peer-socket PATH]: first contact with a fresh "
	       "engine\n"
	       "    session (dp_session_open + first 4 KiB WRITE; targets <= 1 ms on one host,\n"
	       "    <= 5 ms over tcp) beside the named export's, and a warm WRITE, in us.\n"
	       "  scale (--dataplaned): for N in --pollers (default 1,2,4,.. while the CPU lists\n"
	       "    allow; 2 on shared CPUs where only 1 fits) a dataplaned with N pollers on\n"
	       "    --service-cpus (default the upper half of the CPUs) and N client processes\n"
	       "    on --client-cpus (default the lower half), one queue each on its own poller\n"
	       "    (checked in the stats region): P4's workload for --seconds (default 3, 1\n"
	       "    with --quick), then 64 B WRITE latency; aggregate rate, rate / (N x rate at\n"
	       "    N=1) (target >= 0.8), p50/p99. CPUs shared between pollers and clients are\n"
	       "    flagged; each client CPU's ping-pong with its poller's CPU comes first.\n"
	       "    --plot: rate and p99 against N.\n"
	       "  idle-queues (--dataplaned): P4 on one poller with 0 and --idle-queues N\n"
	       "    (default 1000) idle queues open (target: < 5%% slower), the empty loop's\n"
	       "    cost, and the idle service's CPU use once --spin-us (default 1000000) ends.\n"
	       "  stripe (--dataplaned): a 1 GiB (--max-size) local WRITE on services with N\n"
	       "    pollers (--pollers, default 1,2,4) vs one thread's memcpy (target >= 2x at\n"
	       "    4), then 64 B WRITE p50/p99 on poller 1 while 1 GiB WRITEs run on poller 0\n"
	       "    (target: p99 <= 2x alone).\n"
	       "  placement: only the cache-line ping-pong between --cpu and --service-cpu, which\n"
	       "    every run prints first.\n"
	       "  check: only the check for dataplaned pollers on --cpu and --service-cpu.\n"
	       "  --no-peers: run and print nothing of the peers. --json: one JSON object on "
	       "stdout\n"
	       "    (the text goes to stderr).\n");
}

static bool known_benchmark(const char *what)
{
	static const char *const names[] = {
		"latency",     "rate",	    "bandwidth", "overhead", "all",    "fabric",
		"bypass",      "placement", "check",	 "vm",	     "notify", "scale",
		"idle-queues", "stripe",    "vm-target", "session",  "serving"};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(what, names[i]))
			return true;
	return false;
}

/* The flags into the globals; returns the benchmark to run, exits on
 * --help, --version and bad usage (2). */
static const char *parse_args(int argc, char **argv)
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
					     {"version", no_argument, 0, 'V'},
					     {"pollers", required_argument, 0, 'N'},
					     {"service-cpus", required_argument, 0, 'C'},
					     {"client-cpus", required_argument, 0, 'L'},
					     {"seconds", required_argument, 0, 'D'},
					     {"idle-queues", required_argument, 0, 'I'},
					     {"spin-us", required_argument, 0, 'U'},
					     {"depth", required_argument, 0, 'Q'},
					     {"busy-poll", no_argument, 0, 'B'},
					     {"serving-alloc", no_argument, 0, 'A'},
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
		case 'B':
			fabric_busy = true;
			break;
		case 'A':
			serving_alloc = true;
			break;
		case 'm':
			max_size = strtoull(optarg, NULL, 0);
			if (max_size < MiB) {
				fprintf(stderr, "dp-bench: --max-size below 1 MiB\n");
				exit(2);
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
			if (overhead_rounds < 1 || overhead_rounds > OVERHEAD_ROUNDS_MAX) {
				fprintf(stderr, "dp-bench: --rounds wants 1..%d\n",
					OVERHEAD_ROUNDS_MAX);
				exit(2);
			}
			break;
		case 'P':
			peer_addr = optarg;
			break;
		case 'T':
			peer_sock = optarg;
			break;
		case 'N':
			scale_pollers_arg = optarg;
			break;
		case 'C':
			service_cpus_arg = optarg;
			break;
		case 'L':
			client_cpus_arg = optarg;
			break;
		case 'D':
			scale_secs = atof(optarg);
			if (!(scale_secs > 0 && scale_secs <= 600)) {
				fprintf(stderr, "dp-bench: --seconds wants (0, 600]\n");
				exit(2);
			}
			break;
		case 'I':
			idle_queues = (unsigned)atoi(optarg);
			if (idle_queues < 1 || idle_queues > 65536) {
				fprintf(stderr, "dp-bench: --idle-queues wants 1..65536\n");
				exit(2);
			}
			break;
		case 'U':
			svc_spin_us = (unsigned)atoi(optarg);
			break;
		case 'Q': {
			char *end;
			unsigned long v;

			errno = 0;
			v = strtoul(optarg, &end, 10);
			/* Above the service's --max-depth: its EINVAL, at the queue. */
			queue_depth = errno || *end || v > (1ul << 20) ? 0 : (uint32_t)v;
			if (queue_depth < 32 || (queue_depth & (queue_depth - 1))) {
				fprintf(stderr,
					"dp-bench: --depth wants a power of two, 32 .. 1048576\n");
				exit(2);
			}
			break;
		}
		case 'V':
			dp_tool_version("dp-bench");
			exit(0);
		case 'h':
			usage();
			exit(0);
		default:
			fprintf(stderr, "Try 'dp-bench --help'.\n");
			exit(2);
		}
	}
	if (optind < argc)
		what = argv[optind];
	if (!known_benchmark(what)) {
		fprintf(stderr, "dp-bench: unknown benchmark '%s'\nTry 'dp-bench --help'.\n", what);
		exit(2);
	}
	if (service_cpu < 0)
		service_cpu = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? 1 : 0;
	own_service = dataplaned_path && !sock_path;
	if (!scale_secs)
		scale_secs = quick ? 1 : 3;
	return what;
}

/* `check`: only the check for dataplaned pollers on the two CPUs, for
 * scripts that run a peer of their own (bench-fabric.sh). */
static int run_check(void)
{
	int cpus[2] = {client_cpu, service_cpu};

	report_str("tool", "dp-bench");
	peer_check(cpus, client_cpu == service_cpu ? 1 : 2);
	report_close();
	return 0;
}

static void run_benches(const char *what)
{
	bool all = !strcmp(what, "all");

	if (all || !strcmp(what, "latency"))
		bench_latency();
	if (all || !strcmp(what, "rate"))
		bench_rate();
	if (all || !strcmp(what, "bandwidth"))
		bench_bandwidth();
	if (!strcmp(what, "overhead") || (all && dataplaned_path))
		bench_overhead();
	if (!strcmp(what, "notify"))
		bench_notify();
	if (!strcmp(what, "fabric"))
		bench_fabric();
	if (!strcmp(what, "bypass"))
		bench_bypass();
	if (!strcmp(what, "vm"))
		bench_vm();
	if (!strcmp(what, "vm-target"))
		bench_vm_target();
	if (!strcmp(what, "session"))
		bench_session();
	if (!strcmp(what, "serving"))
		bench_serving();
	if (!strcmp(what, "scale"))
		bench_scale();
	if (!strcmp(what, "idle-queues"))
		bench_idle_queues();
	if (!strcmp(what, "stripe"))
		bench_stripe();
}

int main(int argc, char **argv)
{
	const char *what = parse_args(argc, argv);

	if (!strcmp(what, "check"))
		return run_check();
	report_start("dp-bench", what, with_peers);
	report_obj("cpus");
	report_num("client", client_cpu);
	report_num("service", service_cpu);
	report_end();
	/* Before any service of ours starts, on the CPUs the runs use. */
	bench_place_and_pin(client_cpu, service_cpu);
	run_benches(what);
	report_close();
	if (plot_png && plot_write(plot_png))
		return 1;
	if (plot_png)
		fprintf(stderr, "dp-bench: wrote %s\n", plot_png);
	return 0;
}
