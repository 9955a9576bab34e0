package loader

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/olcd/olcd/internal/fieldcases"
	"github.com/olcd/olcd/internal/olc"
)

// packetCase is one vector of a packets/*.json file (../shared/cases/README.md).
type packetCase struct {
	Name     string `json:"name"`
	FrameHex string `json:"frame_hex"`
	Note     string `json:"note"`
	Expect   struct {
		NewConn bool    `json:"new_conn"`
		Proto   *string `json:"proto"`
		Dport   *uint16 `json:"dport"`
	} `json:"expect"`
	LureDport *uint16 `json:"lure_dport"`

	file  string
	frame []byte
}

// caseFiles lists the packet case files: every packet folder of the field
// cases (the shared ones and each folder of $OLCD_EXTRA_CASES, located by
// internal/fieldcases) and this package's own vectors in testdata/packets.
func caseFiles(t *testing.T) []string {
	t.Helper()
	files, err := fieldcases.PacketFiles()
	if err != nil {
		t.Fatal(err)
	}
	own, _ := filepath.Glob(filepath.Join("testdata", "packets", "*.json"))
	if len(own) == 0 {
		t.Fatal("no packet vectors in testdata/packets")
	}
	return append(files, own...)
}

func loadPacketCases(t *testing.T) []packetCase {
	t.Helper()
	var all []packetCase
	for _, f := range caseFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cs []packetCase
		if err := json.Unmarshal(data, &cs); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for i := range cs {
			c := &cs[i]
			c.file = f
			if c.frame, err = hex.DecodeString(c.FrameHex); err != nil {
				t.Fatalf("%s: case %q: frame_hex: %v", f, c.Name, err)
			}
			if c.Expect.NewConn && (c.Expect.Proto == nil || c.Expect.Dport == nil) {
				t.Fatalf("%s: case %q: new_conn needs proto and dport", f, c.Name)
			}
		}
		all = append(all, cs...)
	}
	return all
}

func (c *packetCase) key(t *testing.T) olc.PortKey {
	t.Helper()
	switch *c.Expect.Proto {
	case "tcp":
		return olc.PortKey{Proto: olc.ProtoTCP, Port: *c.Expect.Dport}
	case "udp":
		return olc.PortKey{Proto: olc.ProtoUDP, Port: *c.Expect.Dport}
	}
	t.Fatalf("%s: case %q: unknown proto %q", c.file, c.Name, *c.Expect.Proto)
	return olc.PortKey{}
}

// ports are the ports the README says to protect: dport and lure_dport,
// for TCP and UDP.
func (c *packetCase) ports() []olc.PortKey {
	var ps []olc.PortKey
	for _, p := range []*uint16{c.Expect.Dport, c.LureDport} {
		if p != nil {
			ps = append(ps, olc.PortKey{Proto: olc.ProtoTCP, Port: *p}, olc.PortKey{Proto: olc.ProtoUDP, Port: *p})
		}
	}
	return ps
}

// TestPacketCases runs every packet vector through both programs, as
// ../shared/cases/README.md specifies: protected in enforce mode at p = 1,
// then with the port exempt, then in observe mode.
func TestPacketCases(t *testing.T) {
	requireRoot(t)
	cases := loadPacketCases(t)
	d := loadTest(t, Config{})
	must(t, d.Heartbeat())

	type scenario struct {
		name   string
		mode   olc.Mode
		exempt bool
	}
	scenarios := []scenario{{"enforce", olc.ModeEnforce, false}, {"exempt", olc.ModeEnforce, true}, {"observe", olc.ModeObserve, false}}

	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s", filepath.Base(c.file), c.Name), func(t *testing.T) {
			var pols []PortPolicy
			for _, k := range c.ports() {
				pols = append(pols, PortPolicy{Key: k, Mode: olc.ModeEnforce, Action: olc.ActionDrop, DropProbability: 1})
			}
			must(t, d.SetPolicies(pols))
			for _, h := range hooks {
				for _, sc := range scenarios {
					t.Run(string(h)+"/"+sc.name, func(t *testing.T) {
						var exempt []olc.PortKey
						if sc.exempt {
							exempt = c.ports()
						}
						must(t, d.SetExceptions(exempt, nil))
						must(t, d.SetMode(sc.mode))
						must(t, d.Heartbeat())

						before := stats(t, d)
						got, _ := run(t, d, h, c.frame)
						after := stats(t, d)

						want := verdictPass
						if c.Expect.NewConn && sc.name == "enforce" {
							want = verdictDrop
						}
						if got != want {
							t.Errorf("verdict %s, want %s (%s)", got, want, c.Note)
						}
						if !c.Expect.NewConn {
							if n := after.totalNew() - before.totalNew(); n != 0 {
								t.Errorf("new-connection counters moved by %d, want 0 (%s)", n, c.Note)
							}
							return
						}
						k := c.key(t)
						delta := after.Ports[k].sub(before.Ports[k])
						wantDelta := Counters{NewConns: 1, Passed: 1}
						switch sc.name {
						case "enforce":
							wantDelta = Counters{NewConns: 1, Dropped: 1}
						case "exempt":
							wantDelta.Exempt = 1
						case "observe":
							wantDelta.WouldDrop = 1
						}
						delta.SYNRetransmits = 0 // the same SYN runs more than once
						if delta != wantDelta {
							t.Errorf("port %s counters moved by %+v, want %+v", k, delta, wantDelta)
						}
						if n := after.totalNew() - before.totalNew(); n != 1 {
							t.Errorf("new-connection counters moved by %d in total, want 1", n)
						}
					})
				}
			}
		})
	}
}
