package daemon

import (
	"testing"

	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/rules"
)

// TestDefaultsAgree: rules and loader each state the datapath's defaults and
// limits (neither imports the other); the figures in docs/config.md and
// docs/datapath.md assume they are the same.
func TestDefaultsAgree(t *testing.T) {
	for _, c := range []struct {
		name          string
		rules, loader int64
	}{
		{"max ports", rules.DefaultMaxPorts, loader.DefaultMaxPorts},
		{"largest max ports", rules.MaxMaxPorts, loader.MaxMaxPorts},
		{"SYN table size", rules.DefaultSYNTableSize, loader.DefaultSYNTableSize},
		{"max prefixes", rules.DefaultMaxPrefixes, loader.DefaultMaxPrefixes},
		{"stale after", int64(rules.DefaultStaleAfter), int64(loader.DefaultStaleAfter)},
	} {
		if c.rules != c.loader {
			t.Errorf("%s: rules says %d, loader %d", c.name, c.rules, c.loader)
		}
	}
}
