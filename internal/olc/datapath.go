package olc

import "time"

// The datapath's default sizes and limits, declared once: rules takes them
// as the config's defaults and bounds, the loader as its Config's.
const (
	// DefaultMaxPorts is the default number of ports with a policy
	// (datapath.max_ports): one stats slot each.
	DefaultMaxPorts = 1024
	// MaxMaxPorts is the largest datapath.max_ports: the datapath's
	// policy indices are 16 bits, 0 is "no policy" and one slot counts
	// the ports without one (65534).
	MaxMaxPorts = 65534
	// DefaultSYNTableSize is the default number of dropped SYNs remembered
	// to recognise their retransmits (datapath.syn_table_size).
	DefaultSYNTableSize = 65536
	// DefaultMaxPrefixes is the default number of exception source
	// prefixes per address family (datapath.max_prefixes).
	DefaultMaxPrefixes = 1024
	// DefaultStaleAfter is how old the heartbeat may get before the
	// datapath fails open (heartbeat.stale_after).
	DefaultStaleAfter = 5 * time.Second
	// DefaultResponsePorts is how many protected ports are timed at most
	// (datapath.response_ports): each has a per-CPU histogram of 1.5 KB,
	// 48 KiB per port at 32 CPUs.
	DefaultResponsePorts = 32
	// DefaultFlowTableSize is the default number of flows the response
	// timer tracks at once (datapath.flow_table_size).
	DefaultFlowTableSize = 16384
	// DefaultRejectRate is how many shed SYNs per second one CPU answers
	// with a RST|ACK under the reject action (action.reject_rate): it
	// answers a 3x overload of tens of thousands of new connections per
	// second on a few CPUs, while a spoofed SYN flood can make olcd send no
	// more than that per CPU towards its claimed sources (each reply
	// smaller than the SYN).
	DefaultRejectRate = 20000
	// MaxRejectRate bounds action.reject_rate and action.reject_burst
	// (replies per second and CPU).
	MaxRejectRate = 10_000_000
)
