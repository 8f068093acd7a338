/* SPDX-License-Identifier: MIT */
/* cuda_export.c - GPU memory as a registration message. See cuda_export.h. */
#include <errno.h>
#include <string.h>

#include "cuda_export.h"

#ifndef DP_HAVE_CUDA

int dp_cuda_export(const void *ptr, size_t len, struct dp_msg_region_register_cuda *msg)
{
	(void)ptr;
	(void)len;
	(void)msg;
	return -ENOTSUP;
}

#else

#include <pthread.h>
#include <stdint.h>

#include <cuda.h> /* types of the one driver entry point we look up */
#include <cuda_runtime_api.h>

#define MAX_DEVICES 64

typedef CUresult (*addr_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);

_Static_assert(sizeof(cudaIpcMemHandle_t) ==
		       sizeof(((struct dp_msg_region_register_cuda *)0)->handle),
	       "the protocol carries a whole cudaIpcMemHandle_t");

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static addr_range_fn addr_range;
static int ndev = -1; /* -1: not probed yet */
static cudaUUID_t uuids[MAX_DEVICES];
static unsigned char have_uuid[MAX_DEVICES];

/* Probes once: devices present, and the driver's cuMemGetAddressRange (the
 * runtime has no call for an allocation's bounds; looking it up through the
 * runtime spares linking libcuda). */
static int probe(void)
{
	enum cudaDriverEntryPointQueryResult q;
	int n = 0;

	pthread_mutex_lock(&lock);
	if (ndev < 0) {
		if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0 ||
		    cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", (void **)&addr_range,
						     12000, cudaEnableDefault, &q) != cudaSuccess ||
		    q != cudaDriverEntryPointSuccess || !addr_range)
			n = 0;
		cudaGetLastError();
		ndev = n;
	}
	n = ndev;
	pthread_mutex_unlock(&lock);
	return n;
}

static int device_uuid(int dev, uint8_t out[16])
{
	struct cudaDeviceProp prop;
	int rc = 0;

	if (dev < 0 || dev >= MAX_DEVICES)
		return -ENODEV;
	pthread_mutex_lock(&lock);
	if (!have_uuid[dev]) {
		if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
			uuids[dev] = prop.uuid;
			have_uuid[dev] = 1;
		} else {
			rc = -ENODEV;
		}
	}
	if (!rc)
		memcpy(out, uuids[dev].bytes, 16);
	pthread_mutex_unlock(&lock);
	return rc;
}

int dp_cuda_export(const void *ptr, size_t len, struct dp_msg_region_register_cuda *msg)
{
	struct cudaPointerAttributes a;
	cudaIpcMemHandle_t h;
	CUdeviceptr base = 0;
	size_t size = 0;
	uint64_t off;

	if (!probe())
		return -ENODEV;
	if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess || a.type != cudaMemoryTypeDevice) {
		cudaGetLastError();
		return -EINVAL;
	}
	if (addr_range(&base, &size, (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS)
		return -EINVAL;
	off = (uint64_t)((CUdeviceptr)(uintptr_t)ptr - base);
	if (off > size || len > size - off)
		return -EINVAL;
	/* The handle names the whole allocation, wherever ptr points in it. */
	if (cudaIpcGetMemHandle(&h, (void *)(uintptr_t)base) != cudaSuccess) {
		cudaGetLastError();
		return -EINVAL;
	}
	memset(msg, 0, sizeof(*msg));
	memcpy(msg->handle, &h, sizeof(h));
	msg->offset = off;
	msg->len = len;
	msg->device = a.device;
	return device_uuid(a.device, msg->uuid);
}

#endif /* DP_HAVE_CUDA */
