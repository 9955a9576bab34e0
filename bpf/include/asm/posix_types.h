/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/* See types.h for why this shim exists. */
#ifndef OLCD_ASM_POSIX_TYPES_H
#define OLCD_ASM_POSIX_TYPES_H
#include <asm-generic/posix_types.h>
#endif
