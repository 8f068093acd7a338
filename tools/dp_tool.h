/* SPDX-License-Identifier: MIT */
/*
 * dp_tool.h - what the command-line tools share: the --version line, and a
 * failed dp_connect told in words that name the socket that was tried.
 */
#ifndef DP_TOOL_H
#define DP_TOOL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataplane.h"
#include "dp_version.h"

/* "ring-stat (dataplane) 0.9.0" on stdout. */
static inline void dp_tool_version(const char *prog)
{
	printf("%s (dataplane) %s\n", prog, DP_VERSION_STRING);
}

/* The socket dp_connect(path, ...) tries: path, else $DP_SOCKET, else
 * $XDG_RUNTIME_DIR/dataplane/dataplane.sock, else
 * /run/dataplane/dataplane.sock (docs/api.md). */
static inline const char *dp_tool_socket(const char *path, char *buf, size_t len)
{
	const char *env = getenv("DP_SOCKET"), *xdg = getenv("XDG_RUNTIME_DIR");

	if (path)
		return path;
	if (env && *env)
		snprintf(buf, len, "%s", env);
	else if (xdg && *xdg)
		snprintf(buf, len, "%s/dataplane/dataplane.sock", xdg);
	else
		snprintf(buf, len, "/run/dataplane/dataplane.sock");
	return buf;
}

/* For a failed dp_connect(path, ...): "PROG: cannot connect to SOCKET: why". */
static inline void dp_tool_connect_error(const char *prog, const char *path, int rc)
{
	char buf[256];
	const char *sock = dp_tool_socket(path, buf, sizeof(buf));
	const char *why;

	switch (-rc) {
	case ECONNREFUSED:
	case ENOENT:
	case ENOTDIR:
		/* The errno says which: no socket file, or nobody behind it. */
		fprintf(stderr, "%s: cannot connect to %s: no dataplaned is listening there (%s)\n",
			prog, sock, strerror(-rc));
		return;
	case EACCES:
	case EPERM:
		why = "permission denied (the socket is mode 0660: run as the service's user "
		      "or a member of its group)";
		break;
	case ENAMETOOLONG:
		why = "path too long for a Unix socket (at most 107 bytes)";
		break;
	case EPROTONOSUPPORT:
		why = "the dataplaned there speaks another ABI version (use the tools built "
		      "with it)";
		break;
	default:
		why = dp_strerror(rc);
		break;
	}
	fprintf(stderr, "%s: cannot connect to %s: %s\n", prog, sock, why);
}

#endif
