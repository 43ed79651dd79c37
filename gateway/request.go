package gateway

import (
	"encoding/json"
	"net/http"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/gateway/config"
	"github.com/sluicehq/sluice/metrics"
)

// guard normalises every request before next (the rules, then the
// upstream) sees it, as the configuration's request section says: the
// path (so the upstream receives the path the rules matched) and the
// header (no principal header from an untrusted peer, no other spelling
// of a key header, underscores as configured). A request it cannot
// normalise is refused with 400, a JSON body
// {"error":"bad_request","reason":"…"} and a count in
// sluice_requests_refused_total by reason.
func guard(cfg *config.File, ip *clientip.Resolver, refused *metrics.Refused, next http.Handler) http.Handler {
	paths := newPathPolicy(cfg.Request)
	headers := newHeaderPolicy(cfg, ip)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bad := paths.normalizeRequest(r)
		if bad == nil {
			bad = headers.apply(r)
		}
		if bad != nil {
			refused.Inc(bad.code)
			refuse(w, bad)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refuse answers 400 with the refusal's reason.
func refuse(w http.ResponseWriter, bad *refusal) {
	body, _ := json.Marshal(struct {
		Error  string `json:"error"`
		Reason string `json:"reason"`
	}{"bad_request", bad.reason})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(append(body, '\n'))
}
