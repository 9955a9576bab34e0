package rules

import (
	"bytes"
	"encoding"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/olcd/olcd/internal/adaptive"
	"github.com/olcd/olcd/internal/olc"
	sy "github.com/olcd/olcd/internal/strictyaml"
)

var update = flag.Bool("update", false, "rewrite deploy/olcd.yaml from the schema (go generate ./internal/rules)")

const deployPath = "../../deploy/olcd.yaml"

// TestDeployConfigGenerated: deploy/olcd.yaml is what the schema says: every
// key of Config in declaration order with its default (a key without a
// default, action.dscp, is left out), each section with a comment. The
// comments are the file's own, carried over by key path; the keys and
// values are regenerated, so a key added, renamed or given another default
// fails this test until `go generate ./internal/rules` rewrites the file
// (it lacked 8 keys and listed two of the three actions).
func TestDeployConfigGenerated(t *testing.T) {
	old, err := os.ReadFile(deployPath)
	if err != nil {
		t.Fatal(err)
	}
	var oldDoc yaml.Node
	if err := yaml.Unmarshal(old, &oldDoc); err != nil {
		t.Fatal(err)
	}
	root := defaultsNode(reflect.ValueOf(defaults()).Elem(), codec.Schema(reflect.TypeFor[Config]()))
	var oldRoot *yaml.Node
	if len(oldDoc.Content) > 0 {
		oldRoot = oldDoc.Content[0]
	}
	var missing []string
	carryComments(root, oldRoot, "", &missing)
	doc := &yaml.Node{Kind: yaml.DocumentNode, HeadComment: oldDoc.HeadComment, Content: []*yaml.Node{root}}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		t.Fatal(err)
	}
	gen := spaceSections(buf.Bytes())
	if *update {
		if err := os.WriteFile(deployPath, gen, 0o644); err != nil {
			t.Fatal(err)
		}
	} else if !bytes.Equal(gen, old) {
		t.Errorf("deploy/olcd.yaml is stale: run go generate ./internal/rules (or go test ./internal/rules -run TestDeployConfigGenerated -update); want:\n%s", gen)
	}
	if len(missing) > 0 {
		t.Errorf("deploy/olcd.yaml: sections without a comment: %s", strings.Join(missing, ", "))
	}
	for _, want := range []string{"drop, mark or reject"} {
		if !bytes.Contains(gen, []byte(want)) {
			t.Errorf("deploy/olcd.yaml does not say %q", want)
		}
	}
}

// defaultsNode renders the struct v by schema s as a YAML mapping.
func defaultsNode(v reflect.Value, s *sy.Schema) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode}
	for _, k := range s.Keys {
		var val *yaml.Node
		if sub := s.Subs[k]; sub != nil {
			val = defaultsNode(v, sub)
		} else {
			f := s.Fields[k]
			if f.Sibling != nil && f.Tag.Get("has") != "" && !v.FieldByIndex(f.Sibling).Bool() {
				continue // no default: unset
			}
			if f.Sibling != nil && f.Tag.Get("auto") != "" && v.FieldByIndex(f.Sibling).Bool() {
				val = scalarNode("auto")
			} else {
				val = valueNode(v.FieldByIndex(f.Index))
			}
		}
		m.Content = append(m.Content, scalarNode(k), val)
	}
	return m
}

func scalarNode(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: s} }

// valueNode renders one default value as the config file writes it.
func valueNode(v reflect.Value) *yaml.Node {
	switch x := v.Interface().(type) {
	case Thresholds:
		m := &yaml.Node{Kind: yaml.MappingNode}
		for s, th := range x {
			if th > 0 {
				m.Content = append(m.Content, scalarNode(olc.Signal(s).String()),
					&yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle, Content: []*yaml.Node{scalarNode("threshold"), scalarNode(strconv.FormatFloat(th, 'g', -1, 64))}})
			}
		}
		return m
	case time.Duration:
		d := x.String() // "1m0s" is written 1m
		if strings.HasSuffix(d, "m0s") {
			d = strings.TrimSuffix(d, "0s")
		}
		return scalarNode(d)
	case adaptive.ResponseTarget:
		if x.Auto {
			return scalarNode("auto")
		}
		return scalarNode(time.Duration(x.Seconds * float64(time.Second)).String())
	case olc.PortKey:
		if x.Proto == olc.ProtoTCP {
			return scalarNode(strconv.Itoa(int(x.Port)))
		}
		return &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle, Content: []*yaml.Node{scalarNode("port"), scalarNode(strconv.Itoa(int(x.Port))), scalarNode("proto"), scalarNode(x.Proto.String())}}
	case encoding.TextMarshaler:
		b, _ := x.MarshalText()
		return scalarNode(string(b))
	case string:
		if x == "" {
			return &yaml.Node{Kind: yaml.ScalarNode, Style: yaml.DoubleQuotedStyle}
		}
		return scalarNode(x)
	case float64:
		return scalarNode(strconv.FormatFloat(x, 'g', -1, 64))
	}
	if v.Kind() == reflect.Slice {
		l := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for i := range v.Len() {
			l.Content = append(l.Content, valueNode(v.Index(i)))
		}
		return l
	}
	return scalarNode(fmt.Sprint(v.Interface()))
}

// carryComments copies the comments of old onto gen, key by key; missing
// collects the sections (mappings) that have none.
func carryComments(gen, old *yaml.Node, path string, missing *[]string) {
	for i := 0; i+1 < len(gen.Content); i += 2 {
		k, v := gen.Content[i], gen.Content[i+1]
		var ok, ov *yaml.Node
		if old != nil && old.Kind == yaml.MappingNode {
			for j := 0; j+1 < len(old.Content); j += 2 {
				if old.Content[j].Value == k.Value {
					ok, ov = old.Content[j], old.Content[j+1]
				}
			}
		}
		if ok != nil {
			k.HeadComment, k.LineComment, k.FootComment = ok.HeadComment, ok.LineComment, ok.FootComment
			v.LineComment = ov.LineComment
		}
		if v.Kind == yaml.MappingNode && v.Style != yaml.FlowStyle {
			carryComments(v, ov, sy.Join(path, k.Value), missing)
		}
		if path == "" && k.HeadComment == "" && k.LineComment == "" && v.LineComment == "" {
			*missing = append(*missing, k.Value)
		}
	}
}

// spaceSections puts a blank line before each top-level key's comment or,
// without one, before each top-level mapping, as the file was written.
func spaceSections(b []byte) []byte {
	lines := strings.SplitAfter(string(b), "\n")
	var out strings.Builder
	for i, l := range lines {
		top := l != "" && l[0] != ' ' && l[0] != '\n'
		if i > 0 && top && lines[i-1] != "\n" && !strings.HasPrefix(lines[i-1], "#") {
			out.WriteString("\n")
		}
		out.WriteString(l)
	}
	return []byte(out.String())
}
