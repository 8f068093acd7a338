/* SPDX-License-Identifier: MIT */
/* helpers.c - the test suites' helpers (helpers.h says what each does). */
#include <arpa/inet.h>
#include <dirent.h>
#include <ftw.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "clock.h"
#include "dp_proto.h"
#include "dp_stats.h"
#include "helpers.h"

struct svc svc;
struct svc fab_svc[FAB_NSVC];
pid_t child_pid;
char fdir[64];
struct redis_srv dir_redis;
const char *const local_only[] = {"--provider", "none", NULL};

/* ---- time ---- */

uint64_t now_ns(void)
{
	return dp_now_ns();
}

void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

/* ---- service processes ---- */

const char *build_path(const char *name)
{
	static __thread char path[4][256];
	static __thread int next;
	const char *b = getenv("DP_BUILD");
	char *out = path[next++ & 3];

	snprintf(out, sizeof(path[0]), "%s/%s", b && *b ? b : "build", name);
	return out;
}

static int can_connect(const char *sock)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), ok;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

/* Prints the service's log, each line prefixed with `tag`. */
static void dump_log(const struct svc *s, const char *tag)
{
	char line[1024];
	FILE *f = fopen(s->log, "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		fprintf(stderr, "  [%s] %s", tag, line);
	fclose(f);
}

int svc_start(struct svc *s, const char *const *extra)
{
	return svc_start_in(s, NULL, extra);
}

int svc_start_in(struct svc *s, const char *const *prefix, const char *const *extra)
{
	const char *argv[64];
	int argc = 0, status;
	bool same_host = false;

	memset(s, 0, sizeof(*s));
	snprintf(s->dir, sizeof(s->dir), "/tmp/dp-test-XXXXXX");
	if (!mkdtemp(s->dir))
		return -errno;
	snprintf(s->sock, sizeof(s->sock), "%s/dp.sock", s->dir);
	snprintf(s->log, sizeof(s->log), "%s/dataplaned.log", s->dir);
	for (; prefix && *prefix && argc < 16; prefix++)
		argv[argc++] = *prefix;
	argv[argc++] = build_path("dataplaned");
	argv[argc++] = "--socket";
	argv[argc++] = s->sock;
	argv[argc++] = "--log-level";
	argv[argc++] = "debug";
	/* Short spin: tests share two cores with the service. */
	argv[argc++] = "--spin-us";
	argv[argc++] = "20";
	for (; extra && *extra && argc < 62; extra++) {
		same_host |= !strcmp(*extra, "--same-host-socket");
		argv[argc++] = *extra;
	}
	/* Services of one test talk through the fabric, which is what the
	 * fabric suites test, unless the test names a same-host socket. */
	if (!same_host)
		argv[argc++] = "--no-same-host";
	argv[argc] = NULL;
	s->pid = fork();
	if (s->pid < 0)
		return -errno;
	if (s->pid == 0) {
		FILE *f = freopen(s->log, "w", stderr);

		(void)f;
		/* Stdout to the log too, and no service outlives the test
		 * process (a crashed or timed-out test would leave it
		 * spinning, holding the runner's output pipe open). */
		dup2(STDERR_FILENO, STDOUT_FILENO);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	for (int i = 0; i < 500; i++) {
		if (can_connect(s->sock))
			return 0;
		if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
			dump_log(s, "dataplaned");
			s->pid = 0;
			return -ECHILD;
		}
		sleep_ms(10);
	}
	dump_log(s, "dataplaned");
	svc_kill(s);
	return -ETIMEDOUT;
}

static void remove_dir(struct svc *s)
{
	char path[400], stats[DP_STATS_NAME_MAX];
	DIR *d = opendir(s->dir);
	struct dirent *e;

	/* The stats region a killed service could not remove (its default
	 * name; tests that name one remove it themselves). */
	dp_stats_default_name(s->sock, stats, sizeof(stats));
	shm_unlink(stats);
	if (!d)
		return;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(path, sizeof(path), "%s/%s", s->dir, e->d_name);
			unlink(path);
		}
	closedir(d);
	rmdir(s->dir);
}

/* Where each thread of a hung process is: its kernel stack, and its user
 * stack where gdb is installed. */
static void dump_threads(pid_t pid)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd),
		 "for t in /proc/%d/task/*; do echo \"  thread $(cat $t/comm) ${t##*/}:\"; "
		 "sed 's/^/    /' $t/stack; done 1>&2; "
		 "command -v gdb >/dev/null && timeout 30 gdb -p %d -batch -nx "
		 "-ex 'thread apply all bt' 2>/dev/null | grep -E '^(Thread|#)' 1>&2",
		 (int)pid, (int)pid);
	(void)!system(cmd);
}

int svc_stop(struct svc *s)
{
	int status, rc = -1;

	if (s->pid <= 0)
		return -1;
	kill(s->pid, SIGTERM);
	for (int i = 0; i < 1000; i++) {
		if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
			rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
			break;
		}
		sleep_ms(10);
	}
	if (rc == -1) {
		fprintf(stderr, "dataplaned (pid %d) still running 10 s after SIGTERM:\n",
			(int)s->pid);
		dump_threads(s->pid);
		kill(s->pid, SIGKILL);
		waitpid(s->pid, &status, 0);
	}
	if (rc != 0)
		dump_log(s, "dataplaned");
	s->pid = 0;
	remove_dir(s);
	return rc;
}

/* Kills and reaps s; true when it had died on its own of a signal other
 * than SIGKILL, that is crashed (its log printed): no test ends a service
 * any other way than SIGKILL or svc_stop's SIGTERM. */
static bool svc_reap(struct svc *s)
{
	int status;
	pid_t pid = s->pid;
	bool crashed = false;

	if (pid <= 0)
		return false;
	if (waitpid(pid, &status, WNOHANG) == pid) {
		crashed = WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL;
		if (crashed) {
			fprintf(stderr,
				"dataplaned (pid %d) died of signal %d (%s) during the test\n",
				(int)pid, WTERMSIG(status), strsignal(WTERMSIG(status)));
			dump_log(s, "dataplaned");
		}
	} else {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	s->pid = 0;
	remove_dir(s);
	return crashed;
}

void svc_kill(struct svc *s)
{
	cr_assert(!svc_reap(s), "a dataplaned crashed during the test (its log is above)");
}

void start_svc_in(struct svc *s, const char *const *prefix, const char *const *args)
{
	int rc = svc_start_in(s, prefix, args);

	cr_assert_eq(rc, 0, "svc_start: %s", strerror(-rc));
}

void start_svc(struct svc *s, const char *const *args)
{
	start_svc_in(s, NULL, args);
}

void stop_svc(struct svc *s)
{
	int rc = svc_stop(s);

	cr_assert_eq(rc, 0, "dataplaned exit status %d, want 0", rc);
}

void svc_teardown(void)
{
	int status;

	if (child_pid > 0) {
		kill(child_pid, SIGKILL);
		waitpid(child_pid, &status, 0);
		child_pid = 0;
	}
	svc_kill(&svc);
}

void fab_teardown(void)
{
	bool crashed = false;

	for (unsigned i = 0; i < FAB_NSVC; i++) {
		/* FAB_LOGS=1: the services' logs, for a test that failed. */
		if (fab_svc[i].pid > 0 && getenv("FAB_LOGS")) {
			char tag[16];

			snprintf(tag, sizeof(tag), "service %u", i);
			dump_log(&fab_svc[i], tag);
		}
		crashed |= svc_reap(&fab_svc[i]);
	}
	cr_assert(!crashed, "a dataplaned crashed during the test (its log is above)");
}

unsigned svc_log_count(const struct svc *s, const char *what)
{
	char line[1024];
	unsigned n = 0;
	FILE *f = fopen(s->log, "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, what) != NULL;
	fclose(f);
	return n;
}

bool svc_log_has(const struct svc *s, const char *what)
{
	return svc_log_count(s, what) > 0;
}

int proc_fd_count(pid_t pid)
{
	char path[64];
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n - 2;
}

long proc_mapped_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmSize: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

long cpu_ticks(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	/* Fields after the command: state is 3rd; utime, stime are 14th, 15th. */
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (long)(ut + st);
}

void wait_stopped(pid_t pid)
{
	char path[64], buf[512], *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (int i = 0; i < 1000; i++) {
		FILE *f = fopen(path, "r");

		p = f && fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
		if (f)
			fclose(f);
		if (p && p[1] == ' ' && p[2] == 'T')
			return;
		sleep_ms(1);
	}
	cr_assert_fail("process %d not stopped 1 s after SIGSTOP", (int)pid);
}

double cpu_share(pid_t pid, unsigned ms)
{
	long t0 = cpu_ticks(pid), t1;

	sleep_ms(ms);
	t1 = cpu_ticks(pid);
	return (double)(t1 - t0) / (double)sysconf(_SC_CLK_TCK) / (ms / 1000.0);
}

int wait_child(pid_t pid)
{
	int status;

	cr_assert_eq(waitpid(pid, &status, 0), pid);
	if (pid == child_pid)
		child_pid = 0;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool pipe_get(int fd, char want)
{
	char c;

	return read(fd, &c, 1) == 1 && c == want;
}

void pipe_put(int fd, char c)
{
	if (write(fd, &c, 1) != 1)
		_exit(90);
}

pid_t fork_piped(int up[2], int down[2])
{
	pid_t pid;

	cr_assert_eq(pipe(up), 0);
	if (down)
		cr_assert_eq(pipe(down), 0);
	pid = fork();
	cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
	close(pid ? up[1] : up[0]);
	if (down)
		close(pid ? down[0] : down[1]);
	return pid;
}

void child_report(int fd, const void *res, size_t len)
{
	if (write(fd, res, len) != (ssize_t)len)
		_exit(2);
	_exit(0);
}

void child_result(pid_t pid, int fd, void *res, size_t len)
{
	cr_assert_eq(read(fd, res, len), (ssize_t)len, "the child's result");
	close(fd);
	cr_assert_eq(wait_child(pid), 0);
}

/* ---- what a service tells through the API and its stats region ---- */

const struct dp_stats_header *stats_map(const struct svc *s)
{
	char name[DP_STATS_NAME_MAX];
	const struct dp_stats_header *h;
	struct stat st;
	void *p;
	int fd;

	dp_stats_default_name(s->sock, name, sizeof(name));
	fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
	cr_assert_geq(fd, 0, "stats region %s: %s", name, strerror(errno));
	cr_assert_eq(fstat(fd, &st), 0);
	cr_assert_geq((size_t)st.st_size, sizeof(*h), "stats region %s: %lld bytes", name,
		      (long long)st.st_size);
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	cr_assert_neq(p, MAP_FAILED, "mmap %s: %s", name, strerror(errno));
	h = p;
	cr_assert_eq(__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE), DP_STATS_MAGIC,
		     "%s is not a stats region", name);
	cr_assert_eq(h->abi_version, DP_STATS_ABI_VERSION, "%s: stats ABI %u, want %u", name,
		     h->abi_version, DP_STATS_ABI_VERSION);
	cr_assert_eq(h->region_size, (uint64_t)st.st_size);
	return h;
}

void stats_unmap(const struct dp_stats_header *h)
{
	munmap((void *)h, (size_t)h->region_size);
}

static const struct dp_stats_rail_info *rail_info(const struct dp_stats_header *h, unsigned i)
{
	return (const void *)((const uint8_t *)h + h->rail_info_off +
			      (size_t)i * h->rail_info_size);
}

const struct dp_stats_poller *poller_block(const struct dp_stats_header *h, unsigned i)
{
	return (const void *)((const uint8_t *)h + h->pollers_off + (size_t)i * h->poller_size);
}

int fab_rpc_port(const struct svc *s)
{
	struct dp_client *c = connect_client(s, "rpc-port");
	const char *name = dp_server_name(c), *colon = strrchr(name, ':');
	int port = colon ? atoi(colon + 1) : -1;

	cr_assert_gt(port, 0, "no port in the server name '%s'", name);
	dp_close(c);
	return port;
}

/* The rail blocks are named at start-up, before the service accepts
 * clients: the ones named now are all it opened. */
unsigned svc_rails(const struct svc *s)
{
	const struct dp_stats_header *h = stats_map(s);
	unsigned n = 0;

	while (n < h->nrails && __atomic_load_n(&rail_info(h, n)->state, __ATOMIC_ACQUIRE) == 1)
		n++;
	stats_unmap(h);
	return n;
}

void svc_rail(const struct svc *s, unsigned i, char *provider, size_t plen, char *domain,
	      size_t dlen)
{
	const struct dp_stats_header *h = stats_map(s);
	const struct dp_stats_rail_info *r;

	cr_assert_lt(i, h->nrails, "rail %u of %u blocks", i, h->nrails);
	r = rail_info(h, i);
	cr_assert_eq(__atomic_load_n(&r->state, __ATOMIC_ACQUIRE), 1, "rail %u is not open", i);
	snprintf(provider, plen, "%.*s", (int)sizeof(r->provider), r->provider);
	snprintf(domain, dlen, "%.*s", (int)sizeof(r->domain), r->domain);
	stats_unmap(h);
}

int fab_free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

/* ---- patterned bytes ---- */

uint8_t pattern_byte(uint64_t seed, uint64_t off)
{
	uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull ^ (off >> 3) * 0xbf58476d1ce4e5b9ull;

	return (uint8_t)((x >> 29) + off);
}

void pattern_fill(void *buf, uint64_t len, uint64_t seed)
{
	uint8_t *p = buf;

	for (uint64_t i = 0; i < len; i++)
		p[i] = pattern_byte(seed, i);
}

int64_t pattern_check(const void *buf, uint64_t len, uint64_t seed)
{
	const uint8_t *p = buf;

	for (uint64_t i = 0; i < len; i++)
		if (p[i] != pattern_byte(seed, i))
			return (int64_t)i;
	return -1;
}

void fab_check(const uint8_t *p, uint64_t len, uint64_t seed, const uint8_t *lo, const uint8_t *hi,
	       uint8_t guard, const char *what)
{
	int64_t bad = pattern_check(p, len, seed);

	cr_assert_eq(bad, -1, "%s of %llu B: first wrong byte at %lld", what,
		     (unsigned long long)len, (long long)bad);
	for (const uint8_t *g = p - 64; g < p; g++)
		if (g >= lo)
			cr_assert_eq(*g, guard, "%s: byte %lld before the range overwritten", what,
				     (long long)(g - p));
	for (const uint8_t *g = p + len; g < p + len + 64; g++)
		if (g < hi)
			cr_assert_eq(*g, guard, "%s: byte %lld after the range overwritten", what,
				     (long long)(g - p - len));
}

uint64_t xorshift64s(uint64_t *state)
{
	uint64_t x = *state;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545F4914F6CDD1Dull;
}

uint64_t xorshift64(uint64_t *state)
{
	*state ^= *state << 13;
	*state ^= *state >> 7;
	*state ^= *state << 17;
	return *state;
}

int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* ---- clients, regions, segments, descriptors ---- */

struct dp_client *connect_client(const struct svc *s, const char *name)
{
	struct dp_client *c = NULL;
	int rc = dp_connect(s->sock, name, &c);

	cr_assert_eq(rc, 0, "dp_connect(%s): %s", name, dp_strerror(rc));
	return c;
}

struct dp_queue *make_queue(struct dp_client *c, uint32_t depth)
{
	struct dp_queue *q = NULL;
	int rc = dp_queue_create(c, depth, &q);

	cr_assert_eq(rc, 0, "dp_queue_create(%u): %s", depth, dp_strerror(rc));
	return q;
}

int alloc_region(struct dp_client *c, size_t len, void *addr)
{
	int r = dp_alloc(c, len, 0, (void **)addr);

	cr_assert_geq(r, 0, "dp_alloc(%zu): %s", len, dp_strerror(r));
	return r;
}

void export_segment(struct dp_client *c, int region, const char *name, unsigned access)
{
	int rc = dp_segment_export(c, region, name, access);

	cr_assert_eq(rc, 0, "dp_segment_export(%s): %s", name, dp_strerror(rc));
}

int open_segment(struct dp_client *c, const char *peer, const char *name, unsigned access)
{
	int seg = dp_segment_open(c, peer, name, access);

	cr_assert_geq(seg, 0, "dp_segment_open(%s, %s): %s", peer ? peer : "(self)", name,
		      dp_strerror(seg));
	return seg;
}

int export_open(struct dp_client *c, int region, const char *name, unsigned access,
		unsigned open_access)
{
	export_segment(c, region, name, access);
	return open_segment(c, NULL, name, open_access);
}

int raw_connect(const char *sock, int timeout_s)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timeval tv = {.tv_sec = timeout_s};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect: %s",
		     strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

int raw_call(int fd, uint16_t type, const void *payload, size_t len, uint32_t *id)
{
	static uint32_t seq;
	struct dp_msg_hdr hdr = {.magic = DP_PROTO_MAGIC,
				 .version = DP_PROTO_VERSION,
				 .type = type,
				 .len = (uint32_t)len,
				 .seq = ++seq};
	struct dp_msg_id_reply r = {0};
	_Alignas(8) char buf[DP_MSG_MAX];
	ssize_t n;

	cr_assert_leq(len, sizeof(buf) - sizeof(hdr));
	memcpy(buf, &hdr, sizeof(hdr));
	memcpy(buf + sizeof(hdr), payload, len);
	cr_assert_eq(send(fd, buf, sizeof(hdr) + len, MSG_NOSIGNAL), (ssize_t)(sizeof(hdr) + len));
	n = recv(fd, buf, sizeof(buf), 0);
	cr_assert_geq(n, (ssize_t)(sizeof(hdr) + sizeof(r.status)), "reply to type %u: %zd", type,
		      n);
	memcpy(&hdr, buf, sizeof(hdr));
	cr_assert_eq(hdr.type, type | DP_MSG_REPLY);
	cr_assert_eq(hdr.seq, seq);
	memcpy(&r, buf + sizeof(hdr),
	       (size_t)n - sizeof(hdr) < sizeof(r) ? (size_t)n - sizeof(hdr) : sizeof(r));
	if (id)
		*id = r.id;
	return r.status;
}

void submit_all(struct dp_queue *q, const struct dp_desc *d, unsigned n, int timeout_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull;

	for (unsigned done = 0; done < n;) {
		int k = dp_submit(q, d + done, n - done);

		cr_assert_geq(k, 0, "dp_submit: %s", dp_strerror(k));
		done += (unsigned)k;
		if (!k) {
			cr_assert_lt(now_ns(), deadline, "dp_submit accepted nothing for %d ms",
				     timeout_ms);
			sched_yield();
		}
	}
}

void reap(struct dp_queue *q, struct dp_cqe *out, unsigned n, int timeout_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull;

	for (unsigned got = 0; got < n;) {
		uint64_t t = now_ns();
		int k;

		cr_assert_lt(t, deadline, "%u of %u completions after %d ms", got, n, timeout_ms);
		k = dp_wait(q, out + got, n - got, (int)((deadline - t) / 1000000ull) + 1);
		cr_assert_geq(k, 0, "dp_wait: %s", dp_strerror(k));
		got += (unsigned)k;
	}
}

struct dp_cqe run_wait(struct dp_queue *q, const struct dp_desc *d, int ms)
{
	struct dp_cqe cqe;

	submit_all(q, d, 1, 5000);
	reap(q, &cqe, 1, ms);
	cr_assert_eq(cqe.user_data, d->user_data, "completion for %llu, want %llu",
		     (unsigned long long)cqe.user_data, (unsigned long long)d->user_data);
	return cqe;
}

struct dp_cqe run1(struct dp_queue *q, bool write, int lreg, uint64_t loff, int seg, uint64_t toff,
		   uint64_t len, uint64_t id, int timeout_ms)
{
	struct dp_desc d;

	if (write)
		dp_prep_write(&d, lreg, loff, seg, toff, len, id);
	else
		dp_prep_read(&d, lreg, loff, seg, toff, len, id);
	return run_wait(q, &d, timeout_ms);
}

void guard_fill(uint8_t *buf, uint64_t buf_len, uint64_t off, uint64_t len)
{
	uint64_t lo = off >= 64 ? off - 64 : 0, hi = off + len + 64;

	memset(buf + lo, 0x5a, (hi < buf_len ? hi : buf_len) - lo);
}

void run_ok(struct dp_queue *q, const struct dp_desc *d, uint32_t flag, int timeout_ms)
{
	struct dp_cqe cqe;

	submit_all(q, d, 1, 10000);
	reap(q, &cqe, 1, timeout_ms);
	cr_assert_eq(cqe.user_data, d->user_data, "completion for %llu, want %llu",
		     (unsigned long long)cqe.user_data, (unsigned long long)d->user_data);
	cr_assert_eq(cqe.status, 0, "%s of %llu B: %s", d->opcode == DP_OP_WRITE ? "WRITE" : "READ",
		     (unsigned long long)d->len, dp_strerror(cqe.status));
	cr_assert_eq(cqe.bytes, d->len, "bytes %llu, want %llu", (unsigned long long)cqe.bytes,
		     (unsigned long long)d->len);
	cr_assert_eq(cqe.flags & (DP_CQE_F_FABRIC | DP_CQE_F_LOCAL), flag,
		     "completion flags 0x%x, want path 0x%x", cqe.flags, flag);
}

void probe_start(struct probe *p, const struct svc *s, size_t len)
{
	int rd;

	p->c = connect_client(s, "bystander");
	p->rs = alloc_region(p->c, len, &p->src);
	rd = alloc_region(p->c, len, &p->dst);
	p->seg = export_open(p->c, rd, "bystander", DP_ACCESS_RW, DP_ACCESS_RW);
	p->q = make_queue(p->c, 8);
	p->n = 0;
}

/* `target` exports a region of tlen as `name`; `init` allocates one of
 * llen, opens the export through `peer` and makes a queue. */
static void seg_between(struct seg_pair *p, const char *peer, const char *name, uint64_t llen,
			uint64_t tlen, uint32_t depth)
{
	p->treg = alloc_region(p->ct, tlen, &p->tgt);
	export_segment(p->ct, p->treg, name, DP_ACCESS_RW);
	p->lreg = alloc_region(p->ci, llen, &p->loc);
	p->seg = open_segment(p->ci, peer, name, DP_ACCESS_RW);
	p->q = make_queue(p->ci, depth);
}

void seg_pair_open(struct seg_pair *p, const struct svc *init, const struct svc *target,
		   const char *peer, const char *name, size_t len, uint32_t depth)
{
	p->ci = connect_client(init, "initiator");
	p->ct = connect_client(target, "target");
	seg_between(p, peer, name, len, len, depth);
}

/* args[n..] for one side of a pair: its same-host socket when asked for,
 * then its extra flags; NULL-terminated. */
static void pair_side_args(const char **args, unsigned n, bool same, const char *sock,
			   const char *const *more)
{
	if (same) {
		args[n++] = "--same-host-socket";
		args[n++] = sock;
	}
	for (; more && *more; more++) {
		cr_assert_lt(n, 31, "too many flags for one side of a pair");
		args[n++] = *more;
	}
	args[n] = NULL;
}

void fab_pair_start(struct fab_pair *p, const char *prov, unsigned flags, const char *const *a_more,
		    const char *const *b_more)
{
	/* B: --provider PROV --server-name 127.0.0.1 ...; A: the same, or
	 * only --provider PROV with FAB_PAIR_A_UNNAMED. */
	const char *args[32] = {"--provider", prov, "--server-name", "127.0.0.1"};

	memset(p, 0, sizeof(*p));
	snprintf(p->sock_a, sizeof(p->sock_a), "/tmp/dp-pair-a-%d.peer", (int)getpid());
	snprintf(p->sock_b, sizeof(p->sock_b), "/tmp/dp-pair-b-%d.peer", (int)getpid());
	pair_side_args(args, 4, flags & FAB_PAIR_SAME_B, p->sock_b, b_more);
	start_svc(&fab_svc[1], args);
	pair_side_args(args, flags & FAB_PAIR_A_UNNAMED ? 2 : 4, flags & FAB_PAIR_SAME_A, p->sock_a,
		       a_more);
	start_svc(&fab_svc[0], args);
	snprintf(p->peer_b, sizeof(p->peer_b), "127.0.0.1:%d", fab_rpc_port(&fab_svc[1]));
	p->ca = connect_client(&fab_svc[0], "initiator");
	p->cb = connect_client(&fab_svc[1], "target");
}

void fab_pair_seg(struct fab_pair *p, const char *name, uint64_t llen, uint64_t tlen,
		  uint32_t depth)
{
	struct seg_pair s = {.ci = p->ca, .ct = p->cb};

	seg_between(&s, p->peer_b, name, llen, tlen, depth);
	p->q = s.q;
	p->lreg = s.lreg;
	p->treg = s.treg;
	p->seg = s.seg;
	p->loc = s.loc;
	p->tgt = s.tgt;
	p->llen = llen;
	p->tlen = tlen;
}

void fab_pair_shapes(struct fab_pair *p, const struct xfer_shape *xs, unsigned n, uint64_t max,
		     int timeout_ms, const char *what)
{
	char w[64], r[64];

	snprintf(w, sizeof(w), "%sWRITE", what);
	snprintf(r, sizeof(r), "%sREAD", what);
	for (unsigned i = 0; i < n && xs[i].len <= max; i++) {
		uint64_t len = xs[i].len, lo = xs[i].loff, to = xs[i].toff;
		struct dp_desc d;

		cr_assert_leq(lo + len, p->llen, "shape %u outside A's region", i);
		cr_assert_leq(to + len, p->tlen, "shape %u outside B's export", i);
		/* WRITE: pattern in A's region -> B's segment. */
		guard_fill(p->tgt, p->tlen, to, len);
		pattern_fill(p->loc + lo, len, 10 + i);
		dp_prep_write(&d, p->lreg, lo, p->seg, to, len, 100 + i);
		run_ok(p->q, &d, DP_CQE_F_FABRIC, timeout_ms);
		fab_check(p->tgt + to, len, 10 + i, p->tgt, p->tgt + p->tlen, 0x5a, w);
		/* READ: another pattern in B's segment -> A's region. */
		pattern_fill(p->tgt + to, len, 20 + i);
		guard_fill(p->loc, p->llen, lo, len);
		dp_prep_read(&d, p->lreg, lo, p->seg, to, len, 200 + i);
		run_ok(p->q, &d, DP_CQE_F_FABRIC, timeout_ms);
		fab_check(p->loc + lo, len, 20 + i, p->loc, p->loc + p->llen, 0x5a, r);
	}
}

#define MANY_OPS 64
#define MANY_Q 4

/* A batch of many_ops' completions: each a distinct op of it, whole,
 * through the fabric. */
static void many_check(const struct dp_cqe *cqes, unsigned n, bool *seen, uint64_t base_ud,
		       uint64_t stride, uint64_t (*op_len)(unsigned i))
{
	for (unsigned i = 0; i < n; i++) {
		uint64_t k = cqes[i].user_data - base_ud;

		cr_assert_lt(k, MANY_OPS, "unexpected user_data %llu",
			     (unsigned long long)cqes[i].user_data);
		cr_assert_not(seen[k], "user_data %llu completed twice",
			      (unsigned long long)cqes[i].user_data);
		seen[k] = true;
		cr_assert_eq(cqes[i].status, 0, "op %llu: %s", (unsigned long long)k,
			     dp_strerror(cqes[i].status));
		cr_assert_eq(cqes[i].bytes, op_len ? op_len((unsigned)k) : stride);
		cr_assert_eq(cqes[i].flags & (DP_CQE_F_FABRIC | DP_CQE_F_LOCAL | DP_CQE_F_GPU),
			     DP_CQE_F_FABRIC, "flags 0x%x", cqes[i].flags);
	}
}

/* All of d[] submitted at once over the queues, then reaped and checked. */
static void many_run(struct dp_queue **q, struct dp_desc (*d)[MANY_OPS / MANY_Q], uint64_t base_ud,
		     uint64_t stride, uint64_t (*op_len)(unsigned i), int timeout_ms)
{
	struct dp_cqe cqes[MANY_OPS / MANY_Q];
	bool seen[MANY_OPS] = {0};

	for (unsigned k = 0; k < MANY_Q; k++)
		submit_all(q[k], d[k], MANY_OPS / MANY_Q, 10000);
	for (unsigned k = 0; k < MANY_Q; k++) {
		reap(q[k], cqes, MANY_OPS / MANY_Q, timeout_ms);
		many_check(cqes, MANY_OPS / MANY_Q, seen, base_ud, stride, op_len);
	}
}

void fab_pair_many(struct fab_pair *p, const char *name, uint64_t stride,
		   uint64_t (*op_len)(unsigned i), int timeout_ms)
{
	const uint64_t len = MANY_OPS * stride + 4096;
	struct dp_desc d[MANY_Q][MANY_OPS / MANY_Q];
	struct dp_queue *q[MANY_Q];

	fab_pair_seg(p, name, len, len, 64);
	q[0] = p->q;
	for (unsigned k = 1; k < MANY_Q; k++)
		q[k] = make_queue(p->ca, 64);
	/* WRITEs: op i carries pattern 1000 + i to B's offset i * stride + 17. */
	for (unsigned i = 0; i < MANY_OPS; i++) {
		uint64_t n = op_len ? op_len(i) : stride;

		pattern_fill(p->loc + i * stride, n, 1000 + i);
		dp_prep_write(&d[i % MANY_Q][i / MANY_Q], p->lreg, i * stride, p->seg,
			      i * stride + 17, n, 5000 + i);
	}
	many_run(q, d, 5000, stride, op_len, timeout_ms);
	for (unsigned i = 0; i < MANY_OPS; i++)
		cr_assert_eq(pattern_check(p->tgt + i * stride + 17, op_len ? op_len(i) : stride,
					   1000 + i),
			     -1, "WRITE %u: bytes wrong", i);
	/* READs: pattern 2000 + i back from B into A's zeroed region. */
	for (unsigned i = 0; i < MANY_OPS; i++) {
		uint64_t n = op_len ? op_len(i) : stride;

		pattern_fill(p->tgt + i * stride + 17, n, 2000 + i);
		dp_prep_read(&d[i % MANY_Q][i / MANY_Q], p->lreg, i * stride, p->seg,
			     i * stride + 17, n, 7000 + i);
	}
	memset(p->loc, 0, len);
	many_run(q, d, 7000, stride, op_len, timeout_ms);
	for (unsigned i = 0; i < MANY_OPS; i++)
		cr_assert_eq(
			pattern_check(p->loc + i * stride, op_len ? op_len(i) : stride, 2000 + i),
			-1, "READ %u: bytes wrong", i);
	for (unsigned k = 1; k < MANY_Q; k++)
		dp_queue_destroy(q[k]);
}

void fab_pair_stop(struct fab_pair *p)
{
	dp_close(p->ca);
	dp_close(p->cb);
	for (unsigned i = 0; i < 2; i++)
		if (fab_svc[i].pid > 0)
			cr_assert_eq(svc_stop(&fab_svc[i]), 0, "service %u did not exit cleanly",
				     i);
}

void run_batch(struct dp_queue *q, const struct dp_desc *d, unsigned n, struct dp_cqe *out,
	       int timeout_ms)
{
	unsigned sent = 0, got = 0;
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull;
	unsigned char *seen = calloc(n, 1);
	struct dp_cqe cq[64];

	cr_assert(seen);
	while (got < n) {
		if (sent < n) {
			int k = dp_submit(q, d + sent, n - sent);

			cr_assert_geq(k, 0, "dp_submit: %s", dp_strerror(k));
			sent += (unsigned)k;
		}
		int k = dp_wait(q, cq, 64, 100);

		cr_assert_geq(k, 0, "dp_wait: %s", dp_strerror(k));
		for (int i = 0; i < k; i++) {
			uint64_t ud = cq[i].user_data;
			unsigned at = ud < n && d[ud].user_data == ud ? (unsigned)ud : n;

			for (unsigned j = 0; at == n && j < sent; j++)
				if (d[j].user_data == ud)
					at = j;
			cr_assert_lt(at, n, "unknown user_data %llu", (unsigned long long)ud);
			cr_assert(!seen[at], "two completions for descriptor %llu",
				  (unsigned long long)ud);
			seen[at] = 1;
			out[at] = cq[i];
			got++;
		}
		cr_assert_lt(now_ns(), deadline, "%u of %u completions after %d ms", got, n,
			     timeout_ms);
	}
	free(seen);
}

bool fabric_error(int status)
{
	return status == -EHOSTUNREACH || status == -ETIMEDOUT || status == -EIO ||
	       status == -ECONNRESET;
}

void fab_kill_run(struct kill_run *r)
{
	static struct dp_cqe cqes[256];
	static uint8_t done[4096];
	unsigned reaped = 0;
	struct dp_desc d;

	memset(done, 0, sizeof(done));
	r->sent = r->ok = r->failed = 0;
	r->t_kill = r->t_last = 0;
	for (;;) {
		uint64_t now = now_ns();
		unsigned limit = r->t_kill ? 0 : r->inflight;
		int k;

		while (r->sent - reaped < limit && r->sent < sizeof(done)) {
			uint64_t off = (r->sent % r->inflight) * r->len;

			if (r->mixed && r->sent % 2)
				dp_prep_read(&d, r->lreg, off, r->seg, off, r->len, r->sent);
			else
				dp_prep_write(&d, r->lreg, off, r->seg, off, r->len, r->sent);
			submit_all(r->q, &d, 1, 10000);
			r->sent++;
		}
		if (!r->t_kill && r->ok >= r->kill_after) {
			r->kill(r->arg);
			r->t_kill = now_ns();
			for (unsigned i = 0; i < 16; i++, r->sent++) {
				dp_prep_write(&d, r->lreg, 0, r->seg, 0, r->len, r->sent);
				submit_all(r->q, &d, 1, 10000);
			}
		}
		if (r->t_kill && reaped == r->sent)
			break;
		cr_assert(!r->t_kill || now < r->t_kill + r->answer_ms * 1000000ull,
			  "%u of %u descriptors unanswered %u ms after the peer died",
			  r->sent - reaped, r->sent, r->answer_ms);
		cr_assert(r->t_kill || r->sent < 2048, "no %u transfers in the first 2048",
			  r->kill_after);
		k = dp_wait(r->q, cqes, sizeof(cqes) / sizeof(cqes[0]), 100);
		cr_assert_geq(k, 0, "dp_wait: %s", dp_strerror(k));
		for (int i = 0; i < k; i++) {
			uint64_t ud = cqes[i].user_data;

			cr_assert_lt(ud, r->sent, "unknown user_data %llu", (unsigned long long)ud);
			cr_assert_not(done[ud], "user_data %llu completed twice",
				      (unsigned long long)ud);
			done[ud] = 1;
			/* Every one through the fabric, but those refused
			 * before routing (-ECONNRESET, no path flag): a kill
			 * that lets the owner's client leave first, and a
			 * failed transfer's probe that reaches the owner in
			 * between, find the segment unexported. */
			cr_assert(cqes[i].flags & DP_CQE_F_FABRIC || cqes[i].status == -ECONNRESET,
				  "op %llu: %s, flags %#x", (unsigned long long)ud,
				  dp_strerror(cqes[i].status), cqes[i].flags);
			if (cqes[i].status == 0) {
				r->ok++;
			} else {
				cr_assert(fabric_error(cqes[i].status), "op %llu failed with %s",
					  (unsigned long long)ud, dp_strerror(cqes[i].status));
				cr_assert(r->t_kill, "op %llu failed before the kill: %s",
					  (unsigned long long)ud, dp_strerror(cqes[i].status));
				r->failed++;
			}
			r->t_last = now_ns();
		}
		reaped += (unsigned)k;
	}
	cr_assert_geq(r->failed, 16, "only %u of %u failed after the kill", r->failed, r->sent);
}

/* ---- a bystander in a thread, and the service's health ---- */

static void bystander_fail(struct bystander *b, const char *what, int rc)
{
	if (atomic_fetch_add(&b->errors, 1) == 0)
		snprintf(b->what, sizeof(b->what), "%s: %d (%s)", what, rc, dp_strerror(rc));
}

/* One descriptor, its completion within 5 s; returns its status. */
static int bystander_one(struct dp_queue *q, struct dp_desc *d)
{
	struct dp_cqe cqe;
	int k;

	for (int tries = 0; (k = dp_submit(q, d, 1)) == 0 && tries < 100000; tries++)
		sched_yield();
	if (k != 1)
		return k < 0 ? k : -EAGAIN;
	k = dp_wait(q, &cqe, 1, 5000);
	if (k != 1)
		return k < 0 ? k : -ETIMEDOUT;
	if (cqe.user_data != d->user_data)
		return -EBADMSG;
	if (!cqe.status && cqe.bytes != d->len)
		return -EIO;
	return cqe.status;
}

static void *bystander_main(void *arg)
{
	struct bystander *b = arg;
	struct dp_client *c;
	struct dp_queue *q;
	uint8_t *src, *dst;
	int rs, rd, seg, rc;
	struct dp_desc d;

	if ((rc = dp_connect(svc.sock, "bystander", &c))) {
		bystander_fail(b, "connect", rc);
		atomic_store(&b->ready, 1);
		return NULL;
	}
	rs = dp_alloc(c, 2 * GOOD_LEN, 0, (void **)&src);
	rd = dp_alloc(c, GOOD_LEN, 0, (void **)&dst);
	rc = rs < 0 ? rs : rd < 0 ? rd : dp_segment_export(c, rd, "bystander", DP_ACCESS_RW);
	seg = rc ? rc : dp_segment_open(c, NULL, "bystander", DP_ACCESS_RW);
	rc = seg < 0 ? seg : dp_queue_create(c, 16, &q);
	if (rc < 0) {
		bystander_fail(b, "setup", rc);
		atomic_store(&b->ready, 1);
		dp_close(c);
		return NULL;
	}
	atomic_store(&b->ready, 1);
	for (uint64_t i = 1; !atomic_load(&b->stop); i++) {
		pattern_fill(src, GOOD_LEN, i);
		dp_prep_write(&d, rs, 0, seg, 0, GOOD_LEN, 2 * i);
		if ((rc = bystander_one(q, &d))) {
			bystander_fail(b, "WRITE", rc);
			break;
		}
		if (pattern_check(dst, GOOD_LEN, i) != -1) {
			bystander_fail(b, "WRITE moved the wrong bytes", 0);
			break;
		}
		dp_prep_read(&d, rs, GOOD_LEN, seg, 0, GOOD_LEN, 2 * i + 1);
		if ((rc = bystander_one(q, &d))) {
			bystander_fail(b, "READ", rc);
			break;
		}
		if (pattern_check(src + GOOD_LEN, GOOD_LEN, i) != -1) {
			bystander_fail(b, "READ moved the wrong bytes", 0);
			break;
		}
		atomic_fetch_add(&b->ops, 1);
	}
	dp_close(c);
	return NULL;
}

void bystander_start(struct bystander *b)
{
	memset(b, 0, sizeof(*b));
	cr_assert_eq(pthread_create(&b->thread, NULL, bystander_main, b), 0);
	while (!atomic_load(&b->ready))
		sleep_ms(1);
	cr_assert_eq(atomic_load(&b->errors), 0, "bystander: %s", b->what);
}

void bystander_finish(struct bystander *b)
{
	atomic_store(&b->stop, 1);
	pthread_join(b->thread, NULL);
	cr_assert_eq(atomic_load(&b->errors), 0, "bystander: %s", b->what);
	cr_assert_gt(atomic_load(&b->ops), 0, "the bystander made no progress");
}

#define CTL_BYSTANDER_MAX 20000

static void ctl_bystander_time(struct ctl_bystander *b, uint64_t t0, int rc, const char *what)
{
	if (rc < 0 && !b->what[0])
		snprintf(b->what, sizeof(b->what), "%s: %s", what, dp_strerror(rc));
	if (b->n < CTL_BYSTANDER_MAX)
		b->ms[b->n++] = (double)(now_ns() - t0) / 1e6;
}

static void *ctl_bystander_main(void *arg)
{
	struct ctl_bystander *b = arg;
	struct dp_client *c = NULL;
	int rc = dp_connect(b->s->sock, "ctl-bystander", &c);

	if (rc) {
		snprintf(b->what, sizeof(b->what), "dp_connect: %s", dp_strerror(rc));
		return NULL;
	}
	for (unsigned i = 0; !atomic_load(&b->stop) && !b->what[0]; i++) {
		struct dp_client *c2;
		uint64_t t0 = now_ns();
		void *mem;

		rc = dp_alloc(c, 64 * 1024, 0, &mem);
		ctl_bystander_time(b, t0, rc, "dp_alloc");
		if (rc >= 0) {
			t0 = now_ns();
			rc = dp_free(c, rc);
			ctl_bystander_time(b, t0, rc, "dp_free");
		}
		t0 = now_ns();
		rc = b->name[0] ? dp_segment_open(c, b->peer[0] ? b->peer : NULL, b->name,
						  DP_ACCESS_READ)
				: -1;
		if (b->name[0])
			ctl_bystander_time(b, t0, rc, "dp_segment_open");
		if (rc >= 0) {
			t0 = now_ns();
			rc = dp_segment_close(c, rc);
			ctl_bystander_time(b, t0, rc, "dp_segment_close");
		}
		if (i % 10 == 0) {
			t0 = now_ns();
			rc = dp_connect(b->s->sock, "ctl-bystander-2", &c2);
			ctl_bystander_time(b, t0, rc, "dp_connect");
			if (!rc)
				dp_close(c2);
		}
		sleep_ms(2);
	}
	dp_close(c);
	return NULL;
}

void ctl_bystander_start(struct ctl_bystander *b, const struct svc *s, const char *peer,
			 const char *name)
{
	memset(b, 0, sizeof(*b));
	b->s = s;
	snprintf(b->name, sizeof(b->name), "%s", name ? name : "");
	snprintf(b->peer, sizeof(b->peer), "%s", peer ? peer : "");
	b->ms = calloc(CTL_BYSTANDER_MAX, sizeof(*b->ms));
	cr_assert_not_null(b->ms);
	cr_assert_eq(pthread_create(&b->thread, NULL, ctl_bystander_main, b), 0);
}

static int cmp_ms(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

void ctl_bystander_stop(struct ctl_bystander *b)
{
	atomic_store(&b->stop, 1);
	pthread_join(b->thread, NULL);
	cr_assert_eq(b->what[0], 0, "bystander: %s", b->what);
	cr_assert_gt(b->n, 0, "the bystander made no call");
	qsort(b->ms, b->n, sizeof(*b->ms), cmp_ms);
}

double ctl_bystander_q(const struct ctl_bystander *b, double q)
{
	unsigned i = (unsigned)(q * (b->n - 1) + 0.5);

	return b->ms[i < b->n ? i : b->n - 1];
}

void ctl_bystander_free(struct ctl_bystander *b)
{
	free(b->ms);
	b->ms = NULL;
}

void service_still_serves(void)
{
	struct dp_client *c;
	struct dp_queue *q;
	struct dp_cqe cqe;
	struct dp_desc d;
	uint8_t *a, *b;
	int ra, rb, seg;

	cr_assert_eq(kill(svc.pid, 0), 0, "the service died");
	c = connect_client(&svc, "fresh");
	q = make_queue(c, 8);
	ra = alloc_region(c, 4096, &a);
	rb = alloc_region(c, 4096, &b);
	seg = export_open(c, rb, "fresh", DP_ACCESS_RW, DP_ACCESS_RW);
	pattern_fill(a, 4096, 4242);
	dp_prep_write(&d, ra, 0, seg, 0, 4096, 77);
	cqe = run_wait(q, &d, 5000);
	cr_assert_eq(cqe.status, 0, "fresh client: %s", dp_strerror(cqe.status));
	cr_assert_eq(pattern_check(b, 4096, 4242), -1);
	dp_close(c);
	stop_svc(&svc);
}

void wait_disconnected(struct dp_client *c, int timeout_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int rc;

	while ((rc = dp_segment_close(c, 999)) != -ECONNRESET) {
		cr_assert_eq(rc, -EBADF, "probe: %s", dp_strerror(rc));
		cr_assert_lt(now_ns(), deadline, "still connected after %d ms", timeout_ms);
		sleep_ms(2);
	}
}

void wait_fds(int want, int timeout_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int n;

	while ((n = proc_fd_count(svc.pid)) != want) {
		cr_assert_lt(now_ns(), deadline, "service holds %d fds, baseline %d", n, want);
		sleep_ms(5);
	}
}

/* ---- files ---- */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void file_dir_remove(void)
{
	if (fdir[0])
		nftw(fdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	fdir[0] = 0;
}

void file_teardown(void)
{
	svc_teardown();
	file_dir_remove();
}

const char *file_dir(void)
{
	snprintf(fdir, sizeof(fdir), "/var/tmp/dp-file-XXXXXX");
	cr_assert_not_null(mkdtemp(fdir), "mkdtemp: %s", strerror(errno));
	return fdir;
}

const char *fpath(const char *name)
{
	static char buf[4][256];
	static int next;
	char *p = buf[next++ & 3];

	snprintf(p, sizeof(buf[0]), "%s/%s", fdir, name);
	return p;
}

int file_make(const char *name, uint64_t len, uint64_t seed, int flags)
{
	int fd = open(fpath(name), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	uint8_t *buf;

	cr_assert_geq(fd, 0, "create %s: %s", name, strerror(errno));
	if (len) {
		buf = malloc(len);
		cr_assert_not_null(buf);
		pattern_fill(buf, len, seed);
		for (uint64_t done = 0; done < len;) {
			ssize_t n = pwrite(fd, buf + done, len - done, (off_t)done);

			cr_assert_gt(n, 0, "write %s: %s", name, strerror(errno));
			done += (uint64_t)n;
		}
		free(buf);
	}
	close(fd);
	fd = open(fpath(name), flags | O_CLOEXEC);
	cr_assert_geq(fd, 0, "open %s: %s", name, strerror(errno));
	return fd;
}

int64_t file_check(int fd, uint64_t off, uint64_t len, uint64_t seed)
{
	uint8_t *buf = malloc(len ? len : 1);
	int64_t bad;

	cr_assert_not_null(buf);
	for (uint64_t done = 0; done < len;) {
		ssize_t n = pread(fd, buf + done, len - done, (off_t)(off + done));

		cr_assert_gt(n, 0, "pread at %llu: %s", (unsigned long long)(off + done),
			     n ? strerror(errno) : "end of file");
		done += (uint64_t)n;
	}
	bad = pattern_check(buf, len, seed);
	free(buf);
	return bad;
}

bool odirect_works(const char *dir)
{
	char path[128];
	void *buf;
	bool ok;
	int fd;

	snprintf(path, sizeof(path), "%s/.odirect-probe", dir);
	fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0)
		return false;
	if (posix_memalign(&buf, 4096, 4096)) {
		close(fd);
		return false;
	}
	memset(buf, 1, 4096);
	ok = pwrite(fd, buf, 4096, 0) == 4096 && pread(fd, buf, 4096, 0) == 4096;
	free(buf);
	close(fd);
	unlink(path);
	return ok;
}

bool file_dir_direct(const char *unchecked)
{
	bool direct = odirect_works(file_dir());

	if (!direct && unchecked)
		cr_log_warn("%s does not take O_DIRECT: %s", fdir, unchecked);
	return direct;
}

void expect_cqe(struct dp_cqe cqe, int status, uint64_t bytes, const char *what)
{
	cr_assert_eq(cqe.status, status, "%s: status %d (%s), want %d (%s)", what, cqe.status,
		     dp_strerror(cqe.status), status, dp_strerror(status));
	cr_assert_eq(cqe.bytes, bytes, "%s: %llu bytes, want %llu", what,
		     (unsigned long long)cqe.bytes, (unsigned long long)bytes);
	cr_assert(cqe.flags & DP_CQE_F_FILE, "%s: flags %#x lack DP_CQE_F_FILE", what, cqe.flags);
}

/* The service's file totals: completions through the file path, then the
 * slice counts. In that order: the service publishes a poller's slices
 * before its completions, so a reader that sees a completion sees its
 * slices (dp_stats.h). */
static uint64_t file_totals(const struct dp_stats_header *h, struct io_counts *n)
{
	uint64_t ops = 0;

	for (unsigned i = 0; i < h->npollers; i++)
		ops += __atomic_load_n(&poller_block(h, i)->path_ops[DP_STATS_PATH_FILE],
				       __ATOMIC_ACQUIRE);
	memset(n, 0, sizeof(*n));
	for (unsigned i = 0; i < h->npollers; i++) {
		const struct dp_stats_poller *p = poller_block(h, i);

		n->direct += __atomic_load_n(&p->file_direct_ios, __ATOMIC_RELAXED);
		n->direct_bytes += __atomic_load_n(&p->file_direct_bytes, __ATOMIC_RELAXED);
		n->buffered += __atomic_load_n(&p->file_buffered_ios, __ATOMIC_RELAXED);
		n->buffered_bytes += __atomic_load_n(&p->file_buffered_bytes, __ATOMIC_RELAXED);
	}
	return ops;
}

/* Slices through fixed buffers of the `seen`-th closed file region, from
 * the line the service logs when one closes (before its reply to dp_free). */
static unsigned long long fixed_slices(unsigned seen)
{
	uint64_t deadline = now_ns() + 2000000000ull;

	for (;;) {
		FILE *f = fopen(svc.log, "r");
		unsigned long long fixed = 0;
		char line[512];
		unsigned k = 0;
		bool found = false;

		cr_assert_not_null(f, "%s: %s", svc.log, strerror(errno));
		while (fgets(line, sizeof(line), f)) {
			const char *p = strstr(line, "file region closed: ");
			struct io_counts n;

			if (!p || k++ != seen)
				continue;
			found = sscanf(p,
				       "file region closed: %llu direct I/Os (%llu bytes), %llu "
				       "buffered (%llu bytes), %llu through fixed buffers",
				       &n.direct, &n.direct_bytes, &n.buffered, &n.buffered_bytes,
				       &fixed) == 5;
			break;
		}
		fclose(f);
		if (found)
			return fixed;
		cr_assert_lt(now_ns(), deadline, "no 'file region closed' line in the log");
		sleep_ms(10);
	}
}

struct io_counts free_and_count(struct dp_client *c, int region, unsigned completions,
				struct io_tally *t)
{
	const struct dp_stats_header *h = stats_map(&svc);
	uint64_t deadline = now_ns() + 2000000000ull, ops;
	struct io_counts total, n;
	int rc = dp_free(c, region);

	cr_assert_eq(rc, 0, "dp_free: %s", dp_strerror(rc));
	/* The pollers publish their figures as they loop: wait until the
	 * region's completions show. */
	while ((ops = file_totals(h, &total)) < t->file_ops + completions) {
		cr_assert_lt(now_ns(), deadline,
			     "the stats region shows %llu file completions, want %llu",
			     (unsigned long long)(ops - t->file_ops),
			     (unsigned long long)completions);
		sleep_ms(1);
	}
	stats_unmap(h);
	n.direct = total.direct - t->total.direct;
	n.direct_bytes = total.direct_bytes - t->total.direct_bytes;
	n.buffered = total.buffered - t->total.buffered;
	n.buffered_bytes = total.buffered_bytes - t->total.buffered_bytes;
	n.fixed = fixed_slices(t->closed++);
	t->file_ops = ops;
	t->total = total;
	return n;
}

/* ---- fault-injection builds ---- */

void need_fault_build(void)
{
	char cmd[512], line[256];
	bool found = false;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "'%s' --help 2>&1", build_path("dataplaned"));
	f = popen(cmd, "r");
	cr_assert_not_null(f, "popen %s", cmd);
	while (fgets(line, sizeof(line), f))
		found |= strstr(line, "DP_FAULTS") != NULL;
	pclose(f);
	if (!found)
		cr_skip_test("%s was built without fault injection (make faults builds one with "
			     "FAULTS=1)",
			     build_path("dataplaned"));
}

/* Read through an fd kept open while svc_stop removes the file. */
struct injected stop_and_count(struct svc *s)
{
	struct injected n = {0};
	char line[1024];
	bool found = false;
	FILE *f = fopen(s->log, "r");
	int rc;

	cr_assert_not_null(f, "%s: %s", s->log, strerror(errno));
	rc = svc_stop(s);
	cr_assert_eq(rc, 0, "dataplaned exit status %d, want 0", rc);
	rewind(f);
	while (!found && fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "faults injected: ");

		found = p && sscanf(p,
				    "faults injected: fi_post_eagain=%llu fi_post_fail=%llu "
				    "fi_cq_err=%llu uring_submit=%llu uring_eio=%llu "
				    "uring_eagain=%llu cuda=%llu",
				    &n.eagain, &n.post_fail, &n.cq_err, &n.submit, &n.eio,
				    &n.uring_eagain, &n.cuda) == 7;
	}
	fclose(f);
	cr_assert(found, "no 'faults injected:' line in the service's log");
	return n;
}

/* ---- a redis-server as the cluster directory ---- */

bool dir_have_redis(void)
{
	return system("command -v redis-server >/dev/null 2>&1") == 0;
}

/* A fresh connection (authenticated when the server wants a password);
 * NULL when the server does not answer. */
static redisContext *dir_raw_connect(const struct redis_srv *r)
{
	struct timeval tv = {1, 0};
	redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);

	if (!c || c->err) {
		if (c)
			redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, tv);
	if (r->password[0]) {
		redisReply *rep = redisCommand(c, "AUTH %s", r->password);

		if (rep)
			freeReplyObject(rep);
	}
	return c;
}

static redisReply *dir_vcmd(const struct redis_srv *r, const char *fmt, va_list ap)
{
	redisContext *c = dir_raw_connect(r);
	redisReply *rep;

	if (!c)
		return NULL;
	rep = redisvCommand(c, fmt, ap);
	redisFree(c);
	return rep;
}

void *dir_cmd(const struct redis_srv *r, const char *fmt, ...)
{
	redisReply *rep;
	va_list ap;

	va_start(ap, fmt);
	rep = dir_vcmd(r, fmt, ap);
	va_end(ap);
	return rep;
}

long long dir_int(const struct redis_srv *r, const char *fmt, ...)
{
	redisReply *rep;
	long long v = -1000;
	va_list ap;

	va_start(ap, fmt);
	rep = dir_vcmd(r, fmt, ap);
	va_end(ap);
	if (rep && rep->type == REDIS_REPLY_INTEGER)
		v = rep->integer;
	if (rep)
		freeReplyObject(rep);
	return v;
}

void dir_hget(const struct redis_srv *r, const char *key, const char *field, char *out, size_t len)
{
	redisReply *rep = dir_cmd(r, "HGET %s %s", key, field);

	snprintf(out, len, "%s", rep && rep->type == REDIS_REPLY_STRING ? rep->str : "");
	if (rep)
		freeReplyObject(rep);
}

long dir_calls(const struct redis_srv *r, const char *cmd)
{
	redisReply *rep = dir_cmd(r, "INFO commandstats");
	char pat[64];
	const char *p;
	long n = 0;

	if (!rep || rep->type != REDIS_REPLY_STRING) {
		if (rep)
			freeReplyObject(rep);
		return -1;
	}
	snprintf(pat, sizeof(pat), "cmdstat_%s:calls=", cmd);
	p = strstr(rep->str, pat);
	if (p)
		n = strtol(p + strlen(pat), NULL, 10);
	freeReplyObject(rep);
	return n;
}

void dir_redis_start(struct redis_srv *r, int port, const char *password)
{
	char portstr[16];

	if (!dir_have_redis())
		cr_skip_test("redis-server is not installed (make deps)");
	if (!r->dir[0]) {
		snprintf(r->dir, sizeof(r->dir), "/tmp/dp-redis-XXXXXX");
		cr_assert_not_null(mkdtemp(r->dir), "mkdtemp: %s", strerror(errno));
	}
	r->port = port ? port : fab_free_port();
	snprintf(r->password, sizeof(r->password), "%s", password ? password : "");
	snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%d", r->port);
	snprintf(portstr, sizeof(portstr), "%d", r->port);
	r->pid = fork();
	cr_assert_geq(r->pid, 0);
	if (r->pid == 0) {
		const char *argv[20] = {"redis-server", "--save",     "",	   "--appendonly",
					"no",		"--port",     portstr,	   "--daemonize",
					"no",		"--bind",     "127.0.0.1", "--dir",
					r->dir,		"--loglevel", "warning"};
		int argc = 15;
		FILE *f = freopen("/dev/null", "w", stdout);

		(void)f;
		if (password) {
			argv[argc++] = "--requirepass";
			argv[argc++] = password;
		}
		argv[argc] = NULL;
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	for (int i = 0; i < 500; i++) {
		redisReply *rep = dir_cmd(r, "PING");
		bool up = rep && rep->type == REDIS_REPLY_STATUS;

		if (rep)
			freeReplyObject(rep);
		if (up)
			return;
		cr_assert_eq(waitpid(r->pid, NULL, WNOHANG), 0, "redis-server exited at start");
		sleep_ms(10);
	}
	cr_assert_fail("redis-server on port %d did not answer within 5 s", r->port);
}

void dir_redis_kill(struct redis_srv *r)
{
	if (r->pid <= 0)
		return;
	kill(r->pid, SIGKILL);
	waitpid(r->pid, NULL, 0);
	r->pid = 0;
}

void dir_teardown(void)
{
	char path[160];

	fab_teardown();
	dir_redis_kill(&dir_redis);
	if (dir_redis.dir[0]) {
		snprintf(path, sizeof(path), "rm -rf %s", dir_redis.dir);
		if (system(path))
			fprintf(stderr, "could not remove %s\n", dir_redis.dir);
	}
	memset(&dir_redis, 0, sizeof(dir_redis));
}

void dir_svc_start(unsigned i, const char *url, unsigned ttl, const char *const *more)
{
	const char *args[24] = {"--provider", "tcp", "--server-name", "127.0.0.1"};
	char ttlstr[16];
	unsigned n = 4;

	snprintf(ttlstr, sizeof(ttlstr), "%u", ttl);
	if (url) {
		args[n++] = "--directory";
		args[n++] = url;
		args[n++] = "--directory-ttl";
		args[n++] = ttlstr;
	}
	for (; more && *more && n < 23; more++)
		args[n++] = *more;
	args[n] = NULL;
	start_svc(&fab_svc[i], args);
}

void dir_server_name(unsigned i, char *out, size_t len)
{
	snprintf(out, len, "127.0.0.1:%d", fab_rpc_port(&fab_svc[i]));
}

uint64_t dir_ms_since(uint64_t t0_ns)
{
	return (now_ns() - t0_ns) / 1000000u;
}

/* ---- JSON ---- */

static void skip_ws(const char **p)
{
	while (**p == ' ' || **p == '\t' || **p == '\n' || **p == '\r')
		(*p)++;
}

static char *parse_string(const char **p)
{
	size_t cap = 16, n = 0;
	char *s;

	if (**p != '"')
		return NULL;
	(*p)++;
	s = malloc(cap);
	while (s && **p != '"') {
		char c = **p;

		if (!c || (unsigned char)c < 0x20) {
			free(s);
			return NULL;
		}
		if (c == '\\') {
			(*p)++;
			switch (**p) {
			case '"':
			case '\\':
			case '/':
				c = **p;
				break;
			case 'b':
				c = '\b';
				break;
			case 'f':
				c = '\f';
				break;
			case 'n':
				c = '\n';
				break;
			case 'r':
				c = '\r';
				break;
			case 't':
				c = '\t';
				break;
			case 'u': {
				unsigned v = 0;

				for (int i = 1; i <= 4; i++) {
					char h = (*p)[i];

					v <<= 4;
					if (h >= '0' && h <= '9')
						v |= (unsigned)(h - '0');
					else if (h >= 'a' && h <= 'f')
						v |= (unsigned)(h - 'a' + 10);
					else if (h >= 'A' && h <= 'F')
						v |= (unsigned)(h - 'A' + 10);
					else {
						free(s);
						return NULL;
					}
				}
				*p += 4;
				c = v < 0x80 ? (char)v : '?';
				break;
			}
			default:
				free(s);
				return NULL;
			}
		}
		if (n + 2 > cap) {
			char *t = realloc(s, cap *= 2);

			if (!t) {
				free(s);
				return NULL;
			}
			s = t;
		}
		s[n++] = c;
		(*p)++;
	}
	if (!s)
		return NULL;
	s[n] = 0;
	(*p)++;
	return s;
}

static struct jv *parse_value(const char **p, int depth);

static bool push(struct jv *v, struct jv *item, char *key)
{
	struct jv **items = realloc(v->items, (v->n + 1) * sizeof(*items));
	char **keys;

	if (!items)
		return false;
	v->items = items;
	if (v->t == J_OBJ) {
		keys = realloc(v->keys, (v->n + 1) * sizeof(*keys));
		if (!keys)
			return false;
		v->keys = keys;
		v->keys[v->n] = key;
	}
	v->items[v->n++] = item;
	return true;
}

static struct jv *parse_container(const char **p, int depth, enum jtype t)
{
	struct jv *v = calloc(1, sizeof(*v));
	char close = t == J_OBJ ? '}' : ']';

	if (!v)
		return NULL;
	v->t = t;
	(*p)++;
	skip_ws(p);
	if (**p == close) {
		(*p)++;
		return v;
	}
	for (;;) {
		char *key = NULL;
		struct jv *item;

		skip_ws(p);
		if (t == J_OBJ) {
			key = parse_string(p);
			skip_ws(p);
			if (!key || **p != ':') {
				free(key);
				json_free(v);
				return NULL;
			}
			(*p)++;
		}
		item = parse_value(p, depth + 1);
		if (!item || !push(v, item, key)) {
			free(key);
			json_free(item);
			json_free(v);
			return NULL;
		}
		skip_ws(p);
		if (**p == ',') {
			(*p)++;
			continue;
		}
		if (**p == close) {
			(*p)++;
			return v;
		}
		json_free(v);
		return NULL;
	}
}

/* Past one or more digits at q; NULL when there is none. */
static const char *json_digits(const char *q)
{
	if (!(*q >= '0' && *q <= '9'))
		return NULL;
	while (*q >= '0' && *q <= '9')
		q++;
	return q;
}

static struct jv *parse_value(const char **p, int depth)
{
	struct jv *v;

	if (depth > 64)
		return NULL;
	skip_ws(p);
	switch (**p) {
	case '{':
		return parse_container(p, depth, J_OBJ);
	case '[':
		return parse_container(p, depth, J_ARR);
	case '"': {
		char *s = parse_string(p);

		if (!s)
			return NULL;
		v = calloc(1, sizeof(*v));
		if (!v) {
			free(s);
			return NULL;
		}
		v->t = J_STR;
		v->str = s;
		return v;
	}
	}
	v = calloc(1, sizeof(*v));
	if (!v)
		return NULL;
	if (!strncmp(*p, "true", 4) || !strncmp(*p, "false", 5)) {
		v->t = J_BOOL;
		v->b = **p == 't';
		*p += v->b ? 4 : 5;
		return v;
	}
	if (!strncmp(*p, "null", 4)) {
		*p += 4;
		return v;
	}
	{
		const char *s = *p, *q = s;
		bool integer = true;
		char *end;

		if (*q == '-') {
			q++;
			integer = false;
		}
		if (!(*q >= '0' && *q <= '9') || (*q == '0' && q[1] >= '0' && q[1] <= '9')) {
			free(v);
			return NULL;
		}
		q = json_digits(q);
		if (*q == '.') {
			integer = false;
			q = json_digits(q + 1);
		}
		if (q && (*q == 'e' || *q == 'E')) {
			integer = false;
			q++;
			if (*q == '+' || *q == '-')
				q++;
			q = json_digits(q);
		}
		if (!q) {
			free(v);
			return NULL;
		}
		v->t = J_NUM;
		v->num = strtod(s, &end);
		if (integer) {
			v->u = strtoull(s, NULL, 10);
			v->is_uint = true;
		}
		*p = q;
		return v;
	}
}

struct jv *json_parse(const char *text, const char **end)
{
	const char *p = text;
	struct jv *v = parse_value(&p, 0);

	skip_ws(&p);
	if (end)
		*end = p;
	return v;
}

void json_free(struct jv *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->n; i++) {
		json_free(v->items[i]);
		if (v->keys)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	free(v->str);
	free(v);
}

const struct jv *json_get(const struct jv *o, const char *key)
{
	if (!o || o->t != J_OBJ)
		return NULL;
	for (size_t i = 0; i < o->n; i++)
		if (!strcmp(o->keys[i], key))
			return o->items[i];
	return NULL;
}

const struct jv *json_path(const struct jv *o, const char *path)
{
	char key[128];

	while (o && *path) {
		size_t n = strcspn(path, ".");

		if (n >= sizeof(key))
			return NULL;
		memcpy(key, path, n);
		key[n] = 0;
		o = json_get(o, key);
		path += n + (path[n] == '.');
	}
	return o;
}

uint64_t json_u64(const struct jv *o, const char *path)
{
	const struct jv *v = json_path(o, path);

	cr_assert(v && v->t == J_NUM && v->is_uint, "JSON field '%s' missing or not an integer",
		  path);
	return v->u;
}

/* ---- ring-stat and the other tools ---- */

static char *slurp_fd(int fd)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	ssize_t k;

	lseek(fd, 0, SEEK_SET);
	while (buf && (k = read(fd, buf + n, cap - n - 1)) > 0) {
		n += (size_t)k;
		if (cap - n < 2) {
			char *t = realloc(buf, cap *= 2);

			if (!t)
				break;
			buf = t;
		}
	}
	if (buf)
		buf[n] = 0;
	close(fd);
	return buf;
}

struct tool_run run_tool(const char *bin, const char *const *args)
{
	char out_path[] = "/tmp/dp-tool-out-XXXXXX", err_path[] = "/tmp/dp-tool-err-XXXXXX";
	int out = mkstemp(out_path), err = mkstemp(err_path), status = 0;
	struct tool_run r = {.status = -1};
	const char *argv[32];
	int argc = 0;
	pid_t pid;

	cr_assert(out >= 0 && err >= 0, "mkstemp");
	unlink(out_path);
	unlink(err_path);
	argv[argc++] = build_path(bin);
	for (; args && *args && argc < 31; args++)
		argv[argc++] = *args;
	argv[argc] = NULL;
	pid = fork();
	cr_assert(pid >= 0, "fork");
	if (pid == 0) {
		dup2(out, 1);
		dup2(err, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	for (int i = 0; i < 3000; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid) {
			r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
			break;
		}
		sleep_ms(10);
	}
	if (r.status == -1) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		cr_assert_fail("%s did not finish within 30 s", bin);
	}
	r.out = slurp_fd(out);
	r.err = slurp_fd(err);
	return r;
}

struct tool_run ring_stat(const char *const *args)
{
	return run_tool("ring-stat", args);
}

void tool_run_free(struct tool_run *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}

struct jv *ring_stat_json(const char *const *args)
{
	struct tool_run r = ring_stat(args);
	const char *end;
	struct jv *v;

	cr_assert_eq(r.status, 0, "ring-stat exit %d: %s", r.status, r.err);
	v = json_parse(r.out, &end);
	cr_assert(v && v->t == J_OBJ && !*end, "ring-stat --json printed invalid JSON:\n%s", r.out);
	tool_run_free(&r);
	return v;
}

const struct jv *json_queue(const struct jv *sample, int pid, unsigned qid)
{
	const struct jv *qs = json_get(sample, "queues");

	cr_assert(qs && qs->t == J_ARR, "no queues array");
	for (size_t i = 0; i < qs->n; i++)
		if (json_u64(qs->items[i], "pid") == (uint64_t)pid &&
		    json_u64(qs->items[i], "queue") == qid)
			return qs->items[i];
	return NULL;
}

const char *test_region_name(void)
{
	static char name[64];
	static int seq;

	snprintf(name, sizeof(name), "dp-test-stats-%d-%d", (int)getpid(), seq++);
	return name;
}

/* ---- GPUs ---- */

#ifdef DP_HAVE_CUDA
int gpu_count(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess)
		n = 0;
	return n;
}

void gpu_memset(void *d, int v, size_t len)
{
	CK(cudaMemset(d, v, len));
	CK(cudaDeviceSynchronize());
}

void *gpu_buf(size_t len, int64_t seed)
{
	void *d = NULL, *h;

	CK(cudaMalloc(&d, len));
	if (seed < 0) {
		gpu_memset(d, 0, len);
		return d;
	}
	h = malloc(len);
	cr_assert(h);
	pattern_fill(h, len, (uint64_t)seed);
	CK(cudaMemcpy(d, h, len, cudaMemcpyHostToDevice));
	/* From pageable memory the call may return before the DMA is done. */
	CK(cudaDeviceSynchronize());
	free(h);
	return d;
}

void gpu_expect(const void *d, size_t len, int64_t seed, uint64_t src_off, const char *what)
{
	uint8_t *h = malloc(len);

	cr_assert(h);
	CK(cudaMemcpy(h, d, len, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < len; i++) {
		uint8_t want = seed < 0 ? 0 : pattern_byte((uint64_t)seed, src_off + i);

		if (h[i] != want) {
			uint8_t got = h[i];

			free(h);
			cr_assert_fail("%s: byte %zu is 0x%02x, want 0x%02x", what, i, got, want);
		}
	}
	free(h);
}

int gpu_register(struct dp_client *c, void *ptr, size_t len)
{
	int r = dp_register_cuda(c, ptr, len);

	cr_assert_geq(r, 0, "dp_register_cuda(%zu bytes): %s", len, dp_strerror(r));
	return r;
}

void gpu_run_one_ok(struct dp_queue *q, const struct dp_desc *d)
{
	struct dp_cqe cqe;

	run_batch(q, d, 1, &cqe, 30000);
	cr_assert_eq(cqe.status, 0, "status %d (%s)", cqe.status, dp_strerror(cqe.status));
	cr_assert_eq(cqe.bytes, d->len, "bytes %llu, want %llu", (unsigned long long)cqe.bytes,
		     (unsigned long long)d->len);
	cr_assert_eq(cqe.flags, GPU_FLAGS, "flags 0x%x, want LOCAL|GPU", cqe.flags);
}

void gpu_run_one_fails(struct dp_queue *q, const struct dp_desc *d, int status, int timeout_ms,
		       const char *what)
{
	struct dp_cqe cqe;

	run_batch(q, d, 1, &cqe, timeout_ms);
	cr_assert_eq(cqe.status, status, "%s: status %d (%s), want %d (%s)", what, cqe.status,
		     dp_strerror(cqe.status), status, dp_strerror(status));
}

int gpu_region(struct dp_client *c, size_t len, int64_t seed, void *addr)
{
	void *p = gpu_buf(len, seed);

	*(void **)addr = p;
	return gpu_register(c, p, len);
}
#endif /* DP_HAVE_CUDA */

/* ---- private rings ---- */

void *ring_test_new(uint32_t entries, uint32_t entry_size, uint32_t start, struct dp_ring *prod,
		    struct dp_ring *cons)
{
	return ring_test_new_seq(entries, entry_size, DP_RING_NO_SEQ, start, prod, cons);
}

void *ring_test_new_seq(uint32_t entries, uint32_t entry_size, uint32_t seq_off, uint32_t start,
			struct dp_ring *prod, struct dp_ring *cons)
{
	size_t bytes = dp_ring_bytes(entries, entry_size);
	void *mem = aligned_alloc(DP_RING_ALIGN, bytes);

	if (!mem)
		return NULL;
	if (dp_ring_format_seq(mem, bytes, entries, entry_size, seq_off, start) ||
	    dp_ring_bind(prod, mem, DP_RING_PRODUCER) ||
	    dp_ring_bind(cons, mem, DP_RING_CONSUMER)) {
		free(mem);
		return NULL;
	}
	return mem;
}

uint64_t ring_test_scaled(uint64_t n)
{
	const char *s = getenv("DP_STRESS_SCALE");
	long div = s && *s ? strtol(s, NULL, 10) : 1;

	if (div < 1)
		div = 1;
	n /= (uint64_t)div;
	return n ? n : 1;
}

int ring_test_pin(int nth)
{
	cpu_set_t allowed, one;
	int seen = 0;

	if (sched_getaffinity(0, sizeof(allowed), &allowed))
		return -1;
	if (CPU_COUNT(&allowed) < 2)
		return 0;
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &allowed) || seen++ != nth)
			continue;
		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		return pthread_setaffinity_np(pthread_self(), sizeof(one), &one) ? -1 : 1;
	}
	return 0;
}

void ring_test_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

void ring_test_spin(uint32_t *rounds)
{
	if (++*rounds % 1024 == 0)
		sched_yield();
	else
		ring_test_relax();
}

double ring_test_now(void)
{
	return (double)now_ns() * 1e-9;
}

int run_sh(const char *fmt, ...)
{
	char cmd[512], full[600], out[1024];
	size_t n = 0;
	va_list ap;
	FILE *f;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	/* The output is kept, and shown only when the command fails, so a
	 * failure on a machine nobody can log into says why. */
	snprintf(full, sizeof(full), "%s 2>&1", cmd);
	f = popen(full, "r");
	if (!f)
		return -1;
	while (n < sizeof(out) - 1) {
		size_t got = fread(out + n, 1, sizeof(out) - 1 - n, f);

		if (!got)
			break;
		n += got;
	}
	while (fread(full, 1, sizeof(full), f) > 0)
		; /* drain the rest so the command is not killed by SIGPIPE */
	out[n] = 0;
	st = pclose(f);
	if (st == -1)
		return -1;
	if (WEXITSTATUS(st) || !WIFEXITED(st))
		fprintf(stderr, "run_sh: '%s' exited %d: %s%s", cmd,
			WIFEXITED(st) ? WEXITSTATUS(st) : -1, n ? out : "(no output)\n",
			n && out[n - 1] != '\n' ? "\n" : "");
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The namespaces netns_add made in this test process, for netns_del_all. */
static char netns_made[8][32];
static unsigned netns_nmade;

int netns_add(const char *ns)
{
	cr_assert_lt(netns_nmade, 8, "more namespaces than netns_del_all keeps");
	cr_assert_lt(strlen(ns), sizeof(netns_made[0]), "namespace name %s too long", ns);
	if (run_sh("ip netns add %s", ns))
		return -1;
	if (netns_sh(ns, "ip link set lo up")) {
		run_sh("ip netns del %s", ns);
		return -1;
	}
	snprintf(netns_made[netns_nmade++], sizeof(netns_made[0]), "%s", ns);
	return 0;
}

void netns_del_all(void)
{
	while (netns_nmade)
		run_sh("ip netns del %s", netns_made[--netns_nmade]);
}

void netns_teardown(void)
{
	fab_teardown(); /* the services first: they hold the namespaces */
	netns_del_all();
}

int netns_sh(const char *ns, const char *fmt, ...)
{
	char cmd[448];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return run_sh("nsenter --net=/run/netns/%s %s", ns, cmd);
}

void netns_prefix(const char *ns, char enter[64], const char *prefix[3])
{
	snprintf(enter, 64, "--net=/run/netns/%s", ns);
	prefix[0] = "nsenter";
	prefix[1] = enter;
	prefix[2] = NULL;
}
