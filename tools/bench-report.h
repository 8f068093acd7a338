/* SPDX-License-Identifier: MIT */
/*
 * bench-report.h - what dp-bench shows besides its figures: a progress line
 * on long runs (redrawn in place on a terminal, a plain line every few
 * seconds when piped), results as one JSON document (--json), and gnuplot
 * charts (--plot FILE.png).
 */
#ifndef DP_BENCH_REPORT_H
#define DP_BENCH_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- progress ---- */

#define PROGRESS_MAX_POINTS 4096

struct progress {
	const char *what;
	uint64_t total, done;
	uint32_t calls;
	uint64_t t0, last_draw, last_point;
	bool drawn;
	/* (time since start, done) every 50 ms: throughput over time. */
	unsigned npoints;
	double t[PROGRESS_MAX_POINTS];
	uint64_t n[PROGRESS_MAX_POINTS];
};

void progress_start(struct progress *p, const char *what, uint64_t total);
/* Cheap enough for every operation: looks at the clock every 64 calls. */
void progress_update(struct progress *p, uint64_t done);
/* Erases the line (terminal) and keeps the time series. */
void progress_end(struct progress *p);

/* ---- JSON (--json) ---- */

/* Human-readable output goes to stderr from here on; report_close()
 * prints the JSON document, alone, on stdout. */
void report_json_begin(void);
bool report_json(void);
/* Nesting: an object or array member named key (NULL inside an array). */
void report_obj(const char *key);
void report_arr(const char *key);
void report_end(void);
void report_num(const char *key, double v);
void report_u64(const char *key, uint64_t v);
void report_str(const char *key, const char *v);
void report_bool(const char *key, bool v);
void report_close(void);

/* ---- charts (--plot) ---- */

/* Keeps the latency samples (ns, sorted) for the CDF and a progress's
 * time series for throughput over time; plot_write() runs gnuplot. */
void plot_latency(const char *label, const uint64_t *sorted, size_t n);
void plot_throughput(const char *label, const struct progress *p);
/* 0, or -1 with a message on stderr (gnuplot missing or failed). */
int plot_write(const char *png);

#endif
