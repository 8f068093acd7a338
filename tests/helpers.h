/* SPDX-License-Identifier: MIT */
/*
 * helpers.h - the one helper library of the test suites, and the only
 * header of it a test includes: real dataplaned processes and what they
 * tell through the API and the stats region, clients and descriptors run to
 * completion, patterned bytes, a redis-server for the directory suites,
 * ring-stat and the other tools, GPU buffers, private rings. Each section
 * below names the one file that defines it:
 *
 *   helpers_base.c       the clock, patterned bytes, cheap numbers, removing a tree
 *   helpers_proc.c       /proc figures, exits, child processes and pipes, shell commands
 *   helpers_service.c    dataplaned processes, their logs, fault-injection builds
 *   helpers_netns.c      network namespaces
 *   helpers_stats.c      a service's stats region and RPC port
 *   helpers_client.c     clients, regions, segments, descriptors run to completion
 *   helpers_fabric.c     pairs of clients and of services, a peer killed mid-transfer
 *   helpers_bystander.c  bystanders and the service's health
 *   helpers_file.c       scratch files, how the service moved file bytes
 *   helpers_redis.c      a redis-server as the cluster directory
 *   helpers_json.c       a strict JSON parser, for ring-stat --json
 *   helpers_tools.c      ring-stat and the other tools
 *   helpers_gpu.c        GPU buffers (CUDA builds)
 *   helpers_ring.c       private rings
 *
 * Helpers named for a check fail the running Criterion test (cr_assert) when
 * a step fails; the rest return an error the caller checks.
 */
#ifndef DP_TEST_HELPERS_H
#define DP_TEST_HELPERS_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dataplane.h"
#include "dp_ring.h"

#define MiB (1ull << 20)

/* ---- the clock, patterned bytes, cheap numbers (helpers_base.c) ---- */

uint64_t now_ns(void);
void sleep_ms(unsigned ms);
/* Deterministic pattern byte for (seed, offset). */
uint8_t pattern_byte(uint64_t seed, uint64_t off);
void pattern_fill(void *buf, uint64_t len, uint64_t seed);
/* Offset of the first mismatch, or -1 when buf holds the pattern. */
int64_t pattern_check(const void *buf, uint64_t len, uint64_t seed);
/* The pattern of `seed` must be at p[0..len), and the `guard` bytes just
 * outside it (within [lo, hi)) must be untouched. */
void fab_check(const uint8_t *p, uint64_t len, uint64_t seed, const uint8_t *lo, const uint8_t *hi,
	       uint8_t guard, const char *what);
/* xorshift64* and xorshift64 (13, 7, 17): cheap deterministic numbers. */
uint64_t xorshift64s(uint64_t *state);
uint64_t xorshift64(uint64_t *state);
/* qsort order of uint64_t. */
int cmp_u64(const void *a, const void *b);
/* Guard bytes (0x5a) over [off - 64, off + len + 64), clipped to the buffer. */
void guard_fill(uint8_t *buf, uint64_t buf_len, uint64_t off, uint64_t len);
/* Removes `dir` and everything below it, links not followed: 0, or -1
 * with errno. */
int remove_tree(const char *dir);

/* ---- processes (helpers_proc.c) ---- */

/* Open fds and mapped bytes of a process, from /proc. */
int proc_fd_count(pid_t pid);
long proc_mapped_kib(pid_t pid);
long proc_memfd_kib(pid_t pid);
/* CPU time (user + system) the process has used, in clock ticks; its share
 * of one CPU over `ms`. */
long cpu_ticks(pid_t pid);
/* Waits (up to 1 s) until the kernel has stopped pid after a SIGSTOP
 * (state T): what completes afterwards is not its work. */
void wait_stopped(pid_t pid);
double cpu_share(pid_t pid, unsigned ms);
/* A waitpid status as a shell tells it: the exit code, 128 + the signal
 * when one ended the process. */
int exit_code(int status);
/* Waits up to timeout_ms for pid to exit: its exit_code(), or -1 when it
 * still runs. */
int wait_exit(pid_t pid, unsigned timeout_ms);
/* Child processes report through their exit status: 0, or the failed step. */
int wait_child(pid_t pid);
/* One byte through a pipe between a test and its child: pipe_get reads one
 * and tells whether it is `want`; pipe_put writes one, and a process that
 * cannot ends with status 90 (no Criterion in a child). */
bool pipe_get(int fd, char want);
void pipe_put(int fd, char c);
/* Makes pipe `up` (the child writes up[1], the test reads up[0]) and, unless
 * NULL, pipe `down` (the test writes down[1], the child reads down[0]),
 * and forks: each process closes the ends that are the other's. Returns 0
 * in the child and its pid in the test (the test fails if fork fails). */
pid_t fork_piped(int up[2], int down[2]);
/* A child's result of `len` bytes: child_report (in the child) writes it
 * to fd and exits (0, or 2 when the write fails); child_result (in the
 * test) reads exactly `len` bytes from fd, closes it, and the child `pid`
 * must exit 0. */
__attribute__((noreturn)) void child_report(int fd, const void *res, size_t len);
void child_result(pid_t pid, int fd, void *res, size_t len);
/* Runs a shell command built printf-style: its exit status, or -1 when it
 * could not run (ip netns, tc, ...). Its output is shown, on stderr, only
 * when it fails. */
int run_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- service processes (helpers_service.c) ---- */

struct svc {
	pid_t pid;
	char dir[64];	/* private temp dir, removed by svc_stop */
	char sock[108]; /* control socket path */
	char log[128];	/* the service's stderr */
};

#define FAB_NSVC 3

/*
 * The services and the helper process of the running test (each test is a
 * process of its own). A test that fails half-way leaves them to its suite's
 * .fini (svc_teardown, fab_teardown, ...), so that no dataplaned or child
 * outlives the test process.
 */
extern struct svc svc;
extern struct svc fab_svc[FAB_NSVC];
extern pid_t child_pid;

/* Flags for suites that exercise the local path only: without a fabric
 * provider the service starts in a fraction of the time. */
extern const char *const local_only[];

/* Starts build/dataplaned (found through $DP_BUILD) with a private socket and
 * the extra flags given (NULL-terminated), and waits until it accepts
 * clients. Services of a test reach each other through the fabric
 * (--no-same-host is added) unless the flags name a --same-host-socket (the
 * same-host suite). Returns 0 or -errno; on failure the log is printed. */
int svc_start(struct svc *s, const char *const *extra_args);
/* The same, run under a command prefix (NULL-terminated, at most 16 words),
 * e.g. netns_prefix's; the prefix must exec the
 * service in place (same pid). */
int svc_start_in(struct svc *s, const char *const *prefix, const char *const *extra_args);
/* SIGTERM, waits up to 10 s; returns the exit status (or -1 if it had to be
 * killed, 128+sig if it died by a signal). Removes the temp dir. */
int svc_stop(struct svc *s);
/* SIGKILL and reap, for crash tests. A service that had already died of
 * another signal crashed: the test fails, with its log (fab_teardown and
 * svc_teardown check the same). */
void svc_kill(struct svc *s);
/* svc_start/svc_start_in that fail the test when the service does not come
 * up; stop_svc: SIGTERM, and the service must exit 0. */
void start_svc(struct svc *s, const char *const *args);
void start_svc_in(struct svc *s, const char *const *prefix, const char *const *args);
void stop_svc(struct svc *s);
/* .fini of the suites with one service (and a child): kills what is left. */
void svc_teardown(void);
/* .fini of the suites with fab_svc[]; FAB_LOGS=1 prints the services' logs. */
void fab_teardown(void);
/* Path of a binary in the build tree ($DP_BUILD/name). */
const char *build_path(const char *name);
/* Whether the service's log (so far) has a line containing @what; how many. */
bool svc_log_has(const struct svc *s, const char *what);
unsigned svc_log_count(const struct svc *s, const char *what);

/* Fault-injection builds (make faults; docs/reliability.md). */
/* Skips the test unless dataplaned is one (its --help documents DP_FAULTS). */
void need_fault_build(void);
/* The exit report of a fault-injection build ("faults injected: site=N ..."). */
struct injected {
	unsigned long long eagain, post_fail, cq_err, submit, eio, uring_eagain, cuda;
};
/* Stops the service (it must exit 0) and returns what it injected, read from
 * its exit report, the only place that tells. */
struct injected stop_and_count(struct svc *s);

/* ---- network namespaces (helpers_netns.c) ---- */

/* Network namespaces of the multi-host suites. A namespace is entered with
 * `nsenter --net` alone: `ip -n` and `ip netns exec` also remount /sys for
 * the command, which a sandboxed machine (CI's) may refuse while the
 * namespace itself works. netns_add makes `ns` with lo up: 0, or -1 with
 * the reason on stderr (the caller skips). netns_sh runs a command in it
 * (run_sh's contract). netns_prefix fills a service prefix for
 * svc_start_in: {"nsenter", "--net=/run/netns/NS", NULL}, `enter` holding
 * the second word. */
int netns_add(const char *ns);
int netns_sh(const char *ns, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void netns_prefix(const char *ns, char enter[64], const char *prefix[3]);
/* Deletes every namespace netns_add made in this test process. */
void netns_del_all(void);
/* .fini of the suites with fab_svc[] in namespaces: fab_teardown, then
 * netns_del_all. */
void netns_teardown(void);

/* ---- what a service tells through its stats region (helpers_stats.c) ---- */

/* The service's stats region (its default name), mapped read-only; fails the
 * test when it has none. Unmap with stats_unmap. */
const struct dp_stats_header *stats_map(const struct svc *s);
void stats_unmap(const struct dp_stats_header *h);
/* Poller i's block of a mapped stats region. */
const struct dp_stats_poller *poller_block(const struct dp_stats_header *h, unsigned i);
/* The TCP port of the service's peer RPC: the port of its server name
 * ("host:port", dp_server_name()). */
int fab_rpc_port(const struct svc *s);
/* The fabric rails the service opened (from its stats region), and rail i's
 * provider and domain (copied into out). */
unsigned svc_rails(const struct svc *s);
void svc_rail(const struct svc *s, unsigned i, char *provider, size_t plen, char *domain,
	      size_t dlen);
/* A TCP port nobody listens on now, for a service that must keep its port
 * across a restart. */
int fab_free_port(void);

/* ---- clients, regions, segments, descriptors (helpers_client.c) ---- */

struct dp_client *connect_client(const struct svc *s, const char *name);
struct dp_queue *make_queue(struct dp_client *c, uint32_t depth);
/* dp_alloc; `addr` is a pointer to the caller's pointer. */
int alloc_region(struct dp_client *c, size_t len, void *addr);
void export_segment(struct dp_client *c, int region, const char *name, unsigned access);
/* Opens `name` of server `peer` (NULL: this service). */
int open_segment(struct dp_client *c, const char *peer, const char *name, unsigned access);
/* Exports `region` as `name` with `access` and opens it with `open_access`. */
int export_open(struct dp_client *c, int region, const char *name, unsigned access,
		unsigned open_access);
/* A control connection of our own, no libclient: SO_RCVTIMEO timeout_s. */
int raw_connect(const char *sock, int timeout_s);
/* One request (dp_proto.h) on such a connection: its reply must echo the
 * type and the sequence number. Returns the reply's status; *id (unless
 * NULL) gets the id of an id reply (0 when the reply has none). */
int raw_call(int fd, uint16_t type, const void *payload, size_t len, uint32_t *id);
/* The same, passing `nfds` fds (SCM_RIGHTS) with the request. */
int raw_call_with_fds(int fd, uint16_t type, const void *payload, size_t len, const int *fds,
		      int nfds, uint32_t *id);
/* Submits all `n` descriptors (the caller keeps within the queue's credit),
 * retrying while the ring is short; fails after timeout_ms of no progress. */
void submit_all(struct dp_queue *q, const struct dp_desc *d, unsigned n, int timeout_ms);
/* Reaps exactly `n` completions into `out`, in arrival order. */
void reap(struct dp_queue *q, struct dp_cqe *out, unsigned n, int timeout_ms);
/* One descriptor on an otherwise idle queue; its completion, waited for up
 * to `ms`. */
struct dp_cqe run_wait(struct dp_queue *q, const struct dp_desc *d, int ms);
/* The same, which must succeed, move d->len bytes and report the path
 * `flag` (DP_CQE_F_FABRIC or DP_CQE_F_LOCAL). */
void run_ok(struct dp_queue *q, const struct dp_desc *d, uint32_t flag, int timeout_ms);
/* One WRITE (write) or READ of [loff, +len) <-> [toff, +len) with user_data
 * id, run to its completion (run_wait, timeout_ms), which is returned. */
struct dp_cqe run1(struct dp_queue *q, bool write, int lreg, uint64_t loff, int seg, uint64_t toff,
		   uint64_t len, uint64_t id, int timeout_ms);
/* Submits the `n` descriptors (as credit allows) and reaps their
 * completions: out[i] gets that of d[i], found by its user_data (unique in
 * the batch). Each must come exactly once, all within timeout_ms. */
void run_batch(struct dp_queue *q, const struct dp_desc *d, unsigned n, struct dp_cqe *out,
	       int timeout_ms);

/* A client of its own with a source region and an exported destination
 * (each `len` bytes) and a queue of 8: probes whether the service serves. */
struct probe {
	struct dp_client *c;
	struct dp_queue *q;
	uint8_t *src, *dst;
	int rs, seg;
	uint64_t n;
};
void probe_start(struct probe *p, const struct svc *s, size_t len);

/* ---- pairs of clients and of services (helpers_fabric.c) ---- */

/* A segment between two clients: `target` exports a region as `name`
 * (DP_ACCESS_RW); `init` has a region of its own, the segment opened
 * through `peer` (NULL: by name on its own service, or the directory) and a
 * queue. Both regions are `len` bytes, zeroed. */
struct seg_pair {
	struct dp_client *ci, *ct; /* the initiator's and the target's client */
	struct dp_queue *q;	   /* the initiator's, of `depth` */
	int lreg, treg, seg;
	uint8_t *loc, *tgt;
};
void seg_pair_open(struct seg_pair *p, const struct svc *init, const struct svc *target,
		   const char *peer, const char *name, size_t len, uint32_t depth);

/* Two services of the running test on this host, B (fab_svc[1]) started
 * first, then A (fab_svc[0]), each with the fabric provider `prov`,
 * --server-name 127.0.0.1 and its own extra flags (NULL-terminated, or
 * NULL), and a client of this process on each, so that B's memory is
 * checked right here. */
struct fab_pair {
	struct dp_client *ca, *cb;     /* A's client ("initiator"), B's ("target") */
	char peer_b[64];	       /* "127.0.0.1:<B's RPC port>" */
	char sock_a[128], sock_b[128]; /* their same-host sockets (FAB_PAIR_SAME_*) */
	/* fab_pair_seg's: A's region and queue, B's export, opened by A */
	struct dp_queue *q;
	int lreg, treg, seg;
	uint8_t *loc, *tgt;
	uint64_t llen, tlen; /* their sizes */
};
#define FAB_PAIR_SAME_A 1u    /* A takes the same-host path (--same-host-socket) */
#define FAB_PAIR_SAME_B 2u    /* B does */
#define FAB_PAIR_A_UNNAMED 4u /* A keeps its default server name */
void fab_pair_start(struct fab_pair *p, const char *prov, unsigned flags, const char *const *a_more,
		    const char *const *b_more);
/* B exports a zeroed region of `tlen` bytes as `name` (DP_ACCESS_RW); A
 * allocates one of `llen`, opens the export through peer_b and makes a
 * queue of `depth`: p->treg, p->tgt, p->lreg, p->loc, p->seg, p->q. */
void fab_pair_seg(struct fab_pair *p, const char *name, uint64_t llen, uint64_t tlen,
		  uint32_t depth);
/* Closes both clients; each service the test has not stopped itself must
 * exit 0 on SIGTERM. */
void fab_pair_stop(struct fab_pair *p);
/* A transfer of `len` bytes at `loff` in A's region and `toff` in B's. */
struct xfer_shape {
	uint64_t len, loff, toff;
};
/* For each shape i of xs[0..n) of at most `max` bytes, over fab_pair_seg's
 * segment: a WRITE (pattern 10 + i, user_data 100 + i), then a READ back
 * of another pattern (20 + i, user_data 200 + i), each run_ok through the
 * fabric (timeout_ms) and checked byte-accurate with the guard bytes around
 * it untouched; `what` prefixes "WRITE" and "READ" in failures. */
void fab_pair_shapes(struct fab_pair *p, const struct xfer_shape *xs, unsigned n, uint64_t max,
		     int timeout_ms, const char *what);
/* 64 WRITEs in flight at once over 4 queues (fab_pair_seg's, `name`, and
 * three more), then 64 READs back: op i moves op_len(i) bytes (NULL:
 * `stride`) between offset i * stride in A's region and i * stride + 17 in
 * B's. Each completes once, whole, through the fabric, within timeout_ms
 * of its queue's reap, and every byte is checked. */
void fab_pair_many(struct fab_pair *p, const char *name, uint64_t stride,
		   uint64_t (*op_len)(unsigned i), int timeout_ms);

/* How a fabric transfer may fail once its peer is gone. */
bool fabric_error(int status);

/* A peer killed mid-transfer (the fabric suites): descriptors of `len`
 * bytes between lreg and seg (slot i at offset i * len, slots rotating
 * over `inflight`), up to `inflight` in flight, READs on odd user_data
 * when `mixed`, else WRITEs; once `kill_after` have succeeded, kill(arg)
 * ends the peer and 16 more WRITEs are handed over for it. Every
 * descriptor must be answered exactly once, through the fabric, within
 * `answer_ms` of the kill; only fabric_error()s, only after the kill, and
 * at least 16 of them. */
struct kill_run {
	struct dp_queue *q;
	int lreg, seg;
	uint64_t len;
	unsigned inflight, kill_after, answer_ms;
	bool mixed;
	void (*kill)(void *arg);
	void *arg;
	/* what came of it */
	unsigned sent, ok, failed;
	uint64_t t_kill, t_last; /* the kill, the last completion */
};
void fab_kill_run(struct kill_run *r);

/* ---- a bystander in a thread, and the service's health (helpers_bystander.c) ---- */

#define GOOD_LEN (64u * 1024)

/* A bystander: WRITEs a fresh pattern into its own export, READs it back,
 * checks both, over and over, until told to stop. */
struct bystander {
	pthread_t thread;
	atomic_int stop, ready;
	atomic_ulong ops; /* verified round trips */
	atomic_ulong errors;
	char what[160]; /* the first error */
};
void bystander_start(struct bystander *b);
/* Stops it; it must have kept moving verified bytes the whole time. */
void bystander_finish(struct bystander *b);
/* A bystander of the control plane (docs/reliability.md): a client of its own in a
 * thread that makes local control calls, one round every 2 ms: dp_alloc and
 * dp_free of 64 KiB, an open and a close of `name` (a segment exported on
 * that service, opened through `peer`: its server name, or NULL; no open
 * when `name` is NULL), and every
 * tenth round a dp_connect and dp_close. Each call's latency is kept. */
struct ctl_bystander {
	pthread_t thread;
	const struct svc *s;
	char name[64], peer[64];
	atomic_int stop;
	unsigned n;	/* calls measured */
	double *ms;	/* their latencies, sorted once stopped */
	char what[160]; /* the first failed call, or "" */
};
void ctl_bystander_start(struct ctl_bystander *b, const struct svc *s, const char *peer,
			 const char *name);
/* Stops it; every call must have succeeded. Sorts the latencies. */
void ctl_bystander_stop(struct ctl_bystander *b);
/* The latency (ms) at quantile q (0..1) of a stopped bystander; max at 1. */
double ctl_bystander_q(const struct ctl_bystander *b, double q);
void ctl_bystander_free(struct ctl_bystander *b);

/* The service lives, a new client moves bytes through it, and SIGTERM
 * still ends it with status 0. */
void service_still_serves(void);
/* Waits until the service has hung up on `c`: its control calls then fail
 * with -ECONNRESET (a probe that is harmless while it is connected). */
void wait_disconnected(struct dp_client *c, int timeout_ms);
/* Waits until the service holds `want` fds (back to a baseline). */
void wait_fds(int want, int timeout_ms);

/* ---- files (helpers_file.c) ---- */

/* The scratch directory of the running test (file_dir() makes it,
 * file_teardown removes it). /var/tmp rather than /tmp: the latter is often
 * tmpfs, which may refuse O_DIRECT. */
extern char fdir[64];
void file_dir_remove(void);
/* svc_teardown and file_dir_remove. */
void file_teardown(void);
const char *file_dir(void);
/* fdir/name, in one of a few rotating buffers. */
const char *fpath(const char *name);
/* Creates fdir/name with `len` bytes of pattern `seed` (empty when len is
 * 0); returns it open with `flags`. */
int file_make(const char *name, uint64_t len, uint64_t seed, int flags);
/* Offset of the first byte of [off, off + len) of fd that is not pattern
 * `seed` (counted from off), or -1. */
int64_t file_check(int fd, uint64_t off, uint64_t len, uint64_t seed);
/* Whether files in `dir` take O_DIRECT: an aligned 4 KiB write and read. */
bool odirect_works(const char *dir);
/* file_dir(), and whether its files take O_DIRECT; where they do not, a
 * warning says what the test then leaves unchecked (`unchecked`, or no
 * warning when NULL). */
bool file_dir_direct(const char *unchecked);
/* A file completion: its status, bytes and DP_CQE_F_FILE. */
void expect_cqe(struct dp_cqe cqe, int status, uint64_t bytes, const char *what);

/* How the service moved file bytes: O_DIRECT or page-cache slices (from the
 * stats region), and slices through a fixed buffer (from the line the
 * service logs when a file region closes: the stats region has no count). */
struct io_counts {
	unsigned long long direct, direct_bytes, buffered, buffered_bytes;
	unsigned long long fixed;
};
/* What the caller counted so far: regions closed, and the totals. */
struct io_tally {
	unsigned closed;
	uint64_t file_ops; /* file-path completions */
	struct io_counts total;
};
/* Frees file region `region` of `c` (a client of svc), after `completions`
 * more file-path completions than the tally has, and returns the counts
 * since the tally's. */
struct io_counts free_and_count(struct dp_client *c, int region, unsigned completions,
				struct io_tally *t);

/* ---- a redis-server as the cluster directory (helpers_redis.c) ---- */

#define DIR_KEY(name) "dataplane:seg:" name

struct redis_srv {
	pid_t pid;
	int port;
	char dir[64];
	char url[128]; /* redis://127.0.0.1:PORT */
	char password[64];
};
/* The redis-server of the running test; dir_teardown() kills it with the
 * services. */
extern struct redis_srv dir_redis;

/* One command on a fresh connection; the reply (freeReplyObject it) or
 * NULL. A struct redisReply *, declared void * to keep hiredis out of the
 * suites that do not use it. */
void *dir_cmd(const struct redis_srv *r, const char *fmt, ...);
/* An integer command's result, or -1000 when it failed. */
long long dir_int(const struct redis_srv *r, const char *fmt, ...);
/* A string field of a record ("" when absent). */
void dir_hget(const struct redis_srv *r, const char *key, const char *field, char *out, size_t len);
/* Whether redis-server is installed. */
bool dir_have_redis(void);
/* Calls of one command so far (INFO commandstats), -1 when unknown. */
long dir_calls(const struct redis_srv *r, const char *cmd);
/* Starts redis-server on `port` (0: a free one) with nothing persisted, and
 * waits until it answers PING. Skips the test where redis-server is not
 * installed (`make deps` installs it). */
void dir_redis_start(struct redis_srv *r, int port, const char *password);
void dir_redis_kill(struct redis_srv *r);
void dir_teardown(void);
/* Starts service i with the tcp provider and `url` as its directory (NULL:
 * none), records TTL `ttl` seconds, and the extra flags given. */
void dir_svc_start(unsigned i, const char *url, unsigned ttl, const char *const *more);
/* "127.0.0.1:PORT", the server name of service i. */
void dir_server_name(unsigned i, char *out, size_t len);
uint64_t dir_ms_since(uint64_t t0_ns);

/* ---- JSON, a strict parser for ring-stat --json (helpers_json.c) ---- */

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
	enum jtype t;
	bool b;
	double num;
	uint64_t u; /* exact value of a non-negative integer literal */
	bool is_uint;
	char *str;
	size_t n; /* items of an array or object */
	struct jv **items;
	char **keys; /* an object's keys */
};

/* Parses one value; *end points past it (and trailing spaces). NULL on any
 * syntax error. */
struct jv *json_parse(const char *text, const char **end);
void json_free(struct jv *v);
/* Member of an object (NULL when absent or not an object). */
const struct jv *json_get(const struct jv *o, const char *key);
/* "a.b.c" through nested objects. */
const struct jv *json_path(const struct jv *o, const char *path);
/* The integer at path; fails the running Criterion test when it is absent
 * or not a non-negative integer. */
uint64_t json_u64(const struct jv *o, const char *path);

/* ---- ring-stat and the other tools (helpers_tools.c) ---- */

struct tool_run {
	int status; /* exit code, 128 + signal when killed */
	char *out;  /* stdout, NUL-terminated */
	char *err;  /* stderr */
};
/* Runs build/<bin> with args (NULL-terminated), at most 30 s. */
struct tool_run run_tool(const char *bin, const char *const *args);
struct tool_run ring_stat(const char *const *args);
void tool_run_free(struct tool_run *r);
/* ring-stat --json for one sample, parsed; fails the test unless it exits 0
 * with exactly one valid JSON object. */
struct jv *ring_stat_json(const char *const *args);
/* The queue of client pid with queue id qid in a sample, or NULL. */
const struct jv *json_queue(const struct jv *sample, int pid, unsigned qid);
/* A stats region name private to this test process. */
const char *test_region_name(void);

/* ---- GPUs, the gpu_* suites (helpers_gpu.c) ---- */

#ifdef DP_HAVE_CUDA
#include <cuda_runtime_api.h>

#define GPU_FLAGS (DP_CQE_F_LOCAL | DP_CQE_F_GPU)

int gpu_count(void);

/* Every GPU test starts with it: skips where the machine has no device. */
#define GPU_REQUIRE()                                                                              \
	do {                                                                                       \
		if (gpu_count() <= 0)                                                              \
			cr_skip_test("no CUDA device on this machine");                            \
	} while (0)

#define CK(call)                                                                                   \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		cr_assert_eq(e_, cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));            \
	} while (0)

/* cudaMemset, finished: the service's copies run in another process, so
 * GPU work of ours must be complete before a descriptor names its memory. */
void gpu_memset(void *d, int v, size_t len);
/* cudaMalloc'ed and filled: the pattern of @seed, or zeros when seed < 0. */
void *gpu_buf(size_t len, int64_t seed);
/* Reads @len bytes of GPU memory at @d and checks that byte i holds the
 * pattern byte (seed, src_off + i); zeros when seed < 0. */
void gpu_expect(const void *d, size_t len, int64_t seed, uint64_t src_off, const char *what);
int gpu_register(struct dp_client *c, void *ptr, size_t len);
/* One descriptor, which must succeed through the GPU path. */
void gpu_run_one_ok(struct dp_queue *q, const struct dp_desc *d);
/* One descriptor, which must complete with `status` (a -errno) within
 * `timeout_ms`; `what` names it in the failure. */
void gpu_run_one_fails(struct dp_queue *q, const struct dp_desc *d, int status, int timeout_ms,
		       const char *what);
/* gpu_buf(len, seed) registered with `c`: its region. `addr` is a pointer
 * to the caller's pointer, which gets the memory (as alloc_region). */
int gpu_region(struct dp_client *c, size_t len, int64_t seed, void *addr);
#endif

/* ---- private rings, the ring_* suites (helpers_ring.c) ---- */

/* A ring formatted in private heap memory, allocated exactly
 * dp_ring_bytes() long so that ASan reports any access past its end. Binds
 * a producer and a consumer view; returns the memory (free() it) or NULL. */
void *ring_test_new(uint32_t entries, uint32_t entry_size, uint32_t start, struct dp_ring *prod,
		    struct dp_ring *cons);
/* The same with sequence words at seq_off (DP_RING_NO_SEQ: none). */
void *ring_test_new_seq(uint32_t entries, uint32_t entry_size, uint32_t seq_off, uint32_t start,
			struct dp_ring *prod, struct dp_ring *cons);
/* DP_STRESS_SCALE divides the long runs (the TSan build uses 50). */
uint64_t ring_test_scaled(uint64_t n);
/* Pins the calling thread to the `nth` CPU it may run on. With fewer than
 * two CPUs there is nothing to separate the threads with, so it leaves the
 * thread alone and returns 0; 1 when pinned, -1 on error. */
int ring_test_pin(int nth);
void ring_test_relax(void);
/* One round of a spin-wait. After many empty rounds it yields: on a noisy
 * two-core machine (or one core) the thread we wait for may need our CPU. */
void ring_test_spin(uint32_t *rounds);
/* CLOCK_MONOTONIC in seconds. */
double ring_test_now(void);

#endif /* DP_TEST_HELPERS_H */
