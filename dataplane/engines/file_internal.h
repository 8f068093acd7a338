/* SPDX-License-Identifier: MIT */
/*
 * file_internal.h - what the file engine's two files share, and nothing
 * else includes (file.h is the public side).
 *
 *   file_region.c  file regions: --file-root, opening and checking a file,
 *                  O_DIRECT probing, registered-file slots, the close
 *   file.c       the io_uring engine: one ring per poller, fixed buffers,
 *                  slices, staging through the GPU, progress, cancel
 */
#ifndef DP_FILEIO_INTERNAL_H
#define DP_FILEIO_INTERNAL_H

#include <liburing.h>
#include <pthread.h>
#include <stdbool.h>

#include "dp_internal.h"
#include "engine.h"
#include "oplist.h"

/* Hidden: -fPIC code reaches these directly, as when they were static. */
#pragma GCC visibility push(hidden)

/* Registered-file slots per ring: two per file region (buffered, direct). A
 * region that finds none left uses its plain fds. */
#define FILE_SLOTS 1024

/* Fixed-buffer slots per ring (file.c): one per registered window of a
 * host region. */
#define FBUF_SLOTS 1024

struct file_op;	   /* a transfer (file.c) */
struct file_slice; /* one read or write of it (file.c) */

/* A poller's ring and what goes through it (poller->eng[ENGINE_file]). */
struct file_poller {
	struct io_uring ring;
	unsigned inflight;		  /* slices owned by the kernel (or prepared for it) */
	struct op_list ops;		  /* ops with bytes to issue, round robin; spare ops */
	struct file_slice *slices, *free; /* file_cfg.depth of them */
	/* Staging for GPU transfers: pinned buffers of file_cfg.slice bytes. */
	struct poller *p;
	uint8_t *stage_mem, **bufs;
	unsigned nbufs, nfree;			 /* buffers, of which free (bufs[0..nfree)) */
	struct file_slice *gpu_head, **gpu_tail; /* slices in the GPU stage, oldest first */
	unsigned ngpu;
	/* Fixed buffers: this ring's index in a host region's window map, the
	 * registrations still allowed in this loop (one: a loop stalls for
	 * at most one window's pinning), and the slots in use (under
	 * file_slot_lock: a region's last reference frees them on any thread). */
	unsigned idx;
	unsigned fbuf_budget;
	bool fbuf_used[FBUF_SLOTS];
};

/* file.c: the rings, one per poller (none: io_uring is unavailable and
 * file regions are refused), set up before the pollers run. file_fixed_files:
 * every ring has a sparse table of FILE_SLOTS. */
extern struct file_poller *file_rings[DP_MAX_POLLERS];
extern unsigned file_nrings;
extern bool file_fixed_files;

/* file_region.c: guards the registered-file slots, and file.c's
 * fixed-buffer slots (fbuf_used) and per-client pinned bytes too. */
extern pthread_mutex_t file_slot_lock;

/* file_region.c: --file-root opened (0, or -errno, logged) and closed, at
 * the engine's start-up and exit; a file region's fds and slots at its
 * last reference. */
int file_root_open(void);
void file_root_close(void);
void file_region_close(struct region *reg);
/* The file engine's kinds of memory: a file by fd or by path (engine.h). */
extern const struct engine_region_msg file_region_msgs[];

#pragma GCC visibility pop

#endif /* DP_FILEIO_INTERNAL_H */
