/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Byte order follows the BPF target (bpfel or bpfeb), not the build host: the
 * host's <asm/byteorder.h> would give the big-endian object little-endian
 * bitfield layouts in struct iphdr and struct ipv6hdr.
 */
#ifndef OLCD_ASM_BYTEORDER_H
#define OLCD_ASM_BYTEORDER_H
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#include <linux/byteorder/little_endian.h>
#elif __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#include <linux/byteorder/big_endian.h>
#else
#error "unknown byte order"
#endif
#endif
