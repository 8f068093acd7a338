/* SPDX-License-Identifier: MIT */
/* gpu.c - the gpu engine: its kinds of memory (the registration messages)
 * and its one engine table. The operations are gpu_cuda.c's in a CUDA
 * build, gpu_none.c's without (gpu_engine.h). See gpu.h. */
#include "engine.h"
#include "gpu.h"
#include "gpu_engine.h"

/* DP_MSG_REGION_REGISTER_CUDA: GPU memory, by its CUDA IPC handle. */
static int gpu_region_by_ipc(struct region *reg, struct client *c, const void *payload, int *no_fds,
			     unsigned nfds)
{
	int rc = gpu_region_open(reg, payload);

	(void)c;
	(void)no_fds;
	(void)nfds;
	return rc ? rc : (int)DP_ACCESS_RW;
}

/* DP_MSG_REGION_REGISTER_CUDA_VMM: GPU memory mapped with cuMemMap, by its
 * pieces' shareable fds (one per piece: ctlmsg.c saw them come). */
static int gpu_region_by_vmm(struct region *reg, struct client *c, const void *payload, int *fds,
			     unsigned nfds)
{
	int rc;

	(void)c;
	(void)nfds;
	rc = gpu_region_open_vmm(reg, payload, fds);
	return rc ? rc : (int)DP_ACCESS_RW;
}

static const struct engine_region_msg gpu_region_msgs[] = {
	{DP_MSG_REGION_REGISTER_CUDA, "GPU", gpu_region_by_ipc},
	{DP_MSG_REGION_REGISTER_CUDA_VMM, "GPU (VMM)", gpu_region_by_vmm},
	{0},
};

const struct engine gpu_engine = {
	.name = "gpu",
	.init = gpu_init,
	.fini = gpu_fini,
	.submit = gpu_submit,
	.submit_run = gpu_submit_run,
	.progress = gpu_progress,
	.busy = gpu_busy,
	.cancel_all = gpu_drain,
	.poller_free = gpu_poller_free,
	.region_msgs = gpu_region_msgs,
	.region_open = gpu_region_pin,
	.region_close = gpu_region_release,
};
