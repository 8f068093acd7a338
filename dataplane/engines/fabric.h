/* SPDX-License-Identifier: MIT */
/*
 * fabric.h - transfers to segments of other services, through libfabric RMA.
 *
 * One rail per NIC (libfabric domain). Each rail has one domain, one AV and
 * one registration per region, shared by the pollers (FI_THREAD_SAFE); each
 * poller owns its own endpoint and CQ on every rail, so posting and reaping
 * take no lock of ours. Peers target the endpoint of poller 0, whose CQs
 * therefore also drive target-side progress for providers that need it,
 * and which receives the owner-staging requests of peers (FI_MSG, stage.c).
 *
 * Code: fabric_rail.c (rails, endpoints, registrations), fabric_peer.c
 * (peers), fabric.c (the data path); fabric_internal.h between them.
 */
#ifndef DP_FABRIC_H
#define DP_FABRIC_H

#include <stdatomic.h>
#include <stdbool.h>

#include <rdma/fabric.h>

#include "dp_internal.h"

#define DP_FABRIC_ADDR_MAX 128

/* A segment of another service, as its RPC reply described it. */
struct remote_seg {
	struct peer *peer;
	uint64_t base; /* target address of byte 0 (0 when the provider uses offsets) */
	uint64_t len;
	unsigned access;
	unsigned nrails;
	uint64_t key[DP_MAX_RAILS];
	/* DP_RPC_F_GPU_UNREGISTERED (rpc.h): GPU memory its owner could not
	 * register on its rails; transfers to it fail with -ENOTSUP. */
	uint32_t flags;
	atomic_int warned; /* the -ENOTSUP reason was logged (any poller) */
};

/* Another service, known by its server name. Control thread only, except
 * `addr` (read by pollers; immutable once published), `dead` and
 * `progress_ns`. */
struct peer {
	char name[DP_NAME_MAX];
	unsigned nrails;
	fi_addr_t addr[DP_MAX_RAILS];
	atomic_int dead;
	/* When a slice to this peer last completed, on any poller and rail
	 * (CLOCK_MONOTONIC ns, 0: never; ~1 ms resolution). A peer is taken
	 * for lost by a timeout only when this is older than the timeout. */
	_Atomic uint64_t progress_ns;
	/* The addresses as the peer sent them: the same name with other
	 * addresses is a restarted peer. */
	unsigned nsent;
	uint32_t sent_len[DP_MAX_RAILS];
	uint8_t sent[DP_MAX_RAILS][DP_FABRIC_ADDR_MAX];
	/* A probe of one of its segments is in flight (segments.c): they
	 * go one at a time per peer. Control thread only. */
	bool probing;
	struct peer *next;
};

struct fabric_config {
	char provider[32]; /* efa, efa-direct, tcp, shm, sockets, auto, none */
	char nics[256];	   /* comma list of domain names, or "auto" */
	size_t slice;	   /* bytes per RMA operation */
	unsigned timeout_ms;
	/* --no-hmem: rails are opened without FI_HMEM, so GPU memory is
	 * never registered and goes through host staging (stage.c). */
	bool no_hmem;
	/* --stage-bufs: bounce buffers of `slice` bytes per poller for host
	 * staging (0: off; GPU memory the rails cannot register then fails
	 * with -ENOTSUP). */
	unsigned stage_bufs;
	/* --stage-host (a test option): host memory stands in for GPU memory
	 * on rails without FI_HMEM: host regions and exports get no fabric
	 * registration, so transfers from them are staged (memcpy in place
	 * of cudaMemcpyAsync) and transfers to them fail with -ENOTSUP. */
	bool stage_host;
};
extern struct fabric_config fab_cfg;

/* Start-up: opens the rails and every poller's endpoints. 0 with no rail
 * when the provider is "none". */
/* The engine (engine.h: fabric_engine) registers regions on every rail
 * (local access, region->eng[ENGINE_fabric]) and exports (a remote key per
 * rail with exactly the export's access, segment->fab_keys), and moves the
 * slices of transfers to other services. What the control thread and the
 * peer protocol need besides: */
unsigned fabric_nrails(void);
/* The address peers target on `rail`; *len in, bytes out. */
int fabric_rail_addr(unsigned rail, void *buf, size_t *len);
bool fabric_virt_addr(void);

/* Inserts a peer's rail addresses into the AVs. -EINVAL for an address that
 * is not of this provider's format and length. Control thread, and the
 * first poller for the initiators of owner-staged transfers (stage.c): the
 * AVs are FI_THREAD_SAFE. */
int fabric_peer_insert(struct peer *p, const uint8_t addrs[][DP_FABRIC_ADDR_MAX],
		       const uint32_t lens[], unsigned nrails);

/* fabric_peer.c: marks @pr gone (logged once); the control thread drops
 * its cached segments (segments.c checks `dead` on the next open). Any
 * thread. Called on evidence of loss only: a slice that failed again after
 * its owner said the segment stands, a probe the peer did not answer
 * (segments.h), or a timeout with no slice to the peer completed for the
 * timeout (fabric_peer_stalled). */
void fabric_peer_lost(struct peer *pr);

#endif /* DP_FABRIC_H */
