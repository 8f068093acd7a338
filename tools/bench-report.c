/* SPDX-License-Identifier: MIT */
/* bench-report.c - progress lines, JSON results and gnuplot charts for
 * dp-bench. See bench-report.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-report.h"

static uint64_t clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
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
	p->t0 = p->last_draw = p->last_point = clock_ns();
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
	now = clock_ns();
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
	uint64_t now = clock_ns();

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
		fprintf(stderr, "dp-bench: --json: %s\n", strerror(errno));
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

static int write_script(const char *dir, const char *png, const char *terminal)
{
	char path[512];
	FILE *f;
	unsigned panels = (nlat ? 1 : 0) + (ntput ? 1 : 0);

	snprintf(path, sizeof(path), "%s/plot.gp", dir);
	f = fopen(path, "w");
	if (!f)
		return -1;
	fprintf(f, "set terminal %s size %u,520 noenhanced\n", terminal, panels > 1 ? 1400 : 800);
	fprintf(f, "set output '%s'\nset grid\n", png);
	if (panels > 1)
		fprintf(f, "set multiplot layout 1,2\n");
	if (nlat) {
		fprintf(f, "set title 'Latency, submit to completion (CDF)'\n"
			   "set logscale x\nset xlabel 'latency (us), log scale'\n"
			   "set ylabel 'fraction of descriptors <= x'\nset yrange [0:1]\n"
			   "set key bottom right\nplot ");
		for (unsigned i = 0; i < nlat; i++)
			fprintf(f, "%s'%s/lat%u.dat' using 1:2 with lines lw 2 title '%s'",
				i ? ", " : "", dir, i, lat[i].label);
		fprintf(f, "\nunset logscale x\nset yrange [*:*]\n");
	}
	if (ntput) {
		fprintf(f, "set title 'Throughput over time'\nset xlabel 'time (s)'\n"
			   "set ylabel 'M descriptors/s'\nset yrange [0:*]\nset key bottom "
			   "right\nplot ");
		for (unsigned i = 0; i < ntput; i++)
			fprintf(f, "%s'%s/tput%u.dat' using 1:2 with lines lw 2 title '%s'",
				i ? ", " : "", dir, i, tput[i].label);
		fprintf(f, "\n");
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

	if (!nlat && !ntput) {
		fprintf(stderr, "dp-bench: --plot: nothing to plot (run latency or rate)\n");
		return -1;
	}
	if (!mkdtemp(dir))
		return -1;
	for (unsigned i = 0; i < nlat; i++) {
		FILE *f;
		size_t n = lat[i].n, step = n > 4000 ? n / 4000 : 1;

		snprintf(path, sizeof(path), "%s/lat%u.dat", dir, i);
		f = fopen(path, "w");
		if (!f)
			goto out;
		/* Every step-th sample, and the tail in full: the tail is what
		 * the CDF is read for. */
		for (size_t k = 0; k < n; k += (k < n - n / 100 ? step : 1))
			fprintf(f, "%.3f %.6f\n", (double)lat[i].v[k] / 1e3,
				(double)(k + 1) / (double)n);
		fprintf(f, "%.3f 1\n", (double)lat[i].v[n - 1] / 1e3);
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
	unlink(script);
	rmdir(dir);
	return rc;
}
