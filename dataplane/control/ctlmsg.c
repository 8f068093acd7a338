/* SPDX-License-Identifier: MIT */
/*
 * ctlmsg.c - the control protocol's decoder (ctlmsg.h). Each type's checks
 * run in the order its handler in control.c relied on before they moved
 * here, so that a message with several faults gets the same error as ever.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ctlmsg.h"
#include "dp_internal.h"

/* The payload each request type carries, and whether one fd comes with it
 * (REGION_REGISTER_CUDA_VMM: one per piece, ctl_msg_fds()). */
static const struct {
	uint32_t len;
	bool fd;
} shapes[CTL_MSG_NTYPES] = {
	[DP_MSG_HELLO] = {sizeof(struct dp_msg_hello), false},
	[DP_MSG_QUEUE_CREATE] = {sizeof(struct dp_msg_queue_create), false},
	[DP_MSG_QUEUE_DESTROY] = {sizeof(struct dp_msg_id), false},
	[DP_MSG_REGION_REGISTER] = {sizeof(struct dp_msg_region_register), true},
	[DP_MSG_REGION_FREE] = {sizeof(struct dp_msg_id), false},
	[DP_MSG_SEGMENT_EXPORT] = {sizeof(struct dp_msg_segment_export), false},
	[DP_MSG_SEGMENT_UNEXPORT] = {sizeof(struct dp_msg_segment_name), false},
	[DP_MSG_SEGMENT_OPEN] = {sizeof(struct dp_msg_segment_open), false},
	[DP_MSG_SEGMENT_CLOSE] = {sizeof(struct dp_msg_id), false},
	[DP_MSG_REGION_REGISTER_CUDA] = {sizeof(struct dp_msg_region_register_cuda), false},
	[DP_MSG_REGION_REGISTER_FILE] = {sizeof(struct dp_msg_region_file), true},
	[DP_MSG_REGION_OPEN_PATH] = {sizeof(struct dp_msg_region_path), false},
	[DP_MSG_REGION_REGISTER_MEM] = {sizeof(struct dp_msg_region_register_mem), false},
	[DP_MSG_NOTIFY_OPEN] = {sizeof(struct dp_msg_notify_open), false},
	[DP_MSG_SESSION_CREATE] = {sizeof(struct dp_msg_session_create), false},
	[DP_MSG_SESSION_ADD] = {sizeof(struct dp_msg_session_add), false},
	[DP_MSG_SESSION_OPEN] = {sizeof(struct dp_msg_session_open), false},
	[DP_MSG_NOTIFY_SEND] = {sizeof(struct dp_msg_notify_send), false},
	[DP_MSG_REGION_REGISTER_CUDA_VMM] = {sizeof(struct dp_msg_region_register_cuda_vmm), false},
};

/* Every payload, so that one aligned copy serves all types. */
union payload {
	struct dp_msg_hello hello;
	struct dp_msg_queue_create queue_create;
	struct dp_msg_id id;
	struct dp_msg_region_register region_register;
	struct dp_msg_segment_export segment_export;
	struct dp_msg_segment_name segment_name;
	struct dp_msg_segment_open segment_open;
	struct dp_msg_region_register_cuda region_cuda;
	struct dp_msg_region_file region_file;
	struct dp_msg_region_path region_path;
	struct dp_msg_region_register_mem region_mem;
	struct dp_msg_notify_open notify_open;
	struct dp_msg_session_create session_create;
	struct dp_msg_session_add session_add;
	struct dp_msg_session_open session_open;
	struct dp_msg_notify_send notify_send;
	struct dp_msg_region_register_cuda_vmm region_vmm;
};

_Static_assert(sizeof(struct dp_msg_hdr) + sizeof(union payload) <= DP_MSG_MAX,
	       "every request fits in one DP_MSG_MAX packet");

/* A NUL-terminated, non-empty string inside a fixed field. */
static bool field_str_ok(const char *s, size_t cap)
{
	size_t n = strnlen(s, cap);

	return n > 0 && n < cap;
}

int ctl_msg_check_hdr(const void *buf, size_t len, struct dp_msg_hdr *hdr)
{
	memset(hdr, 0, sizeof(*hdr));
	if (len < sizeof(*hdr))
		return -EBADMSG;
	memcpy(hdr, buf, sizeof(*hdr));
	if (hdr->magic != DP_PROTO_MAGIC || hdr->len != len - sizeof(*hdr))
		return -EBADMSG;
	if (hdr->version != DP_PROTO_VERSION)
		return -EPROTONOSUPPORT;
	if (hdr->type >= CTL_MSG_NTYPES || !shapes[hdr->type].len)
		return -EOPNOTSUPP;
	return 0;
}

int ctl_msg_check_payload(const struct dp_msg_hdr *hdr, const void *payload, unsigned nfds)
{
	union payload p;

	if (hdr->type >= CTL_MSG_NTYPES || !shapes[hdr->type].len)
		return -EOPNOTSUPP;
	if (hdr->len != shapes[hdr->type].len)
		return -EBADMSG;
	if (shapes[hdr->type].fd && nfds != 1)
		return -EBADF;
	memcpy(&p, payload, hdr->len);

	switch (hdr->type) {
	case DP_MSG_QUEUE_CREATE:
		/* 0 means the service's default depth, a power of two. */
		if (p.queue_create.depth & (p.queue_create.depth - 1) || p.queue_create.reserved)
			return -EINVAL;
		return 0;
	case DP_MSG_QUEUE_DESTROY:
		return p.id.id < DP_MAX_QUEUES ? 0 : -EBADF;
	case DP_MSG_REGION_FREE:
		return p.id.id < DP_MAX_REGIONS ? 0 : -EBADF;
	case DP_MSG_SEGMENT_CLOSE:
		return p.id.id < DP_MAX_SEGS ? 0 : -EBADF;
	case DP_MSG_REGION_REGISTER:
		if (!p.region_register.len ||
		    p.region_register.offset + p.region_register.len < p.region_register.offset)
			return -EINVAL;
		return 0;
	case DP_MSG_SEGMENT_EXPORT:
		if (!dp_proto_segment_name_ok(p.segment_export.name, sizeof(p.segment_export.name)))
			return -EINVAL;
		if (p.segment_export.access != DP_ACCESS_READ &&
		    p.segment_export.access != DP_ACCESS_RW)
			return -EINVAL;
		return p.segment_export.region < DP_MAX_REGIONS ? 0 : -EBADF;
	case DP_MSG_SEGMENT_UNEXPORT:
		return dp_proto_segment_name_ok(p.segment_name.name, sizeof(p.segment_name.name))
			       ? 0
			       : -EINVAL;
	case DP_MSG_SEGMENT_OPEN:
		if (!dp_proto_segment_name_ok(p.segment_open.name, sizeof(p.segment_open.name)) ||
		    strnlen(p.segment_open.peer, sizeof(p.segment_open.peer)) ==
			    sizeof(p.segment_open.peer))
			return -EINVAL;
		if (!p.segment_open.access || p.segment_open.access & ~DP_ACCESS_RW ||
		    p.segment_open.reserved)
			return -EINVAL;
		return 0;
	case DP_MSG_REGION_REGISTER_CUDA:
		return p.region_cuda.len && !p.region_cuda.reserved ? 0 : -EINVAL;
	case DP_MSG_REGION_REGISTER_FILE:
		return p.region_file.reserved ? -EINVAL : 0;
	case DP_MSG_REGION_OPEN_PATH:
		if (p.region_path.file.reserved ||
		    !field_str_ok(p.region_path.path, sizeof(p.region_path.path)))
			return -EINVAL;
		return 0;
	case DP_MSG_REGION_REGISTER_MEM:
		if (!p.region_mem.len || p.region_mem.addr + p.region_mem.len < p.region_mem.addr)
			return -EINVAL;
		return 0;
	case DP_MSG_NOTIFY_OPEN:
		/* 0 means the default, a power of two. */
		if (p.notify_open.entries & (p.notify_open.entries - 1) || p.notify_open.reserved)
			return -EINVAL;
		return 0;
	case DP_MSG_SESSION_CREATE:
		return p.session_create.port > 65535 || p.session_create.reserved ? -EINVAL : 0;
	case DP_MSG_SESSION_ADD:
		if (p.session_add.reserved)
			return -EINVAL;
		return p.session_add.region < DP_MAX_REGIONS ? 0 : -EBADF;
	case DP_MSG_SESSION_OPEN:
		/* "host:port"; the port's digits are the handler's to read. */
		if (!field_str_ok(p.session_open.session, sizeof(p.session_open.session)) ||
		    !strchr(p.session_open.session, ':'))
			return -EINVAL;
		if (!p.session_open.access || p.session_open.access & ~DP_ACCESS_RW ||
		    p.session_open.reserved)
			return -EINVAL;
		return 0;
	case DP_MSG_NOTIFY_SEND:
		/* The handler says -EMSGSIZE for a length beyond the most. */
		return 0;
	case DP_MSG_REGION_REGISTER_CUDA_VMM:
		/* The pieces first: their count says how many fds must come. */
		if (!dp_proto_cuda_vmm_ok(&p.region_vmm))
			return -EINVAL;
		return nfds == p.region_vmm.npieces ? 0 : -EBADF;
	default: /* HELLO: the ABI version is negotiated by its handler */
		return 0;
	}
}

unsigned ctl_msg_fds(const struct dp_msg_hdr *hdr, const void *payload)
{
	struct dp_msg_region_register_cuda_vmm v;

	if (hdr->type == DP_MSG_REGION_REGISTER_CUDA_VMM) {
		memcpy(&v, payload, sizeof(v));
		return v.npieces;
	}
	return hdr->type < CTL_MSG_NTYPES && shapes[hdr->type].fd ? 1 : 0;
}
