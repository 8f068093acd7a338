/* SPDX-License-Identifier: MIT */
/*
 * helpers_redis.c - a redis-server as the cluster directory of the
 * directory_* suites: started and killed per test, commands on it through
 * hiredis, and services started with it as their directory.
 */
#include <hiredis/hiredis.h>
#include <stdarg.h>

#include "helpers.h"

struct redis_srv dir_redis;

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

/* In the child: redis-server on r's port, in r's dir, with nothing
 * persisted; requiring `password` unless it is NULL. */
__attribute__((noreturn)) static void redis_exec(const struct redis_srv *r, const char *password)
{
	char portstr[16];
	const char *argv[20] = {"redis-server", "--save",     "",	   "--appendonly",
				"no",		"--port",     portstr,	   "--daemonize",
				"no",		"--bind",     "127.0.0.1", "--dir",
				r->dir,		"--loglevel", "warning"};
	int argc = 15;
	FILE *f = freopen("/dev/null", "w", stdout);

	(void)f;
	snprintf(portstr, sizeof(portstr), "%d", r->port);
	if (password) {
		argv[argc++] = "--requirepass";
		argv[argc++] = password;
	}
	argv[argc] = NULL;
	execvp(argv[0], (char *const *)argv);
	_exit(127);
}

/* Waits up to 5 s until the server answers PING. */
static void redis_wait_up(const struct redis_srv *r)
{
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

void dir_redis_start(struct redis_srv *r, int port, const char *password)
{
	if (!dir_have_redis())
		cr_skip_test("redis-server is not installed (make deps)");
	if (!r->dir[0]) {
		snprintf(r->dir, sizeof(r->dir), "/tmp/dp-redis-XXXXXX");
		cr_assert_not_null(mkdtemp(r->dir), "mkdtemp: %s", strerror(errno));
	}
	r->port = port ? port : fab_free_port();
	snprintf(r->password, sizeof(r->password), "%s", password ? password : "");
	snprintf(r->url, sizeof(r->url), "redis://127.0.0.1:%d", r->port);
	r->pid = fork();
	cr_assert_geq(r->pid, 0);
	if (r->pid == 0)
		redis_exec(r, password);
	redis_wait_up(r);
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
	fab_teardown();
	dir_redis_kill(&dir_redis);
	if (dir_redis.dir[0] && remove_tree(dir_redis.dir))
		fprintf(stderr, "could not remove %s: %s\n", dir_redis.dir, strerror(errno));
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
