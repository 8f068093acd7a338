/* SPDX-License-Identifier: MIT */
/*
 * ring-bench - the project's SPSC ring against DPDK's rte_ring, in one run,
 * on the same two pinned CPUs, with the same 64-byte entries (P1, P2: docs/benchmarks.md, "Targets").
 *
 *   P1  throughput: a producer streams entries to a consumer, burst 1 and 32.
 *   P2  round trip: A enqueues one entry on an SQ, echo thread B moves it to
 *       a CQ, A dequeues it. A bare cache-line ping-pong is the floor.
 *   P4's ring traffic ("pipe"): what P4 moves between the client's and the
 *       poller's CPUs and nothing else. A streams 64-byte entries in bursts
 *       of 32 with at most PIPE_DEPTH in flight and reaps up to 256 at a
 *       time; B takes bursts of 32 and answers each entry with a 32-byte
 *       completion on a second ring, as the poller does, without the
 *       validation and the copy. No target: P4 can go no faster than this
 *       on the same two CPUs, with our rings or rte_ring.
 *
 * Each measurement runs once to warm up and then --reps times, interleaved
 * (ours, rte_ring, ours, ...), so that noise from other work on the machine
 * falls on both sides alike; the table shows the medians of the runs and the
 * median of the runs' ratios.
 *
 * On a shared two-CPU machine a run in which the scheduler gave one of the
 * two spinning threads' CPUs to another program measures that program, not
 * the ring (a round trip then waits for a time slice). Each thread reads its
 * run-queue wait time (/proc/thread-self/schedstat): a run in which the two
 * threads together waited for their CPUs longer than 1% of the run is
 * repeated, up to --retries times, and the last attempt is kept whatever
 * happens. A thread that has waited ABANDON_WAIT_NS gives the run up early.
 * The counts are printed.
 *
 * Every entry carries a sequence number that the receiving side checks: a
 * mismatch is an error (exit 1). A missed target is not an error: this is a
 * benchmark.
 *
 * rte_ring is set up with rte_ring_init() on memory of our own, so no EAL,
 * hugepages or root are needed.
 *
 * ring-bench starts no service; before and after the runs it checks /proc
 * for dataplaned processes with pollers on its two CPUs and prints what it
 * found (a spinning poller there would slow both rings, rte_ring's too).
 * The ping-pong runs are the placement figure, printed on a line of their
 * own. --no-peers runs ours and the ping-pong only and prints no ratio;
 * --json prints every figure as one JSON object on stdout.
 */
#include "dp_ring.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <rte_ring.h>
#include <rte_ring_elem.h>

#include "dp_tool.h"
#include "dp_version.h"
/* The ping-pong, the dataplaned check and --json (bench-report.c, shared
 * with dp-bench). */
#include "bench-report.h"
#include "clock.h"

#define ENTRY_SIZE 64u
#define MAX_BURST 32u
/* Loop iterations between two looks at the run-queue wait time (a pread of
 * a /proc file, about a microsecond): a millisecond or more of any loop. */
#define PREEMPT_CHECK_EVERY 16384u
#define ABANDON_WAIT_NS 1e6

/* With sequence words (the default, as the service's queues), the ring's
 * word is the last 4 bytes: payload[6]'s high half is the ring's. */
struct entry {
	uint64_t seq;
	uint64_t payload[7];
};
#define ENTRY_SEQ_OFF 60u
_Static_assert(sizeof(struct entry) == ENTRY_SIZE, "64-byte entries");

/* The pipe's completion: a struct dp_cqe's size, its ring's word where the
 * service's CQ has it (the high half of the last 8 bytes). */
struct completion {
	uint64_t seq;
	int32_t status;
	uint32_t flags;
	uint64_t bytes;
	uint64_t reserved;
};
#define CQE_SIZE 32u
#define CQE_SEQ_OFF 28u
_Static_assert(sizeof(struct completion) == CQE_SIZE, "32-byte completions");
/* dp-bench's P4 queue: 256 slots each way, and as many in flight. */
#define PIPE_DEPTH 256u
#define PIPE_REAP 256u

static struct {
	uint64_t p1_entries;
	uint64_t p2_round_trips;
	unsigned reps;
	unsigned retries;
	uint32_t ring_size;
	int cpu[2];
	bool peers;
	bool no_seq;
} opt = {
	.p1_entries = 5 * 1000 * 1000,
	.p2_round_trips = 1000 * 1000,
	.reps = 5,
	.retries = 20,
	.ring_size = 1024,
	.cpu = {0, 1},
	.peers = true,
};

static void die(const char *what)
{
	fprintf(stderr, "ring-bench: %s\n", what);
	exit(1);
}

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set))
		die("cannot pin a thread (see --cpus)");
}

/*
 * What the two timed threads of one run share besides the queues: a start
 * line (both pinned and ready before the clock starts) and the means to give
 * up a run that the scheduler disturbed.
 */
struct run_ctl {
	int arrived;
	int abandoned;	    /* a thread lost its CPU for long: the run is void */
	bool may_abandon;   /* false on the last attempt: finish regardless */
	uint64_t waited_ns; /* run-queue wait of both threads, timed region */
	double t_start, t_end;
};

/* One thread's view of the run. */
struct run_thread {
	struct run_ctl *ctl;
	int schedstat_fd;
	double wait_at_start;
	uint32_t rounds;
};

static struct run_thread run_start(struct run_ctl *c, int cpu)
{
	struct run_thread t = {.ctl = c};

	pin(cpu);
	t.schedstat_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	__atomic_add_fetch(&c->arrived, 1, __ATOMIC_ACQ_REL);
	while (__atomic_load_n(&c->arrived, __ATOMIC_ACQUIRE) < 2)
		;
	t.wait_at_start = runqueue_wait_ns(t.schedstat_fd);
	return t;
}

/* The other thread gave up: stop waiting for it. Polled only while a queue
 * is full or empty, never on the path that moves entries. */
static inline bool run_abandoned(const struct run_thread *t)
{
	return __atomic_load_n(&t->ctl->abandoned, __ATOMIC_RELAXED);
}

/* Called once per loop iteration; every PREEMPT_CHECK_EVERY calls, gives the
 * run up if this thread has waited ABANDON_WAIT_NS for its CPU since the
 * start. */
static inline bool run_disturbed(struct run_thread *t)
{
	if (++t->rounds % PREEMPT_CHECK_EVERY || !t->ctl->may_abandon)
		return false;
	if (runqueue_wait_ns(t->schedstat_fd) - t->wait_at_start < ABANDON_WAIT_NS)
		return false;
	__atomic_store_n(&t->ctl->abandoned, 1, __ATOMIC_RELAXED);
	return true;
}

static void run_finish(struct run_thread *t)
{
	double waited = runqueue_wait_ns(t->schedstat_fd) - t->wait_at_start;

	__atomic_add_fetch(&t->ctl->waited_ns, (uint64_t)waited, __ATOMIC_RELAXED);
	if (t->schedstat_fd >= 0)
		close(t->schedstat_fd);
}

static void run_threads(void *(*a)(void *), void *(*b)(void *), void *arg)
{
	pthread_t ta, tb;

	if (pthread_create(&ta, NULL, a, arg) || pthread_create(&tb, NULL, b, arg))
		die("pthread_create");
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
}

/* ---- the two queues behind one shape ---- */

/*
 * A queue as the benchmark loops see it. For our ring the two sides hold
 * different private views (struct dp_ring) of one shared ring; rte_ring has
 * one object for both. The loops below are always_inline and get the
 * enqueue/dequeue functions as constants, so each queue's loop is compiled
 * with its own fast path inlined and no indirect call.
 */
struct queue {
	void *tx; /* producer's handle */
	void *rx; /* consumer's handle */
};

/* Entries of the ring's own size: struct entry, or struct completion on the
 * pipe's CQ (rte_ring is told the size; ours knows it). */
typedef int (*enqueue_fn)(void *q, const void *src, uint32_t n);
typedef int (*dequeue_fn)(void *q, void *dst, uint32_t n);

static inline __attribute__((always_inline)) int ours_enqueue(void *q, const void *src, uint32_t n)
{
	return dp_ring_enqueue_burst(q, src, n);
}

static inline __attribute__((always_inline)) int ours_dequeue(void *q, void *dst, uint32_t n)
{
	return dp_ring_dequeue_burst(q, dst, n);
}

static inline __attribute__((always_inline)) int rte_enqueue(void *q, const void *src, uint32_t n)
{
	return (int)rte_ring_enqueue_burst_elem(q, src, ENTRY_SIZE, n, NULL);
}

static inline __attribute__((always_inline)) int rte_dequeue(void *q, void *dst, uint32_t n)
{
	return (int)rte_ring_dequeue_burst_elem(q, dst, ENTRY_SIZE, n, NULL);
}

static inline __attribute__((always_inline)) int rte_enqueue_cqe(void *q, const void *src,
								 uint32_t n)
{
	return (int)rte_ring_enqueue_burst_elem(q, src, CQE_SIZE, n, NULL);
}

static inline __attribute__((always_inline)) int rte_dequeue_cqe(void *q, void *dst, uint32_t n)
{
	return (int)rte_ring_dequeue_burst_elem(q, dst, CQE_SIZE, n, NULL);
}

/* Shared, populated memory for both kinds of ring, so neither pays page
 * faults in the timed region nor gets different pages than the other. */
static void *shared_mem(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE,
		       -1, 0);

	if (p == MAP_FAILED)
		die("mmap");
	return p;
}

/* Our queue pair: the service's side created, the client's side attached
 * through a second mapping of the memfd, as in production. Each side writes
 * its private views (struct dp_ring) on every call: they get cache lines of
 * their own, or the two threads would share one. */
struct ours_pair {
	struct dp_ring_pair service __attribute__((aligned(128)));
	struct dp_ring_pair client __attribute__((aligned(128)));
};

/* slots each way; cqes: the CQ holds 32-byte completions, else 64-byte
 * entries as the SQ does. */
static void ours_pair_open(struct ours_pair *p, uint32_t slots, bool cqes)
{
	struct dp_ring_layout sq = {slots, ENTRY_SIZE, opt.no_seq ? DP_RING_NO_SEQ : ENTRY_SEQ_OFF};
	struct dp_ring_layout cq = sq;
	int rc, fd;

	if (cqes)
		cq = (struct dp_ring_layout){slots, CQE_SIZE,
					     opt.no_seq ? DP_RING_NO_SEQ : CQE_SEQ_OFF};
	rc = dp_ring_pair_create_seq(&p->service, "ring-bench", &sq, &cq, 0);
	if (rc)
		die("dp_ring_pair_create");
	fd = dup(p->service.fd);
	if (fd < 0 || dp_ring_pair_attach_seq(&p->client, fd, &sq, &cq))
		die("dp_ring_pair_attach");
}

static void ours_pair_close(struct ours_pair *p)
{
	dp_ring_pair_close(&p->client);
	dp_ring_pair_close(&p->service);
}

/* An rte_ring of `slots` (a power of two); exact: all of them usable
 * (RING_F_EXACT_SZ, on twice the memory), else slots - 1, rte_ring's
 * default (P1 and P2 keep it, as they always measured). */
static uint32_t rte_size(uint32_t slots, bool exact)
{
	return exact ? 2 * slots : slots;
}

static struct rte_ring *rte_open(const char *name, uint32_t esize, uint32_t slots, bool exact)
{
	ssize_t len = rte_ring_get_memsize_elem(esize, rte_size(slots, exact));
	struct rte_ring *r;

	if (len < 0)
		die("rte_ring_get_memsize_elem");
	r = shared_mem((size_t)len);
	if (rte_ring_init(r, name, slots,
			  RING_F_SP_ENQ | RING_F_SC_DEQ | (exact ? RING_F_EXACT_SZ : 0)))
		die("rte_ring_init");
	return r;
}

static void rte_close(struct rte_ring *r, uint32_t esize, uint32_t slots, bool exact)
{
	munmap(r, (size_t)rte_ring_get_memsize_elem(esize, rte_size(slots, exact)));
}

/* ---- P1: throughput ---- */

/* Read-only during the run, then each thread's results on lines of their
 * own: nothing here is written by one thread and read by the other while
 * entries move. */
struct p1_run {
	struct queue q;
	uint32_t burst;
	uint64_t count;
	struct run_ctl ctl __attribute__((aligned(128)));
	int producer_err __attribute__((aligned(128)));
	int consumer_err __attribute__((aligned(128)));
	uint64_t bad; /* entries out of sequence */
};

static inline __attribute__((always_inline)) void p1_produce(struct p1_run *run, enqueue_fn enq)
{
	struct entry buf[MAX_BURST] __attribute__((aligned(64))) = {{0}};
	struct run_thread t = run_start(&run->ctl, opt.cpu[0]);
	uint64_t seq = 0;

	run->ctl.t_start = (double)dp_now_ns();
	while (seq < run->count) {
		uint32_t n =
			run->count - seq < run->burst ? (uint32_t)(run->count - seq) : run->burst;
		int k;

		for (uint32_t i = 0; i < n; i++)
			buf[i].seq = seq + i;
		k = enq(run->q.tx, buf, n);
		if (k < 0) {
			run->producer_err = k;
			break;
		}
		seq += (uint32_t)k;
		if ((k == 0 && run_abandoned(&t)) || run_disturbed(&t))
			break;
	}
	run_finish(&t);
}

static inline __attribute__((always_inline)) void p1_consume(struct p1_run *run, dequeue_fn deq)
{
	struct entry buf[MAX_BURST] __attribute__((aligned(64)));
	struct run_thread t = run_start(&run->ctl, opt.cpu[1]);
	uint64_t expected = 0, bad = 0;

	while (expected < run->count) {
		int k = deq(run->q.rx, buf, run->burst);

		if (k < 0) {
			run->consumer_err = k;
			break;
		}
		for (int i = 0; i < k; i++)
			bad += buf[i].seq != expected + (uint64_t)i;
		expected += (uint32_t)k;
		if ((k == 0 && run_abandoned(&t)) || run_disturbed(&t))
			break;
	}
	run->ctl.t_end = (double)dp_now_ns();
	run->bad = bad;
	run_finish(&t);
}

static void *ours_p1_producer(void *run)
{
	p1_produce(run, ours_enqueue);
	return NULL;
}

static void *ours_p1_consumer(void *run)
{
	p1_consume(run, ours_dequeue);
	return NULL;
}

static void *rte_p1_producer(void *run)
{
	p1_produce(run, rte_enqueue);
	return NULL;
}

static void *rte_p1_consumer(void *run)
{
	p1_consume(run, rte_dequeue);
	return NULL;
}

/* Returns Mops/s. */
static double p1(bool ours, uint32_t burst, struct run_ctl *ctl)
{
	struct p1_run run = {.ctl = *ctl, .burst = burst, .count = opt.p1_entries};
	struct ours_pair pair;

	struct rte_ring *r;

	if (ours) {
		ours_pair_open(&pair, opt.ring_size, false);
		run.q.tx = &pair.client.sq;
		run.q.rx = &pair.service.sq;
		run_threads(ours_p1_producer, ours_p1_consumer, &run);
		ours_pair_close(&pair);
	} else {
		r = rte_open("p1", ENTRY_SIZE, opt.ring_size, false);
		run.q.tx = run.q.rx = r;
		run_threads(rte_p1_producer, rte_p1_consumer, &run);
		rte_close(r, ENTRY_SIZE, opt.ring_size, false);
	}
	if (run.producer_err || run.consumer_err)
		die("a ring reported an error (-EPROTO)");
	if (run.bad) {
		fprintf(stderr, "ring-bench: P1 %s burst %u: %lu entries out of sequence\n",
			ours ? "ours" : "rte_ring", burst, (unsigned long)run.bad);
		exit(1);
	}
	*ctl = run.ctl;
	return (double)run.count / (run.ctl.t_end - run.ctl.t_start) * 1e3;
}

/* ---- P2: round trip ---- */

/* P2's and the pipe's run: a client and an echo thread, an SQ and a CQ. */
struct echo_run {
	struct queue sq, cq;
	uint64_t count;
	struct run_ctl ctl __attribute__((aligned(128)));
	int client_err __attribute__((aligned(128)));
	uint64_t bad; /* entries or completions that came back wrong */
	int echo_err __attribute__((aligned(128)));
};

/* The shape of an echo run: its rings (slots each way, completions of
 * cq_esize bytes; exact: rte_ring's hold all their slots too) and its
 * threads for each kind of ring. */
struct echo_shape {
	const char *name;
	uint32_t slots, cq_esize;
	bool exact;
	void *(*ours[2])(void *); /* client, echo */
	void *(*rte[2])(void *);
};

/* Opens the shape's rings of one kind, runs its threads on them, closes
 * them; exits on a ring error or a wrong entry. */
static void echo_run(const struct echo_shape *sh, bool ours, struct echo_run *run)
{
	struct ours_pair pair;
	struct rte_ring *sq, *cq;

	if (ours) {
		ours_pair_open(&pair, sh->slots, sh->cq_esize == CQE_SIZE);
		run->sq = (struct queue){.tx = &pair.client.sq, .rx = &pair.service.sq};
		run->cq = (struct queue){.tx = &pair.service.cq, .rx = &pair.client.cq};
		run_threads(sh->ours[0], sh->ours[1], run);
		ours_pair_close(&pair);
	} else {
		sq = rte_open("echo-sq", ENTRY_SIZE, sh->slots, sh->exact);
		cq = rte_open("echo-cq", sh->cq_esize, sh->slots, sh->exact);
		run->sq = (struct queue){.tx = sq, .rx = sq};
		run->cq = (struct queue){.tx = cq, .rx = cq};
		run_threads(sh->rte[0], sh->rte[1], run);
		rte_close(sq, ENTRY_SIZE, sh->slots, sh->exact);
		rte_close(cq, sh->cq_esize, sh->slots, sh->exact);
	}
	if (run->client_err || run->echo_err)
		die("a ring reported an error (-EPROTO)");
	if (run->bad) {
		fprintf(stderr, "ring-bench: %s %s: %lu came back wrong\n", sh->name,
			ours ? "ours" : "rte_ring", (unsigned long)run->bad);
		exit(1);
	}
}

/* Thread A: one entry out on the SQ, wait for it on the CQ. */
static inline __attribute__((always_inline)) void p2_client(struct echo_run *run, enqueue_fn enq,
							    dequeue_fn deq)
{
	struct run_thread t = run_start(&run->ctl, opt.cpu[0]);
	struct entry e = {0};
	uint64_t bad = 0;
	int k = 0;

	run->ctl.t_start = (double)dp_now_ns();
	for (uint64_t i = 0; i < run->count; i++) {
		e.seq = i;
		while ((k = enq(run->sq.tx, &e, 1)) == 0)
			if (run_abandoned(&t))
				goto out;
		if (k < 0)
			break;
		while ((k = deq(run->cq.rx, &e, 1)) == 0)
			if (run_abandoned(&t))
				goto out;
		if (k < 0)
			break;
		bad += e.seq != i;
		if (run_disturbed(&t))
			break;
	}
	run->ctl.t_end = (double)dp_now_ns();
out:
	if (k < 0)
		run->client_err = k;
	run->bad = bad;
	run_finish(&t);
}

/* Thread B: the echo. */
static inline __attribute__((always_inline)) void p2_echo(struct echo_run *run, enqueue_fn enq,
							  dequeue_fn deq)
{
	struct run_thread t = run_start(&run->ctl, opt.cpu[1]);
	struct entry e;
	int k = 0;

	for (uint64_t i = 0; i < run->count; i++) {
		while ((k = deq(run->sq.rx, &e, 1)) == 0)
			if (run_abandoned(&t))
				goto out;
		if (k < 0)
			break;
		while ((k = enq(run->cq.tx, &e, 1)) == 0)
			if (run_abandoned(&t))
				goto out;
		if (k < 0)
			break;
		if (run_disturbed(&t))
			break;
	}
out:
	if (k < 0)
		run->echo_err = k;
	run_finish(&t);
}

static void *ours_p2_client(void *run)
{
	p2_client(run, ours_enqueue, ours_dequeue);
	return NULL;
}

static void *ours_p2_echo(void *run)
{
	p2_echo(run, ours_enqueue, ours_dequeue);
	return NULL;
}

static void *rte_p2_client(void *run)
{
	p2_client(run, rte_enqueue, rte_dequeue);
	return NULL;
}

static void *rte_p2_echo(void *run)
{
	p2_echo(run, rte_enqueue, rte_dequeue);
	return NULL;
}

/* Returns ns per round trip. */
static double p2(bool ours, struct run_ctl *ctl)
{
	const struct echo_shape sh = {.name = "P2",
				      .slots = opt.ring_size,
				      .cq_esize = ENTRY_SIZE,
				      .ours = {ours_p2_client, ours_p2_echo},
				      .rte = {rte_p2_client, rte_p2_echo}};
	struct echo_run run = {.ctl = *ctl, .count = opt.p2_round_trips};

	echo_run(&sh, ours, &run);
	*ctl = run.ctl;
	return (run.ctl.t_end - run.ctl.t_start) / (double)run.count;
}

/* ---- P4's ring traffic: the pipe ---- */

/* Thread A, as dp-bench's P4 client: a burst out while it has credit, then
 * whatever completions are there. */
static inline __attribute__((always_inline)) void pipe_client(struct echo_run *run, enqueue_fn enq,
							      dequeue_fn deq)
{
	struct entry buf[MAX_BURST] __attribute__((aligned(64))) = {{0}};
	struct completion c[PIPE_REAP] __attribute__((aligned(64)));
	struct run_thread t = run_start(&run->ctl, opt.cpu[0]);
	uint64_t sent = 0, done = 0, bad = 0;
	int k = 0;

	run->ctl.t_start = (double)dp_now_ns();
	while (done < run->count) {
		uint64_t room = PIPE_DEPTH - (sent - done), left = run->count - sent;
		uint32_t n = (uint32_t)(room < left ? room : left);

		if (n > MAX_BURST)
			n = MAX_BURST;
		if (n) {
			for (uint32_t i = 0; i < n; i++)
				buf[i].seq = sent + i;
			if ((k = enq(run->sq.tx, buf, n)) < 0)
				break;
			sent += (uint32_t)k;
		}
		if ((k = deq(run->cq.rx, c, PIPE_REAP)) < 0)
			break;
		for (int i = 0; i < k; i++)
			bad += c[i].seq != done + (uint64_t)i || c[i].bytes != ENTRY_SIZE;
		done += (uint32_t)k;
		if ((k == 0 && run_abandoned(&t)) || run_disturbed(&t))
			break;
	}
	run->ctl.t_end = (double)dp_now_ns();
	if (k < 0)
		run->client_err = k;
	run->bad = bad;
	run_finish(&t);
}

/* Thread B, as the poller: a burst in, a completion out for each. */
static inline __attribute__((always_inline)) void pipe_echo(struct echo_run *run, enqueue_fn enq,
							    dequeue_fn deq)
{
	struct entry buf[MAX_BURST] __attribute__((aligned(64)));
	struct completion c[MAX_BURST] __attribute__((aligned(64))) = {{0}};
	struct run_thread t = run_start(&run->ctl, opt.cpu[1]);
	uint64_t moved = 0;
	int k = 0;

	while (moved < run->count) {
		int n = deq(run->sq.rx, buf, MAX_BURST);

		if ((k = n) < 0)
			break;
		for (int i = 0; i < n; i++) {
			c[i].seq = buf[i].seq;
			c[i].bytes = ENTRY_SIZE;
		}
		for (int i = 0; i < n; i += k)
			if ((k = enq(run->cq.tx, c + i, (uint32_t)(n - i))) <= 0) {
				if (k < 0 || run_abandoned(&t))
					goto out;
				k = 0;
			}
		moved += (uint32_t)n;
		if ((n == 0 && run_abandoned(&t)) || run_disturbed(&t))
			break;
	}
out:
	if (k < 0)
		run->echo_err = k;
	run_finish(&t);
}

static void *ours_pipe_client(void *run)
{
	pipe_client(run, ours_enqueue, ours_dequeue);
	return NULL;
}

static void *ours_pipe_echo(void *run)
{
	pipe_echo(run, ours_enqueue, ours_dequeue);
	return NULL;
}

static void *rte_pipe_client(void *run)
{
	pipe_client(run, rte_enqueue, rte_dequeue_cqe);
	return NULL;
}

static void *rte_pipe_echo(void *run)
{
	pipe_echo(run, rte_enqueue_cqe, rte_dequeue);
	return NULL;
}

/* Returns Mops/s: entries out and their completions back. */
static double pipe_rate(bool ours, struct run_ctl *ctl)
{
	/* 256 usable slots each way on both kinds: the credit is 256. */
	static const struct echo_shape sh = {.name = "P4's rings",
					     .slots = PIPE_DEPTH,
					     .cq_esize = CQE_SIZE,
					     .exact = true,
					     .ours = {ours_pipe_client, ours_pipe_echo},
					     .rte = {rte_pipe_client, rte_pipe_echo}};
	struct echo_run run = {.ctl = *ctl, .count = opt.p1_entries};

	echo_run(&sh, ours, &run);
	*ctl = run.ctl;
	return (double)run.count / (run.ctl.t_end - run.ctl.t_start) * 1e3;
}

/* The placement the run got: one cache line handed back and forth
 * (bench-report.c), P2's target's yardstick; with two lines, a line each
 * way, the floor of any pair of rings whose reader polls the line its
 * writer writes next (docs/benchmarks.md, "P2's floor"). Its threads are
 * not given up early; a disturbed run is repeated like the others. */
static double pingpong(struct run_ctl *ctl, unsigned lines)
{
	struct pingpong_result r;

	if (bench_pingpong_lines(opt.cpu[0], opt.cpu[1], lines, opt.p2_round_trips, &r))
		die("cannot pin a thread (see --cpus)");
	ctl->t_start = 0;
	ctl->t_end = r.elapsed_ns;
	ctl->waited_ns = (uint64_t)r.waited_ns;
	return r.ns;
}

/* ---- driver ---- */

enum metric {
	P1_OURS_B1,
	P1_RTE_B1,
	P1_OURS_B32,
	P1_RTE_B32,
	PIPE_OURS,
	PIPE_RTE,
	P2_OURS,
	P2_RTE,
	P2_PINGPONG,
	P2_PINGPONG2,
	METRICS
};

static double measure_once(enum metric m, struct run_ctl *ctl)
{
	switch (m) {
	case P1_OURS_B1:
		return p1(true, 1, ctl);
	case P1_RTE_B1:
		return p1(false, 1, ctl);
	case P1_OURS_B32:
		return p1(true, MAX_BURST, ctl);
	case P1_RTE_B32:
		return p1(false, MAX_BURST, ctl);
	case PIPE_OURS:
		return pipe_rate(true, ctl);
	case PIPE_RTE:
		return pipe_rate(false, ctl);
	case P2_OURS:
		return p2(true, ctl);
	case P2_RTE:
		return p2(false, ctl);
	case P2_PINGPONG:
		return pingpong(ctl, 1);
	default:
		return pingpong(ctl, 2);
	}
}

static unsigned runs_repeated, runs_kept_disturbed;

/* A run whose threads waited for their CPUs more than 1% of its time is
 * repeated, up to opt.retries times; the last attempt is kept. */
static double measure(enum metric m)
{
	for (unsigned attempt = 0;; attempt++) {
		struct run_ctl ctl = {.may_abandon = attempt < opt.retries};
		double v = measure_once(m, &ctl);
		bool clean =
			!ctl.abandoned && (double)ctl.waited_ns * 100 <= ctl.t_end - ctl.t_start;

		if (clean)
			return v;
		if (!ctl.may_abandon) {
			runs_kept_disturbed++;
			return v;
		}
		runs_repeated++;
	}
}

static double median_ratio(const double *values, enum metric ours, enum metric peer)
{
	double r[opt.reps];

	for (unsigned rep = 0; rep < opt.reps; rep++)
		r[rep] = values[ours * opt.reps + rep] / values[peer * opt.reps + rep];
	return bench_median(r, opt.reps);
}

static bool json;

static void set_cpus(const char *a)
{
	if (sscanf(a, "%d,%d", &opt.cpu[0], &opt.cpu[1]) != 2) {
		fprintf(stderr, "ring-bench: --cpus wants A,B\n");
		dp_tool_try_help("ring-bench");
	}
}

static const struct dp_tool_flag flags[] = {
	{.name = "iters",
	 .arg = "N",
	 .u64 = &opt.p1_entries,
	 .help = "entries per P1 run and P4 rings run (default 5000000)"},
	{.name = "rt-iters",
	 .arg = "N",
	 .u64 = &opt.p2_round_trips,
	 .help = "round trips per P2 run (default 1000000)"},
	{.name = "reps",
	 .arg = "N",
	 .uns = &opt.reps,
	 .help = "timed runs per measurement, median reported (default 5)"},
	{.name = "retries",
	 .arg = "N",
	 .uns = &opt.retries,
	 .help = "repeats of a run disturbed by other programs (default 20)"},
	{.name = "size",
	 .arg = "SLOTS",
	 .uns = &opt.ring_size,
	 .help = "ring size of P1 and P2, a power of two >= 32 (default 1024;\n"
		 "P4's rings have 256 slots each, as dp-bench's P4 queue)"},
	{.name = "cpus",
	 .arg = "A,B",
	 .fn = set_cpus,
	 .help = "producer/client CPU and consumer/echo CPU (default 0,1)"},
	{.name = "no-seq",
	 .on = &opt.no_seq,
	 .help = "our rings without sequence words: the consumer polls the tail\n"
		 "(the default has them, as the service's queues do)"},
	{.name = "no-peers",
	 .off = &opt.peers,
	 .help = "ours and the placement ping-pong only: no rte_ring, no ratios"},
	{.name = "json",
	 .on = &json,
	 .help = "every figure as one JSON object on stdout (text on stderr)"},
	/* Named in the usage line, not listed. */
	{.name = "help", .letter = 'h'},
	{.name = "version"},
	{0},
};

static const struct dp_tool_cli cli = {
	.prog = "ring-bench",
	.head = "usage: ring-bench [--iters N] [--rt-iters N] [--reps N] [--retries N] "
		"[--size SLOTS] [--cpus A,B]\n"
		"                  [--no-seq] [--no-peers] [--json] [--help] [--version]\n",
	.tail = "",
	.col = 16,
	.flags = flags,
};

static void parse(int argc, char **argv)
{
	int first = dp_tool_parse(&cli, argc, argv);

	if (first != argc) {
		fprintf(stderr, "ring-bench: unexpected argument '%s'\n", argv[first]);
		dp_tool_try_help("ring-bench");
	}
	if (!opt.p1_entries || !opt.p2_round_trips || !opt.reps || opt.reps > 1000 ||
	    opt.ring_size < MAX_BURST || opt.ring_size > DP_RING_MAX_ENTRIES ||
	    (opt.ring_size & (opt.ring_size - 1)) || opt.cpu[0] == opt.cpu[1]) {
		fprintf(stderr, "ring-bench: --iters, --rt-iters and --reps (<= 1000) must be > 0, "
				"--size a power of two >= 32, --cpus two different CPUs\n");
		dp_tool_try_help("ring-bench");
	}
	if (json)
		report_json_begin();
}

static const char *verdict(bool pass)
{
	return pass ? "PASS" : "MISS";
}

static bool is_peer(enum metric m)
{
	return m == P1_RTE_B1 || m == P1_RTE_B32 || m == PIPE_RTE || m == P2_RTE;
}

/* The settings, on the first line and in the JSON object. */
static void report_settings(void)
{
	printf("ring-bench (dataplane %s): 64-byte entries, %u-slot rings (ours %s), "
	       "producer/client on CPU %d, consumer/echo on CPU %d\n"
	       "P1 and P4's rings: %lu entries per run; P2: %lu round trips per run; 1 warm-up + "
	       "%u runs, "
	       "interleaved; medians\n",
	       DP_VERSION_STRING, opt.ring_size,
	       opt.no_seq ? "without sequence words: tail polled" : "with sequence words",
	       opt.cpu[0], opt.cpu[1], (unsigned long)opt.p1_entries,
	       (unsigned long)opt.p2_round_trips, opt.reps);
	report_str("tool", "ring-bench");
	report_str("version", DP_VERSION_STRING);
	report_bool("peers", opt.peers);
	report_u64("entry_size", ENTRY_SIZE);
	report_u64("ring_size", opt.ring_size);
	report_bool("sequence_words", !opt.no_seq);
	report_u64("p1_entries", opt.p1_entries);
	report_u64("p2_round_trips", opt.p2_round_trips);
	report_u64("reps", opt.reps);
	report_obj("cpus");
	report_num("producer_client", opt.cpu[0]);
	report_num("consumer_echo", opt.cpu[1]);
	report_end();
}

/* Every measurement once to warm up, then opt.reps rounds of them all, a
 * line per round; values[m * opt.reps + rep]. */
static void measure_all(double *values)
{
	static const char *names[METRICS] = {"ours-b1",	  "rte-b1",	"ours-b32", "rte-b32",
					     "ours-pipe", "rte-pipe",	"ours-rt",  "rte-rt",
					     "pingpong",  "pingpong-2l"};

	for (int m = 0; m < METRICS; m++) {
		struct run_ctl warm_up = {.may_abandon = true};

		if (opt.peers || !is_peer((enum metric)m))
			measure_once((enum metric)m, &warm_up);
	}
	for (unsigned rep = 0; rep < opt.reps; rep++) {
		printf("run %u:", rep + 1);
		for (int m = 0; m < METRICS; m++) {
			double v;

			if (!opt.peers && is_peer((enum metric)m))
				continue;
			v = measure((enum metric)m);
			values[m * opt.reps + rep] = v;
			printf(" %s %.1f%s", names[m], v, m < P2_OURS ? "M/s" : "ns");
		}
		printf("\n");
		fflush(stdout);
	}
}

/*
 * What the summary compares, ours against a peer: a row of the table and an
 * object of the JSON. Each ratio is the median of the runs' own ratios: the
 * two figures of one run were measured back to back, under the same
 * conditions.
 */
static const struct comparison {
	const char *row, *key;
	enum metric ours, peer;
	const char *unit;	  /* of the JSON's figures */
	const char *target;	  /* NULL: none, the table shows note */
	double at_least, at_most; /* the target's bound on the ratio; 0: none */
	const char *note;
} comparisons[] = {
	{"P1 burst 1, Mops/s", "p1_burst1", P1_OURS_B1, P1_RTE_B1, "mops", NULL, 0, 0, "-"},
	{"P1 burst 32, Mops/s", "p1_burst32", P1_OURS_B32, P1_RTE_B32, "mops", ">= 1.0x rte_ring",
	 1.0, 0, NULL},
	{"P4's rings, Mops/s", "p4_rings", PIPE_OURS, PIPE_RTE, "mops", NULL, 0, 0,
	 "- (P4's ceiling)"},
	{"P2 round trip, ns", "p2_round_trip", P2_OURS, P2_RTE, "ns", "<= 1.1x rte_ring", 0, 1.1,
	 NULL},
	{"P2 vs ping-pong, ns", "p2_vs_pingpong", P2_OURS, P2_PINGPONG, "ns", "<= 2.5x ping-pong",
	 0, 2.5, NULL},
	{"P2 vs 2-line pp, ns", "p2_vs_two_line_pingpong", P2_OURS, P2_PINGPONG2, "ns", NULL, 0, 0,
	 "- (two rings' floor)"},
};

#define NCOMPARISONS (sizeof(comparisons) / sizeof(comparisons[0]))

static double comparison_ratio(const struct comparison *c, const double *values)
{
	return median_ratio(values, c->ours, c->peer);
}

static bool comparison_pass(const struct comparison *c, double ratio)
{
	return (!c->at_least || ratio >= c->at_least) && (!c->at_most || ratio <= c->at_most);
}

/* The summary with peers: the comparisons, what the columns mean, and the
 * dataplaned processes on our CPUs. */
static void print_comparisons(const double *values, const double *med,
			      const struct peer_check *before, const struct peer_check *after)
{
	printf("\n%-22s %9s %9s %8s  %-18s %s\n", "metric", "ours", "peer", "ratio", "target",
	       "result");
	for (unsigned i = 0; i < NCOMPARISONS; i++) {
		const struct comparison *c = &comparisons[i];
		double r = comparison_ratio(c, values);

		printf("%-22s %9.1f %9.1f %7.2fx  %-18s %s\n", c->row, med[c->ours], med[c->peer],
		       r, c->target ? c->target : c->note,
		       c->target ? verdict(comparison_pass(c, r)) : "-");
	}
	printf("(ours, peer: medians of the runs; ratio: median of the runs' ratios. Peer: "
	       "rte_ring SP/SC *_burst_elem,\n"
	       " a bare cache-line ping-pong for the ping-pong row; the 2-line ping-pong "
	       "writes one line\n"
	       " and polls another, a line each way as two rings have. P2 and the\n"
	       " ping-pongs are full"
	       " round trips, A -> B -> A, on both sides. P4's rings: 64 B entries out\n"
	       " in bursts of 32, a 32 B completion back for each, %u in flight, nothing\n"
	       " else: the most P4 could do on these CPUs.)\n",
	       PIPE_DEPTH);
	printf("CPUs: ours and rte_ring alike, producer/client %d, consumer/echo %d; no "
	       "service started\n",
	       opt.cpu[0], opt.cpu[1]);
	peer_check_print(before->clean ? after : before);
}

/* The summary with --no-peers: our medians alone. */
static void print_ours(const double *med)
{
	printf("\n%-22s %9s\n", "metric", "ours");
	printf("%-22s %9.1f\n", "P1 burst 1, Mops/s", med[P1_OURS_B1]);
	printf("%-22s %9.1f\n", "P1 burst 32, Mops/s", med[P1_OURS_B32]);
	printf("%-22s %9.1f\n", "P4's rings, Mops/s", med[PIPE_OURS]);
	printf("%-22s %9.1f\n", "P2 round trip, ns", med[P2_OURS]);
	printf("%-22s %9.1f\n", "2-line ping-pong, ns", med[P2_PINGPONG2]);
	printf("(medians of the runs; P2 is a full round trip, A -> B -> A)\n");
}

/* One comparison in the JSON object: our runs and median (and, with peers,
 * the peer's, the ratio and the target). */
static void report_comparison(const struct comparison *c, const double *values, const double *med)
{
	char k[64];

	report_obj(c->key);
	snprintf(k, sizeof(k), "ours_%s", c->unit);
	report_num(k, med[c->ours]);
	report_arr("ours_runs");
	for (unsigned rep = 0; rep < opt.reps; rep++)
		report_num(NULL, values[c->ours * opt.reps + rep]);
	report_end();
	if (opt.peers) {
		const char *pk = c->peer == P2_PINGPONG	   ? "pingpong"
				 : c->peer == P2_PINGPONG2 ? "pingpong_two_lines"
							   : "rte_ring";
		double r = comparison_ratio(c, values);

		snprintf(k, sizeof(k), "%s_%s", pk, c->unit);
		report_num(k, med[c->peer]);
		snprintf(k, sizeof(k), "%s_runs", pk);
		report_arr(k);
		for (unsigned rep = 0; rep < opt.reps; rep++)
			report_num(NULL, values[c->peer * opt.reps + rep]);
		report_end();
		report_num("ratio", r);
		if (c->target) {
			report_str("target", c->target);
			report_bool("pass", comparison_pass(c, r));
		}
	}
	report_end();
}

int main(int argc, char **argv)
{
	double *values, med[METRICS];
	struct peer_check before, after;

	parse(argc, argv);
	values = calloc((size_t)opt.reps * METRICS, sizeof(*values));
	if (!values)
		die("calloc");
	report_settings();
	peer_check_take(&before, opt.cpu, 2);
	measure_all(values);
	peer_check_take(&after, opt.cpu, 2);
	for (int m = 0; m < METRICS; m++) {
		double v[opt.reps];

		memcpy(v, values + m * opt.reps, sizeof(v));
		med[m] = bench_median(v, opt.reps);
	}
	printf("runs repeated because the threads waited for their CPUs > 1%% of the run: %u; "
	       "kept anyway after %u repeats: %u\n",
	       runs_repeated, opt.retries, runs_kept_disturbed);
	report_u64("runs_repeated", runs_repeated);
	report_u64("runs_kept_disturbed", runs_kept_disturbed);
	placement_report(opt.cpu[0], opt.cpu[1], med[P2_PINGPONG], opt.reps);
	if (opt.peers)
		print_comparisons(values, med, &before, &after);
	else
		print_ours(med);
	/* Without peers the ping-pong comparisons would only repeat
	 * p2_round_trip's figures. */
	for (unsigned i = 0; i < NCOMPARISONS; i++)
		if (opt.peers || is_peer(comparisons[i].peer))
			report_comparison(&comparisons[i], values, med);
	report_close();
	free(values);
	return 0;
}
