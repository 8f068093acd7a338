/* fabric_netns.c - two dataplaned in two network namespaces joined by veth pairs move bytes over the tcp provider, one rail and two; skipped where namespaces cannot be made. */
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
	bool made[2];
} net;

static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	strncat(cmd, " >/dev/null 2>&1", sizeof(cmd) - strlen(cmd) - 1);
	st = system(cmd);
	return st == -1 ? -1 : WEXITSTATUS(st);
}

static void netns_teardown(void)
{
	fab_teardown(); /* the services first: they hold the namespaces */
	for (unsigned i = 0; i < 2; i++)
		if (net.made[i]) {
			sh("ip netns del %s", net.ns[i]);
			net.made[i] = false;
		}
}

TestSuite(fabric_netns, .fini = netns_teardown, .timeout = 60);

/* Creates the namespaces with `pairs` veth pairs, or skips the test. */
static void netns_setup(unsigned pairs)
{
	unsigned id = (unsigned)getpid() % 100000, x = (unsigned)getpid() % 250 + 1;

	if (geteuid() != 0)
		cr_skip_test("fabric_netns: needs root to create network namespaces (ip netns)");
	if (sh("command -v ip"))
		cr_skip_test("fabric_netns: no 'ip' command (iproute2)");
	for (unsigned i = 0; i < 2; i++) {
		snprintf(net.ns[i], sizeof(net.ns[i]), "dpf%c-%u", "AB"[i], id);
		if (sh("ip netns add %s", net.ns[i]))
			cr_skip_test("fabric_netns: 'ip netns add' failed (no CAP_SYS_ADMIN or no "
				     "netns support here)");
		net.made[i] = true;
		if (sh("ip -n %s link set lo up", net.ns[i]))
			cr_skip_test("fabric_netns: cannot bring up lo in a namespace");
	}
	for (unsigned p = 0; p < pairs; p++) {
		for (unsigned i = 0; i < 2; i++) {
			snprintf(net.veth[p][i], sizeof(net.veth[p][i]), "dpf%c%u-%u", "ab"[i], p,
				 id);
			snprintf(net.ip[p][i], sizeof(net.ip[p][i]), "10.%u.%u.%u", 77 + p, x,
				 i + 1);
		}
		if (sh("ip link add %s type veth peer name %s", net.veth[p][0], net.veth[p][1]))
			cr_skip_test("fabric_netns: cannot create a veth pair (no veth driver?)");
		for (unsigned i = 0; i < 2; i++) {
			cr_assert_eq(sh("ip link set %s netns %s", net.veth[p][i], net.ns[i]), 0);
			cr_assert_eq(sh("ip -n %s addr add %s/24 dev %s", net.ns[i], net.ip[p][i],
					net.veth[p][i]),
				     0);
			cr_assert_eq(sh("ip -n %s link set %s up", net.ns[i], net.veth[p][i]), 0);
		}
	}
}

/* Bytes sent plus received on interface `dev` of namespace `ns`. */
static uint64_t link_bytes(const char *ns, const char *dev)
{
	char cmd[256];
	unsigned long long rx = 0, tx = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd),
		 "ip netns exec %s cat /sys/class/net/%s/statistics/rx_bytes "
		 "/sys/class/net/%s/statistics/tx_bytes",
		 ns, dev, dev);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	cr_assert_eq(fscanf(f, "%llu %llu", &rx, &tx), 2, "no statistics for %s in %s", dev, ns);
	pclose(f);
	return rx + tx;
}

/* dataplaned in namespace i, tcp provider on that side's veth ends. */
static void ns_start(unsigned i, unsigned pairs, const char *slice)
{
	const char *prefix[] = {"ip", "netns", "exec", net.ns[i], NULL};
	char nics[64];
	const char *args[] = {"--provider", "tcp",     "--server-name", net.ip[0][i], "--nics",
			      nics,	    "--slice", slice,		NULL};

	snprintf(nics, sizeof(nics), "%s", net.veth[0][i]);
	if (pairs > 1)
		snprintf(nics + strlen(nics), sizeof(nics) - strlen(nics), ",%s", net.veth[1][i]);
	start_svc_in(&fab_svc[i], prefix, args);
}

struct ends {
	struct dp_client *ca, *cb;
	struct dp_queue *q[2];
	uint8_t *loc, *tgt;
	int lreg, treg, seg;
	uint64_t len;
};

/* A (in dpfA) opens B's (in dpfB) export "netns" through B's address. */
static void ends_open(struct ends *e, uint64_t len)
{
	char peer[64];

	e->len = len;
	e->ca = connect_client(&fab_svc[0], "ns-a");
	e->cb = connect_client(&fab_svc[1], "ns-b");
	e->treg = alloc_region(e->cb, len, &e->tgt);
	export_segment(e->cb, e->treg, "netns", DP_ACCESS_RW);
	e->lreg = alloc_region(e->ca, len, &e->loc);
	snprintf(peer, sizeof(peer), "%s:%d", net.ip[0][1], fab_rpc_port(&fab_svc[1]));
	cr_assert_str_eq(dp_server_name(e->cb), peer, "B's server name");
	e->seg = open_segment(e->ca, peer, "netns", DP_ACCESS_RW);
	e->q[0] = make_queue(e->ca, 64);
	e->q[1] = make_queue(e->ca, 64);
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
	ns_start(0, 1, "1048576");
	ns_start(1, 1, "1048576");
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
	ns_start(0, 2, "65536");
	ns_start(1, 2, "65536");
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
