/* SPDX-License-Identifier: MIT */
/* fabric_owner_gone.c - an export's owner is SIGKILLed while another service's RMA streams into its memory (small and large WRITEs, many in flight), round after round: the owner's service survives (a late write must not land in memory it has unmapped), every descriptor of the writer completes once (before the kill with success, after it with success or an error), and both services still move bytes afterwards. tcp and sockets. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "helpers.h"

TestSuite(fabric_owner_gone, .fini = fab_teardown, .timeout = 120);

#define OWNED (16 * MiB)
#define ROUNDS 6
#define DEPTH 64

/* The owner: a client of service 1 in a child process, exporting OWNED
 * bytes as `name`; it says so on `ready` and waits to be killed. */
static pid_t owner_start(const char *name, int ready)
{
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (!pid) {
		struct dp_client *c;
		void *mem;
		int r;

		if (dp_connect(fab_svc[1].sock, "owner", &c))
			_exit(1);
		r = dp_alloc(c, OWNED, 0, &mem);
		if (r < 0 || dp_segment_export(c, r, name, DP_ACCESS_RW))
			_exit(2);
		(void)!write(ready, "k", 1);
		for (;;)
			pause();
	}
	return pid;
}

/* Fails the test, saying how, when service i has died. */
static void check_alive(unsigned i, unsigned round)
{
	int status;

	if (waitpid(fab_svc[i].pid, &status, WNOHANG) != fab_svc[i].pid)
		return;
	fab_svc[i].pid = 0;
	cr_assert_fail("round %u: the %s service died: %s %d", round, i ? "owner's" : "writer's",
		       WIFSIGNALED(status) ? "signal" : "exit status",
		       WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

static void owner_gone(const char *prov)
{
	const char *args[] = {"--provider", prov, "--server-name", "127.0.0.1", NULL};
	static uint8_t done[1 << 16];
	struct dp_client *ca, *cb;
	struct dp_queue *q;
	uint8_t *src, *mem;
	char peer[64];
	int lreg, r;

	start_svc(&fab_svc[1], args);
	start_svc(&fab_svc[0], args);
	snprintf(peer, sizeof(peer), "127.0.0.1:%d", fab_rpc_port(&fab_svc[1]));
	ca = connect_client(&fab_svc[0], "writer");
	q = make_queue(ca, DEPTH);
	lreg = alloc_region(ca, 4 * MiB, &src);
	pattern_fill(src, 4 * MiB, 3);
	for (unsigned round = 0; round < ROUNDS; round++) {
		unsigned sent = 0, reaped = 0, ok = 0, failed = 0, inflight = 0;
		uint64_t t0 = now_ns(), t_kill = 0, rnd = round + 1;
		char name[32];
		int p[2], seg;
		pid_t owner;
		char c;

		snprintf(name, sizeof(name), "gone-%u", round);
		cr_assert_eq(pipe(p), 0);
		owner = owner_start(name, p[1]);
		cr_assert_eq(read(p[0], &c, 1), 1, "the owner did not export");
		close(p[0]);
		close(p[1]);
		seg = open_segment(ca, peer, name, DP_ACCESS_RW);
		memset(done, 0, sizeof(done));
		/* Keep DEPTH WRITEs in flight, 64 B and 1 MiB mixed; kill the
		 * owner 40 ms in, once 4 have gone through; stop submitting at
		 * the first failure, or 300 ms after the kill. */
		while (reaped < sent || !t_kill || now_ns() < t_kill + 300000000ull) {
			struct dp_cqe cqe[DEPTH];
			int k;

			cr_assert(t_kill || now_ns() < t0 + 10000000000ull,
				  "round %u: %u WRITEs done in 10 s, want 4 before the kill", round,
				  ok);
			if (!t_kill && ok >= 4 && now_ns() > t0 + 40000000ull) {
				kill(owner, SIGKILL);
				waitpid(owner, NULL, 0);
				t_kill = now_ns();
			}
			while (inflight < DEPTH && sent < sizeof(done) && !failed &&
			       (!t_kill || now_ns() < t_kill + 300000000ull)) {
				uint64_t len = xorshift64(&rnd) % 2 ? 64 : MiB;
				uint64_t off = xorshift64(&rnd) % (OWNED / len) * len;
				struct dp_desc d;

				dp_prep_write(&d, lreg, 0, seg, off, len, sent);
				if (dp_submit(q, &d, 1) != 1)
					break;
				sent++;
				inflight++;
			}
			k = dp_wait(q, cqe, DEPTH, 100);
			cr_assert_geq(k, 0, "dp_wait: %s", dp_strerror(k));
			for (int i = 0; i < k; i++) {
				uint64_t ud = cqe[i].user_data;

				cr_assert_lt(ud, sent);
				cr_assert_not(done[ud], "WRITE %llu completed twice",
					      (unsigned long long)ud);
				done[ud] = 1;
				if (cqe[i].status) {
					cr_assert(t_kill, "WRITE %llu failed before the kill: %s",
						  (unsigned long long)ud,
						  dp_strerror(cqe[i].status));
					failed++;
				} else {
					ok++;
				}
			}
			reaped += (unsigned)k;
			inflight -= (unsigned)k;
			check_alive(1, round);
			check_alive(0, round);
			cr_assert(!t_kill || now_ns() < t_kill + 20000000000ull,
				  "round %u: %u WRITEs unanswered 20 s after the kill", round,
				  sent - reaped);
		}
		cr_assert_gt(ok, 0, "round %u: nothing went through before the kill", round);
		cr_log_info("%s round %u: %u ok, %u failed", prov, round, ok, failed);
		cr_assert_eq(dp_segment_close(ca, seg), 0);
	}
	/* Both still serve: a new export on the owner's service, written from
	 * the writer's, byte for byte. */
	cb = connect_client(&fab_svc[1], "after");
	r = alloc_region(cb, 4 * MiB, &mem);
	export_segment(cb, r, "after", DP_ACCESS_RW);
	{
		int seg = open_segment(ca, peer, "after", DP_ACCESS_RW);
		struct dp_desc d;

		dp_prep_write(&d, lreg, 0, seg, 0, 4 * MiB, 1);
		run_ok(q, &d, DP_CQE_F_FABRIC, 10000);
		cr_assert_eq(pattern_check(mem, 4 * MiB, 3), -1);
	}
	dp_close(cb);
	dp_close(ca);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
	cr_assert_eq(svc_stop(&fab_svc[1]), 0);
}

Test(fabric_owner_gone, tcp)
{
	owner_gone("tcp");
}

Test(fabric_owner_gone, sockets)
{
	owner_gone("sockets");
}

/* Mappings of a service's process of exactly @len bytes (/proc/PID/maps). */
static unsigned maps_of_len(pid_t pid, uint64_t len)
{
	char path[64], line[512];
	unsigned n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "r");
	cr_assert(f, "%s", path);
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && hi - lo == len)
			n++;
	}
	fclose(f);
	return n;
}

/* An export peers could RMA into is kept mapped (as anonymous memory) for
 * a grace period after its region goes, then unmapped by the control
 * thread, which a poller's quarantine wakes: an idle service, with no
 * other event to run its loop, still lets it go. */
Test(fabric_owner_gone, quarantined_mapping_goes_on_an_idle_service)
{
	const uint64_t len = 5 * MiB + 12 * 4096; /* a size nothing else maps */
	struct fab_pair p;
	uint8_t *mem;
	unsigned left = 1;
	int r;

	fab_pair_start(&p, "tcp", 0, NULL, NULL);
	r = alloc_region(p.cb, len, &mem);
	export_segment(p.cb, r, "quarantined", DP_ACCESS_RW);
	cr_assert_eq(maps_of_len(fab_svc[1].pid, len), 1, "the export's mapping in B");
	cr_assert_eq(dp_segment_unexport(p.cb, "quarantined"), 0, "%s", dp_last_error());
	cr_assert_eq(dp_free(p.cb, r), 0, "%s", dp_last_error());
	for (unsigned i = 0; i < 500 && (left = maps_of_len(fab_svc[1].pid, len)); i++)
		sleep_ms(10);
	cr_assert_eq(left, 0, "B still maps the freed region 5 s later");
	fab_pair_stop(&p);
}
