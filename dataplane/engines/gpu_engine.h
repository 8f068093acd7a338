/* SPDX-License-Identifier: MIT */
/*
 * gpu_engine.h - the gpu engine's operations, which its one table in gpu.c
 * names: gpu_cuda.c implements them in a CUDA build, gpu_none.c without
 * CUDA (no device: GPU registration answers -ENODEV, and no REGION_CUDA
 * region exists, so the data path is never reached). The Makefile builds
 * one of the two. Internal to the engine.
 */
#ifndef DP_GPU_ENGINE_H
#define DP_GPU_ENGINE_H

#include <stdbool.h>

#include "engine.h"

int gpu_init(void);
void gpu_fini(void);
void gpu_submit(struct poller *p, const struct xfer *req);
int gpu_submit_run(struct poller *p, const struct xfer_run *r, const struct dp_desc *d, int n);
int gpu_progress(struct poller *p);
bool gpu_busy(const struct poller *p);
void gpu_drain(struct poller *p);
void gpu_poller_free(struct poller *p);
int gpu_region_pin(struct region *reg);
void gpu_region_release(struct region *reg);

#endif /* DP_GPU_ENGINE_H */
