/* SPDX-License-Identifier: MIT */
/*
 * dp_client_pvt.h - libclient internals for the hostile-client suites. Not
 * for direct inclusion by applications: nothing here is part of the ABI.
 */
#ifndef DP_CLIENT_PVT_H
#define DP_CLIENT_PVT_H

#include "dataplane.h"
#include "dp_ring.h"

/* The queue's ring pair (client side: SQ producer, CQ consumer) and its SQ
 * doorbell, so that a test can misuse them the way a hostile client would. */
int dp__queue_ring(struct dp_queue *q, struct dp_ring_pair **pair, int *sq_efd)
	__attribute__((visibility("hidden")));

/* Takes the client's mapping of a dp_alloc region away from libclient:
 * neither dp_free nor dp_close will unmap it; the caller munmaps *addr,
 * *len when it is done (the Python binding, whose views may outlive the
 * region's registration). 0 or -ENOENT (not a dp_alloc region). */
int dp__alloc_detach(struct dp_client *c, int region, void **addr, size_t *len)
	__attribute__((visibility("hidden")));

/* dp_register_file and dp_open_file, and in *len_out the region's length
 * as the service resolved it (a length of 0: to the end of the file). */
int dp__register_file(struct dp_client *c, int fd, uint64_t offset, uint64_t len, unsigned flags,
		      uint64_t *len_out) __attribute__((visibility("hidden")));
int dp__open_file(struct dp_client *c, const char *path, uint64_t offset, uint64_t len,
		  unsigned flags, uint64_t *len_out) __attribute__((visibility("hidden")));

/* The queue's CQ doorbell: the client's end (docs/ring.md). */
int dp__queue_cq_doorbell(struct dp_queue *q) __attribute__((visibility("hidden")));

#endif /* DP_CLIENT_PVT_H */
