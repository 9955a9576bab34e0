package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/loader"
	"github.com/olcd/olcd/internal/olc"
	"github.com/olcd/olcd/internal/rules"
	"github.com/olcd/olcd/internal/statefile"
)

// Off is the value of the --pin-dir and --state-dir flags that turns
// pinning, or the state file, off (in Options, "" does).
const Off = "off"

// stateEvery is how often the engine writes the state file: the state a
// restart finds is at most this old, less than the heartbeat's default
// stale_after (5 s), so that the drop probabilities it restores are the
// ones the datapath held when the old daemon stopped. A write is one small
// file (a few hundred bytes per port) and a rename.
const stateEvery = 2 * time.Second

// pinDir is the bpffs directory the datapath is pinned in, "" for none.
func (d *Daemon) pinDir() string {
	if d.opts.PinDir == Off {
		return ""
	}
	return d.opts.PinDir
}

// stateDir is the state file's directory, "" for none.
func (d *Daemon) stateDir() string {
	if d.opts.StateDir == Off {
		return ""
	}
	return d.opts.StateDir
}

// DefaultPinDir is the pin directory of olcd run in the calling thread's
// network namespace: PinRoot/<netns inode>.
func DefaultPinDir() string { return loader.DefaultPinDir() }

// configHash identifies the config file in force by what it sets (the
// embedded default: "default"): a state learnt under another config is
// foreign, one learnt under the same file with another comment is not.
func (d *Daemon) configHash() string {
	if d.conf.fileData == nil {
		return "default"
	}
	if d.conf.fileDigest == "" { // not encodable: the bytes, as before
		return d.bytesHash()
	}
	return d.conf.fileDigest
}

// bytesHash is how states written before configHash (until 7 December
// 2026) named the same file: its bytes' hash.
func (d *Daemon) bytesHash() string {
	h := sha256.Sum256(d.conf.fileData)
	return hex.EncodeToString(h[:8])
}

func nodeName() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}

// adoptPolicies makes the policies a taken-over datapath holds the ones in
// force for program: the drop probabilities the old daemon left stay until
// the first tick decides.
func (e *engine) adoptPolicies(pol []loader.PortPolicy) {
	for _, p := range pol {
		e.last.decision.Ports = append(e.last.decision.Ports, adaptive.PortDecision{Key: p.Key, Class: p.Class,
			DropProbability: p.DropProbability, Retransmits: p.Retransmits})
	}
}

// restoreState reads the state file and restores the controller from it.
// The drop probabilities and overload are restored only when they were
// still in force: the file is younger than stale_after, or the datapath
// taken over had a fresh heartbeat (the loader renews it while this daemon
// loads); otherwise the datapath had failed open in between. Without a usable file, a taken-over datapath's probabilities
// seed the controller, so that the first tick does not release them.
// Returns the live overrides to apply again, and whether drop
// probabilities were restored (then the first tick waits: firstTick).
func (d *Daemon) restoreState(adopted []loader.PortPolicy) ([]statefile.Override, bool) {
	e := d.eng
	now := time.Now()
	var st *adaptive.State
	var overrides []statefile.Override
	var age time.Duration
	if dir := d.stateDir(); dir != "" {
		f, err := statefile.Read(dir, nodeName(), d.configHash(), now)
		var ig *statefile.Ignored
		if errors.As(err, &ig) && d.conf.fileData != nil && f.ConfigHash == d.bytesHash() {
			f, err = statefile.Read(dir, nodeName(), f.ConfigHash, now) // an earlier olcd's state, this file
		}
		switch {
		case err == nil:
			age = now.Sub(f.WrittenAt)
			st, overrides = &f.Controller, f.Overrides
			if age > e.staleAfter() && !e.adoptedFresh {
				st.DropProbability, st.Overloaded, st.ClassP = 0, false, [olc.NumClasses]float64{}
				for i := range st.Ports {
					st.Ports[i].DropProbability, st.Ports[i].QueueOverload = 0, false
				}
			}
			d.log.Info("state restored", "file", dir+"/"+statefile.Name, "age", age.Round(time.Millisecond),
				"drop_probability", st.DropProbability, "ports", len(st.Ports), "overrides", len(overrides))
		case errors.As(err, &ig):
			d.log.Info("state file not used", "file", ig.Path, "reason", ig.Reason)
		case errors.Is(err, fs.ErrNotExist):
		default:
			d.log.Warn("state file not used", "err", err)
		}
	}
	if st == nil && len(adopted) > 0 {
		s := adaptive.State{}
		for _, p := range adopted {
			s.Ports = append(s.Ports, adaptive.PortState{Key: p.Key, DropProbability: p.DropProbability, QueueOverload: p.DropProbability > 0})
			s.DropProbability = max(s.DropProbability, p.DropProbability)
		}
		s.Overloaded = s.DropProbability > 0
		st = &s
	}
	if st != nil {
		e.ctrl.Restore(*st, age, now)
	}
	return overrides, st != nil && e.ctrl.Shedding()
}

// firstTick runs the start's first tick at once, unless drop probabilities
// were restored: a first tick has no rates yet (the sampler's signals are
// deltas between two reads, so they are all unavailable), and its port
// counts span the few milliseconds since the datapath was loaded or taken
// over, which a port's law would read as a tick's (a demand of almost
// nothing: pass rate 1). Then the sampler and the datapath's counts take
// their first read now, the heartbeat keeps the restored probabilities in
// force, and the first tick is the loop's, one interval later, on real
// deltas over the same interval.
func (d *Daemon) firstTick(restored bool) {
	if !restored {
		d.tick()
		return
	}
	if _, st, ok := d.eng.read(); ok {
		d.eng.keep(st)
	}
	if err := d.eng.dp.Heartbeat(); err != nil {
		d.log.Warn("heartbeat", "err", err)
	}
	d.log.Info("drop probabilities restored: the first tick waits for the sampler's first interval", "interval", d.eng.cfg.Interval)
}

// saveState writes the state file (at most every stateEvery unless force).
func (d *Daemon) saveState(force bool) {
	dir := d.stateDir()
	if dir == "" || d.eng.ctrl == nil {
		return
	}
	now := time.Now()
	if !force && now.Sub(d.savedAt) < stateEvery {
		return
	}
	d.savedAt = now
	f := statefile.File{Node: nodeName(), ConfigHash: d.configHash(), WrittenAt: now, Controller: d.eng.ctrl.Export()}
	for _, o := range d.conf.overrides {
		f.Overrides = append(f.Overrides, statefile.Override{At: o.At, Kind: o.Kind, Value: o.Value, Doc: o.doc})
	}
	if err := statefile.Write(dir, f); err != nil {
		if !d.stateWarned {
			d.log.Warn("state file not written (a restart will relearn)", "err", err)
		}
		d.stateWarned = true
		return
	}
	d.stateWarned = false
}

// reapplyOverrides applies the live overrides a state file kept, oldest
// first, keeping their original time; one the config refuses now is
// logged and dropped.
func (d *Daemon) reapplyOverrides(list []statefile.Override) {
	for _, o := range list {
		if err := d.override(o.Kind, o.Value, o.Doc); err != nil {
			d.log.Warn("live override from the state file refused", "kind", o.Kind, "value", loggedValue(o.Value), "err", err)
			continue
		}
		if n := len(d.conf.overrides); n > 0 {
			d.conf.overrides[n-1].At = o.At
		}
		d.log.Info("live override restored", "kind", o.Kind, "value", loggedValue(o.Value), "applied_at", o.At)
	}
}

// PinRoot and StateDir are where an installed olcd pins its datapath (one
// directory per network namespace under PinRoot) and keeps its state file.
const (
	PinRoot  = loader.PinRoot
	StateDir = statefile.DefaultDir
)

// Detach removes a pinned datapath no olcd runs any more (`olcd detach`):
// pinDir "" is the calling network namespace's default. A stale admin
// socket at socket ("" is the default, /run/olcd/olcd.sock), one no olcd
// listens on (a killed olcd's), goes too, before the attach locks: the
// lock directory is removed when nothing is left in it
// (loader.RemovePinned). It returns what it removed, one line each.
// Errors: an olcd still runs here (stop it first), or a removal failed
// (the others are still done).
func Detach(pinDir, socket string, log *slog.Logger) ([]string, error) {
	if pinDir == "" {
		pinDir = loader.DefaultPinDir()
	}
	if socket == "" {
		socket = rules.DefaultAdminSocket
	}
	var done []string
	// A socket someone answers on (an olcd of another network namespace
	// with the same admin.socket), or one the probe cannot tell, is left:
	// the attach locks say whether an olcd runs here.
	if found, _, err := removeStaleSocket(socket); found == socketStale {
		if err != nil {
			return nil, fmt.Errorf("detach: %w", err)
		}
		done = append(done, "removed the stale admin socket "+socket)
	}
	more, err := loader.RemovePinned(pinDir, log)
	return append(done, more...), err
}
