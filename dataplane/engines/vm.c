/* SPDX-License-Identifier: MIT */
/*
 * vm.c - the vm engine: memory a client process already has (malloc'd
 * memory, a numpy array, a torch CPU tensor; dp_register_mem), which the
 * service cannot map. It reads and writes it with process_vm_readv and
 * process_vm_writev: one system call per slice, none in the client.
 *
 * A REGION_VM names a range of the address space of the process that
 * opened the client's connection, held by a pidfd taken at registration
 * (SO_PEERPIDFD; pidfd_open of the SO_PEERCRED pid on kernels before 6.5).
 * process_vm_* take a pid, not a pidfd: before it touches a process the
 * engine asks the pidfd whether its pid is still that process
 * (pidfd_send_signal, signal 0: -ESRCH once it was reaped, after which its
 * pid could be recycled), at most once per process per poller every
 * ALIVE_NS: a pid is reused only after the kernel has handed out every
 * other one (pid_max, 32768 at the least), which takes far longer. A
 * range the process unmapped fails its descriptor with -EFAULT, never a
 * signal here: the kernel's copy reports the fault.
 *
 * What it moves: a VM region on either side and host memory of this
 * service (a host region, or another service's export mapped here) on the
 * other, or a VM region on both (two calls per slice through a bounce
 * buffer of the poller), or GPU memory on the other side (through the
 * poller's pinned buffers: each slice a process_vm_* call and a copy on
 * the GPU engine's staging stream, gpu_stage_copy; DP_CQE_F_GPU). A VM
 * region of another service's client on this host is one too: that
 * service passed the client's pidfd (samehost.c, vm.h), and completions
 * say DP_CQE_F_SAME_HOST. A file with a VM region is -ENOTSUP. Over the
 * fabric a VM region is staged (stage.c, with vm_copy_start): ours
 * through our bounce buffers, an export of ours by its owner's.
 *
 * Every copy but an empty one waits for the loop's progress. Those without
 * GPU memory go from there to the poller's worker thread (struct
 * vm_worker), which makes their calls: the kernel may hold a call on a
 * page the client controls, and then it holds the worker, not the poller.
 * There the small ones (up to --inline-max) queued one behind another
 * between the same two sides go in one call, an iovec each (vm_gather: a
 * batch of KV pages costs a system call per 64 pages, not per page);
 * larger ones go --copy-chunk at a time, round robin, as the host engine's
 * do (host.c); the poller completes what the worker finished. Copies with
 * GPU memory stay on the poller (its staging stream is the poller's).
 * docs/architecture.md, "Memory of a client process".
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "engine.h"
#include "gpu.h"
#include "notif.h"
#include "oplist.h"
#include "vm.h"
#include "xfer_op.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* Linux 6.5; Debian 12's headers predate it */
#endif

/* As host.c: about 1 MiB per poller loop (worker pass) with the default
 * chunk. */
#define STEPS_PER_LOOP 4
/* How long a poller's worker looks for more work before it sleeps. */
#define WORKER_SPIN_NS 50000u
/* How long a stopping poller waits for its worker's calls to return. */
#define WORKER_DRAIN_NS 5000000000ull
/* Processes whose liveness one poller remembers, and for how long. */
#define ALIVE_SLOTS 8
#define ALIVE_NS 100000u
/* A gather: up to VM_GATHER small copies (each <= --inline-max) between the
 * same two sides, one process_vm_* call for all (two through the bounce
 * buffer, whose cfg.chunk bytes bound a process-to-process gather). */
#define VM_GATHER 64
/* Pinned buffers of a poller for GPU slices (cfg.chunk bytes each), one
 * per op at a time: one op's GPU copy runs while another's process_vm_*
 * call does (a single op's slices do not overlap). */
#define VM_PINS 2

/* A REGION_VM's state (reg->eng[ENGINE_vm]). */
struct vm_mem {
	int pidfd;
	pid_t pid;
	uint64_t addr; /* byte 0 of the region, in that process */
};

/* One side of a transfer: client memory (vm set), host memory here, or
 * GPU memory (dev >= 0). */
struct vm_end {
	const struct vm_mem *vm;
	uint64_t addr; /* vm: the address in that process */
	uint8_t *host; /* otherwise: the address here (a device address for GPU memory) */
	int dev;       /* GPU memory: its device; -1 otherwise */
};

/* A copy not finished yet: with GPU memory on the poller's list; else
 * handed to the poller's worker, on its list of small ones (up to
 * --inline-max; vm_gather) or of the others, and back with its status. */
struct vm_op {
	struct op_node node; /* first: the list it is on */
	struct xfer_op o;    /* the descriptor, its references (o.len: the bytes) */
	struct vm_end src, dst;
	uint64_t done;
	int rc; /* the worker's status for it */
	/* A copy of stage.c's (vm_copy_start), no descriptor: its region
	 * reference, and its ticket (NULL once given up on at shutdown). */
	struct region *reg;
	struct vm_ticket *tk;
	bool dropped;		      /* a descriptor completed at shutdown, its copy out */
	struct vm_op *hnext, **hprev; /* the poller's list of those the worker has */
	/* With GPU memory: the slice in flight, its pinned buffer (-1: none)
	 * and the GPU copy's ticket. */
	uint64_t n;
	int pin;
	struct gpu_ticket t;
};

/* Processes found alive, when (vm_alive). */
struct vm_alive_cache {
	struct {
		const struct vm_mem *vm;
		uint64_t ns;
	} slot[ALIVE_SLOTS];
};

/*
 * The thread that makes a poller's process_vm_* calls for copies without
 * GPU memory. The kernel may wait inside such a call on something the
 * client controls: a page of a userfaultfd range it does not answer, of a
 * FUSE file whose server does not. Then this thread waits, and with it
 * that poller's copies of registered memory, never the poller: its other
 * engines' transfers go on, for every client. It runs on the poller's CPU
 * (made by the poller, it inherits the pinning); the two share it with
 * sched_yield (vm_progress, worker_take).
 */
struct vm_worker {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* Under mu: handed over by the poller, finished (rc set). */
	struct op_fifo in, out;
	bool stop, sleeping;
	atomic_uint handed;   /* bumped with each hand-over: the spin looks here */
	atomic_bool stopping; /* the poller gave up waiting: what is queued fails */
	/* The thread's own: small copies, the others (round robin), those
	 * finished this pass, the bounce buffer of VM <-> VM copies
	 * (cfg.chunk bytes, made at the first). */
	struct op_fifo small, done;
	struct op_list big;
	uint8_t *bounce;
	struct vm_alive_cache alive;
};

/* A poller's pending copies (p->eng[ENGINE_vm]): those with GPU memory on
 * ops (spare entries for all), those for its worker, how many the worker
 * has, its pinned buffers, and the processes it found alive. */
struct vm_poller {
	struct op_list ops;    /* first: oplist.h's op_engine_* calls */
	struct op_fifo hand;   /* for the worker, at the end of this pass */
	unsigned out;	       /* copies the worker has */
	struct vm_op *handed;  /* those, through hnext (vm_cancel_all) */
	struct vm_worker *w;   /* started at the first copy for it */
	uint8_t *pin[VM_PINS]; /* made at the first GPU slice */
	bool pin_busy[VM_PINS];
	struct vm_alive_cache alive;
};

static struct vm_poller *vm_poller(struct poller *p)
{
	if (!p->eng[ENGINE_vm])
		p->eng[ENGINE_vm] = calloc(1, sizeof(struct vm_poller));
	return p->eng[ENGINE_vm];
}

/* The errno a descriptor completes with for a failed process_vm_* call. */
static int vm_errno(int e)
{
	switch (e) {
	case EFAULT:
	case ESRCH:
	case ENOMEM:
		return -e;
	case EPERM:
	case EACCES:
		return -EPERM;
	default:
		return -EIO;
	}
}

/*
 * Whether m's pid is still the process it was registered by: 0, or -ESRCH
 * once that process was reaped (its pid may belong to another by now).
 * Asked at most every ALIVE_NS per process per poller; a zombie still holds
 * its pid, and process_vm_* then fail with ESRCH themselves. A slot that
 * names a freed vm_mem whose address came back names one registered (and
 * found alive) since the slot was filled, less than ALIVE_NS ago.
 */
static int vm_alive(struct vm_alive_cache *c, const struct vm_mem *m)
{
	unsigned i = (unsigned)(((uintptr_t)m >> 6) % ALIVE_SLOTS);
	uint64_t now = dp_now_ns();

	if (c->slot[i].vm == m && now - c->slot[i].ns < ALIVE_NS)
		return 0;
	/* EPERM would still mean it exists; the service runs as its uid or
	 * as root, so it does not come. */
	if (syscall(SYS_pidfd_send_signal, m->pidfd, 0, NULL, 0) < 0 && errno != EPERM)
		return errno == ESRCH ? -ESRCH : -EIO;
	c->slot[i].vm = m;
	c->slot[i].ns = now;
	return 0;
}

/* One call: n bytes between a process and host memory. */
static int vm_call(const struct vm_mem *m, uint64_t addr, uint8_t *host, uint64_t n, bool to_proc)
{
	struct iovec l = {.iov_base = host, .iov_len = n};
	struct iovec r = {.iov_base = (void *)(uintptr_t)addr, .iov_len = n};
	ssize_t got = to_proc ? process_vm_writev(m->pid, &l, 1, &r, 1, 0)
			      : process_vm_readv(m->pid, &l, 1, &r, 1, 0);

	if (got < 0)
		return vm_errno(errno);
	/* Short: a page of the range is not mapped (any more). */
	return (uint64_t)got == n ? 0 : -EFAULT;
}

/* Worker: bytes [off, off + n) of a transfer from src to dst, 0 < n <=
 * cfg.chunk. */
static int vm_move(struct vm_worker *w, const struct vm_end *src, const struct vm_end *dst,
		   uint64_t off, uint64_t n)
{
	int rc;

	if ((src->vm && (rc = vm_alive(&w->alive, src->vm))) ||
	    (dst->vm && (rc = vm_alive(&w->alive, dst->vm))))
		return rc;
	if (!src->vm)
		return vm_call(dst->vm, dst->addr + off, src->host + off, n, true);
	if (!dst->vm)
		return vm_call(src->vm, src->addr + off, dst->host + off, n, false);
	/* Process to process: through the worker's bounce buffer. */
	if (!w->bounce && !(w->bounce = malloc(cfg.chunk)))
		return -ENOMEM;
	rc = vm_call(src->vm, src->addr + off, w->bounce, n, false);
	return rc ? rc : vm_call(dst->vm, dst->addr + off, w->bounce, n, true);
}

/* Byte `off` of region r as one side of a transfer: 0, or -ENOTSUP for
 * memory this engine does not reach (a file). */
static int vm_end_of(const struct region *r, uint64_t off, struct vm_end *e)
{
	*e = (struct vm_end){.dev = -1};
	if (r->kind == REGION_VM) {
		e->vm = r->eng[ENGINE_vm];
		e->addr = e->vm->addr + off;
		return 0;
	}
	if (r->kind == REGION_CUDA)
		e->dev = r->device;
	else if (r->kind != REGION_HOST)
		return -ENOTSUP;
	e->host = r->base + off;
	return 0;
}

/* A free pinned buffer of the poller (made at first use), or -1: none
 * free now; -ENOMEM: none can be made (no host memory could be pinned). */
static int pin_get(struct vm_poller *v)
{
	for (int i = 0; i < VM_PINS; i++) {
		if (v->pin_busy[i])
			continue;
		if (!v->pin[i] && !(v->pin[i] = gpu_pinned_alloc(cfg.chunk)))
			return i ? -1 : -ENOMEM;
		v->pin_busy[i] = true;
		return i;
	}
	return -1;
}

/* Starts op's next slice: GPU -> process, the GPU copy into a pinned
 * buffer; process -> GPU, the process's bytes into it, then its copy to
 * the GPU. 0 started (or no buffer free yet), or the errno it failed with. */
static int vm_gpu_start(struct poller *p, struct vm_poller *v, struct vm_op *op)
{
	uint64_t n = op->o.len - op->done;
	uint8_t *buf;
	int rc;

	op->pin = pin_get(v);
	if (op->pin < 0)
		return op->pin == -1 ? 0 : op->pin;
	buf = v->pin[op->pin];
	op->n = n < cfg.chunk ? n : cfg.chunk;
	if (op->src.dev >= 0)
		return gpu_stage_copy(p, op->src.dev, buf, op->src.host + op->done, op->n, &op->t);
	rc = vm_alive(&v->alive, op->src.vm);
	if (!rc)
		rc = vm_call(op->src.vm, op->src.addr + op->done, buf, op->n, false);
	return rc ? rc
		  : gpu_stage_copy(p, op->dst.dev, op->dst.host + op->done, buf, op->n, &op->t);
}

/* One step of a copy with GPU memory: true once it is finished. */
static bool vm_gpu_step(struct poller *p, struct vm_poller *v, struct vm_op *op)
{
	int rc;

	if (op->pin < 0) {
		rc = vm_gpu_start(p, v, op);
		if (!rc)
			return false; /* a slice in flight, or no buffer free yet */
	} else {
		rc = gpu_stage_poll(p, &op->t);
		if (!rc)
			return false;
		rc = rc < 0 ? -EIO : 0;
		/* GPU -> process: the slice is in the pinned buffer now. */
		if (!rc && op->src.dev >= 0 && !(rc = vm_alive(&v->alive, op->dst.vm)))
			rc = vm_call(op->dst.vm, op->dst.addr + op->done, v->pin[op->pin], op->n,
				     true);
		op->done += op->n;
	}
	if (op->pin >= 0)
		v->pin_busy[op->pin] = false;
	op->pin = -1;
	if (!rc && op->done < op->o.len)
		return false;
	xfer_op_finish(p, &op->o, rc);
	op_list_put(&v->ops, &op->node);
	return true;
}

/* A copy with GPU memory, on the poller's round robin. */
static bool vm_gpu_node_step(struct op_node *node, void *arg)
{
	struct poller *p = arg;

	return vm_gpu_step(p, p->eng[ENGINE_vm], (struct vm_op *)node);
}

static void vm_submit(struct poller *p, const struct xfer *x)
{
	const struct dp_desc *d = x->d;
	struct vm_end l, t;
	struct vm_poller *v;
	struct vm_op *op;
	bool gpu;
	int rc;

	/* Another service's segment (no region here) is the stage engine's
	 * (route()); never here. */
	rc = x->rb ? vm_end_of(x->ra, d->local_off, &l) : -ENOTSUP;
	if (!rc)
		rc = vm_end_of(x->rb, d->target_off, &t);
	v = rc ? NULL : vm_poller(p);
	if (rc || !v) {
		queue_complete_ns(x->q, x->user_data, x->submit_ns, rc ? rc : -ENOMEM, 0, 0);
		return;
	}
	x->q->ctr.local_copies++;
	gpu = l.dev >= 0 || t.dev >= 0;
	/* Zero bytes complete at once. Every other copy waits for the
	 * loop's progress, later in the same pass: those for the worker go
	 * to it together there, and the small ones of a batch go in one call
	 * (vm_gather). */
	if (!x->len) {
		if (x->notify)
			notif_deliver(p, x->seg, x->notify);
		queue_complete_ns(x->q, x->user_data, x->submit_ns, 0, 0,
				  x->path | (gpu ? DP_CQE_F_GPU : 0));
		return;
	}
	op = op_list_get(&v->ops, sizeof(*op));
	if (!op) {
		queue_complete_ns(x->q, x->user_data, x->submit_ns, -ENOMEM, 0, 0);
		return;
	}
	*op = (struct vm_op){.src = d->opcode == DP_OP_WRITE ? l : t,
			     .dst = d->opcode == DP_OP_WRITE ? t : l,
			     .pin = -1};
	/* The references keep the regions (and a VM region's pidfd) until
	 * the last slice. */
	xfer_op_keep(&op->o, x, x->path | (gpu ? DP_CQE_F_GPU : 0));
	if (gpu)
		op_list_push(&v->ops, &op->node);
	else
		op_fifo_push(&v->hand, &op->node);
	engine_kick(p, ENGINE_vm);
}

/* Whether two ends are the same process (any of its registrations), or
 * both host memory here. */
static bool vm_same_proc(const struct vm_end *a, const struct vm_end *b)
{
	return a->vm == b->vm || (a->vm && b->vm && a->vm->pid == b->vm->pid);
}

/* Worker: op is over, with status rc (the poller finishes it). */
static void vm_op_done(struct vm_worker *w, struct vm_op *op, int rc)
{
	op->rc = rc;
	op_fifo_push(&w->done, &op->node);
}

/*
 * One call for n process <-> host pieces (iovec arrays): the bytes it
 * moved, or the errno it failed with (negative).
 */
static ssize_t vm_callv(const struct vm_mem *m, const struct iovec *host, const struct iovec *proc,
			unsigned n, bool to_proc)
{
	ssize_t got = to_proc ? process_vm_writev(m->pid, host, n, proc, n, 0)
			      : process_vm_readv(m->pid, host, n, proc, n, 0);

	return got < 0 ? vm_errno(errno) : got;
}

/* How many of g[0..n) the bytes `got` of one call moved whole. */
static unsigned vm_whole(struct vm_op *const *g, unsigned n, ssize_t got)
{
	uint64_t moved = 0;
	unsigned k = 0;

	for (; k < n && got >= 0 && moved + g[k]->o.len <= (uint64_t)got; k++)
		moved += g[k]->o.len;
	return k;
}

/*
 * op (taken off the small list) and the small copies right behind it
 * between the same processes on each side (any of their registrations),
 * up to VM_GATHER (and cfg.chunk bytes from one process to another: the
 * bounce buffer), in one process_vm_* call, or two through the bounce
 * buffer. The copies moved whole are done; the rest run one call each,
 * which gives each its own status (-EFAULT for the one with a hole). Every
 * registration's process is asked whether it is still that process
 * (vm_alive) before the call; any that is not leaves the whole gather to
 * one call each, so that only its own copies fail.
 */
static void vm_gather(struct vm_worker *w, struct vm_op *op)
{
	struct iovec a[VM_GATHER], b[VM_GATHER];
	struct vm_op *g[VM_GATHER];
	bool p2p = op->src.vm && op->dst.vm;
	uint64_t bytes = 0, moved = 0;
	unsigned n = 0, ok = 0, nread;
	ssize_t got = -1;

	if (p2p && !w->bounce && !(w->bounce = malloc(cfg.chunk))) {
		vm_op_done(w, op, -ENOMEM);
		return;
	}
	for (;;) {
		struct vm_op *next;

		g[n++] = op;
		bytes += op->o.len;
		next = (struct vm_op *)w->small.head;
		if (n == VM_GATHER || !next || !vm_same_proc(&g[0]->src, &next->src) ||
		    !vm_same_proc(&g[0]->dst, &next->dst) ||
		    (p2p && bytes + next->o.len > cfg.chunk))
			break;
		op = (struct vm_op *)op_fifo_pop(&w->small);
	}
	op = g[0];
	for (unsigned i = 0; i < n; i++)
		if ((g[i]->src.vm && (i == 0 || g[i]->src.vm != g[i - 1]->src.vm) &&
		     vm_alive(&w->alive, g[i]->src.vm)) ||
		    (g[i]->dst.vm && (i == 0 || g[i]->dst.vm != g[i - 1]->dst.vm) &&
		     vm_alive(&w->alive, g[i]->dst.vm)))
			goto one_by_one;
	/* a: this side's pieces (host memory, or the bounce buffer); b: the
	 * process's, the source's first from one process to another. */
	for (unsigned i = 0; i < n; i++) {
		struct vm_op *o = g[i];
		uint64_t len = o->o.len;

		if (p2p) {
			a[i] = (struct iovec){w->bounce + moved, len};
			b[i] = (struct iovec){(void *)(uintptr_t)o->src.addr, len};
		} else if (o->src.vm) {
			a[i] = (struct iovec){o->dst.host, len};
			b[i] = (struct iovec){(void *)(uintptr_t)o->src.addr, len};
		} else {
			a[i] = (struct iovec){o->src.host, len};
			b[i] = (struct iovec){(void *)(uintptr_t)o->dst.addr, len};
		}
		moved += len;
	}
	got = vm_callv(op->src.vm ? op->src.vm : op->dst.vm, a, b, n, !op->src.vm);
	/* From one process to another, the copies the source's call read
	 * whole into the bounce buffer go on to the target in a second. */
	if (p2p && (nread = vm_whole(g, n, got))) {
		for (unsigned i = 0; i < nread; i++)
			b[i].iov_base = (void *)(uintptr_t)g[i]->dst.addr;
		got = vm_callv(op->dst.vm, a, b, nread, true);
	} else if (p2p) {
		got = -1;
	}
	ok = vm_whole(g, n, got);
	for (unsigned i = 0; i < ok; i++)
		vm_op_done(w, g[i], 0);
one_by_one:
	for (unsigned i = ok; i < n; i++)
		vm_op_done(w, g[i], vm_move(w, &g[i]->src, &g[i]->dst, 0, g[i]->o.len));
}

/* Worker: one slice of a larger copy (round robin over them); true once
 * it is over. */
static bool vm_step(struct op_node *node, void *arg)
{
	struct vm_worker *w = arg;
	struct vm_op *op = (struct vm_op *)node;
	uint64_t n = op->o.len - op->done;
	int rc;

	if (n > cfg.chunk)
		n = cfg.chunk;
	rc = vm_move(w, &op->src, &op->dst, op->done, n);
	op->done += n;
	if (!rc && op->done < op->o.len)
		return false;
	vm_op_done(w, op, rc);
	return true;
}

/*
 * Worker: takes what the poller handed over. With @wait (nothing else to
 * do) it looks for a hand-over for WORKER_SPIN_NS, then sleeps until one
 * comes or the poller stops it; false: stopped, and nothing came.
 */
static bool worker_take(struct vm_worker *w, bool wait, unsigned *seen)
{
	uint64_t t0 = dp_now_ns();
	struct op_node *n;
	bool stop;

	while (wait && atomic_load_explicit(&w->handed, memory_order_acquire) == *seen &&
	       dp_now_ns() - t0 < WORKER_SPIN_NS)
		sched_yield(); /* the poller's CPU: let it run */
	if (!wait && atomic_load_explicit(&w->handed, memory_order_acquire) == *seen)
		return true;
	pthread_mutex_lock(&w->mu);
	while (wait && op_fifo_empty(&w->in) && !w->stop) {
		w->sleeping = true;
		pthread_cond_wait(&w->cv, &w->mu);
		w->sleeping = false;
	}
	*seen = atomic_load_explicit(&w->handed, memory_order_relaxed);
	stop = w->stop && op_fifo_empty(&w->in);
	while ((n = op_fifo_pop(&w->in))) {
		if (((struct vm_op *)n)->o.len <= cfg.inline_max)
			op_fifo_push(&w->small, n);
		else
			op_list_push(&w->big, n);
	}
	pthread_mutex_unlock(&w->mu);
	return !(wait && stop);
}

/* Worker: the small copies that came, in gathers, then STEPS_PER_LOOP
 * slices of the others; what finished goes back to the poller after each
 * pass. Ends when the poller stops it and nothing is left. */
static void *worker_main(void *arg)
{
	struct vm_worker *w = arg;
	unsigned seen = 0;
	struct op_node *n;

	pthread_setname_np(pthread_self(), "dp-vm-worker"); /* not a poller: bench-report.c */
	while (worker_take(w, !op_list_busy(&w->big), &seen)) {
		if (atomic_load_explicit(&w->stopping, memory_order_acquire)) {
			/* The service is past its drain: no more calls. */
			while ((n = op_fifo_pop(&w->small)) || (n = op_list_pop(&w->big)))
				vm_op_done(w, (struct vm_op *)n, -ECANCELED);
		}
		while ((n = op_fifo_pop(&w->small)))
			vm_gather(w, (struct vm_op *)n);
		op_list_round(&w->big, STEPS_PER_LOOP, vm_step, w);
		if (!op_fifo_empty(&w->done)) {
			pthread_mutex_lock(&w->mu);
			op_fifo_append(&w->out, &w->done);
			pthread_mutex_unlock(&w->mu);
		}
	}
	return NULL;
}

static struct vm_worker *worker_start(void)
{
	struct vm_worker *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	if (pthread_create(&w->thread, NULL, worker_main, w)) {
		pthread_cond_destroy(&w->cv);
		pthread_mutex_destroy(&w->mu);
		free(w);
		return NULL;
	}
	return w;
}

/* Poller: op is over with status rc: its descriptor completes, or its
 * ticket is told. */
static void vm_op_return(struct poller *p, struct vm_poller *v, struct vm_op *op, int rc)
{
	if (op->reg) {
		if (op->tk) {
			op->tk->rc = rc;
			op->tk->pending = false;
			op->tk->op = NULL;
		}
		region_put(op->reg);
	} else if (op->dropped) {
		xfer_op_release(&op->o); /* completed -ECANCELED at shutdown */
	} else {
		xfer_op_finish(p, &op->o, rc);
	}
	op_list_put(&v->ops, &op->node);
}

/* Takes @op off the poller's list of those the worker has. */
static void vm_unhand(struct vm_op *op)
{
	*op->hprev = op->hnext;
	if (op->hnext)
		op->hnext->hprev = op->hprev;
}

/* Poller: what this pass queued goes to the worker (started at the
 * first), and what it finished is completed here. Returns the copies
 * handed over or completed. */
static int vm_exchange(struct poller *p, struct vm_poller *v)
{
	struct vm_worker *w = v->w;
	struct op_fifo done = {0};
	struct op_node *n;
	int work = 0;

	if (!w && !(w = v->w = worker_start())) {
		static atomic_bool told;

		if (!atomic_exchange(&told, true))
			log_err("vm: cannot start a poller's worker thread: copies of registered "
				"memory fail -ENOMEM");
		while ((n = op_fifo_pop(&v->hand)))
			vm_op_return(p, v, (struct vm_op *)n, -ENOMEM);
		return 1;
	}
	pthread_mutex_lock(&w->mu);
	if (!op_fifo_empty(&v->hand)) {
		for (n = v->hand.head; n; n = n->next) {
			struct vm_op *op = (struct vm_op *)n;

			op->hnext = v->handed;
			op->hprev = &v->handed;
			if (v->handed)
				v->handed->hprev = &op->hnext;
			v->handed = op;
			v->out++;
		}
		op_fifo_append(&w->in, &v->hand);
		atomic_fetch_add_explicit(&w->handed, 1, memory_order_release);
		if (w->sleeping)
			pthread_cond_signal(&w->cv);
		work++;
	}
	op_fifo_append(&done, &w->out);
	pthread_mutex_unlock(&w->mu);
	while ((n = op_fifo_pop(&done))) {
		vm_unhand((struct vm_op *)n);
		vm_op_return(p, v, (struct vm_op *)n, ((struct vm_op *)n)->rc);
		v->out--;
		work++;
	}
	return work;
}

/* Copies for the worker to it, those it finished completed; then
 * STEPS_PER_LOOP slices of those with GPU memory. */
static int vm_progress(struct poller *p)
{
	struct vm_poller *v = p->eng[ENGINE_vm];
	int n = 0;

	if (v && (!op_fifo_empty(&v->hand) || v->out)) {
		n = vm_exchange(p, v);
		/* The worker runs on this CPU (it inherited the pinning): while
		 * it has copies and none came back, it gets the CPU. */
		if (!n && v->out)
			sched_yield();
	}
	return n + op_engine_progress(p, ENGINE_vm, STEPS_PER_LOOP, vm_gpu_node_step);
}

static bool vm_busy(const struct poller *p)
{
	const struct vm_poller *v = p->eng[ENGINE_vm];

	return v && (!op_fifo_empty(&v->hand) || v->out || op_engine_busy(p, ENGINE_vm));
}

/* At shutdown copies are finished (a gone process fails them at once); a
 * worker still in a call after WORKER_DRAIN_NS is left behind. */
static void vm_cancel_all(struct poller *p)
{
	struct vm_poller *v = p->eng[ENGINE_vm];
	uint64_t t0 = dp_now_ns();

	while (v && (!op_fifo_empty(&v->hand) || v->out) && dp_now_ns() - t0 < WORKER_DRAIN_NS)
		if (!vm_exchange(p, v))
			usleep(100);
	if (v && v->out) {
		log_warn("vm: %u copies of registered memory still in the kernel after %llu s "
			 "(a page of a client's that the kernel waits for): completed -ECANCELED, "
			 "left behind",
			 v->out, (unsigned long long)(WORKER_DRAIN_NS / 1000000000ull));
		/* Each descriptor completes once; what it holds stays held
		 * (the worker may still be in its call). */
		for (struct vm_op *op = v->handed; op; op = op->hnext)
			if (!op->reg && !op->dropped) {
				op->dropped = true;
				xfer_op_complete(p, &op->o, -ECANCELED);
			}
	}
	op_engine_finish_all(p, ENGINE_vm, STEPS_PER_LOOP, vm_gpu_node_step);
}

static void vm_poller_free(struct poller *p)
{
	struct vm_poller *v = p->eng[ENGINE_vm];
	struct vm_worker *w = v ? v->w : NULL;

	if (w) {
		if (v->out)
			vm_exchange(p, v);
		atomic_store_explicit(&w->stopping, v->out != 0, memory_order_release);
		pthread_mutex_lock(&w->mu);
		w->stop = true;
		pthread_cond_signal(&w->cv);
		pthread_mutex_unlock(&w->mu);
		if (v->out) {
			/* Still in a call: the thread keeps w and its copies. */
			pthread_detach(w->thread);
		} else {
			pthread_join(w->thread, NULL);
			pthread_cond_destroy(&w->cv);
			pthread_mutex_destroy(&w->mu);
			free(w->bounce);
			free(w);
		}
	}
	v = op_engine_take(p, ENGINE_vm);
	if (v)
		for (int i = 0; i < VM_PINS; i++)
			gpu_pinned_free(v->pin[i]);
	free(v);
}

static void vm_region_close(struct region *r)
{
	struct vm_mem *m = r->eng[ENGINE_vm];

	if (r->kind != REGION_VM || !m)
		return;
	close(m->pidfd);
	free(m);
	r->eng[ENGINE_vm] = NULL;
}

/* A pidfd of the process that opened c's connection. */
static int vm_pidfd(const struct client *c)
{
	socklen_t len = sizeof(int);
	int fd = -1;

	/* Exact: the connecting process itself, whatever became of its pid. */
	if (getsockopt(c->fd, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) == 0 && fd >= 0)
		return fd;
	if (errno != ENOPROTOOPT && errno != EINVAL)
		return errno == ESRCH ? -ESRCH : -errno;
	/* Before Linux 6.5: its pid from SO_PEERCRED. Only a process that
	 * exited, was reaped and had its pid reused between its connect and
	 * this call would be mistaken for it (docs/architecture.md). */
	if (c->pid <= 0)
		return -EPERM; /* in a pid namespace we cannot see */
	fd = (int)syscall(SYS_pidfd_open, c->pid, 0);
	if (fd < 0)
		return errno == EMFILE || errno == ENFILE || errno == ENOMEM ? -errno : -ESRCH;
	return fd;
}

/*
 * dp_register_mem's probe of the first and last byte (and a same-host
 * import's) is a process_vm_readv the kernel may hold on a page the client
 * controls (a userfaultfd range nobody answers, a FUSE file whose server
 * does not). The control thread must not wait on it: the call runs on a
 * thread of its own, the control thread waits PROBE_MS for it and
 * otherwise answers -EAGAIN. While such a probe is held, the same process
 * gets -EAGAIN at once (PROBE_HELD slots: a held probe's pid); the thread
 * clears its slot when the kernel lets it go.
 */
#define PROBE_MS 200
#define PROBE_HELD 64

struct probe_job {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pid_t pid;
	uint64_t addr, len;
	int rc, refs; /* refs: the thread's and the waiter's, under mu */
	int slot;     /* held: its slot in probe_held (-1: none) */
	bool done;
};

static _Atomic pid_t probe_held[PROBE_HELD];

static void probe_put(struct probe_job *j)
{
	int refs;

	pthread_mutex_lock(&j->mu);
	refs = --j->refs;
	pthread_mutex_unlock(&j->mu);
	if (refs)
		return;
	pthread_cond_destroy(&j->cv);
	pthread_mutex_destroy(&j->mu);
	free(j);
}

static void *probe_main(void *arg)
{
	struct probe_job *j = arg;
	uint8_t probe[2];
	struct iovec l = {.iov_base = probe, .iov_len = 2};
	struct iovec r[2] = {{.iov_base = (void *)(uintptr_t)j->addr, .iov_len = 1},
			     {.iov_base = (void *)(uintptr_t)(j->addr + j->len - 1), .iov_len = 1}};
	ssize_t got = process_vm_readv(j->pid, &l, 1, r, 2, 0);
	int rc = got < 0 ? vm_errno(errno) : got == 2 ? 0 : -EFAULT;

	pthread_mutex_lock(&j->mu);
	j->rc = rc;
	j->done = true;
	if (j->slot >= 0)
		atomic_store(&probe_held[j->slot], 0);
	pthread_cond_signal(&j->cv);
	pthread_mutex_unlock(&j->mu);
	probe_put(j);
	return NULL;
}

/* Control thread: the probe's result within PROBE_MS, else -EAGAIN (its
 * process noted as held). */
static int vm_probe_call(pid_t pid, uint64_t addr, uint64_t len)
{
	struct probe_job *j;
	struct timespec until;
	pthread_condattr_t ca;
	pthread_attr_t ta;
	pthread_t t;
	int rc, free_slot = -1;

	if (pid <= 0)
		return -ESRCH;
	for (int i = 0; i < PROBE_HELD; i++) {
		pid_t h = atomic_load(&probe_held[i]);

		if (h == pid)
			return -EAGAIN;
		if (!h && free_slot < 0)
			free_slot = i;
	}
	/* Every slot held: no more threads the kernel may keep. */
	if (free_slot < 0)
		return -EAGAIN;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->pid = pid;
	j->addr = addr;
	j->len = len;
	j->refs = 2;
	j->slot = -1;
	pthread_mutex_init(&j->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&j->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_attr_init(&ta);
	pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &ta, probe_main, j);
	pthread_attr_destroy(&ta);
	if (rc) {
		j->refs = 1;
		probe_put(j);
		return -ENOMEM;
	}
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_nsec += (PROBE_MS % 1000) * 1000000L;
	until.tv_sec += PROBE_MS / 1000 + until.tv_nsec / 1000000000L;
	until.tv_nsec %= 1000000000L;
	pthread_mutex_lock(&j->mu);
	while (!j->done && pthread_cond_timedwait(&j->cv, &j->mu, &until) != ETIMEDOUT)
		;
	if (j->done) {
		rc = j->rc;
	} else {
		rc = -EAGAIN;
		j->slot = free_slot;
		atomic_store(&probe_held[free_slot], pid);
	}
	pthread_mutex_unlock(&j->mu);
	probe_put(j);
	return rc;
}

/*
 * Whether process @pid, held by @pidfd, lets this service read bytes @addr
 * and @addr + @len - 1 (the first and the last of a region): 0, -EFAULT a
 * byte is not mapped, -ESRCH the process is gone, -EPERM not allowed,
 * -EAGAIN the kernel held the probe (vm_probe_call).
 */
static int vm_probe(int pidfd, pid_t pid, uint64_t addr, uint64_t len)
{
	int rc = vm_probe_call(pid, addr, len);

	/* Asked after the probe: if the process still holds its pid now,
	 * the probe read that process. */
	if (!rc && syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) < 0 && errno == ESRCH)
		rc = -ESRCH;
	return rc;
}

/* @reg as a REGION_VM of (@fd, @pid) at @addr; takes @fd. */
static int vm_region_set(struct region *reg, int fd, pid_t pid, uint64_t addr, uint64_t len)
{
	struct vm_mem *m = malloc(sizeof(*m));

	if (!m) {
		close(fd);
		return -ENOMEM;
	}
	*m = (struct vm_mem){.pidfd = fd, .pid = pid, .addr = addr};
	reg->kind = REGION_VM;
	reg->fd = -1;
	reg->len = len;
	reg->eng[ENGINE_vm] = m;
	return 0;
}

/*
 * A REGION_VM over bytes [addr, addr + len) of the process that opened @c's
 * connection: a pidfd of it (SO_PEERPIDFD, else pidfd_open of its
 * SO_PEERCRED pid) and a probe of the first and last byte. -EFAULT a byte
 * of the range is not mapped in that process, -ESRCH the process is gone,
 * -EPERM the service may not access its memory (another uid while the
 * service is not root, a non-dumpable process, Yama ptrace_scope), -EMFILE
 * / -ENOMEM. Its own, since the process is the one that connected, never
 * one a message names. Not mapped here, so not charged.
 */
static int vm_region_open(struct region *reg, struct client *c, const void *payload, int *no_fds,
			  unsigned nfds)
{
	const struct dp_msg_region_register_mem *req = payload;
	uint64_t addr = req->addr, len = req->len;
	pid_t pid;
	int fd, rc;

	(void)no_fds;
	(void)nfds;
	fd = vm_pidfd(c);
	if (fd < 0)
		return fd;
	(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
	/* The pid the pidfd holds (SO_PEERPIDFD's equals SO_PEERCRED's in
	 * our namespace). */
	pid = c->pid;
	rc = vm_probe(fd, pid, addr, len);
	if (rc) {
		log_debug("client %u (pid %d '%s'): memory at %#llx + %llu refused: %s", c->id,
			  (int)pid, c->name, (unsigned long long)addr, (unsigned long long)len,
			  strerror(-rc));
		close(fd);
		return rc;
	}
	rc = vm_region_set(reg, fd, pid, addr, len);
	return rc ? rc : (int)DP_ACCESS_RW;
}

int vm_region_import(struct region *reg, int pidfd, long pid, uint64_t addr, uint64_t len)
{
	int fd, rc;

	if (pid <= 0)
		return -ESRCH;
	if (!len || addr + len < addr)
		return -EBADMSG;
	fd = fcntl(pidfd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return -EMFILE;
	rc = vm_probe(fd, (pid_t)pid, addr, len);
	if (rc) {
		close(fd);
		return rc;
	}
	return vm_region_set(reg, fd, (pid_t)pid, addr, len);
}

int vm_region_pidfd(const struct region *r, uint64_t *addr)
{
	const struct vm_mem *m = r->eng[ENGINE_vm];

	if (r->kind != REGION_VM || !m)
		return -EINVAL;
	*addr = m->addr;
	return m->pidfd;
}

int vm_copy_start(struct poller *p, const struct region *r, uint64_t off, void *host, uint64_t n,
		  bool to_region, struct vm_ticket *t)
{
	const struct vm_mem *m = r->eng[ENGINE_vm];
	struct vm_end proc = {.vm = m, .dev = -1}, here = {.host = host, .dev = -1};
	struct vm_poller *v;
	struct vm_op *op;

	if (r->kind != REGION_VM || !m)
		return -EINVAL;
	*t = (struct vm_ticket){.since = dp_now_ns(), .pending = true};
	if (!n) {
		t->pending = false;
		return 0;
	}
	v = vm_poller(p);
	op = v ? op_list_get(&v->ops, sizeof(*op)) : NULL;
	if (!op)
		return -ENOMEM;
	proc.addr = m->addr + off;
	*op = (struct vm_op){.src = to_region ? here : proc,
			     .dst = to_region ? proc : here,
			     .pin = -1,
			     .tk = t,
			     .reg = (struct region *)r};
	atomic_fetch_add(&op->reg->refs, 1);
	op->o.len = n;
	t->op = op;
	op_fifo_push(&v->hand, &op->node);
	engine_kick(p, ENGINE_vm);
	return 0;
}

bool vm_copy_poll(struct poller *p, struct vm_ticket *t)
{
	struct vm_poller *v = p->eng[ENGINE_vm];

	if (t->pending && v && (!op_fifo_empty(&v->hand) || v->out))
		vm_exchange(p, v);
	if (t->pending && atomic_load_explicit(&dp_stopping, memory_order_acquire) &&
	    dp_now_ns() - t->since > WORKER_DRAIN_NS) {
		/* The worker keeps it; once back it is only freed. */
		t->op->tk = NULL;
		t->op = NULL;
		t->pending = false;
		t->dropped = true;
		t->rc = -ECANCELED;
	}
	return !t->pending;
}

static const struct engine_region_msg vm_region_msgs[] = {
	{DP_MSG_REGION_REGISTER_MEM, "memory", vm_region_open},
	{0},
};

const struct engine vm_engine = {
	.name = "vm",
	.submit = vm_submit,
	.progress = vm_progress,
	.busy = vm_busy,
	.cancel_all = vm_cancel_all,
	.poller_free = vm_poller_free,
	.region_msgs = vm_region_msgs,
	.region_close = vm_region_close,
};
