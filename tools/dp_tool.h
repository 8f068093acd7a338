/* SPDX-License-Identifier: MIT */
/*
 * dp_tool.h - what the command-line tools share: the command line (one
 * table of flags that getopt_long and --help are both made from, with the
 * --version line), a failed dp_connect told in words that name the socket
 * that was tried, one descriptor run to its completion, and a stream of
 * WRITEs kept in flight.
 */
#ifndef DP_TOOL_H
#define DP_TOOL_H

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "dataplane.h"
#include "dp_version.h"
#include "sockpath.h"

/* "ring-stat (dataplane) 0.9.0" on stdout. */
static inline void dp_tool_version(const char *prog)
{
	printf("%s (dataplane) %s\n", prog, DP_VERSION_STRING);
}

/* Bad usage: the hint on stderr, exit 2 (the caller said what was wrong). */
static inline __attribute__((noreturn)) void dp_tool_try_help(const char *prog)
{
	fprintf(stderr, "Try '%s --help'.\n", prog);
	exit(2);
}

/*
 * One flag of a tool's table: its --help entry, and what it sets (one of the
 * targets). A flag that sets nothing is --help or --version, which the
 * parser answers itself.
 */
struct dp_tool_flag {
	const char *name; /* --name */
	char letter;	  /* -letter as well; 0: none */
	const char *arg;  /* what --help calls its argument; NULL: it takes none */
	/* '\n' starts a continuation line; NULL: not in --help; "": on the
	 * line of the next flag, whose text says what both do. */
	const char *help;
	const char **str;	     /* the argument as it is */
	int *num;		     /* atoi() of it */
	unsigned *uns;		     /* strtoul(), base 0 */
	uint64_t *u64;		     /* strtoull(), base 0 */
	bool *on, *off;		     /* set true, false */
	void (*fn)(const char *arg); /* checks and sets it */
};

/* A tool's command line: its flags, ended by {0}, and --help around them. */
struct dp_tool_cli {
	const char *prog;
	const char *head, *tail; /* --help's text before and after the flags */
	int col;		 /* where the flags' texts start */
	const struct dp_tool_flag *flags;
};

/* Flags that several tools share, worded alike in their --help. */
#define DP_TOOL_FLAG_SOCKET(var)                                                                   \
	{                                                                                          \
		.name = "socket", .arg = "PATH", .str = (var),                                     \
		.help = "dataplaned's control socket (default $DP_SOCKET, else\n"                  \
			"$XDG_RUNTIME_DIR/dataplane/dataplane.sock, else\n"                        \
			"/run/dataplane/dataplane.sock)"                                           \
	}
#define DP_TOOL_FLAG_CPU(var)                                                                      \
	{                                                                                          \
		.name = "cpu", .arg = "N", .num = (var),                                           \
		.help = "pin this client to CPU N (default 0)"                                     \
	}
#define DP_TOOL_FLAG_JSON(var)                                                                     \
	{                                                                                          \
		.name = "json", .on = (var),                                                       \
		.help = "one JSON object with every figure on stdout (the text goes\n"             \
			"to stderr)"                                                               \
	}
#define DP_TOOL_FLAG_HELP                                                                          \
	{                                                                                          \
		.name = "help", .letter = 'h', .help = "this text"                                 \
	}
#define DP_TOOL_FLAG_VERSION                                                                       \
	{                                                                                          \
		.name = "version", .help = "print the version and exit"                            \
	}

/* --help: head, a line or more per flag, tail. */
static inline void dp_tool_usage(FILE *f, const struct dp_tool_cli *cli)
{
	int n = 0; /* columns on the line so far */

	fputs(cli->head, f);
	for (const struct dp_tool_flag *fl = cli->flags; fl->name; fl++) {
		const char *h = fl->help;

		if (!h)
			continue;
		n += fprintf(f, "%s", n ? ", " : "  ");
		if (fl->letter)
			n += fprintf(f, "-%c, ", fl->letter);
		n += fprintf(f, "--%s%s%s", fl->name, fl->arg ? " " : "", fl->arg ? fl->arg : "");
		if (!*h)
			continue;
		/* The text at col, on a line of its own where the flag reaches it. */
		if (n < cli->col)
			fprintf(f, "%*s", cli->col - n, "");
		else
			fprintf(f, "\n%*s", cli->col, "");
		for (const char *nl; (nl = strchr(h, '\n')); h = nl + 1)
			fprintf(f, "%.*s\n%*s", (int)(nl - h), h, cli->col, "");
		fprintf(f, "%s\n", h);
		n = 0;
	}
	fputs(cli->tail, f);
}

static inline void dp_tool_flag_set(const struct dp_tool_cli *cli, const struct dp_tool_flag *f,
				    const char *arg)
{
	if (f->str)
		*f->str = arg;
	else if (f->num)
		*f->num = atoi(arg);
	else if (f->uns)
		*f->uns = (unsigned)strtoul(arg, NULL, 0);
	else if (f->u64)
		*f->u64 = strtoull(arg, NULL, 0);
	else if (f->on)
		*f->on = true;
	else if (f->off)
		*f->off = false;
	else if (f->fn)
		f->fn(arg);
	else if (!strcmp(f->name, "help")) {
		dp_tool_usage(stdout, cli);
		exit(0);
	} else {
		dp_tool_version(cli->prog);
		exit(0);
	}
}

/* Whether flag b sets what flag a sets (an alias, as --no-fio of --no-peers). */
static inline bool dp_tool_flag_alias(const struct dp_tool_flag *a, const struct dp_tool_flag *b)
{
	bool sets = a->str || a->num || a->uns || a->u64 || a->on || a->off || a->fn;

	return sets && a->str == b->str && a->num == b->num && a->uns == b->uns &&
	       a->u64 == b->u64 && a->on == b->on && a->off == b->off && a->fn == b->fn;
}

/*
 * Sets what the flags of argv name, in their order; returns the index of the
 * first operand. --help and --version answer and exit 0; an unknown flag or
 * one without its argument exits 2 with a hint.
 */
static inline int dp_tool_parse(const struct dp_tool_cli *cli, int argc, char **argv)
{
	unsigned n = 0;
	int o;

	while (cli->flags[n].name)
		n++;

	struct option opts[n + 1];
	char letters[2 * n + 1], *l = letters;

	/* getopt_long returns a flag's letter, else 256 + its index, or an
	 * earlier flag's of which it is an alias: a prefix of both names is
	 * then that flag, not an ambiguity. */
	for (unsigned i = 0; i < n; i++) {
		const struct dp_tool_flag *f = &cli->flags[i];
		int val = f->letter ? f->letter : 256 + (int)i;

		for (unsigned j = 0; j < i && !f->letter; j++)
			if (dp_tool_flag_alias(&cli->flags[j], f)) {
				val = opts[j].val;
				break;
			}
		opts[i] = (struct option){f->name, f->arg ? required_argument : no_argument, NULL,
					  val};
		if (f->letter) {
			*l++ = f->letter;
			if (f->arg)
				*l++ = ':';
		}
	}
	opts[n] = (struct option){0};
	*l = 0;
	while ((o = getopt_long(argc, argv, letters, opts, NULL)) != -1) {
		const struct dp_tool_flag *f = o >= 256 ? &cli->flags[o - 256] : NULL;

		for (unsigned i = 0; !f && i < n; i++)
			if (cli->flags[i].letter == o)
				f = &cli->flags[i];
		if (!f)
			dp_tool_try_help(cli->prog);
		dp_tool_flag_set(cli, f, optarg);
	}
	return optind;
}

/* The socket dp_connect(path, ...) tries: path, else $DP_SOCKET, else
 * $XDG_RUNTIME_DIR/dataplane/dataplane.sock, else
 * /run/dataplane/dataplane.sock (docs/api.md). */
static inline const char *dp_tool_socket(const char *path, char *buf, size_t len)
{
	if (path)
		return path;
	dp_default_socket(buf, len);
	return buf;
}

/* For a failed dp_connect(path, ...): "PROG: cannot connect to SOCKET: why". */
static inline void dp_tool_connect_error(const char *prog, const char *path, int rc)
{
	char buf[256];
	const char *sock = dp_tool_socket(path, buf, sizeof(buf));
	const char *why;

	switch (-rc) {
	case ECONNREFUSED:
	case ENOENT:
	case ENOTDIR:
		/* The errno says which: no socket file, or nobody behind it. */
		fprintf(stderr, "%s: cannot connect to %s: no dataplaned is listening there (%s)\n",
			prog, sock, strerror(-rc));
		return;
	case EACCES:
	case EPERM:
		why = "permission denied (the socket is mode 0660: run as the service's user "
		      "or a member of its group)";
		break;
	case ENAMETOOLONG:
		why = "path too long for a Unix socket (at most 107 bytes)";
		break;
	case EPROTONOSUPPORT:
		why = "the dataplaned there speaks another ABI version (use the tools built "
		      "with it)";
		break;
	default:
		why = dp_strerror(rc);
		break;
	}
	fprintf(stderr, "%s: cannot connect to %s: %s\n", prog, sock, why);
}

/*
 * Submits the one descriptor @d on an otherwise idle queue and waits for its
 * completion: busy-polling (dp_poll) when @wait_ms < 0, else sleeping in
 * dp_wait up to @wait_ms. Returns 0 when d's completion came and succeeded
 * (it is in *cqe), else the error: dp_submit's (-EAGAIN: no room), the
 * wait's (-ETIMEDOUT: none in time), the completion's status, or -EBADMSG
 * for another descriptor's completion. *ns: from the submit to the
 * completion seen.
 */
static inline int dp_tool_run_one(struct dp_queue *q, const struct dp_desc *d, int wait_ms,
				  struct dp_cqe *cqe, uint64_t *ns)
{
	uint64_t t0 = dp_now_ns();
	int rc = dp_submit(q, d, 1);

	if (rc != 1)
		return rc < 0 ? rc : -EAGAIN;
	if (wait_ms < 0)
		while ((rc = dp_poll(q, cqe, 1)) == 0)
			;
	else
		rc = dp_wait(q, cqe, 1, wait_ms);
	*ns = dp_now_ns() - t0;
	if (rc != 1)
		return rc < 0 ? rc : -ETIMEDOUT;
	return cqe->status ? cqe->status : cqe->user_data != d->user_data ? -EBADMSG : 0;
}

/*
 * Streams @total WRITEs of @len bytes from region @src to segment @seg, at
 * the same offset on both sides, the offsets rotating over [0, @span), with
 * up to @depth in flight; each wait for completions lasts up to @wait_ms.
 * Returns 0 with the GB/s (bytes per ns) in *gbps and the last completion's
 * flags in *flags; else the error: of dp_submit (-EAGAIN: no room) or the
 * wait (-ETIMEDOUT: nothing in time), *what then naming that step ("submit",
 * "wait"), or a completion's status (*what left as the caller set it).
 */
static inline int dp_tool_write_stream(struct dp_queue *q, int src, int seg, uint64_t len,
				       uint64_t span, unsigned total, unsigned depth, int wait_ms,
				       double *gbps, uint32_t *flags, const char **what)
{
	struct dp_cqe cqe[64];
	unsigned sent = 0, done = 0, batch = depth < 64 ? depth : 64;
	uint64_t t0 = dp_now_ns();

	while (done < total) {
		while (sent < total && sent - done < depth) {
			uint64_t off = (sent % (span / len)) * len;
			struct dp_desc d;
			int rc;

			dp_prep_write(&d, src, off, seg, off, len, sent);
			if ((rc = dp_submit(q, &d, 1)) != 1) {
				*what = "submit";
				return rc < 0 ? rc : -EAGAIN;
			}
			sent++;
		}
		int k = dp_wait(q, cqe, batch, wait_ms);

		if (k <= 0) {
			*what = "wait";
			return k < 0 ? k : -ETIMEDOUT;
		}
		for (int i = 0; i < k; i++) {
			if (cqe[i].status)
				return cqe[i].status;
			*flags = cqe[i].flags;
		}
		done += (unsigned)k;
	}
	*gbps = (double)total * len / (double)(dp_now_ns() - t0);
	return 0;
}

#endif
