/* SPDX-License-Identifier: MIT */
/*
 * fabric_internal.h - what the fabric engine's files share, and nothing
 * else includes (fabric.h is the public side: control thread, rpc.c).
 *
 *   fabric_rail.c  rails (one fabric, domain and AV per NIC), every poller's
 *                  endpoints and CQs, registration of regions and exports
 *   fabric_peer.c  peers: their addresses into the AVs, a peer marked lost
 *   fabric.c       the data path (the engine: submit, progress, slices,
 *                  retries, timeouts, sleeping, cancel at shutdown)
 *
 * Threads as in fabric.h: rails and endpoints are set up and torn down on
 * the main thread and read by the pollers; registrations run on the control
 * thread; a poller's struct fab_poller is its own.
 */
#ifndef DP_FABRIC_INTERNAL_H
#define DP_FABRIC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include "dp_internal.h"
#include "fabric.h"

/* Hidden: -fPIC code reaches these directly, as when they were static. */
#pragma GCC visibility push(hidden)

struct rail {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	uint64_t next_key; /* requested keys, when the provider does not pick */
	size_t tx_depth;   /* operations in flight per endpoint */
	bool wait_fd;	   /* CQs have wait fds (providers needing target progress) */
	bool poke;	   /* needs target progress but has no usable wait fd */
};

/* One poller's endpoint on one rail. */
struct rail_ep {
	struct dp_stats_rail *st; /* this poller's counters for the rail, or NULL */
	struct fid_ep *ep;
	struct fid_cq *cq;
	int wait_fd;
	size_t inflight;
};

struct fab_op; /* a descriptor's transfer (fabric.c) */

/* A poller's fabric state (poller->eng[ENGINE_fabric]): made with its
 * endpoints at start-up (fabric_rail.c), driven by the data path. */
struct fab_poller {
	struct rail_ep ep[DP_MAX_RAILS];
	struct fab_op *head, *tail; /* ops with slices to post or out */
	unsigned nops;
	uint64_t last_timeout_scan;
};

/* A region's or an export's registration on every rail
 * (region->eng[ENGINE_fabric], segment->eng[ENGINE_fabric]). */
struct region_mrs {
	struct fid_mr *mr[DP_MAX_RAILS];
};

/* fabric_rail.c: the rails, set at start-up. virt_addr: some rail's
 * provider addresses remote memory by virtual address, not offset. */
extern struct rail rails[DP_MAX_RAILS];
extern unsigned nrails;
extern bool virt_addr;

/* fabric_rail.c: the engine's start-up and exit (main thread), and its
 * region and export hooks (control thread). */
int fabric_init(void);
void fabric_fini(void);
int fabric_region_register(struct region *reg);
void fabric_region_deregister(struct region *reg);
int fabric_export_register(struct segment *s);
void fabric_export_deregister(struct segment *s);

/* fabric_peer.c: marks @pr gone (logged once); the control thread drops
 * its cached segments (rpc.c checks `dead` on the next open). Any poller.
 * The data path calls it on evidence of loss only: a slice that failed on
 * every rail, an error that says the peer went away, or a timeout with no
 * slice to the peer completed for the timeout (fabric_peer_stalled). */
void fabric_peer_lost(struct peer *pr);

/* A slice to @pr completed at @now (ns): the peer lives. Any poller, hot
 * path: stored only when it moves the stamp by a millisecond or more, so
 * pollers streaming to one peer do not bounce its cache line per slice. */
static inline void fabric_peer_progress(struct peer *pr, uint64_t now)
{
	uint64_t last = atomic_load_explicit(&pr->progress_ns, memory_order_relaxed);

	/* Signed: another poller may have stored a stamp later than ours. */
	if ((int64_t)(now - last) >= 1000000)
		atomic_store_explicit(&pr->progress_ns, now, memory_order_relaxed);
}

/* No slice to @pr has completed, on any poller or rail, for @timeout_ns
 * up to @now (a stamp taken on another poller after @now counts). */
static inline bool fabric_peer_stalled(const struct peer *pr, uint64_t now, uint64_t timeout_ns)
{
	return atomic_load_explicit(&pr->progress_ns, memory_order_relaxed) + timeout_ns <= now;
}

#pragma GCC visibility pop

#endif /* DP_FABRIC_INTERNAL_H */
