// Package strictyaml decodes one YAML document strictly onto tagged Go
// structs and reports every problem at once, each with file:line, the
// field's dotted path and a hint: an unknown key with the closest known one,
// a value of the wrong kind, a number outside its `range` tag (package
// ranges), a quoted number, a percent where a fraction belongs. It owns the
// mechanism only: the node tree with each node's file (aliases and merge
// keys expanded, under a bound on what aliases expand to), merge patches,
// the schema read from struct tags, and the scalar kinds; the keys, the
// types with a shape of their own and every cross-field check are the
// caller's (internal/rules).
package strictyaml

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a config document.
type Problem struct {
	// File is the document's source (a path, or a name such as "patch").
	File string
	// Line is the 1-based line of the offending node; 0 when unknown.
	Line int
	// Field is the dotted field path, e.g. "signals.cpu_busy.threshold" or
	// "ports[2].port"; "" for the document as a whole.
	Field string
	// Msg says what is wrong, in lowercase words.
	Msg string
	// Hint suggests a fix, e.g. `looks like percent; did you mean 0.8?`.
	Hint string
}

// String renders "file:line: field: msg (hint)".
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	if p.Hint != "" {
		fmt.Fprintf(&b, " (%s)", p.Hint)
	}
	return b.String()
}

// ValidationError lists every problem of a document, in document order.
type ValidationError struct {
	// Problems holds at least one problem, sorted by file and line.
	Problems []Problem
}

// Error renders the problems one per line, the first preceded by their count.
func (e *ValidationError) Error() string {
	lines := e.ProblemLines()
	if len(lines) == 1 {
		return "invalid config: " + lines[0]
	}
	return fmt.Sprintf("invalid config, %d problems:\n  %s", len(lines), strings.Join(lines, "\n  "))
}

// ProblemLines returns one "file:line: field: msg (hint)" line per problem
// (the admin API sends them as a list).
func (e *ValidationError) ProblemLines() []string {
	out := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p.String()
	}
	return out
}
