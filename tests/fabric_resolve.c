/* fabric_resolve.c - a peer given by host name is resolved without the control thread waiting: in a network namespace whose resolver (a resolv.conf bound over /etc/resolv.conf for the service alone) is a UDP port that never answers, opens of such a peer end -ETIMEDOUT at the lookup's 2 s deadline while a bystander's local control calls stay fast; a host name that resolves (localhost) reaches its peer. */
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static struct {
	char ns[32], conf[64];
} rs;

static void resolve_teardown(void)
{
	int status;

	fab_teardown(); /* the services first: they hold the namespace */
	if (child_pid > 0) {
		kill(child_pid, SIGKILL);
		waitpid(child_pid, &status, 0);
		child_pid = 0;
	}
	netns_del_all();
	if (rs.conf[0])
		unlink(rs.conf);
	rs.conf[0] = 0;
}

TestSuite(fabric_resolve, .fini = resolve_teardown, .timeout = 60);

/* A child in the namespace holding UDP 127.0.0.1:53 open without ever
 * answering: a name server that is there (no ICMP refusal) and silent. */
static void silent_name_server(void)
{
	int p[2], fd, s;
	char path[64], ok = 0;
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons(53),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

	cr_assert_eq(pipe(p), 0);
	child_pid = fork();
	cr_assert_geq(child_pid, 0);
	if (!child_pid) {
		snprintf(path, sizeof(path), "/run/netns/%s", rs.ns);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || setns(fd, CLONE_NEWNET))
			_exit(1);
		s = socket(AF_INET, SOCK_DGRAM, 0);
		if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)))
			_exit(2);
		(void)!write(p[1], "k", 1);
		for (;;)
			pause();
	}
	close(p[1]);
	cr_assert_eq(read(p[0], &ok, 1), 1, "the silent name server did not start");
	close(p[0]);
}

struct slow_opener {
	pthread_t thread;
	struct dp_client *c;
	unsigned ms;
	unsigned calls;
	double fastest, slowest;
	char what[160];
};

/* Opens of segments on a peer whose name never resolves, one after the
 * other, for `ms`. */
static void *slow_opener_main(void *arg)
{
	struct slow_opener *o = arg;
	uint64_t start = now_ns();

	o->fastest = 1e9;
	while (dir_ms_since(start) < o->ms && !o->what[0]) {
		char name[32];
		uint64_t t0 = now_ns();
		double ms;
		int rc;

		snprintf(name, sizeof(name), "seg-%u", o->calls);
		rc = dp_segment_open(o->c, "peer.dp-slow.test:4444", name, DP_ACCESS_READ);
		ms = (double)(now_ns() - t0) / 1e6;
		o->calls++;
		o->fastest = ms < o->fastest ? ms : o->fastest;
		o->slowest = ms > o->slowest ? ms : o->slowest;
		if (rc != -ETIMEDOUT)
			snprintf(o->what, sizeof(o->what),
				 "open through a silent resolver: %s after %.0f ms, want ETIMEDOUT",
				 dp_strerror(rc), ms);
	}
	return NULL;
}

Test(fabric_resolve, slow_resolver_does_not_delay_bystanders)
{
	char script[256];
	/* The service alone sees rs.conf as /etc/resolv.conf: a mount
	 * namespace of its own binds it, then nsenter joins the network
	 * namespace. unshare's default (make "/" private) fails in a chroot
	 * (CI's bare-Debian stage), where "/" is no mount point: the script
	 * makes it private where it can, so that the bind stays in the
	 * namespace on hosts whose mounts are shared. */
	const char *prefix[] = {
		"unshare", "--mount", "--propagation", "unchanged", "sh", "-c", script, "sh", NULL};
	const char *args[] = {"--provider", "tcp", "--server-name", "127.0.0.1", NULL};
	struct ctl_bystander quiet, attack;
	struct slow_opener o = {.ms = 3000};
	struct dp_client *owner;
	uint8_t *mem;
	FILE *f;

	if (geteuid() != 0 || run_sh("command -v ip && command -v nsenter && command -v unshare"))
		cr_skip_test(
			"fabric_resolve: needs root, 'ip' and util-linux (network namespaces)");
	snprintf(rs.ns, sizeof(rs.ns), "dprs-%u", (unsigned)getpid() % 100000);
	if (netns_add(rs.ns))
		cr_skip_test(
			"fabric_resolve: cannot make a network namespace (the reason is above)");
	snprintf(rs.conf, sizeof(rs.conf), "/tmp/%s.resolv.conf", rs.ns);
	f = fopen(rs.conf, "w");
	cr_assert_not_null(f);
	fprintf(f, "nameserver 127.0.0.1\noptions timeout:4 attempts:1\n");
	fclose(f);
	snprintf(script, sizeof(script),
		 "mount --make-rprivate / 2>/dev/null; mount --bind %s /etc/resolv.conf && "
		 "exec nsenter --net=/run/netns/%s \"$@\"",
		 rs.conf, rs.ns);
	silent_name_server();
	start_svc_in(&fab_svc[0], prefix, args);
	cr_assert_gt(svc_rails(&fab_svc[0]), 0, "no fabric rail in the namespace");
	owner = connect_client(&fab_svc[0], "owner");
	export_segment(owner, alloc_region(owner, 1 << 20, &mem), "local", DP_ACCESS_RW);

	ctl_bystander_start(&quiet, &fab_svc[0], NULL, "local");
	sleep_ms(1000);
	ctl_bystander_stop(&quiet);

	ctl_bystander_start(&attack, &fab_svc[0], NULL, "local");
	sleep_ms(100);
	o.c = connect_client(&fab_svc[0], "slow-opener");
	cr_assert_eq(pthread_create(&o.thread, NULL, slow_opener_main, &o), 0);
	pthread_join(o.thread, NULL);
	ctl_bystander_stop(&attack);
	cr_log_info("silent name server: bystander control calls p50 %.2f p99 %.2f max %.2f ms "
		    "(%u calls) vs quiet p50 %.2f p99 %.2f max %.2f ms (%u); %u open(s) of a "
		    "peer by name, each ended after %.0f-%.0f ms",
		    ctl_bystander_q(&attack, 0.5), ctl_bystander_q(&attack, 0.99),
		    ctl_bystander_q(&attack, 1), attack.n, ctl_bystander_q(&quiet, 0.5),
		    ctl_bystander_q(&quiet, 0.99), ctl_bystander_q(&quiet, 1), quiet.n, o.calls,
		    o.fastest, o.slowest);
	cr_assert_eq(o.what[0], 0, "%s", o.what);
	/* The resolver was slow indeed (the lookup's deadline ended it),
	 * and the deadline counts the resolution in. */
	cr_assert_geq(o.fastest, 1500, "an open ended after %.0f ms: the resolver answered?",
		      o.fastest);
	cr_assert_lt(o.slowest, 3000, "an open took %.0f ms (deadline 2 s)", o.slowest);
	/* Before, the control thread sat in getaddrinfo() for the resolver's
	 * 4 s: every bystander call waited. */
	cr_assert_lt(ctl_bystander_q(&attack, 0.95), 100, "bystander p95 %.1f ms",
		     ctl_bystander_q(&attack, 0.95));
	cr_assert_lt(ctl_bystander_q(&attack, 1), 300, "a bystander call took %.1f ms",
		     ctl_bystander_q(&attack, 1));
	ctl_bystander_free(&quiet);
	ctl_bystander_free(&attack);
	dp_close(o.c);
	dp_close(owner);
	stop_svc(&fab_svc[0]);
}

Test(fabric_resolve, host_name_reaches_its_peer)
{
	const char *args[] = {"--provider", "tcp", "--server-name", "127.0.0.1", NULL};
	struct seg_pair sp;
	struct dp_desc d;
	char peer[64];

	start_svc(&fab_svc[0], args);
	start_svc(&fab_svc[1], args);
	snprintf(peer, sizeof(peer), "localhost:%d", fab_rpc_port(&fab_svc[1]));
	seg_pair_open(&sp, &fab_svc[0], &fab_svc[1], peer, "by-name", 1 << 20, 4);
	pattern_fill(sp.loc, 1 << 20, 7);
	dp_prep_write(&d, sp.lreg, 0, sp.seg, 0, 1 << 20, 1);
	run_ok(sp.q, &d, DP_CQE_F_FABRIC, 15000);
	cr_assert_eq(pattern_check(sp.tgt, 1 << 20, 7), -1, "bytes through a peer by host name");
	dp_close(sp.ci);
	dp_close(sp.ct);
	stop_svc(&fab_svc[0]);
	stop_svc(&fab_svc[1]);
}
