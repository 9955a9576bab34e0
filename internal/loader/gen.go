package loader

// The datapath object is compiled from ../../bpf/olcd.c for both byte orders;
// the *_bpfel.go/.o and *_bpfeb.go/.o it writes are committed so that a plain
// `go build` needs no clang. Regenerate with `make generate`.
//
// -I../../bpf/include supplies architecture-neutral <asm/*.h> shims, so no
// host triplet directory is needed and the output does not depend on the build
// machine. Paths are relative so that no absolute path reaches the object.
// The compiler is the pinned clang-14 (scripts/deps.sh build) unless
// BPF2GO_CC and BPF2GO_STRIP say otherwise, so that a plain `go generate
// ./...` makes the committed bytes ($DOLLAR is go generate's dollar sign).
//go:generate sh -c "BPF2GO_CC=$DOLLAR{BPF2GO_CC:-clang-14} BPF2GO_STRIP=$DOLLAR{BPF2GO_STRIP:-llvm-strip-14} exec go tool bpf2go -tags linux -cflags '-O2 -g -Wall -Werror -mcpu=v3' -type olcd_mode -type olcd_action -type olcd_class -type olcd_proto -type olcd_dscp -type olcd_selection -type olcd_policy_flag -type olcd_geometry -type olcd_policy -type olcd_counters -type olcd_syn_table -type olcd_syn_set -type olcd_lpm4_key -type olcd_lpm6_key -type olcd_reject_bucket -type olcd_resp_geometry -type olcd_resp_hist -type olcd_flow_counters -type olcd_flow_set -type olcd_cap_flag -type olcd_fair_geometry -type olcd_fair_slot -type olcd_cap -type olcd_ceiling -type olcd_cap_key -type olcd_fair_line olcd ../../bpf/olcd.c -- -I../../bpf/include"
