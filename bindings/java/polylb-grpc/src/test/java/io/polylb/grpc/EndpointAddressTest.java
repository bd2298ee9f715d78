package io.polylb.grpc;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.google.gson.JsonElement;
import io.grpc.CallOptions;
import io.grpc.EquivalentAddressGroup;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.polylb.Invoker;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.junit.jupiter.api.Test;

/**
 * The invoker address an endpoint gets: the IP as grpc-go writes it (so keys hash alike from
 * Java and Go clients), never the host name a resolved address carries, and text the library
 * takes whatever the resolver gave.
 */
class EndpointAddressTest {
    private static InetSocketAddress at(String name, byte[] ip, int port) throws Exception {
        return new InetSocketAddress(InetAddress.getByAddress(name, ip), port);
    }

    private static byte[] v6(int... groups) {
        byte[] b = new byte[16];
        for (int i = 0; i < 8; i++) {
            b[2 * i] = (byte) (groups[i] >> 8);
            b[2 * i + 1] = (byte) groups[i];
        }
        return b;
    }

    @Test
    void aResolvedAddressIsItsIpNotItsName() throws Exception {
        // InetAddress.getAllByName, which gRPC's DNS resolver calls, names every address it
        // returns: with the name, all the servers of dns:///svc:443 were the invoker "svc:443".
        assertEquals("10.1.2.3:443", Endpoint.addressOf(at("svc.internal", new byte[] {10, 1, 2, 3}, 443)));
        assertEquals("10.1.2.3:443", Endpoint.addressOf(at(null, new byte[] {10, 1, 2, 3}, 443)));
        assertEquals("svc.internal:443", Endpoint.addressOf(InetSocketAddress.createUnresolved("svc.internal", 443)));
        assertEquals("[::1]:80", Endpoint.addressOf(InetSocketAddress.createUnresolved("::1", 80)));
    }

    /** As Go's net.IP.String (RFC 5952), which grpc-go's resolvers write. */
    @Test
    void ipv6IsWrittenAsGrpcGoWritesIt() throws Exception {
        Map<String, byte[]> cases = new TreeMap<>();
        cases.put("[::1]:8080", v6(0, 0, 0, 0, 0, 0, 0, 1));
        cases.put("[::]:8080", v6(0, 0, 0, 0, 0, 0, 0, 0));
        cases.put("[2001:db8::1:0:0:1]:8080", v6(0x2001, 0xdb8, 0, 0, 1, 0, 0, 1));
        cases.put("[1:0:0:2::3]:8080", v6(1, 0, 0, 2, 0, 0, 0, 3));
        cases.put("[1:0:2:3:4:5:6:7]:8080", v6(1, 0, 2, 3, 4, 5, 6, 7));
        cases.put("[fe80::abcd:ef]:8080", v6(0xfe80, 0, 0, 0, 0, 0, 0xabcd, 0xef));
        cases.put("[1::]:8080", v6(1, 0, 0, 0, 0, 0, 0, 0));
        for (Map.Entry<String, byte[]> c : cases.entrySet()) {
            assertEquals(c.getKey(), Endpoint.addressOf(at("named", c.getValue(), 8080)));
        }
        InetAddress scoped = Inet6Address.getByAddress(null, v6(0xfe80, 0, 0, 0, 0, 0, 0, 1), 3);
        assertEquals("[fe80::1%3]:80", Endpoint.addressOf(new InetSocketAddress(scoped, 80)));
    }

    @Test
    void loneSurrogatesAreEscapedAsTheirBytes() {
        assertEquals("eu-west", Endpoint.libraryText("eu-west"));
        assertEquals("\uD83D\uDE00 ok", Endpoint.libraryText("\uD83D\uDE00 ok"));
        assertEquals("eu-\\xed\\xa0\\x80", Endpoint.libraryText("eu-\uD800"));
        assertEquals("\\xed\\xbf\\xbfa\\xed\\xa0\\xbd", Endpoint.libraryText("\uDFFFa\uD83D"));
    }

    /** Three servers behind one name: the hash strategies spread keys over all three. */
    @Test
    void keysSpreadOverTheServersOfOneName() throws Exception {
        try (Provider p0 = new Provider("p0", NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0)))) {
            int port = ((InetSocketAddress) p0.endpoint().getAddresses().get(0)).getPort();
            try (Provider p1 = new Provider("p1", NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.2", port)));
                    Provider p2 = new Provider("p2", NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.3", port)))) {
                for (String strategy : List.of("rendezvous", "consistenthash")) {
                    List<EquivalentAddressGroup> endpoints = new ArrayList<>();
                    for (int i = 1; i <= 3; i++) {
                        endpoints.add(new EquivalentAddressGroup(at("greeter.internal", new byte[] {127, 0, 0, (byte) i}, port)));
                    }
                    try (Client client = new Client("loadbalance=" + strategy, endpoints)) {
                        client.waitForSet(3);
                        Map<String, Integer> byServer = new TreeMap<>();
                        for (int k = 0; k < 300; k++) {
                            String server = client.call(EchoService.CALL, CallOptions.DEFAULT.withOption(
                                    PolylbGrpc.HASH_KEY, ("user-" + k).getBytes(StandardCharsets.UTF_8)), "");
                            byServer.merge(server, 1, Integer::sum);
                        }
                        List<String> addresses = new ArrayList<>();
                        for (JsonElement row : client.stats().getAsJsonArray("invokers")) {
                            addresses.add(row.getAsJsonObject().get("address").getAsString());
                        }
                        assertEquals(List.of("127.0.0.1:" + port, "127.0.0.2:" + port, "127.0.0.3:" + port),
                                addresses.stream().sorted().toList(), strategy);
                        assertEquals(3, byServer.size(), strategy + ": " + byServer);
                    }
                }
            }
        }
    }

    /**
     * A zone with no UTF-8 form (a lone surrogate) no longer makes the library reject the set,
     * which kept the new good endpoint out with it.
     */
    @Test
    void anEndpointWithALoneSurrogateInItsZoneJoinsTheSet() throws Exception {
        try (Provider p0 = new Provider("p0"); Provider p1 = new Provider("p1"); Provider p2 = new Provider("p2");
                Client client = new Client("loadbalance=roundrobin", List.of(p0.endpoint()))) {
            client.waitForSet(1);
            EquivalentAddressGroup badZone =
                    PolylbGrpc.withInvoker(p2.endpoint(), Invoker.of(0, "").withZone("eu-\uD800"));
            client.resolver.setEndpoints(List.of(p0.endpoint(), p1.endpoint(), badZone));
            client.waitForSet(3);
            Map<String, Integer> byServer = new TreeMap<>();
            for (int i = 0; i < 60; i++) {
                byServer.merge(client.call(""), 1, Integer::sum);
            }
            assertEquals(Map.of("p0", 20, "p1", 20, "p2", 20), byServer);
        }
    }
}
