package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/configfile"
	"github.com/sluicehq/sluice/rls"
	"github.com/sluicehq/sluice/rls/envoyconfig"
)

// EnvoyLoader loads an envoyproxy/ratelimit configuration from a file or a
// directory of *.yaml / *.yml files (with sluice's on_failure extension as
// the rules' failure policies); its version is the SHA-256 of the
// files' names and contents, so a reload to the same files changes
// nothing.
func EnvoyLoader(path string) Loader {
	return func() (Loaded, error) {
		files, err := ConfigFiles(path)
		if err != nil {
			return Loaded{}, err
		}
		// Each file is read once: the version is the hash of the very
		// bytes parsed (a file replaced between two reads would give a
		// version that does not describe the rules in force).
		h := sha256.New()
		domains := make([]*envoyconfig.Domain, 0, len(files))
		for _, f := range files {
			b, err := readConfig(f)
			if err != nil {
				return Loaded{}, err
			}
			fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(f), len(b))
			h.Write(b)
			d, err := envoyconfig.Parse(f, b)
			if err != nil {
				return Loaded{}, err
			}
			domains = append(domains, d)
		}
		c, err := envoyconfig.New(domains...)
		if err != nil {
			return Loaded{}, err
		}
		policies := map[string]sluice.FailurePolicy{}
		limits := map[string]sluice.Limit{}
		for _, d := range c.Domains() {
			for _, r := range d.Rules() {
				l, ok := r.Limit()
				if !ok {
					continue
				}
				limits[l.Name] = l
				if r.OnFailure != nil {
					policies[l.Name] = *r.OnFailure
				}
			}
		}
		return Loaded{Matcher: rls.FromEnvoyConfig(c), Version: hex.EncodeToString(h.Sum(nil))[:12], FailurePolicies: policies, Limits: limits}, nil
	}
}

// ConfigFiles is path itself, or the YAML files of the directory path
// (not its hidden entries: a ConfigMap's ..data and timestamped
// directories are reached through the visible symlinks).
func ConfigFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			continue
		}
		files = append(files, filepath.Join(path, n))
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no *.yaml or *.yml file", path)
	}
	slices.Sort(files)
	return files, nil
}

// readConfig reads a configuration file, at most envoyconfig.MaxFileSize,
// and a regular file only (opening a named pipe would wait for a writer).
func readConfig(path string) ([]byte, error) {
	b, err := configfile.ReadFile(path, envoyconfig.MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}
