/* SPDX-License-Identifier: MIT */
/*
 * stats.c - the shared-memory stats region: creation, queue blocks (assigned
 * by the control thread, retired by their poller, recycled with a new
 * generation), service gauges, rails. See stats.h and dp_stats.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stats.h"

/* Queue blocks: enough for every queue the service admits, plus a few that
 * linger while closed queues drain, up to a bound that keeps the region
 * small (a block is about 9.5 KiB; tmpfs allocates only touched pages). */
#define STATS_MAX_QUEUE_BLOCKS 1024u
#define STATS_QUEUE_SLACK 16u

static struct dp_stats_header *hdr;
static size_t region_size;
static char region_name[DP_STATS_NAME_MAX];
static uint32_t next_slot; /* control thread: where the search for a free block starts */
static bool warned_full;
static struct stats_poller spriv[DP_MAX_POLLERS];

static size_t align64(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

static struct dp_stats_poller *poller_block(unsigned i)
{
	return (struct dp_stats_poller *)((uint8_t *)hdr + hdr->pollers_off +
					  (size_t)i * hdr->poller_size);
}

static struct dp_stats_queue *queue_block(unsigned i)
{
	return (struct dp_stats_queue *)((uint8_t *)hdr + hdr->queues_off +
					 (size_t)i * hdr->queue_size);
}

static struct dp_stats_rail_info *rail_info_block(unsigned i)
{
	return (struct dp_stats_rail_info *)((uint8_t *)hdr + hdr->rail_info_off +
					     (size_t)i * hdr->rail_info_size);
}

const char *stats_name(void)
{
	return region_name;
}

/* Any exit after the region exists (a start-up failure, exit()) takes the
 * name away, so that ring-stat does not find a service that is gone. The
 * mapping stays: pollers may still run. */
static void stats_unlink_at_exit(void)
{
	if (!hdr)
		return;
	__atomic_store_n(&hdr->state, DP_STATS_STOPPED, __ATOMIC_RELEASE);
	shm_unlink(region_name);
}

/* ---- the TSC clock (stats.h) ---- */

/* An invariant TSC: it ticks at one rate in every power state and on every
 * CPU, so that it can stand in for CLOCK_MONOTONIC between two readings. */
static bool tsc_usable(void)
{
#if defined(__x86_64__)
	char line[4096];
	bool constant = false, nonstop = false;
	FILE *f = fopen("/proc/cpuinfo", "r");

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "flags", 5)) {
			constant = strstr(line, " constant_tsc") != NULL;
			nonstop = strstr(line, " nonstop_tsc") != NULL;
			break;
		}
	fclose(f);
	return constant && nonstop;
#else
	return false;
#endif
}

static void tsc_set(struct stats_poller *sp, double ns_per_tick)
{
	sp->tsc_mult = (uint64_t)(ns_per_tick * 4294967296.0);
	sp->tsc_span = (uint64_t)(STATS_TSC_SPAN_NS / ns_per_tick);
}

/* A clock reading and the TSC at its middle; false when the two TSC reads
 * around it are far apart (preempted). */
static bool tsc_pair(uint64_t *t, uint64_t *c)
{
	for (int tries = 0; tries < 100; tries++) {
		uint64_t c0 = stats_tsc(), c1;

		*t = stats_clock();
		c1 = stats_tsc();
		if (c1 - c0 < 20000) { /* a few microseconds at any TSC rate */
			*c = c0 + (c1 - c0) / 2;
			return true;
		}
	}
	return false;
}

/* The scale over 2 ms of spinning at start; pollers refine it. 0 when the
 * clock readings kept being interrupted. */
static double tsc_calibrate(uint64_t *t0, uint64_t *c0)
{
	uint64_t t1, c1;

	if (!tsc_pair(t0, c0))
		return 0;
	while (stats_clock() - *t0 < 2000000)
		;
	if (!tsc_pair(&t1, &c1) || c1 <= *c0)
		return 0;
	return (double)(t1 - *t0) / (double)(c1 - *c0);
}

void stats_tsc_recalibrate(struct stats_poller *sp, uint64_t t, uint64_t tsc)
{
	double old = (double)sp->tsc_mult / 4294967296.0;
	double now = (double)(t - sp->cal_ns) / (double)(tsc - sp->cal_tsc);

	/* CLOCK_MONOTONIC is slewed by NTP (ppm); a change of a percent means
	 * the TSC is not what its flags said: give it up. */
	if (!(now > old * 0.99 && now < old * 1.01)) {
		log_warn("poller %u: TSC rate changed (%.6f -> %.6f ns/tick); timing with "
			 "clock_gettime from now on",
			 sp->sh->index, old, now);
		sp->tsc_mult = 0;
		return;
	}
	tsc_set(sp, now);
	/* A window of at most about 10 s follows the clock's slewing. */
	if (t - sp->cal_ns > 10000000000ull) {
		sp->cal_ns = t;
		sp->cal_tsc = tsc;
	}
}

/* Whether process @pid has the region @name mapped: a pid recorded in a
 * region left by a killed service may since belong to another dataplaned.
 * Unreadable maps (another user's service) count as mapped. */
static bool region_mapped_by(int32_t pid, const char *name)
{
	char path[64], line[512], want[128];
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	snprintf(want, sizeof(want), "/dev/shm/%s", name[0] == '/' ? name + 1 : name);
	f = fopen(path, "r");
	if (!f)
		return true;
	while (!found && fgets(line, sizeof(line), f)) {
		char *p = strstr(line, want);

		found = p && (p[strlen(want)] == '\n' || p[strlen(want)] == ' ');
	}
	fclose(f);
	return found;
}

/*
 * A region of this name may exist already. A live service's is left alone
 * (-EADDRINUSE); a crashed one's is replaced (0); a file that is no stats
 * region is not ours to remove (-EEXIST).
 */
static int stats_existing(const char *name)
{
	struct dp_stats_header h;
	struct stat st;
	ssize_t n;
	int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);

	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return -errno;
	}
	memset(&h, 0, sizeof(h));
	n = pread(fd, &h, sizeof(h), 0);
	close(fd);
	if (st.st_size == 0 || (n >= 4 && h.magic == 0))
		return 0; /* a creator that died before it finished */
	if (n < 8 || h.magic != DP_STATS_MAGIC) {
		log_err("stats region %s exists and is not a dataplane stats region; not touching "
			"it",
			name);
		return -EEXIST;
	}
	if (h.abi_version == DP_STATS_ABI_VERSION && (size_t)n == sizeof(h) &&
	    h.state == DP_STATS_RUNNING && h.pid != getpid() && dp_stats_service_alive(h.pid) &&
	    region_mapped_by(h.pid, name)) {
		log_err("stats region %s is in use by dataplaned pid %d (use --stats NAME)", name,
			(int)h.pid);
		return -EADDRINUSE;
	}
	log_info("stats region %s: replacing the one left by pid %d", name, (int)h.pid);
	return 0;
}

/* The region's layout (its blocks' sizes, counts and offsets) and the
 * service's identity, as the header says them to readers. */
static void header_fill(struct dp_stats_header *h)
{
	uint64_t nq = (uint64_t)cfg.max_clients * cfg.max_queues + STATS_QUEUE_SLACK;
	size_t off;

	*h = (struct dp_stats_header){
		.abi_version = DP_STATS_ABI_VERSION,
		.header_size = sizeof(struct dp_stats_header),
		.queue_size = sizeof(struct dp_stats_queue),
		.poller_size = (uint32_t)align64(sizeof(struct dp_stats_poller)),
		.rail_info_size = (uint32_t)align64(sizeof(struct dp_stats_rail_info)),
		.rail_size = sizeof(struct dp_stats_rail),
		.nqueues = nq > STATS_MAX_QUEUE_BLOCKS ? STATS_MAX_QUEUE_BLOCKS : (uint32_t)nq,
		.npollers = cfg.pollers,
		.nrails = DP_STATS_MAX_RAILS,
		.hist_buckets = DP_STATS_HIST_BUCKETS,
		.hist_sub_bits = DP_STATS_HIST_SUB_BITS,
		.pid = getpid(),
		.state = DP_STATS_RUNNING,
	};
	off = align64(sizeof(*h));
	h->pollers_off = off;
	off += (size_t)h->npollers * h->poller_size;
	h->rail_info_off = off;
	off += (size_t)h->nrails * h->rail_info_size;
	h->rails_off = off;
	off += (size_t)h->nrails * h->npollers * h->rail_size;
	h->queues_off = off;
	off += (size_t)h->nqueues * h->queue_size;
	h->region_size = off;
	h->start_mono_ns = dp_now_ns();
	h->start_real_ns = dp_clock_ns(CLOCK_REALTIME);
	snprintf(h->name, sizeof(h->name), "%s", region_name);
	snprintf(h->server_name, sizeof(h->server_name), "%s", cfg.server_name);
	snprintf(h->socket_path, sizeof(h->socket_path), "%s", cfg.socket_path);
}

/* A new shared-memory object of `size` bytes named region_name, in place
 * of one a crashed service left (stats_existing), mapped: 0 with *map, or
 * -errno (logged). */
static int region_create(size_t size, void **map)
{
	int fd, rc = stats_existing(region_name);

	if (rc)
		return rc;
	shm_unlink(region_name);
	fd = shm_open(region_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
	if (fd < 0) {
		rc = -errno;
		log_err("stats region %s: shm_open: %s", region_name, strerror(errno));
		return rc;
	}
	/* Exactly 0640 whatever the umask: the group may read, nobody writes. */
	if (fchmod(fd, 0640) < 0 || ftruncate(fd, (off_t)size) < 0) {
		rc = -errno;
		log_err("stats region %s: %s", region_name, strerror(errno));
		close(fd);
		shm_unlink(region_name);
		return rc;
	}
	*map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (*map == MAP_FAILED) {
		rc = -errno;
		log_err("stats region %s: mmap: %s", region_name, strerror(errno));
		shm_unlink(region_name);
		return rc;
	}
	return 0;
}

/* Each poller's block and private state, its clock the TSC where that is
 * usable (calibrated once for all), started at `start_ns`. */
static void pollers_attach(uint64_t start_ns)
{
	uint64_t t0 = 0, c0 = 0;
	double ns_per_tick = tsc_usable() ? tsc_calibrate(&t0, &c0) : 0;

	for (unsigned i = 0; i < cfg.pollers; i++) {
		struct dp_stats_poller *b = poller_block(i);
		struct stats_poller *sp = &spriv[i];

		b->cpu = cfg.cpus[i];
		b->index = i;
		b->last_loop_ns = start_ns;
		sp->sh = b;
		sp->last = start_ns;
		if (ns_per_tick > 0) {
			tsc_set(sp, ns_per_tick);
			sp->cal_ns = sp->anchor_ns = t0;
			sp->cal_tsc = sp->anchor_tsc = c0;
		}
		pollers[i].stats = sp;
	}
	log_debug("stats: %s", ns_per_tick > 0 ? "TSC clock" : "clock_gettime clock");
}

int stats_init(void)
{
	struct dp_stats_header h;
	void *map;
	int rc;

	if (cfg.no_stats) {
		log_info("stats region disabled (--no-stats)");
		return 0;
	}
	if (cfg.stats_name[0])
		snprintf(region_name, sizeof(region_name), "%s", cfg.stats_name);
	else
		dp_stats_default_name(cfg.socket_path, region_name, sizeof(region_name));
	header_fill(&h);
	rc = region_create(h.region_size, &map);
	if (rc)
		return rc;
	hdr = map;
	region_size = h.region_size;
	memcpy(hdr, &h, sizeof(h));
	pollers_attach(h.start_mono_ns);
	/* Release: a reader that sees the magic sees the whole header. Pairs
	 * with the acquire load of magic in ring-stat. */
	__atomic_store_n(&hdr->magic, DP_STATS_MAGIC, __ATOMIC_RELEASE);
	atexit(stats_unlink_at_exit);
	log_info("stats region /dev/shm/%s: %u queue blocks, %zu KiB", region_name, h.nqueues,
		 region_size >> 10);
	return 0;
}

void stats_fini(void)
{
	if (!hdr)
		return;
	__atomic_store_n(&hdr->state, DP_STATS_STOPPED, __ATOMIC_RELEASE);
	shm_unlink(region_name);
	munmap(hdr, region_size);
	hdr = NULL;
	for (unsigned i = 0; i < cfg.pollers; i++)
		pollers[i].stats = NULL;
}

/* ---- queue blocks ---- */

void stats_queue_attach(struct queue *q)
{
	struct dp_stats_queue *s = NULL;
	uint32_t seq;

	q->st = NULL;
	if (!hdr)
		return;
	stats_add(&hdr->svc.queues, 1);
	stats_add(&hdr->svc.queues_total, 1);
	for (uint32_t i = 0; i < hdr->nqueues; i++) {
		struct dp_stats_queue *b = queue_block((next_slot + i) % hdr->nqueues);

		/* Acquire: pairs with the release in stats_queue_retire(); the
		 * poller that had the block no longer writes it. */
		if (__atomic_load_n(&b->state, __ATOMIC_ACQUIRE) == DP_STATS_Q_FREE) {
			s = b;
			next_slot = (next_slot + i + 1) % hdr->nqueues;
			break;
		}
	}
	if (!s) {
		stats_add(&hdr->svc.queues_untracked, 1);
		if (!warned_full)
			log_warn(
				"stats region full (%u queue blocks): further queues are not shown",
				hdr->nqueues);
		warned_full = true;
		return;
	}
	/* Seqcount write side: odd, then (release fence) the block, then
	 * even with release. Pairs with the reader's acquire load of seq, its
	 * acquire fence and second load. */
	seq = s->seq;
	__atomic_store_n(&s->seq, seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	memset((uint8_t *)s + offsetof(struct dp_stats_queue, submitted), 0,
	       sizeof(*s) - offsetof(struct dp_stats_queue, submitted));
	s->client_pid = q->client->pid;
	s->client_id = q->client->id;
	s->queue_id = q->id;
	s->poller = q->poller->idx;
	s->depth = q->depth;
	s->created_ns = dp_now_ns();
	memcpy(s->client_name, q->client->name, sizeof(s->client_name));
	s->client_name[sizeof(s->client_name) - 1] = 0;
	s->generation++;
	s->state = DP_STATS_Q_ACTIVE;
	__atomic_store_n(&s->seq, seq + 2, __ATOMIC_RELEASE);
	/* The poller gets q (and q->st) through its inbox lock. */
	q->st = s;
}

void stats_queue_retire(struct queue *q)
{
	struct dp_stats_queue *s = q->st;
	struct stats_poller *sp;
	struct dp_stats_poller *sh;
	uint32_t seq;

	if (!s)
		return;
	sp = q->poller->stats;
	/* Its completions of this loop (or of the shutdown) are timed now. */
	if (q->ctr.completed + q->ctr.failed != q->run_done0)
		stats_run_close(q, q->ctr.completed + q->ctr.failed, q->ctr.bytes);
	if (sp->npend)
		stats_runs_end(sp, stats_now(sp));
	sh = sp->sh;
	/* The poller's retire_seq brackets the move from the queue's counters
	 * to the retired totals: a reader that sees it change retries. */
	seq = sh->retire_seq;
	__atomic_store_n(&sh->retire_seq, seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	stats_add(&sh->retired_queues, 1);
	stats_add(&sh->retired_submitted, q->ctr.submitted);
	stats_add(&sh->retired_completed, q->ctr.completed);
	stats_add(&sh->retired_failed, q->ctr.failed);
	stats_add(&sh->retired_bytes, q->ctr.bytes);
	stats_add(&sh->retired_local_copies, q->ctr.local_copies);
	stats_add(&sh->retired_doorbells, q->ctr.doorbells);
	stats_add(&sh->retired_lat_sum_ns, q->ctr.lat_sum_ns);
	stats_add(&sh->retired_lat_unstamped, q->ctr.lat_unstamped);
	if (q->ctr.lat_max_ns > sh->retired_lat_max_ns)
		stats_set(&sh->retired_lat_max_ns, q->ctr.lat_max_ns);
	for (unsigned i = 0; i < DP_STATS_NERR; i++)
		stats_add(&sh->retired_failed_by[i], q->ctr.failed_by[i]);
	for (unsigned i = 0; i < DP_STATS_HIST_BUCKETS; i++)
		if (s->hist[i])
			stats_add(&sh->retired_hist[i], s->hist[i]);
	/* Release: hands the block to the control thread (the acquire in
	 * stats_queue_attach); nothing of ours touches it after this. */
	__atomic_store_n(&s->state, DP_STATS_Q_FREE, __ATOMIC_RELEASE);
	__atomic_store_n(&sh->retire_seq, seq + 2, __ATOMIC_RELEASE);
	q->st = NULL;
}

/* ---- latency runs (the owning poller) ---- */

/* Times the loop's runs at t (stats_run_time). */
void stats_runs_end(struct stats_poller *sp, uint64_t t)
{
	for (unsigned i = 0; i < sp->npend; i++)
		stats_run_time(&sp->pend[i], t);
	sp->npend = 0;
}

/* A completion with another stamp or flags than q's run (before q's
 * counters count it): closes the run, if it has completions, and starts
 * the next. n completions moving `bytes` are already made but not yet in
 * q's counters (the fast path counts its own at the end of its loop). */
void stats_run_switch(struct queue *q, uint64_t submit_ns, uint32_t flags, uint64_t n,
		      uint64_t bytes)
{
	uint64_t done = q->ctr.completed + q->ctr.failed + n;

	if (done != q->run_done0)
		stats_run_close(q, done, q->ctr.bytes + bytes);
	q->run_submit = submit_ns;
	q->run_flags = flags;
}

/* ---- publication (the owning poller) ---- */

static void queue_publish(struct queue *q)
{
	struct dp_stats_queue *s = q->st;
	struct dp_ring *cq = &q->pair.cq;
	/* The client's CQ head, loaded now: our own copy is reloaded only
	 * when the ring runs short of room, and would show completions the
	 * client reaped long ago. One load per publication, never per
	 * descriptor; a head out of range (a hostile client) shows the copy. */
	uint32_t unreaped = cq->local - __atomic_load_n(&cq->hdr->head, __ATOMIC_RELAXED);

	if (unreaped > dp_ring_size(cq))
		unreaped = dp_ring_used_cached(cq);
	/* The SQ: what the last peek saw. */
	__atomic_store_n(&s->sq_depth, dp_ring_avail_cached(&q->pair.sq), __ATOMIC_RELAXED);
	__atomic_store_n(&s->cq_depth, unreaped + q->nstage, __ATOMIC_RELAXED);
	if (s->submitted == q->ctr.submitted && s->doorbells == q->ctr.doorbells &&
	    s->completed + s->failed == q->ctr.completed + q->ctr.failed)
		return;
	if (s->failed != q->ctr.failed)
		for (unsigned i = 0; i < DP_STATS_NERR; i++)
			stats_set(&s->failed_by[i], q->ctr.failed_by[i]);
	stats_set(&s->submitted, q->ctr.submitted);
	stats_set(&s->completed, q->ctr.completed);
	stats_set(&s->failed, q->ctr.failed);
	stats_set(&s->bytes, q->ctr.bytes);
	stats_set(&s->local_copies, q->ctr.local_copies);
	stats_set(&s->doorbells, q->ctr.doorbells);
	stats_set(&s->lat_sum_ns, q->ctr.lat_sum_ns);
	stats_set(&s->lat_max_ns, q->ctr.lat_max_ns);
	stats_set(&s->lat_unstamped, q->ctr.lat_unstamped);
}

void stats_publish_poller(struct stats_poller *sp)
{
	struct dp_stats_poller *sh = sp->sh;

	stats_set(&sh->last_loop_ns, sp->last);
	stats_set(&sh->loops, sp->loops);
	stats_set(&sh->busy_loops, sp->busy_loops);
	stats_set(&sh->sleeps, sp->sleeps);
	stats_set(&sh->wakeups, sp->wakeups);
	stats_set(&sh->descs, sp->descs);
	stats_set(&sh->busy_ns, sp->busy_ns);
	stats_set(&sh->idle_ns, sp->idle_ns);
	stats_set(&sh->sleep_ns, sp->sleep_ns);
	for (unsigned i = 0; i < DP_STATS_LOOP_BUCKETS; i++)
		stats_set(&sh->loop_hist[i], sp->loop_hist[i]);
	/* Before the paths: a transfer's slices are counted before its
	 * completion, and a reader copies in address order (paths first), so
	 * on x86 (TSO) one that sees the completion sees its slices. Elsewhere
	 * they may be torn against each other like any two counters. */
	stats_set(&sh->file_direct_ios, sp->file_direct_ios);
	stats_set(&sh->file_direct_bytes, sp->file_direct_bytes);
	stats_set(&sh->file_buffered_ios, sp->file_buffered_ios);
	stats_set(&sh->file_buffered_bytes, sp->file_buffered_bytes);
	stats_set(&sh->notify_delivered, sp->notify_delivered);
	stats_set(&sh->notify_dropped, sp->notify_dropped);
	stats_set(&sh->stripes_helped, sp->stripes_helped);
	stats_set(&sh->stripe_bytes_helped, sp->stripe_bytes_helped);
	stats_set(&sh->parked_queues, sp->parked_queues);
	stats_set(&sh->fabric_target_passes, sp->fabric_target_passes);
	stats_set(&sh->fabric_target_late, sp->fabric_target_late);
	{
		uint64_t ops[DP_STATS_NPATH] = {0}, bytes[DP_STATS_NPATH] = {0};

		for (unsigned f = 0; f < 32; f++) {
			unsigned path = f & DP_CQE_F_SAME_HOST ? DP_STATS_PATH_SAMEHOST
					: f & DP_CQE_F_GPU     ? DP_STATS_PATH_GPU
					: f & DP_CQE_F_FABRIC  ? DP_STATS_PATH_FABRIC
					: f & DP_CQE_F_FILE    ? DP_STATS_PATH_FILE
					: f & DP_CQE_F_LOCAL   ? DP_STATS_PATH_HOST
							       : DP_STATS_NPATH;

			if (path < DP_STATS_NPATH) {
				ops[path] += sp->flag_ops[f];
				bytes[path] += sp->flag_bytes[f];
			}
		}
		for (unsigned i = 0; i < DP_STATS_NPATH; i++) {
			stats_set(&sh->path_ops[i], ops[i]);
			stats_set(&sh->path_bytes[i], bytes[i]);
		}
	}
}

void stats_queue_publish(struct queue *q)
{
	if (q->st)
		queue_publish(q);
}

void stats_publish(struct poller *p)
{
	for (struct queue *q = p->queues; q; q = q->next)
		if (q->st)
			queue_publish(q);
	stats_publish_poller(p->stats);
	p->stats->dirty = false;
}

/* A parked queue was published when it was parked, and is not again until
 * it has work: its client may have reaped completions since. Only those
 * that showed some are looked at, so many idle queues cost a walk of the
 * list and no line of their clients'. */
void stats_publish_idle(struct poller *p)
{
	for (struct queue *q = p->parked; q; q = q->next)
		if (q->st && __atomic_load_n(&q->st->cq_depth, __ATOMIC_RELAXED))
			queue_publish(q);
	stats_publish(p);
}

/* ---- service gauges (control thread) ---- */

static void svc_add(uint64_t *c, int64_t delta)
{
	if (hdr)
		stats_set(c, __atomic_load_n(c, __ATOMIC_RELAXED) + (uint64_t)delta);
}

void stats_notify_remote(uint64_t sent, uint64_t lost, uint64_t received, uint64_t dropped)
{
	if (!hdr)
		return;
	svc_add(&hdr->svc.notify_sent, (int64_t)sent);
	svc_add(&hdr->svc.notify_lost, (int64_t)lost);
	svc_add(&hdr->svc.notify_received, (int64_t)received);
	svc_add(&hdr->svc.notify_received_dropped, (int64_t)dropped);
}

void stats_client_added(void)
{
	if (!hdr)
		return;
	svc_add(&hdr->svc.clients, 1);
	svc_add(&hdr->svc.clients_total, 1);
}

void stats_client_removed(void)
{
	if (hdr)
		svc_add(&hdr->svc.clients, -1);
}

void stats_queue_closed(void)
{
	if (hdr)
		svc_add(&hdr->svc.queues, -1);
}

void stats_region_added(uint64_t len)
{
	if (!hdr)
		return;
	svc_add(&hdr->svc.regions, 1);
	svc_add(&hdr->svc.registered_bytes, (int64_t)len);
}

void stats_region_removed(uint64_t len)
{
	if (!hdr)
		return;
	svc_add(&hdr->svc.regions, -1);
	svc_add(&hdr->svc.registered_bytes, -(int64_t)len);
}

void stats_segment_added(void)
{
	if (hdr)
		svc_add(&hdr->svc.segments, 1);
}

void stats_segment_removed(void)
{
	if (hdr)
		svc_add(&hdr->svc.segments, -1);
}

void stats_session(int sessions, int members, int handles)
{
	if (!hdr)
		return;
	svc_add(&hdr->svc.sessions, sessions);
	svc_add(&hdr->svc.session_members, members);
	svc_add(&hdr->svc.session_handles, handles);
}

void stats_session_question(bool failed)
{
	if (!hdr)
		return;
	svc_add(&hdr->svc.session_questions, 1);
	if (failed)
		svc_add(&hdr->svc.session_question_errors, 1);
}

void stats_peer_known(void)
{
	if (hdr)
		svc_add(&hdr->svc.peers_known, 1);
}

/* ---- rails ---- */

void stats_rail_name(unsigned idx, const char *provider, const char *fabric, const char *domain)
{
	struct dp_stats_rail_info *r;

	if (!hdr || idx >= hdr->nrails)
		return;
	r = rail_info_block(idx);
	r->index = idx;
	snprintf(r->provider, sizeof(r->provider), "%s", provider ? provider : "");
	snprintf(r->fabric, sizeof(r->fabric), "%s", fabric ? fabric : "");
	snprintf(r->domain, sizeof(r->domain), "%s", domain ? domain : "");
	/* Release: a reader that sees the state sees the names. */
	__atomic_store_n(&r->state, 1, __ATOMIC_RELEASE);
}

struct dp_stats_rail *stats_rail(unsigned idx, const struct poller *p)
{
	if (!hdr || idx >= hdr->nrails || p->idx >= hdr->npollers)
		return NULL;
	return (struct dp_stats_rail *)((uint8_t *)hdr + hdr->rails_off +
					((size_t)idx * hdr->npollers + p->idx) * hdr->rail_size);
}
