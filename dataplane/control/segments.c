/* SPDX-License-Identifier: MIT */
/*
 * segments.c - exports, the remote-segment cache, peers and probes
 * (segments.h). Control thread only, but for segment_probe_ask (pollers);
 * the pollers see these objects through the handles in client tables
 * (dp_internal.h) and the `dead` flag.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "directory.h"
#include "engine.h"
#include "event.h"
#include "fabric.h"
#include "file.h"
#include "rpc.h"
#include "samehost.h"
#include "segments.h"
#include "stats.h"

static struct segment *exports;
/* Exports whose record the directory is publishing: their names are taken
 * (export_add -EEXIST), but they are found by nobody until it answers. */
struct pending_export {
	struct segment *s;
	segment_resolved_fn fn;
	void *arg;
	struct pending_export *next;
};
static struct pending_export *pending_exports;
static struct segment *remotes; /* segments of other services, cached */
static struct peer *peers;

/* ---- exports ---- */

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
}

static void export_release(struct segment *s)
{
	engines_segment_unexport(s);
	region_put(s->region);
	segment_put(s);
}

/* Undoes export_add()'s steps before the export is listed. */
static void export_undo(struct segment *s)
{
	engines_segment_unexport(s);
	region_put(s->region);
	free(s);
}

static void export_list(struct segment *s)
{
	s->next = exports;
	exports = s;
	stats_segment_added();
	log_info("client %u: exported '%s' (%llu bytes, %s)", s->owner->id, s->name,
		 (unsigned long long)s->region->len, s->access == DP_ACCESS_RW ? "rw" : "ro");
}

/* The directory's answer to an export's publish (directory.h). */
static void export_published(void *arg, int rc, const struct dp_rpc_lookup_reply *r)
{
	struct pending_export *p = arg;
	struct segment *s = p->s;

	(void)r;
	for (struct pending_export **pp = &pending_exports; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	if (rc) {
		export_undo(s);
		s = NULL;
	} else {
		export_list(s);
	}
	p->fn(p->arg, rc, s);
	free(p);
}

int export_add(struct client *owner, struct region *reg, const char *name, unsigned access,
	       segment_resolved_fn fn, void *arg)
{
	struct pending_export *p;
	struct segment *s;
	int rc;

	if (!fileio_access_ok(reg, access))
		return -EPERM;
	if (export_find(name))
		return -EEXIST;
	for (p = pending_exports; p; p = p->next)
		if (!strcmp(p->s->name, name))
			return -EEXIST;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	atomic_init(&s->refs, 1); /* the export list's */
	atomic_fetch_add(&reg->refs, 1);
	s->region = reg;
	s->access = access;
	s->owner = owner;
	memcpy(s->name, name, sizeof(s->name));
	if (engines_segment_export(s)) {
		region_put(reg);
		free(s);
		return -ENOMEM;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		export_undo(s);
		return -ENOMEM;
	}
	p->s = s;
	p->fn = fn;
	p->arg = arg;
	/* Later -EEXIST when another live service holds the name fleet-wide. */
	rc = directory_publish(s, export_published, p);
	if (rc == DIRECTORY_PENDING) {
		p->next = pending_exports;
		pending_exports = p;
		return SEGMENT_PENDING;
	}
	free(p);
	if (rc) {
		export_undo(s);
		return rc;
	}
	export_list(s);
	return 0;
}

/* An unexport waiting for its record's withdrawal (or the directory's
 * failure to: the record is then deleted at reconnect or expires). */
struct pending_unexport {
	segment_resolved_fn fn;
	void *arg;
};

static void unexport_withdrawn(void *arg, int rc, const struct dp_rpc_lookup_reply *r)
{
	struct pending_unexport *p = arg;

	(void)rc; /* unexported here, whatever the directory said */
	(void)r;
	p->fn(p->arg, 0, NULL);
	free(p);
}

int export_remove(struct client *c, const char *name, segment_resolved_fn fn, void *arg)
{
	struct segment *s = export_find(name);
	struct pending_unexport *p = NULL;
	int rc;

	if (!s)
		return -ENOENT;
	if (s->owner != c)
		return -EPERM;
	if (fn) {
		p = malloc(sizeof(*p));
		if (!p)
			return -ENOMEM;
		p->fn = fn;
		p->arg = arg;
	}
	export_kill(s);
	/* Answered once the record is gone (an export the fabric does not
	 * reach has none). */
	rc = s->eng[ENGINE_fabric] ? directory_withdraw(s->name, p ? unexport_withdrawn : NULL, p)
				   : 0;
	qsbr_synchronize();
	export_release(s);
	if (rc == DIRECTORY_PENDING)
		return SEGMENT_PENDING;
	free(p);
	return 0;
}

struct segment *exports_kill(const struct client *owner, const struct region *reg)
{
	struct segment *s, *next, *dead = NULL;

	for (s = exports; s; s = next) {
		next = s->next;
		if ((owner && s->owner == owner) || (reg && s->region == reg)) {
			export_kill(s);
			if (s->eng[ENGINE_fabric])
				directory_withdraw(s->name, NULL, NULL);
			s->next = dead;
			dead = s;
		}
	}
	return dead;
}

void exports_release(struct segment *dead)
{
	struct segment *next;

	for (; dead; dead = next) {
		next = dead->next;
		export_release(dead);
	}
}

/* ---- segments of other services ---- */

/* Drops cached segments of peers found dead, so the next open asks again. */
static void remotes_prune(void)
{
	struct segment **pp = &remotes;

	while (*pp) {
		struct segment *s = *pp;

		if (atomic_load(&s->dead) ||
		    (s->remote ? atomic_load(&s->remote->peer->dead) : !samehost_alive(s->same))) {
			*pp = s->next;
			atomic_store(&s->dead, 1);
			segment_put(s); /* the cache's reference */
			continue;
		}
		pp = &s->next;
	}
}

/* The peer `name` with these rail addresses: the one we know, or a new one
 * inserted into our address vectors. */
static struct peer *peer_find(const char *name, unsigned nrails, const struct dp_rpc_rail *rail)
{
	uint8_t addrs[DP_MAX_RAILS][DP_FABRIC_ADDR_MAX];
	uint32_t lens[DP_MAX_RAILS];
	struct peer *p;

	for (p = peers; p; p = p->next) {
		bool same = p->nsent == nrails;

		if (strcmp(p->name, name) || atomic_load(&p->dead))
			continue;
		for (unsigned i = 0; same && i < nrails; i++)
			same = p->sent_len[i] == rail[i].addr_len &&
			       !memcmp(p->sent[i], rail[i].addr, rail[i].addr_len);
		if (same)
			return p;
		/* Restarted under the same name: the old process is gone. */
		log_info("peer %s: new fabric addresses; the old ones are dropped", p->name);
		atomic_store(&p->dead, 1);
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	snprintf(p->name, sizeof(p->name), "%s", name);
	for (unsigned i = 0; i < nrails; i++) {
		memcpy(addrs[i], rail[i].addr, DP_FABRIC_ADDR_MAX);
		lens[i] = rail[i].addr_len;
		memcpy(p->sent[i], rail[i].addr, DP_FABRIC_ADDR_MAX);
		p->sent_len[i] = rail[i].addr_len;
	}
	p->nsent = nrails;
	if (fabric_peer_insert(p, addrs, lens, nrails)) {
		log_warn("peer %s: fabric addresses rejected", p->name);
		free(p);
		return NULL;
	}
	/* Peers are kept for the life of the service: segments and in-flight
	 * slices point at them, and their AV entries are few. */
	p->next = peers;
	peers = p;
	stats_peer_known();
	return p;
}

static struct peer *peer_get(const struct dp_rpc_lookup_reply *r)
{
	return peer_find(r->server_name, r->nrails, r->rail);
}

void segments_peer_learn(const char *name, unsigned nrails, const struct dp_rpc_rail *rail)
{
	char n[DP_NAME_MAX];

	/* The asker proved the fleet key; its fields are still checked. */
	if (!fabric_nrails() || !nrails || nrails > DP_MAX_RAILS ||
	    strnlen(name, DP_NAME_MAX) == DP_NAME_MAX || !name[0] || !strcmp(name, cfg.server_name))
		return;
	snprintf(n, sizeof(n), "%s", name);
	if (!peer_find(n, nrails, rail))
		log_debug("peer RPC: the fabric addresses of asker %s were refused", n);
}

/* Does a cached description still match what the peer answered? */
static bool remote_same(const struct remote_seg *rs, const struct peer *pr,
			const struct dp_rpc_lookup_reply *r)
{
	if (rs->peer != pr || rs->base != r->base || rs->len != r->len || rs->access != r->access ||
	    rs->flags != (r->flags & (DP_RPC_F_GPU_UNREGISTERED | DP_RPC_F_OWNER_STAGES)))
		return false;
	for (unsigned i = 0; i < rs->nrails; i++)
		if (rs->key[i] != r->rail[i].key)
			return false;
	return true;
}

/* A peer's (or the directory's) answer `r` about `name`, asked of `peer`
 * ("" for the directory), as a segment: this service's own export when the
 * answer names this service, else the cached one when it still matches, or
 * a new cache entry. 0 with *out (no reference taken) or -errno. */
static int remote_install(const char *peer, const char *name, const struct dp_rpc_lookup_reply *r,
			  struct segment **out)
{
	struct remote_seg *rs;
	struct segment *s;
	struct peer *pr;

	if (!strcmp(r->server_name, cfg.server_name)) {
		s = export_find(name);
		if (!s)
			return -ENOENT;
		*out = s;
		return 0;
	}
	if (!fabric_nrails())
		return -EHOSTUNREACH;
	if (!r->nrails) {
		log_warn("segment '%s' on %s: no rail of its service registered it (GPU memory on "
			 "a provider without FI_HMEM): reachable from its own host only",
			 name, peer[0] ? peer : "the directory");
		return -ENOTSUP;
	}
	pr = peer_get(r);
	if (!pr)
		return -EHOSTUNREACH;
	for (struct segment **pp = &remotes; *pp; pp = &(*pp)->next) {
		s = *pp;
		if (strcmp(s->name, name) || strcmp(s->owner_name, peer))
			continue;
		if (s->remote && remote_same(s->remote, pr, r)) {
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
	rs->base = r->base;
	rs->len = r->len;
	rs->access = r->access;
	rs->flags = r->flags & (DP_RPC_F_GPU_UNREGISTERED | DP_RPC_F_OWNER_STAGES);
	rs->nrails = rs->peer->nrails;
	for (unsigned i = 0; i < rs->nrails; i++)
		rs->key[i] = r->rail[i].key;
	atomic_init(&s->refs, 1); /* the cache's */
	s->remote = rs;
	s->access = r->access;
	snprintf(s->name, sizeof(s->name), "%s", name);
	snprintf(s->owner_name, sizeof(s->owner_name), "%s", peer);
	s->next = remotes;
	remotes = s;
	log_info("segment '%s' on %s (%s): %llu bytes, %s, %u rail(s)%s", name,
		 peer[0] ? peer : "the directory", rs->peer->name, (unsigned long long)rs->len,
		 rs->access == DP_ACCESS_RW ? "rw" : "ro", rs->nrails,
		 rs->flags & DP_RPC_F_OWNER_STAGES ? "; memory its owner stages for us"
		 : rs->flags & DP_RPC_F_GPU_UNREGISTERED
			 ? "; memory its owner could not register: transfers fail ENOTSUP"
			 : "");
	*out = s;
	return 0;
}

/* ---- lookups in flight: through a peer's RPC port, or the directory ---- */

/* One who waits for a lookup. */
struct waiter {
	segment_resolved_fn fn;
	void *arg;
	struct waiter *next;
};

/* A lookup of (peer, name) in flight (peer "": the directory); opens of the
 * same pair while it is share it. A peer of this host is asked twice: its
 * RPC port says where it lives, its same-host socket gives the memory
 * (samehost.h). */
struct lookup {
	char peer[DP_NAME_MAX];
	char name[DP_NAME_MAX];
	struct dp_rpc_lookup_reply first; /* the RPC port's answer */
	struct waiter *waiters;
	struct lookup *next;
};

static struct lookup *lookups;

/* A same-host answer as a segment: the cached one when it is the same live
 * export (the fds are closed), else a new mapping. Takes the fds. */
static int same_install(const char *peer, const char *name, const struct dp_rpc_lookup_reply *r,
			int *fds, unsigned nfds, struct segment **out)
{
	struct segment *s;
	int rc;

	remotes_prune();
	for (struct segment **pp = &remotes; *pp; pp = &(*pp)->next) {
		s = *pp;
		if (strcmp(s->name, name) || strcmp(s->owner_name, peer))
			continue;
		if (samehost_same(s, r)) {
			while (nfds)
				close(fds[--nfds]);
			*out = s;
			return 0;
		}
		*pp = s->next;
		atomic_store(&s->dead, 1);
		segment_put(s); /* the cache's reference */
		break;
	}
	rc = samehost_import(peer, name, r, fds, nfds, &s);
	if (rc)
		return rc;
	s->next = remotes;
	remotes = s;
	*out = s;
	return 0;
}

static void lookup_finish(struct lookup *lk, int rc, struct segment *s)
{
	struct waiter *w;

	for (struct lookup **pp = &lookups; *pp; pp = &(*pp)->next)
		if (*pp == lk) {
			*pp = lk->next;
			break;
		}
	if (rc)
		log_info("segment '%s' on %s: %s", lk->name,
			 lk->peer[0] ? lk->peer : "the directory", strerror(-rc));
	/* The cache holds `s` while the waiters take their references. */
	while ((w = lk->waiters)) {
		lk->waiters = w->next;
		w->fn(w->arg, rc, rc ? NULL : s);
		free(w);
	}
	free(lk);
}

static void lookup_same_done(void *arg, int rc, const struct dp_rpc_lookup_reply *r, int *fds,
			     unsigned nfds)
{
	struct lookup *lk = arg;
	struct segment *s = NULL;

	/* The exchange says the peer does not hold our fleet key (or we not
	 * its): that is the answer, whatever its record would let the fabric
	 * do. */
	if (rc == -EACCES) {
		log_info("segment '%s' on %s: refused on its same-host socket: another fleet key",
			 lk->name, lk->peer);
		while (nfds)
			close(fds[--nfds]);
		lookup_finish(lk, rc, NULL);
		return;
	}
	if (!rc)
		rc = same_install(lk->peer, lk->name, r, fds, nfds, &s);
	if (rc) {
		int why = rc;

		log_info("segment '%s' on %s: not mapped (%s): through the fabric", lk->name,
			 lk->peer, strerror(-rc));
		remotes_prune();
		rc = remote_install(lk->peer, lk->name, &lk->first, &s);
		/* A client's process memory this service may not access (vm.h)
		 * and no fabric to stage it through: that is the reason. */
		if (rc && why == -EPERM) {
			log_warn("segment '%s' on %s: memory of its owner's process, which this "
				 "service may not read or write (another uid and not root, Yama "
				 "ptrace_scope, or not dumpable), and %s: EPERM",
				 lk->name, lk->peer,
				 rc == -EHOSTUNREACH ? "no fabric to reach it through"
						     : "the fabric does not reach it either");
			rc = -EPERM;
		}
	}
	lookup_finish(lk, rc, s);
}

static void lookup_done(void *arg, int rc, const struct dp_rpc_lookup_reply *r, int *fds,
			unsigned nfds)
{
	struct lookup *lk = arg;
	struct segment *s = NULL;

	while (nfds)
		close(fds[--nfds]);
	if (rc == RPC_LOOKUP_SELF) {
		/* A host name that turned out to be this service's. */
		s = export_find(lk->name);
		lookup_finish(lk, s ? 0 : -ENOENT, s);
		return;
	}
	if (!rc && samehost_candidate(r)) {
		lk->first = *r;
		rc = rpc_lookup_local_start(r->local_path, lk->peer, lk->name, lookup_same_done,
					    lk);
		if (!rc)
			return;
		log_info("segment '%s' on %s: same-host socket %s: %s: through the fabric",
			 lk->name, lk->peer, r->local_path, strerror(-rc));
		rc = 0;
	}
	if (!rc) {
		remotes_prune();
		rc = remote_install(lk->peer, lk->name, r, &s);
	}
	lookup_finish(lk, rc, s);
}

/* The directory's answer: a record, as the peer's reply would be (no fds;
 * the directory path goes through the fabric, docs/cluster.md). */
static void lookup_dir_done(void *arg, int rc, const struct dp_rpc_lookup_reply *r)
{
	lookup_done(arg, rc, r, NULL, 0);
}

/* A waiter (fn, arg) for `name` at `peer`: it joins the lookup of the
 * same (peer, name) in flight (SEGMENT_PENDING), or is the first of a new
 * one, in *out, not listed yet (0); -ENOMEM. */
static int lookup_waiter(const char *peer, const char *name, segment_resolved_fn fn, void *arg,
			 struct lookup **out)
{
	struct waiter *w = calloc(1, sizeof(*w));
	struct lookup *lk;

	if (!w)
		return -ENOMEM;
	w->fn = fn;
	w->arg = arg;
	for (lk = lookups; lk; lk = lk->next)
		if (!strcmp(lk->peer, peer) && !strcmp(lk->name, name)) {
			w->next = lk->waiters;
			lk->waiters = w;
			return SEGMENT_PENDING;
		}
	lk = calloc(1, sizeof(*lk));
	if (!lk) {
		free(w);
		return -ENOMEM;
	}
	snprintf(lk->peer, sizeof(lk->peer), "%s", peer);
	snprintf(lk->name, sizeof(lk->name), "%s", name);
	lk->waiters = w;
	*out = lk;
	return 0;
}

/*
 * Asks `peer` (or, "", the directory) for `name`, without waiting: `fn` is
 * called from the loop. Opens of the same (peer, name) while one lookup is
 * in flight share its answer.
 */
static int lookup_join(const char *peer, const char *name, segment_resolved_fn fn, void *arg)
{
	struct lookup *lk;
	int rc = lookup_waiter(peer, name, fn, arg, &lk);

	if (rc)
		return rc;
	if (peer[0])
		rc = rpc_lookup_start(peer, name, lookup_done, lk);
	else
		rc = directory_lookup(name, lookup_dir_done, lk);
	if (rc < 0) {
		log_info("segment '%s' on %s: %s", name, peer[0] ? peer : "the directory",
			 strerror(-rc));
		free(lk->waiters);
		free(lk);
		return rc;
	}
	lk->next = lookups;
	lookups = lk;
	return SEGMENT_PENDING;
}

int segment_resolve_reply(const char *peer, const char *name, const struct dp_rpc_lookup_reply *r,
			  segment_resolved_fn fn, void *arg)
{
	struct lookup *lk;
	int rc = lookup_waiter(peer, name, fn, arg, &lk);

	if (rc)
		return rc;
	lk->next = lookups;
	lookups = lk;
	/* As if the peer's RPC port had answered `r` about `name`. */
	lookup_done(lk, 0, r, NULL, 0);
	return SEGMENT_PENDING;
}

/*
 * A host:port is asked again at every open (no cache read): its export
 * may have been replaced (new keys), or the peer restarted on the same
 * port (new addresses), without a transfer failing in between.
 */
static int peer_open(const char *peer, const char *name, segment_resolved_fn fn, void *arg)
{
	if (!fabric_nrails() && !samehost_enabled())
		return -EHOSTUNREACH;
	return lookup_join(peer, name, fn, arg);
}

/* Through the cluster directory, or from the cache, which the directory
 * keeps fresh (remotes_invalidate). */
static int directory_open(const char *name, struct segment **out, segment_resolved_fn fn, void *arg)
{
	if (!fabric_nrails())
		return -EHOSTUNREACH;
	remotes_prune();
	for (struct segment *s = remotes; s; s = s->next)
		if (!strcmp(s->name, name) && !s->owner_name[0]) {
			*out = s;
			return 0;
		}
	return lookup_join("", name, fn, arg);
}

/* The directory's word on a name (directory.h): a record gone or replaced
 * kills the segment opened from it, as an unexport kills a local one; a
 * reconnect only empties the cache (name NULL), open handles keep theirs. */
void remotes_invalidate(const char *name, bool kill)
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

int segment_resolve(const char *peer, const char *name, struct segment **out,
		    segment_resolved_fn fn, void *arg)
{
	/* Another service's: by its RPC port, or (no peer, or this service's
	 * own name, and not exported here) wherever the cluster directory
	 * says. */
	if (peer[0] && !rpc_is_self(peer))
		return peer_open(peer, name, fn, arg);
	if (directory_enabled() && !export_find(name))
		return directory_open(name, out, fn, arg);
	*out = export_find(name);
	return *out ? 0 : -ENOENT;
}

/* ---- probes (segments.h): does a segment a transfer failed on still stand? ---- */

/* Asked by pollers, not yet taken by the control thread; then, on the
 * control thread, waiting for their peer's probe in flight to end. */
static struct {
	pthread_mutex_t lock;
	struct segment *asked;
} probes = {.lock = PTHREAD_MUTEX_INITIALIZER};
static struct segment *probes_waiting;
/* segment_probe_ask's, for the control thread. */
static struct ev_wake probes_wake = {.ev.fd = -1};

static void segment_probes_run(void);

uint32_t segment_probe_ask(struct segment *s)
{
	uint32_t ticket = atomic_fetch_add(&s->probe_asked, 1) + 1;
	bool first;

	pthread_mutex_lock(&probes.lock);
	first = !probes.asked;
	if (!s->probe_listed) {
		s->probe_listed = true;
		atomic_fetch_add(&s->refs, 1); /* the list's */
		s->probe_next = probes.asked;
		probes.asked = s;
	} else {
		first = false; /* its probe ends by looking at the tickets */
	}
	pthread_mutex_unlock(&probes.lock);
	if (first)
		wake_efd_ring(probes_wake.ev.fd);
	return ticket;
}

/* The peer's answer describes `s` as we have it: the same service (name
 * and rail addresses), the same keys, base, length and access. */
static bool probe_reply_same(const struct segment *s, const struct dp_rpc_lookup_reply *r)
{
	const struct peer *pr = s->remote->peer;

	if (strcmp(r->server_name, pr->name) || r->nrails != pr->nsent)
		return false;
	for (unsigned i = 0; i < r->nrails; i++)
		if (r->rail[i].addr_len != pr->sent_len[i] ||
		    memcmp(r->rail[i].addr, pr->sent[i], pr->sent_len[i]))
			return false;
	return remote_same(s->remote, pr, r);
}

/* Where a probe of `s` asks: the peer string it was opened by, else (a
 * segment the directory named) its owner's server name, host:rpc-port. */
static const char *probe_target(const struct segment *s)
{
	return s->owner_name[0] ? s->owner_name : s->remote->peer->name;
}

/* Off the lists: the list's reference goes. */
static void probe_drop(struct segment *s)
{
	pthread_mutex_lock(&probes.lock);
	s->probe_listed = false;
	pthread_mutex_unlock(&probes.lock);
	segment_put(s);
}

static void probe_done(void *arg, int rc, const struct dp_rpc_lookup_reply *r, int *fds,
		       unsigned nfds)
{
	struct segment *s = arg;
	struct peer *pr = s->remote->peer;
	bool again;

	while (nfds)
		close(fds[--nfds]);
	pr->probing = false;
	if (rc == -ECANCELED) { /* shutdown */
		probe_drop(s);
		return;
	}
	if (rc == RPC_LOOKUP_SELF) /* the string names this service now */
		rc = -ENOENT;
	if (!rc && probe_reply_same(s, r)) {
		log_info(
			"segment '%s' on %s: still exported; its failed transfers are posted again",
			s->name, probe_target(s));
		atomic_store_explicit(&s->probe_done, s->probe_started, memory_order_release);
	} else if (!rc || rc == -ENOENT) {
		log_info("segment '%s' on %s: %s by its owner; its handles fail ECONNRESET",
			 s->name, probe_target(s), rc ? "unexported" : "replaced");
		atomic_store(&s->dead, 1);
	} else {
		log_info("segment '%s' on %s: its owner did not answer (%s)", s->name,
			 probe_target(s), strerror(-rc));
		fabric_peer_lost(pr);
	}
	/* A transfer that failed after this probe set out asks again. */
	pthread_mutex_lock(&probes.lock);
	again = !atomic_load(&s->dead) && !atomic_load(&pr->dead) &&
		atomic_load(&s->probe_asked) != s->probe_started;
	if (again) {
		s->probe_next = probes_waiting;
		probes_waiting = s;
	} else {
		s->probe_listed = false;
	}
	pthread_mutex_unlock(&probes.lock);
	if (!again)
		segment_put(s);
	segment_probes_run();
}

/* What pollers asked since the last call, onto the waiting list. */
static void probes_take(void)
{
	struct segment *s;

	pthread_mutex_lock(&probes.lock);
	while ((s = probes.asked)) {
		probes.asked = s->probe_next;
		s->probe_next = probes_waiting;
		probes_waiting = s;
	}
	pthread_mutex_unlock(&probes.lock);
}

/* Starts the probes asked for since the last run (probes_wake), and
 * those whose peer's probe in flight ended. */
static void segment_probes_run(void)
{
	struct segment *s, **pp;

	probes_take();
	for (pp = &probes_waiting; (s = *pp);) {
		struct peer *pr = s->remote->peer;
		int rc;

		/* Settled meanwhile (dead, or its peer lost), or its peer is
		 * being asked about another segment: that answer comes first. */
		if (atomic_load(&s->dead) || atomic_load(&pr->dead)) {
			*pp = s->probe_next;
			probe_drop(s);
			continue;
		}
		if (pr->probing) {
			pp = &s->probe_next;
			continue;
		}
		*pp = s->probe_next;
		pr->probing = true;
		s->probe_started = atomic_load(&s->probe_asked);
		rc = rpc_lookup_start(probe_target(s), s->name, probe_done, s);
		if (rc) {
			/* Not even asked (too many lookups in flight, out of
			 * memory, a name that is not host:port): no word from
			 * the peer, as before probes. */
			pr->probing = false;
			log_info("segment '%s': cannot ask its owner (%s)", s->name, strerror(-rc));
			fabric_peer_lost(pr);
			probe_drop(s);
		}
	}
}

/* At exit, the pollers stopped: what nobody will ask any more. */
static void probes_drop_all(void)
{
	struct segment *s;

	probes_take();
	while ((s = probes_waiting)) {
		probes_waiting = s->probe_next;
		probe_drop(s);
	}
	ev_wake_close(&probes_wake);
}

int segments_start(int epfd)
{
	return ev_wake_open(epfd, &probes_wake, segment_probes_run, "the segments' probes");
}

void segments_cleanup(void)
{
	/* Lookups and publishes in flight end (-ECANCELED) and tell their
	 * waiters. */
	rpc_shutdown();
	directory_cancel();
	probes_drop_all();
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
