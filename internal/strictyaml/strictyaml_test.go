package strictyaml

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

type inner struct {
	Port  uint16 `yaml:"port" range:"[1, 65535]" noun:"port"`
	Label string `yaml:"label" enum:"a,b"`
	Gate  bool   `yaml:"gate"`
}

type doc struct {
	inner    `yaml:",inline"`
	Wait     time.Duration `yaml:"wait"`
	Share    float64       `yaml:"share" has:"HasShare"`
	Beat     int           `yaml:"heart.beat" range:"[0, 5]"`
	HasSet   bool          `yaml:"-"`
	HasShare bool          `yaml:"-"`
	List     []int         `yaml:"list" range:"[0, 9]"`
}

var testCodec = NewCodec(map[reflect.Type]DecodeFunc{
	reflect.TypeFor[time.Duration](): Scalar(func(d *Decoder, n *Node, f string, _ reflect.StructField) (time.Duration, bool) {
		return d.Duration(n, f)
	}),
}, map[string]string{"yes": "a"})

// decode parses and decodes src onto a doc, returning it and the problems
// rendered one per line.
func decode(t *testing.T, src string) (doc, string) {
	t.Helper()
	var v doc
	root, probs := Parse([]byte(src), "t.yaml", "port:, …")
	if root != nil {
		d := testCodec.NewDecoder("default")
		d.Struct(root, reflect.ValueOf(&v).Elem(), "")
		probs = append(probs, d.Problems...)
	}
	return v, strings.Join((&ValidationError{Problems: probs}).ProblemLines(), "\n")
}

// TestDecode: the schema from the tags (inline, dotted, has, range,
// noun, enum) and every problem at once, each at its line.
func TestDecode(t *testing.T) {
	tests := []struct{ src, want string }{
		{"port: 80\nwait: 2s\nshare: 0.5\nheart: {beat: 2}\nlist: [1, 2]\n", ""},
		{"port: 70000\nlabel: yes\nwiat: 1s\nlist: [1, 10]\n", "t.yaml:1: port: port 70000 is out of range: must be 1..65535\n" +
			"t.yaml:2: label: unknown value \"yes\" (did you mean \"a\"? want a or b)\nt.yaml:3: wiat: unknown key (did you mean \"wait\"?)\n" +
			"t.yaml:4: list[1]: 10 is out of range: must be 0..9"},
		{"xyz: 1\n", "t.yaml:1: xyz: unknown key (known keys: port, label, gate, wait, share, heart, list)"},
		{"wait: 5\nshare: \"0.5\"\n", "t.yaml:1: wait: duration 5 has no unit (write e.g. 5ms or 5s)\n" +
			"t.yaml:2: share: must be a number, got the string \"0.5\" (remove the quotes: write 0.5)"},
		{"[1]\n", "t.yaml:1: the document must be a mapping of keys (port:, …), got a list"},
		{"a: &a [*a]\n", "t.yaml:1: alias *a refers to a node that contains it (an anchor cannot include itself)"},
		{"port: 1\n---\nport: 2\n", "t.yaml:2: more than one YAML document: a config file holds exactly one (remove the '---' separator and merge the documents)"},
		{"port: 1\n\tlabel: a\n", "t.yaml:2: yaml syntax: found a tab character that violates indentation (the line is indented with a tab: YAML indents with spaces only)"},
		{"b: &b {port: 8}\n<<: *b\nport: 9\n", "t.yaml:1: b: unknown key (known keys: port, label, gate, wait, share, heart, list)"},
	}
	for _, tt := range tests {
		if _, got := decode(t, tt.src); got != tt.want {
			t.Errorf("%q:\n got %s\nwant %s", tt.src, got, tt.want)
		}
	}
	v, _ := decode(t, "port: 80\nwait: 2s\nshare: 0.5\nheart: {beat: 2}\nlist: [1, 2]\n")
	if v.Port != 80 || v.Wait != 2*time.Second || v.Share != 0.5 || !v.HasShare || v.Beat != 2 || !reflect.DeepEqual(v.List, []int{1, 2}) {
		t.Errorf("decoded %+v", v)
	}
	if v, _ := decode(t, "b: &b {port: 8}\n<<: *b\nport: 9\n"); v.Port != 9 {
		t.Errorf("a key written beside a merge key wins: port %d", v.Port)
	}
}

// TestMerge: a merge patch merges mappings key by key, anything else
// replaces, and a null puts back the layer beneath (the file's value) or
// deletes where that has none, for mappings, lists and scalars alike; each
// node keeps its file.
func TestMerge(t *testing.T) {
	parse := func(src, file string) *Node {
		n, probs := Parse([]byte(src), file, "")
		if len(probs) > 0 {
			t.Fatalf("%s: %v", src, probs)
		}
		return n
	}
	render := func(n *Node) string {
		var b strings.Builder
		var walk func(n *Node, path string)
		walk = func(n *Node, path string) {
			if n.Keys == nil {
				b.WriteString(path + "=" + n.Value + "@" + n.File + " ")
				for _, v := range n.Vals {
					walk(v, path+"[]")
				}
				return
			}
			for i, k := range n.Keys {
				walk(n.Vals[i], Join(path, k.Value))
			}
		}
		walk(n, "")
		return b.String()
	}
	const file = "a: {x: 1, y: 2}\nl: [1, 2]\nk: v\n"
	for _, tt := range []struct {
		name, base, patch string
		under             bool // the file beneath the patches
		want              string
	}{
		{"merge and replace", file, "a: {y: 3}\nl: [3]\nk: w\n", true, "a.x=1@base a.y=3@patch l=@patch l[]=3@patch k=w@patch "},
		{"null scalar: the file's", "a: {x: 1, y: 9}\nl: [1, 2]\nk: v\n", "a: {y: null}\n", true, "a.x=1@base a.y=2@file l=@base l[]=1@base l[]=2@base k=v@base "},
		{"null list: the file's", "a: {x: 1, y: 2}\nl: [7]\nk: v\n", "l: null\n", true, "a.x=1@base a.y=2@base l=@file l[]=1@file l[]=2@file k=v@base "},
		{"null mapping: the file's", "a: {x: 5}\nl: [1, 2]\nk: v\n", "a: ~\n", true, "a.x=1@file a.y=2@file l=@base l[]=1@base l[]=2@base k=v@base "},
		{"null where the file has none: deleted", file + "n: {m: 1}\n", "n: {m: null}\nz: null\n", true, "a.x=1@base a.y=2@base l=@base l[]=1@base l[]=2@base k=v@base "},
		{"null in a new subtree: nothing", file, "n: {m: null, o: 1}\n", true, "a.x=1@base a.y=2@base l=@base l[]=1@base l[]=2@base k=v@base n.o=1@patch "},
		{"no layer beneath: deleted", file, "a: {y: null}\nl: null\nk: null\n", false, "a.x=1@base "},
	} {
		var under *Node
		if tt.under {
			under = parse(file, "file")
		}
		if got := render(Merge(parse(tt.base, "base"), parse(tt.patch, "patch"), under)); got != tt.want {
			t.Errorf("%s: merged %s, want %s", tt.name, got, tt.want)
		}
	}
}

// TestDropNulls: a key without a value is as if left out, in mappings at
// any depth and in list entries; a null entry of a list stays.
func TestDropNulls(t *testing.T) {
	n, _ := Parse([]byte("a:\nb: {c: ~, d: 1}\nl: [{p: 1, q: null}, null]\n"), "f", "")
	out, nulls := DropNulls(n, "")
	var fields []string
	for _, x := range nulls {
		fields = append(fields, fmt.Sprintf("%s@%d", x.Field, x.Key.Line))
	}
	if got := strings.Join(fields, " "); got != "a@1 b.c@2 l[0].q@3" {
		t.Errorf("nulls %s", got)
	}
	if out.Get("a") != nil || out.Get("b").Get("c") != nil || out.Get("b").Get("d") == nil || len(out.Get("l").Vals) != 2 || out.Get("l").Vals[0].Get("q") != nil {
		t.Errorf("DropNulls kept a null key, or dropped more")
	}
}
