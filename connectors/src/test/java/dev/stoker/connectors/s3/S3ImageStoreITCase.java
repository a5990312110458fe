package dev.stoker.connectors.s3;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowableOfType;

import dev.stoker.connectors.fetch.Media;
import dev.stoker.connectors.fetch.S3ClientSettings;
import dev.stoker.connectors.fetch.S3FetchMetrics;
import dev.stoker.connectors.fetch.S3ImageStore;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.testkit.FaultInjectingBlobStore;
import dev.stoker.testkit.LocalS3Server;
import java.io.IOException;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletionException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.io.TempDir;

/** {@link S3ImageStore} against a real S3 server (S3Proxy on 127.0.0.1) and real dead TCP peers. */
class S3ImageStoreITCase {
    private static final String BUCKET = "images";
    private static final String ROOT = "s3://" + BUCKET + "/data/";

    /** "café.png" in NFD: "cafe" + U+0301 COMBINING ACUTE ACCENT. */
    private static final String NFD_NAME = "cafe\u0301.png";

    @RegisterExtension static final LocalS3Server S3 = new LocalS3Server();

    @TempDir static Path dir;

    @BeforeAll
    static void upload() throws IOException {
        Files.createDirectories(dir.resolve("data/images"));
        Files.createDirectories(dir.resolve("other"));
        Files.write(dir.resolve("data/images/a.jpg"), new byte[] {1, 2, 3});
        Files.write(dir.resolve("data/images/big.jpg"), new byte[1000]);
        Files.write(dir.resolve("other/secret.jpg"), new byte[] {9});
        Files.write(dir.resolve("data/images/" + NFD_NAME), new byte[] {7});
        S3.uploadDirectory(dir, BUCKET, "");
    }

    private static S3FetchMetrics metrics() {
        return new S3FetchMetrics(new UnregisteredMetricsGroup());
    }

    /**
     * Client settings for the test server: its endpoint and keys, path-style, and the job's default
     * limits (stoker.s3.*: 64 connections, 10 s per attempt, 30 s per GET, backoff 100 ms to 5 s,
     * no rate limit, no hedging) but 5 attempts (the job's default: 10), which the tests below
     * change where they need to.
     */
    private static S3ClientSettings.Builder clientSettings() {
        return S3ClientSettings.builder()
                .endpoint(S3.endpoint())
                .region("us-east-1")
                .pathStyleAccess(true)
                .credentials(LocalS3Server.ACCESS_KEY, LocalS3Server.SECRET_KEY)
                .maxConnections(64)
                .maxAttempts(5)
                .readTimeout(Duration.ofSeconds(2))
                .attemptTimeout(Duration.ofSeconds(10))
                .requestTimeout(Duration.ofSeconds(30))
                .retryBaseDelay(Duration.ofMillis(100))
                .retryMaxDelay(Duration.ofSeconds(5))
                .getsPerSecondPerPrefix(0)
                .hedgeAfter(Duration.ZERO);
    }

    private static S3ImageStore store(S3ClientSettings settings, S3FetchMetrics metrics) {
        return new S3ImageStore(100, 2, settings, metrics);
    }

    private static RejectedRecordException rejection(S3ImageStore store, String path) {
        try {
            store.read(ROOT, path).join();
        } catch (CompletionException e) {
            assertThat(e.getCause()).isInstanceOf(RejectedRecordException.class);
            return (RejectedRecordException) e.getCause();
        }
        throw new AssertionError("read of " + path + " succeeded");
    }

    @Test
    void readsObjectsRelativeToTheRootAndCountsThem() {
        S3FetchMetrics metrics = metrics();
        try (S3ImageStore store = store(clientSettings().build(), metrics)) {
            assertThat(store.read(ROOT, "images/a.jpg").join().bytes()).containsExactly(1, 2, 3);
            assertThat(store.read(ROOT, "images/../images/a.jpg").join().bytes())
                    .containsExactly(1, 2, 3);
        }
        assertThat(metrics.bytesFetched()).isEqualTo(6);
        assertThat(metrics.latencyMs().getCount()).isEqualTo(2);
        assertThat(metrics.inFlight()).isZero();
        assertThat(metrics.retries()).isZero();
    }

    @Test
    void aStragglerIsOvertakenByItsHedgedGet() {
        S3.faults()
                .bodyNext(
                        BUCKET,
                        "data/images/a.jpg",
                        FaultInjectingBlobStore.Body.firstByteAfter(60_000));
        S3ClientSettings settings = clientSettings().hedgeAfter(Duration.ofMillis(200)).build();
        S3FetchMetrics metrics = metrics();
        long start = System.nanoTime();
        try (S3ImageStore store = store(settings, metrics)) {
            assertThat(store.read(ROOT, "images/a.jpg").join().bytes()).containsExactly(1, 2, 3);
        } finally {
            S3.faults().clearAnswers(); // ends the stalled first GET on the server
        }
        assertThat(Duration.ofNanos(System.nanoTime() - start))
                .as("the hedge answers; the stalled GET would take 60 s")
                .isLessThan(Duration.ofSeconds(30));
        assertThat(metrics.hedgedGets()).isEqualTo(1);
    }

    /**
     * A server that leaves a request unanswered (no first byte for 60 s) costs its GET the read
     * timeout, 0.5 s here, not the attempt timeout (10 s): the attempt is abandoned and retried,
     * and the retry is answered.
     */
    @Test
    void anUnansweredAttemptIsRetriedAfterTheReadTimeout() {
        S3.faults()
                .bodyNext(
                        BUCKET,
                        "data/images/a.jpg",
                        FaultInjectingBlobStore.Body.firstByteAfter(60_000));
        S3ClientSettings settings = clientSettings().readTimeout(Duration.ofMillis(500)).build();
        S3FetchMetrics metrics = metrics();
        long start = System.nanoTime();
        try (S3ImageStore store = store(settings, metrics)) {
            assertThat(store.read(ROOT, "images/a.jpg").join().bytes()).containsExactly(1, 2, 3);
        } finally {
            S3.faults().clearAnswers(); // ends the unanswered first GET on the server
        }
        assertThat(Duration.ofNanos(System.nanoTime() - start))
                .as("the read timeout (0.5 s), not the attempt timeout (10 s)")
                .isLessThan(Duration.ofSeconds(5));
        assertThat(metrics.retries()).isEqualTo(1);
    }

    /**
     * When every attempt goes unanswered, the GET is a FETCH_TIMEOUT (not a FETCH_FAILED) once its
     * attempts are spent, and the message names the read timeout and its option.
     */
    @Test
    void aGetWhoseEveryAttemptGoesUnansweredIsAFetchTimeout() {
        S3.faults()
                .bodyAlways(
                        BUCKET,
                        "data/images/a.jpg",
                        FaultInjectingBlobStore.Body.firstByteAfter(120_000));
        S3ClientSettings settings =
                clientSettings()
                        .maxAttempts(2)
                        .readTimeout(Duration.ofMillis(300))
                        .retryBaseDelay(Duration.ofMillis(10))
                        .build();
        S3FetchMetrics metrics = metrics();
        long start = System.nanoTime();
        try (S3ImageStore store = store(settings, metrics)) {
            RejectedRecordException e = rejection(store, "images/a.jpg");
            assertThat(e.reason()).as(e.getMessage()).isEqualTo(RejectReason.FETCH_TIMEOUT);
            assertThat(e.getMessage())
                    .contains("s3://images/data/images/a.jpg")
                    .contains("after 2 attempt(s)")
                    .contains("read timeout 0.3 s")
                    .contains("stoker.s3.read-timeout");
        } finally {
            S3.faults().clearAnswers();
        }
        assertThat(Duration.ofNanos(System.nanoTime() - start)).isLessThan(Duration.ofSeconds(5));
        assertThat(metrics.retries()).isEqualTo(1);
        assertThat(metrics.failures(RejectReason.FETCH_TIMEOUT)).isEqualTo(1);
    }

    @Test
    void missingObjectIsNotFoundNamingTheKeyWithoutRetry() {
        S3FetchMetrics metrics = metrics();
        try (S3ImageStore store = store(clientSettings().build(), metrics)) {
            RejectedRecordException e = rejection(store, "images/none.png");
            assertThat(e.reason()).isEqualTo(RejectReason.IMAGE_NOT_FOUND);
            assertThat(e.getMessage()).contains("s3://images/data/images/none.png").contains("404");
        }
        assertThat(metrics.retries()).isZero();
        assertThat(metrics.failures(RejectReason.IMAGE_NOT_FOUND)).isEqualTo(1);
    }

    @Test
    void forbiddenIsAFetchFailureWithoutRetryAndWithoutTheSecret() {
        S3ClientSettings wrong =
                clientSettings()
                        .credentials(LocalS3Server.ACCESS_KEY, "not-the-secret-0123456789")
                        .build();
        S3FetchMetrics metrics = metrics();
        try (S3ImageStore store = store(wrong, metrics)) {
            RejectedRecordException e = rejection(store, "images/a.jpg");
            assertThat(e.reason()).isEqualTo(RejectReason.FETCH_FAILED);
            assertThat(e.getMessage()).contains("s3://images/data/images/a.jpg").contains("403");
            assertThat(e.toString()).doesNotContain(wrong.secretKey());
        }
        assertThat(metrics.retries()).isZero();
        assertThat(wrong.toString()).doesNotContain(wrong.secretKey()).contains(S3.endpoint());
    }

    @Test
    void keysOutsideTheImageRootAreRejectedBeforeAnyRequest() {
        S3FetchMetrics metrics = metrics();
        try (S3ImageStore store = store(clientSettings().build(), metrics)) {
            for (String path :
                    List.of(
                            "../other/secret.jpg",
                            "images/../../other/secret.jpg",
                            "/other/secret.jpg",
                            "//images/other/secret.jpg",
                            "s3://images/other/secret.jpg")) {
                assertThat(rejection(store, path).reason())
                        .as(path)
                        .isEqualTo(RejectReason.UNSAFE_PATH);
            }
        }
        assertThat(metrics.latencyMs().getCount()).isZero();
    }

    /**
     * Keys are the paths as written: the NFD key is found by its NFD spelling; the NFC spelling
     * ("caf" + U+00E9) is another key, a 404 whose message names the key and the spelling that
     * exists.
     */
    @Test
    void keysAreMatchedAsWrittenWithoutUnicodeNormalization() {
        String nfc = "images/caf\u00e9.png";
        assertThat(
                        java.text.Normalizer.normalize(
                                "images/" + NFD_NAME, java.text.Normalizer.Form.NFC))
                .isEqualTo(nfc);
        try (S3ImageStore store = store(clientSettings().build(), metrics())) {
            assertThat(store.read(ROOT, "images/" + NFD_NAME).join().bytes()).containsExactly(7);
            RejectedRecordException e = rejection(store, nfc);
            assertThat(e.reason()).isEqualTo(RejectReason.IMAGE_NOT_FOUND);
            assertThat(e.getMessage())
                    .contains("s3://images/data/" + nfc, "404")
                    .contains("'images/" + NFD_NAME + "'", "without Unicode normalization");
            assertThat(rejection(store, "images/na\u00efve.png").getMessage())
                    .doesNotContain("normalization");
        }
    }

    @Test
    void oversizedObjectIsRejectedFromItsTotalSize() {
        try (S3ImageStore store = store(clientSettings().build(), metrics())) {
            RejectedRecordException e = rejection(store, "images/big.jpg");
            assertThat(e.reason()).isEqualTo(RejectReason.IMAGE_TOO_LARGE);
            assertThat(e.getMessage()).contains("1000 bytes");
        }
    }

    /** A video is fetched like an image, with its own limit (2 bytes here) and reasons. */
    @Test
    void videosHaveTheirOwnLimitAndReasons() {
        S3FetchMetrics metrics = metrics();
        try (S3ImageStore store = store(clientSettings().build(), metrics)) {
            assertThat(store.read(ROOT, "images/a.jpg").join().bytes()).hasSize(3);
            CompletionException tooLarge =
                    catchThrowableOfType(
                            CompletionException.class,
                            () -> store.read(ROOT, "images/a.jpg", Media.VIDEO).join());
            assertThat(tooLarge.getCause())
                    .isInstanceOfSatisfying(
                            RejectedRecordException.class,
                            e ->
                                    assertThat(e.reason())
                                            .isEqualTo(RejectReason.VIDEO_FILE_TOO_LARGE))
                    .hasMessageContaining("s3://images/data/images/a.jpg")
                    .hasMessageContaining("3 bytes, above the video limit of 2");
            CompletionException missing =
                    catchThrowableOfType(
                            CompletionException.class,
                            () -> store.read(ROOT, "images/none.mp4", Media.VIDEO).join());
            assertThat(missing.getCause())
                    .isInstanceOfSatisfying(
                            RejectedRecordException.class,
                            e -> assertThat(e.reason()).isEqualTo(RejectReason.VIDEO_NOT_FOUND))
                    .hasMessageContaining("404");
        }
        assertThat(metrics.failures(RejectReason.VIDEO_FILE_TOO_LARGE)).isEqualTo(1);
        assertThat(metrics.failures(RejectReason.VIDEO_NOT_FOUND)).isEqualTo(1);
    }

    @Test
    void throttlingAndServerErrorsAreRetriedUntilTheObjectArrives() {
        S3.faults().answerNext(BUCKET, "data/images/a.jpg", 503, 500, 503);
        S3ClientSettings settings = clientSettings().retryBaseDelay(Duration.ofMillis(10)).build();
        S3FetchMetrics metrics = metrics();
        try (S3ImageStore store = store(settings, metrics)) {
            assertThat(store.read(ROOT, "images/a.jpg").join().bytes()).containsExactly(1, 2, 3);
        }
        assertThat(metrics.retries()).isEqualTo(3);
        assertThat(metrics.failures(RejectReason.FETCH_FAILED)).isZero();
    }

    @Test
    void endlessSlowDownIsAFetchFailureAfterTheAttemptBudget() {
        S3.faults().answerNext(BUCKET, "data/images/a.jpg", 503, 503, 503, 503);
        S3ClientSettings settings =
                clientSettings().maxAttempts(4).retryBaseDelay(Duration.ofMillis(10)).build();
        S3FetchMetrics metrics = metrics();
        try (S3ImageStore store = store(settings, metrics)) {
            RejectedRecordException e = rejection(store, "images/a.jpg");
            assertThat(e.reason()).isEqualTo(RejectReason.FETCH_FAILED);
            assertThat(e.getMessage())
                    .contains("s3://images/data/images/a.jpg")
                    .contains("503")
                    .contains("after 4 attempt(s)");
        }
        assertThat(metrics.retries()).isEqualTo(3);
    }

    @Test
    void connectionFailuresAreRetriedWithBackoffUpToTheAttemptLimit() throws IOException {
        int closedPort;
        try (ServerSocket s = new ServerSocket(0)) {
            closedPort = s.getLocalPort();
        }
        S3ClientSettings settings =
                clientSettings()
                        .endpoint("http://127.0.0.1:" + closedPort)
                        .maxAttempts(3)
                        .retryBaseDelay(Duration.ofMillis(10))
                        .build();
        S3FetchMetrics metrics = metrics();
        try (S3ImageStore store = store(settings, metrics)) {
            RejectedRecordException e = rejection(store, "images/a.jpg");
            assertThat(e.reason()).isEqualTo(RejectReason.FETCH_FAILED);
            assertThat(e.getMessage())
                    .contains("s3://images/data/images/a.jpg")
                    .contains("after 3 attempt(s)");
        }
        assertThat(metrics.retries()).isEqualTo(2);
    }

    @Test
    void silentServerTimesOutEachAttemptThenTheRecordIsAFetchTimeout() throws Exception {
        List<Socket> accepted = new ArrayList<>();
        try (ServerSocket silent = new ServerSocket(0)) {
            Thread acceptor =
                    new Thread(
                            () -> {
                                try {
                                    while (true) {
                                        accepted.add(silent.accept()); // never answers
                                    }
                                } catch (IOException closed) {
                                    // test over
                                }
                            });
            acceptor.setDaemon(true);
            acceptor.start();
            S3ClientSettings settings =
                    clientSettings()
                            .endpoint("http://127.0.0.1:" + silent.getLocalPort())
                            .maxAttempts(3)
                            .attemptTimeout(Duration.ofMillis(300))
                            .retryBaseDelay(Duration.ofMillis(10))
                            .build();
            S3FetchMetrics metrics = metrics();
            long start = System.nanoTime();
            int attempts;
            try (S3ImageStore store = store(settings, metrics)) {
                RejectedRecordException e = rejection(store, "images/a.jpg");
                assertThat(e.reason()).as(e.getMessage()).isEqualTo(RejectReason.FETCH_TIMEOUT);
                // Usually 3 attempts; the SDK sometimes stops after 2, when the last attempt's
                // timeout surfaces wrapped in an SdkClientException (seen here, loaded or not).
                // The message names the attempts actually sent, how long they took and the limits.
                Matcher m =
                        Pattern.compile("after ([23]) attempt\\(s\\) in \\d+\\.\\d s")
                                .matcher(e.getMessage());
                assertThat(m.find()).as(e.getMessage()).isTrue();
                assertThat(e.getMessage())
                        .contains("s3://images/data/images/a.jpg")
                        .contains("attempt timeout 0.3 s")
                        .contains("stoker.s3.attempt-timeout");
                attempts = Integer.parseInt(m.group(1));
            }
            assertThat(Duration.ofNanos(System.nanoTime() - start))
                    .isLessThan(Duration.ofSeconds(5));
            assertThat(metrics.retries()).isEqualTo(attempts - 1);
        } finally {
            for (Socket s : accepted) {
                s.close();
            }
        }
    }

    /**
     * GETs beyond the client's connections wait for one before their timeouts start: with 2
     * connections, 10 GETs of 0.5 s each take 5 waves (at least 2.5 s), and every one succeeds
     * although the last waves wait 2 s, which is the attempt and request timeout (had the wait
     * counted, as it did in the SDK's own connection pool, they would have timed out). While they
     * wait, their progress and the gauge say so.
     */
    @Test
    void getsBeyondTheConnectionsWaitForOneBeforeTheirTimeoutsStart() {
        S3.faults()
                .bodyAlways(
                        BUCKET,
                        "data/images/a.jpg",
                        FaultInjectingBlobStore.Body.firstByteAfter(500));
        S3ClientSettings settings =
                clientSettings()
                        .maxConnections(2)
                        .maxAttempts(1)
                        .attemptTimeout(Duration.ofSeconds(2))
                        .requestTimeout(Duration.ofSeconds(2))
                        .build();
        S3FetchMetrics metrics = metrics();
        long start = System.nanoTime();
        try (S3ImageStore store = store(settings, metrics)) {
            List<S3ImageStore.Get> gets = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                gets.add(store.read(ROOT, "images/a.jpg"));
            }
            assertThat(metrics.getsWaitingForConnection()).isEqualTo(8);
            assertThat(gets.get(9).progress())
                    .matches("waited \\d+\\.\\d s for a free HTTP connection \\(all 2 in use.*");
            assertThat(gets.get(0).progress())
                    .matches("\\d attempt\\(s\\), \\d+\\.\\d s since the first");
            for (var get : gets) {
                assertThat(get.join().bytes()).containsExactly(1, 2, 3);
            }
            assertThat(metrics.getsWaitingForConnection()).isZero();
        } finally {
            S3.faults().clearAnswers();
        }
        assertThat(Duration.ofNanos(System.nanoTime() - start))
                .as("at most 2 GETs on the wire at once: 5 waves of 0.5 s")
                .isGreaterThanOrEqualTo(Duration.ofMillis(2500));
    }

    /**
     * The async-timeout case's promise that a timed-out GET gives its connection back: with as many
     * stalled GETs as the client has connections, every one becomes a FETCH_TIMEOUT, and the GETs
     * after them still get a connection at once (a leaked connection would make them wait for the
     * acquisition timeout and fail).
     */
    @Test
    void timedOutGetsReleaseTheirConnections() {
        int connections = 4;
        S3.faults()
                .bodyAlways(
                        BUCKET,
                        "data/images/big.jpg",
                        FaultInjectingBlobStore.Body.firstByteAfter(120_000));
        S3ClientSettings settings =
                clientSettings()
                        .maxConnections(connections)
                        .maxAttempts(1)
                        .attemptTimeout(Duration.ofMillis(500))
                        .requestTimeout(Duration.ofSeconds(1))
                        .build();
        S3FetchMetrics metrics = metrics();
        try (S3ImageStore store = store(settings, metrics)) {
            for (int round = 0; round < 3; round++) {
                List<S3ImageStore.Get> stalled = new ArrayList<>();
                for (int i = 0; i < connections; i++) {
                    stalled.add(store.read(ROOT, "images/big.jpg"));
                }
                for (var get : stalled) {
                    try {
                        get.join();
                        throw new AssertionError("a stalled GET completed");
                    } catch (CompletionException e) {
                        assertThat(((RejectedRecordException) e.getCause()).reason())
                                .isEqualTo(RejectReason.FETCH_TIMEOUT);
                    }
                }
                long start = System.nanoTime();
                List<S3ImageStore.Get> next = new ArrayList<>();
                for (int i = 0; i < connections; i++) {
                    next.add(store.read(ROOT, "images/a.jpg"));
                }
                for (var get : next) {
                    assertThat(get.join().bytes()).containsExactly(1, 2, 3);
                }
                assertThat(Duration.ofNanos(System.nanoTime() - start))
                        .as("round %d: GETs after the timeouts get a connection at once", round)
                        .isLessThan(settings.requestTimeout());
            }
        } finally {
            S3.faults().clearAnswers();
        }
        assertThat(metrics.failures(RejectReason.FETCH_TIMEOUT)).isEqualTo(3L * connections);
        assertThat(metrics.inFlight()).isZero();
    }
}
