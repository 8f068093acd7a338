/* SPDX-License-Identifier: MIT */
/*
 * fabric.c - the fabric engine's data path: RMA slices striped over rails,
 * bounded in flight, -FI_EAGAIN retried after progress, errors retried on
 * another rail, then reported. Rails, endpoints and registrations are
 * fabric_rail.c, peers fabric_peer.c (fabric_internal.h). See fabric.h for
 * the threading model.
 *
 * Timeouts follow progress, not size: a transfer fails with -ETIMEDOUT when
 * none of its slices has completed for --fabric-timeout-ms (its clock is
 * reset at every completed slice), and its peer is taken for lost only when
 * no slice to that peer, on any poller or rail, has completed for that long
 * while this transfer had slices out. A 64 MiB transfer over a slow link
 * thus takes as long as it takes, and one transfer stuck behind others to
 * a live peer fails alone.
 *
 * A transfer's local side is a descriptor's region, or a buffer of another
 * engine on this poller (fabric_post: stage.c's bounce buffers), which then
 * hears of the end through a callback instead of a completion.
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "clock.h"
#include "engine.h"
#include "fabric.h"
#include "fabric_internal.h"
#include "fault.h"
#include "notif.h"
#include "rpc.h"
#include "segments.h"
#include "stats.h"
#include "xfer_op.h"

struct fab_slice {
	struct fab_ctx c; /* first: libfabric hands it back; c.on_cq NULL */
	struct fab_op *op;
	uint64_t off, len;
	unsigned rail;
	unsigned tries;
	struct fab_slice *next;
};

/* One descriptor's transfer, or another engine's (fabric_post). Freed when
 * completed and no slice is out. */
struct fab_op {
	struct op_node node; /* first: its poller's list, or its pool */
	bool open;	     /* not completed yet */
	/* A descriptor's, with references on its local region (o.ra) and
	 * the segment (o.seg); fabric_post's: o.seg (a reference), o.len and
	 * o.user_data (a sequence number) only, o.q and o.ra NULL. */
	struct xfer_op o;
	uint8_t opcode;
	uint8_t *buf;		/* the local side's byte 0 */
	struct region_mrs *mrs; /* its registration on every rail */
	fab_done_fn done;	/* fabric_post's callbacks, and their argument */
	fab_done_fn release;
	void *arg;
	int done_status;
	uint64_t tgt_off;
	uint64_t next_off; /* bytes sliced so far */
	unsigned out;	   /* slices posted, not yet returned */
	unsigned next_rail;
	int status;
	uint64_t progress_ns;	 /* submitted, or its last slice completed */
	uint64_t out_since_ns;	 /* `out` went from 0 to 1 (valid while out) */
	struct fab_slice *retry; /* slices to post again */
	/* Failed on every rail, it waits for the answer to the probe of its
	 * segment (segments.h) with ticket `probe` (slice_failed); after
	 * FAB_PROBE_ROUNDS of them, a failure is final. */
	bool held;
	unsigned probes; /* rounds held so far */
	uint32_t probe;
	uint64_t held_ns; /* when it was held */
};

static uint64_t timeout_ns(void)
{
	return (uint64_t)fab_cfg.timeout_ms * 1000000u;
}

/* ---- pools (a poller's own: no lock) ---- */

/* Objects per chunk a pool grows by; the first chunks are allocated at
 * start-up, so a poller with up to this many transfers (and slices) in
 * flight never allocates on the data path. */
#define FAB_POOL_CHUNK 64

struct fab_chunk {
	struct fab_chunk *next;
	max_align_t objs[]; /* FAB_POOL_CHUNK ops or slices */
};

static void *pool_chunk(struct fab_poller *fp, size_t size)
{
	struct fab_chunk *c = malloc(sizeof(*c) + FAB_POOL_CHUNK * size);

	if (!c)
		return NULL;
	c->next = fp->chunks;
	fp->chunks = c;
	if (fp->ep[0].st)
		stats_add(&fp->ep[0].st->allocs, 1);
	return c->objs;
}

static int ops_grow(struct fab_poller *fp)
{
	struct fab_op *ops = pool_chunk(fp, sizeof(*ops));

	if (!ops)
		return -ENOMEM;
	for (unsigned i = 0; i < FAB_POOL_CHUNK; i++)
		op_pool_put(&fp->free_ops, &ops[i].node);
	return 0;
}

static int slices_grow(struct fab_poller *fp)
{
	struct fab_slice *s = pool_chunk(fp, sizeof(*s));

	if (!s)
		return -ENOMEM;
	for (unsigned i = 0; i < FAB_POOL_CHUNK; i++) {
		s[i].next = fp->free_slices;
		fp->free_slices = &s[i];
	}
	return 0;
}

int fabric_pools_init(struct fab_poller *fp)
{
	return ops_grow(fp) || slices_grow(fp) ? -ENOMEM : 0;
}

void fabric_pools_fini(struct fab_poller *fp)
{
	while (fp->chunks) {
		struct fab_chunk *c = fp->chunks;

		fp->chunks = c->next;
		free(c);
	}
	fp->free_ops = (struct op_pool){0};
	fp->free_slices = NULL;
}

/* Uninitialised: the caller fills every field. NULL when out of memory. */
static struct fab_op *op_get(struct fab_poller *fp)
{
	struct op_node *n = op_pool_take(&fp->free_ops);

	if (!n && (ops_grow(fp) || !(n = op_pool_take(&fp->free_ops))))
		return NULL;
	return (struct fab_op *)n;
}

static struct fab_slice *slice_get(struct fab_poller *fp)
{
	struct fab_slice *s = fp->free_slices;

	if (!s && (slices_grow(fp) || !(s = fp->free_slices)))
		return NULL;
	fp->free_slices = s->next;
	return s;
}

static void slice_put(struct fab_poller *fp, struct fab_slice *s)
{
	s->next = fp->free_slices;
	fp->free_slices = s;
}

/* ---- data path (poller thread) ---- */

static void op_complete(struct fab_op *op, int status)
{
	if (!op->open)
		return;
	op->open = false;
	if (op->done) {
		op->done_status = status;
		op->done(op->arg, status);
		return;
	}
	/* Every slice completed with FI_DELIVERY_COMPLETE: the bytes are
	 * visible at the target, and its owner hears of them now. */
	xfer_op_complete(NULL, &op->o, status);
}

/* Nothing of op is in the provider's hands any more: back to its pool. */
static void op_free(struct fab_poller *fp, struct fab_op *op)
{
	if (op->release)
		op->release(op->arg, op->done_status);
	xfer_op_release(&op->o);
	while (op->retry) {
		struct fab_slice *s = op->retry;

		op->retry = s->next;
		slice_put(fp, s);
	}
	op_pool_put(&fp->free_ops, &op->node);
}

int fabric_target_check(struct poller *p, struct segment *seg)
{
	struct remote_seg *rs = seg->remote;
	const char *prov;

	/* A peer known to be gone fails at once, not after the timeout, and
	 * so does a segment a probe found withdrawn (segments.h) after the
	 * descriptor was resolved (the stage engine posts later). */
	if (!p->eng[ENGINE_fabric] || rs->peer->nrails == 0 || atomic_load(&rs->peer->dead))
		return -EHOSTUNREACH;
	if (atomic_load(&seg->dead))
		return -ECONNRESET;
	/* Memory its owner stages for us (stage.c's owner protocol). */
	if (!(rs->flags & DP_RPC_F_GPU_UNREGISTERED) || rs->flags & DP_RPC_F_OWNER_STAGES)
		return 0;
	/* Its owner has no registration of it to read or write: not a
	 * missing segment nor a lost peer, a limit of its rails. */
	if (!atomic_exchange(&rs->warned, 1)) {
		prov = fabric_rail_provider(0);
		log_warn("fabric: rail 0 (%s): segment '%s' of %s is memory its owner could not "
			 "register (GPU memory without FI_HMEM on its rails, or dp_register_mem "
			 "memory) and the owner does not stage it; transfers to it fail with "
			 "ENOTSUP",
			 prov, seg->name, rs->peer->name);
	}
	return -ENOTSUP;
}

/* The rail of @op's slice number @k, of @n the peer has: round robin over
 * the rails nearest the op's GPU memory where it has any (topo.h), else
 * over them all. */
static unsigned op_rail(const struct fab_op *op, unsigned k, unsigned n)
{
	uint32_t near = op->mrs ? op->mrs->near & ((1u << n) - 1) : 0;

	if (!near)
		return k % n;
	for (k %= (unsigned)__builtin_popcount(near); k; k--)
		near &= near - 1;
	return (unsigned)__builtin_ctz(near);
}

/* Queues @op (filled in) on @p: slices go out from the next progress. */
static void op_queue(struct poller *p, struct fab_poller *fp, struct fab_op *op)
{
	op->open = true;
	op->next_rail = (unsigned)op->o.user_data;
	op->progress_ns = dp_now_ns();
	op_fifo_push(&fp->ops, &op->node);
	engine_kick(p, ENGINE_fabric);
}

static void fabric_submit(struct poller *p, const struct xfer *x)
{
	struct fab_poller *fp = p->eng[ENGINE_fabric];
	struct queue *q = x->q;
	const struct dp_desc *d = x->d;
	struct region *local = x->ra;
	struct fab_op *op;
	int rc;

	/* route() sends memory without a registration to the stage engine;
	 * what is left here without one (a file region) has no way over. */
	rc = fabric_target_check(p, x->seg);
	if (!rc && !local->eng[ENGINE_fabric])
		rc = -EHOSTUNREACH;
	/* Memory its owner stages has no keys to RMA: the stage engine's. */
	if (!rc && x->seg->remote->flags & DP_RPC_F_OWNER_STAGES)
		rc = -ENOTSUP;
	if (rc) {
		queue_complete_ns(q, d->user_data, d->submit_ns, rc, 0, DP_CQE_F_FABRIC);
		return;
	}
	if (!d->len) {
		if (x->notify)
			notif_deliver(NULL, x->seg, x->notify);
		queue_complete_ns(q, d->user_data, d->submit_ns, 0, 0, DP_CQE_F_FABRIC);
		return;
	}
	op = op_get(fp);
	if (!op) {
		queue_complete_ns(q, d->user_data, d->submit_ns, -ENOMEM, 0, 0);
		return;
	}
	*op = (struct fab_op){.opcode = d->opcode,
			      .buf = local->base + d->local_off,
			      .mrs = local->eng[ENGINE_fabric],
			      .tgt_off = d->target_off};
	/* GPU memory of ours moved by RMA (FI_HMEM) completes DP_CQE_F_GPU
	 * too, as when the stage engine moves it. */
	xfer_op_keep(&op->o, x, DP_CQE_F_FABRIC | (local->kind == REGION_CUDA ? DP_CQE_F_GPU : 0));
	op_queue(p, fp, op);
}

int fabric_post(struct poller *p, uint8_t opcode, struct segment *seg, uint64_t tgt_off, void *buf,
		struct region_mrs *mrs, uint64_t len, fab_done_fn done, fab_done_fn release,
		void *arg)
{
	struct fab_poller *fp = p->eng[ENGINE_fabric];
	struct fab_op *op;
	int rc = fabric_target_check(p, seg);

	if (rc)
		return rc;
	op = op_get(fp);
	if (!op)
		return -ENOMEM;
	/* Alive: the caller's reference, or found in this loop (QSBR). */
	atomic_fetch_add(&seg->refs, 1);
	*op = (struct fab_op){.o = {.user_data = fp->nposted++, .seg = seg, .len = len},
			      .opcode = opcode,
			      .buf = buf,
			      .mrs = mrs,
			      .done = done,
			      .release = release,
			      .arg = arg,
			      .tgt_off = tgt_off};
	op_queue(p, fp, op);
	return 0;
}

struct fid_ep *fabric_ep(struct poller *p, unsigned rail)
{
	struct fab_poller *fp = p->eng[ENGINE_fabric];

	return fp && rail < nrails ? fp->ep[rail].ep : NULL;
}

/*
 * A small WRITE of host memory: posted with FI_INJECT, so the provider takes
 * the bytes at once (its buffer, no reference to ours), with FI_COMPLETION
 * and the rail's FI_DELIVERY_COMPLETE, so that it still completes only once
 * the bytes are at the target (fi_inject_write would complete nothing).
 * GPU memory is never injected: the provider would memcpy from a device
 * pointer. A provider that refuses the flags (neither 0 nor -FI_EAGAIN) has
 * the rail's injection turned off and the slice is posted plainly.
 */
static ssize_t write_inject(struct rail *rl, struct rail_ep *e, void *buf, size_t len, void *desc,
			    fi_addr_t dest, uint64_t raddr, uint64_t key, void *ctx)
{
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct fi_rma_iov riov = {.addr = raddr, .len = len, .key = key};
	struct fi_msg_rma msg = {.msg_iov = &iov,
				 .desc = &desc,
				 .iov_count = 1,
				 .addr = dest,
				 .rma_iov = &riov,
				 .rma_iov_count = 1,
				 .context = ctx};
	ssize_t rc = fi_writemsg(e->ep, &msg, FI_INJECT | FI_COMPLETION | rl->tx_flags);

	if (rc && rc != -FI_EAGAIN) {
		log_warn("fabric: rail %ld: FI_INJECT WRITE refused (%s); small WRITEs are posted "
			 "without it",
			 (long)(rl - rails), fi_strerror((int)-rc));
		rl->inject_size = 0;
		return fi_write(e->ep, buf, len, desc, dest, raddr, key, ctx);
	}
	if (!rc && e->st)
		stats_add(&e->st->injected, 1);
	return rc;
}

/* Posts one slice; 0, -FI_EAGAIN (try later), or another error. */
static int slice_post(struct fab_poller *fp, struct fab_slice *s)
{
	struct fab_op *op = s->op;
	struct remote_seg *rs = op->o.seg->remote;
	struct rail_ep *e = &fp->ep[s->rail];
	void *buf = op->buf + s->off;
	void *desc = fi_mr_desc(op->mrs->mr[s->rail]);
	uint64_t raddr = (virt_addr ? rs->base : 0) + op->tgt_off + s->off;
	fi_addr_t dest = rs->peer->addr[s->rail];
	ssize_t rc;

	if (e->inflight >= rails[s->rail].tx_depth)
		return -FI_EAGAIN;
	if (DP_FAULT(FI_POST_EAGAIN))
		rc = -FI_EAGAIN;
	else if (DP_FAULT(FI_POST_FAIL))
		rc = -FI_EIO;
	else if (op->opcode == DP_OP_WRITE && s->len <= rails[s->rail].inject_size &&
		 (!op->o.ra || op->o.ra->kind == REGION_HOST))
		rc = write_inject(&rails[s->rail], e, buf, s->len, desc, dest, raddr,
				  rs->key[s->rail], &s->c.ctx);
	else if (op->opcode == DP_OP_WRITE)
		rc = fi_write(e->ep, buf, s->len, desc, dest, raddr, rs->key[s->rail], &s->c.ctx);
	else
		rc = fi_read(e->ep, buf, s->len, desc, dest, raddr, rs->key[s->rail], &s->c.ctx);
	if (rc) {
		if (rc == -FI_EAGAIN && e->st)
			stats_add(&e->st->eagain, 1);
		return (int)rc;
	}
	if (e->st) {
		stats_add(&e->st->posted, 1);
		if (s->tries > 1)
			stats_add(&e->st->retries, 1);
	}
	e->inflight++;
	if (!op->out++)
		op->out_since_ns = dp_now_ns();
	return 0;
}

/*
 * Rounds an op may be held for a probe (slice_failed), and how long after
 * its failure round r posts again at the earliest, the answer given: the
 * tcp rail of libfabric 1.17 (tcp;ofi_rxm) fails what is posted to a
 * connection its peer closed until it has read the close, and only then
 * connects again.
 */
#define FAB_PROBE_ROUNDS 3
static uint64_t probe_wait_ns(unsigned round)
{
	return 10000000ull << (round - 1); /* 10, 20, 40 ms */
}

static void slice_retry(struct fab_op *op, struct fab_slice *s)
{
	s->next = op->retry;
	op->retry = s;
}

/*
 * A slice that failed: again on the next rail while tries remain. Failed on
 * every rail, its op waits while the control thread asks the segment's
 * owner whether it still stands (segments.h, probes): a revoked key (the
 * owner unexported) fails a slice as a lost peer does, and tcp then
 * cancels the peer's other slices too. Until the answer, and the round's
 * wait (probe_wait_ns), no slice of the op goes out; fabric_progress then
 * posts them again, or fails the op: -ECONNRESET for a segment gone,
 * -EHOSTUNREACH for a peer that did not answer. A failure after
 * FAB_PROBE_ROUNDS answers that the segment stands takes the peer for lost.
 */
static void slice_failed(struct fab_poller *fp, struct fab_op *op, struct fab_slice *s, int err)
{
	struct peer *peer = op->o.seg->remote->peer;
	unsigned n = peer->nrails;
	bool dead = atomic_load(&op->o.seg->dead) || atomic_load(&peer->dead);

	if (op->open && s->tries < n && !dead) {
		s->tries++;
		s->rail = (s->rail + 1) % n;
		slice_retry(op, s);
		return;
	}
	if (op->open && !op->status && !dead && (op->held || op->probes < FAB_PROBE_ROUNDS)) {
		s->tries = 1;
		slice_retry(op, s);
		if (!op->held) {
			op->held = true;
			op->probes++;
			op->held_ns = dp_now_ns();
			op->probe = segment_probe_ask(op->o.seg);
		}
		return;
	}
	slice_put(fp, s);
	/* Whatever the provider said, a transfer to a peer that went away
	 * failed because it went away, and one to a segment its owner
	 * withdrew because it did. A slice that fails again after the owner
	 * said the segment stands means the peer is lost too, whatever the
	 * error: sockets reports a dead peer as a plain FI_EIO, and the
	 * peer's fabric state may be what broke. */
	if (atomic_load(&peer->dead))
		err = -EHOSTUNREACH;
	else if (atomic_load(&op->o.seg->dead))
		err = -ECONNRESET;
	else if (op->open)
		fabric_peer_lost(peer);
	if (!op->status)
		op->status = err;
}

/* A held op: the probe's answer, if it came (slice_failed). */
static void op_probe_check(struct fab_op *op)
{
	if (atomic_load(&op->o.seg->remote->peer->dead))
		op->status = -EHOSTUNREACH;
	else if (atomic_load(&op->o.seg->dead))
		op->status = -ECONNRESET;
	else if (!segment_probe_answered(op->o.seg, op->probe) ||
		 dp_now_ns() - op->held_ns < probe_wait_ns(op->probes))
		return;
	op->held = false;
}

int fabric_errno(int fi_err)
{
	switch (fi_err) {
	case FI_ETIMEDOUT:
		return -ETIMEDOUT;
	case FI_EHOSTUNREACH:
	case FI_ECONNREFUSED:
	case FI_ECONNRESET:
	case FI_ECONNABORTED:
	case FI_ENOTCONN:
	case FI_EADDRNOTAVAIL:
	/* tcp cancels what is in flight on a connection its peer closed;
	 * our own shutdown cancels through fabric_cancel_all, not the CQ. */
	case FI_ECANCELED:
		return -EHOSTUNREACH;
	default:
		return -EIO;
	}
}

/* A slice the CQ reported failed (fi_cq_readerr's @fi_err). */
static void slice_cq_error(struct fab_poller *fp, struct rail_ep *e, unsigned rail,
			   struct fab_slice *s, int fi_err)
{
	struct fab_op *op = s->op;
	int code = fabric_errno(fi_err);

	e->inflight--;
	op->out--;
	if (e->st)
		stats_add(&e->st->errors, 1);
	log_debug("fabric: slice on rail %u failed: %s", rail, fi_strerror(fi_err));
	slice_failed(fp, op, s, code);
}

static int reap(struct poller *p, struct fab_poller *fp)
{
	struct fi_cq_entry ents[32];
	uint64_t t = 0;
	int done = 0;

	for (unsigned r = 0; r < nrails; r++) {
		struct rail_ep *e = &fp->ep[r];
		ssize_t n;

		while ((n = fi_cq_read(e->cq, ents, 32)) > 0) {
			for (ssize_t i = 0; i < n; i++) {
				struct fab_slice *s = ents[i].op_context;

				if (s->c.on_cq) {
					s->c.on_cq(p, &s->c, 0);
					continue;
				}
				if (DP_FAULT(FI_CQ_ERR)) {
					slice_cq_error(fp, e, r, s, FI_EIO);
					continue;
				}
				/* Progress: the op's and its peer's timeout
				 * clocks start again. */
				if (!t)
					t = dp_now_ns();
				e->inflight--;
				s->op->out--;
				s->op->progress_ns = t;
				fabric_peer_progress(s->op->o.seg->remote->peer, t);
				if (e->st) {
					stats_add(&e->st->completed, 1);
					stats_add(&e->st->bytes, s->len);
				}
				slice_put(fp, s);
			}
			done += (int)n;
		}
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};

			if (fi_cq_readerr(e->cq, &err, 0) == 1 && err.op_context) {
				struct fab_ctx *c = err.op_context;

				if (c->on_cq)
					c->on_cq(p, c, err.err);
				else
					slice_cq_error(fp, e, r, err.op_context, err.err);
				done++;
			}
		}
	}
	return done;
}

/* Slices what is left of op and posts while endpoints have room. */
static int op_post(struct fab_poller *fp, struct fab_op *op)
{
	struct peer *peer = op->o.seg->remote->peer;
	unsigned n = peer->nrails;
	int posted = 0, rc;

	if (!op->retry && op->next_off == op->o.len)
		return 0;
	/* Found gone since it was queued (another transfer's failure, a
	 * probe's answer): what is left never goes out. */
	if (atomic_load(&peer->dead) || atomic_load(&op->o.seg->dead)) {
		op->status = atomic_load(&peer->dead) ? -EHOSTUNREACH : -ECONNRESET;
		return 0;
	}

	while (op->retry && op->open && !op->held) {
		struct fab_slice *s = op->retry;

		rc = slice_post(fp, s);
		if (rc == -FI_EAGAIN)
			return posted;
		op->retry = s->next;
		if (rc) {
			slice_failed(fp, op, s, fabric_errno((int)-rc));
			continue;
		}
		posted++;
	}
	while (op->next_off < op->o.len && op->open && !op->status && !op->held) {
		struct fab_slice *s = slice_get(fp);
		uint64_t len = op->o.len - op->next_off;

		if (!s) {
			op->status = -ENOMEM;
			break;
		}
		if (len > fab_cfg.slice)
			len = fab_cfg.slice;
		*s = (struct fab_slice){.op = op,
					.off = op->next_off,
					.len = len,
					.rail = op_rail(op, op->next_rail, n),
					.tries = 1};
		rc = slice_post(fp, s);
		if (rc == -FI_EAGAIN) {
			slice_put(fp, s);
			return posted;
		}
		op->next_off += len;
		op->next_rail++;
		if (rc) {
			slice_failed(fp, op, s, fabric_errno((int)-rc));
			continue;
		}
		posted++;
	}
	return posted;
}

/* Nothing more will be posted: every slice went out, or the op failed or
 * completed. Slices of a failed op still waiting for their retry are never
 * posted (op_post skips it; op_free frees them): waiting for them would
 * keep the op, and its completion, until the timeout, and after it forever. */
static bool op_finished_posting(const struct fab_op *op)
{
	return op->status || !op->open || (!op->retry && op->next_off == op->o.len);
}

/* Since when op has made no progress: its submission or its last completed
 * slice, or, when later, the moment its slices went out after none was
 * (so that a timed-out op with slices out had them out the whole time). */
static uint64_t op_stalled_since(const struct fab_op *op)
{
	if (op->out && op->out_since_ns > op->progress_ns)
		return op->out_since_ns;
	return op->progress_ns;
}

/*
 * None of op's slices has completed for the timeout: it fails with
 * -ETIMEDOUT. Its peer is lost only on evidence: op had slices out for the
 * whole timeout (op_stalled_since) and no slice to the peer completed
 * anywhere meanwhile, or, when op could not even send one, the peer's RPC
 * port does not answer a probe. A peer that keeps completing other slices
 * (other transfers, other pollers, other rails) is slow or busy, not gone:
 * only this transfer fails, and the next ones are still sent.
 */
static void op_timed_out(struct fab_op *op, uint64_t t)
{
	struct peer *peer = op->o.seg->remote->peer;
	bool stalled = fabric_peer_stalled(peer, t, timeout_ns());

	if (op->out && stalled) {
		/* Once per peer, not once per transfer. */
		if (!atomic_load(&peer->dead))
			log_warn("fabric: no slice to %s completed for %u ms; transfer timed out",
				 peer->name, fab_cfg.timeout_ms);
		fabric_peer_lost(peer);
	} else if (stalled && !atomic_load(&peer->dead)) {
		/* Nothing to it completed anywhere, but this one had nothing
		 * out to tell by: a provider whose connection to the peer
		 * never completes (a stopped process, a dead port) sends no
		 * slice. Its RPC port is asked (segments.h, probes); no
		 * answer takes the peer for lost. */
		log_debug("fabric: transfer to %s sent nothing for %u ms; asking the peer",
			  peer->name, fab_cfg.timeout_ms);
		(void)segment_probe_ask(op->o.seg);
	} else {
		/* Slices to it completed meanwhile (other transfers, pollers
		 * or rails). */
		log_debug("fabric: transfer to %s made no progress for %u ms; no evidence that "
			  "the peer is lost, it is kept",
			  peer->name, fab_cfg.timeout_ms);
	}
	op_complete(op, -ETIMEDOUT);
}

/*
 * Whether a CQ wait fd of @fp is readable: its provider has bytes for it on
 * a socket (providers with wait fds: tcp, sockets). Poller thread.
 */
static bool wait_fds_ready(const struct fab_poller *fp)
{
	struct pollfd pfd[DP_MAX_RAILS];
	nfds_t n = 0;

	for (unsigned r = 0; r < nrails; r++)
		if (fp->ep[r].wait_fd >= 0)
			pfd[n++] = (struct pollfd){.fd = fp->ep[r].wait_fd, .events = POLLIN};
	return n && poll(pfd, n, 0) > 0;
}

/*
 * Whether peers' RMA into @fp's endpoints (poller 0's) was carried out since
 * the last look, by the provider counters of rails without wait fds (shm:
 * its progress runs inside our fi_cq_read, and nothing else tells us that
 * a read served a peer). Poller thread.
 */
static bool target_moved(struct fab_poller *fp)
{
	bool moved = false;

	for (unsigned r = 0; r < nrails; r++) {
		struct rail_ep *e = &fp->ep[r];
		uint64_t v;

		if (!e->rma_cntr)
			continue;
		v = fi_cntr_read(e->rma_cntr);
		if (v != e->rma_seen) {
			e->rma_seen = v;
			moved = true;
		}
	}
	return moved;
}

static int fabric_progress(struct poller *p)
{
	struct fab_poller *fp = p->eng[ENGINE_fabric];
	struct op_node *n, *prev = NULL;
	uint64_t t;
	bool idle, target, woke;
	int work;

	if (!fp)
		return 0;
	/*
	 * Poller 0's endpoints are those peers target (fabric.h). A peer's
	 * RMA into them completes nothing here, so reading the CQs that moved
	 * it counts as no work, and poller 0 went to sleep --spin-us after
	 * its own last transfer even while a peer streamed WRITEs into it:
	 * each small WRITE then waited for a scheduler wake-up of the target
	 * poller. With nothing of its own in flight, poller 0 looks at its CQs'
	 * wait fds before reading the CQs: bytes that were waiting are
	 * target-side work, and it keeps spinning. Readiness still there after
	 * the read (not the provider's to consume) is not counted, so that it
	 * cannot keep the poller awake. One poll(2) every 16 such calls, only
	 * while no engine of the poller has work (a busy poller does not sleep
	 * anyway): the loop stays a few hundred nanoseconds for the poller's
	 * local queues, and 16 loops are far inside --spin-us.
	 */
	woke = p->timed_wake;
	p->timed_wake = false;
	idle = p->idx == 0 && op_fifo_empty(&fp->ops) && !(p->active & ~(1u << ENGINE_fabric)) &&
	       (!(++fp->idle_ticks & 15) || woke);
	target = idle && wait_fds_ready(fp);
	work = reap(p, fp);
	target = target && !work && !wait_fds_ready(fp);
	/*
	 * shm has no wait fd that a peer's RMA makes readable: its target side
	 * moves only inside our fi_cq_read (reap), and its counters say when
	 * it did. Counted as work, so that poller 0 keeps spinning while a
	 * peer writes into it; before, it slept through each of a peer's
	 * WRITEs until its 1 ms cap (fabric_sleep_cap_ms): every 64 B WRITE
	 * over shm took a millisecond.
	 */
	if (idle && !work && !target)
		target = target_moved(fp);
	if (target) {
		/* After a sleep the cap ended: a peer waited for our timer. */
		stats_fabric_target(p, woke);
		work = 1;
	}
	if (op_fifo_empty(&fp->ops))
		return work;
	/* Timeouts are checked once a millisecond, not per loop. */
	t = dp_now_ns();
	if (t - fp->last_timeout_scan < 1000000u)
		t = 0;
	else
		fp->last_timeout_scan = t;
	while ((n = op_fifo_after(&fp->ops, prev))) {
		struct fab_op *op = (struct fab_op *)n;

		if (op->held)
			op_probe_check(op);
		if (op->open && !op->status && !op->held)
			work += op_post(fp, op);
		if (t && op->open && op_stalled_since(op) + timeout_ns() < t)
			op_timed_out(op, t);
		if (op_finished_posting(op) && !op->out) {
			op_complete(op, op->status);
			op_fifo_unlink(&fp->ops, prev, n);
			op_free(fp, op);
			work++;
			continue;
		}
		prev = n;
	}
	return work;
}

static bool fabric_busy(const struct poller *p)
{
	const struct fab_poller *fp = p->eng[ENGINE_fabric];

	return fp && !op_fifo_empty(&fp->ops);
}

static int fabric_wait_fds(struct poller *p, int *fds, int max)
{
	struct fab_poller *fp = p->eng[ENGINE_fabric];
	int n = 0;

	for (unsigned r = 0; fp && r < nrails && n < max; r++)
		if (fp->ep[r].wait_fd >= 0)
			fds[n++] = fp->ep[r].wait_fd;
	return n;
}

static int fabric_sleep_cap_ms(void)
{
	for (unsigned r = 0; r < nrails; r++)
		if (rails[r].poke)
			return 1;
	return -1;
}

static int fabric_trywait(struct poller *p)
{
	struct fab_poller *fp = p->eng[ENGINE_fabric];

	if (!fp)
		return 0;
	for (unsigned r = 0; r < nrails; r++) {
		struct fid *fid = &fp->ep[r].cq->fid;

		/* fi_trywait: 0 when nothing is pending and the fd will
		 * signal what arrives next. Each rail has its own fabric. */
		if (fp->ep[r].wait_fd >= 0 && fi_trywait(rails[r].fabric, &fid, 1))
			return -EAGAIN;
	}
	return 0;
}

static void fabric_cancel_all(struct poller *p)
{
	struct fab_poller *fp = p->eng[ENGINE_fabric];
	uint64_t until = dp_now_ns() + 2000000000ull;

	if (!fp)
		return;
	for (struct op_node *n = fp->ops.head; n; n = n->next)
		op_complete((struct fab_op *)n, -ECANCELED);
	/* Let posted slices come back (bounded) so their memory is not in
	 * the provider's hands when the endpoints close. */
	while (!op_fifo_empty(&fp->ops) && dp_now_ns() < until)
		fabric_progress(p);
}

const struct engine fabric_engine = {
	.name = "fabric",
	.init = fabric_init,
	.fini = fabric_fini,
	.submit = fabric_submit,
	.progress = fabric_progress,
	.busy = fabric_busy,
	.poll_always = true,
	.wait_fds = fabric_wait_fds,
	.trywait = fabric_trywait,
	.sleep_cap_ms = fabric_sleep_cap_ms,
	.cancel_all = fabric_cancel_all,
	.region_open = fabric_region_register,
	.region_close = fabric_region_deregister,
	.segment_export = fabric_export_register,
	.segment_unexport = fabric_export_deregister,
};
