package polylb_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
)

// A round-robin balancer over two providers weighted 3:1: select before each
// call, report after it. README.md shows this function's body verbatim
// (TestReadmeShowsTheExample checks it).
func Example() {
	lb, err := polylb.New("loadbalance=roundrobin")
	if err != nil {
		log.Fatal(err)
	}
	defer lb.Close()

	big := polylb.NewInvoker(1, "10.0.0.1:20880")
	big.Weight = 300
	small := polylb.NewInvoker(2, "10.0.0.2:20880")
	if err := lb.Update([]polylb.Invoker{big, small}); err != nil {
		log.Fatal(err)
	}

	sayHello, err := lb.Method("sayHello")
	if err != nil {
		log.Fatal(err)
	}
	var picks []uint64
	for i := 0; i < 8; i++ {
		id, err := lb.Select(sayHello, nil)
		if err != nil {
			log.Fatal(err)
		}
		start := time.Now()
		// ... send the call to provider id ...
		if err := lb.Report(sayHello, id, time.Since(start), polylb.Success); err != nil {
			log.Fatal(err)
		}
		picks = append(picks, id)
	}
	fmt.Println("picks:", picks)

	stats, err := lb.Stats()
	if err != nil {
		log.Fatal(err)
	}
	for _, inv := range stats.Invokers {
		fmt.Printf("%s: selected %d, in flight %d\n", inv.Address, inv.Selected, inv.Active)
	}
	// Output:
	// picks: [1 1 2 1 1 1 2 1]
	// 10.0.0.1:20880: selected 6, in flight 0
	// 10.0.0.2:20880: selected 2, in flight 0
}

// Failover: retry on another provider, excluding the ones already tried, as
// Dubbo's failover cluster does. The consistent-hash key keeps a user on one
// provider while it is healthy.
func ExampleBalancer_SelectAmong() {
	lb, err := polylb.New("loadbalance=consistenthash")
	if err != nil {
		log.Fatal(err)
	}
	defer lb.Close()
	var providers []polylb.Invoker
	for n := uint64(1); n <= 3; n++ {
		providers = append(providers, polylb.NewInvoker(n, fmt.Sprintf("10.0.0.%d:20880", n)))
	}
	if err := lb.Update(providers); err != nil {
		log.Fatal(err)
	}

	key := []byte("user-1")
	var tried []uint64
	for attempt := 0; ; attempt++ {
		id, err := lb.SelectAmong(polylb.ServiceLevel, key, nil, tried)
		if errors.Is(err, polylb.ErrNoCandidate) {
			fmt.Println("every provider failed")
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("attempt", attempt, "->", providers[id-1].Address)
		lb.Report(polylb.ServiceLevel, id, time.Millisecond, polylb.Failure) // pretend it failed
		tried = append(tried, id)
	}
	// Output:
	// attempt 0 -> 10.0.0.3:20880
	// attempt 1 -> 10.0.0.1:20880
	// attempt 2 -> 10.0.0.2:20880
	// every provider failed
}

// A Call pairs the select and the report: made before the RPC, ended with
// the RPC's error when the function returns.
func ExampleBalancer_Call() {
	lb, err := polylb.New("loadbalance=roundrobin")
	if err != nil {
		log.Fatal(err)
	}
	defer lb.Close()
	if err := lb.Update([]polylb.Invoker{
		polylb.NewInvoker(1, "10.0.0.1:20880"),
		polylb.NewInvoker(2, "10.0.0.2:20880"),
	}); err != nil {
		log.Fatal(err)
	}
	// send stands for the RPC to provider id; provider 2 never answers in time.
	send := func(id uint64, name string) (string, error) {
		if id == 2 {
			return "", context.DeadlineExceeded
		}
		return "hello, " + name, nil
	}

	hello := func(name string) (reply string, err error) {
		call, err := lb.Call(polylb.ServiceLevel, nil)
		if err != nil {
			return "", err
		}
		// End reads err at the return (defer call.Done(err) would read
		// it now, while it is nil), and counts a panic as a failure.
		defer call.End(&err)
		return send(call.ID(), name)
	}

	for _, name := range []string{"ann", "bob", "cy"} {
		reply, err := hello(name)
		fmt.Printf("%s: %q %v\n", name, reply, err)
	}
	stats, err := lb.Stats()
	if err != nil {
		log.Fatal(err)
	}
	for _, inv := range stats.Invokers {
		fmt.Printf("%s: succeeded %d, timeouts %d, in flight %d\n", inv.Address, inv.Succeeded, inv.Timeouts, inv.Active)
	}
	// Output:
	// ann: "hello, ann" <nil>
	// bob: "" context deadline exceeded
	// cy: "hello, cy" <nil>
	// 10.0.0.1:20880: succeeded 2, timeouts 0, in flight 0
	// 10.0.0.2:20880: succeeded 0, timeouts 1, in flight 0
}

// Subsetting: this consumer prefers the 4 of 20 providers whose addresses
// score highest with its key, the same 4 in every process and language. The
// stats mark them in_subset; README.md shows this function's body
// (TestReadmeShowsTheSubsettingExample checks it).
func Example_subsetting() {
	lb, err := polylb.New("loadbalance=leastactive&subset.size=4&subset.key=consumer-42")
	if err != nil {
		log.Fatal(err)
	}
	defer lb.Close()
	var providers []polylb.Invoker
	for n := uint64(1); n <= 20; n++ {
		providers = append(providers, polylb.NewInvoker(n, fmt.Sprintf("10.0.0.%d:20880", n)))
	}
	if err := lb.Update(providers); err != nil {
		log.Fatal(err)
	}

	picked := map[uint64]bool{}
	for i := 0; i < 100; i++ {
		id, err := lb.Select(polylb.ServiceLevel, nil)
		if err != nil {
			log.Fatal(err)
		}
		lb.Report(polylb.ServiceLevel, id, time.Millisecond, polylb.Success)
		picked[id] = true
	}
	stats, err := lb.Stats()
	if err != nil {
		log.Fatal(err)
	}
	for _, inv := range stats.Invokers {
		if string(inv.Extra["in_subset"]) == "true" {
			fmt.Printf("%s in the subset, picked: %v\n", inv.Address, picked[inv.ID])
		}
	}
	fmt.Println("providers picked:", len(picked))
	// Output:
	// 10.0.0.6:20880 in the subset, picked: true
	// 10.0.0.11:20880 in the subset, picked: true
	// 10.0.0.15:20880 in the subset, picked: true
	// 10.0.0.18:20880 in the subset, picked: true
	// providers picked: 4
}

// Rendezvous hashing gives each key its own order of providers: a failover
// retry takes the key's next choice, and another consumer, which lists the
// same providers in another order under other ids, retries on the same
// addresses in the same order.
func Example_rendezvous() {
	// The addresses a consumer tries for the key when every attempt fails.
	tries := func(providers []polylb.Invoker) []string {
		lb, err := polylb.New("loadbalance=rendezvous")
		if err != nil {
			log.Fatal(err)
		}
		defer lb.Close()
		if err := lb.Update(providers); err != nil {
			log.Fatal(err)
		}
		address := map[uint64]string{}
		for _, p := range providers {
			address[p.ID] = p.Address
		}
		var tried []uint64
		var addresses []string
		for {
			id, err := lb.SelectAmong(polylb.ServiceLevel, []byte("user-3"), nil, tried)
			if errors.Is(err, polylb.ErrNoCandidate) {
				return addresses
			}
			if err != nil {
				log.Fatal(err)
			}
			lb.Report(polylb.ServiceLevel, id, time.Millisecond, polylb.Failure) // pretend it failed
			tried = append(tried, id)
			addresses = append(addresses, address[id])
		}
	}
	var a, b []polylb.Invoker
	for n := uint64(1); n <= 4; n++ {
		a = append(a, polylb.NewInvoker(n, fmt.Sprintf("10.0.0.%d:20880", n)))
		b = append([]polylb.Invoker{polylb.NewInvoker(100+n, fmt.Sprintf("10.0.0.%d:20880", n))}, b...)
	}
	fmt.Println("consumer A:", tries(a))
	fmt.Println("consumer B:", tries(b))
	// Output:
	// consumer A: [10.0.0.2:20880 10.0.0.1:20880 10.0.0.3:20880 10.0.0.4:20880]
	// consumer B: [10.0.0.2:20880 10.0.0.1:20880 10.0.0.3:20880 10.0.0.4:20880]
}

// orca deals calls by the capacity the providers report (ORCA load reports:
// queries and errors per second, utilization), as gRPC's weighted round robin
// does: weight = qps / (utilization + eps/qps). Here provider 2 serves as
// much as 1 at half the utilization, so it has twice the capacity; 3 reports
// nothing and takes the mean. A report counts after orca.blackoutMs
// (default 10 s; 0 here), and the example runs at a fixed time.
func Example_orca() {
	lb, err := polylb.New("loadbalance=orca&orca.blackoutMs=0")
	if err != nil {
		log.Fatal(err)
	}
	defer lb.Close()
	var providers []polylb.Invoker
	for n := uint64(1); n <= 3; n++ {
		providers = append(providers, polylb.NewInvoker(n, fmt.Sprintf("10.0.0.%d:20880", n)))
	}
	if err := lb.Update(providers); err != nil {
		log.Fatal(err)
	}
	now := time.UnixMilli(1_700_000_000_000)
	// What providers 1 and 2 last reported (e.g. in a response's trailers).
	if err := lb.ReportLoadAt(1, 100, 0, 0.5, now); err != nil {
		log.Fatal(err)
	}
	if err := lb.ReportLoadAt(2, 100, 0, 0.25, now); err != nil {
		log.Fatal(err)
	}

	picks := map[uint64]int{}
	for i := 0; i < 900; i++ {
		id, err := lb.SelectAt(polylb.ServiceLevel, nil, now)
		if err != nil {
			log.Fatal(err)
		}
		lb.ReportAt(polylb.ServiceLevel, id, time.Millisecond, polylb.Success, now)
		picks[id]++
	}
	stats, err := lb.StatsAt(now)
	if err != nil {
		log.Fatal(err)
	}
	for _, inv := range stats.Invokers {
		orca, _ := inv.Orca()
		weight := "none (the mean)"
		if orca.Weight != nil {
			weight = fmt.Sprint(*orca.Weight)
		}
		fmt.Printf("%s: weight %s, share %.2f, picked %d of 900\n", inv.Address, weight, orca.Share, picks[inv.ID])
	}
	// Output:
	// 10.0.0.1:20880: weight 200, share 0.22, picked 200 of 900
	// 10.0.0.2:20880: weight 400, share 0.44, picked 400 of 900
	// 10.0.0.3:20880: weight none (the mean), share 0.33, picked 300 of 900
}
