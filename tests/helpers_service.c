/* SPDX-License-Identifier: MIT */
/*
 * helpers_service.c - dataplaned processes of a test: started with a
 * private socket and log, stopped, killed, reaped by the suites' .fini;
 * what their logs say, fault-injection builds and their exit report.
 */
#include <sys/prctl.h>
#include <sys/un.h>

#include "dp_stats.h"
#include "helpers.h"

struct svc svc;
struct svc fab_svc[FAB_NSVC];
pid_t child_pid;
const char *const local_only[] = {"--provider", "none", NULL};

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

/* The service's command line in argv[0..63]: the prefix, dataplaned with
 * the socket and log level of a test, the extra flags. */
static void svc_argv(const struct svc *s, const char *const *prefix, const char *const *extra,
		     const char **argv)
{
	int argc = 0;
	bool same_host = false;

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
}

/* In the child: the service, its stdout and stderr into its log. */
__attribute__((noreturn)) static void svc_exec(const struct svc *s, const char **argv)
{
	FILE *f = freopen(s->log, "w", stderr);

	(void)f;
	/* Stdout to the log too, and no service outlives the test process (a
	 * crashed or timed-out test would leave it spinning, holding the
	 * runner's output pipe open). */
	dup2(STDERR_FILENO, STDOUT_FILENO);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	execvp(argv[0], (char *const *)argv);
	_exit(127);
}

/* Waits up to 5 s until the service accepts clients. */
static int svc_wait_up(struct svc *s)
{
	int status;

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

int svc_start_in(struct svc *s, const char *const *prefix, const char *const *extra)
{
	const char *argv[64];

	memset(s, 0, sizeof(*s));
	snprintf(s->dir, sizeof(s->dir), "/tmp/dp-test-XXXXXX");
	if (!mkdtemp(s->dir))
		return -errno;
	snprintf(s->sock, sizeof(s->sock), "%s/dp.sock", s->dir);
	snprintf(s->log, sizeof(s->log), "%s/dataplaned.log", s->dir);
	svc_argv(s, prefix, extra, argv);
	s->pid = fork();
	if (s->pid < 0)
		return -errno;
	if (s->pid == 0)
		svc_exec(s, argv);
	return svc_wait_up(s);
}

static void remove_dir(struct svc *s)
{
	char stats[DP_STATS_NAME_MAX];

	/* The stats region a killed service could not remove (its default
	 * name; tests that name one remove it themselves). */
	dp_stats_default_name(s->sock, stats, sizeof(stats));
	shm_unlink(stats);
	remove_tree(s->dir);
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
	int status, rc;

	if (s->pid <= 0)
		return -1;
	kill(s->pid, SIGTERM);
	rc = wait_exit(s->pid, 10000);
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

	cr_assert_not_null(f, "%s: %s", s->log, strerror(errno));
	stop_svc(s);
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
