/* SPDX-License-Identifier: MIT */
/*
 * directory.h - the cluster directory: segment records in Redis, so that a
 * segment can be opened by name alone anywhere in a fleet (docs/cluster.md).
 *
 * A record is the peer protocol's lookup reply (rpc.h) for an export,
 * stored under "dataplane:seg:<name>" with a TTL its owner refreshes. Redis
 * is spoken to by one directory thread, through hiredis with short
 * timeouts (directory.c); the control thread only hands it requests and
 * takes its answers from an eventfd in the control loop, so it never waits
 * on Redis. Without --directory every call is a no-op (lookups: -ENOENT).
 */
#ifndef DP_DIRECTORY_H
#define DP_DIRECTORY_H

#include <stdbool.h>
#include <stdint.h>

#include "rpc.h"

#define DP_DIRECTORY_TTL_S 10	    /* default --directory-ttl */
#define DP_DIRECTORY_TIMEOUT_MS 500 /* connect and command timeout */

/* Flags (service.c): the URL redis://[user[:password]@]host[:port][/db]
 * (-EINVAL when it is not one) and the records' TTL in seconds. */
int directory_configure(const char *url);
void directory_set_ttl(unsigned ttl_s);
bool directory_enabled(void);

/*
 * Called when a record that a lookup returned is gone or replaced (kill:
 * its owner withdrew it or died; segments opened from it must fail from
 * now on), or when records may have changed unseen (name NULL, kill false:
 * after a reconnect; forget the cached lookups, keep what is open).
 */
typedef void (*directory_invalidate_fn)(const char *name, bool kill);

/* Start and stop. Start registers the answers' eventfd in the control
 * thread's epoll set (event.h), starts the directory thread and waits (at
 * most 2 s, before any client is served) for its first connection attempt,
 * so that an export right after start-up finds Redis up; an unreachable
 * Redis is no start-up failure (the thread retries with backoff). Stop ends
 * the thread after what was asked of it (withdrawals included) and forgets
 * everything. */
int directory_start(int epfd, directory_invalidate_fn invalidate);
void directory_stop(void);

/*
 * The calls below run on the control thread and never wait: an answer
 * comes later, from the control loop (never from inside the call), through
 * `done(arg, rc, reply)`, exactly once. They return DIRECTORY_PENDING when
 * it will, or a result at once: while the directory thread is not
 * connected, -EHOSTUNREACH (exports and lookups fail at once, as before).
 * Answers come in the order the directory thread produced them, and
 * invalidations (directory_invalidate_fn) in that same order.
 */
#define DIRECTORY_PENDING 1
typedef void (*directory_done_fn)(void *arg, int rc, const struct dp_rpc_lookup_reply *r);

/* Publishes the record of a new export: 0 at once for one the fabric does
 * not reach (nothing to publish); later 0, -EEXIST another live service
 * holds the name, -EHOSTUNREACH / -ETIMEDOUT the directory is unreachable
 * (r NULL). */
int directory_publish(const struct segment *s, directory_done_fn done, void *arg);
/* Deletes the record of an export that goes, if it is still ours; after
 * any publish of the name asked before (one queue, in order). With `done`,
 * DIRECTORY_PENDING: done(arg, 0, NULL) once deleted (or, Redis
 * unreachable, kept to delete at reconnect); else 0. */
int directory_withdraw(const char *name, directory_done_fn done, void *arg);
/* Looks a name up, validated as an RPC reply is, and watches it for
 * invalidation (subscribed before the record is read, so no invalidation
 * is missed): later 0 with the record, -ENOENT, -EBADMSG a malformed
 * record, -EHOSTUNREACH / -ETIMEDOUT the directory is unreachable. */
int directory_lookup(const char *name, directory_done_fn done, void *arg);
/* At exit, before directory_stop(): the publishes and lookups in flight
 * end -ECANCELED (their records are withdrawn if they were published). */
void directory_cancel(void);

#endif /* DP_DIRECTORY_H */
