/* SPDX-License-Identifier: MIT */
/*
 * dp-bench.h - what the files of dp-bench share: its options (set by the
 * table in dp-bench.c), the set-up every benchmark starts from and the
 * WRITE loops it times (dp-bench-common.c), the services dp-bench starts of
 * its own (dp-bench-service.c), and the benchmarks, which dp-bench.c runs by
 * name from its table:
 *   dp-bench-local.c      latency, rate, overhead, notify: 64 B local WRITEs
 *   dp-bench-bandwidth.c  bandwidth, stripe: large local WRITEs vs memcpy
 *   dp-bench-fabric.c     fabric, bypass: WRITEs to another service's segment
 *   dp-bench-vm.c         vm, vm-target: memory registered with dp_register_mem
 *   dp-bench-session.c    session, serving: engine sessions
 *   dp-bench-scale.c      scale, idle-queues: many pollers, many queues
 */
#ifndef DP_BENCH_H
#define DP_BENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "bench-report.h"
#include "dataplane.h"

#define MiB (1ull << 20)
#define OVERHEAD_ROUNDS_MAX 64 /* --rounds */
#define SCALE_MAX_N 16	       /* --pollers */
#define SCALE_MAX_CPUS 256     /* --service-cpus, --client-cpus */

/* ---- the options ---- */

struct bench_opts {
	/* Where the benchmarks connect: --socket, or a service of our own
	 * while it runs (NULL: the default socket). */
	const char *socket;
	const char *dataplaned; /* --dataplaned: the services of our own */
	const char *plot;	/* --plot FILE.png */
	int cpu, service_cpu;	/* --cpu, --service-cpu */
	bool quick, peers;	/* --quick; peers unless --no-peers */
	/* P3..P5 against services of our own (--dataplaned, no --socket):
	 * stopped before each peer runs. */
	bool own_service;
	uint64_t max_size; /* --max-size */
	unsigned rounds;   /* --rounds; 0: 3 with --quick, else 7 */
	/* --depth: the depth of the queue each benchmark measures through
	 * (fabric and bypass keep 256). */
	uint32_t depth;
	/* --peer HOST:PORT names the other service as ours reaches it;
	 * dp-bench is a client of both (--peer-socket is the other's control
	 * socket). */
	const char *peer_addr, *peer_sock;
	bool busy_poll;	    /* --busy-poll: fabric's client spins on its CQ */
	bool serving_alloc; /* --serving-alloc */
	/* scale, idle-queues, stripe: --pollers, --service-cpus, --client-cpus */
	const char *pollers, *service_cpus, *client_cpus;
	double seconds;	      /* --seconds; 0: 1 with --quick, else 3 */
	unsigned idle_queues; /* --idle-queues */
	unsigned spin_us;     /* --spin-us of the services of our own */
};
extern struct bench_opts opt;

/* ---- the benchmarks: dp-bench.c's table, name -> function -> help ---- */

struct bench_entry {
	const char *name;
	void (*run)(void); /* NULL: placement, which every run prints first */
	const char *help;  /* one line */
};

void bench_latency(void);
void bench_rate(void);
void bench_overhead(void);
void bench_notify(void);
void bench_bandwidth(void);
void bench_stripe(void);
void bench_fabric(void);
void bench_bypass(void);
void bench_vm(void);
void bench_vm_target(void);
void bench_session(void);
void bench_serving(void);
void bench_scale(void);
void bench_idle_queues(void);

/* ---- failing: a line on stderr, exit 1 (dp-bench-common.c) ---- */

__attribute__((noreturn)) void die(const char *what, int rc);
/* With dp_last_error()'s words for the call that failed; what may be NULL. */
__attribute__((noreturn)) void die_last(const char *what);
/* Exit 2 unless --dataplaned was given: `bench` starts `what` itself. */
void need_dataplaned(const char *bench, const char *what);
/* Exit 2 unless --peer and --peer-socket were given. */
void need_peer(void);

/* ---- set-up ---- */

/* Segment names unique per process and per call: two dp-bench clients of
 * one service, or two benches in one process, never collide. */
const char *segment_name(const char *what);
struct dp_client *bench_connect(const char *path, const char *name);
struct dp_queue *bench_queue(struct dp_client *c, uint32_t depth);
int bench_alloc(struct dp_client *c, uint64_t len, unsigned flags, uint8_t **p, const char *what);
int bench_register(struct dp_client *c, void *p, uint64_t len, const char *what);
void bench_session_create(struct dp_client *c);
/* The bytes every source holds, checked in the destination afterwards. */
void bench_fill(uint8_t *p, uint64_t len);

/* A client, its queue, a source region of len bytes (bench_fill's) and a
 * segment of as many (region dst, mapped at dstp) opened as seg; tc: the
 * client of the other service that exported it (NULL: ours did). */
struct bench {
	struct dp_client *c, *tc;
	struct dp_queue *q;
	int src, dst, seg;
	uint8_t *srcp, *dstp;
	uint64_t len;
};

/* What bench_open_spec makes. */
struct bench_spec {
	uint64_t len;
	uint32_t depth;
	unsigned alloc; /* DP_ALLOC_* of both regions */
	/* The segment: exported by a client of --peer-socket's service and
	 * opened through --peer; else ours. */
	bool peer;
	const char *name; /* of the export, before segment_name's suffix */
};

void bench_open_spec(struct bench *b, const struct bench_spec *s);
/* The local set-up most benchmarks measure: --depth, huge pages, the
 * segment ours, its bytes zeroed. */
void bench_open(struct bench *b, uint64_t len);
/* Exports region (of b->tc, else of b->c) under a name of `prefix` and
 * opens it for b->c as bench_open_spec opened b->seg: the handle. */
int bench_export_open(struct bench *b, int region, const char *prefix);
void bench_close(struct bench *b);
/* The first len bytes of the segment hold the source's, else exit 1. */
void verify(const struct bench *b, uint64_t len);

/* ---- WRITEs ---- */

/* Runs d alone on q to its completion, busy-polled (wait_ms < 0) or waited
 * for up to wait_ms; dies naming `what` on a failure. Returns ns; the
 * completion's flags in *flags when flags is not NULL. */
uint64_t run_desc(struct dp_queue *q, const struct dp_desc *d, int wait_ms, const char *what,
		  uint32_t *flags);
/* One WRITE from `region` at off into b's segment at off, run_desc's way. */
uint64_t write_from(struct bench *b, int region, uint64_t off, uint64_t len, uint64_t ud,
		    int wait_ms, const char *what);
/* The same from b's source, busy-polled. */
uint64_t one_write(struct bench *b, uint64_t off, uint64_t len, uint64_t ud);
/* n timed 64 B WRITEs from `region`, one outstanding, after n / 10 to warm
 * up, write_from's way; lat gets them sorted (ns). A progress line named
 * `label` unless NULL. */
void latency_run(struct bench *b, int region, unsigned n, int wait_ms, const char *what,
		 const char *label, uint64_t *lat);
/* total WRITEs of len bytes from b's source into `seg`, up to depth in
 * flight, the offsets rotating over b's length, each wait up to wait_ms
 * (dp_tool_write_stream): GB/s; the last completion's flags in *path. */
double write_stream(struct bench *b, int seg, uint64_t len, unsigned total, unsigned depth,
		    int wait_ms, uint32_t *path, const char *what);
/* 64 B WRITEs in batches of `batch`, `total` of them or, with ns, as many
 * as `ns` allows (then the rest drained): desc/s. */
double write_rate(struct bench *b, unsigned batch, uint64_t total, uint64_t ns,
		  struct progress *pg);

/* ---- memcpy, the peer of large WRITEs ---- */

/* GB/s of one thread's memcpy of len bytes, the median of reps (odd, at
 * most 16); pg (unless NULL) counts the bytes on from *done. */
double memcpy_gbps(uint8_t *dst, const uint8_t *src, uint64_t len, unsigned reps,
		   struct progress *pg, uint64_t *done);

/* ---- words ---- */

const char *verdict(bool ok);
/* The path a completion's flags name: fabric, local or "?". */
const char *path_name(uint32_t flags);
/* "same host" where the flags say so, else path_name's. */
const char *path_desc(uint32_t flags);

/* ---- services of our own (dp-bench-service.c) ---- */

struct service {
	pid_t pid;
	char dir[64], sock[108];
};

/* A service of our own with npollers pollers on cpus[] (the process pinned
 * to them: its control thread never sits on a client's CPU), spinning
 * --spin-us (default 1 s, so it never sleeps during a run), no fabric; its
 * stats region named `stats`, or none (NULL); opt.socket is then its
 * socket. */
void service_start_on(struct service *s, const int *cpus, unsigned npollers, const char *stats);
/* P3..P5's service: one poller on --service-cpu; with stats, its region
 * named after us. */
void service_start(struct service *s, bool stats);
void service_stop(struct service *s);
/* The service side of P3..P5: a service of our own with --dataplaned (its
 * poller pinned to --service-cpu, spinning), stopped before the peer runs;
 * or the one at --socket, which we cannot stop. */
void ours_begin(void);
void ours_end(void);
/* Where ours ran, as text and as the "cpus" object of the report. */
void print_ours_cpus(void);
/* A comma-separated list of n CPUs. */
void fmt_list(char *buf, size_t len, const int *v, int n);
/* "0-3,8,10" into out[]; returns how many, or -1 when malformed. */
int parse_list(const char *s, int *out, int max);
/* The CPU lists of scale, idle-queues and stripe: given, or half the
 * machine for the pollers (the upper half) and half for the clients (the
 * lower). */
void scale_cpus(int *svc, int *nsvc, int *cli, int *ncli);

#endif
