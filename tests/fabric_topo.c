/* SPDX-License-Identifier: MIT */
/*
 * fabric_topo - the rails nearest a GPU (dataplane/engines/topo.c): PCI
 * distances on sysfs trees laid out like a GPU host's (the PCI tree is
 * the one part made up here: this machine has no GPU and no EFA NIC),
 * then on this machine's own /sys.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "topo.h"

static char root[64];

static void mkdirs(const char *path)
{
	char buf[PATH_MAX];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			mkdir(buf, 0755);
			*p = '/';
		}
	cr_assert(mkdir(buf, 0755) == 0 || errno == EEXIST, "mkdir %s", buf);
}

/* A device at @place (a path below devices/) named by its last
 * component, linked from bus/pci/devices as on a host; its NUMA node
 * unless @node < -1. */
static void pci_dev(const char *place, int node)
{
	char dir[PATH_MAX], link[PATH_MAX], target[PATH_MAX];

	cr_assert_lt(strlen(place), 1024);
	const char *bdf = strrchr(place, '/') + 1;

	snprintf(dir, sizeof(dir), "%s/devices/%s", root, place);
	mkdirs(dir);
	snprintf(link, sizeof(link), "%s/bus/pci/devices", root);
	mkdirs(link);
	snprintf(link, sizeof(link), "%s/bus/pci/devices/%s", root, bdf);
	snprintf(target, sizeof(target), "../../../devices/%s", place);
	cr_assert_eq(symlink(target, link), 0, "symlink %s", link);
	if (node >= -1) {
		char file[PATH_MAX + 16];
		FILE *f;

		snprintf(file, sizeof(file), "%s/numa_node", dir);
		f = fopen(file, "w");
		cr_assert(f);
		fprintf(f, "%d\n", node);
		fclose(f);
	}
}

/*
 * Two sockets. Socket 0: a PCIe switch (root port 00:01.0, switch
 * 01:00.0) with GPU 0 (03:00.0), GPU 1 (05:00.0) and NICs a0 (04:00.0),
 * a1 (06:00.0), each on a port of its own; a NIC b0 (11:00.0) on another
 * root port; a NIC with two functions (21:00.0, 21:00.1). Socket 1: GPU 2
 * (83:00.0) behind its own root port, NIC c0 (84:00.0) beside it on a
 * second one.
 */
#define SW "pci0000:00/0000:00:01.0/0000:01:00.0"
static void host_tree(void)
{
	snprintf(root, sizeof(root), "/tmp/dp-topo-XXXXXX");
	cr_assert(mkdtemp(root));
	pci_dev(SW "/0000:02:00.0/0000:03:00.0", 0);
	pci_dev(SW "/0000:02:01.0/0000:04:00.0", 0);
	pci_dev(SW "/0000:02:02.0/0000:05:00.0", 0);
	pci_dev(SW "/0000:02:03.0/0000:06:00.0", 0);
	pci_dev("pci0000:00/0000:00:02.0/0000:11:00.0", 0);
	pci_dev("pci0000:00/0000:00:03.0/0000:21:00.0", -1);
	pci_dev("pci0000:00/0000:00:03.0/0000:21:00.1", -1);
	pci_dev("pci0000:80/0000:80:01.0/0000:83:00.0", 1);
	pci_dev("pci0000:80/0000:80:02.0/0000:84:00.0", 1);
	pci_dev("pci0000:00/0000:00:01.0", 0); /* the switch's root port */
}

static void rm_tree(void)
{
	char cmd[PATH_MAX + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(fabric_topo, .timeout = 30);

Test(fabric_topo, pci_addresses_as_sysfs_names_them)
{
	char out[TOPO_BDF_LEN];

	cr_assert_eq(topo_bdf_norm("00000000:3B:00.0", out), 0);
	cr_assert_str_eq(out, "0000:3b:00.0");
	cr_assert_eq(topo_bdf_norm("0001:c4:1f.7", out), 0);
	cr_assert_str_eq(out, "0001:c4:1f.7");
	cr_assert_eq(topo_bdf_norm("3b:00.0", out), -EINVAL);
	cr_assert_eq(topo_bdf_norm("0000:3b:20.0", out), -EINVAL);
	cr_assert_eq(topo_bdf_norm("0000:3b:00.8", out), -EINVAL);
	cr_assert_eq(topo_bdf_norm("0000:3b:00.0x", out), -EINVAL);
	cr_assert_eq(topo_bdf_norm("", out), -EINVAL);
	cr_assert_eq(topo_bdf_norm(NULL, out), -EINVAL);
}

Test(fabric_topo, distances_in_the_pci_tree, .init = host_tree, .fini = rm_tree)
{
	/* One device; two functions of one device; behind one switch. */
	cr_assert_eq(topo_distance(root, "0000:03:00.0", "0000:03:00.0"), 0);
	cr_assert_eq(topo_distance(root, "0000:21:00.0", "0000:21:00.1"), 2);
	cr_assert_eq(topo_distance(root, "0000:03:00.0", "0000:04:00.0"), 4);
	cr_assert_eq(topo_distance(root, "0000:04:00.0", "0000:03:00.0"), 4);
	/* Through the root complex: up 4 from GPU 0, down 2 to b0. */
	cr_assert_eq(topo_distance(root, "0000:03:00.0", "0000:11:00.0"), 6);
	/* Another socket: up to the top of the tree, and the NUMA penalty. */
	cr_assert_eq(topo_distance(root, "0000:03:00.0", "0000:84:00.0"), 8 + TOPO_FAR_NUMA);
	/* An unknown NUMA node (-1) adds nothing. */
	cr_assert_eq(topo_distance(root, "0000:83:00.0", "0000:21:00.0"), 6);
	/* A bridge and a device below it: the steps down alone. */
	cr_assert_eq(topo_distance(root, "0000:00:01.0", "0000:03:00.0"), 3);
	/* CUDA's spelling finds the same device. */
	cr_assert_eq(topo_distance(root, "00000000:03:00.0", "0000:04:00.0"), 4);
	cr_assert_eq(topo_distance(root, "0000:03:00.0", "0000:99:00.0"), -ENOENT);
	cr_assert_eq(topo_distance(root, "junk", "0000:03:00.0"), -ENOENT);
	cr_assert_eq(topo_distance("/nonexistent", "0000:03:00.0", "0000:03:00.0"), -ENOENT);
}

Test(fabric_topo, the_nearest_rails_of_each_gpu, .init = host_tree, .fini = rm_tree)
{
	/* Rails in the order a provider might list them; rail 5 is tcp on a
	 * veth (no PCI address), rail 6 a NIC missing from the tree. */
	const char *nics[] = {"0000:84:00.0", "0000:04:00.0", "0000:11:00.0", "0000:06:00.0",
			      "0000:21:00.0", NULL,	      "0000:aa:00.0"};
	unsigned n = sizeof(nics) / sizeof(nics[0]);
	int dist;

	/* GPUs 0 and 1 share their switch with a0 and a1: rails 1 and 3. */
	cr_assert_eq(topo_nearest(root, "0000:03:00.0", nics, n, &dist), 0x0a);
	cr_assert_eq(dist, 4);
	cr_assert_eq(topo_nearest(root, "0000:05:00.0", nics, n, &dist), 0x0a);
	/* GPU 2's socket has c0 alone. */
	cr_assert_eq(topo_nearest(root, "0000:83:00.0", nics, n, &dist), 0x01);
	cr_assert_eq(dist, 4);
	/* No rail with a place in the tree, or a GPU without one: no
	 * preference (0), every rail is used. */
	cr_assert_eq(topo_nearest(root, "0000:03:00.0", nics + 5, 2, &dist), 0);
	cr_assert_eq(dist, -ENOENT);
	cr_assert_eq(topo_nearest(root, "0000:99:00.0", nics, n, NULL), 0);
	cr_assert_eq(topo_nearest(root, "0000:03:00.0", nics, 0, NULL), 0);
}

/* This machine's own tree: every device is at distance 0 from itself
 * and at the same distance both ways from every other (1 at least: a
 * bridge and a device right behind it). */
Test(fabric_topo, this_machines_sysfs)
{
	char bdf[8][TOPO_BDF_LEN];
	unsigned n = 0;
	DIR *d = opendir("/sys/bus/pci/devices");
	struct dirent *e;

	if (!d)
		cr_skip_test("no /sys/bus/pci here");
	while ((e = readdir(d)) && n < 8)
		if (e->d_name[0] != '.' && !topo_bdf_norm(e->d_name, bdf[n]))
			n++;
	closedir(d);
	if (!n)
		cr_skip_test("no PCI device in /sys/bus/pci/devices");
	for (unsigned i = 0; i < n; i++) {
		cr_assert_eq(topo_distance("/sys", bdf[i], bdf[i]), 0, "%s", bdf[i]);
		for (unsigned j = 0; j < n; j++) {
			int ab = topo_distance("/sys", bdf[i], bdf[j]);

			cr_assert_eq(ab, topo_distance("/sys", bdf[j], bdf[i]));
			cr_assert(i == j || ab >= 1, "%s %s: %d", bdf[i], bdf[j], ab);
		}
	}
}
