/* SPDX-License-Identifier: MIT */
/*
 * event.h - the control thread's epoll loop dispatches through callbacks
 * stored with each fd (Redis ae.c style): whoever owns an fd registers a
 * struct ev_handler, epoll hands it back in data.ptr, and the loop calls
 * its on_event. No tag comparisons, no owner asked "is this yours?".
 *
 * A handler lives as long as its registration: ev_del() before the fd is
 * closed or the handler freed.
 */
#ifndef DP_EVENT_H
#define DP_EVENT_H

#include <stdint.h>

struct ev_handler {
	int fd;
	/* events: the EPOLL* bits epoll reported. */
	void (*on_event)(struct ev_handler *h, uint32_t events);
};

/* epoll_ctl ADD / MOD / DEL of h->fd with h as data.ptr. 0, or -errno
 * (logged with h->fd and `what`, for the caller to handle). */
int ev_add(int epfd, struct ev_handler *h, uint32_t events, const char *what);
int ev_mod(int epfd, struct ev_handler *h, uint32_t events, const char *what);
int ev_del(int epfd, struct ev_handler *h, const char *what);

#endif /* DP_EVENT_H */
