/* SPDX-License-Identifier: MIT */
/*
 * fabric.c - the fabric engine's data path: RMA slices striped over rails
 * by their measured throughput, bounded in flight, -FI_EAGAIN retried after
 * progress, errors retried on another rail, then reported; a rail whose
 * slices stop completing taken out of its peer's stripe, its slices posted
 * again on the others, and back once it answers ("rail health" below).
 * Rails, endpoints and registrations are fabric_rail.c, peers fabric_peer.c
 * (fabric_internal.h). See fabric.h for the threading model.
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

/*
 * One post of some bytes of an op: the context libfabric holds from the
 * post until its completion (or error) is read, and never longer. The same
 * bytes may be out twice (rail health below): a slice of a rail taken out
 * gets a twin on a healthy rail; the first of the two to complete does the
 * bytes' part, and the other becomes an orphan, which completes nothing of
 * its op when it returns but keeps the op, and so the op's references,
 * until it does.
 */
struct fab_slice {
	struct fab_ctx c; /* first: libfabric hands it back; c.on_cq NULL */
	struct fab_op *op;
	uint64_t off, len;
	unsigned rail;
	unsigned tries;
	uint64_t post_ns;
	struct peer_health *ph;		  /* counted in while out; NULL: untracked */
	struct fab_slice *twin;		  /* the other post of these bytes, both live */
	struct fab_slice *pnext, **pprev; /* the op's posts out (op->posted) */
	bool out;			  /* in the provider's hands */
	bool orphan;			  /* its bytes were done by its twin */
	bool probe;			  /* an 8-byte READ into the poller's scratch */
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
	uint64_t next_off;	  /* bytes sliced so far */
	unsigned out;		  /* posts out, orphans included */
	unsigned orphans;	  /* of them, orphans (nothing of op waits on them) */
	unsigned pending;	  /* slices cut whose bytes are not done yet */
	struct fab_slice *posted; /* the posts out */
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
	if (ops_grow(fp) || slices_grow(fp))
		return -ENOMEM;
	/* Probes READ into it (rail health); a page, registered like a
	 * region on every rail. */
	if (posix_memalign((void **)&fp->scratch, 4096, 4096))
		return -ENOMEM;
	fp->scratch_mrs = fabric_mem_register(fp->scratch, 4096);
	return fp->scratch_mrs ? 0 : -ENOMEM;
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
	fabric_mem_deregister(fp->scratch_mrs);
	fp->scratch_mrs = NULL;
	free(fp->scratch);
	fp->scratch = NULL;
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

/* ---- rail health (poller thread) ----
 *
 * A rail that stops carrying packets says nothing: tcp reports nothing until
 * its connection times out (minutes), EFA's SRD retries inside the NIC. What
 * the data path does see is when each post completes. Per peer and rail,
 * each poller keeps what its own slices took (struct rail_health): the
 * smoothed time per completed slice while the rail was busy, and the bytes
 * per busy second, its measured throughput. A rail with posts out none of
 * which has completed for FAB_STALL_GAPS times the slowest healthy rail's
 * time per slice to that peer, or twice the longest gap a healthy rail
 * showed lately (up to FAB_STALL_LEARNED_MAX_NS; stall_deadline: at least
 * FAB_STALL_MIN_NS, at most half the fabric timeout), while another rail to the same peer completed
 * meanwhile or had nothing out (every new slice went to the stalled one),
 * is taken out of that peer's stripe: its posts of open transfers get twins
 * on the healthy rails (RMA READs and WRITEs of the same bytes to the same
 * addresses are idempotent), and new slices avoid it. With every rail
 * stalled (the peer, not a rail) nothing is taken out and the fabric
 * timeout decides, as before; nor is the last rail in the stripe.
 *
 * What libfabric does with the posts left on the dead rail: nothing we can
 * stop. A posted operation owns its context and its buffer until its
 * completion or error is read from the CQ, or its endpoint is closed; there
 * is no cancel for RMA on these providers (fi_cancel is for receives), and
 * tcp may hand the bytes to the kernel long before they arrive, so a post
 * may still land when the link comes back, seconds later. Hence: every
 * post is a struct fab_slice of its own (a twin is never the same context);
 * an op keeps its references (the local region, the segment) until every
 * post of it returned (op->out, orphans included), so the provider never
 * touches memory that was freed or deregistered; the client's completion
 * (and its notification, sent once with it) comes as soon as every slice's
 * bytes are done once (op->pending). A post that returns after its twin
 * did the bytes is an orphan: it is counted and dropped.
 * What a late orphan still does is land its bytes a second time: the same
 * bytes, unless the initiator's buffer (WRITE) or the target's range (READ)
 * changed since the descriptor completed (docs/reliability.md says what
 * that means for a client that reuses a buffer at once).
 *
 * A rail taken out is probed with the traffic to its peer: at most one probe
 * out per rail, every FAB_PROBE_EVERY_NS, an 8-byte READ of the bytes of a
 * new slice into the poller's scratch page (never the client's memory). The
 * first post on the rail that completes, probe or a late one, brings it
 * back into the stripe.
 *
 * New slices go to the healthy rails in proportion to their measured
 * throughput (pick_rail). A rail at a tenth of the others' speed so carries
 * a tenth as much, and does not bound the transfer.
 */
#define FAB_STALL_GAPS 8
#define FAB_STALL_MIN_NS 30000000ull
/* What the longest gaps lately may add: past it, a rail that completes
 * nothing while another completes is taken out however noisy the host. */
#define FAB_STALL_LEARNED_MAX_NS 120000000ull
#define FAB_PROBE_EVERY_NS 50000000ull

/* The poller's slot for @pr: its own, or the least recently used of four
 * with nothing out (NULL when all four have posts out: untracked). */
static struct peer_health *health_of(struct fab_poller *fp, const struct peer *pr)
{
	unsigned h = (unsigned)(((uintptr_t)pr >> 4) * 0x9E3779B97F4A7C15ull >> 58);
	struct peer_health *victim = NULL;

	for (unsigned i = 0; i < 4; i++) {
		struct peer_health *ph = &fp->health[(h + i) % FAB_HEALTH_SLOTS];

		if (ph->peer == pr)
			return ph;
		if (!ph->out && (!victim || ph->used_ns < victim->used_ns))
			victim = ph;
	}
	if (victim)
		*victim = (struct peer_health){.peer = pr};
	return victim;
}

static uint64_t rail_measured_bw(const struct rail_health *rh)
{
	return rh->ew_ns ? (uint64_t)((double)rh->ew_bytes * 1e9 / (double)rh->ew_ns) : 0;
}

/* Rail @r's throughput to the peer, bytes/s: measured, or, until it is,
 * the best of its other rails (1 GB/s when none is measured). */
static uint64_t rail_bw(const struct peer_health *ph, unsigned r, unsigned n)
{
	uint64_t bw = rail_measured_bw(&ph->r[r]);

	if (bw)
		return bw;
	for (unsigned q = 0; q < n; q++)
		if (rail_measured_bw(&ph->r[q]) > bw)
			bw = rail_measured_bw(&ph->r[q]);
	return bw ? bw : 1000000000ull;
}

/*
 * The rail of a slice of @op: among the peer's healthy rails (the nearest
 * its GPU memory where any of them is), by smooth weighted round robin
 * (nginx's): each rail's credit grows by its measured throughput at every
 * pick, the rail with the most credit gets the slice and gives back the
 * sum. Each rail so gets its throughput's share of the slices whatever the
 * queue depth, interleaved, and, with at least a 16th of the fastest's
 * share, a slow rail is measured all along. A full endpoint is passed over
 * while another has room. Untracked (@ph NULL),
 * or no rail healthy: round robin from @k (op_rail).
 */
static unsigned pick_rail(const struct fab_poller *fp, struct peer_health *ph,
			  const struct fab_op *op, unsigned n, unsigned k)
{
	uint32_t near = op->mrs ? op->mrs->near & ((1u << n) - 1) : 0, ok = 0;
	int64_t total = 0, w[DP_MAX_RAILS], wmax = 0;
	int best = -1;
	bool best_full = true;

	if (!ph)
		return op_rail(op, k, n);
	for (unsigned r = 0; r < n; r++)
		if (ph->r[r].state == DP_STATS_RAIL_HEALTHY)
			ok |= 1u << r;
	if (near && (ok & near))
		ok &= near;
	if (!ok)
		return op_rail(op, k, n);
	for (unsigned r = 0; r < n; r++) {
		w[r] = (int64_t)(rail_bw(ph, r, n) >> 10) + 1;
		if ((ok & (1u << r)) && w[r] > wmax)
			wmax = w[r];
	}
	for (unsigned i = 0; i < n; i++) {
		unsigned r = (k + i) % n;
		bool full = fp->ep[r].inflight >= rails[r].tx_depth;

		if (!(ok & (1u << r)))
			continue;
		/* At least a 16th of the fastest's: a rail measured slow
		 * keeps getting slices, so that it is measured again. */
		if (w[r] < wmax / 16)
			w[r] = wmax / 16;
		ph->credit[r] += w[r];
		total += w[r];
		if (best < 0 || (best_full && !full) ||
		    (best_full == full && ph->credit[r] > ph->credit[best])) {
			best = (int)r;
			best_full = full;
		}
	}
	ph->credit[best] -= total;
	/* Weights change with every sample: a rail picked while another's
	 * weight was high would owe that for as many picks, starved. */
	for (unsigned r = 0; r < n; r++) {
		if (ph->credit[r] > total)
			ph->credit[r] = total;
		else if (ph->credit[r] < -total)
			ph->credit[r] = -total;
	}
	return (unsigned)best;
}

/* The stats gauges of every rail: the worst state toward the peers this
 * poller tracks, the weight and throughput toward the one it sent to last. */
static void health_gauges(struct fab_poller *fp)
{
	const struct peer_health *last = NULL;
	uint64_t state[DP_MAX_RAILS] = {0}, sum = 0;

	for (unsigned i = 0; i < FAB_HEALTH_SLOTS; i++) {
		const struct peer_health *ph = &fp->health[i];

		if (!ph->peer)
			continue;
		if (!last || ph->used_ns > last->used_ns)
			last = ph;
		for (unsigned r = 0; r < nrails; r++)
			if (ph->r[r].state > state[r])
				state[r] = ph->r[r].state;
	}
	for (unsigned r = 0; last && r < last->peer->nrails; r++)
		if (last->r[r].state == DP_STATS_RAIL_HEALTHY)
			sum += rail_bw(last, r, last->peer->nrails);
	for (unsigned r = 0; r < nrails; r++) {
		struct dp_stats_rail *st = fp->ep[r].st;
		uint64_t bw = 0, w = 0;

		if (!st)
			continue;
		if (last && r < last->peer->nrails) {
			bw = rail_measured_bw(&last->r[r]);
			if (last->r[r].state == DP_STATS_RAIL_HEALTHY && sum)
				w = rail_bw(last, r, last->peer->nrails) * 1000 / sum;
		}
		stats_set(&st->state, state[r]);
		stats_set(&st->weight, w);
		stats_set(&st->bw, bw);
	}
}

static const char *rail_domain(unsigned r)
{
	return rails[r].info->domain_attr->name;
}

static void slice_retry(struct fab_op *op, struct fab_slice *s);

/* Rail @r of @ph stalled since @since while rail @by completed: out of the
 * peer's stripe, and twins of its posts of open transfers queued. */
static void rail_take_out(struct fab_poller *fp, struct peer_health *ph, unsigned r, unsigned by,
			  uint64_t now, uint64_t since)
{
	struct rail_health *rh = &ph->r[r];
	unsigned moved = 0;

	rh->state = DP_STATS_RAIL_OUT;
	rh->out_ns = now;
	rh->stall_since_ns = since;
	rh->state_ns = now;
	for (struct op_node *n = fp->ops.head; n; n = n->next) {
		struct fab_op *op = (struct fab_op *)n;

		if (!op->open || op->o.seg->remote->peer != ph->peer)
			continue;
		for (struct fab_slice *s = op->posted; s; s = s->pnext) {
			struct fab_slice *t;

			if (s->rail != r || s->orphan || s->probe || s->twin)
				continue;
			t = slice_get(fp);
			if (!t)
				break;
			*t = (struct fab_slice){.op = op,
						.off = s->off,
						.len = s->len,
						.rail = r,
						.tries = s->tries};
			t->twin = s;
			s->twin = t;
			slice_retry(op, t);
			moved++;
		}
	}
	if (fp->ep[r].st) {
		stats_add(&fp->ep[r].st->outs, 1);
		stats_add(&fp->ep[r].st->reposted, moved);
	}
	log_warn("fabric: rail %u (%s) to %s: no slice completed for %llu ms while rail %u (%s) "
		 "completed; taken out of the stripe, %u of its slices posted again on the others",
		 r, rail_domain(r), ph->peer->name, (unsigned long long)((now - since) / 1000000),
		 by, rail_domain(by), moved);
	health_gauges(fp);
}

/* The longest gap between completions of @rh lately (worst_ns). */
static uint64_t worst_recent(const struct rail_health *rh, uint64_t now)
{
	uint64_t e = now >> 32;

	if (e == rh->worst_epoch)
		return rh->worst_ns[0] > rh->worst_ns[1] ? rh->worst_ns[0] : rh->worst_ns[1];
	return e == rh->worst_epoch + 1 ? rh->worst_ns[0] : 0;
}

static void worst_note(struct rail_health *rh, uint64_t gap, uint64_t now)
{
	uint64_t e = now >> 32;

	if (e != rh->worst_epoch) {
		rh->worst_ns[1] = e == rh->worst_epoch + 1 ? rh->worst_ns[0] : 0;
		rh->worst_ns[0] = 0;
		rh->worst_epoch = e;
	}
	if (gap > rh->worst_ns[0])
		rh->worst_ns[0] = gap;
}

/*
 * A rail taken out that answers within FAB_HICCUP_NS stalled, it did not
 * die: its stall counts among its gaps (worst_note), so that the deadline
 * to that peer grows past such stalls for a few seconds instead of taking
 * the rail out at every one of them.
 */
#define FAB_HICCUP_NS 250000000ull

static void rail_back(struct fab_poller *fp, struct peer_health *ph, unsigned r, uint64_t now)
{
	struct rail_health *rh = &ph->r[r];

	rh->state = DP_STATS_RAIL_HEALTHY;
	ph->credit[r] = 0;
	if (now - rh->out_ns < FAB_HICCUP_NS)
		worst_note(rh, now - rh->stall_since_ns, now);
	if (fp->ep[r].st)
		stats_add(&fp->ep[r].st->backs, 1);
	log_info("fabric: rail %u (%s) to %s answers again after %llu ms out; back in the stripe",
		 r, rail_domain(r), ph->peer->name,
		 (unsigned long long)((now - rh->out_ns) / 1000000));
	health_gauges(fp);
}

/* The deadline of a rail of @ph with posts out and none completing: 8
 * times the slowest healthy rail's smoothed time per slice, twice the
 * longest gap any healthy rail showed lately (up to
 * FAB_STALL_LEARNED_MAX_NS), at least FAB_STALL_MIN_NS, at most half the
 * fabric timeout. */
static uint64_t stall_deadline(const struct peer_health *ph, unsigned n, uint64_t now)
{
	uint64_t g = 0, w = 0, d;

	for (unsigned r = 0; r < n; r++) {
		if (ph->r[r].state != DP_STATS_RAIL_HEALTHY)
			continue;
		if (ph->r[r].gap_ns > g)
			g = ph->r[r].gap_ns;
		if (worst_recent(&ph->r[r], now) > w)
			w = worst_recent(&ph->r[r], now);
	}
	d = FAB_STALL_GAPS * g;
	if (2 * w > FAB_STALL_LEARNED_MAX_NS)
		w = FAB_STALL_LEARNED_MAX_NS / 2;
	if (d < 2 * w)
		d = 2 * w;
	if (d < FAB_STALL_MIN_NS)
		d = FAB_STALL_MIN_NS;
	if (d > timeout_ns() / 2)
		d = timeout_ns() / 2;
	return d;
}

/* Every rail with posts out that stalled while another completed, or
 * stood idle: out. */
static void health_scan(struct fab_poller *fp, uint64_t now)
{
	for (unsigned i = 0; i < FAB_HEALTH_SLOTS; i++) {
		struct peer_health *ph = &fp->health[i];
		unsigned n;

		if (!ph->peer || !ph->out)
			continue;
		n = ph->peer->nrails;
		for (unsigned r = 0; r < n; r++) {
			const struct rail_health *rh = &ph->r[r];
			uint64_t since = rh->last_done_ns > rh->busy_since_ns ? rh->last_done_ns
									      : rh->busy_since_ns;

			/* (since may be after now: a post of this loop) */
			if (rh->state != DP_STATS_RAIL_HEALTHY || !rh->out || since >= now ||
			    now - since < stall_deadline(ph, n, now))
				continue;
			/* Evidence: another rail in the stripe completed since,
			 * or has nothing out to tell by (every new slice went
			 * to the stalled rail, whose slices then fill the
			 * queues: its twins find out). */
			for (unsigned q = 0; q < n; q++) {
				if (q == r || ph->r[q].state != DP_STATS_RAIL_HEALTHY ||
				    (ph->r[q].last_done_ns <= since && ph->r[q].out))
					continue;
				rail_take_out(fp, ph, r, q, now, since);
				break;
			}
		}
	}
	health_gauges(fp);
}

/* A post went out on its rail. */
static void health_posted(struct fab_slice *s, uint64_t now)
{
	struct rail_health *rh;

	if (!s->ph)
		return;
	rh = &s->ph->r[s->rail];
	if (!rh->out++)
		rh->busy_since_ns = now;
	rh->out_bytes += s->len;
	s->ph->out++;
	s->ph->used_ns = now;
}

/* A post returned: completed (@ok) or failed. A completion on a rail out
 * of the stripe brings it back; one of a live slice on a healthy rail is a
 * sample of its time per slice and throughput. */
static void health_returned(struct fab_poller *fp, struct fab_slice *s, uint64_t now, bool ok)
{
	struct peer_health *ph = s->ph;
	struct rail_health *rh;
	uint64_t gap;

	if (!ph)
		return;
	rh = &ph->r[s->rail];
	rh->out--;
	rh->out_bytes -= s->len;
	ph->out--;
	if (s->probe)
		rh->probe_out = false;
	if (!ok) {
		if (rh->state == DP_STATS_RAIL_PROBING && !rh->probe_out)
			rh->state = DP_STATS_RAIL_OUT;
		return;
	}
	/* A sample only of a slice that waited behind the rail's previous
	 * completion, the rail busy since: the time between two completions
	 * of a rail that has more to send is what a slice of it costs. The
	 * time of a slice posted to a rail with nothing before it is a round
	 * trip (and the machine's scheduling), not the rail's throughput: a
	 * rail given few slices would measure slow, be given fewer still, and
	 * drop out of the stripe. */
	if (rh->state != DP_STATS_RAIL_HEALTHY) {
		rail_back(fp, ph, s->rail, now);
	} else if (!s->orphan && !s->probe && rh->last_done_ns &&
		   rh->last_done_ns >= rh->busy_since_ns && s->post_ns <= rh->last_done_ns) {
		gap = now > rh->last_done_ns ? now - rh->last_done_ns : 1;
		rh->gap_ns = rh->gap_ns ? rh->gap_ns - rh->gap_ns / 8 + gap / 8 : gap;
		worst_note(rh, gap, now);
		rh->ew_bytes = rh->ew_bytes - rh->ew_bytes / 16 + s->len;
		rh->ew_ns = rh->ew_ns - rh->ew_ns / 16 + gap;
	}
	rh->last_done_ns = now;
}

/* Queues @op (filled in) on @p: slices go out from the next progress. */
static void op_queue(struct poller *p, struct fab_poller *fp, struct fab_op *op)
{
	op->open = true;
	op->next_rail = (unsigned)op->o.user_data;
	op->progress_ns = dp_now_ns();
	op_fifo_push(&fp->ops, &op->node);
	fp->nops++;
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

/* Posts one slice; 0, -FI_EAGAIN (try later), or another error. A probe
 * READs its first bytes into the poller's scratch page instead. */
static int slice_post(struct fab_poller *fp, struct fab_slice *s)
{
	struct fab_op *op = s->op;
	struct remote_seg *rs = op->o.seg->remote;
	struct rail_ep *e = &fp->ep[s->rail];
	void *buf = s->probe ? fp->scratch : op->buf + s->off;
	void *desc = fi_mr_desc((s->probe ? fp->scratch_mrs : op->mrs)->mr[s->rail]);
	uint64_t raddr = (virt_addr ? rs->base : 0) + op->tgt_off + s->off;
	fi_addr_t dest = rs->peer->addr[s->rail];
	uint64_t now;
	ssize_t rc;

	if (e->inflight >= rails[s->rail].tx_depth)
		return -FI_EAGAIN;
	if (DP_FAULT(FI_POST_EAGAIN))
		rc = -FI_EAGAIN;
	else if (DP_FAULT(FI_POST_FAIL))
		rc = -FI_EIO;
	else if (s->probe)
		rc = fi_read(e->ep, buf, s->len, desc, dest, raddr, rs->key[s->rail], &s->c.ctx);
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
	now = dp_now_ns();
	if (!op->out++)
		op->out_since_ns = now;
	if (s->orphan)
		op->orphans++;
	s->out = true;
	s->post_ns = now;
	s->pprev = &op->posted;
	s->pnext = op->posted;
	if (op->posted)
		op->posted->pprev = &s->pnext;
	op->posted = s;
	health_posted(s, now);
	return 0;
}

/* A post came back from the provider, completed (@ok) or failed: the
 * provider holds nothing of it any more. */
static void post_returned(struct fab_poller *fp, struct rail_ep *e, struct fab_slice *s,
			  uint64_t now, bool ok)
{
	struct fab_op *op = s->op;

	e->inflight--;
	op->out--;
	if (s->orphan)
		op->orphans--;
	*s->pprev = s->pnext;
	if (s->pnext)
		s->pnext->pprev = s->pprev;
	s->out = false;
	health_returned(fp, s, now, ok);
}

/* A live post completed its bytes: its twin, if any, is an orphan now. */
static void slice_done(struct fab_op *op, struct fab_slice *s)
{
	struct fab_slice *t = s->twin;

	op->pending--;
	if (!t)
		return;
	t->orphan = true;
	t->twin = NULL;
	if (t->out)
		op->orphans++;
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
	if (s->twin)
		s->twin->twin = NULL;
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
	struct fab_slice *t = s->twin;
	int code = fabric_errno(fi_err);

	post_returned(fp, e, s, dp_now_ns(), false);
	if (e->st)
		stats_add(&e->st->errors, 1);
	log_debug("fabric: slice on rail %u failed: %s", rail, fi_strerror(fi_err));
	/* An orphan, or a post whose twin on a healthy rail carries its
	 * bytes: nothing to do again. */
	if (s->orphan || (t && s->ph && s->ph->r[t->rail].state == DP_STATS_RAIL_HEALTHY)) {
		if (t)
			t->twin = NULL;
		slice_put(fp, s);
		return;
	}
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
				post_returned(fp, e, s, t, true);
				fabric_peer_progress(s->op->o.seg->remote->peer, t);
				if (!s->orphan) {
					s->op->progress_ns = t;
					slice_done(s->op, s);
				}
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

/* Rails of @ph taken out, due a probe: one READ each of the first bytes of
 * @like, a new slice of @op (an orphan from the start: nothing waits on it). */
static void probe_rails(struct fab_poller *fp, struct peer_health *ph, struct fab_op *op,
			const struct fab_slice *like, uint64_t now)
{
	for (unsigned r = 0; r < ph->peer->nrails; r++) {
		struct rail_health *rh = &ph->r[r];
		struct fab_slice *p;

		if (rh->state != DP_STATS_RAIL_OUT || rh->probe_out ||
		    now - rh->state_ns < FAB_PROBE_EVERY_NS)
			continue;
		rh->state_ns = now;
		p = slice_get(fp);
		if (!p)
			return;
		*p = (struct fab_slice){.op = op,
					.off = like->off,
					.len = like->len < 8 ? like->len : 8,
					.rail = r,
					.tries = 1,
					.ph = ph,
					.orphan = true,
					.probe = true};
		if (slice_post(fp, p)) {
			slice_put(fp, p);
			continue;
		}
		rh->probe_out = true;
		rh->state = DP_STATS_RAIL_PROBING;
		if (fp->ep[r].st)
			stats_add(&fp->ep[r].st->probes, 1);
	}
}

/* Slices what is left of op and posts while endpoints have room. */
static int op_post(struct fab_poller *fp, struct fab_op *op)
{
	struct peer *peer = op->o.seg->remote->peer;
	unsigned n = peer->nrails;
	struct peer_health *ph;
	uint64_t now;
	int posted = 0, rc;

	if (!op->retry && op->next_off == op->o.len)
		return 0;
	/* Found gone since it was queued (another transfer's failure, a
	 * probe's answer): what is left never goes out. */
	if (atomic_load(&peer->dead) || atomic_load(&op->o.seg->dead)) {
		op->status = atomic_load(&peer->dead) ? -EHOSTUNREACH : -ECONNRESET;
		return 0;
	}

	now = dp_now_ns();
	ph = health_of(fp, peer);
	while (op->retry && op->open && !op->held) {
		struct fab_slice *s = op->retry;

		/* A twin whose original completed meanwhile. */
		if (s->orphan) {
			op->retry = s->next;
			slice_put(fp, s);
			continue;
		}
		s->ph = ph;
		if (ph && ph->r[s->rail].state != DP_STATS_RAIL_HEALTHY)
			s->rail = pick_rail(fp, ph, op, n, op->next_rail++);
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
					.rail = pick_rail(fp, ph, op, n, op->next_rail),
					.tries = 1,
					.ph = ph};
		rc = slice_post(fp, s);
		if (rc == -FI_EAGAIN) {
			slice_put(fp, s);
			return posted;
		}
		op->next_off += len;
		op->next_rail++;
		op->pending++;
		if (rc) {
			slice_failed(fp, op, s, fabric_errno((int)-rc));
			continue;
		}
		posted++;
		if (ph)
			probe_rails(fp, ph, op, s, now);
	}
	return posted;
}

/* The client hears of the op now: every slice's bytes are done once
 * (orphans may still be out: the op stays until they return), or it failed
 * and no live post of it is out. Slices of a failed op still waiting for
 * their retry are never posted (op_post skips it; op_free frees them):
 * waiting for them would keep the op, and its completion, until the
 * timeout, and after it forever. */
static bool op_done(const struct fab_op *op)
{
	if (op->status)
		return op->out == op->orphans;
	return op->next_off == op->o.len && !op->pending;
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
	unsigned lingering = 0;
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
		if (op->open && op_done(op)) {
			op_complete(op, op->status);
			work++;
		}
		if (!op->open && !op->out) {
			op_fifo_unlink(&fp->ops, prev, n);
			fp->nops--;
			op_free(fp, op);
			work++;
			continue;
		}
		lingering += !op->open;
		prev = n;
	}
	fp->lingering = lingering;
	if (t)
		health_scan(fp, t);
	return work;
}

static bool fabric_busy(const struct poller *p)
{
	const struct fab_poller *fp = p->eng[ENGINE_fabric];

	/* Ops that only wait for a dead rail's orphans are no work. */
	return fp && fp->nops > fp->lingering;
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
