package io.polylb.spring;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashMap;
import org.junit.jupiter.api.Test;
import org.springframework.cloud.client.loadbalancer.DefaultRequest;
import org.springframework.cloud.client.loadbalancer.RequestData;
import org.springframework.cloud.client.loadbalancer.RequestDataContext;
import org.springframework.http.HttpHeaders;
import org.springframework.http.HttpMethod;

/** HashKey's reading of a request's key, without a Boot context. */
class HashKeyTest {
    private static final HashKey QUERY = HashKey.parse("query:k", "test");

    private static byte[] keyOf(String url) {
        return QUERY.of(new DefaultRequest<>(new RequestDataContext(
                new RequestData(HttpMethod.GET, URI.create(url), new HttpHeaders(), null, new HashMap<>()))));
    }

    @Test
    void queryValuesThatAreNotUtf8StayDistinctKeys() {
        // Latin-1 escapes (é, ü): URLDecoder made both U+FFFD, one key for every such value
        byte[] e = keyOf("http://s/?k=%E9");
        byte[] u = keyOf("http://s/?k=%FC");
        assertFalse(Arrays.equals(e, u), "%E9 and %FC hash as one key");
        assertArrayEquals(e, keyOf("http://s/?k=%E9"), "a key is stable");
    }

    @Test
    void queryValuesDecodeAsBefore() {
        assertArrayEquals("a b".getBytes(StandardCharsets.UTF_8), keyOf("http://s/?k=a+b"));
        assertArrayEquals("a b".getBytes(StandardCharsets.UTF_8), keyOf("http://s/?k=a%20b"));
        assertArrayEquals("a+b".getBytes(StandardCharsets.UTF_8), keyOf("http://s/?k=a%2Bb"));
        assertArrayEquals("é€𝄞".getBytes(StandardCharsets.UTF_8), keyOf("http://s/?x=1&k=%C3%A9%E2%82%AC%F0%9D%84%9E#f"));
        assertArrayEquals("é€".getBytes(StandardCharsets.UTF_8), keyOf("http://s/?k=%C3%A9€"));
        assertEquals("100%", HashKey.decode("100%"));
        assertEquals("%zz", HashKey.decode("%zz"));
    }
}
