/* SPDX-License-Identifier: MIT */
/*
 * region.c - libclient's regions: memory the service maps or reaches for
 * this client (dp_alloc's sealed memfds, dp_register_fd, dp_register_mem,
 * dp_register_cuda, file regions), each a small integer the service gives;
 * dp_free. A region with an address here is also told to the client's
 * engine session, when it has one (session.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "client_internal.h"
#include "cuda_export.h"
#include "dp_client_pvt.h"

/* Region `region` is at `addr` here: remembered, and told to the session
 * when the client has one (then a refusal, -EEXIST for a range that
 * overlaps a member, is the registration's). */
static int region_addr_add(struct dp_client *c, int region, const void *addr)
{
	struct dp_msg_session_add req = {.region = (uint32_t)region,
					 .addr = (uint64_t)(uintptr_t)addr};
	int rc = 0;

	pthread_mutex_lock(&c->lock);
	if (c->session[0])
		rc = dp__rpc(c, DP_MSG_SESSION_ADD, &req, sizeof(req), -1, NULL,
			     sizeof(struct dp_msg_status), NULL, 0);
	if (!rc && c->naddrs < MAX_ALLOCS)
		c->addrs[c->naddrs++] = (struct reg_addr){region, req.addr};
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* Under the lock: region `region` is gone. */
static void region_addr_drop(struct dp_client *c, int region)
{
	for (unsigned i = 0; i < c->naddrs; i++)
		if (c->addrs[i].region == region) {
			c->addrs[i] = c->addrs[--c->naddrs];
			return;
		}
}

/* A registration whose address the session refused goes again. */
static int registered(struct dp_client *c, int region, const void *addr)
{
	int rc = region_addr_add(c, region, addr);

	if (rc) {
		dp_free(c, region);
		return rc;
	}
	return region;
}

int dp_register_fd(struct dp_client *c, int fd, uint64_t off, uint64_t len)
{
	struct dp_msg_region_register req = {.offset = off, .len = len};
	struct dp_msg_id_reply r;
	int rc;

	if (!c)
		return dp__null_arg(C_REGISTER_FD, -EINVAL);
	/* An fd that is not open would fail the send (EBADF), not the
	 * service: say so here. */
	if (fd < 0 || !len || fcntl(fd, F_GETFD) < 0)
		return dp__fail(C_REGISTER_FD, -EINVAL);
	rc = dp__rpc_locked(c, DP_MSG_REGION_REGISTER, &req, sizeof(req), fd, &r, sizeof(r), NULL,
			    0);
	return rc ? dp__fail(C_REGISTER_FD, rc) : (int)r.id;
}

int dp_register_cuda(struct dp_client *c, void *ptr, size_t len)
{
	struct dp_cuda_reg req;
	struct dp_msg_id_reply r;
	int rc;

	if (!c || !ptr)
		return dp__null_arg(C_REGISTER_CUDA, -EINVAL);
	if (!len)
		return dp__fail(C_REGISTER_CUDA, -EINVAL);
	rc = dp_cuda_export(ptr, len, &req);
	if (rc)
		return req.why ? dp__fail_text(C_REGISTER_CUDA, rc, req.why)
			       : dp__fail(C_REGISTER_CUDA, rc);
	rc = dp__rpc_locked_fds(c, req.type, &req.msg, req.len, req.fds, (int)req.nfds, &r,
				sizeof(r), NULL, 0);
	/* The service imported what it maps: the fds are done here. */
	dp_cuda_reg_close(&req);
	return dp__fail(C_REGISTER_CUDA, rc ? rc : registered(c, (int)r.id, ptr));
}

int dp_register_mem(struct dp_client *c, void *addr, size_t len)
{
	struct dp_msg_region_register_mem req = {.addr = (uint64_t)(uintptr_t)addr, .len = len};
	struct dp_msg_id_reply r;
	int rc;

	if (!c || !addr)
		return dp__null_arg(C_REGISTER_MEM, -EINVAL);
	if (!len || req.addr + req.len < req.addr)
		return dp__fail(C_REGISTER_MEM, -EINVAL);
	/* The service reads the memory of the process that connected: after
	 * a fork, this process's addresses would name its parent's bytes. */
	if (getpid() != c->pid)
		return dp__fail(C_REGISTER_MEM, -EINVAL);
	/* A process that made itself non-dumpable (or a setuid one) asked
	 * not to be read from outside; a service with CAP_SYS_PTRACE (root)
	 * could read it anyway, so the refusal is made here. */
	if (prctl(PR_GET_DUMPABLE) != 1)
		return dp__fail(C_REGISTER_MEM, -EPERM);
	rc = dp__rpc_locked(c, DP_MSG_REGION_REGISTER_MEM, &req, sizeof(req), -1, &r, sizeof(r),
			    NULL, 0);
	return dp__fail(C_REGISTER_MEM, rc ? rc : registered(c, (int)r.id, addr));
}

int dp__register_file(struct dp_client *c, int fd, uint64_t offset, uint64_t len, unsigned flags,
		      uint64_t *len_out)
{
	struct dp_msg_region_file req = {.offset = offset, .len = len, .access = flags};
	struct dp_msg_id_reply r;
	int rc;

	if (!c)
		return dp__null_arg(C_REGISTER_FILE, -EINVAL);
	if (fd < 0 || fcntl(fd, F_GETFD) < 0)
		return dp__fail(C_REGISTER_FILE, -EINVAL);
	rc = dp__rpc_locked(c, DP_MSG_REGION_REGISTER_FILE, &req, sizeof(req), fd, &r, sizeof(r),
			    NULL, 0);
	if (rc)
		return dp__fail(C_REGISTER_FILE, rc);
	if (len_out)
		*len_out = r.len;
	return (int)r.id;
}

int dp_register_file(struct dp_client *c, int fd, uint64_t offset, uint64_t len, unsigned flags)
{
	return dp__register_file(c, fd, offset, len, flags, NULL);
}

int dp__open_file(struct dp_client *c, const char *path, uint64_t offset, uint64_t len,
		  unsigned flags, uint64_t *len_out)
{
	struct dp_msg_region_path req = {.file = {.offset = offset, .len = len, .access = flags}};
	struct dp_msg_id_reply r;
	int rc;

	if (!c || !path)
		return dp__null_arg(C_OPEN_FILE, -EINVAL);
	if (!*path)
		return dp__fail(C_OPEN_FILE, -EINVAL);
	if (strlen(path) >= sizeof(req.path))
		return dp__fail(C_OPEN_FILE, -ENAMETOOLONG);
	strcpy(req.path, path);
	rc = dp__rpc_locked(c, DP_MSG_REGION_OPEN_PATH, &req, sizeof(req), -1, &r, sizeof(r), NULL,
			    0);
	if (rc)
		return dp__fail(C_OPEN_FILE, rc);
	if (len_out)
		*len_out = r.len;
	return (int)r.id;
}

int dp_open_file(struct dp_client *c, const char *path, uint64_t offset, uint64_t len,
		 unsigned flags)
{
	return dp__open_file(c, path, offset, len, flags, NULL);
}

/* A sealed memfd of `len` bytes, mapped; huge pages when asked and the host
 * has them reserved (hugetlbfs fails at mmap time when it has none). */
static int map_memfd(size_t len, bool huge, int *fd_out, void **addr)
{
	void *p;
	int fd;

	fd = memfd_create("dataplane", MFD_CLOEXEC | MFD_ALLOW_SEALING | (huge ? MFD_HUGETLB : 0));
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0) {
		close(fd);
		return -errno;
	}
	/* The service relies on the size staying put. */
	fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return -ENOMEM;
	}
	*fd_out = fd;
	*addr = p;
	return 0;
}

int dp__alloc(struct dp_client *c, size_t len, unsigned flags, void **addr)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), huge = 2u << 20, maplen;
	void *p = NULL;
	int fd = -1, region, rc = -1;

	bool full;

	if (!len || flags & ~DP_ALLOC_HUGE)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	full = c->nallocs == MAX_ALLOCS;
	pthread_mutex_unlock(&c->lock);
	if (full)
		return -ENOSPC;
	if (flags & DP_ALLOC_HUGE) {
		maplen = (len + huge - 1) & ~(huge - 1);
		rc = map_memfd(maplen, true, &fd, &p);
	}
	if (rc) {
		maplen = (len + page - 1) & ~(page - 1);
		rc = map_memfd(maplen, false, &fd, &p);
		if (rc)
			return rc;
		/* Transparent huge pages, where shmem allows them. */
		if (flags & DP_ALLOC_HUGE)
			madvise(p, maplen, MADV_HUGEPAGE);
	}
	region = dp_register_fd(c, fd, 0, len);
	close(fd);
	if (region < 0) {
		munmap(p, maplen);
		return region;
	}
	pthread_mutex_lock(&c->lock);
	full = c->nallocs == MAX_ALLOCS; /* other threads' dp_alloc meanwhile */
	if (!full)
		c->allocs[c->nallocs++] =
			(struct alloc){.region = region, .addr = p, .len = maplen};
	pthread_mutex_unlock(&c->lock);
	if (full) {
		dp_free(c, region);
		munmap(p, maplen);
		return -ENOSPC;
	}
	region = registered(c, region, p); /* dp_free unmaps it on failure */
	if (region >= 0)
		*addr = p;
	return region;
}

int dp_alloc(struct dp_client *c, size_t len, unsigned flags, void **addr)
{
	if (!c || !addr)
		return dp__null_arg(C_ALLOC, -EINVAL);
	return dp__fail(C_ALLOC, dp__alloc(c, len, flags, addr));
}

int dp__alloc_detach(struct dp_client *c, int region, void **addr, size_t *len)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&c->lock);
	for (unsigned i = 0; i < c->nallocs; i++)
		if (c->allocs[i].region == region) {
			*addr = c->allocs[i].addr;
			*len = c->allocs[i].len;
			c->allocs[i] = c->allocs[--c->nallocs];
			rc = 0;
			break;
		}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int dp_free(struct dp_client *c, int region)
{
	struct dp_msg_id req = {.id = (uint32_t)region};
	int rc;

	if (!c)
		return dp__null_arg(C_FREE, -EBADF);
	if (region < 0)
		return dp__fail(C_FREE, -EBADF);
	pthread_mutex_lock(&c->lock);
	rc = dp__rpc(c, DP_MSG_REGION_FREE, &req, sizeof(req), -1, NULL,
		     sizeof(struct dp_msg_status), NULL, 0);
	if (!rc)
		region_addr_drop(c, region);
	for (unsigned i = 0; i < c->nallocs; i++)
		if (c->allocs[i].region == region) {
			munmap(c->allocs[i].addr, c->allocs[i].len);
			c->allocs[i] = c->allocs[--c->nallocs];
			break;
		}
	pthread_mutex_unlock(&c->lock);
	return dp__fail(C_FREE, rc);
}
