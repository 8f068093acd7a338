/* SPDX-License-Identifier: MIT */
/*
 * control.c - the control socket: clients attach, open queue pairs,
 * register memory, export and open segments. One thread, one epoll loop.
 *
 * Every message is checked before it is believed (ctlmsg.c): the packet
 * length must equal header + the type's payload, strings must be
 * NUL-terminated inside their field, fds must come exactly where a type
 * expects them (any other fd is closed). A malformed message gets an error
 * reply; the third one disconnects the client. Table changes are published
 * with release stores and reclaimed only after qsbr_synchronize().
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctlmsg.h"
#include "directory.h"
#include "dp_internal.h"
#include "engine.h"
#include "fabric.h"
#include "fileio.h"
#include "gpu.h"
#include "rpc.h"
#include "stats.h"

#define MAX_STRIKES 3
#define MAX_FDS 4

static struct client *clients;
static unsigned nclients;
static uint32_t next_client_id = 1;
static struct segment *exports;
static struct segment *remotes; /* segments of other services, cached */
static struct peer *peers;

struct msg_in {
	struct dp_msg_hdr hdr;
	const void *payload;
	int fds[MAX_FDS];
	int nfds;
};

static int send_reply(struct client *c, const struct dp_msg_hdr *req, uint16_t type,
		      const void *payload, size_t len, const int *fds, int nfds)
{
	struct dp_msg_hdr hdr = {.magic = DP_PROTO_MAGIC,
				 .version = DP_PROTO_VERSION,
				 .type = (uint16_t)(type | DP_MSG_REPLY),
				 .len = (uint32_t)len,
				 .seq = req ? req->seq : 0};
	struct iovec iov[2] = {{&hdr, sizeof(hdr)}, {(void *)payload, len}};
	union {
		char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};

	if (nfds) {
		struct cmsghdr *cm;

		msg.msg_control = u.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	}
	if (sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		return -errno;
	return 0;
}

static void reply_status(struct client *c, const struct dp_msg_hdr *req, int status)
{
	struct dp_msg_status st = {.status = status};

	send_reply(c, req, req ? req->type : 0, &st, sizeof(st), NULL, 0);
}

/* The one fd of a type that carries one (ctl_msg_check_payload() saw it
 * come alone), now the handler's to close. */
static int take_fd(struct msg_in *m)
{
	m->nfds = 0;
	return m->fds[0];
}

/* ---- handlers: each runs on a message ctl_msg_check_payload() accepted
 * (length, fds, fields), and checks what needs state. Each returns 0 after
 * replying itself, or -errno to have the caller send a status reply. ---- */

static int on_hello(struct client *c, struct msg_in *m)
{
	const struct dp_msg_hello *h = m->payload;
	struct dp_msg_hello_reply r = {.abi_version = DP_ABI_VERSION,
				       .default_depth = cfg.queue_depth,
				       .max_depth = cfg.max_depth};

	if (c->hello)
		return -EALREADY;
	if (h->abi_version != DP_ABI_VERSION) {
		log_warn("client %u (pid %d): ABI %u, we speak %u", c->id, (int)c->pid,
			 h->abi_version, DP_ABI_VERSION);
		r.status = -EPROTONOSUPPORT;
		send_reply(c, &m->hdr, DP_MSG_HELLO, &r, sizeof(r), NULL, 0);
		return 1;
	}
	memcpy(c->name, h->name, sizeof(c->name));
	c->name[sizeof(c->name) - 1] = 0;
	for (char *p = c->name; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			*p = '?';
	c->hello = true;
	memcpy(r.server_name, cfg.server_name, sizeof(r.server_name));
	log_info("client %u: hello from '%s' (pid %d uid %d)", c->id, c->name, (int)c->pid,
		 (int)c->uid);
	send_reply(c, &m->hdr, DP_MSG_HELLO, &r, sizeof(r), NULL, 0);
	return 0;
}

static int on_queue_create(struct client *c, struct msg_in *m)
{
	const struct dp_msg_queue_create *req = m->payload;
	struct dp_msg_queue_create_reply r = {0};
	struct queue *q;
	unsigned slot, used = 0;
	uint32_t depth;
	int rc, fds[3];

	depth = req->depth ? req->depth : cfg.queue_depth;
	if (depth > cfg.max_depth)
		return -EINVAL;
	for (slot = DP_MAX_QUEUES, used = 0; used < DP_MAX_QUEUES; used++)
		if (!c->queues[used] && slot == DP_MAX_QUEUES)
			slot = used;
	used = 0;
	for (unsigned i = 0; i < DP_MAX_QUEUES; i++)
		used += c->queues[i] != NULL;
	if (slot == DP_MAX_QUEUES || used >= cfg.max_queues)
		return -EMFILE;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	rc = dp_ring_pair_create(&q->pair, "dataplane-queue", depth, sizeof(struct dp_desc), depth,
				 sizeof(struct dp_cqe), 0);
	if (rc) {
		free(q);
		return rc;
	}
	q->sq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	q->cq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (q->sq_efd < 0 || q->cq_efd < 0) {
		rc = -errno;
		if (q->sq_efd >= 0)
			close(q->sq_efd);
		if (q->cq_efd >= 0)
			close(q->cq_efd);
		dp_ring_pair_close(&q->pair);
		free(q);
		return rc;
	}
	q->id = slot;
	q->depth = depth;
	q->client = c;
	atomic_fetch_add(&c->refs, 1);
	c->queues[slot] = q;
	r.queue_id = slot;
	r.depth = depth;
	fds[0] = q->pair.fd;
	fds[1] = q->sq_efd;
	fds[2] = q->cq_efd;
	rc = send_reply(c, &m->hdr, DP_MSG_QUEUE_CREATE, &r, sizeof(r), fds, 3);
	/* Handed to a poller even if the reply failed: the client is gone
	 * then, and the normal teardown frees the queue. */
	poller_add_queue(q);
	log_debug("client %u: queue %u, depth %u, poller %u", c->id, slot, depth, q->poller->idx);
	return 0;
}

static void queue_close(struct queue *q)
{
	struct poller *p = q->poller;

	/* Release: the poller retires the queue once it sees this. */
	atomic_store_explicit(&q->closing, 1, memory_order_release);
	poller_kick(p);
	stats_queue_closed();
}

static int on_queue_destroy(struct client *c, struct msg_in *m)
{
	const struct dp_msg_id *req = m->payload;

	if (!c->queues[req->id])
		return -EBADF;
	queue_close(c->queues[req->id]);
	c->queues[req->id] = NULL;
	reply_status(c, &m->hdr, 0);
	return 0;
}

/* Lets every engine add its state to a new memory region (the fabric
 * registers it, the GPU engine pins host memory), publishes it in the client's
 * table at `slot` and replies with its id; on failure drops it. */
static int region_publish(struct client *c, const struct msg_in *m, struct region *reg,
			  unsigned slot)
{
	struct dp_msg_id_reply r = {0};
	int rc = engines_region_open(reg);

	if (rc) {
		region_put(reg);
		return rc;
	}
	/* Release: pairs with the acquire in desc_resolve(). */
	atomic_store_explicit(&c->regions[slot], reg, memory_order_release);
	stats_region_added(reg->len);
	r.id = slot;
	r.len = reg->len;
	r.access = DP_ACCESS_RW;
	send_reply(c, &m->hdr, m->hdr.type, &r, sizeof(r), NULL, 0);
	return 0;
}

static int on_region_register(struct client *c, struct msg_in *m)
{
	const struct dp_msg_region_register *req = m->payload;
	long page = sysconf(_SC_PAGESIZE);
	struct region *reg;
	struct stat st;
	int fd, seals, rc;
	unsigned slot;
	uint64_t aligned;
	void *map;

	fd = take_fd(m);
	rc = -EINVAL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		goto out_fd;
	if (req->offset > (uint64_t)st.st_size || req->len > (uint64_t)st.st_size - req->offset)
		goto out_fd;
	/* Only memory files: a seal against shrinking means a client can
	 * never turn our access to its memory into SIGBUS. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0)
		goto out_fd;
	if (!(seals & F_SEAL_SHRINK) && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0) {
		/* EPERM: F_SEAL_SEAL is set (a memfd made without
		 * MFD_ALLOW_SEALING, a /dev/shm file, or one sealed against
		 * further seals) or the fd is read-only. The client can fix
		 * this: say so. c->name is printable ASCII (on_hello). */
		rc = -EPERM;
		log_warn("client %u (pid %d '%s'): region refused: the memfd does not allow "
			 "sealing (memfd_create without MFD_ALLOW_SEALING, F_SEAL_SEAL set, or "
			 "a read-only fd)",
			 c->id, (int)c->pid, c->name);
		goto out_fd;
	}
	for (slot = 0; slot < DP_MAX_REGIONS; slot++)
		if (!atomic_load_explicit(&c->regions[slot], memory_order_relaxed))
			break;
	rc = -ENOSPC;
	if (slot == DP_MAX_REGIONS)
		goto out_fd;
	aligned = req->offset & ~((uint64_t)page - 1);
	map = mmap(NULL, req->len + (req->offset - aligned), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		   (off_t)aligned);
	if (map == MAP_FAILED) {
		rc = errno == EACCES ? -EACCES : -ENOMEM;
		goto out_fd;
	}
	reg = calloc(1, sizeof(*reg));
	if (!reg) {
		munmap(map, req->len + (req->offset - aligned));
		rc = -ENOMEM;
		goto out_fd;
	}
	close(fd);
	atomic_init(&reg->refs, 1);
	reg->id = slot;
	reg->kind = REGION_HOST;
	reg->fd = -1;
	reg->map = map;
	reg->map_len = req->len + (req->offset - aligned);
	reg->base = (uint8_t *)map + (req->offset - aligned);
	reg->len = req->len;
	reg->owner_pid = c->pid;
	rc = region_publish(c, m, reg, slot);
	if (rc)
		return rc;
	log_debug("client %u: region %u, %llu bytes", c->id, slot, (unsigned long long)reg->len);
	return 0;
out_fd:
	close(fd);
	return rc;
}

/* GPU memory: a CUDA IPC handle plus the range in its allocation (gpu.c). */
static int on_region_register_cuda(struct client *c, struct msg_in *m)
{
	const struct dp_msg_region_register_cuda *req = m->payload;
	struct region *reg;
	unsigned slot;
	int rc;

	for (slot = 0; slot < DP_MAX_REGIONS; slot++)
		if (!atomic_load_explicit(&c->regions[slot], memory_order_relaxed))
			break;
	if (slot == DP_MAX_REGIONS)
		return -ENOSPC;
	reg = calloc(1, sizeof(*reg));
	if (!reg)
		return -ENOMEM;
	rc = gpu_region_open(reg, req);
	if (rc) {
		free(reg);
		return rc;
	}
	atomic_init(&reg->refs, 1);
	reg->id = slot;
	reg->owner_pid = c->pid;
	rc = region_publish(c, m, reg, slot);
	if (rc)
		return rc;
	log_debug("client %u: GPU region %u, %llu bytes on device %d", c->id, slot,
		  (unsigned long long)reg->len, reg->device);
	return 0;
}

/* Files (fileio.c): an fd the client passed, or a path the service opens
 * beneath --file-root. */
static int on_region_file(struct client *c, struct msg_in *m)
{
	const struct dp_msg_region_path *req = m->payload;
	bool by_path = m->hdr.type == DP_MSG_REGION_OPEN_PATH;
	struct dp_msg_id_reply r = {0};
	struct region *reg;
	unsigned slot;
	int fd = -1, rc;

	if (!by_path)
		fd = take_fd(m);
	for (slot = 0; slot < DP_MAX_REGIONS; slot++)
		if (!atomic_load_explicit(&c->regions[slot], memory_order_relaxed))
			break;
	rc = -ENOSPC;
	if (slot == DP_MAX_REGIONS)
		goto out_fd;
	rc = -ENOMEM;
	reg = calloc(1, sizeof(*reg));
	if (!reg)
		goto out_fd;
	/* Takes the fd over, on failure too. */
	rc = fileio_region_open(reg, fd, by_path ? req->path : NULL, req->file.offset,
				req->file.len, req->file.access);
	if (rc) {
		free(reg);
		return rc;
	}
	atomic_init(&reg->refs, 1);
	reg->id = slot;
	reg->owner_pid = c->pid;
	/* Release: pairs with the acquire in desc_resolve(). */
	atomic_store_explicit(&c->regions[slot], reg, memory_order_release);
	stats_region_added(reg->len);
	r.id = slot;
	r.len = reg->len;
	r.access = req->file.access & DP_ACCESS_RW;
	send_reply(c, &m->hdr, m->hdr.type, &r, sizeof(r), NULL, 0);
	log_debug("client %u: file region %u, %llu bytes", c->id, slot,
		  (unsigned long long)reg->len);
	return 0;
out_fd:
	if (fd >= 0)
		close(fd);
	return rc;
}

struct segment *export_find(const char *name)
{
	for (struct segment *s = exports; s; s = s->next)
		if (!strcmp(s->name, name))
			return s;
	return NULL;
}

/* Unlinks and marks dead; the caller synchronizes, then export_release(). */
static void export_kill(struct segment *s)
{
	for (struct segment **pp = &exports; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	atomic_store_explicit(&s->dead, 1, memory_order_release);
	stats_segment_removed();
	directory_withdraw(s->name);
}

static void export_release(struct segment *s)
{
	engines_segment_unexport(s);
	region_put(s->region);
	segment_put(s);
}

static int on_segment_export(struct client *c, struct msg_in *m)
{
	const struct dp_msg_segment_export *req = m->payload;
	struct region *reg;
	struct segment *s;
	int rc;

	reg = atomic_load_explicit(&c->regions[req->region], memory_order_relaxed);
	if (!reg)
		return -EBADF;
	if (!fileio_access_ok(reg, req->access))
		return -EPERM;
	if (export_find(req->name))
		return -EEXIST;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	atomic_init(&s->refs, 1); /* the export list's */
	atomic_fetch_add(&reg->refs, 1);
	s->region = reg;
	s->access = req->access;
	s->owner = c;
	memcpy(s->name, req->name, sizeof(s->name));
	if (engines_segment_export(s)) {
		region_put(reg);
		free(s);
		return -ENOMEM;
	}
	/* -EEXIST when another live service holds the name fleet-wide. */
	rc = directory_publish(s);
	if (rc) {
		engines_segment_unexport(s);
		region_put(reg);
		free(s);
		return rc;
	}
	s->next = exports;
	exports = s;
	stats_segment_added();
	log_info("client %u: exported '%s' (%llu bytes, %s)", c->id, s->name,
		 (unsigned long long)reg->len, s->access == DP_ACCESS_RW ? "rw" : "ro");
	reply_status(c, &m->hdr, 0);
	return 0;
}

static int on_segment_unexport(struct client *c, struct msg_in *m)
{
	const struct dp_msg_segment_name *req = m->payload;
	struct segment *s;

	s = export_find(req->name);
	if (!s)
		return -ENOENT;
	if (s->owner != c)
		return -EPERM;
	export_kill(s);
	qsbr_synchronize();
	export_release(s);
	reply_status(c, &m->hdr, 0);
	return 0;
}

/* ---- segments of other services ---- */

/* Drops cached segments of peers found dead, so the next open asks again. */
static void remotes_prune(void)
{
	struct segment **pp = &remotes;

	while (*pp) {
		struct segment *s = *pp;

		if (atomic_load(&s->remote->peer->dead) || atomic_load(&s->dead)) {
			*pp = s->next;
			atomic_store(&s->dead, 1);
			segment_put(s); /* the cache's reference */
			continue;
		}
		pp = &s->next;
	}
}

static struct peer *peer_get(const struct dp_rpc_lookup_reply *r)
{
	uint8_t addrs[DP_MAX_RAILS][DP_FABRIC_ADDR_MAX];
	uint32_t lens[DP_MAX_RAILS];
	struct peer *p;

	for (p = peers; p; p = p->next) {
		bool same = p->nsent == r->nrails;

		if (strcmp(p->name, r->server_name) || atomic_load(&p->dead))
			continue;
		for (unsigned i = 0; same && i < r->nrails; i++)
			same = p->sent_len[i] == r->rail[i].addr_len &&
			       !memcmp(p->sent[i], r->rail[i].addr, r->rail[i].addr_len);
		if (same)
			return p;
		/* Restarted under the same name: the old process is gone. */
		log_info("peer %s: new fabric addresses; the old ones are dropped", p->name);
		atomic_store(&p->dead, 1);
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	memcpy(p->name, r->server_name, sizeof(p->name));
	for (unsigned i = 0; i < r->nrails; i++) {
		memcpy(addrs[i], r->rail[i].addr, DP_FABRIC_ADDR_MAX);
		lens[i] = r->rail[i].addr_len;
		memcpy(p->sent[i], r->rail[i].addr, DP_FABRIC_ADDR_MAX);
		p->sent_len[i] = r->rail[i].addr_len;
	}
	p->nsent = r->nrails;
	if (fabric_peer_insert(p, addrs, lens, r->nrails)) {
		log_warn("peer %s: fabric addresses rejected", p->name);
		free(p);
		return NULL;
	}
	/* Peers are kept for the life of the service: segments and in-flight
	 * slices point at them, and their AV entries are few. */
	p->next = peers;
	peers = p;
	return p;
}

/* Does a cached description still match what the peer answered? */
static bool remote_same(const struct remote_seg *rs, const struct peer *pr,
			const struct dp_rpc_lookup_reply *r)
{
	if (rs->peer != pr || rs->base != r->base || rs->len != r->len || rs->access != r->access)
		return false;
	for (unsigned i = 0; i < rs->nrails; i++)
		if (rs->key[i] != r->rail[i].key)
			return false;
	return true;
}

/* Resolves a segment of another service through its RPC port (peer
 * "host:port") or the cluster directory (peer ""), or the cache. A peer
 * string or a record that turns out to name this service resolves locally. */
static int remote_open(const char *peer, const char *name, struct segment **out)
{
	struct dp_rpc_lookup_reply r;
	struct remote_seg *rs;
	struct segment *s;
	struct peer *pr;
	int rc;

	if (!fabric_nrails())
		return -EHOSTUNREACH;
	remotes_prune();
	/* The directory keeps its records fresh (remotes_invalidate). A
	 * host:port is asked again at every open: its export may have been
	 * replaced (new keys), or the peer restarted on the same port (new
	 * addresses), without a transfer failing in between. */
	for (s = remotes; s && !peer[0]; s = s->next)
		if (!strcmp(s->name, name) && !s->owner_name[0]) {
			*out = s;
			return 0;
		}
	rc = peer[0] ? rpc_lookup(peer, name, &r) : directory_lookup(name, &r);
	if (rc) {
		log_info("segment '%s' on %s: %s", name, peer[0] ? peer : "the directory",
			 strerror(-rc));
		return rc;
	}
	if (!strcmp(r.server_name, cfg.server_name)) {
		s = export_find(name);
		if (!s)
			return -ENOENT;
		*out = s;
		return 0;
	}
	pr = peer_get(&r);
	if (!pr)
		return -EHOSTUNREACH;
	for (struct segment **pp = &remotes; *pp; pp = &(*pp)->next) {
		s = *pp;
		if (strcmp(s->name, name) || strcmp(s->owner_name, peer))
			continue;
		if (remote_same(s->remote, pr, &r)) {
			*out = s;
			return 0;
		}
		/* Replaced: handles to the old one fail as after an unexport. */
		*pp = s->next;
		atomic_store(&s->dead, 1);
		segment_put(s); /* the cache's reference */
		break;
	}
	s = calloc(1, sizeof(*s));
	rs = calloc(1, sizeof(*rs));
	if (!s || !rs) {
		free(s);
		free(rs);
		return -ENOMEM;
	}
	rs->peer = pr;
	rs->base = r.base;
	rs->len = r.len;
	rs->access = r.access;
	rs->nrails = rs->peer->nrails;
	for (unsigned i = 0; i < rs->nrails; i++)
		rs->key[i] = r.rail[i].key;
	atomic_init(&s->refs, 1); /* the cache's */
	s->remote = rs;
	s->access = r.access;
	snprintf(s->name, sizeof(s->name), "%s", name);
	snprintf(s->owner_name, sizeof(s->owner_name), "%s", peer);
	s->next = remotes;
	remotes = s;
	log_info("segment '%s' on %s (%s): %llu bytes, %s, %u rail(s)", name,
		 peer[0] ? peer : "the directory", rs->peer->name, (unsigned long long)rs->len,
		 rs->access == DP_ACCESS_RW ? "rw" : "ro", rs->nrails);
	*out = s;
	return 0;
}

/* The directory's word on a name (directory.h): a record gone or replaced
 * kills the segment opened from it, as an unexport kills a local one; a
 * reconnect only empties the cache (name NULL), open handles keep theirs. */
static void remotes_invalidate(const char *name, bool kill)
{
	struct segment **pp = &remotes;

	while (*pp) {
		struct segment *s = *pp;

		if (s->owner_name[0] || (name && strcmp(s->name, name))) {
			pp = &s->next;
			continue;
		}
		*pp = s->next;
		if (kill)
			atomic_store(&s->dead, 1);
		segment_put(s); /* the cache's reference */
	}
}

static int on_segment_open(struct client *c, struct msg_in *m)
{
	const struct dp_msg_segment_open *req = m->payload;
	struct dp_msg_id_reply r = {0};
	struct seg_handle *h;
	struct segment *s;
	unsigned slot;

	/* Another service's: by its RPC port, or (no peer, not exported
	 * here) wherever the cluster directory says. */
	if ((req->peer[0] && !rpc_is_self(req->peer)) ||
	    (!req->peer[0] && directory_enabled() && !export_find(req->name))) {
		int rc = remote_open(req->peer, req->name, &s);

		/* Replied here: -EBADMSG (or any status) that a peer sent
		 * is no malformed message of this client's, no strike. */
		if (rc) {
			reply_status(c, &m->hdr, rc);
			return 0;
		}
	} else {
		s = export_find(req->name);
		if (!s)
			return -ENOENT;
	}
	if ((req->access & s->access) != req->access)
		return -EPERM;
	for (slot = 0; slot < DP_MAX_SEGS; slot++)
		if (!atomic_load_explicit(&c->segs[slot], memory_order_relaxed))
			break;
	if (slot == DP_MAX_SEGS)
		return -ENOSPC;
	h = malloc(sizeof(*h));
	if (!h)
		return -ENOMEM;
	atomic_fetch_add(&s->refs, 1);
	h->seg = s;
	h->access = req->access;
	/* Release: pairs with the acquire in desc_resolve(). */
	atomic_store_explicit(&c->segs[slot], h, memory_order_release);
	r.id = slot;
	r.len = s->remote ? s->remote->len : s->region->len;
	r.access = req->access;
	send_reply(c, &m->hdr, DP_MSG_SEGMENT_OPEN, &r, sizeof(r), NULL, 0);
	return 0;
}

static int on_segment_close(struct client *c, struct msg_in *m)
{
	const struct dp_msg_id *req = m->payload;
	struct seg_handle *h;

	h = atomic_exchange(&c->segs[req->id], NULL);
	if (!h)
		return -EBADF;
	qsbr_synchronize();
	segment_put(h->seg);
	free(h);
	reply_status(c, &m->hdr, 0);
	return 0;
}

static int on_region_free(struct client *c, struct msg_in *m)
{
	const struct dp_msg_id *req = m->payload;
	struct segment *s, *next, *dead = NULL;
	struct region *reg;

	reg = atomic_exchange(&c->regions[req->id], NULL);
	if (!reg)
		return -EBADF;
	/* Exports of the region go with it. */
	for (s = exports; s; s = next) {
		next = s->next;
		if (s->region == reg) {
			export_kill(s);
			s->next = dead;
			dead = s;
		}
	}
	qsbr_synchronize();
	for (; dead; dead = next) {
		next = dead->next;
		export_release(dead);
	}
	stats_region_removed(reg->len);
	region_put(reg);
	reply_status(c, &m->hdr, 0);
	return 0;
}

/* ---- client lifetime ---- */

static void client_drop(int epfd, struct client *c)
{
	struct segment *s, *next, *dead = NULL;

	for (struct client **pp = &clients; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	nclients--;
	stats_client_removed();
	epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	for (unsigned i = 0; i < DP_MAX_QUEUES; i++)
		if (c->queues[i]) {
			queue_close(c->queues[i]);
			c->queues[i] = NULL;
		}
	for (s = exports; s; s = next) {
		next = s->next;
		if (s->owner == c) {
			export_kill(s);
			s->next = dead;
			dead = s;
		}
	}
	struct region *regs[DP_MAX_REGIONS];
	struct seg_handle *hs[DP_MAX_SEGS];
	for (unsigned i = 0; i < DP_MAX_REGIONS; i++)
		regs[i] = atomic_exchange(&c->regions[i], NULL);
	for (unsigned i = 0; i < DP_MAX_SEGS; i++)
		hs[i] = atomic_exchange(&c->segs[i], NULL);
	/* One grace period for everything the client had. */
	qsbr_synchronize();
	for (; dead; dead = next) {
		next = dead->next;
		export_release(dead);
	}
	for (unsigned i = 0; i < DP_MAX_REGIONS; i++)
		if (regs[i]) {
			stats_region_removed(regs[i]->len);
			region_put(regs[i]);
		}
	for (unsigned i = 0; i < DP_MAX_SEGS; i++)
		if (hs[i]) {
			segment_put(hs[i]->seg);
			free(hs[i]);
		}
	log_info("client %u (pid %d '%s') left", c->id, (int)c->pid, c->name);
	client_put(c);
}

static void client_accept(int epfd, int lfd)
{
	struct epoll_event ev = {.events = EPOLLIN};
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	struct client *c;
	int fd;

	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd < 0)
		return;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) {
		close(fd);
		return;
	}
	if (nclients >= cfg.max_clients) {
		log_warn("refusing pid %d: %u clients already (--max-clients)", (int)cred.pid,
			 nclients);
		close(fd);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	atomic_init(&c->refs, 1);
	c->fd = fd;
	c->id = next_client_id++;
	c->pid = cred.pid;
	c->uid = cred.uid;
	c->gid = cred.gid;
	ev.data.ptr = c;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		close(fd);
		free(c);
		return;
	}
	c->next = clients;
	clients = c;
	nclients++;
	stats_client_added();
	log_info("client %u: connected, pid %d uid %d gid %d", c->id, (int)cred.pid, (int)cred.uid,
		 (int)cred.gid);
}

typedef int (*handler_fn)(struct client *, struct msg_in *);

/* Indexed by a type ctl_msg_check_hdr() accepted: one handler for each. */
static const handler_fn handlers[CTL_MSG_NTYPES] = {
	[DP_MSG_HELLO] = on_hello,
	[DP_MSG_QUEUE_CREATE] = on_queue_create,
	[DP_MSG_QUEUE_DESTROY] = on_queue_destroy,
	[DP_MSG_REGION_REGISTER] = on_region_register,
	[DP_MSG_REGION_FREE] = on_region_free,
	[DP_MSG_SEGMENT_EXPORT] = on_segment_export,
	[DP_MSG_SEGMENT_UNEXPORT] = on_segment_unexport,
	[DP_MSG_SEGMENT_OPEN] = on_segment_open,
	[DP_MSG_SEGMENT_CLOSE] = on_segment_close,
	[DP_MSG_REGION_REGISTER_CUDA] = on_region_register_cuda,
	[DP_MSG_REGION_REGISTER_FILE] = on_region_file,
	[DP_MSG_REGION_OPEN_PATH] = on_region_file,
};

/* Returns false when the client must be dropped. */
static bool client_read(struct client *c)
{
	_Alignas(8) char buf[DP_MSG_MAX];
	union {
		char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
		struct cmsghdr align;
	} u;
	struct iovec iov = {buf, sizeof(buf)};
	struct msghdr msg = {.msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf)};
	struct msg_in m = {.payload = buf + sizeof(struct dp_msg_hdr), .nfds = 0};
	ssize_t n;
	int rc;

	n = recvmsg(c->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR;
	if (n == 0)
		return false;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		int *fds = (int *)CMSG_DATA(cm);
		for (size_t i = 0; i < k; i++) {
			if (m.nfds < MAX_FDS)
				m.fds[m.nfds++] = fds[i];
			else
				close(fds[i]);
		}
	}
	/* m.hdr stays all zero unless a whole header came: the error reply
	 * then carries type 0 and seq 0. */
	if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
		rc = -EMSGSIZE;
	else
		rc = ctl_msg_check_hdr(buf, (size_t)n, &m.hdr);
	if (!rc && !c->hello && m.hdr.type != DP_MSG_HELLO)
		rc = -EPROTO;
	if (!rc)
		rc = ctl_msg_check_payload(&m.hdr, m.payload, (unsigned)m.nfds);
	if (!rc)
		rc = handlers[m.hdr.type](c, &m);
	for (int i = 0; i < m.nfds; i++)
		close(m.fds[i]);
	if (rc == 1)
		return false; /* handler replied and wants the client gone */
	if (rc < 0) {
		struct dp_msg_status st = {.status = rc};
		bool malformed = rc == -EBADMSG || rc == -EMSGSIZE || rc == -EOPNOTSUPP ||
				 rc == -EPROTONOSUPPORT || rc == -EPROTO;

		send_reply(c, &m.hdr, m.hdr.type, &st, sizeof(st), NULL, 0);
		if (malformed) {
			log_warn("client %u (pid %d): malformed message (%s), strike %u", c->id,
				 (int)c->pid, strerror(-rc), c->strikes + 1);
			if (++c->strikes >= MAX_STRIKES || rc == -EPROTONOSUPPORT)
				return false;
		}
	}
	return true;
}

/* ---- the socket and the loop ---- */

static int mkdir_parent(const char *path)
{
	char dir[sizeof(cfg.socket_path)];
	char *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = 0;
	for (char *p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		mkdir(dir, 0755);
		*p = '/';
	}
	if (mkdir(dir, 0750) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int listen_socket(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, rc;

	memcpy(sa.sun_path, cfg.socket_path, strlen(cfg.socket_path) + 1);
	rc = mkdir_parent(cfg.socket_path);
	if (rc)
		return rc;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* A socket file nobody answers on is a leftover of a crash. */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		close(fd);
		return -EADDRINUSE;
	}
	close(fd);
	unlink(cfg.socket_path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(cfg.socket_path, 0660) < 0 ||
	    listen(fd, 128) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

static void control_cleanup(int epfd)
{
	while (clients)
		client_drop(epfd, clients);
	while (remotes) {
		struct segment *s = remotes;

		remotes = s->next;
		segment_put(s);
	}
	while (peers) {
		struct peer *p = peers;

		peers = p->next;
		free(p);
	}
}

int control_run(int rpc_fd)
{
	struct epoll_event ev = {.events = EPOLLIN}, evs[64];
	sigset_t sigs;
	int lfd, sfd, epfd, rc = 0;

	lfd = listen_socket();
	if (lfd < 0) {
		log_err("control socket %s: %s", cfg.socket_path, strerror(-lfd));
		atomic_store(&dp_stopping, 1);
		pollers_stop();
		return lfd;
	}
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (sfd < 0 || epfd < 0) {
		rc = -errno;
		atomic_store(&dp_stopping, 1);
		pollers_stop();
		return rc;
	}
	ev.data.ptr = &lfd;
	epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev);
	ev.data.ptr = &sfd;
	epoll_ctl(epfd, EPOLL_CTL_ADD, sfd, &ev);
	ev.data.ptr = &control_wake_efd;
	epoll_ctl(epfd, EPOLL_CTL_ADD, control_wake_efd, &ev);
	if (rpc_fd >= 0) {
		ev.data.ptr = &rpc_fd;
		epoll_ctl(epfd, EPOLL_CTL_ADD, rpc_fd, &ev);
	}
	rc = directory_start(epfd, remotes_invalidate);
	if (rc) {
		log_err("directory: %s", strerror(-rc));
		atomic_store(&dp_stopping, 1);
	}
	log_info("listening on %s", cfg.socket_path);
	if (!atomic_load(&dp_stopping))
		service_notify("READY=1\nSTATUS=accepting clients");

	bool reap_broken = false;

	while (!atomic_load(&dp_stopping)) {
		int n = epoll_wait(epfd, evs, 64, -1);

		for (int i = 0; i < n; i++) {
			void *tag = evs[i].data.ptr;

			if (tag == &lfd) {
				client_accept(epfd, lfd);
			} else if (tag == &rpc_fd) {
				rpc_serve(rpc_fd);
			} else if (directory_owns(tag)) {
				directory_event(tag, evs[i].events);
			} else if (tag == &sfd) {
				struct signalfd_siginfo si;

				if (read(sfd, &si, sizeof(si)) == sizeof(si))
					log_info("signal %u: shutting down", si.ssi_signo);
				atomic_store_explicit(&dp_stopping, 1, memory_order_release);
			} else if (tag == &control_wake_efd) {
				dp_doorbell_drain(control_wake_efd);
				reap_broken = true;
			} else {
				struct client *c = tag;

				if (!client_read(c))
					client_drop(epfd, c);
			}
		}
		/* Broken clients go after the batch: a client dropped here
		 * may still have an event of its own later in `evs`, and its
		 * fd number may already belong to a client accepted above. */
		if (reap_broken) {
			struct client *c, *next;

			reap_broken = false;
			for (c = clients; c; c = next) {
				next = c->next;
				if (atomic_load(&c->broken))
					client_drop(epfd, c);
			}
		}
	}
	service_notify("STOPPING=1");
	/* Stop accepting at once; clients stay connected until the pollers
	 * have answered everything they handed over. */
	close(lfd);
	if (rpc_fd >= 0)
		close(rpc_fd);
	unlink(cfg.socket_path);
	pollers_stop();
	control_cleanup(epfd);
	directory_stop();
	close(epfd);
	close(sfd);
	return rc;
}
