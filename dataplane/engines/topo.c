/* SPDX-License-Identifier: MIT */
/*
 * topo.c - PCI distances from sysfs (topo.h). /sys/bus/pci/devices/BDF is
 * a link into /sys/devices, whose path is the device's place in the PCI
 * tree: root complex, root port, switch ports, the device. Two devices
 * behind one PCIe switch share every component of that path but their
 * own ports; a GPU and a NIC on another root complex (or socket) share
 * only the root. What is not in the tree (tcp on a veth, a NIC libfabric
 * gives no PCI address) has no distance, and then no rail is preferred.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo.h"

int topo_bdf_norm(const char *in, char out[TOPO_BDF_LEN])
{
	unsigned dom, bus, dev, fn;
	int end = -1;

	/* Widths, and the end of the string reached: no "0x" or sign a bare
	 * %x would take. */
	if (!in || strspn(in, "0123456789abcdefABCDEF:.") != strlen(in) ||
	    sscanf(in, "%8x:%2x:%2x.%1x%n", &dom, &bus, &dev, &fn, &end) != 4 ||
	    end != (int)strlen(in) || dom > 0xffff || dev > 0x1f || fn > 7)
		return -EINVAL;
	snprintf(out, TOPO_BDF_LEN, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
	return 0;
}

/* The device's place in the tree (malloc'd), or NULL. */
static char *pci_path(const char *sysfs, const char *bdf)
{
	char link[PATH_MAX], norm[TOPO_BDF_LEN];

	if (topo_bdf_norm(bdf, norm) ||
	    snprintf(link, sizeof(link), "%s/bus/pci/devices/%s", sysfs, norm) >= (int)sizeof(link))
		return NULL;
	return realpath(link, NULL);
}

static int numa_node(const char *path)
{
	char file[PATH_MAX];
	FILE *f;
	int node = -1;

	if (snprintf(file, sizeof(file), "%s/numa_node", path) >= (int)sizeof(file))
		return -1;
	f = fopen(file, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%d", &node) != 1)
		node = -1;
	fclose(f);
	return node;
}

/* Path components in @p. */
static int components(const char *p)
{
	int n = 0;

	for (const char *c = p; *c; c++)
		if (*c != '/' && (c == p || c[-1] == '/'))
			n++;
	return n;
}

/* The length of the longest run of whole path components @a and @b both
 * begin with. */
static size_t common_prefix(const char *a, const char *b)
{
	size_t i, common = 0;

	for (i = 0; a[i] && a[i] == b[i]; i++)
		if (a[i] == '/')
			common = i;
	if ((!a[i] || a[i] == '/') && (!b[i] || b[i] == '/'))
		common = i;
	return common;
}

int topo_distance(const char *sysfs, const char *a, const char *b)
{
	char *pa = pci_path(sysfs, a), *pb = pci_path(sysfs, b);
	int d = -ENOENT, na, nb;

	if (pa && pb) {
		size_t common = common_prefix(pa, pb);

		d = components(pa + common) + components(pb + common);
		na = numa_node(pa);
		nb = numa_node(pb);
		if (na >= 0 && nb >= 0 && na != nb)
			d += TOPO_FAR_NUMA;
	}
	free(pa);
	free(pb);
	return d;
}

uint32_t topo_nearest(const char *sysfs, const char *dev, const char *const *nics, unsigned n,
		      int *dist)
{
	uint32_t mask = 0;
	int best = INT_MAX;

	for (unsigned i = 0; i < n && i < 32; i++) {
		int d = nics[i] ? topo_distance(sysfs, dev, nics[i]) : -ENOENT;

		if (d < 0 || d > best)
			continue;
		if (d < best)
			mask = 0;
		best = d;
		mask |= 1u << i;
	}
	if (dist)
		*dist = mask ? best : -ENOENT;
	return mask;
}
