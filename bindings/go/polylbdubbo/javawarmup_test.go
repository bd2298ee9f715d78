package polylbdubbo

import (
	"fmt"
	"testing"
	"time"

	"dubbo.apache.org/dubbo-go/v3/cluster/loadbalance"
	"dubbo.apache.org/dubbo-go/v3/common"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/invocation"

	polylb "github.com/polylb/polylb/bindings/go"
)

// effectiveWeight is polylb's weight of the provider at now, as the adapter
// reads its URL.
func effectiveWeight(t *testing.T, u *common.URL, now time.Time) int64 {
	t.Helper()
	b, err := polylb.New("loadbalance=random")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Update([]polylb.Invoker{providerInvoker(1, u, now, "")}); err != nil {
		t.Fatal(err)
	}
	s, err := b.StatsAt(now)
	if err != nil {
		t.Fatal(err)
	}
	return s.Invokers[0].EffectiveWeight
}

// A Java Dubbo provider writes its start (timestamp) and its warm-up (warmup)
// in milliseconds, as Java Dubbo's getWeight reads both; a dubbo-go provider
// writes both in seconds. The adapter tells a Java provider's start by its
// size, and must read that provider's warm-up in the same unit: 60 s into a
// 120 000 ms (2 min) warm-up, a weight of 100 is 50 in Java Dubbo. Read as
// 120 000 s, it was 1 (and stayed under 3 for the first hour).
func TestJavaProvidersWarmupIsInMilliseconds(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	reference, err := common.NewURL(fmt.Sprintf("consumer://10.0.0.9/S?timestamp=%d", now.Unix()))
	if err != nil {
		t.Fatal(err)
	}
	java, err := common.NewURL(fmt.Sprintf("dubbo://10.0.0.1:20880/S?weight=100&warmup=120000&timestamp=%d",
		now.UnixMilli()-60_000))
	if err != nil {
		t.Fatal(err)
	}
	merged := java.MergeURL(reference)
	// Java Dubbo's getWeight: uptime / (warmup / weight), within 1..weight.
	const javaWeight = 60_000 / (120_000 / 100)
	if inv := providerInvoker(1, merged, now, ""); inv.WarmupMs != 120_000 {
		t.Errorf("Java provider's warmup=120000 (ms): polylb's warm-up %d ms, want 120000", inv.WarmupMs)
	}
	if w := effectiveWeight(t, merged, now); w != javaWeight {
		t.Errorf("Java provider 60 s into a 120 s warm-up: effective weight %d, Java Dubbo's getWeight %d", w, javaWeight)
	}
}

// The rest of a Java provider's warmup as Java Dubbo reads it: absent is
// 600 000 ms, <= 0 none; past polylb's longest, that (2^31 - 1 ms). Not a
// number: dubbo-go's default, as for any provider (Java Dubbo would throw).
func TestJavaProvidersWarmupValues(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	for _, tc := range []struct {
		warmup string
		want   int32
	}{{"", 600_000}, {"&warmup=60000", 60_000}, {"&warmup=0", 0}, {"&warmup=-5", 0},
		{"&warmup=abc", 600_000}, {"&warmup=2147483647", 2147483647}, {"&warmup=2147483648", 2147483647}} {
		u, err := common.NewURL(fmt.Sprintf("dubbo://10.0.0.1:20880/S?timestamp=%d%s", now.UnixMilli()-30_000, tc.warmup))
		if err != nil {
			t.Fatal(err)
		}
		if inv := providerInvoker(1, u, now, ""); inv.WarmupMs != tc.want {
			t.Errorf("%q: warm-up %d ms, want %d", tc.warmup, inv.WarmupMs, tc.want)
		}
	}
}

// The dubbo-go counterpart, compared with dubbo-go's own GetWeight: a
// provider whose start (remote.timestamp, set to a time) and warm-up are in
// seconds keeps dubbo-go's reading.
func TestDubboGoProvidersWarmupStaysInSeconds(t *testing.T) {
	now := time.Now()
	u, err := common.NewURL(fmt.Sprintf("tri://10.0.0.1:20000/S?weight=100&warmup=120&remote.timestamp=%d",
		now.Unix()-60))
	if err != nil {
		t.Fatal(err)
	}
	want := loadbalance.GetWeight(base.NewBaseInvoker(u), invocation.NewRPCInvocation("M", nil, nil))
	// polylb reads the start to the second, dubbo-go's uptime is whole seconds.
	if w := effectiveWeight(t, u, time.Unix(now.Unix(), 0)); w != want {
		t.Errorf("dubbo-go provider 60 s into a 120 s warm-up: effective weight %d, dubbo-go's GetWeight %d", w, want)
	}
}
