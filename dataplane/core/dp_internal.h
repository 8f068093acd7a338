/* SPDX-License-Identifier: MIT */
/*
 * dp_internal.h - the service's shared types: configuration, clients,
 * queues, regions, segments, pollers. Not for inclusion outside dataplane/.
 *
 * Threads: one control thread (the control socket, every table change) and
 * N pollers (the data path). Pollers never take a lock on the hot path: the
 * tables they read are arrays of atomic pointers that only the control
 * thread writes. An object unpublished by the control thread is kept alive
 * until every poller has passed a quiescent point (qsbr_synchronize); work
 * that outlives one poller loop holds a reference.
 */
#ifndef DP_INTERNAL_H
#define DP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "dataplane.h"
#include "dp_proto.h"
#include "dp_ring.h"
#include "dp_stats.h"

#define DP_MAX_POLLERS 64
#define DP_MAX_REGIONS 1024 /* per client */
#define DP_MAX_RAILS 8	    /* fabric rails (NICs) */
#define DP_MAX_SEGS 1024    /* open segment handles per client */
#define DP_MAX_QUEUES 64    /* per client */
#define DP_BURST 32

/* ---- logging ---- */
enum { DP_LOG_ERROR, DP_LOG_WARN, DP_LOG_INFO, DP_LOG_DEBUG };
extern int dp_log_level;
void dp_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_err(...) dp_log(DP_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) dp_log(DP_LOG_WARN, __VA_ARGS__)
#define log_info(...) dp_log(DP_LOG_INFO, __VA_ARGS__)
#define log_debug(...) dp_log(DP_LOG_DEBUG, __VA_ARGS__)

struct dp_config {
	char socket_path[108];
	unsigned pollers;
	int cpus[DP_MAX_POLLERS]; /* -1: not pinned */
	unsigned spin_us;
	unsigned max_clients;
	/* Quotas (control.c, docs/reliability.md "Limits"): connections of
	 * one uid, HELLO or not (-EDQUOT beyond); client memory the service
	 * maps for one uid's clients, in bytes (-EDQUOT beyond); how long a
	 * connection may take to say HELLO before it is dropped. */
	unsigned max_clients_per_uid;
	uint64_t max_mapped_per_uid;
	/* The same per process (SO_PEERCRED pid), within its uid's: admitted
	 * connections (-EMFILE beyond), connections without HELLO (beyond:
	 * its oldest silent one is hung up on), bytes mapped (-EFBIG beyond). */
	unsigned max_clients_per_process;
	unsigned max_connecting_per_process;
	uint64_t max_mapped_per_process;
	unsigned hello_timeout_ms;
	unsigned max_queues; /* per client */
	unsigned queue_depth;
	unsigned max_depth;
	int rpc_port;
	char stats_name[64];
	bool no_stats; /* --no-stats: no stats region, no hot-path counting for it */
	/* Pollers arm their SQs with membarrier, clients' dp_submit skips its
	 * fence (docs/ring.md, "Light producers"): on where the kernel can,
	 * unless --no-membarrier. */
	bool membarrier, no_membarrier;
	size_t chunk;	   /* local copy engine: bytes per step */
	size_t inline_max; /* copies up to this size run at once */
	size_t stripe_min; /* host copies from this size are shared with idle pollers (0: never) */
	char server_host[DP_NAME_MAX]; /* host part of the server name */
	char server_name[DP_NAME_MAX]; /* "host:rpc-port", this service's identity */
};

/* config.c: the configuration, set by options.c before any thread starts. */
extern struct dp_config cfg;
/* The peer RPC port once it listens, and with it cfg.server_name. */
void config_set_rpc_port(int port);

struct client;
struct uid_acct;     /* control.c: what one uid holds */
struct proc_acct;    /* control.c: what one process (SO_PEERCRED pid) holds */
struct samehost_seg; /* samehost.h */
struct notif_ring;   /* notif.h */

/* The engines (engine.h), as indexes of their per-region and per-poller slots. */
#define ENGINE(name) ENGINE_##name,
enum engine_id {
#include "engines.def"
	DP_ENGINES
};
#undef ENGINE

/* What backs a region; route() (poller.c) picks the engine of a transfer
 * from the kinds of its two regions. */
enum region_kind {
	REGION_HOST, /* a client's memfd, mapped here */
	REGION_CUDA, /* GPU memory opened from a CUDA IPC handle (gpu_cuda.c) */
	REGION_FILE, /* a file, read and written through io_uring */
	REGION_VM,   /* memory of a client process, through process_vm_readv/writev (vm.c) */
};

struct region {
	atomic_int refs;
	uint32_t id;
	enum region_kind kind;
	int device; /* CUDA device ordinal (REGION_CUDA) */
	int fd;	    /* REGION_FILE: the file; -1 otherwise */
	void *map;  /* the mapping (page-aligned) */
	size_t map_len;
	uint8_t *base; /* where byte 0 of the region is, in this process */
	uint64_t len;
	uint64_t file_off; /* REGION_FILE: offset of byte 0 in the file */
	pid_t owner_pid;
	/* Bytes charged to its owner's uid (control.c, --max-mapped-gb-per-uid):
	 * the mapping of a REGION_HOST, 0 for the others (a REGION_VM maps
	 * nothing here). */
	uint64_t charged;
	/* Each engine's own state on this region (engine.h): fabric
	 * registrations, a file region's state, ...; NULL where it has none. */
	void *eng[DP_ENGINES];
	/* REGION_HOST that file I/O used: which io_uring fixed buffer of
	 * which ring holds each window of it that was touched (file.c;
	 * NULL until its first file I/O). Inline, not behind eng[], for the
	 * file engine's per-slice check. */
	_Atomic(struct fbuf_map *) fbuf;
	/* Registered for peers' RMA (an export on the fabric): its mapping is
	 * quarantined, not unmapped, when it goes (host.c). */
	atomic_bool rma_target;
};

/* A region exported under a name. `dead` is set before the owner's region
 * reference is dropped; a poller that saw dead == 0 in its current loop may
 * still use `region` and takes its own reference for work that outlives the
 * loop. */
struct segment {
	atomic_int refs;
	atomic_int dead;
	struct region *region; /* owns one reference until dead */
	unsigned access;
	struct client *owner;
	char name[DP_NAME_MAX];
	struct segment *next; /* export list, control thread only */
	/* Each engine's own state on this export (engine.h), e.g. the fabric
	 * registrations behind fab_keys; NULL where it has none. */
	void *eng[DP_ENGINES];
	uint64_t fab_keys[DP_MAX_RAILS]; /* remote keys per rail, for peers */
	/* An export of memory the rails could not register that this service
	 * stages for its peers (stage.c): its id there (0: none); fab_keys
	 * then hold its secret. */
	uint32_t stage_id;
	/* For a segment of another service, its description (region is NULL
	 * then). */
	struct remote_seg *remote;
	/* For one of another service of this host, mapped here (region is
	 * that mapping, with a reference): how to tell that it still lives
	 * (samehost.h). */
	struct samehost_seg *same;
	char owner_name[DP_NAME_MAX]; /* remote: the peer string it was opened by */
	/* An engine session's member (session.h): where the region starts in
	 * its owner's process; notifications say addresses, not offsets. */
	bool session_member;
	uint64_t session_va;
	/* A fabric transfer to it that failed on every rail asks whether it
	 * still stands before its peer is taken for lost (segments.h,
	 * segment_probe_ask): tickets handed out, the last one answered
	 * "intact"; probe_listed and probe_next under the probe list's lock
	 * (segments.c), probe_started control thread only. */
	atomic_uint probe_asked, probe_done;
	uint32_t probe_started;
	bool probe_listed;
	struct segment *probe_next;
};

/* A segment handle in a client's table: a segment, or an engine session
 * (session.h), whose descriptors name its members by virtual address. */
struct session_cli;
struct seg_handle {
	struct segment *seg;	  /* holds a segment reference; NULL for a session */
	unsigned access;	  /* what was granted at open */
	struct session_cli *sess; /* holds a reference; NULL for a segment */
};

/* Counters of one queue, single writer (its poller). */
struct queue_counters {
	uint64_t submitted, completed, failed, bytes, local_copies, doorbells;
	/* Kept for the stats region (stats.h) only when it exists. */
	uint64_t lat_sum_ns, lat_max_ns, lat_unstamped, submitted_seen;
	uint64_t failed_by[DP_STATS_NERR];
};

struct queue {
	struct dp_ring_pair pair; /* service side: SQ consumer, CQ producer */
	int sq_efd;		  /* client -> service doorbell: our end of its socketpair */
	int cq_efd;		  /* service -> client doorbell: our end of its socketpair */
	/* The client's ends of both, never used here: kept until the queue
	 * goes, like the memfd, so that the service's fd count does not move
	 * after the client has seen the QUEUE_CREATE reply. */
	int sq_peer, cq_peer;
	uint32_t id;
	uint32_t depth;
	struct client *client; /* holds a client reference */
	struct poller *poller;
	atomic_int closing; /* set by the control thread */
	/* Poller-private from here on. */
	uint32_t inflight; /* accepted, completion not yet staged */
	bool broken;
	uint32_t nstage; /* completions written to the CQ, not yet published */
	struct queue_counters ctr;
	struct dp_stats_queue *st; /* its block in the stats region, or NULL */
	/* The run of completions being counted for the stats region (stats.h):
	 * their stamp and flags, and the counters when it began. */
	uint64_t run_submit, run_done0, run_bytes0;
	uint32_t run_flags;
	/* Loops in a row that found nothing to do for this queue; at
	 * PARK_AFTER_LOOPS it is parked (poller.c). */
	uint32_t idle_loops;
	struct queue *next; /* the poller's list (queues, or parked) */
};

struct client {
	atomic_int refs;
	int fd;
	uint32_t id;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	char name[32];
	char session[DP_NAME_MAX]; /* "host:port" of its session, "" when none */
	bool hello;
	/* control.c: when the connection was accepted (the HELLO deadline
	 * counts from it); its uid's account (NULL for a refused one); its
	 * process's account (refused ones too); the refusal (-EUSERS,
	 * -EMFILE, -EDQUOT) its HELLO is answered with, or 0; whether it is
	 * to be hung up on after the batch unless it has said HELLO by then
	 * (a silent connection evicted for a newcomer). */
	uint64_t accepted_ns;
	struct uid_acct *acct;
	struct proc_acct *proc;
	int refuse;
	bool evict;
	unsigned strikes;  /* malformed messages so far */
	atomic_int broken; /* a poller found a queue corrupt */
	_Atomic(struct region *) regions[DP_MAX_REGIONS];
	_Atomic(struct seg_handle *) segs[DP_MAX_SEGS];
	struct queue *queues[DP_MAX_QUEUES];
	/* Its notification ring (notif.h): published by the control thread,
	 * read by pollers that deliver to it; freed after the grace period of
	 * the client's teardown. NULL until dp_notify_open. */
	_Atomic(struct notif_ring *) notify;
	struct client *next;
};

/* 0 when @len more bytes mapped here fit client @c's process quota
 * (--max-mapped-gb-per-process: else -EFBIG) and its uid's
 * (--max-mapped-gb-per-uid: else -EDQUOT), logged; control.c. Control
 * thread. */
int client_map_quota(const struct client *c, uint64_t len);

struct poller {
	unsigned idx;
	int cpu;
	pthread_t thread;
	int epfd;
	int wake_efd;	     /* control thread -> poller */
	atomic_ulong qs;     /* quiescent-state counter, bumped every loop */
	atomic_int sleeping; /* quiescent while set */
	atomic_uint nqueues; /* for least-loaded assignment */
	pthread_mutex_t inbox_lock;
	struct queue *inbox; /* queues handed over by the control thread */
	atomic_int inbox_pending;
	struct queue *queues; /* owned list, polled every loop */
	struct queue *parked; /* owned, idle: their clients ring (poller.c) */
	unsigned nparked;
	uint64_t loops, busy_loops, sleeps;
	uint64_t barrier_ns; /* the clock at its last membarrier (poller_arm) */
	int sleep_cap_ms;    /* the longest sleep the engines allow */
	/* The last sleep ended by its cap, not by an fd: set by poller_sleep,
	 * cleared by the fabric engine's next progress (fabric.c). */
	bool timed_wake;
	uint32_t active;	    /* engines with work, bit = enum engine_id (engine.h) */
	uint32_t always;	    /* engines whose progress runs every loop */
	void *eng[DP_ENGINES];	    /* each engine's per-poller state (engine.h) */
	struct stats_poller *stats; /* stats.c; NULL without a stats region */
};

extern struct poller pollers[DP_MAX_POLLERS]; /* poller.c */
extern atomic_int dp_stopping;		      /* lifetime.c: the service is stopping */
extern int control_wake_efd; /* control.c: pollers -> control thread: a client broke */

/* The service's own wake-ups (poller wake_efd, control_wake_efd, event.h's
 * ev_wake): eventfds no client ever holds, so their O_NONBLOCK is ours
 * alone. Client doorbells are sockets (dp_doorbell_ring/drain). */
static inline void wake_efd_ring(int efd)
{
	uint64_t one = 1;

	(void)!write(efd, &one, sizeof(one));
}

static inline void wake_efd_drain(int efd)
{
	uint64_t v;

	(void)!read(efd, &v, sizeof(v));
}
/* lifetime.c */
void qsbr_synchronize(void);
void region_put(struct region *r);
/* n references at once (an engine that took them for a run of descriptors). */
void region_put_n(struct region *r, int n);
/* host.c: mappings of regions peers could RMA into, kept (as anonymous
 * memory) for a grace period after the region goes; the control thread
 * sweeps them: ms until the next is due, -1 when none is kept. The first
 * kept while none was rings `efd` (host_quarantine_wake; -1: none), so
 * that the sweep's timer runs again. */
int host_quarantine_sweep(void);
void host_quarantine_wake(int efd);
void segment_put(struct segment *s);
void client_put(struct client *c);

/* poller.c */
int pollers_start(void);
void pollers_stop(void);
void pollers_free(void);
void poller_add_queue(struct queue *q);
void poller_kick(struct poller *p);
/* One pass of a poller's loop: new queues, every SQ drained (one burst
 * each), every engine's progress, completions published, closed queues
 * retired. Returns the work done (0: idle). The poller's thread, or a test
 * harness driving a poller of its own. */
int poller_run_once(struct poller *p);
/* Stages a completion; submit_ns is the descriptor's dp_desc.submit_ns
 * (the stats region's latency histogram). */
void queue_complete_ns(struct queue *q, uint64_t user_data, uint64_t submit_ns, int status,
		       uint64_t bytes, uint32_t flags);
/* For engines that did not keep submit_ns: counted, not timed. */
static inline void queue_complete(struct queue *q, uint64_t user_data, int status, uint64_t bytes,
				  uint32_t flags)
{
	queue_complete_ns(q, user_data, 0, status, bytes, flags);
}

/* control.c */
int control_run(int rpc_fd);
/* sd_notify.c: a state ("READY=1", "STOPPING=1") to systemd's $NOTIFY_SOCKET. */
void service_notify(const char *state);

#endif /* DP_INTERNAL_H */
