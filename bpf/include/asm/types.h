/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Architecture-neutral stand-in for <asm/types.h>.
 *
 * The UAPI headers reach for <asm/...>, which Debian installs under an
 * architecture triplet directory (/usr/include/x86_64-linux-gnu, ...). The BPF
 * target is neither of those architectures, so these shims point at the
 * asm-generic versions instead: the object is then the same whichever machine
 * compiles it, and no triplet path is needed on the command line.
 */
#ifndef OLCD_ASM_TYPES_H
#define OLCD_ASM_TYPES_H
#include <asm-generic/types.h>
#endif
