/* SPDX-License-Identifier: MIT */
/*
 * stats.h - the service's side of the shared-memory stats region (layout:
 * libclient/dp_stats.h). Cold paths (create, assign and retire queue blocks,
 * service gauges, rails) live in stats.c; the per-descriptor and per-loop
 * hooks are inline here.
 *
 * Hot-path cost: a poller keeps its queues' counters and its own in private
 * memory (the queue's ctr, which it updates anyway) and copies them to the
 * region with plain stores once it has been idle a while, and every
 * STATS_PUBLISH_BUSY loops while it stays busy. A completion that extends
 * its queue's current run (same stamp and flags: one dp_submit's batch)
 * costs two compares against the queue's private fields; runs are closed
 * when the loop flushes the queue's CQ and get their latency at the end of
 * the loop from one clock reading taken after the loop published its
 * completions (so the reading is off the client's critical path, and a
 * latency is submit to completion visible). Without stats (--no-stats)
 * every hook is one well-predicted branch.
 *
 * The clock of a busy loop is the TSC where it is invariant (x86-64 with
 * constant_tsc and nonstop_tsc), extrapolated from the poller's last
 * CLOCK_MONOTONIC reading (its anchor: the read its idle loops make anyway,
 * or a fresh one once the anchor is STATS_TSC_SPAN_NS old), with a scale
 * the poller refines at every anchor. A TSC read costs a fraction of
 * clock_gettime() under a hypervisor's clock source, and one descriptor
 * per loop (P3) pays for one clock reading per descriptor.
 */
#ifndef DP_SERVICE_STATS_H
#define DP_SERVICE_STATS_H

#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "clock.h"
#include "dp_internal.h"
#include "dp_stats.h"

/* Runs of completions a loop can hold before it times them early. */
#define STATS_PEND 64
/* Longest TSC extrapolation from an anchor: with the scale known to 1e-5
 * (2 ms of calibration at start), under 2 ns of error. */
#define STATS_TSC_SPAN_NS 200000u

/* A poller's private side of its stats (the region holds the published
 * side). Cache-line aligned: each poller writes only its own. */
struct stats_poller {
	struct dp_stats_poller *sh;
	uint64_t last; /* clock at the end of the previous loop (or wake-up) */
	/* TSC clock (stats_now): anchor, calibration point, ns per tick << 32
	 * (0: no usable TSC), the anchor's age limit in ticks. */
	uint64_t anchor_ns, anchor_tsc, cal_ns, cal_tsc, tsc_mult, tsc_span;
	uint64_t loops, busy_loops, sleeps, wakeups, descs, busy_ns, idle_ns, sleep_ns;
	uint32_t loop_descs; /* descriptors taken in this loop */
	bool dirty;	     /* counted something not yet published */
	uint64_t busy_end;   /* clock at the end of the last busy loop */
	uint64_t loop_hist[DP_STATS_LOOP_BUCKETS];
	/* Completions and bytes by the low bits of their DP_CQE_F_* flags;
	 * summed into paths when published. */
	uint64_t flag_ops[32], flag_bytes[32];
	/* File I/O slices finished (stats_file_slice), published as is. */
	uint64_t file_direct_ios, file_direct_bytes, file_buffered_ios, file_buffered_bytes;
	/* Notifications handed to owners (stats_notify), published as is. */
	uint64_t notify_delivered, notify_dropped;
	/* Stripes taken from another poller's copy (stats_stripe_helped). */
	uint64_t stripes_helped, stripe_bytes_helped;
	uint64_t parked_queues; /* the poller's count (stats_parked) */
	/* Fabric target side (stats_fabric_target), published as is. */
	uint64_t fabric_target_passes, fabric_target_late;
	/* Runs of this loop waiting for its clock reading, which is taken
	 * once the loop has published its completions. */
	unsigned npend;
	struct stats_pend {
		struct queue *q;
		uint64_t submit_ns;
		uint64_t count;
	} pend[STATS_PEND];
} __attribute__((aligned(64)));

/* ---- cold path: stats.c ---- */

/* Creates the region (cfg.stats_name, else the name derived from the
 * socket path) and points every poller at its block. 0 without stats
 * (cfg.no_stats). -EADDRINUSE when a live service owns the name, -EEXIST
 * when a file of that name is not a stats region. */
int stats_init(void);
/* Marks the region stopped and unlinks it. */
void stats_fini(void);
const char *stats_name(void);

/* Control thread, when a queue is handed to its poller (q->poller set):
 * takes a free block, or leaves q->st NULL when none is left. */
void stats_queue_attach(struct queue *q);
/* The owning poller, when it frees the queue: adds the queue's figures to
 * the poller's retired totals and hands the block back. */
void stats_queue_retire(struct queue *q);

/* Service gauges, control thread only. */
void stats_client_added(void);
void stats_client_removed(void);
void stats_queue_closed(void);
void stats_region_added(uint64_t len);
void stats_region_removed(uint64_t len);
void stats_segment_added(void);
void stats_segment_removed(void);
void stats_peer_known(void);
/* Engine sessions (session.c): deltas of the gauges; a question asked of a
 * session's port (or of this service's own table), and whether it failed. */
void stats_session(int sessions, int members, int handles);
void stats_session_question(bool failed);
/* Notifications of other services (notif_remote.c), control thread. */
void stats_notify_remote(uint64_t sent, uint64_t lost, uint64_t received, uint64_t dropped);

/*
 * Fabric rails. stats_rail_name() names rail idx (control thread, at
 * start-up, before the pollers run); stats_rail() returns the counters
 * poller p keeps for rail idx, to be bumped with stats_add() by that poller
 * only. NULL without stats or for idx >= DP_STATS_MAX_RAILS.
 */
void stats_rail_name(unsigned idx, const char *provider, const char *fabric, const char *domain);
struct dp_stats_rail *stats_rail(unsigned idx, const struct poller *p);

/* ---- hot path ---- */

/* Single-writer counter update: a relaxed load and store, never a locked
 * read-modify-write. Readers tolerate the value changing under them. */
static inline void stats_add(uint64_t *c, uint64_t n)
{
	__atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

static inline void stats_set(uint64_t *c, uint64_t v)
{
	__atomic_store_n(c, v, __ATOMIC_RELAXED);
}

static inline uint64_t stats_clock(void)
{
	return dp_now_ns();
}

static inline uint64_t stats_tsc(void)
{
#if defined(__x86_64__)
	return __rdtsc();
#else
	return 0;
#endif
}

/* Refines the scale over the span since the calibration point (stats.c). */
void stats_tsc_recalibrate(struct stats_poller *sp, uint64_t t, uint64_t tsc);

/*
 * A CLOCK_MONOTONIC reading that becomes the TSC anchor, bracketed by two
 * TSC reads: a pair the thread was preempted in the middle of (wide
 * bracket) would date every extrapolation wrongly, and is not taken.
 */
static inline uint64_t stats_anchor(struct stats_poller *sp)
{
	uint64_t c0, c1, t;

	if (!sp->tsc_mult)
		return stats_clock();
	c0 = stats_tsc();
	t = stats_clock();
	c1 = stats_tsc();
	if (c1 - c0 > sp->tsc_span / 64)
		return t;
	c0 += (c1 - c0) / 2;
	if (c0 - sp->cal_tsc > 1000 * sp->tsc_span)
		stats_tsc_recalibrate(sp, t, c0);
	sp->anchor_ns = t;
	sp->anchor_tsc = c0;
	return t;
}

/* The time now, for a busy loop: the TSC from a fresh anchor, else a real
 * reading (which becomes the anchor). */
static inline uint64_t stats_now(struct stats_poller *sp)
{
	if (sp->tsc_mult) {
		uint64_t d = stats_tsc() - sp->anchor_tsc;

		if (d < sp->tsc_span)
			return sp->anchor_ns + ((d * sp->tsc_mult) >> 32);
	}
	return stats_anchor(sp);
}

/*
 * Times one run the loop closed, at t, the clock after the loop published
 * its completions: a latency is submit to completion visible. A stamp of 0
 * (an engine that did not keep it) or from the future (a client that wrote
 * its own) counts as unstamped instead of landing in the histogram; one a
 * microsecond ahead is the TSC extrapolation's error, and times as 0.
 */
static inline void stats_run_time(const struct stats_pend *r, uint64_t t)
{
	struct queue *q = r->q;
	uint64_t lat = t > r->submit_ns ? t - r->submit_ns : 0;

	if (!r->submit_ns || r->submit_ns > t + 1000) {
		q->ctr.lat_unstamped += r->count;
		return;
	}
	stats_add(&q->st->hist[dp_stats_hist_index(lat)], r->count);
	q->ctr.lat_sum_ns += lat * r->count;
	if (lat > q->ctr.lat_max_ns)
		q->ctr.lat_max_ns = lat;
}

/* Times every run the loop closed at t (stats.c). */
void stats_runs_end(struct stats_poller *sp, uint64_t t);

/*
 * q's run so far joins the loop's pending runs (done and bytes: q's
 * completed + failed and bytes now); a loop with more runs than fit times
 * them now. The run goes on with the same stamp and flags, empty: later
 * completions of the same batch extend it without a switch.
 */
static inline void stats_run_close(struct queue *q, uint64_t done, uint64_t bytes_now)
{
	struct stats_poller *sp = q->poller->stats;
	uint64_t count = done - q->run_done0, bytes = bytes_now - q->run_bytes0;

	sp->flag_ops[q->run_flags & 31] += count;
	sp->flag_bytes[q->run_flags & 31] += bytes;
	if (sp->npend == STATS_PEND)
		stats_runs_end(sp, stats_now(sp));
	sp->pend[sp->npend++] =
		(struct stats_pend){.q = q, .submit_ns = q->run_submit, .count = count};
	q->run_done0 = done;
	q->run_bytes0 = bytes_now;
}

void stats_run_switch(struct queue *q, uint64_t submit_ns, uint32_t flags, uint64_t n,
		      uint64_t bytes);

/* stats_run_switch(q, submit_ns, flags, 0, 0): inline when q's run has no
 * completion since it was last closed (the flush closes it: the first
 * switch of a loop, the usual one), out of line otherwise. */
static inline void stats_run_start(struct queue *q, uint64_t submit_ns, uint32_t flags)
{
	if (q->ctr.completed + q->ctr.failed != q->run_done0) {
		stats_run_switch(q, submit_ns, flags, 0, 0);
		return;
	}
	q->run_submit = submit_ns;
	q->run_flags = flags;
}

/*
 * One completion about to be counted in q->ctr (queue_complete_ns).
 * submit_ns is the descriptor's stamp. Completions are counted in runs: one
 * dp_submit's batch has one stamp and, on one path, one flags value, so
 * the run's size and bytes are the growth of q's own counters and one that
 * extends the run costs two compares against q's private fields. A new
 * stamp or path closes the run and starts another (out of line).
 */
static inline void stats_complete(struct queue *q, uint64_t submit_ns, uint32_t flags)
{
	if (__builtin_expect(q->st && (submit_ns != q->run_submit || flags != q->run_flags), 0))
		stats_run_start(q, submit_ns, flags);
}

/*
 * A file I/O slice of poller p moved all its bytes (file.c), direct
 * (O_DIRECT) or through the page cache. Private counters only: the region
 * gets them with the poller's other figures (stats_publish_poller).
 */
static inline void stats_file_slice(struct poller *p, bool direct, uint64_t bytes)
{
	struct stats_poller *sp = p->stats;

	if (!sp)
		return;
	if (direct) {
		sp->file_direct_ios++;
		sp->file_direct_bytes += bytes;
	} else {
		sp->file_buffered_ios++;
		sp->file_buffered_bytes += bytes;
	}
	sp->dirty = true;
}

/* A notification poller p handed to its owner: delivered, or dropped. */
static inline void stats_notify(struct poller *p, bool delivered)
{
	struct stats_poller *sp = p->stats;

	if (!sp)
		return;
	if (delivered)
		sp->notify_delivered++;
	else
		sp->notify_dropped++;
	sp->dirty = true;
}

/* A stripe of another poller's copy that poller p copied. */
static inline void stats_stripe_helped(struct poller *p, uint64_t bytes)
{
	struct stats_poller *sp = p->stats;

	if (!sp)
		return;
	sp->stripes_helped++;
	sp->stripe_bytes_helped += bytes;
	sp->dirty = true;
}

/* Poller 0's fabric progress served peers' RMA into its endpoints; @late:
 * in the first pass after a sleep that its cap ended (a peer waited for the
 * poller's timer instead of being served at once). */
static inline void stats_fabric_target(struct poller *p, bool late)
{
	struct stats_poller *sp = p->stats;

	if (!sp)
		return;
	sp->fabric_target_passes++;
	sp->fabric_target_late += late;
	sp->dirty = true;
}

/* Poller p now has n queues parked. */
static inline void stats_parked(struct poller *p, unsigned n)
{
	struct stats_poller *sp = p->stats;

	if (!sp)
		return;
	sp->parked_queues = n;
	sp->dirty = true;
}

/* Publishes one queue's counters and ring depths (a queue about to be
 * parked: stats_publish walks only the polled ones). */
void stats_queue_publish(struct queue *q);

/* Publishes everything this poller counted privately: its queues' counters
 * and ring depths, its own block (stats.c). */
void stats_publish(struct poller *p);
/* An idle poller's occasional publication: stats_publish, and the CQ
 * column of parked queues that showed completions not yet reaped. */
void stats_publish_idle(struct poller *p);
void stats_publish_poller(struct stats_poller *sp);

/* Busy loops between publications while a poller stays busy; how long it
 * must have been idle before it publishes news (a client in a tight
 * ping-pong sends the next descriptor sooner: publishing then would delay
 * it); idle loops between publications of the poller's own figures. */
#define STATS_PUBLISH_BUSY 64u
#define STATS_PUBLISH_AFTER_NS 5000u
#define STATS_PUBLISH_IDLE 1024u

/*
 * q's completions of this loop were just published (queue_flush_cq): notes, in
 * private memory only, the descriptors it took this loop and that it has
 * news. The region gets the figures at the next publication: once the
 * poller has been idle for STATS_PUBLISH_AFTER_NS, and every
 * STATS_PUBLISH_BUSY loops of a poller that stays busy.
 */
static inline void stats_queue_flush(struct queue *q)
{
	struct stats_poller *sp;
	uint64_t d, done;

	if (!q->st)
		return;
	done = q->ctr.completed + q->ctr.failed;
	if (done != q->run_done0)
		stats_run_close(q, done, q->ctr.bytes);
	sp = q->poller->stats;
	d = q->ctr.submitted - q->ctr.submitted_seen;
	if (d | q->nstage) {
		sp->loop_descs += (uint32_t)d;
		q->ctr.submitted_seen = q->ctr.submitted;
		sp->dirty = true;
	}
}

/*
 * End of a poller loop (after poller_flush). Returns the loop's clock
 * reading for the caller's spin timing: read here unless a completion of
 * this loop already did; without stats it is read only for idle loops, as
 * before.
 */
static inline uint64_t stats_loop_end(struct poller *p, int work)
{
	struct stats_poller *sp = p->stats;
	uint64_t t, d;

	if (!sp)
		return work ? 0 : stats_clock();
	if (sp->npend) {
		/* After poller_flush: the loop's completions are visible and
		 * its runs closed. One run (one queue, one batch): inline. */
		t = stats_now(sp);
		if (sp->npend == 1) {
			stats_run_time(&sp->pend[0], t);
			sp->npend = 0;
		} else {
			stats_runs_end(sp, t);
		}
	} else if (work)
		t = stats_now(sp);
	else {
		/* The reading idle loops make anyway; a stale anchor is
		 * replaced (rarely: every STATS_TSC_SPAN_NS / 2 of spinning). */
		t = stats_clock();
		if (sp->tsc_mult && t - sp->anchor_ns > STATS_TSC_SPAN_NS / 2)
			t = stats_anchor(sp);
	}
	d = t > sp->last ? t - sp->last : 0;
	sp->last = t;
	sp->loops++;
	if (!work) {
		sp->idle_ns += d;
		if (sp->dirty && t - sp->busy_end > STATS_PUBLISH_AFTER_NS)
			stats_publish(p);
		else if (!(sp->loops % STATS_PUBLISH_IDLE))
			stats_publish_idle(p);
		return t;
	}
	sp->busy_loops++;
	sp->busy_ns += d;
	sp->descs += sp->loop_descs;
	sp->loop_hist[dp_stats_loop_index(sp->loop_descs)]++;
	sp->loop_descs = 0;
	sp->dirty = true;
	sp->busy_end = t;
	if (!(sp->busy_loops % STATS_PUBLISH_BUSY))
		stats_publish(p);
	return t;
}

/* Before a poller sleeps on its doorbells: what it counted must not wait
 * for the next wake-up to be seen. */
static inline void stats_poller_sleeping(struct poller *p)
{
	if (p->stats && p->stats->dirty)
		stats_publish(p);
}

/* After a poller's sleep on its doorbells; events: what epoll_wait returned
 * (> 0: woken by a doorbell, else a timeout). */
static inline void stats_poller_woke(struct poller *p, int events)
{
	struct stats_poller *sp = p->stats;
	uint64_t t;

	if (!sp)
		return;
	t = stats_anchor(sp);
	sp->sleep_ns += t > sp->last ? t - sp->last : 0;
	sp->last = t;
	sp->sleeps++;
	if (events > 0)
		sp->wakeups++;
	stats_publish_poller(sp);
}

#endif /* DP_SERVICE_STATS_H */
