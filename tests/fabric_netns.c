/* fabric_netns.c - two dataplaned in two network namespaces joined by veth pairs move bytes over the tcp provider, one rail and two, to a dp_alloc export, an owner-staged one and one of dp_register_mem memory; on a link shaped to 100 Mbit/s transfers that outlast --fabric-timeout-ms still succeed, and a stopped peer times out and is lost; skipped where namespaces cannot be made. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

/*
 * The "network": namespaces dpfA-PID and dpfB-PID, veth pair i named
 * dpfaI-PID / dpfbI-PID (within IFNAMSIZ), on 10.77.X.0/24 (pair 0) and
 * 10.78.X.0/24 (pair 1), X from the pid. Names are unique per test process,
 * so runs side by side do not collide; deleting a namespace deletes its
 * veth ends.
 */
static struct {
	char ns[2][32];
	char veth[2][2][16]; /* [pair][side] */
	char ip[2][2][16];   /* [pair][side] */
} net;

TestSuite(fabric_netns, .fini = netns_teardown, .timeout = 60);

/* Creates the namespaces with `pairs` veth pairs, or skips the test. */
static void netns_setup(unsigned pairs)
{
	unsigned id = (unsigned)getpid() % 100000, x = (unsigned)getpid() % 250 + 1;

	if (geteuid() != 0)
		cr_skip_test("fabric_netns: needs root to create network namespaces (ip netns)");
	if (run_sh("command -v ip"))
		cr_skip_test("fabric_netns: no 'ip' command (iproute2)");
	for (unsigned i = 0; i < 2; i++) {
		snprintf(net.ns[i], sizeof(net.ns[i]), "dpf%c-%u", "AB"[i], id);
		if (netns_add(net.ns[i]))
			cr_skip_test("fabric_netns: cannot make a network namespace with lo up "
				     "(no CAP_SYS_ADMIN or no netns support here; the reason is "
				     "above)");
	}
	for (unsigned p = 0; p < pairs; p++) {
		for (unsigned i = 0; i < 2; i++) {
			snprintf(net.veth[p][i], sizeof(net.veth[p][i]), "dpf%c%u-%u", "ab"[i], p,
				 id);
			snprintf(net.ip[p][i], sizeof(net.ip[p][i]), "10.%u.%u.%u", 77 + p, x,
				 i + 1);
		}
		if (run_sh("ip link add %s type veth peer name %s", net.veth[p][0], net.veth[p][1]))
			cr_skip_test("fabric_netns: cannot create a veth pair (no veth driver?)");
		for (unsigned i = 0; i < 2; i++) {
			cr_assert_eq(run_sh("ip link set %s netns %s", net.veth[p][i], net.ns[i]),
				     0);
			cr_assert_eq(netns_sh(net.ns[i], "ip addr add %s/24 dev %s", net.ip[p][i],
					      net.veth[p][i]),
				     0);
			cr_assert_eq(netns_sh(net.ns[i], "ip link set %s up", net.veth[p][i]), 0);
		}
	}
}

/* Bytes sent plus received on interface `dev` of namespace `ns`, from
 * /proc/net/dev as seen inside it (sysfs would show the host's). */
static uint64_t link_bytes(const char *ns, const char *dev)
{
	char cmd[128], line[512];
	unsigned long long rx = 0, tx = 0;
	size_t n = strlen(dev);
	bool found = false;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "nsenter --net=/run/netns/%s cat /proc/net/dev", ns);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	while (!found && fgets(line, sizeof(line), f)) {
		const char *p = line + strspn(line, " ");

		if (!strncmp(p, dev, n) && p[n] == ':')
			found = sscanf(p + n + 1, "%llu %*u %*u %*u %*u %*u %*u %*u %llu", &rx,
				       &tx) == 2;
	}
	pclose(f);
	cr_assert(found, "no statistics for %s in %s", dev, ns);
	return rx + tx;
}

/* dataplaned in namespace i, tcp provider on that side's veth ends;
 * `timeout_ms` is its --fabric-timeout-ms (NULL: the default). */
/* @more (NULL or one option without argument) after the rest. */
static void ns_start_more(unsigned i, unsigned pairs, const char *slice, const char *timeout_ms,
			  const char *more)
{
	const char *prefix[3];
	char nics[64], enter[64];
	const char *args[12] = {"--provider", "tcp", "--server-name", net.ip[0][i],
				"--nics",     nics,  "--slice",	      slice};
	unsigned n = 8;

	if (timeout_ms) {
		args[n++] = "--fabric-timeout-ms";
		args[n++] = timeout_ms;
	}
	args[n++] = more;
	args[n] = NULL;

	snprintf(nics, sizeof(nics), "%s", net.veth[0][i]);
	if (pairs > 1)
		snprintf(nics + strlen(nics), sizeof(nics) - strlen(nics), ",%s", net.veth[1][i]);
	netns_prefix(net.ns[i], enter, prefix);
	start_svc_in(&fab_svc[i], prefix, args);
}

static void ns_start(unsigned i, unsigned pairs, const char *slice, const char *timeout_ms)
{
	ns_start_more(i, pairs, slice, timeout_ms, NULL);
}

struct ends {
	struct dp_client *ca, *cb;
	struct dp_queue *q[2];
	uint8_t *loc, *tgt;
	int lreg, treg, seg;
	uint64_t len;
	char peer[64]; /* B's server name */
};

/* A (in dpfA) opens B's (in dpfB) export "netns" through B's address: a
 * dp_alloc region of B's client, or (registered) memory of this process it
 * registered with dp_register_mem, which B stages for A. */
static void ends_open_mem(struct ends *e, uint64_t len, bool registered)
{
	char *peer = e->peer;

	e->len = len;
	e->ca = connect_client(&fab_svc[0], "ns-a");
	e->cb = connect_client(&fab_svc[1], "ns-b");
	if (registered) {
		e->tgt = calloc(1, len);
		cr_assert_not_null(e->tgt);
		e->treg = dp_register_mem(e->cb, e->tgt, len);
		cr_assert_geq(e->treg, 0, "dp_register_mem: %s", dp_strerror(e->treg));
	} else {
		e->treg = alloc_region(e->cb, len, &e->tgt);
	}
	export_segment(e->cb, e->treg, "netns", DP_ACCESS_RW);
	e->lreg = alloc_region(e->ca, len, &e->loc);
	snprintf(peer, sizeof(e->peer), "%s:%d", net.ip[0][1], fab_rpc_port(&fab_svc[1]));
	cr_assert_str_eq(dp_server_name(e->cb), peer, "B's server name");
	e->seg = open_segment(e->ca, peer, "netns", DP_ACCESS_RW);
	e->q[0] = make_queue(e->ca, 64);
	e->q[1] = make_queue(e->ca, 64);
}

static void ends_open(struct ends *e, uint64_t len)
{
	ends_open_mem(e, len, false);
}

static void sizes_across(struct ends *e)
{
	static const uint64_t lens[] = {1, 4096, MiB, 64 * MiB};
	struct dp_desc d;

	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]) && lens[i] + 4096 <= e->len; i++) {
		uint64_t len = lens[i], off = 4096 - (i * 1000) % 4096;

		pattern_fill(e->loc, len, 300 + i);
		memset(e->tgt + off, 0, len);
		dp_prep_write(&d, e->lreg, 0, e->seg, off, len, i);
		run_ok(e->q[i & 1], &d, DP_CQE_F_FABRIC, 30000);
		cr_assert_eq(pattern_check(e->tgt + off, len, 300 + i), -1, "WRITE of %llu B",
			     (unsigned long long)len);
		pattern_fill(e->tgt + off, len, 400 + i);
		memset(e->loc, 0, len);
		dp_prep_read(&d, e->lreg, 0, e->seg, off, len, 100 + i);
		run_ok(e->q[i & 1], &d, DP_CQE_F_FABRIC, 30000);
		cr_assert_eq(pattern_check(e->loc, len, 400 + i), -1, "READ of %llu B",
			     (unsigned long long)len);
	}
}

/* 32 x 1 MiB WRITEs in flight over both queues, then READs of them. */
static void in_flight_across(struct ends *e)
{
	struct dp_desc d[2][16];
	struct dp_cqe c[2][16];

	for (unsigned op = 0; op < 2; op++) {
		if (op == 0)
			for (unsigned i = 0; i < 32; i++)
				pattern_fill(e->loc + i * MiB, MiB, 500 + i);
		else
			for (unsigned i = 0; i < 32; i++)
				pattern_fill(e->tgt + i * MiB + 9, MiB, 600 + i);
		for (unsigned i = 0; i < 32; i++) {
			dp_prep_write(&d[i & 1][i / 2], e->lreg, i * MiB, e->seg, i * MiB + 9, MiB,
				      i);
			if (op)
				d[i & 1][i / 2].opcode = DP_OP_READ;
		}
		for (unsigned k = 0; k < 2; k++)
			submit_all(e->q[k], d[k], 16, 10000);
		for (unsigned k = 0; k < 2; k++) {
			reap(e->q[k], c[k], 16, 30000);
			for (unsigned i = 0; i < 16; i++) {
				cr_assert_eq(c[k][i].status, 0, "%s %llu: %s",
					     op ? "READ" : "WRITE",
					     (unsigned long long)c[k][i].user_data,
					     dp_strerror(c[k][i].status));
				cr_assert_eq(c[k][i].flags & DP_CQE_F_FABRIC, DP_CQE_F_FABRIC);
			}
		}
		for (unsigned i = 0; i < 32; i++) {
			if (op == 0)
				cr_assert_eq(pattern_check(e->tgt + i * MiB + 9, MiB, 500 + i), -1,
					     "WRITE %u", i);
			else
				cr_assert_eq(pattern_check(e->loc + i * MiB, MiB, 600 + i), -1,
					     "READ %u", i);
		}
	}
}

static void ends_close(struct ends *e)
{
	dp_close(e->ca);
	dp_close(e->cb);
	for (unsigned i = 0; i < 2; i++)
		cr_assert_eq(svc_stop(&fab_svc[i]), 0, "service in %s did not exit cleanly",
			     net.ns[i]);
}

Test(fabric_netns, tcp_across_a_veth_pair)
{
	struct ends e;
	char self[64], prov[32], domain[64];

	netns_setup(1);
	ns_start(0, 1, "1048576", NULL);
	ns_start(1, 1, "1048576", NULL);
	/* The rail is the veth end (tcp names its domains after interfaces). */
	svc_rail(&fab_svc[0], 0, prov, sizeof(prov), domain, sizeof(domain));
	cr_assert_str_eq(domain, net.veth[0][0], "A's rail is on %s, not %s", domain,
			 net.veth[0][0]);
	ends_open(&e, 64 * MiB + 8192);
	sizes_across(&e);
	in_flight_across(&e);
	/* A's own export, named by A's address: still the local path. */
	{
		struct dp_desc d;
		uint8_t *mine;
		int mreg = alloc_region(e.ca, 4096, &mine), seg;

		export_segment(e.ca, mreg, "mine", DP_ACCESS_RW);
		snprintf(self, sizeof(self), "%s:%d", net.ip[0][0], fab_rpc_port(&fab_svc[0]));
		seg = open_segment(e.ca, self, "mine", DP_ACCESS_RW);
		pattern_fill(e.loc, 4096, 700);
		dp_prep_write(&d, e.lreg, 0, seg, 0, 4096, 700);
		run_ok(e.q[0], &d, DP_CQE_F_LOCAL, 5000);
		cr_assert_eq(pattern_check(mine, 4096, 700), -1);
	}
	ends_close(&e);
}

/* Two veth pairs are two rails; 64 KiB slices stripe every transfer over
 * both. */
Test(fabric_netns, tcp_two_rails_striped)
{
	struct ends e;

	netns_setup(2);
	ns_start(0, 2, "65536", NULL);
	ns_start(1, 2, "65536", NULL);
	{
		char prov[32], domain[64];

		cr_assert_eq(svc_rails(&fab_svc[0]), 2, "A opened %u rails, not two",
			     svc_rails(&fab_svc[0]));
		svc_rail(&fab_svc[0], 1, prov, sizeof(prov), domain, sizeof(domain));
		/* "tcp" or layered, "tcp;ofi_rxm" */
		cr_assert(!strncmp(prov, "tcp", 3), "A's rail 1: provider %s", prov);
	}
	ends_open(&e, 64 * MiB + 8192);
	sizes_across(&e);
	in_flight_across(&e);
	/* 2 x (1 B + 4 KiB + 1 MiB + 64 MiB) + 2 x 32 MiB crossed: each
	 * rail carried a fair part of it. */
	for (unsigned p = 0; p < 2; p++) {
		uint64_t b = link_bytes(net.ns[0], net.veth[p][0]);

		cr_assert_gt(b, 40 * MiB, "rail %u (%s) carried only %llu bytes", p, net.veth[p][0],
			     (unsigned long long)b);
	}
	ends_close(&e);
}

/* ---- owner staging across namespaces ---- */

/* B's export is memory its rails do not register (--stage-host stands in
 * for GPU memory without FI_HMEM) and B stages it for A: the same
 * transfers, byte-accurate, one rail and two. */
Test(fabric_netns, tcp_owner_staged_across_a_veth_pair)
{
	struct ends e;

	netns_setup(1);
	ns_start(0, 1, "1048576", NULL);
	ns_start_more(1, 1, "1048576", NULL, "--stage-host");
	ends_open(&e, 64 * MiB + 8192);
	sizes_across(&e);
	in_flight_across(&e);
	ends_close(&e);
}

/* B's export is memory its client registered with dp_register_mem (this
 * process's, malloc'd): B's rails cannot register it, B stages it with
 * process_vm_readv/writev. The memory outlives the services (ends_close). */
Test(fabric_netns, tcp_register_mem_export_across_a_veth_pair)
{
	struct ends e;

	netns_setup(1);
	ns_start(0, 1, "1048576", NULL);
	ns_start(1, 1, "1048576", NULL);
	ends_open_mem(&e, 64 * MiB + 8192, true);
	sizes_across(&e);
	in_flight_across(&e);
	ends_close(&e);
	free(e.tgt);
}

Test(fabric_netns, tcp_owner_staged_two_rails)
{
	struct ends e;

	netns_setup(2);
	ns_start(0, 2, "65536", NULL);
	ns_start_more(1, 2, "65536", NULL, "--stage-host");
	cr_assert_eq(svc_rails(&fab_svc[0]), 2, "A opened %u rails, not two",
		     svc_rails(&fab_svc[0]));
	ends_open(&e, 64 * MiB + 8192);
	sizes_across(&e);
	in_flight_across(&e);
	/* Requests go out on both rails in turn and the owner's RMA stripes
	 * over both: each carried a fair part. */
	for (unsigned p = 0; p < 2; p++) {
		uint64_t b = link_bytes(net.ns[0], net.veth[p][0]);

		cr_assert_gt(b, 20 * MiB, "rail %u (%s) carried only %llu bytes", p, net.veth[p][0],
			     (unsigned long long)b);
	}
	ends_close(&e);
}

/* ---- the fabric timeout follows progress, not size ---- */

#define SLOW_TIMEOUT_MS 2000
#define SLOW_LEN (64 * MiB)

/* Shapes both ends of veth pair `pair` to `rate` (tc tbf), or skips. */
static void shape(unsigned pair, const char *rate)
{
	if (run_sh("command -v tc"))
		cr_skip_test("fabric_netns: no 'tc' command (iproute2)");
	for (unsigned i = 0; i < 2; i++)
		if (netns_sh(net.ns[i],
			     "tc qdisc add dev %s root tbf rate %s burst 256kb latency 400ms",
			     net.veth[pair][i], rate))
			cr_skip_test("fabric_netns: cannot shape %s (no sch_tbf?)",
				     net.veth[pair][i]);
}

/* One descriptor on queue q; its completion and how long it took (ms). */
static struct dp_cqe timed(struct dp_queue *q, const struct dp_desc *d, double *ms)
{
	uint64_t t0 = now_ns();
	struct dp_cqe c = run_wait(q, d, 30000);

	*ms = (double)(now_ns() - t0) / 1e6;
	return c;
}

/*
 * On a link shaped to 100 Mbit/s a 64 MiB WRITE and READ take ~5.4 s each,
 * well past a 2 s --fabric-timeout-ms: they must succeed all the same
 * (every 1 MiB slice completes within ~90 ms), and the peer must not be
 * taken for lost, so the next transfer through the same handle succeeds
 * without a re-open. Then three 16 MiB WRITEs submitted at once: the last
 * may wait behind the others for longer than the timeout (it may fail
 * -ETIMEDOUT) but the peer, making progress all along, is still not lost.
 */
Test(fabric_netns, slow_link_outlasts_the_timeout)
{
	char to[16];
	struct ends e;
	struct dp_desc d, dd[3];
	struct dp_cqe c, cc[3];
	unsigned timedout = 0;
	double ms;

	snprintf(to, sizeof(to), "%d", SLOW_TIMEOUT_MS);
	netns_setup(1);
	shape(0, "100mbit");
	ns_start(0, 1, "1048576", to);
	ns_start(1, 1, "1048576", to);
	ends_open(&e, SLOW_LEN);

	pattern_fill(e.loc, SLOW_LEN, 910);
	memset(e.tgt, 0, SLOW_LEN);
	dp_prep_write(&d, e.lreg, 0, e.seg, 0, SLOW_LEN, 1);
	c = timed(e.q[0], &d, &ms);
	cr_assert_eq(c.status, 0, "64 MiB WRITE at 100 Mbit/s, timeout %d ms: %s after %.0f ms",
		     SLOW_TIMEOUT_MS, dp_strerror(c.status), ms);
	cr_assert_eq(c.bytes, SLOW_LEN);
	cr_assert_eq(pattern_check(e.tgt, SLOW_LEN, 910), -1, "WRITE: bytes");
	/* Else the link was not slow and the test proves nothing. */
	cr_assert_gt(ms, 1.5 * SLOW_TIMEOUT_MS, "64 MiB WRITE took only %.0f ms: not shaped?", ms);
	cr_log_info("64 MiB WRITE at 100 Mbit/s: %.0f ms", ms);

	pattern_fill(e.tgt, SLOW_LEN, 920);
	memset(e.loc, 0, SLOW_LEN);
	dp_prep_read(&d, e.lreg, 0, e.seg, 0, SLOW_LEN, 2);
	c = timed(e.q[1], &d, &ms);
	cr_assert_eq(c.status, 0, "64 MiB READ at 100 Mbit/s, timeout %d ms: %s after %.0f ms",
		     SLOW_TIMEOUT_MS, dp_strerror(c.status), ms);
	cr_assert_eq(c.bytes, SLOW_LEN);
	cr_assert_eq(pattern_check(e.loc, SLOW_LEN, 920), -1, "READ: bytes");
	cr_assert_gt(ms, 1.5 * SLOW_TIMEOUT_MS, "64 MiB READ took only %.0f ms: not shaped?", ms);
	cr_log_info("64 MiB READ at 100 Mbit/s: %.0f ms", ms);

	/* The peer was never lost: the same handle still works. */
	pattern_fill(e.loc, 4096, 930);
	dp_prep_write(&d, e.lreg, 0, e.seg, SLOW_LEN - 4096, 4096, 3);
	run_ok(e.q[0], &d, DP_CQE_F_FABRIC, 5000);
	cr_assert_eq(pattern_check(e.tgt + SLOW_LEN - 4096, 4096, 930), -1);

	/* Transfers queued behind each other to a live peer. */
	for (unsigned i = 0; i < 3; i++) {
		pattern_fill(e.loc + i * 16 * MiB, 16 * MiB, 940 + i);
		dp_prep_write(&dd[i], e.lreg, i * 16 * MiB, e.seg, i * 16 * MiB, 16 * MiB, 10 + i);
	}
	submit_all(e.q[0], dd, 3, 5000);
	reap(e.q[0], cc, 3, 30000);
	for (unsigned i = 0; i < 3; i++) {
		unsigned k = (unsigned)cc[i].user_data - 10;

		cr_assert_lt(k, 3u);
		if (cc[i].status == -ETIMEDOUT) {
			timedout++;
			continue;
		}
		cr_assert_eq(cc[i].status, 0, "queued WRITE %u: %s (a live peer)", k,
			     dp_strerror(cc[i].status));
		cr_assert_eq(pattern_check(e.tgt + k * 16 * MiB, 16 * MiB, 940 + k), -1,
			     "queued WRITE %u: bytes", k);
	}
	cr_log_info("3 x 16 MiB queued: %u timed out", timedout);
	pattern_fill(e.loc, 4096, 950);
	dp_prep_write(&d, e.lreg, 0, e.seg, SLOW_LEN - 4096, 4096, 4);
	run_ok(e.q[0], &d, DP_CQE_F_FABRIC, 30000);
	cr_assert_eq(pattern_check(e.tgt + SLOW_LEN - 4096, 4096, 950), -1);
	ends_close(&e);
}

/* Two services with the short fabric timeout, a segment of b opened
 * through a (the SIGSTOP tests below). */
static void stop_tests_open(struct ends *e)
{
	char to[16];

	snprintf(to, sizeof(to), "%d", SLOW_TIMEOUT_MS);
	netns_setup(1);
	ns_start(0, 1, "1048576", to);
	ns_start(1, 1, "1048576", to);
	ends_open(e, 4 * MiB);
}

/* b resumes (SIGCONT): a re-open through a reaches it, and a WRITE through
 * the new handle lands. */
static void stop_tests_resume(struct ends *e, int seed, uint64_t ud)
{
	struct dp_desc d;
	int seg;

	cr_assert_eq(kill(fab_svc[1].pid, SIGCONT), 0);
	seg = open_segment(e->ca, e->peer, "netns", DP_ACCESS_RW);
	pattern_fill(e->loc, 4096, seed);
	dp_prep_write(&d, e->lreg, 0, seg, 0, 4096, ud);
	run_ok(e->q[0], &d, DP_CQE_F_FABRIC, 5000);
	cr_assert_eq(pattern_check(e->tgt, 4096, seed), -1, "WRITE after the re-open");
}

/*
 * A peer stopped before any transfer reached it: the provider's connection
 * to it never completes, so no slice goes out and the timeout alone is no
 * evidence. The timed-out WRITE asks the peer's RPC port (a probe,
 * docs/reliability.md "Fabric failures"), which does not answer within its
 * 2 s: the peer is taken for lost, and a later descriptor fails
 * -EHOSTUNREACH at once instead of waiting the timeout again. A re-open
 * after it resumes reaches it.
 */
Test(fabric_netns, peer_stopped_before_any_transfer_is_lost_after_a_probe)
{
	struct ends e;
	struct dp_desc d;
	struct dp_cqe c;
	double ms;

	stop_tests_open(&e);
	cr_assert_eq(kill(fab_svc[1].pid, SIGSTOP), 0);
	wait_stopped(fab_svc[1].pid);
	dp_prep_write(&d, e.lreg, 0, e.seg, 0, 4096, 1);
	c = timed(e.q[0], &d, &ms);
	cr_assert_eq(c.status, -ETIMEDOUT, "WRITE to a stopped peer: %s after %.0f ms",
		     dp_strerror(c.status), ms);
	/* The probe's deadline (2 s) and some slack. */
	sleep_ms(2500);
	dp_prep_write(&d, e.lreg, 0, e.seg, 0, 4096, 2);
	c = timed(e.q[0], &d, &ms);
	cr_assert_eq(c.status, -EHOSTUNREACH, "after the probe: %s after %.0f ms (not lost?)",
		     dp_strerror(c.status), ms);
	cr_assert_lt(ms, 1000.0, "a lost peer's descriptor took %.0f ms", ms);
	stop_tests_resume(&e, 980, 3);
	ends_close(&e);
}

/*
 * A peer that stops answering (SIGSTOP): a READ (which needs the peer's
 * reply) fails with -ETIMEDOUT about the timeout after it was sent, the
 * peer is taken for lost (the next descriptor fails -EHOSTUNREACH at
 * once), and a re-open after it resumes reaches it again.
 */
Test(fabric_netns, stopped_peer_times_out_and_is_lost)
{
	struct ends e;
	struct dp_desc d;
	struct dp_cqe c;
	double ms;

	stop_tests_open(&e);
	pattern_fill(e.tgt, MiB, 960);
	dp_prep_read(&d, e.lreg, 0, e.seg, 0, MiB, 1);
	run_ok(e.q[0], &d, DP_CQE_F_FABRIC, 5000);
	cr_assert_eq(pattern_check(e.loc, MiB, 960), -1);

	cr_assert_eq(kill(fab_svc[1].pid, SIGSTOP), 0);
	wait_stopped(fab_svc[1].pid);
	dp_prep_read(&d, e.lreg, MiB, e.seg, MiB, MiB, 2);
	c = timed(e.q[0], &d, &ms);
	cr_assert_eq(c.status, -ETIMEDOUT, "READ from a stopped peer: %s after %.0f ms",
		     dp_strerror(c.status), ms);
	cr_assert(ms > SLOW_TIMEOUT_MS - 100 && ms < SLOW_TIMEOUT_MS + 2000,
		  "READ from a stopped peer failed after %.0f ms, timeout %d ms", ms,
		  SLOW_TIMEOUT_MS);
	dp_prep_write(&d, e.lreg, 0, e.seg, 0, 4096, 3);
	c = timed(e.q[0], &d, &ms);
	cr_assert_eq(c.status, -EHOSTUNREACH, "after the timeout: %s (the peer is not lost?)",
		     dp_strerror(c.status));
	cr_assert_lt(ms, 1000.0, "a lost peer's descriptor took %.0f ms", ms);
	stop_tests_resume(&e, 970, 4);
	ends_close(&e);
}

/* An engine session of B's client, opened by A's client by B's address and
 * the session's port: bytes both ways by B's virtual addresses, first
 * contact included; the session of A's own client, by A's address, stays
 * local. */
Test(fabric_netns, session_across_a_veth_pair)
{
	struct dp_client *ca, *cb;
	struct dp_queue *q;
	struct dp_desc d;
	struct dp_cqe c;
	char name[64];
	uint8_t *loc, *tgt, *mine;
	uint64_t t0;
	int lreg, treg, mreg, port, seg, self;

	netns_setup(1);
	ns_start(0, 1, "1048576", NULL);
	ns_start(1, 1, "1048576", NULL);
	ca = connect_client(&fab_svc[0], "ns-a");
	cb = connect_client(&fab_svc[1], "ns-b");
	treg = alloc_region(cb, 8 * MiB, &tgt);
	port = dp_session_create(cb, 0);
	cr_assert_gt(port, 0, "dp_session_create: %s", dp_last_error());
	snprintf(name, sizeof(name), "%s:%d", net.ip[0][1], port);
	cr_assert_str_eq(dp_session_name(cb), name, "B's session name");
	lreg = alloc_region(ca, 8 * MiB, &loc);
	q = make_queue(ca, 64);
	seg = dp_session_open(ca, name, DP_ACCESS_RW);
	cr_assert_geq(seg, 0, "dp_session_open(%s): %s", name, dp_last_error());
	/* First contact: the first 4 KiB WRITE asks B's session port. */
	pattern_fill(loc, 4096, 801);
	dp_prep_write(&d, lreg, 0, seg, (uint64_t)(uintptr_t)tgt + 8192, 4096, 1);
	t0 = now_ns();
	c = run_wait(q, &d, 30000);
	cr_log_info("session first contact over tcp: %.3f ms", (double)(now_ns() - t0) / 1e6);
	cr_assert_eq(c.status, 0, "first WRITE: %s", dp_strerror(c.status));
	cr_assert_eq(c.flags & DP_CQE_F_FABRIC, DP_CQE_F_FABRIC);
	cr_assert_eq(pattern_check(tgt + 8192, 4096, 801), -1);
	for (unsigned i = 0; i < 4; i++) {
		uint64_t len = (uint64_t)1 << (6 * i), off = 8 * MiB - len - 3;

		pattern_fill(tgt + off, len, 810 + i);
		dp_prep_read(&d, lreg, 5, seg, (uint64_t)(uintptr_t)tgt + off, len, 10 + i);
		run_ok(q, &d, DP_CQE_F_FABRIC, 30000);
		cr_assert_eq(pattern_check(loc + 5, len, 810 + i), -1, "READ of %llu B",
			     (unsigned long long)len);
	}
	/* Past B's registration: -EFAULT, through the fabric too. */
	dp_prep_write(&d, lreg, 0, seg, (uint64_t)(uintptr_t)tgt + 8 * MiB - 1, 2, 20);
	c = run_wait(q, &d, 30000);
	cr_assert_eq(c.status, -EFAULT, "past the end: %s", dp_strerror(c.status));
	/* A's own session by A's address: local. */
	mreg = alloc_region(ca, 4096, &mine);
	cr_assert_gt(dp_session_create(ca, 0), 0);
	snprintf(name, sizeof(name), "%s:%s", net.ip[0][0], strrchr(dp_session_name(ca), ':') + 1);
	self = dp_session_open(ca, name, DP_ACCESS_RW);
	cr_assert_geq(self, 0, "self open %s: %s", name, dp_last_error());
	pattern_fill(loc, 4096, 820);
	dp_prep_write(&d, lreg, 0, self, (uint64_t)(uintptr_t)mine, 4096, 30);
	run_ok(q, &d, DP_CQE_F_LOCAL, 5000);
	cr_assert_eq(pattern_check(mine, 4096, 820), -1);
	(void)treg;
	(void)mreg;
	dp_close(ca);
	dp_close(cb);
	for (unsigned i = 0; i < 2; i++)
		cr_assert_eq(svc_stop(&fab_svc[i]), 0, "service in %s did not exit cleanly",
			     net.ns[i]);
}
