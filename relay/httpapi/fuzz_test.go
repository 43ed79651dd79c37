package httpapi

import (
	"bytes"
	"testing"
	"time"
)

// FuzzTasks: whatever a client posts, reading it as a task, an array or
// NDJSON answers without panicking; a refusal is 400 or 413 with a reason,
// naming a line that is in the body; an accepted body gives tasks whose
// requests either convert or say which field is wrong.
func FuzzTasks(f *testing.F) {
	f.Add([]byte(`{"method":"POST","path":"/v1/items","headers":{"A":"b","C":["d","e"]},"json":{"x":1},"key":"k","delay":"90s","timeout":"1h"}`))
	f.Add([]byte(`[{"url":"http://h/x","body_base64":"aGk="},{"path":"/y","body":"text","not_before":"2026-01-01T00:00:00Z"}]`))
	f.Add([]byte("{\"path\":\"/a\"}\n\n{\"path\":\"/b\",\"priority\":3}\n"))
	f.Add([]byte(`{"path":"/a","headers":{"X":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		lines := bytes.Count(data, []byte("\n")) + 1
		check := func(tasks []taskIn, perr *parseError, n int) {
			if perr != nil {
				if (perr.status != 400 && perr.status != 413) || perr.reason == "" || perr.line < 0 || perr.line > n {
					t.Fatalf("%q: status %d line %d reason %q", data, perr.status, perr.line, perr.reason)
				}
				return
			}
			if len(tasks) == 0 || len(tasks) > 100 {
				t.Fatalf("%q: %d tasks accepted", data, len(tasks))
			}
			for _, task := range tasks {
				if _, err := task.request(time.Now()); err != nil {
					if fe, ok := err.(*fieldError); !ok || fe.field == "" || fe.reason == "" {
						t.Fatalf("%q: %v", data, err)
					}
				}
			}
		}
		jsonTasks, _, jsonErr := readJSON(data, 100)
		check(jsonTasks, jsonErr, max(lines, 101))
		tasks, taskLines, perr := readNDJSON(data, 100)
		check(tasks, perr, lines)
		if perr == nil && len(taskLines) != len(tasks) {
			t.Fatalf("%q: %d tasks, %d lines", data, len(tasks), len(taskLines))
		}
	})
}
