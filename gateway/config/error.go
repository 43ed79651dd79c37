package config

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/configfile"
)

// Error is a refused configuration: the file, the line and the reason.
// Every error of Load and Parse is one, and so is every error ErrorAt
// makes; it reads "FILE:LINE: REASON", as the decision service's
// (rls/envoyconfig.Error) do: it is the same type.
type Error = configfile.Error

// ErrorAt is err as an *Error at a field of the file: field is a dotted
// path as the documentation writes it ("admin.token_file",
// "store.redis.key_hmac_file"), with a list element as its index
// ("rules.0.quotas.1"). The line is the field's, or its closest parent's
// when the file leaves the field to its default. The gateway reports what
// it finds when it acts on a field (a secret file too short, an address
// already in use) with it. err may not be nil.
func (f *File) ErrorAt(field string, err error) error {
	var path []any
	for p := range strings.SplitSeq(field, ".") {
		if i, err := strconv.Atoi(p); err == nil {
			path = append(path, i)
		} else if p != "" {
			path = append(path, p)
		}
	}
	return &Error{File: f.name, Line: f.line(path), Reason: err.Error(), Err: err}
}

// errAt is an error about the node at path (mapping keys and sequence
// indexes from the document's root), with its line. The file's text among
// args (strings) is shortened: a message quotes the file, it does not
// copy it.
func (f *File) errAt(path []any, format string, args ...any) error {
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = short(s)
		}
	}
	return &Error{File: f.name, Line: f.line(path), Reason: fmt.Sprintf(format, args...)}
}

// errNode is an error about a node of the document.
func (f *File) errNode(n *yaml.Node, format string, args ...any) error {
	return &Error{File: f.name, Line: n.Line, Reason: fmt.Sprintf(format, args...)}
}

// line finds the line of the node at path, or of the deepest node of it
// that exists (a missing field is reported where its parent is).
func (f *File) line(path []any) int {
	n, _ := f.node(path)
	if n == nil {
		return 0
	}
	return n.Line
}

// node is the node at path, and true; or the deepest node of it that
// exists, and false (nil when the document is empty).
func (f *File) node(path []any) (*yaml.Node, bool) {
	n := f.root
	if n == nil {
		return nil, false
	}
	// A document with nothing in it ("---") holds an implicit null that
	// yaml.v3 places on the line after it: the document's line is the one.
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 && !isImplicitNull(n.Content[0]) {
		n = n.Content[0]
	}
	for _, p := range path {
		var next *yaml.Node
		switch k := p.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == k {
						next = n.Content[i+1]
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && k < len(n.Content) {
				next = n.Content[k]
			}
		}
		if next == nil {
			return n, false
		}
		n = next
	}
	return n, true
}

// isImplicitNull reports whether n is the null of a document that says
// nothing ("---", "---\n...").
func isImplicitNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null" && n.Value == ""
}
