package polylbdubbo

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"dubbo.apache.org/dubbo-go/v3/common"

	polylb "github.com/polylb/polylb/bindings/go"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Weighted random through dubbo-go's failover cluster: provider weights from
// the URL's weight parameter, shares within 5 sigma of the binomial.
func TestWeightsAreHonoured(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-random"
	params := "loadbalance=" + lbName + "&polylb.config=seed%3D42"
	weights := []int{100, 200, 300}
	var ps []*provider
	for i, w := range weights {
		ps = append(ps, newProvider(t, svc, fmt.Sprintf("10.0.0.%d:20000", i+1), fmt.Sprintf("%s&weight=%d", params, w)))
	}
	ci := clusterOf(t, "failover", wrapAll(ps...))
	const n = 12000
	for i := 0; i < n; i++ {
		if res := call(ci, "sayHello"); res.Error() != nil {
			t.Fatal(res.Error())
		}
	}
	total := 0
	for _, w := range weights {
		total += w
	}
	for i, p := range ps {
		share := float64(weights[i]) / float64(total)
		mean := n * share
		sigma := math.Sqrt(n * share * (1 - share))
		if got := float64(p.calls.Load()); math.Abs(got-mean) > 5*sigma {
			t.Errorf("weight %d: %v calls, want %v ± %.0f (5σ)", weights[i], got, mean, 5*sigma)
		}
	}
	assertNoneInFlight(t, lbName, svc)
}

// A provider's zone URL parameter reaches polylb: with polylb.config's
// zone=zone-a (the consumer's zone) every call goes to the zone-a provider
// while it is healthy, as with the Java adapter. A zone that is not UTF-8
// (%FF unescapes to the byte) reaches the library as \xff, not as a set it
// rejects (which failed every call of the service).
func TestProvidersZoneIsPassedToPolylb(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-roundrobin"
	params := "loadbalance=" + lbName + "&polylb.config=zone%3Dzone-a"
	pa := newProvider(t, svc, "10.0.0.1:20000", params+"&zone=zone-a")
	pb := newProvider(t, svc, "10.0.0.2:20000", params+"&zone=zone-b")
	pc := newProvider(t, svc, "10.0.0.3:20000", params+"&zone=%FF")
	ci := clusterOf(t, "failover", wrapAll(pa, pb, pc))
	for i := 0; i < 100; i++ {
		if res := call(ci, "sayHello"); res.Error() != nil {
			t.Fatal(res.Error())
		}
	}
	if a, b, c := pa.calls.Load(), pb.calls.Load(), pc.calls.Load(); a != 100 {
		t.Errorf("zone-a, zone-b, \\xff providers got %d, %d, %d calls; want all 100 in the consumer's zone-a", a, b, c)
	}
	stats, err := Get(lbName).Stats(svc)
	if err != nil {
		t.Fatal(err)
	}
	zones := map[string]string{}
	for _, inv := range stats[0].Invokers {
		zones[inv.Address] = inv.Zone
	}
	if want := map[string]string{"10.0.0.1:20000": "zone-a", "10.0.0.2:20000": "zone-b", "10.0.0.3:20000": `\xff`}; fmt.Sprint(zones) != fmt.Sprint(want) {
		t.Errorf("zones %q, want %q", zones, want)
	}
}

// Round-robin positions are per method: calls of two methods interleaved get
// each method's own sequence (weights 3:1 give a,a,b,a per method), where a
// shared position would split one sequence between them.
func TestMethodsHaveTheirOwnState(t *testing.T) {
	svc := serviceName(t)
	const lbName = "polylb-roundrobin"
	a := newProvider(t, svc, "10.0.0.1:20000", "loadbalance="+lbName+"&weight=300")
	b := newProvider(t, svc, "10.0.0.2:20000", "loadbalance="+lbName+"&weight=100")
	ci := clusterOf(t, "failover", wrapAll(a, b))
	var hello, bye []string
	for i := 0; i < 8; i++ {
		hello = append(hello, addrOf(call(ci, "sayHello")))
		bye = append(bye, addrOf(call(ci, "sayBye")))
	}
	want := fmt.Sprint([]string{"10.0.0.1:20000", "10.0.0.1:20000", "10.0.0.2:20000", "10.0.0.1:20000",
		"10.0.0.1:20000", "10.0.0.1:20000", "10.0.0.2:20000", "10.0.0.1:20000"})
	if fmt.Sprint(hello) != want || fmt.Sprint(bye) != want {
		t.Errorf("sayHello %v\nsayBye   %v\nwant each %v", hello, bye, want)
	}
}

// The hashing strategies key on the arguments hash.arguments names (here the
// second), as Java Dubbo does: calls with the same second argument stick to
// one provider whatever the first, different keys spread, and each key goes
// where a polylb balancer of the same strategy over the same addresses sends
// that argument's text (so the adapter passes the key itself, nothing else).
func TestHashArgumentsSelectTheKey(t *testing.T) {
	for _, strategy := range []string{"consistenthash", "boundedhash", "maglev", "rendezvous"} {
		t.Run(strategy, func(t *testing.T) {
			svc := serviceName(t)
			lbName := "polylb-" + strategy
			params := "loadbalance=" + lbName + "&hash.arguments=1"
			var ps []*provider
			var set []polylb.Invoker
			for i := 1; i <= 4; i++ {
				addr := fmt.Sprintf("10.0.0.%d:20000", i)
				ps = append(ps, newProvider(t, svc, addr, params))
				set = append(set, polylb.NewInvoker(uint64(i), addr))
			}
			reference, err := polylb.New("loadbalance=" + strategy)
			if err != nil {
				t.Fatal(err)
			}
			defer reference.Close()
			if err := reference.Update(set); err != nil {
				t.Fatal(err)
			}
			ci := clusterOf(t, "failover", wrapAll(ps...))
			seen := map[string]bool{}
			for user := 0; user < 64; user++ {
				key := fmt.Sprintf("user-%d", user)
				first := addrOf(call(ci, "get", "ignored-0", key))
				for j := 1; j < 5; j++ {
					if got := addrOf(call(ci, "get", fmt.Sprintf("ignored-%d", j), key)); got != first {
						t.Fatalf("key %s went to %s, then %s", key, first, got)
					}
				}
				id, err := reference.Select(polylb.ServiceLevel, []byte(key))
				if err != nil {
					t.Fatal(err)
				}
				if err := reference.Report(polylb.ServiceLevel, id, time.Millisecond, polylb.Success); err != nil {
					t.Fatal(err)
				}
				if want := set[id-1].Address; first != want {
					t.Fatalf("key %s went to %s; %s over the same addresses picks %s", key, first, strategy, want)
				}
				seen[first] = true
			}
			if len(seen) < 3 {
				t.Errorf("64 keys reached only %v", seen)
			}
			assertNoneInFlight(t, lbName, svc)
		})
	}
}

// hash.nodes is the ring's (consistenthash, boundedhash); maglev has a
// table instead and rendezvous neither, so they take the key's arguments but
// not hash.nodes, and a hash.nodes on their URLs (say a ring's value left
// behind) is not their error.
func TestMethodConfigOfTheHashingStrategies(t *testing.T) {
	for _, tc := range []struct {
		strategy, want string
		args           []int
	}{
		{"consistenthash", "loadbalance=consistenthash&hash.nodes=3", []int{2, 0}},
		{"boundedhash", "loadbalance=boundedhash&hash.nodes=3", []int{2, 0}},
		{"maglev", "loadbalance=maglev", []int{2, 0}},
		{"rendezvous", "loadbalance=rendezvous", []int{2, 0}},
		{"p2c", "loadbalance=p2c", nil},
		{"orca", "loadbalance=orca", nil},
	} {
		u, err := common.NewURL("tri://10.0.0.1:20000/svc?hash.nodes=3&hash.arguments=2,0")
		if err != nil {
			t.Fatal(err)
		}
		mc, err := readMethodConfig(u, "get", tc.strategy)
		if err != nil {
			t.Fatalf("%s: %v", tc.strategy, err)
		}
		if mc.config != tc.want || fmt.Sprint(mc.hashArgs) != fmt.Sprint(tc.args) {
			t.Errorf("%s: config %q, key arguments %v; want %q, %v", tc.strategy, mc.config, mc.hashArgs, tc.want, tc.args)
		}
		if !mc.weighted != (tc.strategy == "consistenthash") {
			t.Errorf("%s: weighted %v", tc.strategy, mc.weighted)
		}
	}
}

func TestHashKeyText(t *testing.T) {
	for _, tc := range []struct {
		args    []any
		indexes []int
		want    string
	}{
		{[]any{"a", "b"}, []int{0}, "a"},
		{[]any{"a", "b"}, []int{1, 0}, "ba"},
		{[]any{"a", 42, int64(-7), true}, []int{1, 2, 3}, "42-7true"},
		{[]any{nil, "x"}, []int{0, 1}, "nullx"},
		{[]any{"a"}, []int{3, -1}, ""},
		{[]any{1.5}, []int{0}, "1.5"},
	} {
		if got := string(hashKey(newInvocation("m", tc.args...), tc.indexes)); got != tc.want {
			t.Errorf("args %v at %v: key %q, want %q", tc.args, tc.indexes, got, tc.want)
		}
	}
	// A generic call is keyed by its real arguments.
	generic := newInvocation("$invoke", "get", []string{"java.lang.String"}, []any{"user-1"})
	if got := string(hashKey(generic, []int{0})); got != "user-1" {
		t.Errorf("generic call: key %q, want user-1", got)
	}
}

type keyAddress struct{ City string }

type keyUser struct {
	ID   string
	Home *keyAddress
	Tags map[int]*string
	Any  any
	next *keyUser
}

type keyName struct{ first, last string }

func (n *keyName) String() string { return n.first + " " + n.last }

// Pointers in an argument are followed to their values: equal values give
// equal keys however they are allocated (fmt printed a nested pointer as its
// address, so one user's calls spread over every provider), values without
// pointers keep fmt's text, and a value that points back into itself ends.
func TestHashKeyFollowsPointers(t *testing.T) {
	str := func(s string) *string { return &s }
	user := func() *keyUser {
		return &keyUser{ID: "u-1", Home: &keyAddress{"Paris"},
			Tags: map[int]*string{10: str("b"), 9: str("a")}, Any: str("x")}
	}
	key := func(arg any) string { return string(hashKey(newInvocation("m", arg), []int{0})) }
	for _, tc := range []struct {
		a, b any
		want string
	}{
		{str("user-1"), str("user-1"), "user-1"},
		{user(), user(), "{u-1 {Paris} map[9:a 10:b] x <nil>}"},
		{[]*keyAddress{{"Oslo"}, nil}, []*keyAddress{{"Oslo"}, nil}, "[{Oslo} <nil>]"},
		{&keyName{"Ada", "Lovelace"}, &keyName{"Ada", "Lovelace"}, "Ada Lovelace"},
		{keyAddress{"Rome"}, keyAddress{"Rome"}, "{Rome}"},
		{map[string]int{"b": 2, "a": 1}, map[string]int{"a": 1, "b": 2}, "map[a:1 b:2]"},
	} {
		if ka, kb := key(tc.a), key(tc.b); ka != tc.want || kb != tc.want {
			t.Errorf("%#v: keys %q and %q, want %q", tc.a, ka, kb, tc.want)
		}
	}
	if key(user()) == key(&keyUser{ID: "u-1", Home: &keyAddress{"Lyon"}}) {
		t.Error("different values behind the pointers, the same key")
	}
	loop := &keyUser{ID: "loop"}
	loop.next = loop
	if k := key(loop); !strings.HasPrefix(k, "{loop <nil> map[] <nil> {loop") || !strings.Contains(k, "...") {
		t.Errorf("a cyclic value: key %q", k)
	}
	if k := key(make(chan int)); k != "chan int" {
		t.Errorf("a channel: key %q", k)
	}
}

// A protobuf request (Triple's argument) is keyed by its deterministic wire
// form: its String() is prototext, which adds a second space between fields in
// some binaries and not others (protobuf-go varies it by a hash of the
// executable), so one request went to provider 4 from one consumer build and
// to provider 7 from another. Legacy (APIv1) messages are keyed the same way.
func TestHashKeyOfProtobufMessagesIsTheSameInEveryBinary(t *testing.T) {
	key := func(arg any) []byte { return hashKey(newInvocation("m", arg), []int{0}) }
	req := &durationpb.Duration{Seconds: 42, Nanos: 7}
	want := []byte{0x08, 42, 0x10, 7}
	if got := key(req); !bytes.Equal(got, want) {
		t.Errorf("key of %v: %q, want its wire form %q", req, got, want)
	}
	if got := key(protoadapt.MessageV1Of(req)); !bytes.Equal(got, want) {
		t.Errorf("key of a legacy message: %q, want %q", got, want)
	}
	type wrapper struct{ Req *durationpb.Duration }
	if got := key(wrapper{req}); !bytes.Equal(got, append(append([]byte("{"), want...), '}')) {
		t.Errorf("key of a struct holding a message: %q", got)
	}
}

// A nil pointer argument is Java's null, as an untyped nil is: a Java
// consumer passing null for the argument keys "null".
func TestHashKeyOfANilPointerIsNull(t *testing.T) {
	for _, arg := range []any{(*string)(nil), (*keyAddress)(nil), (*durationpb.Duration)(nil)} {
		if got := string(hashKey(newInvocation("m", arg, "x"), []int{0, 1})); got != "nullx" {
			t.Errorf("%T nil: key %q, want %q", arg, got, "nullx")
		}
	}
}
