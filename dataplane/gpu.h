/* SPDX-License-Identifier: MIT */
/*
 * gpu.h - everything of the service that touches CUDA: device discovery,
 * GPU regions opened from CUDA IPC handles, pinning of host regions, and the
 * GPU path of the local copy engine.
 *
 * The copy path: any local copy that touches a REGION_CUDA region is one
 * cudaMemcpyAsync(cudaMemcpyDefault) on a non-blocking stream the poller owns
 * for the device doing the copy (the destination's for host->device and
 * device->device, the source's for device->host), followed by a CUDA event
 * from a per-device pool. The poller polls the oldest event of each stream
 * once per loop (a stream completes in order); it never waits. Each poller
 * has two streams per device: copies up to GPU_SMALL_MAX go to a
 * high-priority one, so that a 4 KiB copy never queues behind a 1 GiB one.
 *
 * Threads: gpu_init/gpu_region_* and gpu_host_* run on the control thread
 * (gpu_region_close and gpu_host_unregister also on a poller, through the
 * last region_put); gpu_copy_* and gpu_progress on the poller that owns the
 * state. Without DP_HAVE_CUDA every entry point is a stub: no device, GPU
 * registration answers -ENODEV.
 */
#ifndef DP_GPU_H
#define DP_GPU_H

#include <stdbool.h>

#include "copy.h"
#include "dp_internal.h"

/* Copies up to this size use the high-priority stream. */
#define GPU_SMALL_MAX (1u << 20)

/* Service start-up: finds the devices, enables peer access between them.
 * A machine without a GPU (or a build without CUDA) is not an error. */
void gpu_init(void);
/* Devices this service can use (0: GPU registration answers -ENODEV). */
int gpu_device_count(void);

/* Opens the CUDA IPC handle of @req on the device whose UUID it names and
 * fills @reg (kind, device, map, base, len). 0, -ENODEV (no such device
 * here), -EINVAL (handle unusable, or offset + len beyond the allocation). */
int gpu_region_open(struct region *reg, const struct dp_msg_region_register_cuda *req);
/* Closes what gpu_region_open opened (the last reference went away). */
void gpu_region_close(struct region *reg);

/* Pins a host region for asynchronous copies when a GPU exists; a failure
 * is logged and leaves the region usable (copies are then synchronous). */
void gpu_host_register(struct region *reg);
void gpu_host_unregister(struct region *reg);

/* True when the copy engine must take the GPU path for @req. */
static inline bool gpu_copy_wanted(const struct copy_req *req)
{
	return req->ra->kind == REGION_CUDA || req->rb->kind == REGION_CUDA;
}

/* Starts the copy; it completes (DP_CQE_F_LOCAL | DP_CQE_F_GPU) in this
 * call on an error, else in a later gpu_progress(). */
void gpu_copy_submit(struct poller *p, const struct copy_req *req);
/* Completes the copies whose events have fired; returns how many. */
int gpu_progress(struct poller *p);
bool gpu_busy(const struct poller *p);
/* After the poller stopped: streams, events and free lists. */
void gpu_poller_free(struct poller *p);

/*
 * The file engine's staging (fileio.c): pinned host buffers, and copies
 * between them and a GPU that the engine polls itself. A staging copy goes
 * on a stream of its own per device and poller, behind nothing of the copy
 * engine's.
 */
struct gpu_ticket {
	void *ev; /* the event recorded after the copy */
	int dev;
};

/* Pinned, page-aligned host memory, or NULL (no GPU, or the pin failed). */
void *gpu_pinned_alloc(size_t len);
void gpu_pinned_free(void *mem);
/* Starts a copy of @len bytes between pinned host memory and device @dev.
 * 0, or -EIO (nothing is left in flight then). */
int gpu_stage_copy(struct poller *p, int dev, void *dst, const void *src, size_t len,
		   struct gpu_ticket *t);
/* 1 when the copy is done, 0 while it runs, -EIO when it failed; the
 * ticket is spent after 1 or -EIO. */
int gpu_stage_poll(struct poller *p, struct gpu_ticket *t);

#endif /* DP_GPU_H */
