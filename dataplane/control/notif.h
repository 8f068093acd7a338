/* SPDX-License-Identifier: MIT */
/*
 * notif.h - notifications (DP_DESC_F_NOTIFY): a WRITE that carries a value
 * for the client that exported its target segment, put on that client's
 * notification ring once the WRITE's bytes are in place (docs/api.md
 * "Notifications", docs/ring.md "Notification rings").
 *
 * The ring is a ring pair of its own (ring/dp_ring.h): a 1-entry SQ of 8
 * bytes, unused, and the notification ring in the CQ's place, produced by
 * the service, consumed by the client, with a doorbell socketpair like a
 * queue's CQ. Several pollers (and nothing else) produce into one client's
 * ring: each takes the ring's lock for one slot, which is never held
 * across anything that can block (the doorbell send is MSG_DONTWAIT).
 * Credit: a notification that finds the ring full is dropped and counted,
 * never waited for; the writer's WRITE completes as it would have.
 */
#ifndef DP_NOTIF_H
#define DP_NOTIF_H

#include <pthread.h>

#include "dp_internal.h"

struct notif_ring {
	pthread_spinlock_t lock;  /* producers: the pollers */
	struct dp_ring_pair pair; /* service side: its CQ is the notification ring */
	int db;			  /* our end of the doorbell */
	int db_peer;		  /* the client's end, kept until the ring goes */
	uint32_t dropped;	  /* under lock: dropped since the ring opened */
};

/* The bytes of a notification that carries some (DP_NOTIFY_F_MSG), and
 * its sender's name: copied out of the client's memory when the service
 * took the descriptor (or the NOTIFY_SEND), so nothing the client does
 * afterwards changes them. */
struct notif_msg {
	char sender[DP_NAME_MAX]; /* NUL-terminated */
	uint32_t len;		  /* 0..DP_NOTIFY_MSG_MAX */
	uint8_t bytes[];
};

/* What a notification says, besides its segment. `msg` (DP_NOTIFY_F_MSG)
 * is owned by whoever holds the request: notif_deliver() consumes it, an
 * engine that keeps a request for later moves it (notif_req_move), and one
 * that fails it frees it (notif_finish). */
struct notif_req {
	uint64_t value, offset, len;
	uint32_t sender; /* the writer's client id (local and same-host paths) */
	uint32_t flags;	 /* DP_NOTIFY_F_* */
	struct notif_msg *msg;
};

/* The path bits of DP_NOTIFY_F_*; the others say what it carries. */
#define NOTIF_F_PATH (DP_NOTIFY_F_LOCAL | DP_NOTIFY_F_FABRIC | DP_NOTIFY_F_SAME_HOST)

/* Takes *from into *to: its message (if any) is to's from now on. */
static inline void notif_req_move(struct notif_req *to, struct notif_req *from)
{
	*to = *from;
	from->msg = NULL;
}

/* Frees the message of a request that will not be delivered. */
void notif_req_release(struct notif_req *n);

/*
 * The message of client `c` that `ref` (DP_NOTIFY_MSG_REF: its region,
 * offset and length) names, copied, with c's sender name: its session
 * name, else "<server name>/<client id>". 0, -EMSGSIZE (a length beyond
 * DP_NOTIFY_MSG_MAX), -EBADF (no such host region of c's), -EFAULT (the
 * range leaves it), -ENOMEM. Pollers (the region alive for this loop)
 * and the control thread.
 */
int notif_msg_copy(const struct client *c, uint64_t ref, struct notif_msg **out);

/* Control thread: the client's ring of `entries` (a power of two, 0: the
 * default), published in c->notify; fds[0] the memfd, fds[1] the client's
 * doorbell end, for the reply (kept here). 0, -EEXIST (open already),
 * -EINVAL (entries beyond --max-depth), -ENOMEM or the ring's -errno. */
int notif_open(struct client *c, uint32_t entries, int fds[2]);
/* Control thread, after the grace period that followed unpublishing
 * everything of c: frees its ring. */
void notif_free(struct client *c);

/*
 * Poller: the WRITE of `n` into `seg` moved all its bytes (for the fabric:
 * its completion came with FI_DELIVERY_COMPLETE). A segment of this
 * service: its owner gets the notification on its ring, or it is dropped
 * and counted (no ring, ring full, owner gone). Another service's (the
 * fabric, or same host): forwarded to that service (notif_forward).
 * `seg` must be alive: found in this loop, or referenced. `p` (for the
 * stats region) may be NULL for another service's segment.
 */
void notif_deliver(struct poller *p, struct segment *seg, struct notif_req *n);
/* An engine's end of a request it kept: delivered when `status` is 0,
 * else dropped (a transfer that failed notifies nobody); consumed. */
void notif_finish(struct poller *p, struct segment *seg, struct notif_req *n, int status);
/* Control thread: a notification alone (NOTIFY_SEND) from client `c`;
 * 0 or the -errno of its reply, or NOTIF_SEND_ASK: the handle is an engine
 * session's of which no registration is known (opened before it had any):
 * ask it again (session_refresh) and call this once more. */
#define NOTIF_SEND_ASK 1
int notif_send(struct client *c, const struct dp_msg_notify_send *req);

/* ---- other services' exports: notif_remote.c ---- */

struct dp_rpc_notify;

/*
 * Any thread (pollers): hands a notification for export `segment` of the
 * service `server` ("host:port") to the control thread, which sends it in
 * a batch over the peer RPC (rpc.h DP_RPC_NOTIFY), one batch in flight
 * per peer, so those of one peer leave in the order they came. Never
 * blocks beyond a mutex held for a list push; beyond NOTIF_OUT_MAX waiting
 * notifications (a peer that does not answer) they are lost and counted.
 */
#define NOTIF_OUT_MAX 65536
void notif_forward(const char *server, const char *segment, struct notif_req *n);
/* Control thread: a batch a peer sent for exports of this service, its
 * MAC checked already: 0 when whole (each entry delivered or dropped
 * there), -EINVAL when its entries do not fill it exactly as count and
 * bytes say (nothing delivered). */
int notif_receive(const struct dp_rpc_notify *q);
/* The control loop's epoll set, for the wake-up of notif_forward, and
 * its timer for sending again a batch that found every lookup slot taken
 * (RPC_MAX_CALLS in flight), whose handler is notif_remote_retry: 0 or
 * -errno (logged). */
struct ev_timer;
int notif_remote_start(int epfd, struct ev_timer *retry);
int notif_remote_retry(struct ev_timer *t);
/* Control thread, at exit, after rpc_shutdown: frees what is left. */
void notif_remote_cleanup(void);
/* Control thread: puts one on the ring of `seg`'s owner (notif.c);
 * true when delivered, false when dropped. */
bool notif_ring_put(struct segment *seg, const struct notif_req *n);

#endif /* DP_NOTIF_H */
