/* SPDX-License-Identifier: MIT */
/*
 * directory.h - the cluster directory: segment records in Redis, so that a
 * segment can be opened by name alone anywhere in a fleet (docs/cluster.md).
 *
 * A record is the peer protocol's lookup reply (rpc.h) for an export,
 * stored under "dataplane:seg:<name>" with a TTL its owner refreshes. Every
 * function here runs on the control thread; Redis is spoken to through
 * hiredis with short timeouts, and the connection is re-made with backoff.
 * Without --directory every call is a no-op (lookups: -ENOENT).
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

/* Start and stop, with the control thread's epoll set, into which the
 * directory registers its timer and sockets with handlers of its own
 * (event.h). Start tries to connect at once (an unreachable Redis is no
 * start-up failure: the service retries with backoff); stop forgets
 * everything. */
int directory_start(int epfd, directory_invalidate_fn invalidate);
void directory_stop(void);

/* Publishes the record of a new export (nothing for one the fabric does
 * not reach): 0, -EEXIST another live service holds the name,
 * -EHOSTUNREACH / -ETIMEDOUT the directory is unreachable. */
int directory_publish(const struct segment *s);
/* Deletes the record of an export that goes, if it is still ours. */
void directory_withdraw(const char *name);
/* Looks a name up, validated as an RPC reply is, and watches it for
 * invalidation: 0, -ENOENT, -EBADMSG a malformed record, -EHOSTUNREACH /
 * -ETIMEDOUT the directory is unreachable. */
int directory_lookup(const char *name, struct dp_rpc_lookup_reply *out);

#endif /* DP_DIRECTORY_H */
