/* SPDX-License-Identifier: MIT */
/* stats_socket.c - ring-stat --socket finds a service's region whatever its --stats name; --prometheus is one valid exposition: each family's HELP/TYPE once, its samples together, and no -w. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "dataplane.h"
#include "dp_stats.h"
#include "helpers.h"

enum { EX_USAGE = 2, EX_NOSERVICE = 3 };

static struct svc a, b;
static char region[64], link_path[128];

static void teardown(void)
{
	svc_kill(&a);
	svc_kill(&b);
	if (region[0])
		shm_unlink(region);
	if (link_path[0])
		unlink(link_path);
	region[0] = link_path[0] = 0;
}

/* Service a with --stats region (a name not derived from its socket),
 * service b with the default name. */
static void start_two(void)
{
	const char *custom[] = {"--provider", "none", "--stats", NULL, NULL};
	const char *plain[] = {"--provider", "none", NULL};
	int rc;

	snprintf(region, sizeof(region), "%s", test_region_name());
	custom[3] = region;
	rc = svc_start(&a, custom);
	cr_assert_eq(rc, 0, "svc_start: %s", strerror(-rc));
	rc = svc_start(&b, plain);
	cr_assert_eq(rc, 0, "svc_start: %s", strerror(-rc));
}

/* ring-stat --socket path --json names the region and pid of s. */
static void expect_service(const char *path, const struct svc *s, const char *want_region)
{
	const char *args[] = {"--socket", path, "--json", NULL};
	struct jv *v = ring_stat_json(args);

	cr_assert_str_eq(json_get(v, "region")->str, want_region, "--socket %s", path);
	cr_assert_eq(json_u64(v, "service.pid"), (uint64_t)s->pid, "--socket %s: pid %llu, want %d",
		     path, (unsigned long long)json_u64(v, "service.pid"), (int)s->pid);
	cr_assert_str_eq(json_path(v, "service.socket")->str, s->sock);
	json_free(v);
}

Test(stats_socket, custom_stats_name_found_by_socket, .fini = teardown, .timeout = 60)
{
	char derived[DP_STATS_NAME_MAX];

	start_two();
	dp_stats_default_name(b.sock, derived, sizeof(derived));
	expect_service(a.sock, &a, region);
	expect_service(b.sock, &b, derived);
}

/* Another path to the same socket file (a symlink) finds it too: the
 * socket is compared as a file, not only as a string. */
Test(stats_socket, socket_reached_through_a_symlink, .fini = teardown, .timeout = 60)
{
	start_two();
	snprintf(link_path, sizeof(link_path), "/tmp/dp-test-statslink-%d.sock", (int)getpid());
	unlink(link_path);
	cr_assert_eq(symlink(a.sock, link_path), 0, "symlink: %s", strerror(errno));
	expect_service(link_path, &a, region);
}

/* No service on the socket: the message names it and says nobody listens
 * there, both when the file is missing and when nobody accepts on it. */
Test(stats_socket, no_service_on_the_socket_says_so, .fini = teardown, .timeout = 30)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	const char *args[] = {"--socket", NULL, NULL};
	struct tool_run r;
	int fd;

	snprintf(link_path, sizeof(link_path), "/tmp/dp-test-nolisten-%d.sock", (int)getpid());
	unlink(link_path);
	args[1] = link_path;
	r = ring_stat(args);
	cr_assert_eq(r.status, EX_NOSERVICE, "exit %d: %s", r.status, r.err);
	cr_assert(strstr(r.err, link_path) && strstr(r.err, "no dataplaned is listening there"),
		  "%s", r.err);
	tool_run_free(&r);

	/* Bound, never listening: connect() is refused. */
	fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	cr_assert_geq(fd, 0);
	memcpy(sa.sun_path, link_path, strlen(link_path) + 1);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "bind: %s", strerror(errno));
	r = ring_stat(args);
	close(fd);
	cr_assert_eq(r.status, EX_NOSERVICE, "exit %d: %s", r.status, r.err);
	cr_assert(strstr(r.err, "no dataplaned is listening there") &&
			  strstr(r.err, strerror(ECONNREFUSED)),
		  "%s", r.err);
	tool_run_free(&r);
}

Test(stats_socket, prometheus_refuses_watch, .fini = teardown, .timeout = 30)
{
	const char *args[] = {"--stats", "whatever", "--prometheus", "-w", "1", "-c", "2", NULL};
	struct tool_run r = ring_stat(args);

	cr_assert_eq(r.status, EX_USAGE, "exit %d: %s", r.status, r.err);
	cr_assert_eq(r.out[0], 0, "nothing on stdout: %s", r.out);
	cr_assert(strstr(r.err, "--prometheus") && strstr(r.err, "-w"), "%s", r.err);
	tool_run_free(&r);
	/* Nor several reports without -w. */
	args[3] = "-c";
	args[4] = "2";
	args[5] = NULL;
	r = ring_stat(args);
	cr_assert_eq(r.status, EX_USAGE, "-c 2: exit %d: %s", r.status, r.err);
	cr_assert(strstr(r.err, "-c"), "%s", r.err);
	tool_run_free(&r);
}

/* The family of a sample: its name, less _bucket/_sum/_count when that
 * stem is TYPEd histogram. */
static void family_of(const char *name, char types[][2][96], unsigned nt, char *out, size_t len)
{
	static const char *const sufs[] = {"_bucket", "_sum", "_count"};
	size_t n = strlen(name);

	snprintf(out, len, "%s", name);
	for (unsigned s = 0; s < 3; s++) {
		size_t sl = strlen(sufs[s]);

		if (n <= sl || strcmp(name + n - sl, sufs[s]))
			continue;
		for (unsigned i = 0; i < nt; i++)
			if (strlen(types[i][0]) == n - sl && !strncmp(types[i][0], name, n - sl) &&
			    !strcmp(types[i][1], "histogram")) {
				out[n - sl] = 0;
				return;
			}
	}
}

/*
 * Checks one exposition: every family has exactly one HELP and one TYPE,
 * both before its samples, and its samples come together (no other
 * family's lines between them). Returns the number of samples.
 */
static unsigned check_exposition(char *text)
{
	static char helped[512][96], types[512][2][96], seen[512][96];
	unsigned nh = 0, nt = 0, ns = 0, samples = 0;
	char current[96] = "", *save, *line;

	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char name[96], family[96];
		size_t n;

		if (!strncmp(line, "# HELP ", 7) || !strncmp(line, "# TYPE ", 7)) {
			bool help = line[2] == 'H';

			cr_assert_eq(sscanf(line + 7, "%95s", name), 1, "%s", line);
			for (unsigned i = 0; i < (help ? nh : nt); i++)
				cr_assert_str_neq(help ? helped[i] : types[i][0], name,
						  "second %s for family %s", help ? "HELP" : "TYPE",
						  name);
			for (unsigned i = 0; i < ns; i++)
				cr_assert_str_neq(seen[i], name, "%s after samples of %s: %s",
						  help ? "HELP" : "TYPE", name, line);
			if (help) {
				cr_assert_lt(nh, 512u);
				snprintf(helped[nh++], 96, "%s", name);
			} else {
				cr_assert_lt(nt, 512u);
				cr_assert_eq(
					sscanf(line + 7, "%95s %95s", types[nt][0], types[nt][1]),
					2, "%s", line);
				nt++;
			}
			continue;
		}
		cr_assert_neq(line[0], '#', "stray comment: %s", line);
		n = strcspn(line, "{ ");
		cr_assert(n > 0 && n < sizeof(name), "%s", line);
		memcpy(name, line, n);
		name[n] = 0;
		family_of(name, types, nt, family, sizeof(family));
		if (strcmp(family, current)) {
			/* A new run of samples: its family must not have had one. */
			for (unsigned i = 0; i < ns; i++)
				cr_assert_str_neq(seen[i], family,
						  "samples of %s are split by another family's",
						  family);
			cr_assert_lt(ns, 512u);
			snprintf(seen[ns++], 96, "%s", family);
			snprintf(current, sizeof(current), "%s", family);
		}
		{
			bool h = false, t = false;

			for (unsigned i = 0; i < nh; i++)
				h |= !strcmp(helped[i], family);
			for (unsigned i = 0; i < nt; i++)
				t |= !strcmp(types[i][0], family);
			cr_assert(h && t, "sample of %s without HELP and TYPE before it", family);
		}
		samples++;
	}
	cr_assert_eq(nh, nt, "one HELP per TYPE");
	return samples;
}

Test(stats_socket, prometheus_one_help_and_type_per_family, .fini = teardown, .timeout = 60)
{
	const char *flags[] = {"--provider", "none", "--pollers", "2", "--stats", NULL, NULL};
	const char *args[] = {"--stats", NULL, "--prometheus", NULL};
	struct dp_client *c[2];
	struct dp_queue *q[4];
	struct tool_run r;
	char path[] = "/tmp/dp-test-prom-XXXXXX";
	unsigned samples;
	int rc, fd;

	/* Two pollers, two clients with two queues each: families with
	 * samples from several pollers and queues. */
	snprintf(region, sizeof(region), "%s", test_region_name());
	flags[5] = region;
	args[1] = region;
	rc = svc_start(&a, flags);
	cr_assert_eq(rc, 0, "svc_start: %s", strerror(-rc));
	for (int i = 0; i < 2; i++) {
		rc = dp_connect(a.sock, i ? "prom-b" : "prom-a", &c[i]);
		cr_assert_eq(rc, 0, "dp_connect: %s", dp_strerror(rc));
		for (int k = 0; k < 2; k++)
			cr_assert_eq(dp_queue_create(c[i], 64, &q[2 * i + k]), 0);
	}
	r = ring_stat(args);
	cr_assert_eq(r.status, 0, "exit %d: %s", r.status, r.err);
	cr_assert(strstr(r.out, "client=\"prom-b\",pid=") && strstr(r.out, "poller=\"1\""),
		  "both clients and both pollers: %s", r.out);

	/* promtool, where installed (Debian: prometheus), has the last word. */
	if (!system("command -v promtool >/dev/null 2>&1")) {
		char cmd[128];

		fd = mkstemp(path);
		cr_assert_geq(fd, 0);
		cr_assert_eq(write(fd, r.out, strlen(r.out)), (ssize_t)strlen(r.out));
		close(fd);
		snprintf(cmd, sizeof(cmd), "promtool check metrics < %s >/dev/null 2>&1", path);
		rc = system(cmd);
		unlink(path);
		cr_assert_eq(rc, 0, "promtool check metrics rejects the output:\n%s", r.out);
	}
	samples = check_exposition(r.out);
	cr_assert_gt(samples, 100u, "%u samples", samples);
	tool_run_free(&r);
	for (int i = 0; i < 2; i++)
		dp_close(c[i]);
}
