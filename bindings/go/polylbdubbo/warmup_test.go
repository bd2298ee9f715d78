package polylbdubbo

import (
	"fmt"
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
	}{{"", 600_000}, {"&warmup=60", 60_000}, {"&warmup=0", 0}, {"&warmup=-5", 0}, {"&warmup=abc", 600_000}} {
		u, err := common.NewURL(fmt.Sprintf("tri://10.0.0.1:20000/S?remote.timestamp=%d%s", now.Unix()-30, tc.warmup))
		if err != nil {
			t.Fatal(err)
		}
		inv := providerInvoker(1, u, now)
		if inv.WarmupMs != tc.want || inv.StartTimeMs != (now.Unix()-30)*1000 {
			t.Errorf("%q: warm-up %d ms from %d, want %d ms from %d", tc.warmup, inv.WarmupMs, inv.StartTimeMs, tc.want, (now.Unix()-30)*1000)
		}
	}
}
