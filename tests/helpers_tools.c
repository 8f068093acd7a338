/* SPDX-License-Identifier: MIT */
/*
 * helpers_tools.c - ring-stat and the other tools of the build tree run as
 * a user runs them: exit status, stdout and stderr; ring-stat --json
 * parsed.
 */
#include "helpers.h"

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
	int out = mkstemp(out_path), err = mkstemp(err_path), status;
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
	r.status = wait_exit(pid, 30000);
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
