/* SPDX-License-Identifier: MIT */
/*
 * fabric.h - transfers to segments of other services, through libfabric RMA.
 *
 * One rail per NIC (libfabric domain). Each rail has one domain, one AV and
 * one registration per region, shared by the pollers (FI_THREAD_SAFE); each
 * poller owns its own endpoint and CQ on every rail, so posting and reaping
 * take no lock of ours. Peers target the endpoint of poller 0, whose CQs
 * therefore also drive target-side progress for providers that need it.
 */
#ifndef DP_FABRIC_H
#define DP_FABRIC_H

#include <rdma/fabric.h>

#include "dp_internal.h"

#define DP_MAX_RAILS 8
#define DP_FABRIC_ADDR_MAX 128

/* A segment of another service, as its RPC reply described it. */
struct remote_seg {
	struct peer *peer;
	uint64_t base; /* target address of byte 0 (0 when the provider uses offsets) */
	uint64_t len;
	unsigned access;
	unsigned nrails;
	uint64_t key[DP_MAX_RAILS];
};

/* Another service, known by its server name. Control thread only, except
 * `addr` (read by pollers; immutable once published) and `dead`. */
struct peer {
	char name[DP_NAME_MAX];
	unsigned nrails;
	fi_addr_t addr[DP_MAX_RAILS];
	atomic_int dead;
	/* The addresses as the peer sent them: the same name with other
	 * addresses is a restarted peer. */
	unsigned nsent;
	uint32_t sent_len[DP_MAX_RAILS];
	uint8_t sent[DP_MAX_RAILS][DP_FABRIC_ADDR_MAX];
	struct peer *next;
};

struct fabric_config {
	char provider[32]; /* efa, tcp, shm, sockets, auto, none */
	char nics[256];	   /* comma list of domain names, or "auto" */
	size_t slice;	   /* bytes per RMA operation */
	unsigned timeout_ms;
};
extern struct fabric_config fab_cfg;

/* Start-up: opens the rails and every poller's endpoints. 0 with no rail
 * when the provider is "none". */
int fabric_init(void);
void fabric_fini(void);
unsigned fabric_nrails(void);
/* The address peers target on `rail`; *len in, bytes out. */
int fabric_rail_addr(unsigned rail, void *buf, size_t *len);
bool fabric_virt_addr(void);

/* Registrations. Regions get local access on every rail (r->priv); an export
 * gets a remote key per rail with exactly the export's access. */
int fabric_region_register(struct region *r);
void fabric_region_deregister(struct region *r);
int fabric_export_register(struct segment *s, uint64_t keys[DP_MAX_RAILS]);
void fabric_export_deregister(struct segment *s);

/* Inserts a peer's rail addresses into the AVs. -EINVAL for an address that
 * is not of this provider's format and length. */
int fabric_peer_insert(struct peer *p, const uint8_t addrs[][DP_FABRIC_ADDR_MAX],
		       const uint32_t lens[], unsigned nrails);

/* Data path, poller thread. The descriptor is validated; `local` and `seg`
 * are alive for this loop (the engine takes references). */
void fabric_submit(struct poller *p, struct queue *q, const struct dp_desc *d, struct region *local,
		   struct segment *seg);
int fabric_progress(struct poller *p);
bool fabric_busy(const struct poller *p);
/* Wait fds of this poller's CQs for its epoll set (-1 when none), and the
 * check before sleeping: 0 when it may sleep. */
int fabric_wait_fds(struct poller *p, int *fds, int max);
int fabric_trywait(struct poller *p);
/* The longest a poller may sleep (ms) for rails whose target side needs
 * progress and that cannot wake it; -1 for no limit. */
int fabric_sleep_cap_ms(void);
/* Shutdown: in-flight operations complete with -ECANCELED. */
void fabric_cancel_all(struct poller *p);

#endif /* DP_FABRIC_H */
