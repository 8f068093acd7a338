/* SPDX-License-Identifier: MIT */
/*
 * engine.h - the one interface between the poller and whatever moves bytes.
 *
 * An engine is a table of operations. The poller drains descriptors,
 * validates them (poller.c, desc_resolve), asks route() which engine owns
 * each one, and from then on talks to engines only through this table:
 * submit, progress, busy, the fds it sleeps on, cancel at shutdown. The
 * control thread uses the same table for regions and exports (open/close).
 *
 * Adding an engine: one new file defining `const struct engine NAME_engine`
 * and one line in engines.def. Its per-region and per-segment state lives
 * in the slot `eng[ENGINE_NAME]` of struct region / struct segment, which no
 * other engine touches. Descriptors reach it through route() (poller.c)
 * alone, a descriptor an engine session held too (desc_process_held, once
 * answered); an engine may use another's machinery underneath (the stage
 * engine posts its slices with the fabric's fabric_post). docs/architecture.md,
 * "Engines".
 *
 * Threads: submit/progress/busy/trywait/cancel_all/poller_free run on the
 * poller that owns `p` (no locks: per-poller state lives in p->eng[]);
 * init/fini on the main thread; region and segment hooks on the control
 * thread. Every operation is optional (NULL), except that an engine with
 * submit has progress and busy.
 */
#ifndef DP_ENGINE_H
#define DP_ENGINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "dp_internal.h"

/*
 * A descriptor resolved by the poller: validated (offsets and length inside
 * both ends), its regions found (alive for this loop by QSBR; an engine that
 * keeps them takes references).
 */
struct xfer {
	struct queue *q;
	const struct dp_desc *d; /* the private copy; valid during submit only */
	uint64_t user_data;
	uint64_t submit_ns; /* the descriptor's stamp, for queue_complete_ns() */
	/* Between two memory regions, which path this is: DP_CQE_F_LOCAL
	 * (this service's) or DP_CQE_F_SAME_HOST (another service's, mapped
	 * here); the host, vm and gpu engines complete with it. */
	uint32_t path;
	/* Between two memory regions of this service (host and gpu engines):
	 * the bytes to move, WRITE local -> target, READ target -> local. */
	uint8_t *dst;
	const uint8_t *src;
	uint64_t len;
	struct region *ra;   /* the client's local region */
	struct region *rb;   /* the target segment's region; NULL for another service's */
	struct segment *seg; /* the target segment */
	/* A WRITE with DP_DESC_F_NOTIFY, or a WRITE or READ with
	 * DP_DESC_F_NOTIFY_MSG: what the segment's owner is told once the
	 * transfer is done (notif.h); NULL otherwise. Valid during submit
	 * only: an engine that completes later moves it into what it keeps
	 * (notif_req_move, which takes its message) with a reference on seg,
	 * and ends it with notif_finish. Only the engines notify_prepare
	 * (poller.c) allows (host, vm, gpu, fabric) see one. */
	struct notif_req *notify;
};

/*
 * A run of plain descriptors (no flags, no notify word) of one queue that
 * name one (opcode, region, segment) of this service or another service's
 * export mapped here, resolved once by the poller's fast path (poller.c,
 * fast_run): the regions are alive in this loop (QSBR), the segment was
 * seen alive in it, the access is allowed. Offsets and lengths are each
 * descriptor's own, not checked yet.
 */
struct xfer_run {
	struct queue *q;
	struct region *ra, *rb; /* the client's local region, the target's */
	bool write;		/* WRITE: ra -> rb; READ: rb -> ra */
	uint32_t path;		/* DP_CQE_F_LOCAL or DP_CQE_F_SAME_HOST */
	/* The run's key: word 0 of its descriptors (opcode, flags,
	 * reserved0, region) and their segment. */
	uint64_t key0;
	uint32_t key1;
};

/* Whether @d belongs to run @r (its first descriptor always does). */
static inline bool xfer_run_has(const struct xfer_run *r, const struct dp_desc *d)
{
	uint64_t w;

	memcpy(&w, d, sizeof(w));
	return w == r->key0 && d->segment == r->key1;
}

/*
 * A kind of memory an engine brings: the control message that registers it
 * and what makes a region of it. The message's bytes are the protocol's
 * (dp_proto.h; ctlmsg.c checks its length, fd and fields before anything
 * runs); the region is the engine's.
 */
struct engine_region_msg {
	uint32_t type;	  /* DP_MSG_REGION_...; 0 ends an engine's list */
	const char *what; /* for the log: "host", "GPU", "file", ... */
	/* Control thread. Fills @reg (zeroed) from @payload, a request of
	 * this type from client @c, and the @nfds fds that came with it
	 * (ctlmsg.c's rules: one for a memfd or a file, one per piece of VMM
	 * GPU memory, none for the others; taken over, closed on failure
	 * too): kind,
	 * base, len, its own eng[] slot, and `charged` for memory mapped here
	 * (counted against --max-mapped-gb-per-uid: client_map_quota()).
	 * Returns the access the region allows (DP_ACCESS_READ or
	 * DP_ACCESS_RW), or -errno with nothing of @reg left to undo. Every
	 * engine's region_open then runs on the region, and it is published
	 * in the client's table (control.c, on_region_new). */
	int (*open)(struct region *reg, struct client *c, const void *payload, int *fds,
		    unsigned nfds);
};

struct engine {
	const char *name;
	/* Service start and stop (main thread, in engines.def order; fini in
	 * reverse). init logs its own reason on failure. */
	int (*init)(void);
	void (*fini)(void);
	/* The data path, on the owning poller. submit takes a routed xfer and
	 * owes it exactly one completion (now or later); q->inflight counts
	 * what is owed later. progress returns the work done (0: idle). */
	void (*submit)(struct poller *p, const struct xfer *x);
	/* Optional, for runs of descriptors @r describes: takes the longest
	 * prefix of d[0..n) that it moves, each descriptor of the run
	 * (xfer_run_has; d[0] is) with its offsets and length checked against
	 * both regions as desc_resolve would (one of another run, out of
	 * range, or one the engine cannot take now, ends the prefix and takes
	 * the general path); returns how many it took, each owed its
	 * completion as after submit. 0: d[0] takes the general path. */
	int (*submit_run)(struct poller *p, const struct xfer_run *r, const struct dp_desc *d,
			  int n);
	int (*progress)(struct poller *p);
	bool (*busy)(const struct poller *p);
	/* Busy, but only waiting for another thread's answer, which kicks
	 * the poller (poller_kick) when it comes: the poller may sleep
	 * meanwhile (a busy engine otherwise keeps it spinning), and progress
	 * runs again after the wake-up. NULL: never. */
	bool (*waits)(const struct poller *p);
	/* progress runs only while the engine is busy after an engine_kick;
	 * with poll_always, every loop on pollers where the engine has state
	 * (p->eng[id] set by init). */
	bool poll_always;
	/* Sleeping: fds whose readiness means progress is due (added to the
	 * poller's epoll set once), a last check that may veto the sleep
	 * (nonzero: do not sleep), and a cap on the sleep in ms (0: none). */
	int (*wait_fds)(struct poller *p, int *fds, int max);
	int (*trywait)(struct poller *p);
	int (*sleep_cap_ms)(void);
	/* Idle pollers lend a hand: called on a poller whose loop found no
	 * work of its own, while engine_help_wanted is nonzero (an engine
	 * bumps it while it has work others may take, e.g. the stripes of a
	 * big host copy). Returns the work done. Runs on any poller, so what
	 * it touches of another poller's work must be shared safely. */
	int (*help)(struct poller *p);
	/* Shutdown: finish or cancel (-ECANCELED) everything in flight, each
	 * with its one completion; then free per-poller state. */
	void (*cancel_all)(struct poller *p);
	void (*poller_free)(struct poller *p);
	/* Regions (control thread): add this engine's state to a new region
	 * (0 or -errno: the region is refused), and drop it when the last
	 * reference goes (in reverse engines.def order; must cope with a
	 * region whose open failed or never ran). */
	int (*region_open)(struct region *r);
	void (*region_close)(struct region *r);
	/* Kinds of memory this engine brings (control thread): the
	 * registration messages it answers, ended by type 0; NULL for none.
	 * A new kind of memory is such an entry, its message in dp_proto.h
	 * and ctlmsg.c, and the client's call (docs/architecture.md). */
	const struct engine_region_msg *region_msgs;
	/* Exports (control thread): what other services need to reach s. */
	int (*segment_export)(struct segment *s);
	void (*segment_unexport)(struct segment *s);
	/* The last reference to a segment (any thread: segment_put): drop
	 * what this engine keeps on it (the samehost engine: the mapped
	 * export of another service of this host). */
	void (*segment_free)(struct segment *s);
};

/* The registered engines, in engines.def order (enum engine_id: dp_internal.h). */
#define ENGINE(name) extern const struct engine name##_engine;
#include "engines.def"
#undef ENGINE
extern const struct engine *const engines[DP_ENGINES];

/* Engine @id has work in flight on poller @p (a submit that queued work
 * instead of completing it, or a slice handed over by another engine): its
 * progress runs from the next loop until it is idle. An engine that keeps
 * nothing (an inline copy) never calls it, and costs no call per loop.
 * Poller thread. */
static inline void engine_kick(struct poller *p, enum engine_id id)
{
	p->active |= 1u << id;
}

/* Work that idle pollers may take (engine.help): nonzero while some is
 * offered. A poller whose loop found nothing calls the help hooks instead
 * of spinning empty, and does not go to sleep while it is set. */
extern atomic_uint engine_help_wanted;

/* Offers work to the other pollers: bumps engine_help_wanted and wakes
 * those asleep (poller.c). engine_help_withdraw() undoes one offer. */
void engine_help_offer(void);
static inline void engine_help_withdraw(void)
{
	atomic_fetch_sub(&engine_help_wanted, 1);
}

/* engine.c: every engine's hook in turn (region_close, unexport and fini
 * in reverse order). */
int engines_init(void);
void engines_fini(void);
int engines_region_open(struct region *r);
/* The entry some engine's region_msgs has for message @type, or NULL. */
const struct engine_region_msg *engines_region_msg(uint32_t type);
void engines_region_close(struct region *r);
int engines_segment_export(struct segment *s);
void engines_segment_unexport(struct segment *s);
void engines_segment_free(struct segment *s);

#endif /* DP_ENGINE_H */
