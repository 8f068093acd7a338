/* SPDX-License-Identifier: MIT */
/*
 * bench-report.h - what dp-bench and ring-bench show besides their figures:
 * the machine's placement (a cache-line ping-pong between the two CPUs a
 * bench uses), which dataplaned processes are alive and where their pollers
 * are (so that a peer is known to have run with none on its CPUs), a
 * progress line on long runs (redrawn in place on a terminal, a plain line
 * every few seconds when piped), results as one JSON document (--json), and
 * gnuplot charts (--plot FILE.png).
 */
#ifndef DP_BENCH_REPORT_H
#define DP_BENCH_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- placement: a cache-line ping-pong between two CPUs ---- */

struct pingpong_result {
	double ns;	   /* per round trip */
	double elapsed_ns; /* the timed loop */
	double waited_ns;  /* both threads' run-queue wait in it (schedstat) */
};

/* Nanoseconds the calling thread waited runnable for its CPU (the second
 * field of /proc/thread-self/schedstat, read through @fd); 0 where the
 * kernel does not say. */
double runqueue_wait_ns(int fd);
/* qsort comparators for doubles and uint64_t, ascending. */
int cmp_dbl(const void *a, const void *b);
int cmp_u64(const void *a, const void *b);
/* The median of v[0..n), n > 0; sorts v in place (v[0] and v[n - 1] are
 * then the extremes). */
double bench_median(double *v, unsigned n);
/* Pins the calling thread to @cpu (nothing when @cpu < 0). */
void bench_pin(int cpu);
/* One run: two threads pinned to cpu_a and cpu_b hand one cache line back
 * and forth round_trips times. 0, or -1 when a thread cannot be pinned. */
int bench_pingpong(int cpu_a, int cpu_b, uint64_t round_trips, struct pingpong_result *r);
/* The same with `lines` 1 (the above) or 2: A writes one line and polls
 * another that B writes, the shape of a request ring and a completion ring
 * (each line written by one side, polled by the other), where one line
 * handed back and forth moves with its data to the side that writes next. */
int bench_pingpong_lines(int cpu_a, int cpu_b, unsigned lines, uint64_t round_trips,
			 struct pingpong_result *r);

/* The placement figure a bench prints beside its results: the median of
 * `runs` ping-pong runs of 200 000 round trips after one warm-up, a run in
 * which the threads waited for their CPUs more than 1% of it repeated (up to
 * 10 times). ns per round trip, or a negative number when the CPUs cannot
 * be used. */
double bench_placement(int cpu_a, int cpu_b, unsigned runs);

/* Prints "placement: cache-line ping-pong CPU a <-> CPU b: N ns round trip
 * (median of RUNS runs)" and, with --json, a "placement" object. */
void placement_report(int cpu_a, int cpu_b, double ns, unsigned runs);

/* What every bench does before its first run, after it has reported its
 * CPUs: the placement figure of 5 runs between client_cpu and service_cpu,
 * printed (placement_report), then the calling thread pinned to client_cpu. */
void bench_place_and_pin(int client_cpu, int service_cpu);
/* Where the service's poller is taken to run when the user does not say:
 * CPU 1, or CPU 0 when the client is not on 0 or there is one CPU. */
int bench_default_service_cpu(int client_cpu);

/* ---- dataplaned processes alive on this host ---- */

/* Scans /proc for processes named dataplaned: each one's pid, the CPUs its
 * pinned threads (the pollers) are bound to and whether one of them is
 * running now. Writes a one-line description to desc ("no dataplaned
 * running" when none) and returns how many pinned threads sit on one of
 * cpus[0..ncpus). */
unsigned services_on_cpus(const int *cpus, unsigned ncpus, char *desc, size_t len);

/* The check for a peer about to run on cpus: which dataplaned processes
 * are alive and whether a poller of theirs sits on one of those CPUs. */
struct peer_check {
	bool clean; /* no dataplaned poller on the peer's CPUs */
	bool none;  /* no dataplaned at all */
	char cpus[64];
	char desc[1024];
};
void peer_check_take(struct peer_check *c, const int *cpus, unsigned ncpus);
/* Prints it on one line ("  check: no dataplaned running during the peer
 * run", or a WARNING naming the pollers on the peer's CPUs) and, with
 * --json, "peer_clean" and "peer_check" members in the current object. */
void peer_check_print(const struct peer_check *c);
/* Both at once; true when clean. */
bool peer_check(const int *cpus, unsigned ncpus);

/* ---- progress ---- */

#define PROGRESS_MAX_POINTS 4096

struct progress {
	const char *what;
	uint64_t total, done;
	uint32_t calls;
	uint64_t t0, last_draw, last_point;
	bool drawn;
	/* (time since start, done) every 50 ms: throughput over time. */
	unsigned npoints;
	double t[PROGRESS_MAX_POINTS];
	uint64_t n[PROGRESS_MAX_POINTS];
};

void progress_start(struct progress *p, const char *what, uint64_t total);
/* Cheap enough for every operation: looks at the clock every 64 calls. */
void progress_update(struct progress *p, uint64_t done);
/* Erases the line (terminal) and keeps the time series. */
void progress_end(struct progress *p);

/* ---- JSON (--json) ---- */

/* Human-readable output goes to stderr from here on; report_close()
 * prints the JSON document, alone, on stdout. */
void report_json_begin(void);
bool report_json(void);
/* The members every bench's document opens with: "tool", "version" (this
 * build's), "benchmark" (what runs) and "peers" (whether they run). */
void report_start(const char *tool, const char *what, bool peers);
/* Nesting: an object or array member named key (NULL inside an array). */
void report_obj(const char *key);
void report_arr(const char *key);
void report_end(void);
void report_num(const char *key, double v);
void report_u64(const char *key, uint64_t v);
void report_str(const char *key, const char *v);
void report_bool(const char *key, bool v);
void report_close(void);

/* ---- charts (--plot) ---- */

/* Keeps the latency samples (ns, sorted) for a percentile plot
 * (HdrHistogram's: x = 1/(1-p) on a log axis from 50% to 99.999%) and a progress's
 * time series for throughput over time; plot_write() runs gnuplot. */
void plot_latency(const char *label, const uint64_t *sorted, size_t n);
void plot_throughput(const char *label, const struct progress *p);
/* A horizontal line on the latency plot, for a peer that reports one
 * figure (a mean) and no samples: fi_pingpong. */
void plot_latency_line(const char *label, double us);
/* `dp-bench scale`: aggregate rate (desc/s) and p99 (us) against N, with
 * the target (ideal, desc/s) and the points whose CPUs were shared. */
void plot_scale(const char *title, const double *n, const double *rate, const double *p99,
		const double *ideal, const bool *shared, unsigned npts);
/* The value at percentile pct (0..100] of n sorted samples: the smallest
 * sample with at least pct% of them at or below it. */
double percentile_sorted(const uint64_t *sorted, size_t n, double pct);
/* 0, or -1 with a message on stderr (gnuplot missing or failed). */
int plot_write(const char *png);

#endif
