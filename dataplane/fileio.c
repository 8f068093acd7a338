/* SPDX-License-Identifier: MIT */
/*
 * fileio.c - the io_uring file engine: one ring per poller, fixed buffers,
 * slices, staging through the GPU, progress and cancel. File regions
 * themselves are file_region.c (fileio_internal.h). See fileio.h.
 */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault.h"
#include "engine.h"
#include "fileio.h"
#include "fileio_internal.h"
#include "gpu.h"
#include "stats.h"

struct fileio_config fio_cfg = {.depth = 32, .slice = 1u << 20, .staging = 64u << 20};

/* Fixed-buffer slots per ring, and the most one may hold (the kernel's
 * limit): a host region takes one slot per GiB, at its first file I/O. */
#define FBUF_SLOTS 1024
#define FBUF_CHUNK (1ull << 30)

/* One transfer between a file region and a host or GPU region. */
struct file_op {
	struct queue *q;
	uint64_t user_data, submit_ns;
	struct region *file, *host; /* references held until it completes */
	uint8_t *mem;		    /* address of the transfer's byte 0 (host or GPU) */
	int dev;		    /* GPU of mem, or -1: host memory */
	uint64_t pos;		    /* file offset of the transfer's byte 0 */
	uint64_t len;
	uint64_t issued;   /* bytes handed to slices so far */
	uint32_t inflight; /* its slices not yet finished */
	bool to_file;	   /* host -> file; else file -> host */
	bool queued;	   /* on the poller's list of ops with bytes to issue */
	int status;	   /* the first error; no slice is issued after one */
	struct file_op *next;
};

/*
 * One read or write of the kernel's, resubmitted until done or failed. A
 * slice of a GPU transfer goes through a pinned staging buffer in two
 * stages: file -> buffer (io_uring), then buffer -> GPU (cudaMemcpyAsync);
 * or GPU -> buffer, then buffer -> file. While one slice's buffer is in the
 * kernel another's is on the copy engine: that is the pipeline.
 */
struct file_slice {
	struct file_op *op;
	uint64_t off; /* in the transfer */
	uint32_t len, done;
	bool direct;
	bool fixed;		 /* its last read or write went through a fixed buffer */
	uint8_t *buf;		 /* staging buffer of a GPU transfer, else NULL */
	struct gpu_ticket t;	 /* its copy, while in the GPU stage */
	struct file_slice *next; /* free list, or the list of GPU stages */
};

struct fileio_poller *rings[DP_MAX_POLLERS];
unsigned nrings;
bool fixed_files;
static bool fixed_bufs; /* every ring has a sparse table of FBUF_SLOTS */
static size_t page_size;
static bool fbuf_used[FBUF_SLOTS]; /* under slot_lock (file_region.c) */

/* ---- start-up and exit ---- */

/* The poller's share of --staging, as buffers of one slice each; none
 * without a GPU (GPU file transfers then answer -ENOTSUP). */
static void staging_alloc(struct fileio_poller *fp)
{
	size_t n = fio_cfg.staging / cfg.pollers / fio_cfg.slice;

	fp->gpu_tail = &fp->gpu_head;
	if (!gpu_device_count() || !n)
		return;
	fp->bufs = calloc(n, sizeof(*fp->bufs));
	fp->stage_mem = fp->bufs ? gpu_pinned_alloc(n * fio_cfg.slice) : NULL;
	if (!fp->stage_mem) {
		free(fp->bufs);
		fp->bufs = NULL;
		log_warn("fileio: no staging buffers; file transfers with GPU memory are refused");
		return;
	}
	for (size_t i = 0; i < n; i++)
		fp->bufs[i] = fp->stage_mem + i * fio_cfg.slice;
	fp->nbufs = fp->nfree = (unsigned)n;
}

static int ring_open(struct fileio_poller *fp)
{
	/* Completions that need task work wait for our next kernel entry
	 * (flagged in the SQ ring) instead of interrupting the poller. */
	struct io_uring_params prm = {.flags = IORING_SETUP_COOP_TASKRUN |
					       IORING_SETUP_TASKRUN_FLAG};
	int rc = io_uring_queue_init_params(fio_cfg.depth, &fp->ring, &prm);

	if (rc == -EINVAL) {
		memset(&prm, 0, sizeof(prm));
		rc = io_uring_queue_init_params(fio_cfg.depth, &fp->ring, &prm);
	}
	return rc;
}

static void fileio_fini(void);

static int fileio_init(void)
{
	int rc = 0;

	page_size = (size_t)sysconf(_SC_PAGESIZE);
	rc = file_root_open();
	if (rc)
		return rc;
	fixed_files = fixed_bufs = true;
	for (nrings = 0; nrings < cfg.pollers; nrings++) {
		struct fileio_poller *fp = calloc(1, sizeof(*fp));

		if (!fp)
			return -ENOMEM;
		fp->slices = calloc(fio_cfg.depth, sizeof(*fp->slices));
		if (!fp->slices || (rc = ring_open(fp)) < 0) {
			free(fp->slices);
			free(fp);
			break;
		}
		for (unsigned i = 0; i < fio_cfg.depth; i++) {
			fp->slices[i].next = fp->free;
			fp->free = &fp->slices[i];
		}
		fp->p = &pollers[nrings];
		staging_alloc(fp);
		if (io_uring_register_files_sparse(&fp->ring, FILE_SLOTS) < 0)
			fixed_files = false;
		if (io_uring_register_buffers_sparse(&fp->ring, FBUF_SLOTS) < 0)
			fixed_bufs = false;
		rings[nrings] = fp;
		pollers[nrings].eng[ENGINE_file] = fp;
	}
	if (rc < 0) {
		/* All or none: a poller without a ring could not serve a
		 * queue that uses files. */
		log_warn("fileio: io_uring unavailable (%s); file regions are refused",
			 strerror(-rc));
		fileio_fini();
		return 0;
	}
	log_info("fileio: %u ring(s), depth %u, slice %zu, %s files, %s buffers, file root %s, "
		 "staging %u buffer(s) per ring",
		 nrings, fio_cfg.depth, fio_cfg.slice, fixed_files ? "registered" : "plain",
		 fixed_bufs ? "fixed" : "plain", fio_cfg.root[0] ? fio_cfg.root : "(none)",
		 rings[0] ? rings[0]->nbufs : 0);
	return 0;
}

static void fileio_fini(void)
{
	for (unsigned i = 0; i < nrings; i++) {
		struct fileio_poller *fp = rings[i];

		io_uring_queue_exit(&fp->ring);
		while (fp->ops_free) {
			struct file_op *op = fp->ops_free;

			fp->ops_free = op->next;
			free(op);
		}
		free(fp->slices);
		gpu_pinned_free(fp->stage_mem);
		free(fp->bufs);
		free(fp);
		rings[i] = NULL;
		pollers[i].eng[ENGINE_file] = NULL;
	}
	nrings = 0;
	file_root_close();
}

/* ---- fixed buffers: host regions registered with the rings ---- */

/* Slots [base, base + n) of every ring's buffer table hold @reg's memory,
 * one GiB per slot. */
static void fbuf_iovs(const struct region *reg, struct iovec *iov, bool empty)
{
	for (unsigned i = 0; i < reg->fbuf_n; i++) {
		uint64_t at = (uint64_t)i * FBUF_CHUNK, left = reg->map_len - at;

		iov[i].iov_base = empty ? NULL : (uint8_t *)reg->map + at;
		iov[i].iov_len = empty ? 0 : left < FBUF_CHUNK ? left : FBUF_CHUNK;
	}
}

/*
 * Poller, at a region's first file I/O on this ring: makes host region
 * @reg fixed buffers of the ring (the kernel pins its pages once, not at
 * every read and write). Slots are taken once per region, at the same
 * index on every ring. false: no slots left, or the kernel refused (a
 * memlock limit); the region then goes by address.
 */
static __attribute__((noinline)) bool fbuf_register(struct fileio_poller *fp, struct region *reg,
						    uint64_t bit)
{
	struct iovec iov[FBUF_SLOTS];
	unsigned n;

	pthread_mutex_lock(&slot_lock);
	if (!reg->fbuf_n) {
		unsigned want = (unsigned)((reg->map_len + FBUF_CHUNK - 1) / FBUF_CHUNK), run = 0;

		for (unsigned i = 0; i < FBUF_SLOTS && run < want; i++) {
			run = fbuf_used[i] ? 0 : run + 1;
			if (run == want) {
				reg->fbuf_base = (int)(i + 1 - want);
				reg->fbuf_n = want;
				for (unsigned k = 0; k < want; k++)
					fbuf_used[reg->fbuf_base + k] = true;
			}
		}
	}
	n = reg->fbuf_n;
	pthread_mutex_unlock(&slot_lock);
	if (n) {
		fbuf_iovs(reg, iov, false);
		if (io_uring_register_buffers_update_tag(&fp->ring, (unsigned)reg->fbuf_base, iov,
							 NULL, n) == (int)n) {
			atomic_fetch_or_explicit(&reg->fbuf_rings, bit, memory_order_release);
			return true;
		}
	}
	log_debug("fileio: host region of %zu bytes goes by address (%s)", reg->map_len,
		  n ? "the kernel refused its registration" : "no fixed-buffer slots left");
	atomic_store(&reg->fbuf_failed, true);
	return false;
}

/* The per-slice check: two loads once the region is registered here. */
static inline bool fbuf_ready(struct fileio_poller *fp, struct region *reg)
{
	uint64_t bit = 1ull << fp->p->idx;

	if (atomic_load_explicit(&reg->fbuf_rings, memory_order_acquire) & bit)
		return true;
	if (!fixed_bufs || atomic_load_explicit(&reg->fbuf_failed, memory_order_relaxed))
		return false;
	return fbuf_register(fp, reg, bit);
}

static void fbuf_release(struct region *reg)
{
	uint64_t mask = atomic_load(&reg->fbuf_rings);
	struct iovec iov[FBUF_SLOTS];

	if (!reg->fbuf_n)
		return;
	/* No slice uses the region any more (each held a reference). */
	fbuf_iovs(reg, iov, true);
	for (unsigned r = 0; r < nrings; r++)
		if (mask & (1ull << r))
			io_uring_register_buffers_update_tag(
				&rings[r]->ring, (unsigned)reg->fbuf_base, iov, NULL, reg->fbuf_n);
	pthread_mutex_lock(&slot_lock);
	for (unsigned k = 0; k < reg->fbuf_n; k++)
		fbuf_used[reg->fbuf_base + k] = false;
	pthread_mutex_unlock(&slot_lock);
	reg->fbuf_n = 0;
}

/* ---- the data path (poller) ---- */

static void op_finish(struct fileio_poller *fp, struct file_op *op)
{
	struct queue *q = op->q;

	q->inflight--;
	queue_complete_ns(q, op->user_data, op->submit_ns, op->status, op->status ? 0 : op->len,
			  DP_CQE_F_FILE);
	region_put(op->file);
	region_put(op->host);
	op->next = fp->ops_free;
	fp->ops_free = op;
}

static void op_enqueue(struct fileio_poller *fp, struct file_op *op)
{
	op->next = NULL;
	op->queued = true;
	if (fp->tail)
		fp->tail->next = op;
	else
		fp->head = op;
	fp->tail = op;
}

static void fileio_submit(struct poller *p, const struct xfer *x)
{
	struct fileio_poller *fp = p->eng[ENGINE_file];
	struct queue *q = x->q;
	const struct dp_desc *d = x->d;
	struct region *local = x->ra, *target = x->rb;
	bool local_file = local->kind == REGION_FILE;
	struct region *file = local_file ? local : target, *host = local_file ? target : local;
	/* WRITE moves local -> target, READ target -> local. */
	struct region *dst = d->opcode == DP_OP_WRITE ? target : local;
	struct file_op *op;

	/* file <-> file has no memory to go through; GPU memory goes through
	 * staging buffers, which exist only with a GPU (docs/files.md). */
	if (!fp || host->kind == REGION_FILE || (host->kind == REGION_CUDA && !fp->nbufs)) {
		queue_complete_ns(q, d->user_data, d->submit_ns, -ENOTSUP, 0, DP_CQE_F_FILE);
		return;
	}
	if (!d->len) {
		queue_complete_ns(q, d->user_data, d->submit_ns, 0, 0, DP_CQE_F_FILE);
		return;
	}
	op = fp->ops_free;
	if (op)
		fp->ops_free = op->next;
	else if (!(op = malloc(sizeof(*op)))) {
		queue_complete_ns(q, d->user_data, d->submit_ns, -ENOMEM, 0, 0);
		return;
	}
	/* Alive for this loop (QSBR); the references keep them until the
	 * kernel has given back every slice. */
	atomic_fetch_add(&file->refs, 1);
	atomic_fetch_add(&host->refs, 1);
	*op = (struct file_op){
		.q = q,
		.user_data = d->user_data,
		.submit_ns = d->submit_ns,
		.file = file,
		.host = host,
		.mem = host->base + (local_file ? d->target_off : d->local_off),
		.dev = host->kind == REGION_CUDA ? host->device : -1,
		.pos = file->file_off + (local_file ? d->local_off : d->target_off),
		.len = d->len,
		.to_file = dst == file,
	};
	q->inflight++;
	op_enqueue(fp, op);
	engine_kick(p, ENGINE_file);
}

/*
 * Length of the slice at transfer offset @at, and whether it may go direct.
 * Cuts fall on page (and direct-alignment) boundaries of the file, so a
 * transfer goes as an unaligned head and tail through the page cache and
 * everything between them direct: a direct write never shares a page with
 * a buffered one in flight, whose writeback could bring stale bytes back.
 */
static uint32_t slice_len(const struct file_op *op, const struct file_region *f, uint64_t at,
			  bool *direct)
{
	uint64_t left = op->len - at, n = left < fio_cfg.slice ? left : fio_cfg.slice;
	uint64_t pos = op->pos + at, a = f->off_align > page_size ? f->off_align : page_size;

	*direct = false;
	if (f->dfd < 0)
		return (uint32_t)n;
	if (pos % a)
		return (uint32_t)(n < a - pos % a ? n : a - pos % a);
	if (n < a)
		return (uint32_t)n;
	n -= n % a;
	/* Staging buffers are page-aligned. */
	*direct = op->dev >= 0 || (uintptr_t)(op->mem + at) % f->mem_align == 0;
	return (uint32_t)n;
}

static void slice_prep(struct fileio_poller *fp, struct file_slice *s)
{
	struct file_op *op = s->op;
	struct file_region *f = op->file->eng[ENGINE_file];
	struct io_uring_sqe *sqe = io_uring_get_sqe(&fp->ring);
	int slot = s->direct ? f->dslot : f->slot, fd = s->direct ? f->dfd : op->file->fd;
	uint8_t *mem = (s->buf ? s->buf : op->mem + s->off) + s->done;
	uint64_t pos = op->pos + s->off + s->done;
	unsigned n = s->len - s->done;
	struct region *h = op->host;
	int buf = -1;

	/* A fixed buffer when the slice lies within one of the region's. */
	if (!s->buf && h->kind == REGION_HOST && fbuf_ready(fp, h)) {
		uint64_t at = (uint64_t)(mem - (uint8_t *)h->map);

		if (at / FBUF_CHUNK == (at + n - 1) / FBUF_CHUNK)
			buf = h->fbuf_base + (int)(at / FBUF_CHUNK);
	}
	s->fixed = buf >= 0;
	/* Never NULL: the SQ has at least depth entries and at most depth
	 * slices (each with at most one SQE) are in flight. */
	if (buf >= 0 && op->to_file)
		io_uring_prep_write_fixed(sqe, slot >= 0 ? slot : fd, mem, n, pos, buf);
	else if (buf >= 0)
		io_uring_prep_read_fixed(sqe, slot >= 0 ? slot : fd, mem, n, pos, buf);
	else if (op->to_file)
		io_uring_prep_write(sqe, slot >= 0 ? slot : fd, mem, n, pos);
	else
		io_uring_prep_read(sqe, slot >= 0 ? slot : fd, mem, n, pos);
	if (slot >= 0)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, s);
}

/* The kernel's error for a slice as the descriptor's status. What a user
 * can act on passes; the rest is an I/O error to them (EFAULT and EBADF
 * mean other things in this API). */
static int slice_errno(int res)
{
	switch (-res) {
	case EIO:
	case ENOSPC:
	case EDQUOT:
	case EFBIG:
	case EROFS:
	case EPERM:
	case ENOMEM:
		return res;
	default:
		return -EIO;
	}
}

/* The slice is over (done, failed or cancelled): it, and its staging
 * buffer, go back; the op completes with its last slice. */
static void slice_finish(struct fileio_poller *fp, struct file_slice *s)
{
	struct file_op *op = s->op;

	if (s->buf)
		fp->bufs[fp->nfree++] = s->buf;
	s->next = fp->free;
	fp->free = s;
	fp->inflight--;
	if (!--op->inflight && !op->queued && (op->status || op->issued == op->len))
		op_finish(fp, op);
}

/* The GPU stage of a slice: GPU -> buffer before its write, buffer -> GPU
 * after its read. The slice waits on the GPU list; a copy that cannot
 * start fails the op (-EIO). */
static void gpu_stage(struct fileio_poller *fp, struct file_slice *s)
{
	struct file_op *op = s->op;
	uint8_t *gpu = op->mem + s->off;
	int rc = op->to_file ? gpu_stage_copy(fp->p, op->dev, s->buf, gpu, s->len, &s->t)
			     : gpu_stage_copy(fp->p, op->dev, gpu, s->buf, s->len, &s->t);

	if (rc) {
		if (!op->status)
			op->status = rc;
		slice_finish(fp, s);
		return;
	}
	s->next = NULL;
	*fp->gpu_tail = s;
	fp->gpu_tail = &s->next;
	fp->ngpu++;
}

/* Slices whose GPU copy finished go on: to the file (a write), or out
 * (a read). A stage that failed fails its op with -EIO. */
static int gpu_reap(struct fileio_poller *fp)
{
	struct file_slice **pp = &fp->gpu_head, *s;
	int n = 0;

	while ((s = *pp)) {
		int rc = gpu_stage_poll(fp->p, &s->t);

		if (!rc) {
			pp = &s->next;
			continue;
		}
		*pp = s->next;
		fp->ngpu--;
		n++;
		if (rc < 0 && !s->op->status)
			s->op->status = -EIO;
		if (s->op->to_file && !s->op->status)
			slice_prep(fp, s);
		else
			slice_finish(fp, s);
	}
	fp->gpu_tail = pp;
	return n;
}

static void slice_done(struct fileio_poller *fp, struct file_slice *s, int res)
{
	struct file_op *op = s->op;
	struct file_region *f = op->file->eng[ENGINE_file];

	if (res > 0) {
		s->done += (uint32_t)res;
		if (s->done < s->len && !op->status) {
			/* Short: the rest goes again, through the page cache
			 * when it no longer starts aligned. */
			if (s->done % f->off_align)
				s->direct = false;
			slice_prep(fp, s);
			return;
		}
		if (s->done == s->len) {
			atomic_fetch_add_explicit(s->direct ? &f->direct_ios : &f->buffered_ios, 1,
						  memory_order_relaxed);
			atomic_fetch_add_explicit(s->direct ? &f->direct_bytes : &f->buffered_bytes,
						  s->len, memory_order_relaxed);
			stats_file_slice(fp->p, s->direct, s->len);
			if (s->fixed)
				atomic_fetch_add_explicit(&f->fixed_ios, 1, memory_order_relaxed);
			if (s->buf && !op->to_file && !op->status) {
				gpu_stage(fp, s);
				return;
			}
		}
	} else if ((res == -EAGAIN || res == -EINTR) && !op->status) {
		slice_prep(fp, s);
		return;
	} else if (res == -EINVAL && s->direct && !op->status) {
		/* The file system refused this direct I/O after all. */
		s->direct = false;
		slice_prep(fp, s);
		return;
	} else if (!op->status) {
		/* 0: end of file on a read (the file is shorter than the
		 * region), or a write that moved nothing. */
		op->status = res ? slice_errno(res) : -EIO;
	}
	slice_finish(fp, s);
}

/* Hands out slices round robin, one per op per turn, until the depth is
 * used up. Ops that failed or whose queue is closing leave the list. */
static int fill(struct fileio_poller *fp)
{
	int n = 0;

	while (fp->head && fp->inflight < fio_cfg.depth) {
		struct file_op *op = fp->head;
		struct file_slice *s;

		fp->head = op->next;
		if (!fp->head)
			fp->tail = NULL;
		op->queued = false;
		if (!op->status && atomic_load_explicit(&op->q->closing, memory_order_relaxed))
			op->status = -ECANCELED;
		if (op->status) {
			if (!op->inflight)
				op_finish(fp, op);
			continue;
		}
		if (op->dev >= 0 && !fp->nfree) {
			/* Every staging buffer is in the pipeline: the op
			 * waits at the head for the next one. */
			op->queued = true;
			if (!fp->head)
				fp->tail = op;
			fp->head = op;
			break;
		}
		s = fp->free;
		fp->free = s->next;
		*s = (struct file_slice){.op = op, .off = op->issued};
		s->len = slice_len(op, op->file->eng[ENGINE_file], op->issued, &s->direct);
		op->issued += s->len;
		op->inflight++;
		fp->inflight++;
		n++;
		if (op->dev >= 0)
			s->buf = fp->bufs[--fp->nfree];
		if (s->buf && op->to_file)
			gpu_stage(fp, s);
		else
			slice_prep(fp, s);
		if (op->issued < op->len)
			op_enqueue(fp, op);
	}
	return n;
}

static int reap(struct fileio_poller *fp)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;

	io_uring_for_each_cqe(&fp->ring, head, cqe)
	{
		int res = DP_FAULT(URING_EIO) ? -EIO : DP_FAULT(URING_EAGAIN) ? -EAGAIN : cqe->res;

		slice_done(fp, io_uring_cqe_get_data(cqe), res);
		n++;
	}
	io_uring_cq_advance(&fp->ring, n);
	return (int)n;
}

/* One system call at most: posts what was prepared and, when the kernel
 * flagged task work (COOP_TASKRUN), lets it post the completions. */
static void kick(struct fileio_poller *fp)
{
	if (io_uring_sq_ready(&fp->ring) ||
	    IO_URING_READ_ONCE(*fp->ring.sq.kflags) & IORING_SQ_TASKRUN) {
		/* A failed submission leaves the SQEs in the SQ: the next
		 * loop's kick posts them (fileio_busy keeps the poller up). */
		if (!DP_FAULT(URING_SUBMIT))
			io_uring_submit_and_get_events(&fp->ring);
	}
}

static int fileio_progress(struct poller *p)
{
	struct fileio_poller *fp = p->eng[ENGINE_file];
	int work;

	if (!fp || (!fp->inflight && !fp->head))
		return 0;
	kick(fp);
	work = reap(fp);
	if (fp->ngpu)
		work += gpu_reap(fp);
	work += fill(fp);
	if (io_uring_sq_ready(&fp->ring) && !DP_FAULT(URING_SUBMIT))
		io_uring_submit(&fp->ring);
	return work;
}

static bool fileio_busy(const struct poller *p)
{
	const struct fileio_poller *fp = p->eng[ENGINE_file];

	return fp && (fp->inflight || fp->head);
}

static void fileio_cancel_all(struct poller *p)
{
	struct fileio_poller *fp = p->eng[ENGINE_file];

	if (!fp)
		return;
	for (struct file_op *op = fp->head; op; op = op->next)
		if (!op->status)
			op->status = -ECANCELED;
	/* Slices in flight own memory of ours until the kernel gives them
	 * back: wait for every one. fill() issues nothing now, it only lets
	 * the cancelled ops go as room appears. */
	while (fp->head || fp->inflight) {
		fill(fp);
		if (!fp->inflight)
			continue;
		/* Wait in the kernel only for slices that are in it. */
		if (fp->inflight > fp->ngpu)
			io_uring_submit_and_wait(&fp->ring, 1);
		reap(fp);
		gpu_reap(fp);
	}
}

/* The last reference to a region: a file region's fds and slots, or a host
 * region's fixed-buffer slots if file I/O registered it. */
static void fileio_region_close(struct region *reg)
{
	if (reg->kind == REGION_FILE && reg->eng[ENGINE_file])
		file_region_close(reg);
	else if (reg->kind == REGION_HOST)
		fbuf_release(reg);
}

const struct engine file_engine = {
	.name = "file",
	.init = fileio_init,
	.fini = fileio_fini,
	.submit = fileio_submit,
	.progress = fileio_progress,
	.busy = fileio_busy,
	.cancel_all = fileio_cancel_all,
	.region_close = fileio_region_close,
};
