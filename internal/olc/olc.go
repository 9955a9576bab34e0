// Package olc is olcd's vocabulary: the plain types every other package
// speaks — the modes and actions of the datapath, the protected port
// (Proto, PortKey, Class), the canonical signals with their units, and the
// Snapshot the sampler hands the controller — and the datapath's default
// sizes. It imports only the standard library and builds on any OS; the
// edges convert at the border (the loader to bpf2go's C types, rules from
// YAML, the daemon to the status document's strings).
//
// Every enumerated type has String, MarshalText and UnmarshalText; text is
// strict both ways: an unknown name (or value) is an error naming it and
// the accepted ones.
package olc

import (
	"fmt"
	"strings"
)

// parseName returns the index of s in names, or an error naming s and the
// accepted names ("unknown mode \"on\": want off, observe or enforce").
func parseName(kind, s string, names []string) (int, error) {
	for i, n := range names {
		if s == n {
			return i, nil
		}
	}
	return 0, fmt.Errorf("unknown %s %q: want %s", kind, s, orList(names))
}

// orList joins names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// invalid is MarshalText's error for a value outside its type's range.
func invalid(kind string, v any) error {
	return fmt.Errorf("invalid %s %v", kind, v)
}
