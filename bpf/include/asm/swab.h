/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * <linux/swab.h> falls back to portable C (or compiler builtins) when the
 * architecture defines no __arch_swab*: that is what BPF needs.
 */
#ifndef OLCD_ASM_SWAB_H
#define OLCD_ASM_SWAB_H
#endif
