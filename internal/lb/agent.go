package lb

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// AgentConfig configures an Agent. Zero values take the defaults in
// brackets.
type AgentConfig struct {
	// SendWait is how long a connection may take to send its agent-send
	// line before it is answered for the node [5ms]. HAProxy sends the
	// line as soon as its connect completes, so on a LAN it is there when
	// the connection is accepted; without agent-send HAProxy sends
	// nothing and waits for the answer, which then comes after SendWait.
	// Negative: never wait, always answer for the node.
	SendWait time.Duration
	// MaxConns bounds the connections handled at once [1024: 8 KiB of
	// stack and a 128-byte buffer each, 9 MiB at most]; beyond it a
	// connection is answered by the accept loop itself from what it has
	// already sent (the node's answer if its line is not in yet), so
	// memory stays bounded under any flood. A line that arrives after
	// such an answer meets a closed socket, and the client an RST after
	// the answer.
	MaxConns int
	// WriteTimeout bounds the write of an answer [1s].
	WriteTimeout time.Duration
}

// DefaultSendWait is AgentConfig.SendWait's default.
const DefaultSendWait = 5 * time.Millisecond

// discardFor and discardMax bound what is read and dropped after
// answering a request that was not understood.
const (
	discardFor = 20 * time.Millisecond
	discardMax = 64 << 10
)

// maxRequest bounds the agent-send line read: a port name is a dozen
// bytes, anything longer is not a request olcd understands.
const maxRequest = 128

func (c *AgentConfig) defaults() {
	if c.SendWait == 0 {
		c.SendWait = DefaultSendWait
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 1024
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = time.Second
	}
}

// Answer kinds, the label of AgentCounts.
const (
	// AnswerNode: the request named no port (HAProxy without agent-send,
	// or nothing within SendWait): the node's answer.
	AnswerNode = "node"
	// AnswerPort: the request named a protected port: its answer.
	AnswerPort = "port"
	// AnswerUnknown: the request was not a port olcd protects (garbage,
	// an unprotected port, an overlong line): the node's answer.
	AnswerUnknown = "unknown"
	// AnswerOverflow: MaxConns connections were in hand: the node's
	// answer at once, the request unread.
	AnswerOverflow = "overflow"
)

// AnswerKinds lists the answer kinds in a fixed order.
var AnswerKinds = []string{AnswerNode, AnswerPort, AnswerUnknown, AnswerOverflow}

// Agent answers HAProxy agent checks: every connection gets one line,
// "up ready 75%\n" or "up drain 40%\n", and is closed. The line comes from
// the last published Report, for the port the agent-send line names or for
// the node.
type Agent struct {
	cfg      AgentConfig
	sendWait atomic.Int64 // nanoseconds; AgentConfig.SendWait, changed by SetSendWait
	log      *slog.Logger
	report   atomic.Pointer[Report]
	sem      chan struct{}
	wg       sync.WaitGroup
	counts   [4]atomic.Uint64
	// inFlight and peak count the connections handled at once.
	inFlight, peak atomic.Int64
	bufs           sync.Pool
}

// NewAgent returns an agent answering full weight until the first Publish.
// log may be nil.
func NewAgent(cfg AgentConfig, log *slog.Logger) *Agent {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{cfg: cfg, log: log, sem: make(chan struct{}, cfg.MaxConns)}
	a.bufs.New = func() any { b := make([]byte, maxRequest); return &b }
	a.report.Store(FullWeight())
	a.sendWait.Store(int64(cfg.SendWait))
	return a
}

// SetSendWait changes AgentConfig.SendWait for the connections accepted
// from now on (a reload); 0 takes the default.
func (a *Agent) SetSendWait(d time.Duration) {
	if d == 0 {
		d = DefaultSendWait
	}
	a.sendWait.Store(int64(d))
}

// Publish makes r the report the agent answers from (nil: full weight).
func (a *Agent) Publish(r *Report) {
	if r == nil {
		r = FullWeight()
	}
	a.report.Store(r)
}

// Report returns the report the agent answers from.
func (a *Agent) Report() *Report { return a.report.Load() }

// AgentCounts are the connections answered since start, by kind.
type AgentCounts map[string]uint64

// Counts returns the connections answered since start, by answer kind.
func (a *Agent) Counts() AgentCounts {
	out := make(AgentCounts, len(AnswerKinds))
	for i, k := range AnswerKinds {
		out[k] = a.counts[i].Load()
	}
	return out
}

// Peak returns the most connections handled at once so far (at most
// MaxConns).
func (a *Agent) Peak() int { return int(a.peak.Load()) }

func (a *Agent) count(kind string) {
	for i, k := range AnswerKinds {
		if k == kind {
			a.counts[i].Add(1)
			return
		}
	}
}

// Serve answers the connections of ln until ln is closed, then waits for
// the connections in hand. It returns nil when ln was closed, else the
// accept error.
func (a *Agent) Serve(ln net.Listener) error {
	defer a.wg.Wait()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				// EMFILE and friends: wait as net/http does, rather
				// than spin or stop answering for good.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				a.log.Warn("agent accept failed; retrying", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		select {
		case a.sem <- struct{}{}:
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				defer func() { <-a.sem }()
				n := a.inFlight.Add(1)
				for p := a.peak.Load(); n > p && !a.peak.CompareAndSwap(p, n); p = a.peak.Load() {
				}
				a.handle(c)
				a.inFlight.Add(-1)
			}()
		default:
			a.overflow(c)
		}
	}
}

// overflow answers c in the accept loop, without waiting: the agent-send
// line is taken if it has already arrived (it usually has), else c gets
// the node's answer. A fresh socket's send buffer is empty, so the write
// does not block the loop.
func (a *Agent) overflow(c net.Conn) {
	bp := a.bufs.Get().(*[]byte)
	defer a.bufs.Put(bp)
	rep := a.report.Load()
	n := readNow(c, *bp)
	if i := bytes.IndexAny((*bp)[:n], "\r\n"); i >= 0 {
		if t, found := rep.Lookup(string((*bp)[:i])); found {
			a.answer(c, t, AnswerPort)
			return
		}
	}
	a.answer(c, rep.Node, AnswerOverflow)
}

// isTemporary reports errors accept returns when the process is short of
// file descriptors or buffers.
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// handle reads the agent-send line, if one comes within SendWait, and
// answers.
func (a *Agent) handle(c net.Conn) {
	wait := time.Duration(a.sendWait.Load())
	if wait < 0 {
		a.answer(c, a.report.Load().Node, AnswerNode)
		return
	}
	bp := a.bufs.Get().(*[]byte)
	defer a.bufs.Put(bp)
	buf := *bp
	_ = c.SetReadDeadline(time.Now().Add(wait))
	n := 0
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		n += m
		if i := bytes.IndexAny(buf[:n], "\r\n"); i >= 0 {
			n = i
			break
		}
		if err != nil {
			break
		}
	}
	rep := a.report.Load()
	line := bytes.TrimSpace(buf[:n])
	switch {
	case len(line) == 0 && n < len(buf):
		a.answer(c, rep.Node, AnswerNode)
	case n == len(buf):
		// An overlong line: answer, then discard a little of the rest,
		// so that closing does not reset the connection before the
		// client has read the answer.
		a.answer(c, rep.Node, AnswerUnknown)
	default:
		t, found := rep.Lookup(string(line))
		kind := AnswerUnknown
		if found {
			kind = AnswerPort
		}
		a.answer(c, t, kind)
	}
}

// answer writes t's line and closes c.
func (a *Agent) answer(c net.Conn, t Target, kind string) {
	a.count(kind)
	_ = c.SetWriteDeadline(time.Now().Add(a.cfg.WriteTimeout))
	if _, err := c.Write([]byte(t.AgentReply + "\n")); err != nil {
		a.log.Debug("agent answer not written", "remote", c.RemoteAddr().String(), "err", err)
	}
	if kind == AnswerUnknown {
		// A client that sent more than was read would get an RST on
		// close, which may discard the answer before it is read: send
		// the FIN, then discard what comes for a moment.
		if tc, ok := c.(interface{ CloseWrite() error }); ok && tc.CloseWrite() == nil {
			_ = c.SetReadDeadline(time.Now().Add(discardFor))
			_, _ = io.CopyN(io.Discard, c, discardMax)
		}
	}
	// Close sends the FIN after the line.
	c.Close()
}
