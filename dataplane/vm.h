/* SPDX-License-Identifier: MIT */
/*
 * vm.h - memory a client process already has (dp_register_mem): the vm
 * engine (vm.c) reads and writes it with process_vm_readv/process_vm_writev,
 * one system call per slice, pinned to the process through a pidfd.
 * docs/architecture.md, "Memory of a client process".
 */
#ifndef DP_VM_H
#define DP_VM_H

#include <stdint.h>

#include "dp_internal.h"

/*
 * Makes @reg (zeroed) a REGION_VM over bytes [@addr, @addr + @len) of the
 * process that opened @c's connection: a pidfd of it (SO_PEERPIDFD, else
 * pidfd_open of its SO_PEERCRED pid) and a probe of the first and last
 * byte. 0, or -EFAULT a byte of the range is not mapped in that process,
 * -ESRCH the process is gone, -EPERM the service may not access its memory
 * (another uid while the service is not root, a non-dumpable process, Yama
 * ptrace_scope), -EMFILE / -ENOMEM. Control thread.
 */
int vm_region_open(struct region *reg, const struct client *c, uint64_t addr, uint64_t len);

#endif /* DP_VM_H */
