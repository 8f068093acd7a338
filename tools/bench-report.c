/* SPDX-License-Identifier: MIT */
/* bench-report.c - placement, the dataplaned check, progress lines, JSON
 * results and gnuplot charts for dp-bench and ring-bench. See
 * bench-report.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-report.h"
#include "dp_version.h"
#include "clock.h"

/* ---- placement ---- */

/* The line alone on its cache lines (and the adjacent-line prefetcher's
 * pair); the start line and the results elsewhere. */
struct pingpong_run {
	uint64_t line __attribute__((aligned(128)));
	/* B's answer with two lines: the shape of two rings (a line each
	 * way, each written by one side and polled by the other). */
	uint64_t back __attribute__((aligned(128)));
	int arrived __attribute__((aligned(128)));
	int err;
	int cpu[2];
	unsigned lines;
	uint64_t count;
	double t0, t1;
	double waited[2];
};

/* Nanoseconds this thread has been runnable but waiting for its CPU: the
 * second field of /proc/thread-self/schedstat; 0 where unavailable. */
double runqueue_wait_ns(int fd)
{
	char buf[96], *end;
	ssize_t n = fd < 0 ? -1 : pread(fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return 0;
	buf[n] = 0;
	strtoull(buf, &end, 10);
	return (double)strtoull(end, NULL, 10);
}

static double mono_ns(void)
{
	return (double)dp_now_ns();
}

static void *pingpong_thread(struct pingpong_run *run, int side)
{
	int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	cpu_set_t set;
	uint64_t *back = run->lines == 2 ? &run->back : &run->line;
	double w0;

	CPU_ZERO(&set);
	CPU_SET(run->cpu[side], &set);
	if (run->cpu[side] < 0 || pthread_setaffinity_np(pthread_self(), sizeof(set), &set))
		__atomic_store_n(&run->err, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&run->arrived, 1, __ATOMIC_ACQ_REL);
	while (__atomic_load_n(&run->arrived, __ATOMIC_ACQUIRE) < 2)
		;
	if (__atomic_load_n(&run->err, __ATOMIC_RELAXED))
		goto out;
	w0 = runqueue_wait_ns(fd);
	if (side == 0) {
		run->t0 = mono_ns();
		for (uint64_t i = 0; i < run->count; i++) {
			__atomic_store_n(&run->line, 2 * i + 1, __ATOMIC_RELEASE);
			while (__atomic_load_n(back, __ATOMIC_ACQUIRE) != 2 * i + 2)
				;
		}
		run->t1 = mono_ns();
	} else {
		for (uint64_t i = 0; i < run->count; i++) {
			while (__atomic_load_n(&run->line, __ATOMIC_ACQUIRE) != 2 * i + 1)
				;
			__atomic_store_n(back, 2 * i + 2, __ATOMIC_RELEASE);
		}
	}
	run->waited[side] = runqueue_wait_ns(fd) - w0;
out:
	if (fd >= 0)
		close(fd);
	return NULL;
}

static void *pingpong_a(void *run)
{
	return pingpong_thread(run, 0);
}

static void *pingpong_b(void *run)
{
	return pingpong_thread(run, 1);
}

int bench_pingpong(int cpu_a, int cpu_b, uint64_t round_trips, struct pingpong_result *r)
{
	return bench_pingpong_lines(cpu_a, cpu_b, 1, round_trips, r);
}

int bench_pingpong_lines(int cpu_a, int cpu_b, unsigned lines, uint64_t round_trips,
			 struct pingpong_result *r)
{
	struct pingpong_run *run = mmap(NULL, sizeof(*run), PROT_READ | PROT_WRITE,
					MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	pthread_t ta, tb;
	int err;

	if (run == MAP_FAILED || !round_trips || lines < 1 || lines > 2)
		return -1;
	run->lines = lines;
	run->cpu[0] = cpu_a;
	run->cpu[1] = cpu_b;
	run->count = round_trips;
	if (pthread_create(&ta, NULL, pingpong_a, run))
		return -1;
	if (pthread_create(&tb, NULL, pingpong_b, run)) {
		/* Let A through its start line and out. */
		__atomic_store_n(&run->err, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&run->arrived, 1, __ATOMIC_ACQ_REL);
		pthread_join(ta, NULL);
		return -1;
	}
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	err = run->err;
	r->elapsed_ns = run->t1 - run->t0;
	r->ns = r->elapsed_ns / (double)round_trips;
	r->waited_ns = run->waited[0] + run->waited[1];
	munmap(run, sizeof(*run));
	return err ? -1 : 0;
}

int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

double bench_median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_dbl);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double bench_placement(int cpu_a, int cpu_b, unsigned runs)
{
	struct pingpong_result r;
	double v[64];
	unsigned n = 0, retries = 0;

	if (!runs || runs > 64)
		runs = 5;
	/* One CPU: the two threads would take turns by time slices. */
	if (cpu_a == cpu_b)
		return -1;
	if (bench_pingpong(cpu_a, cpu_b, 20000, &r))
		return -1;
	while (n < runs) {
		if (bench_pingpong(cpu_a, cpu_b, 200000, &r))
			return -1;
		/* Disturbed: another program had one of the CPUs. */
		if (r.waited_ns * 100 > r.elapsed_ns && retries++ < 10)
			continue;
		v[n++] = r.ns;
	}
	return bench_median(v, n);
}

void placement_report(int cpu_a, int cpu_b, double ns, unsigned runs)
{
	if (ns > 0)
		printf("placement: cache-line ping-pong CPU %d <-> CPU %d: %.1f ns round trip "
		       "(median of %u runs)\n",
		       cpu_a, cpu_b, ns, runs);
	else
		printf("placement: cache-line ping-pong CPU %d <-> CPU %d: not measured (the "
		       "same CPU, or one not available)\n",
		       cpu_a, cpu_b);
	report_obj("placement");
	report_str("what", "cache-line ping-pong between the two CPUs, ns per round trip");
	report_arr("cpus");
	report_num(NULL, cpu_a);
	report_num(NULL, cpu_b);
	report_end();
	report_num("round_trip_ns", ns > 0 ? ns : 0.0 / 0.0);
	report_u64("runs", runs);
	report_end();
}

void bench_place_and_pin(int client_cpu, int service_cpu)
{
	placement_report(client_cpu, service_cpu, bench_placement(client_cpu, service_cpu, 5), 5);
	bench_pin(client_cpu);
}

int bench_default_service_cpu(int client_cpu)
{
	return sysconf(_SC_NPROCESSORS_ONLN) < 2 ? 0 : client_cpu == 0 ? 1 : 0;
}

/* ---- dataplaned processes ---- */

static bool read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return false;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	return true;
}

/* The CPU a thread is pinned to, or -1 when it may run on more than one. */
static int pinned_cpu(const char *status)
{
	const char *l = strstr(status, "Cpus_allowed_list:");
	char *end;
	long cpu;

	if (!l)
		return -1;
	l += strlen("Cpus_allowed_list:");
	cpu = strtol(l, &end, 10);
	if (end == l || (*end != '\n' && *end != 0))
		return -1;
	return (int)cpu;
}

static bool cpu_listed(int cpu, const int *cpus, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (cpus[i] == cpu)
			return true;
	return false;
}

#define APPEND(...)                                                                                \
	do {                                                                                       \
		if (off < len)                                                                     \
			off += (size_t)snprintf(desc + off, len - off, __VA_ARGS__);               \
	} while (0)

unsigned services_on_cpus(const int *cpus, unsigned ncpus, char *desc, size_t len)
{
	DIR *proc = opendir("/proc");
	struct dirent *de;
	unsigned hits = 0, nproc = 0;
	size_t off = 0;
	char path[600], buf[4096];

	desc[0] = 0;
	while (proc && (de = readdir(proc))) {
		unsigned pinned = 0;
		DIR *task;
		struct dirent *te;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/comm", de->d_name);
		if (!read_small(path, buf, sizeof(buf)) || strcmp(buf, "dataplaned\n"))
			continue;
		APPEND("%sdataplaned pid %s:", nproc++ ? "; " : "", de->d_name);
		snprintf(path, sizeof(path), "/proc/%s/task", de->d_name);
		task = opendir(path);
		while (task && (te = readdir(task))) {
			char *st;
			int cpu;

			if (te->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "/proc/%s/task/%s/status", de->d_name,
				 te->d_name);
			if (!read_small(path, buf, sizeof(buf)) || (cpu = pinned_cpu(buf)) < 0)
				continue;
			snprintf(path, sizeof(path), "/proc/%s/task/%s/comm", de->d_name,
				 te->d_name);
			/* A poller's vm worker shares its poller's CPU (vm.c). */
			if (read_small(path, buf, sizeof(buf)) && !strcmp(buf, "dp-vm-worker\n"))
				continue;
			snprintf(path, sizeof(path), "/proc/%s/task/%s/stat", de->d_name,
				 te->d_name);
			st = read_small(path, buf, sizeof(buf)) ? strrchr(buf, ')') : NULL;
			APPEND("%s poller on CPU %d (%s)", pinned ? "," : "", cpu,
			       st && st[1] && st[2] == 'R' ? "running" : "sleeping");
			pinned++;
			hits += cpu_listed(cpu, cpus, ncpus);
		}
		if (task)
			closedir(task);
		if (!pinned) {
			/* Unpinned pollers may run anywhere, the peer's CPUs too. */
			APPEND(" no pinned pollers (they may run on any CPU)");
			hits++;
		}
	}
	if (proc)
		closedir(proc);
	if (!nproc)
		snprintf(desc, len, "no dataplaned running");
	return hits;
}

void peer_check_take(struct peer_check *c, const int *cpus, unsigned ncpus)
{
	unsigned hits = services_on_cpus(cpus, ncpus, c->desc, sizeof(c->desc));
	size_t o = 0;

	c->clean = !hits;
	c->none = !strcmp(c->desc, "no dataplaned running");
	c->cpus[0] = 0;
	for (unsigned i = 0; i < ncpus && o < sizeof(c->cpus); i++)
		o += (size_t)snprintf(c->cpus + o, sizeof(c->cpus) - o, "%s%d", i ? "," : "",
				      cpus[i]);
}

void peer_check_print(const struct peer_check *c)
{
	if (c->none)
		printf("  check: no dataplaned running during the peer run\n");
	else if (c->clean)
		printf("  check: no dataplaned poller on the peer's CPUs %s during its run (%s)\n",
		       c->cpus, c->desc);
	else
		printf("  WARNING: dataplaned pollers on the peer's CPUs %s during its run: the "
		       "peer figure is not clean (%s)\n",
		       c->cpus, c->desc);
	report_bool("peer_clean", c->clean);
	report_str("peer_check", c->desc);
}

bool peer_check(const int *cpus, unsigned ncpus)
{
	struct peer_check c;

	peer_check_take(&c, cpus, ncpus);
	peer_check_print(&c);
	return c.clean;
}

/* ---- progress ---- */

#define DRAW_TTY_NS 100000000ull    /* redraw a terminal line every 0.1 s */
#define DRAW_PIPE_NS 5000000000ull  /* a plain line every 5 s when piped */
#define SHOW_AFTER_NS 1000000000ull /* runs shorter than 1 s show nothing */
#define POINT_NS 50000000ull	    /* throughput sample every 50 ms */

static int tty = -1;

void progress_start(struct progress *p, const char *what, uint64_t total)
{
	if (tty < 0)
		tty = isatty(STDERR_FILENO);
	memset(p, 0, sizeof(*p));
	p->what = what;
	p->total = total;
	p->t0 = p->last_draw = p->last_point = dp_now_ns();
	p->t[0] = 0;
	p->n[0] = 0;
	p->npoints = 1;
}

static void fmt_rate(char *b, size_t len, double v)
{
	if (v >= 1e9)
		snprintf(b, len, "%.2fG/s", v / 1e9);
	else if (v >= 1e6)
		snprintf(b, len, "%.2fM/s", v / 1e6);
	else if (v >= 1e3)
		snprintf(b, len, "%.1fk/s", v / 1e3);
	else
		snprintf(b, len, "%.0f/s", v);
}

static void draw(struct progress *p, uint64_t now)
{
	double secs = (double)(now - p->t0) / 1e9, rate = secs > 0 ? (double)p->done / secs : 0;
	double eta = rate > 0 ? (double)(p->total - p->done) / rate : 0;
	char r[32];

	fmt_rate(r, sizeof(r), rate);
	if (tty)
		fprintf(stderr, "\r\033[K  %s  %llu/%llu  %4.1f%%  %s  ETA %.0fs", p->what,
			(unsigned long long)p->done, (unsigned long long)p->total,
			100.0 * (double)p->done / (double)(p->total ? p->total : 1), r, eta);
	else
		fprintf(stderr, "  %s: %llu/%llu (%.1f%%), %s, ETA %.0f s\n", p->what,
			(unsigned long long)p->done, (unsigned long long)p->total,
			100.0 * (double)p->done / (double)(p->total ? p->total : 1), r, eta);
	fflush(stderr);
	p->drawn = true;
	p->last_draw = now;
}

void progress_update(struct progress *p, uint64_t done)
{
	uint64_t now;

	p->done = done;
	if ((++p->calls & 63) && done != p->total)
		return;
	now = dp_now_ns();
	if (now - p->last_point >= POINT_NS && p->npoints < PROGRESS_MAX_POINTS) {
		p->t[p->npoints] = (double)(now - p->t0) / 1e9;
		p->n[p->npoints] = done;
		p->npoints++;
		p->last_point = now;
	}
	if (now - p->t0 >= SHOW_AFTER_NS &&
	    now - p->last_draw >= (tty ? DRAW_TTY_NS : DRAW_PIPE_NS))
		draw(p, now);
}

void progress_end(struct progress *p)
{
	uint64_t now = dp_now_ns();

	if (p->npoints < PROGRESS_MAX_POINTS && p->n[p->npoints - 1] != p->done) {
		p->t[p->npoints] = (double)(now - p->t0) / 1e9;
		p->n[p->npoints] = p->done;
		p->npoints++;
	}
	if (p->drawn && tty)
		fprintf(stderr, "\r\033[K");
	fflush(stderr);
}

/* ---- JSON ---- */

static FILE *json_out; /* the real stdout, while human text goes to stderr */
static char *jbuf;
static size_t jlen;
static FILE *jf;
static bool first[32];
static int depth;

void report_json_begin(void)
{
	int fd;

	fflush(stdout);
	fd = dup(STDOUT_FILENO);
	json_out = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!json_out) {
		fprintf(stderr, "%s: --json: %s\n", program_invocation_short_name, strerror(errno));
		exit(1);
	}
	dup2(STDERR_FILENO, STDOUT_FILENO);
	setvbuf(stdout, NULL, _IOLBF, 0);
	jf = open_memstream(&jbuf, &jlen);
	if (!jf)
		exit(1);
	fputc('{', jf);
	first[0] = true;
	depth = 0;
}

void report_start(const char *tool, const char *what, bool peers)
{
	report_str("tool", tool);
	report_str("version", DP_VERSION_STRING);
	report_str("benchmark", what);
	report_bool("peers", peers);
}

bool report_json(void)
{
	return jf != NULL;
}

static void key_of(const char *key)
{
	if (!first[depth])
		fputc(',', jf);
	first[depth] = false;
	if (key)
		fprintf(jf, "\"%s\":", key);
}

/* What closes each open level: '}' or ']'. */
static char closers[32];

static void open_(const char *key, char c)
{
	if (!jf)
		return;
	key_of(key);
	fputc(c, jf);
	if (depth < 31)
		depth++;
	first[depth] = true;
	closers[depth] = c == '{' ? '}' : ']';
}

void report_obj(const char *key)
{
	open_(key, '{');
}

void report_arr(const char *key)
{
	open_(key, '[');
}

void report_end(void)
{
	if (!jf || !depth)
		return;
	fputc(closers[depth], jf);
	depth--;
}

void report_num(const char *key, double v)
{
	if (!jf)
		return;
	key_of(key);
	if (v != v || v > 1e300 || v < -1e300)
		fputs("null", jf);
	else
		fprintf(jf, "%.6g", v);
}

void report_u64(const char *key, uint64_t v)
{
	if (!jf)
		return;
	key_of(key);
	fprintf(jf, "%llu", (unsigned long long)v);
}

void report_str(const char *key, const char *v)
{
	if (!jf)
		return;
	key_of(key);
	fputc('"', jf);
	for (; *v; v++) {
		if (*v == '"' || *v == '\\')
			fprintf(jf, "\\%c", *v);
		else if ((unsigned char)*v < 0x20)
			fprintf(jf, "\\u%04x", (unsigned char)*v);
		else
			fputc(*v, jf);
	}
	fputc('"', jf);
}

void report_bool(const char *key, bool v)
{
	if (!jf)
		return;
	key_of(key);
	fputs(v ? "true" : "false", jf);
}

void report_close(void)
{
	if (!jf)
		return;
	while (depth)
		report_end();
	fputs("}\n", jf);
	fclose(jf);
	fwrite(jbuf, 1, jlen, json_out);
	fflush(json_out);
	free(jbuf);
	jf = NULL;
}

/* ---- charts ---- */

#define MAX_SERIES 4

static struct {
	char label[96];
	uint64_t *v;
	size_t n;
} lat[MAX_SERIES];
static unsigned nlat;

static struct {
	char label[96];
	double *t, *rate;
	size_t n;
} tput[MAX_SERIES];
static unsigned ntput;

static struct {
	char label[96];
	double y;
} lat_line[MAX_SERIES];
static unsigned nline;

#define SCALE_MAX 16
static struct {
	char title[128];
	unsigned n, npts;
	double x[SCALE_MAX], rate[SCALE_MAX], p99[SCALE_MAX], ideal[SCALE_MAX];
	bool shared[SCALE_MAX];
} scale;

void plot_latency(const char *label, const uint64_t *sorted, size_t n)
{
	if (nlat == MAX_SERIES || !n)
		return;
	lat[nlat].v = malloc(n * sizeof(*sorted));
	if (!lat[nlat].v)
		return;
	memcpy(lat[nlat].v, sorted, n * sizeof(*sorted));
	lat[nlat].n = n;
	snprintf(lat[nlat].label, sizeof(lat[nlat].label), "%s", label);
	nlat++;
}

void plot_throughput(const char *label, const struct progress *p)
{
	size_t k = 0;

	if (ntput == MAX_SERIES || p->npoints < 2)
		return;
	tput[ntput].t = malloc(p->npoints * sizeof(double));
	tput[ntput].rate = malloc(p->npoints * sizeof(double));
	if (!tput[ntput].t || !tput[ntput].rate)
		return;
	for (unsigned i = 1; i < p->npoints; i++) {
		double dt = p->t[i] - p->t[i - 1];

		if (dt <= 0)
			continue;
		tput[ntput].t[k] = p->t[i];
		tput[ntput].rate[k] = (double)(p->n[i] - p->n[i - 1]) / dt / 1e6;
		k++;
	}
	tput[ntput].n = k;
	snprintf(tput[ntput].label, sizeof(tput[ntput].label), "%s", label);
	ntput++;
}

void plot_latency_line(const char *label, double us)
{
	if (nline == MAX_SERIES || !(us > 0))
		return;
	lat_line[nline].y = us;
	snprintf(lat_line[nline].label, sizeof(lat_line[nline].label), "%s", label);
	nline++;
}

void plot_scale(const char *title, const double *n, const double *rate, const double *p99,
		const double *ideal, const bool *shared, unsigned npts)
{
	scale.npts = npts < SCALE_MAX ? npts : SCALE_MAX;
	snprintf(scale.title, sizeof(scale.title), "%s", title);
	for (unsigned i = 0; i < scale.npts; i++) {
		scale.x[i] = n[i];
		scale.rate[i] = rate[i];
		scale.p99[i] = p99[i];
		scale.ideal[i] = ideal[i];
		scale.shared[i] = shared[i];
	}
}

double percentile_sorted(const uint64_t *sorted, size_t n, double pct)
{
	size_t k;

	if (!n)
		return 0;
	/* The smallest sample with at least pct% of them at or below it. */
	k = (size_t)(pct / 100.0 * (double)n + 0.999999);
	k = k ? k - 1 : 0;
	return (double)sorted[k < n ? k : n - 1];
}

static int run_gnuplot(const char *script, char *err, size_t errlen)
{
	int pipefd[2], status;
	ssize_t n;
	pid_t pid;

	if (pipe(pipefd) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(pipefd[1], STDERR_FILENO);
		dup2(pipefd[1], STDOUT_FILENO);
		close(pipefd[0]);
		execlp("gnuplot", "gnuplot", script, (char *)NULL);
		fprintf(stderr, "cannot run gnuplot: %s (install gnuplot-nox)", strerror(errno));
		_exit(127);
	}
	close(pipefd[1]);
	n = read(pipefd[0], err, errlen - 1);
	err[n > 0 ? n : 0] = 0;
	close(pipefd[0]);
	waitpid(pid, &status, 0);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* The x axis of a percentile plot: 1/(1-p), log, labelled in percent. */
static void percentile_axis(FILE *f)
{
	fprintf(f, "set logscale x\nset xrange [2:100000]\n"
		   /* gnuplot reads a tic label as a format: %% is a percent sign. */
		   "set xtics ('50%%%%' 2, '90%%%%' 10, '99%%%%' 100, '99.9%%%%' 1000, "
		   "'99.99%%%%' 10000, '99.999%%%%' 100000)\n"
		   "set xlabel 'percentile (log scale of 1/(1-p))'\n");
}

static int write_script(const char *dir, const char *png, const char *terminal)
{
	char path[512];
	FILE *f;
	unsigned panels = (nlat ? 1 : 0) + (ntput ? 1 : 0) + (scale.npts ? 2 : 0);

	snprintf(path, sizeof(path), "%s/plot.gp", dir);
	f = fopen(path, "w");
	if (!f)
		return -1;
	fprintf(f, "set terminal %s size %u,520 noenhanced\n", terminal,
		panels > 1 ? 700 * panels : 800);
	fprintf(f, "set output '%s'\nset grid\n", png);
	if (panels > 1)
		fprintf(f, "set multiplot layout 1,%u\n", panels);
	if (nlat) {
		/* HdrHistogram's percentile plot: the tail spread out on the right. */
		fprintf(f, "set title 'Latency by percentile, submit to completion'\n");
		percentile_axis(f);
		fprintf(f, "set logscale y\nset ylabel 'latency (us), log scale'\n"
			   "set key top left Left reverse\nplot ");
		for (unsigned i = 0; i < nlat; i++)
			fprintf(f, "%s'%s/lat%u.dat' using 1:2 with lines lw 2 title '%s'",
				i ? ", " : "", dir, i, lat[i].label);
		for (unsigned i = 0; i < nline; i++)
			fprintf(f, "%s%g with lines lw 2 dt 2 title '%s'", nlat || i ? ", " : "",
				lat_line[i].y, lat_line[i].label);
		fprintf(f, "\nunset logscale x\nunset logscale y\nset xtics autofreq\n"
			   "set xrange [*:*]\nset yrange [*:*]\n");
	}
	if (ntput) {
		fprintf(f, "set title 'Throughput over time'\nset xlabel 'time (s)'\n"
			   "set ylabel 'M descriptors/s'\nset yrange [0:*]\nset key bottom "
			   "right\nplot ");
		for (unsigned i = 0; i < ntput; i++)
			fprintf(f, "%s'%s/tput%u.dat' using 1:2 with lines lw 2 title '%s'",
				i ? ", " : "", dir, i, tput[i].label);
		fprintf(f, "\nset yrange [*:*]\n");
	}
	if (scale.npts) {
		fprintf(f,
			"set title '%s: aggregate rate'\nset xlabel 'pollers = clients (N)'\n"
			"set logscale x 2\nset xtics 2\nset ylabel 'M descriptors/s'\n"
			"set yrange [0:*]\nset key top left\n"
			"plot '%s/scale.dat' using 1:2 with linespoints lw 2 pt 7 title "
			"'aggregate', '' using 1:4 with lines dt 2 title '0.8 x N x rate(N=1)', "
			"'' using 1:($5 > 0 ? $2 : 1/0) with points pt 6 ps 3 title 'CPUs "
			"shared'\n",
			scale.title, dir);
		fprintf(f,
			"set title '%s: 64 B WRITE p99'\nset logscale y\n"
			"set ylabel 'p99 (us), log scale'\nset yrange [*:*]\n"
			"plot '%s/scale.dat' using 1:3 with linespoints lw 2 pt 7 title 'p99', "
			"'' using 1:($5 > 0 ? $3 : 1/0) with points pt 6 ps 3 title 'CPUs shared'\n"
			"unset logscale x\nunset logscale y\n",
			scale.title, dir);
	}
	if (panels > 1)
		fprintf(f, "unset multiplot\n");
	fclose(f);
	return 0;
}

int plot_write(const char *png)
{
	char dir[] = "/tmp/dp-bench-plot-XXXXXX", path[512], script[512] = "", err[2048];
	const char *terminals[] = {"pngcairo", "png"};
	int rc = -1;

	if (!nlat && !ntput && !scale.npts) {
		fprintf(stderr, "dp-bench: --plot: nothing to plot (run latency, rate or scale)\n");
		return -1;
	}
	if (!mkdtemp(dir))
		return -1;
	for (unsigned i = 0; i < nlat; i++) {
		FILE *f;
		size_t n = lat[i].n;

		snprintf(path, sizeof(path), "%s/lat%u.dat", dir, i);
		f = fopen(path, "w");
		if (!f)
			goto out;
		/* From the median on, points evenly spread on the 1/(1-p)
		 * axis: x = 1/(1-p), y = the latency at percentile p. */
		for (double x = 2; x <= (double)n && x <= 1e5 * 1.001; x *= 1.02) {
			double p = 1 - 1 / x;

			fprintf(f, "%.4f %.3f\n", x, percentile_sorted(lat[i].v, n, 100 * p) / 1e3);
		}
		fclose(f);
	}
	for (unsigned i = 0; i < ntput; i++) {
		FILE *f;

		snprintf(path, sizeof(path), "%s/tput%u.dat", dir, i);
		f = fopen(path, "w");
		if (!f)
			goto out;
		for (size_t k = 0; k < tput[i].n; k++)
			fprintf(f, "%.4f %.4f\n", tput[i].t[k], tput[i].rate[k]);
		fclose(f);
	}
	if (scale.npts) {
		FILE *f;

		snprintf(path, sizeof(path), "%s/scale.dat", dir);
		f = fopen(path, "w");
		if (!f)
			goto out;
		for (unsigned k = 0; k < scale.npts; k++)
			fprintf(f, "%g %.4f %.3f %.4f %d\n", scale.x[k], scale.rate[k] / 1e6,
				scale.p99[k], scale.ideal[k] / 1e6, scale.shared[k]);
		fclose(f);
	}
	snprintf(script, sizeof(script), "%s/plot.gp", dir);
	for (unsigned t = 0; t < 2 && rc; t++) {
		if (write_script(dir, png, terminals[t]))
			goto out;
		rc = run_gnuplot(script, err, sizeof(err));
	}
	if (rc)
		fprintf(stderr, "dp-bench: --plot %s: gnuplot failed: %s\n", png, err);
out:
	for (unsigned i = 0; i < MAX_SERIES; i++) {
		snprintf(path, sizeof(path), "%s/lat%u.dat", dir, i);
		unlink(path);
		snprintf(path, sizeof(path), "%s/tput%u.dat", dir, i);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/scale.dat", dir);
	unlink(path);
	unlink(script);
	rmdir(dir);
	return rc;
}

void bench_pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}
