/* SPDX-License-Identifier: MIT */
/*
 * gpu.h - everything of the service that touches CUDA: device discovery,
 * GPU regions opened from CUDA IPC handles or from the shareable fds of
 * cuMemMap'ed pieces (VMM), pinning of host regions, and the gpu engine
 * (engine.h: gpu_engine).
 *
 * The copy path: any local copy that touches a REGION_CUDA region is one
 * cudaMemcpyAsync(cudaMemcpyDefault) on a non-blocking stream the poller owns
 * for the device doing the copy (the destination's for host->device and
 * device->device, the source's for device->host), followed by a CUDA event
 * from a per-device pool. The poller polls the oldest event of each stream
 * once per loop (a stream completes in order); it never waits. Each poller
 * has three streams per device: copies up to GPU_SMALL_MAX go to a
 * high-priority one, so that a 4 KiB copy never queues behind a 1 GiB one,
 * larger ones to a low-priority one, batches of pages to one between (one
 * kernel launch per batch, seen done through a flag the kernel stores in
 * pinned host memory: gpu_cuda.c, "Batches of pages").
 *
 * Threads: init, gpu_region_open and the engine's region hooks run on the
 * control thread (region_close also on a poller, through the last
 * region_put); submit and progress on the poller that owns the state.
 * Without DP_HAVE_CUDA the engine only says so: no device, GPU registration
 * answers -ENODEV (gpu_none.c, which the Makefile builds instead of
 * gpu_cuda.c; one engine table, gpu.c's).
 */
#ifndef DP_GPU_H
#define DP_GPU_H

#include <stdbool.h>

#include "dp_internal.h"
#include "topo.h"

/* Copies up to this size use the high-priority stream. */
#define GPU_SMALL_MAX (1u << 20)

/* Devices this service can use (0: GPU registration answers -ENODEV). */
int gpu_device_count(void);

/* Device @dev's PCI address as sysfs names it (topo.h): 0, -ENODEV. */
int gpu_pci_bdf(int dev, char out[TOPO_BDF_LEN]);

/* Opens the CUDA IPC handle of @req on the device whose UUID it names and
 * fills @reg (kind, device, map, base, len). 0, -ENODEV (no such device
 * here), -EINVAL (handle unusable, or offset + len beyond the allocation). */
int gpu_region_open(struct region *reg, const struct dp_msg_region_register_cuda *req);
/* The registration a GPU region was opened from (its IPC handle, device
 * UUID, offset and length), for a service of this host that maps it too
 * (samehost.c): 0 or -ENOTSUP. */
int gpu_region_ipc(const struct region *reg, struct dp_msg_region_register_cuda *out);
/* Imports the @req->npieces allocations whose POSIX fds are @fds (taken:
 * kept with the region for gpu_region_vmm, or closed), maps them side by
 * side in a range reserved for them on the device whose UUID @req names,
 * with access for it and its peers, and fills
 * @reg: a REGION_CUDA whose base is the mapping + @req->offset. 0, -ENODEV
 * (no such device here, or a driver without the VMM calls), -EINVAL (the
 * driver refused an fd or a piece's size), -ENOMEM. */
int gpu_region_open_vmm(struct region *reg, const struct dp_msg_region_register_cuda_vmm *req,
			int *fds);
/* A VMM region's description as registered and a fresh POSIX fd per piece
 * in @fds (duplicates of the fds it was registered with), for a service of
 * this host that maps it too: 0, -ENOTSUP (not a VMM region, or one
 * registered past the cap on kept fds) or -EMFILE (no fd is left open
 * then). */
int gpu_region_vmm(const struct region *reg, struct dp_msg_region_register_cuda_vmm *out, int *fds);
/*
 * Staging for the file, stage and vm engines: pinned host buffers, and copies
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
