/* SPDX-License-Identifier: MIT */
/*
 * sockpath.h - where a client looks for the service when it is given no
 * path: $DP_SOCKET, else $XDG_RUNTIME_DIR/dataplane/dataplane.sock, else
 * /run/dataplane/dataplane.sock (docs/api.md, dp_connect). Header-only and
 * internal: libclient and the tools include it.
 */
#ifndef DP_COMMON_SOCKPATH_H
#define DP_COMMON_SOCKPATH_H

#include <stdio.h>
#include <stdlib.h>

static inline void dp_default_socket(char *out, size_t len)
{
	const char *env = getenv("DP_SOCKET"), *xdg = getenv("XDG_RUNTIME_DIR");

	if (env && *env)
		snprintf(out, len, "%s", env);
	else if (xdg && *xdg)
		snprintf(out, len, "%s/dataplane/dataplane.sock", xdg);
	else
		snprintf(out, len, "/run/dataplane/dataplane.sock");
}

#endif /* DP_COMMON_SOCKPATH_H */
