/* SPDX-License-Identifier: MIT */
/*
 * helpers_netns.c - network namespaces of the multi-host suites (as
 * root): made, entered by a command or a service, deleted by the suites'
 * .fini.
 */
#include <stdarg.h>

#include "helpers.h"

/* The namespaces netns_add made in this test process, for netns_del_all. */
static char netns_made[8][32];
static unsigned netns_nmade;

int netns_add(const char *ns)
{
	cr_assert_lt(netns_nmade, 8, "more namespaces than netns_del_all keeps");
	cr_assert_lt(strlen(ns), sizeof(netns_made[0]), "namespace name %s too long", ns);
	if (run_sh("ip netns add %s", ns))
		return -1;
	if (netns_sh(ns, "ip link set lo up")) {
		run_sh("ip netns del %s", ns);
		return -1;
	}
	snprintf(netns_made[netns_nmade++], sizeof(netns_made[0]), "%s", ns);
	return 0;
}

void netns_del_all(void)
{
	while (netns_nmade)
		run_sh("ip netns del %s", netns_made[--netns_nmade]);
}

void netns_teardown(void)
{
	fab_teardown(); /* the services first: they hold the namespaces */
	netns_del_all();
}

int netns_sh(const char *ns, const char *fmt, ...)
{
	char cmd[448];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return run_sh("nsenter --net=/run/netns/%s %s", ns, cmd);
}

void netns_prefix(const char *ns, char enter[64], const char *prefix[3])
{
	snprintf(enter, 64, "--net=/run/netns/%s", ns);
	prefix[0] = "nsenter";
	prefix[1] = enter;
	prefix[2] = NULL;
}
