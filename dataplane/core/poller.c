/* SPDX-License-Identifier: MIT */
/*
 * poller.c - the data path: pinned threads that drain submission rings,
 * validate each descriptor in private memory, route it to an engine
 * (engine.h), and publish exactly one completion per accepted descriptor.
 *
 * One loop: drain every SQ in bursts (within the queue's credit) -> let
 * every engine progress -> publish staged completions and ring doorbells ->
 * retire closed queues. After spin_us without work the poller arms
 * NEED_WAKEUP on every SQ and sleeps in epoll on their doorbells and the
 * engines' fds.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "dp_internal.h"
#include "engine.h"
#include "fabric.h"
#include "file.h"
#include "notif.h"
#include "rpc.h"
#include "samehost.h"
#include "session.h"
#include "stats.h"

struct poller pollers[DP_MAX_POLLERS];

void poller_kick(struct poller *p)
{
	wake_efd_ring(p->wake_efd);
}

static void queue_mark_broken(struct queue *q, const char *why)
{
	if (q->broken)
		return;
	q->broken = true;
	log_warn("client %u (pid %d) queue %u broken: %s; disconnecting it", q->client->id,
		 (int)q->client->pid, q->id, why);
	atomic_store(&q->client->broken, 1);
	wake_efd_ring(control_wake_efd);
}

/* Publishes the completions written since the last flush: one release of
 * the CQ tail per queue per loop, and a doorbell only for a sleeping client. */
static void queue_flush_cq(struct queue *q)
{
	if (q->nstage && !q->broken) {
		dp_ring_commit(&q->pair.cq, q->nstage);
		if (dp_ring_needs_wakeup(&q->pair.cq)) {
			dp_doorbell_ring(q->cq_efd);
			q->ctr.doorbells++;
		}
	}
	/* Counted after the client can see them. */
	stats_queue_flush(q);
	q->nstage = 0;
}

/*
 * Writes a completion straight into the next free CQ slot; queue_flush_cq()
 * publishes it. Credit guarantees the slot is free: a CQ without room means
 * the client moved its head, and the queue is broken (its completions are
 * dropped; it is being disconnected).
 */
void queue_complete_ns(struct queue *q, uint64_t user_data, uint64_t submit_ns, int status,
		       uint64_t bytes, uint32_t flags)
{
	struct dp_cqe *e;

	stats_complete(q, submit_ns, flags);
	if (status) {
		q->ctr.failed++;
		q->ctr.failed_by[dp_stats_err_class(status)]++;
	} else {
		q->ctr.completed++;
		q->ctr.bytes += bytes;
	}
	if (q->broken)
		return;
	/* The slot after those staged since the last flush. */
	if (!dp_ring_stage(&q->pair.cq, q->nstage, (void **)&e)) {
		queue_mark_broken(q, "completion ring head corrupted");
		return;
	}
	q->nstage++;
	e->user_data = user_data;
	e->status = status;
	e->flags = flags;
	e->bytes = bytes; /* reserved: the ring's sequence word (dp_proto.h) */
}

/*
 * The routing rule (docs/architecture.md): a segment of another service
 * goes to the fabric, or to host staging when the local memory has no
 * fabric registration (GPU memory on rails without FI_HMEM, memory of a
 * client process: dp_register_mem; host memory with --stage-host), or when
 * its owner stages it for us (memory its rails could not register:
 * DP_RPC_F_OWNER_STAGES); on this service (or mapped from another of this
 * host), memory of a client process on either side goes to the vm engine,
 * which moves it to and from host and GPU memory and refuses a file, a file on
 * either side goes to the file engine, GPU memory on either side to the GPU
 * engine, and host memory to host memory is a memcpy.
 */
static inline enum engine_id route(const struct xfer *x)
{
	if (!x->rb) {
		if (x->ra->kind == REGION_FILE)
			return ENGINE_fabric;
		if (x->seg->remote && x->seg->remote->flags & DP_RPC_F_OWNER_STAGES)
			return ENGINE_stage;
		return x->ra->eng[ENGINE_fabric] ? ENGINE_fabric : ENGINE_stage;
	}
	if (x->ra->kind == REGION_VM || x->rb->kind == REGION_VM)
		return ENGINE_vm;
	if (x->ra->kind == REGION_FILE || x->rb->kind == REGION_FILE)
		return ENGINE_file;
	if (x->ra->kind == REGION_CUDA || x->rb->kind == REGION_CUDA)
		return ENGINE_gpu;
	return ENGINE_host;
}

/*
 * Validates a descriptor already copied to private memory, resolves it into
 * an xfer and routes it (*engine). Returns 0 or the errno the descriptor
 * completes with. The order of checks is the documented one (docs/api.md):
 * EINVAL, EBADF, ECONNRESET, EPERM, EFAULT.
 */
static int desc_resolve(struct queue *q, const struct dp_desc *d, struct xfer *x,
			enum engine_id *engine, bool final, struct dp_desc *t)
{
	struct client *c = q->client;
	struct seg_handle *h;
	struct region *local, *target;
	struct segment *seg;
	unsigned need;
	int rc;

	if (d->opcode != DP_OP_WRITE && d->opcode != DP_OP_READ)
		return -EINVAL;
	if (d->region >= DP_MAX_REGIONS || d->segment >= DP_MAX_SEGS)
		return -EBADF;
	/* Acquire: pairs with the release publication in control.c; the
	 * object is fully initialised. QSBR keeps it alive for this loop. */
	local = atomic_load_explicit(&c->regions[d->region], memory_order_acquire);
	h = atomic_load_explicit(&c->segs[d->segment], memory_order_acquire);
	if (!local || !h)
		return -EBADF;
	seg = h->seg;
	if (!seg) {
		/* An engine session: target_off is an address of its process,
		 * which one member's segment holds (or SESSION_MISS: ask). From
		 * here on the descriptor is the member's, at its offset. */
		uint64_t off;

		rc = session_translate(h->sess, d->target_off, d->len, final, &seg, &off);
		if (rc)
			return rc;
		if (!(seg->access & (d->opcode == DP_OP_WRITE ? DP_ACCESS_WRITE : DP_ACCESS_READ)))
			return -EPERM;
		*t = *d;
		t->target_off = off;
		d = t;
	}
	if (atomic_load_explicit(&seg->dead, memory_order_acquire))
		return -ECONNRESET;
	/* Another service's export mapped here: gone when its word moved or
	 * its service exited (samehost.h). */
	if (seg->same && !samehost_alive(seg->same))
		return -ECONNRESET;
	need = d->opcode == DP_OP_WRITE ? DP_ACCESS_WRITE : DP_ACCESS_READ;
	/* A file region allows what its fd allows: the local region is read
	 * by a WRITE and written by a READ. */
	if (!(h->access & need) || !fileio_access_ok(local, need ^ DP_ACCESS_RW) ||
	    (!seg->remote && !fileio_access_ok(seg->region, need)))
		return -EPERM;
	/* Written as subtractions so that no offset + length can overflow. */
	if (d->len > local->len || d->local_off > local->len - d->len)
		return -EFAULT;
	x->q = q;
	x->d = d;
	x->user_data = d->user_data;
	x->submit_ns = d->submit_ns;
	x->len = d->len;
	x->ra = local;
	x->seg = seg;
	if (seg->remote) {
		/* Another service's segment: no address here. */
		if (d->len > seg->remote->len || d->target_off > seg->remote->len - d->len)
			return -EFAULT;
		x->rb = NULL;
		*engine = route(x);
		return 0;
	}
	target = seg->region;
	if (d->len > target->len || d->target_off > target->len - d->len)
		return -EFAULT;
	x->rb = target;
	x->path = seg->same ? DP_CQE_F_SAME_HOST : DP_CQE_F_LOCAL;
	*engine = route(x);
	/* Memory on both sides: the bytes. A file has no address. */
	if (*engine == ENGINE_host || *engine == ENGINE_gpu) {
		uint8_t *l = local->base + d->local_off, *t = target->base + d->target_off;

		x->dst = d->opcode == DP_OP_WRITE ? t : l;
		x->src = d->opcode == DP_OP_WRITE ? l : t;
	}
	return 0;
}

/* A WRITE with DP_DESC_F_NOTIFY, or a WRITE or READ with
 * DP_DESC_F_NOTIFY_MSG, resolved: the paths that deliver its notification
 * are memory on both sides (host, GPU and registered-memory copies, this
 * service's or a mapped one of the same host), the fabric and host
 * staging (its op completes once the owner has the bytes; notif.h); a
 * file region is -ENOTSUP (docs/api.md "Notifications"). A message's
 * bytes are copied now: the client may reuse their slot once this
 * descriptor was taken (dp_proto.h). */
static int notify_prepare(const struct queue *q, const struct dp_desc *d, struct xfer *x,
			  enum engine_id e, struct notif_req *n)
{
	int rc;

	if (e != ENGINE_host && e != ENGINE_vm && e != ENGINE_gpu && e != ENGINE_fabric &&
	    e != ENGINE_stage)
		return -ENOTSUP;
	*n = (struct notif_req){.value = d->notify,
				.offset = d->target_off,
				.len = d->len,
				.sender = q->client->id,
				.flags = DP_NOTIFY_F_LOCAL};
	if (d->flags & DP_DESC_F_NOTIFY_MSG) {
		n->value = 0;
		n->flags |= DP_NOTIFY_F_MSG | (d->opcode == DP_OP_READ ? DP_NOTIFY_F_READ : 0);
		rc = notif_msg_copy(q->client, d->notify, &n->msg);
		if (rc)
			return rc;
	}
	x->notify = n;
	return 0;
}

/* The flags and the notify word: DP_DESC_F_NOTIFY on a WRITE only,
 * DP_DESC_F_NOTIFY_MSG on a WRITE or a READ, never both; without either,
 * notify is reserved. */
static bool desc_notify_ok(const struct dp_desc *d)
{
	if (d->flags & ~(DP_DESC_F_NOTIFY | DP_DESC_F_NOTIFY_MSG))
		return false;
	if (d->flags & DP_DESC_F_NOTIFY)
		return d->opcode == DP_OP_WRITE && !(d->flags & DP_DESC_F_NOTIFY_MSG);
	if (d->flags & DP_DESC_F_NOTIFY_MSG)
		return d->opcode == DP_OP_WRITE || d->opcode == DP_OP_READ;
	return d->notify == 0;
}

/* Validates, resolves and submits one descriptor (desc_process); `final`
 * for one an engine session held (session.h): a miss now fails it. */
static void desc_run(struct poller *p, struct queue *q, const struct dp_desc *d, bool final)
{
	enum engine_id e = ENGINE_host;
	struct dp_desc t; /* a session's descriptor, at its member's offset */
	struct notif_req n = {.msg = NULL};
	struct xfer x;
	int rc;

	x.d = d; /* desc_resolve's, once it resolved */
	/* reserved1's place holds the ring's sequence word: libclient turns a
	 * caller's reserved1 into reserved0 (dp_proto.h). */
	if (!desc_notify_ok(d) || d->reserved0)
		rc = -EINVAL;
	else if (d->opcode == DP_OP_NOP)
		rc = 0;
	else
		rc = desc_resolve(q, d, &x, &e, final, &t);
	if (rc == SESSION_MISS) {
		const struct seg_handle *h =
			atomic_load_explicit(&q->client->segs[d->segment], memory_order_acquire);

		session_hold(p, q, d, h->sess);
		return;
	}
	x.notify = NULL;
	/* x.d: through a session, the member's offset (its owner's ring says
	 * the address: notif.c). */
	if (!rc && d->flags)
		rc = notify_prepare(q, x.d, &x, e, &n);
	if (rc || d->opcode == DP_OP_NOP) {
		queue_complete_ns(q, d->user_data, d->submit_ns, rc, 0, 0);
		return;
	}
	engines[e]->submit(p, &x);
	/* An engine delivers the notification, or moves it into what it
	 * keeps (notif_req_move); one that failed the transfer at once left
	 * the message here. */
	notif_req_release(&n);
}

static void desc_process(struct poller *p, struct queue *q, const struct dp_desc *d)
{
	q->ctr.submitted++;
	desc_run(p, q, d, false);
}

void desc_process_held(struct poller *p, struct queue *q, const struct dp_desc *d)
{
	desc_run(p, q, d, true);
}

/*
 * The burst fast path: runs of descriptors that are plain WRITEs or READs
 * between two host regions of this service, up to --inline-max bytes, the
 * shape of P4 (docs/benchmarks.md). It does what desc_process ->
 * desc_resolve -> host_submit -> queue_complete_ns do for them, with less
 * work per descriptor:
 *   - the region and segment tables are looked up once per run of
 *     descriptors naming the same (opcode, region, segment), not per
 *     descriptor: within one loop the objects stay alive (QSBR), and the
 *     completions of the whole burst become visible only at the loop's
 *     flush, so no client can tell the lookups apart;
 *   - what can change while the loop runs, the segment's dead flag and,
 *     for another service's export, samehost_alive(), is checked once per
 *     run too, before its first descriptor (fast_run), not per descriptor
 *     (fast_loop): a run that started on a live segment copies to the end,
 *     which no client can tell from a death seen just after it, for the
 *     same two reasons; the next run, or the general path, sees the death;
 *   - a run also has one length: its range checks are two compares
 *     against offsets computed once (fast_len), and a descriptor of
 *     another length starts another run of the same lookup;
 *   - the completion goes straight into its CQ slot: the burst was taken
 *     within the queue's credit (queue_drain_sq), so the slot is free and
 *     dp_ring_stage's check is not needed;
 *   - the queue's counters are added once per run (before any stats run
 *     switch, which reads them);
 *   - a 64 B copy is a fixed-size copy, inline.
 * Anything else (another opcode, flags, a reserved field set, a bad index,
 * offset or length, a dead segment, a copy queued for later, another
 * engine) leaves the run and takes the general path, which gives the
 * documented errno in the documented order (docs/api.md): a descriptor the
 * fast path accepts is one on which every check of desc_resolve passes.
 * Works on the private copy of the burst, like the general path.
 */
struct fast_run {
	/* The descriptor's word 0 (opcode, flags, reserved0, region) and
	 * segment that the run's lookup was made for; key0 0: none (a run's
	 * opcode is never 0). */
	uint64_t key0;
	uint32_t key1;
	uint8_t *dbase, *sbase; /* destination and source regions' byte 0 */
	uint64_t dlen, slen, lim;
	/* The run's length (every descriptor of a run has it: another
	 * length starts another run, without a new lookup), and the largest
	 * destination and source offsets it leaves in range. */
	uint64_t len, dmax, smax;
	bool write;    /* dst is the target (offsets swap for a READ) */
	uint32_t path; /* DP_CQE_F_LOCAL or DP_CQE_F_SAME_HOST */
	const struct segment *seg;
	const struct samehost_seg *same;
	/* The engine the run's route names: the host engine's copies are made
	 * here; another's (one with submit_run) go to it as a run. */
	enum engine_id engine;
	struct xfer_run run;
};

#ifdef DP_TSAN
/* host.c's client_bytes_copy(): the client's bytes are out of TSan's sight. */
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
#endif

/*
 * A 64 B memmove inline: four 16-byte loads into registers, then four
 * stores, so overlapping ranges copy right. GCC turns memmove(d, s, 64),
 * and a copy through a buffer on the stack, into a call of libc's
 * (19-20 instructions per descriptor, tools/bench-instr.sh); this is 8.
 */
typedef uint8_t v16u8 __attribute__((vector_size(16), aligned(1), may_alias));

static inline void copy64(uint8_t *d, const uint8_t *s)
{
	v16u8 a = *(const v16u8 *)s, b = *(const v16u8 *)(s + 16);
	v16u8 c = *(const v16u8 *)(s + 32), e = *(const v16u8 *)(s + 48);

	*(v16u8 *)d = a;
	*(v16u8 *)(d + 16) = b;
	*(v16u8 *)(d + 32) = c;
	*(v16u8 *)(d + 48) = e;
}

static inline uint64_t desc_word(const struct dp_desc *d, size_t off)
{
	uint64_t w;

	memcpy(&w, (const uint8_t *)d + off, sizeof(w));
	return w;
}

/* The run's length becomes len; false when no descriptor of that length
 * can take the fast path (len > lim: desc_resolve's checks, inline_max). */
static inline bool fast_len(struct fast_run *f, uint64_t len)
{
	if (len > f->lim)
		return false;
	f->len = len;
	f->dmax = f->dlen - len;
	f->smax = f->slen - len;
	return true;
}

/* The lookup of desc_resolve for d's (opcode, region, segment), kept for the
 * run when everything that does not depend on d's offsets and length would
 * pass and the route is the host engine. */
static bool fast_lookup(struct queue *q, const struct dp_desc *d, struct fast_run *f)
{
	struct client *c = q->client;
	struct region *local, *target;
	struct seg_handle *h;
	struct segment *seg;
	struct xfer x;
	unsigned need;

	f->key0 = 0;
	if (q->broken || (d->opcode != DP_OP_WRITE && d->opcode != DP_OP_READ) || d->flags ||
	    d->reserved0 || d->region >= DP_MAX_REGIONS || d->segment >= DP_MAX_SEGS)
		return false;
	local = atomic_load_explicit(&c->regions[d->region], memory_order_acquire);
	h = atomic_load_explicit(&c->segs[d->segment], memory_order_acquire);
	if (!local || !h || !h->seg)
		return false;
	seg = h->seg;
	/* As in desc_resolve: seg->region may be used only once the segment
	 * was seen alive in this loop (struct segment). */
	if (atomic_load_explicit(&seg->dead, memory_order_acquire))
		return false;
	need = d->opcode == DP_OP_WRITE ? DP_ACCESS_WRITE : DP_ACCESS_READ;
	if (seg->remote || !(h->access & need) || !fileio_access_ok(local, need ^ DP_ACCESS_RW) ||
	    !fileio_access_ok(seg->region, need))
		return false;
	target = seg->region;
	x.ra = local;
	x.rb = target;
	f->engine = route(&x);
	f->write = d->opcode == DP_OP_WRITE;
	f->path = seg->same ? DP_CQE_F_SAME_HOST : DP_CQE_F_LOCAL;
	f->seg = seg;
	f->same = seg->same;
	if (f->engine != ENGINE_host) {
		if (!engines[f->engine]->submit_run)
			return false;
		f->key0 = desc_word(d, 0);
		f->key1 = d->segment;
		f->run = (struct xfer_run){.q = q,
					   .ra = local,
					   .rb = target,
					   .write = f->write,
					   .path = f->path,
					   .key0 = f->key0,
					   .key1 = f->key1};
		return true;
	}
	f->dbase = f->write ? target->base : local->base;
	f->sbase = f->write ? local->base : target->base;
	f->dlen = f->write ? target->len : local->len;
	f->slen = f->write ? local->len : target->len;
	f->lim = local->len < target->len ? local->len : target->len;
	if (f->lim > cfg.inline_max)
		f->lim = cfg.inline_max;
	if (!fast_len(f, d->len))
		return false;
	f->key0 = desc_word(d, 0);
	f->key1 = d->segment;
	return true;
}

/* n descriptors of a fast run completed, moving `bytes`: what desc_process,
 * host_submit and queue_complete_ns count for each. */
static inline void fast_count(struct queue *q, uint64_t n, uint64_t bytes)
{
	q->ctr.submitted += n;
	q->ctr.completed += n;
	q->ctr.local_copies += n;
	q->ctr.bytes += bytes;
}

/*
 * The loop of fast_run, for one direction (write: the destination is the
 * target). Everything it reads more than once is in locals: stores into the
 * client's memory and the CQ could alias the run's fields otherwise, and
 * the compiler would reload them per descriptor.
 */
static __attribute__((always_inline)) inline int fast_loop(struct queue *q, const struct dp_desc *d,
							   int n, const struct fast_run *f,
							   const bool write, const bool st)
{
	struct dp_ring *cq = &q->pair.cq;
	/* The completions' slots, walked by pointer (entry size: ours,
	 * control.c); credit made them free (queue_drain_sq). */
	struct dp_cqe *const cqes = (struct dp_cqe *)cq->slots, *const cq_end = cqes + cq->mask + 1;
	struct dp_cqe *e = cqes + ((cq->local + q->nstage) & cq->mask);
	const struct dp_desc *const d0 = d, *const end = d + n;
	const uint64_t key0 = f->key0, key1 = f->key1, len = f->len;
	const uint64_t dmax = f->dmax, smax = f->smax;
	uint8_t *const dbase = f->dbase;
	const uint8_t *const sbase = f->sbase;
	/* A completion's status (0) and flags, stored as one word. */
	const struct {
		int32_t status;
		uint32_t flags;
	} sf = {0, f->path};
	/* With st, the run is d's stamp and path already (fast_run): only
	 * the stamp is compared per descriptor. */
	uint64_t stamp = d->submit_ns;

	for (; d < end; d++) {
		uint64_t doff = write ? d->target_off : d->local_off;
		uint64_t soff = write ? d->local_off : d->target_off;

		if (desc_word(d, 0) != key0 || d->segment != key1 || d->len != len || d->notify)
			break;
		/* desc_resolve's checks for the run's length (fast_len). */
		if (doff > dmax || soff > smax)
			break;
		if (st && __builtin_expect(d->submit_ns != stamp, 0)) {
			stamp = d->submit_ns;
			stats_run_switch(q, stamp, sf.flags, (uint64_t)(d - d0),
					 (uint64_t)(d - d0) * len);
		}
#ifdef DP_TSAN
		__tsan_ignore_thread_begin();
#endif
		/* memmove: a region written onto itself may overlap. */
		if (len == 64)
			copy64(dbase + doff, sbase + soff);
		else
			memmove(dbase + doff, sbase + soff, len);
#ifdef DP_TSAN
		__tsan_ignore_thread_end();
#endif
		e->user_data = d->user_data;
		memcpy(&e->status, &sf, sizeof(sf));
		e->bytes = len; /* reserved: the ring's sequence word (dp_proto.h) */
		if (++e == cq_end)
			e = cqes;
	}
	n = (int)(d - d0);
	q->nstage += (uint32_t)n;
	fast_count(q, (uint64_t)n, (uint64_t)n * len);
	return n;
}

/*
 * A run for another engine (its submit_run), after the segment's liveness
 * check made once for it; the engine takes the run's descriptors
 * (xfer_run_has) from the rest of the burst, each one's offsets and length
 * checked, and stops at the first it cannot take.
 */
static int fast_engine_run(struct poller *p, struct queue *q, const struct dp_desc *d, int n,
			   struct fast_run *f)
{
	int k;

	if (atomic_load_explicit(&f->seg->dead, memory_order_acquire) ||
	    (f->same && !samehost_alive(f->same)))
		return 0;
	k = engines[f->engine]->submit_run(p, &f->run, d, n);
	q->ctr.submitted += (uint64_t)k;
	return k;
}

/*
 * Runs the fast path over the longest prefix of d[0..n) it can take; returns
 * how many it completed (0: d[0] takes the general path). The segment's
 * liveness is checked here, once per run: a poller that saw it alive in its
 * current loop may use the region (struct segment, QSBR), and the run's
 * completions become visible together at the loop's flush.
 */
static int fast_run(struct poller *p, struct queue *q, const struct dp_desc *d, int n,
		    struct fast_run *f)
{
	/* key0 0 is no run: a descriptor of zeroes would match it. */
	if ((!f->key0 || desc_word(d, 0) != f->key0 || d->segment != f->key1) &&
	    !fast_lookup(q, d, f))
		return 0;
	if (f->engine != ENGINE_host)
		return fast_engine_run(p, q, d, n, f);
	if (d->len != f->len && !fast_len(f, d->len))
		return 0;
	if (atomic_load_explicit(&f->seg->dead, memory_order_acquire) ||
	    (f->same && !samehost_alive(f->same)))
		return 0;
	/* Four copies of the loop: one compares each descriptor's stamp with
	 * its run's (as stats_complete does), one does not: with the stats
	 * region off, and when the first and the last descriptor have the
	 * same stamp. dp_submit stamps a batch once, after its reserve, and a
	 * queue's batches are submitted one after another (CLOCK_MONOTONIC),
	 * so everything between is the same batch or batches of the same
	 * stamp. A client that writes its own stamps blurs its own latencies
	 * only. */
	if (q->st) {
		/* The run switched to d's stamp and path first: one for d that
		 * then leaves the loop costs nothing (an empty run is never
		 * timed). */
		if (d->submit_ns != q->run_submit || f->path != q->run_flags)
			stats_run_start(q, d->submit_ns, f->path);
		if (d->submit_ns != d[n - 1].submit_ns)
			return f->write ? fast_loop(q, d, n, f, true, true)
					: fast_loop(q, d, n, f, false, true);
	}
	return f->write ? fast_loop(q, d, n, f, true, false) : fast_loop(q, d, n, f, false, false);
}

/*
 * Drains up to one burst from q's SQ, never more than its credit allows:
 * the CQ must have room for every completion we owe. The SQ first: an idle
 * queue costs one load, of the slot its client writes next. The CQ's head,
 * a line the client writes on every reap, is loaded only when the room
 * last seen is short of what we would owe: polling it too would make the
 * client's next submit wait for that line to come back.
 */
static int queue_drain_sq(struct poller *p, struct queue *q)
{
	struct dp_desc descs[DP_BURST];
	struct fast_run f = {.key0 = 0};
	uint32_t idx, cidx, owed;
	int room, k;

	if (q->broken || atomic_load_explicit(&q->closing, memory_order_relaxed))
		return 0;
	/* Never -EPROTO: a ring with sequence words reads no index of the
	 * client's (docs/ring.md). */
	k = dp_ring_peek(&q->pair.sq, DP_BURST, &idx);
	if (k <= 0)
		return 0;
	owed = q->inflight + q->nstage;
	room = dp_ring_reserve(&q->pair.cq, owed + (uint32_t)k, &cidx);
	if (room < 0) {
		queue_mark_broken(q, "completion ring head out of range");
		return 0;
	}
	if (room <= (int)owed)
		return 0;
	if (k > room - (int)owed)
		k = room - (int)owed;
	/* Copy first, validate after: the client may rewrite a slot at any
	 * time, but never the private copy we act on. */
	dp_ring_copy_out(&q->pair.sq, idx, descs, (uint32_t)k);
	dp_ring_release(&q->pair.sq, (uint32_t)k);
	/* A full burst: the client is ahead, and its next burst is likely
	 * written already. Fetching it while this one is processed took P4
	 * from 35.3 to 37.1 M/s on the reference host (medians, 6 rounds
	 * alternating; docs/benchmarks.md). */
	if (k == DP_BURST)
		dp_ring_prefetch(&q->pair.sq, idx + (uint32_t)k, DP_BURST);
	/* This burst's completion lines for writing, all but the first (the
	 * client polls it): their stores then find them owned instead of
	 * waiting for the client's copies to be invalidated, one line after
	 * another. The slots are ours (room was reserved above). P4 +22% on
	 * the reference host, 8 rounds of 8 faster (docs/benchmarks.md). */
	dp_ring_prefetch_write(&q->pair.cq, q->pair.cq.local + q->nstage, (uint32_t)k);
	q->idle_loops = 0;
	for (int i = 0, n; i < k; i += n)
		if (!(n = fast_run(p, q, &descs[i], k - i, &f))) {
			desc_process(p, q, &descs[i]);
			f.key0 = 0; /* it may have changed what the run looked up */
			n = 1;
		}
	return k;
}

/* On shutdown: everything still in the SQ (within credit) completes with
 * -ECANCELED, so every descriptor the client handed over gets an answer. */
static void queue_cancel_sq(struct queue *q)
{
	struct dp_desc d;
	uint32_t idx;
	int room;

	if (q->broken)
		return;
	room = dp_ring_reserve(&q->pair.cq, dp_ring_size(&q->pair.cq), &idx);
	room -= (int)q->inflight + (int)q->nstage;
	while (room-- > 0 && dp_ring_dequeue(&q->pair.sq, &d) == 1) {
		q->ctr.submitted++;
		queue_complete_ns(q, d.user_data, d.submit_ns, -ECANCELED, 0, 0);
	}
}

static void queue_free(struct poller *p, struct queue *q)
{
	stats_queue_retire(q);
	/* ENOENT: its doorbell never got watched (the queue was marked
	 * broken for it). Anything else is a bug; closing the fd drops the
	 * watch in any case. */
	if (epoll_ctl(p->epfd, EPOLL_CTL_DEL, q->sq_efd, NULL) < 0 && errno != ENOENT)
		log_warn("poller %u: epoll_ctl(DEL) of a queue's doorbell: %s", p->idx,
			 strerror(errno));
	close(q->sq_efd);
	close(q->cq_efd);
	close(q->sq_peer);
	close(q->cq_peer);
	dp_ring_pair_close(&q->pair);
	atomic_fetch_sub(&p->nqueues, 1);
	client_put(q->client);
	free(q);
}

static void poller_take_inbox(struct poller *p)
{
	struct queue *q, *next;

	pthread_mutex_lock(&p->inbox_lock);
	q = p->inbox;
	p->inbox = NULL;
	atomic_store(&p->inbox_pending, 0);
	pthread_mutex_unlock(&p->inbox_lock);
	for (; q; q = next) {
		struct epoll_event ev = {.events = EPOLLIN, .data.fd = q->sq_efd};

		next = q->next;
		/* A queue whose doorbell cannot wake us (ENOMEM, ENOSPC: the
		 * user's epoll watch limit) could stall while we sleep. */
		if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, q->sq_efd, &ev) < 0)
			queue_mark_broken(q, errno == ENOSPC ? "epoll watch limit reached"
							     : "cannot watch its doorbell");
		q->next = p->queues;
		p->queues = q;
	}
}

void poller_add_queue(struct queue *q)
{
	struct poller *best = &pollers[0];

	for (unsigned i = 1; i < cfg.pollers; i++)
		if (atomic_load(&pollers[i].nqueues) < atomic_load(&best->nqueues))
			best = &pollers[i];
	q->poller = best;
	stats_queue_attach(q);
	atomic_fetch_add(&best->nqueues, 1);
	pthread_mutex_lock(&best->inbox_lock);
	q->next = best->inbox;
	best->inbox = q;
	atomic_store(&best->inbox_pending, 1);
	pthread_mutex_unlock(&best->inbox_lock);
	poller_kick(best);
}

/*
 * Parked queues. Every loop reads each polled queue's next SQ slot, a line
 * its client writes: with a thousand idle queues that was most of a
 * loop. A queue with nothing submitted, in flight or staged for
 * PARK_AFTER_LOOPS loops is parked instead: NEED_WAKEUP armed on its SQ as
 * if the poller slept, off the polled list. Its client's next dp_submit
 * rings the doorbell (one system call, as after the poller's own sleep);
 * every PARK_CHECK_LOOPS loops the poller asks epoll, without waiting,
 * whether a doorbell or a kick came, and only then walks the parked list
 * for queues with work or closing. A busy loop pays one test per loop.
 * Queues are parked in rounds, every PARK_ROUND_LOOPS loops, all that are
 * due at once: arming takes a barrier (poller_arm), with membarrier a
 * system call, one per round however many queues it parks.
 */
#define PARK_AFTER_LOOPS 1024u
#define PARK_ROUND_LOOPS 1024u /* a power of two */
#define PARK_CHECK_LOOPS 32u   /* a power of two */

/* At most one membarrier per poller per BARRIER_GAP_NS: it interrupts every
 * CPU running a thread of any registered client, so a client whose pauses
 * put its poller to sleep thousands of times a second would slow the
 * others. Within the gap the poller spins on instead of sleeping, and
 * parking waits for a later round. */
#define BARRIER_GAP_NS 1000000u

/* The barrier between arming SQs and checking them (docs/ring.md, "Light
 * producers"): membarrier, which clients' light SQs rely on, else a fence.
 * Non-zero: it failed, and nothing armed may sleep. */
static int sq_barrier(struct poller *p)
{
	static atomic_bool warned;
	int rc;

	if (!cfg.membarrier) {
		dp_ring_fence();
		return 0;
	}
	p->barrier_ns = dp_now_ns();
	rc = dp_ring_asym_barrier();
	if (rc && !atomic_exchange(&warned, true))
		log_warn("membarrier: %s; pollers spin instead of sleeping", strerror(-rc));
	return rc;
}

/* Whether poller_arm arms q: every queue before a sleep (all), else the
 * ones due for parking. */
static bool queue_to_arm(const struct queue *q, bool all)
{
	if (q->broken)
		return false;
	return all || (q->idle_loops >= PARK_AFTER_LOOPS && !q->inflight && !q->nstage);
}

/*
 * Arms NEED_WAKEUP on the SQs of p's polled queues (all, or those due for
 * parking), issues one barrier for all of them, then looks at each: those
 * still empty with nothing owed are parked, the others stay polled (armed,
 * when empty and owed something: the sleep's). Returns whether every armed
 * SQ was empty and no polled queue is closing; false without arming
 * anything within BARRIER_GAP_NS of the last membarrier; a failed barrier
 * disarms them all and returns false.
 */
static bool poller_arm(struct poller *p, bool all)
{
	struct queue **pp, *q;
	bool empty = true;
	unsigned n = 0;

	if (cfg.membarrier && dp_now_ns() - p->barrier_ns < BARRIER_GAP_NS)
		return false;
	for (q = p->queues; q; q = q->next)
		if (queue_to_arm(q, all)) {
			dp_ring_arm(&q->pair.sq);
			n++;
		}
	if (!n)
		return true;
	if (sq_barrier(p)) {
		for (q = p->queues; q; q = q->next)
			if (queue_to_arm(q, all)) {
				dp_ring_finish_sleep(&q->pair.sq);
				q->idle_loops = 0;
			}
		return false;
	}
	for (pp = &p->queues; (q = *pp);) {
		/* A queue closing stays polled, and the poller awake: its
		 * kick may have been taken already (poller_check_parked). */
		bool closing = atomic_load_explicit(&q->closing, memory_order_acquire);

		empty &= !closing;
		if (!queue_to_arm(q, all)) {
			pp = &q->next;
		} else if (!dp_ring_armed_empty(&q->pair.sq)) {
			q->idle_loops = 0;
			empty = false;
			pp = &q->next;
		} else if (q->inflight || q->nstage || closing) {
			pp = &q->next;
		} else {
			*pp = q->next;
			stats_queue_publish(q);
			q->next = p->parked;
			p->parked = q;
			stats_parked(p, ++p->nparked);
		}
	}
	return empty;
}

/* Back to the polled list: parked queues with work or closing, or all. */
static void poller_unpark(struct poller *p, bool all)
{
	struct queue **pp = &p->parked;

	while (*pp) {
		struct queue *q = *pp;
		uint32_t idx;

		if (!all && !atomic_load_explicit(&q->closing, memory_order_acquire) &&
		    !dp_ring_peek(&q->pair.sq, 1, &idx)) {
			pp = &q->next;
			continue;
		}
		*pp = q->next;
		dp_ring_finish_sleep(&q->pair.sq);
		q->idle_loops = 0;
		q->next = p->queues;
		p->queues = q;
		stats_parked(p, --p->nparked);
	}
}

/* Whether a doorbell rang or the poller was kicked, without waiting; the
 * parked queues are looked at only then. */
static void poller_check_parked(struct poller *p)
{
	struct epoll_event evs[32];
	bool rang = false;
	int n = epoll_wait(p->epfd, evs, 32, 0);

	for (int i = 0; i < n; i++) {
		if (evs[i].data.fd == p->wake_efd)
			wake_efd_drain(p->wake_efd);
		else if (evs[i].data.fd >= 0)
			dp_doorbell_drain(evs[i].data.fd);
		else
			continue; /* an engine's fd: its progress runs anyway */
		rang = true;
	}
	if (rang)
		poller_unpark(p, false);
}

/* Publishes completions, rings doorbells, retires queues whose client left
 * once nothing of theirs is in flight, parks queues long idle. */
static void poller_flush(struct poller *p)
{
	struct queue **pp = &p->queues;
	unsigned due = 0;

	while (*pp) {
		struct queue *q = *pp;

		queue_flush_cq(q);
		if (atomic_load_explicit(&q->closing, memory_order_acquire) && !q->inflight) {
			*pp = q->next;
			queue_free(p, q);
			continue;
		}
		due += ++q->idle_loops >= PARK_AFTER_LOOPS;
		pp = &q->next;
	}
	if (due && !(p->loops & (PARK_ROUND_LOOPS - 1)))
		(void)poller_arm(p, false);
}

/* Whether an engine has work in flight, or vetoes sleeping. */
static bool engines_busy(struct poller *p)
{
	for (unsigned i = 0; i < DP_ENGINES; i++)
		if (engines[i]->busy && engines[i]->busy(p) &&
		    !(engines[i]->waits && engines[i]->waits(p)))
			return true;
	for (unsigned i = 0; i < DP_ENGINES; i++)
		if (engines[i]->trywait && engines[i]->trywait(p))
			return true;
	return false;
}

/* Parks the idle queues, arms NEED_WAKEUP on the others' SQs and sleeps
 * unless work arrived meanwhile. */
static void poller_sleep(struct poller *p)
{
	struct epoll_event evs[32];
	struct queue *q;
	int n;

	/* Queues handed over since the loop looked: their kick may have been
	 * taken already (poller_check_parked), and nothing would wake us. */
	if (engines_busy(p) || atomic_load(&engine_help_wanted) ||
	    atomic_load_explicit(&p->inbox_pending, memory_order_acquire))
		return;
	/* Queues with nothing owed are parked for the sleep (armed just the
	 * same), and stay parked after it until they have work. */
	if (poller_arm(p, true)) {
		/* Quiescent while asleep: we hold no table pointer. */
		stats_poller_sleeping(p);
		atomic_store(&p->sleeping, 1);
		p->sleeps++;
		/* An offer made before `sleeping` was visible found nobody
		 * to wake (engine_help_offer): look once more. */
		n = atomic_load(&engine_help_wanted)
			    ? 0
			    : epoll_wait(p->epfd, evs, 32, p->sleep_cap_ms);
		atomic_store(&p->sleeping, 0);
		p->timed_wake = n == 0;
		stats_poller_woke(p, n);
		for (int i = 0; i < n; i++) {
			if (evs[i].data.fd == p->wake_efd)
				wake_efd_drain(p->wake_efd);
			else if (evs[i].data.fd >= 0)
				dp_doorbell_drain(evs[i].data.fd);
		}
		/* Whatever woke us (a parked queue's doorbell, a kick, the
		 * cap): one look at the parked queues, at most every sleep. */
		if (p->nparked)
			poller_unpark(p, false);
	}
	for (q = p->queues; q; q = q->next)
		dp_ring_finish_sleep(&q->pair.sq);
}

static void poller_shutdown(struct poller *p)
{
	struct queue *q;

	poller_unpark(p, true);
	for (q = p->queues; q; q = q->next)
		queue_cancel_sq(q);
	for (unsigned i = 0; i < DP_ENGINES; i++)
		if (engines[i]->cancel_all)
			engines[i]->cancel_all(p);
	for (q = p->queues; q; q = q->next)
		queue_flush_cq(q);
}

/*
 * Progress for the engines that have work: those given some since they were
 * last idle (p->active, set by engine_kick) and those that poll always (the
 * fabric, whose target side moves only when its CQs are read). An engine
 * leaves p->active once it is no longer busy; a poller with nothing in
 * flight calls no engine at all.
 */
static int engines_progress(struct poller *p)
{
	int work = 0;

	for (uint32_t m = p->active | p->always; m; m &= m - 1) {
		unsigned id = (unsigned)__builtin_ctz(m);
		const struct engine *e = engines[id];

		work += e->progress(p);
		if (!e->busy(p))
			p->active &= ~(1u << id);
	}
	return work;
}

atomic_uint engine_help_wanted;

/* Sequentially consistent with poller_sleep's store of `sleeping` and its
 * load of engine_help_wanted: either the sleeper sees the offer and stays
 * up, or this sees it asleep and wakes it. */
void engine_help_offer(void)
{
	atomic_fetch_add(&engine_help_wanted, 1);
	for (unsigned i = 0; i < cfg.pollers; i++)
		if (atomic_load(&pollers[i].sleeping))
			wake_efd_ring(pollers[i].wake_efd);
}

/* An idle loop: the engines' offered work (engine.help). */
static int engines_help(struct poller *p)
{
	int work = 0;

	for (unsigned i = 0; i < DP_ENGINES; i++)
		if (engines[i]->help)
			work += engines[i]->help(p);
	return work;
}

int poller_run_once(struct poller *p)
{
	int work = 0;

	/* Quiescent point: no table pointer from the previous loop is held
	 * past here. Pairs with the loads in qsbr_synchronize(). */
	atomic_fetch_add(&p->qs, 1);
	if (atomic_load_explicit(&p->inbox_pending, memory_order_acquire))
		poller_take_inbox(p);
	for (struct queue *q = p->queues; q; q = q->next)
		work += queue_drain_sq(p, q);
	work += engines_progress(p);
	poller_flush(p);
	if (p->nparked && !(p->loops & (PARK_CHECK_LOOPS - 1)))
		poller_check_parked(p);
	/* Only a loop that found nothing of its own, on a poller whose queues
	 * are all parked (none that a client is using: a descriptor of its
	 * own would wait behind a stripe), looks for work to take; a busy
	 * poller pays nothing for it. */
	if (!work && !p->queues && atomic_load_explicit(&engine_help_wanted, memory_order_relaxed))
		work = engines_help(p);
	p->loops++;
	return work;
}

#define RESPIN_NS 20000u

static void *poller_main(void *arg)
{
	struct poller *p = arg;
	uint64_t spin_ns = (uint64_t)cfg.spin_us * 1000u, idle_since = 0;
	bool slept = false;

	if (p->cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(p->cpu, &set);
		if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set))
			log_warn("poller %u: cannot pin to cpu %d", p->idx, p->cpu);
	}

	while (!atomic_load_explicit(&dp_stopping, memory_order_acquire)) {
		int work = poller_run_once(p);
		uint64_t t = stats_loop_end(p, work);
		if (work) {
			p->busy_loops++;
			idle_since = 0;
			slept = false;
			continue;
		}
		/* --spin-us follows work. After a sleep that brought none (its
		 * cap ran out, a kick, a doorbell of a queue still empty), spin
		 * at most RESPIN_NS before sleeping again: all of --spin-us
		 * after every sleep_cap_ms kept an idle service busy (83% of a
		 * CPU with --spin-us 1000000). */
		if (!idle_since)
			idle_since = t;
		else if (t - idle_since >= (slept && spin_ns > RESPIN_NS ? RESPIN_NS : spin_ns)) {
			poller_sleep(p);
			slept = true;
			idle_since = 0;
		}
	}
	atomic_fetch_add(&p->qs, 1);
	poller_take_inbox(p);
	poller_shutdown(p);
	return NULL;
}

/* The engines' fds join the poller's epoll set: their readiness means
 * progress is due. They are never read here, only waited on. The sleep is
 * capped by the engine that asks for the shortest one (default 200 ms).
 * Engines that poll always, and have state on this poller, are marked. */
static int poller_engine_fds(struct poller *p)
{
	p->sleep_cap_ms = 200;
	for (unsigned i = 0; i < DP_ENGINES; i++) {
		const struct engine *e = engines[i];
		int fds[DP_MAX_RAILS], n = e->wait_fds ? e->wait_fds(p, fds, DP_MAX_RAILS) : 0;
		int cap = e->sleep_cap_ms ? e->sleep_cap_ms() : 0;

		for (int k = 0; k < n; k++) {
			struct epoll_event ev = {.events = EPOLLIN, .data.fd = -1};

			if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, fds[k], &ev) < 0) {
				log_err("poller %u: epoll_ctl(%s fd): %s", p->idx, e->name,
					strerror(errno));
				return -errno;
			}
		}
		if (cap > 0 && cap < p->sleep_cap_ms)
			p->sleep_cap_ms = cap;
		if (e->poll_always && p->eng[i])
			p->always |= 1u << i;
	}
	return 0;
}

int pollers_start(void)
{
	for (unsigned i = 0; i < cfg.pollers; i++) {
		struct poller *p = &pollers[i];
		struct epoll_event ev = {.events = EPOLLIN};
		int rc;

		p->idx = i;
		p->cpu = cfg.cpus[i];
		pthread_mutex_init(&p->inbox_lock, NULL);
		p->epfd = epoll_create1(EPOLL_CLOEXEC);
		p->wake_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (p->epfd < 0 || p->wake_efd < 0)
			return -errno;
		ev.data.fd = p->wake_efd;
		if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->wake_efd, &ev) < 0)
			return -errno;
		rc = poller_engine_fds(p);
		if (rc)
			return rc;
		rc = pthread_create(&p->thread, NULL, poller_main, p);
		if (rc)
			return -rc;
		if (p->cpu >= 0)
			log_info("poller %u started on cpu %d", i, p->cpu);
		else
			log_info("poller %u started, not pinned", i);
	}
	return 0;
}

/* Called after dp_stopping is set: pollers cancel what is queued, finish
 * what is in flight, publish, and exit. Queues stay until pollers_free(). */
void pollers_stop(void)
{
	for (unsigned i = 0; i < cfg.pollers; i++) {
		struct poller *p = &pollers[i];

		if (!p->thread)
			continue;
		poller_kick(p);
		pthread_join(p->thread, NULL);
		p->thread = 0;
		/* A joined poller holds nothing: grace periods end at once. */
		atomic_store(&p->sleeping, 1);
	}
}

void pollers_free(void)
{
	for (unsigned i = 0; i < cfg.pollers; i++) {
		struct poller *p = &pollers[i];

		while (p->queues) {
			struct queue *q = p->queues;

			p->queues = q->next;
			queue_free(p, q);
		}
		for (unsigned k = DP_ENGINES; k--;)
			if (engines[k]->poller_free)
				engines[k]->poller_free(p);
		close(p->epfd);
		close(p->wake_efd);
	}
}
