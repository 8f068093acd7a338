/* SPDX-License-Identifier: MIT */
/*
 * _dataplane.c - the C extension under the `dataplane` Python package: the
 * calls of libclient (dataplane.h) as Client, Queue, Region, Segment and
 * Batch objects. Built against the stable ABI (Py_LIMITED_API 3.11: one
 * build loads on 3.11 and later) and linked with libclient statically, so
 * the module needs nothing else at run time (but the CUDA runtime on a CUDA
 * build).
 *
 * What a ctypes binding gets wrong, and this module guards:
 * dp_prep_write/read are filled here in C; every object checks that it and
 * its client are open before any call (a closed one raises ClosedError, no
 * NULL reaches libclient); offsets and lengths are 64-bit, converted with
 * overflow checks; the memory of a region is handed out through the buffer
 * protocol only, and a region (or its client) with views alive refuses to
 * close (RegionInUseError), so no view can dangle. Calls that may sleep
 * (wait, run, and the control calls) release the GIL; an object in such a
 * call cannot be closed by another thread meanwhile (BusyError).
 *
 * The asyncio support needs the queue's CQ doorbell and the ring's
 * NEED_WAKEUP protocol, which dataplane.h does not expose: this module uses
 * libclient's internal dp__queue_ring()/dp__queue_cq_doorbell()
 * (dp_client_pvt.h), which it can because it links the library statically.
 *
 * One file per object (client.c, queue.c, batch.c, region.c, segment.c;
 * notify.c the client's notification calls; args.c the conversions of
 * arguments), _dataplane.h what they share; this one is the module: its
 * errors, its functions and its initialisation.
 */
#include "_dataplane.h"

static PyObject *errno_map;    /* errno -> class (set by dataplane/__init__.py) */
static PyObject *base_error;   /* DataplaneError */
static PyObject *closed_error; /* ClosedError */
PyObject *in_use_error;	       /* RegionInUseError */
PyObject *busy_error;	       /* BusyError */
PyObject *transfer_error;      /* TransferError */
PyTypeObject *completion_type;
PyTypeObject *client_type, *region_type, *segment_type, *queue_type, *batch_type;

PyObject *error_class(int err)
{
	PyObject *key, *cls = NULL;

	if (errno_map && (key = PyLong_FromLong(err))) {
		cls = PyDict_GetItemWithError(errno_map, key); /* borrowed */
		Py_DECREF(key);
	}
	PyErr_Clear();
	return cls ? cls : base_error ? base_error : PyExc_OSError;
}

/* Raises the error class of @err (< 0) with @text; returns NULL. */
PyObject *raise_text(PyObject *cls, int err, const char *text)
{
	PyObject *exc;

	if (!cls)
		cls = error_class(-err);
	exc = PyObject_CallFunction(cls, "is", -err, text);
	if (exc) {
		PyErr_SetObject(cls, exc);
		Py_DECREF(exc);
	}
	return NULL;
}

/* Raises for the libclient call that just failed with @rc: its errno and
 * dp_last_error()'s text (read at once: it is this thread's). */
PyObject *raise_dp(int rc)
{
	const char *t = dp_last_error();

	return raise_text(NULL, rc, t && *t ? t : dp_strerror(rc));
}

PyObject *raise_closed(const char *what)
{
	char buf[128];

	snprintf(buf, sizeof(buf), "%s is closed", what);
	return raise_text(closed_error, -EBADF, buf);
}

/* __enter__ of every object: the object itself. */
PyObject *enter_self(PyObject *self, PyObject *unused)
{
	(void)unused;
	Py_INCREF(self);
	return self;
}

static PyObject *mod_strerror(PyObject *m, PyObject *arg)
{
	long e = PyLong_AsLong(arg);

	(void)m;
	if (e == -1 && PyErr_Occurred())
		return NULL;
	if (e > 0)
		e = -e;
	return PyUnicode_FromString(dp_strerror((int)e));
}

static PyObject *mod_last_error(PyObject *m, PyObject *unused)
{
	(void)m;
	(void)unused;
	return PyUnicode_FromString(dp_last_error());
}

static PyObject *mod_init_errors(PyObject *m, PyObject *args)
{
	PyObject *map, *base, *closed, *in_use, *busy, *transfer;

	(void)m;
	if (!PyArg_ParseTuple(args, "O!OOOOO", &PyDict_Type, &map, &base, &closed, &in_use, &busy,
			      &transfer))
		return NULL;
	PyObject **slots[] = {&errno_map,    &base_error, &closed_error,
			      &in_use_error, &busy_error, &transfer_error};
	PyObject *vals[] = {map, base, closed, in_use, busy, transfer};

	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		PyObject *old = *slots[i];

		*slots[i] = Py_NewRef(vals[i]);
		Py_XDECREF(old);
	}
	Py_RETURN_NONE;
}

static PyMethodDef mod_methods[] = {
	{"strerror", mod_strerror, METH_O,
	 "strerror($module, err)\n--\n\nlibclient's text for an errno (dp_strerror), either sign."},
	{"last_error", mod_last_error, METH_NOARGS,
	 "last_error($module)\n--\n\nWhat the last failed libclient call of this thread was and "
	 "what "
	 "its errno meant for it (dp_last_error)."},
	{"_init_errors", mod_init_errors, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT,
				    "dataplane._dataplane",
				    "The C extension under the dataplane package (see "
				    "help(dataplane)).",
				    -1,
				    mod_methods,
				    NULL,
				    NULL,
				    NULL,
				    NULL};

static int add_int(PyObject *m, const char *name, long v)
{
	return PyModule_AddIntConstant(m, name, v);
}

PyMODINIT_FUNC PyInit__dataplane(void)
{
	PyObject *m = PyModule_Create(&moddef);

	if (!m)
		return NULL;
	completion_type = PyStructSequence_NewType(&completion_desc);
	client_type = (PyTypeObject *)PyType_FromSpec(&client_spec);
	region_type = (PyTypeObject *)PyType_FromSpec(&region_spec);
	segment_type = (PyTypeObject *)PyType_FromSpec(&segment_spec);
	queue_type = (PyTypeObject *)PyType_FromSpec(&queue_spec);
	batch_type = (PyTypeObject *)PyType_FromSpec(&batch_spec);
	if (!completion_type || !client_type || !region_type || !segment_type || !queue_type ||
	    !batch_type)
		goto err;
	if (PyModule_AddObjectRef(m, "Completion", (PyObject *)completion_type) ||
	    PyModule_AddObjectRef(m, "Client", (PyObject *)client_type) ||
	    PyModule_AddObjectRef(m, "Region", (PyObject *)region_type) ||
	    PyModule_AddObjectRef(m, "Segment", (PyObject *)segment_type) ||
	    PyModule_AddObjectRef(m, "Queue", (PyObject *)queue_type) ||
	    PyModule_AddObjectRef(m, "Batch", (PyObject *)batch_type))
		goto err;
	if (add_int(m, "OP_WRITE", DP_OP_WRITE) || add_int(m, "OP_READ", DP_OP_READ) ||
	    add_int(m, "OP_NOP", DP_OP_NOP) || add_int(m, "ACCESS_READ", DP_ACCESS_READ) ||
	    add_int(m, "ACCESS_WRITE", DP_ACCESS_WRITE) || add_int(m, "ACCESS_RW", DP_ACCESS_RW) ||
	    add_int(m, "F_LOCAL", DP_CQE_F_LOCAL) || add_int(m, "F_FABRIC", DP_CQE_F_FABRIC) ||
	    add_int(m, "F_GPU", DP_CQE_F_GPU) || add_int(m, "F_FILE", DP_CQE_F_FILE) ||
	    add_int(m, "F_SAME_HOST", DP_CQE_F_SAME_HOST) ||
	    add_int(m, "F_GPU_STAGED", DP_CQE_F_GPU_STAGED) ||
	    PyModule_AddStringConstant(m, "VERSION", DP_VERSION_STRING) ||
	    add_int(m, "ABI_VERSION", DP_ABI_VERSION) ||
	    add_int(m, "SEGMENT_NAME_MAX", DP_SEGMENT_NAME_MAX) ||
	    add_int(m, "DESC_SIZE", sizeof(struct dp_desc)) ||
	    add_int(m, "COMPLETION_SIZE", sizeof(struct dp_cqe)))
		goto err;
	return m;
err:
	Py_DECREF(m);
	return NULL;
}
