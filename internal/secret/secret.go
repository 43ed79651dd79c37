// Package secret reads every secret sluice takes — the admin token, the
// key HMAC secret, Redis and Sentinel passwords, later NATS credentials —
// one way, with the same rules and the same error texts: from a file (a
// Kubernetes or Docker secret, mounted) or from an environment variable.
// Never from a command line, which every user of the machine can read
// (ps, /proc/PID/cmdline) and the shell keeps in its history, and never
// from a configuration file, which is copied, diffed and committed:
// Inline is the refusal both say.
//
// The rules: a file is read whole (at most MaxFileSize bytes, a regular
// file), an environment variable's name is written in capitals, digits and
// underscores; the value is trimmed of surrounding white space (the
// newline an editor or echo leaves) and must not then be empty, nor
// shorter than its Rule says. An error names the secret and where it was
// looked for — the file, or the variable — and never holds the value.
package secret

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sluicehq/sluice/internal/configfile"
)

// MaxFileSize is the largest secret file read, in bytes: a larger file is
// not a secret (a wrong path, most likely).
const MaxFileSize = 64 << 10

// Source says where a secret is kept: in a file or in an environment
// variable, not both. The zero Source is no secret.
type Source struct {
	// File is the path of a file holding the secret.
	File string
	// Env is the name of an environment variable holding the secret.
	Env string
}

// IsZero reports whether s names no secret.
func (s Source) IsZero() bool { return s.File == "" && s.Env == "" }

// String says where the secret is kept, never what it is: "file
// /run/secrets/x", "environment variable REDIS_PASSWORD", or "none". An
// environment variable whose name breaks the rules is not named (it may be
// the secret itself, written in the wrong field).
func (s Source) String() string {
	switch {
	case s.File != "" && s.Env != "":
		return "file " + s.File + " and an environment variable"
	case s.File != "":
		return "file " + s.File
	case s.Env != "" && !validEnvName(s.Env):
		return "an environment variable (its name is not shown: it breaks the naming rule, and may be the secret itself)"
	case s.Env != "":
		return "environment variable " + s.Env
	}
	return "none"
}

// Kind is "file" for a secret kept in a file, "env" for one in an
// environment variable ("" for none): the suffix of the flag or field
// that names it (--redis-password-file, password_env).
func (s Source) Kind() string {
	switch {
	case s.File != "":
		return "file"
	case s.Env != "":
		return "env"
	}
	return ""
}

// Rule is what a secret must be, and its name in messages.
type Rule struct {
	// What names the secret in errors: "admin token", "Redis password".
	What string
	// MinLength is the fewest bytes the value may have once trimmed.
	// Default 1: a secret is never empty.
	MinLength int
	// OneWord asks for one word of visible ASCII (0x21 to 0x7E): a token
	// sent in an HTTP header, with no white space or control byte inside.
	OneWord bool
}

// Error is a secret that could not be read, or breaks its Rule. Its text
// names the secret and its source, never the value.
type Error struct {
	// What is the Rule's name of the secret.
	What string
	// Source is where it was looked for.
	Source Source
	// Reason says what is wrong, in words.
	Reason string
	// Err is the cause, when there is one (a file that cannot be opened).
	Err error
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (%s): %s", e.What, e.Source, e.Reason)
}

// Unwrap returns the cause, or nil.
func (e *Error) Unwrap() error { return e.Err }

// ErrRule is the cause of an Error for a value that breaks its Rule:
// shorter than its MinLength, or not one word when it asks for one.
var ErrRule = errors.New("the secret breaks its rule")

// Read reads the secret src names, under rule. The zero Source gives ""
// and no error: no secret (whether one is required is the caller's
// question). Every error is an *Error.
func Read(src Source, rule Rule) (string, error) {
	if src.IsZero() {
		return "", nil
	}
	fail := func(err error, format string, args ...any) (string, error) {
		return "", &Error{What: rule.What, Source: src, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	var raw string
	switch {
	case src.File != "" && src.Env != "":
		return fail(nil, "give a file or an environment variable, not both")
	case src.File != "":
		b, err := configfile.ReadFile(src.File, MaxFileSize)
		if fe := (*configfile.FileError)(nil); errors.As(err, &fe) {
			return fail(fe.Err, "%s", fe.Reason)
		}
		raw = string(b)
	default:
		if !validEnvName(src.Env) {
			return fail(nil, "an environment variable's name is written in capitals, digits and _, not starting with a digit")
		}
		v, ok := os.LookupEnv(src.Env)
		if !ok {
			return fail(nil, "the variable is not set")
		}
		raw = v
	}
	v := strings.TrimSpace(raw)
	min := max(rule.MinLength, 1)
	switch {
	case v == "":
		return fail(nil, "empty (nothing but white space)")
	case rule.OneWord && (len(v) < min || strings.ContainsFunc(v, func(r rune) bool { return r < 0x21 || r > 0x7e })):
		return fail(ErrRule, "must be one word of at least %d characters, visible ASCII without white space inside (it travels in an HTTP header)", min)
	case len(v) < min:
		return fail(ErrRule, "must be at least %d characters (surrounding white space is not counted)", min)
	}
	return v, nil
}

// validEnvName reports whether name follows the rule for an environment
// variable's name: capitals, digits and _, not starting with a digit.
func validEnvName(name string) bool {
	if name == "" || '0' <= name[0] && name[0] <= '9' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Inline is the refusal of a secret written where it would be read by
// others: given on the command line (where is a flag, "--redis-password")
// or written in a configuration file (where is a field, "password"). file
// and env are the flags or fields that take it instead. The refusal never
// holds the value.
func Inline(where, file, env string) error {
	if strings.HasPrefix(where, "-") {
		return fmt.Errorf("%s: a secret is not given on the command line, where every user of the machine can read it (ps, /proc/PID/cmdline) and the shell keeps it in its history; give %s FILE (a file holding it) or %s VAR (an environment variable holding it)", where, file, env)
	}
	return fmt.Errorf("%s: a secret is not written in the configuration file, which is copied, diffed and committed; give %s (a file holding it) or %s (an environment variable holding it)", where, file, env)
}

// The rules of the secrets sluice takes, in one place so that each is
// read, checked and named alike wherever it is given.
var (
	// AdminToken is the admin API's bearer token: one word (it travels in
	// an Authorization header) of at least 16 characters.
	AdminToken = Rule{What: "admin token", MinLength: 16, OneWord: true}
	// KeyHMAC is the secret Redis keys are HMAC'd with: at least 16
	// characters.
	KeyHMAC = Rule{What: "key HMAC secret", MinLength: 16}
	// RedisPassword is the password of Redis's AUTH (its ACL user's, or
	// requirepass's).
	RedisPassword = Rule{What: "Redis password"}
	// SentinelPassword is the password of the Redis Sentinels' AUTH.
	SentinelPassword = Rule{What: "Sentinel password"}
)
