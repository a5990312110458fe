package dev.stoker.testkit;

import java.io.IOException;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.stream.Stream;
import org.gaul.s3proxy.AuthenticationType;
import org.gaul.s3proxy.S3Proxy;
import org.jclouds.ContextBuilder;
import org.jclouds.blobstore.BlobStoreContext;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.core.async.AsyncRequestBody;
import software.amazon.awssdk.core.checksums.RequestChecksumCalculation;
import software.amazon.awssdk.core.checksums.ResponseChecksumValidation;
import software.amazon.awssdk.http.nio.netty.NettyNioAsyncHttpClient;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.s3.S3AsyncClient;

/**
 * A real S3-compatible server on 127.0.0.1 (or a given address) for tests and the demo: S3Proxy
 * (filesystem backend in a temporary directory, AWS V2/V4 signatures) on a free port, in this JVM.
 *
 * <p>As a JUnit 5 extension ({@code @RegisterExtension static final LocalS3Server S3 = new
 * LocalS3Server();}) it starts before the class's tests and stops (deleting its data) after them.
 * As a program ({@code ./stoker demo} and the benchmarks start it so, from this module's jar and
 * {@code testkit/target/runtime-classpath.txt}) it serves until killed or until its standard input
 * closes:
 *
 * <pre>
 * java -cp ... dev.stoker.testkit.LocalS3Server [--host ADDRESS] --port 9000 [--basedir DIR] [--upload DIR s3://bucket/prefix]
 *     [--get-latency-ms 50 [--get-jitter-ms 20] [--get-latency-keys REGEX]]
 *     [--get-straggler-rate 0.1 --get-straggler-ms 60000] [--exit-on-stdin-eof]
 * </pre>
 *
 * (host: the address it listens on and names in its endpoint, default 127.0.0.1, e.g. a simulated
 * node's address for the multi-node tests; port 0: a free one; the latency options add time to
 * first byte to every GET of a key matching REGEX, default all keys, uniform in {@code latency +-
 * jitter} ms, as {@link FaultInjectingBlobStore} does for tests; the straggler options add {@code
 * straggler-ms} more to that share of those GETs, drawn per GET, a seeded draw: a server that
 * leaves some requests unanswered for that long) and prints {@code endpoint=http://HOST:PORT} on
 * standard output once it serves (after any upload), the last line it prints. Objects are always
 * put through the S3 API, never copied into the backing directory.
 */
public final class LocalS3Server implements BeforeAllCallback, AfterAllCallback, AutoCloseable {
    /** Access key id the server accepts. Test credentials, not a secret. */
    public static final String ACCESS_KEY = "stoker-local";

    /** Secret key the server accepts. Test credentials, not a secret. */
    public static final String SECRET_KEY = "stoker-local-secret";

    private static final Logger LOG = LoggerFactory.getLogger(LocalS3Server.class);

    private final String host;
    private final int port;
    private Path basedir;
    private boolean deleteBasedir;
    private BlobStoreContext context;
    private FaultInjectingBlobStore faults;
    private S3Proxy proxy;
    private S3AsyncClient client;

    /** A server on a free port with a temporary backing directory. */
    public LocalS3Server() {
        this(0, null);
    }

    /**
     * @param port TCP port on 127.0.0.1, 0 for a free one
     * @param basedir backing directory, null for a temporary one deleted on close
     */
    public LocalS3Server(int port, Path basedir) {
        this("127.0.0.1", port, basedir);
    }

    /**
     * @param host IPv4 address to listen on (and to name in {@link #endpoint()})
     * @param port TCP port on {@code host}, 0 for a free one
     * @param basedir backing directory, null for a temporary one deleted on close
     */
    public LocalS3Server(String host, int port, Path basedir) {
        this.host = host;
        this.port = port;
        this.basedir = basedir;
    }

    /** Starts the server and waits until it accepts requests. */
    public LocalS3Server start() throws Exception {
        if (basedir == null) {
            basedir = Files.createTempDirectory("stoker-s3proxy-");
            deleteBasedir = true;
        }
        Properties props = new Properties();
        props.setProperty("jclouds.filesystem.basedir", basedir.toAbsolutePath().toString());
        context =
                ContextBuilder.newBuilder("filesystem-nio2")
                        .credentials(ACCESS_KEY, SECRET_KEY)
                        .overrides(props)
                        .build(BlobStoreContext.class);
        faults = new FaultInjectingBlobStore(context.getBlobStore());
        proxy =
                S3Proxy.builder()
                        .blobStore(faults)
                        .endpoint(URI.create("http://" + host + ":" + port))
                        .awsAuthentication(AuthenticationType.AWS_V2_OR_V4, ACCESS_KEY, SECRET_KEY)
                        .build();
        proxy.start();
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (!"STARTED".equals(proxy.getState())) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("S3Proxy did not start: " + proxy.getState());
            }
            Thread.sleep(10);
        }
        LOG.debug("S3Proxy serving {} from {}", endpoint(), basedir);
        return this;
    }

    /** Latency and errors to inject into GETs (none unless set). */
    public FaultInjectingBlobStore faults() {
        return faults;
    }

    /** {@code http://HOST:PORT} (host 127.0.0.1 unless given). */
    public String endpoint() {
        return "http://" + host + ":" + proxy.getPort();
    }

    /** The Flink configuration keys for its S3 filesystem plugins (and Stoker's fallbacks). */
    public Map<String, String> flinkS3Options() {
        Map<String, String> m = new LinkedHashMap<>();
        m.put("s3.endpoint", endpoint());
        m.put("s3.path.style.access", "true");
        m.put("s3.access-key", ACCESS_KEY);
        m.put("s3.secret-key", SECRET_KEY);
        return m;
    }

    /** A client for setting up and changing test data (uploads, deletes): path-style, its keys. */
    public synchronized S3AsyncClient client() {
        if (client == null) {
            client =
                    S3AsyncClient.builder()
                            .endpointOverride(URI.create(endpoint()))
                            .region(Region.US_EAST_1)
                            .forcePathStyle(true)
                            // S3Proxy checks the classic Content-MD5 / SHA-256 payload signing,
                            // not the SDK's default CRC trailers
                            .requestChecksumCalculation(RequestChecksumCalculation.WHEN_REQUIRED)
                            .responseChecksumValidation(ResponseChecksumValidation.WHEN_REQUIRED)
                            .httpClientBuilder(NettyNioAsyncHttpClient.builder())
                            .credentialsProvider(
                                    StaticCredentialsProvider.create(
                                            AwsBasicCredentials.create(ACCESS_KEY, SECRET_KEY)))
                            .build();
        }
        return client;
    }

    public void createBucket(String bucket) {
        client().createBucket(b -> b.bucket(bucket)).join();
    }

    /**
     * Uploads every regular file under {@code dir} to {@code bucket} as {@code prefix/<relative
     * path>}, creating the bucket if needed.
     *
     * @return the number of objects uploaded
     */
    public int uploadDirectory(Path dir, String bucket, String prefix) throws IOException {
        if (!client().listBuckets().join().buckets().stream()
                .anyMatch(b -> b.name().equals(bucket))) {
            createBucket(bucket);
        }
        String p = prefix.isEmpty() || prefix.endsWith("/") ? prefix : prefix + "/";
        List<CompletableFuture<?>> puts = new ArrayList<>();
        try (Stream<Path> files = Files.walk(dir)) {
            for (Path f : files.filter(Files::isRegularFile).sorted().toList()) {
                String key = p + dir.relativize(f).toString().replace('\\', '/');
                puts.add(
                        client().putObject(
                                        r -> r.bucket(bucket).key(key),
                                        AsyncRequestBody.fromFile(f)));
                if (puts.size() >= 32) {
                    CompletableFuture.allOf(puts.toArray(new CompletableFuture[0])).join();
                    puts.clear();
                }
            }
        }
        CompletableFuture.allOf(puts.toArray(new CompletableFuture[0])).join();
        try (Stream<Path> files = Files.walk(dir)) {
            return (int) files.filter(Files::isRegularFile).count();
        }
    }

    public void deleteObject(String bucket, String key) {
        client().deleteObject(r -> r.bucket(bucket).key(key)).join();
    }

    @Override
    public void close() throws Exception {
        if (client != null) {
            client.close();
            client = null;
        }
        if (proxy != null) {
            proxy.stop();
            proxy = null;
        }
        if (context != null) {
            context.close();
            context = null;
        }
        if (deleteBasedir && basedir != null) {
            try (Stream<Path> walk = Files.walk(basedir)) {
                walk.sorted(Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
            }
            basedir = null;
        }
    }

    @Override
    public void beforeAll(ExtensionContext extensionContext) throws Exception {
        start();
    }

    @Override
    public void afterAll(ExtensionContext extensionContext) throws Exception {
        close();
    }

    /**
     * Serves until killed (or until its standard input closes); see the class comment for the
     * arguments. Exits with status 1, the error on standard error, if it cannot start or upload.
     */
    public static void main(String[] args) throws Exception {
        try {
            serve(args);
        } catch (Exception e) {
            // the server's non-daemon threads would keep the JVM alive after a failed upload
            e.printStackTrace();
            System.exit(1);
        }
    }

    private static void serve(String[] args) throws Exception {
        String host = "127.0.0.1";
        int port = 9000;
        Path basedir = null;
        Path upload = null;
        String target = null;
        long latencyMs = 0;
        long jitterMs = 0;
        String latencyKeys = ".*";
        double stragglerRate = 0;
        long stragglerMs = 0;
        boolean exitOnStdinEof = false;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--host" -> host = args[++i];
                case "--port" -> port = Integer.parseInt(args[++i]);
                case "--basedir" -> basedir = Path.of(args[++i]);
                case "--upload" -> {
                    upload = Path.of(args[++i]);
                    target = args[++i];
                }
                case "--get-latency-ms" -> latencyMs = Long.parseLong(args[++i]);
                case "--get-jitter-ms" -> jitterMs = Long.parseLong(args[++i]);
                case "--get-latency-keys" -> latencyKeys = args[++i];
                case "--get-straggler-rate" -> stragglerRate = Double.parseDouble(args[++i]);
                case "--get-straggler-ms" -> stragglerMs = Long.parseLong(args[++i]);
                case "--exit-on-stdin-eof" -> exitOnStdinEof = true;
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (basedir != null) {
            Files.createDirectories(basedir);
        }
        LocalS3Server server = new LocalS3Server(host, port, basedir).start();
        Runtime.getRuntime()
                .addShutdownHook(
                        new Thread(
                                () -> {
                                    try {
                                        server.close();
                                    } catch (Exception e) {
                                        // exiting anyway
                                    }
                                }));
        if (upload != null) {
            URI uri = URI.create(target);
            String prefix = uri.getPath() == null ? "" : uri.getPath().replaceFirst("^/", "");
            int n = server.uploadDirectory(upload, uri.getAuthority(), prefix);
            System.out.println("uploaded=" + n + " " + target);
        }
        // after the upload, so only the readers' GETs wait
        server.faults()
                .setFaults(
                        new FaultInjectingBlobStore.Faults(
                                latencyMs, jitterMs, 0, latencyKeys, stragglerRate, stragglerMs));
        System.out.println("endpoint=" + server.endpoint());
        System.out.flush();
        if (exitOnStdinEof) {
            // the process that started this one holds the other end: when it dies, so does this
            while (System.in.read() >= 0) {
                // discard
            }
            System.exit(0);
        }
        Thread.currentThread().join();
    }
}
