package rls

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// MaxJSONBody is the largest request JSONHandler reads, in bytes.
const MaxJSONBody = 64 << 10

// JSONHandler serves svc's ShouldRateLimit as JSON, as
// envoyproxy/ratelimit's /json endpoint does: POST a RateLimitRequest in
// protojson ({"domain":"edge","descriptors":[{"entries":[{"key":"api_key",
// "value":"k"}]}]}; an unknown field is refused), and the answer is its
// RateLimitResponse with the proto's field names, on one line: 200, or 429
// when overall_code is OVER_LIMIT. Every other answer is a JSON object
// {"error": reason}: 405 (with Allow: POST) for another method, 400 for an
// empty body, a body that is not a RateLimitRequest or a request the
// service refuses (INVALID_ARGUMENT), 413 for a body beyond MaxJSONBody,
// and 503 when the service cannot decide (no configuration, the limiter
// failed). Every answer has Cache-Control: no-store. It serves any path:
// mount it where it belongs (at /json, as envoyproxy/ratelimit does).
func JSONHandler(svc *Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeJSONError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s: POST an RLS request (RateLimitRequest) as JSON", r.Method))
			return
		}
		req, code, err := readJSONRequest(w, r)
		if err != nil {
			writeJSONError(w, code, err.Error())
			return
		}
		resp, err := svc.ShouldRateLimit(r.Context(), req)
		if err != nil {
			writeJSONError(w, httpStatusOf(err), status.Convert(err).Message())
			return
		}
		writeJSONResponse(w, resp)
	})
}

var jsonIn = protojson.UnmarshalOptions{DiscardUnknown: false}

// readJSONRequest reads and decodes the request's body, or says why it
// cannot, with the HTTP status of the answer.
func readJSONRequest(w http.ResponseWriter, r *http.Request) (*rlpb.RateLimitRequest, int, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxJSONBody))
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("a request is at most %d bytes", MaxJSONBody)
	} else if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("reading the request: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, http.StatusBadRequest, errors.New("an empty request: POST an RLS request (RateLimitRequest) as JSON")
	}
	var req rlpb.RateLimitRequest
	if err := jsonIn.Unmarshal(body, &req); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("not an RLS request in JSON: %s", jsonReason(err))
	}
	return &req, http.StatusOK, nil
}

// protoValue matches protojson's words for a value of the wrong type:
// "invalid value for uint32 field hitsAddend: -1".
var protoValue = regexp.MustCompile(`invalid value for (\w+) field (\w+): (.*)$`)

// protoPrefix matches protojson's "proto:" and the space after it, which it
// writes as U+00A0 at random (its texts are not meant to be parsed: this
// only makes them readable, and leaves a text it does not know as it is).
var protoPrefix = regexp.MustCompile(`^proto:[ \x{00a0}]*`)

// protoPlace matches where protojson found the fault: "(line 1:32): ".
var protoPlace = regexp.MustCompile(`\(line (\d+):(\d+)\):? ?`)

// protoKinds says, in words, what a protobuf field of a kind holds.
var protoKinds = map[string]string{
	"uint32": "a whole number from 0 to 4294967295", "uint64": "a whole number from 0 up", "int64": "a whole number",
	"string": "a string", "bool": "true or false", "enum": "one of the unit names (SECOND, MINUTE, HOUR, DAY, ...)",
}

// jsonReason is protojson's error in the request's terms: without the
// "proto:" prefix and Go's type names, the field under its JSON name
// (hits_addend, not hitsAddend), where it is, and what it must hold.
func jsonReason(err error) string {
	msg := protoPrefix.ReplaceAllString(err.Error(), "")
	place := ""
	if m := protoPlace.FindStringSubmatch(msg); m != nil {
		place = " (line " + m[1] + ", column " + m[2] + ")"
		msg = strings.Replace(msg, m[0], "", 1)
		msg = strings.Replace(msg, "syntax error ", "syntax error: ", 1)
	}
	if m := protoValue.FindStringSubmatch(msg); m != nil {
		want, ok := protoKinds[m[1]]
		if !ok {
			want = "an object"
		}
		msg = fmt.Sprintf("%s is %s, not %s", snakeCase(m[2]), want, m[3])
	}
	return strings.TrimSpace(msg) + place
}

// snakeCase is a protobuf field's JSON name as the API documents it:
// hitsAddend is hits_addend.
func snakeCase(s string) string {
	var b strings.Builder
	for _, r := range s {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('_')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// httpStatusOf maps the service's refusal to HTTP: the client's mistake,
// or the service unable to decide.
func httpStatusOf(err error) int {
	if status.Code(err) == codes.InvalidArgument {
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}

func writeJSONResponse(w http.ResponseWriter, resp *rlpb.RateLimitResponse) {
	out, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(resp)
	if err != nil {
		writeJSONError(w, http.StatusInternalServerError, "encoding the answer failed")
		return
	}
	var compact bytes.Buffer // protojson varies its spacing on purpose; clients and docs get one form
	if json.Compact(&compact, out) == nil {
		out = compact.Bytes()
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == rlpb.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_, _ = w.Write(append(out, '\n'))
}

func writeJSONError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
