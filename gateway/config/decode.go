package config

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/configfile"
	"github.com/sluicehq/sluice/internal/secret"
)

// Load reads and validates the file at path. A file that cannot be read,
// or is larger than MaxFileSize, is an *Error too (wrapping the cause).
func Load(path string) (*File, error) {
	data, err := configfile.ReadFile(path, MaxFileSize)
	if fe := (*configfile.FileError)(nil); errors.As(err, &fe) {
		if fe.TooLarge {
			return nil, &Error{File: path, Reason: configfile.TooLarge}
		}
		return nil, &Error{File: path, Reason: fe.Reason, Err: fe.Err}
	}
	return Parse(path, data)
}

// Parse reads and validates a configuration; name is used in messages.
// Every refusal is an *Error with the line and the reason.
func Parse(name string, data []byte) (*File, error) {
	f := &File{name: name}
	if err := f.decode(data); err != nil {
		return nil, err
	}
	f.defaults()
	if err := f.validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// decode reads data into f strictly: every field known to the schema and
// every value of its field's type, checked on the document first so that
// a refusal says what the file should hold, in its own terms.
func (f *File) decode(data []byte) error {
	f.root = new(yaml.Node)
	if err := yaml.Unmarshal(data, f.root); err != nil {
		return &Error{File: f.name, Line: configfile.YAMLLine(err), Reason: "not valid YAML: " + yamlReason(err)}
	}
	if len(f.root.Content) == 0 {
		return nil // empty: the defaults, then what validate says of them
	}
	top := f.root.Content[0]
	if top.Kind == yaml.ScalarNode && top.ShortTag() == "!!null" {
		return nil
	}
	if top.Kind != yaml.MappingNode {
		return f.errNode(top, "the file must be a mapping of fields (listen:, limits:, rules: …), not %s", describe(top))
	}
	w := walker{f: f, seen: map[visit]bool{}}
	if err := w.value(top, reflect.TypeFor[File](), "", ""); err != nil {
		return err
	}
	// What the walk checked, decoded; KnownFields is a second guard.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(f); err != nil && !errors.Is(err, io.EOF) {
		return &Error{File: f.name, Line: configfile.YAMLLine(err), Reason: yamlReason(err)}
	}
	return nil
}

// yamlReason is a yaml.v3 error without its "yaml:" and line prefixes
// (the line is the Error's).
func yamlReason(err error) string {
	msg := err.Error()
	if te := (*yaml.TypeError)(nil); errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if _, after, ok := strings.Cut(rest, ": "); ok {
			msg = after
		}
	}
	return msg
}

// walker checks a document against the schema's Go types, node by node.
type walker struct {
	f    *File
	seen map[visit]bool // each node is checked once per type, however many aliases name it
}

type visit struct {
	n *yaml.Node
	t reflect.Type
}

var (
	unmarshalerType     = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	durationType        = reflect.TypeFor[Duration]()
	failurePolicyType   = reflect.TypeFor[sluice.FailurePolicy]()
)

// value checks the node n against the type t. key is the field n is the
// value of; where says which limit or rule it is in ("" at the top).
func (w *walker) value(n *yaml.Node, t reflect.Type, key, where string) error {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 16; i++ {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil // absent: the field's default
	}
	if w.seen[visit{n, t}] {
		return nil
	}
	w.seen[visit{n, t}] = true
	if isLeaf(t) {
		return w.leaf(n, t, key, where)
	}
	switch t.Kind() {
	case reflect.Pointer:
		return w.value(n, t.Elem(), key, where)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return w.f.errNode(n, "%s%s: a list is expected, not %s", where, key, describe(n))
		}
		for _, e := range n.Content {
			if err := w.value(e, t.Elem(), key, element(key, e, where)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Struct:
		return w.mapping(n, t, key, where)
	}
	return w.f.errNode(n, "%s%s: not a field the file can set", where, key)
}

// element is where an element of the list under key is: a limit or a rule
// by its name.
func element(key string, e *yaml.Node, where string) string {
	what := map[string]string{"limits": "limit", "rules": "rule"}[key]
	if what == "" || e.Kind != yaml.MappingNode {
		return where
	}
	for i := 0; i+1 < len(e.Content); i += 2 {
		if e.Content[i].Value == "name" && e.Content[i+1].Kind == yaml.ScalarNode && e.Content[i+1].Value != "" {
			return fmt.Sprintf("%s %q: ", what, short(e.Content[i+1].Value))
		}
	}
	return where
}

// mapping checks a mapping against the fields of the struct type t.
func (w *walker) mapping(n *yaml.Node, t reflect.Type, key, where string) error {
	if n.Kind != yaml.MappingNode {
		return w.f.errNode(n, "%s%s: a mapping is expected (field: value lines, or {field: value}), not %s", where, key, describe(n))
	}
	fields, names := schema(t)
	set := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.ShortTag() == "!!merge" { // <<: *anchor, or a list of them
			for v.Kind == yaml.AliasNode && v.Alias != nil {
				v = v.Alias
			}
			merged := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				merged = v.Content
			}
			for _, m := range merged {
				if err := w.value(m, t, key, where); err != nil {
					return err
				}
			}
			continue
		}
		if first, twice := set[k.Value]; twice {
			return w.f.errNode(k, "%s%q is set twice (first at line %d)", where, short(k.Value), first)
		}
		set[k.Value] = k.Line
		ft, ok := fields[k.Value]
		if !ok {
			return w.f.errNode(k, "%s", unknownField(k.Value, t, names))
		}
		if err := w.value(v, ft, k.Value, where); err != nil {
			return err
		}
	}
	return nil
}

// unknownField says that name is not a field of t, with the closest known
// one (at most two edits away, or one that it begins, but for its last
// byte) or, failing one, every field there is.
func unknownField(name string, t reflect.Type, names []string) string {
	if s, ok := inlineSecrets[name]; ok {
		if slices.Contains(names, s[0]) {
			return secret.Inline(name, s[0], s[1]).Error()
		}
	}
	if t == reflect.TypeFor[File]() && (name == "domain" || name == "descriptors") {
		return fmt.Sprintf("unknown field %q: this looks like a decision-service configuration (sluice serve --config), in envoyproxy/ratelimit's format; the gateway's file has listen, upstream, store, limits and rules", name)
	}
	best, bestD := "", 3
	for _, known := range names {
		if d := distance(strings.ToLower(name), known); d < bestD {
			best, bestD = known, d
		}
	}
	for _, known := range names {
		if best == "" && len(name) >= 4 && commonPrefix(strings.ToLower(name), known) >= len(name)-1 {
			best = known // a plural's singular, a name cut short
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown field %q (did you mean %q?)", short(name), best)
	}
	return fmt.Sprintf("unknown field %q (the fields here: %s)", short(name), strings.Join(names, ", "))
}

// inlineSecrets are the fields a secret would be written in, and the two
// that take it instead: refused with the reason, never with the value.
var inlineSecrets = map[string][2]string{
	"password": {"password_file", "password_env"},
	"token":    {"token_file", "token_env"},
	"key_hmac": {"key_hmac_file", "key_hmac_env"},
	"secret":   {"token_file", "token_env"},
}

// commonPrefix is the length of the prefix a and b share.
func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// distance is the Levenshtein distance between a and b (insertions,
// deletions and substitutions of bytes).
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// schema lists the YAML fields of a struct type, in their order, those
// of an inlined struct (yaml:",inline") in its place.
func schema(t reflect.Type) (map[string]reflect.Type, []string) {
	fields := map[string]reflect.Type{}
	var names []string
	for sf := range t.Fields() {
		name, opts, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if opts == "inline" && sf.Type.Kind() == reflect.Struct {
			inner, innerNames := schema(sf.Type)
			for _, n := range innerNames {
				fields[n] = inner[n]
			}
			names = append(names, innerNames...)
			continue
		}
		if !sf.IsExported() || name == "" || name == "-" {
			continue
		}
		fields[name] = sf.Type
		names = append(names, name)
	}
	return fields, names
}

// isLeaf reports whether t is decoded from one scalar.
func isLeaf(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	if p.Implements(unmarshalerType) || p.Implements(textUnmarshalerType) {
		return true
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Float64:
		return true
	}
	return false
}

// leaf checks a scalar by decoding it as the field will be, and says what
// the field takes when it cannot be.
func (w *walker) leaf(n *yaml.Node, t reflect.Type, key, where string) error {
	if n.Kind != yaml.ScalarNode {
		return w.f.errNode(n, "%s%s: %s is expected, not %s", where, key, expected(t, key), describe(n))
	}
	err := n.Decode(reflect.New(t).Interface())
	if err == nil && (t.Kind() == reflect.Int || t.Kind() == reflect.Int64) && n.ShortTag() == "!!float" {
		if v, ferr := strconv.ParseFloat(n.Value, 64); ferr != nil || v != math.Trunc(v) {
			err = errors.New("a fraction") // which yaml.v3 would truncate
		}
	}
	if err == nil {
		return nil
	}
	switch t {
	case durationType:
		return w.f.errNode(n, "%s%s %q: not a duration; %s", where, key, short(n.Value), configfile.DurationHint(n.Value))
	case failurePolicyType:
		return w.f.errNode(n, "%s%s %q: %s", where, key, short(n.Value), expected(t, key))
	}
	if reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return w.f.errNode(n, "%s%s %q: %v", where, key, short(n.Value), err)
	}
	_, ierr := strconv.ParseInt(n.Value, 0, 64)
	_, ferr := strconv.ParseFloat(n.Value, 64)
	if errors.Is(ferr, strconv.ErrRange) || errors.Is(ierr, strconv.ErrRange) && t.Kind() != reflect.Float64 {
		return w.f.errNode(n, "%s%s %q: out of range", where, key, short(n.Value))
	}
	return w.f.errNode(n, "%s%s %q: %s is expected", where, key, short(n.Value), expected(t, key))
}

// expected says in words what a field of type t takes.
func expected(t reflect.Type, key string) string {
	switch {
	case t == durationType:
		return "a duration such as 50ms, 1s, 1m30s or 2h"
	case t == failurePolicyType && key == "on_error":
		return onErrorValues
	case t == failurePolicyType:
		return onFailureValues
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.Float64:
		return "a number"
	}
	return "text"
}

// describe names a node's kind for a message.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return strconv.Quote(short(n.Value))
}

// short is s, cut to 64 bytes (at a character's boundary) and "…": a
// message quotes the file, it does not copy it.
func short(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
