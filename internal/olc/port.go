package olc

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Proto is the IP protocol number of a protected port: ProtoTCP (6) or
// ProtoUDP (17), the IANA numbers and the values of enum olcd_proto.
type Proto uint8

// The protocols a port can be protected for.
const (
	ProtoTCP Proto = 6
	ProtoUDP Proto = 17
)

var protoNames = []string{"tcp", "udp"}

// Valid reports whether p is ProtoTCP or ProtoUDP.
func (p Proto) Valid() bool { return p == ProtoTCP || p == ProtoUDP }

// String returns "tcp", "udp" or "proto(N)".
func (p Proto) String() string {
	switch p {
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	}
	return "proto(" + itoa(uint64(p)) + ")"
}

// ParseProto parses "tcp" or "udp". Errors: any other text, named with
// the accepted ones.
func ParseProto(s string) (Proto, error) {
	i, err := parseName("protocol", s, protoNames)
	if err != nil {
		return 0, err
	}
	return []Proto{ProtoTCP, ProtoUDP}[i], nil
}

// MarshalText returns "tcp" or "udp"; any other protocol is an error.
func (p Proto) MarshalText() ([]byte, error) {
	if !p.Valid() {
		return nil, invalid("protocol", uint8(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText parses the text as ParseProto does.
func (p *Proto) UnmarshalText(text []byte) error {
	v, err := ParseProto(string(text))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// PortKey identifies a protected port: destination port and protocol. The
// tags are its keys in olcd.yaml's port entries (internal/rules).
type PortKey struct {
	// Port is the destination port, 1..65535 (0 only in the zero PortKey,
	// which stands for "the node" in decision-log events).
	Port uint16 `yaml:"port" range:"[1, 65535]" noun:"port"`
	// Proto is ProtoTCP or ProtoUDP.
	Proto Proto `yaml:"proto"`
}

// String returns "tcp/443".
func (k PortKey) String() string { return fmt.Sprintf("%s/%d", k.Proto, k.Port) }

// Valid reports whether k names a protocol olcd protects and a port in
// 1..65535.
func (k PortKey) Valid() bool { return k.Proto.Valid() && k.Port != 0 }

// ParsePortKey parses "tcp/443" or "udp/53". Errors: no "/", an unknown
// protocol, or a port outside 1..65535.
func ParsePortKey(s string) (PortKey, error) {
	ps, port, ok := strings.Cut(s, "/")
	if !ok {
		return PortKey{}, fmt.Errorf("port %q: want proto/port, e.g. tcp/443", s)
	}
	p, err := ParseProto(ps)
	if err != nil {
		return PortKey{}, fmt.Errorf("port %q: %w", s, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return PortKey{}, fmt.Errorf("port %q: port %q is not in 1..65535", s, port)
	}
	return PortKey{Proto: p, Port: uint16(n)}, nil
}

// MarshalText returns "tcp/443"; an invalid key is an error.
func (k PortKey) MarshalText() ([]byte, error) {
	if !k.Valid() {
		return nil, invalid("port", k)
	}
	return []byte(k.String()), nil
}

// UnmarshalText parses the text as ParsePortKey does.
func (k *PortKey) UnmarshalText(text []byte) error {
	v, err := ParsePortKey(string(text))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// Class is a port's priority class (0..2, the values of enum olcd_class).
// Shedding is taken from best-effort ports first, then normal, and from
// critical ports only when the others are at their bound.
type Class uint8

// The priority classes, from most to least protected. The zero value is
// ClassCritical so that the iteration order of arrays indexed by Class is
// the protection order; configs default to ClassNormal explicitly.
const (
	ClassCritical Class = iota
	ClassNormal
	ClassBestEffort
	// NumClasses sizes arrays indexed by Class.
	NumClasses
)

var classNames = []string{"critical", "normal", "best-effort"}

// ClassNames returns the classes' names from most to least protected.
func ClassNames() []string { return slices.Clone(classNames) }

// Valid reports whether c is one of the classes above.
func (c Class) Valid() bool { return c < NumClasses }

// String returns "critical", "normal" or "best-effort" (or "class(N)").
func (c Class) String() string {
	if c.Valid() {
		return classNames[c]
	}
	return "class(" + itoa(uint64(c)) + ")"
}

// ParseClass parses "critical", "normal" or "best-effort". Errors: any
// other text, named with the accepted ones.
func ParseClass(s string) (Class, error) {
	i, err := parseName("class", s, classNames)
	return Class(i), err
}

// MarshalText returns the class's name; an invalid class is an error.
func (c Class) MarshalText() ([]byte, error) {
	if !c.Valid() {
		return nil, invalid("class", uint8(c))
	}
	return []byte(c.String()), nil
}

// UnmarshalText parses the text as ParseClass does.
func (c *Class) UnmarshalText(text []byte) error {
	v, err := ParseClass(string(text))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }
