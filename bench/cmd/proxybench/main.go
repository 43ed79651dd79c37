// Command proxybench is the other side of `make bench-gateway`: the
// upstream every proxy forwards to (-mode upstream: 200 and a 2-byte body);
// the anchor, a plain httputil.ReverseProxy with nothing in front of it
// (-mode proxy), against which `sluice gateway` is measured with wrk; and
// the alternative engine the gateway was measured against, a proxy of
// valyala/fasthttp's server and HostClient with nothing in it (-mode
// fasthttp: what that engine gives before any rule, header or timeout
// work); and sluice gateway itself in this process (-mode gateway -config
// FILE), so that -cpuprofile, which writes a CPU profile until SIGTERM,
// sees it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/config"
)

func main() {
	mode := flag.String("mode", "upstream", "upstream or proxy")
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	upstream := flag.String("upstream", "", "the upstream URL (-mode proxy)")
	configFile := flag.String("config", "gateway.yaml", "the gateway's configuration (-mode gateway)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile here until SIGTERM")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		_ = pprof.StartCPUProfile(f)
		go func() {
			c := make(chan os.Signal, 1)
			signal.Notify(c, syscall.SIGTERM, os.Interrupt)
			<-c
			pprof.StopCPUProfile()
			f.Close()
			os.Exit(0)
		}()
	}
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
	case "gateway":
		// sluice gateway in this process, so that -cpuprofile sees it.
		cfg, err := config.Load(*configFile)
		if err != nil {
			log.Fatal(err)
		}
		g, err := gateway.New(gateway.Options{Config: cfg, Upstream: *upstream})
		if err != nil {
			log.Fatal(err)
		}
		log.Fatal(g.Run(context.Background()))
	case "fasthttp":
		u, err := url.Parse(*upstream)
		if err != nil || u.Host == "" {
			fmt.Fprintln(os.Stderr, "proxybench: -upstream must be an http URL")
			os.Exit(2)
		}
		hc := &fasthttp.HostClient{Addr: u.Host, MaxConns: 1024}
		s := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.Request.Header.Set("X-Forwarded-For", ctx.RemoteIP().String())
			if err := hc.Do(&ctx.Request, &ctx.Response); err != nil {
				ctx.Error(err.Error(), 502)
			}
		}}
		log.Fatal(s.ListenAndServe(*listen))
	default:
		fmt.Fprintln(os.Stderr, "proxybench: -mode is upstream, proxy or fasthttp")
		os.Exit(2)
	}
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
