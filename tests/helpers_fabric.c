/* SPDX-License-Identifier: MIT */
/*
 * helpers_fabric.c - two ends of a transfer: a segment between two
 * clients (seg_pair), two services over the fabric (fab_pair) and the
 * transfers run over them (shapes, many in flight); a peer killed
 * mid-transfer (fab_kill_run).
 */
#include "helpers.h"

/* `target` exports a region of tlen as `name`; `init` allocates one of
 * llen, opens the export through `peer` and makes a queue. */
static void seg_between(struct seg_pair *p, const char *peer, const char *name, uint64_t llen,
			uint64_t tlen, uint32_t depth)
{
	p->treg = alloc_region(p->ct, tlen, &p->tgt);
	export_segment(p->ct, p->treg, name, DP_ACCESS_RW);
	p->lreg = alloc_region(p->ci, llen, &p->loc);
	p->seg = open_segment(p->ci, peer, name, DP_ACCESS_RW);
	p->q = make_queue(p->ci, depth);
}

void seg_pair_open(struct seg_pair *p, const struct svc *init, const struct svc *target,
		   const char *peer, const char *name, size_t len, uint32_t depth)
{
	p->ci = connect_client(init, "initiator");
	p->ct = connect_client(target, "target");
	seg_between(p, peer, name, len, len, depth);
}

/* args[n..] for one side of a pair: its same-host socket when asked for,
 * then its extra flags; NULL-terminated. */
static void pair_side_args(const char **args, unsigned n, bool same, const char *sock,
			   const char *const *more)
{
	if (same) {
		args[n++] = "--same-host-socket";
		args[n++] = sock;
	}
	for (; more && *more; more++) {
		cr_assert_lt(n, 31, "too many flags for one side of a pair");
		args[n++] = *more;
	}
	args[n] = NULL;
}

void fab_pair_start(struct fab_pair *p, const char *prov, unsigned flags, const char *const *a_more,
		    const char *const *b_more)
{
	/* B: --provider PROV --server-name 127.0.0.1 ...; A: the same, or
	 * only --provider PROV with FAB_PAIR_A_UNNAMED. */
	const char *args[32] = {"--provider", prov, "--server-name", "127.0.0.1"};

	memset(p, 0, sizeof(*p));
	snprintf(p->sock_a, sizeof(p->sock_a), "/tmp/dp-pair-a-%d.peer", (int)getpid());
	snprintf(p->sock_b, sizeof(p->sock_b), "/tmp/dp-pair-b-%d.peer", (int)getpid());
	pair_side_args(args, 4, flags & FAB_PAIR_SAME_B, p->sock_b, b_more);
	start_svc(&fab_svc[1], args);
	pair_side_args(args, flags & FAB_PAIR_A_UNNAMED ? 2 : 4, flags & FAB_PAIR_SAME_A, p->sock_a,
		       a_more);
	start_svc(&fab_svc[0], args);
	snprintf(p->peer_b, sizeof(p->peer_b), "127.0.0.1:%d", fab_rpc_port(&fab_svc[1]));
	p->ca = connect_client(&fab_svc[0], "initiator");
	p->cb = connect_client(&fab_svc[1], "target");
}

void fab_pair_seg(struct fab_pair *p, const char *name, uint64_t llen, uint64_t tlen,
		  uint32_t depth)
{
	struct seg_pair s = {.ci = p->ca, .ct = p->cb};

	seg_between(&s, p->peer_b, name, llen, tlen, depth);
	p->q = s.q;
	p->lreg = s.lreg;
	p->treg = s.treg;
	p->seg = s.seg;
	p->loc = s.loc;
	p->tgt = s.tgt;
	p->llen = llen;
	p->tlen = tlen;
}

void fab_pair_shapes(struct fab_pair *p, const struct xfer_shape *xs, unsigned n, uint64_t max,
		     int timeout_ms, const char *what)
{
	char w[64], r[64];

	snprintf(w, sizeof(w), "%sWRITE", what);
	snprintf(r, sizeof(r), "%sREAD", what);
	for (unsigned i = 0; i < n && xs[i].len <= max; i++) {
		uint64_t len = xs[i].len, lo = xs[i].loff, to = xs[i].toff;
		struct dp_desc d;

		cr_assert_leq(lo + len, p->llen, "shape %u outside A's region", i);
		cr_assert_leq(to + len, p->tlen, "shape %u outside B's export", i);
		/* WRITE: pattern in A's region -> B's segment. */
		guard_fill(p->tgt, p->tlen, to, len);
		pattern_fill(p->loc + lo, len, 10 + i);
		dp_prep_write(&d, p->lreg, lo, p->seg, to, len, 100 + i);
		run_ok(p->q, &d, DP_CQE_F_FABRIC, timeout_ms);
		fab_check(p->tgt + to, len, 10 + i, p->tgt, p->tgt + p->tlen, 0x5a, w);
		/* READ: another pattern in B's segment -> A's region. */
		pattern_fill(p->tgt + to, len, 20 + i);
		guard_fill(p->loc, p->llen, lo, len);
		dp_prep_read(&d, p->lreg, lo, p->seg, to, len, 200 + i);
		run_ok(p->q, &d, DP_CQE_F_FABRIC, timeout_ms);
		fab_check(p->loc + lo, len, 20 + i, p->loc, p->loc + p->llen, 0x5a, r);
	}
}

#define MANY_OPS 64
#define MANY_Q 4

/* The length of fab_pair_many's op i. */
static uint64_t many_len(uint64_t stride, uint64_t (*op_len)(unsigned i), unsigned i)
{
	return op_len ? op_len(i) : stride;
}

/* A batch of many_ops' completions: each a distinct op of it, whole,
 * through the fabric. */
static void many_check(const struct dp_cqe *cqes, unsigned n, bool *seen, uint64_t base_ud,
		       uint64_t stride, uint64_t (*op_len)(unsigned i))
{
	for (unsigned i = 0; i < n; i++) {
		uint64_t k = cqes[i].user_data - base_ud;

		cr_assert_lt(k, MANY_OPS, "unexpected user_data %llu",
			     (unsigned long long)cqes[i].user_data);
		cr_assert_not(seen[k], "user_data %llu completed twice",
			      (unsigned long long)cqes[i].user_data);
		seen[k] = true;
		cr_assert_eq(cqes[i].status, 0, "op %llu: %s", (unsigned long long)k,
			     dp_strerror(cqes[i].status));
		cr_assert_eq(cqes[i].bytes, many_len(stride, op_len, (unsigned)k));
		cr_assert_eq(cqes[i].flags & (DP_CQE_F_FABRIC | DP_CQE_F_LOCAL | DP_CQE_F_GPU),
			     DP_CQE_F_FABRIC, "flags 0x%x", cqes[i].flags);
	}
}

/* All of d[] submitted at once over the queues, then reaped and checked. */
static void many_run(struct dp_queue **q, struct dp_desc (*d)[MANY_OPS / MANY_Q], uint64_t base_ud,
		     uint64_t stride, uint64_t (*op_len)(unsigned i), int timeout_ms)
{
	struct dp_cqe cqes[MANY_OPS / MANY_Q];
	bool seen[MANY_OPS] = {0};

	for (unsigned k = 0; k < MANY_Q; k++)
		submit_all(q[k], d[k], MANY_OPS / MANY_Q, 10000);
	for (unsigned k = 0; k < MANY_Q; k++) {
		reap(q[k], cqes, MANY_OPS / MANY_Q, timeout_ms);
		many_check(cqes, MANY_OPS / MANY_Q, seen, base_ud, stride, op_len);
	}
}

void fab_pair_many(struct fab_pair *p, const char *name, uint64_t stride,
		   uint64_t (*op_len)(unsigned i), int timeout_ms)
{
	const uint64_t len = MANY_OPS * stride + 4096;
	struct dp_desc d[MANY_Q][MANY_OPS / MANY_Q];
	struct dp_queue *q[MANY_Q];

	fab_pair_seg(p, name, len, len, 64);
	q[0] = p->q;
	for (unsigned k = 1; k < MANY_Q; k++)
		q[k] = make_queue(p->ca, 64);
	/* WRITEs: op i carries pattern 1000 + i to B's offset i * stride + 17. */
	for (unsigned i = 0; i < MANY_OPS; i++) {
		uint64_t n = many_len(stride, op_len, i);

		pattern_fill(p->loc + i * stride, n, 1000 + i);
		dp_prep_write(&d[i % MANY_Q][i / MANY_Q], p->lreg, i * stride, p->seg,
			      i * stride + 17, n, 5000 + i);
	}
	many_run(q, d, 5000, stride, op_len, timeout_ms);
	for (unsigned i = 0; i < MANY_OPS; i++)
		cr_assert_eq(pattern_check(p->tgt + i * stride + 17, many_len(stride, op_len, i),
					   1000 + i),
			     -1, "WRITE %u: bytes wrong", i);
	/* READs: pattern 2000 + i back from B into A's zeroed region. */
	for (unsigned i = 0; i < MANY_OPS; i++) {
		uint64_t n = many_len(stride, op_len, i);

		pattern_fill(p->tgt + i * stride + 17, n, 2000 + i);
		dp_prep_read(&d[i % MANY_Q][i / MANY_Q], p->lreg, i * stride, p->seg,
			     i * stride + 17, n, 7000 + i);
	}
	memset(p->loc, 0, len);
	many_run(q, d, 7000, stride, op_len, timeout_ms);
	for (unsigned i = 0; i < MANY_OPS; i++)
		cr_assert_eq(
			pattern_check(p->loc + i * stride, many_len(stride, op_len, i), 2000 + i),
			-1, "READ %u: bytes wrong", i);
	for (unsigned k = 1; k < MANY_Q; k++)
		dp_queue_destroy(q[k]);
}

void fab_pair_stop(struct fab_pair *p)
{
	dp_close(p->ca);
	dp_close(p->cb);
	for (unsigned i = 0; i < 2; i++)
		if (fab_svc[i].pid > 0)
			cr_assert_eq(svc_stop(&fab_svc[i]), 0, "service %u did not exit cleanly",
				     i);
}

bool fabric_error(int status)
{
	return status == -EHOSTUNREACH || status == -ETIMEDOUT || status == -EIO ||
	       status == -ECONNRESET;
}

#define KILL_RUN_MAX 4096 /* descriptors of one run */

/* Until the kill, keeps `inflight` descriptors in flight. */
static void kill_run_fill(struct kill_run *r, unsigned reaped)
{
	unsigned limit = r->t_kill ? 0 : r->inflight;
	struct dp_desc d;

	while (r->sent - reaped < limit && r->sent < KILL_RUN_MAX) {
		uint64_t off = (r->sent % r->inflight) * r->len;

		if (r->mixed && r->sent % 2)
			dp_prep_read(&d, r->lreg, off, r->seg, off, r->len, r->sent);
		else
			dp_prep_write(&d, r->lreg, off, r->seg, off, r->len, r->sent);
		submit_all(r->q, &d, 1, 10000);
		r->sent++;
	}
}

/* Once kill_after have succeeded: the kill, then 16 WRITEs handed over
 * for the dead peer. */
static void kill_run_kill(struct kill_run *r)
{
	struct dp_desc d;

	if (r->t_kill || r->ok < r->kill_after)
		return;
	r->kill(r->arg);
	r->t_kill = now_ns();
	for (unsigned i = 0; i < 16; i++, r->sent++) {
		dp_prep_write(&d, r->lreg, 0, r->seg, 0, r->len, r->sent);
		submit_all(r->q, &d, 1, 10000);
	}
}

/* One completion of the run: of a descriptor sent and not yet answered,
 * failed only as a dead peer fails it and only after the kill. */
static void kill_run_check(struct kill_run *r, const struct dp_cqe *c, uint8_t *done)
{
	uint64_t ud = c->user_data;

	cr_assert_lt(ud, r->sent, "unknown user_data %llu", (unsigned long long)ud);
	cr_assert_not(done[ud], "user_data %llu completed twice", (unsigned long long)ud);
	done[ud] = 1;
	/* Every one through the fabric, but those refused before routing
	 * (-ECONNRESET, no path flag): a kill that lets the owner's client
	 * leave first, and a failed transfer's probe that reaches the owner
	 * in between, find the segment unexported. */
	cr_assert(c->flags & DP_CQE_F_FABRIC || c->status == -ECONNRESET, "op %llu: %s, flags %#x",
		  (unsigned long long)ud, dp_strerror(c->status), c->flags);
	if (c->status == 0) {
		r->ok++;
	} else {
		cr_assert(fabric_error(c->status), "op %llu failed with %s", (unsigned long long)ud,
			  dp_strerror(c->status));
		cr_assert(r->t_kill, "op %llu failed before the kill: %s", (unsigned long long)ud,
			  dp_strerror(c->status));
		r->failed++;
	}
	r->t_last = now_ns();
}

void fab_kill_run(struct kill_run *r)
{
	static struct dp_cqe cqes[256];
	static uint8_t done[KILL_RUN_MAX];
	unsigned reaped = 0;

	memset(done, 0, sizeof(done));
	r->sent = r->ok = r->failed = 0;
	r->t_kill = r->t_last = 0;
	for (;;) {
		uint64_t now = now_ns();
		int k;

		kill_run_fill(r, reaped);
		kill_run_kill(r);
		if (r->t_kill && reaped == r->sent)
			break;
		cr_assert(!r->t_kill || now < r->t_kill + r->answer_ms * 1000000ull,
			  "%u of %u descriptors unanswered %u ms after the peer died",
			  r->sent - reaped, r->sent, r->answer_ms);
		cr_assert(r->t_kill || r->sent < 2048, "no %u transfers in the first 2048",
			  r->kill_after);
		k = dp_wait(r->q, cqes, sizeof(cqes) / sizeof(cqes[0]), 100);
		cr_assert_geq(k, 0, "dp_wait: %s", dp_strerror(k));
		for (int i = 0; i < k; i++)
			kill_run_check(r, &cqes[i], done);
		reaped += (unsigned)k;
	}
	cr_assert_geq(r->failed, 16, "only %u of %u failed after the kill", r->failed, r->sent);
}
