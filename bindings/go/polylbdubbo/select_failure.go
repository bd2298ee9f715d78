package polylbdubbo

import (
	"context"

	"dubbo.apache.org/dubbo-go/v3/common"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/result"
)

// selectFailure stands in for a provider when polylb cannot select one,
// almost always because it rejects the service's configuration: every call
// on it fails with the error, which names the parameter. A dubbo-go
// LoadBalance has no error to return and its clusters call whatever Select
// returns, so the alternatives were a panic, which takes the consumer's
// process down with its first call, or a provider picked without the
// strategy the user configured.
type selectFailure struct {
	url *common.URL
	err error
}

func newSelectFailure(first *common.URL, err error) *selectFailure {
	// A URL of its own: a failover that calls it again puts it on dubbo-go's
	// list of unhealthy invokers, keyed by the URL, where the first
	// provider's URL would shun that provider.
	url := first.Clone()
	url.Ip = "polylb.select-failed"
	url.Location = url.Ip + ":" + url.Port
	return &selectFailure{url: url, err: err}
}

func (r *selectFailure) GetURL() *common.URL { return r.url }
func (r *selectFailure) IsAvailable() bool   { return true }
func (r *selectFailure) Destroy()            {}

func (r *selectFailure) Invoke(context.Context, base.Invocation) result.Result {
	return &result.RPCResult{Err: r.err}
}
