/* SPDX-License-Identifier: MIT */
/* tools_cli.c - every binary answers --help (usage on stdout, exit 0) and --version (one line, the number of dp_version.h), rejects unknown options with exit 2 and a hint, and a client tool with no service names the socket it tried. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dp_version.h"
#include "helpers.h"

static const char *const bins[] = {"dataplaned", "ring-stat", "dp-demo", "api-example",
				   "file-bench", "gpu-bench", "dp-bench"};

Test(tools_cli, help_is_usage_on_stdout, .timeout = 60)
{
	for (unsigned i = 0; i < sizeof(bins) / sizeof(bins[0]); i++) {
		const char *args[] = {"--help", NULL};
		struct tool_run r = run_tool(bins[i], args);
		char want[64];

		snprintf(want, sizeof(want), "usage: %s", bins[i]);
		cr_assert_eq(r.status, 0, "%s --help: exit %d, stderr: %s", bins[i], r.status,
			     r.err);
		cr_assert(!strncmp(r.out, want, strlen(want)), "%s --help printed: %s", bins[i],
			  r.out);
		cr_assert(strstr(r.out, "--version"), "%s --help lists --version", bins[i]);
		cr_assert_eq(r.err[0], 0, "%s --help wrote to stderr: %s", bins[i], r.err);
		tool_run_free(&r);
	}
}

Test(tools_cli, version_is_one_line, .timeout = 60)
{
	for (unsigned i = 0; i < sizeof(bins) / sizeof(bins[0]); i++) {
		const char *args[] = {"--version", NULL};
		struct tool_run r = run_tool(bins[i], args);
		char want[64];

		snprintf(want, sizeof(want), "%s (dataplane) %s\n", bins[i], DP_VERSION_STRING);
		cr_assert_eq(r.status, 0, "%s --version: exit %d, stderr: %s", bins[i], r.status,
			     r.err);
		cr_assert_str_eq(r.out, want, "%s --version", bins[i]);
		tool_run_free(&r);
	}
}

Test(tools_cli, unknown_option_exits_2_with_a_hint, .timeout = 60)
{
	for (unsigned i = 0; i < sizeof(bins) / sizeof(bins[0]); i++) {
		const char *args[] = {"--no-such-flag", NULL};
		struct tool_run r = run_tool(bins[i], args);

		cr_assert_eq(r.status, 2, "%s --no-such-flag: exit %d, stderr: %s", bins[i],
			     r.status, r.err);
		cr_assert(strstr(r.err, "--no-such-flag") && strstr(r.err, "--help"),
			  "%s: stderr names the flag and --help: %s", bins[i], r.err);
		cr_assert_eq(r.out[0], 0, "%s: nothing on stdout: %s", bins[i], r.out);
		tool_run_free(&r);
	}
}

/* The client tools against a socket nobody serves: a missing file, then a
 * bound socket nobody accepts on. gpu-bench needs a GPU before it connects
 * and ring-stat's case is in stats_socket. */
Test(tools_cli, no_service_names_the_socket, .timeout = 120)
{
	char sock[64], file[64], want[160];
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = -1;

	snprintf(sock, sizeof(sock), "/tmp/dp-test-nosvc-%d.sock", (int)getpid());
	snprintf(file, sizeof(file), "/tmp/dp-test-nosvc-%d.file", (int)getpid());
	unlink(sock);
	for (int pass = 0; pass < 2; pass++) {
		const char *demo[] = {sock, NULL};
		const char *bench[] = {"--socket", sock,   "--file", file, "--size",   "4096",
				       "--bs",	   "4096", "--reps", "1",  "--no-fio", NULL};
		const char *dpb[] = {"--socket", sock, "--quick", "latency", NULL};
		const char *const *args[] = {demo, demo, bench, dpb};
		const char *tools[] = {"dp-demo", "api-example", "file-bench", "dp-bench"};

		if (pass == 1) {
			fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
			cr_assert_geq(fd, 0);
			memcpy(sa.sun_path, sock, strlen(sock) + 1);
			cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "bind: %s",
				     strerror(errno));
		}
		for (unsigned i = 0; i < 4; i++) {
			struct tool_run r = run_tool(tools[i], args[i]);

			snprintf(want, sizeof(want),
				 "%s: cannot connect to %s: no dataplaned is listening there (%s)",
				 tools[i], sock, strerror(pass ? ECONNREFUSED : ENOENT));
			cr_assert_eq(r.status, 1, "%s: exit %d, stderr: %s", tools[i], r.status,
				     r.err);
			cr_assert(strstr(r.err, want), "%s: stderr '%s' does not say '%s'",
				  tools[i], r.err, want);
			tool_run_free(&r);
		}
	}
	close(fd);
	unlink(sock);
	unlink(file);
}

/* Two dp-bench runs against one service at the same time: each exports its
 * segment under a name of its own (its pid), so neither gets EEXIST. Both
 * measure P4 with --quick; the second starts while the first runs. */
Test(tools_cli, two_dp_bench_share_a_service, .timeout = 240, .fini = svc_teardown)
{
	pid_t kids[2];
	char err[2][96];

	start_svc(&svc, local_only);
	for (int i = 0; i < 2; i++) {
		snprintf(err[i], sizeof(err[i]), "%s/bench%d.err", svc.dir, i);
		kids[i] = fork();
		cr_assert_geq(kids[i], 0);
		if (kids[i] == 0) {
			const char *bin = build_path("dp-bench");

			if (!freopen("/dev/null", "w", stdout) || !freopen(err[i], "w", stderr))
				_exit(126);
			execl(bin, "dp-bench", "--socket", svc.sock, "--no-peers", "--quick",
			      "--cpu", "0", "--service-cpu", "0", "rate", (char *)NULL);
			_exit(127);
		}
	}
	for (int i = 0; i < 2; i++) {
		int st;
		char buf[512] = "";
		FILE *f;

		cr_assert_eq(waitpid(kids[i], &st, 0), kids[i]);
		f = fopen(err[i], "r");
		if (f) {
			buf[fread(buf, 1, sizeof(buf) - 1, f)] = 0;
			fclose(f);
		}
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "dp-bench %d: status %d: %s", i,
			  st, buf);
	}
	stop_svc(&svc);
}

/* Live processes (zombies have no exe) running the binary at `path`. */
static int running(const char *path)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int n = 0;

	cr_assert(d, "opendir /proc");
	while ((e = readdir(d))) {
		char link[300], exe[PATH_MAX];
		ssize_t len;

		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(link, sizeof(link), "/proc/%s/exe", e->d_name);
		len = readlink(link, exe, sizeof(exe) - 1);
		if (len <= 0)
			continue;
		exe[len] = 0;
		n += !strcmp(exe, path);
	}
	closedir(d);
	return n;
}

/* A dp-bench that dies (here: its queue refused, --depth above the
 * service's --max-depth) stops the service it started: none is left
 * spinning on --service-cpu. The service runs from a copy of dataplaned of
 * this test's own, so no other dataplaned on the machine is counted. */
Test(tools_cli, dp_bench_dying_stops_its_service, .timeout = 120)
{
	char dir[64], bin[96], cmd[320];
	int left = 0;

	snprintf(dir, sizeof(dir), "/tmp/dp-test-pdeath-%d", (int)getpid());
	snprintf(bin, sizeof(bin), "%s/dataplaned", dir);
	snprintf(cmd, sizeof(cmd), "mkdir -p %s && cp %s %s", dir, build_path("dataplaned"), bin);
	cr_assert_eq(system(cmd), 0, "%s", cmd);

	const char *args[] = {"--dataplaned",  bin, "--no-peers", "--quick", "--cpu", "0",
			      "--service-cpu", "0", "--depth",	  "8192",    "rate",  NULL};
	struct tool_run r = run_tool("dp-bench", args);

	cr_assert_eq(r.status, 1, "dp-bench --depth 8192: exit %d, stderr: %s", r.status, r.err);
	cr_assert(strstr(r.err, "queue: Invalid argument"), "stderr: %s", r.err);
	for (int i = 0; i < 300 && (left = running(bin)) > 0; i++)
		sleep_ms(10);
	cr_assert_eq(left, 0, "%d dataplaned of dp-bench's left alive", left);
	tool_run_free(&r);
	unlink(bin);
	rmdir(dir);

	const char *const bad[] = {"100", "64k", "4294967328", "2097152", NULL};
	for (int i = 0; bad[i]; i++) {
		const char *a[] = {"--depth", bad[i], "rate", NULL};

		r = run_tool("dp-bench", a);
		cr_assert_eq(r.status, 2, "--depth %s: exit %d", bad[i], r.status);
		cr_assert(strstr(r.err, "--depth wants a power of two"), "stderr: %s", r.err);
		tool_run_free(&r);
	}
}
