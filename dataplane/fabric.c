/* SPDX-License-Identifier: MIT */
/*
 * fabric.c - the fabric engine: rails, endpoints, registrations, and the
 * RMA data path (slices striped over rails, bounded in flight, -FI_EAGAIN
 * retried after progress, errors and timeouts retried on another rail, then
 * reported). See fabric.h for the threading model.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <string.h>
#include <time.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "engine.h"
#include "fabric.h"
#include "fault.h"
#include "stats.h"

struct fabric_config fab_cfg = {
	.provider = "auto", .nics = "auto", .slice = 1u << 20, .timeout_ms = 5000};

struct rail {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	uint64_t next_key; /* requested keys, when the provider does not pick */
	size_t tx_depth;   /* operations in flight per endpoint */
	bool wait_fd;	   /* CQs have wait fds (providers needing target progress) */
	bool poke;	   /* needs target progress but has no usable wait fd */
};

/* One poller's endpoint on one rail. */
struct rail_ep {
	struct dp_stats_rail *st; /* this poller's counters for the rail, or NULL */
	struct fid_ep *ep;
	struct fid_cq *cq;
	int wait_fd;
	size_t inflight;
};

struct fab_op;

struct fab_slice {
	struct fi_context2 ctx; /* first: libfabric hands it back */
	struct fab_op *op;
	uint64_t off, len;
	unsigned rail;
	unsigned tries;
	struct fab_slice *next;
};

/* One descriptor's transfer. Freed when completed and no slice is out. */
struct fab_op {
	struct queue *q; /* NULL once completed */
	uint64_t user_data;
	uint64_t submit_ns;
	uint8_t opcode;
	struct region *local;
	struct segment *seg;
	uint64_t loc_off, tgt_off, len;
	uint64_t next_off; /* bytes sliced so far */
	unsigned out;	   /* slices posted, not yet returned */
	unsigned next_rail;
	int status;
	uint64_t deadline_ns;
	struct fab_slice *retry; /* slices to post again */
	struct fab_op *next;
};

struct fab_poller {
	struct rail_ep ep[DP_MAX_RAILS];
	struct fab_op *head, *tail; /* ops with slices to post or out */
	unsigned nops;
	uint64_t last_timeout_scan;
};

struct region_mrs {
	struct fid_mr *mr[DP_MAX_RAILS];
};

static struct rail rails[DP_MAX_RAILS];
static unsigned nrails;
static bool virt_addr;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

unsigned fabric_nrails(void)
{
	return nrails;
}

bool fabric_virt_addr(void)
{
	return virt_addr;
}

static const char *mr_mode_str(uint64_t m, char *buf, size_t len)
{
	static const struct {
		uint64_t bit;
		const char *name;
	} bits[] = {{FI_MR_LOCAL, "local"},
		    {FI_MR_VIRT_ADDR, "virt_addr"},
		    {FI_MR_ALLOCATED, "allocated"},
		    {FI_MR_PROV_KEY, "prov_key"},
		    {FI_MR_HMEM, "hmem"},
		    {FI_MR_ENDPOINT, "endpoint"},
		    {FI_MR_RAW, "raw"}};
	size_t n = 0;

	buf[0] = 0;
	for (unsigned i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
		if (m & bits[i].bit)
			n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "," : "", bits[i].name);
	if (!n)
		snprintf(buf, len, "none");
	return buf;
}

static const char *prov_name(void)
{
	if (!strcmp(fab_cfg.provider, "tcp"))
		return "tcp;ofi_rxm";
	return fab_cfg.provider;
}

static struct fi_info *rail_hints(const char *prov, bool hmem, bool delivery)
{
	struct fi_info *h = fi_allocinfo();

	if (!h)
		return NULL;
	h->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	if (hmem)
		h->caps |= FI_HMEM;
	h->ep_attr->type = FI_EP_RDM;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
				  (hmem ? FI_MR_HMEM : 0);
	h->domain_attr->threading = FI_THREAD_SAFE;
	h->domain_attr->av_type = FI_AV_TABLE;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	/* A WRITE completes when its bytes are in the target's memory: tcp
	 * and shm otherwise report a write done once it is sent. */
	if (delivery)
		h->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
	if (prov)
		h->fabric_attr->prov_name = strdup(prov);
	return h;
}

/* Candidates for the configured provider; "auto" tries efa, then tcp. */
static int get_infos(struct fi_info **out)
{
	static const char *const order[] = {"efa", "tcp;ofi_rxm"};
	bool hmem = false;
	int rc = -FI_ENODATA;

#ifdef DP_HAVE_CUDA
	hmem = true;
#endif
	for (unsigned i = 0; i < 2; i++) {
		const char *p = strcmp(fab_cfg.provider, "auto") ? prov_name() : order[i];

		/* FI_HMEM first where GPU memory can exist; a provider without
		 * it still serves host memory. Delivery-complete writes first;
		 * a provider that lacks them is logged (rail_open). */
		for (int h = hmem; h >= 0; h--) {
			for (int dc = 1; dc >= 0; dc--) {
				struct fi_info *hints = rail_hints(p, h, dc);

				rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, out);
				fi_freeinfo(hints);
				if (!rc)
					return 0;
			}
		}
		if (strcmp(fab_cfg.provider, "auto"))
			break;
	}
	return rc;
}

static bool nic_wanted(const char *domain, unsigned have)
{
	char list[sizeof(fab_cfg.nics)], *save, *tok;

	if (!strcmp(fab_cfg.nics, "auto")) {
		/* EFA: every device is a rail. Others: the first domain. */
		return !strcmp(fab_cfg.provider, "efa") || !have;
	}
	snprintf(list, sizeof(list), "%s", fab_cfg.nics);
	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		if (!strcmp(tok, domain))
			return true;
	return false;
}

static int rail_open(struct rail *r, struct fi_info *fi)
{
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	char mm[128];
	int rc;

	r->info = fi_dupinfo(fi);
	if (!r->info)
		return -ENOMEM;
	if ((rc = fi_fabric(fi->fabric_attr, &r->fabric, NULL)) ||
	    (rc = fi_domain(r->fabric, r->info, &r->domain, NULL)) ||
	    (rc = fi_av_open(r->domain, &av_attr, &r->av, NULL)))
		return rc;
	r->tx_depth = fi->tx_attr->size ? fi->tx_attr->size : 64;
	r->next_key = 1;
	/* Providers whose target side progresses only when its CQ is read
	 * get CQ wait fds, so a sleeping poller 0 still wakes for them. */
	r->wait_fd = fi->domain_attr->data_progress == FI_PROGRESS_MANUAL;
	/* shm's CQ fd does not signal incoming RMA (checked with 1.17): a
	 * sleeping target would stall its peers. Such rails cap the sleep. */
	if (r->wait_fd && !strstr(fi->fabric_attr->prov_name, "tcp") &&
	    strcmp(fi->fabric_attr->prov_name, "sockets")) {
		r->wait_fd = false;
		r->poke = true;
	}
	log_info("rail %ld: provider %s, fabric %s, domain %s, max msg %zu, tx depth %zu, "
		 "inject %zu, mr_mode %s%s",
		 (long)(r - rails), fi->fabric_attr->prov_name, fi->fabric_attr->name,
		 fi->domain_attr->name, fi->ep_attr->max_msg_size, fi->tx_attr->size,
		 fi->tx_attr->inject_size, mr_mode_str(fi->domain_attr->mr_mode, mm, sizeof(mm)),
		 fi->caps & FI_HMEM ? ", FI_HMEM" : "");
	if (!(fi->tx_attr->op_flags & FI_DELIVERY_COMPLETE))
		log_warn("rail %ld: no FI_DELIVERY_COMPLETE; a WRITE completes when the provider "
			 "says it is sent",
			 (long)(r - rails));
	return 0;
}

static int ep_open(struct rail *r, struct rail_ep *e)
{
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT,
				     .size = r->tx_depth * 2,
				     .wait_obj = r->wait_fd ? FI_WAIT_FD : FI_WAIT_NONE};
	int rc;

	e->wait_fd = -1;
	rc = fi_cq_open(r->domain, &cq_attr, &e->cq, NULL);
	if (rc && r->wait_fd) {
		/* No wait fds here: poll without them (the poller then caps
		 * its sleep; see poller_sleep). */
		r->wait_fd = false;
		r->poke = true;
		cq_attr.wait_obj = FI_WAIT_NONE;
		rc = fi_cq_open(r->domain, &cq_attr, &e->cq, NULL);
	}
	if (rc)
		return rc;
	if ((rc = fi_endpoint(r->domain, r->info, &e->ep, NULL)) ||
	    (rc = fi_ep_bind(e->ep, &r->av->fid, 0)) ||
	    (rc = fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV)) || (rc = fi_enable(e->ep)))
		return rc;
	if (r->wait_fd && fi_control(&e->cq->fid, FI_GETWAIT, &e->wait_fd))
		e->wait_fd = -1;
	return 0;
}

static int fabric_start(void)
{
	struct fi_info *infos = NULL, *fi;
	int rc;

	if (!strcmp(fab_cfg.provider, "none")) {
		log_info("fabric: off (--provider none); local transfers only");
		return 0;
	}
	rc = get_infos(&infos);
	if (rc) {
		log_err("fabric: no %s provider with RDM endpoints and RMA: %s", fab_cfg.provider,
			fi_strerror(-rc));
		return -ENODEV;
	}
	for (fi = infos; fi && nrails < DP_MAX_RAILS; fi = fi->next) {
		bool dup = false;

		/* One rail per domain: providers list a domain once per
		 * address format or capability set. */
		for (unsigned i = 0; i < nrails; i++)
			if (!strcmp(rails[i].info->domain_attr->name, fi->domain_attr->name))
				dup = true;
		if (dup || !nic_wanted(fi->domain_attr->name, nrails))
			continue;
		rc = rail_open(&rails[nrails], fi);
		if (rc) {
			log_err("fabric: rail %s: %s", fi->domain_attr->name, fi_strerror(-rc));
			fi_freeinfo(infos);
			return -EIO;
		}
		if (rails[nrails].info->domain_attr->mr_mode & FI_MR_VIRT_ADDR)
			virt_addr = true;
		stats_rail_name(nrails, fi->fabric_attr->prov_name, fi->fabric_attr->name,
				fi->domain_attr->name);
		nrails++;
	}
	fi_freeinfo(infos);
	if (!nrails) {
		log_err("fabric: --nics %s matches no domain of provider %s", fab_cfg.nics,
			fab_cfg.provider);
		return -ENODEV;
	}
	for (unsigned p = 0; p < cfg.pollers; p++) {
		struct fab_poller *fp = calloc(1, sizeof(*fp));

		if (!fp)
			return -ENOMEM;
		pollers[p].eng[ENGINE_fabric] = fp;
		pollers[p].idx = p;
		for (unsigned r = 0; r < nrails; r++) {
			fp->ep[r].st = stats_rail(r, &pollers[p]);
			rc = ep_open(&rails[r], &fp->ep[r]);
			if (rc) {
				log_err("fabric: endpoint on rail %u: %s", r, fi_strerror(-rc));
				return -EIO;
			}
		}
	}
	return 0;
}

static void fabric_fini(void)
{
	for (unsigned p = 0; p < cfg.pollers; p++) {
		struct fab_poller *fp = pollers[p].eng[ENGINE_fabric];

		if (!fp)
			continue;
		for (unsigned r = 0; r < nrails; r++) {
			if (fp->ep[r].ep)
				fi_close(&fp->ep[r].ep->fid);
			if (fp->ep[r].cq)
				fi_close(&fp->ep[r].cq->fid);
		}
		free(fp);
		pollers[p].eng[ENGINE_fabric] = NULL;
	}
	for (unsigned r = 0; r < nrails; r++) {
		fi_close(&rails[r].av->fid);
		fi_close(&rails[r].domain->fid);
		fi_close(&rails[r].fabric->fid);
		fi_freeinfo(rails[r].info);
	}
	nrails = 0;
}

int fabric_rail_addr(unsigned rail, void *buf, size_t *len)
{
	struct fab_poller *fp = pollers[0].eng[ENGINE_fabric];

	if (rail >= nrails || !fp)
		return -EINVAL;
	return fi_getname(&fp->ep[rail].ep->fid, buf, len) ? -EIO : 0;
}

/* ---- registrations (control thread) ---- */

/* Regions a rail can register: host memory always; GPU memory only where
 * the provider took FI_HMEM (without it a provider would treat a device
 * pointer as host memory: the crash of libfabric issue 12328). */
static bool rail_takes(const struct rail *r, const struct region *reg)
{
	return reg->kind == REGION_HOST || (reg->kind == REGION_CUDA && r->info->caps & FI_HMEM);
}

static int mr_reg(struct rail *r, struct region *reg, uint64_t access, struct fid_mr **mr)
{
	struct iovec iov = {.iov_base = reg->base, .iov_len = reg->len};
	struct fi_mr_attr attr = {.mr_iov = &iov,
				  .iov_count = 1,
				  .access = access,
				  .requested_key = r->next_key++,
				  .iface = FI_HMEM_SYSTEM};

	if (reg->kind == REGION_CUDA) {
		attr.iface = FI_HMEM_CUDA;
		attr.device.cuda = reg->device;
	}
	return fi_mr_regattr(r->domain, &attr, 0, mr);
}

static bool rails_take(const struct region *reg)
{
	for (unsigned r = 0; r < nrails; r++)
		if (!rail_takes(&rails[r], reg))
			return false;
	return nrails > 0;
}

static void fabric_region_deregister(struct region *reg);
static void fabric_export_deregister(struct segment *s);

static int fabric_region_register(struct region *reg)
{
	struct region_mrs *m;

	if (!rails_take(reg))
		return 0;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	for (unsigned r = 0; r < nrails; r++) {
		int rc = mr_reg(&rails[r], reg, FI_READ | FI_WRITE, &m->mr[r]);

		if (rc) {
			log_warn("fabric: registering %llu bytes of %s memory on rail %u: %s%s",
				 (unsigned long long)reg->len,
				 reg->kind == REGION_CUDA ? "GPU" : "host", r, fi_strerror(-rc),
				 reg->kind == REGION_CUDA ? "; the region serves local copies only"
							  : "");
			reg->eng[ENGINE_fabric] = m;
			fabric_region_deregister(reg);
			/* GPU memory the provider cannot register still works
			 * for local copies; its fabric transfers fail with
			 * -EHOSTUNREACH (no registration). */
			return reg->kind == REGION_CUDA ? 0 : -ENOMEM;
		}
	}
	reg->eng[ENGINE_fabric] = m;
	return 0;
}

static void fabric_region_deregister(struct region *reg)
{
	struct region_mrs *m = reg->eng[ENGINE_fabric];

	if (!m)
		return;
	for (unsigned r = 0; r < nrails; r++)
		if (m->mr[r])
			fi_close(&m->mr[r]->fid);
	free(m);
	reg->eng[ENGINE_fabric] = NULL;
}

static int fabric_export_register(struct segment *s)
{
	uint64_t *keys = s->fab_keys;
	uint64_t access = FI_REMOTE_READ | (s->access & DP_ACCESS_WRITE ? FI_REMOTE_WRITE : 0);
	struct region_mrs *m;

	if (!rails_take(s->region))
		return 0;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	for (unsigned r = 0; r < nrails; r++) {
		int rc = mr_reg(&rails[r], s->region, access, &m->mr[r]);

		if (rc) {
			s->eng[ENGINE_fabric] = m;
			fabric_export_deregister(s);
			/* As above: a GPU export the provider cannot register
			 * is reachable by this service's clients only. */
			return s->region->kind == REGION_CUDA ? 0 : -ENOMEM;
		}
		keys[r] = fi_mr_key(m->mr[r]);
	}
	s->eng[ENGINE_fabric] = m;
	return 0;
}

static void fabric_export_deregister(struct segment *s)
{
	struct region_mrs *m = s->eng[ENGINE_fabric];

	if (!m)
		return;
	for (unsigned r = 0; r < nrails; r++)
		if (m->mr[r])
			fi_close(&m->mr[r]->fid);
	free(m);
	s->eng[ENGINE_fabric] = NULL;
}

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
	return 0;
}

/* ---- data path (poller thread) ---- */

static void op_complete(struct fab_op *op, int status)
{
	struct queue *q = op->q;

	if (!q)
		return;
	op->q = NULL;
	q->inflight--;
	queue_complete_ns(q, op->user_data, op->submit_ns, status, status ? 0 : op->len,
			  DP_CQE_F_FABRIC);
}

static void op_free(struct fab_op *op)
{
	region_put(op->local);
	segment_put(op->seg);
	while (op->retry) {
		struct fab_slice *s = op->retry;

		op->retry = s->next;
		free(s);
	}
	free(op);
}

static void fabric_submit(struct poller *p, const struct xfer *x)
{
	struct fab_poller *fp = p->eng[ENGINE_fabric];
	struct queue *q = x->q;
	const struct dp_desc *d = x->d;
	struct region *local = x->ra;
	struct segment *seg = x->seg;
	struct remote_seg *rs = seg->remote;
	struct fab_op *op;

	/* A peer known to be gone fails at once, not after the timeout. */
	if (!fp || !local->eng[ENGINE_fabric] || rs->peer->nrails == 0 ||
	    atomic_load(&rs->peer->dead)) {
		queue_complete_ns(q, d->user_data, d->submit_ns, -EHOSTUNREACH, 0, DP_CQE_F_FABRIC);
		return;
	}
	op = calloc(1, sizeof(*op));
	if (!op) {
		queue_complete_ns(q, d->user_data, d->submit_ns, -ENOMEM, 0, 0);
		return;
	}
	atomic_fetch_add(&local->refs, 1);
	atomic_fetch_add(&seg->refs, 1);
	*op = (struct fab_op){.q = q,
			      .user_data = d->user_data,
			      .submit_ns = d->submit_ns,
			      .opcode = d->opcode,
			      .local = local,
			      .seg = seg,
			      .loc_off = d->local_off,
			      .tgt_off = d->target_off,
			      .len = d->len,
			      .next_rail = (unsigned)(d->user_data % rs->peer->nrails),
			      .deadline_ns = now_ns() + (uint64_t)fab_cfg.timeout_ms * 1000000u};
	q->inflight++;
	if (!op->len) {
		op_complete(op, 0);
		op_free(op);
		return;
	}
	if (fp->tail)
		fp->tail->next = op;
	else
		fp->head = op;
	fp->tail = op;
	fp->nops++;
}

/* Posts one slice; 0, -FI_EAGAIN (try later), or another error. */
static int slice_post(struct fab_poller *fp, struct fab_slice *s)
{
	struct fab_op *op = s->op;
	struct remote_seg *rs = op->seg->remote;
	struct region_mrs *m = op->local->eng[ENGINE_fabric];
	struct rail_ep *e = &fp->ep[s->rail];
	void *buf = op->local->base + op->loc_off + s->off;
	void *desc = fi_mr_desc(m->mr[s->rail]);
	uint64_t raddr = (virt_addr ? rs->base : 0) + op->tgt_off + s->off;
	fi_addr_t dest = rs->peer->addr[s->rail];
	ssize_t rc;

	if (e->inflight >= rails[s->rail].tx_depth)
		return -FI_EAGAIN;
	if (DP_FAULT(FI_POST_EAGAIN))
		rc = -FI_EAGAIN;
	else if (DP_FAULT(FI_POST_FAIL))
		rc = -FI_EIO;
	else if (op->opcode == DP_OP_WRITE)
		rc = fi_write(e->ep, buf, s->len, desc, dest, raddr, rs->key[s->rail], &s->ctx);
	else
		rc = fi_read(e->ep, buf, s->len, desc, dest, raddr, rs->key[s->rail], &s->ctx);
	if (rc) {
		if (rc == -FI_EAGAIN && e->st)
			stats_add(&e->st->eagain, 1);
		return (int)rc;
	}
	if (e->st) {
		stats_add(&e->st->posted, 1);
		if (s->tries > 1)
			stats_add(&e->st->retries, 1);
	}
	e->inflight++;
	op->out++;
	return 0;
}

/* Marks a peer gone: its cached segments are dropped by the control thread
 * (rpc.c), which checks `dead` on the next open. */
static void peer_lost(struct peer *pr)
{
	if (!atomic_exchange(&pr->dead, 1))
		log_warn("fabric: peer %s unreachable; its segments are dropped", pr->name);
}

/* A slice that failed: again on the next rail while tries remain. */
static void slice_failed(struct fab_op *op, struct fab_slice *s, int err)
{
	struct peer *peer = op->seg->remote->peer;
	unsigned n = peer->nrails;

	if (op->q && s->tries < n && !atomic_load(&op->seg->dead)) {
		s->tries++;
		s->rail = (s->rail + 1) % n;
		s->next = op->retry;
		op->retry = s;
		return;
	}
	free(s);
	/* Whatever the provider said, a transfer to a peer that went away
	 * failed because it went away. A slice that failed on every rail
	 * means the peer is lost too, whatever the error: sockets reports a
	 * dead peer as a plain FI_EIO, and a cached description that a
	 * restarted peer no longer honours must be asked for again. */
	if (atomic_load(&peer->dead))
		err = -EHOSTUNREACH;
	else if (op->q)
		peer_lost(peer);
	if (!op->status)
		op->status = err;
}

static int errno_of(int fi_err)
{
	switch (fi_err) {
	case FI_ETIMEDOUT:
		return -ETIMEDOUT;
	case FI_EHOSTUNREACH:
	case FI_ECONNREFUSED:
	case FI_ECONNRESET:
	case FI_ECONNABORTED:
	case FI_ENOTCONN:
	case FI_EADDRNOTAVAIL:
	/* tcp cancels what is in flight on a connection its peer closed;
	 * our own shutdown cancels through fabric_cancel_all, not the CQ. */
	case FI_ECANCELED:
		return -EHOSTUNREACH;
	default:
		return -EIO;
	}
}

/* A slice the CQ reported failed (fi_cq_readerr's @fi_err). */
static void slice_cq_error(struct rail_ep *e, unsigned rail, struct fab_slice *s, int fi_err)
{
	struct fab_op *op = s->op;
	int code = errno_of(fi_err);

	e->inflight--;
	op->out--;
	if (e->st)
		stats_add(&e->st->errors, 1);
	log_debug("fabric: slice on rail %u failed: %s", rail, fi_strerror(fi_err));
	if (code == -EHOSTUNREACH)
		peer_lost(op->seg->remote->peer);
	slice_failed(op, s, code);
}

static int reap(struct poller *p, struct fab_poller *fp)
{
	struct fi_cq_entry ents[32];
	int done = 0;

	for (unsigned r = 0; r < nrails; r++) {
		struct rail_ep *e = &fp->ep[r];
		ssize_t n;

		while ((n = fi_cq_read(e->cq, ents, 32)) > 0) {
			for (ssize_t i = 0; i < n; i++) {
				struct fab_slice *s = ents[i].op_context;

				if (DP_FAULT(FI_CQ_ERR)) {
					slice_cq_error(e, r, s, FI_EIO);
					continue;
				}
				e->inflight--;
				s->op->out--;
				if (e->st) {
					stats_add(&e->st->completed, 1);
					stats_add(&e->st->bytes, s->len);
				}
				free(s);
			}
			done += (int)n;
		}
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};

			if (fi_cq_readerr(e->cq, &err, 0) == 1 && err.op_context) {
				slice_cq_error(e, r, err.op_context, err.err);
				done++;
			}
		}
	}
	(void)p;
	return done;
}

/* Slices what is left of op and posts while endpoints have room. */
static int op_post(struct fab_poller *fp, struct fab_op *op)
{
	unsigned n = op->seg->remote->peer->nrails;
	int posted = 0, rc;

	while (op->retry && op->q) {
		struct fab_slice *s = op->retry;

		rc = slice_post(fp, s);
		if (rc == -FI_EAGAIN)
			return posted;
		op->retry = s->next;
		if (rc) {
			slice_failed(op, s, errno_of((int)-rc));
			continue;
		}
		posted++;
	}
	while (op->next_off < op->len && op->q && !op->status) {
		struct fab_slice *s = malloc(sizeof(*s));
		uint64_t len = op->len - op->next_off;

		if (!s) {
			op->status = -ENOMEM;
			break;
		}
		if (len > fab_cfg.slice)
			len = fab_cfg.slice;
		*s = (struct fab_slice){.op = op,
					.off = op->next_off,
					.len = len,
					.rail = op->next_rail % n,
					.tries = 1};
		rc = slice_post(fp, s);
		if (rc == -FI_EAGAIN) {
			free(s);
			return posted;
		}
		op->next_off += len;
		op->next_rail++;
		if (rc) {
			slice_failed(op, s, errno_of((int)-rc));
			continue;
		}
		posted++;
	}
	return posted;
}

/* Nothing more will be posted: every slice went out, or the op failed or
 * completed. Slices of a failed op still waiting for their retry are never
 * posted (op_post skips it; op_free frees them): waiting for them would
 * keep the op, and its completion, until the timeout, and after it forever. */
static bool op_finished_posting(const struct fab_op *op)
{
	return op->status || !op->q || (!op->retry && op->next_off == op->len);
}

static int fabric_progress(struct poller *p)
{
	struct fab_poller *fp = p->eng[ENGINE_fabric];
	struct fab_op **pp, *prev = NULL;
	uint64_t t = 0;
	int work;

	if (!fp)
		return 0;
	work = reap(p, fp);
	if (!fp->head)
		return work;
	/* Timeouts are checked once a millisecond, not per loop. */
	if (fp->nops) {
		t = now_ns();
		if (t - fp->last_timeout_scan < 1000000u)
			t = 0;
		else
			fp->last_timeout_scan = t;
	}
	for (pp = &fp->head; *pp;) {
		struct fab_op *op = *pp;

		if (op->q && !op->status)
			work += op_post(fp, op);
		if (t && op->q && t > op->deadline_ns) {
			/* Once per peer, not once per transfer. */
			if (!atomic_load(&op->seg->remote->peer->dead))
				log_warn("fabric: transfer to %s timed out after %u ms",
					 op->seg->remote->peer->name, fab_cfg.timeout_ms);
			peer_lost(op->seg->remote->peer);
			op_complete(op, -ETIMEDOUT);
		}
		if (op_finished_posting(op) && !op->out) {
			op_complete(op, op->status);
			*pp = op->next;
			if (fp->tail == op)
				fp->tail = prev;
			fp->nops--;
			op_free(op);
			work++;
			continue;
		}
		prev = op;
		pp = &op->next;
	}
	return work;
}

static bool fabric_busy(const struct poller *p)
{
	const struct fab_poller *fp = p->eng[ENGINE_fabric];

	return fp && fp->head;
}

static int fabric_wait_fds(struct poller *p, int *fds, int max)
{
	struct fab_poller *fp = p->eng[ENGINE_fabric];
	int n = 0;

	for (unsigned r = 0; fp && r < nrails && n < max; r++)
		if (fp->ep[r].wait_fd >= 0)
			fds[n++] = fp->ep[r].wait_fd;
	return n;
}

static int fabric_sleep_cap_ms(void)
{
	for (unsigned r = 0; r < nrails; r++)
		if (rails[r].poke)
			return 1;
	return -1;
}

static int fabric_trywait(struct poller *p)
{
	struct fab_poller *fp = p->eng[ENGINE_fabric];

	if (!fp)
		return 0;
	for (unsigned r = 0; r < nrails; r++) {
		struct fid *fid = &fp->ep[r].cq->fid;

		/* fi_trywait: 0 when nothing is pending and the fd will
		 * signal what arrives next. Each rail has its own fabric. */
		if (fp->ep[r].wait_fd >= 0 && fi_trywait(rails[r].fabric, &fid, 1))
			return -EAGAIN;
	}
	return 0;
}

static void fabric_cancel_all(struct poller *p)
{
	struct fab_poller *fp = p->eng[ENGINE_fabric];
	uint64_t until = now_ns() + 2000000000ull;

	if (!fp)
		return;
	for (struct fab_op *op = fp->head; op; op = op->next)
		op_complete(op, -ECANCELED);
	/* Let posted slices come back (bounded) so their memory is not in
	 * the provider's hands when the endpoints close. */
	while (fp->head && now_ns() < until)
		fabric_progress(p);
}

/* Start-up failures say how to run without the fabric. */
static int fabric_init(void)
{
	int rc = fabric_start();

	if (rc)
		log_err("fabric: %s (use --provider none for local transfers only)", strerror(-rc));
	return rc;
}

const struct engine fabric_engine = {
	.name = "fabric",
	.init = fabric_init,
	.fini = fabric_fini,
	.submit = fabric_submit,
	.progress = fabric_progress,
	.busy = fabric_busy,
	.wait_fds = fabric_wait_fds,
	.trywait = fabric_trywait,
	.sleep_cap_ms = fabric_sleep_cap_ms,
	.cancel_all = fabric_cancel_all,
	.region_open = fabric_region_register,
	.region_close = fabric_region_deregister,
	.segment_export = fabric_export_register,
	.segment_unexport = fabric_export_deregister,
};
