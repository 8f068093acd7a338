/* SPDX-License-Identifier: MIT */
/*
 * copy.h - the local copy engine: transfers whose target segment lives on
 * this same service. Host memory: memcpy, inline for small copies and in
 * bounded steps for large ones, so that one huge copy cannot stall the
 * other queues of its poller. The interface is asynchronous: a submitted
 * copy completes (through queue_complete) in this call or in a later
 * copy_engine_progress().
 */
#ifndef DP_COPY_H
#define DP_COPY_H

#include "dp_internal.h"

struct copy_req {
	struct queue *q;
	uint64_t user_data;
	uint64_t submit_ns; /* the descriptor's stamp, for queue_complete_ns() */
	uint8_t *dst;
	const uint8_t *src;
	uint64_t len;
	struct region *ra, *rb; /* borrowed for this loop; the engine takes refs if it keeps them */
	struct segment *seg;	/* set when the target is another service's (fabric) */
};

void copy_engine_submit(struct poller *p, const struct copy_req *req);
/* Runs up to a loop's budget of steps; returns how many ran. */
int copy_engine_progress(struct poller *p);
bool copy_engine_busy(const struct poller *p);
void copy_engine_free(struct poller *p);

#endif /* DP_COPY_H */
