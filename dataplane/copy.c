/* SPDX-License-Identifier: MIT */
/*
 * copy.c - the host engine: memcpy between two host regions of this
 * service. Copies up to --inline-max run at once, in submit; larger ones
 * are queued and advanced round robin, one --chunk at a time, so one big
 * copy does not stall the other queues of the poller.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "engine.h"
#include "notif.h"

#ifdef DP_TSAN
/* libtsan's (GCC 12's <sanitizer/tsan_interface.h> does not declare them). */
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
#endif

/* Steps per poller loop: with the default 256 KiB chunk a loop spends about
 * 1 MiB of memcpy (tens of microseconds) before it looks at the SQs again. */
#define STEPS_PER_LOOP 4

/* A copy larger than inline_max, not finished yet. */
struct copy_op {
	struct queue *q;
	uint64_t user_data;
	uint64_t submit_ns;
	uint8_t *dst;
	const uint8_t *src;
	uint64_t len, done;
	uint32_t path;		/* DP_CQE_F_LOCAL or DP_CQE_F_SAME_HOST */
	struct region *ra, *rb; /* references held until the op completes */
	struct segment *nseg;	/* with a notification: its segment (a reference) */
	struct notif_req notify;
	struct copy_op *next;
};

/* A poller's pending copies (p->eng[ENGINE_host]), and spare ops. */
struct host_poller {
	struct copy_op *head, *tail, *spare;
};

/*
 * Moves n bytes of client memory. Descriptors on different queues run on
 * different pollers, unordered: a client that has two of them write the
 * same bytes at once races on its own memory, as two DMA engines would, and
 * what lands is its affair (each descriptor still moves its bytes and
 * completes once). The client's own accesses happen in another process,
 * out of TSan's sight, so the TSan build (make tsan) checks none of these
 * bytes, only the service's state: reporting and then suppressing every
 * racy word of such copies cost seconds per GiB there.
 */
static void client_bytes_copy(uint8_t *dst, const uint8_t *src, uint64_t n)
{
#ifdef DP_TSAN
	__tsan_ignore_thread_begin();
#endif
	/* memmove: a region written onto itself (its own export) may
	 * overlap; the same cost as memcpy where it does not. */
	memmove(dst, src, n);
#ifdef DP_TSAN
	__tsan_ignore_thread_end();
#endif
}

static struct copy_op *op_alloc(struct poller *p)
{
	struct host_poller *h = p->eng[ENGINE_host];
	struct copy_op *op;

	if (!h) {
		h = calloc(1, sizeof(*h));
		if (!h)
			return NULL;
		p->eng[ENGINE_host] = h;
	}
	op = h->spare;
	if (op) {
		h->spare = op->next;
		return op;
	}
	return malloc(sizeof(*op));
}

static void op_finish(struct poller *p, struct host_poller *h, struct copy_op *op, int status)
{
	struct queue *q = op->q;

	q->inflight--;
	/* The bytes are in place: the owner hears of them before the writer
	 * sees its completion. */
	if (op->nseg) {
		if (!status)
			notif_deliver(p, op->nseg, &op->notify);
		segment_put(op->nseg);
	}
	queue_complete_ns(q, op->user_data, op->submit_ns, status, status ? 0 : op->len, op->path);
	region_put(op->ra);
	region_put(op->rb);
	op->next = h->spare;
	h->spare = op;
}

static void host_submit(struct poller *p, const struct xfer *x)
{
	struct host_poller *h;
	struct copy_op *op;

	x->q->ctr.local_copies++;
	if (x->len <= cfg.inline_max) {
		client_bytes_copy(x->dst, x->src, x->len);
		if (x->notify)
			notif_deliver(p, x->seg, x->notify);
		queue_complete_ns(x->q, x->user_data, x->submit_ns, 0, x->len, x->path);
		return;
	}
	op = op_alloc(p);
	if (!op) {
		queue_complete_ns(x->q, x->user_data, x->submit_ns, -ENOMEM, 0, 0);
		return;
	}
	/* The regions were found in this loop, so they are alive (QSBR); the
	 * references keep them mapped until the last step. */
	atomic_fetch_add(&x->ra->refs, 1);
	atomic_fetch_add(&x->rb->refs, 1);
	*op = (struct copy_op){.q = x->q,
			       .user_data = x->user_data,
			       .submit_ns = x->submit_ns,
			       .dst = x->dst,
			       .src = x->src,
			       .len = x->len,
			       .path = x->path,
			       .ra = x->ra,
			       .rb = x->rb};
	if (x->notify) {
		/* Alive in this loop (QSBR); the reference keeps it so. */
		atomic_fetch_add(&x->seg->refs, 1);
		op->nseg = x->seg;
		op->notify = *x->notify;
	}
	x->q->inflight++;
	h = p->eng[ENGINE_host];
	if (h->tail)
		h->tail->next = op;
	else
		h->head = op;
	h->tail = op;
	engine_kick(p, ENGINE_host);
}

/* Round robin over the pending copies, one chunk each. */
static int host_progress(struct poller *p)
{
	struct host_poller *h = p->eng[ENGINE_host];
	int steps = 0;

	while (h && h->head && steps < STEPS_PER_LOOP) {
		struct copy_op *op = h->head;
		uint64_t n = op->len - op->done;

		if (n > cfg.chunk)
			n = cfg.chunk;
		client_bytes_copy(op->dst + op->done, op->src + op->done, n);
		op->done += n;
		steps++;
		h->head = op->next;
		if (!h->head)
			h->tail = NULL;
		op->next = NULL;
		if (op->done == op->len) {
			op_finish(p, h, op, 0);
			continue;
		}
		if (h->tail)
			h->tail->next = op;
		else
			h->head = op;
		h->tail = op;
	}
	return steps;
}

static bool host_busy(const struct poller *p)
{
	const struct host_poller *h = p->eng[ENGINE_host];

	return h && h->head;
}

/* At shutdown host copies are finished, not cancelled: they need nothing
 * but this thread. */
static void host_cancel_all(struct poller *p)
{
	while (host_busy(p))
		host_progress(p);
}

static void host_poller_free(struct poller *p)
{
	struct host_poller *h = p->eng[ENGINE_host];

	if (!h)
		return;
	while (h->spare) {
		struct copy_op *op = h->spare;

		h->spare = op->next;
		free(op);
	}
	free(h);
	p->eng[ENGINE_host] = NULL;
}

/* The mapping of a client's memfd is the region itself: it goes last. */
static void host_region_close(struct region *r)
{
	if (r->kind == REGION_HOST && r->map)
		munmap(r->map, r->map_len);
	if (r->kind == REGION_HOST && r->fd >= 0)
		close(r->fd);
}

const struct engine host_engine = {
	.name = "host",
	.submit = host_submit,
	.progress = host_progress,
	.busy = host_busy,
	.cancel_all = host_cancel_all,
	.poller_free = host_poller_free,
	.region_close = host_region_close,
};
