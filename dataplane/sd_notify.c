/* SPDX-License-Identifier: MIT */
/*
 * sd_notify.c - readiness for systemd (Type=notify), without libsystemd.
 *
 * The protocol is one datagram of "KEY=value" lines sent to the AF_UNIX
 * socket named by $NOTIFY_SOCKET (a path, or an abstract name written with
 * a leading '@'). Outside systemd the variable is unset and this does
 * nothing. The send never blocks: the socket is non-blocking, and a full or
 * missing receiver costs one failed sendto, logged at debug.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "dp_internal.h"

void service_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t len;
	int fd;

	if (!path || (path[0] != '/' && path[0] != '@'))
		return;
	len = strlen(path);
	if (len < 2 || len >= sizeof(sa.sun_path)) {
		log_warn("NOTIFY_SOCKET: unusable path (%zu bytes)", len);
		return;
	}
	memcpy(sa.sun_path, path, len);
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = '\0';
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		log_warn("NOTIFY_SOCKET: socket: %s", strerror(errno));
		return;
	}
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
		   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) < 0)
		log_debug("NOTIFY_SOCKET: %s", strerror(errno));
	close(fd);
}
