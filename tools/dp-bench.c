/* SPDX-License-Identifier: MIT */
/*
 * dp-bench - load generator for a running dataplaned, measured side by side
 * with its peers in the same run (../shared/PERF.md):
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
 *
 * usage: dp-bench [--socket PATH | --dataplaned PATH] [--cpu N] [--service-cpu N]
 *                 [--quick] [--max-size BYTES] [--no-peers] [--json]
 *                 [--plot FILE.png] [--rounds N]
 *                 [--peer HOST:PORT --peer-socket PATH]
 *                 [latency|rate|bandwidth|overhead|notify|fabric|bypass|vm|placement|check|all]
 * Long runs show a progress line on stderr; --json prints the results as one
 * JSON document on stdout (the text goes to stderr); --no-peers runs and
 * prints nothing of the peers; --plot draws the latency CDF and throughput
 * over time with gnuplot.
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
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-report.h"
#include "clock.h"
#include "dataplane.h"
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
		die("connect", rc);
	if ((rc = dp_queue_create(b->c, 256, &b->q)) < 0)
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
	fflush(stdout);
	s->pid = fork();
	if (s->pid < 0)
		die("fork", -errno);
	if (s->pid == 0) {
		/* We are pinned to the client's CPU; the service gets its own. */
		bench_pin(service_cpu);
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
	plot_latency("P3: 64 B local WRITE, one outstanding", lat, n);
	printf("P3 latency, 64 B local WRITE, one outstanding (%u samples)\n", n);
	report_obj("latency");
	report_str("what", "P3: 64 B local WRITE, one outstanding, submit to completion seen");
	print_ours_cpus();
	printf("  dataplane  p50 %.2f us  p99 %.2f us  p999 %.2f us  max %.2f us  (a round trip: "
	       "client -> poller -> client)\n",
	       p50, lat[n * 99 / 100] / 1e3, lat[n * 999 / 1000] / 1e3, lat[n - 1] / 1e3);
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

static double local_write_rate(struct bench *b, unsigned batch, uint64_t total, struct progress *pg)
{
	struct dp_desc d[64];
	struct dp_cqe cqe[256];
	uint64_t t0, sent = 0, done = 0;

	t0 = dp_now_ns();
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
	return (double)total / (double)(dp_now_ns() - t0) * 1e9;
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
	printf("P4 rate, 64 B local WRITEs, batch 32, one poller (%llu descriptors)\n",
	       (unsigned long long)total);
	report_obj("rate");
	report_str("what", "P4: 64 B local WRITEs, batch 32, one poller");
	print_ours_cpus();
	report_u64("descriptors", total);
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
	return write_wait(b, off, len, ud, 10000, "fabric WRITE");
}

/* Runs `total` 4 MiB WRITEs with up to `depth` in flight, rotating over the
 * region; returns GB/s. */
static double fabric_stream(struct bench *b, unsigned depth, unsigned total, uint32_t *path)
{
	struct dp_cqe cqe[FABRIC_DEPTH];
	unsigned sent = 0, done = 0;
	uint64_t t0 = dp_now_ns();

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
	return (double)total * FABRIC_XFER / (double)(dp_now_ns() - t0);
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
		die("connect", rc);
	if (!local && (rc = dp_connect(peer_sock, "dp-bench-target", &pc)) < 0)
		die("connect to --peer-socket", rc);
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
	printf("fabric: %s via %s, completions on the %s path\n", sock_path ? sock_path : "default",
	       peer_addr, path_name(f.path));
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

static void usage(void)
{
	printf("usage: dp-bench [--socket PATH | --dataplaned PATH] [--cpu N] [--service-cpu N] "
	       "[--quick]\n"
	       "                [--max-size BYTES] [--no-peers] [--json] [--plot FILE.png] "
	       "[--rounds N]\n"
	       "                [--peer HOST:PORT --peer-socket PATH] [--help] [--version]\n"
	       "                "
	       "[latency|rate|bandwidth|overhead|notify|fabric|bypass|vm|placement|check|all]\n"
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
	       "  notify: 64 B WRITE + notification (submit -> owner sees it) vs a plain 64 B\n"
	       "    WRITE (submit -> completion), p50/p99 and their ratio.\n"
	       "  fabric|bypass --peer HOST:PORT --peer-socket PATH: P6/P7 through another "
	       "service,\n"
	       "    and local vs fabric for the same transfers.\n"
	       "  vm: WRITEs from memory registered with dp_register_mem vs from dp_alloc "
	       "regions,\n"
	       "    64 KiB .. 256 MiB (--max-size) and 64 B latency, with the ratio.\n"
	       "  placement: only the cache-line ping-pong between --cpu and --service-cpu, which\n"
	       "    every run prints first.\n"
	       "  check: only the check for dataplaned pollers on --cpu and --service-cpu.\n"
	       "  --no-peers: run and print nothing of the peers. --json: one JSON object on "
	       "stdout\n"
	       "    (the text goes to stderr).\n");
}

static bool known_benchmark(const char *what)
{
	static const char *const names[] = {"latency", "rate",	 "bandwidth", "overhead",
					    "all",     "fabric", "bypass",    "placement",
					    "check",   "vm",	 "notify"};

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
			if (overhead_rounds < 1 || overhead_rounds > 32) {
				fprintf(stderr, "dp-bench: --rounds wants 1..32\n");
				exit(2);
			}
			break;
		case 'P':
			peer_addr = optarg;
			break;
		case 'T':
			peer_sock = optarg;
			break;
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
