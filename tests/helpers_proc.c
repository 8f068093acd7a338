/* SPDX-License-Identifier: MIT */
/*
 * helpers_proc.c - processes: what /proc tells of one (fds, memory, CPU
 * time, stopped), waiting for one to exit, the child processes of a test
 * and the pipes it talks to them through, shell commands.
 */
#include <dirent.h>
#include <stdarg.h>

#include "helpers.h"

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

/* /proc/PID/<what>, open for reading; NULL when pid is gone. */
static FILE *proc_open(pid_t pid, const char *what)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, what);
	return fopen(path, "r");
}

long proc_mapped_kib(pid_t pid)
{
	char line[256];
	long kib = -1;
	FILE *f = proc_open(pid, "status");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmSize: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

/* KiB of pid's mappings of memfds (/proc/PID/maps: "/memfd:NAME"): in the
 * service, the clients' rings and regions and its own tables; -1 when pid
 * is gone. */
long proc_memfd_kib(pid_t pid)
{
	char line[512];
	unsigned long lo, hi;
	long kib = 0;
	int at;
	FILE *f = proc_open(pid, "maps");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &at) == 2 &&
		    !strncmp(line + at, "/memfd:", 7))
			kib += (long)((hi - lo) >> 10);
	fclose(f);
	return kib;
}

/* The fields of /proc/PID/stat from the state on: past the command, which
 * may itself hold spaces and parentheses. NULL when pid is gone. */
static const char *proc_stat(pid_t pid, char *buf, int len)
{
	FILE *f = proc_open(pid, "stat");
	char *p;

	if (!f)
		return NULL;
	p = fgets(buf, len, f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	return p && p[1] == ' ' ? p + 2 : NULL;
}

long cpu_ticks(pid_t pid)
{
	char buf[1024];
	const char *p = proc_stat(pid, buf, sizeof(buf));
	unsigned long ut = 0, st = 0;

	/* State is the 3rd field; utime, stime are the 14th, 15th. */
	if (!p || sscanf(p, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (long)(ut + st);
}

void wait_stopped(pid_t pid)
{
	char buf[1024];

	for (int i = 0; i < 1000; i++) {
		const char *p = proc_stat(pid, buf, sizeof(buf));

		if (p && p[0] == 'T')
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

int exit_code(int status)
{
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int wait_exit(pid_t pid, unsigned timeout_ms)
{
	int status;

	for (unsigned i = 0; i < timeout_ms / 10; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return exit_code(status);
		sleep_ms(10);
	}
	return -1;
}

int wait_child(pid_t pid)
{
	int status;

	cr_assert_eq(waitpid(pid, &status, 0), pid);
	if (pid == child_pid)
		child_pid = 0;
	return exit_code(status);
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
