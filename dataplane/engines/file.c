/* SPDX-License-Identifier: MIT */
/*
 * file.c - the io_uring file engine: one ring per poller, fixed buffers,
 * slices, staging through the GPU, progress and cancel. File regions
 * themselves are file_region.c (file_internal.h). See file.h.
 */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "engine.h"
#include "fault.h"
#include "file.h"
#include "file_internal.h"
#include "gpu.h"
#include "stats.h"
#include "xfer_op.h"

struct file_config file_cfg = {
	.depth = 32, .slice = 1u << 20, .staging = 64u << 20, .max_pinned = 1024u << 20};

/* One transfer between a file region and a host or GPU region. */
struct file_op {
	struct op_node node;	    /* first: its poller's op list */
	struct xfer_op o;	    /* the descriptor; references on both regions */
	struct region *file, *host; /* o.ra and o.rb, by kind */
	uint8_t *mem;		    /* address of the transfer's byte 0 (host or GPU) */
	int dev;		    /* GPU of mem, or -1: host memory */
	uint64_t pos;		    /* file offset of the transfer's byte 0 */
	uint64_t issued;	    /* bytes handed to slices so far */
	uint32_t inflight;	    /* its slices not yet finished */
	bool to_file;		    /* host -> file; else file -> host */
	bool queued;		    /* on the poller's list of ops with bytes to issue */
	int status;		    /* the first error; no slice is issued after one */
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

struct file_poller *file_rings[DP_MAX_POLLERS];
unsigned file_nrings;
bool file_fixed_files;
static bool fixed_bufs; /* every ring has a sparse table of FBUF_SLOTS */
static size_t page_size;

/* Fixed buffers: host regions are registered in windows of FBUF_WIN bytes
 * (see "fixed buffers" below). */
#define FBUF_WIN_SHIFT 24 /* 16 MiB */
#define FBUF_WIN (1ull << FBUF_WIN_SHIFT)
static uint64_t fbuf_span;		 /* bytes one window's registration covers; 0: none */
static atomic_uint fbuf_epoch;		 /* windows released so far */
static struct fbuf_client *fbuf_clients; /* per-client charges, under file_slot_lock */
static unsigned fbuf_nclients, fbuf_cap;

/* ---- start-up and exit ---- */

/* The poller's share of --staging, as buffers of one slice each; none
 * without a GPU (GPU file transfers then answer -ENOTSUP). */
static void staging_alloc(struct file_poller *fp)
{
	size_t n = file_cfg.staging / cfg.pollers / file_cfg.slice;

	fp->gpu_tail = &fp->gpu_head;
	if (!gpu_device_count() || !n)
		return;
	fp->bufs = calloc(n, sizeof(*fp->bufs));
	fp->stage_mem = fp->bufs ? gpu_pinned_alloc(n * file_cfg.slice) : NULL;
	if (!fp->stage_mem) {
		free(fp->bufs);
		fp->bufs = NULL;
		log_warn("file: no staging buffers; file transfers with GPU memory are refused");
		return;
	}
	for (size_t i = 0; i < n; i++)
		fp->bufs[i] = fp->stage_mem + i * file_cfg.slice;
	fp->nbufs = fp->nfree = (unsigned)n;
}

static int ring_open(struct file_poller *fp)
{
	/* Completions that need task work wait for our next kernel entry
	 * (flagged in the SQ ring) instead of interrupting the poller. */
	struct io_uring_params prm = {.flags = IORING_SETUP_COOP_TASKRUN |
					       IORING_SETUP_TASKRUN_FLAG};
	int rc = io_uring_queue_init_params(file_cfg.depth, &fp->ring, &prm);

	if (rc == -EINVAL) {
		memset(&prm, 0, sizeof(prm));
		rc = io_uring_queue_init_params(file_cfg.depth, &fp->ring, &prm);
	}
	return rc;
}

static void file_fini(void);

static int file_init(void)
{
	int rc = 0;

	page_size = (size_t)sysconf(_SC_PAGESIZE);
	rc = file_root_open();
	if (rc)
		return rc;
	file_fixed_files = fixed_bufs = true;
	for (file_nrings = 0; file_nrings < cfg.pollers; file_nrings++) {
		struct file_poller *fp = calloc(1, sizeof(*fp));

		if (!fp)
			return -ENOMEM;
		fp->slices = calloc(file_cfg.depth, sizeof(*fp->slices));
		if (!fp->slices || (rc = ring_open(fp)) < 0) {
			free(fp->slices);
			free(fp);
			break;
		}
		for (unsigned i = 0; i < file_cfg.depth; i++) {
			fp->slices[i].next = fp->free;
			fp->free = &fp->slices[i];
		}
		fp->p = &pollers[file_nrings];
		fp->idx = file_nrings;
		staging_alloc(fp);
		if (io_uring_register_files_sparse(&fp->ring, FILE_SLOTS) < 0)
			file_fixed_files = false;
		if (!file_cfg.max_pinned ||
		    io_uring_register_buffers_sparse(&fp->ring, FBUF_SLOTS) < 0)
			fixed_bufs = false;
		file_rings[file_nrings] = fp;
		pollers[file_nrings].eng[ENGINE_file] = fp;
	}
	if (rc < 0) {
		/* All or none: a poller without a ring could not serve a
		 * queue that uses files. */
		log_warn("file: io_uring unavailable (%s); file regions are refused",
			 strerror(-rc));
		file_fini();
		return 0;
	}
	/* A window reaches one slice (at most a window) past its end. */
	fbuf_span =
		fixed_bufs ? FBUF_WIN + (file_cfg.slice < FBUF_WIN ? file_cfg.slice : FBUF_WIN) : 0;
	log_info("file: %u ring(s), depth %u, slice %zu, %s files, %s buffers, file root %s, "
		 "staging %u buffer(s) per ring, fixed-buffer windows of %llu bytes, at most %zu "
		 "MiB per client",
		 file_nrings, file_cfg.depth, file_cfg.slice,
		 file_fixed_files ? "registered" : "plain", fixed_bufs ? "fixed" : "plain",
		 file_cfg.root[0] ? file_cfg.root : "(none)",
		 file_rings[0] ? file_rings[0]->nbufs : 0, (unsigned long long)fbuf_span,
		 file_cfg.max_pinned >> 20);
	return 0;
}

static void file_fini(void)
{
	for (unsigned i = 0; i < file_nrings; i++) {
		struct file_poller *fp = file_rings[i];

		io_uring_queue_exit(&fp->ring);
		op_list_free(&fp->ops);
		free(fp->slices);
		gpu_pinned_free(fp->stage_mem);
		free(fp->bufs);
		free(fp);
		file_rings[i] = NULL;
		pollers[i].eng[ENGINE_file] = NULL;
	}
	file_nrings = 0;
	free(fbuf_clients);
	fbuf_clients = NULL;
	fbuf_nclients = fbuf_cap = 0;
	file_root_close();
}

/* ---- fixed buffers: windows of host regions registered with the rings ---- */

/*
 * A host region becomes fixed buffers window by window, as file I/O touches
 * it, never whole: window w is its bytes [w * FBUF_WIN, w * FBUF_WIN +
 * fbuf_span), registered (and so pinned) on the ring of the poller whose
 * slice first lands in it. The window reaches one slice past its end, so
 * that a slice of at most FBUF_WIN bytes that starts in it ends in it: no
 * slice straddles two windows (--io-slice above FBUF_WIN: those that would
 * go by address).
 *
 * Pinning a window takes the time to fault in and pin at most fbuf_span
 * bytes (memory never touched is allocated and zeroed then), during which
 * the poller serves nobody and the service's mmap lock is held for reading
 * (control calls that map or unmap wait); a poller registers at most one
 * window per loop. Each client may have --max-pinned-mb of windows
 * registered (per ring: the kernel accounts each ring's pin); slices beyond
 * that, and those the kernel refuses (RLIMIT_MEMLOCK without
 * CAP_IPC_LOCK), go by address. Windows stay until their region is freed.
 */
struct fbuf_map {
	uint32_t nwin;
	/* slot[win * file_nrings + ring]: > 0, fixed buffer slot - 1 of that ring;
	 * 0, never tried; < 0, refused while fbuf_epoch was -slot - 1 (tried
	 * again once a window was released since). Each ring's entries are
	 * its poller's alone until the region's last reference. */
	int32_t *slot;
	uint32_t *client; /* [same index]: the client charged for the window */
	int32_t mem[];
};

struct fbuf_client {
	uint32_t id;
	uint64_t pinned; /* bytes of windows registered, over all rings */
};

static int32_t fbuf_refused(unsigned epoch)
{
	return -(int32_t)(epoch & 0x3fffffff) - 1;
}

/* Under file_slot_lock: the charge of client @id (created at 0 when @make). */
static struct fbuf_client *fbuf_client(uint32_t id, bool make)
{
	struct fbuf_client *n;

	for (unsigned i = 0; i < fbuf_nclients; i++)
		if (fbuf_clients[i].id == id)
			return &fbuf_clients[i];
	if (!make)
		return NULL;
	if (fbuf_nclients == fbuf_cap) {
		unsigned cap = fbuf_cap ? 2 * fbuf_cap : 16;

		n = realloc(fbuf_clients, cap * sizeof(*n));
		if (!n)
			return NULL;
		fbuf_clients = n;
		fbuf_cap = cap;
	}
	n = &fbuf_clients[fbuf_nclients++];
	*n = (struct fbuf_client){.id = id};
	return n;
}

/* Under file_slot_lock: gives @len bytes of client @id back. */
static void fbuf_uncharge(uint32_t id, uint64_t len)
{
	struct fbuf_client *c = fbuf_client(id, false);

	if (!c)
		return;
	c->pinned -= len;
	if (!c->pinned)
		*c = fbuf_clients[--fbuf_nclients];
}

static uint64_t fbuf_len(const struct region *reg, uint64_t win)
{
	uint64_t at = win << FBUF_WIN_SHIFT, left = reg->map_len - at;

	return left < fbuf_span ? left : fbuf_span;
}

/* The region's window map, made at its first file I/O (by whichever
 * poller comes first). */
static struct fbuf_map *fbuf_map_get(struct region *reg)
{
	struct fbuf_map *m = atomic_load_explicit(&reg->fbuf, memory_order_acquire), *none = NULL;
	uint64_t nwin = (reg->map_len + FBUF_WIN - 1) >> FBUF_WIN_SHIFT, n = nwin * file_nrings;

	if (m)
		return m;
	m = calloc(1, sizeof(*m) + 2 * n * sizeof(int32_t));
	if (!m)
		return NULL;
	m->nwin = (uint32_t)nwin;
	m->slot = m->mem;
	m->client = (uint32_t *)(m->mem + n);
	if (!atomic_compare_exchange_strong_explicit(&reg->fbuf, &none, m, memory_order_acq_rel,
						     memory_order_acquire)) {
		free(m);
		return none;
	}
	return m;
}

/*
 * Poller, the first slice in window @win of host region @reg on this ring
 * (or the first since the window was refused and another was released):
 * registers the window as a fixed buffer of the ring, charged to client
 * @client. The slot, or -1: the slice goes by address (over the client's
 * cap, no slot left, this loop's registration done, or the kernel said no).
 */
static __attribute__((noinline)) int fbuf_register(struct file_poller *fp, struct region *reg,
						   uint64_t win, uint32_t client)
{
	struct fbuf_map *m = fbuf_map_get(reg);
	unsigned epoch = atomic_load_explicit(&fbuf_epoch, memory_order_acquire);
	uint64_t len = fbuf_len(reg, win), t0;
	struct iovec iov = {(uint8_t *)reg->map + (win << FBUF_WIN_SHIFT), len};
	struct fbuf_client *c;
	const char *why = NULL;
	int slot = -1, rc;
	size_t at;

	if (!m || !fp->fbuf_budget)
		return -1; /* tried again at the next slice */
	at = win * file_nrings + fp->idx;
	pthread_mutex_lock(&file_slot_lock);
	c = fbuf_client(client, true);
	if (!c || c->pinned + len > file_cfg.max_pinned)
		why = "the client's --max-pinned-mb is reached";
	for (int i = 0; !why && i < FBUF_SLOTS && slot < 0; i++)
		if (!fp->fbuf_used[i])
			slot = i;
	if (!why && slot < 0)
		why = "no fixed-buffer slot is left";
	if (!why) {
		fp->fbuf_used[slot] = true;
		c->pinned += len;
	} else if (c && !c->pinned) {
		fbuf_uncharge(client, 0);
	}
	pthread_mutex_unlock(&file_slot_lock);
	if (!why) {
		fp->fbuf_budget--;
		t0 = dp_now_ns();
		rc = io_uring_register_buffers_update_tag(&fp->ring, (unsigned)slot, &iov, NULL, 1);
		if (rc == 1) {
			m->slot[at] = slot + 1;
			m->client[at] = client;
			log_debug("file: ring %u: window %llu of a host region of %zu bytes is "
				  "fixed buffer %d (%llu bytes pinned in %.1f ms, client %u)",
				  fp->idx, (unsigned long long)win, reg->map_len, slot,
				  (unsigned long long)len, (dp_now_ns() - t0) / 1e6, client);
			return slot;
		}
		pthread_mutex_lock(&file_slot_lock);
		fp->fbuf_used[slot] = false;
		fbuf_uncharge(client, len);
		pthread_mutex_unlock(&file_slot_lock);
		why = "the kernel refused its registration";
	}
	log_debug("file: ring %u: window %llu of a host region goes by address (%s)", fp->idx,
		  (unsigned long long)win, why);
	m->slot[at] = fbuf_refused(epoch);
	return -1;
}

/*
 * The per-slice check, on the hot path: the fixed buffer of this ring that
 * holds @n bytes at @at of host region @h's mapping (for a transfer of
 * queue @q's client), or -1. Two loads once the window is registered here
 * (the region's map, the window's slot).
 */
static inline int fbuf_index(struct file_poller *fp, struct region *h, uint64_t at, unsigned n,
			     const struct queue *q)
{
	struct fbuf_map *m = atomic_load_explicit(&h->fbuf, memory_order_acquire);
	uint64_t win = at >> FBUF_WIN_SHIFT;
	int32_t e = 0;

	if (m) {
		e = m->slot[win * file_nrings + fp->idx];
		if (e > 0)
			return (at & (FBUF_WIN - 1)) + n <= fbuf_span ? e - 1 : -1;
	}
	if (!fbuf_span || (at & (FBUF_WIN - 1)) + n > fbuf_span)
		return -1;
	if (e < 0 && e == fbuf_refused(atomic_load_explicit(&fbuf_epoch, memory_order_relaxed)))
		return -1;
	return fbuf_register(fp, h, win, q->client->id);
}

/* Whether a slice at @at of host region @h would register its window on
 * this ring (not registered here yet, nor refused since the last release). */
static bool fbuf_wants(const struct file_poller *fp, struct region *h, uint64_t at)
{
	struct fbuf_map *m = atomic_load_explicit(&h->fbuf, memory_order_acquire);
	int32_t e = m ? m->slot[(at >> FBUF_WIN_SHIFT) * file_nrings + fp->idx] : 0;

	return !e || (e < 0 &&
		      e != fbuf_refused(atomic_load_explicit(&fbuf_epoch, memory_order_relaxed)));
}

/* The region's last reference (no slice uses it any more: each held a
 * reference): its windows leave the rings, their charges go back. */
static void fbuf_release(struct region *reg)
{
	struct fbuf_map *m = atomic_exchange(&reg->fbuf, NULL);
	struct iovec none = {NULL, 0};
	bool released = false;

	if (!m)
		return;
	for (uint64_t w = 0; w < m->nwin; w++)
		for (unsigned r = 0; r < file_nrings; r++) {
			size_t at = w * file_nrings + r;
			int32_t e = m->slot[at];

			if (e <= 0)
				continue;
			io_uring_register_buffers_update_tag(&file_rings[r]->ring,
							     (unsigned)(e - 1), &none, NULL, 1);
			pthread_mutex_lock(&file_slot_lock);
			file_rings[r]->fbuf_used[e - 1] = false;
			fbuf_uncharge(m->client[at], fbuf_len(reg, w));
			pthread_mutex_unlock(&file_slot_lock);
			released = true;
		}
	if (released)
		atomic_fetch_add_explicit(&fbuf_epoch, 1, memory_order_release);
	free(m);
}

/* ---- the data path (poller) ---- */

static void op_finish(struct file_poller *fp, struct file_op *op)
{
	xfer_op_finish(fp->p, &op->o, op->status);
	op_list_put(&fp->ops, &op->node);
}

static void op_enqueue(struct file_poller *fp, struct file_op *op)
{
	op->queued = true;
	op_list_push(&fp->ops, &op->node);
}

static void file_submit(struct poller *p, const struct xfer *x)
{
	struct file_poller *fp = p->eng[ENGINE_file];
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
	op = op_list_get(&fp->ops, sizeof(*op));
	if (!op) {
		queue_complete_ns(q, d->user_data, d->submit_ns, -ENOMEM, 0, 0);
		return;
	}
	*op = (struct file_op){
		.file = file,
		.host = host,
		.mem = host->base + (local_file ? d->target_off : d->local_off),
		.dev = host->kind == REGION_CUDA ? host->device : -1,
		.pos = file->file_off + (local_file ? d->local_off : d->target_off),
		.to_file = dst == file,
	};
	/* The references keep both regions until the kernel has given back
	 * every slice. */
	xfer_op_keep(&op->o, x, DP_CQE_F_FILE);
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
	uint64_t left = op->o.len - at, n = left < file_cfg.slice ? left : file_cfg.slice;
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

static void slice_prep(struct file_poller *fp, struct file_slice *s)
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

	/* A fixed buffer when the slice's window is (or now becomes) one. */
	if (!s->buf && h->kind == REGION_HOST)
		buf = fbuf_index(fp, h, (uint64_t)(mem - (uint8_t *)h->map), n, op->o.q);
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
static void slice_finish(struct file_poller *fp, struct file_slice *s)
{
	struct file_op *op = s->op;

	if (s->buf)
		fp->bufs[fp->nfree++] = s->buf;
	s->next = fp->free;
	fp->free = s;
	fp->inflight--;
	if (!--op->inflight && !op->queued && (op->status || op->issued == op->o.len))
		op_finish(fp, op);
}

/* The GPU stage of a slice: GPU -> buffer before its write, buffer -> GPU
 * after its read. The slice waits on the GPU list; a copy that cannot
 * start fails the op (-EIO). */
static void gpu_stage(struct file_poller *fp, struct file_slice *s)
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
static int gpu_reap(struct file_poller *fp)
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

static void slice_done(struct file_poller *fp, struct file_slice *s, int res)
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
static int fill(struct file_poller *fp)
{
	int n = 0;

	while (op_list_busy(&fp->ops) && fp->inflight < file_cfg.depth) {
		struct file_op *op = (struct file_op *)op_list_pop(&fp->ops);
		struct file_slice *s;

		op->queued = false;
		if (!op->status && atomic_load_explicit(&op->o.q->closing, memory_order_relaxed))
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
			op_fifo_push_front(&fp->ops.pending, &op->node);
			break;
		}
		if (!fp->fbuf_budget && fbuf_span && op->dev < 0 && op->host->kind == REGION_HOST &&
		    fbuf_wants(fp, op->host,
			       (uint64_t)(op->mem + op->issued - (uint8_t *)op->host->map))) {
			/* This loop registered a window already: the op's
			 * next slice, which needs another, waits for the next
			 * loop at the head rather than go by address. */
			op->queued = true;
			op_fifo_push_front(&fp->ops.pending, &op->node);
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
		if (op->issued < op->o.len)
			op_enqueue(fp, op);
	}
	return n;
}

static int reap(struct file_poller *fp)
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
static void kick(struct file_poller *fp)
{
	if (io_uring_sq_ready(&fp->ring) ||
	    IO_URING_READ_ONCE(*fp->ring.sq.kflags) & IORING_SQ_TASKRUN) {
		/* A failed submission leaves the SQEs in the SQ: the next
		 * loop's kick posts them (file_busy keeps the poller up). */
		if (!DP_FAULT(URING_SUBMIT))
			io_uring_submit_and_get_events(&fp->ring);
	}
}

static int file_progress(struct poller *p)
{
	struct file_poller *fp = p->eng[ENGINE_file];
	int work;

	if (!fp || (!fp->inflight && !op_list_busy(&fp->ops)))
		return 0;
	fp->fbuf_budget = 1;
	kick(fp);
	work = reap(fp);
	if (fp->ngpu)
		work += gpu_reap(fp);
	work += fill(fp);
	if (io_uring_sq_ready(&fp->ring) && !DP_FAULT(URING_SUBMIT))
		io_uring_submit(&fp->ring);
	return work;
}

static bool file_busy(const struct poller *p)
{
	const struct file_poller *fp = p->eng[ENGINE_file];

	return fp && (fp->inflight || op_list_busy(&fp->ops));
}

static void file_cancel_all(struct poller *p)
{
	struct file_poller *fp = p->eng[ENGINE_file];

	if (!fp)
		return;
	for (struct op_node *n = fp->ops.pending.head; n; n = n->next) {
		struct file_op *op = (struct file_op *)n;

		if (!op->status)
			op->status = -ECANCELED;
	}
	/* Slices in flight own memory of ours until the kernel gives them
	 * back: wait for every one. fill() issues nothing now, it only lets
	 * the cancelled ops go as room appears. */
	while (op_list_busy(&fp->ops) || fp->inflight) {
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
static void file_region_release(struct region *reg)
{
	if (reg->kind == REGION_FILE && reg->eng[ENGINE_file])
		file_region_close(reg);
	else if (reg->kind == REGION_HOST)
		fbuf_release(reg);
}

const struct engine file_engine = {
	.name = "file",
	.init = file_init,
	.fini = file_fini,
	.submit = file_submit,
	.progress = file_progress,
	.busy = file_busy,
	.cancel_all = file_cancel_all,
	.region_msgs = file_region_msgs,
	.region_close = file_region_release,
};
