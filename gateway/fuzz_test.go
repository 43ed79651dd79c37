package gateway

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/gateway/config"
	"github.com/sluicehq/sluice/memstore"
)

// FuzzConfig: whatever the bytes, config.Parse answers without panicking,
// and a file it accepts builds the gateway's middleware — every refusal
// happens at parse time, with a line, never later when serving.
func FuzzConfig(f *testing.F) {
	for _, path := range []string{"../examples/gateway.yaml", "../bench/gateway.yaml"} {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("limits: [{name: a, quota: 1, window: 1s}]\nrules: [{name: r, match: {path: /x/{id}/, methods: [GET]}, quotas: [{limit: a, key: header, header: X-K, charge_header: X-C}]}]\n"))
	f.Add([]byte("client_ip: {trusted_proxies: [10.0.0.0/8], header: forwarded, ipv6_prefix: 48}\nlimits: [{name: a, algorithm: concurrency, quota: 2, window: 1m}]\nrules: [{name: r, mode: rejections_count, on_error: fail_closed, quotas: [{limit: a, key: ip}]}]\n"))
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { store.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := config.Parse("fuzz.yaml", data)
		if err != nil {
			if len(err.Error()) > 4096 {
				t.Fatalf("a %d-byte error message", len(err.Error()))
			}
			return
		}
		if _, _, err := middleware(cfg, store, nil, nil); err != nil {
			t.Fatalf("config.Parse accepted what the middleware refuses: %v", err)
		}
	})
}
