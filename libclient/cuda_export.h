/* SPDX-License-Identifier: MIT */
/*
 * cuda_export.h - libclient's CUDA side: describes a range of GPU memory as
 * a registration message, REGION_REGISTER_CUDA (cudaMalloc memory, by its
 * CUDA IPC handle) or REGION_REGISTER_CUDA_VMM (memory mapped with cuMemMap,
 * by a shareable fd per physical allocation). Internal to libclient; the
 * only file of libclient that includes CUDA headers is cuda_export.c.
 */
#ifndef DP_CUDA_EXPORT_H
#define DP_CUDA_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "dp_proto.h"

struct dp_cuda_reg {
	uint16_t type; /* DP_MSG_REGION_REGISTER_CUDA or DP_MSG_REGION_REGISTER_CUDA_VMM */
	size_t len;    /* of the message in `msg` */
	union {
		struct dp_msg_region_register_cuda ipc;
		struct dp_msg_region_register_cuda_vmm vmm;
	} msg;
	int fds[DP_CUDA_VMM_MAX_PIECES]; /* VMM: one per piece, in order */
	unsigned nfds;
	const char *why; /* on failure: the reason for dp_last_error(), or NULL */
};

/*
 * Fills @out for bytes [@ptr, @ptr + @len) of GPU memory: a cudaMalloc
 * allocation (the IPC handle of the whole allocation, the offset of @ptr in
 * it, the device's UUID), or a range mapped with cuMemMap, made of up to
 * DP_CUDA_VMM_MAX_PIECES physical allocations side by side (each exported
 * as a POSIX fd: the caller closes them, dp_cuda_reg_close). 0; -ENOTSUP
 * built without CUDA; -ENODEV no CUDA device or driver; -EINVAL not device
 * memory from either (host, managed or pool memory), the range leaves it,
 * or a piece that cannot be shared (@out->why says which).
 */
int dp_cuda_export(const void *ptr, size_t len, struct dp_cuda_reg *out)
	__attribute__((visibility("hidden")));

/* Closes the fds of a filled @r. */
void dp_cuda_reg_close(struct dp_cuda_reg *r) __attribute__((visibility("hidden")));

#endif /* DP_CUDA_EXPORT_H */
