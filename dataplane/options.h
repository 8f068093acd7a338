/* SPDX-License-Identifier: MIT */
/* options.h - dataplaned's command line (options.c). */
#ifndef DP_OPTIONS_H
#define DP_OPTIONS_H

/* Fills struct dp_config and every engine's configuration from the flags,
 * then settles what they leave (limits, the pollers' CPUs, the host name).
 * Bad usage prints why and exits 2; --help and --version exit 0. */
void options_parse(int argc, char **argv);

/* The --peer-key path ("" when not given: auth_init's default). */
const char *options_peer_key(void);

#endif /* DP_OPTIONS_H */
