/* SPDX-License-Identifier: MIT */
/*
 * event.h - the control thread's loop (Redis ae.c style): fd events
 * dispatched through callbacks stored with each fd, and timers.
 *
 * Fds: whoever owns an fd registers a struct ev_handler, epoll hands it
 * back in data.ptr, and the loop calls its on_event. No tag comparisons,
 * no owner asked "is this yours?". A handler lives as long as its
 * registration: ev_del() before the fd is closed or the handler freed.
 *
 * Timers (ae.c's time events): each is due at a time of dp_now_ns()'s
 * clock. The loop sleeps in epoll_wait no longer than until the nearest
 * (ev_timers_wait_ms) and runs the due ones after the batch of fd events
 * (ev_timers_run), so a timer armed for now is work left for after the
 * batch. A timer's handler returns the milliseconds until it is due again,
 * or EV_TIMER_NOMORE; whoever learns of an earlier deadline arms it for
 * that (ev_timer_arm).
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

/*
 * A wake-up other threads ring: an eventfd no client holds, rung with
 * wake_efd_ring(w->ev.fd) (dp_internal.h), and `run` called on the loop's
 * thread once for any number of rings since the last. ev_wake_open makes
 * the eventfd and adds it to the set: 0, or -errno (logged; w->ev.fd
 * stays -1, and a ring goes nowhere). A wake-up is never closed while a
 * thread that rings it runs.
 */
struct ev_wake {
	struct ev_handler ev;
	void (*run)(void);
};

int ev_wake_open(int epfd, struct ev_wake *w, void (*run)(void), const char *what);
void ev_wake_close(struct ev_wake *w);

#define EV_TIMER_NOMORE (-1)

struct ev_timer {
	uint64_t due_ns; /* 0: not armed */
	/* The milliseconds until it is due again, or EV_TIMER_NOMORE. */
	int (*on_timer)(struct ev_timer *t);
	struct ev_timer *next; /* the loop's timers */
};

/* A loop's timers, in the order they were added (zero: none): when
 * several are due they run in that order. */
struct ev_timers {
	struct ev_timer *head;
};

/* Adds `t` for the loop's lifetime, not armed. */
void ev_timer_add(struct ev_timers *ts, struct ev_timer *t);
/* Makes `t` due at `due_ns` at the latest (dp_now_ns(): after this batch). */
void ev_timer_arm(struct ev_timer *t, uint64_t due_ns);
/* epoll_wait's timeout: ms until the nearest timer is due (rounded up,
 * so that a wake-up finds it due), 0 if one is, -1 if none is armed. */
int ev_timers_wait_ms(const struct ev_timers *ts);
/* Runs every timer due, each once: one its handler makes due again at
 * once runs after the next batch. */
void ev_timers_run(struct ev_timers *ts);

/* One turn of the loop (ae.c's aeProcessEvents): a batch of fd events on
 * `epfd`, waited for no longer than the nearest timer, each handed to its
 * handler, then the timers due. */
void ev_process(int epfd, struct ev_timers *ts);

#endif /* DP_EVENT_H */
