/* SPDX-License-Identifier: MIT */
/*
 * dp-bench-service.c - the services dp-bench starts of its own
 * (--dataplaned): a dataplaned with its pollers pinned where the benchmark
 * says, spinning so that it never sleeps during a run, started and stopped
 * around each measurement so that a peer runs with none of ours alive; the
 * CPU lists those services and their clients are placed on, and where P3..P5
 * ran, printed beside their figures. See dp-bench.h.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dp-bench.h"

void fmt_list(char *buf, size_t len, const int *v, int n)
{
	size_t o = 0;

	buf[0] = 0;
	for (int i = 0; i < n && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%d", i ? "," : "", v[i]);
}

int parse_list(const char *s, int *out, int max)
{
	int n = 0;

	while (s && *s) {
		char *end;
		long a = strtol(s, &end, 10), b = a;

		if (end == s || a < 0)
			return -1;
		if (*end == '-') {
			s = end + 1;
			b = strtol(s, &end, 10);
			if (end == s || b < a)
				return -1;
		}
		for (long c = a; c <= b && n < max; c++)
			out[n++] = (int)c;
		if (*end == ',')
			end++;
		else if (*end)
			return -1;
		s = end;
	}
	return n;
}

void scale_cpus(int *svc, int *nsvc, int *cli, int *ncli)
{
	int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN), half = ncpu / 2 ? ncpu / 2 : 1;

	*nsvc = opt.service_cpus ? parse_list(opt.service_cpus, svc, SCALE_MAX_CPUS) : 0;
	*ncli = opt.client_cpus ? parse_list(opt.client_cpus, cli, SCALE_MAX_CPUS) : 0;
	if (*nsvc < 0 || *ncli < 0) {
		fprintf(stderr, "dp-bench: bad CPU list (want e.g. 8-15 or 1,3,5)\n");
		exit(2);
	}
	if (!opt.service_cpus)
		for (*nsvc = 0; *nsvc < half; (*nsvc)++)
			svc[*nsvc] = ncpu > 1 ? ncpu - half + *nsvc : 0;
	if (!opt.client_cpus)
		for (*ncli = 0; *ncli < half; (*ncli)++)
			cli[*ncli] = *ncli;
}

static bool can_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), ok;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

static void pin_set(const int *cpus, int n)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	for (int i = 0; i < n; i++)
		CPU_SET(cpus[i], &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/* dataplaned's command line for service_start_on: argv, NULL-ended, and
 * the numbers it points to. */
struct service_args {
	const char *argv[16];
	char list[512], np[16], spin[16];
};

static void service_args(struct service_args *a, const struct service *s, const int *cpus,
			 unsigned npollers, const char *stats)
{
	int k = 0;

	fmt_list(a->list, sizeof(a->list), cpus, (int)npollers);
	snprintf(a->np, sizeof(a->np), "%u", npollers);
	snprintf(a->spin, sizeof(a->spin), "%u", opt.spin_us);
	a->argv[k++] = "dataplaned";
	a->argv[k++] = "--socket";
	a->argv[k++] = s->sock;
	a->argv[k++] = "--pollers";
	a->argv[k++] = a->np;
	a->argv[k++] = "--cpus";
	a->argv[k++] = a->list;
	a->argv[k++] = "--spin-us";
	a->argv[k++] = a->spin;
	a->argv[k++] = "--log-level";
	a->argv[k++] = "warn";
	a->argv[k++] = "--provider";
	a->argv[k++] = "none";
	a->argv[k++] = stats ? "--stats" : "--no-stats";
	if (stats)
		a->argv[k++] = stats;
	a->argv[k] = NULL;
}

/* Waits for the service's socket to take connections; exit 1 when the
 * service exits first. */
static void service_wait(const struct service *s, const char *log)
{
	int status;

	for (int i = 0; i < 1000 && !can_connect(s->sock); i++) {
		if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
			fprintf(stderr, "dp-bench: %s exited at start (see %s)\n", opt.dataplaned,
				log);
			exit(1);
		}
		usleep(10000);
	}
}

void service_start_on(struct service *s, const int *cpus, unsigned npollers, const char *stats)
{
	struct service_args a;
	char log[128];
	pid_t parent;

	snprintf(s->dir, sizeof(s->dir), "/tmp/dp-bench-svc-XXXXXX");
	if (!mkdtemp(s->dir))
		die("mkdtemp", -errno);
	snprintf(s->sock, sizeof(s->sock), "%s/dp.sock", s->dir);
	snprintf(log, sizeof(log), "%s/dataplaned.log", s->dir);
	service_args(&a, s, cpus, npollers, stats);
	fflush(stdout);
	parent = getpid();
	s->pid = fork();
	if (s->pid < 0)
		die("fork", -errno);
	if (s->pid == 0) {
		/* A dp-bench that dies (die(), a signal) takes its service
		 * along instead of leaving it spinning on --service-cpu. */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) || getppid() != parent)
			_exit(127);
		pin_set(cpus, (int)npollers);
		if (!freopen(log, "w", stderr))
			_exit(127);
		execv(opt.dataplaned, (char *const *)a.argv);
		_exit(127);
	}
	service_wait(s, log);
	opt.socket = s->sock;
}

void service_start(struct service *s, bool stats)
{
	static unsigned n;
	char name[64];

	snprintf(name, sizeof(name), "dp-bench-%d-%u", (int)getpid(), n++);
	service_start_on(s, &opt.service_cpu, 1, stats ? name : NULL);
}

void service_stop(struct service *s)
{
	char path[160];
	int status;

	kill(s->pid, SIGTERM);
	waitpid(s->pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		fprintf(stderr, "dp-bench: dataplaned exited with status %d\n", status);
	snprintf(path, sizeof(path), "%s/dataplaned.log", s->dir);
	unlink(path);
	rmdir(s->dir);
	opt.socket = NULL;
}

static struct service local_svc;

void ours_begin(void)
{
	if (opt.own_service)
		service_start(&local_svc, true);
}

void ours_end(void)
{
	if (opt.own_service)
		service_stop(&local_svc);
}

void print_ours_cpus(void)
{
	if (opt.own_service)
		printf("  CPUs: dataplane poller %d, client %d (a dataplaned of dp-bench's "
		       "own%s)\n",
		       opt.service_cpu, opt.cpu, opt.peers ? ", stopped before the peer ran" : "");
	else
		printf("  CPUs: dataplane: the service at %s (pollers on its own CPUs), client "
		       "%d\n",
		       opt.socket ? opt.socket : "the default socket", opt.cpu);
	report_obj("cpus");
	report_num("poller", opt.own_service ? opt.service_cpu : -1);
	report_num("client", opt.cpu);
	report_end();
	if (opt.peers)
		report_bool("service_stopped_before_peer", opt.own_service);
}
