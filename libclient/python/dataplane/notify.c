/* SPDX-License-Identifier: MIT */
/*
 * notify.c - the notification calls of dataplane.Client (docs/api.md
 * "Notifications"): notify_open, notify_take, notify_recv, notify_send,
 * notify_fileno.
 */
#include "_dataplane.h"

PyObject *client_notify_open(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"entries", NULL};
	Client *c = (Client *)self;
	unsigned entries = 0;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|I:notify_open", kwlist, &entries) ||
	    client_check(c))
		return NULL;
	rc = CONTROL(c, dp_notify_open(c->c, entries));
	if (rc < 0)
		return raise_dp(rc);
	Py_RETURN_NONE;
}

/* Up to max notifications as tuples (value, offset, len, flags, dropped,
 * sender, segment); timeout_ms < 0: poll, else wait (the GIL released). */
PyObject *client_notify_take(PyObject *self, PyObject *args)
{
	Client *c = (Client *)self;
	struct dp_notification nb[64];
	unsigned max = 64;
	int timeout_ms = -1, n;
	PyObject *list;

	if (!PyArg_ParseTuple(args, "|Ii:_notify_take", &max, &timeout_ms) || client_check(c))
		return NULL;
	if (!max || max > 64)
		max = 64;
	if (timeout_ms < 0) {
		n = dp_notify_poll(c->c, nb, max);
	} else {
		PyThreadState *ts = PyEval_SaveThread();

		n = dp_notify_wait(c->c, nb, max, timeout_ms);
		PyEval_RestoreThread(ts);
	}
	if (n < 0)
		return raise_dp(n);
	list = PyList_New(n);
	for (int i = 0; list && i < n; i++) {
		PyObject *t = Py_BuildValue("(KKKIIIs)", (unsigned long long)nb[i].value,
					    (unsigned long long)nb[i].offset,
					    (unsigned long long)nb[i].len, nb[i].flags,
					    nb[i].dropped, nb[i].sender, nb[i].segment);

		if (!t) {
			Py_DECREF(list);
			return NULL;
		}
		PyList_SetItem(list, i, t);
	}
	return list;
}

/* _notify_recv(max, timeout_ms): up to max notifications of either form
 * (dp_notify_recv), the first waited for up to timeout_ms (the GIL
 * released), as raw tuples (sender, bytes, value, offset, len, flags,
 * dropped, sender id, segment). */
PyObject *client_notify_recv(PyObject *self, PyObject *args)
{
	Client *c = (Client *)self;
	unsigned max = 64;
	int timeout_ms = 0;
	unsigned got = 0;
	PyObject *list;
	uint8_t *buf;

	if (!PyArg_ParseTuple(args, "|Ii:_notify_recv", &max, &timeout_ms) || client_check(c))
		return NULL;
	/* The call's own: the first wait releases the GIL, and another
	 * client's call may run meanwhile. */
	buf = PyMem_Malloc(DP_NOTIFY_MSG_MAX);
	if (!buf)
		return PyErr_NoMemory();
	list = PyList_New(0);
	for (; list && got < max; got++) {
		char sender[DP_NOTIFY_SENDER_MAX];
		struct dp_notification n;
		PyObject *t;
		int k;

		if (timeout_ms && !got) {
			PyThreadState *ts = PyEval_SaveThread();

			k = dp_notify_recv(c->c, &n, sender, buf, DP_NOTIFY_MSG_MAX, timeout_ms);
			PyEval_RestoreThread(ts);
		} else {
			k = dp_notify_recv(c->c, &n, sender, buf, DP_NOTIFY_MSG_MAX, 0);
		}
		if (k < 0) {
			Py_DECREF(list);
			PyMem_Free(buf);
			return raise_dp(k);
		}
		if (!k)
			break;
		t = Py_BuildValue("(sy#KKKIIIs)", sender, (const char *)buf, (Py_ssize_t)n.msg_len,
				  (unsigned long long)n.value, (unsigned long long)n.offset,
				  (unsigned long long)n.len, n.flags, n.dropped, n.sender,
				  n.segment);
		if (!t || PyList_Append(list, t)) {
			Py_XDECREF(t);
			Py_DECREF(list);
			PyMem_Free(buf);
			return NULL;
		}
		Py_DECREF(t);
	}
	PyMem_Free(buf);
	return list;
}

/* notify_send(segment, msg): bytes alone to the segment's owner. */
PyObject *client_notify_send(PyObject *self, PyObject *args)
{
	Client *c = (Client *)self;
	PyObject *so;
	Py_buffer msg;
	uint32_t seg;
	int rc;

	if (!PyArg_ParseTuple(args, "Oy*:notify_send", &so, &msg))
		return NULL;
	if (client_check(c) || segment_handle(so, &seg)) {
		PyBuffer_Release(&msg);
		return NULL;
	}
	rc = CONTROL(c, dp_notify_send(c->c, (int)seg, msg.buf, (size_t)msg.len));
	PyBuffer_Release(&msg);
	if (rc < 0)
		return raise_dp(rc);
	Py_RETURN_NONE;
}

PyObject *client_notify_fileno(PyObject *self, PyObject *unused)
{
	Client *c = (Client *)self;
	int fd;

	(void)unused;
	if (client_check(c))
		return NULL;
	fd = dp_notify_fd(c->c);
	if (fd < 0)
		return raise_dp(fd);
	return PyLong_FromLong(fd);
}
