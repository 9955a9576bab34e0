/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/* BPF is a 64-bit target: see types.h for why this shim exists. */
#ifndef OLCD_ASM_BITSPERLONG_H
#define OLCD_ASM_BITSPERLONG_H
#define __BITS_PER_LONG 64
#include <asm-generic/bitsperlong.h>
#endif
