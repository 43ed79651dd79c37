package gateway_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// fencedConfig is a gateway with the fence section given and one global
// limit of 100 an hour on every request.
const fencedConfig = `
listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0}
%s
limits: [{name: global, quota: 100, window: 1h}]
rules: [{name: all, quotas: [{limit: global, key: global}]}]
`

// End to end: a stale epoch never reaches the upstream and spends
// nothing; what passes is forwarded with its field, in its canonical
// spelling only; every refusal is counted by reason.
func TestFenceEndToEnd(t *testing.T) {
	t.Parallel()
	up := newHeaderUpstream(t)
	g, _ := start(t, fmt.Sprintf(fencedConfig, "fence: {groups: [g]}"), up.URL)
	allowed := 0
	for i, c := range []struct {
		header   []string
		status   int
		body     string   // exact, or a prefix ending in "…"
		upstream []string // the HTTP_SLUICE_LEASE_EPOCH values the upstream reads
	}{
		{[]string{"Sluice-Lease-Epoch", "5 3 g"}, 200, "", []string{"5 3 g"}},
		{[]string{"Sluice-Lease-Epoch", "9 3 g"}, 200, "", []string{"9 3 g"}}, // taken over: the floor moves
		{[]string{"Sluice-Lease-Epoch", "5 3 g"}, 409, `{"error":"stale_lease_epoch","retryable":false}`, nil},
		{[]string{"sluice-lease-epoch", "8 3 g"}, 409, `{"error":"stale_lease_epoch","retryable":false}`, nil}, // a name has no case
		{[]string{"Sluice-Lease-Epoch", "9 3 g", "Sluice_Lease_Epoch", "1 3 g"}, 200, "", []string{"9 3 g"}},
		{[]string{"Sluice_Lease_Epoch", "1 3 g"}, 200, "", nil}, // another spelling: dropped, so not fenced, and not forwarded
		{[]string{"Sluice-Lease-Epoch", "nine 3 g"}, 400, `{"error":"invalid_lease_epoch","reason":"Sluice-Lease-Epoch: fence \"nine 3 g\": epoch is not…`, nil},
		{[]string{"Sluice-Lease-Epoch", "9 3 g", "Sluice-Lease-Epoch", "9 3 g"}, 400, `{"error":"invalid_lease_epoch","reason":"more than one…`, nil},
		{[]string{"Sluice-Lease-Epoch", "1 0 other"}, 403, `{"error":"unknown_lease_group","retryable":false}`, nil},
		{nil, 200, "", nil}, // no field, not required
	} {
		hits := up.hits.Load()
		status, body := rawRequest(t, g.Addr(), "GET", "/v1/complete", c.header...)
		prefix, isPrefix := strings.CutSuffix(c.body, "…")
		if status != c.status || (isPrefix && !strings.HasPrefix(body, prefix)) || (!isPrefix && c.body != "" && body != c.body) {
			t.Fatalf("request %d %q: %d %s; want %d %s", i, c.header, status, body, c.status, c.body)
		}
		reached := up.hits.Load() - hits
		if status != 200 {
			if reached != 0 {
				t.Fatalf("request %d %q: refused %d, yet reached the upstream", i, c.header, status)
			}
			continue
		}
		allowed++
		if reached != 1 {
			t.Fatalf("request %d %q: passed but reached the upstream %d times", i, c.header, reached)
		}
		if got := values(up.last(), "HTTP_SLUICE_LEASE_EPOCH"); !slices.Equal(got, c.upstream) {
			t.Errorf("request %d %q: the upstream read %q, want %q", i, c.header, got, c.upstream)
		}
	}
	// What the refused requests spent: nothing. The next one leaves
	// 100 - allowed - 1 (the limit refills one an hour per 36 s).
	r, _ := get(t, "http://"+g.Addr()+"/v1/complete", "Sluice-Lease-Epoch", "9 3 g")
	if want := fmt.Sprintf(`"global";r=%d;`, 100-allowed-1); r.StatusCode != 200 || !strings.HasPrefix(r.Header.Get("RateLimit"), want) {
		t.Fatalf("after the refusals: %d, RateLimit %q, want it to start %s", r.StatusCode, r.Header.Get("RateLimit"), want)
	}
	_, m := get(t, "http://"+g.AdminAddr()+"/metrics")
	for _, want := range []string{
		`sluice_requests_refused_total{reason="stale_lease_epoch"} 2`,
		`sluice_requests_refused_total{reason="invalid_lease_epoch"} 2`,
		`sluice_requests_refused_total{reason="unknown_lease_group"} 1`,
		`sluice_decisions_total{outcome="allowed",rule="all"} 6`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics: no %s", want)
		}
	}
}

// required: true refuses a request without the field with 428; it never
// reaches the upstream.
func TestFenceRequired(t *testing.T) {
	t.Parallel()
	up := newHeaderUpstream(t)
	g, _ := start(t, fmt.Sprintf(fencedConfig, "fence: {required: true}"), up.URL)
	status, body := rawRequest(t, g.Addr(), "GET", "/x")
	if status != 428 || !strings.HasPrefix(body, `{"error":"lease_epoch_required",`) || up.hits.Load() != 0 {
		t.Fatalf("no field: %d %s, upstream hits %d", status, body, up.hits.Load())
	}
	if status, body := rawRequest(t, g.Addr(), "GET", "/x", "Sluice-Lease-Epoch", "3 0 any"); status != 200 || up.hits.Load() != 1 {
		t.Fatalf("with the field: %d %s, upstream hits %d", status, body, up.hits.Load())
	}
	_, m := get(t, "http://"+g.AdminAddr()+"/metrics")
	if want := `sluice_requests_refused_total{reason="lease_epoch_required"} 1`; !strings.Contains(m, want) {
		t.Errorf("metrics: no %s", want)
	}
}

// The negative control: without a fence section the stale request
// reaches the upstream, with its field untouched.
func TestFenceOffForwardsStale(t *testing.T) {
	t.Parallel()
	up := newHeaderUpstream(t)
	g, _ := start(t, fmt.Sprintf(fencedConfig, ""), up.URL)
	for _, v := range []string{"9 3 g", "5 3 g"} {
		if status, body := rawRequest(t, g.Addr(), "GET", "/x", "Sluice-Lease-Epoch", v); status != 200 {
			t.Fatalf("%q: %d %s", v, status, body)
		}
		if got := values(up.last(), "HTTP_SLUICE_LEASE_EPOCH"); !slices.Equal(got, []string{v}) {
			t.Fatalf("%q: the upstream read %q", v, got)
		}
	}
	if n := up.hits.Load(); n != 2 {
		t.Fatalf("upstream hits %d, want 2: the stale one too", n)
	}
}
