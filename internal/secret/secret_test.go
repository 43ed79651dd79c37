package secret_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/internal/secret"
)

func write(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Every secret is read alike, from a file or a variable: trimmed of
// surrounding white space, refused empty, short or split.
func TestRead(t *testing.T) {
	t.Setenv("SLUICE_TEST_SECRET", "  from-the-environment-1\n")
	t.Setenv("SLUICE_TEST_BLANK", " \n")
	for _, c := range []struct {
		name string
		src  secret.Source
		rule secret.Rule
		want string
	}{
		{"a file, trimmed", secret.Source{File: write(t, "\t hunter2-hunter2-hunter2\r\n\n")}, secret.AdminToken, "hunter2-hunter2-hunter2"},
		{"exactly the minimum", secret.Source{File: write(t, "sixteen-chars-ok")}, secret.AdminToken, "sixteen-chars-ok"},
		{"a variable, trimmed", secret.Source{Env: "SLUICE_TEST_SECRET"}, secret.KeyHMAC, "from-the-environment-1"},
		{"a password with a space inside", secret.Source{File: write(t, "correct horse\n")}, secret.RedisPassword, "correct horse"},
		{"a one-character password", secret.Source{File: write(t, "x")}, secret.RedisPassword, "x"},
		{"none", secret.Source{}, secret.AdminToken, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := secret.Read(c.src, c.rule)
			if err != nil || got != c.want {
				t.Fatalf("Read(%v) = %q, %v; want %q", c.src, got, err, c.want)
			}
		})
	}
}

// Each refusal names the secret and where it was looked for, says why in
// words, and never holds the value.
func TestReadRefuses(t *testing.T) {
	t.Setenv("SLUICE_TEST_BLANK", " \n")
	t.Setenv("SLUICE_TEST_SHORT", "short-value")
	dir := t.TempDir()
	big := write(t, strings.Repeat("x", secret.MaxFileSize+1))
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		src   secret.Source
		rule  secret.Rule
		says  []string
		is    error
		value string // must not appear
	}{
		{"missing file", secret.Source{File: filepath.Join(dir, "nope")}, secret.RedisPassword,
			[]string{"Redis password (file " + filepath.Join(dir, "nope") + "): no such file"}, os.ErrNotExist, ""},
		{"a directory", secret.Source{File: dir}, secret.AdminToken,
			[]string{"admin token (file " + dir + "): a directory, not a file"}, nil, ""},
		{"a device", secret.Source{File: "/dev/zero"}, secret.KeyHMAC,
			[]string{"key HMAC secret (file /dev/zero): not a regular file"}, nil, ""},
		{"a named pipe (opening it would block)", secret.Source{File: fifo}, secret.RedisPassword,
			[]string{"Redis password (file " + fifo + "): not a regular file"}, nil, ""},
		{"too large", secret.Source{File: big}, secret.RedisPassword,
			[]string{"larger than 65536 bytes"}, nil, ""},
		{"empty file", secret.Source{File: write(t, "")}, secret.RedisPassword,
			[]string{"Redis password (file ", "): empty"}, nil, ""},
		{"blank file", secret.Source{File: write(t, " \n\t\n")}, secret.AdminToken,
			[]string{"empty (nothing but white space)"}, nil, ""},
		{"short token", secret.Source{File: write(t, "fifteen-chars-x\n")}, secret.AdminToken,
			[]string{"admin token (file ", "one word of at least 16 characters"}, secret.ErrRule, "fifteen-chars-x"},
		{"a control byte inside", secret.Source{File: write(t, "an-admin\x00token-of-some-length\n")}, secret.AdminToken,
			[]string{"visible ASCII"}, secret.ErrRule, ""},
		{"a byte beyond ASCII", secret.Source{File: write(t, "an-admin-tökén-of-some-length\n")}, secret.AdminToken,
			[]string{"visible ASCII"}, secret.ErrRule, ""},
		{"two words", secret.Source{File: write(t, "an-admin token-of-some-length\n")}, secret.AdminToken,
			[]string{"one word of at least 16 characters, visible ASCII without white space inside"}, secret.ErrRule, "token-of-some-length"},
		{"short HMAC secret", secret.Source{Env: "SLUICE_TEST_SHORT"}, secret.KeyHMAC,
			[]string{"key HMAC secret (environment variable SLUICE_TEST_SHORT): must be at least 16 characters"}, secret.ErrRule, "short-value"},
		{"unset variable", secret.Source{Env: "SLUICE_TEST_UNSET_" + strings.ToUpper(t.Name()[:4])}, secret.RedisPassword,
			[]string{"Redis password (environment variable SLUICE_TEST_UNSET_TEST): the variable is not set"}, nil, ""},
		{"blank variable", secret.Source{Env: "SLUICE_TEST_BLANK"}, secret.SentinelPassword,
			[]string{"Sentinel password (environment variable SLUICE_TEST_BLANK): empty"}, nil, ""},
		{"a name that may be the secret", secret.Source{Env: "hunter2!"}, secret.RedisPassword,
			[]string{"Redis password (an environment variable (its name is not shown", "written in capitals, digits and _"}, nil, "hunter2"},
		{"both", secret.Source{File: "/run/secrets/x", Env: "X"}, secret.RedisPassword,
			[]string{"give a file or an environment variable, not both"}, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := secret.Read(c.src, c.rule)
			if err == nil {
				t.Fatalf("Read(%v) = %q, no error", c.src, got)
			}
			var se *secret.Error
			if !errors.As(err, &se) {
				t.Fatalf("%v: not a *secret.Error", err)
			}
			for _, s := range c.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%v\nwant it to say %q", err, s)
				}
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("%v: not %v", err, c.is)
			}
			if c.value != "" && strings.Contains(err.Error(), c.value) {
				t.Errorf("%v: holds the value %q", err, c.value)
			}
		})
	}
}

// Whatever a secret holds and whatever rule refuses it, the error never
// holds it.
func TestErrorsNeverHoldTheValue(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SLUICE_TEST_SECRET_VALUE", "")
	rapid.Check(t, func(t *rapid.T) {
		value := rapid.StringMatching(`[ -~]{4,40}`).Draw(t, "value")
		if strings.TrimSpace(value) != value || len(value) < 4 {
			t.Skip("trimmed values are compared")
		}
		rule := secret.Rule{What: "secret", MinLength: rapid.IntRange(1, 60).Draw(t, "min"), OneWord: rapid.Bool().Draw(t, "oneWord")}
		p := filepath.Join(dir, "s")
		if err := os.WriteFile(p, []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
		// The variable holding it is read under a fixed name; the value
		// itself given as a name (a secret pasted where its variable's
		// name goes) is checked only when it is not a valid name, since a
		// valid name is said in errors as every variable's name is.
		if err := os.Setenv("SLUICE_TEST_SECRET_VALUE", value); err != nil {
			t.Fatal(err)
		}
		sources := []secret.Source{{File: p}, {Env: "SLUICE_TEST_SECRET_VALUE"}, {File: p, Env: "SLUICE_TEST_SECRET_VALUE"}}
		if !regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`).MatchString(value) {
			sources = append(sources, secret.Source{Env: value}, secret.Source{File: p, Env: value})
		}
		for _, src := range sources {
			if _, err := secret.Read(src, rule); err != nil && strings.Contains(err.Error(), value) {
				t.Fatalf("Read(%+v) = %v: holds the value", src, err)
			}
		}
	})
}

// Inline's two refusals, for a flag and for a field, name what to give
// instead.
func TestInline(t *testing.T) {
	t.Parallel()
	flag := secret.Inline("--redis-password", "--redis-password-file", "--redis-password-env").Error()
	for _, s := range []string{"--redis-password: a secret is not given on the command line", "ps, /proc/PID/cmdline", "--redis-password-file FILE", "--redis-password-env VAR"} {
		if !strings.Contains(flag, s) {
			t.Errorf("%q\nwant it to say %q", flag, s)
		}
	}
	field := secret.Inline("password", "password_file", "password_env").Error()
	for _, s := range []string{"password: a secret is not written in the configuration file", "give password_file (a file holding it) or password_env"} {
		if !strings.Contains(field, s) {
			t.Errorf("%q\nwant it to say %q", field, s)
		}
	}
}
