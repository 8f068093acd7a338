/* SPDX-License-Identifier: MIT */
/* gpu_cuda.c - the gpu engine in a CUDA build: devices, GPU regions (IPC
 * handles, VMM pieces, pinned host windows), the copy path (lanes, the
 * pages lane's batches), staging for the file engine. See gpu.h and
 * gpu_engine.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "notif.h"
#include "fault.h"
#include "gpu.h"
#include "gpu_engine.h"
#include "oplist.h"

#include <stdatomic.h>
#include <sys/resource.h>

#include <cuda.h> /* types of the driver entry points we look up */
#include <cuda_runtime_api.h>

#include "clock.h"
#include "gpu_pages.h"
#include "xfer_op.h"

#define GPU_MAX_DEVICES 16
enum { LANE_BULK, LANE_SMALL, GPU_LANES };

_Static_assert(sizeof(cudaIpcMemHandle_t) ==
		       sizeof(((struct dp_msg_region_register_cuda *)0)->handle),
	       "the protocol carries a whole cudaIpcMemHandle_t");

/*
 * Batches of pages (docs/gpu.md "Batched pages"): GPU -> GPU copies of one
 * device up to GPU_SMALL_MAX from a queue with other descriptors in flight
 * become entries of the pages lane's batches instead of one
 * cudaMemcpyAsync each. A batch is a page table in pinned, mapped host
 * memory (what the kernel reads) beside what each page's completion needs.
 * Runs of plain descriptors of one (opcode, region, segment) come straight
 * from the poller's drain (gpu_submit_run): resolved once, their region
 * references taken once per run, about ten stores a page. A batch is one
 * launch of the page kernel (gpu_pages.cu), whose last block stores the
 * batch's sequence number into a flag in pinned host memory: the poller
 * sees a batch done with a load, not a CUDA call (cudaEventQuery cost the
 * poller microseconds a loop on the H100 host). A launch costs the poller
 * about 6 us there, so batches are made large: gpu_progress launches the
 * filling batch when the lane is idle, when it is full, or when it holds
 * GPU_BATCH_GO pages (or bytes) and fewer than GPU_BATCH_INFLIGHT run;
 * while the GPU copies one batch, the next one grows. A batch seen done
 * completes its pages in order. A queue's only copy in flight is no batch:
 * it goes at once on the small lane (P10), whose stream has the higher
 * priority, so it does not wait behind another queue's pages.
 */
#define GPU_BATCH_MAX 1024u
#define GPU_BATCH_BYTES (16ull << 20)
#define GPU_BATCH_INFLIGHT 2u
#define GPU_BATCH_GO 128u
#define GPU_BATCH_GO_BYTES (2ull << 20)
/* A batch not seen done this long after its launch makes the poller ask
 * the stream (at most this often): a kernel that faulted stores no flag. */
#define GPU_BATCH_OVERDUE_NS 1000000ull
/* Batches per lane, a ring: up to 32768 pages in flight per device and
 * poller; past that, pages go out one cudaMemcpyAsync each. */
#define GPU_BATCH_SLOTS 32u

/* A copy on its way: the event recorded after it on its lane's stream. */
struct gpu_op {
	struct op_node node; /* first: its lane's list, or the free ops */
	/* The descriptor and its references, held until the event fires;
	 * o.flags: DP_CQE_F_GPU and the path's (struct xfer). */
	struct xfer_op o;
	cudaEvent_t ev;
	int dev;
	uint8_t lane;
};

/* One stream and the copies on it, oldest first (= completion order). */
struct gpu_lane {
	cudaStream_t stream; /* created on first use, recreated after an error */
	struct op_fifo ops;  /* on the stream */
};

/* What a page's completion needs. A page with a notification ends through
 * an op of its own (xfer_op_finish: the owner hears first), which holds
 * its references; the others' references are the batch's refs. */
struct page_done {
	struct queue *q;
	uint64_t user_data, submit_ns;
	uint32_t flags;
	struct gpu_op *op;
};

/* References a batch holds: n on each of ra and rb, for a run of pages. */
struct page_refs {
	struct region *ra, *rb;
	unsigned n;
};

/* One launch of the page kernel: entry i of tab is page i, done[i] its
 * completion. The buffers are made at the slot's first use and kept. */
struct page_batch {
	struct gpu_page *tab; /* pinned, mapped, portable */
	struct page_done *done;
	struct page_refs *refs;
	unsigned n, nrefs;
	uint64_t bytes;
	uint32_t seq; /* launched: what the kernel stores into its flag; 0: ended */
	uint64_t launched_ns;
};

/*
 * The pages lane: a ring of batches, counters running free. [head, next)
 * are launched, oldest first (one stream: they end in that order);
 * [next, fill) are full and wait for their launch; fill is being filled
 * (maybe empty). fill - head < GPU_BATCH_SLOTS.
 */
struct page_lane {
	cudaStream_t stream; /* created on first use, recreated after an error */
	struct page_batch b[GPU_BATCH_SLOTS];
	unsigned head, next, fill;
	/* Slot i's done flag (pinned, mapped) and block count (device
	 * memory), made at the first launch; the last sequence number. */
	volatile uint32_t *flag;
	unsigned *count;
	uint32_t seq;
	uint64_t asked_ns; /* the stream last asked about an overdue batch */
	bool recount;	   /* the counts to zero again on the next stream */
	/* The account, logged when the poller stops: launches, pages in
	 * them, the poller's time launching, and launch to seen done. */
	uint64_t launches, launched, launch_ns, wait_ns;
};

struct gpu_dev {
	struct gpu_lane lane[GPU_LANES];
	struct page_lane pages;
	cudaStream_t stage; /* the file engine's staging copies */
	cudaEvent_t *pool;  /* idle events of this device */
	unsigned npool, cap;
};

/* A copy waiting for the pinner to pin its host windows (pins_ready): the
 * routed descriptor, its private copies, and references that keep its
 * regions (and, with a notification, its segment) until it is issued. */
struct gpu_wait {
	struct op_node node; /* first: its poller's waiting list */
	struct xfer x;
	struct dp_desc d;
	struct notif_req notify;
	struct region *host;
	const uint8_t *hp;
};

/* A poller's GPU state (poller->gpu), created at its first GPU copy. */
struct gpu_poller {
	struct gpu_dev dev[GPU_MAX_DEVICES];
	struct op_pool free_ops;
	unsigned pending;    /* on streams, and waiting */
	struct op_fifo wait; /* oldest first */
};

typedef CUresult (*addr_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);

/* The driver's virtual memory calls, looked up like cuMemGetAddressRange
 * (no -lcuda: a build with CUDA runs where there is no driver). */
static struct {
	CUresult (*import)(CUmemGenericAllocationHandle *h, void *os_handle,
			   CUmemAllocationHandleType type);
	CUresult (*reserve)(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
			    unsigned long long flags);
	CUresult (*addr_free)(CUdeviceptr ptr, size_t size);
	CUresult (*map)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
			unsigned long long flags);
	CUresult (*unmap)(CUdeviceptr ptr, size_t size);
	CUresult (*set_access)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
			       size_t count);
	CUresult (*release)(CUmemGenericAllocationHandle h);
	CUresult (*err_name)(CUresult err, const char **s);
	bool ok; /* all found */
} vmm;

/* A GPU region's own state (eng[ENGINE_gpu] of a REGION_CUDA): how it was
 * opened, kept for services of this host that map it too (samehost.c). */
struct gpu_mem {
	bool vmm;
	struct dp_msg_region_register_cuda ipc;			/* IPC: as registered */
	struct dp_msg_region_register_cuda_vmm desc;		/* VMM: as registered */
	CUmemGenericAllocationHandle h[DP_CUDA_VMM_MAX_PIECES]; /* VMM: imported */
	/* VMM: the pieces' fds as received, kept for services of this host
	 * that map the region too (gpu_region_vmm): the driver does not
	 * export a handle it imported (CUDA_ERROR_INVALID_VALUE, driver 13.0).
	 * None kept (kept false) past the service-wide cap: the region then
	 * has no same-host path, its peers take the fabric. */
	int fd[DP_CUDA_VMM_MAX_PIECES];
	bool kept;
};

static int ndev;
static cudaUUID_t uuids[GPU_MAX_DEVICES];
/* peer[i][j]: device i reaches device j's memory directly (peer access
 * enabled at start); a copy between devices without it either way is
 * staged through host memory by the driver (DP_CQE_F_GPU_STAGED). */
static bool peer[GPU_MAX_DEVICES][GPU_MAX_DEVICES];
static void pinner_start(void);
static void vmm_lookup(void);
/* Stream priorities: lone small copies, batches of pages, bulk copies. */
static int prio_small, prio_pages, prio_bulk;
/* VMM fds kept for same-host peers (gpu_mem.fd), service-wide, and the
 * most kept: a quarter of the fd limit, at most VMM_KEPT_MAX. */
#define VMM_KEPT_MAX 16384
static atomic_uint vmm_kept;
static atomic_bool vmm_kept_warned;
static unsigned vmm_kept_cap;
static addr_range_fn addr_range;

int gpu_device_count(void)
{
	return ndev;
}

int gpu_pci_bdf(int dev, char out[TOPO_BDF_LEN])
{
	char id[32];

	if (dev < 0 || dev >= ndev || cudaDeviceGetPCIBusId(id, sizeof(id), dev) != cudaSuccess)
		return -ENODEV;
	return topo_bdf_norm(id, out) ? -ENODEV : 0;
}

int gpu_init(void)
{
	enum cudaDriverEntryPointQueryResult q;
	cudaError_t err;
	int n = 0;

	err = cudaGetDeviceCount(&n);
	if (err != cudaSuccess || n <= 0) {
		log_info("gpu: no CUDA device (%s); GPU registration answers ENODEV",
			 err != cudaSuccess ? cudaGetErrorString(err) : "count is 0");
		return 0;
	}
	/* The allocation of an IPC pointer bounds what a client may name; the
	 * runtime has no call for it, the driver's is looked up (no -lcuda). */
	err = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", (void **)&addr_range, 12000,
					       cudaEnableDefault, &q);
	if (err != cudaSuccess || q != cudaDriverEntryPointSuccess || !addr_range) {
		log_err("gpu: driver has no cuMemGetAddressRange; GPU registration disabled");
		return 0;
	}
	vmm_lookup();
	if (n > GPU_MAX_DEVICES) {
		log_warn("gpu: %d devices, using the first %d", n, GPU_MAX_DEVICES);
		n = GPU_MAX_DEVICES;
	}
	for (int i = 0; i < n; i++) {
		struct cudaDeviceProp prop;

		if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
			log_err("gpu: device %d: cannot read its properties; GPU registration "
				"disabled",
				i);
			return 0;
		}
		uuids[i] = prop.uuid;
		log_info("gpu: device %d: %s, %zu MiB, pci %04x:%02x:%02x", i, prop.name,
			 prop.totalGlobalMem >> 20, prop.pciDomainID, prop.pciBusID,
			 prop.pciDeviceID);
	}
	cudaDeviceGetStreamPriorityRange(&prio_bulk, &prio_small);
	prio_pages = (prio_small + prio_bulk) / 2;
	{
		struct rlimit rl;

		vmm_kept_cap = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur / 4 < VMM_KEPT_MAX
				       ? (unsigned)(rl.rlim_cur / 4)
				       : VMM_KEPT_MAX;
	}
	/* Direct copies between GPUs instead of staging through the host. */
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			int can = 0;

			if (i == j || cudaDeviceCanAccessPeer(&can, i, j) != cudaSuccess || !can)
				continue;
			cudaSetDevice(i);
			err = cudaDeviceEnablePeerAccess(j, 0);
			if (err != cudaSuccess && err != cudaErrorPeerAccessAlreadyEnabled)
				log_warn("gpu: peer access %d -> %d: %s; copies between them are "
					 "staged through host memory",
					 i, j, cudaGetErrorString(err));
			else
				log_info("gpu: peer access %d -> %d", i, j);
			peer[i][j] = err == cudaSuccess || err == cudaErrorPeerAccessAlreadyEnabled;
		}
	if (n > 1)
		cudaSetDevice(0);
	cudaGetLastError();
	ndev = n;
	pinner_start();
	return 0;
}

/* Makes @dev current; returns the device to restore. */
static int dev_enter(int dev)
{
	int prev = -1;

	if (cudaGetDevice(&prev) != cudaSuccess || prev != dev)
		cudaSetDevice(dev);
	return prev;
}

static void dev_leave(int prev, int dev)
{
	if (prev >= 0 && prev != dev)
		cudaSetDevice(prev);
}

static int device_by_uuid(const uint8_t *uuid)
{
	for (int i = 0; i < ndev; i++)
		if (!memcmp(uuids[i].bytes, uuid, sizeof(uuids[i].bytes)))
			return i;
	return -1;
}

static void *driver_fn(const char *name)
{
	enum cudaDriverEntryPointQueryResult q;
	void *fn = NULL;

	if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) !=
		    cudaSuccess ||
	    q != cudaDriverEntryPointSuccess)
		fn = NULL;
	cudaGetLastError();
	return fn;
}

static void vmm_lookup(void)
{
	vmm.import = driver_fn("cuMemImportFromShareableHandle");
	vmm.reserve = driver_fn("cuMemAddressReserve");
	vmm.addr_free = driver_fn("cuMemAddressFree");
	vmm.map = driver_fn("cuMemMap");
	vmm.unmap = driver_fn("cuMemUnmap");
	vmm.set_access = driver_fn("cuMemSetAccess");
	vmm.release = driver_fn("cuMemRelease");
	vmm.err_name = driver_fn("cuGetErrorName");
	vmm.ok = vmm.import && vmm.reserve && vmm.addr_free && vmm.map && vmm.unmap &&
		 vmm.set_access && vmm.release;
	if (!vmm.ok)
		log_warn("gpu: the driver lacks the virtual memory calls; VMM GPU registration "
			 "answers ENODEV");
}

static const char *cu_err(CUresult r)
{
	const char *s = NULL;

	if (!vmm.err_name || vmm.err_name(r, &s) != CUDA_SUCCESS || !s)
		return "CUDA driver error";
	return s;
}

/* The driver's calls need the device's primary context current: the
 * runtime makes it so (and creates it) in cudaSetDevice. Returns the
 * device to restore with dev_leave. */
static int ctx_enter(int dev)
{
	int prev = -1;

	if (cudaGetDevice(&prev) != cudaSuccess)
		prev = -1;
	cudaSetDevice(dev);
	return prev;
}

/* Access for @dev, and for every device that can reach it as a peer
 * (copies between GPUs run on the destination's streams; cuMemMap'ed
 * memory does not follow cudaDeviceEnablePeerAccess). */
static CUresult vmm_set_access(int dev, CUdeviceptr va, size_t len)
{
	CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
			     .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUresult cr = vmm.set_access(va, len, &a, 1);

	for (int i = 0; cr == CUDA_SUCCESS && i < ndev; i++) {
		int can = 0;
		CUresult pr;

		if (i == dev || cudaDeviceCanAccessPeer(&can, i, dev) != cudaSuccess || !can)
			continue;
		a.location.id = i;
		pr = vmm.set_access(va, len, &a, 1);
		if (pr != CUDA_SUCCESS)
			log_warn("gpu: VMM region of device %d: no access for peer %d: %s", dev, i,
				 cu_err(pr));
	}
	cudaGetLastError();
	return cr;
}

/* Unmaps the first @mapped pieces of @m at @va, frees the range (when
 * reserved) and releases the first @imported handles. */
static void vmm_undo(struct gpu_mem *m, CUdeviceptr va, unsigned mapped, unsigned imported)
{
	const struct dp_msg_region_register_cuda_vmm *d = &m->desc;
	const struct dp_cuda_vmm_piece *last = &d->piece[d->npieces - 1];

	for (unsigned i = 0; i < mapped; i++)
		vmm.unmap(va + d->piece[i].offset, d->piece[i].size);
	if (va)
		vmm.addr_free(va, last->offset + last->size);
	for (unsigned i = 0; i < imported; i++)
		vmm.release(m->h[i]);
}

int gpu_region_open_vmm(struct region *reg, const struct dp_msg_region_register_cuda_vmm *req,
			int *fds)
{
	const struct dp_cuda_vmm_piece *last = &req->piece[req->npieces - 1];
	const size_t total = last->offset + last->size;
	unsigned imported = 0, mapped = 0;
	const char *what = NULL;
	CUresult cr = CUDA_SUCCESS;
	CUdeviceptr va = 0;
	struct gpu_mem *m;
	int dev, prev, rc = 0;

	dev = ndev && vmm.ok ? device_by_uuid(req->uuid) : -1;
	if (dev < 0) {
		if (ndev && vmm.ok)
			log_warn("gpu: VMM registration names a device this service does not see "
				 "(client's ordinal %d)",
				 req->device);
		rc = -ENODEV;
		goto out_fds;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		rc = -ENOMEM;
		goto out_fds;
	}
	m->vmm = true;
	m->desc = *req;
	prev = ctx_enter(dev);
	/* The driver checks each fd and, at cuMemMap, that the client's size
	 * of a piece lies within its allocation: nothing the client says is
	 * mapped beyond what it shared. */
	for (; imported < req->npieces; imported++) {
		cr = vmm.import(&m->h[imported], (void *)(uintptr_t)fds[imported],
				CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		if (cr != CUDA_SUCCESS) {
			what = "cuMemImportFromShareableHandle";
			goto undo;
		}
	}
	cr = vmm.reserve(&va, total, 0, 0, 0);
	if (cr != CUDA_SUCCESS) {
		va = 0;
		what = "cuMemAddressReserve";
		goto undo;
	}
	for (; mapped < req->npieces; mapped++) {
		cr = vmm.map(va + req->piece[mapped].offset, req->piece[mapped].size, 0,
			     m->h[mapped], 0);
		if (cr != CUDA_SUCCESS) {
			what = "cuMemMap";
			goto undo;
		}
	}
	cr = vmm_set_access(dev, va, total);
	if (cr != CUDA_SUCCESS) {
		what = "cuMemSetAccess";
		goto undo;
	}
	dev_leave(prev, dev);
	reg->eng[ENGINE_gpu] = m;
	reg->kind = REGION_CUDA;
	reg->device = dev;
	reg->fd = -1;
	reg->map = (void *)(uintptr_t)va;
	reg->map_len = total;
	reg->base = (uint8_t *)reg->map + req->offset;
	reg->len = req->len;
	if (atomic_fetch_add(&vmm_kept, req->npieces) + req->npieces <= vmm_kept_cap) {
		m->kept = true;
		for (uint32_t i = 0; i < req->npieces; i++)
			m->fd[i] = fds[i];
		log_debug("gpu: mapped %u VMM pieces, %zu bytes, on device %d", req->npieces, total,
			  dev);
		return 0;
	}
	atomic_fetch_sub(&vmm_kept, req->npieces);
	if (!atomic_exchange(&vmm_kept_warned, true))
		log_warn("gpu: %u VMM fds kept for same-host peers already (a quarter of the fd "
			 "limit, at most %u): VMM regions registered now reach services of this "
			 "host over the fabric",
			 vmm_kept_cap, VMM_KEPT_MAX);
	goto out_fds;
undo:
	log_warn("gpu: VMM registration of %u pieces (%zu bytes) on device %d: %s (%u pieces "
		 "imported, %u mapped): %s",
		 req->npieces, total, dev, what, imported, mapped, cu_err(cr));
	vmm_undo(m, va, mapped, imported);
	dev_leave(prev, dev);
	free(m);
	rc = cr == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EINVAL;
out_fds:
	for (uint32_t i = 0; i < req->npieces; i++)
		close(fds[i]);
	return rc;
}

int gpu_region_vmm(const struct region *reg, struct dp_msg_region_register_cuda_vmm *out, int *fds)
{
	const struct gpu_mem *m = reg->kind == REGION_CUDA ? reg->eng[ENGINE_gpu] : NULL;
	unsigned n = 0;

	if (!m || !m->vmm || !m->kept)
		return -ENOTSUP;
	for (; n < m->desc.npieces; n++)
		if ((fds[n] = fcntl(m->fd[n], F_DUPFD_CLOEXEC, 0)) < 0)
			break;
	if (n < m->desc.npieces) {
		log_warn("gpu: a VMM region's piece %u for another service: %s", n,
			 strerror(errno));
		while (n)
			close(fds[--n]);
		return -EMFILE;
	}
	*out = m->desc;
	return 0;
}

int gpu_region_open(struct region *reg, const struct dp_msg_region_register_cuda *req)
{
	struct gpu_mem *m;
	cudaIpcMemHandle_t h;
	CUdeviceptr base = 0;
	size_t size = 0;
	cudaError_t err;
	void *ptr = NULL;
	int dev, prev, rc = 0;

	if (!ndev)
		return -ENODEV;
	dev = device_by_uuid(req->uuid);
	if (dev < 0) {
		log_warn("gpu: registration names a device this service does not see "
			 "(client's ordinal %d)",
			 req->device);
		return -ENODEV;
	}
	memcpy(&h, req->handle, sizeof(h));
	prev = dev_enter(dev);
	err = cudaIpcOpenMemHandle(&ptr, h, cudaIpcMemLazyEnablePeerAccess);
	if (err != cudaSuccess) {
		log_warn("gpu: cudaIpcOpenMemHandle on device %d: %s", dev,
			 cudaGetErrorString(err));
		cudaGetLastError();
		rc = -EINVAL;
		goto out;
	}
	/* The client's word on the allocation's size is not trusted: a copy
	 * past its end would fault the whole context. */
	if (addr_range(&base, &size, (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS ||
	    base != (CUdeviceptr)(uintptr_t)ptr || req->offset > size ||
	    req->len > size - req->offset) {
		log_warn("gpu: registration of %llu bytes at offset %llu exceeds the allocation "
			 "(%zu)",
			 (unsigned long long)req->len, (unsigned long long)req->offset, size);
		cudaIpcCloseMemHandle(ptr);
		rc = -EINVAL;
		goto out;
	}
	/* Kept for services of this host that map it too (samehost.c). */
	m = calloc(1, sizeof(*m));
	if (!m) {
		cudaIpcCloseMemHandle(ptr);
		rc = -ENOMEM;
		goto out;
	}
	m->ipc = *req;
	reg->eng[ENGINE_gpu] = m;
	reg->kind = REGION_CUDA;
	reg->device = dev;
	reg->fd = -1;
	reg->map = ptr;
	reg->map_len = size;
	reg->base = (uint8_t *)ptr + req->offset;
	reg->len = req->len;
out:
	dev_leave(prev, dev);
	return rc;
}

int gpu_region_ipc(const struct region *reg, struct dp_msg_region_register_cuda *out)
{
	const struct gpu_mem *m = reg->kind == REGION_CUDA ? reg->eng[ENGINE_gpu] : NULL;

	if (!m || m->vmm)
		return -ENOTSUP;
	*out = m->ipc;
	return 0;
}

/* A VMM region's pieces unmapped, its range freed, its handles released
 * (the memory goes back to the device once its owner released it too). */
static void gpu_vmm_close(struct region *reg, struct gpu_mem *m)
{
	int prev = ctx_enter(reg->device);

	vmm_undo(m, (CUdeviceptr)(uintptr_t)reg->map, m->desc.npieces, m->desc.npieces);
	if (m->kept) {
		for (uint32_t i = 0; i < m->desc.npieces; i++)
			close(m->fd[i]);
		atomic_fetch_sub(&vmm_kept, m->desc.npieces);
	}
	log_debug("gpu: unmapped the %u VMM pieces of %zu bytes on device %d", m->desc.npieces,
		  reg->map_len, reg->device);
	dev_leave(prev, reg->device);
}

static void gpu_ipc_close(struct region *reg)
{
	int prev = dev_enter(reg->device);
	cudaError_t err = cudaIpcCloseMemHandle(reg->map);

	if (err != cudaSuccess)
		log_warn("gpu: cudaIpcCloseMemHandle on device %d: %s", reg->device,
			 cudaGetErrorString(err));
	else
		log_debug("gpu: closed the IPC mapping of %zu bytes on device %d", reg->map_len,
			  reg->device);
	dev_leave(prev, reg->device);
}

/*
 * Host memory that GPU copies touch is pinned (cudaHostRegister) so that
 * cudaMemcpyAsync runs asynchronously, but only where copies touch it, a
 * 64 MiB window at a time, and never on the control thread or a poller:
 * pinning 4 GiB at registration took seconds during which every client's
 * control calls waited. A GPU copy that meets a window not yet
 * pinned queues it for the pinner thread and runs pageable meanwhile;
 * copies are split at window boundaries so that CUDA never sees a range
 * that is half registered. At most PIN_MAX_FRACTION of the machine's
 * memory is pinned this way; beyond it, windows stay pageable.
 */
/* 64 MiB: a copy is one cudaMemcpyAsync per window it touches, and 64
 * calls for a 1 GiB copy (16 MiB windows) held the poller ~160 us, which a
 * bystander's 4 KiB copy waited out (gpu_fairness on the H200). */
#define PIN_WIN_SHIFT 26
#define PIN_WIN ((size_t)1 << PIN_WIN_SHIFT)
#define PIN_MAX_FRACTION 4 /* a quarter of physical memory */
enum { PIN_NONE, PIN_QUEUED, PIN_DONE, PIN_REFUSED };

struct gpu_pins {
	size_t nwin;
	_Atomic uint8_t st[]; /* per window */
};

struct pin_req {
	struct op_node node; /* first: the pinner's requests */
	struct region *reg;  /* a reference, dropped once pinned */
	size_t win;
};

static struct {
	pthread_t thread;
	bool running, stop;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct op_fifo reqs;
	uint64_t pinned, max; /* bytes */
} pinner = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static size_t win_len(const struct region *reg, size_t w)
{
	size_t off = w << PIN_WIN_SHIFT;

	return reg->map_len - off < PIN_WIN ? reg->map_len - off : PIN_WIN;
}

static void *pinner_main(void *arg)
{
	(void)arg;
	cudaSetDevice(0);
	pthread_mutex_lock(&pinner.lock);
	for (;;) {
		struct pin_req *q;
		struct gpu_pins *pins;
		size_t len;
		cudaError_t err = cudaSuccess;
		bool over;

		while (op_fifo_empty(&pinner.reqs) && !pinner.stop)
			pthread_cond_wait(&pinner.cond, &pinner.lock);
		q = (struct pin_req *)op_fifo_pop(&pinner.reqs);
		if (!q)
			break;
		pins = q->reg->eng[ENGINE_gpu];
		len = win_len(q->reg, q->win);
		over = pinner.stop || pinner.pinned + len > pinner.max;
		if (!over)
			pinner.pinned += len;
		pthread_mutex_unlock(&pinner.lock);
		if (!over)
			err = cudaHostRegister((uint8_t *)q->reg->map + (q->win << PIN_WIN_SHIFT),
					       len, cudaHostRegisterPortable);
		if (!over && err != cudaSuccess) {
			log_warn(
				"gpu: cudaHostRegister of a %zu-byte window: %s; copies through it "
				"stay pageable",
				len, cudaGetErrorString(err));
			cudaGetLastError();
		}
		atomic_store_explicit(&pins->st[q->win],
				      !over && err == cudaSuccess ? PIN_DONE : PIN_REFUSED,
				      memory_order_release);
		pthread_mutex_lock(&pinner.lock);
		if (!over && err != cudaSuccess)
			pinner.pinned -= len;
		pthread_mutex_unlock(&pinner.lock);
		/* May be the last reference: the region is then released
		 * here, its windows unregistered (gpu_region_release). */
		region_put(q->reg);
		free(q);
		pthread_mutex_lock(&pinner.lock);
	}
	pthread_mutex_unlock(&pinner.lock);
	return NULL;
}

static void pinner_start(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

	pinner.max = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / PIN_MAX_FRACTION
					  : (uint64_t)1 << 32;
	if (pthread_create(&pinner.thread, NULL, pinner_main, NULL)) {
		log_warn("gpu: no pinner thread; copies with host memory stay pageable");
		return;
	}
	pinner.running = true;
}

static void pinner_stop(void)
{
	if (!pinner.running)
		return;
	pthread_mutex_lock(&pinner.lock);
	pinner.stop = true;
	pthread_cond_signal(&pinner.cond);
	pthread_mutex_unlock(&pinner.lock);
	pthread_join(pinner.thread, NULL);
	pinner.running = false;
}

void gpu_fini(void)
{
	pinner_stop();
}

/* Poller: the windows of host region @reg that [p, p + len) touches are
 * pinned, or queued for the pinner now (false). */
static bool pins_ready(struct region *reg, const uint8_t *p, size_t len)
{
	struct gpu_pins *pins = reg->eng[ENGINE_gpu];
	size_t w0, w1;
	bool ready = true;

	if (!pins || !len || !pinner.running)
		return true;
	w0 = (size_t)(p - (const uint8_t *)reg->map) >> PIN_WIN_SHIFT;
	w1 = (size_t)(p + len - 1 - (const uint8_t *)reg->map) >> PIN_WIN_SHIFT;
	for (size_t w = w0; w <= w1 && w < pins->nwin; w++) {
		uint8_t st = atomic_load_explicit(&pins->st[w], memory_order_acquire);
		struct pin_req *q;

		if (st == PIN_DONE || st == PIN_REFUSED)
			continue;
		ready = false;
		if (st != PIN_NONE || !pinner.running ||
		    !atomic_compare_exchange_strong(&pins->st[w], &st, PIN_QUEUED))
			continue;
		q = malloc(sizeof(*q));
		if (!q) {
			atomic_store(&pins->st[w], PIN_NONE);
			continue;
		}
		atomic_fetch_add(&reg->refs, 1);
		*q = (struct pin_req){.reg = reg, .win = w};
		pthread_mutex_lock(&pinner.lock);
		op_fifo_push(&pinner.reqs, &q->node);
		pthread_cond_signal(&pinner.cond);
		pthread_mutex_unlock(&pinner.lock);
	}
	return ready;
}

/* Control thread: host regions get their (empty) window table; nothing is
 * pinned until a GPU copy touches it. */
int gpu_region_pin(struct region *reg)
{
	size_t nwin;
	struct gpu_pins *pins;

	if (!ndev || reg->kind != REGION_HOST || !reg->map_len)
		return 0;
	nwin = (reg->map_len + PIN_WIN - 1) >> PIN_WIN_SHIFT;
	pins = calloc(1, sizeof(*pins) + nwin);
	if (!pins)
		return 0; /* pageable copies */
	pins->nwin = nwin;
	reg->eng[ENGINE_gpu] = pins;
	return 0;
}

/* Host regions: the windows that were pinned, unpinned (no copy and no
 * queued pin is left: each holds a reference). GPU regions: the IPC
 * mapping, or the VMM pieces' mapping, which is the region itself, closed
 * after the fabric dropped its registration. */
void gpu_region_release(struct region *reg)
{
	struct gpu_pins *pins = reg->eng[ENGINE_gpu];

	if (reg->kind == REGION_CUDA) {
		struct gpu_mem *m = reg->eng[ENGINE_gpu];

		if (m && m->vmm)
			gpu_vmm_close(reg, m);
		else
			gpu_ipc_close(reg);
		free(m);
		reg->eng[ENGINE_gpu] = NULL;
		return;
	}
	if (!pins)
		return;
	for (size_t w = 0; w < pins->nwin; w++)
		if (atomic_load(&pins->st[w]) == PIN_DONE) {
			cudaHostUnregister((uint8_t *)reg->map + (w << PIN_WIN_SHIFT));
			pthread_mutex_lock(&pinner.lock);
			pinner.pinned -= win_len(reg, w);
			pthread_mutex_unlock(&pinner.lock);
		}
	free(pins);
	reg->eng[ENGINE_gpu] = NULL;
}

/* cudaMemcpyAsync, split at the pin windows of the host side (region
 * @host, where the copy's host bytes start at @h; NULL when both sides are
 * GPU memory) so that no piece is half registered. */
static cudaError_t copy_split(void *dst, const void *src, size_t len, const struct region *host,
			      const uint8_t *h, cudaStream_t s)
{
	size_t done = 0;

	if (!host || !host->eng[ENGINE_gpu])
		return cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, s);
	while (done < len) {
		size_t off = (size_t)(h + done - (const uint8_t *)host->map);
		size_t n = PIN_WIN - (off & (PIN_WIN - 1));
		cudaError_t err;

		if (n > len - done)
			n = len - done;
		err = cudaMemcpyAsync((uint8_t *)dst + done, (const uint8_t *)src + done, n,
				      cudaMemcpyDefault, s);
		if (err != cudaSuccess)
			return err;
		done += n;
	}
	return cudaSuccess;
}

/* ---- the copy path (one poller) ---- */

static struct gpu_poller *gpu_poller_get(struct poller *p)
{
	if (!p->eng[ENGINE_gpu])
		p->eng[ENGINE_gpu] = calloc(1, sizeof(struct gpu_poller));
	return p->eng[ENGINE_gpu];
}

static cudaEvent_t event_get(struct gpu_dev *d)
{
	cudaEvent_t ev;

	if (d->npool)
		return d->pool[--d->npool];
	if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess)
		return NULL;
	return ev;
}

static void event_put(struct gpu_dev *d, cudaEvent_t ev)
{
	if (d->npool == d->cap) {
		unsigned cap = d->cap ? 2 * d->cap : 64;
		cudaEvent_t *pool = realloc(d->pool, cap * sizeof(*pool));

		if (!pool) {
			cudaEventDestroy(ev);
			return;
		}
		d->pool = pool;
		d->cap = cap;
	}
	d->pool[d->npool++] = ev;
}

/* Drops a stream that saw an error. cudaStreamDestroy returns at once and
 * frees the stream when its work is done; the events already recorded on
 * it stay valid, so the copies behind the failed one still complete. The
 * next copy on the lane gets a fresh stream. */
static void lane_reset(struct gpu_lane *l)
{
	if (l->stream)
		cudaStreamDestroy(l->stream);
	l->stream = NULL;
	cudaGetLastError();
}

/* The event fired: the bytes are in place for any stream and for the host.
 * A lone copy's op owns its event. */
static void op_finish(struct poller *p, struct gpu_poller *g, struct gpu_op *op, int status)
{
	xfer_op_finish(p, &op->o, status);
	if (op->ev)
		event_put(&g->dev[op->dev], op->ev);
	op_pool_put(&g->free_ops, &op->node);
	g->pending--;
}

/* Fills @op for @req, takes its references (xfer_op_keep: kept until the
 * op finishes) and counts it in flight. */
static void op_init(struct gpu_op *op, const struct xfer *req, int dev, uint32_t flags)
{
	*op = (struct gpu_op){.dev = dev};
	xfer_op_keep(&op->o, req, flags);
}

/* ---- the pages lane ---- */

static void batch_free(struct page_batch *b)
{
	if (b->tab)
		cudaFreeHost(b->tab);
	free(b->done);
	free(b->refs);
	b->tab = NULL;
	b->done = NULL;
	b->refs = NULL;
}

/* The batch of @l that takes a page of @len bytes: the filling one, or the
 * next slot once it is full (made on first use); NULL when every slot is in
 * use or memory is refused: the page then goes out alone. */
static struct page_batch *batch_room(struct page_lane *l, uint64_t len)
{
	struct page_batch *b = &l->b[l->fill % GPU_BATCH_SLOTS];

	if (b->n && (b->n == GPU_BATCH_MAX || b->bytes + len > GPU_BATCH_BYTES)) {
		if (l->fill + 1 - l->head >= GPU_BATCH_SLOTS)
			return NULL;
		b = &l->b[++l->fill % GPU_BATCH_SLOTS];
	}
	if (b->tab)
		return b;
	b->done = malloc(GPU_BATCH_MAX * sizeof(*b->done));
	b->refs = malloc(GPU_BATCH_MAX * sizeof(*b->refs));
	if (!b->done || !b->refs ||
	    cudaHostAlloc((void **)&b->tab, GPU_BATCH_MAX * sizeof(*b->tab),
			  cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
		cudaGetLastError();
		b->tab = NULL;
		batch_free(b);
		return NULL;
	}
	return b;
}

/* Page @i of @b: @len bytes from @src to @dst; its completion's fields. */
static inline void batch_put(struct page_batch *b, const void *dst, const void *src, uint64_t len,
			     struct queue *q, uint64_t user_data, uint64_t submit_ns,
			     uint32_t flags, struct gpu_op *op)
{
	unsigned i = b->n++;

	b->tab[i] = (struct gpu_page){.src = (uintptr_t)src, .dst = (uintptr_t)dst, .len = len};
	b->done[i] = (struct page_done){
		.q = q, .user_data = user_data, .submit_ns = submit_ns, .flags = flags, .op = op};
	b->bytes += len;
}

/* @b holds one more reference on each of @ra and @rb (taken by the caller). */
static inline void batch_ref(struct page_batch *b, struct region *ra, struct region *rb)
{
	struct page_refs *r = b->nrefs ? &b->refs[b->nrefs - 1] : NULL;

	if (!r || r->ra != ra || r->rb != rb) {
		r = &b->refs[b->nrefs++];
		*r = (struct page_refs){.ra = ra, .rb = rb};
	}
	r->n++;
}

/* Completes every page of @b with @status (0: copied), in order, and drops
 * what it held; the slot is empty after. */
static void batch_end(struct poller *p, struct gpu_poller *g, struct page_batch *b, int status)
{
	for (unsigned i = 0; i < b->n; i++) {
		const struct page_done *e = &b->done[i];

		if (e->op) {
			xfer_op_finish(p, &e->op->o, status);
			op_pool_put(&g->free_ops, &e->op->node);
			continue;
		}
		e->q->inflight--;
		queue_complete_ns(e->q, e->user_data, e->submit_ns, status,
				  status ? 0 : b->tab[i].len, e->flags);
	}
	for (unsigned i = 0; i < b->nrefs; i++) {
		region_put_n(b->refs[i].ra, (int)b->refs[i].n);
		region_put_n(b->refs[i].rb, (int)b->refs[i].n);
	}
	g->pending -= b->n;
	b->n = b->nrefs = 0;
	b->bytes = 0;
	b->seq = 0;
}

/* The lane's flags and counts, at its first launch (device @dev current,
 * the stream made): 0 before any launch. */
static cudaError_t lane_signals(struct page_lane *l)
{
	cudaError_t err;

	err = cudaHostAlloc((void **)&l->flag, GPU_BATCH_SLOTS * sizeof(*l->flag),
			    cudaHostAllocPortable | cudaHostAllocMapped);
	if (err != cudaSuccess) {
		l->flag = NULL;
		return err;
	}
	memset((void *)l->flag, 0, GPU_BATCH_SLOTS * sizeof(*l->flag));
	err = cudaMalloc((void **)&l->count, GPU_BATCH_SLOTS * sizeof(*l->count));
	if (err == cudaSuccess)
		err = cudaMemsetAsync(l->count, 0, GPU_BATCH_SLOTS * sizeof(*l->count), l->stream);
	if (err != cudaSuccess) {
		if (l->count)
			cudaFree(l->count);
		cudaFreeHost((void *)l->flag);
		l->count = NULL;
		l->flag = NULL;
	}
	return err;
}

/* Drops the lane's stream after an error that failed every batch on it;
 * a kernel stopped half way may have left its count: zeroed again, on the
 * next stream, before its first launch. */
static void pages_reset(struct page_lane *l)
{
	if (l->stream)
		cudaStreamDestroy(l->stream);
	l->stream = NULL;
	l->recount = true;
	cudaGetLastError();
}

/* Launches batch @b of @l on device @dev: the page kernel over its table,
 * storing the batch's sequence number into its slot's flag at the end. A
 * failure fails its pages with -EIO; the stream stays (batches launched
 * before may still run on it). */
static void batch_launch(struct poller *p, struct gpu_poller *g, int dev, struct page_lane *l,
			 struct page_batch *b)
{
	unsigned slot = (unsigned)(b - l->b);
	uint64_t t0 = dp_now_ns();
	cudaError_t err = cudaSuccess;
	int prev = dev_enter(dev);

	if (!l->stream)
		err = cudaStreamCreateWithPriority(&l->stream, cudaStreamNonBlocking, prio_pages);
	if (err == cudaSuccess && !l->flag)
		err = lane_signals(l);
	else if (err == cudaSuccess && l->recount &&
		 (err = cudaMemsetAsync(l->count, 0, GPU_BATCH_SLOTS * sizeof(*l->count),
					l->stream)) == cudaSuccess)
		l->recount = false;
	if (err == cudaSuccess) {
		if (!++l->seq) /* 0 is no launch */
			l->seq = 1;
		b->seq = l->seq;
		/* The kernel reads the table through its mapping (UVA: the
		 * same address); the launch is ordered after the stores that
		 * filled it. */
		err = DP_FAULT_CUDA(gpu_pages_launch_signal(b->tab, b->n, &l->count[slot],
							    &l->flag[slot], b->seq, l->stream));
	}
	dev_leave(prev, dev);
	if (err != cudaSuccess) {
		/* Batches launched before it may still run on the stream: it
		 * stays (an error that sticks fails them at the reap). */
		log_err("gpu: batch of %u pages (%llu bytes) on device %d (gpu -> gpu): %s", b->n,
			(unsigned long long)b->bytes, dev, cudaGetErrorString(err));
		cudaGetLastError();
		batch_end(p, g, b, -EIO);
		return;
	}
	b->launched_ns = dp_now_ns();
	l->launches++;
	l->launched += b->n;
	l->launch_ns += b->launched_ns - t0;
}

/* Launches what may go: full batches, and the filling one on an idle lane
 * or once it holds GPU_BATCH_GO pages (or bytes) while fewer than
 * GPU_BATCH_INFLIGHT run. Returns the batches launched. */
static int pages_launch(struct poller *p, struct gpu_poller *g, int dev, struct page_lane *l)
{
	int n = 0;

	while (l->next != l->fill || l->b[l->fill % GPU_BATCH_SLOTS].n) {
		struct page_batch *b = &l->b[l->next % GPU_BATCH_SLOTS];

		if (l->next == l->fill) {
			/* The filling batch: at once on an idle lane, else once
			 * it is worth a launch and a launch slot is free. */
			bool full = b->n == GPU_BATCH_MAX || b->bytes >= GPU_BATCH_BYTES;

			if (l->next != l->head && !full &&
			    (l->next - l->head >= GPU_BATCH_INFLIGHT ||
			     (b->n < GPU_BATCH_GO && b->bytes < GPU_BATCH_GO_BYTES)))
				break;
			/* The filling batch goes; the next slot fills (it is
			 * free: fill - head < GPU_BATCH_SLOTS still holds). */
			if (l->fill + 1 - l->head >= GPU_BATCH_SLOTS)
				break;
			l->fill++;
		}
		l->next++;
		batch_launch(p, g, dev, l, b);
		n++;
	}
	return n;
}

/* Whether @b's kernel stored its flag. The acquire pairs with the
 * kernel's __threadfence_system before its store (gpu_pages.cu): the pages'
 * bytes are in place once it is seen. */
static inline bool batch_seen(const struct page_lane *l, const struct page_batch *b)
{
	return __atomic_load_n(&l->flag[b - l->b], __ATOMIC_ACQUIRE) == b->seq;
}

/*
 * Batches of @l seen done, oldest first (one stream: in order). The head
 * overdue: the stream is asked (at most every GPU_BATCH_OVERDUE_NS): idle,
 * every launched batch is done (a flag late to be seen, not missing); an error (a
 * kernel that faulted stores no flag), every launched batch not seen done
 * fails with -EIO and the stream is dropped. Returns the pages completed.
 */
static int pages_reap(struct poller *p, struct gpu_poller *g, int dev, struct page_lane *l)
{
	bool failed = false, idle = false;
	int done = 0;

	for (; l->head != l->next; l->head++) {
		struct page_batch *b = &l->b[l->head % GPU_BATCH_SLOTS];
		bool seen;

		if (!b->seq) /* failed at its launch, ended there */
			continue;
		seen = batch_seen(l, b);
		if (!seen && !failed && !idle) {
			uint64_t now = dp_now_ns();
			cudaError_t err;

			if (now - b->launched_ns < GPU_BATCH_OVERDUE_NS ||
			    now - l->asked_ns < GPU_BATCH_OVERDUE_NS)
				break;
			l->asked_ns = now;
			err = DP_FAULT_CUDA_DONE(cudaStreamQuery(l->stream));
			if (err == cudaErrorNotReady)
				break;
			/* Idle: every batch launched on it is done. */
			idle = err == cudaSuccess;
			if (err != cudaSuccess) {
				log_err("gpu: batch of %u pages on device %d failed: %s", b->n, dev,
					cudaGetErrorString(err));
				failed = true;
			}
		}
		l->wait_ns += dp_now_ns() - b->launched_ns;
		done += (int)b->n;
		batch_end(p, g, b,
			  (failed && !seen) || DP_FAULT_CUDA_DONE(cudaSuccess) != cudaSuccess ? -EIO
											      : 0);
	}
	if (failed)
		pages_reset(l);
	return done;
}

/* A GPU -> GPU page of one device from the general path (an engine
 * session's descriptor, one with a notification, one a run could not
 * take): one entry of the filling batch, ended through @op. -ENOSPC: no
 * room, it goes alone (@op still the caller's). */
static int page_queue(struct poller *p, struct gpu_poller *g, struct page_lane *l,
		      struct gpu_op *op, const struct xfer *req, int dev, uint32_t flags)
{
	struct page_batch *b = batch_room(l, req->len);

	if (!b)
		return -ENOSPC;
	op_init(op, req, dev, flags);
	batch_put(b, req->dst, req->src, req->len, NULL, 0, 0, 0, op);
	g->pending++;
	engine_kick(p, ENGINE_gpu);
	return 0;
}

/* DP_CQE_F_GPU_STAGED for a copy between two devices with no peer access
 * either way, else 0. */
static uint32_t gpu_staged(const struct region *a, const struct region *b)
{
	if (a->kind != REGION_CUDA || b->kind != REGION_CUDA || a->device == b->device)
		return 0;
	return peer[a->device][b->device] || peer[b->device][a->device] ? 0 : DP_CQE_F_GPU_STAGED;
}

/* Issues a routed copy on its lane's stream (its host windows pinned, or
 * refused by the pinner's cap: pageable then). */
static void gpu_issue(struct poller *p, const struct xfer *req)
{
	uint32_t flags = req->path | DP_CQE_F_GPU;
	struct gpu_poller *g = gpu_poller_get(p);
	const struct region *rdst, *rsrc;
	struct gpu_lane *l;
	struct gpu_dev *d;
	struct gpu_op *op;
	cudaEvent_t ev;
	cudaError_t err;
	int dev, prev;
	bool small;

	if (!req->len) {
		if (req->notify)
			notif_deliver(p, req->seg, req->notify);
		queue_complete_ns(req->q, req->user_data, req->submit_ns, 0, 0, flags);
		return;
	}
	op = g ? op_pool_get(&g->free_ops, sizeof(*op)) : NULL;
	if (!op) {
		queue_complete_ns(req->q, req->user_data, req->submit_ns, -ENOMEM, 0, flags);
		return;
	}
	/* WRITE copies local -> target, READ target -> local. */
	rdst = req->d->opcode == DP_OP_WRITE ? req->rb : req->ra;
	rsrc = rdst == req->ra ? req->rb : req->ra;
	dev = rdst->kind == REGION_CUDA ? rdst->device : rsrc->device;
	flags |= gpu_staged(rsrc, rdst);
	d = &g->dev[dev];
	small = req->len <= GPU_SMALL_MAX;
	if (small && req->q->inflight && rdst->kind == REGION_CUDA && rsrc->kind == REGION_CUDA &&
	    rdst->device == rsrc->device && !page_queue(p, g, &d->pages, op, req, dev, flags))
		return;
	l = &d->lane[small ? LANE_SMALL : LANE_BULK];

	prev = dev_enter(dev);
	err = cudaSuccess;
	if (!l->stream)
		err = cudaStreamCreateWithPriority(&l->stream, cudaStreamNonBlocking,
						   small ? prio_small : prio_bulk);
	ev = err == cudaSuccess ? event_get(d) : NULL;
	if (err == cudaSuccess && !ev)
		err = cudaErrorMemoryAllocation;
	if (err == cudaSuccess) {
		/* The host side, if any: its windows pinned, or queued. */
		struct region *host = rdst->kind == REGION_HOST	  ? (struct region *)rdst
				      : rsrc->kind == REGION_HOST ? (struct region *)rsrc
								  : NULL;

		const uint8_t *hp = host == rdst ? req->dst : req->src;

		err = DP_FAULT_CUDA(copy_split(req->dst, req->src, req->len, host, hp, l->stream));
	}
	if (err == cudaSuccess) {
		err = cudaEventRecord(ev, l->stream);
		/* The copy was queued but cannot be tracked: wait for it (an
		 * error path) so that no DMA outlives the region references. */
		if (err != cudaSuccess)
			cudaStreamSynchronize(l->stream);
	}
	if (err != cudaSuccess) {
		log_err("gpu: copy of %llu bytes on device %d (%s -> %s): %s",
			(unsigned long long)req->len, dev,
			rsrc->kind == REGION_CUDA ? "gpu" : "host",
			rdst->kind == REGION_CUDA ? "gpu" : "host", cudaGetErrorString(err));
		if (ev)
			event_put(d, ev);
		lane_reset(l);
		dev_leave(prev, dev);
		op_pool_put(&g->free_ops, &op->node);
		queue_complete_ns(req->q, req->user_data, req->submit_ns, -EIO, 0, flags);
		return;
	}
	dev_leave(prev, dev);

	op_init(op, req, dev, flags);
	g->pending++;
	op->ev = ev;
	op->lane = (uint8_t)(l - d->lane);
	op_fifo_push(&l->ops, &op->node);
	engine_kick(p, ENGINE_gpu);
}

/*
 * A run of plain descriptors of one (opcode, region, segment) from the
 * poller's drain (engine.h, submit_run): GPU -> GPU pages of one device go
 * into the pages lane's batches, ten stores each, with the run's region
 * references taken once. A page the run cannot take (out of range, empty,
 * above GPU_SMALL_MAX, a notify word, no room in the lane) ends it: the
 * general path takes that one and gives it its errno or its lane. A lone
 * descriptor of an idle queue goes to the small lane (P10) that way too.
 */
int gpu_submit_run(struct poller *p, const struct xfer_run *r, const struct dp_desc *d, int n)
{
	struct region *rdst = r->write ? r->rb : r->ra, *rsrc = r->write ? r->ra : r->rb;
	const uint32_t flags = r->path | DP_CQE_F_GPU;
	struct queue *q = r->q;
	struct gpu_poller *g;
	struct page_lane *l;
	int k;

	if (rdst->kind != REGION_CUDA || rsrc->kind != REGION_CUDA ||
	    rdst->device != rsrc->device || (!q->inflight && (n == 1 || !xfer_run_has(r, &d[1]))) ||
	    !(g = gpu_poller_get(p)))
		return 0;
	l = &g->dev[rdst->device].pages;
	for (k = 0; k < n; k++) {
		const struct dp_desc *e = &d[k];
		uint64_t doff = r->write ? e->target_off : e->local_off;
		uint64_t soff = r->write ? e->local_off : e->target_off;
		uint64_t len = e->len;
		struct page_batch *b;

		/* Another run's, then desc_resolve's range checks, as
		 * subtractions. */
		if ((k && !xfer_run_has(r, e)) || e->notify || !len || len > GPU_SMALL_MAX ||
		    len > rdst->len || doff > rdst->len - len || len > rsrc->len ||
		    soff > rsrc->len - len || !(b = batch_room(l, len)))
			break;
		batch_put(b, rdst->base + doff, rsrc->base + soff, len, q, e->user_data,
			  e->submit_ns, flags, NULL);
		batch_ref(b, r->ra, r->rb);
	}
	if (!k)
		return 0;
	atomic_fetch_add(&r->ra->refs, k);
	atomic_fetch_add(&r->rb->refs, k);
	q->inflight += (uint32_t)k;
	g->pending += (unsigned)k;
	engine_kick(p, ENGINE_gpu);
	return k;
}

/*
 * A copy with host memory whose 16 MiB windows are not pinned yet waits for
 * the pinner (a pageable cudaMemcpyAsync would hold the poller for the
 * whole copy: a 1 GiB one delayed a bystander's 4 KiB copy from 20 us to
 * 285 us on the H200); every other copy goes at once.
 */
void gpu_submit(struct poller *p, const struct xfer *req)
{
	struct gpu_poller *g = gpu_poller_get(p);
	const struct region *rdst = req->d->opcode == DP_OP_WRITE ? req->rb : req->ra;
	const struct region *rsrc = rdst == req->ra ? req->rb : req->ra;
	struct region *host = rdst->kind == REGION_HOST	  ? (struct region *)rdst
			      : rsrc->kind == REGION_HOST ? (struct region *)rsrc
							  : NULL;
	const uint8_t *hp = host == rdst ? req->dst : req->src;
	struct gpu_wait *w;

	if (!g || !host || !req->len || pins_ready(host, hp, req->len)) {
		gpu_issue(p, req);
		return;
	}
	w = malloc(sizeof(*w));
	if (!w) {
		gpu_issue(p, req); /* pageable, but moved */
		return;
	}
	w->x = *req;
	w->d = *req->d;
	w->x.d = &w->d;
	w->host = host;
	w->hp = hp;
	/* Alive in this loop (QSBR); the references keep them until issue. */
	atomic_fetch_add(&req->ra->refs, 1);
	atomic_fetch_add(&req->rb->refs, 1);
	if (req->notify) {
		notif_req_move(&w->notify, req->notify);
		w->x.notify = &w->notify;
		atomic_fetch_add(&req->seg->refs, 1);
	}
	req->q->inflight++;
	op_fifo_push(&g->wait, &w->node);
	g->pending++;
	engine_kick(p, ENGINE_gpu);
}

/* Waiting copies whose windows are ready, oldest first, go to their
 * streams; one still waiting keeps those behind it waiting (order). */
static int gpu_issue_waiting(struct poller *p, struct gpu_poller *g)
{
	struct gpu_wait *w;
	int n = 0;

	while ((w = (struct gpu_wait *)g->wait.head) && pins_ready(w->host, w->hp, w->x.len)) {
		op_fifo_pop(&g->wait);
		g->pending--;
		w->x.q->inflight--;
		gpu_issue(p, &w->x);
		region_put(w->x.ra);
		region_put(w->x.rb);
		if (w->x.notify) {
			notif_req_release(&w->notify); /* gpu_issue failed it */
			segment_put(w->x.seg);
		}
		free(w);
		n++;
	}
	return n;
}

int gpu_progress(struct poller *p)
{
	struct gpu_poller *g = p->eng[ENGINE_gpu];
	int done = 0;

	if (!g || !g->pending)
		return 0;
	if (!op_fifo_empty(&g->wait))
		done += gpu_issue_waiting(p, g);
	for (int dev = 0; dev < ndev; dev++) {
		struct gpu_dev *d = &g->dev[dev];
		struct page_lane *pl = &d->pages;

		/* Batches that ended make room for the next ones' launch. */
		if (pl->head != pl->next)
			done += pages_reap(p, g, dev, pl);
		if (pl->next != pl->fill || pl->b[pl->fill % GPU_BATCH_SLOTS].n)
			done += pages_launch(p, g, dev, pl);
		for (int i = 0; i < GPU_LANES; i++) {
			struct gpu_lane *l = &d->lane[i];
			struct gpu_op *op;

			while ((op = (struct gpu_op *)l->ops.head)) {
				cudaError_t err = DP_FAULT_CUDA_DONE(cudaEventQuery(op->ev));

				if (err == cudaErrorNotReady)
					break;
				op_fifo_pop(&l->ops);
				if (err != cudaSuccess) {
					log_err("gpu: copy of %llu bytes on device %d failed: %s",
						(unsigned long long)op->o.len, dev,
						cudaGetErrorString(err));
					lane_reset(l);
				}
				op_finish(p, g, op, err == cudaSuccess ? 0 : -EIO);
				done++;
			}
		}
	}
	return done;
}

bool gpu_busy(const struct poller *p)
{
	const struct gpu_poller *g = p->eng[ENGINE_gpu];

	return g && g->pending;
}

/* At shutdown, copies already queued on a stream finish (they cannot be
 * called back): wait for each, completing it. */
void gpu_drain(struct poller *p)
{
	while (gpu_busy(p))
		gpu_progress(p);
}

void gpu_poller_free(struct poller *p)
{
	struct gpu_poller *g = p->eng[ENGINE_gpu];

	if (!g)
		return;
	for (int dev = 0; dev < ndev; dev++) {
		struct gpu_dev *d = &g->dev[dev];
		struct page_lane *pl = &d->pages;

		if (pl->launches)
			log_info("gpu: poller %u device %d: %llu page batches, %llu pages (%.1f a "
				 "batch), %.2f us to launch one, %.1f us until seen done",
				 p->idx, dev, (unsigned long long)pl->launches,
				 (unsigned long long)pl->launched,
				 (double)pl->launched / (double)pl->launches,
				 (double)pl->launch_ns / 1e3 / (double)pl->launches,
				 (double)pl->wait_ns / 1e3 / (double)pl->launches);
		if (pl->stream)
			cudaStreamDestroy(pl->stream);
		if (pl->flag)
			cudaFreeHost((void *)pl->flag);
		if (pl->count)
			cudaFree(pl->count);
		for (unsigned b = 0; b < GPU_BATCH_SLOTS; b++)
			batch_free(&pl->b[b]);
		for (int i = 0; i < GPU_LANES; i++)
			if (d->lane[i].stream)
				cudaStreamDestroy(d->lane[i].stream);
		if (d->stage)
			cudaStreamDestroy(d->stage);
		for (unsigned i = 0; i < d->npool; i++)
			cudaEventDestroy(d->pool[i]);
		free(d->pool);
	}
	op_pool_free(&g->free_ops);
	free(g);
	p->eng[ENGINE_gpu] = NULL;
}

/* ---- staging for the file engine (one poller) ---- */

void *gpu_pinned_alloc(size_t len)
{
	void *mem = NULL;
	cudaError_t err;

	if (!ndev)
		return NULL;
	err = cudaHostAlloc(&mem, len, cudaHostAllocPortable);
	if (err != cudaSuccess) {
		log_warn("gpu: cudaHostAlloc of %zu bytes: %s", len, cudaGetErrorString(err));
		cudaGetLastError();
		return NULL;
	}
	return mem;
}

void gpu_pinned_free(void *mem)
{
	if (mem)
		cudaFreeHost(mem);
}

int gpu_stage_copy(struct poller *p, int dev, void *dst, const void *src, size_t len,
		   struct gpu_ticket *t)
{
	struct gpu_poller *g = gpu_poller_get(p);
	cudaEvent_t ev = NULL;
	cudaError_t err = cudaErrorMemoryAllocation;
	struct gpu_dev *d;
	int prev;

	if (!g)
		return -EIO;
	d = &g->dev[dev];
	prev = dev_enter(dev);
	if (d->stage || (err = cudaStreamCreateWithPriority(&d->stage, cudaStreamNonBlocking,
							    prio_bulk)) == cudaSuccess) {
		ev = event_get(d);
		err = ev ? DP_FAULT_CUDA(
				   cudaMemcpyAsync(dst, src, len, cudaMemcpyDefault, d->stage))
			 : cudaErrorMemoryAllocation;
		if (err == cudaSuccess && (err = cudaEventRecord(ev, d->stage)) != cudaSuccess)
			/* Queued but untracked: no DMA may outlive the buffers. */
			cudaStreamSynchronize(d->stage);
	}
	if (err != cudaSuccess) {
		log_err("gpu: staging copy of %zu bytes on device %d: %s", len, dev,
			cudaGetErrorString(err));
		if (ev)
			event_put(d, ev);
		if (d->stage)
			cudaStreamDestroy(d->stage);
		d->stage = NULL;
		cudaGetLastError();
		dev_leave(prev, dev);
		return -EIO;
	}
	dev_leave(prev, dev);
	t->ev = ev;
	t->dev = dev;
	return 0;
}

int gpu_stage_poll(struct poller *p, struct gpu_ticket *t)
{
	struct gpu_dev *d = &((struct gpu_poller *)p->eng[ENGINE_gpu])->dev[t->dev];
	cudaError_t err = DP_FAULT_CUDA_DONE(cudaEventQuery(t->ev));

	if (err == cudaErrorNotReady)
		return 0;
	event_put(d, t->ev);
	t->ev = NULL;
	if (err == cudaSuccess)
		return 1;
	log_err("gpu: staging copy on device %d failed: %s", t->dev, cudaGetErrorString(err));
	if (d->stage)
		cudaStreamDestroy(d->stage);
	d->stage = NULL;
	cudaGetLastError();
	return -EIO;
}
