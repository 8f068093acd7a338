/* SPDX-License-Identifier: MIT */
/*
 * queue.c - dataplane.Queue: a queue pair of the data path (write, read,
 * submit, poll, poll_into, wait, run; fileno and arm for asyncio), and its
 * completions as dataplane.Completion struct sequences.
 */
#include "_dataplane.h"

static PyStructSequence_Field completion_fields[] = {
	{"user_data", "the descriptor's user_data"},
	{"status", "0, or the transfer's -errno (docs/api.md, \"Errors of a descriptor\")"},
	{"flags", "which engine moved it: F_LOCAL, F_FABRIC, F_GPU, F_FILE, F_SAME_HOST"},
	{"bytes", "bytes moved (0 for a failed transfer)"},
	{NULL, NULL}};

PyStructSequence_Desc completion_desc = {
	"dataplane.Completion",
	"One completion: (user_data, status, flags, bytes). status is 0 or a negative errno.",
	completion_fields, 4};

static PyObject *completion_new(const struct dp_cqe *e)
{
	PyObject *o = PyStructSequence_New(completion_type), *v;

	if (!o)
		return NULL;
	if (!(v = PyLong_FromUnsignedLongLong(e->user_data)))
		goto err;
	PyStructSequence_SetItem(o, 0, v);
	if (!(v = PyLong_FromLong(e->status)))
		goto err;
	PyStructSequence_SetItem(o, 1, v);
	if (!(v = PyLong_FromUnsignedLong(e->flags)))
		goto err;
	PyStructSequence_SetItem(o, 2, v);
	if (!(v = PyLong_FromUnsignedLongLong(e->bytes)))
		goto err;
	PyStructSequence_SetItem(o, 3, v);
	return o;
err:
	Py_DECREF(o);
	return NULL;
}

static PyObject *completion_list(const struct dp_cqe *e, int n)
{
	PyObject *l = PyList_New(n);

	if (!l)
		return NULL;
	for (int i = 0; i < n; i++) {
		PyObject *o = completion_new(&e[i]);

		if (!o) {
			Py_DECREF(l);
			return NULL;
		}
		PyList_SetItem(l, i, o);
	}
	return l;
}

/* TransferError for @n failed completions (n > 0) out of @total. */
static PyObject *raise_transfer(const struct dp_cqe *failed, Py_ssize_t n, Py_ssize_t total)
{
	char text[256];
	PyObject *l, *exc;

	snprintf(text, sizeof(text), "%zd of %zd transfers failed; the first (user_data %llu): %s",
		 n, total, (unsigned long long)failed[0].user_data, dp_strerror(failed[0].status));
	l = completion_list(failed, (int)n);
	if (!l)
		return NULL;
	exc = PyObject_CallFunction(transfer_error, "isO", -failed[0].status, text, l);
	Py_DECREF(l);
	if (exc) {
		PyErr_SetObject(transfer_error, exc);
		Py_DECREF(exc);
	}
	return NULL;
}

static int queue_check(Queue *q)
{
	if (!q->q || !q->client) {
		raise_closed("the queue");
		return -1;
	}
	if (q->busy) {
		raise_text(busy_error, -EBUSY,
			   "the queue is in use by another thread (a queue is used by one thread "
			   "at a time)");
		return -1;
	}
	return 0;
}

static void queue_disarm(Queue *q)
{
	if (q->armed) {
		dp_ring_finish_sleep(&q->pair->cq);
		dp_doorbell_drain(q->cq_fd);
		q->armed = false;
	}
}

/* Frees the queue's C side (its client closes it, or it is closed). */
int queue_detach(Queue *q, bool destroy)
{
	int rc = 0;

	if (q->q && destroy)
		rc = dp_queue_destroy(q->q);
	q->q = NULL;
	q->pair = NULL;
	link_del(&q->link);
	Py_CLEAR(q->client);
	free(q->cqes);
	q->cqes = NULL;
	return rc;
}

static void queue_dealloc(PyObject *self)
{
	Queue *q = (Queue *)self;

	if (q->weaklist)
		PyObject_ClearWeakRefs(self);
	queue_detach(q, q->client && q->client->c);
	free_self(self);
}

static PyObject *queue_close(PyObject *self, PyObject *unused)
{
	Queue *q = (Queue *)self;
	int rc;

	(void)unused;
	if (!q->q)
		Py_RETURN_NONE;
	if (q->busy)
		return raise_text(busy_error, -EBUSY, "the queue is in a call of another thread");
	rc = queue_detach(q, q->client && q->client->c);
	if (rc < 0 && rc != -ECONNRESET)
		return raise_dp(rc);
	Py_RETURN_NONE;
}

static PyObject *queue_exit(PyObject *self, PyObject *args)
{
	(void)args;
	return queue_close(self, NULL);
}

/* One descriptor from (region, local_off, segment, target_off, length,
 * user_data=0, notify=None): a WRITE with an int notify carries that
 * 64-bit value to the target's owner (DP_DESC_F_NOTIFY); a WRITE or READ
 * with a bytes-like notify carries those bytes and the sender's name
 * (DP_DESC_F_NOTIFY_MSG; dp_submit copies them). */
static PyObject *queue_one(Queue *q, uint8_t op, PyObject *const *args, Py_ssize_t nargs,
			   PyObject *kwnames)
{
	static const char *const names[] = {"region", "local_off", "segment", "target_off",
					    "length", "user_data", "notify"};
	PyObject *a[7] = {NULL};
	Py_buffer msg = {.obj = NULL};
	struct dp_desc d;
	uint32_t region, segment;
	uint64_t v[4] = {0}, nv = 0;
	int rc;

	if (nargs > 6) {
		PyErr_SetString(PyExc_TypeError, "at most 6 positional arguments");
		return NULL;
	}
	for (Py_ssize_t i = 0; i < nargs; i++)
		a[i] = args[i];
	if (kwnames) {
		Py_ssize_t nk = PyTuple_Size(kwnames);

		for (Py_ssize_t k = 0; k < nk; k++) {
			PyObject *key = PyTuple_GetItem(kwnames, k);
			int j = 0;

			while (j < 7 && PyUnicode_CompareWithASCIIString(key, names[j]))
				j++;
			if (j == 7 || a[j]) {
				PyErr_Format(PyExc_TypeError, "unexpected or repeated argument %R",
					     key);
				return NULL;
			}
			a[j] = args[nargs + k];
		}
	}
	for (int i = 0; i < 5; i++)
		if (!a[i]) {
			PyErr_Format(PyExc_TypeError, "missing argument '%s'", names[i]);
			return NULL;
		}
	if (queue_check(q) || region_id(a[0], &region) || get_u64(a[1], &v[0], "local_off") ||
	    segment_handle(a[2], &segment) || get_u64(a[3], &v[1], "target_off") ||
	    get_u64(a[4], &v[2], "length") || (a[5] && get_u64(a[5], &v[3], "user_data")))
		return NULL;
	dp_prep_write(&d, (int)region, v[0], (int)segment, v[1], v[2], v[3]);
	d.opcode = op;
	if (a[6] && a[6] != Py_None && PyObject_CheckBuffer(a[6])) {
		if (PyObject_GetBuffer(a[6], &msg, PyBUF_SIMPLE))
			return NULL;
		if (op == DP_OP_WRITE)
			dp_prep_write_msg(&d, (int)region, v[0], (int)segment, v[1], v[2], v[3],
					  msg.buf, (size_t)msg.len);
		else
			dp_prep_read_msg(&d, (int)region, v[0], (int)segment, v[1], v[2], v[3],
					 msg.buf, (size_t)msg.len);
	} else if (a[6] && a[6] != Py_None) {
		if (op != DP_OP_WRITE) {
			PyErr_SetString(PyExc_ValueError,
					"an int notify goes with write() only (bytes go with "
					"read() too)");
			return NULL;
		}
		if (get_u64(a[6], &nv, "notify"))
			return NULL;
		d.flags = DP_DESC_F_NOTIFY;
		d.notify = nv;
	}
	rc = dp_submit(q->q, &d, 1);
	if (msg.obj)
		PyBuffer_Release(&msg);
	if (rc < 0)
		return raise_dp(rc);
	if (rc == 0)
		return raise_text(error_class(EAGAIN), -EAGAIN,
				  "the queue is full (depth descriptors in flight, or the ring): "
				  "reap completions first");
	Py_RETURN_NONE;
}

static PyObject *queue_write(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
			     PyObject *kwnames)
{
	return queue_one((Queue *)self, DP_OP_WRITE, args, nargs, kwnames);
}

static PyObject *queue_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
			    PyObject *kwnames)
{
	return queue_one((Queue *)self, DP_OP_READ, args, nargs, kwnames);
}

/* A Batch for @ops: itself, or a new one from a list (a new reference). */
static Batch *as_batch(PyObject *ops, uint8_t op)
{
	if (PyObject_TypeCheck(ops, batch_type)) {
		Py_INCREF(ops);
		return (Batch *)ops;
	}
	return batch_from_list(ops, op);
}

static PyObject *queue_submit(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"ops", "start", "op", NULL};
	Queue *q = (Queue *)self;
	PyObject *ops, *opo = NULL;
	Py_ssize_t start = 0;
	uint8_t op = DP_OP_WRITE;
	Batch *b;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|n$O:submit", kwlist, &ops, &start, &opo))
		return NULL;
	if (queue_check(q) || (opo && get_opcode(opo, &op)))
		return NULL;
	if (!(b = as_batch(ops, op)))
		return NULL;
	if (start < 0 || start > b->n) {
		Py_DECREF(b);
		PyErr_SetString(PyExc_IndexError, "start outside the batch");
		return NULL;
	}
	rc = b->n - start > (Py_ssize_t)UINT_MAX
		     ? dp_submit(q->q, b->d + start, UINT_MAX)
		     : dp_submit(q->q, b->d + start, (unsigned)(b->n - start));
	Py_DECREF(b);
	if (rc < 0)
		return raise_dp(rc);
	return PyLong_FromLong(rc);
}

static unsigned max_arg(Queue *q, PyObject *o, bool *bad)
{
	long v;

	*bad = false;
	if (!o || o == Py_None)
		return q->depth;
	v = PyLong_AsLong(o);
	if (v == -1 && PyErr_Occurred()) {
		*bad = true;
		return 0;
	}
	if (v < 1) {
		PyErr_SetString(PyExc_ValueError, "max must be at least 1");
		*bad = true;
		return 0;
	}
	return v > (long)q->depth ? q->depth : (unsigned)v;
}

static PyObject *queue_poll(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	Queue *q = (Queue *)self;
	unsigned max;
	bool bad;
	int k;

	if (nargs > 1) {
		PyErr_SetString(PyExc_TypeError, "poll(max=None)");
		return NULL;
	}
	if (queue_check(q))
		return NULL;
	max = max_arg(q, nargs ? args[0] : NULL, &bad);
	if (bad)
		return NULL;
	queue_disarm(q);
	k = dp_poll(q->q, q->cqes, max);
	if (k < 0)
		return raise_dp(k);
	return completion_list(q->cqes, k);
}

static PyObject *queue_poll_into(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	Queue *q = (Queue *)self;
	Py_buffer buf;
	Py_ssize_t cap;
	int k;

	if (nargs != 1) {
		PyErr_SetString(PyExc_TypeError, "poll_into(buffer)");
		return NULL;
	}
	if (queue_check(q) ||
	    PyObject_GetBuffer(args[0], &buf, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS))
		return NULL;
	cap = buf.len / (Py_ssize_t)sizeof(struct dp_cqe);
	if (cap > (Py_ssize_t)q->depth)
		cap = q->depth;
	if (cap < 1) {
		PyBuffer_Release(&buf);
		PyErr_SetString(PyExc_ValueError, "the buffer holds no 32-byte completion");
		return NULL;
	}
	queue_disarm(q);
	if (((uintptr_t)buf.buf & 7) == 0) {
		k = dp_poll(q->q, buf.buf, (unsigned)cap);
	} else {
		k = dp_poll(q->q, q->cqes, (unsigned)cap);
		if (k > 0)
			memcpy(buf.buf, q->cqes, (size_t)k * sizeof(struct dp_cqe));
	}
	PyBuffer_Release(&buf);
	if (k < 0)
		return raise_dp(k);
	return PyLong_FromLong(k);
}

static void busy_begin(Queue *q)
{
	q->busy = true;
	q->client->busy++;
}

static void busy_end(Queue *q)
{
	q->busy = false;
	q->client->busy--;
}

static PyObject *queue_wait(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"timeout", "max", NULL};
	Queue *q = (Queue *)self;
	PyObject *to = NULL, *maxo = NULL;
	int64_t ms;
	uint64_t deadline;
	PyThreadState *ts;
	unsigned max;
	bool bad;
	int k;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:wait", kwlist, &to, &maxo))
		return NULL;
	if (queue_check(q) || timeout_ms(to, &ms))
		return NULL;
	max = max_arg(q, maxo, &bad);
	if (bad)
		return NULL;
	queue_disarm(q);
	deadline = ms < 0 ? UINT64_MAX : dp_now_ms() + (uint64_t)ms;
	for (;;) {
		uint64_t now = dp_now_ms();
		int slice = SLICE_MS;

		if (deadline != UINT64_MAX)
			slice = deadline <= now		    ? 0
				: deadline - now < SLICE_MS ? (int)(deadline - now)
							    : SLICE_MS;
		busy_begin(q);
		ts = PyEval_SaveThread();
		k = dp_wait(q->q, q->cqes, max, slice);
		PyEval_RestoreThread(ts);
		busy_end(q);
		if (k < 0)
			return raise_dp(k);
		if (k > 0 || dp_now_ms() >= deadline)
			break;
		if (PyErr_CheckSignals())
			return NULL;
	}
	return completion_list(q->cqes, k);
}

/*
 * Queue.run(): every descriptor of the batch submitted and completed, the
 * GIL released meanwhile; spins on the CQ for spin_us after each step, then
 * sleeps on the doorbell. Needs the queue idle (nothing in flight) so that
 * every completion it reaps is its own.
 */
static PyObject *queue_run(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"ops", "timeout", "op", "spin_us", NULL};
	Queue *q = (Queue *)self;
	PyObject *ops, *to = NULL, *opo = NULL;
	struct dp_queue_stats st;
	struct dp_cqe *failed = NULL;
	Py_ssize_t sent = 0, done = 0, nfailed = 0;
	double spin_us = 50;
	uint8_t op = DP_OP_WRITE;
	PyThreadState *ts;
	uint64_t deadline;
	int64_t ms;
	Batch *b;
	int rc = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O$Od:run", kwlist, &ops, &to, &opo, &spin_us))
		return NULL;
	if (queue_check(q) || timeout_ms(to, &ms) || (opo && get_opcode(opo, &op)))
		return NULL;
	dp_queue_stats(q->q, &st);
	if (st.in_flight)
		return raise_text(
			busy_error, -EBUSY,
			"run() needs an idle queue: reap the descriptors in flight first");
	if (!(b = as_batch(ops, op)))
		return NULL;
	queue_disarm(q);
	deadline = ms < 0 ? UINT64_MAX : dp_now_ms() + (uint64_t)ms;
	busy_begin(q);
	ts = PyEval_SaveThread();
	while (done < b->n) {
		uint64_t t0, slice_end;
		int k;

		if (sent < b->n) {
			unsigned want = b->n - sent > (Py_ssize_t)q->depth
						? q->depth
						: (unsigned)(b->n - sent);

			k = dp_submit(q->q, b->d + sent, want);
			if (k < 0) {
				rc = k;
				break;
			}
			sent += k;
		}
		t0 = dp_now_ns();
		for (;;) {
			k = dp_poll(q->q, q->cqes, q->depth);
			if (k)
				break;
			if ((double)(dp_now_ns() - t0) >= spin_us * 1e3)
				break;
		}
		if (k == 0) {
			uint64_t now = dp_now_ms();

			if (now >= deadline) {
				rc = -ETIMEDOUT;
				break;
			}
			slice_end = deadline - now < SLICE_MS ? deadline - now : SLICE_MS;
			k = dp_wait(q->q, q->cqes, q->depth, (int)slice_end);
			if (k == 0) {
				/* A slice passed: let Python see signals. */
				int sig;

				PyEval_RestoreThread(ts);
				sig = PyErr_CheckSignals();
				ts = PyEval_SaveThread();
				if (sig) {
					rc = 1; /* exception set */
					break;
				}
				continue;
			}
		}
		if (k < 0) {
			rc = k;
			break;
		}
		for (int i = 0; i < k; i++)
			if (q->cqes[i].status) {
				if (!failed)
					failed = malloc(sizeof(*failed) * (size_t)b->n);
				if (failed)
					failed[nfailed] = q->cqes[i];
				nfailed++;
			}
		done += k;
	}
	PyEval_RestoreThread(ts);
	busy_end(q);
	Py_DECREF(b);
	if (rc == 1) {
		free(failed);
		return NULL;
	}
	if (rc == -ETIMEDOUT) {
		char t[200];

		free(failed);
		snprintf(
			t, sizeof(t),
			"run: %zd of %zd descriptors not complete within the timeout (they stay in "
			"flight: reap them with poll/wait)",
			(Py_ssize_t)(sent - done), sent);
		return raise_text(NULL, rc, t);
	}
	if (rc < 0) {
		free(failed);
		return raise_dp(rc);
	}
	if (nfailed) {
		PyObject *r = failed ? raise_transfer(failed, nfailed, done) : PyErr_NoMemory();

		free(failed);
		return r;
	}
	return PyLong_FromSsize_t(done);
}

static PyObject *queue_fileno(PyObject *self, PyObject *unused)
{
	Queue *q = (Queue *)self;

	(void)unused;
	if (!q->q || !q->client)
		return raise_closed("the queue");
	return PyLong_FromLong(q->cq_fd);
}

static PyObject *queue_arm(PyObject *self, PyObject *unused)
{
	Queue *q = (Queue *)self;

	(void)unused;
	if (queue_check(q))
		return NULL;
	if (!q->armed) {
		if (!dp_ring_prepare_sleep(&q->pair->cq))
			Py_RETURN_FALSE;
		q->armed = true;
	}
	Py_RETURN_TRUE;
}

static PyObject *queue_stats(PyObject *self, PyObject *unused)
{
	Queue *q = (Queue *)self;
	struct dp_queue_stats st;
	int rc;

	(void)unused;
	/* Its counters move under a thread in wait() or run(). */
	if (queue_check(q))
		return NULL;
	rc = dp_queue_stats(q->q, &st);
	if (rc < 0)
		return raise_dp(rc);
	return Py_BuildValue("{sKsKsKsKsIsI}", "submitted", (unsigned long long)st.submitted,
			     "completed", (unsigned long long)st.completed, "failed",
			     (unsigned long long)st.failed, "bytes", (unsigned long long)st.bytes,
			     "in_flight", st.in_flight, "depth", st.depth);
}

static PyObject *queue_get_depth(PyObject *self, void *p)
{
	(void)p;
	return PyLong_FromUnsignedLong(((Queue *)self)->depth);
}

static PyObject *queue_get_in_flight(PyObject *self, void *p)
{
	Queue *q = (Queue *)self;
	struct dp_queue_stats st;

	(void)p;
	if (!q->q)
		return PyLong_FromLong(0);
	dp_queue_stats(q->q, &st);
	return PyLong_FromUnsignedLong(st.in_flight);
}

static PyObject *queue_get_closed(PyObject *self, void *p)
{
	(void)p;
	return PyBool_FromLong(!((Queue *)self)->q);
}

static PyObject *queue_repr(PyObject *self)
{
	Queue *q = (Queue *)self;

	return PyUnicode_FromFormat("<dataplane.Queue depth %u%s>", q->depth,
				    q->q ? "" : ", closed");
}

static PyMethodDef queue_methods[] = {
	{"write", (PyCFunction)(void (*)(void))queue_write, METH_FASTCALL | METH_KEYWORDS,
	 "write($self, region, local_off, segment, target_off, length, user_data=0)\n--\n\n"
	 "Submits one WRITE (local region -> segment). region and segment are Region / "
	 "Segment objects or their ids. Returns None; the completion carries user_data. "
	 "Raises BusyError (EAGAIN) when the queue has no room: reap first."},
	{"read", (PyCFunction)(void (*)(void))queue_read, METH_FASTCALL | METH_KEYWORDS,
	 "read($self, region, local_off, segment, target_off, length, user_data=0)\n--\n\n"
	 "Submits one READ (segment -> local region); as write()."},
	{"submit", (PyCFunction)(void (*)(void))queue_submit, METH_VARARGS | METH_KEYWORDS,
	 "submit($self, ops, start=0, *, op='write')\n--\n\n"
	 "Submits descriptors start.. of ops (a Batch, or a list of (region, local_off, "
	 "segment, target_off, length[, user_data]) tuples) in one dp_submit call. Returns how "
	 "many were accepted: fewer than asked when the queue's credit or ring is short "
	 "(submit the rest with start= after reaping)."},
	{"poll", (PyCFunction)(void (*)(void))queue_poll, METH_FASTCALL,
	 "poll($self, max=None)\n--\n\n"
	 "Reaps up to max (default: depth) completions without blocking: a list of "
	 "Completion, possibly empty. Raises ConnectionLostError when the service died with "
	 "descriptors in flight."},
	{"poll_into", (PyCFunction)(void (*)(void))queue_poll_into, METH_FASTCALL,
	 "poll_into($self, buffer)\n--\n\n"
	 "Reaps completions into a writable buffer of 32-byte struct dp_cqe entries (e.g. "
	 "numpy.zeros(n, dataplane.COMPLETION_DTYPE)) and returns how many: no Python object "
	 "per completion."},
	{"wait", (PyCFunction)(void (*)(void))queue_wait, METH_VARARGS | METH_KEYWORDS,
	 "wait($self, timeout=None, max=None)\n--\n\n"
	 "Reaps at least one completion, sleeping on the queue's doorbell up to timeout "
	 "seconds (None: until one comes) with the GIL released. Returns a list of "
	 "Completion; empty on timeout. Ctrl-C interrupts it."},
	{"run", (PyCFunction)(void (*)(void))queue_run, METH_VARARGS | METH_KEYWORDS,
	 "run($self, ops, timeout=None, *, op='write', spin_us=50)\n--\n\n"
	 "Submits every descriptor of ops (a Batch or a list, as submit()) and waits until "
	 "all completed, as many at a time as the queue takes, with the GIL released. Returns "
	 "the count. Raises TransferError (its .completions: the failed ones) when any "
	 "failed, DataplaneTimeoutError when not done within timeout. Needs the queue idle "
	 "(BusyError otherwise)."},
	{"fileno", queue_fileno, METH_NOARGS,
	 "fileno($self)\n--\n\nThe queue's completion doorbell fd, for selectors and "
	 "loop.add_reader: readable when completions came while the queue was armed "
	 "(arm())."},
	{"arm", queue_arm, METH_NOARGS,
	 "arm($self)\n--\n\n"
	 "Asks the service to ring the doorbell (fileno()) on the next completion. Returns "
	 "False when completions are already waiting (poll now instead of sleeping). The "
	 "next poll()/wait() disarms. Queue.wait_async() does this for asyncio."},
	{"stats", queue_stats, METH_NOARGS,
	 "stats($self)\n--\n\nThe library's figures (dp_queue_stats): submitted, completed, "
	 "failed, bytes, in_flight, depth."},
	{"close", queue_close, METH_NOARGS,
	 "close($self)\n--\n\nCloses the queue (dp_queue_destroy); completions not reaped are "
	 "lost. Twice is a no-op."},
	{"__enter__", enter_self, METH_NOARGS, NULL},
	{"__exit__", queue_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL}};

static PyGetSetDef queue_getset[] = {
	{"depth", queue_get_depth, NULL, "queue depth: at most this many in flight", NULL},
	{"in_flight", queue_get_in_flight, NULL, "descriptors submitted and not yet reaped", NULL},
	{"closed", queue_get_closed, NULL, "whether close() ran (or the client closed)", NULL},
	{NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef queue_members[] = {
	{"__weaklistoffset__", T_PYSSIZET, offsetof(Queue, weaklist), READONLY, NULL},
	{NULL, 0, 0, 0, NULL}};

static PyType_Slot queue_slots[] = {
	{Py_tp_doc, "A queue pair (Client.queue): submission ring, completion ring, doorbell.\n\n"
		    "One thread uses a queue at a time (another thread's call raises "
		    "BusyError); make one per thread."},
	{Py_tp_dealloc, queue_dealloc},
	{Py_tp_methods, queue_methods},
	{Py_tp_getset, queue_getset},
	{Py_tp_members, queue_members},
	{Py_tp_repr, queue_repr},
	{0, NULL}};

PyType_Spec queue_spec = {"dataplane.Queue", sizeof(Queue), 0, Py_TPFLAGS_DEFAULT, queue_slots};
