/* SPDX-License-Identifier: MIT */
/* copy.c - the local copy engine (host memory). See copy.h. */
#include <stdlib.h>
#include <string.h>

#include "copy.h"
#include "gpu.h"

#ifdef DP_TSAN
/* libtsan's (GCC 12's <sanitizer/tsan_interface.h> does not declare them). */
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
#endif

/* Steps per poller loop: with the default 256 KiB chunk a loop spends about
 * 1 MiB of memcpy (tens of microseconds) before it looks at the SQs again. */
#define STEPS_PER_LOOP 4

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
	memcpy(dst, src, n);
#ifdef DP_TSAN
	__tsan_ignore_thread_end();
#endif
}

static struct copy_op *op_alloc(struct poller *p)
{
	struct copy_op *op = p->ops_free;

	if (op) {
		p->ops_free = op->next;
		return op;
	}
	return malloc(sizeof(*op));
}

static void op_finish(struct poller *p, struct copy_op *op, int status)
{
	struct queue *q = op->q;

	q->inflight--;
	queue_complete_ns(q, op->user_data, op->submit_ns, status, status ? 0 : op->len,
			  DP_CQE_F_LOCAL);
	region_put(op->ra);
	region_put(op->rb);
	op->next = p->ops_free;
	p->ops_free = op;
}

void copy_engine_submit(struct poller *p, const struct copy_req *req)
{
	struct copy_op *op;

	if (gpu_copy_wanted(req)) {
		gpu_copy_submit(p, req);
		return;
	}
	if (req->len <= cfg.inline_max) {
		client_bytes_copy(req->dst, req->src, req->len);
		queue_complete_ns(req->q, req->user_data, req->submit_ns, 0, req->len,
				  DP_CQE_F_LOCAL);
		return;
	}
	op = op_alloc(p);
	if (!op) {
		queue_complete_ns(req->q, req->user_data, req->submit_ns, -ENOMEM, 0, 0);
		return;
	}
	/* The regions were found in this loop, so they are alive (QSBR); the
	 * references keep them mapped until the last step. */
	atomic_fetch_add(&req->ra->refs, 1);
	atomic_fetch_add(&req->rb->refs, 1);
	*op = (struct copy_op){.q = req->q,
			       .user_data = req->user_data,
			       .submit_ns = req->submit_ns,
			       .dst = req->dst,
			       .src = req->src,
			       .len = req->len,
			       .ra = req->ra,
			       .rb = req->rb};
	req->q->inflight++;
	if (p->ops_tail)
		p->ops_tail->next = op;
	else
		p->ops_head = op;
	p->ops_tail = op;
}

/* Round robin over the pending copies, one chunk each. */
int copy_engine_progress(struct poller *p)
{
	int steps = 0;

	while (p->ops_head && steps < STEPS_PER_LOOP) {
		struct copy_op *op = p->ops_head;
		uint64_t n = op->len - op->done;

		if (n > cfg.chunk)
			n = cfg.chunk;
		client_bytes_copy(op->dst + op->done, op->src + op->done, n);
		op->done += n;
		steps++;
		p->ops_head = op->next;
		if (!p->ops_head)
			p->ops_tail = NULL;
		op->next = NULL;
		if (op->done == op->len) {
			op_finish(p, op, 0);
			continue;
		}
		if (p->ops_tail)
			p->ops_tail->next = op;
		else
			p->ops_head = op;
		p->ops_tail = op;
	}
	return steps + gpu_progress(p);
}

bool copy_engine_busy(const struct poller *p)
{
	return p->ops_head != NULL || gpu_busy(p);
}

void copy_engine_free(struct poller *p)
{
	gpu_poller_free(p);
	while (p->ops_free) {
		struct copy_op *op = p->ops_free;

		p->ops_free = op->next;
		free(op);
	}
}
