/* fabric_failover.c - a rail cut under load (its veth end set down, or every packet dropped by a qdisc) between two dataplaned in two network namespaces joined by two veth rails (tcp): no descriptor fails, the cut rail's slices are posted again on the other, the stats show the rail taken out, then back once the link is, and used again; skipped where namespaces cannot be made. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dp_stats.h"
#include "helpers.h"

/* Namespaces dpoA-PID / dpoB-PID, veth pair i dpoaI-PID / dpobI-PID on
 * 10.(81+i).X.0/24 (the namespaces keep them apart from other suites'). */
static struct {
	char ns[2][32];
	char veth[2][2][16]; /* [pair][side] */
	char ip[2][2][16];
} net;

TestSuite(fabric_failover, .fini = netns_teardown, .timeout = 180);

static void two_rails(void)
{
	unsigned id = (unsigned)getpid() % 100000, x = (unsigned)getpid() % 250 + 1;

	if (geteuid() != 0)
		cr_skip_test("fabric_failover: needs root to create network namespaces (ip netns)");
	if (run_sh("command -v ip >/dev/null && command -v tc >/dev/null"))
		cr_skip_test("fabric_failover: no 'ip' or 'tc' command (iproute2)");
	for (unsigned i = 0; i < 2; i++) {
		snprintf(net.ns[i], sizeof(net.ns[i]), "dpo%c-%u", "AB"[i], id);
		if (netns_add(net.ns[i]))
			cr_skip_test(
				"fabric_failover: cannot make a network namespace (no "
				"CAP_SYS_ADMIN or no netns support here; the reason is above)");
	}
	for (unsigned p = 0; p < 2; p++) {
		for (unsigned i = 0; i < 2; i++) {
			snprintf(net.veth[p][i], sizeof(net.veth[p][i]), "dpo%c%u-%u", "ab"[i], p,
				 id);
			snprintf(net.ip[p][i], sizeof(net.ip[p][i]), "10.%u.%u.%u", 81 + p, x,
				 i + 1);
		}
		if (run_sh("ip link add %s type veth peer name %s", net.veth[p][0], net.veth[p][1]))
			cr_skip_test(
				"fabric_failover: cannot create a veth pair (no veth driver?)");
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

/* dataplaned in namespace i on both of its veth ends, 1 MiB slices,
 * @pollers pollers. */
static void start(unsigned i, unsigned pollers)
{
	const char *prefix[3];
	char nics[64], enter[64], np[8];
	const char *args[] = {"--provider", "tcp",     "--server-name", net.ip[0][i], "--nics",
			      nics,	    "--slice", "1048576",	"--pollers",  np,
			      NULL};

	snprintf(np, sizeof(np), "%u", pollers);
	snprintf(nics, sizeof(nics), "%s,%s", net.veth[0][i], net.veth[1][i]);
	netns_prefix(net.ns[i], enter, prefix);
	start_svc_in(&fab_svc[i], prefix, args);
}

#define SLOTS 32
#define DEPTH 16

struct load {
	struct dp_client *ca, *cb;
	struct dp_queue *q[2]; /* one per poller of A */
	unsigned nq, qin[2];
	uint8_t *loc, *tgt;
	int lreg, seg;
	uint8_t opcode;
	unsigned inflight;
	uint64_t next, done;
	uint32_t busy; /* slots of descriptors in flight */
};

/* A's client and its @nq queues (A's pollers take one each: the least
 * busy gets the next); B's client's 32 MiB export, opened by A's client
 * through B's address. READs find each slot filled with its own
 * pattern; WRITEs put the same pattern there (a slot's bytes never change,
 * so a slice that lands twice lands the same bytes). */
static void load_open(struct load *l, uint8_t opcode, unsigned nq)
{
	char peer[64];
	int treg;

	*l = (struct load){.opcode = opcode, .nq = nq};
	l->ca = connect_client(&fab_svc[0], "fo-a");
	l->cb = connect_client(&fab_svc[1], "fo-b");
	treg = alloc_region(l->cb, SLOTS * MiB, &l->tgt);
	export_segment(l->cb, treg, "failover", DP_ACCESS_RW);
	l->lreg = alloc_region(l->ca, SLOTS * MiB, &l->loc);
	for (unsigned k = 0; k < SLOTS; k++) {
		if (opcode == DP_OP_WRITE)
			pattern_fill(l->loc + k * MiB, MiB, 1000 + k);
		else
			pattern_fill(l->tgt + k * MiB, MiB, 2000 + k);
	}
	snprintf(peer, sizeof(peer), "%s:%d", net.ip[0][1], fab_rpc_port(&fab_svc[1]));
	l->seg = open_segment(l->ca, peer, "failover", DP_ACCESS_RW);
	for (unsigned j = 0; j < nq; j++)
		l->q[j] = make_queue(l->ca, 64);
}

/* Reaps what completes (30 s at most without any): each must succeed with
 * its bytes in place. */
static void reap_some(struct load *l)
{
	struct dp_cqe c[DEPTH];
	uint64_t until = now_ns() + 30000000000ull;
	unsigned j = 0;
	int got = 0;

	while (!got) {
		cr_assert_lt(now_ns(), until, "no completion in 30 s (%llu done)",
			     (unsigned long long)l->done);
		/* The queue with the most in flight, a while; the others
		 * polled. */
		for (unsigned i = 1; i < l->nq; i++)
			if (l->qin[i] > l->qin[j])
				j = i;
		got = dp_wait(l->q[j], c, DEPTH, l->nq > 1 ? 20 : 1000);
		cr_assert_geq(got, 0, "dp_wait: %s", dp_strerror(got));
		for (unsigned i = 0; !got && i < l->nq; i++) {
			got = dp_poll(l->q[i], c, DEPTH);
			cr_assert_geq(got, 0, "dp_poll: %s", dp_strerror(got));
			j = i;
		}
	}
	l->qin[j] -= (unsigned)got;
	for (int i = 0; i < got; i++) {
		unsigned k = (unsigned)(c[i].user_data % SLOTS);

		l->busy &= ~(1u << k);

		cr_assert_eq(c[i].status, 0, "descriptor %llu (%s) failed: %s",
			     (unsigned long long)c[i].user_data,
			     l->opcode == DP_OP_READ ? "READ" : "WRITE", dp_strerror(c[i].status));
		if (l->opcode == DP_OP_WRITE)
			cr_assert_eq(pattern_check(l->tgt + k * MiB, MiB, 1000 + k), -1,
				     "WRITE %llu: bytes", (unsigned long long)c[i].user_data);
		else
			cr_assert_eq(pattern_check(l->loc + k * MiB, MiB, 2000 + k), -1,
				     "READ %llu: bytes", (unsigned long long)c[i].user_data);
	}
	l->inflight -= (unsigned)got;
	l->done += (uint64_t)got;
}

/* Keeps DEPTH 1 MiB descriptors in flight until @n more completed. A
 * READ's slot is zeroed before it goes out; no two descriptors in flight
 * share one. */
static void pump(struct load *l, unsigned n)
{
	uint64_t until = l->done + n;

	while (l->done < until) {
		while (l->inflight < DEPTH) {
			/* A free slot: a descriptor stuck on a cut rail may
			 * complete after many later ones. */
			unsigned k = (unsigned)__builtin_ctz(~l->busy);
			struct dp_desc d;

			if (l->opcode == DP_OP_READ)
				memset(l->loc + k * MiB, 0, MiB);
			dp_prep_write(&d, l->lreg, k * MiB, l->seg, k * MiB, MiB,
				      l->next * SLOTS + k);
			l->busy |= 1u << k;
			d.opcode = l->opcode;
			submit_all(l->q[l->next % l->nq], &d, 1, 10000);
			l->qin[l->next % l->nq]++;
			l->next++;
			l->inflight++;
		}
		reap_some(l);
	}
}

/* Rail @r of A as poller @p counts it. */
static struct dp_stats_rail rail_at(unsigned r, unsigned p)
{
	const struct dp_stats_header *h = stats_map(&fab_svc[0]);
	const struct dp_stats_rail *s;
	struct dp_stats_rail c = {0};

	cr_assert(h, "no stats region");
	cr_assert(h->nrails > r && h->npollers > p);
	s = (const void *)((const uint8_t *)h + h->rails_off +
			   ((size_t)r * h->npollers + p) * h->rail_size);
	c.posted = __atomic_load_n(&s->posted, __ATOMIC_RELAXED);
	c.outs = __atomic_load_n(&s->outs, __ATOMIC_RELAXED);
	c.backs = __atomic_load_n(&s->backs, __ATOMIC_RELAXED);
	c.state = __atomic_load_n(&s->state, __ATOMIC_RELAXED);
	stats_unmap(h);
	return c;
}

/* Whether every poller of @np has rail @r in the state @out (out or
 * probing) or healthy (!@out). */
static bool every_poller(unsigned r, unsigned np, bool out)
{
	for (unsigned p = 0; p < np; p++)
		if ((rail_at(r, p).state != DP_STATS_RAIL_HEALTHY) != out)
			return false;
	return true;
}

/* Rail @r of A, summed over its pollers (state: the worst). */
static struct dp_stats_rail rail_of(unsigned r)
{
	const struct dp_stats_header *h = stats_map(&fab_svc[0]);
	struct dp_stats_rail sum = {0};

	cr_assert(h, "no stats region");
	cr_assert_gt(h->nrails, r);
	for (unsigned p = 0; p < h->npollers; p++) {
		const struct dp_stats_rail *s =
			(const void *)((const uint8_t *)h + h->rails_off +
				       ((size_t)r * h->npollers + p) * h->rail_size);
		uint64_t st = __atomic_load_n(&s->state, __ATOMIC_RELAXED);

		sum.posted += __atomic_load_n(&s->posted, __ATOMIC_RELAXED);
		sum.completed += __atomic_load_n(&s->completed, __ATOMIC_RELAXED);
		sum.reposted += __atomic_load_n(&s->reposted, __ATOMIC_RELAXED);
		sum.outs += __atomic_load_n(&s->outs, __ATOMIC_RELAXED);
		sum.backs += __atomic_load_n(&s->backs, __ATOMIC_RELAXED);
		sum.probes += __atomic_load_n(&s->probes, __ATOMIC_RELAXED);
		if (st > sum.state)
			sum.state = st;
		sum.weight += __atomic_load_n(&s->weight, __ATOMIC_RELAXED);
	}
	stats_unmap(h);
	return sum;
}

/*
 * Under load over both rails, the rail of veth pair 1 (`cut`: the provider
 * numbers its domains in its own order) is cut by @cut (a command run in
 * A's namespace, %s its veth end) and restored by @restore. Meanwhile: no
 * descriptor fails and every one's bytes are in place; the stats show the
 * rail taken out with slices re-posted, the load going on over the other
 * alone, then, the link back, the rail back in the stripe and carrying
 * slices again. No clock is asserted: each stage pumps until the stats show
 * it (the suite's timeout bounds a stage that never comes).
 */
static void cut_under_load(uint8_t opcode, const char *cut, const char *restore, unsigned np)
{
	struct dp_stats_rail r1, r0;
	struct load l;
	uint64_t posted1, done0, done1, backs;
	unsigned c = 2;

	two_rails();
	start(1, 1);
	start(0, np);
	cr_assert_eq(svc_rails(&fab_svc[0]), 2, "A opened %u rails, not two",
		     svc_rails(&fab_svc[0]));
	for (unsigned r = 0; r < 2; r++) {
		char prov[32], domain[64];

		svc_rail(&fab_svc[0], r, prov, sizeof(prov), domain, sizeof(domain));
		if (!strcmp(domain, net.veth[1][0]))
			c = r;
	}
	cr_assert_lt(c, 2u, "no rail of A is on %s", net.veth[1][0]);
	load_open(&l, opcode, np);

	pump(&l, 200);
	r1 = rail_of(c);
	r0 = rail_of(1 - c);
	cr_log_info("before the cut: the rail to cut carried %llu slices (weight %llu/1000), the "
		    "other %llu (%llu/1000)",
		    (unsigned long long)r1.completed, (unsigned long long)r1.weight,
		    (unsigned long long)r0.completed, (unsigned long long)r0.weight);
	cr_assert_gt(r1.completed, 5, "the cut rail carried only %llu slices before the cut",
		     (unsigned long long)r1.completed);
	/* A rail of this busy machine may be taken out for a moment (a stall
	 * of a few tens of ms) and come back, before the cut too: what the
	 * cut must show is the rail out for as long as it lasts. */

	cr_assert_eq(netns_sh(net.ns[0], cut, net.veth[1][0]), 0, "cutting the rail");
	do {
		pump(&l, 16);
		r1 = rail_of(c);
	} while (!every_poller(c, np, true));
	cr_log_info("the cut rail out after %llu descriptors: taken out %llu times in all, %llu "
		    "slices re-posted",
		    (unsigned long long)l.done, (unsigned long long)r1.outs,
		    (unsigned long long)r1.reposted);
	cr_assert_geq(r1.outs, 1, "the cut rail is out but was never taken out");
	/* Each poller judged from its own slices (nothing shared). */
	for (unsigned p = 0; p < np; p++)
		cr_assert_geq(rail_at(c, p).outs, 1, "poller %u never took the cut rail out", p);
	cr_assert_geq(r1.reposted, 1, "the cut rail was taken out with nothing re-posted");
	backs = r1.backs;
	/* The load goes on over the other rail alone: every descriptor completes
	 * while the cut rail carries nothing (a cut without a rail taken out would
	 * stall them until the fabric timeout, then fail them). */
	r0 = rail_of(1 - c);
	done0 = r0.completed;
	done1 = r1.completed;
	pump(&l, 300);
	r0 = rail_of(1 - c);
	r1 = rail_of(c);
	cr_assert_eq(r1.completed, done1, "the cut rail completed slices while cut");
	/* (descriptors in flight when done0 was read may have completed on
	 * the other rail before it) */
	cr_assert_geq(r0.completed - done0, 300 - DEPTH,
		      "the other rail carried only %llu of 300 descriptors",
		      (unsigned long long)(r0.completed - done0));
	cr_assert_eq(r1.backs, backs, "the cut rail came back while cut");
	cr_assert(every_poller(c, np, true), "the cut rail healthy while cut");

	cr_assert_eq(netns_sh(net.ns[0], restore, net.veth[1][0]), 0, "restoring the rail");
	do {
		pump(&l, 16);
		r1 = rail_of(c);
	} while (r1.backs == backs || !every_poller(c, np, false));
	cr_log_info("the cut rail back after %llu descriptors, %llu probes",
		    (unsigned long long)l.done, (unsigned long long)r1.probes);
	posted1 = r1.posted;
	pump(&l, 300);
	r1 = rail_of(c);
	cr_assert_gt(r1.posted - posted1, 10,
		     "the cut rail back, but it carried %llu slices of 300",
		     (unsigned long long)(r1.posted - posted1));
	while (l.inflight)
		reap_some(&l);
	dp_close(l.ca);
	dp_close(l.cb);
	for (unsigned i = 0; i < 2; i++)
		cr_assert_eq(svc_stop(&fab_svc[i]), 0, "service in %s did not exit cleanly",
			     net.ns[i]);
}

Test(fabric_failover, link_down_under_write_load)
{
	cut_under_load(DP_OP_WRITE, "ip link set %s down", "ip link set %s up", 1);
}

/* A's two pollers each with a queue of the load: each takes the rail out
 * on its own evidence, and back. */
Test(fabric_failover, link_down_two_pollers)
{
	cut_under_load(DP_OP_WRITE, "ip link set %s down", "ip link set %s up", 2);
}

/* Every packet of the rail dropped, the link up: netem loss 100%, or where
 * this kernel has no sch_netem a pfifo of length 0 (the same silent loss:
 * the qdisc drops what it cannot queue). */
Test(fabric_failover, loss_100pct_under_read_load)
{
	cut_under_load(DP_OP_READ,
		       "sh -c 'tc qdisc add dev %1$s root netem loss 100%% 2>/dev/null || "
		       "tc qdisc add dev %1$s root pfifo limit 0'",
		       "tc qdisc del dev %s root", 1);
}
