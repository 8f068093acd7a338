/* SPDX-License-Identifier: MIT */
/* fixture.c - start, stop and inspect real dataplaned processes. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dp_stats.h"
#include "fixture.h"

const char *build_path(const char *name)
{
	static __thread char path[4][256];
	static __thread int next;
	const char *b = getenv("DP_BUILD");
	char *out = path[next++ & 3];

	snprintf(out, sizeof(path[0]), "%s/%s", b && *b ? b : "build", name);
	return out;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
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

static void dump_log(const struct svc *s)
{
	char line[512];
	FILE *f = fopen(s->log, "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		fprintf(stderr, "  [dataplaned] %s", line);
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
	for (; extra && *extra && argc < 62; extra++)
		argv[argc++] = *extra;
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
			dump_log(s);
			s->pid = 0;
			return -ECHILD;
		}
		sleep_ms(10);
	}
	dump_log(s);
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
		kill(s->pid, SIGKILL);
		waitpid(s->pid, &status, 0);
	}
	if (rc != 0)
		dump_log(s);
	s->pid = 0;
	remove_dir(s);
	return rc;
}

void svc_kill(struct svc *s)
{
	int status;

	if (s->pid <= 0)
		return;
	kill(s->pid, SIGKILL);
	waitpid(s->pid, &status, 0);
	s->pid = 0;
	remove_dir(s);
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

bool svc_log_has(const struct svc *s, const char *what)
{
	char line[1024];
	bool found = false;
	FILE *f = fopen(s->log, "r");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	fclose(f);
	return found;
}
