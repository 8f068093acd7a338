/* SPDX-License-Identifier: MIT */
/* service_notify.c - readiness for systemd (Type=notify): READY=1 once the
 * control socket accepts clients, STOPPING=1 at SIGTERM, to a path or an
 * abstract $NOTIFY_SOCKET; nothing goes wrong when the receiver is gone. */
#include <criterion/criterion.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "dataplane.h"
#include "helpers.h"

static void teardown(void)
{
	if (svc.pid > 0)
		svc_stop(&svc);
}

TestSuite(service_notify, .fini = teardown, .timeout = 30);

/* A datagram socket bound to @name (a path, or '@' + abstract name), set
 * as this test's $NOTIFY_SOCKET; services started now inherit it. */
static int notify_listen(const char *name)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t len = strlen(name);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	cr_assert(fd >= 0);
	memcpy(sa.sun_path, name, len);
	if (name[0] == '@')
		sa.sun_path[0] = '\0';
	else
		unlink(name);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa,
			  (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)),
		     0, "bind %s: %m", name);
	cr_assert_eq(setenv("NOTIFY_SOCKET", name, 1), 0);
	return fd;
}

/* The next datagram within @ms, NUL-terminated into @buf; false on timeout. */
static bool notify_next(int fd, char *buf, size_t len, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	ssize_t n;

	if (poll(&p, 1, ms) != 1)
		return false;
	n = recv(fd, buf, len - 1, 0);
	cr_assert(n > 0);
	buf[n] = '\0';
	return true;
}

static bool has_line(const char *msg, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = msg; (p = strstr(p, line)); p += n)
		if ((p == msg || p[-1] == '\n') && (p[n] == '\0' || p[n] == '\n'))
			return true;
	return false;
}

/* READY=1 arrives, and a client connects once it has; STOPPING=1 follows SIGTERM. */
static void ready_then_stopping(const char *name)
{
	char msg[512];
	struct dp_client *c;
	int fd = notify_listen(name);

	cr_assert_eq(svc_start(&svc, NULL), 0);
	cr_assert(notify_next(fd, msg, sizeof(msg), 5000), "no READY=1 within 5 s");
	cr_assert(has_line(msg, "READY=1"), "first notification: '%s'", msg);
	cr_assert_eq(dp_connect(svc.sock, "notify", &c), 0);
	dp_close(c);
	cr_assert_eq(svc_stop(&svc), 0);
	svc.pid = 0;
	cr_assert(notify_next(fd, msg, sizeof(msg), 5000), "no STOPPING=1 after SIGTERM");
	cr_assert(has_line(msg, "STOPPING=1"), "second notification: '%s'", msg);
	close(fd);
}

Test(service_notify, path_socket)
{
	char name[64];

	snprintf(name, sizeof(name), "/tmp/dp-notify-%d", (int)getpid());
	ready_then_stopping(name);
	unlink(name);
}

Test(service_notify, abstract_socket)
{
	char name[64];

	snprintf(name, sizeof(name), "@dp-notify-%d", (int)getpid());
	ready_then_stopping(name);
}

/* A receiver that is gone, or a variable that is not a socket name, is
 * ignored: the service starts and stops cleanly. */
Test(service_notify, no_receiver)
{
	char name[64];

	snprintf(name, sizeof(name), "/tmp/dp-notify-gone-%d", (int)getpid());
	close(notify_listen(name));
	unlink(name);
	cr_assert_eq(svc_start(&svc, NULL), 0);
	cr_assert_eq(svc_stop(&svc), 0);
	svc.pid = 0;
	cr_assert_eq(setenv("NOTIFY_SOCKET", "not-a-socket-name", 1), 0);
	cr_assert_eq(svc_start(&svc, NULL), 0);
	cr_assert_eq(svc_stop(&svc), 0);
	svc.pid = 0;
}
