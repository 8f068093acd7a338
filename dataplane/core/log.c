/* SPDX-License-Identifier: MIT */
/* log.c - one line per event on stderr: time, level, message. */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "dp_internal.h"

int dp_log_level = DP_LOG_INFO;

/*
 * Copies the message into out[0..cap) with every byte that is not
 * printable ASCII written as \xNN and '\\' as "\\\\"; never splits an
 * escape. Messages carry strings from clients and peers (names, paths,
 * directory records): escaped here, whatever the call site, none of them
 * can end a log line, forge one or reach a terminal as a control sequence
 * (docs/reliability.md).
 */
static void log_escape(char *out, size_t cap, const char *in)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	for (; *in; in++) {
		unsigned char ch = (unsigned char)*in;

		if (ch >= 0x20 && ch < 0x7f && ch != '\\') {
			if (o + 1 >= cap)
				break;
			out[o++] = (char)ch;
		} else if (ch == '\\') {
			if (o + 2 >= cap)
				break;
			out[o++] = '\\';
			out[o++] = '\\';
		} else {
			if (o + 4 >= cap)
				break;
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[ch >> 4];
			out[o++] = hex[ch & 15];
		}
	}
	out[o] = 0;
}

void dp_log(int level, const char *fmt, ...)
{
	static const char *const names[] = {"error", "warn", "info", "debug"};
	char msg[512], line[1024];
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
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_escape(line + n, sizeof(line) - (size_t)n, msg);
	/* One write per line, so lines of several threads do not interleave. */
	fprintf(stderr, "%s\n", line);
}
