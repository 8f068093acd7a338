/* SPDX-License-Identifier: MIT */
/* gpu_vmm.c - GPU memory mapped with the driver's virtual memory calls
 * (cuMemCreate + cuMemMap, as PyTorch's expandable segments and vLLM's
 * CuMemAllocator make it): one piece and three pieces side by side, moved
 * to and from host and cudaMalloc memory, 1 B to 64 MiB, byte-accurate; an
 * allocation that cannot be shared refused with its reason; the same
 * memory exported to another service of this host; and the service's checks
 * of REGION_REGISTER_CUDA_VMM messages (these run on every machine). */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dp_proto.h"
#include "helpers.h"
#include "net.h"

/* Tests run one service (svc) or two of this host (fab_svc[]). */
static void vmm_teardown(void)
{
	svc_teardown();
	fab_teardown();
}

TestSuite(gpu_vmm, .fini = vmm_teardown, .timeout = 300);

/* The service's checks before any GPU is asked: the length, the pieces'
 * tiling, one fd per piece; then a well-formed message naming a device the
 * service does not have is -ENODEV (no GPU here, or a UUID of none). One
 * strike for the malformed message only: the connection stays usable. */
Test(gpu_vmm, VmmMessageChecks)
{
	struct dp_msg_region_register_cuda_vmm m;
	struct dp_msg_id id = {.id = 999};
	int fd, rc, fds[3];

	for (int i = 0; i < 3; i++) {
		fds[i] = dup(STDERR_FILENO);
		cr_assert_geq(fds[i], 0);
	}
	start_svc(&svc, local_only);
	fd = raw_connect(svc.sock, 10);
	{
		struct dp_msg_hello h = {.abi_version = DP_ABI_VERSION, .pid = (uint32_t)getpid()};

		strcpy(h.name, "vmm-raw");
		cr_assert_eq(raw_call(fd, DP_MSG_HELLO, &h, sizeof(h), NULL), 0);
	}
	memset(&m, 0, sizeof(m));
	memset(m.uuid, 0xff, sizeof(m.uuid));
	m.npieces = 2;
	m.piece[0] = (struct dp_cuda_vmm_piece){0, 2 * MiB};
	m.piece[1] = (struct dp_cuda_vmm_piece){2 * MiB, 4 * MiB};
	m.offset = 4096;
	m.len = 3 * MiB;
	rc = raw_call_with_fds(fd, DP_MSG_REGION_REGISTER_CUDA_VMM, &m, sizeof(m) - 8, fds, 2,
			       NULL);
	cr_assert_eq(rc, -EBADMSG, "short message: %d", rc);
	rc = raw_call_with_fds(fd, DP_MSG_REGION_REGISTER_CUDA_VMM, &m, sizeof(m), fds, 1, NULL);
	cr_assert_eq(rc, -EBADF, "one fd for two pieces: %d", rc);
	rc = raw_call_with_fds(fd, DP_MSG_REGION_REGISTER_CUDA_VMM, &m, sizeof(m), fds, 3, NULL);
	cr_assert_eq(rc, -EBADF, "three fds for two pieces: %d", rc);
	m.piece[1].offset = 3 * MiB;
	rc = raw_call_with_fds(fd, DP_MSG_REGION_REGISTER_CUDA_VMM, &m, sizeof(m), fds, 2, NULL);
	cr_assert_eq(rc, -EINVAL, "a gap between the pieces: %d", rc);
	m.piece[1].offset = 2 * MiB;
	m.len = 6 * MiB;
	rc = raw_call_with_fds(fd, DP_MSG_REGION_REGISTER_CUDA_VMM, &m, sizeof(m), fds, 2, NULL);
	cr_assert_eq(rc, -EINVAL, "a range past the last piece: %d", rc);
	m.len = MiB;
	rc = raw_call_with_fds(fd, DP_MSG_REGION_REGISTER_CUDA_VMM, &m, sizeof(m), fds, 2, NULL);
	cr_assert_eq(rc, -EINVAL, "a piece the range does not reach: %d", rc);
	m.len = 3 * MiB;
	m.npieces = 0;
	rc = raw_call_with_fds(fd, DP_MSG_REGION_REGISTER_CUDA_VMM, &m, sizeof(m), NULL, 0, NULL);
	cr_assert_eq(rc, -EINVAL, "no piece: %d", rc);
	m.npieces = 2;
	m.piece[5].size = 1;
	rc = raw_call_with_fds(fd, DP_MSG_REGION_REGISTER_CUDA_VMM, &m, sizeof(m), fds, 2, NULL);
	cr_assert_eq(rc, -EINVAL, "an unused slot not 0: %d", rc);
	m.piece[5].size = 0;
	rc = raw_call_with_fds(fd, DP_MSG_REGION_REGISTER_CUDA_VMM, &m, sizeof(m), fds, 2, NULL);
	cr_assert_eq(rc, -ENODEV, "a device the service does not have: %d", rc);
	/* Still connected, one strike down: an ordinary error reply. */
	cr_assert_eq(raw_call(fd, DP_MSG_QUEUE_DESTROY, &id, sizeof(id), NULL), -EBADF);
	close(fd);
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	cr_assert_eq(svc_stop(&svc), 0);
}

#ifdef DP_HAVE_CUDA

#include <cuda.h>

/* The driver's virtual memory calls, looked up through the runtime as
 * libclient does (the tests link no libcuda either). */
static struct {
	CUresult (*create)(CUmemGenericAllocationHandle *h, size_t size,
			   const CUmemAllocationProp *prop, unsigned long long flags);
	CUresult (*granularity)(size_t *g, const CUmemAllocationProp *prop,
				CUmemAllocationGranularity_flags opt);
	CUresult (*reserve)(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
			    unsigned long long flags);
	CUresult (*addr_free)(CUdeviceptr ptr, size_t size);
	CUresult (*map)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
			unsigned long long flags);
	CUresult (*unmap)(CUdeviceptr ptr, size_t size);
	CUresult (*set_access)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
			       size_t count);
	CUresult (*release)(CUmemGenericAllocationHandle h);
} drv;

static void *drv_fn(const char *name)
{
	enum cudaDriverEntryPointQueryResult q;
	void *fn = NULL;

	CK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q));
	cr_assert_eq(q, cudaDriverEntryPointSuccess, "%s", name);
	return fn;
}

#define DRV(call)                                                                                  \
	do {                                                                                       \
		CUresult r_ = (call);                                                              \
		cr_assert_eq(r_, CUDA_SUCCESS, "%s: CUresult %d", #call, (int)r_);                 \
	} while (0)

#define MAX_PIECES 40

/* A range of pieces mapped side by side on device 0, as an expandable
 * segment grows. */
struct vmm_buf {
	CUdeviceptr va;
	size_t len;
	unsigned n;
	size_t size[MAX_PIECES];
	CUmemGenericAllocationHandle h[MAX_PIECES];
};

/* Maps @n pieces, piece i of sizes[i] bytes rounded up to the granularity
 * (all of @sizes[0] when sizes has one entry: pass n_sizes 1), each
 * allocation requesting @type, with access for device 0. Returns the
 * range's start. */
static uint8_t *vmm_alloc(struct vmm_buf *b, unsigned n, const size_t *sizes, unsigned n_sizes,
			  CUmemAllocationHandleType type)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .requestedHandleTypes = type,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
			     .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	size_t g = 0, off = 0;

	if (!drv.create) {
		drv.create = drv_fn("cuMemCreate");
		drv.granularity = drv_fn("cuMemGetAllocationGranularity");
		drv.reserve = drv_fn("cuMemAddressReserve");
		drv.addr_free = drv_fn("cuMemAddressFree");
		drv.map = drv_fn("cuMemMap");
		drv.unmap = drv_fn("cuMemUnmap");
		drv.set_access = drv_fn("cuMemSetAccess");
		drv.release = drv_fn("cuMemRelease");
	}
	cr_assert_leq(n, MAX_PIECES);
	CK(cudaSetDevice(0));
	CK(cudaFree(NULL)); /* the primary context, current: the driver calls need it */
	DRV(drv.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	memset(b, 0, sizeof(*b));
	b->n = n;
	for (unsigned i = 0; i < n; i++) {
		size_t want = sizes[n_sizes == 1 ? 0 : i];

		b->size[i] = (want + g - 1) / g * g;
		b->len += b->size[i];
	}
	DRV(drv.reserve(&b->va, b->len, 0, 0, 0));
	for (unsigned i = 0; i < n; i++) {
		DRV(drv.create(&b->h[i], b->size[i], &prop, 0));
		DRV(drv.map(b->va + off, b->size[i], 0, b->h[i], 0));
		off += b->size[i];
	}
	DRV(drv.set_access(b->va, b->len, &a, 1));
	return (uint8_t *)(uintptr_t)b->va;
}

static void vmm_free(struct vmm_buf *b)
{
	size_t off = 0;

	CK(cudaDeviceSynchronize());
	for (unsigned i = 0; i < b->n; i++) {
		DRV(drv.unmap(b->va + off, b->size[i]));
		DRV(drv.release(b->h[i]));
		off += b->size[i];
	}
	DRV(drv.addr_free(b->va, b->len));
}

/* The pattern of @seed at [d, d + len) of GPU memory, the copy finished. */
static void gpu_fill(void *d, size_t len, uint64_t seed)
{
	uint8_t *h = malloc(len);

	cr_assert(h);
	pattern_fill(h, len, seed);
	CK(cudaMemcpy(d, h, len, cudaMemcpyHostToDevice));
	CK(cudaDeviceSynchronize());
	free(h);
}

static void expect_gpu_cqe(struct dp_cqe c, uint64_t len, uint32_t flags, const char *what)
{
	cr_assert_eq(c.status, 0, "%s of %llu B: %s", what, (unsigned long long)len,
		     dp_strerror(c.status));
	cr_assert_eq(c.bytes, len, "%s: %llu bytes", what, (unsigned long long)c.bytes);
	cr_assert_eq(c.flags & (DP_CQE_F_SAME_HOST | DP_CQE_F_GPU | DP_CQE_F_LOCAL), flags,
		     "%s: flags %#x, want %#x", what, c.flags, flags);
}

static const uint64_t lens[] = {1, 4096, MiB + 3, 64 * MiB};

/*
 * The VMM range [vp, vp + vlen), registered as region @rv of client @c of
 * the running service (svc), moved both ways to and from a host region and
 * a cudaMalloc region of the same service (exported, opened), at @voff in
 * it, each of `lens`; then the range itself exported and written from host
 * memory. vlen must hold voff + 64 MiB.
 */
static void vmm_moves(struct dp_client *c, int rv, uint8_t *vp, size_t vlen, uint64_t voff)
{
	const size_t len = 64 * MiB + 4096;
	struct dp_queue *q = make_queue(c, 8);
	uint8_t *host;
	void *dg;
	int rh = alloc_region(c, len, &host);
	int rg = gpu_region(c, len, -1, &dg);
	int sh, sg, sv;

	cr_assert_geq(vlen, voff + 64 * MiB);
	/* The regions go at the end, and their exports with them. */
	cr_assert_eq(dp_segment_export(c, rh, "vmm-host", DP_ACCESS_RW), 0);
	cr_assert_eq(dp_segment_export(c, rg, "vmm-gpu", DP_ACCESS_RW), 0);
	sh = open_segment(c, NULL, "vmm-host", DP_ACCESS_RW);
	sg = open_segment(c, NULL, "vmm-gpu", DP_ACCESS_RW);
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		uint64_t n = lens[i];

		/* VMM -> host (WRITE), host -> VMM (READ). */
		gpu_fill(vp + voff, n, 10 + i);
		memset(host, 0, len);
		expect_gpu_cqe(run1(q, true, rv, voff, sh, 7, n, 1, 60000), n, GPU_FLAGS,
			       "WRITE VMM -> host");
		cr_assert_eq(pattern_check(host + 7, n, 10 + i), -1, "VMM -> host: mismatch");
		pattern_fill(host + 7, n, 20 + i);
		gpu_memset(vp, 0, vlen);
		expect_gpu_cqe(run1(q, false, rv, voff, sh, 7, n, 2, 60000), n, GPU_FLAGS,
			       "READ VMM <- host");
		gpu_expect(vp + voff, n, 20 + i, 0, "host -> VMM");
		/* VMM -> cudaMalloc (WRITE), cudaMalloc -> VMM (READ). */
		gpu_memset(dg, 0, len);
		expect_gpu_cqe(run1(q, true, rv, voff, sg, 4096, n, 3, 60000), n, GPU_FLAGS,
			       "WRITE VMM -> GPU");
		gpu_expect((uint8_t *)dg + 4096, n, 20 + i, 0, "VMM -> cudaMalloc");
		gpu_fill(dg, n, 30 + i);
		gpu_memset(vp, 0, vlen);
		expect_gpu_cqe(run1(q, false, rv, voff, sg, 0, n, 4, 60000), n, GPU_FLAGS,
			       "READ VMM <- GPU");
		gpu_expect(vp + voff, n, 30 + i, 0, "cudaMalloc -> VMM");
	}
	/* The VMM range as the target: host memory written into its export. */
	cr_assert_eq(dp_segment_export(c, rv, "vmm-itself", DP_ACCESS_RW), 0);
	sv = open_segment(c, NULL, "vmm-itself", DP_ACCESS_RW);
	pattern_fill(host, len, 40);
	gpu_memset(vp, 0, vlen);
	expect_gpu_cqe(run1(q, true, rh, 0, sv, voff, 64 * MiB, 5, 60000), 64 * MiB, GPU_FLAGS,
		       "WRITE host -> VMM export");
	gpu_expect(vp + voff, 64 * MiB, 40, 0, "host -> VMM export");
	dp_queue_destroy(q);
	cr_assert_eq(dp_segment_close(c, sh), 0);
	cr_assert_eq(dp_segment_close(c, sg), 0);
	cr_assert_eq(dp_segment_close(c, sv), 0);
	cr_assert_eq(dp_segment_unexport(c, "vmm-itself"), 0);
	cr_assert_eq(dp_free(c, rh), 0);
	cr_assert_eq(dp_free(c, rg), 0);
	CK(cudaFree(dg));
}

/* One piece: registered whole, moved at offset 0 and inside. */
Test(gpu_vmm, VmmOnePiece)
{
	const size_t sz = 80 * MiB;
	struct dp_client *c;
	struct vmm_buf b;
	uint8_t *vp;
	int rv;

	GPU_REQUIRE();
	start_svc(&svc, local_only);
	c = connect_client(&svc, "vmm-one");
	vp = vmm_alloc(&b, 1, &sz, 1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	rv = dp_register_cuda(c, vp, b.len);
	cr_assert_geq(rv, 0, "dp_register_cuda: %s", dp_last_error());
	vmm_moves(c, rv, vp, b.len, 0);
	vmm_moves(c, rv, vp, b.len, 12345);
	cr_assert_eq(dp_free(c, rv), 0);
	dp_close(c);
	vmm_free(&b);
	cr_assert_eq(svc_stop(&svc), 0);
}

/*
 * Three pieces of different sizes side by side (24, 40 and 32 MiB, as an
 * expandable segment grows), registered from inside the first to inside
 * the last: the range-spans-pieces case, every 64 MiB copy crossing both
 * seams. Then a second registration of the middle piece alone (the same
 * memory, two regions).
 */
Test(gpu_vmm, VmmThreePieces)
{
	const size_t sizes[3] = {24 * MiB, 40 * MiB, 32 * MiB};
	struct dp_client *c;
	struct vmm_buf b;
	uint8_t *vp;
	int rv, rmid;

	GPU_REQUIRE();
	start_svc(&svc, local_only);
	c = connect_client(&svc, "vmm-three");
	vp = vmm_alloc(&b, 3, sizes, 3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	rv = dp_register_cuda(c, vp + 3 * MiB + 5, b.len - 3 * MiB - 5 - 777);
	cr_assert_geq(rv, 0, "dp_register_cuda: %s", dp_last_error());
	/* Region offset 1 MiB: VMM bytes [4 MiB + 5, 68 MiB + 5) cross both
	 * seams (24 MiB and 64 MiB). */
	vmm_moves(c, rv, vp + 3 * MiB + 5, b.len - 3 * MiB - 5 - 777, MiB);
	rmid = dp_register_cuda(c, vp + b.size[0], b.size[1]);
	cr_assert_geq(rmid, 0, "the middle piece alone: %s", dp_last_error());
	cr_assert_eq(dp_free(c, rmid), 0);
	cr_assert_eq(dp_free(c, rv), 0);
	dp_close(c);
	vmm_free(&b);
	cr_assert_eq(svc_stop(&svc), 0);
}

/* What cannot be registered, and what dp_last_error() says of it. */
Test(gpu_vmm, VmmRefusals)
{
	const size_t two = 2 * MiB;
	struct dp_client *c;
	struct vmm_buf b;
	uint8_t *vp;
	int r;

	GPU_REQUIRE();
	start_svc(&svc, local_only);
	c = connect_client(&svc, "vmm-refused");

	/* No shareable handle type: the allocator setting that fixes it. */
	vp = vmm_alloc(&b, 1, &two, 1, CU_MEM_HANDLE_TYPE_NONE);
	r = dp_register_cuda(c, vp, b.len);
	cr_assert_eq(r, -EINVAL, "unshareable: %d", r);
	cr_assert(strstr(dp_last_error(), "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR") &&
			  strstr(dp_last_error(), "TORCH_CUDA_EXPANDABLE_SEGMENTS_IPC"),
		  "%s", dp_last_error());
	vmm_free(&b);

	/* A range past the last mapped piece. */
	vp = vmm_alloc(&b, 2, &two, 1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	r = dp_register_cuda(c, vp + MiB, b.len);
	cr_assert_eq(r, -EINVAL, "past the mapping: %d", r);
	cr_assert(strstr(dp_last_error(), "leaves the memory mapped"), "%s", dp_last_error());
	r = dp_register_cuda(c, vp + MiB, b.len - MiB);
	cr_assert_geq(r, 0, "the same range, ending in time: %s", dp_last_error());
	cr_assert_eq(dp_free(c, r), 0);
	vmm_free(&b);

	/* More pieces than one message carries. */
	vp = vmm_alloc(&b, DP_CUDA_VMM_MAX_PIECES + 1, &two, 1,
		       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	r = dp_register_cuda(c, vp, b.len);
	cr_assert_eq(r, -EINVAL, "33 pieces: %d", r);
	cr_assert(strstr(dp_last_error(), "more than 32"), "%s", dp_last_error());
	r = dp_register_cuda(c, vp, b.len - b.size[0]);
	cr_assert_geq(r, 0, "32 pieces: %s", dp_last_error());
	cr_assert_eq(dp_free(c, r), 0);
	vmm_free(&b);

	/* Still a working client. */
	{
		void *p;

		cr_assert_geq(dp_alloc(c, 4096, 0, &p), 0);
	}
	dp_close(c);
	cr_assert_eq(svc_stop(&svc), 0);
}

/*
 * Across two services of this host: B's client registers three VMM pieces
 * and exports them; A maps the export (the pieces' fds re-exported by B,
 * SAMEHOST_CUDA_VMM) and moves bytes between it and its own cudaMalloc and
 * host memory, both ways: DP_CQE_F_SAME_HOST | DP_CQE_F_GPU.
 */
Test(gpu_vmm, VmmAcrossServicesSameHost)
{
	static char sa[96], sb[96];
	const char *a[] = {"--provider", "tcp", "--server-name", "127.0.0.1", "--same-host-socket",
			   sa,		 NULL};
	const char *bargs[] = {
		"--provider", "tcp", "--server-name", "127.0.0.1", "--same-host-socket", sb, NULL};
	const size_t sizes[3] = {24 * MiB, 40 * MiB, 32 * MiB};
	const uint32_t flags = DP_CQE_F_SAME_HOST | DP_CQE_F_GPU;
	struct dp_client *ca, *cb;
	struct dp_queue *q;
	struct vmm_buf b;
	char peer[64];
	uint8_t *vp, *host;
	void *dg;
	int rv, rg, rh, seg;

	GPU_REQUIRE();
	snprintf(sa, sizeof(sa), "/tmp/dp-gpu-vmm-a-%d.peer", (int)getpid());
	snprintf(sb, sizeof(sb), "/tmp/dp-gpu-vmm-b-%d.peer", (int)getpid());
	start_svc(&fab_svc[1], bargs);
	start_svc(&fab_svc[0], a);
	snprintf(peer, sizeof(peer), "127.0.0.1:%d", fab_rpc_port(&fab_svc[1]));
	ca = connect_client(&fab_svc[0], "vmm-initiator");
	cb = connect_client(&fab_svc[1], "vmm-exporter");
	vp = vmm_alloc(&b, 3, sizes, 3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	rv = dp_register_cuda(cb, vp, b.len);
	cr_assert_geq(rv, 0, "dp_register_cuda: %s", dp_last_error());
	cr_assert_eq(dp_segment_export(cb, rv, "vmm-sh", DP_ACCESS_RW), 0);
	seg = open_segment(ca, peer, "vmm-sh", DP_ACCESS_RW);
	cr_assert(svc_log_has(&fab_svc[0], "GPU (VMM) memory"),
		  "the export was not mapped through the same-host path");
	rg = gpu_region(ca, 64 * MiB, -1, &dg);
	rh = alloc_region(ca, 64 * MiB, &host);
	q = make_queue(ca, 8);
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		uint64_t n = lens[i], off = 20 * MiB + 3; /* across the first seam */

		/* A's cudaMalloc -> B's VMM, and back. */
		gpu_fill(dg, n, 50 + i);
		gpu_memset(vp, 0, b.len);
		expect_gpu_cqe(run1(q, true, rg, 0, seg, off, n, 1, 60000), n, flags,
			       "WRITE GPU -> VMM");
		gpu_expect(vp + off, n, 50 + i, 0, "GPU -> VMM (same host)");
		gpu_memset(dg, 0, 64 * MiB);
		expect_gpu_cqe(run1(q, false, rg, 0, seg, off, n, 2, 60000), n, flags,
			       "READ GPU <- VMM");
		gpu_expect(dg, n, 50 + i, 0, "VMM -> GPU (same host)");
		/* A's host memory -> B's VMM, and back. */
		pattern_fill(host, n, 60 + i);
		gpu_memset(vp, 0, b.len);
		expect_gpu_cqe(run1(q, true, rh, 0, seg, off, n, 3, 60000), n, flags,
			       "WRITE host -> VMM");
		gpu_expect(vp + off, n, 60 + i, 0, "host -> VMM (same host)");
		memset(host, 0, 64 * MiB);
		expect_gpu_cqe(run1(q, false, rh, 0, seg, off, n, 4, 60000), n, flags,
			       "READ host <- VMM");
		cr_assert_eq(pattern_check(host, n, 60 + i), -1, "VMM -> host (same host)");
	}
	dp_queue_destroy(q);
	dp_close(ca);
	dp_close(cb);
	CK(cudaFree(dg));
	vmm_free(&b);
}

/*
 * Engine sessions with GPU memory: B's client registers a cudaMalloc buffer
 * and a VMM range (three pieces) in its session; A's client opens the
 * session by name and moves bytes by B's device addresses, both ways, from
 * host and GPU memory (DP_CQE_F_SAME_HOST | DP_CQE_F_GPU); A's own
 * cudaMalloc buffer in A's session, opened by A itself, is the local
 * engine (the seed's self-loopback: DP_CQE_F_LOCAL | DP_CQE_F_GPU).
 */
Test(gpu_vmm, SessionsWithGpuMemory)
{
	static char sa[96], sb[96];
	const char *a[] = {"--provider", "tcp", "--server-name", "127.0.0.1", "--same-host-socket",
			   sa,		 NULL};
	const char *bargs[] = {
		"--provider", "tcp", "--server-name", "127.0.0.1", "--same-host-socket", sb, NULL};
	const size_t sizes[3] = {24 * MiB, 40 * MiB, 32 * MiB};
	const uint32_t same = DP_CQE_F_SAME_HOST | DP_CQE_F_GPU;
	struct dp_client *ca, *cb;
	struct dp_queue *q;
	struct vmm_buf b;
	uint8_t *vp, *host, *bg;
	void *dg, *mine;
	int rv, rbg, rg, rh, rm, seg, self;

	GPU_REQUIRE();
	snprintf(sa, sizeof(sa), "/tmp/dp-gpu-ses-a-%d.peer", (int)getpid());
	snprintf(sb, sizeof(sb), "/tmp/dp-gpu-ses-b-%d.peer", (int)getpid());
	start_svc(&fab_svc[1], bargs);
	start_svc(&fab_svc[0], a);
	ca = connect_client(&fab_svc[0], "ses-initiator");
	cb = connect_client(&fab_svc[1], "ses-owner");
	cr_assert_gt(dp_session_create(cb, 0), 0, "%s", dp_last_error());
	vp = vmm_alloc(&b, 3, sizes, 3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	rv = dp_register_cuda(cb, vp, b.len);
	cr_assert_geq(rv, 0, "dp_register_cuda (VMM): %s", dp_last_error());
	/* Room for the 64 MiB copy at bg + 5 (gt below). */
	rbg = gpu_region(cb, 64 * MiB + 4096, -1, &bg);
	cr_assert_geq(rbg, 0);
	rg = gpu_region(ca, 64 * MiB, -1, &dg);
	rh = alloc_region(ca, 64 * MiB, &host);
	q = make_queue(ca, 64);
	seg = dp_session_open(ca, dp_session_name(cb), DP_ACCESS_RW);
	cr_assert_geq(seg, 0, "dp_session_open(%s): %s", dp_session_name(cb), dp_last_error());
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		uint64_t n = lens[i];
		uint8_t *vt = vp + 20 * MiB + 3, *gt = bg + 5; /* the VMM range across a seam */

		/* A's GPU -> B's VMM and B's cudaMalloc, by B's addresses. */
		gpu_fill(dg, n, 70 + i);
		gpu_memset(vp, 0, b.len);
		gpu_memset(bg, 0, 64 * MiB + 4096);
		expect_gpu_cqe(run1(q, true, rg, 0, seg, (uintptr_t)vt, n, 1, 60000), n, same,
			       "WRITE GPU -> session VMM");
		gpu_expect(vt, n, 70 + i, 0, "GPU -> session VMM");
		expect_gpu_cqe(run1(q, true, rg, 0, seg, (uintptr_t)gt, n, 2, 60000), n, same,
			       "WRITE GPU -> session cudaMalloc");
		gpu_expect(gt, n, 70 + i, 0, "GPU -> session cudaMalloc");
		/* And back into A's host memory. */
		memset(host, 0, 64 * MiB);
		expect_gpu_cqe(run1(q, false, rh, 0, seg, (uintptr_t)vt, n, 3, 60000), n, same,
			       "READ host <- session VMM");
		cr_assert_eq(pattern_check(host, n, 70 + i), -1, "session VMM -> host");
	}
	/* A's own GPU memory in A's own session: the local engine. */
	cr_assert_gt(dp_session_create(ca, 0), 0);
	rm = gpu_region(ca, MiB, -1, &mine);
	self = dp_session_open(ca, dp_session_name(ca), DP_ACCESS_RW);
	cr_assert_geq(self, 0, "self open: %s", dp_last_error());
	pattern_fill(host, MiB, 90);
	expect_gpu_cqe(run1(q, true, rh, 0, self, (uintptr_t)mine, MiB, 4, 60000), MiB, GPU_FLAGS,
		       "WRITE host -> own session GPU");
	gpu_expect(mine, MiB, 90, 0, "host -> own session GPU");
	(void)rm;
	dp_queue_destroy(q);
	dp_close(ca);
	dp_close(cb);
	CK(cudaFree(dg));
	CK(cudaFree(bg));
	CK(cudaFree(mine));
	vmm_free(&b);
}

#endif /* DP_HAVE_CUDA */
