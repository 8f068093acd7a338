/* SPDX-License-Identifier: MIT */
/*
 * lifetime.c - the lifetime rules the control thread and the pollers share:
 * the service's stop flag, reference counts on regions, segments and
 * clients, and quiescent-state-based reclamation (dp_internal.h). It depends
 * on nothing but the engine table (engine.h): the last reference to a
 * region or segment runs every engine's hook on it.
 */
#include <stdlib.h>
#include <unistd.h>

#include "engine.h"

atomic_int dp_stopping;

/*
 * Waits until every poller has passed a quiescent point (the top of its
 * loop, or asleep) since the call began: after it, no poller holds a table
 * pointer that was unpublished before the call.
 */
void qsbr_synchronize(void)
{
	unsigned long snap[DP_MAX_POLLERS];

	for (unsigned i = 0; i < cfg.pollers; i++)
		snap[i] = atomic_load(&pollers[i].qs);
	for (unsigned i = 0; i < cfg.pollers; i++) {
		/* seq_cst loads: pair with the poller's seq_cst increment of
		 * qs and its store of sleeping. */
		while (atomic_load(&pollers[i].qs) == snap[i] && !atomic_load(&pollers[i].sleeping))
			usleep(20);
	}
}

/* The last reference: every engine drops its state on the region, in
 * reverse engines.def order (the fabric's registrations before the GPU's
 * IPC mapping, the mapping of host memory last). */
void region_put_n(struct region *r, int n)
{
	if (atomic_fetch_sub(&r->refs, n) != n)
		return;
	engines_region_close(r);
	free(r);
}

void region_put(struct region *r)
{
	region_put_n(r, 1);
}

void segment_put(struct segment *s)
{
	if (atomic_fetch_sub(&s->refs, 1) == 1) {
		free(s->remote);
		engines_segment_free(s);
		free(s);
	}
}

void client_put(struct client *c)
{
	if (atomic_fetch_sub(&c->refs, 1) == 1)
		free(c);
}
