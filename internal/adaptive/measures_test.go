package adaptive

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestCodeMeasures holds the package to what a newcomer reads in one
// sitting (issue 24's measures): at most 1,500 lines of non-test Go,
// Controller at most 15 fields, no function over 80 lines, at most 15
// private constants, and docs/controller.md at most 12,000 characters.
func TestCodeMeasures(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	lines, consts := 0, 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		lines += strings.Count(string(src), "\n")
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if n := fset.Position(d.End()).Line - fset.Position(d.Pos()).Line + 1; n > 80 {
					t.Errorf("%s: %s is %d lines, want ≤ 80", name, d.Name.Name, n)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.ValueSpec:
						for _, id := range s.Names {
							if r, _ := utf8.DecodeRuneInString(id.Name); d.Tok == token.CONST && !unicode.IsUpper(r) {
								consts++
							}
						}
					case *ast.TypeSpec:
						if st, ok := s.Type.(*ast.StructType); ok && s.Name.Name == "Controller" {
							if n := st.Fields.NumFields(); n > 15 {
								t.Errorf("Controller has %d fields, want ≤ 15", n)
							}
						}
					}
				}
			}
		}
	}
	if lines > 1500 {
		t.Errorf("%d lines of non-test Go, want ≤ 1,500", lines)
	}
	if consts > 15 {
		t.Errorf("%d private constants, want ≤ 15", consts)
	}
	doc, err := os.ReadFile("../../docs/controller.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := utf8.RuneCount(doc); n > 12000 {
		t.Errorf("docs/controller.md is %d characters, want ≤ 12,000", n)
	}
	t.Logf("%d lines, %d private constants, docs/controller.md %d characters", lines, consts, utf8.RuneCount(doc))
}
