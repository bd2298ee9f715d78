package polylbgrpc

import (
	"context"
	"math"
	"net/netip"

	polylb "github.com/polylb/polylb/bindings/go"
	"github.com/polylb/polylb/bindings/go/internal/utf8text"
	"google.golang.org/grpc/experimental/balancer/weight"
	"google.golang.org/grpc/resolver"
)

type invokerKey struct{}

// invokerAttr carries an endpoint's invoker fields; Equal lets gRPC compare
// endpoints that hold one.
type invokerAttr polylb.Invoker

func (a invokerAttr) Equal(o any) bool {
	b, ok := o.(invokerAttr)
	return ok && a == b
}

// SetInvoker returns a copy of the endpoint carrying the invoker fields
// polylb reads from it: Weight, StartTimeMs and WarmupMs (Dubbo's warm-up)
// and Zone. ID and Address are ignored: the policy gives each endpoint its
// id and takes its first address. Start from polylb.NewInvoker for Dubbo's
// defaults (a zero Weight is weight 0: see polylb.Invoker).
// A negative Weight is taken as 0: the library rejects a set that holds one,
// and one endpoint must not keep the ClientConn from ever getting a picker;
// for the same reason a Zone (or address) that is not UTF-8 reaches the
// library with each stray byte written as \xNN.
// A resolver sets it, as it would gRPC's weight attribute.
func SetInvoker(endpoint resolver.Endpoint, inv polylb.Invoker) resolver.Endpoint {
	inv.ID, inv.Address = 0, ""
	inv.Weight = max(inv.Weight, 0)
	endpoint.Attributes = endpoint.Attributes.WithValue(invokerKey{}, invokerAttr(inv))
	return endpoint
}

// invokerOf is the endpoint's invoker: SetInvoker's fields if set; otherwise
// Dubbo's defaults with gRPC's weight attribute as the weight when it is set
// (it is unset, or invalid, at 0; above polylb's int32 range it is capped).
func invokerOf(id uint64, endpoint resolver.Endpoint) polylb.Invoker {
	address := ""
	if len(endpoint.Addresses) > 0 {
		address = utf8text.Escape(ringAddress(endpoint.Addresses[0].Addr))
	}
	if attr, ok := endpoint.Attributes.Value(invokerKey{}).(invokerAttr); ok {
		inv := polylb.Invoker(attr)
		inv.ID, inv.Address, inv.Zone = id, address, utf8text.Escape(inv.Zone)
		return inv
	}
	inv := polylb.NewInvoker(id, address)
	if w := weight.FromEndpoint(endpoint).Weight; w > 0 {
		inv.Weight = int32(min(w, math.MaxInt32))
	}
	return inv
}

// ringAddress is the invoker address of an endpoint's first address: an IP
// and port in the one form the Java policy gives every IP (RFC 5952's IPv6,
// an IPv4-mapped IPv6 as its IPv4, the port in decimal), so that a key goes
// to the same server from Go and Java clients. grpc-go's resolvers pass an
// IP literal on as it was written ("dns:///[2001:DB8:0:0:0:0:0:1]:443",
// xDS, a manual resolver), where grpc-java parses it into an InetAddress:
// "[2001:DB8:0:0:0:0:0:1]:443" was placed apart from Java's
// "[2001:db8::1]:443", and two thirds of the keys went to other servers.
// Anything else (a host name, a unix socket path) is kept as it is.
func ringAddress(addr string) string {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return addr
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
}

type keyKey struct{}

// WithKey returns a context whose RPCs carry key for the hash strategies
// (consistenthash, boundedhash, maglev, rendezvous): the same key goes to the same endpoint
// while the set allows. Dubbo hashes the call's first argument; with gRPC
// the caller says what the key is. Without a key an RPC hashes the empty key.
func WithKey(ctx context.Context, key []byte) context.Context {
	return context.WithValue(ctx, keyKey{}, key)
}

func keyOf(ctx context.Context) []byte {
	if ctx == nil {
		return nil
	}
	key, _ := ctx.Value(keyKey{}).([]byte)
	return key
}
