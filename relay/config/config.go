// Package config reads sluice relay's YAML configuration: its listeners,
// where its queues are kept, its targets and its queues. Decoding is
// strict — an unknown field, a value of the wrong type, a limit or a
// target that would not start is refused with the file, the line and the
// reason — so that a file sluice check accepts is a file sluice relay
// runs. docs/relay.md is the manual.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/configfile"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/relay"
)

// Error is a refused file: "FILE:LINE: REASON".
type Error = configfile.Error

// Duration is a duration written as Go writes one ("200ms", "24h").
type Duration = configfile.Duration

// File is a relay configuration.
type File struct {
	// Listen is the API's address; default 127.0.0.1:8700.
	Listen string `yaml:"listen"`
	// Admin is the console's and /metrics' address; default
	// 127.0.0.1:8701.
	Admin string `yaml:"admin"`
	// Server bounds the listeners' connections.
	Server Server `yaml:"server"`
	// API bounds what one request may hold.
	API API `yaml:"api"`
	// Store says where the queues are kept: bbolt files (the default) or
	// NATS JetStream.
	Store Store `yaml:"store"`
	// StateFile keeps learned rates, pauses and limits set through the
	// API; default relay-state.json in store.bolt.dir, or
	// ./sluice-relay-state.json with NATS.
	StateFile string `yaml:"state_file"`
	// LogEvery is how often failed deliveries are summarised; default 1m.
	LogEvery Duration `yaml:"log_every"`
	Targets  []Target `yaml:"targets"`
	Queues   []Queue  `yaml:"queues"`
	// Fleet, when set, is where this relay shares targets' limits with
	// other relays: the targets with a fleet block.
	Fleet *Fleet `yaml:"fleet"`

	name string
	root *yaml.Node
}

// Server bounds the listeners' connections.
type Server struct {
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"` // default 5s
	ReadTimeout       Duration `yaml:"read_timeout"`        // default 60s (a large batch)
	WriteTimeout      Duration `yaml:"write_timeout"`       // default 60s
	IdleTimeout       Duration `yaml:"idle_timeout"`        // default 120s
	MaxConnections    int      `yaml:"max_connections"`     // default 1024, per listener
	MaxHeaderBytes    int      `yaml:"max_header_bytes"`    // default 64 KiB
}

// API bounds one request.
type API struct {
	MaxBatchBytes int64 `yaml:"max_batch_bytes"` // default 32 MiB
	MaxBatch      int   `yaml:"max_batch"`       // default 10000
}

// Store says where the queues are kept.
type Store struct {
	Bolt *Bolt `yaml:"bolt"`
	NATS *NATS `yaml:"nats"`
}

// Bolt keeps each queue in its own bbolt file, DIR/<queue>.db.
type Bolt struct {
	Dir string `yaml:"dir"` // default ./sluice-relay-data
}

// NATS keeps each queue in NATS JetStream, under the queue's name.
type NATS struct {
	URL      string `yaml:"url"`      // required
	Replicas int    `yaml:"replicas"` // default 1
	Prefix   string `yaml:"prefix"`   // prefixes every queue's JetStream name; default "relay-"
}

// Target is a rate-limited service (relay.Target).
type Target struct {
	Name        string   `yaml:"name"`
	Origin      string   `yaml:"origin"`
	Limits      []Limit  `yaml:"limits"`
	Slice       Duration `yaml:"slice"`
	MaxInFlight int      `yaml:"max_in_flight"`
	Timeout     Duration `yaml:"timeout"`
	Retry       Retry    `yaml:"retry"`
	Breaker     Breaker  `yaml:"breaker"`
	Allow       []string `yaml:"allow"`
	KeepHeaders []string `yaml:"keep_headers"`
	KeepBody    int      `yaml:"keep_body"`
	// Fleet, when set, shares one of the target's limits with the other
	// relays of the top-level fleet section.
	Fleet *TargetFleet `yaml:"fleet"`
}

// Limit is one of a target's limits.
type Limit struct {
	Name      string           `yaml:"name"`
	Algorithm sluice.Algorithm `yaml:"algorithm"`
	Quota     float64          `yaml:"quota"`
	Window    Duration         `yaml:"window"`
	Burst     float64          `yaml:"burst"`
}

// Retry is a target's retry policy (relay.Retry).
type Retry struct {
	MaxAttempts   int      `yaml:"max_attempts"`
	BaseDelay     Duration `yaml:"base_delay"`
	MaxDelay      Duration `yaml:"max_delay"`
	MaxRetryAfter Duration `yaml:"max_retry_after"`
	RetryStatuses []int    `yaml:"retry_statuses"`
}

// Breaker is a target's circuit breaker (pace.BreakerOptions).
type Breaker struct {
	Failures int      `yaml:"failures"`
	OpenFor  Duration `yaml:"open_for"`
	Probes   int      `yaml:"probes"`
}

// Queue feeds one target (relay.Queue).
type Queue struct {
	Name     string  `yaml:"name"`
	Target   string  `yaml:"target"`
	Weight   float64 `yaml:"weight"`
	Reserved float64 `yaml:"reserved"`
	MaxBody  int     `yaml:"max_body"`
}

// Defaults of File.
const (
	DefaultListen  = "127.0.0.1:8700"
	DefaultAdmin   = "127.0.0.1:8701"
	DefaultBoltDir = "./sluice-relay-data"
)

// Load reads and validates the file at path.
func Load(path string) (*File, error) {
	data, err := configfile.ReadFile(path, configfile.MaxFileSize)
	if fe := (*configfile.FileError)(nil); errors.As(err, &fe) {
		if fe.TooLarge {
			return nil, &Error{File: path, Reason: configfile.TooLarge}
		}
		return nil, &Error{File: path, Reason: fe.Reason, Err: fe.Err}
	}
	return Parse(path, data)
}

// Parse reads and validates a configuration; name is used in messages.
func Parse(name string, data []byte) (*File, error) {
	f, err := parse(name, data)
	var e *Error
	if errors.As(err, &e) {
		// YAML also breaks lines at U+0085, U+2028 and U+2029, which
		// editors do not: a line is named as an editor counts them.
		e.Line = min(e.Line, bytes.Count(data, []byte("\n"))+bytes.Count(data, []byte("\r"))+1)
	}
	return f, err
}

func parse(name string, data []byte) (*File, error) {
	f := &File{name: name, root: new(yaml.Node)}
	if err := yaml.Unmarshal(data, f.root); err != nil {
		return nil, &Error{File: name, Line: configfile.YAMLLine(err), Reason: "not valid YAML: " + yamlReason(err)}
	}
	if len(f.root.Content) == 0 || f.root.Content[0].Kind != yaml.MappingNode {
		return nil, &Error{File: name, Line: 1, Reason: "the file must be a mapping of fields (targets:, queues:, listen: …)"}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(f); err != nil && !errors.Is(err, io.EOF) {
		line := configfile.YAMLLine(err)
		if line == 0 {
			line = f.lineOfValue(err.Error())
		}
		return nil, &Error{File: name, Line: line, Reason: yamlReason(err)}
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// yamlReason is a yaml.v3 error without its prefixes (the line is the
// Error's).
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
	if m := unknownField.FindStringSubmatch(msg); m != nil {
		where := fieldsOf[m[2]]
		if where == "" {
			where = strings.ToLower(strings.TrimPrefix(m[2], "config."))
		}
		return fmt.Sprintf("unknown field %q in %s (docs/relay.md lists the fields)", m[1], where)
	}
	if m := wrongType.FindStringSubmatch(msg); m != nil {
		typ := strings.TrimPrefix(m[3], "*")
		want := map[string]string{"float64": "a number", "int": "a whole number", "int64": "a whole number", "string": "a string", "bool": "true or false"}[typ]
		switch {
		case want != "":
		case strings.HasPrefix(typ, "[]"):
			want = "a list"
		case mappingOf[typ] != "":
			want = mappingOf[typ]
		default:
			want = "a " + strings.TrimPrefix(typ, "config.")
		}
		return fmt.Sprintf("%s is needed here, not %s", want, describeValue(m[1], m[2]))
	}
	if strings.Contains(msg, "cannot unmarshal") || strings.Contains(msg, "not found in type") {
		return "a value of the wrong kind for its field (docs/relay.md gives each field's kind)"
	}
	return goPackage.ReplaceAllString(msg, "")
}

// fieldsOf names where a field was not found, by the type yaml.v3 names.
var fieldsOf = map[string]string{
	"config.File":            "the file's top level",
	"config.TargetFleet":     "a target's fleet block",
	"redisconfig.Connection": "fleet.redis",
	"redisconfig.Sentinel":   "fleet.redis.sentinel",
	"tlsconfig.Client":       "fleet.redis.tls",
}

// mappingOf says what a mapping-valued field holds, by its type.
var mappingOf = map[string]string{
	"config.Fleet":           "a mapping (redis, prefix, member)",
	"config.TargetFleet":     "a mapping (limit, partitions, ttl, renew, drift)",
	"redisconfig.Connection": "a mapping (addrs, password_file, tls, sentinel…)",
	"redisconfig.Sentinel":   "a mapping (master, addrs…)",
	"tlsconfig.Client":       "a mapping (ca_file, cert_file, key_file…)",
}

var (
	goPackage    = regexp.MustCompile(`\b\w*config\.`)
	unknownField = regexp.MustCompile(`^field (.+) not found in type (\w*config\.\w+)`)
	wrongType    = regexp.MustCompile("^cannot unmarshal (\\S+)(?: `([^`]*)`)? into (\\S+)")
)

// describeValue names a YAML value in a refusal.
func describeValue(tag, value string) string {
	switch tag {
	case "!!map":
		return "a mapping"
	case "!!seq":
		return "a list"
	case "!!null":
		return "nothing"
	}
	if len(value) > 40 {
		value = value[:40] + "…"
	}
	return fmt.Sprintf("%q", value)
}

// lineOf is the line of the field at path (keys and indexes), or of its
// deepest existing parent.
func (f *File) lineOf(path ...any) int {
	line, _ := f.find(path...)
	return line
}

// has reports whether the file has the field at path, if only as a key
// without a value.
func (f *File) has(path ...any) bool {
	_, ok := f.find(path...)
	return ok
}

// find is the line of the field at path and true, or the line of its
// deepest existing parent and false.
func (f *File) find(path ...any) (int, bool) {
	n := f.root.Content[0]
	line := n.Line
	for _, p := range path {
		var next *yaml.Node
		switch p := p.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == p {
						next = n.Content[i+1]
						line = n.Content[i].Line
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && p < len(n.Content) {
				next = n.Content[p]
				line = next.Line
			}
		}
		if next == nil {
			return line, false
		}
		n = next
	}
	return line, true
}

// lineOfValue finds the line of the value a decoder's error quotes first
// (a duration's own error names no line): the first scalar of the file
// with that value; 0 when none is.
func (f *File) lineOfValue(msg string) int {
	m := quotedValue.FindStringSubmatch(msg)
	if m == nil {
		return 0
	}
	var find func(n *yaml.Node) int
	find = func(n *yaml.Node) int {
		if n.Kind == yaml.ScalarNode && n.Value == m[1] {
			return n.Line
		}
		for _, c := range n.Content {
			if line := find(c); line > 0 {
				return line
			}
		}
		return 0
	}
	return find(f.root)
}

var quotedValue = regexp.MustCompile(`"([^"]*)"`)

func (f *File) errAt(reason string, path ...any) error {
	return &Error{File: f.name, Line: f.lineOf(path...), Reason: reason}
}

func (f *File) validate() error {
	if f.Listen == "" {
		f.Listen = DefaultListen
	}
	if f.Admin == "" {
		f.Admin = DefaultAdmin
	}
	for _, a := range []struct{ field, addr string }{{"listen", f.Listen}, {"admin", f.Admin}} {
		if err := configfile.CheckAddr(a.addr); err != nil {
			return f.errAt(a.field+": "+err.Error(), a.field)
		}
	}
	if f.Listen == f.Admin && !strings.HasSuffix(f.Listen, ":0") {
		return f.errAt("listen and admin are the same address: the console and /metrics need their own", "admin")
	}
	s := &f.Server
	for _, d := range []struct {
		field string
		v     *Duration
		def   time.Duration
	}{{"read_header_timeout", &s.ReadHeaderTimeout, 5 * time.Second}, {"read_timeout", &s.ReadTimeout, time.Minute}, {"write_timeout", &s.WriteTimeout, time.Minute}, {"idle_timeout", &s.IdleTimeout, 2 * time.Minute}} {
		if *d.v < 0 {
			return f.errAt(d.field+" must not be negative", "server", d.field)
		}
		if *d.v == 0 {
			*d.v = Duration(d.def)
		}
	}
	if s.MaxConnections < 0 || s.MaxHeaderBytes < 0 {
		return f.errAt("max_connections and max_header_bytes must not be negative", "server")
	}
	if s.MaxConnections == 0 {
		s.MaxConnections = 1024
	}
	if s.MaxHeaderBytes == 0 {
		s.MaxHeaderBytes = 64 << 10
	}
	if f.API.MaxBatchBytes < 0 || f.API.MaxBatch < 0 {
		return f.errAt("max_batch_bytes and max_batch must not be negative", "api")
	}
	switch {
	case f.Store.Bolt != nil && f.Store.NATS != nil:
		return f.errAt("store: choose bolt or nats, not both", "store")
	case f.Store.NATS != nil:
		n := f.Store.NATS
		if n.URL == "" {
			return f.errAt("store.nats.url is required (nats://127.0.0.1:4222)", "store", "nats")
		}
		if n.Replicas < 0 || n.Replicas > 5 {
			return f.errAt("store.nats.replicas: from 1 to 5", "store", "nats", "replicas")
		}
		if n.Prefix == "" {
			n.Prefix = "relay-"
		}
		if f.StateFile == "" {
			f.StateFile = "./sluice-relay-state.json"
		}
	default:
		if f.Store.Bolt == nil {
			f.Store.Bolt = &Bolt{}
		}
		if f.Store.Bolt.Dir == "" {
			f.Store.Bolt.Dir = DefaultBoltDir
		}
		if f.StateFile == "" {
			f.StateFile = filepath.Join(f.Store.Bolt.Dir, "relay-state.json")
		}
	}
	if f.LogEvery < 0 {
		return f.errAt("log_every must not be negative", "log_every")
	}
	if len(f.Targets) == 0 {
		return f.errAt("targets: at least one target is needed (a name and an origin)", "targets")
	}
	if len(f.Queues) == 0 {
		return f.errAt("queues: at least one queue is needed (a name and its target)", "queues")
	}
	o, err := f.options()
	if err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		var oe *relay.OptionsError
		if errors.As(err, &oe) && oe.Field != "" {
			return f.errAt(oe.Reason, oe.Field, oe.Index)
		}
		return &Error{File: f.name, Reason: strings.TrimPrefix(err.Error(), relay.ErrOptions.Error()+": ")}
	}
	return f.validateFleet()
}

// options is the relay's Options the file describes (without Open and
// Logger, which the command gives).
func (f *File) options() (relay.Options, error) {
	o := relay.Options{LogEvery: time.Duration(f.LogEvery), StateFile: f.StateFile}
	for i, t := range f.Targets {
		rt := relay.Target{
			Name: t.Name, Origin: t.Origin, Slice: time.Duration(t.Slice), MaxInFlight: t.MaxInFlight,
			Timeout: time.Duration(t.Timeout), KeepHeaders: t.KeepHeaders, KeepBody: t.KeepBody,
			Retry: relay.Retry{
				MaxAttempts: t.Retry.MaxAttempts, BaseDelay: time.Duration(t.Retry.BaseDelay),
				MaxDelay: time.Duration(t.Retry.MaxDelay), MaxRetryAfter: time.Duration(t.Retry.MaxRetryAfter),
				RetryStatuses: t.Retry.RetryStatuses,
			},
			Breaker: pace.BreakerOptions{Failures: t.Breaker.Failures, OpenFor: time.Duration(t.Breaker.OpenFor), Probes: t.Breaker.Probes},
		}
		for j, l := range t.Limits {
			lim := sluice.Limit{Name: l.Name, Algorithm: l.Algorithm, Quota: l.Quota, Window: time.Duration(l.Window), Burst: l.Burst}
			if err := lim.Validate(); err != nil {
				return o, f.errAt(fmt.Sprintf("target %s: limit %s: %s", t.Name, l.Name, strings.TrimPrefix(err.Error(), "sluice: ")), "targets", i, "limits", j)
			}
			rt.Limits = append(rt.Limits, lim)
		}
		for j, a := range t.Allow {
			p, err := netip.ParsePrefix(a)
			if err != nil {
				addr, aerr := netip.ParseAddr(a)
				if aerr != nil {
					return o, f.errAt(fmt.Sprintf("target %s: allow: %q is not an address or a prefix (127.0.0.0/8, ::1/128)", t.Name, a), "targets", i, "allow", j)
				}
				p = netip.PrefixFrom(addr, addr.BitLen())
			}
			if p != p.Masked() {
				return o, f.errAt(fmt.Sprintf("target %s: allow: %s has bits set past its length: write %s", t.Name, a, p.Masked()), "targets", i, "allow", j)
			}
			rt.Allow = append(rt.Allow, p)
		}
		o.Targets = append(o.Targets, rt)
	}
	for _, q := range f.Queues {
		o.Queues = append(o.Queues, relay.Queue{Name: q.Name, Target: q.Target, Weight: q.Weight, Reserved: q.Reserved, MaxBody: q.MaxBody})
	}
	return o, nil
}

// Options returns the relay's Options the file describes; the caller sets
// Open and Logger.
func (f *File) Options() relay.Options {
	o, _ := f.options() // validated by Parse
	return o
}

// Name is the name the file was parsed under.
func (f *File) Name() string { return f.name }
