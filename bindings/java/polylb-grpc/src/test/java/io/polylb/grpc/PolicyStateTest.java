package io.polylb.grpc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Attributes;
import io.grpc.CallOptions;
import io.grpc.ChannelLogger;
import io.grpc.ConnectivityState;
import io.grpc.ConnectivityStateInfo;
import io.grpc.EquivalentAddressGroup;
import io.grpc.LoadBalancer;
import io.grpc.LoadBalancer.CreateSubchannelArgs;
import io.grpc.LoadBalancer.PickResult;
import io.grpc.LoadBalancer.ResolvedAddresses;
import io.grpc.LoadBalancer.Subchannel;
import io.grpc.LoadBalancer.SubchannelPicker;
import io.grpc.LoadBalancer.SubchannelStateListener;
import io.grpc.Status;
import io.polylb.Balancer;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The policy's states, with gRPC's side played by hand: subchannels whose states the test sets,
 * and a helper that keeps what the policy sends up.
 */
class PolicyStateTest {
    private final List<FakeSubchannel> subchannels = new ArrayList<>();
    private ConnectivityState state;
    private SubchannelPicker picker;
    private Balancer balancer;
    private final FakeHelper helper = new FakeHelper();
    private final PolylbLoadBalancer policy = new PolylbLoadBalancer(helper, lb -> balancer = lb);

    @AfterEach
    void shutdown() {
        policy.shutdown();
    }

    private final class FakeSubchannel extends Subchannel {
        final CreateSubchannelArgs args;
        SubchannelStateListener listener;
        boolean shutdown;

        FakeSubchannel(CreateSubchannelArgs args) {
            this.args = args;
        }

        @Override
        public void start(SubchannelStateListener newListener) {
            listener = newListener;
        }

        @Override
        public void shutdown() {
            shutdown = true;
        }

        @Override
        public void requestConnection() {}

        /** The address lists given after creation. */
        final List<List<EquivalentAddressGroup>> updates = new ArrayList<>();

        @Override
        public void updateAddresses(List<EquivalentAddressGroup> addrs) {
            updates.add(addrs);
        }

        @Override
        public Attributes getAttributes() {
            return Attributes.EMPTY;
        }

        void set(ConnectivityState newState) {
            listener.onSubchannelState(newState == ConnectivityState.TRANSIENT_FAILURE
                    ? ConnectivityStateInfo.forTransientFailure(Status.UNAVAILABLE.withDescription("refused"))
                    : ConnectivityStateInfo.forNonError(newState));
        }
    }

    private final class FakeHelper extends LoadBalancer.Helper {
        @Override
        public Subchannel createSubchannel(CreateSubchannelArgs args) {
            FakeSubchannel subchannel = new FakeSubchannel(args);
            subchannels.add(subchannel);
            return subchannel;
        }

        @Override
        public void updateBalancingState(ConnectivityState newState, SubchannelPicker newPicker) {
            state = newState;
            picker = newPicker;
        }

        @Override
        public void refreshNameResolution() {}

        @Override
        public String getAuthority() {
            return "test";
        }

        @Override
        public ChannelLogger getChannelLogger() {
            throw new UnsupportedOperationException();
        }

        @Override
        public io.grpc.ManagedChannel createOobChannel(EquivalentAddressGroup eag, String authority) {
            throw new UnsupportedOperationException();
        }
    }

    private void resolve(int... ports) {
        List<EquivalentAddressGroup> groups = new ArrayList<>();
        for (int port : ports) {
            groups.add(new EquivalentAddressGroup(new InetSocketAddress("127.0.0.1", port)));
        }
        resolve(groups);
    }

    private void resolve(List<EquivalentAddressGroup> groups) {
        resolve("", groups);
    }

    private void resolve(String config, List<EquivalentAddressGroup> groups) {
        Status accepted = accept(config, groups);
        assertEquals(Status.Code.OK, accepted.getCode(), accepted.toString());
    }

    private Status accept(String config, List<EquivalentAddressGroup> groups) {
        return policy.acceptResolvedAddresses(ResolvedAddresses.newBuilder()
                .setAddresses(groups)
                .setLoadBalancingPolicyConfig(new PolylbConfig(config, false))
                .build());
    }

    /** 127.0.0.1:&lt;first&gt; to 127.0.0.1:&lt;last&gt;, one endpoint each. */
    private static List<EquivalentAddressGroup> ports(int first, int last) {
        List<EquivalentAddressGroup> groups = new ArrayList<>();
        for (int port = first; port <= last; port++) {
            groups.add(new EquivalentAddressGroup(new InetSocketAddress("127.0.0.1", port)));
        }
        return groups;
    }

    private PickResult pick() {
        return picker.pickSubchannel(new PickFakes.Args());
    }

    /** A pick of a call whose {@link PolylbGrpc#HASH_KEY} is {@code key} (null: none). */
    private Subchannel pickByKey(String key) {
        CallOptions options = key == null ? CallOptions.DEFAULT
                : CallOptions.DEFAULT.withOption(PolylbGrpc.HASH_KEY, key.getBytes(StandardCharsets.UTF_8));
        PickResult result = picker.pickSubchannel(new PickFakes.Args(options));
        assertTrue(result.getStatus().isOk(), result.toString());
        return result.getSubchannel();
    }

    /** A check of the endpoint a key's call was picked for. */
    private interface KeyCheck {
        void check(String key, Subchannel picked);
    }

    /**
     * Resolves 5 READY endpoints at 127.0.0.1:1..5 with {@code loadbalance=strategy} and asserts
     * that a call's {@link PolylbGrpc#HASH_KEY} places it: 300 keys each go to one endpoint every
     * time, and reach all 5; with the third endpoint not READY (the state stays READY) its keys go
     * elsewhere and every other key stays where it was (some key moves); back READY, every key is
     * where it was. {@code whileAllUp} and {@code whileOneDown}, run for each key's pick in those
     * phases, add the strategy's own checks.
     */
    private void assertCallsArePlacedByTheirHashKey(String strategy, KeyCheck whileAllUp, KeyCheck whileOneDown) {
        List<EquivalentAddressGroup> groups = new ArrayList<>();
        for (int port = 1; port <= 5; port++) {
            groups.add(new EquivalentAddressGroup(new InetSocketAddress("127.0.0.1", port)));
        }
        resolve("loadbalance=" + strategy, groups);
        subchannels.forEach(s -> s.set(ConnectivityState.READY));
        assertEquals(ConnectivityState.READY, state);
        assertEquals(strategy, balancer.strategy());

        Map<String, Subchannel> owner = new HashMap<>();
        for (int k = 0; k < 300; k++) {
            String key = "user-" + k;
            owner.put(key, pickByKey(key));
            assertEquals(owner.get(key), pickByKey(key), key);
            whileAllUp.check(key, owner.get(key));
        }
        assertEquals(5, new HashSet<>(owner.values()).size(), "300 keys over 5 endpoints");

        FakeSubchannel down = subchannels.get(2);
        down.set(ConnectivityState.TRANSIENT_FAILURE);
        assertEquals(ConnectivityState.READY, state);
        int moved = 0;
        for (Map.Entry<String, Subchannel> e : owner.entrySet()) {
            Subchannel now = pickByKey(e.getKey());
            whileOneDown.check(e.getKey(), now);
            if (e.getValue() == down) {
                assertNotEquals(down, now, e.getKey());
                moved++;
            } else {
                assertEquals(e.getValue(), now, e.getKey() + " moved though its endpoint is READY");
            }
        }
        assertTrue(moved > 0, "no key on the endpoint that went down");

        down.set(ConnectivityState.READY);
        for (Map.Entry<String, Subchannel> e : owner.entrySet()) {
            assertEquals(e.getValue(), pickByKey(e.getKey()), e.getKey() + " after its endpoint came back");
        }
    }

    /**
     * {@code maglev} places a call by its {@link PolylbGrpc#HASH_KEY}: a key goes to one endpoint
     * every time, keys spread; an endpoint that is not READY is excluded from the pick (the set
     * keeps it), so its keys go elsewhere and every other key stays where it was, and its keys
     * come back when it is READY again. No key hashes as the empty key.
     */
    @Test
    void maglevPlacesCallsByTheirHashKey() {
        assertCallsArePlacedByTheirHashKey("maglev", (key, picked) -> { }, (key, picked) -> { });
        assertEquals(pickByKey(""), pickByKey(null), "no key hashes as the empty key");
    }

    /** The port of a pick's endpoint (this test's endpoints are 127.0.0.1:&lt;port&gt;). */
    private static int portOf(Subchannel subchannel) {
        return ((InetSocketAddress) ((FakeSubchannel) subchannel).args.getAddresses().get(0).getAddresses().get(0))
                .getPort();
    }

    /** The port a polylb rendezvous balancer over 127.0.0.1:&lt;ports&gt; sends {@code key} to. */
    private static int rendezvousPort(String key, int... ports) {
        try (Balancer reference = new Balancer("loadbalance=rendezvous")) {
            List<io.polylb.Invoker> set = new ArrayList<>();
            for (int port : ports) {
                set.add(io.polylb.Invoker.of(port, "127.0.0.1:" + port));
            }
            reference.update(set);
            long id = reference.selectByKey(0, key);
            reference.report(0, id, 1, io.polylb.Outcome.CANCELLED);
            return (int) id;
        }
    }

    /**
     * {@code rendezvous} places a call by its {@link PolylbGrpc#HASH_KEY}, where the library sends
     * the key over the endpoints' addresses; an endpoint that is not READY is excluded from the
     * pick, so exactly its keys move, each to its next choice (where a client without that
     * endpoint sends it), and they come back when it is READY again.
     */
    @Test
    void rendezvousPlacesCallsByTheirHashKey() {
        assertCallsArePlacedByTheirHashKey("rendezvous",
                (key, picked) -> assertEquals(rendezvousPort(key, 1, 2, 3, 4, 5), portOf(picked), key),
                (key, picked) -> assertEquals(rendezvousPort(key, 1, 2, 4, 5), portOf(picked), key));
    }

    private int setSize() {
        return com.google.gson.JsonParser.parseString(balancer.statsJson()).getAsJsonObject()
                .getAsJsonArray("invokers").size();
    }

    /**
     * A set maglev's table cannot hold is rejected by the library: the previous set is kept, the
     * resolution answers UNAVAILABLE with the reason, and the picker goes on over the kept set,
     * following its endpoints' states (an endpoint of it that fails leaves the picker; all of them
     * failing fails the channel), never picking the endpoint outside it.
     */
    @Test
    void maglevRejectsMoreEndpointsThanSlotsAndKeepsTheSet() {
        resolve("loadbalance=maglev&maglev.tableSize=7", ports(1, 7));
        subchannels.forEach(s -> s.set(ConnectivityState.READY));
        assertEquals(7, setSize(), balancer.statsJson());
        Status rejected = accept("loadbalance=maglev&maglev.tableSize=7", ports(1, 8));
        assertEquals(Status.Code.UNAVAILABLE, rejected.getCode(), rejected.toString());
        assertTrue(rejected.getDescription().contains("rejected"), rejected.toString());
        subchannels.get(7).set(ConnectivityState.READY);
        assertEquals(7, setSize(), balancer.statsJson());
        for (int k = 0; k < 100; k++) {
            assertNotEquals(subchannels.get(7), pickByKey("user-" + k), "an endpoint outside the set was picked");
        }

        FakeSubchannel down = subchannels.get(2);
        down.set(ConnectivityState.TRANSIENT_FAILURE);
        for (int k = 0; k < 200; k++) {
            Subchannel picked = pickByKey("user-" + k);
            assertTrue(picked != null && picked != down && picked != subchannels.get(7),
                    "user-" + k + ": " + picked);
        }
        subchannels.forEach(s -> s.set(ConnectivityState.TRANSIENT_FAILURE));
        subchannels.get(7).set(ConnectivityState.READY); // outside the set: no help
        assertEquals(ConnectivityState.TRANSIENT_FAILURE, state);
        assertFalse(pick().getStatus().isOk());
    }

    /**
     * An endpoint is its addresses in any order, as grpc-go's EndpointMap has it: listed again in
     * another order it keeps its subchannel (given the new order to try), its connection and its
     * invoker id; before, it was shut down and replaced, its state lost. Its first address, which
     * places it on the hash rings, follows the list, as in the Go policy.
     */
    @Test
    void anEndpointListedAgainInAnotherOrderIsTheSameEndpoint() {
        InetSocketAddress a = new InetSocketAddress("127.0.0.1", 1);
        InetSocketAddress b = new InetSocketAddress("127.0.0.1", 2);
        resolve(List.of(new EquivalentAddressGroup(List.of(a, b))));
        subchannels.forEach(s -> s.set(ConnectivityState.READY));
        resolve(List.of(new EquivalentAddressGroup(List.of(b, a))));
        assertEquals(1, subchannels.size(), "a second subchannel for the same endpoint");
        FakeSubchannel only = subchannels.get(0);
        assertFalse(only.shutdown);
        assertEquals(List.of(List.of(new EquivalentAddressGroup(List.of(b, a)))), only.updates);
        assertEquals(ConnectivityState.READY, state);
        String stats = balancer.statsJson();
        assertTrue(stats.contains("\"id\":1,") && stats.contains("\"address\":\"127.0.0.1:2\""), stats);
        resolve(List.of(new EquivalentAddressGroup(List.of(b, a))));
        assertEquals(1, only.updates.size(), "the same order again is no update");
    }

    /**
     * A rejected update that also drops a READY endpoint: the library keeps it (a rejected
     * update changes nothing), but its subchannel is shut down. Picks go to the kept set's other
     * READY endpoints; before, a pick the library made of the dropped one returned no result and
     * waited for a picker that never came (48 of 300 keyed calls).
     */
    @Test
    void aRejectedUpdateThatDropsAnEndpointNeverPicksIt() {
        resolve("loadbalance=maglev&maglev.tableSize=7", ports(1, 7));
        subchannels.forEach(s -> s.set(ConnectivityState.READY));
        FakeSubchannel dropped = subchannels.get(0);
        Status rejected = accept("loadbalance=maglev&maglev.tableSize=7", ports(2, 9));
        assertEquals(Status.Code.UNAVAILABLE, rejected.getCode(), rejected.toString());
        assertTrue(dropped.shutdown, "the dropped endpoint's subchannel is shut down");
        assertEquals(7, setSize(), balancer.statsJson());
        subchannels.subList(7, 9).forEach(s -> s.set(ConnectivityState.READY));
        for (int k = 0; k < 300; k++) {
            Subchannel picked = pickByKey("user-" + k);
            assertTrue(picked != null && picked != dropped && subchannels.indexOf(picked) < 7,
                    "user-" + k + ": " + picked);
        }
        assertTrue(pickByKey(null) != null);
    }

    /**
     * A first set the library rejects fails the channel with the library's reason (calls without
     * wait-for-ready fail at once instead of waiting for a picker that never comes), and the
     * resolution answers UNAVAILABLE; a set it takes afterwards brings the channel up.
     */
    @Test
    void aRejectedFirstSetFailsTheChannelWithTheReason() {
        Status rejected = accept("loadbalance=maglev&maglev.tableSize=7", ports(1, 8));
        assertEquals(Status.Code.UNAVAILABLE, rejected.getCode(), rejected.toString());
        assertEquals(ConnectivityState.TRANSIENT_FAILURE, state);
        subchannels.forEach(s -> s.set(ConnectivityState.READY));
        assertEquals(ConnectivityState.TRANSIENT_FAILURE, state);
        PickResult failed = pick();
        assertEquals(Status.Code.UNAVAILABLE, failed.getStatus().getCode());
        assertTrue(failed.getStatus().getDescription().contains("maglev"), failed.getStatus().toString());

        resolve("loadbalance=maglev&maglev.tableSize=7", ports(1, 7));
        assertEquals(ConnectivityState.READY, state);
        assertEquals(7, setSize(), balancer.statsJson());
        assertTrue(pick().getSubchannel() != null);
    }

    /**
     * A config built by hand is not parsed by the provider: one the library refuses fails the
     * channel with the reason, and its endpoints' states coming in change nothing (no balancer to
     * pick with); a valid config afterwards brings the channel up.
     */
    @Test
    void anUnparsedConfigTheLibraryRefusesFailsTheChannelWithTheReason() {
        Status refused = accept("loadbalance=nosuchstrategy", ports(1, 3));
        assertEquals(Status.Code.UNAVAILABLE, refused.getCode(), refused.toString());
        assertEquals(ConnectivityState.TRANSIENT_FAILURE, state);
        subchannels.forEach(s -> s.set(ConnectivityState.READY));
        assertEquals(ConnectivityState.TRANSIENT_FAILURE, state);
        PickResult failed = pick();
        assertEquals(Status.Code.UNAVAILABLE, failed.getStatus().getCode());
        assertTrue(failed.getStatus().getDescription().contains("nosuchstrategy"), failed.getStatus().toString());

        resolve("loadbalance=roundrobin", ports(1, 3));
        assertEquals(ConnectivityState.READY, state);
        assertEquals("roundrobin", balancer.strategy());
        assertTrue(pick().getSubchannel() != null);
    }

    /**
     * A config change whose balancer rejects the listed endpoints is not taken: the channel goes
     * on with its balancer (not closed under the picker), and the resolution answers UNAVAILABLE.
     */
    @Test
    void aConfigChangeWhoseBalancerRejectsTheSetKeepsTheBalancer() {
        resolve("", ports(1, 8));
        subchannels.forEach(s -> s.set(ConnectivityState.READY));
        Balancer before = balancer;
        Status rejected = accept("loadbalance=maglev&maglev.tableSize=7", ports(1, 8));
        assertEquals(Status.Code.UNAVAILABLE, rejected.getCode(), rejected.toString());
        assertEquals(before, balancer);
        assertEquals("random", balancer.strategy());
        assertEquals(ConnectivityState.READY, state);
        for (int k = 0; k < 50; k++) {
            assertTrue(pick().getSubchannel() != null, "pick " + k);
        }
        assertEquals(8, setSize(), balancer.statsJson());

        resolve("loadbalance=maglev&maglev.tableSize=11", ports(1, 8));
        assertEquals("maglev", balancer.strategy());
        assertTrue(pick().getSubchannel() != null);
    }

    /**
     * gRPC gives no config to a policy named by {@code defaultLoadBalancingPolicy("polylb")}
     * without a service config: the entry's defaults, not a channel that never gets a picker.
     */
    @Test
    void noConfigIsTheDefaults() {
        Status accepted = policy.acceptResolvedAddresses(ResolvedAddresses.newBuilder()
                .setAddresses(ports(1, 2)).build());
        assertEquals(Status.Code.OK, accepted.getCode(), accepted.toString());
        subchannels.forEach(s -> s.set(ConnectivityState.READY));
        assertEquals(ConnectivityState.READY, state);
        assertEquals("random", balancer.strategy());
        assertTrue(pick().getSubchannel() != null);
    }

    /**
     * As gRPC's pick_first (and round_robin over it): once every endpoint failed, the channel
     * stays TRANSIENT_FAILURE while they retry, until one is READY. Calls without wait-for-ready
     * fail at once, rather than wait out each reconnect attempt (up to the connect timeout, 20 s
     * by default, against an address that drops packets).
     */
    @Test
    void everyEndpointFailingStaysFailingWhileTheyReconnect() {
        resolve(1, 2);
        subchannels.forEach(s -> s.set(ConnectivityState.CONNECTING));
        assertEquals(ConnectivityState.CONNECTING, state);
        subchannels.forEach(s -> s.set(ConnectivityState.TRANSIENT_FAILURE));
        assertEquals(ConnectivityState.TRANSIENT_FAILURE, state);
        assertFalse(pick().getStatus().isOk());

        subchannels.get(0).set(ConnectivityState.CONNECTING); // its backoff is over: it retries
        assertEquals(ConnectivityState.TRANSIENT_FAILURE, state);
        assertFalse(pick().getStatus().isOk(), "a call without wait-for-ready waits for the reconnect");

        subchannels.get(0).set(ConnectivityState.READY);
        assertEquals(ConnectivityState.READY, state);
        assertEquals(subchannels.get(0), pick().getSubchannel());
    }

    /**
     * A negative weight from the resolver's attribute is read as 0, as Dubbo reads one: the
     * library rejects a set with it, and every update would keep the set without the endpoints
     * that came after it.
     */
    @Test
    void aNegativeWeightIsZero() {
        resolve(List.of(
                PolylbGrpc.withWeight(new EquivalentAddressGroup(new InetSocketAddress("127.0.0.1", 1)), -5),
                new EquivalentAddressGroup(new InetSocketAddress("127.0.0.1", 2))));
        subchannels.forEach(s -> s.set(ConnectivityState.READY));
        assertEquals(ConnectivityState.READY, state);
        assertEquals(subchannels.get(1), pick().getSubchannel());
        assertEquals(0, balancer.statsJson().contains("\"weight\":0,") ? 0 : 1, balancer.statsJson());
    }

    /** A field's raw JSON value in invoker {@code id}'s stats row at {@code nowUs}. */
    private String orcaField(long id, String name, long nowUs) {
        String json = balancer.statsJson(nowUs);
        Matcher row = Pattern.compile("\\{\"id\":" + id + ",.*?\\}").matcher(json);
        assertTrue(row.find(), json);
        Matcher m = Pattern.compile("\"" + name + "\":([^,}]+)").matcher(row.group());
        assertTrue(m.find(), row.group());
        return m.group(1);
    }

    /**
     * An endpoint READY again after another state restarts {@code orca}'s blackout, as gRPC's
     * weighted_round_robin resets an endpoint's weight (gRFC A58): the server behind the new
     * connection may be a restarted, cold process. Its first READY restarts nothing.
     */
    @Test
    void aReconnectRestartsOrcasBlackout() {
        long t0 = 1_700_000_000_000_000L;
        long blackoutUs = 60_000_000L;
        resolve("loadbalance=orca&orca.blackoutMs=60000", ports(1, 2));
        subchannels.forEach(s -> s.set(ConnectivityState.CONNECTING));
        // Reports before the first READY (none can come then over gRPC; here, to show the first
        // READY keeps them) count a blackout later.
        balancer.reportLoad(1, 100, 0, 1.0, t0);
        balancer.reportLoad(2, 300, 0, 1.0, t0);
        subchannels.forEach(s -> s.set(ConnectivityState.READY));
        assertEquals(ConnectivityState.READY, state);
        long counted = t0 + blackoutUs;
        assertEquals("true", orcaField(1, "orca_counted", counted));
        assertEquals("true", orcaField(2, "orca_counted", counted));

        // Endpoint 2's connection drops and comes back.
        subchannels.get(1).set(ConnectivityState.IDLE);
        subchannels.get(1).set(ConnectivityState.CONNECTING);
        assertEquals("true", orcaField(2, "orca_counted", counted), "not before it is READY again");
        subchannels.get(1).set(ConnectivityState.READY);
        assertEquals("false", orcaField(2, "orca_counted", counted), "the old weight counts no more");
        assertEquals("true", orcaField(1, "orca_counted", counted), "the other endpoint keeps its weight");

        // The first report over the new connection starts a new blackout.
        long back = counted + 1_000_000L;
        balancer.reportLoad(2, 300, 0, 1.0, back);
        assertEquals("false", orcaField(2, "orca_counted", back + blackoutUs - 1_000));
        assertEquals("true", orcaField(2, "orca_counted", back + blackoutUs));

        // Through TRANSIENT_FAILURE too; a READY endpoint told READY again is no reconnect.
        subchannels.get(0).set(ConnectivityState.TRANSIENT_FAILURE);
        subchannels.get(0).set(ConnectivityState.READY);
        assertEquals("false", orcaField(1, "orca_counted", back + blackoutUs));
        balancer.reportLoad(1, 100, 0, 1.0, back);
        subchannels.get(0).set(ConnectivityState.READY);
        assertEquals("true", orcaField(1, "orca_counted", back + blackoutUs));
    }
}
