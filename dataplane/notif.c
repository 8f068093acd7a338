/* SPDX-License-Identifier: MIT */
/*
 * notif.c - the service's side of notification rings (notif.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fabric.h"
#include "notif.h"
#include "samehost.h"
#include "stats.h"

int notif_open(struct client *c, uint32_t entries, int fds[2])
{
	struct notif_ring *r;
	int db[2], rc;

	if (atomic_load_explicit(&c->notify, memory_order_relaxed))
		return -EEXIST;
	if (!entries)
		entries = DP_NOTIFY_DEFAULT_ENTRIES;
	if (entries > cfg.max_depth && entries > DP_NOTIFY_DEFAULT_ENTRIES)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	rc = dp_ring_pair_create(&r->pair, "dataplane-notify", 1, 8, entries,
				 sizeof(struct dp_notification), 0);
	if (rc) {
		free(r);
		return rc;
	}
	rc = dp_doorbell_pair(db);
	if (rc) {
		dp_ring_pair_close(&r->pair);
		free(r);
		return rc;
	}
	pthread_spin_init(&r->lock, PTHREAD_PROCESS_PRIVATE);
	r->db = db[0];
	r->db_peer = db[1];
	fds[0] = r->pair.fd;
	fds[1] = r->db_peer;
	/* Release: pairs with the acquire in notif_deliver(); the ring is
	 * whole before a poller can see it. */
	atomic_store_explicit(&c->notify, r, memory_order_release);
	return 0;
}

void notif_free(struct client *c)
{
	struct notif_ring *r = atomic_exchange(&c->notify, NULL);

	if (!r)
		return;
	close(r->db);
	close(r->db_peer);
	dp_ring_pair_close(&r->pair);
	pthread_spin_destroy(&r->lock);
	free(r);
}

/* Writes one entry into shared memory the client can read at any time:
 * field by field, nothing of the service's beyond what it says. */
static void entry_fill(struct dp_notification *e, const struct segment *seg,
		       const struct notif_req *n, uint32_t dropped)
{
	memset(e, 0, sizeof(*e));
	e->value = n->value;
	e->offset = n->offset;
	e->len = n->len;
	e->flags = n->flags;
	e->dropped = dropped;
	e->sender = n->sender;
	/* seg->name is NUL-terminated within DP_NAME_MAX (= the field). */
	memcpy(e->segment, seg->name, strnlen(seg->name, sizeof(e->segment) - 1));
}

bool notif_ring_put(struct segment *seg, const struct notif_req *n)
{
	struct notif_ring *r = NULL;
	struct dp_notification *e;
	bool ok = false, ring = false;

	/* A dead export's owner may be gone; a live one's is alive for this
	 * loop (its teardown kills its exports, then waits a grace period
	 * before it frees the client and the ring). */
	if (!atomic_load_explicit(&seg->dead, memory_order_acquire) && seg->owner)
		r = atomic_load_explicit(&seg->owner->notify, memory_order_acquire);
	if (r) {
		pthread_spin_lock(&r->lock);
		/* No room: dropped and counted. A head out of range (the
		 * client's own doing) reads as no room, for good. */
		if (dp_ring_stage(&r->pair.cq, 0, (void **)&e)) {
			entry_fill(e, seg, n, r->dropped);
			dp_ring_commit(&r->pair.cq, 1);
			ring = dp_ring_needs_wakeup(&r->pair.cq);
			ok = true;
		} else {
			r->dropped++;
		}
		pthread_spin_unlock(&r->lock);
		/* Outside the lock: never blocks (MSG_DONTWAIT), and the fd
		 * lives as long as the ring. */
		if (ring)
			dp_doorbell_ring(r->db);
	}
	return ok;
}

void notif_deliver(struct poller *p, struct segment *seg, const struct notif_req *n)
{
	struct notif_req fwd = *n;
	bool ok;

	if (seg->remote) {
		/* The writer's client id means nothing over there. */
		fwd.flags = DP_NOTIFY_F_FABRIC;
		fwd.sender = 0;
		notif_forward(seg->remote->peer->name, seg->name, &fwd);
		return;
	}
	if (seg->same) {
		fwd.flags = DP_NOTIFY_F_SAME_HOST;
		notif_forward(samehost_seg_server(seg->same), seg->name, &fwd);
		return;
	}
	ok = notif_ring_put(seg, n);
	if (p)
		stats_notify(p, ok);
}
