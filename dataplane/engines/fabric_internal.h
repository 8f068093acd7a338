/* SPDX-License-Identifier: MIT */
/*
 * fabric_internal.h - what the fabric engine's files share, and nothing
 * else includes (fabric.h is the public side: control thread, the RPC).
 *
 *   fabric_rail.c  rails (one fabric, domain and AV per NIC), every poller's
 *                  endpoints and CQs, registration of regions and exports
 *   fabric_peer.c  peers: their addresses into the AVs, a peer marked lost
 *   fabric.c       the data path (the engine: submit, progress, slices,
 *                  retries, rail health, timeouts, sleeping, cancel at
 *                  shutdown), also
 *                  for another engine's buffers (fabric_post: stage.c)
 *   stage.c        host staging of memory the rails cannot register (GPU
 *                  memory without FI_HMEM) through registered bounce
 *                  buffers, posted with fabric_post
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
#include "oplist.h"
#include "topo.h"

/* Hidden: -fPIC code reaches these directly, as when they were static. */
#pragma GCC visibility push(hidden)

struct rail {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	uint64_t next_key; /* requested keys, when the provider does not pick */
	size_t tx_depth;   /* operations in flight per endpoint */
	/* WRITEs of up to this many bytes of host memory are posted with
	 * FI_INJECT (0: never); tx_flags are the completion semantics every
	 * operation asks for (FI_DELIVERY_COMPLETE where the rail has it),
	 * which fi_writemsg takes explicitly. */
	size_t inject_size;
	uint64_t tx_flags;
	bool wait_fd;		/* CQs have wait fds (providers needing target progress) */
	bool poke;		/* needs target progress but has no usable wait fd */
	char pci[TOPO_BDF_LEN]; /* its NIC's PCI address, "" if it has none */
};

/* One poller's endpoint on one rail. */
struct rail_ep {
	struct dp_stats_rail *st; /* this poller's counters for the rail, or NULL */
	struct fid_ep *ep;
	struct fid_cq *cq;
	int wait_fd;
	size_t inflight;
	/* Poller 0 on a rail without wait fds (shm): peers' RMA into this
	 * endpoint, counted by the provider (FI_RMA_EVENT), and the count
	 * last seen; NULL where the provider has no such counter. */
	struct fid_cntr *rma_cntr;
	uint64_t rma_seen;
	bool bind_cntr;
};

struct fab_op;	  /* a descriptor's transfer (fabric.c) */
struct fab_slice; /* one RMA operation of it (fabric.c) */
struct fab_chunk; /* memory of a poller's pools (fabric.c) */

/* What every operation posted on a rail's endpoint hands libfabric as its
 * context, so that the CQ reader (fabric.c reap) hands each completion to
 * whoever posted it, as event.h's loop does with fds: the stage engine's
 * messages of the owner-staging protocol carry their handler; the
 * fabric's own RMA slices carry none and are read inline (the hot path
 * takes no indirect call). */
struct fab_ctx {
	struct fi_context2 ctx; /* first: libfabric hands it back */
	/* A completion (fi_err 0) or a CQ error read from poller @p's CQ,
	 * on its thread; NULL: a slice of fabric.c. */
	void (*on_cq)(struct poller *p, struct fab_ctx *c, int fi_err);
};

/*
 * One rail toward one peer as one poller sees it (fabric.c, "rail
 * health"): what its slices took, what it holds, whether it is in the
 * stripe. A poller's own: no lock, no atomics; each poller that sends to
 * a peer judges its rails from its own completions.
 */
struct rail_health {
	uint64_t last_done_ns;	/* a post on it to the peer last completed */
	uint64_t busy_since_ns; /* `out` went from 0 to 1 (valid while out) */
	uint64_t gap_ns;	/* smoothed time per completed slice while busy */
	/* The longest time between two of its completions lately (the
	 * machine's and the network's hiccups): in 2^32 ns windows, this
	 * one's and the one before's. */
	uint64_t worst_ns[2];
	uint64_t worst_epoch;
	uint64_t stall_since_ns; /* its last completion before it was taken out */
	uint64_t ew_bytes;	 /* smoothed bytes and busy ns per completion: */
	uint64_t ew_ns;		 /* their ratio is its measured throughput */
	uint64_t out_bytes;	 /* bytes of its posts out */
	uint64_t out_ns;	 /* taken out */
	uint64_t state_ns;	 /* taken out, or its last probe posted */
	unsigned out;		 /* posts out on it to the peer */
	uint8_t state;		 /* enum dp_stats_rail_state */
	bool probe_out;
};

/* A peer's rails as one poller sees them: a slot of a small table of the
 * poller's keyed by the peer (peers live as long as the service). A slot
 * with posts out is never given to another peer. */
struct peer_health {
	const struct peer *peer;
	uint64_t used_ns;
	unsigned out;		      /* posts out over all its rails */
	int64_t credit[DP_MAX_RAILS]; /* weighted round robin (fabric.c) */
	struct rail_health r[DP_MAX_RAILS];
};
#define FAB_HEALTH_SLOTS 64

/* A poller's fabric state (poller->eng[ENGINE_fabric]): made with its
 * endpoints at start-up (fabric_rail.c), driven by the data path. */
struct fab_poller {
	struct rail_ep ep[DP_MAX_RAILS];
	struct op_fifo ops; /* ops with slices to post or out */
	unsigned nops;	    /* in `ops` */
	unsigned lingering; /* of them completed, waiting for posts a dead
			     * rail still holds (counted at each progress) */
	uint64_t last_timeout_scan;
	struct peer_health health[FAB_HEALTH_SLOTS];
	/* Where probes of rails taken out READ 8 bytes to (fabric.c),
	 * registered on every rail. */
	uint8_t *scratch;
	struct region_mrs *scratch_mrs;
	uint64_t nposted;    /* fabric_post's transfers so far: their first rail */
	unsigned idle_ticks; /* poller 0: progress calls with nothing of its own */
	/* Pools: ops and slices come from these free lists and go back to
	 * them, so a transfer allocates nothing once the pools hold as many
	 * as are ever in flight; they grow by a chunk when empty (counted
	 * in rail 0's `allocs`). Freed with the poller (fabric_pools_fini). */
	struct op_pool free_ops;
	struct fab_slice *free_slices;
	struct fab_chunk *chunks;
};

/* A region's or an export's registration on every rail
 * (region->eng[ENGINE_fabric], segment->eng[ENGINE_fabric]). */
struct region_mrs {
	struct fid_mr *mr[DP_MAX_RAILS];
	/* GPU memory: the rails nearest its device (bit r: rail r), which
	 * its transfers take; 0: every rail (host memory, or no topology). */
	uint32_t near;
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

/* fabric_rail.c: memory of another engine (stage.c's bounce buffers,
 * host memory) registered on every rail for local access, as a region's
 * is; NULL when a rail refused it (logged). Main or control thread. */
struct region_mrs *fabric_mem_register(void *buf, size_t len);
/* The same, also open to remote READ and WRITE (stage.c's bounce buffers,
 * which owners of staged exports read and write: stage.c). */
struct region_mrs *fabric_mem_register_remote(void *buf, size_t len);
uint64_t fabric_mem_key(const struct region_mrs *m, unsigned rail);
void fabric_mem_deregister(struct region_mrs *m);
/* The first rail that cannot register @reg (memory that is then staged),
 * and why, for the log line of a refusal; a rail's provider name. */
int fabric_rail_unfit(const struct region *reg, const char **why);
const char *fabric_rail_provider(unsigned r);

/*
 * fabric.c, for another engine on the same poller (stage.c): @len bytes
 * between @buf, inside memory registered on every rail as @mrs, and
 * @tgt_off of @seg, another service's segment; WRITE sends @buf, READ fills
 * it. Sliced, bounded, retried and timed out exactly like a descriptor's
 * transfer (the same fab_op). @done is called once, when a descriptor would
 * complete, with 0 or the -errno it would complete with; @release once,
 * after it (at once on success; after a timeout or a cancel, when the
 * slices still out came back), when the provider holds nothing of @buf any
 * more. Both on this poller, from the fabric's progress or cancel_all,
 * never from inside this call. Returns 0, or the error of
 * fabric_target_check, or -ENOMEM (nothing posted, no call).
 */
typedef void (*fab_done_fn)(void *arg, int status);
int fabric_post(struct poller *p, uint8_t opcode, struct segment *seg, uint64_t tgt_off, void *buf,
		struct region_mrs *mrs, uint64_t len, fab_done_fn done, fab_done_fn release,
		void *arg);
/* Whether transfers to @seg can start on @p: 0, -EHOSTUNREACH (no fabric
 * here, or its peer is known to be gone), or -ENOTSUP (GPU memory its
 * owner could not register; logged once per segment, naming the rail and
 * the reason). Poller thread. */
int fabric_target_check(struct poller *p, struct segment *seg);

/* fabric.c: a poller's pools, filled at start-up (main thread; -ENOMEM)
 * and freed with its endpoints. */
int fabric_pools_init(struct fab_poller *fp);
void fabric_pools_fini(struct fab_poller *fp);

/* fabric.c: the errno a transfer fails with for a CQ error @fi_err. */
int fabric_errno(int fi_err);
/* The endpoint of poller @p on @rail (stage.c's messages). */
struct fid_ep *fabric_ep(struct poller *p, unsigned rail);

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
