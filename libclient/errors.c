/* SPDX-License-Identifier: MIT */
/*
 * errors.c - libclient's error texts: dp_strerror() for an errno, and
 * dp_last_error(), which names the call that failed last on this thread and
 * says what its errno means for that call (dataplane.h, docs/api.md). The
 * other files record a failure with dp__fail() (client_internal.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "client_internal.h"

static const char *const call_names[] = {
	[C_ANY] = "dataplane",
	[C_CONNECT] = "dp_connect",
	[C_QUEUE_CREATE] = "dp_queue_create",
	[C_QUEUE_DESTROY] = "dp_queue_destroy",
	[C_ALLOC] = "dp_alloc",
	[C_FREE] = "dp_free",
	[C_REGISTER_FD] = "dp_register_fd",
	[C_REGISTER_CUDA] = "dp_register_cuda",
	[C_REGISTER_MEM] = "dp_register_mem",
	[C_REGISTER_FILE] = "dp_register_file",
	[C_OPEN_FILE] = "dp_open_file",
	[C_EXPORT] = "dp_segment_export",
	[C_UNEXPORT] = "dp_segment_unexport",
	[C_OPEN] = "dp_segment_open",
	[C_CLOSE] = "dp_segment_close",
	[C_SUBMIT] = "dp_submit",
	[C_POLL] = "dp_poll",
	[C_WAIT] = "dp_wait",
	[C_QUEUE_STATS] = "dp_queue_stats",
	[C_NOTIFY_OPEN] = "dp_notify_open",
	[C_NOTIFY_POLL] = "dp_notify_poll",
	[C_NOTIFY_WAIT] = "dp_notify_wait",
	[C_NOTIFY_FD] = "dp_notify_fd",
	[C_SESSION_CREATE] = "dp_session_create",
	[C_SESSION_OPEN] = "dp_session_open",
	[C_NOTIFY_RECV] = "dp_notify_recv",
	[C_NOTIFY_SEND] = "dp_notify_send",
};

_Static_assert(DP_SEGMENT_NAME_MAX == DP_NAME_MAX - 1, "dataplane.h and dp_proto.h agree");

#define NAME_RULE                                                                                  \
	"a segment name is 1..63 bytes of [A-Za-z0-9._:/-], no empty, '.' or '..' component"

/* What each call's documented errors mean for that call (dataplane.h,
 * docs/api.md); C_ANY rows serve every call, after its own rows. */
static const struct {
	enum call call;
	int err;
	const char *text;
} call_errors[] = {
	{C_CONNECT, -ENOENT,
	 "no service listens on that socket (is dataplaned running? $DP_SOCKET)"},
	{C_CONNECT, -ECONNREFUSED, "no service listens on that socket (is dataplaned running?)"},
	{C_CONNECT, -EPROTONOSUPPORT, "client library and service speak different ABI versions"},
	{C_CONNECT, -ENAMETOOLONG, "socket path too long for a Unix socket"},
	{C_CONNECT, -EACCES, "no permission to connect to the service's socket"},
	{C_CONNECT, -EUSERS, "the service serves its --max-clients clients already"},
	{C_CONNECT, -EDQUOT,
	 "this uid holds the service's --max-clients-per-uid connections already"},
	{C_CONNECT, -EMFILE,
	 "this process holds the service's --max-clients-per-process connections already "
	 "(other processes, of this uid too, still connect)"},
	{C_QUEUE_CREATE, -EINVAL, "depth not a power of two, or above the service's --max-depth"},
	{C_QUEUE_CREATE, -EMFILE, "the service's --max-queues queues are open already"},
	{C_ALLOC, -EINVAL, "length 0 or unknown flags"},
	{C_ALLOC, -ENOSPC, "the client's region table is full (1024 regions)"},
	{C_ALLOC, -EDQUOT, "this uid's --max-mapped-gb-per-uid of the service is used up"},
	{C_ALLOC, -EFBIG, "this process's --max-mapped-gb-per-process of the service is used up"},
	{C_REGISTER_FD, -EINVAL,
	 "the fd is not open or not a memfd, or offset + length lies beyond its size"},
	{C_REGISTER_FD, -EPERM,
	 "the service cannot seal the memfd against shrinking: it was made without "
	 "MFD_ALLOW_SEALING (create it with memfd_create(name, MFD_ALLOW_SEALING)), has "
	 "F_SEAL_SEAL set, or is open read-only; or register its mapping with dp_register_mem()"},
	{C_REGISTER_FD, -ENOSPC, "the client's region table is full (1024 regions)"},
	{C_REGISTER_FD, -EDQUOT, "this uid's --max-mapped-gb-per-uid of the service is used up"},
	{C_REGISTER_FD, -EFBIG,
	 "this process's --max-mapped-gb-per-process of the service is used up"},
	{C_REGISTER_FD, -EACCES,
	 "the service may not map the memfd read-write (a read-only fd of a memfd already "
	 "sealed against shrinking)"},
	{C_REGISTER_MEM, -EINVAL,
	 "a NULL address, a length of 0, a range that wraps, or a process forked after "
	 "dp_connect (register through a connection of its own)"},
	{C_REGISTER_MEM, -EFAULT,
	 "the first or the last byte of the range is not mapped in this process"},
	{C_REGISTER_MEM, -EPERM,
	 "the service may not access this process's memory (it runs as another uid and not "
	 "as root, or Yama ptrace_scope forbids it), or the process is not dumpable "
	 "(prctl(PR_SET_DUMPABLE, 0), a setuid program): the library refuses those itself"},
	{C_REGISTER_MEM, -ESRCH, "the service cannot find this process (another pid namespace)"},
	{C_REGISTER_MEM, -EAGAIN,
	 "the service's probe of the first or the last byte did not return in 200 ms: the "
	 "kernel holds it on a page that waits for this process (a userfaultfd range nobody "
	 "answers, a FUSE file whose server does not); make the pages present and call again"},
	{C_REGISTER_MEM, -ENOSPC, "the client's region table is full (1024 regions)"},
	{C_REGISTER_CUDA, -EINVAL,
	 "neither cudaMalloc device memory nor memory mapped with cuMemMap, or the range leaves "
	 "the allocation (or the pieces mapped side by side there)"},
	{C_REGISTER_FILE, -EPERM,
	 "the fd's open mode does not allow the access (a read-only fd for DP_ACCESS_RW, or a "
	 "write-only fd)"},
	{C_REGISTER_FILE, -EINVAL,
	 "not an open fd of a regular file or block device, a range beyond a read-only file, "
	 "an O_APPEND fd for DP_ACCESS_RW, or bad flags"},
	{C_REGISTER_FILE, -ENOTSUP, "the service has no io_uring"},
	{C_OPEN_FILE, -EPERM,
	 "the path is outside the service's --file-root (an absolute path, '..' or a symlink "
	 "leading out), or the service runs without --file-root"},
	{C_OPEN_FILE, -ENOENT, "no such file beneath the service's --file-root"},
	{C_OPEN_FILE, -ENAMETOOLONG, "the path is 256 bytes or more"},
	{C_OPEN_FILE, -EACCES, "the service may not open that file (file permissions)"},
	{C_OPEN_FILE, -EINVAL,
	 "empty path, not a regular file or block device (a directory?), a range beyond a "
	 "read-only file, or bad flags"},
	{C_OPEN_FILE, -ENOTSUP, "the service has no io_uring, or the kernel no openat2"},
	{C_FREE, -EBADF, "unknown region id"},
	{C_EXPORT, -EINVAL,
	 "bad name (" NAME_RULE "), or access not DP_ACCESS_READ / DP_ACCESS_RW"},
	{C_EXPORT, -EBADF, "unknown region id"},
	{C_EXPORT, -EPERM, "the region does not allow that access (a read-only file region)"},
	{C_EXPORT, -EEXIST, "the name is taken (here, or by another service of the cluster)"},
	{C_EXPORT, -EHOSTUNREACH, "the cluster directory cannot be reached"},
	{C_EXPORT, -ETIMEDOUT, "the cluster directory, or the service, did not answer in time"},
	{C_UNEXPORT, -EINVAL, "bad name (" NAME_RULE ")"},
	{C_UNEXPORT, -ENOENT, "no segment of that name is exported here"},
	{C_UNEXPORT, -EPERM, "the segment is another client's export"},
	{C_OPEN, -EINVAL,
	 "bad name (" NAME_RULE "), peer of 64 bytes or more, or access not READ/WRITE/RW"},
	{C_OPEN, -ENOENT,
	 "no segment of that name (on that peer, here, or in the cluster directory)"},
	{C_OPEN, -EPERM,
	 "access beyond what the segment's export grants, or (same host, no fabric) the "
	 "export is dp_register_mem memory of a process this service may not access "
	 "(another uid and not root, Yama ptrace_scope, not dumpable)"},
	{C_OPEN, -EACCES,
	 "the peer and this service do not trust each other: different fleet keys (--peer-key)"},
	{C_OPEN, -EHOSTUNREACH, "the peer, or the cluster directory, cannot be reached"},
	{C_OPEN, -ETIMEDOUT,
	 "the peer, the cluster directory, or the service did not answer in time"},
	{C_OPEN, -ENOSPC, "the client's segment handle table is full"},
	{C_OPEN, -EAGAIN, "the service has its limit of peer lookups in flight; try again"},
	{C_OPEN, -EBUSY, "an open of this client is still waiting for its peer"},
	{C_CLOSE, -EBADF, "unknown segment handle"},
	{C_QUEUE_DESTROY, -EBADF, "unknown queue"},
	{C_NOTIFY_OPEN, -EEXIST, "the client's notification ring is open already (one per client)"},
	{C_NOTIFY_OPEN, -EINVAL,
	 "entries not a power of two, or above both 256 and the service's --max-depth"},
	{C_NOTIFY_POLL, -EBADF, "no notification ring: call dp_notify_open first"},
	{C_NOTIFY_WAIT, -EBADF, "no notification ring: call dp_notify_open first"},
	{C_NOTIFY_FD, -EBADF, "no notification ring: call dp_notify_open first"},
	{C_NOTIFY_RECV, -EBADF, "no notification ring: call dp_notify_open first"},
	{C_NOTIFY_RECV, -EMSGSIZE,
	 "the buffer is shorter than the notification's bytes (msg_len; at most "
	 "DP_NOTIFY_MSG_MAX): it is left on the ring"},
	{C_NOTIFY_RECV, -EPROTO, "the notification ring is corrupt (its head was moved)"},
	{C_SUBMIT, -EMSGSIZE,
	 "a notification carries more than DP_NOTIFY_MSG_MAX (4096) bytes; that descriptor and "
	 "those after it were not submitted"},
	{C_NOTIFY_SEND, -EMSGSIZE, "a notification carries at most DP_NOTIFY_MSG_MAX (4096) bytes"},
	{C_NOTIFY_SEND, -EBADF, "unknown segment handle"},
	{C_NOTIFY_SEND, -ECONNRESET,
	 "the segment is gone (its owner unexported it or left), or the service went away"},
	{C_NOTIFY_POLL, -EPROTO, "the notification ring is corrupt (its head was moved)"},
	{C_NOTIFY_WAIT, -EPROTO, "the notification ring is corrupt (its head was moved)"},
	{C_SESSION_CREATE, -EEXIST, "the client has a session already (one per client)"},
	{C_SESSION_CREATE, -EADDRINUSE, "the port is taken on this host"},
	{C_SESSION_CREATE, -EACCES, "the service may not listen on that port (below 1024)"},
	{C_SESSION_CREATE, -EINVAL,
	 "port above 65535, or the service runs without a peer RPC port"},
	{C_SESSION_OPEN, -EINVAL,
	 "the session name is not \"host:port\" (port 1..65535), or "
	 "access not READ/WRITE/RW"},
	{C_SESSION_OPEN, -ENOENT, "something answers on that port, but not a session"},
	{C_SESSION_OPEN, -EHOSTUNREACH,
	 "nothing answers on that host and port (the session's client left, or a wrong name)"},
	{C_SESSION_OPEN, -ETIMEDOUT, "the session's host did not answer in time"},
	{C_SESSION_OPEN, -EACCES,
	 "the session's service and this one do not trust each other: different fleet keys"},
	{C_SESSION_OPEN, -ENOSPC, "the client's segment handle table is full"},
	{C_SESSION_OPEN, -EAGAIN, "the service has its limit of peer lookups in flight; try again"},
	{C_SESSION_OPEN, -EBUSY, "an open of this client is still waiting for its peer"},
	{C_REGISTER_MEM, -EEXIST, "the range overlaps memory already in the client's session"},
	{C_REGISTER_CUDA, -EEXIST, "the range overlaps memory already in the client's session"},
	{C_ALLOC, -EEXIST, "the mapping overlaps memory already in the client's session"},
	{C_ANY, -ECONNRESET, "the service went away (restart, crash or shutdown)"},
	{C_ANY, -ETIMEDOUT,
	 "the service did not answer in time ($DP_CTL_TIMEOUT_MS, 10 s by default); the "
	 "connection stays usable"},
	{C_ANY, -EBADMSG, "malformed reply: client library and service do not match"},
	{C_ANY, -ENOMEM, "out of memory"},
	{C_ANY, -EINVAL, "bad argument (a NULL pointer, a negative id, a length of 0)"},
};

static _Thread_local char last_error[512];

int dp__fail_text(enum call call, int err, const char *text)
{
	const char *name = strerrorname_np(-err);

	snprintf(last_error, sizeof(last_error), "%s: %s (%s)", call_names[call],
		 text ? text : dp_strerror(err), name ? name : "?");
	return err;
}

const char *dp__call_text(enum call call, int err)
{
	for (size_t i = 0; i < sizeof(call_errors) / sizeof(call_errors[0]); i++)
		if (call_errors[i].call == call && call_errors[i].err == err)
			return call_errors[i].text;
	return NULL;
}

int dp__fail(enum call call, int err)
{
	const char *text = NULL;

	if (err >= 0)
		return err;
	text = dp__call_text(call, err);
	if (!text)
		text = dp__call_text(C_ANY, err);
	return dp__fail_text(call, err, text);
}

int dp__null_arg(enum call call, int err)
{
	return dp__fail_text(call, err, "a NULL pointer where one is needed");
}

const char *dp_last_error(void)
{
	return last_error;
}

const char *dp_strerror(int err)
{
	switch (-err) {
	case 0:
		return "success";
	case ECONNRESET:
		return "connection to the service lost (or the target's owner left)";
	case EPROTO:
		return "ring protocol violation";
	case EPROTONOSUPPORT:
		return "client and service speak different ABI versions";
	case EBADMSG:
		return "malformed message";
	case EBADF:
		return "unknown region, segment or queue handle";
	case EFAULT:
		return "bad address: offset and length fall outside the region or segment, or "
		       "dp_register_mem memory is not mapped (at registration, or unmapped since)";
	case EPERM:
		/* Several calls: dp_last_error() names the one and the cause. */
		return "not permitted: access beyond the segment's export, the region's or the "
		       "fd's mode, a path outside the service's --file-root, a memfd that "
		       "does not allow sealing, or memory the service may not read (another "
		       "uid, a process that is not dumpable)";
	case EHOSTUNREACH:
		return "peer service unreachable";
	case ECANCELED:
		return "cancelled: the service is shutting down";
	case ENODEV:
		return "no usable GPU (no device or driver here, or the service sees none)";
	case ENOTSUP:
		return "not supported: this pair of memories or this path (dp_register_mem memory "
		       "with a file, file <-> file or over the fabric, GPU memory without CUDA, "
		       "staging off: --stage-bufs 0; docs/api.md)";
	default:
		return err < 0 ? strerror(-err) : "not an error code";
	}
}
