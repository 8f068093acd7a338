/* SPDX-License-Identifier: MIT */
/* cuda_export.c - GPU memory as a registration message. See cuda_export.h. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "cuda_export.h"

void dp_cuda_reg_close(struct dp_cuda_reg *r)
{
	while (r->nfds)
		close(r->fds[--r->nfds]);
}

#ifndef DP_HAVE_CUDA

int dp_cuda_export(const void *ptr, size_t len, struct dp_cuda_reg *out)
{
	(void)ptr;
	(void)len;
	out->nfds = 0;
	out->why = NULL;
	return -ENOTSUP;
}

#else

#include <pthread.h>
#include <stdbool.h>

#include <cuda.h> /* types of the driver entry points we look up */
#include <cuda_runtime_api.h>

#define MAX_DEVICES 64

/* Why a VMM range cannot be registered, for dp_last_error(). */
#define WHY_UNSHAREABLE                                                                            \
	"memory mapped with cuMemMap whose allocation cannot be shared: create it with "           \
	"CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in requestedHandleTypes (PyTorch expandable "    \
	"segments request it from 2.5 on; TORCH_CUDA_EXPANDABLE_SEGMENTS_IPC=1 where a build "     \
	"turns it off; a fabric-only handle is not taken)"
#define WHY_PIECES "the range spans more than 32 physical allocations mapped side by side"
#define WHY_GAP                                                                                    \
	"the range leaves the memory mapped with cuMemMap (an unmapped hole, or another kind of "  \
	"memory after it)"
#define WHY_DEVICES "the range spans allocations of more than one device"

typedef CUresult (*addr_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);

_Static_assert(sizeof(cudaIpcMemHandle_t) ==
		       sizeof(((struct dp_msg_region_register_cuda *)0)->handle),
	       "the protocol carries a whole cudaIpcMemHandle_t");

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static addr_range_fn addr_range;
/* The driver's virtual memory calls; all NULL when the driver lacks one
 * (VMM ranges then fail -EINVAL as before). */
static struct {
	CUresult (*pointer_attr)(void *data, CUpointer_attribute attr, CUdeviceptr ptr);
	CUresult (*retain)(CUmemGenericAllocationHandle *h, void *addr);
	CUresult (*props)(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h);
	CUresult (*export_fd)(void *shareable, CUmemGenericAllocationHandle h,
			      CUmemAllocationHandleType type, unsigned long long flags);
	CUresult (*release)(CUmemGenericAllocationHandle h);
	bool ok;
} vmm;
static int ndev = -1; /* -1: not probed yet */
static cudaUUID_t uuids[MAX_DEVICES];
static unsigned char have_uuid[MAX_DEVICES];

static void *driver_fn(const char *name)
{
	enum cudaDriverEntryPointQueryResult q;
	void *fn = NULL;

	if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) !=
		    cudaSuccess ||
	    q != cudaDriverEntryPointSuccess)
		fn = NULL;
	return fn;
}

/* Probes once: devices present, and the driver's calls the runtime has no
 * counterpart for: cuMemGetAddressRange (an allocation's bounds) and the
 * virtual memory calls (looking them up through the runtime spares linking
 * libcuda). */
static int probe(void)
{
	int n = 0;

	pthread_mutex_lock(&lock);
	if (ndev < 0) {
		if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0 ||
		    !(addr_range = driver_fn("cuMemGetAddressRange")))
			n = 0;
		if (n) {
			vmm.pointer_attr = driver_fn("cuPointerGetAttribute");
			vmm.retain = driver_fn("cuMemRetainAllocationHandle");
			vmm.props = driver_fn("cuMemGetAllocationPropertiesFromHandle");
			vmm.export_fd = driver_fn("cuMemExportToShareableHandle");
			vmm.release = driver_fn("cuMemRelease");
			vmm.ok = vmm.pointer_attr && vmm.retain && vmm.props && vmm.export_fd &&
				 vmm.release;
		}
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

/* Whether @p lies in memory that cudaIpcGetMemHandle takes (cudaMalloc);
 * a driver that cannot say is taken at its word for cudaMalloc, as before
 * VMM memory was known. */
static bool legacy_ipc(CUdeviceptr p)
{
	int v = 1;

	if (!vmm.ok || vmm.pointer_attr(&v, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p) !=
			       CUDA_SUCCESS)
		return true;
	return v != 0;
}

static int export_ipc(CUdeviceptr p, size_t len, int dev, struct dp_cuda_reg *out)
{
	struct dp_msg_region_register_cuda *msg = &out->msg.ipc;
	cudaIpcMemHandle_t h;
	CUdeviceptr base = 0;
	size_t size = 0;
	uint64_t off;

	if (addr_range(&base, &size, p) != CUDA_SUCCESS)
		return -EINVAL;
	off = (uint64_t)(p - base);
	if (off > size || len > size - off)
		return -EINVAL;
	/* The handle names the whole allocation, wherever ptr points in it. */
	if (cudaIpcGetMemHandle(&h, (void *)(uintptr_t)base) != cudaSuccess) {
		cudaGetLastError();
		return -EINVAL;
	}
	out->type = DP_MSG_REGION_REGISTER_CUDA;
	out->len = sizeof(*msg);
	memcpy(msg->handle, &h, sizeof(h));
	msg->offset = off;
	msg->len = len;
	msg->device = dev;
	return device_uuid(dev, msg->uuid);
}

/* One piece of a VMM range: the physical allocation mapped at @at (the
 * start of its mapping), exported as a POSIX fd. 0 or -EINVAL with
 * out->why (NULL: the call's own text). */
static int export_piece(CUdeviceptr at, bool first, int dev, int *fd, struct dp_cuda_reg *out)
{
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop;
	CUresult cr;

	/* The first: not VMM memory at all (a stream-ordered pool's), which
	 * the call's own text says. */
	if (vmm.retain(&h, (void *)(uintptr_t)at) != CUDA_SUCCESS) {
		out->why = first ? NULL : WHY_GAP;
		return -EINVAL;
	}
	memset(&prop, 0, sizeof(prop));
	cr = vmm.props(&prop, h);
	if (cr == CUDA_SUCCESS &&
	    !(prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
		out->why = WHY_UNSHAREABLE;
		cr = CUDA_ERROR_NOT_SUPPORTED;
	} else if (cr == CUDA_SUCCESS &&
		   (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop.location.id != dev)) {
		out->why = WHY_DEVICES;
		cr = CUDA_ERROR_INVALID_DEVICE;
	} else if (cr == CUDA_SUCCESS) {
		cr = vmm.export_fd(fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	}
	/* The retained reference only; the mapping keeps the memory. */
	vmm.release(h);
	return cr == CUDA_SUCCESS ? 0 : -EINVAL;
}

/*
 * A range mapped with cuMemMap: cuMemGetAddressRange gives the mapping
 * @p lies in; the next piece, if the range goes on, must be mapped right
 * where it ends (expandable segments grow by mapping allocations side by
 * side), and so on to the range's end.
 */
static int export_vmm(CUdeviceptr p, size_t len, int dev, struct dp_cuda_reg *out)
{
	struct dp_msg_region_register_cuda_vmm *m = &out->msg.vmm;
	CUdeviceptr base = 0, at, end = p + len;
	size_t size = 0;
	int rc;

	if (end < p)
		return -EINVAL;
	if (addr_range(&base, &size, p) != CUDA_SUCCESS)
		return -EINVAL;
	out->type = DP_MSG_REGION_REGISTER_CUDA_VMM;
	out->len = sizeof(*m);
	m->offset = (uint64_t)(p - base);
	m->len = len;
	m->device = dev;
	for (at = base; at < end; at += size) {
		CUdeviceptr b = at;
		int fd = -1;

		if (at != base && (addr_range(&b, &size, at) != CUDA_SUCCESS || b != at)) {
			out->why = WHY_GAP;
			goto fail;
		}
		if (m->npieces == DP_CUDA_VMM_MAX_PIECES) {
			out->why = WHY_PIECES;
			goto fail;
		}
		if (export_piece(at, at == base, dev, &fd, out))
			goto fail;
		m->piece[m->npieces].offset = (uint64_t)(at - base);
		m->piece[m->npieces].size = size;
		m->npieces++;
		out->fds[out->nfds++] = fd;
	}
	rc = device_uuid(dev, m->uuid);
	if (rc)
		dp_cuda_reg_close(out);
	return rc;
fail:
	cudaGetLastError();
	dp_cuda_reg_close(out);
	return -EINVAL;
}

int dp_cuda_export(const void *ptr, size_t len, struct dp_cuda_reg *out)
{
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
	struct cudaPointerAttributes a;

	memset(out, 0, sizeof(*out));
	if (!probe())
		return -ENODEV;
	if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess || a.type != cudaMemoryTypeDevice) {
		cudaGetLastError();
		return -EINVAL;
	}
	return legacy_ipc(p) ? export_ipc(p, len, a.device, out)
			     : export_vmm(p, len, a.device, out);
}

#endif /* DP_HAVE_CUDA */
