/* SPDX-License-Identifier: MIT */
/*
 * samehost.h - segments of another service on this same host, moved without
 * the fabric (docs/cluster.md "Same host").
 *
 * Two services of one host find each other in the peer protocol (rpc.h):
 * every reply carries the server's host identity (the kernel's boot id) and
 * the path of its local peer socket. An asker with the same boot id asks
 * again on that Unix socket, authenticated with the fleet key like any
 * lookup, and is given the memory itself: the export's memfd (host memory)
 * or the CUDA IPC handle of its allocation (GPU memory; the shareable fds
 * of its pieces for memory mapped with cuMemMap), with the
 * exporter's pidfd and its export table, through SCM_RIGHTS. The asker maps
 * it once per export and from then on its pollers copy into it like into a
 * local segment (memcpy, cudaMemcpyAsync): completions carry
 * DP_CQE_F_SAME_HOST. Memory a client registered with dp_register_mem
 * (REGION_VM) cannot be mapped: the reply carries that client's pidfd, and
 * the asker's vm engine reads and writes the process itself.
 *
 * Liveness without messages: the export table is a memfd of 64-bit words
 * the exporter writes; an export owns one word, which holds an odd
 * generation while it lives and changes when it goes. The importer's
 * pollers compare it before every descriptor (samehost_alive; the burst
 * fast path of poller.c before every run of descriptors to one segment
 * within a loop), and the exporter's pidfd in the importer's epoll set
 * marks every segment of a service that exits.
 *
 * This file is also the `samehost` engine (engines.def): it has no data
 * path, only the export hooks that give an export its word.
 */
#ifndef DP_SAMEHOST_H
#define DP_SAMEHOST_H

#include <stdbool.h>
#include <stdint.h>

#include "dp_internal.h"
#include "dp_proto.h"

#define DP_HOST_ID_LEN 16   /* the boot id's bytes */
#define DP_SUN_PATH_MAX 108 /* sun_path */
#define SAMEHOST_SLOTS 4096 /* export table words: exports a peer can map */

/* SAMEHOST_VM: memory of the exporter's client process (dp_register_mem,
 * REGION_VM), which the asker reads and writes itself with
 * process_vm_readv/writev (vm.h). */
enum samehost_kind {
	SAMEHOST_HOST = 1,
	SAMEHOST_CUDA = 2,
	SAMEHOST_VM = 3,
	SAMEHOST_CUDA_VMM = 4,
};

/* What the exporter sends with a same-host reply. fds: [0] its pidfd, [1]
 * the export table, [2] the region's memfd (SAMEHOST_HOST), the pidfd of
 * the client process whose memory it is (SAMEHOST_VM), or a memfd
 * holding the region's struct dp_msg_region_register_cuda_vmm
 * (SAMEHOST_CUDA_VMM: it does not fit the reply, whose size every peer of
 * the fleet checks), [3 ..] then one fd per VMM piece, in order. */
#define SAMEHOST_FDS (3 + (int)DP_CUDA_VMM_MAX_PIECES)
struct dp_samehost_desc {
	uint32_t kind; /* enum samehost_kind */
	uint32_t slot; /* the export's word in the table */
	uint64_t gen;  /* its value while the export lives */
	/* SAMEHOST_HOST: the mapping of the memfd (map_off page-aligned) and
	 * where byte 0 of the segment is in it. SAMEHOST_VM: map_off is the
	 * address of byte 0 in the client process, the others 0. */
	uint64_t map_off, map_len, base_off;
	/* SAMEHOST_CUDA: the allocation, as a client registers it. */
	struct dp_msg_region_register_cuda cuda;
};

/* An imported segment's link to its exporter (struct segment `same`). */
struct samehost_peer;
struct samehost_seg {
	struct samehost_peer *peer;
	const _Atomic uint64_t *word;
	uint64_t gen;
	const atomic_int *peer_dead;
};

/* Pollers: is the segment's export still there? Two loads of lines its
 * exporter writes only when an export goes. */
static inline bool samehost_alive(const struct samehost_seg *ss)
{
	return atomic_load_explicit(ss->word, memory_order_acquire) == ss->gen &&
	       !atomic_load_explicit(ss->peer_dead, memory_order_acquire);
}

/* The server name ("host:port") of the service that exports `ss`: where
 * notifications for it go (notif.h). Any thread; as long as `ss` lives. */
const char *samehost_seg_server(const struct samehost_seg *ss);

/* Options (service.c): --no-same-host, --same-host-socket PATH. */
void samehost_configure(bool off, const char *path);
/* On (and its identity and path known) after the engine's init. */
bool samehost_enabled(void);
const uint8_t *samehost_id(void);
const char *samehost_path(void);
/* The control loop's epoll set, for the exporters' pidfds. */
void samehost_start(int epfd);

/* Exporter (rpc_server.c): the description of export `s` for a same-host asker,
 * and the fds to send (dup'ed: the caller closes them once sent). 0,
 * -ENOTSUP (a file region; no word left), -EMFILE. */
int samehost_describe(const struct segment *s, struct dp_samehost_desc *d, int *fds,
		      unsigned *nfds);

/* Importer (segments.c). Is a reply from a service of this host that can
 * give its memory? */
struct dp_rpc_lookup_reply;
bool samehost_candidate(const struct dp_rpc_lookup_reply *r);
/* Is cached segment `s` (imported earlier) the export reply `r` describes,
 * and still alive? */
bool samehost_same(const struct segment *s, const struct dp_rpc_lookup_reply *r);
/* Maps what a same-host reply gave (takes the fds, always) as a segment
 * with one reference (the caller's): 0, -EBADMSG (fds or fields that do not
 * fit), -ENOTSUP (GPU memory in a build without CUDA), -ENODEV, -ENOMEM;
 * for a client's process memory (SAMEHOST_VM) -EPERM (this service may not
 * access that process), -EFAULT, -ESRCH. */
int samehost_import(const char *peer, const char *name, const struct dp_rpc_lookup_reply *r,
		    int *fds, unsigned nfds, struct segment **out);

#endif /* DP_SAMEHOST_H */
