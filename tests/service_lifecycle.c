/* service_lifecycle.c - processes that die or stop: a SIGKILLed client leaves nothing behind, SIGTERM answers every descriptor, a killed service fails calls fast, flags. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

TestSuite(service_lifecycle, .fini = svc_teardown);

/* ---- a client that keeps checking that it is served ---- */

#define BY_LEN (1u << 20)

/* A verified 512 KiB WRITE (the chunked copy path) and a 4 KiB READ (inline). */
static void probe_check(struct probe *b)
{
	uint64_t seed = 7000 + ++b->n;
	struct dp_desc d;
	struct dp_cqe cqe;

	pattern_fill(b->src, BY_LEN / 2, seed);
	dp_prep_write(&d, b->rs, 0, b->seg, 0, BY_LEN / 2, seed);
	cqe = run_wait(b->q, &d, 5000);
	cr_assert_eq(cqe.status, 0, "bystander WRITE: %s", dp_strerror(cqe.status));
	cr_assert_eq(pattern_check(b->dst, BY_LEN / 2, seed), -1, "bystander WRITE bytes");
	dp_prep_read(&d, b->rs, BY_LEN / 2, b->seg, 4096, 4096, seed + 1);
	cqe = run_wait(b->q, &d, 5000);
	cr_assert_eq(cqe.status, 0, "bystander READ: %s", dp_strerror(cqe.status));
	cr_assert_eq(memcmp(b->src + BY_LEN / 2, b->dst + 4096, 4096), 0, "bystander READ bytes");
}

/* ---- a client SIGKILLed with a thousand descriptors in flight ---- */

enum { K_NQ = 4, K_DEPTH = 256, K_SZ = 1 << 20, K_REGION = 32 << 20 };

struct doomed_report {
	int submitted;
	int completed; /* completions already visible when it reported */
};

/* The doomed client: its own regions and export, a handle on the
 * bystander's, four full queues of 1 MiB WRITEs, never reaped. */
static void doomed_main(int to_parent)
{
	static struct dp_desc d[K_DEPTH];
	struct doomed_report rep = {0, 0};
	struct dp_client *c;
	struct dp_queue *q[K_NQ];
	struct dp_cqe cqe[K_DEPTH];
	int local, dst, own, shared;
	void *a;

	if (dp_connect(svc.sock, "doomed", &c))
		_exit(1);
	local = dp_alloc(c, K_REGION, 0, &a);
	dst = dp_alloc(c, K_REGION, 0, &a);
	if (local < 0 || dst < 0 || dp_segment_export(c, dst, "doomed", DP_ACCESS_RW))
		_exit(2);
	own = dp_segment_open(c, NULL, "doomed", DP_ACCESS_RW);
	shared = dp_segment_open(c, NULL, "shared", DP_ACCESS_WRITE);
	if (own < 0 || shared < 0)
		_exit(3);
	for (int i = 0; i < K_NQ; i++)
		if (dp_queue_create(c, K_DEPTH, &q[i]))
			_exit(4);
	for (int i = 0; i < K_NQ; i++) {
		for (unsigned j = 0; j < K_DEPTH; j++) {
			uint64_t off = (uint64_t)(j % (K_REGION / K_SZ)) * K_SZ;

			/* The last queue writes into a segment of the bystander's. */
			if (i == K_NQ - 1)
				dp_prep_write(&d[j], local, off, shared, 0, K_SZ, j);
			else
				dp_prep_write(&d[j], local, off, own, off, K_SZ, j);
		}
		rep.submitted += dp_submit(q[i], d, K_DEPTH);
	}
	for (int i = 0; i < K_NQ; i++) {
		int k = dp_poll(q[i], cqe, K_DEPTH);

		rep.completed += k > 0 ? k : 0;
	}
	if (write(to_parent, &rep, sizeof(rep)) != sizeof(rep))
		_exit(5);
	for (;;)
		pause();
}

/* What the service's VmSize may grow by for good. None; under
 * ThreadSanitizer, its runtime's own metadata: the slabs of sync objects
 * grow with the atomics the service touches (a ring's sequence words: one
 * per slot) by 168 kB chunks, and never shrink. The leaks this test looks
 * for are caught by the plain build, which make test runs. */
#ifdef DP_TSAN
#define MEM_SLACK_KIB 1024
#else
#define MEM_SLACK_KIB 0
#endif

Test(service_lifecycle, sigkill_with_1000_in_flight_leaks_nothing, .timeout = 60)
{
	struct doomed_report rep;
	struct probe b;
	uint8_t *shared;
	int p[2], fd_base, fd_during, fd_now = -1, checks = 0;
	long mem_base, mem_during, mem_now = -1;
	uint64_t t_kill, deadline;

	start_svc(&svc, NULL);
	probe_start(&b, &svc, BY_LEN);
	/* Its own region for the doomed client to write into: the bystander's
	 * checks use other memory. */
	export_open(b.c, alloc_region(b.c, K_SZ, &shared), "shared", DP_ACCESS_RW, DP_ACCESS_READ);
	/* Warm up the paths the doomed client will use (the copy engine's
	 * allocations), so that the baseline is the service's steady state. */
	for (int i = 0; i < 3; i++)
		probe_check(&b);
	sleep_ms(100);
	fd_base = proc_fd_count(svc.pid);
	mem_base = proc_mapped_kib(svc.pid);
	cr_assert_gt(fd_base, 0);
	cr_assert_gt(mem_base, 0);

	child_pid = fork_piped(p, NULL);
	if (child_pid == 0)
		doomed_main(p[1]);
	if (read(p[0], &rep, sizeof(rep)) != sizeof(rep))
		cr_assert_fail("the doomed client failed (exit %d)", wait_child(child_pid));
	close(p[0]);
	fd_during = proc_fd_count(svc.pid);
	mem_during = proc_mapped_kib(svc.pid);
	probe_check(&b); /* served beside a thousand 1 MiB copies */
	kill(child_pid, SIGKILL);
	t_kill = now_ns();
	wait_child(child_pid);

	cr_assert_eq(rep.submitted, K_NQ * K_DEPTH);
	cr_assert_lt(rep.completed, K_NQ * K_DEPTH / 2,
		     "only %d of %d descriptors were still in flight at the kill",
		     K_NQ * K_DEPTH - rep.completed, K_NQ * K_DEPTH);
	/* The measurements can see the client: a socket, and 3 fds per queue. */
	cr_assert_geq(fd_during, fd_base + 1 + 3 * K_NQ, "fds %d -> %d", fd_base, fd_during);
	cr_assert_geq(mem_during, mem_base + 2 * (K_REGION / 1024), "VmSize %ld -> %ld kB",
		      mem_base, mem_during);

	/* The bystander keeps working while the service cleans up. */
	deadline = t_kill + 10000000000ull;
	for (;;) {
		probe_check(&b);
		checks++;
		fd_now = proc_fd_count(svc.pid);
		mem_now = proc_mapped_kib(svc.pid);
		if (fd_now == fd_base && mem_now <= mem_base + MEM_SLACK_KIB)
			break;
		if (now_ns() > deadline)
			break;
		sleep_ms(20);
	}
	cr_log_info("cleanup after SIGKILL: %.0f ms, %d bystander checks; fds %d/%d/%d, "
		    "VmSize %ld/%ld/%ld kB (before/during/after)",
		    (now_ns() - t_kill) / 1e6, checks, fd_base, fd_during, fd_now, mem_base,
		    mem_during, mem_now);
	cr_assert_eq(fd_now, fd_base, "fds: %d before the client, %d 10 s after its death", fd_base,
		     fd_now);
	cr_assert_leq(mem_now, mem_base + MEM_SLACK_KIB,
		      "VmSize: %ld kB before the client, %ld kB after", mem_base, mem_now);
	cr_assert_eq(dp_segment_open(b.c, NULL, "doomed", DP_ACCESS_READ), -ENOENT,
		     "the dead client's export is gone");
	probe_check(&b);
	dp_close(b.c);
	stop_svc(&svc);
}

/* ---- SIGTERM with work in flight ---- */

Test(service_lifecycle, sigterm_answers_every_accepted_descriptor, .timeout = 60)
{
	enum { NQ = 4, DEPTH = 512, SZ = 1 << 20, REGION = 4 << 20 };
	static const char *const args[] = {"--pollers", "2", NULL};
	static struct dp_desc d[DEPTH];
	static struct dp_cqe cqe[DEPTH];
	static bool seen[NQ][DEPTH];
	bool slot_done[REGION / SZ] = {false};
	struct dp_client *c;
	struct dp_queue *q[NQ];
	unsigned ok = 0, cancelled = 0;
	uint8_t *src, *dst;
	int rs, rd, seg;

	start_svc(&svc, args);
	c = connect_client(&svc, "sigterm");
	rs = alloc_region(c, REGION, &src);
	rd = alloc_region(c, REGION, &dst);
	seg = export_open(c, rd, "sigterm", DP_ACCESS_RW, DP_ACCESS_RW);
	pattern_fill(src, REGION, 11);
	for (int i = 0; i < NQ; i++)
		q[i] = make_queue(c, DEPTH);
	for (int i = 0; i < NQ; i++) {
		for (unsigned j = 0; j < DEPTH; j++) {
			uint64_t off = (uint64_t)(j % (REGION / SZ)) * SZ;

			dp_prep_write(&d[j], rs, off, seg, off, SZ, (uint64_t)i << 32 | j);
		}
		cr_assert_eq(dp_submit(q[i], d, DEPTH), DEPTH);
	}
	cr_assert_eq(kill(svc.pid, SIGTERM), 0);

	/* Reap until the service hangs up. It publishes everything before it
	 * closes the connections, so one more sweep after the hang-up finds
	 * whatever it published after the last empty look. */
	for (int i = 0; i < NQ; i++) {
		for (bool hung_up = false;;) {
			int k = hung_up ? dp_poll(q[i], cqe, DEPTH)
					: dp_wait(q[i], cqe, DEPTH, 10000);

			if (k <= 0 && hung_up)
				break;
			if (k <= 0) {
				cr_assert_eq(k, -ECONNRESET, "queue %d: dp_wait %d (%s)", i, k,
					     dp_strerror(k));
				hung_up = true;
				continue;
			}
			for (int n = 0; n < k; n++) {
				unsigned qi = (unsigned)(cqe[n].user_data >> 32);
				unsigned j = (unsigned)(cqe[n].user_data & 0xffffffffu);

				cr_assert(qi == (unsigned)i && j < DEPTH, "stray completion");
				cr_assert_not(seen[qi][j], "queue %u desc %u completed twice", qi,
					      j);
				seen[qi][j] = true;
				if (cqe[n].status == 0) {
					cr_assert_eq(cqe[n].bytes, SZ);
					slot_done[j % (REGION / SZ)] = true;
					ok++;
				} else {
					cr_assert_eq(cqe[n].status, -ECANCELED, "status %d (%s)",
						     cqe[n].status, dp_strerror(cqe[n].status));
					cr_assert_eq(cqe[n].bytes, 0);
					cancelled++;
				}
			}
		}
	}
	cr_log_info("SIGTERM: %u descriptors completed, %u cancelled", ok, cancelled);
	cr_assert_eq(ok + cancelled, NQ * DEPTH, "%u of %u descriptors answered", ok + cancelled,
		     NQ * DEPTH);
	stop_svc(&svc);
	/* Nothing arrives after the exit either. */
	for (int i = 0; i < NQ; i++) {
		struct dp_queue_stats st;

		cr_assert_eq(dp_queue_stats(q[i], &st), 0);
		cr_assert_eq(st.in_flight, 0);
		cr_assert_leq(dp_poll(q[i], cqe, DEPTH), 0);
	}
	/* What completed moved the right bytes. */
	for (unsigned j = 0; j < REGION / SZ; j++)
		if (slot_done[j])
			cr_assert_eq(memcmp(src + j * SZ, dst + j * SZ, SZ), 0, "slot %u", j);
	dp_close(c);
}

/* ---- the service killed under its clients ---- */

struct victim {
	struct dp_client *c;
	struct dp_queue *q;
	int rs, seg;
};

static void victim_start(struct victim *v, const char *name, uint32_t depth)
{
	uint8_t *a;
	int rd;

	v->c = connect_client(&svc, name);
	v->rs = alloc_region(v->c, 4 << 20, &a);
	rd = alloc_region(v->c, 4 << 20, &a);
	v->seg = export_open(v->c, rd, name, DP_ACCESS_RW, DP_ACCESS_RW);
	v->q = make_queue(v->c, depth);
}

/* Queues `n` 4 MiB copies: enough work that some are still in flight
 * when the service is killed right after. */
static void victim_load(struct victim *v, unsigned n)
{
	struct dp_desc d;

	for (unsigned i = 0; i < n; i++) {
		dp_prep_write(&d, v->rs, 0, v->seg, 0, 4 << 20, i);
		submit_all(v->q, &d, 1, 5000);
	}
}

static double ms_since(uint64_t t)
{
	return (double)(now_ns() - t) / 1e6;
}

/* Reaps the killed dataplaned, starts a new one on its socket path (the
 * leftover socket file still there) and waits until it accepts clients. */
static void restart_on_same_socket(void)
{
	const char *argv[] = {build_path("dataplaned"),
			      "--socket",
			      svc.sock,
			      "--spin-us",
			      "20",
			      "--log-level",
			      "debug",
			      NULL};
	struct dp_client *c;
	pid_t pid;
	int rc = -1, status;

	waitpid(svc.pid, &status, 0);
	svc.pid = pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int fd = open(svc.log, O_WRONLY | O_APPEND | O_CREAT, 0600);

		if (fd >= 0)
			dup2(fd, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	for (int i = 0; i < 500 && rc; i++) {
		rc = dp_connect(svc.sock, "probe", &c);
		if (rc)
			sleep_ms(10);
	}
	cr_assert_eq(rc, 0, "no service on %s after a restart: %s", svc.sock, dp_strerror(rc));
	dp_close(c);
}

Test(service_lifecycle, killed_service_fails_calls_within_1s, .timeout = 60)
{
	struct victim vw, vp, vs, vc, fresh;
	struct dp_desc nop = {.opcode = DP_OP_NOP};
	struct dp_cqe cqe[64];
	uint64_t t;
	int rc, accepted = 0;
	siginfo_t info;
	void *addr;

	start_svc(&svc, NULL);
	victim_start(&vw, "waiter", 64);
	victim_start(&vp, "poller", 64);
	victim_start(&vs, "submitter", 4096);
	victim_start(&vc, "controller", 8);
	victim_load(&vw, 64);
	victim_load(&vp, 64);

	/* SIGKILL, and wait until it is dead (not reaped: svc.pid stays its
	 * own, for svc_teardown() to clean up after a failure). Its socket
	 * file stays behind, as after a real crash. */
	kill(svc.pid, SIGKILL);
	cr_assert_eq(waitid(P_PID, (id_t)svc.pid, &info, WEXITED | WNOWAIT), 0);

	/* dp_wait: reaps what was published, then -ECONNRESET. */
	t = now_ns();
	while ((rc = dp_wait(vw.q, cqe, 64, 5000)) > 0)
		;
	cr_assert_eq(rc, -ECONNRESET, "dp_wait: %d (%s)", rc, dp_strerror(rc));
	cr_assert_lt(ms_since(t), 1000.0, "dp_wait took %.0f ms to notice", ms_since(t));

	/* dp_poll with descriptors in flight. */
	t = now_ns();
	while ((rc = dp_poll(vp.q, cqe, 64)) >= 0 && ms_since(t) < 2000)
		sleep_ms(1);
	cr_assert_eq(rc, -ECONNRESET, "dp_poll: %d (%s) after %.0f ms", rc, dp_strerror(rc),
		     ms_since(t));
	cr_assert_lt(ms_since(t), 1000.0, "dp_poll took %.0f ms to notice", ms_since(t));

	/* dp_submit from a client that submits slowly and never reaps: its
	 * ring has room for seconds more, yet it must learn within 1 s. */
	t = now_ns();
	while ((rc = dp_submit(vs.q, &nop, 1)) >= 0 && ms_since(t) < 2000) {
		accepted += rc;
		sleep_ms(5);
	}
	cr_assert_eq(rc, -ECONNRESET, "dp_submit: %d (%s) after %.0f ms, %d accepted", rc,
		     dp_strerror(rc), ms_since(t), accepted);
	cr_assert_lt(ms_since(t), 1000.0, "dp_submit took %.0f ms to notice", ms_since(t));

	/* Control calls. */
	t = now_ns();
	cr_assert_eq(dp_segment_open(vc.c, NULL, "waiter", DP_ACCESS_READ), -ECONNRESET);
	cr_assert_eq(dp_queue_create(vc.c, 8, &vc.q), -ECONNRESET);
	cr_assert_eq(dp_alloc(vc.c, 4096, 0, &addr), -ECONNRESET);
	cr_assert_eq(dp_segment_export(vc.c, vc.rs, "late", DP_ACCESS_RW), -ECONNRESET);
	cr_assert_lt(ms_since(t), 1000.0, "control calls took %.0f ms to fail", ms_since(t));

	/* Once failed, always failed: also on queues that have not tried. */
	cr_assert_eq(dp_submit(vw.q, &nop, 1), -ECONNRESET);
	cr_assert_eq(dp_wait(vs.q, cqe, 1, 100), -ECONNRESET);

	/* A new service on the same path; old clients stay dead, new ones work. */
	restart_on_same_socket();
	cr_assert_eq(dp_segment_open(vc.c, NULL, "waiter", DP_ACCESS_READ), -ECONNRESET,
		     "a dead client does not silently reconnect");
	victim_start(&fresh, "fresh", 8);
	{
		uint8_t *src, *dst;
		int rsrc, rdst, seg;
		struct dp_desc d;

		rsrc = alloc_region(fresh.c, 65536, &src);
		rdst = alloc_region(fresh.c, 65536, &dst);
		seg = export_open(fresh.c, rdst, "fresh-dst", DP_ACCESS_RW, DP_ACCESS_RW);
		pattern_fill(src, 65536, 3);
		dp_prep_write(&d, rsrc, 0, seg, 0, 65536, 99);
		cqe[0] = run_wait(fresh.q, &d, 5000);
		cr_assert_eq(cqe[0].status, 0);
		cr_assert_eq(pattern_check(dst, 65536, 3), -1);
	}
	dp_close(vw.c);
	dp_close(vp.c);
	dp_close(vs.c);
	dp_close(vc.c);
	dp_close(fresh.c);
	stop_svc(&svc);
}

/* ---- flags ---- */

struct run {
	int status; /* exit code, 128+signal, or -1: still running after 5 s */
	char out[8192], err[8192];
};

/* Runs dataplaned with `args` (NULL-terminated), capturing its exit code,
 * stdout and stderr. A dataplaned that does not exit within 5 s is killed. */
static void run_dataplaned(const char *const *args, struct run *r)
{
	const char *argv[32];
	int out[2], err[2], argc = 0, status;
	size_t nout = 0, nerr = 0;
	uint64_t deadline = now_ns() + 5000000000ull;
	bool out_open = true, err_open = true;

	memset(r, 0, sizeof(*r));
	argv[argc++] = build_path("dataplaned");
	for (; *args && argc < 31; args++)
		argv[argc++] = *args;
	argv[argc] = NULL;
	cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(err, O_CLOEXEC), 0);
	child_pid = fork();
	cr_assert_geq(child_pid, 0);
	if (child_pid == 0) {
		dup2(out[1], 1);
		dup2(err[1], 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	while (out_open || err_open) {
		struct pollfd pfd[2] = {{out_open ? out[0] : -1, POLLIN, 0},
					{err_open ? err[0] : -1, POLLIN, 0}};
		uint64_t t = now_ns();
		ssize_t n;

		if (t >= deadline || poll(pfd, 2, (int)((deadline - t) / 1000000) + 1) < 0)
			break;
		if (out_open && pfd[0].revents) {
			n = read(out[0], r->out + nout, sizeof(r->out) - 1 - nout);
			out_open = n > 0;
			nout += n > 0 ? (size_t)n : 0;
		}
		if (err_open && pfd[1].revents) {
			n = read(err[0], r->err + nerr, sizeof(r->err) - 1 - nerr);
			err_open = n > 0;
			nerr += n > 0 ? (size_t)n : 0;
		}
	}
	close(out[0]);
	close(err[0]);
	while (waitpid(child_pid, &status, WNOHANG) == 0) {
		if (now_ns() >= deadline) {
			kill(child_pid, SIGKILL);
			waitpid(child_pid, &status, 0);
			child_pid = 0;
			r->status = -1;
			return;
		}
		sleep_ms(5);
	}
	child_pid = 0;
	r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* A private socket path, so that a flag wrongly accepted starts nothing
 * anywhere that matters (the run is killed after 5 s). */
static const char *scratch_socket(void)
{
	static char dir[64], path[128];

	snprintf(dir, sizeof(dir), "/tmp/dp-flags-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/dp.sock", dir);
	return path;
}

static void scratch_cleanup(const char *sock)
{
	char dir[128];

	unlink(sock);
	snprintf(dir, sizeof(dir), "%s", sock);
	*strrchr(dir, '/') = 0;
	rmdir(dir);
}

Test(service_lifecycle, help_exits_0_with_usage, .timeout = 20)
{
	const char *sock = scratch_socket();
	const char *args[] = {"--socket", sock, "--help", NULL};
	static struct run r;

	run_dataplaned(args, &r);
	scratch_cleanup(sock);
	cr_assert_eq(r.status, 0, "--help: exit %d, stderr: %s", r.status, r.err);
	cr_assert_not_null(strstr(r.out, "usage: dataplaned"), "--help printed: %s", r.out);
	cr_assert_not_null(strstr(r.out, "--pollers"), "usage lists the flags");
	cr_assert_not_null(strstr(r.out, "--queue-depth"), "usage lists the flags");
	cr_assert_eq(access(sock, F_OK), -1, "--help must not start a service");
}

Test(service_lifecycle, bad_flags_exit_2_with_a_message, .timeout = 60)
{
	/* {flag..., NULL} followed by a word the message must contain. */
	static const struct {
		const char *args[4];
		const char *says;
	} cases[] = {
		{{"--bogus", NULL}, "--bogus"},
		{{"--pollers", "0", NULL}, "--pollers"},
		{{"--pollers", "abc", NULL}, "--pollers"},
		{{"--pollers", "65", NULL}, "--pollers"},
		{{"--pollers", NULL}, "--pollers"},
		{{"--cpus", "999", NULL}, "999"},
		{{"--cpus", "1-0", NULL}, "--cpus"},
		{{"--queue-depth", "3", NULL}, "--queue-depth"},
		{{"--queue-depth", "8192", NULL}, "--queue-depth"},
		{{"--log-level", "loud", NULL}, "--log-level"},
		{{"extra", NULL}, "extra"},
	};
	static struct run r;

	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *sock = scratch_socket();
		const char *args[8] = {"--socket", sock};
		char cmd[128] = "";

		for (int k = 0; cases[i].args[k]; k++) {
			args[2 + k] = cases[i].args[k];
			strncat(cmd, cases[i].args[k], sizeof(cmd) - strlen(cmd) - 2);
			strcat(cmd, " ");
		}
		run_dataplaned(args, &r);
		scratch_cleanup(sock);
		cr_assert_eq(r.status, 2, "dataplaned %s: exit %d, want 2; stderr: %s", cmd,
			     r.status, r.err);
		cr_assert_not_null(strstr(r.err, "dataplaned"), "%s: no message: '%s'", cmd, r.err);
		cr_assert_not_null(strstr(r.err, cases[i].says),
				   "%s: message '%s' does not name %s", cmd, r.err, cases[i].says);
	}
}

Test(service_lifecycle, second_service_on_a_live_socket_exits_1, .timeout = 30)
{
	const char *args[] = {"--socket", svc.sock, NULL};
	static struct run r;
	struct probe b;

	start_svc(&svc, NULL);
	probe_start(&b, &svc, BY_LEN);
	run_dataplaned(args, &r);
	cr_assert_eq(r.status, 1, "exit %d, want 1; stderr: %s", r.status, r.err);
	cr_assert_not_null(strstr(r.err, "dataplaned error"), "no error message: '%s'", r.err);
	probe_check(&b);
	dp_close(b.c);
	b.c = connect_client(&svc, "after");
	dp_close(b.c);
	stop_svc(&svc);
}
