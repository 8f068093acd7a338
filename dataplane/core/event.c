/* SPDX-License-Identifier: MIT */
/*
 * event.c - epoll registrations of struct ev_handler (event.h): one place
 * where epoll_ctl is called for the control thread, each result checked
 * and logged.
 */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>

#include "dp_internal.h"
#include "event.h"

static int ctl(int epfd, int op, struct ev_handler *h, uint32_t events, const char *what)
{
	static const char *const ops[] = {
		[EPOLL_CTL_ADD] = "add", [EPOLL_CTL_MOD] = "modify", [EPOLL_CTL_DEL] = "remove"};
	struct epoll_event ev = {.events = events, .data.ptr = h};
	int err;

	if (epoll_ctl(epfd, op, h->fd, &ev) == 0)
		return 0;
	err = errno;
	log_warn("epoll: cannot %s %s (fd %d): %s", ops[op], what, h->fd, strerror(err));
	return -err;
}

int ev_add(int epfd, struct ev_handler *h, uint32_t events, const char *what)
{
	return ctl(epfd, EPOLL_CTL_ADD, h, events, what);
}

int ev_mod(int epfd, struct ev_handler *h, uint32_t events, const char *what)
{
	return ctl(epfd, EPOLL_CTL_MOD, h, events, what);
}

int ev_del(int epfd, struct ev_handler *h, const char *what)
{
	return ctl(epfd, EPOLL_CTL_DEL, h, 0, what);
}
