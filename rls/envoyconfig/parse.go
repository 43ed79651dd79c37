package envoyconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/configfile"
)

const (
	// MaxFileSize is the largest file Parse, LoadFiles and LoadDir read,
	// in bytes.
	MaxFileSize = configfile.MaxFileSize
	// MaxDepth is the deepest nesting of descriptors, in levels (a request's
	// descriptor has about as many entries).
	MaxDepth = 32

	maxNodes = 1 << 20 // YAML nodes visited, aliases expanded
	maxMerge = 8       // merge keys (<<) within merged mappings
)

// tooLarge is the reason a file beyond MaxFileSize is refused.
const tooLarge = configfile.TooLarge

// A mapping's keys: which a mapping of each kind may hold.
type schema struct {
	what string
	keys []string
}

var (
	topSchema      = &schema{"the top level", []string{"domain", "descriptors"}}
	descSchema     = &schema{"a descriptor", []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric", "value_to_metric", "share_threshold"}}
	rateSchema     = &schema{"rate_limit", []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "burst", "window", "on_failure"}}
	replacesSchema = &schema{"a replaces entry", []string{"name"}}
	schemas        = []*schema{topSchema, descSchema, rateSchema, replacesSchema}
)

// unsupported are keys of envoyproxy/ratelimit's format that sluice
// refuses, with why.
var unsupported = map[string]string{
	"quota_mode": "envoyproxy/ratelimit's quota mode (over-quota requests allowed and reported in metadata) is not supported by sluice",
	"metadata":   "envoyproxy/ratelimit's descriptor metadata (returned to the client for quota-based routing) is not supported by sluice",
}

// gatewayKeys are the top-level keys of sluice gateway's configuration
// (package config), which a file given to sluice serve may be by mistake.
var gatewayKeys = []string{"listen", "upstream", "admin", "server", "store", "headers", "client_ip", "request", "limits", "rules"}

// hint explains a key that is not in its mapping's schema.
func hint(key string, in *schema) string {
	if why, ok := unsupported[key]; ok {
		return fmt.Sprintf("config error, key '%s': %s", key, why)
	}
	if in == topSchema && contains(gatewayKeys, key) {
		return fmt.Sprintf("config error, unknown key '%s' in the top level: this looks like a gateway configuration (sluice gateway --config); sluice serve reads envoyproxy/ratelimit's files (domain, descriptors)", key)
	}
	for _, s := range schemas {
		if s != in && contains(s.keys, key) {
			return fmt.Sprintf("config error, unknown key '%s' in %s (it is a key of %s; envoy's ratelimit would ignore it here)", key, in.what, s.what)
		}
	}
	if key == "unit_multiplier" {
		return fmt.Sprintf("config error, unknown key '%s' in %s (not envoyproxy/ratelimit's; sluice's window extension, such as window: 5m, sets a longer window)", key, in.what)
	}
	return fmt.Sprintf("config error, unknown key '%s' in %s (want one of %s)", key, in.what, strings.Join(in.keys, ", "))
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// Parse reads one configuration file — one domain — in envoyproxy/ratelimit's
// format; name (a path, usually) is what errors and the Domain are labelled
// with. Every refusal is an *Error naming the file, the line and the reason.
func Parse(name string, data []byte) (*Domain, error) {
	p := &parser{file: name}
	if len(data) > MaxFileSize {
		return nil, &Error{File: name, Reason: tooLarge}
	}
	doc, extra, err := decode(data)
	if err != nil {
		return nil, &Error{File: name, Line: configfile.YAMLLine(err), Reason: "error loading config file: " + err.Error()}
	}
	if extra != nil {
		return nil, p.errAt(extra.Content[0], "a second YAML document: envoy's ratelimit reads only the first, sluice refuses the rest")
	}
	d := &Domain{File: name, line: 1, root: &node{children: map[string]*node{}}}
	if doc == nil || len(doc.Content) == 0 {
		return nil, p.errAt(nil, "config file cannot have empty domain")
	}
	top, err := p.resolve(doc.Content[0])
	if err != nil {
		return nil, err
	}
	var descs *yaml.Node
	switch {
	case top.Kind == yaml.ScalarNode && top.ShortTag() == "!!null":
	case top.Kind != yaml.MappingNode:
		return nil, p.errAt(top, "error loading config file: the file must be a mapping of domain and descriptors, not %s", describe(top))
	default:
		fs, err := p.fields(top, topSchema, 0)
		if err != nil {
			return nil, err
		}
		for _, f := range fs {
			switch f.name {
			case "domain":
				if d.Name, err = p.str(f); err != nil {
					return nil, err
				}
				d.line = f.val.Line
			case "descriptors":
				descs = f.val
			}
		}
	}
	if d.Name == "" {
		return nil, &Error{File: name, Line: d.line, Reason: "config file cannot have empty domain"}
	}
	if descs != nil {
		if err := p.descriptors(d, d.root, d.Name+".", descs, 1); err != nil {
			return nil, err
		}
	}
	d.Extensions = p.ext
	return d, nil
}

// decode reads the first YAML document of data, and reports a second one
// that is not empty.
func decode(data []byte) (doc, extra *yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil { // yaml.v3 turns its own failures into errors; this is a guard
			doc, extra, err = nil, nil, fmt.Errorf("yaml: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var first yaml.Node
	if err := dec.Decode(&first); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	var second yaml.Node
	switch err := dec.Decode(&second); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, nil, err
	default:
		if len(second.Content) > 0 && !(second.Content[0].Kind == yaml.ScalarNode && second.Content[0].ShortTag() == "!!null") {
			extra = &second
		}
	}
	return &first, extra, nil
}

type parser struct {
	file   string
	visits int
	ext    bool // a sluice extension was used
}

func (p *parser) errAt(n *yaml.Node, format string, args ...any) error {
	line := 1
	if n != nil && n.Line > 0 {
		line = n.Line
	}
	return &Error{File: p.file, Line: line, Reason: fmt.Sprintf(format, args...)}
}

// resolve follows an alias to its anchored node, counting the nodes
// visited so that aliases cannot make the walk exponential.
func (p *parser) resolve(n *yaml.Node) (*yaml.Node, error) {
	p.visits++
	if p.visits > maxNodes {
		return nil, p.errAt(n, "more than %d YAML nodes once aliases are expanded", maxNodes)
	}
	for i := 0; n.Kind == yaml.AliasNode; i++ {
		if n.Alias == nil || i > 8 {
			return nil, p.errAt(n, "error loading config file: alias *%s names nothing", n.Value)
		}
		n = n.Alias
	}
	return n, nil
}

// describe names a node's YAML type for an error.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q (%s)", trunc(n.Value), strings.TrimPrefix(n.ShortTag(), "!!"))
	}
	return "nothing"
}

func trunc(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// field is one key of a mapping and its value.
type field struct {
	name     string
	key, val *yaml.Node
}

// fields returns the keys and values of mapping m in order, refusing a key
// that is not a string (as envoy's ratelimit does), not in sc, or repeated;
// merge keys (<<) add the merged mappings' keys that m does not set.
func (p *parser) fields(m *yaml.Node, sc *schema, depth int) ([]field, error) {
	var out []field
	var merges []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, err := p.resolve(m.Content[i])
		if err != nil {
			return nil, err
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, m.Content[i+1])
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			v := k.Value
			if k.Kind != yaml.ScalarNode {
				v = describe(k)
			}
			return nil, p.errAt(k, "config error, key is not of type string: %s", trunc(v))
		}
		if !contains(sc.keys, k.Value) {
			return nil, p.errAt(k, "%s", hint(k.Value, sc))
		}
		for _, f := range out {
			if f.name == k.Value {
				return nil, p.errAt(k, "config error, key '%s' is set twice in %s (first at line %d)", k.Value, sc.what, f.key.Line)
			}
		}
		out = append(out, field{name: k.Value, key: k, val: m.Content[i+1]})
	}
	for _, mv := range merges {
		if depth >= maxMerge {
			return nil, p.errAt(mv, "merge keys (<<) nested more than %d deep", maxMerge)
		}
		v, err := p.resolve(mv)
		if err != nil {
			return nil, err
		}
		srcs := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			srcs = v.Content
		}
		for _, s := range srcs {
			if s, err = p.resolve(s); err != nil {
				return nil, err
			}
			if s.Kind != yaml.MappingNode {
				return nil, p.errAt(s, "a merge key (<<) must name a mapping or a list of mappings, not %s", describe(s))
			}
			sub, err := p.fields(s, sc, depth+1)
			if err != nil {
				return nil, err
			}
			for _, f := range sub {
				if !hasField(out, f.name) {
					out = append(out, f)
				}
			}
		}
	}
	return out, nil
}

func hasField(fs []field, name string) bool {
	for _, f := range fs {
		if f.name == name {
			return true
		}
	}
	return false
}

// scalar resolves a field's value and requires a scalar.
func (p *parser) scalar(f field, want string) (*yaml.Node, error) {
	v, err := p.resolve(f.val)
	if err != nil {
		return nil, err
	}
	if v.Kind != yaml.ScalarNode {
		return nil, p.errAt(v, "%s must be %s, not %s", f.name, want, describe(v))
	}
	return v, nil
}

// str reads a string as envoy's ratelimit (yaml.v2) does: any scalar's
// text, null as "" — but a float or an integer beyond 64 bits, which its key
// validation refuses ("error checking config").
func (p *parser) str(f field) (string, error) {
	v, err := p.scalar(f, "a string")
	if err != nil {
		return "", err
	}
	switch v.ShortTag() {
	case "!!null":
		return "", nil
	case "!!str", "!!bool", "!!timestamp":
		return v.Value, nil
	case "!!int":
		if _, ok := parseInt(v.Value); ok {
			return v.Value, nil
		}
		return "", p.errAt(v, "error checking config: %s %s is an integer beyond 64 bits; quote it to make it a string", f.name, trunc(v.Value))
	case "!!float":
		return "", p.errAt(v, "error checking config: %s %s is a float, which envoy's ratelimit refuses; quote it to make it a string", f.name, trunc(v.Value))
	}
	return "", p.errAt(v, "%s must be a string, not %s", f.name, describe(v))
}

// parseInt reads a YAML integer as yaml.v2 does (underscores ignored,
// 0x/0o/0b and leading-0 octal prefixes), within 64 bits.
func parseInt(s string) (uint64, bool) {
	s = strings.ReplaceAll(s, "_", "")
	if n, err := strconv.ParseInt(s, 0, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return uint64(n), true
	}
	n, err := strconv.ParseUint(s, 0, 64)
	return n, err == nil
}

var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true, "true": true, "True": true, "TRUE": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false, "false": false, "False": false, "FALSE": false,
}

// boolean reads a bool as yaml.v2 does: YAML 1.1's true/yes/on/y and
// false/no/off/n, unquoted; null as false.
func (p *parser) boolean(f field) (bool, error) {
	v, err := p.scalar(f, "true or false")
	if err != nil {
		return false, err
	}
	tagged := v.Style&yaml.TaggedStyle != 0
	quoted := v.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0
	if !tagged && v.ShortTag() == "!!null" {
		return false, nil
	}
	b, ok := yaml11Bools[v.Value]
	if !ok || tagged && v.ShortTag() != "!!bool" || !tagged && quoted {
		return false, p.errAt(v, "%s must be true or false, not %s", f.name, describe(v))
	}
	return b, nil
}

// count reads requests_per_unit: an unquoted integer from 0 to 2^32-1;
// null as 0.
func (p *parser) count(f field) (uint32, error) {
	v, err := p.scalar(f, "a whole number")
	if err != nil {
		return 0, err
	}
	switch v.ShortTag() {
	case "!!null":
		return 0, nil
	case "!!int":
		if n, ok := parseInt(v.Value); ok && n <= math.MaxUint32 {
			return uint32(n), nil
		}
	}
	return 0, p.errAt(v, "%s must be a whole number from 0 to 4294967295, not %s", f.name, describe(v))
}

// number reads sluice's burst: a number; null as 0.
func (p *parser) number(f field) (float64, error) {
	v, err := p.scalar(f, "a number")
	if err != nil {
		return 0, err
	}
	var x float64
	switch v.ShortTag() {
	case "!!null":
		return 0, nil
	case "!!int", "!!float":
		if err := v.Decode(&x); err == nil {
			return x, nil
		}
	}
	return 0, p.errAt(v, "%s must be a number, not %s", f.name, describe(v))
}

// descriptors loads a list of descriptors under parent, whose full key is
// prefix minus its trailing ".", as envoy's loadDescriptors does.
func (p *parser) descriptors(d *Domain, parent *node, prefix string, list *yaml.Node, depth int) error {
	list, err := p.resolve(list)
	if err != nil {
		return err
	}
	switch {
	case list.Kind == yaml.ScalarNode && list.ShortTag() == "!!null":
		return nil
	case list.Kind != yaml.SequenceNode:
		return p.errAt(list, "descriptors must be a list of descriptors, not %s", describe(list))
	case depth > MaxDepth:
		return p.errAt(list, "descriptors nested more than %d levels deep, the deepest sluice reads", MaxDepth)
	}
	for _, item := range list.Content {
		it, err := p.resolve(item)
		if err != nil {
			return err
		}
		if it.Kind != yaml.MappingNode {
			v := it.Value
			if it.Kind != yaml.ScalarNode {
				v = describe(it)
			}
			return p.errAt(it, "config error, yaml file contains list of type other than map: %s", trunc(v))
		}
		fs, err := p.fields(it, descSchema, 0)
		if err != nil {
			return err
		}
		var key, value string
		var rateLimit, children *yaml.Node
		var shadow, detailed, toMetric, share bool
		for _, f := range fs {
			switch f.name {
			case "key":
				key, err = p.str(f)
			case "value":
				value, err = p.str(f)
			case "rate_limit":
				rateLimit = f.val
			case "descriptors":
				children = f.val
			case "shadow_mode":
				shadow, err = p.boolean(f)
			case "detailed_metric":
				detailed, err = p.boolean(f)
			case "value_to_metric":
				toMetric, err = p.boolean(f)
			case "share_threshold":
				share, err = p.boolean(f)
			}
			if err != nil {
				return err
			}
		}
		if key == "" {
			return p.errAt(it, "descriptor has empty key")
		}
		finalKey := key
		if value != "" {
			finalKey += "_" + value
		}
		fullKey := prefix + finalKey
		if _, dup := parent.children[finalKey]; dup {
			return p.errAt(it, "duplicate descriptor composite key '%s'", fullKey)
		}
		n := &node{children: map[string]*node{}, valueToMetric: toMetric, share: share}
		if rateLimit != nil {
			if n.rule, err = p.rateLimit(rateLimit, fullKey, shadow, detailed); err != nil {
				return err
			}
			if n.rule != nil {
				d.rules = append(d.rules, n.rule)
			}
		}
		wildcard := strings.HasSuffix(finalKey, "*")
		if share {
			if !wildcard {
				return p.errAt(it, "share_threshold can only be used with wildcard values (ending with '*'), but found key '%s'", finalKey)
			}
			n.pattern = finalKey
		}
		parent.children[finalKey] = n
		if wildcard {
			parent.wildcards = append(parent.wildcards, finalKey)
		}
		if children != nil {
			if err := p.descriptors(d, n, fullKey+".", children, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// rateLimit reads a rate_limit block: its rule, or nil for a null block
// (which envoy's ratelimit reads as no block).
func (p *parser) rateLimit(block *yaml.Node, fullKey string, shadow, detailed bool) (*Rule, error) {
	m, err := p.resolve(block)
	if err != nil {
		return nil, err
	}
	if m.Kind == yaml.ScalarNode && m.ShortTag() == "!!null" {
		return nil, nil
	}
	if m.Kind != yaml.MappingNode {
		return nil, p.errAt(m, "rate_limit must be a mapping, not %s", describe(m))
	}
	fs, err := p.fields(m, rateSchema, 0)
	if err != nil {
		return nil, err
	}
	r := &Rule{FullKey: fullKey, ShadowMode: shadow, DetailedMetric: detailed, Algorithm: sluice.FixedWindow}
	var unit, window string
	var unitNode, windowNode *yaml.Node
	var replaces []field
	var ext []string
	for _, f := range fs {
		switch f.name {
		case "unit":
			unit, err = p.str(f)
			unitNode = f.val
		case "requests_per_unit":
			r.RequestsPerUnit, err = p.count(f)
		case "unlimited":
			r.Unlimited, err = p.boolean(f)
		case "name":
			r.Name, err = p.str(f)
		case "replaces":
			replaces, err = p.replaces(f)
		case "algorithm":
			var s string
			if s, err = p.str(f); err == nil {
				if err = r.Algorithm.UnmarshalText([]byte(s)); err != nil {
					err = p.errAt(f.val, "algorithm: %v", err)
				}
			}
		case "burst":
			r.Burst, err = p.number(f)
		case "window":
			window, err = p.str(f)
			windowNode = f.val
		case "on_failure":
			r.OnFailure, err = p.failurePolicy(f)
		}
		if err != nil {
			return nil, err
		}
		if contains([]string{"algorithm", "burst", "window", "on_failure"}, f.name) {
			ext = append(ext, f.name)
			p.ext = true
		}
	}

	u, validUnit := parseUnit(unit)
	switch {
	case r.Unlimited && validUnit:
		return nil, p.errAt(unitNode, "should not specify rate limit unit when unlimited")
	case r.Unlimited && len(ext) > 0:
		return nil, p.errAt(m, "should not specify %s when unlimited (sluice's extensions shape a limit)", ext[0])
	case r.Unlimited:
		// envoy's ratelimit does not look at an unlimited rule's unit further
	case windowNode != nil && unit != "":
		return nil, p.errAt(windowNode, "rate_limit has both unit and window (a sluice extension): give one")
	case windowNode != nil:
		if r.Window, err = time.ParseDuration(window); err != nil || r.Window <= 0 {
			return nil, p.errAt(windowNode, "window %q: want a positive Go duration such as 30s or 5m", trunc(window))
		}
		r.Unit = unitOf(r.Window)
	case !validUnit:
		return nil, p.errAt(orNode(unitNode, m), "invalid rate limit unit '%s'", trunc(unit))
	default:
		r.Unit, r.Window = u, u.Duration()
	}

	for _, f := range replaces {
		name, err := p.str(f)
		if err != nil {
			return nil, err
		}
		if name == "" {
			return nil, p.errAt(orNode(f.val, f.key), "should not have an empty replaces entry")
		}
		if name == r.Name {
			return nil, p.errAt(f.val, "replaces should not contain name of same descriptor")
		}
		r.Replaces = append(r.Replaces, name)
	}
	r.limitName = limitName(fullKey)
	if l, ok := r.Limit(); ok {
		if err := l.Validate(); err != nil {
			return nil, p.errAt(m, "rate_limit: %v", err)
		}
	}
	return r, nil
}

// failurePolicy reads sluice's on_failure: a sluice.FailurePolicy's name.
func (p *parser) failurePolicy(f field) (*sluice.FailurePolicy, error) {
	s, err := p.str(f)
	if err != nil {
		return nil, err
	}
	policy, err := sluice.ParseFailurePolicy(s)
	if err != nil {
		return nil, p.errAt(f.val, "on_failure %q: want %v, %v or %v", trunc(s), sluice.FailOpen, sluice.FailClosed, sluice.FailLocal)
	}
	return &policy, nil
}

// replaces reads the replaces list: the name field of each entry.
func (p *parser) replaces(f field) ([]field, error) {
	list, err := p.resolve(f.val)
	if err != nil {
		return nil, err
	}
	if list.Kind == yaml.ScalarNode && list.ShortTag() == "!!null" {
		return nil, nil
	}
	if list.Kind != yaml.SequenceNode {
		return nil, p.errAt(list, "replaces must be a list of {name: ...}, not %s", describe(list))
	}
	var out []field
	for _, item := range list.Content {
		it, err := p.resolve(item)
		if err != nil {
			return nil, err
		}
		if it.Kind != yaml.MappingNode {
			v := it.Value
			if it.Kind != yaml.ScalarNode {
				v = describe(it)
			}
			return nil, p.errAt(it, "config error, yaml file contains list of type other than map: %s", trunc(v))
		}
		fs, err := p.fields(it, replacesSchema, 0)
		if err != nil {
			return nil, err
		}
		name := field{name: "name", key: it, val: &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: it.Line}}
		if len(fs) > 0 {
			name = fs[0]
		}
		out = append(out, name)
	}
	return out, nil
}

func orNode(n, otherwise *yaml.Node) *yaml.Node {
	if n != nil {
		return n
	}
	return otherwise
}
