package io.polylb.spring;

import java.io.ByteArrayOutputStream;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;
import org.springframework.cloud.client.loadbalancer.Request;
import org.springframework.cloud.client.loadbalancer.RequestData;
import org.springframework.cloud.client.loadbalancer.RequestDataContext;
import org.springframework.http.HttpHeaders;
import org.springframework.util.MultiValueMap;

/**
 * Where the hashing strategies' key comes from in a request: {@code header:<Name>},
 * {@code cookie:<name>} or {@code query:<param>}, read from the {@link RequestData} that Spring's
 * clients put in the request's {@link RequestDataContext}.
 */
final class HashKey {
    /** polylb's strategies that pick by the key's hash (docs/strategies.md). */
    static final Set<String> HASHING_STRATEGIES = Set.of("consistenthash", "boundedhash", "maglev", "rendezvous");

    enum Source { HEADER, COOKIE, QUERY }

    private final Source source;
    private final String name;

    private HashKey(Source source, String name) {
        this.source = source;
        this.name = name;
    }

    /** Parses a {@code hash-key} value; {@code property} names it in the error. */
    static HashKey parse(String spec, String property) {
        int colon = spec == null ? -1 : spec.indexOf(':');
        Source source = null;
        if (colon > 0) {
            try {
                source = Source.valueOf(spec.substring(0, colon).trim().toUpperCase(Locale.ROOT));
            } catch (IllegalArgumentException unknown) {
                // reported below with the accepted forms
            }
        }
        String name = colon < 0 ? "" : spec.substring(colon + 1).trim();
        if (source == null || name.isEmpty() || !(source == Source.QUERY ? isParameter(name) : isToken(name))) {
            throw new IllegalArgumentException(property + ": '" + spec + "' is not a hash key source: expected"
                    + " header:<Name>, cookie:<name> or query:<param> (e.g. header:X-User-Id)");
        }
        return new HashKey(source, name);
    }

    /**
     * The key's UTF-8 bytes in this request, or a fresh random key when it has none, so that
     * requests without a key spread as a random pick would (Envoy's hash policy does the same)
     * instead of all hashing the empty key to one instance.
     */
    byte[] of(Request<?> request) {
        String value = valueIn(request);
        if (value == null || value.isEmpty()) {
            byte[] random = new byte[8];
            ThreadLocalRandom.current().nextBytes(random);
            return random;
        }
        return value.getBytes(StandardCharsets.UTF_8);
    }

    /** The key's value in the request, or null (no request data, or no such header, cookie or parameter). */
    String valueIn(Request<?> request) {
        Object context = request == null ? null : request.getContext();
        if (!(context instanceof RequestDataContext dataContext) || dataContext.getClientRequest() == null) {
            return null; // LoadBalancerClient.choose(serviceId) and the like: no request to read
        }
        RequestData data = dataContext.getClientRequest();
        return switch (source) {
            case HEADER -> data.getHeaders() == null ? null : data.getHeaders().getFirst(name); // case-insensitive
            case COOKIE -> cookie(data);
            case QUERY -> query(data.getUrl());
        };
    }

    private String cookie(RequestData data) {
        // The Cookie header first, parsed as RFC 6265 writes it ("a=1; b=2"): RequestData's own
        // cookies are built from it by splitting at '=' only (one header with two cookies gives
        // a cookie "a" valued "1; b"), and Feign's RequestData has none. Then WebClient's
        // .cookie(...) values, which are kept apart from the headers.
        HttpHeaders headers = data.getHeaders();
        List<String> lines = headers == null ? null : headers.get(HttpHeaders.COOKIE);
        if (lines != null) {
            for (String line : lines) {
                for (String pair : line.split(";")) {
                    int eq = pair.indexOf('=');
                    if (eq > 0 && pair.substring(0, eq).trim().equals(name)) {
                        return unquote(pair.substring(eq + 1).trim());
                    }
                }
            }
        }
        MultiValueMap<String, String> cookies = data.getCookies();
        return cookies == null ? null : cookies.getFirst(name);
    }

    private String query(URI url) {
        String raw = url == null ? null : url.getRawQuery();
        if (raw == null) {
            return null;
        }
        for (String pair : raw.split("&")) {
            int eq = pair.indexOf('=');
            String key = eq < 0 ? pair : pair.substring(0, eq);
            // decoded, so that a%20b and a+b (and any other spelling of one value) are one key
            if (decode(key).equals(name)) {
                return eq < 0 ? "" : decode(pair.substring(eq + 1));
            }
        }
        return null;
    }

    /**
     * The form-decoded text ({@code +} a space, {@code %XX} a byte, the bytes read as UTF-8), or
     * {@code s} as written when it is not well-formed: a malformed escape, or escaped bytes that
     * are not UTF-8 (a Latin-1 {@code %E9}). URLDecoder would turn every such byte into U+FFFD,
     * making {@code %E9} and {@code %FC} one key and sending all of them to one instance.
     */
    static String decode(String s) {
        if (s.indexOf('%') < 0 && s.indexOf('+') < 0) {
            return s;
        }
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(s.length());
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '+') {
                bytes.write(' ');
            } else if (c == '%') {
                int hi = i + 2 < s.length() ? Character.digit(s.charAt(i + 1), 16) : -1;
                int lo = hi < 0 ? -1 : Character.digit(s.charAt(i + 2), 16);
                if (lo < 0) {
                    return s;
                }
                bytes.write(hi << 4 | lo);
                i += 2;
            } else {
                int end = Character.isHighSurrogate(c) && i + 1 < s.length() ? i + 2 : i + 1;
                bytes.writeBytes(s.substring(i, end).getBytes(StandardCharsets.UTF_8));
                i = end - 1;
            }
        }
        try {
            return StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(bytes.toByteArray()))
                    .toString();
        } catch (CharacterCodingException notUtf8) {
            return s;
        }
    }

    private static String unquote(String v) {
        return v.length() >= 2 && v.startsWith("\"") && v.endsWith("\"") ? v.substring(1, v.length() - 1) : v;
    }

    /** Header and cookie names are RFC 9110 tokens. */
    private static boolean isToken(String s) {
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c <= ' ' || c >= 127 || "\"(),/:;<=>?@[\\]{}".indexOf(c) >= 0) {
                return false;
            }
        }
        return true;
    }

    /** A query parameter's decoded name: anything a query can carry but the separators and blanks. */
    private static boolean isParameter(String s) {
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isWhitespace(c) || c == '&' || c == '=' || c == '#') {
                return false;
            }
        }
        return true;
    }

    /** The strategy a polylb config string names ({@code loadbalance=}, random by default). */
    static String strategyOf(String config) {
        for (String pair : config.split("&")) {
            int eq = pair.indexOf('=');
            if (eq > 0 && pair.substring(0, eq).trim().equals("loadbalance")) {
                return pair.substring(eq + 1).trim();
            }
        }
        return "random";
    }

    @Override
    public String toString() {
        return source.name().toLowerCase(Locale.ROOT) + ":" + name;
    }
}
