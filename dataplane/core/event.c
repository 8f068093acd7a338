/* SPDX-License-Identifier: MIT */
/*
 * event.c - the control thread's loop (event.h): epoll registrations of
 * struct ev_handler, one place where epoll_ctl is called, each result
 * checked and logged; wake-ups other threads ring; timers.
 */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "dp_internal.h"
#include "event.h"

#define NS_PER_MS 1000000u

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

/* ---- wake-ups ---- */

static void on_wake(struct ev_handler *h, uint32_t events)
{
	struct ev_wake *w = (struct ev_wake *)((char *)h - offsetof(struct ev_wake, ev));

	(void)events;
	/* Drained first: a ring that comes while `run` works is not lost. */
	wake_efd_drain(h->fd);
	w->run();
}

int ev_wake_open(int epfd, struct ev_wake *w, void (*run)(void), const char *what)
{
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), rc;

	if (fd < 0) {
		rc = -errno;
		log_warn("%s: eventfd: %s", what, strerror(-rc));
		return rc;
	}
	*w = (struct ev_wake){.ev = {.fd = fd, .on_event = on_wake}, .run = run};
	rc = ev_add(epfd, &w->ev, EPOLLIN, what);
	if (rc) {
		close(fd);
		w->ev.fd = -1;
	}
	return rc;
}

void ev_wake_close(struct ev_wake *w)
{
	/* Closing takes it out of the epoll set: no one else holds it. */
	if (w->ev.fd >= 0)
		close(w->ev.fd);
	w->ev.fd = -1;
}

/* ---- timers ---- */

void ev_timer_add(struct ev_timers *ts, struct ev_timer *t)
{
	struct ev_timer **pp = &ts->head;

	while (*pp)
		pp = &(*pp)->next;
	t->due_ns = 0;
	t->next = NULL;
	*pp = t;
}

void ev_timer_arm(struct ev_timer *t, uint64_t due_ns)
{
	if (!t->due_ns || due_ns < t->due_ns)
		t->due_ns = due_ns;
}

int ev_timers_wait_ms(const struct ev_timers *ts)
{
	uint64_t next = 0, now;

	for (const struct ev_timer *t = ts->head; t; t = t->next)
		if (t->due_ns && (!next || t->due_ns < next))
			next = t->due_ns;
	if (!next)
		return -1;
	now = dp_now_ns();
	if (next <= now)
		return 0;
	/* Rounded up: woken before the deadline, the loop would find nothing
	 * due and spin. */
	next = (next - now + NS_PER_MS - 1) / NS_PER_MS;
	return next > INT_MAX ? INT_MAX : (int)next;
}

void ev_timers_run(struct ev_timers *ts)
{
	uint64_t now = dp_now_ns();

	for (struct ev_timer *t = ts->head; t; t = t->next) {
		int ms;

		if (!t->due_ns || t->due_ns > now)
			continue;
		/* Disarmed before it runs: the handler, or one it calls, may
		 * arm it again, and the earlier of that and its answer holds. */
		t->due_ns = 0;
		ms = t->on_timer(t);
		if (ms != EV_TIMER_NOMORE)
			ev_timer_arm(t, dp_now_ns() + (uint64_t)ms * NS_PER_MS);
	}
}

void ev_process(int epfd, struct ev_timers *ts)
{
	struct epoll_event evs[64];
	int n = epoll_wait(epfd, evs, 64, ev_timers_wait_ms(ts));

	for (int i = 0; i < n; i++) {
		struct ev_handler *h = evs[i].data.ptr;

		h->on_event(h, evs[i].events);
	}
	ev_timers_run(ts);
}
