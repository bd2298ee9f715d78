package polylbdubbo_test

import (
	"context"

	_ "dubbo.apache.org/dubbo-go/v3/cluster/cluster/failover"
	"dubbo.apache.org/dubbo-go/v3/cluster/directory"
	"dubbo.apache.org/dubbo-go/v3/cluster/directory/static"
	_ "dubbo.apache.org/dubbo-go/v3/cluster/router/chain"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"
	"dubbo.apache.org/dubbo-go/v3/protocol/result"
)

// answering is a provider invoker that answers with its address (in a real
// consumer: the Triple or dubbo protocol's invoker).
type answering struct{ *base.BaseInvoker }

func (a answering) Invoke(context.Context, base.Invocation) result.Result {
	return &result.RPCResult{Rest: a.GetURL().Location}
}

// staticDirectory is a fixed provider list (in a real consumer: the
// registry's directory, or the reference's url list).
func staticDirectory(invokers []base.Invoker) directory.Directory {
	return static.NewDirectory(invokers)
}
