package tlsconfig

import (
	"context"
	"crypto/tls"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/filewatch"
)

// ReloaderOptions configures a Reloader.
type ReloaderOptions struct {
	// Name says whose files these are in logs: "listeners", "gateway".
	Name string
	// Logger receives each reload's outcome: the new certificate (Info),
	// or the refusal and its reason, the old certificate kept (Error).
	// Default: discard.
	Logger *slog.Logger
	// Now is the clock certificates are checked against. Default
	// time.Now.
	Now func() time.Time
	// Watch, when true, watches the files from NewReloader on: Run reloads
	// them when they change.
	Watch bool
}

// Reloader holds a Server's certificate, key and client CAs, read from its
// files and read again by Reload — when the files change, under Run — so
// that the configurations it gives (Config) present the new certificate to
// new connections, and verify clients against the new CAs, without a
// restart; connections already open keep theirs. Files that are refused
// (a certificate and a key that do not match, half-way through a
// rotation; an expired certificate) leave the ones in force. Safe for
// concurrent use.
type Reloader struct {
	files      Server
	minVersion uint16
	name       string
	log        *slog.Logger
	now        func() time.Time
	cur        atomic.Pointer[material]
	watcher    *filewatch.Watcher

	mu    sync.Mutex // serialises reloads and guards views
	views []*view

	reloads, refused atomic.Uint64
}

// view is one listener's configuration: its protocols and whether it
// requires client certificates, rebuilt on each reload.
type view struct {
	protos     []string
	clientAuth bool
	cfg        atomic.Pointer[tls.Config]
}

// NewReloader reads and checks s's files (refusing to start on a bad one,
// with an *Error naming the file) and, with opts.Watch, starts watching
// them. Close releases the watch.
func NewReloader(s Server, opts ReloaderOptions) (*Reloader, error) {
	v, err := minVersion(s.MinVersion)
	if err != nil {
		return nil, err
	}
	r := &Reloader{files: s, minVersion: v, name: opts.Name, log: opts.Logger, now: opts.Now}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	if opts.Watch { // before reading: a change from here on is seen
		paths := []string{s.CertFile, s.KeyFile}
		if s.ClientCAFile != "" {
			paths = append(paths, s.ClientCAFile)
		}
		if r.watcher, err = filewatch.New(filewatch.Options{Paths: paths}); err != nil {
			return nil, err
		}
	}
	m, err := s.load(r.now())
	if err != nil {
		r.Close()
		return nil, err
	}
	m.loadedAt = r.now()
	r.cur.Store(m)
	return r, nil
}

// Config returns a listener's TLS configuration: the certificate in force
// at each handshake, TLS 1.2 at least (or the files' min_version), the
// application protocols protos in ALPN ("h2" for gRPC, "http/1.1" for
// sluice's HTTP listeners) and, when clientAuth is true and the files name a client CA,
// a client certificate required and verified. Several listeners may share
// one Reloader, each with its own Config.
func (r *Reloader) Config(clientAuth bool, protos ...string) *tls.Config {
	v := &view{protos: protos, clientAuth: clientAuth && r.files.ClientCAFile != ""}
	r.mu.Lock()
	v.cfg.Store(r.build(r.cur.Load(), v))
	r.views = append(r.views, v)
	r.mu.Unlock()
	return &tls.Config{
		MinVersion: r.minVersion,
		NextProtos: protos,
		// The configuration of the handshake: the one in force.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return v.cfg.Load(), nil },
		// Never used (GetConfigForClient answers first); set so that no
		// server refuses a configuration "without a certificate".
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.cur.Load().cert, nil },
	}
}

func (r *Reloader) build(m *material, v *view) *tls.Config {
	c := &tls.Config{
		MinVersion:   r.minVersion,
		NextProtos:   v.protos,
		Certificates: []tls.Certificate{*m.cert},
	}
	if v.clientAuth {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = m.pool
	}
	return c
}

// Reload reads the files again. On success the new certificate and CAs
// are in force for the next handshakes; on an error (an *Error naming the
// file) the ones in force stay. Either way it is logged and counted.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, err := r.files.load(r.now())
	if err != nil {
		r.refused.Add(1)
		old := r.cur.Load().summary
		r.log.Error("TLS files refused; the certificate in force stays", "listeners", r.name, "err", err, "in_force", old.Subject, "not_after", old.NotAfter)
		return err
	}
	m.loadedAt = r.now()
	r.cur.Store(m)
	for _, v := range r.views {
		v.cfg.Store(r.build(m, v))
	}
	r.reloads.Add(1)
	r.log.Info("TLS certificate loaded", "listeners", r.name, "subject", m.summary.Subject, "not_after", m.summary.NotAfter, "client_cas", m.summary.CAs)
	return nil
}

// Run reloads the files each time they change and settle, until ctx ends
// (nothing without ReloaderOptions.Watch); it returns nil then. A reload
// refused is logged and counted, and Run goes on.
func (r *Reloader) Run(ctx context.Context) error {
	if r.watcher == nil {
		<-ctx.Done()
		return nil
	}
	return r.watcher.Run(ctx, func() { _ = r.Reload() }, func(err error) {
		r.log.Warn("watching the TLS files", "listeners", r.name, "err", err)
	})
}

// Close stops watching the files. Idempotent; the configurations given
// keep working with the certificate in force.
func (r *Reloader) Close() error {
	if r.watcher != nil {
		return r.watcher.Close()
	}
	return nil
}

// Stats are a Reloader's state, for metrics and the admin API.
type Stats struct {
	// Summary describes the certificate in force.
	Summary Summary `json:"certificate"`
	// LoadedAt is when it was read.
	LoadedAt time.Time `json:"loaded_at"`
	// Reloads and Refused count the reloads that put new files in force
	// and those refused.
	Reloads uint64 `json:"reloads"`
	Refused uint64 `json:"refused"`
}

// Stats returns the Reloader's state.
func (r *Reloader) Stats() Stats {
	m := r.cur.Load()
	return Stats{Summary: m.summary, LoadedAt: m.loadedAt, Reloads: r.reloads.Load(), Refused: r.refused.Load()}
}
