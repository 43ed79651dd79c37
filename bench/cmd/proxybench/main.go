// Command proxybench is the other side of `make bench-gateway`: the
// upstream every proxy forwards to (-mode upstream: 200 and a 2-byte body)
// and the anchor, a plain httputil.ReverseProxy with nothing in front of it
// (-mode proxy), against which `sluice gateway` is measured with wrk.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"
)

func main() {
	mode := flag.String("mode", "upstream", "upstream or proxy")
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	upstream := flag.String("upstream", "", "the upstream URL (-mode proxy)")
	flag.Parse()
	var h http.Handler
	switch *mode {
	case "upstream":
		body := []byte("ok")
		h = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write(body)
		})
	case "proxy":
		u, err := url.Parse(*upstream)
		if err != nil || u.Host == "" {
			fmt.Fprintln(os.Stderr, "proxybench: -upstream must be an http URL")
			os.Exit(2)
		}
		// The same proxy the gateway builds: Rewrite to the upstream,
		// X-Forwarded-* set, the default transport with as many idle
		// connections per host as the gateway keeps (1024).
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 1024
		t.MaxIdleConnsPerHost = 1024
		h = &httputil.ReverseProxy{
			Rewrite: func(r *httputil.ProxyRequest) {
				r.SetURL(u)
				r.SetXForwarded()
			},
			Transport: t,
			// wrk closing its connections at the end cancels requests in
			// flight: not worth a line each.
			ErrorLog: log.New(io.Discard, "", 0),
		}
	default:
		fmt.Fprintln(os.Stderr, "proxybench: -mode is upstream or proxy")
		os.Exit(2)
	}
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
