/* SPDX-License-Identifier: MIT */
/*
 * fabric_peer.c - peers of the fabric engine: another service's rail
 * addresses checked and inserted into our AVs (control thread), and a peer
 * marked lost when the data path finds it gone (fabric.c). See fabric.h.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include <rdma/fi_domain.h>

#include "clock.h"
#include "fabric.h"
#include "fabric_internal.h"

int fabric_peer_insert(struct peer *p, const uint8_t addrs[][DP_FABRIC_ADDR_MAX],
		       const uint32_t lens[], unsigned n)
{
	if (n > nrails)
		n = nrails;
	if (!n)
		return -EHOSTUNREACH;
	for (unsigned r = 0; r < n; r++) {
		/* An address must look like ours: same provider, same format,
		 * same length. Anything else is hostile or from another
		 * provider, and never reaches fi_av_insert. */
		if (!lens[r] || lens[r] > DP_FABRIC_ADDR_MAX)
			return -EINVAL;
		if (rails[r].info->addr_format == FI_ADDR_STR) {
			/* A printable string, NUL-terminated inside its length. */
			const uint8_t *nul = memchr(addrs[r], 0, lens[r]);

			if (!nul)
				return -EINVAL;
			for (const uint8_t *c = addrs[r]; c < nul; c++)
				if (*c < 0x21 || *c > 0x7e)
					return -EINVAL;
		} else if (lens[r] != rails[r].info->src_addrlen) {
			return -EINVAL;
		}
		if (rails[r].info->addr_format == FI_SOCKADDR_IN &&
		    ((const struct sockaddr *)addrs[r])->sa_family != AF_INET)
			return -EINVAL;
		if (fi_av_insert(rails[r].av, addrs[r], 1, &p->addr[r], 0, NULL) != 1)
			return -EINVAL;
	}
	p->nrails = n;
	/* It just answered its RPC port: alive now. */
	atomic_store_explicit(&p->progress_ns, dp_now_ns(), memory_order_relaxed);
	return 0;
}

/* Marks a peer gone: its cached segments are dropped by the control thread
 * (segments.c), which checks `dead` on the next open. Callers have evidence of
 * loss (fabric_internal.h); one slow transfer is none. */
void fabric_peer_lost(struct peer *pr)
{
	if (!atomic_exchange(&pr->dead, 1))
		log_warn("fabric: peer %s unreachable; its segments are dropped", pr->name);
}
