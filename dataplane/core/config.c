/* SPDX-License-Identifier: MIT */
/*
 * config.c - the service's configuration (struct dp_config, dp_internal.h):
 * its defaults, which the command line (options.c) overrides, and the
 * service's name, "host:rpc-port", made in one place once the port is known.
 */
#include <stdio.h>

#include "dp_internal.h"

struct dp_config cfg = {
	.pollers = 1,
	.spin_us = 50,
	.max_clients = 256,
	.max_mapped_per_uid = 16384ull << 30,
	.max_connecting_per_process = 32,
	.hello_timeout_ms = 2000,
	.max_queues = DP_MAX_QUEUES,
	.queue_depth = 256,
	.max_depth = 4096,
	.chunk = 256 * 1024,
	.inline_max = 64 * 1024,
	.stripe_min = 16 * 1024 * 1024,
};

void config_set_rpc_port(int port)
{
	cfg.rpc_port = port;
	snprintf(cfg.server_name, sizeof(cfg.server_name), "%.48s:%d", cfg.server_host, port);
}
