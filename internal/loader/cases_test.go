package loader

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

// caseFiles lists the packet case files: packets/*.json of the shared field
// cases ($OLCD_CASES, or ../shared/cases next to the module), of each folder
// of $OLCD_EXTRA_CASES (':'-separated; a folder with the layout of cases/,
// or one holding packet files directly; folders with only other kinds of
// cases are skipped), and of this package's testdata.
func caseFiles(t *testing.T) []string {
	t.Helper()
	shared := os.Getenv("OLCD_CASES")
	if shared == "" {
		shared = filepath.Join(moduleRoot(t), "..", "shared", "cases")
	}
	var files []string
	for _, dir := range []string{filepath.Join(shared, "packets"), filepath.Join("testdata", "packets")} {
		fs, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		if len(fs) == 0 {
			t.Fatalf("no packet cases in %s: set OLCD_CASES to the shared cases folder", dir)
		}
		files = append(files, fs...)
	}
	for _, dir := range strings.Split(os.Getenv("OLCD_EXTRA_CASES"), ":") {
		if dir == "" {
			continue
		}
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("OLCD_EXTRA_CASES: %v", err)
		}
		fs, _ := filepath.Glob(filepath.Join(dir, "packets", "*.json"))
		if len(fs) == 0 {
			fs, _ = filepath.Glob(filepath.Join(dir, "*.json"))
		}
		files = append(files, fs...)
	}
	return files
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
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

func (c *packetCase) key(t *testing.T) PortKey {
	t.Helper()
	switch *c.Expect.Proto {
	case "tcp":
		return PortKey{ProtoTCP, *c.Expect.Dport}
	case "udp":
		return PortKey{ProtoUDP, *c.Expect.Dport}
	}
	t.Fatalf("%s: case %q: unknown proto %q", c.file, c.Name, *c.Expect.Proto)
	return PortKey{}
}

// ports are the ports the README says to protect: dport and lure_dport,
// for TCP and UDP.
func (c *packetCase) ports() []PortKey {
	var ps []PortKey
	for _, p := range []*uint16{c.Expect.Dport, c.LureDport} {
		if p != nil {
			ps = append(ps, PortKey{ProtoTCP, *p}, PortKey{ProtoUDP, *p})
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
		mode   Mode
		exempt bool
	}
	scenarios := []scenario{{"enforce", ModeEnforce, false}, {"exempt", ModeEnforce, true}, {"observe", ModeObserve, false}}

	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s", filepath.Base(c.file), c.Name), func(t *testing.T) {
			var pols []PortPolicy
			for _, k := range c.ports() {
				pols = append(pols, PortPolicy{Key: k, Mode: ModeEnforce, Action: ActionDrop, DropProbability: 1})
			}
			must(t, d.SetPolicies(pols))
			for _, h := range hooks {
				for _, sc := range scenarios {
					t.Run(string(h)+"/"+sc.name, func(t *testing.T) {
						var exempt []PortKey
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
