package daemon

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/rules"

	"github.com/olcd/olcd/internal/olc"
)

// worstTick returns the events of one tick of a worst-case overload at n
// ports: every port's p and the node's move (the controller records a move
// above record_change, 0.01), overload_continue every 10 s, and an overload
// that ends and starts again every 30 s.
func worstTick(at time.Time, i, n int, signals []adaptive.SignalState, since time.Time) []adaptive.Event {
	from, to := 0.3, 0.35
	if i%2 == 1 {
		from, to = to, from
	}
	ctx := adaptive.Event{At: at, Pressure: 1.2, DropProbability: to, Signals: signals, OverloadSince: since,
		Reason: "cpu_busy 0.96 over its threshold 0.80 for 12 ticks: shedding (p rising)"}
	var evs []adaptive.Event
	if i%20 == 0 {
		ev := ctx
		ev.Kind = adaptive.EventOverloadContinue
		evs = append(evs, ev)
	}
	if i%60 == 0 {
		for _, k := range []adaptive.EventKind{adaptive.EventOverloadEnd, adaptive.EventOverloadStart} {
			ev := ctx
			ev.Kind = k
			evs = append(evs, ev)
		}
	}
	for p := range n {
		ev := ctx
		ev.Kind, ev.Port, ev.Class, ev.From, ev.To = adaptive.EventProbabilityChange, olc.PortKey{Proto: olc.ProtoTCP, Port: uint16(20000 + p)}, olc.ClassNormal, from, to
		evs = append(evs, ev)
	}
	node := ctx
	node.Kind, node.From, node.To = adaptive.EventProbabilityChange, from, to
	return append(evs, node)
}

// TestDecisionLogBounded drives the decision log with an hour of a
// worst-case overload at 100 ports and a 500 ms tick (every port's p moves
// every tick) and extrapolates the bytes per day: at most 50 MB. Before the
// aggregation and the rate limits every port's change was a record of its
// own: 200 records per second, ≈ 6 GB per day. The records stay complete:
// every port's changes form a chain (each record's from is the previous
// record's to), and what was folded is counted.
func TestDecisionLogBounded(t *testing.T) {
	const ports, tick = 100, 500 * time.Millisecond
	var buf bytes.Buffer
	d := &Daemon{log: slog.New(slog.DiscardHandler)}
	d.metrics = newMetrics("")
	d.eng = &engine{log: d.log, metrics: d.metrics, cfg: rules.Default()}
	d.eng.cfg.Mode = olc.ModeObserve
	dl, err := openDecisionLog("-", &buf)
	if err != nil {
		t.Fatal(err)
	}
	d.eng.dlog = dl
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dl.now = func() time.Time { return now }

	var signals []adaptive.SignalState
	for s := range olc.Signal(8) {
		signals = append(signals, adaptive.SignalState{Signal: s, Value: 0.4321, Available: true, Threshold: 0.8, Pressure: 0.54, Corroborated: true})
	}
	start, hour := now, time.Hour
	ticks := int(hour / tick)
	for i := range ticks {
		d.eng.recordEvents(adaptive.Decision{At: now, Events: worstTick(now, i, ports, signals, start)})
		now = now.Add(tick)
	}
	perDay := float64(buf.Len()) * float64(24*time.Hour) / float64(hour)
	t.Logf("worst case, %d ports, %v tick: %d bytes in %v of simulated time: %.1f MB/day", ports, tick, buf.Len(), hour, perDay/1e6)
	if perDay > 50e6 {
		t.Errorf("decision log writes %.1f MB/day, want ≤ 50 MB/day", perDay/1e6)
	}

	// Every port's chain of values is continuous, and the folded counts add
	// up to what was produced.
	last := map[string]float64{}
	kinds := map[string]int{}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec struct {
			Msg    string         `json:"msg"`
			Ports  []changeGroup  `json:"ports"`
			Folded map[string]int `json:"folded"`
			Ticks  int            `json:"folded_ticks"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("not JSON: %v: %s", err, sc.Bytes())
		}
		kinds[rec.Msg]++
		for k, n := range rec.Folded {
			kinds[k] += n
		}
		for _, g := range rec.Ports {
			if g.Count != len(g.Ports)+g.More || len(g.Ports) > maxListedPorts {
				t.Fatalf("group %+v: count is not ports + more, or too many names", g)
			}
			for _, p := range g.Ports {
				if prev, ok := last[p]; ok && prev != g.From {
					t.Fatalf("%s: record from %v, but the previous record left it at %v", p, g.From, prev)
				}
				last[p] = g.To
			}
		}
	}
	if len(last) == 0 {
		t.Fatal("no probability_change record")
	}
	// The last records may still hold a few folded ones.
	for k, want := range map[string]int{"overload_continue": ticks / 20, "overload_start": ticks / 60, "overload_end": ticks / 60} {
		if got := kinds[k]; got < want-5 || got > want {
			t.Errorf("%s: %d written or counted as folded, want %d", k, got, want)
		}
	}
}

// TestDecisionLogFoldsOnce: a quiet log writes what happens as it happens;
// a burst beyond the limit is counted in the next record, and a count is
// flushed at a later tick even when nothing else is written.
func TestDecisionLogFoldsOnce(t *testing.T) {
	var buf bytes.Buffer
	dl, err := openDecisionLog("-", &buf)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dl.now = func() time.Time { return now }
	folded := 0
	dl.onFold = func(string) { folded++ }
	for i := range eventBurst + 10 {
		dl.Record("config_override", "n", i)
	}
	if folded != 10 {
		t.Errorf("%d records folded, want 10", folded)
	}
	now = now.Add(eventEvery)
	dl.Flush()
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != eventBurst+1 {
		t.Fatalf("%d lines, want %d", len(lines), eventBurst+1)
	}
	want := fmt.Sprintf(`"msg":"records_folded","folded":{"config_override":%d}`, 10)
	if !bytes.Contains(lines[len(lines)-1], []byte(want)) {
		t.Errorf("last line %s, want it to contain %s", lines[len(lines)-1], want)
	}
}
