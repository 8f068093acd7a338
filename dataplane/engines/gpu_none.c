/* SPDX-License-Identifier: MIT */
/* gpu_none.c - the gpu engine without CUDA: no device, GPU registration
 * answers -ENODEV, and the rest says so (gpu_engine.h). */
#include <errno.h>
#include <unistd.h>

#include "engine.h"
#include "gpu.h"
#include "gpu_engine.h"

int gpu_init(void)
{
	log_info("gpu: built without CUDA; GPU registration answers ENODEV");
	return 0;
}

int gpu_device_count(void)
{
	return 0;
}

int gpu_pci_bdf(int dev, char out[TOPO_BDF_LEN])
{
	(void)dev;
	(void)out;
	return -ENODEV;
}

int gpu_region_open(struct region *reg, const struct dp_msg_region_register_cuda *req)
{
	(void)reg;
	(void)req;
	return -ENODEV;
}

int gpu_region_ipc(const struct region *reg, struct dp_msg_region_register_cuda *out)
{
	(void)reg;
	(void)out;
	return -ENOTSUP;
}

int gpu_region_open_vmm(struct region *reg, const struct dp_msg_region_register_cuda_vmm *req,
			int *fds)
{
	(void)reg;
	for (uint32_t i = 0; i < req->npieces; i++)
		close(fds[i]);
	return -ENODEV;
}

int gpu_region_vmm(const struct region *reg, struct dp_msg_region_register_cuda_vmm *out, int *fds)
{
	(void)reg;
	(void)out;
	(void)fds;
	return -ENOTSUP;
}

/* Unreachable: no REGION_CUDA region exists without CUDA. */
void gpu_submit(struct poller *p, const struct xfer *req)
{
	(void)p;
	queue_complete_ns(req->q, req->user_data, req->submit_ns, -ENODEV, 0,
			  DP_CQE_F_LOCAL | DP_CQE_F_GPU);
}

void *gpu_pinned_alloc(size_t len)
{
	(void)len;
	return NULL;
}

void gpu_pinned_free(void *mem)
{
	(void)mem;
}

/* Unreachable: no REGION_CUDA region exists without CUDA. */
int gpu_stage_copy(struct poller *p, int dev, void *dst, const void *src, size_t len,
		   struct gpu_ticket *t)
{
	(void)p;
	(void)dev;
	(void)dst;
	(void)src;
	(void)len;
	(void)t;
	return -EIO;
}

int gpu_stage_poll(struct poller *p, struct gpu_ticket *t)
{
	(void)p;
	(void)t;
	return -EIO;
}

int gpu_progress(struct poller *p)
{
	(void)p;
	return 0;
}

bool gpu_busy(const struct poller *p)
{
	(void)p;
	return false;
}

void gpu_fini(void)
{
}

int gpu_submit_run(struct poller *p, const struct xfer_run *r, const struct dp_desc *d, int n)
{
	(void)p;
	(void)r;
	(void)d;
	(void)n;
	return 0;
}

void gpu_drain(struct poller *p)
{
	(void)p;
}

void gpu_poller_free(struct poller *p)
{
	(void)p;
}

int gpu_region_pin(struct region *reg)
{
	(void)reg;
	return 0;
}

void gpu_region_release(struct region *reg)
{
	(void)reg;
}
