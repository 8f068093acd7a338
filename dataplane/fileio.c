/* SPDX-License-Identifier: MIT */
/* fileio.c - file regions and the io_uring file engine. See fileio.h. */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/openat2.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fault.h"
#include "engine.h"
#include "fileio.h"
#include "gpu.h"
#include "stats.h"

struct fileio_config fio_cfg = {.depth = 32, .slice = 1u << 20, .staging = 64u << 20};

/* Registered-file slots per ring: two per file region (buffered, direct). A
 * region that finds none left uses its plain fds. */
#define FILE_SLOTS 1024
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

struct fileio_poller {
	struct io_uring ring;
	unsigned inflight;	     /* slices owned by the kernel (or prepared for it) */
	struct file_op *head, *tail; /* ops with bytes to issue, round robin */
	struct file_op *ops_free;
	struct file_slice *slices, *free; /* fio_cfg.depth of them */
	/* Staging for GPU transfers: pinned buffers of fio_cfg.slice bytes. */
	struct poller *p;
	uint8_t *stage_mem, **bufs;
	unsigned nbufs, nfree;			 /* buffers, of which free (bufs[0..nfree)) */
	struct file_slice *gpu_head, **gpu_tail; /* slices in the GPU stage, oldest first */
	unsigned ngpu;
};

static struct fileio_poller *rings[DP_MAX_POLLERS];
static unsigned nrings;
static int root_fd = -1;
static bool fixed_files; /* every ring has a sparse table of FILE_SLOTS */
static bool fixed_bufs;	 /* every ring has a sparse table of FBUF_SLOTS */
static size_t page_size;
static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;
static bool slot_used[FILE_SLOTS];
static bool fbuf_used[FBUF_SLOTS]; /* under slot_lock too */

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
	if (fio_cfg.root[0]) {
		root_fd = open(fio_cfg.root, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (root_fd < 0) {
			rc = -errno;
			log_err("--file-root %s: %s", fio_cfg.root, strerror(errno));
			return rc;
		}
	}
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
		 fixed_bufs ? "fixed" : "plain", root_fd >= 0 ? fio_cfg.root : "(none)",
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
	if (root_fd >= 0)
		close(root_fd);
	root_fd = -1;
}

/* ---- regions (control thread) ---- */

/*
 * Puts @fd into slot i of every ring's file table; -1 when no slot is left
 * or a ring refuses (the region then uses the plain fd). Rings belong to
 * pollers, but registration is a system call on the ring fd that the
 * kernel serialises against submission (the ring is not SINGLE_ISSUER).
 */
static int slot_get(int fd)
{
	int slot = -1, none = -1;
	unsigned r;

	if (!fixed_files || fd < 0)
		return -1;
	pthread_mutex_lock(&slot_lock);
	for (int i = 0; i < FILE_SLOTS && slot < 0; i++)
		if (!slot_used[i]) {
			slot_used[i] = true;
			slot = i;
		}
	pthread_mutex_unlock(&slot_lock);
	if (slot < 0)
		return -1;
	for (r = 0; r < nrings; r++)
		if (io_uring_register_files_update(&rings[r]->ring, (unsigned)slot, &fd, 1) != 1)
			break;
	if (r == nrings)
		return slot;
	while (r--)
		io_uring_register_files_update(&rings[r]->ring, (unsigned)slot, &none, 1);
	pthread_mutex_lock(&slot_lock);
	slot_used[slot] = false;
	pthread_mutex_unlock(&slot_lock);
	return -1;
}

static void slot_put(int slot)
{
	int none = -1;

	if (slot < 0)
		return;
	for (unsigned r = 0; r < nrings; r++)
		io_uring_register_files_update(&rings[r]->ring, (unsigned)slot, &none, 1);
	pthread_mutex_lock(&slot_lock);
	slot_used[slot] = false;
	pthread_mutex_unlock(&slot_lock);
}

/* The same open file, opened again through its /proc link: same inode,
 * our own file description (its flags are ours to choose). */
static int reopen(int fd, int flags)
{
	char path[32];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	fd = open(path, flags | O_CLOEXEC | O_NOCTTY);
	return fd < 0 ? -errno : fd;
}

/* @path beneath --file-root: the kernel refuses every step out of it
 * ("..", absolute paths and symlinks, /proc magic links) with EXDEV/ELOOP. */
static int open_beneath(const char *path, int acc)
{
	struct open_how how = {.flags = (uint64_t)(acc | O_CLOEXEC | O_NOCTTY | O_NONBLOCK),
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
	int fd, fl;

	if (root_fd < 0)
		return -EPERM;
	fd = (int)syscall(SYS_openat2, root_fd, path, &how, sizeof(how));
	if (fd < 0) {
		switch (errno) {
		case EXDEV:
		case ELOOP:
			return -EPERM;
		case ENOSYS:
			return -ENOTSUP; /* no openat2 (Linux < 5.6): no safe resolution */
		case EISDIR:
			return -EINVAL;
		default:
			return -errno;
		}
	}
	/* O_NONBLOCK kept a FIFO from blocking the open; io_uring would turn
	 * it into EAGAIN for every read of a regular file. */
	fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	return fd;
}

/* Direct I/O alignment of the file, and whether it takes direct I/O. */
static void dio_probe(struct file_region *f, int fd, const struct stat *st)
{
	f->off_align = f->mem_align = 4096;
#ifdef STATX_DIOALIGN
	struct statx sx;

	if (!statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) && sx.stx_mask & STATX_DIOALIGN) {
		if (!sx.stx_dio_offset_align && f->dfd >= 0) {
			close(f->dfd);
			f->dfd = -1;
		}
		if (!sx.stx_dio_offset_align)
			return;
		f->off_align = sx.stx_dio_offset_align;
		f->mem_align = sx.stx_dio_mem_align ? sx.stx_dio_mem_align : 1;
		return;
	}
#endif
	if (S_ISBLK(st->st_mode)) {
		int ss;

		if (!ioctl(fd, BLKSSZGET, &ss) && ss > 0)
			f->off_align = f->mem_align = (uint32_t)ss;
	}
}

int fileio_region_open(struct region *reg, int fd, const char *path, uint64_t offset, uint64_t len,
		       unsigned flags)
{
	unsigned access = flags & ~DP_FILE_BUFFERED;
	int acc = access == DP_ACCESS_RW ? O_RDWR : O_RDONLY, fl, rc;
	struct file_region *f = NULL;
	char shown[DP_PATH_MAX];
	uint64_t size;
	struct stat st;

	if (access != DP_ACCESS_READ && access != DP_ACCESS_RW) {
		rc = -EINVAL;
		goto err;
	}
	if (!nrings) {
		rc = -ENOTSUP;
		goto err;
	}
	if (fd < 0 && (fd = open_beneath(path, acc)) < 0) {
		rc = fd;
		goto err;
	}
	rc = -EPERM;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fl & O_PATH)
		goto err;
	if (((access & DP_ACCESS_READ) && (fl & O_ACCMODE) == O_WRONLY) ||
	    ((access & DP_ACCESS_WRITE) && (fl & O_ACCMODE) == O_RDONLY))
		goto err;
	rc = -EINVAL;
	if (fstat(fd, &st) < 0)
		goto err;
	if (S_ISREG(st.st_mode))
		size = (uint64_t)st.st_size;
	else if (!S_ISBLK(st.st_mode) || ioctl(fd, BLKGETSIZE64, &size) < 0)
		goto err;
	if (!len) {
		if (offset >= size)
			goto err;
		len = size - offset;
	}
	/* A writable regular file may grow; anything else must already hold
	 * the range. Offsets stay below 2^63 (off_t). */
	if (offset > (uint64_t)INT64_MAX || len > (uint64_t)INT64_MAX - offset)
		goto err;
	if ((access == DP_ACCESS_READ || S_ISBLK(st.st_mode)) && offset + len > size)
		goto err;
	/* O_APPEND would make every write land at the end, whatever its offset. */
	if ((access & DP_ACCESS_WRITE) && (fl & O_APPEND))
		goto err;
	f = calloc(1, sizeof(*f));
	if (!f) {
		rc = -ENOMEM;
		goto err;
	}
	f->access = access;
	f->dfd = -1;
	if (fl & (O_DIRECT | O_NONBLOCK)) {
		/* The client's description is shared with it: we never change
		 * its flags, we open our own buffered, blocking one. */
		int b = reopen(fd, acc);

		if (b < 0) {
			rc = -EINVAL;
			goto err;
		}
		if (fl & O_DIRECT)
			f->dfd = fd;
		else
			close(fd);
		fd = b;
	}
	if (flags & DP_FILE_BUFFERED && f->dfd >= 0) {
		close(f->dfd);
		f->dfd = -1;
	} else if (f->dfd < 0 && !(flags & DP_FILE_BUFFERED)) {
		f->dfd = reopen(fd, acc | O_DIRECT);
		if (f->dfd < 0)
			f->dfd = -1;
	}
	dio_probe(f, fd, &st);
	f->slot = slot_get(fd);
	f->dslot = slot_get(f->dfd);
	reg->kind = REGION_FILE;
	reg->fd = fd;
	reg->file_off = offset;
	reg->len = len;
	reg->eng[ENGINE_file] = f;
	/* The path is the client's: no control characters into our log. */
	snprintf(shown, sizeof(shown), "%s", path ? path : "client fd");
	for (char *p = shown; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			*p = '?';
	log_debug("file region: %s, %llu bytes at %llu, %s, direct I/O %s (align %u/%u), "
		  "%s files",
		  shown, (unsigned long long)len, (unsigned long long)offset,
		  access == DP_ACCESS_RW ? "rw" : "ro", f->dfd >= 0 ? "yes" : "no", f->off_align,
		  f->mem_align, f->slot >= 0 ? "registered" : "plain");
	return 0;
err:
	if (fd >= 0)
		close(fd);
	free(f);
	return rc;
}

static void file_region_close(struct region *reg)
{
	struct file_region *f = reg->eng[ENGINE_file];

	log_debug("file region closed: %llu direct I/Os (%llu bytes), %llu buffered (%llu bytes), "
		  "%llu through fixed buffers",
		  (unsigned long long)atomic_load(&f->direct_ios),
		  (unsigned long long)atomic_load(&f->direct_bytes),
		  (unsigned long long)atomic_load(&f->buffered_ios),
		  (unsigned long long)atomic_load(&f->buffered_bytes),
		  (unsigned long long)atomic_load(&f->fixed_ios));
	slot_put(f->slot);
	slot_put(f->dslot);
	if (f->dfd >= 0)
		close(f->dfd);
	close(reg->fd);
	free(f);
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
