/* SPDX-License-Identifier: MIT */
/* xfer_op.c - a descriptor an engine completes later. See xfer_op.h. */
#include "xfer_op.h"

void xfer_op_keep(struct xfer_op *o, const struct xfer *x, uint32_t flags)
{
	*o = (struct xfer_op){.q = x->q,
			      .user_data = x->user_data,
			      .submit_ns = x->submit_ns,
			      .len = x->len,
			      .flags = flags,
			      .ra = x->ra,
			      .rb = x->rb};
	if (o->ra)
		atomic_fetch_add(&o->ra->refs, 1);
	if (o->rb)
		atomic_fetch_add(&o->rb->refs, 1);
	if (x->notify || !x->rb) {
		o->seg = x->seg;
		atomic_fetch_add(&o->seg->refs, 1);
	}
	if (x->notify) {
		o->notify = true;
		notif_req_move(&o->nreq, x->notify);
	}
	x->q->inflight++;
}

void xfer_op_complete(struct poller *p, struct xfer_op *o, int status)
{
	o->q->inflight--;
	/* The bytes are in place (a copy done, an event fired, every slice
	 * delivered): the owner hears of them before the writer sees its
	 * completion (notif.h). */
	if (o->notify)
		notif_finish(p, o->seg, &o->nreq, status);
	queue_complete_ns(o->q, o->user_data, o->submit_ns, status, status ? 0 : o->len, o->flags);
}

void xfer_op_release(struct xfer_op *o)
{
	if (o->ra)
		region_put(o->ra);
	if (o->rb)
		region_put(o->rb);
	if (o->seg)
		segment_put(o->seg);
}

void xfer_op_finish(struct poller *p, struct xfer_op *o, int status)
{
	xfer_op_complete(p, o, status);
	xfer_op_release(o);
}
