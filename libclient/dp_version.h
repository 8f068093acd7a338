/* SPDX-License-Identifier: MIT */
/*
 * dp_version.h - the one version number of dataplane: what every binary's
 * --version prints ("ring-stat (dataplane) 0.9.0"), and what the shared
 * library's SONAME follows.
 */
#ifndef DP_VERSION_H
#define DP_VERSION_H

#define DP_VERSION_MAJOR 0
#define DP_VERSION_MINOR 9
#define DP_VERSION_PATCH 0
#define DP_VERSION_STRING "0.9.0"

#endif
