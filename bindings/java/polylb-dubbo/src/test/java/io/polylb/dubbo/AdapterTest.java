package io.polylb.dubbo;

import java.util.ArrayList;
import java.util.List;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.cluster.LoadBalance;
import org.junit.jupiter.api.AfterEach;

/** Tests that create polylb adapters: each is destroyed after its test; picks end as Dubbo's do. */
abstract class AdapterTest {
    private final List<PolylbLoadBalance> created = new ArrayList<>();

    /** Registers an adapter for destruction after the test. */
    <T extends PolylbLoadBalance> T track(T lb) {
        created.add(lb);
        return lb;
    }

    @AfterEach
    void destroyCreated() {
        created.forEach(PolylbLoadBalance::destroy);
    }

    /** Selects, then ends the invocation as Dubbo's cluster layer would (nothing sent). */
    static Invoker<Object> pick(LoadBalance lb, List<Invoker<Object>> list, Invocation inv) {
        PolylbClusterFilter.beginInvocation(inv);
        Invoker<Object> chosen = lb.select(list, list.get(0).getUrl(), inv);
        PolylbClusterFilter.releaseUnsent(inv);
        return chosen;
    }
}
