/* SPDX-License-Identifier: MIT */
/*
 * topo.h - how near a NIC is to a GPU, from the PCI tree in sysfs: the
 * fabric engine's choice of rails for GPU memory (fabric_rail.c). Pure
 * functions of a sysfs root and PCI addresses, with no state of the
 * service, so that tests drive them on a tree of their own.
 */
#ifndef DP_TOPO_H
#define DP_TOPO_H

#include <stdint.h>

/* Holds a PCI address as sysfs names it, "0000:3b:00.0". */
#define TOPO_BDF_LEN 16

/* A PCI address in any case and domain width ("00000000:3B:00.0" as CUDA
 * writes it) in sysfs' form into @out: 0, or -EINVAL. */
int topo_bdf_norm(const char *in, char out[TOPO_BDF_LEN]);

/* The distance between PCI devices @a and @b under @sysfs ("/sys" on a
 * host): the steps from one up to their nearest common ancestor in the
 * PCI tree and down to the other (0 for one device, 2 for two devices on
 * one bus, 4 for two behind one switch on ports of their own), plus
 * TOPO_FAR_NUMA when their NUMA nodes are known and differ. -ENOENT when
 * either is not in the tree. */
#define TOPO_FAR_NUMA 64
int topo_distance(const char *sysfs, const char *a, const char *b);

/* Of @n NICs (@nics[i]: a PCI address, or NULL for a NIC on no PCI bus),
 * the mask of those nearest to PCI device @dev (bit i: nics[i]), and their
 * distance in @dist. 0 when no NIC's distance is known: every rail then. */
uint32_t topo_nearest(const char *sysfs, const char *dev, const char *const *nics, unsigned n,
		      int *dist);

#endif /* DP_TOPO_H */
