/* SPDX-License-Identifier: MIT */
/*
 * host_region.c - the host engine's kind of memory: a client's memfd,
 * sealed against shrinking and mapped here (DP_MSG_REGION_REGISTER). The
 * copies themselves are host.c's; the mapping goes in host_region_close
 * there.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"

/* Only memory files: a seal against shrinking means a client can never
 * turn our access to its memory into SIGBUS. 0 or -EPERM, logged. */
static int host_seal(const struct client *c, int fd)
{
	int seals = fcntl(fd, F_GET_SEALS);
	const char *why = "the memfd refused the seal";

	if (seals < 0)
		return -EINVAL;
	if (seals & F_SEAL_SHRINK || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0)
		return 0;
	/* EPERM: F_SEAL_SEAL is set (a memfd made without MFD_ALLOW_SEALING,
	 * or one sealed against further seals) or the fd is read-only.
	 * Without the seal the client could shrink the file under our
	 * mapping, so there is no unsealed way. The client can fix this, or
	 * register its mapping with dp_register_mem: say so. c->name is
	 * printable ASCII (on_hello). */
	if ((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY)
		why = "the memfd is open read-only";
	else if (seals & F_SEAL_SEAL)
		why = "the memfd does not allow sealing (F_SEAL_SEAL: memfd_create without "
		      "MFD_ALLOW_SEALING)";
	log_warn("client %u (pid %d '%s'): region refused (EPERM): %s; the service seals memfds "
		 "against shrinking. Create it with memfd_create(name, MFD_ALLOW_SEALING), pass it "
		 "read-write, or register its mapping with dp_register_mem()",
		 c->id, (int)c->pid, c->name, why);
	return -EPERM;
}

static int host_region_open(struct region *reg, struct client *c, const void *payload, int *fds,
			    unsigned nfds)
{
	int fd = fds[0]; /* the memfd: ctlmsg.c saw exactly one come */

	const struct dp_msg_region_register *req = payload;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t aligned = req->offset & ~(page - 1);
	uint64_t map_len = req->len + (req->offset - aligned), unit, charge;
	struct stat st;
	void *map;
	int rc = -EINVAL;

	(void)nfds;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		goto out_fd;
	if (req->offset > (uint64_t)st.st_size || req->len > (uint64_t)st.st_size - req->offset)
		goto out_fd;
	/* What the mapping takes: whole pages of the file's own size (a
	 * hugetlb memfd's are 2 MiB and more; docs/reliability.md, "Limits"). */
	unit = (uint64_t)st.st_blksize > page && !((uint64_t)st.st_blksize & (st.st_blksize - 1))
		       ? (uint64_t)st.st_blksize
		       : page;
	charge = ((req->offset + req->len + unit - 1) & ~(unit - 1)) - (req->offset & ~(unit - 1));
	/* Checked before anything is done to the memfd or our address space:
	 * a refusal changes nothing. */
	rc = client_map_quota(c, charge);
	if (!rc)
		rc = host_seal(c, fd);
	if (rc)
		goto out_fd;
	map = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)aligned);
	if (map == MAP_FAILED) {
		rc = errno == EACCES ? -EACCES : -ENOMEM;
		goto out_fd;
	}
	reg->kind = REGION_HOST;
	/* Kept (closed with the mapping, host.c): a service of this host that
	 * opens an export of it is given the memfd (samehost.c). */
	reg->fd = fd;
	reg->file_off = req->offset;
	reg->map = map;
	reg->map_len = map_len;
	reg->base = (uint8_t *)map + (req->offset - aligned);
	reg->len = req->len;
	reg->charged = charge;
	return DP_ACCESS_RW;
out_fd:
	close(fd);
	return rc;
}

const struct engine_region_msg host_region_msgs[] = {
	{DP_MSG_REGION_REGISTER, "host", host_region_open},
	{0},
};
