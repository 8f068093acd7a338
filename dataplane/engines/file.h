/* SPDX-License-Identifier: MIT */
/*
 * file.h - file regions and the file engine: transfers between a file
 * region and a host region, through one io_uring per poller.
 *
 * A file region is an fd the client passed (dp_register_file) or a path
 * the service opened beneath --file-root (dp_open_file), plus a byte range
 * of the file and an access mode no wider than the fd's. Transfers are cut
 * into slices of --io-slice bytes; at most --io-depth slices per poller are
 * in the kernel at once. A slice whose file offset, length and memory
 * address meet the file's direct-I/O alignment goes through a second fd of
 * the same file opened with O_DIRECT; any other slice goes through the page
 * cache. Completions are reaped in the poller loop; no thread of ours ever
 * blocks in a read or a write. docs/files.md is the user's view.
 *
 * Threads: file_init/fini at start-up and exit; file_region_* on the
 * control thread (file_region_release also on a poller, through the last
 * region_put); file_submit/progress/busy/cancel_all on the poller that
 * owns the state.
 *
 * Code: file_region.c (file regions), file.c (the io_uring engine);
 * file_internal.h between them.
 */
#ifndef DP_FILE_H
#define DP_FILE_H

#include <limits.h>
#include <stdbool.h>

#include "dp_internal.h"

struct file_config {
	unsigned depth;	     /* --io-depth: slices in flight per poller */
	size_t slice;	     /* --io-slice: bytes per read/write */
	size_t staging;	     /* --staging: pinned staging pool for GPU targets */
	size_t max_pinned;   /* --max-pinned-mb: fixed-buffer bytes per client */
	char root[PATH_MAX]; /* --file-root; "" = dp_open_file is refused */
};
extern struct file_config file_cfg;

/* A file region's state (region->eng[ENGINE_file] of a REGION_FILE region). */
struct file_region {
	unsigned access;    /* DP_ACCESS_READ or DP_ACCESS_RW */
	int dfd;	    /* the same file opened O_DIRECT, or -1 */
	int slot, dslot;    /* registered-file indexes of fd and dfd, or -1 */
	uint32_t off_align; /* direct I/O: file offset and length alignment */
	uint32_t mem_align; /* direct I/O: memory address alignment */
	/* Slices by path, for the log line at close (any poller adds). */
	atomic_ullong direct_ios, direct_bytes, buffered_ios, buffered_bytes;
	atomic_ullong fixed_ios; /* of those, through a fixed buffer */
};

/* The engine (engine.h: file_engine): one io_uring per poller, started
 * before the pollers run (a kernel without io_uring is not fatal: file
 * regions are then refused with -ENOTSUP; an unusable --file-root is). A
 * descriptor with a file region on either side completes with
 * DP_CQE_F_FILE; the poller does not sleep while slices are in the kernel.
 * At a region's last reference it closes the file's fds, or drops a host
 * region from the rings' fixed buffers. */

/* True when @r allows every access in @need (any region that is not a
 * file allows everything). */
static inline bool fileio_access_ok(const struct region *r, unsigned need)
{
	const struct file_region *f = r->eng[ENGINE_file];

	return r->kind != REGION_FILE || (f->access & need) == need;
}

#endif /* DP_FILE_H */
