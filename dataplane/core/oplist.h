/* SPDX-License-Identifier: MIT */
/*
 * oplist.h - an engine's pending work on one poller: a FIFO of the copies
 * it advances round robin, a step each, and a pool of spare entries so that
 * a poller in steady state allocates nothing. Intrusive and unlocked: one
 * per poller, touched by that poller only. An entry starts with its
 * struct op_node. Engines whose per-poller state (p->eng[id]) starts with
 * their struct op_list (host, vm) take their progress, busy and shutdown
 * from the op_engine_* calls at the end.
 */
#ifndef DP_OPLIST_H
#define DP_OPLIST_H

#include <stdbool.h>
#include <stdlib.h>

#include "dp_internal.h"

struct op_node {
	struct op_node *next;
};

struct op_list {
	struct op_node *head, *tail; /* pending, oldest first */
	struct op_node *spare;	     /* entries to reuse */
};

static inline bool op_list_busy(const struct op_list *l)
{
	return l->head != NULL;
}

/* Appends @n to the pending FIFO. */
static inline void op_list_push(struct op_list *l, struct op_node *n)
{
	n->next = NULL;
	if (l->tail)
		l->tail->next = n;
	else
		l->head = n;
	l->tail = n;
}

/* The oldest pending entry, taken off the FIFO; NULL when none. */
static inline struct op_node *op_list_pop(struct op_list *l)
{
	struct op_node *n = l->head;

	if (n) {
		l->head = n->next;
		if (!l->head)
			l->tail = NULL;
	}
	return n;
}

/* An entry of @size bytes: a spare one, else a new one (NULL: no memory). */
static inline void *op_list_get(struct op_list *l, size_t size)
{
	struct op_node *n = l->spare;

	if (!n)
		return malloc(size);
	l->spare = n->next;
	return n;
}

/* @n is done with: kept for op_list_get. */
static inline void op_list_put(struct op_list *l, struct op_node *n)
{
	n->next = l->spare;
	l->spare = n;
}

/* Round robin: up to @max steps, each on the oldest pending entry, which
 * goes to the back unless @step returns true (it is done, and @step has
 * finished it). Returns the steps taken. */
static inline int op_list_round(struct op_list *l, int max, bool (*step)(struct op_node *, void *),
				void *arg)
{
	struct op_node *n;
	int steps = 0;

	while (steps < max && (n = op_list_pop(l))) {
		steps++;
		if (!step(n, arg))
			op_list_push(l, n);
	}
	return steps;
}

/* Frees the spare entries (the pending FIFO must be empty). */
static inline void op_list_free(struct op_list *l)
{
	while (l->spare) {
		struct op_node *n = l->spare;

		l->spare = n->next;
		free(n);
	}
}

/* ---- engines whose p->eng[id] starts with their struct op_list ---- */

/* progress: up to @max steps of op_list_round (@step gets the poller). */
static inline int op_engine_progress(struct poller *p, enum engine_id id, int max,
				     bool (*step)(struct op_node *, void *))
{
	struct op_list *l = p->eng[id];

	return l ? op_list_round(l, max, step, p) : 0;
}

/* busy: an op is pending. */
static inline bool op_engine_busy(const struct poller *p, enum engine_id id)
{
	const struct op_list *l = p->eng[id];

	return l && op_list_busy(l);
}

/* cancel_all: every pending op is finished, not cancelled (they need
 * nothing but this thread), @max steps at a time as in progress. */
static inline void op_engine_finish_all(struct poller *p, enum engine_id id, int max,
					bool (*step)(struct op_node *, void *))
{
	while (op_engine_busy(p, id))
		op_engine_progress(p, id, max, step);
}

/* poller_free: the spare entries freed and p->eng[id] cleared; returns the
 * state for the engine to free with what else it holds (NULL: none). */
static inline void *op_engine_take(struct poller *p, enum engine_id id)
{
	struct op_list *l = p->eng[id];

	if (l) {
		op_list_free(l);
		p->eng[id] = NULL;
	}
	return l;
}

#endif /* DP_OPLIST_H */
