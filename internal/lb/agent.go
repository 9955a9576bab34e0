package lb

import (
	"bytes"
	"errors"
	"hash/maphash"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// AgentConfig configures an Agent. Zero values take the defaults in
// brackets.
type AgentConfig struct {
	// SendWait is how long a connection may take to send its agent-send
	// line, when its peer is expected to send one, before it is answered
	// for the node [5ms]. HAProxy's agent check connects with a delayed
	// ACK and sends agent-send with the handshake's last ACK, so its line
	// is in the socket when the connection is accepted and no connection
	// from it waits (TestHAProxyParses counts); without agent-send it
	// sends nothing and is answered at accept. Only a peer that sent its
	// line after the accept within the last PeerMemory waits.
	// Negative: never wait.
	SendWait time.Duration
	// MaxConns bounds the connections waiting for their line at once
	// [1024: 8 KiB of stack and a 128-byte buffer each, 9 MiB at most];
	// beyond it a connection is answered at accept from what it has sent,
	// so memory stays bounded under any flood. Connections answered at
	// accept hold no goroutine.
	MaxConns int
	// WriteTimeout bounds the write of an answer on a connection that
	// waited [1s]. At accept the answer is written without waiting: a
	// fresh socket's send buffer takes it whole, and a peer that
	// advertised no window gets no answer.
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

// PeerMemory is how long the agent remembers that a peer sent its line
// after the accept (its later connections wait up to SendWait for it), or
// sent nothing (its later connections are answered at accept).
const PeerMemory = time.Minute

// peerSlots is the size of the peer table: peers are hashed into it, and a
// collision only makes a silent peer wait as a talking one does.
const peerSlots = 256

// lingerSlots bounds the connections answered at accept that are held
// half-closed for SendWait, to catch a line that comes after all.
const lingerSlots = 1024

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
	// AnswerOverflow: MaxConns connections were waiting for their line:
	// the node's answer at once.
	AnswerOverflow = "overflow"
)

// AnswerKinds lists the answer kinds in a fixed order.
var AnswerKinds = []string{AnswerNode, AnswerPort, AnswerUnknown, AnswerOverflow}

// kind indexes AnswerKinds.
type kind uint8

const (
	kindNode kind = iota
	kindPort
	kindUnknown
	kindOverflow
)

// Agent answers HAProxy agent checks: every connection gets one line,
// "up ready 75%\n" or "up drain 40%\n", and is closed. The line comes from
// the last published Report, for the port the agent-send line names or for
// the node.
//
// A connection whose line is in at accept (HAProxy with agent-send), or
// whose peer is known to send nothing (HAProxy without it), is answered by
// the accept loop itself: no goroutine and no timer, and of allocations
// only the accept's and the two syscall handles of the read and the write. Only a connection expected to send a line that is not yet in
// waits, in a goroutine of its own, at most SendWait, and at most MaxConns
// of them at once.
type Agent struct {
	cfg      AgentConfig
	sendWait atomic.Int64 // nanoseconds; AgentConfig.SendWait, changed by SetSendWait
	log      *slog.Logger
	lines    atomic.Pointer[lines]
	sem      chan struct{}
	wg       sync.WaitGroup
	counts   [4]atomic.Uint64
	// waiting and peak count the connections waiting for their line.
	waiting, peak atomic.Int64
	// waited counts the connections that waited for their line.
	waited atomic.Uint64
	bufs   sync.Pool
	peers  peerTable
	linger chan lingering
}

// lines is a Report with its agent lines rendered once, at Publish.
type lines struct {
	rep  *Report
	node []byte // the node's line with its newline
	// byReq maps the request forms the agent-send line usually takes
	// ("tcp/8080", "8080", "udp/53") to the port's line.
	byReq map[string][]byte
}

func newLines(r *Report) *lines {
	l := &lines{rep: r, node: []byte(r.Node.AgentReply + "\n"), byReq: make(map[string][]byte, 2*len(r.Ports))}
	for _, p := range r.Ports {
		line := []byte(p.AgentReply + "\n")
		l.byReq[p.Proto+"/"+itoa(p.Port)] = line
		if p.Proto == "tcp" {
			l.byReq[itoa(p.Port)] = line
		}
	}
	return l
}

func itoa(p uint16) string {
	var b [5]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + p%10)
		if p /= 10; p == 0 {
			break
		}
	}
	return string(b[i:])
}

// lookup returns the line and kind for one request line (without its
// newline). The usual forms are a map lookup without allocation; anything
// else goes through Report.Lookup.
func (l *lines) lookup(req []byte) ([]byte, kind) {
	req = bytes.TrimSpace(req)
	if len(req) == 0 {
		return l.node, kindNode
	}
	if line, ok := l.byReq[string(req)]; ok {
		return line, kindPort
	}
	if key, ok := ParseRequest(string(req)); ok {
		if line, ok := l.byReq[key.Proto.String()+"/"+itoa(key.Port)]; ok {
			return line, kindPort
		}
	}
	return l.node, kindUnknown
}

// NewAgent returns an agent answering full weight until the first Publish.
// log may be nil.
func NewAgent(cfg AgentConfig, log *slog.Logger) *Agent {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{cfg: cfg, log: log, sem: make(chan struct{}, cfg.MaxConns), linger: make(chan lingering, lingerSlots)}
	a.bufs.New = func() any { b := make([]byte, maxRequest); return &b }
	a.peers.seed = maphash.MakeSeed()
	a.lines.Store(newLines(FullWeight()))
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

// Publish makes r the report the agent answers from (nil: full weight),
// its lines rendered here, once per tick, rather than per connection.
func (a *Agent) Publish(r *Report) {
	if r == nil {
		r = FullWeight()
	}
	a.lines.Store(newLines(r))
}

// Report returns the report the agent answers from.
func (a *Agent) Report() *Report { return a.lines.Load().rep }

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

// Peak returns the most connections waiting for their line at once so far
// (at most MaxConns).
func (a *Agent) Peak() int { return int(a.peak.Load()) }

// Waited returns how many connections waited for their line (the rest
// were answered at accept).
func (a *Agent) Waited() uint64 { return a.waited.Load() }

// Serve answers the connections of ln until ln is closed, then waits for
// the connections in hand. It returns nil when ln was closed, else the
// accept error (ln is closed then).
//
// One accept loop per CPU (at most 4) takes connections off ln: each
// answers what it accepted before it accepts again, so the answers of a
// burst are written on every CPU while the kernel queues the rest.
func (a *Agent) Serve(ln net.Listener) error {
	loops := min(max(runtime.GOMAXPROCS(0), 1), 4)
	errc := make(chan error, loops)
	stop := make(chan struct{})
	lingerDone := make(chan struct{})
	go func() { a.closeLingering(stop); close(lingerDone) }()
	for range loops {
		go func() { errc <- a.acceptLoop(ln) }()
	}
	var first error
	for range loops {
		if err := <-errc; err != nil && first == nil {
			first = err
			ln.Close() // the other loops stop too
		}
	}
	a.wg.Wait()
	close(stop)
	<-lingerDone
	return first
}

func (a *Agent) acceptLoop(ln net.Listener) error {
	var backoff time.Duration
	var buf [maxRequest]byte
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
		a.atAccept(c, buf[:])
	}
}

// atAccept answers c at once when it can: its line is in, or its peer is
// not expected to send one. Otherwise c waits in a goroutine of its own,
// or, with MaxConns waiting, is answered for the node at once.
func (a *Agent) atAccept(c net.Conn, buf []byte) {
	n := readNow(c, buf)
	wait := time.Duration(a.sendWait.Load())
	if i := bytes.IndexAny(buf[:n], "\r\n"); i >= 0 {
		line, k := a.lines.Load().lookup(buf[:i])
		if k == kindUnknown {
			// Garbage may go on: answer and discard it in a
			// goroutine, so that the close sends no RST that would
			// lose the answer.
			a.spawn(c, func() { a.answer(c, line, k) })
			return
		}
		a.answerNow(c, line, k, false)
		return
	}
	switch {
	case wait < 0:
		a.answerNow(c, a.lines.Load().node, kindNode, false)
	case n == 0 && !a.peers.expectLine(c.RemoteAddr()):
		// Nothing in, and nothing expected (HAProxy without
		// agent-send): answer, and hold the connection half-closed
		// for SendWait to learn whether the peer sends a line after
		// all.
		a.answerNow(c, a.lines.Load().node, kindNode, true)
	default:
		bp := a.bufs.Get().(*[]byte)
		got := copy(*bp, buf[:n])
		a.spawn(c, func() {
			defer a.bufs.Put(bp)
			w := a.waiting.Add(1)
			for p := a.peak.Load(); w > p && !a.peak.CompareAndSwap(p, w); p = a.peak.Load() {
			}
			a.waited.Add(1)
			a.handle(c, *bp, got, wait)
			a.waiting.Add(-1)
		})
	}
}

// spawn runs f for c in a goroutine of its own; with MaxConns goroutines
// running, c is answered for the node at once instead.
func (a *Agent) spawn(c net.Conn, f func()) {
	select {
	case a.sem <- struct{}{}:
	default:
		a.answerNow(c, a.lines.Load().node, kindOverflow, false)
		return
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer func() { <-a.sem }()
		f()
	}()
}

// isTemporary reports errors accept returns when the process is short of
// file descriptors or buffers.
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// handle reads the agent-send line into buf (n bytes in already), if it
// comes within wait, and answers.
func (a *Agent) handle(c net.Conn, buf []byte, n int, wait time.Duration) {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	for n < len(buf) && !bytes.ContainsAny(buf[:n], "\r\n") {
		m, err := c.Read(buf[n:])
		n += m
		if err != nil {
			break
		}
	}
	l := a.lines.Load()
	if i := bytes.IndexAny(buf[:n], "\r\n"); i >= 0 {
		n = i
	}
	switch {
	case n == 0:
		a.peers.silent(c.RemoteAddr())
		a.answer(c, l.node, kindNode)
	case n == len(buf):
		// An overlong line.
		a.peers.late(c.RemoteAddr())
		a.answer(c, l.node, kindUnknown)
	default:
		a.peers.late(c.RemoteAddr())
		line, k := l.lookup(buf[:n])
		a.answer(c, line, k)
	}
}

// answer writes line on a connection that waited and closes it.
func (a *Agent) answer(c net.Conn, line []byte, k kind) {
	a.counts[k].Add(1)
	_ = c.SetWriteDeadline(time.Now().Add(a.cfg.WriteTimeout))
	if _, err := c.Write(line); err != nil {
		a.log.Debug("agent answer not written", "remote", c.RemoteAddr().String(), "err", err)
	}
	if k == kindUnknown {
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

// answerNow writes line without waiting and closes c; with linger, c is
// half-closed (the FIN follows the line at once) and held for SendWait in
// case a line comes after all.
func (a *Agent) answerNow(c net.Conn, line []byte, k kind, linger bool) {
	a.counts[k].Add(1)
	writeNow(c, line)
	if linger {
		if tc, ok := c.(interface{ CloseWrite() error }); ok && tc.CloseWrite() == nil {
			select {
			case a.linger <- lingering{c: c, until: time.Now().Add(time.Duration(a.sendWait.Load()))}:
				return
			default:
			}
		}
	}
	c.Close()
}

// lingering is a connection answered at accept, held half-closed until.
type lingering struct {
	c     net.Conn
	until time.Time
}

// closeLingering closes the lingering connections as their time comes (in
// order: every one is held for the same SendWait), and before that reads
// what came: a line marks the peer as one that sends lines after the
// accept, and is consumed so that the close sends no RST. It returns once
// stop is closed and the queue is empty.
func (a *Agent) closeLingering(stop <-chan struct{}) {
	var buf [maxRequest]byte
	tm := time.NewTimer(time.Hour)
	tm.Stop()
	for {
		var l lingering
		select {
		case l = <-a.linger:
		case <-stop:
			for {
				select {
				case l = <-a.linger:
					l.c.Close()
				default:
					return
				}
			}
		}
		if d := time.Until(l.until); d > 0 {
			tm.Reset(d)
			select {
			case <-tm.C:
			case <-stop:
				tm.Stop()
			}
		}
		if readNow(l.c, buf[:]) > 0 {
			a.peers.late(l.c.RemoteAddr())
		} else {
			a.peers.silent(l.c.RemoteAddr())
		}
		l.c.Close()
	}
}

// peerTable remembers, per peer address (hashed into peerSlots), when it
// last sent its line after the accept and when it last sent nothing: the
// accept loop answers at once a peer that was silent and has not sent a
// line late since. A line that is in at accept (HAProxy's) marks nothing:
// a peer mixing such checks with silent ones (two backends, one with
// agent-send) is answered at once either way. Collisions only make a
// silent peer wait. Lock-free and fixed in size.
type peerTable struct {
	seed            maphash.Seed
	lateAt, quietAt [peerSlots]atomic.Int64 // unix nanoseconds
}

func (t *peerTable) slot(addr net.Addr) int {
	var ip net.IP
	if ta, ok := addr.(*net.TCPAddr); ok {
		ip = ta.IP
		if v4 := ip.To4(); v4 != nil {
			ip = v4
		}
	}
	return int(maphash.Bytes(t.seed, ip) % peerSlots)
}

// late records that the peer sent its line after the accept.
func (t *peerTable) late(addr net.Addr) {
	t.lateAt[t.slot(addr)].Store(time.Now().UnixNano())
}

// silent records that the peer sent nothing within SendWait.
func (t *peerTable) silent(addr net.Addr) {
	t.quietAt[t.slot(addr)].Store(time.Now().UnixNano())
}

// expectLine reports whether a connection from addr with nothing in at
// accept should wait for its line: the peer is unknown (not seen silent
// within PeerMemory), or sent a line after the accept within PeerMemory.
func (t *peerTable) expectLine(addr net.Addr) bool {
	i := t.slot(addr)
	now := time.Now().UnixNano()
	quiet := now-t.quietAt[i].Load() < int64(PeerMemory)
	late := now-t.lateAt[i].Load() < int64(PeerMemory)
	return !quiet || late
}
