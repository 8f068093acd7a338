/* SPDX-License-Identifier: MIT */
/*
 * stage.c - the stage engine: transfers between local memory the rails
 * cannot register (GPU memory on rails without FI_HMEM, or with --no-hmem)
 * and segments of other services, through host bounce buffers.
 *
 * Each poller has a small ring of bounce buffers (--stage-bufs of --slice
 * bytes, pinned with cudaHostAlloc where there is a GPU), registered on
 * every rail like host memory. A transfer is cut into slices of at most one
 * buffer; each slice takes a free buffer and goes through two steps:
 *
 *   WRITE  GPU -> buffer (cudaMemcpyAsync on the poller's staging stream,
 *          gpu_stage_copy), then buffer -> fabric (fabric_post)
 *   READ   fabric -> buffer, then buffer -> GPU
 *
 * With several buffers the steps of consecutive slices overlap: while slice
 * k is on the wire, slice k+1 is copied off the GPU. Buffers are dealt out
 * one slice per transfer in turn, so a small transfer does not wait for a
 * large one to finish. The fabric side is the fabric engine's own (slices,
 * -FI_EAGAIN, retries on another rail, the progress-based timeout, a lost
 * peer, cancel): fabric_post runs it on a bounce buffer instead of a
 * region. A transfer completes once, when every slice it started is done,
 * with the first error any of them met; a buffer a failed fabric transfer
 * leaves in the provider's hands returns to the ring only when the provider
 * gives it back (the fabric's release callback).
 *
 * --stage-host (tests): host regions take this path too (the fabric does
 * not register them then), with memcpy in place of cudaMemcpyAsync, so the
 * pipeline runs on machines without a GPU.
 *
 * Threads: init/fini on the main thread; the data path on the poller that
 * owns the state (p->eng[ENGINE_stage]). docs/gpu.md, "Over the fabric".
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "fabric.h"
#include "fabric_internal.h"
#include "gpu.h"

#define STAGE_MAX_BUFS 64

struct stage_op;

/* A bounce buffer and the slice it carries. */
struct stage_slice {
	struct stage_poller *sp;
	uint8_t *buf;
	struct stage_op *op; /* while the slice is live */
	uint64_t off, len;   /* of the transfer */
	bool copying;	     /* a GPU copy in flight (t) */
	bool on_fabric;	     /* fabric_post'ed, done not called yet */
	bool held;	     /* the provider may hold buf: not free before release */
	bool fab_done;	     /* done was called: fab_status holds its result */
	int fab_status;
	struct gpu_ticket t;
	struct stage_slice *next; /* the free list, or the op's live slices */
};

/* One descriptor's transfer. */
struct stage_op {
	struct queue *q;
	uint64_t user_data, submit_ns;
	uint8_t opcode;
	struct region *local; /* a reference */
	struct segment *seg;  /* a reference */
	uint64_t loc_off, tgt_off, len;
	uint64_t next_off; /* bytes handed to slices so far */
	int status;	   /* the first error */
	struct stage_slice *live;
	struct stage_op *next;
};

struct stage_poller {
	struct poller *p;
	uint8_t *mem; /* nbufs buffers of fab_cfg.slice bytes */
	size_t mem_len;
	bool pinned; /* mem is cudaHostAlloc'ed */
	struct region_mrs *mrs;
	struct stage_slice slices[STAGE_MAX_BUFS];
	struct stage_slice *free;
	unsigned nbufs, nfree;
	struct stage_op *head, *tail;
	unsigned nops;
};

/* Why a transfer that needs staging cannot have it (logged once). */
static const char *off_reason;

/* ---- start-up and exit (main thread) ---- */

static void stage_poller_free(struct stage_poller *sp)
{
	unsigned held = sp->nbufs - sp->nfree;

	fabric_mem_deregister(sp->mrs);
	/* A buffer the provider never gave back stays allocated: freeing it
	 * under a live endpoint could let a late DMA land in reused memory. */
	if (held)
		log_warn("stage: poller %u: %u bounce buffer(s) still held by the provider at "
			 "exit; not freed",
			 sp->p->idx, held);
	else if (sp->pinned)
		gpu_pinned_free(sp->mem);
	else
		free(sp->mem);
	free(sp);
}

static struct stage_poller *stage_poller_new(struct poller *p)
{
	struct stage_poller *sp = calloc(1, sizeof(*sp));
	size_t n = fab_cfg.stage_bufs;

	if (!sp)
		return NULL;
	sp->p = p;
	sp->mem_len = n * fab_cfg.slice;
	sp->mem = gpu_device_count() ? gpu_pinned_alloc(sp->mem_len) : NULL;
	sp->pinned = sp->mem != NULL;
	if (!sp->mem && (fab_cfg.stage_host || !gpu_device_count()) &&
	    posix_memalign((void **)&sp->mem, 4096, sp->mem_len))
		sp->mem = NULL;
	if (!sp->mem) {
		free(sp);
		return NULL;
	}
	sp->mrs = fabric_mem_register(sp->mem, sp->mem_len);
	if (!sp->mrs) {
		sp->nbufs = sp->nfree = 0;
		stage_poller_free(sp);
		return NULL;
	}
	for (unsigned i = 0; i < n; i++) {
		struct stage_slice *s = &sp->slices[i];

		s->sp = sp;
		s->buf = sp->mem + i * fab_cfg.slice;
		s->next = sp->free;
		sp->free = s;
	}
	sp->nbufs = sp->nfree = (unsigned)n;
	return sp;
}

/* Staging is set up where something may need it: a GPU and a rail without
 * FI_HMEM (or --no-hmem), or --stage-host. Without it, such transfers fail
 * with -ENOTSUP (stage_submit). */
static int stage_init(void)
{
	bool need = fab_cfg.stage_host;
	unsigned r;

	for (r = 0; r < fabric_nrails() && gpu_device_count(); r++)
		if (!(rails[r].info->caps & FI_HMEM))
			need = true;
	if (!need || !fabric_nrails()) {
		off_reason = "host staging was not set up (no rail lacked FI_HMEM at start-up)";
		return 0;
	}
	if (fab_cfg.stage_bufs > STAGE_MAX_BUFS) {
		log_warn("stage: --stage-bufs %u: using %u", fab_cfg.stage_bufs, STAGE_MAX_BUFS);
		fab_cfg.stage_bufs = STAGE_MAX_BUFS;
	}
	if (!fab_cfg.stage_bufs) {
		off_reason = "host staging is off (--stage-bufs 0)";
		log_info("stage: off (--stage-bufs 0); GPU memory the rails cannot register "
			 "fails with ENOTSUP over the fabric");
		return 0;
	}
	for (unsigned i = 0; i < cfg.pollers; i++) {
		struct stage_poller *sp = stage_poller_new(&pollers[i]);

		if (!sp) {
			/* The service still runs; only staged transfers fail. */
			off_reason = "its bounce buffers could not be allocated or registered";
			log_err("stage: poller %u: %u bounce buffers of %zu bytes: no memory or no "
				"registration; staged transfers fail with ENOTSUP",
				i, fab_cfg.stage_bufs, fab_cfg.slice);
			continue;
		}
		pollers[i].eng[ENGINE_stage] = sp;
	}
	log_info("stage: %u bounce buffers of %zu bytes per poller (%s), on %u rail(s)%s",
		 fab_cfg.stage_bufs, fab_cfg.slice,
		 gpu_device_count() ? "pinned" : "host memory, no GPU", fabric_nrails(),
		 fab_cfg.stage_host ? "; --stage-host: host regions are staged" : "");
	return 0;
}

static void stage_fini(void)
{
	for (unsigned i = 0; i < cfg.pollers; i++) {
		if (pollers[i].eng[ENGINE_stage])
			stage_poller_free(pollers[i].eng[ENGINE_stage]);
		pollers[i].eng[ENGINE_stage] = NULL;
	}
}

/* ---- the data path (poller thread) ---- */

static uint32_t op_flags(const struct stage_op *op)
{
	return DP_CQE_F_FABRIC | (op->local->kind == REGION_CUDA ? DP_CQE_F_GPU : 0);
}

static void op_fail(struct stage_op *op, int err)
{
	if (!op->status)
		op->status = err;
}

/* The slice leaves its op; its buffer goes back to the ring unless the
 * provider may still hold it (then the fabric's release returns it). */
static void slice_end(struct stage_slice *s)
{
	struct stage_op *op = s->op;
	struct stage_slice **pp;

	for (pp = &op->live; *pp != s; pp = &(*pp)->next)
		;
	*pp = s->next;
	s->op = NULL;
	if (!s->held) {
		s->next = s->sp->free;
		s->sp->free = s;
		s->sp->nfree++;
	}
}

static void fab_done(void *arg, int status)
{
	struct stage_slice *s = arg;

	s->on_fabric = false;
	s->fab_done = true;
	s->fab_status = status;
	engine_kick(s->sp->p, ENGINE_stage);
}

static void fab_release(void *arg, int status)
{
	struct stage_slice *s = arg;

	(void)status;
	s->held = false;
	if (!s->op) {
		s->next = s->sp->free;
		s->sp->free = s;
		s->sp->nfree++;
		engine_kick(s->sp->p, ENGINE_stage);
	}
}

/* Starts the copy between the slice's buffer and the local region: the
 * GPU's staging stream, or memcpy for host memory (--stage-host). */
static int copy_start(struct stage_slice *s, bool to_buf)
{
	struct stage_op *op = s->op;
	uint8_t *local = op->local->base + op->loc_off + s->off;
	void *dst = to_buf ? (void *)s->buf : local;
	const void *src = to_buf ? (const void *)local : s->buf;

	if (op->local->kind != REGION_CUDA) {
		memcpy(dst, src, s->len);
		return 0;
	}
	if (gpu_stage_copy(s->sp->p, op->local->device, dst, src, s->len, &s->t))
		return -EIO;
	s->copying = true;
	return 0;
}

static void fabric_start(struct stage_slice *s)
{
	struct stage_op *op = s->op;
	int rc;

	s->fab_done = false;
	s->held = true;
	s->on_fabric = true;
	rc = fabric_post(s->sp->p, op->opcode, op->seg, op->tgt_off + s->off, s->buf, s->sp->mrs,
			 s->len, fab_done, fab_release, s);
	if (rc) {
		s->held = s->on_fabric = false;
		op_fail(op, rc);
		slice_end(s);
	}
}

/* A slice's next step once its current one is over: WRITE copies then
 * sends, READ receives then copies. */
static void slice_copied(struct stage_slice *s)
{
	if (s->op->opcode == DP_OP_WRITE && !s->op->status)
		fabric_start(s);
	else
		slice_end(s);
}

/* One step of every live slice of op that has finished its current one. */
static int op_advance(struct stage_op *op)
{
	struct stage_slice *s, *next;
	int work = 0;

	for (s = op->live; s; s = next) {
		next = s->next;
		if (s->copying) {
			int rc = gpu_stage_poll(s->sp->p, &s->t);

			if (!rc)
				continue;
			s->copying = false;
			work++;
			if (rc < 0) {
				op_fail(op, -EIO);
				slice_end(s);
				continue;
			}
			slice_copied(s);
		} else if (s->fab_done) {
			s->fab_done = false;
			work++;
			if (s->fab_status) {
				op_fail(op, s->fab_status);
				slice_end(s);
			} else if (op->opcode == DP_OP_READ && !op->status) {
				if (copy_start(s, false)) {
					op_fail(op, -EIO);
					slice_end(s);
				} else if (!s->copying) {
					slice_end(s);
				}
			} else {
				slice_end(s);
			}
		}
	}
	return work;
}

/* Gives op the next free buffer for its next slice; false when there is
 * none or op has nothing left to start. */
static bool op_take_slice(struct stage_poller *sp, struct stage_op *op)
{
	struct stage_slice *s = sp->free;
	uint64_t len = op->len - op->next_off;

	if (!s || op->status || !len)
		return false;
	sp->free = s->next;
	sp->nfree--;
	if (len > fab_cfg.slice)
		len = fab_cfg.slice;
	s->op = op;
	s->off = op->next_off;
	s->len = len;
	s->copying = s->on_fabric = s->fab_done = false;
	s->next = op->live;
	op->live = s;
	op->next_off += len;
	if (op->opcode == DP_OP_READ) {
		fabric_start(s);
	} else if (copy_start(s, true)) {
		op_fail(op, -EIO);
		slice_end(s);
	} else if (!s->copying) {
		slice_copied(s); /* memcpy: already in the buffer */
	}
	return true;
}

static void op_finish(struct stage_poller *sp, struct stage_op *op)
{
	struct queue *q = op->q;

	q->inflight--;
	queue_complete_ns(q, op->user_data, op->submit_ns, op->status, op->status ? 0 : op->len,
			  op_flags(op));
	region_put(op->local);
	segment_put(op->seg);
	sp->nops--;
	free(op);
}

static int stage_progress(struct poller *p)
{
	struct stage_poller *sp = p->eng[ENGINE_stage];
	struct stage_op **pp, *op, *prev = NULL;
	bool more = true;
	int work = 0;

	if (!sp)
		return 0;
	for (op = sp->head; op; op = op->next)
		work += op_advance(op);
	/* Free buffers, one slice per transfer in turn. */
	while (more && sp->free) {
		more = false;
		for (op = sp->head; op && sp->free; op = op->next)
			if (op_take_slice(sp, op)) {
				more = true;
				work++;
			}
	}
	for (pp = &sp->head; (op = *pp);) {
		if (op->live || (!op->status && op->next_off < op->len)) {
			prev = op;
			pp = &op->next;
			continue;
		}
		*pp = op->next;
		if (sp->tail == op)
			sp->tail = prev;
		op_finish(sp, op);
		work++;
	}
	return work;
}

static void stage_submit(struct poller *p, const struct xfer *x)
{
	struct stage_poller *sp = p->eng[ENGINE_stage];
	const struct dp_desc *d = x->d;
	uint32_t flags = DP_CQE_F_FABRIC | (x->ra->kind == REGION_CUDA ? DP_CQE_F_GPU : 0);
	struct stage_op *op;
	int rc;

	rc = fabric_target_check(p, x->seg);
	if (!rc && !sp) {
		static atomic_int warned;
		const char *why;
		int r = fabric_rail_unfit(x->ra, &why);

		/* Once per service: the reason does not change. */
		if (!atomic_exchange(&warned, 1))
			log_warn("stage: rail %d (%s) cannot register %s memory (%s) and %s; its "
				 "fabric transfers fail with ENOTSUP",
				 r, fabric_rail_provider((unsigned)r),
				 x->ra->kind == REGION_CUDA ? "GPU" : "host", why,
				 off_reason ? off_reason : "host staging is off");
		rc = -ENOTSUP;
	}
	if (rc || !d->len) {
		queue_complete_ns(x->q, d->user_data, d->submit_ns, rc, 0, flags);
		return;
	}
	op = calloc(1, sizeof(*op));
	if (!op) {
		queue_complete_ns(x->q, d->user_data, d->submit_ns, -ENOMEM, 0, 0);
		return;
	}
	atomic_fetch_add(&x->ra->refs, 1);
	atomic_fetch_add(&x->seg->refs, 1);
	*op = (struct stage_op){.q = x->q,
				.user_data = d->user_data,
				.submit_ns = d->submit_ns,
				.opcode = d->opcode,
				.local = x->ra,
				.seg = x->seg,
				.loc_off = d->local_off,
				.tgt_off = d->target_off,
				.len = d->len};
	x->q->inflight++;
	if (sp->tail)
		sp->tail->next = op;
	else
		sp->head = op;
	sp->tail = op;
	sp->nops++;
	engine_kick(p, ENGINE_stage);
}

static bool stage_busy(const struct poller *p)
{
	const struct stage_poller *sp = p->eng[ENGINE_stage];

	return sp && sp->head;
}

/* At shutdown the fabric engine has already cancelled our fabric transfers
 * (-ECANCELED through fab_done) and let their slices come back; GPU copies
 * in flight finish (they cannot be called back). Nothing new starts. */
static void stage_cancel_all(struct poller *p)
{
	struct stage_poller *sp = p->eng[ENGINE_stage];

	if (!sp)
		return;
	for (struct stage_op *op = sp->head; op; op = op->next)
		op_fail(op, -ECANCELED);
	while (sp->head)
		stage_progress(p);
}

const struct engine stage_engine = {
	.name = "stage",
	.init = stage_init,
	.fini = stage_fini,
	.submit = stage_submit,
	.progress = stage_progress,
	.busy = stage_busy,
	.cancel_all = stage_cancel_all,
};
