/* SPDX-License-Identifier: MIT */
/*
 * args.c - the extension's conversions of Python arguments: 64- and 32-bit
 * ints checked for range (PyArg's "K" would truncate silently), regions and
 * segments as objects or ids, opcodes, access modes, timeouts.
 */
#include "_dataplane.h"

int get_u64(PyObject *o, uint64_t *out, const char *what)
{
	unsigned long long v;

	if (!PyLong_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s must be an int", what);
		return -1;
	}
	v = PyLong_AsUnsignedLongLong(o);
	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Format(PyExc_OverflowError, "%s must be in 0 .. 2**64-1", what);
		return -1;
	}
	*out = v;
	return 0;
}

/* An O& converter: a non-negative 64-bit int, checked (PyArg's "K" would
 * truncate silently: the 4 GiB bug of a ctypes binding). */
int u64_conv(PyObject *o, void *out)
{
	uint64_t v;

	if (get_u64(o, &v, "offsets and lengths"))
		return 0;
	*(unsigned long long *)out = v;
	return 1;
}

int get_u32(PyObject *o, uint32_t *out, const char *what)
{
	uint64_t v;

	if (get_u64(o, &v, what))
		return -1;
	if (v > UINT32_MAX) {
		PyErr_Format(PyExc_OverflowError, "%s must be in 0 .. 2**32-1", what);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

int client_check(Client *c)
{
	if (!c || !c->c) {
		raise_closed("the client");
		return -1;
	}
	return 0;
}

/* A region: a Region of an open client, or its id as an int. */
int region_id(PyObject *o, uint32_t *out)
{
	if (PyObject_TypeCheck(o, region_type)) {
		Region *r = (Region *)o;

		if (!r->client) {
			raise_closed("the region");
			return -1;
		}
		*out = (uint32_t)r->id;
		return 0;
	}
	return get_u32(o, out, "region");
}

int segment_handle(PyObject *o, uint32_t *out)
{
	if (PyObject_TypeCheck(o, segment_type)) {
		Segment *s = (Segment *)o;

		if (!s->client) {
			raise_closed("the segment");
			return -1;
		}
		*out = (uint32_t)s->handle;
		return 0;
	}
	return get_u32(o, out, "segment");
}

/* An opcode: OP_WRITE / OP_READ / OP_NOP, or "write" / "read" / "nop". */
int get_opcode(PyObject *o, uint8_t *out)
{
	if (PyUnicode_Check(o)) {
		if (!PyUnicode_CompareWithASCIIString(o, "write"))
			*out = DP_OP_WRITE;
		else if (!PyUnicode_CompareWithASCIIString(o, "read"))
			*out = DP_OP_READ;
		else if (!PyUnicode_CompareWithASCIIString(o, "nop"))
			*out = DP_OP_NOP;
		else
			goto bad;
		return 0;
	}
	if (PyLong_Check(o)) {
		long v = PyLong_AsLong(o);

		if (v == DP_OP_WRITE || v == DP_OP_READ || v == DP_OP_NOP) {
			*out = (uint8_t)v;
			return 0;
		}
		PyErr_Clear();
	}
bad:
	PyErr_SetString(PyExc_ValueError, "op must be OP_WRITE, OP_READ, OP_NOP or "
					  "'write', 'read', 'nop'");
	return -1;
}

/* An access mode: ACCESS_* ints or "r", "w", "rw". */
int get_access(PyObject *o, unsigned *out)
{
	if (!o) {
		*out = DP_ACCESS_RW;
		return 0;
	}
	if (PyUnicode_Check(o)) {
		if (!PyUnicode_CompareWithASCIIString(o, "r"))
			*out = DP_ACCESS_READ;
		else if (!PyUnicode_CompareWithASCIIString(o, "w"))
			*out = DP_ACCESS_WRITE;
		else if (!PyUnicode_CompareWithASCIIString(o, "rw"))
			*out = DP_ACCESS_RW;
		else {
			PyErr_SetString(PyExc_ValueError,
					"access must be 'r', 'w', 'rw' or ACCESS_*");
			return -1;
		}
		return 0;
	}
	/* Ints pass through: libclient and the service judge them (EINVAL). */
	return get_u32(o, (uint32_t *)out, "access");
}

int timeout_ms(PyObject *o, int64_t *ms)
{
	double t;

	if (!o || o == Py_None) {
		*ms = -1;
		return 0;
	}
	t = PyFloat_AsDouble(o);
	if (t == -1.0 && PyErr_Occurred())
		return -1;
	if (t < 0) {
		PyErr_SetString(PyExc_ValueError, "timeout must be >= 0 or None");
		return -1;
	}
	*ms = t * 1000.0 > 1e15 ? -1 : (int64_t)(t * 1000.0 + 0.999);
	return 0;
}
