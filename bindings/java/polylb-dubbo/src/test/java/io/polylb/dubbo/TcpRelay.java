package io.polylb.dubbo;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A TCP relay on loopback between a consumer and a provider: what it accepts on {@link #port()}
 * it forwards, byte for byte, to the provider's port, and back. {@link #kill} stands for the
 * provider's host going away mid-call: it stops accepting and closes every connection at once,
 * with a TCP reset (SO_LINGER 0) or an orderly close (FIN), both ways, so the consumer sees its
 * connection to the provider end under its calls.
 */
final class TcpRelay implements AutoCloseable {
    private final ServerSocket server;
    private final int targetPort;
    private final List<Socket> sockets = new CopyOnWriteArrayList<>();
    private volatile boolean killed;

    /** Listening on a free loopback port, forwarding to 127.0.0.1:{@code targetPort}. */
    TcpRelay(int targetPort) throws IOException {
        this.targetPort = targetPort;
        server = new ServerSocket(0, 50, InetAddress.getByName("127.0.0.1"));
        Thread acceptor = new Thread(this::accept, "tcp-relay-accept-" + server.getLocalPort());
        acceptor.setDaemon(true);
        acceptor.start();
    }

    /** The port the consumer connects to. */
    int port() {
        return server.getLocalPort();
    }

    /** Connections relayed so far (a consumer's one, typically). */
    int connections() {
        return sockets.size() / 2;
    }

    private void accept() {
        while (!killed) {
            try {
                Socket client = server.accept();
                Socket provider = new Socket();
                provider.connect(new InetSocketAddress("127.0.0.1", targetPort), 5000);
                client.setTcpNoDelay(true);
                provider.setTcpNoDelay(true);
                sockets.add(client);
                sockets.add(provider);
                if (killed) {
                    closeAll(true);
                    return;
                }
                pump(client, provider);
                pump(provider, client);
            } catch (IOException e) {
                return; // killed, or the provider is gone
            }
        }
    }

    private void pump(Socket from, Socket to) {
        Thread t = new Thread(() -> {
            byte[] buffer = new byte[16 * 1024];
            try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream()) {
                for (int n; (n = in.read(buffer)) >= 0;) {
                    out.write(buffer, 0, n);
                    out.flush();
                }
            } catch (IOException ignored) {
                // the other side or kill() closed it
            } finally {
                close(from, killed);
                close(to, killed);
            }
        }, "tcp-relay-" + from.getLocalPort() + "-" + from.getPort());
        t.setDaemon(true);
        t.start();
    }

    /**
     * Stops accepting and closes every relayed connection: with {@code reset}, abortively (a TCP
     * RST to both ends), else with an orderly close.
     */
    void kill(boolean reset) {
        killed = true;
        try {
            server.close();
        } catch (IOException ignored) {
            // best effort
        }
        closeAll(reset);
    }

    private void closeAll(boolean reset) {
        for (Socket socket : sockets) {
            close(socket, reset);
        }
    }

    private static void close(Socket socket, boolean reset) {
        try {
            if (reset && !socket.isClosed()) {
                socket.setSoLinger(true, 0);
            }
            socket.close();
        } catch (IOException ignored) {
            // closed already
        }
    }

    @Override
    public void close() {
        kill(true);
    }
}
