/* stress_load.c - 8 client processes x 4 queues move random 1 B..8 MiB WRITEs and READs to their own service (local copies) and to a peer service over libfabric tcp, while clients are SIGKILLed and replaced, SIGSTOPped, made to exhaust their credit, and the peer is SIGKILLed and restarted; a survivor's every descriptor completes exactly once, with verified bytes or (fabric, peer just killed) a documented errno, the stats region agrees with the clients' counts, and the service's fds and mappings return to baseline. DP_STRESS_SECONDS sets the length (default 60 / DP_STRESS_SCALE, at least 4; beyond 850 s raise the Criterion --timeout). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "helpers.h"

#define WORKERS 8
#define QUEUES 4
#define DEPTH 16		/* per queue: the credit */
#define SLOTS 2			/* in flight per queue in the steady mix */
#define MAX_LEN (8u << 20)	/* the largest transfer */
#define QAREA (2ull * MAX_LEN)	/* per queue, in its region and in the target */
#define WAREA (QUEUES * QAREA)	/* per worker in the target */
#define SPARE 4			/* target areas resting after their worker was killed */
#define NAREA (WORKERS + SPARE) /* target areas */
#define CREDIT_HOLD_MS 300	/* a credit hog's pause with a full queue */
#define MAX_GEN 1024		/* peer incarnations counted */
#define SEG "stress-load"	/* the target's name on both services */
#define MAX_SEGS 1024		/* segment handles of a client */

/*
 * The target: one memfd the test maps, registered with both services and
 * exported under one name by each. A descriptor's bytes are the same
 * whether they went through the local copy engine or the fabric, so a
 * worker checks both kinds in its own mapping, and they survive a restart
 * of the peer. Each worker owns one area of it; the area of a killed
 * worker rests while SPARE others are handed out, so whatever the service
 * still finishes of the dead worker's descriptors cannot land in a
 * successor's slots.
 */
static int tfd = -1;
static uint8_t *tmap;
static const uint64_t tlen = NAREA * WAREA;

enum { RUNNING = 0, DRAINED = 1 }; /* worker states; above: the failed step */

/* What one worker incarnation did, shared with the test process. */
struct tally {
	atomic_int state;
	atomic_int credit_req; /* set by the test: hog a queue's credit once */
	atomic_ulong submitted, ok, failed, bytes;
	atomic_ulong local_ok, fab_ok, fab_failed, reopens, credit_rounds;
	atomic_ulong fab_err[4]; /* fabric failures by errno, as fabric_errs[] */
	atomic_ulong fab_max_ns; /* the slowest successful fabric transfer */
	atomic_ulong q_sub[QUEUES], q_ok[QUEUES], q_fail[QUEUES], q_bytes[QUEUES];
	char what[240]; /* the failure, for the test's message */
};

struct shared {
	atomic_uint peer_gen; /* peer kills so far: a fabric handle's generation */
	atomic_int peer_up;   /* the peer runs and exports SEG */
	atomic_int release;   /* drained survivors may leave */
	atomic_ulong done;    /* completions of every worker, ever */
	atomic_ulong fab_ok_gen[MAX_GEN];
	struct tally t[WORKERS];
};

static struct shared *sh;
static pid_t pids[WORKERS];
static char stats[64]; /* the local service's stats region */

static void load_teardown(void)
{
	for (unsigned i = 0; i < WORKERS; i++)
		if (pids[i] > 0) {
			int status;

			kill(pids[i], SIGKILL);
			waitpid(pids[i], &status, 0);
			pids[i] = 0;
		}
	fab_teardown();
	if (stats[0])
		shm_unlink(stats);
}

TestSuite(stress_load, .fini = load_teardown);

/* Log-uniform 1 B .. max (a power of two). */
static uint64_t rnd_len(uint64_t *s, uint64_t max)
{
	unsigned bits = (unsigned)(xorshift64(s) % (unsigned)(__builtin_ctzll(max) + 1));

	return 1 + xorshift64(s) % (1ull << bits);
}

/* ---- a worker: one client process, QUEUES queues ---- */

static volatile sig_atomic_t stop_worker;

static void on_term(int sig)
{
	(void)sig;
	stop_worker = 1;
}

struct slot {
	uint64_t ud; /* 0: free */
	uint64_t off, len, t_ns;
	uint8_t op, fab;
	int seg;      /* the handle it went through */
	unsigned gen; /* the fabric handle's generation */
};

struct wq {
	struct dp_queue *q;
	int region;
	uint8_t *local, *target; /* QAREA bytes each */
	uint64_t toff;		 /* of target in the segment */
	struct slot s[DEPTH];
};

struct worker {
	struct tally *t;
	struct dp_client *c;
	const char *peer;
	int seg_local, seg_fab; /* seg_fab -1: none, (re)opened when due */
	unsigned fab_gen;
	bool opened;
	uint64_t next_open_ns, seq, rng;
	/* Fabric handles: descriptors in flight through each, and those of a
	 * dead peer, closed once nothing uses them (a descriptor still in the
	 * SQ when its handle closes would fail with -EBADF). */
	unsigned seg_users[MAX_SEGS];
	bool seg_stale[MAX_SEGS];
	struct wq w[QUEUES];
};

static int fail(struct worker *wk, int step, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(wk->t->what, sizeof(wk->t->what), fmt, ap);
	va_end(ap);
	return step;
}

/* What a fabric transfer may fail with once its peer died. */
static const int fabric_errs[4] = {EHOSTUNREACH, ETIMEDOUT, EIO, ECONNRESET};

static int fabric_errno(int status)
{
	for (int i = 0; i < 4; i++)
		if (status == -fabric_errs[i])
			return i;
	return -1;
}

/* Fills slot s of w with a fresh descriptor of at most max bytes at off:
 * the source holds the pattern of its user_data, small destinations the
 * complement (so that even a 1-byte transfer that did nothing is seen). */
static void prep(struct worker *wk, struct wq *w, unsigned s, uint64_t off, uint64_t max,
		 struct dp_desc *d)
{
	struct slot *sl = &w->s[s];
	uint64_t ud = ++wk->seq * DEPTH + s, len = rnd_len(&wk->rng, max);
	bool write = xorshift64(&wk->rng) & 1;
	uint8_t *src = write ? w->local : w->target, *dst = write ? w->target : w->local;

	sl->fab = wk->seg_fab >= 0 && (xorshift64(&wk->rng) & 1);
	sl->seg = sl->fab ? wk->seg_fab : wk->seg_local;
	if (sl->fab)
		wk->seg_users[sl->seg]++;
	sl->gen = wk->fab_gen;
	sl->op = write ? DP_OP_WRITE : DP_OP_READ;
	sl->off = off;
	sl->len = len;
	sl->ud = ud;
	sl->t_ns = now_ns();
	pattern_fill(src + off, len, ud);
	if (len <= 65536)
		for (uint64_t i = 0; i < len; i++)
			dst[off + i] = (uint8_t)~pattern_byte(ud, i);
	dp_prep_write(d, w->region, off, sl->seg, w->toff + off, len, ud);
	d->opcode = sl->op;
}

static int submit(struct worker *wk, unsigned qi, const struct dp_desc *d, unsigned n)
{
	int k = dp_submit(wk->w[qi].q, d, n);

	if (k != (int)n)
		return fail(wk, 5, "queue %u: dp_submit of %u within the credit: %d (%s)", qi, n, k,
			    k < 0 ? dp_strerror(k) : "short");
	atomic_fetch_add(&wk->t->submitted, n);
	atomic_fetch_add(&wk->t->q_sub[qi], n);
	return 0;
}

/* Reaps what queue qi has (waiting up to timeout_ms for the first) and
 * checks every completion against its slot. */
static int reap_worker(struct worker *wk, unsigned qi, int timeout_ms)
{
	struct wq *w = &wk->w[qi];
	struct tally *t = wk->t;
	struct dp_cqe cqe[DEPTH];
	int k = timeout_ms ? dp_wait(w->q, cqe, DEPTH, timeout_ms) : dp_poll(w->q, cqe, DEPTH);

	if (k < 0)
		return fail(wk, 10, "queue %u: dp_wait: %s", qi, dp_strerror(k));
	for (int i = 0; i < k; i++) {
		struct slot *sl = &w->s[cqe[i].user_data % DEPTH];
		const char *what = sl->op == DP_OP_WRITE ? "WRITE" : "READ";
		const char *path = sl->fab ? "fabric" : "local";

		if (!cqe[i].user_data || sl->ud != cqe[i].user_data)
			return fail(wk, 11,
				    "queue %u: completion for user_data %llu, unknown or "
				    "completed before",
				    qi, (unsigned long long)cqe[i].user_data);
		atomic_fetch_add(&sh->done, 1);
		if (cqe[i].status == 0) {
			const uint8_t *dst = sl->op == DP_OP_WRITE ? w->target : w->local;
			uint32_t flag = sl->fab ? DP_CQE_F_FABRIC : DP_CQE_F_LOCAL;
			int64_t bad;

			if (cqe[i].bytes != sl->len)
				return fail(wk, 12, "%s %s of %llu B moved %llu", path, what,
					    (unsigned long long)sl->len,
					    (unsigned long long)cqe[i].bytes);
			if ((cqe[i].flags & (DP_CQE_F_LOCAL | DP_CQE_F_FABRIC)) != flag)
				return fail(wk, 13, "%s %s: completion flags 0x%x", path, what,
					    cqe[i].flags);
			bad = pattern_check(dst + sl->off, sl->len, sl->ud);
			if (bad != -1)
				return fail(wk, 14, "%s %s of %llu B succeeded, byte %lld wrong",
					    path, what, (unsigned long long)sl->len,
					    (long long)bad);
			atomic_fetch_add(&t->ok, 1);
			atomic_fetch_add(&t->bytes, sl->len);
			atomic_fetch_add(&t->q_ok[qi], 1);
			atomic_fetch_add(&t->q_bytes[qi], sl->len);
			if (sl->fab) {
				uint64_t ns = now_ns() - sl->t_ns;

				if (ns > atomic_load(&t->fab_max_ns))
					atomic_store(&t->fab_max_ns, ns);
				atomic_fetch_add(&t->fab_ok, 1);
				atomic_fetch_add(&sh->fab_ok_gen[sl->gen % MAX_GEN], 1);
			} else {
				atomic_fetch_add(&t->local_ok, 1);
			}
		} else {
			/* Only a fabric transfer may fail, only with a fabric
			 * errno, and only once the peer of its handle died. */
			int e = fabric_errno(cqe[i].status);

			if (!sl->fab || e < 0 || atomic_load(&sh->peer_gen) <= sl->gen)
				return fail(wk, 15, "%s %s of %llu B failed with the peer up: %s",
					    path, what, (unsigned long long)sl->len,
					    dp_strerror(cqe[i].status));
			atomic_fetch_add(&t->failed, 1);
			atomic_fetch_add(&t->fab_failed, 1);
			atomic_fetch_add(&t->fab_err[e], 1);
			atomic_fetch_add(&t->q_fail[qi], 1);
			if (wk->seg_fab == sl->seg) {
				wk->seg_stale[sl->seg] = true;
				wk->seg_fab = -1;
				wk->next_open_ns = 0;
			}
		}
		if (sl->fab && !--wk->seg_users[sl->seg] && wk->seg_stale[sl->seg]) {
			int rc = dp_segment_close(wk->c, sl->seg);

			if (rc)
				return fail(wk, 16, "dp_segment_close: %s", dp_strerror(rc));
			wk->seg_stale[sl->seg] = false;
		}
		sl->ud = 0;
	}
	return 0;
}

static bool queue_busy(const struct wq *w)
{
	for (unsigned s = 0; s < DEPTH; s++)
		if (w->s[s].ud)
			return true;
	return false;
}

/* Everything submitted on queue qi completes (a dead peer's transfers
 * within the fabric timeout). */
static int drain(struct worker *wk, unsigned qi)
{
	uint64_t deadline = now_ns() + 30000000000ull;
	int rc;

	while (queue_busy(&wk->w[qi])) {
		if (now_ns() > deadline)
			return fail(wk, 20, "queue %u: completions missing after 30 s", qi);
		if ((rc = reap_worker(wk, qi, 100)))
			return rc;
	}
	return 0;
}

/* Opens the peer's segment when the handle is closed and a try is due.
 * Refusals are expected only while the peer is down or being replaced. */
static int reopen(struct worker *wk)
{
	unsigned gen;
	int up, seg;

	if (wk->seg_fab >= 0 || now_ns() < wk->next_open_ns)
		return 0;
	gen = atomic_load(&sh->peer_gen);
	up = atomic_load(&sh->peer_up);
	seg = dp_segment_open(wk->c, wk->peer, SEG, DP_ACCESS_RW);
	if (seg >= MAX_SEGS)
		return fail(wk, 17, "dp_segment_open: handle %d", seg);
	if (seg >= 0) {
		if (wk->opened)
			atomic_fetch_add(&wk->t->reopens, 1);
		wk->opened = true;
		wk->seg_fab = seg;
		wk->fab_gen = gen;
		return 0;
	}
	/* A lookup may time out on a loaded host, peer up or not. */
	if (seg != -ETIMEDOUT && ((up && atomic_load(&sh->peer_gen) == gen) ||
				  (seg != -EHOSTUNREACH && seg != -ENOENT && seg != -ECONNREFUSED)))
		return fail(wk, 17, "dp_segment_open(%s): %s with the peer up", wk->peer,
			    dp_strerror(seg));
	wk->next_open_ns = now_ns() + 50000000ull;
	return 0;
}

/*
 * A client that exhausts its credit: a queue drained, then twice its depth
 * offered at once (exactly the depth taken, then nothing), held without
 * reaping while the service completes them all, still nothing taken; then
 * every one reaped and checked.
 */
static int credit_round(struct worker *wk)
{
	unsigned qi = (unsigned)(xorshift64(&wk->rng) % QUEUES);
	struct wq *w = &wk->w[qi];
	struct dp_desc d[2 * DEPTH];
	int rc, k;

	if ((rc = drain(wk, qi)))
		return rc;
	for (unsigned s = 0; s < DEPTH; s++)
		prep(wk, w, s, s * (QAREA / DEPTH), QAREA / DEPTH, &d[s]);
	/* Never taken: were one, its user_data 0 would be caught. */
	for (unsigned s = DEPTH; s < 2 * DEPTH; s++)
		d[s] = (struct dp_desc){.opcode = DP_OP_NOP};
	k = dp_submit(w->q, d, 2 * DEPTH);
	if (k != DEPTH)
		return fail(wk, 30, "dp_submit of %u with credit %u took %d", 2 * DEPTH, DEPTH, k);
	atomic_fetch_add(&wk->t->submitted, DEPTH);
	atomic_fetch_add(&wk->t->q_sub[qi], DEPTH);
	if ((k = dp_submit(w->q, d + DEPTH, DEPTH)) != 0)
		return fail(wk, 31, "dp_submit with no credit took %d", k);
	sleep_ms(CREDIT_HOLD_MS);
	if ((k = dp_submit(w->q, d + DEPTH, 1)) != 0)
		return fail(wk, 32, "dp_submit with a full, unreaped queue took %d", k);
	if ((rc = drain(wk, qi)))
		return rc;
	atomic_fetch_add(&wk->t->credit_rounds, 1);
	return 0;
}

static int worker_run(struct worker *wk)
{
	int rc;

	while (!stop_worker) {
		if (atomic_exchange(&wk->t->credit_req, 0) && (rc = credit_round(wk)))
			return rc;
		if ((rc = reopen(wk)))
			return rc;
		for (unsigned qi = 0; qi < QUEUES; qi++) {
			struct wq *w = &wk->w[qi];
			struct dp_desc d[SLOTS];
			unsigned n = 0;

			for (unsigned s = 0; s < SLOTS; s++)
				if (!w->s[s].ud)
					prep(wk, w, s, s * MAX_LEN, MAX_LEN, &d[n++]);
			if (n && (rc = submit(wk, qi, d, n)))
				return rc;
			if ((rc = reap_worker(wk, qi, qi == QUEUES - 1 ? 20 : 0)))
				return rc;
		}
	}
	for (unsigned qi = 0; qi < QUEUES; qi++)
		if ((rc = drain(wk, qi)))
			return rc;
	/* The library's own figures tell the same story. */
	for (unsigned qi = 0; qi < QUEUES; qi++) {
		struct dp_queue_stats st;

		dp_queue_stats(wk->w[qi].q, &st);
		if (st.submitted != atomic_load(&wk->t->q_sub[qi]) ||
		    st.completed != atomic_load(&wk->t->q_ok[qi]) ||
		    st.failed != atomic_load(&wk->t->q_fail[qi]) ||
		    st.bytes != atomic_load(&wk->t->q_bytes[qi]) || st.in_flight)
			return fail(wk, 21, "queue %u: dp_queue_stats differs from the count", qi);
	}
	return 0;
}

static int worker(unsigned id, unsigned area, const char *peer, uint64_t seed)
{
	struct worker wk = {.t = &sh->t[id], .peer = peer, .seg_fab = -1, .rng = seed | 1};
	char name[32];
	int rc;

	snprintf(name, sizeof(name), "load-%u", id);
	if ((rc = dp_connect(fab_svc[0].sock, name, &wk.c)))
		return fail(&wk, 2, "dp_connect: %s", dp_strerror(rc));
	wk.seg_local = dp_segment_open(wk.c, NULL, SEG, DP_ACCESS_RW);
	if (wk.seg_local < 0)
		return fail(&wk, 3, "dp_segment_open(local): %s", dp_strerror(wk.seg_local));
	for (unsigned qi = 0; qi < QUEUES; qi++) {
		struct wq *w = &wk.w[qi];

		w->toff = area * WAREA + qi * QAREA;
		w->target = tmap + w->toff;
		w->region = dp_alloc(wk.c, QAREA, 0, (void **)&w->local);
		if (w->region < 0)
			return fail(&wk, 4, "dp_alloc: %s", dp_strerror(w->region));
		if ((rc = dp_queue_create(wk.c, DEPTH, &w->q)))
			return fail(&wk, 4, "dp_queue_create: %s", dp_strerror(rc));
	}
	if ((rc = worker_run(&wk)))
		return rc;
	/* Drained: the test compares the stats region with the counts now,
	 * while the queues are still open. */
	atomic_store(&wk.t->state, DRAINED);
	for (int i = 0; i < 120000 && !atomic_load(&sh->release); i++)
		sleep_ms(1);
	dp_close(wk.c);
	return DRAINED;
}

static pid_t spawn(unsigned id, unsigned area, const char *peer, uint64_t seed)
{
	sigset_t term, old;
	pid_t parent = getpid(), pid;

	/* Held until the child's handler is in place: a worker told to stop
	 * right after it was born still drains and exits 0. */
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &term, &old);
	memset(&sh->t[id], 0, sizeof(sh->t[id]));
	pid = fork();
	if (pid == 0) {
		int st;

		/* A test that dies takes its workers along. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(99);
		signal(SIGTERM, on_term);
		sigprocmask(SIG_SETMASK, &old, NULL);
		st = worker(id, area, peer, seed);
		atomic_store(&sh->t[id].state, st);
		_exit(st == DRAINED ? 0 : st);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	cr_assert_geq(pid, 0, "fork");
	return pid;
}

/* ---- the test process ---- */

struct figures {
	uint64_t submitted, ok, failed, bytes, local_ok, fab_ok, fab_failed, reopens, credit;
	uint64_t fab_err[4], fab_max_ns;
};

static void add_tally(struct figures *f, const struct tally *t)
{
	f->submitted += atomic_load(&t->submitted);
	f->ok += atomic_load(&t->ok);
	f->failed += atomic_load(&t->failed);
	f->bytes += atomic_load(&t->bytes);
	f->local_ok += atomic_load(&t->local_ok);
	f->fab_ok += atomic_load(&t->fab_ok);
	f->fab_failed += atomic_load(&t->fab_failed);
	for (int i = 0; i < 4; i++)
		f->fab_err[i] += atomic_load(&t->fab_err[i]);
	if (atomic_load(&t->fab_max_ns) > f->fab_max_ns)
		f->fab_max_ns = atomic_load(&t->fab_max_ns);
	f->reopens += atomic_load(&t->reopens);
	f->credit += atomic_load(&t->credit_rounds);
}

/* A worker that exited on its own failed: its step and message. */
static void check_workers(void)
{
	for (unsigned i = 0; i < WORKERS; i++) {
		int status;

		if (waitpid(pids[i], &status, WNOHANG) != pids[i])
			continue;
		pids[i] = 0;
		cr_assert_fail("worker %u exited (status %#x, step %d): %s", i, status,
			       atomic_load(&sh->t[i].state), sh->t[i].what);
	}
}

static struct dp_client *peer_client; /* exports SEG on the peer */
static const char *peer_args[9];

static void export_target(struct dp_client *c)
{
	int region = dp_register_fd(c, tfd, 0, tlen);

	cr_assert_geq(region, 0, "dp_register_fd: %s", dp_strerror(region));
	export_segment(c, region, SEG, DP_ACCESS_RW);
}

static void peer_up(void)
{
	start_svc(&fab_svc[1], peer_args);
	peer_client = connect_client(&fab_svc[1], "load-peer");
	export_target(peer_client);
	atomic_store(&sh->peer_up, 1);
}

static void peer_kill(void)
{
	/* Generation first: a worker that sees a failure sees it too. */
	atomic_store(&sh->peer_up, 0);
	atomic_fetch_add(&sh->peer_gen, 1);
	svc_kill(&fab_svc[1]);
	dp_close(peer_client);
	peer_client = NULL;
}

/* One WRITE through the local service to `seg` and back by READ, on an
 * idle queue, through the path `flag`. */
static void round_trip(struct dp_client *c, struct dp_queue *q, int seg, uint32_t flag,
		       uint64_t seed)
{
	uint8_t *buf;
	int region = alloc_region(c, 2 * MiB, &buf);
	struct dp_desc d;

	pattern_fill(buf, MiB, seed);
	dp_prep_write(&d, region, 0, seg, tlen - MiB, MiB, seed);
	run_ok(q, &d, flag, 30000);
	cr_assert_eq(pattern_check(tmap + tlen - MiB, MiB, seed), -1, "round trip: WRITE");
	dp_prep_read(&d, region, MiB, seg, tlen - MiB, MiB, seed + 1);
	run_ok(q, &d, flag, 30000);
	cr_assert_eq(pattern_check(buf + MiB, MiB, seed), -1, "round trip: READ");
	cr_assert_eq(dp_free(c, region), 0);
}

/* A fresh client moves bytes both ways through both paths: one queue on
 * each of the service's pollers. */
static void fresh_client_works(const char *peer, uint64_t seed)
{
	struct dp_client *c = connect_client(&fab_svc[0], "load-probe");
	int local = open_segment(c, NULL, SEG, DP_ACCESS_RW),
	    remote = open_segment(c, peer, SEG, DP_ACCESS_RW);

	for (unsigned i = 0; i < 2; i++) {
		struct dp_queue *q = make_queue(c, DEPTH);

		round_trip(c, q, local, DP_CQE_F_LOCAL, seed + 4 * i);
		round_trip(c, q, remote, DP_CQE_F_FABRIC, seed + 4 * i + 2);
	}
	dp_close(c);
}

struct svc_state {
	int fds;
	long map_kib, heap_kib; /* mapped, besides the heap; the heap */
	uint64_t clients, regions, registered, segments;
};

/* The service's mappings from /proc: the heap apart, as malloc state the
 * service keeps on purpose (a peer once reached) lives there. */
static void maps_kib(pid_t pid, long *map_kib, long *heap_kib)
{
	char path[64], line[512];
	unsigned long lo, hi;
	FILE *f;

	*map_kib = *heap_kib = -1;
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return;
	*map_kib = *heap_kib = 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
			if (strstr(line, "[heap]"))
				*heap_kib += (long)((hi - lo) >> 10);
			else
				*map_kib += (long)((hi - lo) >> 10);
		}
	fclose(f);
}

static struct svc_state svc_state(void)
{
	const char *args[] = {"--stats", stats, "--json", NULL};
	struct jv *s = ring_stat_json(args);
	struct svc_state st = {.fds = proc_fd_count(fab_svc[0].pid),
			       .clients = json_u64(s, "service.clients"),
			       .regions = json_u64(s, "service.regions"),
			       .registered = json_u64(s, "service.registered_bytes"),
			       .segments = json_u64(s, "service.segments")};

	maps_kib(fab_svc[0].pid, &st.map_kib, &st.heap_kib);
	json_free(s);
	return st;
}

/* Do the stats region's rows for the drained survivors hold exactly their
 * counts? Returns the first difference, or NULL. */
static const char *stats_disagree(char *why, size_t len)
{
	const char *args[] = {"--stats", stats, "--json", NULL};
	struct jv *s = ring_stat_json(args);
	const char *res = NULL;

	for (unsigned i = 0; i < WORKERS && !res; i++) {
		const struct tally *t = &sh->t[i];

		for (unsigned qi = 0; qi < QUEUES && !res; qi++) {
			const struct jv *row = json_queue(s, pids[i], qi);
			uint64_t want[4] = {atomic_load(&t->q_sub[qi]), atomic_load(&t->q_ok[qi]),
					    atomic_load(&t->q_fail[qi]),
					    atomic_load(&t->q_bytes[qi])};
			static const char *const keys[4] = {"submitted", "completed", "failed",
							    "bytes"};

			if (!row) {
				snprintf(why, len, "no row for worker %u (pid %d) queue %u", i,
					 (int)pids[i], qi);
				res = why;
			}
			for (unsigned k = 0; k < 4 && !res; k++)
				if (json_u64(row, keys[k]) != want[k]) {
					snprintf(why, len,
						 "worker %u queue %u: %s %llu, client %llu", i, qi,
						 keys[k],
						 (unsigned long long)json_u64(row, keys[k]),
						 (unsigned long long)want[k]);
					res = why;
				}
		}
	}
	json_free(s);
	return res;
}

Test(stress_load, chaos_under_load_loses_nothing, .timeout = 900)
{
	const char *env = getenv("DP_STRESS_SECONDS"), *scale_env = getenv("DP_STRESS_SCALE");
	long scale = scale_env && atol(scale_env) > 0 ? atol(scale_env) : 1;
	unsigned seconds = env && atoi(env) > 0 ? (unsigned)atoi(env) : (unsigned)(60 / scale);
	unsigned long kills = 0, stops = 0, peer_kills = 0, credit_asks = 0;
	uint64_t seed = 0x9e3779b97f4a7c15ull, t0 = now_ns(), t_loop;
	unsigned area[WORKERS], rest[NAREA], rest_head = 0, rest_n = 0;
	char port[16], peer[64], why[200];
	/* A fabric timeout well above the slowest transfer a loaded 2-core
	 * host shows (~2 s): transfers fail only because the peer died. */
	const char *local_args[] = {
		"--provider",	       "tcp",	"--server-name", "127.0.0.1", "--pollers", "2",
		"--fabric-timeout-ms", "10000", "--stats",	 NULL,	      NULL};
	struct figures f = {0};
	struct svc_state base, end;
	struct dp_client *exporter;
	int stopped = -1;
	unsigned long done_at_stop = 0;

	if (seconds < 4)
		seconds = 4;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(sh, MAP_FAILED);
	tfd = memfd_create("stress-load", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	cr_assert_geq(tfd, 0);
	cr_assert_eq(ftruncate(tfd, (off_t)tlen), 0);
	tmap = mmap(NULL, tlen, PROT_READ | PROT_WRITE, MAP_SHARED, tfd, 0);
	cr_assert_neq(tmap, MAP_FAILED);

	/* The peer keeps its RPC port across restarts: the name clients
	 * open never changes. */
	snprintf(port, sizeof(port), "%d", fab_free_port());
	snprintf(peer, sizeof(peer), "127.0.0.1:%s", port);
	peer_args[0] = "--provider";
	peer_args[1] = "tcp";
	peer_args[2] = "--server-name";
	peer_args[3] = "127.0.0.1";
	peer_args[4] = "--rpc-port";
	peer_args[5] = port;
	peer_args[6] = NULL;
	peer_up();
	snprintf(stats, sizeof(stats), "%s", test_region_name());
	local_args[9] = stats;
	start_svc(&fab_svc[0], local_args);
	exporter = connect_client(&fab_svc[0], "load-exporter");
	export_target(exporter);

	/* Baseline after a client has moved bytes both ways on both pollers
	 * and left: the fabric connections to the peer and the threads'
	 * malloc arenas exist by then. */
	fresh_client_works(peer, 1);
	sleep_ms(200);
	base = svc_state();

	for (unsigned i = 0; i < WORKERS; i++) {
		area[i] = i;
		pids[i] = spawn(i, area[i], peer, xorshift64(&seed));
	}
	for (unsigned a = WORKERS; a < NAREA; a++)
		rest[rest_n++] = a;

	t_loop = now_ns();
	for (unsigned tick = 1; tick <= seconds; tick++) {
		uint64_t due = t_loop + tick * 1000000000ull, now = now_ns();

		/* One tick a second of wall time, whatever the chaos costs. */
		if (now < due)
			sleep_ms((unsigned)((due - now) / 1000000));
		check_workers();
		/* A stopped client stalls alone: the others completed
		 * descriptors while it was stopped. */
		if (stopped >= 0) {
			for (int i = 0; i < 100 && atomic_load(&sh->done) == done_at_stop; i++)
				sleep_ms(100);
			cr_assert_gt(atomic_load(&sh->done), done_at_stop,
				     "nothing completed for 10 s while worker %d was stopped",
				     stopped);
			kill(pids[stopped], SIGCONT);
			stopped = -1;
		}
		if (tick % 2 == 0) {
			unsigned v = (unsigned)(xorshift64(&seed) % WORKERS);
			int status;

			kill(pids[v], SIGKILL);
			cr_assert_eq(waitpid(pids[v], &status, 0), pids[v]);
			cr_assert(WIFSIGNALED(status), "worker %u failed before it was killed: %s",
				  v, sh->t[v].what);
			add_tally(&f, &sh->t[v]);
			rest[(rest_head + rest_n++) % NAREA] = area[v];
			area[v] = rest[rest_head];
			rest_head = (rest_head + 1) % NAREA;
			rest_n--;
			pids[v] = spawn(v, area[v], peer, xorshift64(&seed));
			kills++;
		} else {
			stopped = (int)(xorshift64(&seed) % WORKERS);
			kill(pids[stopped], SIGSTOP);
			wait_stopped(pids[stopped]);
			done_at_stop = atomic_load(&sh->done);
			stops++;
		}
		if (tick % 3 == 0) {
			atomic_store(&sh->t[xorshift64(&seed) % WORKERS].credit_req, 1);
			credit_asks++;
		}
		/* The peer dies for a second every 8; never in the last 3. */
		if (tick % 8 == 4 && tick + 3 <= seconds) {
			peer_kill();
			peer_kills++;
		} else if (!atomic_load(&sh->peer_up)) {
			peer_up();
		}
	}
	if (stopped >= 0)
		kill(pids[stopped], SIGCONT);
	if (!atomic_load(&sh->peer_up))
		peer_up();
	/* After the last restart fabric transfers succeed again. */
	for (int i = 0; i < 300 && !atomic_load(&sh->fab_ok_gen[peer_kills % MAX_GEN]); i++) {
		check_workers();
		sleep_ms(100);
	}
	for (unsigned g = 0; g <= peer_kills; g++)
		cr_assert_gt(atomic_load(&sh->fab_ok_gen[g % MAX_GEN]), 0,
			     "no fabric transfer succeeded with peer incarnation %u", g);

	/* Survivors drain; each one's rows in the stats region hold exactly
	 * its own counts (the poller publishes once idle: retry a while). */
	for (unsigned i = 0; i < WORKERS; i++)
		kill(pids[i], SIGTERM);
	for (unsigned i = 0; i < WORKERS; i++) {
		for (int k = 0; k < 6000 && atomic_load(&sh->t[i].state) == RUNNING; k++)
			sleep_ms(10);
		cr_assert_eq(atomic_load(&sh->t[i].state), DRAINED, "worker %u: step %d: %s", i,
			     atomic_load(&sh->t[i].state), sh->t[i].what);
	}
	for (int k = 0; k < 50 && stats_disagree(why, sizeof(why)); k++)
		sleep_ms(100);
	cr_assert_null(stats_disagree(why, sizeof(why)), "stats region: %s", why);
	atomic_store(&sh->release, 1);
	for (unsigned i = 0; i < WORKERS; i++) {
		const struct tally *t = &sh->t[i];
		int status;

		cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
		pids[i] = 0;
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "surviving worker %u: status %#x: %s", i, status, t->what);
		/* Every descriptor of a survivor completed, exactly once. */
		cr_assert_eq(atomic_load(&t->ok) + atomic_load(&t->failed),
			     atomic_load(&t->submitted), "worker %u lost descriptors", i);
		add_tally(&f, t);
	}

	/* A fresh client is served both ways (which also connects each
	 * poller to the last peer, as the baseline's client did to the
	 * first); then the service is back where it started: clients,
	 * regions, registrations, exports, fds, mappings. */
	fresh_client_works(peer, 1000);
	for (int k = 0; k < 100; k++) {
		end = svc_state();
		if (end.fds == base.fds && end.clients == base.clients &&
		    end.regions == base.regions && end.map_kib == base.map_kib)
			break;
		sleep_ms(100);
	}
	fprintf(stderr,
		"stress_load: %u s, %u clients x %u queues, 1 B..8 MiB: %llu descriptors, %llu "
		"local + %llu fabric verified (%.1f GiB), slowest fabric %.0f ms; %lu SIGKILLs, "
		"%lu SIGSTOPs, %llu credit exhaustions, %lu peer restarts: %llu fabric failures "
		"(EHOSTUNREACH %llu, ETIMEDOUT %llu, EIO %llu, ECONNRESET %llu), %llu re-opens; "
		"lost 0; fds %d -> %d, mapped %ld -> %ld KiB (heap %ld -> %ld); %.1f s\n",
		seconds, WORKERS, QUEUES, (unsigned long long)f.submitted,
		(unsigned long long)f.local_ok, (unsigned long long)f.fab_ok,
		(double)f.bytes / (1 << 30), (double)f.fab_max_ns / 1e6, kills, stops,
		(unsigned long long)f.credit, peer_kills, (unsigned long long)f.fab_failed,
		(unsigned long long)f.fab_err[0], (unsigned long long)f.fab_err[1],
		(unsigned long long)f.fab_err[2], (unsigned long long)f.fab_err[3],
		(unsigned long long)f.reopens, base.fds, end.fds, base.map_kib, end.map_kib,
		base.heap_kib, end.heap_kib, (double)(now_ns() - t0) / 1e9);
	cr_assert_eq(end.clients, base.clients, "clients %llu, baseline %llu",
		     (unsigned long long)end.clients, (unsigned long long)base.clients);
	cr_assert_eq(end.regions, base.regions, "regions %llu, baseline %llu",
		     (unsigned long long)end.regions, (unsigned long long)base.regions);
	cr_assert_eq(end.registered, base.registered, "registered bytes %llu, baseline %llu",
		     (unsigned long long)end.registered, (unsigned long long)base.registered);
	cr_assert_eq(end.segments, base.segments, "segments %llu, baseline %llu",
		     (unsigned long long)end.segments, (unsigned long long)base.segments);
	cr_assert_eq(end.fds, base.fds, "the service holds %d fds, baseline %d", end.fds, base.fds);
	cr_assert_eq(end.map_kib, base.map_kib, "the service's mappings went from %ld to %ld KiB",
		     base.map_kib, end.map_kib);
	/* The heap keeps what the service keeps on purpose (every peer
	 * incarnation it reached: ~130 KiB after the first restart, no more
	 * after seven); growth beyond that is a leak. */
	cr_assert_lt(end.heap_kib - base.heap_kib, 4096,
		     "the service's heap grew from %ld to %ld KiB", base.heap_kib, end.heap_kib);
	cr_assert_gt(f.local_ok, 0);
	cr_assert_gt(f.fab_ok, 0);
	cr_assert_gt(f.credit, 0, "no credit exhaustion ran (%lu asked)", credit_asks);
	if (peer_kills)
		cr_assert_gt(f.fab_failed, 0, "no fabric transfer failed across %lu peer kills",
			     peer_kills);

	dp_close(exporter);
	dp_close(peer_client);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0, "the service did not exit cleanly");
	cr_assert_eq(svc_stop(&fab_svc[1]), 0, "the peer did not exit cleanly");
	munmap(tmap, tlen);
	close(tfd);
	munmap(sh, sizeof(*sh));
}
