/* client_threads.c - libclient under the documented threading pattern (one thread in dp_wait, another making control calls): no false death; a control call that times out leaves the client usable (late replies dropped, their fds closed); a killed service is still reported dead at once. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "helpers.h"

TestSuite(client_threads, .fini = svc_teardown, .timeout = 90);

/* Worker threads never cr_assert (Criterion aborts from the test's main
 * thread only): they record their first failure here, the test checks it. */
struct failure {
	atomic_int count, resets;
	char what[200];
	pthread_mutex_t lock;
};

static void failed(struct failure *f, int rc, const char *what, unsigned long n)
{
	if (rc == -ECONNRESET)
		atomic_fetch_add(&f->resets, 1);
	pthread_mutex_lock(&f->lock);
	if (!atomic_fetch_add(&f->count, 1))
		snprintf(f->what, sizeof(f->what), "%s (#%lu): %s (%d)", what, n, dp_strerror(rc),
			 rc);
	pthread_mutex_unlock(&f->lock);
}

/* ---- (a) one thread in dp_wait, another making control calls ---- */

#define W_LEN (64u * 1024)

struct pattern {
	struct dp_client *c;
	atomic_int stop;
	/* the waiter: its queue, a source region and a segment of its own */
	struct dp_queue *q;
	uint8_t *src, *dst;
	int rs, seg;
	atomic_ulong waits, transfers, ctl_calls;
	struct failure f;
};

/* dp_wait with nothing in flight (the idle liveness check), NOPs and
 * verified 4 KiB WRITEs, each waited for in dp_wait. */
static void *waiter(void *arg)
{
	struct pattern *p = arg;
	unsigned long i = 0;

	while (!atomic_load(&p->stop)) {
		struct dp_desc d;
		struct dp_cqe cqe;
		uint64_t off = (i * 4096) % W_LEN;
		int rc;

		i++;
		if (i % 3 == 0) {
			rc = dp_wait(p->q, &cqe, 1, 2);
			if (rc)
				failed(&p->f, rc, "idle dp_wait", i);
			atomic_fetch_add(&p->waits, 1);
			continue;
		}
		if (i % 3 == 1) {
			memset(&d, 0, sizeof(d));
			d.opcode = DP_OP_NOP;
			d.user_data = i;
		} else {
			memset(p->src + off, (int)(i & 0xff), 4096);
			dp_prep_write(&d, p->rs, off, p->seg, off, 4096, i);
		}
		rc = dp_submit(p->q, &d, 1);
		if (rc != 1) {
			failed(&p->f, rc < 0 ? rc : -EAGAIN, "dp_submit", i);
			continue;
		}
		do
			rc = dp_wait(p->q, &cqe, 1, 1000);
		while (rc == 0 && !atomic_load(&p->stop));
		atomic_fetch_add(&p->waits, 1);
		if (rc != 1) {
			failed(&p->f, rc < 0 ? rc : -ETIMEDOUT, "dp_wait", i);
			continue;
		}
		if (cqe.status || cqe.user_data != i)
			failed(&p->f, cqe.status ? cqe.status : -EBADMSG, "completion", i);
		else if (d.opcode == DP_OP_WRITE && p->dst[off] != (uint8_t)(i & 0xff))
			failed(&p->f, -EIO, "WRITE bytes", i);
		else
			atomic_fetch_add(&p->transfers, 1);
	}
	return NULL;
}

/* Counts a control call; false (and recorded) when it failed. */
static bool ctl_ok(struct pattern *p, int rc, const char *what, unsigned long i)
{
	atomic_fetch_add(&p->ctl_calls, 1);
	if (rc < 0)
		failed(&p->f, rc, what, i);
	return rc >= 0;
}

/* Every kind of control call, round and round, on the same client. */
static void *controller(void *arg)
{
	struct pattern *p = arg;
	unsigned long i = 0;

	while (!atomic_load(&p->stop)) {
		char name[32];
		void *a;
		int r, h;

		i++;
		snprintf(name, sizeof(name), "ctl/%lu", i);
		r = dp_alloc(p->c, 4096, 0, &a);
		if (!ctl_ok(p, r, "dp_alloc", i))
			continue;
		if (!ctl_ok(p, dp_segment_export(p->c, r, name, DP_ACCESS_RW), "dp_segment_export",
			    i))
			continue;
		h = dp_segment_open(p->c, NULL, name, DP_ACCESS_RW);
		if (!ctl_ok(p, h, "dp_segment_open", i))
			continue;
		if (!ctl_ok(p, dp_segment_close(p->c, h), "dp_segment_close", i))
			continue;
		if (!ctl_ok(p, dp_segment_unexport(p->c, name), "dp_segment_unexport", i))
			continue;
		if (!ctl_ok(p, dp_free(p->c, r), "dp_free", i))
			continue;
		if (i % 8 == 0) {
			struct dp_queue *q;

			if (!ctl_ok(p, dp_queue_create(p->c, 8, &q), "dp_queue_create", i))
				continue;
			if (!ctl_ok(p, dp_queue_destroy(q), "dp_queue_destroy", i))
				continue;
		}
	}
	return NULL;
}

Test(client_threads, wait_and_control_calls_in_two_threads)
{
	struct pattern p = {.f.lock = PTHREAD_MUTEX_INITIALIZER};
	pthread_t tw, tc;
	int ms = 10000, scale = getenv("DP_STRESS_SCALE") ? atoi(getenv("DP_STRESS_SCALE")) : 1;

	/* TSan's build runs it at 1/50: still 2 s, hundreds of races offered. */
	if (scale > 5)
		ms = 2000;
	start_svc(&svc, local_only);
	p.c = connect_client(&svc, "threads");
	p.q = make_queue(p.c, 16);
	p.rs = alloc_region(p.c, W_LEN, &p.src);
	p.seg = export_open(p.c, alloc_region(p.c, W_LEN, &p.dst), "waiter/dst", DP_ACCESS_RW,
			    DP_ACCESS_RW);
	cr_assert_eq(pthread_create(&tw, NULL, waiter, &p), 0);
	cr_assert_eq(pthread_create(&tc, NULL, controller, &p), 0);
	sleep_ms((unsigned)ms);
	atomic_store(&p.stop, 1);
	pthread_join(tw, NULL);
	pthread_join(tc, NULL);
	cr_log_info("%d ms: %lu control calls, %lu waits, %lu verified completions", ms,
		    atomic_load(&p.ctl_calls), atomic_load(&p.waits), atomic_load(&p.transfers));
	cr_assert_eq(atomic_load(&p.f.resets), 0, "%d false -ECONNRESET; first failure: %s",
		     atomic_load(&p.f.resets), p.f.what);
	cr_assert_eq(atomic_load(&p.f.count), 0, "%d failures; first: %s", atomic_load(&p.f.count),
		     p.f.what);
	/* Enough of both for the race to have had its chances. */
	cr_assert_gt(atomic_load(&p.ctl_calls), 200, "only %lu control calls",
		     atomic_load(&p.ctl_calls));
	cr_assert_gt(atomic_load(&p.transfers), 200, "only %lu completions",
		     atomic_load(&p.transfers));
	/* The client is still connected and served. */
	cr_assert_geq(dp_alloc(p.c, 4096, 0, (void **)&p.src), 0);
	dp_close(p.c);
	stop_svc(&svc);
}

/* ---- (b) a control call that times out ---- */

static uint64_t ms_since(uint64_t t0)
{
	return (now_ns() - t0) / 1000000u;
}

Test(client_threads, timed_out_call_leaves_the_client_usable)
{
	struct dp_client *c;
	struct dp_queue *q, *late;
	struct dp_desc d;
	struct dp_cqe cqe;
	uint8_t *src, *dst;
	void *a;
	int rs, rd, seg, fds, rc;
	uint64_t t0;

	/* Documented knob (docs/api.md): read by dp_connect. */
	setenv("DP_CTL_TIMEOUT_MS", "300", 1);
	start_svc(&svc, local_only);
	c = connect_client(&svc, "timeouts");
	q = make_queue(c, 8);
	rs = alloc_region(c, 4096, &src);
	fds = proc_fd_count(getpid());

	kill(svc.pid, SIGSTOP);
	wait_stopped(svc.pid);
	/* Two calls time out: a QUEUE_CREATE, whose late reply carries three
	 * fds, and a REGION_REGISTER (dp_alloc). */
	t0 = now_ns();
	rc = dp_queue_create(c, 8, &late);
	cr_assert_eq(rc, -ETIMEDOUT, "dp_queue_create to a stopped service: %s", dp_strerror(rc));
	cr_assert_geq(ms_since(t0), 250, "timed out after %lu ms, before the 300 ms asked",
		      (unsigned long)ms_since(t0));
	cr_assert_lt(ms_since(t0), 5000, "timed out after %lu ms", (unsigned long)ms_since(t0));
	rc = dp_alloc(c, 4096, 0, &a);
	cr_assert_eq(rc, -ETIMEDOUT, "dp_alloc to a stopped service: %s", dp_strerror(rc));
	/* A stopped service is not a dead one, to the data path either. */
	memset(&d, 0, sizeof(d));
	d.opcode = DP_OP_NOP;
	d.user_data = 77;
	cr_assert_eq(dp_submit(q, &d, 1), 1);
	rc = dp_wait(q, &cqe, 1, 500);
	cr_assert_eq(rc, 0, "dp_wait while the service is stopped: %d (%s)", rc, dp_strerror(rc));
	kill(svc.pid, SIGCONT);

	/* The next calls get their own replies; the late ones are dropped
	 * (a mismatched reply would read -EBADMSG, a dead client
	 * -ECONNRESET). */
	rd = dp_alloc(c, 4096, 0, (void **)&dst);
	cr_assert_geq(rd, 0, "dp_alloc after SIGCONT: %s", dp_strerror(rd));
	cr_assert_eq(proc_fd_count(getpid()), fds,
		     "the late QUEUE_CREATE reply's fds were not closed (%d fds, %d before)",
		     proc_fd_count(getpid()), fds);
	seg = export_open(c, rd, "late/dst", DP_ACCESS_RW, DP_ACCESS_RW);
	rc = dp_wait(q, &cqe, 1, 5000);
	cr_assert_eq(rc, 1, "the NOP after SIGCONT: %d (%s)", rc, dp_strerror(rc));
	cr_assert_eq(cqe.user_data, 77);
	cr_assert_eq(cqe.status, 0);
	pattern_fill(src, 4096, 5);
	dp_prep_write(&d, rs, 0, seg, 0, 4096, 78);
	run_ok(q, &d, DP_CQE_F_LOCAL, 5000);
	cr_assert_eq(pattern_check(dst, 4096, 5), -1, "WRITE bytes after the timeouts");
	rc = dp_queue_create(c, 8, &late);
	cr_assert_eq(rc, 0, "dp_queue_create after SIGCONT: %s", dp_strerror(rc));
	cr_assert_eq(dp_queue_destroy(late), 0);
	cr_assert_eq(dp_segment_close(c, 999), -EBADF, "a status reply of its own");
	dp_close(c);
	stop_svc(&svc);
}

/* A call the service leaves pending (an open that waits for a peer) is
 * answered after later calls: its late reply comes after theirs, and is
 * still dropped by whichever call reads it. A peer that accepts and never
 * answers holds the open until the service's 2 s lookup deadline; the
 * client gives up at 300 ms. */
Test(client_threads, late_reply_after_later_calls_is_dropped)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t slen = sizeof(sa);
	char peer[64];
	struct dp_client *c;
	void *a;
	int lfd, rc, r1;

	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(lfd, 0);
	cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(lfd, 8), 0);
	cr_assert_eq(getsockname(lfd, (struct sockaddr *)&sa, &slen), 0);
	snprintf(peer, sizeof(peer), "127.0.0.1:%u", ntohs(sa.sin_port));
	setenv("DP_CTL_TIMEOUT_MS", "300", 1);
	start_svc(&svc, NULL);
	c = connect_client(&svc, "late-open");
	rc = dp_segment_open(c, peer, "silent/peer", DP_ACCESS_RW);
	cr_assert_eq(rc, -ETIMEDOUT, "open through a silent peer: %s", dp_strerror(rc));
	/* Answered at once, while the open is still pending there. */
	r1 = dp_alloc(c, 4096, 0, &a);
	cr_assert_geq(r1, 0, "dp_alloc while the open is pending: %s", dp_strerror(r1));
	/* The open's own answer arrives now, after dp_alloc's. */
	sleep_ms(2600);
	for (int i = 0; i < 3; i++) {
		rc = dp_segment_close(c, 999);
		cr_assert_eq(rc, -EBADF, "call %d after the late reply: %s", i, dp_strerror(rc));
	}
	rc = dp_alloc(c, 4096, 0, &a);
	cr_assert_geq(rc, 0, "dp_alloc after the late reply: %s", dp_strerror(rc));
	cr_assert_eq(dp_free(c, rc), 0);
	cr_assert_eq(dp_free(c, r1), 0);
	dp_close(c);
	close(lfd);
	unsetenv("DP_CTL_TIMEOUT_MS");
	stop_svc(&svc);
}

/* ---- (c) a killed service is still dead, at once ---- */

struct blocked {
	struct dp_client *c;
	struct dp_queue *q;
	atomic_int rc, started;
	atomic_ullong done_ns;
};

static void *blocked_wait(void *arg)
{
	struct blocked *b = arg;
	struct dp_cqe cqe;

	atomic_store(&b->started, 1);
	atomic_store(&b->rc, dp_wait(b->q, &cqe, 1, 20000));
	atomic_store(&b->done_ns, now_ns());
	return NULL;
}

static void *blocked_call(void *arg)
{
	struct blocked *b = arg;

	atomic_store(&b->started, 1);
	atomic_store(&b->rc, dp_segment_open(b->c, NULL, "nothing/here", DP_ACCESS_READ));
	atomic_store(&b->done_ns, now_ns());
	return NULL;
}

Test(client_threads, killed_service_is_dead_at_once)
{
	struct blocked w = {0}, k = {0};
	struct dp_desc d;
	struct dp_cqe cqe;
	pthread_t tw, tk;
	uint64_t t_kill;
	void *a;
	int rc;

	unsetenv("DP_CTL_TIMEOUT_MS"); /* 10 s: death must not wait for it */
	start_svc(&svc, local_only);
	w.c = k.c = connect_client(&svc, "doomed-service");
	w.q = make_queue(w.c, 8);
	/* One thread asleep in dp_wait with nothing to wait for, another in a
	 * control call the stopped service cannot answer: then SIGKILL. */
	kill(svc.pid, SIGSTOP);
	wait_stopped(svc.pid);
	cr_assert_eq(pthread_create(&tw, NULL, blocked_wait, &w), 0);
	cr_assert_eq(pthread_create(&tk, NULL, blocked_call, &k), 0);
	while (!atomic_load(&w.started) || !atomic_load(&k.started))
		sleep_ms(1);
	sleep_ms(200);
	cr_assert_eq(atomic_load(&w.done_ns), 0, "dp_wait returned %d before the kill",
		     atomic_load(&w.rc));
	cr_assert_eq(atomic_load(&k.done_ns), 0, "the control call returned %d before the kill",
		     atomic_load(&k.rc));
	t_kill = now_ns();
	svc_kill(&svc);
	pthread_join(tw, NULL);
	pthread_join(tk, NULL);
	cr_assert_eq(atomic_load(&w.rc), -ECONNRESET, "dp_wait: %d", atomic_load(&w.rc));
	cr_assert_eq(atomic_load(&k.rc), -ECONNRESET, "control call: %d", atomic_load(&k.rc));
	cr_assert_lt((atomic_load(&w.done_ns) - t_kill) / 1000000u, 1000,
		     "dp_wait noticed the death after %llu ms",
		     (atomic_load(&w.done_ns) - t_kill) / 1000000u);
	cr_assert_lt((atomic_load(&k.done_ns) - t_kill) / 1000000u, 1000,
		     "the control call noticed the death after %llu ms",
		     (atomic_load(&k.done_ns) - t_kill) / 1000000u);
	/* And it stays dead, for every call. */
	cr_assert_eq(dp_alloc(w.c, 4096, 0, &a), -ECONNRESET);
	memset(&d, 0, sizeof(d));
	d.opcode = DP_OP_NOP;
	rc = dp_submit(w.q, &d, 1);
	cr_assert_eq(rc, -ECONNRESET, "dp_submit: %d", rc);
	cr_assert_eq(dp_wait(w.q, &cqe, 1, 100), -ECONNRESET);
	dp_close(w.c);
}

/* A live client sees the service's death from the data path alone, with
 * no control call to learn it from (the liveness check's own evidence). */
Test(client_threads, killed_service_seen_by_dp_wait_alone)
{
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_cqe cqe;
	uint64_t t0;
	int rc;

	start_svc(&svc, local_only);
	c = connect_client(&svc, "waiter");
	q = make_queue(c, 8);
	svc_kill(&svc);
	t0 = now_ns();
	rc = dp_wait(q, &cqe, 1, 5000);
	cr_assert_eq(rc, -ECONNRESET, "dp_wait after SIGKILL: %d (%s)", rc, dp_strerror(rc));
	cr_assert_lt(ms_since(t0), 1000, "after %lu ms", (unsigned long)ms_since(t0));
	dp_close(c);
}
