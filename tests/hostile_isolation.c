/* hostile_isolation.c - limits per process: an engine process that floods the control socket with silent connections, opens connections without end or maps sparse memory without end stops at its own limits (--max-connecting-per-process, --max-clients-per-process -EMFILE, --max-mapped-gb-per-process -EFBIG), and another process, of the same uid or another, is neither locked out nor refused, its control calls within the bystander bounds of docs/reliability.md; what a process held comes back when it goes. */
#include <criterion/criterion.h>
#include <grp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "helpers.h"

TestSuite(hostile_isolation, .fini = svc_teardown);

#define TiB (1ull << 40)
#define GiB (1ull << 30)
#define FLOOD 5000
/* The defaults with --max-clients 256: the uid gets 128, a process 16. */
#define PER_PROCESS 16
#define CONNECTING 32
/* The bounds the other control-plane bystander rows assert
 * (docs/reliability.md, "Bystander latency under attack"). */
#define P95_MS 100.0
#define MAX_MS 300.0

/* Who the attacking process is: the bystander's uid, or uid 65534. */
enum who { SAME_UID, OTHER_UID };

static const char *const args_local[] = {"--provider", "none", NULL};

/* Starts the service; for an attacker of another uid, lets uid 65534
 * attach (skips without root). */
static void start(const char *const *args, enum who who)
{
	if (who == OTHER_UID && geteuid() != 0)
		cr_skip_test("needs root to run the attacker as another uid");
	start_svc(&svc, args);
	if (who == OTHER_UID) {
		cr_assert_eq(chmod(svc.dir, 0755), 0);
		cr_assert_eq(chown(svc.sock, 0, 65534), 0);
	}
}

/* In the attacker child: become uid 65534 when asked; 80 when it cannot. */
static void become(enum who who)
{
	if (who == OTHER_UID && (setgroups(0, NULL) || setgid(65534) || setuid(65534)))
		_exit(80);
}

static int sparse_memfd_register(struct dp_client *c, uint64_t len)
{
	int fd = memfd_create("hog", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int r;

	if (fd < 0 || ftruncate(fd, (off_t)len))
		return -errno;
	r = dp_register_fd(c, fd, 0, len);
	close(fd);
	return r;
}

/* A quiet second of the control bystander: the figures to compare with. */
static void quiet_phase(const char *what)
{
	struct ctl_bystander b;

	ctl_bystander_start(&b, &svc, NULL, NULL);
	sleep_ms(1000);
	ctl_bystander_stop(&b);
	cr_log_info("%s quiet: %u calls, p50 %.2f p99 %.2f max %.2f ms", what, b.n,
		    ctl_bystander_q(&b, 0.5), ctl_bystander_q(&b, 0.99), ctl_bystander_q(&b, 1));
	ctl_bystander_free(&b);
}

/* Stops the bystander of an attack: every call succeeded (no lockout, no
 * refusal), within the bounds. */
static void bystander_verdict(struct ctl_bystander *b, const char *what)
{
	double p95, p99, max;

	ctl_bystander_stop(b);
	p95 = ctl_bystander_q(b, 0.95);
	p99 = ctl_bystander_q(b, 0.99);
	max = ctl_bystander_q(b, 1);
	cr_log_info("%s: bystander %u calls, p50 %.2f p95 %.2f p99 %.2f max %.2f ms", what, b->n,
		    ctl_bystander_q(b, 0.5), p95, p99, max);
	cr_assert_lt(p95, P95_MS, "%s: bystander p95 %.1f ms", what, p95);
	cr_assert_lt(max, MAX_MS, "%s: bystander max %.1f ms", what, max);
	ctl_bystander_free(b);
}

/* A client of this (the bystander's) process: connects, maps 1 MiB and
 * writes it, frees it. */
static void bystander_connects_and_maps(const char *what)
{
	struct dp_client *c = NULL;
	void *p;
	int rc = dp_connect(svc.sock, "late-sibling", &c), r;

	cr_assert_eq(rc, 0, "%s: a new client of another process: %s (%s)", what, dp_strerror(rc),
		     dp_last_error());
	r = dp_alloc(c, MiB, 0, &p);
	cr_assert_geq(r, 0, "%s: dp_alloc 1 MiB: %s (%s)", what, dp_strerror(r), dp_last_error());
	memset(p, 0x5a, MiB);
	cr_assert_eq(dp_free(c, r), 0);
	dp_close(c);
}

/* ---- silent connections ---- */

struct flood_result {
	int made, failed; /* connects that succeeded, failed */
	int rounds;	  /* of FLOOD connections each */
	int still_open;	  /* of the last round's, not hung up on by the service */
	unsigned ms;	  /* the first round's */
};

/* The attacker: rounds of FLOOD connections without HELLO, as fast as the
 * service accepts them, each round's kept open until the next; for about
 * FLOOD_MS. Then how many of the last round the service left open. */
#define FLOOD_MS 2000
static void silent_flood_child(enum who who, int up, int down)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct rlimit rl = {FLOOD + 64, FLOOD + 64};
	struct flood_result res = {0};
	static int fds[FLOOD];
	uint64_t t0;

	become(who);
	setrlimit(RLIMIT_NOFILE, &rl);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", svc.sock);
	t0 = now_ns();
	do {
		for (int i = 0; res.rounds && i < FLOOD; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		for (int i = 0; i < FLOOD; i++) {
			fds[i] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
			if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&sa, sizeof(sa))) {
				res.failed++;
				if (fds[i] >= 0)
					close(fds[i]);
				fds[i] = -1;
				continue;
			}
			res.made++;
		}
		if (!res.rounds++)
			res.ms = (unsigned)((now_ns() - t0) / 1000000);
	} while (now_ns() - t0 < FLOOD_MS * 1000000ull);
	/* The last evictions are made after the loop's batch: a moment. */
	usleep(200 * 1000);
	for (int i = 0; i < FLOOD; i++) {
		struct pollfd pfd = {.fd = fds[i], .events = POLLIN};

		if (fds[i] >= 0 && poll(&pfd, 1, 0) == 0)
			res.still_open++;
	}
	if (write(up, &res, sizeof(res)) != sizeof(res))
		_exit(2);
	pipe_get(down, 'q');
	_exit(0);
}

/* Attack (a): one process opens 5 000 connections without
 * HELLO. Before, the service accepted them all and closed most, and a new
 * client of the same uid failed its HELLO while the flood lasted. Now the
 * flooding process keeps at most --max-connecting-per-process of them (its
 * oldest silent one is hung up on for each new one), and the bystander,
 * another process, connects, maps and frees throughout. */
static void silent_flood(enum who who)
{
	struct flood_result res;
	struct ctl_bystander b;
	int up[2], down[2];

	start(args_local, who);
	quiet_phase("silent flood");
	ctl_bystander_start(&b, &svc, NULL, NULL);
	child_pid = fork_piped(up, down);
	if (child_pid == 0)
		silent_flood_child(who, up[1], down[0]);
	/* Meanwhile, new clients of this process. */
	for (int i = 0; i < 20; i++) {
		bystander_connects_and_maps("during the flood");
		sleep_ms(50);
	}
	cr_assert_eq(read(up[0], &res, sizeof(res)), (ssize_t)sizeof(res), "the attacker's result");
	bystander_verdict(&b,
			  who == SAME_UID ? "silent flood, same uid" : "silent flood, uid 65534");
	cr_log_info("flood: %d rounds, %d connections (the first %d in %u ms), %d failed, %d of "
		    "the last round left open",
		    res.rounds, res.made, FLOOD, res.ms, res.failed, res.still_open);
	cr_assert_eq(res.failed, 0, "%d of the flood's connects failed", res.failed);
	cr_assert_leq(res.still_open, CONNECTING + 1,
		      "the service left %d silent connections of one process open", res.still_open);
	bystander_connects_and_maps("after the flood");
	pipe_put(down[1], 'q');
	cr_assert_eq(wait_child(child_pid), 0);
	close(up[0]);
	close(down[1]);
	service_still_serves();
}

Test(hostile_isolation, silent_flood_locks_no_sibling_out, .timeout = 60)
{
	silent_flood(SAME_UID);
}

Test(hostile_isolation, silent_flood_of_another_uid, .timeout = 60)
{
	silent_flood(OTHER_UID);
}

/* ---- connections with HELLO ---- */

struct hello_result {
	int ok, emfile, other, other_rc;
	int silent_made; /* silent connections after the refusals */
	char text[200];	 /* dp_last_error of the first -EMFILE */
};

static void hello_flood_child(enum who who, int up, int down)
{
	struct hello_result res = {0};
	static struct dp_client *cs[400];
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct rlimit rl = {4096, 4096};
	static int fds[2000];

	become(who);
	setrlimit(RLIMIT_NOFILE, &rl);
	for (int i = 0; i < 400; i++) {
		int rc = dp_connect(svc.sock, "greedy", &cs[res.ok]);

		if (!rc) {
			res.ok++;
		} else if (rc == -EMFILE) {
			if (!res.emfile++)
				snprintf(res.text, sizeof(res.text), "%s", dp_last_error());
		} else if (!res.other++) {
			res.other_rc = rc;
		}
	}
	/* Then silent ones on top, each refused at accept (the process is at
	 * its limit): they must not fill the refused connections' budget. */
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", svc.sock);
	for (int i = 0; i < 2000; i++) {
		fds[i] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (fds[i] >= 0 && !connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)))
			res.silent_made++;
	}
	if (write(up, &res, sizeof(res)) != sizeof(res))
		_exit(2);
	pipe_get(down, 'q');
	_exit(0);
}

/* 400 dp_connect from one process: before, 126 were accepted and then
 * every one refused -EDQUOT (the uid's limit), which refused every other
 * engine of the uid too. Now the process gets --max-clients-per-process
 * (16) and -EMFILE with a text that names that limit, then 2 000 silent
 * connections on top; another process connects and maps meanwhile. */
static void hello_flood(enum who who)
{
	struct hello_result res;
	struct ctl_bystander b;
	int up[2], down[2];

	start(args_local, who);
	ctl_bystander_start(&b, &svc, NULL, NULL);
	child_pid = fork_piped(up, down);
	if (child_pid == 0)
		hello_flood_child(who, up[1], down[0]);
	cr_assert_eq(read(up[0], &res, sizeof(res)), (ssize_t)sizeof(res), "the attacker's result");
	/* The attacker holds its 16 connections: others come in. */
	bystander_connects_and_maps("beside a process at its limit");
	sleep_ms(1000);
	bystander_verdict(&b, who == SAME_UID ? "400 HELLO + 2000 silent, same uid"
					      : "400 HELLO + 2000 silent, uid 65534");
	cr_assert_eq(res.other, 0, "an attacker's dp_connect failed %s", dp_strerror(res.other_rc));
	cr_assert_eq(res.ok, PER_PROCESS, "one process got %d connections, want %d", res.ok,
		     PER_PROCESS);
	cr_assert_eq(res.emfile, 400 - PER_PROCESS);
	cr_assert(strstr(res.text, "--max-clients-per-process") != NULL, "%s", res.text);
	cr_assert_eq(res.silent_made, 2000);
	pipe_put(down[1], 'q');
	cr_assert_eq(wait_child(child_pid), 0);
	close(up[0]);
	close(down[1]);
	/* Its slots come back: 16 clients of one new process. */
	child_pid = fork_piped(up, NULL);
	if (child_pid == 0) {
		struct dp_client *c;
		int n = 0;

		for (int ms = 0; n < PER_PROCESS && ms < 3000;) {
			if (!dp_connect(svc.sock, "next", &c))
				n++;
			else
				usleep(10 * 1000), ms += 10;
		}
		child_report(up[1], &n, sizeof(n));
	}
	{
		int n;

		child_result(child_pid, up[0], &n, sizeof(n));
		cr_assert_eq(n, PER_PROCESS, "after the attacker left: %d connections", n);
	}
	service_still_serves();
}

Test(hostile_isolation, hello_flood_locks_no_sibling_out, .timeout = 60)
{
	hello_flood(SAME_UID);
}

Test(hostile_isolation, hello_flood_of_another_uid, .timeout = 60)
{
	hello_flood(OTHER_UID);
}

/* ---- mapped memory ---- */

struct hog_result {
	int tib;	/* TiB registered before the refusal */
	int rc;		/* the refusal */
	int second_rc;	/* a second client of the same process: 4 KiB */
	char text[200]; /* dp_last_error of the refusal */
};

static void hog_child(enum who who, int up, int down)
{
	struct hog_result res = {0};
	struct dp_client *c, *c2;

	become(who);
	if ((res.rc = dp_connect(svc.sock, "hog", &c)) ||
	    (res.rc = dp_connect(svc.sock, "hog-2", &c2)))
		child_report(up, &res, sizeof(res));
	while ((res.rc = sparse_memfd_register(c, TiB)) >= 0 && res.tib < 200)
		res.tib++;
	snprintf(res.text, sizeof(res.text), "%s", dp_last_error());
	res.second_rc = sparse_memfd_register(c2, 4096);
	if (write(up, &res, sizeof(res)) != sizeof(res))
		_exit(2);
	pipe_get(down, 'q');
	_exit(0);
}

/* Attack (b): a client registers sparse memfds until the service
 * says no. Before, that was the uid's 16 TiB, and another client of the
 * uid got -EDQUOT for 1 MiB until the hog left. Now the hog's process
 * stops at --max-mapped-gb-per-process (4 TiB by default) with -EFBIG, for
 * each of its clients; a client of another process maps 1 MiB, and 1 TiB
 * more, meanwhile. */
static void sparse_hog(enum who who)
{
	struct hog_result res;
	struct ctl_bystander b;
	struct dp_client *c;
	int up[2], down[2], r;

	start(args_local, who);
	ctl_bystander_start(&b, &svc, NULL, NULL);
	child_pid = fork_piped(up, down);
	if (child_pid == 0)
		hog_child(who, up[1], down[0]);
	cr_assert_eq(read(up[0], &res, sizeof(res)), (ssize_t)sizeof(res), "the hog's result");
	cr_assert_eq(res.rc, -EFBIG, "after %d TiB: %d (%s), want -EFBIG", res.tib, res.rc,
		     dp_strerror(res.rc));
	cr_assert_eq(res.tib, 4, "%d TiB mapped for one process, want 4 (the default)", res.tib);
	cr_assert(strstr(res.text, "--max-mapped-gb-per-process") != NULL, "%s", res.text);
	cr_assert_eq(res.second_rc, -EFBIG, "the hog's second client: %d (%s)", res.second_rc,
		     dp_strerror(res.second_rc));
	bystander_connects_and_maps("beside the hog");
	c = connect_client(&svc, "sibling");
	r = sparse_memfd_register(c, TiB);
	cr_assert_geq(r, 0, "1 TiB beside the hog: %d (%s)", r, dp_strerror(r));
	sleep_ms(1000);
	bystander_verdict(&b, who == SAME_UID ? "sparse hog, same uid" : "sparse hog, uid 65534");
	pipe_put(down[1], 'q');
	cr_assert_eq(wait_child(child_pid), 0);
	close(up[0]);
	close(down[1]);
	dp_close(c);
	service_still_serves();
}

Test(hostile_isolation, sparse_hog_refuses_no_sibling, .timeout = 60)
{
	sparse_hog(SAME_UID);
}

Test(hostile_isolation, sparse_hog_of_another_uid, .timeout = 60)
{
	sparse_hog(OTHER_UID);
}

/* Both mapping limits and their release: with 3 GiB per uid and 2 GiB
 * per process, a child takes its 2 GiB (-EFBIG after), this process 1 GiB,
 * and then the uid is full: -EDQUOT here, whose text names the uid's
 * limit. The child's exit gives its 2 GiB back to the uid. */
Test(hostile_isolation, mapped_limits_per_process_and_uid_are_released, .timeout = 30)
{
	const char *const args[] = {
		"--provider", "none", "--max-mapped-gb-per-uid", "3", "--max-mapped-gb-per-process",
		"2",	      NULL};
	struct dp_client *c;
	int up[2], down[2], got[2], rc;

	start_svc(&svc, args);
	child_pid = fork_piped(up, down);
	if (child_pid == 0) {
		int n = 0;

		if (dp_connect(svc.sock, "child", &c))
			_exit(3);
		while ((rc = sparse_memfd_register(c, GiB)) >= 0 && n < 8)
			n++;
		got[0] = n;
		got[1] = rc;
		if (write(up[1], got, sizeof(got)) != sizeof(got))
			_exit(2);
		pipe_get(down[0], 'q');
		_exit(0);
	}
	cr_assert_eq(read(up[0], got, sizeof(got)), (ssize_t)sizeof(got));
	cr_assert_eq(got[0], 2, "the child mapped %d GiB, want 2", got[0]);
	cr_assert_eq(got[1], -EFBIG, "the child's refusal: %d (%s)", got[1], dp_strerror(got[1]));
	c = connect_client(&svc, "parent");
	cr_assert_geq(sparse_memfd_register(c, GiB), 0, "the uid's third GiB");
	rc = sparse_memfd_register(c, 4096);
	cr_assert_eq(rc, -EDQUOT, "the uid is full: %d (%s)", rc, dp_strerror(rc));
	cr_assert(strstr(dp_last_error(), "--max-mapped-gb-per-uid") != NULL, "%s",
		  dp_last_error());
	pipe_put(down[1], 'q');
	cr_assert_eq(wait_child(child_pid), 0);
	close(up[0]);
	close(down[1]);
	for (int ms = 0; (rc = sparse_memfd_register(c, GiB)) == -EDQUOT; ms += 10) {
		cr_assert_lt(ms, 3000, "the child left and its 2 GiB are still counted");
		sleep_ms(10);
	}
	cr_assert_geq(rc, 0, "a GiB after the child left: %d (%s)", rc, dp_strerror(rc));
	rc = sparse_memfd_register(c, GiB);
	cr_assert_eq(rc, -EFBIG, "this process's third GiB: %d (%s)", rc, dp_strerror(rc));
	dp_close(c);
	stop_svc(&svc);
}
