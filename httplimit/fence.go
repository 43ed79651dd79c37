package httplimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/lease"
)

// Fence checks the lease fencing token a request carries: the epoch under
// which its sender holds a partition of a shared limit (package lease),
// in the lease.FenceHeader field ("Sluice-Lease-Epoch: 9 3 openai-tokens":
// epoch, partition, group). A request whose epoch is below the highest
// this process has seen for that partition comes from a holder whose
// lease was taken over (a paused or cut-off process that woke up): it is
// refused, so that it spends nothing here and has no effect behind.
//
// The check comes before every rule, for every request, whether or not a
// rule applies to it, so a refused request spends nothing. Refusals, each
// with Cache-Control: no-store and a JSON body, never retryable:
//
//   - a stale epoch: 409 Conflict, {"error":"stale_lease_epoch","retryable":false};
//   - a malformed field, or more than one: 400 Bad Request,
//     {"error":"invalid_lease_epoch","reason":"…","retryable":false};
//   - a group the table does not take (not among its Groups, or a new
//     group once it holds MaxGroups): 403 Forbidden,
//     {"error":"unknown_lease_group","retryable":false};
//   - no field while Required: 428 Precondition Required,
//     {"error":"lease_epoch_required","reason":"…","retryable":false}.
//
// A request that passes goes on with its field: the handler behind may
// read or log it. The table is this process's: with several instances of
// the target, each refuses a stale epoch once the new holder's traffic has
// reached it (see lease.Fences).
type Fence struct {
	// Fences remembers the highest epochs seen. Nil: fencing is off, the
	// field is not read (the zero Fence).
	Fences *lease.Fences
	// Required refuses a request without the field (428). Default: such a
	// request is not fenced, and goes on to the rules.
	Required bool
	// Refused, when set, hears each request the fence refused, with the
	// reason: the error of its body ("stale_lease_epoch",
	// "invalid_lease_epoch", "unknown_lease_group",
	// "lease_epoch_required"), a fixed code for a metric's label. It is
	// called on the request path, before the answer is written: it must
	// be fast and safe for concurrent use. (lease.Fences.Stats counts the
	// checks too.)
	Refused func(r *http.Request, reason string)
}

// Fence refusals' reasons.
const (
	ReasonStaleEpoch    = "stale_lease_epoch"
	ReasonInvalidEpoch  = "invalid_lease_epoch"
	ReasonUnknownGroup  = "unknown_lease_group"
	ReasonEpochRequired = "lease_epoch_required"
)

// fenceField is lease.FenceHeader as a request's header map holds it.
var fenceField = http.CanonicalHeaderKey(lease.FenceHeader)

var (
	staleBody    = []byte(`{"error":"` + ReasonStaleEpoch + `","retryable":false}`)
	unknownBody  = []byte(`{"error":"` + ReasonUnknownGroup + `","retryable":false}`)
	requiredBody = reasonBody(ReasonEpochRequired, "this target fences leases: send "+lease.FenceHeader+": <epoch> <partition> <group>")
)

// validate checks what the fence's fields need.
func (f Fence) validate() error {
	if f.Fences == nil && (f.Required || f.Refused != nil) {
		return errors.New("httplimit: Fence.Required and Fence.Refused need Fence.Fences")
	}
	return nil
}

// checkFence checks r's fencing token, and answers r and returns false
// when it is refused.
func (m *Middleware) checkFence(w http.ResponseWriter, r *http.Request) bool {
	status, reason, body := m.fenceRefusal(r)
	if status == 0 {
		return true
	}
	if m.fence.Refused != nil {
		m.fence.Refused(r, reason)
	}
	writeRefusal(w, status, body, nil)
	return false
}

// fenceRefusal is the status, reason and body r is refused with; status 0
// when it passes.
func (m *Middleware) fenceRefusal(r *http.Request) (int, string, []byte) {
	vs := r.Header[fenceField]
	switch {
	case len(vs) == 0:
		if m.fence.Required {
			return http.StatusPreconditionRequired, ReasonEpochRequired, requiredBody
		}
		return 0, "", nil
	case len(vs) > 1:
		return http.StatusBadRequest, ReasonInvalidEpoch, reasonBody(ReasonInvalidEpoch, "more than one "+lease.FenceHeader+" field: a request is sent under one lease")
	}
	s, err := lease.ParseFence(vs[0])
	if err != nil {
		why := strings.TrimPrefix(strings.TrimPrefix(err.Error(), lease.ErrInvalid.Error()), ": ")
		return http.StatusBadRequest, ReasonInvalidEpoch, reasonBody(ReasonInvalidEpoch, lease.FenceHeader+": "+why)
	}
	switch ok, highest := m.fence.Fences.Check(s); {
	case ok:
		return 0, "", nil
	case highest == 0:
		return http.StatusForbidden, ReasonUnknownGroup, unknownBody
	default:
		return http.StatusConflict, ReasonStaleEpoch, staleBody
	}
}

// reasonBody is a refusal's JSON body with a reason in words (its <, >
// and & as they are: the body is JSON, never HTML).
func reasonBody(code, reason string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(struct {
		Error     string `json:"error"`
		Reason    string `json:"reason"`
		Retryable bool   `json:"retryable"`
	}{code, reason, false}) // strings and a bool: nothing to fail
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
