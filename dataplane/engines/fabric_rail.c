/* SPDX-License-Identifier: MIT */
/*
 * fabric_rail.c - the fabric engine's rails: a provider's domains chosen
 * and opened (one fabric, domain and AV per NIC), every poller's endpoint
 * and CQ on each, and the registrations of regions and exports on every
 * rail. The data path is fabric.c; see fabric.h for the threading model.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include "fabric.h"
#include "fabric_internal.h"
#include "gpu.h"
#include "samehost.h"
#include "stats.h"

struct fabric_config fab_cfg = {
	.provider = "auto", .nics = "auto", .slice = 1u << 20, .timeout_ms = 5000, .stage_bufs = 4};

struct rail rails[DP_MAX_RAILS];
unsigned nrails;
bool virt_addr;

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

static struct fi_info *rail_hints(const char *prov, bool hmem, bool delivery, bool rma_event)
{
	struct fi_info *h = fi_allocinfo();

	if (!h)
		return NULL;
	/* FI_MSG: the owner-staging requests of the stage engine (stage.c). */
	h->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_MSG |
		  FI_SEND | FI_RECV;
	if (hmem)
		h->caps |= FI_HMEM;
	/* Counters of peers' RMA into our endpoints (fabric.c, target_moved):
	 * how poller 0 of a provider without usable wait fds (shm) learns
	 * that reading its CQs served a peer. */
	if (rma_event)
		h->caps |= FI_RMA_EVENT;
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

/* Drops the entries of *list whose provider is not exactly `name` (fi_getinfo
 * also lists utility providers layered on it), and for EFA those of the
 * other fabric (struct prov_cand); -FI_ENODATA if none is left. */
static int keep_exact(struct fi_info **list, const char *name, bool direct)
{
	struct fi_info **pp = list, *fi;

	while ((fi = *pp)) {
		bool is_direct =
			fi->fabric_attr->name && !strcmp(fi->fabric_attr->name, "efa-direct");

		if (strcmp(fi->fabric_attr->prov_name, name) ||
		    (!strcmp(name, "efa") && is_direct != direct)) {
			*pp = fi->next;
			fi->next = NULL;
			fi_freeinfo(fi);
		} else {
			pp = &fi->next;
		}
	}
	return *list ? 0 : -FI_ENODATA;
}

/* What to ask fi_getinfo for: --provider tcp is the tcp provider's own RDM
 * endpoints where it has them (libfabric 2.x), else tcp under ofi_rxm
 * (1.x); "auto" tries efa, then tcp. An exact candidate keeps only entries
 * of that provider (in 2.x "tcp" also lists "tcp;ofi_rxm"). */
struct prov_cand {
	const char *name;
	bool exact;
	/* The EFA provider of libfabric 2.x offers two fabrics, "efa" (with
	 * its SHM path and emulated operations) and "efa-direct" (the device
	 * alone), and the fabric name is the only field that tells them
	 * apart: direct keeps only "efa-direct", plain efa drops it (1.x
	 * names its fabric otherwise and has no direct one). */
	bool direct;
};

static unsigned candidates(struct prov_cand *c)
{
	unsigned n = 0;

	if (!strcmp(fab_cfg.provider, "auto") || !strcmp(fab_cfg.provider, "efa"))
		c[n++] = (struct prov_cand){"efa", true, false};
	if (!strcmp(fab_cfg.provider, "efa-direct"))
		c[n++] = (struct prov_cand){"efa", true, true};
	if (!strcmp(fab_cfg.provider, "auto") || !strcmp(fab_cfg.provider, "tcp")) {
		c[n++] = (struct prov_cand){"tcp", true, false};
		c[n++] = (struct prov_cand){"tcp;ofi_rxm", false, false};
	} else if (strncmp(fab_cfg.provider, "efa", 3)) {
		c[n++] = (struct prov_cand){fab_cfg.provider, false, false};
	}
	return n;
}

/* Candidates for the configured provider, in order (see candidates()). */
static int get_infos(struct fi_info **out)
{
	struct prov_cand c[4];
	unsigned n = candidates(c);
	bool hmem = false;
	int rc = -FI_ENODATA;

#ifdef DP_HAVE_CUDA
	/* --no-hmem: GPU memory goes through host staging (stage.c). */
	hmem = !fab_cfg.no_hmem;
#endif
	for (unsigned i = 0; i < n; i++) {
		/* FI_HMEM first where GPU memory can exist; a provider without
		 * it still serves host memory. Delivery-complete writes first;
		 * a provider that lacks them is logged (rail_open). */
		for (int h = hmem, ev = !strcmp(c[i].name, "shm"); h >= 0; h--) {
			for (int k = 3; k >= 0; k--) {
				int dc = k >> 1, re = k & ev;
				struct fi_info *hints;

				if ((k & 1) && !ev)
					continue;
				hints = rail_hints(c[i].name, h, dc, re);

				rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, out);
				fi_freeinfo(hints);
				if (!rc && c[i].exact)
					rc = keep_exact(out, c[i].name, c[i].direct);
				if (!rc) {
					uint32_t v = fi_version();

					log_info("fabric: libfabric %u.%u, provider %s, fabric %s "
						 "(asked for %s)",
						 FI_MAJOR(v), FI_MINOR(v),
						 (*out)->fabric_attr->prov_name,
						 (*out)->fabric_attr->name
							 ? (*out)->fabric_attr->name
							 : "?",
						 fab_cfg.provider);
					return 0;
				}
			}
		}
	}
	return rc;
}

static bool nic_wanted(const char *domain, unsigned have)
{
	char list[sizeof(fab_cfg.nics)], *save, *tok;

	if (!strcmp(fab_cfg.nics, "auto")) {
		/* EFA: every device is a rail. Others: the first domain. */
		return !strncmp(fab_cfg.provider, "efa", 3) || !have;
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
	r->tx_flags = fi->tx_attr->op_flags & FI_DELIVERY_COMPLETE;
	r->inject_size = fi->tx_attr->inject_size;
	r->next_key = 1;
	if (fi->nic && fi->nic->bus_attr && fi->nic->bus_attr->bus_type == FI_BUS_PCI) {
		const struct fi_pci_attr *pci = &fi->nic->bus_attr->attr.pci;

		snprintf(r->pci, sizeof(r->pci), "%04x:%02x:%02x.%x", pci->domain_id, pci->bus_id,
			 pci->device_id, pci->function_id);
	}
	/* Providers whose target side progresses only when its CQ is read
	 * get CQ wait fds, so a sleeping poller 0 still wakes for them. */
	r->wait_fd = fi->domain_attr->data_progress == FI_PROGRESS_MANUAL;
	/* libfabric 2.x's native tcp says FI_PROGRESS_AUTO but runs no
	 * progress thread for a CQ: its sockets move when the CQ is read,
	 * and the CQ's fd waits on them. Treated as manual. */
	if (!strcmp(fi->fabric_attr->prov_name, "tcp"))
		r->wait_fd = true;
	/* shm's CQ fd does not signal incoming RMA (checked with 1.17): a
	 * sleeping target would stall its peers. Such rails cap the sleep. */
	if (r->wait_fd && !strstr(fi->fabric_attr->prov_name, "tcp") &&
	    strcmp(fi->fabric_attr->prov_name, "sockets")) {
		r->wait_fd = false;
		r->poke = true;
	}
	log_info("rail %ld: provider %s, fabric %s, domain %s, max msg %zu, tx depth %zu, "
		 "inject %zu, mr_mode %s%s%s%s",
		 (long)(r - rails), fi->fabric_attr->prov_name, fi->fabric_attr->name,
		 fi->domain_attr->name, fi->ep_attr->max_msg_size, fi->tx_attr->size,
		 fi->tx_attr->inject_size, mr_mode_str(fi->domain_attr->mr_mode, mm, sizeof(mm)),
		 fi->caps & FI_HMEM ? ", FI_HMEM" : "", r->pci[0] ? ", PCI " : "", r->pci);
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
	    (rc = fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (e->bind_cntr &&
	     (rc = fi_ep_bind(e->ep, &e->rma_cntr->fid, FI_REMOTE_WRITE | FI_REMOTE_READ))) ||
	    (rc = fi_enable(e->ep)))
		return rc;
	if (r->wait_fd && fi_control(&e->cq->fid, FI_GETWAIT, &e->wait_fd))
		e->wait_fd = -1;
	return 0;
}

/* Poller 0's endpoint on a rail without wait fds (shm): a counter of the
 * peers' RMA that its CQ reads carried out (fabric.c, target_moved). A
 * provider that refuses it leaves the poller to its sleep cap (logged). */
static int ep_open_target(struct rail *r, struct rail_ep *e)
{
	struct fi_cntr_attr attr = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_NONE};
	int rc;

	if (!r->poke || !(r->info->caps & FI_RMA_EVENT)) {
		if (r->poke)
			log_warn("rail %ld: provider %s has no FI_RMA_EVENT: peers' WRITEs into "
				 "this "
				 "service may wait for its poller's sleep cap (1 ms)",
				 (long)(r - rails), r->info->fabric_attr->prov_name);
		return ep_open(r, e);
	}
	rc = fi_cntr_open(r->domain, &attr, &e->rma_cntr, NULL);
	if (rc)
		return rc;
	e->bind_cntr = true;
	return ep_open(r, e);
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
			/* Peers target poller 0's endpoints (fabric.h). */
			rc = p ? ep_open(&rails[r], &fp->ep[r])
			       : ep_open_target(&rails[r], &fp->ep[r]);
			if (rc) {
				log_err("fabric: endpoint on rail %u: %s", r, fi_strerror(-rc));
				return -EIO;
			}
		}
		/* After the endpoints: rail 0's counters count the chunks. */
		if (fabric_pools_init(fp))
			return -ENOMEM;
	}
	return 0;
}

/* Start-up failures say how to run without the fabric. */
int fabric_init(void)
{
	int rc = fabric_start();

	if (rc)
		log_err("fabric: %s (use --provider none for local transfers only)", strerror(-rc));
	return rc;
}

void fabric_fini(void)
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
			if (fp->ep[r].rma_cntr)
				fi_close(&fp->ep[r].rma_cntr->fid);
		}
		fabric_pools_fini(fp);
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
 * pointer as host memory: the crash of ofiwg/libfabric issue 12328). Memory a
 * rail does not take goes through host staging (stage.c). --stage-host
 * (tests): host memory is treated as such GPU memory. */
static bool rail_takes(const struct rail *r, const struct region *reg)
{
	if (reg->kind == REGION_HOST)
		return !fab_cfg.stage_host;
	return reg->kind == REGION_CUDA && r->info->caps & FI_HMEM;
}

static int mr_reg_mem(struct rail *r, void *base, size_t len, bool cuda, int device,
		      uint64_t access, struct fid_mr **mr)
{
	struct iovec iov = {.iov_base = base, .iov_len = len};
	struct fi_mr_attr attr = {.mr_iov = &iov,
				  .iov_count = 1,
				  .access = access,
				  .requested_key = r->next_key++,
				  .iface = FI_HMEM_SYSTEM};

	if (cuda) {
		attr.iface = FI_HMEM_CUDA;
		attr.device.cuda = device;
	}
	return fi_mr_regattr(r->domain, &attr, 0, mr);
}

static int mr_reg(struct rail *r, struct region *reg, uint64_t access, struct fid_mr **mr)
{
	return mr_reg_mem(r, reg->base, reg->len, reg->kind == REGION_CUDA, reg->device, access,
			  mr);
}

static bool rails_take(const struct region *reg)
{
	for (unsigned r = 0; r < nrails; r++)
		if (!rail_takes(&rails[r], reg))
			return false;
	return nrails > 0;
}

int fabric_rail_unfit(const struct region *reg, const char **why)
{
	for (unsigned r = 0; r < nrails; r++) {
		if (rail_takes(&rails[r], reg))
			continue;
		if (reg->kind == REGION_HOST)
			*why = "--stage-host: host memory stands in for GPU memory";
		else if (reg->kind == REGION_VM)
			*why = "dp_register_mem memory, which the service has not mapped";
		else if (fab_cfg.no_hmem)
			*why = "no FI_HMEM (--no-hmem)";
		else
			*why = "its provider has no FI_HMEM";
		return (int)r;
	}
	*why = "its registration of GPU memory failed";
	return 0;
}

const char *fabric_rail_provider(unsigned r)
{
	return r < nrails ? rails[r].info->fabric_attr->prov_name : "none";
}

static struct region_mrs *mem_register(void *buf, size_t len, uint64_t access)
{
	struct region_mrs *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	for (unsigned r = 0; r < nrails; r++) {
		int rc = mr_reg_mem(&rails[r], buf, len, false, 0, access, &m->mr[r]);

		if (rc) {
			log_err("fabric: registering %zu bytes of staging memory on rail %u: %s",
				len, r, fi_strerror(-rc));
			fabric_mem_deregister(m);
			return NULL;
		}
	}
	return m;
}

struct region_mrs *fabric_mem_register(void *buf, size_t len)
{
	return mem_register(buf, len, FI_READ | FI_WRITE | FI_SEND | FI_RECV);
}

struct region_mrs *fabric_mem_register_remote(void *buf, size_t len)
{
	return mem_register(buf, len,
			    FI_READ | FI_WRITE | FI_SEND | FI_RECV | FI_REMOTE_READ |
				    FI_REMOTE_WRITE);
}

uint64_t fabric_mem_key(const struct region_mrs *m, unsigned rail)
{
	return fi_mr_key(m->mr[rail]);
}

void fabric_mem_deregister(struct region_mrs *m)
{
	if (!m)
		return;
	for (unsigned r = 0; r < nrails; r++)
		if (m->mr[r])
			fi_close(&m->mr[r]->fid);
	free(m);
}

/*
 * GPU memory registered on an EFA rail ("efa" fabric, not efa-direct) whose
 * SHM path is on: a peer service of this host reached through the fabric
 * (the same-host path off, or not possible) takes that path, where EFA
 * providers without the FI_HMEM fix host-memcpy into GPU buffers and crash
 * (ofiwg/libfabric issue 12328; docs/efa.md). Said once.
 */
static void shm_transfer_check(void)
{
	static bool said;
	const char *v = getenv("FI_EFA_ENABLE_SHM_TRANSFER");

	if (said || (v && (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no"))))
		return;
	for (unsigned r = 0; r < nrails; r++) {
		const struct fi_fabric_attr *f = rails[r].info->fabric_attr;

		if (strcmp(f->prov_name, "efa") || (f->name && !strcmp(f->name, "efa-direct")))
			continue;
		said = true;
		log_warn(
			"fabric: GPU memory is registered on EFA rail %u with its SHM path on "
			"(FI_EFA_ENABLE_SHM_TRANSFER unset): GPU transfers with another service of "
			"this host that go through the fabric%s may take libfabric's SHM path, "
			"which "
			"host-memcpys into GPU buffers on EFA providers without the FI_HMEM fix; "
			"set "
			"FI_EFA_ENABLE_SHM_TRANSFER=0 there (docs/efa.md)",
			r,
			samehost_enabled() ? " (only where the same-host path cannot map them)"
					   : "");
		return;
	}
}

/*
 * The rails nearest GPU @dev (topo.h), computed once per device: its
 * memory's fabric transfers take only those, as NCCL's do, so that a GPU
 * behind a PCIe switch with NICs of its own sends through them rather
 * than across the root complex or the socket link. Control thread.
 */
static uint32_t rails_near(int dev)
{
	static uint32_t near[64];
	static bool known[64];
	const char *nics[DP_MAX_RAILS];
	char bdf[TOPO_BDF_LEN];
	int dist;

	if (dev < 0 || dev >= 64 || nrails < 2)
		return 0;
	if (known[dev])
		return near[dev];
	known[dev] = true;
	for (unsigned r = 0; r < nrails; r++)
		nics[r] = rails[r].pci[0] ? rails[r].pci : NULL;
	if (gpu_pci_bdf(dev, bdf))
		return 0;
	near[dev] = topo_nearest("/sys", bdf, nics, nrails, &dist);
	if (near[dev])
		log_info("fabric: GPU %d (PCI %s): rails of mask 0x%x are nearest (distance %d); "
			 "its memory's transfers take them",
			 dev, bdf, near[dev], dist);
	/* Every rail as near as every other: no preference. */
	if (near[dev] == (1u << nrails) - 1)
		near[dev] = 0;
	return near[dev];
}

int fabric_region_register(struct region *reg)
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
				 reg->kind == REGION_CUDA ? "; its fabric transfers are staged"
							  : "");
			reg->eng[ENGINE_fabric] = m;
			fabric_region_deregister(reg);
			/* GPU memory the provider cannot register still works
			 * for local copies; its fabric transfers go through
			 * host staging (stage.c). */
			return reg->kind == REGION_CUDA ? 0 : -ENOMEM;
		}
	}
	reg->eng[ENGINE_fabric] = m;
	if (reg->kind == REGION_CUDA) {
		m->near = rails_near(reg->device);
		shm_transfer_check();
	}
	return 0;
}

void fabric_region_deregister(struct region *reg)
{
	fabric_mem_deregister(reg->eng[ENGINE_fabric]);
	reg->eng[ENGINE_fabric] = NULL;
}

int fabric_export_register(struct segment *s)
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
			 * is described to peers as such (rpc.h,
			 * DP_RPC_F_GPU_UNREGISTERED): -ENOTSUP there. */
			return s->region->kind == REGION_CUDA ? 0 : -ENOMEM;
		}
		keys[r] = fi_mr_key(m->mr[r]);
	}
	s->eng[ENGINE_fabric] = m;
	if (access & FI_REMOTE_WRITE)
		atomic_store(&s->region->rma_target, true);
	return 0;
}

void fabric_export_deregister(struct segment *s)
{
	fabric_mem_deregister(s->eng[ENGINE_fabric]);
	s->eng[ENGINE_fabric] = NULL;
}
