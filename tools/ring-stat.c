/* SPDX-License-Identifier: MIT */
/*
 * ring-stat - a running dataplaned's counters, read from its shared-memory
 * stats region the way iostat, vmstat and top read theirs: one table of all
 * queues and pollers, or a refreshing view with rates from deltas, or JSON
 * (one object per sample), or Prometheus text exposition format.
 *
 * It maps the region PROT_READ and never writes to it. Field names, columns
 * and exit codes: docs/ring-stat.md. Layout and consistency: dp_stats.h.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "dp_stats.h"
#include "dp_tool.h"

/* Exit codes (docs/ring-stat.md). */
enum {
	EX_OK = 0,
	EX_FAIL = 1,	  /* anything else: permission, I/O */
	EX_USAGE = 2,	  /* bad flags; several services and none named */
	EX_NOSERVICE = 3, /* no region, or its service is not running */
	EX_ABI = 4,	  /* not a stats region, or another ABI version */
	EX_TRUNC = 5,	  /* truncated or inconsistent region */
};

/* ---- options ---- */

enum sort_key { SORT_SLOT, SORT_OPS, SORT_BYTES, SORT_FAIL, SORT_P99, SORT_INFL, SORT_NAME };
enum output { OUT_TABLE, OUT_JSON, OUT_PROM };

static struct {
	const char *name;   /* --stats */
	const char *socket; /* --socket */
	double interval;    /* -w; 0: one sample */
	long count;	    /* -c; 0: until interrupted (with -w) */
	const char *queue;  /* -q */
	enum sort_key sort;
	enum output out;
	bool wide, color, list;
} opt;

static const char *prog = "ring-stat";

static void fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void fail(int code, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

/* ---- the region ---- */

struct region {
	char name[DP_STATS_NAME_MAX];
	const uint8_t *map;
	size_t size;
	const struct dp_stats_header *h;
};

/* Reads of the mapping run under a SIGBUS guard: a file truncated under us
 * is reported, not a crash. */
static sigjmp_buf bus_jmp;
static volatile sig_atomic_t bus_armed;

static void on_sigbus(int sig)
{
	(void)sig;
	if (bus_armed)
		siglongjmp(bus_jmp, 1);
	signal(SIGBUS, SIG_DFL);
	raise(SIGBUS);
}

static uint64_t real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static bool name_ok(const char *name)
{
	size_t n = strlen(name);

	return n > 0 && n < DP_STATS_NAME_MAX && !strchr(name, '/');
}

/* An array of n blocks of size bytes at off lies inside the region. */
static bool span_ok(uint64_t off, uint64_t n, uint64_t size, uint64_t region)
{
	return off <= region && (!n || (size <= region && n <= (region - off) / size));
}

/* The header's block sizes and offsets are this reader's, and every block
 * array lies inside the region. */
static bool layout_ok(const struct dp_stats_header *h)
{
	return !(h->header_size != sizeof(struct dp_stats_header) ||
		 h->queue_size != sizeof(struct dp_stats_queue) ||
		 h->poller_size < sizeof(struct dp_stats_poller) ||
		 h->rail_info_size < sizeof(struct dp_stats_rail_info) ||
		 h->rail_size != sizeof(struct dp_stats_rail) ||
		 h->hist_buckets != DP_STATS_HIST_BUCKETS ||
		 h->hist_sub_bits != DP_STATS_HIST_SUB_BITS || h->nrails > DP_STATS_MAX_RAILS ||
		 h->npollers > 4096 || h->nqueues > (1u << 20) ||
		 !span_ok(h->pollers_off, h->npollers, h->poller_size, h->region_size) ||
		 !span_ok(h->rail_info_off, h->nrails, h->rail_info_size, h->region_size) ||
		 !span_ok(h->rails_off, (uint64_t)h->nrails * h->npollers, h->rail_size,
			  h->region_size) ||
		 !span_ok(h->queues_off, h->nqueues, h->queue_size, h->region_size) ||
		 h->pollers_off % 8 || h->rail_info_off % 8 || h->rails_off % 8 ||
		 h->queues_off % 8 || h->poller_size % 8 || h->rail_info_size % 8);
}

/* Maps region name read-only into r. Returns EX_OK, or an exit code with a
 * message for people in err. */
static int region_map(const char *name, struct region *r, char *err, size_t errlen)
{
	struct stat st;
	void *map;
	int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);

	if (fd < 0) {
		if (errno == ENOENT) {
			snprintf(err, errlen,
				 "no stats region '%s' (/dev/shm/%s): is dataplaned running? "
				 "(ring-stat --list shows the regions that exist)",
				 name, name);
			return EX_NOSERVICE;
		}
		if (errno == EACCES) {
			snprintf(err, errlen,
				 "/dev/shm/%s: permission denied (the region is mode 0640: run as "
				 "the service's user or a member of its group)",
				 name);
			return EX_FAIL;
		}
		snprintf(err, errlen, "/dev/shm/%s: %s", name, strerror(errno));
		return EX_FAIL;
	}
	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "/dev/shm/%s: %s", name, strerror(errno));
		close(fd);
		return EX_FAIL;
	}
	if ((size_t)st.st_size < 2 * sizeof(uint32_t)) {
		snprintf(err, errlen,
			 "stats region '%s' is truncated: %lld bytes, not even a header", name,
			 (long long)st.st_size);
		close(fd);
		return EX_TRUNC;
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED) {
		snprintf(err, errlen, "/dev/shm/%s: mmap: %s", name, strerror(errno));
		return EX_FAIL;
	}
	r->map = map;
	r->size = (size_t)st.st_size;
	r->h = map;
	return EX_OK;
}

/* The mapped region is a finished one of this ABI, whole, and its service
 * runs. Returns EX_OK, or an exit code with a message in err. */
static int region_check(const struct region *r, char *err, size_t errlen)
{
	const struct dp_stats_header *h = r->h;
	const char *name = r->name;
	uint32_t magic;

	/* A service that is creating the region stores the magic last. */
	for (int i = 0; i < 100; i++) {
		/* Acquire: pairs with the release store of magic in stats.c. */
		magic = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE);
		if (magic)
			break;
		usleep(10000);
	}
	if (magic != DP_STATS_MAGIC) {
		snprintf(
			err, errlen,
			magic ? "'%s' is not a dataplane stats region (magic 0x%08x)"
			      : "stats region '%s' was never finished (magic %u): its service died "
				"while starting",
			name, magic);
		return magic ? EX_ABI : EX_TRUNC;
	}
	if (h->abi_version != DP_STATS_ABI_VERSION) {
		snprintf(err, errlen,
			 "stats region '%s' has ABI version %u; this ring-stat reads version %u "
			 "(use the ring-stat built with that dataplaned)",
			 name, h->abi_version, DP_STATS_ABI_VERSION);
		return EX_ABI;
	}
	if (r->size < sizeof(*h)) {
		snprintf(err, errlen,
			 "stats region '%s' is truncated: %zu bytes, the header alone is %zu", name,
			 r->size, sizeof(*h));
		return EX_TRUNC;
	}
	if (h->region_size > r->size) {
		snprintf(err, errlen,
			 "stats region '%s' is truncated: %zu bytes, its header says %llu", name,
			 r->size, (unsigned long long)h->region_size);
		return EX_TRUNC;
	}
	if (!layout_ok(h)) {
		snprintf(err, errlen,
			 "stats region '%s' is inconsistent (block sizes or offsets "
			 "outside the region): truncated or corrupt",
			 name);
		return EX_TRUNC;
	}
	if (__atomic_load_n(&h->state, __ATOMIC_ACQUIRE) != DP_STATS_RUNNING ||
	    !dp_stats_service_alive(h->pid)) {
		snprintf(err, errlen,
			 "the service of stats region '%s' (pid %d) is not running: the region is "
			 "stale (remove /dev/shm/%s)",
			 name, (int)h->pid, name);
		return EX_NOSERVICE;
	}
	return EX_OK;
}

/*
 * Opens and checks a region. Returns EX_OK, or an exit code with a message
 * for people in err; r->map is set (for region_close) once the file is
 * mapped, whatever the checks then say.
 */
static int region_open(const char *name, struct region *r, char *err, size_t errlen)
{
	int rc;

	memset(r, 0, sizeof(*r));
	snprintf(r->name, sizeof(r->name), "%s", name);
	if (!name_ok(name)) {
		snprintf(err, errlen, "'%s' is not a region name (1..63 bytes, no '/')", name);
		return EX_USAGE;
	}
	rc = region_map(name, r, err, errlen);
	return rc ? rc : region_check(r, err, errlen);
}

static void region_close(struct region *r)
{
	if (r->map)
		munmap((void *)r->map, r->size);
	r->map = NULL;
}

/* What --list shows of one file in /dev/shm; false when it is no region. */
static bool region_describe(const char *name, char *state, size_t slen, struct dp_stats_header *h)
{
	struct region r;
	char err[512];
	int rc = region_open(name, &r, err, sizeof(err));

	memset(h, 0, sizeof(*h));
	switch (rc) {
	case EX_OK:
		snprintf(state, slen, "running");
		break;
	case EX_NOSERVICE:
		snprintf(state, slen, "stale");
		break;
	case EX_ABI:
		if (r.map && r.h->magic == DP_STATS_MAGIC) {
			snprintf(state, slen, "abi-v%u", r.h->abi_version);
			break;
		}
		region_close(&r);
		return false;
	case EX_TRUNC:
		snprintf(state, slen, "truncated");
		break;
	default:
		snprintf(state, slen, "unreadable");
		break;
	}
	if (r.map && r.size >= sizeof(*h) && r.h->abi_version == DP_STATS_ABI_VERSION)
		memcpy(h, r.h, sizeof(*h));
	region_close(&r);
	return true;
}

static int list_regions(bool print)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	int n = 0;

	if (!d)
		fail(EX_FAIL, "/dev/shm: %s", strerror(errno));
	if (print)
		printf("%-24s %7s %-10s %-21s %s\n", "NAME", "PID", "STATE", "SERVER", "SOCKET");
	while ((e = readdir(d))) {
		struct dp_stats_header h;
		char state[32];

		if (e->d_name[0] == '.' || !name_ok(e->d_name))
			continue;
		if (!region_describe(e->d_name, state, sizeof(state), &h))
			continue;
		n++;
		if (print)
			printf("%-24s %7d %-10s %-21.*s %.*s\n", e->d_name, (int)h.pid, state,
			       (int)sizeof(h.server_name), h.server_name,
			       (int)sizeof(h.socket_path), h.socket_path);
	}
	closedir(d);
	return n;
}

/*
 * Whether the socket a service recorded in its region header (as it was
 * given: maybe relative to the service's working directory) is the file
 * pst describes.
 */
static bool same_inode(const char *recorded, int32_t pid, const struct stat *pst)
{
	char buf[256];
	struct stat st;

	if (!*recorded)
		return false;
	if (recorded[0] != '/') {
		snprintf(buf, sizeof(buf), "/proc/%d/cwd/%s", (int)pid, recorded);
		recorded = buf;
	}
	return !stat(recorded, &st) && st.st_dev == pst->st_dev && st.st_ino == pst->st_ino;
}

/*
 * The running region whose service records control socket path (what
 * --list shows), whatever --stats named it: the same file (inode), else the
 * same string. False when there is none.
 */
static bool region_of_socket(const char *path, char *name, size_t len)
{
	char err[512], rec[sizeof(((struct dp_stats_header *)0)->socket_path) + 1];
	struct stat pst;
	bool have_st = !stat(path, &pst), found = false;
	struct region r;
	struct dirent *e;
	DIR *d = opendir("/dev/shm");

	if (!d)
		return false;
	while ((e = readdir(d))) {
		bool by_inode, by_string;

		if (e->d_name[0] == '.' || !name_ok(e->d_name))
			continue;
		if (region_open(e->d_name, &r, err, sizeof(err)) != EX_OK) {
			region_close(&r);
			continue;
		}
		memcpy(rec, r.h->socket_path, sizeof(rec) - 1);
		rec[sizeof(rec) - 1] = 0;
		by_inode = have_st && same_inode(rec, r.h->pid, &pst);
		by_string = *rec && !strcmp(rec, path);
		region_close(&r);
		if (!by_inode && !by_string)
			continue;
		if (!found || by_inode)
			snprintf(name, len, "%s", e->d_name);
		found = true;
		if (by_inode)
			break;
	}
	closedir(d);
	return found;
}

/* Why nobody answers on socket path: connect()'s errno, or 0 when a
 * service does answer there. */
static int socket_probe(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, rc = 0;

	if (strlen(path) >= sizeof(sa.sun_path))
		return ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		rc = errno;
	close(fd);
	return rc;
}

/*
 * The region of the service on control socket path: the running one that
 * records that socket, else the name derived from the path (the default of
 * a service without --stats). Fails when neither exists.
 */
static void socket_region(const char *path, char *name, size_t len)
{
	char err[512];
	struct region r;
	int rc, why;

	if (region_of_socket(path, name, len))
		return;
	dp_stats_default_name(path, name, len);
	rc = region_open(name, &r, err, sizeof(err));
	region_close(&r);
	if (rc == EX_OK)
		return;
	if (rc != EX_NOSERVICE || !strstr(err, "no stats region"))
		fail(rc, "%s", err);
	why = socket_probe(path);
	if (why)
		fail(EX_NOSERVICE,
		     "cannot connect to %s: no dataplaned is listening there (%s); is dataplaned "
		     "running? (ring-stat --list shows the stats regions that exist)",
		     path, strerror(why));
	fail(EX_NOSERVICE,
	     "the dataplaned on %s has no stats region here: it runs with --no-stats, or "
	     "in another /dev/shm (ring-stat --list shows the regions that exist)",
	     path);
}

/* The region to read when none was named: the one of the default socket,
 * else the only running one. */
static void pick_region(char *name, size_t len)
{
	char path[256], err[512];
	struct region r;
	DIR *d;
	struct dirent *e;
	int running = 0;

	dp_default_socket(path, sizeof(path));
	if (region_of_socket(path, name, len))
		return;
	dp_stats_default_name(path, name, len);
	if (region_open(name, &r, err, sizeof(err)) == EX_OK) {
		region_close(&r);
		return;
	}
	region_close(&r);
	d = opendir("/dev/shm");
	if (!d)
		fail(EX_FAIL, "/dev/shm: %s", strerror(errno));
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || !name_ok(e->d_name))
			continue;
		if (region_open(e->d_name, &r, err, sizeof(err)) == EX_OK) {
			if (!running++)
				snprintf(name, len, "%s", e->d_name);
		}
		region_close(&r);
	}
	closedir(d);
	if (running == 1)
		return;
	if (!running)
		fail(EX_NOSERVICE, "no dataplane service is running (no live stats region in "
				   "/dev/shm; ring-stat --list shows stale ones)");
	fprintf(stderr, "%s: %d services are running; name one with --stats NAME:\n", prog,
		running);
	list_regions(true);
	exit(EX_USAGE);
}

/* ---- snapshots ---- */

struct qsnap {
	uint32_t slot;
	uint64_t generation;
	int32_t pid;
	uint32_t client_id, queue_id, poller, depth;
	uint64_t created_ns;
	char name[32];
	uint64_t submitted, completed, failed, bytes, local_copies, doorbells;
	uint64_t lat_sum_ns, lat_max_ns, lat_unstamped;
	uint32_t sq_depth, cq_depth;
	uint64_t failed_by[DP_STATS_NERR];
	uint64_t hist[DP_STATS_HIST_BUCKETS];
	uint64_t hist_count;
};

struct rsnap {
	struct dp_stats_rail_info info;
	struct dp_stats_rail c; /* summed over pollers */
};

struct snap {
	uint64_t mono_ns, real_ns;
	struct dp_stats_header h;
	unsigned nq, np, nr;
	struct qsnap *q;
	struct dp_stats_poller *p;
	unsigned *pq; /* queues per poller */
	struct rsnap *r;
	/* Service-wide totals: live queues plus the pollers' retired sums. */
	uint64_t submitted, completed, failed, bytes, retired;
};

static void snap_free(struct snap *s)
{
	free(s->q);
	free(s->p);
	free(s->pq);
	free(s->r);
	memset(s, 0, sizeof(*s));
}

/* Copies n bytes (a multiple of 8, 8-aligned) word by word with relaxed
 * atomic loads: the writer may be changing them. */
static void copy_words(void *dst, const void *src, size_t n)
{
	uint64_t *d = dst;
	const uint64_t *s = src;

	for (size_t i = 0; i < n / 8; i++)
		d[i] = __atomic_load_n(&s[i], __ATOMIC_RELAXED);
}

static const struct dp_stats_poller *poller_at(const struct region *r, unsigned i)
{
	return (const void *)(r->map + r->h->pollers_off + (size_t)i * r->h->poller_size);
}

static const struct dp_stats_queue *queue_at(const struct region *r, unsigned i)
{
	return (const void *)(r->map + r->h->queues_off + (size_t)i * r->h->queue_size);
}

/* One queue block; false when it is free or kept changing. */
static bool read_queue(const struct dp_stats_queue *b, unsigned slot, struct qsnap *out)
{
	static struct dp_stats_queue tmp;

	for (int tries = 0; tries < 1000; tries++) {
		/* Seqcount read side. Acquire: pairs with the release store of
		 * the even seq in stats_queue_attach(). */
		uint32_t s1 = __atomic_load_n(&b->seq, __ATOMIC_ACQUIRE), s2;

		if (s1 & 1)
			continue;
		if (__atomic_load_n(&b->state, __ATOMIC_RELAXED) != DP_STATS_Q_ACTIVE)
			return false;
		copy_words(&tmp, b, sizeof(tmp));
		/* Acquire fence: the copy completes before seq is read again. */
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		s2 = __atomic_load_n(&b->seq, __ATOMIC_RELAXED);
		if (s1 != s2)
			continue;
		if (tmp.state != DP_STATS_Q_ACTIVE)
			return false;
		out->slot = slot;
		out->generation = tmp.generation;
		out->pid = tmp.client_pid;
		out->client_id = tmp.client_id;
		out->queue_id = tmp.queue_id;
		out->poller = tmp.poller;
		out->depth = tmp.depth;
		out->created_ns = tmp.created_ns;
		memcpy(out->name, tmp.client_name, sizeof(out->name));
		out->name[sizeof(out->name) - 1] = 0;
		for (char *p = out->name; *p; p++)
			if (*p < 0x20 || *p > 0x7e)
				*p = '?';
		out->submitted = tmp.submitted;
		out->completed = tmp.completed;
		out->failed = tmp.failed;
		out->bytes = tmp.bytes;
		out->local_copies = tmp.local_copies;
		out->doorbells = tmp.doorbells;
		out->lat_sum_ns = tmp.lat_sum_ns;
		out->lat_max_ns = tmp.lat_max_ns;
		out->lat_unstamped = tmp.lat_unstamped;
		out->sq_depth = tmp.sq_depth;
		out->cq_depth = tmp.cq_depth;
		memcpy(out->failed_by, tmp.failed_by, sizeof(out->failed_by));
		memcpy(out->hist, tmp.hist, sizeof(out->hist));
		out->hist_count = 0;
		for (unsigned i = 0; i < DP_STATS_HIST_BUCKETS; i++)
			out->hist_count += out->hist[i];
		return true;
	}
	return false;
}

static void snap_alloc(struct snap *s, const struct dp_stats_header *h)
{
	memset(s, 0, sizeof(*s));
	s->np = h->npollers;
	s->nr = h->nrails;
	s->p = calloc(s->np ? s->np : 1, sizeof(*s->p));
	s->pq = calloc(s->np ? s->np : 1, sizeof(*s->pq));
	s->r = calloc(s->nr ? s->nr : 1, sizeof(*s->r));
	if (!s->p || !s->pq || !s->r)
		fail(EX_FAIL, "out of memory");
}

/* The header, the pollers and the active queues, once. */
static void snap_copy(const struct region *r, struct snap *s)
{
	const struct dp_stats_header *h = r->h;
	unsigned cap = 0;

	s->mono_ns = dp_now_ns();
	s->real_ns = real_ns();
	copy_words(&s->h, h, sizeof(s->h));
	for (unsigned i = 0; i < s->np; i++) {
		copy_words(&s->p[i], poller_at(r, i), sizeof(s->p[i]));
		s->pq[i] = 0;
	}
	s->nq = 0;
	for (unsigned i = 0; i < h->nqueues; i++) {
		const struct dp_stats_queue *b = queue_at(r, i);

		if (__atomic_load_n(&b->state, __ATOMIC_RELAXED) != DP_STATS_Q_ACTIVE)
			continue;
		if (s->nq == cap) {
			cap = cap ? cap * 2 : 16;
			s->q = realloc(s->q, cap * sizeof(*s->q));
			if (!s->q)
				fail(EX_FAIL, "out of memory");
		}
		if (read_queue(b, i, &s->q[s->nq]))
			s->nq++;
	}
}

/*
 * snap_copy until no poller retired a queue meanwhile (the pollers' retired
 * sums and the live queues then add up), or 1000 tries: a queue retired
 * between the two copies would be counted twice or not at all.
 */
static void snap_copy_stable(const struct region *r, struct snap *s)
{
	uint32_t seq0[4096];

	for (int attempt = 0;; attempt++) {
		bool stable = true;

		/* Acquire: pairs with the release of the even retire_seq in
		 * stats_queue_retire(). */
		for (unsigned i = 0; i < s->np; i++) {
			seq0[i] = __atomic_load_n(&poller_at(r, i)->retire_seq, __ATOMIC_ACQUIRE);
			if (seq0[i] & 1)
				stable = false;
		}
		if (!stable && attempt < 1000) {
			usleep(10);
			continue;
		}
		snap_copy(r, s);
		/* Acquire fence: the copies complete before retire_seq is read
		 * again. */
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		for (unsigned i = 0; i < s->np; i++)
			if (__atomic_load_n(&poller_at(r, i)->retire_seq, __ATOMIC_RELAXED) !=
			    seq0[i])
				stable = false;
		if (stable || attempt >= 1000)
			return;
	}
}

/* Each rail's description, and its counters summed over the pollers. */
static void snap_rails(const struct region *r, struct snap *s)
{
	const struct dp_stats_header *h = r->h;

	for (unsigned i = 0; i < s->nr; i++) {
		const uint8_t *info = r->map + h->rail_info_off + (size_t)i * h->rail_info_size;

		copy_words(&s->r[i].info, info, sizeof(s->r[i].info));
		s->r[i].info.provider[sizeof(s->r[i].info.provider) - 1] = 0;
		s->r[i].info.fabric[sizeof(s->r[i].info.fabric) - 1] = 0;
		s->r[i].info.domain[sizeof(s->r[i].info.domain) - 1] = 0;
		for (unsigned p = 0; p < s->np; p++) {
			struct dp_stats_rail c;

			copy_words(&c,
				   r->map + h->rails_off + ((size_t)i * s->np + p) * h->rail_size,
				   sizeof(c));
			s->r[i].c.posted += c.posted;
			s->r[i].c.completed += c.completed;
			s->r[i].c.eagain += c.eagain;
			s->r[i].c.errors += c.errors;
			s->r[i].c.retries += c.retries;
			s->r[i].c.bytes += c.bytes;
			s->r[i].c.reposted += c.reposted;
			s->r[i].c.outs += c.outs;
			s->r[i].c.backs += c.backs;
			s->r[i].c.probes += c.probes;
			/* Gauges: the worst state any poller sees, the
			 * largest weight and throughput. */
			if (c.state > s->r[i].c.state)
				s->r[i].c.state = c.state;
			if (c.weight > s->r[i].c.weight)
				s->r[i].c.weight = c.weight;
			if (c.bw > s->r[i].c.bw)
				s->r[i].c.bw = c.bw;
		}
	}
}

/* The service-wide totals and the queues per poller, from the copy. */
static void snap_totals(struct snap *s)
{
	for (unsigned i = 0; i < s->np; i++) {
		const struct dp_stats_poller *p = &s->p[i];

		s->submitted += p->retired_submitted;
		s->completed += p->retired_completed;
		s->failed += p->retired_failed;
		s->bytes += p->retired_bytes;
		s->retired += p->retired_queues;
	}
	for (unsigned i = 0; i < s->nq; i++) {
		s->submitted += s->q[i].submitted;
		s->completed += s->q[i].completed;
		s->failed += s->q[i].failed;
		s->bytes += s->q[i].bytes;
		if (s->q[i].poller < s->np)
			s->pq[s->q[i].poller]++;
	}
}

/* Takes a snapshot; EX_OK, or EX_TRUNC when the file shrank under us. */
static int snap_take(const struct region *r, struct snap *s)
{
	snap_alloc(s, r->h);
	if (sigsetjmp(bus_jmp, 1)) {
		bus_armed = 0;
		snap_free(s);
		return EX_TRUNC;
	}
	bus_armed = 1;
	snap_copy_stable(r, s);
	snap_rails(r, s);
	bus_armed = 0;
	snap_totals(s);
	return EX_OK;
}

/* ---- figures ---- */

/* The value at quantile q (0..1) of a histogram of count samples: the
 * middle of the bucket holding it, never above the recorded max. */
static uint64_t hist_quantile(const uint64_t *hist, uint64_t count, double q, uint64_t max)
{
	uint64_t rank, seen = 0;

	if (!count)
		return 0;
	rank = (uint64_t)(q * (double)count);
	if ((double)rank < q * (double)count)
		rank++;
	if (rank < 1)
		rank = 1;
	for (unsigned i = 0; i < DP_STATS_HIST_BUCKETS; i++) {
		seen += hist[i];
		if (seen >= rank) {
			uint64_t lo = dp_stats_hist_low(i), hi = dp_stats_hist_high(i) - 1;
			uint64_t mid = lo + (hi - lo) / 2;

			return max && mid > max ? max : mid;
		}
	}
	return max;
}

struct lat {
	uint64_t count, p50, p90, p99, p999, max, mean;
};

static struct lat lat_of(const uint64_t *hist, uint64_t count, uint64_t sum, uint64_t max)
{
	struct lat l = {.count = count, .max = max};

	l.p50 = hist_quantile(hist, count, 0.50, max);
	l.p90 = hist_quantile(hist, count, 0.90, max);
	l.p99 = hist_quantile(hist, count, 0.99, max);
	l.p999 = hist_quantile(hist, count, 0.999, max);
	l.mean = count ? sum / count : 0;
	return l;
}

/* Per-queue figures over an interval: the delta against the same queue
 * (slot and generation) in the previous sample, else since it was created. */
struct qrate {
	double secs, ops, bytes, failed, doorbells;
	struct lat lat; /* of the interval */
};

static const struct qsnap *prev_queue(const struct snap *prev, const struct qsnap *q)
{
	if (!prev)
		return NULL;
	for (unsigned i = 0; i < prev->nq; i++)
		if (prev->q[i].slot == q->slot && prev->q[i].generation == q->generation)
			return &prev->q[i];
	return NULL;
}

static uint64_t delta(uint64_t now, uint64_t then)
{
	return now > then ? now - then : 0;
}

static struct qrate queue_rate(const struct snap *s, const struct snap *prev, const struct qsnap *q)
{
	static uint64_t dh[DP_STATS_HIST_BUCKETS];
	const struct qsnap *o = prev_queue(prev, q);
	struct qrate r = {0};
	uint64_t n = 0;

	r.secs = (double)delta(s->mono_ns, o ? prev->mono_ns : q->created_ns) / 1e9;
	if (r.secs <= 0)
		r.secs = 1e-9;
	r.ops = (double)(delta(q->completed, o ? o->completed : 0) +
			 delta(q->failed, o ? o->failed : 0)) /
		r.secs;
	r.bytes = (double)delta(q->bytes, o ? o->bytes : 0) / r.secs;
	r.failed = (double)delta(q->failed, o ? o->failed : 0) / r.secs;
	r.doorbells = (double)delta(q->doorbells, o ? o->doorbells : 0) / r.secs;
	for (unsigned i = 0; i < DP_STATS_HIST_BUCKETS; i++) {
		dh[i] = delta(q->hist[i], o ? o->hist[i] : 0);
		n += dh[i];
	}
	r.lat = lat_of(dh, n, delta(q->lat_sum_ns, o ? o->lat_sum_ns : 0), q->lat_max_ns);
	/* The interval's max is not kept; its top bucket bounds it. */
	r.lat.max = 0;
	for (unsigned i = DP_STATS_HIST_BUCKETS; i-- > 0;)
		if (dh[i]) {
			r.lat.max = dp_stats_hist_high(i) - 1;
			if (r.lat.max > q->lat_max_ns)
				r.lat.max = q->lat_max_ns;
			break;
		}
	return r;
}

static uint64_t in_flight(const struct qsnap *q)
{
	uint64_t done = q->completed + q->failed;

	return q->submitted > done ? q->submitted - done : 0;
}

struct prate {
	double secs, loops, busy_pct, idle_pct, sleep_pct, sleeps, wakeups, descs, per_loop;
	double path_ops[DP_STATS_NPATH], path_bytes[DP_STATS_NPATH];
	/* File I/O slices and bytes per second, direct and buffered; the
	 * share of the interval's file bytes that went direct (-1: none). */
	double file_direct_ios, file_direct_bytes, file_buffered_ios, file_buffered_bytes;
	double direct_pct;
};

static struct prate poller_rate(const struct snap *s, const struct snap *prev, unsigned i)
{
	const struct dp_stats_poller *p = &s->p[i], *o = prev && i < prev->np ? &prev->p[i] : NULL;
	struct dp_stats_poller zero = {0};
	struct prate r = {0};
	double busy, idle, slept, total;

	if (!o)
		o = &zero;
	r.secs = (double)delta(s->mono_ns, prev ? prev->mono_ns : s->h.start_mono_ns) / 1e9;
	if (r.secs <= 0)
		r.secs = 1e-9;
	r.loops = (double)delta(p->loops, o->loops) / r.secs;
	r.sleeps = (double)delta(p->sleeps, o->sleeps) / r.secs;
	r.wakeups = (double)delta(p->wakeups, o->wakeups) / r.secs;
	r.descs = (double)delta(p->descs, o->descs) / r.secs;
	r.per_loop = delta(p->busy_loops, o->busy_loops)
			     ? (double)delta(p->descs, o->descs) /
				       (double)delta(p->busy_loops, o->busy_loops)
			     : 0;
	busy = (double)delta(p->busy_ns, o->busy_ns);
	idle = (double)delta(p->idle_ns, o->idle_ns);
	slept = (double)delta(p->sleep_ns, o->sleep_ns);
	total = busy + idle + slept;
	if (total > 0) {
		r.busy_pct = 100 * busy / total;
		r.idle_pct = 100 * idle / total;
		r.sleep_pct = 100 * slept / total;
	}
	for (unsigned k = 0; k < DP_STATS_NPATH; k++) {
		r.path_ops[k] = (double)delta(p->path_ops[k], o->path_ops[k]) / r.secs;
		r.path_bytes[k] = (double)delta(p->path_bytes[k], o->path_bytes[k]) / r.secs;
	}
	r.file_direct_ios = (double)delta(p->file_direct_ios, o->file_direct_ios) / r.secs;
	r.file_direct_bytes = (double)delta(p->file_direct_bytes, o->file_direct_bytes) / r.secs;
	r.file_buffered_ios = (double)delta(p->file_buffered_ios, o->file_buffered_ios) / r.secs;
	r.file_buffered_bytes =
		(double)delta(p->file_buffered_bytes, o->file_buffered_bytes) / r.secs;
	r.direct_pct =
		r.file_direct_bytes + r.file_buffered_bytes > 0
			? 100 * r.file_direct_bytes / (r.file_direct_bytes + r.file_buffered_bytes)
			: -1;
	return r;
}

/* ---- filtering and sorting ---- */

static bool queue_match(const struct qsnap *q)
{
	char who[64];
	const char *colon;
	size_t n;

	if (!opt.queue)
		return true;
	colon = strrchr(opt.queue, ':');
	n = colon ? (size_t)(colon - opt.queue) : strlen(opt.queue);
	if (n >= sizeof(who))
		return false;
	memcpy(who, opt.queue, n);
	who[n] = 0;
	if (colon && (colon[1] == 0 || (unsigned long)atol(colon + 1) != q->queue_id))
		return false;
	if (!*who)
		return true;
	if (!strcmp(who, q->name))
		return true;
	return strspn(who, "0123456789") == strlen(who) && atol(who) == q->pid;
}

/* A queue as the outputs show it: its snapshot and the figures derived from
 * it. */
struct histv {
	const uint64_t *hist;
	uint64_t count, sum_ns;
};

struct row {
	const struct qsnap *q;
	struct qrate r;	 /* over the interval */
	struct lat life; /* since the queue was opened */
	uint64_t in_flight;
	double age_s;
	struct histv hist; /* since the queue was opened */
};

static int row_cmp(const void *a, const void *b)
{
	const struct row *x = a, *y = b;
	double dx = 0, dy = 0;

	switch (opt.sort) {
	case SORT_SLOT:
		return (x->q->slot > y->q->slot) - (x->q->slot < y->q->slot);
	case SORT_NAME: {
		int c = strcmp(x->q->name, y->q->name);

		if (c)
			return c;
		return (x->q->queue_id > y->q->queue_id) - (x->q->queue_id < y->q->queue_id);
	}
	case SORT_OPS:
		dx = x->r.ops, dy = y->r.ops;
		break;
	case SORT_BYTES:
		dx = x->r.bytes, dy = y->r.bytes;
		break;
	case SORT_FAIL:
		dx = x->r.failed, dy = y->r.failed;
		break;
	case SORT_P99:
		dx = (double)x->r.lat.p99, dy = (double)y->r.lat.p99;
		break;
	case SORT_INFL:
		dx = (double)in_flight(x->q), dy = (double)in_flight(y->q);
		break;
	}
	if (dx != dy)
		return dx < dy ? 1 : -1; /* largest first */
	return (x->q->slot > y->q->slot) - (x->q->slot < y->q->slot);
}

static struct row *rows_of(const struct snap *s, const struct snap *prev, unsigned *n)
{
	struct row *rows = calloc(s->nq ? s->nq : 1, sizeof(*rows));

	if (!rows)
		fail(EX_FAIL, "out of memory");
	*n = 0;
	for (unsigned i = 0; i < s->nq; i++) {
		const struct qsnap *q = &s->q[i];
		struct row *w = &rows[*n];

		if (!queue_match(q))
			continue;
		w->q = q;
		w->r = queue_rate(s, prev, q);
		w->life = lat_of(q->hist, q->hist_count, q->lat_sum_ns, q->lat_max_ns);
		w->in_flight = in_flight(q);
		w->age_s = (double)delta(s->mono_ns, q->created_ns) / 1e9;
		w->hist = (struct histv){q->hist, q->hist_count, q->lat_sum_ns};
		(*n)++;
	}
	qsort(rows, *n, sizeof(*rows), row_cmp);
	return rows;
}

/* ---- one sample as the outputs show it ---- */

/* The service: figures derived from the snapshot's header and totals. */
struct sview {
	double secs; /* the interval: since the previous sample, else since start */
	double uptime_s;
	double ops, bytes, failed; /* per second over secs */
	bool first;		   /* no previous sample */
	uint64_t up;		   /* 1: the service runs */
	const char *span;	   /* what secs covers, in words */
	char server[sizeof(((struct dp_stats_header *)0)->server_name) + 1];
	char socket[sizeof(((struct dp_stats_header *)0)->socket_path) + 1];
};

struct pview {
	uint32_t index, queues;
	uint64_t retired_lat; /* samples in retired_hist */
	struct prate r;
};

/* A rail's counters per second over the service's interval. */
struct rview {
	uint32_t index;
	double posted, completed, eagain, errors, retries, bytes, reposted;
	const char *state; /* healthy, out, probing */
};

struct view {
	const struct snap *s, *prev;
	struct sview sv;
	struct row *rows; /* the queues -q selects, in --sort order */
	unsigned nrows;
	struct pview *pv;
	struct rview *rv;
	char svc[160]; /* the region name as a Prometheus label value */
};

static const char *prom_esc(char *b, size_t len, const char *s);

static void view_service(struct view *v)
{
	const struct snap *s = v->s, *prev = v->prev;
	struct sview *sv = &v->sv;

	sv->secs = (double)delta(s->mono_ns, prev ? prev->mono_ns : s->h.start_mono_ns) / 1e9;
	if (sv->secs <= 0)
		sv->secs = 1e-9;
	sv->uptime_s = (double)delta(s->mono_ns, s->h.start_mono_ns) / 1e9;
	sv->ops = (double)(delta(s->completed, prev ? prev->completed : 0) +
			   delta(s->failed, prev ? prev->failed : 0)) /
		  sv->secs;
	sv->bytes = (double)delta(s->bytes, prev ? prev->bytes : 0) / sv->secs;
	sv->failed = (double)delta(s->failed, prev ? prev->failed : 0) / sv->secs;
	sv->first = !prev;
	sv->up = 1;
	sv->span = prev ? "total" : "since start";
	snprintf(sv->server, sizeof(sv->server), "%.*s", (int)sizeof(s->h.server_name),
		 s->h.server_name);
	snprintf(sv->socket, sizeof(sv->socket), "%.*s", (int)sizeof(s->h.socket_path),
		 s->h.socket_path);
	prom_esc(v->svc, sizeof(v->svc), s->h.name);
}

static void view_make(struct view *v, const struct snap *s, const struct snap *prev)
{
	memset(v, 0, sizeof(*v));
	v->s = s;
	v->prev = prev;
	view_service(v);
	v->rows = rows_of(s, prev, &v->nrows);
	v->pv = calloc(s->np ? s->np : 1, sizeof(*v->pv));
	v->rv = calloc(s->nr ? s->nr : 1, sizeof(*v->rv));
	if (!v->pv || !v->rv)
		fail(EX_FAIL, "out of memory");
	for (unsigned i = 0; i < s->np; i++) {
		struct pview *p = &v->pv[i];

		p->index = i;
		p->queues = s->pq[i];
		for (unsigned k = 0; k < DP_STATS_HIST_BUCKETS; k++)
			p->retired_lat += s->p[i].retired_hist[k];
		p->r = poller_rate(s, prev, i);
	}
	for (unsigned i = 0; i < s->nr; i++) {
		static const struct dp_stats_rail zero;
		const struct dp_stats_rail *c = &s->r[i].c;
		const struct dp_stats_rail *o = prev && i < prev->nr ? &prev->r[i].c : &zero;
		struct rview *r = &v->rv[i];
		double secs = v->sv.secs;

		r->index = i;
		r->posted = (double)delta(c->posted, o->posted) / secs;
		r->completed = (double)delta(c->completed, o->completed) / secs;
		r->eagain = (double)delta(c->eagain, o->eagain) / secs;
		r->errors = (double)delta(c->errors, o->errors) / secs;
		r->retries = (double)delta(c->retries, o->retries) / secs;
		r->bytes = (double)delta(c->bytes, o->bytes) / secs;
		r->reposted = (double)delta(c->reposted, o->reposted) / secs;
		r->state = c->state == DP_STATS_RAIL_OUT       ? "out"
			   : c->state == DP_STATS_RAIL_PROBING ? "probing"
							       : "healthy";
	}
}

static void view_free(struct view *v)
{
	free(v->rows);
	free(v->pv);
	free(v->rv);
}

/* ---- human formatting ---- */

/* 3 significant digits with an SI suffix: 0, 12, 999, 1.23k, 45.6M. */
static const char *si(char *b, size_t len, double v)
{
	static const char units[] = " kMGTPE";
	int u = 0;

	if (v < 0)
		v = 0;
	while (v >= 999.5 && u < 6) {
		v /= 1000;
		u++;
	}
	if (!u)
		snprintf(b, len, v > 0 && v < 9.95 && v != (double)(uint64_t)v ? "%.1f" : "%.0f",
			 v);
	else
		snprintf(b, len,
			 v < 9.995   ? "%.2f%c"
			 : v < 99.95 ? "%.1f%c"
				     : "%.0f%c",
			 v, units[u]);
	return b;
}

static const char *dur(char *b, size_t len, uint64_t ns)
{
	double v = (double)ns;

	if (!ns)
		snprintf(b, len, "-");
	else if (ns < 1000)
		snprintf(b, len, "%lluns", (unsigned long long)ns);
	else if (ns < 1000000)
		snprintf(b, len, v < 9995 ? "%.2fus" : v < 99950 ? "%.1fus" : "%.0fus", v / 1e3);
	else if (ns < 1000000000)
		snprintf(b, len,
			 v < 9.995e6   ? "%.2fms"
			 : v < 99.95e6 ? "%.1fms"
				       : "%.0fms",
			 v / 1e6);
	else
		snprintf(b, len, "%.2fs", v / 1e9);
	return b;
}

static const char *uptime(char *b, size_t len, double secs)
{
	unsigned long s = (unsigned long)secs;

	if (s >= 86400)
		snprintf(b, len, "%lud%02lu:%02lu:%02lu", s / 86400, s / 3600 % 24, s / 60 % 60,
			 s % 60);
	else
		snprintf(b, len, "%lu:%02lu:%02lu", s / 3600, s / 60 % 60, s % 60);
	return b;
}

#define BOLD "\033[1m"
#define RED "\033[31m"
#define RESET "\033[0m"

static const char *c_on(const char *code)
{
	return opt.color ? code : "";
}

static const char *c_off(void)
{
	return opt.color ? RESET : "";
}

/* ---- the metrics ---- */

/*
 * Every figure ring-stat prints is one entry of metrics[] below, and the
 * three outputs walk that table: a new figure is one new entry.
 *
 * Where it lives: a scope (the service, each queue -q selects, each poller,
 * each named rail), and an offset into either the scope's snapshot (RAW:
 * struct snap, struct qsnap, struct dp_stats_poller, struct rsnap) or the
 * figures derived from it (DER: struct sview, row, pview, rview). The type
 * follows from the field. An array field is over a dimension (errno classes,
 * transfer paths, loop sizes): one value per index.
 *
 * JSON: the key, '.' opening nested objects, '*' standing for the names of
 * the dimension (a run of entries over one dimension is written name by
 * name: "paths":{"host":{"completions":..,"bytes":..},..}); an unnamed
 * dimension is an array. A scope's members come in table order.
 *
 * Prometheus: the family name; the first entry of a family with help text
 * gives # HELP and # TYPE; several entries may share one family, each with
 * its own extra label. A scope's families come in the order of their first
 * entry, sorted by porder (default 0); a family's samples come object by
 * object, then in that order.
 *
 * Table: the column's place among its scope's columns (pos), width, format
 * and header, in the default view, --wide or both. The service's "columns"
 * are the summary lines above the tables: pos is line * 10 + place, the
 * header a printf template for the value.
 */
enum scope { SC_SVC, SC_QUEUE, SC_POLLER, SC_RAIL, SC_N };
enum src { RAW, DER };
enum vtype { T_U64, T_U32, T_I32, T_DBL, T_BOOL, T_STR, T_STRP, T_HIST };
enum dim { D_NONE, D_ERR, D_PATH, D_LOOP };
enum ptype { P_NONE, P_COUNTER, P_GAUGE, P_HISTOGRAM };
enum cfmt { C_NONE, C_INT, C_GEN, C_SI, C_SIRED, C_DUR, C_F1, C_PCT, C_CPU, C_STR };
enum { V_NARROW = 1, V_WIDE = 2, V_BOTH = 3 };
enum { M_IDENT = 1 }; /* Prometheus: add the service's pid and server labels */

struct col {
	unsigned pos; /* 1..: the column's place; 0: not in the table */
	int width;
	enum cfmt fmt;
	unsigned view;	  /* V_NARROW, V_WIDE, V_BOTH */
	const char *head; /* over a dimension: a template for its upper-case names */
};

struct metric {
	enum scope scope;
	enum src src;
	enum vtype type;
	size_t off;
	enum dim dim;
	const char *json; /* NULL: not in JSON */
	int prec;	  /* decimals of a double (JSON and Prometheus) */
	const char *prom; /* family; NULL: not in Prometheus */
	enum ptype ptype;
	const char *help;
	const char *label; /* this entry's extra label in its family */
	double div;	   /* Prometheus shows value / div (ns as seconds) */
	int porder;	   /* Prometheus: a scope's families sorted by this */
	unsigned flags;
	struct col col;
};

static const struct dimdesc {
	unsigned n;
	const char *(*name)(unsigned); /* NULL: a JSON array */
	const char *label;	       /* its Prometheus label */
} dims[] = {
	[D_NONE] = {1, NULL, NULL},
	[D_ERR] = {DP_STATS_NERR, dp_stats_err_name, "errno"},
	[D_PATH] = {DP_STATS_NPATH, dp_stats_path_name, "path"},
	[D_LOOP] = {DP_STATS_LOOP_BUCKETS, NULL, NULL},
};

#define VTYPE(x)                                                                                   \
	_Generic((x), uint64_t: T_U64, uint64_t *: T_U64, uint32_t: T_U32, int32_t: T_I32,         \
		 double: T_DBL, double *: T_DBL, bool: T_BOOL, char *: T_STR, const char *: T_STRP, \
		 struct histv: T_HIST)
#define AT(sc, where, T, f)                                                                        \
	.scope = sc, .src = where, .type = VTYPE(((T *)0)->f), .off = offsetof(T, f)
#define SVC(f) AT(SC_SVC, RAW, struct snap, f)
#define SVCD(f) AT(SC_SVC, DER, struct sview, f)
#define QUE(f) AT(SC_QUEUE, RAW, struct qsnap, f)
#define QUED(f) AT(SC_QUEUE, DER, struct row, f)
#define POL(f) AT(SC_POLLER, RAW, struct dp_stats_poller, f)
#define POLD(f) AT(SC_POLLER, DER, struct pview, f)
#define RAIL(f) AT(SC_RAIL, RAW, struct rsnap, f)
#define RAILD(f) AT(SC_RAIL, DER, struct rview, f)
#define J(key) .json = key
#define JF(key, decimals) .json = key, .prec = decimals
#define COUNTER(name, text) .prom = name, .ptype = P_COUNTER, .help = text
#define GAUGE(name, text) .prom = name, .ptype = P_GAUGE, .help = text
#define HISTOGRAM(name, text) .prom = name, .ptype = P_HISTOGRAM, .help = text
#define MORE(name, lbl) .prom = name, .label = lbl /* another sample of a family */
#define COL(p, w, f, h) .col = {p, w, f, V_BOTH, h}
#define WCOL(p, w, f, h) .col = {p, w, f, V_WIDE, h}
#define LINE(l, p, f, tmpl) .col = {(l)*10 + (p), 0, f, V_BOTH, tmpl}

static const struct metric metrics[] = {
	/* The service: the top of the JSON object, its "service" and "totals". */
	{SVC(h.name), J("region")},
	{SVC(real_ns), J("time_ns")},
	{SVCD(secs), JF("interval_s", 6)},
	{SVCD(first), J("first")},
	{SVC(h.pid), J("service.pid")},
	{SVCD(server), J("service.server")},
	{SVCD(socket), J("service.socket")},
	{SVCD(up), GAUGE("dataplane_up", "1 while the service of this stats region runs."),
	 .flags = M_IDENT},
	{SVCD(uptime_s), JF("service.uptime_s", 3),
	 GAUGE("dataplane_uptime_seconds", "Seconds since the service started.")},
	{SVC(h.svc.clients), J("service.clients"),
	 GAUGE("dataplane_clients", "Clients connected now."), LINE(2, 1, C_INT, "clients %s")},
	{SVC(h.svc.clients_total), J("service.clients_total"),
	 COUNTER("dataplane_clients_connected_total", "Clients ever connected.")},
	{SVC(h.svc.queues), J("service.queues"), GAUGE("dataplane_queues", "Queue pairs open now."),
	 LINE(2, 2, C_INT, "  queues %s")},
	{SVC(h.svc.queues_total), J("service.queues_total"),
	 COUNTER("dataplane_queues_opened_total", "Queue pairs ever opened.")},
	{SVC(h.svc.queues_untracked), J("service.queues_untracked"),
	 COUNTER("dataplane_queues_untracked_total",
		 "Queue pairs opened while every stats block was taken (not shown per queue).")},
	{SVC(retired), J("service.queues_retired"), LINE(2, 6, C_INT, "  retired %s")},
	{SVC(h.svc.regions), J("service.regions"),
	 GAUGE("dataplane_regions", "Memory regions registered now."),
	 LINE(2, 3, C_INT, "  regions %s")},
	{SVC(h.svc.registered_bytes), J("service.registered_bytes"),
	 GAUGE("dataplane_registered_bytes", "Bytes of the registered regions."),
	 LINE(2, 4, C_SI, " (%sB)")},
	{SVC(h.svc.segments), J("service.segments"),
	 GAUGE("dataplane_segments", "Segments exported now."), LINE(2, 5, C_INT, "  segments %s")},
	{SVC(h.svc.sessions), J("service.sessions"),
	 GAUGE("dataplane_sessions", "Clients with an engine session (a port of their own) now."),
	 LINE(2, 7, C_INT, "  sessions %s")},
	{SVC(h.svc.session_members), J("service.session_members"),
	 GAUGE("dataplane_session_members",
	       "Registrations in this service's engine sessions now.")},
	{SVC(h.svc.session_handles), J("service.session_handles"),
	 GAUGE("dataplane_session_handles", "Handles open on engine sessions now."),
	 LINE(2, 8, C_INT, " (%s open)")},
	{SVC(h.svc.session_questions), J("service.session_questions"),
	 COUNTER("dataplane_session_questions_total",
		 "Questions asked of engine sessions' ports (a registration first touched).")},
	{SVC(h.svc.session_question_errors), J("service.session_question_errors"),
	 COUNTER("dataplane_session_question_errors_total",
		 "Those answered with an error (no such registration, session gone, ...).")},
	{SVC(h.svc.peers_known), J("service.peers_known"),
	 GAUGE("dataplane_peers_known",
	       "Other services in the fabric address vectors (opened from, or opened by).")},
	{SVCD(span), LINE(3, 1, C_STR, "%s")},
	{SVC(submitted), J("totals.submitted"),
	 COUNTER("dataplane_submitted_total",
		 "Descriptors taken from submission rings, all queues ever."),
	 LINE(3, 5, C_INT, "  submitted %s")},
	{SVC(completed), J("totals.completed"),
	 COUNTER("dataplane_completed_total",
		 "Descriptors completed with status 0, all queues ever.")},
	{SVC(failed), J("totals.failed"),
	 COUNTER("dataplane_failed_total", "Descriptors completed with an error, all queues ever."),
	 LINE(3, 6, C_INT, "  failed %s")},
	{SVC(bytes), J("totals.bytes"),
	 COUNTER("dataplane_bytes_total",
		 "Bytes moved by completed descriptors, all queues ever.")},
	{SVCD(ops), JF("totals.ops_per_s", 3), LINE(3, 2, C_SI, "  ops/s %s")},
	{SVCD(bytes), JF("totals.bytes_per_s", 3), LINE(3, 3, C_SI, "  B/s %s")},
	{SVCD(failed), JF("totals.failed_per_s", 3), LINE(3, 4, C_SIRED, "  fail/s %s")},

	/* Queues. */
	{QUE(slot), J("slot")},
	{QUE(generation), J("generation"), WCOL(3, 5, C_GEN, "GEN")},
	{QUE(name), J("client")},
	{QUE(pid), J("pid"), WCOL(1, 7, C_INT, "PID")},
	{QUE(client_id), J("client_id")},
	{QUE(queue_id), J("queue")},
	{QUE(poller), J("poller"), WCOL(2, 3, C_INT, "POL")},
	{QUE(depth), J("depth"), MORE("dataplane_queue_ring_entries", "ring=\"size\""), .porder = 2,
	 WCOL(4, 5, C_INT, "DEPTH")},
	{QUED(age_s), JF("age_s", 3)},
	{QUE(submitted), J("submitted"),
	 COUNTER("dataplane_queue_submitted_total",
		 "Descriptors the service took from the queue's submission ring."),
	 WCOL(11, 13, C_INT, "SUBMITTED")},
	{QUE(completed), J("completed"),
	 COUNTER("dataplane_queue_completed_total",
		 "Descriptors of the queue completed with status 0."),
	 WCOL(12, 13, C_INT, "COMPLETED")},
	{QUE(failed), J("failed"), WCOL(13, 9, C_INT, "FAILED")},
	{QUE(failed_by), .dim = D_ERR, J("failed_by.*"),
	 COUNTER("dataplane_queue_failed_total",
		 "Descriptors of the queue completed with an error, by errno class.")},
	{QUE(bytes), J("bytes"),
	 COUNTER("dataplane_queue_bytes_total",
		 "Bytes moved by the queue's completed descriptors.")},
	{QUED(in_flight), J("in_flight"),
	 GAUGE("dataplane_queue_in_flight",
	       "Descriptors taken from the submission ring and not yet completed."),
	 .porder = 1, COL(10, 5, C_INT, "INFL")},
	{QUE(sq_depth), J("sq_depth"),
	 GAUGE("dataplane_queue_ring_entries",
	       "Entries waiting in the queue's rings when its poller last looked (ring=sq|cq), "
	       "and the rings' size (ring=size)."),
	 .label = "ring=\"sq\"", .porder = 1, WCOL(5, 4, C_INT, "SQ")},
	{QUE(cq_depth), J("cq_depth"), MORE("dataplane_queue_ring_entries", "ring=\"cq\""),
	 .porder = 1, WCOL(6, 4, C_INT, "CQ")},
	{QUE(local_copies), J("local_copies"),
	 COUNTER("dataplane_queue_local_copies_total",
		 "Descriptors of the queue handed to the local copy engine.")},
	{QUE(doorbells), J("doorbells"),
	 COUNTER("dataplane_queue_doorbells_total",
		 "Completion doorbells rung for the queue (its client was asleep).")},
	{QUE(lat_unstamped), J("latency_unstamped")},
	{QUED(life.count), J("latency_ns.count")},
	{QUED(life.mean), J("latency_ns.mean")},
	{QUED(life.p50), J("latency_ns.p50")},
	{QUED(life.p90), J("latency_ns.p90")},
	{QUED(life.p99), J("latency_ns.p99")},
	{QUED(life.p999), J("latency_ns.p999")},
	{QUED(life.max), J("latency_ns.max")},
	{QUED(hist),
	 HISTOGRAM("dataplane_queue_latency_seconds",
		   "Submit-to-completion time of the queue's descriptors."),
	 .div = 1e9, .porder = 3},
	{QUED(r.secs), JF("rates.interval_s", 6)},
	{QUED(r.ops), JF("rates.ops_per_s", 3), COL(7, 7, C_SI, "OPS/s")},
	{QUED(r.bytes), JF("rates.bytes_per_s", 3), COL(8, 7, C_SI, "B/s")},
	{QUED(r.failed), JF("rates.failed_per_s", 3), COL(9, 6, C_SIRED, "FAIL/s")},
	{QUED(r.doorbells), JF("rates.doorbells_per_s", 3)},
	{QUED(r.lat.count), J("rates.latency_ns.count")},
	{QUED(r.lat.mean), J("rates.latency_ns.mean"), WCOL(14, 6, C_DUR, "MEAN")},
	{QUED(r.lat.p50), J("rates.latency_ns.p50"), COL(15, 6, C_DUR, "P50")},
	{QUED(r.lat.p90), J("rates.latency_ns.p90"), WCOL(16, 6, C_DUR, "P90")},
	{QUED(r.lat.p99), J("rates.latency_ns.p99"), COL(17, 6, C_DUR, "P99")},
	{QUED(r.lat.p999), J("rates.latency_ns.p999"), COL(18, 6, C_DUR, "P999")},
	{QUED(r.lat.max), J("rates.latency_ns.max"), COL(19, 6, C_DUR, "MAX")},

	/* Pollers. */
	{POLD(index), J("poller")},
	{POL(cpu), J("cpu"), COL(1, 4, C_CPU, "CPU")},
	{POLD(queues), J("queues"), COL(9, 6, C_INT, "QUEUES")},
	{POL(loops), J("loops"), COUNTER("dataplane_poller_loops_total", "Poller loops.")},
	{POL(busy_loops), J("busy_loops"),
	 COUNTER("dataplane_poller_busy_loops_total", "Poller loops that found work.")},
	{POL(sleeps), J("sleeps"),
	 COUNTER("dataplane_poller_sleeps_total", "Times the poller slept on doorbells.")},
	{POL(wakeups), J("wakeups"),
	 COUNTER("dataplane_poller_wakeups_total",
		 "Sleeps ended by a doorbell rather than a timeout.")},
	{POL(descs), J("descriptors"),
	 COUNTER("dataplane_poller_descriptors_total",
		 "Descriptors the poller took from submission rings.")},
	{POL(busy_ns), J("busy_ns"),
	 COUNTER("dataplane_poller_seconds_total",
		 "Poller time by state: busy (loops with work), idle (spinning), sleep."),
	 .label = "state=\"busy\"", .div = 1e9},
	{POL(idle_ns), J("idle_ns"), MORE("dataplane_poller_seconds_total", "state=\"idle\""),
	 .div = 1e9},
	{POL(sleep_ns), J("sleep_ns"), MORE("dataplane_poller_seconds_total", "state=\"sleep\""),
	 .div = 1e9},
	{POL(loop_hist), .dim = D_LOOP, J("loop_descriptors")},
	{POL(path_ops), .dim = D_PATH, J("paths.*.completions"),
	 COUNTER("dataplane_path_completions_total",
		 "Completions by transfer path (host and GPU local copies, fabric, file).")},
	{POL(path_bytes), .dim = D_PATH, J("paths.*.bytes"),
	 COUNTER("dataplane_path_bytes_total", "Bytes moved by transfer path.")},
	{POL(file_direct_ios), J("file.direct_ios"),
	 COUNTER("dataplane_file_ios_total",
		 "File I/O slices (io_uring reads and writes) finished, by mode: direct "
		 "(O_DIRECT) or buffered (page cache)."),
	 .label = "mode=\"direct\""},
	{POL(file_direct_bytes), J("file.direct_bytes"),
	 COUNTER("dataplane_file_bytes_total",
		 "Bytes of the finished file I/O slices, by mode: direct or buffered."),
	 .label = "mode=\"direct\""},
	{POL(file_buffered_ios), J("file.buffered_ios"),
	 MORE("dataplane_file_ios_total", "mode=\"buffered\"")},
	{POL(file_buffered_bytes), J("file.buffered_bytes"),
	 MORE("dataplane_file_bytes_total", "mode=\"buffered\"")},
	{POL(stripes_helped), J("stripes.helped"),
	 COUNTER("dataplane_poller_stripes_helped_total",
		 "Stripes of another poller's large host copy this poller copied while idle.")},
	{POL(stripe_bytes_helped), J("stripes.bytes_helped"),
	 COUNTER("dataplane_poller_stripe_bytes_helped_total",
		 "Bytes of the stripes this poller copied for another poller.")},
	{POL(parked_queues), J("parked_queues"),
	 GAUGE("dataplane_poller_parked_queues",
	       "Queues the poller no longer polls (idle; their clients ring to wake them).")},
	{POL(fabric_target_passes), J("fabric.target_passes"),
	 COUNTER("dataplane_poller_fabric_target_passes_total",
		 "Fabric progress passes of the poller peers target that served their RMA.")},
	{POL(fabric_target_late), J("fabric.target_late"),
	 COUNTER("dataplane_poller_fabric_target_late_total",
		 "Of those, passes right after a sleep its cap ended (a peer waited for a "
		 "timer).")},
	{POL(retired_queues), J("retired.queues")},
	{POL(retired_submitted), J("retired.submitted")},
	{POL(retired_completed), J("retired.completed")},
	{POL(retired_failed), J("retired.failed")},
	{POL(retired_bytes), J("retired.bytes")},
	{POLD(retired_lat), J("retired.latency_count")},
	{POLD(r.secs), JF("rates.interval_s", 6)},
	{POLD(r.loops), JF("rates.loops_per_s", 3), COL(2, 8, C_SI, "LOOPS/s")},
	{POLD(r.busy_pct), JF("rates.busy_pct", 2), COL(3, 6, C_F1, "BUSY%")},
	{POLD(r.idle_pct), JF("rates.idle_pct", 2), WCOL(4, 6, C_F1, "IDLE%")},
	{POLD(r.sleep_pct), JF("rates.sleep_pct", 2), COL(5, 6, C_F1, "SLEEP%")},
	{POLD(r.sleeps), JF("rates.sleeps_per_s", 3), COL(6, 8, C_SI, "SLEEPS/s")},
	{POLD(r.wakeups), JF("rates.wakeups_per_s", 3), COL(7, 7, C_SI, "WAKE/s")},
	{POLD(r.descs), JF("rates.descriptors_per_s", 3)},
	{POLD(r.per_loop), JF("rates.descriptors_per_busy_loop", 3), COL(8, 9, C_F1, "DESC/LOOP")},
	{POLD(r.file_direct_ios), JF("rates.file.direct_ios_per_s", 3)},
	{POLD(r.file_direct_bytes), JF("rates.file.direct_bytes_per_s", 3)},
	{POLD(r.file_buffered_ios), JF("rates.file.buffered_ios_per_s", 3)},
	{POLD(r.file_buffered_bytes), JF("rates.file.buffered_bytes_per_s", 3)},
	{POLD(r.path_ops), .dim = D_PATH, WCOL(10, 7, C_SI, "%s/s")},
	{POLD(r.direct_pct), WCOL(11, 7, C_PCT, "DIRECT%")},

	/* Rails the fabric has named. */
	{RAILD(index), J("rail")},
	{RAIL(info.provider), J("provider"), COL(1, 8, C_STR, "PROVIDER")},
	{RAIL(info.fabric), J("fabric"), COL(2, 16, C_STR, "FABRIC")},
	{RAIL(info.domain), J("domain")},
	{RAIL(c.posted), J("posted"),
	 COUNTER("dataplane_rail_posted_total", "RMA operations posted on the rail.")},
	{RAIL(c.completed), J("completed"),
	 COUNTER("dataplane_rail_completed_total", "RMA operations completed on the rail.")},
	{RAIL(c.eagain), J("eagain"),
	 COUNTER("dataplane_rail_eagain_total", "Posts the rail refused with EAGAIN.")},
	{RAIL(c.errors), J("errors"),
	 COUNTER("dataplane_rail_errors_total", "RMA completions with an error.")},
	{RAIL(c.retries), J("retries"),
	 COUNTER("dataplane_rail_retries_total", "RMA operations posted again after an error.")},
	{RAIL(c.bytes), J("bytes"),
	 COUNTER("dataplane_rail_bytes_total", "Bytes moved by the rail's completed operations.")},
	{RAIL(c.reposted), J("reposted"),
	 COUNTER("dataplane_rail_reposted_total",
		 "Slices the rail held, posted again on another rail when it was taken out.")},
	{RAIL(c.outs), J("outs"),
	 COUNTER("dataplane_rail_outs_total", "Times the rail was taken out of a peer's stripe.")},
	{RAIL(c.backs), J("backs"),
	 COUNTER("dataplane_rail_backs_total", "Times the rail answered again and went back in.")},
	{RAIL(c.probes), J("probes"),
	 COUNTER("dataplane_rail_probes_total", "Probes posted on the rail while it was out.")},
	{RAILD(state), J("state"), WCOL(9, 8, C_STR, "STATE")},
	{RAIL(c.state), GAUGE("dataplane_rail_state",
			      "0 healthy, 1 taken out, 2 out with a probe in flight (the worst "
			      "toward any peer).")},
	{RAIL(c.weight), J("weight_permille"), WCOL(10, 6, C_INT, "W/1000"),
	 GAUGE("dataplane_rail_weight_permille",
	       "The rail's share of the stripe to the peer sent to last, per mille.")},
	{RAIL(c.bw), J("throughput_bytes_per_s"),
	 GAUGE("dataplane_rail_throughput_bytes_per_second",
	       "The rail's measured throughput to the peer sent to last.")},
	{RAILD(posted), COL(3, 8, C_SI, "POSTED/s")},
	{RAILD(completed), COL(4, 7, C_SI, "DONE/s")},
	{RAILD(eagain), COL(5, 8, C_SI, "EAGAIN/s")},
	{RAILD(errors), COL(6, 6, C_SI, "ERR/s")},
	{RAILD(retries), COL(7, 7, C_SI, "RETRY/s")},
	{RAILD(reposted), WCOL(11, 8, C_SI, "REPOST/s")},
	{RAILD(bytes), COL(8, 7, C_SI, "B/s")},
};

#define NMETRICS (sizeof(metrics) / sizeof(metrics[0]))

/* The per-object scopes: their JSON array and their tables' first column. */
static const struct scopedesc {
	const char *json, *key;
	int width, wide_width;
} scopes[SC_N] = {
	[SC_QUEUE] = {"queues", "QUEUE", 16, 20},
	[SC_POLLER] = {"pollers", "POLLER", 6, 6},
	[SC_RAIL] = {"rails", "RAIL", 4, 4},
};

/* One object of a scope: where its RAW and DER figures lie. */
struct obj {
	const void *raw, *der;
};

static unsigned scope_count(const struct view *v, enum scope sc)
{
	switch (sc) {
	case SC_SVC:
		return 1;
	case SC_QUEUE:
		return v->nrows;
	case SC_POLLER:
		return v->s->np;
	default:
		return v->s->nr;
	}
}

/* Object i of scope sc; false for one the outputs skip (an unnamed rail). */
static bool scope_obj(const struct view *v, enum scope sc, unsigned i, struct obj *o)
{
	switch (sc) {
	case SC_SVC:
		*o = (struct obj){v->s, &v->sv};
		return true;
	case SC_QUEUE:
		*o = (struct obj){v->rows[i].q, &v->rows[i]};
		return true;
	case SC_POLLER:
		*o = (struct obj){&v->s->p[i], &v->pv[i]};
		return true;
	default:
		*o = (struct obj){&v->s->r[i], &v->rv[i]};
		return v->s->r[i].info.state != 0;
	}
}

struct val {
	enum vtype t;
	uint64_t u; /* T_U64, T_U32, T_BOOL */
	int64_t i;  /* T_I32 */
	double d;   /* T_DBL */
	const char *s;
	const struct histv *h;
};

/* The value of metric m of object o, at index k of its dimension. */
static struct val val_of(const struct metric *m, const struct obj *o, unsigned k)
{
	const uint8_t *p = (const uint8_t *)(m->src == RAW ? o->raw : o->der) + m->off;
	struct val v = {.t = m->type};

	switch (m->type) {
	case T_U64:
		v.u = ((const uint64_t *)p)[k];
		break;
	case T_U32:
		v.u = *(const uint32_t *)p;
		break;
	case T_I32:
		v.i = *(const int32_t *)p;
		break;
	case T_DBL:
		v.d = ((const double *)p)[k];
		break;
	case T_BOOL:
		v.u = *(const bool *)p;
		break;
	case T_STR:
		v.s = (const char *)p;
		break;
	case T_STRP:
		v.s = *(const char *const *)p;
		break;
	case T_HIST:
		v.h = (const struct histv *)p;
		break;
	}
	return v;
}

static double val_num(const struct val *v)
{
	return v->t == T_DBL ? v->d : v->t == T_I32 ? (double)v->i : (double)v->u;
}

/* ---- table ---- */

/* printf for the header lines: cut at 80 visible columns unless --wide
 * (colour escapes take no column). */
static void header_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void header_line(const char *fmt, ...)
{
	char line[1024];
	int cols = 0;
	bool esc = false;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	for (const char *p = line; *p; p++) {
		if (*p == '\033')
			esc = true;
		if (esc || opt.wide || cols < 80)
			putchar(*p);
		if (esc)
			esc = *p != 'm';
		else
			cols++;
	}
	if (opt.color)
		fputs(RESET, stdout);
	putchar('\n');
}

/* The columns of scope sc this view shows, in their order. */
static unsigned cols_of(enum scope sc, const struct metric **cols)
{
	unsigned n = 0, view = opt.wide ? V_WIDE : V_NARROW;

	for (unsigned i = 0; i < NMETRICS; i++) {
		const struct metric *m = &metrics[i];
		unsigned j = n;

		if (m->scope != sc || !m->col.pos || !(m->col.view & view))
			continue;
		for (; j > 0 && cols[j - 1]->col.pos > m->col.pos; j--)
			cols[j] = cols[j - 1];
		cols[j] = m;
		n++;
	}
	return n;
}

/* A cell's text, unpadded; *red when it wants to stand out. */
static const char *cell_text(const struct metric *m, const struct val *v, char *b, size_t len,
			     bool *red)
{
	*red = false;
	switch (m->col.fmt) {
	case C_INT:
		if (v->t == T_I32)
			snprintf(b, len, "%d", (int)v->i);
		else
			snprintf(b, len, "%llu", (unsigned long long)v->u);
		break;
	case C_GEN: /* a generation: its last 5 digits tell queues of a slot apart */
		snprintf(b, len, "%llu", (unsigned long long)(v->u % 100000));
		break;
	case C_SIRED:
		*red = val_num(v) > 0;
		/* fall through */
	case C_SI:
		si(b, len, val_num(v));
		break;
	case C_DUR:
		dur(b, len, v->u);
		break;
	case C_F1:
		snprintf(b, len, "%.1f", v->d);
		break;
	case C_PCT: /* negative: nothing to take a share of */
		snprintf(b, len, v->d < 0 ? "-" : "%.1f", v->d);
		break;
	case C_CPU: /* negative: not pinned */
		snprintf(b, len, v->i < 0 ? "-" : "%d", (int)v->i);
		break;
	default:
		snprintf(b, len, "%s", v->s);
		break;
	}
	return b;
}

static void table_cell(const struct metric *m, const struct obj *o, unsigned k)
{
	struct val v = val_of(m, o, k);
	int w = m->col.width;
	char b[64];
	bool red;

	cell_text(m, &v, b, sizeof(b), &red);
	if (m->col.fmt == C_STR)
		printf(" %-*.*s", w, w, b);
	else
		printf(" %s%*s%s", red ? c_on(RED) : "", w, b, red ? c_off() : "");
}

static void table_header(enum scope sc, const struct metric *const *cols, unsigned ncols)
{
	printf("%s%-*s", c_on(BOLD), opt.wide ? scopes[sc].wide_width : scopes[sc].width,
	       scopes[sc].key);
	for (unsigned c = 0; c < ncols; c++) {
		const struct metric *m = cols[c];
		const struct dimdesc *d = &dims[m->dim];

		for (unsigned k = 0; k < d->n; k++) {
			char name[32] = "", head[40];

			for (unsigned i = 0; d->name && d->name(k)[i] && i + 1 < sizeof(name); i++)
				name[i] = (char)toupper((unsigned char)d->name(k)[i]);
			if (d->name)
				snprintf(head, sizeof(head), m->col.head, name);
			else
				snprintf(head, sizeof(head), "%s", m->col.head);
			printf(m->col.fmt == C_STR ? " %-*s" : " %*s", m->col.width, head);
		}
	}
	printf("%s\n", c_off());
}

/* The first column: what the row is. */
static void row_key(enum scope sc, const struct obj *o, char *b, size_t len)
{
	const struct qsnap *q = o->raw;
	int w = opt.wide ? scopes[sc].wide_width : scopes[sc].width, idl;
	char id[16];

	if (sc == SC_POLLER)
		snprintf(b, len, "%u", ((const struct pview *)o->der)->index);
	else if (sc == SC_RAIL)
		snprintf(b, len, "%u", ((const struct rview *)o->der)->index);
	else {
		snprintf(b, len, "%s:%u", q->name, q->queue_id);
		if (strlen(b) > (size_t)w) {
			/* Keep the queue id: shorten the name. */
			idl = snprintf(id, sizeof(id), "~:%u", q->queue_id);
			snprintf(b, len, "%.*s%s", w - idl, q->name, id);
		}
	}
}

/* One table: a header, then a row per object of scope sc. */
static void table_scope(const struct view *v, enum scope sc)
{
	const struct metric *cols[NMETRICS];
	unsigned ncols = cols_of(sc, cols);
	int w = opt.wide ? scopes[sc].wide_width : scopes[sc].width;

	table_header(sc, cols, ncols);
	for (unsigned i = 0; i < scope_count(v, sc); i++) {
		struct obj o;
		char key[64];

		if (!scope_obj(v, sc, i, &o))
			continue;
		row_key(sc, &o, key, sizeof(key));
		printf("%-*s", w, key);
		for (unsigned c = 0; c < ncols; c++)
			for (unsigned k = 0; k < dims[cols[c]->dim].n; k++)
				table_cell(cols[c], &o, k);
		putchar('\n');
	}
}

/* The lines above the tables: who, then the service's "columns", a line
 * each ten places. */
static void table_summary(const struct view *v)
{
	const struct snap *s = v->s;
	const struct metric *cols[NMETRICS];
	unsigned n = cols_of(SC_SVC, cols);
	time_t now = (time_t)(s->real_ns / 1000000000u);
	struct obj o;
	struct tm lt;
	char tm[32], up[40], line[512], b[64], txt[96];
	size_t len = 0;
	bool red;

	localtime_r(&now, &lt);
	strftime(tm, sizeof(tm), "%H:%M:%S", &lt);
	header_line("%s%s%s  %.*s  pid %d  up %s  %s", c_on(BOLD), s->h.name, c_off(),
		    (int)sizeof(s->h.server_name), s->h.server_name, (int)s->h.pid,
		    uptime(up, sizeof(up), v->sv.uptime_s), tm);
	scope_obj(v, SC_SVC, 0, &o);
	for (unsigned c = 0; c < n; c++) {
		struct val x = val_of(cols[c], &o, 0);

		cell_text(cols[c], &x, b, sizeof(b), &red);
		snprintf(txt, sizeof(txt), "%s%s%s", red ? c_on(RED) : "", b, red ? c_off() : "");
		len += (size_t)snprintf(line + len, sizeof(line) - len, cols[c]->col.head, txt);
		if (len >= sizeof(line))
			len = sizeof(line) - 1;
		if (c + 1 == n || cols[c + 1]->col.pos / 10 != cols[c]->col.pos / 10) {
			header_line("%s", line);
			len = 0;
		}
	}
}

/* Completions and bytes per second by path, over every poller: host
 * always, the others once they have carried anything. */
static void table_paths(const struct view *v)
{
	const struct snap *s = v->s;
	double ops[DP_STATS_NPATH] = {0}, by[DP_STATS_NPATH] = {0};
	uint64_t ever[DP_STATS_NPATH] = {0}, any = 0;
	char b[2][16];

	for (unsigned i = 0; i < s->np; i++)
		for (unsigned k = 0; k < DP_STATS_NPATH; k++) {
			ops[k] += v->pv[i].r.path_ops[k];
			by[k] += v->pv[i].r.path_bytes[k];
			ever[k] += s->p[i].path_ops[k];
			any |= s->p[i].path_ops[k];
		}
	if (!any || opt.wide)
		return;
	printf("paths ");
	for (unsigned k = 0; k < DP_STATS_NPATH; k++)
		if (k == DP_STATS_PATH_HOST || ever[k])
			printf(" %s %s/s %sB/s", dp_stats_path_name(k),
			       si(b[0], sizeof(b[0]), ops[k]), si(b[1], sizeof(b[1]), by[k]));
	putchar('\n');
}

static void print_table(const struct view *v)
{
	bool any_rail = false;

	table_summary(v);
	putchar('\n');
	table_scope(v, SC_QUEUE);
	if (!v->nrows)
		printf("(no queues%s)\n", opt.queue ? " match" : "");
	putchar('\n');
	table_scope(v, SC_POLLER);
	table_paths(v);
	/* Rails, once the fabric has named them. */
	for (unsigned i = 0; i < v->s->nr; i++)
		any_rail |= v->s->r[i].info.state != 0;
	if (any_rail) {
		putchar('\n');
		table_scope(v, SC_RAIL);
	}
}

/* ---- JSON ---- */

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20 || c > 0x7e)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

/* Writes the members of one object, opening and closing the nested
 * objects their keys name. */
#define JSON_DEPTH 4
struct jw {
	char open[JSON_DEPTH][32]; /* the nested objects open now */
	int depth;
	bool more[JSON_DEPTH + 1]; /* [d]: the object at depth d has a member */
};

/* Moves to the object of key path (with '*' as name) and writes its last
 * component as a member's key. */
static void jw_key(struct jw *w, const char *path, const char *name)
{
	const char *star = strchr(path, '*');
	char key[128], *c[JSON_DEPTH + 1], *save;
	int n = 0, keep = 0;

	if (name && star)
		snprintf(key, sizeof(key), "%.*s%s%s", (int)(star - path), path, name, star + 1);
	else
		snprintf(key, sizeof(key), "%s", path);
	for (char *t = strtok_r(key, ".", &save); t && n <= JSON_DEPTH;
	     t = strtok_r(NULL, ".", &save))
		c[n++] = t;
	while (keep < w->depth && keep < n - 1 && !strcmp(w->open[keep], c[keep]))
		keep++;
	for (; w->depth > keep; w->depth--)
		putchar('}');
	for (; w->depth < n - 1; w->depth++) {
		printf("%s\"%s\":{", w->more[w->depth] ? "," : "", c[w->depth]);
		w->more[w->depth] = true;
		snprintf(w->open[w->depth], sizeof(w->open[0]), "%s", c[w->depth]);
		w->more[w->depth + 1] = false;
	}
	printf("%s\"%s\":", w->more[n - 1] ? "," : "", c[n - 1]);
	w->more[n - 1] = true;
}

static void json_val(const struct metric *m, const struct val *v)
{
	switch (v->t) {
	case T_U64:
	case T_U32:
		printf("%llu", (unsigned long long)v->u);
		break;
	case T_I32:
		printf("%d", (int)v->i);
		break;
	case T_DBL:
		printf("%.*f", m->prec, v->d);
		break;
	case T_BOOL:
		printf(v->u ? "true" : "false");
		break;
	case T_STR:
	case T_STRP:
		json_str(v->s);
		break;
	case T_HIST:
		printf("null");
		break;
	}
}

static void json_member(struct jw *w, const struct metric *m, const struct obj *o, unsigned k)
{
	const struct dimdesc *d = &dims[m->dim];

	jw_key(w, m->json, d->name ? d->name(k) : NULL);
	if (m->dim != D_NONE && !d->name) { /* an array */
		putchar('[');
		for (unsigned i = 0; i < d->n; i++) {
			struct val v = val_of(m, o, i);

			printf("%s", i ? "," : "");
			json_val(m, &v);
		}
		putchar(']');
	} else {
		struct val v = val_of(m, o, k);

		json_val(m, &v);
	}
}

/* The members of object o of scope sc; more: the object has some already. */
static void json_members(enum scope sc, const struct obj *o, bool more)
{
	struct jw w = {.more = {more}};

	for (unsigned i = 0, j; i < NMETRICS; i = j) {
		const struct metric *m = &metrics[i];

		j = i + 1;
		if (m->scope != sc || !m->json)
			continue;
		if (!dims[m->dim].name) {
			json_member(&w, m, o, 0);
			continue;
		}
		/* A run of entries over one named dimension: name by name. */
		while (j < NMETRICS && metrics[j].scope == sc && metrics[j].json &&
		       metrics[j].dim == m->dim)
			j++;
		for (unsigned k = 0; k < dims[m->dim].n; k++)
			for (unsigned e = i; e < j; e++)
				json_member(&w, &metrics[e], o, k);
	}
	for (; w.depth > 0; w.depth--)
		putchar('}');
}

static void print_json(const struct view *v)
{
	struct obj o;

	printf("{\"version\":1");
	scope_obj(v, SC_SVC, 0, &o);
	json_members(SC_SVC, &o, true);
	for (enum scope sc = SC_QUEUE; sc < SC_N; sc++) {
		printf(",\"%s\":[", scopes[sc].json);
		for (unsigned i = 0, n = 0; i < scope_count(v, sc); i++) {
			if (!scope_obj(v, sc, i, &o))
				continue;
			printf("%s{", n++ ? "," : "");
			json_members(sc, &o, false);
			putchar('}');
		}
		putchar(']');
	}
	printf("}\n");
}

/* ---- Prometheus text exposition format ---- */

/* A label value: backslash, double quote and newline escaped. */
static const char *prom_esc(char *b, size_t len, const char *s)
{
	size_t o = 0;

	for (; *s && o + 3 < len; s++) {
		if (*s == '\\' || *s == '"') {
			b[o++] = '\\';
			b[o++] = *s;
		} else if (*s == '\n') {
			b[o++] = '\\';
			b[o++] = 'n';
		} else
			b[o++] = *s;
	}
	b[o] = 0;
	return b;
}

/* The labels every sample of object o carries. */
static void prom_labels(const struct view *v, enum scope sc, const struct obj *o, char *b,
			size_t len)
{
	const struct qsnap *q = o->raw;
	const struct rsnap *r = o->raw;
	char x[80], y[160];

	switch (sc) {
	case SC_SVC:
		snprintf(b, len, "service=\"%s\"", v->svc);
		break;
	case SC_QUEUE:
		snprintf(b, len, "service=\"%s\",client=\"%s\",pid=\"%d\",queue=\"%u\"", v->svc,
			 prom_esc(x, sizeof(x), q->name), (int)q->pid, q->queue_id);
		break;
	case SC_POLLER:
		snprintf(b, len, "service=\"%s\",poller=\"%u\"", v->svc,
			 ((const struct pview *)o->der)->index);
		break;
	default:
		snprintf(b, len, "service=\"%s\",rail=\"%u\",provider=\"%s\",fabric=\"%s\"", v->svc,
			 ((const struct rview *)o->der)->index,
			 prom_esc(x, sizeof(x), r->info.provider),
			 prom_esc(y, sizeof(y), r->info.fabric));
		break;
	}
}

/* Powers of two (bucket edges of the histogram) from 256 ns to 2^30 ns. */
static void prom_hist(const struct metric *m, const char *l, const struct histv *h)
{
	uint64_t cum = 0;
	unsigned b = 0;

	for (unsigned e = 8; e <= 30; e++) {
		while (b < DP_STATS_HIST_BUCKETS && dp_stats_hist_high(b) <= (1ull << e))
			cum += h->hist[b++];
		printf("%s_bucket{%s,le=\"%.9g\"} %llu\n", m->prom, l, (double)(1ull << e) / m->div,
		       (unsigned long long)cum);
	}
	printf("%s_bucket{%s,le=\"+Inf\"} %llu\n", m->prom, l, (unsigned long long)h->count);
	printf("%s_sum{%s} %.9g\n", m->prom, l, (double)h->sum_ns / m->div);
	printf("%s_count{%s} %llu\n", m->prom, l, (unsigned long long)h->count);
}

static void prom_samples(const struct view *v, const struct metric *m, const struct obj *o,
			 const char *l)
{
	const struct dimdesc *d = &dims[m->dim];
	char name[80];

	if (m->type == T_HIST) {
		prom_hist(m, l, val_of(m, o, 0).h);
		return;
	}
	for (unsigned k = 0; k < d->n; k++) {
		struct val x = val_of(m, o, k);

		printf("%s{%s", m->prom, l);
		if (m->flags & M_IDENT)
			printf(",pid=\"%d\",server=\"%s\"", (int)v->s->h.pid,
			       prom_esc(name, sizeof(name), v->s->h.server_name));
		if (m->label)
			printf(",%s", m->label);
		if (d->label)
			printf(",%s=\"%s\"", d->label, d->name(k));
		if (m->div)
			printf("} %.9g\n", val_num(&x) / m->div);
		else if (x.t == T_DBL)
			printf("} %.*f\n", m->prec, x.d);
		else
			printf("} %llu\n", (unsigned long long)x.u);
	}
}

/* One family: its entries fam[0..n-1], # HELP and # TYPE once, then the
 * samples object by object. */
static void prom_family(const struct view *v, enum scope sc, const struct metric *const *fam,
			unsigned n)
{
	static const char *const types[] = {"untyped", "counter", "gauge", "histogram"};
	const struct metric *head = fam[0];

	for (unsigned e = 0; e < n && !head->help; e++)
		head = fam[e];
	printf("# HELP %s %s\n# TYPE %s %s\n", head->prom, head->help, head->prom,
	       types[head->ptype]);
	for (unsigned i = 0; i < scope_count(v, sc); i++) {
		char l[512];
		struct obj o;

		if (!scope_obj(v, sc, i, &o))
			continue;
		prom_labels(v, sc, &o, l, sizeof(l));
		for (unsigned e = 0; e < n; e++)
			prom_samples(v, fam[e], &o, l);
	}
}

static void prom_scope(const struct view *v, enum scope sc)
{
	const struct metric *ms[NMETRICS], *fam[NMETRICS];
	unsigned n = 0;

	/* The scope's entries by porder, table order within. */
	for (unsigned i = 0; i < NMETRICS; i++) {
		const struct metric *m = &metrics[i];
		unsigned j = n;

		if (m->scope != sc || !m->prom)
			continue;
		for (; j > 0 && ms[j - 1]->porder > m->porder; j--)
			ms[j] = ms[j - 1];
		ms[j] = m;
		n++;
	}
	/* A family where its first entry stands. */
	for (unsigned i = 0; i < n; i++) {
		unsigned nf = 0;
		bool seen = false;

		for (unsigned j = 0; j < i && !seen; j++)
			seen = !strcmp(ms[j]->prom, ms[i]->prom);
		if (seen)
			continue;
		for (unsigned j = i; j < n; j++)
			if (!strcmp(ms[j]->prom, ms[i]->prom))
				fam[nf++] = ms[j];
		prom_family(v, sc, fam, nf);
	}
}

static void print_prom(const struct view *v)
{
	for (enum scope sc = SC_SVC; sc < SC_N; sc++)
		prom_scope(v, sc);
}

/* ---- main ---- */

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

/* ---- the command line ---- */

static const char *color_when = "auto"; /* --color */

static void set_watch(const char *a)
{
	char *end;

	opt.interval = strtod(a, &end);
	if (*end || !(opt.interval > 0) || opt.interval > 86400)
		fail(EX_USAGE, "-w %s: want seconds, e.g. 1 or 0.5", a);
}

static void set_count(const char *a)
{
	char *end;

	opt.count = strtol(a, &end, 10);
	if (*end || opt.count < 1)
		fail(EX_USAGE, "-c %s: want a count >= 1", a);
}

static void set_sort(const char *a)
{
	static const char *const sorts[] = {"slot", "ops",	"bytes", "fail",
					    "p99",  "inflight", "name"};
	unsigned k;

	for (k = 0; k < sizeof(sorts) / sizeof(sorts[0]); k++)
		if (!strcmp(a, sorts[k]))
			break;
	if (k == sizeof(sorts) / sizeof(sorts[0]))
		fail(EX_USAGE, "--sort %s: want slot, ops, bytes, fail, p99, inflight or name", a);
	opt.sort = (enum sort_key)k;
}

static void set_json(const char *a)
{
	(void)a;
	opt.out = OUT_JSON;
}

static void set_prom(const char *a)
{
	(void)a;
	opt.out = OUT_PROM;
}

static void set_color(const char *a)
{
	if (strcmp(a, "auto") && strcmp(a, "always") && strcmp(a, "never"))
		fail(EX_USAGE, "--color %s: want auto, always or never", a);
	color_when = a;
}

static const struct dp_tool_flag flags[] = {
	{.name = "stats",
	 .arg = "NAME",
	 .str = &opt.name,
	 .help = "read stats region NAME (/dev/shm/NAME)"},
	{.name = "socket",
	 .arg = "PATH",
	 .str = &opt.socket,
	 .help = "read the region of the service on control socket PATH,\n"
		 "whatever its --stats name (default: $DP_SOCKET's, else\n"
		 "the only running service's)"},
	{.name = "list",
	 .letter = 'l',
	 .on = &opt.list,
	 .help = "list the stats regions in /dev/shm and their state"},
	{.name = "watch",
	 .letter = 'w',
	 .arg = "SECS",
	 .fn = set_watch,
	 .help = "refresh every SECS seconds, showing rates over the interval"},
	{.name = "count",
	 .letter = 'c',
	 .arg = "N",
	 .fn = set_count,
	 .help = "stop after N samples (default 1, or unlimited with -w;\n"
		 "without -w, 1 s apart)"},
	{.name = "queue",
	 .letter = 'q',
	 .arg = "Q",
	 .str = &opt.queue,
	 .help = "only queues of client Q (a name or pid), or Q:ID for one queue"},
	{.name = "sort",
	 .arg = "KEY",
	 .fn = set_sort,
	 .help = "slot (default), ops, bytes, fail, p99, inflight, name"},
	{.name = "json",
	 .fn = set_json,
	 .help = "one JSON object per sample (fields: docs/ring-stat.md)"},
	{.name = "prometheus",
	 .fn = set_prom,
	 .help = "Prometheus text exposition format, one sample (no -w)"},
	{.name = "wide", .on = &opt.wide, .help = "every column (the default fits 80 columns)"},
	{.name = "color",
	 .arg = "WHEN",
	 .fn = set_color,
	 .help = "auto (default: on a terminal), always, never"},
	DP_TOOL_FLAG_HELP,
	DP_TOOL_FLAG_VERSION,
	{0},
};

static const struct dp_tool_cli cli = {
	.prog = "ring-stat",
	.head = "usage: ring-stat [options]\n",
	.tail = "Exit codes: 0 ok, 1 error, 2 usage, 3 no service running, 4 not a stats region\n"
		"or another ABI version, 5 truncated or corrupt region.\n",
	.col = 20,
	.flags = flags,
};

/* Parses the command line into opt; exits on --help, --version and bad
 * usage. */
static void parse_options(int argc, char **argv)
{
	int first = dp_tool_parse(&cli, argc, argv);

	if (first < argc)
		fail(EX_USAGE, "unexpected argument '%s' (try --help)", argv[first]);
	if (opt.name && opt.socket)
		fail(EX_USAGE, "--stats and --socket both name a service; give one");
	/* One exposition is one scrape: repeated ones in one stream are no
	 * valid exposition (docs/ring-stat.md). */
	if (opt.out == OUT_PROM && (opt.interval || opt.count > 1))
		fail(EX_USAGE, "--prometheus takes no -w or -c: it writes one exposition (a "
			       "scrape); run it once per scrape (try --help)");
	/* -c N alone: N reports, a second apart. */
	if (opt.count > 1 && !opt.interval)
		opt.interval = 1;
	if (!strcmp(color_when, "always"))
		opt.color = true;
	else if (!strcmp(color_when, "auto"))
		opt.color = opt.out == OUT_TABLE && isatty(STDOUT_FILENO) && !getenv("NO_COLOR") &&
			    (!getenv("TERM") || strcmp(getenv("TERM"), "dumb"));
}

static void print_sample(const struct snap *cur, const struct snap *prev)
{
	struct view v;

	view_make(&v, cur, prev);
	if (opt.out == OUT_JSON)
		print_json(&v);
	else if (opt.out == OUT_PROM)
		print_prom(&v);
	else
		print_table(&v);
	view_free(&v);
}

/* Samples region r (named name) until -c or a signal says stop. */
static void sample_loop(struct region *r, const char *name)
{
	char err[512];
	struct snap cur, prev;
	bool have_prev = false;
	long samples = 0;
	int rc;

	for (;;) {
		rc = snap_take(r, &cur);
		if (rc)
			fail(rc, "stats region '%s' was truncated while being read", name);
		if (samples && opt.out == OUT_TABLE)
			putchar('\n');
		print_sample(&cur, have_prev ? &prev : NULL);
		fflush(stdout);
		if (have_prev)
			snap_free(&prev);
		prev = cur;
		have_prev = true;
		samples++;
		if (!opt.interval || (opt.count && samples >= opt.count))
			break;
		{
			uint64_t ns = (uint64_t)(opt.interval * 1e9);
			struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};

			while (!stop && nanosleep(&ts, &ts) < 0 && errno == EINTR)
				;
		}
		if (stop)
			break;
		/* The service may have stopped, or restarted under the same
		 * name (a new region): follow it, or say so. */
		if (__atomic_load_n(&r->h->state, __ATOMIC_ACQUIRE) != DP_STATS_RUNNING ||
		    !dp_stats_service_alive(r->h->pid)) {
			region_close(r);
			rc = region_open(name, r, err, sizeof(err));
			if (rc)
				fail(rc, "%s", err);
			snap_free(&prev);
			have_prev = false;
		}
	}
	if (have_prev)
		snap_free(&prev);
}

int main(int argc, char **argv)
{
	char name[DP_STATS_NAME_MAX], err[512];
	struct region r;
	int rc;

	parse_options(argc, argv);
	if (opt.list)
		return list_regions(true) ? EX_OK : EX_NOSERVICE;

	if (opt.name)
		snprintf(name, sizeof(name), "%s", opt.name);
	else if (opt.socket)
		socket_region(opt.socket, name, sizeof(name));
	else
		pick_region(name, sizeof(name));
	signal(SIGBUS, on_sigbus);
	rc = region_open(name, &r, err, sizeof(err));
	if (rc)
		fail(rc, "%s", err);
	if (opt.interval) {
		signal(SIGINT, on_stop);
		signal(SIGTERM, on_stop);
	}
	setvbuf(stdout, NULL, _IOFBF, 1 << 16);
	sample_loop(&r, name);
	region_close(&r);
	return EX_OK;
}
