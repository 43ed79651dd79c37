package rls_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3" // the cluster's typed_extension_protocol_options
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// The README's Envoy cluster for sluice — mTLS to sluice serve's gRPC —
// is a valid Envoy v3 Cluster: decoded by Envoy's own protos (every field
// name and enum value known), its validation rules met, and it says what
// the text says: HTTP/2, SNI and SAN sluice.internal, a client
// certificate, a CA, TLS 1.2 at least. There is no Envoy on this machine
// to run it; this is the next best check.
func TestREADMEEnvoyCluster(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const marker = "# among Envoy's static_resources.clusters"
	at := strings.Index(string(readme), marker)
	if at < 0 {
		t.Fatalf("README.md has no block starting %q", marker)
	}
	block, _, ok := strings.Cut(string(readme[at:]), "```") // from the comment line, which YAML skips
	if !ok {
		t.Fatal("the block does not end")
	}
	var doc any
	if err := yaml.Unmarshal([]byte(block), &doc); err != nil {
		t.Fatalf("not YAML: %v", err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var c clusterv3.Cluster
	if err := protojson.Unmarshal(js, &c); err != nil {
		t.Fatalf("not an Envoy v3 Cluster: %v", err)
	}
	if err := c.ValidateAll(); err != nil {
		t.Fatalf("Envoy's validation refuses it: %v", err)
	}
	var up tlsv3.UpstreamTlsContext
	if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&up); err != nil {
		t.Fatalf("transport_socket: %v", err)
	}
	if err := up.ValidateAll(); err != nil {
		t.Fatalf("the UpstreamTlsContext: %v", err)
	}
	ctx := up.GetCommonTlsContext()
	san := ctx.GetValidationContext().GetMatchTypedSubjectAltNames()
	if c.GetName() != "sluice" || up.GetSni() != "sluice.internal" || len(ctx.GetTlsCertificates()) != 1 ||
		ctx.GetValidationContext().GetTrustedCa().GetFilename() == "" || len(san) != 1 || san[0].GetMatcher().GetExact() != "sluice.internal" ||
		strings.Join(ctx.GetAlpnProtocols(), ",") != "h2" || ctx.GetTlsParams().GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_2 {
		t.Errorf("the cluster does not say what the README says: %v", &c)
	}
}
