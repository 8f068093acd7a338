/* SPDX-License-Identifier: MIT */
/*
 * xfer_op.h - a descriptor an engine completes later: what its completion
 * needs (queue, user data, stamp, length, flags), the references it holds
 * until then, and its notification. Every engine that keeps a descriptor
 * past its submit (host, vm, gpu, file, stage, fabric) embeds one, takes it
 * with xfer_op_keep() and completes it with xfer_op_finish(): one way to
 * end a descriptor, so that the owner hears of the bytes before the
 * writer's completion, and q->inflight, the completion and the references
 * always go together. Poller thread.
 */
#ifndef DP_XFER_OP_H
#define DP_XFER_OP_H

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "notif.h"

struct xfer_op {
	struct queue *q;
	uint64_t user_data;
	uint64_t submit_ns;	/* the descriptor's stamp, for queue_complete_ns() */
	uint64_t len;		/* bytes its completion reports on success */
	uint32_t flags;		/* its completion's DP_CQE_F_* */
	struct region *ra, *rb; /* references (NULL: none): x->ra, x->rb */
	/* A reference on the target segment (NULL: none): held with a
	 * notification, and always for another service's segment (no rb). */
	struct segment *seg;
	bool notify; /* nreq goes to seg's owner once the bytes are in place */
	struct notif_req nreq;
};

/*
 * Keeps @x (its regions and segment alive in this loop by QSBR): fills @o,
 * takes references on x->ra and x->rb, and on x->seg when x carries a
 * notification (whose request, and message, @o takes) or names another
 * service's segment; counts it in q->inflight. @flags: its completion's.
 */
void xfer_op_keep(struct xfer_op *o, const struct xfer *x, uint32_t flags);

/* Ends it: q->inflight--, its notification delivered when @status is 0,
 * else dropped; its completion (o->len bytes, or 0 on an error); then its
 * references dropped. @p: the poller (for the stats; NULL for another
 * service's segment). */
void xfer_op_finish(struct poller *p, struct xfer_op *o, int status);

/* The two halves of xfer_op_finish, for an engine whose descriptor
 * completes before it may drop what it holds (the fabric: slices still in
 * the provider's hands). */
void xfer_op_complete(struct poller *p, struct xfer_op *o, int status);
void xfer_op_release(struct xfer_op *o);

#endif /* DP_XFER_OP_H */
