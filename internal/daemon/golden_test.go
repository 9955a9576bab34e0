package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/api"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/resptime"
	"github.com/olcd/olcd/internal/sampler"
)

// update rewrites the golden files of TestGolden (go test -run TestGolden -update).
var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// goldenDir holds the golden test's config and the documents it renders;
// cmd/olcd's TestGoldenStatusText reads status.json from here.
const goldenDir = "testdata/golden"

// fakeSampler returns fixed snapshots, one per Sample, the last again
// when they run out.
type fakeSampler struct {
	snaps []olc.Snapshot
	ports []uint16
}

func (s *fakeSampler) Sample() olc.Snapshot {
	snap := s.snaps[0]
	if len(s.snaps) > 1 {
		s.snaps = s.snaps[1:]
	}
	return snap
}

func (s *fakeSampler) SetTCPPorts(ports []uint16) { s.ports = slices.Clone(ports) }

// fakeDatapath serves fixed statistics, one set per Stats call of a tick,
// and records what the daemon writes into the maps.
type fakeDatapath struct {
	stats   loader.Stats
	flows   loader.FlowTable
	sample  uint32
	writes  []string // what was written, in order, as text
	probs   map[olc.PortKey]float64
	heartbt int
	// released counts the Stats handed back with a nonempty Response.
	released int
}

func (f *fakeDatapath) Attach(string, olc.AttachMode) error { return errors.New("fake: no attach") }
func (f *fakeDatapath) Detach(string) error                 { return nil }
func (f *fakeDatapath) Attachments() []loader.Attachment {
	return []loader.Attachment{{Interface: "olcdg0", Hook: "tc", Mode: "tcx", Ifindex: 7, Egress: "tcx"}}
}

func (f *fakeDatapath) SetPolicies(policies []loader.PortPolicy) error {
	for _, p := range policies {
		gate := ""
		if p.RequestGate {
			gate = " request_gate"
		}
		f.writes = append(f.writes, fmt.Sprintf("policy %s mode=%s action=%s class=%s p=%g%s",
			p.Key, p.Mode, p.Action, p.Class, p.DropProbability, gate))
	}
	return nil
}

func (f *fakeDatapath) SetDropProbabilities(m map[olc.PortKey]float64) error {
	f.probs = maps.Clone(m)
	return nil
}

func (f *fakeDatapath) SetRetransmits(map[olc.PortKey]olc.Retransmits) error { return nil }

func (f *fakeDatapath) SetExceptions(ports []olc.PortKey, sources []netip.Prefix) error {
	for _, k := range ports {
		f.writes = append(f.writes, "exception port "+k.String())
	}
	for _, p := range sources {
		f.writes = append(f.writes, "exception source "+p.String())
	}
	return nil
}

func (f *fakeDatapath) SetMode(m olc.Mode) error {
	f.writes = append(f.writes, "mode "+m.String())
	return nil
}

func (f *fakeDatapath) SetRejectLimit(rate, burst int) error {
	f.writes = append(f.writes, fmt.Sprintf("reject limit %d/s burst %d", rate, burst))
	return nil
}

func (f *fakeDatapath) Heartbeat() error { f.heartbt++; return nil }

// Stats returns a copy of f.stats, a new Response map as the loader's
// is, so that a release empties only the Stats it is given.
func (f *fakeDatapath) Stats() (loader.Stats, error) {
	s := f.stats
	if s.Response != nil {
		s.Response = maps.Clone(s.Response)
	}
	return s, nil
}

// ReleaseStats empties the Response as the loader's does, so that a
// Stats released while still read shows in the golden documents.
func (f *fakeDatapath) ReleaseStats(s loader.Stats) {
	if len(s.Response) > 0 {
		f.released++
	}
	clear(s.Response)
}

func (f *fakeDatapath) ResponseSample() uint32                        { return f.sample }
func (f *fakeDatapath) FlowTableOccupancy() (loader.FlowTable, error) { return f.flows, nil }
func (f *fakeDatapath) Close() error                                  { return nil }
func (f *fakeDatapath) Release() error                                { return nil }

func (f *fakeDatapath) PortCounters(into map[olc.PortKey]loader.Counters) error {
	for k, c := range f.stats.Ports {
		into[k] = c
	}
	return nil
}

// goldenStart is when the golden daemon started; its ticks follow every
// 500 ms from goldenStart + 1 s.
var goldenStart = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

const goldenTicks = 6

// goldenSnapshot is tick i's (0-based) node: CPU over its threshold from
// the second tick on, PSI CPU rising, psi_memory_some unavailable (PSI
// memory unreadable), listen overflows, an accept queue filling.
func goldenSnapshot(i int) olc.Snapshot {
	var s olc.Snapshot
	s.At = goldenStart.Add(time.Second + time.Duration(i)*500*time.Millisecond)
	if i > 0 {
		s.Interval = 500 * time.Millisecond
	}
	s.Set(olc.CPUBusy, 0.70+0.05*float64(i))
	s.Set(olc.Load1, 3.5)
	s.Set(olc.Load1PerCore, 1.75)
	s.Set(olc.Runnable, 5)
	s.Set(olc.RunqPerCore, 2.5)
	s.Set(olc.PSICPUSomeAvg10, 0.2)
	s.Set(olc.PSICPUSome, 0.1*float64(i))
	s.Set(olc.PSIIOSomeAvg10, 0.01)
	if i > 0 {
		s.Set(olc.ListenOverflowsPerS, 2*float64(i))
	}
	s.Set(olc.AcceptQueueFill, 0.125*float64(i))
	s.AcceptQueueFill = map[uint16]float64{443: 0.125 * float64(i), 80: 0.0625}
	s.Errors = []olc.SourceError{{Source: sampler.SourcePSIMemory, Err: errors.New("read /proc/pressure/memory: operation not supported")}}
	return s
}

// goldenStats is the datapath's cumulative counters after tick i: TCP 443
// and 80 timed with enough samples, 8080 timed with too few (unavailable
// quantiles), 53/udp and 8443 observed.
func goldenStats(i int) loader.Stats {
	n := uint64(i + 1)
	tcp := func(port uint16) olc.PortKey { return olc.PortKey{Proto: olc.ProtoTCP, Port: port} }
	st := loader.Stats{
		Ports: map[olc.PortKey]loader.Counters{
			tcp(443):                        {NewConns: 400 * n, Passed: 380 * n, Dropped: 20 * n, SYNRetransmits: 10 * n, Exempt: 5 * n},
			tcp(80):                         {NewConns: 300 * n, Passed: 240 * n, Dropped: 60 * n, Rejected: 55 * n, SYNRetransmits: 3 * n, Stale: n},
			tcp(8080):                       {NewConns: 200 * n, Passed: 200 * n, Marked: 50 * n},
			{Proto: olc.ProtoUDP, Port: 53}: {NewConns: 1000 * n, Passed: 1000 * n, WouldDrop: 100 * n},
			tcp(8443):                       {NewConns: 50 * n, Passed: 50 * n, WouldDrop: 10 * n, WouldReject: 9 * n},
		},
		Other: loader.Counters{NewConns: 7 * n, Exempt: 2 * n},
		// The exception port tcp/9100 (the scrape port), in a slot of its own.
		ExemptPorts:   map[olc.PortKey]loader.Counters{tcp(9100): {NewConns: 6 * n, Passed: 6 * n, Exempt: 6 * n}},
		Unclassified:  3 * n,
		RejectLimited: 4 * n,
		Flows:         loader.FlowCounters{Inserts: 900 * n, Evictions: n, Expired: 2 * n, Forgotten: 800 * n},
		Response:      map[olc.PortKey]loader.Response{},
	}
	hist := func(reqs, abandoned uint64, at map[time.Duration]uint64) loader.Response {
		r := loader.Response{Requests: reqs, Abandoned: abandoned, Buckets: make([]uint64, loader.HistBuckets)}
		for d, c := range at {
			r.Buckets[resptime.Bucket(d)] += c
			r.Responses += c
		}
		return r
	}
	st.Response[tcp(443)] = hist(400*n, 2*n, map[time.Duration]uint64{
		5 * time.Millisecond: 300 * n, 20 * time.Millisecond: 80 * n, 120 * time.Millisecond: 10 * n})
	gated := st.Response[tcp(443)]
	gated.Reused, gated.Resets = 250*n, 40*n
	st.Response[tcp(443)] = gated
	st.Response[tcp(80)] = hist(300*n, n, map[time.Duration]uint64{
		time.Millisecond: 200 * n, 40 * time.Millisecond: 90 * n, 2 * time.Second: 5 * n})
	st.Response[tcp(8080)] = hist(3*n, 0, map[time.Duration]uint64{3 * time.Millisecond: 2 * n})
	st.Response[tcp(8443)] = hist(50*n, 0, map[time.Duration]uint64{300 * time.Microsecond: 48 * n})
	return st
}

// goldenDaemon builds a daemon on testdata/golden/olcd.yaml as start()
// would, with a fake sampler and datapath, and runs goldenTicks ticks.
func goldenDaemon(t *testing.T) (*Daemon, *fakeDatapath) {
	t.Helper()
	d, err := New(Options{ConfigPath: filepath.Join(goldenDir, "olcd.yaml"), Version: "golden"})
	if err != nil {
		t.Fatal(err)
	}
	d.started = goldenStart
	d.eng.limits = limitsOf(d.eng.cfg)
	d.eng.ports = d.eng.resolvePorts(d.eng.cfg)
	snaps := make([]olc.Snapshot, goldenTicks)
	for i := range snaps {
		snaps[i] = goldenSnapshot(i)
	}
	d.eng.smp = &fakeSampler{snaps: snaps}
	if d.eng.ctrl, err = adaptive.New(d.eng.cfg.ControllerConfig(controllerPorts(d.eng.ports))); err != nil {
		t.Fatal(err)
	}
	dp := &fakeDatapath{sample: loaderConfig(d.eng.cfg, nil).ResponseSample, flows: loader.FlowTable{Capacity: 16384, Used: 4096, Outstanding: 12}}
	d.eng.dp = dp
	if d.eng.dlog, err = openDecisionLog("", nil); err != nil {
		t.Fatal(err)
	}
	if err := d.eng.program(); err != nil {
		t.Fatal(err)
	}
	for i := range goldenTicks {
		dp.stats = goldenStats(i)
		d.tick()
	}
	return d, dp
}

// TestGolden: on the same input (config, snapshots, datapath counters and
// histograms, clock) `olcd status --json`, the Prometheus exposition and
// what the daemon writes into the datapath's maps are byte for byte the
// committed files. The text of `olcd status` is checked from status.json
// by cmd/olcd's TestGoldenStatusText.
func TestGolden(t *testing.T) {
	d, dp := goldenDaemon(t)

	// status --json: GET /v1/status decoded and indented as the CLI does.
	rec := httptest.NewRecorder()
	newAdminHandler(d, d.log).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/status", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /v1/status: %d %s", rec.Code, rec.Body)
	}
	var st api.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	var js bytes.Buffer
	enc := json.NewEncoder(&js)
	enc.SetIndent("", "  ")
	if err := enc.Encode(&st); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "status.json", js.Bytes())

	// The exposition, without what depends on the machine or the Go
	// runtime (go_*, process_*, tick durations, the Go version).
	rec = httptest.NewRecorder()
	d.metrics.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	checkGolden(t, "metrics.txt", stableExposition(rec.Body.String()))

	// The map edge: policies, exceptions, modes and the last tick's
	// probabilities as the datapath received them.
	var w strings.Builder
	for _, l := range dp.writes {
		fmt.Fprintln(&w, l)
	}
	keys := make([]olc.PortKey, 0, len(dp.probs))
	for k := range dp.probs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b olc.PortKey) int { return strings.Compare(a.String(), b.String()) })
	for _, k := range keys {
		fmt.Fprintf(&w, "p %s %.6f\n", k, dp.probs[k])
	}
	fmt.Fprintf(&w, "heartbeats %d\n", dp.heartbt)
	checkGolden(t, "datapath.txt", []byte(w.String()))
}

var (
	unstableFamily = regexp.MustCompile(`^(# (HELP|TYPE) )?(go_|process_|promhttp_|olcd_tick_duration_seconds)`)
	goVersionLabel = regexp.MustCompile(`goversion="[^"]*"`)
)

// stableExposition drops the families that vary from run to run or
// machine to machine and pins the Go version label.
func stableExposition(s string) []byte {
	var b strings.Builder
	for l := range strings.SplitSeq(s, "\n") {
		if l == "" || unstableFamily.MatchString(l) {
			continue
		}
		b.WriteString(goVersionLabel.ReplaceAllString(l, `goversion="go"`))
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join(goldenDir, name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run TestGolden -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n%s", name, lineDiff(string(want), string(got)))
	}
}

// lineDiff lists the lines that differ, by line number (enough to see
// what moved; the files are a few hundred lines).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	n := 0
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  want %s\n  got  %s\n", i+1, wl, gl)
			if n++; n == 20 {
				b.WriteString("  …\n")
				break
			}
		}
	}
	return b.String()
}
