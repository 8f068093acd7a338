/* SPDX-License-Identifier: MIT */
/* log.c - one line per event on stderr: time, level, message. */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "dp_internal.h"

int dp_log_level = DP_LOG_INFO;

void dp_log(int level, const char *fmt, ...)
{
	static const char *const names[] = {"error", "warn", "info", "debug"};
	char line[512];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	int n;

	if (level > dp_log_level)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line), "%02d:%02d:%02d.%03ld dataplaned %s: ", tm.tm_hour,
		     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, names[level]);
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	/* One write per line, so lines of several threads do not interleave. */
	fprintf(stderr, "%s\n", line);
}
