package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/configfile"
	"github.com/sluicehq/sluice/lease"
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

// leasesFile is the YAML of a leases file.
type leasesFile struct {
	Member  string `yaml:"member"`
	MaxKeys int    `yaml:"max_keys"`
	Prefix  string `yaml:"prefix"`
	Limits  []struct {
		Name        string  `yaml:"name"`
		Partitions  int     `yaml:"partitions"`
		TTL         string  `yaml:"ttl"`
		OnFailure   string  `yaml:"on_failure"`
		OutageShare float64 `yaml:"outage_share"`
		Idle        string  `yaml:"idle"`
	} `yaml:"limits"`
}

// LoadLeases reads a leases file (sluice serve --leases): strict YAML,
// unknown fields refused, e.g.
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
	var f leasesFile
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, bad(configfile.YAMLLine(err), "%s", yamlReason(err))
	}
	lines := limitLines(&root)
	l := &Leases{Member: f.Member, MaxKeys: f.MaxKeys, Prefix: f.Prefix, file: name, policies: map[string]bool{}}
	if len(f.Limits) == 0 {
		return nil, bad(0, "no limits: list the limits to decide on leases under limits:, each with its name")
	}
	if f.Member != "" {
		if err := lease.ValidateMember(f.Member); err != nil {
			return nil, bad(0, "member: %v", err)
		}
	}
	if f.MaxKeys < 0 {
		return nil, bad(0, "max_keys %d: must be positive (0 or absent: %d)", f.MaxKeys, leasestore.DefaultMaxKeys)
	}
	if len(f.Prefix) > 64 || strings.ContainsAny(f.Prefix, "{}") {
		return nil, bad(0, "prefix %q: at most 64 bytes, without { or }", f.Prefix)
	}
	for i, x := range f.Limits {
		line := 0
		if i < len(lines) {
			line = lines[i]
		}
		ls := leasestore.Leased{Name: x.Name, Partitions: x.Partitions, OutageShare: x.OutageShare}
		if x.Name == "" {
			return nil, bad(line, "limits[%d]: name is required: the limit's name, its rule's full key (such as edge.generic_key_global)", i)
		}
		for _, d := range []struct {
			field, v string
			to       *time.Duration
		}{{"ttl", x.TTL, &ls.TTL}, {"idle", x.Idle, &ls.Idle}} {
			if d.v == "" {
				continue
			}
			v, err := time.ParseDuration(d.v)
			if err != nil || v <= 0 {
				return nil, bad(line, "limits[%d] (%s): %s %q: want a positive Go duration such as 2s", i, x.Name, d.field, d.v)
			}
			*d.to = v
		}
		if x.OnFailure != "" {
			p, err := sluice.ParseFailurePolicy(x.OnFailure)
			if err != nil {
				return nil, bad(line, "limits[%d] (%s): on_failure %q: want fail_open, fail_closed or fail_local", i, x.Name, x.OnFailure)
			}
			ls.Policy = p
			l.policies[x.Name] = true
		}
		for _, other := range l.Limits {
			if other.Name == x.Name {
				return nil, bad(line, "limits[%d]: %s is leased twice", i, x.Name)
			}
		}
		// The limit to check it against comes with the configuration.
		if err := ls.Validate(); err != nil {
			return nil, bad(line, "limits[%d] (%s): %v", i, x.Name, err)
		}
		l.Limits = append(l.Limits, ls)
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

// limitLines returns the line of each item of the top-level limits list.
func limitLines(root *yaml.Node) []int {
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	m := root.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "limits" && m.Content[i+1].Kind == yaml.SequenceNode {
			var out []int
			for _, it := range m.Content[i+1].Content {
				out = append(out, it.Line)
			}
			return out
		}
	}
	return nil
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
