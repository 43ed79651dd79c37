package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/configfile"
	"github.com/sluicehq/sluice/internal/leaseconfig"
	"github.com/sluicehq/sluice/leasestore"
)

// Leases says which limits of the configuration the server decides in
// process, on partitions it holds under leases in Redis (package
// leasestore, with redislease on the server's Redis): the few hot limits
// — a global cap, a big tenant's — where a Redis call per decision is the
// bottleneck. It is read at start (LoadLeases, sluice serve --leases);
// changing it takes a restart. Every instance of the fleet must lease a
// limit the same way (partitions, ttl) and share the key HMAC secret.
type Leases struct {
	// Limits are the leased limits, by the limit's name (its rule's full
	// key, as RateLimit-Policy and the metrics name it). Each must name a
	// token_bucket or gcra rule of the configuration, at start and at
	// every reload. A limit without its own on_failure has its rule's, or
	// Options.RedisPolicy.
	Limits []leasestore.Leased
	// Member identifies this instance to the other members (default: a
	// random ID, new at each start); never a raw identity.
	Member string
	// MaxKeys bounds the keys held on leases (default
	// leasestore.DefaultMaxKeys).
	MaxKeys int
	// Prefix starts the leases' Redis keys (default "sluice:lease:").
	Prefix string

	file     string
	policies map[string]bool // the limits whose on_failure the file gives
}

// LoadLeases reads a leases file (sluice serve --leases): strict YAML,
// unknown fields refused, the fields (and checks) of the gateway's
// store.leases, e.g.
//
//	limits:
//	  - name: edge.generic_key_global   # the limit: its rule's full key
//	    partitions: 16                  # default 8
//	    ttl: 2s                         # default 2s
//	    on_failure: fail_local          # default: the rule's, or --on-redis-failure
//	    outage_share: 0.1               # kept out of the leases for fail_local
//	    idle: 1m                        # default 30 × ttl
//	member: ""                          # default: random
//	max_keys: 1024
//	prefix: "sluice:lease:"
//
// A refusal is a *configfile.Error: "file:line: reason".
func LoadLeases(path string) (*Leases, error) {
	b, err := configfile.ReadFile(path, configfile.MaxFileSize)
	if err != nil {
		return nil, &configfile.Error{File: path, Reason: err.Error(), Err: err}
	}
	return ParseLeases(path, b)
}

// ParseLeases parses a leases file's bytes; name is the file's, for
// errors.
func ParseLeases(name string, b []byte) (*Leases, error) {
	bad := func(line int, format string, args ...any) error {
		return &configfile.Error{File: name, Line: line, Reason: fmt.Sprintf(format, args...)}
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, bad(configfile.YAMLLine(err), "%s", yamlReason(err))
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var f leaseconfig.Leases
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		if line := configfile.YAMLLine(err); line > 0 {
			return nil, bad(line, "%s", yamlReason(err))
		}
		// A value its field's type refused (a duration, a policy): yaml
		// says why but not where.
		if path, line := refusedValue(&root); path != nil {
			return nil, bad(line, "%s: %s", (&configfile.FieldError{Path: path}).Field(), yamlReason(err))
		}
		return nil, bad(0, "%s", yamlReason(err))
	}
	if err := f.Validate(); err != nil {
		var fe *configfile.FieldError
		if errors.As(err, &fe) {
			return nil, bad(fieldLine(&root, fe.Path), "%v", fe)
		}
		return nil, bad(0, "%v", err)
	}
	// Each policy the file gives; the others come with the configuration.
	l := &Leases{Member: f.Member, MaxKeys: f.MaxKeys, Prefix: f.Prefix, file: name, policies: map[string]bool{},
		Limits: f.Leased(func(string) sluice.FailurePolicy { return sluice.FailOpen })}
	for _, x := range f.Limits {
		if x.OnFailure != nil {
			l.policies[x.Name] = true
		}
	}
	return l, nil
}

// yamlReason is a yaml.v3 error without its "yaml: line N:" (the error's
// line says it).
func yamlReason(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n  ")
	return regexp.MustCompile(`^line \d+: `).ReplaceAllString(msg, "")
}

// refusedValue finds the field of a leased limit whose value its type
// refuses (the error yaml gives has no line): its path and line.
func refusedValue(root *yaml.Node) ([]string, int) {
	limits := fieldNode(root, []string{"limits"})
	if limits == nil || limits.Kind != yaml.SequenceNode {
		return nil, 0
	}
	for i, item := range limits.Content {
		for j := 0; item.Kind == yaml.MappingNode && j+1 < len(item.Content); j += 2 {
			one := &yaml.Node{Kind: yaml.MappingNode, Content: item.Content[j : j+2]}
			if err := one.Decode(new(leaseconfig.Limit)); err != nil {
				return []string{"limits", strconv.Itoa(i), item.Content[j].Value}, item.Content[j+1].Line
			}
		}
	}
	return nil, 0
}

// fieldLine is the line of the field at path (["limits", "1", "ttl"]), or
// of the deepest part of it the file has (a field left to its default is
// reported where its limit is); 0 when the file has none of it.
func fieldLine(root *yaml.Node, path []string) int {
	for n := len(path); n > 0; n-- {
		if f := fieldNode(root, path[:n]); f != nil {
			return f.Line
		}
	}
	return 0
}

// fieldNode is the node at path: mapping keys, and list indexes in
// decimal; nil when the document has none.
func fieldNode(root *yaml.Node, path []string) *yaml.Node {
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return nil
	}
	n := root.Content[0]
	for _, p := range path {
		var next *yaml.Node
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == p {
					next = n.Content[i+1]
				}
			}
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(p); err == nil && i >= 0 && i < len(n.Content) {
				next = n.Content[i]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// Names returns the leased limits' names.
func (l *Leases) Names() []string {
	var out []string
	for _, x := range l.Limits {
		out = append(out, x.Name)
	}
	return out
}

// check checks the leases against a configuration: each names one of its
// limits, which the leases can hold.
func (l *Leases) check(loaded Loaded) error {
	for _, x := range l.Limits {
		limit, ok := loaded.Limits[x.Name]
		if !ok {
			return fmt.Errorf("%s: limit %s is leased, but no rule of the configuration (version %s) has that name: the name is the rule's full key, as in RateLimit-Policy", l.file, x.Name, loaded.Version)
		}
		if err := x.Check(limit); err != nil {
			return fmt.Errorf("%s: limit %s: %w", l.file, x.Name, err)
		}
	}
	return nil
}

// resolved is l's leased limits with their failure policies: the file's,
// else the rule's on_failure, else def.
func (l *Leases) resolved(loaded Loaded, def sluice.FailurePolicy) []leasestore.Leased {
	out := make([]leasestore.Leased, len(l.Limits))
	for i, x := range l.Limits {
		if !l.policies[x.Name] {
			x.Policy = def
			if p, ok := loaded.FailurePolicies[x.Name]; ok && p.Valid() {
				x.Policy = p
			}
		}
		out[i] = x
	}
	return out
}
