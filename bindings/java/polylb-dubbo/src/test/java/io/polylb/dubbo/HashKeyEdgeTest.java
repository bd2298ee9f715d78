package io.polylb.dubbo;

import static io.polylb.dubbo.TestInvokers.call;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;

import java.util.List;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.cluster.loadbalance.ConsistentHashLoadBalance;
import org.junit.jupiter.api.Test;

/** Arguments whose text is unusual hash as Dubbo's ring hashes them. */
class HashKeyEdgeTest extends AdapterTest {
    /** A value type whose toString() is an unset field: null. */
    static final class Id {
        private final String value;

        Id(String value) {
            this.value = value;
        }

        @Override
        public String toString() {
            return value;
        }
    }

    @Test
    void anArgumentWhoseToStringIsNullHashesAsNullAsInDubbo() {
        assertEquals("null", DubboUrls.hashKey(call("m", new Id(null)), new int[] {0}));
        assertEquals("nullx", DubboUrls.hashKey(call("m", new Id(null), "x"), new int[] {0, 1}));
        List<Invoker<Object>> list = HashingAdapterTest.providers(8, "weight=100");
        ConsistentHashLoadBalance dubbo = new ConsistentHashLoadBalance();
        PolylbLoadBalance polylb = track(new PolylbLoadBalance.ConsistentHash());
        Invoker<Object> expected = dubbo.select(list, list.get(0).getUrl(), call("get", new Id(null)));
        assertSame(expected, pick(polylb, list, call("get", new Id(null))));
        assertSame(expected, pick(polylb, list, call("get", "null")));
    }
}
