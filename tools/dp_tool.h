/* SPDX-License-Identifier: MIT */
/*
 * dp_tool.h - what the command-line tools share: the --version line, a
 * failed dp_connect told in words that name the socket that was tried, one
 * descriptor run to its completion, and a stream of WRITEs kept in flight.
 */
#ifndef DP_TOOL_H
#define DP_TOOL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "dataplane.h"
#include "dp_version.h"
#include "sockpath.h"

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
	if (path)
		return path;
	dp_default_socket(buf, len);
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

/*
 * Submits the one descriptor @d on an otherwise idle queue and waits for its
 * completion: busy-polling (dp_poll) when @wait_ms < 0, else sleeping in
 * dp_wait up to @wait_ms. Returns 0 when d's completion came and succeeded
 * (it is in *cqe), else the error: dp_submit's (-EAGAIN: no room), the
 * wait's (-ETIMEDOUT: none in time), the completion's status, or -EBADMSG
 * for another descriptor's completion. *ns: from the submit to the
 * completion seen.
 */
static inline int dp_tool_run_one(struct dp_queue *q, const struct dp_desc *d, int wait_ms,
				  struct dp_cqe *cqe, uint64_t *ns)
{
	uint64_t t0 = dp_now_ns();
	int rc = dp_submit(q, d, 1);

	if (rc != 1)
		return rc < 0 ? rc : -EAGAIN;
	if (wait_ms < 0)
		while ((rc = dp_poll(q, cqe, 1)) == 0)
			;
	else
		rc = dp_wait(q, cqe, 1, wait_ms);
	*ns = dp_now_ns() - t0;
	if (rc != 1)
		return rc < 0 ? rc : -ETIMEDOUT;
	return cqe->status ? cqe->status : cqe->user_data != d->user_data ? -EBADMSG : 0;
}

/*
 * Streams @total WRITEs of @len bytes from region @src to segment @seg, at
 * the same offset on both sides, the offsets rotating over [0, @span), with
 * up to @depth in flight; each wait for completions lasts up to @wait_ms.
 * Returns 0 with the GB/s (bytes per ns) in *gbps and the last completion's
 * flags in *flags; else the error: of dp_submit (-EAGAIN: no room) or the
 * wait (-ETIMEDOUT: nothing in time), *what then naming that step ("submit",
 * "wait"), or a completion's status (*what left as the caller set it).
 */
static inline int dp_tool_write_stream(struct dp_queue *q, int src, int seg, uint64_t len,
				       uint64_t span, unsigned total, unsigned depth, int wait_ms,
				       double *gbps, uint32_t *flags, const char **what)
{
	struct dp_cqe cqe[64];
	unsigned sent = 0, done = 0, batch = depth < 64 ? depth : 64;
	uint64_t t0 = dp_now_ns();

	while (done < total) {
		while (sent < total && sent - done < depth) {
			uint64_t off = (sent % (span / len)) * len;
			struct dp_desc d;
			int rc;

			dp_prep_write(&d, src, off, seg, off, len, sent);
			if ((rc = dp_submit(q, &d, 1)) != 1) {
				*what = "submit";
				return rc < 0 ? rc : -EAGAIN;
			}
			sent++;
		}
		int k = dp_wait(q, cqe, batch, wait_ms);

		if (k <= 0) {
			*what = "wait";
			return k < 0 ? k : -ETIMEDOUT;
		}
		for (int i = 0; i < k; i++) {
			if (cqe[i].status)
				return cqe[i].status;
			*flags = cqe[i].flags;
		}
		done += (unsigned)k;
	}
	*gbps = (double)total * len / (double)(dp_now_ns() - t0);
	return 0;
}

#endif
