package console

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"time"
)

// The page's templates and files, embedded: there is no build step.
//
//go:embed templates/*.html static/*
var assets embed.FS

var (
	templates = template.Must(template.New("console").Funcs(template.FuncMap{
		"clock": func(t time.Time) string { return t.Format("15:04:05 MST") },
		"stamp": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	}).ParseFS(assets, "templates/*.html"))
	static = mustSub(assets, "static")
)

func mustSub(f fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return sub
}

// render writes one template: whole, or a 500 when it fails, never half
// a page.
func (c *console) render(w http.ResponseWriter, status int, name string, data any) {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name, data); err != nil {
		c.log.Error("relay console: render "+name, "err", err)
		http.Error(w, "the console could not render this page; the relay's log says why", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// problemData is an error page.
type problemData struct {
	Status  int
	Title   string
	Message string
}

// problem writes an error page with status.
func (c *console) problem(w http.ResponseWriter, status int, msg string) {
	c.render(w, status, "problem", problemData{Status: status, Title: http.StatusText(status), Message: msg})
}

// loginData is the login page.
type loginData struct {
	Problem string
}

// serveStatic serves the embedded style sheet and script; they are
// public (the login page needs them) and hold nothing of the relay's.
func serveStatic(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("file")
	if _, err := fs.Stat(static, name); err != nil || name == "." {
		http.NotFound(w, req)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeFileFS(w, req, static, name)
}
