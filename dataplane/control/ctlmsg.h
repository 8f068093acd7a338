/* SPDX-License-Identifier: MIT */
/*
 * ctlmsg.h - the control protocol's decoder: everything that can be known
 * about a control message from its bytes and its fd count alone, before any
 * client, table or configuration is consulted. No side effects and no
 * service state: control.c runs every packet through it before a handler
 * sees it, and tests/fuzz/fuzz_control.c feeds it arbitrary bytes.
 *
 * What stays with the handlers needs state: HELLO's ABI negotiation (it
 * answers with a HELLO reply, not a status), a queue depth against
 * --max-depth, table slots and ids in use, files and memfds behind fds.
 */
#ifndef DP_CTLMSG_H
#define DP_CTLMSG_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#include "dp_proto.h"

/* Request types are 1 .. CTL_MSG_NTYPES - 1 (dp_proto.h). */
#define CTL_MSG_NTYPES (DP_MSG_SESSION_OPEN + 1)

/*
 * The header of a packet of @len bytes (one SOCK_SEQPACKET message). Copies
 * it to @hdr (all zero when @len is shorter than a header), then checks it.
 * 0, or -EBADMSG shorter than a header, wrong magic, or hdr.len not the rest
 * of the packet; -EPROTONOSUPPORT another protocol version; -EOPNOTSUPP a
 * type that is no request (0, unknown, or with DP_MSG_REPLY set).
 */
int ctl_msg_check_hdr(const void *buf, size_t len, struct dp_msg_hdr *hdr);

/*
 * The payload of a message whose header passed ctl_msg_check_hdr(), received
 * with @nfds descriptors (SCM_RIGHTS). The payload needs no alignment.
 * 0, or
 *  -EBADMSG  payload length not exactly the type's;
 *  -EBADF    REGION_REGISTER / REGION_REGISTER_FILE without exactly one fd,
 *            REGION_REGISTER_CUDA_VMM without exactly one per piece;
 *            a queue, region or segment id beyond its table;
 *  -EINVAL   a reserved field not 0, a path empty or not NUL-terminated
 *            inside its field, a peer not NUL-terminated (it may be empty),
 *            a segment name that breaks dp_proto_segment_name_ok(), an access
 *            mode outside the type's, a depth not a power of two, an empty
 *            region or one whose offset + len wraps, VMM pieces that break
 *            dp_proto_cuda_vmm_ok().
 * Types that carry no fd accept any @nfds: the caller closes what came.
 */
int ctl_msg_check_payload(const struct dp_msg_hdr *hdr, const void *payload, unsigned nfds);

/* How many fds a request that passed the checks above carries (0, 1, or
 * one per VMM piece): they came. */
unsigned ctl_msg_fds(const struct dp_msg_hdr *hdr, const void *payload);

/*
 * Whether an error of these checks makes the message malformed, a strike
 * (docs/api.md): -EBADMSG, -EOPNOTSUPP, -EPROTONOSUPPORT from the checks
 * above, and the two control.c adds before them: -EMSGSIZE (a packet over
 * DP_MSG_MAX bytes, or too many fds) and -EPROTO (anything before HELLO).
 * -EBADF and -EINVAL are well-formed requests that fail, as is any error
 * of a handler: strikes come from the checks alone.
 */
static inline bool ctl_msg_strike(int err)
{
	return err == -EBADMSG || err == -EMSGSIZE || err == -EOPNOTSUPP ||
	       err == -EPROTONOSUPPORT || err == -EPROTO;
}

#endif /* DP_CTLMSG_H */
