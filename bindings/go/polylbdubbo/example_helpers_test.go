package polylbdubbo_test

import (
	_ "dubbo.apache.org/dubbo-go/v3/cluster/cluster/failover"
	"dubbo.apache.org/dubbo-go/v3/cluster/directory"
	"dubbo.apache.org/dubbo-go/v3/cluster/directory/static"
	_ "dubbo.apache.org/dubbo-go/v3/cluster/router/chain"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"
)

// staticDirectory is a fixed provider list (in a real consumer: the
// registry's directory, or the reference's url list).
func staticDirectory(invokers []base.Invoker) directory.Directory {
	return static.NewDirectory(invokers)
}
