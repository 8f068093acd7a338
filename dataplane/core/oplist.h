/* SPDX-License-Identifier: MIT */
/*
 * oplist.h - the one list of the engines' pending work: an intrusive FIFO
 * (struct op_fifo: push, pop, put back in front, append, and a walk that
 * takes entries off), a pool of spare entries (struct op_pool) so that a
 * poller in steady state allocates nothing, and both together (struct
 * op_list) with a round robin for the copies an engine advances a step
 * each. An entry starts with its struct op_node (casts between the two
 * rely on it). No locks: a list is its owner's (one poller, or the
 * holder of a lock around it). Engines whose per-poller state (p->eng[id]) starts with
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

/* ---- a FIFO of entries ---- */

struct op_fifo {
	struct op_node *head, *tail; /* oldest first */
};

static inline bool op_fifo_empty(const struct op_fifo *f)
{
	return f->head == NULL;
}

/* Appends @n. */
static inline void op_fifo_push(struct op_fifo *f, struct op_node *n)
{
	n->next = NULL;
	if (f->tail)
		f->tail->next = n;
	else
		f->head = n;
	f->tail = n;
}

/* Puts @n back in front (it was just popped, and waits first). */
static inline void op_fifo_push_front(struct op_fifo *f, struct op_node *n)
{
	n->next = f->head;
	if (!f->tail)
		f->tail = n;
	f->head = n;
}

/* The oldest entry, taken off; NULL when none. */
static inline struct op_node *op_fifo_pop(struct op_fifo *f)
{
	struct op_node *n = f->head;

	if (n) {
		f->head = n->next;
		if (!f->head)
			f->tail = NULL;
	}
	return n;
}

/* Appends all of @from (left empty). */
static inline void op_fifo_append(struct op_fifo *to, struct op_fifo *from)
{
	if (!from->head)
		return;
	if (to->tail)
		to->tail->next = from->head;
	else
		to->head = from->head;
	to->tail = from->tail;
	*from = (struct op_fifo){0};
}

/*
 * A walk that may take entries off as it goes: the entry after @prev
 * (NULL: the first). Read anew on each turn, so entries appended meanwhile
 * (a callback that queues more) are walked too:
 *	for (prev = NULL; (n = op_fifo_after(f, prev));)
 *		if (done) op_fifo_unlink(f, prev, n); else prev = n;
 */
static inline struct op_node *op_fifo_after(const struct op_fifo *f, const struct op_node *prev)
{
	return prev ? prev->next : f->head;
}

/* Takes off @n, the entry after @prev (NULL: the first). */
static inline void op_fifo_unlink(struct op_fifo *f, struct op_node *prev, struct op_node *n)
{
	if (prev)
		prev->next = n->next;
	else
		f->head = n->next;
	if (f->tail == n)
		f->tail = prev;
}

/* ---- spare entries, for reuse ---- */

struct op_pool {
	struct op_node *spare;
};

static inline void op_pool_put(struct op_pool *pool, struct op_node *n)
{
	n->next = pool->spare;
	pool->spare = n;
}

/* A spare entry, or NULL: none. */
static inline struct op_node *op_pool_take(struct op_pool *pool)
{
	struct op_node *n = pool->spare;

	if (n)
		pool->spare = n->next;
	return n;
}

/* An entry of @size bytes: a spare one, else a new one (NULL: no memory). */
static inline void *op_pool_get(struct op_pool *pool, size_t size)
{
	struct op_node *n = op_pool_take(pool);

	return n ? (void *)n : malloc(size);
}

/* Frees the spare entries (each malloc'ed). */
static inline void op_pool_free(struct op_pool *pool)
{
	struct op_node *n;

	while ((n = op_pool_take(pool)))
		free(n);
}

/* ---- an op list: the FIFO of pending ops and their spares ---- */

struct op_list {
	struct op_fifo pending;
	struct op_pool pool;
};

static inline bool op_list_busy(const struct op_list *l)
{
	return !op_fifo_empty(&l->pending);
}

static inline void op_list_push(struct op_list *l, struct op_node *n)
{
	op_fifo_push(&l->pending, n);
}

static inline struct op_node *op_list_pop(struct op_list *l)
{
	return op_fifo_pop(&l->pending);
}

static inline void *op_list_get(struct op_list *l, size_t size)
{
	return op_pool_get(&l->pool, size);
}

/* @n is done with: kept for op_list_get. */
static inline void op_list_put(struct op_list *l, struct op_node *n)
{
	op_pool_put(&l->pool, n);
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
	op_pool_free(&l->pool);
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
