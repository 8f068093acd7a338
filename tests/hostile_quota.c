/* hostile_quota.c - quotas per uid: a client mapping sparse memfds hits its uid's --max-mapped-gb-per-uid with -EDQUOT while another uid still gets memory; one uid cannot take every client slot (--max-clients-per-uid, -EDQUOT); connections that never say HELLO are dropped after --hello-timeout-ms; a --max-clients refusal reaches dp_connect as -EUSERS. */
#include <criterion/criterion.h>
#include <grp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"

TestSuite(hostile_quota, .fini = svc_teardown);

#define TiB (1ull << 40)
#define GiB (1ull << 30)

/* A sparse memfd of `len` bytes: no page of it exists until touched. */
static int sparse_memfd(uint64_t len)
{
	int fd = memfd_create("hog", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	cr_assert_geq(fd, 0, "memfd_create: %s", strerror(errno));
	cr_assert_eq(ftruncate(fd, (off_t)len), 0, "ftruncate %llu: %s", (unsigned long long)len,
		     strerror(errno));
	return fd;
}

/* Registers a fresh sparse memfd of `len` bytes: the region id or -errno. */
static int register_sparse(struct dp_client *c, uint64_t len)
{
	int fd = sparse_memfd(len);
	int r = dp_register_fd(c, fd, 0, len);

	close(fd);
	return r;
}

/* dp_connect, retried while the service is full for the caller (a slot
 * freed by a dp_close comes back once the service has read the hang-up). */
static struct dp_client *connect_when_free(const char *name)
{
	struct dp_client *c = NULL;
	int rc;

	for (int ms = 0; (rc = dp_connect(svc.sock, name, &c)) == -EDQUOT || rc == -EUSERS;
	     ms += 10) {
		cr_assert_lt(ms, 3000, "no slot came back: %s", dp_strerror(rc));
		sleep_ms(10);
	}
	cr_assert_eq(rc, 0, "dp_connect: %s", dp_strerror(rc));
	return c;
}

/* The service serves a new client of this uid once the slots are back,
 * and exits 0. */
static void still_serves_when_free(void)
{
	struct dp_client *c = connect_when_free("fresh");
	uint8_t *p;
	int r = alloc_region(c, 4096, &p);

	cr_assert_eq(dp_free(c, r), 0);
	dp_close(c);
	stop_svc(&svc);
}

/* Lets uid 65534 (gid 65534) attach: the test's temp dir opened, the
 * socket given to its group. */
static void open_socket_to_nobody(void)
{
	if (geteuid() != 0)
		cr_skip_test("needs root to run a client as another uid");
	cr_assert_eq(chmod(svc.dir, 0755), 0);
	cr_assert_eq(chown(svc.sock, 0, 65534), 0);
}

/* What a client of uid 65534 got: dp_connect's result, then (when it
 * connected) dp_alloc's of `alloc_len` bytes (1: not tried), with the
 * bytes written and read back. */
struct nobody_result {
	int connect, alloc;
};

static struct nobody_result as_nobody(size_t alloc_len)
{
	struct nobody_result res = {1, 1};
	int p[2];

	child_pid = fork_piped(p, NULL);
	if (child_pid == 0) {
		struct dp_client *c = NULL;
		void *addr = NULL;

		if (setgroups(0, NULL) || setgid(65534) || setuid(65534) || getuid() != 65534) {
			res.connect = -1000;
		} else {
			res.connect = dp_connect(svc.sock, "nobody", &c);
			if (!res.connect && alloc_len) {
				res.alloc = dp_alloc(c, alloc_len, 0, &addr);
				if (res.alloc >= 0) {
					memset(addr, 0x6e, alloc_len);
					res.alloc = dp_free(c, res.alloc) ? -2000 : 0;
				}
			}
		}
		child_report(p[1], &res, sizeof(res));
	}
	child_result(child_pid, p[0], &res, sizeof(res));
	cr_assert_neq(res.connect, -1000, "the child could not become uid 65534");
	return res;
}

/* The hostile case, with the default quota: one client registers 1 TiB
 * sparse memfds until the service says no. Without the quota it mapped
 * ~127 TiB, the service's whole address space, and then failed with
 * -ENOMEM, as did another client's 1 MiB dp_alloc. Now its uid stops at
 * --max-mapped-gb-per-uid (16 TiB by default) with -EDQUOT, what it has
 * keeps working, what it frees it may map again, and another uid's
 * dp_alloc is untouched. The process's own limit is lifted to the uid's
 * here (hostile_isolation.c has the default, 4 TiB, with siblings). */
Test(hostile_quota, sparse_memfd_hog_hits_the_uid_quota, .timeout = 60)
{
	const char *const args[] = {"--provider", "none", "--max-mapped-gb-per-process", "16384",
				    NULL};
	static int regs[256];
	struct dp_client *hog, *same_uid;
	struct dp_queue *q;
	struct nobody_result nb;
	struct dp_desc d;
	uint8_t *src;
	int n = 0, rc, seg, rs;

	start_svc(&svc, args);
	open_socket_to_nobody();
	hog = connect_client(&svc, "hog");
	/* A small region first: the hog's own work must go on. */
	rs = alloc_region(hog, 4096, &src);
	while ((rc = register_sparse(hog, TiB)) >= 0) {
		cr_assert_lt(n, 256, "256 TiB mapped and no refusal");
		regs[n++] = rc;
	}
	cr_assert_eq(rc, -EDQUOT, "after %d TiB: %d (%s), want -EDQUOT", n, rc, dp_strerror(rc));
	/* 16 TiB less the 4 KiB region. */
	cr_assert_eq(n, 15, "%d TiB mapped before the refusal, want 15 (16 TiB default)", n);
	/* To the byte: what is left fits, one page more does not. */
	rc = register_sparse(hog, TiB - 4096);
	cr_assert_geq(rc, 0, "the last TiB less 4 KiB: %d (%s)", rc, dp_strerror(rc));
	regs[n++] = rc;
	rc = register_sparse(hog, 4096);
	cr_assert_eq(rc, -EDQUOT, "4 KiB over the quota: %d (%s)", rc, dp_strerror(rc));
	cr_assert(strstr(dp_last_error(), "--max-mapped-gb-per-uid") != NULL, "%s",
		  dp_last_error());
	/* Another uid is not touched by it. */
	nb = as_nobody(MiB);
	cr_assert_eq(nb.connect, 0, "uid 65534 dp_connect: %s", dp_strerror(nb.connect));
	cr_assert_eq(nb.alloc, 0, "uid 65534 dp_alloc(1 MiB): %d (%s)", nb.alloc,
		     dp_strerror(nb.alloc));
	/* The hog's uid is (a second client of it too) ... */
	same_uid = connect_client(&svc, "same-uid");
	rc = register_sparse(same_uid, 4096);
	cr_assert_eq(rc, -EDQUOT, "same uid, another client: %d (%s)", rc, dp_strerror(rc));
	/* ... yet what it has works: 4 KiB into its last TiB and back. */
	seg = export_open(hog, regs[n - 2], "last-tib", DP_ACCESS_RW, DP_ACCESS_RW);
	q = make_queue(hog, 8);
	pattern_fill(src, 4096, 15);
	dp_prep_write(&d, rs, 0, seg, TiB - 4096, 4096, 1);
	run_ok(q, &d, DP_CQE_F_LOCAL, 5000);
	memset(src, 0, 4096);
	dp_prep_read(&d, rs, 0, seg, TiB - 4096, 4096, 2);
	run_ok(q, &d, DP_CQE_F_LOCAL, 5000);
	cr_assert_eq(pattern_check(src, 4096, 15), -1);
	/* A freed TiB is the uid's again, for any of its clients. */
	cr_assert_eq(dp_free(hog, regs[0]), 0);
	rc = register_sparse(same_uid, TiB);
	cr_assert_geq(rc, 0, "after a dp_free: %d (%s)", rc, dp_strerror(rc));
	dp_close(same_uid);
	dp_close(hog);
	service_still_serves();
}

/* The quota is the sum over the uid's clients, counted in the whole pages
 * each mapping takes, and a client's exit gives its share back. (All
 * clients here are one process: its own limit is the uid's.) */
Test(hostile_quota, mapped_quota_is_per_uid_and_returned, .timeout = 30)
{
	const char *const args[] = {
		"--provider", "none", "--max-mapped-gb-per-uid", "1", "--max-mapped-gb-per-process",
		"1",	      NULL};
	struct dp_client *x, *y, *z;
	uint8_t *p;
	int rx, rc;

	start_svc(&svc, args);
	x = connect_client(&svc, "x");
	y = connect_client(&svc, "y");
	rx = alloc_region(x, 512 * MiB, &p);
	cr_assert_geq(register_sparse(y, 512 * MiB), 0, "the second half of the quota");
	rc = register_sparse(y, 4096);
	cr_assert_eq(rc, -EDQUOT, "1 GiB + 4 KiB: %d (%s)", rc, dp_strerror(rc));
	rc = dp_alloc(x, 4096, 0, (void **)&p);
	cr_assert_eq(rc, -EDQUOT, "dp_alloc over the quota: %d (%s)", rc, dp_strerror(rc));
	/* One client's free serves another client of the uid. */
	cr_assert_eq(dp_free(x, rx), 0);
	/* Counted in whole pages: 512 MiB less a page, then 1 byte (a page),
	 * then 1 byte more is over. */
	rx = register_sparse(x, 512 * MiB - 4096);
	cr_assert_geq(rx, 0, "512 MiB less a page: %s", dp_strerror(rx));
	rc = register_sparse(x, 1);
	cr_assert_geq(rc, 0, "one byte, the last page: %s", dp_strerror(rc));
	cr_assert_eq(register_sparse(x, 1), -EDQUOT, "one byte more is a page over");
	cr_assert_eq(dp_free(x, rc), 0);
	cr_assert_eq(dp_free(x, rx), 0);
	cr_assert_geq(register_sparse(y, 512 * MiB), 0, "after x freed its 512 MiB");
	cr_assert_eq(register_sparse(x, 4096), -EDQUOT);
	/* A client that leaves gives back all it had. */
	dp_close(y);
	z = connect_client(&svc, "z");
	for (int ms = 0; (rc = register_sparse(z, GiB)) == -EDQUOT; ms += 10) {
		cr_assert_lt(ms, 3000, "y left and its 1 GiB is still counted");
		sleep_ms(10);
	}
	cr_assert_geq(rc, 0, "1 GiB after y left: %d (%s)", rc, dp_strerror(rc));
	dp_close(z);
	dp_close(x);
	stop_svc(&svc);
}

/* One uid cannot take every slot: with --max-clients 8 a uid gets half
 * (the default --max-clients-per-uid) and its next dp_connect -EDQUOT,
 * while uid 65534 still attaches. Without the limit the first uid took all
 * 8 and the other's dp_connect failed with -ECONNRESET. */
Test(hostile_quota, one_uid_cannot_take_every_slot, .timeout = 30)
{
	const char *const args[] = {"--provider", "none", "--max-clients", "8", NULL};
	struct dp_client *cs[8] = {0};
	struct nobody_result nb;
	int n = 0, rc;

	start_svc(&svc, args);
	open_socket_to_nobody();
	while ((rc = dp_connect(svc.sock, "greedy", &cs[n])) == 0) {
		n++;
		cr_assert_lt(n, 8, "one uid holds all 8 slots");
	}
	cr_assert_eq(rc, -EDQUOT, "connection %d of one uid: %d (%s), want -EDQUOT", n + 1, rc,
		     dp_strerror(rc));
	cr_assert_eq(n, 4, "one uid got %d slots of 8, want 4", n);
	nb = as_nobody(MiB);
	cr_assert_eq(nb.connect, 0, "uid 65534 beside the greedy uid: %d (%s)", nb.connect,
		     dp_strerror(nb.connect));
	cr_assert_eq(nb.alloc, 0);
	/* The greedy uid's clients are unharmed, and a slot it frees is its
	 * own again. */
	for (int i = 0; i < n; i++) {
		uint8_t *p;
		int r = alloc_region(cs[i], 4096, &p);

		cr_assert_eq(dp_free(cs[i], r), 0);
	}
	dp_close(cs[0]);
	for (int ms = 0; (rc = dp_connect(svc.sock, "greedy", &cs[0])) == -EDQUOT; ms += 10) {
		cr_assert_lt(ms, 3000, "a closed client's slot never came back");
		sleep_ms(10);
	}
	cr_assert_eq(rc, 0, "%s", dp_strerror(rc));
	for (int i = 0; i < n; i++)
		dp_close(cs[i]);
	still_serves_when_free();
}

/* Connections that never say HELLO hold slots only until the deadline:
 * with every slot taken by silent ones, dp_connect is refused at once
 * with -EUSERS; after --hello-timeout-ms the service has hung up on each
 * of them, a client that did say HELLO is still served, and new clients
 * get the slots. Without the deadline the silent connections kept their slots
 * for good. */
Test(hostile_quota, silent_connections_are_dropped_after_the_deadline, .timeout = 30)
{
	/* Every client here is one uid: per uid as many as in all. */
	const char *const args[] = {"--provider",
				    "none",
				    "--max-clients",
				    "4",
				    "--max-clients-per-uid",
				    "4",
				    "--hello-timeout-ms",
				    "500",
				    NULL};
	struct dp_client *talker, *late = NULL, *others[3];
	int silent[3], rc;
	uint64_t t0, t;
	uint8_t *p;

	start_svc(&svc, args);
	/* A client that said HELLO: the deadline is not for it. */
	talker = connect_client(&svc, "talker");
	t0 = now_ns();
	for (int i = 0; i < 3; i++)
		silent[i] = raw_connect(svc.sock, 5);
	/* Accepted in order: the silent three before this one. */
	rc = dp_connect(svc.sock, "late", &late);
	t = (now_ns() - t0) / 1000000;
	cr_assert_eq(rc, -EUSERS, "every slot taken: dp_connect %d (%s), want -EUSERS", rc,
		     dp_strerror(rc));
	cr_assert_lt(t, 450, "the refusal took %llu ms: not at once", (unsigned long long)t);
	/* The service hangs up on each silent one, after the deadline. */
	for (int i = 0; i < 3; i++) {
		char b;
		ssize_t n = recv(silent[i], &b, 1, 0);

		t = (now_ns() - t0) / 1000000;
		cr_assert_eq(n, 0, "silent connection %d: %s after %llu ms", i,
			     n < 0 ? strerror(errno) : "data", (unsigned long long)t);
		cr_assert_geq(t, 450,
			      "silent connection %d dropped after %llu ms, before its "
			      "deadline",
			      i, (unsigned long long)t);
		cr_assert_lt(t, 3000, "silent connection %d dropped after %llu ms", i,
			     (unsigned long long)t);
		cr_log_info("silent connection %d dropped %llu ms after it connected", i,
			    (unsigned long long)t);
		close(silent[i]);
	}
	/* The talker past the deadline is served ... */
	rc = alloc_region(talker, 4096, &p);
	cr_assert_eq(dp_free(talker, rc), 0);
	/* ... and the freed slots serve others. */
	for (int i = 0; i < 3; i++)
		others[i] = connect_when_free("late");
	for (int i = 0; i < 3; i++)
		dp_close(others[i]);
	dp_close(talker);
	still_serves_when_free();
}

/* A --max-clients refusal is an answer, not a hang-up: dp_connect returns
 * -EUSERS (the service used to close the connection unanswered:
 * -ECONNRESET, which reads like a crash), the refused connection holds
 * no slot, and the served clients go on. */
Test(hostile_quota, max_clients_refusal_is_eusers, .timeout = 30)
{
	const char *const args[] = {
		"--provider", "none", "--max-clients", "2", "--max-clients-per-uid", "2", NULL};
	struct dp_client *a, *b, *c = NULL;
	uint8_t *p;
	int rc;

	start_svc(&svc, args);
	a = connect_client(&svc, "a");
	b = connect_client(&svc, "b");
	for (int i = 0; i < 20; i++) {
		rc = dp_connect(svc.sock, "c", &c);
		cr_assert_eq(rc, -EUSERS, "refusal %d: %d (%s), want -EUSERS", i, rc,
			     dp_strerror(rc));
	}
	cr_assert(strstr(dp_last_error(), "dp_connect: the service serves its --max-clients") !=
			  NULL,
		  "%s", dp_last_error());
	rc = alloc_region(b, 4096, &p);
	cr_assert_eq(dp_free(b, rc), 0);
	dp_close(a);
	for (int ms = 0; (rc = dp_connect(svc.sock, "c", &c)) == -EUSERS; ms += 10) {
		cr_assert_lt(ms, 3000, "a's slot never came back");
		sleep_ms(10);
	}
	cr_assert_eq(rc, 0, "%s", dp_strerror(rc));
	dp_close(c);
	dp_close(b);
	stop_svc(&svc);
}
