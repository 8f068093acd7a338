/* SPDX-License-Identifier: MIT */
/*
 * service.c - dataplaned's entry point: start-up in order (flags, faults,
 * signals, the fleet key, the peer RPC port, stats, engines, pollers), the
 * control thread's loop on the main thread, then shutdown in reverse.
 * docs/architecture.md, "Layout".
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>

#include "auth.h"
#include "dp_internal.h"
#include "engine.h"
#include "fault.h"
#include "options.h"
#include "rpc.h"
#include "stats.h"

int main(int argc, char **argv)
{
	sigset_t sigs;
	char err[512];
	int rc, rpc_fd;

	options_parse(argc, argv);
	fault_init();
	/* SIGTERM/SIGINT reach the control thread through a signalfd; every
	 * other thread inherits the blocked mask. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	control_wake_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (control_wake_efd < 0) {
		log_err("eventfd: %s", strerror(errno));
		return 1;
	}
	rc = auth_init(options_peer_key(), err, sizeof(err));
	if (rc && options_peer_key()[0]) {
		log_err("%s", err);
		return 1;
	}
	if (rc)
		log_warn("%s: no peer is trusted, and no peer trusts this service", err);
	else
		log_info("peer RPC: fleet key %s", auth_path());
	rpc_fd = rpc_listen();
	if (rpc_fd < 0) {
		log_err("peer RPC port %d: %s", cfg.rpc_port, strerror(-rpc_fd));
		return 1;
	}
	/* Every client's SQ gets a light producer where this holds (docs/ring.md),
	 * after a trial barrier: a seccomp filter may allow the query only. */
	cfg.membarrier = !cfg.no_membarrier && dp_ring_asym_available() && !dp_ring_asym_barrier();
	log_info("starting: server %s, %u poller(s), queue depth %u, spin %u us, SQ wake-up %s",
		 cfg.server_name, cfg.pollers, cfg.queue_depth, cfg.spin_us,
		 cfg.membarrier ? "membarrier" : "fences");
	rc = stats_init();
	if (rc) {
		log_err("stats region: %s (or run with --no-stats)", strerror(-rc));
		return 1;
	}
	rc = engines_init();
	if (rc)
		return 1;
	rc = pollers_start();
	if (rc) {
		log_err("cannot start pollers: %s", strerror(-rc));
		return 1;
	}
	rc = control_run(rpc_fd);
	pollers_free();
	engines_fini();
	stats_fini();
	if (rc) {
		log_err("stopped: %s", strerror(-rc));
		return 1;
	}
	log_info("stopped cleanly");
	return 0;
}
