/* fabric_transfer.c - two dataplaned on one host move bytes through libfabric (tcp, shm, sockets): 1 B..256 MiB, many in flight, the self-loopback rule, a peer SIGKILLed mid-transfer. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

TestSuite(fabric_transfer, .fini = fab_teardown, .timeout = 60);

/* ---- WRITE and READ of 1 B .. max, byte-accurate ---- */

static void sizes(const char *prov, uint64_t max)
{
	static const struct xfer_shape xs[] = {
		{1, 5, 7},
		{4096, 4096, 12345},
		{MiB, 3, 65536 + 3},
		{64 * MiB, 0, 65536},
		{256 * MiB, 0, 65536},
	};
	const uint64_t llen = max + 8192, tlen = max + 65536;
	struct fab_pair p;

	fab_pair_start(&p, prov, FAB_PAIR_A_UNNAMED, NULL, NULL);
	fab_pair_seg(&p, "fab-sizes", llen, tlen, 64);
	/* A WRITE's completion means the bytes are in the target's memory,
	 * not merely sent: each one is checked the moment it completes,
	 * while the target may still be asleep. */
	for (unsigned i = 0; i < 300; i++) {
		struct dp_desc d;

		p.loc[0] = (uint8_t)(i + 1);
		dp_prep_write(&d, p.lreg, 0, p.seg, i * 64, 1, i);
		run_ok(p.q, &d, DP_CQE_F_FABRIC, 5000);
		cr_assert_eq(p.tgt[i * 64], (uint8_t)(i + 1), "WRITE %u completed before it landed",
			     i);
		if (i % 50 == 49)
			sleep_ms(5); /* let the target's poller fall asleep */
	}
	fab_pair_shapes(&p, xs, sizeof(xs) / sizeof(xs[0]), max, 30000, "");
	fab_pair_stop(&p);
}

Test(fabric_transfer, tcp_sizes_1B_to_256MiB, .timeout = 90)
{
	sizes("tcp", 256 * MiB);
}

Test(fabric_transfer, shm_sizes_1B_to_64MiB)
{
	sizes("shm", 64 * MiB);
}

Test(fabric_transfer, sockets_sizes_1B_to_64MiB)
{
	sizes("sockets", 64 * MiB);
}

/* ---- 64 x 1 MiB in flight at once, over 4 queues on 2 pollers ---- */

static void many_outstanding(const char *prov)
{
	static const char *const a_more[] = {"--pollers", "2", NULL};
	struct fab_pair p;

	fab_pair_start(&p, prov, FAB_PAIR_A_UNNAMED, a_more, NULL);
	fab_pair_many(&p, "fab-many", MiB, NULL, 30000);
	fab_pair_stop(&p);
}

Test(fabric_transfer, tcp_64_in_flight_4_queues)
{
	many_outstanding("tcp");
}

Test(fabric_transfer, shm_64_in_flight_4_queues)
{
	many_outstanding("shm");
}

Test(fabric_transfer, sockets_64_in_flight_4_queues)
{
	many_outstanding("sockets");
}

/* ---- the self-loopback rule ---- */

/*
 * A segment of this same service is local however it is named (no peer,
 * our server name, an address of this host with our port, a rail suffix);
 * the segment of another service on the same host goes through the fabric,
 * also when it is named by the same host name.
 */
Test(fabric_transfer, self_loopback_is_local)
{
	static const char *const a_args[] = {"--provider", "tcp", NULL};
	static const char *const b_args[] = {"--provider", "tcp", NULL};
	char names[5][96], other[96], host[64];
	const char *self_name;
	struct dp_client *ca, *cb;
	struct dp_queue *q;
	uint8_t *loc, *mine, *theirs;
	int lreg, mreg, treg, port_a, port_b;
	struct dp_desc d;

	start_svc(&fab_svc[0], a_args);
	start_svc(&fab_svc[1], b_args);
	port_a = fab_rpc_port(&fab_svc[0]);
	port_b = fab_rpc_port(&fab_svc[1]);
	ca = connect_client(&fab_svc[0], "self");
	cb = connect_client(&fab_svc[1], "other");
	self_name = dp_server_name(ca);
	snprintf(host, sizeof(host), "%s", self_name);
	cr_assert_not_null(strrchr(host, ':'), "server name '%s' is not host:port", self_name);
	*strrchr(host, ':') = 0;
	cr_assert_eq(atoi(strrchr(self_name, ':') + 1), port_a, "server name %s, RPC port %d",
		     self_name, port_a);

	lreg = alloc_region(ca, 65536, &loc);
	mreg = alloc_region(ca, 65536, &mine);
	export_segment(ca, mreg, "fab-self", DP_ACCESS_RW);
	treg = alloc_region(cb, 65536, &theirs);
	export_segment(cb, treg, "fab-other", DP_ACCESS_RW);
	q = make_queue(ca, 16);

	snprintf(names[0], sizeof(names[0]), "%s", self_name);
	snprintf(names[1], sizeof(names[1]), "127.0.0.1:%d", port_a);
	snprintf(names[2], sizeof(names[2]), "%s@3", self_name);
	snprintf(names[3], sizeof(names[3]), "localhost:%d", port_a);
	names[4][0] = 0; /* NULL: this service */
	for (unsigned i = 0; i < 5; i++) {
		int seg = open_segment(ca, names[i][0] ? names[i] : NULL, "fab-self", DP_ACCESS_RW);

		memset(mine, 0, 65536);
		pattern_fill(loc, 4096, 40 + i);
		dp_prep_write(&d, lreg, 0, seg, 100, 4096, 40 + i);
		run_ok(q, &d, DP_CQE_F_LOCAL, 5000);
		cr_assert_eq(pattern_check(mine + 100, 4096, 40 + i), -1, "via '%s'", names[i]);
		cr_assert_eq(dp_segment_close(ca, seg), 0);
	}
	/* None of those asked anybody over the peer protocol. */
	cr_assert_not(svc_log_has(&fab_svc[0], "segment 'fab-self' on"),
		      "a name of this service was resolved through the peer RPC");

	/* Another service on the same host: the fabric, by address or by the
	 * host part both services share. */
	snprintf(other, sizeof(other), "127.0.0.1:%d", port_b);
	snprintf(names[0], sizeof(names[0]), "%s:%d", host, port_b);
	for (unsigned i = 0; i < 2; i++) {
		const char *peer = i ? names[0] : other;
		int seg = open_segment(ca, peer, "fab-other", DP_ACCESS_RW);

		memset(theirs, 0, 65536);
		pattern_fill(loc, 4096, 50 + i);
		dp_prep_write(&d, lreg, 0, seg, 200, 4096, 50 + i);
		run_ok(q, &d, DP_CQE_F_FABRIC, 5000);
		cr_assert_eq(pattern_check(theirs + 200, 4096, 50 + i), -1, "via '%s'", peer);
	}
	/* And B reaching A's segment by A's server name is the fabric too. */
	{
		struct dp_queue *qb = make_queue(cb, 16);
		int seg = open_segment(cb, self_name, "fab-self", DP_ACCESS_READ);

		pattern_fill(mine, 4096, 60);
		dp_prep_read(&d, treg, 0, seg, 0, 4096, 60);
		run_ok(qb, &d, DP_CQE_F_FABRIC, 5000);
		cr_assert_eq(pattern_check(theirs, 4096, 60), -1);
	}
	dp_close(ca);
	dp_close(cb);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
	cr_assert_eq(svc_stop(&fab_svc[1]), 0);
}

/* ---- documented errors of the fabric path ---- */

Test(fabric_transfer, errors)
{
	struct dp_queue *q;
	uint8_t *loc, *tgt;
	int lreg, treg, seg, rc;
	struct dp_desc d;
	struct dp_cqe cqe;
	struct fab_pair p;
	char peer[96];

	fab_pair_start(&p, "tcp", FAB_PAIR_A_UNNAMED, NULL, NULL);
	treg = alloc_region(p.cb, 65536, &tgt);
	export_segment(p.cb, treg, "fab-ro", DP_ACCESS_READ);
	lreg = alloc_region(p.ca, 65536, &loc);
	q = make_queue(p.ca, 16);

	rc = dp_segment_open(p.ca, p.peer_b, "no-such-segment", DP_ACCESS_READ);
	cr_assert_eq(rc, -ENOENT, "unknown name: %s", dp_strerror(rc));
	rc = dp_segment_open(p.ca, p.peer_b, "fab-ro", DP_ACCESS_RW);
	cr_assert_eq(rc, -EPERM, "RW open of a read-only export: %s", dp_strerror(rc));
	rc = dp_segment_open(p.ca, "127.0.0.1", "fab-ro", DP_ACCESS_READ);
	cr_assert_eq(rc, -EINVAL, "peer without a port: %s", dp_strerror(rc));
	snprintf(peer, sizeof(peer), "127.0.0.1:%d", fab_free_port());
	rc = dp_segment_open(p.ca, peer, "fab-ro", DP_ACCESS_READ);
	cr_assert_eq(rc, -EHOSTUNREACH, "nobody on %s: %s", peer, dp_strerror(rc));

	seg = open_segment(p.ca, p.peer_b, "fab-ro", DP_ACCESS_READ);
	pattern_fill(tgt, 65536, 7);
	dp_prep_read(&d, lreg, 0, seg, 0, 65536, 1);
	run_ok(q, &d, DP_CQE_F_FABRIC, 5000);
	cr_assert_eq(pattern_check(loc, 65536, 7), -1);

	/* A WRITE through a read handle, and ranges past the remote end. */
	dp_prep_write(&d, lreg, 0, seg, 0, 16, 2);
	submit_all(q, &d, 1, 10000);
	reap(q, &cqe, 1, 5000);
	cr_assert_eq(cqe.status, -EPERM, "WRITE via a read handle: %s", dp_strerror(cqe.status));
	dp_prep_read(&d, lreg, 0, seg, 65536 - 15, 16, 3);
	submit_all(q, &d, 1, 10000);
	reap(q, &cqe, 1, 5000);
	cr_assert_eq(cqe.status, -EFAULT, "READ past the end: %s", dp_strerror(cqe.status));
	dp_prep_read(&d, lreg, 0, seg, UINT64_MAX - 7, 16, 4);
	submit_all(q, &d, 1, 10000);
	reap(q, &cqe, 1, 5000);
	cr_assert_eq(cqe.status, -EFAULT, "offset overflow: %s", dp_strerror(cqe.status));
	cr_assert_eq(pattern_check(tgt, 65536, 7), -1, "the read-only segment changed");
	fab_pair_stop(&p);
}

/* ---- a peer SIGKILLed mid-transfer, then restarted ---- */

/* Ends B (*arg: its client, closed first). */
static void kill_b(void *arg)
{
	dp_close(*(struct dp_client **)arg);
	svc_kill(&fab_svc[1]);
}

#define KILL_TIMEOUT_MS 2000
#define KILL_SLACK_MS 1500
#define KILL_SEG (64 * MiB)

/* Starts B on `port` with a fresh 64 MiB export "victim"; returns its
 * client and the segment's memory. */
static struct dp_client *victim_start(const char *prov, const char *port, uint8_t **tgt)
{
	const char *args[] = {"--provider", prov, "--server-name", "127.0.0.1", "--rpc-port",
			      port,	    NULL};
	struct dp_client *cb;
	int treg;

	start_svc(&fab_svc[1], args);
	cb = connect_client(&fab_svc[1], "victim");
	treg = alloc_region(cb, KILL_SEG, tgt);
	export_segment(cb, treg, "victim", DP_ACCESS_RW);
	return cb;
}

static void peer_killed(const char *prov)
{
	const char *a_args[] = {
		"--provider", prov, "--server-name", "127.0.0.1", "--fabric-timeout-ms",
		"2000",	      NULL};
	struct kill_run r = {.len = MiB,
			     .inflight = 64,
			     .kill_after = 32,
			     .answer_ms = KILL_TIMEOUT_MS + KILL_SLACK_MS,
			     .kill = kill_b};
	struct dp_client *ca, *cb;
	struct dp_queue *q;
	uint8_t *loc, *home, *tgt;
	int lreg, hreg, hseg, seg, old_seg;
	char port[16], peer[64];
	struct dp_desc d;

	snprintf(port, sizeof(port), "%d", fab_free_port());
	snprintf(peer, sizeof(peer), "127.0.0.1:%s", port);
	cb = victim_start(prov, port, &tgt);
	start_svc(&fab_svc[0], a_args);
	ca = connect_client(&fab_svc[0], "survivor");
	lreg = alloc_region(ca, KILL_SEG, &loc);
	pattern_fill(loc, KILL_SEG, 77);
	hreg = alloc_region(ca, MiB, &home);
	hseg = (export_segment(ca, hreg, "home", DP_ACCESS_RW),
		open_segment(ca, NULL, "home", DP_ACCESS_RW));
	seg = open_segment(ca, peer, "victim", DP_ACCESS_RW);
	q = make_queue(ca, 128);

	/* Keep up to 64 x 1 MiB in flight; kill B once 32 have landed, then
	 * hand over 16 more for the dead peer. */
	r.q = q;
	r.lreg = lreg;
	r.seg = seg;
	r.arg = &cb;
	fab_kill_run(&r);
	cr_log_info("%s: %u ok, %u failed, last completion %.0f ms after the kill", prov, r.ok,
		    r.failed, (double)(r.t_last - r.t_kill) / 1e6);

	/* The survivor still serves local transfers. */
	pattern_fill(loc, 4096, 88);
	dp_prep_write(&d, lreg, 0, hseg, 0, 4096, 1u << 20);
	run_ok(q, &d, DP_CQE_F_LOCAL, 5000);
	cr_assert_eq(pattern_check(home, 4096, 88), -1);
	/* Nothing of the dead peer's transfers is left spinning. */
	{
		double cpu = cpu_share(fab_svc[0].pid, 500);

		cr_assert_lt(cpu, 0.5, "the idle survivor uses %.0f%% of a CPU", cpu * 100);
	}

	/* B comes back on the same port (same server name), with a new
	 * export: a new open reaches it, the old handle does not. */
	cb = victim_start(prov, port, &tgt);
	old_seg = seg;
	seg = open_segment(ca, peer, "victim", DP_ACCESS_RW);
	memset(tgt, 0, KILL_SEG);
	pattern_fill(loc, 8 * MiB, 99);
	dp_prep_write(&d, lreg, 0, seg, 4096, 8 * MiB, 1u << 21);
	run_ok(q, &d, DP_CQE_F_FABRIC, 10000);
	cr_assert_eq(pattern_check(tgt + 4096, 8 * MiB, 99), -1, "WRITE after the restart");
	pattern_fill(tgt, MiB, 111);
	dp_prep_read(&d, lreg, MiB, seg, 0, MiB, 1u << 22);
	run_ok(q, &d, DP_CQE_F_FABRIC, 10000);
	cr_assert_eq(pattern_check(loc + MiB, MiB, 111), -1, "READ after the restart");
	{
		struct dp_cqe cqe;

		dp_prep_write(&d, lreg, 0, old_seg, 0, 16, 1u << 23);
		submit_all(q, &d, 1, 10000);
		reap(q, &cqe, 1, KILL_TIMEOUT_MS + KILL_SLACK_MS);
		cr_assert_neq(cqe.status, 0, "a handle of the dead peer still works");
	}
	dp_close(ca);
	dp_close(cb);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0, "the survivor did not exit cleanly");
	cr_assert_eq(svc_stop(&fab_svc[1]), 0);
}

Test(fabric_transfer, tcp_peer_killed_mid_transfer)
{
	peer_killed("tcp");
}

Test(fabric_transfer, sockets_peer_killed_mid_transfer)
{
	peer_killed("sockets");
}

/*
 * Disabled: libfabric 1.17's shm cannot survive a peer's SIGKILL, and no
 * change of ours can make it (gdb on the survivor shows both):
 * - about one run in three the survivor's poller spins forever in
 *   fi_write -> pthread_spin_lock on the dead peer's region lock, which
 *   the peer held when it died: that poller serves nobody again;
 * - otherwise the dead peer's operations never complete, and shm returns
 *   completions in posting order (smr_progress_resp stops at the first
 *   busy one): the endpoint delivers no further completion, to any peer,
 *   and its poller never goes idle.
 * Enable it with a libfabric whose shm does better, or once fabric.c
 * reopens such an endpoint (which would still not save a stuck lock).
 */
Test(fabric_transfer, shm_peer_killed_mid_transfer, .disabled = true)
{
	peer_killed("shm");
}

/* ---- a name re-exported, a peer restarted on its port: no stale cache ---- */

/*
 * Nothing fails in between, so nothing tells A the description it resolved
 * went stale: the next open must still reach the new export (new keys) and
 * the restarted peer (new fabric addresses), and the first transfer after
 * it must succeed. Handles to the replaced export fail as after an unexport.
 */
Test(fabric_transfer, reopen_after_reexport_and_restart)
{
	char port[16], peer[64];
	const char *b_args[] = {"--provider", "tcp", "--server-name", "127.0.0.1", "--rpc-port",
				port,	      NULL};
	const char *a_args[] = {"--provider", "tcp", "--server-name", "127.0.0.1", NULL};
	struct dp_client *ca, *cb;
	struct dp_queue *q;
	uint8_t *loc, *tgt;
	int lreg, treg, seg, old = -1;
	struct dp_desc d;
	struct dp_cqe cqe;

	snprintf(port, sizeof(port), "%d", fab_free_port());
	snprintf(peer, sizeof(peer), "127.0.0.1:%s", port);
	start_svc(&fab_svc[1], b_args);
	start_svc(&fab_svc[0], a_args);
	ca = connect_client(&fab_svc[0], "reopener");
	lreg = alloc_region(ca, MiB, &loc);
	q = make_queue(ca, 16);
	for (unsigned round = 0; round < 3; round++) {
		/* Round 1: B's client left and a new one exports the name;
		 * round 2: B itself was killed and restarted on its port. */
		if (round == 2) {
			svc_kill(&fab_svc[1]);
			start_svc(&fab_svc[1], b_args);
		}
		cb = connect_client(&fab_svc[1], "exporter");
		treg = alloc_region(cb, MiB, &tgt);
		export_segment(cb, treg, "again", DP_ACCESS_RW);
		seg = open_segment(ca, peer, "again", DP_ACCESS_RW);
		pattern_fill(loc, MiB, 70 + round);
		dp_prep_write(&d, lreg, 0, seg, 0, MiB, round);
		run_ok(q, &d, DP_CQE_F_FABRIC, 5000);
		cr_assert_eq(pattern_check(tgt, MiB, 70 + round), -1, "round %u: bytes", round);
		if (round) {
			dp_prep_write(&d, lreg, 0, old, 0, 16, 100 + round);
			submit_all(q, &d, 1, 10000);
			reap(q, &cqe, 1, 5000);
			cr_assert_neq(cqe.status, 0, "round %u: the replaced handle still works",
				      round);
		}
		old = seg;
		if (round < 2)
			dp_close(cb);
	}
	dp_close(ca);
	dp_close(cb);
	cr_assert_eq(svc_stop(&fab_svc[0]), 0);
	cr_assert_eq(svc_stop(&fab_svc[1]), 0);
}
