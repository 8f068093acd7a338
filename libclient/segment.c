/* SPDX-License-Identifier: MIT */
/*
 * segment.c - libclient's segments: a region exported under a name
 * (dp_segment_export, dp_segment_unexport), and a handle on an export of
 * this service or of another (dp_segment_open, dp_segment_close), the
 * target of descriptors.
 */
#include <errno.h>
#include <string.h>

#include "client_internal.h"

int dp__copy_name(char *dst, size_t cap, const char *src, bool segment)
{
	size_t n;

	if (!src)
		src = "";
	n = strlen(src);
	if (n >= cap || (segment && !dp_proto_segment_name_ok(src, cap)))
		return -EINVAL;
	memset(dst, 0, cap);
	memcpy(dst, src, n);
	return 0;
}

int dp_segment_export(struct dp_client *c, int region, const char *name, unsigned access)
{
	struct dp_msg_segment_export req = {.region = (uint32_t)region, .access = access};

	if (!c || !name)
		return dp__null_arg(C_EXPORT, -EINVAL);
	if (dp__copy_name(req.name, sizeof(req.name), name, true))
		return dp__fail(C_EXPORT, -EINVAL);
	if (region < 0)
		return dp__fail(C_EXPORT, -EBADF);
	return dp__fail(C_EXPORT, dp__rpc_locked(c, DP_MSG_SEGMENT_EXPORT, &req, sizeof(req), -1,
						 NULL, sizeof(struct dp_msg_status), NULL, 0));
}

int dp_segment_unexport(struct dp_client *c, const char *name)
{
	struct dp_msg_segment_name req;

	if (!c || !name)
		return dp__null_arg(C_UNEXPORT, -EINVAL);
	if (dp__copy_name(req.name, sizeof(req.name), name, true))
		return dp__fail(C_UNEXPORT, -EINVAL);
	return dp__fail(C_UNEXPORT,
			dp__rpc_locked(c, DP_MSG_SEGMENT_UNEXPORT, &req, sizeof(req), -1, NULL,
				       sizeof(struct dp_msg_status), NULL, 0));
}

int dp_segment_open(struct dp_client *c, const char *peer, const char *name, unsigned access)
{
	struct dp_msg_segment_open req = {.access = access};
	struct dp_msg_id_reply r;
	int rc;

	if (!c || !name)
		return dp__null_arg(C_OPEN, -EINVAL);
	if (dp__copy_name(req.name, sizeof(req.name), name, true) ||
	    dp__copy_name(req.peer, sizeof(req.peer), peer, false))
		return dp__fail(C_OPEN, -EINVAL);
	rc = dp__rpc_locked(c, DP_MSG_SEGMENT_OPEN, &req, sizeof(req), -1, &r, sizeof(r), NULL, 0);
	return rc ? dp__fail(C_OPEN, rc) : (int)r.id;
}

int dp_segment_close(struct dp_client *c, int segment)
{
	struct dp_msg_id req = {.id = (uint32_t)segment};

	if (!c)
		return dp__null_arg(C_CLOSE, -EBADF);
	if (segment < 0)
		return dp__fail(C_CLOSE, -EBADF);
	return dp__fail(C_CLOSE, dp__rpc_locked(c, DP_MSG_SEGMENT_CLOSE, &req, sizeof(req), -1,
						NULL, sizeof(struct dp_msg_status), NULL, 0));
}
