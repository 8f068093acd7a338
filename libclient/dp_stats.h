/* SPDX-License-Identifier: MIT */
/*
 * dp_stats.h - the layout of dataplaned's shared-memory stats region: the
 * ABI between the service (dataplane/core/stats.c, the only writer) and its
 * readers (tools/ring-stat.c). Internal: not part of dataplane.h, not for
 * applications. docs/ring-stat.md describes the region for people.
 *
 * The region is one file in /dev/shm (shm_open name, mode 0640), created by
 * dataplaned at start and unlinked at a clean stop. It holds a header, then
 * arrays of fixed-size blocks at the offsets the header gives:
 *
 *   header | pollers[npollers] | rail_info[nrails] | rails[nrails][npollers]
 *          | queues[nqueues]
 *
 * Readers map it PROT_READ and never write. A reader checks, in this order:
 * magic (else: not a stats region), abi_version (else: another ABI; magic
 * and abi_version stay the first 8 bytes in every version), then the file
 * size against region_size and every block array against region_size (else:
 * truncated). Offsets and sizes come from the header, never from sizeof in
 * the reader, except that a reader of this version requires them to equal
 * its own sizeof.
 *
 * Writers and consistency. Every counter has exactly one writer and is
 * written with plain (relaxed atomic) stores, never a read-modify-write
 * instruction:
 *   - service block: the control thread;
 *   - poller block and its rails[r][poller]: that poller;
 *   - queue block counters: the poller that owns the queue;
 *   - queue block identity (pid, name, ids, generation): the control thread
 *     while it assigns the block, the poller while it retires it. The block's
 *     state field hands the block from one to the other (release/acquire).
 * A queue block carries a sequence counter (seq): odd while the block is
 * being assigned to a queue or retired. A reader loads seq (acquire), copies
 * the block, issues an acquire fence, loads seq again and retries when the
 * two differ or are odd. So a snapshot never mixes two queues' numbers (the
 * generation tells queues of one slot apart), but counters of one queue may
 * be torn against each other by a few descriptors: each counter is exact and
 * monotonic on its own; sums across counters (submitted - completed -
 * failed, histogram count vs completed + failed) may be off by what the
 * poller did during the copy, and are exact whenever the queue is idle.
 * When a poller retires a queue it adds the queue's counters to its
 * retired_* totals, inside its own retire_seq (odd meanwhile); a reader that
 * rereads every poller's retire_seq after copying the queues and finds one
 * changed retries the whole snapshot, so totals never count a queue twice
 * or miss it.
 */
#ifndef DP_STATS_H
#define DP_STATS_H

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define DP_STATS_MAGIC 0x54535044u /* "DPST" */
/* 2: the poller block gained the file I/O slice counters; 3: the samehost
 * path, peers_known; 4: the notification counters; 5: the stripe counters, parked_queues;
 * 6: the engine session counters; 7: fabric_target_passes, fabric_target_late;
 * 8: the rail block is two cache lines, with the rail health figures. */
#define DP_STATS_ABI_VERSION 8u
#define DP_STATS_NAME_MAX 64 /* shm_open name, NUL included, no '/' */
#define DP_STATS_PREFIX "dataplane-"

/*
 * Latency histogram: log-linear buckets (HdrHistogram's layout) over
 * nanoseconds. Values below 2^SUB_BITS get a bucket each; above, every power
 * of two [2^e, 2^(e+1)) is split into 2^SUB_BITS equal buckets, so a bucket
 * is at most 1/32 (3.1%) of its values wide. Values from 2^MAX_BITS ns (about
 * 18 minutes) on share the last bucket.
 */
#define DP_STATS_HIST_SUB_BITS 5
#define DP_STATS_HIST_MAX_BITS 40
#define DP_STATS_HIST_BUCKETS                                                                      \
	((DP_STATS_HIST_MAX_BITS - DP_STATS_HIST_SUB_BITS + 1) << DP_STATS_HIST_SUB_BITS)

/* Descriptors taken per busy poller loop: 0, 1, 2-3, 4-7, ..., 32-63, 64+. */
#define DP_STATS_LOOP_BUCKETS 8

#define DP_STATS_MAX_RAILS 8

/* Failed completions by errno class. */
enum dp_stats_err {
	DP_STATS_E_INVAL,	/* bad descriptor */
	DP_STATS_E_BADF,	/* unknown region or segment handle */
	DP_STATS_E_CONNRESET,	/* segment withdrawn */
	DP_STATS_E_PERM,	/* access not granted */
	DP_STATS_E_FAULT,	/* range outside the region or segment */
	DP_STATS_E_CANCELED,	/* cancelled at shutdown */
	DP_STATS_E_NOMEM,	/* the service ran out of memory */
	DP_STATS_E_IO,		/* device or file I/O error */
	DP_STATS_E_HOSTUNREACH, /* peer service lost */
	DP_STATS_E_TIMEDOUT,	/* fabric operation timed out */
	DP_STATS_E_NODEV,	/* no such GPU */
	DP_STATS_E_OTHER,
	DP_STATS_NERR
};

/* Transfer paths, from the completion's DP_CQE_F_* flags. */
enum dp_stats_path {
	DP_STATS_PATH_HOST,	/* local copy, host memory (DP_CQE_F_LOCAL) */
	DP_STATS_PATH_GPU,	/* local copy a GPU took part in (DP_CQE_F_GPU) */
	DP_STATS_PATH_FABRIC,	/* libfabric RMA (DP_CQE_F_FABRIC) */
	DP_STATS_PATH_FILE,	/* io_uring file I/O (DP_CQE_F_FILE) */
	DP_STATS_PATH_SAMEHOST, /* another service of this host, mapped (DP_CQE_F_SAME_HOST) */
	DP_STATS_NPATH
};

enum dp_stats_state { DP_STATS_RUNNING = 1, DP_STATS_STOPPED = 2 };
enum dp_stats_qstate { DP_STATS_Q_FREE = 0, DP_STATS_Q_ACTIVE = 1 };

/* Service-wide figures; writer: the control thread. Gauges and totals. */
struct dp_stats_service {
	uint64_t clients;	   /* connected now */
	uint64_t clients_total;	   /* ever connected */
	uint64_t queues;	   /* open now */
	uint64_t queues_total;	   /* ever opened */
	uint64_t queues_untracked; /* opened while every queue block was taken */
	uint64_t regions;	   /* registered now */
	uint64_t registered_bytes; /* bytes of those regions */
	uint64_t segments;	   /* exported now */
	/* Other services in our fabric address vectors: those whose segments
	 * we opened, and those that opened ours (their lookups carry their
	 * addresses); kept for the service's life. */
	uint64_t peers_known;
	/* Notifications for other services' exports (fabric, same host),
	 * sent over the peer RPC: taken by the peer, or lost (the peer did not
	 * answer or refused, or NOTIF_OUT_MAX were waiting); and those peers
	 * sent for exports here: put on the owner's ring, or dropped. */
	uint64_t notify_sent, notify_lost;
	uint64_t notify_received, notify_received_dropped;
	/* Engine sessions (docs/api.md): clients with a session port now, and
	 * the registrations in them; handles open now on sessions (of this
	 * service or others); questions this service asked of sessions' ports
	 * about addresses its handles had not seen (one per registration
	 * first touched), and those answered with an error. */
	uint64_t sessions, session_members, session_handles;
	uint64_t session_questions, session_question_errors;
};

struct dp_stats_header {
	uint32_t magic;	      /* DP_STATS_MAGIC, stored last at creation (release) */
	uint32_t abi_version; /* DP_STATS_ABI_VERSION */
	uint64_t region_size; /* bytes of the whole region */
	uint32_t header_size; /* sizeof(struct dp_stats_header) */
	uint32_t queue_size;  /* sizeof(struct dp_stats_queue) */
	uint32_t poller_size;
	uint32_t rail_info_size;
	uint32_t rail_size;
	uint32_t nqueues; /* queue blocks */
	uint32_t npollers;
	uint32_t nrails; /* rail_info blocks; rails has nrails * npollers */
	uint32_t hist_buckets;
	uint32_t hist_sub_bits;
	uint64_t pollers_off, rail_info_off, rails_off, queues_off;
	int32_t pid;		/* the service */
	uint32_t state;		/* enum dp_stats_state */
	uint64_t start_mono_ns; /* CLOCK_MONOTONIC at start */
	uint64_t start_real_ns; /* CLOCK_REALTIME at start */
	char name[DP_STATS_NAME_MAX];
	char server_name[64];
	char socket_path[108];
	uint32_t reserved;
	_Alignas(64) struct dp_stats_service svc;
};

/* One queue pair. Identity: see the consistency notes at the top. */
struct dp_stats_queue {
	uint32_t seq;	     /* odd while assigned or retired */
	uint32_t state;	     /* enum dp_stats_qstate */
	uint64_t generation; /* of this slot; bumped at every assignment */
	int32_t client_pid;
	uint32_t client_id;
	uint32_t queue_id; /* the client's queue id */
	uint32_t poller;
	uint32_t depth;
	uint32_t reserved;
	uint64_t created_ns; /* CLOCK_MONOTONIC */
	char client_name[32];
	/* Counters: the owning poller, from here on. */
	_Alignas(64) uint64_t submitted; /* descriptors taken from the SQ */
	uint64_t completed;		 /* completions with status 0 */
	uint64_t failed;		 /* completions with status < 0 */
	uint64_t bytes;			 /* moved by completed descriptors */
	uint64_t local_copies;		 /* handed to the local copy engine */
	uint64_t doorbells;		 /* CQ doorbells rung (client asleep) */
	uint64_t lat_sum_ns;		 /* sum over the histogram's samples */
	uint64_t lat_max_ns;
	uint64_t lat_unstamped; /* completions without a usable submit_ns: not in hist */
	uint32_t sq_depth;	/* SQ entries waiting, when the poller last looked */
	uint32_t cq_depth;	/* CQ entries the client had not reaped, same */
	uint64_t failed_by[DP_STATS_NERR];
	uint64_t hist[DP_STATS_HIST_BUCKETS]; /* submit-to-completion ns */
};

/* One poller; writer: that poller. */
struct dp_stats_poller {
	uint32_t retire_seq; /* odd while a queue's counters move to retired_* */
	int32_t cpu;	     /* pinned CPU, -1 when not pinned */
	uint32_t index;
	uint32_t reserved;
	uint64_t last_loop_ns; /* CLOCK_MONOTONIC at the end of the last loop */
	uint64_t loops;
	uint64_t busy_loops; /* loops that found work */
	uint64_t sleeps;     /* times it slept on doorbells */
	uint64_t wakeups;    /* sleeps ended by a doorbell (the rest timed out) */
	uint64_t descs;	     /* descriptors taken from SQs */
	uint64_t busy_ns;    /* in loops that found work */
	uint64_t idle_ns;    /* in loops that found none (spinning) */
	uint64_t sleep_ns;   /* asleep */
	uint64_t loop_hist[DP_STATS_LOOP_BUCKETS];
	uint64_t path_ops[DP_STATS_NPATH]; /* completions per path */
	uint64_t path_bytes[DP_STATS_NPATH];
	/* File I/O slices (io_uring reads and writes) finished, and their
	 * bytes, by how they went: O_DIRECT, or through the page cache. A slice
	 * of a failed transfer counts once it is done; a slice retried through
	 * the page cache (refused O_DIRECT, short I/O) counts as buffered. */
	uint64_t file_direct_ios, file_direct_bytes;
	uint64_t file_buffered_ios, file_buffered_bytes;
	/* Notifications (DP_DESC_F_NOTIFY) this poller handed to an owner of
	 * this service: put on its notification ring, or dropped (the ring
	 * was full, or the owner had none). docs/api.md "Notifications". */
	uint64_t notify_delivered, notify_dropped;
	/* Stripes of another poller's large host copy (dataplaned
	 * --stripe-min) that this poller copied while it had nothing of its
	 * own to do, and their bytes. */
	uint64_t stripes_helped, stripe_bytes_helped;
	/* Queues of this poller parked now: idle long enough that it no longer
	 * polls them; their clients ring to be polled again (a gauge). */
	uint64_t parked_queues;
	/* Poller 0 (the one peers target): fabric progress passes that served
	 * other services' RMA into its endpoints (a provider whose target side
	 * moves only when its CQs are read: tcp, shm), and of those, the ones
	 * right after a sleep that its cap ended, where a peer's operation
	 * waited for the poller's timer. docs/architecture.md, the fabric
	 * engine. */
	uint64_t fabric_target_passes, fabric_target_late;
	/* Sums over the queues this poller retired. */
	uint64_t retired_queues;
	uint64_t retired_submitted, retired_completed, retired_failed, retired_bytes;
	uint64_t retired_local_copies, retired_doorbells;
	uint64_t retired_lat_sum_ns, retired_lat_max_ns, retired_lat_unstamped;
	uint64_t retired_failed_by[DP_STATS_NERR];
	uint64_t retired_hist[DP_STATS_HIST_BUCKETS];
};

/* A fabric rail (NIC); written once by the control thread at start-up. */
struct dp_stats_rail_info {
	uint32_t state; /* 1 once named */
	uint32_t index;
	char provider[32];
	char fabric[64];
	char domain[64];
};

/* One poller's traffic on one rail; writer: that poller. */
struct dp_stats_rail {
	uint64_t posted;    /* RMA operations posted */
	uint64_t completed; /* ... completed successfully */
	uint64_t eagain;    /* posts refused with -FI_EAGAIN */
	uint64_t errors;    /* completions with an error */
	uint64_t retries;   /* operations posted again after an error */
	uint64_t bytes;	    /* moved by completed operations */
	uint64_t injected;  /* of `posted`: small WRITEs posted with FI_INJECT */
	uint64_t allocs;    /* rail 0 only: chunks this poller's op and slice
			     * pools allocated (start-up's included); flat while
			     * transfers stream: none is allocated per descriptor */
	/* Health (docs/reliability.md, "Rails that die, slow down or come
	 * back"), as this poller sees the rail toward its peers: */
	uint64_t reposted; /* slices it held posted again on another rail
			    * when it was taken out of a peer's stripe */
	uint64_t outs;	   /* times it was taken out of a peer's stripe */
	uint64_t backs;	   /* times it answered again and went back in */
	uint64_t probes;   /* probes (8-byte READs) posted on it while out */
	uint64_t state;	   /* gauge: enum dp_stats_rail_state, the worst
			    * toward the peers this poller sends to */
	uint64_t weight;   /* gauge: its share of the stripe, per mille, to
			    * the peer this poller sent to last (its measured
			    * throughput over the rails' sum; 0 while out) */
	uint64_t bw;	   /* gauge: its measured throughput to that peer,
			    * bytes/s (0: not measured yet) */
	uint64_t reserved;
};

/* A rail toward a peer: in the stripe, taken out (its slices stopped
 * completing while another rail's completed), or out with a probe in
 * flight. */
enum dp_stats_rail_state {
	DP_STATS_RAIL_HEALTHY = 0,
	DP_STATS_RAIL_OUT = 1,
	DP_STATS_RAIL_PROBING = 2,
};

_Static_assert(sizeof(struct dp_stats_header) % 64 == 0, "header is whole cache lines");
_Static_assert(sizeof(struct dp_stats_queue) % 64 == 0, "queue block is whole cache lines");
_Static_assert(sizeof(struct dp_stats_poller) % 8 == 0, "poller block is whole words");
_Static_assert(sizeof(struct dp_stats_rail) == 128, "rail block is two cache lines");

/* Histogram bucket of a value in ns: clz arithmetic, no loop, no branch
 * beyond the small-value and overflow cases. */
static inline unsigned dp_stats_hist_index(uint64_t v)
{
	unsigned msb, shift;

	if (v < (1u << DP_STATS_HIST_SUB_BITS))
		return (unsigned)v;
	if (v >> DP_STATS_HIST_MAX_BITS)
		return DP_STATS_HIST_BUCKETS - 1;
	msb = 63u - (unsigned)__builtin_clzll(v);
	shift = msb - DP_STATS_HIST_SUB_BITS;
	return (shift << DP_STATS_HIST_SUB_BITS) + (unsigned)(v >> shift);
}

/* Smallest value of bucket i. */
static inline uint64_t dp_stats_hist_low(unsigned i)
{
	unsigned shift;

	if (i < (2u << DP_STATS_HIST_SUB_BITS))
		return i;
	shift = (i >> DP_STATS_HIST_SUB_BITS) - 1;
	return (uint64_t)((i & ((1u << DP_STATS_HIST_SUB_BITS) - 1)) |
			  (1u << DP_STATS_HIST_SUB_BITS))
	       << shift;
}

/* One past the largest value of bucket i. */
static inline uint64_t dp_stats_hist_high(unsigned i)
{
	return dp_stats_hist_low(i + 1);
}

static inline unsigned dp_stats_loop_index(uint32_t n)
{
	unsigned i = n ? 32u - (unsigned)__builtin_clz(n) : 0;

	return i < DP_STATS_LOOP_BUCKETS ? i : DP_STATS_LOOP_BUCKETS - 1;
}

/* Class of a negative errno (a completion's status). */
static inline unsigned dp_stats_err_class(int status)
{
	switch (-status) {
	case EINVAL:
		return DP_STATS_E_INVAL;
	case EBADF:
		return DP_STATS_E_BADF;
	case ECONNRESET:
		return DP_STATS_E_CONNRESET;
	case EPERM:
		return DP_STATS_E_PERM;
	case EFAULT:
		return DP_STATS_E_FAULT;
	case ECANCELED:
		return DP_STATS_E_CANCELED;
	case ENOMEM:
		return DP_STATS_E_NOMEM;
	case EIO:
		return DP_STATS_E_IO;
	case EHOSTUNREACH:
		return DP_STATS_E_HOSTUNREACH;
	case ETIMEDOUT:
		return DP_STATS_E_TIMEDOUT;
	case ENODEV:
		return DP_STATS_E_NODEV;
	default:
		return DP_STATS_E_OTHER;
	}
}

/* Stable names of the errno classes (JSON keys, Prometheus label values). */
static inline const char *dp_stats_err_name(unsigned cls)
{
	static const char *const names[DP_STATS_NERR] = {
		"einval", "ebadf", "econnreset",   "eperm",	"efault", "ecanceled",
		"enomem", "eio",   "ehostunreach", "etimedout", "enodev", "other"};

	return cls < DP_STATS_NERR ? names[cls] : "other";
}

static inline const char *dp_stats_path_name(unsigned path)
{
	static const char *const names[DP_STATS_NPATH] = {"host", "gpu", "fabric", "file",
							  "samehost"};

	return path < DP_STATS_NPATH ? names[path] : "?";
}

/*
 * The region name a service on @p socket_path uses unless --stats names
 * one: "dataplane-" and 8 hex digits of the path's FNV-1a hash, so that
 * ring-stat can find a service from its socket alone.
 */
static inline void dp_stats_default_name(const char *socket_path, char *out, size_t len)
{
	uint32_t h = 2166136261u;

	for (const unsigned char *p = (const unsigned char *)socket_path; *p; p++)
		h = (h ^ *p) * 16777619u;
	snprintf(out, len, DP_STATS_PREFIX "%08x", h);
}

/*
 * Whether dataplaned still runs as @p pid: the process exists and is named
 * dataplaned (a crashed service's pid may have been reused). Only meaningful
 * in the service's pid namespace.
 */
static inline int dp_stats_service_alive(int32_t pid)
{
	char path[64], comm[32] = "";
	FILE *f;

	if (pid <= 0 || (kill(pid, 0) < 0 && errno != EPERM))
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 1; /* no /proc: trust kill() */
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = 0;
	fclose(f);
	return !strncmp(comm, "dataplaned", 10);
}

#endif /* DP_STATS_H */
