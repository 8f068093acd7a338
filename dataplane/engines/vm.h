/* SPDX-License-Identifier: MIT */
/*
 * vm.h - what the vm engine (vm.c) lends others: memory of a client
 * process (REGION_VM, dp_register_mem) as the export of a same-host peer
 * (samehost.c: the owner's pidfd is passed, the importer makes a REGION_VM
 * of its own over it) and as an export the owner stages for peers over the
 * fabric (stage.c: process_vm_readv/writev, vm_copy_start, in place of a
 * memcpy).
 */
#ifndef DP_VM_H
#define DP_VM_H

#include <stdbool.h>
#include <stdint.h>

#include "dp_internal.h"

/* Exporter: the pidfd of a REGION_VM's process (still the region's: dup
 * it to send it) and the address of its byte 0 there. */
int vm_region_pidfd(const struct region *r, uint64_t *addr);

/*
 * Importer (control thread): makes @reg a REGION_VM over [addr, addr + len)
 * of the process @pidfd names (dup'ed: the caller keeps its fd), as another
 * service of this host exported it; @pid is that process as this service
 * sees it (the pidfd's fdinfo; <= 0: gone, or in a pid namespace we cannot
 * see). The first and last byte are probed: -EPERM this service may not
 * access that process (another uid and not root, Yama ptrace_scope, not
 * dumpable), -EFAULT not mapped, -ESRCH gone, -EMFILE, -ENOMEM.
 */
int vm_region_import(struct region *reg, int pidfd, long pid, uint64_t addr, uint64_t len);

/* A copy vm_copy_start started, until vm_copy_poll says it is over. */
struct vm_op;
struct vm_ticket {
	struct vm_op *op; /* with the poller's vm worker */
	uint64_t since;
	int rc;
	bool pending;
	bool dropped; /* given up on at shutdown: the worker may still write the buffer */
};

/*
 * Poller @p: starts n bytes between byte @off of REGION_VM @r and @host,
 * into the region when @to_region, on @p's vm worker thread (vm.c): the
 * kernel may hold the call on a page of the client's, and then it holds
 * that thread, never the poller. 0 started, or -EINVAL, -ENOMEM. The copy
 * holds a reference on @r of its own; @host must stay valid until
 * vm_copy_poll says the copy is over, and for good if t->dropped.
 */
int vm_copy_start(struct poller *p, const struct region *r, uint64_t off, void *host, uint64_t n,
		  bool to_region, struct vm_ticket *t);

/*
 * Poller @p: whether @t's copy is over; then t->rc is its status: 0,
 * -EFAULT (a page not mapped any more), -ESRCH (the process is gone),
 * -EPERM, -ENOMEM, -EIO; or -ECANCELED when the service is stopping, and
 * then, if the worker has been held in the call for 5 s, t->dropped: it is
 * left behind, and may still write @host.
 */
bool vm_copy_poll(struct poller *p, struct vm_ticket *t);

#endif /* DP_VM_H */
