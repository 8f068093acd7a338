/* SPDX-License-Identifier: MIT */
/*
 * cuda_export.h - libclient's CUDA side: describes a range of GPU memory as
 * a REGION_REGISTER_CUDA message. Internal to libclient; the only file of
 * libclient that includes CUDA headers is cuda_export.c.
 */
#ifndef DP_CUDA_EXPORT_H
#define DP_CUDA_EXPORT_H

#include <stddef.h>

#include "dp_proto.h"

/*
 * Fills @msg for bytes [@ptr, @ptr + @len) of a cudaMalloc allocation:
 * the IPC handle of the whole allocation, the offset of @ptr in it, and the
 * device's UUID. 0; -ENOTSUP built without CUDA; -ENODEV no CUDA device or
 * driver; -EINVAL not device memory from cudaMalloc (host, managed, pool or
 * VMM memory), or the range leaves the allocation.
 */
int dp_cuda_export(const void *ptr, size_t len, struct dp_msg_region_register_cuda *msg)
	__attribute__((visibility("hidden")));

#endif /* DP_CUDA_EXPORT_H */
