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
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
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

#include "dp_stats.h"
#include "dp_version.h"

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

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
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

/*
 * Opens and checks a region. Returns EX_OK, or an exit code with a message
 * for people in err.
 */
static int region_open(const char *name, struct region *r, char *err, size_t errlen)
{
	const struct dp_stats_header *h;
	struct stat st;
	uint32_t magic;
	void *map;
	int fd;

	memset(r, 0, sizeof(*r));
	snprintf(r->name, sizeof(r->name), "%s", name);
	if (!name_ok(name)) {
		snprintf(err, errlen, "'%s' is not a region name (1..63 bytes, no '/')", name);
		return EX_USAGE;
	}
	fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
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
	h = r->h = map;
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
	if (h->header_size != sizeof(struct dp_stats_header) ||
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
	    h->pollers_off % 8 || h->rail_info_off % 8 || h->rails_off % 8 || h->queues_off % 8 ||
	    h->poller_size % 8 || h->rail_info_size % 8) {
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
	const char *env = getenv("DP_SOCKET"), *xdg = getenv("XDG_RUNTIME_DIR");
	struct region r;
	DIR *d;
	struct dirent *e;
	int running = 0;

	if (env && *env)
		snprintf(path, sizeof(path), "%s", env);
	else if (xdg && *xdg)
		snprintf(path, sizeof(path), "%s/dataplane/dataplane.sock", xdg);
	else
		snprintf(path, sizeof(path), "/run/dataplane/dataplane.sock");
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

/* Takes a snapshot; EX_OK, or EX_TRUNC when the file shrank under us. */
static int snap_take(const struct region *r, struct snap *s)
{
	const struct dp_stats_header *h = r->h;
	uint32_t seq0[4096], seq1;

	memset(s, 0, sizeof(*s));
	s->np = h->npollers;
	s->nr = h->nrails;
	s->p = calloc(s->np ? s->np : 1, sizeof(*s->p));
	s->pq = calloc(s->np ? s->np : 1, sizeof(*s->pq));
	s->r = calloc(s->nr ? s->nr : 1, sizeof(*s->r));
	s->q = NULL;
	if (!s->p || !s->pq || !s->r)
		fail(EX_FAIL, "out of memory");
	if (sigsetjmp(bus_jmp, 1)) {
		bus_armed = 0;
		snap_free(s);
		return EX_TRUNC;
	}
	bus_armed = 1;
	for (int attempt = 0;; attempt++) {
		bool stable = true;
		unsigned cap = 0;

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
		s->mono_ns = mono_ns();
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
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		for (unsigned i = 0; i < s->np; i++) {
			seq1 = __atomic_load_n(&poller_at(r, i)->retire_seq, __ATOMIC_RELAXED);
			if (seq1 != seq0[i])
				stable = false;
		}
		if (stable || attempt >= 1000)
			break;
	}
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
		}
	}
	bus_armed = 0;
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

struct row {
	const struct qsnap *q;
	struct qrate r;
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
		if (!queue_match(&s->q[i]))
			continue;
		rows[*n].q = &s->q[i];
		rows[*n].r = queue_rate(s, prev, &s->q[i]);
		(*n)++;
	}
	qsort(rows, *n, sizeof(*rows), row_cmp);
	return rows;
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

static void print_table(const struct snap *s, const struct snap *prev)
{
	char b[16][40], tm[32];
	time_t now = (time_t)(s->real_ns / 1000000000u);
	struct tm lt;
	unsigned nrows;
	struct row *rows = rows_of(s, prev, &nrows);
	double secs = (double)delta(s->mono_ns, prev ? prev->mono_ns : s->h.start_mono_ns) / 1e9;
	bool any_path = false, any_rail = false;

	localtime_r(&now, &lt);
	strftime(tm, sizeof(tm), "%H:%M:%S", &lt);
	if (secs <= 0)
		secs = 1e-9;
	header_line("%s%s%s  %.*s  pid %d  up %s  %s", c_on(BOLD), s->h.name, c_off(),
		    (int)sizeof(s->h.server_name), s->h.server_name, (int)s->h.pid,
		    uptime(b[0], sizeof(b[0]), (double)delta(s->mono_ns, s->h.start_mono_ns) / 1e9),
		    tm);
	header_line("clients %llu  queues %llu  regions %llu (%sB)  segments %llu  retired %llu",
		    (unsigned long long)s->h.svc.clients, (unsigned long long)s->h.svc.queues,
		    (unsigned long long)s->h.svc.regions,
		    si(b[0], sizeof(b[0]), (double)s->h.svc.registered_bytes),
		    (unsigned long long)s->h.svc.segments, (unsigned long long)s->retired);
	{
		double ops = (double)(delta(s->completed, prev ? prev->completed : 0) +
				      delta(s->failed, prev ? prev->failed : 0)) /
			     secs;
		double by = (double)delta(s->bytes, prev ? prev->bytes : 0) / secs;
		double fl = (double)delta(s->failed, prev ? prev->failed : 0) / secs;

		header_line("%s  ops/s %s  B/s %s  fail/s %s%s%s  submitted %llu  failed %llu",
			    prev ? "total" : "since start", si(b[0], sizeof(b[0]), ops),
			    si(b[1], sizeof(b[1]), by), fl > 0 ? c_on(RED) : "",
			    si(b[2], sizeof(b[2]), fl), fl > 0 ? c_off() : "",
			    (unsigned long long)s->submitted, (unsigned long long)s->failed);
	}
	putchar('\n');

	/* Queues. */
	if (opt.wide)
		printf("%s%-20s %7s %3s %5s %5s %4s %4s %7s %7s %6s %5s %13s %13s %9s %6s %6s %6s "
		       "%6s "
		       "%6s %6s%s\n",
		       c_on(BOLD), "QUEUE", "PID", "POL", "GEN", "DEPTH", "SQ", "CQ", "OPS/s",
		       "B/s", "FAIL/s", "INFL", "SUBMITTED", "COMPLETED", "FAILED", "MEAN", "P50",
		       "P90", "P99", "P999", "MAX", c_off());
	else
		printf("%s%-16s %7s %7s %6s %5s %6s %6s %6s %6s%s\n", c_on(BOLD), "QUEUE", "OPS/s",
		       "B/s", "FAIL/s", "INFL", "P50", "P99", "P999", "MAX", c_off());
	for (unsigned i = 0; i < nrows; i++) {
		const struct qsnap *q = rows[i].q;
		const struct qrate *r = &rows[i].r;
		char label[64], fails[16];
		bool red = r->failed > 0;

		snprintf(label, sizeof(label), "%s:%u", q->name, q->queue_id);
		if (strlen(label) > (opt.wide ? 20u : 16u)) {
			/* Keep the queue id: shorten the name. */
			char id[16];
			int w = opt.wide ? 20 : 16,
			    idl = snprintf(id, sizeof(id), "~:%u", q->queue_id);

			snprintf(label, sizeof(label), "%.*s%s", w - idl, q->name, id);
		}
		snprintf(fails, sizeof(fails), "%6s", si(b[2], sizeof(b[2]), r->failed));
		if (opt.wide)
			printf("%-20s %7d %3u %5llu %5u %4u %4u %7s %7s %s%s%s %5llu %13llu %13llu "
			       "%9llu "
			       "%6s %6s %6s %6s %6s %6s\n",
			       label, (int)q->pid, q->poller,
			       (unsigned long long)(q->generation % 100000), q->depth, q->sq_depth,
			       q->cq_depth, si(b[0], sizeof(b[0]), r->ops),
			       si(b[1], sizeof(b[1]), r->bytes), red ? c_on(RED) : "", fails,
			       red ? c_off() : "", (unsigned long long)in_flight(q),
			       (unsigned long long)q->submitted, (unsigned long long)q->completed,
			       (unsigned long long)q->failed, dur(b[3], sizeof(b[3]), r->lat.mean),
			       dur(b[4], sizeof(b[4]), r->lat.p50),
			       dur(b[5], sizeof(b[5]), r->lat.p90),
			       dur(b[6], sizeof(b[6]), r->lat.p99),
			       dur(b[7], sizeof(b[7]), r->lat.p999),
			       dur(b[8], sizeof(b[8]), r->lat.max));
		else
			printf("%-16s %7s %7s %s%s%s %5llu %6s %6s %6s %6s\n", label,
			       si(b[0], sizeof(b[0]), r->ops), si(b[1], sizeof(b[1]), r->bytes),
			       red ? c_on(RED) : "", fails, red ? c_off() : "",
			       (unsigned long long)in_flight(q),
			       dur(b[4], sizeof(b[4]), r->lat.p50),
			       dur(b[6], sizeof(b[6]), r->lat.p99),
			       dur(b[7], sizeof(b[7]), r->lat.p999),
			       dur(b[8], sizeof(b[8]), r->lat.max));
	}
	if (!nrows)
		printf("(no queues%s)\n", opt.queue ? " match" : "");
	free(rows);
	putchar('\n');

	/* Pollers. */
	if (opt.wide)
		printf("%s%-6s %4s %8s %6s %6s %6s %8s %7s %9s %6s %7s %7s %7s %7s %7s%s\n",
		       c_on(BOLD), "POLLER", "CPU", "LOOPS/s", "BUSY%", "IDLE%", "SLEEP%",
		       "SLEEPS/s", "WAKE/s", "DESC/LOOP", "QUEUES", "HOST/s", "GPU/s", "FABRIC/s",
		       "FILE/s", "DIRECT%", c_off());
	else
		printf("%s%-6s %4s %8s %6s %6s %8s %7s %9s %6s%s\n", c_on(BOLD), "POLLER", "CPU",
		       "LOOPS/s", "BUSY%", "SLEEP%", "SLEEPS/s", "WAKE/s", "DESC/LOOP", "QUEUES",
		       c_off());
	for (unsigned i = 0; i < s->np; i++) {
		struct prate r = poller_rate(s, prev, i);
		char cpu[16], dpct[16];

		if (s->p[i].cpu >= 0)
			snprintf(cpu, sizeof(cpu), "%d", s->p[i].cpu);
		else
			snprintf(cpu, sizeof(cpu), "-");
		for (unsigned k = 0; k < DP_STATS_NPATH; k++)
			any_path |= s->p[i].path_ops[k] != 0;
		if (r.direct_pct < 0)
			snprintf(dpct, sizeof(dpct), "-");
		else
			snprintf(dpct, sizeof(dpct), "%.1f", r.direct_pct);
		if (opt.wide)
			printf("%-6u %4s %8s %6.1f %6.1f %6.1f %8s %7s %9.1f %6u %7s %7s %7s %7s "
			       "%7s\n",
			       i, cpu, si(b[0], sizeof(b[0]), r.loops), r.busy_pct, r.idle_pct,
			       r.sleep_pct, si(b[1], sizeof(b[1]), r.sleeps),
			       si(b[2], sizeof(b[2]), r.wakeups), r.per_loop, s->pq[i],
			       si(b[3], sizeof(b[3]), r.path_ops[DP_STATS_PATH_HOST]),
			       si(b[4], sizeof(b[4]), r.path_ops[DP_STATS_PATH_GPU]),
			       si(b[5], sizeof(b[5]), r.path_ops[DP_STATS_PATH_FABRIC]),
			       si(b[6], sizeof(b[6]), r.path_ops[DP_STATS_PATH_FILE]), dpct);
		else
			printf("%-6u %4s %8s %6.1f %6.1f %8s %7s %9.1f %6u\n", i, cpu,
			       si(b[0], sizeof(b[0]), r.loops), r.busy_pct, r.sleep_pct,
			       si(b[1], sizeof(b[1]), r.sleeps), si(b[2], sizeof(b[2]), r.wakeups),
			       r.per_loop, s->pq[i]);
	}
	/* Paths: local copies (host, GPU) beside the fabric and files. */
	if (any_path && !opt.wide) {
		double ops[DP_STATS_NPATH] = {0}, by[DP_STATS_NPATH] = {0};

		for (unsigned i = 0; i < s->np; i++) {
			struct prate r = poller_rate(s, prev, i);

			for (unsigned k = 0; k < DP_STATS_NPATH; k++) {
				ops[k] += r.path_ops[k];
				by[k] += r.path_bytes[k];
			}
		}
		printf("paths ");
		/* Host always; the others once they have carried anything. */
		for (unsigned k = 0; k < DP_STATS_NPATH; k++) {
			uint64_t ever = 0;

			for (unsigned i = 0; i < s->np; i++)
				ever += s->p[i].path_ops[k];
			if (k == DP_STATS_PATH_HOST || ever)
				printf(" %s %s/s %sB/s", dp_stats_path_name(k),
				       si(b[0], sizeof(b[0]), ops[k]),
				       si(b[1], sizeof(b[1]), by[k]));
		}
		putchar('\n');
	}
	/* Rails, once the fabric has named them. */
	for (unsigned i = 0; i < s->nr; i++)
		any_rail |= s->r[i].info.state != 0;
	if (any_rail) {
		putchar('\n');
		printf("%s%-4s %-8s %-16s %8s %7s %8s %6s %7s %7s%s\n", c_on(BOLD), "RAIL",
		       "PROVIDER", "FABRIC", "POSTED/s", "DONE/s", "EAGAIN/s", "ERR/s", "RETRY/s",
		       "B/s", c_off());
		for (unsigned i = 0; i < s->nr; i++) {
			const struct rsnap *r = &s->r[i];
			const struct rsnap *o = prev && i < prev->nr ? &prev->r[i] : NULL;
			struct dp_stats_rail z = {0};
			const struct dp_stats_rail *oc = o ? &o->c : &z;

			if (!r->info.state)
				continue;
			printf("%-4u %-8.8s %-16.16s %8s %7s %8s %6s %7s %7s\n", i,
			       r->info.provider, r->info.fabric,
			       si(b[0], sizeof(b[0]),
				  (double)delta(r->c.posted, oc->posted) / secs),
			       si(b[1], sizeof(b[1]),
				  (double)delta(r->c.completed, oc->completed) / secs),
			       si(b[2], sizeof(b[2]),
				  (double)delta(r->c.eagain, oc->eagain) / secs),
			       si(b[3], sizeof(b[3]),
				  (double)delta(r->c.errors, oc->errors) / secs),
			       si(b[4], sizeof(b[4]),
				  (double)delta(r->c.retries, oc->retries) / secs),
			       si(b[5], sizeof(b[5]), (double)delta(r->c.bytes, oc->bytes) / secs));
		}
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

static void json_lat(const char *key, const struct lat *l)
{
	printf("\"%s\":{\"count\":%llu,\"mean\":%llu,\"p50\":%llu,\"p90\":%llu,\"p99\":%llu,"
	       "\"p999\":%llu,\"max\":%llu}",
	       key, (unsigned long long)l->count, (unsigned long long)l->mean,
	       (unsigned long long)l->p50, (unsigned long long)l->p90, (unsigned long long)l->p99,
	       (unsigned long long)l->p999, (unsigned long long)l->max);
}

static void print_json(const struct snap *s, const struct snap *prev)
{
	unsigned nrows;
	struct row *rows = rows_of(s, prev, &nrows);
	const struct dp_stats_service *v = &s->h.svc;
	char server[sizeof(s->h.server_name) + 1], sock[sizeof(s->h.socket_path) + 1];
	double secs = (double)delta(s->mono_ns, prev ? prev->mono_ns : s->h.start_mono_ns) / 1e9;

	if (secs <= 0)
		secs = 1e-9;
	snprintf(server, sizeof(server), "%.*s", (int)sizeof(s->h.server_name), s->h.server_name);
	snprintf(sock, sizeof(sock), "%.*s", (int)sizeof(s->h.socket_path), s->h.socket_path);
	printf("{\"version\":1,\"region\":");
	json_str(s->h.name);
	printf(",\"time_ns\":%llu,\"interval_s\":%.6f,\"first\":%s,",
	       (unsigned long long)s->real_ns, secs, prev ? "false" : "true");
	printf("\"service\":{\"pid\":%d,\"server\":", (int)s->h.pid);
	json_str(server);
	printf(",\"socket\":");
	json_str(sock);
	printf(",\"uptime_s\":%.3f,\"clients\":%llu,\"clients_total\":%llu,\"queues\":%llu,"
	       "\"queues_total\":%llu,\"queues_untracked\":%llu,\"queues_retired\":%llu,"
	       "\"regions\":%llu,\"registered_bytes\":%llu,\"segments\":%llu},",
	       (double)delta(s->mono_ns, s->h.start_mono_ns) / 1e9, (unsigned long long)v->clients,
	       (unsigned long long)v->clients_total, (unsigned long long)v->queues,
	       (unsigned long long)v->queues_total, (unsigned long long)v->queues_untracked,
	       (unsigned long long)s->retired, (unsigned long long)v->regions,
	       (unsigned long long)v->registered_bytes, (unsigned long long)v->segments);
	printf("\"totals\":{\"submitted\":%llu,\"completed\":%llu,\"failed\":%llu,\"bytes\":%llu,"
	       "\"ops_per_s\":%.3f,\"bytes_per_s\":%.3f,\"failed_per_s\":%.3f},",
	       (unsigned long long)s->submitted, (unsigned long long)s->completed,
	       (unsigned long long)s->failed, (unsigned long long)s->bytes,
	       (double)(delta(s->completed, prev ? prev->completed : 0) +
			delta(s->failed, prev ? prev->failed : 0)) /
		       secs,
	       (double)delta(s->bytes, prev ? prev->bytes : 0) / secs,
	       (double)delta(s->failed, prev ? prev->failed : 0) / secs);
	printf("\"queues\":[");
	for (unsigned i = 0; i < nrows; i++) {
		const struct qsnap *q = rows[i].q;
		const struct qrate *r = &rows[i].r;
		struct lat l = lat_of(q->hist, q->hist_count, q->lat_sum_ns, q->lat_max_ns);

		printf("%s{\"slot\":%u,\"generation\":%llu,\"client\":", i ? "," : "", q->slot,
		       (unsigned long long)q->generation);
		json_str(q->name);
		printf(",\"pid\":%d,\"client_id\":%u,\"queue\":%u,\"poller\":%u,\"depth\":%u,"
		       "\"age_s\":%.3f,\"submitted\":%llu,\"completed\":%llu,\"failed\":%llu,"
		       "\"failed_by\":{",
		       (int)q->pid, q->client_id, q->queue_id, q->poller, q->depth,
		       (double)delta(s->mono_ns, q->created_ns) / 1e9,
		       (unsigned long long)q->submitted, (unsigned long long)q->completed,
		       (unsigned long long)q->failed);
		for (unsigned k = 0; k < DP_STATS_NERR; k++)
			printf("%s\"%s\":%llu", k ? "," : "", dp_stats_err_name(k),
			       (unsigned long long)q->failed_by[k]);
		printf("},\"bytes\":%llu,\"in_flight\":%llu,\"sq_depth\":%u,\"cq_depth\":%u,"
		       "\"local_copies\":%llu,\"doorbells\":%llu,\"latency_unstamped\":%llu,",
		       (unsigned long long)q->bytes, (unsigned long long)in_flight(q), q->sq_depth,
		       q->cq_depth, (unsigned long long)q->local_copies,
		       (unsigned long long)q->doorbells, (unsigned long long)q->lat_unstamped);
		json_lat("latency_ns", &l);
		printf(",\"rates\":{\"interval_s\":%.6f,\"ops_per_s\":%.3f,\"bytes_per_s\":%.3f,"
		       "\"failed_per_s\":%.3f,\"doorbells_per_s\":%.3f,",
		       r->secs, r->ops, r->bytes, r->failed, r->doorbells);
		json_lat("latency_ns", &r->lat);
		printf("}}");
	}
	printf("],\"pollers\":[");
	for (unsigned i = 0; i < s->np; i++) {
		const struct dp_stats_poller *p = &s->p[i];
		struct prate r = poller_rate(s, prev, i);
		uint64_t rc = 0;

		printf("%s{\"poller\":%u,\"cpu\":%d,\"queues\":%u,\"loops\":%llu,\"busy_loops\":%"
		       "llu,"
		       "\"sleeps\":%llu,\"wakeups\":%llu,\"descriptors\":%llu,\"busy_ns\":%llu,"
		       "\"idle_ns\":%llu,\"sleep_ns\":%llu,\"loop_descriptors\":[",
		       i ? "," : "", i, (int)p->cpu, s->pq[i], (unsigned long long)p->loops,
		       (unsigned long long)p->busy_loops, (unsigned long long)p->sleeps,
		       (unsigned long long)p->wakeups, (unsigned long long)p->descs,
		       (unsigned long long)p->busy_ns, (unsigned long long)p->idle_ns,
		       (unsigned long long)p->sleep_ns);
		for (unsigned k = 0; k < DP_STATS_LOOP_BUCKETS; k++)
			printf("%s%llu", k ? "," : "", (unsigned long long)p->loop_hist[k]);
		printf("],\"paths\":{");
		for (unsigned k = 0; k < DP_STATS_NPATH; k++)
			printf("%s\"%s\":{\"completions\":%llu,\"bytes\":%llu}", k ? "," : "",
			       dp_stats_path_name(k), (unsigned long long)p->path_ops[k],
			       (unsigned long long)p->path_bytes[k]);
		printf("},\"file\":{\"direct_ios\":%llu,\"direct_bytes\":%llu,"
		       "\"buffered_ios\":%llu,\"buffered_bytes\":%llu",
		       (unsigned long long)p->file_direct_ios,
		       (unsigned long long)p->file_direct_bytes,
		       (unsigned long long)p->file_buffered_ios,
		       (unsigned long long)p->file_buffered_bytes);
		for (unsigned k = 0; k < DP_STATS_HIST_BUCKETS; k++)
			rc += p->retired_hist[k];
		printf("},\"retired\":{\"queues\":%llu,\"submitted\":%llu,\"completed\":%llu,"
		       "\"failed\":%llu,\"bytes\":%llu,\"latency_count\":%llu},",
		       (unsigned long long)p->retired_queues,
		       (unsigned long long)p->retired_submitted,
		       (unsigned long long)p->retired_completed,
		       (unsigned long long)p->retired_failed, (unsigned long long)p->retired_bytes,
		       (unsigned long long)rc);
		printf("\"rates\":{\"interval_s\":%.6f,\"loops_per_s\":%.3f,\"busy_pct\":%.2f,"
		       "\"idle_pct\":%.2f,\"sleep_pct\":%.2f,\"sleeps_per_s\":%.3f,"
		       "\"wakeups_per_s\":%.3f,\"descriptors_per_s\":%.3f,"
		       "\"descriptors_per_busy_loop\":%.3f,\"file\":{\"direct_ios_per_s\":%.3f,"
		       "\"direct_bytes_per_s\":%.3f,\"buffered_ios_per_s\":%.3f,"
		       "\"buffered_bytes_per_s\":%.3f}}}",
		       r.secs, r.loops, r.busy_pct, r.idle_pct, r.sleep_pct, r.sleeps, r.wakeups,
		       r.descs, r.per_loop, r.file_direct_ios, r.file_direct_bytes,
		       r.file_buffered_ios, r.file_buffered_bytes);
	}
	printf("],\"rails\":[");
	for (unsigned i = 0, n = 0; i < s->nr; i++) {
		const struct rsnap *r = &s->r[i];

		if (!r->info.state)
			continue;
		printf("%s{\"rail\":%u,\"provider\":", n++ ? "," : "", i);
		json_str(r->info.provider);
		printf(",\"fabric\":");
		json_str(r->info.fabric);
		printf(",\"domain\":");
		json_str(r->info.domain);
		printf(",\"posted\":%llu,\"completed\":%llu,\"eagain\":%llu,\"errors\":%llu,"
		       "\"retries\":%llu,\"bytes\":%llu}",
		       (unsigned long long)r->c.posted, (unsigned long long)r->c.completed,
		       (unsigned long long)r->c.eagain, (unsigned long long)r->c.errors,
		       (unsigned long long)r->c.retries, (unsigned long long)r->c.bytes);
	}
	printf("]}\n");
	free(rows);
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

static void prom_head(const char *name, const char *type, const char *help)
{
	printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

struct prom_ctx {
	const struct snap *s;
	struct row *rows;
	unsigned nrows;
	char svc[160];
};

static void prom_queue_labels(const struct prom_ctx *c, const struct qsnap *q, char *b, size_t len)
{
	char name[80];

	snprintf(b, len, "service=\"%s\",client=\"%s\",pid=\"%d\",queue=\"%u\"", c->svc,
		 prom_esc(name, sizeof(name), q->name), (int)q->pid, q->queue_id);
}

/* One family with one sample per queue. */
static void prom_queue_u64(const struct prom_ctx *c, const char *name, const char *type,
			   const char *help, size_t field)
{
	char l[256];

	prom_head(name, type, help);
	for (unsigned i = 0; i < c->nrows; i++) {
		const struct qsnap *q = c->rows[i].q;

		prom_queue_labels(c, q, l, sizeof(l));
		printf("%s{%s} %llu\n", name, l,
		       (unsigned long long)*(const uint64_t *)((const uint8_t *)q + field));
	}
}

static void prom_poller_u64(const struct prom_ctx *c, const char *name, const char *type,
			    const char *help, size_t field, double scale)
{
	prom_head(name, type, help);
	for (unsigned i = 0; i < c->s->np; i++) {
		uint64_t v = *(const uint64_t *)((const uint8_t *)&c->s->p[i] + field);

		if (scale == 1)
			printf("%s{service=\"%s\",poller=\"%u\"} %llu\n", name, c->svc, i,
			       (unsigned long long)v);
		else
			printf("%s{service=\"%s\",poller=\"%u\"} %.9g\n", name, c->svc, i,
			       (double)v * scale);
	}
}

static void print_prom(const struct snap *s, const struct snap *prev)
{
	struct prom_ctx c = {.s = s};
	const struct dp_stats_service *v = &s->h.svc;
	char l[256], name[80];

	c.rows = rows_of(s, prev, &c.nrows);
	prom_esc(c.svc, sizeof(c.svc), s->h.name);
#define SVC_GAUGE(metric, type, help, value)                                                       \
	do {                                                                                       \
		prom_head(metric, type, help);                                                     \
		printf("%s{service=\"%s\"} %llu\n", metric, c.svc, (unsigned long long)(value));   \
	} while (0)
	prom_head("dataplane_up", "gauge", "1 while the service of this stats region runs.");
	printf("dataplane_up{service=\"%s\",pid=\"%d\",server=\"%s\"} 1\n", c.svc, (int)s->h.pid,
	       prom_esc(name, sizeof(name), s->h.server_name));
	prom_head("dataplane_uptime_seconds", "gauge", "Seconds since the service started.");
	printf("dataplane_uptime_seconds{service=\"%s\"} %.3f\n", c.svc,
	       (double)delta(s->mono_ns, s->h.start_mono_ns) / 1e9);
	SVC_GAUGE("dataplane_clients", "gauge", "Clients connected now.", v->clients);
	SVC_GAUGE("dataplane_clients_connected_total", "counter", "Clients ever connected.",
		  v->clients_total);
	SVC_GAUGE("dataplane_queues", "gauge", "Queue pairs open now.", v->queues);
	SVC_GAUGE("dataplane_queues_opened_total", "counter", "Queue pairs ever opened.",
		  v->queues_total);
	SVC_GAUGE("dataplane_queues_untracked_total", "counter",
		  "Queue pairs opened while every stats block was taken (not shown per queue).",
		  v->queues_untracked);
	SVC_GAUGE("dataplane_regions", "gauge", "Memory regions registered now.", v->regions);
	SVC_GAUGE("dataplane_registered_bytes", "gauge", "Bytes of the registered regions.",
		  v->registered_bytes);
	SVC_GAUGE("dataplane_segments", "gauge", "Segments exported now.", v->segments);
	SVC_GAUGE("dataplane_submitted_total", "counter",
		  "Descriptors taken from submission rings, all queues ever.", s->submitted);
	SVC_GAUGE("dataplane_completed_total", "counter",
		  "Descriptors completed with status 0, all queues ever.", s->completed);
	SVC_GAUGE("dataplane_failed_total", "counter",
		  "Descriptors completed with an error, all queues ever.", s->failed);
	SVC_GAUGE("dataplane_bytes_total", "counter",
		  "Bytes moved by completed descriptors, all queues ever.", s->bytes);
#undef SVC_GAUGE

	prom_queue_u64(&c, "dataplane_queue_submitted_total", "counter",
		       "Descriptors the service took from the queue's submission ring.",
		       offsetof(struct qsnap, submitted));
	prom_queue_u64(&c, "dataplane_queue_completed_total", "counter",
		       "Descriptors of the queue completed with status 0.",
		       offsetof(struct qsnap, completed));
	prom_head("dataplane_queue_failed_total", "counter",
		  "Descriptors of the queue completed with an error, by errno class.");
	for (unsigned i = 0; i < c.nrows; i++) {
		prom_queue_labels(&c, c.rows[i].q, l, sizeof(l));
		for (unsigned k = 0; k < DP_STATS_NERR; k++)
			printf("dataplane_queue_failed_total{%s,errno=\"%s\"} %llu\n", l,
			       dp_stats_err_name(k), (unsigned long long)c.rows[i].q->failed_by[k]);
	}
	prom_queue_u64(&c, "dataplane_queue_bytes_total", "counter",
		       "Bytes moved by the queue's completed descriptors.",
		       offsetof(struct qsnap, bytes));
	prom_queue_u64(&c, "dataplane_queue_local_copies_total", "counter",
		       "Descriptors of the queue handed to the local copy engine.",
		       offsetof(struct qsnap, local_copies));
	prom_queue_u64(&c, "dataplane_queue_doorbells_total", "counter",
		       "Completion doorbells rung for the queue (its client was asleep).",
		       offsetof(struct qsnap, doorbells));
	prom_head("dataplane_queue_in_flight", "gauge",
		  "Descriptors taken from the submission ring and not yet completed.");
	for (unsigned i = 0; i < c.nrows; i++) {
		prom_queue_labels(&c, c.rows[i].q, l, sizeof(l));
		printf("dataplane_queue_in_flight{%s} %llu\n", l,
		       (unsigned long long)in_flight(c.rows[i].q));
	}
	prom_head("dataplane_queue_ring_entries", "gauge",
		  "Entries waiting in the queue's rings when its poller last looked (ring=sq|cq), "
		  "and the rings' size (ring=size).");
	for (unsigned i = 0; i < c.nrows; i++) {
		const struct qsnap *q = c.rows[i].q;

		prom_queue_labels(&c, q, l, sizeof(l));
		printf("dataplane_queue_ring_entries{%s,ring=\"sq\"} %u\n", l, q->sq_depth);
		printf("dataplane_queue_ring_entries{%s,ring=\"cq\"} %u\n", l, q->cq_depth);
		printf("dataplane_queue_ring_entries{%s,ring=\"size\"} %u\n", l, q->depth);
	}
	prom_head("dataplane_queue_latency_seconds", "histogram",
		  "Submit-to-completion time of the queue's descriptors.");
	for (unsigned i = 0; i < c.nrows; i++) {
		const struct qsnap *q = c.rows[i].q;
		uint64_t cum = 0;
		unsigned b = 0;

		prom_queue_labels(&c, q, l, sizeof(l));
		/* Bounds at powers of two (bucket edges of the histogram):
		 * 256 ns .. 2^30 ns. */
		for (unsigned e = 8; e <= 30; e++) {
			while (b < DP_STATS_HIST_BUCKETS && dp_stats_hist_high(b) <= (1ull << e))
				cum += q->hist[b++];
			printf("dataplane_queue_latency_seconds_bucket{%s,le=\"%.9g\"} %llu\n", l,
			       (double)(1ull << e) / 1e9, (unsigned long long)cum);
		}
		printf("dataplane_queue_latency_seconds_bucket{%s,le=\"+Inf\"} %llu\n", l,
		       (unsigned long long)q->hist_count);
		printf("dataplane_queue_latency_seconds_sum{%s} %.9g\n", l,
		       (double)q->lat_sum_ns / 1e9);
		printf("dataplane_queue_latency_seconds_count{%s} %llu\n", l,
		       (unsigned long long)q->hist_count);
	}

	prom_poller_u64(&c, "dataplane_poller_loops_total", "counter", "Poller loops.",
			offsetof(struct dp_stats_poller, loops), 1);
	prom_poller_u64(&c, "dataplane_poller_busy_loops_total", "counter",
			"Poller loops that found work.",
			offsetof(struct dp_stats_poller, busy_loops), 1);
	prom_poller_u64(&c, "dataplane_poller_sleeps_total", "counter",
			"Times the poller slept on doorbells.",
			offsetof(struct dp_stats_poller, sleeps), 1);
	prom_poller_u64(&c, "dataplane_poller_wakeups_total", "counter",
			"Sleeps ended by a doorbell rather than a timeout.",
			offsetof(struct dp_stats_poller, wakeups), 1);
	prom_poller_u64(&c, "dataplane_poller_descriptors_total", "counter",
			"Descriptors the poller took from submission rings.",
			offsetof(struct dp_stats_poller, descs), 1);
	prom_head("dataplane_poller_seconds_total", "counter",
		  "Poller time by state: busy (loops with work), idle (spinning), sleep.");
	for (unsigned i = 0; i < s->np; i++) {
		printf("dataplane_poller_seconds_total{service=\"%s\",poller=\"%u\",state=\"busy\"}"
		       " "
		       "%.9g\n",
		       c.svc, i, (double)s->p[i].busy_ns / 1e9);
		printf("dataplane_poller_seconds_total{service=\"%s\",poller=\"%u\",state=\"idle\"}"
		       " "
		       "%.9g\n",
		       c.svc, i, (double)s->p[i].idle_ns / 1e9);
		printf("dataplane_poller_seconds_total{service=\"%s\",poller=\"%u\",state="
		       "\"sleep\"} "
		       "%.9g\n",
		       c.svc, i, (double)s->p[i].sleep_ns / 1e9);
	}
	prom_head("dataplane_path_completions_total", "counter",
		  "Completions by transfer path (host and GPU local copies, fabric, file).");
	for (unsigned i = 0; i < s->np; i++)
		for (unsigned k = 0; k < DP_STATS_NPATH; k++)
			printf("dataplane_path_completions_total{service=\"%s\",poller=\"%u\","
			       "path=\"%s\"} %llu\n",
			       c.svc, i, dp_stats_path_name(k),
			       (unsigned long long)s->p[i].path_ops[k]);
	prom_head("dataplane_path_bytes_total", "counter", "Bytes moved by transfer path.");
	for (unsigned i = 0; i < s->np; i++)
		for (unsigned k = 0; k < DP_STATS_NPATH; k++)
			printf("dataplane_path_bytes_total{service=\"%s\",poller=\"%u\",path=\"%"
			       "s\"} "
			       "%llu\n",
			       c.svc, i, dp_stats_path_name(k),
			       (unsigned long long)s->p[i].path_bytes[k]);
	prom_head("dataplane_file_ios_total", "counter",
		  "File I/O slices (io_uring reads and writes) finished, by mode: direct "
		  "(O_DIRECT) or buffered (page cache).");
	for (unsigned i = 0; i < s->np; i++) {
		printf("dataplane_file_ios_total{service=\"%s\",poller=\"%u\",mode=\"direct\"} "
		       "%llu\n",
		       c.svc, i, (unsigned long long)s->p[i].file_direct_ios);
		printf("dataplane_file_ios_total{service=\"%s\",poller=\"%u\",mode=\"buffered\"} "
		       "%llu\n",
		       c.svc, i, (unsigned long long)s->p[i].file_buffered_ios);
	}
	prom_head("dataplane_file_bytes_total", "counter",
		  "Bytes of the finished file I/O slices, by mode: direct or buffered.");
	for (unsigned i = 0; i < s->np; i++) {
		printf("dataplane_file_bytes_total{service=\"%s\",poller=\"%u\",mode=\"direct\"} "
		       "%llu\n",
		       c.svc, i, (unsigned long long)s->p[i].file_direct_bytes);
		printf("dataplane_file_bytes_total{service=\"%s\",poller=\"%u\",mode="
		       "\"buffered\"} %llu\n",
		       c.svc, i, (unsigned long long)s->p[i].file_buffered_bytes);
	}

	{
		static const struct {
			const char *name, *help;
			size_t field;
		} rail[] = {
			{"dataplane_rail_posted_total", "RMA operations posted on the rail.",
			 offsetof(struct dp_stats_rail, posted)},
			{"dataplane_rail_completed_total", "RMA operations completed on the rail.",
			 offsetof(struct dp_stats_rail, completed)},
			{"dataplane_rail_eagain_total", "Posts the rail refused with EAGAIN.",
			 offsetof(struct dp_stats_rail, eagain)},
			{"dataplane_rail_errors_total", "RMA completions with an error.",
			 offsetof(struct dp_stats_rail, errors)},
			{"dataplane_rail_retries_total",
			 "RMA operations posted again after an error.",
			 offsetof(struct dp_stats_rail, retries)},
			{"dataplane_rail_bytes_total",
			 "Bytes moved by the rail's completed operations.",
			 offsetof(struct dp_stats_rail, bytes)},
		};

		for (unsigned k = 0; k < sizeof(rail) / sizeof(rail[0]); k++) {
			prom_head(rail[k].name, "counter", rail[k].help);
			for (unsigned i = 0; i < s->nr; i++) {
				char p[80], f[160];

				if (!s->r[i].info.state)
					continue;
				printf("%s{service=\"%s\",rail=\"%u\",provider=\"%s\",fabric=\"%"
				       "s\"} "
				       "%llu\n",
				       rail[k].name, c.svc, i,
				       prom_esc(p, sizeof(p), s->r[i].info.provider),
				       prom_esc(f, sizeof(f), s->r[i].info.fabric),
				       (unsigned long long)*(
					       const uint64_t *)((const uint8_t *)&s->r[i].c +
								 rail[k].field));
			}
		}
	}
	free(c.rows);
}

/* ---- main ---- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ring-stat [options]\n"
		"  --stats NAME      read stats region NAME (/dev/shm/NAME)\n"
		"  --socket PATH     read the region of the service on control socket PATH,\n"
		"                    whatever its --stats name (default: $DP_SOCKET's, else\n"
		"                    the only running service's)\n"
		"  -l, --list        list the stats regions in /dev/shm and their state\n"
		"  -w, --watch SECS  refresh every SECS seconds, showing rates over the interval\n"
		"  -c, --count N     stop after N samples (default 1, or unlimited with -w)\n"
		"  -q, --queue Q     only queues of client Q (a name or pid), or Q:ID for one "
		"queue\n"
		"  --sort KEY        slot (default), ops, bytes, fail, p99, inflight, name\n"
		"  --json            one JSON object per sample (fields: docs/ring-stat.md)\n"
		"  --prometheus      Prometheus text exposition format, one sample (no -w)\n"
		"  --wide            every column (the default fits 80 columns)\n"
		"  --color WHEN      auto (default: on a terminal), always, never\n"
		"  -h, --help        this text\n"
		"  --version         print the version and exit\n"
		"Exit codes: 0 ok, 1 error, 2 usage, 3 no service running, 4 not a stats region\n"
		"or another ABI version, 5 truncated or corrupt region.\n");
}

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	enum { O_STATS = 256, O_SOCKET, O_SORT, O_JSON, O_PROM, O_WIDE, O_COLOR, O_VERSION };
	static const struct option opts[] = {{"stats", required_argument, 0, O_STATS},
					     {"socket", required_argument, 0, O_SOCKET},
					     {"list", no_argument, 0, 'l'},
					     {"watch", required_argument, 0, 'w'},
					     {"count", required_argument, 0, 'c'},
					     {"queue", required_argument, 0, 'q'},
					     {"sort", required_argument, 0, O_SORT},
					     {"json", no_argument, 0, O_JSON},
					     {"prometheus", no_argument, 0, O_PROM},
					     {"wide", no_argument, 0, O_WIDE},
					     {"color", required_argument, 0, O_COLOR},
					     {"help", no_argument, 0, 'h'},
					     {"version", no_argument, 0, O_VERSION},
					     {0, 0, 0, 0}};
	static const char *const sorts[] = {"slot", "ops",	"bytes", "fail",
					    "p99",  "inflight", "name"};
	const char *color = "auto";
	char name[DP_STATS_NAME_MAX], err[512];
	struct snap cur, prev;
	bool have_prev = false;
	struct region r;
	long samples = 0;
	int o, rc;

	while ((o = getopt_long(argc, argv, "lw:c:q:h", opts, NULL)) != -1) {
		char *end;

		switch (o) {
		case O_STATS:
			opt.name = optarg;
			break;
		case O_SOCKET:
			opt.socket = optarg;
			break;
		case 'l':
			opt.list = true;
			break;
		case 'w':
			opt.interval = strtod(optarg, &end);
			if (*end || !(opt.interval > 0) || opt.interval > 86400)
				fail(EX_USAGE, "-w %s: want seconds, e.g. 1 or 0.5", optarg);
			break;
		case 'c':
			opt.count = strtol(optarg, &end, 10);
			if (*end || opt.count < 1)
				fail(EX_USAGE, "-c %s: want a count >= 1", optarg);
			break;
		case 'q':
			opt.queue = optarg;
			break;
		case O_SORT: {
			unsigned k;

			for (k = 0; k < sizeof(sorts) / sizeof(sorts[0]); k++)
				if (!strcmp(optarg, sorts[k]))
					break;
			if (k == sizeof(sorts) / sizeof(sorts[0]))
				fail(EX_USAGE,
				     "--sort %s: want slot, ops, bytes, fail, p99, inflight "
				     "or name",
				     optarg);
			opt.sort = (enum sort_key)k;
			break;
		}
		case O_JSON:
			opt.out = OUT_JSON;
			break;
		case O_PROM:
			opt.out = OUT_PROM;
			break;
		case O_WIDE:
			opt.wide = true;
			break;
		case O_COLOR:
			color = optarg;
			if (strcmp(color, "auto") && strcmp(color, "always") &&
			    strcmp(color, "never"))
				fail(EX_USAGE, "--color %s: want auto, always or never", optarg);
			break;
		case 'h':
			usage(stdout);
			return EX_OK;
		case O_VERSION:
			printf("ring-stat (dataplane) %s\n", DP_VERSION_STRING);
			return EX_OK;
		default:
			fprintf(stderr, "Try 'ring-stat --help'.\n");
			return EX_USAGE;
		}
	}
	if (optind < argc)
		fail(EX_USAGE, "unexpected argument '%s' (try --help)", argv[optind]);
	if (opt.name && opt.socket)
		fail(EX_USAGE, "--stats and --socket both name a service; give one");
	/* One exposition is one scrape: repeated ones in one stream are no
	 * valid exposition (docs/ring-stat.md). */
	if (opt.out == OUT_PROM && opt.interval)
		fail(EX_USAGE, "--prometheus takes no -w: it writes one exposition (a scrape); "
			       "run it once per scrape (try --help)");
	if (!strcmp(color, "always"))
		opt.color = true;
	else if (!strcmp(color, "auto"))
		opt.color = opt.out == OUT_TABLE && isatty(STDOUT_FILENO) && !getenv("NO_COLOR") &&
			    (!getenv("TERM") || strcmp(getenv("TERM"), "dumb"));
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
	for (;;) {
		rc = snap_take(&r, &cur);
		if (rc)
			fail(rc, "stats region '%s' was truncated while being read", name);
		if (samples && opt.out == OUT_TABLE)
			putchar('\n');
		if (opt.out == OUT_JSON)
			print_json(&cur, have_prev ? &prev : NULL);
		else if (opt.out == OUT_PROM)
			print_prom(&cur, have_prev ? &prev : NULL);
		else
			print_table(&cur, have_prev ? &prev : NULL);
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
		if (__atomic_load_n(&r.h->state, __ATOMIC_ACQUIRE) != DP_STATS_RUNNING ||
		    !dp_stats_service_alive(r.h->pid)) {
			region_close(&r);
			rc = region_open(name, &r, err, sizeof(err));
			if (rc)
				fail(rc, "%s", err);
			snap_free(&prev);
			have_prev = false;
		}
	}
	if (have_prev)
		snap_free(&prev);
	region_close(&r);
	return EX_OK;
}
