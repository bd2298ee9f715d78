package polylbdubbo

import (
	"fmt"
	"math"
	"testing"
	"time"

	"dubbo.apache.org/dubbo-go/v3/common"
)

// warmup is read as dubbo-go's GetWeight reads it: seconds, 600 when absent
// or not a number, none when <= 0.
func TestWarmupParameter(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		warmup string
		want   int32
	}{{"", 600_000}, {"&warmup=60", 60_000}, {"&warmup=0", 0}, {"&warmup=-5", 0}, {"&warmup=abc", 600_000},
		// Seconds past what fits in an int32 of ms are the longest warm-up, also where
		// seconds × 1000 would overflow int64 (it wrapped: 9223372036854776 s gave 192 ms).
		{"&warmup=2147483", 2_147_483_000}, {"&warmup=2147484", math.MaxInt32},
		{"&warmup=9223372036854775", math.MaxInt32}, {"&warmup=9223372036854776", math.MaxInt32},
		{"&warmup=9223372036854775807", math.MaxInt32}} {
		u, err := common.NewURL(fmt.Sprintf("tri://10.0.0.1:20000/S?remote.timestamp=%d%s", now.Unix()-30, tc.warmup))
		if err != nil {
			t.Fatal(err)
		}
		inv := providerInvoker(1, u, now, "")
		if inv.WarmupMs != tc.want || inv.StartTimeMs != (now.Unix()-30)*1000 {
			t.Errorf("%q: warm-up %d ms from %d, want %d ms from %d", tc.warmup, inv.WarmupMs, inv.StartTimeMs, tc.want, (now.Unix()-30)*1000)
		}
	}
}

// The provider's start is the one the registry gave: in the URL dubbo-go's
// registry directory builds (provider.MergeURL(reference)), the provider's
// own timestamp. dubbo-go's balancers read remote.timestamp, which MergeURL
// leaves unset then, and never warm up.
func TestWarmupStartsAtTheProvidersTimestamp(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	reference, err := common.NewURL(fmt.Sprintf("consumer://10.0.0.9/S?timestamp=%d", now.Unix()))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, provider string
		merged         bool // as the registry directory builds it
		wantStartMs    int64
	}{
		{"dubbo-go provider (seconds)", fmt.Sprintf("tri://10.0.0.1:20000/S?timestamp=%d", now.Unix()-30), true, (now.Unix() - 30) * 1000},
		{"Java provider (ms)", fmt.Sprintf("dubbo://10.0.0.1:20880/S?timestamp=%d", now.UnixMilli()-30_500), true, now.UnixMilli() - 30_500},
		{"no timestamp: the consumer's is not the provider's", "tri://10.0.0.1:20000/S", true, 0},
		{"a start in the future", fmt.Sprintf("tri://10.0.0.1:20000/S?timestamp=%d", now.Unix()+60), true, 0},
		{"remote.timestamp set to a time by hand", fmt.Sprintf("tri://10.0.0.1:20000/S?remote.timestamp=%d", now.Unix()-60), false, (now.Unix() - 60) * 1000},
	} {
		provider, err := common.NewURL(tc.provider)
		if err != nil {
			t.Fatal(err)
		}
		if tc.merged {
			provider = provider.MergeURL(reference)
		}
		inv := providerInvoker(1, provider, now, "")
		if inv.StartTimeMs != tc.wantStartMs {
			t.Errorf("%s: start %d, want %d", tc.name, inv.StartTimeMs, tc.wantStartMs)
		}
		if tc.wantStartMs != 0 && inv.WarmupMs != 600_000 {
			t.Errorf("%s: warm-up %d ms, want dubbo-go's default 600 000", tc.name, inv.WarmupMs)
		}
	}
}
