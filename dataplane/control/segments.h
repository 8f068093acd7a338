/* SPDX-License-Identifier: MIT */
/*
 * segments.h - the service's segments, all on the control thread:
 *
 *  - exports: regions of this service's clients, published under a name
 *    (and in the cluster directory, directory.h);
 *  - the remote-segment cache: segments of other services, resolved
 *    through their RPC port (rpc.h, asynchronously: lookups in flight are
 *    kept here with whoever waits for them) or the directory, kept until
 *    the peer is found dead, the export is replaced, or the directory says
 *    so;
 *  - peers: the other services those segments live on, with their fabric
 *    addresses (fabric.h), kept for the life of the service.
 *
 * Killing an export is two steps around a grace period: exports_kill()
 * unlinks and marks dead, the caller runs qsbr_synchronize(), then
 * exports_release() drops the references (docs/architecture.md).
 */
#ifndef DP_SEGMENTS_H
#define DP_SEGMENTS_H

#include <stdbool.h>

#include "dp_internal.h"

/* The export of that name, or NULL. */
struct segment *export_find(const char *name);

#define SEGMENT_PENDING 1
typedef void (*segment_resolved_fn)(void *arg, int rc, struct segment *s);

/* Exports `reg` of client `owner` as `name`: 0, -EPERM (access beyond a
 * file region's), -EEXIST (the name is taken here, a publish of it
 * included), -ENOMEM, -EHOSTUNREACH (the directory is not connected). Or,
 * when the record goes to the cluster directory (directory.h),
 * SEGMENT_PENDING: fn(arg, rc, s) is called once, later, from the control
 * loop, with 0 and the export (listed now; no reference taken) or -EEXIST
 * (another live service holds the name), -EHOSTUNREACH, -ETIMEDOUT,
 * -ECANCELED (shutdown). Until then the name is taken but nobody finds
 * the export. */
int export_add(struct client *owner, struct region *reg, const char *name, unsigned access,
	       segment_resolved_fn fn, void *arg);

/* Unexports `name` for client `c` (kill, grace period, release): 0,
 * -ENOENT, or -EPERM (another client's export). With `fn`, and a record in
 * the cluster directory, SEGMENT_PENDING: fn(arg, 0, NULL) is called from
 * the loop once the directory thread has deleted the record (or, unreachable,
 * kept it to delete at reconnect), or with -ECANCELED at shutdown. */
int export_remove(struct client *c, const char *name, segment_resolved_fn fn, void *arg);

/* Unlinks and marks dead every export of `owner` (when not NULL) or of
 * region `reg` (when not NULL); returns them as a list for
 * exports_release() after the caller's qsbr_synchronize(). */
struct segment *exports_kill(const struct client *owner, const struct region *reg);
void exports_release(struct segment *dead);

/*
 * The segment a client opens: `peer` "" and `name` exported here, or
 * another service's (peer "host:port", or "" and not exported here while
 * the directory is on). A peer string that names this service (rpc.h
 * rpc_is_self), or an answer that does, resolves locally.
 *
 * Returns 0 with *out (no reference taken) when known now: a local export,
 * or a segment the directory named before (cached). Through a peer's RPC
 * port or the directory thread (directory.h) the answer takes a network
 * exchange: SEGMENT_PENDING, and fn(arg, rc, s) is called once,
 * later, from the control loop (never from inside this call), with 0 and
 * the segment (no reference taken: take one before returning) or the
 * error; opens of the same (peer, name) in flight share one lookup. A peer
 * given by host name that resolves to this service (with our port) is
 * answered by the local export. Errors:
 * -ENOENT, -EHOSTUNREACH, -ETIMEDOUT, -EBADMSG (what a peer or the
 * directory answered), -EAGAIN (too many lookups in flight), -ENOMEM,
 * -ECANCELED (shutdown), or the peer's status.
 */
int segment_resolve(const char *peer, const char *name, struct segment **out,
		    segment_resolved_fn fn, void *arg);

/*
 * As segment_resolve() for (peer, name), when the answer of peer's RPC port
 * is known already (`r`, checked: an engine session's port described one
 * of its service's exports, session.h): what the answer leads to (this
 * service's own export, a same-host mapping, which asks the peer's
 * same-host socket, or a fabric segment) without asking the RPC port
 * again. fn(arg, rc, s) is called once, maybe from inside this call;
 * returns SEGMENT_PENDING, or -ENOMEM (fn not called).
 */
struct dp_rpc_lookup_reply;
int segment_resolve_reply(const char *peer, const char *name, const struct dp_rpc_lookup_reply *r,
			  segment_resolved_fn fn, void *arg);

/* A peer that asked us (rpc_server.c, after it proved the fleet key) and sent its
 * rail addresses: inserted into our address vectors like a peer we asked,
 * so that providers whose target must know its initiator work. */
struct dp_rpc_rail;
void segments_peer_learn(const char *name, unsigned nrails, const struct dp_rpc_rail *rail);

/* The directory's word on a name (directory_invalidate_fn, directory.h). */
void remotes_invalidate(const char *name, bool kill);

/*
 * Probes: a fabric transfer to another service's segment `s` that failed on
 * every rail does not take the peer for lost at once. The failure may be
 * the owner's unexport (its key is revoked: the provider fails the slice,
 * and tcp closes the connection, cancelling the peer's other slices too),
 * which a peer reached by host:port is never told of. The control thread
 * asks the owner's RPC port (the peer string `s` was opened by, else its
 * server name, host:rpc-port) for `s`, as an open would, and compares the
 * answer with what it has, installing nothing:
 *  - the same description: intact, the transfer is posted again;
 *  - not exported, or another description: `s` is dead (-ECONNRESET, as
 *    after a local unexport), the peer is not;
 *  - no answer: the peer is lost (fabric_peer_lost).
 * Probes of one peer go one at a time: one that finds it lost settles the
 * others at once.
 *
 * segment_probe_ask (any thread; never waits for the network) returns the
 * ticket of the caller's question; segment_probe_answered(s, t) is true
 * once a probe asked after it found `s` intact. An answer that kills `s`
 * or its peer is seen in their `dead` words instead.
 */
uint32_t segment_probe_ask(struct segment *s);
static inline bool segment_probe_answered(struct segment *s, uint32_t ticket)
{
	return (int32_t)(atomic_load_explicit(&s->probe_done, memory_order_acquire) - ticket) >= 0;
}
/* The control loop's epoll set, for the wake-up of segment_probe_ask: 0
 * or -errno (logged). */
int segments_start(int epfd);
/* At exit, the pollers stopped: ends the lookups in flight (their waiters are told
 * -ECANCELED), drops the remote-segment cache and frees the peers. */
void segments_cleanup(void);

#endif /* DP_SEGMENTS_H */
