/* SPDX-License-Identifier: MIT */
/*
 * samehost.c - segments of another service on this host (samehost.h): the
 * host identity, the export table and its words (the `samehost` engine's
 * export hooks), and the importer's side: peers known by their pidfd, and
 * exports mapped once. Control thread, except samehost_alive (pollers).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine.h"
#include "event.h"
#include "gpu.h"
#include "rpc.h"
#include "samehost.h"
#include "vm.h"

#define TABLE_BYTES (SAMEHOST_SLOTS * sizeof(uint64_t))

/* Another service of this host that gave us memory. */
struct samehost_peer {
	struct ev_handler ev; /* its pidfd: readable when it exits */
	char name[DP_NAME_MAX];
	const _Atomic uint64_t *table; /* its export table, read-only */
	atomic_int dead;
	unsigned refs; /* imported segments, plus one while in the list */
	struct samehost_peer *next;
};

static struct {
	bool off; /* --no-same-host */
	bool on;  /* enabled and set up */
	char path[DP_SUN_PATH_MAX];
	uint8_t id[DP_HOST_ID_LEN];
	int epfd;
	int pidfd;		 /* ours, sent to importers */
	int table_fd;		 /* our export table */
	_Atomic uint64_t *table; /* mapped read-write */
	uint64_t gen[SAMEHOST_SLOTS];
	uint8_t used[SAMEHOST_SLOTS];
	struct samehost_peer *peers;
} sh = {.epfd = -1, .pidfd = -1, .table_fd = -1};

void samehost_configure(bool off, const char *path)
{
	if (off)
		sh.off = true;
	if (path)
		snprintf(sh.path, sizeof(sh.path), "%s", path);
}

bool samehost_enabled(void)
{
	return sh.on;
}

const uint8_t *samehost_id(void)
{
	return sh.id;
}

const char *samehost_path(void)
{
	return sh.on ? sh.path : "";
}

/* The kernel's boot id (a UUID in text, 32 hex digits and dashes): one per boot of one host. */
static int read_boot_id(uint8_t *id)
{
	char buf[64];
	unsigned n = 0;
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

	if (!f)
		return -errno;
	if (!fgets(buf, sizeof(buf), f)) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	for (const char *c = buf; *c && n < 2 * DP_HOST_ID_LEN; c++) {
		unsigned v;

		if (*c == '-' || *c == '\n')
			continue;
		if (sscanf(c, "%1x", &v) != 1)
			return -EIO;
		id[n / 2] = (uint8_t)(n % 2 ? id[n / 2] | v : v << 4);
		n++;
	}
	return n == 2 * DP_HOST_ID_LEN ? 0 : -EIO;
}

static int samehost_init(void)
{
	int rc;

	if (sh.off) {
		log_info("same host: off (--no-same-host): peers of this host go through the "
			 "fabric");
		return 0;
	}
	if (!sh.path[0] && snprintf(sh.path, sizeof(sh.path), "%s.peer", cfg.socket_path) >=
				   (int)sizeof(sh.path)) {
		log_warn("same host: off: the socket path is too long for '%s.peer' (use "
			 "--same-host-socket)",
			 cfg.socket_path);
		return 0;
	}
	rc = read_boot_id(sh.id);
	if (rc) {
		log_warn("same host: off: no boot id: %s", strerror(-rc));
		return 0;
	}
	sh.pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	if (sh.pidfd < 0) {
		log_warn("same host: off: pidfd_open: %s", strerror(errno));
		return 0;
	}
	sh.table_fd = memfd_create("dataplane-exports", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (sh.table_fd < 0 || ftruncate(sh.table_fd, TABLE_BYTES) < 0 ||
	    fcntl(sh.table_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
		log_warn("same host: off: export table: %s", strerror(errno));
		goto fail;
	}
	sh.table = mmap(NULL, TABLE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, sh.table_fd, 0);
	if (sh.table == MAP_FAILED) {
		sh.table = NULL;
		log_warn("same host: off: export table: %s", strerror(errno));
		goto fail;
	}
	sh.on = true;
	log_info("same host: peers of this host map exports directly; peer socket %s", sh.path);
	return 0;
fail:
	if (sh.table_fd >= 0)
		close(sh.table_fd);
	close(sh.pidfd);
	sh.table_fd = sh.pidfd = -1;
	return 0;
}

static void peer_unref(struct samehost_peer *p)
{
	if (--p->refs)
		return;
	munmap((void *)p->table, TABLE_BYTES);
	free(p);
}

static void samehost_fini(void)
{
	while (sh.peers) {
		struct samehost_peer *p = sh.peers;

		sh.peers = p->next;
		if (p->ev.fd >= 0) {
			/* The control loop and its epoll set are gone. */
			close(p->ev.fd);
			p->ev.fd = -1;
		}
		atomic_store(&p->dead, 1);
		peer_unref(p);
	}
	if (sh.table)
		munmap(sh.table, TABLE_BYTES);
	if (sh.table_fd >= 0)
		close(sh.table_fd);
	if (sh.pidfd >= 0)
		close(sh.pidfd);
	sh.table = NULL;
	sh.table_fd = sh.pidfd = -1;
	sh.on = false;
}

void samehost_start(int epfd)
{
	sh.epfd = epfd;
}

/* ---- exporter ---- */

/* An export's word: slot + 1 in its engine slot (0: none). */
static int samehost_export(struct segment *s)
{
	unsigned i;

	if (!sh.on)
		return 0;
	for (i = 0; i < SAMEHOST_SLOTS && sh.used[i]; i++)
		;
	if (i == SAMEHOST_SLOTS) {
		log_debug("same host: %u exports have words; '%s' is reached through the fabric",
			  SAMEHOST_SLOTS, s->name);
		return 0;
	}
	sh.used[i] = 1;
	sh.gen[i] += sh.gen[i] & 1 ? 2 : 1; /* odd while alive */
	atomic_store_explicit(&sh.table[i], sh.gen[i], memory_order_release);
	s->eng[ENGINE_samehost] = (void *)(uintptr_t)(i + 1);
	return 0;
}

/* The export goes: its word changes before its memory can (the region's
 * last reference is dropped after this hook). */
static void samehost_unexport(struct segment *s)
{
	uintptr_t slot = (uintptr_t)s->eng[ENGINE_samehost];

	if (!slot)
		return;
	slot--;
	sh.gen[slot]++; /* even: gone */
	atomic_store_explicit(&sh.table[slot], sh.gen[slot], memory_order_release);
	sh.used[slot] = 0;
	s->eng[ENGINE_samehost] = NULL;
}

/* A memfd holding @v: the description of a VMM region (fds[2]), or -1. */
static int vmm_desc_fd(const struct dp_msg_region_register_cuda_vmm *v)
{
	int fd = memfd_create("dataplane-vmm", MFD_CLOEXEC);

	if (fd >= 0 && pwrite(fd, v, sizeof(*v), 0) != (ssize_t)sizeof(*v)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* The description a same-host exporter put in a memfd (vmm_desc_fd),
 * checked as a client's would be: 0 or -EBADMSG. */
static int vmm_desc_read(int fd, struct dp_msg_region_register_cuda_vmm *v)
{
	struct stat st;

	if (fstat(fd, &st) < 0 || st.st_size != (off_t)sizeof(*v) ||
	    pread(fd, v, sizeof(*v), 0) != (ssize_t)sizeof(*v) || !dp_proto_cuda_vmm_ok(v))
		return -EBADMSG;
	return 0;
}

int samehost_describe(const struct segment *s, struct dp_samehost_desc *d, int *fds, unsigned *nfds)
{
	uintptr_t slot = (uintptr_t)s->eng[ENGINE_samehost];
	const struct region *r = s->region;
	long page = sysconf(_SC_PAGESIZE);
	struct dp_msg_region_register_cuda_vmm v;
	unsigned n = 2;
	int rc;

	if (!sh.on || !slot)
		return -ENOTSUP;
	memset(d, 0, sizeof(*d));
	d->slot = (uint32_t)(slot - 1);
	d->gen = sh.gen[slot - 1];
	*nfds = 0;
	if (r->kind == REGION_HOST && r->fd >= 0) {
		d->kind = SAMEHOST_HOST;
		d->map_off = r->file_off & ~(uint64_t)(page - 1);
		d->base_off = r->file_off - d->map_off;
		d->map_len = r->len + d->base_off;
		fds[n++] = fcntl(r->fd, F_DUPFD_CLOEXEC, 0);
	} else if (r->kind == REGION_CUDA && !gpu_region_ipc(r, &d->cuda)) {
		d->kind = SAMEHOST_CUDA;
	} else if (r->kind == REGION_CUDA) {
		/* Fresh fds of the pieces this service imported. */
		rc = gpu_region_vmm(r, &v, fds + 3);
		if (rc)
			return rc;
		d->kind = SAMEHOST_CUDA_VMM;
		fds[n++] = vmm_desc_fd(&v);
		n += v.npieces;
	} else if (r->kind == REGION_VM) {
		/* The client's pidfd: the asker reads and writes that process
		 * itself, if the kernel lets it (vm.h). */
		int pidfd = vm_region_pidfd(r, &d->map_off);

		if (pidfd < 0)
			return -ENOTSUP;
		d->kind = SAMEHOST_VM;
		fds[n++] = fcntl(pidfd, F_DUPFD_CLOEXEC, 0);
	} else {
		return -ENOTSUP;
	}
	fds[0] = fcntl(sh.pidfd, F_DUPFD_CLOEXEC, 0);
	fds[1] = fcntl(sh.table_fd, F_DUPFD_CLOEXEC, 0);
	*nfds = n;
	for (unsigned i = 0; i < n; i++)
		if (fds[i] < 0) {
			for (unsigned j = 0; j < n; j++)
				if (fds[j] >= 0)
					close(fds[j]);
			*nfds = 0;
			return -EMFILE;
		}
	return 0;
}

/* ---- importer ---- */

bool samehost_candidate(const struct dp_rpc_lookup_reply *r)
{
	return sh.on && r->flags & DP_RPC_F_SAME_HOST &&
	       !memcmp(r->host_id, sh.id, DP_HOST_ID_LEN) && r->local_path[0] &&
	       strcmp(r->server_name, cfg.server_name);
}

bool samehost_same(const struct segment *s, const struct dp_rpc_lookup_reply *r)
{
	const struct samehost_seg *ss = s->same;

	return ss && !strcmp(ss->peer->name, r->server_name) && samehost_alive(ss) &&
	       ss->word == &ss->peer->table[r->same.slot] && ss->gen == r->same.gen;
}

static void on_peer_exit(struct ev_handler *h, uint32_t events)
{
	struct samehost_peer *p = (struct samehost_peer *)h;

	(void)events;
	log_info("same host: peer %s exited; its segments fail from now on", p->name);
	atomic_store_explicit(&p->dead, 1, memory_order_release);
	ev_del(sh.epfd, &p->ev, "a same-host peer");
	close(p->ev.fd);
	p->ev.fd = -1;
	for (struct samehost_peer **pp = &sh.peers; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	peer_unref(p); /* the list's */
}

static bool pidfd_exited(int pidfd)
{
	struct pollfd pfd = {.fd = pidfd, .events = POLLIN};

	return poll(&pfd, 1, 0) != 0;
}

/* The pid a pidfd refers to (its fdinfo's "Pid:"), -1 if unknown. */
static long pidfd_pid(int pidfd)
{
	char path[64], line[128];
	long pid = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Pid: %ld", &pid) == 1)
			break;
	fclose(f);
	return pid;
}

/* The peer these fds come from: the one we know, when it is the same
 * process still running (the new pidfd and table are closed), else a new
 * one (which takes them). */
static struct samehost_peer *peer_get(const char *name, int pidfd, int table_fd)
{
	struct samehost_peer *p;
	struct stat st;
	void *map;

	/* The same process: same name, and both pidfds name one live pid (a
	 * restarted peer's old pidfd has fired, and two services of one name
	 * in two network namespaces are two pids). */
	for (p = sh.peers; p; p = p->next)
		if (!strcmp(p->name, name) && !atomic_load(&p->dead) && !pidfd_exited(p->ev.fd) &&
		    pidfd_pid(p->ev.fd) > 0 && pidfd_pid(p->ev.fd) == pidfd_pid(pidfd)) {
			close(pidfd);
			close(table_fd);
			return p;
		}
	if (fstat(table_fd, &st) < 0 || st.st_size < (off_t)TABLE_BYTES || pidfd_exited(pidfd))
		goto bad;
	map = mmap(NULL, TABLE_BYTES, PROT_READ, MAP_SHARED, table_fd, 0);
	if (map == MAP_FAILED)
		goto bad;
	close(table_fd);
	p = calloc(1, sizeof(*p));
	if (!p) {
		munmap(map, TABLE_BYTES);
		close(pidfd);
		return NULL;
	}
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->table = map;
	p->refs = 1;
	p->ev = (struct ev_handler){.fd = pidfd, .on_event = on_peer_exit};
	if (ev_add(sh.epfd, &p->ev, EPOLLIN, "a same-host peer")) {
		munmap(map, TABLE_BYTES);
		close(pidfd);
		free(p);
		return NULL;
	}
	p->next = sh.peers;
	sh.peers = p;
	return p;
bad:
	close(pidfd);
	close(table_fd);
	return NULL;
}

/* The region a same-host reply describes, mapped here: @fds as
 * samehost_describe made them; a VMM region's pieces' fds (fds[3 ..]) are
 * taken, the others left to the caller. */
static int region_import(const struct dp_rpc_lookup_reply *r, int *fds,
			 const struct dp_msg_region_register_cuda_vmm *v, struct region **out)
{
	const struct dp_samehost_desc *d = &r->same;
	struct region *reg = calloc(1, sizeof(*reg));
	int memfd = d->kind == SAMEHOST_HOST ? fds[2] : -1;
	struct stat st;
	int rc;

	if (v && (!reg || v->len != r->len)) {
		for (uint32_t i = 0; i < v->npieces; i++)
			close(fds[3 + i]);
		free(reg);
		return reg ? -EBADMSG : -ENOMEM;
	}
	if (!reg)
		return -ENOMEM;
	atomic_init(&reg->refs, 1);
	reg->fd = -1;
	reg->owner_pid = 0;
	if (d->kind == SAMEHOST_VM) {
		/* A client's process memory, reached through its pidfd (fds[2]). */
		rc = d->map_len || d->base_off
			     ? -EBADMSG
			     : vm_region_import(reg, fds[2], pidfd_pid(fds[2]), d->map_off, r->len);
		if (rc) {
			free(reg);
			return rc;
		}
		*out = reg;
		return 0;
	}
	if (v) {
		rc = gpu_region_open_vmm(reg, v, fds + 3);
		if (rc) {
			free(reg);
			return rc;
		}
		*out = reg;
		return 0;
	}
	if (d->kind == SAMEHOST_CUDA) {
		rc = gpu_region_open(reg, &d->cuda);
		if (rc || reg->len != r->len) {
			free(reg);
			return rc ? rc : -EBADMSG;
		}
		*out = reg;
		return 0;
	}
	rc = -EBADMSG;
	if (memfd < 0 || fstat(memfd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    d->map_len < d->base_off || d->map_len - d->base_off != r->len ||
	    d->map_off + d->map_len < d->map_off ||
	    d->map_off + d->map_len > (uint64_t)st.st_size ||
	    d->map_off % (uint64_t)sysconf(_SC_PAGESIZE))
		goto fail;
	reg->map =
		mmap(NULL, d->map_len, PROT_READ | (r->access & DP_ACCESS_WRITE ? PROT_WRITE : 0),
		     MAP_SHARED, memfd, (off_t)d->map_off);
	if (reg->map == MAP_FAILED) {
		rc = -errno;
		goto fail;
	}
	reg->kind = REGION_HOST;
	reg->map_len = d->map_len;
	reg->base = (uint8_t *)reg->map + d->base_off;
	reg->len = r->len;
	*out = reg;
	return 0;
fail:
	free(reg);
	return rc;
}

int samehost_import(const char *peer, const char *name, const struct dp_rpc_lookup_reply *r,
		    int *fds, unsigned nfds, struct segment **out)
{
	const struct dp_samehost_desc *d = &r->same;
	struct samehost_peer *p = NULL;
	struct dp_msg_region_register_cuda_vmm v;
	struct samehost_seg *ss;
	struct region *reg = NULL;
	struct segment *s;
	unsigned want = 0;
	int rc = -EBADMSG;

	if (d->kind == SAMEHOST_HOST || d->kind == SAMEHOST_VM)
		want = 3;
	else if (d->kind == SAMEHOST_CUDA)
		want = 2;
	else if (d->kind == SAMEHOST_CUDA_VMM && nfds >= 3 && !vmm_desc_read(fds[2], &v))
		want = 3 + v.npieces;
	if (!want || nfds != want || d->slot >= SAMEHOST_SLOTS || !(d->gen & 1))
		goto out_fds;
	rc = region_import(r, fds, d->kind == SAMEHOST_CUDA_VMM ? &v : NULL, &reg);
	if (d->kind == SAMEHOST_CUDA_VMM)
		nfds = 3; /* the pieces' fds were taken */
	if (rc)
		goto out_fds;
	if (nfds > 2)
		close(fds[2]);
	p = peer_get(r->server_name, fds[0], fds[1]);
	nfds = 0;
	s = calloc(1, sizeof(*s));
	ss = calloc(1, sizeof(*ss));
	if (!p || !s || !ss) {
		free(s);
		free(ss);
		region_put(reg);
		return p ? -ENOMEM : -EBADMSG;
	}
	p->refs++;
	*ss = (struct samehost_seg){
		.peer = p, .word = &p->table[d->slot], .gen = d->gen, .peer_dead = &p->dead};
	atomic_init(&s->refs, 1);
	s->region = reg;
	s->access = r->access;
	s->same = ss;
	snprintf(s->name, sizeof(s->name), "%s", name);
	snprintf(s->owner_name, sizeof(s->owner_name), "%s", peer);
	log_info("segment '%s' on %s (%s): %llu bytes of %s memory, %s, mapped (same host)", name,
		 peer, r->server_name, (unsigned long long)r->len,
		 d->kind == SAMEHOST_CUDA	? "GPU"
		 : d->kind == SAMEHOST_CUDA_VMM ? "GPU (VMM)"
		 : d->kind == SAMEHOST_VM	? "client process (through its pidfd)"
						: "host",
		 r->access == DP_ACCESS_RW ? "rw" : "ro");
	*out = s;
	return 0;
out_fds:
	for (unsigned i = 0; i < nfds; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return rc;
}

const char *samehost_seg_server(const struct samehost_seg *ss)
{
	return ss->peer->name;
}

/* A segment of another service of this host holds the mapped region and
 * its link to that service until its last reference (segment_put). */
static void samehost_segment_free(struct segment *s)
{
	if (s->same) {
		region_put(s->region);
		peer_unref(s->same->peer);
		free(s->same);
	}
}

const struct engine samehost_engine = {
	.name = "samehost",
	.init = samehost_init,
	.fini = samehost_fini,
	.segment_export = samehost_export,
	.segment_unexport = samehost_unexport,
	.segment_free = samehost_segment_free,
};
