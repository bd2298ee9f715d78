package polylbdubbo

import (
	"testing"
	"time"

	"dubbo.apache.org/dubbo-go/v3/common"
)

// The ring address of a provider is Java Dubbo's URL.getAddress(), so that a Go
// and a Java consumer hash a key to the same provider: an IPv6 host keeps its
// brackets ("[::1]:20880", where ip:port gave "::1:20880" and moved keys), and
// a URL without a port is its host alone (where ip:port gave ":" for every such
// provider, all on one point of the ring).
func TestRingAddressIsJavaDubbosGetAddress(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"dubbo://10.0.0.1:20880/com.example.S", "10.0.0.1:20880"},
		{"dubbo://[::1]:20880/com.example.S", "[::1]:20880"},
		{"dubbo://[2001:db8::7]:20881/com.example.S", "[2001:db8::7]:20881"},
		{"dubbo://10.0.0.1/com.example.S", "10.0.0.1"},
		{"tri://provider.example:50051/com.example.S", "provider.example:50051"},
		// Java Dubbo's port is an int: leading zeros go, and 0 is no port.
		{"dubbo://10.0.0.1:020880/com.example.S", "10.0.0.1:20880"},
		{"dubbo://[::1]:020880/com.example.S", "[::1]:20880"},
		{"dubbo://10.0.0.1:0/com.example.S", "10.0.0.1"},
		{"dubbo://[::1]:0/com.example.S", "[::1]"},
	} {
		u, err := common.NewURL(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := providerInvoker(1, u, time.Now(), "").Address; got != tc.want {
			t.Errorf("%s: ring address %q, want %q (Java Dubbo's URL.getAddress())", tc.url, got, tc.want)
		}
	}
}
