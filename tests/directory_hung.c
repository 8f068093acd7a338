/* directory_hung.c - the control thread never waits on Redis: while Redis hangs (SIGSTOP, after it was up) or a silent listener stands in for it (accepts, never answers), a bystander's local control calls (dp_connect, dp_alloc, dp_free, an open and close of a local export) stay fast, while exports and lookups that need the directory get -ETIMEDOUT / -EHOSTUNREACH within the documented time; and the directory works again when Redis answers; an export whose client dies while Redis is slow to answer is withdrawn once published. */
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

TestSuite(directory_hung, .fini = dir_teardown, .timeout = 90);

/* Before the directory thread, each command to a hung Redis held the
 * control thread for its 500 ms timeout (each export, lookup, heartbeat
 * and reconnect handshake): a bystander's call waited up to that long. */
#define P95_MS 100
#define MAX_MS 300

/* A client that keeps asking for what needs the directory: exports and
 * lookups by name, one after the other, for `ms`; each must fail with
 * the directory's errno, the first within `first_ms`, the others (the
 * directory known down by then) within 1 s. */
struct attacker {
	pthread_t thread;
	struct dp_client *c;
	int reg;
	unsigned ms, first_ms;
	unsigned calls;
	double worst_ms, first;
	char what[160];
};

static void *attacker_main(void *arg)
{
	struct attacker *a = arg;
	uint64_t start = now_ns();

	for (unsigned i = 0; dir_ms_since(start) < a->ms && !a->what[0]; i++) {
		char name[32];
		uint64_t t0 = now_ns();
		double ms;
		int rc;

		snprintf(name, sizeof(name), "att-%u", i);
		rc = i % 2 ? dp_segment_open(a->c, NULL, name, DP_ACCESS_READ)
			   : dp_segment_export(a->c, a->reg, name, DP_ACCESS_READ);
		ms = (double)(now_ns() - t0) / 1e6;
		if (!a->calls)
			a->first = ms;
		a->calls++;
		if (ms > a->worst_ms && a->calls > 1)
			a->worst_ms = ms;
		if (rc != -ETIMEDOUT && rc != -EHOSTUNREACH)
			snprintf(a->what, sizeof(a->what),
				 "%s of '%s': %s, want ETIMEDOUT or "
				 "EHOSTUNREACH",
				 i % 2 ? "open" : "export", name, dp_strerror(rc));
		else if (ms > (a->calls == 1 ? a->first_ms : 1000))
			snprintf(a->what, sizeof(a->what), "%s of '%s' took %.0f ms to fail",
				 i % 2 ? "open" : "export", name, ms);
		sleep_ms(1); /* a steady stream, not a CPU hog on a small machine */
	}
	return NULL;
}

static void attacker_start(struct attacker *a, const struct svc *s, unsigned ms, unsigned first_ms)
{
	uint8_t *mem;

	memset(a, 0, sizeof(*a));
	a->c = connect_client(s, "attacker");
	a->reg = alloc_region(a->c, 1 << 20, &mem);
	a->ms = ms;
	a->first_ms = first_ms;
	cr_assert_eq(pthread_create(&a->thread, NULL, attacker_main, a), 0);
}

static void attacker_finish(struct attacker *a)
{
	pthread_join(a->thread, NULL);
	cr_assert_eq(a->what[0], 0, "%s", a->what);
	cr_assert_gt(a->calls, 1, "the attacker made %u call(s)", a->calls);
	dp_close(a->c);
}

static void bystander_check(const struct ctl_bystander *b, const char *attack)
{
	double p95 = ctl_bystander_q(b, 0.95), max = ctl_bystander_q(b, 1);

	cr_assert_lt(p95, P95_MS, "bystander p95 %.1f ms while %s", p95, attack);
	cr_assert_lt(max, MAX_MS, "a bystander call took %.1f ms while %s", max, attack);
}

Test(directory_hung, stopped_redis_does_not_delay_bystanders)
{
	struct ctl_bystander quiet, hung;
	struct attacker att;
	struct dp_client *owner;
	char self[64];
	uint8_t *mem;
	int rc;
	uint64_t t0;

	dir_redis_start(&dir_redis, 0, NULL);
	/* TTL 2 s: a heartbeat every 667 ms, which used to stall too. */
	dir_svc_start(0, dir_redis.url, 2, NULL);
	owner = connect_client(&fab_svc[0], "owner");
	export_segment(owner, alloc_region(owner, 1 << 20, &mem), "local", DP_ACCESS_RW);
	dir_server_name(0, self, sizeof(self));

	ctl_bystander_start(&quiet, &fab_svc[0], self, "local");
	sleep_ms(1000);
	ctl_bystander_stop(&quiet);

	kill(dir_redis.pid, SIGSTOP);
	wait_stopped(dir_redis.pid);
	ctl_bystander_start(&hung, &fab_svc[0], self, "local");
	sleep_ms(100);
	/* The first call meets the hung connection: its 500 ms command
	 * timeout, behind at most one other command of the directory thread
	 * (a heartbeat). Then the directory is down: at once. */
	attacker_start(&att, &fab_svc[0], 3000, 1500);
	attacker_finish(&att);
	ctl_bystander_stop(&hung);
	cr_log_info("hung Redis (SIGSTOP): bystander control calls p50 %.2f p99 %.2f max %.2f ms "
		    "(%u calls) vs quiet p50 %.2f p99 %.2f max %.2f ms (%u); directory calls: "
		    "%u, first failed after %.0f ms, later ones within %.1f ms",
		    ctl_bystander_q(&hung, 0.5), ctl_bystander_q(&hung, 0.99),
		    ctl_bystander_q(&hung, 1), hung.n, ctl_bystander_q(&quiet, 0.5),
		    ctl_bystander_q(&quiet, 0.99), ctl_bystander_q(&quiet, 1), quiet.n, att.calls,
		    att.first, att.worst_ms);
	bystander_check(&hung, "Redis hangs");
	cr_assert(svc_log_has(&fab_svc[0], "timed out"), "the timeout was not logged");

	/* Redis answers again: the directory comes back by itself. */
	kill(dir_redis.pid, SIGCONT);
	t0 = now_ns();
	while ((rc = dp_segment_export(owner, alloc_region(owner, 4096, &mem), "after",
				       DP_ACCESS_READ))) {
		cr_assert_lt(dir_ms_since(t0), 10000, "export failing 10 s after SIGCONT: %s",
			     dp_strerror(rc));
		sleep_ms(100);
	}
	cr_assert_eq(dir_int(&dir_redis, "EXISTS %s", DIR_KEY("after")), 1);
	ctl_bystander_free(&quiet);
	ctl_bystander_free(&hung);
	dp_close(owner);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
}

Test(directory_hung, silent_redis_does_not_delay_bystanders)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	struct ctl_bystander b;
	struct attacker att;
	char url[64];
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	/* A "Redis" that accepts (the kernel completes the handshakes) and
	 * never answers: every connection attempt's handshake times out. */
	cr_assert_geq(lfd, 0);
	cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(lfd, 128), 0);
	cr_assert_eq(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", ntohs(sa.sin_port));
	dir_svc_start(0, url, 2, NULL);

	/* No segment to open here (exports need the directory): the
	 * bystander allocates, frees and connects. */
	ctl_bystander_start(&b, &fab_svc[0], NULL, NULL);
	sleep_ms(100);
	/* Never connected: exports and lookups fail at once. */
	attacker_start(&att, &fab_svc[0], 3000, 1000);
	attacker_finish(&att);
	ctl_bystander_stop(&b);
	cr_log_info("silent Redis (accepts, never answers): bystander control calls p50 %.2f p99 "
		    "%.2f max %.2f ms (%u calls); directory calls: %u, each failed within %.1f ms",
		    ctl_bystander_q(&b, 0.5), ctl_bystander_q(&b, 0.99), ctl_bystander_q(&b, 1),
		    b.n, att.calls, att.worst_ms > att.first ? att.worst_ms : att.first);
	bystander_check(&b, "Redis is a silent listener");
	ctl_bystander_free(&b);
	close(lfd);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
}

/* An export waits for Redis; its client dies meanwhile; Redis answers:
 * the record it published is withdrawn at once, and the name is free. */
Test(directory_hung, client_gone_before_its_publish_is_answered)
{
	struct dp_client *c;
	long hset0, del0;
	uint8_t *mem;
	uint64_t t0;
	pid_t pid;
	int p[2];
	char go;

	dir_redis_start(&dir_redis, 0, NULL);
	/* TTL 10 s: no heartbeat meets the stopped Redis in this test. */
	dir_svc_start(0, dir_redis.url, 10, NULL);
	/* A first export: the directory is up (the service may accept
	 * connections before its first handshake is through). */
	c = connect_client(&fab_svc[0], "heir");
	t0 = now_ns();
	while (dp_segment_export(c, alloc_region(c, 4096, &mem), "warm", DP_ACCESS_READ)) {
		cr_assert_lt(dir_ms_since(t0), 10000, "the directory never came up");
		sleep_ms(50);
	}
	hset0 = dir_calls(&dir_redis, "hset");
	del0 = dir_calls(&dir_redis, "del");
	cr_assert_eq(pipe(p), 0);
	kill(dir_redis.pid, SIGSTOP);
	wait_stopped(dir_redis.pid);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (!pid) {
		struct dp_client *cc = NULL;
		void *m;
		int reg;

		if (dp_connect(fab_svc[0].sock, "orphan", &cc) ||
		    (reg = dp_alloc(cc, 1 << 20, 0, &m)) < 0)
			_exit(1);
		(void)!write(p[1], "g", 1);
		dp_segment_export(cc, reg, "orphan", DP_ACCESS_READ);
		_exit(0);
	}
	close(p[1]);
	cr_assert_eq(read(p[0], &go, 1), 1, "the child did not get to its export");
	close(p[0]);
	sleep_ms(100); /* its EXPORT is with the directory thread now */
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	sleep_ms(100);
	kill(dir_redis.pid, SIGCONT); /* before the 500 ms timeout: published */

	t0 = now_ns();
	while (dir_calls(&dir_redis, "del") == del0) {
		cr_assert_lt(dir_ms_since(t0), 5000, "the orphan's record was not withdrawn");
		sleep_ms(20);
	}
	cr_assert_gt(dir_calls(&dir_redis, "hset"), hset0, "the export was never published");
	cr_assert_eq(dir_int(&dir_redis, "EXISTS %s", DIR_KEY("orphan")), 0);
	/* Nothing left of it here: the name is free for another client. */
	export_segment(c, alloc_region(c, 4096, &mem), "orphan", DP_ACCESS_READ);
	cr_assert_eq(dir_int(&dir_redis, "EXISTS %s", DIR_KEY("orphan")), 1);
	dp_close(c);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
}
