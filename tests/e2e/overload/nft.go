package overload

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"strings"
)

// errNoCounters is returned when the table's counters are missing.
var errNoCounters = errors.New("nft counters not found")

// nftLimit is the static variant: an nftables table that drops the work
// port's SYNs above a fixed rate, with counters of the SYNs seen and dropped.
type nftLimit struct {
	table string
}

// addStaticLimit installs `limit rate over <rps>/second` on new connections
// (SYN without ACK) to WorkPort, in the input hook of the host namespace,
// dropping what is over the rate or, with reject, answering it with a TCP
// reset. The burst is a tenth of a second's worth, as a static limit is
// usually configured.
func (h *Harness) addStaticLimit(rps float64, reject bool) (*nftLimit, error) {
	verdict := "drop"
	if reject {
		verdict = "reject with tcp reset"
	}
	n := &nftLimit{table: namePrefix + h.id}
	rate := int(math.Round(rps))
	burst := max(5, rate/10)
	rules := fmt.Sprintf(`table inet %[1]s {
	counter seen {}
	counter dropped {}
	chain input {
		type filter hook input priority 0; policy accept;
		tcp dport %[2]d tcp flags & (syn | ack) == syn counter name "seen"
		tcp dport %[2]d tcp flags & (syn | ack) == syn limit rate over %[3]d/second burst %[4]d packets counter name "dropped" %[5]s
	}
}
`, n.table, WorkPort, rate, burst, verdict)
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nft -f: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return n, nil
}

// counters returns the SYNs seen and dropped since the table was added.
func (n *nftLimit) counters() (seen, dropped uint64, err error) {
	out, err := exec.Command("nft", "-j", "list", "counters", "table", "inet", n.table).Output()
	if err != nil {
		return 0, 0, fmt.Errorf("nft list counters: %w", err)
	}
	var doc struct {
		Nftables []struct {
			Counter *struct {
				Name    string `json:"name"`
				Packets uint64 `json:"packets"`
			} `json:"counter"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return 0, 0, fmt.Errorf("parse nft counters: %w", err)
	}
	found := 0
	for _, o := range doc.Nftables {
		if o.Counter == nil {
			continue
		}
		switch o.Counter.Name {
		case "seen":
			seen = o.Counter.Packets
			found++
		case "dropped":
			dropped = o.Counter.Packets
			found++
		}
	}
	if found != 2 {
		return 0, 0, errNoCounters
	}
	return seen, dropped, nil
}

// remove deletes the table.
func (n *nftLimit) remove() { _ = run("nft", "delete", "table", "inet", n.table) }
