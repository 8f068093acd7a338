/* stress_chaos.c - 4 client processes x 2 queues move random 1 B..1 MiB WRITEs and READs while one client is SIGKILLed and replaced every second and another SIGSTOPped and resumed; every survivor's descriptors complete exactly once with verified bytes, and the service's fds and mappings return to baseline. DP_STRESS_SECONDS sets the length (default 10). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "helpers.h"

TestSuite(stress_chaos, .fini = svc_teardown);

#define WORKERS 4
#define QUEUES 2
#define SLOTS 4 /* in flight per queue, one 1 MiB slot each */
#define SLOT_LEN (1u << 20)

struct tally {
	atomic_ulong submitted, completed, bytes, verified;
	atomic_int state; /* 0 running, 1 drained cleanly, >1 the failed step */
};

static struct tally *tallies; /* shared with the workers */

static volatile sig_atomic_t stop_worker;

static void on_term(int sig)
{
	(void)sig;
	stop_worker = 1;
}

struct wq {
	struct dp_queue *q;
	int src, dst, seg;
	uint8_t *sp, *dp;
	uint64_t ud[SLOTS]; /* outstanding user_data per slot, 0 = free */
	uint64_t len[SLOTS];
	uint8_t op[SLOTS];
};

/* Log-uniform 1 B .. 1 MiB. */
static uint64_t rnd_len(uint64_t *s)
{
	unsigned bits = (unsigned)(xorshift64(s) % 21);

	return 1 + xorshift64(s) % (1ull << bits);
}

/* Reaps what is there; checks each completion against its slot. Returns
 * 0 or the failed step. */
static int reap_some(struct wq *w, struct tally *t, int timeout_ms)
{
	struct dp_cqe cqe[SLOTS];
	int k = timeout_ms ? dp_wait(w->q, cqe, SLOTS, timeout_ms) : dp_poll(w->q, cqe, SLOTS);

	if (k < 0)
		return 10;
	for (int i = 0; i < k; i++) {
		unsigned s = (unsigned)(cqe[i].user_data % SLOTS);
		const uint8_t *where = w->op[s] == DP_OP_WRITE ? w->dp : w->sp;

		if (!cqe[i].user_data || w->ud[s] != cqe[i].user_data)
			return 11; /* unknown, or a second completion */
		if (cqe[i].status || cqe[i].bytes != w->len[s])
			return 12;
		if (pattern_check(where + (size_t)s * SLOT_LEN, w->len[s], cqe[i].user_data) != -1)
			return 13;
		w->ud[s] = 0;
		atomic_fetch_add(&t->completed, 1);
		atomic_fetch_add(&t->bytes, w->len[s]);
		atomic_fetch_add(&t->verified, 1);
	}
	return 0;
}

static int worker(unsigned id, uint64_t seed)
{
	struct tally *t = &tallies[id];
	struct wq w[QUEUES];
	struct dp_client *c;
	uint64_t next = 1;
	int rc;

	if (dp_connect(svc.sock, "stress", &c))
		return 2;
	for (unsigned i = 0; i < QUEUES; i++) {
		char name[48];

		memset(&w[i], 0, sizeof(w[i]));
		snprintf(name, sizeof(name), "stress-%d-%u", (int)getpid(), i);
		w[i].src = dp_alloc(c, SLOTS * SLOT_LEN, 0, (void **)&w[i].sp);
		w[i].dst = dp_alloc(c, SLOTS * SLOT_LEN, 0, (void **)&w[i].dp);
		if (w[i].src < 0 || w[i].dst < 0 ||
		    dp_segment_export(c, w[i].dst, name, DP_ACCESS_RW))
			return 3;
		w[i].seg = dp_segment_open(c, NULL, name, DP_ACCESS_RW);
		if (w[i].seg < 0 || dp_queue_create(c, 16, &w[i].q))
			return 4;
	}
	while (!stop_worker) {
		for (unsigned i = 0; i < QUEUES; i++) {
			for (unsigned s = 0; s < SLOTS; s++) {
				struct dp_desc d;
				uint64_t ud = next++ * SLOTS + s, len = rnd_len(&seed);
				size_t off = (size_t)s * SLOT_LEN;

				if (w[i].ud[s])
					continue;
				w[i].op[s] = xorshift64(&seed) & 1 ? DP_OP_WRITE : DP_OP_READ;
				w[i].len[s] = len;
				/* The source holds the pattern of this user_data. */
				if (w[i].op[s] == DP_OP_WRITE) {
					pattern_fill(w[i].sp + off, len, ud);
					dp_prep_write(&d, w[i].src, off, w[i].seg, off, len, ud);
				} else {
					pattern_fill(w[i].dp + off, len, ud);
					dp_prep_read(&d, w[i].src, off, w[i].seg, off, len, ud);
				}
				w[i].ud[s] = ud;
				if (dp_submit(w[i].q, &d, 1) != 1)
					return 5;
				atomic_fetch_add(&t->submitted, 1);
			}
			if ((rc = reap_some(&w[i], t, i == QUEUES - 1 ? 100 : 0)))
				return rc;
		}
	}
	/* Drain: everything submitted completes. */
	for (unsigned i = 0; i < QUEUES; i++) {
		uint64_t deadline = now_ns() + 10000000000ull;

		for (;;) {
			bool busy = false;

			for (unsigned s = 0; s < SLOTS; s++)
				busy |= w[i].ud[s] != 0;
			if (!busy)
				break;
			if (now_ns() > deadline)
				return 20;
			if ((rc = reap_some(&w[i], t, 100)))
				return rc;
		}
	}
	dp_close(c);
	return 1;
}

static pid_t spawn(unsigned id, uint64_t seed)
{
	sigset_t term, old;
	pid_t pid;

	/* Held until the child's handler is in place: a worker told to stop
	 * right after it was born still drains and exits 0. */
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &term, &old);
	memset(&tallies[id], 0, sizeof(tallies[id]));
	pid = fork();
	if (pid == 0) {
		int st;

		signal(SIGTERM, on_term);
		sigprocmask(SIG_SETMASK, &old, NULL);
		st = worker(id, seed);

		atomic_store(&tallies[id].state, st);
		_exit(st == 1 ? 0 : st);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	cr_assert_geq(pid, 0);
	return pid;
}

Test(stress_chaos, killed_and_stopped_clients_lose_nothing, .timeout = 900)
{
	const char *env = getenv("DP_STRESS_SECONDS");
	unsigned seconds = env && atoi(env) > 0 ? (unsigned)atoi(env) : 10;
	unsigned long kills = 0, stops = 0, done_ok = 0;
	uint64_t submitted = 0, completed = 0, bytes = 0, seed = 0x2545f4914f6cdd1dull;
	pid_t pids[WORKERS];
	int fd0, stopped = -1;
	long vm0, vm1, mf0, mf1, mf_max = 0;

	tallies = mmap(NULL, sizeof(*tallies) * WORKERS, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(tallies, MAP_FAILED);
	start_svc(&svc, local_only);
	/* Baseline after one client has come and gone: the service's threads
	 * have their malloc arenas by then (64 MiB of address space each). */
	{
		struct dp_client *c = connect_client(&svc, "warm-up");
		struct dp_queue *q = make_queue(c, 16);
		struct dp_desc nop = {.opcode = DP_OP_NOP, .user_data = 1};
		uint8_t *a;

		alloc_region(c, SLOT_LEN, &a);
		cr_assert_eq(run_wait(q, &nop, 5000).status, 0);
		dp_close(c);
		sleep_ms(100);
	}
	fd0 = proc_fd_count(svc.pid);
	vm0 = proc_mapped_kib(svc.pid);
	mf0 = proc_memfd_kib(svc.pid);
	for (unsigned i = 0; i < WORKERS; i++)
		pids[i] = spawn(i, xorshift64(&seed));
	for (unsigned sec = 0; sec < seconds; sec++) {
		unsigned victim = (unsigned)(xorshift64(&seed) % WORKERS);
		int status;

		sleep_ms(1000);
		mf1 = proc_memfd_kib(svc.pid);
		mf_max = mf1 > mf_max ? mf1 : mf_max;
		if (stopped >= 0) {
			kill(pids[stopped], SIGCONT);
			stopped = -1;
		}
		kill(pids[victim], SIGKILL);
		cr_assert_eq(waitpid(pids[victim], &status, 0), pids[victim]);
		cr_assert(WIFSIGNALED(status) || WEXITSTATUS(status) == 0,
			  "worker %u failed at step %d before it was killed", victim,
			  WEXITSTATUS(status));
		submitted += atomic_load(&tallies[victim].submitted);
		completed += atomic_load(&tallies[victim].completed);
		bytes += atomic_load(&tallies[victim].bytes);
		pids[victim] = spawn(victim, xorshift64(&seed));
		kills++;
		stopped = (int)((victim + 1 + xorshift64(&seed) % (WORKERS - 1)) % WORKERS);
		kill(pids[stopped], SIGSTOP);
		stops++;
	}
	if (stopped >= 0)
		kill(pids[stopped], SIGCONT);
	for (unsigned i = 0; i < WORKERS; i++)
		kill(pids[i], SIGTERM);
	for (unsigned i = 0; i < WORKERS; i++) {
		int status;

		cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "surviving worker %u: status %#x, step %d", i, status,
			  atomic_load(&tallies[i].state));
		/* A survivor's every descriptor completed, exactly once,
		 * with its bytes verified. */
		cr_assert_eq(atomic_load(&tallies[i].completed),
			     atomic_load(&tallies[i].submitted));
		cr_assert_eq(atomic_load(&tallies[i].verified), atomic_load(&tallies[i].submitted));
		submitted += atomic_load(&tallies[i].submitted);
		completed += atomic_load(&tallies[i].completed);
		bytes += atomic_load(&tallies[i].bytes);
		done_ok++;
	}
	wait_fds(fd0, 5000);
	/* A killed client's regions are unmapped after its last descriptor
	 * and a grace period, which its closed fds do not wait for. Every
	 * ring and region of a client is a memfd mapping in the service: they
	 * come back to the baseline exactly. The rest of the address space
	 * may keep a malloc heap grown under the chaos (glibc trims it only
	 * past 128 KiB free at its top), never by a region's 1 MiB. */
	for (int ms = 0; ms < 5000; ms += 10) {
		vm1 = proc_mapped_kib(svc.pid);
		mf1 = proc_memfd_kib(svc.pid);
		if (mf1 <= mf0 && vm1 <= vm0)
			break;
		usleep(10000);
	}
	cr_log_info("stress: %u s, %u clients x %u queues, %lu SIGKILLs, %lu SIGSTOPs; "
		    "%llu descriptors submitted, %llu completed and verified (%.1f GiB); "
		    "%lu survivors lost none; fds %d -> %d, VmSize %ld -> %ld KiB, of memfds "
		    "%ld -> %ld KiB",
		    seconds, WORKERS, QUEUES, kills, stops, (unsigned long long)submitted,
		    (unsigned long long)completed, (double)bytes / (1 << 30), done_ok, fd0,
		    proc_fd_count(svc.pid), vm0, vm1, mf0, mf1);
	/* The measure sees the clients' memory while they live. */
	cr_assert_geq(mf_max, mf0 + 2 * QUEUES * (long)(SLOT_LEN >> 10),
		      "memfd mappings at most %ld KiB", mf_max);
	cr_assert_leq(mf1, mf0, "the service's memfd mappings grew from %ld to %ld KiB", mf0, mf1);
	cr_assert_lt(vm1, vm0 + 1024, "the service's mappings grew from %ld to %ld KiB", vm0, vm1);
	munmap(tallies, sizeof(*tallies) * WORKERS);
	service_still_serves();
}
