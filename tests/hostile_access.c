/* hostile_access.c - isolation between clients and users: another client's handles, read-only exports of another client, a million NOPs, unexported names, a process of another uid at the socket, 0-byte packets carrying fds, and hostile strings in the log. */
#include <criterion/criterion.h>
#include <grp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"

TestSuite(hostile_access, .fini = svc_teardown);

#define RLEN (64u * 1024)
#define OWNER_SEED 12

static struct dp_cqe one(struct dp_queue *q, uint8_t op, int region, uint64_t loff, int seg,
			 uint64_t toff, uint64_t len, uint64_t ud)
{
	struct dp_desc d;

	dp_prep_write(&d, region, loff, seg, toff, len, ud);
	d.opcode = op;
	return run_wait(q, &d, 5000);
}

/* Handle tables are per client: the numbers another client holds (its
 * regions, its open segments) name nothing here, whatever their offsets. */
Test(hostile_access, another_clients_handles_are_ebadf, .timeout = 30)
{
	struct dp_client *owner, *thief;
	struct dp_queue *q;
	int oregs[8], osegs[8], mine, myseg;
	uint8_t *op[8], *mp;
	uint64_t ud = 0;

	start_svc(&svc, local_only);
	owner = connect_client(&svc, "owner");
	thief = connect_client(&svc, "thief");
	for (int i = 0; i < 8; i++) {
		char name[16];

		oregs[i] = alloc_region(owner, RLEN, &op[i]);
		pattern_fill(op[i], RLEN, OWNER_SEED + (uint64_t)i);
		snprintf(name, sizeof(name), "o%d", i);
		osegs[i] = export_open(owner, oregs[i], name, DP_ACCESS_READ, DP_ACCESS_READ);
	}
	/* The thief has one region and one (read-only) segment of its own. */
	mine = alloc_region(thief, RLEN, &mp);
	myseg = export_open(thief, mine, "mine", DP_ACCESS_READ, DP_ACCESS_READ);
	q = make_queue(thief, 16);
	for (int i = 0; i < 8; i++) {
		struct dp_cqe c;

		if (oregs[i] != mine) {
			c = one(q, DP_OP_READ, oregs[i], 0, myseg, 0, 64, ++ud);
			cr_assert_eq(c.status, -EBADF, "owner's region id %d: %d", oregs[i],
				     c.status);
			c = one(q, DP_OP_WRITE, oregs[i], 0, myseg, 0, 64, ++ud);
			cr_assert_eq(c.status, -EBADF);
		}
		if (osegs[i] != myseg) {
			c = one(q, DP_OP_READ, mine, 0, osegs[i], 0, 64, ++ud);
			cr_assert_eq(c.status, -EBADF, "owner's segment handle %d: %d", osegs[i],
				     c.status);
			c = one(q, DP_OP_WRITE, mine, 0, osegs[i], 0, 64, ++ud);
			cr_assert_eq(c.status, -EBADF);
			/* ... nor can they be closed by the thief. */
			cr_assert_eq(dp_segment_close(thief, osegs[i]), -EBADF);
		}
		if (oregs[i] != mine)
			cr_assert_eq(dp_free(thief, oregs[i]), -EBADF);
	}
	/* The owner's handles still work for the owner. */
	for (int i = 0; i < 8; i++)
		cr_assert_eq(pattern_check(op[i], RLEN, OWNER_SEED + (uint64_t)i), -1);
	{
		struct dp_queue *oq = make_queue(owner, 8);
		struct dp_cqe c = one(oq, DP_OP_READ, oregs[0], 0, osegs[1], 0, RLEN, 1);

		cr_assert_eq(c.status, 0);
		cr_assert_eq(pattern_check(op[0], RLEN, OWNER_SEED + 1), -1);
	}
	dp_close(thief);
	dp_close(owner);
	stop_svc(&svc);
}

/* A read-only export of another client: no handle with write access can
 * be had, and no WRITE through the read handle lands, however it is
 * dressed (whole segment, offsets that wrap). */
Test(hostile_access, read_only_export_of_another_client_stays_intact, .timeout = 30)
{
	static const uint64_t shapes[][3] = {
		{0, 0, 64}, {0, 0, RLEN}, {0, RLEN - 1, 1}, {0, ~0ull, 2}, {0, -4096ull, 8192},
	};
	struct dp_client *owner, *writer;
	struct dp_queue *q;
	uint8_t *op, *wp;
	int oreg, wreg, seg;

	start_svc(&svc, local_only);
	owner = connect_client(&svc, "owner");
	writer = connect_client(&svc, "writer");
	oreg = alloc_region(owner, RLEN, &op);
	pattern_fill(op, RLEN, OWNER_SEED);
	cr_assert_eq(dp_segment_export(owner, oreg, "weights", DP_ACCESS_READ), 0);
	cr_assert_eq(dp_segment_open(writer, NULL, "weights", DP_ACCESS_RW), -EPERM);
	cr_assert_eq(dp_segment_open(writer, NULL, "weights", DP_ACCESS_WRITE), -EPERM);
	cr_assert_lt(dp_segment_open(writer, NULL, "weights", 0x80 | DP_ACCESS_WRITE), 0);
	seg = dp_segment_open(writer, NULL, "weights", DP_ACCESS_READ);
	cr_assert_geq(seg, 0);
	/* Re-exporting it under another name needs a region, not a handle. */
	cr_assert_neq(dp_segment_export(writer, seg, "stolen", DP_ACCESS_RW), 0);
	wreg = alloc_region(writer, RLEN, &wp);
	memset(wp, 0x5a, RLEN);
	q = make_queue(writer, 8);
	for (unsigned i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		struct dp_cqe c =
			one(q, DP_OP_WRITE, wreg, shapes[i][0], seg, shapes[i][1], shapes[i][2], i);

		cr_assert_eq(c.status, -EPERM, "shape %u: %d", i, c.status);
	}
	cr_assert_eq(one(q, DP_OP_READ, wreg, 0, seg, 0, RLEN, 99).status, 0);
	cr_assert_eq(pattern_check(wp, RLEN, OWNER_SEED), -1);
	cr_assert_eq(pattern_check(op, RLEN, OWNER_SEED), -1, "the read-only export was written");
	dp_close(writer);
	dp_close(owner);
	stop_svc(&svc);
}

/* A million NOPs, pipelined at full depth: each completes exactly once,
 * with status 0 and no bytes. */
Test(hostile_access, nop_flood_completes_each_exactly_once, .timeout = 60)
{
	enum { N = 1 << 20, DEPTH = 1024, BATCH = 256 };
	static uint8_t seen[N / 8];
	struct dp_desc d[BATCH];
	struct dp_cqe cqe[DEPTH];
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_queue_stats st;
	uint64_t next = 0, done = 0, t0;

	start_svc(&svc, local_only);
	c = connect_client(&svc, "nops");
	q = make_queue(c, DEPTH);
	memset(seen, 0, sizeof(seen));
	t0 = now_ns();
	while (done < N) {
		unsigned n = 0;
		int k;

		while (n < BATCH && next + n < N) {
			d[n] = (struct dp_desc){.opcode = DP_OP_NOP, .user_data = next + n};
			n++;
		}
		k = n ? dp_submit(q, d, n) : 0;
		cr_assert_geq(k, 0, "dp_submit: %s", dp_strerror(k));
		next += (uint64_t)k;
		k = k ? dp_poll(q, cqe, DEPTH) : dp_wait(q, cqe, DEPTH, 5000);
		cr_assert_geq(k, 0, "reap: %s", dp_strerror(k));
		for (int i = 0; i < k; i++) {
			uint64_t u = cqe[i].user_data;

			cr_assert_lt(u, next, "completion for %llu, never submitted",
				     (unsigned long long)u);
			cr_assert_not(seen[u / 8] & (1u << (u % 8)), "NOP %llu completed twice",
				      (unsigned long long)u);
			seen[u / 8] |= (uint8_t)(1u << (u % 8));
			cr_assert_eq(cqe[i].status, 0);
			cr_assert_eq(cqe[i].bytes, 0);
		}
		done += (uint64_t)k;
		cr_assert_lt(now_ns() - t0, 50000000000ull, "%llu of %d NOPs after 50 s",
			     (unsigned long long)done, N);
	}
	for (unsigned i = 0; i < N / 8; i++)
		cr_assert_eq(seen[i], 0xff, "NOPs %u.. not all completed", i * 8);
	cr_assert_eq(dp_queue_stats(q, &st), 0);
	cr_assert_eq(st.completed, N);
	cr_assert_eq(st.failed, 0);
	cr_log_info("%d NOPs in %.2f s", N, (double)(now_ns() - t0) / 1e9);
	dp_close(c);
	stop_svc(&svc);
}

Test(hostile_access, unexported_names_cannot_be_opened, .timeout = 30)
{
	struct dp_client *owner, *other;
	uint8_t *p;
	int r;

	start_svc(&svc, local_only);
	owner = connect_client(&svc, "owner");
	other = connect_client(&svc, "other");
	r = alloc_region(owner, RLEN, &p);
	cr_assert_eq(dp_segment_open(other, NULL, "never-exported", DP_ACCESS_READ), -ENOENT);
	/* A registered region is not reachable until it is exported ... */
	cr_assert_eq(dp_segment_open(other, NULL, "0", DP_ACCESS_READ), -ENOENT);
	cr_assert_eq(dp_segment_export(owner, r, "kv", DP_ACCESS_RW), 0);
	cr_assert_geq(dp_segment_open(other, NULL, "kv", DP_ACCESS_READ), 0);
	/* ... and no longer once the export is withdrawn. */
	cr_assert_eq(dp_segment_unexport(owner, "kv"), 0);
	cr_assert_eq(dp_segment_open(other, NULL, "kv", DP_ACCESS_READ), -ENOENT);
	/* Only the owner withdraws an export. */
	cr_assert_eq(dp_segment_export(owner, r, "kv2", DP_ACCESS_RW), 0);
	cr_assert_neq(dp_segment_unexport(other, "kv2"), 0);
	cr_assert_geq(dp_segment_open(other, NULL, "kv2", DP_ACCESS_READ), 0);
	dp_close(other);
	dp_close(owner);
	stop_svc(&svc);
}

/* Runs dp_connect as uid/gid 65534 in a child; returns its result. */
static int connect_as_nobody(gid_t gid)
{
	int p[2], rc = 1;

	child_pid = fork_piped(p, NULL);
	if (child_pid == 0) {
		struct dp_client *c = NULL;

		if (setgroups(0, NULL) || setgid(gid) || setuid(65534))
			rc = -EPERM - 1000;
		else if (getuid() != 65534)
			rc = -1001;
		else
			rc = dp_connect(svc.sock, "nobody", &c);
		child_report(p[1], &rc, sizeof(rc));
	}
	child_result(child_pid, p[0], &rc, sizeof(rc));
	return rc;
}

/* The socket is 0660: a process of another uid outside its group cannot
 * attach; one in its group can. */
Test(hostile_access, another_uid_cannot_attach, .timeout = 30)
{
	struct stat st;
	int rc;

	if (geteuid() != 0)
		cr_skip_test("needs root to drop to another uid");
	start_svc(&svc, local_only);
	cr_assert_eq(stat(svc.sock, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0660, "socket mode %o", st.st_mode & 0777);
	/* The test's temp dir is 0700; open it so that only the socket's own
	 * mode decides. */
	cr_assert_eq(chmod(svc.dir, 0755), 0);
	rc = connect_as_nobody(65534);
	cr_assert_eq(rc, -EACCES, "uid 65534 connect: %d (%s)", rc, dp_strerror(rc));
	cr_assert_eq(chown(svc.sock, 0, 65534), 0);
	rc = connect_as_nobody(65534);
	cr_assert_eq(rc, 0, "a member of the socket's group: %d (%s)", rc, dp_strerror(rc));
	rc = connect_as_nobody(65533);
	cr_assert_eq(rc, -EACCES, "gid 65533 connect: %d (%s)", rc, dp_strerror(rc));
	stop_svc(&svc);
}

/* A 0-byte packet reads like EOF, and the service used to drop the
 * connection keeping the fds the packet carried (up to 4 each: 4994
 * connections took it to 19994 fds). Every fd received is closed or owned,
 * whatever the packet. */
Test(hostile_access, empty_packets_with_fds_leak_nothing, .timeout = 30)
{
	int base, fds[4], keep[16], nkeep = 0;

	start_svc(&svc, local_only);
	base = proc_fd_count(svc.pid);
	cr_assert_gt(base, 0);
	for (int i = 0; i < 4; i++) {
		fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		cr_assert_geq(fds[i], 0);
	}
	for (int conn = 0; conn < 16; conn++) {
		int s = raw_connect(svc.sock, 5);

		/* Several per connection: the first ends it, the rest may or
		 * may not reach the service; none may stay there. */
		for (int k = 0; k < 3; k++) {
			union {
				char buf[CMSG_SPACE(sizeof(fds))];
				struct cmsghdr align;
			} u;
			char none;
			struct iovec iov = {&none, 0};
			struct msghdr msg = {.msg_iov = &iov,
					     .msg_iovlen = conn & 1 ? 1 : 0, /* empty or no iovec */
					     .msg_control = u.buf,
					     .msg_controllen = sizeof(u.buf)};
			struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
			ssize_t n;

			memset(u.buf, 0, sizeof(u.buf));
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(fds));
			memcpy(CMSG_DATA(cm), fds, sizeof(fds));
			n = sendmsg(s, &msg, MSG_NOSIGNAL);
			if (k == 0)
				cr_assert_eq(n, 0, "sendmsg: %s", strerror(errno));
		}
		keep[nkeep++] = s;
	}
	/* The service hangs up on each (a 0-byte packet reads as EOF): then
	 * it has taken every packet, and must hold what it held before. */
	for (int i = 0; i < nkeep; i++) {
		char b;
		ssize_t n = recv(keep[i], &b, 1, 0);

		/* ECONNRESET: it hung up with our later packets unread. */
		cr_assert(n == 0 || (n < 0 && errno == ECONNRESET),
			  "connection %d: no hang-up (%s)", i, n < 0 ? strerror(errno) : "data");
		close(keep[i]);
	}
	/* No more than before (one of the service's own start-up fds may
	 * have closed meanwhile: fewer is not a leak). */
	for (int ms = 0; proc_fd_count(svc.pid) > base; ms += 5) {
		cr_assert_lt(ms, 5000, "service holds %d fds, baseline %d", proc_fd_count(svc.pid),
			     base);
		usleep(5000);
	}
	for (int i = 0; i < 4; i++)
		close(fds[i]);
	service_still_serves();
}

/* Strings from clients and peers (segment and peer names, paths)
 * reach the log only escaped: a newline or an ESC sequence in one cannot
 * forge a log line or drive the operator's terminal. This is a test of the
 * log itself, so it reads the log. */
#define FORGED "00:00:00.000 dataplaned error: FORGED"

static void no_raw_forgery(void)
{
	unsigned all = svc_log_count(&svc, "FORGED");

	cr_assert_gt(all, 0, "the hostile strings were never logged");
	cr_assert_eq(svc_log_count(&svc, "\\x0a" FORGED "\\x1b[2J"), all,
		     "a hostile string reached the log unescaped");
	cr_assert_not(svc_log_has(&svc, "\x1b"), "an ESC byte in the log");
}

Test(hostile_access, hostile_strings_reach_the_log_escaped, .timeout = 60)
{
	const char *const args[] = {
		"--provider", "tcp", "--server-name", "127.0.0.1", "--log-level", "debug", NULL};
	const char *evil = "p\n" FORGED "\x1b[2J:1";
	struct dp_client *c;

	start_svc(&svc, args);
	/* A peer name: the service tries it and logs the failure. */
	c = connect_client(&svc, "x\n" FORGED "\x1b[2J");
	cr_assert_lt(dp_segment_open(c, evil, "name", DP_ACCESS_READ), 0);
	/* A path for dp_open_file, under no --file-root: refused, or logged. */
	(void)dp_open_file(c, "/tmp/q\n" FORGED "\x1b[2J", 0, 4096, DP_ACCESS_READ);
	dp_close(c);
	no_raw_forgery();
	service_still_serves();
}
