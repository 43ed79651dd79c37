package clientip_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/sluicehq/sluice/clientip"
)

// Behind two load balancers in 10.0.0.0/8 that append to X-Forwarded-For,
// the client is the first address from the right that is not one of them,
// whatever the client wrote itself; IPv6 clients are grouped by /64.
func ExampleResolver_Key() {
	trusted, err := clientip.ParseTrusted([]string{"10.0.0.0/8", "2001:db8:ffff::1"})
	if err != nil {
		panic(err)
	}
	r, err := clientip.New(clientip.Options{TrustedProxies: trusted})
	if err != nil {
		panic(err)
	}

	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.0.0.3:51234" // the nearer load balancer
	req.Header.Set("X-Forwarded-For", "6.6.6.6, 203.0.113.7, 10.0.0.2")
	key, _ := r.Key(req)
	fmt.Println(key)

	req.Header.Set("X-Forwarded-For", "[2001:db8:1:2::99]:4711")
	key, _ = r.Key(req)
	fmt.Println(key)

	req.RemoteAddr = "198.51.100.23:40000" // not a proxy: its header is not read
	key, _ = r.Key(req)
	fmt.Println(key)

	req.RemoteAddr = ""
	_, err = r.Key(req)
	fmt.Println(err)
	// Output:
	// 203.0.113.7/32
	// 2001:db8:1:2::/64
	// 198.51.100.23/32
	// clientip: invalid remote address: RemoteAddr is empty (a Unix socket, or a request not received by a server?)
}

// With Forwarded (RFC 7239), the for= parameter of each element is read.
func ExampleNew_forwarded() {
	trusted, _ := clientip.ParseTrusted([]string{"10.0.0.0/8"})
	r, err := clientip.New(clientip.Options{TrustedProxies: trusted, Header: clientip.Forwarded, IPv6Prefix: 48})
	if err != nil {
		panic(err)
	}
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.0.0.3:51234"
	req.Header.Set("Forwarded", `for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.2`)
	p, _ := r.Client(req)
	fmt.Println(p, p.Bits())
	// Output:
	// 2001:db8:cafe::/48 48
}
