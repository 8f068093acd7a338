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
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include "clock.h"
#include "engine.h"
#include "fabric.h"
#include "fabric_internal.h"
#include "gpu.h"
#include "oplist.h"
#include "rpc.h"
#include "vm.h"
#include "xfer_op.h"

#define STAGE_MAX_BUFS 64
/* Per buffer, in the same registration after the buffers: an initiator's
 * request (sent from here) and the status its owner writes back; an
 * owner's status to write. */
#define META_LEN 2048u
#define META_STATUS 1536u     /* struct dp_stage_status, written by the owner */
#define META_OWN_STATUS 1600u /* the owner's status, sent from here */
/* Exports this service stages for its peers, by id (1 ..). */
#define STAGE_MAX_EXPORTS 1024u
/* Receives an owner keeps posted per rail (on its first poller). */
#define STAGE_RX_PER_RAIL 16u
/* Initiators an owner keeps in its address vectors. */
#define STAGE_MAX_PEERS 64u

_Static_assert(sizeof(struct dp_stage_req) <= META_STATUS, "request overlaps its status");

/* The struct around a context (libfabric 1.x defines container_of, 2.x
 * does not). */
#define ctx_owner(p, T, m) ((T *)(void *)((char *)(p)-offsetof(T, m)))

struct stage_op;
struct own_op;

/* A bounce buffer and the slice it carries. */
struct stage_slice {
	struct stage_poller *sp;
	uint8_t *buf;
	struct stage_op *op; /* while the slice is live */
	uint64_t off, len;   /* of the transfer */
	bool copying;	     /* a copy in flight: the GPU's (t), or the vm worker's (vt) */
	bool vmcopy;	     /* that copy is vt */
	bool on_fabric;	     /* fabric_post'ed, done not called yet */
	bool held;	     /* the provider may hold buf: not free before release */
	bool fab_done;	     /* done was called: fab_status holds its result */
	int fab_status;
	struct gpu_ticket t;
	struct vm_ticket vt;
	struct stage_slice *next; /* the free list, or the op's live slices */
	/* Owner staging, initiator side (the target's owner stages it). */
	uint8_t *meta;	     /* META_LEN bytes, registered with buf */
	struct fab_ctx sctx; /* the request's send */
	bool send_pending;   /* to post (-FI_EAGAIN so far) */
	bool sending;	     /* posted, its completion not read */
	bool awaiting;	     /* the owner's status not seen yet */
	bool quarantined;    /* given up on: the owner may still write buf */
	bool in_req;	     /* between req_start and the end of req_wait */
	int send_err;
	int rstatus; /* the owner's answer, once neither sending nor awaiting */
	unsigned rail;
	uint64_t seq, wait_since;
	struct peer *qpeer; /* whom a quarantined buffer waits for */
	/* Owner staging, owner side: the request this buffer serves. */
	struct own_op *own;
};

/* An owner's posted receive. */
struct own_rx {
	struct fab_ctx c;
	unsigned rail;
	struct dp_stage_req *buf;
};

/* The fabric's CQ reader hands these their contexts (fab_ctx.on_cq). */
static void on_send_cq(struct poller *p, struct fab_ctx *c, int fi_err);
static void on_recv_cq(struct poller *p, struct fab_ctx *c, int fi_err);

enum own_state { OWN_BUF, OWN_FETCH, OWN_COPY, OWN_PUSH, OWN_STATUS };

/* An owner's request in service: one initiator slice. */
struct own_op {
	struct op_node node; /* first: the stage poller's own_ops */
	struct dp_stage_req req;
	enum own_state state;
	int status;
	struct segment *seg;  /* the export (a reference), or NULL */
	struct region *reg;   /* its region (a reference), or NULL */
	struct segment *fseg; /* the initiator's buffer as a remote segment */
	struct stage_slice *s;
	uint64_t cur_off, chunk;
	bool st_out; /* the status write posted, not released */
};

/* An initiator known to an owner: its addresses in our AVs. */
struct own_peer {
	unsigned nrails;
	uint32_t len[DP_MAX_RAILS];
	uint8_t addr[DP_MAX_RAILS][DP_FABRIC_ADDR_MAX];
	struct peer *pr;
};

/* One descriptor's transfer. */
struct stage_op {
	struct op_node node; /* first: its stage poller's ops */
	/* The descriptor; references on its local region (o.ra) and on the
	 * other service's segment (o.seg). */
	struct xfer_op o;
	uint8_t opcode;
	uint64_t loc_off, tgt_off;
	uint64_t next_off; /* bytes handed to slices so far */
	int status;	   /* the first error */
	struct stage_slice *live;
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
	struct op_fifo ops; /* transfers, oldest first */
	uint64_t seq;
	unsigned next_rail;
	unsigned nquar; /* quarantined buffers */
	bool closing;
	/* The owner's side (the first poller only). */
	struct own_rx *rx;
	unsigned nrx;
	void *rx_mem;
	struct region_mrs *rx_mrs;
	struct op_fifo own_ops; /* requests in service, oldest first */
	struct own_peer peers[STAGE_MAX_PEERS];
	struct peer *old_peers[STAGE_MAX_PEERS]; /* replaced, freed at exit */
	unsigned npeers, nold;
};

/* This service's rail addresses (its first poller's endpoints), which an
 * initiator sends in its requests. */
static struct dp_rpc_rail self_rail[DP_MAX_RAILS];
/* Exports we stage for peers (control thread writes, the first poller
 * reads under the grace period: a killed export is marked dead before it
 * is released, and its slot cleared at release). */
static struct segment *_Atomic staged[STAGE_MAX_EXPORTS];
static bool owner_on; /* receives posted: we stage our exports for peers */

/* Why a transfer that needs staging cannot have it (logged once). */
static const char *off_reason;

/* ---- start-up and exit (main thread) ---- */

static void owner_stop(struct stage_poller *sp)
{
	for (unsigned i = 0; i < sp->nrx; i++) {
		struct fid_ep *ep = fabric_ep(sp->p, sp->rx[i].rail);

		if (ep)
			fi_cancel(&ep->fid, &sp->rx[i].c.ctx);
	}
	fabric_mem_deregister(sp->rx_mrs);
	free(sp->rx_mem);
	free(sp->rx);
	for (unsigned i = 0; i < sp->npeers; i++)
		free(sp->peers[i].pr);
	for (unsigned i = 0; i < sp->nold; i++)
		free(sp->old_peers[i]);
}

static void stage_poller_free(struct stage_poller *sp)
{
	unsigned held = sp->nbufs - sp->nfree;

	owner_stop(sp);
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
	sp->mem_len = n * (fab_cfg.slice + META_LEN);
	sp->mem = gpu_device_count() ? gpu_pinned_alloc(sp->mem_len) : NULL;
	sp->pinned = sp->mem != NULL;
	if (!sp->mem && (fab_cfg.stage_host || !gpu_device_count()) &&
	    posix_memalign((void **)&sp->mem, 4096, sp->mem_len))
		sp->mem = NULL;
	if (!sp->mem) {
		free(sp);
		return NULL;
	}
	/* Remote access: owners of staged exports read and write it. */
	sp->mrs = fabric_mem_register_remote(sp->mem, sp->mem_len);
	if (!sp->mrs) {
		sp->nbufs = sp->nfree = 0;
		stage_poller_free(sp);
		return NULL;
	}
	for (unsigned i = 0; i < n; i++) {
		struct stage_slice *s = &sp->slices[i];

		s->sp = sp;
		s->buf = sp->mem + i * fab_cfg.slice;
		s->meta = sp->mem + n * fab_cfg.slice + i * META_LEN;
		s->sctx.on_cq = on_send_cq;
		s->next = sp->free;
		sp->free = s;
	}
	sp->nbufs = sp->nfree = (unsigned)n;
	return sp;
}

static int rx_post(struct stage_poller *sp, struct own_rx *rx)
{
	memset(rx->buf, 0, sizeof(*rx->buf));
	return (int)fi_recv(fabric_ep(sp->p, rx->rail), rx->buf, sizeof(*rx->buf),
			    fi_mr_desc(sp->rx_mrs->mr[rx->rail]), FI_ADDR_UNSPEC, &rx->c.ctx);
}

/* The owner's side, on the first poller: receives posted on every rail
 * for the requests of initiators. False when it could not be set up. */
static bool owner_start(struct stage_poller *sp)
{
	size_t n = (size_t)STAGE_RX_PER_RAIL * nrails, len = n * sizeof(struct dp_stage_req);

	sp->rx = calloc(n, sizeof(*sp->rx));
	if (!sp->rx || posix_memalign(&sp->rx_mem, 4096, len))
		return false;
	sp->rx_mrs = fabric_mem_register(sp->rx_mem, len);
	if (!sp->rx_mrs)
		return false;
	for (unsigned i = 0; i < n; i++) {
		struct own_rx *rx = &sp->rx[i];
		int rc;

		rx->c.on_cq = on_recv_cq;
		rx->rail = i / STAGE_RX_PER_RAIL;
		rx->buf = (struct dp_stage_req *)sp->rx_mem + i;
		rc = rx_post(sp, rx);
		if (rc) {
			log_err("stage: rail %u: posting a receive: %s", rx->rail,
				fi_strerror(-rc));
			return false;
		}
		sp->nrx++;
	}
	return true;
}

/* Staging is set up wherever there are rails and --stage-bufs: for local
 * memory the rails cannot register (GPU memory without FI_HMEM, or with
 * --no-hmem; host memory with --stage-host), for exports of such memory
 * that we stage for our peers, and for transfers to such exports of other
 * services that stage them (owner staging). Without it, those fail with
 * -ENOTSUP (stage_submit; peers are told DP_RPC_F_GPU_UNREGISTERED alone). */
static int stage_init(void)
{
	if (!fabric_nrails()) {
		off_reason = "there is no fabric";
		return 0;
	}
	if (fab_cfg.stage_bufs > STAGE_MAX_BUFS) {
		log_warn("stage: --stage-bufs %u: using %u", fab_cfg.stage_bufs, STAGE_MAX_BUFS);
		fab_cfg.stage_bufs = STAGE_MAX_BUFS;
	}
	if (!fab_cfg.stage_bufs) {
		off_reason = "host staging is off (--stage-bufs 0)";
		log_info("stage: off (--stage-bufs 0); GPU memory the rails cannot register "
			 "fails with ENOTSUP over the fabric, here and for our peers");
		return 0;
	}
	for (unsigned r = 0; r < nrails; r++) {
		size_t len = sizeof(self_rail[r].addr);

		if (fabric_rail_addr(r, self_rail[r].addr, &len))
			return 0;
		self_rail[r].addr_len = (uint32_t)len;
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
	if (pollers[0].eng[ENGINE_stage]) {
		owner_on = owner_start(pollers[0].eng[ENGINE_stage]);
		if (!owner_on)
			log_err("stage: the owner side could not be set up: our exports the rails "
				"cannot register (GPU memory, dp_register_mem memory) fail with "
				"ENOTSUP for peers");
	}
	log_info("stage: %u bounce buffers of %zu bytes per poller (%s), on %u rail(s)%s%s",
		 fab_cfg.stage_bufs, fab_cfg.slice,
		 gpu_device_count() ? "pinned" : "host memory, no GPU", fabric_nrails(),
		 owner_on ? "; exports the rails cannot register are staged for peers" : "",
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
	if (s->quarantined) {
		s->held = true; /* until its owner answers or is gone (quarantine_scan) */
		s->sp->nquar++;
	}
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
	if (!s->op && !s->own) {
		s->next = s->sp->free;
		s->sp->free = s;
		s->sp->nfree++;
		engine_kick(s->sp->p, ENGINE_stage);
	}
}

/* Starts s's copy of region @r's bytes from @off: to the slice's buffer
 * (@to_buf), or from it. Memory of a client process (dp_register_mem) on
 * the vm engine's worker thread (vm_copy_start), so that a page the kernel
 * waits for holds that thread, not this poller. */
static int vm_slice_copy(struct stage_slice *s, const struct region *r, uint64_t off, uint64_t n,
			 bool to_buf)
{
	int rc = vm_copy_start(s->sp->p, r, off, s->buf, n, !to_buf, &s->vt);

	if (!rc)
		s->copying = s->vmcopy = true;
	return rc;
}

/* Whether s's copy is over: 0 not yet, 1 done, or its error (-EIO for the
 * GPU's). */
static int slice_copy_poll(struct stage_slice *s)
{
	int rc;

	if (s->vmcopy) {
		if (!vm_copy_poll(s->sp->p, &s->vt))
			return 0;
		s->vmcopy = false;
		/* Left with the worker at exit: it may still write the buffer,
		 * which is never reused nor freed (stage_poller_free). */
		if (s->vt.dropped)
			s->held = true;
		return s->vt.rc ? s->vt.rc : 1;
	}
	rc = gpu_stage_poll(s->sp->p, &s->t);
	return rc < 0 ? -EIO : rc;
}

/* Starts the copy between the slice's buffer and the local region: the
 * GPU's staging stream, process_vm_readv/writev for memory of a client
 * process (dp_register_mem, on the vm worker; its error is the slice's),
 * or memcpy for host memory (--stage-host). */
static int copy_start(struct stage_slice *s, bool to_buf)
{
	struct stage_op *op = s->op;
	uint8_t *local;
	void *dst;
	const void *src;

	if (op->o.ra->kind == REGION_VM)
		return vm_slice_copy(s, op->o.ra, op->loc_off + s->off, s->len, to_buf);
	local = op->o.ra->base + op->loc_off + s->off;
	dst = to_buf ? (void *)s->buf : local;
	src = to_buf ? (const void *)local : s->buf;
	if (op->o.ra->kind != REGION_CUDA) {
		memcpy(dst, src, s->len);
		return 0;
	}
	if (gpu_stage_copy(s->sp->p, op->o.ra->device, dst, src, s->len, &s->t))
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
	rc = fabric_post(s->sp->p, op->opcode, op->o.seg, op->tgt_off + s->off, s->buf, s->sp->mrs,
			 s->len, fab_done, fab_release, s);
	if (rc) {
		s->held = s->on_fabric = false;
		op_fail(op, rc);
		slice_end(s);
	}
}

/* ---- owner staging, the initiator's side ---- */

/* What the provider addresses for @ptr in our bounce registration. */
static uint64_t stage_raddr(const struct stage_poller *sp, const void *ptr)
{
	return virt_addr ? (uint64_t)(uintptr_t)ptr : (uint64_t)((const uint8_t *)ptr - sp->mem);
}

static void req_send(struct stage_slice *s)
{
	struct stage_poller *sp = s->sp;
	struct peer *pr = s->op->o.seg->remote->peer;
	ssize_t rc;

	rc = fi_send(fabric_ep(sp->p, s->rail), s->meta, sizeof(struct dp_stage_req),
		     fi_mr_desc(sp->mrs->mr[s->rail]), pr->addr[s->rail], &s->sctx.ctx);
	if (rc == -FI_EAGAIN)
		return;
	s->send_pending = false;
	if (rc)
		s->send_err = fabric_errno((int)-rc);
	else
		s->sending = true;
}

/* Asks the owner of the slice's target to move it (rpc.h, dp_stage_req):
 * a WRITE's bytes are in buf, a READ's arrive there. */
static void req_start(struct stage_slice *s)
{
	struct stage_poller *sp = s->sp;
	struct stage_op *op = s->op;
	struct remote_seg *rs = op->o.seg->remote;
	struct dp_stage_req *q = (struct dp_stage_req *)s->meta;
	struct dp_stage_status *st = (struct dp_stage_status *)(s->meta + META_STATUS);

	if (!++sp->seq)
		sp->seq++;
	s->seq = sp->seq;
	__atomic_store_n(&st->seq, 0, __ATOMIC_RELAXED);
	*q = (struct dp_stage_req){.magic = DP_STAGE_MAGIC,
				   .version = DP_STAGE_VERSION,
				   .opcode = op->opcode,
				   .export_id = (uint32_t)rs->base,
				   .nrails = nrails,
				   .secret = rs->key[0],
				   .seg_off = op->tgt_off + s->off,
				   .len = s->len,
				   .seq = s->seq,
				   .buf_addr = stage_raddr(sp, s->buf),
				   .status_addr = stage_raddr(sp, st)};
	for (unsigned r = 0; r < nrails; r++) {
		q->rail[r] = self_rail[r];
		q->rail[r].key = fabric_mem_key(sp->mrs, r);
	}
	s->rail = sp->next_rail++ % rs->peer->nrails;
	s->send_err = s->rstatus = 0;
	s->sending = false;
	s->send_pending = s->awaiting = s->in_req = true;
	s->wait_since = dp_now_ns();
	req_send(s);
}

/* The owner's status for the slice's request is here, whole. */
static bool status_arrived(const struct stage_slice *s)
{
	const struct dp_stage_status *st = (const struct dp_stage_status *)(s->meta + META_STATUS);

	return __atomic_load_n(&st->seq, __ATOMIC_ACQUIRE) == s->seq &&
	       __atomic_load_n(&st->check, __ATOMIC_RELAXED) ==
		       DP_STAGE_CHECK(s->seq, __atomic_load_n(&st->status, __ATOMIC_RELAXED));
}

/* Where the slice stands with its owner: true while it waits (to send,
 * for the send's completion, or for the owner's status); else rstatus
 * holds the answer. */
static bool req_wait(struct stage_slice *s)
{
	const struct dp_stage_status *st = (const struct dp_stage_status *)(s->meta + META_STATUS);
	struct peer *pr = s->op->o.seg->remote->peer;
	uint64_t now;

	if (s->send_pending)
		req_send(s);
	if (s->awaiting) {
		if (status_arrived(s)) {
			int32_t rs = __atomic_load_n(&st->status, __ATOMIC_RELAXED);

			s->awaiting = false;
			/* An owner's word is 0 or an errno; anything else is
			 * the fabric's -EIO. */
			s->rstatus = rs <= 0 && rs > -4096 ? rs : -EIO;
			fabric_peer_progress(pr, dp_now_ns());
		} else if (s->send_err) {
			/* It never reached the owner: nothing of it comes. */
			s->awaiting = s->send_pending = false;
			s->rstatus = s->send_err;
		} else if (atomic_load(&pr->dead) || s->sp->closing) {
			s->awaiting = s->send_pending = false;
			s->rstatus = s->sp->closing ? -ECANCELED : -EHOSTUNREACH;
		} else if ((now = dp_now_ns()) - s->wait_since >
			   (uint64_t)fab_cfg.timeout_ms * 1000000u) {
			log_warn(
				"stage: no answer from %s for %u ms to a staged %s of %llu bytes%s",
				pr->name, fab_cfg.timeout_ms,
				s->op->opcode == DP_OP_WRITE ? "WRITE" : "READ",
				(unsigned long long)s->len,
				s->send_pending ? " (its request could not be sent)"
				: s->sending	? " (its request's send not completed)"
						: "");
			s->awaiting = s->send_pending = false;
			s->rstatus = -ETIMEDOUT;
			/* The owner may still write buf: it waits for the
			 * answer, or for the owner to be gone. */
			s->quarantined = true;
			s->qpeer = pr;
			if (fabric_peer_stalled(pr, now, (uint64_t)fab_cfg.timeout_ms * 1000000u))
				fabric_peer_lost(pr);
		}
	}
	return s->awaiting || (s->sending && !s->sp->closing);
}

/* Quarantined buffers whose owner answered at last, or is gone, return. */
static void quarantine_scan(struct stage_poller *sp)
{
	for (unsigned i = 0; i < sp->nbufs; i++) {
		struct stage_slice *s = &sp->slices[i];
		if (!s->quarantined || s->op || s->sending)
			continue;
		if (!status_arrived(s) && !atomic_load(&s->qpeer->dead) && !sp->closing)
			continue;
		s->quarantined = s->held = false;
		sp->nquar--;
		s->next = sp->free;
		sp->free = s;
		sp->nfree++;
	}
}

static bool owner_stages(const struct stage_op *op)
{
	return op->o.seg->remote->flags & DP_RPC_F_OWNER_STAGES;
}

/* A slice's next step once its current one is over: WRITE copies then
 * sends, READ receives then copies. */
static void slice_copied(struct stage_slice *s)
{
	if (s->op->opcode == DP_OP_WRITE && !s->op->status) {
		if (owner_stages(s->op))
			req_start(s);
		else
			fabric_start(s);
	} else {
		slice_end(s);
	}
}

/* One step of every live slice of op that has finished its current one. */
static int op_advance(struct stage_op *op)
{
	struct stage_slice *s, *next;
	int work = 0;

	for (s = op->live; s; s = next) {
		next = s->next;
		if (s->in_req) {
			if (req_wait(s))
				continue;
			s->in_req = s->sending = false;
			/* As when the fabric's part of it is done. */
			s->fab_done = true;
			s->fab_status = s->rstatus;
		}
		if (s->copying) {
			int rc = slice_copy_poll(s);

			if (!rc)
				continue;
			s->copying = false;
			work++;
			if (rc < 0) {
				op_fail(op, rc);
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
				int rc = copy_start(s, false);

				if (rc) {
					op_fail(op, rc);
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
	uint64_t len = op->o.len - op->next_off;
	int rc;

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
		if (owner_stages(op))
			req_start(s);
		else
			fabric_start(s);
	} else if ((rc = copy_start(s, true))) {
		op_fail(op, rc);
		slice_end(s);
	} else if (!s->copying) {
		slice_copied(s); /* memcpy: already in the buffer */
	}
	return true;
}

/* ---- owner staging, the owner's side (the first poller) ---- */

/* The initiator of @q as a peer in our AVs: known, or inserted now. */
static struct peer *own_peer(struct stage_poller *sp, const struct dp_stage_req *q)
{
	uint8_t addrs[DP_MAX_RAILS][DP_FABRIC_ADDR_MAX];
	uint32_t lens[DP_MAX_RAILS];
	unsigned n = q->nrails < nrails ? q->nrails : nrails, i;
	struct own_peer *op;
	struct peer *pr;

	for (i = 0; i < n; i++) {
		lens[i] = q->rail[i].addr_len;
		if (lens[i] > DP_FABRIC_ADDR_MAX)
			return NULL;
		memcpy(addrs[i], q->rail[i].addr, lens[i]);
	}
	for (i = 0; i < sp->npeers; i++) {
		op = &sp->peers[i];
		if (op->nrails != n || memcmp(op->len, lens, n * sizeof(lens[0])))
			continue;
		unsigned r;

		for (r = 0; r < n && !memcmp(op->addr[r], addrs[r], lens[r]); r++)
			;
		if (r < n)
			continue;
		if (!atomic_load(&op->pr->dead))
			return op->pr;
		break; /* gone once, back at the same address: a fresh peer */
	}
	pr = calloc(1, sizeof(*pr));
	if (!pr)
		return NULL;
	snprintf(pr->name, sizeof(pr->name), "a staging initiator");
	if (fabric_peer_insert(pr, (const uint8_t(*)[DP_FABRIC_ADDR_MAX])addrs, lens, n)) {
		free(pr);
		return NULL;
	}
	if (i == sp->npeers && sp->npeers == STAGE_MAX_PEERS)
		i = (unsigned)(sp->seq++ % STAGE_MAX_PEERS); /* replace one */
	if (i < sp->npeers) {
		/* Transfers of the old one may still run: freed at exit. */
		if (sp->nold == STAGE_MAX_PEERS) {
			free(pr);
			return NULL;
		}
		sp->old_peers[sp->nold++] = sp->peers[i].pr;
	} else {
		sp->npeers++;
	}
	op = &sp->peers[i];
	op->nrails = n;
	memcpy(op->len, lens, sizeof(lens));
	memcpy(op->addr, addrs, sizeof(addrs));
	op->pr = pr;
	return pr;
}

/* The export a request names, checked, with references on it and its
 * region; or the status to answer. Under the grace period: an export
 * killed meanwhile is marked dead before its slot is cleared. An export
 * that is gone (or a wrong secret) is -EIO, as an RMA to a key that was
 * deregistered is. */
static int own_export(struct own_op *o)
{
	const struct dp_stage_req *q = &o->req;
	struct segment *seg;

	if (!q->export_id || q->export_id >= STAGE_MAX_EXPORTS)
		return -EIO;
	seg = atomic_load_explicit(&staged[q->export_id], memory_order_acquire);
	if (!seg || atomic_load_explicit(&seg->dead, memory_order_acquire) ||
	    seg->fab_keys[0] != q->secret)
		return -EIO;
	if (q->opcode == DP_OP_WRITE && !(seg->access & DP_ACCESS_WRITE))
		return -EACCES;
	if (q->seg_off > seg->region->len || q->len > seg->region->len - q->seg_off)
		return -ERANGE;
	atomic_fetch_add(&seg->refs, 1);
	atomic_fetch_add(&seg->region->refs, 1);
	o->seg = seg;
	o->reg = seg->region;
	return 0;
}

/* A request arrived (on_recv_cq): queued for a bounce buffer. */
static void own_request(struct stage_poller *sp, const struct dp_stage_req *q)
{
	struct own_op *o;
	struct remote_seg *rs;
	struct peer *pr;

	if (q->magic != DP_STAGE_MAGIC || q->version != DP_STAGE_VERSION || !q->seq || !q->len ||
	    (q->opcode != DP_OP_WRITE && q->opcode != DP_OP_READ) || !q->nrails ||
	    q->nrails > DP_MAX_RAILS) {
		log_debug("stage: a malformed request was dropped");
		return;
	}
	pr = own_peer(sp, q);
	o = calloc(1, sizeof(*o));
	rs = calloc(1, sizeof(*rs));
	if (o)
		o->fseg = calloc(1, sizeof(*o->fseg));
	if (!pr || !o || !rs || !o->fseg) {
		/* Nobody to answer: its initiator times out. */
		log_debug("stage: a request could not be served (no memory or bad addresses)");
		if (o)
			free(o->fseg);
		free(o);
		free(rs);
		return;
	}
	o->req = *q;
	rs->peer = pr;
	rs->nrails = pr->nrails;
	rs->access = DP_ACCESS_RW;
	rs->len = UINT64_MAX;
	for (unsigned r = 0; r < rs->nrails; r++)
		rs->key[r] = q->rail[r].key;
	atomic_init(&o->fseg->refs, 1);
	o->fseg->remote = rs;
	snprintf(o->fseg->name, sizeof(o->fseg->name), "staging buffer");
	o->status = own_export(o);
	o->state = OWN_BUF;
	op_fifo_push(&sp->own_ops, &o->node);
	engine_kick(sp->p, ENGINE_stage);
}

static void own_st_done(void *arg, int status)
{
	(void)arg;
	(void)status;
}

static void own_st_release(void *arg, int status)
{
	struct own_op *o = arg;

	(void)status;
	o->st_out = false;
	engine_kick(o->s->sp->p, ENGINE_stage);
}

static void own_status_start(struct own_op *o)
{
	struct stage_slice *s = o->s;
	struct dp_stage_status *st = (struct dp_stage_status *)(s->meta + META_OWN_STATUS);

	o->state = OWN_STATUS;
	if (s->sp->closing)
		return;
	*st = (struct dp_stage_status){.seq = o->req.seq,
				       .status = o->status,
				       .check = DP_STAGE_CHECK(o->req.seq, o->status)};
	o->st_out = true;
	if (fabric_post(s->sp->p, DP_OP_WRITE, o->fseg, o->req.status_addr, st, s->sp->mrs,
			sizeof(*st), own_st_done, own_st_release, o))
		o->st_out = false;
}

static void own_fail(struct own_op *o, int err)
{
	if (!o->status)
		o->status = err;
	own_status_start(o);
}

/* The next chunk (at most one of our buffers) of the request. */
static void own_chunk(struct own_op *o)
{
	uint64_t left = o->req.len - o->cur_off;

	o->chunk = left < fab_cfg.slice ? left : fab_cfg.slice;
}

/* The chunk in hand is done: the next one is set up (true), or the whole
 * request is and its status goes out (false). */
static bool own_next(struct own_op *o)
{
	o->cur_off += o->chunk;
	if (o->cur_off == o->req.len) {
		own_status_start(o);
		return false;
	}
	own_chunk(o);
	return true;
}

/* Between our buffer and the export: the GPU's staging stream,
 * process_vm_readv/writev for a client's process memory (dp_register_mem,
 * on the vm worker: its unmapped pages fail the request -EFAULT), or
 * memcpy for host memory (--stage-host). */
static void own_copy(struct own_op *o, bool to_buf)
{
	struct stage_slice *s = o->s;
	uint8_t *mem;
	int rc;

	o->state = OWN_COPY;
	if (o->reg->kind == REGION_VM) {
		rc = vm_slice_copy(s, o->reg, o->req.seg_off + o->cur_off, o->chunk, to_buf);
		if (rc)
			own_fail(o, rc);
		return;
	}
	mem = o->reg->base + o->req.seg_off + o->cur_off;
	if (o->reg->kind != REGION_CUDA) {
		memcpy(to_buf ? s->buf : mem, to_buf ? mem : s->buf, o->chunk);
		return;
	}
	if (gpu_stage_copy(s->sp->p, o->reg->device, to_buf ? (void *)s->buf : (void *)mem,
			   to_buf ? (const void *)mem : s->buf, o->chunk, &s->t))
		own_fail(o, -EIO);
	else
		s->copying = true;
}

/* Our buffer to or from the initiator's: READ it (a WRITE into the
 * export) or WRITE it (a READ of the export). */
static void own_rma(struct own_op *o, uint8_t opcode)
{
	struct stage_slice *s = o->s;
	int rc;

	o->state = opcode == DP_OP_READ ? OWN_FETCH : OWN_PUSH;
	s->fab_done = false;
	s->held = s->on_fabric = true;
	rc = fabric_post(s->sp->p, opcode, o->fseg, o->req.buf_addr + o->cur_off, s->buf,
			 s->sp->mrs, o->chunk, fab_done, fab_release, s);
	if (rc) {
		s->held = s->on_fabric = false;
		own_fail(o, rc);
	}
}

/* One step of @o; true when it is over (its status released). */
static bool own_advance(struct stage_poller *sp, struct own_op *o)
{
	struct stage_slice *s = o->s;
	int rc;

	/* At exit (stage_cancel_all, after the fabric's cancel and drain):
	 * nothing more is posted nor waited for but a GPU copy. */
	if (sp->closing && (!s || !s->copying))
		return true;
	switch (o->state) {
	case OWN_BUF:
		if (!(s = sp->free))
			return false;
		sp->free = s->next;
		sp->nfree--;
		s->own = o;
		s->copying = s->on_fabric = s->fab_done = false;
		o->s = s;
		if (o->status || sp->closing) {
			own_status_start(o);
			break;
		}
		own_chunk(o);
		if (o->req.opcode == DP_OP_WRITE)
			own_rma(o, DP_OP_READ);
		else
			own_copy(o, true);
		break;
	case OWN_FETCH:
	case OWN_PUSH:
		if (!s->fab_done)
			return false;
		s->fab_done = false;
		if (s->fab_status) {
			own_fail(o, s->fab_status);
			break;
		}
		if (o->state == OWN_FETCH) {
			own_copy(o, false);
			break;
		}
		if (own_next(o))
			own_copy(o, true);
		break;
	case OWN_COPY:
		if (s->copying) {
			rc = slice_copy_poll(s);
			if (!rc)
				return false;
			s->copying = false;
			if (rc < 0) {
				own_fail(o, rc);
				break;
			}
		}
		if (sp->closing) {
			own_fail(o, -ECANCELED);
			break;
		}
		if (o->req.opcode == DP_OP_READ) {
			own_rma(o, DP_OP_WRITE);
			break;
		}
		if (own_next(o))
			own_rma(o, DP_OP_READ);
		break;
	case OWN_STATUS:
		break;
	}
	/* Over once the status went and nothing of the buffer is moving. */
	return o->state == OWN_STATUS && !o->st_out && !s->copying && !s->on_fabric;
}

static void own_free(struct stage_poller *sp, struct own_op *o)
{
	struct stage_slice *s = o->s;

	if (s)
		s->own = NULL;
	if (s && !s->held) {
		s->next = sp->free;
		sp->free = s;
		sp->nfree++;
	}
	if (o->seg) {
		region_put(o->reg);
		segment_put(o->seg);
	}
	segment_put(o->fseg);
	free(o);
}

static int own_progress(struct stage_poller *sp)
{
	struct op_node *n, *prev = NULL;
	int work = 0;

	while ((n = op_fifo_after(&sp->own_ops, prev))) {
		struct own_op *o = (struct own_op *)n;
		enum own_state was = o->state;

		if (!own_advance(sp, o)) {
			work += o->state != was;
			prev = n;
			continue;
		}
		op_fifo_unlink(&sp->own_ops, prev, n);
		own_free(sp, o);
		work++;
	}
	return work;
}

/* An initiator's request went out, or failed. */
static void on_send_cq(struct poller *p, struct fab_ctx *c, int fi_err)
{
	struct stage_slice *s = ctx_owner(c, struct stage_slice, sctx);

	if (!p->eng[ENGINE_stage])
		return;
	s->sending = false;
	if (fi_err) {
		s->send_err = fabric_errno(fi_err);
		if (s->send_err == -EHOSTUNREACH && s->op)
			fabric_peer_lost(s->op->o.seg->remote->peer);
	}
	engine_kick(p, ENGINE_stage);
}

/* An initiator's request came to the owner (or the receive failed): served,
 * and the receive posted again. */
static void on_recv_cq(struct poller *p, struct fab_ctx *c, int fi_err)
{
	struct stage_poller *sp = p->eng[ENGINE_stage];
	struct own_rx *rx = ctx_owner(c, struct own_rx, c);
	int rc;

	if (!sp || fi_err == FI_ECANCELED)
		return; /* at exit */
	if (!fi_err && owner_on)
		own_request(sp, rx->buf);
	else if (fi_err)
		log_debug("stage: a receive failed: %s", fi_strerror(fi_err));
	rc = rx_post(sp, rx);
	if (rc)
		log_err("stage: rail %u: posting a receive again: %s", rx->rail, fi_strerror(-rc));
	engine_kick(p, ENGINE_stage);
}

static void op_finish(struct stage_poller *sp, struct stage_op *op)
{
	xfer_op_finish(sp->p, &op->o, op->status);
	free(op);
}

static int stage_progress(struct poller *p)
{
	struct stage_poller *sp = p->eng[ENGINE_stage];
	struct op_node *n, *prev = NULL;
	bool more = true;
	int work = 0;

	if (!sp)
		return 0;
	for (n = sp->ops.head; n; n = n->next)
		work += op_advance((struct stage_op *)n);
	if (!op_fifo_empty(&sp->own_ops))
		work += own_progress(sp);
	if (sp->nquar)
		quarantine_scan(sp);
	/* Free buffers, one slice per transfer in turn. */
	while (more && sp->free) {
		more = false;
		for (n = sp->ops.head; n && sp->free; n = n->next)
			if (op_take_slice(sp, (struct stage_op *)n)) {
				more = true;
				work++;
			}
	}
	while ((n = op_fifo_after(&sp->ops, prev))) {
		struct stage_op *op = (struct stage_op *)n;

		if (op->live || (!op->status && op->next_off < op->o.len)) {
			prev = n;
			continue;
		}
		op_fifo_unlink(&sp->ops, prev, n);
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
	if (!rc && !sp && x->seg->remote->flags & DP_RPC_F_OWNER_STAGES) {
		/* Once per segment, as fabric_target_check does. */
		if (!atomic_exchange(&x->seg->remote->warned, 1))
			log_warn("stage: segment '%s' of %s is memory its owner stages, and %s "
				 "here; transfers to it fail with ENOTSUP",
				 x->seg->name, x->seg->remote->peer->name,
				 off_reason ? off_reason : "host staging is off");
		rc = -ENOTSUP;
	} else if (!rc && !sp) {
		static atomic_int warned;
		const char *why;
		int r = fabric_rail_unfit(x->ra, &why);

		/* Once per service: the reason does not change. */
		if (!atomic_exchange(&warned, 1))
			log_warn("stage: rail %d (%s) cannot register %s memory (%s) and %s; its "
				 "fabric transfers fail with ENOTSUP",
				 r, fabric_rail_provider((unsigned)r),
				 x->ra->kind == REGION_CUDA ? "GPU"
				 : x->ra->kind == REGION_VM ? "client process"
							    : "host",
				 why, off_reason ? off_reason : "host staging is off");
		rc = -ENOTSUP;
	}
	if (rc || !d->len) {
		/* Nothing to move: the owner hears of it now, as on the
		 * fabric. */
		if (!rc && x->notify)
			notif_deliver(NULL, x->seg, x->notify);
		queue_complete_ns(x->q, d->user_data, d->submit_ns, rc, 0, flags);
		return;
	}
	op = calloc(1, sizeof(*op));
	if (!op) {
		queue_complete_ns(x->q, d->user_data, d->submit_ns, -ENOMEM, 0, 0);
		return;
	}
	*op = (struct stage_op){
		.opcode = d->opcode, .loc_off = d->local_off, .tgt_off = d->target_off};
	xfer_op_keep(&op->o, x, flags);
	op_fifo_push(&sp->ops, &op->node);
	engine_kick(p, ENGINE_stage);
}

static bool stage_busy(const struct poller *p)
{
	const struct stage_poller *sp = p->eng[ENGINE_stage];

	return sp && (!op_fifo_empty(&sp->ops) || !op_fifo_empty(&sp->own_ops));
}

/* At shutdown the fabric engine has already cancelled our fabric transfers
 * (-ECANCELED through fab_done) and let their slices come back; GPU copies
 * in flight finish (they cannot be called back). Nothing new starts. */
static void stage_cancel_all(struct poller *p)
{
	struct stage_poller *sp = p->eng[ENGINE_stage];

	if (!sp)
		return;
	sp->closing = true;
	for (struct op_node *n = sp->ops.head; n; n = n->next)
		op_fail((struct stage_op *)n, -ECANCELED);
	while (!op_fifo_empty(&sp->ops) || !op_fifo_empty(&sp->own_ops))
		stage_progress(p);
}

/* ---- exports we stage for peers (control thread) ---- */

/* An export of memory the rails could not register (the fabric engine's
 * hook ran first and left it without registrations: GPU memory without
 * FI_HMEM, a client's process memory): given an id and a secret, which
 * peers learn from its description (rpc_server.c) and put in their requests. Not
 * staged (peers get -ENOTSUP) when we have no owner side. */
static int stage_export(struct segment *s)
{
	uint64_t secret = 0;

	if (!owner_on || s->eng[ENGINE_fabric] ||
	    !(s->region->kind == REGION_CUDA || s->region->kind == REGION_VM ||
	      (s->region->kind == REGION_HOST && fab_cfg.stage_host)))
		return 0;
	for (uint32_t id = 1; id < STAGE_MAX_EXPORTS; id++) {
		if (atomic_load(&staged[id]))
			continue;
		while (!secret)
			if (getrandom(&secret, sizeof(secret), 0) != sizeof(secret))
				return 0;
		s->stage_id = id;
		for (unsigned r = 0; r < nrails; r++)
			s->fab_keys[r] = secret;
		atomic_store_explicit(&staged[id], s, memory_order_release);
		return 0;
	}
	log_warn("stage: %u exports staged for peers already: '%s' is not (ENOTSUP for them)",
		 STAGE_MAX_EXPORTS - 1, s->name);
	return 0;
}

/* At release, after the grace period: no poller holds the pointer but
 * through a reference of its own (own_export). */
static void stage_unexport(struct segment *s)
{
	if (!s->stage_id)
		return;
	atomic_store_explicit(&staged[s->stage_id], NULL, memory_order_release);
	s->stage_id = 0;
}

const struct engine stage_engine = {
	.name = "stage",
	.init = stage_init,
	.fini = stage_fini,
	.submit = stage_submit,
	.progress = stage_progress,
	.busy = stage_busy,
	.cancel_all = stage_cancel_all,
	.segment_export = stage_export,
	.segment_unexport = stage_unexport,
};
