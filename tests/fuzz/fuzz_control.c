/* fuzz_control.c - libFuzzer target: a control packet as a hostile client sends it, through ctl_msg_check_hdr() and ctl_msg_check_payload() (dataplane/control/ctlmsg.c), the checks control.c runs, in its order, before any handler. Input: byte 0 is the number of fds that came with it (mod 5: control.c keeps at most 4), the rest is the packet. It answers 0 or a documented errno, and whatever it accepts is what the handlers take for granted. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctlmsg.h"
#include "dp_internal.h"

/* A NUL inside the field and (unless it may be empty) not at its start. */
static void str_ok(const char *s, size_t cap, int may_be_empty)
{
	size_t n = strnlen(s, cap);

	if (n == cap || (!n && !may_be_empty))
		abort();
}

/* What a handler in control.c relies on once the message passed. */
static void accepted(const struct dp_msg_hdr *h, const uint8_t *payload, size_t plen, unsigned nfds)
{
	union {
		struct dp_msg_queue_create qc;
		struct dp_msg_id id;
		struct dp_msg_region_register rr;
		struct dp_msg_segment_export se;
		struct dp_msg_segment_name sn;
		struct dp_msg_segment_open so;
		struct dp_msg_region_register_cuda rc;
		struct dp_msg_region_path rp;
		struct dp_msg_region_register_mem rm;
		struct dp_msg_notify_open no;
		struct dp_msg_region_register_cuda_vmm vm;
		struct dp_msg_notify_send ns;
		struct dp_msg_session_create sc;
		struct dp_msg_session_add sa;
		struct dp_msg_session_open sop;
		uint8_t raw[DP_MSG_MAX];
	} p;

	if (h->magic != DP_PROTO_MAGIC || h->version != DP_PROTO_VERSION || h->len != plen ||
	    !h->type || h->type >= CTL_MSG_NTYPES)
		abort();
	memset(&p, 0, sizeof(p));
	memcpy(&p, payload, plen);
	switch (h->type) {
	case DP_MSG_HELLO:
		if (plen != sizeof(struct dp_msg_hello))
			abort();
		break;
	case DP_MSG_QUEUE_CREATE:
		if (plen != sizeof(p.qc) || p.qc.reserved || (p.qc.depth & (p.qc.depth - 1)))
			abort();
		break;
	case DP_MSG_QUEUE_DESTROY:
		if (plen != sizeof(p.id) || p.id.id >= DP_MAX_QUEUES)
			abort();
		break;
	case DP_MSG_REGION_FREE:
		if (plen != sizeof(p.id) || p.id.id >= DP_MAX_REGIONS)
			abort();
		break;
	case DP_MSG_SEGMENT_CLOSE:
		if (plen != sizeof(p.id) || p.id.id >= DP_MAX_SEGS)
			abort();
		break;
	case DP_MSG_REGION_REGISTER:
		if (plen != sizeof(p.rr) || nfds != 1 || !p.rr.len ||
		    p.rr.offset + p.rr.len < p.rr.offset)
			abort();
		break;
	case DP_MSG_SEGMENT_EXPORT:
		if (plen != sizeof(p.se) || p.se.region >= DP_MAX_REGIONS ||
		    (p.se.access != DP_ACCESS_READ && p.se.access != DP_ACCESS_RW))
			abort();
		str_ok(p.se.name, sizeof(p.se.name), 0);
		break;
	case DP_MSG_SEGMENT_UNEXPORT:
		if (plen != sizeof(p.sn))
			abort();
		str_ok(p.sn.name, sizeof(p.sn.name), 0);
		break;
	case DP_MSG_SEGMENT_OPEN:
		if (plen != sizeof(p.so) || !p.so.access || p.so.access & ~DP_ACCESS_RW ||
		    p.so.reserved)
			abort();
		str_ok(p.so.name, sizeof(p.so.name), 0);
		str_ok(p.so.peer, sizeof(p.so.peer), 1);
		break;
	case DP_MSG_REGION_REGISTER_CUDA:
		if (plen != sizeof(p.rc) || !p.rc.len || p.rc.reserved)
			abort();
		break;
	case DP_MSG_REGION_REGISTER_FILE:
		if (plen != sizeof(p.rp.file) || nfds != 1 || p.rp.file.reserved)
			abort();
		break;
	case DP_MSG_REGION_OPEN_PATH:
		if (plen != sizeof(p.rp) || p.rp.file.reserved)
			abort();
		str_ok(p.rp.path, sizeof(p.rp.path), 0);
		break;
	case DP_MSG_REGION_REGISTER_MEM:
		if (plen != sizeof(p.rm) || !p.rm.len || p.rm.addr + p.rm.len < p.rm.addr)
			abort();
		break;
	case DP_MSG_NOTIFY_OPEN:
		if (plen != sizeof(p.no) || p.no.reserved || (p.no.entries & (p.no.entries - 1)))
			abort();
		break;
	case DP_MSG_NOTIFY_SEND: /* its handler checks the handles and the length */
		if (plen != sizeof(p.ns))
			abort();
		break;
	case DP_MSG_SESSION_CREATE:
		if (plen != sizeof(p.sc) || p.sc.port > 65535 || p.sc.reserved)
			abort();
		break;
	case DP_MSG_SESSION_ADD:
		if (plen != sizeof(p.sa) || p.sa.reserved || p.sa.region >= DP_MAX_REGIONS)
			abort();
		break;
	case DP_MSG_SESSION_OPEN:
		if (plen != sizeof(p.sop) || !p.sop.access || p.sop.access & ~DP_ACCESS_RW ||
		    p.sop.reserved || !strchr(p.sop.session, ':'))
			abort();
		str_ok(p.sop.session, sizeof(p.sop.session), 0);
		break;
	case DP_MSG_REGION_REGISTER_CUDA_VMM: {
		/* What gpu_cuda.c maps: pieces side by side, the range inside them. */
		uint64_t end = 0;

		if (plen != sizeof(p.vm) || !p.vm.npieces ||
		    p.vm.npieces > DP_CUDA_VMM_MAX_PIECES || nfds != p.vm.npieces || !p.vm.len)
			abort();
		for (uint32_t i = 0; i < p.vm.npieces; i++) {
			if (p.vm.piece[i].offset != end || !p.vm.piece[i].size)
				abort();
			end += p.vm.piece[i].size;
			if (end < p.vm.piece[i].size)
				abort();
		}
		if (p.vm.offset >= p.vm.piece[0].size || p.vm.len > end - p.vm.offset)
			abort();
		break;
	}
	default:
		abort(); /* a type ctlmsg.c knows and this target does not */
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dp_msg_hdr h;
	unsigned nfds;
	uint8_t *pkt;
	size_t len;
	int rc;

	if (!size)
		return 0;
	nfds = data[0] % 5;
	len = size - 1;
	/* control.c receives into DP_MSG_MAX bytes; a longer packet is
	 * MSG_TRUNC there and never reaches the decoder. */
	if (len > DP_MSG_MAX)
		return 0;
	/* An exact-size copy: ASan catches a read past the packet; byte 0
	 * shifts it off any alignment, which UBSan would catch a cast on. */
	pkt = malloc(len + 1);
	if (!pkt)
		return 0;
	memcpy(pkt + 1, data + 1, len);

	/* The two steps control.c takes (msg_check), in its order. */
	rc = ctl_msg_check_hdr(pkt + 1, len, &h);
	if (rc != 0 && rc != -EBADMSG && rc != -EPROTONOSUPPORT && rc != -EOPNOTSUPP)
		abort();
	if (!rc)
		rc = ctl_msg_check_payload(&h, pkt + 1 + sizeof(h), nfds);
	if (rc != 0 && rc != -EBADMSG && rc != -EPROTONOSUPPORT && rc != -EOPNOTSUPP &&
	    rc != -EBADF && rc != -EINVAL)
		abort();
	/* A short packet leaves the header to reply with all zero. */
	if (len < sizeof(h) && (h.magic || h.version || h.type || h.len || h.seq))
		abort();
	if (rc == 0)
		accepted(&h, pkt + 1 + sizeof(h), len - sizeof(h), nfds);
	free(pkt);
	return 0;
}
